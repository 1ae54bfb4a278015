//! An HTTP/2 connection to a peer as vireo's client runs it (RFC 9113):
//! one stream at a time, framed and flow-controlled in the task of the
//! request that uses it. Frames to send are gathered in one buffer and go
//! in one write (the preface and SETTINGS with the first request's HEADERS
//! and DATA); frames read are taken from one buffer, a DATA payload handed
//! on without a copy. Control frames (SETTINGS, PING, WINDOW_UPDATE,
//! GOAWAY) are answered as they are read.

use super::hpack::{self, Fields};
use crate::upstream::UpConn;
use bytes::{Bytes, BytesMut};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use tokio::io::AsyncWrite;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PUSH_PROMISE: u8 = 5;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The largest frame the peer may send (the default, which the client
/// keeps).
const MAX_FRAME: usize = 16_384;

/// Reads one poll of the stream makes before it lets the worker's other
/// tasks run.
const READS_A_TURN: usize = 32;

/// The most answers to PING and SETTINGS waiting to be sent before the peer
/// is taken as one that does not read what it asks for.
const MAX_ANSWERS: usize = 1024;

/// The receive window the client gives each stream and the connection.
pub const WINDOW: u32 = 256 * 1024;

/// What a stream's frames gave.
#[derive(Debug)]
pub enum Event {
    /// A header block: an informational head, the reply's, or trailers;
    /// `true` when it ends the stream.
    Head(Fields, bool),
    /// A DATA payload; `true` when it ends the stream.
    Data(Bytes, bool),
}

/// Why the connection or the stream failed.
#[derive(Debug)]
pub enum Broke {
    Io(io::Error),
    /// The peer closed the connection.
    Closed,
    /// GOAWAY with an error, or one that left the stream out
    /// (`refused`: the peer did not process it).
    GoAway {
        code: u32,
        refused: bool,
    },
    /// RST_STREAM on the stream.
    Reset(u32),
    /// A header block over the size taken.
    TooBig,
    /// Frames HTTP/2 does not allow.
    Protocol(String),
}

impl Broke {
    fn protocol(why: impl Into<String>) -> Broke {
        Broke::Protocol(why.into())
    }
}

pub struct Session {
    conn: UpConn,
    rbuf: BytesMut,
    /// Frames to send, of which `sent` bytes are written.
    out: Vec<u8>,
    sent: usize,
    /// Send windows: the connection's and the stream's.
    conn_window: i64,
    stream_window: i64,
    /// The peer's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    initial: i64,
    max_frame: usize,
    /// The connection's receive window, and DATA taken but not yet given
    /// back to it with WINDOW_UPDATE.
    recv_window: i64,
    unacked: u32,
    /// The stream open (0: none) and the next one's id.
    stream: u32,
    next_id: u32,
    /// The stream's header block being gathered (HEADERS, CONTINUATION),
    /// and whether its HEADERS ended the stream.
    block: Option<(Vec<u8>, bool)>,
    max_block: usize,
    /// The task waiting for send window.
    window_waker: Option<Waker>,
    /// Answers to the peer's PING and SETTINGS queued since the last write
    /// of all that was queued.
    answers: usize,
    /// GOAWAY came: no new stream goes on it.
    pub goaway: bool,
    /// Exchanges made on it so far (`keepalive_requests`).
    pub uses: u64,
}

fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, id: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&id.to_be_bytes());
}

