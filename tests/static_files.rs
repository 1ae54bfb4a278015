//! Static files: index, redirects, errors, types, validators, ranges, traversal.

mod common;
use common::*;

use std::io::{Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CONF: &str = STATIC_CONF;

/// `CONF` with `extra` added at server level.
fn conf(extra: &str) -> String {
    CONF.replace("root {dir}/html;", &format!("root {{dir}}/html;\n{extra}"))
}

/// Deterministic pseudo-random bytes (xorshift).
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

fn req(path: &str, headers: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n")
}

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

#[test]
fn index_list_first_existing_wins() {
    let dir = TempDir::new("st");
    dir.write("html/d/second.htm", "second");
    dir.write("html/d/third.html", "third");
    dir.write("html/e/third.html", "e-third");
    dir.write("html/f/nothing.txt", "x");
    // A directory named like an index file is skipped.
    dir.write("html/g/first.html/inner.txt", "x");
    dir.write("html/g/third.html", "g-third");
    let v = Vireo::start_in(dir, &conf("index first.html second.htm third.html;"));
    let r = v.get("/d/");
    assert_eq!((r.status, r.text().as_str()), (200, "second"));
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(v.get("/e/").text(), "e-third");
    assert_eq!(v.get("/g/").text(), "g-third");
    // No index file in an existing directory: 403; a missing directory: 404.
    assert_eq!(v.get("/f/").status, 403);
    assert_eq!(v.get("/nodir/").status, 404);
    // Default index is index.html only: the root here has none.
    assert_eq!(v.get("/").status, 403);
}

#[test]
fn index_names_with_variables_and_absolute_ones() {
    let dir = TempDir::new("st");
    dir.write("html/d/a.html", "by arg");
    dir.write("html/fallback.html", "fallback");
    let v = Vireo::start_in(
        dir,
        &conf(
            "location /d/ { index $arg_i.html /fallback.html; }\n\
             location /loop/ { index /loop/; }",
        ),
    );
    assert_eq!(v.get("/d/?i=a").text(), "by arg");
    // Not found: on to the absolute name, an internal redirect found or not.
    assert_eq!(v.get("/d/?i=b").text(), "fallback");
    // A name that leads back to itself ends in 500 after 10 URI changes.
    assert_eq!(v.get("/loop/").status, 500);
}

#[test]
fn directory_without_slash_redirects() {
    let dir = TempDir::new("st");
    dir.write("html/dir/index.html", "in dir");
    dir.write("html/sp ace/index.html", "spaced");
    let v = Vireo::start_in(dir, CONF);
    let r = v.get("/dir");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("http://localhost:{}/dir/", v.port).as_str())
    );
    assert_eq!(r.header("content-type"), Some("text/html"));
    let r = v.get("/dir?a=1&b=2");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("http://localhost:{}/dir/?a=1&b=2", v.port).as_str())
    );
    // The Host header's name is used (lowercase, port replaced by ours).
    let r = v.request("GET /dir HTTP/1.1\r\nHost: Example.COM:1234\r\nConnection: close\r\n\r\n");
    assert_eq!(
        r.header("location"),
        Some(format!("http://example.com:{}/dir/", v.port).as_str())
    );
    // No Host (HTTP/1.0) or an empty one: the address the connection came in on.
    let r = v.request("GET /dir?x HTTP/1.0\r\n\r\n");
    assert_eq!(
        r.header("location"),
        Some(format!("http://127.0.0.1:{}/dir/?x", v.port).as_str())
    );
    // An empty Host is refused, as nginx.
    let r = v.request("GET /dir HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 400);
    // Names are escaped again in the Location.
    let r = v.get("/sp%20ace");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("http://localhost:{}/sp%20ace/", v.port).as_str())
    );
    assert_eq!(v.get("/dir/").text(), "in dir");
    assert_eq!(v.get("/sp%20ace/").text(), "spaced");
}

