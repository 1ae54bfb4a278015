//! stub_status and /metrics figures against a known sequence of requests, and a
//! panic in one request answered 500 while the worker goes on.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;

const CONF: &str = "
error_log logs/error.log notice;
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location = /status { stub_status; }
        location = /metrics { metrics; }
    }
}";

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
struct Stub {
    active: u64,
    accepts: u64,
    handled: u64,
    requests: u64,
    reading: u64,
    writing: u64,
    waiting: u64,
}

fn parse_stub(text: &str) -> Stub {
    let nums: Vec<u64> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 7, "{text}");
    Stub {
        active: nums[0],
        accepts: nums[1],
        handled: nums[2],
        requests: nums[3],
        reading: nums[4],
        writing: nums[5],
        waiting: nums[6],
    }
}

/// One request on a keep-alive connection; the raw response.
fn keepalive_raw(s: &mut TcpStream, req: &str) -> Vec<u8> {
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((r, n)) = Resp::parse_one(&buf)
            && r.header("content-length")
                .and_then(|l| l.parse::<usize>().ok())
                == Some(r.body.len())
        {
            assert_eq!(n, buf.len());
            return buf;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Wait until the harness's readiness probe has been counted and closed.
fn settle(v: &Vireo) {
    assert!(eventually(5, || parse_stub(&v.get("/status").text())
        .active
        == 1));
}

#[test]
fn stub_status_and_metrics_count_requests() {
    let dir = TempDir::new("st");
    dir.write("html/x", "hello");
    let v = Vireo::start_in(dir, CONF);
    settle(&v);
    let s0 = parse_stub(&v.get("/status").text());
    // The status request itself: one active connection, writing.
    assert_eq!(
        (s0.active, s0.reading, s0.writing, s0.waiting),
        (1, 0, 1, 0)
    );
    assert_eq!(s0.accepts, s0.handled);
    let m0 = v.get("/metrics").text();

    // A known load: 10 GETs on their own connections, 3 more on one kept-alive
    // connection (left open), and a POST to the status page (405).
    let mut bytes = 0;
    for _ in 0..10 {
        let raw = v.raw(b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert!(raw.starts_with(b"HTTP/1.1 200"));
        bytes += raw.len();
    }
    let mut ka = v.connect();
    for _ in 0..3 {
        let raw = keepalive_raw(&mut ka, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(raw.starts_with(b"HTTP/1.1 404"));
        bytes += raw.len();
    }
    let raw = v
        .raw(b"POST /status HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert!(
        raw.starts_with(b"HTTP/1.1 405"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    bytes += raw.len();

    // Closed connections are counted once the server has let go of them.
    let mut s1 = s0;
    assert!(eventually(5, || {
        s1 = parse_stub(&v.get("/status").text());
        s1.active == 2
    }));
    // Since s0: the status fetches in between (counted by retrying) plus ours.
    let fetches = s1.requests - s0.requests - 14 - 1; // the first /metrics
    assert_eq!(s1.accepts - s0.accepts, 10 + 1 + 1 + 1 + fetches);
    assert_eq!(s1.handled, s1.accepts);
    assert_eq!(s1.requests - s0.requests, 10 + 3 + 1 + 1 + fetches);
    assert_eq!(
        (s1.active, s1.reading, s1.writing, s1.waiting),
        (2, 0, 1, 1)
    );

    let m1 = v.get("/metrics").text();
    let d = |name: &str, labels: &[&str]| metric(&m1, name, labels) - metric(&m0, name, labels);
    // Between the two /metrics pages: our 14 requests, the status fetches, the
    // first page's response, and the second page's connection and request (its
    // own response is not counted yet when it is written).
    let extra = fetches + 1;
    assert_eq!(d("vireo_http_requests_total", &[]), (14 + extra) as f64);
    assert_eq!(d("vireo_http_responses_total", &["code=\"4xx\""]), 4.0);
    assert_eq!(d("vireo_http_responses_total", &["code=\"5xx\""]), 0.0);
    assert_eq!(
        d("vireo_http_responses_total", &["code=\"2xx\""]),
        (10 + extra) as f64
    );
    assert_eq!(
        d("vireo_http_request_duration_seconds_count", &[]),
        (14 + extra) as f64
    );
    assert_eq!(
        d("vireo_connections_accepted_total", &["worker=\"0\""]),
        (12 + extra) as f64
    );
    assert_eq!(metric(&m1, "vireo_connections_active", &[]), 2.0);
    assert_eq!(
        metric(&m1, "vireo_connections", &["state=\"waiting\""]),
        1.0
    );
    assert_eq!(
        metric(&m1, "vireo_connections", &["state=\"writing\""]),
        1.0
    );
    assert_eq!(metric(&m1, "vireo_workers", &[]), 1.0);
    assert_eq!(metric(&m1, "vireo_config_reloads_total", &[]), 0.0);
    // Bytes: our 14 responses exactly, plus the status and metrics pages between.
    let our = bytes as f64;
    let sent = d("vireo_http_response_bytes_total", &[]);
    assert!(sent > our, "{sent} <= {our}");
    assert!(m1.contains("# TYPE vireo_http_request_duration_seconds histogram"));
    assert!(m1.contains("vireo_http_request_duration_seconds_bucket{le=\"+Inf\"}"));

    // Reloads are counted; figures carry on across them.
    reload_counted(&v, 1.0);
    let s2 = parse_stub(&v.get("/status").text());
    assert!(s2.requests > s1.requests && s2.accepts > s1.accepts);
    // A refused reload is counted apart.
    let good = v.dir.read("vireo.conf");
    v.dir
        .write("vireo.conf", good.replace("events {}", "events {}\nbogus;"));
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || metric(
        &v.get("/metrics").text(),
        "vireo_config_reload_failures_total",
        &[]
    ) == 1.0));
    let m = v.get("/metrics").text();
    assert_eq!(metric(&m, "vireo_config_reloads_total", &[]), 1.0);
    drop(ka);
}

#[test]
fn bytes_are_counted_exactly() {
    let dir = TempDir::new("stb");
    dir.write("html/x", vec![b'x'; 3000]);
    let v = Vireo::start_in(dir, CONF);
    settle(&v);
    // On one connection, so nothing else runs between the two pages.
    let mut s = v.connect();
    let m0 = Resp::parse(&keepalive_raw(
        &mut s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    ))
    .unwrap();
    let mut ours = 0;
    for path in ["/x", "/nope", "/x"] {
        ours += keepalive_raw(&mut s, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")).len();
    }
    let m1 = Resp::parse(&keepalive_raw(
        &mut s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    ))
    .unwrap();
    let first_page = m0.head.len() + m0.body.len();
    let d = metric(&m1.text(), "vireo_http_response_bytes_total", &[])
        - metric(&m0.text(), "vireo_http_response_bytes_total", &[]);
    assert_eq!(d as usize, first_page + ours);
}

#[test]
fn a_panic_costs_one_request() {
    let dir = TempDir::new("panic");
    dir.write("html/x", "fine");
    let v = Vireo::start_in_env(dir, CONF, &[("VIREO_TEST_PANIC_URI", "/boom")]);
    // A kept-alive connection on the same (only) worker.
    let mut ka = v.connect();
    let r = Resp::parse(&keepalive_raw(
        &mut ka,
        "GET /x HTTP/1.1\r\nHost: x\r\n\r\n",
    ))
    .unwrap();
    assert_eq!(r.text(), "fine");

    let mut s = v.connect();
    s.write_all(b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let raw = read_to_close(&mut s);
    let r = Resp::parse(&raw).expect("a response");
    assert_eq!(r.status, 500);
    assert_eq!(r.header("connection"), Some("close"));

    // The worker and the other connection carry on.
    let r = Resp::parse(&keepalive_raw(
        &mut ka,
        "GET /x HTTP/1.1\r\nHost: x\r\n\r\n",
    ))
    .unwrap();
    assert_eq!(r.text(), "fine");
    let mut s = v.connect();
    s.write_all(b"GET /x HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(Resp::parse(&read_to_close(&mut s)).unwrap().text(), "fine");
    let mut s = v.connect();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let m = Resp::parse(&read_to_close(&mut s)).unwrap().text();
    assert_eq!(metric(&m, "vireo_request_panics_total", &[]), 1.0);
    assert_eq!(
        metric(&m, "vireo_http_responses_total", &["code=\"5xx\""]),
        1.0
    );
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains("[alert]")
            && log.contains("panic in thread \"vireo-worker-0\": test panic trigger")
            && log.contains("request \"GET /boom HTTP/1.1\" panicked: answered 500"),
        "{log}"
    );
}

#[test]
fn status_pages_only_answer_get_and_head() {
    let dir = TempDir::new("sth");
    let v = Vireo::start_in(dir, CONF);
    let r = v.request("HEAD /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert!(r.body.is_empty());
    let r = v.get("/metrics");
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let r = v.request("DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 405);
}

#[test]
fn status_directives_are_checked() {
    let dir = TempDir::new("stc");
    let o = test_conf(
        &dir,
        "events {}\nhttp {\n server {\n  stub_status;\n }\n}\n",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("\"stub_status\" directive is not allowed here")
    );
    let o = test_conf(
        &dir,
        "events {}\nhttp {\n server {\n  location /s {\n   stub_status;\n   metrics;\n  }\n }\n}\n",
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("\"metrics\" directive is duplicate") && err.contains("t.conf:6"),
        "{err}"
    );
}

#[test]
fn open_file_cache_figures() {
    let dir = TempDir::new("stofc");
    dir.write("html/x", "cached");
    let conf = CONF.replace(
        "access_log off;",
        "access_log off;\n    open_file_cache max=100;",
    );
    let v = Vireo::start_in(dir, &conf);
    let m0 = v.get("/metrics").text();
    for _ in 0..5 {
        assert_eq!(v.get("/x").text(), "cached");
    }
    let m1 = v.get("/metrics").text();
    let d = |name: &str| metric(&m1, name, &[]) - metric(&m0, name, &[]);
    assert_eq!(d("vireo_open_file_cache_misses_total"), 1.0);
    assert_eq!(d("vireo_open_file_cache_hits_total"), 4.0);
    // The entry count is sampled once a second.
    assert!(eventually(3, || metric(
        &v.get("/metrics").text(),
        "vireo_open_file_cache_entries",
        &[]
    ) == 1.0));
}

#[test]
fn figures_are_kept_per_worker() {
    let dir = TempDir::new("stw");
    dir.write("html/x", "x");
    let conf = CONF
        .replace("events {}", "worker_processes 2;\nevents {}")
        .replace(
            "listen 127.0.0.1:{port};",
            "listen 127.0.0.1:{port} reuseport;",
        );
    let v = Vireo::start_in(dir, &conf);
    let m0 = v.get("/metrics").text();
    // New connections: SO_REUSEPORT spreads them over both workers' sockets by
    // their source ports.
    for _ in 0..40 {
        assert_eq!(v.get("/x").status, 200);
    }
    let m1 = v.get("/metrics").text();
    assert_eq!(metric(&m1, "vireo_workers", &[]), 2.0);
    let d = |w: &str| {
        let l = format!("worker=\"{w}\"");
        metric(&m1, "vireo_http_responses_total", &[&l, "code=\"2xx\""])
            - metric(&m0, "vireo_http_responses_total", &[&l, "code=\"2xx\""])
    };
    let (w0, w1) = (d("0"), d("1"));
    // Our 40, and the first page (counted once written).
    assert_eq!(w0 + w1, 41.0, "{m1}");
    assert!(w0 > 0.0 && w1 > 0.0, "worker 0: {w0}, worker 1: {w1}");
    for w in ["worker=\"0\"", "worker=\"1\""] {
        assert!(metric(&m1, "vireo_connections_accepted_total", &[w]) > 0.0);
    }
}

#[test]
fn a_panic_while_sending_a_body_ends_that_connection_only() {
    let dir = TempDir::new("panicb");
    dir.write("html/x", "fine");
    let v = Vireo::start_in_env(dir, CONF, &[("VIREO_TEST_PANIC_BODY_URI", "/x")]);
    settle(&v);
    let mut ka = v.connect();
    let r = Resp::parse(&keepalive_raw(
        &mut ka,
        "GET /status HTTP/1.1\r\nHost: x\r\n\r\n",
    ))
    .unwrap();
    assert_eq!(r.status, 200);
    // The head and the first piece are out when the body panics: the client
    // gets a cut chunked body and the connection closes.
    let mut s = v.connect();
    s.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let raw = read_to_close(&mut s);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(
        text.contains("transfer-encoding: chunked") || text.contains("Transfer-Encoding: chunked"),
        "{text}"
    );
    assert!(
        text.contains("partial") && !text.ends_with("0\r\n\r\n"),
        "{text}"
    );
    // The worker and the other connection go on; nothing is left counted.
    let r = Resp::parse(&keepalive_raw(
        &mut ka,
        "GET /status HTTP/1.1\r\nHost: x\r\n\r\n",
    ))
    .unwrap();
    let st = parse_stub(&r.text());
    assert_eq!(
        (st.active, st.writing, st.reading),
        (1, 1, 0),
        "{}",
        r.text()
    );
    drop(ka);
    assert!(eventually(5, || parse_stub(&v.get("/status").text())
        .active
        == 1));
    let m = v.get("/metrics").text();
    assert_eq!(metric(&m, "vireo_request_panics_total", &[]), 1.0);
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains(
            "panic in thread \"vireo-worker-0\": test panic trigger (VIREO_TEST_PANIC_BODY_URI)"
        ),
        "{log}"
    );
}

#[test]
fn reading_writing_and_waiting_follow_the_connections() {
    let dir = TempDir::new("strw");
    dir.write("html/x", "x");
    let v = Vireo::start_in(dir, CONF);
    settle(&v);
    // One idle connection (no byte yet), one in the middle of its request head,
    // one kept alive after a request.
    let _idle = v.connect();
    let mut partial = v.connect();
    partial.write_all(b"GET /x HTTP/1.1\r\nHost:").unwrap();
    let mut ka = v.connect();
    keepalive_raw(&mut ka, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut s = Stub {
        active: 0,
        accepts: 0,
        handled: 0,
        requests: 0,
        reading: 0,
        writing: 0,
        waiting: 0,
    };
    // 4 open: the three above and the status request (writing).
    assert!(
        eventually(5, || {
            s = parse_stub(&v.get("/status").text());
            (s.active, s.reading, s.writing, s.waiting) == (4, 1, 1, 2)
        }),
        "{s:?}"
    );
    // The head completes: it is answered, and that connection waits again.
    partial.write_all(b" x\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    assert!(partial.read(&mut buf).unwrap() > 0);
    assert!(
        eventually(5, || {
            s = parse_stub(&v.get("/status").text());
            (s.active, s.reading, s.writing, s.waiting) == (4, 0, 1, 3)
        }),
        "{s:?}"
    );
}

/// $connections_active, _reading, _writing and _waiting: the figures of
/// stub_status, in any location.
#[test]
fn connection_variables() {
    let dir = TempDir::new("stvar");
    dir.write("html/x", "x");
    let v = Vireo::start_in(
        dir,
        "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        add_header X-Figures $connections_active/$connections_reading/$connections_writing/$connections_waiting;
        location = /status { stub_status; }
    }
}",
    );
    settle(&v);
    assert_eq!(v.get("/x").header("x-figures"), Some("1/0/1/0"));
    let _idle = v.connect();
    assert!(eventually(5, || v.get("/x").header("x-figures") == Some("2/0/1/1")));
}

/// A client that closes while a paced body waits for its next piece ends
/// that response at once: the connection is not counted any longer.
#[test]
fn a_client_leaving_a_paced_response_frees_its_connection() {
    let dir = TempDir::new("strate");
    dir.write("html/big", "y".repeat(4000));
    let v = Vireo::start_in(
        dir,
        "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location = /status { stub_status; }
        location / { limit_rate 100; }
    }
}",
    );
    settle(&v);
    let mut s = v.connect();
    s.write_all(b"GET /big HTTP/1.0\r\n\r\n").unwrap();
    let mut buf = [0u8; 64];
    assert!(s.read(&mut buf).unwrap() > 0);
    assert_eq!(parse_stub(&v.get("/status").text()).writing, 2);
    drop(s);
    let t = std::time::Instant::now();
    assert!(eventually(5, || parse_stub(&v.get("/status").text())
        .active
        == 1));
    assert!(
        t.elapsed() < std::time::Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
}
