//! Logging to syslog, as nginx's `syslog:` targets of `error_log` and
//! `access_log`: `syslog:server=address[:port],facility=…,severity=…,tag=…,nohostname`.
//!
//! Each message is one datagram, over UDP or a Unix datagram socket, in
//! nginx's (RFC 3164) form: `<PRI>Nov  1 22:35:38 hostname tag: message`.
//! The socket is opened on the first message and reopened after a send
//! fails, so a restarted syslog daemon is found again; a failure is never
//! reported (there is no log left to report it to) and never blocks.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::Mutex;

use crate::core::clock;
use crate::core::errlog::Level;

/// Where the messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Server {
    Inet(SocketAddr),
    Unix(PathBuf),
}

/// A `syslog:` target as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    pub server: Server,
    /// Facility number (`local7`, 23, unless set).
    pub facility: u8,
    /// Severity of access log messages (`info`, 6, unless set); error log
    /// messages carry their own level's.
    pub severity: u8,
    pub tag: String,
    /// `nohostname`: leave the host name out of the header.
    pub hostname: bool,
}

const FACILITIES: [&str; 24] = [
    "kern", "user", "mail", "daemon", "auth", "intern", "lpr", "news", "uucp", "clock", "authpriv",
    "ftp", "ntp", "audit", "alert", "cron", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];

/// The syslog severity of an error log level (emerg 0 … debug 7).
pub fn severity(level: Level) -> u8 {
    match level {
        Level::Emerg => 0,
        Level::Alert => 1,
        Level::Crit => 2,
        Level::Error => 3,
        Level::Warn => 4,
        Level::Notice => 5,
        Level::Info => 6,
        Level::Debug => 7,
    }
}

impl Spec {
    /// Parse what follows `syslog:` (nginx's messages on errors).
    pub fn parse(params: &str) -> Result<Spec, String> {
        let mut server = None;
        let mut facility = 23;
        let mut severity_n = 6;
        let mut tag = "nginx".to_string();
        let mut hostname = true;
        for p in params.split(',') {
            if let Some(v) = p.strip_prefix("server=") {
                if server.is_some() {
                    return Err("duplicate syslog \"server\"".into());
                }
                server = Some(parse_server(v)?);
            } else if let Some(v) = p.strip_prefix("facility=") {
                facility = FACILITIES
                    .iter()
                    .position(|f| *f == v)
                    .ok_or_else(|| format!("unknown syslog facility \"{v}\""))?
                    as u8;
            } else if let Some(v) = p.strip_prefix("severity=") {
                severity_n = Level::parse(v)
                    .map(severity)
                    .ok_or_else(|| format!("unknown syslog severity \"{v}\""))?;
            } else if let Some(v) = p.strip_prefix("tag=") {
                if v.len() > 32 {
                    return Err("syslog tag length exceeds 32".into());
                }
                if !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(
                        "syslog \"tag\" only allows alphanumeric characters and underscore".into(),
                    );
                }
                tag = v.to_string();
            } else if p == "nohostname" {
                hostname = false;
            } else {
                return Err(format!("unknown syslog parameter \"{p}\""));
            }
        }
        Ok(Spec {
            server: server.ok_or("no syslog server specified")?,
            facility,
            severity: severity_n,
            tag,
            hostname,
        })
    }
}

fn parse_server(v: &str) -> Result<Server, String> {
    if let Some(path) = v.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("no path in syslog server \"unix:\"".into());
        }
        return Ok(Server::Unix(PathBuf::from(path)));
    }
    let with_port = if v.starts_with('[') {
        if v.ends_with(']') {
            format!("{v}:514")
        } else {
            v.to_string()
        }
    } else if v.contains(':') {
        v.to_string()
    } else {
        format!("{v}:514")
    };
    let host = with_port.trim_start_matches('[');
    with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(Server::Inet)
        .ok_or_else(|| format!("host not found in syslog server \"{}\"", host))
}

enum Sock {
    Udp(UdpSocket),
    Unix(UnixDatagram),
}

/// An open `syslog:` target, shared by every thread that logs to it.
pub struct Syslog {
    spec: Spec,
    sock: Mutex<Option<Sock>>,
}

impl std::fmt::Debug for Syslog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Syslog").field("spec", &self.spec).finish()
    }
}

