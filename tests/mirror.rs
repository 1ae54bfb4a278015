//! mirror: each main request is copied to a real shadow backend (a small
//! server started here) through a location with `proxy_pass`; the copy has
//! the request's method, headers, arguments and, with `mirror_request_body
//! on`, its body; its answer is dropped. The main response goes out without
//! waiting for a slow shadow, and the connection's next request waits for
//! the mirror, as nginx's. Expectations checked against nginx 1.22.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A backend that answers 200 with `text` after `delay`.
fn backend(text: &'static str, delay: Duration) -> (u16, Seen) {
    let s = service(move |_, _| {
        std::thread::sleep(delay);
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        )
    });
    (s.port, s.seen)
}

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        listen 127.0.0.1:{port2} http2;
        root {dir}/html;

        location /api/ {
            mirror /shadow;
            proxy_pass http://127.0.0.1:MAIN;
        }
        location /nobody/ {
            mirror /shadow;
            mirror_request_body off;
            proxy_pass http://127.0.0.1:MAIN;
        }
        location /streamed/ {
            mirror /shadow;
            proxy_request_buffering off;
            proxy_pass http://127.0.0.1:MAIN;
        }
        location /static/ {
            mirror /shadow;
            mirror /shadow2;
            location /static/off/ {
                mirror off;
            }
        }
        location /dav/ {
            mirror /shadow;
            dav_methods PUT;
        }
        location /slow/ {
            mirror /slow-shadow;
        }
        location = /shadow {
            internal;
            proxy_pass http://127.0.0.1:SHADOW$request_uri;
            proxy_set_header X-Mirror yes;
        }
        location = /shadow2 {
            internal;
            proxy_pass http://127.0.0.1:SHADOW/second$request_uri;
        }
        location = /slow-shadow {
            internal;
            proxy_pass http://127.0.0.1:SLOW$request_uri;
        }
    }
}";

struct Setup {
    v: Vireo,
    main: Seen,
    shadow: Seen,
    slow: Seen,
}

fn setup() -> Setup {
    let (main_port, main) = backend("main answer", Duration::ZERO);
    let (shadow_port, shadow) = backend("shadow answer", Duration::ZERO);
    let (slow_port, slow) = backend("slow shadow", Duration::from_millis(1500));
    let dir = TempDir::new("mirror");
    dir.write("html/static/a.txt", "static a");
    dir.write("html/static/off/b.txt", "static b");
    dir.write("html/slow/c.txt", "static c");
    let conf = CONF
        .replace("MAIN", &main_port.to_string())
        .replace("SHADOW", &shadow_port.to_string())
        .replace("SLOW", &slow_port.to_string());
    Setup {
        v: Vireo::start_in(dir, &conf),
        main,
        shadow,
        slow,
    }
}

fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nX-Trace: t1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Wait until `seen` holds `n` requests; they are returned.
fn wait_for(seen: &Seen, n: usize) -> Vec<(String, Vec<u8>)> {
    assert!(
        eventually(5, || seen.lock().unwrap().len() >= n),
        "expected {n} requests, got {:?}",
        seen.lock().unwrap()
    );
    seen.lock().unwrap().clone()
}

fn field<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[test]
fn the_shadow_gets_method_headers_arguments_and_body() {
    let s = setup();
    let r = s.v.request(&post("/api/orders?id=7", "hello body"));
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "main answer");
    let main = wait_for(&s.main, 1);
    assert_eq!(main[0].1, b"hello body");
    let shadow = wait_for(&s.shadow, 1);
    let (head, body) = &shadow[0];
    assert!(head.starts_with("POST /api/orders?id=7 HTTP/1."), "{head}");
    assert_eq!(field(head, "x-trace"), Some("t1"));
    assert_eq!(field(head, "x-mirror"), Some("yes"));
    assert_eq!(field(head, "content-length"), Some("10"));
    assert_eq!(body, b"hello body");
}

#[test]
fn mirror_request_body_off_sends_no_body() {
    let s = setup();
    let r = s.v.request(&post("/nobody/x", "0123456789"));
    assert_eq!(r.status, 200);
    // The main request still reads and sends its body.
    assert_eq!(wait_for(&s.main, 1)[0].1, b"0123456789");
    let shadow = wait_for(&s.shadow, 1);
    let (head, body) = &shadow[0];
    assert!(head.starts_with("POST /nobody/x HTTP/1."), "{head}");
    assert_eq!(field(head, "content-length"), None, "{head}");
    assert_eq!(field(head, "transfer-encoding"), None, "{head}");
    assert!(body.is_empty());
}

