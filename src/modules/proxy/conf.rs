//! Directives of the proxy module: `proxy_pass` (the location's content
//! handler) and the inheritable `proxy_*` settings.

use super::{Proxy, Target};
use crate::conf::ast::{ConfError, Directive};
use crate::conf::model::LocKind;
use crate::conf::table::{Arity, Ctx, Def, Env, ONE, Scope};
use crate::conf::values;
use crate::core::message::head::Version;
use crate::core::vars::{Re, Template};
use crate::upstream::next::NextUpstream;
use crate::upstream::store::Store;
use std::sync::Arc;
use std::time::Duration;

/// `proxy_redirect`.
#[derive(Clone, Debug)]
pub enum Redirect {
    /// Replace the proxy_pass URL with the location (nginx's default).
    Default,
    Off,
    /// `from` → `to` pairs, in order.
    List(Arc<[(RedirectFrom, Template)]>),
}

/// One `proxy_cookie_flags` rule: the cookies it is for, and its flags.
#[derive(Clone, Debug)]
pub struct CookieFlags {
    pub cookie: CookieName,
    /// `secure`, `httponly`, `samesite=…` and their `no` forms; may hold
    /// variables.
    pub flags: Box<[Template]>,
}

/// The cookie names a `proxy_cookie_flags` rule is for.
#[derive(Clone, Debug)]
pub enum CookieName {
    /// A name (may hold variables), compared caselessly.
    Name(Template),
    /// `~regex`, caseless.
    Regex(Re),
}

/// A flag of `proxy_cookie_flags` is one of these.
pub fn cookie_flag_valid(f: &str) -> bool {
    let f = f.to_ascii_lowercase();
    matches!(
        f.as_str(),
        "secure"
            | "nosecure"
            | "httponly"
            | "nohttponly"
            | "nosamesite"
            | "samesite=strict"
            | "samesite=lax"
            | "samesite=none"
    )
}

/// What a `proxy_redirect` pair looks for in a Location or Refresh URL.
#[derive(Clone, Debug)]
pub enum RedirectFrom {
    /// `default`: the pair nginx derives from proxy_pass and the location.
    Default,
    /// A prefix (may hold variables), replaced by the replacement.
    Prefix(Template),
    /// `~regex` / `~*regex`: on a match, the whole value is replaced (the
    /// replacement may use the captures).
    Regex(Re),
}

