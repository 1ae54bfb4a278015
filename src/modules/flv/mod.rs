//! `flv`: pseudo-streaming of Flash Video files, as nginx's module of the
//! same name. A request with `?start=N` gets the FLV file header and then the
//! file from byte N, so that a player seeks in a file served over plain HTTP;
//! without it, or with a `start` that is not a byte of the file, the file is
//! served whole. Either way as the static handler serves files: validators,
//! type, conditionals, one range (`Range` applies to what is sent).

use crate::conf::table::{Arity, Ctx, Def};
use crate::core::message::head::Method;
use crate::core::message::response::{Body, Multipart};
use crate::core::module::Module;
use crate::core::request::{BoxFuture, Content, Outcome, Request, RequestBody};
use crate::modules::static_files::cache::FileInfo;
use crate::modules::static_files::handler;
use std::sync::Arc;

/// What an FLV file starts with, sent before the bytes from `start`: the
/// signature, version 1, flags for audio and video, the header's size (9)
/// and the first tag's "previous tag size" (0).
const HEADER: &[u8] = b"FLV\x01\x05\x00\x00\x00\x09\x00\x00\x00\x00";

/// The content handler of an `flv` location.
#[derive(Debug)]
struct Flv;

impl Content for Flv {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        _body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        let out = match req.method() {
            Method::Get | Method::Head => {
                let start = start(req);
                handler::content_with(req, &|info| from(info, start))
            }
            _ => Outcome::Respond(req.error(405)),
        };
        Box::pin(std::future::ready(out))
    }
}

/// The `start` argument: decimal digits only, else 0 (nginx's `ngx_atoof`).
fn start(req: &Request<'_>) -> u64 {
    let Some(v) = req
        .args()
        .and_then(|q| crate::core::vars::find_arg(q, "start"))
    else {
        return 0;
    };
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The header and the file from `start`; `None` (the whole file) when
/// `start` is 0 or past the file's last byte.
fn from(info: &FileInfo, start: u64) -> Option<Body> {
    if start == 0 || start >= info.size {
        return None;
    }
    Some(Body::Multipart {
        file: info.file.clone()?,
        parts: Box::new(Multipart {
            boundary: String::new(),
            content_type: String::new(),
            parts: vec![(HEADER.to_vec(), start..info.size)],
            trailer: Vec::new(),
        }),
    })
}

static DIRECTIVES: &[Def] = &[Def {
    name: "flv",
    ignored: false,
    ctx: Ctx::LOCATION,
    arity: Arity::args(0, 0),
    set: |s, d, _| s.set_content(d, Arc::new(Flv)),
    syntax: "flv;",
    default: "—",
    doc: "Serves the location's files as Flash Video with pseudo-streaming: a GET or HEAD with `?start=N` (decimal bytes) gets the 13-byte FLV header followed by the file from byte N, with a `Content-Length` of both; without `start`, or when it is not a byte of the file, the file is sent whole. Files are found as the static handler finds them (`root`, `alias`, `open_file_cache`), sent with their `Last-Modified`, `ETag` and type, and take conditional requests and one byte range of what is sent. Other methods get 405.\n\n```nginx\nlocation ~ \\.flv$ { flv; }\n```",
}];

/// `flv`.
pub static MODULE: Module = Module {
    name: "flv",
    nginx: &["http_flv_module"],
    directives: &[DIRECTIVES],
    ..Module::EMPTY
};
