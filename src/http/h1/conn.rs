//! One HTTP/1.x connection: read heads, run the request pipeline (the body
//! read through `body::ConnBody`), write responses (`write`), keep-alive,
//! pipelining, timeouts and lingering close.
//!
//! I/O is attempted without waiting first; a timer is armed only when the socket
//! would block, so the hot path sets no timers.

use super::body::ConnBody;
use super::parse;
use super::write::{self, How, write_head};
use crate::conf::load::{Config, Listener};
use crate::conf::model::{CoreConf, Lingering};
use crate::core::message::head::{Method, ParseError, RequestHead, Version};
use crate::core::message::response::{Body, Response};
use crate::core::proxy_protocol::ProxyHeader;
pub use crate::core::request::Peer;
use crate::core::request::{BodyError, BoxFuture, Finished, Request, boxed};
use crate::http::pipeline::{self, ConnRef, Ran, host_of};
use crate::modules::static_files::conf::StaticConf;
use crate::server::Shared;
use crate::server::idle::{self, Expired, IdleTimer};
use crate::server::socket::Stream;
use crate::server::worker::Slot;
use bytes::BytesMut;
use std::future::Future;
use std::io::{self, ErrorKind, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, Interest};

struct Conn<S> {
    _slot: Slot,
    s: S,
    peer: Peer,
    /// The connection's PROXY protocol addresses.
    proxy: Option<Arc<ProxyHeader>>,
    listener: usize,
    id: u64,
    shared: Arc<Shared>,
    /// Buffers, only while a request is read and served or pipelined bytes wait:
    /// an idle keep-alive connection holds none.
    io: Option<Box<Io>>,
    requests: u64,
    /// A timeout asked for a reset (reset_timedout_connection): close without FIN.
    reset: bool,
    /// The last read returned less than it could take: the socket is empty, and
    /// its read readiness was cleared, so the next read waits for epoll instead of
    /// costing a syscall that would only say EAGAIN (nginx's `rev->ready = 0`).
    drained: bool,
    /// TCP_NODELAY is still to be set when `tcp_nodelay` asks for it: on a
    /// plain connection, as nginx, only once it is kept alive or a response
    /// streams (several writes); a lone response leaves in one write, which
    /// Nagle's algorithm never holds back.
    nodelay_unset: bool,
    /// When the connection was accepted, in Unix milliseconds
    /// (`keepalive_time`, `$connection_time`).
    born: u64,
    /// The keepalive_timeout of the last request's location, in milliseconds
    /// (four bytes, in padding).
    keepalive_ms: u32,
}

/// `keepalive_disable` says this request's browser closes after it.
fn keepalive_disabled(head: &RequestHead, disable: u8) -> bool {
    use crate::conf::model::{KEEPALIVE_DISABLE_MSIE6, KEEPALIVE_DISABLE_SAFARI};
    // Only a POST can be MSIE 6's to refuse: other requests skip the
    // User-Agent scan unless Safari is named too.
    let msie6 = disable & KEEPALIVE_DISABLE_MSIE6 != 0 && head.method == Method::Post;
    let safari = disable & KEEPALIVE_DISABLE_SAFARI != 0;
    if !msie6 && !safari {
        return false;
    }
    let b = crate::core::browser::Browser::of_head(head);
    (b.msie6 && msie6) || (b.safari && safari)
}

/// A connection's buffers: bytes read and not yet parsed, and the response head
/// (and small bodies) on their way out.
#[derive(Default)]
struct Io {
    buf: BytesMut,
    out: Vec<u8>,
}

/// How a served request left the connection.
enum Next {
    KeepAlive,
    /// Close; `true` when request bytes may still be in flight (lingering close).
    Close(bool),
}

/// Serve one accepted connection; `slot` is its place in worker_connections.
/// A plain function returning the task, so the task holds `Conn` once rather
/// than beside the arguments it was built from.
pub fn serve<S: Stream>(
    s: S,
    peer: Peer,
    proxy: Option<Arc<ProxyHeader>>,
    listener: usize,
    id: u64,
    shared: Arc<Shared>,
    slot: Slot,
) -> impl Future<Output = ()> + use<S> {
    // TLS records: set at once, as nginx does on SSL connections.
    if !S::PLAIN
        && shared
            .config
            .load()
            .listener(listener)
            .vhosts
            .default
            .conf
            .core
            .tcp_nodelay
    {
        s.set_nodelay();
    }
    let c = Conn {
        _slot: slot,
        s,
        peer,
        proxy,
        listener,
        id,
        shared,
        io: None,
        requests: 0,
        reset: false,
        drained: false,
        nodelay_unset: S::PLAIN,
        born: crate::core::clock::unix_millis(),
        keepalive_ms: 0,
    };
    ConnTask(Task::New(Box::new(c)))
}

