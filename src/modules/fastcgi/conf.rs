//! Directives of the FastCGI gateway: `fastcgi_pass` (the location's content
//! handler) and the inheritable `fastcgi_*` settings.

use super::handler::FastcgiPass;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, Env, ONE, Scope};
use crate::conf::values::{bad_arg, flag, regex, size, time};
use crate::core::vars::Re;
use crate::settings;
use crate::upstream::next::NextUpstream;
use crate::upstream::params::{self, Param};
use std::sync::Arc;
use std::time::Duration;

settings! {
    /// FastCGI settings of one level. `fastcgi_param`, `fastcgi_hide_header`
    /// and `fastcgi_pass_header` are lists set as a whole: a level with any of
    /// them drops the inherited ones, as nginx.
    pub struct FastcgiConf / FastcgiConfSet {
        pub params: Arc<Vec<Param>> = Arc::new(Vec::new()),
        pub index: Option<Arc<str>> = None,
        pub split_path_info: Option<Arc<Re>> = None,
        pub intercept_errors: bool = false,
        pub ignore_client_abort: bool = false,
        /// `fastcgi_force_ranges`: byte ranges of every reply.
        pub force_ranges: bool = false,
        pub connect_timeout: Duration = Duration::from_secs(60),
        pub send_timeout: Duration = Duration::from_secs(60),
        pub read_timeout: Duration = Duration::from_secs(60),
        pub keep_conn: bool = false,
        pub buffering: bool = true,
        pub buffers: (usize, usize) = (8, 8192),
        pub buffer_size: usize = 8192,
        pub hide_header: Arc<Vec<Box<str>>> = Arc::new(Vec::new()),
        pub pass_header: Arc<Vec<Box<str>>> = Arc::new(Vec::new()),
        pub next_upstream: NextUpstream = NextUpstream::DEFAULT,
        pub next_upstream_tries: u32 = 0,
        pub next_upstream_timeout: Duration = Duration::ZERO,
        /// `fastcgi_socket_keepalive`: SO_KEEPALIVE on connections to applications.
        pub socket_keepalive: bool = false,
        pub pass_request_headers: bool = true,
        pub pass_request_body: bool = true,
        /// `fastcgi_request_buffering`: read the whole body before connecting.
        pub request_buffering: bool = true,
        /// `fastcgi_catch_stderr`: strings that, sent in stderr before the
        /// head, make the reply invalid.
        pub catch_stderr: Arc<Vec<Box<[u8]>>> = Arc::new(Vec::new()),
        /// `fastcgi_store`: where a 200 reply's body is saved (`None`: off).
        pub store: Option<Arc<crate::upstream::store::Store>> = None,
        /// `fastcgi_store_access`: the mode of stored files.
        pub store_access: u32 = 0o600,
    }
}

fn set_pass(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let a = d.arg(0);
    let a = a.strip_prefix("fastcgi://").unwrap_or(a);
    // php-fpm's customary port when a host is written without one.
    let target = crate::upstream::dynamic::Target::new(e, a, 9000, &d.span)?;
    s.set_content(d, Arc::new(FastcgiPass { target }))
}

fn push_param(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    params::push(&mut s.loc().get_mut::<FastcgiConfSet>().params, d, e)
}

