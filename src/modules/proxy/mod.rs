//! Reverse proxy (`proxy_pass`): forwards the request to a peer of an
//! upstream over HTTP/1.x and streams the reply back.
//!
//! - The request sent is re-framed from what vireo parsed: hop-by-hop
//!   headers (and those the client's Connection header names) are dropped,
//!   the body goes with Content-Length when its length is known, chunked
//!   otherwise (HTTP/1.1), or held and measured for an HTTP/1.0 upstream.
//! - Request bodies stream from the client to the upstream as they arrive;
//!   bodies up to [`HOLD_BODY`] bytes are held first so another peer can be
//!   tried (`proxy_next_upstream`); a streamed body goes on a fresh
//!   connection and is never retried.
//! - The reply head is parsed strictly (`upstream::response`); its body is a
//!   `Body::Stream` the client connection pulls piece by piece, so one buffer
//!   per request bounds memory whatever `proxy_buffering` says.
//! - A 101 reply to a request that asked for an Upgrade becomes a tunnel
//!   (see [`Tunnel`]); nothing the client sends after its head reaches the
//!   upstream before that 101.

pub mod conf;

use crate::core::message::head::{BodyFraming, Method};
use crate::core::message::response::{Body, BodyStream, ClientIo, Response, Value};
use crate::core::module::{Module, VarDef};
use crate::core::request::{BoxFuture, Content, Outcome, Peer, Request, RequestBody};
use crate::http::h1::chunked::{Chunk, ChunkedDecoder};
use crate::server::idle::IdleTimer;
use crate::upstream::balance::{self, Method as Balance, Tried};
use crate::upstream::next::NextUpstream;
use crate::upstream::response::{self as upresp, Framing, UpstreamHead};
use crate::upstream::{self, Attempt, UpConn, UpstreamRef, UpstreamVars};
use bytes::{Bytes, BytesMut};
use conf::{ProxyConf, Redirect};
use std::cell::RefCell;
use std::future::Future;
use std::io::{self, ErrorKind, IoSlice};
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// Request bodies up to this size are read before the first attempt, so a
/// failed attempt can be repeated on another peer.
pub const HOLD_BODY: u64 = 64 * 1024;

/// Largest piece read from the upstream at once.
const PIECE: usize = 64 * 1024;

/// The first read of a reply: its head and, for a small reply, all its body,
/// so that head and body leave for the client in one write.
const FIRST_READ: usize = 32 * 1024;

/// The `proxy_pass` handler of one location.
#[derive(Debug)]
pub struct Proxy {
    up: UpstreamRef,
    /// `$proxy_host`, `$proxy_port`.
    host: String,
    port: String,
    /// The URI part of the proxy_pass URL.
    uri: Option<Vec<u8>>,
    /// `proxy_redirect default`: (proxy_pass URL, location prefix).
    default_redirect: Option<(String, String)>,
}

impl Content for Proxy {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move { Outcome::Respond(self.handle(req, body).await) })
    }

    fn auto_redirect(&self) -> bool {
        true
    }
}

/// Why an attempt failed.
struct Fail {
    /// The failure's `proxy_next_upstream` kind (`OFF`: not the peer's
    /// fault, never retried).
    kind: NextUpstream,
    /// 502 or 504 (or the upstream's own status).
    code: u16,
    msg: String,
    /// The upstream answered with a status listed in next_upstream: what to
    /// send when no further attempt is made.
    resp: Option<Response>,
}

fn fail(kind: NextUpstream, code: u16, msg: impl Into<String>) -> Fail {
    Fail {
        kind,
        code,
        msg: msg.into(),
        resp: None,
    }
}

fn io_fail(e: &io::Error, while_: &str) -> Fail {
    if crate::server::worker::is_no_slot(e) {
        // A local shortage: 500, not held against the peer, not retried.
        fail(NextUpstream::OFF, 500, format!("{e} while {while_}"))
    } else if e.kind() == ErrorKind::TimedOut {
        fail(
            NextUpstream::TIMEOUT,
            504,
            format!("upstream timed out (110: Connection timed out) while {while_}"),
        )
    } else {
        fail(
            NextUpstream::ERROR,
            502,
            format!("{} while {while_}", crate::core::errlog::errno_text(e)),
        )
    }
}

/// The request body as it goes to the upstream.
enum ReqBody {
    None,
    /// Read whole before the first attempt; `len` sent as Content-Length.
    Held(Vec<Bytes>),
    /// Streamed from the client: Content-Length `Some`, else chunked.
    Stream(Option<u64>),
}

