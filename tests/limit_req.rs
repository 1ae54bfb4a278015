//! limit_req: nginx's leaky bucket per key — rate, burst (delayed, then
//! refused), nodelay, delay=, several limits, status codes, log lines and
//! levels, dry run, `$limit_req_status`, one zone for all workers, zones
//! kept across reloads, a full zone dropping its oldest state, bad
//! configurations. Bounds are loose where timing matters (a loaded 2-core
//! machine): counts of 200 and 503, and delays of at least some ms.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// A server with `zones` at http level and `locations` in its one server;
/// the access log writes `$uri $status $limit_req_status`.
fn start(workers: usize, zones: &str, locations: &str) -> Vireo {
    let dir = TempDir::new("limreq");
    dir.write("html/index.html", "hello");
    dir.write("html/busy.html", "busy page");
    Vireo::start_in(dir, &conf(workers, zones, locations))
}

fn conf(workers: usize, zones: &str, locations: &str) -> String {
    format!(
        "worker_processes {workers};\nerror_log {{dir}}/logs/error.log info;\nevents {{}}\nhttp {{\n    \
         log_format lim '$uri $status $limit_req_status';\n    access_log {{dir}}/logs/access.log lim;\n    \
         {zones}\n    server {{\n        listen 127.0.0.1:{{port}} reuseport;\n        root {{dir}}/html;\n        \
         {locations}\n    }}\n}}\n"
    )
}

/// `n` GETs of `path`, each on its own connection, sent at once; each
/// response's status and how long it took.
fn burst(port: u16, path: &str, n: usize) -> Vec<(u16, Duration)> {
    let gate = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let gate = gate.clone();
            let path = path.to_string();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                gate.wait();
                let t = Instant::now();
                s.write_all(
                    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .unwrap();
                let r = Resp::parse(&read_to_close(&mut s)).expect("a response");
                (r.status, t.elapsed())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn count(rs: &[(u16, Duration)], status: u16) -> usize {
    rs.iter().filter(|(s, _)| *s == status).count()
}

/// Requests one after another on one keep-alive connection; their statuses.
fn in_turn(v: &Vireo, paths: &[&str]) -> Vec<u16> {
    let mut s = v.connect();
    let mut out = Vec::new();
    for p in paths {
        s.write_all(format!("GET {p} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let r = loop {
            if let Some((r, n)) = Resp::parse_one(&buf)
                && r.header("content-length").and_then(|l| l.parse().ok()) == Some(r.body.len())
                && n == buf.len()
            {
                break r;
            }
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "closed early");
            buf.extend_from_slice(&chunk[..n]);
        };
        out.push(r.status);
    }
    out
}

#[test]
fn rate_without_burst_refuses_the_excess() {
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=one:1m rate=1r/m;",
        "location / { limit_req zone=one; }",
    );
    let got = in_turn(&v, &["/", "/", "/", "/"]);
    assert_eq!(got, [200, 503, 503, 503]);
    let lines = access_lines(&v, 4);
    assert_eq!(lines[0], "/index.html 200 PASSED");
    assert_eq!(lines[1], "/ 503 REJECTED");
    // nginx's line, with the excess in requests to the millisecond.
    let log = error_log(&v);
    assert!(
        log.contains("[error] ")
            && log.contains(
                "limiting requests, excess: 1.000 by zone \"one\", client: 127.0.0.1, server: , request: \"GET / HTTP/1.1\""
            ),
        "{log}"
    );
}

#[test]
fn burst_delays_then_refuses() {
    // 10r/s, burst 3: of 10 requests at once one passes, three wait 100,
    // 200 and 300 ms, the rest are refused.
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=b:1m rate=10r/s;",
        "location / { limit_req zone=b burst=3; }",
    );
    let rs = burst(v.port, "/", 10);
    let ok = count(&rs, 200);
    assert!((4..=6).contains(&ok), "{rs:?}");
    assert_eq!(ok + count(&rs, 503), 10, "{rs:?}");
    let slowest = rs.iter().filter(|r| r.0 == 200).map(|r| r.1).max().unwrap();
    assert!(slowest >= Duration::from_millis(150), "{rs:?}");
    let lines = access_lines(&v, 10);
    let delayed = lines.iter().filter(|l| l.ends_with(" DELAYED")).count();
    assert!(delayed >= 3, "{lines:?}");
    // Delays are logged one level below limit_req_log_level.
    let log = error_log(&v);
    assert!(
        log.contains("[warn] ")
            && log.contains("delaying request, excess: ")
            && log.contains(", by zone \"b\""),
        "{log}"
    );
}

