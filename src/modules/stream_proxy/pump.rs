//! Bytes both ways between a stream session's client and its upstream, as
//! nginx's `ngx_stream_proxy_process`: a buffer per direction, reads paced
//! by the direction's rate, the session idle-timed by `proxy_timeout`, and
//! ended once either side closed and what it sent went through (both sides
//! with `half_close`, each close passed on as a shutdown of the other's
//! sending half).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// How a session's bytes pass.
pub struct Opts {
    pub buffer: usize,
    pub timeout: Duration,
    pub half_close: bool,
    /// Bytes a second read from the client (0: no limit).
    pub upload_rate: u64,
    /// Bytes a second read from the upstream (0: no limit).
    pub download_rate: u64,
    /// Both ends are plain sockets, whose reads and writes register only their
    /// own readiness: a wake then moves only the direction it concerns (a TLS
    /// end may write while reading, so with one both directions are polled).
    pub plain: bool,
}

/// nginx's pacing of one direction's reads at `rate` bytes a second: in
/// all at most rate × (whole seconds since the start + 1), and after each
/// read a pause as long as its bytes take at the rate.
pub struct Pace {
    rate: u64,
    t0: Instant,
    /// Bytes read so far.
    taken: u64,
    /// No read before this.
    until: Option<Instant>,
}

impl Pace {
    pub fn new(rate: u64, t0: Instant) -> Pace {
        Pace {
            rate,
            t0,
            taken: 0,
            until: None,
        }
    }

    /// When the next read may be made (`None`: now), and how much it may
    /// take then (`usize::MAX`: no limit).
    pub fn next(&mut self) -> (Option<Instant>, usize) {
        if self.rate == 0 {
            return (None, usize::MAX);
        }
        let now = Instant::now();
        if let Some(u) = self.until.filter(|u| *u > now) {
            return (Some(u), 0);
        }
        let allowed = (self.rate * (self.t0.elapsed().as_secs() + 1)) as i64 - self.taken as i64;
        if allowed <= 0 {
            let ms = (-allowed) as u64 * 1000 / self.rate + 1;
            let u = now + Duration::from_millis(ms);
            self.until = Some(u);
            return (Some(u), 0);
        }
        (None, allowed as usize)
    }

    /// `n` bytes were read.
    pub fn took(&mut self, n: usize) {
        self.taken += n as u64;
        if let Some(ms) = (n as u64 * 1000).checked_div(self.rate) {
            self.until = (ms > 0).then(|| Instant::now() + Duration::from_millis(ms));
        }
    }
}

/// One direction: what its source sent, waiting for its destination.
pub struct Dir {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The source closed (or failed).
    eof: bool,
    /// The destination's sending half was shut down after it.
    shut: bool,
    /// Written to the destination since its last flush (a TLS one holds
    /// records until flushed).
    unflushed: bool,
    /// Bytes read from the source and written to the destination.
    pub read: u64,
    pub written: u64,
    pace: Pace,
    delay: Option<Pin<Box<Sleep>>>,
}

impl Dir {
    fn new(size: usize, pace: Pace, first: Vec<u8>) -> Dir {
        let mut buf = vec![0u8; size.max(first.len())].into_boxed_slice();
        buf[..first.len()].copy_from_slice(&first);
        Dir {
            buf,
            start: 0,
            end: first.len(),
            eof: false,
            shut: false,
            unflushed: false,
            read: first.len() as u64,
            written: 0,
            pace,
            delay: None,
        }
    }

    /// Everything the source sent went through.
    fn drained(&self) -> bool {
        self.eof && self.start == self.end && !self.unflushed
    }

    /// Move what can move now; `Err` when a side failed to take bytes.
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        src: &mut R,
        dst: &mut W,
        half_close: bool,
        moved: &mut bool,
    ) -> io::Result<()>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            if self.start < self.end {
                match Pin::new(&mut *dst).poll_write(cx, &self.buf[self.start..self.end]) {
                    Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                    Poll::Ready(Ok(n)) => {
                        self.start += n;
                        self.written += n as u64;
                        self.unflushed = true;
                        *moved = true;
                        if self.start == self.end {
                            self.start = 0;
                            self.end = 0;
                        }
                        continue;
                    }
                    Poll::Ready(Err(e)) => return Err(e),
                    Poll::Pending => {}
                }
            }
            if self.unflushed && self.start == self.end {
                match Pin::new(&mut *dst).poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.unflushed = false,
                    Poll::Ready(Err(e)) => return Err(e),
                    Poll::Pending => return Ok(()),
                }
            }
            if self.eof {
                if self.start == self.end && half_close && !self.shut {
                    match Pin::new(&mut *dst).poll_shutdown(cx) {
                        Poll::Ready(_) => self.shut = true,
                        Poll::Pending => return Ok(()),
                    }
                }
                return Ok(());
            }
            if self.end == self.buf.len() {
                return Ok(());
            }
            if let Some(d) = &mut self.delay {
                if d.as_mut().poll(cx).is_pending() {
                    return Ok(());
                }
                self.delay = None;
            }
            let room = match self.pace.next() {
                (Some(at), _) => {
                    self.delay = Some(Box::pin(tokio::time::sleep_until(at.into())));
                    continue;
                }
                (None, allowed) => allowed.min(self.buf.len() - self.end),
            };
            let mut rb = ReadBuf::new(&mut self.buf[self.end..self.end + room]);
            match Pin::new(&mut *src).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    *moved = true;
                    if n == 0 {
                        self.eof = true;
                        continue;
                    }
                    self.end += n;
                    self.read += n as u64;
                    self.pace.took(n);
                }
                // A failed read ends the source, as nginx's.
                Poll::Ready(Err(_)) => {
                    self.eof = true;
                    self.start = self.end;
                    *moved = true;
                }
                Poll::Pending => return Ok(()),
            }
        }
    }
}

