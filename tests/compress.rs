//! Compression: gzip, brotli and zstd on the fly, q-value negotiation, the
//! gzip_* rules (types, length, statuses, HTTP version, proxied, disable,
//! vary), precompressed static variants, the compressed-variant cache, a
//! 100 MB streamed body with flat server memory, and the Debian tools as
//! independent decoders.

mod common;
use common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// A server with `extra` at server level.
fn conf(extra: &str) -> String {
    STATIC_CONF.replace("root {dir}/html;", &format!("root {{dir}}/html;\n{extra}"))
}

/// Text that compresses about as well as source code (deterministic).
fn text(n: usize, seed: u32) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "function ",
        "return ",
        "var ",
        "this.",
        "value",
        " = ",
        "(",
        ")",
        "{\n",
        "}\n",
        ";\n",
        "if ",
        "else ",
        "null",
        "undefined",
        "element",
        "document",
        ".length",
        " + ",
        "0x1f",
        "\"string\"",
        ", ",
        "prototype",
        "callback",
    ];
    let mut x = seed.wrapping_mul(2654435761) | 1;
    let mut v = Vec::with_capacity(n + 16);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.extend_from_slice(WORDS[(x % WORDS.len() as u32) as usize].as_bytes());
        if x.is_multiple_of(11) {
            v.extend_from_slice(format!("{}", x % 1000).as_bytes());
        }
    }
    v.truncate(n);
    v
}

fn req(path: &str, headers: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}Connection: close\r\n\r\n")
}

fn ae(path: &str, accept: &str) -> String {
    req(path, &format!("Accept-Encoding: {accept}\r\n"))
}

/// The body as sent on the wire, without transfer coding.
fn body(r: &Resp) -> Vec<u8> {
    // `Resp::parse` undoes chunked framing.
    r.body.clone()
}

/// Undo the content coding named by the response, with the Rust decoders.
fn decode(r: &Resp) -> Vec<u8> {
    let b = body(r);
    decode_as(r.header("content-encoding"), &b)
}