impl Syslog {
    pub fn new(spec: Spec) -> Syslog {
        Syslog {
            spec,
            sock: Mutex::new(None),
        }
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Send `msg` (without a trailing newline) as one message with the
    /// severity given, or the target's own (`severity=`) when `None`.
    pub fn send(&self, severity: Option<u8>, msg: &[u8]) {
        let mut out = Vec::with_capacity(msg.len() + 64);
        self.header(severity.unwrap_or(self.spec.severity), &mut out);
        out.extend_from_slice(msg);
        let mut g = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            match self.connect() {
                Ok(s) => *g = Some(s),
                Err(_) => return,
            }
        }
        let sent = match g.as_ref() {
            Some(Sock::Udp(s)) => s.send(&out),
            Some(Sock::Unix(s)) => s.send(&out),
            None => return,
        };
        if let Err(e) = sent
            && e.kind() != io::ErrorKind::WouldBlock
        {
            // Reconnect on the next message (a syslog daemon that went away
            // and came back, a Unix socket made anew).
            *g = None;
        }
    }

    /// `<PRI>Nov  1 22:35:38 hostname tag: `.
    fn header(&self, severity: u8, out: &mut Vec<u8>) {
        out.push(b'<');
        crate::core::vars::push_u64(out, u64::from(self.spec.facility) * 8 + u64::from(severity));
        out.push(b'>');
        clock::with_syslog_time(|t| out.extend_from_slice(t.as_bytes()));
        out.push(b' ');
        if self.spec.hostname {
            out.extend_from_slice(hostname().as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(self.spec.tag.as_bytes());
        out.extend_from_slice(b": ");
    }

    fn connect(&self) -> io::Result<Sock> {
        match &self.spec.server {
            Server::Inet(addr) => {
                let local: SocketAddr = if addr.is_ipv4() {
                    "0.0.0.0:0".parse().expect("address")
                } else {
                    "[::]:0".parse().expect("address")
                };
                let s = UdpSocket::bind(local)?;
                s.connect(addr)?;
                s.set_nonblocking(true)?;
                Ok(Sock::Udp(s))
            }
            Server::Unix(path) => {
                let s = UnixDatagram::unbound()?;
                s.connect(path)?;
                s.set_nonblocking(true)?;
                Ok(Sock::Unix(s))
            }
        }
    }
}

/// The host name as nginx puts it in syslog headers: lowercase.
fn hostname() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| crate::core::request::hostname().to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_params() {
        let s =
            Spec::parse("server=127.0.0.1:5140,facility=user,severity=alert,tag=SEE_THIS").unwrap();
        assert_eq!(s.server, Server::Inet("127.0.0.1:5140".parse().unwrap()));
        assert_eq!((s.facility, s.severity), (1, 1));
        assert_eq!(s.tag, "SEE_THIS");
        assert!(s.hostname);

        let s = Spec::parse("severity=warn,server=127.0.0.1,nohostname").unwrap();
        assert_eq!(s.server, Server::Inet("127.0.0.1:514".parse().unwrap()));
        assert_eq!((s.facility, s.severity), (23, 4));
        assert_eq!(s.tag, "nginx");
        assert!(!s.hostname);

        let s = Spec::parse("server=unix:/dev/log").unwrap();
        assert_eq!(s.server, Server::Unix("/dev/log".into()));
        let s = Spec::parse("server=[::1]").unwrap();
        assert_eq!(s.server, Server::Inet("[::1]:514".parse().unwrap()));

        assert!(Spec::parse("facility=user").is_err());
        assert!(Spec::parse("server=127.0.0.1,facility=nope").is_err());
        assert!(Spec::parse("server=127.0.0.1,severity=warning").is_err());
        assert!(Spec::parse("server=127.0.0.1,tag=a-b").is_err());
        assert!(Spec::parse("server=127.0.0.1,bogus").is_err());
    }

    #[test]
    fn sends_datagrams() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let port = rx.local_addr().unwrap().port();
        let log = Syslog::new(
            Spec::parse(&format!("server=127.0.0.1:{port},facility=user,tag=t1")).unwrap(),
        );
        log.send(Some(severity(Level::Error)), b"hello");
        log.send(None, b"info");
        let mut buf = [0u8; 512];
        let n = rx.recv(&mut buf).unwrap();
        let m = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(m.starts_with("<11>"), "{m}");
        assert!(m.ends_with(&format!(" {} t1: hello", hostname())), "{m}");
        // "<11>Nov  1 22:35:38 "
        assert_eq!(&m[7..8], " ");
        assert_eq!(&m[13..14], ":");
        let n = rx.recv(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"<14>"));
    }
}
