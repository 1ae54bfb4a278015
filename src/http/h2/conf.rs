//! Directives of HTTP/2: `http2` and the connection's limits. The connection
//! settings are those of the address's default server, as nginx takes them.

use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::{self, flag, number, set_once, size};
use crate::settings;

settings! {
    /// HTTP/2 settings of one level.
    pub struct Http2Conf / Http2ConfSet {
        pub http2: bool = false,
        pub max_concurrent_streams: u32 = 128,
        pub chunk_size: usize = 8192,
        pub body_preread_size: u32 = 65536,
    }
}

/// Largest flow-control window HTTP/2 allows (RFC 9113 §6.9.1).
const MAX_WINDOW: u64 = (1 << 31) - 1;

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "http2",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().get_mut::<Http2ConfSet>().http2, flag(d, 0)?, d),
        syntax: "http2 on | off;",
        default: "off",
        doc: "Speaks HTTP/2 on this server's addresses, as `listen … http2` does: an address speaks it when any of its servers says so (nginx ≥ 1.25.1). Cleartext connections that open with the HTTP/2 preface (prior knowledge, `curl --http2-prior-knowledge`) get HTTP/2; HTTP/1 clients on the same address keep working. See docs/http2.md.\n\n```nginx\nserver { listen 80; http2 on; }\n```",
    },
    Def {
        name: "http2_max_concurrent_streams",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| {
            let n = values::bounded(d, number(d, 0)?, 1, u32::MAX.into())?;
            set_once(
                &mut s.loc().get_mut::<Http2ConfSet>().max_concurrent_streams,
                n as u32,
                d,
            )
        },
        syntax: "http2_max_concurrent_streams number;",
        default: "128",
        doc: "Most streams (requests) a client may have open at once on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with RST_STREAM(REFUSED_STREAM).\n\n```nginx\nhttp2_max_concurrent_streams 64;\n```",
    },
    Def {
        name: "http2_chunk_size",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let n = values::bounded(d, size(d, 0)?, 1, MAX_WINDOW)?;
            set_once(
                &mut s.loc().get_mut::<Http2ConfSet>().chunk_size,
                n as usize,
                d,
            )
        },
        syntax: "http2_chunk_size size;",
        default: "8k",
        doc: "Most response body bytes sent in one piece on a stream before the other streams get a turn (and before a file is read further).\n\n```nginx\nhttp2_chunk_size 16k;\n```",
    },
    Def {
        name: "http2_body_preread_size",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| {
            let n = values::bounded(d, size(d, 0)?, 0, MAX_WINDOW)?;
            set_once(
                &mut s.loc().get_mut::<Http2ConfSet>().body_preread_size,
                n as u32,
                d,
            )
        },
        syntax: "http2_body_preread_size size;",
        default: "64k",
        doc: "Request body bytes a client may send on a stream before the handler reads them: the initial stream window (SETTINGS_INITIAL_WINDOW_SIZE). The window is reopened as the handler consumes the body.\n\n```nginx\nhttp2_body_preread_size 128k;\n```",
    },
];
