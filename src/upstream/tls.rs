//! TLS to upstream peers (rustls as a client), for any handler whose
//! protocol runs over it: what a handler configures ([`Spec`] → [`Client`]),
//! what one connection is made with ([`Dial`]: the client and the peer's
//! name), the handshake, and [`TlsConn`], the encrypted connection
//! [`super::pool::UpConn`] wraps so that handlers read and write it as they
//! do a plain one.
//!
//! Certificates are checked as nginx (OpenSSL) checks them, not as webpki
//! does: with verification off (nginx's default) any certificate is taken;
//! with it on, the chain must end at a trusted certificate within the
//! verify depth (intermediates counted), every certificate in it be within
//! its validity, not revoked by the configured CRLs (which must cover every
//! certificate below the trusted one), and the name match a DNS or IP
//! subjectAltName, else the common name when there is no DNS name. X.509 v1
//! certificates (what `openssl req -x509` makes without extensions) are
//! accepted, as OpenSSL accepts them. The handshake's signatures are always
//! checked against the certificate's key.

use crate::server::tls_io;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConnection, ResolvesClientCert, Resumption};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme, SupportedCipherSuite};
use std::cell::{Cell, RefCell};
use std::io::{self, ErrorKind, IoSlice};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpStream;

/// How a handler's connections speak TLS, as its directives say.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Check the peer's certificate (`*_ssl_verify`).
    pub verify: bool,
    /// Intermediate certificates allowed between the peer's and a trusted one.
    pub depth: u32,
    /// Trusted certificates (`*_ssl_trusted_certificate`).
    pub trusted: Arc<[CertificateDer<'static>]>,
    /// Revocation lists (`*_ssl_crl`), DER.
    pub crls: Arc<[Vec<u8>]>,
    /// Send the name as SNI (`*_ssl_server_name`).
    pub sni: bool,
    pub tls12: bool,
    pub tls13: bool,
    /// TLS 1.2 suites to offer (`None`: all rustls has); TLS 1.3 suites
    /// are always all offered.
    pub tls12_suites: Option<Vec<SupportedCipherSuite>>,
    /// Resume sessions (`*_ssl_session_reuse`).
    pub session_reuse: bool,
    /// The certificate presented to the peer (`*_ssl_certificate`).
    pub client_cert: Option<Arc<CertifiedKey>>,
    /// The protocols offered by ALPN (`h2` for gRPC; none for HTTP/1.x).
    pub alpn: &'static [&'static [u8]],
}

/// A rustls client configuration built from a [`Spec`]; its sessions are
/// shared by every connection made with it, in every worker.
#[derive(Debug)]
pub struct Client {
    pub config: Arc<ClientConfig>,
    /// A digest of the [`Spec`] it was built from: keeps pooled connections
    /// made with other settings apart, and finds those made with the same
    /// ones after a reload.
    id: u64,
}

/// What one connection is made with: the client and the peer's name.
#[derive(Clone, Debug)]
pub struct Dial {
    pub client: Arc<Client>,
    /// The name checked against the certificate (and sent as SNI when on).
    pub name: ServerName<'static>,
    /// Keys the keep-alive pool: connections made with another
    /// configuration or name are not handed out for this one.
    pub tag: u64,
}

impl Dial {
    /// `name` as given (a host, `[v6]` or an address; a `:port` is
    /// dropped, as nginx does). `Err` names what is wrong with it.
    pub fn new(client: Arc<Client>, name: &str) -> Result<Dial, String> {
        let host = strip_port(name);
        let server = ServerName::try_from(host.to_string())
            .map_err(|_| format!("invalid upstream SSL name \"{name}\""))?;
        let tag = {
            use std::hash::{Hash, Hasher};
            let mut h = rustc_hash::FxHasher::default();
            client.id.hash(&mut h);
            host.to_ascii_lowercase().hash(&mut h);
            h.finish() | 1
        };
        Ok(Dial {
            client,
            name: server,
            tag,
        })
    }
}

/// `host[:port]`, `[v6][:port]` → the host (without brackets).
fn strip_port(name: &str) -> &str {
    if let Some(rest) = name.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match name.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => name,
    }
}

impl Spec {
    fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        (self.verify, self.depth, self.sni, self.tls12, self.tls13).hash(&mut h);
        self.session_reuse.hash(&mut h);
        self.alpn.hash(&mut h);
        for c in self.trusted.iter() {
            c.as_ref().hash(&mut h);
        }
        self.crls.hash(&mut h);
        if let Some(s) = &self.tls12_suites {
            for suite in s {
                u16::from(suite.suite()).hash(&mut h);
            }
        }
        if let Some(k) = &self.client_cert {
            for c in &k.cert {
                c.as_ref().hash(&mut h);
            }
        }
        h.finish()
    }
}

