//! Parsing an upstream's HTTP/1.x response head, as strictly as client
//! requests: the status, the headers to pass on (hop-by-hop ones and those the
//! Connection header names removed, RFC 9110 §7.6.1), how the body is framed,
//! and whether the upstream connection can be reused.

use bytes::{Buf, BytesMut};

/// How the upstream delimits the body that follows the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    None,
    Length(u64),
    Chunked,
    /// Until the upstream closes the connection.
    Close,
}

/// Where a piece of the head lies in [`UpstreamHead::text`]: byte offsets.
pub type Span = (u32, u32);

#[derive(Debug, PartialEq, Eq)]
pub struct UpstreamHead {
    pub status: u16,
    /// HTTP/1.1 (true) or HTTP/1.0.
    pub http11: bool,
    /// The head from the reason phrase (or from the first header when the
    /// reason is empty or not ASCII) to its end, in one allocation: the
    /// reason and the headers are spans of it, and the response's header
    /// values share it (`Value::Slice`) instead of each being copied.
    pub text: std::sync::Arc<str>,
    reason: Span,
    /// End-to-end headers in order, duplicates kept: (name, value).
    pub fields: Vec<(Span, Span)>,
    pub framing: Framing,
    /// The connection may carry another request after this body.
    pub reusable: bool,
    /// 101 Switching Protocols: the connection becomes a tunnel.
    pub upgrade: bool,
}

impl UpstreamHead {
    /// The text of a span of [`UpstreamHead::text`].
    pub fn at(&self, (a, b): Span) -> &str {
        &self.text[a as usize..b as usize]
    }

    pub fn reason(&self) -> &str {
        self.at(self.reason)
    }

    /// The end-to-end headers, in order.
    pub fn headers(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.fields.iter().map(|&(n, v)| (self.at(n), self.at(v)))
    }

    /// The first field named `name` (caseless); only names of its length
    /// are compared.
    pub fn header(&self, name: &str) -> Option<&str> {
        field(&self.text, &self.fields, name)
    }

    /// The head of a reply that came as fields, not HTTP/1 text (an
    /// HTTP/2 reply): its text is `name: value` lines, without a reason.
    /// The body's framing and the connection's reuse are the stream's, not
    /// the head's: `Framing::Close`, not reusable.
    pub fn of_fields<'f>(status: u16, fields: impl Iterator<Item = (&'f str, &'f [u8])>) -> Self {
        let mut text = String::with_capacity(256);
        let mut spans = Vec::with_capacity(fields.size_hint().0);
        for (n, v) in fields {
            let a = text.len() as u32;
            text.push_str(n);
            let b = text.len() as u32;
            text.push_str(": ");
            let c = text.len() as u32;
            text.push_str(&String::from_utf8_lossy(v));
            let d = text.len() as u32;
            text.push_str("\r\n");
            spans.push(((a, b), (c, d)));
        }
        UpstreamHead {
            status,
            http11: true,
            text: text.into(),
            reason: (0, 0),
            fields: spans,
            framing: Framing::Close,
            reusable: false,
            upgrade: false,
        }
    }
}

/// The value of the first of `fields` (spans of `text`) named `name`
/// (caseless), comparing only names of its length.
pub fn field<'t>(text: &'t str, fields: &[(Span, Span)], name: &str) -> Option<&'t str> {
    let at = |(a, b): Span| &text[a as usize..b as usize];
    fields
        .iter()
        .find(|&&(n, _)| (n.1 - n.0) as usize == name.len() && at(n).eq_ignore_ascii_case(name))
        .map(|&(_, v)| at(v))
}

