//! Static files: index, redirects, errors, types, validators, ranges, traversal.

mod common;
use common::*;

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
    }
}";

#[test]
fn serves_file_and_index() {
    let dir = TempDir::new("st");
    dir.write("html/index.html", "<h1>hi</h1>");
    dir.write("html/a.txt", "hello");
    let v = Vireo::start_in(dir, CONF);
    let r = v.get("/a.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    let r = v.get("/");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "<h1>hi</h1>");
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(v.get("/missing").status, 404);
}