#[test]
fn a_body_read_for_the_mirror_still_reaches_an_unbuffered_proxy() {
    let s = setup();
    let r = s.v.request(&post("/streamed/y", "streamed body"));
    assert_eq!(r.status, 200);
    assert_eq!(wait_for(&s.main, 1)[0].1, b"streamed body");
    assert_eq!(wait_for(&s.shadow, 1)[0].1, b"streamed body");
}

#[test]
fn a_put_after_the_mirror_read_the_body_writes_it_whole() {
    let s = setup();
    std::fs::create_dir_all(s.v.dir.path().join("html/dav")).unwrap();
    let r =
        s.v.request(&post("/dav/new.txt", "put body").replacen("POST", "PUT", 1));
    assert_eq!(r.status, 201);
    assert_eq!(s.v.dir.read("html/dav/new.txt"), "put body");
    let shadow = wait_for(&s.shadow, 1);
    assert!(
        shadow[0].0.starts_with("PUT /dav/new.txt HTTP/1."),
        "{}",
        shadow[0].0
    );
    assert_eq!(shadow[0].1, b"put body");
}

#[test]
fn several_mirrors_and_off() {
    let s = setup();
    let r = s.v.get("/static/a.txt?q=1");
    assert_eq!((r.status, r.text().as_str()), (200, "static a"));
    let shadow = wait_for(&s.shadow, 2);
    let mut lines: Vec<&str> = shadow
        .iter()
        .map(|(h, _)| h.lines().next().unwrap())
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "GET /second/static/a.txt?q=1 HTTP/1.0",
            "GET /static/a.txt?q=1 HTTP/1.0"
        ]
    );
    // `mirror off` in the nested location: nothing more is mirrored.
    let r = s.v.get("/static/off/b.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "static b"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.shadow.lock().unwrap().len(), 2);
}

/// Read one response with a Content-Length from a kept-alive connection.
fn read_one(c: &mut TcpStream) -> Resp {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((r, _)) = Resp::parse_one(&buf) {
            return r;
        }
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn the_response_does_not_wait_for_a_slow_mirror_but_the_next_request_does() {
    let s = setup();
    let mut c = s.v.connect();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let start = Instant::now();
    c.write_all(b"GET /slow/c.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let r = read_one(&mut c);
    let first = start.elapsed();
    assert_eq!((r.status, r.text().as_str()), (200, "static c"));
    assert!(first < Duration::from_millis(1000), "{first:?}");
    wait_for(&s.slow, 1);
    // The next request on the connection is answered once the mirror ended.
    c.write_all(b"GET /slow/c.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = read_one(&mut c);
    assert_eq!(r.status, 200);
    assert!(
        start.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn http2_requests_are_mirrored_with_their_body() {
    let s = setup();
    let conf = s.v.dir.read("vireo.conf");
    let at = conf.find(" http2;").unwrap();
    let port2: u16 = conf[conf[..at].rfind(':').unwrap() + 1..at]
        .parse()
        .unwrap();
    let body = "b".repeat(3000);
    let out = std::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "30", "--http2-prior-knowledge"])
        .args(["--data-binary", &body])
        .arg(format!("http://127.0.0.1:{port2}/api/h2?x=2"))
        .output()
        .expect("curl runs");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(out.ends_with("main answer"), "{out}");
    assert_eq!(wait_for(&s.main, 1)[0].1, body.as_bytes());
    let shadow = wait_for(&s.shadow, 1);
    assert!(
        shadow[0].0.starts_with("POST /api/h2?x=2 HTTP/1."),
        "{}",
        shadow[0].0
    );
    assert_eq!(shadow[0].1, body.as_bytes());
}

#[test]
fn directive_errors_name_file_and_line() {
    let dir = TempDir::new("mirror-conf");
    for (line, want) in [
        (
            "mirror /a; mirror off;",
            "\"mirror\" directive is duplicate",
        ),
        (
            "mirror off; mirror /a;",
            "\"mirror\" directive is duplicate",
        ),
        (
            "mirror /a /b;",
            "invalid number of arguments in \"mirror\" directive",
        ),
        (
            "mirror_request_body maybe;",
            "invalid value \"maybe\" in \"mirror_request_body\" directive",
        ),
        (
            "mirror_request_body on; mirror_request_body off;",
            "\"mirror_request_body\" directive is duplicate",
        ),
    ] {
        refused_in_server(&dir, line, want);
    }
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n server {\n  if ($uri) {\n   mirror /a;\n  }\n }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"mirror\" directive is not allowed here") && err.contains("t.conf:5"),
        "{err}"
    );
}
