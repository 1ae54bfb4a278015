//! One gRPC attempt: an HTTP/2 session (the `h2` crate over a new
//! [`UpConn`], prior knowledge or ALPN `h2`; or one an earlier call left
//! idle, kept per worker and peer with `keepalive`), the request's head and
//! body on one stream, and the reply as a [`Response`] whose body stream
//! carries the DATA and hands the trailers to the client's protocol.

use super::conf::GrpcConf;
use crate::core::message::response::{
    Body, BodyStream, CutShort, PassedTrailers, Response, Value, passed_trailers,
};
use crate::core::request::{BodyError, BoxFuture, Request, RequestBody};
use crate::modules::client_body::{self, Buffered, Plan};
use crate::upstream::driver::{Failure, Gave, Try};
use crate::upstream::fields::{self, Passed};
use crate::upstream::next::NextUpstream;
use crate::upstream::{PeerAddr, UpConn, Upstream, UpstreamVars};
use bytes::Bytes;
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderName, HeaderValue};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// A failed attempt.
type Fail = Failure<Response>;

fn io_fail(e: &io::Error, while_: &str) -> Fail {
    Failure::io(e, while_)
}

/// An HTTP/2 failure while doing `while_`.
fn h2_fail(e: &h2::Error, while_: &str) -> Fail {
    if let Some(io) = e.get_io() {
        if io.raw_os_error().is_none() && io.kind() != io::ErrorKind::TimedOut {
            return Failure::new(
                NextUpstream::ERROR,
                502,
                format!("upstream prematurely closed connection while {while_}"),
            );
        }
        return io_fail(io, while_);
    }
    let msg = match e.reason() {
        Some(r) if e.is_go_away() => format!("upstream sent goaway with error {}", u32::from(r)),
        Some(r) if e.is_remote() => {
            format!("upstream rejected request with error {}", u32::from(r))
        }
        _ => format!("upstream sent invalid HTTP/2 ({e})"),
    };
    // A reset stream, or HTTP/2 the client side refuses, is an invalid
    // reply (nginx's); a GOAWAY an error.
    let kind = match e.is_go_away() {
        true => NextUpstream::ERROR,
        false => NextUpstream::INVALID_HEADER,
    };
    Failure::new(kind, 502, format!("{msg} while {while_}"))
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "upstream timed out")
}

/// What every attempt of a request sends: its head.
pub(super) struct Call {
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: HeaderMap,
}

