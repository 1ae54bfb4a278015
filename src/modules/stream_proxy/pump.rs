//! Bytes both ways between a stream session's client and its upstream, as
//! nginx's `ngx_stream_proxy_process`: a buffer per direction, reads paced
//! by the direction's rate, the session idle-timed by `proxy_timeout`, and
//! ended once either side closed and what it sent went through (both sides
//! with `half_close`, each close passed on as a shutdown of the other's
//! sending half).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
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
    /// Bytes read from the source and written to the destination.
    pub read: u64,
    pub written: u64,
    rate: u64,
    delay: Option<Pin<Box<Sleep>>>,
}

impl Dir {
    fn new(size: usize, rate: u64, first: Vec<u8>) -> Dir {
        let mut buf = vec![0u8; size.max(first.len())].into_boxed_slice();
        buf[..first.len()].copy_from_slice(&first);
        Dir {
            buf,
            start: 0,
            end: first.len(),
            eof: false,
            shut: false,
            read: first.len() as u64,
            written: 0,
            rate,
            delay: None,
        }
    }

    /// Everything the source sent went through.
    fn drained(&self) -> bool {
        self.eof && self.start == self.end
    }

    /// Move what can move now; `Err` when a side failed to take bytes.
    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        src: &mut R,
        dst: &mut W,
        half_close: bool,
        t0: Instant,
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
            let mut room = self.buf.len() - self.end;
            if self.rate > 0 {
                // nginx's pacing: rate × (whole seconds so far + 1) in all.
                let allowed = (self.rate * (t0.elapsed().as_secs() + 1)) as i64 - self.read as i64;
                if allowed <= 0 {
                    let ms = (-allowed) as u64 * 1000 / self.rate + 1;
                    self.delay = Some(Box::pin(tokio::time::sleep(Duration::from_millis(ms))));
                    continue;
                }
                room = room.min(allowed as usize);
            }
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
                    if self.rate > 0 {
                        let ms = n as u64 * 1000 / self.rate;
                        if ms > 0 {
                            let d = tokio::time::sleep(Duration::from_millis(ms));
                            self.delay = Some(Box::pin(d));
                        }
                    }
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
    let mut up = Dir::new(o.buffer, o.upload_rate, first);
    let mut down = Dir::new(o.buffer, o.download_rate, Vec::new());
    let mut first_byte = None;
    let mut idle = Box::pin(tokio::time::sleep(o.timeout));
    let mut timed_out = None;
    std::future::poll_fn(|cx| {
        let mut moved = false;
        let r = up
            .poll(cx, client, upstream, o.half_close, t0, &mut moved)
            .and_then(|()| down.poll(cx, upstream, client, o.half_close, t0, &mut moved));
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
            idle.as_mut()
                .reset(tokio::time::Instant::now() + o.timeout);
        }
        if idle.as_mut().poll(cx).is_ready() {
            timed_out = Some("client or upstream");
            return Poll::Ready(());
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
