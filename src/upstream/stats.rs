//! Upstream figures for /metrics: per worker and peer, attempts by result,
//! connections in use, passive-health state and the time to the response head;
//! per peer, whether it is in service (`down`, active health checks).
//!
//! Each worker thread owns one [`PeerFigures`] per (upstream name, peer) it has
//! used and is its only writer (relaxed load and store, as `server::stats`). The
//! figures are keyed by names, not by the loaded block, so they carry on across
//! reloads; they are made when a worker first balances over an upstream of a
//! newly loaded configuration (one lock then), never on the request path. A
//! scrape adds them up by (upstream, peer, worker number).

use super::Upstream;
use crate::core::metrics::{Exposition, HistogramSnapshot};
use crate::server::stats::{self, Histogram, bump};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

/// One worker's figures for one peer of one upstream.
#[repr(align(128))]
pub struct PeerFigures {
    worker: usize,
    upstream: Box<str>,
    peer: Box<str>,
    ok: AtomicU64,
    failed: AtomicU64,
    conns: AtomicU64,
    /// Unix ms until which this worker holds the peer failed (0: not failed).
    failed_until_ms: AtomicU64,
    header: Histogram,
}

impl PeerFigures {
    /// An attempt on the peer ended (`ok` false: an error, a timeout, or a
    /// status listed in next_upstream).
    pub fn finished(&self, ok: bool, conns: u32, failed_until: Option<Instant>) {
        bump(if ok { &self.ok } else { &self.failed }, 1);
        self.conns.store(conns.into(), Relaxed);
        let until = failed_until.map_or(0, |t| {
            let left = t.saturating_duration_since(Instant::now());
            crate::sys::coarse_unix_millis() + left.as_millis() as u64
        });
        self.failed_until_ms.store(until, Relaxed);
    }

    /// A connection to the peer was counted (the balancer chose it).
    pub fn connected(&self, conns: u32) {
        self.conns.store(conns.into(), Relaxed);
    }

    /// The peer's response head arrived `took` after the attempt's start.
    pub fn responded(&self, took: std::time::Duration) {
        self.header
            .observe_us(took.as_micros().try_into().unwrap_or(u64::MAX));
    }
}

/// Every worker's figures, including exited workers' and those of upstreams a
/// reload removed (counters never go back).
static FIGURES: Mutex<Vec<&'static PeerFigures>> = Mutex::new(Vec::new());

/// Upstreams of the configurations loaded, for the in-service gauge; the
/// newest live block of each name is shown.
static UPSTREAMS: Mutex<Vec<Weak<Upstream>>> = Mutex::new(Vec::new());

/// (upstream name, peer name).
type Key = (Box<str>, Box<str>);

thread_local! {
    static MINE: RefCell<rustc_hash::FxHashMap<Key, &'static PeerFigures>> =
        RefCell::new(rustc_hash::FxHashMap::default());
}

/// The calling worker's figures for each of `peers` of upstream `upstream`
/// (made on first use), by slot; none for an empty slot.
pub fn figures<'a>(
    upstream: &str,
    peers: impl Iterator<Item = Option<&'a str>>,
) -> Box<[Option<&'static PeerFigures>]> {
    MINE.with(|m| {
        let mut m = m.borrow_mut();
        peers
            .map(|p| {
                let key: Key = (upstream.into(), p?.into());
                Some(*m.entry(key).or_insert_with_key(|(u, p)| {
                    let f: &'static PeerFigures = Box::leak(Box::new(PeerFigures {
                        worker: stats::worker(),
                        upstream: u.clone(),
                        peer: p.clone(),
                        ok: AtomicU64::new(0),
                        failed: AtomicU64::new(0),
                        conns: AtomicU64::new(0),
                        failed_until_ms: AtomicU64::new(0),
                        header: Histogram::new(),
                    }));
                    FIGURES.lock().unwrap_or_else(|e| e.into_inner()).push(f);
                    f
                }))
            })
            .collect()
    })
}

/// A loaded upstream, shown by /metrics while a live configuration holds it.
pub fn track(u: &Arc<Upstream>) {
    let mut list = UPSTREAMS.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(u));
}

/// The newest live block named as `u` loaded before it, of which `same`
/// holds (the block a reload replaces: of the same protocol).
pub fn previous(u: &Upstream, same: impl Fn(&Upstream) -> bool) -> Option<Arc<Upstream>> {
    let list = UPSTREAMS.lock().unwrap_or_else(|e| e.into_inner());
    list.iter()
        .filter_map(Weak::upgrade)
        .filter(|o| o.name == u.name && o.id < u.id && same(o))
        .max_by_key(|o| o.id)
}

