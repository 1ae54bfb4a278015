//! A request body read from an HTTP/3 stream. QUIC's stream flow control
//! bounds what a client may send ahead of the handler
//! (`http3_stream_buffer_size`): the window reopens as pieces are read.
//! A body that ends short of its content-length, or runs past it, is a bad
//! request (400). A body the handler leaves unread is not waited for: the
//! client is asked to stop sending it (STOP_SENDING, RFC 9114 §4.1.2), and
//! the response goes out.

use super::{RecvHalf, SendHalf};
use crate::conf::model::CoreConf;
use crate::core::message::head::{BodyFraming, ParseError, RequestHead};
use crate::core::request::{BodyError, BoxFuture, Fields, RequestBody};
use crate::http::pipeline::ClientBody;
use bytes::{Buf, Bytes};
use h3::error::StreamError;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// What a stream had after its head, when it was looked at.
pub enum First {
    /// The stream ended with its head: no body.
    Ended,
    /// A first piece of body.
    Data(Bytes),
    /// Nothing yet: a body may follow (its length unknown without
    /// content-length).
    Waiting,
}

/// Look, without waiting, at what followed the head.
pub fn first(rx: &mut RecvHalf) -> First {
    let mut cx = Context::from_waker(Waker::noop());
    match poll_data(rx, &mut cx) {
        Poll::Ready(Ok(None)) => First::Ended,
        Poll::Ready(Ok(Some(b))) => First::Data(b),
        // A failure shows again on the first read.
        Poll::Ready(Err(_)) | Poll::Pending => First::Waiting,
    }
}

/// The next piece of body, `None` at its end. The h3 crate reads an empty
/// DATA frame as the end of the body: its end is asked for again, which at
/// the stream's real end (or after trailers) is the end once more.
fn poll_data(rx: &mut RecvHalf, cx: &mut Context<'_>) -> Poll<Result<Option<Bytes>, StreamError>> {
    for _ in 0..2 {
        match std::task::ready!(rx.poll_recv_data(cx)) {
            Ok(Some(mut b)) => return Poll::Ready(Ok(Some(b.copy_to_bytes(b.remaining())))),
            Ok(None) => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
    Poll::Ready(Ok(None))
}

pub struct H3Body<'c> {
    rx: RecvHalf,
    /// The piece [`first`] took.
    taken: Option<Bytes>,
    quic: &'c quinn::Connection,
    /// The stream's sending side, for interim responses.
    tx: &'c mut SendHalf,
    send_timeout: Duration,
    declared: Option<u64>,
    max: u64,
    timeout: Duration,
    /// The stream's end was seen.
    ended: bool,
    /// Nothing more is read: the end was handed out, or the body failed or
    /// was discarded.
    done: bool,
    read: u64,
}

impl<'c> H3Body<'c> {
    pub fn new(
        rx: RecvHalf,
        first: First,
        head: &RequestHead,
        core: &CoreConf,
        quic: &'c quinn::Connection,
        tx: &'c mut SendHalf,
    ) -> Self {
        let (taken, ended) = match first {
            First::Ended => (None, true),
            First::Data(b) => (Some(b), false),
            First::Waiting => (None, false),
        };
        H3Body {
            rx,
            taken,
            quic,
            tx,
            send_timeout: core.send_timeout,
            declared: match head.framing {
                BodyFraming::Length(n) => Some(n),
                _ => None,
            },
            max: core.client_max_body_size,
            timeout: core.client_body_timeout,
            ended,
            done: false,
            read: 0,
        }
    }

    fn count(&mut self, piece: Bytes) -> Result<Option<Bytes>, BodyError> {
        self.read += piece.len() as u64;
        if let Some(n) = self.declared
            && self.read > n
        {
            crate::error_log!(
                Info,
                "client intended to send body data larger than declared"
            );
            return Err(self.bad());
        }
        if self.max != 0 && self.read > self.max {
            return Err(BodyError::TooLarge);
        }
        Ok(Some(piece))
    }

    /// The body is malformed: nothing more of it is read.
    fn bad(&mut self) -> BodyError {
        self.done = true;
        BodyError::Bad(ParseError::BAD_REQUEST)
    }

    /// The stream ended: short of its content-length is a bad request.
    fn end(&mut self) -> Result<Option<Bytes>, BodyError> {
        self.ended = true;
        self.done = true;
        match self.declared {
            Some(n) if n != self.read => {
                crate::error_log!(
                    Info,
                    "client sent less body data than expected: {} out of {n} bytes of request body received",
                    self.read
                );
                Err(self.bad())
            }
            _ => Ok(None),
        }
    }

    async fn next_chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        if let Some(b) = self.taken.take() {
            return self.count(b);
        }
        loop {
            if self.done {
                return Ok(None);
            }
            if self.ended {
                return self.end();
            }
            let next = std::future::poll_fn(|cx| poll_data(&mut self.rx, cx));
            let piece = match tokio::time::timeout(self.timeout, next).await {
                Err(_) => return Err(BodyError::TimedOut),
                Ok(Err(_)) => return Err(BodyError::Closed),
                Ok(Ok(None)) => return self.end(),
                Ok(Ok(Some(b))) => b,
            };
            if !piece.is_empty() {
                return self.count(piece);
            }
        }
    }
}

impl RequestBody for H3Body<'_> {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>> {
        Box::pin(self.next_chunk())
    }

    fn declared_len(&self) -> Option<u64> {
        self.declared
    }

    /// The connection closed (the client left or it failed).
    fn gone(&mut self) -> BoxFuture<'_, ()> {
        let quic = self.quic.clone();
        Box::pin(async move {
            quic.closed().await;
        })
    }

    fn early_hints<'a>(&'a mut self, fields: &'a Fields) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(h) = crate::http::fields::early_hints_head(fields) {
                // A failure shows again when the response is sent.
                let _ = tokio::time::timeout(self.send_timeout, self.tx.send_response(h)).await;
            }
        })
    }
}

impl ClientBody for H3Body<'_> {
    fn read(&self) -> u64 {
        self.read
    }
    fn decoded(&self) -> u64 {
        self.read
    }
    /// Not waited for: the receiving side is dropped with the body, and
    /// QUIC asks the client to stop sending (STOP_SENDING with code 0:
    /// h3-quinn cannot send one with H3_NO_ERROR while a read is pending).
    fn discard(&mut self) -> BoxFuture<'_, Result<(), BodyError>> {
        self.done = true;
        Box::pin(std::future::ready(Ok(())))
    }
}
