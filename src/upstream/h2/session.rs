//! An HTTP/2 connection to a peer as vireo's client runs it (RFC 9113):
//! streams side by side, each framed and flow-controlled in the task of the
//! request that uses it, the connection read by a task of its own.
//!
//! - A request's task opens its [`Stream`] on the [`Session`] and writes
//!   its frames itself: what is queued (other streams' frames, answers to
//!   the peer) goes in the same write, the preface and SETTINGS with the
//!   first request's HEADERS and DATA.
//! - The session's reader task ([`Inner::drive`]) reads the connection, one
//!   read taking the frames of many streams; it hands each stream its
//!   header blocks and DATA (a payload without a copy) and wakes its task,
//!   and answers control frames (SETTINGS, PING, WINDOW_UPDATE, GOAWAY). It
//!   also writes what a stream's write left queued when the socket was full,
//!   so a stream that goes away leaves no frame behind.
//! - The connection's receive window is given back as DATA arrives, a
//!   stream's as its reader takes it: a stream whose client reads slowly
//!   holds its own window, not its neighbours'.
//! - A stream dropped before it ended both ways is reset (CANCEL); the
//!   session goes on. A failure of the connection fails every stream.

use super::hpack::{self, Fields};
use crate::upstream::UpConn;
use bytes::{Bytes, BytesMut};
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Instant;
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

/// RST_STREAM's code for a stream the client no longer wants.
const CANCEL: u32 = 8;

/// The largest frame the peer may send (the default, which the client
/// keeps).
const MAX_FRAME: usize = 16_384;

/// Reads the reader task makes before it lets the worker's other tasks
/// run.
const READS_A_TURN: usize = 32;

/// The most answers to PING and SETTINGS waiting to be sent before the peer
/// is taken as one that does not read what it asks for.
const MAX_ANSWERS: usize = 1024;

/// The receive window the client gives each stream and the connection.
pub const WINDOW: u32 = 256 * 1024;

/// The most streams open side by side on a session (fewer when the peer's
/// SETTINGS_MAX_CONCURRENT_STREAMS says so).
pub const MAX_STREAMS: usize = 128;

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
    /// Given up from the request's side ([`Stream::cancel`]).
    Cancelled,
}

impl Broke {
    fn protocol(why: impl Into<String>) -> Broke {
        Broke::Protocol(why.into())
    }

    /// The same failure for another stream of the connection.
    fn copy(&self) -> Broke {
        match self {
            Broke::Io(e) => Broke::Io(io::Error::new(e.kind(), e.to_string())),
            Broke::Closed => Broke::Closed,
            &Broke::GoAway { code, refused } => Broke::GoAway { code, refused },
            &Broke::Reset(code) => Broke::Reset(code),
            Broke::TooBig => Broke::TooBig,
            Broke::Protocol(why) => Broke::Protocol(why.clone()),
            Broke::Cancelled => Broke::Cancelled,
        }
    }
}

/// An open stream's side of the session.
struct Slot {
    /// The send window, and the receive window left to the peer.
    window: i64,
    recv: i64,
    /// DATA taken by the stream's reader but not yet given back.
    unacked: u32,
    /// What the stream's frames gave, not yet taken, and how it failed.
    events: VecDeque<Event>,
    broke: Option<Broke>,
    /// The task waiting for an event, and the one waiting for send window.
    waker: Option<Waker>,
    room_waker: Option<Waker>,
    /// END_STREAM sent, received (a reset stream is both).
    sent_end: bool,
    got_end: bool,
    /// No other stream was open when it opened.
    alone: bool,
}

