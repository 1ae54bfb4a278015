//! Response compression: gzip, brotli and zstd on the fly (a response filter),
//! precompressed static variants (`file.gz`, `file.br`, `file.zst`), and a
//! per-worker cache of compressed variants of hot static files.
//!
//! The filter follows nginx's gzip filter: only statuses 200, 403 and 404, not
//! HEAD, not a body that already has a Content-Encoding, not below the minimum
//! length, only listed types; the request passes nginx's `ngx_http_gzip_ok`
//! checks (HTTP version, `gzip_proxied` for requests with Via, `gzip_disable`).
//! The client's Accept-Encoding q-values choose among the codings that are on;
//! equal weights go br, zstd, gzip. A compressed response loses its
//! Content-Length (also when compressed at once, as nginx's always goes
//! out chunked) and Accept-Ranges, gets
//! `Content-Encoding` and a weak ETag. Ranges are answered by the static
//! handler before this filter, so a 206 is never compressed.

pub mod cache;
pub mod conf;
pub mod encoder;
pub mod negotiate;

use crate::core::message::head::Method;
use crate::core::message::response::{Body, Response, Value};
use crate::core::module::{Hooks, Module, Ordered};
use crate::core::request::Request;
use crate::modules::static_files::cache::FileInfo;
use crate::modules::static_files::conf::StaticConf;
use bytes::Bytes;
use conf::{CompressConf, StaticMode};
use encoder::{Encoder, FileStream, Params, WrapStream};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::rc::Rc;

/// Bodies up to this length are compressed in one go (and may be cached);
/// longer ones are compressed as they are sent.
pub const WHOLE: u64 = 256 * 1024;

/// A content coding vireo can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coding {
    Br,
    Zstd,
    Gzip,
}

impl Coding {
    /// In the server's order of preference.
    pub const ALL: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

    /// Position in the server's preference (lower first).
    pub fn rank(self) -> u8 {
        self as u8
    }

    /// The Content-Encoding token.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// Suffix of a precompressed file.
    pub fn ext(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }
}

impl CompressConf {
    pub fn params(&self, coding: Coding) -> Params {
        let level = match coding {
            Coding::Br => self.brotli_comp_level,
            Coding::Zstd => self.zstd_comp_level,
            Coding::Gzip => self.gzip_comp_level,
        };
        Params {
            coding,
            level,
            window: if coding == Coding::Br {
                self.brotli_window
            } else {
                0
            },
        }
    }
}