impl Session {
    /// A session over `conn`, its preface and SETTINGS queued to go with
    /// the first request: no dynamic table for the replies' fields, no push,
    /// a [`WINDOW`] for the streams and the connection. Header blocks over
    /// `max_block` bytes are refused.
    pub fn new(conn: UpConn, max_block: usize) -> Box<Session> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(PREFACE);
        frame_head(&mut out, 18, SETTINGS, 0, 0);
        for (id, value) in [(1u16, 0u32), (2, 0), (4, WINDOW)] {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&value.to_be_bytes());
        }
        frame_head(&mut out, 4, WINDOW_UPDATE, 0, 0);
        out.extend_from_slice(&(WINDOW - 65_535).to_be_bytes());
        Box::new(Session {
            conn,
            rbuf: BytesMut::new(),
            out,
            sent: 0,
            conn_window: 65_535,
            stream_window: 0,
            initial: 65_535,
            max_frame: MAX_FRAME,
            recv_window: WINDOW as i64,
            unacked: 0,
            stream: 0,
            next_id: 1,
            block: None,
            max_block,
            window_waker: None,
            answers: 0,
            goaway: false,
            uses: 0,
        })
    }

    /// Open a stream with the header block `fields` (`end`: no body
    /// follows), queued.
    pub fn open(&mut self, fields: &[u8], end: bool) -> Result<(), Broke> {
        if self.goaway || self.next_id > i32::MAX as u32 {
            return Err(Broke::GoAway {
                code: 0,
                refused: true,
            });
        }
        let id = self.next_id;
        self.next_id += 2;
        self.stream = id;
        self.stream_window = self.initial;
        let mut rest = fields;
        let mut kind = HEADERS;
        loop {
            let n = rest.len().min(self.max_frame);
            let last = n == rest.len();
            let mut flags = if last { END_HEADERS } else { 0 };
            if kind == HEADERS && end {
                flags |= END_STREAM;
            }
            frame_head(&mut self.out, n, kind, flags, id);
            self.out.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if last {
                return Ok(());
            }
            kind = CONTINUATION;
        }
    }

    /// The body bytes the windows take now, in one frame at most.
    pub fn room(&self) -> usize {
        self.conn_window.min(self.stream_window).max(0) as usize
    }

    /// Ready once the windows take a byte.
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.room() > 0 {
            return Poll::Ready(());
        }
        self.window_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Queue `data` (within [`Session::room`]) as DATA frames, the last with
    /// END_STREAM when `end`.
    pub fn data(&mut self, mut data: &[u8], end: bool) {
        debug_assert!(data.len() <= self.room());
        self.conn_window -= data.len() as i64;
        self.stream_window -= data.len() as i64;
        loop {
            let n = data.len().min(self.max_frame);
            let last = n == data.len();
            let flags = if last && end { END_STREAM } else { 0 };
            frame_head(&mut self.out, n, DATA, flags, self.stream);
            self.out.extend_from_slice(&data[..n]);
            data = &data[n..];
            if last {
                return;
            }
        }
    }

    /// Write what is queued.
    pub fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.out.len() {
            let n =
                std::task::ready!(Pin::new(&mut self.conn).poll_write(cx, &self.out[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.out.clear();
        self.sent = 0;
        self.answers = 0;
        Pin::new(&mut self.conn).poll_flush(cx)
    }

    /// `n` bytes of the stream's DATA were taken: given back to the peer
    /// (the stream's window and the connection's) once half a window is.
    pub fn consumed(&mut self, n: usize, stream_open: bool) {
        self.unacked += n as u32;
        if self.unacked < WINDOW / 2 {
            return;
        }
        let inc = std::mem::take(&mut self.unacked);
        self.recv_window += inc as i64;
        for id in [0, self.stream] {
            if id == 0 || stream_open {
                frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, id);
                self.out.extend_from_slice(&inc.to_be_bytes());
            }
        }
    }

    /// The stream's next event, the control frames before it answered.
    pub fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Result<Event, Broke>> {
        for _ in 0..READS_A_TURN {
            if let Some(e) = self.parse()? {
                return Poll::Ready(Ok(e));
            }
            if !self.out.is_empty()
                && let Poll::Ready(Err(e)) = self.poll_flush(cx)
            {
                return Poll::Ready(Err(Broke::Io(e)));
            }
            // Answers the peer does not read (PING, SETTINGS) pile up no
            // further.
            if self.answers > MAX_ANSWERS {
                return Poll::Ready(Err(Broke::protocol("control frames it does not read")));
            }
            if self.rbuf.capacity() - self.rbuf.len() < 4096 {
                self.rbuf.reserve(MAX_FRAME + 9);
            }
            match self.conn.try_read_buf(&mut self.rbuf) {
                Ok(0) => return Poll::Ready(Err(Broke::Closed)),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if let Err(e) = std::task::ready!(self.conn.poll_readable(cx)) {
                        return Poll::Ready(Err(Broke::Io(e)));
                    }
                }
                Err(e) => return Poll::Ready(Err(Broke::Io(e))),
            }
        }
        // A peer whose frames give the stream nothing (control frames, DATA
        // of a stream no longer read) does not hold the worker: the task
        // goes on at its next turn.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// A kept session still fit for a stream: what the peer sent while it
    /// was idle answered, and neither a close nor GOAWAY among it.
    pub fn fit(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        matches!(self.poll_event(&mut cx), Poll::Pending) && !self.goaway
    }

    /// Take the complete frames in the read buffer until one gives the
    /// stream an event.
    fn parse(&mut self) -> Result<Option<Event>, Broke> {
        loop {
            if self.rbuf.len() < 9 {
                return Ok(None);
            }
            let h = &self.rbuf[..9];
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            let (kind, flags) = (h[3], h[4]);
            let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            if len > MAX_FRAME {
                return Err(Broke::protocol(format!("frame of {len} bytes")));
            }
            if self.rbuf.len() < 9 + len {
                self.rbuf.reserve(9 + len - self.rbuf.len());
                return Ok(None);
            }
            let _ = self.rbuf.split_to(9);
            let mut payload = self.rbuf.split_to(len);
            if self.block.is_some() && kind != CONTINUATION {
                return Err(Broke::protocol("header block interrupted"));
            }
            if let Some(e) = self.frame(kind, flags, id, &mut payload)? {
                return Ok(Some(e));
            }
        }
    }

    fn frame(
        &mut self,
        kind: u8,
        flags: u8,
        id: u32,
        payload: &mut BytesMut,
    ) -> Result<Option<Event>, Broke> {
        let len = payload.len();
        let stream = self.stream != 0 && id == self.stream;
        match kind {
            DATA => {
                if id == 0 {
                    return Err(Broke::protocol("DATA on stream 0"));
                }
                self.recv_window -= len as i64;
                if self.recv_window < 0 {
                    return Err(Broke::protocol("DATA past the flow-control window"));
                }
                strip_padding(flags, payload)?;
                // Padding, and DATA of a stream no longer read, are taken
                // at once.
                let taken = if stream { len - payload.len() } else { len };
                self.consumed(taken, stream);
                if stream {
                    let data = std::mem::take(payload).freeze();
                    return Ok(Some(Event::Data(data, flags & END_STREAM != 0)));
                }
            }
            HEADERS => {
                if !stream {
                    return Err(Broke::protocol(format!("HEADERS on stream {id}")));
                }
                strip_padding(flags, payload)?;
                if flags & PRIORITY != 0 {
                    if payload.len() < 5 {
                        return Err(Broke::protocol("short HEADERS"));
                    }
                    let _ = payload.split_to(5);
                }
                let end = flags & END_STREAM != 0;
                if flags & END_HEADERS != 0 {
                    // The whole block in one frame: decoded where it is.
                    if payload.len() > self.max_block {
                        return Err(Broke::TooBig);
                    }
                    return decoded(payload, end).map(Some);
                }
                self.block = Some((Vec::with_capacity(2 * payload.len()), end));
                return self.block_piece(flags, payload);
            }
            CONTINUATION => {
                if self.block.is_none() || !stream {
                    return Err(Broke::protocol("CONTINUATION out of a header block"));
                }
                return self.block_piece(flags, payload);
            }
            RST_STREAM => {
                if len != 4 {
                    return Err(Broke::protocol("RST_STREAM of a wrong size"));
                }
                if stream {
                    return Err(Broke::Reset(be32(payload)));
                }
            }
            SETTINGS => {
                if id != 0 || !len.is_multiple_of(6) {
                    return Err(Broke::protocol("malformed SETTINGS"));
                }
                if flags & ACK == 0 {
                    self.settings(payload)?;
                    frame_head(&mut self.out, 0, SETTINGS, ACK, 0);
                    self.answers += 1;
                }
            }
            PUSH_PROMISE => return Err(Broke::protocol("PUSH_PROMISE, push being off")),
            PING => {
                if len != 8 {
                    return Err(Broke::protocol("PING of a wrong size"));
                }
                if flags & ACK == 0 {
                    frame_head(&mut self.out, 8, PING, ACK, 0);
                    self.out.extend_from_slice(payload);
                    self.answers += 1;
                }
            }
            GOAWAY => {
                if len < 8 {
                    return Err(Broke::protocol("short GOAWAY"));
                }
                self.goaway = true;
                let last = be32(payload) & 0x7fff_ffff;
                let code = be32(&payload[4..]);
                let refused = self.stream != 0 && self.stream > last;
                if refused || code != 0 {
                    return Err(Broke::GoAway { code, refused });
                }
            }
            WINDOW_UPDATE => {
                if len != 4 {
                    return Err(Broke::protocol("WINDOW_UPDATE of a wrong size"));
                }
                let inc = (be32(payload) & 0x7fff_ffff) as i64;
                if inc == 0 {
                    return Err(Broke::protocol("WINDOW_UPDATE of 0"));
                }
                match id {
                    0 => self.conn_window += inc,
                    _ if stream => self.stream_window += inc,
                    _ => {}
                }
                if self.conn_window.max(self.stream_window) > i32::MAX as i64 {
                    return Err(Broke::protocol("flow-control window past 2^31-1"));
                }
                if self.room() > 0
                    && let Some(w) = self.window_waker.take()
                {
                    w.wake();
                }
            }
            // PRIORITY, and frame types HTTP/2 lets a peer ignore.
            _ => {}
        }
        Ok(None)
    }

    fn settings(&mut self, p: &[u8]) -> Result<(), Broke> {
        for s in p.chunks_exact(6) {
            let value = be32(&s[2..]);
            match u16::from_be_bytes([s[0], s[1]]) {
                4 => {
                    if value > i32::MAX as u32 {
                        return Err(Broke::protocol("SETTINGS_INITIAL_WINDOW_SIZE too large"));
                    }
                    let delta = value as i64 - self.initial;
                    self.initial = value as i64;
                    if self.stream != 0 {
                        self.stream_window += delta;
                    }
                }
                5 => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(Broke::protocol("bad SETTINGS_MAX_FRAME_SIZE"));
                    }
                    self.max_frame = value as usize;
                }
                _ => {}
            }
        }
        if self.room() > 0
            && let Some(w) = self.window_waker.take()
        {
            w.wake();
        }
        Ok(())
    }

    /// A HEADERS or CONTINUATION payload of the block being gathered: the
    /// block decoded once END_HEADERS ends it.
    fn block_piece(&mut self, flags: u8, payload: &[u8]) -> Result<Option<Event>, Broke> {
        let (block, _) = self.block.as_mut().expect("a block is being gathered");
        if block.len() + payload.len() > self.max_block {
            return Err(Broke::TooBig);
        }
        block.extend_from_slice(payload);
        if flags & END_HEADERS == 0 {
            return Ok(None);
        }
        let (block, end) = self.block.take().expect("a block is being gathered");
        decoded(&block, end).map(Some)
    }

    /// The stream is over on both sides: the next may open.
    pub fn close_stream(&mut self) {
        self.stream = 0;
    }

    /// Let the read buffer's room go when nothing waits in it: a session
    /// idle for a while holds no more than its connection.
    pub fn rest(&mut self) {
        if self.rbuf.is_empty() {
            self.rbuf = BytesMut::new();
        }
    }
}

