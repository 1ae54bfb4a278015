//! Responses checked by httplint (mnot's HTTP linter, installed by
//! scripts/test): no `[BAD]` note on the kinds of response vireo makes
//! itself — files, ranges, conditionals, redirects, errors, compression,
//! directory listings, `return`.

mod common;
use common::*;
use std::io::Write;
use std::process::{Command, Stdio};

/// httplint's notes on one raw response.
fn lint(raw: &[u8]) -> Option<String> {
    let mut child = match Command::new("httplint")
        .arg("-n")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(_) => {
            eprintln!("SKIP: httplint is not installed (scripts/test installs it)");
            return None;
        }
    };
    child.stdin.take().unwrap().write_all(raw).unwrap();
    let out = child.wait_with_output().unwrap();
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn responses_have_no_bad_notes() {
    let dir = TempDir::new("lint");
    dir.write("html/index.html", "<!doctype html><title>x</title>hello\n");
    dir.write("html/app.js", "var x = 1;\n".repeat(400));
    dir.write("html/pub/a.txt", "a\n");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n  access_log off;\n  gzip on; gzip_types application/javascript; gzip_vary on;\n  server {\n    listen 127.0.0.1:{port};\n    root {dir}/html;\n    location /pub/ { autoindex on; }\n    location = /gone { return 410; }\n    location = /moved { return 301 /index.html; }\n    location = /text { return 200 \"plain\\n\"; }\n    location /static/ { expires 1h; alias {dir}/html/; }\n  }\n}\n",
    );
    let etag = v.get("/index.html").header("etag").unwrap().to_string();
    let requests = [
        "GET /index.html".to_string(),
        "GET /static/index.html".to_string(),
        "GET /app.js\r\nAccept-Encoding: gzip".to_string(),
        "GET /index.html\r\nRange: bytes=0-4".to_string(),
        "GET /index.html\r\nRange: bytes=0-1,3-4".to_string(),
        "GET /index.html\r\nRange: bytes=900-".to_string(),
        format!("GET /index.html\r\nIf-None-Match: {etag}"),
        "GET /missing".to_string(),
        "GET /pub".to_string(),
        "GET /pub/".to_string(),
        "GET /gone".to_string(),
        "GET /moved".to_string(),
        "GET /text".to_string(),
        "POST /index.html\r\nContent-Length: 0".to_string(),
    ];
    for r in &requests {
        let (line, rest) = r
            .split_once("\r\n")
            .map_or((r.as_str(), ""), |(a, b)| (a, b));
        let extra = if rest.is_empty() {
            String::new()
        } else {
            format!("{rest}\r\n")
        };
        let raw = v.raw(
            format!("{line} HTTP/1.1\r\nHost: lint.test\r\n{extra}Connection: close\r\n\r\n")
                .as_bytes(),
        );
        let Some(notes) = lint(&raw) else { return };
        // httplint wants Content-Range on every 206, but a multipart/byteranges
        // one carries it in each part instead (RFC 9110 §14.6), as nginx's does.
        let multipart = String::from_utf8_lossy(&raw).contains("multipart/byteranges");
        let bad: Vec<&str> = notes
            .lines()
            .filter(|l| l.contains("[BAD]"))
            .filter(|l| !(multipart && l.contains("doesn't have a Content-Range header")))
            .collect();
        assert!(
            bad.is_empty(),
            "{r}:\n{notes}\n{}",
            String::from_utf8_lossy(&raw)
        );
    }
}
