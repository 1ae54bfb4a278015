//! UDP listeners of stream servers: a worker reads the datagrams of its
//! socket and hands each to the session of its client address, starting one
//! for an address it has none for. A session's answers go out of the
//! listening socket to the client's address.

use super::session::{Accepted, Carried, Client, run};
use crate::conf::load::Config;
use crate::core::request::Peer;
use crate::server::worker::Slot;
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

/// The sessions of one socket, by client address: where their datagrams go.
type Sessions = Rc<RefCell<HashMap<SocketAddr, (u64, mpsc::UnboundedSender<Bytes>)>>>;

/// A UDP client's side of its session: the datagrams it sends, and the
/// listening socket its answers leave from.
pub struct Datagrams {
    sock: Rc<UdpSocket>,
    peer: SocketAddr,
    rx: mpsc::UnboundedReceiver<Bytes>,
    sessions: Sessions,
    id: u64,
}

impl Datagrams {
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// The client's next datagram; `None` once the session no longer takes
    /// any ([`Datagrams::detach`]) and those queued are read.
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await
    }

    /// Send one datagram to the client.
    pub async fn send(&self, b: &[u8]) -> io::Result<usize> {
        self.sock.send_to(b, self.peer).await
    }

    /// The session takes no more datagrams: the client's next one starts
    /// a new session (`proxy_requests`).
    pub fn detach(&mut self) {
        let mut all = self.sessions.borrow_mut();
        if all.get(&self.peer).is_some_and(|(id, _)| *id == self.id) {
            all.remove(&self.peer);
        }
        drop(all);
        self.rx.close();
    }
}

impl Drop for Datagrams {
    fn drop(&mut self) {
        self.detach();
    }
}

/// What a new session needs from its worker: the configuration live now,
/// a connection number and a worker_connections slot (`None`: none free).
pub type Open<'a> = &'a dyn Fn() -> Option<(Arc<Config>, u64, Slot)>;

/// The largest datagram read.
const MAX_DATAGRAM: usize = 65535;

/// Read the datagrams of `sock` (stream listener `key`) for ever, each to
/// its client's session.
pub async fn serve(sock: std::net::UdpSocket, key: usize, open: Open<'_>) -> io::Result<()> {
    let sock = Rc::new(UdpSocket::from_std(sock)?);
    let sessions: Sessions = Rc::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut next_id = 0u64;
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(v) => v,
            Err(e) => {
                crate::error_log!(
                    Error,
                    "recvmsg() failed ({})",
                    crate::core::errlog::errno_text(&e)
                );
                continue;
            }
        };
        let d = Bytes::copy_from_slice(&buf[..n]);
        if let Some((_, tx)) = sessions.borrow().get(&from)
            && tx.send(d.clone()).is_ok()
        {
            continue;
        }
        let Some((cfg, id, slot)) = open() else {
            continue;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(d);
        next_id += 1;
        sessions.borrow_mut().insert(from, (next_id, tx));
        let client = Client::Udp(Datagrams {
            sock: sock.clone(),
            peer: from,
            rx,
            sessions: sessions.clone(),
            id: next_id,
        });
        let a = Accepted {
            client,
            peer: Peer::Tcp(from),
            key,
            id,
            carried: Carried::default(),
        };
        slot.spawn(move |slot| run(a, cfg, slot));
    }
}
