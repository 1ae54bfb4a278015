//! Which worker a QUIC datagram belongs to. Every worker runs its own QUIC
//! endpoint on its own descriptor for an address (one SO_REUSEPORT socket
//! each, or dups of one shared socket), and the kernel hands a datagram to
//! whichever socket or reader it picks: by the 4-tuple's hash with
//! `reuseport`, to any waiting reader without. A connection lives in one
//! endpoint, so each endpoint looks at the connection ID of every datagram
//! it reads and passes those of another worker's connections on to it
//! through an in-process channel ([`Routed`], the endpoint's socket).
//!
//! The connection IDs the server issues say where they belong (see
//! [`Cids`]): `[route][4 random bytes][3-byte tag]`, the tag a keyed hash of
//! the first five bytes with a secret of this process, so an ID is known as
//! this process's without any table. A datagram whose destination ID is:
//! - ours: goes to the endpoint of its route (here, or passed on); when that
//!   endpoint is gone, here, and the QUIC stack answers with a stateless
//!   reset;
//! - not ours, in a new client's first flight (an Initial or 0-RTT packet, or
//!   a version this server does not speak: the ID is the client's own
//!   choice): sent to the endpoint that the ID's hash picks among those
//!   taking new connections, so every packet of a first flight meets in one
//!   place;
//! - not ours otherwise: never reset — it may be a connection of another
//!   process on the same socket (the binary being upgraded, or its
//!   successor) — but passed to that process over the upgrade's [`link`],
//!   else dropped. The binary being upgraded passes first flights on too (new
//!   connections go to its successor), as does a process with no endpoint
//!   taking new connections; without a link those are dropped, and the
//!   client's retransmission finds the next reader.
//!
//! A datagram of [`MIN_RESET_INCITER`] bytes or fewer gets no stateless
//! reset, as nginx: the QUIC stack answers a packet of a connection it no
//! longer holds with a reset one byte shorter than it, and one that short
//! is told apart from a real packet (or breaks a client taking a header
//! protection sample from it). The endpoint's socket drops such resets
//! on their way out ([`Routed`]).

use super::link::{self, Link};
use bytes::Bytes;
use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, ConnectionId, ConnectionIdGenerator, UdpPoller};
use std::hash::BuildHasher;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, ready};
use tokio::sync::mpsc;

/// Length of the connection IDs the server issues.
pub const CID_LEN: usize = 8;
/// Length of a stateless reset token: the first bytes of the reset key's
/// HMAC of a connection ID.
const RESET_TOKEN_LEN: usize = 16;
/// Endpoints one address can have (the route is one byte).
const MAX_ROUTES: usize = 256;
/// Datagrams waiting for another worker's endpoint before more are dropped.
const QUEUE: usize = 1024;
/// The largest datagram answered with no stateless reset: a reset is
/// shorter than what incited it, and a short one is told apart from a real
/// packet (nginx's NGX_QUIC_MIN_SR_PACKET).
const MIN_RESET_INCITER: usize = 43;
/// Short datagrams of one batch whose reset may go out, remembered (a
/// batch holds few: most are full).
const INCITERS: usize = 32;

/// The secret of this process that tags its connection IDs.
fn secret() -> &'static std::hash::RandomState {
    static KEY: OnceLock<std::hash::RandomState> = OnceLock::new();
    KEY.get_or_init(std::hash::RandomState::new)
}

fn tag(head: &[u8]) -> [u8; 3] {
    let h = secret().hash_one(head).to_le_bytes();
    [h[0], h[1], h[2]]
}

/// The route of a connection ID this process issued.
fn ours(cid: &[u8]) -> Option<u8> {
    (cid.len() == CID_LEN && cid[5..] == tag(&cid[..5])).then_some(cid[0])
}

/// Issues connection IDs that name their endpoint's route.
pub struct Cids {
    pub route: u8,
}

impl ConnectionIdGenerator for Cids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut id = [0u8; CID_LEN];
        id[0] = self.route;
        let r = ring::rand::SystemRandom::new();
        if ring::rand::SecureRandom::fill(&r, &mut id[1..5]).is_err() {
            // No system randomness: IDs still route, only less unpredictable.
            let n = secret().hash_one(std::time::Instant::now()).to_le_bytes();
            id[1..5].copy_from_slice(&n[..4]);
        }
        let t = tag(&id[..5]);
        id[5..].copy_from_slice(&t);
        ConnectionId::new(&id)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A datagram passed from one worker's endpoint to another's, or to the
