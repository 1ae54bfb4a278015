//! limit_conn: requests in progress per key — held from the location to
//! the logged response, refused over the limit, given back after, shared by
//! all workers, kept across reloads; status, log level, dry run,
//! `$limit_conn_status`. Requests are held in progress by an upstream that
//! answers only when the test opens its gate.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// An upstream that holds each request until `open` is set.
struct Gate {
    port: u16,
    open: Arc<AtomicBool>,
    arrived: Arc<AtomicUsize>,
}

impl Gate {
    fn new() -> Gate {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(false));
        let arrived = Arc::new(AtomicUsize::new(0));
        let (o, a) = (open.clone(), arrived.clone());
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let (o, a) = (o.clone(), a.clone());
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut b = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&b[..n]),
                        }
                    }
                    a.fetch_add(1, Ordering::SeqCst);
                    while !o.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let _ = s.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nslow",
                    );
                });
            }
        });
        Gate {
            port,
            open,
            arrived,
        }
    }

    /// Wait until `n` requests reached the upstream.
    fn wait_arrived(&self, n: usize) {
        assert!(
            eventually(10, || self.arrived.load(Ordering::SeqCst) >= n),
            "{} requests arrived, not {n}",
            self.arrived.load(Ordering::SeqCst)
        );
    }

    fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

fn conf(workers: usize, gate: u16, http: &str, location: &str) -> String {
    format!(
        "worker_processes {workers};\nerror_log {{dir}}/logs/error.log info;\nevents {{}}\nhttp {{\n    \
         log_format lim '$uri $status $limit_conn_status';\n    access_log {{dir}}/logs/access.log lim;\n    \
         limit_conn_zone $binary_remote_addr zone=addr:1m;\n    {http}\n    server {{\n        \
         listen 127.0.0.1:{{port}} reuseport;\n        root {{dir}}/html;\n        \
         location /slow {{ proxy_pass http://127.0.0.1:{gate}; {location} }}\n        \
         location /fast {{ {location} return 200 fast; }}\n        \
         location /static {{ {location} }}\n    }}\n}}\n"
    )
}

fn start(workers: usize, gate: &Gate, http: &str, location: &str) -> Vireo {
    let dir = TempDir::new("limconn");
    dir.write("html/static", "static");
    Vireo::start_in(dir, &conf(workers, gate.port, http, location))
}

/// A GET in a thread; its status.
fn spawn_get(port: u16, path: &str) -> JoinHandle<u16> {
    let path = path.to_string();
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        Resp::parse(&read_to_close(&mut s)).map_or(0, |r| r.status)
    })
}

#[test]
fn held_while_in_progress_and_given_back() {
    let gate = Gate::new();
    let v = start(1, &gate, "", "limit_conn addr 2;");
    let slow: Vec<_> = (0..2).map(|_| spawn_get(v.port, "/slow")).collect();
    gate.wait_arrived(2);
    // Two requests in progress: a third is refused, in any location with
    // the limit.
    assert_eq!(v.get("/static").status, 503);
    assert_eq!(v.get("/slow").status, 503);
    gate.open();
    for t in slow {
        assert_eq!(t.join().unwrap(), 200);
    }
    // Given back once the responses went out.
    assert!(eventually(5, || v.get("/static").status == 200));
    assert_eq!(v.get("/fast").status, 200, "`return` runs before the limit");
    let lines = access_lines(&v, 6);
    assert!(
        lines.contains(&"/static 503 REJECTED".to_string()),
        "{lines:?}"
    );
    assert!(lines.contains(&"/slow 200 PASSED".to_string()), "{lines:?}");
    // `return` answers in the rewrite phase: limit_conn never ran.
    assert!(lines.contains(&"/fast 200 -".to_string()), "{lines:?}");
    let log = error_log(&v);
    assert!(
        log.contains("[error] ")
            && log.contains("limiting connections by zone \"addr\", client: 127.0.0.1, server: , request: \"GET /static HTTP/1.1\""),
        "{log}"
    );
}