impl Slot {
    fn give(&mut self, e: Event) {
        self.events.push_back(e);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    fn fail(&mut self, b: Broke) {
        if self.broke.is_none() {
            self.broke = Some(b);
        }
        if let Some(w) = self.waker.take() {
            w.wake();
        }
        if let Some(w) = self.room_waker.take() {
            w.wake();
        }
    }
}

/// A header block being gathered (HEADERS, CONTINUATION).
struct Block {
    id: u32,
    bytes: Vec<u8>,
    /// Its HEADERS ended the stream.
    end: bool,
    /// It grew past the size taken: the stream fails, the rest is skipped.
    over: bool,
}

/// The connection's state, shared by its streams, its reader task and the
/// worker's keep.
pub struct Inner {
    conn: UpConn,
    rbuf: BytesMut,
    /// Frames to send, of which `sent` bytes are written.
    out: Vec<u8>,
    sent: usize,
    /// The connection's send window.
    conn_window: i64,
    /// The peer's SETTINGS: INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE,
    /// MAX_CONCURRENT_STREAMS.
    initial: i64,
    max_frame: usize,
    max_streams: usize,
    /// The connection's receive window, and DATA received but not yet
    /// given back to it with WINDOW_UPDATE.
    recv_window: i64,
    unacked: u32,
    streams: FxHashMap<u32, Slot>,
    next_id: u32,
    block: Option<Block>,
    max_block: usize,
    /// Answers to the peer's PING and SETTINGS queued since the last write
    /// of all that was queued.
    answers: usize,
    /// The peer's first SETTINGS came: its limits are known.
    settled: bool,
    /// What waits for them (the claim other requests wait on to join).
    held: Option<Box<dyn std::any::Any>>,
    /// GOAWAY came: no new stream goes on it.
    goaway: bool,
    /// The connection failed: every stream with it.
    dead: Option<Broke>,
    /// Streams opened on it so far (`keepalive_requests`).
    uses: u64,
    /// Since when no stream is open.
    idle_since: Instant,
    /// The reader task, and the streams waiting for the queued frames to be
    /// written.
    reader: Option<Waker>,
    flush_waiters: Vec<Waker>,
}

fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, id: u32) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&id.to_be_bytes());
}

/// A session: the connection its streams share.
#[derive(Clone)]
pub struct Session(Rc<RefCell<Inner>>);

impl Session {
    /// A session over `conn`, its preface and SETTINGS queued to go with
    /// the first stream: no dynamic table for the replies' fields, no push,
    /// a [`WINDOW`] for the streams and the connection. Header blocks over
    /// `max_block` bytes are refused. Its reader task starts on the worker.
    pub fn start(conn: UpConn, max_block: usize) -> Session {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(PREFACE);
        frame_head(&mut out, 18, SETTINGS, 0, 0);
        for (id, value) in [(1u16, 0u32), (2, 0), (4, WINDOW)] {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&value.to_be_bytes());
        }
        frame_head(&mut out, 4, WINDOW_UPDATE, 0, 0);
        out.extend_from_slice(&(WINDOW - 65_535).to_be_bytes());
        let inner = Rc::new(RefCell::new(Inner {
            conn,
            rbuf: BytesMut::new(),
            out,
            sent: 0,
            conn_window: 65_535,
            initial: 65_535,
            max_frame: MAX_FRAME,
            max_streams: MAX_STREAMS,
            recv_window: WINDOW as i64,
            unacked: 0,
            streams: FxHashMap::default(),
            next_id: 1,
            block: None,
            max_block,
            answers: 0,
            settled: false,
            held: None,
            goaway: false,
            dead: None,
            uses: 0,
            idle_since: crate::core::clock::now(),
            reader: None,
            flush_waiters: Vec::new(),
        }));
        tokio::task::spawn_local(read(Rc::downgrade(&inner)));
        Session(inner)
    }

    /// Open a stream with the header block `fields` (`end`: no body
    /// follows), queued.
    pub fn open(&self, fields: &[u8], end: bool) -> Result<Stream, Broke> {
        let mut s = self.0.borrow_mut();
        if let Some(b) = &s.dead {
            return Err(b.copy());
        }
        if s.goaway || s.next_id > i32::MAX as u32 {
            return Err(Broke::GoAway {
                code: 0,
                refused: true,
            });
        }
        let id = s.next_id;
        s.next_id += 2;
        s.uses += 1;
        let slot = Slot {
            window: s.initial,
            recv: WINDOW as i64,
            unacked: 0,
            events: VecDeque::new(),
            broke: None,
            waker: None,
            room_waker: None,
            sent_end: end,
            got_end: false,
            alone: s.streams.is_empty(),
        };
        s.streams.insert(id, slot);
        let max_frame = s.max_frame;
        let mut rest = fields;
        let mut kind = HEADERS;
        loop {
            let n = rest.len().min(max_frame);
            let last = n == rest.len();
            let mut flags = if last { END_HEADERS } else { 0 };
            if kind == HEADERS && end {
                flags |= END_STREAM;
            }
            frame_head(&mut s.out, n, kind, flags, id);
            s.out.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if last {
                break;
            }
            kind = CONTINUATION;
        }
        drop(s);
        Ok(Stream {
            s: self.0.clone(),
            id,
        })
    }

    /// Whether another stream may open on it now: the connection sound, the
    /// peer's SETTINGS in (until then only its first stream goes: one past
    /// a limit it has not said yet would be refused), no GOAWAY, fewer than
    /// `max_uses` streams opened and fewer open than the peer and
    /// [`MAX_STREAMS`] allow.
    pub fn can_open(&self, max_uses: u64) -> bool {
        let s = self.0.borrow();
        s.dead.is_none()
            && s.settled
            && !s.goaway
            && s.uses < max_uses
            && s.streams.len() < s.max_streams.min(MAX_STREAMS)
    }

    /// Keep `held` until the peer's SETTINGS come or the connection fails.
    pub fn hold_until_settled(&self, held: Option<Box<dyn std::any::Any>>) {
        let mut s = self.0.borrow_mut();
        if !s.settled && s.dead.is_none() {
            s.held = held;
        }
    }

    /// Whether it is of no further use: failed, or with no stream open and
    /// none to come (GOAWAY, `max_uses` streams opened).
    pub fn over(&self, max_uses: u64) -> bool {
        let s = self.0.borrow();
        s.dead.is_some() || (s.streams.is_empty() && (s.goaway || s.uses >= max_uses))
    }

    /// Since when no stream is open (None: one is).
    pub fn idle_since(&self) -> Option<Instant> {
        let s = self.0.borrow();
        s.streams.is_empty().then_some(s.idle_since)
    }

    /// Let the read buffer's room go when nothing waits in it: a session
    /// idle for a while holds no more than its connection.
    pub fn rest(&self) {
        let mut s = self.0.borrow_mut();
        if s.rbuf.is_empty() {
            s.rbuf = BytesMut::new();
        }
    }
}

