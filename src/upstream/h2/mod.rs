//! HTTP/2 to peers, for the handlers that speak it: gRPC (`grpc_pass`) and
//! the proxy with `proxy_http_version 2`.
//!
//! - A session ([`session::Session`]) is vireo's HTTP/2 client over an
//!   [`UpConn`] (prior knowledge on a plain connection, ALPN `h2` over TLS),
//!   with nginx's settings: no HPACK dynamic table for replies ([`hpack`]),
//!   no server push. Each request's stream is framed in its own task; the
//!   session's reader task reads the connection for all of them. The
//!   preface and SETTINGS go in the first request's write.
//! - With `keepalive` in the upstream block, a new session is kept per
//!   worker and peer (`KEPT`, up to `keepalive` sessions a peer) and the
//!   driver offers it first ([`Protocol::kept`]) to the requests that
//!   follow, whose streams go on it side by side, up to the peer's
//!   SETTINGS_MAX_CONCURRENT_STREAMS (at most [`session::MAX_STREAMS`]):
//!   a request makes a new connection only when every kept session is
//!   full. (nginx runs one stream a connection.) A session ends after
//!   `keepalive_requests` streams, or idle for `keepalive_timeout`; one the
//!   peer closed or sent GOAWAY on takes no new stream, and a stream it
//!   refused fails `stale`, going on to a new connection.
//! - One exchange ([`call`]) sends the head ([`Call`], its header block
//!   encoded once per request) and the request body as planned ([`Plan`]):
//!   a body read whole from memory or its file, or the client's as it
//!   arrives, what is at hand in one DATA frame, streamed while the reply's
//!   head is awaited (an upstream may answer first). It
//!   gives the reply's head as an [`UpstreamHead`] (what `$upstream_http_*`
//!   and the handlers' field rules read) and its body as a stream the client
//!   connection pulls ([`Reply`]), which can hand the upstream's trailers to
//!   the client's protocol.
//! - A handler ([`Handler`]) says what it sends ([`Ask`]) and makes its
//!   response of the reply; [`Over`] makes it the driver's [`Protocol`].

mod hpack;
mod session;

use crate::core::message::response::{
    Body, BodyStream, CutShort, PassedTrailers, Response, Value, passed_trailers,
};
use crate::core::request::{BodyError, BoxFuture, Request, RequestBody};
use crate::http::fields::{is_lower_token, is_token};
use crate::modules::client_body::{self, Buffered, Plan};
use crate::upstream::driver::{Exchanged, Failure, Gave, Protocol, Try};
use crate::upstream::next::NextUpstream;
use crate::upstream::response::UpstreamHead;
use crate::upstream::{PeerAddr, UpConn, Upstream, UpstreamVars};
use bytes::{Buf, Bytes, BytesMut};
use hpack::Fields;
use rustc_hash::FxHashMap;
use session::{Broke, Event, Session, Stream};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A failed attempt.
type Fail = Failure<Response>;

fn io_fail(e: &io::Error, while_: &str) -> Fail {
    Failure::io(e, while_)
}

/// The failure of a session or its stream while doing `while_`, in nginx's
/// words.
fn broke_fail(b: Broke, while_: &str) -> Fail {
    let (kind, msg) = match b {
        Broke::Io(e) => return io_fail(&e, while_),
        Broke::Closed => (
            NextUpstream::ERROR,
            "upstream prematurely closed connection".to_string(),
        ),
        Broke::GoAway { code, .. } => (
            NextUpstream::ERROR,
            format!("upstream sent goaway with error {code}"),
        ),
        // A reset stream, or HTTP/2 the client side refuses, is an invalid
        // reply (nginx's).
        Broke::Reset(code) => (
            NextUpstream::INVALID_HEADER,
            format!("upstream rejected request with error {code}"),
        ),
        Broke::TooBig => (
            NextUpstream::INVALID_HEADER,
            "upstream sent too big header".to_string(),
        ),
        Broke::Protocol(why) => (
            NextUpstream::INVALID_HEADER,
            format!("upstream sent invalid HTTP/2 ({why})"),
        ),
        Broke::Cancelled => (NextUpstream::OFF, "client request body failed".to_string()),
    };
    Failure::new(kind, 502, format!("{msg} while {while_}"))
}

