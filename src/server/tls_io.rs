//! rustls over a non-blocking TCP socket driven by readiness, for either
//! side of a connection (the listener's `TlsStream`, the upstream's
//! `TlsConn`): records leave as the socket takes them, plaintext is read
//! as rustls decrypts it.
//!
//! Plaintext is handed to rustls for writing only once the records of the
//! previous write have left (`WouldBlock` otherwise), so no more than one
//! write's records wait in memory; [`flush`] pushes out the last ones.

use crate::sys::FdIo;
use rustls::ConnectionCommon;
use std::io::{self, BufRead, ErrorKind, IoSlice, Write};
use std::os::fd::AsRawFd;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Send what rustls has queued; `WouldBlock` when the socket is full.
pub fn flush<D>(tcp: &TcpStream, tls: &mut ConnectionCommon<D>) -> io::Result<()> {
    let fd = tcp.as_raw_fd();
    while tls.wants_write() {
        tcp.try_io(Interest::WRITABLE, || tls.write_tls(&mut FdIo(fd)))?;
    }
    Ok(())
}

/// Decrypted bytes handed to `sink`, which copies what it takes and says
/// how much: 0 at the end of the stream; `WouldBlock` when none are at hand.
pub fn read_plain<D>(
    tcp: &TcpStream,
    tls: &mut ConnectionCommon<D>,
    sink: &mut dyn FnMut(&[u8]) -> usize,
) -> io::Result<usize> {
    let fd = tcp.as_raw_fd();
    loop {
        let state = match tls.process_new_packets() {
            Ok(s) => s,
            Err(e) => {
                // The alert rustls queued goes out if the socket takes it.
                let _ = flush(tcp, tls);
                return Err(io::Error::new(ErrorKind::InvalidData, e));
            }
        };
        if state.plaintext_bytes_to_read() > 0 {
            let mut r = tls.reader();
            let n = sink(r.fill_buf()?);
            r.consume(n);
            return Ok(n);
        }
        if state.peer_has_closed() {
            return Ok(0);
        }
        // Answers rustls owes the peer (tickets, key updates) go out now.
        match flush(tcp, tls) {
            Err(e) if e.kind() != ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        let n = tcp.try_io(Interest::READABLE, || tls.read_tls(&mut FdIo(fd)))?;
        if n == 0 {
            // TCP end without close_notify: an end all the same.
            return Ok(0);
        }
    }
}

/// Decrypted bytes wait inside rustls (or its end was received).
pub fn has_plaintext<D>(tls: &mut ConnectionCommon<D>) -> bool {
    match tls.process_new_packets() {
        Ok(s) => s.plaintext_bytes_to_read() > 0 || s.peer_has_closed(),
        Err(_) => true, // the next read reports the error
    }
}

/// Encrypt and send `bufs` once earlier records have left: how much
/// plaintext rustls took.
pub fn write_plain<D>(
    tcp: &TcpStream,
    tls: &mut ConnectionCommon<D>,
    bufs: &[IoSlice<'_>],
) -> io::Result<usize> {
    flush(tcp, tls)?;
    let n = tls.writer().write_vectored(bufs)?;
    match flush(tcp, tls) {
        Err(e) if e.kind() != ErrorKind::WouldBlock => Err(e),
        _ => Ok(n),
    }
}

/// How a handshake failed.
pub enum HandshakeEnd {
    /// The peer closed the connection before it completed.
    Closed,
    /// A TLS error (its alert was sent if the socket took it).
    Tls(rustls::Error),
    Io(io::Error),
}

/// Run the handshake `conn` has begun (either side) to its end, waiting on
/// the socket's readiness; the caller bounds its time. `after_packets` runs
/// each time received records were processed (before any wait).
pub async fn handshake<D>(
    tcp: &TcpStream,
    conn: &mut ConnectionCommon<D>,
    after_packets: &mut dyn FnMut(),
) -> Result<(), HandshakeEnd> {
    let fd = tcp.as_raw_fd();
    loop {
        // Send what the handshake produced, waiting for room as needed.
        while conn.wants_write() {
            match tcp.try_io(Interest::WRITABLE, || conn.write_tls(&mut FdIo(fd))) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    tcp.writable().await.map_err(HandshakeEnd::Io)?
                }
                Err(e) => return Err(HandshakeEnd::Io(e)),
            }
        }
        if !conn.is_handshaking() {
            return Ok(());
        }
        match tcp.try_io(Interest::READABLE, || conn.read_tls(&mut FdIo(fd))) {
            Ok(0) => return Err(HandshakeEnd::Closed),
            Ok(_) => {
                let processed = conn.process_new_packets();
                after_packets();
                if let Err(e) = processed {
                    while conn.wants_write() && conn.write_tls(&mut FdIo(fd)).is_ok() {}
                    return Err(HandshakeEnd::Tls(e));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                tcp.readable().await.map_err(HandshakeEnd::Io)?
            }
            Err(e) => return Err(HandshakeEnd::Io(e)),
        }
    }
}

/// [`read_plain`] into `buf`'s spare room (16 KiB more when it has none).
pub fn read_buf<D>(
    tcp: &TcpStream,
    tls: &mut ConnectionCommon<D>,
    buf: &mut bytes::BytesMut,
) -> io::Result<usize> {
    if buf.capacity() == buf.len() {
        buf.reserve(16 * 1024);
    }
    let spare = buf.capacity() - buf.len();
    read_plain(tcp, tls, &mut |c| {
        let n = c.len().min(spare);
        buf.extend_from_slice(&c[..n]);
        n
    })
}
