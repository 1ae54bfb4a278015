//! A response out on an HTTP/3 stream: the head as a HEADERS frame without
//! the connection-specific fields HTTP/3 forbids, the body in DATA frames of
//! at most `http3_stream_buffer_size`. Each piece is taken by QUIC (within
//! the stream's and the connection's flow-control windows; send_timeout
//! bounds the wait) before the next is read from a file or pulled from an
//! upstream, so a slow reader holds back the file reads and the upstream
//! instead of filling memory.

use super::SendHalf;
use super::conf::Http3Conf;
use crate::core::message::head::Method;
use crate::core::message::response::{Body, FILE_PIECE, Response, read_file_piece};
use crate::core::request::{Finished, Request};
use crate::http::{fields, pipeline};
use bytes::Bytes;
use h3::error::Code;
use std::fs::File;
use std::io::{self, ErrorKind};
use std::ops::Range;
use std::time::Duration;

/// Send `resp` for `req` on its stream and log the request. `return 444` (and
/// a client gone, 499) resets the stream instead of answering.
pub async fn respond(tx: &mut SendHalf, req: &Request<'_>, mut resp: Response) {
    if resp.unanswered() {
        pipeline::unanswered(req, &resp);
        tx.stop_stream(Code::H3_REQUEST_REJECTED);
        return;
    }
    let core = &req.conf.core;
    let bodiless = resp.status == 304 || resp.status == 204 || resp.status < 200;
    let (head, head_len) = fields::response_head(&resp, core.server_tokens, bodiless);
    let head_only = bodiless || req.head.method == Method::Head;
    let trailers = resp.trailers.filter(|_| !head_only);
    let mut out = Out {
        tx,
        piece: req.conf.get::<Http3Conf>().stream_buffer_size as usize,
        timeout: core.send_timeout,
        sent: 0,
    };
    let mut r = out.timed(|tx| Box::pin(tx.send_response(head))).await;
    if r.is_ok() && !head_only {
        // The body is out of the response while it is sent, so the
        // trailers can be made from the response after.
        let mut body = std::mem::replace(&mut resp.body, Body::Empty);
        r = out.body(&mut body).await;
        resp.body = body;
        if let (Ok(()), Some(make)) = (&r, trailers) {
            let map = fields::trailer_map(make(req, &resp));
            if !map.is_empty() {
                r = out.timed(|tx| Box::pin(tx.send_trailers(map))).await;
            }
        }
    }
    if r.is_ok() {
        r = out.timed(|tx| Box::pin(tx.finish())).await;
    }
    if r.is_err() {
        out.tx.stop_stream(Code::H3_INTERNAL_ERROR);
    }
    let sent = out.sent;
    if let Some(post) = req.post_action() {
        post.await;
    }
    // Background subrequests (mirrors) end before the request is logged.
    if let Some(bg) = req.background() {
        bg.await;
    }
    pipeline::finished(&Finished {
        req,
        resp: &resp,
        head_bytes: head_len,
        body_bytes: sent,
        complete: r.is_ok(),
    });
}

type Step<'a> = std::pin::Pin<Box<dyn Future<Output = Result<(), h3::error::StreamError>> + 'a>>;

/// A stream's sending side, with the body bytes sent so far.
struct Out<'t> {
    tx: &'t mut SendHalf,
    /// Most bytes handed to the stream at once.
    piece: usize,
    timeout: Duration,
    sent: u64,
}

impl Out<'_> {
    /// One operation on the stream, within send_timeout.
    async fn timed(
        &mut self,
        op: impl for<'a> FnOnce(&'a mut SendHalf) -> Step<'a>,
    ) -> io::Result<()> {
        match tokio::time::timeout(self.timeout, op(self.tx)).await {
            Err(_) => Err(crate::http::send_timed_out()),
            Ok(Err(e)) => Err(io::Error::other(e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    async fn body(&mut self, body: &mut Body) -> io::Result<()> {
        match body {
            Body::Empty => Ok(()),
            Body::Bytes(b) => self.data(b.clone()).await,
            Body::File { file, range } => self.file(file, range.clone()).await,
            Body::Multipart { file, parts } => {
                for (part_head, range) in &parts.parts {
                    self.data(Bytes::copy_from_slice(part_head)).await?;
                    self.file(file, range.clone()).await?;
                }
                self.data(Bytes::copy_from_slice(&parts.trailer)).await
            }
            Body::Stream { stream, .. } => {
                // Each piece is taken before the next is asked for.
                while let Some(piece) = stream.next().await? {
                    self.data(piece).await?;
                }
                Ok(())
            }
        }
    }

    /// Send `data` in pieces of at most `piece` bytes.
    async fn data(&mut self, mut data: Bytes) -> io::Result<()> {
        while !data.is_empty() {
            let p = data.split_to(data.len().min(self.piece));
            let n = p.len() as u64;
            self.timed(|tx| Box::pin(tx.send_data(p))).await?;
            self.sent += n;
        }
        Ok(())
    }

    /// Send `range` of `file`, read a piece at a time as each is taken.
    async fn file(&mut self, file: &File, range: Range<u64>) -> io::Result<()> {
        let mut off = range.start;
        while off < range.end {
            let want = ((range.end - off) as usize).min(self.piece.clamp(1, FILE_PIECE));
            let read = read_file_piece(file, off, want)?;
            if read.is_empty() {
                return Err(ErrorKind::UnexpectedEof.into());
            }
            off += read.len() as u64;
            self.data(read).await?;
        }
        Ok(())
    }
}
