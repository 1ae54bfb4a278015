//! Reverse proxy: URI rules, headers, keep-alive pools, balancers, failover,
//! errors (502/504), truncated bodies, streaming, WebSocket, health checks.
//! The upstreams are small HTTP servers started by the tests.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

type Handler = Arc<dyn Fn(&str, &[u8], u16) -> Option<Vec<u8>> + Send + Sync>;

/// A test upstream: counts connections and requests; `handler` gets the
/// head (text) and body and returns the full response bytes (`None`: close
/// without answering).
struct Backend {
    port: u16,
    conns: Arc<AtomicUsize>,
    reqs: Arc<AtomicUsize>,
}

fn backend(handler: Handler) -> Backend {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let conns = Arc::new(AtomicUsize::new(0));
    let reqs = Arc::new(AtomicUsize::new(0));
    let (c2, r2) = (conns.clone(), reqs.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            c2.fetch_add(1, Ordering::SeqCst);
            let (h, r) = (handler.clone(), r2.clone());
            std::thread::spawn(move || serve(s, h, r, port));
        }
    });
    Backend { port, conns, reqs }
}

fn serve(s: TcpStream, h: Handler, reqs: Arc<AtomicUsize>, port: u16) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    loop {
        let Some(head) = read_request_head(&mut r) else {
            return;
        };
        reqs.fetch_add(1, Ordering::SeqCst);
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        if let Some(cl) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
        {
            let n: usize = cl.trim().parse().unwrap();
            body.resize(n, 0);
            r.read_exact(&mut body).unwrap();
        } else if lower.contains("transfer-encoding: chunked") {
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                let n = usize::from_str_radix(line.trim(), 16).unwrap();
                let mut chunk = vec![0; n + 2];
                r.read_exact(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        match h(&head, &body, port) {
            Some(resp) => {
                if w.write_all(&resp).is_err() {
                    return;
                }
            }
            None => return,
        }
        if lower.contains("connection: close") || lower.starts_with("get /close") {
            return;
        }
    }
}

/// Read a request head into `buf` (what follows it may be read too); false
/// if the connection ends first.
fn read_head(s: &mut TcpStream, buf: &mut [u8]) -> bool {
    let mut n = 0;
    while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf[n..]) {
            Ok(0) | Err(_) => return false,
            Ok(m) => n += m,
        }
    }
    true
}

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\nX-Backend: yes\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Echo: the request head as the body, plus the port.
fn echo() -> Handler {
    Arc::new(|head, body, port| {
        Some(ok(&format!(
            "port={port}\n{head}body={}",
            String::from_utf8_lossy(body)
        )))
    })
}

fn first_line(r: &Resp) -> String {
    r.text().lines().nth(1).unwrap_or("").to_string()
}

#[test]
fn uri_rules_and_headers() {
    let b = backend(echo());
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location /plain/ {{ proxy_pass http://127.0.0.1:{p}; }}
        location /with/ {{ proxy_pass http://127.0.0.1:{p}/other/; }}
        location /root/ {{ proxy_pass http://127.0.0.1:{p}/; }}
        location ~ ^/re/(.*)$ {{ proxy_pass http://127.0.0.1:{p}; }}
        location /rw/ {{
            rewrite ^/rw/(.*)$ /changed/$1 break;
            proxy_pass http://127.0.0.1:{p}/ignored/;
        }}
        location /hdr/ {{
            proxy_pass http://127.0.0.1:{p};
            proxy_set_header X-Real-IP $remote_addr;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header Host $host;
            proxy_hide_header X-Backend;
        }}
    }}
}}",
        p = b.port
    ));
    let r = v.get("/plain/a%20b?x=1");
    assert_eq!(r.status, 200, "{}", v.stderr());
    assert_eq!(first_line(&r), "GET /plain/a%20b?x=1 HTTP/1.0");
    assert!(r.text().contains(&format!("Host: 127.0.0.1:{}", b.port)));
    assert!(r.text().contains("Connection: close"));
    assert_eq!(r.header("x-backend"), Some("yes"));
    assert_eq!(
        first_line(&v.get("/with/x/y?q")),
        "GET /other/x/y?q HTTP/1.0"
    );
    assert_eq!(first_line(&v.get("/root/z")), "GET /z HTTP/1.0");
    assert_eq!(first_line(&v.get("/re/k?a=b")), "GET /re/k?a=b HTTP/1.0");
    assert_eq!(first_line(&v.get("/rw/q")), "GET /changed/q HTTP/1.0");
    // `location /with/` asked as `/with`: a redirect, as nginx.
    assert_eq!(v.get("/with").status, 301);

    let r = v.request(
        "GET /hdr/ HTTP/1.1\r\nHost: example.org\r\nX-Forwarded-For: 10.0.0.1\r\nConnection: close, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: 5\r\nX-Keep: 2\r\n\r\n",
    );
    let t = r.text();
    assert!(t.contains("X-Real-IP: 127.0.0.1\r\n"), "{t}");
    assert!(
        t.contains("X-Forwarded-For: 10.0.0.1, 127.0.0.1\r\n"),
        "{t}"
    );
    assert!(t.contains("X-Forwarded-Proto: http\r\n"), "{t}");
    assert!(t.contains("Host: example.org\r\n"), "{t}");
    assert!(t.contains("X-Keep: 2\r\n"), "{t}");
    assert!(!t.contains("X-Drop") && !t.contains("Keep-Alive"), "{t}");
    assert_eq!(r.header("x-backend"), None);
}

#[test]
fn request_bodies_are_reframed() {
    let b = backend(echo());
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location / {{ proxy_pass http://127.0.0.1:{p}; proxy_http_version 1.1; }}
        location /off {{ proxy_pass http://127.0.0.1:{p}; proxy_http_version 1.1; proxy_request_buffering off; }}
    }}
}}",
        p = b.port
    ));
    let r = v.request(
        "POST /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert!(r.text().contains("Content-Length: 5\r\n"), "{}", r.text());
    assert!(r.text().ends_with("body=hello"));
    // Chunked from the client: buffered, then sent with its length.
    let chunked = "HTTP/1.1\r\nHost: a\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
    let r = v.request(&format!("POST /x {chunked}"));
    assert!(r.text().ends_with("body=abcde"), "{}", r.text());
    assert!(r.text().contains("Content-Length: 5\r\n"), "{}", r.text());
    // Unbuffered to an HTTP/1.1 upstream: streamed as chunked.
    let r = v.request(&format!("POST /off {chunked}"));
    assert!(r.text().ends_with("body=abcde"), "{}", r.text());
    assert!(
        r.text().contains("Transfer-Encoding: chunked"),
        "{}",
        r.text()
    );
}

/// Everything proxied to one peer with a keep-alive pool of 4.
fn keepalive_conf(peer: u16) -> String {
    format!(
        "events {{}}
http {{
    access_log off;
    upstream app {{ server 127.0.0.1:{peer}; keepalive 4; }}
    server {{
        listen 127.0.0.1:{{port}};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
    }}
}}"
    )
}

#[test]
fn keepalive_reuses_upstream_connections() {
    let b = backend(echo());
    let v = Vireo::start(&keepalive_conf(b.port));
    let mut s = v.connect();
    for _ in 0..30 {
        s.write_all(b"GET /k HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while Resp::parse_one(&got).is_none_or(|(r, _)| r.body.len() < 10) {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(Resp::parse(&got).unwrap().status, 200);
    }
    assert_eq!(b.reqs.load(Ordering::SeqCst), 30);
    assert_eq!(
        b.conns.load(Ordering::SeqCst),
        1,
        "one upstream connection reused"
    );
}

/// A pooled connection on which the peer spoke out of turn or closed while
/// it sat idle is not reused (its readiness shows it; no request is lost).
#[test]
fn idle_upstream_connections_that_spoke_or_closed_are_dropped() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let conns = Arc::new(AtomicUsize::new(0));
    let c2 = conns.clone();
    std::thread::spawn(move || {
        for (i, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { return };
            c2.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                if !read_head(&mut s, &mut buf) {
                    return;
                }
                let body = format!("conn{i}");
                let _ = s.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                );
                std::thread::sleep(Duration::from_millis(100));
                if i % 2 == 0 {
                    // Out of turn: a reply nobody asked for, connection kept open.
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTALE");
                    std::thread::sleep(Duration::from_secs(5));
                }
                // Odd connections: closed.
            });
        }
    });
    let v = Vireo::start(&keepalive_conf(port));
    for i in 0..4 {
        let r = v.get("/x");
        assert_eq!(r.status, 200);
        assert_eq!(String::from_utf8_lossy(&r.body), format!("conn{i}"));
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(conns.load(Ordering::SeqCst), 4);
}

