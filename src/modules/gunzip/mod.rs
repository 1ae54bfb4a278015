//! `gunzip`, as nginx's `ngx_http_gunzip_filter_module`: a response with
//! `Content-Encoding: gzip` (from an upstream, or `gzip_static always`) is
//! decompressed for a client that does not take gzip (by nginx's checks:
//! Accept-Encoding, `gzip_http_version`, `gzip_proxied`, `gzip_disable`).
//! It runs before the other body filters (sub_filter, charset, compression),
//! so they see the plain body. Decompression streams, and what one piece of
//! input may produce at once is bounded by `gunzip_buffers`, so a small
//! compressed body cannot make a worker hold a huge one.

use crate::conf::table::{Arity, Ctx, Def, ONE, Scope};
use crate::conf::values::{flag, number, set_once, size};
use crate::core::message::head::Method;
use crate::core::message::response::{Body, Response, Value};
use crate::core::message::transform::{self, Transform};
use crate::core::module::{Hooks, Module, Ordered};
use crate::core::request::Request;
use crate::modules::compress::conf::CompressConf;
use crate::modules::compress::{Coding, add_vary, negotiate};
use crate::settings;
use std::io::Write;

settings! {
    /// Settings of the gunzip filter at one level.
    pub struct GunzipConf / GunzipConfSet {
        pub gunzip: bool = false,
        /// `gunzip_buffers number size`: what one piece may decompress to.
        pub buffers: (u64, u64) = (32, 4096),
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut GunzipConfSet {
    s.loc().get_mut::<GunzipConfSet>()
}

/// Input fed to the decoder at once: at most about a thousand times this
/// comes out (deflate's limit), so the output bound is overshot by little.
const FEED: usize = 256;

/// A gzip body (one or more members) decompressed piece by piece.
struct Gunzip {
    dec: flate2::write::MultiGzDecoder<Vec<u8>>,
    /// Input not fed yet: the last `write` reached `limit`.
    held: Vec<u8>,
    limit: usize,
    /// The data is not gzip: the rest is dropped (the error is logged once).
    failed: bool,
}

impl std::fmt::Debug for Gunzip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gunzip")
            .field("held", &self.held.len())
            .finish()
    }
}

impl Gunzip {
    fn new(limit: usize) -> Gunzip {
        Gunzip {
            dec: flate2::write::MultiGzDecoder::new(Vec::new()),
            held: Vec::new(),
            limit: limit.max(FEED),
            failed: false,
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        if !self.failed {
            crate::error_log!(Error, "inflate() failed: {e}");
        }
        self.failed = true;
        self.held = Vec::new();
    }

    /// Feed `input` until `out` has `limit` bytes; what is left is returned.
    fn feed<'i>(&mut self, mut input: &'i [u8], out: &mut Vec<u8>) -> &'i [u8] {
        while !input.is_empty() && out.len() < self.limit && !self.failed {
            let n = input.len().min(FEED);
            match self.dec.write(&input[..n]) {
                Ok(0) => {
                    // Data after the last member's trailer is ignored, as nginx.
                    return &[];
                }
                Ok(used) => input = &input[used..],
                Err(e) => self.fail(e),
            }
            out.append(self.dec.get_mut());
        }
        input
    }
}

impl Transform for Gunzip {
    fn write(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        let held = std::mem::take(&mut self.held);
        let rest = self.feed(&held, out);
        let mut left = rest.to_vec();
        if left.is_empty() {
            left.extend_from_slice(self.feed(input, out));
        } else {
            left.extend_from_slice(input);
        }
        if !self.failed {
            self.held = left;
        }
    }

    fn has_more(&self) -> bool {
        !self.held.is_empty()
    }

    fn expands(&self) -> bool {
        true
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        if let Err(e) = self.dec.try_finish() {
            self.fail(e);
        }
        out.append(self.dec.get_mut());
    }
}