impl Proxy {
    async fn handle(&self, req: &mut Request<'_>, body: &mut dyn RequestBody) -> Response {
        let conf = req.conf;
        let pc = conf.get::<ProxyConf>();
        let vars = Rc::new(RefCell::new(UpstreamVars {
            proxy_host: self.host.clone(),
            proxy_port: self.port.clone(),
            ..Default::default()
        }));
        req.state.ext.insert(vars.clone());
        let uri = self.upstream_uri(req);

        // The body: held (small, or for an HTTP/1.0 upstream without a length), or streamed.
        let has_body = pc.pass_request_body && req.head.framing != BodyFraming::None;
        let mut plan = if !has_body {
            ReqBody::None
        } else {
            match body.declared_len() {
                Some(n) if n <= HOLD_BODY => ReqBody::Held(Vec::new()),
                Some(n) => ReqBody::Stream(Some(n)),
                None if !pc.http11 => ReqBody::Held(Vec::new()),
                None => ReqBody::Stream(None),
            }
        };
        if let ReqBody::Held(pieces) = &mut plan {
            loop {
                match body.chunk().await {
                    Ok(Some(b)) => pieces.push(b),
                    Ok(None) => break,
                    Err(e) => return req.error(e.status()),
                }
            }
        }
        let (head, upgrade) = self.request_head(req, pc, &uri, &plan);

        let up = self.up.get();
        let key: Vec<u8> = match up.method {
            Balance::IpHash => match req.client_addr() {
                Peer::Tcp(a) => balance::ip_hash_key(a.ip()),
                Peer::Unix => Vec::new(),
            },
            Balance::Hash { .. } => {
                let mut k = Vec::new();
                if let Some(t) = &up.hash_key {
                    t.render(req, &mut k);
                }
                k
            }
            _ => Vec::new(),
        };
        let idempotent = !matches!(req.method(), Method::Post)
            && !matches!(req.head.method_str(), "LOCK" | "PATCH");
        let mut started = None;
        let mut tried = Tried::default();
        let mut tries = 0u32;
        let mut last: Option<Fail> = None;
        loop {
            let peer = match up.select(&key, &mut tried, Some(&mut *body)).await {
                Ok(p) => p,
                Err(e) if e.status() != 502 => return req.error(e.status()),
                Err(e) => {
                    if tries == 0 {
                        let msg = format!("{e} while connecting to upstream");
                        self.log(req, up.name.as_str(), &uri, &msg);
                    }
                    return match last {
                        Some(Fail { resp: Some(r), .. }) => r,
                        Some(f) => req.error(f.code),
                        None => req.error(502),
                    };
                }
            };
            tries += 1;
            let addr = up.addr_name(peer);
            vars.borrow_mut().attempts.push(Attempt {
                addr: addr.to_string(),
                ..Default::default()
            });
            let streamed = matches!(plan, ReqBody::Stream(_));
            let t0 = Instant::now();
            let started = *started.get_or_insert(t0);
            let r = self
                .attempt(req, pc, peer, &head, &plan, &mut *body, upgrade, &vars, t0)
                .await;
            match r {
                Ok(resp) => return resp,
                Err(Gave::Up) => {
                    let name = format!("http://{addr}{}", String::from_utf8_lossy(&uri));
                    up.client_left(peer, req, &name);
                    vars.borrow_mut()
                        .attempts
                        .last_mut()
                        .expect("pushed above")
                        .response_ms = Some(t0.elapsed().as_millis() as u64);
                    return Response::new(499);
                }
                Err(Gave::Fail(f)) => {
                    if f.resp.is_none() && f.kind != NextUpstream::OFF {
                        up.finished(peer, false);
                    } else if f.kind == NextUpstream::OFF {
                        up.finished(peer, true);
                    }
                    {
                        let mut v = vars.borrow_mut();
                        let a = v.attempts.last_mut().expect("pushed above");
                        a.status = f.resp.as_ref().map_or(f.code, |r| r.status);
                        a.response_ms = Some(t0.elapsed().as_millis() as u64);
                    }
                    if f.resp.is_none() {
                        self.log(req, addr, &uri, &f.msg);
                    }
                    let sent = !f.msg.contains("while connecting");
                    let can = pc.next_upstream.has(f.kind)
                        && !streamed
                        && (pc.next_upstream_tries == 0 || tries < pc.next_upstream_tries)
                        && (pc.next_upstream_timeout.is_zero()
                            || started.elapsed() < pc.next_upstream_timeout)
                        && (idempotent
                            || pc.next_upstream.has(NextUpstream::NON_IDEMPOTENT)
                            || !sent);
                    if !can {
                        return match f.resp {
                            Some(r) => r,
                            None => req.error(f.code),
                        };
                    }
                    last = Some(f);
                }
            }
        }
    }

