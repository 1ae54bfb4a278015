//! Responses as every protocol sends them: status, headers, body (bytes, a
//! file range, multipart ranges or a stream pulled while it is sent), and
//! the error pages.

use crate::core::spare::Spares;
use bytes::Bytes;
use std::fs::File;
use std::ops::Range;
use std::rc::Rc;
use std::sync::Arc;

/// A header value without copying where it can be avoided.
#[derive(Clone, Debug)]
pub enum Value {
    Static(&'static str),
    Shared(Arc<str>),
    Owned(String),
    /// Bytes `start..end` of a shared text (a header of an upstream's reply,
    /// all of whose values share its head).
    Slice(Arc<str>, u32, u32),
}

impl Value {
    pub fn as_str(&self) -> &str {
        match self {
            Value::Static(s) => s,
            Value::Shared(s) => s,
            Value::Owned(s) => s,
            Value::Slice(s, a, b) => &s[*a as usize..*b as usize],
        }
    }
}

#[derive(Debug)]
pub enum Body {
    Empty,
    Bytes(Bytes),
    /// A byte range of an open file.
    File {
        file: Rc<File>,
        range: Range<u64>,
    },
    /// multipart/byteranges of an open file.
    Multipart {
        file: Rc<File>,
        parts: Box<Multipart>,
    },
    /// Produced while it is sent (FastCGI, proxy, compression); `len` when known.
    Stream {
        stream: Box<dyn BodyStream>,
        len: Option<u64>,
    },
}

/// A response body produced piece by piece; the connection pulls the next piece
/// only when the previous one has been written (backpressure).
pub trait BodyStream: std::fmt::Debug {
    /// The next piece; `None` at the end. An error ends the response early.
    fn next(&mut self) -> crate::core::request::BoxFuture<'_, std::io::Result<Option<Bytes>>>;

    /// What `next` would answer if it can without waiting (no I/O): the
    /// connection gathers pieces at hand into one write. `None` when the next
    /// piece must be waited for (the default).
    fn ready(&mut self) -> Option<std::io::Result<Option<Bytes>>> {
        None
    }

    /// Each piece should reach the client as soon as it is produced (nginx's
    /// `proxy_buffering off`, `fastcgi_buffering off`, `X-Accel-Buffering:
    /// no`): a compressor wrapping this stream flushes its encoder whenever
    /// the next piece has to be waited for, instead of holding the output
    /// until it has a block.
    fn unbuffered(&self) -> bool {
        false
    }

    /// The tunnel of a 101 (Switching Protocols) response: after writing the
    /// head, the connection hands it the client socket instead of a body.
    fn upgrade(&mut self) -> Option<Box<dyn Tunnel>> {
        None
    }
}

/// The client side of an upgraded connection, as a tunnel sees it.
pub trait ClientIo {
    fn try_read(&self, buf: &mut bytes::BytesMut) -> std::io::Result<usize>;
    fn try_write(&self, data: &[u8]) -> std::io::Result<usize>;
    fn readable(&self) -> crate::core::request::BoxFuture<'_, std::io::Result<()>>;
    fn writable(&self) -> crate::core::request::BoxFuture<'_, std::io::Result<()>>;
    /// Send what writes left queued in the connection (TLS records);
    /// `WouldBlock` while some remains.
    fn try_flush(&self) -> std::io::Result<()>;
}

/// Relays an upgraded connection (WebSocket and other `Upgrade`s).
pub trait Tunnel {
    /// Relay both ways until either side closes or the tunnel idles out;
    /// `pending`: client bytes already read after the request head.
    fn run<'a>(
        self: Box<Self>,
        client: &'a dyn ClientIo,
        pending: bytes::BytesMut,
    ) -> crate::core::request::BoxFuture<'a, ()>;
}

/// Read a piece of a file body at `off` into `buf`: the bytes read, never 0
/// (a file that ends before its range did shrank while it was sent).
pub fn read_file_at(file: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    match file.read_at(buf, off)? {
        0 => Err(shrank()),
        n => Ok(n),
    }
}

/// Pieces longer than this are read into buffers the worker takes back once
/// the pieces are sent: above the allocator's small sizes (16 KiB), with
/// tens of streams sending at once, each piece's buffer missed its thread
/// cache and cost an arena allocation and free.
const SPARE_PIECE: usize = 16 * 1024;

thread_local! {
    /// Buffers of `FILE_PIECE` bytes whose pieces were sent.
    static PIECES: Spares<bytes::BytesMut> = const { Spares::new(128) };
}

/// A piece's buffer, given back to the worker's spares when the piece is
/// dropped.
struct Piece(bytes::BytesMut);

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        let mut buf = std::mem::take(&mut self.0);
        buf.clear();
        // (Not at all while the thread is being torn down.)
        let _ = PIECES.try_with(|p| p.keep(buf));
    }
}

