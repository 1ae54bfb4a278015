//! Listening sockets and the stream abstraction over TCP and unix sockets.

use crate::conf::load::Listener;
use crate::conf::model::ListenAddr;
use socket2::{Domain, SockRef, Socket, Type};
use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest};

/// A bound, listening socket not yet registered with a worker's event loop.
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
}

/// Bind one socket for `l`; with `reuseport` every worker calls this for its own socket.
pub fn bind(l: &Listener) -> io::Result<Bound> {
    match &l.addr {
        ListenAddr::Tcp(addr) => {
            let s = Socket::new(Domain::for_address(*addr), Type::STREAM, None)?;
            s.set_reuse_address(true)?;
            if l.reuseport {
                s.set_reuse_port(true)?;
            }
            if addr.is_ipv6() {
                s.set_only_v6(true)?;
            }
            s.set_nonblocking(true)?;
            s.bind(&(*addr).into())?;
            s.listen(l.backlog)?;
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
            s.listen(l.backlog)?;
            Ok(Bound::Unix(s.into()))
        }
    }
}

/// What the HTTP code needs of a client stream.
pub trait Stream: AsyncRead + AsyncWrite + AsRawFd + Unpin + 'static {
    fn writable(&self) -> impl Future<Output = io::Result<()>>;
    fn readable(&self) -> impl Future<Output = io::Result<()>>;
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
    fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize>;
    /// Register for read readiness without a future object (idle waits).
    fn poll_read_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>>;
    fn try_write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize>;
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
