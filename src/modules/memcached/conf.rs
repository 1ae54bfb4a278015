//! Directives of the memcached handler: `memcached_pass` (the location's
//! content handler) and the inheritable `memcached_*` settings.

use super::MemcachedPass;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Ctx, Def, Env, ONE, Scope};
use crate::conf::values::{bad_arg, flag, size, time};
use crate::settings;
use crate::upstream::next::NextUpstream;
use std::sync::Arc;
use std::time::Duration;

settings! {
    /// memcached settings of one level.
    pub struct MemcachedConf / MemcachedConfSet {
        pub connect_timeout: Duration = Duration::from_secs(60),
        pub send_timeout: Duration = Duration::from_secs(60),
        pub read_timeout: Duration = Duration::from_secs(60),
        /// The longest head line read (`memcached_buffer_size`).
        pub buffer_size: usize = 8192,
        /// Flag bits that mark a value as gzip-compressed.
        pub gzip_flag: u32 = 0,
        pub next_upstream: NextUpstream = NextUpstream::DEFAULT,
        pub next_upstream_tries: u32 = 0,
        pub next_upstream_timeout: Duration = Duration::ZERO,
        pub socket_keepalive: bool = false,
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut MemcachedConfSet {
    s.loc().get_mut::<MemcachedConfSet>()
}

fn set_pass(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let a = d.arg(0);
    let a = a.strip_prefix("memcached://").unwrap_or(a);
    let target = crate::upstream::dynamic::Target::new(e, a, 11211, &d.span)?;
    s.set_content(d, Arc::new(MemcachedPass { target }))
}

/// `memcached_next_upstream`: nginx's words for memcached (`invalid_response`,
/// `not_found`) are the invalid header and 404 kinds.
fn next_upstream(d: &Directive) -> Result<NextUpstream, ConfError> {
    if d.args.len() == 1 && d.arg(0) == "off" {
        return Ok(NextUpstream::OFF);
    }
    let mut set = NextUpstream::OFF;
    for a in d.arg_strs() {
        set = set.with(match a {
            "error" => NextUpstream::ERROR,
            "timeout" => NextUpstream::TIMEOUT,
            "invalid_response" => NextUpstream::INVALID_HEADER,
            "not_found" => NextUpstream::HTTP_404,
            _ => return Err(bad_arg(d, a)),
        });
    }
    Ok(set)
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "memcached_pass",
        ignored: false,
        ctx: Ctx::LOCATION.or(Ctx::IF),
        arity: ONE,
        set: set_pass,
        syntax: "memcached_pass address;",
        default: "—",
        doc: "Answers with the value memcached holds under `$memcached_key` (set it with `set`; a request without one gets 500): 200 with the value as the body, its type from the URI's extension (`default_type` otherwise), `Content-Encoding: gzip` when the value's flags have a bit of `memcached_gzip_flag`; 404 when memcached has no such key. The address is `host:port` (11211 by default), `unix:/path`, or an `upstream` block (whose `keepalive` pools the connections).\n\n```nginx\nlocation / {\n    set $memcached_key \"$uri?$args\";\n    memcached_pass 127.0.0.1:11211;\n    error_page 404 502 504 = @fallback;\n}\n```",
    },
    Def {
        name: "memcached_connect_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).connect_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "memcached_connect_timeout time;",
        default: "60s",
        doc: "How long connecting to memcached may take.\n\n```nginx\nmemcached_connect_timeout 1s;\n```",
    },
    Def {
        name: "memcached_send_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).send_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "memcached_send_timeout time;",
        default: "60s",
        doc: "How long a write of the request to memcached may wait.\n\n```nginx\nmemcached_send_timeout 1s;\n```",
    },
    Def {
        name: "memcached_read_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).read_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "memcached_read_timeout time;",
        default: "60s",
        doc: "How long a read of memcached's reply may wait.\n\n```nginx\nmemcached_read_timeout 1s;\n```",
    },
    Def {
        name: "memcached_buffer_size",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).buffer_size = Some(size(d, 0)? as usize);
            Ok(())
        },
        syntax: "memcached_buffer_size size;",
        default: "8k",
        doc: "The longest first line of memcached's reply (`VALUE key flags length`).\n\n```nginx\nmemcached_buffer_size 16k;\n```",
    },
    Def {
        name: "memcached_gzip_flag",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let f = d.arg(0).parse::<u32>().map_err(|_| bad_arg(d, d.arg(0)))?;
            loc(s).gzip_flag = Some(f);
            Ok(())
        },
        syntax: "memcached_gzip_flag flag;",
        default: "—",
        doc: "A value whose flags share a bit with `flag` is sent with `Content-Encoding: gzip`.\n\n```nginx\nmemcached_gzip_flag 2;\n```",
    },
    Def {
        name: "memcached_next_upstream",
        ignored: false,
        ctx: Ctx::HSL,
        arity: crate::conf::table::Arity::args(1, crate::conf::table::MANY),
        set: |s, d, _| {
            loc(s).next_upstream = Some(next_upstream(d)?);
            Ok(())
        },
        syntax: "memcached_next_upstream error | timeout | invalid_response | not_found | off ...;",
        default: "error timeout",
        doc: "With an upstream block of several servers: the failures after which the next server is asked.\n\n```nginx\nmemcached_next_upstream error timeout not_found;\n```",
    },
    Def {
        name: "memcached_next_upstream_tries",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).next_upstream_tries =
                Some(crate::conf::values::number(d, 0)?.min(u32::MAX as u64) as u32);
            Ok(())
        },
        syntax: "memcached_next_upstream_tries number;",
        default: "0",
        doc: "Most attempts per request (0: no limit beyond the servers).\n\n```nginx\nmemcached_next_upstream_tries 2;\n```",
    },
    Def {
        name: "memcached_next_upstream_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).next_upstream_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "memcached_next_upstream_timeout time;",
        default: "0",
        doc: "No further attempt starts after this long (0: no limit).\n\n```nginx\nmemcached_next_upstream_timeout 2s;\n```",
    },
    Def {
        name: "memcached_socket_keepalive",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            loc(s).socket_keepalive = Some(flag(d, 0)?);
            Ok(())
        },
        syntax: "memcached_socket_keepalive on | off;",
        default: "off",
        doc: "Turns on TCP keep-alive probes (SO_KEEPALIVE) on new connections to memcached.\n\n```nginx\nmemcached_socket_keepalive on;\n```",
    },
];