/// Whether a failure on a kept session says the peer did not take the
/// request: it refused the stream, or closed a session that carried no
/// other stream when this one opened (as an idle connection closes; with
/// others in flight, the peer may have taken it). Such an attempt goes on
/// as one on a stale connection.
fn unprocessed(b: &Broke, alone: bool) -> bool {
    match b {
        Broke::GoAway { refused: true, .. } | Broke::Reset(7) => true,
        Broke::Closed => alone,
        _ => false,
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "upstream timed out")
}

/// A request's fields for the upstream, HPACK-encoded as they are added.
#[derive(Default)]
pub struct CallFields(Vec<u8>);

/// The request head every attempt of a request sends: its header block.
pub struct Call {
    block: Vec<u8>,
}

/// A byte of a field value HTTP/2 cannot carry: controls but tab, DEL.
fn bad_value_byte(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

impl Call {
    /// `method` and `path` (with its arguments) on `authority`, over TLS or
    /// not, with `fields`. A unix socket's address, which is no authority,
    /// goes as `localhost`.
    pub fn new(
        method: &[u8],
        tls: bool,
        authority: &str,
        path: &[u8],
        fields: CallFields,
    ) -> Result<Call, String> {
        if !is_token(method) {
            return Err("invalid method".to_string());
        }
        if !path.starts_with(b"/") || path.iter().any(|&b| b <= b' ' || b == 0x7f) {
            return Err("invalid request URI for the upstream (invalid path)".to_string());
        }
        let authority = match authority.parse::<http::uri::Authority>() {
            Ok(_) => authority,
            Err(_) => "localhost",
        };
        let mut block = Vec::with_capacity(64 + path.len() + authority.len() + fields.0.len());
        hpack::encode_method(&mut block, method);
        block.push(if tls { 0x87 } else { 0x86 });
        hpack::encode(&mut block, b":authority", authority.as_bytes());
        hpack::encode(&mut block, b":path", path);
        block.extend_from_slice(&fields.0);
        Ok(Call { block })
    }
}

/// A field for the upstream (its name lowercased); one that HTTP/2 cannot
/// carry is left out.
pub fn append(h: &mut CallFields, name: &[u8], value: &[u8]) {
    if !is_token(name) || value.iter().any(|&b| bad_value_byte(b)) {
        return;
    }
    let lower;
    let name = match name.iter().any(u8::is_ascii_uppercase) {
        true => {
            lower = name.to_ascii_lowercase();
            &lower[..]
        }
        false => name,
    };
    hpack::encode(&mut h.0, name, value);
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
        // Heads up to twice the buffer size (64k at least) are read, so that
        // one over it is refused by name (`call`).
        let max_block = (2 * self.0.ask().buffer_size).max(65536);
        let session = Session::start(conn, max_block);
        // The requests waiting for this connection take it once the peer's
        // SETTINGS are in; a session not kept lets them go at once.
        let claim = at.held.take();
        if keep(at.up, key(at, self.0.ask().tag), &session) {
            session.hold_until_settled(claim);
        }
        exchange_on(&self.0, req, at, &session, false, body).await
    }

    /// A session with the peer that takes another stream (`keepalive` in
    /// the upstream block): streams go side by side on it. When there is
    /// none but another request is making one, the request waits for it;
    /// when there is none at all, it claims the connection it is about to
    /// make, for the requests that come meanwhile.
    fn kept<'a>(
        &'a self,
        req: &'a Request<'_>,
        at: &'a Try<'_>,
        body: &'a mut dyn RequestBody,
    ) -> Option<Exchanged<'a, Response>> {
        if at.up.keepalive == 0 {
            return None;
        }
        let key = key(at, self.0.ask().tag);
        if let Some(session) = take(&key) {
            return Some(Box::pin(async move {
                Some(exchange_on(&self.0, req, at, &session, true, body).await)
            }));
        }
        let Some(opening) = opening(&key) else {
            *at.held.borrow_mut() = Some(Box::new(Claim::new(key)));
            return None;
        };
        Some(Box::pin(async move {
            opening.done().await;
            let session = take(&key)?;
            Some(exchange_on(&self.0, req, at, &session, true, body).await)
        }))
    }
}

