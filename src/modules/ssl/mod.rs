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
