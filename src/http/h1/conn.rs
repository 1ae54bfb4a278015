//! One HTTP/1.x connection: read heads, run the request pipeline, discard or
//! read bodies, write responses (writev for small bodies, sendfile for files),
//! keep-alive, pipelining, timeouts and lingering close.
//!
//! I/O is attempted without waiting first; a timer is armed only when the socket
//! would block, so the hot path sets no timers.

use super::chunked::{Chunk, ChunkedDecoder};
use super::parse::{self, BodyFraming, Limits, Method, ParseError, RequestHead};
use crate::conf::load::Config;
use crate::conf::model::{CoreConf, Lingering};
use crate::core::clock;
pub use crate::core::request::Peer;
use crate::core::request::Request;
use crate::http::response::{Body, Response, write_head};
use crate::modules::static_files::uri;
use crate::server::socket::Stream;
use crate::server::Shared;
use crate::server::worker::Slot;
use crate::server::idle::{self, Expired, IdleTimer};
use bytes::BytesMut;
use std::borrow::Cow;
use std::fs::File;
use std::io::{self, ErrorKind, IoSlice};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, Interest};

/// Chunk size when a file body is read and written (sendfile off).
const READ_CHUNK: usize = 64 * 1024;

struct Conn<S> {
    _slot: Slot,
    s: S,
    peer: Peer,
    listener: usize,
    id: u64,
    shared: Arc<Shared>,
    buf: BytesMut,
    out: Vec<u8>,
    requests: u64,
    /// A timeout asked for a reset (reset_timedout_connection): close without FIN.
    reset: bool,
    /// The last read returned less than it could take: the socket is empty, and
    /// its read readiness was cleared, so the next read waits for epoll instead of
    /// costing a syscall that would only say EAGAIN (nginx's `rev->ready = 0`).
    drained: bool,
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
    listener: usize,
    id: u64,
    shared: Arc<Shared>,
    slot: Slot,
) -> impl Future<Output = ()> {
    if shared.config.load().listeners[listener]
        .vhosts
        .default
        .conf
        .core
        .tcp_nodelay
    {
        s.set_nodelay();
    }
    let mut c = Conn {
        _slot: slot,
        s,
        peer,
        listener,
        id,
        shared,
        buf: BytesMut::new(),
        out: Vec::new(),
        requests: 0,
        reset: false,
        drained: false,
    };
    async move { c.run().await }
}

impl<S: Stream> Conn<S> {
    async fn run(&mut self) {
        loop {
            if self.buf.is_empty() && self.drained && !self.wait_idle().await {
                return;
            }
            // Boxed: request-time state lives on the heap only while a request is
            // read and served, so an idle connection's task stays small.
            if !Box::pin(self.step()).await {
                return;
            }
        }
    }

