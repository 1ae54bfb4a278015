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

/// The stream's receiving side as a body. The handler reads it through
/// [`H2Body`]; a response sent before its end reads the rest with it
/// (`OwnFields::duplex`), and what is left after is discarded.
pub struct Recv {
    recv: RecvStream,
    declared: Option<u64>,
    max: u64,
    timeout: Duration,
    done: bool,
    read: u64,
    empty: u32,
}

pub struct H2Body<'r> {
    rest: Recv,
    /// For `100 Continue`, sent when the handler first reads.
    respond: &'r mut SendResponse<Bytes>,
    expect_continue: bool,
}

impl<'r> H2Body<'r> {
    pub fn new(rest: Recv, respond: &'r mut SendResponse<Bytes>, head: &RequestHead) -> Self {
        H2Body {
            expect_continue: head.expect_continue && !rest.done,
            rest,
            respond,
        }
    }

    /// The stream's receiving side back, to be dropped only after the
    /// response: with the body unread, the h2 crate then follows the
    /// response with RST_STREAM(NO_ERROR) (RFC 9113 §8.1) instead of
    /// cancelling the stream before it.
    pub fn into_recv(self) -> Recv {
        self.rest
    }

    /// Did the client send more empty DATA frames than a body may have?
    pub fn flooded(&self) -> bool {
        self.rest.flooded()
    }
}

impl Recv {
    fn flooded(&self) -> bool {
        self.empty > MAX_EMPTY_DATA
    }

    pub fn new(recv: RecvStream, head: &RequestHead, core: &CoreConf) -> Self {
        Recv {
            done: recv.is_end_stream(),
            recv,
            declared: match head.framing {
                BodyFraming::Length(n) => Some(n),
                _ => None,
            },
            max: core.client_max_body_size,
            timeout: core.client_body_timeout,
            read: 0,
            empty: 0,
        }
    }

    /// The h2 crate's receiving side, for what is discarded after the
    /// response.
    pub fn stream(&mut self) -> &mut RecvStream {
        &mut self.recv
    }

    async fn next_chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        if self.done {
            return Ok(None);
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

/// The rest of the body, read beside the response. A client that resets
/// the stream fails the response, which ends the reading.
impl RequestBody for Recv {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>> {
        Box::pin(self.next_chunk())
    }

    fn declared_len(&self) -> Option<u64> {
        self.declared
    }

    fn gone(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

impl RequestBody for H2Body<'_> {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>> {
        if std::mem::take(&mut self.expect_continue) {
            let mut cont = http::Response::new(());
            *cont.status_mut() = http::StatusCode::CONTINUE;
            // A stream the client already reset fails the read.
            let _ = self.respond.send_informational(cont);
        }
        self.rest.chunk()
    }

    fn declared_len(&self) -> Option<u64> {
        self.rest.declared
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

    fn full_duplex(&self) -> bool {
        true
    }
}

impl ClientBody for H2Body<'_> {
    fn read(&self) -> u64 {
        self.rest.read
    }
    fn decoded(&self) -> u64 {
        self.rest.read
    }
    /// Not waited for: the response goes at once, as nginx skips the DATA
    /// of a stream whose body is discarded; what the client still sends is
    /// read and dropped after the response (lingering), or the stream is
    /// reset.
    fn discard(&mut self) -> BoxFuture<'_, Result<(), BodyError>> {
        Box::pin(std::future::ready(Ok(())))
    }
}
