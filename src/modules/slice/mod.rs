//! The slice filter, as nginx's `ngx_http_slice_filter_module`: a response
//! fetched in ranges of `slice` bytes and sent as one.
//!
//! `$slice_range`, read while a main request asks its upstream (a
//! `proxy_set_header Range`, a cache key), names the slice holding the
//! start of the client's `Range` (the first one otherwise) and marks the
//! request ([`First`]). The filter (order 5, before every filter that
//! changes bodies, so they see the whole) checks the upstream's 206 for
//! that slice and makes it the whole representation: a 200 of the
//! complete length, the not-modified answers of a cacheable reply, then
//! the client's range of it (one at most) as a 206. Its body
//! ([`body::Slices`]) is the slice's own, then the next slices, each
//! fetched when the previous one ends by a clone subrequest
//! ([`crate::core::subrequest::Origin::clone_request`]: the same URI,
//! arguments, method and headers, from the content phase of the same
//! location) whose `$slice_range` is its own ([`Part`]), until the
//! client's range is covered. A 200 to the first slice, or any other
//! status, goes out as it is.

pub mod body;
pub mod conf;

use crate::core::message::response::{Body, Response, Value};
use crate::core::module::{Hooks, Module, Ordered, VarDef};
use crate::core::request::Request;
use crate::modules::static_files::range::{self, RangeSpec};
use crate::modules::static_files::{conditional, conf::StaticConf};
use conf::SliceConf;
use std::ops::Range;

/// A main request that asked for its first slice: where it starts, and
/// the slice size it was cut with.
#[derive(Debug)]
struct First {
    start: u64,
    size: u64,
}

/// A slice subrequest's `$slice_range`.
#[derive(Debug)]
struct Part(String);

/// `bytes=START-END` of the slice of `size` bytes starting at `start`.
fn range_of(start: u64, size: u64) -> String {
    format!("bytes={}-{}", start, start + size - 1)
}

/// `$slice_range`: the slice this request fetches; empty without `slice`.
fn slice_range(req: &Request<'_>, _: &str, out: &mut Vec<u8>) {
    if let Some(p) = req.state.ext.get::<Part>() {
        out.extend_from_slice(p.0.as_bytes());
        return;
    }
    let size = req.conf.get::<SliceConf>().size;
    if req.is_subrequest() || size == 0 {
        return;
    }
    let first = req.state.ext.get_or_insert_with(|| {
        let start = size * (requested_start(req) / size);
        First {
            // A slice whose end would not fit an offset: the first one.
            start: match start > i64::MAX as u64 - size {
                true => 0,
                false => start,
            },
            size,
        }
    });
    out.extend_from_slice(range_of(first.start, first.size).as_bytes());
}

/// The offset the client's `Range` starts at, as nginx guesses it before
/// any reply: that of a single `bytes=N-…`; 0 for anything else (several
/// ranges, a suffix, an `If-Range` that may ask for the whole).
fn requested_start(req: &Request<'_>) -> u64 {
    let head = req.head;
    if head.header("if-range").is_some() {
        return 0;
    }
    head.header("range").map_or(0, range_start)
}

fn range_start(v: &[u8]) -> u64 {
    let Some(spec) = v
        .get(..6)
        .filter(|p| p.eq_ignore_ascii_case(b"bytes="))
        .map(|_| &v[6..])
    else {
        return 0;
    };
    if spec.contains(&b',') {
        return 0;
    }
    let mut s = Scan(spec.trim_ascii_start());
    s.number().unwrap_or(0)
}

/// A parse of nginx's `Content-Range` grammar: numbers within an offset,
/// spaces around them.
struct Scan<'a>(&'a [u8]);

impl Scan<'_> {
    fn spaces(&mut self) {
        while let [b' ', rest @ ..] = self.0 {
            self.0 = rest;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.spaces();
        match self.0 {
            [c, rest @ ..] if *c == b => {
                self.0 = rest;
                true
            }
            _ => false,
        }
    }

    /// Digits, at least one, at most `i64::MAX`.
    fn number(&mut self) -> Option<u64> {
        self.spaces();
        let n = self.0.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        let mut v: u64 = 0;
        for &d in &self.0[..n] {
            v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            if v > i64::MAX as u64 {
                return None;
            }
        }
        self.0 = &self.0[n..];
        Some(v)
    }
}

