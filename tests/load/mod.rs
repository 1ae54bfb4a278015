//! A bounded load on loopback for the reload and upgrade tests: keep-alive
//! clients, one-request connections and slow downloads, each request checked
//! (status, complete body, one fill byte throughout) and time-stamped so the
//! caller can check which configuration answered it.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One answered request: when it was sent, when its first byte came back, and
/// the byte its body is made of.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub sent: Instant,
    pub first_byte: Instant,
    pub fill: u8,
    pub slow: bool,
}

#[derive(Default, Debug)]
pub struct Report {
    pub samples: Vec<Sample>,
    /// Requests that did not get a complete, correct response.
    pub failures: Vec<String>,
    /// Of those, how many saw a connection reset.
    pub resets: usize,
    /// Connections opened by keep-alive clients (beyond their first).
    pub reconnects: usize,
}

/// What to run.
#[derive(Clone)]
pub struct Plan {
    pub ports: Vec<u16>,
    /// Small file, same length in every configuration.
    pub small: &'static str,
    pub small_len: usize,
    /// Large file read slowly.
    pub big: &'static str,
    pub big_len: usize,
    pub keepalive: usize,
    pub oneshot: usize,
    pub slow: usize,
}

pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Report>>,
}

impl Load {
    pub fn start(plan: &Plan) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut n = 0;
        let kinds = [
            (plan.keepalive, Kind::KeepAlive),
            (plan.oneshot, Kind::OneShot),
            (plan.slow, Kind::Slow),
        ];
        for (count, kind) in kinds {
            for _ in 0..count {
                let port = plan.ports[n % plan.ports.len()];
                n += 1;
                let (stop, plan) = (stop.clone(), plan.clone());
                threads.push(std::thread::spawn(move || client(kind, port, &plan, &stop)));
            }
        }
        Load { stop, threads }
    }

    /// Stop the clients (each finishes its request) and gather their reports.
    pub fn finish(self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Report::default();
        for t in self.threads {
            let r = t.join().expect("load client panicked");
            all.samples.extend(r.samples);
            all.failures.extend(r.failures);
            all.resets += r.resets;
            all.reconnects += r.reconnects;
        }
        all
    }
}

#[derive(Clone, Copy)]
enum Kind {
    KeepAlive,
    OneShot,
    Slow,
}

fn connect(port: u16, slow: bool) -> std::io::Result<TcpStream> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let s = if slow {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.set_recv_buffer_size(4096)?;
        s.connect(&addr.into())?;
        s.into()
    } else {
        TcpStream::connect(addr)?
    };
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn client(kind: Kind, port: u16, plan: &Plan, stop: &AtomicBool) -> Report {
    let mut r = Report::default();
    let mut conn: Option<TcpStream> = None;
    let mut opened: usize = 0;
    let (path, len, slow) = match kind {
        Kind::Slow => (plan.big, plan.big_len, true),
        _ => (plan.small, plan.small_len, false),
    };
    let close = matches!(kind, Kind::OneShot);
    while !stop.load(Ordering::Relaxed) {
        let mut s = match conn.take() {
            Some(s) => s,
            None => match connect(port, slow) {
                Ok(s) => {
                    opened += 1;
                    s
                }
                Err(e) => {
                    note(&mut r, format!("connect: {e}"), &e);
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            },
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: load\r\n{}\r\n",
            if close { "Connection: close\r\n" } else { "" }
        );
        let sent = Instant::now();
        if let Err(e) = s.write_all(req.as_bytes()) {
            note(&mut r, format!("write: {e}"), &e);
            continue;
        }
        match read_response(&mut s, len, slow) {
            Ok((first_byte, fill, keep)) => {
                r.samples.push(Sample {
                    sent,
                    first_byte,
                    fill,
                    slow,
                });
                if keep && !close {
                    conn = Some(s);
                }
            }
            Err(msg) => {
                let reset = msg.contains("reset");
                r.failures.push(msg);
                if reset {
                    r.resets += 1;
                }
            }
        }
    }
    if matches!(kind, Kind::KeepAlive | Kind::Slow) {
        r.reconnects = opened.saturating_sub(1);
    }
    r
}

fn note(r: &mut Report, msg: String, e: &std::io::Error) {
    if e.kind() == ErrorKind::ConnectionReset {
        r.resets += 1;
    }
    r.failures.push(msg);
}

/// Read one response: status 200, `len` body bytes all equal. Returns when the
/// first byte arrived, the fill byte, and whether the connection stays open.
fn read_response(s: &mut TcpStream, len: usize, slow: bool) -> Result<(Instant, u8, bool), String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = vec![0u8; if slow { 4096 } else { 16384 }];
    let mut first_byte = None;
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s
            .read(&mut chunk)
            .map_err(|e| format!("read head: {e} ({:?})", e.kind()))?;
        if n == 0 {
            return Err(format!(
                "closed before a response head ({} bytes: {:?})",
                buf.len(),
                String::from_utf8_lossy(&buf)
            ));
        }
        first_byte.get_or_insert_with(Instant::now);
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200 ") {
        return Err(format!("status: {}", head.lines().next().unwrap_or("")));
    }
    let cl = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    if cl != Some(len) {
        return Err(format!("content-length {cl:?}, want {len}"));
    }
    let keep = !head.lines().any(|l| l.starts_with("connection: close"));
    let mut body: Vec<u8> = buf[head_end..].to_vec();
    while body.len() < len {
        let n = s
            .read(&mut chunk)
            .map_err(|e| format!("read body: {e} ({:?}) after {} bytes", e.kind(), body.len()))?;
        if n == 0 {
            return Err(format!("closed after {} of {len} body bytes", body.len()));
        }
        body.extend_from_slice(&chunk[..n]);
        if slow {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    if body.len() != len {
        return Err(format!("{} body bytes, want {len}", body.len()));
    }
    let fill = body[0];
    if body.iter().any(|&b| b != fill) {
        return Err("body mixes two files".into());
    }
    Ok((first_byte.expect("a byte arrived"), fill, keep))
}

/// When each configuration may have been live: generation `k` (0: the first)
/// may answer requests from the moment reload `k` was signalled until reload
/// `k+1` was seen in effect.
pub struct Timeline {
    /// (signalled, seen in effect) of each reload, in order.
    pub reloads: Vec<(Instant, Instant)>,
    /// Fill byte of generation `k`.
    pub fill: Vec<u8>,
}

impl Timeline {
    /// Check a sample: some generation possibly live while the request could
    /// have started (between sending and the first byte back) has its fill.
    pub fn check(&self, s: &Sample) -> Result<(), String> {
        let n = self.reloads.len();
        let mut allowed = Vec::new();
        for k in 0..=n {
            let from = if k == 0 {
                None
            } else {
                Some(self.reloads[k - 1].0)
            };
            let until = self.reloads.get(k).map(|r| r.1);
            let after_from = from.is_none_or(|f| s.first_byte >= f);
            let before_until = until.is_none_or(|u| s.sent <= u);
            if after_from && before_until {
                allowed.push(self.fill[k]);
            }
        }
        if allowed.contains(&s.fill) {
            Ok(())
        } else {
            Err(format!(
                "answered '{}' but only {:?} could be live",
                s.fill as char,
                allowed.iter().map(|&b| b as char).collect::<Vec<_>>()
            ))
        }
    }
}