impl Client {
    pub fn build(spec: &Spec) -> Result<Arc<Client>, String> {
        let mut provider = rustls::crypto::ring::default_provider();
        if let Some(tls12) = &spec.tls12_suites {
            let tls13 = provider
                .cipher_suites
                .iter()
                .filter(|s| s.tls13().is_some());
            provider.cipher_suites = tls13.copied().chain(tls12.iter().copied()).collect();
        }
        let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
            (spec.tls13, &rustls::version::TLS13),
            (spec.tls12, &rustls::version::TLS12),
        ]
        .into_iter()
        .filter_map(|(on, v)| on.then_some(v))
        .collect();
        let verifier = Arc::new(Verifier {
            verify: spec.verify,
            depth: spec.depth,
            trusted: spec.trusted.clone(),
            crls: spec.crls.clone(),
            algs: provider.signature_verification_algorithms,
        });
        let builder = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&versions)
            .map_err(|e| format!("TLS settings refused: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match &spec.client_cert {
            Some(k) => builder.with_client_cert_resolver(Arc::new(OneCert(k.clone()))),
            None => builder.with_no_client_auth(),
        };
        config.enable_sni = spec.sni;
        config.alpn_protocols = spec.alpn.iter().map(|p| p.to_vec()).collect();
        config.resumption = if spec.session_reuse {
            Resumption::in_memory_sessions(256)
        } else {
            Resumption::disabled()
        };
        Ok(Arc::new(Client {
            config: Arc::new(config),
            id: spec.digest(),
        }))
    }
}

/// The one client certificate of a configuration.
#[derive(Debug)]
struct OneCert(Arc<CertifiedKey>);

impl ResolvesClientCert for OneCert {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
    fn has_certs(&self) -> bool {
        true
    }
}

/// A handshake that failed (the peer's certificate refused, an alert, a
/// protocol error): the message says why, as nginx logs it. The verifier
/// hands rustls one too, for the certificate it refuses.
#[derive(Debug)]
pub struct HandshakeFailed(pub String);

impl std::fmt::Display for HandshakeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HandshakeFailed {}

/// Whether `e` is a TLS handshake's failure (else the socket's).
pub fn is_handshake_error(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<HandshakeFailed>())
}

/// nginx's certificate checks (see the module documentation).
#[derive(Debug)]
struct Verifier {
    verify: bool,
    depth: u32,
    trusted: Arc<[CertificateDer<'static>]>,
    crls: Arc<[Vec<u8>]>,
    algs: WebPkiSupportedAlgorithms,
}

fn refused(msg: String) -> rustls::Error {
    rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
        Arc::new(HandshakeFailed(msg)),
    )))
}

/// An OpenSSL verification error as nginx logs it.
fn verify_error(code: u32, text: &str) -> rustls::Error {
    refused(format!(
        "upstream SSL certificate verify error: ({code}:{text})"
    ))
}

type Cert<'a> = x509_parser::certificate::X509Certificate<'a>;

fn parse(der: &[u8]) -> Result<Cert<'_>, rustls::Error> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|_| rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding))
}

fn issued_by(cert: &Cert<'_>, issuer: &Cert<'_>) -> bool {
    cert.issuer().as_raw() == issuer.subject().as_raw()
        && cert.verify_signature(Some(issuer.public_key())).is_ok()
}

fn self_signed(c: &Cert<'_>) -> bool {
    c.issuer().as_raw() == c.subject().as_raw()
}

