//! Writing HTTP/1 responses: the response head.

use crate::core::clock;
use crate::core::message::response::{Response, reason, server_name};

/// Write the status line and headers of `r` into `out`.
///
/// The status line says HTTP/1.1 whatever the request's version, as nginx does:
/// a server answers with the highest version it conforms to (RFC 9110 §6.2).
///
/// `keep_alive`: the connection stays open, `Some(header)` with the
/// `Keep-Alive: timeout=N` header of keepalive_timeout's second value if set;
/// `None`: it closes.
pub(super) fn write_head(
    out: &mut Vec<u8>,
    r: &Response,
    keep_alive: Option<Option<std::time::Duration>>,
    tokens: bool,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(n.format(r.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(r.status).as_bytes());
    out.extend_from_slice(b"\r\nServer: ");
    out.extend_from_slice(server_name(tokens).as_bytes());
    out.extend_from_slice(b"\r\nDate: ");
    clock::with_http_date(|d| out.extend_from_slice(d.as_bytes()));
    if let Some(ct) = &r.content_type {
        out.extend_from_slice(b"\r\nContent-Type: ");
        out.extend_from_slice(ct.as_str().as_bytes());
    }
    if r.status != 304 && !(100..200).contains(&r.status) && r.status != 204 {
        match r.body.size() {
            Some(len) => {
                out.extend_from_slice(b"\r\nContent-Length: ");
                out.extend_from_slice(n.format(len).as_bytes());
            }
            None if r.chunked(keep_alive.is_some()) => {
                out.extend_from_slice(b"\r\nTransfer-Encoding: chunked");
            }
            // Unknown length on a closing connection: the close ends the body.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::message::response::Value;

    #[test]
    fn head_layout() {
        let r = Response::new(200).header("ETag", Value::Static("\"1-2\""));
        let mut out = Vec::new();
        write_head(&mut out, &r, Some(None), false);
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
        write_head(&mut out, &Response::new(304), None, true);
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 304 Not Modified\r\nServer: vireo/"));
        assert!(!s.contains("Content-Length"));
    }
}