/// A slice's `Content-Range`: the bytes it holds, and the complete length
/// (`None` for `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ContentRange {
    bytes: Range<u64>,
    complete: Option<u64>,
}

fn parse_content_range(v: &str) -> Option<ContentRange> {
    let mut s = Scan(v.as_bytes().strip_prefix(b"bytes ")?);
    let start = s.number()?;
    if !s.eat(b'-') {
        return None;
    }
    let end = s.number()?.checked_add(1)?;
    if !s.eat(b'/') {
        return None;
    }
    let complete = match s.eat(b'*') {
        true => None,
        false => Some(s.number()?),
    };
    s.spaces();
    s.0.is_empty().then_some(ContentRange {
        bytes: start..end,
        complete,
    })
}

fn field<'r>(headers: &'r [(&'static str, Value)], name: &str) -> Option<&'r str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A slice's reply checked as nginx checks it: a 206 with the first
/// slice's `ETag` (`etag`, taken from the first that has one), a
/// `Content-Range` from `start` to the slice's end (or the complete
/// length's); the range and the complete length, or what is wrong.
fn check(
    status: u16,
    headers: &[(&'static str, Value)],
    start: u64,
    size: u64,
    etag: &mut Option<String>,
) -> Result<(Range<u64>, u64), String> {
    if status != 206 {
        return Err(format!("unexpected status code {status} in slice response"));
    }
    let tag = field(headers, "etag");
    if let Some(want) = etag.as_deref()
        && tag != Some(want)
    {
        return Err("etag mismatch in slice response".into());
    }
    if let Some(t) = tag {
        *etag = Some(t.to_string());
    }
    let cr = field(headers, "content-range")
        .and_then(parse_content_range)
        .ok_or("invalid range in slice response")?;
    let complete = cr.complete.ok_or("no complete length in slice response")?;
    let end = start.saturating_add(size).min(complete);
    if cr.bytes != (start..end) {
        return Err(format!(
            "unexpected range in slice response: {}-{}, expected: {start}-{end}",
            cr.bytes.start, cr.bytes.end
        ));
    }
    Ok((cr.bytes, complete))
}

/// The filter: a main request's 206 to its first slice becomes the whole
/// representation, or the client's range of it.
fn filter(req: &Request<'_>, resp: &mut Response) {
    if req.is_subrequest() || resp.status != 206 {
        return;
    }
    let Some(first) = req.state.ext.get::<First>() else {
        return;
    };
    let mut etag = None;
    let (bytes, complete) = match check(
        resp.status,
        &resp.headers,
        first.start,
        first.size,
        &mut etag,
    ) {
        Ok(c) => c,
        Err(msg) => {
            crate::error_log!(Error, "{msg}{}", req.log_context());
            resp.body = body::failed(msg);
            return;
        }
    };
    resp.status = 200;
    resp.headers.retain(|(n, _)| {
        !n.eq_ignore_ascii_case("content-range") && !n.eq_ignore_ascii_case("accept-ranges")
    });
    let own = std::mem::replace(&mut resp.body, Body::Empty).into_stream();
    let whole = std::mem::replace(resp, Response::new(200));
    *resp = match answered(req, whole, complete) {
        Ok((mut r, want)) => {
            r.body = Body::Stream {
                len: Some(want.end - want.start),
                stream: Box::new(body::Slices::new(
                    req.subrequests(),
                    own,
                    bytes,
                    first.size,
                    want,
                    etag,
                    req.log_context(),
                )),
            };
            r
        }
        Err(answer) => answer,
    };
}

/// What the filters after nginx's slice filter make of the whole: the
/// not-modified answers (a cacheable reply's), else the client's range
/// (`Ok` with the bytes of the whole it gets).
fn answered(
    req: &Request<'_>,
    whole: Response,
    complete: u64,
) -> Result<(Response, Range<u64>), Response> {
    let mut r = match crate::modules::cache::cacheable(req) && req.conditionals_apply() {
        true => conditional::answer(req, whole)?,
        false => whole,
    };
    let max = req.conf.get::<StaticConf>().max_ranges;
    match range::requested(req, &r, complete, Some(max.unwrap_or(1).min(1))) {
        None | Some(RangeSpec::Full) => {
            if max != Some(0) {
                r.headers.push(("Accept-Ranges", Value::Static("bytes")));
            }
            Ok((r, 0..complete))
        }
        Some(RangeSpec::Unsatisfiable) => Err(range::unsatisfiable(req, complete)),
        Some(RangeSpec::Partial(rs)) => {
            let want = rs[0].clone();
            r.status = 206;
            r.headers.push((
                "Content-Range",
                Value::Owned(range::content_range(&want, complete)),
            ));
            Ok((r, want))
        }
    }
}

/// The slice module: `slice`, `$slice_range`, the filter.
pub static MODULE: Module = Module {
    name: "slice",
    nginx: &["http_slice_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&SliceConf::KIND),
    variables: &[VarDef::name("slice_range", slice_range)],
    hooks: Hooks {
        filter: Some(Ordered {
            order: 5,
            run: filter,
            active: |c| c.get::<SliceConf>().size > 0,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(v: &str) -> Option<ContentRange> {
        parse_content_range(v)
    }

    #[test]
    fn content_ranges_parse_as_nginx() {
        assert_eq!(
            cr("bytes 0-1/100"),
            Some(ContentRange {
                bytes: 0..2,
                complete: Some(100)
            })
        );
        assert_eq!(
            cr("bytes  2 - 3 / 16 "),
            Some(ContentRange {
                bytes: 2..4,
                complete: Some(16)
            })
        );
        assert_eq!(cr("bytes 0-1/*").unwrap().complete, None);
        for bad in [
            "bytes",
            "bytes ",
            "bytes 0-1",
            "bytes 0-1/",
            "bytes -1/10",
            "bytes 0-1/10x",
            "Bytes 0-1/10",
            "bytes 0-99999999999999999999/10",
        ] {
            assert_eq!(cr(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn first_slice_holds_the_range_start() {
        assert_eq!(range_start(b"bytes=6-7"), 6);
        assert_eq!(range_start(b"BYTES= 5-"), 5);
        assert_eq!(range_start(b"bytes=-10"), 0);
        assert_eq!(range_start(b"bytes=3-3,4-4"), 0);
        assert_eq!(range_start(b"items=4-5"), 0);
        assert_eq!(range_start(b"bytes=99999999999999999999-"), 0);
    }

    fn head(status: u16, etag: Option<&str>, range: &str) -> (u16, Vec<(&'static str, Value)>) {
        let mut h = vec![("Content-Range", Value::Owned(range.into()))];
        if let Some(t) = etag {
            h.push(("ETag", Value::Owned(t.into())));
        }
        (status, h)
    }

    #[test]
    fn slices_are_checked() {
        let mut etag = None;
        let (s, h) = head(206, Some("\"a\""), "bytes 0-1/5");
        assert_eq!(check(s, &h, 0, 2, &mut etag), Ok((0..2, 5)));
        assert_eq!(etag.as_deref(), Some("\"a\""));
        // The last slice ends with the representation.
        let (s, h) = head(206, Some("\"a\""), "bytes 4-4/5");
        assert_eq!(check(s, &h, 4, 2, &mut etag), Ok((4..5, 5)));
        let (s, h) = head(206, Some("\"b\""), "bytes 2-3/5");
        assert_eq!(
            check(s, &h, 2, 2, &mut etag).unwrap_err(),
            "etag mismatch in slice response"
        );
        let (s, h) = head(206, None, "bytes 2-3/5");
        assert!(check(s, &h, 2, 2, &mut etag).is_err());
        let (s, h) = head(200, Some("\"a\""), "bytes 2-3/5");
        assert_eq!(
            check(s, &h, 2, 2, &mut etag).unwrap_err(),
            "unexpected status code 200 in slice response"
        );
        let (s, h) = head(206, Some("\"a\""), "bytes 1-2/5");
        assert_eq!(
            check(s, &h, 2, 2, &mut etag).unwrap_err(),
            "unexpected range in slice response: 1-3, expected: 2-4"
        );
        let (s, h) = head(206, None, "bytes 0-1/*");
        assert_eq!(
            check(s, &h, 0, 2, &mut None).unwrap_err(),
            "no complete length in slice response"
        );
        let (s, h) = head(206, None, "bytes");
        assert_eq!(
            check(s, &h, 0, 2, &mut None).unwrap_err(),
            "invalid range in slice response"
        );
    }
}