    /// One attempt on `peer`: connect, send, read the reply head, build the response.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        req: &Request<'_>,
        pc: &ProxyConf,
        peer: usize,
        head: &[u8],
        plan: &ReqBody,
        body: &mut dyn RequestBody,
        upgrade: bool,
        vars: &Rc<RefCell<UpstreamVars>>,
        t0: Instant,
    ) -> Result<Response, Gave> {
        let up = self.up.get();
        let streamed = matches!(plan, ReqBody::Stream(_));
        let is_head = req.method() == Method::Head;
        // A streamed body cannot be sent twice: it goes on a fresh connection.
        let mut conn = if streamed || upgrade {
            crate::upstream::pool::connect(&up.addrs[peer], pc.connect_timeout).await
        } else {
            up.connect(peer, pc.connect_timeout).await
        }
        .map_err(|e| io_fail(&e, "connecting to upstream"))?;
        // A kept-alive connection took no time to connect (nginx shows 0.000).
        let connect_ms = if conn.reused() {
            0
        } else {
            t0.elapsed().as_millis() as u64
        };
        vars.borrow_mut().attempts.last_mut().unwrap().connect_ms = Some(connect_ms);
        let mut buf = BytesMut::new();
        let watch = !pc.ignore_client_abort;
        let h = loop {
            // A streamed body is sent before the wait is watched (below).
            let exchange = self.exchange(&conn, pc, head, plan, is_head, &mut buf);
            let r = upstream::unless_client_leaves(watch && !streamed, body, exchange)
                .await
                .ok_or(Gave::Up)?;
            match r {
                Ok(h) => break h,
                // A kept-alive connection the peer closed meanwhile: once more on a new one.
                Err(Retry::Stale) if conn.reused() && !streamed => {
                    conn = crate::upstream::pool::connect(&up.addrs[peer], pc.connect_timeout)
                        .await
                        .map_err(|e| io_fail(&e, "connecting to upstream"))?;
                    buf.clear();
                }
                Err(Retry::Stale) => {
                    return Err(fail(
                        NextUpstream::ERROR,
                        502,
                        "upstream prematurely closed connection while reading response header from upstream",
                    )
                    .into());
                }
                Err(Retry::Fail(f)) => return Err(f.into()),
                Err(Retry::Body(conn_body)) => {
                    // Streamed body: send it, then read the head.
                    self.send_stream(&conn, pc, body, conn_body).await?;
                    let wait = self.read_head(&conn, pc, is_head, &mut buf);
                    break upstream::unless_client_leaves(watch, body, wait)
                        .await
                        .ok_or(Gave::Up)??;
                }
            }
        };
        vars.borrow_mut().attempts.last_mut().unwrap().header_ms =
            Some(t0.elapsed().as_millis() as u64);
        up.responded(peer, t0);
        if h.upgrade && !upgrade {
            return Err(fail(
                NextUpstream::INVALID_HEADER,
                502,
                "upstream sent unexpected 101 while reading response header from upstream",
            )
            .into());
        }
        let status_kind = NextUpstream::of_status(h.status);
        let unbuffered = !crate::upstream::buffering(pc.buffering, h.header("x-accel-buffering"));
        let resp = self.response(req, pc, &h);
        // The fields' values live on in the response; their spans serve $upstream_http_*.
        let mut h = h;
        vars.borrow_mut().head = Some((h.text.clone(), std::mem::take(&mut h.fields)));
        if pc.next_upstream.has(status_kind) {
            return Err(Gave::Fail(Fail {
                kind: status_kind,
                code: h.status,
                msg: String::new(),
                resp: Some(
                    self.finish_response(resp, conn, buf, &h, peer, vars, t0, pc, true, unbuffered),
                ),
            }));
        }
        if pc.intercept_errors
            && h.status >= 300
            && req
                .conf
                .core
                .error_pages
                .as_deref()
                .is_some_and(|p| p.find(h.status).is_some())
        {
            up.finished(peer, true);
            return Ok(req.error(h.status));
        }
        if h.upgrade {
            let mut v = vars.borrow_mut();
            v.attempts.last_mut().unwrap().status = 101;
            drop(v);
            up.finished(peer, true);
            let mut resp = resp;
            if let Some(u) = req.head.header("upgrade") {
                resp.headers.push((
                    "Upgrade",
                    Value::Owned(String::from_utf8_lossy(u).into_owned()),
                ));
            }
            resp.body = Body::Stream {
                stream: Box::new(Upgrade(Some(Tunnel {
                    conn,
                    pending: buf,
                    idle: pc.read_timeout,
                }))),
                len: None,
            };
            return Ok(resp);
        }
        Ok(self.finish_response(resp, conn, buf, &h, peer, vars, t0, pc, false, unbuffered))
    }

    /// Write the head and a held body, then read the reply head.
    /// `Err(Retry::Body)` when a streamed body has to go first.
    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &self,
        conn: &UpConn,
        pc: &ProxyConf,
        head: &[u8],
        plan: &ReqBody,
        is_head: bool,
        buf: &mut BytesMut,
    ) -> Result<UpstreamHead, Retry> {
        let stale = |e: io::Error| {
            if e.kind() == ErrorKind::TimedOut {
                Retry::Fail(io_fail(&e, "sending request to upstream"))
            } else {
                Retry::Stale
            }
        };
        match plan {
            ReqBody::Held(pieces) => {
                let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(pieces.len() + 1);
                slices.push(IoSlice::new(head));
                slices.extend(pieces.iter().map(|p| IoSlice::new(p)));
                write_vectored(conn, &slices, pc.send_timeout)
                    .await
                    .map_err(stale)?;
            }
            ReqBody::None => write_all(conn, head, pc.send_timeout)
                .await
                .map_err(stale)?,
            ReqBody::Stream(len) => {
                // Sent once: a streamed body is never retried (`handle`).
                write_all(conn, head, pc.send_timeout)
                    .await
                    .map_err(|e| Retry::Fail(io_fail(&e, "sending request to upstream")))?;
                return Err(Retry::Body(len.is_none()));
            }
        }
        match self.read_head(conn, pc, is_head, buf).await {
            Ok(h) => Ok(h),
            Err(f) if f.kind == NextUpstream::ERROR && buf.is_empty() => Err(Retry::Stale),
            Err(f) => Err(Retry::Fail(f)),
        }
    }

    /// Stream the client's body to the upstream (`chunked`: with chunked framing).
    async fn send_stream(
        &self,
        conn: &UpConn,
        pc: &ProxyConf,
        body: &mut dyn RequestBody,
        chunked: bool,
    ) -> Result<(), Fail> {
        loop {
            let piece = match body.chunk().await {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    // Not the peer's fault: no next upstream, no failure counted.
                    return Err(fail(
                        NextUpstream::OFF,
                        e.status(),
                        "client request body failed",
                    ));
                }
            };
            if piece.is_empty() {
                continue;
            }
            let r = if chunked {
                let size = format!("{:x}\r\n", piece.len());
                write_vectored(
                    conn,
                    &[
                        IoSlice::new(size.as_bytes()),
                        IoSlice::new(&piece),
                        IoSlice::new(b"\r\n"),
                    ],
                    pc.send_timeout,
                )
                .await
            } else {
                write_all(conn, &piece, pc.send_timeout).await
            };
            r.map_err(|e| io_fail(&e, "sending request to upstream"))?;
        }
        if chunked {
            write_all(conn, b"0\r\n\r\n", pc.send_timeout)
                .await
                .map_err(|e| io_fail(&e, "sending request to upstream"))?;
        }
        Ok(())
    }

    async fn read_head(
        &self,
        conn: &UpConn,
        pc: &ProxyConf,
        is_head: bool,
        buf: &mut BytesMut,
    ) -> Result<UpstreamHead, Fail> {
        const WHILE: &str = "reading response header from upstream";
        loop {
            if !buf.is_empty() {
                match upresp::parse(buf, pc.buffer_size, is_head) {
                    Ok(Some(h)) => return Ok(h),
                    Ok(None) => {}
                    Err(e) => {
                        return Err(fail(
                            NextUpstream::INVALID_HEADER,
                            502,
                            format!("{e} while {WHILE}"),
                        ));
                    }
                }
            }
            if buf.capacity() - buf.len() < 1024 {
                if buf.is_empty() {
                    // No buffer is held while the upstream thinks.
                    wait_readable(conn, pc.read_timeout)
                        .await
                        .map_err(|e| io_fail(&e, WHILE))?;
                    if buf.capacity() == 0 {
                        *buf = spare_buffer();
                    }
                }
                buf.reserve(pc.buffer_size.max(FIRST_READ));
            }
            match read_some(conn, buf, pc.read_timeout).await {
                Ok(0) => {
                    return Err(fail(
                        NextUpstream::ERROR,
                        502,
                        format!("upstream prematurely closed connection while {WHILE}"),
                    ));
                }
                Ok(_) => {}
                Err(e) => return Err(io_fail(&e, WHILE)),
            }
        }
    }

    /// The response to the client with the upstream's body as a stream.
    #[allow(clippy::too_many_arguments)]
    fn finish_response(
        &self,
        mut resp: Response,
        conn: UpConn,
        buf: BytesMut,
        h: &UpstreamHead,
        peer: usize,
        vars: &Rc<RefCell<UpstreamVars>>,
        t0: Instant,
        pc: &ProxyConf,
        failed: bool,
        unbuffered: bool,
    ) -> Response {
        vars.borrow_mut().attempts.last_mut().unwrap().status = h.status;
        let mut stream = UpstreamBody {
            conn: Some(conn),
            buf,
            framing: h.framing,
            left: match h.framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            dec: ChunkedDecoder::new(),
            timeout: pc.read_timeout,
            up: self.up.clone(),
            peer,
            reusable: h.reusable,
            vars: vars.clone(),
            t0,
            done: false,
            failed,
            unbuffered,
        };
        match h.framing {
            Framing::None | Framing::Length(0) => {
                let declared = h
                    .header("content-length")
                    .and_then(|v| v.trim().parse::<u64>().ok());
                stream.end(true);
                resp.body = match declared {
                    // HEAD: the length the upstream gave, no body.
                    Some(n) if n > 0 => Body::Stream {
                        stream: Box::new(stream),
                        len: Some(n),
                    },
                    _ => Body::Empty,
                };
            }
            Framing::Length(n) => {
                resp.body = Body::Stream {
                    stream: Box::new(stream),
                    len: Some(n),
                }
            }
            Framing::Chunked | Framing::Close => {
                resp.body = Body::Stream {
                    stream: Box::new(stream),
                    len: None,
                }
            }
        }
        resp
    }

    /// Status and headers for the client from the upstream's head; the
    /// values it passes on unchanged share the head's text.
    fn response(&self, req: &Request<'_>, pc: &ProxyConf, h: &UpstreamHead) -> Response {
        let mut resp = Response {
            status: h.status,
            content_type: None,
            // Sized once (Response::new's room for four would regrow), with
            // room for what filters add (add_header, Content-Encoding, Vary).
            headers: Vec::with_capacity(h.fields.len() + 2),
            body: Body::Empty,
            trailers: None,
        };
        for &(n, (va, vb)) in &h.fields {
            let (name, value) = (h.at(n), h.at((va, vb)));
            let is = |p: &String| name.eq_ignore_ascii_case(p);
            let kind = passed_header(name);
            if kind == Passed::ContentType {
                resp.content_type = Some(Value::Slice(h.text.clone(), va, vb));
                continue;
            }
            let hidden = match kind {
                Passed::Not => true,
                Passed::Accel => !pc.pass_headers.iter().any(is),
                _ => false,
            };
            if hidden || pc.hide_headers.iter().any(is) {
                continue;
            }
            let changed = match kind {
                Passed::Location => self.redirect(req, pc, value),
                Passed::Refresh => value.to_ascii_lowercase().find("url=").and_then(|i| {
                    let url = self.redirect(req, pc, &value[i + 4..])?;
                    Some(format!("{}{url}", &value[..i + 4]))
                }),
                Passed::SetCookie => rewrite_cookie(pc, value),
                _ => None,
            };
            let v = match changed {
                Some(v) => Value::Owned(v),
                None => Value::Slice(h.text.clone(), va, vb),
            };
            match crate::upstream::intern_header_name(name) {
                Some(n) => resp.headers.push((n, v)),
                None => crate::error_log!(
                    Warn,
                    "upstream header \"{name}\" dropped: too many distinct header names"
                ),
            }
        }
        resp
    }

    /// proxy_redirect applied to a Location (or Refresh URL) value; `None`
    /// when it stays as it is.
    fn redirect(&self, req: &Request<'_>, pc: &ProxyConf, v: &str) -> Option<String> {
        let default = |v: &str| -> Option<String> {
            let (from, to) = self.default_redirect.as_ref()?;
            v.strip_prefix(from.as_str())
                .map(|rest| format!("{to}{rest}"))
        };
        let out = match &pc.redirect {
            Redirect::Off => None,
            Redirect::Default => default(v),
            Redirect::List(list) => list.iter().find_map(|(from, to)| match from {
                None => default(v),
                Some(f) => v.strip_prefix(f.as_str()).map(|rest| {
                    let mut o = Vec::new();
                    to.render(req, &mut o);
                    format!("{}{rest}", String::from_utf8_lossy(&o))
                }),
            }),
        };
        out.map(|o| match o.starts_with('/') {
            true => format!("{}{o}", req.origin()),
            false => o,
        })
    }

    /// The URI sent upstream (path and arguments).
    fn upstream_uri(&self, req: &Request<'_>) -> Vec<u8> {
        // The request's own URI goes unchanged when vireo did not change it.
        let unchanged = || {
            let mut normalized = Vec::new();
            !req.state.internal
                && req.state.redirects == 0
                && req.state.args.is_none()
                && crate::modules::static_files::uri::normalize(req.head.path(), &mut normalized)
                    .is_ok()
                && normalized == req.uri
        };
        let mut out = Vec::with_capacity(req.uri.len() + 16);
        match &self.uri {
            None if unchanged() => return req.request_uri().to_vec(),
            None => escape(&req.uri, &mut out),
            Some(u) => {
                let prefix = req
                    .location
                    .map(|l| l.pattern.as_bytes())
                    .filter(|p| req.uri.starts_with(p));
                match prefix {
                    Some(p) => {
                        out.extend_from_slice(u);
                        escape(&req.uri[p.len()..], &mut out);
                    }
                    None => escape(&req.uri, &mut out),
                }
            }
        }
        if let Some(a) = req.args() {
            out.push(b'?');
            out.extend_from_slice(a);
        }
        out
    }

    /// The request head for the upstream; true when it asks for an Upgrade.
    fn request_head(
        &self,
        req: &Request<'_>,
        pc: &ProxyConf,
        uri: &[u8],
        plan: &ReqBody,
    ) -> (Vec<u8>, bool) {
        let mut h = Vec::with_capacity(512);
        h.extend_from_slice(match req.state.method {
            Some(Method::Get) => b"GET",
            _ => req.head.method_str().as_bytes(),
        });
        h.push(b' ');
        h.extend_from_slice(uri);
        h.extend_from_slice(if pc.http11 {
            b" HTTP/1.1\r\n".as_slice()
        } else {
            b" HTTP/1.0\r\n"
        });
        let user: &[(String, crate::core::vars::Template)] = &pc.set_headers;
        let set = |name: &str| user.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let mut upgrade = false;
        let mut emit = |h: &mut Vec<u8>, name: &str, value: &[u8]| {
            if value.is_empty() {
                return;
            }
            if name.eq_ignore_ascii_case("upgrade") {
                upgrade = true;
            }
            h.extend_from_slice(name.as_bytes());
            h.extend_from_slice(b": ");
            let at = h.len();
            h.extend_from_slice(value);
            // A variable's value cannot break the head.
            if memchr::memchr2(b'\r', b'\n', value).is_some() {
                for b in &mut h[at..] {
                    if *b == b'\r' || *b == b'\n' {
                        *b = b' ';
                    }
                }
            }
            h.extend_from_slice(b"\r\n");
        };
        let mut v = Vec::new();
        if !set("host") {
            emit(&mut h, "Host", self.host.as_bytes());
        }
        if !set("connection") {
            emit(&mut h, "Connection", b"close");
        }
        for (name, t) in user {
            v.clear();
            t.render(req, &mut v);
            emit(&mut h, name, &v);
        }
        if pc.pass_request_headers {
            let named: Vec<&[u8]> = req
                .head
                .header("connection")
                .map(|c| c.split(|&b| b == b',').map(trim).collect())
                .unwrap_or_default();
            for (name, value) in req.head.headers() {
                if is_hop_or_framing(name)
                    || user
                        .iter()
                        .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
                    || named.iter().any(|c| c.eq_ignore_ascii_case(name))
                {
                    continue;
                }
                h.extend_from_slice(name);
                h.extend_from_slice(b": ");
                h.extend_from_slice(value);
                h.extend_from_slice(b"\r\n");
            }
        }
        match plan {
            ReqBody::None => {
                if pc.pass_request_body && req.head.framing == BodyFraming::Length(0) {
                    h.extend_from_slice(b"Content-Length: 0\r\n");
                }
            }
            ReqBody::Held(pieces) => {
                let n: usize = pieces.iter().map(Bytes::len).sum();
                h.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes());
            }
            ReqBody::Stream(Some(n)) => {
                h.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes())
            }
            ReqBody::Stream(None) => h.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        }
        h.extend_from_slice(b"\r\n");
        (h, upgrade)
    }

    fn log(&self, req: &Request<'_>, peer: &str, uri: &[u8], msg: &str) {
        let client = req.client_addr();
        crate::error_log!(
            Error,
            "{msg}, client: {client}, server: {}, request: \"{}\", upstream: \"http://{peer}{}\", host: \"{}\"",
            req.server.name(),
            String::from_utf8_lossy(req.head.line()),
            String::from_utf8_lossy(uri),
            req.host
        );
    }
}