#[test]
fn nodelay_serves_the_burst_at_once() {
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=nd:1m rate=1r/m;",
        "location / { limit_req zone=nd burst=3 nodelay; }",
    );
    let t = Instant::now();
    let got = in_turn(&v, &["/"; 6]);
    assert_eq!(got, [200, 200, 200, 200, 503, 503]);
    assert!(t.elapsed() < Duration::from_secs(10));
    let lines = access_lines(&v, 6);
    assert!(
        lines[..4].iter().all(|l| l.ends_with(" PASSED")),
        "{lines:?}"
    );
}

#[test]
fn delay_serves_some_at_once_and_delays_the_rest() {
    // 2r/s, burst 4, delay 2: of 8 at once three pass, two wait 500 and
    // 1000 ms, three are refused.
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=d:1m rate=2r/s;",
        "location / { limit_req zone=d burst=4 delay=2; }",
    );
    let rs = burst(v.port, "/", 8);
    let lines = access_lines(&v, 8);
    let n = |s: &str| lines.iter().filter(|l| l.ends_with(s)).count();
    let (passed, delayed, rejected) = (n(" PASSED"), n(" DELAYED"), n(" REJECTED"));
    assert!((3..=4).contains(&passed), "{lines:?}");
    assert!(delayed >= 1 && rejected >= 2, "{lines:?}");
    assert_eq!(passed + delayed + rejected, 8, "{lines:?}");
    assert_eq!(count(&rs, 200), passed + delayed);
    let slow = rs
        .iter()
        .filter(|r| r.0 == 200 && r.1 >= Duration::from_millis(300))
        .count();
    assert!(slow >= 1, "{rs:?}");
}

#[test]
fn several_limits_all_apply() {
    // A generous zone per address and a strict one per URI.
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=addr:1m rate=100r/s;\n    \
         limit_req_zone $uri zone=page:1m rate=1r/m;",
        "location / { limit_req zone=addr burst=10; limit_req zone=page; }",
    );
    assert_eq!(in_turn(&v, &["/a", "/a", "/b"]), [404, 503, 404]);
    let log = error_log(&v);
    assert!(log.contains("by zone \"page\""), "{log}");
}

#[test]
fn status_code_error_page_and_log_level() {
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=s:1m rate=1r/m;",
        "location / { limit_req zone=s; limit_req_status 429; limit_req_log_level notice; \
         error_page 429 /busy.html; }\n        \
         location = /busy.html { limit_req zone=s; }",
    );
    let mut s = v.connect();
    s.write_all(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let rs = Resp::parse_all(&read_to_close(&mut s));
    assert_eq!(rs.len(), 2);
    assert_eq!(rs[0].status, 200);
    // The error page's location has the same limit: it is not applied twice.
    assert_eq!((rs[1].status, rs[1].text().as_str()), (429, "busy page"));
    let log = error_log(&v);
    assert!(
        log.contains("[notice] ") && log.contains("limiting requests, excess: 1.000 by zone \"s\""),
        "{log}"
    );
    assert!(!log.contains("[error] "), "{log}");
}

#[test]
fn applied_once_per_request_across_internal_redirects() {
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=r:1m rate=1r/m;",
        "location /a { limit_req zone=r; try_files /nope /b; }\n        \
         location /b { limit_req zone=r; try_files /index.html =404; }",
    );
    assert_eq!(in_turn(&v, &["/a", "/b"]), [200, 503]);
}

#[test]
fn dry_run_counts_and_logs_but_lets_through() {
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=dr:1m rate=1r/m;",
        "location / { limit_req zone=dr burst=1; limit_req_dry_run on; }",
    );
    assert_eq!(in_turn(&v, &["/", "/", "/"]), [200, 200, 200]);
    let lines = access_lines(&v, 3);
    assert_eq!(
        lines,
        [
            "/index.html 200 PASSED",
            "/index.html 200 DELAYED_DRY_RUN",
            "/index.html 200 REJECTED_DRY_RUN"
        ]
    );
    let log = error_log(&v);
    assert!(log.contains("delaying request, dry run, excess: "), "{log}");
    assert!(
        log.contains("limiting requests, dry run, excess: "),
        "{log}"
    );
}

