//! The client address from a header set by a trusted proxy or balancer
//! (nginx's ngx_http_realip_module): `set_real_ip_from`, `real_ip_header`,
//! `real_ip_recursive`.
//!
//! [`apply`] runs at the start of a request with the server's settings
//! (nginx's post-read phase) and again before the access checks with the
//! location's (preaccess); the first one that finds an address wins, once
//! per request. The address goes into [`State::real_ip`](crate::core::request::State),
//! which [`Request::client_addr`] returns to every module and variable
//! (`$remote_addr`, `$remote_port`, allow/deny, limits, error and access
//! logs, `$proxy_add_x_forwarded_for`, ip_hash); the connection's own
//! address stays in `$realip_remote_addr` / `$realip_remote_port`. Nothing
//! is allocated when realip is not configured.
//!
//! A header's address is used only while the address before it (first the
//! connection's) is trusted: without `real_ip_recursive` the last address
//! of the header replaces a trusted peer; with it, the header is walked from
//! its end past every trusted address (several `X-Forwarded-For` lines count
//! as one list). `$remote_port` becomes the header's port, or empty without one.

pub mod conf;

use crate::core::module::{Hooks, Module, Ordered, Phase};
use crate::core::request::{Peer, Request};
use crate::modules::access::{Cidr, Client};
use conf::RealIpHeader;
use conf::RealipConf;
use std::net::{IpAddr, SocketAddr};

/// Take the client address from the configured header, if the request has
/// none yet and the peer is trusted at this level.
pub fn apply(req: &mut Request<'_>) {
    let conf = req.conf.get::<RealipConf>();
    if conf.from.is_empty() || req.state.real_ip.is_some() {
        return;
    }
    let head = req.head;
    let found = match &conf.header {
        RealIpHeader::XForwardedFor => {
            let values: Vec<&[u8]> = head
                .headers()
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"x-forwarded-for"))
                .map(|(_, v)| v)
                .collect();
            forwarded(*req.peer, &values, &conf.from, conf.recursive)
        }
        RealIpHeader::Named(name) => head
            .header(name)
            .and_then(|v| forwarded(*req.peer, &[v], &conf.from, conf.recursive)),
        RealIpHeader::ProxyProtocol => req.proxy.as_ref().and_then(|p| {
            let a = forwarded(*req.peer, &[p.src_addr.as_bytes()], &conf.from, false)?;
            Some(SocketAddr::new(a.ip(), p.src_port))
        }),
    };
    req.state.real_ip = found;
}

fn trusted(from: &[Cidr], addr: Peer) -> bool {
    let c = Client::of(addr, true);
    from.iter().any(|n| n.matches(&c))
}

/// How far walking one header value got.
enum Walk {
    /// Stopped at an untrusted or unparsable entry.
    Stopped,
    /// Every entry was taken (all but the first were trusted).
    Through,
}

/// nginx's `ngx_http_get_forwarded_addr`: the address `values` (header
/// lines in request order) give for a connection from `peer`, or `None`.
pub fn forwarded(
    peer: Peer,
    values: &[&[u8]],
    from: &[Cidr],
    recursive: bool,
) -> Option<SocketAddr> {
    let mut addr = peer;
    let mut found = None;
    for v in values.iter().rev() {
        let walk = walk(&mut addr, &mut found, v, from, recursive);
        if !recursive || matches!(walk, Walk::Stopped) {
            break;
        }
    }
    found
}

/// Walk one value from its end while the current address is trusted.
fn walk(
    addr: &mut Peer,
    found: &mut Option<SocketAddr>,
    v: &[u8],
    from: &[Cidr],
    recursive: bool,
) -> Walk {
    let mut rest = v;
    loop {
        if !trusted(from, *addr) {
            return Walk::Stopped;
        }
        let end = rest.iter().rposition(|&b| b != b' ' && b != b',');
        let Some(end) = end else {
            return Walk::Stopped;
        };
        let start = rest[..end]
            .iter()
            .rposition(|&b| b == b' ' || b == b',')
            .map_or(0, |i| i + 1);
        let Some(a) = parse_addr_port(&rest[start..=end]) else {
            return Walk::Stopped;
        };
        *addr = Peer::Tcp(a);
        *found = Some(a);
        rest = &rest[..start];
        if !recursive {
            return Walk::Stopped;
        }
        if rest.is_empty() {
            return Walk::Through;
        }
    }
}

/// `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:80` (port 0 when none is given).
fn parse_addr_port(s: &[u8]) -> Option<SocketAddr> {
    let s = std::str::from_utf8(s).ok()?;
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 0));
    }
    if let Some(ip) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return ip.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 0));
    }
    s.parse().ok()
}