/// The session's reader task: it ends when the connection fails or the
/// session is dropped (which wakes it).
async fn read(inner: Weak<RefCell<Inner>>) {
    std::future::poll_fn(|cx| {
        let Some(rc) = inner.upgrade() else {
            return Poll::Ready(());
        };
        let mut s = rc.borrow_mut();
        if !s.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.reader = Some(cx.waker().clone());
        }
        s.drive(cx)
    })
    .await
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }
}

/// A stream of a session, as the request that opened it uses it.
pub struct Stream {
    s: Rc<RefCell<Inner>>,
    id: u32,
}

impl Stream {
    /// Whether no other stream was open on the session when it opened.
    pub fn opened_alone(&self) -> bool {
        let s = self.s.borrow();
        s.streams.get(&self.id).is_some_and(|slot| slot.alone)
    }

    /// The body bytes the windows take now.
    pub fn room(&self) -> usize {
        self.s.borrow().room(self.id)
    }

    /// Whether the stream takes no more DATA: its END_STREAM is sent, it
    /// was reset, or the session failed.
    pub fn sending_over(&self) -> bool {
        let s = self.s.borrow();
        s.dead.is_some() || s.streams.get(&self.id).is_none_or(|slot| slot.sent_end)
    }

    /// Ready once the windows take a byte, or the sending is over.
    pub fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.sending_over() {
            return Poll::Ready(());
        }
        let mut s = self.s.borrow_mut();
        if s.room(self.id) > 0 {
            return Poll::Ready(());
        }
        if let Some(slot) = s.streams.get_mut(&self.id) {
            slot.room_waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Queue `data` (within [`Stream::room`]) as DATA frames, the last with
    /// END_STREAM when `end`.
    pub fn data(&self, mut data: &[u8], end: bool) {
        let mut s = self.s.borrow_mut();
        debug_assert!(data.len() <= s.room(self.id));
        let Some(slot) = s.streams.get_mut(&self.id).filter(|slot| !slot.sent_end) else {
            return;
        };
        slot.window -= data.len() as i64;
        slot.sent_end |= end;
        s.conn_window -= data.len() as i64;
        loop {
            let n = data.len().min(s.max_frame);
            let last = n == data.len();
            let flags = if last && end { END_STREAM } else { 0 };
            frame_head(&mut s.out, n, DATA, flags, self.id);
            s.out.extend_from_slice(&data[..n]);
            data = &data[n..];
            if last {
                return;
            }
        }
    }

    /// Write what is queued (this stream's frames and any other's). When
    /// the socket is full, or other streams are open, the reader task
    /// writes it and wakes the stream once all is out.
    pub fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut s = self.s.borrow_mut();
        if let Some(b) = &s.dead {
            let e = match b.copy() {
                Broke::Io(e) => e,
                _ => io::ErrorKind::ConnectionReset.into(),
            };
            return Poll::Ready(Err(e));
        }
        if s.out.is_empty() {
            return Poll::Ready(Ok(()));
        }
        // With other streams open, the reader task writes: it runs after
        // the tasks ready now, so their frames go in one write.
        let deferred = s.streams.len() > 1;
        match if deferred {
            Poll::Pending
        } else {
            s.poll_write_out(cx)
        } {
            Poll::Ready(Err(e)) => {
                s.fail_all(Broke::Io(io::Error::new(e.kind(), e.to_string())));
                Poll::Ready(Err(e))
            }
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
            Poll::Pending => {
                if !s.flush_waiters.iter().any(|w| w.will_wake(cx.waker())) {
                    s.flush_waiters.push(cx.waker().clone());
                }
                s.wake_reader();
                Poll::Pending
            }
        }
    }

