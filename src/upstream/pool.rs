//! Connections to upstream peers: connecting (TCP or unix socket, and TLS
//! over TCP, within a connect timeout) and per-worker pools of idle
//! keep-alive connections keyed by peer address (and, for TLS, by the
//! configuration and name they were made with: a pooled TLS connection
//! keeps its session).
//!
//! An idle connection is checked when it is taken: one that is readable (the
//! peer closed it, or sent bytes out of turn) is dropped, as is one idle for
//! longer than keepalive_timeout. The check costs no syscall when the
//! connection's read readiness is clear: `try_read_buf` clears it after a
//! short read (the socket is drained then, and anything arriving later raises
//! a new epoll event), so a connection released after its reply was read whole
//! shows readiness only if the peer spoke or closed since; only then is it
//! probed with a read (a TLS connection keeps its readiness, since rustls
//! reads the socket in records: it is probed when it is taken). Pools live in a thread-local of each
//! worker: tokio registrations belong to one runtime, and handing sockets
//! between workers would cost a lock and a re-registration per request.

use super::PeerAddr;
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

#[derive(Debug)]
enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<super::tls::TlsConn>),
}

/// A connection to an upstream peer.
#[derive(Debug)]
pub struct UpConn {
    sock: Sock,
    /// Requests sent on it so far (keepalive_requests; kept small, as the
    /// times below, for a connection moves often).
    uses: u32,
    /// When it was last taken from its pool, in µs after `born` (0: a new
    /// connection).
    taken_us: u32,
    /// How long its exchange waited for the reply's head since its take, in
    /// µs (0: not known); the peer's pooled figure when it comes back (see
    /// [`put`]).
    answered_us: Cell<u32>,
    /// When it was opened (keepalive_time).
    born: Instant,
    /// Bytes read from it and written to it by `try_read*`, `try_write*`
    /// and `write_now` (`$upstream_bytes_received`, `$upstream_bytes_sent`).
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    /// Its place in the worker's worker_connections.
    _slot: Option<crate::server::worker::Slot>,
    /// The attempt it carries, counted toward the peer's max_conns until
    /// the connection is pooled or closed. Boxed: only some protocols hold
    /// one, and every move of a connection copies what it holds in place.
    hold: Option<Box<super::queue::Hold>>,
    /// Nagle's algorithm, see [`UpConn::before_write`].
    nagle: Cell<Nagle>,
    /// Delayed acknowledgements, see [`UpConn::before_wait`].
    acks: Cell<Acks>,
    /// A new connection of a keep-alive pool until it reads its first reply
    /// byte: counted among its peer's unanswered ones (see [`put`]).
    unanswered: std::cell::RefCell<Option<std::rc::Rc<()>>>,
    /// The pool key's TLS part ([`super::tls::Dial::tag`]; 0: plain).
    tls_tag: u64,
}

/// Nagle's algorithm holds a small segment back only while earlier bytes are
/// unacknowledged. The first write of an exchange never waits: whatever the
/// connection sent before was acknowledged by the reply read since. So a
/// connection gets TCP_NODELAY (a syscall) only when it writes twice without
/// a read in between (a streamed body, a tunnel), not on every connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nagle {
    /// Nothing written since the last read.
    Clear,
    /// Written since the last read: the next write may wait for an ACK.
    Unacked,
    /// TCP_NODELAY is set (or the socket has no Nagle: unix).
    Off,
}

/// Linux delays the ACK of what a connection receives while it is in
/// "ping-pong" mode, which a connection enters by sending soon after it
/// received, as a pooled upstream connection does with each request. A peer
/// that leaves Nagle's algorithm on (php-fpm does) holds the rest of its reply
/// back after a small segment until that ACK comes: up to 40 ms per reply.
/// So a reader that has read part of a reply and must wait for more first
/// sets TCP_QUICKACK, which sends the pending ACK at once and leaves
/// ping-pong mode until the next write. A reply read without waiting costs
/// no syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Acks {
    /// A tunnel (stream proxying, an upgraded connection): bytes pass both
    /// ways with no replies to complete, and the kernel's ACKs are left as
    /// they are.
    Tunnel,
    /// Nothing read since the last write.
    Awaited,
    /// Part of a reply read since the last write.
    Partial,
    /// TCP_QUICKACK set since the last write (or no need: a unix socket).
    Quick,
}

