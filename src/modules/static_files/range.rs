//! `Range` request header parsing and `multipart/byteranges` framing.

use super::conditional;
use crate::core::message::response::{Body, BodyStream, Multipart, Response, Value};
use crate::core::request::{BoxFuture, Request};
use bytes::Bytes;
use std::fmt::Write as _;
use std::ops::Range;

/// nginx's range filter over a response the request may take ranges of
/// (a file, a cached entry, an upstream's reply with `Accept-Ranges` or
/// `*_force_ranges`): a 200 of known length becomes, for the request's
/// `Range`, a 206 with that range or `multipart/byteranges` of several, or
/// a 416. `If-Range` is compared with the validators the response goes out
/// with (its `ETag` and `Last-Modified`, or what `add_header` puts in their
/// place). A streamed body takes one range (more are answered whole, as
/// nginx's single range for a reply it has not stored); otherwise
/// `max_ranges` limits them.
pub fn apply(req: &Request<'_>, resp: Response, max_ranges: Option<usize>) -> Response {
    let Some(size) = resp.body.size() else {
        return resp;
    };
    // A stream, or bytes and file ranges in turn (flv's header and offset),
    // takes one range.
    let streamed = matches!(resp.body, Body::Stream { .. } | Body::Multipart { .. });
    let max = match streamed {
        true => Some(max_ranges.unwrap_or(1).min(1)),
        false => max_ranges,
    };
    let Some(spec) = requested(req, &resp, size, max) else {
        return resp;
    };
    let mut resp = resp;
    match spec {
        RangeSpec::Full => resp,
        RangeSpec::Unsatisfiable => unsatisfiable(req, size),
        RangeSpec::Partial(rs) if rs.len() == 1 => {
            let r = rs[0].clone();
            resp.status = 206;
            resp.headers
                .push(("Content-Range", Value::Owned(content_range(&r, size))));
            resp.body = slice(std::mem::replace(&mut resp.body, Body::Empty), r);
            resp
        }
        RangeSpec::Partial(rs) => {
            let ct = resp.content_type.as_ref().map_or("", Value::as_str);
            let seed = req.start_ms ^ size ^ rs.len() as u64;
            let mut parts = multipart(&rs, size, ct, seed);
            resp.status = 206;
            resp.content_type = Some(Value::Owned(parts.content_type()));
            resp.body = match std::mem::replace(&mut resp.body, Body::Empty) {
                Body::File { file, range: base } => {
                    for p in &mut parts.parts {
                        p.1 = base.start + p.1.start..base.start + p.1.end;
                    }
                    Body::Multipart {
                        file,
                        parts: Box::new(parts),
                    }
                }
                Body::Bytes(b) => {
                    let mut out = Vec::with_capacity(parts.content_length() as usize);
                    for (h, r) in &parts.parts {
                        out.extend_from_slice(h);
                        out.extend_from_slice(&b[r.start as usize..r.end as usize]);
                    }
                    out.extend_from_slice(&parts.trailer);
                    Body::Bytes(out.into())
                }
                other => other,
            };
            resp
        }
    }
}

/// What the request's `Range` asks of `resp`, a 200 of `size` bytes that
/// takes ranges (at most `max_ranges`): `None` when it asks nothing — no
/// `Range`, a reply that is not a 200, a subrequest, an error page, an
/// `If-Range` the reply's validators do not match.
pub fn requested(
    req: &Request<'_>,
    resp: &Response,
    size: u64,
    max_ranges: Option<usize>,
) -> Option<RangeSpec> {
    let head = req.head;
    let range = head.header("range")?;
    if resp.status != 200 || !req.conditionals_apply() {
        return None;
    }
    if let Some(ir) = head.header("if-range")
        && !if_range(req, resp, ir)
    {
        return None;
    }
    Some(parse(range, size, max_ranges))
}

/// The 416 for a `Range` no part of a `size`-byte representation satisfies.
pub fn unsatisfiable(req: &Request<'_>, size: u64) -> Response {
    req.error(416)
        .header("Content-Range", Value::Owned(format!("bytes */{size}")))
}

/// Marks a request whose handler's `*_force_ranges` is on: its upstream's
/// reply takes ranges whatever it said.
#[derive(Debug)]
pub struct Forced;