fn filter(req: &Request<'_>, resp: &mut Response) {
    let g = req.conf.get::<GunzipConf>();
    let gzip = resp.headers.iter().position(|(n, v)| {
        n.eq_ignore_ascii_case("content-encoding") && v.as_str().eq_ignore_ascii_case("gzip")
    });
    let Some(i) = gzip else { return };
    let c = req.conf.get::<CompressConf>();
    if c.gzip_vary {
        add_vary(resp);
    }
    // A subrequest's answer always goes into another response (an SSI
    // include, an addition): it is decompressed whatever the client takes.
    let head = req.head;
    let takes_gzip = !req.is_subrequest()
        && head
            .header("accept-encoding")
            .is_some_and(|ae| negotiate::accept_encoding(ae).q(Coding::Gzip) > 0)
        && negotiate::request_ok(c, head, &resp.headers);
    if takes_gzip || matches!(resp.body, Body::Multipart { .. }) || resp.status == 206 {
        return;
    }
    resp.headers.remove(i);
    resp.headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("accept-ranges"));
    for (n, v) in resp.headers.iter_mut() {
        if n.eq_ignore_ascii_case("etag") && v.as_str().starts_with('"') {
            *v = Value::Owned(format!("W/{}", v.as_str()));
        }
    }
    if req.method() == Method::Head {
        resp.body = Body::unknown_length();
        return;
    }
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    let (n, size) = g.buffers;
    resp.body = transform::apply(body, Gunzip::new((n * size) as usize), false);
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "gunzip",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = flag(d, 0)?;
            set_once(&mut loc(s).gunzip, v, d)
        },
        syntax: "gunzip on | off;",
        default: "off",
        doc: "Decompresses responses with `Content-Encoding: gzip` (from an upstream, or `gzip_static always`) for clients that do not take gzip, by the checks of `gzip`: Accept-Encoding, `gzip_http_version`, `gzip_proxied`, `gzip_disable`; the answer to a subrequest (an SSI include, `addition`) is always decompressed, as it goes into another response. The answer loses its Content-Encoding, Content-Length and Accept-Ranges and its ETag becomes weak; with `gzip_vary on` every gzip-encoded answer gets `Vary: Accept-Encoding`. Several gzip members are decompressed one after the other; the other body filters (`sub_filter`, `charset`) see the plain body.\n\n```nginx\nlocation / {\n    gunzip on;\n    proxy_pass http://backend;\n    proxy_set_header Accept-Encoding gzip;\n}\n```",
    },
    Def {
        name: "gunzip_buffers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(2, 2),
        set: |s, d, _| {
            let v = (number(d, 0)?, size(d, 1)?);
            set_once(&mut loc(s).buffers, v, d)
        },
        syntax: "gunzip_buffers number size;",
        default: "32 4k",
        doc: "How much one piece of a compressed body may decompress to at once (`number` × `size`); the rest waits until that output is sent, so a small body that decompresses to a huge one never sits in memory whole.\n\n```nginx\ngunzip_buffers 16 8k;\n```",
    },
];

/// The gunzip filter: its directives and the body filter.
pub static MODULE: Module = Module {
    name: "gunzip",
    nginx: &["http_gunzip_module"],
    directives: &[DIRECTIVES],
    settings: Some(&GunzipConf::KIND),
    hooks: Hooks {
        filter: Some(Ordered {
            order: 10,
            run: filter,
            active: |c| c.get::<GunzipConf>().gunzip,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn members_and_cuts() {
        let plain: Vec<u8> = (0..5000u32)
            .flat_map(|i| format!("X{i:04}").into_bytes())
            .collect();
        let mut two = gz(&plain);
        two.extend(gz(b"tail"));
        let mut want = plain.clone();
        want.extend_from_slice(b"tail");
        assert_eq!(Gunzip::new(1 << 20).all(&two), want);
        for cut in [1, 10, 17, 100, two.len() / 2, two.len() - 3] {
            let mut g = Gunzip::new(1 << 20);
            let mut out = Vec::new();
            g.write(&two[..cut], &mut out);
            g.write(&two[cut..], &mut out);
            g.finish(&mut out);
            assert_eq!(out, want, "cut at {cut}");
        }
    }

    #[test]
    fn output_per_piece_is_bounded() {
        let zeros = gz(&vec![0u8; 8 << 20]);
        let mut g = Gunzip::new(64 << 10);
        let mut out = Vec::new();
        g.write(&zeros, &mut out);
        // One feed past the bound at most (deflate expands at most ~1032×).
        assert!(out.len() < (64 << 10) + FEED * 1040, "{}", out.len());
        assert!(g.has_more());
        let mut total = out.len();
        while g.has_more() {
            let mut o = Vec::new();
            g.write(&[], &mut o);
            assert!(o.len() < (64 << 10) + FEED * 1040);
            total += o.len();
        }
        let mut o = Vec::new();
        g.finish(&mut o);
        assert_eq!(total + o.len(), 8 << 20);
    }

    #[test]
    fn not_gzip_stops() {
        let mut g = Gunzip::new(1 << 20);
        assert_eq!(g.all(b"plainly not gzip"), b"");
    }
}