/// A connection's task, written by hand so an idle connection costs only its
/// `Conn` and a timer key: either it waits for the next request (no buffers, no
/// tokio timer; after a full idle `TICK` a plain socket parks, giving up its
/// tokio I/O registration too: `server::idle`), or a boxed step owns the `Conn`
/// while it reads and serves one request, and hands it back.
///
/// The `Conn` is boxed, so the task fits tokio's 128-byte task cell: tokio's
/// per-socket I/O slots take 256 bytes (128-aligned), and 256-byte cells
/// would share their slabs in the allocator, where the slots that parked
/// connections give up would leave holes that cannot be returned.
struct ConnTask<S: Stream>(Task<S>);

type Step<S> = Pin<Box<dyn Future<Output = Option<Box<Conn<S>>>>>>;

enum Task<S: Stream> {
    /// Accepted, not yet run: its step is boxed when it first runs, so the
    /// connections of an accept burst hold no step while they wait their turn.
    New(Box<Conn<S>>),
    Idle(Wait<Box<Conn<S>>>),
    /// Idle, its socket parked (`idle::park`): readiness comes through the timer.
    Parked(Wait<Box<Conn<S::Parked>>>),
    Active(Step<S>),
    Done,
}

/// An idle connection's wait for its next request.
struct Wait<C> {
    c: C,
    timer: IdleTimer,
}

impl<S: Stream> Future for ConnTask<S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let _turn = crate::core::clock::hold();
        let task = &mut self.get_mut().0;
        loop {
            match task {
                Task::New(_) => {
                    let Task::New(c) = std::mem::replace(task, Task::Done) else {
                        unreachable!()
                    };
                    *task = Task::Active(boxed(|| c.step_owned()));
                }
                Task::Active(step) => match step.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(None) => *task = Task::Done,
                    Poll::Ready(Some(c)) => *task = c.next(),
                },
                Task::Idle(w) => {
                    if let Poll::Ready(r) = w.c.s.poll_read_ready(cx) {
                        let Task::Idle(Wait { mut c, .. }) = std::mem::replace(task, Task::Done)
                        else {
                            unreachable!()
                        };
                        if r.is_ok() {
                            c.drained = false;
                            *task = Task::Active(boxed(|| c.step_owned()));
                        }
                        continue;
                    }
                    match Pin::new(&mut w.timer).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Expired::Park) => {
                            let Task::Idle(w) = std::mem::replace(task, Task::Done) else {
                                unreachable!()
                            };
                            *task = park(w);
                        }
                        Poll::Ready(why) => {
                            if why == Expired::TimedOut && w.c.reset_on_idle_timeout() {
                                w.c.reset_on_close();
                            }
                            *task = Task::Done;
                        }
                    }
                }
                Task::Parked(w) => {
                    let Poll::Ready(why) = Pin::new(&mut w.timer).poll(cx) else {
                        return Poll::Pending;
                    };
                    let Task::Parked(w) = std::mem::replace(task, Task::Done) else {
                        unreachable!()
                    };
                    *task = unpark(w, why);
                }
                Task::Done => return Poll::Ready(()),
            }
        }
    }
}

/// A parked connection's wait ended: readable, it serves its next request with
/// its socket registered with tokio again; otherwise it closes (reset first
/// when a timeout asks for it).
fn unpark<S: Stream>(w: Wait<Box<Conn<S::Parked>>>, why: Expired) -> Task<S> {
    let reset = why == Expired::TimedOut && w.c.reset_on_idle_timeout();
    if why != Expired::Readable && !reset {
        // Closing the socket takes it out of the parking poll.
        return Task::Done;
    }
    idle::unpark(w.c.s.as_raw_fd());
    drop(w.timer);
    let (c, p) = (*w.c).with_stream(());
    let Ok(s) = S::unpark(p) else {
        return Task::Done;
    };
    let mut c = Box::new(c.with_stream(s).0);
    if reset {
        c.reset_on_close();
        return Task::Done;
    }
    c.drained = false;
    Task::Active(boxed(|| c.step_owned()))
}