impl Verifier {
    /// The chain from `leaf` to a trusted certificate: its certificates, the
    /// trusted one last.
    fn chain<'a>(
        &self,
        leaf: Cert<'a>,
        pool: &'a [Cert<'a>],
        trusted: &'a [Cert<'a>],
        leaf_der: &[u8],
    ) -> Result<Vec<Cert<'a>>, rustls::Error> {
        let mut chain = vec![leaf];
        // A trusted certificate itself (a self-signed peer certificate).
        if self.trusted.iter().any(|t| t.as_ref() == leaf_der) && self_signed(&chain[0]) {
            return Ok(chain);
        }
        loop {
            let cur = chain.last().expect("not empty");
            if let Some(t) = trusted.iter().find(|t| issued_by(cur, t)) {
                chain.push(t.clone());
                return Ok(chain);
            }
            if self_signed(cur) {
                return Err(if chain.len() == 1 {
                    verify_error(18, "self-signed certificate")
                } else {
                    verify_error(19, "self-signed certificate in certificate chain")
                });
            }
            let Some(next) = pool.iter().find(|p| !self_signed(p) && issued_by(cur, p)) else {
                return Err(verify_error(20, "unable to get local issuer certificate"));
            };
            if chain.len() > self.depth as usize || chain.len() > 16 {
                return Err(verify_error(22, "certificate chain too long"));
            }
            chain.push(next.clone());
        }
    }

    /// Each certificate but the trusted one checked against the CRLs: one
    /// from its issuer must be there, current, and not list it.
    fn check_crls(&self, chain: &[Cert<'_>], now: i64) -> Result<(), rustls::Error> {
        let crls: Vec<_> = self
            .crls
            .iter()
            .filter_map(|d| x509_parser::parse_x509_crl(d).ok().map(|(_, c)| c))
            .collect();
        for (i, cert) in chain
            .iter()
            .enumerate()
            .take(chain.len().saturating_sub(1).max(1))
        {
            let issuer = chain.get(i + 1).unwrap_or(cert);
            let Some(crl) = crls.iter().find(|c| {
                c.issuer().as_raw() == cert.issuer().as_raw()
                    && c.verify_signature(issuer.public_key()).is_ok()
            }) else {
                return Err(verify_error(3, "unable to get certificate CRL"));
            };
            if crl.last_update().timestamp() > now {
                return Err(verify_error(11, "CRL is not yet valid"));
            }
            if crl.next_update().is_some_and(|t| t.timestamp() < now) {
                return Err(verify_error(12, "CRL has expired"));
            }
            if crl
                .iter_revoked_certificates()
                .any(|r| r.raw_serial() == cert.raw_serial())
            {
                return Err(verify_error(23, "certificate revoked"));
            }
        }
        Ok(())
    }

    fn spki<'a>(
        &self,
        cert: &'a CertificateDer<'_>,
    ) -> Result<SubjectPublicKeyInfoDer<'a>, rustls::Error> {
        let c = parse(cert.as_ref())?;
        let raw = c.public_key().raw;
        // The slice borrows `cert`, not the parsed certificate.
        let off = raw.as_ptr() as usize - cert.as_ref().as_ptr() as usize;
        Ok(SubjectPublicKeyInfoDer::from(
            &cert.as_ref()[off..off + raw.len()],
        ))
    }
}

/// Does the certificate name `name`? DNS subjectAltNames (a `*` as the
/// whole first label), IP ones for an address, else (no DNS name) the
/// common names, as OpenSSL's X509_check_host.
pub fn names_host(cert: &Cert<'_>, name: &str) -> bool {
    use x509_parser::extensions::GeneralName;
    let ip: Option<std::net::IpAddr> = name.parse().ok();
    let mut dns_seen = false;
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => {
                    dns_seen = true;
                    if ip.is_none() && dns_match(d, name) {
                        return true;
                    }
                }
                GeneralName::IPAddress(b) => {
                    let got = match b.len() {
                        4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(*b).unwrap())),
                        16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(*b).unwrap())),
                        _ => None,
                    };
                    if got.is_some() && got == ip {
                        return true;
                    }
                }
                _ => {}
            }
        }
    }
    if dns_seen || ip.is_some() {
        return false;
    }
    cert.subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .any(|cn| dns_match(cn, name))
}