fn push_name(slot: &mut Option<Arc<Vec<Box<str>>>>, d: &Directive) {
    let list = slot.get_or_insert_with(|| Arc::new(Vec::new()));
    Arc::make_mut(list).push(d.arg(0).to_ascii_lowercase().into());
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "fastcgi_pass",
        ignored: false,
        ctx: Ctx::LOCATION.or(Ctx::LIMIT_EXCEPT).or(Ctx::IF),
        arity: Arity::args(1, 1),
        set: set_pass,
        syntax: "fastcgi_pass address;",
        default: "—",
        doc: "Makes a FastCGI application (php-fpm) the location's content handler. The address is `host:port`, `unix:/path/to/socket`, or the name of an `upstream` block; with variables it is evaluated per request (a block's name, an address, or a host resolved through `resolver`; docs/proxy.md). The request body streams to the application as it arrives (a chunked body is read first, bounded by client_max_body_size, so that CONTENT_LENGTH can be sent); the response streams back to the client with backpressure and never goes through temporary files. The application's `Status:` and `Location:` headers set the status; a local `Location: /path` without a status, or an `X-Accel-Redirect` header, is an internal redirect (to an `internal` location, say). STDERR records are written to the error log. A URI holding a CR or LF is refused with 400 (the CVE-2019-11043 pattern) and a SCRIPT_FILENAME with a `..` segment with 403. Failures: cannot connect → 502, timeouts → 504, a malformed reply → 502 (logged). See docs/fastcgi.md.\n\n```nginx\nlocation ~ \\.php$ {\n    try_files $uri =404;\n    include fastcgi_params;\n    fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\n    fastcgi_pass 127.0.0.1:9000;\n}\n```",
    },
    Def {
        name: "fastcgi_param",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(2, 3),
        set: push_param,
        syntax: "fastcgi_param parameter value [if_not_empty];",
        default: "—",
        doc: "A parameter sent to the FastCGI application; the value may hold variables. With `if_not_empty` the parameter is left out when its value is empty. A level with any `fastcgi_param` drops the ones it would inherit. The request's headers are sent too, as `HTTP_*` parameters (not those a `fastcgi_param` already sets, not names with `_`, and never `Proxy`).\n\n```nginx\nfastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;\nfastcgi_param HTTPS $https if_not_empty;\n```",
    },
    Def {
        name: "fastcgi_index",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().index = Some(Some(Arc::from(d.arg(0))));
            Ok(())
        },
        syntax: "fastcgi_index name;",
        default: "—",
        doc: "File name appended to `$fastcgi_script_name` when the URI ends with a slash.\n\n```nginx\nfastcgi_index index.php;\n```",
    },
    Def {
        name: "fastcgi_split_path_info",
        ignored: false,
        ctx: Ctx::LOCATION,
        arity: Arity::args(1, 1),
        set: |s, d, e| {
            let re = regex(d, d.arg(0), false, &mut e.vars)?;
            if re.groups() != 2 {
                return Err(ConfError::new(
                    format!(
                        "pattern \"{}\" must have 2 captures in \"fastcgi_split_path_info\" directive",
                        d.arg(0)
                    ),
                    &d.span,
                ));
            }
            s.loc().get_mut::<FastcgiConfSet>().split_path_info = Some(Some(Arc::new(re)));
            Ok(())
        },
        syntax: "fastcgi_split_path_info regex;",
        default: "—",
        doc: "A regex with two captures matched on the URI: the first becomes `$fastcgi_script_name`, the second `$fastcgi_path_info`. When it does not match, the script name is the whole URI and the path info empty.\n\n```nginx\nfastcgi_split_path_info ^(.+?\\.php)(/.*)$;\nfastcgi_param PATH_INFO $fastcgi_path_info;\n```",
    },
    Def {
        name: "fastcgi_intercept_errors",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().intercept_errors = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_intercept_errors on | off;",
        default: "off",
        doc: "When on, an application response with a status of 300 or more for which an `error_page` is defined is replaced by that error page.\n\n```nginx\nfastcgi_intercept_errors on;\nerror_page 500 502 503 /50x.html;\n```",
    },
    Def {
        name: "fastcgi_store",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            s.loc().get_mut::<FastcgiConfSet>().store = Some(crate::upstream::store::parse(d, e)?);
            Ok(())
        },
        syntax: "fastcgi_store on | off | string;",
        default: "off",
        doc: "Save the body of each 200 reply to a file, as `proxy_store` does (`on`: root or alias + URI; or the path given, with variables).\n\n```nginx\nfastcgi_store on;\n```",
    },
    Def {
        name: "fastcgi_store_access",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 3),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().store_access =
                Some(crate::upstream::store::parse_access(d)?);
            Ok(())
        },
        syntax: "fastcgi_store_access users:permissions ...;",
        default: "user:rw",
        doc: "The permissions of files `fastcgi_store` saves, as `proxy_store_access`.\n\n```nginx\nfastcgi_store_access user:rw group:r;\n```",
    },
    Def {
        name: "fastcgi_force_ranges",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().force_ranges = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_force_ranges on | off;",
        default: "off",
        doc: "Byte ranges of the application's replies, as `proxy_force_ranges`: with `on`, a 200 reply of known length is answered with the client's `Range` whatever the application said about ranges.\n\n```nginx\nfastcgi_force_ranges on;\n```",
    },
    Def {
        name: "fastcgi_ignore_client_abort",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().ignore_client_abort = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_ignore_client_abort on | off;",
        default: "off",
        doc: "When off (the default), a client that closes its connection while the request waits for the application's response head ends the request: the connection to the application is closed rather than kept (the application sees the client leave; a keep-alive pool is not filled with replies nobody waits for) and the request is logged with status 499. When on, the exchange with the application goes on to its end. The wait is watched once the request body has been sent; an HTTP/1 client that already sent more bytes (a pipelined request) is not seen leaving there.\n\n```nginx\nfastcgi_ignore_client_abort on;\n```",
    },
    Def {
        name: "fastcgi_connect_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().connect_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_connect_timeout time;",
        default: "60s",
        doc: "How long connecting to the application may take; past it the request is answered with 504.\n\n```nginx\nfastcgi_connect_timeout 5s;\n```",
    },
    Def {
        name: "fastcgi_send_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().send_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_send_timeout time;",
        default: "60s",
        doc: "How long one write to the application may wait (between two successful writes, not for the whole request); past it the request is answered with 504.\n\n```nginx\nfastcgi_send_timeout 60s;\n```",
    },
    Def {
        name: "fastcgi_read_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().read_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_read_timeout time;",
        default: "60s",
        doc: "How long the application may stay silent between two reads. Before the response head this answers 504; later it ends the response early.\n\n```nginx\nfastcgi_read_timeout 120s;\n```",
    },
    Def {
        name: "fastcgi_keep_conn",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().keep_conn = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_keep_conn on | off;",
        default: "off",
        doc: "Asks the application to keep the connection open after a request (FCGI_KEEP_CONN), so that it can be reused from the worker's pool of the `upstream` block (`keepalive N`). Without an upstream keep-alive pool, connections are closed after each request.\n\n```nginx\nfastcgi_keep_conn on;\n```",
    },
    Def {
        name: "fastcgi_buffering",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().buffering = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_buffering on | off;",
        default: "on",
        doc: "When on, up to the size of `fastcgi_buffers` of the response is read from the application before the response starts, so that a response that fits is sent with a Content-Length in one write and the application is freed at once; the rest of a larger response streams with backpressure (never into temporary files). When off, each piece goes to the client as it comes, also through compression (the encoder is flushed whenever the application pauses). The application can choose per response with `X-Accel-Buffering: yes | no`.\n\n```nginx\nfastcgi_buffering off;\n```",
    },
    Def {
        name: "fastcgi_buffers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(2, 2),
        set: |s, d, _| {
            let n = crate::conf::values::number(d, 0)?;
            let sz = size(d, 1)?;
            if n == 0 || sz == 0 {
                return Err(bad_arg(d, d.arg(0)));
            }
            s.loc().get_mut::<FastcgiConfSet>().buffers = Some((n as usize, sz as usize));
            Ok(())
        },
        syntax: "fastcgi_buffers number size;",
        default: "8 8k",
        doc: "How much of a response is read ahead with `fastcgi_buffering on`: number × size bytes, held in memory.\n\n```nginx\nfastcgi_buffers 16 16k;\n```",
    },
    Def {
        name: "fastcgi_buffer_size",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().buffer_size = Some(size(d, 0)?.max(512) as usize);
            Ok(())
        },
        syntax: "fastcgi_buffer_size size;",
        default: "8k",
        doc: "The largest response head the application may send; a bigger one is answered with 502 (\"upstream sent too big header\").\n\n```nginx\nfastcgi_buffer_size 16k;\n```",
    },
    Def {
        name: "fastcgi_hide_header",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            push_name(&mut s.loc().get_mut::<FastcgiConfSet>().hide_header, d);
            Ok(())
        },
        syntax: "fastcgi_hide_header field;",
        default: "—",
        doc: "A header of the application's response not passed to the client. `Status`, `X-Accel-Redirect`, `X-Accel-Buffering`, `X-Accel-Charset`, `X-Accel-Expires` and `X-Accel-Limit-Rate` are hidden already.\n\n```nginx\nfastcgi_hide_header X-Powered-By;\n```",
    },
    Def {
        name: "fastcgi_pass_header",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            push_name(&mut s.loc().get_mut::<FastcgiConfSet>().pass_header, d);
            Ok(())
        },
        syntax: "fastcgi_pass_header field;",
        default: "—",
        doc: "Passes a header that is hidden by default (one of the `X-Accel-*` ones) to the client.\n\n```nginx\nfastcgi_pass_header X-Accel-Buffering;\n```",
    },
    Def {
        name: "fastcgi_next_upstream",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 9),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().next_upstream =
                Some(NextUpstream::parse(d, NextUpstream::FASTCGI)?);
            Ok(())
        },
        syntax: "fastcgi_next_upstream error | timeout | invalid_header | http_500 | http_503 | http_403 | http_404 | http_429 | non_idempotent | off ...;",
        default: "error timeout",
        doc: "When `fastcgi_pass` names an upstream with several servers: the failures after which the request is tried on the next server. A request is never retried once part of the response went to the client, nor (without `non_idempotent`) a POST, LOCK or PATCH once its body was sent.\n\n```nginx\nfastcgi_next_upstream error timeout;\n```",
    },
    Def {
        name: "fastcgi_next_upstream_tries",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().next_upstream_tries =
                Some(crate::conf::values::number(d, 0)?.min(u32::MAX as u64) as u32);
            Ok(())
        },
        syntax: "fastcgi_next_upstream_tries number;",
        default: "0",
        doc: "Limits the tries of `fastcgi_next_upstream` (0: as many as there are servers).\n\n```nginx\nfastcgi_next_upstream_tries 2;\n```",
    },
    Def {
        name: "fastcgi_socket_keepalive",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().socket_keepalive = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_socket_keepalive on | off;",
        default: "off",
        doc: "Turns on TCP keep-alive probes (SO_KEEPALIVE, with the system's timings) on new connections to FastCGI applications.\n\n```nginx\nfastcgi_socket_keepalive on;\n```",
    },
    Def {
        name: "fastcgi_next_upstream_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().next_upstream_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_next_upstream_timeout time;",
        default: "0",
        doc: "No further attempt of `fastcgi_next_upstream` starts after this long (0: no limit).\n\n```nginx\nfastcgi_next_upstream_timeout 10s;\n```",
    },
    Def {
        name: "fastcgi_pass_request_headers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().pass_request_headers = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_pass_request_headers on | off;",
        default: "on",
        doc: "Whether the request's headers are sent as `HTTP_*` parameters.\n\n```nginx\nfastcgi_pass_request_headers off;\n```",
    },
    Def {
        name: "fastcgi_pass_request_body",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().pass_request_body = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_pass_request_body on | off;",
        default: "on",
        doc: "Whether the request body is sent to the application.\n\n```nginx\nfastcgi_pass_request_body off;\n```",
    },
    Def {
        name: "fastcgi_request_buffering",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<FastcgiConfSet>().request_buffering = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "fastcgi_request_buffering on | off;",
        default: "on",
        doc: "`on`: the whole request body is read (in memory up to `client_body_buffer_size`, else in a temporary file) before the application is connected to, so another server can be tried. `off`: the body goes to the application as STDIN records as it arrives (without `CONTENT_LENGTH` when the client sent it chunked), and an attempt is repeated only when nothing was sent.\n\n```nginx\nfastcgi_request_buffering off;\n```",
    },
    Def {
        name: "fastcgi_catch_stderr",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            let list = s
                .loc()
                .get_mut::<FastcgiConfSet>()
                .catch_stderr
                .get_or_insert_with(|| Arc::new(Vec::new()));
            Arc::make_mut(list).push(d.arg(0).as_bytes().into());
            Ok(())
        },
        syntax: "fastcgi_catch_stderr string;",
        default: "—",
        doc: "A string which, found in what the application sends on stderr before its response head, makes the response invalid (`invalid_header` for `fastcgi_next_upstream`, else 502), as nginx. Several may be given; a level with any does not inherit its parent's.\n\n```nginx\nfastcgi_catch_stderr \"PHP Fatal error\";\nfastcgi_next_upstream error timeout invalid_header;\n```",
    },
];

/// Accepted for nginx compatibility: vireo never writes an upstream's reply
/// to a temporary file (it is sent on as the client takes it), which is what
/// nginx does with `fastcgi_max_temp_file_size 0`.
pub static IGNORED: &[Def] = &[
    crate::conf::core_directives::ignored(
        "fastcgi_max_temp_file_size",
        Ctx::HSL,
        ONE,
        "fastcgi_max_temp_file_size size;",
        "vireo never buffers a reply in a temporary file, as nginx with 0\n\n```nginx\nfastcgi_max_temp_file_size 0;\n```",
    ),
    crate::conf::core_directives::ignored(
        "fastcgi_temp_file_write_size",
        Ctx::HSL,
        ONE,
        "fastcgi_temp_file_write_size size;",
        "vireo never buffers a reply in a temporary file\n\n```nginx\nfastcgi_temp_file_write_size 16k;\n```",
    ),
];
