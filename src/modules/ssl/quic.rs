//! The TLS side of `listen … quic` addresses: QUIC carries TLS 1.3 itself,
//! so an address has one rustls configuration for all its servers, made
//! from its default server's (session store, tickets, client certificates,
//! cipher suites; the first server with a certificate when the default
//! rejects handshakes) with ALPN `h3` and a certificate chosen per
//! handshake by the client's SNI name among the address's servers, as on a
//! TLS address (a server with `ssl_reject_handshake on` fails its
//! handshakes).
//! Early data (0-RTT) is never accepted: the tickets carry no early-data
//! allowance, so a client cannot send requests before the handshake ends,
//! and none can be replayed.
//!
//! quinn runs the handshake; [`Crypto`] wraps its session to read the
//! ClientHello and the ServerHello on the way ([`super::hello`]): a client
//! naming a server with `ssl_reject_handshake on` is refused with the
//! unrecognized_name alert, as nginx, and [`Handshake`] tells what the
//! `$ssl_*` variables read (cipher, group, resumption, what was offered).

use super::conf::SslConf;
use super::config::{ServerTls, of};
use crate::conf::ast::ConfError;
use crate::core::module::ListenBuild;
use crate::core::route::VirtualHosts;
use quinn::crypto::rustls::{HandshakeData, QuicServerConfig};
use quinn::crypto::{self, Keys, Session};
use quinn_proto::TransportError;
use quinn_proto::transport_parameters::TransportParameters;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::any::Any;
use std::sync::Arc;

/// The rustls configuration of a QUIC address; `h3`: offer ALPN `h3` (else
/// none, and handshakes fail). `None` when its default server has no
/// certificate (the load refused that already).
pub fn server_config(vhosts: &Arc<VirtualHosts>, h3: bool) -> Option<Arc<rustls::ServerConfig>> {
    let h2 = vhosts.servers().find_map(|s| match of(s).map(|t| &**t) {
        Some(ServerTls::Accept { h2, .. }) => Some(h2),
        _ => None,
    })?;
    let mut c = (**h2).clone();
    c.alpn_protocols = if h3 { vec![b"h3".to_vec()] } else { Vec::new() };
    c.max_early_data_size = 0;
    c.cert_resolver = Arc::new(BySni(vhosts.clone()));
    Some(Arc::new(c))
}

/// How the default server of a QUIC address judges client certificates.
pub fn client_auth(vhosts: &VirtualHosts) -> Option<Arc<super::client::ClientAuth>> {
    match of(&vhosts.default).map(|t| &**t) {
        Some(ServerTls::Accept { client, .. }) => client.clone(),
        _ => None,
    }
}

/// A QUIC address's default server needs a certificate (or to reject
/// handshakes, beside a server that has one) and TLS 1.3.
pub fn check_listen(l: &ListenBuild<'_>) -> Result<(), ConfError> {
    let name = l.default.name();
    let accepts = |s: &Arc<crate::core::route::Server>| {
        matches!(of(s).map(|t| &**t), Some(ServerTls::Accept { .. }))
    };
    let rejects = matches!(of(l.default).map(|t| &**t), Some(ServerTls::Reject));
    match accepts(l.default) || (rejects && l.servers.iter().any(accepts)) {
        true => {}
        false => {
            return Err(ConfError::new(
                format!(
                    "no \"ssl_certificate\" is defined for the \"listen ... quic\" directive (server \"{name}\")"
                ),
                &l.spec.span,
            ));
        }
    }
    if !l.default.conf.get::<SslConf>().protocols.tls13 {
        return Err(ConfError::new(
            format!("\"listen ... quic\" needs TLSv1.3 in \"ssl_protocols\" (server \"{name}\")"),
            &l.spec.span,
        ));
    }
    Ok(())
}

/// The certificate of the server the client's SNI name chooses (the
/// default's when that one has none of its own).
#[derive(Debug)]
struct BySni(Arc<VirtualHosts>);

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().unwrap_or("").to_ascii_lowercase();
        let server = self.0.select(&name);
        let tls = of(server).or_else(|| of(&self.0.default))?;
        match &**tls {
            ServerTls::Accept { h2, .. } => h2.cert_resolver.resolve(hello),
            ServerTls::Reject => None,
        }
    }
}

/// A QUIC address's crypto: quinn's rustls sessions, each watched.
pub struct Crypto {
    inner: Arc<QuicServerConfig>,
    vhosts: Arc<VirtualHosts>,
}

impl Crypto {
    pub fn new(inner: QuicServerConfig, vhosts: Arc<VirtualHosts>) -> Crypto {
        Crypto {
            inner: Arc::new(inner),
            vhosts,
        }
    }
}

impl crypto::ServerConfig for Crypto {
    fn initial_keys(
        &self,
        version: u32,
        dst_cid: &quinn::ConnectionId,
    ) -> Result<Keys, crypto::UnsupportedVersion> {
        self.inner.initial_keys(version, dst_cid)
    }

