//! The head of a CGI-style response (RFC 3875 §6), as FastCGI applications and
//! CGI scripts write it before the body: header lines, a blank line. `Status:`
//! sets the status; `Location:` alone means a redirect (a local URI is an
//! internal redirect); framing headers are the server's business and dropped.

/// A parsed response head.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CgiHead {
    pub status: u16,
    /// Reason phrase from `Status:` ("404 Not Found" → "Not Found"), if given.
    pub reason: Option<String>,
    pub content_type: Option<String>,
    /// `Location:` value.
    pub location: Option<String>,
    /// `Content-Length:` as the application declared it.
    pub content_length: Option<u64>,
    /// Every other header in order, duplicates (Set-Cookie) kept.
    pub headers: Vec<(String, String)>,
}

impl CgiHead {
    /// A local redirect (RFC 3875 §6.2.2): `Location: /path` with no status of
    /// its own; the server handles it as an internal redirect.
    pub fn is_local_redirect(&self) -> bool {
        self.location.as_deref().is_some_and(|l| l.starts_with('/')) && self.status == 0
    }

    /// The reply's status: `Status:`, else 302 with a `Location:`, else 200.
    pub fn status(&self) -> u16 {
        match self.status {
            0 if self.location.is_some() => 302,
            0 => 200,
            s => s,
        }
    }
}

/// Why a head was refused (the request is answered with 502).
#[derive(Debug, PartialEq, Eq)]
pub struct BadHead(pub &'static str);

impl std::fmt::Display for BadHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Headers that describe the connection or the framing: never passed on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
];

/// Parse a head from the front of `buf`. `Ok(None)`: incomplete (read more,
/// unless `buf` already holds `max` bytes: then it is too big).
/// On success, also returns how many bytes of `buf` the head took.
/// The status is 0 when the application gave none (the caller picks 200 or 302).
pub fn parse(buf: &[u8], max: usize) -> Result<Option<(CgiHead, usize)>, BadHead> {
    let mut raw = [httparse::EMPTY_HEADER; 100];
    let (used, fields) = match httparse::parse_headers(buf, &mut raw) {
        Ok(httparse::Status::Complete((used, fields))) => (used, fields),
        Ok(httparse::Status::Partial) if buf.len() >= max => {
            return Err(BadHead("upstream sent too big header"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(BadHead("upstream sent too many headers"));
        }
        Err(_) => return Err(BadHead("upstream sent invalid header")),
    };
    if used > max {
        return Err(BadHead("upstream sent too big header"));
    }
    let mut head = CgiHead::default();
    for f in fields.iter() {
        let value = std::str::from_utf8(f.value)
            .map_err(|_| BadHead("upstream sent invalid header"))?
            .trim();
        if value.bytes().any(|b| b < 0x20 && b != b'\t') {
            return Err(BadHead("upstream sent invalid header"));
        }
        let name = f.name;
        if name.eq_ignore_ascii_case("status") {
            let (code, reason) = value.split_once(' ').unwrap_or((value, ""));
            head.status = code
                .parse()
                .ok()
                .filter(|c| (100..=999).contains(c))
                .ok_or(BadHead("upstream sent invalid status"))?;
            let reason = reason.trim();
            head.reason = (!reason.is_empty()).then(|| reason.to_string());
        } else if name.eq_ignore_ascii_case("content-type") {
            head.content_type = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("location") {
            head.location = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("content-length") {
            head.content_length = Some(
                value
                    .parse()
                    .map_err(|_| BadHead("upstream sent invalid Content-Length"))?,
            );
        } else if !HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            head.headers.push((name.to_string(), value.to_string()));
        }
    }
    Ok(Some((head, used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn php_style_head() {
        let b = b"X-Powered-By: PHP/8.2\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nStatus: 404 Not Found\r\nContent-type: text/html; charset=UTF-8\r\n\r\n<body>";
        let (h, used) = parse(b, 4096).unwrap().unwrap();
        assert_eq!(&b[used..], b"<body>");
        assert_eq!(h.status, 404);
        assert_eq!(h.reason.as_deref(), Some("Not Found"));
        assert_eq!(h.content_type.as_deref(), Some("text/html; charset=UTF-8"));
        let cookies: Vec<_> = h
            .headers
            .iter()
            .filter(|(n, _)| n == "Set-Cookie")
            .collect();
        assert_eq!(cookies.len(), 2);
    }

    #[test]
    fn bare_lf_lines_and_no_status() {
        let (h, used) = parse(b"Content-Type: text/plain\n\nbody", 4096)
            .unwrap()
            .unwrap();
        assert_eq!(used, 26);
        assert_eq!(h.status, 0);
        assert!(!h.is_local_redirect());
    }

    #[test]
    fn redirects() {
        let (h, _) = parse(b"Location: /other?x=1\r\n\r\n", 4096)
            .unwrap()
            .unwrap();
        assert!(h.is_local_redirect());
        let (h, _) = parse(b"Location: http://example.com/\r\n\r\n", 4096)
            .unwrap()
            .unwrap();
        assert!(!h.is_local_redirect());
        let (h, _) = parse(b"Status: 301\r\nLocation: /x\r\n\r\n", 4096)
            .unwrap()
            .unwrap();
        assert!(!h.is_local_redirect());
        assert_eq!(h.status, 301);
    }

    #[test]
    fn framing_headers_dropped() {
        let (h, _) = parse(
            b"Transfer-Encoding: chunked\r\nConnection: close\r\nContent-Length: 5\r\nX-A: b\r\n\r\n",
            4096,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.headers, vec![("X-A".to_string(), "b".to_string())]);
        assert_eq!(h.content_length, Some(5));
    }

    #[test]
    fn incomplete_too_big_and_invalid() {
        assert_eq!(parse(b"Content-Type: text/pl", 4096), Ok(None));
        assert!(parse(&[b'a'; 5000], 4096).is_err());
        assert!(parse(b"Status: abc\r\n\r\n", 4096).is_err());
        assert!(parse(b"Status: 42\r\n\r\n", 4096).is_err());
        assert!(parse(b"Bad Header\r\n\r\n", 4096).is_err());
        assert!(parse(b"Content-Length: -1\r\n\r\n", 4096).is_err());
    }
}
