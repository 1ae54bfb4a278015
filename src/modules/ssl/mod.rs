//! TLS with rustls: `listen … ssl`, the `ssl_*` directives, the handshake
//! (server chosen by SNI, ALPN `h2`/`http/1.1`) and the encrypted stream the
//! HTTP code runs over.
//!
//! - [`conf`]: the directives and the settings they make;
//! - [`config`]: a server's settings turned into rustls configurations
//!   (certificates checked at load, cipher strings mapped, shared session
//!   store and ticket keys);
//! - [`quic`]: the one configuration of a `listen … quic` address, and its
//!   sessions read on the way ([`hello`]);
//! - [`stream`]: the handshake and [`stream::TlsStream`], a
//!   [`crate::server::socket::Stream`] so HTTP/1 serves it as it serves TCP,
//!   without sendfile (file bodies are read and encrypted).

pub mod client;
pub mod conf;
pub mod config;
pub mod hello;
pub mod ocsp;
pub mod password;
pub mod quic;
pub mod stapling;
pub mod stream;
pub mod tickets;
pub mod x509;
use crate::core::module::{Hooks, Module, VarDef};
use crate::core::request::{ClientVerify, Request};

/// The client's certificate (DER), when it sent one.
fn client_cert<'r>(req: &'r Request<'_>) -> Option<&'r [u8]> {
    req.tls.as_ref()?.client_certs.first().map(Vec::as_slice)
}

/// A detail of the client's certificate, written into `out`.
fn detail(req: &Request<'_>, out: &mut Vec<u8>, f: fn(&x509::Details) -> String) {
    if let Some(d) = client_cert(req).and_then(x509::details) {
        out.extend_from_slice(f(&d).as_bytes());
    }
}

/// `$ssl_client_escaped_cert`: the PEM with everything but letters, digits
/// and `!'()*-._~` percent-encoded (nginx's URI-component escaping).
fn escape_component(s: &[u8], out: &mut Vec<u8>) {
    for &b in s {
        if b.is_ascii_alphanumeric() || b"!'()*-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
}

/// TLS on listeners (rustls): certificates per server chosen by SNI, and
/// the `$ssl_*` variables.
pub static MODULE: Module = Module {
    name: "ssl",
    nginx: &["http_ssl_module", "stream_ssl_module"],
    directives: &[conf::DIRECTIVES, conf::IGNORED],
    settings: Some(&conf::SslConf::KIND),
    variables: &[
        VarDef::name("ssl_protocol", |req, _, out| {
            if let Some(t) = &req.tls {
                out.extend_from_slice(t.protocol.as_bytes());
            }
        }),
        VarDef::name("ssl_cipher", |req, _, out| {
            if let Some(t) = &req.tls {
                out.extend_from_slice(t.cipher.as_bytes());
            }
        }),
        VarDef::name("ssl_alpn_protocol", |req, _, out| {
            if let Some(t) = &req.tls {
                out.extend_from_slice(&t.alpn);
            }
        }),
        VarDef::name("ssl_server_name", |req, _, out| {
            if let Some(n) = req.tls.as_ref().and_then(|t| t.server_name.as_deref()) {
                out.extend_from_slice(n.as_bytes());
            }
        }),
        VarDef::name("ssl_curve", |req, _, out| {
            if let Some(t) = &req.tls {
                out.extend_from_slice(t.curve.as_bytes());
            }
        }),
        VarDef::name("ssl_curves", |req, _, out| {
            if let Some(t) = &req.tls {
                out.extend_from_slice(t.curves.as_bytes());
            }
        }),
        VarDef::name("ssl_session_reused", |req, _, out| {
            if let Some(t) = &req.tls {
                out.push(if t.resumed { b'r' } else { b'.' });
            }
        }),
        VarDef::name("ssl_session_id", |req, _, out| {
            if let Some(t) = &req.tls {
                out.extend_from_slice(t.session_id.as_bytes());
            }
        }),
        VarDef::name("ssl_ciphers", |req, _, out| {
            if let Some(t) = &req.tls {
                out.extend_from_slice(t.ciphers.as_bytes());
            }
        }),
        VarDef::name("ssl_client_verify", |req, _, out| {
            if let Some(t) = &req.tls {
                match &t.client_verify {
                    ClientVerify::None => out.extend_from_slice(b"NONE"),
                    ClientVerify::Success => out.extend_from_slice(b"SUCCESS"),
                    ClientVerify::Failed { reason, .. } => {
                        out.extend_from_slice(b"FAILED:");
                        out.extend_from_slice(reason.as_bytes());
                    }
                }
            }
        }),
        VarDef::name("ssl_client_s_dn", |req, _, out| {
            detail(req, out, |d| d.subject.clone())
        }),
        VarDef::name("ssl_client_i_dn", |req, _, out| {
            detail(req, out, |d| d.issuer.clone())
        }),
        VarDef::name("ssl_client_s_dn_legacy", |req, _, out| {
            detail(req, out, |d| d.subject_legacy.clone())
        }),
        VarDef::name("ssl_client_i_dn_legacy", |req, _, out| {
            detail(req, out, |d| d.issuer_legacy.clone())
        }),
        VarDef::name("ssl_client_serial", |req, _, out| {
            detail(req, out, |d| d.serial.clone())
        }),
        VarDef::name("ssl_client_v_start", |req, _, out| {
            detail(req, out, |d| d.not_before.clone())
        }),
        VarDef::name("ssl_client_v_end", |req, _, out| {
            detail(req, out, |d| d.not_after.clone())
        }),
        VarDef::name("ssl_client_v_remain", |req, _, out| {
            detail(req, out, |d| {
                let now = crate::core::clock::unix_millis() as i64 / 1000;
                ((d.not_after_secs - now).max(0) / 86400).to_string()
            })
        }),
        VarDef::name("ssl_client_fingerprint", |req, _, out| {
            if let Some(c) = client_cert(req) {
                use sha1::Digest;
                for b in sha1::Sha1::digest(c) {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
            }
        }),
        VarDef::name("ssl_client_raw_cert", |req, _, out| {
            if let Some(c) = client_cert(req) {
                out.extend_from_slice(client::pem(c).as_bytes());
            }
        }),
        VarDef::name("ssl_client_cert", |req, _, out| {
            // Deprecated in nginx: the PEM with a tab after every inner line end.
            if let Some(c) = client_cert(req) {
                let pem = client::pem(c);
                let pem = pem.strip_suffix('\n').unwrap_or(&pem);
                out.extend_from_slice(pem.replace('\n', "\n\t").as_bytes());
            }
        }),
        VarDef::name("ssl_client_escaped_cert", |req, _, out| {
            if let Some(c) = client_cert(req) {
                escape_component(client::pem(c).as_bytes(), out);
            }
        }),
    ],
    hooks: Hooks {
        server: Some(config::build_server),
        stream_server: Some(config::build_stream_server),
        listen: Some(config::check_listen),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