impl Call {
    /// The request as an HTTP/2 head for the upstream, as nginx makes it:
    /// the method; the URI sent (the client's, or the changed one escaped);
    /// `:authority` from `grpc_set_header Host`, else `authority`; the
    /// client's fields but hop-by-hop ones (and those its Connection names),
    /// `grpc_set_header`'s (an empty value removes), `te: trailers` when the
    /// client sent it, and Content-Length when the body's length is known.
    pub fn new(
        req: &Request<'_>,
        gc: &GrpcConf,
        tls: bool,
        authority: &str,
        body_len: Option<u64>,
    ) -> Result<Call, String> {
        let method = match req.state.method {
            Some(crate::core::message::head::Method::Get) => http::Method::GET,
            _ => http::Method::from_bytes(req.head.method_bytes())
                .map_err(|_| "invalid method".to_string())?,
        };
        let user: &[(String, crate::core::vars::Template)] = &gc.set_headers;
        let set = |name: &[u8]| {
            user.iter()
                .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        };
        let mut headers = HeaderMap::with_capacity(16);
        let mut host = None;
        let mut v = Vec::new();
        for (name, t) in user {
            v.clear();
            t.render(req, &mut v);
            if v.is_empty() {
                continue;
            }
            if name.eq_ignore_ascii_case("host") {
                host = Some(String::from_utf8_lossy(&v).into_owned());
                continue;
            }
            if fields::is_hop_or_framing(name.as_bytes()) && !name.eq_ignore_ascii_case("te") {
                continue;
            }
            append(&mut headers, name.as_bytes(), &v);
        }
        if !set(b"te") && client_takes_trailers(req) {
            headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        }
        if let Some(n) = body_len.filter(|_| !set(b"content-length")) {
            headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        let named: Vec<&[u8]> = req
            .head
            .header("connection")
            .map(|c| c.split(|&b| b == b',').map(<[u8]>::trim_ascii).collect())
            .unwrap_or_default();
        for (name, value) in req.head.headers() {
            if fields::is_hop_or_framing(name)
                || set(name)
                || named.iter().any(|c| c.eq_ignore_ascii_case(name))
            {
                continue;
            }
            append(&mut headers, name, value);
        }
        let path = fields::request_target(req);
        let authority = host.as_deref().unwrap_or(authority);
        let uri = http::Uri::builder()
            .scheme(if tls { "https" } else { "http" })
            .authority(authority)
            .path_and_query(&*path)
            .build()
            .or_else(|_| {
                // A unix socket's address is no authority.
                http::Uri::builder()
                    .scheme(if tls { "https" } else { "http" })
                    .authority("localhost")
                    .path_and_query(&*path)
                    .build()
            })
            .map_err(|e| format!("invalid request URI for the upstream ({e})"))?;
        Ok(Call {
            method,
            uri,
            headers,
        })
    }

    fn request(&self) -> http::Request<()> {
        let mut r = http::Request::new(());
        *r.method_mut() = self.method.clone();
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// A field for the upstream; one that HTTP/2 cannot carry is left out.
fn append(h: &mut HeaderMap, name: &[u8], value: &[u8]) {
    if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
        h.append(n, v);
    }
}

/// `$grpc_internal_trailers`: the client's TE names `trailers`.
pub(super) fn client_takes_trailers(req: &Request<'_>) -> bool {
    req.head.header("te").is_some_and(|te| {
        te.split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
    })
}

/// An HTTP/2 connection to a peer as the calls use it: a stream at a time.
pub(super) struct Session {
    send: SendRequest<Bytes>,
    /// Calls made on it so far (`keepalive_requests`).
    uses: u64,
}

/// Where a session is kept between calls: the upstream (by address: one
/// made for a request has no `keepalive`), the peer's address (an upstream
/// made by a later load may take the same place), the TLS tag.
pub(super) type Key = (usize, PeerAddr, u64);

/// A session idle since a call ended, kept until `until`.
struct Idle {
    session: Session,
    until: Instant,
}

thread_local! {
    /// The worker's idle sessions, per peer; at most the upstream's
    /// `keepalive` each, for its `keepalive_timeout`.
    static KEPT: RefCell<FxHashMap<Key, Vec<Idle>>> = RefCell::new(FxHashMap::default());
}

/// An idle session with the peer of `key` that can take a stream now.
pub(super) fn take(up: &Upstream, key: &Key) -> Option<Session> {
    if up.keepalive == 0 {
        return None;
    }
    let now = Instant::now();
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let list = k.get_mut(key)?;
        while let Some(mut idle) = list.pop() {
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            // A session the peer has closed (or sent GOAWAY on) is dropped.
            let ready = matches!(idle.session.send.poll_ready(&mut cx), Poll::Ready(Ok(())));
            if idle.until > now && ready {
                return Some(idle.session);
            }
        }
        None
    })
}

/// Keep `session`, whose call ended cleanly, for the next call to the peer.
fn keep(up: &Upstream, key: Key, mut session: Session) {
    session.uses += 1;
    if up.keepalive == 0 || session.uses >= up.keepalive_requests {
        return;
    }
    let until = Instant::now() + up.keepalive_timeout;
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let list = k.entry(key).or_default();
        if list.len() >= up.keepalive {
            list.remove(0);
        }
        list.push(Idle { session, until });
    });
}

/// Once a second: sessions idle past their upstream's `keepalive_timeout`
/// are closed.
pub(super) fn trim_idle() {
    let now = Instant::now();
    KEPT.with(|k| {
        k.borrow_mut().retain(|_, list| {
            list.retain(|i| i.until > now);
            !list.is_empty()
        })
    });
}

/// A new session over `conn`: the HTTP/2 handshake (prior knowledge, or
/// what ALPN chose), its frames moved by a task of the worker until the
/// session is dropped or the peer closes it.
pub(super) async fn session(gc: &GrpcConf, conn: UpConn) -> Result<Session, Fail> {
    let t = gc.send_timeout;
    let mut builder = h2::client::Builder::new();
    // Heads up to twice `grpc_buffer_size` (64k at least) are read, so
    // that one over it is refused by name (`call`); larger ones the
    // HTTP/2 layer refuses.
    builder.max_header_list_size((2 * gc.buffer_size).max(65536) as u32);
    let (send, connection) = tokio::time::timeout(t, builder.handshake::<_, Bytes>(conn))
        .await
        .map_err(|_| io_fail(&timed_out(), "sending request to upstream"))?
        .map_err(|e| h2_fail(&e, "sending request to upstream"))?;
    tokio::task::spawn_local(async move {
        let _ = connection.await;
    });
    Ok(Session { send, uses: 0 })
}

