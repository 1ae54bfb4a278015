//! Debian's dnsmasq as a DNS server on loopback (tests/resolver.rs,
//! tests/stream.rs), and the DNS query those tests send.

use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A DNS query for the A records of `name`, with the identifier `id`.
pub fn query(id: u16, name: &str) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00");
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(b"\x00\x00\x01\x00\x01");
    q
}

pub struct Dns {
    child: Child,
    pub port: u16,
}

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Debian's dnsmasq on a free loopback port, in the foreground, answering
/// for `.test` only (others: NXDOMAIN) from `records` (its options:
/// `--host-record=…`, `--cname=…`); `None` (the test skips) when it is not
/// installed.
pub fn dnsmasq(records: &[&str]) -> Option<Dns> {
    let bin = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(bin) = bin else {
        eprintln!("skipped: dnsmasq is not installed (scripts/test installs it as root)");
        return None;
    };
    for _ in 0..3 {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(bin)
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--listen-address=127.0.0.1",
                "--pid-file",
                "--local=/test/",
                "--local-ttl=60",
            ])
            .args(records)
            .arg(format!("--port={port}"))
            .arg(if is_root() { "--user=root" } else { "--user=" })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // Ready when it answers a query.
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let q = query(1, "ready.test");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            let _ = s.send_to(&q, ("127.0.0.1", port));
            let mut buf = [0u8; 512];
            if s.recv(&mut buf).is_ok() {
                return Some(Dns { child, port });
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("dnsmasq did not start");
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
