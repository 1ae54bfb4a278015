//! Debian's dnsmasq on a free loopback port (scripts/test installs it),
//! answering for `.test` only (others: NXDOMAIN), in the foreground, killed
//! on drop; and the DNS query tests send it.

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

fn binary() -> Option<&'static str> {
    ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

impl Dns {
    /// dnsmasq with `args` (its records) on a free port; `None` (with a
    /// SKIP message) when it is not installed.
    pub fn start(args: &[String]) -> Option<Dns> {
        let Some(bin) = binary() else {
            eprintln!("skipped: dnsmasq is not installed (scripts/test installs it as root)");
            return None;
        };
        // dnsmasq listens on the port over UDP and TCP: a port free for
        // both, another if it still fails (the other tests' sockets come
        // and go).
        for _ in 0..10 {
            let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = udp.local_addr().unwrap().port();
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue;
            }
            drop(udp);
            if let Some(d) = Self::start_on(bin, port, args) {
                return Some(d);
            }
        }
        panic!("dnsmasq did not start");
    }

    /// Stop this one and start dnsmasq again on the same port with `args`
    /// (records the command line sets, which SIGHUP does not re-read).
    pub fn restart(&mut self, args: &[String]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let bin = binary().expect("it ran before");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Some(mut d) = Self::start_on(bin, self.port, args) {
                std::mem::swap(&mut self.child, &mut d.child);
                return;
            }
        }
        panic!("dnsmasq did not start again");
    }

    /// Re-read its hosts files (`--addn-hosts`) and clear its cache.
    pub fn hup(&self) {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGHUP) };
    }

    fn start_on(bin: &str, port: u16, args: &[String]) -> Option<Dns> {
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
            ])
            .args(args)
            .arg(format!("--port={port}"))
            .arg(if is_root() { "--user=root" } else { "--user=" })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // Ready when it answers a query (NXDOMAIN will do).
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
        None
    }
}