/// One call on `session` (`kept`: one kept from an earlier call, whose
/// failure before the call went out is `stale`): the head, the body sent
/// (`plan`), and the reply. A reply with a body (or trailers to come)
/// streams them; the session is kept for the next call (`key`) once the
/// call ends cleanly.
#[allow(clippy::too_many_arguments)]
pub(super) async fn call(
    req: &Request<'_>,
    gc: &GrpcConf,
    at: &Try<'_>,
    session: Session,
    kept: bool,
    key: Key,
    call: &Call,
    plan: &Plan,
    body: &mut dyn RequestBody,
) -> Result<Response, Gave<Response>> {
    let t = gc.send_timeout;
    let stale = |mut f: Fail| {
        f.stale = kept;
        f
    };
    let Session { send, uses } = session;
    let mut send = tokio::time::timeout(t, send.ready())
        .await
        .map_err(|_| io_fail(&timed_out(), "sending request to upstream"))?
        .map_err(|e| stale(h2_fail(&e, "sending request to upstream")))?;
    let no_body = match plan {
        Plan::None => true,
        Plan::Held(b) => b.len == 0,
        Plan::Stream => false,
    };
    let (reply, stream) = send
        .send_request(call.request(), no_body)
        .map_err(|e| stale(h2_fail(&e, "sending request to upstream")))?;
    let session = Session { send, uses };
    // The body goes while the reply is awaited: an upstream may answer
    // (an error, say) before it has read it all. Once it is sent, the read
    // timeout runs and a client that leaves ends the wait (499), as nginx.
    // Lent to the sending, then to the watch once the sending is over.
    let body = std::cell::Cell::new(Some(body));
    let head = {
        let sending = async {
            match plan {
                Plan::None => Ok(()),
                Plan::Held(b) => send_held(stream, b, t).await,
                Plan::Stream => {
                    let b = body.take().expect("the sending has the body first");
                    let r = send_stream(stream, &mut *b, t).await;
                    body.set(Some(b));
                    r
                }
            }
        };
        let mut sending = std::pin::pin!(sending);
        let mut reply = std::pin::pin!(reply);
        let mut body_done = no_body;
        let deadline = tokio::time::sleep(gc.read_timeout);
        let mut deadline = std::pin::pin!(deadline);
        let head = loop {
            tokio::select! {
                biased;
                r = &mut sending, if !body_done => {
                    body_done = true;
                    deadline.as_mut().reset(tokio::time::Instant::now() + gc.read_timeout);
                    // A failed client is the request's end; an upstream
                    // that stopped taking the body may still answer.
                    if let Err(f) = r && f.kind == NextUpstream::OFF {
                        return Err(f.into());
                    }
                }
                r = &mut reply => break r,
                () = &mut deadline, if body_done => {
                    return Err(io_fail(&timed_out(), "reading response header from upstream").into());
                }
                // The sending is over: the body is free to be watched.
                () = async {
                    match body.take() {
                        Some(b) => b.gone().await,
                        None => std::future::pending().await,
                    }
                }, if body_done => {
                    return Err(Gave::Left);
                }
            }
        };
        // The reply came first: the rest of the body still goes (a stream
        // the upstream has closed refuses it, which ends the sending).
        if !body_done {
            let _ = sending.await;
        }
        head
    };
    let head = head.map_err(|e| h2_fail(&e, "reading response header from upstream"))?;
    let took = at.t0.elapsed();
    at.up.responded(at.peer, took);
    let (parts, recv) = head.into_parts();
    let size: usize = parts
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len())
        .sum();
    if size > gc.buffer_size {
        return Err(Failure::new(
            NextUpstream::INVALID_HEADER,
            502,
            "upstream sent too big header while reading response header from upstream",
        )
        .into());
    }
    let status = parts.status.as_u16();
    at.status(status);
    {
        let mut v = at.vars.borrow_mut();
        v.head = Some(reply_head(&parts.headers));
        if let Some(a) = v.attempts.last_mut() {
            a.header_ms = Some(took.as_millis() as u64);
        }
    }
    let mut resp = response(gc, status, &parts.headers);
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    let fails = at.status_fails(status);
    // 403 and 404 move on to the next peer without counting against this one.
    let ok = fails.is_none() || matches!(status, 403 | 404);
    if !recv.is_end_stream() {
        // Trailers may follow the body: the client's protocol sends them.
        let trailers = Rc::new(PassedTrailers::default());
        req.state.ext.insert(trailers.clone());
        resp.trailers = Some(passed_trailers);
        resp.body = Body::Stream {
            stream: Box::new(GrpcBody {
                recv,
                trailers,
                timeout: gc.read_timeout,
                up: Some((at.up.clone(), at.peer, ok)),
                vars: at.vars.clone(),
                session: Some((session, key)),
            }),
            len: declared,
        };
    } else {
        at.up.finished(at.peer, ok);
        keep(at.up, key, session);
    }
    match fails {
        Some(kind) => Err(Gave::Fail(Failure {
            kind,
            code: status,
            msg: String::new(),
            stale: false,
            reply: Some(resp),
        })),
        None => Ok(resp),
    }
}

