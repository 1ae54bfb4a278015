//! The datagram link between a binary being upgraded and its successor.
//!
//! During a binary upgrade both processes read the same UDP sockets, and the
//! kernel hands each datagram to whichever reads first, while a QUIC
//! connection lives in one of them. So each passes the other the datagrams
//! it cannot place ([`super::route`] decides): the old binary every datagram
//! of a connection ID it did not issue, new clients' first flights included
//! (new connections go to the successor); the successor every such datagram
//! except a new client's. A datagram that came over the link is placed or
//! dropped, never sent back.
//!
//! The link is a `SOCK_SEQPACKET` pair the old binary makes at `SIGUSR2`; the
//! successor finds its end in [`ENV`]. Each process reads its end in a thread
//! of its own. The link ends when either process exits (its end closes); the
//! old binary, its successor gone, takes new clients again. A binary has one
//! link: upgraded again while its predecessor still runs, it passes datagrams
//! to its successor only.

use super::route;
use arc_swap::ArcSwapOption;
use bytes::Bytes;
use quinn::udp::EcnCodepoint;
use socket2::{Domain, Socket, Type};
use std::io::{self, Read};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Variable naming the successor's end of the link (a descriptor number).
pub const ENV: &str = "VIREO_QUIC_LINK";

/// One end of the link.
#[derive(Debug)]
pub struct Link {
    sock: Socket,
    /// This process is the binary being replaced: new clients go on.
    pub old: bool,
}

static LINK: ArcSwapOption<Link> = ArcSwapOption::const_empty();

/// The link of this process, while there is one.
pub fn current() -> arc_swap::Guard<Option<Arc<Link>>> {
    LINK.load()
}

/// The old binary's side: make the link, keep one end (read by a thread of
/// its own), and return the other for the successor.
pub fn successor() -> io::Result<OwnedFd> {
    let (mine, theirs) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None)?;
    start(mine, true)?;
    Ok(theirs.into())
}

/// The successor's side: its end of the link, found in [`ENV`].
pub fn adopt(fd: OwnedFd) -> io::Result<()> {
    start(Socket::from(fd), false)
}

fn start(sock: Socket, old: bool) -> io::Result<()> {
    let reader = sock.try_clone()?;
    let link = Arc::new(Link { sock, old });
    LINK.store(Some(link.clone()));
    let spawned = std::thread::Builder::new()
        .name("vireo-quic-link".into())
        .spawn(move || read(reader, link));
    if let Err(e) = spawned {
        LINK.store(None);
        return Err(e);
    }
    Ok(())
}

/// Place each datagram the other process passes, until it is gone.
fn read(sock: Socket, link: Arc<Link>) {
    let mut buf = vec![0u8; HEAD + u16::MAX as usize];
    loop {
        match (&sock).read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if let Some((local, d)) = decode(&buf[..n]) {
                    route::deliver(local, d);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                crate::error_log!(Alert, "QUIC link to the other binary failed: {e}");
                break;
            }
        }
    }
    // The other binary is gone: this link, unless a newer one replaced it.
    let gone = Some(link);
    LINK.compare_and_swap(&gone, None);
}

impl Link {
    /// A link to nowhere, for tests of where datagrams go.
    #[cfg(test)]
    pub fn for_test(old: bool) -> Link {
        let (sock, _) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
        Link { sock, old }
    }

    /// Pass a datagram read on the socket bound to `local`; dropped when the
    /// other process does not keep up.
    pub(super) fn pass(&self, local: SocketAddr, d: &route::Datagram) {
        let mut msg = Vec::with_capacity(HEAD + d.data.len());
        encode(&mut msg, local, d);
        let _ = self.sock.send_with_flags(&msg, libc::MSG_DONTWAIT);
    }
}

/// A message: the local address, the peer's, the destination address
/// (family 0: unknown), the ECN codepoint (0: none), then the datagram.
const ADDR: usize = 1 + 16 + 2;
const HEAD: usize = ADDR + ADDR + 17 + 1;