/// Why an attempt ended without a response for the client.
enum Gave {
    Fail(Fail),
    /// The client left while the upstream was thinking (499).
    Up,
}

impl From<Fail> for Gave {
    fn from(f: Fail) -> Self {
        Gave::Fail(f)
    }
}

enum Retry {
    /// A reused connection was closed by the peer before it answered.
    Stale,
    Fail(Fail),
    /// The head went out; the streamed body follows (true: chunked).
    Body(bool),
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &s[start..end]
}

/// What becomes of a header of the upstream's reply.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Passed {
    /// Passed on as it is (unless proxy_hide_header names it).
    As,
    /// Content-Length, Date, Server: the client connection sets its own.
    Not,
    /// X-Pad, X-Accel-*: hidden unless proxy_pass_header names it.
    Accel,
    ContentType,
    /// Rewritten by proxy_redirect.
    Location,
    Refresh,
    /// Rewritten by proxy_cookie_domain / proxy_cookie_path.
    SetCookie,
}

/// Classify a reply header name, comparing each candidate of its length only.
fn passed_header(name: &str) -> Passed {
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        4 if is("date") => Passed::Not,
        5 if is("x-pad") => Passed::Accel,
        6 if is("server") => Passed::Not,
        7 if is("refresh") => Passed::Refresh,
        8 if is("location") => Passed::Location,
        10 if is("set-cookie") => Passed::SetCookie,
        12 if is("content-type") => Passed::ContentType,
        14 if is("content-length") => Passed::Not,
        15..=18
            if [
                "x-accel-expires",
                "x-accel-redirect",
                "x-accel-limit-rate",
                "x-accel-buffering",
                "x-accel-charset",
            ]
            .iter()
            .any(|n| is(n)) =>
        {
            Passed::Accel
        }
        _ => Passed::As,
    }
}