impl UpConn {
    /// Called before waiting for the connection to become readable: see
    /// [`Acks`].
    fn before_wait(&self) {
        if self.acks.get() != Acks::Partial {
            return;
        }
        self.acks.set(Acks::Quick);
        // On failure the socket is failing: its read says so.
        let _ = match &self.sock {
            Sock::Tcp(s) => socket2::SockRef::from(s).set_tcp_quickack(true),
            Sock::Tls(t) => socket2::SockRef::from(&t.tcp).set_tcp_quickack(true),
            Sock::Unix(_) => Ok(()),
        };
    }
    /// Called before each write: set TCP_NODELAY when bytes written since the
    /// last read may still be unacknowledged, then note that bytes go out.
    fn before_write(&self) {
        if self.acks.get() != Acks::Tunnel {
            self.acks.set(Acks::Awaited);
        }
        match self.nagle.get() {
            Nagle::Off => {}
            Nagle::Clear => self.nagle.set(Nagle::Unacked),
            Nagle::Unacked => {
                // On failure the socket is failing: its write says so.
                match &self.sock {
                    Sock::Tcp(s) => drop(s.set_nodelay(true)),
                    Sock::Tls(t) => drop(t.tcp.set_nodelay(true)),
                    Sock::Unix(_) => {}
                }
                self.nagle.set(Nagle::Off);
            }
        }
    }
    /// Bytes read from the connection so far.
    pub fn bytes_in(&self) -> u64 {
        self.bytes_in.get()
    }
    /// Bytes written to the connection so far.
    pub fn bytes_out(&self) -> u64 {
        self.bytes_out.get()
    }
    fn wrote(&self, r: io::Result<usize>) -> io::Result<usize> {
        if let Ok(n) = r {
            self.bytes_out.set(self.bytes_out.get() + n as u64);
        }
        r
    }
    /// Called after a read that returned bytes: what was sent is acknowledged.
    fn after_read(&self) {
        self.unanswered.take();
        if self.acks.get() == Acks::Awaited {
            self.acks.set(Acks::Partial);
        }
        if self.nagle.get() == Nagle::Unacked {
            self.nagle.set(Nagle::Clear);
        }
    }
    /// Requests this connection has carried (counting the current one).
    pub fn uses(&self) -> u64 {
        self.uses.into()
    }
    /// Count the attempt toward its peer's max_conns until this connection
    /// goes back to the pool or is closed (see [`super::queue::Hold`]).
    pub fn hold(&mut self, h: super::queue::Hold) {
        self.hold = Some(Box::new(h));
    }
    /// Time from its opening to `now`.
    pub fn age_at(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.born)
    }
    /// Taken from the keep-alive pool rather than newly connected.
    /// A plain socket (TCP or unix), not TLS.
    pub fn is_plain(&self) -> bool {
        !matches!(self.sock, Sock::Tls(_))
    }

    pub fn reused(&self) -> bool {
        self.taken_us != 0
    }
    /// It was taken from its pool at `now`.
    fn taken_at(&mut self, now: Instant) {
        let us = now.saturating_duration_since(self.born).as_micros();
        self.taken_us = u32::try_from(us).unwrap_or(u32::MAX).max(1);
    }
    /// Its exchange's reply head came `at`: timed from its take, when it
    /// came from the pool (and not too long after it was opened to tell).
    pub fn answered(&self, at: Instant) {
        if self.taken_us == 0 || self.taken_us == u32::MAX {
            return;
        }
        let taken = self.born + Duration::from_micros(self.taken_us.into());
        let took = at.saturating_duration_since(taken).as_micros();
        self.answered_us
            .set(u32::try_from(took).unwrap_or(u32::MAX).max(1));
    }
    /// Read what is there without waiting (`WouldBlock` when nothing is).
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match &self.sock {
            Sock::Tcp(s) => s.try_read(buf),
            Sock::Unix(s) => s.try_read(buf),
            Sock::Tls(s) => s.try_read(buf),
        }?;
        if n > 0 {
            self.after_read();
            self.bytes_in.set(self.bytes_in.get() + n as u64);
        }
        Ok(n)
    }
    /// Read into `buf`'s spare capacity without waiting. After a short read
    /// the read readiness is cleared without a syscall: the socket is drained,
    /// so the next read waits for epoll instead of returning EAGAIN.
    pub fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        let spare = buf.capacity() - buf.len();
        let n = match &self.sock {
            Sock::Tcp(s) => s.try_read_buf(buf),
            Sock::Unix(s) => s.try_read_buf(buf),
            Sock::Tls(s) => s.try_read_buf(buf),
        }?;
        if n > 0 {
            self.after_read();
            self.bytes_in.set(self.bytes_in.get() + n as u64);
        }
        if n > 0 && n < spare {
            // Sound only here, with no await since the read: bytes arriving
            // later raise a new epoll event.
            let drained = || Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock));
            // Not for TLS: rustls reads the socket a record at a time, so a
            // short read of plaintext says nothing of the socket.
            let _ = match &self.sock {
                Sock::Tcp(s) => s.try_io(Interest::READABLE, drained),
                Sock::Unix(s) => s.try_io(Interest::READABLE, drained),
                Sock::Tls(_) => Ok(()),
            };
        }
        Ok(n)
    }
    /// Whether tokio has seen the socket readable (or closed) since its read
    /// readiness was last cleared; no syscall.
    fn maybe_readable(&self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match &self.sock {
            Sock::Tcp(s) => s.poll_read_ready(&mut cx).is_ready(),
            Sock::Unix(s) => s.poll_read_ready(&mut cx).is_ready(),
            Sock::Tls(s) => s.poll_read_ready(&mut cx).is_ready(),
        }
    }
    /// Ready when a read may find bytes (for TLS: once the records a write
    /// left queued are sent); otherwise the task is woken when one may. The
    /// task waits as the socket's one reader, in the slot tokio keeps for it:
    /// no waiter to add to the socket's list and take off it again, as a
    /// `readable()` future does.
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.before_wait();
        match &self.sock {
            Sock::Tcp(s) => s.poll_read_ready(cx),
            Sock::Unix(s) => s.poll_read_ready(cx),
            Sock::Tls(s) => s.poll_readable(cx),
        }
    }
    /// Wait until a read may find bytes ([`UpConn::poll_readable`]).
    pub async fn readable(&self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_readable(cx)).await
    }
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        self.before_write();
        self.wrote(match &self.sock {
            Sock::Tcp(s) => s.try_write(buf),
            Sock::Unix(s) => s.try_write(buf),
            Sock::Tls(s) => s.try_write_vectored(&[io::IoSlice::new(buf)]),
        })
    }
    pub fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.before_write();
        self.wrote(match &self.sock {
            Sock::Tcp(s) => s.try_write_vectored(bufs),
            Sock::Unix(s) => s.try_write_vectored(bufs),
            Sock::Tls(s) => s.try_write_vectored(bufs),
        })
    }
    pub async fn writable(&self) -> io::Result<()> {
        match &self.sock {
            Sock::Tcp(s) => s.writable().await,
            Sock::Unix(s) => s.writable().await,
            Sock::Tls(s) => s.tcp.writable().await,
        }
    }
    /// Wake readers of this TCP connection only once `bytes` are queued (or
    /// at its end): see `sys::set_recv_lowat`. Unix sockets read as readable
    /// with any byte queued whatever the setting, and a TLS connection's
    /// bytes are records, not what its reader waits for: `Unsupported` for
    /// them.
    pub fn set_recv_lowat(&self, bytes: usize) -> io::Result<()> {
        match &self.sock {
            Sock::Tcp(s) => crate::sys::set_recv_lowat(s, bytes),
            Sock::Unix(_) | Sock::Tls(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }
    /// Turn on TCP keep-alive probes (`*_socket_keepalive`); nothing for a
    /// unix socket.
    pub fn set_keepalive(&self) -> io::Result<()> {
        let tcp = match &self.sock {
            Sock::Tcp(s) => s,
            Sock::Tls(s) => &s.tcp,
            Sock::Unix(_) => return Ok(()),
        };
        socket2::SockRef::from(tcp).set_keepalive(true)
    }
    /// Write what the socket takes now with one send(), whatever tokio's
    /// write readiness says: a new connection has none until epoll reports
    /// it, so a first request sent this way saves a turn through epoll. 0
    /// when nothing could be written; an error is left for the next write to
    /// find.
    pub fn write_now(&self, buf: &[u8]) -> usize {
        self.before_write();
        let n = match &self.sock {
            Sock::Tls(s) => s.try_write_vectored(&[io::IoSlice::new(buf)]).unwrap_or(0),
            _ => crate::sys::send(self.fd(), buf, false).unwrap_or(0),
        };
        self.bytes_out.set(self.bytes_out.get() + n as u64);
        n
    }
    /// Whether bytes (or the end of stream) are queued, whatever tokio's
    /// readiness and a low-water mark say: a one-byte peek.
    pub fn queued(&self) -> bool {
        match &self.sock {
            Sock::Tls(s) => s.queued(),
            _ => crate::sys::peek(self.fd(), &mut [0u8; 1]).is_ok(),
        }
    }
    /// How many bytes are queued to be read; `None` for a TLS connection
    /// (its records are not what its reader gets).
    pub fn queued_len(&self) -> Option<usize> {
        match &self.sock {
            Sock::Tls(_) => None,
            _ => crate::sys::queued_bytes(self.fd()).ok(),
        }
    }
    fn fd(&self) -> std::os::fd::RawFd {
        match &self.sock {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
            Sock::Tls(s) => s.tcp.as_raw_fd(),
        }
    }
    /// TLS over this plain TCP connection, after what was sent in the
    /// clear (the stream proxy's PROXY header): the handshake with `dial`'s
    /// client and name. The caller bounds its time.
    pub async fn start_tls(self, dial: &super::tls::Dial) -> io::Result<UpConn> {
        let UpConn {
            sock,
            uses,
            taken_us,
            answered_us,
            born,
            bytes_in,
            bytes_out,
            _slot,
            hold,
            nagle: _,
            acks,
            unanswered,
            tls_tag: _,
        } = self;
        let Sock::Tcp(tcp) = sock else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "TLS over a unix socket is not supported",
            ));
        };
        // The client's last flight and the first bytes after it leave
        // without waiting for an ACK (as `open`'s).
        tcp.set_nodelay(true)?;
        let conn = super::tls::handshake(tcp, dial).await?;
        Ok(UpConn {
            sock: Sock::Tls(Box::new(conn)),
            uses,
            taken_us,
            answered_us,
            born,
            bytes_in,
            bytes_out,
            _slot,
            hold,
            nagle: Cell::new(Nagle::Off),
            acks,
            unanswered,
            tls_tag: dial.tag,
        })
    }

    /// From now on a tunnel: no reply is waited for, so no TCP_QUICKACK
    /// after part of one (see [`Acks`]).
    pub fn tunnel(&self) {
        self.acks.set(Acks::Tunnel);
    }

    /// TCP_NODELAY on now (a tunnel's both ways, `tcp_nodelay on`).
    pub fn set_nodelay(&self) -> io::Result<()> {
        self.nagle.set(Nagle::Off);
        match &self.sock {
            Sock::Tcp(s) => s.set_nodelay(true),
            Sock::Tls(t) => t.tcp.set_nodelay(true),
            Sock::Unix(_) => Ok(()),
        }
    }

    /// Shut down the write side (a tunnel whose client stopped sending).
    pub fn shutdown_write(&self) {
        let r = match &self.sock {
            Sock::Tcp(s) => socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write),
            Sock::Unix(s) => socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write),
            Sock::Tls(s) => {
                s.shutdown_write();
                Ok(())
            }
        };
        let _ = r;
    }
}

