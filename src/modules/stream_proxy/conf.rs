//! Directives of the stream proxy: `proxy_pass` and the settings of the
//! connection to the upstream, as nginx's ngx_stream_proxy_module.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, ONE};
use crate::conf::values::{flag, number, set_once, size, time};
use crate::core::vars::Template;
use crate::settings;
use crate::upstream::bind::BindConf;
use std::sync::Arc;
use std::time::Duration;

settings! {
    /// Stream proxy settings of one level (stream, server).
    pub struct StreamProxyConf / StreamProxyConfSet {
        pub connect_timeout: Duration = Duration::from_secs(60),
        /// `proxy_timeout`: a session with nothing read or written on
        /// either side for this long is closed.
        pub timeout: Duration = Duration::from_secs(600),
        pub next_upstream: bool = true,
        /// `proxy_next_upstream_tries` (0: no limit).
        pub next_upstream_tries: u32 = 0,
        /// `proxy_next_upstream_timeout` (zero: no limit).
        pub next_upstream_timeout: Duration = Duration::ZERO,
        pub buffer_size: usize = 16384,
        /// `proxy_upload_rate`, `proxy_download_rate` (bytes a second, 0:
        /// no limit); variables allowed.
        pub upload_rate: Option<Arc<Template>> = None,
        pub download_rate: Option<Arc<Template>> = None,
        /// `proxy_protocol on`: a PROXY protocol v1 header goes first.
        pub proxy_protocol: bool = false,
        pub bind: Option<BindConf> = None,
        pub socket_keepalive: bool = false,
        pub half_close: bool = false,
        /// `proxy_responses` of a UDP session (`None`: unlimited).
        pub responses: Option<u64> = None,
        /// `proxy_requests` of a UDP session (`None`: unlimited).
        pub requests: Option<u64> = None,
        /// `proxy_ssl on`: TLS to the upstream (`proxy_ssl_*`).
        pub ssl: bool = false,
    }
}

fn set<T>(
    d: &Directive,
    s: &mut crate::conf::table::Scope<'_>,
    f: impl FnOnce(&mut StreamProxyConfSet) -> &mut Option<T>,
    v: T,
) -> Result<(), ConfError> {
    set_once(f(s.loc().get_mut::<StreamProxyConfSet>()), v, d)
}