fn decode_as(coding: Option<&str>, b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => return b.to_vec(),
        Some("gzip") => {
            flate2::read::MultiGzDecoder::new(b)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("br") => {
            brotli::Decompressor::new(b, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Some("zstd") => out = zstd::decode_all(b).unwrap(),
        Some(other) => panic!("unexpected coding {other}"),
    }
    out
}

fn etag_of(path: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    format!("\"{:x}-{:x}\"", m.mtime(), m.size())
}

const JS: &str = "gzip_types application/javascript text/css;\n";

#[test]
fn gzip_round_trip_small_medium_large() {
    for ofc in ["", "open_file_cache max=100;\n"] {
        let dir = TempDir::new("cz");
        let small = text(5_000, 1);
        let medium = text(100_000, 2);
        let large = text(1_500_000, 3);
        dir.write("html/s.js", &small);
        dir.write("html/m.js", &medium);
        dir.write("html/l.js", &large);
        let v = Vireo::start_in(dir, &conf(&format!("gzip on;\n{JS}{ofc}")));
        for (path, data) in [("/s.js", &small), ("/m.js", &medium), ("/l.js", &large)] {
            for _ in 0..2 {
                let r = v.request(&ae(path, "gzip, deflate"));
                assert_eq!(r.status, 200, "{path}");
                assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
                assert_eq!(
                    r.header("content-type"),
                    Some("application/javascript"),
                    "{path}"
                );
                assert_eq!(&decode(&r), data, "{path} {ofc}");
                assert!(body(&r).len() < data.len() / 2, "{path} compresses");
                let etag = r.header("etag").unwrap();
                assert!(etag.starts_with("W/\""), "weak ETag on {path}: {etag}");
                assert!(r.header("accept-ranges").is_none(), "{path}");
                assert!(r.header("last-modified").is_some(), "{path}");
                assert!(r.header("vary").is_none(), "gzip_vary is off");
                // Compressed as sent or whole, as nginx: no length; the
                // close ends it here.
                assert!(r.header("content-length").is_none());
                assert_eq!(r.header("connection"), Some("close"));
            }
            // Without Accept-Encoding: the file as it is.
            let r = v.get(path);
            assert!(r.header("content-encoding").is_none());
            assert_eq!(&r.body, data);
            assert!(!r.header("etag").unwrap().starts_with("W/"));
            assert_eq!(r.header("accept-ranges"), Some("bytes"));
        }
    }
}

#[test]
fn brotli_and_zstd_round_trip() {
    let dir = TempDir::new("cz");
    let small = text(3_000, 4);
    let large = text(700_000, 5);
    dir.write("html/s.css", &small);
    dir.write("html/l.css", &large);
    let v = Vireo::start_in(
        dir,
        &conf(
            "gzip on; gzip_types text/css;\nbrotli on; brotli_types text/css; brotli_comp_level 4;\n\
             zstd on; zstd_types text/css; zstd_comp_level 3;\n",
        ),
    );
    for (accept, want) in [("br", "br"), ("zstd", "zstd"), ("gzip", "gzip")] {
        for (path, data) in [("/s.css", &small), ("/l.css", &large)] {
            let r = v.request(&ae(path, accept));
            assert_eq!(r.header("content-encoding"), Some(want), "{path} {accept}");
            assert_eq!(&decode(&r), data, "{path} {accept}");
            assert!(body(&r).len() < data.len() / 2);
        }
    }
}

#[test]
fn q_value_negotiation() {
    let dir = TempDir::new("cz");
    dir.write("html/a.html", text(4000, 6));
    let v = Vireo::start_in(dir, &conf("gzip on; brotli on; zstd on;\n"));
    for (accept, want) in [
        ("gzip, deflate, br, zstd", Some("br")),
        ("gzip, zstd", Some("zstd")),
        ("gzip", Some("gzip")),
        ("br;q=0.5, gzip;q=0.9", Some("gzip")),
        ("br;q=0.5, zstd;q=0.7, gzip;q=0.6", Some("zstd")),
        ("br;q=0, gzip", Some("gzip")),
        ("*", Some("br")),
        ("*;q=0.3, gzip;q=0.4", Some("gzip")),
        ("*, br;q=0, zstd;q=0", Some("gzip")),
        ("gzip;q=0", None),
        ("identity", None),
        ("deflate", None),
        ("", None),
        ("x-gzip", Some("gzip")),
    ] {
        let r = v.request(&ae("/a.html", accept));
        assert_eq!(
            r.header("content-encoding"),
            want,
            "Accept-Encoding: {accept}"
        );
        assert_eq!(decode(&r), text(4000, 6));
    }
    // Only the codings on in the location compete.
    let dir = TempDir::new("cz");
    dir.write("html/a.html", text(4000, 6));
    let v = Vireo::start_in(dir, &conf("gzip on;\n"));
    let r = v.request(&ae("/a.html", "br, zstd, gzip;q=0.1"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let r = v.request(&ae("/a.html", "br, zstd"));
    assert_eq!(r.header("content-encoding"), None);
}

#[test]
fn types_length_statuses_and_methods() {
    let dir = TempDir::new("cz");
    let page = text(3000, 7);
    dir.write("html/a.html", &page);
    dir.write("html/a.txt", &page);
    dir.write("html/tiny.html", "<p>hi</p>");
    dir.write("html/empty.html", "");
    dir.write("html/d/index.html", "x");
    let p = dir.path().join("html/a.html");
    let v = Vireo::start_in(dir, &conf("gzip on; gzip_min_length 100;\n"));
    let gz = |path: &str, extra: &str| {
        v.request(&req(path, &format!("Accept-Encoding: gzip\r\n{extra}")))
    };
    // text/html always, other types only when listed.
    assert_eq!(gz("/a.html", "").header("content-encoding"), Some("gzip"));
    assert_eq!(gz("/a.txt", "").header("content-encoding"), None);
    assert_eq!(gz("/a.txt", "").body, page);
    // Below gzip_min_length, empty.
    assert_eq!(gz("/tiny.html", "").header("content-encoding"), None);
    assert_eq!(gz("/tiny.html", "").text(), "<p>hi</p>");
    let r = gz("/empty.html", "");
    assert_eq!((r.status, r.header("content-encoding")), (200, None));
    // Error pages (404) are compressed as in nginx; redirects are not.
    let r = gz("/missing.html", "");
    assert_eq!(
        (r.status, r.header("content-encoding")),
        (404, Some("gzip"))
    );
    assert!(
        String::from_utf8(decode(&r))
            .unwrap()
            .contains("404 Not Found")
    );
    let r = gz("/d", "");
    assert_eq!((r.status, r.header("content-encoding")), (301, None));
    // HEAD: the head GET would get, without a length (nothing is compressed).
    let r = v.request(
        "HEAD /a.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-length"), None);
    assert_eq!(r.header("accept-ranges"), None);
    assert!(r.header("etag").unwrap().starts_with("W/"));
    assert!(r.body.is_empty());
    let r = v.request("HEAD /a.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("content-length"), Some("3000"));
    // 304 and ranges are left alone.
    let etag = etag_of(&p);
    let r = gz("/a.html", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!((r.status, r.header("content-encoding")), (304, None));
    // The weak ETag of the compressed response validates too.
    let r = gz("/a.html", &format!("If-None-Match: W/{etag}\r\n"));
    assert_eq!(r.status, 304);
    let r = gz("/a.html", "Range: bytes=10-19\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, &page[10..20]);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/3000"));
    // gzip_types *: any type, also the default type.
    let dir = TempDir::new("cz");
    dir.write("html/a.weird", &page);
    let v = Vireo::start_in(dir, &conf("gzip on; gzip_types *;\n"));
    let r = v.request(&ae("/a.weird", "gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode(&r), page);
}

#[test]
fn already_encoded_responses_are_left_alone() {
    // A response that already has a Content-Encoding (here from add_header;
    // from an upstream later) is not compressed again.
    let dir = TempDir::new("cz");
    dir.write("html/a.html", text(3000, 8));
    let v = Vireo::start_in(
        dir,
        &conf("gzip on;\nadd_header Content-Encoding identity-test;\n"),
    );
    let r = v.request(&ae("/a.html", "gzip"));
    assert_eq!(r.header("content-encoding"), Some("identity-test"));
    assert_eq!(r.body, text(3000, 8));
}

#[test]
fn vary_header() {
    let dir = TempDir::new("cz");
    dir.write("html/a.html", text(3000, 9));
    dir.write("html/a.txt", text(3000, 9));
    dir.write("html/tiny.html", "tiny");
    let v = Vireo::start_in(dir, &conf("gzip on; gzip_vary on;\n"));
    let r = v.request(&ae("/a.html", "gzip"));
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    // Also to clients that get it uncompressed: caches must keep both apart.
    let r = v.get("/a.html");
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("content-encoding"), None);
    // Not for responses that would never be compressed.
    assert_eq!(v.request(&ae("/a.txt", "gzip")).header("vary"), None);
    assert_eq!(v.request(&ae("/tiny.html", "gzip")).header("vary"), None);
    // Exactly one Vary line.
    let r = v.request(&ae("/a.html", "gzip"));
    assert_eq!(r.headers.iter().filter(|(k, _)| k == "vary").count(), 1);
}

#[test]
fn http_version() {
    let small = text(3000, 10);
    let large = text(600_000, 11);
    let start = |extra: &str| {
        let dir = TempDir::new("cz");
        dir.write("html/a.html", &small);
        dir.write("html/l.html", &large);
        Vireo::start_in(dir, &conf(extra))
    };
    let r10 = |v: &Vireo, path: &str| {
        v.request(&format!(
            "GET {path} HTTP/1.0\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n"
        ))
    };
    // gzip_http_version 1.1 (the default): HTTP/1.0 gets identity.
    let v = start("gzip on;\n");
    assert_eq!(r10(&v, "/a.html").header("content-encoding"), None);
    let v = start("gzip on; gzip_http_version 1.0;\n");
    let r = r10(&v, "/a.html");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode(&r), small);
    // No length on HTTP/1.0: no chunked framing, the close ends it.
    let r = r10(&v, "/l.html");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(decode(&r), large);
}

#[test]
fn gzip_proxied_every_case() {
    let page = text(3000, 12);
    // (gzip_proxied, location extras, request headers, compressed?)
    let cases: &[(&str, &str, &str, bool)] = &[
        ("off", "", "", false),
        ("any", "", "", true),
        ("auth", "", "", true), // no Expires/Cache-Control/flags: nginx falls through
        (
            "auth",
            "add_header Cache-Control public;",
            "Authorization: Basic eDp5\r\n",
            true,
        ),
        ("auth", "add_header Cache-Control public;", "", false),
        ("expired", "expires epoch;", "", true),
        ("expired", "expires 1h;", "", false),
        ("no-cache", "expires epoch;", "", false), // Expires present, expired not listed
        ("no-cache", "add_header Cache-Control no-cache;", "", true),
        (
            "no-cache",
            "add_header Cache-Control \"max-age=5, no-cache\";",
            "",
            true,
        ),
        ("no-cache", "add_header Cache-Control no-store;", "", false),
        ("no-store", "add_header Cache-Control no-store;", "", true),
        (
            "private",
            "add_header Cache-Control \"private, max-age=60\";",
            "",
            true,
        ),
        ("private", "add_header Cache-Control public;", "", false),
        (
            "no-cache no-store private",
            "add_header Cache-Control max-age=60;",
            "",
            false,
        ),
        ("no_last_modified", "", "", false), // static files have Last-Modified
        (
            "no_last_modified",
            "add_header Last-Modified \"\";",
            "",
            true,
        ),
        ("no_etag", "", "", false),
        ("no_etag", "etag off;", "", true),
        (
            "no_etag no_last_modified",
            "etag off; add_header Last-Modified \"\";",
            "",
            true,
        ),
        ("expired no-cache no-store private auth", "", "", true),
    ];
    for (proxied, extra, hdrs, want) in cases {
        let dir = TempDir::new("cz");
        dir.write("html/a.html", &page);
        let v = Vireo::start_in(
            dir,
            &conf(&format!("gzip on; gzip_proxied {proxied};\n{extra}\n")),
        );
        let r = v.request(&req(
            "/a.html",
            &format!("Accept-Encoding: gzip\r\nVia: 1.1 proxy\r\n{hdrs}"),
        ));
        assert_eq!(
            r.header("content-encoding").is_some(),
            *want,
            "gzip_proxied {proxied}; {extra} {hdrs:?}: {}",
            r.head
        );
        assert_eq!(decode(&r), page);
        // Without Via the rules do not apply.
        let r = v.request(&ae("/a.html", "gzip"));
        assert_eq!(
            r.header("content-encoding"),
            Some("gzip"),
            "{proxied} {extra}"
        );
    }
}

#[test]
fn gzip_disable_user_agents() {
    let dir = TempDir::new("cz");
    dir.write("html/a.html", text(3000, 13));
    let v = Vireo::start_in(
        dir,
        &conf(
            "gzip on; brotli on;\ngzip_disable msie6 \"^curl/7\\.\";\ngzip_disable bot \"^wget(?=/1\\.)\";\n",
        ),
    );
    let with_ua = |ua: &str| {
        v.request(&req(
            "/a.html",
            &format!("Accept-Encoding: gzip, br\r\nUser-Agent: {ua}\r\n"),
        ))
        .header("content-encoding")
        .map(str::to_string)
    };
    assert_eq!(
        with_ua("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.0)"),
        None
    );
    assert_eq!(
        with_ua("Mozilla/4.0 (compatible; MSIE 5.5; Windows 98)"),
        None
    );
    assert_eq!(
        with_ua("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)").as_deref(),
        Some("br")
    );
    assert_eq!(
        with_ua("Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)").as_deref(),
        Some("br")
    );
    assert_eq!(with_ua("curl/7.88.1"), None);
    assert_eq!(with_ua("CURL/7.1"), None, "case-insensitive");
    assert_eq!(with_ua("curl/8.5.0").as_deref(), Some("br"));
    assert_eq!(with_ua("Googlebot/2.1"), None, "second directive adds");
    assert_eq!(with_ua("Firefox/130").as_deref(), Some("br"));
    // PCRE's look-ahead, as nginx compiles the patterns.
    assert_eq!(with_ua("Wget/1.21.3"), None);
    assert_eq!(with_ua("Wget/2.0").as_deref(), Some("br"));
}

fn gzip_bytes(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn br_bytes(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 11, 22);
        w.write_all(data).unwrap();
    }
    out
}

#[test]
fn static_variants() {
    let dir = TempDir::new("cz");
    let data = text(50_000, 14);
    let (gz, br, zst) = (
        gzip_bytes(&data),
        br_bytes(&data),
        zstd::encode_all(&data[..], 19).unwrap(),
    );
    let orig = dir.write("html/app.js", &data);
    let pgz = dir.write("html/app.js.gz", &gz);
    let pbr = dir.write("html/app.js.br", &br);
    let pzst = dir.write("html/app.js.zst", &zst);
    for p in [&orig, &pgz, &pbr, &pzst] {
        set_mtime(p, 1_700_000_000);
    }
    dir.write("html/only.js", &data);
    let v = Vireo::start_in(
        dir,
        &conf(&format!(
            "gzip_static on; brotli_static on; zstd_static on; gzip_vary on;\n\
             gzip on; {JS}open_file_cache max=100;\n"
        )),
    );
    for (accept, coding, bytes, path) in [
        ("gzip, br, zstd", "br", &br, &pbr),
        ("gzip, zstd", "zstd", &zst, &pzst),
        ("gzip", "gzip", &gz, &pgz),
        ("gzip;q=1, br;q=0.5", "gzip", &gz, &pgz),
    ] {
        let r = v.request(&ae("/app.js", accept));
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-encoding"), Some(coding), "{accept}");
        assert_eq!(&r.body, bytes, "the variant's bytes, as they are on disk");
        assert_eq!(
            r.header("content-length"),
            Some(bytes.len().to_string().as_str())
        );
        assert_eq!(r.header("etag"), Some(etag_of(path).as_str()));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert_eq!(r.header("content-type"), Some("application/javascript"));
        assert_eq!(decode(&r), data);
        // Conditional and range requests apply to the variant.
        let r = v.request(&req(
            "/app.js",
            &format!(
                "Accept-Encoding: {accept}\r\nIf-None-Match: {}\r\n",
                etag_of(path)
            ),
        ));
        assert_eq!(r.status, 304);
        assert_eq!(r.header("content-encoding"), Some(coding));
        let r = v.request(&req(
            "/app.js",
            &format!("Accept-Encoding: {accept}\r\nRange: bytes=0-9\r\n"),
        ));
        assert_eq!(r.status, 206);
        assert_eq!(&r.body, &bytes[..10]);
        assert_eq!(r.header("content-encoding"), Some(coding));
    }
    // No acceptable coding: the file itself, with Vary.
    let r = v.get("/app.js");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, data);
    assert_eq!(r.header("vary"), Some("Accept-Encoding"));
    assert_eq!(r.header("etag"), Some(etag_of(&orig).as_str()));
    // HEAD of a variant.
    let r = v.request(
        "HEAD /app.js HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(
        r.header("content-length"),
        Some(gz.len().to_string().as_str())
    );
    // No variant on disk: compressed on the fly.
    let r = v.request(&ae("/only.js", "gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert!(r.header("etag").unwrap().starts_with("W/"));
    assert_eq!(decode(&r), data);
}

#[test]
fn stale_variants_and_always() {
    let dir = TempDir::new("cz");
    let data = text(20_000, 15);
    let orig = dir.write("html/a.js", &data);
    let pgz = dir.write("html/a.js.gz", gzip_bytes(b"old contents"));
    set_mtime(&orig, 1_700_000_100);
    set_mtime(&pgz, 1_700_000_000);
    let pbr = dir.write("html/b.js.br", br_bytes(&data));
    let b = dir.write("html/b.js", &data);
    set_mtime(&b, 1_700_000_000);
    set_mtime(&pbr, 1_700_000_000);
    let v = Vireo::start_in(
        dir,
        &conf(
            "location /a { gzip_static on; }\nlocation /b { brotli_static always; gzip_vary on; }\n",
        ),
    );
    // Older than the file: not used (gzip off here, so identity).
    let r = v.request(&ae("/a.js", "gzip"));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, data);
    // always: whatever the client accepts.
    for accept in ["", "Accept-Encoding: gzip\r\n"] {
        let r = v.request(&req("/b.js", accept));
        assert_eq!(r.header("content-encoding"), Some("br"), "{accept:?}");
        assert_eq!(decode(&r), data);
        assert_eq!(r.header("vary"), None, "the same answer for every client");
    }
}

#[test]
fn static_on_honours_request_checks() {
    let dir = TempDir::new("cz");
    let data = text(20_000, 16);
    let orig = dir.write("html/a.js", &data);
    let pgz = dir.write("html/a.js.gz", gzip_bytes(&data));
    set_mtime(&orig, 1_700_000_000);
    set_mtime(&pgz, 1_700_000_000);
    let v = Vireo::start_in(dir, &conf("gzip_static on; gzip_disable msie6;\n"));
    let r = v.request(&req(
        "/a.js",
        "Accept-Encoding: gzip\r\nUser-Agent: Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.0)\r\n",
    ));
    assert_eq!(r.header("content-encoding"), None);
    let r = v.request(&req("/a.js", "Accept-Encoding: gzip\r\nVia: 1.1 p\r\n"));
    assert_eq!(r.header("content-encoding"), None, "gzip_proxied off");
    let r = v.request("GET /a.js HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n");
    assert_eq!(r.header("content-encoding"), None, "gzip_http_version 1.1");
    let r = v.request(&ae("/a.js", "gzip"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
}

#[test]
fn variant_cache_sees_file_changes() {
    for extra in [
        "",
        "open_file_cache max=10 inactive=1m; open_file_cache_valid 0;\n",
    ] {
        for cache in ["", "compress_cache off;\n"] {
            let dir = TempDir::new("cz");
            let one = text(40_000, 17);
            let p = dir.write("html/a.js", &one);
            dir.write("html/s.js", &one[..5000]);
            let v = Vireo::start_in(dir, &conf(&format!("gzip on; {JS}{extra}{cache}")));
            let first = v.request(&ae("/a.js", "gzip"));
            let second = v.request(&ae("/a.js", "gzip"));
            assert_eq!(decode(&first), one);
            assert_eq!(first.body, second.body, "same bytes again");
            for _ in 0..3 {
                assert_eq!(decode(&v.request(&ae("/s.js", "gzip"))), &one[..5000]);
            }
            // Same size, new contents and mtime.
            let two = text(40_000, 18);
            std::fs::write(&p, &two).unwrap();
            set_mtime(&p, 1_800_000_000);
            let r = v.request(&ae("/a.js", "gzip"));
            assert_eq!(decode(&r), two, "{extra}{cache}");
        }
    }
}

#[test]
fn cache_keys_include_the_level() {
    let dir = TempDir::new("cz");
    let data = text(60_000, 19);
    dir.write("html/one/a.js", &data);
    let v = Vireo::start_in(
        dir,
        &conf(&format!(
            "gzip on; {JS}\nlocation /one/ {{ gzip_comp_level 1; }}\n\
             location /nine/ {{ alias {{dir}}/html/one/; gzip_comp_level 9; }}\n"
        )),
    );
    let l1 = v.request(&ae("/one/a.js", "gzip"));
    let l9 = v.request(&ae("/nine/a.js", "gzip"));
    assert_eq!(decode(&l1), data);
    assert_eq!(decode(&l9), data);
    assert!(
        l9.body.len() < l1.body.len(),
        "level 9 smaller than level 1"
    );
    assert_eq!(v.request(&ae("/one/a.js", "gzip")).body, l1.body);
}

fn vm_rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Reads a chunked body from a buffered reader, as a `Read`.
struct Chunked<R: BufRead> {
    r: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            self.r.read_line(&mut line)?;
            if line == "\r\n" {
                line.clear();
                self.r.read_line(&mut line)?;
            }
            self.left = usize::from_str_radix(line.trim(), 16).unwrap();
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.left);
        let n = self.r.read(&mut buf[..n])?;
        self.left -= n;
        Ok(n)
    }
}

const MB: usize = 1 << 20;

/// The MiB block the big bodies repeat.
fn block() -> Vec<u8> {
    text(MB, 20)
}

/// A server whose `/big.txt` is `mb` MiB of `block()`, with `directives`.
fn big_file_server(mb: usize, directives: &str) -> Vireo {
    let dir = TempDir::new("cz");
    let block = block();
    {
        std::fs::create_dir_all(dir.path().join("html")).unwrap();
        let mut f = std::fs::File::create(dir.path().join("html/big.txt")).unwrap();
        for _ in 0..mb {
            f.write_all(&block).unwrap();
        }
    }
    Vireo::start_in(dir, &conf(directives))
}

/// Fetch `path` (`mb` MiB of `block()` once decoded) compressed with `coding`
/// over a keep-alive connection, decoding as it arrives; the server's RSS
/// must stay flat.
fn streamed_with_flat_memory(v: &Vireo, path: &str, coding: &str, mb: usize, limit_mb: u64) {
    let block = block();
    // Warm up, then the baseline.
    assert_eq!(v.get("/tiny-missing").status, 404);
    let base = vm_rss_kb(v.pid());
    let t0 = std::time::Instant::now();
    let mut s = v.connect();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // Keep-alive: the body goes out chunked.
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {coding}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut r = BufReader::with_capacity(64 * 1024, s);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("Content-Encoding: {coding}")),
        "{head}"
    );
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    let body = Chunked {
        r,
        left: 0,
        done: false,
    };
    let mut dec: Box<dyn Read> = match coding {
        "gzip" => Box::new(flate2::read::GzDecoder::new(body)),
        "br" => Box::new(brotli::Decompressor::new(body, 64 * 1024)),
        _ => Box::new(zstd::stream::read::Decoder::new(body).unwrap()),
    };
    let mut buf = vec![0; MB];
    let (mut peak, mut quarter) = (base, 0);
    for i in 0..mb {
        dec.read_exact(&mut buf).unwrap();
        assert!(buf == block, "{coding}: block {i} intact");
        // Slow down a little so the server waits on a full socket at times.
        if i % 10 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        peak = peak.max(vm_rss_kb(v.pid()));
        if i == mb / 4 {
            quarter = peak;
        }
    }
    assert_eq!(dec.read(&mut buf).unwrap(), 0, "nothing after {mb} MiB");
    let grew = peak.saturating_sub(base);
    eprintln!(
        "{coding} {path}: {mb} MiB in {:?}, server RSS {base} kB, grew {grew} kB ({} kB after the first quarter)",
        t0.elapsed(),
        peak - quarter
    );
    // The encoder's state is all it holds: nothing grows with the body.
    assert!(
        grew < limit_mb * 1024,
        "{coding}: server RSS grew {grew} kB while streaming {mb} MiB (base {base} kB)"
    );
    assert!(
        peak - quarter < 4 * 1024,
        "{coding}: server RSS grew {} kB over the last three quarters of the body",
        peak - quarter
    );
}

#[test]
fn hundred_megabytes_streamed_with_flat_memory() {
    let v = big_file_server(100, "gzip on; gzip_types text/plain; gzip_comp_level 1;\n");
    streamed_with_flat_memory(&v, "/big.txt", "gzip", 100, 16);
}

#[test]
fn brotli_and_zstd_streams_keep_memory_flat() {
    // brotli's level-6 encoder holds hash tables and block buffers of several MB.
    let v = big_file_server(8, "brotli on; brotli_types text/plain;\n");
    streamed_with_flat_memory(&v, "/big.txt", "br", 8, 40);
    let v = big_file_server(32, "zstd on; zstd_types text/plain;\n");
    streamed_with_flat_memory(&v, "/big.txt", "zstd", 32, 16);
}

/// Decode with the Debian tools where they are installed (`gzip`, `brotli`,
/// `zstd`): an independent check of the bytes on the wire.
#[test]
fn debian_tools_decode_our_output() {
    let dir = TempDir::new("cz");
    let small = text(8_000, 21);
    let large = text(900_000, 22);
    dir.write("html/s.html", &small);
    dir.write("html/l.html", &large);
    let v = Vireo::start_in(dir, &conf("gzip on; brotli on; zstd on;\n"));
    let mut ran = 0;
    for (coding, tool) in [("gzip", "gzip"), ("br", "brotli"), ("zstd", "zstd")] {
        let have = std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !have {
            eprintln!("{tool} not installed: skipped");
            continue;
        }
        for (path, data) in [("/s.html", &small), ("/l.html", &large)] {
            let r = v.request(&ae(path, coding));
            assert_eq!(r.header("content-encoding"), Some(coding));
            let mut child = std::process::Command::new(tool)
                .args(["-d", "-c"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let wire = body(&r);
            let mut stdin = child.stdin.take().unwrap();
            let writer = std::thread::spawn(move || stdin.write_all(&wire).unwrap());
            let out = child.wait_with_output().unwrap();
            writer.join().unwrap();
            assert!(out.status.success(), "{tool} -d failed on {path}");
            assert_eq!(&out.stdout, data, "{tool} decodes {path}");
            ran += 1;
        }
    }
    eprintln!("{ran} decodes by the Debian tools");
}

#[test]
fn configuration_checks() {
    let dir = TempDir::new("cz");
    let ok = "events {}\nhttp {\n access_log off;\n gzip on;\n gzip_types text/css application/json *;\n \
              gzip_min_length 1k;\n gzip_comp_level 9;\n gzip_buffers 16 8k;\n gzip_http_version 1.0;\n \
              gzip_proxied expired no-cache no-store private no_last_modified no_etag auth;\n \
              gzip_disable msie6 \"MSIE [1-6]\\.\";\n gzip_vary on;\n gzip_static always;\n \
              brotli on;\n brotli_types text/css;\n brotli_comp_level 11;\n brotli_min_length 10;\n \
              brotli_window 16m;\n brotli_buffers 32 4k;\n brotli_static on;\n \
              zstd on;\n zstd_types text/css;\n zstd_comp_level 19;\n zstd_min_length 0;\n \
              zstd_buffers 32 4k;\n zstd_static off;\n compress_cache 64m;\n \
              server { listen 127.0.0.1:1; location / { compress_cache off; gzip off; } }\n}\n";
    let out = test_conf(&dir, ok);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("ignored"),
        "gzip directives are real now: {err}"
    );
    for (bad, msg) in [
        ("gzip_comp_level 10;", "must be between 1 and 9"),
        ("gzip_comp_level 0;", "must be between 1 and 9"),
        ("brotli_comp_level 12;", "must be between 0 and 11"),
        ("zstd_comp_level 23;", "must be between 1 and 22"),
        ("gzip_proxied sometimes;", "invalid parameter \"sometimes\""),
        ("gzip_http_version 2.0;", "invalid parameter \"2.0\""),
        ("gzip_static maybe;", "invalid parameter \"maybe\""),
        ("gzip_types text;", "invalid parameter \"text\""),
        ("gzip_disable \"(\";", "regex \"(\" compile failed"),
        ("brotli_window 3k;", "invalid parameter \"3k\""),
        ("brotli_window 32m;", "invalid parameter \"32m\""),
        ("gzip_buffers 16 eight;", "invalid size"),
        ("gzip on; gzip off;", "\"gzip\" directive is duplicate"),
        ("compress_cache lots;", "invalid size"),
    ] {
        let out = test_conf(
            &dir,
            &format!("events {{}}\nhttp {{\naccess_log off;\n{bad}\n}}\n"),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} accepted");
        assert!(err.contains(msg), "{bad}: {err}");
    }
}

#[test]
fn keep_alive_and_pipelining_with_compressed_bodies() {
    let dir = TempDir::new("cz");
    let small = text(2000, 23);
    let large = text(400_000, 24);
    dir.write("html/s.html", &small);
    dir.write("html/l.html", &large);
    let v = Vireo::start_in(dir, &conf("gzip on;\n"));
    let mut s = v.connect();
    let one = |p: &str| format!("GET {p} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n");
    let all = format!(
        "{}{}{}GET /s.html HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
        one("/s.html"),
        one("/l.html"),
        one("/s.html")
    );
    s.write_all(all.as_bytes()).unwrap();
    let raw = read_to_close(&mut s);
    // Split the four responses by hand: chunked bodies need their framing.
    let mut rest = &raw[..];
    let mut bodies = Vec::new();
    for _ in 0..4 {
        let end = rest.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&rest[..end]).to_lowercase();
        rest = &rest[end..];
        let b = if head.contains("transfer-encoding: chunked") {
            let mut out = Vec::new();
            loop {
                let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
                let n =
                    usize::from_str_radix(std::str::from_utf8(&rest[..eol]).unwrap(), 16).unwrap();
                rest = &rest[eol + 2..];
                out.extend_from_slice(&rest[..n]);
                rest = &rest[n + 2..];
                if n == 0 {
                    break;
                }
            }
            out
        } else {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            let b = rest[..len].to_vec();
            rest = &rest[len..];
            b
        };
        assert!(head.contains("content-encoding: gzip"), "{head}");
        bodies.push(decode_as(Some("gzip"), &b));
    }
    assert!(rest.is_empty());
    assert_eq!(bodies, vec![small.clone(), large, small.clone(), small]);
}

#[test]
fn variant_served_when_the_file_itself_is_missing() {
    // nginx's gzip_static serves `file.gz` whether or not `file` exists.
    let dir = TempDir::new("cz");
    let data = text(20_000, 25);
    let gz = gzip_bytes(&data);
    let pgz = dir.write("html/only.js.gz", &gz);
    let v = Vireo::start_in(
        dir,
        &conf(
            "location /on/ { alias {dir}/html/; gzip_static on; }\n\
             location /always/ { alias {dir}/html/; gzip_static always; }\n\
             location /off/ { alias {dir}/html/; }\n",
        ),
    );
    for (path, accept) in [
        ("/on/only.js", "Accept-Encoding: gzip\r\n"),
        ("/always/only.js", ""),
    ] {
        let r = v.request(&req(path, accept));
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
        assert_eq!(r.body, gz, "{path}: the variant as it is on disk");
        assert_eq!(r.header("etag"), Some(etag_of(&pgz).as_str()));
        assert_eq!(r.header("content-type"), Some("application/javascript"));
        assert_eq!(decode(&r), data);
    }
    // `on` for a client that cannot take gzip, no gzip_static, or POST: no file.
    assert_eq!(v.get("/on/only.js").status, 404);
    assert_eq!(v.request(&ae("/off/only.js", "gzip")).status, 404);
    let r = v.request(
        "POST /always/only.js HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 404);
    let r = v.request("HEAD /always/only.js HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(
        r.header("content-length"),
        Some(gz.len().to_string().as_str())
    );
    assert!(r.body.is_empty());
}

#[test]
fn brotli_and_zstd_types_lengths_and_levels() {
    let dir = TempDir::new("cz");
    let page = text(60_000, 26);
    dir.write("html/a.html", &page);
    dir.write("html/a.css", &page);
    dir.write("html/tiny.html", &page[..50]);
    let v = Vireo::start_in(
        dir,
        &conf(
            "gzip on; gzip_types text/css; gzip_min_length 10;\n\
             brotli on; brotli_types text/css; brotli_min_length 100; brotli_comp_level 1;\n\
             zstd on; zstd_min_length 100; zstd_comp_level 1;\n\
             location /hi/ { alias {dir}/html/; brotli_comp_level 11; zstd_comp_level 19; }\n",
        ),
    );
    let coding = |path: &str, accept: &str| {
        let r = v.request(&ae(path, accept));
        assert_eq!(r.status, 200);
        r.header("content-encoding").map(str::to_string)
    };
    // Each coding's own minimum length.
    assert_eq!(
        coding("/tiny.html", "br, zstd, gzip").as_deref(),
        Some("gzip")
    );
    assert_eq!(coding("/tiny.html", "br, zstd"), None);
    // Each coding's own types: text/css is in brotli_types and gzip_types only.
    assert_eq!(coding("/a.css", "br, zstd, gzip").as_deref(), Some("br"));
    assert_eq!(coding("/a.css", "zstd, gzip").as_deref(), Some("gzip"));
    assert_eq!(coding("/a.css", "zstd"), None);
    assert_eq!(coding("/a.html", "zstd, gzip").as_deref(), Some("zstd"));
    // Each coding's own level.
    for c in ["br", "zstd"] {
        let low = v.request(&ae("/a.html", c));
        let high = v.request(&ae("/hi/a.html", c));
        assert_eq!(decode(&low), page);
        assert_eq!(decode(&high), page);
        assert!(
            body(&high).len() < body(&low).len(),
            "{c}: level high {} B, low {} B",
            body(&high).len(),
            body(&low).len()
        );
    }
}

/// A loopback upstream: for each connection it reads one request head and
/// lets `answer` write the response for the path, then closes.
fn upstream(answer: impl Fn(&str, &mut TcpStream) + Send + Sync + 'static) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                if r.read_line(&mut first).is_err() {
                    return;
                }
                loop {
                    let mut l = String::new();
                    match r.read_line(&mut l) {
                        Ok(0) | Err(_) => return,
                        Ok(_) if l == "\r\n" => break,
                        Ok(_) => {}
                    }
                }
                let path = first.split(' ').nth(1).unwrap_or("/").to_string();
                answer(&path, &mut s);
            });
        }
    });
    port
}

