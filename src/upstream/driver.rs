//! The upstream cycle every protocol handler runs, once: choose a peer (the
//! balancing key, `queue`, `max_conns`), connect within the connect timeout
//! (a pooled keep-alive connection when there is one), hand the connection to
//! the protocol, classify its failure and decide on the next peer
//! (`*_next_upstream` with its tries and timeout, the idempotency of the
//! method, whether the body can be sent again), record each attempt for the
//! `$upstream_*` variables and end the attempt for the balancer.
//!
//! A protocol (proxy's HTTP/1.x, FastCGI, …) is a [`Protocol`]: given a
//! connected peer it sends the request, reads the reply's head and makes the
//! reply its handler goes on with, or says why the attempt failed — nginx's
//! upstream core calling a module's `create_request` and `process_header`.

use super::balance::{self, Method as Balance, Tried};
use super::next::NextUpstream;
use super::pool::{self, Bind};
use super::{Attempt, UpConn, Upstream, UpstreamVars, tls};
use crate::core::message::head::Method;
use crate::core::message::response::Response;
use crate::core::request::{BoxFuture, Peer, Request, RequestBody};
use std::cell::RefCell;
use std::future::Future;
use std::io::{self, ErrorKind};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a protocol does with one peer.
pub trait Protocol {
    /// What a successful exchange gives its handler (a response, or the
    /// state the handler makes one from).
    type Reply;

    /// The scheme log lines name a peer with (`http`, `fastcgi`, …).
    fn scheme(&self) -> &str;

    /// The peer as log lines name it in `upstream: "…"`: `scheme://addr`
    /// (`fastcgi://unix:/run/php.sock`; proxy's adds the URI).
    fn upstream_name(&self, addr: &str, out: &mut String) {
        out.push_str(self.scheme());
        out.push_str("://");
        out.push_str(addr);
    }

    /// Send the request on `conn` and read the reply's head. A failure
    /// carries its `next_upstream` kind; a reply whose status the handler's
    /// `next_upstream` lists is a failure that carries that reply (which
    /// reports the end of its attempt itself, see [`Try::hold`]).
    fn exchange<'a>(
        &'a self,
        req: &'a Request<'_>,
        at: &'a Try<'_>,
        conn: UpConn,
        body: &'a mut dyn RequestBody,
    ) -> impl Future<Output = Result<Self::Reply, Gave<Self::Reply>>> + 'a;

    /// The exchange on a connection the protocol keeps with `at`'s peer
    /// between requests itself (gRPC's HTTP/2 session), when it has one or
    /// one is being made for another request: no connection is taken or
    /// made for it, and a `stale` failure goes on to one as usual, as does
    /// a future that ends in `None` (nothing was tried: the awaited
    /// connection came to nothing or has no room). None by default.
    fn kept<'a>(
        &'a self,
        _req: &'a Request<'_>,
        _at: &'a Try<'_>,
        _body: &'a mut dyn RequestBody,
    ) -> Option<Exchanged<'a, Self::Reply>> {
        None
    }
}

/// A protocol's exchange on a connection it keeps, as a boxed future
/// (`None`: not tried, see [`Protocol::kept`]).
pub type Exchanged<'a, R> = BoxFuture<'a, Option<Result<R, Gave<R>>>>;

/// A handler's `*_next_upstream` family and timeouts.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub next_upstream: NextUpstream,
    /// `*_next_upstream_tries` (0: no limit).
    pub tries: u32,
    /// `*_next_upstream_timeout` (zero: no limit).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// The request body streams from the client as it is sent: it cannot
    /// be sent twice.
    pub streamed: bool,
}

/// How connections are made.
#[derive(Clone, Copy, Default)]
pub struct Dial<'a> {
    /// TLS to the peer.
    pub tls: Option<&'a tls::Dial>,
    /// From this local address (`*_bind`).
    pub bind: Option<Bind>,
    /// A connection of the request's own, never a pooled one (a streamed
    /// body, an upgrade, a bound address).
    pub own: bool,
    /// SO_KEEPALIVE on new connections (`*_socket_keepalive`).
    pub keepalive: bool,
}