#[test]
fn empty_key_is_not_limited() {
    let v = start(
        1,
        "limit_req_zone $arg_user zone=u:1m rate=1r/m;",
        "location / { limit_req zone=u; }",
    );
    assert_eq!(
        in_turn(&v, &["/", "/", "/?user=a", "/?user=a", "/?user=b"]),
        [200, 200, 200, 503, 200]
    );
    let lines = access_lines(&v, 5);
    assert_eq!(lines[0], "/index.html 200 -");
}

#[test]
fn one_zone_for_all_workers() {
    // Connections spread over two workers (reuseport): one bucket still.
    let v = start(
        2,
        "limit_req_zone $binary_remote_addr zone=w:1m rate=1r/m;",
        "location / { limit_req zone=w; }",
    );
    let rs: Vec<u16> = (0..24).map(|_| v.get("/").status).collect();
    assert_eq!(rs.iter().filter(|s| **s == 200).count(), 1, "{rs:?}");
    // Both workers refused some (each line names its worker: `PID#N:`).
    let log = error_log(&v);
    let workers: std::collections::HashSet<&str> = log
        .lines()
        .filter(|l| l.contains("limiting requests"))
        .filter_map(|l| l.split('#').nth(1)?.split(':').next())
        .collect();
    assert_eq!(workers.len(), 2, "{log}");
}

#[test]
fn reload_keeps_the_zone() {
    let zone = |size: &str, key: &str| format!("limit_req_zone {key} zone=k:{size} rate=1r/m;");
    let loc = "location / { limit_req zone=k; }";
    let v = start(1, &zone("1m", "$binary_remote_addr"), loc);
    assert_eq!(v.get("/").status, 200);
    // Same name, size and key (a new rate, another location): kept.
    let again = conf(
        1,
        &zone("1m", "$binary_remote_addr").replace("1r/m", "2r/m"),
        &format!("{loc}\n        location /x {{ }}"),
    );
    v.reload_with(&again, "configuration reloaded");
    assert_eq!(v.get("/").status, 503, "the state survived the reload");
    // Another key for the same zone is refused, as nginx does.
    v.reload_with(
        &conf(1, &zone("1m", "$uri"), loc),
        "limit_req_zone \"k\" uses the \"$uri\" key while previously it used the \"$binary_remote_addr\" key",
    );
    assert_eq!(v.get("/").status, 503);
    // Another size: a new zone.
    v.reload_with(&conf(1, &zone("2m", "$uri"), loc), "configuration reloaded");
    assert_eq!(v.get("/").status, 200);
}

#[test]
fn full_zone_forgets_the_least_recently_used() {
    // 32k holds 256 states of short keys.
    let v = start(
        1,
        "limit_req_zone $arg_k zone=f:32k rate=1r/m;",
        "location / { limit_req zone=f; }",
    );
    let paths: Vec<String> = (0..256).map(|i| format!("/?k={i}")).collect();
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    assert!(in_turn(&v, &refs).iter().all(|s| *s == 200));
    // Key 0 is remembered; a new key pushes out the oldest (key 1).
    assert_eq!(in_turn(&v, &["/?k=0", "/?k=new", "/?k=1"]), [503, 200, 200]);
}

