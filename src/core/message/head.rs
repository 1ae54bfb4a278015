//! The request head as every protocol hands it to the pipeline: method,
//! version, target, header fields and body framing. Header positions are
//! offsets into the frozen head, so no header is copied. The HTTP/1 parser
//! (`http::h1::parse`) builds it; HTTP/2 builds it through that parser too.

use bytes::{Bytes, BytesMut};
use std::fmt;
use std::ops::Range;

/// HTTP protocol version of a request, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// A simple request (`GET /path` alone on its line): no header fields
    /// either way, the answer is its body, then the connection closes.
    Http09,
    Http10,
    Http11,
    /// A request that came over HTTP/2 (see [`RequestHead::into_version`]).
    Http2,
    /// A request that came over HTTP/3.
    Http3,
}

impl Version {
    /// "HTTP/1.0", "HTTP/1.1", "HTTP/2.0"; empty for HTTP/0.9, which names
    /// no version (`$server_protocol` is empty then, as nginx's).
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http09 => "",
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
            Version::Http2 => "HTTP/2.0",
            Version::Http3 => "HTTP/3.0",
        }
    }

    /// HTTP/2 or HTTP/3: a request on a stream of a multiplexed connection,
    /// whose fields have no connection-specific meaning and no folding.
    pub fn multiplexed(self) -> bool {
        matches!(self, Version::Http2 | Version::Http3)
    }
}

/// Request method; any other valid token is `Other` (see `RequestHead::method_str`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    Trace,
    Connect,
    Other,
}

impl Method {
    /// The method's token (empty for `Other`).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Trace => "TRACE",
            Method::Connect => "CONNECT",
            Method::Other => "",
        }
    }

    /// The method a token names (case-sensitive, as methods are).
    pub fn from_token(t: &[u8]) -> Method {
        match t {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"PATCH" => Method::Patch,
            b"TRACE" => Method::Trace,
            b"CONNECT" => Method::Connect,
            _ => Method::Other,
        }
    }
}

/// How the request body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    None,
    Length(u64),
    Chunked,
}

/// A parse failure: the status to answer with (the connection is then closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub status: u16,
    pub reason: &'static str,
}

impl ParseError {
    pub const BAD_REQUEST: ParseError = ParseError {
        status: 400,
        reason: "Bad Request",
    };
    pub const URI_TOO_LONG: ParseError = ParseError {
        status: 414,
        reason: "URI Too Long",
    };
    pub const HEADERS_TOO_LARGE: ParseError = ParseError {
        status: 431,
        reason: "Request Header Fields Too Large",
    };
    pub const NOT_ALLOWED: ParseError = ParseError {
        status: 405,
        reason: "Not Allowed",
    };
    pub const NOT_IMPLEMENTED: ParseError = ParseError {
        status: 501,
        reason: "Not Implemented",
    };
    pub const VERSION_NOT_SUPPORTED: ParseError = ParseError {
        status: 505,
        reason: "HTTP Version Not Supported",
    };
    /// A complete first line whose last word is not an HTTP version at all.
    pub const NOT_HTTP1: ParseError = ParseError {
        status: 400,
        reason: "Bad Request (no HTTP version)",
    };
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.reason)
    }
}

impl std::error::Error for ParseError {}

/// Where a parser found the parts of a head, as ranges of its bytes.
#[derive(Clone, Debug, Default)]
pub struct Spans {
    /// End of the method, which starts the head.
    pub method_end: usize,
    /// End of the request line, before its CRLF.
    pub line_end: usize,
    /// The request-target as sent.
    pub target: Range<usize>,
    /// Target up to '?' (for absolute-form, after the authority); empty reads
    /// as "/".
    pub path: Range<usize>,
    /// After the first '?'.
    pub query: Option<Range<usize>>,
    /// Authority of an absolute-form target, else the Host header's value.
    pub host: Option<Range<usize>>,
    /// Each header field as (name, value).
    pub headers: Vec<(Range<usize>, Range<usize>)>,
}

/// A parsed request head. Header names and values are ranges into `raw`.
#[derive(Clone, Debug)]
pub struct RequestHead {
    raw: Bytes,
    pub method: Method,
    pub version: Version,
    target: Range<usize>,
    headers: Vec<(Range<usize>, Range<usize>)>,
    pub framing: BodyFraming,
    /// HTTP/1.1: true unless "Connection: close"; HTTP/1.0: only with "Connection: keep-alive".
    pub keep_alive: bool,
    /// "Expect: 100-continue" on an HTTP/1.1 request with a body.
    pub expect_continue: bool,
    method_end: usize,
    line_end: usize,
    path: Range<usize>,
    query: Option<Range<usize>>,
    host: Option<Range<usize>>,
}

