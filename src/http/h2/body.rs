//! A request body read from an HTTP/2 stream. Each piece handed to the
//! handler reopens the stream's and the connection's receive windows by its
//! size, so a client can only be as far ahead as http2_body_preread_size.
//! The h2 crate checks the DATA against content-length and resets the stream
//! (PROTOCOL_ERROR) on a mismatch: the read then fails as a gone client's.

use crate::conf::model::CoreConf;
use crate::core::message::head::{BodyFraming, RequestHead};
use crate::core::request::{BodyError, BoxFuture, Fields, RequestBody};
use crate::http::pipeline::ClientBody;
use bytes::Bytes;
use h2::RecvStream;
use h2::server::SendResponse;
use std::time::Duration;

/// Empty DATA frames (without END_STREAM) a request body may have: each costs
/// a frame's work and brings nothing, so a run of them is a flood.
const MAX_EMPTY_DATA: u32 = 32;

pub struct H2Body<'r> {
    recv: RecvStream,
    /// For `100 Continue`, sent when the handler first reads.
    respond: &'r mut SendResponse<Bytes>,
    declared: Option<u64>,
    max: u64,
    timeout: Duration,
    expect_continue: bool,
    done: bool,
    read: u64,
    empty: u32,
}

impl<'r> H2Body<'r> {
    pub fn new(
        recv: RecvStream,
        respond: &'r mut SendResponse<Bytes>,
        head: &RequestHead,
        core: &CoreConf,
    ) -> Self {
        let done = recv.is_end_stream();
        H2Body {
            recv,
            respond,
            declared: match head.framing {
                BodyFraming::Length(n) => Some(n),
                _ => None,
            },
            max: core.client_max_body_size,
            timeout: core.client_body_timeout,
            expect_continue: head.expect_continue && !done,
            done,
            read: 0,
            empty: 0,
        }
    }

    /// The stream's receiving side back, to be dropped only after the
    /// response: with the body unread, the h2 crate then follows the
    /// response with RST_STREAM(NO_ERROR) (RFC 9113 §8.1) instead of
    /// cancelling the stream before it.
    pub fn into_recv(self) -> RecvStream {
        self.recv
    }

    /// Did the client send more empty DATA frames than a body may have?
    pub fn flooded(&self) -> bool {
        self.empty > MAX_EMPTY_DATA
    }

    async fn next_chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        if self.done {
            return Ok(None);
        }
        if std::mem::take(&mut self.expect_continue) {
            let mut cont = http::Response::new(());
            *cont.status_mut() = http::StatusCode::CONTINUE;
            // A stream the client already reset fails the read below.
            let _ = self.respond.send_informational(cont);
        }
        loop {
            let piece = match tokio::time::timeout(self.timeout, self.recv.data()).await {
                Err(_) => return Err(BodyError::TimedOut),
                Ok(None) => {
                    self.done = true;
                    return Ok(None);
                }
                Ok(Some(Err(_))) => return Err(BodyError::Closed),
                Ok(Some(Ok(d))) => d,
            };
            // An empty DATA frame carries nothing to hand on.
            if piece.is_empty() {
                self.empty += 1;
                if self.flooded() {
                    return Err(BodyError::Closed);
                }
                continue;
            }
            let _ = self.recv.flow_control().release_capacity(piece.len());
            self.read += piece.len() as u64;
            if self.max != 0 && self.read > self.max {
                return Err(BodyError::TooLarge);
            }
            return Ok(Some(piece));
        }
    }
}

impl RequestBody for H2Body<'_> {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>> {
        Box::pin(self.next_chunk())
    }

    fn declared_len(&self) -> Option<u64> {
        self.declared
    }

    /// RST_STREAM from the client (or the connection failing).
    fn gone(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::poll_fn(|cx| {
            self.respond.poll_reset(cx).map(|_| ())
        }))
    }

    fn early_hints<'a>(&'a mut self, fields: &'a Fields) -> BoxFuture<'a, ()> {
        if let Some(h) = crate::http::fields::early_hints_head(fields) {
            // A stream the client reset fails the response after.
            let _ = self.respond.send_informational(h);
        }
        Box::pin(std::future::ready(()))
    }
}

impl ClientBody for H2Body<'_> {
    fn read(&self) -> u64 {
        self.read
    }
    fn decoded(&self) -> u64 {
        self.read
    }
}