/// Long idle: the socket leaves tokio for the worker's parking poll, or stays
/// where it is if that poll cannot be had.
fn park<S: Stream>(w: Wait<Box<Conn<S>>>) -> Task<S> {
    let Wait { c, timer } = w;
    let (c, s) = (*c).with_stream(());
    let Ok(p) = s.park() else {
        return Task::Done;
    };
    let parked = idle::park(&timer, p.as_raw_fd());
    if parked {
        let c = Box::new(c.with_stream(p).0);
        return Task::Parked(Wait { c, timer });
    }
    match S::unpark(p) {
        Ok(s) => {
            let c = Box::new(c.with_stream(s).0);
            Task::Idle(Wait { c, timer })
        }
        Err(_) => Task::Done,
    }
}

impl<S> Conn<S> {
    /// Its idle wait timed out: reset rather than close? Only a wait for the
    /// first request, as nginx's reset_timedout_connection (a keep-alive
    /// timeout closes gracefully).
    fn reset_on_idle_timeout(&self) -> bool {
        self.requests == 0
            && self
                .shared
                .config
                .load()
                .listener(self.listener)
                .vhosts
                .default
                .conf
                .core
                .reset_timedout_connection
    }

    /// The connection with another stream, and the one it had (parking).
    fn with_stream<T>(self, s: T) -> (Conn<T>, S) {
        let c = Conn {
            s,
            _slot: self._slot,
            peer: self.peer,
            proxy: self.proxy,
            listener: self.listener,
            id: self.id,
            shared: self.shared,
            io: self.io,
            requests: self.requests,
            reset: self.reset,
            drained: self.drained,
            nodelay_unset: self.nodelay_unset,
            born: self.born,
            keepalive_ms: self.keepalive_ms,
        };
        (c, self.s)
    }
}

impl<S: Stream> Conn<S> {
    /// After a request: serve pipelined bytes at once, else wait idle, holding no
    /// buffers, for keepalive_timeout (client_header_timeout before the first request).
    fn next(mut self: Box<Self>) -> Task<S> {
        let pending = self.io.as_ref().is_some_and(|io| !io.buf.is_empty());
        if pending || !self.drained {
            return Task::Active(boxed(|| self.step_owned()));
        }
        self.io = None;
        let wait = if self.requests > 0 {
            Duration::from_millis(self.keepalive_ms.into())
        } else {
            let cfg = self.shared.config.load();
            cfg.listener(self.listener)
                .vhosts
                .default
                .conf
                .core
                .client_header_timeout
        };
        let deadline = crate::core::clock::now() + wait;
        Task::Idle(Wait {
            c: self,
            timer: if S::PLAIN {
                IdleTimer::parkable(deadline)
            } else {
                IdleTimer::new(deadline)
            },
        })
    }

    /// One step with the connection moved into it; gives it back unless it closed.
    async fn step_owned(mut self: Box<Self>) -> Option<Box<Self>> {
        let mut io = self.io.take().unwrap_or_default();
        let go = self.step(&mut io).await;
        self.io = Some(io);
        go.then_some(self)
    }

    /// Read one request head and serve it. False when the connection is done.
    async fn step(&mut self, io: &mut Io) -> bool {
        let cfg = self.shared.config.load_full();
        let core = &cfg.listener(self.listener).vhosts.default.conf.core;
        let mut busy = crate::server::stats::Busy::reading();
        let head = match self.read_head(io, core).await {
            Ok(Read::Head(h)) => h,
            Ok(Read::Idle) => return true,
            Ok(Read::Closed) => return false,
            Err(ReadError::Parse(e)) => {
                if e == ParseError::NOT_HTTP1 && self.requests == 0 && {
                    let l = cfg.listener(self.listener);
                    l.http2 && !l.ssl
                } {
                    // Where HTTP/2 is spoken in cleartext, a first line that is
                    // not HTTP/1 at all is a broken HTTP/2 preface: a connection
                    // error, closed without an HTTP/1 answer (RFC 9113 §3.4).
                    crate::error_log!(Info, "client sent invalid HTTP/2 connection preface");
                    return false;
                }
                busy.writing();
                self.refuse(io, e, &cfg).await;
                return false;
            }
            Err(ReadError::TimedOut) => {
                if core.reset_timedout_connection {
                    self.reset_on_close();
                }
                return false;
            }
        };
        self.requests += 1;
        busy.writing();
        match self.serve_one(io, &cfg, &head).await {
            Next::KeepAlive => true,
            Next::Close(linger) => {
                self.close(io, core, linger).await;
                false
            }
        }
    }

