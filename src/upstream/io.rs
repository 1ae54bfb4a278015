//! Reading and writing an upstream connection within a timeout, for every
//! protocol handler.

use super::UpConn;
use crate::server::idle::IdleTimer;
use bytes::BytesMut;
use std::future::Future;
use std::io::{self, ErrorKind, IoSlice};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

pub fn timed_out() -> io::Error {
    io::Error::new(ErrorKind::TimedOut, "upstream timed out")
}

/// Write `data` whole, each wait for room at most `t`.
pub async fn write_all(c: &UpConn, data: &[u8], t: Duration) -> io::Result<()> {
    write_vectored(c, &[IoSlice::new(data)], t).await
}

/// Write `bufs` whole, each wait for room at most `t`.
pub async fn write_vectored(c: &UpConn, bufs: &[IoSlice<'_>], t: Duration) -> io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0;
    let mut rest: Vec<IoSlice<'_>> = Vec::new();
    while done < total {
        let r = if done == 0 {
            c.try_write_vectored(bufs)
        } else {
            // Skip what went out already.
            let mut skip = done;
            rest.clear();
            for b in bufs {
                if skip >= b.len() {
                    skip -= b.len();
                    continue;
                }
                rest.push(IoSlice::new(&b[skip..]));
                skip = 0;
            }
            c.try_write_vectored(&rest)
        };
        match r {
            Ok(0) => return Err(io::Error::from(ErrorKind::WriteZero)),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                // Boxed: a request's future does not carry the timer.
                Box::pin(tokio::time::timeout(t, c.writable()))
                    .await
                    .map_err(|_| timed_out())??;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Wait at most `t` for the upstream to be readable. The deadline is the
/// worker's coarse one (`server::idle`, up to 250 ms late), registered only
/// if the socket is not readable at once: no tokio timer per reply.
pub async fn wait_readable(c: &UpConn, t: Duration) -> io::Result<()> {
    let mut deadline = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = c.poll_readable(cx) {
            return Poll::Ready(r);
        }
        let timer =
            deadline.get_or_insert_with(|| IdleTimer::deadline(crate::core::clock::now() + t));
        Pin::new(timer).poll(cx).map(|_| Err(timed_out()))
    })
    .await
}

/// Read what the upstream has (waiting at most `t`); 0 at its end.
pub async fn read_some(c: &UpConn, buf: &mut BytesMut, t: Duration) -> io::Result<usize> {
    loop {
        match c.try_read_buf(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_readable(c, t).await?,
            Err(e) => return Err(e),
        }
    }
}