fn upstream_reply(head: &str, body: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    v.extend_from_slice(body);
    v
}

#[test]
fn proxied_responses_are_compressed_by_the_same_rules() {
    let page = text(30_000, 27);
    let p = page.clone();
    let up = upstream(move |path, s| {
        let html = "Content-Type: text/html; charset=utf-8";
        let reply = match path {
            "/page" => upstream_reply(&format!("200 OK\r\n{html}\r\nETag: \"up-1\""), &p),
            "/encoded" => upstream_reply(
                &format!("200 OK\r\n{html}\r\nContent-Encoding: gzip"),
                &gzip_bytes(&p),
            ),
            "/partial" => upstream_reply(
                &format!("206 Partial Content\r\n{html}\r\nContent-Range: bytes 0-29999/60000"),
                &p,
            ),
            "/private" => {
                upstream_reply(&format!("200 OK\r\n{html}\r\nCache-Control: private"), &p)
            }
            "/expired" => upstream_reply(
                &format!("200 OK\r\n{html}\r\nExpires: Thu, 01 Jan 1970 00:00:01 GMT"),
                &p,
            ),
            "/small" => upstream_reply(&format!("200 OK\r\n{html}"), b"tiny"),
            "/png" => upstream_reply("200 OK\r\nContent-Type: image/png", &p),
            "/chunked" => {
                // Unknown length, in pieces with pauses between them.
                let _ = s.write_all(
                    format!("HTTP/1.1 200 OK\r\n{html}\r\nTransfer-Encoding: chunked\r\n\r\n")
                        .as_bytes(),
                );
                for piece in p.chunks(7000) {
                    let _ = s.write_all(format!("{:x}\r\n", piece.len()).as_bytes());
                    let _ = s.write_all(piece);
                    let _ = s.write_all(b"\r\n");
                    std::thread::sleep(Duration::from_millis(20));
                }
                b"0\r\n\r\n".to_vec()
            }
            _ => upstream_reply("404 Not Found", b""),
        };
        let _ = s.write_all(&reply);
    });
    let v = Vireo::start(&format!(
        "events {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}};\n  \
         gzip on; gzip_vary on;\n  \
         location / {{ proxy_pass http://127.0.0.1:{up}; }}\n  \
         location /private/ {{ proxy_pass http://127.0.0.1:{up}/; gzip_proxied private; }}\n  \
         location /expired/ {{ proxy_pass http://127.0.0.1:{up}/; gzip_proxied expired; }}\n  \
         location /no-cache/ {{ proxy_pass http://127.0.0.1:{up}/; gzip_proxied no-cache; }}\n \
         }}\n}}\n"
    ));
    // Compressed as it streams in (length unknown to the encoder), with a
    // weak form of the upstream's ETag.
    for path in ["/page", "/chunked"] {
        let r = v.request(&ae(path, "gzip"));
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{path}");
        assert_eq!(decode(&r), page, "{path}");
        assert!(body(&r).len() < page.len() / 2, "{path}");
        let r = v.get(path);
        assert_eq!(r.header("content-encoding"), None, "{path}");
        assert_eq!(body(&r), page, "{path}");
    }
    assert_eq!(
        v.request(&ae("/page", "gzip")).header("etag"),
        Some("W/\"up-1\"")
    );
    // Already encoded by the upstream: passed on as it came.
    let r = v.request(&ae("/encoded", "gzip, br"));
    let encoded: Vec<_> = r
        .headers
        .iter()
        .filter(|(k, _)| k == "content-encoding")
        .collect();
    assert_eq!(encoded.len(), 1, "{}", r.head);
    assert_eq!(body(&r), gzip_bytes(&page));
    // A 206, a body below gzip_min_length, a type not in gzip_types: as they came.
    let r = v.request(&ae("/partial", "gzip"));
    assert_eq!((r.status, r.header("content-encoding")), (206, None));
    assert_eq!(body(&r), page);
    let r = v.request(&ae("/small", "gzip"));
    assert_eq!(
        (r.header("content-encoding"), r.text()),
        (None, "tiny".into())
    );
    assert_eq!(
        v.request(&ae("/png", "gzip")).header("content-encoding"),
        None
    );
    // gzip_proxied looks at the upstream's caching headers.
    let via = |path: &str| {
        let r = v.request(&req(path, "Accept-Encoding: gzip\r\nVia: 1.1 cache\r\n"));
        assert_eq!(decode(&r), page, "{path}");
        r.header("content-encoding").map(str::to_string)
    };
    for (path, want) in [
        ("/page", None), // gzip_proxied off
        ("/private/private", Some("gzip")),
        ("/no-cache/private", None),
        ("/expired/expired", Some("gzip")),
        ("/private/expired", None),
        ("/expired/page", Some("gzip")), // neither Expires nor Cache-Control
    ] {
        assert_eq!(via(path).as_deref(), want, "{path}");
    }
}