/// The ranges of an upstream's reply, as nginx: taken when
/// `proxy_force_ranges` / `fastcgi_force_ranges` is on ([`Forced`]), or
/// when the reply is answered from the cache (`cached`) and the upstream
/// said `Accept-Ranges`. A reply that takes them offers them
/// (`Accept-Ranges: bytes`), unless `max_ranges 0`.
pub fn of_reply(req: &Request<'_>, mut resp: Response, cached: bool) -> Response {
    let forced = req.state.ext.get::<Forced>().is_some();
    if !forced && !cached {
        return resp;
    }
    let said = resp
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("accept-ranges"));
    if !(forced || said) {
        return resp;
    }
    let max = req.conf.get::<super::conf::StaticConf>().max_ranges;
    if !said && max != Some(0) && resp.status == 200 && resp.body.size().is_some() {
        resp.headers.push(("Accept-Ranges", Value::Static("bytes")));
    }
    apply(req, resp, max)
}

/// Does `If-Range` match the response's validators? An entity tag (a value
/// ending in `"`) is compared strongly with its `ETag`, else a date with its
/// `Last-Modified`; `add_header` values in their place count, as nginx's
/// range filter runs after add_header (a removed or unreadable
/// Last-Modified matches no date).
fn if_range(req: &Request<'_>, resp: &Response, ir: &[u8]) -> bool {
    use crate::modules::headers::replaced;
    let own = |name: &str| {
        resp.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str().as_bytes().to_vec())
    };
    let field = |name: &str| replaced(req, name).or_else(|| own(name));
    let etag = field("etag").unwrap_or_default();
    let etag = std::str::from_utf8(&etag).unwrap_or("");
    let mtime = field("last-modified")
        .and_then(|v| conditional::http_date(&v))
        .unwrap_or(i64::MIN);
    conditional::if_range_matches(ir, etag, mtime)
}

/// Bytes `r` of a body.
fn slice(body: Body, r: Range<u64>) -> Body {
    match body {
        Body::Bytes(b) => Body::Bytes(b.slice(r.start as usize..r.end as usize)),
        Body::File { file, range } => Body::File {
            file,
            range: range.start + r.start..range.start + r.end,
        },
        Body::Stream { stream, .. } => Body::Stream {
            stream: Box::new(Slice {
                inner: stream,
                skip: r.start,
                left: r.end - r.start,
            }),
            len: Some(r.end - r.start),
        },
        Body::Multipart { file, parts } => Body::Multipart {
            file,
            parts: Box::new(slice_parts(*parts, r)),
        },
        other => other,
    }
}

/// Bytes `r` of a body of parts (each bytes, then a range of the file) and a
/// trailer: the parts and pieces of parts within it.
fn slice_parts(m: Multipart, r: Range<u64>) -> Multipart {
    // What of the `len` bytes at `at` lies within `r`, relative to `at`.
    let within = |at: u64, len: u64| {
        let end = r.end.clamp(at, at + len) - at;
        (r.start.clamp(at, at + len) - at).min(end)..end
    };
    let mut at = 0;
    let mut parts = Vec::new();
    for (head, range) in m.parts {
        let h = within(at, head.len() as u64);
        at += head.len() as u64;
        let f = within(at, range.end - range.start);
        at += range.end - range.start;
        if !h.is_empty() || !f.is_empty() {
            parts.push((
                head[h.start as usize..h.end as usize].to_vec(),
                range.start + f.start..range.start + f.end,
            ));
        }
    }
    let t = within(at, m.trailer.len() as u64);
    Multipart {
        parts,
        trailer: m.trailer[t.start as usize..t.end as usize].to_vec(),
        ..m
    }
}

/// One range of a streamed body: the bytes before it are skipped, those
/// after it read and dropped, so the stream still runs to its end (an
/// upstream connection read whole can be kept; a reply being stored is
/// stored whole; a reply cut short still ends the response with an error).
#[derive(Debug)]
struct Slice {
    inner: Box<dyn BodyStream>,
    skip: u64,
    left: u64,
}