impl AsyncRead for UpConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = match &mut this.sock {
            Sock::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Sock::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Sock::Tls(s) => loop {
                match s.try_read(buf.initialize_unfilled()) {
                    Ok(n) => {
                        buf.advance(n);
                        break Poll::Ready(Ok(()));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if let Err(e) = std::task::ready!(s.poll_read_ready(cx)) {
                            break Poll::Ready(Err(e));
                        }
                    }
                    Err(e) => break Poll::Ready(Err(e)),
                }
            },
        };
        if buf.filled().len() > before {
            this.after_read();
        }
        if r.is_pending() {
            this.before_wait();
        }
        r
    }
}

impl AsyncWrite for UpConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.before_write();
        match &mut self.get_mut().sock {
            Sock::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Sock::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Sock::Tls(s) => loop {
                match s.try_write_vectored(&[io::IoSlice::new(buf)]) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::task::ready!(s.tcp.poll_write_ready(cx))?;
                    }
                    r => break Poll::Ready(r),
                }
            },
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().sock {
            Sock::Tcp(s) => Pin::new(s).poll_flush(cx),
            Sock::Unix(s) => Pin::new(s).poll_flush(cx),
            Sock::Tls(s) => loop {
                match s.try_flush() {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::task::ready!(s.tcp.poll_write_ready(cx))?;
                    }
                    r => break Poll::Ready(r),
                }
            },
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().sock {
            Sock::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Sock::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Sock::Tls(s) => {
                s.shutdown_write();
                Poll::Ready(Ok(()))
            }
        }
    }
}

