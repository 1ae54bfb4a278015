//! HTTP/2 to peers, for the handlers that speak it: gRPC (`grpc_pass`) and
//! the proxy with `proxy_http_version 2`.
//!
//! - A session is the `h2` crate's client over an [`UpConn`] (prior
//!   knowledge on a plain connection, ALPN `h2` over TLS), its frames moved
//!   by a task of the worker, with nginx's settings: no HPACK dynamic table
//!   for replies, no server push.
//! - With `keepalive` in the upstream block, a session whose exchange ended
//!   cleanly is kept per worker and peer (`KEPT`) and offered to the driver
//!   first ([`Protocol::kept`]), one stream at a time as nginx, up to
//!   `keepalive` idle sessions a peer, for `keepalive_timeout` and
//!   `keepalive_requests`. A kept session the peer closed or sent GOAWAY on
//!   is dropped, or fails `stale` before anything went on it.
//! - One exchange ([`call`]) sends the head ([`Call`]) and the request body
//!   as planned ([`Plan`]): a body read whole from memory or its file, or
//!   the client's as it arrives, what is at hand in one DATA frame, streamed
//!   while the reply's head is awaited (an upstream may answer first). It
//!   gives the reply's head as an [`UpstreamHead`] (what `$upstream_http_*`
//!   and the handlers' field rules read) and its body as a stream the client
//!   connection pulls ([`Reply`]), which can hand the upstream's trailers to
//!   the client's protocol.
//! - A handler ([`Handler`]) says what it sends ([`Ask`]) and makes its
//!   response of the reply; [`Over`] makes it the driver's [`Protocol`].

use crate::core::message::response::{
    Body, BodyStream, CutShort, PassedTrailers, Response, Value, passed_trailers,
};
use crate::core::request::{BodyError, BoxFuture, Request, RequestBody};
use crate::modules::client_body::{self, Buffered, Plan};
use crate::upstream::driver::{Exchanged, Failure, Gave, Protocol, Try};
use crate::upstream::next::NextUpstream;
use crate::upstream::response::UpstreamHead;
use crate::upstream::{PeerAddr, UpConn, Upstream, UpstreamVars};
use bytes::{Bytes, BytesMut};
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

/// The request head every attempt of a request sends.
pub struct Call {
    method: http::Method,
    uri: http::Uri,
    headers: HeaderMap,
}

impl Call {
    /// `method` and `path` (with its arguments) on `authority`, over TLS or
    /// not, with `headers`. A unix socket's address, which is no authority,
    /// goes as `localhost`.
    pub fn new(
        method: &[u8],
        tls: bool,
        authority: &str,
        path: &[u8],
        headers: HeaderMap,
    ) -> Result<Call, String> {
        let method = http::Method::from_bytes(method).map_err(|_| "invalid method".to_string())?;
        let scheme = if tls { "https" } else { "http" };
        let uri = |authority: &str| {
            http::Uri::builder()
                .scheme(scheme)
                .authority(authority)
                .path_and_query(path)
                .build()
        };
        let uri = uri(authority)
            .or_else(|_| uri("localhost"))
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
pub fn append(h: &mut HeaderMap, name: &[u8], value: &[u8]) {
    if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
        h.append(n, v);
    }
}

/// What a handler's exchange sends, and its settings.
pub struct Ask<'a> {
    pub call: &'a Call,
    pub plan: &'a Plan,
    /// The scheme log lines name the peer with (`grpc`, `https`, …).
    pub scheme: &'static str,
    /// The TLS tag of the connections (0: cleartext): sessions made with
    /// other TLS settings or names are not taken.
    pub tag: u64,
    pub send_timeout: Duration,
    pub read_timeout: Duration,
    /// The largest reply head taken (`*_buffer_size`).
    pub buffer_size: usize,
    /// A client that leaves while the reply's head is awaited ends the
    /// exchange (499): `*_ignore_client_abort off`.
    pub watch: bool,
}

/// A handler that speaks HTTP/2 to its peers.
pub trait Handler {
    fn ask(&self) -> &Ask<'_>;

    /// The peer as log lines name it (`scheme://addr` by default).
    fn upstream_name(&self, addr: &str, out: &mut String) {
        out.push_str(self.ask().scheme);
        out.push_str("://");
        out.push_str(addr);
    }

