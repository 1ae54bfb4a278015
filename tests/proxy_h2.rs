//! `proxy_http_version 2` end to end, against Debian's nginx as the HTTP/2
//! backend (`listen … http2`: prior knowledge on a plain port, ALPN `h2`
//! with `ssl`): GET with the request's fields, a POST body (held, and
//! streamed with `proxy_request_buffering off`), a body larger than the
//! stream's window both ways, sessions reused with `keepalive` (and not
//! without) with requests in flight side by side on them, a dead peer
//! skipped by `proxy_next_upstream`, https with ALPN, and `$upstream_*` of
//! an HTTP/2 reply.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// Debian's nginx, killed on drop.
struct Nginx {
    _child: Daemon,
    _dir: TempDir,
}

/// The backend: h2c on `plain`, h2 over TLS on `tls`, HTTP/1.1 on `sink`
/// (where nginx's own proxy_pass sends a POST so that `$request_body` is
/// read). `/hello` answers with what it got; `/post` with the body in a
/// field; `/files/` takes PUT and serves files.
fn nginx(plain: u16, tls: u16, sink: u16) -> Option<Nginx> {
    if !std::path::Path::new("/usr/sbin/nginx").exists() {
        eprintln!("skipped: no /usr/sbin/nginx");
        return None;
    }
    let dir = TempDir::new("proxy-h2-nginx");
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "b.key",
            "-out",
            "b.crt",
        ],
    );
    std::fs::create_dir_all(dir.path().join("www/files")).unwrap();
    let d = dir.path().display().to_string();
    let hello = "return 200 \"proto=$server_protocol h2=$http2 method=$request_method uri=$request_uri host=$http_host x=$http_x_test conn=$connection n=$connection_requests\\n\"";
    let conf = format!(
        "  root {d}/www;\n  client_max_body_size 4m;\n  server {{\n    listen 127.0.0.1:{plain} http2;\n    listen 127.0.0.1:{tls} ssl http2;\n    ssl_certificate {d}/b.crt;\n    ssl_certificate_key {d}/b.key;\n    location /hello {{ add_header X-Backend nginx; {hello}; }}\n    location /post {{\n      proxy_pass http://127.0.0.1:{sink}/sink;\n      add_header X-Body $request_body;\n      add_header X-Length $content_length;\n    }}\n    location /files/ {{ dav_methods PUT; }}\n  }}\n  server {{\n    listen 127.0.0.1:{sink};\n    location /sink {{ return 204; }}\n  }}\n"
    );
    let child = nginx_backend(&dir, &conf);
    let n = Nginx {
        _child: child,
        _dir: dir,
    };
    let end = Instant::now() + Duration::from_secs(10);
    for port in [plain, tls, sink] {
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < end, "nginx did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Some(n)
}

/// The value of `key=` in a `/hello` answer.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
}

