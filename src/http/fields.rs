//! What HTTP/2 and HTTP/3 share: both carry heads as the `http` crate's
//! parts (the h2 and h3 crates decode and encode them). A request's parts
//! are written out as an HTTP/1.1 head and checked by the HTTP/1 parser; a
//! [`Response`] becomes response parts without the connection-specific
//! fields neither protocol allows.

use crate::core::clock;
use crate::core::message::head::{BodyFraming, ParseError, RequestHead, Version};
use crate::core::message::response::{OwnFields, Response, Value, server_name};
use crate::core::request::Fields;
use crate::http::h1::parse::{Limits, parse};
use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};

/// A request whose head `request_head` refused: logged, and the line the
/// error answer and the access log show for it (`version`: "HTTP/2.0" or
/// "HTTP/3.0").
pub fn refused_head(parts: &http::request::Parts, e: &ParseError, version: &str) -> RequestHead {
    crate::error_log!(
        Info,
        "client sent invalid request: {} ({})",
        e.reason,
        e.status
    );
    let line = format!("{} {} {version}", parts.method, parts.uri);
    RequestHead::unparsed(line.as_bytes())
}

/// The head of a request that came over HTTP/2 or HTTP/3 (`version`),
/// checked as an HTTP/1.1 head would be: the pseudo-headers and fields are
/// written out as an HTTP/1.1 head (`:authority` as Host, split Cookie fields
/// joined with "; " as RFC 9113 §8.2.3 and RFC 9114 §4.2.1 ask) and parsed by
/// [`parse`] with the same `limits`, so every protocol meets one set of
/// rules. The version then reads HTTP/2.0 or HTTP/3.0 (`$request`,
/// `$server_protocol`). `body`: the stream did not end with its HEADERS; a
/// body without content-length is framed as chunked (its length is unknown).
pub fn request_head(
    parts: &http::request::Parts,
    body: bool,
    limits: &Limits,
    version: Version,
) -> Result<RequestHead, ParseError> {
    let authority = parts.uri.authority().map(|a| a.as_str());
    let target = match parts.uri.path_and_query() {
        Some(p) => p.as_str(),
        None if parts.method == http::Method::CONNECT => authority.unwrap_or(""),
        None => "/",
    };
    let mut text = BytesMut::with_capacity(256);
    for piece in [parts.method.as_str(), " ", target, " HTTP/1.1\r\n"] {
        text.extend_from_slice(piece.as_bytes());
    }
    if let Some(a) = authority {
        text.extend_from_slice(b"Host: ");
        text.extend_from_slice(a.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    let mut cookies = parts.headers.get_all(http::header::COOKIE).iter();
    if let Some(first) = cookies.next() {
        text.extend_from_slice(b"Cookie: ");
        text.extend_from_slice(first.as_bytes());
        for c in cookies {
            text.extend_from_slice(b"; ");
            text.extend_from_slice(c.as_bytes());
        }
        text.extend_from_slice(b"\r\n");
    }
    for (name, value) in &parts.headers {
        if name == http::header::COOKIE || (authority.is_some() && name == http::header::HOST) {
            continue;
        }
        text.extend_from_slice(name.as_str().as_bytes());
        text.extend_from_slice(b": ");
        text.extend_from_slice(value.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    text.extend_from_slice(b"\r\n");
    let head = parse(&mut text, limits)?.ok_or(ParseError::BAD_REQUEST)?;
    // Dropped first, so the head alone owns its bytes and `into_version`
    // rewrites them in place.
    drop(text);
    let mut head = head.into_version(version);
    head.keep_alive = true;
    head.framing = match head.framing {
        BodyFraming::None if body => BodyFraming::Chunked,
        BodyFraming::Length(n) if n > 0 && !body => return Err(ParseError::BAD_REQUEST),
        f => f,
    };
    Ok(head)
}

/// Fields that describe an HTTP/1 connection: never sent on a stream
/// (RFC 9113 §8.2.2, RFC 9114 §4.2).
pub fn connection_specific(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
    ]
    .iter()
    .any(|n| name.eq_ignore_ascii_case(n))
}

/// The response head, and its size as HTTP/1 would write it (`$bytes_sent`
/// counts it so).
pub fn response_head(r: &Response, tokens: bool, bodiless: bool) -> (http::Response<()>, u64) {
    let mut h = http::Response::new(());
    *h.status_mut() = http::StatusCode::from_u16(r.status).unwrap_or(http::StatusCode::OK);
    let mut len = 17;
    // Room for every field at once: growing the map rehashes it.
    let m = h.headers_mut();
    m.reserve(4 + r.headers.len());
    let mut add = |name: HeaderName, v: HeaderValue| {
        len += name.as_str().len() + v.len() + 4;
        m.append(name, v);
    };
    match OwnFields::of(r, false) {
        None => add(
            http::header::SERVER,
            HeaderValue::from_static(server_name(tokens)),
        ),
        Some(v) => {
            if let Some(v) = v.and_then(|v| HeaderValue::from_str(v).ok()) {
                add(http::header::SERVER, v);
            }
        }
    }
    match OwnFields::of(r, true) {
        None => {
            if let Some(d) = http_date() {
                add(http::header::DATE, d);
            }
        }
        Some(v) => {
            if let Some(v) = v.and_then(|v| HeaderValue::from_str(v).ok()) {
                add(http::header::DATE, v);
            }
        }
    }
    if let Some(ct) = &r.content_type
        && let Ok(v) = value(ct)
    {
        add(http::header::CONTENT_TYPE, v);
    }
    if !bodiless && let Some(n) = r.body.size() {
        add(http::header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    each_field(&r.headers, add);
    (h, len as u64 + 2)
}

/// `fields` as a stream carries them: the connection-specific ones left
/// out, each given to `add`.
fn each_field(fields: &Fields, mut add: impl FnMut(HeaderName, HeaderValue)) {
    for (name, v) in fields {
        if connection_specific(name) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (header_name(name), value(v)) {
            add(n, v);
        }
    }
}

/// A 103 (Early Hints) head with `fields`; `None` when none is left to send.
pub fn early_hints_head(fields: &Fields) -> Option<http::Response<()>> {
    let mut h = http::Response::new(());
    *h.status_mut() = http::StatusCode::EARLY_HINTS;
    let m = h.headers_mut();
    each_field(fields, |n, v| {
        m.append(n, v);
    });
    (!h.headers().is_empty()).then_some(h)
}

/// A field's name for a header map. A name already in lower case (as HTTP/2
/// and HTTP/3 upstreams send them) is referred to, not copied.
fn header_name(name: &'static str) -> Result<HeaderName, http::header::InvalidHeaderName> {
    if let Some(n) = known_name(name) {
        return Ok(n);
    }
    match is_lower_token(name.as_bytes()) {
        true => Ok(HeaderName::from_static(name)),
        false => HeaderName::from_bytes(name.as_bytes()),
    }
}

/// RFC 9110's tchar: a byte of a token (a field name, a method).
pub fn is_tchar(b: u8) -> bool {
    TCHAR[b as usize]
}

/// An RFC 9110 token: a field name, a method.
pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// A token in lower case, as HTTP/2 and HTTP/3 field names are.
pub fn is_lower_token(s: &[u8]) -> bool {
    is_token(s) && !s.iter().any(u8::is_ascii_uppercase)
}

static TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        i += 1;
    }
    t
};

/// The field names responses carry most, as the server's code spells them,
/// without parsing them.
fn known_name(name: &str) -> Option<HeaderName> {
    use http::header;
    Some(match name {
        "Last-Modified" => header::LAST_MODIFIED,
        "ETag" => header::ETAG,
        "Accept-Ranges" => header::ACCEPT_RANGES,
        "Expires" => header::EXPIRES,
        "Cache-Control" => header::CACHE_CONTROL,
        "Location" => header::LOCATION,
        "Content-Encoding" => header::CONTENT_ENCODING,
        "Content-Range" => header::CONTENT_RANGE,
        "Vary" => header::VARY,
        _ => return None,
    })
}

/// A field value, checked as `HeaderValue::from_str` checks it; a static
/// text is not copied.
fn value(v: &Value) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    match v {
        Value::Static(s) => HeaderValue::from_maybe_shared(Bytes::from_static(s.as_bytes())),
        v => HeaderValue::from_str(v.as_str()),
    }
}

thread_local! {
    /// The last `Date` value made, shared by the responses of its second.
    static DATE: std::cell::RefCell<Option<HeaderValue>> = const { std::cell::RefCell::new(None) };
}

/// The current `Date` value.
fn http_date() -> Option<HeaderValue> {
    clock::with_http_date(|now| {
        DATE.with_borrow_mut(|last| {
            if let Some(d) = last.as_ref().filter(|d| d.as_bytes() == now.as_bytes()) {
                return Some(d.clone());
            }
            let d = HeaderValue::from_maybe_shared(Bytes::copy_from_slice(now.as_bytes())).ok()?;
            *last = Some(d.clone());
            Some(d)
        })
    })
}

/// Trailer fields as a header map (those whose name or value is not valid
/// are left out).
pub fn trailer_map(fields: Vec<(&'static str, String)>) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (name, v) in fields {
        if let (Ok(n), Ok(v)) = (header_name(name), HeaderValue::from_str(&v)) {
            map.append(n, v);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h2(req: http::request::Builder, body: bool) -> Result<RequestHead, ParseError> {
        let (parts, ()) = req.body(()).unwrap().into_parts();
        request_head(&parts, body, &Limits::default(), Version::Http2)
    }

    #[test]
    fn field_names_are_referred_to_or_lowered() {
        assert_eq!(header_name("x-got-test").unwrap(), "x-got-test");
        assert_eq!(header_name("grpc-status").unwrap().as_str(), "grpc-status");
        assert_eq!(header_name("X-Got-Test").unwrap(), "x-got-test");
        assert_eq!(header_name("ETag").unwrap(), http::header::ETAG);
        assert!(header_name("bad name").is_err());
        assert!(header_name("").is_err());
    }

    #[test]
    fn pseudo_headers_become_an_http2_head() {
        let h = h2(
            http::Request::builder()
                .method("GET")
                .uri("http://Example.org:8080/a/b?x=1")
                .header("cookie", "a=1")
                .header("accept", "*/*")
                .header("cookie", "b=2"),
            false,
        )
        .unwrap();
        assert_eq!(h.line(), b"GET /a/b?x=1 HTTP/2.0");
        assert_eq!(h.version, Version::Http2);
        assert_eq!(h.version.as_str(), "HTTP/2.0");
        assert_eq!(h.host(), Some(&b"Example.org:8080"[..]));
        assert_eq!(h.path(), b"/a/b");
        assert_eq!(h.query(), Some(&b"x=1"[..]));
        // Split cookies are joined (RFC 9113 §8.2.3).
        assert_eq!(h.header("cookie"), Some(&b"a=1; b=2"[..]));
        assert_eq!(h.header("accept"), Some(&b"*/*"[..]));
        assert_eq!(h.framing, BodyFraming::None);
    }

    #[test]
    fn body_framing_and_checks() {
        let post = || http::Request::builder().method("POST").uri("http://x/up");
        // A body without content-length has an unknown length.
        assert_eq!(h2(post(), true).unwrap().framing, BodyFraming::Chunked);
        let h = h2(post().header("content-length", "5"), true).unwrap();
        assert_eq!(h.framing, BodyFraming::Length(5));
        // A declared body on a stream that already ended.
        assert!(h2(post().header("content-length", "5"), false).is_err());
        assert!(h2(post().header("content-length", "x"), true).is_err());
        // The same limits as HTTP/1: an oversized field is 431.
        let big = "v".repeat(9000);
        let e = h2(post().header("x-big", big.as_str()), false).unwrap_err();
        assert_eq!(e.status, 431);
        // No :authority and no Host: 400, as for HTTP/1.1.
        let e = h2(http::Request::builder().uri("/"), false).unwrap_err();
        assert_eq!(e.status, 400);
    }
}
