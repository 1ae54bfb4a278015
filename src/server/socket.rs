//! Listening sockets and the stream abstraction over TCP and unix sockets.

use crate::conf::model::{Keepalive, ListenAddr, SockOpts};
use crate::error_log;
use socket2::{Domain, SockRef, Socket, Type};
use std::cell::{Cell, OnceCell};
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// A bound, listening socket not yet registered with a worker's event loop.
#[derive(Debug)]
pub enum Bound {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
    /// A UDP socket of a stream server (`listen … udp`).
    Udp(std::net::UdpSocket),
}

impl Bound {
    pub fn try_clone(&self) -> io::Result<Bound> {
        Ok(match self {
            Bound::Tcp(l) => Bound::Tcp(l.try_clone()?),
            Bound::Unix(l) => Bound::Unix(l.try_clone()?),
            Bound::Udp(l) => Bound::Udp(l.try_clone()?),
        })
    }

    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Bound::Tcp(l) => l.as_raw_fd(),
            Bound::Unix(l) => l.as_raw_fd(),
            Bound::Udp(l) => l.as_raw_fd(),
        }
    }

    /// listen(2) again: changes the accept-queue length of a listening socket
    /// without disturbing the connections already queued.
    pub fn relisten(&self, backlog: i32) -> io::Result<()> {
        match self {
            Bound::Tcp(l) => SockRef::from(l).listen(backlog),
            Bound::Unix(l) => SockRef::from(l).listen(backlog),
            Bound::Udp(_) => Ok(()),
        }
    }

    /// Set the socket options of `opts` (nginx's `ngx_configure_listening_sockets`),
    /// at bind and again on reload. An option not configured is left as it is,
    /// except `deferred`, turned off when `old` had it (or `old` is unknown: an
    /// inherited socket). A failure is logged and the socket used as it is.
    pub fn configure(&self, addr: &ListenAddr, opts: &SockOpts, old: Option<&SockOpts>) {
        let s = match self {
            Bound::Tcp(l) => SockRef::from(l),
            Bound::Unix(l) => SockRef::from(l),
            Bound::Udp(l) => SockRef::from(l),
        };
        let fd = self.as_raw_fd();
        let check = |what: std::fmt::Arguments, r: io::Result<()>| {
            if let Err(e) = r {
                error_log!(Alert, "setsockopt({what}) on {addr} failed ({e}), ignored");
            }
        };
        if let Some(n) = opts.rcvbuf {
            check(format_args!("SO_RCVBUF, {n}"), s.set_recv_buffer_size(n));
        }
        if let Some(n) = opts.sndbuf {
            check(format_args!("SO_SNDBUF, {n}"), s.set_send_buffer_size(n));
        }
        match opts.keepalive {
            None => {}
            Some(Keepalive::Off) => check(format_args!("SO_KEEPALIVE, 0"), s.set_keepalive(false)),
            Some(Keepalive::On { idle, intvl, cnt }) => {
                let secs = |n: u32| std::time::Duration::from_secs(n.into());
                let mut k = socket2::TcpKeepalive::new();
                if let Some(n) = idle {
                    k = k.with_time(secs(n));
                }
                if let Some(n) = intvl {
                    k = k.with_interval(secs(n));
                }
                if let Some(n) = cnt {
                    k = k.with_retries(n);
                }
                check(format_args!("SO_KEEPALIVE, 1"), s.set_tcp_keepalive(&k));
            }
        }
        if let Some(n) = opts.fastopen {
            let r = crate::sys::set_tcp_int(fd, libc::TCP_FASTOPEN, n as libc::c_int);
            check(format_args!("TCP_FASTOPEN, {n}"), r);
        }
        if matches!(self, Bound::Udp(_)) {
            return;
        }
        if opts.deferred || old.is_none_or(|o| o.deferred) {
            // nginx's one second: how long a connection has queued is unknown.
            let v = opts.deferred.into();
            let r = crate::sys::set_tcp_int(fd, libc::TCP_DEFER_ACCEPT, v);
            check(format_args!("TCP_DEFER_ACCEPT, {v}"), r);
        }
    }

    /// Is SO_REUSEPORT set (more sockets may bind the same address)?
    pub fn reuse_port(&self) -> bool {
        match self {
            Bound::Tcp(l) => SockRef::from(l).reuse_port().unwrap_or(false),
            Bound::Udp(l) => SockRef::from(l).reuse_port().unwrap_or(false),
            Bound::Unix(_) => false,
        }
    }

    /// A socket handed over by another process (upgrade, systemd): a listening
    /// stream socket or a bound UDP one, and the address it is bound to.
    pub fn adopt(fd: std::os::fd::OwnedFd) -> io::Result<(ListenAddr, Bound)> {
        let s = Socket::from(fd);
        if s.r#type()? == Type::DGRAM {
            s.set_cloexec(true)?;
            s.set_nonblocking(true)?;
            return match s.local_addr()?.as_socket() {
                Some(a) => Ok((ListenAddr::Udp(a), Bound::Udp(s.into()))),
                None => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a datagram socket that is not UDP",
                )),
            };
        }
        if s.r#type()? != Type::STREAM || !s.is_listener()? {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a listening stream socket",
            ));
        }
        s.set_cloexec(true)?;
        s.set_nonblocking(true)?;
        let local = s.local_addr()?;
        if let Some(a) = local.as_socket() {
            return Ok((ListenAddr::Tcp(a), Bound::Tcp(s.into())));
        }
        match local.as_pathname() {
            Some(p) => Ok((
                ListenAddr::Unix(p.to_path_buf()),
                Bound::Unix(std::os::fd::OwnedFd::from(s).into()),
            )),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "neither a TCP nor a named unix socket",
            )),
        }
    }
}

