//! The body of a sliced response: the first slice's own body, then each
//! next slice's, fetched by a clone subrequest once the previous one has
//! been read, cut to the client's range. One piece is held at a time.

use super::{Part, check, range_of};
use crate::core::message::response::{Body, BodyStream};
use crate::core::request::BoxFuture;
use crate::core::subrequest::Origin;
use bytes::Bytes;
use std::io;
use std::ops::Range;
use std::rc::Rc;

/// The slices of a representation, as the client's range of it.
#[derive(Debug)]
pub struct Slices {
    origin: Rc<Origin>,
    /// The body of the slice being read; `None` once the last one ended.
    inner: Option<Box<dyn BodyStream>>,
    /// The offset of the slice body's next byte, and the slice's end.
    at: u64,
    end: u64,
    size: u64,
    /// The next byte the client gets, and the end of what it gets.
    need: u64,
    until: u64,
    /// The slices' `ETag` (the first that had one).
    etag: Option<String>,
    /// The main request, for the error log.
    context: String,
}

impl Slices {
    /// `own`, the body of the slice at `bytes`, then the slices of `size`
    /// bytes that `want` needs.
    pub fn new(
        origin: Rc<Origin>,
        own: Option<Box<dyn BodyStream>>,
        bytes: Range<u64>,
        size: u64,
        want: Range<u64>,
        etag: Option<String>,
        context: String,
    ) -> Slices {
        Slices {
            origin,
            inner: own,
            at: bytes.start,
            end: bytes.end,
            size,
            need: want.start,
            until: want.end,
            etag,
            context,
        }
    }

    /// Log `msg` and end the response with it: the connection closes.
    fn fail(&self, msg: impl Into<String>) -> io::Error {
        let msg = msg.into();
        crate::error_log!(Error, "{msg}{}", self.context);
        io::Error::other(msg)
    }

    async fn step(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            let Some(inner) = self.inner.as_mut() else {
                return Ok(None);
            };
            let Some(piece) = inner.next().await? else {
                if self.at != self.end {
                    return Err(self.fail("slice response shorter than its range"));
                }
                self.inner = None;
                continue;
            };
            let from = self.at;
            self.at += piece.len() as u64;
            if self.at > self.end {
                return Err(self.fail("slice response longer than its range"));
            }
            let out = cut(piece, from, self.need..self.until);
            self.need += out.len() as u64;
            if self.at == self.end && self.need < self.until {
                // A slice's last piece goes out once the next slice's
                // reply has checked out.
                self.next_slice().await?;
            }
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
    }

    /// Read the end of the slice being read, then fetch the one holding
    /// the next byte the client gets.
    async fn next_slice(&mut self) -> io::Result<()> {
        if let Some(mut inner) = self.inner.take() {
            while let Some(p) = inner.next().await? {
                if !p.is_empty() {
                    return Err(self.fail("slice response longer than its range"));
                }
            }
        }
        let start = self.size * (self.need / self.size);
        let range = range_of(start, self.size);
        crate::error_log!(Debug, "http slice subrequest: \"{range}\"");
        let mut sub = self
            .origin
            .clone_request(Rc::new(Part(range)))
            .map_err(|e| self.fail(format!("slice subrequest refused: {e:?}")))?;
        let checked = match sub.head().await {
            Some(h) => check(h.status, &h.headers, start, self.size, &mut self.etag),
            None => Err("missing slice response".into()),
        };
        let (bytes, _) = checked.map_err(|m| self.fail(m))?;
        self.at = bytes.start;
        self.end = bytes.end;
        self.inner = Some(Box::new(sub));
        Ok(())
    }
}

/// The part of `piece`, the bytes from offset `from`, that is in `want`
/// and starts at its start (bytes past a gap are not sent).
fn cut(piece: Bytes, from: u64, want: Range<u64>) -> Bytes {
    let to = from + piece.len() as u64;
    if from > want.start || to <= want.start || want.is_empty() {
        return Bytes::new();
    }
    piece.slice((want.start - from) as usize..(to.min(want.end) - from) as usize)
}

impl BodyStream for Slices {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(self.step())
    }

    fn unbuffered(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.unbuffered())
    }
}

/// A body that fails before its first byte: the connection closes
/// without a response.
pub fn failed(msg: String) -> Body {
    Body::Stream {
        stream: Box::new(Failed(Some(msg))),
        len: None,
    }
}

#[derive(Debug)]
struct Failed(Option<String>);

impl BodyStream for Failed {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        let msg = self.0.take().unwrap_or_default();
        Box::pin(std::future::ready(Err(io::Error::other(msg))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_cut_to_the_range() {
        let p = || Bytes::from_static(b"0123");
        assert_eq!(cut(p(), 10, 10..20), "0123");
        assert_eq!(cut(p(), 10, 11..13), "12");
        assert_eq!(cut(p(), 10, 13..20), "3");
        assert_eq!(cut(p(), 10, 14..20), "");
        // Before the next byte wanted, or past a gap: nothing.
        assert_eq!(cut(p(), 12, 10..20), "");
        assert_eq!(cut(p(), 10, 12..12), "");
    }
}