/// The waker one direction's sockets are given when both ends are plain: it
/// marks the direction and wakes the session's task, which then polls only
/// the directions marked (of the four polls a 1 KB exchange made, two were of
/// the direction that had nothing to do).
struct Mark {
    hit: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Mark {
    fn new() -> (Arc<Mark>, Waker) {
        let m = Arc::new(Mark {
            hit: AtomicBool::new(true),
            task: Mutex::new(None),
        });
        (m.clone(), Waker::from(m))
    }

    /// Wake `task` from now on.
    fn to(&self, task: &Waker) {
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task.clone());
    }

    /// Was the direction woken since the last call?
    fn take(&self) -> bool {
        self.hit.swap(false, Ordering::AcqRel)
    }
}

impl Wake for Mark {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.hit.store(true, Ordering::Release);
        if let Some(w) = &*self.task.lock().unwrap_or_else(|e| e.into_inner()) {
            w.wake_by_ref();
        }
    }
}

/// How a session's passing ended.
pub struct Done {
    /// Client to upstream.
    pub up: Dir,
    /// Upstream to client.
    pub down: Dir,
    /// When the upstream's first byte came.
    pub first_byte: Option<Instant>,
    /// `Some("client")`/`Some("upstream")`… when `proxy_timeout` passed.
    pub timed_out: Option<&'static str>,
}

/// Pass bytes between `client` and `upstream` (`first`: bytes of the
/// client read before, sent first) until the session ends.
pub async fn run<C, U>(client: &mut C, upstream: &mut U, first: Vec<u8>, o: &Opts) -> Done
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let t0 = Instant::now();
    let mut up = Dir::new(o.buffer, Pace::new(o.upload_rate, t0), first);
    let mut down = Dir::new(o.buffer, Pace::new(o.download_rate, t0), Vec::new());
    let mut first_byte = None;
    // The idle timer is re-armed when it fires, from the last move, rather
    // than on every move.
    let mut idle = Box::pin(tokio::time::sleep(o.timeout));
    let mut last_move = tokio::time::Instant::now();
    let mut armed = false;
    let mut timed_out = None;
    let (up_mark, up_waker) = Mark::new();
    let (down_mark, down_waker) = Mark::new();
    let mut task: Option<Waker> = None;
    std::future::poll_fn(|cx| {
        let mut moved = false;
        let r = if o.plain {
            if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                up_mark.to(cx.waker());
                down_mark.to(cx.waker());
                task = Some(cx.waker().clone());
            }
            let (go_up, go_down) = (up_mark.take(), down_mark.take());
            let (mut up_cx, mut down_cx) = (
                Context::from_waker(&up_waker),
                Context::from_waker(&down_waker),
            );
            let up_r = match go_up {
                true => up.poll(&mut up_cx, client, upstream, o.half_close, &mut moved),
                false => Ok(()),
            };
            up_r.and_then(|()| match go_down {
                true => down.poll(&mut down_cx, upstream, client, o.half_close, &mut moved),
                false => Ok(()),
            })
        } else {
            up.poll(cx, client, upstream, o.half_close, &mut moved)
                .and_then(|()| down.poll(cx, upstream, client, o.half_close, &mut moved))
        };
        if first_byte.is_none() && down.read > 0 {
            first_byte = Some(Instant::now());
        }
        let over = match o.half_close {
            true => up.drained() && down.drained(),
            false => up.drained() || down.drained(),
        };
        if r.is_err() || over {
            return Poll::Ready(());
        }
        if moved {
            last_move = tokio::time::Instant::now();
            // Bytes moved: not idle, and the timer, once polled, wakes the task
            // when it fires, so it is polled again only on a wake that moved nothing.
            if armed {
                return Poll::Pending;
            }
        }
        armed = true;
        while idle.as_mut().poll(cx).is_ready() {
            let due = last_move + o.timeout;
            if due <= tokio::time::Instant::now() {
                timed_out = Some("client or upstream");
                return Poll::Ready(());
            }
            idle.as_mut().reset(due);
        }
        Poll::Pending
    })
    .await;
    Done {
        up,
        down,
        first_byte,
        timed_out,
    }
}