fn put_ip(out: &mut Vec<u8>, ip: Option<IpAddr>) {
    let (family, bytes) = match ip {
        Some(IpAddr::V4(a)) => (4, a.to_ipv6_mapped().octets()),
        Some(IpAddr::V6(a)) => (6, a.octets()),
        None => (0, [0; 16]),
    };
    out.push(family);
    out.extend_from_slice(&bytes);
}

fn get_ip(b: &[u8]) -> Option<Option<IpAddr>> {
    let a = Ipv6Addr::from(<[u8; 16]>::try_from(&b[1..17]).ok()?);
    match b[0] {
        0 => Some(None),
        4 => Some(Some(IpAddr::V4(a.to_ipv4_mapped()?))),
        6 => Some(Some(IpAddr::V6(a))),
        _ => None,
    }
}

fn put_addr(out: &mut Vec<u8>, a: SocketAddr) {
    put_ip(out, Some(a.ip()));
    out.extend_from_slice(&a.port().to_be_bytes());
}

fn get_addr(b: &[u8]) -> Option<SocketAddr> {
    let ip = get_ip(b)??;
    Some(SocketAddr::new(ip, u16::from_be_bytes([b[17], b[18]])))
}

fn encode(out: &mut Vec<u8>, local: SocketAddr, d: &route::Datagram) {
    put_addr(out, local);
    put_addr(out, d.addr);
    put_ip(out, d.dst_ip);
    out.push(d.ecn.map_or(0, |e| e as u8));
    out.extend_from_slice(&d.data);
}

fn decode(msg: &[u8]) -> Option<(SocketAddr, route::Datagram)> {
    if msg.len() <= HEAD {
        return None;
    }
    let local = get_addr(&msg[..ADDR])?;
    let addr = get_addr(&msg[ADDR..2 * ADDR])?;
    let dst_ip = get_ip(&msg[2 * ADDR..2 * ADDR + 17])?;
    let ecn = match msg[HEAD - 1] {
        0 => None,
        e => Some(EcnCodepoint::from_bits(e)?),
    };
    let data = Bytes::copy_from_slice(&msg[HEAD..]);
    Some((
        local,
        route::Datagram {
            data,
            addr,
            ecn,
            dst_ip,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_carries_the_datagram_and_its_addresses() {
        for (local, peer, dst) in [
            ("127.0.0.1:443", "127.0.0.1:50000", Some("127.0.0.1")),
            ("[::]:8443", "[2001:db8::1]:9", None),
        ] {
            let d = route::Datagram {
                data: Bytes::from_static(b"\x40quic datagram"),
                addr: peer.parse().unwrap(),
                ecn: Some(EcnCodepoint::Ect0),
                dst_ip: dst.map(|d| d.parse().unwrap()),
            };
            let mut msg = Vec::new();
            encode(&mut msg, local.parse().unwrap(), &d);
            let (l, back) = decode(&msg).unwrap();
            assert_eq!(l, local.parse().unwrap());
            assert_eq!(
                (back.data, back.addr, back.ecn, back.dst_ip),
                (d.data, d.addr, d.ecn, d.dst_ip)
            );
        }
        assert!(decode(&[0; HEAD]).is_none());
        assert!(decode(&[9; HEAD + 1]).is_none());
    }

    #[test]
    fn the_link_passes_datagrams_between_its_ends() {
        let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
        let link = Link { sock: a, old: true };
        let d = route::Datagram {
            data: Bytes::from_static(b"\xc0payload"),
            addr: "127.0.0.1:1234".parse().unwrap(),
            ecn: None,
            dst_ip: None,
        };
        link.pass("127.0.0.1:443".parse().unwrap(), &d);
        let mut buf = [0u8; 256];
        let n = (&b).read(&mut buf).unwrap();
        let (local, got) = decode(&buf[..n]).unwrap();
        assert_eq!(local, "127.0.0.1:443".parse().unwrap());
        assert_eq!(&got.data[..], b"\xc0payload");
    }
}