/// other binary of an upgrade.
#[derive(Debug)]
pub(super) struct Datagram {
    pub data: Bytes,
    pub addr: SocketAddr,
    pub ecn: Option<EcnCodepoint>,
    pub dst_ip: Option<IpAddr>,
}

/// The endpoints of one address in this process.
#[derive(Debug, Default)]
struct Table {
    /// By route: the way to each endpoint.
    members: Vec<Option<mpsc::Sender<Datagram>>>,
    /// Routes of the endpoints taking new connections, ascending.
    accepting: Vec<u8>,
}

/// The endpoints of one address, shared by the workers.
#[derive(Debug, Default)]
pub struct Group {
    table: arc_swap::ArcSwap<Table>,
    /// Serialises changes (readers only load `table`).
    change: Mutex<()>,
    /// The address the socket is bound to, which the other binary of an
    /// upgrade names it by.
    local: OnceLock<SocketAddr>,
}

/// The groups of this process, by listener.
static GROUPS: Mutex<Vec<(usize, Arc<Group>)>> = Mutex::new(Vec::new());

/// Place a datagram the other binary of an upgrade passed on: to the
/// endpoint of its connection, or of a new client's; never back.
pub(super) fn deliver(local: SocketAddr, d: Datagram) {
    let group = {
        let g = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .find(|(_, group)| group.local.get() == Some(&local))
            .map(|(_, group)| group.clone())
    };
    let Some(group) = group else {
        return;
    };
    let t = group.table.load();
    if let Dest::To(r) = dest(&d.data, &t, None, None)
        && let Some(tx) = &t.members[r as usize]
    {
        let _ = tx.try_send(d);
    }
}

impl Group {
    /// The group of listener `key`.
    pub fn of(key: usize) -> Arc<Group> {
        let mut g = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, group)) = g.iter().find(|(k, _)| *k == key) {
            return group.clone();
        }
        let group = Arc::new(Group::default());
        g.push((key, group.clone()));
        group
    }

    fn update(&self, f: impl FnOnce(&mut Table)) {
        let _one = self.change.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.table.load();
        let mut t = Table {
            members: old.members.clone(),
            accepting: old.accepting.clone(),
        };
        f(&mut t);
        self.table.store(Arc::new(t));
    }

    /// A route for a new endpoint; `None` when all are taken.
    fn join(&self) -> Option<(u8, mpsc::Receiver<Datagram>)> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut route = None;
        self.update(|t| {
            let free = match t.members.iter().position(Option::is_none) {
                Some(i) => i,
                None if t.members.len() < MAX_ROUTES => {
                    t.members.push(None);
                    t.members.len() - 1
                }
                None => return,
            };
            t.members[free] = Some(tx);
            route = Some(free as u8);
        });
        route.map(|r| (r, rx))
    }

    fn leave(&self, route: u8) {
        self.update(|t| {
            t.members[route as usize] = None;
            t.accepting.retain(|&r| r != route);
        });
    }

    /// The endpoint of `route` takes new connections, or no longer does.
    pub fn accepting(&self, route: u8, on: bool) {
        self.update(|t| {
            t.accepting.retain(|&r| r != route);
            if on {
                let at = t.accepting.partition_point(|&r| r < route);
                t.accepting.insert(at, route);
            }
        });
    }
}

/// Where a datagram goes.
#[derive(Debug, PartialEq, Eq)]
enum Dest {
    Here,
    To(u8),
    /// To the other binary of an upgrade.
    Link,
    Drop,
}

