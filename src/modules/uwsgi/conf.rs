//! The settings and directives uwsgi and SCGI share: one settings type per
//! protocol (`GwConf<P>`), one directive table per protocol made by
//! `directives!` from the same setters.

use super::handler::Pass;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Env, Scope};
use crate::conf::values::{bad_arg, flag, number, size, time};
use crate::core::module::Slot;
use crate::core::request::Request;
use crate::settings;
use crate::upstream::next::NextUpstream;
use crate::upstream::params::{self, Param};
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;

/// A protocol of the family: its name and how a request's head is encoded.
pub trait Proto: crate::modules::cache::conf::Kind {
    /// The directives' prefix and the scheme of log lines (`uwsgi`, `scgi`).
    const NAME: &'static str;
    /// The port of an address written without one.
    const PORT: u16;
    /// The scheme of an address reached over TLS (`suwsgi`), if any.
    const TLS_SCHEME: Option<&'static str> = None;
    /// Where this protocol's settings sit.
    fn slot() -> &'static Slot;
    /// The request's head (the parameters in the protocol's framing) for a
    /// body of `body_len` bytes, a length `learnt` by reading the body whole
    /// when the client did not declare it; `Err(status)` refuses the request.
    fn encode(
        req: &Request<'_>,
        conf: &GwConf<Self>,
        body_len: u64,
        learnt: bool,
        out: &mut BytesMut,
    ) -> Result<(), u16>;
    /// The TLS client and name for a `TLS_SCHEME` address whose peers
    /// `name` names; `Err`: logged, 502.
    fn tls(req: &Request<'_>, name: &str) -> Result<crate::upstream::tls::Dial, ()> {
        let _ = (req, name);
        Err(())
    }
}

settings! {
    /// The settings of one protocol at one level. `*_param`, `*_hide_header`
    /// and `*_pass_header` are lists set as a whole: a level with any drops
    /// the inherited ones, as nginx.
    pub struct GwConf<P: Proto> / GwConfSet {
        pub params: Arc<Vec<Param>> = Arc::new(Vec::new()),
        pub pass_request_headers: bool = true,
        pub pass_request_body: bool = true,
        pub hide_header: Arc<Vec<Box<str>>> = Arc::new(Vec::new()),
        pub pass_header: Arc<Vec<Box<str>>> = Arc::new(Vec::new()),
        pub connect_timeout: Duration = Duration::from_secs(60),
        pub send_timeout: Duration = Duration::from_secs(60),
        pub read_timeout: Duration = Duration::from_secs(60),
        pub buffering: bool = true,
        pub buffer_size: usize = 4096,
        pub buffers: (usize, usize) = (8, 4096),
        pub request_buffering: bool = true,
        pub next_upstream: NextUpstream = NextUpstream::DEFAULT,
        pub next_upstream_tries: u32 = 0,
        pub next_upstream_timeout: Duration = Duration::ZERO,
        pub intercept_errors: bool = false,
        pub ignore_client_abort: bool = false,
        /// `*_force_ranges`: byte ranges of every reply.
        pub force_ranges: bool = false,
        /// `*_store`: where a 200 reply's body is saved (`None`: off).
        pub store: Option<Arc<crate::upstream::store::Store>> = None,
        /// `*_store_access`: the mode of stored files.
        pub store_access: u32 = 0o600,
        /// `*_bind`: the local address of connections to the application.
        pub bind: Option<crate::upstream::bind::BindConf> = None,
        /// `*_socket_keepalive`: SO_KEEPALIVE on connections to the application.
        pub socket_keepalive: bool = false,
        /// `uwsgi_modifier1`, `uwsgi_modifier2` (uwsgi only).
        pub modifier1: u8 = 0,
        pub modifier2: u8 = 0,
    }
}

fn loc<'a, P: Proto>(s: &'a mut Scope<'_>) -> &'a mut GwConfSet<P> {
    s.loc().get_mut::<GwConfSet<P>>()
}

pub fn set_pass<P: Proto>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let a = d.arg(0);
    let mut tls = false;
    let a = match a.split_once("://") {
        Some((s, rest)) if s == P::NAME => rest,
        Some((s, rest)) if Some(s) == P::TLS_SCHEME => {
            tls = true;
            rest
        }
        Some((s, _)) => {
            return Err(ConfError::new(
                format!("invalid URL prefix \"{s}://\" in \"{}_pass\"", P::NAME),
                &d.span,
            ));
        }
        None => a,
    };
    let target = crate::upstream::dynamic::Target::new(e, a, P::PORT, &d.span)?;
    s.set_content(d, Arc::new(Pass::<P>::new(target, tls)))
}

