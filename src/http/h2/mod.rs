//! HTTP/2 connections, with the `h2` crate doing the framing, HPACK, flow
//! control and stream state. Each stream runs the same request pipeline as
//! HTTP/1 (`crate::http::pipeline`) in its own task on the worker's runtime;
//! the connection task drives the codec, accepts streams, and ends the
//! connection with GOAWAY after keepalive_requests streams, after
//! keepalive_timeout without a stream (before the first one, the longer of
//! it and client_header_timeout, HTTP/1's wait for a first request), when
//! the worker stops or drains (a
//! graceful stop, a retired worker, a binary upgrade), or when a reload
//! removes its address: at once when idle, else a graceful GOAWAY and the
//! close once the streams in flight are done.
//!
//! Limits against abuse (docs/http2.md): concurrent streams
//! (http2_max_concurrent_streams), header list size (large_client_header_buffers,
//! as nginx since 1.19.7), streams reset by the client before they were
//! accepted and streams the server had to reset for protocol errors (rapid
//! reset, CVE-2023-44487: both end the connection with GOAWAY), requests per
//! connection, and per-stream send buffers.

mod body;
pub mod conf;
mod send;

use crate::conf::model::{CoreConf, Lingering};
use crate::core::module::{Hooks, Module, VarDef};
use crate::core::request::Peer;
use crate::core::request::TlsInfo;
use crate::core::spare::Spares;
use crate::http::pipeline::{self, ConnRef, Ran};
use crate::server::Shared;
use crate::server::idle::{Expired, IdleTimer};
use crate::server::worker::Slot;
use bytes::Bytes;
use h2::server::SendResponse;
use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::task::JoinSet;

/// The 24-byte connection preface a prior-knowledge client opens with.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Streams the client may reset before the server accepted them, at once,
/// before the connection ends with GOAWAY(ENHANCE_YOUR_CALM) (h2's default).
const MAX_PENDING_RESETS: usize = 20;

/// Streams the server may reset for the client's protocol errors over the
/// connection's life before it ends with GOAWAY(ENHANCE_YOUR_CALM).
const MAX_ERROR_RESETS: usize = 128;

/// What a connection's streams need to know about it.
pub struct ConnInfo {
    pub peer: Peer,
    /// Key of the listener the connection came in on.
    pub listener: usize,
    pub id: u64,
    pub shared: Arc<Shared>,
    /// The client socket (`$server_addr`).
    pub fd: std::os::fd::RawFd,
    /// The TLS connection's details (HTTP/2 negotiated by ALPN).
    pub tls: Option<Arc<TlsInfo>>,
    /// The connection's PROXY protocol addresses.
    pub proxy: Option<Arc<crate::core::proxy_protocol::ProxyHeader>>,
    /// When the connection was accepted, in Unix milliseconds.
    pub born_ms: u64,
}

/// Serve one HTTP/2 connection whose client preface has not been read yet;
/// `slot` is its place in worker_connections.
pub async fn serve<T: AsyncRead + AsyncWrite + Unpin + 'static>(io: T, info: ConnInfo, slot: Slot) {
    let _slot = slot;
    let cfg = info.shared.config.load_full();
    let conf = &cfg.listener(info.listener).vhosts.default.conf;
    let (core, h2c) = (&conf.core, conf.get::<conf::Http2Conf>());
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(h2c.max_concurrent_streams)
        .initial_window_size(h2c.body_preread_size)
        .initial_connection_window_size(h2c.body_preread_size.max(1 << 20))
        .max_header_list_size(u32::try_from(pipeline::limits(core).max_head()).unwrap_or(u32::MAX))
        .max_send_buffer_size(h2c.chunk_size.saturating_mul(8))
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(Some(MAX_ERROR_RESETS));
    let linger = (core.lingering_close != Lingering::Off)
        .then_some((core.lingering_timeout, core.lingering_time));
    let (keepalive_timeout, keepalive_requests, send_timeout, keepalive_time, header_timeout) = (
        core.keepalive_timeout,
        core.keepalive_requests,
        core.send_timeout,
        core.keepalive_time,
        core.client_header_timeout,
    );
    let sock = Rc::new(RefCell::new(Sock {
        io,
        out: Vec::new(),
        sent: 0,
    }));
    let hs = b.handshake::<_, Bytes>(SharedIo(sock.clone()));
    let hs = tokio::time::timeout(header_timeout, hs).await;
    drop(cfg);
    if let Ok(Ok(conn)) = hs {
        let limits = Limits {
            keepalive_timeout,
            keepalive_requests,
            send_timeout,
            keepalive_time,
            header_timeout,
        };
        drive(conn, sock.clone(), info, limits).await;
    }
    // The codec is gone: the socket is ours again, with what it last wrote.
    let Ok(sock) = Rc::try_unwrap(sock) else {
        return;
    };
    let mut sock = sock.into_inner();
    let out = std::future::poll_fn(|cx| sock.poll_drain(cx));
    let out = tokio::time::timeout(send_timeout, out).await;
    if let (Some((timeout, time)), Ok(Ok(()))) = (linger, out) {
        lingering_close(sock.io, timeout, time).await;
    }
}