/// One exchange on `session` and the handler's response to it (see
/// [`call`]).
async fn exchange_on<H: Handler>(
    h: &H,
    req: &Request<'_>,
    at: &Try<'_>,
    session: &Session,
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

/// A session the worker keeps with a peer, with its upstream's limits.
struct Kept {
    session: Session,
    /// `keepalive_timeout` (idle) and `keepalive_requests` (streams).
    timeout: Duration,
    max_uses: u64,
}

thread_local! {
    /// The worker's sessions, per peer: at most the upstream's `keepalive`
    /// each, busy or idle, the idle ones for its `keepalive_timeout`.
    static KEPT: RefCell<FxHashMap<Key, Vec<Kept>>> = RefCell::new(FxHashMap::default());
}

/// A session with the peer of `key` that takes another stream now, the
/// first such of those kept: a new connection is made only when every kept
/// session is full.
fn take(key: &Key) -> Option<Session> {
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let list = k.get_mut(key)?;
        list.retain(|kept| !kept.session.over(kept.max_uses));
        let kept = list
            .iter()
            .find(|kept| kept.session.can_open(kept.max_uses))?;
        Some(kept.session.clone())
    })
}

/// Keep a new `session` for the streams of later requests, in place of an
/// idle one when the peer has its `keepalive` sessions already; with no
/// room (every one busy) it serves its own request only. Whether it is
/// kept.
fn keep(up: &Upstream, key: Key, session: &Session) -> bool {
    if up.keepalive == 0 {
        return false;
    }
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let list = k.entry(key).or_default();
        list.retain(|kept| !kept.session.over(kept.max_uses));
        if list.len() >= up.keepalive {
            let Some(idle) = list.iter().position(|k| k.session.idle_since().is_some()) else {
                return false;
            };
            list.remove(idle);
        }
        list.push(Kept {
            session: session.clone(),
            timeout: up.keepalive_timeout,
            max_uses: up.keepalive_requests,
        });
        true
    })
}

/// A connection being made to a peer for a session: the requests that come
/// meanwhile wait for it rather than make their own.
#[derive(Default)]
struct Opening {
    done: std::cell::Cell<bool>,
    notify: tokio::sync::Notify,
}

impl Opening {
    /// Until the connection is a session that knows the peer's SETTINGS,
    /// or came to nothing.
    async fn done(&self) {
        while !self.done.get() {
            self.notify.notified().await;
        }
    }
}

thread_local! {
    /// The worker's connections being made for sessions, per peer.
    static OPENING: RefCell<FxHashMap<Key, std::rc::Weak<Opening>>> =
        RefCell::new(FxHashMap::default());
}

/// The connection being made to the peer of `key`, if one is.
fn opening(key: &Key) -> Option<Rc<Opening>> {
    OPENING.with(|o| o.borrow().get(key).and_then(std::rc::Weak::upgrade))
}

/// A request's claim on the connection it makes: held by its attempt (and
/// then by its session, until the peer's SETTINGS come); let go, the
/// waiting requests are woken.
struct Claim {
    key: Key,
    opening: Rc<Opening>,
}

impl Claim {
    fn new(key: Key) -> Claim {
        let opening = Rc::new(Opening::default());
        OPENING.with(|o| o.borrow_mut().insert(key.clone(), Rc::downgrade(&opening)));
        Claim { key, opening }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.opening.done.set(true);
        self.opening.notify.notify_waiters();
        // The key's entry is this claim's: another is made only once it is
        // gone.
        let _ = OPENING.try_with(|o| o.borrow_mut().remove(&self.key));
    }
}

/// Once a second: sessions idle past their upstream's `keepalive_timeout`,
/// or of no further use, are closed, the idle others let their read
/// buffers go.
pub fn trim_idle() {
    let now = crate::core::clock::now();
    KEPT.with(|k| {
        k.borrow_mut().retain(|_, list| {
            list.retain(|kept| {
                let idle = kept.session.idle_since();
                if idle.is_some() {
                    kept.session.rest();
                }
                !kept.session.over(kept.max_uses)
                    && idle.is_none_or(|t| now.saturating_duration_since(t) < kept.timeout)
            });
            !list.is_empty()
        })
    });
}