/// Request headers never forwarded as they came: hop-by-hop ones (RFC 9110
/// §7.6.1) and those vireo sets itself. Compares each candidate of the
/// name's length only.
fn is_hop_or_framing(n: &[u8]) -> bool {
    let is = |h: &str| n.eq_ignore_ascii_case(h.as_bytes());
    match n.len() {
        2 => is("te"),
        4 => is("host"),
        6 => is("expect"),
        7 => is("trailer") || is("upgrade"),
        10 => is("connection") || is("keep-alive"),
        14 => is("content-length"),
        16 => is("proxy-connection"),
        17 => is("transfer-encoding"),
        _ => false,
    }
}

/// Percent-encode what may not stand in a request path.
fn escape(uri: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in uri {
        if b <= b' ' || b >= 0x7f || matches!(b, b'#' | b'%' | b'?' | b'"') {
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        } else {
            out.push(b);
        }
    }
}

/// proxy_cookie_domain and proxy_cookie_path on one Set-Cookie value
/// (`None`: none configured).
fn rewrite_cookie(pc: &ProxyConf, v: &str) -> Option<String> {
    if pc.cookie_domain.is_empty() && pc.cookie_path.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(v.len());
    for (i, attr) in v.split(';').enumerate() {
        if i > 0 {
            out.push(';');
        }
        let t = attr.trim_start();
        let lead = &attr[..attr.len() - t.len()];
        let rewritten = t.split_once('=').and_then(|(k, val)| {
            if i > 0 && k.trim().eq_ignore_ascii_case("domain") {
                let bare = val.trim().trim_start_matches('.');
                pc.cookie_domain
                    .iter()
                    .find(|(from, _)| from.trim_start_matches('.').eq_ignore_ascii_case(bare))
                    .map(|(_, to)| format!("{k}={to}"))
            } else if i > 0 && k.trim().eq_ignore_ascii_case("path") {
                pc.cookie_path.iter().find_map(|(from, to)| {
                    val.trim()
                        .strip_prefix(from.as_str())
                        .map(|rest| format!("{k}={to}{rest}"))
                })
            } else {
                None
            }
        });
        out.push_str(lead);
        out.push_str(rewritten.as_deref().unwrap_or(t));
    }
    Some(out)
}

