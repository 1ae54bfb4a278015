//! Strict, sans-IO HTTP/1.x request head parser.
//!
//! Tokenising is done by `httparse`; this module adds the checks it does not
//! make (bare CR, NUL, length limits, framing rules) and records header
//! positions as offsets into the frozen head, so no header is copied. A line
//! ends with CRLF or, as RFC 9112 §2.2 lets a recipient and nginx do, a bare
//! LF; a CR anywhere else is refused.

use crate::core::message::head::{BodyFraming, Method, ParseError, RequestHead, Spans, Version};
use bytes::{Buf, BytesMut};
use std::ops::Range;

/// Limits in nginx terms: client_header_buffer_size (default 1024) and
/// large_client_header_buffers NUMBER SIZE (default 4 8192).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_buffer: usize,
    pub large_buffers: usize,
    pub large_buffer_size: usize,
    /// `underscores_in_headers`: a field whose name has `_` is kept.
    pub underscores: bool,
    /// `ignore_invalid_headers`: a field whose name has `_` (without
    /// `underscores_in_headers`) is dropped, as nginx does.
    pub ignore_invalid: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_buffer: 1024,
            large_buffers: 4,
            large_buffer_size: 8192,
            underscores: false,
            ignore_invalid: true,
        }
    }
}

impl Limits {
    /// Most bytes a head may take before it is refused:
    /// max(header_buffer, large_buffers * large_buffer_size).
    pub fn max_head(&self) -> usize {
        self.header_buffer
            .max(self.large_buffers.saturating_mul(self.large_buffer_size))
    }
}

const BAD: ParseError = ParseError::BAD_REQUEST;

/// Most header fields accepted in one head.
const MAX_HEADERS: usize = 100;

/// Most empty lines (CRLF or LF) skipped before a request line.
const MAX_LEADING_EMPTY_LINES: usize = 8;

/// Try to parse one request head from the front of `buf`.
///
/// `Ok(None)`: incomplete, read more. `Ok(Some(head))`: the head (and any
/// empty lines before it) was split off the front of `buf`; the body or
/// next request stays in `buf`.
pub fn parse(buf: &mut BytesMut, limits: &Limits) -> Result<Option<RequestHead>, ParseError> {
    // RFC 9112 §2.2: skip a few empty lines before the request line.
    let mut start = 0;
    let mut empty_lines = 0;
    loop {
        match &buf[start..] {
            [] | [b'\r'] => return Ok(None),
            [b'\r', b'\n', ..] => {
                empty_lines += 1;
                if empty_lines > MAX_LEADING_EMPTY_LINES {
                    return Err(BAD);
                }
                start += 2;
            }
            [b'\n', ..] => {
                empty_lines += 1;
                if empty_lines > MAX_LEADING_EMPTY_LINES {
                    return Err(BAD);
                }
                start += 1;
            }
            _ => break,
        }
    }

    let scan = scan_lines(&buf[start..], limits)?;
    if let Some(line_end) = scan.line_end
        && let Some(head) = simple_request(buf, start, line_end)?
    {
        return Ok(Some(head));
    }
    let data = &buf[start..];
    let large = limits.large_buffer_size;

    let Some(head_len) = scan.head_len else {
        // Incomplete: refuse early what can never fit or is already invalid.
        let partial = data.len() - usize::from(data.last() == Some(&b'\r')) - scan.line_start;
        if partial > large && data.len() >= limits.header_buffer {
            return Err(if scan.line_end.is_none() {
                ParseError::URI_TOO_LONG
            } else {
                ParseError::HEADERS_TOO_LARGE
            });
        }
        // An HTTP/0.9 line whose LF is still to come after its CR.
        if scan.line_end.is_none()
            && let Some(line) = data.strip_suffix(b"\r")
            && simple_target(line).is_some()
        {
            return Ok(None);
        }
        let mut headers = uninit_headers();
        let mut req = httparse::Request::new(&mut []);
        match req.parse_with_uninit_headers(data, &mut headers) {
            Ok(_) => {}
            // The version token may still be arriving.
            Err(httparse::Error::Version) if scan.line_end.is_none() => {}
            Err(e) => return Err(map_httparse_error(e, data, scan.line_end)),
        }
        if data.len() >= limits.max_head() {
            return Err(ParseError::HEADERS_TOO_LARGE);
        }
        return Ok(None);
    };

    if head_len > limits.max_head() {
        return Err(ParseError::HEADERS_TOO_LARGE);
    }
    let line_end = scan.line_end.ok_or(BAD)?;
    let head = &data[..head_len];

    let mut headers = uninit_headers();
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(head, &mut headers) {
        Ok(httparse::Status::Complete(n)) if n == head_len => {}
        Ok(_) => return Err(BAD),
        Err(e) => return Err(map_httparse_error(e, head, Some(line_end))),
    }

    let base = head.as_ptr() as usize;
    let offset = |s: &[u8]| s.as_ptr() as usize - base;

    let method_bytes = req.method.ok_or(BAD)?.as_bytes();
    let method = Method::from_token(method_bytes);
    let method_end = method_bytes.len();
    let version = match req.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        _ => return Err(ParseError::VERSION_NOT_SUPPORTED),
    };
    let target_bytes = req.path.ok_or(BAD)?.as_bytes();
    let target_start = offset(target_bytes);
    let target = target_start..target_start + target_bytes.len();
    let form = classify_target(target_bytes, method)?;

    let mut fields = Vec::with_capacity(req.headers.len());
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding: Option<&[u8]> = None;
    let mut host_header: Option<Range<usize>> = None;
    let mut conn_close = false;
    let mut conn_keep_alive = false;
    let mut expect_continue = false;
    // Fields nginx takes once: a second one is a bad request.
    let mut unique_seen = 0u8;
    let mut once = |bit: u8| -> Result<(), ParseError> {
        if unique_seen & bit != 0 {
            return Err(BAD);
        }
        unique_seen |= bit;
        Ok(())
    };

    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.is_empty() {
            return Err(BAD);
        }
        let value = trim_ows(h.value);
        let name_start = offset(name);
        let value_start = offset(value);
        let value_range = value_start..value_start + value.len();
        fields.push((name_start..name_start + name.len(), value_range.clone()));

        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                if host_header.is_some() || !valid_host(value) {
                    return Err(BAD);
                }
                host_header = Some(value_range);
            }
            6 if name.eq_ignore_ascii_case(b"expect") => {
                once(1)?;
                expect_continue = value.eq_ignore_ascii_case(b"100-continue");
            }
            8 if name.eq_ignore_ascii_case(b"if-match") => once(2)?,
            8 if name.eq_ignore_ascii_case(b"if-range") => once(4)?,
            13 if name.eq_ignore_ascii_case(b"if-none-match") => once(8)?,
            13 if name.eq_ignore_ascii_case(b"content-range") => once(16)?,
            13 if name.eq_ignore_ascii_case(b"authorization") => once(32)?,
            17 if name.eq_ignore_ascii_case(b"if-modified-since") => once(64)?,
            19 if name.eq_ignore_ascii_case(b"if-unmodified-since") => once(128)?,
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for token in value.split(|&b| b == b',').map(trim_ows) {
                    if token.eq_ignore_ascii_case(b"close") {
                        conn_close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        conn_keep_alive = true;
                    }
                }
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                if content_length.is_some() {
                    return Err(BAD);
                }
                content_length = Some(parse_content_length(value).ok_or(BAD)?);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                if transfer_encoding.is_some() {
                    return Err(BAD);
                }
                transfer_encoding = Some(value);
            }
            _ => {}
        }
    }

    // As nginx: `X_Real_IP` would reach a FastCGI application as the same
    // `HTTP_X_REAL_IP` as `X-Real-IP`; such fields are dropped. (No name the
    // checks above look at has a `_`.) One search of the whole head first.
    if !limits.underscores
        && limits.ignore_invalid
        && memchr::memchr(b'_', &head[line_end..]).is_some()
    {
        fields.retain(|(n, _)| !head[n.clone()].contains(&b'_'));
    }

    let framing = match (transfer_encoding, content_length) {
        (Some(_), Some(_)) => return Err(BAD),
        (Some(_), None) if version == Version::Http10 => return Err(BAD),
        (Some(te), None) => {
            check_transfer_encoding(te)?;
            BodyFraming::Chunked
        }
        (None, Some(n)) => BodyFraming::Length(n),
        (None, None) => BodyFraming::None,
    };

    if version == Version::Http11 && host_header.is_none() {
        return Err(BAD);
    }

    let (path, query, host) = locate(form, target_bytes, target_start, host_header);

    let keep_alive = match version {
        Version::Http11 | Version::Http2 | Version::Http3 => !conn_close,
        Version::Http10 => conn_keep_alive && !conn_close,
        Version::Http09 => false,
    };
    // As nginx: the 100 goes out when a handler reads the body, even an
    // empty one (`Content-Length: 0`).
    let expect_continue = expect_continue && version == Version::Http11;
    // TRACE would echo the request's credentials back (cross-site tracing):
    // refused once the head is read, as nginx does.
    if method == Method::Trace {
        return Err(ParseError::NOT_ALLOWED);
    }

    buf.advance(start);
    let raw = buf.split_to(head_len).freeze();

    let spans = Spans {
        method_end,
        line_end,
        target,
        path,
        query,
        host,
        headers: fields,
    };
    Ok(Some(RequestHead::new(
        raw,
        spans,
        method,
        version,
        framing,
        keep_alive,
        expect_continue,
    )))
}