    /// The response made of a reply. When the reply's status is one the
    /// handler's `next_upstream` lists ([`Reply::fails`]), the attempt
    /// fails carrying it: the client gets it when no other peer is tried.
    fn answer(&self, req: &Request<'_>, reply: Reply) -> Response;

    /// The fields of a 103 (Early Hints) reply that go to the client
    /// (`early_hints`): those the handler's rules pass of a reply.
    fn hints(&self, req: &Request<'_>, head: &UpstreamHead) -> Vec<(&'static str, Value)>;
}

/// A [`Handler`] as the driver's protocol.
pub struct Over<H>(pub H);

impl<H: Handler> Protocol for Over<H> {
    type Reply = Response;

    fn scheme(&self) -> &str {
        self.0.ask().scheme
    }

    fn upstream_name(&self, addr: &str, out: &mut String) {
        self.0.upstream_name(addr, out)
    }

    async fn exchange(
        &self,
        req: &Request<'_>,
        at: &Try<'_>,
        conn: UpConn,
        body: &mut dyn RequestBody,
    ) -> Result<Response, Gave<Response>> {
        let session = session(self.0.ask(), conn).await?;
        exchange_on(&self.0, req, at, session, false, body).await
    }

    /// A session kept from an earlier exchange with the peer (`keepalive`
    /// in the upstream block), a stream at a time as nginx.
    fn kept<'a>(
        &'a self,
        req: &'a Request<'_>,
        at: &'a Try<'_>,
        body: &'a mut dyn RequestBody,
    ) -> Option<Exchanged<'a, Response>> {
        let session = take(at.up, &key(at, self.0.ask().tag))?;
        Some(Box::pin(exchange_on(&self.0, req, at, session, true, body)))
    }
}

/// One exchange on `session` and the handler's response to it (see
/// [`call`]).
async fn exchange_on<H: Handler>(
    h: &H,
    req: &Request<'_>,
    at: &Try<'_>,
    session: Session,
    kept: bool,
    body: &mut dyn RequestBody,
) -> Result<Response, Gave<Response>> {
    let pass = |head: &UpstreamHead| h.hints(req, head);
    let hints: Option<&Hints> = crate::modules::early_hints::enabled(req).then_some(&pass);
    let reply = call(h.ask(), at, session, kept, body, hints).await?;
    let fails = reply.fails;
    let resp = h.answer(req, reply);
    match fails {
        Some(kind) => Err(Gave::Fail(Failure {
            kind,
            code: resp.status,
            msg: String::new(),
            stale: false,
            reply: Some(resp),
        })),
        None => Ok(resp),
    }
}

/// An HTTP/2 connection to a peer as the exchanges use it: a stream at a time.
struct Session {
    send: SendRequest<Bytes>,
    /// Exchanges made on it so far (`keepalive_requests`).
    uses: u64,
}

/// Where a session is kept between exchanges: the upstream (by address: one
/// made for a request has no `keepalive`), the peer's address (an upstream
/// made by a later load may take the same place), the TLS tag.
type Key = (usize, PeerAddr, u64);

fn key(at: &Try<'_>, tag: u64) -> Key {
    (
        Arc::as_ptr(at.up) as usize,
        at.up.peer_addr(at.peer).into_owned(),
        tag,
    )
}

