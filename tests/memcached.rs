//! `memcached_pass` against Debian's memcached: values stored with its text
//! protocol are served, a missing key is 404, flags mark gzip, a pooled
//! connection carries several requests.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Memcached {
    child: Child,
    port: u16,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// memcached on a free loopback port, or `None` when it is not installed.
fn memcached() -> Option<Memcached> {
    let bin = ["/usr/bin/memcached", "/usr/local/bin/memcached"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())?;
    let port = free_port();
    let child = Command::new(bin)
        .args([
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-u",
            "nobody",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let end = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "memcached did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Memcached { child, port })
}

/// One command to memcached and the first line of its answer.
fn command(port: u16, cmd: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(cmd).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

fn set(port: u16, key: &str, flags: u32, value: &[u8]) {
    let mut cmd = format!("set {key} {flags} 0 {}\r\n", value.len()).into_bytes();
    cmd.extend_from_slice(value);
    cmd.extend_from_slice(b"\r\n");
    assert_eq!(command(port, &cmd), "STORED\r\n");
}

/// memcached's count of connections it has accepted.
fn total_connections(port: u16) -> u64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"stats\r\n").unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 8192];
    while !text.contains("END\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text.lines()
        .find_map(|l| l.strip_prefix("STAT total_connections "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

#[test]
fn values_are_served_missing_keys_are_404_and_connections_are_pooled() {
    let Some(m) = memcached() else {
        eprintln!("skipped: no memcached");
        return;
    };
    set(m.port, "/page.html", 0, b"<p>cached</p>");
    set(m.port, "/z", 2, b"\x1f\x8b-not-really");
    set(m.port, "/a%20b", 0, b"escaped");
    let v = Vireo::start(&format!(
        "events {{}}
http {{
    upstream mc {{ server 127.0.0.1:{}; keepalive 2; }}
    server {{
        listen 127.0.0.1:{{port}};
        location / {{
            set $memcached_key $uri;
            memcached_pass mc;
            memcached_gzip_flag 2;
            add_header X-Up $upstream_status always;
        }}
        location /nokey {{ memcached_pass mc; }}
        location /down {{ set $memcached_key $uri; memcached_pass 127.0.0.1:{}; }}
    }}
}}",
        m.port,
        free_port()
    ));
    let before = total_connections(m.port);
    let r = v.get("/page.html");
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "<p>cached</p>"),
        "{}",
        v.stderr()
    );
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.header("x-up"), Some("200"));
    let r = v.get("/z");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    // The key goes escaped (a space is %20), as nginx sends it.
    assert_eq!(v.get("/a%20b").text(), "escaped");
    let r = v.get("/missing");
    assert_eq!((r.status, r.header("x-up")), (404, Some("404")));
    for _ in 0..10 {
        assert_eq!(v.get("/page.html").status, 200);
    }
    // Fourteen requests, one at a time: one pooled connection carried them
    // (and this count's own).
    assert!(
        total_connections(m.port) - before <= 2,
        "{}",
        total_connections(m.port) - before
    );
    assert_eq!(v.get("/nokey/x").status, 500);
    assert!(
        v.stderr()
            .contains("the \"$memcached_key\" variable is not set")
    );
    assert_eq!(v.get("/down").status, 502);
    assert!(eventually(2, || v
        .stderr()
        .contains("upstream: \"memcached://127.0.0.1:")));
}

#[test]
fn bad_next_upstream_words_are_refused_with_their_line() {
    let dir = TempDir::new("memcached");
    assert_conf_errors(
        &dir,
        &[(
            "location / { memcached_pass 127.0.0.1:1; memcached_next_upstream error http_500; }",
            "invalid parameter \"http_500\" in \"memcached_next_upstream\" directive",
        )],
    );
}
