//! A TLS connection as a [`Stream`]: rustls over the worker's non-blocking
//! socket, driven by the same readiness calls as a plain one, so the HTTP/1
//! connection code (and HTTP/2, through `AsyncRead`/`AsyncWrite`) serves both.
//!
//! Writes hand plaintext to rustls only once every earlier record has left
//! (`WouldBlock` otherwise), so no more than one write's records wait in
//! memory, and [`Stream::try_flush`] pushes out the last ones. Plaintext that
//! rustls has decrypted but nobody read yet counts as readable.

use super::conf::SslConf;
use super::config::ServerTls;
use crate::core::request::TlsInfo;
use crate::core::route::VirtualHosts;
use crate::server::socket::Stream;
use crate::server::tls_io;
use crate::sys::FdIo;
use bytes::BytesMut;
use rustls::ServerConnection;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io::{self, ErrorKind, IoSlice, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

pub struct TlsStream {
    tcp: TcpStream,
    tls: RefCell<ServerConnection>,
    info: Arc<TlsInfo>,
    /// close_notify queued (shutdown started).
    closing: Cell<bool>,
}

impl TlsStream {
    pub fn info(&self) -> &Arc<TlsInfo> {
        &self.info
    }

    /// Queue close_notify and send what the socket takes now, without
    /// waiting (a stream session's end).
    pub fn close_notify(&self) {
        if !self.closing.replace(true) {
            let mut tls = self.tls.borrow_mut();
            tls.send_close_notify();
            let _ = self.flush_tls(&mut tls);
        }
    }

    /// Send what rustls has queued; `WouldBlock` when the socket is full.
    fn flush_tls(&self, tls: &mut ServerConnection) -> io::Result<()> {
        tls_io::flush(&self.tcp, tls)
    }

    /// Decrypted bytes handed to `sink`, which copies what it takes and says
    /// how much: 0 at the end of the stream.
    fn read_plain(&self, sink: &mut dyn FnMut(&[u8]) -> usize) -> io::Result<usize> {
        tls_io::read_plain(&self.tcp, &mut self.tls.borrow_mut(), sink)
    }

    /// Decrypted bytes wait inside rustls (or its end was received).
    fn has_plaintext(&self) -> bool {
        tls_io::has_plaintext(&mut self.tls.borrow_mut())
    }

    fn write_plain(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        tls_io::write_plain(&self.tcp, &mut self.tls.borrow_mut(), bufs)
    }
}

impl AsRawFd for TlsStream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp.as_raw_fd()
    }
}

impl Stream for TlsStream {
    const PLAIN: bool = false;
    type Parked = std::net::TcpStream;

    fn park(self) -> io::Result<Self::Parked> {
        Err(io::ErrorKind::Unsupported.into())
    }

    fn unpark(_: Self::Parked) -> io::Result<Self> {
        Err(io::ErrorKind::Unsupported.into())
    }

    fn writable(&self) -> impl Future<Output = io::Result<()>> {
        self.tcp.writable()
    }