fn dns_match(pattern: &str, name: &str) -> bool {
    let name = name.trim_end_matches('.');
    if let Some(rest) = pattern.strip_prefix("*.") {
        // One whole label, never the last two.
        return rest.contains('.')
            && name
                .split_once('.')
                .is_some_and(|(first, tail)| !first.is_empty() && tail.eq_ignore_ascii_case(rest));
    }
    pattern.eq_ignore_ascii_case(name)
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.verify {
            return Ok(ServerCertVerified::assertion());
        }
        let now = now.as_secs() as i64;
        let leaf = parse(end_entity.as_ref())?;
        let pool = intermediates
            .iter()
            .filter_map(|d| parse(d.as_ref()).ok())
            .collect::<Vec<_>>();
        let trusted = self
            .trusted
            .iter()
            .filter_map(|d| parse(d.as_ref()).ok())
            .collect::<Vec<_>>();
        let chain = self.chain(leaf, &pool, &trusted, end_entity.as_ref())?;
        for c in &chain {
            let v = c.validity();
            if v.not_before.timestamp() > now {
                return Err(verify_error(9, "certificate is not yet valid"));
            }
            if v.not_after.timestamp() < now {
                return Err(verify_error(10, "certificate has expired"));
            }
        }
        if !self.crls.is_empty() {
            self.check_crls(&chain, now)?;
        }
        let name = match server_name {
            ServerName::DnsName(d) => d.as_ref().to_string(),
            ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
            _ => String::new(),
        };
        if !names_host(&chain[0], &name) {
            return Err(refused(format!(
                "upstream SSL certificate does not match \"{name}\""
            )));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        crate::modules::ssl::client::holds_key(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let spki = self.spki(cert)?;
        rustls::crypto::verify_tls13_signature_with_raw_key(message, &spki, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The provider the configurations are built with (for loading keys).
pub fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// A TLS connection to a peer over a non-blocking TCP socket, driven by
/// readiness as the plain one is (`server::tls_io`). Records still queued
/// after a write go out on the next write or before the next wait for a
/// reply ([`TlsConn::readable`]). Plaintext decrypted and not yet read
/// counts as readable.
pub struct TlsConn {
    pub(super) tcp: TcpStream,
    tls: RefCell<ClientConnection>,
    closing: Cell<bool>,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn").field("tcp", &self.tcp).finish()
    }
}

fn tls_error(e: rustls::Error) -> io::Error {
    let msg = match &e {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(o))
            if o.0.is::<HandshakeFailed>() =>
        {
            o.0.to_string()
        }
        e => format!("SSL_do_handshake() failed ({e})"),
    };
    io::Error::new(ErrorKind::InvalidData, HandshakeFailed(msg))
}

impl TlsConn {
    pub fn try_flush(&self) -> io::Result<()> {
        tls_io::flush(&self.tcp, &mut self.tls.borrow_mut())
    }

    /// Decrypted bytes handed to `sink` (which says how many it took: 0 at
    /// the end of the stream); `WouldBlock` when none are at hand.
    fn read_plain(&self, sink: &mut dyn FnMut(&[u8]) -> usize) -> io::Result<usize> {
        tls_io::read_plain(&self.tcp, &mut self.tls.borrow_mut(), sink)
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_plain(&mut |c| {
            let n = c.len().min(buf.len());
            buf[..n].copy_from_slice(&c[..n]);
            n
        })
    }

    pub fn try_read_buf(&self, buf: &mut bytes::BytesMut) -> io::Result<usize> {
        tls_io::read_buf(&self.tcp, &mut self.tls.borrow_mut(), buf)
    }

    /// Decrypted bytes wait inside rustls (or its end was received).
    fn has_plaintext(&self) -> bool {
        tls_io::has_plaintext(&mut self.tls.borrow_mut())
    }

    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        tls_io::write_plain(&self.tcp, &mut self.tls.borrow_mut(), bufs)
    }

    /// Queued records sent first, then the wait for plaintext (or an end).
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            match self.try_flush() {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::task::ready!(self.tcp.poll_write_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        self.poll_read_ready(cx)
    }

    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_plaintext() {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }

    /// Plaintext at hand, or bytes queued on the socket.
    pub fn queued(&self) -> bool {
        self.has_plaintext() || crate::sys::peek(self.tcp.as_raw_fd(), &mut [0u8; 1]).is_ok()
    }

    /// close_notify queued and sent if the socket takes it, then the write
    /// side shut.
    pub fn shutdown_write(&self) {
        if !self.closing.replace(true) {
            self.tls.borrow_mut().send_close_notify();
        }
        let _ = self.try_flush();
        let _ = socket2::SockRef::from(&self.tcp).shutdown(std::net::Shutdown::Write);
    }
}

impl Drop for TlsConn {
    /// A close_notify for the peer, if the socket takes it at once.
    fn drop(&mut self) {
        if !self.closing.get() {
            self.tls.get_mut().send_close_notify();
            let _ = self.try_flush();
        }
    }
}

/// The handshake on a connected socket (the caller bounds its time).
pub async fn handshake(tcp: TcpStream, dial: &Dial) -> io::Result<TlsConn> {
    let mut conn =
        ClientConnection::new(dial.client.config.clone(), dial.name.clone()).map_err(tls_error)?;
    match tls_io::handshake(&tcp, &mut conn, &mut || {}).await {
        Ok(()) => {}
        Err(tls_io::HandshakeEnd::Closed) => {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                HandshakeFailed("peer closed connection in SSL handshake".into()),
            ));
        }
        Err(tls_io::HandshakeEnd::Tls(e)) => return Err(tls_error(e)),
        Err(tls_io::HandshakeEnd::Io(e)) => return Err(e),
    }
    Ok(TlsConn {
        tcp,
        tls: RefCell::new(conn),
        closing: Cell::new(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_their_port() {
        assert_eq!(strip_port("backend:123"), "backend");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]:8443"), "::1");
        assert_eq!(strip_port("::1"), "::1");
    }

    #[test]
    fn wildcards_cover_one_label() {
        assert!(dns_match("*.example.com", "foo.example.com"));
        assert!(!dns_match("*.example.com", "a.b.example.com"));
        assert!(!dns_match("*.example.com", "example.com"));
        assert!(!dns_match("*.com", "example.com"));
        assert!(dns_match("Example.COM", "example.com"));
    }
}
