//! Request body buffering: client_body_buffer_size, temporary files under
//! client_body_temp_path (levels, removal, client_body_in_file_only),
//! `$request_body`, `$request_body_file`, and proxy_request_buffering on
//! (whole body first, Content-Length, retried on the next peer) and off
//! (streamed, chunked to an HTTP/1.1 upstream). The upstream is a small
//! HTTP server started by each test.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// What the upstream received: the head, and the body decoded.
struct Got {
    head: String,
    body: Vec<u8>,
}

/// An upstream that answers every request `200` with the body's length and
/// reports each request it read on the channel.
fn upstream() -> (u16, mpsc::Receiver<Got>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            let tx = tx.clone();
            std::thread::spawn(move || serve(s, tx));
        }
    });
    (port, rx)
}

fn serve(s: TcpStream, tx: mpsc::Sender<Got>) {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    loop {
        let Some(head) = read_request_head(&mut r) else {
            return;
        };
        let lower = head.to_ascii_lowercase();
        let mut body = Vec::new();
        if let Some(cl) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
        {
            body.resize(cl.trim().parse().unwrap(), 0);
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
        let text = format!("len={}", body.len());
        let _ = tx.send(Got { head, body });
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if w.write_all(resp.as_bytes()).is_err() {
            return;
        }
    }
}

fn conf(peer: u16, extra: &str) -> String {
    format!(
        "error_log logs/error.log warn;
events {{}}
http {{
    access_log off;
    client_body_buffer_size 1k;
    server {{
        listen 127.0.0.1:{{port}};
        add_header X-Body $request_body;
        add_header X-Body-File $request_body_file;
        location / {{ proxy_pass http://127.0.0.1:{peer}; }}
        {extra}
    }}
}}"
    )
}

fn post(v: &Vireo, path: &str, body: &[u8]) -> Resp {
    let mut s = v.connect();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    Resp::parse(&read_to_close(&mut s)).unwrap()
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| b"0123456789"[i % 10]).collect()
}

#[test]
fn small_bodies_stay_in_memory_and_large_ones_spool_to_a_removed_file() {
    let (peer, rx) = upstream();
    let v = Vireo::start(&conf(peer, ""));
    // Made at start, for the worker user only.
    let meta = std::fs::metadata(v.dir.path().join("client_body_temp")).unwrap();
    assert!(meta.is_dir());
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o700
    );

    let r = post(&v, "/", b"0123456789");
    assert_eq!(r.text(), "len=10");
    assert_eq!(r.header("x-body"), Some("0123456789"));
    assert_eq!(r.header("x-body-file"), None);
    let got = rx.recv().unwrap();
    assert!(got.head.contains("Content-Length: 10\r\n"), "{}", got.head);

    // Over client_body_buffer_size: a temporary file, gone after the request.
    let body = pattern(300_000);
    let r = post(&v, "/", &body);
    assert_eq!(r.text(), "len=300000");
    assert_eq!(r.header("x-body"), None);
    let file = r.header("x-body-file").expect("a body file").to_string();
    assert!(
        file.starts_with(&format!("{}/client_body_temp/", v.dir.path().display())),
        "{file}"
    );
    let got = rx.recv().unwrap();
    assert_eq!(got.body, body);
    assert!(
        eventually(5, || !Path::new(&file).exists()),
        "{file} was not removed"
    );
    assert!(error_log(&v).contains("a client request body is buffered to a temporary file"));
}

#[test]
fn in_file_only_keeps_or_cleans_and_levels_spread_files() {
    let (peer, rx) = upstream();
    let v = Vireo::start(&conf(
        peer,
        "location /keep { client_body_in_file_only on; client_body_temp_path {dir}/bodies 1 2; proxy_pass http://127.0.0.1:PEER; }
        location /clean { client_body_in_file_only clean; proxy_pass http://127.0.0.1:PEER; }
        location /single { client_body_in_single_buffer on; proxy_pass http://127.0.0.1:PEER; }"
            .replace("PEER", &peer.to_string())
            .as_str(),
    ));

    // `on`: even a small body goes to a file, kept after the request.
    let r = post(&v, "/keep", b"kept body");
    assert_eq!(r.text(), "len=9");
    let file = r.header("x-body-file").expect("a body file").to_string();
    let rel = file
        .strip_prefix(&format!("{}/bodies/", v.dir.path().display()))
        .unwrap_or_else(|| panic!("{file}"));
    // dir/L1/L2/NAME: the levels are the name's last digits.
    let parts: Vec<&str> = rel.split('/').collect();
    assert_eq!(parts.len(), 3, "{rel}");
    let name = parts[2];
    assert_eq!(name.len(), 10);
    assert_eq!(parts[0], &name[9..]);
    assert_eq!(parts[1], &name[7..9]);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(std::fs::read(&file).unwrap(), b"kept body");
    assert_eq!(rx.recv().unwrap().body, b"kept body");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );

    // `clean`: a file, removed after the request.
    let r = post(&v, "/clean", b"clean body");
    let file = r.header("x-body-file").expect("a body file").to_string();
    assert_eq!(rx.recv().unwrap().body, b"clean body");
    assert!(eventually(5, || !Path::new(&file).exists()));

    // One buffer: `$request_body` as the body, whatever pieces it came in.
    let mut s = v.connect();
    s.write_all(b"POST /single HTTP/1.1\r\nHost: a\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    s.write_all(b"3\r\ndef\r\n0\r\n\r\n").unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!(r.header("x-body"), Some("abcdef"));
}

#[test]
fn buffered_chunked_bodies_go_with_a_length_and_unbuffered_ones_chunked() {
    let (peer, rx) = upstream();
    let v = Vireo::start(&conf(
        peer,
        "location /off { proxy_request_buffering off; proxy_http_version 1.1; proxy_pass http://127.0.0.1:PEER; }
        location /off10 { proxy_request_buffering off; proxy_pass http://127.0.0.1:PEER; }"
            .replace("PEER", &peer.to_string())
            .as_str(),
    ));
    let chunked = |path: &str| {
        v.request(&format!(
            "POST {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        ))
    };
    assert_eq!(chunked("/").text(), "len=5");
    let got = rx.recv().unwrap();
    assert!(got.head.contains("Content-Length: 5\r\n"), "{}", got.head);
    assert!(!got.head.to_ascii_lowercase().contains("transfer-encoding"));

    let r = chunked("/off");
    assert_eq!(r.text(), "len=5");
    // Streamed, yet `$request_body` is there: it fitted the buffer.
    assert_eq!(r.header("x-body"), Some("abcde"));
    let got = rx.recv().unwrap();
    assert!(
        got.head.contains("Transfer-Encoding: chunked\r\n"),
        "{}",
        got.head
    );
    assert_eq!(got.body, b"abcde");

    // An HTTP/1.0 upstream cannot take chunked: buffered and measured.
    assert_eq!(chunked("/off10").text(), "len=5");
    let got = rx.recv().unwrap();
    assert!(got.head.contains("Content-Length: 5\r\n"), "{}", got.head);
}

#[test]
fn unbuffered_bodies_reach_the_upstream_as_they_arrive() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = l.local_addr().unwrap().port();
    let v = Vireo::start(&conf(
        peer,
        "location /off { proxy_request_buffering off; proxy_pass http://127.0.0.1:PEER; }"
            .replace("PEER", &peer.to_string())
            .as_str(),
    ));
    let mut c = v.connect();
    c.write_all(
        b"POST /off HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 10\r\n\r\n01234",
    )
    .unwrap();
    let (mut up, _) = l.accept().unwrap();
    up.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // The head and what came with it, before the client sent the rest.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"01234") {
        let n = up.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        String::from_utf8_lossy(&got).contains("Content-Length: 10\r\n"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    c.write_all(b"56789").unwrap();
    let n = up.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"56789");
    up.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        .unwrap();
    let r = Resp::parse(&read_to_close(&mut c)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "ok");
}

#[test]
fn a_body_in_a_file_is_sent_again_to_the_next_peer() {
    let (peer, rx) = upstream();
    // A peer that takes the request and closes without answering.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let bad = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 65536];
            let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
    });
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    access_log off;
    client_body_buffer_size 1k;
    upstream u {{ server 127.0.0.1:{bad}; server 127.0.0.1:{peer}; }}
    server {{
        listen 127.0.0.1:{{port}};
        location / {{ proxy_pass http://u; proxy_next_upstream error timeout non_idempotent; proxy_read_timeout 1s; }}
    }}
}}"
    ));
    let body = pattern(100_000);
    for _ in 0..2 {
        let r = post(&v, "/", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.text(), "len=100000");
        assert_eq!(rx.recv().unwrap().body, body);
    }
}

#[test]
fn client_body_directives_are_checked() {
    let dir = TempDir::new("cbconf");
    let out = test_conf(
        &dir,
        "events {} http { server { client_body_in_file_only sometimes; } }",
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("t.conf:1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = test_conf(
        &dir,
        "events {} http { client_body_temp_path /tmp/x 1 3; server { } }",
    );
    assert!(!out.status.success());
    let out = test_conf(
        &dir,
        "events {} http { client_body_temp_path tmp 1 2 2; client_body_buffer_size 8k; client_body_in_single_buffer on; server { fastcgi_request_buffering off; proxy_request_buffering off; } }",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