    fn readable(&self) -> impl Future<Output = io::Result<()>> {
        let ready = self.has_plaintext();
        async move {
            if ready {
                return Ok(());
            }
            self.tcp.readable().await
        }
    }

    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        self.tcp.try_io(interest, f)
    }

    fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        tls_io::read_buf(&self.tcp, &mut self.tls.borrow_mut(), buf)
    }

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_plaintext() {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }

    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_plain(bufs)
    }

    fn try_flush(&self) -> io::Result<()> {
        self.flush_tls(&mut self.tls.borrow_mut())
    }

    fn set_nodelay(&self) {
        Stream::set_nodelay(&self.tcp);
    }

    fn set_reset_on_close(&self) {
        Stream::set_reset_on_close(&self.tcp);
    }

    fn tls(&self) -> Option<&Arc<TlsInfo>> {
        Some(&self.info)
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let r = self.read_plain(&mut |c| {
                let n = c.len().min(buf.remaining());
                buf.put_slice(&c[..n]);
                n
            });
            match r {
                Ok(_) => return Poll::Ready(Ok(())),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    ready!(self.tcp.poll_read_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            match self.write_plain(bufs) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    ready!(self.tcp.poll_write_ready(cx))?;
                }
                r => return Poll::Ready(r),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.try_flush() {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    ready!(self.tcp.poll_write_ready(cx))?;
                }
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.closing.replace(true) {
            self.tls.borrow_mut().send_close_notify();
        }
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Why a handshake did not complete (logged at `info`, as nginx does).
#[derive(Debug)]
pub struct HandshakeError(pub String);

/// The TLS handshake on an accepted connection: the server is chosen by the
/// client's SNI name among `vhosts` (else the address's default), with ALPN
/// `h2` offered when `http2`. `None`: the handshake was an ACME
/// TLS-ALPN-01 validation, answered, with nothing to serve after it.
pub async fn accept(
    tcp: TcpStream,
    vhosts: &VirtualHosts,
    http2: bool,
) -> Result<Option<TlsStream>, HandshakeError> {
    let fd = tcp.as_raw_fd();
    let fail = |why: String| HandshakeError(why);
    let mut acceptor = rustls::server::Acceptor::default();
    let accepted = loop {
        match tcp.try_io(Interest::READABLE, || acceptor.read_tls(&mut FdIo(fd))) {
            Ok(0) => return Err(fail("peer closed the connection in the handshake".into())),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                tcp.readable().await.map_err(|e| fail(e.to_string()))?;
                continue;
            }
            Err(e) => return Err(fail(crate::core::errlog::errno_text(&e))),
        }
        match acceptor.accept() {
            Ok(None) => {}
            Ok(Some(a)) => break a,
            Err((e, mut alert)) => {
                let _ = alert.write(&mut FdIo(fd));
                return Err(fail(e.to_string()));
            }
        }
    };
    let server_name: Option<Box<str>> = accepted.client_hello().server_name().map(Into::into);
    let acme_only = accepted.client_hello().alpn().is_some_and(|mut a| {
        a.next() == Some(crate::modules::acme::ACME_TLS_ALPN) && a.next().is_none()
    });
    if acme_only && let Some(key) = crate::modules::acme::tls_alpn(server_name.as_deref()) {
        return acme_validation(tcp, accepted, key).await.map(|()| None);
    }
    let hello = accepted.client_hello();
    let curves = super::config::offered_curves(hello.named_groups().unwrap_or_default());
    let ciphers = super::config::offered_ciphers(hello.cipher_suites());
    let server = vhosts.select(&server_name.as_deref().unwrap_or("").to_ascii_lowercase());
    let (owner, tls) = match super::config::of(server) {
        Some(t) => (server, Some(t)),
        None => (&vhosts.default, super::config::of(&vhosts.default)),
    };
    let (config, client) = match tls.map(|t| &**t) {
        Some(ServerTls::Accept {
            h1,
            h2,
            client,
            dynamic,
        }) => {
            let mut c = if http2 { h2.clone() } else { h1.clone() };
            if let Some(d) = dynamic {
                let keys = dynamic_keys(d, owner, server_name.as_deref(), &tcp).map_err(|why| {
                    // A fatal internal_error alert (80), in the clear.
                    let _ = FdIo(fd).write(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 80]);
                    fail(why)
                })?;
                let mut own = (*c).clone();
                own.cert_resolver = Arc::new(super::config::Certificates::new(keys, Vec::new()));
                c = Arc::new(own);
            }
            (c, client.clone())
        }
        Some(ServerTls::Reject) | None => {
            // A fatal unrecognized_name alert (112), in the clear.
            let _ = FdIo(fd).write(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 112]);
            return Err(fail(format!(
                "handshake rejected for server name \"{}\"",
                server_name.as_deref().unwrap_or("")
            )));
        }
    };
    // The session stored or resumed in the handshake ($ssl_session_id).
    let mut session_id = None;
    let _ = super::config::take_session_id();
    let conn = accepted.into_connection(config);
    session_id = session_id.or(super::config::take_session_id());
    let mut conn = match conn {
        Ok(c) => c,
        Err((e, mut alert)) => {
            let _ = alert.write(&mut FdIo(fd));
            return Err(fail(e.to_string()));
        }
    };
    // The session store names the session while packets are processed:
    // taken at once, before another connection's handshake runs.
    let took = tls_io::handshake(&tcp, &mut conn, &mut || {
        session_id = session_id.take().or(super::config::take_session_id());
    })
    .await;
    if let Err(e) = took {
        return Err(fail(match e {
            tls_io::HandshakeEnd::Closed => "peer closed the connection in the handshake".into(),
            tls_io::HandshakeEnd::Tls(e) => e.to_string(),
            tls_io::HandshakeEnd::Io(e) => crate::core::errlog::errno_text(&e),
        }));
    }
    let client_certs: Box<[Vec<u8>]> = conn
        .peer_certificates()
        .unwrap_or_default()
        .iter()
        .map(|c| c.as_ref().to_vec())
        .collect();
    let client_verify = match (&client, conn.peer_certificates()) {
        (Some(auth), Some(chain)) => auth.verify(chain).await,
        _ => crate::core::request::ClientVerify::None,
    };
    let info = TlsInfo {
        protocol: match conn.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            _ => "TLSv1.2",
        },
        cipher: conn
            .negotiated_cipher_suite()
            .map(|s| super::config::openssl_name(&s))
            .unwrap_or_default(),
        server_name,
        h2: conn.alpn_protocol() == Some(b"h2"),
        alpn: conn.alpn_protocol().unwrap_or_default().into(),
        resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        curve: conn
            .negotiated_key_exchange_group()
            .map_or("", |g| super::config::group_name(g.name())),
        curves,
        ciphers,
        session_id: session_id
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
            .unwrap_or_default(),
        client_certs,
        client_verify,
    };
    Ok(Some(TlsStream {
        tcp,
        tls: RefCell::new(conn),
        info: Arc::new(info),
        closing: Cell::new(false),
    }))
}