/// An invalid upstream reply (answered with 502, and `invalid_header` for
/// proxy_next_upstream).
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid(pub &'static str);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Take a response head off the front of `buf`; `Ok(None)` when more bytes are
/// needed (an error once `buf` holds `max` bytes). `head_request`: the request
/// was HEAD, so no body follows whatever the headers say. Interim 1xx heads
/// are skipped (RFC 9110 §15.2), but 101 and, with `hints`, 103 (Early
/// Hints), which are returned as any head: the final one follows a 103.
pub fn parse(
    buf: &mut BytesMut,
    max: usize,
    head_request: bool,
    hints: bool,
) -> Result<Option<UpstreamHead>, Invalid> {
    loop {
        let Some(h) = parse_one(buf, max, head_request)? else {
            return Ok(None);
        };
        if (100..200).contains(&h.status) && h.status != 101 && !(hints && h.status == 103) {
            continue;
        }
        return Ok(Some(h));
    }
}

fn parse_one(
    buf: &mut BytesMut,
    max: usize,
    head_request: bool,
) -> Result<Option<UpstreamHead>, Invalid> {
    // httparse finds the end of the head (the first empty line, after CRLF
    // or a bare LF) as it parses, so the head is scanned once.
    // Uninitialised: nothing to clear for the 128 slots on every reply.
    let mut fields = [const { std::mem::MaybeUninit::uninit() }; 128];
    let mut resp = httparse::Response::new(&mut []);
    let end = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut resp,
        buf,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= max => {
            return Err(Invalid("upstream sent too big header"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Invalid("upstream sent too many headers"));
        }
        Err(_) => return Err(Invalid("upstream sent invalid header")),
    };
    if end > max {
        return Err(Invalid("upstream sent too big header"));
    }
    let raw = &buf[..end];
    // httparse refuses a NUL, and a CR that is not part of a CRLF, in the
    // status line and the fields; it skips empty lines before the status
    // line, where a bare LF is refused as nginx refuses it.
    if raw.first() == Some(&b'\n') {
        return Err(Invalid("upstream sent invalid header"));
    }
    let status = resp
        .code
        .ok_or(Invalid("upstream sent no valid HTTP/1.0 header"))?;
    if !(100..=599).contains(&status) {
        return Err(Invalid("upstream sent invalid status"));
    }
    let http11 = resp.version == Some(1);
    // One UTF-8 check and one copy for the whole head: from the reason (ASCII
    // when httparse gives it) or else from the first header line to the end.
    let reason = resp.reason.unwrap_or("");
    let at = |s: &[u8]| s.as_ptr() as usize - raw.as_ptr() as usize;
    let from = if reason.is_empty() {
        memchr::memchr(b'\n', raw).map_or(end, |i| i + 1)
    } else {
        at(reason.as_bytes())
    };
    let text: std::sync::Arc<str> = std::str::from_utf8(&raw[from..])
        .map_err(|_| Invalid("upstream sent invalid header"))?
        .into();
    let span = |s: &[u8]| {
        let a = (at(s) - from) as u32;
        (a, a + s.len() as u32)
    };
    let reason = if reason.is_empty() {
        (0, 0)
    } else {
        span(reason.as_bytes())
    };

    let mut connection_tokens: Vec<&str> = Vec::new();
    // End-to-end headers (those the Connection header names are removed below).
    let mut fields: Vec<(Span, Span)> = Vec::with_capacity(resp.headers.len());
    let mut close = !http11;
    let mut chunked = false;
    let mut te_seen = false;
    let mut length: Option<u64> = None;
    for f in resp.headers.iter() {
        let (n, vs) = (span(f.name.as_bytes()), span(f.value));
        let v = &text[vs.0 as usize..vs.1 as usize];
        let is = |s: &str| f.name.eq_ignore_ascii_case(s);
        match f.name.len() {
            10 if is("connection") => {
                for t in v.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                    if t.eq_ignore_ascii_case("close") {
                        close = true;
                    } else if t.eq_ignore_ascii_case("keep-alive") {
                        // Keep-Alive is hop-by-hop anyway: nothing to remove.
                        close &= http11;
                    } else {
                        connection_tokens.push(t);
                    }
                }
                continue;
            }
            17 if is("transfer-encoding") => {
                if te_seen || !http11 {
                    return Err(Invalid("upstream sent invalid Transfer-Encoding"));
                }
                te_seen = true;
                let last = v.rsplit(',').next().unwrap_or("").trim();
                if !last.eq_ignore_ascii_case("chunked") || v.split(',').count() > 1 {
                    return Err(Invalid("upstream sent unsupported Transfer-Encoding"));
                }
                chunked = true;
                continue;
            }
            14 if is("content-length") => {
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(Invalid("upstream sent invalid Content-Length"));
                }
                let n: u64 = v
                    .parse()
                    .map_err(|_| Invalid("upstream sent invalid Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Invalid("upstream sent duplicate Content-Length"));
                }
                length = Some(n);
                continue;
            }
            2 | 7 | 10 | 16 if HOP_BY_HOP.iter().any(|h| is(h)) => continue,
            _ => {}
        }
        fields.push((n, vs));
    }
    if !connection_tokens.is_empty() {
        fields.retain(|&(n, _)| {
            let n = &text[n.0 as usize..n.1 as usize];
            !connection_tokens.iter().any(|t| t.eq_ignore_ascii_case(n))
        });
    }
    if chunked && length.is_some() {
        return Err(Invalid(
            "upstream sent both Content-Length and Transfer-Encoding",
        ));
    }
    let upgrade = status == 101;
    let framing = if head_request
        || upgrade
        || (100..200).contains(&status)
        || status == 204
        || status == 304
    {
        Framing::None
    } else if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::Close
    };
    buf.advance(end);
    Ok(Some(UpstreamHead {
        status,
        http11,
        text,
        reason,
        fields,
        reusable: !close && framing != Framing::Close && !upgrade,
        framing,
        upgrade,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(raw: &str) -> Result<Option<UpstreamHead>, Invalid> {
        parse(&mut BytesMut::from(raw.as_bytes()), 8192, false, false)
    }

    #[test]
    fn keep_alive_with_length() {
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nSet-Cookie: a\r\nSet-Cookie: b\r\n\r\nhello"[..]);
        let h = parse(&mut b, 8192, false, false).unwrap().unwrap();
        assert_eq!(
            (h.status, h.framing, h.reusable),
            (200, Framing::Length(5), true)
        );
        assert_eq!(&b[..], b"hello");
        assert_eq!(h.headers().filter(|(n, _)| *n == "Set-Cookie").count(), 2);
        assert_eq!(h.reason(), "OK");
        assert!(
            h.header("content-length").is_none(),
            "the server frames the body itself"
        );
    }

    #[test]
    fn framing_rules() {
        assert_eq!(
            p("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                .unwrap()
                .unwrap()
                .framing,
            Framing::Chunked
        );
        let h = p("HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.framing, h.reusable), (Framing::Close, false));
        let h = p("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.reusable);
        assert_eq!(
            p("HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n")
                .unwrap()
                .unwrap()
                .framing,
            Framing::None
        );
        let head = parse(
            &mut BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"[..]),
            8192,
            true,
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(head.framing, Framing::None);
        assert!(
            !p("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n")
                .unwrap()
                .unwrap()
                .reusable
        );
    }

    #[test]
    fn a_head_of_fields_reads_as_a_parsed_one() {
        let h = UpstreamHead::of_fields(
            404,
            [
                ("content-type", &b"text/plain"[..]),
                ("set-cookie", b"a=1"),
                ("set-cookie", b"b=\xff"),
            ]
            .into_iter(),
        );
        assert_eq!((h.status, h.reason()), (404, ""));
        assert_eq!(h.header("Content-Type"), Some("text/plain"));
        let cookies: Vec<_> = h.headers().filter(|(n, _)| *n == "set-cookie").collect();
        assert_eq!(
            cookies,
            [("set-cookie", "a=1"), ("set-cookie", "b=\u{fffd}")]
        );
        assert_eq!(
            (h.framing, h.reusable, h.upgrade),
            (Framing::Close, false, false)
        );
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_removed() {
        let h = p("HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\nUpgrade: h2c\r\nX-Kept: 2\r\nContent-Length: 0\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.headers().collect::<Vec<_>>(), [("X-Kept", "2")]);
    }

    #[test]
    fn reason_and_values_are_spans_of_one_text() {
        let h = p("HTTP/1.1 404 Not Found\r\nX-A:  1 \r\nX-B: caf\u{e9}\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.reason(), "Not Found");
        assert_eq!(
            h.headers().collect::<Vec<_>>(),
            [("X-A", "1"), ("X-B", "caf\u{e9}")]
        );
        // A reason with obs-text reads as empty, as httparse gives it; the headers stay.
        let mut b = BytesMut::from(&b"HTTP/1.1 200 \xe9t\xe9\r\nX-A: 1\r\n\r\n"[..]);
        let h = parse(&mut b, 8192, false, false).unwrap().unwrap();
        assert_eq!((h.reason(), h.header("x-a")), ("", Some("1")));
        // Header bytes that are not UTF-8 are refused.
        let mut b = BytesMut::from(&b"HTTP/1.1 200 OK\r\nX-A: \xe9\r\n\r\n"[..]);
        assert!(parse(&mut b, 8192, false, false).is_err());
    }

    #[test]
    fn interim_responses_skipped_and_upgrade_kept() {
        let h = p("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.status, 200);
        let h = p(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert!(h.upgrade && !h.reusable && h.framing == Framing::None);
    }

    #[test]
    fn early_hints_returned_when_asked_for() {
        let raw = "HTTP/1.1 103 \r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        let mut b = BytesMut::from(raw.as_bytes());
        let h = parse(&mut b, 8192, false, true).unwrap().unwrap();
        assert_eq!(h.status, 103);
        assert_eq!(h.header("link"), Some("</a.css>; rel=preload"));
        assert_eq!(h.framing, Framing::None);
        let h = parse(&mut b, 8192, false, true).unwrap().unwrap();
        assert_eq!(h.status, 200);
        assert!(b.is_empty());
        // Not asked for: skipped as any other interim head.
        let h = p(raw).unwrap().unwrap();
        assert_eq!(h.status, 200);
    }

    #[test]
    fn refuses_what_a_request_would_be_refused_for() {
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: \0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX\0: a\r\n\r\n",
            "HTTP/1.1 200 O\rK\r\n\r\n",
            "HTTP/1.1 200 O\0K\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\r\n\r\r\n",
            "\nHTTP/1.1 200 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\nX: a\r\r\n\r\n",
            "HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
            "HTTP/1.1 99 Odd\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
        assert!(parse(&mut BytesMut::from(&[b'a'; 9000][..]), 8192, false, false).is_err());
        assert_eq!(p("HTTP/1.1 200 OK\r\nX-A: 1\r\n"), Ok(None));
    }

    #[test]
    fn bare_lf_ends_lines_as_in_nginx() {
        for head in [
            "HTTP/1.1 200 OK\nContent-Length: 0\nX-A: 1\n\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 0\nX-A: 1\n\r\n",
            "HTTP/1.1 200 OK\nContent-Length: 0\r\nX-A: 1\r\n\n",
        ] {
            let mut b = BytesMut::from(format!("{head}rest").as_bytes());
            let h = parse(&mut b, 8192, false, false).unwrap().unwrap();
            assert_eq!(h.status, 200);
            assert_eq!(h.framing, Framing::Length(0));
            assert_eq!(&b[..], b"rest", "{head:?}");
        }
    }
}