#[test]
fn proxied_stream_compressed_with_flat_memory() {
    const BLOCKS: usize = 64;
    let up = upstream(|path, s| {
        if path != "/big" {
            let _ = s.write_all(&upstream_reply("404 Not Found", b""));
            return;
        }
        let block = block();
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        for _ in 0..BLOCKS {
            let chunk = [format!("{:x}\r\n", block.len()).as_bytes(), &block, b"\r\n"].concat();
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
        let _ = s.write_all(b"0\r\n\r\n");
    });
    let v = Vireo::start(&format!(
        "events {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}};\n  \
         gzip on; gzip_types text/plain; gzip_comp_level 1;\n  \
         location / {{ proxy_pass http://127.0.0.1:{up}; }}\n }}\n}}\n"
    ));
    streamed_with_flat_memory(&v, "/big", "gzip", BLOCKS, 16);
}

#[test]
fn fastcgi_responses_are_compressed() {
    let Some(fpm) = common::fpm::Fpm::start(2) else {
        return;
    };
    let dir = TempDir::new("cz");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/conf/fastcgi_params"),
        dir.path().join("fastcgi_params"),
    )
    .unwrap();
    // 1.8 MB in 50 flushed pieces; a body PHP already gzipped.
    dir.write(
        "html/page.php",
        "<?php header('Content-Type: text/html'); $s = str_repeat('<p>compress me</p>', 2000); \
         for ($i = 0; $i < 50; $i++) { echo $s; flush(); }",
    );
    dir.write(
        "html/pre.php",
        "<?php header('Content-Type: text/html'); header('Content-Encoding: gzip'); \
         echo gzencode(str_repeat('already ', 1000));",
    );
    // A first part, a pause, the rest: unbuffered, so flushed at the pause.
    dir.write(
        "html/slow.php",
        "<?php header('Content-Type: text/html'); header('X-Accel-Buffering: no'); \
         echo str_repeat('<p>first</p>', 2000); flush(); sleep(3); \
         echo str_repeat('<p>rest</p>', 2000);",
    );
    let v = Vireo::start_in(
        dir,
        &conf(&format!(
            "gzip on; brotli on;\nlocation ~ \\.php$ {{ include fastcgi_params; \
             fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name; \
             fastcgi_pass 127.0.0.1:{}; }}\n",
            fpm.port
        )),
    );
    let want = "<p>compress me</p>".repeat(100_000).into_bytes();
    for coding in ["gzip", "br"] {
        let r = v.request(&ae("/page.php", coding));
        assert_eq!(r.status, 200, "{}", v.stderr());
        assert_eq!(r.header("content-encoding"), Some(coding));
        assert_eq!(decode(&r), want, "{coding}");
        assert!(body(&r).len() < want.len() / 20, "{coding}");
    }
    let r = v.request(&ae("/pre.php", "gzip, br"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode(&r), "already ".repeat(1000).into_bytes());
    two_parts(
        v.port,
        "/slow.php",
        "gzip",
        "<p>first</p>".repeat(2000).as_bytes(),
        "<p>rest</p>".repeat(2000).as_bytes(),
        Duration::from_millis(2500),
    );
}

#[test]
fn unbuffered_upstreams_are_flushed_as_they_pause() {
    // The upstream sends a first part, thinks for 3 s, then the rest. With
    // proxy_buffering off, or X-Accel-Buffering: no from the upstream, the
    // client decodes the first part before the rest exists (nginx flushes
    // its compressor per piece then too).
    let first = text(20_000, 28);
    let rest = text(20_000, 29);
    let (f, r) = (first.clone(), rest.clone());
    let up = upstream(move |path, s| {
        let accel = if path.starts_with("/accel") {
            "X-Accel-Buffering: no\r\n"
        } else {
            ""
        };
        let _ = s.write_all(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n{accel}Content-Length: {}\r\n\r\n",
                f.len() + r.len()
            )
            .as_bytes(),
        );
        let _ = s.write_all(&f);
        std::thread::sleep(Duration::from_secs(3));
        let _ = s.write_all(&r);
    });
    let v = Vireo::start(&format!(
        "events {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}};\n  \
         gzip on; brotli on; zstd on;\n  \
         location /off/ {{ proxy_pass http://127.0.0.1:{up}; proxy_buffering off; }}\n  \
         location /accel/ {{ proxy_pass http://127.0.0.1:{up}; }}\n }}\n}}\n"
    ));
    let mut handles = Vec::new();
    for path in ["/off/x", "/accel/x"] {
        for coding in ["gzip", "br", "zstd"] {
            let (port, first, rest) = (v.port, first.clone(), rest.clone());
            handles.push(std::thread::spawn(move || {
                two_parts(
                    port,
                    path,
                    coding,
                    &first,
                    &rest,
                    Duration::from_millis(2500),
                )
            }));
        }
    }
    for h in handles {
        h.join().unwrap();
    }
}

