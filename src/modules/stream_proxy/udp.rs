//! A UDP session's proxying: its peer chosen by the upstream's balancer
//! (the HTTP side's, with `max_conns` and passive health), a connected UDP
//! socket to it, the client's datagrams sent and the peer's answers sent
//! back, until `proxy_responses` answers per datagram came, `proxy_timeout`
//! passed idle, or the peer failed. A peer that fails (an ICMP error) before
//! its first answer is a failed attempt: the next peer, as
//! `proxy_next_upstream` allows, gets the datagrams again.

use super::conf::StreamProxyConf;
use crate::stream::session::{Client, Session};
use crate::upstream::balance::Tried;
use crate::upstream::{Attempt, PeerAddr, Upstream, UpstreamVars};
use bytes::Bytes;
use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::UdpSocket;

/// A UDP socket connected to `peer`, from `local` when given.
fn connect(peer: &PeerAddr, local: Option<SocketAddr>) -> io::Result<UdpSocket> {
    let PeerAddr::Tcp(to) = peer else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a UDP session to a unix socket is not supported",
        ));
    };
    let from = local.unwrap_or(match to {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    });
    let s = std::net::UdpSocket::bind(from)?;
    s.connect(to)?;
    s.set_nonblocking(true)?;
    UdpSocket::from_std(s)
}

/// How an attempt on one peer ended.
enum End {
    /// The session is over (its status).
    Done(u16),
    /// The peer failed before answering: another may be tried.
    Failed(io::Error),
}

pub async fn run(s: &mut Session<'_>, up: &Arc<Upstream>, vars: &Rc<RefCell<UpstreamVars>>) -> u16 {
    let conf: &StreamProxyConf = s.req.conf.get::<StreamProxyConf>();
    let key = crate::upstream::driver::balancing_key(&s.req, up);
    let bind = conf
        .bind
        .as_ref()
        .and_then(|b| b.local(&s.req, "proxy_bind"))
        .map(|b| b.addr);
    let Client::Udp(client) = &mut s.client else {
        unreachable!("a UDP session's client sends datagrams")
    };
    let started = Instant::now();
    let mut tried = Tried::default();
    let mut tries = 0u32;
    // The client's datagrams until the first answer: what a next peer gets.
    let mut taken: Vec<Bytes> = Vec::new();
    let mut counts = Counts::default();
    loop {
        let Ok(peer) = up.select(&key, &mut tried, None).await else {
            crate::error_log!(
                Error,
                "no live upstreams while connecting to upstream{}, upstream: \"{}\"",
                s.req.log_context(),
                up.name
            );
            return 502;
        };
        tries += 1;
        vars.borrow_mut().attempts.push(Attempt {
            addr: up.addr_name(peer).to_string(),
            ..Default::default()
        });
        let t0 = Instant::now();
        let end = match connect(&up.addrs[peer], bind) {
            Ok(sock) => {
                if let Some(a) = vars.borrow_mut().attempts.last_mut() {
                    a.connect_ms = Some(t0.elapsed().as_millis() as u64);
                }
                exchange(client, &sock, conf, &mut taken, &mut counts, vars, t0).await
            }
            Err(e) => End::Failed(e),
        };
        let failed = matches!(end, End::Failed(_));
        up.finished(peer, !failed);
        if let Some(a) = vars.borrow_mut().attempts.last_mut() {
            a.response_ms = Some(t0.elapsed().as_millis() as u64);
        }
        s.info.received.set(counts.from_client);
        s.info.sent.set(counts.to_client);
        match end {
            End::Done(status) => return status,
            End::Failed(e) => {
                crate::error_log!(
                    Error,
                    "{} while proxying connection{}, upstream: \"{}\"",
                    crate::core::errlog::errno_text(&e),
                    s.req.log_context(),
                    up.addr_name(peer)
                );
                let again = conf.next_upstream
                    && (conf.next_upstream_tries == 0 || tries < conf.next_upstream_tries)
                    && (conf.next_upstream_timeout.is_zero()
                        || started.elapsed() < conf.next_upstream_timeout);
                if !again {
                    return 502;
                }
            }
        }
    }
}

/// A UDP session's counts.
#[derive(Default)]
struct Counts {
    /// Datagrams taken from the client (`proxy_requests`).
    requests: u64,
    /// Answers of the peer (`proxy_responses`).
    responses: u64,
    from_client: u64,
    to_client: u64,
    detached: bool,
}

/// One peer's part of the session.
async fn exchange(
    client: &mut crate::stream::udp::Datagrams,
    sock: &UdpSocket,
    conf: &StreamProxyConf,
    taken: &mut Vec<Bytes>,
    c: &mut Counts,
    vars: &Rc<RefCell<UpstreamVars>>,
    t0: Instant,
) -> End {
    let requests = conf.requests.filter(|n| *n > 0);
    let mut sent = 0u64;
    let mut received = 0u64;
    for d in taken.iter() {
        if let Err(e) = sock.send(d).await {
            return End::Failed(e);
        }
        sent += d.len() as u64;
    }
    let mut buf = vec![0u8; 65535];
    let record = |sent: u64, received: u64| {
        if let Some(a) = vars.borrow_mut().attempts.last_mut() {
            a.sent = sent;
            a.received = received;
        }
    };
    loop {
        let idle = tokio::time::sleep(conf.timeout);
        tokio::select! {
            d = client.recv(), if !c.detached => match d {
                Some(d) => {
                    c.requests += 1;
                    c.from_client += d.len() as u64;
                    if requests == Some(c.requests) {
                        client.detach();
                        c.detached = true;
                    }
                    let r = sock.send(&d).await;
                    sent += d.len() as u64;
                    if c.responses == 0 {
                        taken.push(d);
                    }
                    if let Err(e) = r {
                        record(sent, received);
                        return match c.responses {
                            0 => End::Failed(e),
                            _ => End::Done(200),
                        };
                    }
                }
                None => c.detached = true,
            },
            r = sock.recv(&mut buf) => match r {
                Ok(n) => {
                    if c.responses == 0
                        && let Some(a) = vars.borrow_mut().attempts.last_mut()
                    {
                        a.header_ms = Some(t0.elapsed().as_millis() as u64);
                    }
                    c.responses += 1;
                    received += n as u64;
                    taken.clear();
                    if client.send(&buf[..n]).await.is_ok() {
                        c.to_client += n as u64;
                    }
                }
                Err(e) => {
                    record(sent, received);
                    return match c.responses {
                        0 => End::Failed(e),
                        _ => End::Done(200),
                    };
                }
            },
            () = idle => {
                record(sent, received);
                return End::Done(200);
            }
        }
        record(sent, received);
        if requests.is_some_and(|n| c.requests < n) {
            continue;
        }
        if let Some(per) = conf.responses
            && c.responses >= per * c.requests
        {
            return End::Done(200);
        }
    }
}