/// The target's path, query and host (the absolute form's authority, else
/// the Host field's): spans of the head.
fn locate(
    form: TargetForm,
    target_bytes: &[u8],
    target_start: usize,
    host_header: Option<Range<usize>>,
) -> (Range<usize>, Option<Range<usize>>, Option<Range<usize>>) {
    match form {
        TargetForm::Asterisk => (
            target_start..target_start + target_bytes.len(),
            None,
            host_header,
        ),
        TargetForm::Origin => {
            let (p, q) = split_query(target_bytes, target_start);
            (p, q, host_header)
        }
        TargetForm::Absolute { authority } => {
            let auth = target_start + authority.start..target_start + authority.end;
            let rest = &target_bytes[authority.end..];
            let (p, q) = split_query(rest, target_start + authority.end);
            (p, q, Some(auth))
        }
    }
}

/// An HTTP/0.9 simple request, as nginx takes one: a first line of `GET`,
/// one space and a target (no space or control byte), with no version. It is the
/// whole request — no header fields are read, whatever follows is never
/// parsed — and its answer is the body alone, after which the connection
/// closes. Any other first line without a version stays an error.
fn simple_request(
    buf: &mut BytesMut,
    start: usize,
    line_end: usize,
) -> Result<Option<RequestHead>, ParseError> {
    let data = &buf[start..];
    let Some(target_bytes) = simple_target(&data[..line_end]) else {
        return Ok(None);
    };
    let form = classify_target(target_bytes, Method::Get)?;
    let target = 4..line_end;
    let (path, query, host) = locate(form, target_bytes, 4, None);
    let head_len = line_end + if data[line_end] == b'\r' { 2 } else { 1 };
    buf.advance(start);
    let raw = buf.split_to(head_len).freeze();
    let spans = Spans {
        method_end: 3,
        line_end,
        target,
        path,
        query,
        host,
        headers: Vec::new(),
    };
    Ok(Some(RequestHead::new(
        raw,
        spans,
        Method::Get,
        Version::Http09,
        BodyFraming::None,
        false,
        false,
    )))
}

