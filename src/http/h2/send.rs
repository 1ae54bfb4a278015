//! A response out on an HTTP/2 stream: the head as a HEADERS frame without the
//! connection-specific fields HTTP/2 forbids, the body in DATA frames no larger
//! than the stream's flow-control window allows. Each piece waits for window
//! (send_timeout bounds the wait) before the next is read from a file or pulled
//! from an upstream, so a slow reader holds back the file reads and the
//! upstream instead of filling memory.

use super::conf::Http2Conf;
use crate::core::message::head::Method;
use crate::core::message::response::{Body, Response};
use crate::core::message::response::{FILE_PIECE, read_file_piece};
use crate::core::request::{Finished, Request};
use crate::http::{fields, pipeline};
use bytes::Bytes;
use h2::SendStream;
use h2::server::SendResponse;
use std::fs::File;
use std::io::{self, ErrorKind};
use std::ops::Range;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Send `resp` for `req` on its stream and log the request. `return 444` (and
/// a client gone, 499) resets the stream instead of answering.
pub async fn respond(
    tx: &mut SendResponse<Bytes>,
    req: &Request<'_>,
    mut resp: Response,
    ahead: &Semaphore,
) {
    if resp.unanswered() {
        pipeline::unanswered(req, &resp);
        tx.send_reset(h2::Reason::INTERNAL_ERROR);
        return;
    }
    let core = &req.conf.core;
    let bodiless = resp.status == 304 || resp.status == 204 || resp.status < 200;
    let (head, head_len) = fields::response_head(&resp, core.server_tokens, bodiless);
    let size = resp.body.size();
    let head_only = bodiless || req.head.method == Method::Head;
    let trailers = resp.trailers.filter(|_| !head_only);
    let no_body = head_only || (size == Some(0) && trailers.is_none());
    let mut sent = 0;
    let mut complete = false;
    if let Ok(stream) = tx.send_response(head, no_body) {
        complete = true;
        let mut out = Out {
            s: stream,
            chunk: req.conf.get::<Http2Conf>().chunk_size,
            timeout: core.send_timeout,
            sent: 0,
            ahead,
        };
        if !no_body {
            // The body is out of the response while it is sent, so the
            // trailers can be made from the response after.
            let mut body = std::mem::replace(&mut resp.body, Body::Empty);
            let r = match trailers {
                None => out.body(&mut body, true).await,
                Some(make) => match out.body(&mut body, false).await {
                    Ok(()) => out.trailers(make(req, &resp)),
                    e => e,
                },
            };
            resp.body = body;
            if r.is_err() {
                out.s.send_reset(h2::Reason::INTERNAL_ERROR);
                complete = false;
            }
        }
        sent = out.sent;
    }
    if let Some(post) = req.post_action() {
        post.await;
    }
    // Background subrequests (mirrors) end before the request is logged
    // and the connection goes on.
    if let Some(bg) = req.background() {
        bg.await;
    }
    pipeline::finished(&Finished {
        req,
        resp: &resp,
        head_bytes: head_len,
        body_bytes: sent,
        complete,
    });
}

// A piece never needs more than a whole turn of the read-ahead.
const _: () = assert!(FILE_PIECE <= super::READ_AHEAD);

/// A stream's sending side, with the body bytes sent so far.
struct Out<'a> {
    s: SendStream<Bytes>,
    chunk: usize,
    timeout: Duration,
    sent: u64,
    /// The connection's file read-ahead (see `Conn::ahead`).
    ahead: &'a Semaphore,
}

impl Out<'_> {
    /// Send `body`; `end` closes the stream after it.
    async fn body(&mut self, body: &mut Body, end: bool) -> io::Result<()> {
        match body {
            Body::Empty => self.data(Bytes::new(), end).await,
            Body::Bytes(b) => self.data(b.clone(), end).await,
            Body::File { file, range } => self.file(file, range.clone(), end).await,
            Body::Multipart { file, parts } => {
                for (part_head, range) in &parts.parts {
                    self.data(Bytes::copy_from_slice(part_head), false).await?;
                    self.file(file, range.clone(), false).await?;
                }
                self.data(Bytes::copy_from_slice(&parts.trailer), end).await
            }
            Body::Stream { stream, .. } => {
                // Each piece is out (within the window) before the next is asked for.
                while let Some(piece) = stream.next().await? {
                    self.data(piece, false).await?;
                }
                self.data(Bytes::new(), end).await
            }
        }
    }

    /// End the stream with the trailer fields (an empty DATA frame when
    /// there are none).
    fn trailers(&mut self, fields: Vec<(&'static str, String)>) -> io::Result<()> {
        let map = fields::trailer_map(fields);
        if map.is_empty() {
            return self.send(Bytes::new(), true);
        }
        self.s.send_trailers(map).map_err(io::Error::other)
    }

    /// Window for the next piece of the `want` bytes still to send: at most
    /// http2_chunk_size. All of `want` is asked for, so the pieces that fit
    /// the window go out together (the codec's send buffer caps how much).
    async fn capacity(&mut self, want: usize) -> io::Result<usize> {
        self.s.reserve_capacity(want);
        loop {
            let cap = self.s.capacity();
            if cap > 0 {
                return Ok(cap.min(want).min(self.chunk));
            }
            let more = std::future::poll_fn(|cx| self.s.poll_capacity(cx));
            match tokio::time::timeout(self.timeout, more).await {
                Err(_) => return Err(crate::http::send_timed_out()),
                Ok(Some(Ok(_))) => {}
                Ok(None) => return Err(io::Error::from(ErrorKind::BrokenPipe)),
                Ok(Some(Err(e))) => return Err(io::Error::other(e)),
            }
        }
    }

    fn send(&mut self, piece: Bytes, end: bool) -> io::Result<()> {
        let n = piece.len() as u64;
        self.s.send_data(piece, end).map_err(io::Error::other)?;
        self.sent += n;
        Ok(())
    }

    /// Send `data` in pieces the window allows; `end` closes the stream after it.
    async fn data(&mut self, mut data: Bytes, end: bool) -> io::Result<()> {
        if data.is_empty() {
            return if end { self.send(data, true) } else { Ok(()) };
        }
        while !data.is_empty() {
            let n = self.capacity(data.len()).await?;
            let piece = data.split_to(n);
            self.send(piece, end && data.is_empty())?;
        }
        Ok(())
    }

    /// Send `range` of `file`: as much of it as the stream's window takes now
    /// (up to `FILE_PIECE`) is read with one call, then sent in DATA frames of
    /// at most http2_chunk_size (a 21 KB file is one read, not one per frame).
    /// Nothing is read ahead of the window, nor further ahead of the
    /// connection's writes than its read-ahead allows.
    async fn file(&mut self, file: &File, range: Range<u64>, end: bool) -> io::Result<()> {
        let mut off = range.start;
        if off == range.end && end {
            return self.send(Bytes::new(), true);
        }
        while off < range.end {
            let left = (range.end - off) as usize;
            self.capacity(left).await?;
            let want = left.min(self.s.capacity().clamp(1, FILE_PIECE));
            let turn = self.ahead.acquire_many(want as u32);
            match tokio::time::timeout(self.timeout, turn).await {
                Ok(Ok(p)) => p.forget(),
                Ok(Err(_)) => return Err(io::Error::from(ErrorKind::BrokenPipe)),
                Err(_) => return Err(crate::http::send_timed_out()),
            }
            let read = read_file_piece(file, off, want)?;
            off += read.len() as u64;
            self.data(read, end && off == range.end).await?;
        }
        Ok(())
    }
}
