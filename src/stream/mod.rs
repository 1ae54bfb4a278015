//! The stream layer: TCP, unix-socket and UDP sessions of the `stream {}`
//! block (nginx's stream module), beside the http layer.
//!
//! A stream listener (`conf::load::Listener::stream`) holds one server. Each
//! accepted connection, or each UDP client address ([`udp`]), is a
//! [`session::Session`]: a `core::request::Request` without a request line
//! (so the variables, `map`, `geo`, `split_clients`, `set`, the access and
//! limit hooks and the log formats of the http side work unchanged over it)
//! plus the client's side ([`session::Client`]). Its phases, in nginx's
//! order: post-accept (realip, from the PROXY header), preaccess (`set`,
//! then `limit_conn`), access (`allow`/`deny`), ssl (on `listen … ssl`, the
//! handshake of `modules::ssl::stream::accept`, the http side's, after
//! which the client is a TLS stream), preread (the client's first bytes,
//! at most `preread_buffer_size` within `preread_timeout`, for the modules'
//! preread hooks: `ssl_preread`), content (the server's [`Handler`]:
//! `proxy_pass` or `return`), log (`access_log`). Several servers may
//! listen on one address: the TLS server name, from the handshake or the
//! preread ClientHello, chooses among them by `server_name`. A session
//! holds the configuration snapshot it started with to its end, so a reload
//! never cuts an established session.

pub mod session;
pub mod udp;

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Ctx, Def, ONE, Scope};
use crate::conf::values::{set_once, size, time};
use crate::core::module::{Hooks, Module, VarDef};
use crate::core::request::BoxFuture;
use crate::core::vars::push_u64;
use crate::settings;
use session::Session;
use std::sync::Arc;
use std::time::Duration;

/// What a stream server does with a session once its access phases let it
/// through (`proxy_pass`, `return`): its content handler.
pub trait Handler: Send + Sync + std::fmt::Debug {
    /// Serve the session; the status it ends with (`$status`: 200, or 502,
    /// 500 …).
    fn serve<'a>(&'a self, s: &'a mut Session<'_>) -> BoxFuture<'a, u16>;
}

/// A stream server's content handler, in its level's module data.
#[derive(Clone, Debug)]
pub struct Content(pub Arc<dyn Handler>);

/// Make `h` the stream server's content handler; a second one is refused.
pub fn set_content(s: &mut Scope<'_>, d: &Directive, h: Arc<dyn Handler>) -> Result<(), ConfError> {
    let ext = s.level_ext();
    if ext.get::<Content>().is_some() {
        return Err(ConfError::new(
            format!("\"{}\" directive is duplicate", d.name),
            &d.span,
        ));
    }
    ext.insert(Content(h));
    Ok(())
}

settings! {
    /// Settings of the stream core.
    pub struct StreamConf / StreamConfSet {
        /// `proxy_protocol_timeout`: the PROXY header must arrive within this.
        pub proxy_protocol_timeout: Duration = Duration::from_secs(30),
        /// `preread_buffer_size`: the most a preread phase reads.
        pub preread_buffer_size: u64 = 16384,
        /// `preread_timeout`: how long a preread phase waits.
        pub preread_timeout: Duration = Duration::from_secs(30),
    }
}

static DIRECTIVES: &[Def] = &[
    Def {
        name: "proxy_protocol_timeout",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<StreamConfSet>().proxy_protocol_timeout,
                time(d, 0)?,
                d,
            )
        },
        syntax: "proxy_protocol_timeout time;",
        default: "30s",
        doc: "How long a connection on a `listen … proxy_protocol` address may take to send its PROXY protocol header; one that takes longer is closed.\n\n```nginx\nproxy_protocol_timeout 5s;\n```",
    },
    Def {
        name: "preread_buffer_size",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<StreamConfSet>().preread_buffer_size,
                size(d, 0)?,
                d,
            )
        },
        syntax: "preread_buffer_size size;",
        default: "16k",
        doc: "The most a preread phase reads of a session before its content handler (the client's first bytes, looked at by `ssl_preread`, are then passed to the upstream as they came).\n\n```nginx\npreread_buffer_size 32k;\n```",
    },
    Def {
        name: "preread_timeout",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<StreamConfSet>().preread_timeout,
                time(d, 0)?,
                d,
            )
        },
        syntax: "preread_timeout time;",
        default: "30s",
        doc: "How long a preread phase waits for the client's first bytes.\n\n```nginx\npreread_timeout 10s;\n```",
    },
];

/// The session a variable's getter is asked about (`None` over HTTP).
fn info(req: &crate::core::request::Request<'_>) -> Option<std::rc::Rc<session::Info>> {
    req.state.ext.get::<session::Info>()
}

/// A stream server without a content handler is refused at load, as nginx.
fn check_server(b: &mut crate::core::module::StreamServerBuild<'_>) -> Result<(), ConfError> {
    if b.phases.ext.get::<Content>().is_none() {
        return Err(ConfError::new("no handler for server", b.span));
    }
    Ok(())
}

/// The stream core: its directives beyond `stream`, `server` and `listen`
/// (which the configuration core reads), the session variables.
pub static MODULE: Module = Module {
    name: "stream",
    nginx: &["stream"],
    directives: &[DIRECTIVES],
    settings: Some(&StreamConf::KIND),
    variables: &[
        VarDef::name("protocol", |req, _, out| {
            if let Some(i) = info(req) {
                out.extend_from_slice(if i.udp { b"UDP" } else { b"TCP" });
            }
        }),
        VarDef::name("bytes_received", |req, _, out| {
            if let Some(i) = info(req) {
                push_u64(out, i.received.get());
            }
        }),
        VarDef::name("session_time", |req, _, out| {
            if info(req).is_some() {
                let ms = crate::core::clock::unix_millis().saturating_sub(req.start_ms);
                crate::core::clock::push_millis_as_secs(out, ms);
            }
        }),
    ],
    hooks: Hooks {
        stream_server: Some(check_server),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