/// Let go of the piece buffers the last period did not need.
pub fn trim_spares() {
    PIECES.with(|p| p.trim());
}

/// A piece of up to `want` bytes of a file body at `off`, read into a buffer
/// that is not zeroed first; never empty (see [`read_file_at`]).
pub fn read_file_piece(file: &File, off: u64, want: usize) -> std::io::Result<bytes::Bytes> {
    let pooled = SPARE_PIECE < want && want <= FILE_PIECE;
    let mut buf = match pooled {
        true => PIECES
            .with(|p| p.take())
            .unwrap_or_else(|| bytes::BytesMut::with_capacity(FILE_PIECE)),
        false => bytes::BytesMut::new(),
    };
    match crate::sys::pread_append(file, &mut buf, want, off) {
        Ok(0) => Err(shrank()),
        Ok(_) if pooled => Ok(Bytes::from_owner(Piece(buf))),
        Ok(_) => Ok(buf.freeze()),
        Err(e) => Err(e),
    }
}

fn shrank() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "file shrank while sending",
    )
}

/// The error of a body whose source broke off (an upstream that closed,
/// timed out or sent less than it declared): the connection sends what
/// came of the response — its head included, when no piece went out yet —
/// and then closes, as nginx flushes an upstream's response once its header
/// is committed. Other body errors close the connection at once.
#[derive(Debug)]
pub struct CutShort(pub std::io::Error);

impl std::fmt::Display for CutShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for CutShort {}

impl CutShort {
    /// `e`, marked as the source's breaking off (its kind kept).
    pub fn wrap(e: std::io::Error) -> std::io::Error {
        std::io::Error::new(e.kind(), CutShort(e))
    }

    /// Is `e` a source's breaking off?
    pub fn is(e: &std::io::Error) -> bool {
        e.get_ref().is_some_and(|i| i.is::<CutShort>())
    }
}

/// The body of a HEAD answer whose GET would have no known length: none.
#[derive(Debug)]
struct NoBody;

impl BodyStream for NoBody {
    fn next(&mut self) -> crate::core::request::BoxFuture<'_, std::io::Result<Option<Bytes>>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// Pieces read from a file body at most this long.
pub const FILE_PIECE: usize = 32 * 1024;

/// A body that is not a stream yet, as one: bytes at once, a file range
/// piece by piece.
#[derive(Debug)]
struct Pieces {
    body: Body,
    off: u64,
}

impl Pieces {
    fn step(&mut self) -> std::io::Result<Option<Bytes>> {
        match &mut self.body {
            Body::Bytes(b) => Ok(Some(std::mem::take(b)).filter(|b| !b.is_empty())),
            Body::File { file, range } => {
                let start = range.start + self.off;
                if start >= range.end {
                    return Ok(None);
                }
                let mut buf = vec![0; ((range.end - start) as usize).min(FILE_PIECE)];
                let n = read_file_at(file, &mut buf, start)?;
                buf.truncate(n);
                self.off += n as u64;
                Ok(Some(buf.into()))
            }
            Body::Multipart { file, parts } => {
                // The parts' heads and ranges in order, then the trailer.
                let mut at = 0u64;
                for (head, r) in &parts.parts {
                    let hl = head.len() as u64;
                    if self.off < at + hl {
                        let b = Bytes::copy_from_slice(&head[(self.off - at) as usize..]);
                        self.off = at + hl;
                        return Ok(Some(b));
                    }
                    at += hl;
                    let len = r.end - r.start;
                    if self.off < at + len {
                        let from = r.start + (self.off - at);
                        let mut buf = vec![0; ((r.end - from) as usize).min(FILE_PIECE)];
                        let n = read_file_at(file, &mut buf, from)?;
                        buf.truncate(n);
                        self.off += n as u64;
                        return Ok(Some(buf.into()));
                    }
                    at += len;
                }
                let t = &parts.trailer;
                if self.off < at + t.len() as u64 {
                    self.off = at + t.len() as u64;
                    return Ok(Some(Bytes::copy_from_slice(t)));
                }
                Ok(None)
            }
            Body::Empty | Body::Stream { .. } => Ok(None),
        }
    }
}

impl BodyStream for Pieces {
    fn next(&mut self) -> crate::core::request::BoxFuture<'_, std::io::Result<Option<Bytes>>> {
        Box::pin(std::future::ready(self.step()))
    }

    fn ready(&mut self) -> Option<std::io::Result<Option<Bytes>>> {
        Some(self.step())
    }
}

impl Body {
    /// No body, and no length either: the body of a HEAD answer whose GET
    /// would stream one of unknown length (compressed, decompressed).
    pub fn unknown_length() -> Body {
        Body::Stream {
            stream: Box::new(NoBody),
            len: None,
        }
    }

