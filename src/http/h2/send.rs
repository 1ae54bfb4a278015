//! A response out on an HTTP/2 stream: the head as a HEADERS frame without the
//! connection-specific fields HTTP/2 forbids, the body in DATA frames no larger
//! than the stream's flow-control window allows. Each piece waits for window
//! (send_timeout bounds the wait) before the next is read from a file or pulled
//! from an upstream, so a slow reader holds back the file reads and the
//! upstream instead of filling memory.

use super::conf::Http2Conf;
use crate::core::clock;
use crate::core::message::head::Method;
use crate::core::message::response::{Body, OwnFields, Response, Value, server_name};
use crate::core::message::response::{FILE_PIECE, read_file_piece};
use crate::core::request::Request;
use crate::http::pipeline;
use bytes::Bytes;
use h2::SendStream;
use h2::server::SendResponse;
use http::header::{HeaderName, HeaderValue};
use std::fs::File;
use std::io::{self, ErrorKind};
use std::ops::Range;
use std::time::Duration;

/// Fields that describe an HTTP/1 connection: never sent on a stream
/// (RFC 9113 §8.2.2).
fn connection_specific(name: &str) -> bool {
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

/// Send `resp` for `req` on its stream and log the request. `return 444` (and
/// a client gone, 499) resets the stream instead of answering.
pub async fn respond(tx: &mut SendResponse<Bytes>, req: &Request<'_>, mut resp: Response) {
    if resp.unanswered() {
        crate::modules::log::log_request(req, &resp, 0, 0);
        tx.send_reset(h2::Reason::INTERNAL_ERROR);
        return;
    }
    let core = &req.conf.core;
    let bodiless = resp.status == 304 || resp.status == 204 || resp.status < 200;
    let (head, head_len) = head(&resp, core.server_tokens, bodiless);
    let size = resp.body.size();
    let head_only = bodiless || req.head.method == Method::Head;
    let trailers = resp.trailers.filter(|_| !head_only);
    let no_body = head_only || (size == Some(0) && trailers.is_none());
    let mut sent = 0;
    if let Ok(stream) = tx.send_response(head, no_body) {
        let mut out = Out {
            s: stream,
            chunk: req.conf.get::<Http2Conf>().chunk_size,
            timeout: core.send_timeout,
            sent: 0,
        };
        if !no_body {
            // The body is out of the response while it is sent, so the
            // trailers can be made from the response after.
            let mut body = std::mem::replace(&mut resp.body, Body::Empty);
            let r = match trailers {
                None => out.body(&mut body, true).await,
                Some(make) => match out.body(&mut body, false).await {
                    Ok(()) => out.trailers(make(req, &resp)),
                    e => e,
                },
            };
            resp.body = body;
            if r.is_err() {
                out.s.send_reset(h2::Reason::INTERNAL_ERROR);
            }
        }
        sent = out.sent;
    }
    if let Some(post) = req.post_action() {
        post.await;
    }
    // Background subrequests (mirrors) end before the request is logged
    // and the connection goes on.
    if let Some(bg) = req.background() {
        bg.await;
    }
    pipeline::finished(req, &resp, head_len, sent);
}

/// The response head, and its size as HTTP/1 would write it (`$bytes_sent`
/// counts it so).
fn head(r: &Response, tokens: bool, bodiless: bool) -> (http::Response<()>, u64) {
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
    for (name, v) in &r.headers {
        if connection_specific(name) {
            continue;
        }
        let n = match known_name(name) {
            Some(n) => Ok(n),
            None => HeaderName::from_bytes(name.as_bytes()),
        };
        if let (Ok(n), Ok(v)) = (n, value(v)) {
            add(n, v);
        }
    }
    (h, len as u64 + 2)
}

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

/// A stream's sending side, with the body bytes sent so far.
struct Out {
    s: SendStream<Bytes>,
    chunk: usize,
    timeout: Duration,
    sent: u64,
}

impl Out {
    /// Send `body`; `end` closes the stream after it.
    async fn body(&mut self, body: &mut Body, end: bool) -> io::Result<()> {
        match body {
            Body::Empty => self.data(Bytes::new(), end).await,
            Body::Bytes(b) => self.data(b.clone(), end).await,
            Body::File { file, range } => self.file(file, range.clone(), end).await,
            Body::Multipart { file, parts } => {
                for (part_head, range) in &parts.parts {
                    self.data(Bytes::copy_from_slice(part_head), false).await?;
                    self.file(file, range.clone(), false).await?;
                }
                self.data(Bytes::copy_from_slice(&parts.trailer), end).await
            }
            Body::Stream { stream, .. } => {
                // Each piece is out (within the window) before the next is asked for.
                while let Some(piece) = stream.next().await? {
                    self.data(piece, false).await?;
                }
                self.data(Bytes::new(), end).await
            }
        }
    }

    /// End the stream with the trailer fields (an empty DATA frame when
    /// there are none).
    fn trailers(&mut self, fields: Vec<(&'static str, String)>) -> io::Result<()> {
        let mut map = http::HeaderMap::new();
        for (name, v) in fields {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&v),
            ) {
                map.append(n, v);
            }
        }
        if map.is_empty() {
            return self.send(Bytes::new(), true);
        }
        self.s.send_trailers(map).map_err(io::Error::other)
    }

    /// Window for the next piece of the `want` bytes still to send: at most
    /// http2_chunk_size. All of `want` is asked for, so the pieces that fit
    /// the window go out together (the codec's send buffer caps how much).
    async fn capacity(&mut self, want: usize) -> io::Result<usize> {
        self.s.reserve_capacity(want);
        loop {
            let cap = self.s.capacity();
            if cap > 0 {
                return Ok(cap.min(want).min(self.chunk));
            }
            let more = std::future::poll_fn(|cx| self.s.poll_capacity(cx));
            match tokio::time::timeout(self.timeout, more).await {
                Err(_) => return Err(io::Error::new(ErrorKind::TimedOut, "send_timeout")),
                Ok(Some(Ok(_))) => {}
                Ok(None) => return Err(io::Error::from(ErrorKind::BrokenPipe)),
                Ok(Some(Err(e))) => return Err(io::Error::other(e)),
            }
        }
    }

    fn send(&mut self, piece: Bytes, end: bool) -> io::Result<()> {
        let n = piece.len() as u64;
        self.s.send_data(piece, end).map_err(io::Error::other)?;
        self.sent += n;
        Ok(())
    }

    /// Send `data` in pieces the window allows; `end` closes the stream after it.
    async fn data(&mut self, mut data: Bytes, end: bool) -> io::Result<()> {
        if data.is_empty() {
            return if end { self.send(data, true) } else { Ok(()) };
        }
        while !data.is_empty() {
            let n = self.capacity(data.len()).await?;
            let piece = data.split_to(n);
            self.send(piece, end && data.is_empty())?;
        }
        Ok(())
    }

    /// Send `range` of `file`: as much of it as the stream's window takes now
    /// (up to `FILE_PIECE`) is read with one call, then sent in DATA frames of
    /// at most http2_chunk_size (a 21 KB file is one read, not one per frame).
    /// Nothing is read ahead of the window.
    async fn file(&mut self, file: &File, range: Range<u64>, end: bool) -> io::Result<()> {
        let mut off = range.start;
        if off == range.end && end {
            return self.send(Bytes::new(), true);
        }
        while off < range.end {
            let left = (range.end - off) as usize;
            self.capacity(left).await?;
            let window = self.s.capacity().clamp(1, FILE_PIECE);
            let read = read_file_piece(file, off, left.min(window))?;
            off += read.len() as u64;
            self.data(read, end && off == range.end).await?;
        }
        Ok(())
    }
}