/// The connection's limits, from the server's configuration.
struct Limits {
    keepalive_timeout: Duration,
    keepalive_requests: u64,
    send_timeout: Duration,
    keepalive_time: Duration,
    /// The wait for the first stream, with keepalive_timeout if longer.
    header_timeout: Duration,
}

/// Accept streams and run them until the connection ends.
async fn drive<T: AsyncRead + AsyncWrite + Unpin>(
    mut conn: h2::server::Connection<SharedIo<T>, Bytes>,
    sock: Rc<RefCell<Sock<T>>>,
    info: ConnInfo,
    limits: Limits,
) {
    let Limits {
        keepalive_timeout,
        keepalive_requests,
        send_timeout,
        keepalive_time,
        header_timeout,
    } = limits;
    let born = Instant::now();
    let info = Rc::new(Conn {
        info,
        calm: Cell::new(false),
        ahead: tokio::sync::Semaphore::new(READ_AHEAD),
    });
    let mut streams = JoinSet::new();
    let mut requests = 0u64;
    // Keepalive timeout while idle; worker stop or drain, and reloads, always.
    let mut watch: Option<(IdleTimer, Option<Instant>)> = None;
    // The keepalive deadline of the current idle spell.
    let mut idle_until: Option<Instant> = None;
    // Once GOAWAY is sent: when the connection is dropped if still open (a
    // graceful GOAWAY waits for the streams in flight first).
    let mut closing: Option<(Instant, bool)> = None;
    loop {
        let idle_now = streams.is_empty();
        if !idle_now {
            idle_until = None;
        } else if idle_until.is_none() {
            let wait = match requests {
                0 => header_timeout.max(keepalive_timeout),
                _ => keepalive_timeout,
            };
            idle_until = Some(Instant::now() + wait);
        }
        if closing.is_some() {
            watch = None;
        } else if watch.as_ref().is_none_or(|(_, d)| *d != idle_until) {
            watch = Some((IdleTimer::watch(idle_until), idle_until));
        }
        let cut_at = match closing {
            Some((at, graceful)) if !graceful || idle_now => Some(at),
            _ => None,
        };
        let cut = async {
            match cut_at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = std::future::poll_fn(|cx| {
                let r = conn.poll_accept(cx);
                // The codec's turn is over: what it wrote leaves now.
                match sock.borrow_mut().poll_drain(cx) {
                    Poll::Ready(Err(_)) => Poll::Ready(None),
                    Poll::Ready(Ok(())) => {
                        info.read_ahead_again();
                        r
                    }
                    Poll::Pending => r,
                }
            }) => match r {
                Some(Ok((req, respond))) => {
                    requests += 1;
                    // Boxed: the task then holds a pointer, and spawning and
                    // finishing it move that, not the whole stream future.
                    // Each turn of a stream holds the clock (`clock::held`).
                    let s = Box::pin(stream(info.clone(), requests, req, respond));
                    streams.spawn_local(crate::core::clock::held(s));
                    // As nginx: keepalive_requests streams, or a connection
                    // older than keepalive_time, then GOAWAY.
                    if (requests >= keepalive_requests || born.elapsed() >= keepalive_time)
                        && closing.is_none()
                    {
                        conn.graceful_shutdown();
                        closing = Some((Instant::now() + send_timeout, true));
                    }
                }
                Some(Err(e)) => {
                    crate::error_log!(Info, "HTTP/2 connection ended: {e}");
                    break;
                }
                None => break,
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {
                if info.calm.get() && closing.is_none() {
                    conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                    closing = Some((Instant::now() + send_timeout, false));
                } else if let Some((at, true)) = &mut closing
                    && streams.is_empty()
                {
                    // The last stream's response may still be leaving.
                    *at = (*at).max(Instant::now() + send_timeout);
                }
            }
            why = async { (&mut watch.as_mut().expect("armed").0).await }, if watch.is_some() => {
                watch = None;
                let retired = || info.info.shared.config.load().listener(info.info.listener).retired;
                if why == Expired::Reloaded && !retired() {
                    continue;
                }
                if streams.is_empty() {
                    // Idle (timed out, reclaimed, the worker stops or drains, its
                    // address removed): GOAWAY, then close once it is out.
                    conn.abrupt_shutdown(h2::Reason::NO_ERROR);
                    closing = Some((Instant::now() + send_timeout, false));
                } else {
                    // Streams in flight: GOAWAY now, close once they are done.
                    conn.graceful_shutdown();
                    closing = Some((Instant::now() + send_timeout, true));
                }
            }
            _ = cut => break,
        }
    }
}

/// Close after GOAWAY as HTTP/1 does after its last response: shut our side,
/// then read and drop what the client still sends for a while, so the GOAWAY
/// reaches it rather than a reset for unread bytes.
async fn lingering_close<T: AsyncRead + AsyncWrite + Unpin>(
    mut io: T,
    timeout: Duration,
    time: Duration,
) {
    if tokio::time::timeout(timeout, io.shutdown()).await.is_err() {
        return;
    }
    let end = Instant::now() + time;
    let mut sink = vec![0u8; 4096];
    loop {
        let step = (Instant::now() + timeout).min(end);
        match tokio::time::timeout_at(step.into(), io.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

/// Most bytes gathered before they go out in one write.
const GATHER: usize = 64 * 1024;
/// The first room of a gather that holds only small (control) frames.
const SMALL_GATHER: usize = 1024;

thread_local! {
    /// Emptied gather buffers of `GATHER` bytes, for the worker's next
    /// connection turn that sends more than control frames (one that size is
    /// above the allocator's thread cache: made anew, it cost an arena
    /// allocation and free per turn).
    static GATHERS: Spares<Vec<u8>> = const { Spares::new(4) };
}

/// The client socket and the frames the codec wrote to it that have not left
/// yet. The codec writes (and flushes) frame by frame — a HEADERS frame, then
/// each DATA frame — so its writes are gathered here and leave together, in
/// one system call, when its turn on the connection ends ([`Sock::poll_drain`]
/// after each poll of the codec). The buffer is given back once empty (a
/// full-size one to the worker's spares): an idle connection holds none.
struct Sock<T> {
    io: T,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    sent: usize,
}

impl<T: AsyncWrite + Unpin> Sock<T> {
    /// Write out what is gathered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        let mut out = std::mem::take(&mut self.out);
        if out.capacity() >= GATHER {
            out.clear();
            GATHERS.with(|g| g.keep(out));
        }
        self.sent = 0;
        Poll::Ready(Ok(()))
    }
}

/// The codec's handle on the socket (see [`Sock`]).
struct SharedIo<T>(Rc<RefCell<Sock<T>>>);

impl<T: AsyncRead + Unpin> AsyncRead for SharedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0.borrow_mut().io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> SharedIo<T> {
    fn gather(&self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let mut s = self.0.borrow_mut();
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        if s.out.len() + len > GATHER {
            ready!(s.poll_drain(cx))?;
            if len >= GATHER {
                return Pin::new(&mut s.io).poll_write_vectored(cx, bufs);
            }
        }
        let have = s.out.len();
        let need = have + len;
        if need > s.out.capacity() {
            // One step to the whole gather size once more than control frames
            // come: growing by doubling would copy the frames already here.
            if need <= SMALL_GATHER {
                s.out.reserve_exact(SMALL_GATHER - have);
            } else {
                let mut big = GATHERS
                    .with(|g| g.take())
                    .unwrap_or_else(|| Vec::with_capacity(GATHER));
                big.extend_from_slice(&s.out);
                s.out = big;
            }
        }
        for b in bufs {
            s.out.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for SharedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.gather(cx, &[io::IoSlice::new(buf)])
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.gather(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    /// Deferred: what is gathered leaves after the codec's poll.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.0.borrow_mut();
        ready!(s.poll_drain(cx))?;
        Pin::new(&mut s.io).poll_shutdown(cx)
    }
}

/// A connection as its streams share it.
struct Conn {
    info: ConnInfo,
    /// A stream saw a flood (empty DATA frames): the connection ends with
    /// GOAWAY(ENHANCE_YOUR_CALM).
    calm: Cell<bool>,
    /// The file bytes its streams may read before the connection next
    /// writes out what it gathered (`READ_AHEAD`, in turn of asking).
    ahead: tokio::sync::Semaphore,
}

/// File bytes the streams of a connection read per turn of its writes. With
/// every stream reading its file as soon as its window allowed, a hundred
/// streams read megabytes ahead of the writes, and the frames were made
/// from pieces fallen out of the CPU's caches: read a turn's worth at a
/// time, each piece is framed and encrypted while it is still there.
const READ_AHEAD: usize = GATHER;

impl Conn {
    /// What was gathered is written: the next turn's file reads may start.
    fn read_ahead_again(&self) {
        let have = self.ahead.available_permits();
        if have < READ_AHEAD {
            self.ahead.add_permits(READ_AHEAD - have);
        }
    }
}

/// One stream: its request through the pipeline, its response out.
async fn stream(
    conn: Rc<Conn>,
    n: u64,
    req: http::Request<h2::RecvStream>,
    mut respond: SendResponse<Bytes>,
) {
    // A stream is a request being answered (stub_status counts it so, as
    // nginx counts its HTTP/2 streams).
    let mut busy = crate::server::stats::Busy::reading();
    busy.writing();
    let c = &conn.info;
    let cfg = c.shared.config.load_full();
    let listener = cfg.listener(c.listener);
    let vhosts = &listener.vhosts;
    let (parts, recv) = req.into_parts();
    let cref = ConnRef {
        peer: &c.peer,
        fd: c.fd,
        local: listener.local_addr(),
        id: c.id,
        requests: n,
        born_ms: c.born_ms,
        tls: c.tls.clone(),
        proxy: c.proxy.clone(),
    };
    let limits = pipeline::limits(&vhosts.default.conf.core);
    let head = match crate::http::fields::request_head(
        &parts,
        !recv.is_end_stream(),
        &limits,
        crate::core::message::head::Version::Http2,
    ) {
        Ok(h) => h,
        Err(e) => {
            let head = crate::http::fields::refused_head(&parts, &e, "HTTP/2.0");
            let mut req = pipeline::request(cref, vhosts, &head, "");
            // The default server's error_page applies, as nginx.
            let err = req.error(e.status);
            let resp = pipeline::refused(&mut req, err).await;
            send::respond(&mut respond, &req, resp, &conn.ahead).await;
            return;
        }
    };
    let host = pipeline::host_of(&head);
    let mut req = pipeline::request(cref, vhosts, &head, &host);
    let (mut resp, mut recv) = match pipeline::admit(&mut req) {
        Err(resp) => {
            let recv = body::Recv::new(recv, &head, &req.conf.core);
            (pipeline::refused(&mut req, resp).await, recv)
        }
        Ok(core) => {
            let max = core.client_max_body_size;
            let recv = body::Recv::new(recv, &head, core);
            let mut body = body::H2Body::new(recv, &mut respond, &head);
            let ran = pipeline::run(&mut req, &mut body, max).await;
            if body.flooded() {
                conn.calm.set(true);
            }
            match ran {
                Ran::Respond { resp, .. } => (resp, body.into_recv()),
                Ran::Abort(_) => {
                    respond.send_reset(h2::Reason::CANCEL);
                    return;
                }
            }
        }
    };
    match resp.take_duplex() {
        None => send::respond(&mut respond, &req, resp, &conn.ahead).await,
        // The rest of the body goes on beside the response, until it ends.
        Some(rest) => {
            let sending = send::respond(&mut respond, &req, resp, &conn.ahead);
            let mut sending = std::pin::pin!(sending);
            let mut pump = rest.send(&mut recv);
            tokio::select! {
                () = &mut sending => {}
                () = &mut pump => sending.await,
            }
        }
    }
    discard_rest(recv.stream(), &req.conf.core).await;
}

/// After a response sent before the whole body came (a 413, say): read and
/// drop the rest for a while, as HTTP/1's lingering close does, so the client
/// finishes its upload and reads the answer. Past lingering_time, or with
/// lingering_close off, the stream's receiving side is dropped: the h2 crate
/// then sends RST_STREAM(NO_ERROR) after the response (RFC 9113 §8.1).
async fn discard_rest(recv: &mut h2::RecvStream, core: &CoreConf) {
    if recv.is_end_stream() || core.lingering_close == Lingering::Off {
        return;
    }
    let end = Instant::now() + core.lingering_time;
    loop {
        let step = (Instant::now() + core.lingering_timeout).min(end);
        match tokio::time::timeout_at(step.into(), recv.data()).await {
            // (An empty DATA frame ends it too: nothing to wait for there.)
            Ok(Some(Ok(d))) if !d.is_empty() => {
                let _ = recv.flow_control().release_capacity(d.len());
            }
            _ => return,
        }
    }
}

/// HTTP/2 (`listen … http2`, `http2 on`), its settings, and `$http2`.
pub static MODULE: Module = Module {
    name: "http2",
    nginx: &["http_v2_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::Http2Conf::KIND),
    // `h2` over TLS, `h2c` in clear text, empty for HTTP/1.
    variables: &[VarDef::name("http2", |req, _, out| {
        if req.head.version == crate::core::message::head::Version::Http2 {
            out.extend_from_slice(if req.tls.is_some() { b"h2" } else { b"h2c" });
        }
    })],
    hooks: Hooks {
        // `http2 on` in a server: its addresses speak HTTP/2 (nginx ≥ 1.25.1).
        server: Some(|b| {
            let on = b.conf.get::<conf::Http2Conf>().http2;
            for l in b.listens.iter_mut() {
                l.http2 |= on;
            }
            Ok(())
        }),
        tick: Some(trim_spares),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

/// The worker's kept gather and file piece buffers that went unused for a
/// tick are let go.
fn trim_spares() {
    GATHERS.with(|g| g.trim());
    crate::core::message::response::trim_spares();
}