/// A new connection within `timeout` (which includes waiting for a
/// worker_connections slot when all are taken), from the local address
/// `local` (`proxy_bind`; port 0 lets the kernel choose one) when given, with
/// TLS over it when `tls` is given (the handshake within the same timeout, as
/// nginx's connect timeout covers it; a unix socket with TLS is refused).
///
/// Boxed: connecting (with a TLS handshake) holds 1.6 KB of state, which
/// would otherwise be part of every request's future, and be moved with it,
/// also when a pooled connection is taken.
pub fn connect_from<'a>(
    addr: &'a PeerAddr,
    local: Option<Bind>,
    tls: Option<&'a super::tls::Dial>,
    timeout: Duration,
) -> crate::core::request::BoxFuture<'a, io::Result<UpConn>> {
    Box::pin(open(addr, local, tls, timeout))
}

async fn open(
    addr: &PeerAddr,
    local: Option<Bind>,
    tls: Option<&super::tls::Dial>,
    timeout: Duration,
) -> io::Result<UpConn> {
    // Waiting for a worker_connections slot counts in the connect timeout.
    let deadline = Instant::now() + timeout;
    let slot = crate::server::worker::upstream_slot(deadline).await?;
    let fut = async {
        Ok::<_, io::Error>(match (addr, tls) {
            (PeerAddr::Tcp(a), None) => (Sock::Tcp(connect_tcp(*a, local).await?), Nagle::Clear),
            (PeerAddr::Tcp(a), Some(d)) => {
                let tcp = connect_tcp(*a, local).await?;
                // The client's last flight (Finished) is followed by the
                // request without a read between: with Nagle's algorithm the
                // request would wait for the peer's delayed ACK of it (40 ms).
                tcp.set_nodelay(true)?;
                let conn = super::tls::handshake(tcp, d).await?;
                (Sock::Tls(Box::new(conn)), Nagle::Off)
            }
            (PeerAddr::Unix(p), None) => (Sock::Unix(UnixStream::connect(p).await?), Nagle::Off),
            (PeerAddr::Unix(_), Some(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "TLS over a unix socket is not supported",
                ));
            }
        })
    };
    let (sock, nagle) = tokio::time::timeout_at(deadline.into(), fut)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "upstream timed out"))??;
    Ok(UpConn {
        sock,
        uses: 1,
        taken_us: 0,
        answered_us: Cell::new(0),
        born: Instant::now(),
        bytes_in: Cell::new(0),
        bytes_out: Cell::new(0),
        _slot: slot,
        hold: None,
        nagle: Cell::new(nagle),
        acks: Cell::new(Acks::Awaited),
        unanswered: std::cell::RefCell::new(None),
        tls_tag: tls.map_or(0, |d| d.tag),
    })
}

/// A TCP connection. Over loopback the handshake is done by the time a
/// non-blocking connect() returns EINPROGRESS: a second connect() says so
/// (EISCONN), or gives the error, without a turn through epoll and a
/// getsockopt(SO_ERROR); only a handshake still under way (EALREADY) is waited
/// for.
/// The local end of a connection to an upstream (`proxy_bind`).
#[derive(Clone, Copy, Debug)]
pub struct Bind {
    pub addr: std::net::SocketAddr,
    /// `transparent`: the address need not be the host's (IP_TRANSPARENT).
    pub transparent: bool,
}