    fn retry_tag(
        &self,
        version: u32,
        orig_dst_cid: &quinn::ConnectionId,
        packet: &[u8],
    ) -> [u8; 16] {
        self.inner.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(
        self: Arc<Self>,
        version: u32,
        params: &TransportParameters,
    ) -> Box<dyn Session> {
        Box::new(Watched {
            inner: self.inner.clone().start_session(version, params),
            vhosts: self.vhosts.clone(),
            hello: Some(Vec::new()),
            server_hello: false,
            seen: Handshake::default(),
        })
    }
}

/// A connection's TLS details: quinn's, with what the hellos said.
#[derive(Clone, Debug, Default)]
pub struct Handshake {
    pub server_name: Option<String>,
    /// The protocol ALPN chose.
    pub alpn: Vec<u8>,
    /// The suite chosen, as OpenSSL names it (`$ssl_cipher`).
    pub cipher: String,
    /// The key-exchange group chosen (`$ssl_curve`).
    pub curve: &'static str,
    pub resumed: bool,
    /// What the client offered (`$ssl_ciphers`, `$ssl_curves`).
    pub ciphers: Box<str>,
    pub curves: Box<str>,
}

/// Most ClientHello bytes gathered before it is whole: past that it is let
/// through unread (rustls judges it).
const MAX_HELLO: usize = 64 * 1024;

/// quinn's session, with the hellos read as they pass.
struct Watched {
    inner: Box<dyn Session>,
    vhosts: Arc<VirtualHosts>,
    /// The client's handshake bytes until its ClientHello is whole.
    hello: Option<Vec<u8>>,
    /// The ServerHello was read.
    server_hello: bool,
    seen: Handshake,
}

impl Watched {
    /// The ClientHello whole in `buf` and what came before: the server its
    /// name chooses may refuse it.
    fn client_hello(&mut self, buf: &[u8]) -> Result<(), TransportError> {
        let Some(gathered) = &mut self.hello else {
            return Ok(());
        };
        gathered.extend_from_slice(buf);
        let hello = match super::hello::client_hello(gathered) {
            None if gathered.len() < MAX_HELLO => return Ok(()),
            Some(Ok(h)) => h,
            _ => {
                self.hello = None;
                return Ok(());
            }
        };
        self.hello = None;
        self.seen.ciphers = super::config::offered_ciphers(&hello.cipher_suites);
        self.seen.curves = super::config::offered_curves(&hello.groups);
        let server = self
            .vhosts
            .select(hello.server_name.as_deref().unwrap_or(""));
        if matches!(
            of(server)
                .or_else(|| of(&self.vhosts.default))
                .map(|t| &**t),
            Some(ServerTls::Reject)
        ) {
            crate::error_log!(
                Info,
                "QUIC handshake rejected for server name \"{}\"",
                hello.server_name.as_deref().unwrap_or("")
            );
            return Err(TransportError {
                code: quinn::TransportErrorCode::crypto(UNRECOGNIZED_NAME),
                frame: None,
                reason: "handshake rejected".into(),
            });
        }
        Ok(())
    }

    /// The server's first handshake bytes: its ServerHello (unless it asked
    /// the client to retry).
    fn server_hello(&mut self, out: &[u8]) {
        if self.server_hello {
            return;
        }
        if let Some(h) = super::hello::server_hello(out) {
            self.server_hello = true;
            self.seen.cipher = h
                .cipher_suite
                .map(super::config::suite_name)
                .unwrap_or_default();
            self.seen.curve = h.group.map_or("", super::config::group_name);
            self.seen.resumed = h.resumed;
        }
    }
}

/// TLS's unrecognized_name alert, nginx's answer to a handshake for a server
/// with `ssl_reject_handshake on`.
const UNRECOGNIZED_NAME: u8 = 112;

impl Session for Watched {
    fn initial_keys(&self, dst_cid: &quinn::ConnectionId, side: quinn::Side) -> Keys {
        self.inner.initial_keys(dst_cid, side)
    }

    /// [`Handshake`], quinn's details with the hellos'.
    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        let quinn = self
            .inner
            .handshake_data()?
            .downcast::<HandshakeData>()
            .ok()?;
        Some(Box::new(Handshake {
            server_name: quinn.server_name,
            alpn: quinn.protocol.unwrap_or_default(),
            ..self.seen.clone()
        }))
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn crypto::HeaderKey>, Box<dyn crypto::PacketKey>)> {
        self.inner.early_crypto()
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.inner.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.inner.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        self.client_hello(buf)?;
        self.inner.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner.transport_parameters()
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        let from = buf.len();
        let keys = self.inner.write_handshake(buf);
        self.server_hello(&buf[from..]);
        keys
    }

    fn next_1rtt_keys(&mut self) -> Option<crypto::KeyPair<Box<dyn crypto::PacketKey>>> {
        self.inner.next_1rtt_keys()
    }

    fn is_valid_retry(
        &self,
        orig_dst_cid: &quinn::ConnectionId,
        header: &[u8],
        payload: &[u8],
    ) -> bool {
        self.inner.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), crypto::ExportKeyingMaterialError> {
        self.inner.export_keying_material(output, label, context)
    }
}
