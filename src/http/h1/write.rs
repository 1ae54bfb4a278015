//! Writing HTTP/1 responses: the head, then the body by writev (bytes, and
//! file pieces read into the buffer), by sendfile (at most `sendfile_max_chunk`
//! a call; with tcp_nopush the head goes first with MSG_MORE), or as a
//! stream's pieces gathered a batch at a time, chunked when its length is
//! unknown. A timer is armed only when the socket would block (`send_timeout`).

use crate::conf::model::CoreConf;
use crate::core::clock;
use crate::core::message::response::read_file_at;
use crate::core::message::response::{Body, CutShort, OwnFields, Response, server_name};
use crate::core::request::Fields;
use crate::server::socket::Stream;
use std::fs::File;
use std::io::{self, ErrorKind, IoSlice};
use std::time::Duration;
use tokio::io::Interest;

/// Chunk size when a file body is read and written (sendfile off).
const READ_CHUNK: usize = 64 * 1024;

/// Write the status line and headers of `r` into `out`.
///
/// The status line says HTTP/1.1 whatever the request's version, as nginx does:
/// a server answers with the highest version it conforms to (RFC 9110 §6.2).
///
/// `keep_alive`: the connection stays open, `Some(header)` with the
/// `Keep-Alive: timeout=N` header of keepalive_timeout's second value if set;
/// `None`: it closes. `chunked`: the body goes out chunked (whatever its
/// length: trailers follow it).
pub(super) fn write_head(
    out: &mut Vec<u8>,
    r: &Response,
    keep_alive: Option<Option<std::time::Duration>>,
    tokens: bool,
    chunked: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(n.format(r.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(OwnFields::reason(r).as_bytes());
    match OwnFields::of(r, false) {
        None => {
            out.extend_from_slice(b"\r\nServer: ");
            out.extend_from_slice(server_name(tokens).as_bytes());
        }
        Some(v) => field(out, "Server", v),
    }
    match OwnFields::of(r, true) {
        None => {
            out.extend_from_slice(b"\r\nDate: ");
            clock::with_http_date(|d| out.extend_from_slice(d.as_bytes()));
        }
        Some(v) => field(out, "Date", v),
    }
    if let Some(ct) = &r.content_type {
        out.extend_from_slice(b"\r\nContent-Type: ");
        out.extend_from_slice(ct.as_str().as_bytes());
    }
    if r.status != 304 && !(100..200).contains(&r.status) && r.status != 204 {
        match r.body.size() {
            _ if chunked => out.extend_from_slice(b"\r\nTransfer-Encoding: chunked"),
            Some(len) => {
                out.extend_from_slice(b"\r\nContent-Length: ");
                out.extend_from_slice(n.format(len).as_bytes());
            }
            // Unknown length without chunked framing: the close ends the body.
            None => {}
        }
    }
    for (name, v) in &r.headers {
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_str().as_bytes());
    }
    match keep_alive {
        _ if r.status == 101 => out.extend_from_slice(b"\r\nConnection: upgrade\r\n\r\n"),
        Some(Some(header)) if !header.is_zero() => {
            out.extend_from_slice(b"\r\nConnection: keep-alive\r\nKeep-Alive: timeout=");
            out.extend_from_slice(n.format(header.as_secs()).as_bytes());
            out.extend_from_slice(b"\r\n\r\n");
        }
        Some(_) => out.extend_from_slice(b"\r\nConnection: keep-alive\r\n\r\n"),
        None => out.extend_from_slice(b"\r\nConnection: close\r\n\r\n"),
    }
}

/// A 103 (Early Hints) head with `fields`, the connection-specific ones
/// left out; false (nothing written) when none is left.
pub(super) fn early_hints_head(out: &mut Vec<u8>, fields: &Fields) -> bool {
    out.extend_from_slice(b"HTTP/1.1 103 Early Hints");
    let start = out.len();
    for (name, v) in fields {
        if !crate::http::fields::connection_specific(name) {
            field(out, name, Some(v.as_str()));
        }
    }
    out.extend_from_slice(b"\r\n\r\n");
    out.len() > start + 4
}

/// `name: value` on a line of its own, when there is a value.
fn field(out: &mut Vec<u8>, name: &str, v: Option<&str>) {
    if let Some(v) = v {
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
    }
}

/// How a response body goes out.
#[derive(Clone, Copy)]
pub(super) struct How {
    /// HEAD: the head only.
    pub(super) head_only: bool,
    /// Chunked framing (unknown length, an HTTP/1.1 client).
    pub(super) chunked: bool,
    /// Chunked, and the caller writes the last chunk (with trailers).
    pub(super) open_end: bool,
    /// `sendfile on` for file bodies: at most this many bytes per sendfile(2)
    /// call (`sendfile_max_chunk`, 0 for no limit).
    pub(super) sendfile: Option<usize>,
    /// A client that closes while a streamed body waits ends the response
    /// (unless the handler ignores client aborts).
    pub(super) watch_client: bool,
    /// The connection closes once this response is written.
    pub(super) closing: bool,
}

/// Write the head in `out` and the body; `sent` counts the body bytes
/// that went out, also when an error stops it part way.
pub(super) async fn send<S: Stream>(
    s: &S,
    out: &mut Vec<u8>,
    body: &mut Body,
    how: How,
    core: &CoreConf,
    sent: &mut u64,
) -> io::Result<()> {
    let t = core.send_timeout;
    let How {
        head_only,
        chunked,
        open_end,
        sendfile,
        watch_client,
        closing,
    } = how;
    // A file sent on a closing connection with tcp_nopush is corked (see
    // `send_file`), once.
    let mut cork = closing && core.tcp_nopush && S::PLAIN;
    if head_only {
        return write_all(s, out, t).await;
    }
    match body {
        Body::Empty => write_all(s, out, t).await,
        Body::Bytes(b) => write_vectored_all(s, out, b, t, sent).await,
        Body::File { file, range } => {
            let file = (&**file, range.clone());
            send_file(s, out, file, core, (sendfile, &mut cork), sent).await
        }
        Body::Multipart { file, parts } => {
            for (part_head, range) in &parts.parts {
                out.extend_from_slice(part_head);
                let file = (&**file, range.clone());
                send_file(s, out, file, core, (sendfile, &mut cork), sent).await?;
                *sent += part_head.len() as u64;
            }
            out.extend_from_slice(&parts.trailer);
            write_all(s, out, t).await?;
            *sent += parts.trailer.len() as u64;
            Ok(())
        }
        Body::Stream { stream, .. } => {
            // The head leaves with the first piece; the pieces the stream
            // has at hand after a wait leave together in one writev, and
            // the next wait starts only when they are written.
            let mut first = true;
            let mut batch = smallvec::SmallVec::<[(usize, bytes::Bytes); GATHER_PIECES]>::new();
            let mut next = match stream.ready() {
                Some(r) => r,
                None => stream.next().await,
            };
            loop {
                let mut end = false;
                let mut failed = None;
                loop {
                    match next {
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                        Ok(None) => {
                            end = true;
                            break;
                        }
                        Ok(Some(piece)) if piece.is_empty() => {}
                        Ok(Some(piece)) => {
                            if chunked {
                                if !first {
                                    out.extend_from_slice(b"\r\n");
                                }
                                // Writing into a Vec cannot fail.
                                let _ = std::io::Write::write_fmt(
                                    out,
                                    format_args!("{:x}\r\n", piece.len()),
                                );
                            }
                            first = false;
                            batch.push((out.len(), piece));
                        }
                    }
                    if batch.len() == GATHER_PIECES {
                        break;
                    }
                    match stream.ready() {
                        Some(r) => next = r,
                        None => break,
                    }
                }
                if end && open_end {
                    if !first {
                        out.extend_from_slice(b"\r\n");
                    }
                } else if end && chunked {
                    out.extend_from_slice(if first {
                        b"0\r\n\r\n".as_slice()
                    } else {
                        b"\r\n0\r\n\r\n"
                    });
                }
                // A source that broke off: what came goes out, head included,
                // its last chunk whole but no last-chunk marker after it (as
                // nginx), so the client sees the body cut short.
                let broke = failed.as_ref().is_some_and(CutShort::is);
                if broke && chunked && !first {
                    out.extend_from_slice(b"\r\n");
                }
                let cut = !out.is_empty() && broke;
                if !batch.is_empty() || end || cut {
                    // Inline and filled as used: no array of 33 cleared first.
                    let mut segs =
                        smallvec::SmallVec::<[(&[u8], bool); 2 * GATHER_PIECES + 1]>::new();
                    let mut at = 0;
                    for (mark, piece) in batch.iter() {
                        segs.push((&out[at..*mark], false));
                        segs.push((&piece[..], true));
                        at = *mark;
                    }
                    segs.push((&out[at..], false));
                    write_segments(s, &mut segs, t, sent).await?;
                    drop(segs);
                    out.clear();
                    batch.clear();
                }
                if let Some(e) = failed {
                    return Err(e);
                }
                if end {
                    return Ok(());
                }
                // While the stream makes its next piece (an upstream thinks,
                // limit_rate waits), a client that closes ends the response,
                // as nginx's check of the connection while it waits.
                if !watch_client {
                    next = stream.next().await;
                    continue;
                }
                next = tokio::select! {
                    biased;
                    r = stream.next() => r,
                    () = super::body::client_gone(s) => {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "client closed the connection",
                        ));
                    }
                };
            }
        }
    }
}