/// The target of an HTTP/0.9 request line (without its line end).
fn simple_target(line: &[u8]) -> Option<&[u8]> {
    let target = line.strip_prefix(b"GET ")?;
    let visible = target.iter().all(|&b| b > 0x20 && b != 0x7f);
    (!target.is_empty() && visible).then_some(target)
}

/// Room for httparse's header slices, left unwritten (httparse fills what
/// it parses): writing 100 empty headers first cost more than parsing.
fn uninit_headers<'b>() -> [std::mem::MaybeUninit<httparse::Header<'b>>; MAX_HEADERS] {
    [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS]
}

/// What `scan_lines` learned about the bytes so far.
struct LineScan {
    /// End of the request line (index of its CR, or of a bare LF), once seen.
    line_end: Option<usize>,
    /// Start of the line not yet terminated.
    line_start: usize,
    /// Length of the head through the blank line, once seen.
    head_len: Option<usize>,
}

/// Checks line endings (CRLF or LF; a bare CR is refused), NUL bytes and
/// per-line lengths, and
/// finds the end of the head. As in nginx, a line longer than a large buffer
/// is refused only when it does not end within the first
/// `client_header_buffer_size` bytes: a head that fits the first buffer may
/// have lines of any length.
fn scan_lines(data: &[u8], limits: &Limits) -> Result<LineScan, ParseError> {
    let too_long =
        |len: usize, end: usize| len > limits.large_buffer_size && end > limits.header_buffer;
    let mut scan = LineScan {
        line_end: None,
        line_start: 0,
        head_len: None,
    };
    for i in memchr::memchr3_iter(b'\r', b'\n', 0, data) {
        match data[i] {
            b'\r' => match data.get(i + 1) {
                Some(b'\n') | None => {}
                Some(_) => return Err(BAD),
            },
            b'\n' => {
                let end = if i > 0 && data[i - 1] == b'\r' {
                    i - 1
                } else {
                    i
                };
                let len = end - scan.line_start;
                if scan.line_end.is_none() {
                    if len == 0 {
                        return Err(BAD);
                    }
                    if too_long(len, i + 1) {
                        return Err(ParseError::URI_TOO_LONG);
                    }
                    scan.line_end = Some(end);
                } else if len == 0 {
                    scan.head_len = Some(i + 1);
                    return Ok(scan);
                } else if too_long(len, i + 1) {
                    return Err(ParseError::HEADERS_TOO_LARGE);
                }
                scan.line_start = i + 1;
            }
            _ => return Err(BAD), // NUL
        }
    }
    Ok(scan)
}

fn map_httparse_error(e: httparse::Error, data: &[u8], line_end: Option<usize>) -> ParseError {
    match e {
        httparse::Error::TooManyHeaders => ParseError::HEADERS_TOO_LARGE,
        httparse::Error::Version => {
            // A well-formed but unsupported version (e.g. HTTP/2.0) gets 505;
            // a line that is not "method SP target SP version" (a space in the
            // target, say) is a bad request whatever its last word.
            let line = &data[..line_end.unwrap_or(data.len())];
            let token = line.rsplit(|&b| b == b' ').next().unwrap_or(b"");
            let three_parts = memchr::memchr_iter(b' ', line).count() == 2;
            match token {
                [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
                    if three_parts && major.is_ascii_digit() && minor.is_ascii_digit() =>
                {
                    ParseError::VERSION_NOT_SUPPORTED
                }
                _ if !token.starts_with(b"HTTP/") && line_end.is_some() => ParseError::NOT_HTTP1,
                _ => BAD,
            }
        }
        _ => BAD,
    }
}

enum TargetForm {
    Origin,
    Asterisk,
    /// `authority` is relative to the start of the target.
    Absolute {
        authority: Range<usize>,
    },
}

fn classify_target(t: &[u8], method: Method) -> Result<TargetForm, ParseError> {
    if t.first() == Some(&b'/') {
        return Ok(TargetForm::Origin);
    }
    if t == b"*" {
        return if method == Method::Options {
            Ok(TargetForm::Asterisk)
        } else {
            Err(BAD)
        };
    }
    let scheme_len = if starts_with_ignore_case(t, b"http://") {
        7
    } else if starts_with_ignore_case(t, b"https://") {
        8
    } else {
        return Err(BAD);
    };
    let rest = &t[scheme_len..];
    let auth_len = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let auth = &rest[..auth_len];
    if !valid_authority(auth) {
        return Err(BAD);
    }
    Ok(TargetForm::Absolute {
        authority: scheme_len..scheme_len + auth_len,
    })
}

/// Splits `s` (located at `base` in the head) at the first '?'. A fragment
/// (from '#' on), which clients should not send, is dropped from both parts
/// (RFC 3986 §3.5), as nginx does.
fn split_query(s: &[u8], base: usize) -> (Range<usize>, Option<Range<usize>>) {
    let s = &s[..memchr::memchr(b'#', s).unwrap_or(s.len())];
    match memchr::memchr(b'?', s) {
        Some(q) => (base..base + q, Some(base + q + 1..base + s.len())),
        None => (base..base + s.len(), None),
    }
}

/// A Host value (or a target's authority) as nginx checks it: no empty
/// label (`..`), no path separator, control byte or space (values that could
/// escape a path built from them); an empty host, or a lone dot, is refused.
/// The host part ends at the first `:` (after the `]` of an IPv6 literal);
/// one trailing dot is not part of it.
fn valid_host(h: &[u8]) -> bool {
    let (mut dot, mut host_len, mut literal, mut rest) = (usize::MAX, h.len(), false, false);
    for (i, &c) in h.iter().enumerate() {
        match c {
            b'.' => {
                if i > 0 && dot == i - 1 {
                    return false;
                }
                dot = i;
            }
            b':' if !rest && !literal => {
                host_len = i;
                rest = true;
            }
            b'[' if i == 0 => literal = true,
            b']' if literal && !rest => {
                host_len = i + 1;
                literal = false;
                rest = true;
            }
            b'/' | b'\\' | 0..=0x20 | 0x7f => return false,
            _ => {}
        }
    }
    if host_len > 0 && dot == host_len - 1 {
        host_len -= 1;
    }
    host_len > 0
}

/// The authority of an absolute-form target, as nginx's request-line parser
/// takes it: a name of letters, digits, `.`, `-`, `_`, or a bracketed IP
/// literal (IPv6 or IPvFuture), then an optional `:` and digits.
fn valid_authority(a: &[u8]) -> bool {
    let (host, port) = if a.first() == Some(&b'[') {
        let Some(end) = memchr::memchr(b']', a) else {
            return false;
        };
        // IPv6 or IPvFuture (RFC 3986): unreserved, sub-delims and `:`.
        let lit_ok = a[1..end]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b":-._~!$&'()*+,;=".contains(&b));
        if !lit_ok {
            return false;
        }
        (&a[..=end], &a[end + 1..])
    } else {
        let end = memchr::memchr(b':', a).unwrap_or(a.len());
        let name_ok = a[..end]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        if !name_ok {
            return false;
        }
        (&a[..end], &a[end..])
    };
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    !host.is_empty() && port_ok && valid_host(a)
}