#[test]
fn bad_configurations() {
    let dir = TempDir::new("limreq-bad");
    let cases = [
        (
            "limit_req zone=nope;",
            "zero size shared memory zone \"nope\" in",
        ),
        (
            "limit_req_zone $binary_remote_addr zone=a:1m rate=1r/s sync;",
            "needs zone synchronization",
        ),
        (
            "limit_req_zone $binary_remote_addr zone=a:16k rate=1r/s;",
            "zone \"zone=a:16k\" is too small",
        ),
        (
            "limit_req_zone $binary_remote_addr zone=a:1m rate=1r/h;",
            "invalid rate \"rate=1r/h\"",
        ),
        (
            "limit_req_zone $binary_remote_addr zone=a:1m rate=1r/s; limit_conn_zone $uri zone=a:1m;",
            "the shared memory zone \"a\" is already declared for a different use",
        ),
        (
            "limit_req_zone $binary_remote_addr zone=a:1m rate=1r/s; limit_req zone=a; limit_req zone=a;",
            "\"limit_req\" directive is duplicate",
        ),
        (
            "limit_req_zone $binary_remote_addr zone=a:1m rate=1r/s; limit_req zone=a delay=0;",
            "invalid delay value \"delay=0\"",
        ),
        ("limit_req_status 302;", "value must be between 400 and 599"),
        ("limit_req_log_level debug;", "invalid value \"debug\""),
    ];
    for (http, want) in cases {
        let o = test_conf(
            &dir,
            &format!("events {{}}\nhttp {{\n{http}\naccess_log off;\n}}\n"),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{http}");
        assert!(err.contains(want), "{http}: {err}");
        assert!(err.contains("t.conf:3"), "{http}: {err}");
    }
    // A zone may be declared after its use.
    let o = test_conf(
        &dir,
        "events {}\nhttp {\n limit_req zone=later burst=5;\n limit_req_zone $binary_remote_addr zone=later:1m rate=5r/s;\n access_log off;\n}\n",
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn binary_remote_addr_is_4_or_16_bytes() {
    let v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    let listen6 = if v6 { "listen [::1]:{port2};" } else { "" };
    let v = start(
        1,
        "",
        &format!("{listen6}\n        location /b {{ return 200 \"[$binary_remote_addr]\"; }}"),
    );
    assert_eq!(v.get("/b").body, b"[\x7f\x00\x00\x01]");
    if !v6 {
        eprintln!("no IPv6 loopback: [::1] not checked");
        return;
    }
    let port2: u16 = v
        .dir
        .read("vireo.conf")
        .split("listen [::1]:")
        .nth(1)
        .and_then(|r| r.split(';').next()?.parse().ok())
        .unwrap();
    let mut s = TcpStream::connect(("::1", port2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    let mut want = b"[".to_vec();
    want.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    want.push(b']');
    assert_eq!(r.body, want);
}

/// A client that leaves while its request is delayed is noticed at once (as
/// nginx's ngx_http_test_reading): the request is dropped and logged with 499
/// long before its delay would end, and holds nothing afterwards.
#[test]
fn client_leaving_during_the_delay_is_logged_499_at_once() {
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=slow:1m rate=20r/m;",
        "location / { limit_req zone=slow burst=5; }\n        location = /st { stub_status; }",
    );
    assert_eq!(v.get("/index.html").status, 200);
    // The next one waits 3 s (20r/m); its client leaves after 300 ms.
    let mut s = v.connect();
    s.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let left = Instant::now();
    drop(s);
    let lines = access_lines(&v, 2);
    assert_eq!(lines[1], "/index.html 499 DELAYED", "{lines:?}");
    // Well before the delay's end (2.7 s on), access-log buffering included.
    let took = left.elapsed();
    eprintln!("499 logged {took:?} after the client left");
    assert!(took < Duration::from_millis(1000), "{took:?}");
    assert!(
        error_log(&v).contains("client prematurely closed connection while delaying request"),
        "{}",
        error_log(&v)
    );
    // Nothing is left of it: the status request is the only one open.
    let st = v.get("/st").text();
    assert!(
        st.starts_with("Active connections: 1 ") && st.contains("Writing: 1 "),
        "{st}"
    );
}

/// Over HTTP/2 the stream's reset (RST_STREAM) is the client leaving: the
/// delayed request is dropped and logged with 499 at once, the connection
/// goes on.
#[test]
fn stream_reset_during_the_delay_is_logged_499_at_once() {
    if !common::h2::have_python_h2() {
        return;
    }
    let v = start(
        1,
        "limit_req_zone $binary_remote_addr zone=slow:1m rate=20r/m;",
        "http2 on;\n        location / { limit_req zone=slow burst=5; }",
    );
    assert_eq!(v.get("/index.html").status, 200);
    let t = Instant::now();
    let r = common::h2::script(&v, "cancel.py", &["/index.html", "0.3"]);
    assert_eq!(r.get("responses"), "0", "{}", r.0);
    assert_eq!(r.get("closed"), "0", "{}", r.0);
    let lines = access_lines(&v, 2);
    assert_eq!(lines[1], "/index.html 499 DELAYED", "{lines:?}");
    // The script listens for 1 s after the reset; the delay was 3 s.
    assert!(
        t.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
}