/// A rate: a size, or a template of one rendered per session.
fn rate(d: &Directive, e: &mut crate::conf::table::Env) -> Result<Arc<Template>, ConfError> {
    let t = Template::compile(d.arg(0), &mut e.vars).map_err(|m| ConfError::new(m, &d.span))?;
    if t.is_literal() {
        size(d, 0)?;
    }
    Ok(Arc::new(t))
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "proxy_pass",
        ignored: false,
        ctx: Ctx::STREAM_SERVER,
        arity: ONE,
        set: |s, d, e| {
            let target = crate::upstream::dynamic::Target::stream(e, d.arg(0), &d.span)?;
            crate::stream::set_content(s, d, Arc::new(super::Pass { target }))
        },
        syntax: "proxy_pass address | name;",
        default: "—",
        doc: "Passes the session to an upstream: an `upstream` block of the stream block, `host:port` (all the host's addresses, round robin), `ip:port` or `unix:/path`. With variables, the value is found per session: a block's name, or an address (a host name is resolved through `resolver`). A connection that fails goes on to the next peer as `proxy_next_upstream` allows; once connected, bytes pass both ways until either side closes (both, with `proxy_half_close`) or `proxy_timeout` passes idle. A UDP session sends each datagram of the client to the peer and each answer back.\n\n```nginx\nproxy_pass backend;\nproxy_pass 127.0.0.1:6379;\nproxy_pass $upstream_by_sni;\n```",
    },
    Def {
        name: "proxy_connect_timeout",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.connect_timeout, time(d, 0)?),
        syntax: "proxy_connect_timeout time;",
        default: "60s",
        doc: "How long connecting to a peer may take.\n\n```nginx\nproxy_connect_timeout 5s;\n```",
    },
    Def {
        name: "proxy_timeout",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.timeout, time(d, 0)?),
        syntax: "proxy_timeout time;",
        default: "10m",
        doc: "A session where nothing was read or written on either side for this long is closed; a UDP session ends then.\n\n```nginx\nproxy_timeout 1m;\n```",
    },
    Def {
        name: "proxy_next_upstream",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.next_upstream, flag(d, 0)?),
        syntax: "proxy_next_upstream on | off;",
        default: "on",
        doc: "When a peer cannot be connected to, a TCP or unix session goes on to the next peer (a UDP session stays with its peer, as nginx's).\n\n```nginx\nproxy_next_upstream off;\n```",
    },
    Def {
        name: "proxy_next_upstream_tries",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.next_upstream_tries, number(d, 0)? as u32),
        syntax: "proxy_next_upstream_tries number;",
        default: "0",
        doc: "The most peers a session tries (0: no limit).\n\n```nginx\nproxy_next_upstream_tries 3;\n```",
    },
    Def {
        name: "proxy_next_upstream_timeout",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.next_upstream_timeout, time(d, 0)?),
        syntax: "proxy_next_upstream_timeout time;",
        default: "0",
        doc: "How long a session may go on trying peers (0: no limit).\n\n```nginx\nproxy_next_upstream_timeout 10s;\n```",
    },
    Def {
        name: "proxy_buffer_size",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.buffer_size, size(d, 0)?.max(1) as usize),
        syntax: "proxy_buffer_size size;",
        default: "16k",
        doc: "The buffer of each direction of a session: the most read from one side before it is written to the other.\n\n```nginx\nproxy_buffer_size 64k;\n```",
    },
    Def {
        name: "proxy_upload_rate",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, e| set(d, s, |c| &mut c.upload_rate, Some(rate(d, e)?)),
        syntax: "proxy_upload_rate rate;",
        default: "0",
        doc: "The most bytes a second read from the client (0: no limit); variables allowed.\n\n```nginx\nproxy_upload_rate 100k;\n```",
    },
    Def {
        name: "proxy_download_rate",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, e| set(d, s, |c| &mut c.download_rate, Some(rate(d, e)?)),
        syntax: "proxy_download_rate rate;",
        default: "0",
        doc: "The most bytes a second read from the upstream (0: no limit); variables allowed.\n\n```nginx\nproxy_download_rate 1m;\n```",
    },
    Def {
        name: "proxy_protocol",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.proxy_protocol, flag(d, 0)?),
        syntax: "proxy_protocol on | off;",
        default: "off",
        doc: "Each connection to a peer opens with a PROXY protocol v1 header naming the client (the realip address when there is one) and the address it connected to.\n\n```nginx\nproxy_protocol on;\n```",
    },
    Def {
        name: "proxy_bind",
        ignored: false,
        ctx: Ctx::SS,
        arity: Arity::args(1, 2),
        set: |s, d, e| {
            let b = crate::upstream::bind::parse(d, e)?;
            set(d, s, |c| &mut c.bind, b)
        },
        syntax: "proxy_bind address [transparent] | off;",
        default: "—",
        doc: "The local address connections to peers go out from (variables allowed; `transparent`: any address, the client's own with `$remote_addr`, which needs CAP_NET_RAW); `off` cancels an inherited one.\n\n```nginx\nproxy_bind 127.0.0.2;\n```",
    },
    Def {
        name: "proxy_socket_keepalive",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.socket_keepalive, flag(d, 0)?),
        syntax: "proxy_socket_keepalive on | off;",
        default: "off",
        doc: "SO_KEEPALIVE on connections to peers.\n\n```nginx\nproxy_socket_keepalive on;\n```",
    },
    Def {
        name: "proxy_half_close",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.half_close, flag(d, 0)?),
        syntax: "proxy_half_close on | off;",
        default: "off",
        doc: "When one side closes its sending half, the other's is shut down too and the session goes on until both did. Off: the session ends once either side closed and what it sent was passed on.\n\n```nginx\nproxy_half_close on;\n```",
    },
    Def {
        name: "proxy_ssl",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.ssl, flag(d, 0)?),
        syntax: "proxy_ssl on | off;",
        default: "off",
        doc: "TLS to the upstream: once connected (and after the PROXY header of `proxy_protocol on`, sent in the clear), a TLS handshake within `proxy_connect_timeout`, as the `proxy_ssl_*` directives set it (`proxy_ssl_name`, by default the host of `proxy_pass` or the upstream block's name; `proxy_ssl_verify`, `proxy_ssl_certificate`…). A handshake that fails is a failed attempt: the next peer is tried as `proxy_next_upstream` allows.\n\n```nginx\nproxy_ssl on;\nproxy_ssl_verify on;\nproxy_ssl_trusted_certificate /etc/ssl/backend-ca.pem;\n```",
    },
    Def {
        name: "proxy_responses",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.responses, Some(number(d, 0)?)),
        syntax: "proxy_responses number;",
        default: "—",
        doc: "The datagrams a UDP peer answers each client datagram with: once they came, the session ends (without: at `proxy_timeout`).\n\n```nginx\nproxy_responses 1;\n```",
    },
    Def {
        name: "proxy_requests",
        ignored: false,
        ctx: Ctx::SS,
        arity: ONE,
        set: |s, d, _| set(d, s, |c| &mut c.requests, Some(number(d, 0)?)),
        syntax: "proxy_requests number;",
        default: "0",
        doc: "A UDP session takes this many datagrams of its client; the next one starts a new session (0: no limit).\n\n```nginx\nproxy_requests 1;\n```",
    },
];
