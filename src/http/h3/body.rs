//! A request body read from an HTTP/3 stream. QUIC's stream flow control
//! bounds what a client may send ahead of the handler
//! (`http3_stream_buffer_size`): the window reopens as pieces are read.
//! The h3 crate checks the DATA frames against content-length; a mismatch
//! fails the read as a gone client's.

use super::{RecvHalf, SendHalf};
use crate::conf::model::CoreConf;
use crate::core::message::head::{BodyFraming, RequestHead};
use crate::core::request::{BodyError, BoxFuture, Fields, RequestBody};
use crate::http::pipeline::ClientBody;
use bytes::{Buf, Bytes};
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
    match rx.poll_recv_data(&mut cx) {
        Poll::Ready(Ok(None)) => First::Ended,
        Poll::Ready(Ok(Some(mut b))) => First::Data(b.copy_to_bytes(b.remaining())),
        // A failure shows again on the first read.
        Poll::Ready(Err(_)) | Poll::Pending => First::Waiting,
    }
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
        let (taken, done) = match first {
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
            done,
            read: 0,
        }
    }

    fn count(&mut self, piece: Bytes) -> Result<Option<Bytes>, BodyError> {
        self.read += piece.len() as u64;
        if self.max != 0 && self.read > self.max {
            return Err(BodyError::TooLarge);
        }
        Ok(Some(piece))
    }

    async fn next_chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        if let Some(b) = self.taken.take() {
            return self.count(b);
        }
        loop {
            if self.done {
                return Ok(None);
            }
            let piece = match tokio::time::timeout(self.timeout, self.rx.recv_data()).await {
                Err(_) => return Err(BodyError::TimedOut),
                Ok(Err(_)) => return Err(BodyError::Closed),
                Ok(Ok(None)) => {
                    self.done = true;
                    return Ok(None);
                }
                Ok(Ok(Some(mut b))) => b.copy_to_bytes(b.remaining()),
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
}
