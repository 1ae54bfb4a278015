//! The open-file cache as seen from outside: what a cached entry keeps serving
//! after the file system changes, and when it is checked again.
//!
//! One worker, so every request sees the same (per-worker) cache.

mod common;
use common::*;

use std::time::{Duration, Instant};

fn conf(cache: &str) -> String {
    format!(
        "
worker_processes 1;
events {{}}
http {{
    access_log off;
    {cache}
    server {{
        listen 127.0.0.1:{{port}};
        root {{dir}}/html;
    }}
}}"
    )
}

const VALID_1S: &str = "open_file_cache max=10 inactive=20s; open_file_cache_valid 1s;";

fn big(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i % 253) as u8 ^ salt).collect()
}

/// Sleep until `t0 + d`.
fn sleep_until(t0: Instant, d: Duration) {
    if let Some(left) = (t0 + d).checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

#[test]
fn deleted_file_is_served_until_valid_expires() {
    let dir = TempDir::new("ofc");
    dir.write("html/small.txt", "small file");
    dir.write("html/big.bin", big(300_000, 0));
    let p = dir.path().join("html");
    let v = Vireo::start_in(dir, &conf(&format!("{VALID_1S} sendfile on;")));
    let t0 = Instant::now();
    assert_eq!(v.get("/small.txt").text(), "small file");
    assert!(v.get("/big.bin").body == big(300_000, 0));
    std::fs::remove_file(p.join("small.txt")).unwrap();
    std::fs::remove_file(p.join("big.bin")).unwrap();
    // Still cached: served from the kept descriptor / body.
    let r = v.get("/small.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "small file"));
    let r = v.get("/big.bin");
    assert_eq!(r.status, 200);
    assert!(
        r.body == big(300_000, 0),
        "deleted file served whole from its descriptor"
    );
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "test too slow to be meaningful"
    );
    sleep_until(t0, Duration::from_millis(1300));
    assert_eq!(v.get("/small.txt").status, 404);
    assert_eq!(v.get("/big.bin").status, 404);
}

#[test]
fn without_cache_a_deleted_file_is_gone_at_once() {
    let dir = TempDir::new("ofc");
    dir.write("html/small.txt", "small file");
    let p = dir.path().join("html/small.txt");
    let v = Vireo::start_in(dir, &conf(""));
    assert_eq!(v.get("/small.txt").status, 200);
    std::fs::remove_file(p).unwrap();
    assert_eq!(v.get("/small.txt").status, 404);
}

#[test]
fn cached_errors_hide_a_new_file_until_valid_expires() {
    let dir = TempDir::new("ofc");
    let p = dir.path().join("html");
    let v = Vireo::start_in(
        dir,
        &conf(&format!("{VALID_1S} open_file_cache_errors on;")),
    );
    let t0 = Instant::now();
    assert_eq!(v.get("/new.txt").status, 404);
    std::fs::write(p.join("new.txt"), "arrived").unwrap();
    assert_eq!(
        v.get("/new.txt").status,
        404,
        "the cached error is still valid"
    );
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "test too slow to be meaningful"
    );
    sleep_until(t0, Duration::from_millis(1300));
    let r = v.get("/new.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "arrived"));
}

#[test]
fn errors_are_not_cached_by_default() {
    let dir = TempDir::new("ofc");
    let p = dir.path().join("html");
    let v = Vireo::start_in(dir, &conf(VALID_1S));
    assert_eq!(v.get("/new.txt").status, 404);
    std::fs::write(p.join("new.txt"), "arrived").unwrap();
    assert_eq!(v.get("/new.txt").text(), "arrived");
}

#[test]
fn modifications_show_after_valid_expires() {
    let dir = TempDir::new("ofc");
    let small = dir.write("html/a.txt", "version one");
    set_mtime(&small, 1_600_000_000);
    let bigp = dir.write("html/b.bin", big(200_000, 1));
    let v = Vireo::start_in(dir, &conf(VALID_1S));
    let t0 = Instant::now();
    let r1 = v.get("/a.txt");
    assert_eq!(r1.text(), "version one");
    let etag1 = r1.header("etag").unwrap().to_string();
    assert!(v.get("/b.bin").body == big(200_000, 1));

    // Rewrite the small file in place (new size and mtime); replace the big one
    // by a rename, so the cached descriptor still points at the old inode.
    std::fs::write(&small, "version two!!").unwrap();
    set_mtime(&small, 1_600_000_100);
    let tmp = bigp.with_extension("tmp");
    std::fs::write(&tmp, big(200_000, 2)).unwrap();
    std::fs::rename(&tmp, &bigp).unwrap();

    let r = v.get("/a.txt");
    assert_eq!(r.text(), "version one", "still the cached copy");
    assert_eq!(r.header("etag"), Some(etag1.as_str()));
    assert!(
        v.get("/b.bin").body == big(200_000, 1),
        "old inode still served"
    );
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "test too slow to be meaningful"
    );

    sleep_until(t0, Duration::from_millis(1300));
    let r2 = v.get("/a.txt");
    assert_eq!(r2.text(), "version two!!");
    let etag2 = r2.header("etag").unwrap();
    assert_ne!(etag2, etag1);
    assert_eq!(etag2, "\"5f5e1064-d\"");
    assert_eq!(r2.header("content-length"), Some("13"));
    assert!(
        v.get("/b.bin").body == big(200_000, 2),
        "new file after valid"
    );
}