/// Where `packet` goes, read by the endpoint of route `me` (`None`: passed
/// over the link, which it never goes back to; `link`: this process's).
fn dest(packet: &[u8], t: &Table, me: Option<u8>, link: Option<&Link>) -> Dest {
    let Some(&first) = packet.first() else {
        return Dest::Drop;
    };
    let long = first & 0x80 != 0;
    let cid = if long {
        let Some(&n) = packet.get(5) else {
            return Dest::Drop;
        };
        packet.get(6..6 + n as usize)
    } else {
        packet.get(1..1 + CID_LEN)
    };
    let Some(cid) = cid else {
        return Dest::Drop;
    };
    let to = |r: u8| {
        if Some(r) == me {
            Dest::Here
        } else if t.members.get(r as usize).is_some_and(Option::is_some) {
            Dest::To(r)
        } else if me.is_some() {
            Dest::Here
        } else {
            Dest::Drop
        }
    };
    if let Some(r) = ours(cid) {
        return to(r);
    }
    // QUIC v1's Initial and 0-RTT packets, or any of a version to negotiate.
    let first_flight =
        long && (packet.get(1..5) != Some(&[0, 0, 0, 1][..]) || matches!((first >> 4) & 3, 0 | 1));
    if !first_flight || link.is_some_and(|l| l.old) || t.accepting.is_empty() {
        return if link.is_some() {
            Dest::Link
        } else {
            Dest::Drop
        };
    }
    let i = secret().hash_one(cid) as usize % t.accepting.len();
    to(t.accepting[i])
}

/// An endpoint's socket: the worker's descriptor for the address, with the
/// datagrams of its connections that other workers read added, and those
/// of other workers' connections passed on.
pub struct Routed {
    inner: Arc<dyn AsyncUdpSocket>,
    group: Arc<Group>,
    pub route: u8,
    rx: Mutex<mpsc::Receiver<Datagram>>,
    /// The address the socket is bound to.
    local: SocketAddr,
    /// The key of the endpoint's stateless reset tokens.
    reset_key: ring::hmac::Key,
    /// The connection IDs of the short-header datagrams of at most
    /// [`MIN_RESET_INCITER`] bytes of the last batch read here (the QUIC
    /// stack answers a batch before it reads the next): a reset going out
    /// with the token of one is dropped.
    inciters: Mutex<Vec<ConnectionId>>,
}

