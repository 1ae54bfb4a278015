//! HTTP protocol layer: the HTTP/1 and HTTP/2 codecs and connections, the
//! pipeline both share, and the choice of protocol for a new connection.

pub mod fields;
pub mod h1;
pub mod h2;
pub mod h3;
pub mod pipeline;

use crate::core::proxy_protocol::ProxyHeader;
use crate::core::request::Peer;
use crate::server::Shared;
use crate::server::socket::Stream;
use crate::server::worker::Slot;
use std::io::{self, ErrorKind};
use std::sync::Arc;
use tokio::io::Interest;

/// Serve an accepted connection on its own task. A cleartext listener with
/// `http2` serves HTTP/2 to clients that open with its preface (prior
/// knowledge) and HTTP/1 to the others; any other listener goes straight to
/// HTTP/1, without looking at the first bytes.
pub fn serve_connection<S: Stream>(
    s: S,
    peer: Peer,
    proxy: Option<Arc<ProxyHeader>>,
    listener: usize,
    id: u64,
    shared: Arc<Shared>,
    slot: Slot,
) {
    let sniff = {
        let cfg = shared.config.load();
        let l = cfg.listener(listener);
        l.http2 && !l.ssl
    };
    if !sniff {
        slot.spawn(|slot| h1::conn::serve(s, peer, proxy, listener, id, shared, slot));
        return;
    }
    slot.spawn_apart(move |slot| async move {
        let (timeout, nodelay) = {
            let cfg = shared.config.load();
            let core = &cfg.listener(listener).vhosts.default.conf.core;
            (core.client_header_timeout, core.tcp_nodelay)
        };
        match tokio::time::timeout(timeout, preface(&s)).await {
            Ok(Ok(true)) => {
                if nodelay {
                    s.set_nodelay();
                }
                let info = h2::ConnInfo {
                    peer,
                    listener,
                    id,
                    shared,
                    fd: std::os::fd::AsRawFd::as_raw_fd(&s),
                    tls: None,
                    proxy,
                    born_ms: crate::core::clock::unix_millis(),
                };
                h2::serve(s, info, slot).await;
            }
            // Not HTTP/2, or closed: HTTP/1 reads (and answers) what came.
            Ok(_) => h1::conn::serve(s, peer, proxy, listener, id, shared, slot).await,
            // Nothing in client_header_timeout: close.
            Err(_) => {}
        }
    });
}

/// Does the client open with the HTTP/2 preface? Peeks, so HTTP/1 still reads
/// every byte; false as soon as what came differs from it.
async fn preface<S: Stream>(s: &S) -> io::Result<bool> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    let mut buf = [0u8; 24];
    loop {
        s.readable().await?;
        let peeked = s.try_io(Interest::READABLE, || {
            let n = crate::sys::peek(fd, &mut buf)?;
            if n > 0 && n < buf.len() && buf[..n] == h2::PREFACE[..n] {
                // A part of it: wait for the rest (this clears the readiness).
                return Err(ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match peeked {
            Ok(n) => return Ok(n == buf.len() && buf == *h2::PREFACE),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

/// A response write that waited past `send_timeout` (HTTP/1, /2 and /3).
pub(crate) fn send_timed_out() -> io::Error {
    io::Error::new(ErrorKind::TimedOut, "send_timeout")
}