fn timed_out() -> io::Error {
    io::Error::new(ErrorKind::TimedOut, "upstream timed out")
}

async fn write_all(c: &UpConn, data: &[u8], t: Duration) -> io::Result<()> {
    write_vectored(c, &[IoSlice::new(data)], t).await
}

async fn write_vectored(c: &UpConn, bufs: &[IoSlice<'_>], t: Duration) -> io::Result<()> {
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
                tokio::time::timeout(t, c.writable())
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
async fn wait_readable(c: &UpConn, t: Duration) -> io::Result<()> {
    let mut readable = std::pin::pin!(c.readable());
    let mut deadline = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = readable.as_mut().poll(cx) {
            return Poll::Ready(r);
        }
        let timer = deadline.get_or_insert_with(|| IdleTimer::deadline(Instant::now() + t));
        Pin::new(timer).poll(cx).map(|_| Err(timed_out()))
    })
    .await
}

/// Read what the upstream has (waiting at most `t`); 0 at its end.
async fn read_some(c: &UpConn, buf: &mut BytesMut, t: Duration) -> io::Result<usize> {
    loop {
        match c.try_read_buf(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait_readable(c, t).await?,
            Err(e) => return Err(e),
        }
    }
}

/// The upstream's response body, pulled by the client connection.
struct UpstreamBody {
    conn: Option<UpConn>,
    buf: BytesMut,
    framing: Framing,
    left: u64,
    dec: ChunkedDecoder,
    timeout: Duration,
    up: UpstreamRef,
    peer: usize,
    reusable: bool,
    vars: Rc<RefCell<UpstreamVars>>,
    t0: Instant,
    done: bool,
    /// The status was one of next_upstream's: counts as a failure of the peer.
    failed: bool,
    /// `proxy_buffering off` or `X-Accel-Buffering: no`.
    unbuffered: bool,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("peer", &self.peer)
            .finish()
    }
}