/// Some `set_real_ip_from` applies at this level.
fn active(c: &crate::conf::model::LocConf) -> bool {
    !c.get::<RealipConf>().from.is_empty()
}

/// `set_real_ip_from`, `real_ip_header`, `real_ip_recursive`: applied when
/// the request is read (server level) and again in its location, first of
/// the access hooks.
pub static MODULE: Module = Module {
    name: "realip",
    nginx: &["http_realip_module", "stream_realip_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::RealipConf::KIND),
    hooks: Hooks {
        // In the stream block the address is the PROXY header's.
        stream: Some(|conf, _| {
            conf.get_mut::<conf::RealipConfSet>()
                .header
                .get_or_insert(RealIpHeader::ProxyProtocol);
            Ok(())
        }),
        post_read: Some(Ordered {
            order: 10,
            run: |req| {
                apply(req);
                None
            },
            active,
        }),
        access: Some(Ordered {
            order: 0,
            run: |req, _| {
                apply(req);
                Phase::Next
            },
            active,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    fn from(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|s| Cidr::parse(s).unwrap().0).collect()
    }

    fn peer(a: &str) -> Peer {
        Peer::Tcp(SocketAddr::new(a.parse().unwrap(), 5555))
    }

    fn fwd(p: &str, values: &[&str], recursive: bool) -> Option<String> {
        let v: Vec<&[u8]> = values.iter().map(|s| s.as_bytes()).collect();
        let trust = from(&["127.0.0.1", "10.0.0.0/8", "unix:"]);
        let pa = if p == "unix:" { Peer::Unix } else { peer(p) };
        forwarded(pa, &v, &trust, recursive).map(|a| a.to_string())
    }

    #[test]
    fn non_recursive_takes_last() {
        assert_eq!(
            fwd("127.0.0.1", &["1.1.1.1, 10.0.0.2"], false).as_deref(),
            Some("10.0.0.2:0")
        );
        assert_eq!(
            fwd("127.0.0.1", &["1.1.1.1"], false).as_deref(),
            Some("1.1.1.1:0")
        );
        assert_eq!(fwd("8.8.8.8", &["1.1.1.1"], false), None);
        assert_eq!(
            fwd("unix:", &["1.1.1.1"], false).as_deref(),
            Some("1.1.1.1:0")
        );
        assert_eq!(fwd("127.0.0.1", &["junk"], false), None);
        assert_eq!(fwd("127.0.0.1", &["  , "], false), None);
    }

    #[test]
    fn recursive_skips_trusted() {
        let r = |v: &[&str]| fwd("127.0.0.1", v, true);
        assert_eq!(
            r(&["1.1.1.1, 2.2.2.2, 10.0.0.2"]).as_deref(),
            Some("2.2.2.2:0")
        );
        assert_eq!(
            r(&["1.1.1.1,10.0.0.3 ,10.0.0.2"]).as_deref(),
            Some("1.1.1.1:0")
        );
        // All trusted: the first one.
        assert_eq!(r(&["10.0.0.9, 10.0.0.2"]).as_deref(), Some("10.0.0.9:0"));
        // A bad entry stops the walk at the last good one.
        assert_eq!(
            r(&["1.1.1.1, junk, 10.0.0.2"]).as_deref(),
            Some("10.0.0.2:0")
        );
        // Several header lines are one list, the last line last.
        assert_eq!(r(&["1.1.1.1", "10.0.0.5"]).as_deref(), Some("1.1.1.1:0"));
        assert_eq!(r(&["1.1.1.1", "3.3.3.3"]).as_deref(), Some("3.3.3.3:0"));
        // Non-recursive only looks at the last line.
        assert_eq!(
            fwd("127.0.0.1", &["1.1.1.1", "10.0.0.5"], false).as_deref(),
            Some("10.0.0.5:0")
        );
    }

    #[test]
    fn ports_and_ipv6() {
        assert_eq!(
            fwd("127.0.0.1", &["1.1.1.1:8080"], false).as_deref(),
            Some("1.1.1.1:8080")
        );
        assert_eq!(
            fwd("127.0.0.1", &["2001:db8::1"], false).as_deref(),
            Some("[2001:db8::1]:0")
        );
        assert_eq!(
            fwd("127.0.0.1", &["[2001:db8::1]"], false).as_deref(),
            Some("[2001:db8::1]:0")
        );
        assert_eq!(
            fwd("127.0.0.1", &["[2001:db8::1]:443"], false).as_deref(),
            Some("[2001:db8::1]:443")
        );
        // A mapped IPv4 peer is trusted by an IPv4 network.
        assert_eq!(
            fwd("::ffff:127.0.0.1", &["1.1.1.1"], false).as_deref(),
            Some("1.1.1.1:0")
        );
    }
}