/// A non-blocking IP socket of type `ty` bound to `addr` (SO_REUSEADDR, and
/// SO_REUSEPORT with `reuseport`; an IPv6 one v6-only unless `ipv6only=off`).
fn ip_socket(
    addr: &std::net::SocketAddr,
    ty: Type,
    reuseport: bool,
    opts: &SockOpts,
) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(*addr), ty, None)?;
    s.set_reuse_address(true)?;
    if reuseport {
        s.set_reuse_port(true)?;
    }
    if addr.is_ipv6() {
        s.set_only_v6(opts.ipv6only.unwrap_or(true))?;
    }
    s.set_nonblocking(true)?;
    s.bind(&(*addr).into())?;
    Ok(s)
}

/// Bind one listening socket; with `reuseport` more sockets may bind the same
/// address (one per worker, or a wildcard beside a specific address).
pub fn bind(
    addr: &ListenAddr,
    reuseport: bool,
    backlog: i32,
    opts: &SockOpts,
) -> io::Result<Bound> {
    let bound = match addr {
        ListenAddr::Tcp(addr) => {
            let s = ip_socket(addr, Type::STREAM, reuseport, opts)?;
            s.listen(backlog)?;
            Bound::Tcp(s.into())
        }
        ListenAddr::Unix(path) => {
            // A stale socket file from a previous run would make bind fail.
            if std::fs::symlink_metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
            {
                std::fs::remove_file(path)?;
            }
            let s = Socket::new(Domain::UNIX, Type::STREAM, None)?;
            s.set_nonblocking(true)?;
            s.bind(&socket2::SockAddr::unix(path)?)?;
            s.listen(backlog)?;
            Bound::Unix(s.into())
        }
        ListenAddr::Udp(addr) => Bound::Udp(ip_socket(addr, Type::DGRAM, reuseport, opts)?.into()),
    };
    bound.configure(addr, opts, Some(&SockOpts::default()));
    Ok(bound)
}

