//! add_trailer: HTTP/1.1 chunked trailers made after the body, $sent_trailer_NAME,
//! statuses and `always`, and when no trailers go out (HTTP/1.0, HEAD,
//! chunked_transfer_encoding off).

mod common;
use common::*;
use std::io::Write;

const CONF: &str = "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  \
    root {dir}/html;\n  add_trailer X-Var $host;\n  add_trailer X-Always yes always;\n  \
    add_trailer X-Empty '';\n  add_trailer X-Copy $sent_trailer_x_var;\n  \
    location /plain { chunked_transfer_encoding off; }\n  location /own { add_trailer X-Own 1; add_trailer X-Own 2; add_trailer X-Both $sent_trailer_x_own; }\n }\n}\n";

fn raw(v: &Vireo, req: &str) -> String {
    let mut s = v.connect();
    s.write_all(req.as_bytes()).unwrap();
    String::from_utf8_lossy(&read_to_close(&mut s)).into_owned()
}

fn get11(v: &Vireo, path: &str) -> String {
    raw(
        v,
        &format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"),
    )
}

#[test]
fn trailers_after_a_chunked_body() {
    let dir = TempDir::new("trailers");
    dir.write("html/t", "SEE-THIS");
    dir.write("html/own", "x");
    let v = Vireo::start_in(dir, CONF);
    let r = get11(&v, "/t");
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    assert!(
        head.contains("Transfer-Encoding: chunked") && !head.contains("Content-Length"),
        "{r}"
    );
    assert_eq!(
        body,
        "8\r\nSEE-THIS\r\n0\r\nX-Var: localhost\r\nX-Always: yes\r\nX-Copy: localhost\r\n\r\n"
    );
    // A 404: only the `always` one.
    let r = get11(&v, "/nx");
    assert!(r.ends_with("0\r\nX-Always: yes\r\n\r\n"), "{r}");
    // A level with its own add_trailer inherits none.
    let r = get11(&v, "/own");
    // $sent_trailer_NAME joins several fields of the name.
    assert!(
        r.ends_with("1\r\nx\r\n0\r\nX-Own: 1\r\nX-Own: 2\r\nX-Both: 1, 2\r\n\r\n"),
        "{r}"
    );
}

#[test]
fn no_trailers_without_chunked_framing() {
    let dir = TempDir::new("trailers-no");
    dir.write("html/t", "SEE-THIS");
    dir.write("html/plain/t", "SEE-THIS");
    let v = Vireo::start_in(dir, CONF);
    let r = raw(&v, "GET /t HTTP/1.0\r\nHost: localhost\r\n\r\n");
    assert!(
        r.ends_with("\r\n\r\nSEE-THIS") && r.contains("Content-Length: 8"),
        "{r}"
    );
    let r = raw(
        &v,
        "HEAD /t HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert!(!r.contains("X-Always"), "{r}");
    let r = get11(&v, "/plain/t");
    assert!(
        r.ends_with("\r\n\r\nSEE-THIS") && !r.contains("X-Always"),
        "{r}"
    );
}
