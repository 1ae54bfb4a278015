//! Status pages: `stub_status` (nginx's format, for the tools that read it) and
//! `metrics` (Prometheus text format). Both read the per-worker figures of
//! `server::stats`, added up at read time; reading takes one short lock on the
//! list of workers, never anything a request being served needs.
//!
//! Other modules add metric families through their `metrics` hook, which
//! writes into the [`Exposition`] of each scrape (the upstream module's
//! peer health, attempts and latency figures, per-worker
//! [`crate::server::stats::Histogram`]s added up at read time).

pub mod conf;

use crate::core::message::head::Method;
use crate::core::message::response::{Body, Response, Value};
use crate::core::metrics::{Exposition, HistogramSnapshot};
use crate::core::module::Module;
use crate::core::module::VarDef;
use crate::core::request::{BoxFuture, Content, Outcome, Request, RequestBody};
use crate::core::vars::push_u64;
use crate::server::stats::{self, Snapshot};

/// The `stub_status` handler.
#[derive(Debug)]
pub struct StubStatus;

/// The `metrics` handler.
#[derive(Debug)]
pub struct Metrics;

impl Content for StubStatus {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        _body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        let r = answer(req, "text/plain", stub_status_text);
        Box::pin(std::future::ready(Outcome::Respond(r)))
    }
}

impl Content for Metrics {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        _body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        let r = answer(
            req,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics_text,
        );
        Box::pin(std::future::ready(Outcome::Respond(r)))
    }
}

/// GET and HEAD get the page; other methods 405.
fn answer(req: &Request<'_>, content_type: &'static str, text: fn() -> String) -> Response {
    if !matches!(req.method(), Method::Get | Method::Head) {
        return req.error(405);
    }
    let mut r = Response::new(200);
    r.content_type = Some(Value::Static(content_type));
    r.headers.push(("Cache-Control", Value::Static("no-cache")));
    r.body = Body::Bytes(text().into());
    r
}

/// The page in the layout of nginx's stub_status.
pub fn stub_status_text() -> String {
    let s = stats::total();
    format!(
        "Active connections: {} \nserver accepts handled requests\n {} {} {} \nReading: {} Writing: {} Waiting: {} \n",
        s.active,
        s.accepted,
        s.handled,
        s.requests,
        s.reading,
        s.writing,
        s.waiting()
    )
}

/// Every worker's figures, merged by worker number (a number reused after the
/// worker count went down and up again keeps adding to the same series).
fn per_worker() -> Vec<(usize, Snapshot)> {
    let mut out: Vec<(usize, Snapshot)> = Vec::new();
    for w in stats::workers() {
        let i = match out.iter().position(|(n, _)| *n == w.worker) {
            Some(i) => i,
            None => {
                out.push((w.worker, Snapshot::default()));
                out.len() - 1
            }
        };
        w.add_to(&mut out[i].1);
    }
    out.sort_by_key(|(n, _)| *n);
    out
}