    async fn serve_one(&mut self, io: &mut Io, cfg: &Config, head: &RequestHead) -> Next {
        let listener = cfg.listener(self.listener);
        let host = host_of(head);
        let peer = self.peer;
        let mut req = self.request(listener, head, &host, &peer);
        let (mut resp, close) = match pipeline::admit(&mut req) {
            Err(resp) => (pipeline::refused(&mut req, resp).await, true),
            Ok(core) => {
                let max = core.client_max_body_size;
                let mut body = ConnBody::new(&self.s, &mut io.buf, head, core);
                let ran = pipeline::run(&mut req, &mut body, max).await;
                if body.used_socket {
                    self.drained = false;
                }
                match ran {
                    Ran::Respond { resp, close } => (resp, close),
                    Ran::Abort(BodyError::TimedOut) => {
                        if core.reset_timedout_connection {
                            self.reset_on_close();
                        }
                        return Next::Close(false);
                    }
                    Ran::Abort(_) => return Next::Close(false),
                }
            }
        };
        let core = &req.conf.core;
        // A body of unknown length ends with the connection on HTTP/1.0.
        let keep_alive = !close
            && head.keep_alive
            && (resp.body.size().is_some()
                || (head.version == Version::Http11 && core.chunked_transfer_encoding))
            && self.requests < core.keepalive_requests
            // The request's start time serves: no clock is read here.
            && u128::from(req.start_ms.saturating_sub(self.born)) < core.keepalive_time.as_millis()
            && !core.keepalive_timeout.is_zero()
            && !keepalive_disabled(head, core.keepalive_disable)
            && !listener.retired
            && !idle::stopping()
            // Bytes after a refused Upgrade must not be read as a request.
            && resp.status != 101
            && head.header("upgrade").is_none();
        // The request's location says how long the connection then waits.
        self.keepalive_ms = u32::try_from(core.keepalive_timeout.as_millis()).unwrap_or(u32::MAX);
        if self.nodelay_unset
            && core.tcp_nodelay
            && (keep_alive || matches!(resp.body, Body::Stream { .. }))
        {
            self.s.set_nodelay();
            self.nodelay_unset = false;
        }
        req.state.closing.set(!keep_alive);
        match self.respond(io, &req, &mut resp, keep_alive).await {
            Ok(()) if keep_alive => Next::KeepAlive,
            Ok(()) => Next::Close(close),
            Err(e) => {
                if e.kind() == ErrorKind::TimedOut && core.reset_timedout_connection {
                    self.reset_on_close();
                }
                Next::Close(false)
            }
        }
    }

