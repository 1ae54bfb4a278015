//! Listening sockets and the stream abstraction over TCP and unix sockets.

use crate::conf::model::ListenAddr;
use socket2::{Domain, SockRef, Socket, Type};
use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest};

/// A bound, listening socket not yet registered with a worker's event loop.
#[derive(Debug)]
pub enum Bound {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl Bound {
    pub fn try_clone(&self) -> io::Result<Bound> {
        Ok(match self {
            Bound::Tcp(l) => Bound::Tcp(l.try_clone()?),
            Bound::Unix(l) => Bound::Unix(l.try_clone()?),
        })
    }

    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Bound::Tcp(l) => l.as_raw_fd(),
            Bound::Unix(l) => l.as_raw_fd(),
        }
    }

    /// listen(2) again: changes the accept-queue length of a listening socket
    /// without disturbing the connections already queued.
    pub fn relisten(&self, backlog: i32) -> io::Result<()> {
        match self {
            Bound::Tcp(l) => SockRef::from(l).listen(backlog),
            Bound::Unix(l) => SockRef::from(l).listen(backlog),
        }
    }

    /// Is SO_REUSEPORT set (more sockets may bind the same address)?
    pub fn reuse_port(&self) -> bool {
        match self {
            Bound::Tcp(l) => SockRef::from(l).reuse_port().unwrap_or(false),
            Bound::Unix(_) => false,
        }
    }

    /// A socket handed over by another process (upgrade, systemd): a listening
    /// stream socket, and the address it is bound to.
    pub fn adopt(fd: std::os::fd::OwnedFd) -> io::Result<(ListenAddr, Bound)> {
        let s = Socket::from(fd);
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

/// Bind one listening socket; with `reuseport` more sockets may bind the same
/// address (one per worker, or a wildcard beside a specific address).
pub fn bind(addr: &ListenAddr, reuseport: bool, backlog: i32) -> io::Result<Bound> {
    match addr {
        ListenAddr::Tcp(addr) => {
            let s = Socket::new(Domain::for_address(*addr), Type::STREAM, None)?;
            s.set_reuse_address(true)?;
            if reuseport {
                s.set_reuse_port(true)?;
            }
            if addr.is_ipv6() {
                s.set_only_v6(true)?;
            }
            s.set_nonblocking(true)?;
            s.bind(&(*addr).into())?;
            s.listen(backlog)?;
            Ok(Bound::Tcp(s.into()))
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
            Ok(Bound::Unix(s.into()))
        }
    }
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
    fn tls(&self) -> Option<&std::sync::Arc<crate::modules::ssl::stream::TlsInfo>> {
        None
    }
    /// TCP options; no-ops on unix sockets.
    fn set_nodelay(&self);
    fn set_reset_on_close(&self);
}

macro_rules! stream_impl {
    ($t:ty, $tcp:expr) => {
        impl Stream for $t {
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
        }
    };
}
stream_impl!(tokio::net::TcpStream, true);
stream_impl!(tokio::net::UnixStream, false);