impl UpstreamBody {
    /// Count a piece passed on in `$upstream_response_length`.
    fn count(&self, r: &io::Result<Option<Bytes>>) {
        if let Ok(Some(p)) = r
            && let Some(a) = self.vars.borrow_mut().attempts.last_mut()
        {
            a.response_length += p.len() as u64;
        }
    }

    /// The body is over: account for the peer, pool the connection if clean.
    fn end(&mut self, clean: bool) {
        if self.done {
            return;
        }
        self.done = true;
        let up = self.up.get();
        up.finished(self.peer, clean && !self.failed);
        if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
            a.response_ms = Some(self.t0.elapsed().as_millis() as u64);
        }
        if let Some(c) = self.conn.take()
            && clean
            && self.reusable
            && self.buf.is_empty()
            && !matches!(self.framing, Framing::Close)
        {
            up.release(self.peer, c);
        }
    }

    fn premature(&mut self, e: io::Error) -> io::Error {
        let msg = if e.kind() == ErrorKind::TimedOut {
            "upstream timed out (110: Connection timed out) while reading upstream".to_string()
        } else if e.kind() == ErrorKind::UnexpectedEof {
            "upstream prematurely closed connection while reading upstream".to_string()
        } else {
            format!(
                "{} while reading upstream",
                crate::core::errlog::errno_text(&e)
            )
        };
        crate::error_log!(
            Error,
            "{msg}, upstream: \"{}\"",
            self.up.get().addr_name(self.peer)
        );
        self.conn = None;
        self.end(false);
        e
    }

    async fn fill(&mut self) -> io::Result<usize> {
        let Some(c) = &self.conn else {
            return Ok(0);
        };
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(PIECE);
        }
        read_some(c, &mut self.buf, self.timeout).await
    }

    /// The next piece if it can be had without reading (`None`: read first).
    fn at_hand(&mut self) -> Option<io::Result<Option<Bytes>>> {
        if self.done {
            return Some(Ok(None));
        }
        match self.framing {
            Framing::None => {
                self.end(true);
                Some(Ok(None))
            }
            Framing::Length(_) => {
                if self.left == 0 {
                    self.end(true);
                    return Some(Ok(None));
                }
                if self.buf.is_empty() {
                    return None;
                }
                let take = (self.buf.len() as u64).min(self.left) as usize;
                self.left -= take as u64;
                let piece = self.buf.split_to(take).freeze();
                if self.left == 0 {
                    self.end(true);
                }
                Some(Ok(Some(piece)))
            }
            Framing::Chunked => match self.dec.decode(&mut self.buf) {
                Ok(Chunk::Data(d)) => Some(Ok(Some(d))),
                Ok(Chunk::Done) => {
                    self.end(true);
                    Some(Ok(None))
                }
                Ok(Chunk::NeedMore) => None,
                Err(_) => {
                    crate::error_log!(
                        Error,
                        "upstream sent invalid chunked response while reading upstream, upstream: \"{}\"",
                        self.up.get().addr_name(self.peer)
                    );
                    self.conn = None;
                    self.end(false);
                    Some(Err(io::Error::new(
                        ErrorKind::InvalidData,
                        "upstream sent invalid chunked response",
                    )))
                }
            },
            Framing::Close => (!self.buf.is_empty()).then(|| Ok(Some(self.buf.split().freeze()))),
        }
    }

    async fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            if let Some(r) = self.at_hand() {
                return r;
            }
            match self.fill().await {
                Ok(0) if matches!(self.framing, Framing::Close) => {
                    self.conn = None;
                    self.end(true);
                    return Ok(None);
                }
                Ok(0) => {
                    return Err(self.premature(io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "upstream prematurely closed connection",
                    )));
                }
                Ok(_) => {}
                Err(e) => return Err(self.premature(e)),
            }
        }
    }
}

impl BodyStream for UpstreamBody {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(async move {
            let r = self.next_piece().await;
            self.count(&r);
            r
        })
    }

    fn unbuffered(&self) -> bool {
        self.unbuffered
    }

    fn ready(&mut self) -> Option<io::Result<Option<Bytes>>> {
        let r = self.at_hand()?;
        self.count(&r);
        Some(r)
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        // The client went away (or HEAD): not the peer's fault; the
        // connection is not reusable mid-body.
        if !self.done {
            self.conn = None;
            self.end(true);
        }
        keep_buffer(std::mem::take(&mut self.buf));
    }
}

