//! Validators and conditional requests: `ETag`, `If-None-Match`,
//! `If-Modified-Since`, `If-Match`, `If-Unmodified-Since` and `If-Range`.
//!
//! Evaluation order for a GET/HEAD of a static file, nginx's: first
//! [`precondition_failed`] (→ 412), then [`not_modified`] (→ 304), then,
//! if a `Range` is present, [`if_range_matches`] decides whether to honour it.

use crate::core::message::response::{Body, Response};
use crate::core::request::Request;
use std::time::UNIX_EPOCH;

/// nginx's not-modified filter over a 200 reply that is not a file of this
/// server's (a cached one, a whole assembled from slices), against its
/// `ETag` and `Last-Modified` fields: `Err` with the answer in its place —
/// a 412 when `If-Match`/`If-Unmodified-Since` fails, the reply made a 304
/// when `If-None-Match`/`If-Modified-Since` find the client's copy current
/// — else `Ok` with the reply.
pub fn answer(req: &Request<'_>, mut resp: Response) -> Result<Response, Response> {
    let head = req.head;
    let (if_match, ius) = (head.header("if-match"), head.header("if-unmodified-since"));
    let (inm, ims) = (
        head.header("if-none-match"),
        head.header("if-modified-since"),
    );
    if if_match.is_none() && ius.is_none() && inm.is_none() && ims.is_none() {
        return Ok(resp);
    }
    let field = |name: &str| {
        resp.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let etag = field("etag").unwrap_or("");
    let lm = field("last-modified").and_then(|v| http_date(v.as_bytes()));
    if precondition_failed(if_match, ius, etag, lm.unwrap_or(i64::MAX)) {
        return Err(req.error(412));
    }
    let since = req.conf.get::<super::conf::StaticConf>().if_modified_since;
    if (ims.is_none() || lm.is_some()) && not_modified(inm, ims, etag, lm.unwrap_or(0), since) {
        resp.status = 304;
        resp.content_type = None;
        resp.body = Body::Empty;
        return Err(resp);
    }
    Ok(resp)
}

/// Write the strong entity-tag `"<mtime seconds hex>-<size hex>"` (quotes
/// included) into `out`, which is cleared first.
pub fn etag(mtime_secs: i64, size: u64, out: &mut String) {
    out.clear();
    out.reserve(2 + 16 + 1 + 16);
    out.push('"');
    push_hex(out, mtime_secs as u64);
    out.push('-');
    push_hex(out, size);
    out.push('"');
}

fn push_hex(out: &mut String, mut v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(v & 0xf) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    for &b in &buf[i..] {
        out.push(char::from(b));
    }
}

/// The `if_modified_since` directive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IfModifiedSince {
    /// Ignore `If-Modified-Since`.
    Off,
    /// 304 only when the date equals the modification time.
    #[default]
    Exact,
    /// 304 when the modification time is not after the date.
    Before,
}

/// Should a GET/HEAD be answered with 304 Not Modified? As nginx decides
/// it: every validator the request carries must say "not modified".
///
/// * `If-Modified-Since` is compared with `mtime_secs` according to `ims`
///   (`off` and an unparseable date count as modified);
/// * `If-None-Match` must be `*` or list an entity-tag weakly equal to
///   `etag`; with no `etag` (`etag off`) it never matches.
pub fn not_modified(
    if_none_match: Option<&[u8]>,
    if_modified_since: Option<&[u8]>,
    etag: &str,
    mtime_secs: i64,
    ims: IfModifiedSince,
) -> bool {
    if if_none_match.is_none() && if_modified_since.is_none() {
        return false;
    }
    if let Some(value) = if_modified_since {
        let unmodified = match ims {
            IfModifiedSince::Off => false,
            IfModifiedSince::Exact => http_date(value) == Some(mtime_secs),
            IfModifiedSince::Before => http_date(value).is_some_and(|t| mtime_secs <= t),
        };
        if !unmodified {
            return false;
        }
    }
    if_none_match.is_none_or(|list| !etag.is_empty() && list_matches(list, etag, Comparison::Weak))
}

/// Should the request be answered with 412 Precondition Failed? As nginx
/// decides it: `If-Unmodified-Since` fails when the file was modified after
/// the date (or the date does not parse), and `If-Match` fails unless it is
/// `*` or lists an entity-tag strongly equal to `etag` (weak tags never
/// match); either failing is a 412.
pub fn precondition_failed(
    if_match: Option<&[u8]>,
    if_unmodified_since: Option<&[u8]>,
    etag: &str,
    mtime_secs: i64,
) -> bool {
    if let Some(value) = if_unmodified_since
        && http_date(value).is_none_or(|t| mtime_secs > t)
    {
        return true;
    }
    if_match.is_some_and(|list| !list_matches(list, etag, Comparison::Strong))
}