/// GET `path` with `coding`; the decoded body must be `first` then `rest`, and
/// `first` must be decoded `within` the request (before the upstream's pause
/// ends).
fn two_parts(port: u16, path: &str, coding: &str, first: &[u8], rest: &[u8], within: Duration) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(ae(path, coding).as_bytes()).unwrap();
    let t0 = std::time::Instant::now();
    let mut r = BufReader::new(s);
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        assert!(r.read_line(&mut head).unwrap() > 0, "{head}");
    }
    assert!(
        head.contains(&format!("Content-Encoding: {coding}")),
        "{head}"
    );
    // HTTP/1.1, length unknown: chunked.
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    let r = BufReader::new(Chunked {
        r,
        left: 0,
        done: false,
    });
    let mut dec: Box<dyn Read> = match coding {
        "gzip" => Box::new(flate2::read::GzDecoder::new(r)),
        "br" => Box::new(brotli::Decompressor::new(r, 4096)),
        _ => Box::new(zstd::stream::read::Decoder::new(r).unwrap()),
    };
    let mut got = vec![0; first.len()];
    dec.read_exact(&mut got).unwrap();
    let at = t0.elapsed();
    assert!(got == first, "{path} {coding}: first part");
    assert!(
        at < within,
        "{path} {coding}: first part after {at:?}, held for the rest"
    );
    let mut tail = Vec::new();
    dec.read_to_end(&mut tail).unwrap();
    assert!(tail == rest, "{path} {coding}: the rest");
}