    /// The body as a stream of pieces; `None` when it is empty.
    pub fn into_stream(self) -> Option<Box<dyn BodyStream>> {
        match self {
            Body::Empty => None,
            Body::Stream { stream, .. } => Some(stream),
            body => Some(Box::new(Pieces { body, off: 0 })),
        }
    }

    /// Length in bytes; `None` for a stream of unknown length.
    pub fn size(&self) -> Option<u64> {
        Some(match self {
            Body::Empty => 0,
            Body::Bytes(b) => b.len() as u64,
            Body::File { range, .. } => range.end - range.start,
            Body::Multipart { parts, .. } => parts.content_length(),
            Body::Stream { len, .. } => return *len,
        })
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: Option<Value>,
    pub headers: Vec<(&'static str, Value)>,
    pub body: Body,
    /// Trailer fields to send after the body (`add_trailer`), made once the
    /// body is sent. With them an HTTP/1.1 response goes out chunked.
    pub trailers: Option<Trailers>,
    /// What an upstream's reply says besides its passed fields: its
    /// `Server` and `Date` in place of the server's own, the charset it
    /// asks for; `None`: nothing.
    pub own: Option<Box<OwnFields>>,
}

/// The `Server` and `Date` fields a response sends instead of the server's
/// own (`proxy_pass_header Server` / `Date`): `None` keeps the server's, an
/// empty value sends no field at all (nginx's empty `Server`/`Date` when the
/// upstream sent none). And the charset the reply asks to be sent in.
#[derive(Debug, Default)]
pub struct OwnFields {
    pub server: Option<Value>,
    pub date: Option<Value>,
    /// An upstream's `X-Accel-Charset` (nginx's `override_charset` of the
    /// reply): the charset filter recodes the body to it from the reply's
    /// own charset, whatever the location's `charset` says. Never sent as
    /// a field.
    pub override_charset: Option<Box<str>>,
    /// The reason phrase an upstream gave with this status: sent while the
    /// response keeps that status (a filter that changes it, to 304 or 206
    /// say, drops the phrase, as nginx drops its status line).
    pub reason: Option<(u16, Box<str>)>,
    /// The rest of the request's body, which the handler sends on to the
    /// upstream beside this response (a reply that came before the body's
    /// end, to a client whose protocol carries both at once).
    pub duplex: Option<Box<dyn crate::core::request::Duplex>>,
}

impl OwnFields {
    /// The reason phrase `r` is sent with.
    pub fn reason(r: &Response) -> &str {
        match r.own.as_deref().and_then(|f| f.reason.as_ref()) {
            Some((status, text)) if *status == r.status => text,
            _ => reason(r.status),
        }
    }

    /// `Server` (`date`: false) or `Date` of `r`: `None` for the server's
    /// own, `Some(None)` for no field at all.
    pub fn of(r: &Response, date: bool) -> Option<Option<&str>> {
        let f = r.own.as_deref()?;
        let v = if date { &f.date } else { &f.server };
        let v = v.as_ref()?.as_str();
        Some((!v.is_empty()).then_some(v))
    }
}

/// Makes a response's trailer fields once its body is sent (the body
/// itself is taken out of the response while it is).
pub type Trailers =
    fn(&crate::core::request::Request<'_>, &Response) -> Vec<(&'static str, String)>;

/// Trailer fields an upstream sent after its body (gRPC's `grpc-status`,
/// `grpc-message`): the handler keeps them in the request's store, its body
/// stream fills them in at the body's end, and [`passed_trailers`] (or
/// `add_trailer`'s, which puts them first) sends them.
#[derive(Debug, Default)]
pub struct PassedTrailers(pub std::cell::RefCell<Vec<(&'static str, String)>>);

/// The [`Trailers`] of a response whose trailer fields are an upstream's.
pub fn passed_trailers(
    req: &crate::core::request::Request<'_>,
    _: &Response,
) -> Vec<(&'static str, String)> {
    req.state
        .ext
        .get::<PassedTrailers>()
        .map(|t| t.0.borrow().clone())
        .unwrap_or_default()
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            content_type: None,
            // Room for the usual static headers without regrowing.
            headers: Vec::with_capacity(4),
            body: Body::Empty,
            trailers: None,
            own: None,
        }
    }

    /// The charset the reply asks to be sent in (`OwnFields::override_charset`).
    pub fn override_charset(&self) -> Option<&str> {
        self.own.as_deref()?.override_charset.as_deref()
    }

    /// Set the charset the reply asks to be sent in.
    pub fn set_override_charset(&mut self, charset: Option<Box<str>>) {
        if charset.is_none() && self.own.is_none() {
            return;
        }
        self.own.get_or_insert_default().override_charset = charset;
    }

    /// Closed without an answer, logged with this status: `return 444`, and 499
    /// (the client went away; nginx likewise terminates a request finalized
    /// with 499, `return 499` included).
    pub fn unanswered(&self) -> bool {
        matches!(self.status, 444 | 499)
    }

    /// An error or redirect page with a small HTML body, as nginx sends them.
    pub fn error(status: u16, server_tokens: bool) -> Self {
        // nginx's own codes for a bad TLS client or plain HTTP on a TLS
        // port go out as 400 with a page saying why.
        let special = match status {
            494 => Some("Request Header Or Cookie Too Large"),
            495 => Some("The SSL certificate error"),
            496 => Some("No required SSL certificate was sent"),
            497 => Some("The plain HTTP request was sent to HTTPS port"),
            _ => None,
        };
        // The status stays for error_page; the request sends it as 400.
        let mut r = Response::new(status);
        if status >= 300 && !matches!(status, 304) {
            let title = match special {
                Some(why) => format!("400 {why}"),
                None => format!("{status} {}", reason(status)),
            };
            r.body = Body::Bytes(Bytes::from(format!(
                "<!DOCTYPE html>\n<html><head><title>{title}</title></head>\n<body><h1>{title}</h1><hr><p>{}</p></body></html>\n",
                server_name(server_tokens)
            )));
            r.content_type = Some(Value::Static("text/html"));
        }
        r
    }

    /// Does the body go out with chunked framing? When its length is unknown
    /// and the client takes chunked framing (HTTP/1.1 with
    /// `chunked_transfer_encoding on`), also on a connection that closes
    /// after it, as nginx: the last chunk tells a whole body from one cut
    /// short. Otherwise the close ends the body.
    pub fn chunked(&self, takes_chunked: bool) -> bool {
        takes_chunked && self.body.size().is_none()
    }

    pub fn header(mut self, name: &'static str, v: Value) -> Self {
        self.headers.push((name, v));
        self
    }

    /// The rest of the request's body to send beside this response, taken.
    pub fn take_duplex(&mut self) -> Option<Box<dyn crate::core::request::Duplex>> {
        self.own.as_mut()?.duplex.take()
    }

    /// Whether the rest of the request's body goes on beside this response.
    pub fn has_duplex(&self) -> bool {
        self.own.as_ref().is_some_and(|o| o.duplex.is_some())
    }
}

pub fn server_name(tokens: bool) -> &'static str {
    if tokens {
        concat!("vireo/", env!("CARGO_PKG_VERSION"))
    } else {
        "vireo"
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Time-out",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Large",
        415 => "Unsupported Media Type",
        416 => "Requested Range Not Satisfiable",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Temporarily Unavailable",
        504 => "Gateway Time-out",
        505 => "HTTP Version Not Supported",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_pages_are_html() {
        let r = Response::error(404, true);
        assert_eq!(r.content_type.unwrap().as_str(), "text/html");
        let Body::Bytes(b) = r.body else { panic!() };
        assert!(std::str::from_utf8(&b).unwrap().contains("404 Not Found"));
    }
}

/// Framing of a `multipart/byteranges` body: the body is, in order, each
/// part's header bytes followed by the bytes of its range, then `trailer`
/// (flv sends its header and a file range so, with no boundary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multipart {
    pub boundary: String,
    /// The parts' `Content-Type` (empty: none).
    pub content_type: String,
    /// For each range: `"\r\n--BOUNDARY\r\nContent-Type: T\r\nContent-Range: bytes a-b/size\r\n\r\n"`
    /// (the `Content-Type` line is omitted when the type is empty).
    pub parts: Vec<(Vec<u8>, Range<u64>)>,
    /// `"\r\n--BOUNDARY--\r\n"`.
    pub trailer: Vec<u8>,
}

impl Multipart {
    /// Total body length: part headers, range bytes and trailer.
    pub fn content_length(&self) -> u64 {
        self.parts
            .iter()
            .map(|(h, r)| h.len() as u64 + (r.end - r.start))
            .sum::<u64>()
            + self.trailer.len() as u64
    }

    /// Give every part the `Content-Type` `ct`, in its head and in
    /// `content_type`.
    pub fn retype(&mut self, ct: &str) {
        // Each head starts "\r\n--BOUNDARY\r\n", then the type's line.
        let at = 4 + self.boundary.len() + 2;
        let old = match self.content_type.is_empty() {
            true => 0,
            false => "Content-Type: ".len() + self.content_type.len() + 2,
        };
        let line = match ct.is_empty() {
            true => String::new(),
            false => format!("Content-Type: {ct}\r\n"),
        };
        for (head, _) in &mut self.parts {
            head.splice(at..at + old, line.bytes());
        }
        self.content_type = ct.to_string();
    }

    /// `Content-Type` of the whole response: `multipart/byteranges; boundary=…`.
    pub fn content_type(&self) -> String {
        format!("multipart/byteranges; boundary={}", self.boundary)
    }
}
