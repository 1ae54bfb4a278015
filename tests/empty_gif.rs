//! empty_gif: the 43-byte picture for GET and HEAD, 405 otherwise.

mod common;
use common::*;

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        location = /pixel.gif { empty_gif; }
    }
}";

#[test]
fn get_head_and_other_methods() {
    let v = Vireo::start(CONF);
    let r = v.get("/pixel.gif");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("image/gif"));
    assert_eq!(r.header("content-length"), Some("43"));
    assert!(r.body.starts_with(b"GIF89a\x01\x00\x01\x00") && r.body.ends_with(b";"));
    let head = v.raw(b"HEAD /pixel.gif HTTP/1.0\r\n\r\n");
    let head = String::from_utf8_lossy(&head);
    assert!(
        head.contains("image/gif") && head.ends_with("\r\n\r\n"),
        "{head}"
    );
    let put = v.request("PUT /pixel.gif HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(put.status, 405);
}