#[test]
fn counted_across_workers() {
    let gate = Gate::new();
    let v = start(2, &gate, "", "limit_conn addr 1;");
    let first = spawn_get(v.port, "/slow");
    gate.wait_arrived(1);
    // New connections land on either worker (reuseport): all refused.
    let rest: Vec<u16> = (0..12).map(|_| v.get("/slow").status).collect();
    assert!(rest.iter().all(|s| *s == 503), "{rest:?}");
    gate.open();
    assert_eq!(first.join().unwrap(), 200);
    assert!(eventually(5, || v.get("/static").status == 200));
    let log = error_log(&v);
    let workers: std::collections::HashSet<&str> = log
        .lines()
        .filter(|l| l.contains("limiting connections"))
        .filter_map(|l| l.split('#').nth(1)?.split(':').next())
        .collect();
    assert_eq!(workers.len(), 2, "{log}");
}

#[test]
fn several_limits_status_and_log_level() {
    let gate = Gate::new();
    let v = start(
        1,
        &gate,
        "limit_conn_zone $server_port zone=site:1m;\n    limit_conn_zone $arg_none zone=none:1m;",
        "limit_conn none 1; limit_conn addr 5; limit_conn site 1; limit_conn_status 429; limit_conn_log_level warn;",
    );
    let first = spawn_get(v.port, "/slow");
    gate.wait_arrived(1);
    // `site` is full; `addr` had room, and gives back what it took.
    assert_eq!(v.get("/static").status, 429);
    assert_eq!(v.get("/static").status, 429);
    gate.open();
    assert_eq!(first.join().unwrap(), 200);
    assert!(eventually(5, || v.get("/static").status == 200));
    let log = error_log(&v);
    assert!(
        log.contains("[warn] ") && log.contains("limiting connections by zone \"site\""),
        "{log}"
    );
    assert!(!log.contains("by zone \"addr\""), "{log}");
}

#[test]
fn dry_run_lets_through() {
    let gate = Gate::new();
    let v = start(1, &gate, "", "limit_conn addr 1; limit_conn_dry_run on;");
    let first = spawn_get(v.port, "/slow");
    gate.wait_arrived(1);
    assert_eq!(v.get("/static").status, 200);
    gate.open();
    assert_eq!(first.join().unwrap(), 200);
    let lines = access_lines(&v, 2);
    assert!(
        lines.contains(&"/static 200 REJECTED_DRY_RUN".to_string()),
        "{lines:?}"
    );
    assert!(
        error_log(&v).contains("limiting connections, dry run, by zone \"addr\""),
        "{}",
        error_log(&v)
    );
}

#[test]
fn reload_keeps_the_counts() {
    let gate = Gate::new();
    let v = start(1, &gate, "", "limit_conn addr 1;");
    let first = spawn_get(v.port, "/slow");
    gate.wait_arrived(1);
    let text = conf(1, gate.port, "", "limit_conn addr 1; add_header X-New 1;");
    v.reload_with(&text, "configuration reloaded");
    // The new configuration sees the request the old one counted.
    assert_eq!(v.get("/static").status, 503);
    gate.open();
    assert_eq!(first.join().unwrap(), 200);
    assert!(eventually(5, || {
        let r = v.get("/static");
        r.status == 200 && r.header("x-new") == Some("1")
    }));
}

#[test]
fn bad_configurations() {
    let dir = TempDir::new("limconn-bad");
    let cases = [
        (
            "limit_conn nope 1;",
            "zero size shared memory zone \"nope\" in",
        ),
        (
            "limit_conn_zone $binary_remote_addr zone=c:1m sync;",
            "needs zone synchronization",
        ),
        (
            "limit_conn_zone $binary_remote_addr zone=c;",
            "invalid zone size \"zone=c\"",
        ),
        (
            "limit_conn_zone $binary_remote_addr zone=c:1m; limit_conn c 0;",
            "invalid number of connections \"0\"",
        ),
        (
            "limit_conn_zone $binary_remote_addr zone=c:1m; limit_conn c 1; limit_conn c 2;",
            "\"limit_conn\" directive is duplicate",
        ),
        (
            "limit_conn_zone $binary_remote_addr zone=c:1m; limit_conn_zone $uri zone=c:1m;",
            "limit_conn_zone \"c\" is already bound to key \"$binary_remote_addr\"",
        ),
        (
            "limit_conn_zone $binary_remote_addr zone=c:1m; limit_req zone=c;",
            "already declared for a different use",
        ),
        (
            "limit_conn_status 600;",
            "value must be between 400 and 599",
        ),
    ];
    for (http, want) in cases {
        let o = test_conf(
            &dir,
            &format!("events {{}}\nhttp {{\n{http}\naccess_log off;\n}}\n"),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{http}");
        assert!(
            err.contains(want) && err.contains("t.conf:3"),
            "{http}: {err}"
        );
    }
}
