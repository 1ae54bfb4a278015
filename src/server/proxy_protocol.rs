//! `listen … proxy_protocol`: the PROXY header read off the raw socket before
//! TLS or HTTP sees a byte, and the `$proxy_protocol_*` variables.
//!
//! The header is peeked until it is whole (parsed by
//! [`crate::core::proxy_protocol`]), then exactly its bytes are taken from
//! the socket, so whatever follows stays queued for the TLS handshake or the
//! HTTP reader. It must come within `timeout` (the listener's
//! client_header_timeout, as nginx); a malformed header closes the
//! connection with nginx's "broken header" error.

use crate::core::module::VarDef;
use crate::core::proxy_protocol::{self, MAX, Parsed, ProxyHeader};
use crate::core::request::{Peer, Request};
use crate::error_log;
use crate::server::socket::Stream;
use std::io::{self, ErrorKind};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::Interest;

/// Read the PROXY header at the start of `s`; `None` when it carried no
/// addresses (`UNKNOWN`, `LOCAL`…). `Err` when the connection is to close
/// (logged here).
pub async fn read<S: Stream>(
    s: &S,
    timeout: Duration,
    peer: Peer,
) -> Result<Option<Arc<ProxyHeader>>, ()> {
    match tokio::time::timeout(timeout, header(s)).await {
        Ok(Ok(h)) => Ok(h.map(Arc::new)),
        Ok(Err(e)) if e.kind() == ErrorKind::InvalidData => {
            error_log!(Error, "{e} while reading PROXY protocol, client: {peer}");
            Err(())
        }
        Ok(Err(e)) => {
            error_log!(
                Info,
                "{} while reading PROXY protocol, client: {peer}",
                crate::core::errlog::errno_text(&e)
            );
            Err(())
        }
        Err(_) => {
            error_log!(
                Info,
                "client timed out while reading PROXY protocol, client: {peer}"
            );
            Err(())
        }
    }
}

async fn header<S: Stream>(s: &S) -> io::Result<Option<ProxyHeader>> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    let mut buf = vec![0u8; MAX];
    let (len, header) = loop {
        s.readable().await?;
        let peeked = s.try_io(Interest::READABLE, || {
            let n = crate::sys::peek(fd, &mut buf)?;
            match proxy_protocol::parse(&buf[..n]) {
                // Wait for more (this clears the readiness).
                Parsed::Partial if n > 0 && n < buf.len() => Err(ErrorKind::WouldBlock.into()),
                p => Ok((n, p)),
            }
        });
        match peeked {
            Ok((0, _)) => {
                return Err(io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "client closed connection",
                ));
            }
            Ok((_, Parsed::Done { len, header })) => break (len, header),
            Ok((_, Parsed::Invalid(why))) => {
                return Err(io::Error::new(ErrorKind::InvalidData, why));
            }
            Ok((_, Parsed::Partial)) => {
                return Err(io::Error::new(ErrorKind::InvalidData, "broken header"));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    };
    // The header's bytes are queued: take exactly them.
    let mut got = 0;
    while got < len {
        match s.try_io(Interest::READABLE, || {
            crate::sys::recv(fd, &mut buf[got..len])
        }) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => s.readable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(header)
}

fn port(out: &mut Vec<u8>, p: u16) {
    if p != 0 {
        out.extend_from_slice(p.to_string().as_bytes());
    }
}

/// `$proxy_protocol_addr`, `$proxy_protocol_port`,
/// `$proxy_protocol_server_addr`, `$proxy_protocol_server_port`,
/// `$proxy_protocol_tlv_NAME`: empty on a connection without PROXY
/// addresses.
pub static VARIABLES: &[VarDef] = &[
    VarDef::name("proxy_protocol_addr", |r, _, out| {
        if let Some(p) = &r.proxy {
            out.extend_from_slice(p.src_addr.as_bytes());
        }
    }),
    VarDef::name("proxy_protocol_port", |r, _, out| {
        if let Some(p) = &r.proxy {
            port(out, p.src_port);
        }
    }),
    VarDef::name("proxy_protocol_server_addr", |r, _, out| {
        if let Some(p) = &r.proxy {
            out.extend_from_slice(p.dst_addr.as_bytes());
        }
    }),
    VarDef::name("proxy_protocol_server_port", |r, _, out| {
        if let Some(p) = &r.proxy {
            port(out, p.dst_port);
        }
    }),
    VarDef::prefix("proxy_protocol_tlv_", tlv),
];

fn tlv(r: &Request<'_>, name: &str, out: &mut Vec<u8>) {
    if let Some(v) = r.proxy.as_ref().and_then(|p| p.tlv(name)) {
        out.extend_from_slice(&v);
    }
}
