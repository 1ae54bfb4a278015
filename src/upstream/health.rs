//! Active health checks (vireo's extension, `health_check` in an upstream
//! block): one thread per checked upstream, shared by all workers, sends
//! `GET path HTTP/1.0` to every peer each interval. A peer that fails `fall`
//! checks in a row is taken out of service (every worker skips it); one that
//! then passes `rise` checks in a row is put back. A check passes when the
//! peer answers within `timeout` with a status in the expected range.
//!
//! The thread holds the upstream weakly: when a reload drops the
//! configuration that defined it, the thread ends. Peers start in service,
//! as do the peers of `server … resolve` lines when they are found.

use super::{PeerAddr, Upstream};
use crate::conf::ast::{ConfError, Directive};
use crate::conf::values::{self, option, parse_time};
use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// `health_check` parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub interval: Duration,
    pub timeout: Duration,
    pub path: String,
    pub status: (u16, u16),
    pub rise: u32,
    pub fall: u32,
}

impl Default for Check {
    fn default() -> Check {
        Check {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            path: "/".into(),
            status: (200, 399),
            rise: 2,
            fall: 3,
        }
    }
}

impl Check {
    pub fn parse(d: &Directive) -> Result<Check, ConfError> {
        let mut c = Check::default();
        for arg in d.arg_strs() {
            let bad = || values::bad_arg(d, arg);
            let count = |v: &str| v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(bad);
            if let Some(v) = option(arg, "interval") {
                c.interval = parse_time(v).filter(|t| !t.is_zero()).ok_or_else(bad)?;
            } else if let Some(v) = option(arg, "timeout") {
                c.timeout = parse_time(v).filter(|t| !t.is_zero()).ok_or_else(bad)?;
            } else if let Some(v) = option(arg, "path") {
                if !v.starts_with('/') || v.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    return Err(bad());
                }
                c.path = v.to_string();
            } else if let Some(v) = option(arg, "status") {
                let (lo, hi) = v.split_once('-').unwrap_or((v, v));
                let p = |s: &str| s.parse::<u16>().ok().filter(|n| (100..=599).contains(n));
                match (p(lo), p(hi)) {
                    (Some(lo), Some(hi)) if lo <= hi => c.status = (lo, hi),
                    _ => return Err(bad()),
                }
            } else if let Some(v) = option(arg, "rise") {
                c.rise = count(v)?;
            } else if let Some(v) = option(arg, "fall") {
                c.fall = count(v)?;
            } else {
                return Err(bad());
            }
        }
        Ok(c)
    }
}

/// Start checking `u` (its `health` must be set).
pub fn start(u: &Arc<Upstream>) {
    let weak: Weak<Upstream> = Arc::downgrade(u);
    let _ = std::thread::Builder::new()
        .name(format!("health {}", u.name))
        .spawn(move || run(weak));
}

fn run(weak: Weak<Upstream>) {
    // Checks passed and failed in a row, by peer address (resolved peers
    // come and go).
    let mut streak: std::collections::HashMap<PeerAddr, (u32, u32)> = Default::default();
    loop {
        let Some(u) = weak.upgrade() else { return };
        let Some(check) = u.health.clone() else {
            return;
        };
        let mut seen = Vec::new();
        u.each_peer(|_, _, addr, healthy| {
            let ok = probe(addr, &u.name, &check);
            let (good, bad) = streak.entry(addr.clone()).or_default();
            seen.push(addr.clone());
            if ok {
                *good += 1;
                *bad = 0;
                if *good >= check.rise && !healthy.swap(true, Ordering::Relaxed) {
                    crate::error_log!(
                        Notice,
                        "upstream \"{}\" peer {addr} passed {} health checks: back in service",
                        u.name,
                        check.rise
                    );
                }
            } else {
                *bad += 1;
                *good = 0;
                if *bad >= check.fall && healthy.swap(false, Ordering::Relaxed) {
                    crate::error_log!(
                        Error,
                        "upstream \"{}\" peer {addr} failed {} health checks: out of service",
                        u.name,
                        check.fall
                    );
                }
            }
        });
        streak.retain(|a, _| seen.contains(a));
        let wait = check.interval;
        drop(u);
        std::thread::sleep(wait);
    }
}

/// One check: connect, ask, read the status line.
fn probe(addr: &PeerAddr, host: &str, c: &Check) -> bool {
    let req = format!(
        "GET {} HTTP/1.0\r\nHost: {host}\r\nUser-Agent: vireo-health-check\r\n\r\n",
        c.path
    );
    let status = |s: &mut dyn ReadWrite| -> Option<u16> {
        s.write_all(req.as_bytes()).ok()?;
        let mut buf = [0u8; 64];
        let mut n = 0;
        while n < 12 {
            let r = s.read(&mut buf[n..]).ok()?;
            if r == 0 {
                break;
            }
            n += r;
        }
        let line = std::str::from_utf8(&buf[..n]).ok()?;
        let mut parts = line.split(' ');
        if !parts.next()?.starts_with("HTTP/1.") {
            return None;
        }
        parts.next()?.get(..3)?.parse().ok()
    };
    let code = match addr {
        PeerAddr::Tcp(a) => std::net::TcpStream::connect_timeout(a, c.timeout)
            .ok()
            .and_then(|mut s| {
                s.set_read_timeout(Some(c.timeout)).ok()?;
                s.set_write_timeout(Some(c.timeout)).ok()?;
                status(&mut s)
            }),
        PeerAddr::Unix(p) => std::os::unix::net::UnixStream::connect(p)
            .ok()
            .and_then(|mut s| {
                s.set_read_timeout(Some(c.timeout)).ok()?;
                s.set_write_timeout(Some(c.timeout)).ok()?;
                status(&mut s)
            }),
    };
    code.is_some_and(|s| (c.status.0..=c.status.1).contains(&s))
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}