fn front(plain: u16, tls: u16, dead: u16) -> Vireo {
    Vireo::start(&format!(
        "error_log {{dir}}/logs/error.log info;
events {{}}
http {{
  upstream kept {{ server 127.0.0.1:{plain}; keepalive 2; }}
  upstream pair {{ server 127.0.0.1:{dead}; server 127.0.0.1:{plain}; }}
  proxy_http_version 2;
  add_header X-Up $upstream_addr;
  add_header X-Status $upstream_status;
  server {{
    listen 127.0.0.1:{{port}};
    location /plain/ {{ proxy_pass http://127.0.0.1:{plain}/; proxy_set_header X-Test one; }}
    location /kept/ {{ proxy_pass http://kept/; }}
    location /stream/ {{ proxy_pass http://127.0.0.1:{plain}/; proxy_request_buffering off; }}
    location /pair/ {{ proxy_pass http://pair/; }}
    location /tls/ {{ proxy_pass https://127.0.0.1:{tls}/; }}
  }}
}}
"
    ))
}

fn ports() -> (u16, u16, u16, u16) {
    (free_port(), free_port(), free_port(), free_port())
}

#[test]
fn get_goes_over_h2c_with_the_request_fields() {
    let (plain, tls, sink, dead) = ports();
    let Some(_nginx) = nginx(plain, tls, sink) else {
        return;
    };
    let v = front(plain, tls, dead);
    let r = v.request(
        "GET /plain/hello?a=1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nKeep-Alive: 5\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", error_log(&v));
    let t = r.text();
    assert_eq!(field(&t, "proto"), "HTTP/2.0");
    assert_eq!(field(&t, "h2"), "h2c");
    assert_eq!(field(&t, "method"), "GET");
    assert_eq!(field(&t, "uri"), "/hello?a=1");
    // `:authority` is $proxy_host; proxy_set_header's fields go.
    assert_eq!(field(&t, "host"), format!("127.0.0.1:{plain}"));
    assert_eq!(field(&t, "x"), "one");
    assert_eq!(r.header("X-Backend"), Some("nginx"));
    assert_eq!(r.header("X-Status"), Some("200"));
    // A HEAD gets the head alone.
    let r = v.request("HEAD /plain/hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
}

#[test]
fn a_post_body_goes_held_and_streamed() {
    let (plain, tls, sink, dead) = ports();
    let Some(_nginx) = nginx(plain, tls, sink) else {
        return;
    };
    let v = front(plain, tls, dead);
    // Read whole first (Content-Length), then streamed as it comes, chunked
    // from the client and without a length to the upstream.
    for (path, req_body) in [
        ("/plain/post", "Content-Length: 11\r\n\r\nhello world"),
        (
            "/stream/post",
            "Transfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n",
        ),
    ] {
        let r = v.request(&format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{req_body}"
        ));
        assert_eq!(r.status, 204, "{path}: {}", error_log(&v));
        assert_eq!(r.header("X-Body"), Some("hello world"), "{path}");
    }
    let r = v.request(
        "POST /plain/post HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 11\r\n\r\nhello world",
    );
    assert_eq!(r.header("X-Length"), Some("11"));
}

#[test]
fn bodies_larger_than_the_window_go_both_ways() {
    let (plain, tls, sink, dead) = ports();
    let Some(_nginx) = nginx(plain, tls, sink) else {
        return;
    };
    let v = front(plain, tls, dead);
    // 300 KB: over HTTP/2's initial 64 KB windows, as a PUT (held, then
    // streamed) stored by the backend, then read back.
    let big: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    for (path, name) in [("/plain/files/", "held"), ("/stream/files/", "streamed")] {
        let mut req = format!(
            "PUT {path}{name} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            big.len()
        )
        .into_bytes();
        req.extend_from_slice(&big);
        let r = Resp::parse(&v.raw(&req)).expect("a response");
        assert_eq!(r.status, 201, "{name}: {}", error_log(&v));
        let r = v.get(&format!("/plain/files/{name}"));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("Content-Length"), Some("300000"));
        assert!(r.body == big, "{name}: the file read back differs");
    }
}

#[test]
fn keepalive_reuses_the_session_and_without_it_each_request_has_its_own() {
    let (plain, tls, sink, dead) = ports();
    let Some(_nginx) = nginx(plain, tls, sink) else {
        return;
    };
    let v = front(plain, tls, dead);
    let seen: Vec<(String, String)> = (0..3)
        .map(|_| {
            let t = v.get("/kept/hello").text();
            (field(&t, "conn").to_string(), field(&t, "n").to_string())
        })
        .collect();
    assert!(
        seen.iter().all(|(c, _)| *c == seen[0].0),
        "one session: {seen:?}"
    );
    let n: Vec<&str> = seen.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(n, ["1", "2", "3"]);
    // Without keepalive: a connection per request.
    let a = v.get("/plain/hello").text();
    let b = v.get("/plain/hello").text();
    assert_ne!(field(&a, "conn"), field(&b, "conn"));
    assert_eq!(field(&b, "n"), "1");
}

/// With `keepalive`, requests in flight at once run side by side on the
/// kept session: bodies larger than the windows both ways, each stream held
/// to its own window, and all on the connection of the first request.
#[test]
fn requests_in_flight_share_the_kept_session() {
    let (plain, tls, sink, dead) = ports();
    let Some(_nginx) = nginx(plain, tls, sink) else {
        return;
    };
    let v = front(plain, tls, dead);
    let first = v.get("/kept/hello").text();
    let big = |i: u32| -> Vec<u8> {
        (0..300_000u32)
            .map(|j| b'a' + ((i + j) % 26) as u8)
            .collect()
    };
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..6u32)
            .map(|i| {
                let v = &v;
                scope.spawn(move || {
                    let body = big(i);
                    let mut req = format!(
                        "PUT /kept/files/f{i} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    req.extend_from_slice(&body);
                    let r = Resp::parse(&v.raw(&req)).expect("a response");
                    assert_eq!(r.status, 201, "PUT f{i}");
                    let r = v.get(&format!("/kept/files/f{i}"));
                    assert!(r.status == 200 && r.body == body, "f{i} read back differs");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    });
    let last = v.get("/kept/hello").text();
    assert_eq!(
        field(&first, "conn"),
        field(&last, "conn"),
        "{}",
        error_log(&v)
    );
    // The first request, 12 in flight, this one.
    assert_eq!(field(&last, "n"), "14");
}

#[test]
fn a_dead_peer_is_skipped_by_next_upstream() {
    let (plain, tls, sink, dead) = ports();
    let Some(_nginx) = nginx(plain, tls, sink) else {
        return;
    };
    let v = front(plain, tls, dead);
    let r = v.get("/pair/hello");
    assert_eq!(r.status, 200, "{}", error_log(&v));
    assert_eq!(field(&r.text(), "proto"), "HTTP/2.0");
    assert_eq!(
        r.header("X-Up"),
        Some(format!("127.0.0.1:{dead}, 127.0.0.1:{plain}").as_str())
    );
    assert_eq!(r.header("X-Status"), Some("502, 200"));
    let log = error_log(&v);
    assert!(
        log.contains("connect() failed (111: Connection refused) while connecting to upstream")
            && log.contains(&format!("upstream: \"http://127.0.0.1:{dead}/hello\"")),
        "{log}"
    );
}

#[test]
fn https_asks_for_h2_by_alpn() {
    let (plain, tls, sink, dead) = ports();
    let Some(_nginx) = nginx(plain, tls, sink) else {
        return;
    };
    let v = front(plain, tls, dead);
    let r = v.get("/tls/hello");
    assert_eq!(r.status, 200, "{}", error_log(&v));
    let t = r.text();
    assert_eq!(field(&t, "proto"), "HTTP/2.0");
    assert_eq!(field(&t, "h2"), "h2");
    let r = v.request(
        "POST /tls/post HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc",
    );
    assert_eq!(r.header("X-Body"), Some("abc"));
}

#[test]
fn configuration_takes_2_and_refuses_other_versions() {
    let dir = TempDir::new("proxy-h2-conf");
    let ok = test_conf(
        &dir,
        "events {}\nhttp { server { listen 127.0.0.1:1; location / { proxy_http_version 2; proxy_pass http://127.0.0.1:2; } } }\n",
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let bad = test_conf(
        &dir,
        "events {}\nhttp { server { listen 127.0.0.1:1; location / { proxy_http_version 3; proxy_pass http://127.0.0.1:2; } } }\n",
    );
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("proxy_http_version") && err.contains("t.conf:2"),
        "{err}"
    );
}