impl RequestHead {
    /// The head a parser checked: `raw` is the whole head, request line
    /// through the blank line, and `spans` lie within it.
    pub fn new(
        raw: Bytes,
        spans: Spans,
        method: Method,
        version: Version,
        framing: BodyFraming,
        keep_alive: bool,
        expect_continue: bool,
    ) -> RequestHead {
        let Spans {
            method_end,
            line_end,
            target,
            path,
            query,
            host,
            headers,
        } = spans;
        RequestHead {
            raw,
            method,
            version,
            target,
            headers,
            framing,
            keep_alive,
            expect_continue,
            method_end,
            line_end,
            path,
            query,
            host,
        }
    }

    /// This head, checked as HTTP/1.1, as the head of an HTTP/2 or HTTP/3
    /// request: the version is `version` and the request line reads
    /// "HTTP/2.0" or "HTTP/3.0" (`$request`, `$server_protocol`). They have
    /// the length of "HTTP/1.1": the offsets stay.
    pub fn into_version(mut self, version: Version) -> RequestHead {
        debug_assert!(self.line().ends_with(b"HTTP/1.1"));
        let mut raw = self
            .raw
            .try_into_mut()
            .unwrap_or_else(|b| BytesMut::from(&b[..]));
        raw[self.line_end - 8..self.line_end].copy_from_slice(version.as_str().as_bytes());
        self.raw = raw.freeze();
        self.version = version;
        self
    }

    /// The whole head, request line through the blank line.
    pub fn raw(&self) -> &Bytes {
        &self.raw
    }

    /// The method as sent, e.g. `b"GET"`.
    pub fn method_bytes(&self) -> &[u8] {
        &self.raw[..self.method_end]
    }

    /// The method as sent, e.g. "GET".
    pub fn method_str(&self) -> &str {
        match self.method {
            // httparse only accepts token characters here, which are ASCII.
            Method::Other => std::str::from_utf8(&self.raw[..self.method_end]).unwrap_or(""),
            known => known.as_str(),
        }
    }

    /// The request-target as sent.
    pub fn target(&self) -> &[u8] {
        &self.raw[self.target.clone()]
    }

    /// Target up to '?'; for absolute-form the path part ("/" when empty);
    /// "*" for asterisk-form.
    pub fn path(&self) -> &[u8] {
        if self.path.is_empty() {
            b"/"
        } else {
            &self.raw[self.path.clone()]
        }
    }

    /// The part after the first '?', None if there is no '?'.
    pub fn query(&self) -> Option<&[u8]> {
        self.query.clone().map(|r| &self.raw[r])
    }

    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        let name = name.as_bytes();
        self.headers
            .iter()
            .find(|(n, _)| self.raw[n.clone()].eq_ignore_ascii_case(name))
            .map(|(_, v)| &self.raw[v.clone()])
    }

    /// All headers in order, as (name, value).
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.headers
            .iter()
            .map(|(n, v)| (&self.raw[n.clone()], &self.raw[v.clone()]))
    }

    /// Authority of an absolute-form target, else the Host header; as sent (port kept).
    pub fn host(&self) -> Option<&[u8]> {
        self.host.clone().map(|r| &self.raw[r])
    }

    /// The request line without CRLF.
    pub fn line(&self) -> &[u8] {
        &self.raw[..self.line_end]
    }

    /// Stand-in for a request that could not be parsed, so it can still be
    /// logged: its request line is the first line of what arrived (at most 2 KiB).
    pub fn unparsed(buffered: &[u8]) -> RequestHead {
        let line = &buffered[..buffered.len().min(2048)];
        let line_end = memchr::memchr2(b'\r', b'\n', line).unwrap_or(line.len());
        RequestHead {
            raw: Bytes::copy_from_slice(&line[..line_end]),
            method: Method::Other,
            version: Version::Http11,
            target: 0..0,
            headers: Vec::new(),
            framing: BodyFraming::None,
            keep_alive: false,
            expect_continue: false,
            method_end: 0,
            line_end,
            path: 0..0,
            query: None,
            host: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unparsed_keeps_the_first_line() {
        let h = RequestHead::unparsed(b"GARBAGE LINE\r\nHost: x\r\n");
        assert_eq!(h.line(), b"GARBAGE LINE");
        assert_eq!(h.method_str(), "");
        assert!(h.header("host").is_none());
        assert_eq!(RequestHead::unparsed(&[b'a'; 5000]).line().len(), 2048);
    }

    #[test]
    fn error_display() {
        assert_eq!(ParseError::BAD_REQUEST.to_string(), "400 Bad Request");
        assert_eq!(Version::Http11.as_str(), "HTTP/1.1");
    }
}
