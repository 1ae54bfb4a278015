//! flv: `?start=N` sends the FLV header and the file from byte N, over HTTP/1.1
//! and HTTP/2; ranges, conditionals and methods as for static files.

mod common;
use common::*;
use std::process::Command;

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port} http2;
        root {dir}/html;
        location / { flv; }
    }
}";

/// The FLV header vireo puts before the bytes from `start`.
const HEADER: &[u8] = b"FLV\x01\x05\x00\x00\x00\x09\x00\x00\x00\x00";

/// A 1,000-byte file: "X000XXXXXX" … "X099XXXXXX".
fn video() -> Vec<u8> {
    (0..100)
        .flat_map(|i| format!("X{i:03}XXXXXX").into_bytes())
        .collect()
}

fn start() -> Vireo {
    let dir = TempDir::new("flv");
    dir.write("html/v.flv", video());
    Vireo::start_in(dir, CONF)
}

#[test]
fn start_sends_the_header_then_the_file_from_there() {
    let v = start();
    let r = v.get("/v.flv?start=100");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("video/x-flv"));
    assert_eq!(r.header("content-length"), Some("913"));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    assert!(r.header("last-modified").is_some() && r.header("etag").is_some());
    assert_eq!(&r.body[..13], HEADER);
    assert_eq!(&r.body[13..], &video()[100..]);
    // Among other arguments.
    let r = v.get("/v.flv?x=1&start=990");
    assert_eq!(r.body, [HEADER, &video()[990..]].concat());
    // No start, 0, past the end, not digits: the file whole.
    for q in [
        "",
        "?start=0",
        "?start=1000",
        "?start=5000",
        "?start=-5",
        "?start=1e3",
    ] {
        let r = v.get(&format!("/v.flv{q}"));
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, video().as_slice()),
            "{q}"
        );
    }
}

#[test]
fn a_range_is_taken_of_what_is_sent() {
    let v = start();
    let range = |r: &str| {
        v.request(&format!(
            "GET /v.flv?start=100 HTTP/1.1\r\nHost: x\r\nRange: {r}\r\nConnection: close\r\n\r\n"
        ))
    };
    let r = range("bytes=0-9");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 0-9/913"));
    assert_eq!(r.body, &HEADER[..10]);
    let r = range("bytes=-10");
    assert_eq!(r.header("content-range"), Some("bytes 903-912/913"));
    assert_eq!(r.body, b"X099XXXXXX");
    let r = range("bytes=10-32");
    assert_eq!(r.body, [&HEADER[10..], &video()[100..120]].concat());
    assert_eq!(range("bytes=913-").status, 416);
    // Several ranges: the whole of it, as for a streamed body.
    let r = range("bytes=0-1,5-6");
    assert_eq!((r.status, r.body.len()), (200, 913));
}

#[test]
fn conditionals_head_and_methods() {
    let v = start();
    let etag = v
        .get("/v.flv?start=100")
        .header("etag")
        .unwrap()
        .to_string();
    let r = v.request(&format!(
        "GET /v.flv?start=100 HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n"
    ));
    assert_eq!(r.status, 304);
    let head = v.raw(b"HEAD /v.flv?start=100 HTTP/1.0\r\n\r\n");
    let head = String::from_utf8_lossy(&head);
    assert!(
        head.contains("Content-Length: 913") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    let post = v.request("POST /v.flv HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(post.status, 405);
    assert_eq!(v.get("/missing.flv?start=10").status, 404);
}

#[test]
fn http2_clients_get_the_same_bytes() {
    let v = start();
    let out = Command::new("curl")
        .args(["-s", "--max-time", "10", "--http2-prior-knowledge"])
        .arg(format!("http://127.0.0.1:{}/v.flv?start=100", v.port))
        .output()
        .expect("curl runs");
    assert_eq!(out.stdout, [HEADER, &video()[100..]].concat());
}

#[test]
fn directive_errors_name_file_and_line() {
    let dir = TempDir::new("flv-conf");
    for (conf, want) in [
        (
            "events {}\nhttp {\n server {\n  location / { flv on; }\n }\n}\n",
            "invalid number of arguments in \"flv\" directive in ",
        ),
        (
            "events {}\nhttp {\n server {\n  flv;\n }\n}\n",
            "\"flv\" directive is not allowed here in ",
        ),
    ] {
        let out = test_conf(&dir, conf);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains(want) && err.contains("t.conf:4"), "{err}");
    }
}
