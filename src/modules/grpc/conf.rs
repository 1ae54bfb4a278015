//! Directives of the gRPC proxy: `grpc_pass` (the location's content
//! handler) and the inheritable `grpc_*` settings.

use super::{GrpcPass, Target};
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, Env, MANY, ONE, Scope};
use crate::conf::values;
use crate::core::vars::Template;
use crate::modules::proxy::conf::upstream_defs;
use crate::settings;
use crate::upstream::next::NextUpstream;
use std::sync::Arc;
use std::time::Duration;

/// `grpc_ignore_headers`: the reply fields vireo does not act on.
pub mod ignore {
    pub const X_ACCEL_REDIRECT: u16 = 1;

    /// The names nginx accepts; only X-Accel-Redirect changes what a gRPC
    /// reply does here (there is no cache, and X-Accel-Buffering,
    /// X-Accel-Limit-Rate and X-Accel-Charset are not acted on).
    pub const NAMES: &[(&str, u16)] = &[
        ("X-Accel-Redirect", X_ACCEL_REDIRECT),
        ("X-Accel-Expires", 0),
        ("X-Accel-Limit-Rate", 0),
        ("X-Accel-Buffering", 0),
        ("X-Accel-Charset", 0),
        ("Expires", 0),
        ("Cache-Control", 0),
        ("Set-Cookie", 0),
        ("Vary", 0),
    ];
}

settings! {
    /// Settings of the gRPC proxy.
    pub struct GrpcConf / GrpcConfSet {
        /// `grpc_set_header` pairs; a level with any drops those it would inherit.
        pub set_headers: Arc<[(String, Template)]> = Arc::from(Vec::new()),
        pub hide_headers: Arc<[String]> = Arc::from(Vec::new()),
        pub pass_headers: Arc<[String]> = Arc::from(Vec::new()),
        /// `grpc_ignore_headers` (`ignore::*` bits).
        pub ignore_headers: u16 = 0,
        /// `grpc_bind`: the local address of connections to upstreams.
        pub bind: Option<crate::upstream::bind::BindConf> = None,
        pub socket_keepalive: bool = false,
        pub connect_timeout: Duration = Duration::from_secs(60),
        pub send_timeout: Duration = Duration::from_secs(60),
        pub read_timeout: Duration = Duration::from_secs(60),
        /// `grpc_buffer_size`: the largest reply head, and the size of the
        /// upstream's DATA frames.
        pub buffer_size: usize = 4096,
        pub next_upstream: NextUpstream = NextUpstream::DEFAULT,
        pub next_upstream_tries: u32 = 0,
        pub next_upstream_timeout: Duration = Duration::ZERO,
        pub intercept_errors: bool = false,
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut GrpcConfSet {
    s.loc().get_mut::<GrpcConfSet>()
}

/// `grpc://addr`, `grpcs://addr` or `addr` → (TLS, addr).
pub(super) fn scheme(url: &str) -> (bool, &str) {
    let lower = |p: &str| url.len() >= p.len() && url[..p.len()].eq_ignore_ascii_case(p);
    if lower("grpcs://") {
        (true, &url[8..])
    } else if lower("grpc://") {
        (false, &url[7..])
    } else {
        (false, url)
    }
}

fn grpc_pass(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let url = d.arg(0);
    if url.contains('$') {
        let t = Template::compile(url, &mut e.vars).map_err(|m| ConfError::new(m, &d.span))?;
        let blocks = crate::upstream::conf::dynamic(e, 80);
        return s.set_content(
            d,
            Arc::new(GrpcPass::new(Target::Dynamic(t, blocks), false, "")),
        );
    }
    let (tls, addr) = scheme(url);
    if addr.is_empty() || (!addr.starts_with("unix:") && addr.contains('/')) {
        return Err(ConfError::new(
            format!("invalid host in upstream \"{url}\""),
            &d.span,
        ));
    }
    if tls && addr.starts_with("unix:") {
        return Err(ConfError::new(
            format!("TLS over a unix socket is not supported in \"{url}\""),
            &d.span,
        ));
    }
    let port = if tls { 443 } else { 80 };
    let up = crate::upstream::conf::reference(e, addr, port, &d.span)?;
    s.set_content(d, Arc::new(GrpcPass::new(Target::Fixed(up), tls, addr)))
}

fn ignore_headers(d: &Directive) -> Result<u16, ConfError> {
    let mut bits = 0;
    for a in d.arg_strs() {
        let Some((_, b)) = ignore::NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(a))
        else {
            return Err(values::bad_arg(d, a));
        };
        bits |= b;
    }
    Ok(bits)
}

/// The `grpc_*` directives that every HTTP handler of upstreams has.
pub static COMMON: &[Def] = upstream_defs!(
    "grpc",
    GrpcConfSet,
    "Content-Length $content_length; TE $grpc_internal_trailers; Host \"\"; Connection \"\"; Transfer-Encoding \"\"; Keep-Alive \"\"; Expect \"\"; Upgrade \"\"",
    " `Host` sets `:authority`.",
    " Between two pieces of a streaming reply too: long-lived streams with quiet spells need more.",
    "4k"
);

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "grpc_pass",
        ignored: false,
        ctx: Ctx::LOCATION.or(Ctx::IF),
        arity: ONE,
        set: grpc_pass,
        syntax: "grpc_pass address;",
        default: "—",
        doc: "Makes this location a gRPC proxy: the request goes to the upstream over HTTP/2 (`grpc://` or no scheme: cleartext with prior knowledge; `grpcs://`: TLS with ALPN `h2`, see the `grpc_ssl_*` directives). The address is `host[:port]`, `unix:/path`, or the name of an `upstream` block; with variables it is found per request (a block's name, an address, or a host resolved through `resolver`). The request's method, URI and headers become `:method`, `:path`, `:authority` (the address as written, or the `Host` that `grpc_set_header` gives) and fields; `te: trailers` goes when the client sent it. The request body streams to the upstream as it arrives, from an HTTP/2 or an HTTP/1.1 client; the reply's head, DATA and trailers (`grpc-status`, `grpc-message`) stream back. A reply of trailers only (a gRPC error) is passed as a head without a body. Failures: cannot connect → 502, a timeout → 504, a bad reply or a reset stream → 502, each logged with the peer (`upstream: \"grpc://127.0.0.1:9000\"`). A call runs on an HTTP/2 connection of its own, one stream on it, or with `keepalive` in the upstream block on a kept session to the peer, side by side with the calls in flight on it (nginx runs one a connection); see docs/grpc.md.\n\n```nginx\nlocation /helloworld.Greeter/ { grpc_pass grpc://127.0.0.1:50051; }\nlocation / { grpc_pass grpcs://backend; }\n```",
    },
    Def {
        name: "grpc_ignore_headers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| values::set_once(&mut loc(s).ignore_headers, ignore_headers(d)?, d),
        syntax: "grpc_ignore_headers field ...;",
        default: "—",
        doc: "Reply fields not acted on: `X-Accel-Redirect` (then passed on, not followed); nginx's other names (`X-Accel-Expires`, `X-Accel-Limit-Rate`, `X-Accel-Buffering`, `X-Accel-Charset`, `Expires`, `Cache-Control`, `Set-Cookie`, `Vary`) are accepted and change nothing, as vireo acts on none of them for gRPC.\n\n```nginx\ngrpc_ignore_headers X-Accel-Redirect;\n```",
    },
];