async fn connect_tcp(addr: std::net::SocketAddr, local: Option<Bind>) -> io::Result<TcpStream> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let sock = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    if let Some(Bind {
        addr: l,
        transparent,
    }) = local
    {
        if transparent {
            crate::sys::set_transparent(&sock, l.is_ipv6())?;
        }
        if l.port() == 0 {
            // The port is chosen at connect(), with the peer known, so that
            // binds to one address do not exhaust its ports.
            crate::sys::set_bind_address_no_port(&sock);
        }
        sock.bind(&SockAddr::from(l))?;
    }
    let to = SockAddr::from(addr);
    let pending = match sock.connect(&to) {
        Ok(()) => false,
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => match sock.connect(&to) {
            Ok(()) => false,
            Err(e) => match e.raw_os_error() {
                Some(libc::EISCONN) => false,
                Some(libc::EALREADY | libc::EINPROGRESS) => true,
                _ => return Err(e),
            },
        },
        Err(e) => return Err(e),
    };
    let s = TcpStream::from_std(sock.into())?;
    if pending {
        s.writable().await?;
        if let Some(e) = s.take_error()? {
            return Err(e);
        }
    }
    Ok(s)
}

/// One upstream's pools by peer and TLS tag (0: plain).
type PeerPools = FxHashMap<(PeerAddr, u64), Peer>;

/// A peer's pool: its idle connections, its new connections that have not
/// read a byte of their first reply yet (with when they were made), and
/// what tells whether the peer is full (see [`put`] and [`released`]).
#[derive(Default)]
struct Peer {
    idle: VecDeque<Idle>,
    unanswered: Vec<(std::rc::Weak<()>, Instant)>,
    /// How long an exchange on a pooled connection waits for its reply's
    /// head (a moving average).
    served: Option<Duration>,
    /// When a new connection last waited for its first reply byte well past
    /// what pooled ones take: the peer had every worker busy.
    full_at: Option<Instant>,
    /// When a connection last came back.
    released_at: Option<Instant>,
    /// Requests waiting for a connection to come back, oldest first.
    waiters: VecDeque<tokio::sync::oneshot::Sender<UpConn>>,
}

impl Peer {
    /// How long a new connection may wait for its first reply byte before
    /// the peer is taken to be full: [`STARVED`], or twice what a pooled
    /// exchange takes when that is longer (an application that is slow, not
    /// full, answers its new connections as late as its pooled ones).
    fn starved(&self) -> Duration {
        self.served.map_or(STARVED, |s| (s * 2).max(STARVED))
    }
}

/// How long a new connection may wait for its first reply byte before the
/// pool makes room for it (see [`put`]).
const STARVED: Duration = Duration::from_millis(10);

/// How long a peer found full is taken to stay full: meanwhile a request
/// that finds no idle connection waits for one to come back rather than
/// open one (see [`released`]); after it, the next ones open connections
/// again, which finds out whether the peer has room now.
const FULL_FOR: Duration = Duration::from_secs(1);

struct Idle {
    conn: UpConn,
    since: Instant,
}

thread_local! {
    /// Idle connections by upstream name, then peer: blocks with a peer in
    /// common keep theirs apart (each its own keepalive limits), as nginx.
    static POOL: RefCell<FxHashMap<Box<str>, PeerPools>> =
        RefCell::new(FxHashMap::default());
}

/// An idle connection to `addr` that is still good, newest first; made
/// with the same TLS configuration and name when `tls_tag` is not 0.
pub fn take(group: &str, addr: &PeerAddr, tls_tag: u64, timeout: Duration) -> Option<UpConn> {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let q = &mut p.get_mut(group)?.get_mut(&(addr.clone(), tls_tag))?.idle;
        let now = Instant::now();
        while let Some(mut idle) = q.pop_back() {
            if now.duration_since(idle.since) >= timeout {
                // Older ones (at the front) are older still.
                q.clear();
                return None;
            }
            let mut probe = [0u8; 1];
            let quiet = !idle.conn.maybe_readable()
                || matches!(idle.conn.try_read(&mut probe),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock);
            if quiet {
                idle.conn.uses = idle.conn.uses.saturating_add(1);
                idle.conn.taken_at(now);
                return Some(idle.conn);
            }
            // Closed, failed, or talking out of turn: drop it.
        }
        None
    })
}

/// Peers taken out of their group at run time (a resolved address gone),
/// with a sequence number, for the workers to drop their idle connections
/// to them ([`sweep`]); entries older than [`GONE_KEPT`] are let go.
static GONE: std::sync::Mutex<VecDeque<Gone>> = std::sync::Mutex::new(VecDeque::new());

/// An entry of [`GONE`]: its number, when, the group and the peer.
type Gone = (u64, Instant, Box<str>, PeerAddr);
static GONE_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
const GONE_KEPT: Duration = Duration::from_secs(60);

thread_local! {
    /// The last entry of [`GONE`] this worker has swept.
    static SWEPT: Cell<u64> = const { Cell::new(0) };
}

/// `addr` left `group`: every worker closes its idle connections to it at
/// its next sweep.
pub fn forget(group: &str, addr: &PeerAddr) {
    let mut gone = GONE.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    while gone
        .front()
        .is_some_and(|(_, at, ..)| now.duration_since(*at) > GONE_KEPT)
    {
        gone.pop_front();
    }
    let seq = GONE_SEQ.load(std::sync::atomic::Ordering::Relaxed) + 1;
    gone.push_back((seq, now, group.into(), addr.clone()));
    GONE_SEQ.store(seq, std::sync::atomic::Ordering::Release);
}