    /// The request context for `head` on this connection, at the server level.
    fn request<'a>(
        &self,
        listener: &'a Listener,
        head: &'a RequestHead,
        host: &'a str,
        peer: &'a Peer,
    ) -> Request<'a> {
        let c = ConnRef {
            peer,
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.s),
            local: listener.local_addr(),
            id: self.id,
            requests: self.requests,
            born_ms: self.born,
            tls: self.s.tls().cloned(),
            proxy: self.proxy.clone(),
        };
        pipeline::request(c, &listener.vhosts, head, host)
    }

    /// Write the response and log the request. The body bytes that actually
    /// went out are logged, also when the client leaves part way.
    async fn respond(
        &self,
        io: &mut Io,
        req: &Request<'_>,
        resp: &mut Response,
        keep_alive: bool,
    ) -> io::Result<()> {
        let core = &req.conf.core;
        if resp.unanswered() {
            // `return 444`, or a client gone: close without answering (logged).
            pipeline::unanswered(req, resp);
            return Err(io::Error::other("closed without an answer"));
        }
        io.out.clear();
        io.out.reserve(512);
        let head_only = req.head.method == Method::Head;
        // add_trailer: chunked on HTTP/1.1 whatever the body, to carry them.
        let trailers = resp.trailers.filter(|_| {
            req.head.version == Version::Http11
                && core.chunked_transfer_encoding
                && !head_only
                && !matches!(resp.status, 100..=199 | 204 | 304)
        });
        let takes_chunked = req.head.version == Version::Http11 && core.chunked_transfer_encoding;
        let chunked = resp.chunked(takes_chunked);
        // HTTP/0.9: the body alone.
        if req.head.version != Version::Http09 {
            write_head(
                &mut io.out,
                resp,
                keep_alive.then_some(core.keepalive_header),
                core.server_tokens,
                chunked || trailers.is_some(),
            );
        }
        let head_len = io.out.len() as u64;
        // TLS encrypts in user space: file bodies are read, never sendfile'd.
        let sf = req.conf.get::<StaticConf>();
        let sendfile = (sf.sendfile && S::PLAIN).then_some(sf.sendfile_max_chunk);
        let how = How {
            head_only,
            chunked,
            open_end: false,
            sendfile,
            watch_client: !req.state.ignore_client_abort,
            closing: !keep_alive,
        };
        let mut body_sent = 0;
        if resp.status == 101
            && let Body::Stream { stream, .. } = &mut resp.body
            && let Some(tunnel) = stream.upgrade()
        {
            // Upgrade: the head, then the tunnel owns the socket until it ends.
            let r = write::write_all(&self.s, &io.out, core.send_timeout).await;
            let client = Client(&self.s, std::cell::Cell::new(0));
            if r.is_ok() {
                tunnel.run(&client, std::mem::take(&mut io.buf)).await;
            }
            // What the tunnel passed to the client is the body ($body_bytes_sent).
            pipeline::finished(&Finished {
                req,
                resp,
                head_bytes: head_len,
                body_bytes: client.1.get(),
                complete: r.is_ok(),
            });
            return Err(io::Error::other("connection upgraded"));
        }
        let r = match trailers {
            Some(make) => {
                // The body is out of the response while it is sent, so the
                // trailers can be made from the response after.
                let mut body = std::mem::replace(&mut resp.body, Body::Empty);
                let done = &*resp;
                let r = write::send_with_trailers(
                    &self.s,
                    &mut io.out,
                    &mut body,
                    (core, how.watch_client),
                    &mut body_sent,
                    || make(req, done),
                )
                .await;
                resp.body = body;
                r
            }
            None => {
                write::send(
                    &self.s,
                    &mut io.out,
                    &mut resp.body,
                    how,
                    core,
                    &mut body_sent,
                )
                .await
            }
        };
        // What a closing connection corked leaves now, not after the waits.
        let uncork = || {
            if !keep_alive && core.tcp_nopush && S::PLAIN {
                self.s.set_cork(false);
            }
        };
        if let Some(post) = req.post_action() {
            uncork();
            post.await;
        }
        // Background subrequests (mirrors) end before the request is logged
        // and the connection goes on.
        if let Some(bg) = req.background() {
            uncork();
            bg.await;
        }
        pipeline::finished(&Finished {
            req,
            resp,
            head_bytes: head_len,
            body_bytes: body_sent,
            complete: r.is_ok(),
        });
        r
    }

    /// Parse the next request head from what is buffered and what the socket has.
    /// `Idle` when nothing of a request is there yet and the socket is drained.
    async fn read_head(&mut self, io: &mut Io, core: &CoreConf) -> Result<Read, ReadError> {
        let limits = pipeline::limits(core);
        let mut deadline: Option<Instant> = None;
        loop {
            if !io.buf.is_empty()
                && let Some(h) = parse::parse(&mut io.buf, &limits).map_err(ReadError::Parse)?
            {
                return Ok(Read::Head(h));
            }
            if !self.drained {
                if io.buf.capacity() - io.buf.len() < 256 {
                    io.buf.reserve(limits.header_buffer.max(512));
                }
                let spare = io.buf.capacity() - io.buf.len();
                match self.s.try_read_buf(&mut io.buf) {
                    Ok(0) => return Ok(Read::Closed),
                    Ok(n) => {
                        if n < spare {
                            self.mark_drained();
                        }
                        continue;
                    }
                    // tokio cleared the read readiness with this EAGAIN.
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.drained = true,
                    Err(_) => return Ok(Read::Closed),
                }
            }
            if io.buf.is_empty() {
                return Ok(Read::Idle);
            }
            // Part of a head is here: the rest must come within client_header_timeout.
            let dl = *deadline
                .get_or_insert_with(|| crate::core::clock::now() + core.client_header_timeout);
            match tokio::time::timeout_at(dl.into(), self.s.readable()).await {
                Ok(Ok(())) => self.drained = false,
                Ok(Err(_)) => return Ok(Read::Closed),
                Err(_) => return Err(ReadError::TimedOut),
            }
        }
    }

    /// Forget read readiness without a syscall. Sound only right after a short
    /// read with no await in between: data arriving later raises a new epoll event.
    /// (TLS: decrypted bytes may wait in the stream, so readiness is kept and
    /// the next wait asks the stream.)
    fn mark_drained(&mut self) {
        if S::PLAIN {
            let _ = self.s.try_io(Interest::READABLE, || {
                Err::<(), _>(io::Error::from(ErrorKind::WouldBlock))
            });
        }
        self.drained = true;
    }

    /// Close with a reset (SO_LINGER 0) once the connection is dropped.
    fn reset_on_close(&mut self) {
        self.s.set_reset_on_close();
        self.reset = true;
    }

    /// Answer a request we could not parse, then close.
    async fn refuse(&mut self, io: &mut Io, e: ParseError, cfg: &Config) {
        crate::error_log!(
            Info,
            "client sent invalid request: {} ({})",
            e.reason,
            e.status
        );
        let listener = cfg.listener(self.listener);
        let vhosts = &listener.vhosts;
        let head = RequestHead::unparsed(&io.buf);
        let peer = self.peer;
        let mut req = self.request(listener, &head, "", &peer);
        // The default server's error_page applies, as nginx.
        let err = req.error(e.status);
        let mut resp = pipeline::refused(&mut req, err).await;
        if self.respond(io, &req, &mut resp, false).await.is_ok() {
            self.close(io, &vhosts.default.conf.core, true).await;
        }
    }

    /// Close after the response: with lingering close, read and drop what the
    /// client still sends for a while so it receives our response, not a reset.
    async fn close(&mut self, io: &Io, core: &CoreConf, unread: bool) {
        if self.reset {
            // No shutdown: the client must see the RST, not a clean FIN first.
            return;
        }
        let linger = match core.lingering_close {
            Lingering::Off => false,
            Lingering::On => unread || !io.buf.is_empty(),
            Lingering::Always => true,
        };
        if !linger && S::PLAIN {
            // close() sends the FIN after what is queued, as shutdown would:
            // one syscall fewer per connection (a TLS stream still sends its
            // close_notify).
            return;
        }
        let _ = self.s.shutdown().await;
        if !linger {
            return;
        }
        let end = Instant::now() + core.lingering_time;
        let mut sink = BytesMut::with_capacity(4096);
        loop {
            sink.clear();
            match self.s.try_read_buf(&mut sink) {
                Ok(0) => return,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    let step = (Instant::now() + core.lingering_timeout).min(end);
                    match tokio::time::timeout_at(step.into(), self.s.readable()).await {
                        Ok(Ok(())) => {}
                        _ => return,
                    }
                }
                Err(_) => return,
            }
        }
    }
}

