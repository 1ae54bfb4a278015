//! Directives of request mirroring: `mirror`, `mirror_request_body`.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::{flag, set_once};
use crate::settings;
use std::sync::Arc;

settings! {
    /// Mirroring settings of one level. The `mirror` URIs are one list set
    /// as a whole: a level with any (or `mirror off`, an empty list) drops
    /// the inherited ones.
    pub struct MirrorConf / MirrorConfSet {
        /// The URIs each main request is mirrored to, in order.
        pub uris: Arc<[Arc<[u8]>]> = Arc::from(Vec::new()),
        /// The client's body is read whole first and the mirrors get it.
        pub request_body: bool = true,
    }
}

/// `mirror URI` adds to the level's list, `mirror off` empties it; either
/// after the other at one level is a duplicate, as nginx.
fn set_mirror(slot: &mut Option<Arc<[Arc<[u8]>]>>, d: &Directive) -> Result<(), ConfError> {
    let duplicate = || ConfError::new(format!("\"{}\" directive is duplicate", d.name), &d.span);
    match d.arg(0) {
        "off" => {
            if slot.is_some() {
                return Err(duplicate());
            }
            *slot = Some(Arc::from(Vec::new()));
        }
        uri => {
            if slot.as_ref().is_some_and(|l| l.is_empty()) {
                return Err(duplicate());
            }
            crate::conf::values::push(slot, Arc::from(uri.as_bytes()));
        }
    }
    Ok(())
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "mirror",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_mirror(&mut s.loc().get_mut::<MirrorConfSet>().uris, d),
        syntax: "mirror uri | off;",
        default: "off",
        doc: "Mirrors each main request to `uri` (a location of this server, `internal` ones included): a background subrequest with the request's method, headers and arguments runs through that location's phases and handler (usually a `proxy_pass` to a shadow backend), and its answer is dropped. The main request's response goes out without waiting for mirrors; the connection waits for them to end before its next request, and the request is logged then. Several `mirror` lines at one level mirror to each URI in order; `off` cancels inherited ones. Subrequests themselves are never mirrored. See `mirror_request_body`.\n\n```nginx\nlocation / {\n    mirror /mirror;\n    proxy_pass http://backend;\n}\nlocation = /mirror {\n    internal;\n    proxy_pass http://shadow$request_uri;\n}\n```",
    },
    Def {
        name: "mirror_request_body",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = flag(d, 0)?;
            set_once(&mut s.loc().get_mut::<MirrorConfSet>().request_body, v, d)
        },
        syntax: "mirror_request_body on | off;",
        default: "on",
        doc: "`on`: the client's request body is read whole (in memory up to `client_body_buffer_size`, else in a temporary file) before the mirrors start, and they get it too; unbuffered proxying of the body (`proxy_request_buffering off`, `fastcgi_request_buffering off`) then sends the body read. `off`: the mirrors run at once with no body (and no Content-Length or Transfer-Encoding), and the main request reads its body as its handler wants.\n\n```nginx\nmirror /mirror;\nmirror_request_body off;\n```",
    },
];