#[test]
fn unchanged_file_stays_cached_across_revalidation() {
    let dir = TempDir::new("ofc");
    dir.write("html/a.txt", "same");
    let v = Vireo::start_in(dir, &conf(VALID_1S));
    let t0 = Instant::now();
    let e1 = v.get("/a.txt").header("etag").unwrap().to_string();
    sleep_until(t0, Duration::from_millis(1200));
    for _ in 0..3 {
        let r = v.get("/a.txt");
        assert_eq!(r.text(), "same");
        assert_eq!(r.header("etag"), Some(e1.as_str()));
    }
}

#[test]
fn min_uses_keeps_only_files_used_often_enough() {
    let dir = TempDir::new("ofc");
    dir.write("html/once.txt", "once");
    dir.write("html/twice.txt", "twice");
    dir.write("html/twice.bin", big(100_000, 3));
    let p = dir.path().join("html");
    let v = Vireo::start_in(
        dir,
        &conf(
            "open_file_cache max=10 inactive=20s; open_file_cache_valid 30s; open_file_cache_min_uses 2;",
        ),
    );
    // Every use is served normally, kept in the cache or not.
    let r = v.get("/once.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "once"));
    for _ in 0..2 {
        let r = v.get("/twice.txt");
        assert_eq!((r.status, r.text().as_str()), (200, "twice"));
        let r = v.get("/twice.bin");
        assert_eq!(r.status, 200);
        assert!(r.body == big(100_000, 3));
    }
    std::fs::remove_file(p.join("once.txt")).unwrap();
    std::fs::remove_file(p.join("twice.txt")).unwrap();
    std::fs::remove_file(p.join("twice.bin")).unwrap();
    // Used once: not kept, so the deletion shows.
    assert_eq!(v.get("/once.txt").status, 404);
    // Used twice: kept.
    assert_eq!(v.get("/twice.txt").text(), "twice");
    assert!(v.get("/twice.bin").body == big(100_000, 3));
}

#[test]
fn inactive_entries_are_dropped() {
    let dir = TempDir::new("ofc");
    dir.write("html/a.txt", "aaa");
    dir.write("html/b.txt", "bbb");
    let p = dir.path().join("html");
    let v = Vireo::start_in(
        dir,
        &conf("open_file_cache max=10 inactive=1s; open_file_cache_valid 60s;"),
    );
    let t0 = Instant::now();
    assert_eq!(v.get("/a.txt").text(), "aaa");
    assert_eq!(v.get("/b.txt").text(), "bbb");
    std::fs::remove_file(p.join("a.txt")).unwrap();
    std::fs::remove_file(p.join("b.txt")).unwrap();
    // b keeps being used, a does not.
    for i in 1..=5 {
        sleep_until(t0, Duration::from_millis(500 * i));
        assert_eq!(v.get("/b.txt").text(), "bbb", "used entry kept ({i})");
    }
    assert_eq!(v.get("/a.txt").status, 404, "inactive entry dropped");
}

#[test]
fn max_evicts_least_recently_used() {
    let dir = TempDir::new("ofc");
    for n in ["a", "b", "c"] {
        dir.write(&format!("html/{n}.txt"), n);
    }
    let p = dir.path().join("html");
    let v = Vireo::start_in(
        dir,
        &conf("open_file_cache max=2 inactive=60s; open_file_cache_valid 60s;"),
    );
    assert_eq!(v.get("/a.txt").text(), "a");
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(v.get("/b.txt").text(), "b");
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(v.get("/a.txt").text(), "a"); // a is now more recent than b
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(v.get("/c.txt").text(), "c"); // evicts b
    for n in ["a", "b", "c"] {
        std::fs::remove_file(p.join(format!("{n}.txt"))).unwrap();
    }
    assert_eq!(v.get("/a.txt").text(), "a");
    assert_eq!(v.get("/c.txt").text(), "c");
    assert_eq!(v.get("/b.txt").status, 404);
}

#[test]
fn directories_and_index_through_the_cache() {
    let dir = TempDir::new("ofc");
    dir.write("html/d/index.html", "idx");
    let p = dir.path().join("html");
    let v = Vireo::start_in(dir, &conf(VALID_1S));
    let t0 = Instant::now();
    assert_eq!(v.get("/d/").text(), "idx");
    let r = v.get("/d");
    assert_eq!(r.status, 301);
    std::fs::remove_file(p.join("d/index.html")).unwrap();
    assert_eq!(v.get("/d/").text(), "idx", "index still cached");
    sleep_until(t0, Duration::from_millis(1300));
    assert_eq!(v.get("/d/").status, 403);
}