pub fn set_param<P: Proto>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    params::push(&mut loc::<P>(s).params, d, e)
}

fn push_name(slot: &mut Option<Arc<Vec<Box<str>>>>, d: &Directive) {
    let list = slot.get_or_insert_with(|| Arc::new(Vec::new()));
    Arc::make_mut(list).push(d.arg(0).to_ascii_lowercase().into());
}

pub fn set_hide_header<P: Proto>(
    s: &mut Scope<'_>,
    d: &Directive,
    _: &mut Env,
) -> Result<(), ConfError> {
    push_name(&mut loc::<P>(s).hide_header, d);
    Ok(())
}

pub fn set_pass_header<P: Proto>(
    s: &mut Scope<'_>,
    d: &Directive,
    _: &mut Env,
) -> Result<(), ConfError> {
    push_name(&mut loc::<P>(s).pass_header, d);
    Ok(())
}

/// A setter of the field `$field` from what `$parse` makes of the directive.
macro_rules! setter {
    ($fn:ident, $field:ident, $parse:path) => {
        pub fn $fn<P: Proto>(
            s: &mut Scope<'_>,
            d: &Directive,
            _: &mut Env,
        ) -> Result<(), ConfError> {
            loc::<P>(s).$field = Some($parse(d)?);
            Ok(())
        }
    };
}

fn on_off(d: &Directive) -> Result<bool, ConfError> {
    flag(d, 0)
}

fn a_time(d: &Directive) -> Result<Duration, ConfError> {
    time(d, 0)
}

fn buffer_size(d: &Directive) -> Result<usize, ConfError> {
    Ok(size(d, 0)?.max(512) as usize)
}

fn next_upstream(d: &Directive) -> Result<NextUpstream, ConfError> {
    NextUpstream::parse(d, NextUpstream::FASTCGI)
}

fn tries(d: &Directive) -> Result<u32, ConfError> {
    Ok(number(d, 0)?.min(u32::MAX as u64) as u32)
}

setter!(set_pass_request_headers, pass_request_headers, on_off);
setter!(set_pass_request_body, pass_request_body, on_off);
setter!(set_connect_timeout, connect_timeout, a_time);
setter!(set_send_timeout, send_timeout, a_time);
setter!(set_read_timeout, read_timeout, a_time);
setter!(set_buffering, buffering, on_off);
setter!(set_request_buffering, request_buffering, on_off);
setter!(set_intercept_errors, intercept_errors, on_off);
setter!(set_ignore_client_abort, ignore_client_abort, on_off);
setter!(set_next_upstream_timeout, next_upstream_timeout, a_time);
setter!(set_buffer_size, buffer_size, buffer_size);
setter!(set_next_upstream, next_upstream, next_upstream);
setter!(set_next_upstream_tries, next_upstream_tries, tries);
setter!(set_force_ranges, force_ranges, on_off);
setter!(set_socket_keepalive, socket_keepalive, on_off);
setter!(
    set_store_access,
    store_access,
    crate::upstream::store::parse_access
);
setter!(set_modifier1, modifier1, modifier);
setter!(set_modifier2, modifier2, modifier);

fn modifier(d: &Directive) -> Result<u8, ConfError> {
    let n = number(d, 0)?;
    u8::try_from(n).map_err(|_| bad_arg(d, d.arg(0)))
}

pub fn set_bind<P: Proto>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let v = crate::upstream::bind::parse(d, e)?;
    crate::conf::values::set_once(&mut loc::<P>(s).bind, v, d)
}

pub fn set_store<P: Proto>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    loc::<P>(s).store = Some(crate::upstream::store::parse(d, e)?);
    Ok(())
}

pub fn set_buffers<P: Proto>(
    s: &mut Scope<'_>,
    d: &Directive,
    _: &mut Env,
) -> Result<(), ConfError> {
    let n = number(d, 0)?;
    let sz = size(d, 1)?;
    if n == 0 || sz == 0 {
        return Err(bad_arg(d, d.arg(0)));
    }
    loc::<P>(s).buffers = Some((n as usize, sz as usize));
    Ok(())
}

/// One directive of a protocol's table: its name and syntax after the
/// protocol's prefix.
macro_rules! def {
    ($pre:literal, $name:literal, $p:ty, $set:ident, $ctx:expr, $arity:expr, $syntax:literal, $default:literal, $doc:expr, $example:literal) => {
        $crate::conf::table::Def {
            name: concat!($pre, "_", $name),
            ignored: false,
            ctx: $ctx,
            arity: $arity,
            set: $crate::modules::uwsgi::conf::$set::<$p>,
            syntax: concat!($pre, "_", $name, " ", $syntax, ";"),
            default: $default,
            doc: concat!(
                $doc,
                "\n\n```nginx\n",
                $pre,
                "_",
                $name,
                " ",
                $example,
                ";\n```"
            ),
        }
    };
}
pub(crate) use def;

