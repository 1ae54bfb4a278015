//! sub_filter: strings replaced in bodies from files, `return` and a proxied
//! backend that sends its body in small pieces (matches spanning them), with
//! nginx's once/many, variables, types, header handling, and compression
//! after it.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// A backend that answers one request per connection with `body` written in
/// pieces of `piece` bytes, a pause between them.
fn slow_backend(body: &'static [u8], piece: usize) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(8) {
            let Ok(mut s) = s else { continue };
            let mut head = [0u8; 4096];
            let _ = s.read(&mut head);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            for p in body.chunks(piece) {
                let _ = s.write_all(p);
                let _ = s.flush();
                std::thread::sleep(Duration::from_millis(15));
            }
        }
    });
    port
}

const BODY: &[u8] =
    b"<a href=\"http://backend.internal/x\">one</a> <A HREF=\"http://BACKEND.internal/y\">two</a>";

fn conf(backend: u16) -> String {
    format!(
        r#"
events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}};
        root {{dir}}/html;
        sub_filter http://backend.internal/ https://$host/;
        sub_filter_once off;
        location /once/ {{
            alias {{dir}}/html/;
            sub_filter_once on;
        }}
        location /ret {{
            sub_filter_types text/plain;
            sub_filter $arg_s '[$arg_s]';
            default_type text/plain;
            return 200 "a-b-a-B";
        }}
        location /lm/ {{
            alias {{dir}}/html/;
            sub_filter_last_modified on;
        }}
        location /plain/ {{
            alias {{dir}}/html/;
            sub_filter_types text/css;
        }}
        location /up {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_buffering off;
        }}
        location /gz/ {{
            alias {{dir}}/html/;
            gzip on;
            gzip_min_length 1;
        }}
    }}
}}
"#
    )
}

fn start(backend: u16) -> Vireo {
    let v = Vireo::start(&conf(backend));
    v.dir.write("html/a.html", BODY);
    v.dir.write("html/a.txt", BODY);
    v
}

const WANT: &str =
    "<a href=\"https://localhost/x\">one</a> <A HREF=\"https://localhost/y\">two</a>";

#[test]
fn replaces_in_files_caselessly() {
    let v = start(slow_backend(BODY, 7));
    let r = v.get("/a.html");
    assert_eq!((r.status, r.text()), (200, WANT.to_string()));
    // The length changed: no Content-Length, no ranges, no validators.
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.header("accept-ranges"), None);
    assert_eq!(r.header("last-modified"), None);
    assert_eq!(r.header("etag"), None);
    let r = v.get("/once/a.html");
    assert_eq!(
        r.text(),
        "<a href=\"https://localhost/x\">one</a> <A HREF=\"http://BACKEND.internal/y\">two</a>"
    );
    // sub_filter_last_modified: kept, the ETag weak.
    let r = v.get("/lm/a.html");
    assert!(r.header("last-modified").is_some());
    assert!(
        r.header("etag").unwrap().starts_with("W/\""),
        "{:?}",
        r.header("etag")
    );
}

#[test]
fn only_the_listed_types() {
    let v = start(slow_backend(BODY, 7));
    assert_eq!(v.get("/a.txt").body, BODY);
    assert_eq!(v.get("/plain/a.txt").body, BODY);
    assert_eq!(v.get("/plain/a.html").text(), WANT);
}

#[test]
fn variables_and_empty_strings() {
    let v = start(slow_backend(BODY, 7));
    assert_eq!(v.get("/ret?s=a").text(), "[a]-b-[a]-B");
    assert_eq!(v.get("/ret?s=b").text(), "a-[b]-a-[b]");
    // An empty string is not looked for.
    assert_eq!(v.get("/ret").text(), "a-b-a-B");
}

#[test]
fn matches_span_the_pieces_of_a_streamed_body() {
    for piece in [1, 3, 7, 40] {
        let v = start(slow_backend(BODY, piece));
        let r = v.get("/up");
        assert_eq!(
            (r.status, r.text()),
            (200, WANT.to_string()),
            "pieces of {piece}"
        );
        assert_eq!(r.header("content-length"), None);
    }
}

#[test]
fn ranges_are_sent_unchanged() {
    let v = start(slow_backend(BODY, 7));
    let r = v.request(
        "GET /a.html HTTP/1.1\r\nHost: a\r\nRange: bytes=0-8\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((r.status, r.text()), (206, "<a href=\"".to_string()));
}

#[test]
fn compressed_after_replacing() {
    let v = start(slow_backend(BODY, 7));
    let r = v.request(
        "GET /gz/a.html HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, WANT.replace("localhost", "a"));
}

#[test]
fn bad_directives() {
    let dir = TempDir::new("sub_filter");
    assert_conf_errors(
        &dir,
        &[
            (
                "sub_filter a;",
                "invalid number of arguments in \"sub_filter\" directive",
            ),
            (
                "sub_filter_once maybe;",
                "invalid value \"maybe\" in \"sub_filter_once\" directive, it must be \"on\" or \"off\"",
            ),
            (
                "sub_filter_types text/html; sub_filter_types *;",
                "\"sub_filter_types\" directive is duplicate",
            ),
            ("sub_filter $nosuch x;", "unknown \"nosuch\" variable"),
        ],
    );
}