/// `If-Range`: may the `Range` header be honoured? True when the value is an
/// entity-tag strongly equal to `etag`, or an HTTP date exactly equal to
/// `mtime_secs`. Otherwise the full representation is sent.
pub fn if_range_matches(if_range: &[u8], etag: &str, mtime_secs: i64) -> bool {
    let v = trim_ows(if_range);
    match v.first() {
        Some(b'"') => !etag.is_empty() && !is_weak(etag.as_bytes()) && v == etag.as_bytes(),
        Some(b'W') if v.starts_with(b"W/") => false,
        _ => http_date(v) == Some(mtime_secs),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Strong,
    Weak,
}

fn is_weak(tag: &[u8]) -> bool {
    tag.starts_with(b"W/")
}

/// Does the `If-Match`/`If-None-Match` list `list` contain `*` or a tag that
/// matches `etag` under `cmp`?
fn list_matches(list: &[u8], etag: &str, cmp: Comparison) -> bool {
    let list = trim_ows(list);
    if list == b"*" {
        return true;
    }
    let ours = etag.as_bytes();
    if ours.is_empty() {
        return false;
    }
    let our_weak = is_weak(ours);
    if cmp == Comparison::Strong && our_weak {
        return false;
    }
    let ours = if our_weak { &ours[2..] } else { ours };

    let mut s = list;
    loop {
        // skip separators and empty list elements
        while let [b' ' | b'\t' | b',', rest @ ..] = s {
            s = rest;
        }
        if s.is_empty() {
            return false;
        }
        let weak = is_weak(s);
        let body = if weak { &s[2..] } else { s };
        // An opaque-tag is a quoted string that may itself contain commas.
        let (tag, rest) = match body {
            [b'"', inner @ ..] => match memchr::memchr(b'"', inner) {
                Some(q) => body.split_at(q + 2),
                None => (body, &b""[..]),
            },
            _ => match memchr::memchr(b',', body) {
                Some(c) => body.split_at(c),
                None => (body, &b""[..]),
            },
        };
        // Anything but whitespace between the tag and the next comma makes
        // the element malformed: it then matches nothing.
        let after = match memchr::memchr(b',', rest) {
            Some(c) => c,
            None => rest.len(),
        };
        let clean = trim_ows(&rest[..after]).is_empty();
        if clean && tag == ours && (cmp == Comparison::Weak || !weak) {
            return true;
        }
        s = &rest[after..];
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

/// Parse an HTTP date (IMF-fixdate, RFC 850 or asctime) into Unix seconds.
pub fn http_date(value: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(trim_ows(value)).ok()?;
    let t = httpdate::parse_http_date(s).ok()?;
    let secs = t.duration_since(UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // 784111777 = Sun, 06 Nov 1994 08:49:37 GMT
    const T: i64 = 784_111_777;
    const DATE: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";
    const DATE_850: &[u8] = b"Sunday, 06-Nov-94 08:49:37 GMT";
    const DATE_ASC: &[u8] = b"Sun Nov  6 08:49:37 1994";
    const EARLIER: &[u8] = b"Sun, 06 Nov 1994 08:49:36 GMT";
    const LATER: &[u8] = b"Sun, 06 Nov 1994 08:49:38 GMT";
    const TAG: &str = "\"2ebc98a1-3e8\"";

    fn tag(m: i64, s: u64) -> String {
        let mut out = String::from("junk");
        etag(m, s, &mut out);
        out
    }

    #[test]
    fn etag_format() {
        assert_eq!(tag(T, 1000), TAG);
        assert_eq!(tag(0, 0), "\"0-0\"");
        assert_eq!(tag(0x5f5e_1000, 0xabc), "\"5f5e1000-abc\"");
        assert_eq!(
            tag(i64::MAX, u64::MAX),
            "\"7fffffffffffffff-ffffffffffffffff\""
        );
    }

    fn nm(inm: Option<&str>, ims: Option<&[u8]>, mode: IfModifiedSince) -> bool {
        not_modified(inm.map(str::as_bytes), ims, TAG, T, mode)
    }

    #[test]
    fn if_none_match() {
        use IfModifiedSince::Exact;
        assert!(nm(Some(TAG), None, Exact));
        assert!(nm(Some("*"), None, Exact));
        assert!(nm(Some(" * "), None, Exact));
        assert!(nm(Some("W/\"2ebc98a1-3e8\""), None, Exact));
        assert!(nm(Some("\"a\", \"2ebc98a1-3e8\""), None, Exact));
        assert!(nm(Some("\"a\",W/\"2ebc98a1-3e8\" ,\"b\""), None, Exact));
        assert!(nm(Some(",\t\"a\" ,, \"2ebc98a1-3e8\",  "), None, Exact));
        assert!(nm(Some("\"x,y\", \"2ebc98a1-3e8\""), None, Exact));
        assert!(!nm(Some("\"2ebc98a1-3e9\""), None, Exact));
        assert!(!nm(Some("2ebc98a1-3e8"), None, Exact));
        assert!(!nm(Some("\"2ebc98a1-3e8\"x"), None, Exact));
        assert!(!nm(Some("\"2ebc98a1-3e8"), None, Exact));
        assert!(!nm(Some("\"2ebc98a1\""), None, Exact));
        assert!(!nm(Some("\"a\", *"), None, Exact));
        assert!(!nm(Some(""), None, Exact));
        // our own tag may be weak
        assert!(not_modified(
            Some(TAG.as_bytes()),
            None,
            "W/\"2ebc98a1-3e8\"",
            T,
            Exact
        ));
        // no etag (`etag off`): nothing matches, as in nginx
        assert!(!not_modified(Some(TAG.as_bytes()), None, "", T, Exact));
        assert!(!not_modified(Some(b"*"), None, "", T, Exact));
    }

    #[test]
    fn every_validator_must_say_not_modified() {
        use IfModifiedSince::*;
        assert!(!nm(Some("\"other\""), Some(DATE), Exact));
        assert!(nm(Some(TAG), Some(DATE), Exact));
        assert!(!nm(Some(TAG), Some(EARLIER), Exact));
        assert!(!nm(Some(TAG), Some(b"garbage"), Exact));
        assert!(!nm(Some(TAG), Some(DATE), Off));
        assert!(nm(Some(TAG), Some(LATER), Before));
    }

    #[test]
    fn if_modified_since_modes() {
        use IfModifiedSince::*;
        assert_eq!(IfModifiedSince::default(), Exact);

        assert!(nm(None, Some(DATE), Exact));
        assert!(nm(None, Some(DATE_850), Exact));
        assert!(nm(None, Some(DATE_ASC), Exact));
        assert!(!nm(None, Some(EARLIER), Exact));
        assert!(!nm(None, Some(LATER), Exact));

        assert!(nm(None, Some(DATE), Before));
        assert!(nm(None, Some(LATER), Before));
        assert!(!nm(None, Some(EARLIER), Before));

        assert!(!nm(None, Some(DATE), Off));
        assert!(!nm(None, Some(LATER), Off));

        for m in [Exact, Before, Off] {
            assert!(!nm(None, None, m));
            assert!(!nm(None, Some(b"not a date"), m));
            assert!(!nm(None, Some(b""), m));
            assert!(!nm(None, Some(b"Sun, 06 Nov 1994 08:49:37 GM\xff"), m));
        }
    }

    #[test]
    fn preconditions() {
        let pf = |im: Option<&str>, ius: Option<&[u8]>| {
            precondition_failed(im.map(str::as_bytes), ius, TAG, T)
        };
        assert!(!pf(None, None));
        assert!(!pf(Some("*"), None));
        assert!(!pf(Some(TAG), None));
        assert!(!pf(Some("\"a\", \"2ebc98a1-3e8\""), None));
        assert!(pf(Some("\"a\""), None));
        // If-Match uses the strong comparison
        assert!(pf(Some("W/\"2ebc98a1-3e8\""), None));
        assert!(precondition_failed(
            Some(TAG.as_bytes()),
            None,
            "W/\"2ebc98a1-3e8\"",
            T
        ));
        assert!(pf(Some(""), None));

        assert!(!pf(None, Some(DATE)));
        assert!(!pf(None, Some(LATER)));
        assert!(pf(None, Some(EARLIER)));
        assert!(pf(None, Some(b"bogus")));
        // Both are checked, as in nginx.
        assert!(pf(Some(TAG), Some(EARLIER)));
        assert!(!pf(Some(TAG), Some(LATER)));
        assert!(pf(Some("\"a\""), Some(LATER)));
    }

    #[test]
    fn if_range() {
        assert!(if_range_matches(TAG.as_bytes(), TAG, T));
        assert!(if_range_matches(b" \"2ebc98a1-3e8\" ", TAG, T));
        assert!(!if_range_matches(b"\"2ebc98a1-3e9\"", TAG, T));
        assert!(!if_range_matches(b"W/\"2ebc98a1-3e8\"", TAG, T));
        assert!(!if_range_matches(TAG.as_bytes(), "W/\"2ebc98a1-3e8\"", T));
        assert!(!if_range_matches(b"\"\"", "", T));
        assert!(if_range_matches(DATE, TAG, T));
        assert!(if_range_matches(DATE_850, TAG, T));
        assert!(!if_range_matches(EARLIER, TAG, T));
        assert!(!if_range_matches(LATER, TAG, T));
        assert!(!if_range_matches(b"", TAG, T));
        assert!(!if_range_matches(b"*", TAG, T));
        assert!(!if_range_matches(b"yesterday", TAG, T));
    }
}
