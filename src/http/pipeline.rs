//! What HTTP/1 and HTTP/2 share between a parsed request head and a response:
//! the request context, the server chosen by Host, URI normalisation, the body
//! limit check, the guarded phase pipeline, and the discard of what the
//! handler left of the body. Each protocol reads its own body (through
//! [`ClientBody`]) and writes the response its own way.

use crate::conf::model::CoreConf;
use crate::core::clock;
use crate::core::message::head::{BodyFraming, RequestHead};
use crate::core::message::response::Response;
use crate::core::proxy_protocol::ProxyHeader;
use crate::core::request::TlsInfo;
use crate::core::request::{BodyError, Finished, Peer, Request, RequestBody};
use crate::core::route::VirtualHosts;
use crate::http::h1::parse::Limits;
use crate::modules::static_files::uri;
use std::borrow::Cow;
use std::sync::Arc;

/// A request body as a connection reads it: the handler's view plus the byte
/// counts the connection logs.
pub trait ClientBody: RequestBody {
    /// Body bytes taken from the connection, framing included (`$request_length`).
    fn read(&self) -> u64;
    /// Body bytes after decoding.
    fn decoded(&self) -> u64;
    /// Nothing of the body is left to read or answer: [`Self::discard`] would
    /// have nothing to do.
    fn finished(&self) -> bool {
        false
    }
    /// Be done with what the handler left of the body: read and drop it
    /// (HTTP/1, whose next request follows it), or ask the client to stop
    /// sending it (HTTP/3).
    fn discard(&mut self) -> crate::core::request::BoxFuture<'_, Result<(), BodyError>>
    where
        Self: Sized,
    {
        Box::pin(async move {
            while self.chunk().await?.is_some() {}
            Ok(())
        })
    }
}

/// What the connection knows about itself, for a request's context.
pub struct ConnRef<'a> {
    pub peer: &'a Peer,
    /// The client socket (`$server_addr`).
    pub fd: std::os::fd::RawFd,
    /// The local address when the listener tells it without a syscall
    /// ([`crate::conf::load::Listener::local_addr`]).
    pub local: Option<std::net::SocketAddr>,
    pub id: u64,
    /// Requests on this connection so far, this one included.
    pub requests: u64,
    /// When the connection was accepted, in Unix milliseconds.
    pub born_ms: u64,
    /// The TLS connection's details, on one.
    pub tls: Option<Arc<TlsInfo>>,
    /// The connection's PROXY protocol addresses.
    pub proxy: Option<Arc<ProxyHeader>>,
}

/// The request context for `head` at the server level of the server `host`
/// chooses.
pub fn request<'a>(
    c: ConnRef<'a>,
    vhosts: &'a VirtualHosts,
    head: &'a RequestHead,
    host: &'a str,
) -> Request<'a> {
    let mut req = context(c, vhosts.select(host), head, host);
    if req.tls.is_some() {
        req.state.refused = crate::modules::ssl::client::refusal(&req);
    }
    req
}

/// A request context for `head` at the level of `server`, nothing checked.
pub fn context<'a>(
    c: ConnRef<'a>,
    server: &'a Arc<crate::core::route::Server>,
    head: &'a RequestHead,
    host: &'a str,
) -> Request<'a> {
    Request {
        head,
        peer: c.peer,
        fd: c.fd,
        local: match c.local {
            Some(a) => std::cell::OnceCell::from(Some(a)),
            None => std::cell::OnceCell::new(),
        },
        connection: c.id,
        connection_requests: c.requests,
        connection_start_ms: c.born_ms,
        start_ms: clock::unix_millis(),
        host,
        server,
        uri: Vec::with_capacity(head.path().len()),
        location: None,
        conf: &server.conf,
        // Made by the handlers that map the URI to a file.
        filename: Vec::new(),
        body_read: 0,
        state: Default::default(),
        tls: c.tls,
        proxy: c.proxy,
    }
}

/// Before the phases: normalise the URI (400 when it is bad) and refuse a
/// declared body over client_max_body_size (413). Both answers close an
/// HTTP/1 connection. Otherwise the core settings that bound the body: those
/// of the location the URI first maps to (no body, no location search: that
/// is left to the pipeline).
pub fn admit<'a>(req: &mut Request<'a>) -> Result<&'a CoreConf, Response> {
    let merge = req.server.conf.core.merge_slashes;
    if uri::normalize_with(req.head.path(), &mut req.uri, merge).is_err() {
        // No URI for a request refused for it (`$uri` is empty), as nginx.
        req.uri.clear();
        return Err(req.error(400));
    }
    let server = req.server;
    let first = match req.head.framing {
        BodyFraming::None => None,
        _ => server.location(&req.uri),
    };
    let core = &first.map_or(&*server.conf, |l| &*l.conf).core;
    match req.head.framing {
        BodyFraming::Length(n)
            if core.client_max_body_size != 0 && n > core.client_max_body_size =>
        {
            Err(body_too_large(req, n, core.client_max_body_size))
        }
        _ => Ok(core),
    }
}

/// The answer to a request refused before its phases (`resp`, a malformed
/// head's or [`admit`]'s error): through the server's `error_page` for its
/// status when there is one and the server's filters (`add_header …
/// always`), as nginx, the body left unread.
pub async fn refused(req: &mut Request<'_>, resp: Response) -> Response {
    if req.conf.core.error_pages.is_none() && req.conf.hooks.filters.is_empty() {
        return resp;
    }
    req.state.refused = Some(resp.status);
    match run(req, &mut NoBody, 0).await {
        Ran::Respond { resp, .. } => resp,
        Ran::Abort(_) => resp,
    }
}

