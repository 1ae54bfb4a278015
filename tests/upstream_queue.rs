//! `queue N [timeout=T]` with `server … max_conns=N` in an upstream block:
//! requests wait in vireo for a peer instead of opening more connections,
//! in order; a full queue and the timeout answer 502; a client that leaves
//! frees its place. Against a real upstream (a thread-per-connection
//! HTTP/1.1 server here, php-fpm for FastCGI) that counts its connections.

mod common;
use common::fpm::Fpm;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An upstream answering `GET /NAME?ms=N` after N ms with body NAME,
/// keep-alive; it records the order of requests and counts connections.
struct Backend {
    port: u16,
    accepted: Arc<AtomicUsize>,
    open: Arc<AtomicUsize>,
    max_open: Arc<AtomicUsize>,
    order: Arc<Mutex<Vec<String>>>,
}

fn backend() -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let b = Backend {
        port: l.local_addr().unwrap().port(),
        accepted: Arc::default(),
        open: Arc::default(),
        max_open: Arc::default(),
        order: Arc::default(),
    };
    let (accepted, open, max_open, order) = (
        b.accepted.clone(),
        b.open.clone(),
        b.max_open.clone(),
        b.order.clone(),
    );
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            accepted.fetch_add(1, Ordering::SeqCst);
            let n = open.fetch_add(1, Ordering::SeqCst) + 1;
            max_open.fetch_max(n, Ordering::SeqCst);
            let (open, order) = (open.clone(), order.clone());
            std::thread::spawn(move || {
                serve(s, &order);
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    b
}

fn serve(s: TcpStream, order: &Mutex<Vec<String>>) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
        }
        let target = line.split(' ').nth(1).unwrap_or("/").to_string();
        let (name, query) = target.split_once('?').unwrap_or((&target, ""));
        let ms: u64 = query
            .strip_prefix("ms=")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        order.lock().unwrap().push(name.to_string());
        std::thread::sleep(Duration::from_millis(ms));
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}",
            name.len()
        );
        if w.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

fn start(port: u16, upstream: &str) -> Vireo {
    Vireo::start(&format!(
        "worker_processes 1;
events {{}}
http {{
    access_log off;
    upstream u {{ server 127.0.0.1:{port} max_conns=1; {upstream} }}
    server {{
        listen 127.0.0.1:{{port}} http2;
        location / {{ proxy_pass http://u; proxy_http_version 1.1; }}
    }}
}}"
    ))
}

/// GET `path` on a new connection in a thread: (status, body, seconds taken).
fn spawn_get(port: u16, path: &str) -> std::thread::JoinHandle<(u16, String, f64)> {
    let path = path.to_string();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let r = Resp::parse(&read_to_close(&mut s)).expect("a response");
        (r.status, r.text(), t0.elapsed().as_secs_f64())
    })
}

#[test]
fn queued_requests_are_served_in_order_on_one_connection() {
    let b = backend();
    let v = start(b.port, "queue 20 timeout=10s; keepalive 1;");
    let t0 = Instant::now();
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let h = spawn_get(v.port, &format!("/r{i}?ms=150"));
            // Arrival order is the order of the queue.
            std::thread::sleep(Duration::from_millis(40));
            h
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let (status, body, _) = c.join().unwrap();
        assert_eq!((status, body.as_str()), (200, format!("/r{i}").as_str()));
    }
    assert!(t0.elapsed() >= Duration::from_millis(6 * 150));
    let order = b.order.lock().unwrap().clone();
    let want: Vec<String> = (0..6).map(|i| format!("/r{i}")).collect();
    assert_eq!(order, want, "served first come, first served");
    // One connection, kept alive and handed from one request to the next.
    assert_eq!(b.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(b.max_open.load(Ordering::SeqCst), 1);
}

#[test]
fn without_queue_max_conns_refuses_at_once() {
    let b = backend();
    let v = start(b.port, "");
    let slow = spawn_get(v.port, "/slow?ms=600");
    std::thread::sleep(Duration::from_millis(150));
    let r = v.get("/other");
    assert_eq!(r.status, 502);
    assert_eq!(slow.join().unwrap().0, 200);
    assert!(
        v.stderr()
            .contains("no live upstreams while connecting to upstream")
    );
}

#[test]
fn full_queue_and_timeout_answer_502_naming_the_upstream() {
    let b = backend();
    let v = start(b.port, "queue 1 timeout=300ms;");
    let slow = spawn_get(v.port, "/slow?ms=1500");
    std::thread::sleep(Duration::from_millis(150));
    // The one place in the queue: it waits 300 ms, then 502.
    let waiting = spawn_get(v.port, "/waits");
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let r = v.get("/full");
    assert_eq!(r.status, 502);
    assert!(t0.elapsed() < Duration::from_millis(200), "refused at once");
    let (status, _, took) = waiting.join().unwrap();
    assert_eq!(status, 502);
    assert!((0.25..1.2).contains(&took), "waited the timeout: {took}");
    assert_eq!(slow.join().unwrap().0, 200);
    let log = v.stderr();
    assert!(
        log.contains("upstream queue is full while connecting to upstream")
            && log.contains("upstream queue timed out while connecting to upstream")
            && log.contains("upstream: \"http://u/"),
        "{log}"
    );
    // Neither ever reached the upstream.
    assert_eq!(*b.order.lock().unwrap(), vec!["/slow".to_string()]);
}