/// Close this worker's idle connections to peers that left their group
/// since its last sweep (each second, the upstream module's tick).
pub fn sweep() {
    let seq = GONE_SEQ.load(std::sync::atomic::Ordering::Acquire);
    if SWEPT.with(Cell::get) == seq {
        return;
    }
    let since = SWEPT.with(|s| s.replace(seq));
    let gone: Vec<(Box<str>, PeerAddr)> = GONE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(n, ..)| *n > since)
        .map(|(_, _, g, a)| (g.clone(), a.clone()))
        .collect();
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        for (group, addr) in gone {
            if let Some(g) = p.get_mut(&group) {
                g.retain(|(a, _), _| *a != addr);
            }
        }
    });
}

/// Count `conn`, new to `addr` while its pool had none idle, among the
/// peer's unanswered connections until it reads its first reply byte.
pub fn unanswered(group: &str, addr: &PeerAddr, conn: &UpConn) {
    let mark = std::rc::Rc::new(());
    let weak = std::rc::Rc::downgrade(&mark);
    conn.unanswered.replace(Some(mark));
    with_peer(group, addr, conn.tls_tag, |peer| {
        peer.unanswered.retain(|(w, _)| w.strong_count() > 0);
        peer.unanswered.push((weak, Instant::now()));
    });
}

/// `f` on the pool of `addr` with TLS tag `tls_tag` in `group`, made if new.
fn with_peer<R>(group: &str, addr: &PeerAddr, tls_tag: u64, f: impl FnOnce(&mut Peer) -> R) -> R {
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        let peer = match p.get_mut(group) {
            Some(g) => g,
            None => p.entry(group.into()).or_default(),
        }
        .entry((addr.clone(), tls_tag))
        .or_default();
        f(peer)
    })
}

/// `conn` came back to `addr` at `now`: closed, when a new connection to
/// the peer has waited `STARVED` for its first reply byte; else handed to
/// the oldest request waiting for one ([`released`]); else kept idle, at
/// most `max` per peer (the oldest goes).
///
/// An application that serves one connection at a time per worker (php-fpm,
/// a prefork Apache) leaves a new connection in its listen queue until one
/// of its workers' connections closes, while pooled ones hold every worker
/// and keep cycling: without the first rule its request would wait for as
/// long as the others keep coming. Closing a pooled connection frees a
/// worker, which takes the oldest connection of its listen queue; the
/// oldest starved one here waits another `STARVED` before it closes another
/// (the queue's oldest may have been another's). A new
/// connection that waits much longer than pooled exchanges take also says
/// that the peer is full: for [`FULL_FOR`] requests that find no idle
/// connection wait for one to come back instead of opening one more for
/// the listen queue, so the pool keeps as many connections as the peer has
/// workers, and they are reused.
pub fn put(group: &str, addr: &PeerAddr, mut conn: UpConn, max: usize, now: Instant) {
    // An idle connection does not count toward max_conns.
    conn.hold = None;
    with_peer(group, addr, conn.tls_tag, |peer| {
        let answered = conn.answered_us.replace(0);
        if answered > 0 {
            let took = Duration::from_micros(answered.into());
            peer.served = Some(peer.served.map_or(took, |s| (s * 7 + took) / 8));
        }
        peer.released_at = Some(now);
        if !peer.unanswered.is_empty() {
            peer.unanswered.retain(|(w, _)| w.strong_count() > 0);
            let starved = peer.starved();
            let known = peer.served.is_some();
            let oldest = peer.unanswered.iter_mut().map(|(_, since)| since).min();
            if let Some(since) = oldest
                && now.saturating_duration_since(*since) >= STARVED
            {
                if known && now.saturating_duration_since(*since) >= starved {
                    peer.full_at = Some(now);
                }
                // Room made for the oldest; the peer takes the oldest of its
                // queue, which may be another process's: counted again if it
                // still waits `STARVED` from now.
                *since = now;
                return;
            }
        }
        while let Some(w) = peer.waiters.pop_front() {
            conn.uses = conn.uses.saturating_add(1);
            conn.taken_at(now);
            match w.send(conn) {
                Ok(()) => return,
                // Its request is gone.
                Err(back) => {
                    conn = back;
                    conn.uses -= 1;
                }
            }
        }
        let q = &mut peer.idle;
        while q.len() >= max {
            q.pop_front();
        }
        q.push_back(Idle { conn, since: now });
    });
}

