//! 15,000 concurrent clients against two workers: every one gets its 200.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const WANT: usize = 15_000;
const THREADS: usize = 10;

/// Soft and hard RLIMIT_NOFILE of this process, from /proc/self/limits.
fn nofile_limits() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files line");
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}

/// Descriptors open in process `pid`.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Read one response with a Content-Length body; true when it is a 200 with `body`.
fn read_ok(s: &mut TcpStream, body: &[u8]) -> Result<(), String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let r = Resp::parse(&buf[..end + 4]).ok_or("bad head")?;
            let len: usize = r
                .header("content-length")
                .and_then(|v| v.parse().ok())
                .ok_or("no length")?;
            if buf.len() >= end + 4 + len {
                if r.status != 200 {
                    return Err(format!("status {}", r.status));
                }
                if buf[end + 4..end + 4 + len] != *body {
                    return Err("wrong body".into());
                }
                return Ok(());
            }
        }
        match s.read(&mut chunk) {
            Ok(0) => return Err(format!("EOF after {} bytes", buf.len())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

#[test]
fn fifteen_thousand_concurrent_clients() {
    let (soft, hard) = nofile_limits();
    if soft < hard {
        vireo::raise_nofile(hard).expect("raise RLIMIT_NOFILE to the hard limit");
    }
    let (soft, _) = nofile_limits();
    // Both this process and the server need one descriptor per connection, plus a margin.
    let n = WANT.min(soft.saturating_sub(300) as usize);
    if n < WANT {
        println!(
            "RLIMIT_NOFILE is {soft} here: scaled down to {n} concurrent connections (wanted {WANT})"
        );
    }
    assert!(
        n >= 1000,
        "descriptor limit {soft} too low for a meaningful test"
    );

    let dir = TempDir::new("conc");
    dir.write("html/c.txt", "concurrent ok");
    let v = Vireo::start_in(
        dir,
        "
worker_processes 2;
worker_rlimit_nofile 20000;
events { worker_connections 16000; }
http {
    access_log off;
    keepalive_timeout 120s;
    server {
        listen 127.0.0.1:{port} backlog=4096;
        root {dir}/html;
    }
}",
    );
    let addr: SocketAddr = ([127, 0, 0, 1], v.port).into();
    let t0 = Instant::now();
    let connected = Arc::new(Barrier::new(THREADS + 1));
    let answered = Arc::new(Barrier::new(THREADS + 1));
    let release = Arc::new(Barrier::new(THREADS + 1));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let per = n / THREADS + usize::from(t < n % THREADS);
        let (connected, answered, release) = (connected.clone(), answered.clone(), release.clone());
        handles.push(std::thread::spawn(move || {
            let mut socks = Vec::with_capacity(per);
            let mut failures = Vec::new();
            for _ in 0..per {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(15)) {
                    Ok(s) => {
                        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
                        socks.push(s);
                    }
                    Err(e) => failures.push(format!("connect: {e}")),
                }
            }
            // Every connection is open before any request goes out.
            connected.wait();
            let mut sent = Vec::with_capacity(socks.len());
            for s in &mut socks {
                let ok = s
                    .write_all(b"GET /c.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    .map_err(|e| failures.push(format!("write: {e}")))
                    .is_ok();
                sent.push(ok);
            }
            let mut ok = 0usize;
            for (s, sent) in socks.iter_mut().zip(sent) {
                if !sent {
                    continue;
                }
                match read_ok(s, b"concurrent ok") {
                    Ok(()) => ok += 1,
                    Err(e) => failures.push(e),
                }
            }
            // Keep every connection open until the server's descriptors are counted.
            answered.wait();
            release.wait();
            drop(socks);
            (ok, failures)
        }));
    }
    connected.wait();
    let t_connect = t0.elapsed();
    answered.wait();
    let t_answered = t0.elapsed();
    let server_fds = fd_count(v.pid());
    release.wait();

    let mut ok = 0;
    let mut failures = Vec::new();
    for h in handles {
        let (o, f) = h.join().unwrap();
        ok += o;
        failures.extend(f);
    }
    println!(
        "{n} connections: connected in {t_connect:?}, all answered at {t_answered:?}; \
         server held {server_fds} descriptors; {ok} ok, {} failed",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}\n{}",
        failures.len(),
        &failures[..failures.len().min(5)],
        v.stderr()
    );
    assert_eq!(ok, n);
    assert!(
        server_fds >= n,
        "server held only {server_fds} descriptors for {n} connections"
    );

    // The server frees them once the clients are gone, and still serves.
    let end = Instant::now() + Duration::from_secs(20);
    while fd_count(v.pid()) > 200 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = fd_count(v.pid());
    assert!(
        left <= 200,
        "server still holds {left} descriptors after the clients left"
    );
    assert_eq!(v.get("/c.txt").text(), "concurrent ok");
}