/// What the HTTP code needs of a client stream.
pub trait Stream: AsyncRead + AsyncWrite + AsRawFd + Unpin + 'static {
    /// Bytes written to the descriptor reach the peer as they are (no TLS):
    /// sendfile and MSG_MORE may be used, and read readiness may be cleared
    /// after a short read.
    const PLAIN: bool = true;
    fn writable(&self) -> impl Future<Output = io::Result<()>>;
    fn readable(&self) -> impl Future<Output = io::Result<()>>;
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
    fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize>;
    /// Register for read readiness without a future object (idle waits).
    fn poll_read_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>>;
    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize>;
    /// Send what earlier writes left queued in the stream (TLS records);
    /// `WouldBlock` while some remains.
    fn try_flush(&self) -> io::Result<()> {
        Ok(())
    }
    /// The TLS connection's details, on a TLS stream.
    fn tls(&self) -> Option<&std::sync::Arc<crate::core::request::TlsInfo>> {
        None
    }
    /// TCP options; no-ops on unix sockets.
    fn set_nodelay(&self);
    fn set_reset_on_close(&self);
    /// The socket without its tokio I/O registration, as a connection long idle
    /// keeps it (`server::idle::park`); plain streams only (TLS state is more
    /// than the socket). An error has closed the socket.
    type Parked: AsRawFd + Unpin;
    fn park(self) -> io::Result<Self::Parked>
    where
        Self: Sized;
    /// A parked socket registered with tokio again.
    fn unpark(p: Self::Parked) -> io::Result<Self>
    where
        Self: Sized;
    /// TCP_CORK on or off (a plain TCP socket only): while on, partial
    /// segments wait for more data, a close or shutdown (which sends them
    /// with the FIN), or turning it off.
    fn set_cork(&self, _on: bool) {}
}

macro_rules! stream_impl {
    ($t:ty, $std:ty, $tcp:expr) => {
        impl Stream for $t {
            type Parked = $std;
            fn park(self) -> io::Result<$std> {
                self.into_std()
            }
            fn unpark(p: $std) -> io::Result<Self> {
                <$t>::from_std(p)
            }
            fn writable(&self) -> impl Future<Output = io::Result<()>> {
                <$t>::writable(self)
            }
            fn readable(&self) -> impl Future<Output = io::Result<()>> {
                <$t>::readable(self)
            }
            fn try_io<R>(&self, i: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
                <$t>::try_io(self, i, f)
            }
            fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
                <$t>::try_read_buf(self, buf)
            }
            fn poll_read_ready(
                &self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                <$t>::poll_read_ready(self, cx)
            }
            fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
                <$t>::try_write_vectored(self, bufs)
            }
            fn set_nodelay(&self) {
                if $tcp {
                    let _ = SockRef::from(self).set_tcp_nodelay(true);
                }
            }
            fn set_reset_on_close(&self) {
                if $tcp {
                    let _ = SockRef::from(self).set_linger(Some(std::time::Duration::ZERO));
                }
            }
            fn set_cork(&self, on: bool) {
                if $tcp {
                    let _ = SockRef::from(self).set_tcp_cork(on);
                }
            }
        }
    };
}
stream_impl!(tokio::net::TcpStream, std::net::TcpStream, true);
stream_impl!(
    tokio::net::UnixStream,
    std::os::unix::net::UnixStream,
    false
);

/// A listening TCP socket a worker accepts on. What it accepts is not yet
/// registered with the worker's event loop (see [`Tcp`]).
pub struct TcpListener(AsyncFd<std::net::TcpListener>);

impl TcpListener {
    pub fn new(l: std::net::TcpListener) -> io::Result<TcpListener> {
        crate::sys::register(l, Interest::READABLE)
            .map(TcpListener)
            .map_err(|(_, e)| e)
    }

    /// The next connection, non-blocking and close-on-exec.
    pub async fn accept(&self) -> io::Result<(std::net::TcpStream, std::net::SocketAddr)> {
        loop {
            let mut ready = self.0.readable().await?;
            if let Ok(r) = ready.try_io(|l| accept(l.get_ref())) {
                return r;
            }
        }
    }