#[test]
fn missing_and_method_not_allowed() {
    let dir = TempDir::new("st");
    dir.write("html/a.txt", "hello");
    let v = Vireo::start_in(dir, CONF);
    let r = v.get("/nope.txt");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert!(r.text().contains("404 Not Found"));
    assert_eq!(v.get("/a.txt/more").status, 404);
    for m in ["POST", "PUT", "DELETE", "PATCH"] {
        let r = v.request(&format!(
            "{m} /a.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ));
        assert_eq!(r.status, 405, "{m}");
    }
}

#[test]
fn embedded_mime_types_and_default_type() {
    let dir = TempDir::new("st");
    for f in [
        "a.html",
        "a.css",
        "a.js",
        "a.json",
        "a.png",
        "a.jpg",
        "a.svg",
        "a.pdf",
        "A.PNG",
        "noext",
        "a.unknownext",
        "a.tar.gz",
    ] {
        dir.write(&format!("html/{f}"), "x");
    }
    let v = Vireo::start_in(dir, CONF);
    let ct = |p: &str| v.get(p).header("content-type").map(str::to_string);
    assert_eq!(ct("/a.html").as_deref(), Some("text/html"));
    assert_eq!(ct("/a.css").as_deref(), Some("text/css"));
    assert_eq!(ct("/a.js").as_deref(), Some("application/javascript"));
    assert_eq!(ct("/a.json").as_deref(), Some("application/json"));
    assert_eq!(ct("/a.png").as_deref(), Some("image/png"));
    assert_eq!(ct("/A.PNG").as_deref(), Some("image/png"));
    assert_eq!(ct("/a.jpg").as_deref(), Some("image/jpeg"));
    assert_eq!(ct("/a.svg").as_deref(), Some("image/svg+xml"));
    assert_eq!(ct("/a.pdf").as_deref(), Some("application/pdf"));
    assert_eq!(ct("/a.tar.gz").as_deref(), Some("application/gzip"));
    assert_eq!(ct("/noext").as_deref(), Some("text/plain"));
    assert_eq!(ct("/a.unknownext").as_deref(), Some("text/plain"));
}

#[test]
fn types_block_replaces_table_and_default_type_applies() {
    let dir = TempDir::new("st");
    for f in ["a.foo", "a.html", "b.BAR", "noext"] {
        dir.write(&format!("html/{f}"), "x");
    }
    dir.write("html/loc/a.html", "x");
    let v = Vireo::start_in(
        dir,
        &conf(
            "types { application/x-foo foo; text/x-bar bar baz; }
             default_type application/octet-stream;
             location /loc/ { types { text/x-html html; } default_type text/x-default; }",
        ),
    );
    let ct = |p: &str| v.get(p).header("content-type").map(str::to_string);
    assert_eq!(ct("/a.foo").as_deref(), Some("application/x-foo"));
    assert_eq!(ct("/b.BAR").as_deref(), Some("text/x-bar"));
    // html is no longer in the table.
    assert_eq!(ct("/a.html").as_deref(), Some("application/octet-stream"));
    assert_eq!(ct("/noext").as_deref(), Some("application/octet-stream"));
    assert_eq!(ct("/loc/a.html").as_deref(), Some("text/x-html"));
}

#[test]
fn etag_and_last_modified() {
    let dir = TempDir::new("st");
    let p = dir.write("html/a.txt", "hello world");
    set_mtime(&p, 1_700_000_000);
    let v = Vireo::start_in(dir, CONF);
    let r = v.get("/a.txt");
    assert_eq!(
        r.header("last-modified"),
        Some("Tue, 14 Nov 2023 22:13:20 GMT")
    );
    // nginx format: "hex(mtime)-hex(size)".
    assert_eq!(r.header("etag"), Some("\"6553f100-b\""));
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
}

#[test]
fn conditional_get_not_modified() {
    let dir = TempDir::new("st");
    let p = dir.write("html/a.txt", "hello world");
    set_mtime(&p, 1_700_000_000);
    let v = Vireo::start_in(dir, CONF);
    let etag = v.get("/a.txt").header("etag").unwrap().to_string();
    let lm = "Tue, 14 Nov 2023 22:13:20 GMT";

    let r = v.request(&req("/a.txt", &format!("If-None-Match: {etag}\r\n")));
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    assert_eq!(r.header("content-length"), None);
    let r = v.request(&req(
        "/a.txt",
        &format!("If-None-Match: \"x\", W/{etag}\r\n"),
    ));
    assert_eq!(r.status, 304, "weak comparison");
    let r = v.request(&req("/a.txt", "If-None-Match: *\r\n"));
    assert_eq!(r.status, 304);
    let r = v.request(&req("/a.txt", "If-None-Match: \"other\"\r\n"));
    assert_eq!((r.status, r.text().as_str()), (200, "hello world"));
    // If-None-Match wins over If-Modified-Since.
    let r = v.request(&req(
        "/a.txt",
        &format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n"),
    ));
    assert_eq!(r.status, 200);

    // if_modified_since exact (default).
    let r = v.request(&req("/a.txt", &format!("If-Modified-Since: {lm}\r\n")));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("last-modified"), Some(lm));
    let later = "Wed, 15 Nov 2023 00:00:00 GMT";
    assert_eq!(
        v.request(&req("/a.txt", &format!("If-Modified-Since: {later}\r\n")))
            .status,
        200
    );
    let earlier = "Mon, 13 Nov 2023 00:00:00 GMT";
    assert_eq!(
        v.request(&req("/a.txt", &format!("If-Modified-Since: {earlier}\r\n")))
            .status,
        200
    );
    assert_eq!(
        v.request(&req("/a.txt", "If-Modified-Since: garbage\r\n"))
            .status,
        200
    );
    // HEAD too.
    let r = v.request(&format!(
        "HEAD /a.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n"
    ));
    assert_eq!(r.status, 304);
}

#[test]
fn if_modified_since_before_and_off() {
    let dir = TempDir::new("st");
    let p = dir.write("html/a.txt", "hello");
    set_mtime(&p, 1_700_000_000);
    let p = dir.write("html/off/a.txt", "hello");
    set_mtime(&p, 1_700_000_000);
    let v = Vireo::start_in(
        dir,
        &conf("if_modified_since before; location /off/ { if_modified_since off; }"),
    );
    let exact = "Tue, 14 Nov 2023 22:13:20 GMT";
    let later = "Wed, 15 Nov 2023 00:00:00 GMT";
    let earlier = "Mon, 13 Nov 2023 00:00:00 GMT";
    let ims = |p: &str, d: &str| {
        v.request(&req(p, &format!("If-Modified-Since: {d}\r\n")))
            .status
    };
    assert_eq!(ims("/a.txt", exact), 304);
    assert_eq!(ims("/a.txt", later), 304);
    assert_eq!(ims("/a.txt", earlier), 200);
    assert_eq!(ims("/off/a.txt", exact), 200);
    assert_eq!(ims("/off/a.txt", later), 200);
}

#[test]
fn etag_off() {
    let dir = TempDir::new("st");
    dir.write("html/a.txt", "hello");
    let v = Vireo::start_in(dir, &conf("etag off;"));
    let r = v.get("/a.txt");
    assert_eq!(r.header("etag"), None);
    assert!(r.header("last-modified").is_some());
    let r = v.request(&req("/a.txt", "If-None-Match: \"anything\"\r\n"));
    assert_eq!(r.status, 200);
    // If-Match can never match a missing strong ETag (except *).
    assert_eq!(
        v.request(&req("/a.txt", "If-Match: \"anything\"\r\n"))
            .status,
        412
    );
    assert_eq!(v.request(&req("/a.txt", "If-Match: *\r\n")).status, 200);
}

#[test]
fn if_match_and_if_unmodified_since() {
    let dir = TempDir::new("st");
    let p = dir.write("html/a.txt", "hello");
    set_mtime(&p, 1_700_000_000);
    let v = Vireo::start_in(dir, CONF);
    let etag = v.get("/a.txt").header("etag").unwrap().to_string();
    let r = v.request(&req("/a.txt", "If-Match: \"nope\"\r\n"));
    assert_eq!(r.status, 412);
    assert!(!r.text().contains("hello"));
    let r = v.request(&req("/a.txt", &format!("If-Match: \"nope\", {etag}\r\n")));
    assert_eq!((r.status, r.text().as_str()), (200, "hello"));
    let r = v.request(&req("/a.txt", &format!("If-Match: W/{etag}\r\n")));
    assert_eq!(r.status, 412, "weak tags never match If-Match");
    let r = v.request(&req(
        "/a.txt",
        "If-Unmodified-Since: Mon, 13 Nov 2023 00:00:00 GMT\r\n",
    ));
    assert_eq!(r.status, 412);
    let r = v.request(&req(
        "/a.txt",
        "If-Unmodified-Since: Wed, 15 Nov 2023 00:00:00 GMT\r\n",
    ));
    assert_eq!(r.status, 200);
}

/// The parts of a multipart/byteranges body: (Content-Range, Content-Type, data).
fn multipart(r: &Resp) -> Vec<(String, Option<String>, Vec<u8>)> {
    let ct = r.header("content-type").expect("content-type");
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap_or_else(|| panic!("not multipart: {ct}"));
    let delim = format!("\r\n--{boundary}");
    let mut rest = &r.body[..];
    let mut parts = Vec::new();
    loop {
        assert!(
            rest.starts_with(delim.as_bytes()),
            "boundary expected: {:?}",
            String::from_utf8_lossy(&rest[..rest.len().min(80)])
        );
        rest = &rest[delim.len()..];
        if rest == b"--\r\n" {
            return parts;
        }
        assert!(rest.starts_with(b"\r\n"));
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("part head end");
        let head = String::from_utf8_lossy(&rest[2..end]).into_owned();
        let mut cr = None;
        let mut pct = None;
        for line in head.split("\r\n") {
            let (k, v) = line.split_once(':').expect("header line");
            match k.to_ascii_lowercase().as_str() {
                "content-range" => cr = Some(v.trim().to_string()),
                "content-type" => pct = Some(v.trim().to_string()),
                other => panic!("unexpected part header {other}"),
            }
        }
        let cr = cr.expect("Content-Range in part");
        let (a, b) = cr
            .strip_prefix("bytes ")
            .and_then(|s| s.split_once('/'))
            .and_then(|(r, _)| r.split_once('-'))
            .expect("bytes a-b/size");
        let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
        rest = &rest[end + 4..];
        parts.push((cr, pct, rest[..b - a + 1].to_vec()));
        rest = &rest[b - a + 1..];
    }
}

/// Range cases on a `size`-byte file with `extra` server settings (large sizes
/// exercise the from-disk and sendfile paths).
fn ranges_case(extra: &str, size: usize) {
    let dir = TempDir::new("st");
    let data = random_bytes(size, 7);
    dir.write("html/f.txt", &data);
    let v = Vireo::start_in(dir, &conf(extra));
    let range = |spec: &str| v.request(&req("/f.txt", &format!("Range: {spec}\r\n")));

    let r = range("bytes=0-4");
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 0-4/{size}").as_str())
    );
    assert_eq!(r.header("content-length"), Some("5"));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.body, data[0..5]);

    let r = range("bytes=100-199");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, data[100..200]);

    let r = range("bytes=-10");
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes {}-{}/{size}", size - 10, size - 1).as_str())
    );
    assert_eq!(r.body, data[size - 10..]);

    let r = range(&format!("bytes={}-", size - 20));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, data[size - 20..]);

    // Past the end is clamped.
    let r = range(&format!("bytes={}-{}", size - 3, size + 100));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, data[size - 3..]);

    let r = range("bytes=0-9,20-29");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), None);
    let parts = multipart(&r);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].0, format!("bytes 0-9/{size}"));
    assert_eq!(parts[0].1.as_deref(), Some("text/plain"));
    assert_eq!(parts[0].2, data[0..10]);
    assert_eq!(parts[1].0, format!("bytes 20-29/{size}"));
    assert_eq!(parts[1].2, data[20..30]);
    assert_eq!(
        r.header("content-length")
            .unwrap()
            .parse::<usize>()
            .unwrap(),
        r.body.len()
    );

    let r = range(&format!("bytes=-5,{}-{}", size / 4, size / 4 + 99));
    let parts = multipart(&r);
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].2, data[size - 5..]);
    assert_eq!(parts[1].2, data[size / 4..size / 4 + 100]);

    if size > 200_000 {
        // Parts big enough to leave by sendfile when it is on.
        let r = range("bytes=100-150099");
        assert_eq!(r.status, 206);
        assert!(r.body == data[100..150_100]);
        let r = range(&format!("bytes=0-99999,{}-", size - 70_000));
        let parts = multipart(&r);
        assert_eq!(parts.len(), 2);
        assert!(parts[0].2 == data[..100_000]);
        assert!(parts[1].2 == data[size - 70_000..]);
        assert_eq!(
            parts[1].0,
            format!("bytes {}-{}/{size}", size - 70_000, size - 1)
        );
    }

    let r = range(&format!("bytes={size}-"));
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{size}").as_str())
    );
    let r = range(&format!("bytes={}-{}", size + 10, size + 20));
    assert_eq!(r.status, 416);

    // A unit other than bytes: ignored, the whole file.
    for spec in ["items=0-4", "bytes 0-4"] {
        let r = range(spec);
        assert_eq!(r.status, 200, "{spec}");
        assert_eq!(r.body, data, "{spec}");
    }
    // Malformed byte ranges: ignored (RFC 9110 allows it) or 416 (nginx).
    for spec in ["bytes=a-b", "bytes=5-1x", "bytes=0--1", "bytes=1-2,"] {
        let r = range(spec);
        assert!(
            r.status == 416 || (r.status == 200 && r.body == data),
            "{spec}: {}",
            r.status
        );
    }

    // HEAD with a range: headers of the 206 only.
    let r = v.request(
        "HEAD /f.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-4\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-length"), Some("5"));
    assert!(r.body.is_empty());
}

