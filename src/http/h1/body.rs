//! The request body of an HTTP/1 request, read from the connection as the
//! handler pulls it: Content-Length or chunked framing, client_max_body_size,
//! client_body_timeout, `Expect: 100-continue` answered on the first read.

use super::chunked::{Chunk, ChunkedDecoder};
use super::write::write_all;
use crate::conf::model::CoreConf;
use crate::core::message::head::{BodyFraming, RequestHead, Version};
use crate::core::request::{BodyError, BoxFuture, Fields, RequestBody};
use crate::http::pipeline::ClientBody;
use crate::server::socket::Stream;
use bytes::BytesMut;
use std::io::ErrorKind;
use std::time::Duration;
use tokio::io::Interest;

/// The request body as read from this connection: handlers pull it through
/// `RequestBody`; what they leave is discarded afterwards.
pub(super) struct ConnBody<'c, S> {
    s: &'c S,
    /// Bytes read from the connection and not yet taken: the body, then
    /// whatever follows it (a pipelined request).
    buf: &'c mut BytesMut,
    framing: BodyFraming,
    /// Content-Length framing: bytes still to come.
    left: u64,
    dec: ChunkedDecoder,
    max: u64,
    timeout: Duration,
    send_timeout: Duration,
    /// `Expect: 100-continue` not answered yet.
    expect_continue: bool,
    /// The client spoke HTTP/1.1: it may be sent interim responses.
    http11: bool,
    done: bool,
    /// Body bytes taken from the connection, framing included.
    read: u64,
    /// Body bytes after decoding.
    decoded: u64,
    /// The socket was read, so the connection no longer knows it drained.
    pub(super) used_socket: bool,
}

impl<'c, S: Stream> ConnBody<'c, S> {
    pub(super) fn new(
        s: &'c S,
        buf: &'c mut BytesMut,
        head: &RequestHead,
        core: &CoreConf,
    ) -> Self {
        let (left, done) = match head.framing {
            BodyFraming::None | BodyFraming::Length(0) => (0, true),
            BodyFraming::Length(n) => (n, false),
            BodyFraming::Chunked => (0, false),
        };
        ConnBody {
            s,
            buf,
            framing: head.framing,
            left,
            dec: ChunkedDecoder::new(),
            max: core.client_max_body_size,
            timeout: core.client_body_timeout,
            send_timeout: core.send_timeout,
            expect_continue: head.expect_continue,
            http11: head.version == Version::Http11,
            done,
            read: 0,
            decoded: 0,
            used_socket: false,
        }
    }

    async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>, BodyError> {
        // As nginx: a handler that reads the body, even an empty one, first
        // sends the 100 the client waits for.
        if std::mem::take(&mut self.expect_continue) && self.buf.is_empty() {
            write_all(self.s, b"HTTP/1.1 100 Continue\r\n\r\n", self.send_timeout)
                .await
                .map_err(|_| BodyError::Closed)?;
        }
        if self.done {
            return Ok(None);
        }
        loop {
            if let BodyFraming::Chunked = self.framing {
                let before = self.buf.len();
                let piece = self.dec.decode(self.buf).map_err(BodyError::Bad)?;
                self.read += (before - self.buf.len()) as u64;
                match piece {
                    Chunk::Data(d) => {
                        self.decoded += d.len() as u64;
                        if self.max != 0 && self.decoded > self.max {
                            return Err(BodyError::TooLarge);
                        }
                        return Ok(Some(d));
                    }
                    Chunk::Done => {
                        self.done = true;
                        return Ok(None);
                    }
                    Chunk::NeedMore => {}
                }
            } else if self.left == 0 {
                self.done = true;
                return Ok(None);
            } else if !self.buf.is_empty() {
                let take = (self.buf.len() as u64).min(self.left) as usize;
                self.left -= take as u64;
                self.read += take as u64;
                self.decoded += take as u64;
                return Ok(Some(self.buf.split_to(take).freeze()));
            }
            self.fill().await?;
        }
    }

    /// Read more from the socket, waiting at most client_body_timeout.
    async fn fill(&mut self) -> Result<(), BodyError> {
        self.used_socket = true;
        self.buf.reserve(16 * 1024);
        loop {
            match self.s.try_read_buf(self.buf) {
                Ok(0) => return Err(BodyError::Closed),
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    match tokio::time::timeout(self.timeout, self.s.readable()).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => return Err(BodyError::Closed),
                        Err(_) => return Err(BodyError::TimedOut),
                    }
                }
                Err(_) => return Err(BodyError::Closed),
            }
        }
    }
}

impl<S: Stream> ClientBody for ConnBody<'_, S> {
    fn finished(&self) -> bool {
        self.done && !self.expect_continue
    }
    fn read(&self) -> u64 {
        self.read
    }
    fn decoded(&self) -> u64 {
        self.decoded
    }
}

impl<S: Stream> RequestBody for ConnBody<'_, S> {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<bytes::Bytes>, BodyError>> {
        Box::pin(self.next_chunk())
    }

    fn declared_len(&self) -> Option<u64> {
        match self.framing {
            BodyFraming::Length(n) => Some(n),
            _ => None,
        }
    }

    fn gone(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(client_gone(self.s))
    }

    fn early_hints<'a>(&'a mut self, fields: &'a Fields) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(256);
            if self.http11 && super::write::early_hints_head(&mut out, fields) {
                // A failure shows again when the response is written.
                let _ = write_all(self.s, &out, self.send_timeout).await;
            }
        })
    }
}

/// Resolves when the client closes or resets the connection: a peek of one
/// byte when it turns readable sees the end (0) or the error. Bytes waiting
/// (the next request, a body) say nothing about it: pending for ever then.
pub(super) async fn client_gone<S: Stream>(s: &S) {
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    let mut b = [0u8; 1];
    loop {
        // As the socket's one reader (no waiter list: see
        // `UpConn::poll_readable`); nothing else reads the client meanwhile.
        if std::future::poll_fn(|cx| s.poll_read_ready(cx))
            .await
            .is_err()
        {
            return;
        }
        match s.try_io(Interest::READABLE, || crate::sys::peek(fd, &mut b)) {
            Ok(0) => return,
            // A TLS stream is readable while it holds decrypted bytes.
            Ok(_) => return std::future::pending().await,
            Err(e) if e.kind() == ErrorKind::WouldBlock && S::PLAIN => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::future::pending().await,
            Err(_) => return,
        }
    }
}