/// As in nginx, worker_connections counts upstream connections too: with a
/// single slot the client has it, and the proxied request waits for one
/// until its connect timeout, then gets a 500 (a local shortage, not held
/// against the peer).
#[test]
fn upstream_connections_count_in_worker_connections() {
    let b = backend(echo());
    let conf = |n: u32| {
        format!(
            "events {{ worker_connections {n}; }}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location / {{ proxy_pass http://127.0.0.1:{p}; proxy_connect_timeout 1s; }}
    }}
}}",
            p = b.port
        )
    };
    let v = Vireo::start(&conf(1));
    assert_eq!(v.get("/a").status, 500);
    assert!(eventually(10, || v.stderr().contains(
        "1 worker_connections are not enough while connecting to upstream"
    )));
    assert_eq!(b.conns.load(Ordering::SeqCst), 0);
    let v = Vireo::start(&conf(2));
    assert_eq!(v.get("/a").status, 200);
}

fn ports_of(v: &Vireo, n: usize, path: &str) -> Vec<u16> {
    (0..n)
        .map(|_| {
            let r = v.get(path);
            assert_eq!(r.status, 200, "{}", v.stderr());
            r.text()
                .lines()
                .next()
                .unwrap()
                .strip_prefix("port=")
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn balancers_spread_load() {
    let bs: Vec<Backend> = (0..3).map(|_| backend(echo())).collect();
    let p: Vec<u16> = bs.iter().map(|b| b.port).collect();
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    upstream rr {{ server 127.0.0.1:{a} weight=3; server 127.0.0.1:{b} weight=2; server 127.0.0.1:{c}; }}
    upstream lc {{ least_conn; server 127.0.0.1:{a}; server 127.0.0.1:{b}; }}
    upstream ih {{ ip_hash; server 127.0.0.1:{a}; server 127.0.0.1:{b}; server 127.0.0.1:{c}; }}
    upstream hs {{ hash $arg_k consistent; server 127.0.0.1:{a}; server 127.0.0.1:{b}; server 127.0.0.1:{c}; }}
    upstream rd {{ random two; server 127.0.0.1:{a}; server 127.0.0.1:{b}; }}
    server {{
        listen 127.0.0.1:{{port}};
        location /rr {{ proxy_pass http://rr; }}
        location /lc {{ proxy_pass http://lc; }}
        location /ih {{ proxy_pass http://ih; }}
        location /hs {{ proxy_pass http://hs; }}
        location /rd {{ proxy_pass http://rd; }}
    }}
}}",
        a = p[0],
        b = p[1],
        c = p[2]
    ));
    let count = |ports: &[u16], p: u16| ports.iter().filter(|&&x| x == p).count();
    let rr = ports_of(&v, 60, "/rr");
    assert_eq!(
        [count(&rr, p[0]), count(&rr, p[1]), count(&rr, p[2])],
        [30, 20, 10]
    );
    let lc = ports_of(&v, 20, "/lc");
    assert_eq!(count(&lc, p[0]), 10, "sequential least_conn alternates");
    let ih = ports_of(&v, 10, "/ih");
    assert!(ih.iter().all(|&x| x == ih[0]), "ip_hash sticks");
    let a = ports_of(&v, 5, "/hs?k=alpha");
    assert!(a.iter().all(|&x| x == a[0]), "hash sticks per key");
    let spread: std::collections::HashSet<u16> = (0..30)
        .flat_map(|i| ports_of(&v, 1, &format!("/hs?k=key{i}")))
        .collect();
    assert!(spread.len() >= 2, "keys spread over peers");
    let rd = ports_of(&v, 40, "/rd");
    assert!(count(&rd, p[0]) > 5 && count(&rd, p[1]) > 5, "{rd:?}");
}

#[test]
fn failover_next_upstream_and_recovery() {
    let good = backend(echo());
    let dead = closed_port();
    let flaky = backend(Arc::new(|_, _, _| {
        Some(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy".to_vec())
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    upstream pool {{ server 127.0.0.1:{dead} max_fails=1 fail_timeout=1s; server 127.0.0.1:{g}; }}
    upstream st {{ server 127.0.0.1:{f}; server 127.0.0.1:{g}; }}
    upstream st1 {{ server 127.0.0.1:{f} max_fails=0; server 127.0.0.1:{g} max_fails=0; }}
    upstream only_dead {{ server 127.0.0.1:{dead}; }}
    server {{
        listen 127.0.0.1:{{port}};
        location /pool {{ proxy_pass http://pool; }}
        location /st {{ proxy_pass http://st; proxy_next_upstream error timeout http_503; }}
        location /st1 {{ proxy_pass http://st1; proxy_next_upstream error http_503; proxy_next_upstream_tries 1; }}
        location /nost {{ proxy_pass http://st; }}
        location /dead {{ proxy_pass http://only_dead; }}
    }}
}}",
        g = good.port,
        f = flaky.port
    ));
    // Every request succeeds: the dead peer fails over, then is skipped.
    for _ in 0..6 {
        assert_eq!(v.get("/pool").status, 200);
    }
    // A 503 from one peer is retried on the other.
    for _ in 0..4 {
        assert_eq!(v.get("/st").status, 200);
    }
    // With one try only, the 503 goes to the client as the upstream sent it.
    let codes: Vec<u16> = (0..4).map(|_| v.get("/st1").status).collect();
    assert!(codes.contains(&503), "{codes:?}");
    // No live upstream: 502 with an error_log line naming the peer.
    let r = v.get("/dead");
    assert_eq!(r.status, 502);
    assert!(
        eventually(2, || v
            .stderr()
            .contains(&format!("upstream: \"http://127.0.0.1:{dead}/dead\""))),
        "{}",
        v.stderr()
    );
    // After fail_timeout the dead peer is tried again (and fails over again).
    std::thread::sleep(Duration::from_millis(1100));
    // Each worker balances on its own, so keep asking until one of them
    // retries the dead peer; every request must still succeed.
    let before = v.stderr().matches("Connection refused").count();
    assert!(eventually(10, || {
        assert_eq!(v.get("/pool").status, 200);
        v.stderr().matches("Connection refused").count() > before
    }));
}

#[test]
fn garbage_slow_and_truncated_upstreams() {
    let garbage = backend(Arc::new(|_, _, _| {
        Some(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec())
    }));
    let junk = backend(Arc::new(|_, _, _| {
        Some(b"\x00\x01 not http at all\r\n\r\n".to_vec())
    }));
    let slow = backend(Arc::new(|_, _, _| {
        std::thread::sleep(Duration::from_secs(3));
        Some(ok("late"))
    }));
    let cut = backend(Arc::new(|_, _, _| {
        let mut r = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n".to_vec();
        r.extend(std::iter::repeat_n(b'x', 5000));
        Some(r)
    }));
    let cut_chunked = backend(Arc::new(|_, _, _| {
        Some(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n".to_vec())
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location /garbage {{ proxy_pass http://127.0.0.1:{g}; }}
        location /junk {{ proxy_pass http://127.0.0.1:{j}; }}
        location /slow {{ proxy_pass http://127.0.0.1:{s}; proxy_read_timeout 500ms; }}
        location /cut {{ proxy_pass http://127.0.0.1:{c}; }}
        location /cutc {{ proxy_pass http://127.0.0.1:{cc}; proxy_http_version 1.1; }}
    }}
}}",
        g = garbage.port,
        j = junk.port,
        s = slow.port,
        c = cut.port,
        cc = cut_chunked.port
    ));
    assert_eq!(v.get("/garbage").status, 502);
    assert_eq!(v.get("/junk").status, 502);
    let t = std::time::Instant::now();
    assert_eq!(v.get("/slow").status, 504);
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(v.stderr().contains("upstream timed out"), "{}", v.stderr());
    // Closed mid-body: the client gets fewer bytes than announced, never others.
    let raw = v.raw(b"GET /cut HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = Resp::parse(&raw).unwrap();
    assert_eq!(r.header("content-length"), Some("100000"));
    assert_eq!(r.body.len(), 5000);
    assert!(r.body.iter().all(|&b| b == b'x'));
    // Chunked to the client: no terminating chunk after a cut.
    let raw = v.raw(b"GET /cutc HTTP/1.1\r\nHost: a\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("hello"), "{text}");
    assert!(!text.ends_with("0\r\n\r\n"), "{text}");
    assert!(v.stderr().contains("prematurely closed"), "{}", v.stderr());
}

#[test]
fn redirect_and_cookie_rewriting() {
    let b = backend(Arc::new(|head, _, port| {
        let path = head.split(' ').nth(1).unwrap().to_string();
        Some(
            format!(
                "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{port}/app/next{path}\r\nRefresh: 5; url=http://127.0.0.1:{port}/app/next{path}\r\nSet-Cookie: s=1; Domain=.inner.test; Path=/app/x\r\nContent-Length: 0\r\n\r\n"
            )
            .into_bytes(),
        )
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location /one/ {{
            proxy_pass http://127.0.0.1:{p}/app/;
            proxy_cookie_domain inner.test outer.test;
            proxy_cookie_path /app/ /one/;
        }}
        location /off/ {{ proxy_pass http://127.0.0.1:{p}/app/; proxy_redirect off; }}
        location /exp/ {{ proxy_pass http://127.0.0.1:{p}/app/; proxy_redirect http://127.0.0.1:{p}/app/ http://front.test/x/; }}
        location /var/ {{
            set $to /v/;
            set $from http://127.0.0.1:{p}/app/next/;
            proxy_pass http://127.0.0.1:{p}/app/;
            proxy_redirect $from $to;
        }}
        location /re/ {{
            proxy_pass http://127.0.0.1:{p}/app/;
            proxy_redirect ~*^HTTP://[^/]+/(app)/next/(.*)$ /r/$2/$1;
        }}
        location /flags/ {{
            proxy_pass http://127.0.0.1:{p}/app/;
            proxy_cookie_flags other secure;
            proxy_cookie_flags $arg_c secure httponly samesite=lax;
            location /flags/re/ {{
                proxy_pass http://127.0.0.1:{p}/app/;
                proxy_cookie_domain inner.test outer.test;
                proxy_cookie_flags ~^S$ nosecure $arg_f;
            }}
            location /flags/off/ {{
                proxy_pass http://127.0.0.1:{p}/app/;
                proxy_cookie_flags off;
            }}
        }}
    }}
}}",
        p = b.port
    ));
    let r = v.get("/one/a");
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location").unwrap(),
        format!("http://localhost:{}/one/next/app/a", v.port)
    );
    assert_eq!(
        r.header("set-cookie"),
        Some("s=1; Domain=outer.test; Path=/one/x")
    );
    let r = v.get("/off/a");
    assert!(
        r.header("location")
            .unwrap()
            .starts_with("http://127.0.0.1:")
    );
    let r = v.get("/exp/a");
    assert_eq!(r.header("location"), Some("http://front.test/x/next/app/a"));
    // Variables in both parts; a relative Location is made absolute, a
    // Refresh URL is not.
    let r = v.get("/var/a");
    let origin = format!("http://localhost:{}", v.port);
    assert_eq!(
        r.header("location"),
        Some(format!("{origin}/v/app/a").as_str())
    );
    assert_eq!(r.header("refresh"), Some("5; url=/v/app/a"));
    let r = v.get("/one/a");
    assert_eq!(r.header("refresh"), Some("5; url=/one/next/app/a"));
    // A regex replaces the whole value, with its captures.
    let r = v.get("/re/a");
    assert_eq!(
        r.header("location"),
        Some(format!("{origin}/r/app/a/app").as_str())
    );
    assert_eq!(r.header("refresh"), Some("5; url=/r/app/a/app"));
    // proxy_cookie_flags: the first rule for the cookie applies.
    let cookie = |path: &str| v.get(path).header("set-cookie").map(str::to_string);
    let plain = "s=1; Domain=.inner.test; Path=/app/x";
    assert_eq!(cookie("/flags/a").as_deref(), Some(plain));
    assert_eq!(
        cookie("/flags/a?c=S").as_deref(),
        Some("s=1; Domain=.inner.test; Path=/app/x; Secure; HttpOnly; SameSite=Lax")
    );
    assert_eq!(
        cookie("/flags/re/a?f=samesite=strict").as_deref(),
        Some("s=1; Domain=outer.test; Path=/app/x; SameSite=Strict")
    );
    assert_eq!(cookie("/flags/off/a?c=s").as_deref(), Some(plain));
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .parse()
        .unwrap()
}

#[test]
fn streams_100_mb_both_ways_with_small_memory() {
    const SIZE: u64 = 100 << 20;
    // Upstream: a download of SIZE bytes, or counts an upload.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let mut s = s.unwrap();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let Some(head) = read_request_head(&mut r) else {
                    return;
                };
                if head.starts_with("GET") {
                    s.write_all(
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {SIZE}\r\n\r\n").as_bytes(),
                    )
                    .unwrap();
                    let chunk = vec![b'd'; 1 << 20];
                    for _ in 0..100 {
                        if s.write_all(&chunk).is_err() {
                            return;
                        }
                    }
                } else {
                    let mut n = 0u64;
                    let mut buf = vec![0u8; 1 << 16];
                    while n < SIZE {
                        let k = r.read(&mut buf).unwrap();
                        if k == 0 {
                            break;
                        }
                        n += k as u64;
                    }
                    let body = n.to_string();
                    s.write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .unwrap();
                }
            });
        }
    });
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    client_max_body_size 0;
    server {{
        listen 127.0.0.1:{{port}};
        location / {{ proxy_pass http://127.0.0.1:{port}; }}
    }}
}}"
    ));
    let base = rss_kb(v.pid());
    // Download, read slowly at first so backpressure matters.
    let mut s = v.connect();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mid = rss_kb(v.pid());
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    assert!(total > SIZE && total < SIZE + 1024, "{total}");
    // Upload.
    let mut s = v.connect();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(
        format!(
            "PUT /up HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {SIZE}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let chunk = vec![b'u'; 1 << 20];
    for _ in 0..100 {
        s.write_all(&chunk).unwrap();
    }
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!(r.text(), SIZE.to_string());
    let after = rss_kb(v.pid());
    assert!(
        mid < base + 16 * 1024 && after < base + 16 * 1024,
        "RSS grew: {base} → {mid} → {after} kB"
    );
}

/// A WebSocket-style upstream: answers an upgrade with 101, then echoes bytes
/// back upper-cased. Its port, and a count of requests whose bytes arrived
/// before the 101 was sent (there must be none).
fn upgrade_backend() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let early = Arc::new(AtomicUsize::new(0));
    let early2 = early.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let mut s = s.unwrap();
            let early = early2.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let h = String::from_utf8_lossy(&head).to_ascii_lowercase();
                // Bytes the client sent early must not be here before our 101.
                s.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                let mut probe = [0u8; 64];
                if let Ok(n) = s.read(&mut probe)
                    && n > 0
                {
                    early.fetch_add(1, Ordering::SeqCst);
                }
                if !h.contains("upgrade: websocket") || !h.contains("connection: upgrade") {
                    s.write_all(b"HTTP/1.1 400 Bad\r\nContent-Length: 0\r\n\r\n")
                        .unwrap();
                    return;
                }
                s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                    .unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut buf = [0u8; 4096];
                loop {
                    let n = match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let up: Vec<u8> = buf[..n].to_ascii_uppercase();
                    if s.write_all(&up).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, early)
}

#[test]
fn websocket_tunnel() {
    let (port, early) = upgrade_backend();
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location /ws {{
            proxy_pass http://127.0.0.1:{port};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection \"upgrade\";
            proxy_read_timeout 2s;
        }}
    }}
}}"
    ));
    let mut s = v.connect();
    // The head and early bytes in one write: those bytes must wait for the 101.
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nearly",
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("EARLY") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_string();
    assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
    assert!(text.contains("Upgrade: websocket"), "{text}");
    assert!(text.contains("Connection: upgrade"), "{text}");
    assert_eq!(early.load(Ordering::SeqCst), 0);
    for msg in ["hello", "world"] {
        s.write_all(msg.as_bytes()).unwrap();
        let n = s.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], msg.to_ascii_uppercase().as_bytes());
    }
    // Idle timeout closes the tunnel.
    let t = std::time::Instant::now();
    assert_eq!(s.read(&mut buf).unwrap_or(0), 0);
    assert!(t.elapsed() < Duration::from_secs(8));
}

/// Open a WebSocket tunnel through `v` and check it echoes.
fn open_tunnel(v: &Vireo) -> TcpStream {
    let mut s = v.connect();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 101 "));
    assert!(echoes(&mut s, "open"));
    s
}

/// One message through a tunnel: true when it comes back upper-cased.
fn echoes(s: &mut TcpStream, msg: &str) -> bool {
    if s.write_all(msg.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 256];
    matches!(s.read(&mut buf), Ok(n) if buf[..n] == *msg.to_ascii_uppercase().as_bytes())
}

#[test]
fn websocket_tunnels_survive_reloads_until_the_drain_timeout() {
    let (port, _) = upgrade_backend();
    let template = format!(
        "worker_processes {{workers}};
worker_shutdown_timeout 2s;
pid logs/v.pid;
error_log logs/error.log notice;
events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location /ws {{
            proxy_pass http://127.0.0.1:{port};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection \"upgrade\";
            proxy_read_timeout 60s;
        }}
        location = /v {{ return 200 \"{{version}}\"; }}
    }}
}}"
    );
    let conf = |workers: usize, version: usize| {
        template
            .replace("{workers}", &workers.to_string())
            .replace("{version}", &version.to_string())
    };
    let mut v = Vireo::start(&conf(2, 0));
    let mut tunnels: Vec<TcpStream> = (0..4).map(|_| open_tunnel(&v)).collect();
    // Reloads that keep the workers: every tunnel carries on, however long.
    for i in 1..=3 {
        let text = fill(&conf(2, i), v.dir.path(), v.port, 0);
        v.dir.write("vireo.conf", text);
        v.signal(libc::SIGHUP);
        assert!(eventually(5, || v.get("/v").text() == i.to_string()));
        for (n, t) in tunnels.iter_mut().enumerate() {
            assert!(
                echoes(t, &format!("reload {i} tunnel {n}")),
                "tunnel {n} cut by reload {i}"
            );
        }
    }
    // A reload retiring a worker: its tunnels go on until worker_shutdown_timeout
    // (2 s), then close; the other worker's stay.
    let text = fill(&conf(1, 4), v.dir.path(), v.port, 0);
    v.dir.write("vireo.conf", text);
    let t = std::time::Instant::now();
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || v.get("/v").text() == "4"));
    for (n, s) in tunnels.iter_mut().enumerate() {
        assert!(
            echoes(s, &format!("retired {n}")),
            "tunnel {n} cut by the retiring reload"
        );
    }
    std::thread::sleep(Duration::from_millis(1200).saturating_sub(t.elapsed()));
    for (n, s) in tunnels.iter_mut().enumerate() {
        assert!(
            echoes(s, "still"),
            "tunnel {n} cut before the drain timeout"
        );
    }
    std::thread::sleep(Duration::from_millis(3000).saturating_sub(t.elapsed()));
    let live: Vec<bool> = tunnels.iter_mut().map(|s| echoes(s, "later")).collect();
    let cut = live.iter().filter(|l| !**l).count();
    eprintln!("{cut} of {} tunnels were on the retired worker", live.len());
    let log = v.dir.read("logs/error.log");
    assert_eq!(
        cut > 0,
        log.contains("worker_shutdown_timeout: closing"),
        "{live:?}\n{log}"
    );
    // QUIT: every tunnel left still works during the drain, and is closed at
    // worker_shutdown_timeout.
    tunnels = tunnels
        .into_iter()
        .zip(live)
        .filter_map(|(s, l)| l.then_some(s))
        .collect();
    tunnels.push(open_tunnel(&v));
    let t = std::time::Instant::now();
    v.signal(libc::SIGQUIT);
    std::thread::sleep(Duration::from_millis(1000));
    for (n, s) in tunnels.iter_mut().enumerate() {
        assert!(
            echoes(s, "draining"),
            "tunnel {n} cut before the drain timeout"
        );
    }
    let st = v
        .wait_exit(10)
        .expect("exits after worker_shutdown_timeout");
    assert_eq!(st.code(), Some(0));
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(6),
        "{took:?}"
    );
    for s in &mut tunnels {
        assert!(!echoes(s, "gone"));
    }
}

#[test]
fn active_health_checks_take_peers_out_and_back() {
    let healthy = Arc::new(AtomicUsize::new(1));
    let h2 = healthy.clone();
    let sick = backend(Arc::new(move |head, _, port| {
        if head.starts_with("GET /health") && h2.load(Ordering::SeqCst) == 0 {
            return Some(b"HTTP/1.0 500 No\r\nContent-Length: 0\r\n\r\n".to_vec());
        }
        Some(ok(&format!("port={port}\n")))
    }));
    let other = backend(echo());
    let v = Vireo::start(&format!(
        "error_log stderr notice;
events {{}}
http {{
    access_log off;
    upstream app {{
        server 127.0.0.1:{a};
        server 127.0.0.1:{b};
        health_check interval=100ms path=/health rise=2 fall=2 status=200;
    }}
    server {{
        listen 127.0.0.1:{{port}};
        location / {{ proxy_pass http://app; }}
    }}
}}",
        a = sick.port,
        b = other.port
    ));
    let both = ports_of(&v, 4, "/");
    assert!(both.contains(&sick.port) && both.contains(&other.port));
    healthy.store(0, Ordering::SeqCst);
    assert!(eventually(5, || v.stderr().contains("out of service")));
    assert!(ports_of(&v, 6, "/").iter().all(|&p| p == other.port));
    healthy.store(1, Ordering::SeqCst);
    assert!(eventually(5, || v.stderr().contains("back in service")));
    assert!(ports_of(&v, 6, "/").contains(&sick.port));
}

#[test]
fn upstream_figures_in_metrics() {
    let good = backend(echo());
    let dead = closed_port();
    let sick = backend(Arc::new(|head, _, _| {
        if head.starts_with("GET /health") {
            return Some(b"HTTP/1.0 500 No\r\nContent-Length: 0\r\n\r\n".to_vec());
        }
        Some(ok("sick"))
    }));
    let slow = backend(Arc::new(|_, _, _| {
        std::thread::sleep(Duration::from_millis(300));
        Some(ok("slow"))
    }));
    let c = format!(
        "events {{}}
http {{
    access_log off;
    upstream pool {{ server 127.0.0.1:{dead} max_fails=1 fail_timeout=60s; server 127.0.0.1:{g}; }}
    upstream checked {{
        server 127.0.0.1:{s};
        server 127.0.0.1:{g} down;
        health_check interval=100ms path=/health fall=1;
    }}
    server {{
        listen 127.0.0.1:{{port}};
        location /pool {{ proxy_pass http://pool; }}
        location /checked {{ proxy_pass http://checked; }}
        location /slow {{ proxy_pass http://127.0.0.1:{sl}; }}
        location = /metrics {{ metrics; }}
    }}
}}",
        g = good.port,
        s = sick.port,
        sl = slow.port
    );
    let v = Vireo::start(&c);
    // 5 requests: the dead peer fails once (it is then out for fail_timeout),
    // the good one answers all five.
    for _ in 0..5 {
        assert_eq!(v.get("/pool").status, 200);
    }
    assert_eq!(v.get("/slow").text(), "slow");
    let m = v.get("/metrics").text();
    let pool = "upstream=\"pool\"";
    let pd = format!("peer=\"127.0.0.1:{dead}\"");
    let pg = format!("peer=\"127.0.0.1:{}\"", good.port);
    let req = |m: &str, peer: &str, result: &str| {
        metric(
            m,
            "vireo_upstream_requests_total",
            &[pool, peer, "worker=\"0\"", &format!("result=\"{result}\"")],
        )
    };
    assert_eq!(req(&m, &pg, "ok"), 5.0, "{m}");
    assert_eq!(req(&m, &pg, "failed"), 0.0);
    assert_eq!(req(&m, &pd, "failed"), 1.0);
    assert_eq!(req(&m, &pd, "ok"), 0.0);
    // Passive health: the worker holds the dead peer failed; it is still "up"
    // (neither down nor failing active checks).
    assert_eq!(metric(&m, "vireo_upstream_peer_failed", &[pool, &pd]), 1.0);
    assert_eq!(metric(&m, "vireo_upstream_peer_failed", &[pool, &pg]), 0.0);
    assert_eq!(metric(&m, "vireo_upstream_peer_up", &[pool, &pd]), 1.0);
    assert_eq!(metric(&m, "vireo_upstream_peer_connections", &[pool]), 0.0);
    // Latency: one observation per response head.
    let count = "vireo_upstream_header_duration_seconds_count";
    assert_eq!(metric(&m, count, &[pool, &pg]), 5.0);
    assert_eq!(metric(&m, count, &[pool, &pd]), 0.0);
    // Kept in microseconds: sub-millisecond answers still add up.
    let sum = "vireo_upstream_header_duration_seconds_sum";
    assert!(metric(&m, sum, &[pool, &pg]) > 0.0, "{m}");
    let ps = format!("peer=\"127.0.0.1:{}\"", slow.port);
    let bucket = "vireo_upstream_header_duration_seconds_bucket";
    assert_eq!(metric(&m, bucket, &[&ps, "le=\"0.25\""]), 0.0, "{m}");
    assert_eq!(metric(&m, bucket, &[&ps, "le=\"0.5\""]), 1.0, "{m}");
    assert!(metric(&m, sum, &[&ps]) >= 0.3);
    // Active health checks and `down`.
    let checked = "upstream=\"checked\"";
    let pk = format!("peer=\"127.0.0.1:{}\"", sick.port);
    assert!(
        eventually(5, || metric(
            &v.get("/metrics").text(),
            "vireo_upstream_peer_up",
            &[checked, &pk]
        ) == 0.0),
        "{}",
        v.get("/metrics").text()
    );
    let m = v.get("/metrics").text();
    assert_eq!(metric(&m, "vireo_upstream_peer_up", &[checked, &pg]), 0.0);
    // Figures carry on across a reload (the new block starts with fresh
    // balancer state, so the dead peer may be tried once more).
    reload_counted(&v, 1.0);
    assert_eq!(v.get("/pool").status, 200);
    let m = v.get("/metrics").text();
    assert_eq!(req(&m, &pg, "ok"), 6.0, "{m}");
    assert!(req(&m, &pd, "failed") >= 1.0);
    assert_eq!(
        m.matches("vireo_upstream_peer_up{upstream=\"pool\"")
            .count(),
        2,
        "{m}"
    );
}

#[test]
fn bad_configurations() {
    let dir = TempDir::new("proxyconf");
    let cases = [
        (
            "location ~ x { proxy_pass http://127.0.0.1:1/u; }",
            "cannot have URI part",
        ),
        ("location / { proxy_pass ftp://x; }", "invalid URL prefix"),
        (
            "location / { proxy_pass http://nope.invalid; }",
            "host not found",
        ),
    ];
    for (loc, want) in cases {
        let out = test_conf(
            &dir,
            &format!("events {{}} http {{ server {{ listen 127.0.0.1:1; {loc} }} }}"),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{loc}: {err}");
    }
    let out = test_conf(
        &dir,
        "events {} http { upstream u { server 127.0.0.1:1 weight=x; } }",
    );
    assert!(!out.status.success());
    let out = test_conf(
        &dir,
        "events {} http { upstream u { server 127.0.0.1:1; } upstream u { server 127.0.0.1:2; } server { listen 127.0.0.1:1; location / { proxy_pass http://u; } } }",
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("duplicate upstream"));
}

/// vireo in front of Debian's Apache (skips with a message when Apache is missing).
#[test]
fn end_to_end_in_front_of_apache() {
    let bin = ["/usr/sbin/apache2", "/usr/sbin/httpd"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(bin) = bin else {
        eprintln!("skipped: apache2 is not installed (apt-get install apache2)");
        return;
    };
    let dir = TempDir::new("apache");
    let port = free_port();
    let page: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    dir.write("www/page.txt", &page);
    let d = dir.path().display();
    let conf = dir.write(
        "httpd.conf",
        format!(
            "LoadModule mpm_event_module /usr/lib/apache2/modules/mod_mpm_event.so
LoadModule authz_core_module /usr/lib/apache2/modules/mod_authz_core.so
Listen 127.0.0.1:{port}
ServerName localhost
PidFile {d}/apache.pid
ErrorLog {d}/apache-error.log
Mutex file:{d}
DefaultRuntimeDir {d}
DocumentRoot {d}/www
User nobody
Group nogroup
<Directory {d}/www>
  Require all granted
</Directory>
"
        ),
    );
    let child = std::process::Command::new(bin)
        .arg("-f")
        .arg(&conf)
        .arg("-DFOREGROUND")
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        eprintln!("skipped: apache2 could not be started");
        return;
    };
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SIGTERM: Apache's parent stops its children too (SIGKILL would orphan them).
            // SAFETY: signalling a child process this test started.
            unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
            let _ = self.0.wait();
        }
    }
    if !eventually(10, || TcpStream::connect(("127.0.0.1", port)).is_ok()) {
        // SAFETY: signalling a child process this test started.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let _ = child.wait();
        eprintln!(
            "skipped: apache2 did not start: {}",
            dir.read("apache-error.log")
        );
        return;
    }
    let _apache = Kill(child);
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    upstream apache {{ server 127.0.0.1:{port}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{{port}};
        location /a/ {{
            proxy_pass http://apache/;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
    }}
}}"
    ));
    for _ in 0..20 {
        let r = v.get("/a/page.txt");
        assert_eq!(r.status, 200, "{}", v.stderr());
        assert_eq!(r.text(), page);
    }
    assert_eq!(v.get("/a/missing").status, 404);
}

/// An upstream that answers `secs` after the last bytes it received unless
/// its client (vireo) closes the connection first; it reports, per request,
/// whether it saw that close.
fn thinking_backend(secs: u64) -> (u16, std::sync::mpsc::Receiver<bool>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                if !read_head(&mut s, &mut buf) {
                    return;
                }
                // Body bytes are read and dropped; the end of stream is the close.
                s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
                let closed = loop {
                    match s.read(&mut buf) {
                        Ok(0) => break true,
                        Ok(_) => {}
                        Err(_) => break false,
                    }
                };
                if !closed {
                    let _ = s.write_all(&ok("late"));
                }
                let _ = tx.send(closed);
            });
        }
    });
    (port, rx)
}

/// As nginx with `proxy_ignore_client_abort off`: a client that leaves while
/// the upstream thinks ends the request (499, logged at once) and the
/// upstream connection is closed, not pooled; with the directive on, the
/// exchange runs to its end.
#[test]
fn clients_that_leave_close_the_upstream_connection() {
    let (peer, seen) = thinking_backend(3);
    let v = Vireo::start(&format!(
        "error_log {{dir}}/logs/error.log info;
events {{}}
http {{
    log_format st '$uri $status $upstream_status';
    access_log {{dir}}/logs/access.log st;
    upstream app {{ server 127.0.0.1:{peer}; keepalive 4; }}
    server {{
        listen 127.0.0.1:{{port}};
        proxy_http_version 1.1;
        proxy_set_header Connection \"\";
        location /watched {{ proxy_pass http://app; }}
        location /ignored {{ proxy_pass http://app; proxy_ignore_client_abort on; }}
        location /posted {{ proxy_pass http://app; }}
    }}
}}"
    ));
    let leave = |req: &str| {
        let mut s = v.connect();
        s.write_all(req.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(s);
        std::time::Instant::now()
    };
    let t = leave("GET /watched HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(seen.recv_timeout(Duration::from_secs(5)), Ok(true));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "closed only after {:?}",
        t.elapsed()
    );
    assert_eq!(access_lines(&v, 1)[0], "/watched 499 -");
    assert!(error_log(&v).contains("client closed the connection while waiting for the upstream"));
    // A body streamed to the upstream first (over the held size), then the wait.
    let big = "x".repeat(100_000);
    leave(&format!(
        "POST /posted HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n{big}",
        big.len()
    ));
    assert_eq!(seen.recv_timeout(Duration::from_secs(5)), Ok(true));
    assert_eq!(access_lines(&v, 2)[1], "/posted 499 -");
    // Ignored: the upstream answers after its 3 s, nobody closed on it.
    leave("GET /ignored HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(seen.recv_timeout(Duration::from_secs(6)), Ok(false));
    assert_eq!(access_lines(&v, 3)[2], "/ignored 200 200");
}

#[test]
fn upstream_header_and_cookie_variables() {
    let b = backend(Arc::new(|_, _, _| {
        Some(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Up-Name: hello\r\nSet-Cookie: a=1; Path=/\r\nSet-Cookie: sid=abc; HttpOnly\r\nX-Hidden: h\r\n\r\nok"
                .to_vec(),
        )
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    log_format up '$upstream_http_x_up_name|$upstream_cookie_sid|$upstream_http_x_hidden|$upstream_http_nope|';
    access_log {{dir}}/logs/up.log up;
    server {{
        listen 127.0.0.1:{{port}};
        location / {{
            proxy_pass http://127.0.0.1:{p};
            proxy_hide_header X-Hidden;
            add_header X-Seen $upstream_http_x_up_name;
        }}
    }}
}}",
        p = b.port
    ));
    let r = v.get("/x");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-seen"), Some("hello"));
    assert!(r.header("x-hidden").is_none());
    // Hidden from the client, still the upstream's: the variable has it.
    assert!(
        eventually(5, || v.dir.read("logs/up.log").contains("hello|abc|h|-|")),
        "{}",
        v.dir.read("logs/up.log")
    );
}

#[test]
fn header_fields_with_underscores_are_dropped_unless_allowed() {
    let b = backend(echo());
    let conf = |extra: &str| {
        format!(
            "events {{}}
http {{
    access_log off;
    {extra}
    server {{ listen 127.0.0.1:{{port}}; location / {{ proxy_pass http://127.0.0.1:{p}; }} }}
}}",
            p = b.port
        )
    };
    let req = "GET /h HTTP/1.1\r\nHost: x\r\nX_Under: 1\r\nX-Dash: 2\r\nConnection: close\r\n\r\n";
    let v = Vireo::start(&conf(""));
    let seen = v.request(req).text();
    assert!(
        seen.contains("X-Dash: 2") && !seen.contains("X_Under"),
        "{seen}"
    );
    let v = Vireo::start(&conf("underscores_in_headers on;"));
    assert!(v.request(req).text().contains("X_Under: 1"));
    let v = Vireo::start(&conf("ignore_invalid_headers off;"));
    assert!(v.request(req).text().contains("X_Under: 1"));
}

#[test]
fn proxy_method_sets_the_upstream_method() {
    let b = backend(Arc::new(|head, _, _| {
        let method = head.split(' ').next().unwrap().to_string();
        Some(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{method}",
                method.len()
            )
            .into_bytes(),
        )
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location /keep {{ proxy_pass http://127.0.0.1:{p}; }}
        location /const {{ proxy_pass http://127.0.0.1:{p}; proxy_method POST; }}
        location /var {{ proxy_pass http://127.0.0.1:{p}; proxy_method $arg_m; }}
        location /parent {{
            proxy_method PUT;
            location /parent/child {{ proxy_pass http://127.0.0.1:{p}; }}
        }}
    }}
}}",
        p = b.port
    ));
    assert_eq!(v.get("/keep").text(), "GET");
    assert_eq!(v.get("/const").text(), "POST");
    assert_eq!(v.get("/var?m=DELETE").text(), "DELETE");
    assert_eq!(v.get("/var").text(), "GET");
    assert_eq!(v.get("/parent/child").text(), "PUT");
}

#[test]
fn no_live_upstream_is_named_in_upstream_addr() {
    // Nothing listens on the peers: the first request fails on both (and
    // marks them failed), the next finds no live peer at all.
    let (a, b) = (closed_port(), closed_port());
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    upstream grp {{ server 127.0.0.1:{a}; server 127.0.0.1:{b}; }}
    server {{
        listen 127.0.0.1:{{port}};
        location / {{
            proxy_pass http://grp;
            add_header X-Addr $upstream_addr always;
            add_header X-Status $upstream_status always;
        }}
    }}
}}"
    ));
    let r = v.get("/");
    assert_eq!(r.status, 502);
    assert_eq!(r.header("x-addr").unwrap().matches("127.0.0.1:").count(), 2);
    let r = v.get("/");
    assert_eq!((r.status, r.header("x-addr")), (502, Some("grp")));
    assert_eq!(r.header("x-status"), Some("502"));
}

#[test]
fn intercepted_errors_keep_their_challenges() {
    let b = backend(Arc::new(|head, _, _| {
        let path = head.split(' ').nth(1).unwrap().to_string();
        Some(match path.as_str() {
            "/auth" => b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"a\"\r\nWWW-Authenticate: Bearer\r\nContent-Length: 4\r\n\r\nnope".to_vec(),
            "/nf" => b"HTTP/1.1 404 Not Found\r\nContent-Length: 8\r\n\r\nSEE-THIS".to_vec(),
            _ => b"HTTP/1.1 500 Oops\r\nContent-Length: 4\r\n\r\noops".to_vec(),
        })
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location / {{
            proxy_pass http://127.0.0.1:{p};
            proxy_intercept_errors on;
            error_page 401 500 /intercepted;
        }}
        location = /intercepted {{ return 200 \"intercepted\\n\"; }}
    }}
}}",
        p = b.port
    ));
    let r = v.get("/auth");
    assert_eq!((r.status, r.text().as_str()), (401, "intercepted\n"));
    let challenges: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("www-authenticate"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(challenges, ["Basic realm=\"a\"", "Bearer"]);
    assert_eq!(v.get("/500").text(), "intercepted\n");
    // No error_page for 404: the upstream's answer passes.
    assert_eq!(v.get("/nf").text(), "SEE-THIS");
}

#[test]
fn next_upstream_on_404_keeps_the_peer_and_the_last_answer_is_intercepted() {
    let nf = backend(Arc::new(|head, _, _| {
        Some(if head.starts_with("GET /ok") {
            b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nAND-THIS".to_vec()
        } else {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nnf".to_vec()
        })
    }));
    let ok = backend(Arc::new(|head, _, _| {
        Some(if head.starts_with("GET /all") {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nnf".to_vec()
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nSEE-OK!".to_vec()
        })
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    upstream u {{ server 127.0.0.1:{a}; server 127.0.0.1:{b}; }}
    server {{
        listen 127.0.0.1:{{port}};
        location / {{ proxy_pass http://u; proxy_next_upstream http_404; }}
        location /all/ {{
            proxy_pass http://u;
            proxy_next_upstream http_404;
            proxy_intercept_errors on;
            error_page 404 /tried;
        }}
        location = /tried {{ return 200 \"$upstream_addr\"; }}
    }}
}}",
        a = nf.port,
        b = ok.port
    ));
    for _ in 0..4 {
        assert_eq!(v.get("/x").text(), "SEE-OK!");
    }
    // The 404s did not take the first peer out of service.
    let both = v.get("/ok").text() + &v.get("/ok").text();
    assert!(both.contains("AND-THIS"), "{both}");
    // Every peer answered 404: the last answer goes to the error page.
    let r = v.get("/all/x");
    assert_eq!(r.status, 404);
    assert_eq!(r.text().matches("127.0.0.1:").count(), 2, "{}", r.text());
}

#[test]
fn proxy_set_body_replaces_the_body() {
    let b = backend(Arc::new(|head, body, _| {
        let cl = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap_or("-")
            .to_string();
        let text = format!("{cl}|{}", String::from_utf8_lossy(body));
        Some(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
                text.len()
            )
            .into_bytes(),
        )
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location / {{
            proxy_pass http://127.0.0.1:{p};
            proxy_set_body \"a=$arg_a&was=$request_body\";
            proxy_request_buffering off;
        }}
    }}
}}",
        p = b.port
    ));
    let r = v.request(
        "POST /?a=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nxyz",
    );
    assert_eq!(r.text(), "11|a=1&was=xyz");
    assert_eq!(v.get("/?a=2").text(), "8|a=2&was=");
}

#[test]
fn x_accel_redirect_goes_on_with_the_carried_headers() {
    let b = backend(Arc::new(|head, _, _| {
        let to = head
            .split(' ')
            .nth(1)
            .unwrap()
            .split("xar=")
            .nth(1)
            .unwrap_or("")
            .to_string();
        Some(
            format!(
                "HTTP/1.1 204 No Content\r\nX-Accel-Redirect: {to}\r\nContent-Type: text/blah\r\nSet-Cookie: a=b\r\nSomething: other\r\n\r\n"
            )
            .into_bytes(),
        )
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location /p {{ proxy_pass http://127.0.0.1:{p}; }}
        location /t/ {{ return 200 \"xar=$upstream_http_x_accel_redirect uri=$uri args=$args m=$request_method\"; }}
        location @named {{ return 200 \"named uri=$uri\"; }}
    }}
}}",
        p = b.port
    ));
    let r = v.request("POST /p?xar=/t/a%20b?k=v HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "xar=/t/a%20b?k=v uri=/t/a b args=k=v m=GET");
    assert_eq!(r.header("content-type"), Some("text/blah"));
    assert_eq!(r.header("set-cookie"), Some("a=b"));
    assert_eq!(r.header("something"), None);
    assert_eq!(v.get("/p?xar=@named").text(), "named uri=/p");
    assert_eq!(v.get("/p?xar=/t/../x").status, 404);
}

#[test]
fn proxy_bind_sets_the_local_address() {
    // The upstream answers with the address the connection came from.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let peer = s.peer_addr().unwrap();
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let body = format!("{}|{}", peer.ip(), peer.port());
            let _ = std::io::Write::write_all(
                &mut s,
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        proxy_bind 127.0.0.2;
        location / {{ proxy_pass http://127.0.0.1:{port}; }}
        location /own {{ proxy_bind 127.0.0.3; proxy_pass http://127.0.0.1:{port}; }}
        location /off {{ proxy_bind off; proxy_pass http://127.0.0.1:{port}; }}
        location /var {{ proxy_bind $arg_b; proxy_pass http://127.0.0.1:{port}; }}
        location /tp {{ proxy_bind 127.0.0.9 transparent; proxy_pass http://127.0.0.1:{port}; }}
    }}
}}"
    ));
    let ip = |p: &str| v.get(p).text().split('|').next().unwrap().to_string();
    assert_eq!(ip("/"), "127.0.0.2");
    assert_eq!(ip("/own"), "127.0.0.3");
    assert_eq!(ip("/off"), "127.0.0.1");
    assert_eq!(ip("/var?b=127.0.0.4"), "127.0.0.4");
    let r = v.get("/var?b=127.0.0.5:45678").text();
    assert_eq!(r, "127.0.0.5|45678");
    assert_eq!(ip("/var"), "127.0.0.1");
    // IP_TRANSPARENT needs CAP_NET_RAW: root here.
    if unsafe { libc::geteuid() } == 0 {
        assert_eq!(ip("/tp"), "127.0.0.9");
    }
}

#[test]
fn proxy_directive_errors_name_file_and_line() {
    let dir = TempDir::new("proxy-conf");
    for (line, want) in [
        ("proxy_bind 300.1.1.1;", "invalid address \"300.1.1.1\""),
        (
            "proxy_bind 127.0.0.2 opaque;",
            "invalid parameter \"opaque\"",
        ),
        ("proxy_cookie_flags a sure;", "invalid parameter \"sure\""),
        (
            "proxy_cookie_flags a;",
            "invalid number of arguments in \"proxy_cookie_flags\"",
        ),
        ("proxy_redirect ~( /x;", "compile failed"),
        ("proxy_method $nosuch;", "unknown \"nosuch\" variable"),
    ] {
        let out = test_conf(
            &dir,
            &format!(
                "events {{}}\nhttp {{\n server {{\n  location / {{ proxy_pass http://127.0.0.1:9; {line} }}\n }}\n}}\n"
            ),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line}");
        assert!(
            err.contains(want) && err.contains("t.conf:"),
            "{line}: {err}"
        );
    }
}

/// Every file under `dir`, as paths relative to it.
fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn proxy_store_saves_whole_200_replies() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = TempDir::new("store");
    dir.write("origin/a/b.txt", "stored body\n");
    set_mtime(&dir.path().join("origin/a/b.txt"), 1_000_000_000);
    dir.write("origin/x.txt", "by template\n");
    dir.write("origin/h.txt", "head only\n");
    dir.write("origin/slow/big.bin", vec![b'x'; 1 << 20]);
    let v = Vireo::start_in(
        dir,
        "events {}
http {
    server {
        listen 127.0.0.1:{port2};
        root {dir}/origin;
        location /slow/ { limit_rate 100k; }
    }
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /store/ {
            proxy_pass http://127.0.0.1:{port2}/;
            proxy_store on;
            proxy_store_access user:rw group:r all:r;
        }
        location /tpl/ {
            proxy_pass http://127.0.0.1:{port2}/;
            proxy_store {dir}/saved/$host$uri;
        }
    }
}",
    );
    let html = v.dir.path().join("html");
    let r = v.get("/store/a/b.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "stored body\n"));
    let saved = html.join("store/a/b.txt");
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), "stored body\n");
    let meta = std::fs::metadata(&saved).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    // The reply's Last-Modified.
    assert_eq!(meta.mtime(), 1_000_000_000);
    // Folders made for it: x where r is.
    let folder = std::fs::metadata(html.join("store/a")).unwrap();
    assert_eq!(folder.permissions().mode() & 0o777, 0o755);

    assert_eq!(v.get("/tpl/x.txt").text(), "by template\n");
    let t = v.dir.path().join("saved/localhost/tpl/x.txt");
    assert_eq!(std::fs::read_to_string(t).unwrap(), "by template\n");

    // Not a 200, a HEAD: nothing stored.
    assert_eq!(v.get("/store/missing.txt").status, 404);
    let head =
        v.request("HEAD /store/h.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!(head.status, 200);

    // A client that leaves part way: no file, and the temporary one goes.
    let mut s = v.connect();
    s.write_all(b"GET /store/slow/big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 4096];
    assert!(s.read(&mut buf).unwrap() > 0);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        files_under(&html)
            .iter()
            .any(|f| f.starts_with("store/slow/.big.bin.")),
        "{:?}",
        files_under(&html)
    );
    drop(s);
    assert!(eventually(10, || files_under(&html) == ["store/a/b.txt"]));
}

#[test]
fn a_variable_address_finds_the_implicit_upstream_of_a_fixed_one() {
    let b = backend(echo());
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        location /fixed/ {{ proxy_pass http://localhost:{p}; }}
        location /var/ {{ proxy_pass http://$arg_b; }}
    }}
}}",
        p = b.port
    ));
    // The same host and port as a fixed proxy_pass: its upstream, no
    // resolver needed (as nginx).
    let r = v.get(&format!("/var/x?b=LocalHost:{}", b.port));
    assert_eq!(r.status, 200, "{}", error_log(&v));
    assert!(first_line(&r).starts_with("GET /var/x?b="));
    // Another port: a host name to resolve, and no resolver.
    assert_eq!(v.get("/var/x?b=localhost:1").status, 502);
}

/// A backend answering every request with `reply` as it is.
fn fixed(reply: &'static [u8]) -> Handler {
    Arc::new(move |_, _, _| Some(reply.to_vec()))
}

/// vireo with one server on `{port}` holding `locations`, after the
/// http-level directives `http` (the access log off unless they set one).
fn front(http: &str, locations: &str) -> Vireo {
    let log = match http.contains("access_log") {
        true => "",
        false => "access_log off;",
    };
    Vireo::start(&format!(
        "events {{}}\nhttp {{\n    {log}\n    {http}\n    server {{\n        listen 127.0.0.1:{{port}};\n        {locations}\n    }}\n}}\n"
    ))
}

/// A backend answering `GET PATH…` with `hit` as it is, others with `other`.
fn two_replies(path: &'static str, hit: &'static [u8], other: &'static [u8]) -> Handler {
    Arc::new(move |head, _, _| {
        let start = head.strip_prefix("GET ").unwrap_or("");
        Some(if start.starts_with(path) { hit } else { other }.to_vec())
    })
}

/// Byte ranges of proxied replies: with proxy_force_ranges a 200 of known
/// length is answered with the client's range (one, the reply streaming in;
/// If-Range against the reply's validators); without it, not, whatever the
/// upstream says; a cached reply takes them when the upstream offered them
/// (or with proxy_force_ranges), else it is whole.
#[test]
fn ranges_of_proxied_replies() {
    let b = backend(fixed(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nETag: \"e1\"\r\nLast-Modified: Mon, 28 Sep 1970 06:00:00 GMT\r\nAccept-Ranges: bytes\r\nCache-Control: max-age=60\r\n\r\n0123456789",
    ));
    let silent = backend(fixed(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nCache-Control: max-age=60\r\n\r\n0123456789",
    ));
    let (p, q) = (b.port, silent.port);
    let v = front(
        "proxy_cache_path {dir}/cache keys_zone=z:1m;",
        &format!(
            "location /plain/ {{ proxy_pass http://127.0.0.1:{p}; }}
        location /forced/ {{ proxy_pass http://127.0.0.1:{p}; proxy_force_ranges on; }}
        location /none/ {{ proxy_pass http://127.0.0.1:{p}; proxy_force_ranges on; max_ranges 0; }}
        location /cached/ {{ proxy_pass http://127.0.0.1:{p}; proxy_cache z; }}
        location /silent/ {{ proxy_pass http://127.0.0.1:{q}; proxy_cache z; }}
        location /silent-forced/ {{ proxy_pass http://127.0.0.1:{q}; proxy_cache z; proxy_force_ranges on; }}"
        ),
    );
    let get = |path: &str, extra: &str| {
        v.request(&format!(
            "GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n{extra}\r\n"
        ))
    };
    // Accept-Ranges alone does not make an uncached reply take ranges.
    let r = get("/plain/t", "Range: bytes=2-4\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));

    let r = get("/forced/t", "Range: bytes=2-4\r\n");
    assert_eq!((r.status, r.text().as_str()), (206, "234"), "{}", r.head);
    assert_eq!(r.header("content-range"), Some("bytes 2-4/10"));
    assert_eq!(r.header("content-length"), Some("3"));
    let r = get("/forced/t", "Range: bytes=-2\r\n");
    assert_eq!((r.status, r.text().as_str()), (206, "89"));
    // Several ranges of a streamed reply: the whole reply.
    let r = get("/forced/t", "Range: bytes=0-1,4-5\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
    let r = get("/forced/t", "Range: bytes=20-\r\n");
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */10"));
    // If-Range: the reply's entity tag or date.
    let r = get("/forced/t", "Range: bytes=5-\r\nIf-Range: \"e1\"\r\n");
    assert_eq!((r.status, r.text().as_str()), (206, "56789"));
    let r = get(
        "/forced/t",
        "Range: bytes=5-\r\nIf-Range: Mon, 28 Sep 1970 06:00:00 GMT\r\n",
    );
    assert_eq!(r.status, 206);
    let r = get("/forced/t", "Range: bytes=5-\r\nIf-Range: \"other\"\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
    let r = get("/none/t", "Range: bytes=2-4\r\n");
    assert_eq!(r.status, 200);

    // From the cache: several ranges too.
    let r = get("/cached/t", "");
    assert_eq!(r.status, 200);
    let r = get("/cached/t", "Range: bytes=0-1,8-\r\n");
    assert_eq!(r.status, 206, "{}", r.head);
    let ct = r.header("content-type").unwrap().to_string();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    let t = r.text();
    assert!(
        t.contains("Content-Range: bytes 0-1/10\r\n\r\n01\r\n"),
        "{t}"
    );
    assert!(
        t.contains("Content-Range: bytes 8-9/10\r\n\r\n89\r\n"),
        "{t}"
    );

    // Cached, from an upstream that did not offer ranges: whole, unless forced.
    for _ in 0..2 {
        let r = get("/silent/t", "Range: bytes=2-4\r\n");
        assert_eq!((r.status, r.text().as_str()), (200, "0123456789"));
        let r = get("/silent-forced/t", "Range: bytes=2-4\r\n");
        assert_eq!((r.status, r.text().as_str()), (206, "234"));
        assert_eq!(r.header("accept-ranges"), Some("bytes"));
    }
}

/// proxy_pass_header Date / Server: the upstream's in place of vireo's own,
/// and none when the upstream sent none.
#[test]
fn pass_header_date_and_server() {
    let b = backend(two_replies(
        "/bare",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nDate: passed\r\nServer: upstream\r\nContent-Length: 0\r\n\r\n",
    ));
    let p = b.port;
    let v = front(
        "",
        &format!(
            "location / {{ proxy_pass http://127.0.0.1:{p}; }}
        location /pass/ {{ proxy_pass http://127.0.0.1:{p}/; proxy_pass_header Date; proxy_pass_header Server; }}
        location /date/ {{ proxy_pass http://127.0.0.1:{p}/; proxy_pass_header Date; }}"
        ),
    );
    let r = v.get("/x");
    assert!(r.header("server").unwrap().starts_with("vireo"));
    assert_ne!(r.header("date"), Some("passed"));
    let r = v.get("/pass/x");
    assert_eq!(r.header("date"), Some("passed"));
    assert_eq!(r.header("server"), Some("upstream"));
    let r = v.get("/pass/bare");
    assert_eq!(
        (r.header("date"), r.header("server")),
        (None, None),
        "{}",
        r.head
    );
    let r = v.get("/date/x");
    assert_eq!(r.header("date"), Some("passed"));
    assert!(r.header("server").unwrap().starts_with("vireo"));
}

/// A reply the upstream cuts short shows as cut short to an HTTP/1.1
/// client also through sub_filter and on a closing connection: chunked,
/// its chunks whole but without the last chunk (as nginx). A whole one
/// ends with it.
#[test]
fn reply_cut_short_has_no_last_chunk() {
    let b = backend(two_replies(
        "/short",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nunfinished foo",
        b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\nfinished foo",
    ));
    let v = front(
        "",
        &format!(
            "location / {{ proxy_pass http://127.0.0.1:{}; sub_filter foo bar; sub_filter_types *; }}",
            b.port
        ),
    );
    for path in ["/short", "/whole"] {
        let raw = v
            .raw(format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").as_bytes());
        let text = String::from_utf8_lossy(&raw).into_owned();
        assert!(text.contains("Transfer-Encoding: chunked\r\n"), "{text}");
        if path == "/short" {
            assert!(!text.ends_with("0\r\n\r\n"), "{text}");
            assert!(text.ends_with("bar\r\n"), "{text}");
        } else {
            assert!(text.ends_with("\r\n0\r\n\r\n"), "{text}");
            assert_eq!(Resp::parse(&raw).unwrap().text(), "finished bar");
        }
    }
}

/// `$sent_http_connection` as the connection answered (keep-alive, close,
/// upgrade); a 101 the client did not ask for goes on as a head without a
/// body, and the connection closes.
#[test]
fn sent_http_connection_and_unasked_upgrade() {
    let b = backend(two_replies(
        "/switch",
        b"HTTP/1.1 101 Switching\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\nhandshaked",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
    ));
    let v = front(
        "log_format t \"$request_uri $status $body_bytes_sent $sent_http_connection\";
    access_log {dir}/logs/access.log t;",
        &format!(
            "location / {{
            proxy_pass http://127.0.0.1:{};
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $http_connection;
        }}",
            b.port
        ),
    );
    let mut s = v.connect();
    s.write_all(b"GET /ka HTTP/1.1\r\nHost: a\r\n\r\nGET /cl HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let got = read_to_close(&mut s);
    assert_eq!(Resp::parse_all(&got).len(), 2);
    let raw = v.raw(b"GET /switch HTTP/1.1\r\nHost: a\r\n\r\n");
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(text.starts_with("HTTP/1.1 101 "), "{text}");
    assert!(
        text.ends_with("\r\n\r\n") && !text.contains("handshaked"),
        "{text}"
    );
    let lines = access_lines(&v, 3);
    assert_eq!(
        lines,
        [
            "/ka 200 1 keep-alive",
            "/cl 200 1 close",
            "/switch 101 0 upgrade"
        ]
    );
}

/// proxy_force_ranges and fastcgi_force_ranges take on or off.
#[test]
fn force_ranges_directive_errors() {
    let dir = TempDir::new("force-ranges");
    for (loc, want) in [
        (
            "location / { proxy_pass http://127.0.0.1:9; proxy_force_ranges maybe; }",
            "invalid value \"maybe\" in \"proxy_force_ranges\"",
        ),
        (
            "location / { fastcgi_pass 127.0.0.1:9; fastcgi_force_ranges on off; }",
            "invalid number of arguments in \"fastcgi_force_ranges\"",
        ),
    ] {
        let out = test_conf(
            &dir,
            &format!("events {{}}\nhttp {{\n server {{\n  {loc}\n }}\n}}\n"),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{loc}");
        assert!(
            err.contains(want) && err.contains("t.conf:4"),
            "{loc}: {err}"
        );
    }
}

/// What `ss` shows of vireo's connections to `port` (timers included).
fn ss_to(port: u16) -> String {
    let out = std::process::Command::new("ss")
        .args([
            "-tno",
            "state",
            "established",
            &format!("( dport = :{port} )"),
        ])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[test]
fn limit_rate_paces_the_reply_and_socket_keepalive_probes_the_connection() {
    let big = "x".repeat(40_000);
    let b = backend(Arc::new(move |head, _, _| {
        let rate = head
            .lines()
            .find_map(|l| l.strip_prefix("GET /?e="))
            .map(|r| r.split(' ').next().unwrap_or("0").to_string())
            .unwrap_or_default();
        Some(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Rate: {rate}\r\n\r\n{big}",
                big.len()
            )
            .into_bytes(),
        )
    }));
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    upstream app {{ server 127.0.0.1:{}; keepalive 2; }}
    server {{
        listen 127.0.0.1:{{port}};
        proxy_http_version 1.1;
        proxy_set_header Connection \"\";
        proxy_socket_keepalive on;
        location / {{ proxy_pass http://app; proxy_limit_rate $upstream_http_x_rate; }}
        location /fixed {{ proxy_pass http://app/?e=0; proxy_limit_rate 40k; }}
    }}
}}",
        b.port
    ));
    let timed = |path: &str| {
        let t = Instant::now();
        let r = v.get(path);
        assert_eq!((r.status, r.body.len()), (200, 40_000), "{}", v.stderr());
        t.elapsed()
    };
    assert!(timed("/?e=20000") >= Duration::from_millis(1500));
    assert!(timed("/?e=0") < Duration::from_millis(500));
    let fixed = timed("/fixed");
    assert!(
        fixed >= Duration::from_millis(800) && fixed < Duration::from_secs(3),
        "{fixed:?}"
    );
    // The pooled connection has keep-alive probes armed.
    assert!(
        eventually(2, || ss_to(b.port).contains("timer:(keepalive")),
        "{}",
        ss_to(b.port)
    );
}

#[test]
fn limit_rate_refuses_a_bad_size_with_its_line() {
    let dir = TempDir::new("proxy-limit-rate");
    assert_conf_errors(
        &dir,
        &[(
            "location / { proxy_pass http://127.0.0.1:9; proxy_limit_rate fast; }",
            "\"proxy_limit_rate\" directive invalid value",
        )],
    );
}