/// The event of a complete header block.
fn decoded(block: &[u8], end: bool) -> Result<Event, Broke> {
    let mut fields = Fields::with_capacity(block.len());
    hpack::decode(block, &mut fields).map_err(|e| Broke::protocol(format!("header block: {e}")))?;
    Ok(Event::Head(fields, end))
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Take a PADDED frame's pad length and padding off its payload.
fn strip_padding(flags: u8, p: &mut BytesMut) -> Result<(), Broke> {
    if flags & PADDED == 0 {
        return Ok(());
    }
    let pad = *p
        .first()
        .ok_or_else(|| Broke::protocol("empty padded frame"))? as usize;
    if pad >= p.len() {
        return Err(Broke::protocol("padding past the frame"));
    }
    let _ = p.split_to(1);
    p.truncate(p.len() - pad);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Duration;

    async fn flush(s: &mut Session) {
        std::future::poll_fn(|cx| s.poll_flush(cx)).await.unwrap();
    }

    fn read_frame(s: &mut std::net::TcpStream) -> (u8, u8, u32, Vec<u8>) {
        let mut h = [0u8; 9];
        s.read_exact(&mut h).unwrap();
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let mut p = vec![0u8; len];
        s.read_exact(&mut p).unwrap();
        (h[3], h[4], be32(&h[5..]), p)
    }

    fn frame(kind: u8, flags: u8, id: u32, p: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame_head(&mut out, p.len(), kind, flags, id);
        out.extend_from_slice(p);
        out
    }

    /// Frames of the kinds in `want` from the client, in order, others
    /// (SETTINGS of its own, WINDOW_UPDATE) passed over.
    fn expect(s: &mut std::net::TcpStream, want: &[(u8, u8)]) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        while got.len() < want.len() {
            let (kind, flags, _, p) = read_frame(s);
            let (k, f) = want[got.len()];
            if kind == k && flags == f {
                got.push(p);
            } else {
                assert!(kind == SETTINGS || kind == WINDOW_UPDATE, "frame {kind}");
            }
        }
        got
    }

    /// The client's frames and answers to what a peer sends: SETTINGS and
    /// PING answered, the body held to the peer's window until it grows, a
    /// padded and prioritised head split over CONTINUATION, padded DATA and
    /// trailers.
    #[test]
    fn a_stream_against_a_scripted_peer() {
        let peer = |s: &mut std::net::TcpStream| {
            let head = expect(s, &[(HEADERS, END_HEADERS)]);
            let mut fields = Fields::default();
            hpack::decode(&head[0], &mut fields).unwrap();
            assert!(fields.iter().any(|f| f == (&b":path"[..], &b"/x"[..])));
            // A window of 4 for the stream, and a PING.
            s.write_all(&frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 4]))
                .unwrap();
            s.write_all(&frame(PING, 0, 0, b"12345678")).unwrap();
            let got = expect(s, &[(SETTINGS, ACK), (PING, ACK), (DATA, 0)]);
            assert_eq!(got[1], b"12345678");
            assert_eq!(got[2], b"abcd");
            s.write_all(&frame(WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes()))
                .unwrap();
            assert_eq!(expect(s, &[(DATA, END_STREAM)])[0], b"ef");
            // `:status: 200` padded and prioritised, then `x-a: b` in a
            // CONTINUATION.
            let mut p = vec![2u8, 0, 0, 0, 0, 16];
            p.push(0x88);
            p.extend_from_slice(&[0, 0]);
            s.write_all(&frame(HEADERS, PADDED | PRIORITY, 1, &p))
                .unwrap();
            let mut c = Vec::new();
            hpack::encode(&mut c, b"x-a", b"b");
            s.write_all(&frame(CONTINUATION, END_HEADERS, 1, &c))
                .unwrap();
            s.write_all(&frame(DATA, PADDED, 1, b"\x03hello\0\0\0"))
                .unwrap();
            let mut t = Vec::new();
            hpack::encode(&mut t, b"grpc-status", b"0");
            s.write_all(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &t))
                .unwrap();
        };
        scripted(true, peer, async |s: &mut Session| {
            // The peer's SETTINGS give the stream a window of 4: read until
            // they are in (a read that ends in no event but answers them).
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while s.room() != 4 && std::time::Instant::now() < until {
                let read = std::future::poll_fn(|cx| s.poll_event(cx));
                assert!(
                    tokio::time::timeout(Duration::from_millis(20), read)
                        .await
                        .is_err()
                );
            }
            let mut body: &[u8] = b"abcdef";
            let mut events = Vec::new();
            while !body.is_empty() {
                let n = s.room().min(body.len());
                if n == 0 {
                    // Read until the window grows (the task is woken).
                    let e = std::future::poll_fn(|cx| match s.poll_room(cx) {
                        Poll::Ready(()) => Poll::Ready(None),
                        Poll::Pending => s.poll_event(cx).map(Some),
                    })
                    .await;
                    events.extend(e.map(Result::unwrap));
                    continue;
                }
                s.data(&body[..n], n == body.len());
                body = &body[n..];
                flush(s).await;
            }
            while !matches!(events.last(), Some(Event::Head(_, true))) {
                events.push(std::future::poll_fn(|cx| s.poll_event(cx)).await.unwrap());
            }
            let [
                Event::Head(h, false),
                Event::Data(d, false),
                Event::Head(t, true),
            ] = &events[..]
            else {
                panic!("{events:?}");
            };
            let h: Vec<_> = h.iter().collect();
            assert_eq!(h, [(&b":status"[..], &b"200"[..]), (b"x-a", b"b")]);
            assert_eq!(&d[..], b"hello");
            assert_eq!(t.iter().next(), Some((&b"grpc-status"[..], &b"0"[..])));
            s.close_stream();
            s.rest();
            assert!(s.fit());
        });
    }

    /// A peer that answers a stream's HEADERS with `reply` (frames): what
    /// the session's read of the stream gives.
    fn answered_with(reply: Vec<u8>) -> Result<Event, Broke> {
        let peer = move |s: &mut std::net::TcpStream| {
            expect(s, &[(HEADERS, END_HEADERS | END_STREAM)]);
            s.write_all(&reply).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
        };
        scripted(false, peer, async |s: &mut Session| {
            std::future::poll_fn(|cx| s.poll_event(cx)).await
        })
    }

    /// `client` on a session to a peer that runs `script` once it has read
    /// the preface, then reads until the client closes. The session's
    /// stream is open: a POST to /x whose body is to come (`body`), else a
    /// GET.
    fn scripted<T>(
        body: bool,
        script: impl FnOnce(&mut std::net::TcpStream) + Send + 'static,
        client: impl AsyncFnOnce(&mut Session) -> T,
    ) -> T {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = crate::upstream::PeerAddr::Tcp(l.local_addr().unwrap());
        let peer = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut preface = [0u8; 24];
            s.read_exact(&mut preface).unwrap();
            assert_eq!(&preface[..], PREFACE);
            script(&mut s);
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = rt.block_on(async {
            let conn =
                crate::upstream::pool::connect_from(&addr, None, None, Duration::from_secs(5))
                    .await
                    .unwrap();
            let mut s = Session::new(conn, 65_536);
            let mut block = Vec::new();
            hpack::encode_method(&mut block, if body { b"POST" } else { b"GET" });
            hpack::encode(&mut block, b":path", b"/x");
            s.open(&block, !body).unwrap();
            flush(&mut s).await;
            client(&mut s).await
        });
        drop(rt);
        peer.join().unwrap();
        got
    }

    /// The ways a peer ends a stream or its session before the reply, as
    /// the exchange tells them apart (a refused stream may go to another
    /// peer; a reset one is an invalid reply).
    #[test]
    fn goaway_reset_close_and_bad_frames() {
        let goaway = |last: u32, code: u32| {
            let mut p = last.to_be_bytes().to_vec();
            p.extend_from_slice(&code.to_be_bytes());
            frame(GOAWAY, 0, 0, &p)
        };
        assert!(matches!(
            answered_with(goaway(0, 0)),
            Err(Broke::GoAway { refused: true, .. })
        ));
        assert!(matches!(
            answered_with(goaway(1, 2)),
            Err(Broke::GoAway {
                code: 2,
                refused: false
            })
        ));
        assert!(matches!(
            answered_with(frame(RST_STREAM, 0, 1, &7u32.to_be_bytes())),
            Err(Broke::Reset(7))
        ));
        // A reset of a stream no longer read, then the reply.
        let mut p = frame(RST_STREAM, 0, 3, &8u32.to_be_bytes());
        p.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]));
        assert!(matches!(answered_with(p), Ok(Event::Head(_, true))));
        assert!(matches!(
            answered_with(frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2])),
            Err(Broke::Protocol(_))
        ));
        assert!(matches!(
            answered_with(frame(DATA, 0, 1, &vec![0; MAX_FRAME + 1])),
            Err(Broke::Protocol(_))
        ));
        // A header block over the size taken.
        let big = vec![0u8; 70_000];
        let mut p = frame(HEADERS, 0, 1, &big[..MAX_FRAME]);
        for piece in big[MAX_FRAME..].chunks(MAX_FRAME) {
            p.extend(frame(CONTINUATION, 0, 1, piece));
        }
        assert!(matches!(answered_with(p), Err(Broke::TooBig)));
        // The connection closed.
        assert!(matches!(answered_with(Vec::new()), Err(Broke::Closed)));
    }
}