impl std::fmt::Debug for Routed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Routed")
            .field("route", &self.route)
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl Routed {
    /// `None` when the address has all the endpoints it can route to.
    /// `reset_key`: the endpoint's, which its stateless resets are made with.
    pub fn new(
        inner: Arc<dyn AsyncUdpSocket>,
        group: Arc<Group>,
        reset_key: ring::hmac::Key,
    ) -> io::Result<Option<Routed>> {
        let local = inner.local_addr()?;
        let _ = group.local.set(local);
        let Some((route, rx)) = group.join() else {
            return Ok(None);
        };
        Ok(Some(Routed {
            inner,
            group,
            route,
            rx: Mutex::new(rx),
            local,
            reset_key,
            inciters: Mutex::new(Vec::with_capacity(INCITERS)),
        }))
    }

    /// A short-header datagram kept here: remembered when a reset of it
    /// would be too short.
    fn incoming(&self, datagram: &[u8]) {
        if datagram.len() > MIN_RESET_INCITER || datagram.first().is_none_or(|b| b & 0x80 != 0) {
            return;
        }
        let Some(cid) = datagram.get(1..1 + CID_LEN) else {
            return;
        };
        let mut seen = self.inciters.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() < INCITERS {
            seen.push(ConnectionId::new(cid));
        }
    }

    /// Is `datagram`, going out, a stateless reset answering one of the
    /// short datagrams remembered? Such a reset is as short as they are,
    /// and its last bytes are the token of the ID they named.
    fn too_short_reset(&self, datagram: &[u8]) -> bool {
        if datagram.len() >= MIN_RESET_INCITER || datagram.first().is_none_or(|b| b & 0x80 != 0) {
            return false;
        }
        let mut seen = self.inciters.lock().unwrap_or_else(|e| e.into_inner());
        if seen.is_empty() {
            return false;
        }
        let tail = &datagram[datagram.len().saturating_sub(RESET_TOKEN_LEN)..];
        let hit = seen.iter().position(|cid| {
            let tag = ring::hmac::sign(&self.reset_key, cid);
            tag.as_ref().get(..RESET_TOKEN_LEN) == Some(tail)
        });
        match hit {
            Some(i) => {
                seen.remove(i);
                true
            }
            None => false,
        }
    }

    /// Datagrams passed on by other workers, into `bufs`.
    fn passed(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> usize {
        let mut rx = self.rx.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        while n < bufs.len().min(meta.len()) {
            let Poll::Ready(Some(d)) = rx.poll_recv(cx) else {
                break;
            };
            let len = d.data.len();
            if len > bufs[n].len() {
                continue;
            }
            self.incoming(&d.data);
            bufs[n][..len].copy_from_slice(&d.data);
            meta[n] = RecvMeta {
                addr: d.addr,
                len,
                stride: len,
                ecn: d.ecn,
                dst_ip: d.dst_ip,
            };
            n += 1;
        }
        n
    }

    /// Keep the datagrams of `got` buffers that are this endpoint's, pass on
    /// the others; the number of buffers left (moved to the front).
    fn sort(&self, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta], got: usize) -> usize {
        let t = self.group.table.load();
        let link = link::current();
        let link = link.as_deref();
        let mut kept = 0;
        for i in 0..got {
            let m = meta[i];
            let stride = m.stride.max(1);
            let buf = &mut bufs[i][..m.len];
            let mut len = 0;
            let mut at = 0;
            while at < m.len {
                let end = (at + stride).min(m.len);
                let datagram = |buf: &[u8]| Datagram {
                    data: Bytes::copy_from_slice(&buf[at..end]),
                    addr: m.addr,
                    ecn: m.ecn,
                    dst_ip: m.dst_ip,
                };
                match dest(&buf[at..end], &t, Some(self.route), link) {
                    Dest::Here => {
                        self.incoming(&buf[at..end]);
                        buf.copy_within(at..end, len);
                        len += end - at;
                    }
                    Dest::To(r) => {
                        if let Some(tx) = &t.members[r as usize] {
                            let _ = tx.try_send(datagram(buf));
                        }
                    }
                    Dest::Link => {
                        if let Some(l) = link {
                            l.pass(self.local, &datagram(buf));
                        }
                    }
                    Dest::Drop => {}
                }
                at = end;
            }
            if len == 0 {
                continue;
            }
            if kept != i {
                let (front, back) = bufs.split_at_mut(i);
                let to = &mut front[kept];
                if to.len() < len {
                    continue;
                }
                to[..len].copy_from_slice(&back[0][..len]);
            }
            meta[kept] = RecvMeta { len, ..m };
            kept += 1;
        }
        kept
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        self.group.leave(self.route);
    }
}