/// A session idle since an exchange ended, kept until `until`.
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
fn take(up: &Upstream, key: &Key) -> Option<Session> {
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

/// Keep `session`, whose exchange ended cleanly, for the next one.
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
pub fn trim_idle() {
    let now = Instant::now();
    KEPT.with(|k| {
        k.borrow_mut().retain(|_, list| {
            list.retain(|i| i.until > now);
            !list.is_empty()
        })
    });
}

/// A new session over `conn`: the HTTP/2 handshake, its frames moved by a
/// task of the worker until the session is dropped or the peer closes it.
async fn session(ask: &Ask<'_>, conn: UpConn) -> Result<Session, Fail> {
    let mut builder = h2::client::Builder::new();
    // As nginx: replies are decoded without a dynamic table (a peer that
    // sizes one fails), and nothing is pushed.
    builder.header_table_size(0).enable_push(false);
    // Heads up to twice the buffer size (64k at least) are read, so that one
    // over it is refused by name (`call`); larger ones the HTTP/2 layer
    // refuses.
    builder.max_header_list_size((2 * ask.buffer_size).max(65536) as u32);
    let (send, connection) =
        tokio::time::timeout(ask.send_timeout, builder.handshake::<_, Bytes>(conn))
            .await
            .map_err(|_| io_fail(&timed_out(), "sending request to upstream"))?
            .map_err(|e| h2_fail(&e, "sending request to upstream"))?;
    tokio::task::spawn_local(async move {
        let _ = connection.await;
    });
    Ok(Session { send, uses: 0 })
}

/// A reply: its head, and its body to come.
pub struct Reply {
    /// The status and fields (also the request's `$upstream_http_*`).
    pub head: UpstreamHead,
    /// The status is one the handler's `next_upstream` moves on from.
    pub fails: Option<NextUpstream>,
    body: ReplyBody,
    /// The head ended the stream: no body follows.
    end: bool,
}

impl Reply {
    /// The reply's Content-Length.
    pub fn declared(&self) -> Option<u64> {
        self.head
            .header("content-length")
            .and_then(|v| v.trim().parse().ok())
    }

    /// `resp`'s body: the reply's as a stream (`unbuffered`: passed on as
    /// it comes), its trailers passed to the client's protocol with
    /// `trailers`. A head that ended the stream gives no body but the length
    /// it declares (a reply to HEAD).
    pub fn into_body(
        self,
        req: &Request<'_>,
        resp: &mut Response,
        trailers: bool,
        unbuffered: bool,
    ) {
        let len = self.declared();
        let mut body = self.body;
        if self.end {
            resp.body = match len {
                Some(n) if n > 0 => Body::Stream {
                    stream: Box::new(body),
                    len: Some(n),
                },
                _ => Body::Empty,
            };
            return;
        }
        if trailers {
            let t = Rc::new(PassedTrailers::default());
            req.state.ext.insert(t.clone());
            resp.trailers = Some(passed_trailers);
            body.trailers = Some(t);
        }
        body.unbuffered = unbuffered;
        resp.body = Body::Stream {
            stream: Box::new(body),
            len,
        };
    }
}

/// The fields a 103 (Early Hints) reply passes to the client.
type Hints<'h> = dyn Fn(&UpstreamHead) -> Vec<(&'static str, Value)> + 'h;

/// The client's side of an exchange while the reply is awaited: lent to the
/// body's sending, to the watch for a client that leaves, or to an early
/// hint. A wait that borrows it ([`Lent`]) gives it back when it ends or
/// is dropped.
type Client<'b> = std::cell::Cell<Option<&'b mut dyn RequestBody>>;

/// The client's side taken from its cell for one wait.
struct Lent<'c, 'b> {
    cell: &'c Client<'b>,
    body: Option<&'b mut dyn RequestBody>,
}

impl<'c, 'b> Lent<'c, 'b> {
    fn take(cell: &'c Client<'b>) -> Self {
        Lent {
            body: cell.take(),
            cell,
        }
    }
}

impl Drop for Lent<'_, '_> {
    fn drop(&mut self) {
        if let Some(b) = self.body.take() {
            self.cell.set(Some(b));
        }
    }
}

/// Early hints that came while the body was being sent go to the client
/// once it is free.
async fn send_hints(client: &Client<'_>, waiting: &mut Vec<Vec<(&'static str, Value)>>) {
    let mut lent = Lent::take(client);
    if let Some(b) = lent.body.as_deref_mut() {
        for fields in waiting.drain(..) {
            b.early_hints(&fields).await;
        }
    }
}

/// What the reply stream gave: a 103 (Early Hints) head, or the reply's.
enum Next {
    Hint(http::Response<()>),
    Reply(Result<http::Response<RecvStream>, h2::Error>),
}