/// The whole /metrics page.
pub fn metrics_text() -> String {
    use std::sync::atomic::Ordering::Relaxed;
    let mut e = Exposition::default();
    let workers = per_worker();
    let names: Vec<String> = workers.iter().map(|(n, _)| n.to_string()).collect();

    e.family(
        "vireo_build_info",
        "gauge",
        "Version of the running binary.",
    );
    e.sample(
        "vireo_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    e.family(
        "vireo_start_time_seconds",
        "gauge",
        "Start of this process, in seconds since the Unix epoch.",
    );
    e.sample(
        "vireo_start_time_seconds",
        &[],
        stats::STARTED.load(Relaxed),
    );
    e.family(
        "vireo_workers",
        "gauge",
        "Worker threads accepting connections.",
    );
    e.sample("vireo_workers", &[], stats::WORKERS.load(Relaxed));
    e.family(
        "vireo_config_reloads_total",
        "counter",
        "Configuration reloads applied.",
    );
    e.sample(
        "vireo_config_reloads_total",
        &[],
        stats::RELOADS.load(Relaxed),
    );
    e.family(
        "vireo_config_reload_failures_total",
        "counter",
        "Configuration reloads refused (the previous configuration kept serving).",
    );
    e.sample(
        "vireo_config_reload_failures_total",
        &[],
        stats::RELOAD_FAILURES.load(Relaxed),
    );
    e.family(
        "vireo_config_last_reload_timestamp_seconds",
        "gauge",
        "When the live configuration was loaded, in seconds since the Unix epoch.",
    );
    e.sample(
        "vireo_config_last_reload_timestamp_seconds",
        &[],
        stats::LAST_RELOAD.load(Relaxed),
    );
    e.family(
        "vireo_binary_upgrades_total",
        "counter",
        "New binaries started by this process (SIGUSR2).",
    );
    e.sample(
        "vireo_binary_upgrades_total",
        &[],
        stats::UPGRADES.load(Relaxed),
    );

    let per = |e: &mut Exposition, name: &str, kind: &str, help: &str, f: fn(&Snapshot) -> u64| {
        e.family(name, kind, help);
        for ((_, s), w) in workers.iter().zip(&names) {
            e.sample(name, &[("worker", w)], f(s));
        }
    };
    per(
        &mut e,
        "vireo_connections_accepted_total",
        "counter",
        "Client connections accepted.",
        |s| s.accepted,
    );
    per(
        &mut e,
        "vireo_connections_handled_total",
        "counter",
        "Client connections served (accepted and within worker_connections).",
        |s| s.handled,
    );
    per(
        &mut e,
        "vireo_connections_active",
        "gauge",
        "Client connections open.",
        |s| s.active,
    );
    e.family(
        "vireo_connections",
        "gauge",
        "Open client connections by state: reading a request head, writing a response, waiting idle.",
    );
    for ((_, s), w) in workers.iter().zip(&names) {
        for (state, v) in [
            ("reading", s.reading),
            ("writing", s.writing),
            ("waiting", s.waiting()),
        ] {
            e.sample("vireo_connections", &[("worker", w), ("state", state)], v);
        }
    }
    per(
        &mut e,
        "vireo_http_requests_total",
        "counter",
        "Requests received (heads read, refused ones included).",
        |s| s.requests,
    );
    e.family(
        "vireo_http_responses_total",
        "counter",
        "Responses sent, by status class.",
    );
    for ((_, s), w) in workers.iter().zip(&names) {
        for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
            e.sample(
                "vireo_http_responses_total",
                &[("worker", w), ("code", class)],
                s.responses[i],
            );
        }
    }
    per(
        &mut e,
        "vireo_http_response_bytes_total",
        "counter",
        "Bytes of responses written to clients, heads and bodies.",
        |s| s.sent_bytes,
    );
    let mut all = HistogramSnapshot::default();
    for (_, s) in &workers {
        for (a, b) in all.buckets.iter_mut().zip(&s.duration.buckets) {
            *a += b;
        }
        all.sum_us += s.duration.sum_us;
    }
    e.family(
        "vireo_http_request_duration_seconds",
        "histogram",
        "Time from a request's head being read to its response written (all workers).",
    );
    e.histogram("vireo_http_request_duration_seconds", &[], &all);
    per(
        &mut e,
        "vireo_open_file_cache_hits_total",
        "counter",
        "Open-file cache lookups answered from the cache.",
        |s| s.file_cache_hits,
    );
    per(
        &mut e,
        "vireo_open_file_cache_misses_total",
        "counter",
        "Open-file cache lookups that opened the file.",
        |s| s.file_cache_misses,
    );
    per(
        &mut e,
        "vireo_open_file_cache_entries",
        "gauge",
        "Entries in the open-file cache (sampled once a second).",
        |s| s.file_cache_entries,
    );
    per(
        &mut e,
        "vireo_request_panics_total",
        "counter",
        "Panics while serving requests (answered 500, or the connection ended if the head was out; the worker went on).",
        |s| s.panics,
    );
    for collect in super::MODULES.iter().filter_map(|m| m.hooks.metrics) {
        collect(&mut e);
    }
    e.into_string()
}

/// `stub_status` and the Prometheus `/metrics` page.
pub static MODULE: Module = Module {
    name: "status",
    nginx: &["http_stub_status_module"],
    directives: &[conf::DIRECTIVES],
    variables: &[
        VarDef::name("connections_active", |_, _, out| {
            push_u64(out, stats::connections().0)
        }),
        VarDef::name("connections_reading", |_, _, out| {
            push_u64(out, stats::connections().1)
        }),
        VarDef::name("connections_writing", |_, _, out| {
            push_u64(out, stats::connections().2)
        }),
        VarDef::name("connections_waiting", |_, _, out| {
            let (a, r, w) = stats::connections();
            push_u64(out, a.saturating_sub(r + w))
        }),
    ],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_status_layout() {
        let t = stub_status_text();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("Active connections: "));
        assert_eq!(lines[1], "server accepts handled requests");
        assert_eq!(lines[2].split_whitespace().count(), 3);
        assert!(lines[3].starts_with("Reading: ") && lines[3].contains(" Writing: "));
    }
}