impl AsyncUdpSocket for Routed {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        if transmit.segment_size.is_none() && self.too_short_reset(transmit.contents) {
            return Ok(());
        }
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inciters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let n = self.passed(cx, bufs, meta);
        if n > 0 {
            return Poll::Ready(Ok(n));
        }
        loop {
            let got = ready!(self.inner.poll_recv(cx, bufs, meta))?;
            let kept = self.sort(bufs, meta, got);
            if kept > 0 {
                return Poll::Ready(Ok(kept));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(routes: usize, accepting: &[u8]) -> (Table, Vec<mpsc::Receiver<Datagram>>) {
        let mut t = Table::default();
        let mut rxs = Vec::new();
        for _ in 0..routes {
            let (tx, rx) = mpsc::channel(1);
            t.members.push(Some(tx));
            rxs.push(rx);
        }
        t.accepting = accepting.to_vec();
        (t, rxs)
    }

    fn short(cid: &ConnectionId) -> Vec<u8> {
        let mut p = vec![0x40];
        p.extend_from_slice(cid);
        p.extend_from_slice(&[0; 20]);
        p
    }

    fn long(cid: &[u8]) -> Vec<u8> {
        let mut p = vec![0xc0, 0, 0, 0, 1, cid.len() as u8];
        p.extend_from_slice(cid);
        p.extend_from_slice(&[0; 20]);
        p
    }

    #[test]
    fn issued_ids_route_to_their_endpoint() {
        let (t, _rx) = table(3, &[0, 1, 2]);
        let cid = Cids { route: 2 }.generate_cid();
        assert_eq!(cid.len(), CID_LEN);
        assert_eq!(ours(&cid), Some(2));
        assert_eq!(dest(&short(&cid), &t, Some(0), None), Dest::To(2));
        assert_eq!(dest(&short(&cid), &t, Some(2), None), Dest::Here);
        // A Handshake packet carries the server's ID too.
        assert_eq!(dest(&long(&cid), &t, Some(1), None), Dest::To(2));
        // The endpoint is gone: here, for the stateless reset.
        let (t1, _rx) = table(1, &[0]);
        assert_eq!(dest(&short(&cid), &t1, Some(0), None), Dest::Here);
    }

    #[test]
    fn a_new_clients_initial_meets_in_one_endpoint() {
        let (t, _rx) = table(4, &[0, 1, 3]);
        let cid = [7u8, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        let at: Vec<Dest> = (0..4)
            .map(|me| dest(&long(&cid), &t, Some(me), None))
            .collect();
        // Every reader sends it to the same accepting endpoint.
        let owner = (0..4u8)
            .find(|&r| at[r as usize] == Dest::Here && t.accepting.contains(&r))
            .unwrap();
        for (me, d) in at.iter().enumerate() {
            if me as u8 != owner {
                assert_eq!(*d, Dest::To(owner));
            }
        }
        // No endpoint takes new connections: dropped.
        let (none, _rx) = table(2, &[]);
        assert_eq!(dest(&long(&cid), &none, Some(0), None), Dest::Drop);
    }

    #[test]
    fn unknown_short_header_ids_are_dropped_not_reset() {
        let (t, _rx) = table(2, &[0, 1]);
        let forged = ConnectionId::new(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(ours(&forged), None);
        assert_eq!(dest(&short(&forged), &t, Some(0), None), Dest::Drop);
        assert_eq!(dest(&[], &t, Some(0), None), Dest::Drop);
        assert_eq!(dest(&[0xc0, 0, 0], &t, Some(0), None), Dest::Drop);
    }

    fn handshake(cid: &[u8]) -> Vec<u8> {
        let mut p = long(cid);
        p[0] = 0xe0;
        p
    }

    #[test]
    fn during_an_upgrade_what_is_not_ours_goes_to_the_other_binary() {
        let (t, _rx) = table(2, &[0, 1]);
        let forged = ConnectionId::new(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let client = [7u8, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        let ours = Cids { route: 1 }.generate_cid();
        let (new, old) = (Link::for_test(false), Link::for_test(true));
        for link in [&new, &old] {
            // Another process's connection, short or long header.
            assert_eq!(dest(&short(&forged), &t, Some(0), Some(link)), Dest::Link);
            assert_eq!(
                dest(&handshake(&forged), &t, Some(0), Some(link)),
                Dest::Link
            );
            // This process's stay here.
            assert_eq!(dest(&short(&ours), &t, Some(0), Some(link)), Dest::To(1));
        }
        // A new client's first flight: the successor takes it.
        assert!(matches!(
            dest(&long(&client), &t, Some(0), Some(&new)),
            Dest::To(_) | Dest::Here
        ));
        assert_eq!(dest(&long(&client), &t, Some(0), Some(&old)), Dest::Link);
        // A version to negotiate is a first flight too.
        let mut v2 = handshake(&client);
        v2[4] = 2;
        assert_eq!(dest(&v2, &t, Some(0), Some(&old)), Dest::Link);
        assert_ne!(dest(&v2, &t, Some(0), Some(&new)), Dest::Link);
        // Without a link a Handshake packet of no connection here is dropped.
        assert_eq!(dest(&handshake(&client), &t, Some(0), None), Dest::Drop);
    }

    #[test]
    fn what_the_other_binary_passes_is_placed_or_dropped_never_sent_back() {
        let (t, _rx) = table(2, &[1]);
        let ours = Cids { route: 0 }.generate_cid();
        assert_eq!(dest(&short(&ours), &t, None, None), Dest::To(0));
        let gone = Cids { route: 5 }.generate_cid();
        assert_eq!(dest(&short(&gone), &t, None, None), Dest::Drop);
        let forged = ConnectionId::new(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(dest(&short(&forged), &t, None, None), Dest::Drop);
        assert_eq!(
            dest(&long(&[7u8, 1, 2, 3, 4, 5, 6, 7]), &t, None, None),
            Dest::To(1)
        );
    }
}