    /// A connection already queued, without waiting (`WouldBlock` if none).
    pub fn try_accept(&self) -> io::Result<(std::net::TcpStream, std::net::SocketAddr)> {
        self.0.try_io(Interest::READABLE, accept)
    }
}

fn accept(l: &std::net::TcpListener) -> io::Result<(std::net::TcpStream, std::net::SocketAddr)> {
    let (s, a) = SockRef::from(l).accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    let a = a
        .as_socket()
        .ok_or_else(|| io::Error::other("accepted a connection without an IP address"))?;
    Ok((s.into(), a))
}

/// A plain TCP connection, registered with the worker's event loop (tokio's
/// I/O driver) only once it has to wait. A connection served without
/// waiting — its request there when it was accepted (`deferred`, or a quick
/// client), its response taken whole by the socket, then closed — costs no
/// epoll_ctl to add it and none to remove it. Exactly one of `raw` and `io`
/// holds the socket.
pub struct Tcp {
    fd: RawFd,
    /// The socket while it is not registered.
    raw: Cell<Option<std::net::TcpStream>>,
    /// The socket once registered.
    io: OnceCell<AsyncFd<std::net::TcpStream>>,
}

impl Tcp {
    /// `s` must be non-blocking.
    pub fn new(s: std::net::TcpStream) -> Tcp {
        Tcp {
            fd: s.as_raw_fd(),
            raw: Cell::new(Some(s)),
            io: OnceCell::new(),
        }
    }

    /// The registered socket, registering it first if it is not yet.
    fn io(&self) -> io::Result<&AsyncFd<std::net::TcpStream>> {
        if let Some(io) = self.io.get() {
            return Ok(io);
        }
        let Some(s) = self.raw.take() else {
            return Err(io::Error::other("socket registration lost"));
        };
        match crate::sys::register(s, Interest::READABLE | Interest::WRITABLE) {
            Ok(io) => Ok(self.io.get_or_init(|| io)),
            Err((s, e)) => {
                self.raw.set(Some(s));
                Err(e)
            }
        }
    }

    /// `op` now: through the registration's readiness when there is one (it
    /// is cleared when `op` would block), else straight to the socket.
    fn now<R>(&self, interest: Interest, op: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self.io.get() {
            Some(io) => io.try_io(interest, |_| op()),
            None => op(),
        }
    }

    fn writev(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        io::Write::write_vectored(&mut crate::sys::FdIo(self.fd), bufs)
    }
}

impl AsRawFd for Tcp {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Stream for Tcp {
    type Parked = std::net::TcpStream;
    fn park(self) -> io::Result<std::net::TcpStream> {
        match self.io.into_inner() {
            Some(io) => Ok(io.into_inner()),
            None => self
                .raw
                .into_inner()
                .ok_or_else(|| io::Error::other("socket registration lost")),
        }
    }
    fn unpark(p: std::net::TcpStream) -> io::Result<Tcp> {
        Ok(Tcp::new(p))
    }
    async fn writable(&self) -> io::Result<()> {
        self.io()?.writable().await.map(drop)
    }
    async fn readable(&self) -> io::Result<()> {
        self.io()?.readable().await.map(drop)
    }
    fn try_io<R>(&self, i: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.now(i, f)
    }
    fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        self.now(Interest::READABLE, || crate::sys::recv_append(self.fd, buf))
    }
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.io() {
            Ok(io) => io.poll_read_ready(cx).map_ok(drop),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.now(Interest::WRITABLE, || self.writev(bufs))
    }
    fn set_nodelay(&self) {
        let _ = crate::sys::set_tcp_int(self.fd, libc::TCP_NODELAY, 1);
    }
    fn set_reset_on_close(&self) {
        let _ = crate::sys::set_linger_zero(self.fd);
    }
    fn set_cork(&self, on: bool) {
        let _ = crate::sys::set_tcp_int(self.fd, libc::TCP_CORK, on.into());
    }
}