#[test]
fn ranges_small_file() {
    ranges_case("", 1000);
}

#[test]
fn ranges_small_file_from_open_file_cache() {
    ranges_case("open_file_cache max=10;", 1000);
}

#[test]
fn ranges_large_file_sendfile() {
    ranges_case("sendfile on; open_file_cache max=10;", 300_000);
}

#[test]
fn ranges_large_file_no_sendfile() {
    ranges_case("sendfile off;", 300_000);
}

#[test]
fn overlapping_ranges_are_bounded() {
    let dir = TempDir::new("st");
    let data = random_bytes(10_000, 3);
    dir.write("html/f.bin", &data);
    let v = Vireo::start_in(dir, CONF);
    // CVE-2011-3192: hundreds of overlapping ranges must not multiply the body.
    let spec: Vec<String> = (0..300).map(|i| format!("{i}-9999")).collect();
    let r = v.request(&req(
        "/f.bin",
        &format!("Range: bytes={}\r\n", spec.join(",")),
    ));
    assert!(r.body.len() <= 2 * data.len(), "{} bytes", r.body.len());
    assert!(matches!(r.status, 200 | 206 | 416), "{}", r.status);
}

#[test]
fn max_ranges() {
    let dir = TempDir::new("st");
    let data = random_bytes(1000, 5);
    dir.write("html/f.bin", &data);
    dir.write("html/zero/f.bin", &data);
    let v = Vireo::start_in(
        dir,
        &conf("max_ranges 1; location /zero/ { max_ranges 0; }"),
    );
    let range = |p: &str, spec: &str| v.request(&req(p, &format!("Range: {spec}\r\n")));
    let r = range("/f.bin", "bytes=0-9");
    assert_eq!((r.status, r.body.len()), (206, 10));
    let r = range("/f.bin", "bytes=0-9,20-29");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, data);
    let r = range("/zero/f.bin", "bytes=0-9");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, data);
    assert_eq!(r.header("content-range"), None);
}