/// A connection to `addr` handed back by another request ([`put`]), when
/// the peer was found full less than [`FULL_FOR`] ago; `None` at once when
/// it was not, after `limit` (the connect timeout), or once none came back
/// for [`Peer::starved`] (the peer's exchanges stalled: a connection of its
/// own may find a free worker).
pub async fn released(
    group: &str,
    addr: &PeerAddr,
    tls_tag: u64,
    limit: Duration,
) -> Option<UpConn> {
    let now = crate::core::clock::now();
    let (mut rx, patience) = with_peer(group, addr, tls_tag, |peer| {
        let full_at = peer.full_at?;
        if now.saturating_duration_since(full_at) >= FULL_FOR {
            peer.full_at = None;
            return None;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        peer.waiters.push_back(tx);
        Some((rx, peer.starved()))
    })?;
    let deadline = now + limit;
    loop {
        let next = (crate::core::clock::now() + patience).min(deadline);
        match tokio::time::timeout_at(next.into(), &mut rx).await {
            Ok(conn) => return conn.ok(),
            Err(_) => {
                // None for a while: wait on only while others got theirs.
                let now = crate::core::clock::now();
                if now >= deadline {
                    return None;
                }
                let flowing = with_peer(group, addr, tls_tag, |peer| {
                    peer.released_at
                        .is_some_and(|at| now.saturating_duration_since(at) < patience)
                });
                if !flowing {
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_connection_moves_in_few_bytes() {
        // Connections move into and out of pools and futures: what a larger
        // one would copy per request shows in the proxy's cost. The socket's
        // registration holds tokio's runtime handle, 8 bytes in vireo's
        // build and 16 where another crate of the workspace turns on tokio's
        // multi-thread runtime (a `cargo test --workspace` build).
        let handle = std::mem::size_of::<tokio::runtime::Handle>();
        assert!(
            std::mem::size_of::<super::UpConn>() <= 128 + handle,
            "{} (runtime handle {handle})",
            std::mem::size_of::<super::UpConn>()
        );
    }

    use super::*;

    /// A current-thread runtime and a listener to connect to.
    fn setup() -> (tokio::runtime::Runtime, std::net::TcpListener, PeerAddr) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = PeerAddr::Tcp(l.local_addr().unwrap());
        (rt, l, addr)
    }

    fn nodelay(c: &UpConn) -> bool {
        match &c.sock {
            Sock::Tcp(s) => s.nodelay().unwrap(),
            _ => unreachable!(),
        }
    }

    /// A peer with Nagle's algorithm on that writes its reply in pieces (as
    /// php-fpm: a record, then the rest once it is made) is not held up by a
    /// delayed ACK on a reused connection: without TCP_QUICKACK every
    /// exchange after the first waits ~40 ms for the rest.
    #[test]
    fn a_reply_in_pieces_is_not_held_by_a_delayed_ack() {
        const EXCHANGES: usize = 20;
        const HEAD: usize = 1_000;
        const TAIL: usize = 100;
        let (rt, l, addr) = setup();
        // The reader says when it has read the head: only then is the tail
        // written, so that it finds the head unacknowledged.
        let (read_head, head_read) = std::sync::mpsc::channel::<()>();
        let peer = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut ask = [0u8; 3];
            for _ in 0..EXCHANGES {
                std::io::Read::read_exact(&mut s, &mut ask).unwrap();
                std::io::Write::write_all(&mut s, &[b'h'; HEAD]).unwrap();
                head_read.recv().unwrap();
                std::io::Write::write_all(&mut s, &[b't'; TAIL]).unwrap();
            }
        });
        let took = rt.block_on(async {
            let c = connect_from(&addr, None, None, Duration::from_secs(5))
                .await
                .unwrap();
            let start = Instant::now();
            let mut buf = bytes::BytesMut::with_capacity(1 << 16);
            for _ in 0..EXCHANGES {
                assert_eq!(c.write_now(b"ask"), 3);
                buf.clear();
                let mut told = false;
                while buf.len() < HEAD + TAIL {
                    match c.try_read_buf(&mut buf) {
                        Ok(n) => assert!(n > 0, "peer closed"),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            if buf.len() >= HEAD && !told {
                                told = true;
                                read_head.send(()).unwrap();
                            }
                            c.readable().await.unwrap()
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            start.elapsed()
        });
        peer.join().unwrap();
        // Some 40 ms per exchange when the tail waits for a delayed ACK.
        assert!(
            took < Duration::from_millis(15 * EXCHANGES as u64),
            "{EXCHANGES} exchanges took {took:?}"
        );
    }

    /// A peer that serves one connection at a time (php-fpm, a prefork
    /// Apache) leaves a new connection in its listen queue while a pooled one
    /// keeps it busy: once the new one has waited `STARVED`, the pooled one
    /// is closed instead of pooled, and the peer takes the new one.
    #[test]
    fn a_starved_new_connection_gets_the_pooled_ones_place() {
        async fn reply(c: &UpConn) {
            let mut b = [0u8; 2];
            loop {
                match c.try_read(&mut b) {
                    Ok(2) => return,
                    Ok(n) => panic!("read {n}"),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.readable().await.unwrap(),
                    Err(e) => panic!("{e}"),
                }
            }
        }
        let (rt, l, addr) = setup();
        let peer = std::thread::spawn(move || {
            // One connection at a time, each until the other side closes it.
            for _ in 0..2 {
                let (mut s, _) = l.accept().unwrap();
                let mut ask = [0u8; 3];
                while std::io::Read::read_exact(&mut s, &mut ask).is_ok() {
                    std::io::Write::write_all(&mut s, b"ok").unwrap();
                }
            }
        });
        rt.block_on(async {
            let group = "one-at-a-time";
            let exchange = |c: &UpConn| {
                assert_eq!(c.write_now(b"ask"), 3);
            };
            let a = connect_from(&addr, None, None, Duration::from_secs(5))
                .await
                .unwrap();
            unanswered(group, &addr, &a);
            exchange(&a);
            reply(&a).await;
            put(group, &addr, a, 8, Instant::now());
            // The peer is busy with the pooled connection: this one waits.
            let b = connect_from(&addr, None, None, Duration::from_secs(5))
                .await
                .unwrap();
            unanswered(group, &addr, &b);
            exchange(&b);
            let start = Instant::now();
            while let Some(a) = take(group, &addr, 0, Duration::from_secs(60)) {
                assert!(start.elapsed() < Duration::from_secs(5), "never made room");
                exchange(&a);
                reply(&a).await;
                put(group, &addr, a, 8, Instant::now());
            }
            let answered = tokio::time::timeout(Duration::from_secs(5), reply(&b)).await;
            assert!(answered.is_ok(), "the new connection was never served");
        });
        peer.join().unwrap();
    }

    /// A peer found full (a new connection waited for its first reply byte
    /// well past what pooled exchanges take) makes a request that finds no
    /// idle connection wait for one to come back: it is handed the next one
    /// released, and gives up when none comes back for a while.
    #[test]
    fn a_full_peer_hands_released_connections_to_waiting_requests() {
        let (rt, l, addr) = setup();
        rt.block_on(async {
            let group = "full";
            let limit = Duration::from_secs(5);
            let dial = || connect_from(&addr, None, None, limit);
            let a = dial().await.unwrap();
            let _ = l.accept().unwrap();
            // Nothing says the peer is full: no wait.
            assert!(released(group, &addr, 0, limit).await.is_none());
            // A pooled exchange answered in 1 ms, a new connection still
            // unanswered 50 ms on.
            let now = Instant::now();
            put(group, &addr, a, 8, now);
            let a = take(group, &addr, 0, limit).unwrap();
            a.answered(now + Duration::from_millis(1));
            let b = dial().await.unwrap();
            let _ = l.accept().unwrap();
            unanswered(group, &addr, &b);
            put(
                group,
                &addr,
                a,
                8,
                Instant::now() + Duration::from_millis(50),
            );
            drop(b);
            // The pooled one was closed for it, and the peer is full: the
            // next connection released goes to the request waiting.
            assert!(take(group, &addr, 0, limit).is_none());
            let c = dial().await.unwrap();
            let _ = l.accept().unwrap();
            let give = async {
                tokio::task::yield_now().await;
                put(group, &addr, c, 8, Instant::now());
            };
            let (got, ()) = tokio::join!(released(group, &addr, 0, limit), give);
            let got = got.expect("handed over");
            assert!(got.reused());
            assert!(take(group, &addr, 0, limit).is_none(), "pooled instead");
            // None comes back: the wait ends after the peer's patience.
            let t = Instant::now();
            assert!(released(group, &addr, 0, limit).await.is_none());
            assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        });
    }

    /// TCP_NODELAY only once a connection writes twice without reading.
    #[test]
    fn nodelay_only_for_a_second_write_before_a_read() {
        let (rt, l, addr) = setup();
        rt.block_on(async {
            let c = connect_from(&addr, None, None, Duration::from_secs(5))
                .await
                .unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 16];
            for _ in 0..3 {
                // An exchange: one write, the reply read.
                assert_eq!(c.write_now(b"ask"), 3);
                std::io::Read::read_exact(&mut s, &mut b[..3]).unwrap();
                std::io::Write::write_all(&mut s, b"reply").unwrap();
                c.readable().await.unwrap();
                assert_eq!(c.try_read(&mut b).unwrap(), 5);
                assert!(!nodelay(&c), "set on a write after a read");
            }
            assert_eq!(c.try_write(b"one").unwrap(), 3);
            assert!(!nodelay(&c));
            assert_eq!(c.try_write(b"two").unwrap(), 3);
            assert!(nodelay(&c), "not set for a second write before a read");
        });
    }

    #[test]
    fn a_peer_that_left_loses_its_idle_connections_at_the_sweep() {
        let (rt, l, addr) = setup();
        rt.block_on(async {
            let now = Instant::now();
            for group in ["left", "other"] {
                let c = connect_from(&addr, None, None, Duration::from_secs(5))
                    .await
                    .unwrap();
                let _ = l.accept().unwrap();
                put(group, &addr, c, 4, now);
            }
            forget("left", &addr);
            sweep();
            let idle = Duration::from_secs(60);
            assert!(take("left", &addr, 0, idle).is_none());
            assert!(take("other", &addr, 0, idle).is_some());
            // Swept once: nothing more to do until the next departure.
            assert_eq!(
                SWEPT.with(Cell::get),
                GONE_SEQ.load(std::sync::atomic::Ordering::Relaxed)
            );
        });
    }

    #[test]
    fn connect_send_at_once_low_water_mark_and_refusal() {
        let (rt, l, addr) = setup();
        rt.block_on(async {
            let c = connect_from(&addr, None, None, Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(c.write_now(b"hello"), 5);
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 5];
            std::io::Read::read_exact(&mut s, &mut b).unwrap();
            assert_eq!(&b, b"hello");
            assert!(!c.queued());
            // Under the mark a byte raises no readiness, but is queued;
            // lowering the mark raises it.
            c.set_recv_lowat(1000).unwrap();
            std::io::Write::write_all(&mut s, b"x").unwrap();
            let wait = |ms| tokio::time::timeout(Duration::from_millis(ms), c.readable());
            assert!(wait(100).await.is_err(), "woken under the mark");
            assert!(c.queued());
            c.set_recv_lowat(1).unwrap();
            assert!(
                wait(2000).await.is_ok(),
                "lowering the mark raised no readiness"
            );
            drop(l);
            let e = connect_from(&addr, None, None, Duration::from_secs(5))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
        });
    }
}