/// Read buffers kept per worker for the next replies.
const SPARE_BUFFERS: usize = 8;

thread_local! {
    static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// A read buffer for a reply: a kept one when there is one. A request
/// allocating (and freeing) its own 32 KB buffer costs more than the rest of
/// its allocations together (jemalloc refills and flushes its caches).
fn spare_buffer() -> BytesMut {
    SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default()
}

/// Keep a reply's read buffer for another reply. Pieces of the body split off
/// it may still be on their way to the client: once they are gone, `reserve`
/// finds the whole allocation free again and takes it back without copying.
fn keep_buffer(mut buf: BytesMut) {
    if buf.capacity() == 0 {
        return;
    }
    buf.clear();
    SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARE_BUFFERS {
            s.push(buf);
        }
    });
}

/// A 101 reply's body: hands the tunnel to the client connection.
#[derive(Debug)]
struct Upgrade(Option<Tunnel>);

impl BodyStream for Upgrade {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(async { Ok(None) })
    }
    fn upgrade(&mut self) -> Option<Box<dyn crate::core::message::response::Tunnel>> {
        self.0
            .take()
            .map(|t| Box::new(t) as Box<dyn crate::core::message::response::Tunnel>)
    }
}

/// Relays bytes between the client and the upstream after a 101, both
/// ways, with one buffer per direction (a side is read only when what it
/// sent before has been written: backpressure), until either side closes
/// or nothing moves for `idle`.
#[derive(Debug)]
struct Tunnel {
    conn: UpConn,
    /// Upstream bytes after the 101 head.
    pending: BytesMut,
    idle: Duration,
}

impl crate::core::message::response::Tunnel for Tunnel {
    fn run<'a>(self: Box<Self>, client: &'a dyn ClientIo, pending: BytesMut) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Tunnel {
                conn,
                pending: mut to_client,
                idle,
            } = *self;
            let mut to_up = pending;
            let (mut c_eof, mut u_eof) = (false, false);
            loop {
                let mut moved = false;
                if !to_up.is_empty() {
                    match conn.try_write(&to_up) {
                        Ok(n) => {
                            let _ = to_up.split_to(n);
                            moved = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => return,
                    }
                }
                if !to_client.is_empty() {
                    match client.try_write(&to_client) {
                        Ok(n) => {
                            let _ = to_client.split_to(n);
                            moved = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => return,
                    }
                }
                // Bytes the client connection queued itself (TLS records).
                let queued = match client.try_flush() {
                    Ok(()) => false,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => true,
                    Err(_) => return,
                };
                if to_up.is_empty() && !c_eof {
                    to_up.reserve(16 * 1024);
                    match client.try_read(&mut to_up) {
                        Ok(0) => {
                            c_eof = true;
                            conn.shutdown_write();
                        }
                        Ok(_) => moved = true,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => return,
                    }
                }
                if to_client.is_empty() && !u_eof {
                    to_client.reserve(16 * 1024);
                    match conn.try_read_buf(&mut to_client) {
                        Ok(0) => u_eof = true,
                        Ok(_) => moved = true,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(_) => return,
                    }
                }
                if u_eof && to_client.is_empty() && !queued {
                    // The upstream is done and everything it said was delivered.
                    return;
                }
                if c_eof && u_eof {
                    return;
                }
                if moved {
                    continue;
                }
                let wait = async {
                    tokio::select! {
                        r = client.readable(), if to_up.is_empty() && !c_eof => r,
                        r = conn.readable(), if to_client.is_empty() && !u_eof => r,
                        r = conn.writable(), if !to_up.is_empty() => r,
                        r = client.writable(), if !to_client.is_empty() || queued => r,
                    }
                };
                match tokio::time::timeout(idle, wait).await {
                    Ok(Ok(())) => {}
                    _ => return,
                }
            }
        })
    }
}

/// `proxy_pass` and its settings, `$proxy_host`, `$proxy_port`,
/// `$proxy_add_x_forwarded_for`.
pub static MODULE: Module = Module {
    name: "proxy",
    nginx_default: &["http_proxy_module"],
    directives: &[conf::DIRECTIVES, conf::IGNORED],
    settings: Some(&conf::ProxyConf::KIND),
    variables: &[
        VarDef::name("proxy_host", |req, _, out| {
            if let Some(u) = upstream::vars(req) {
                out.extend_from_slice(u.borrow().proxy_host.as_bytes());
            }
        }),
        VarDef::name("proxy_port", |req, _, out| {
            if let Some(u) = upstream::vars(req) {
                out.extend_from_slice(u.borrow().proxy_port.as_bytes());
            }
        }),
        VarDef::name("proxy_add_x_forwarded_for", |req, _, out| {
            for (_, x) in req
                .head
                .headers()
                .filter(|(n, _)| n.eq_ignore_ascii_case(b"x-forwarded-for"))
            {
                out.extend_from_slice(x);
                out.extend_from_slice(b", ");
            }
            use crate::core::vars::VarSource;
            req.var(&crate::core::vars::Var::RemoteAddr, out);
        }),
    ],
    ..Module::EMPTY
};