/// One (upstream, peer, worker) series: the figures of every thread that had
/// that worker number, added up.
#[derive(Default)]
struct Series {
    ok: u64,
    failed: u64,
    conns: u64,
    failed_now: bool,
}

/// The upstream figures of a /metrics scrape.
pub fn collect(e: &mut Exposition) {
    let figures = FIGURES.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let now_ms = crate::sys::coarse_unix_millis();
    let mut series: Vec<((&str, &str, usize), Series)> = Vec::new();
    let mut histograms: Vec<((&str, &str), HistogramSnapshot)> = Vec::new();
    for f in &figures {
        let key = (&*f.upstream, &*f.peer, f.worker);
        let i = match series.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                series.push((key, Series::default()));
                series.len() - 1
            }
        };
        let s = &mut series[i].1;
        s.ok += f.ok.load(Relaxed);
        s.failed += f.failed.load(Relaxed);
        s.conns += f.conns.load(Relaxed);
        s.failed_now |= f.failed_until_ms.load(Relaxed) > now_ms;
        let hk = (&*f.upstream, &*f.peer);
        let j = match histograms.iter().position(|(k, _)| *k == hk) {
            Some(j) => j,
            None => {
                histograms.push((hk, HistogramSnapshot::default()));
                histograms.len() - 1
            }
        };
        f.header.add_to(&mut histograms[j].1);
    }
    series.sort_by(|a, b| a.0.cmp(&b.0));
    histograms.sort_by(|a, b| a.0.cmp(&b.0));

    e.family(
        "vireo_upstream_peer_up",
        "gauge",
        "1 while the peer is in service; 0 when marked down or failing active health checks.",
    );
    for (name, peers) in live_upstreams() {
        for (peer, up) in peers {
            e.sample(
                "vireo_upstream_peer_up",
                &[("upstream", &name), ("peer", &peer)],
                u8::from(up),
            );
        }
    }
    let per =
        |e: &mut Exposition, name: &str, kind: &str, help: &str, f: &dyn Fn(&Series) -> u64| {
            e.family(name, kind, help);
            for ((u, p, w), s) in &series {
                e.sample(
                    name,
                    &[("upstream", u), ("peer", p), ("worker", &w.to_string())],
                    f(s),
                );
            }
        };
    per(
        e,
        "vireo_upstream_peer_failed",
        "gauge",
        "1 while the worker holds the peer failed (max_fails failures within fail_timeout).",
        &|s| u64::from(s.failed_now),
    );
    per(
        e,
        "vireo_upstream_peer_connections",
        "gauge",
        "Connections to the peer in use by the worker's requests.",
        &|s| s.conns,
    );
    e.family(
            "vireo_upstream_requests_total",
            "counter",
            "Attempts on the peer by result: ok, or failed (error, timeout, or a status listed in proxy_next_upstream/fastcgi_next_upstream).",
        );
    for ((u, p, w), s) in &series {
        let w = w.to_string();
        for (result, v) in [("ok", s.ok), ("failed", s.failed)] {
            e.sample(
                "vireo_upstream_requests_total",
                &[
                    ("upstream", u),
                    ("peer", p),
                    ("worker", &w),
                    ("result", result),
                ],
                v,
            );
        }
    }
    e.family(
            "vireo_upstream_header_duration_seconds",
            "histogram",
            "Time from the start of an attempt (connecting included) to the peer's response head (all workers).",
        );
    for ((u, p), h) in &histograms {
        e.histogram(
            "vireo_upstream_header_duration_seconds",
            &[("upstream", u), ("peer", p)],
            h,
        );
    }
}

/// Per upstream name (the newest live block of that name): each peer and
/// whether it is in service.
fn live_upstreams() -> Vec<(String, Vec<(String, bool)>)> {
    let list = UPSTREAMS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut newest: Vec<Arc<Upstream>> = Vec::new();
    for u in list.iter().filter_map(Weak::upgrade) {
        match newest.iter_mut().find(|n| n.name == u.name) {
            Some(n) if n.id < u.id => *n = u,
            Some(_) => {}
            None => newest.push(u),
        }
    }
    newest.sort_by(|a, b| a.name.cmp(&b.name));
    newest
        .iter()
        .map(|u| {
            let mut peers = Vec::new();
            u.each_peer(|_, p, _, h| peers.push((p.name.clone(), !p.down && h.load(Relaxed))));
            (u.name.clone(), peers)
        })
        .collect()
}
