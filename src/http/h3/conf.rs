//! Directives of HTTP/3 and QUIC: `http3` and the connection's limits. The
//! connection settings are those of the address's default server, as nginx
//! takes them (the server a request chooses by `:authority` sets the rest).

use crate::conf::ast::ConfError;
use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::{self, flag, number, set_once, size};
use crate::settings;
use std::sync::Arc;

settings! {
    /// HTTP/3 and QUIC settings of one level.
    pub struct Http3Conf / Http3ConfSet {
        pub http3: bool = true,
        pub max_concurrent_streams: u32 = 128,
        pub stream_buffer_size: u32 = 65536,
        pub retry: bool = false,
        pub gso: bool = false,
        /// `quic_host_key`: the file's bytes, the secret the address
        /// validation tokens and stateless resets are keyed with.
        pub host_key: Option<Arc<[u8]>> = None,
    }
}

/// Most bidirectional streams QUIC can count (RFC 9000 §4.6: 2^60).
const MAX_STREAMS: u64 = 1 << 60;
/// Largest stream window QUIC can say (a variable-length integer, 2^62 - 1),
/// bounded here to what a `u32` holds.
const MAX_WINDOW: u64 = u32::MAX as u64;

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "http3",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().get_mut::<Http3ConfSet>().http3, flag(d, 0)?, d),
        syntax: "http3 on | off;",
        default: "on",
        doc: "Offers HTTP/3 (ALPN `h3`) on this server's `listen … quic` addresses. With `off` the QUIC handshake has no application protocol to agree on and fails. See docs/http3.md.\n\n```nginx\nhttp3 on;\n```",
    },
    Def {
        name: "http3_max_concurrent_streams",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| {
            let n = values::bounded(d, number(d, 0)?, 1, MAX_STREAMS)?;
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            set_once(
                &mut s.loc().get_mut::<Http3ConfSet>().max_concurrent_streams,
                n,
                d,
            )
        },
        syntax: "http3_max_concurrent_streams number;",
        default: "128",
        doc: "Most request streams a client may have open at once on one HTTP/3 connection (QUIC's `initial_max_streams_bidi`, raised as streams end). A client opening more breaks the QUIC limit: the connection is closed with STREAM_LIMIT_ERROR.\n\n```nginx\nhttp3_max_concurrent_streams 64;\n```",
    },
    Def {
        name: "http3_stream_buffer_size",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| {
            let n = values::bounded(d, size(d, 0)?, 1024, MAX_WINDOW)?;
            set_once(
                &mut s.loc().get_mut::<Http3ConfSet>().stream_buffer_size,
                n as u32,
                d,
            )
        },
        syntax: "http3_stream_buffer_size size;",
        default: "64k",
        doc: "The buffer of each QUIC stream: request body bytes a client may send on a stream before the handler reads them (its flow-control window, reopened as the body is consumed), and the most response bytes read from a file or handed to the stream at once.\n\n```nginx\nhttp3_stream_buffer_size 128k;\n```",
    },
    Def {
        name: "quic_retry",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().get_mut::<Http3ConfSet>().retry, flag(d, 0)?, d),
        syntax: "quic_retry on | off;",
        default: "off",
        doc: "Validates each new client's address first: its first Initial packet is answered with a Retry carrying a token (keyed with `quic_host_key`) that the client must send back, so a spoofed source address gets no more than the Retry. Without it the handshake still sends at most three times what an unvalidated address sent (RFC 9000 §8).\n\n```nginx\nquic_retry on;\n```",
    },
    Def {
        name: "quic_gso",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().get_mut::<Http3ConfSet>().gso, flag(d, 0)?, d),
        syntax: "quic_gso on | off;",
        default: "off",
        doc: "Sends several QUIC packets of a connection with one system call through UDP generic segmentation offload (UDP_SEGMENT), where the kernel has it.\n\n```nginx\nquic_gso on;\n```",
    },
    Def {
        name: "quic_host_key",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, e| {
            let path = e.path(d.arg(0));
            let key = std::fs::read(&path).map_err(|err| {
                ConfError::new(
                    format!(
                        "cannot read \"{}\" of \"quic_host_key\": {err}",
                        path.display()
                    ),
                    &d.span,
                )
            })?;
            if key.is_empty() {
                return Err(ConfError::new(
                    format!("\"quic_host_key\" file \"{}\" is empty", path.display()),
                    &d.span,
                ));
            }
            set_once(
                &mut s.loc().get_mut::<Http3ConfSet>().host_key,
                Some(Arc::from(key)),
                d,
            )
        },
        syntax: "quic_host_key file;",
        default: "—",
        doc: "A file whose contents are the secret that address validation tokens (`quic_retry`, NEW_TOKEN) and stateless reset tokens are derived from. Without it a random secret is made when vireo starts and kept across reloads (it is shared by all workers, so any worker validates any token).\n\n```nginx\nquic_host_key /etc/vireo/quic_host.key;\n```",
    },
    Def {
        name: "quic_active_connection_id_limit",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |_, d, _| Err(ConfError::new(ACTIVE_CID_LIMIT, &d.span)),
        syntax: "quic_active_connection_id_limit number;",
        default: "—",
        doc: "Refused, with an error naming its line: vireo's QUIC stack (quinn) advertises an `active_connection_id_limit` of 5 on every connection (it keeps up to 5 of a client's connection IDs; a client that sends more is closed with CONNECTION_ID_LIMIT_ERROR) and takes no other value.\n\n```nginx\n# not available: the limit is always 5\nquic_active_connection_id_limit 2;\n```",
    },
];

/// Why `quic_active_connection_id_limit` is refused.
const ACTIVE_CID_LIMIT: &str = "\"quic_active_connection_id_limit\" is not supported by vireo: its QUIC stack (quinn) always advertises an active_connection_id_limit of 5 and cannot be set to another";