/// Write the head in `out` and `body` in chunks, then the last chunk with
/// the trailer fields `trailers` makes once the body is out (`add_trailer`).
pub(super) async fn send_with_trailers<S: Stream>(
    s: &S,
    out: &mut Vec<u8>,
    body: &mut Body,
    (core, watch_client): (&CoreConf, bool),
    sent: &mut u64,
    trailers: impl FnOnce() -> Vec<(&'static str, String)>,
) -> io::Result<()> {
    let t = core.send_timeout;
    match body {
        Body::Empty => {}
        Body::Bytes(b) => {
            if !b.is_empty() {
                chunk_head(out, b.len());
                write_vectored_all(s, out, b, t, sent).await?;
                out.clear();
                out.extend_from_slice(b"\r\n");
            }
        }
        Body::File { file, range } => chunk_file(s, out, file, range.clone(), t, sent).await?,
        Body::Multipart { file, parts } => {
            for (part_head, range) in &parts.parts {
                chunk_head(out, part_head.len());
                out.extend_from_slice(part_head);
                out.extend_from_slice(b"\r\n");
                *sent += part_head.len() as u64;
                chunk_file(s, out, file, range.clone(), t, sent).await?;
            }
            chunk_head(out, parts.trailer.len());
            out.extend_from_slice(&parts.trailer);
            out.extend_from_slice(b"\r\n");
            *sent += parts.trailer.len() as u64;
        }
        Body::Stream { .. } => {
            let how = How {
                head_only: false,
                chunked: true,
                open_end: true,
                sendfile: None,
                watch_client,
                // A stream's pieces are never corked.
                closing: false,
            };
            send(s, out, body, how, core, sent).await?;
            // What is left: the CRLF after the last piece, if any.
        }
    }
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers() {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    write_all(s, out, t).await?;
    out.clear();
    Ok(())
}

fn chunk_head(out: &mut Vec<u8>, len: usize) {
    let _ = std::io::Write::write_fmt(out, format_args!("{len:x}\r\n"));
}

/// `range` of `file` as chunks, read a piece at a time after what `out`
/// holds; leaves the last chunk's CRLF in `out`.
async fn chunk_file<S: Stream>(
    s: &S,
    out: &mut Vec<u8>,
    file: &File,
    range: std::ops::Range<u64>,
    t: Duration,
    sent: &mut u64,
) -> io::Result<()> {
    let mut off = range.start;
    let mut buf = vec![0u8; READ_CHUNK.min((range.end - range.start) as usize)];
    while off < range.end {
        let want = ((range.end - off) as usize).min(READ_CHUNK);
        let n = read_file_at(file, &mut buf[..want], off)?;
        off += n as u64;
        chunk_head(out, n);
        write_vectored_all(s, out, &buf[..n], t, sent).await?;
        out.clear();
        out.extend_from_slice(b"\r\n");
    }
    Ok(())
}

/// Send what is pending in `out`, then `range` of `file`; `sent` counts
/// the file bytes written. Small pieces are read into the buffer and leave
/// with the head in one write. `sendfile`: its largest call, when on, and
/// whether to cork the socket before the head (cleared once done).
async fn send_file<S: Stream>(
    s: &S,
    out: &mut Vec<u8>,
    (file, range): (&File, std::ops::Range<u64>),
    core: &CoreConf,
    (sendfile, cork): (Option<usize>, &mut bool),
    sent: &mut u64,
) -> io::Result<()> {
    let t = core.send_timeout;
    let len = range.end - range.start;
    let small = len <= crate::modules::static_files::cache::SMALL_BODY;
    let Some(max_chunk) = sendfile.filter(|_| !small) else {
        // Bytes at the front of `out` that are not file data (the head).
        let mut not_file = out.len();
        let mut off = range.start;
        while off < range.end {
            let want = ((range.end - off) as usize).min(READ_CHUNK);
            let at = out.len();
            out.resize(at + want, 0);
            let n = read_file_at(file, &mut out[at..], off).inspect_err(|_| out.truncate(at))?;
            out.truncate(at + n);
            off += n as u64;
            if out.len() >= READ_CHUNK || off == range.end {
                write_all(s, out, t).await?;
                *sent += (out.len() - not_file) as u64;
                not_file = 0;
                out.clear();
            }
        }
        if !out.is_empty() {
            // An empty range: the head is still waiting to go out.
            write_all(s, out, t).await?;
            out.clear();
        }
        return Ok(());
    };
    // tcp_nopush on a connection that closes after this response: TCP_CORK,
    // as nginx sets it for a head and a sendfile'd file. Never turned off:
    // the close sends what it holds with the FIN, in one segment with the
    // file's tail, where pushing the file would send the FIN alone after it
    // (one packet and one acknowledgement more per connection).
    // On a kept-alive connection the head is sent with MSG_MORE instead, so
    // the kernel holds it back and it leaves together with the start of the
    // file, without the two setsockopt calls per response a cork takes.
    if std::mem::take(cork) {
        s.set_cork(true);
        write_all(s, out, t).await?;
    } else if core.tcp_nopush {
        send_more(s, out, t).await?;
    } else {
        write_all(s, out, t).await?;
    }
    out.clear();
    sendfile_all(s, file, range, max_chunk, t, sent).await
}

/// Wait at most `t` for the socket to take more. Boxed: the timer and the
/// readiness wait are ~300 bytes that every future writing a response would
/// otherwise hold (and move) though a socket seldom fills.
async fn wait_writable<S: Stream>(s: &S, t: Duration) -> io::Result<()> {
    Box::pin(tokio::time::timeout(t, s.writable()))
        .await
        .map_err(|_| crate::http::send_timed_out())?
}

/// Write all of `data`; `t` bounds each wait for the socket.
pub(super) async fn write_all<S: Stream>(s: &S, mut data: &[u8], t: Duration) -> io::Result<()> {
    while !data.is_empty() {
        match s.try_write_vectored(&[IoSlice::new(data)]) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            Err(e) => return Err(e),
        }
    }
    flush(s, t).await
}

/// Wait until what the stream queued itself (TLS records) has left.
async fn flush<S: Stream>(s: &S, t: Duration) -> io::Result<()> {
    if S::PLAIN {
        return Ok(());
    }
    loop {
        match s.try_flush() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            r => return r,
        }
    }
}

