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

use super::conf::SslConf;
use super::config::{ServerTls, of};
use crate::conf::ast::ConfError;
use crate::core::module::ListenBuild;
use crate::core::route::VirtualHosts;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
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