fn find(headers: &[(&'static str, Value)], name: &str) -> Option<usize> {
    headers
        .iter()
        .position(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// Add `Vary: Accept-Encoding` unless a Vary already names it.
pub fn add_vary(resp: &mut Response) {
    let named = resp.headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("vary")
            && v.as_str()
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("accept-encoding") || t.trim() == "*")
    });
    if !named {
        resp.headers
            .push(("Vary", Value::Static("Accept-Encoding")));
    }
}

/// The response filter: compress `resp` on the fly when the rules allow.
pub fn filter(req: &Request<'_>, resp: &mut Response) {
    // What goes to the client is the main request's business.
    if req.is_subrequest() {
        return;
    }
    let c = req.conf.get::<CompressConf>();
    if !c.any_dynamic()
        || !matches!(resp.status, 200 | 403 | 404)
        || matches!(resp.body, Body::Multipart { .. })
        || find(&resp.headers, "content-encoding").is_some()
    {
        return;
    }
    let head = req.head;
    let accept = head.header("accept-encoding");
    // Without Accept-Encoding only `gzip_vary` has anything to add.
    if accept.is_none() && !c.gzip_vary {
        return;
    }
    let len = resp.body.size();
    let ct = resp.content_type.as_ref().map(Value::as_str);
    let mut eligible = [None; 3];
    for (slot, coding) in eligible.iter_mut().zip(Coding::ALL) {
        let (on, types, min) = c.dynamic(coding);
        if on && types.matches(ct) && len.is_none_or(|n| n >= min) {
            *slot = Some(coding);
        }
    }
    if eligible.iter().all(Option::is_none) {
        return;
    }
    if c.gzip_vary {
        add_vary(resp);
    }
    let Some(coding) = accept
        .and_then(|ae| negotiate::accept_encoding(ae).choose(eligible.iter().flatten().copied()))
    else {
        return;
    };
    if !negotiate::request_ok(c, head, &resp.headers) {
        return;
    }
    if req.method() == Method::Head {
        // The head GET would get, with nothing compressed: no length.
        resp.body = Body::unknown_length();
        encoded_headers(resp, coding);
        return;
    }
    let params = c.params(coding);
    let budget = c.compress_cache as usize;
    // Bodies of static files (they have a Last-Modified) may be cached.
    let from_file = resp.status == 200 && find(&resp.headers, "last-modified").is_some();
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    let encoded = match body {
        Body::Empty => at_once_bytes(params, Bytes::new(), None, budget),
        Body::Bytes(b) => {
            let pin = (budget > 0 && from_file && b.len() as u64 <= WHOLE).then(|| b.clone());
            at_once_bytes(params, b, pin, budget)
        }
        Body::File { file, range } if range.end - range.start <= WHOLE => {
            at_once_file(params, file, range, budget)
        }
        Body::File { file, range } => match Encoder::new(params, Some(range.end - range.start)) {
            Ok(enc) => Ok(Body::Stream {
                stream: Box::new(FileStream::new(file, range, enc)),
                len: None,
            }),
            Err(e) => Err((e, Body::File { file, range })),
        },
        Body::Stream { stream, len } => match Encoder::new(params, None) {
            Ok(enc) => Ok(Body::Stream {
                stream: Box::new(WrapStream::new(stream, enc)),
                len: None,
            }),
            Err(e) => Err((e, Body::Stream { stream, len })),
        },
        other @ Body::Multipart { .. } => Err((std::io::Error::other("not compressible"), other)),
    };
    match encoded {
        // What was compressed whole goes out as nginx sends a body it
        // compresses: without a length (chunked on HTTP/1.1).
        Ok(Body::Bytes(z)) => {
            resp.body = Body::Stream {
                stream: Body::Bytes(z).into_stream().expect("a body"),
                len: None,
            }
        }
        Ok(body) => resp.body = body,
        Err((e, body)) => {
            crate::error_log!(Error, "{} compression failed: {e}", coding.name());
            resp.body = body;
            return;
        }
    }
    encoded_headers(resp, coding);
}

/// The headers of an encoded body: no Accept-Ranges, a weak ETag (a strong
/// one would claim byte equality), Content-Encoding.
fn encoded_headers(resp: &mut Response, coding: Coding) {
    if let Some(i) = find(&resp.headers, "accept-ranges") {
        resp.headers.remove(i);
    }
    if let Some(i) = find(&resp.headers, "etag") {
        let v = resp.headers[i].1.as_str();
        if v.starts_with('"') {
            resp.headers[i].1 = Value::Owned(format!("W/{v}"));
        } else if !v.starts_with("W/") {
            resp.headers.remove(i);
        }
    }
    resp.headers
        .push(("Content-Encoding", Value::Static(coding.name())));
}

type Encoded = Result<Body, (std::io::Error, Body)>;

fn at_once_bytes(params: Params, b: Bytes, pin: Option<Bytes>, budget: usize) -> Encoded {
    let key = pin.as_ref().map(|p| cache::Key {
        source: cache::Source::Memory {
            addr: p.as_ptr() as usize,
            len: p.len(),
        },
        params,
    });
    if let Some(k) = &key
        && let Some(hit) = cache::get(k)
    {
        return Ok(Body::Bytes(hit));
    }
    match encoder::compress_all(params, &b) {
        Ok(z) => {
            let z = Bytes::from(z);
            if let Some(k) = key {
                cache::put(k, z.clone(), pin, budget);
            }
            Ok(Body::Bytes(z))
        }
        Err(e) => Err((e, Body::Bytes(b))),
    }
}

fn at_once_file(
    params: Params,
    file: Rc<std::fs::File>,
    range: std::ops::Range<u64>,
    budget: usize,
) -> Encoded {
    let key = if budget > 0 {
        match file.metadata() {
            Ok(m) => Some(cache::Key {
                source: cache::Source::File {
                    dev: m.dev(),
                    ino: m.ino(),
                    mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
                    size: m.size(),
                    start: range.start,
                    end: range.end,
                },
                params,
            }),
            Err(e) => return Err((e, Body::File { file, range })),
        }
    } else {
        None
    };
    if let Some(k) = &key
        && let Some(hit) = cache::get(k)
    {
        return Ok(Body::Bytes(hit));
    }
    let mut buf = vec![0; (range.end - range.start) as usize];
    if let Err(e) = file.read_exact_at(&mut buf, range.start) {
        return Err((e, Body::File { file, range }));
    }
    match encoder::compress_all(params, &buf) {
        Ok(z) => {
            let z = Bytes::from(z);
            if let Some(k) = key {
                cache::put(k, z.clone(), None, budget);
            }
            Ok(Body::Bytes(z))
        }
        Err(e) => Err((e, Body::File { file, range })),
    }
}

/// A precompressed variant chosen for a static file (`gzip_static` & co.).
#[derive(Default)]
pub struct Variant {
    /// The variant file to send in place of the original.
    pub info: Option<Rc<FileInfo>>,
    pub coding: Option<Coding>,
    /// Add `Vary: Accept-Encoding` (a variant exists, gzip_vary is on and
    /// some `*_static` is `on`).
    pub vary: bool,
}

impl Variant {
    /// Headers of the variant on the response built from it.
    pub fn apply(&self, r: &mut Response) {
        if let Some(c) = self.coding
            && matches!(r.status, 200 | 206 | 304)
        {
            r.headers
                .push(("Content-Encoding", Value::Static(c.name())));
        }
        if self.vary {
            add_vary(r);
        }
    }
}

/// The precompressed variant of the file `req.filename` (described by `info`,
/// `None` when it does not exist) to send, if any: the best the client accepts
/// (`on`) or any (`always`) that exists as a regular file and is not older
/// than the original.
pub fn precompressed(req: &Request<'_>, info: Option<&FileInfo>) -> Variant {
    let c = req.conf.get::<CompressConf>();
    let mut v = Variant::default();
    if !c.any_static() {
        return v;
    }
    let head = req.head;
    let accepted = head
        .header("accept-encoding")
        .map(negotiate::accept_encoding)
        .unwrap_or_default();
    // As nginx: only `on` makes the answer depend on Accept-Encoding; with
    // `always` every client gets the variant.
    let varies = c.gzip_vary
        && Coding::ALL
            .into_iter()
            .any(|k| c.static_mode(k) == StaticMode::On);
    let mut request_ok = None;
    let mut order: Vec<(bool, u16, Coding)> = Vec::with_capacity(3);
    for coding in Coding::ALL {
        let q = accepted.q(coding);
        let usable = match c.static_mode(coding) {
            StaticMode::Off => continue,
            StaticMode::Always => true,
            StaticMode::On => {
                q > 0 && *request_ok.get_or_insert_with(|| negotiate::request_ok(c, head, &[]))
            }
        };
        if usable || varies {
            order.push((usable, q, coding));
        }
    }
    order.sort_by_key(|&(usable, q, coding)| (!usable, u16::MAX - q, coding.rank()));
    let mut path = Vec::with_capacity(req.filename.len() + 4);
    for (usable, _, coding) in order {
        path.clear();
        path.extend_from_slice(&req.filename);
        path.extend_from_slice(coding.ext().as_bytes());
        let Ok(i) = crate::modules::static_files::cache::open(&path, req.conf.get::<StaticConf>())
        else {
            continue;
        };
        if !i.is_file || info.is_some_and(|o| i.mtime < o.mtime) {
            continue;
        }
        v.vary = varies;
        if usable {
            v.info = Some(i);
            v.coding = Some(coding);
            return v;
        }
    }
    v
}

/// gzip, brotli and zstd, dynamic and precompressed.
pub static MODULE: Module = Module {
    name: "compress",
    nginx: &["http_gzip_static_module"],
    nginx_default: &["http_gzip_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::CompressConf::KIND),
    hooks: Hooks {
        filter: Some(Ordered {
            order: 20,
            run: filter,
            active: |c| c.get::<CompressConf>().any_dynamic(),
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