/// One attempt on a peer, as the protocol sees it.
pub struct Try<'a> {
    pub up: &'a Arc<Upstream>,
    pub peer: usize,
    pub vars: &'a Rc<RefCell<UpstreamVars>>,
    /// When the attempt began (before connecting).
    pub t0: Instant,
    /// `*_next_upstream`: which reply statuses move on to the next peer.
    next_upstream: NextUpstream,
    /// The connection's byte counts when it was handed over.
    bytes: (u64, u64),
    /// What the protocol holds for the attempt's length (the HTTP/2
    /// client's claim on the connection it makes, which other requests
    /// wait for): let go when the attempt ends, if the protocol has not
    /// taken it back before.
    pub held: RefCell<Option<Box<dyn std::any::Any>>>,
}

impl Try<'_> {
    /// The reply's head arrived on `conn`: `$upstream_header_time`, the
    /// bytes so far, the peer's latency figures.
    pub fn head_read(&self, conn: &UpConn) {
        let took = crate::core::clock::since(self.t0);
        {
            let mut v = self.vars.borrow_mut();
            let a = v.attempts.last_mut().expect("the driver pushed it");
            a.header_ms = Some(took.as_millis() as u64);
            a.sent = conn.bytes_out() - self.bytes.1;
            a.received = conn.bytes_in() - self.bytes.0;
        }
        self.up.responded(self.peer, took);
        conn.answered(self.t0 + took);
    }

    /// The reply's status (`$upstream_status`).
    pub fn status(&self, status: u16) {
        if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
            a.status = status;
        }
    }

    /// The `next_upstream` kind of a reply with `status` when the handler
    /// moves on from such replies.
    pub fn status_fails(&self, status: u16) -> Option<NextUpstream> {
        let kind = NextUpstream::of_status(status);
        self.next_upstream.has(kind).then_some(kind)
    }

    /// What ends the attempt when the connection is pooled or closed after
    /// the reply's body (`ok` false: counted as the peer's failure).
    pub fn hold(&self, ok: bool) -> super::queue::Hold {
        super::queue::Hold::new(self.up.clone(), self.peer, ok, self.vars.clone(), self.t0)
    }
}

/// Why an attempt gave no reply to go on with.
pub enum Gave<R> {
    Fail(Failure<R>),
    /// The client left while the upstream was thinking (499).
    Left,
}

impl<R> From<Failure<R>> for Gave<R> {
    fn from(f: Failure<R>) -> Self {
        Gave::Fail(f)
    }
}

/// A failed attempt.
pub struct Failure<R> {
    /// Its `next_upstream` kind (`OFF`: not the peer's fault, never retried).
    pub kind: NextUpstream,
    /// The status answered when no other peer is tried (502, 504, …).
    pub code: u16,
    /// The error log line's text (empty: nothing is logged).
    pub msg: String,
    /// A kept-alive connection the peer had closed before it answered: the
    /// same peer is tried once more on a new connection.
    pub stale: bool,
    /// The peer's reply, when its status is what failed: what the client
    /// gets when no other peer is tried.
    pub reply: Option<R>,
}

impl<R> Failure<R> {
    pub fn new(kind: NextUpstream, code: u16, msg: impl Into<String>) -> Self {
        Failure {
            kind,
            code,
            msg: msg.into(),
            stale: false,
            reply: None,
        }
    }

    /// A failed socket operation while doing `while_` ("reading response
    /// header from upstream").
    pub fn io(e: &io::Error, while_: &str) -> Self {
        if tls::is_handshake_error(e) {
            // The message is the TLS layer's (nginx's words where it has them).
            let why = e.get_ref().map_or(String::new(), |i| i.to_string());
            Self::new(
                NextUpstream::ERROR,
                502,
                format!("{why} while SSL handshaking to upstream"),
            )
        } else if crate::server::worker::is_no_slot(e) {
            // A local shortage: 500, not held against the peer, not retried.
            Self::new(NextUpstream::OFF, 500, format!("{e} while {while_}"))
        } else if e.kind() == ErrorKind::TimedOut {
            Self::new(
                NextUpstream::TIMEOUT,
                504,
                format!("upstream timed out (110: Connection timed out) while {while_}"),
            )
        } else {
            Self::new(
                NextUpstream::ERROR,
                502,
                format!("{} while {while_}", crate::core::errlog::errno_text(e)),
            )
        }
    }