impl Slice {
    /// The part of `piece` in the range; `None` when there is none.
    fn cut(&mut self, piece: Option<Bytes>) -> Option<Option<Bytes>> {
        let Some(mut p) = piece else {
            return Some(None);
        };
        let n = p.len() as u64;
        if self.left == 0 {
            return None;
        }
        if self.skip >= n {
            self.skip -= n;
            return None;
        }
        p = p.slice(self.skip as usize..);
        self.skip = 0;
        if p.len() as u64 > self.left {
            p.truncate(self.left as usize);
        }
        self.left -= p.len() as u64;
        Some(Some(p))
    }
}

impl BodyStream for Slice {
    fn next(&mut self) -> BoxFuture<'_, std::io::Result<Option<Bytes>>> {
        Box::pin(async move {
            loop {
                let piece = self.inner.next().await?;
                if let Some(r) = self.cut(piece) {
                    return Ok(r);
                }
            }
        })
    }

    fn ready(&mut self) -> Option<std::io::Result<Option<Bytes>>> {
        loop {
            match self.inner.ready()? {
                Err(e) => return Some(Err(e)),
                Ok(piece) => {
                    if let Some(r) = self.cut(piece) {
                        return Some(Ok(r));
                    }
                }
            }
        }
    }

    fn unbuffered(&self) -> bool {
        self.inner.unbuffered()
    }
}

/// Outcome of evaluating a `Range` header against a representation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeSpec {
    /// Ignore the header and send the whole representation (200).
    Full,
    /// Send these byte ranges (206): half-open, non-empty, within the size, in
    /// request order.
    Partial(Vec<Range<u64>>),
    /// No requested range overlaps the representation (416).
    Unsatisfiable,
}

/// A single range of a file (the static handler answered a Range request)
/// becomes the whole file with 200: for a filter that turns ranges off, as
/// nginx's SSI and addition filters do, since the range filter would then
/// have sent the whole file.
pub fn whole_file(resp: &mut Response) {
    let Body::File { file, range } = &mut resp.body else {
        return;
    };
    let Ok(meta) = file.metadata() else {
        return;
    };
    *range = 0..meta.len();
    resp.status = 200;
    resp.headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("content-range"));
}

/// Parse a `Range` header value for a representation of `size` bytes, as
/// nginx does.
///
/// * A value that does not start with `bytes=` (case-insensitive) followed
///   by something is ignored: [`RangeSpec::Full`].
/// * Specs are `a-b`, `a-` and `-n`, comma-separated, with optional
///   whitespace around the items and around `-`. A syntax error, or a
///   number too large, is [`RangeSpec::Unsatisfiable`] (416), as in nginx.
/// * `b` past the end is clamped to the size; a suffix `-n` longer than the
///   representation selects all of it.
/// * Specs that select nothing (start at/after `size`, `b < a`, `-0`) are
///   skipped; if none is left the result is [`RangeSpec::Unsatisfiable`].
///   As in nginx, an empty selection starting at offset 0 (only possible when
///   `size` is 0) makes the whole header ignored instead.
/// * `max_ranges`: `None` is unlimited, `Some(0)` disables ranges (`Full`),
///   and more satisfiable ranges than the limit yield `Full`.
/// * If the selected lengths add up to more than `size` (overlapping ranges,
///   CVE-2011-3192), the result is `Full`.
pub fn parse(header: &[u8], size: u64, max_ranges: Option<usize>) -> RangeSpec {
    if max_ranges == Some(0) {
        return RangeSpec::Full;
    }
    let header = trim_ows(header);
    if header.len() < 7 || !header[..6].eq_ignore_ascii_case(b"bytes=") {
        return RangeSpec::Full;
    }
    match parse_set(&header[6..], size, max_ranges) {
        Ok(ranges) if ranges.is_empty() => RangeSpec::Unsatisfiable,
        Ok(ranges) => RangeSpec::Partial(ranges),
        Err(verdict) => verdict,
    }
}