    /// `n` bytes of the stream's DATA were taken: given back to the peer
    /// once half a window is.
    pub fn consumed(&self, n: usize) {
        let mut s = self.s.borrow_mut();
        let Some(slot) = s.streams.get_mut(&self.id) else {
            return;
        };
        slot.unacked += n as u32;
        if slot.unacked < WINDOW / 2 || slot.got_end {
            return;
        }
        let inc = std::mem::take(&mut slot.unacked);
        slot.recv += inc as i64;
        frame_head(&mut s.out, 4, WINDOW_UPDATE, 0, self.id);
        s.out.extend_from_slice(&inc.to_be_bytes());
        s.wake_reader();
    }

    /// Give the stream up from the request's side (the client's body
    /// failed while it went on beside the reply): RST_STREAM(CANCEL) to the
    /// peer, and the reply's reading ends with [`Broke::Cancelled`].
    pub fn cancel(&self) {
        let mut s = self.s.borrow_mut();
        let Some(slot) = s.streams.get_mut(&self.id) else {
            return;
        };
        let reset = !(slot.sent_end && slot.got_end);
        slot.sent_end = true;
        slot.got_end = true;
        slot.fail(Broke::Cancelled);
        if reset {
            s.cancel(self.id);
        }
    }

    /// The stream's next event, or how it failed.
    pub fn poll_event(&self, cx: &mut Context<'_>) -> Poll<Result<Event, Broke>> {
        let mut s = self.s.borrow_mut();
        let s = &mut *s;
        let Some(slot) = s.streams.get_mut(&self.id) else {
            return Poll::Ready(Err(Broke::Closed));
        };
        if let Some(e) = slot.events.pop_front() {
            return Poll::Ready(Ok(e));
        }
        if let Some(b) = slot.broke.take() {
            return Poll::Ready(Err(b));
        }
        if let Some(b) = &s.dead {
            return Poll::Ready(Err(b.copy()));
        }
        slot.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Stream {
    /// A stream that has not ended both ways is reset (CANCEL).
    fn drop(&mut self) {
        let mut s = self.s.borrow_mut();
        let Some(slot) = s.streams.remove(&self.id) else {
            return;
        };
        if s.streams.is_empty() {
            s.idle_since = crate::core::clock::now();
        }
        if !(slot.sent_end && slot.got_end) {
            s.cancel(self.id);
        }
    }
}

impl Inner {
    /// RST_STREAM(CANCEL) for stream `id`, on a live session.
    fn cancel(&mut self, id: u32) {
        if self.dead.is_none() {
            frame_head(&mut self.out, 4, RST_STREAM, 0, id);
            self.out.extend_from_slice(&CANCEL.to_be_bytes());
            self.wake_reader();
        }
    }

    fn room(&self, id: u32) -> usize {
        let stream = self.streams.get(&id).map_or(0, |slot| slot.window);
        self.conn_window.min(stream).max(0) as usize
    }

    fn wake_reader(&self) {
        if let Some(w) = &self.reader {
            w.wake_by_ref();
        }
    }

    /// The connection failed: so did every stream.
    fn fail_all(&mut self, b: Broke) {
        for slot in self.streams.values_mut() {
            slot.fail(b.copy());
        }
        for w in self.flush_waiters.drain(..) {
            w.wake();
        }
        self.held = None;
        self.dead = Some(b);
    }

    /// Write what is queued; ready once all of it is out.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
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
        std::task::ready!(Pin::new(&mut self.conn).poll_flush(cx))?;
        for w in self.flush_waiters.drain(..) {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }

    /// The reader task's turn: what is queued written, what the connection
    /// has read and handed to its streams. Ready when the connection failed.
    fn drive(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        for _ in 0..READS_A_TURN {
            if self.dead.is_some() {
                return Poll::Ready(());
            }
            if let Err(b) = self.parse() {
                self.fail_all(b);
                continue;
            }
            // Answers the peer does not read (PING, SETTINGS) pile up no
            // further.
            if self.answers > MAX_ANSWERS {
                self.fail_all(Broke::protocol("control frames it does not read"));
                continue;
            }
            if (!self.out.is_empty() || !self.flush_waiters.is_empty())
                && let Poll::Ready(Err(e)) = self.poll_write_out(cx)
            {
                self.fail_all(Broke::Io(e));
                continue;
            }
            if self.rbuf.capacity() - self.rbuf.len() < 4096 {
                self.rbuf.reserve(MAX_FRAME + 9);
            }
            match self.conn.try_read_buf(&mut self.rbuf) {
                Ok(0) => self.fail_all(Broke::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match self.conn.poll_readable(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => self.fail_all(Broke::Io(e)),
                    }
                }
                Err(e) => self.fail_all(Broke::Io(e)),
            }
        }
        // A peer that keeps the connection busy does not hold the worker:
        // the task goes on at its next turn.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Take the complete frames in the read buffer.
    fn parse(&mut self) -> Result<(), Broke> {
        loop {
            if self.rbuf.len() < 9 {
                return Ok(());
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
                return Ok(());
            }
            let _ = self.rbuf.split_to(9);
            let mut payload = self.rbuf.split_to(len);
            if self.block.is_some() && kind != CONTINUATION {
                return Err(Broke::protocol("header block interrupted"));
            }
            self.frame(kind, flags, id, &mut payload)?;
        }
    }

    fn frame(&mut self, kind: u8, flags: u8, id: u32, payload: &mut BytesMut) -> Result<(), Broke> {
        let len = payload.len();
        match kind {
            DATA => {
                if id == 0 {
                    return Err(Broke::protocol("DATA on stream 0"));
                }
                self.recv_window -= len as i64;
                if self.recv_window < 0 {
                    return Err(Broke::protocol("DATA past the flow-control window"));
                }
                self.unacked += len as u32;
                if self.unacked >= WINDOW / 2 {
                    let inc = std::mem::take(&mut self.unacked);
                    self.recv_window += inc as i64;
                    frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, 0);
                    self.out.extend_from_slice(&inc.to_be_bytes());
                }
                strip_padding(flags, payload)?;
                let end = flags & END_STREAM != 0;
                // DATA of a stream no longer read is dropped.
                if let Some(slot) = self.streams.get_mut(&id)
                    && !slot.got_end
                    && slot.broke.is_none()
                {
                    slot.recv -= len as i64;
                    if slot.recv < 0 {
                        return Err(Broke::protocol("DATA past the stream's window"));
                    }
                    // Padding is taken at once.
                    slot.unacked += (len - payload.len()) as u32;
                    slot.got_end = end;
                    slot.give(Event::Data(std::mem::take(payload).freeze(), end));
                }
            }
            HEADERS => {
                if id == 0 || id.is_multiple_of(2) || id >= self.next_id {
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
                    let over = payload.len() > self.max_block;
                    return self.head(id, payload, end, over);
                }
                self.block = Some(Block {
                    id,
                    bytes: Vec::with_capacity(2 * payload.len()),
                    end,
                    over: false,
                });
                return self.block_piece(flags, payload);
            }
            CONTINUATION => {
                if self.block.as_ref().is_none_or(|b| b.id != id) {
                    return Err(Broke::protocol("CONTINUATION out of a header block"));
                }
                return self.block_piece(flags, payload);
            }
            RST_STREAM => {
                if len != 4 {
                    return Err(Broke::protocol("RST_STREAM of a wrong size"));
                }
                if let Some(slot) = self.streams.get_mut(&id) {
                    slot.sent_end = true;
                    slot.got_end = true;
                    slot.fail(Broke::Reset(be32(payload)));
                }
            }
            SETTINGS => {
                if id != 0 || !len.is_multiple_of(6) {
                    return Err(Broke::protocol("malformed SETTINGS"));
                }
                if flags & ACK == 0 {
                    self.settings(payload)?;
                    self.settled = true;
                    self.held = None;
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
                for (&sid, slot) in self.streams.iter_mut() {
                    let refused = sid > last;
                    if refused || code != 0 {
                        slot.fail(Broke::GoAway { code, refused });
                    }
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
                let window = match id {
                    0 => &mut self.conn_window,
                    _ => match self.streams.get_mut(&id) {
                        Some(slot) => &mut slot.window,
                        None => return Ok(()),
                    },
                };
                *window += inc;
                if *window > i32::MAX as i64 {
                    return Err(Broke::protocol("flow-control window past 2^31-1"));
                }
                self.room_grew(id);
            }
            // PRIORITY, and frame types HTTP/2 lets a peer ignore.
            _ => {}
        }
        Ok(())
    }

    /// Wake the streams waiting for send window that now have some (`id`
    /// 0: any of them).
    fn room_grew(&mut self, id: u32) {
        if self.conn_window <= 0 {
            return;
        }
        for (&sid, slot) in self.streams.iter_mut() {
            if (id == 0 || sid == id)
                && slot.window > 0
                && let Some(w) = slot.room_waker.take()
            {
                w.wake();
            }
        }
    }

    fn settings(&mut self, p: &[u8]) -> Result<(), Broke> {
        for s in p.chunks_exact(6) {
            let value = be32(&s[2..]);
            match u16::from_be_bytes([s[0], s[1]]) {
                3 => self.max_streams = value as usize,
                4 => {
                    if value > i32::MAX as u32 {
                        return Err(Broke::protocol("SETTINGS_INITIAL_WINDOW_SIZE too large"));
                    }
                    let delta = value as i64 - self.initial;
                    self.initial = value as i64;
                    for slot in self.streams.values_mut() {
                        slot.window += delta;
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
        self.room_grew(0);
        Ok(())
    }

    /// A HEADERS or CONTINUATION payload of the block being gathered: the
    /// block taken once END_HEADERS ends it.
    fn block_piece(&mut self, flags: u8, payload: &[u8]) -> Result<(), Broke> {
        let b = self.block.as_mut().expect("a block is being gathered");
        if !b.over && b.bytes.len() + payload.len() > self.max_block {
            // The stream fails at once; the rest of its block is skipped.
            b.over = true;
            b.bytes = Vec::new();
            if let Some(slot) = self.streams.get_mut(&b.id) {
                slot.fail(Broke::TooBig);
            }
        }
        if !b.over {
            b.bytes.extend_from_slice(payload);
        }
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        let b = self.block.take().expect("a block is being gathered");
        self.head(b.id, &b.bytes, b.end, b.over)
    }

    /// A complete header block of stream `id` (`over`: past the size
    /// taken). Without a dynamic table a block of a stream no longer read
    /// needs no decoding.
    fn head(&mut self, id: u32, block: &[u8], end: bool, over: bool) -> Result<(), Broke> {
        let Some(slot) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if over {
            slot.fail(Broke::TooBig);
        }
        if slot.got_end || slot.broke.is_some() {
            return Ok(());
        }
        let mut fields = Fields::with_capacity(block.len());
        hpack::decode(block, &mut fields)
            .map_err(|e| Broke::protocol(format!("header block: {e}")))?;
        slot.got_end = end;
        slot.give(Event::Head(fields, end));
        Ok(())
    }
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

    async fn flush(s: &Stream) {
        std::future::poll_fn(|cx| s.poll_flush(cx)).await.unwrap();
    }

    async fn event(s: &Stream) -> Result<Event, Broke> {
        std::future::poll_fn(|cx| s.poll_event(cx)).await
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
        scripted(peer, async |session: &Session| {
            let s = open(session, true).await;
            // The reader task takes the peer's SETTINGS: a window of 4.
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while s.room() != 4 && std::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut body: &[u8] = b"abcdef";
            while !body.is_empty() {
                let n = s.room().min(body.len());
                if n == 0 {
                    // The task is woken when the window grows.
                    std::future::poll_fn(|cx| s.poll_room(cx)).await;
                    continue;
                }
                s.data(&body[..n], n == body.len());
                body = &body[n..];
                flush(&s).await;
            }
            let mut events = Vec::new();
            while !matches!(events.last(), Some(Event::Head(_, true))) {
                events.push(event(&s).await.unwrap());
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
            drop(s);
            session.rest();
            assert!(session.can_open(10));
            assert!(session.idle_since().is_some());
        });
    }

    /// Two streams side by side on one connection: each gets its own
    /// frames whatever their order, one reset leaves the other, and the one
    /// dropped before its end is reset by the client.
    #[test]
    fn streams_side_by_side() {
        let peer = |s: &mut std::net::TcpStream| {
            let mut ids = Vec::new();
            while ids.len() < 3 {
                let (kind, _, id, _) = read_frame(s);
                if kind == HEADERS {
                    ids.push(id);
                }
            }
            assert_eq!(ids, [1, 3, 5]);
            s.write_all(&frame(SETTINGS, 0, 0, &[])).unwrap();
            // Stream 3 answered first, 1's head, 5 reset, 1's body, 3's.
            s.write_all(&frame(HEADERS, END_HEADERS, 3, &[0x88]))
                .unwrap();
            s.write_all(&frame(HEADERS, END_HEADERS, 1, &[0x8d]))
                .unwrap();
            s.write_all(&frame(RST_STREAM, 0, 5, &7u32.to_be_bytes()))
                .unwrap();
            s.write_all(&frame(DATA, END_STREAM, 1, b"one")).unwrap();
            s.write_all(&frame(DATA, 0, 3, b"three")).unwrap();
            // The client drops stream 3 before its end: it resets it.
            loop {
                let (kind, _, id, p) = read_frame(s);
                if kind == RST_STREAM {
                    assert_eq!((id, be32(&p)), (3, CANCEL));
                    break;
                }
            }
        };
        scripted(peer, async |session: &Session| {
            let one = open(session, false).await;
            let three = open(session, false).await;
            let five = open(session, false).await;
            assert!(matches!(event(&three).await, Ok(Event::Head(_, false))));
            assert!(matches!(event(&five).await, Err(Broke::Reset(7))));
            assert!(matches!(event(&one).await, Ok(Event::Head(_, false))));
            let Ok(Event::Data(d, true)) = event(&one).await else {
                panic!("stream 1's DATA");
            };
            assert_eq!(&d[..], b"one");
            let Ok(Event::Data(d, false)) = event(&three).await else {
                panic!("stream 3's DATA");
            };
            assert_eq!(&d[..], b"three");
            drop((one, five));
            assert!(session.idle_since().is_none());
            drop(three);
            assert!(session.idle_since().is_some());
            assert!(session.can_open(4) && !session.can_open(3));
            // The reset goes out with the reader task's next turn.
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
    }

    /// A stream (a GET, or a POST whose body is to come) open and flushed.
    async fn open(session: &Session, body: bool) -> Stream {
        let mut block = Vec::new();
        hpack::encode_method(&mut block, if body { b"POST" } else { b"GET" });
        hpack::encode(&mut block, b":path", b"/x");
        let s = session.open(&block, !body).unwrap();
        flush(&s).await;
        s
    }

    /// A peer that answers a GET's HEADERS with `reply` (frames): what the
    /// stream's read gives.
    fn answered_with(reply: Vec<u8>) -> Result<Event, Broke> {
        let peer = move |s: &mut std::net::TcpStream| {
            expect(s, &[(HEADERS, END_HEADERS | END_STREAM)]);
            s.write_all(&reply).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
        };
        scripted(peer, async |session: &Session| {
            let s = open(session, false).await;
            event(&s).await
        })
    }

    /// `client` on a session to a peer that runs `script` once it has read
    /// the preface, then reads until the client closes.
    fn scripted<T>(
        script: impl FnOnce(&mut std::net::TcpStream) + Send + 'static,
        client: impl AsyncFnOnce(&Session) -> T,
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
        let got = tokio::task::LocalSet::new().block_on(&rt, async {
            let conn =
                crate::upstream::pool::connect_from(&addr, None, None, Duration::from_secs(5))
                    .await
                    .unwrap();
            let session = Session::start(conn, 65_536);
            client(&session).await
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
