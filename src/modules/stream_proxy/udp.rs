//! A UDP session's proxying: its peer chosen by the upstream's balancer
//! (the HTTP side's, with `max_conns` and passive health), a connected UDP
//! socket to it, the client's datagrams sent and the peer's answers sent
//! back, until `proxy_responses` answers per datagram came, `proxy_timeout`
//! passed idle, or the peer failed. A peer that fails (an ICMP error) before
//! its first answer counts as the peer's failure; as nginx's, a UDP session
//! is not passed on to a next peer.

use super::conf::StreamProxyConf;
use super::pump::Pace;
use crate::stream::session::{Client, Session};
use crate::upstream::balance::Tried;
use crate::upstream::{Attempt, PeerAddr, Upstream, UpstreamVars};
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

pub async fn run(
    s: &mut Session<'_>,
    up: &Arc<Upstream>,
    vars: &Rc<RefCell<UpstreamVars>>,
    rates: (u64, u64),
) -> u16 {
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
    let mut tried = Tried::default();
    let mut counts = Counts::default();
    let Ok(peer) = up.select(&key, &mut tried, None).await else {
        vars.borrow_mut().attempts.push(Attempt {
            addr: up.name.as_str().into(),
            ..Default::default()
        });
        crate::error_log!(
            Error,
            "no live upstreams while connecting to upstream{}, upstream: \"{}\"",
            s.req.log_context(),
            up.name
        );
        return 502;
    };
    vars.borrow_mut().attempts.push(Attempt {
        addr: up.addr_shared(peer),
        ..Default::default()
    });
    let t0 = Instant::now();
    let end = match connect(&up.peer_addr(peer), bind) {
        Ok(sock) => {
            if let Some(a) = vars.borrow_mut().attempts.last_mut() {
                a.connect_ms = Some(t0.elapsed().as_millis() as u64);
            }
            exchange(client, &sock, conf, &mut counts, vars, t0, rates).await
        }
        Err(e) => Err(e),
    };
    up.finished(peer, end.is_ok());
    if let Some(a) = vars.borrow_mut().attempts.last_mut() {
        a.response_ms = Some(t0.elapsed().as_millis() as u64);
    }
    s.info.received.set(counts.from_client);
    s.info.sent.set(counts.to_client);
    match end {
        Ok(()) => 200,
        Err(e) => {
            crate::error_log!(
                Error,
                "{} while proxying connection{}, upstream: \"{}\"",
                crate::core::errlog::errno_text(&e),
                s.req.log_context(),
                up.addr_name(peer)
            );
            502
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

/// The datagrams of the session both ways; `Err`: the peer failed (an
/// ICMP error) before its first answer.
async fn exchange(
    client: &mut crate::stream::udp::Datagrams,
    sock: &UdpSocket,
    conf: &StreamProxyConf,
    c: &mut Counts,
    vars: &Rc<RefCell<UpstreamVars>>,
    t0: Instant,
    rates: (u64, u64),
) -> io::Result<()> {
    let requests = conf.requests.filter(|n| *n > 0);
    let mut sent = 0u64;
    let mut received = 0u64;
    let (mut up, mut down) = (Pace::new(rates.0, t0), Pace::new(rates.1, t0));
    let mut buf = vec![0u8; 65535];
    let record = |sent: u64, received: u64| {
        if let Some(a) = vars.borrow_mut().attempts.last_mut() {
            a.sent = sent;
            a.received = received;
        }
    };
    // A direction's next read waits for its pace.
    async fn paced<T>(at: Option<Instant>, read: impl std::future::Future<Output = T>) -> T {
        if let Some(at) = at {
            tokio::time::sleep_until(at.into()).await;
        }
        read.await
    }
    loop {
        let idle = tokio::time::sleep(conf.timeout);
        let (up_at, down_at) = (up.next().0, down.next().0);
        tokio::select! {
            d = paced(up_at, client.recv()), if !c.detached => match d {
                Some(d) => {
                    up.took(d.len());
                    c.requests += 1;
                    c.from_client += d.len() as u64;
                    if requests == Some(c.requests) {
                        client.detach();
                        c.detached = true;
                    }
                    let r = sock.send(&d).await;
                    sent += d.len() as u64;
                    if let Err(e) = r {
                        record(sent, received);
                        return if c.responses == 0 { Err(e) } else { Ok(()) };
                    }
                }
                None => c.detached = true,
            },
            r = paced(down_at, sock.recv(&mut buf)) => match r {
                Ok(n) => {
                    down.took(n);
                    if c.responses == 0
                        && let Some(a) = vars.borrow_mut().attempts.last_mut()
                    {
                        a.header_ms = Some(t0.elapsed().as_millis() as u64);
                    }
                    c.responses += 1;
                    received += n as u64;
                    if client.send(&buf[..n]).await.is_ok() {
                        c.to_client += n as u64;
                    }
                }
                Err(e) => {
                    record(sent, received);
                    return if c.responses == 0 { Err(e) } else { Ok(()) };
                }
            },
            () = idle => {
                record(sent, received);
                return Ok(());
            }
        }
        record(sent, received);
        if requests.is_some_and(|n| c.requests < n) {
            continue;
        }
        if let Some(per) = conf.responses
            && c.responses >= per * c.requests
        {
            return Ok(());
        }
    }
}