/// Complete a TLS-ALPN-01 validation handshake with the challenge's
/// certificate and `acme-tls/1`, then close (RFC 8737 section 3).
async fn acme_validation(
    tcp: TcpStream,
    accepted: rustls::server::Accepted,
    key: Arc<rustls::sign::CertifiedKey>,
) -> Result<(), HandshakeError> {
    let fd = tcp.as_raw_fd();
    let mut c = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(|e| HandshakeError(e.to_string()))?
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(super::config::Certificates::new(
        vec![key],
        Vec::new(),
    )));
    c.alpn_protocols = vec![crate::modules::acme::ACME_TLS_ALPN.to_vec()];
    let mut conn = match accepted.into_connection(Arc::new(c)) {
        Ok(c) => c,
        Err((e, mut alert)) => {
            let _ = alert.write(&mut FdIo(fd));
            return Err(HandshakeError(e.to_string()));
        }
    };
    tls_io::handshake(&tcp, &mut conn, &mut || {})
        .await
        .map_err(|e| {
            HandshakeError(match e {
                tls_io::HandshakeEnd::Closed => "peer closed the ACME validation handshake".into(),
                tls_io::HandshakeEnd::Tls(e) => e.to_string(),
                tls_io::HandshakeEnd::Io(e) => crate::core::errlog::errno_text(&e),
            })
        })?;
    conn.send_close_notify();
    let _ = tls_io::flush(&tcp, &mut conn);
    crate::error_log!(Info, "acme: tls-alpn-01 challenge answered");
    Ok(())
}

/// The key pairs of certificates named with variables, rendered in a
/// request context of the handshake (`$ssl_server_name`, the client's
/// address, …) at the server's level.
fn dynamic_keys(
    d: &super::config::Dynamic,
    server: &Arc<crate::core::route::Server>,
    sni: Option<&str>,
    tcp: &TcpStream,
) -> Result<Vec<Arc<rustls::sign::CertifiedKey>>, String> {
    let mut raw = BytesMut::from(&b"GET / HTTP/1.0\r\n\r\n"[..]);
    let head = crate::http::h1::parse::parse(&mut raw, &Default::default())
        .ok()
        .flatten()
        .ok_or("no request context")?;
    let peer = match tcp.peer_addr() {
        Ok(a) => crate::core::request::Peer::Tcp(a),
        Err(_) => crate::core::request::Peer::Unix,
    };
    let info = TlsInfo {
        server_name: sni.map(Into::into),
        ..Default::default()
    };
    let c = crate::http::pipeline::ConnRef {
        peer: &peer,
        fd: tcp.as_raw_fd(),
        local: None,
        id: 0,
        requests: 0,
        born_ms: crate::core::clock::unix_millis(),
        tls: Some(Arc::new(info)),
        proxy: None,
    };
    let req = crate::http::pipeline::context(c, server, &head, sni.unwrap_or(""));
    d.keys(&|t| {
        let mut out = Vec::new();
        t.render(&req, &mut out);
        out
    })
}

/// How long the handshake on `vhosts`'s address may take (its default
/// server's `ssl_handshake_timeout`).
pub fn handshake_timeout(vhosts: &VirtualHosts) -> std::time::Duration {
    vhosts.default.conf.get::<SslConf>().handshake_timeout
}
