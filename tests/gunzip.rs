//! gunzip: gzip-encoded answers (a proxied backend's, `gzip_static always`)
//! decompressed for clients that do not take gzip, passed through for those
//! that do; several members; the filters after it see the plain body; an SSI
//! include gets the plain body whatever the client takes.

mod common;
use common::*;
use std::io::{Read, Write};

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

const CONF: &str = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port2};
        root {dir}/back;
        default_type text/plain;
        gzip_static always;
    }
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        gzip_vary on;
        location / {
            gunzip on;
            proxy_pass http://127.0.0.1:{port2};
            proxy_set_header Accept-Encoding gzip;
        }
        location /sub/ {
            gunzip on;
            sub_filter_types text/plain;
            sub_filter XXXX ____;
            sub_filter_once off;
            proxy_pass http://127.0.0.1:{port2}/;
        }
        location /static/ {
            alias {dir}/back/;
            default_type text/plain;
            gunzip on;
            gzip_static always;
        }
        location /off/ {
            proxy_pass http://127.0.0.1:{port2}/;
        }
        location = /page.html {
            ssi on;
        }
    }
}
"#;

fn text() -> Vec<u8> {
    (0..3000u32)
        .flat_map(|i| format!("X{i:04}XXXX\n").into_bytes())
        .collect()
}

fn start() -> Vireo {
    let v = Vireo::start(CONF);
    v.dir.write("back/t.gz", gz(&text()));
    let mut two = gz(b"first\n");
    two.extend(gz(b"second\n"));
    v.dir.write("back/two.gz", two);
    v.dir
        .write("html/page.html", "a <!--#include virtual=\"/two\" --> b");
    v
}

#[test]
fn plain_for_clients_without_gzip() {
    let v = start();
    for path in ["/t", "/static/t"] {
        let r = v.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body, text(), "{path}");
        assert_eq!(r.header("content-encoding"), None, "{path}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{path}");
    }
    assert_eq!(v.get("/two").text(), "first\nsecond\n");
    // Without gunzip the encoded body goes out as it came.
    let r = v.get("/off/t");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.body, gz(&text()));
}

#[test]
fn gzip_for_clients_that_take_it() {
    let v = start();
    let r = v.request(
        "GET /t HTTP/1.1\r\nHost: a\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(&r.body[..])
        .read_to_end(&mut out)
        .unwrap();
    assert_eq!(out, text());
    // HEAD: the head the GET gets.
    let r = v.request("HEAD /t HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.header("content-encoding")), (200, None));
    assert_eq!(r.header("content-length"), None);
}

#[test]
fn filters_after_it_see_the_plain_body() {
    let v = start();
    let body = v.get("/sub/t").text();
    assert!(
        body.starts_with("X0000____\nX0001____\n"),
        "{}",
        &body[..40]
    );
    assert_eq!(body.matches("____").count(), 3000);
}

#[test]
fn subrequests_get_the_plain_body() {
    let v = start();
    for ae in ["", "Accept-Encoding: gzip\r\n"] {
        let r = v.request(&format!(
            "GET /page.html HTTP/1.1\r\nHost: a\r\n{ae}Connection: close\r\n\r\n"
        ));
        assert_eq!(r.status, 200, "{ae}");
        assert_eq!(r.header("content-encoding"), None, "{ae}");
        assert_eq!(r.text(), "a first\nsecond\n b", "{ae}");
    }
}