fn starts_with_ignore_case(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
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

/// 1*DIGIT, no sign or spaces, must fit in u64.
fn parse_content_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        if b.is_ascii_digit() {
            n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// Only a lone "chunked" is implemented. A final coding other than chunked
/// makes the length unknowable (400, RFC 9112 §6.3); other codings before
/// chunked are valid framing we do not implement (501).
/// `chunked` is the one transfer coding taken; any other value (another
/// coding, a list) is 501, as nginx answers it. The request is refused
/// either way, so no framing is ever guessed.
fn check_transfer_encoding(te: &[u8]) -> Result<(), ParseError> {
    if te.eq_ignore_ascii_case(b"chunked") {
        Ok(())
    } else {
        Err(ParseError::NOT_IMPLEMENTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn try_parse(input: &[u8]) -> Result<Option<RequestHead>, ParseError> {
        let mut buf = BytesMut::from(input);
        parse(&mut buf, &Limits::default())
    }

    fn ok(input: &[u8]) -> RequestHead {
        match try_parse(input) {
            Ok(Some(h)) => h,
            other => panic!("expected a head for {:?}, got {:?}", input, other),
        }
    }

    fn status(input: &[u8]) -> u16 {
        match try_parse(input) {
            Err(e) => e.status,
            other => panic!("expected an error for {:?}, got {:?}", input, other),
        }
    }

    fn incomplete(input: &[u8]) {
        match try_parse(input) {
            Ok(None) => {}
            other => panic!("expected incomplete for {:?}, got {:?}", input, other),
        }
    }

    #[test]
    fn duplicate_single_fields_are_refused() {
        for name in [
            "Expect",
            "If-Match",
            "If-Range",
            "If-None-Match",
            "Content-Range",
            "Authorization",
            "If-Modified-Since",
            "If-Unmodified-Since",
        ] {
            let one = format!("GET / HTTP/1.1\r\nHost: h\r\n{name}: a\r\n\r\n");
            assert!(try_parse(one.as_bytes()).is_ok(), "{name}");
            let two = format!(
                "GET / HTTP/1.1\r\nHost: h\r\n{name}: a\r\n{}: b\r\n\r\n",
                name.to_lowercase()
            );
            assert_eq!(status(two.as_bytes()), 400, "{name}");
        }
        // Fields that may repeat stay accepted.
        let h =
            ok(b"GET / HTTP/1.1\r\nHost: h\r\nVia: a\r\nVia: b\r\nCookie: x\r\nCookie: y\r\n\r\n");
        assert_eq!(h.headers().count(), 5);
    }

    #[test]
    fn simple_get() {
        let mut buf = BytesMut::from(
            &b"GET /index.html?a=1&b=2 HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent:  curl/8 \r\nAccept: */*\r\n\r\nNEXT"[..],
        );
        let h = parse(&mut buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(&buf[..], b"NEXT");
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.method_str(), "GET");
        assert_eq!(h.version, Version::Http11);
        assert_eq!(h.target(), b"/index.html?a=1&b=2");
        assert_eq!(h.path(), b"/index.html");
        assert_eq!(h.query(), Some(&b"a=1&b=2"[..]));
        assert_eq!(h.host(), Some(&b"example.com:8080"[..]));
        assert_eq!(h.header("user-agent"), Some(&b"curl/8"[..]));
        assert_eq!(h.header("ACCEPT"), Some(&b"*/*"[..]));
        assert_eq!(h.header("missing"), None);
        assert_eq!(h.line(), b"GET /index.html?a=1&b=2 HTTP/1.1");
        assert_eq!(h.framing, BodyFraming::None);
        assert!(h.keep_alive);
        assert!(!h.expect_continue);
        assert!(h.raw().ends_with(b"\r\n\r\n"));
        assert!(h.raw().starts_with(b"GET "));
        let names: Vec<&[u8]> = h.headers().map(|(n, _)| n).collect();
        assert_eq!(names, vec![&b"Host"[..], b"User-Agent", b"Accept"]);
    }

    #[test]
    fn empty_query_and_no_query() {
        let h = ok(b"GET /a? HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.path(), b"/a");
        assert_eq!(h.query(), Some(&b""[..]));
        let h = ok(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.query(), None);
    }

    #[test]
    fn header_first_occurrence_and_empty_value() {
        let h =
            ok(b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nx-a: 2\r\nX-Empty:\r\nX-Sp: \t \r\n\r\n");
        assert_eq!(h.header("x-a"), Some(&b"1"[..]));
        assert_eq!(h.header("x-empty"), Some(&b""[..]));
        assert_eq!(h.header("x-sp"), Some(&b""[..]));
        assert_eq!(h.headers().count(), 5);
    }

    #[test]
    fn body_stays_in_buffer() {
        let mut buf = BytesMut::from(
            &b"POST /u HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET"[..],
        );
        let h = parse(&mut buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(h.method, Method::Post);
        assert_eq!(h.framing, BodyFraming::Length(5));
        assert_eq!(&buf[..], b"helloGET");
    }

    #[test]
    fn pipelined_requests() {
        let mut buf = BytesMut::from(
            &b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\n"[..],
        );
        let l = Limits::default();
        assert_eq!(parse(&mut buf, &l).unwrap().unwrap().path(), b"/1");
        assert_eq!(parse(&mut buf, &l).unwrap().unwrap().path(), b"/2");
        assert!(buf.is_empty());
        assert!(parse(&mut buf, &l).unwrap().is_none());
    }

    #[test]
    fn incomplete_at_every_byte() {
        let full =
            b"\r\nPOST /x?y HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nConnection: close\r\n\r\n";
        for n in 0..full.len() {
            incomplete(&full[..n]);
        }
        let mut buf = BytesMut::from(&full[..]);
        buf.extend_from_slice(b"abc");
        let h = parse(&mut buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(h.path(), b"/x");
        assert!(!h.keep_alive);
        assert_eq!(&buf[..], b"abc");
    }

    #[test]
    fn incomplete_keeps_buffer() {
        let mut buf = BytesMut::from(&b"\r\nGET / HTTP/1.1\r\nHo"[..]);
        assert!(parse(&mut buf, &Limits::default()).unwrap().is_none());
        assert_eq!(&buf[..], b"\r\nGET / HTTP/1.1\r\nHo");
    }

    #[test]
    fn underscored_names_are_dropped_unless_allowed() {
        let req = b"GET / HTTP/1.1\r\nHost: h\r\nX_A: 1\r\nX-B: 2\r\n\r\n";
        let h = try_parse(req).unwrap().unwrap();
        assert_eq!(h.headers().count(), 2);
        assert!(h.header("x_a").is_none() && h.header("x-b").is_some());
        for l in [
            Limits {
                underscores: true,
                ..Limits::default()
            },
            Limits {
                ignore_invalid: false,
                ..Limits::default()
            },
        ] {
            let h = parse(&mut BytesMut::from(&req[..]), &l).unwrap().unwrap();
            assert_eq!(h.header("x_a"), Some(&b"1"[..]));
        }
    }

    #[test]
    fn leading_empty_lines() {
        let mut buf = BytesMut::from(&b"\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"[..]);
        let h = parse(&mut buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(h.line(), b"GET / HTTP/1.1");
        assert!(h.raw().starts_with(b"GET"));
        assert!(buf.is_empty());
        incomplete(b"\r\n\r\n\r");
        let mut many = b"\r\n".repeat(MAX_LEADING_EMPTY_LINES + 1);
        many.extend_from_slice(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(status(&many), 400);
        let mut lf = b"\n".repeat(MAX_LEADING_EMPTY_LINES + 1);
        lf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(status(&lf), 400);
        assert_eq!(status(b"\r\rGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    }

    #[test]
    fn trace_is_refused() {
        assert_eq!(status(b"TRACE / HTTP/1.1\r\nHost: h\r\n\r\n"), 405);
    }

    #[test]
    fn methods() {
        for (m, e) in [
            ("GET", Method::Get),
            ("HEAD", Method::Head),
            ("POST", Method::Post),
            ("PUT", Method::Put),
            ("DELETE", Method::Delete),
            ("OPTIONS", Method::Options),
            ("PATCH", Method::Patch),
            ("PROPFIND", Method::Other),
            ("get", Method::Other),
            ("X-M!#$", Method::Other),
        ] {
            let req = format!("{m} / HTTP/1.1\r\nHost: h\r\n\r\n");
            let h = ok(req.as_bytes());
            assert_eq!(h.method, e, "{m}");
            assert_eq!(h.method_str(), m);
        }
        // CONNECT maps, but its authority-form target is not accepted.
        assert_eq!(
            status(b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"),
            400
        );
        assert_eq!(
            ok(b"CONNECT / HTTP/1.1\r\nHost: h\r\n\r\n").method,
            Method::Connect
        );
        assert_eq!(status(b"G(ET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b" GET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    }

    #[test]
    fn request_line_syntax() {
        assert_eq!(status(b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1 \r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"POST /\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET /a b\r\n\r\n"), 400);
        assert_eq!(status(b"GET\r\n\r\n"), 400);
        assert_eq!(status(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), 400);
        assert_eq!(status(b"hello world\r\n\r\n"), 400);
        assert_eq!(status(b"GET /a\tb HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    }

    #[test]
    fn garbage_detected_before_complete() {
        assert_eq!(status(b"GET /\x01"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nBad Name: x\r\n"), 400);
        incomplete(b"GET / HTTP/1.1\r\n");
    }

    #[test]
    fn fragment_is_dropped() {
        let h = ok(b"GET /a.txt#frag HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.path(), b"/a.txt");
        assert_eq!(h.query(), None);
        assert_eq!(h.target(), b"/a.txt#frag");
        let h = ok(b"GET /a?x=1#f?g HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.path(), b"/a");
        assert_eq!(h.query(), Some(&b"x=1"[..]));
        let h = ok(b"GET /#?x HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.path(), b"/");
        assert_eq!(h.query(), None);
    }

    #[test]
    fn versions() {
        assert_eq!(ok(b"GET / HTTP/1.0\r\n\r\n").version, Version::Http10);
        assert_eq!(
            ok(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").version,
            Version::Http11
        );
        assert_eq!(status(b"GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
        assert_eq!(status(b"GET / HTTP/1.2\r\nHost: h\r\n\r\n"), 505);
        assert_eq!(status(b"GET / HTTP/0.9\r\nHost: h\r\n\r\n"), 505);
        assert_eq!(status(b"GET / HTTP/3.0\r\n"), 505);
        assert_eq!(status(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 505);
        assert_eq!(status(b"GET / HTTP/1.10\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET / http/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET / FOO\r\nHost: h\r\n\r\n"), 400);
        // No HTTP version at all: told apart (a broken HTTP/2 preface on an
        // http2 address); one that starts like one is a plain bad request.
        assert_eq!(
            try_parse(b"INVALID CONNECTION PREFACE\r\n\r\n").unwrap_err(),
            ParseError::NOT_HTTP1
        );
        assert_eq!(
            try_parse(b"GET / HTTP/1\r\nHost: h\r\n\r\n").unwrap_err(),
            BAD
        );
        // A space in the target: not a version problem.
        assert_eq!(status(b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET /a b HTTP/2.0\r\nHost: h\r\n\r\n"), 400);
        // Partial version that may still become valid.
        incomplete(b"GET / HTTP/1.");
        incomplete(b"GET / HTTP/2");
    }

    #[test]
    fn simple_requests_of_http_0_9() {
        for (req, rest) in [
            (&b"GET /a?b=1\n"[..], 0),
            (b"GET /a?b=1\r\nHost: h\r\n\r\n", 11),
            (b"\r\nGET /a?b=1\r\n", 0),
        ] {
            let mut buf = BytesMut::from(req);
            let h = parse(&mut buf, &Limits::default()).unwrap().unwrap();
            assert_eq!(h.version, Version::Http09);
            assert_eq!(h.method, Method::Get);
            assert_eq!(h.line(), b"GET /a?b=1");
            assert_eq!((h.path(), h.query()), (&b"/a"[..], Some(&b"b=1"[..])));
            assert!(h.header("host").is_none() && !h.keep_alive);
            // What follows the line is never read as part of it.
            assert_eq!(buf.len(), rest, "{req:?}");
        }
        let h = ok(b"GET http://example.com/x\n");
        assert_eq!(
            (h.version, h.host()),
            (Version::Http09, Some(&b"example.com"[..]))
        );
        assert_eq!(Version::Http09.as_str(), "");
        // Only GET; not before the line ends; no control bytes.
        assert_eq!(status(b"HEAD /\n"), 400);
        incomplete(b"GET /");
        assert_eq!(status(b"GET /\x01\n"), 400);
        assert_eq!(status(b"GET \n"), 400);
    }

    #[test]
    fn lines_end_with_crlf_or_a_bare_lf_never_a_bare_cr() {
        for req in [
            &b"GET /a?b HTTP/1.1\nHost: h\nX: 1\n\n"[..],
            b"GET /a?b HTTP/1.1\r\nHost: h\nX: 1\r\n\n",
            b"\n\r\nGET /a?b HTTP/1.1\nHost: h\r\nX: 1\n\r\n",
        ] {
            let h = try_parse(req).unwrap().expect("complete");
            assert_eq!(h.line(), b"GET /a?b HTTP/1.1");
            assert_eq!(h.header("host"), Some(&b"h"[..]));
            assert_eq!(h.header("x"), Some(&b"1"[..]));
            assert_eq!(h.path(), b"/a");
        }
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\rHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\n\r\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\nHost: h\nX: a\rb\n\n"), 400);
        // Detected before the head is complete.
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\rx"), 400);
        incomplete(b"GET / HTTP/1.1\n");
        incomplete(b"GET / HTTP/1.1\nHost: h\n");
    }

    #[test]
    fn nul_and_control_chars() {
        assert_eq!(status(b"GET /\0 HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\0b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nX\0: ab\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\0"), 400);
        for c in (0x01u8..0x20)
            .filter(|&c| c != b'\t' && c != b'\r' && c != b'\n')
            .chain([0x7f])
        {
            // Short values and values long enough for httparse's SIMD paths.
            for pad in [0, 40] {
                let mut req = b"GET / HTTP/1.1\r\nHost: h\r\nX: ".to_vec();
                req.extend(std::iter::repeat_n(b'a', pad));
                req.push(c);
                req.extend_from_slice(b"b\r\n\r\n");
                assert_eq!(status(&req), 400, "byte {c:#x} pad {pad}");
            }
        }
        // HTAB and obs-text are allowed in values.
        let h = ok(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\tb\xe9\r\n\r\n");
        assert_eq!(h.header("x"), Some(&b"a\tb\xe9"[..]));
    }

    #[test]
    fn header_name_syntax() {
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost : h\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost\t: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: h\r\nX(y): v\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\n Host: h\r\n\r\n"), 400);
    }

    #[test]
    fn obs_fold_rejected() {
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n"),
            400
        );
        assert_eq!(
            status(b"GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n\tb\r\n\r\n"),
            400
        );
    }

    #[test]
    fn too_many_headers() {
        let mut req = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for i in 0..MAX_HEADERS {
            req.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        let e = try_parse(&req).unwrap_err();
        assert_eq!(e, ParseError::HEADERS_TOO_LARGE);
        assert_eq!(e.reason, "Request Header Fields Too Large");

        let mut req = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        for i in 0..MAX_HEADERS - 1 {
            req.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        assert_eq!(ok(&req).headers().count(), MAX_HEADERS);
    }

    #[test]
    fn request_line_too_long() {
        let l = Limits::default();
        let mut line = b"GET /".to_vec();
        line.extend(std::iter::repeat_n(b'a', l.large_buffer_size));
        // Still incomplete, no CRLF yet.
        let e = try_parse(&line).unwrap_err();
        assert_eq!(e, ParseError::URI_TOO_LONG);
        assert_eq!(e.reason, "URI Too Long");
        line.extend_from_slice(b" HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(status(&line), 414);

        // Exactly at the limit is fine.
        let mut req = b"GET /".to_vec();
        let pad = l.large_buffer_size - b"GET / HTTP/1.1".len();
        req.extend(std::iter::repeat_n(b'a', pad));
        req.extend_from_slice(b" HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(ok(&req).line().len(), l.large_buffer_size);
    }

    #[test]
    fn header_line_too_long() {
        let l = Limits::default();
        let mut req = b"GET / HTTP/1.1\r\nHost: h\r\nX: ".to_vec();
        req.extend(std::iter::repeat_n(b'a', l.large_buffer_size));
        assert_eq!(status(&req), 431);
        req.extend_from_slice(b"\r\n\r\n");
        assert_eq!(status(&req), 431);

        let mut req = b"GET / HTTP/1.1\r\nHost: h\r\nX: ".to_vec();
        req.extend(std::iter::repeat_n(b'a', l.large_buffer_size - 3));
        req.extend_from_slice(b"\r\n\r\n");
        assert_eq!(ok(&req).header("x").unwrap().len(), l.large_buffer_size - 3);
    }

    #[test]
    fn long_lines_within_the_first_buffer_are_fine() {
        // nginx: a head that fits client_header_buffer_size may have lines
        // longer than a large buffer; only lines past it must fit one.
        let l = Limits {
            header_buffer: 4096,
            large_buffers: 4,
            large_buffer_size: 1024,
            ..Limits::default()
        };
        let uri = "a".repeat(3000);
        let req = format!("GET /{uri} HTTP/1.1\r\nHost: h\r\n\r\n");
        let h = parse(&mut BytesMut::from(req.as_bytes()), &l)
            .unwrap()
            .unwrap();
        assert_eq!(h.line().len(), 3000 + "GET / HTTP/1.1".len());
        let req = format!("GET / HTTP/1.1\r\nHost: h\r\nX: {uri}\r\n\r\n");
        assert!(
            parse(&mut BytesMut::from(req.as_bytes()), &l)
                .unwrap()
                .is_some()
        );
        // Incomplete and still inside the first buffer: wait for more.
        let part = format!("GET /{uri}");
        assert!(
            parse(&mut BytesMut::from(part.as_bytes()), &l)
                .unwrap()
                .is_none()
        );
        // A line that crosses the end of the first buffer must fit a large one.
        let long = "a".repeat(5000);
        let req = format!("GET /{long} HTTP/1.1\r\n\r\n");
        let e = parse(&mut BytesMut::from(req.as_bytes()), &l).unwrap_err();
        assert_eq!(e.status, 414);
        let req = format!("GET / HTTP/1.1\r\nHost: h\r\nX: {uri}\r\nY: {uri}\r\n\r\n");
        let e = parse(&mut BytesMut::from(req.as_bytes()), &l).unwrap_err();
        assert_eq!(e.status, 431);
    }

    #[test]
    fn whole_head_too_large() {
        let l = Limits {
            header_buffer: 64,
            large_buffers: 2,
            large_buffer_size: 100,
            ..Limits::default()
        };
        assert_eq!(l.max_head(), 200);
        let mut req = b"GET / HTTP/1.1\r\nHost: h\r\n".to_vec();
        while req.len() < 250 {
            req.extend_from_slice(b"X-Some-Header: some value\r\n");
        }
        req.extend_from_slice(b"\r\n");
        let e = parse(&mut BytesMut::from(&req[..]), &l).unwrap_err();
        assert_eq!(e.status, 431);
        // Incomplete but already at the limit.
        let e = parse(&mut BytesMut::from(&req[..200]), &l).unwrap_err();
        assert_eq!(e.status, 431);
        assert!(
            parse(&mut BytesMut::from(&req[..199]), &l)
                .unwrap()
                .is_none()
        );

        let big = Limits {
            header_buffer: 4096,
            large_buffers: 1,
            large_buffer_size: 100,
            ..Limits::default()
        };
        assert_eq!(big.max_head(), 4096);
        assert!(
            parse(&mut BytesMut::from(&req[..]), &big)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn default_limits() {
        let l = Limits::default();
        assert_eq!(
            (l.header_buffer, l.large_buffers, l.large_buffer_size),
            (1024, 4, 8192)
        );
        assert_eq!(l.max_head(), 32768);
    }

    #[test]
    fn content_length() {
        let h = ok(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Length(0));
        let h = ok(b"POST / HTTP/1.1\r\nHost: h\r\ncontent-length:  0042 \r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Length(42));
        let h = ok(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 18446744073709551615\r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Length(u64::MAX));
        for bad in [
            &b"18446744073709551616"[..],
            b"99999999999999999999999",
            b"",
            b"-1",
            b"+1",
            b"0x10",
            b"1 2",
            b"1,1",
            b"1, 1",
            b"1.0",
            b"a",
        ] {
            let mut req = b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: ".to_vec();
            req.extend_from_slice(bad);
            req.extend_from_slice(b"\r\n\r\n");
            assert_eq!(status(&req), 400, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"),
            400
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n"),
            400
        );
    }

    #[test]
    fn transfer_encoding() {
        let h = ok(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Chunked);
        let h = ok(b"POST / HTTP/1.1\r\nHost: h\r\ntransfer-encoding:  ChUnKeD \r\n\r\n");
        assert_eq!(h.framing, BodyFraming::Chunked);

        let te = |v: &str| {
            status(
                format!("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: {v}\r\n\r\n").as_bytes(),
            )
        };
        // Anything but `chunked` alone is refused with 501, as nginx.
        for v in [
            "xchunked",
            "chunked, gzip",
            "identity",
            "chunked, identity",
            "gzip",
            "",
            "chunked,",
            "chunked, chunked",
            ", chunked",
            "gzip, chunked",
            "deflate,chunked",
        ] {
            assert_eq!(te(v), 501, "{v}");
        }

        assert_eq!(
            status(
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            400
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"),
            400
        );
        assert_eq!(
            status(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
        assert_eq!(
            status(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            400
        );
    }

    #[test]
    fn host_rules() {
        assert_eq!(status(b"GET / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\\b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: ..\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400);
        let h = ok(b"GET / HTTP/1.0\r\n\r\n");
        assert_eq!(h.host(), None);
        let h = ok(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n");
        assert_eq!(h.host(), Some(&b"[::1]:80"[..]));
        // Empty, a lone dot, an empty label: 400, as nginx.
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost:\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: .\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: .:80\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a..b\r\n\r\n"), 400);
        assert_eq!(status(b"GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n"), 400);
        for fine in ["a.", "a.:80", "[::1].", "a:", "L"] {
            let req = format!("GET / HTTP/1.1\r\nHost: {fine}\r\n\r\n");
            assert_eq!(ok(req.as_bytes()).host(), Some(fine.as_bytes()));
        }
    }

    #[test]
    fn absolute_form() {
        let h = ok(b"GET http://example.com/p?q=1 HTTP/1.1\r\nHost: other\r\n\r\n");
        assert_eq!(h.host(), Some(&b"example.com"[..]));
        assert_eq!(h.path(), b"/p");
        assert_eq!(h.query(), Some(&b"q=1"[..]));
        assert_eq!(h.target(), b"http://example.com/p?q=1");
        assert_eq!(h.header("host"), Some(&b"other"[..]));

        let h = ok(b"GET http://example.com#f HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(h.host(), Some(&b"example.com"[..]));
        assert_eq!(h.path(), b"/");
        let h = ok(b"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(h.path(), b"/");
        assert_eq!(h.query(), None);
        let h = ok(b"GET HTTPS://example.com:8443?x HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert_eq!(h.host(), Some(&b"example.com:8443"[..]));
        assert_eq!(h.path(), b"/");
        assert_eq!(h.query(), Some(&b"x"[..]));
        let h = ok(b"GET http://example.com/ HTTP/1.0\r\n\r\n");
        assert_eq!(h.host(), Some(&b"example.com"[..]));

        // IP literals: IPv6 and IPvFuture characters.
        let h = ok(b"GET http://[v1F.a!$&'()*+,;=-_~:]/ HTTP/1.0\r\n\r\n");
        assert_eq!(h.host(), Some(&b"[v1F.a!$&'()*+,;=-_~:]"[..]));
        assert_eq!(status(b"GET http://[v1.a\"b]/ HTTP/1.0\r\n\r\n"), 400);
        assert_eq!(status(b"GET http://[v1.a%20]/ HTTP/1.0\r\n\r\n"), 400);
        assert_eq!(status(b"GET http:///p HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(
            status(b"GET http://u:p@h/p HTTP/1.1\r\nHost: h\r\n\r\n"),
            400
        );
        assert_eq!(status(b"GET ftp://h/p HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(
            status(b"GET http://h\\x/p HTTP/1.1\r\nHost: h\r\n\r\n"),
            400
        );
        // The authority as nginx's request-line parser takes it.
        for bad in [
            "a.:1.2",
            "1.2.3.4:80:80",
            "[::1].",
            "[::1].:80",
            "x[::1]",
            "[::1",
            "[::%]",
            ".",
            "a..b",
            "a:b",
        ] {
            let req = format!("GET http://{bad}/ HTTP/1.1\r\nHost: h\r\n\r\n");
            assert_eq!(status(req.as_bytes()), 400, "{bad}");
        }
        for fine in ["a.", "a.:2", "a:", "[::ffff:1.2.3.4]:5", "A-b_c.d", "[::g]"] {
            let req = format!("GET http://{fine}/ HTTP/1.1\r\nHost: h\r\n\r\n");
            assert_eq!(ok(req.as_bytes()).host(), Some(fine.as_bytes()));
        }
        // Host header is still required on HTTP/1.1.
        assert_eq!(status(b"GET http://h/p HTTP/1.1\r\n\r\n"), 400);
    }

    #[test]
    fn target_forms() {
        let h = ok(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(h.path(), b"*");
        assert_eq!(h.query(), None);
        assert_eq!(status(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET index.html HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET ?a HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        assert_eq!(status(b"GET *x HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
    }

    #[test]
    fn keep_alive() {
        assert!(ok(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").keep_alive);
        assert!(!ok(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!ok(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, CLOSE\r\n\r\n").keep_alive);
        assert!(ok(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(ok(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n").keep_alive);
        assert!(!ok(b"GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(ok(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(
            !ok(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n")
                .keep_alive
        );
    }

    #[test]
    fn expect_continue() {
        assert!(
            ok(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n")
                .expect_continue
        );
        assert!(
            ok(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n")
                .expect_continue
        );
        assert!(ok(b"GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n").expect_continue);
        assert!(
            ok(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n")
                .expect_continue
        );
        assert!(
            !ok(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
                .expect_continue
        );
        assert!(
            !ok(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: something\r\nContent-Length: 3\r\n\r\n")
                .expect_continue
        );
    }
}