#[test]
fn a_client_that_leaves_frees_its_place() {
    let b = backend();
    let v = start(b.port, "queue 1 timeout=10s;");
    let slow = spawn_get(v.port, "/slow?ms=1000");
    std::thread::sleep(Duration::from_millis(150));
    // An HTTP/2 request that gives up while queued (curl resets the stream
    // and closes the connection).
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "--http2-prior-knowledge",
            "-m",
            "0.3",
        ])
        .arg(format!("http://127.0.0.1:{}/gone", v.port))
        .output()
        .unwrap();
    assert!(!out.status.success(), "curl gave up");
    // Its place is free: this one queues instead of finding the queue full.
    let next = spawn_get(v.port, "/next");
    assert_eq!(slow.join().unwrap().0, 200);
    let (status, body, _) = next.join().unwrap();
    assert_eq!((status, body.as_str()), (200, "/next"));
    assert_eq!(
        *b.order.lock().unwrap(),
        vec!["/slow".to_string(), "/next".to_string()],
        "the request that left never reached the upstream"
    );
}

#[test]
fn an_http1_client_that_closes_leaves_the_queue() {
    let b = backend();
    let v = start(b.port, "queue 1 timeout=10s;");
    let slow = spawn_get(v.port, "/slow?ms=2500");
    std::thread::sleep(Duration::from_millis(150));
    let mut gone = v.connect();
    gone.write_all(b"GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    drop(gone);
    // Within the check interval (1 s) the place is free again.
    std::thread::sleep(Duration::from_millis(1300));
    let next = spawn_get(v.port, "/next");
    assert_eq!(slow.join().unwrap().0, 200);
    let (status, body, _) = next.join().unwrap();
    assert_eq!((status, body.as_str()), (200, "/next"), "{}", v.stderr());
    assert_eq!(
        *b.order.lock().unwrap(),
        vec!["/slow".to_string(), "/next".to_string()]
    );
}

#[test]
fn fastcgi_pass_waits_in_the_queue() {
    let Some(fpm) = Fpm::start(4) else { return };
    let dir = TempDir::new("fcgiq");
    dir.write(
        "html/nap.php",
        "<?php usleep(200000); echo getmypid(), ' ', $_GET['n'];",
    );
    let v = Vireo::start_in(
        dir,
        &format!(
            "worker_processes 1;
events {{}}
http {{
    access_log off;
    upstream php {{ server 127.0.0.1:{} max_conns=1; queue 10 timeout=10s; keepalive 1; }}
    server {{
        listen 127.0.0.1:{{port}};
        root {{dir}}/html;
        location ~ \\.php$ {{
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_param QUERY_STRING $query_string;
            fastcgi_param REQUEST_METHOD $request_method;
            fastcgi_keep_conn on;
            fastcgi_pass php;
        }}
    }}
}}",
            fpm.port
        ),
    );
    let clients: Vec<_> = (0..4)
        .map(|i| {
            let h = spawn_get(v.port, &format!("/nap.php?n={i}"));
            std::thread::sleep(Duration::from_millis(40));
            h
        })
        .collect();
    let mut pids = Vec::new();
    let mut took = Vec::new();
    for (i, c) in clients.into_iter().enumerate() {
        let (status, body, t) = c.join().unwrap();
        assert_eq!(status, 200, "{}", v.stderr());
        let (pid, n) = body.split_once(' ').unwrap();
        assert_eq!(n, i.to_string());
        pids.push(pid.to_string());
        took.push(t);
    }
    // One kept connection: one php-fpm child served them all, one at a time.
    assert!(pids.iter().all(|p| *p == pids[0]), "{pids:?}");
    assert!(took.windows(2).all(|w| w[0] < w[1]), "in order: {took:?}");
    // The fourth started 120 ms after the first and waited for three 200 ms
    // scripts before its own (0.68 s); side by side it would take 0.2 s.
    assert!(took[3] >= 0.6, "one at a time: {took:?}");
}

#[test]
fn bad_queue_configurations() {
    let dir = TempDir::new("queueconf");
    let cases = [
        (
            "upstream u { server 127.0.0.1:1; queue; }",
            "invalid number of arguments",
        ),
        (
            "upstream u { server 127.0.0.1:1; queue x; }",
            "invalid number \"x\"",
        ),
        (
            "upstream u { server 127.0.0.1:1; queue 0; }",
            "invalid parameter \"0\"",
        ),
        (
            "upstream u { server 127.0.0.1:1; queue 5 timeout=soon; }",
            "invalid parameter \"timeout=soon\"",
        ),
        (
            "upstream u { server 127.0.0.1:1; queue 5 wait=1s; }",
            "invalid parameter \"wait=1s\"",
        ),
        ("queue 5;", "unknown directive \"queue\""),
    ];
    for (conf, want) in cases {
        let out = test_conf(&dir, &format!("events {{}}\nhttp {{\n{conf}\n}}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want) && err.contains("t.conf:3"),
            "{conf}: {err}"
        );
    }
    let out = test_conf(
        &dir,
        "events {} http { access_log off; upstream u { server 127.0.0.1:1 max_conns=4; queue 100 timeout=70s; } }",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