crate::settings! {
    /// Settings of the proxy module.
    pub struct ProxyConf / ProxyConfSet {
        /// `proxy_http_version`: HTTP/1.0, HTTP/1.1 or HTTP/2 to the upstream.
        pub http_version: Version = Version::Http10,
        /// `proxy_set_header` pairs (besides the defaults Host and Connection).
        pub set_headers: Arc<[(String, Template)]> = Arc::from(Vec::new()),
        pub hide_headers: Arc<[String]> = Arc::from(Vec::new()),
        pub pass_headers: Arc<[String]> = Arc::from(Vec::new()),
        pub pass_request_headers: bool = true,
        pub pass_request_body: bool = true,
        pub redirect: Redirect = Redirect::Default,
        pub cookie_domain: Arc<[(String, String)]> = Arc::from(Vec::new()),
        pub cookie_path: Arc<[(String, String)]> = Arc::from(Vec::new()),
        /// `proxy_bind`: the local address of connections to upstreams
        /// (`None`: the kernel's choice; `off` sets `None`).
        pub bind: Option<crate::upstream::bind::BindConf> = None,
        /// `proxy_set_body`: the body sent upstream in place of the client's.
        pub set_body: Option<Template> = None,
        /// `proxy_method`: the method sent upstream (else the request's).
        pub method: Option<Template> = None,
        /// `proxy_cookie_flags` rules, in order.
        pub cookie_flags: Arc<[CookieFlags]> = Arc::from(Vec::new()),
        pub connect_timeout: Duration = Duration::from_secs(60),
        pub send_timeout: Duration = Duration::from_secs(60),
        pub read_timeout: Duration = Duration::from_secs(60),
        pub buffering: bool = true,
        pub buffer_size: usize = 8192,
        pub buffers: (usize, usize) = (8, 8192),
        pub request_buffering: bool = true,
        pub next_upstream: NextUpstream = NextUpstream::DEFAULT,
        pub next_upstream_tries: u32 = 0,
        pub next_upstream_timeout: Duration = Duration::ZERO,
        pub intercept_errors: bool = false,
        pub ignore_client_abort: bool = false,
        /// `proxy_socket_keepalive`: SO_KEEPALIVE on connections to upstreams.
        pub socket_keepalive: bool = false,
        /// `proxy_limit_rate`: the most bytes per second read of a reply
        /// (a size, or variables giving one; 0: no limit).
        pub limit_rate: Option<Template> = None,
        /// `proxy_force_ranges`: byte ranges of every reply.
        pub force_ranges: bool = false,
        /// `proxy_store`: where a 200 reply's body is saved (`None`: off).
        pub store: Option<Arc<Store>> = None,
        /// `proxy_store_access`: the mode of stored files.
        pub store_access: u32 = 0o600,
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut ProxyConfSet {
    s.loc().get_mut::<ProxyConfSet>()
}

fn proxy_pass(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let in_block = matches!(s, Scope::LimitExcept(_) | Scope::LocationIf(_));
    let (Scope::Location(l) | Scope::LimitExcept(l) | Scope::LocationIf(l)) = s else {
        unreachable!("table declares proxy_pass for location only")
    };
    if l.content.is_some() {
        return Err(ConfError::new(
            "\"proxy_pass\" directive is duplicate: the location already has a content handler",
            &d.span,
        ));
    }
    let url = d.arg(0);
    if url.contains('$') {
        let t = Template::compile(url, &mut e.vars).map_err(|m| ConfError::new(m, &d.span))?;
        l.content = Some(Arc::new(Proxy {
            target: Target::Dynamic(t, crate::upstream::conf::dynamic(e, 80)),
            tls: false,
            host: "".into(),
            port: "".into(),
            ssl_name: String::new(),
            uri: None,
            default_redirect: None,
        }));
        return Ok(());
    }
    let Some((tls, rest)) = super::scheme(url) else {
        return Err(ConfError::new(
            format!("invalid URL prefix in \"{url}\""),
            &d.span,
        ));
    };
    let (scheme, default_port) = if tls { ("https", 443) } else { ("http", 80) };
    let (authority, uri) = super::split_url(rest);
    if authority.is_empty() || authority == "unix:" {
        return Err(ConfError::new(
            format!("no host in \"{url}\" of the \"proxy_pass\" directive"),
            &d.span,
        ));
    }
    if uri.is_some() && (in_block || matches!(l.kind, LocKind::Regex { .. } | LocKind::Named)) {
        return Err(ConfError::new(
            "\"proxy_pass\" cannot have URI part in location given by regular expression, or inside named location, or inside \"if\" statement, or inside \"limit_except\" block",
            &d.span,
        ));
    }
    let (host, port) = super::host_port(authority, default_port)
        .map_err(|e| ConfError::new(format!("{e} in \"{url}\""), &d.span))?;
    if tls && authority.starts_with("unix:") {
        return Err(ConfError::new(
            format!("TLS over a unix socket is not supported in \"{url}\""),
            &d.span,
        ));
    }
    let up = crate::upstream::conf::reference(e, authority, default_port, &d.span)?;
    let uri = uri.map(|u| u.as_bytes().to_vec());
    let default_redirect = match (&uri, l.kind) {
        (_, LocKind::Regex { .. } | LocKind::Named) => None,
        (Some(u), _) => Some((
            format!("{scheme}://{host}{}", String::from_utf8_lossy(u)),
            l.pattern.clone(),
        )),
        (None, _) => Some((format!("{scheme}://{host}{}", l.pattern), l.pattern.clone())),
    };
    l.content = Some(Arc::new(Proxy {
        target: Target::Fixed(up),
        tls,
        ssl_name: super::ssl_host(authority).to_string(),
        host: host.into(),
        port: port.into(),
        uri,
        default_redirect,
    }));
    Ok(())
}

pub(crate) fn header_name(d: &Directive) -> Result<String, ConfError> {
    let n = d.arg(0);
    if !crate::http::fields::is_token(n.as_bytes()) {
        return Err(values::bad_arg(d, n));
    }
    Ok(n.to_string())
}

fn pair_or_off(d: &Directive) -> Result<Option<(String, String)>, ConfError> {
    match d.args.len() {
        1 if d.arg(0) == "off" => Ok(None),
        2 => Ok(Some((d.arg(0).to_string(), d.arg(1).to_string()))),
        _ => Err(ConfError::new(
            format!("invalid number of arguments in \"{}\" directive", d.name),
            &d.span,
        )),
    }
}

/// The directives every HTTP handler of upstreams has (`proxy_*`,
/// `grpc_*`; `$p` the prefix), setting the fields of their names in its
/// settings `$Set`: `*_set_header` (default `$set_default`, `$set_more` said
/// after), `*_read_timeout` (`$read_more` said after) and `*_buffer_size`
/// (default `$buf_default`) differ.
macro_rules! upstream_defs {
    ($p:literal, $Set:ty, $set_default:literal, $set_more:literal, $read_more:literal, $buf_default:literal) => {
        &[
            Def {
                name: concat!($p, "_set_header"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: Arity::args(2, 2),
                set: |s, d, e| {
                    let name = $crate::modules::proxy::conf::header_name(d)?;
                    let t = values::template(d, 1, &mut e.vars)?;
                    values::push(&mut s.loc().get_mut::<$Set>().set_headers, (name, t));
                    Ok(())
                },
                syntax: concat!($p, "_set_header field value;"),
                default: $set_default,
                doc: concat!("Sets (or, with an empty value, removes) a request header sent to the upstream; the value may hold variables. A level with any `", $p, "_set_header` does not inherit those of the levels above, as nginx.", $set_more, "\n\n```nginx\n", $p, "_set_header X-Real-IP $remote_addr;\n", $p, "_set_header Host $host;\n```"),
            },
            Def {
                name: concat!($p, "_hide_header"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    let n = $crate::modules::proxy::conf::header_name(d)?;
                    values::push(&mut s.loc().get_mut::<$Set>().hide_headers, n);
                    Ok(())
                },
                syntax: concat!($p, "_hide_header field;"),
                default: "—",
                doc: concat!("A response header of the upstream not to pass to the client, besides Date, Server, X-Pad and X-Accel-* which are hidden by default.\n\n```nginx\n", $p, "_hide_header X-Powered-By;\n```"),
            },
            Def {
                name: concat!($p, "_pass_header"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    let n = $crate::modules::proxy::conf::header_name(d)?;
                    values::push(&mut s.loc().get_mut::<$Set>().pass_headers, n);
                    Ok(())
                },
                syntax: concat!($p, "_pass_header field;"),
                default: "—",
                doc: concat!("Passes a response header that is hidden by default: X-Accel-*, X-Pad, and the upstream's `Server` and `Date` in place of vireo's own (none when the upstream sent none).\n\n```nginx\n", $p, "_pass_header Server;\n```"),
            },
            Def {
                name: concat!($p, "_bind"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: Arity::args(1, 2),
                set: |s, d, e| {
                    let v = $crate::upstream::bind::parse(d, e)?;
                    values::set_once(&mut s.loc().get_mut::<$Set>().bind, v, d)
                },
                syntax: concat!($p, "_bind address [transparent] | off;"),
                default: "off",
                doc: concat!("Connections to upstreams go out from this local address (`ip` or `ip:port`; variables allowed, an empty value is the kernel's choice); `off` cancels an inherited one. A bound connection is opened for the request rather than taken from the keep-alive pool. With `transparent` the address need not be the host's (a client's, for a transparent proxy; the routing that brings the replies back is the system's): the socket gets IP_TRANSPARENT, and a server started as root keeps CAP_NET_RAW for it after switching to `user`, as nginx.\n\n```nginx\n", $p, "_bind 192.0.2.10;\n", $p, "_bind $remote_addr transparent;\n", $p, "_bind $split_source;\n```"),
            },
            Def {
                name: concat!($p, "_socket_keepalive"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().socket_keepalive = Some(values::flag(d, 0)?);
                    Ok(())
                },
                syntax: concat!($p, "_socket_keepalive on | off;"),
                default: "off",
                doc: concat!("Turns on TCP keep-alive probes (SO_KEEPALIVE, with the system's timings) on new connections to upstreams.\n\n```nginx\n", $p, "_socket_keepalive on;\n```"),
            },
            Def {
                name: concat!($p, "_connect_timeout"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().connect_timeout = Some(values::time(d, 0)?);
                    Ok(())
                },
                syntax: concat!($p, "_connect_timeout time;"),
                default: "60s",
                doc: concat!("How long connecting to a peer (a TLS handshake included) may take; then the next peer is tried (next_upstream timeout) or the client gets 504.\n\n```nginx\n", $p, "_connect_timeout 5s;\n```"),
            },
            Def {
                name: concat!($p, "_send_timeout"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().send_timeout = Some(values::time(d, 0)?);
                    Ok(())
                },
                syntax: concat!($p, "_send_timeout time;"),
                default: "60s",
                doc: concat!("How long sending the request to the upstream may wait at one point: one write (over HTTP/2, also room in the flow-control window).\n\n```nginx\n", $p, "_send_timeout 60s;\n```"),
            },
            Def {
                name: concat!($p, "_read_timeout"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().read_timeout = Some(values::time(d, 0)?);
                    Ok(())
                },
                syntax: concat!($p, "_read_timeout time;"),
                default: "60s",
                doc: concat!("How long one read from the upstream may wait (the response head: then 504; the body: the response is cut short).", $read_more, "\n\n```nginx\n", $p, "_read_timeout 300s;\n```"),
            },
            Def {
                name: concat!($p, "_buffer_size"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().buffer_size = Some(values::size(d, 0)?.max(1024) as usize);
                    Ok(())
                },
                syntax: concat!($p, "_buffer_size size;"),
                default: $buf_default,
                doc: concat!("Largest upstream response head; a bigger one is answered with 502 (\"upstream sent too big header\").\n\n```nginx\n", $p, "_buffer_size 16k;\n```"),
            },
            Def {
                name: concat!($p, "_next_upstream"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: Arity::args(1, 12),
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().next_upstream = Some(NextUpstream::parse(d, NextUpstream::PROXY)?);
                    Ok(())
                },
                syntax: concat!($p, "_next_upstream error | timeout | invalid_header | http_500 | http_502 | http_503 | http_504 | http_403 | http_404 | http_429 | non_idempotent ... | off;"),
                default: "error timeout",
                doc: concat!("When to try the next peer: connection errors, timeouts, invalid reply heads, these statuses. POST, LOCK and PATCH requests are not retried once sent unless `non_idempotent` is given.\n\n```nginx\n", $p, "_next_upstream error timeout http_502;\n```"),
            },
            Def {
                name: concat!($p, "_next_upstream_tries"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().next_upstream_tries = Some(values::number(d, 0)? as u32);
                    Ok(())
                },
                syntax: concat!($p, "_next_upstream_tries number;"),
                default: "0",
                doc: concat!("Most attempts per request (0: no limit beyond the peers).\n\n```nginx\n", $p, "_next_upstream_tries 3;\n```"),
            },
            Def {
                name: concat!($p, "_next_upstream_timeout"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().next_upstream_timeout = Some(values::time(d, 0)?);
                    Ok(())
                },
                syntax: concat!($p, "_next_upstream_timeout time;"),
                default: "0",
                doc: concat!("No further attempt starts after this long (0: no limit).\n\n```nginx\n", $p, "_next_upstream_timeout 10s;\n```"),
            },
            Def {
                name: concat!($p, "_intercept_errors"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, _| {
                    s.loc().get_mut::<$Set>().intercept_errors = Some(values::flag(d, 0)?);
                    Ok(())
                },
                syntax: concat!($p, "_intercept_errors on | off;"),
                default: "off",
                doc: concat!("Upstream responses with a status of 300 or more that has an `error_page` are replaced by that page.\n\n```nginx\n", $p, "_intercept_errors on;\nerror_page 502 503 /maintenance.html;\n```"),
            },
        ]
    };
}
pub(crate) use upstream_defs;

/// The `proxy_*` directives that every HTTP handler of upstreams has.
pub static COMMON: &[Def] = upstream_defs!(
    "proxy",
    ProxyConfSet,
    "Host $proxy_host; Connection close",
    "",
    " Also the idle timeout of WebSocket tunnels.",
    "8k"
);

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "proxy_pass",
        ignored: false,
        ctx: Ctx::LOCATION.or(Ctx::LIMIT_EXCEPT).or(Ctx::IF),
        arity: ONE,
        set: proxy_pass,
        syntax: "proxy_pass URL;",
        default: "—",
        doc: "Makes this location a reverse proxy to `http://upstream_or_host[:port][/uri]` or `http://unix:/path[:/uri]`, or over TLS to `https://upstream_or_host[:port][/uri]` (port 443 by default; see the `proxy_ssl_*` directives). With a URI part, the part of the request URI that matched the (prefix) location is replaced by it; without one, the request URI goes as the client sent it (as changed by rewrite, if it was). With variables the URL is evaluated per request: its host names an `upstream` block (when it has no port) or is an address, or a host resolved through `resolver`, and a URI part in it is sent as it is in place of the request's URI. Request and response bodies stream both ways. See docs/proxy.md.\n\n```nginx\nlocation /api/ { proxy_pass http://127.0.0.1:8080/; }\nlocation / { proxy_pass http://backend; }\nlocation /any/ { resolver 127.0.0.1; proxy_pass http://$arg_host:8080; }\n```",
    },
    Def {
        name: "proxy_http_version",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).http_version = Some(match d.arg(0) {
                "1.0" => Version::Http10,
                "1.1" => Version::Http11,
                "2" => Version::Http2,
                v => return Err(values::bad_arg(d, v)),
            });
            Ok(())
        },
        syntax: "proxy_http_version 1.0 | 1.1 | 2;",
        default: "1.0",
        doc: "HTTP version of requests to the upstream. 1.1 is needed for keep-alive upstream connections (with `proxy_set_header Connection \"\"`), chunked request bodies and WebSocket. 2 speaks HTTP/2: to `http://` with prior knowledge (h2c), to `https://` with ALPN `h2`; each request is one stream, and with `keepalive` in the upstream block the HTTP/2 connection is kept and the requests to the peer run their streams on it side by side (nginx runs one a connection). The request's fields become HTTP/2 fields (`Host` the `:authority`; hop-by-hop fields such as Connection, Keep-Alive, Upgrade and TE are not sent), the body goes in DATA frames, with or without `proxy_request_buffering`, and the reply's head and body come back as from HTTP/1.x, to every proxy feature (cache, `proxy_next_upstream`, `proxy_intercept_errors`, `$upstream_*`); the reply's trailers are not passed, as nginx. WebSocket (an Upgrade) needs 1.1. See docs/proxy.md.\n\n```nginx\nproxy_http_version 1.1;\n\nlocation /h2/ {\n    proxy_http_version 2;\n    proxy_pass http://h2c-backend;\n}\n```",
    },
    Def {
        name: "proxy_pass_request_headers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).pass_request_headers = Some(values::flag(d, 0)?);
            Ok(())
        },
        syntax: "proxy_pass_request_headers on | off;",
        default: "on",
        doc: "Whether the client's request headers go to the upstream (proxy_set_header ones always do).\n\n```nginx\nproxy_pass_request_headers off;\n```",
    },
    Def {
        name: "proxy_pass_request_body",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).pass_request_body = Some(values::flag(d, 0)?);
            Ok(())
        },
        syntax: "proxy_pass_request_body on | off;",
        default: "on",
        doc: "Whether the client's request body goes to the upstream.\n\n```nginx\nproxy_pass_request_body off;\n```",
    },
    Def {
        name: "proxy_redirect",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 2),
        set: |s, d, e| {
            let l = loc(s);
            match (d.args.len(), d.arg(0)) {
                (1, "off") => l.redirect = Some(Redirect::Off),
                (1, "default") => {
                    let mut list = match &l.redirect {
                        Some(Redirect::List(v)) => v.to_vec(),
                        _ => Vec::new(),
                    };
                    list.push((RedirectFrom::Default, Template::default()));
                    l.redirect = Some(Redirect::List(Arc::from(list)));
                }
                (2, from) => {
                    let err = |m: String| ConfError::new(m, &d.span);
                    let to = values::template(d, 1, &mut e.vars)?;
                    let from = match (from.strip_prefix("~*"), from.strip_prefix('~')) {
                        (Some(re), _) => {
                            RedirectFrom::Regex(Re::new(re, true, &mut e.vars).map_err(err)?)
                        }
                        (None, Some(re)) => {
                            RedirectFrom::Regex(Re::new(re, false, &mut e.vars).map_err(err)?)
                        }
                        _ => {
                            RedirectFrom::Prefix(Template::compile(from, &mut e.vars).map_err(err)?)
                        }
                    };
                    let mut list = match &l.redirect {
                        Some(Redirect::List(v)) => v.to_vec(),
                        _ => Vec::new(),
                    };
                    list.push((from, to));
                    l.redirect = Some(Redirect::List(Arc::from(list)));
                }
                (_, v) => return Err(values::bad_arg(d, v)),
            }
            Ok(())
        },
        syntax: "proxy_redirect default | off | redirect replacement;",
        default: "default",
        doc: "Rewrites the Location and Refresh headers of upstream responses: `default` replaces the proxy_pass URL with the location's prefix; `redirect replacement` replaces a leading `redirect` (both may hold variables); `~regex replacement` (`~*` caseless) replaces the whole value when the regex matches, the replacement using its captures; `off` leaves them. The pairs are tried in order, the first that applies wins. A replaced Location that starts with `/` is made absolute as vireo's own redirects are (absolute_redirect); a Refresh URL stays as replaced.\n\n```nginx\nproxy_redirect http://127.0.0.1:8080/ /;\nproxy_redirect ~^http://[^/]+/app/(.*)$ /$1;\n```",
    },
    Def {
        name: "proxy_cookie_domain",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 2),
        set: |s, d, _| {
            let l = loc(s);
            let mut list: Vec<(String, String)> = l
                .cookie_domain
                .as_deref()
                .map(<[_]>::to_vec)
                .unwrap_or_default();
            match pair_or_off(d)? {
                None => list.clear(),
                Some(p) => list.push(p),
            }
            l.cookie_domain = Some(Arc::from(list));
            Ok(())
        },
        syntax: "proxy_cookie_domain off | domain replacement;",
        default: "off",
        doc: "Rewrites the `domain=` attribute of Set-Cookie headers from the upstream (case-insensitive match).\n\n```nginx\nproxy_cookie_domain backend.internal example.com;\n```",
    },
    Def {
        name: "proxy_set_body",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            values::set_once(
                &mut loc(s).set_body,
                Some(values::template(d, 0, &mut e.vars)?),
                d,
            )
        },
        syntax: "proxy_set_body value;",
        default: "—",
        doc: "The request body sent upstream in place of the client's (text and variables, sent with its Content-Length); the client's body is still read (`$request_body`) but not passed.\n\n```nginx\nproxy_set_body \"user=$remote_user\";\nproxy_set_header Content-Type application/x-www-form-urlencoded;\n```",
    },
    Def {
        name: "proxy_method",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            values::set_once(
                &mut loc(s).method,
                Some(values::template(d, 0, &mut e.vars)?),
                d,
            )
        },
        syntax: "proxy_method method;",
        default: "—",
        doc: "The method of the request sent upstream, in place of the client's (variables allowed; an empty value keeps the client's).\n\n```nginx\nproxy_method POST;\n```",
    },
    Def {
        name: "proxy_cookie_flags",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 4),
        set: |s, d, e| {
            let l = loc(s);
            let mut list: Vec<CookieFlags> = l
                .cookie_flags
                .as_deref()
                .map(<[_]>::to_vec)
                .unwrap_or_default();
            let err = |m: String| ConfError::new(m, &d.span);
            if d.args.len() == 1 && d.arg(0) == "off" {
                list.clear();
            } else if d.args.len() == 1 {
                return Err(err(
                    "invalid number of arguments in \"proxy_cookie_flags\" directive".into(),
                ));
            } else {
                let cookie = match d.arg(0).strip_prefix("~*").or(d.arg(0).strip_prefix('~')) {
                    Some(re) => CookieName::Regex(Re::new(re, true, &mut e.vars).map_err(err)?),
                    None => CookieName::Name(values::template(d, 0, &mut e.vars)?),
                };
                let mut flags = Vec::new();
                for a in &d.args[1..] {
                    let t = Template::compile(&a.value, &mut e.vars).map_err(err)?;
                    if t.literal().is_some() && !cookie_flag_valid(&a.value) {
                        return Err(values::bad_arg(d, &a.value));
                    }
                    flags.push(t);
                }
                list.push(CookieFlags {
                    cookie,
                    flags: flags.into(),
                });
            }
            l.cookie_flags = Some(Arc::from(list));
            Ok(())
        },
        syntax: "proxy_cookie_flags off | cookie [flag …];",
        default: "off",
        doc: "Sets or removes the `Secure`, `HttpOnly` and `SameSite` attributes of Set-Cookie headers from the upstream for the cookie named `cookie` (caseless; variables allowed; `~regex` for a caseless regex). Flags: `secure`, `httponly`, `samesite=strict`, `samesite=lax`, `samesite=none` add the attribute (replacing one the upstream set), `nosecure`, `nohttponly`, `nosamesite` remove it; flags may hold variables. The rules are tried in order, the first whose cookie matches applies; the cookie's attributes are then written back as `name=value; Attr; Attr`. A level with any rule replaces the rules it would inherit; `off` cancels them.\n\n```nginx\nproxy_cookie_flags session secure httponly samesite=lax;\nproxy_cookie_flags ~^track_ nosecure;\n```",
    },
    Def {
        name: "proxy_cookie_path",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 2),
        set: |s, d, _| {
            let l = loc(s);
            let mut list: Vec<(String, String)> = l
                .cookie_path
                .as_deref()
                .map(<[_]>::to_vec)
                .unwrap_or_default();
            match pair_or_off(d)? {
                None => list.clear(),
                Some(p) => list.push(p),
            }
            l.cookie_path = Some(Arc::from(list));
            Ok(())
        },
        syntax: "proxy_cookie_path off | path replacement;",
        default: "off",
        doc: "Rewrites a leading `path` in the `path=` attribute of Set-Cookie headers from the upstream.\n\n```nginx\nproxy_cookie_path /app/ /;\n```",
    },
    Def {
        name: "proxy_buffering",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).buffering = Some(values::flag(d, 0)?);
            Ok(())
        },
        syntax: "proxy_buffering on | off;",
        default: "on",
        doc: "With either value the response streams to the client with bounded memory (one buffer per request) and backpressure on the upstream. What `off` changes is compression: a compressed response (`gzip`, `brotli`, `zstd`) is flushed whenever the upstream pauses, so each piece reaches the client at once, as nginx flushes its gzip filter per piece when unbuffered; with `on` the encoder holds its output until it has a block. The upstream can choose per response with `X-Accel-Buffering: yes | no`. See docs/proxy.md.\n\n```nginx\nproxy_buffering off;\n```",
    },
    Def {
        name: "proxy_buffers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(2, 2),
        set: |s, d, _| {
            let n = values::number(d, 0)? as usize;
            let size = values::size(d, 1)? as usize;
            loc(s).buffers = Some((n, size));
            Ok(())
        },
        syntax: "proxy_buffers number size;",
        default: "8 8k",
        doc: "Accepted: number × size bounds the bytes read from the upstream ahead of the client (at most one piece of that size is held per request).\n\n```nginx\nproxy_buffers 8 16k;\n```",
    },
    Def {
        name: "proxy_request_buffering",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).request_buffering = Some(values::flag(d, 0)?);
            Ok(())
        },
        syntax: "proxy_request_buffering on | off;",
        default: "on",
        doc: "`on`: the whole request body is read (in memory up to `client_body_buffer_size`, else in a temporary file under `client_body_temp_path`) before the upstream is connected to, and sent with a Content-Length, so another peer can be tried. `off`: the body goes to the upstream as it arrives (chunked to an HTTP/1.1 upstream when its length is unknown; buffered for an HTTP/1.0 one), and an attempt is repeated only when nothing was sent.\n\n```nginx\nproxy_request_buffering off;\n```",
    },
    Def {
        name: "proxy_limit_rate",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let err = |m: String| ConfError::new(m, &d.span);
            let t = Template::compile(d.arg(0), &mut e.vars).map_err(err)?;
            if let Some(l) = t.literal() {
                let n = std::str::from_utf8(l).ok().and_then(values::parse_size);
                if n.is_none() {
                    return Err(err(format!("\"{}\" directive invalid value", d.name)));
                }
            }
            values::set_once(&mut loc(s).limit_rate, Some(t), d)
        },
        syntax: "proxy_limit_rate rate;",
        default: "0",
        doc: "Reads each reply from the upstream no faster than `rate` bytes per second (`k`, `m` suffixes; variables allowed, evaluated once the reply's head is in, so `$upstream_http_…` can set it); 0 is no limit.\n\n```nginx\nproxy_limit_rate 100k;\nproxy_limit_rate $upstream_http_x_rate;\n```",
    },
    Def {
        name: "proxy_store",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            loc(s).store = Some(crate::upstream::store::parse(d, e)?);
            Ok(())
        },
        syntax: "proxy_store on | off | string;",
        default: "off",
        doc: "Save the body of each 200 reply to a file as it goes to the client: `on` at the path a static file of the request's URI would have (root or alias + URI), or at the path given (with variables). It is written to a temporary file beside the target (`.NAME.PID.N.store`, folders created as needed) and renamed onto it once whole; a reply cut short or a client that leaves removes it. The file gets the reply's Last-Modified as its time. HEAD requests store nothing. See docs/proxy.md.\n\n```nginx\nlocation /images/ {\n    root /data/www;\n    error_page 404 = /fetch$uri;\n}\nlocation /fetch/ {\n    internal;\n    proxy_pass http://backend/;\n    proxy_store on;\n    proxy_store_access user:rw group:rw all:r;\n    alias /data/www/;\n}\n```",
    },
    Def {
        name: "proxy_store_access",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 3),
        set: |s, d, _| {
            loc(s).store_access = Some(crate::upstream::store::parse_access(d)?);
            Ok(())
        },
        syntax: "proxy_store_access users:permissions ...;",
        default: "user:rw",
        doc: "The permissions of files `proxy_store` saves (and of the folders it creates, with `x` added where `r` is): `user:`, `group:`, `all:` with `rw` or `r`; the user keeps `rw` unless given.\n\n```nginx\nproxy_store_access user:rw group:rw all:r;\n```",
    },
    Def {
        name: "proxy_force_ranges",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).force_ranges = Some(values::flag(d, 0)?);
            Ok(())
        },
        syntax: "proxy_force_ranges on | off;",
        default: "off",
        doc: "Byte ranges of the upstream's replies: with `on`, a 200 reply of known length is answered with the client's `Range` (206, one range as the reply streams in; several from a cached reply) whatever the upstream said about ranges, and offers them with `Accept-Ranges: bytes`. With `off`, only a reply answered from the cache whose upstream sent `Accept-Ranges` takes ranges, as nginx. `If-Range` is compared with the reply's `ETag` or `Last-Modified`; `max_ranges` applies.\n\n```nginx\nproxy_force_ranges on;\n```",
    },
    Def {
        name: "proxy_ignore_client_abort",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).ignore_client_abort = Some(values::flag(d, 0)?);
            Ok(())
        },
        syntax: "proxy_ignore_client_abort on | off;",
        default: "off",
        doc: "When off (the default), a client that closes its connection while the request waits for the upstream's response head ends the request: the upstream connection is closed rather than kept (the application sees the client leave; a keep-alive pool is not filled with replies nobody waits for) and the request is logged with status 499. When on, the exchange with the upstream goes on to its end. The wait is watched once the request body has been sent; an HTTP/1 client that already sent more bytes (a pipelined request) is not seen leaving there.\n\n```nginx\nproxy_ignore_client_abort on;\n```",
    },
];

/// Accepted for nginx compatibility: vireo never writes an upstream's reply
/// to a temporary file (it is sent on as the client takes it), which is what
/// nginx does with `proxy_max_temp_file_size 0`.
pub static IGNORED: &[Def] = &[
    crate::conf::core_directives::ignored(
        "proxy_max_temp_file_size",
        Ctx::HSL,
        ONE,
        "proxy_max_temp_file_size size;",
        "vireo never buffers a reply in a temporary file, as nginx with 0\n\n```nginx\nproxy_max_temp_file_size 0;\n```",
    ),
    crate::conf::core_directives::ignored(
        "proxy_temp_file_write_size",
        Ctx::HSL,
        ONE,
        "proxy_temp_file_write_size size;",
        "vireo never buffers a reply in a temporary file\n\n```nginx\nproxy_temp_file_write_size 16k;\n```",
    ),
    crate::conf::core_directives::ignored(
        "proxy_busy_buffers_size",
        Ctx::HSL,
        ONE,
        "proxy_busy_buffers_size size;",
        "a reply is read one piece at a time as the client takes it, so no buffers are busy beyond that piece\n\n```nginx\nproxy_busy_buffers_size 16k;\n```",
    ),
];
