//! limit_rate: a file and a generated body sent at the configured rate after
//! limit_rate_after bytes, intact; short bodies and other locations at once;
//! `$limit_rate`, read and set.

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
        location /slow/ { limit_rate 100k; limit_rate_after 50k; add_header X-Rate $limit_rate; }
        location /fast/ { }
        location /set/ { set $limit_rate $arg_r; add_header X-Rate $limit_rate; }
    }
}";

fn timed(v: &Vireo, path: &str) -> (Resp, Duration) {
    let t = Instant::now();
    let r = v.get(path);
    (r, t.elapsed())
}

#[test]
fn responses_go_at_the_rate_after_their_first_bytes() {
    let dir = TempDir::new("rate");
    let body: Vec<u8> = (0..200 * 1024u32).map(|i| (i % 251) as u8).collect();
    dir.write("html/slow/f.bin", &body);
    dir.write("html/fast/f.bin", &body);
    dir.write("html/slow/small.txt", "small");
    let v = Vireo::start_in(dir, CONF);

    // 200 KB, the first 50 KB free, the rest at 100 KB/s: about 1.5 s.
    let (r, took) = timed(&v, "/slow/f.bin");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("204800"));
    assert_eq!(r.header("x-rate"), Some("102400"));
    assert!(r.body == body, "body changed");
    assert!(took >= Duration::from_millis(1200), "too fast: {took:?}");
    assert!(took < Duration::from_secs(10), "too slow: {took:?}");

    let (r, took) = timed(&v, "/fast/f.bin");
    assert!(r.body == body);
    assert!(
        took < Duration::from_millis(1000),
        "unlimited took {took:?}"
    );
    let (r, took) = timed(&v, "/slow/small.txt");
    assert_eq!(r.text(), "small");
    assert!(
        took < Duration::from_millis(1000),
        "small body took {took:?}"
    );
}

#[test]
fn set_limit_rate_limits_the_request() {
    let dir = TempDir::new("rate");
    let body: Vec<u8> = (0..100 * 1024u32).map(|i| (i % 251) as u8).collect();
    dir.write("html/set/f.bin", &body);
    let v = Vireo::start_in(dir, CONF);
    // 100 KB at 50 KB/s: about 2 s.
    let (r, took) = timed(&v, "/set/f.bin?r=50k");
    assert_eq!(r.header("x-rate"), Some("51200"));
    assert!(r.body == body, "body changed");
    assert!(took >= Duration::from_millis(1500), "too fast: {took:?}");
    // Not a size: logged, the rate stays the configuration's (none).
    let (r, took) = timed(&v, "/set/f.bin?r=fast");
    assert_eq!(r.header("x-rate"), Some("0"));
    assert!(took < Duration::from_millis(1000), "took {took:?}");
    assert!(
        v.stderr().contains("invalid size \"fast\""),
        "{}",
        v.stderr()
    );
}
