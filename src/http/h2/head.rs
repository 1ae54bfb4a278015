//! The head of an HTTP/2 request: the `http` crate's request parts written
//! out as an HTTP/1.1 head and checked by the HTTP/1 parser.

use crate::core::message::head::{BodyFraming, ParseError, RequestHead};
use crate::http::h1::parse::{Limits, parse};
use bytes::BytesMut;

/// The head of a request that came over HTTP/2, checked as an HTTP/1.1 head
/// would be: the pseudo-headers and fields are written out as an HTTP/1.1 head
/// (`:authority` as Host, split Cookie fields joined with "; " as RFC 9113
/// §8.2.3 asks) and parsed by [`parse`] with the same `limits`, so both
/// protocols meet one set of rules. The version then reads HTTP/2.0 (`$request`,
/// `$server_protocol`). `body`: the stream did not end with its HEADERS; a body
/// without content-length is framed as chunked (its length is unknown).
pub fn from_h2(
    parts: &http::request::Parts,
    body: bool,
    limits: &Limits,
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
    // Dropped first, so the head alone owns its bytes and `into_http2`
    // rewrites them in place.
    drop(text);
    let mut head = head.into_http2();
    head.keep_alive = true;
    head.framing = match head.framing {
        BodyFraming::None if body => BodyFraming::Chunked,
        BodyFraming::Length(n) if n > 0 && !body => return Err(ParseError::BAD_REQUEST),
        f => f,
    };
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::message::head::Version;

    fn h2(req: http::request::Builder, body: bool) -> Result<RequestHead, ParseError> {
        let (parts, ()) = req.body(()).unwrap().into_parts();
        from_h2(&parts, body, &Limits::default())
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