/// The ranges, or the verdict on the whole header.
fn parse_set(s: &[u8], size: u64, max_ranges: Option<usize>) -> Result<Vec<Range<u64>>, RangeSpec> {
    const BAD: RangeSpec = RangeSpec::Unsatisfiable;
    let mut cur = Cursor { s, i: 0 };
    let mut ranges = Vec::new();
    let mut total: u64 = 0;
    loop {
        cur.skip_ows();
        let (start, end) = if cur.eat(b'-') {
            cur.skip_ows();
            let n = cur.number().ok_or(BAD)?;
            (size.saturating_sub(n), size)
        } else {
            let first = cur.number().ok_or(BAD)?;
            cur.skip_ows();
            if !cur.eat(b'-') {
                return Err(BAD);
            }
            cur.skip_ows();
            let end = match cur.peek() {
                None | Some(b',') => size,
                Some(_) => cur.number().ok_or(BAD)?.saturating_add(1).min(size),
            };
            (first, end)
        };
        cur.skip_ows();
        if !matches!(cur.peek(), None | Some(b',')) {
            return Err(BAD);
        }

        if start < end {
            if max_ranges.is_some_and(|max| ranges.len() >= max) {
                return Err(RangeSpec::Full);
            }
            total = total.saturating_add(end - start);
            if ranges.capacity() == 0 {
                ranges.reserve_exact(1);
            }
            ranges.push(start..end);
        } else if start == 0 {
            return Err(RangeSpec::Full);
        }

        if !cur.eat(b',') {
            break;
        }
    }
    if total > size {
        return Err(RangeSpec::Full);
    }
    Ok(ranges)
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.i += usize::from(hit);
        hit
    }

    #[inline]
    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// One or more digits, within `i64` (nginx's `off_t`).
    fn number(&mut self) -> Option<u64> {
        let begin = self.i;
        let mut n: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            if n > i64::MAX as u64 {
                return None;
            }
            self.i += 1;
        }
        (self.i > begin).then_some(n)
    }
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// `Content-Range` value for one range of a 206 response: `bytes 0-99/1000`.
pub fn content_range(r: &Range<u64>, size: u64) -> String {
    let mut s = String::with_capacity(32);
    push_content_range(&mut s, r, size);
    s
}

fn push_content_range(s: &mut String, r: &Range<u64>, size: u64) {
    let _ = write!(s, "bytes {}-{}/{}", r.start, r.end.saturating_sub(1), size);
}

/// The framing for `ranges` of a `size`-byte representation of type
/// `content_type`. The boundary is derived from `boundary_seed` (pass
/// something unpredictable, e.g. a per-process random value mixed with a
/// request counter).
pub fn multipart(
    ranges: &[Range<u64>],
    size: u64,
    content_type: &str,
    boundary_seed: u64,
) -> Multipart {
    let boundary = format!("{:016x}", mix(boundary_seed));
    let mut parts = Vec::with_capacity(ranges.len());
    for r in ranges {
        let mut h = String::with_capacity(80 + content_type.len());
        h.push_str("\r\n--");
        h.push_str(&boundary);
        h.push_str("\r\n");
        if !content_type.is_empty() {
            h.push_str("Content-Type: ");
            h.push_str(content_type);
            h.push_str("\r\n");
        }
        h.push_str("Content-Range: ");
        push_content_range(&mut h, r, size);
        h.push_str("\r\n\r\n");
        parts.push((h.into_bytes(), r.clone()));
    }
    let trailer = format!("\r\n--{boundary}--\r\n").into_bytes();
    Multipart {
        boundary,
        content_type: content_type.to_string(),
        parts,
        trailer,
    }
}

/// splitmix64 finaliser: spreads a counter-like seed over all bits.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // `&[a..b]` is a list of one range here
mod tests {
    use super::*;
    use RangeSpec::*;

    fn p(h: &str, size: u64) -> RangeSpec {
        parse(h.as_bytes(), size, None)
    }

    fn part(v: &[Range<u64>]) -> RangeSpec {
        Partial(v.to_vec())
    }