/// Write all of `data` with MSG_MORE: more of the response follows at once.
async fn send_more<S: Stream>(s: &S, mut data: &[u8], t: Duration) -> io::Result<()> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    while !data.is_empty() {
        match s.try_io(Interest::WRITABLE, || crate::sys::send(fd, data, true)) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write `a` then `b` with writev, as one piece when the socket takes it;
/// `sent_b` counts the bytes of `b` written.
async fn write_vectored_all<S: Stream>(
    s: &S,
    a: &[u8],
    b: &[u8],
    t: Duration,
    sent_b: &mut u64,
) -> io::Result<()> {
    write_segments(s, &mut [(a, false), (b, true)], t, sent_b).await
}

/// Most body pieces gathered into one writev (each with its chunk framing).
const GATHER_PIECES: usize = 16;

/// Write `segs` in order with writev; `sent` counts the bytes written of the
/// segments marked `true` (body bytes, not framing).
async fn write_segments<S: Stream>(
    s: &S,
    segs: &mut [(&[u8], bool)],
    t: Duration,
    sent: &mut u64,
) -> io::Result<()> {
    let mut i = 0;
    loop {
        while i < segs.len() && segs[i].0.is_empty() {
            i += 1;
        }
        if i == segs.len() {
            break;
        }
        // In a block of its own: the array is not kept across the wait.
        let r = {
            let iov: smallvec::SmallVec<[IoSlice<'_>; 2 * GATHER_PIECES + 1]> = segs[i..]
                .iter()
                .take(2 * GATHER_PIECES + 1)
                .map(|(b, _)| IoSlice::new(b))
                .collect();
            s.try_write_vectored(&iov)
        };
        match r {
            Ok(mut n) => {
                for (b, body) in segs[i..].iter_mut() {
                    if n == 0 {
                        break;
                    }
                    let k = n.min(b.len());
                    *b = &b[k..];
                    if *body {
                        *sent += k as u64;
                    }
                    n -= k;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            Err(e) => return Err(e),
        }
    }
    flush(s, t).await
}

/// sendfile(2) `range` of `file`, at most `max_chunk` bytes a call (0: no
/// limit); `sent` counts the bytes that went out. After a full chunk the task
/// yields, so one fast client does not keep the worker from the others
/// (nginx's `sendfile_max_chunk`).
async fn sendfile_all<S: Stream>(
    s: &S,
    file: &File,
    range: std::ops::Range<u64>,
    max_chunk: usize,
    t: Duration,
    sent: &mut u64,
) -> io::Result<()> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    let chunk = match max_chunk {
        0 => 1 << 30,
        n => n.min(1 << 30),
    };
    let mut off = range.start;
    while off < range.end {
        let count = ((range.end - off) as usize).min(chunk);
        match s.try_io(Interest::WRITABLE, || {
            crate::sys::sendfile(fd, file, &mut off, count)
        }) {
            Ok(0) => {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "file shrank while sending",
                ));
            }
            Ok(n) => {
                *sent += n as u64;
                if n == chunk && off < range.end {
                    tokio::task::yield_now().await;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_writable(s, t).await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::message::response::Value;

    #[test]
    fn head_layout() {
        let r = Response::new(200).header("ETag", Value::Static("\"1-2\""));
        let mut out = Vec::new();
        write_head(&mut out, &r, Some(None), false, false);
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("HTTP/1.1 200 OK\r\nServer: vireo\r\nDate: "),
            "{s}"
        );
        assert!(
            s.ends_with("\r\nContent-Length: 0\r\nETag: \"1-2\"\r\nConnection: keep-alive\r\n\r\n"),
            "{s}"
        );
    }

    #[test]
    fn not_modified_has_no_length() {
        let mut out = Vec::new();
        write_head(&mut out, &Response::new(304), None, true, false);
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 304 Not Modified\r\nServer: vireo/"));
        assert!(!s.contains("Content-Length"));
    }
}
