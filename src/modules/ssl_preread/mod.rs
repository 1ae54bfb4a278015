//! `ssl_preread` (nginx's ngx_stream_ssl_preread_module): a stream
//! session's TLS ClientHello read in the preread phase without terminating
//! TLS, so that `map` can route TLS by its server name or ALPN protocols
//! (`$ssl_preread_server_name`, `$ssl_preread_alpn_protocols`,
//! `$ssl_preread_protocol`) while the bytes pass to the upstream as they
//! came. The server name also chooses the session's server among those of
//! its address (`server_name`).

mod parse;

use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::{flag, set_once};
use crate::core::module::{Hooks, Module, Preread, VarDef};
use crate::core::request::Request;
use crate::settings;
use parse::{Hello, Parsed};

settings! {
    /// `ssl_preread` of a stream level.
    pub struct SslPrereadConf / SslPrereadConfSet {
        pub enabled: bool = false,
    }
}

static DIRECTIVES: &[Def] = &[Def {
    name: "ssl_preread",
    ignored: false,
    ctx: Ctx::SS,
    arity: ONE,
    set: |s, d, _| {
        set_once(
            &mut s.loc().get_mut::<SslPrereadConfSet>().enabled,
            flag(d, 0)?,
            d,
        )
    },
    syntax: "ssl_preread on | off;",
    default: "off",
    doc: "Reads the TLS ClientHello a session starts with, in the preread phase (up to `preread_buffer_size`, within `preread_timeout`), without terminating TLS: its server name, ALPN protocols and version become `$ssl_preread_server_name`, `$ssl_preread_alpn_protocols` and `$ssl_preread_protocol`, and the server name chooses among the servers of the address by `server_name`. Bytes that are no ClientHello leave the variables empty. The bytes read go to the upstream as they came.\n\n```nginx\nmap $ssl_preread_server_name $backend {\n    db.example.com  db;\n    default         web;\n}\nserver {\n    listen 443;\n    ssl_preread on;\n    proxy_pass $backend;\n}\n```",
}];

/// The preread hook: the ClientHello parsed from the bytes so far, kept
/// for the variables once whole.
fn preread(req: &mut Request<'_>, bytes: &[u8]) -> Preread {
    if !req.conf.get::<SslPrereadConf>().enabled {
        return Preread::Done;
    }
    match parse::parse(bytes) {
        Parsed::More => Preread::More,
        Parsed::NotHello => Preread::Done,
        Parsed::Hello(h) => {
            let name = host(&h.server_name);
            req.state.ext.insert(std::rc::Rc::new(h));
            match name {
                Some(n) => Preread::Name(n.into()),
                None => Preread::Done,
            }
        }
    }
}

/// A server name fit to choose a server by: lowercase, without a final dot.
fn host(name: &[u8]) -> Option<String> {
    let name = name.strip_suffix(b".").unwrap_or(name);
    let fit = !name.is_empty()
        && name
            .iter()
            .all(|&b| b.is_ascii_graphic() && b != b'/' && b != b'\\');
    fit.then(|| String::from_utf8_lossy(name).to_ascii_lowercase())
}

fn hello(req: &Request<'_>) -> Option<std::rc::Rc<Hello>> {
    req.state.ext.get::<Hello>()
}

/// `ssl_preread` and its variables.
pub static MODULE: Module = Module {
    name: "ssl_preread",
    nginx: &["stream_ssl_preread_module"],
    directives: &[DIRECTIVES],
    settings: Some(&SslPrereadConf::KIND),
    variables: &[
        VarDef::name("ssl_preread_server_name", |req, _, out| {
            if let Some(h) = hello(req) {
                out.extend_from_slice(&h.server_name);
            }
        }),
        VarDef::name("ssl_preread_alpn_protocols", |req, _, out| {
            if let Some(h) = hello(req) {
                out.extend_from_slice(&h.alpn);
            }
        }),
        VarDef::name("ssl_preread_protocol", |req, _, out| {
            if let Some(h) = hello(req) {
                out.extend_from_slice(h.protocol().as_bytes());
            }
        }),
    ],
    hooks: Hooks {
        preread: Some(preread),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