    /// Wait, holding no buffers and no tokio timer, until the client sends the
    /// next request. False when the connection is to close (timeout, shutdown).
    async fn wait_idle(&mut self) -> bool {
        self.buf = BytesMut::new();
        self.out = Vec::new();
        let (wait, reset) = {
            let cfg = self.shared.config.load();
            let core = &cfg.listeners[self.listener].vhosts.default.conf.core;
            if self.requests > 0 {
                (core.keepalive_timeout, false)
            } else {
                (core.client_header_timeout, core.reset_timedout_connection)
            }
        };
        let mut timer = IdleTimer::new(Instant::now() + wait);
        // A hand-written poll keeps this wait to a few bytes of task state.
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = self.s.poll_read_ready(cx) {
                self.drained = false;
                return Poll::Ready(r.is_ok());
            }
            match Pin::new(&mut timer).poll(cx) {
                Poll::Ready(why) => {
                    if why == Expired::TimedOut && reset {
                        self.reset_on_close();
                    }
                    Poll::Ready(false)
                }
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// Read one request head and serve it. False when the connection is done.
    async fn step(&mut self) -> bool {
        let cfg = self.shared.config.load_full();
        let core = &cfg.listeners[self.listener].vhosts.default.conf.core;
        let head = match self.read_head(core).await {
            Ok(Read::Head(h)) => h,
            Ok(Read::Idle) => return true,
            Ok(Read::Closed) => return false,
            Err(ReadError::Parse(e)) => {
                self.refuse(e, core).await;
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
        match self.serve_one(&cfg, &head).await {
            Next::KeepAlive => true,
            Next::Close(linger) => {
                self.close(core, linger).await;
                false
            }
        }
    }

    async fn serve_one(&mut self, cfg: &Config, head: &RequestHead) -> Next {
        let start_ms = clock::unix_millis();
        let vhosts = &cfg.listeners[self.listener].vhosts;
        let host = host_of(head);
        let peer = self.peer.clone();
        let server = vhosts.select(&host);
        let mut req = Request {
            head,
            peer: &peer,
            connection: self.id,
            connection_requests: self.requests,
            start_ms,
            host: &host,
            server,
            uri: Vec::with_capacity(head.path().len()),
            location: None,
            conf: &server.conf,
            // Root, URI and an index name fit without regrowing.
            filename: Vec::with_capacity(
                server.conf.static_files.root.as_os_str().len() + head.path().len() + 32,
            ),
        };
        let bad_uri = uri::normalize(head.path(), &mut req.uri).is_err();
        let mut close = false;
        let mut resp = if bad_uri {
            close = true;
            req.error(400)
        } else {
            req.location = server.location(&req.uri);
            req.conf = req.location.map_or(&*server.conf, |l| &*l.conf);
            let max = req.conf.core.client_max_body_size;
            match head.framing {
                BodyFraming::Length(n) if max != 0 && n > max => {
                    close = true;
                    body_too_large(&req, n)
                }
                _ => req.run(),
            }
        };
        let core = &req.conf.core;
        if !close {
            match self.discard_body(head, core).await {
                Ok(()) => {}
                Err(BodyError::TooLarge) => {
                    resp = body_too_large(&req, core.client_max_body_size);
                    close = true;
                }
                Err(BodyError::Bad(e)) => {
                    resp = req.error(e.status);
                    close = true;
                }
                Err(BodyError::Io) => return Next::Close(false),
            }
        }
        let keep_alive = !close
            && head.keep_alive
            && self.requests < core.keepalive_requests
            && !core.keepalive_timeout.is_zero()
            && !idle::stopping();
        self.out.clear();
        self.out.reserve(512);
        write_head(&mut self.out, &resp, keep_alive, core.server_tokens);
        let head_only = head.method == Method::Head;
        let sendfile = req.conf.static_files.sendfile;
        let head_len = self.out.len() as u64;
        let sent = self.send(&resp.body, head_only, core, sendfile).await;
        let body_sent = *sent.as_ref().unwrap_or(&0);
        crate::modules::log::log_request(&req, &resp, head_len, body_sent);
        match sent {
            Ok(_) if keep_alive => Next::KeepAlive,
            Ok(_) => Next::Close(close),
            Err(e) => {
                if e.kind() == ErrorKind::TimedOut && core.reset_timedout_connection {
                    self.reset_on_close();
                }
                Next::Close(false)
            }
        }
    }

    /// Parse the next request head from what is buffered and what the socket has.
    /// `Idle` when nothing of a request is there yet and the socket is drained.
    async fn read_head(&mut self, core: &CoreConf) -> Result<Read, ReadError> {
        let limits = Limits {
            header_buffer: core.client_header_buffer_size,
            large_buffers: core.large_client_header_buffers.0,
            large_buffer_size: core.large_client_header_buffers.1,
        };
        let mut deadline: Option<Instant> = None;
        loop {
            if !self.buf.is_empty()
                && let Some(h) = parse::parse(&mut self.buf, &limits).map_err(ReadError::Parse)?
            {
                return Ok(Read::Head(h));
            }
            if !self.drained {
                if self.buf.capacity() - self.buf.len() < 256 {
                    self.buf.reserve(limits.header_buffer.max(512));
                }
                let spare = self.buf.capacity() - self.buf.len();
                match self.s.try_read_buf(&mut self.buf) {
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
            if self.buf.is_empty() {
                return Ok(Read::Idle);
            }
            // Part of a head is here: the rest must come within client_header_timeout.
            let dl = *deadline.get_or_insert_with(|| Instant::now() + core.client_header_timeout);
            match tokio::time::timeout_at(dl.into(), self.s.readable()).await {
                Ok(Ok(())) => self.drained = false,
                Ok(Err(_)) => return Ok(Read::Closed),
                Err(_) => return Err(ReadError::TimedOut),
            }
        }
    }

    /// Forget read readiness without a syscall. Sound only right after a short
    /// read with no await in between: data arriving later raises a new epoll event.
    fn mark_drained(&mut self) {
        let _ = self.s.try_io(Interest::READABLE, || {
            Err::<(), _>(io::Error::from(ErrorKind::WouldBlock))
        });
        self.drained = true;
    }

    /// Read and drop the request body, enforcing client_max_body_size and
    /// client_body_timeout; answers `Expect: 100-continue` first.
    async fn discard_body(&mut self, head: &RequestHead, core: &CoreConf) -> Result<(), BodyError> {
        let max = core.client_max_body_size;
        match head.framing {
            BodyFraming::None | BodyFraming::Length(0) => Ok(()),
            BodyFraming::Length(mut left) => {
                self.continue_if_expected(head, core).await?;
                loop {
                    let take = (self.buf.len() as u64).min(left) as usize;
                    let _ = self.buf.split_to(take);
                    left -= take as u64;
                    if left == 0 {
                        return Ok(());
                    }
                    self.buf.clear();
                    self.read_body_bytes(core).await?;
                }
            }
            BodyFraming::Chunked => {
                self.continue_if_expected(head, core).await?;
                let mut dec = ChunkedDecoder::new();
                let mut total = 0u64;
                loop {
                    match dec.decode(&mut self.buf).map_err(BodyError::Bad)? {
                        Chunk::Data(d) => {
                            total += d.len() as u64;
                            if max != 0 && total > max {
                                return Err(BodyError::TooLarge);
                            }
                        }
                        Chunk::Done => return Ok(()),
                        Chunk::NeedMore => self.read_body_bytes(core).await?,
                    }
                }
            }
        }
    }

    async fn continue_if_expected(&mut self, head: &RequestHead, core: &CoreConf) -> Result<(), BodyError> {
        if head.expect_continue && self.buf.is_empty() {
            write_all(&self.s, b"HTTP/1.1 100 Continue\r\n\r\n", core.send_timeout)
                .await
                .map_err(|_| BodyError::Io)?;
        }
        Ok(())
    }

    async fn read_body_bytes(&mut self, core: &CoreConf) -> Result<(), BodyError> {
        self.drained = false;
        self.buf.reserve(16 * 1024);
        loop {
            match self.s.try_read_buf(&mut self.buf) {
                Ok(0) => return Err(BodyError::Io),
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    match tokio::time::timeout(core.client_body_timeout, self.s.readable()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => return Err(BodyError::Io),
                        Err(_) => {
                            if core.reset_timedout_connection {
                                self.reset_on_close();
                            }
                            return Err(BodyError::Io);
                        }
                    }
                }
                Err(_) => return Err(BodyError::Io),
            }
        }
    }

    /// Write the head in `self.out` and the body; returns body bytes sent.
    async fn send(&mut self, body: &Body, head_only: bool, core: &CoreConf, sendfile: bool) -> io::Result<u64> {
        let t = core.send_timeout;
        if head_only {
            write_all(&self.s, &self.out, t).await?;
            return Ok(0);
        }
        match body {
            Body::Empty => write_all(&self.s, &self.out, t).await.map(|_| 0),
            Body::Bytes(b) => {
                write_vectored_all(&self.s, &self.out, b, t).await?;
                Ok(b.len() as u64)
            }
            Body::File { file, range } => {
                let n = range.end - range.start;
                self.send_file(file, range.clone(), core, sendfile).await?;
                Ok(n)
            }
            Body::Multipart { file, parts } => {
                for (part_head, range) in &parts.parts {
                    self.out.extend_from_slice(part_head);
                    self.send_file(file, range.clone(), core, sendfile).await?;
                    self.out.clear();
                }
                self.out.extend_from_slice(&parts.trailer);
                write_all(&self.s, &self.out, t).await?;
                Ok(parts.content_length())
            }
        }
    }

    /// Send what is pending in `self.out`, then `range` of `file`. Small pieces are
    /// read into the buffer and leave with the head in one write.
    async fn send_file(&mut self, file: &File, range: std::ops::Range<u64>, core: &CoreConf, sendfile: bool) -> io::Result<()> {
        let t = core.send_timeout;
        let len = range.end - range.start;
        if !sendfile || len <= crate::modules::static_files::cache::SMALL_BODY {
            let mut off = range.start;
            while off < range.end {
                let want = ((range.end - off) as usize).min(READ_CHUNK);
                let at = self.out.len();
                self.out.resize(at + want, 0);
                let n = file.read_at(&mut self.out[at..], off)?;
                self.out.truncate(at + n);
                if n == 0 {
                    return Err(io::Error::new(ErrorKind::UnexpectedEof, "file shrank while sending"));
                }
                off += n as u64;
                if self.out.len() >= READ_CHUNK || off == range.end {
                    write_all(&self.s, &self.out, t).await?;
                    self.out.clear();
                }
            }
            if !self.out.is_empty() {
                // An empty range: the head is still waiting to go out.
                write_all(&self.s, &self.out, t).await?;
                self.out.clear();
            }
            return Ok(());
        }
        // tcp_nopush: the head is sent with MSG_MORE, so the kernel holds it back
        // and it leaves together with the start of the file, as TCP_CORK around
        // head + sendfile would, without the two setsockopt calls per response.
        if core.tcp_nopush {
            send_more(&self.s, &self.out, t).await?;
        } else {
            write_all(&self.s, &self.out, t).await?;
        }
        self.out.clear();
        sendfile_all(&self.s, file, range, t).await
    }

    /// Close with a reset (SO_LINGER 0) once the connection is dropped.
    fn reset_on_close(&mut self) {
        self.s.set_reset_on_close();
        self.reset = true;
    }

    /// Answer a request we could not parse, then close.
    async fn refuse(&mut self, e: ParseError, core: &CoreConf) {
        let r = Response::error(e.status, core.server_tokens);
        self.out.clear();
        write_head(&mut self.out, &r, false, core.server_tokens);
        if write_vectored_all(&self.s, &self.out, &body_bytes(&r), core.send_timeout)
            .await
            .is_ok()
        {
            crate::error_log!(Info, "client sent invalid request: {} ({})", e.reason, e.status);
            self.close(core, true).await;
        }
    }

    /// Close after the response: with lingering close, read and drop what the
    /// client still sends for a while so it receives our response, not a reset.
    async fn close(&mut self, core: &CoreConf, unread: bool) {
        if self.reset {
            // No shutdown: the client must see the RST, not a clean FIN first.
            return;
        }
        let linger = match core.lingering_close {
            Lingering::Off => false,
            Lingering::On => unread || !self.buf.is_empty(),
            Lingering::Always => true,
        };
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

enum Read {
    Head(RequestHead),
    Idle,
    Closed,
}

enum ReadError {
    Parse(ParseError),
    TimedOut,
}

enum BodyError {
    TooLarge,
    Bad(ParseError),
    Io,
}

fn body_too_large(req: &Request<'_>, n: u64) -> Response {
    crate::error_log!(
        Error,
        "client intended to send too large body: {n} bytes, limit {}",
        req.conf.core.client_max_body_size
    );
    req.error(413)
}

fn body_bytes(r: &Response) -> bytes::Bytes {
    match &r.body {
        Body::Bytes(b) => b.clone(),
        _ => bytes::Bytes::new(),
    }
}

/// The Host to choose a server by: lowercase, without port or trailing dot.
fn host_of(head: &RequestHead) -> Cow<'_, str> {
    let Some(h) = head.host() else {
        return Cow::Borrowed("");
    };
    let h = if h.starts_with(b"[") {
        // IPv6 literal: keep through the closing bracket.
        h.iter().position(|&b| b == b']').map_or(h, |i| &h[..=i])
    } else {
        h.iter().position(|&b| b == b':').map_or(h, |i| &h[..i])
    };
    let h = h.strip_suffix(b".").unwrap_or(h);
    match std::str::from_utf8(h) {
        // The usual case borrows: no copy per request.
        Ok(s) if !s.bytes().any(|b| b.is_ascii_uppercase()) => Cow::Borrowed(s),
        _ => Cow::Owned(String::from_utf8_lossy(h).to_ascii_lowercase()),
    }
}

fn timed_out() -> io::Error {
    io::Error::new(ErrorKind::TimedOut, "send_timeout")
}

async fn wait_writable<S: Stream>(s: &S, t: Duration) -> io::Result<()> {
    tokio::time::timeout(t, s.writable()).await.map_err(|_| timed_out())?
}

/// Write all of `data`; `t` bounds each wait for the socket.
pub async fn write_all<S: Stream>(s: &S, mut data: &[u8], t: Duration) -> io::Result<()> {
    while !data.is_empty() {
        match s.try_write_vectored(&[IoSlice::new(data)]) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write all of `data` with MSG_MORE: more of the response follows at once.
async fn send_more<S: Stream>(s: &S, mut data: &[u8], t: Duration) -> io::Result<()> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    while !data.is_empty() {
        match s.try_io(Interest::WRITABLE, || crate::sys::send(fd, data, true)) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write `a` then `b` with writev, as one piece when the socket takes it.
async fn write_vectored_all<S: Stream>(s: &S, mut a: &[u8], mut b: &[u8], t: Duration) -> io::Result<()> {
    while !a.is_empty() || !b.is_empty() {
        match s.try_write_vectored(&[IoSlice::new(a), IoSlice::new(b)]) {
            Ok(mut n) => {
                let from_a = n.min(a.len());
                a = &a[from_a..];
                n -= from_a;
                b = &b[n..];
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn sendfile_all<S: Stream>(s: &S, file: &File, range: std::ops::Range<u64>, t: Duration) -> io::Result<()> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    let mut off = range.start;
    while off < range.end {
        let count = ((range.end - off) as usize).min(1 << 30);
        match s.try_io(Interest::WRITABLE, || crate::sys::sendfile(fd, file, &mut off, count)) {
            Ok(0) => return Err(io::Error::new(ErrorKind::UnexpectedEof, "file shrank while sending")),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_normalisation() {
        let mut b = bytes::BytesMut::from(&b"GET / HTTP/1.1\r\nHost: WWW.Example.COM.:8080\r\n\r\n"[..]);
        let h = super::parse::parse(&mut b, &Default::default()).unwrap().unwrap();
        assert_eq!(super::host_of(&h), "www.example.com");
    }
}