/// The directives of protocol `$p`, named with the prefix `$pre`; `$app`
/// names its applications in the reference, `$more` is the end of
/// `$pre_pass`'s text.
macro_rules! directives {
    ($pre:literal, $p:ty, $app:literal, $more:literal) => {{
        use $crate::conf::table::{Arity, Ctx};
        use $crate::modules::uwsgi::conf::def;
        const ONE: Arity = Arity::args(1, 1);
        &[
            $crate::conf::table::Def {
                name: concat!($pre, "_pass"),
                ignored: false,
                ctx: Ctx::LOCATION.or(Ctx::IF),
                arity: ONE,
                set: $crate::modules::uwsgi::conf::set_pass::<$p>,
                syntax: concat!($pre, "_pass address;"),
                default: "—",
                doc: concat!(
                    "Makes a ", $app, " application the location's content handler. The address is `host:port`, `unix:/path/to/socket`, or the name of an `upstream` block, optionally after `", $pre, "://`; with variables it is evaluated per request. The request goes as the protocol's parameters (`", $pre, "_param`, then the request's headers as `HTTP_*`) followed by the body; the application answers with an HTTP status line (`HTTP/1.1 200 OK`) or a CGI head (`Status: 404 Not Found`), then the body, which runs to the connection's close or its Content-Length. `X-Accel-Redirect` and a local `Location` without a status are internal redirects. Failures: cannot connect → 502, timeouts → 504, an invalid head → 502.", $more, "\n\n```nginx\nlocation / {\n    include ", $pre, "_params;\n    ", $pre, "_pass 127.0.0.1:9000;\n}\n```"
                ),
            },
            def!($pre, "param", $p, set_param, Ctx::HSL, Arity::args(2, 3), "parameter value [if_not_empty]", "—",
                concat!("A parameter sent to the ", $app, " application; the value may hold variables. With `if_not_empty` it is left out when its value is empty. A level with any `", $pre, "_param` drops the ones it would inherit. The request's headers are sent too, as `HTTP_*` parameters (not those a `", $pre, "_param` already sets, not names with `_`, and never `Proxy`)."),
                "SCRIPT_NAME $uri"),
            def!($pre, "pass_request_headers", $p, set_pass_request_headers, Ctx::HSL, ONE, "on | off", "on",
                "Whether the request's headers are sent as `HTTP_*` parameters.", "off"),
            def!($pre, "pass_request_body", $p, set_pass_request_body, Ctx::HSL, ONE, "on | off", "on",
                "Whether the request body is sent to the application.", "off"),
            def!($pre, "hide_header", $p, set_hide_header, Ctx::HSL, ONE, "field", "—",
                "A header of the application's response not passed to the client. `Status`, `X-Accel-Redirect`, `X-Accel-Buffering`, `X-Accel-Charset`, `X-Accel-Expires` and `X-Accel-Limit-Rate` are hidden already.", "X-Powered-By"),
            def!($pre, "pass_header", $p, set_pass_header, Ctx::HSL, ONE, "field", "—",
                "Passes a header that is hidden by default (one of the `X-Accel-*` ones) to the client.", "X-Accel-Buffering"),
            def!($pre, "connect_timeout", $p, set_connect_timeout, Ctx::HSL, ONE, "time", "60s",
                "How long connecting to the application may take; past it the request is answered with 504.", "5s"),
            def!($pre, "send_timeout", $p, set_send_timeout, Ctx::HSL, ONE, "time", "60s",
                "How long one write to the application may wait; past it the request is answered with 504.", "60s"),
            def!($pre, "read_timeout", $p, set_read_timeout, Ctx::HSL, ONE, "time", "60s",
                "How long the application may stay silent between two reads. Before the response head this answers 504; later it ends the response early.", "120s"),
            def!($pre, "buffering", $p, set_buffering, Ctx::HSL, ONE, "on | off", "on",
                "When on, up to the size of the buffers of the response is read before the response starts, so that a response that fits goes with a Content-Length in one write; the rest streams with backpressure (never into temporary files). When off, each piece goes to the client as it comes. The application can choose per response with `X-Accel-Buffering: yes | no`.", "off"),
            def!($pre, "buffer_size", $p, set_buffer_size, Ctx::HSL, ONE, "size", "4k|8k",
                "The largest response head the application may send; a bigger one is answered with 502 (\"upstream sent too big header\").", "16k"),
            def!($pre, "buffers", $p, set_buffers, Ctx::HSL, Arity::args(2, 2), "number size", "8 4k|8k",
                "How much of a response is read ahead with buffering on: number × size bytes, held in memory.", "16 16k"),
            def!($pre, "request_buffering", $p, set_request_buffering, Ctx::HSL, ONE, "on | off", "on",
                "`on`: the whole request body is read before the application is connected to, so another server can be tried. `off`: a body of declared length goes to the application as it arrives, and an attempt is repeated only when nothing was sent (a chunked body is still read first: the protocol needs its length).", "off"),
            def!($pre, "next_upstream", $p, set_next_upstream, Ctx::HSL, Arity::args(1, 9),
                "error | timeout | invalid_header | http_500 | http_503 | http_403 | http_404 | http_429 | non_idempotent | off ...", "error timeout",
                "When the address names an upstream with several servers: the failures after which the request is tried on the next server. A request is never retried once part of the response went to the client, nor (without `non_idempotent`) a POST, LOCK or PATCH.", "error timeout"),
            def!($pre, "next_upstream_tries", $p, set_next_upstream_tries, Ctx::HSL, ONE, "number", "0",
                "Limits the tries of the next-upstream rule (0: as many as there are servers).", "2"),
            def!($pre, "next_upstream_timeout", $p, set_next_upstream_timeout, Ctx::HSL, ONE, "time", "0",
                "Limits the time the next-upstream rule may take, from the first try (0: no limit).", "10s"),
            def!($pre, "intercept_errors", $p, set_intercept_errors, Ctx::HSL, ONE, "on | off", "off",
                "When on, an application response with a status of 300 or more for which an `error_page` is defined is replaced by that error page.", "on"),
            def!($pre, "ignore_client_abort", $p, set_ignore_client_abort, Ctx::HSL, ONE, "on | off", "off",
                "When off, a client that closes its connection while the request waits for the application's response head ends the request (logged with 499) and the connection to the application is closed. When on, the exchange goes on to its end.", "on"),
            def!($pre, "bind", $p, set_bind, Ctx::HSL, Arity::args(1, 2), "address [transparent] | off", "off",
                "Connections to the application go out from this local address (`ip` or `ip:port`; variables allowed, an empty value is the kernel's choice), as `proxy_bind`; `off` cancels an inherited one.", "192.0.2.10"),
            def!($pre, "socket_keepalive", $p, set_socket_keepalive, Ctx::HSL, ONE, "on | off", "off",
                "Sets SO_KEEPALIVE on connections to the application, so that the system's TCP keep-alive probes find a peer that vanished.", "on"),
            def!($pre, "force_ranges", $p, set_force_ranges, Ctx::HSL, ONE, "on | off", "off",
                "Byte ranges of the application's replies, as `proxy_force_ranges`: with `on`, a 200 reply of known length is answered with the client's `Range` whatever the application said about ranges.", "on"),
            def!($pre, "store", $p, set_store, Ctx::HSL, ONE, "on | off | string", "off",
                "Save the body of each 200 reply to a file, as `proxy_store` does (`on`: root or alias + URI; or the path given, with variables).", "on"),
            def!($pre, "store_access", $p, set_store_access, Ctx::HSL, Arity::args(1, 3), "users:permissions ...", "user:rw",
                "The permissions of the files the store saves, as `proxy_store_access`.", "user:rw group:r"),
        ]
    }};
}
pub(crate) use directives;

/// The `$pre_*` directives accepted for nginx compatibility and ignored:
/// vireo never writes a reply to a temporary file (as nginx with
/// `*_max_temp_file_size 0`).
macro_rules! ignored {
    ($pre:literal) => {{
        use $crate::conf::table::{Arity, Ctx};
        const ONE: Arity = Arity::args(1, 1);
        &[
            $crate::conf::core_directives::ignored(
                concat!($pre, "_max_temp_file_size"),
                Ctx::HSL,
                ONE,
                concat!($pre, "_max_temp_file_size size;"),
                concat!("vireo never buffers a reply in a temporary file, as nginx with 0\n\n```nginx\n", $pre, "_max_temp_file_size 0;\n```"),
            ),
            $crate::conf::core_directives::ignored(
                concat!($pre, "_temp_file_write_size"),
                Ctx::HSL,
                ONE,
                concat!($pre, "_temp_file_write_size size;"),
                concat!("vireo never buffers a reply in a temporary file\n\n```nginx\n", $pre, "_temp_file_write_size 16k;\n```"),
            ),
        ]
    }};
}
pub(crate) use ignored;