    #[test]
    fn a_body_of_parts_is_sliced_across_them() {
        // "ab" + file 10..13 + "cd" + file 20..22 + "!"
        let m = Multipart {
            boundary: String::new(),
            content_type: String::new(),
            parts: vec![(b"ab".to_vec(), 10..13), (b"cd".to_vec(), 20..22)],
            trailer: b"!".to_vec(),
        };
        let cut = |r: Range<u64>| {
            let s = slice_parts(m.clone(), r.clone());
            assert_eq!(s.content_length(), r.end - r.start, "{r:?}");
            (s.parts, s.trailer)
        };
        assert_eq!(cut(0..2), (vec![(b"ab".to_vec(), 10..10)], vec![]));
        assert_eq!(cut(1..4), (vec![(b"b".to_vec(), 10..12)], vec![]));
        assert_eq!(
            cut(4..8),
            (vec![(vec![], 12..13), (b"cd".to_vec(), 20..21)], vec![])
        );
        assert_eq!(cut(8..10), (vec![(vec![], 21..22)], b"!".to_vec()));
        assert_eq!(cut(9..10), (vec![], b"!".to_vec()));
        assert_eq!(cut(0..10).0.len(), 2);
    }

    #[test]
    fn single_ranges() {
        assert_eq!(p("bytes=0-99", 1000), part(&[0..100]));
        assert_eq!(p("bytes=100-199", 1000), part(&[100..200]));
        assert_eq!(p("bytes=999-999", 1000), part(&[999..1000]));
        assert_eq!(p("bytes=500-", 1000), part(&[500..1000]));
        assert_eq!(p("bytes=0-", 1000), part(&[0..1000]));
        assert_eq!(p("bytes=-100", 1000), part(&[900..1000]));
        assert_eq!(p("bytes=-1", 1000), part(&[999..1000]));
    }

    #[test]
    fn clamping() {
        assert_eq!(p("bytes=900-5000", 1000), part(&[900..1000]));
        assert_eq!(p("bytes=-5000", 1000), part(&[0..1000]));
        assert_eq!(p("bytes=0-9223372036854775807", 10), part(&[0..10]));
        assert_eq!(p("bytes=-9223372036854775807", 10), part(&[0..10]));
        // Past nginx's off_t: 416, as nginx.
        assert_eq!(p("bytes=0-9223372036854775808", 10), Unsatisfiable);
        assert_eq!(p("bytes=-99999999999999999999999", 10), Unsatisfiable);
    }

    #[test]
    fn unit_and_syntax() {
        assert_eq!(p("BYTES=0-1", 10), part(&[0..2]));
        assert_eq!(p("Bytes=0-1", 10), part(&[0..2]));
        assert_eq!(p("  bytes=0-1  ", 10), part(&[0..2]));
        for ignored in ["", "bytes", "bytes=", "bytes =0-1", "items=0-1"] {
            assert_eq!(p(ignored, 1000), Full, "{ignored:?}");
        }
        for bad in [
            "bytes=a-b",
            "bytes=1",
            "bytes=-",
            "bytes=--1",
            "bytes=1-2-3",
            "bytes=1-2x",
            "bytes=0-1,",
            "bytes=0-1,,2-3",
            "bytes=,0-1",
            "bytes=0-1;2-3",
            "bytes=+1-2",
            "bytes=-+1",
            "bytes=0x10-20",
            "bytes=99999999999999999999-",
            "bytes=0-99999999999999999999",
        ] {
            assert_eq!(p(bad, 1000), Unsatisfiable, "{bad:?}");
        }
    }

    #[test]
    fn whitespace() {
        assert_eq!(
            p("bytes= 0-1 , 5 - 6,\t-2 ", 10),
            part(&[0..2, 5..7, 8..10])
        );
        assert_eq!(p("bytes=0-1 ,3-4", 10), part(&[0..2, 3..5]));
    }

    #[test]
    fn multiple_ranges_keep_order() {
        assert_eq!(
            p("bytes=500-599,0-99,-10", 1000),
            part(&[500..600, 0..100, 990..1000])
        );
    }

    #[test]
    fn unsatisfiable_specs_are_skipped() {
        assert_eq!(p("bytes=1000-", 1000), Unsatisfiable);
        assert_eq!(p("bytes=1000-2000", 1000), Unsatisfiable);
        assert_eq!(p("bytes=5000-6000,1000-1", 1000), Unsatisfiable);
        assert_eq!(p("bytes=1000-,0-9", 1000), part(&[0..10]));
        assert_eq!(p("bytes=0-9,2000-3000", 1000), part(&[0..10]));
        // last < first selects nothing
        assert_eq!(p("bytes=10-5", 1000), Unsatisfiable);
        assert_eq!(p("bytes=10-5,0-0", 1000), part(&[0..1]));
    }