#[test]
fn if_range() {
    let dir = TempDir::new("st");
    let data = random_bytes(1000, 9);
    let p = dir.write("html/f.bin", &data);
    set_mtime(&p, 1_700_000_000);
    let v = Vireo::start_in(dir, CONF);
    let etag = v.get("/f.bin").header("etag").unwrap().to_string();
    let lm = "Tue, 14 Nov 2023 22:13:20 GMT";
    let with = |ir: &str| {
        v.request(&req(
            "/f.bin",
            &format!("Range: bytes=10-19\r\nIf-Range: {ir}\r\n"),
        ))
    };
    let r = with(&etag);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, data[10..20]);
    let r = with("\"other\"");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, data);
    let r = with(lm);
    assert_eq!(r.status, 206);
    let r = with("Wed, 15 Nov 2023 00:00:00 GMT");
    assert_eq!(r.status, 200);
    let r = with(&format!("W/{etag}"));
    assert_eq!(r.status, 200, "weak validators never satisfy If-Range");
}

#[test]
fn if_range_compares_the_validators_add_header_sets() {
    let dir = TempDir::new("st");
    let data = random_bytes(1000, 10);
    for f in ["lm/f.bin", "none/f.bin", "tag/f.bin"] {
        let p = dir.write(&format!("html/{f}"), &data);
        set_mtime(&p, 1_700_000_000);
    }
    let v = Vireo::start_in(
        dir,
        &conf(
            "location /lm/ { add_header Last-Modified \"Mon, 28 Sep 1970 06:00:00 GMT\"; }
             location /none/ { add_header Last-Modified \"\"; }
             location /tag/ { add_header ETag '\"mine\"'; }",
        ),
    );
    let with = |p: &str, ir: &str| {
        v.request(&req(
            p,
            &format!("Range: bytes=10-19\r\nIf-Range: {ir}\r\n"),
        ))
        .status
    };
    let file_lm = "Tue, 14 Nov 2023 22:13:20 GMT";
    // As nginx: the range filter sees the fields add_header put in place.
    assert_eq!(with("/lm/f.bin", "Mon, 28 Sep 1970 06:00:00 GMT"), 206);
    assert_eq!(with("/lm/f.bin", file_lm), 200);
    assert_eq!(with("/none/f.bin", file_lm), 200);
    assert_eq!(with("/tag/f.bin", "\"mine\""), 206);
    assert_eq!(with("/tag/f.bin", file_lm), 206);
}

/// Read the one response on `s` until the server closes, returning (head, body).
fn read_big(s: &mut std::net::TcpStream) -> (Resp, Vec<u8>) {
    let raw = read_to_close(s);
    let r = Resp::parse(&raw).expect("response");
    let body = r.body.clone();
    (r, body)
}

fn large_file_case(extra: &str) {
    let dir = TempDir::new("st");
    let data = random_bytes(3 << 20, 11);
    dir.write("html/big.bin", &data);
    let v = Vireo::start_in(dir, &conf(extra));
    for _ in 0..2 {
        let mut s = v.connect();
        s.write_all(req("/big.bin", "").as_bytes()).unwrap();
        let (r, body) = read_big(&mut s);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some("3145728"));
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
        assert_eq!(body.len(), data.len());
        assert!(body == data, "body differs");
    }
    // Keep-alive after a large body, read slowly.
    let mut s = v.connect();
    s.write_all(
        format!(
            "GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\nHEAD /big.bin HTTP/1.1\r\nHost: x\r\n\r\n{}",
            req("/big.bin", "Range: bytes=1000000-1000099\r\n")
        )
        .as_bytes(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let (r1, n1) = Resp::parse_one(&raw).unwrap();
    assert_eq!(r1.status, 200);
    assert!(r1.body == data);
    let rest = &raw[n1..];
    let head_end = rest.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let r2 = Resp::parse(&rest[..head_end]).unwrap();
    assert_eq!(r2.status, 200);
    assert_eq!(r2.header("content-length"), Some("3145728"));
    let r3 = Resp::parse(&rest[head_end..]).unwrap();
    assert_eq!(r3.status, 206);
    assert_eq!(r3.body, data[1_000_000..1_000_100]);
}

#[test]
fn large_file_sendfile_on() {
    large_file_case("sendfile on;");
}

#[test]
fn large_file_sendfile_off() {
    large_file_case("sendfile off;");
}

#[test]
fn large_file_sendfile_tcp_nopush() {
    large_file_case("sendfile on; tcp_nopush on; open_file_cache max=10;");
}

#[test]
fn traversal_never_leaves_root() {
    let dir = TempDir::new("st");
    dir.write("secret.txt", "TOPSECRET");
    dir.write("html/a/b.txt", "inner");
    dir.write("html/x.txt", "root-x");
    dir.write("other/y.txt", "alias-y");
    let v = Vireo::start_in(
        dir,
        &conf("location /al/ { alias {dir}/other/; } location /noslash { alias {dir}/other/; }"),
    );
    let cases: &[(&str, &[u16])] = &[
        ("/../secret.txt", &[400]),
        ("/%2e%2e/secret.txt", &[400]),
        ("/%2E%2E/secret.txt", &[400]),
        ("/.%2e/secret.txt", &[400]),
        ("/%2e./secret.txt", &[400]),
        ("/%2e%2e%2fsecret.txt", &[400]),
        ("/a/../../secret.txt", &[400]),
        ("/a/%2e%2e/%2e%2e/secret.txt", &[400]),
        ("/a%2f..%2f..%2fsecret.txt", &[400]),
        ("//../secret.txt", &[400]),
        ("/%252e%252e/secret.txt", &[404]),
        ("/%252e%252e%252fsecret.txt", &[404]),
        ("/..%5csecret.txt", &[404]),
        ("/a/..\\..\\secret.txt", &[404, 400]),
        ("/..\\secret.txt", &[404, 400]),
        ("/secret.txt%00.html", &[400]),
        ("/x.txt%00", &[400]),
        ("/%00", &[400]),
        ("/al/../secret.txt", &[400, 404]),
        ("/al/../../secret.txt", &[400]),
        ("/al/%2e%2e/secret.txt", &[400, 404]),
        ("/al/%2e%2e/%2e%2e/secret.txt", &[400]),
        ("/noslash../secret.txt", &[400, 403, 404]),
        ("/noslash/../../secret.txt", &[400]),
    ];
    for (path, codes) in cases {
        let r = v.request(&format!(
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        ));
        assert!(!r.text().contains("TOPSECRET"), "{path} served the secret");
        assert!(
            codes.contains(&r.status),
            "{path}: {} not in {codes:?}",
            r.status
        );
    }
    // Normalisation that stays inside root works.
    assert_eq!(v.get("/a/../x.txt").text(), "root-x");
    assert_eq!(v.get("/a/%2e%2e/x.txt").text(), "root-x");
    assert_eq!(v.get("/a/./b.txt").text(), "inner");
    assert_eq!(v.get("//a//b.txt").text(), "inner");
    assert_eq!(v.get("/al/y.txt").text(), "alias-y");
    assert_eq!(v.get("/al/../x.txt").text(), "root-x");
}

#[test]
fn percent_encoded_names() {
    let dir = TempDir::new("st");
    dir.write("html/a b.txt", "space");
    dir.write("html/%41.txt", "literal-percent");
    dir.write("html/A.txt", "letter-a");
    dir.write("html/caf\u{e9}.txt", "utf8");
    dir.write("html/q?.txt", "question");
    let v = Vireo::start_in(dir, CONF);
    assert_eq!(v.get("/a%20b.txt").text(), "space");
    assert_eq!(v.get("/%41.txt").text(), "letter-a");
    assert_eq!(v.get("/%2541.txt").text(), "literal-percent");
    assert_eq!(v.get("/caf%C3%A9.txt").text(), "utf8");
    assert_eq!(v.get("/caf%c3%a9.txt").text(), "utf8");
    assert_eq!(v.get("/q%3F.txt").text(), "question");
    // The query string is not part of the file name.
    assert_eq!(v.get("/A.txt?x=1").text(), "letter-a");
}

#[test]
fn empty_file_and_range_on_it() {
    let dir = TempDir::new("st");
    dir.write("html/empty.txt", "");
    let v = Vireo::start_in(dir, CONF);
    let r = v.get("/empty.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("0"));
    let r = v.request(&req("/empty.txt", "Range: bytes=0-\r\n"));
    assert!(matches!(r.status, 200 | 416), "{}", r.status);
}

#[test]
fn mtime_in_the_future_and_now() {
    // Last-Modified is exactly the file's mtime, whatever it is.
    let dir = TempDir::new("st");
    let p = dir.write("html/a.txt", "x");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    set_mtime(&p, now + 3600);
    let v = Vireo::start_in(dir, CONF);
    let r = v.get("/a.txt");
    let lm = httpdate::parse_http_date(r.header("last-modified").unwrap()).unwrap();
    assert_eq!(lm.duration_since(UNIX_EPOCH).unwrap().as_secs(), now + 3600);
}

#[test]
fn file_with_trailing_slash_and_special_files() {
    let dir = TempDir::new("st");
    dir.write("html/a.txt", "hello");
    let fifo = dir.path().join("html/fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    let v = Vireo::start_in(dir, CONF);
    assert_eq!(v.get("/a.txt/").status, 404);
    assert_eq!(v.get("/a.txt/x").status, 404);
    if made {
        // Opening a FIFO must neither block the worker nor serve it.
        let t = std::time::Instant::now();
        assert_eq!(v.get("/fifo").status, 404);
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(v.get("/a.txt").text(), "hello");
    }
}

#[test]
fn symlink_inside_root_is_followed() {
    let dir = TempDir::new("st");
    dir.write("html/real.txt", "real");
    std::os::unix::fs::symlink(
        dir.path().join("html/real.txt"),
        dir.path().join("html/link.txt"),
    )
    .unwrap();
    let v = Vireo::start_in(dir, CONF);
    assert_eq!(v.get("/link.txt").text(), "real");
}

#[test]
fn log_not_found_off_keeps_missing_files_out_of_the_error_log() {
    let dir = TempDir::new("st");
    dir.write("html/quiet/x.txt", "x");
    let conf = "
error_log logs/error.log info;
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /quiet/ { log_not_found off; }
    }
}";
    let v = Vireo::start_in(dir, conf);
    assert_eq!(v.get("/quiet/missing.txt").status, 404);
    assert_eq!(v.get("/quiet/nodir/").status, 404);
    assert_eq!(v.get("/loud.txt").status, 404);
    assert_eq!(v.get("/loudir/").status, 404);
    assert!(eventually(5, || error_log(&v).contains("loudir")));
    let log = error_log(&v);
    assert!(
        log.contains("/html/loud.txt\" failed (2: No such file or directory)"),
        "{log}"
    );
    assert!(
        log.contains("/html/loudir/index.html\" is not found (2: No such file or directory)"),
        "{log}"
    );
    assert!(!log.contains("quiet"), "{log}");
}

#[test]
fn redirect_settings_shape_the_location() {
    let dir = TempDir::new("st");
    dir.write("html/dir/index.html", "in dir");
    let conf = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        server_name first.example second.example;
        root {dir}/html;
        location /rel/ { absolute_redirect off; return 301 /x; }
        location /named/ { server_name_in_redirect on; return 302 /y; }
        location /noport/ { port_in_redirect off; return 302 /z; }
        location /both/ { server_name_in_redirect on; port_in_redirect off; return 302 /w; }
        location /dir { absolute_redirect off; }
    }
}";
    let v = Vireo::start_in(dir, conf);
    let loc = |path: &str| {
        let r = v.request(&format!(
            "GET {path} HTTP/1.1\r\nHost: asked.example\r\nConnection: close\r\n\r\n"
        ));
        r.header("location").map(str::to_string)
    };
    assert_eq!(loc("/rel/").as_deref(), Some("/x"));
    assert_eq!(loc("/dir").as_deref(), Some("/dir/"));
    assert_eq!(
        loc("/named/"),
        Some(format!("http://first.example:{}/y", v.port))
    );
    assert_eq!(loc("/noport/").as_deref(), Some("http://asked.example/z"));
    assert_eq!(loc("/both/").as_deref(), Some("http://first.example/w"));
}