    /// The request body's temporary file could not be read: 500, not the
    /// peer's fault.
    pub fn body_file(e: &io::Error) -> Self {
        Self::new(
            NextUpstream::OFF,
            500,
            format!(
                "{} while reading the client request body temporary file",
                crate::core::errlog::errno_text(e)
            ),
        )
    }

    /// A connection that could not be made.
    fn connect(e: &io::Error) -> Self {
        let mut f = Self::io(e, "connecting to upstream");
        if f.kind == NextUpstream::ERROR && !tls::is_handshake_error(e) {
            f.msg = format!(
                "connect() failed ({}) while connecting to upstream",
                crate::core::errlog::errno_text(e)
            );
        }
        f
    }
}

/// The balancing key of a request for `up` (ip_hash, hash).
pub fn balancing_key(req: &Request<'_>, up: &Upstream) -> Vec<u8> {
    match up.method {
        Balance::IpHash => match req.client_addr() {
            Peer::Tcp(a) => balance::ip_hash_key(a.ip()),
            Peer::Unix => Vec::new(),
        },
        Balance::Hash { .. } => {
            let mut k = Vec::new();
            if let Some(t) = &up.hash_key {
                t.render(req, &mut k);
            }
            k
        }
        _ => Vec::new(),
    }
}

/// Whether a request may be sent again to another peer once it was sent
/// (nginx: all but POST, LOCK and PATCH).
fn idempotent(req: &Request<'_>) -> bool {
    !matches!(req.method(), Method::Post) && !matches!(req.head.method_str(), "LOCK" | "PATCH")
}

/// Log an upstream failure, naming the request and the peer.
pub fn log(req: &Request<'_>, msg: &str, upstream: &str) {
    if req.is_session() {
        crate::error_log!(
            Error,
            "{msg}{}, upstream: \"{upstream}\"",
            req.log_context()
        );
        return;
    }
    crate::error_log!(
        Error,
        "{msg}, client: {}, server: {}, request: \"{}\", upstream: \"{upstream}\", host: \"{}\"",
        req.client_addr(),
        req.server.name(),
        String::from_utf8_lossy(req.head.line()),
        req.host
    );
}