    #[test]
    fn suffix_zero_is_unsatisfiable() {
        assert_eq!(p("bytes=-0", 1000), Unsatisfiable);
        assert_eq!(p("bytes=-0,0-0", 1000), part(&[0..1]));
    }

    #[test]
    fn empty_representation() {
        // nginx: an empty selection at offset 0 means "send it all".
        assert_eq!(p("bytes=0-", 0), Full);
        assert_eq!(p("bytes=0-10", 0), Full);
        assert_eq!(p("bytes=-5", 0), Full);
        assert_eq!(p("bytes=-0", 0), Full);
        assert_eq!(p("bytes=5-10", 0), Unsatisfiable);
    }

    #[test]
    fn max_ranges() {
        let h = b"bytes=0-0,2-2,4-4";
        assert_eq!(parse(h, 10, Some(0)), Full);
        assert_eq!(parse(b"bytes=0-0", 10, Some(0)), Full);
        assert_eq!(parse(h, 10, Some(2)), Full);
        assert_eq!(parse(h, 10, Some(3)), part(&[0..1, 2..3, 4..5]));
        assert_eq!(parse(h, 10, None), part(&[0..1, 2..3, 4..5]));
        assert_eq!(parse(b"bytes=0-0", 10, Some(1)), part(&[0..1]));
        // skipped (unsatisfiable) specs do not count toward the limit
        assert_eq!(
            parse(b"bytes=0-0,50-60,2-2", 10, Some(2)),
            part(&[0..1, 2..3])
        );
    }

    #[test]
    fn overlap_abuse_is_ignored() {
        let mut h = String::from("bytes=0-");
        for i in 1..500 {
            h.push_str(&format!(",{i}-"));
        }
        assert_eq!(p(&h, 1000), Full);

        let h = format!("bytes={}", vec!["0-99"; 300].join(","));
        assert_eq!(p(&h, 1000), Full);

        // exactly covering the file is fine, one byte over is not
        assert_eq!(p("bytes=0-499,500-999", 1000), part(&[0..500, 500..1000]));
        assert_eq!(p("bytes=0-500,500-999", 1000), Full);
        assert_eq!(p("bytes=0-,-1", 1000), Full);
    }

    #[test]
    fn content_range_format() {
        assert_eq!(content_range(&(0..100), 1000), "bytes 0-99/1000");
        assert_eq!(content_range(&(999..1000), 1000), "bytes 999-999/1000");
    }

    #[test]
    fn multipart_framing() {
        let body: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let ranges = [0..10, 500..600, 990..1000];
        let m = multipart(&ranges, 1000, "text/plain", 42);
        assert_eq!(m.boundary.len(), 16);
        assert_eq!(
            m.content_type(),
            format!("multipart/byteranges; boundary={}", m.boundary)
        );
        assert_eq!(
            m.parts[1].0,
            format!(
                "\r\n--{}\r\nContent-Type: text/plain\r\nContent-Range: bytes 500-599/1000\r\n\r\n",
                m.boundary
            )
            .into_bytes()
        );
        assert_eq!(
            m.trailer,
            format!("\r\n--{}--\r\n", m.boundary).into_bytes()
        );

        let mut out = Vec::new();
        for (h, r) in &m.parts {
            out.extend_from_slice(h);
            out.extend_from_slice(&body[r.start as usize..r.end as usize]);
        }
        out.extend_from_slice(&m.trailer);
        assert_eq!(m.content_length(), out.len() as u64);
        assert_eq!(
            m.parts.iter().map(|p| p.1.clone()).collect::<Vec<_>>(),
            ranges
        );

        let other = multipart(&ranges, 1000, "text/plain", 43);
        assert_ne!(other.boundary, m.boundary);
        let untyped = multipart(&ranges[..1], 1000, "", 1);
        assert!(
            !untyped.parts[0]
                .0
                .windows(13)
                .any(|w| w == b"Content-Type:")
        );
        assert_eq!(
            untyped.content_length(),
            (untyped.parts[0].0.len() + 10 + untyped.trailer.len()) as u64
        );
    }
}