#[test]
fn two_types_blocks_at_one_level_add_up() {
    let dir = TempDir::new("st");
    dir.write("html/a.wasm", "w");
    dir.write("html/a.html", "h");
    dir.write("html/a.foo", "f");
    let conf = "
error_log logs/error.log info;
events {}
http {
    access_log off;
    types { text/html html; application/octet-stream wasm; }
    types { application/wasm wasm; text/x-foo foo; }
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
    }
}";
    let v = Vireo::start_in(dir, conf);
    let ct = |p: &str| v.get(p).header("content-type").map(str::to_string);
    assert_eq!(ct("/a.html").as_deref(), Some("text/html"));
    assert_eq!(ct("/a.wasm").as_deref(), Some("application/wasm"));
    assert_eq!(ct("/a.foo").as_deref(), Some("text/x-foo"));
    let log = error_log(&v);
    assert!(
        log.contains(
            "duplicate extension \"wasm\", content type: \"application/wasm\", previous content type: \"application/octet-stream\" in "
        ),
        "{log}"
    );
}

#[test]
fn root_with_variables_is_rendered_per_request() {
    let dir = TempDir::new("st");
    dir.write("sites/a.test/index.html", "site a");
    dir.write("sites/b.test/x.txt", "site b");
    dir.write("html/rel/y.txt", "relative");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/sites/$host;\n  \
         location /rel/ { root html/$arg_d; try_files $uri =404; }\n  \
         location = /doc { return 200 $document_root; }\n }\n}\n",
    );
    let get = |host: &str, path: &str| {
        v.request(&format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ))
    };
    assert_eq!(get("a.test", "/").text(), "site a");
    assert_eq!(get("b.test", "/x.txt").text(), "site b");
    assert_eq!(get("c.test", "/x.txt").status, 404);
    assert!(get("a.test", "/doc").text().ends_with("/sites/a.test"));
    // Relative to the prefix, rendered in the location that says so; a
    // rendered `..` is refused.
    assert_eq!(get("a.test", "/rel/y.txt?d=").text(), "relative");
    assert_eq!(get("a.test", "/rel/y.txt?d=..").status, 404);
}