/// Run the request on `up` until a peer gives a reply to go on with (`Ok`),
/// or answer with the error (`Err`: the response for the client).
pub async fn run<P: Protocol>(
    proto: &P,
    req: &Request<'_>,
    up: &Arc<Upstream>,
    body: &mut dyn RequestBody,
    policy: &Policy,
    dial: &Dial<'_>,
    vars: &Rc<RefCell<UpstreamVars>>,
) -> Result<P::Reply, Response> {
    let key = balancing_key(req, up);
    let mut tried = Tried::default();
    let mut tries = 0u32;
    let mut started = None;
    let mut last: Option<Failure<P::Reply>> = None;
    let name = |peer: Option<usize>| {
        let mut n = String::new();
        match peer {
            Some(p) => proto.upstream_name(&up.addr_name(p), &mut n),
            None => proto.upstream_name(&up.name, &mut n),
        }
        n
    };
    loop {
        let peer = match up.select(&key, &mut tried, Some(&mut *body)).await {
            Ok(p) => p,
            Err(e) if e.status() != 502 => return Err(req.error(e.status())),
            Err(e) => {
                if tries == 0 {
                    log(
                        req,
                        &format!("{e} while connecting to upstream"),
                        &name(None),
                    );
                }
                // Peers left untried but none live: `$upstream_addr` ends
                // with the group's name, as nginx's; its stream proxy names
                // the group only when no peer was tried at all.
                let named = match req.is_session() {
                    true => tries == 0,
                    false => (tries as usize) < up.peer_count(),
                };
                if named {
                    vars.borrow_mut().attempts.push(Attempt {
                        addr: up.name.as_str().into(),
                        status: 502,
                        ..Default::default()
                    });
                }
                return match last {
                    Some(Failure { reply: Some(r), .. }) => Ok(r),
                    Some(f) => Err(req.error(f.code)),
                    None => Err(req.error(502)),
                };
            }
        };
        tries += 1;
        vars.borrow_mut().attempts.push(Attempt {
            addr: up.addr_shared(peer),
            ..Default::default()
        });
        let t0 = crate::core::clock::now();
        let started = *started.get_or_insert(t0);
        let mut at = Try {
            up,
            peer,
            vars,
            t0,
            next_upstream: policy.next_upstream,
            bytes: (0, 0),
            held: RefCell::default(),
        };
        // Connect, then the protocol's exchange; a kept-alive connection the
        // peer had closed is replaced by a new one once. (In this loop, not a
        // function of its own: the protocol's future is moved once less.)
        let mut own = dial.own;
        // A connection the protocol keeps itself goes first; one found
        // closed is replaced by a connection.
        let mut kept = match proto.kept(req, &at, &mut *body) {
            Some(k) => {
                if let Some(a) = vars.borrow_mut().attempts.last_mut() {
                    a.connect_ms = Some(0);
                }
                match k.await {
                    None => None,
                    Some(Err(Gave::Fail(f))) if f.stale && !policy.streamed => None,
                    r => r,
                }
            }
            None => None,
        };
        let (f, sent) = loop {
            let r = if let Some(r) = kept.take() {
                r
            } else {
                let conn = if own {
                    pool::connect_from(
                        &up.peer_addr(peer),
                        dial.bind,
                        dial.tls,
                        policy.connect_timeout,
                    )
                    .await
                } else {
                    up.connect(peer, dial.tls, policy.connect_timeout).await
                };
                let conn = match conn {
                    Ok(c) => c,
                    Err(e) => break (Failure::connect(&e), false),
                };
                let reused = conn.reused();
                if dial.keepalive
                    && !reused
                    && let Err(e) = conn.set_keepalive()
                {
                    crate::error_log!(
                        Alert,
                        "setsockopt(SO_KEEPALIVE) failed ({e}) while connecting to upstream"
                    );
                }
                // A kept-alive connection took no time to connect (nginx shows 0.000).
                let connect_ms = if reused {
                    0
                } else {
                    crate::core::clock::since(t0).as_millis() as u64
                };
                if let Some(a) = vars.borrow_mut().attempts.last_mut() {
                    a.connect_ms = Some(connect_ms);
                }
                at.bytes = (conn.bytes_in(), conn.bytes_out());
                match proto.exchange(req, &at, conn, &mut *body).await {
                    Err(Gave::Fail(f)) if f.stale && reused && !policy.streamed => {
                        own = true;
                        continue;
                    }
                    r => r,
                }
            };
            match r {
                Ok(reply) => return Ok(reply),
                Err(Gave::Fail(f)) => break (f, true),
                Err(Gave::Left) => {
                    up.client_left(peer, req, &name(Some(peer)));
                    if let Some(a) = vars.borrow_mut().attempts.last_mut() {
                        a.response_ms = Some(crate::core::clock::since(t0).as_millis() as u64);
                    }
                    return Err(Response::new(499));
                }
            }
        };
        // Named before the attempt ends: a resolved peer that left keeps
        // its slot only until then.
        let logged = (f.reply.is_none() && !f.msg.is_empty()).then(|| name(Some(peer)));
        if f.reply.is_none() {
            up.finished(peer, f.kind == NextUpstream::OFF);
        }
        {
            let mut v = vars.borrow_mut();
            let a = v.attempts.last_mut().expect("pushed above");
            if a.status == 0 {
                a.status = f.code;
            }
            a.response_ms = Some(crate::core::clock::since(t0).as_millis() as u64);
        }
        if let Some(upstream) = logged {
            log(req, &f.msg, &upstream);
        }
        let again = policy.next_upstream.has(f.kind)
            && (!policy.streamed || !sent)
            && (policy.tries == 0 || tries < policy.tries)
            && (policy.timeout.is_zero() || crate::core::clock::since(started) < policy.timeout)
            && (!sent || policy.next_upstream.has(NextUpstream::NON_IDEMPOTENT) || idempotent(req));
        if !again {
            return match f.reply {
                Some(r) => Ok(r),
                None => Err(req.error(f.code)),
            };
        }
        last = Some(f);
    }
}