/// Room for `n` more bytes in the stream's window, within `t`.
async fn capacity(s: &mut SendStream<Bytes>, n: usize, t: Duration) -> Result<usize, Fail> {
    s.reserve_capacity(n);
    let got = tokio::time::timeout(t, std::future::poll_fn(|cx| s.poll_capacity(cx)))
        .await
        .map_err(|_| io_fail(&timed_out(), "sending request to upstream"))?;
    match got {
        Some(Ok(n)) => Ok(n),
        Some(Err(e)) => Err(h2_fail(&e, "sending request to upstream")),
        None => Err(Failure::new(
            NextUpstream::ERROR,
            502,
            "upstream closed the stream while sending request to upstream",
        )),
    }
}

/// The most bytes a piece of the request body is queued with before the
/// stream's window is known: one default HTTP/2 frame.
const QUEUED: usize = 16 * 1024;

/// Send `data` (the last piece when `end`) as the window allows.
async fn send_data(
    s: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
    t: Duration,
) -> Result<(), Fail> {
    if data.is_empty() {
        return match end {
            true => s
                .send_data(data, true)
                .map_err(|e| h2_fail(&e, "sending request to upstream")),
            false => Ok(()),
        };
    }
    // A small piece is queued without waiting for the stream's window (the
    // stream holds it until the window opens, a bounded amount): the
    // request's first piece then goes in the same write as its HEADERS, which
    // a window granted only once the stream is open would send alone.
    if data.len() <= QUEUED {
        return s
            .send_data(data, end)
            .map_err(|e| h2_fail(&e, "sending request to upstream"));
    }
    while !data.is_empty() {
        let n = capacity(s, data.len(), t).await?.min(data.len());
        let piece = data.split_to(n);
        s.send_data(piece, end && data.is_empty())
            .map_err(|e| h2_fail(&e, "sending request to upstream"))?;
    }
    Ok(())
}

async fn send_held(mut s: SendStream<Bytes>, b: &Buffered, t: Duration) -> Result<(), Fail> {
    let mut off = 0;
    loop {
        let piece = b.piece_at(off).map_err(|e| Failure::body_file(&e))?;
        let Some(piece) = piece else { return Ok(()) };
        off += piece.len() as u64;
        send_data(&mut s, piece, off >= b.len, t).await?;
    }
}

/// The client's body to the stream as it arrives; the last piece carries
/// END_STREAM (an empty DATA frame when the end comes later, as nginx).
async fn send_stream(
    mut s: SendStream<Bytes>,
    body: &mut dyn RequestBody,
    t: Duration,
) -> Result<(), Fail> {
    // Not the peer's fault: no next upstream.
    let client_fail =
        |e: BodyError| Failure::new(NextUpstream::OFF, e.status(), "client request body failed");
    let mut next = body.chunk().await.map_err(client_fail)?;
    while let Some(piece) = next {
        let after = client_body::now_or_never(body.chunk());
        let end = matches!(after, Some(Ok(None)));
        send_data(&mut s, piece, end, t).await?;
        if end {
            return Ok(());
        }
        next = match after {
            Some(r) => r.map_err(client_fail)?,
            None => body.chunk().await.map_err(client_fail)?,
        };
    }
    send_data(&mut s, Bytes::new(), true, t).await
}

/// The reply's fields as `$upstream_http_*` reads them: one text and spans.
fn reply_head(h: &HeaderMap) -> crate::upstream::ReplyHead {
    let mut text = String::with_capacity(256);
    let mut spans = Vec::with_capacity(h.len());
    for (n, v) in h {
        let a = text.len() as u32;
        text.push_str(n.as_str());
        let b = text.len() as u32;
        text.push_str(": ");
        let c = text.len() as u32;
        text.push_str(&String::from_utf8_lossy(v.as_bytes()));
        let d = text.len() as u32;
        text.push_str("\r\n");
        spans.push(((a, b), (c, d)));
    }
    (Arc::from(text), spans)
}