impl AsyncRead for Tcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let read = |b: &mut ReadBuf<'_>| crate::sys::FdIo(this.fd).read_buf(b);
            let r = match this.io.get() {
                Some(io) => match ready!(io.poll_read_ready(cx))?.try_io(|_| read(buf)) {
                    Ok(r) => r,
                    Err(_would_block) => continue,
                },
                None => read(buf),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    this.io()?;
                }
                r => return Poll::Ready(r),
            }
        }
    }
}

impl AsyncWrite for Tcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            let r = match this.io.get() {
                Some(io) => match ready!(io.poll_write_ready(cx))?.try_io(|_| this.writev(bufs)) {
                    Ok(r) => r,
                    Err(_would_block) => continue,
                },
                None => this.writev(bufs),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    this.io()?;
                }
                r => return Poll::Ready(r),
            }
        }
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(crate::sys::shutdown_write(self.fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(b: &Bound) -> SockRef<'_> {
        match b {
            Bound::Tcp(l) => SockRef::from(l),
            Bound::Unix(_) | Bound::Udp(_) => unreachable!(),
        }
    }

    #[test]
    fn listen_options_reach_the_socket() {
        let opts = SockOpts {
            rcvbuf: Some(64 << 10),
            sndbuf: Some(96 << 10),
            keepalive: Some(Keepalive::On {
                idle: Some(600),
                intvl: Some(7),
                cnt: Some(3),
            }),
            deferred: true,
            fastopen: Some(32),
            ipv6only: Some(false),
        };
        // The wildcard: Linux makes a socket bound to a specific IPv6 address v6-only.
        let addr = ListenAddr::Tcp("[::]:0".parse().unwrap());
        let Ok(b) = bind(&addr, false, 16, &opts) else {
            return; // no IPv6 here
        };
        let s = tcp(&b);
        // The kernel doubles SO_RCVBUF/SO_SNDBUF for its bookkeeping.
        assert_eq!(s.recv_buffer_size().unwrap(), 128 << 10);
        assert_eq!(s.send_buffer_size().unwrap(), 192 << 10);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap().as_secs(), 600);
        assert_eq!(s.tcp_keepalive_interval().unwrap().as_secs(), 7);
        assert_eq!(s.tcp_keepalive_retries().unwrap(), 3);
        assert!(!s.only_v6().unwrap());
        let fd = b.as_raw_fd();
        assert_eq!(crate::sys::tcp_int(fd, libc::TCP_DEFER_ACCEPT).unwrap(), 1);
        assert_eq!(crate::sys::tcp_int(fd, libc::TCP_FASTOPEN).unwrap(), 32);

        // A reload: `deferred` dropped is turned off, keepalive off, the rest kept.
        let new = SockOpts {
            keepalive: Some(Keepalive::Off),
            ..SockOpts::default()
        };
        b.configure(&addr, &new, Some(&opts));
        assert_eq!(crate::sys::tcp_int(fd, libc::TCP_DEFER_ACCEPT).unwrap(), 0);
        assert!(!s.keepalive().unwrap());
        assert_eq!(s.recv_buffer_size().unwrap(), 128 << 10);
    }

    #[test]
    fn ipv6only_is_on_by_default_and_nothing_else_is_set() {
        let addr = ListenAddr::Tcp("[::1]:0".parse().unwrap());
        let Ok(b) = bind(&addr, false, 16, &SockOpts::default()) else {
            return;
        };
        let s = tcp(&b);
        assert!(s.only_v6().unwrap());
        assert!(!s.keepalive().unwrap());
        let fd = b.as_raw_fd();
        assert_eq!(crate::sys::tcp_int(fd, libc::TCP_DEFER_ACCEPT).unwrap(), 0);
        assert_eq!(crate::sys::tcp_int(fd, libc::TCP_FASTOPEN).unwrap(), 0);
    }
}