/// One exchange on `session` (`kept`: one kept from an earlier exchange,
/// whose failure before the request went out is `stale`): the head, the
/// body sent as planned, and the reply's head. With `hints`, the 103
/// (Early Hints) replies before it go to the client as they come (those
/// that come while the body is sent, once it is). The session is kept for
/// the next exchange once this one ends cleanly.
async fn call(
    ask: &Ask<'_>,
    at: &Try<'_>,
    session: Session,
    kept: bool,
    body: &mut dyn RequestBody,
    hints: Option<&Hints<'_>>,
) -> Result<Reply, Gave<Response>> {
    let t = ask.send_timeout;
    let stale = |mut f: Fail| {
        f.stale = kept;
        f
    };
    let Session { send, uses } = session;
    let mut send = tokio::time::timeout(t, send.ready())
        .await
        .map_err(|_| io_fail(&timed_out(), "sending request to upstream"))?
        .map_err(|e| stale(h2_fail(&e, "sending request to upstream")))?;
    let no_body = match ask.plan {
        Plan::None => true,
        Plan::Held(b) => b.len == 0,
        Plan::Stream => false,
    };
    let (reply, stream) = send
        .send_request(ask.call.request(), no_body)
        .map_err(|e| stale(h2_fail(&e, "sending request to upstream")))?;
    let session = Session { send, uses };
    // The body goes while the reply is awaited: an upstream may answer
    // (an error, say) before it has read it all. Once it is sent, the read
    // timeout runs and a client that leaves ends the wait (499), as nginx.
    // Lent to the sending, then to the watch once the sending is over.
    let body: Client<'_> = std::cell::Cell::new(Some(body));
    let mut waiting = Vec::new();
    let head = {
        let sending = async {
            match ask.plan {
                Plan::None => Ok(()),
                Plan::Held(b) => send_held(stream, b, t).await,
                Plan::Stream => {
                    let mut lent = Lent::take(&body);
                    let b = lent
                        .body
                        .as_deref_mut()
                        .expect("the sending has the body first");
                    send_stream(stream, b, t).await
                }
            }
        };
        let mut sending = std::pin::pin!(sending);
        let mut reply = reply;
        let mut hinting = hints.is_some();
        let mut body_done = no_body;
        let deadline = tokio::time::sleep(ask.read_timeout);
        let mut deadline = std::pin::pin!(deadline);
        let head = loop {
            let next = std::future::poll_fn(|cx| {
                if hinting {
                    match reply.poll_informational(cx) {
                        Poll::Ready(Some(Ok(h))) => return Poll::Ready(Next::Hint(h)),
                        Poll::Ready(_) => hinting = false,
                        Poll::Pending => {}
                    }
                }
                std::pin::Pin::new(&mut reply).poll(cx).map(Next::Reply)
            });
            tokio::select! {
                biased;
                r = &mut sending, if !body_done => {
                    body_done = true;
                    deadline.as_mut().reset(tokio::time::Instant::now() + ask.read_timeout);
                    // A failed client is the request's end; an upstream
                    // that stopped taking the body may still answer.
                    if let Err(f) = r && f.kind == NextUpstream::OFF {
                        return Err(f.into());
                    }
                    send_hints(&body, &mut waiting).await;
                }
                n = next => match n {
                    Next::Reply(r) => break r,
                    Next::Hint(h) => {
                        if let Some(hints) = hints {
                            let head = UpstreamHead::of_fields(
                                103,
                                h.headers().iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
                            );
                            waiting.push(hints(&head));
                            send_hints(&body, &mut waiting).await;
                        }
                    }
                },
                () = &mut deadline, if body_done => {
                    return Err(io_fail(&timed_out(), "reading response header from upstream").into());
                }
                // The sending is over: the body is free to be watched.
                () = async {
                    let mut lent = Lent::take(&body);
                    match lent.body.as_deref_mut() {
                        Some(b) => b.gone().await,
                        None => std::future::pending().await,
                    }
                }, if body_done && ask.watch => {
                    return Err(Gave::Left);
                }
            }
        };
        // The reply came first: the rest of the body still goes (a stream
        // the upstream has closed refuses it, which ends the sending).
        if !body_done {
            let _ = sending.await;
            send_hints(&body, &mut waiting).await;
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
    if size > ask.buffer_size {
        return Err(Failure::new(
            NextUpstream::INVALID_HEADER,
            502,
            "upstream sent too big header while reading response header from upstream",
        )
        .into());
    }
    let status = parts.status.as_u16();
    at.status(status);
    let head = UpstreamHead::of_fields(
        status,
        parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes())),
    );
    {
        let mut v = at.vars.borrow_mut();
        v.head = Some((head.text.clone(), head.fields.clone()));
        if let Some(a) = v.attempts.last_mut() {
            a.header_ms = Some(took.as_millis() as u64);
        }
    }
    let fails = at.status_fails(status);
    // 403 and 404 move on to the next peer without counting against this one.
    let ok = fails.is_none() || matches!(status, 403 | 404);
    let end = recv.is_end_stream();
    let mut body = ReplyBody {
        recv,
        trailers: None,
        timeout: ask.read_timeout,
        scheme: ask.scheme,
        up: Some((at.up.clone(), at.peer, ok)),
        vars: at.vars.clone(),
        t0: at.t0,
        session: Some((session, key(at, ask.tag))),
        unbuffered: true,
    };
    if end {
        body.end(true);
    }
    Ok(Reply {
        head,
        fails,
        body,
        end,
    })
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

/// The client's body to the stream as it arrives: what the client has sent
/// so far in one piece (up to a frame), the last piece with END_STREAM (an
/// empty DATA frame when the end comes later, as nginx).
async fn send_stream(
    mut s: SendStream<Bytes>,
    body: &mut dyn RequestBody,
    t: Duration,
) -> Result<(), Fail> {
    // Not the peer's fault: no next upstream.
    let client_fail =
        |e: BodyError| Failure::new(NextUpstream::OFF, e.status(), "client request body failed");
    let mut next = body.chunk().await.map_err(client_fail)?;
    while let Some(first) = next.take() {
        let mut joined: Option<BytesMut> = None;
        let mut len = first.len();
        let mut end = false;
        loop {
            match client_body::now_or_never(body.chunk()) {
                None => break,
                Some(Ok(None)) => {
                    end = true;
                    break;
                }
                Some(Ok(Some(p))) if len + p.len() <= QUEUED => {
                    len += p.len();
                    joined
                        .get_or_insert_with(|| BytesMut::from(&first[..]))
                        .extend_from_slice(&p);
                }
                Some(Ok(Some(p))) => {
                    next = Some(p);
                    break;
                }
                Some(Err(e)) => return Err(client_fail(e)),
            }
        }
        let piece = joined.map_or(first, BytesMut::freeze);
        send_data(&mut s, piece, end, t).await?;
        if end {
            return Ok(());
        }
        if next.is_none() {
            next = body.chunk().await.map_err(client_fail)?;
        }
    }
    send_data(&mut s, Bytes::new(), true, t).await
}

/// A reply's DATA as the client takes it, then its trailers.
struct ReplyBody {
    recv: RecvStream,
    /// Where the trailers go for the client's protocol (`None`: dropped).
    trailers: Option<Rc<PassedTrailers>>,
    timeout: Duration,
    scheme: &'static str,
    /// The peer, told once the stream is over (false: its reply counts
    /// as a failure).
    up: Option<(Arc<Upstream>, usize, bool)>,
    vars: Rc<RefCell<UpstreamVars>>,
    /// When the attempt began (`$upstream_response_time`).
    t0: Instant,
    /// The session, kept for the next exchange when this one ends cleanly.
    session: Option<(Session, Key)>,
    unbuffered: bool,
}

impl std::fmt::Debug for ReplyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplyBody")
    }
}

impl ReplyBody {
    fn end(&mut self, ok: bool) {
        let session = self.session.take();
        if let Some((up, peer, good)) = self.up.take() {
            let now = Instant::now();
            if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
                a.response_ms = Some(now.saturating_duration_since(self.t0).as_millis() as u64);
            }
            up.finished_at(peer, ok && good, now);
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
        crate::error_log!(Error, "{msg}, upstream: \"{}://{peer}\"", self.scheme);
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
                if let Some(passed) = &self.trailers {
                    let mut kept = passed.0.borrow_mut();
                    for (n, v) in map.iter().flat_map(|m| m.iter()) {
                        if let Some(n) = crate::upstream::intern_header_name(n.as_str()) {
                            kept.push((n, String::from_utf8_lossy(v.as_bytes()).into_owned()));
                        }
                    }
                }
                self.end(true);
                Ok(None)
            }
        }
    }
}

impl BodyStream for ReplyBody {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(self.next_piece())
    }

    fn unbuffered(&self) -> bool {
        self.unbuffered
    }
}

impl Drop for ReplyBody {
    fn drop(&mut self) {
        // The client left before the end: the stream is reset when `recv`
        // goes, and the session closed; not the peer's failure.
        self.session = None;
        self.end(true);
    }
}
