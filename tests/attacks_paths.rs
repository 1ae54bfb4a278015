//! Path and range attacks against a running vireo, beyond
//! tests/static_files.rs (`traversal_never_leaves_root`,
//! `overlapping_ranges_are_bounded`): more traversal spellings, traversal
//! through the absolute form, symlinks out of root, and many tiny ranges.

mod common;
use common::*;

use std::time::{Duration, Instant};

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /al/ { alias {dir}/other/; }
    }
}";

fn server() -> Vireo {
    let dir = TempDir::new("paths");
    dir.write("secret.txt", "TOPSECRET");
    dir.write("html/a/b.txt", "inner");
    dir.write("other/y.txt", "alias-y");
    Vireo::start_in(dir, CONF)
}

fn get(v: &Vireo, target: &str) -> Resp {
    v.request(&format!(
        "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    ))
}

#[test]
fn traversal_spellings_never_leave_root() {
    let v = server();
    let cases: &[(&str, &[u16])] = &[
        // Decoded dots and slashes take part in normalisation.
        ("/%2E%2e/secret.txt", &[400]),
        ("/a/.%2E/.%2e/secret.txt", &[400]),
        ("/a/%2e%2e%2f%2e%2e%2fsecret.txt", &[400]),
        ("/%2f..%2fsecret.txt", &[400]),
        ("/./../secret.txt", &[400]),
        ("/a/b/../../../secret.txt", &[400]),
        ("/al/..%2f..%2fsecret.txt", &[400]),
        // Through the absolute form.
        ("http://x/../secret.txt", &[400]),
        ("http://x/a/%2e%2e/%2e%2e/secret.txt", &[400]),
        // Not traversal: literal names that do not exist.
        ("/%c0%ae%c0%ae/secret.txt", &[404]),
        ("/%e0%80%ae%e0%80%ae/secret.txt", &[404]),
        ("/..;/secret.txt", &[404]),
        ("/%25%32%65%25%32%65/secret.txt", &[404]),
        ("/a/..%255c..%255csecret.txt", &[404]),
        ("/%5c..%5c..%5csecret.txt", &[404]),
        // NUL, CR, LF however spelled.
        ("/a/b.txt%00", &[400]),
        ("/a/b.txt%00.png", &[400]),
        ("/a/%0d%0aX:%20y", &[400]),
    ];
    for (target, codes) in cases {
        let r = get(&v, target);
        assert!(
            !r.text().contains("TOPSECRET"),
            "{target} served the secret"
        );
        assert!(
            codes.contains(&r.status),
            "{target}: {} not in {codes:?}",
            r.status
        );
    }
    assert_eq!(get(&v, "/a/%2e/b.txt").text(), "inner");
    assert_eq!(get(&v, "http://x/a/../a/b.txt").text(), "inner");
}

#[test]
fn symlinks_out_of_root_are_followed_as_nginx_does_by_default() {
    // nginx's default is `disable_symlinks off`: a symlink inside root is
    // the administrator's doing and is followed wherever it points. What a
    // client cannot do is make a path that climbs out (see above).
    let dir = TempDir::new("paths");
    dir.write("outside/shared.txt", "shared");
    dir.write("html/x.txt", "x");
    std::os::unix::fs::symlink(
        dir.path().join("outside/shared.txt"),
        dir.path().join("html/link.txt"),
    )
    .unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside"), dir.path().join("html/dir")).unwrap();
    std::os::unix::fs::symlink(
        "/nonexistent-vireo-target",
        dir.path().join("html/dangling"),
    )
    .unwrap();
    let v = Vireo::start_in(dir, STATIC_CONF);
    assert_eq!(v.get("/link.txt").text(), "shared");
    assert_eq!(v.get("/dir/shared.txt").text(), "shared");
    assert_eq!(v.get("/dangling").status, 404);
    // `..` after a symlinked folder is resolved in the URI, not on disk.
    assert_eq!(v.get("/dir/../x.txt").text(), "x");
}

#[test]
fn many_tiny_ranges_are_bounded() {
    // CVE-2011-3192 spelled with many small, disjoint or repeated ranges: the
    // answer must stay bounded in size and time whatever vireo picks
    // (multipart, the whole file, or 416).
    let dir = TempDir::new("paths");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    dir.write("html/f.bin", &data);
    let v = Vireo::start_in(dir, STATIC_CONF);
    let specs = [
        // 700 disjoint one-byte ranges (as many as fit in an 8k header line).
        (0..700)
            .map(|i| format!("{}-{}", i * 2, i * 2))
            .collect::<Vec<_>>(),
        // The same byte 1500 times.
        (0..1500).map(|_| "0-0".to_string()).collect(),
        // Suffix ranges covering the whole file, overlapping.
        (0..700).map(|_| "-100000".to_string()).collect(),
    ];
    for spec in specs {
        let header = format!("bytes={}", spec.join(","));
        let t = Instant::now();
        let r = v.request(&format!(
            "GET /f.bin HTTP/1.1\r\nHost: x\r\nRange: {header}\r\nConnection: close\r\n\r\n"
        ));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(matches!(r.status, 200 | 206 | 416), "{}", r.status);
        // Never more than the file plus framing proportional to the header.
        assert!(
            r.body.len() <= data.len() + 100 * spec.len(),
            "{} ranges gave {} bytes",
            spec.len(),
            r.body.len()
        );
    }
}