/// A reply: its head, and its body to come.
pub struct Reply {
    /// The status and fields (also the request's `$upstream_http_*`).
    pub head: UpstreamHead,
    /// The status is one the handler's `next_upstream` moves on from.
    pub fails: Option<NextUpstream>,
    body: Box<ReplyBody>,
    /// The head ended the stream: no body follows.
    end: bool,
    /// The rest of the client's body, to go on beside the reply.
    rest: Option<Box<dyn crate::core::request::Duplex>>,
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
        if let Some(rest) = self.rest {
            resp.own.get_or_insert_default().duplex = Some(rest);
        }
        let mut body = self.body;
        if self.end {
            resp.body = match len {
                Some(n) if n > 0 => Body::Stream {
                    stream: body,
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
        resp.body = Body::Stream { stream: body, len };
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

/// A reply's head: its status and its fields but the pseudo-fields;
/// `Err` says what makes it no head.
fn head_of(f: &Fields) -> Result<UpstreamHead, Broke> {
    let mut fields = f.iter();
    let status = match fields.next() {
        Some((b":status", v)) if v.len() == 3 && v.iter().all(u8::is_ascii_digit) => {
            (v[0] - b'0') as u16 * 100 + (v[1] - b'0') as u16 * 10 + (v[2] - b'0') as u16
        }
        _ => return Err(Broke::Protocol("no valid :status".to_string())),
    };
    // A pseudo-field after `:status` is no token: refused with the rest.
    for (n, v) in fields.clone() {
        let bad = match (is_lower_token(n), v.iter().any(|&b| bad_value_byte(b))) {
            (false, _) => "header name",
            (true, true) => "value of",
            (true, false) => continue,
        };
        let name = String::from_utf8_lossy(n);
        return Err(Broke::Protocol(format!("invalid {bad} \"{name}\"")));
    }
    let fields = fields.map(|(n, v)| (std::str::from_utf8(n).expect("tokens are ASCII"), v));
    Ok(UpstreamHead::of_fields(status, fields))
}

/// One exchange on `session` (`kept`: one kept from an earlier exchange,
/// whose failure before the peer took the request is `stale`): the head,
/// the body sent as planned, and the reply's head. With `hints`, the 103
/// (Early Hints) replies before it go to the client as they come (those
/// that come while the body is sent, once it is). The session is kept for
/// the next exchange once this one ends cleanly.
async fn call(
    ask: &Ask<'_>,
    at: &Try<'_>,
    session: &Session,
    kept: bool,
    body: &mut dyn RequestBody,
    hints: Option<&Hints<'_>>,
) -> Result<Reply, Gave<Response>> {
    let t = ask.send_timeout;
    let stale = |b: Broke, alone: bool, while_: &str| {
        let again = kept && unprocessed(&b, alone);
        let mut f = broke_fail(b, while_);
        f.stale = again;
        f
    };
    let no_body = match ask.plan {
        Plan::None => true,
        Plan::Held(b) => b.len == 0,
        Plan::Stream => false,
    };
    let stream = session
        .open(&ask.call.block, no_body)
        .map_err(|b| stale(b, true, "sending request to upstream"))?;
    // A reply that comes first leaves the rest of a client's body to go on
    // beside it, where the client's protocol can carry both at once.
    let duplex = body.full_duplex();
    let mut out = Outgoing::default();
    // The body goes while the reply is awaited: an upstream may answer
    // (an error, say) before it has read it all. Once it is sent, the read
    // timeout runs and a client that leaves ends the wait (499), as nginx.
    // Lent to the sending, then to the watch once the sending is over.
    let body: Client<'_> = std::cell::Cell::new(Some(body));
    let mut waiting = Vec::new();
    // What the stream gave after its head while the body still went, and
    // how the reading ended then.
    let mut early = VecDeque::new();
    let mut broke = None;
    let (head, end, body_done) = {
        let sending = async {
            match ask.plan {
                Plan::None => flush(&stream, t).await,
                Plan::Held(b) => send_held(&stream, b, t).await,
                Plan::Stream => {
                    let mut lent = Lent::take(&body);
                    let b = lent
                        .body
                        .as_deref_mut()
                        .expect("the sending has the body first");
                    send_stream(&stream, b, t, &mut out).await
                }
            }
        };
        let mut sending = std::pin::pin!(sending);
        let mut body_done = false;
        let deadline = tokio::time::sleep(ask.read_timeout);
        let mut deadline = std::pin::pin!(deadline);
        let event = || std::future::poll_fn(|cx| stream.poll_event(cx));
        let (head, end) = loop {
            tokio::select! {
                biased;
                r = &mut sending, if !body_done => {
                    body_done = true;
                    deadline.as_mut().reset(tokio::time::Instant::now() + ask.read_timeout);
                    // A failed client is the request's end; an upstream
                    // that stopped taking the body may still answer.
                    if let Err(f) = r
                        && f.kind == NextUpstream::OFF
                    {
                        return Err(f.into());
                    }
                    send_hints(&body, &mut waiting).await;
                }
                e = event() => match e {
                    Err(b) => {
                        let alone = stream.opened_alone();
                        return Err(stale(b, alone, "reading response header from upstream").into());
                    }
                    Ok(Event::Data(..)) => {
                        let b = Broke::Protocol("DATA before the reply's head".to_string());
                        return Err(broke_fail(b, "reading response header from upstream").into());
                    }
                    Ok(Event::Head(fields, end)) => {
                        let head = head_of(&fields)
                            .map_err(|b| broke_fail(b, "reading response header from upstream"))?;
                        if !(100..200).contains(&head.status) || head.status == 101 {
                            break (head, end);
                        }
                        if end {
                            let b = Broke::Protocol("an informational head ends the stream".into());
                            return Err(broke_fail(b, "reading response header from upstream").into());
                        }
                        if let Some(hints) = hints {
                            waiting.push(hints(&head));
                            if body_done {
                                send_hints(&body, &mut waiting).await;
                            }
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
        // The reply came first: the rest of the body still goes, beside the
        // reply for a full-duplex client, else before it, the stream's
        // frames read meanwhile (the window's updates among them); a stream
        // the upstream has ended or reset ends the sending.
        while !body_done && !duplex {
            tokio::select! {
                biased;
                _ = &mut sending => body_done = true,
                e = event() => match e {
                    Ok(e) => early.push_back(e),
                    Err(b) => {
                        broke = Some(b);
                        break;
                    }
                },
            }
        }
        (head, end, body_done)
    };
    send_hints(&body, &mut waiting).await;
    let stream = Rc::new(stream);
    let rest = (duplex && !body_done).then(|| {
        Box::new(Rest {
            stream: stream.clone(),
            out,
            timeout: t,
        }) as Box<dyn crate::core::request::Duplex>
    });
    let took = crate::core::clock::since(at.t0);
    at.up.responded(at.peer, took);
    let size: usize = head
        .fields
        .iter()
        .map(|&((a, b), (c, d))| (b - a + d - c) as usize)
        .sum();
    if size > ask.buffer_size {
        return Err(broke_fail(Broke::TooBig, "reading response header from upstream").into());
    }
    let status = head.status;
    at.status(status);
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
    let left = match end {
        true => None,
        false => head
            .header("content-length")
            .and_then(|v| v.trim().parse().ok()),
    };
    let mut body = Box::new(ReplyBody {
        stream: Some(stream),
        early,
        broke,
        left,
        trailers: None,
        timeout: ask.read_timeout,
        scheme: ask.scheme,
        up: Some((at.up.clone(), at.peer, ok)),
        vars: at.vars.clone(),
        t0: at.t0,
        unbuffered: true,
    });
    if end {
        body.end(true);
    }
    Ok(Reply {
        head,
        fails,
        body,
        end,
        rest,
    })
}

/// Write what the session has queued, within `t`.
async fn flush(s: &Stream, t: Duration) -> Result<(), Fail> {
    tokio::time::timeout(t, std::future::poll_fn(|cx| s.poll_flush(cx)))
        .await
        .map_err(|_| io_fail(&timed_out(), "sending request to upstream"))?
        .map_err(|e| io_fail(&e, "sending request to upstream"))
}

/// Send `data` (the last piece when `end`) as the windows take it, each
/// wait for them within `t`, `data` advanced past what is queued (so a
/// sending cut short keeps the rest). A piece the windows take whole is
/// only queued when `more` (another comes at once): it goes in the write
/// of the next. A stream that takes no more DATA (the peer reset it) takes
/// nothing.
async fn send_data(
    s: &Stream,
    data: &mut Bytes,
    end: bool,
    more: bool,
    t: Duration,
) -> Result<(), Fail> {
    loop {
        if s.sending_over() {
            data.clear();
            return Ok(());
        }
        let room = s.room();
        if room == 0 && !data.is_empty() {
            flush(s, t).await?;
            tokio::time::timeout(t, std::future::poll_fn(|cx| s.poll_room(cx)))
                .await
                .map_err(|_| io_fail(&timed_out(), "sending request to upstream"))?;
            continue;
        }
        let n = room.min(data.len());
        let last = n == data.len();
        s.data(&data[..n], end && last);
        data.advance(n);
        if last {
            return match more {
                true => Ok(()),
                false => flush(s, t).await,
            };
        }
    }
}

async fn send_held(s: &Stream, b: &Buffered, t: Duration) -> Result<(), Fail> {
    let mut off = 0;
    loop {
        let piece = b.piece_at(off).map_err(|e| Failure::body_file(&e))?;
        let Some(mut piece) = piece else {
            return flush(s, t).await;
        };
        off += piece.len() as u64;
        send_data(s, &mut piece, off >= b.len, off < b.len, t).await?;
    }
}

/// The most bytes of the client's body gathered into one piece.
const PIECE: usize = 16 * 1024;

/// The client's body on its way to the stream: what was read from the
/// client and is not yet queued. It outlives a sending cut short (the reply
/// came first), so that the rest goes on beside the reply ([`Rest`]).
#[derive(Default)]
struct Outgoing {
    /// The piece being sent, what the windows have not taken of it.
    piece: Bytes,
    /// A piece read after it, too big to join it.
    next: Option<Bytes>,
    /// The client's body has ended: the last piece carries END_STREAM.
    ended: bool,
}

/// The client's body to the stream as it arrives: what the client has sent
/// so far in one piece (up to a frame), the last piece with END_STREAM (an
/// empty DATA frame when the end comes later, as nginx). The head waits
/// for a first piece at hand, to go in one write with it. Every wait keeps
/// its state in `out`: dropped at any of them, the sending loses nothing.
async fn send_stream(
    s: &Stream,
    body: &mut dyn RequestBody,
    t: Duration,
    out: &mut Outgoing,
) -> Result<(), Fail> {
    // Not the peer's fault: no next upstream.
    let client_fail =
        |e: BodyError| Failure::new(NextUpstream::OFF, e.status(), "client request body failed");
    loop {
        if out.piece.is_empty() {
            let first = match out.next.take() {
                Some(p) => Some(p),
                None if out.ended => None,
                None => match client_body::now_or_never(body.chunk()) {
                    Some(r) => r.map_err(client_fail)?,
                    None => {
                        flush(s, t).await?;
                        body.chunk().await.map_err(client_fail)?
                    }
                },
            };
            let Some(first) = first else {
                out.ended = true;
                return send_data(s, &mut Bytes::new(), true, false, t).await;
            };
            // What else the client has sent, joined up to a piece.
            let mut joined: Option<BytesMut> = None;
            let mut len = first.len();
            while !out.ended && out.next.is_none() {
                match client_body::now_or_never(body.chunk()) {
                    None => break,
                    Some(Ok(None)) => out.ended = true,
                    Some(Ok(Some(p))) if len + p.len() <= PIECE => {
                        len += p.len();
                        joined
                            .get_or_insert_with(|| BytesMut::from(&first[..]))
                            .extend_from_slice(&p);
                    }
                    Some(Ok(Some(p))) => out.next = Some(p),
                    Some(Err(e)) => return Err(client_fail(e)),
                }
            }
            out.piece = joined.map_or(first, BytesMut::freeze);
        }
        let end = out.ended && out.next.is_none();
        send_data(s, &mut out.piece, end, false, t).await?;
        if end {
            return Ok(());
        }
    }
}

/// The rest of the client's body, sent on the stream beside the reply
/// (`OwnFields::duplex`). A client's body that fails, or a wait for the
/// windows past `send_timeout`, gives the stream up: the reply ends too.
struct Rest {
    stream: Rc<Stream>,
    out: Outgoing,
    timeout: Duration,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rest")
    }
}

impl crate::core::request::Duplex for Rest {
    fn send<'a>(mut self: Box<Self>, body: &'a mut dyn RequestBody) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Rest {
                stream,
                out,
                timeout,
            } = &mut *self;
            if let Err(f) = send_stream(stream, body, *timeout, out).await {
                match f.kind == NextUpstream::OFF {
                    true => crate::error_log!(Info, "{} beside the reply", f.msg),
                    false => crate::error_log!(Error, "{} beside the reply", f.msg),
                }
                stream.cancel();
            }
        })
    }
}

/// A reply's DATA as the client takes it, then its trailers.
struct ReplyBody {
    /// The stream, until the reply ends (or is left); shared with the rest
    /// of the client's body going on beside it.
    stream: Option<Rc<Stream>>,
    /// What the stream gave while the request's body still went, and how
    /// its reading ended then.
    early: VecDeque<Event>,
    broke: Option<Broke>,
    /// The reply's Content-Length not yet received.
    left: Option<u64>,
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
    unbuffered: bool,
}

impl std::fmt::Debug for ReplyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplyBody")
    }
}

impl ReplyBody {
    fn end(&mut self, ok: bool) {
        // A stream that did not end both ways is reset; the session goes on.
        self.stream = None;
        if let Some((up, peer, good)) = self.up.take() {
            let now = crate::core::clock::now();
            if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
                a.response_ms = Some(now.saturating_duration_since(self.t0).as_millis() as u64);
            }
            up.finished_at(peer, ok && good, now);
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

    /// The stream's next event: one read while the body went, else one
    /// read now within the read timeout.
    async fn event(&mut self) -> io::Result<Event> {
        if let Some(e) = self.early.pop_front() {
            return Ok(e);
        }
        let read = match (self.broke.take(), self.stream.as_ref()) {
            (Some(b), _) => Err(b),
            (None, Some(s)) => {
                let r = std::future::poll_fn(|cx| s.poll_event(cx));
                match tokio::time::timeout(self.timeout, r).await {
                    Ok(r) => r,
                    Err(_) => return Err(self.premature(timed_out())),
                }
            }
            (None, None) => Err(Broke::Closed),
        };
        read.map_err(|b| {
            let e = match b {
                // The rest of the client's body failed beside the reply
                // (logged there): not the peer's failure.
                Broke::Cancelled => {
                    self.end(true);
                    return CutShort::wrap(io::Error::other("client request body failed"));
                }
                Broke::Io(e) => e,
                Broke::Closed => io::Error::from(io::ErrorKind::UnexpectedEof),
                Broke::GoAway { code, .. } => io::Error::other(format!("goaway with error {code}")),
                Broke::Reset(code) => io::Error::other(format!("stream reset with error {code}")),
                Broke::TooBig => io::Error::other("too big trailers"),
                Broke::Protocol(why) => io::Error::other(why),
            };
            self.premature(e)
        })
    }

    async fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            if self.up.is_none() {
                return Ok(None);
            }
            match self.event().await? {
                Event::Data(b, end) => {
                    if let Some(left) = &mut self.left {
                        match left.checked_sub(b.len() as u64) {
                            Some(l) if !end || l == 0 => *left = l,
                            _ => {
                                let e = io::Error::other("DATA unlike Content-Length");
                                return Err(self.premature(e));
                            }
                        }
                    }
                    if let Some(s) = &self.stream {
                        s.consumed(b.len());
                    }
                    if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
                        a.body += b.len() as u64;
                        a.received += b.len() as u64;
                    }
                    if end {
                        self.end(true);
                    }
                    if !b.is_empty() {
                        return Ok(Some(b));
                    }
                }
                Event::Head(fields, end) => {
                    if !end || fields.iter().any(|(n, _)| n.first() == Some(&b':')) {
                        let e = io::Error::other("trailers that do not end the stream");
                        return Err(self.premature(e));
                    }
                    if self.left.is_some_and(|l| l > 0) {
                        let e = io::Error::other("DATA unlike Content-Length");
                        return Err(self.premature(e));
                    }
                    if let Some(passed) = &self.trailers {
                        let mut kept = passed.0.borrow_mut();
                        for (n, v) in fields.iter() {
                            let name = std::str::from_utf8(n).ok();
                            if let Some(n) = name.and_then(crate::upstream::intern_header_name) {
                                kept.push((n, String::from_utf8_lossy(v).into_owned()));
                            }
                        }
                    }
                    self.end(true);
                    return Ok(None);
                }
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
        // The client left before the end: the stream is reset; not the
        // peer's failure.
        self.end(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused stream always goes on to a new connection; a closed
    /// session only when the stream opened on it alone (the peer may have
    /// taken it with others in flight).
    #[test]
    fn which_failures_leave_the_request_untaken() {
        let refused = Broke::GoAway {
            code: 0,
            refused: true,
        };
        assert!(unprocessed(&refused, false));
        assert!(unprocessed(&Broke::Reset(7), false));
        assert!(unprocessed(&Broke::Closed, true));
        assert!(!unprocessed(&Broke::Closed, false));
        assert!(!unprocessed(&Broke::Reset(2), true));
    }
}