/// Status and fields for the client from the reply's head: Date, Server,
/// X-Pad and X-Accel-* hidden (unless `grpc_pass_header`), then
/// `grpc_hide_header`'s.
fn response(gc: &GrpcConf, status: u16, h: &HeaderMap) -> Response {
    let mut resp = Response::new(status);
    resp.headers.reserve(h.len());
    let passes = |n: &str| gc.pass_headers.iter().any(|p| p.eq_ignore_ascii_case(n));
    resp.own = fields::own_fields(passes);
    for (name, value) in h {
        let name = name.as_str();
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let kind = fields::passed_header(name);
        if kind == Passed::ContentType {
            resp.content_type = Some(Value::Owned(value));
            continue;
        }
        if fields::keep_own(&mut resp, kind, || Value::Owned(value.clone())) {
            continue;
        }
        let hidden = match kind {
            Passed::Not | Passed::Own(_) => true,
            Passed::Accel => !passes(name),
            _ => false,
        };
        if hidden || gc.hide_headers.iter().any(|p| p.eq_ignore_ascii_case(name)) {
            continue;
        }
        match crate::upstream::intern_header_name(name) {
            Some(n) => resp.headers.push((n, Value::Owned(value))),
            None => crate::error_log!(
                Warn,
                "upstream header \"{name}\" dropped: too many distinct header names"
            ),
        }
    }
    resp
}

/// A reply's DATA as the client takes it, then its trailers.
struct GrpcBody {
    recv: RecvStream,
    trailers: Rc<PassedTrailers>,
    timeout: Duration,
    /// The peer, told once the stream is over (false: its reply counts
    /// as a failure).
    up: Option<(Arc<Upstream>, usize, bool)>,
    vars: Rc<RefCell<UpstreamVars>>,
    /// The session, kept for the next call when this one ends cleanly.
    session: Option<(Session, Key)>,
}

impl std::fmt::Debug for GrpcBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrpcBody")
    }
}

impl GrpcBody {
    fn end(&mut self, ok: bool) {
        let session = self.session.take();
        if let Some((up, peer, good)) = self.up.take() {
            up.finished(peer, ok && good);
            if let (true, Some((session, key))) = (ok, session) {
                keep(&up, key, session);
            }
        }
    }

    /// The stream broke off: logged, and the client's response is cut short.
    fn premature(&mut self, e: io::Error) -> io::Error {
        let msg = match e.kind() {
            io::ErrorKind::TimedOut => {
                "upstream timed out (110: Connection timed out) while reading upstream".to_string()
            }
            _ => format!("upstream sent invalid stream ({e}) while reading upstream"),
        };
        let peer = self
            .up
            .as_ref()
            .map_or(String::new(), |(u, p, _)| u.addr_name(*p).to_string());
        crate::error_log!(Error, "{msg}, upstream: \"grpc://{peer}\"");
        self.end(false);
        CutShort::wrap(e)
    }

    async fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        if self.up.is_none() {
            return Ok(None);
        }
        loop {
            let r = tokio::time::timeout(self.timeout, self.recv.data()).await;
            match r {
                Err(_) => return Err(self.premature(timed_out())),
                Ok(Some(Ok(b))) => {
                    let _ = self.recv.flow_control().release_capacity(b.len());
                    if b.is_empty() {
                        continue;
                    }
                    if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
                        a.body += b.len() as u64;
                        a.received += b.len() as u64;
                    }
                    return Ok(Some(b));
                }
                Ok(Some(Err(e))) => return Err(self.premature(io::Error::other(e))),
                Ok(None) => break,
            }
        }
        let t = tokio::time::timeout(self.timeout, self.recv.trailers()).await;
        match t {
            Err(_) => Err(self.premature(timed_out())),
            Ok(Err(e)) => Err(self.premature(io::Error::other(e))),
            Ok(Ok(map)) => {
                let mut kept = self.trailers.0.borrow_mut();
                for (n, v) in map.iter().flat_map(|m| m.iter()) {
                    if let Some(n) = crate::upstream::intern_header_name(n.as_str()) {
                        kept.push((n, String::from_utf8_lossy(v.as_bytes()).into_owned()));
                    }
                }
                drop(kept);
                self.end(true);
                Ok(None)
            }
        }
    }
}

impl BodyStream for GrpcBody {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(self.next_piece())
    }

    fn unbuffered(&self) -> bool {
        true
    }
}

impl Drop for GrpcBody {
    fn drop(&mut self) {
        // The client left before the end: the stream is reset when `recv`
        // goes, and the session closed; not the peer's failure.
        self.session = None;
        self.end(true);
    }
}