/// The client socket handed to an upgrade tunnel, and the bytes written to it.
struct Client<'s, S>(&'s S, std::cell::Cell<u64>);

impl<S: Stream> crate::core::message::response::ClientIo for Client<'_, S> {
    fn try_read(&self, buf: &mut BytesMut) -> io::Result<usize> {
        self.0.try_read_buf(buf)
    }
    fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        let n = self.0.try_write_vectored(&[IoSlice::new(data)])?;
        self.1.set(self.1.get() + n as u64);
        Ok(n)
    }
    fn try_flush(&self) -> io::Result<()> {
        self.0.try_flush()
    }
    fn readable(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(self.0.readable())
    }
    fn writable(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(self.0.writable())
    }
}

enum Read {
    Head(RequestHead),
    Idle,
    Closed,
}

enum ReadError {
    Parse(ParseError),
    TimedOut,
}
#[cfg(test)]
mod layout {
    /// tokio allocates a task as one 128-byte-aligned cell around its
    /// future: a future of up to 24 bytes takes 128 bytes, up to 152 bytes
    /// 256, as tokio's I/O slots do (see [`super::ConnTask`]).
    #[test]
    fn a_plain_connection_task_fits_tokios_128_byte_cell() {
        let size = std::mem::size_of::<super::ConnTask<crate::server::socket::Tcp>>();
        assert!(
            size <= 24,
            "{size} bytes: its cell would share the I/O slots' slabs"
        );
    }
}
