//! TLS with rustls: `listen … ssl`, the `ssl_*` directives, the handshake
//! (server chosen by SNI, ALPN `h2`/`http/1.1`) and the encrypted stream the
//! HTTP code runs over.
//!
//! - [`conf`]: the directives and the settings they make;
//! - [`config`]: a server's settings turned into rustls configurations
//!   (certificates checked at load, cipher strings mapped, shared session
//!   store and ticket keys);
//! - [`stream`]: the handshake and [`stream::TlsStream`], a
//!   [`crate::server::socket::Stream`] so HTTP/1 serves it as it serves TCP,
//!   without sendfile (file bodies are read and encrypted).

pub mod conf;
pub mod config;
pub mod stream;
use crate::core::module::{Hooks, Module, VarDef};

/// TLS on listeners (rustls): certificates per server chosen by SNI, and
/// the `$ssl_*` variables.
pub static MODULE: Module = Module {
    name: "ssl",
    nginx: &["http_ssl_module"],
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
    ],
    hooks: Hooks {
        server: Some(config::build_server),
        listen: Some(config::check_listen),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