/// The body of a refused request: none is read.
struct NoBody;

impl RequestBody for NoBody {
    fn chunk(
        &mut self,
    ) -> crate::core::request::BoxFuture<'_, Result<Option<bytes::Bytes>, BodyError>> {
        Box::pin(async { Ok(None) })
    }
    fn declared_len(&self) -> Option<u64> {
        None
    }
    fn gone(&mut self) -> crate::core::request::BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

impl ClientBody for NoBody {
    fn read(&self) -> u64 {
        0
    }
    fn decoded(&self) -> u64 {
        0
    }
}

/// How [`run`] went.
pub enum Ran {
    /// The response; `close`: an HTTP/1 connection closes after it (a panic,
    /// a body over its limit or badly framed).
    Respond { resp: Response, close: bool },
    /// The body could not be read (timed out, client gone): no answer.
    Abort(BodyError),
}

/// Run the phases under the panic guard, then read and drop what the handler
/// left of the body; `max` is client_max_body_size for the 413 answer.
pub async fn run<B: ClientBody>(req: &mut Request<'_>, body: &mut B, max: u64) -> Ran {
    let scope = crate::core::errlog::scopes().then(|| {
        let ip = match req.peer {
            Peer::Tcp(a) => Some(a.ip()),
            Peer::Unix => None,
        };
        let debug = crate::core::errlog::debug_connection(ip);
        let s = crate::core::errlog::Scope::new(req.conf.core.error_log.clone(), debug);
        req.state.errlog = Some(s.clone());
        s
    });
    let ran = {
        let phases = std::pin::pin!(crate::server::guard::run(req, body));
        crate::core::errlog::scoped(scope, phases).await
    };
    // nginx closes the connection after refusing a client's certificate.
    let mut close = matches!(req.state.refused, Some(495 | 496));
    let resp = match ran {
        Some(r) => r,
        None => {
            close = true;
            req.error(500)
        }
    };
    // A response that goes on beside the rest of the body reads it itself.
    let rest = match body.finished() || resp.has_duplex() {
        true => Ok(()),
        false => body.discard().await,
    };
    req.body_read = body.read();
    match rest {
        Ok(()) => {}
        Err(BodyError::TooLarge) => return too_large(req, body.decoded(), max),
        Err(BodyError::Bad(e)) => {
            return Ran::Respond {
                resp: req.error(e.status),
                close: true,
            };
        }
        Err(e) => return Ran::Abort(e),
    }
    Ran::Respond { resp, close }
}

fn too_large(req: &Request<'_>, n: u64, max: u64) -> Ran {
    Ran::Respond {
        resp: body_too_large(req, n, max),
        close: true,
    }
}

pub fn body_too_large(req: &Request<'_>, n: u64, max: u64) -> Response {
    crate::error_log!(
        Error,
        "client intended to send too large body: {n} bytes, limit {max}"
    );
    req.error(413)
}

/// Request head limits in nginx terms (client_header_buffer_size,
/// large_client_header_buffers).
pub fn limits(core: &CoreConf) -> Limits {
    Limits {
        header_buffer: core.client_header_buffer_size,
        large_buffers: core.large_client_header_buffers.0,
        large_buffer_size: core.large_client_header_buffers.1,
        underscores: core.underscores_in_headers,
        ignore_invalid: core.ignore_invalid_headers,
    }
}

/// The Host to choose a server by: lowercase, without port or trailing dot.
pub fn host_of(head: &RequestHead) -> Cow<'_, str> {
    let Some(h) = head.host() else {
        return Cow::Borrowed("");
    };
    let h = if h.starts_with(b"[") {
        // IPv6 literal: keep through the closing bracket.
        h.iter().position(|&b| b == b']').map_or(h, |i| &h[..=i])
    } else {
        h.iter().position(|&b| b == b':').map_or(h, |i| &h[..i])
    };
    let h = h.strip_suffix(b".").unwrap_or(h);
    match std::str::from_utf8(h) {
        // The usual case borrows: no copy per request.
        Ok(s) if !s.bytes().any(|b| b.is_ascii_uppercase()) => Cow::Borrowed(s),
        _ => Cow::Owned(String::from_utf8_lossy(h).to_ascii_lowercase()),
    }
}

/// Log a finished request and count it.
pub fn finished(done: &Finished<'_>) {
    crate::modules::log::log_request(done);
    let sent = done.head_bytes + done.body_bytes;
    crate::server::stats::response(done.resp.status, sent, done.req.start_ms);
}

/// Log a request closed without an answer (`return 444`, a client gone).
pub fn unanswered(req: &Request<'_>, resp: &Response) {
    crate::modules::log::log_request(&Finished::unsent(req, resp));
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_normalisation() {
        let mut b =
            bytes::BytesMut::from(&b"GET / HTTP/1.1\r\nHost: WWW.Example.COM.:8080\r\n\r\n"[..]);
        let h = crate::http::h1::parse::parse(&mut b, &Default::default())
            .unwrap()
            .unwrap();
        assert_eq!(super::host_of(&h), "www.example.com");
    }
}
