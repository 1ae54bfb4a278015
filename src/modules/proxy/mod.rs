//! Reverse proxy (`proxy_pass`): forwards the request to a peer of an
//! upstream over HTTP/1.x (or HTTP/2 with `proxy_http_version 2`, see
//! `h2.rs`) and streams the reply back.
//!
//! - The request sent is re-framed from what vireo parsed: hop-by-hop
//!   headers (and those the client's Connection header names) are dropped,
//!   the body goes with Content-Length when its length is known, chunked
//!   otherwise (HTTP/1.1), or held and measured for an HTTP/1.0 upstream.
//! - With `proxy_request_buffering on` (the default) the request body is
//!   read whole before the first attempt (`client_body::read_all`: in memory
//!   up to client_body_buffer_size, else in a temporary file) and sent with
//!   Content-Length, so another peer can be tried (`proxy_next_upstream`).
//!   With `off` it streams from the client to the upstream as it arrives
//!   (chunked when its length is unknown and the upstream speaks HTTP/1.1;
//!   what is at hand goes in one write), on a fresh connection, and an
//!   attempt is repeated only when nothing was sent.
//! - The reply head is parsed strictly (`upstream::response`); its body is a
//!   `Body::Stream` the client connection pulls piece by piece, so one buffer
//!   per request bounds memory whatever `proxy_buffering` says.
//! - `https://` upstreams: the same exchange over TLS (`upstream::tls`, with
//!   the client and name of [`tls_conf::dial`]); pooled keep-alive connections
//!   keep their TLS session.
//! - A 101 reply to a request that asked for an Upgrade becomes a tunnel
//!   (see [`Tunnel`]); nothing the client sends after its head reaches the
//!   upstream before that 101.

pub mod conf;
mod h2;
pub mod ssl;

use crate::core::message::head::{BodyFraming, Method, Version};
use crate::core::message::response::{Body, BodyStream, ClientIo, CutShort, Response, Value};
use crate::core::module::{Hooks, Module, VarDef};
use crate::core::request::{BodyError, BoxFuture, Content, Outcome, Request, RequestBody};
use crate::core::spare::Spares;
use crate::http::h1::chunked::{Chunk, ChunkedDecoder};
use crate::modules::client_body::{self, Plan};
use crate::upstream::driver::{self, Dial, Failure, Gave, Policy, Protocol, Try};
use crate::upstream::dynamic::Blocks;
use crate::upstream::fields::{
    self, Passed, escape, intercepted, is_hop_or_framing, passed_header,
};
use crate::upstream::h2::{Ask, Over};
use crate::upstream::io::{read_some, wait_readable, write_all, write_vectored};
use crate::upstream::next::NextUpstream;
use crate::upstream::response::{self as upresp, Framing, UpstreamHead};
use crate::upstream::tls_conf::{self, SslConf};
use crate::upstream::{self, UpConn, Upstream, UpstreamRef, UpstreamVars};
use bytes::{Bytes, BytesMut};
use conf::{CookieName, ProxyConf, Redirect, RedirectFrom};
use std::borrow::Cow;
use std::cell::RefCell;
use std::future::Future;
use std::io::{self, ErrorKind, IoSlice};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest piece read from the upstream at once.
const PIECE: usize = 64 * 1024;

/// The first read of a reply: its head and, for a small reply, all its body,
/// so that head and body leave for the client in one write.
const FIRST_READ: usize = 32 * 1024;

/// The `proxy_pass` handler of one location.
#[derive(Debug)]
pub struct Proxy {
    /// The upstream, or with variables in the URL, how to find it.
    target: Target,
    /// `https://`: TLS to the upstream.
    tls: bool,
    /// `$proxy_host`, `$proxy_port` (shared with each request's `UpstreamVars`).
    host: Arc<str>,
    port: Arc<str>,
    /// The name a TLS upstream's certificate is checked against by default.
    ssl_name: String,
    /// The URI part of the proxy_pass URL.
    uri: Option<Vec<u8>>,
    /// `proxy_redirect default`: (proxy_pass URL, location prefix).
    default_redirect: Option<(String, String)>,
}

/// A proxy_pass URL: fixed, or with variables.
#[derive(Debug)]
pub enum Target {
    Fixed(UpstreamRef),
    /// The URL template and the upstream blocks its host may name.
    Dynamic(crate::core::vars::Template, Blocks),
}

/// Where one request goes.
struct Dest<'a> {
    up: Arc<Upstream>,
    /// `$proxy_host` (the Host sent), `$proxy_port`.
    host: Arc<str>,
    port: Arc<str>,
    /// `https`, and the default name for the peer's certificate.
    tls: bool,
    ssl_name: Cow<'a, str>,
    /// The URI part of the URL.
    uri: Option<Cow<'a, [u8]>>,
    /// The URI part came from variables: it is sent as it is, in place of
    /// the request's URI and arguments (nginx).
    whole: bool,
}

/// `http://authority[/uri]` past its scheme → (authority, URI part);
/// `unix:/path[:/uri]` for a unix socket.
pub(crate) fn split_url(rest: &str) -> (&str, Option<&str>) {
    if let Some(path) = rest.strip_prefix("unix:") {
        match path.find(":/") {
            Some(i) => (&rest[..5 + i], Some(&path[i + 1..])),
            None => (rest, None),
        }
    } else {
        match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        }
    }
}

/// `http://` or `https://` (caseless) → (TLS, what follows).
pub(crate) fn scheme(url: &str) -> Option<(bool, &str)> {
    let prefix = |p: &str| {
        url.get(..p.len())
            .filter(|s| s.eq_ignore_ascii_case(p))
            .map(|_| &url[p.len()..])
    };
    prefix("http://")
        .map(|r| (false, r))
        .or_else(|| prefix("https://").map(|r| (true, r)))
}

/// The host of an authority without its port (nor brackets): the name a
/// TLS peer's certificate is checked against by default.
pub(crate) fn ssl_host(authority: &str) -> &str {
    match crate::upstream::conf::split_host_port(authority, 443) {
        Ok((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        Err(_) => authority,
    }
}

/// `$proxy_host` and `$proxy_port` of an authority: a port other than the
/// scheme's `default` stays in the host; a unix socket is `localhost`.
pub(crate) fn host_port(authority: &str, default: u16) -> Result<(String, String), String> {
    if authority.starts_with("unix:") {
        return Ok(("localhost".to_string(), String::new()));
    }
    let (h, p) = crate::upstream::conf::split_host_port(authority, default)?;
    let host = if authority.contains(':') && !authority.ends_with(']') && p != default {
        authority.to_string()
    } else {
        h.to_string()
    };
    Ok((host, p.to_string()))
}

impl Proxy {
    /// A request in a location with `proxy_cache`: a hit is answered from
    /// the cache; the fetch, a future of its own, is made only on a miss
    /// (so a hit does not carry its state).
    async fn cached(&self, req: &mut Request<'_>, body: &mut dyn RequestBody) -> Outcome {
        use crate::modules::cache::{self, Lookup, conf::Proxy as Cached};
        // `$proxy_host` for the cache key.
        let host = self.cache_host(req);
        req.state.ext.insert(Rc::new(RefCell::new(UpstreamVars {
            proxy_host: host.into(),
            proxy_port: self.port.clone(),
            ..Default::default()
        })));
        match cache::lookup::<Cached>(req, |r| Some(self.cache_key(r))).await {
            Lookup::Serve(resp) => Outcome::Respond(resp),
            Lookup::Fetch(fill) => Box::pin(self.fetch(req, body, fill)).await,
        }
    }

    /// The reply from the upstream (or where its X-Accel-Redirect sends the
    /// request), stored in the cache when `fill` says so, else cut to the
    /// client's byte ranges.
    async fn fetch(
        &self,
        req: &mut Request<'_>,
        body: &mut dyn RequestBody,
        fill: Option<crate::modules::cache::Fill<crate::modules::cache::conf::Proxy>>,
    ) -> Outcome {
        let mut resp = self.handle(req, body).await;
        if let Some(o) = crate::upstream::accel::from_reply(req, resp.status) {
            return o;
        }
        let pc = req.conf.get::<ProxyConf>();
        crate::upstream::store::apply(req, pc.store.as_deref(), pc.store_access, &mut resp);
        Outcome::Respond(match fill {
            Some(f) => f.store(req, resp).await,
            None => crate::modules::static_files::range::of_reply(req, resp, false),
        })
    }

    /// `$proxy_host` before the upstream is chosen: the URL's host, rendered
    /// when it has variables.
    fn cache_host(&self, req: &Request<'_>) -> String {
        let Target::Dynamic(t, _) = &self.target else {
            return self.host.to_string();
        };
        let mut v = Vec::new();
        t.render(req, &mut v);
        let url = String::from_utf8_lossy(&v);
        let (rest, port) = match url.get(..8) {
            Some(s) if s.eq_ignore_ascii_case("https://") => (&url[8..], 443),
            _ => (url.get(7..).unwrap_or_default(), 80),
        };
        host_port(split_url(rest).0, port).map_or_else(|_| rest.to_string(), |(h, _)| h)
    }

    /// The default cache key, `$scheme$proxy_host$request_uri`.
    fn cache_key(&self, req: &Request<'_>) -> Vec<u8> {
        let host = self.cache_host(req);
        let mut k = Vec::with_capacity(64);
        k.extend_from_slice(req.scheme().as_bytes());
        k.extend_from_slice(host.as_bytes());
        k.extend_from_slice(req.request_uri());
        k
    }

    /// Where this request goes: for a URL with variables, its value's
    /// upstream block, address or resolved host (`Err`: the status).
    async fn dest(&self, req: &Request<'_>) -> Result<Dest<'_>, u16> {
        let (t, blocks) = match &self.target {
            Target::Fixed(up) => {
                return Ok(Dest {
                    up: up.arc().clone(),
                    host: self.host.clone(),
                    port: self.port.clone(),
                    tls: self.tls,
                    ssl_name: Cow::Borrowed(&self.ssl_name),
                    uri: self.uri.as_deref().map(Cow::Borrowed),
                    whole: false,
                });
            }
            Target::Dynamic(t, blocks) => (t, blocks),
        };
        let mut v = Vec::new();
        t.render(req, &mut v);
        let url = String::from_utf8_lossy(&v);
        let Some((tls, rest)) = scheme(&url) else {
            crate::error_log!(
                Error,
                "invalid URL prefix in \"{url}\"{}",
                req.log_context()
            );
            return Err(500);
        };
        let (authority, uri) = split_url(rest);
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = match host_port(authority, default_port) {
            Ok(hp) => hp,
            Err(e) => {
                crate::error_log!(Error, "{e} in upstream \"{rest}\"{}", req.log_context());
                return Err(502);
            }
        };
        // Boxed: a name to resolve holds state that a fixed upstream's
        // requests would otherwise carry (and move) in their futures.
        let up = Box::pin(blocks.find_with_port(req, authority, default_port))
            .await
            .map_err(|_| 502u16)?;
        let uri = uri.map(|u| {
            let mut b = Vec::with_capacity(u.len() + 1);
            if u.starts_with('?') {
                b.push(b'/');
            }
            b.extend_from_slice(u.as_bytes());
            Cow::Owned(b)
        });
        Ok(Dest {
            up,
            host: host.into(),
            port: port.into(),
            tls,
            ssl_name: Cow::Owned(ssl_host(authority).to_string()),
            whole: uri.is_some(),
            uri,
        })
    }
}

impl Content for Proxy {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        use crate::modules::cache::{self, conf::Proxy as Cached};
        use crate::modules::static_files::range;
        if req.conf.get::<ProxyConf>().force_ranges {
            req.state.ext.insert(Rc::new(range::Forced));
        }
        if cache::enabled::<Cached>(req) {
            crate::core::request::boxed(|| self.cached(req, body))
        } else {
            crate::core::request::boxed(|| self.fetch(req, body, None))
        }
    }

    fn auto_redirect(&self) -> bool {
        true
    }
}

/// `proxy_limit_rate`: the reply's body read no faster than it says.
fn limit_rate(req: &Request<'_>, pc: &ProxyConf, resp: &mut Response) {
    let Some(t) = &pc.limit_rate else { return };
    let mut v = Vec::new();
    t.render(req, &mut v);
    match std::str::from_utf8(&v)
        .ok()
        .and_then(crate::conf::values::parse_size)
    {
        Some(0) => {}
        Some(rate) => crate::modules::limit_rate::throttle(resp, rate, 0),
        None => crate::error_log!(
            Error,
            "invalid proxy_limit_rate \"{}\"{}",
            String::from_utf8_lossy(&v),
            req.log_context()
        ),
    }
}

/// A failed attempt; a reply whose status failed carries the response.
type Fail = Failure<Response>;

fn fail(kind: NextUpstream, code: u16, msg: impl Into<String>) -> Fail {
    Failure::new(kind, code, msg)
}

fn io_fail(e: &io::Error, while_: &str) -> Fail {
    Failure::io(e, while_)
}

/// The Content-Length the request goes with (`None`: a streamed body of
/// unknown length, chunked over HTTP/1.1).
fn body_len(req: &Request<'_>, pc: &ProxyConf, plan: &Plan, declared: Option<u64>) -> Option<u64> {
    match plan {
        Plan::None => {
            (pc.pass_request_body && req.head.framing == BodyFraming::Length(0)).then_some(0)
        }
        Plan::Held(b) => Some(b.len),
        Plan::Stream => declared,
    }
}

impl Proxy {
    async fn handle(&self, req: &mut Request<'_>, body: &mut dyn RequestBody) -> Response {
        let pc = req.conf.get::<ProxyConf>();
        // The body: read whole (buffered), or streamed when request buffering
        // is off and the upstream can take it as it comes (a body of unknown
        // length needs HTTP/1.1's chunked framing, or HTTP/2).
        let has_body = pc.pass_request_body && req.head.framing != BodyFraming::None;
        let declared = body.declared_len();
        let streamed =
            !pc.request_buffering && pc.set_body.is_none() && client_body::held(req).is_none();
        if has_body && streamed && (declared.is_some() || pc.http_version != Version::Http10) {
            let mut tee = client_body::Tee::new(req, body);
            let resp = self.proxy(req, &mut tee, Plan::Stream).await;
            tee.finish(req);
            return resp;
        }
        let plan = if has_body {
            match client_body::read_all(req, body).await {
                Ok(b) => Plan::Held(b),
                Err(status) => return req.error(status),
            }
        } else {
            Plan::None
        };
        // proxy_set_body: the client's body was read (`$request_body`); this
        // one goes instead.
        let plan = match &pc.set_body {
            Some(t) => {
                let mut v = Vec::new();
                t.render(req, &mut v);
                Plan::Held(Rc::new(client_body::Buffered {
                    len: v.len() as u64,
                    mem: vec![Bytes::from(v)],
                    file: None,
                }))
            }
            None => plan,
        };
        self.proxy(req, body, plan).await
    }

    async fn proxy(
        &self,
        req: &mut Request<'_>,
        body: &mut dyn RequestBody,
        plan: Plan,
    ) -> Response {
        let conf = req.conf;
        let pc = conf.get::<ProxyConf>();
        req.state.ignore_client_abort = pc.ignore_client_abort;
        let dest = match self.dest(req).await {
            Ok(d) => d,
            Err(status) => return req.error(status),
        };
        let vars = UpstreamVars {
            proxy_host: dest.host.clone(),
            proxy_port: dest.port.clone(),
            ..Default::default()
        }
        .attach(req);
        let uri = self.upstream_uri(req, &dest);
        let h2 = pc.http_version == Version::Http2;
        let dial = match dest.tls {
            true => {
                // HTTP/2 is asked for by ALPN.
                let alpn: &[&[u8]] = if h2 { &[b"h2"] } else { &[] };
                let sc = req.conf.get::<SslConf<ssl::Https>>();
                match tls_conf::dial_alpn(req, sc, &dest.ssl_name, alpn) {
                    Ok(d) => Some(d),
                    Err(()) => return req.error(502),
                }
            }
            false => None,
        };
        let scheme = if dest.tls { "https" } else { "http" };
        let len = body_len(req, pc, &plan, body.declared_len());
        // proxy_bind: from that address, on a connection of its own.
        let bind = pc.bind.as_ref().and_then(|b| b.local(req, "proxy_bind"));
        let streamed = matches!(plan, Plan::Stream);
        let policy = Policy {
            next_upstream: pc.next_upstream,
            tries: pc.next_upstream_tries,
            timeout: pc.next_upstream_timeout,
            connect_timeout: pc.connect_timeout,
            streamed,
        };
        let mut dial = Dial {
            tls: dial.as_ref(),
            bind,
            // HTTP/2 sessions are kept by the HTTP/2 client, not in the
            // connection pool: a new connection is the request's own.
            own: h2,
            keepalive: pc.socket_keepalive,
        };
        if h2 {
            let call = match self::h2::call(self, req, pc, &dest, &uri, len) {
                Ok(c) => c,
                Err(msg) => {
                    crate::error_log!(Error, "{msg}{}", req.log_context());
                    return req.error(500);
                }
            };
            let ex = Over(self::h2::Exchange {
                proxy: self,
                pc,
                uri: &uri,
                ask: Ask {
                    call: &call,
                    plan: &plan,
                    scheme,
                    tag: dial.tls.map_or(0, |d| d.tag),
                    send_timeout: pc.send_timeout,
                    read_timeout: pc.read_timeout,
                    buffer_size: pc.buffer_size,
                    watch: !pc.ignore_client_abort,
                },
            });
            return match driver::run(&ex, req, &dest.up, body, &policy, &dial, &vars).await {
                Ok(resp) | Err(resp) => resp,
            };
        }
        let (head, upgrade) = self.request_head(req, pc, &dest, &uri, &plan, len);
        // A streamed body cannot be sent twice: it goes on a fresh connection.
        dial.own = streamed || upgrade || bind.is_some();
        let ex = Exchange {
            proxy: self,
            pc,
            scheme,
            uri: &uri,
            head: &head,
            plan: &plan,
            upgrade,
        };
        match driver::run(&ex, req, &dest.up, body, &policy, &dial, &vars).await {
            Ok(resp) | Err(resp) => resp,
        }
    }
}

/// One request's exchange with a peer: the head to send, its body, where it goes.
struct Exchange<'a> {
    proxy: &'a Proxy,
    pc: &'a ProxyConf,
    scheme: &'static str,
    uri: &'a [u8],
    head: &'a [u8],
    plan: &'a Plan,
    upgrade: bool,
}

impl Protocol for Exchange<'_> {
    type Reply = Response;

    fn scheme(&self) -> &str {
        self.scheme
    }

    fn upstream_name(&self, addr: &str, out: &mut String) {
        out.push_str(self.scheme);
        out.push_str("://");
        out.push_str(addr);
        out.push_str(&String::from_utf8_lossy(self.uri));
    }

    /// Send, read the reply head, build the response.
    fn exchange<'a>(
        &'a self,
        req: &'a Request<'_>,
        at: &'a Try<'_>,
        conn: UpConn,
        body: &'a mut dyn RequestBody,
    ) -> impl Future<Output = Result<Response, Gave<Response>>> + 'a {
        self.proxy.attempt(req, self, at, conn, body)
    }
}

impl Proxy {
    /// One attempt on a connected peer: send, read the reply head, build the response.
    async fn attempt(
        &self,
        req: &Request<'_>,
        ex: &Exchange<'_>,
        at: &Try<'_>,
        conn: UpConn,
        body: &mut dyn RequestBody,
    ) -> Result<Response, Gave<Response>> {
        let (pc, plan, upgrade) = (ex.pc, ex.plan, ex.upgrade);
        let (up, peer, vars, t0) = (at.up, at.peer, at.vars, at.t0);
        let streamed = matches!(plan, Plan::Stream);
        let is_head = *self.method(req, pc) == *b"HEAD";
        let hints = crate::modules::early_hints::enabled(req);
        let mut buf = BytesMut::new();
        let watch = !pc.ignore_client_abort;
        // A streamed body is sent before the wait is watched (below).
        // Pinned where it is made: the wait holds a reference, not a copy.
        let r = {
            let exchange =
                std::pin::pin!(self.exchange(&conn, pc, ex.head, plan, (is_head, hints), &mut buf));
            upstream::unless_client_leaves(watch && !streamed, body, exchange).await
        }
        .ok_or(Gave::Left)?;
        let mut h = match r {
            Ok(h) => h,
            // A kept-alive connection the peer closed meanwhile (the driver
            // tries once more on a new one).
            Err(Retry::Stale) => {
                let mut f = fail(
                    NextUpstream::ERROR,
                    502,
                    "upstream prematurely closed connection while reading response header from upstream",
                );
                f.stale = true;
                return Err(f.into());
            }
            Err(Retry::Fail(f)) => return Err(f.into()),
            Err(Retry::Body) => {
                // Streamed body: send it, then read the head (chunked when
                // its length is unknown).
                let chunked = body.declared_len().is_none();
                self.send_stream(&conn, pc, body, chunked, ex.head).await?;
                let wait = self.read_head(&conn, pc, (is_head, hints), &mut buf);
                upstream::unless_client_leaves(watch, body, wait)
                    .await
                    .ok_or(Gave::Left)??
            }
        };
        // Early hints (`early_hints`) go to the client with the fields the
        // reply would pass; the reply follows.
        while h.status == 103 {
            body.early_hints(&self.response(req, pc, &h).headers).await;
            let wait = self.read_head(&conn, pc, (is_head, hints), &mut buf);
            h = upstream::unless_client_leaves(watch, body, wait)
                .await
                .ok_or(Gave::Left)??;
        }
        at.head_read(&conn);
        if h.upgrade && !upgrade && req.head.version.multiplexed() {
            return Err(fail(
                NextUpstream::INVALID_HEADER,
                502,
                "upstream sent unexpected 101 while reading response header from upstream",
            )
            .into());
        }
        let unbuffered = !crate::upstream::buffering(pc.buffering, h.header("x-accel-buffering"));
        crate::modules::cache::origin(req, h.status, h.headers());
        let resp = self.response(req, pc, &h);
        // The fields' values live on in the response; their spans serve $upstream_http_*.
        vars.borrow_mut().head = Some((h.text.clone(), std::mem::take(&mut h.fields)));
        if let Some(kind) = at.status_fails(h.status) {
            // 403 and 404 move on to the next peer without counting against
            // this one, as nginx.
            let failed = !matches!(h.status, 403 | 404);
            let r = self.finish_response(
                resp, conn, buf, &h, up, peer, vars, t0, pc, failed, unbuffered,
            );
            let mut f = fail(kind, h.status, String::new());
            f.reply = Some(intercepted(req, pc.intercept_errors, &r).unwrap_or(r));
            return Err(f.into());
        }
        if let Some(e) = intercepted(req, pc.intercept_errors, &resp) {
            up.finished(peer, true);
            return Ok(e);
        }
        if h.upgrade && !upgrade {
            // A 101 the client did not ask for goes on as a head without a
            // body (what nginx's client sees); the connection then closes.
            vars.borrow_mut().attempts.last_mut().unwrap().status = 101;
            up.finished(peer, true);
            drop(conn);
            return Ok(resp);
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
        let mut resp = self.finish_response(
            resp, conn, buf, &h, up, peer, vars, t0, pc, false, unbuffered,
        );
        limit_rate(req, pc, &mut resp);
        Ok(resp)
    }

    /// Write the head and a held body, then read the reply head.
    /// `Err(Retry::Body)` when a streamed body has to go first.
    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &self,
        conn: &UpConn,
        pc: &ProxyConf,
        head: &[u8],
        plan: &Plan,
        kind: (bool, bool),
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
            Plan::Held(b) if b.file.is_none() && b.mem.len() < 64 => {
                let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(b.mem.len() + 1);
                slices.push(IoSlice::new(head));
                slices.extend(b.mem.iter().map(|p| IoSlice::new(p)));
                write_vectored(conn, &slices, pc.send_timeout)
                    .await
                    .map_err(stale)?;
            }
            Plan::Held(b) => {
                // From the temporary file (or many pieces): a piece at a time.
                write_all(conn, head, pc.send_timeout)
                    .await
                    .map_err(stale)?;
                let mut off = 0;
                loop {
                    let piece = b
                        .piece_at(off)
                        .map_err(|e| Retry::Fail(Failure::body_file(&e)))?;
                    let Some(piece) = piece else { break };
                    off += piece.len() as u64;
                    write_all(conn, &piece, pc.send_timeout)
                        .await
                        .map_err(|e| Retry::Fail(io_fail(&e, "sending request to upstream")))?;
                }
            }
            Plan::None => write_all(conn, head, pc.send_timeout)
                .await
                .map_err(stale)?,
            // The head goes with the streamed body (`send_stream`).
            Plan::Stream => return Err(Retry::Body),
        }
        match self.read_head(conn, pc, kind, buf).await {
            Ok(h) => Ok(h),
            Err(f) if f.kind == NextUpstream::ERROR && buf.is_empty() => Err(Retry::Stale),
            Err(f) => Err(Retry::Fail(f)),
        }
    }

    /// Send the head, then stream the client's body to the upstream
    /// (`chunked`: with chunked framing). Each write carries what the client
    /// had sent so far (up to [`PIECE`] bytes) as one chunk: the head goes
    /// with what was read with the request, the last chunk with the
    /// terminator.
    async fn send_stream(
        &self,
        conn: &UpConn,
        pc: &ProxyConf,
        body: &mut dyn RequestBody,
        chunked: bool,
        head: &[u8],
    ) -> Result<(), Fail> {
        // Not the peer's fault: no next upstream, no failure counted.
        let client_fail =
            |e: BodyError| fail(NextUpstream::OFF, e.status(), "client request body failed");
        let mut head = Some(head);
        let mut next = None;
        loop {
            let mut pieces = Vec::new();
            let mut n = 0;
            let mut end = false;
            if head.is_none() {
                let first = match next.take() {
                    Some(r) => r,
                    None => body.chunk().await,
                };
                match first.map_err(client_fail)? {
                    Some(p) => {
                        n = p.len();
                        pieces.push(p);
                    }
                    None => end = true,
                }
            }
            while !end && next.is_none() && n < PIECE {
                match client_body::now_or_never(body.chunk()) {
                    None => break,
                    Some(Ok(Some(p))) => {
                        n += p.len();
                        pieces.push(p);
                    }
                    Some(Ok(None)) => end = true,
                    Some(Err(e)) => next = Some(Err(e)),
                }
            }
            let size = format!("{n:x}\r\n");
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(pieces.len() + 4);
            if let Some(h) = head.take() {
                slices.push(IoSlice::new(h));
            }
            if chunked && n > 0 {
                slices.push(IoSlice::new(size.as_bytes()));
            }
            slices.extend(
                pieces
                    .iter()
                    .filter(|p| !p.is_empty())
                    .map(|p| IoSlice::new(p)),
            );
            if chunked && n > 0 {
                slices.push(IoSlice::new(b"\r\n"));
            }
            if chunked && end {
                slices.push(IoSlice::new(b"0\r\n\r\n"));
            }
            if !slices.is_empty() {
                write_vectored(conn, &slices, pc.send_timeout)
                    .await
                    .map_err(|e| io_fail(&e, "sending request to upstream"))?;
            }
            if end {
                return Ok(());
            }
        }
    }

    /// The reply's next head (`(is_head, hints)`: the request was HEAD;
    /// a 103 is returned, for `early_hints`).
    async fn read_head(
        &self,
        conn: &UpConn,
        pc: &ProxyConf,
        (is_head, hints): (bool, bool),
        buf: &mut BytesMut,
    ) -> Result<UpstreamHead, Fail> {
        const WHILE: &str = "reading response header from upstream";
        loop {
            if !buf.is_empty() {
                match upresp::parse(buf, pc.buffer_size, is_head, hints) {
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
        up: &Arc<Upstream>,
        peer: usize,
        vars: &Rc<RefCell<UpstreamVars>>,
        t0: Instant,
        pc: &ProxyConf,
        failed: bool,
        unbuffered: bool,
    ) -> Response {
        vars.borrow_mut().attempts.last_mut().unwrap().status = h.status;
        // Boxed as it is made: the 264-byte reader is not copied into its box.
        let mut stream = Box::new(UpstreamBody {
            conn: Some(conn),
            buf,
            framing: h.framing,
            left: match h.framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            dec: ChunkedDecoder::new(),
            timeout: pc.read_timeout,
            up: up.clone(),
            peer,
            reusable: h.reusable,
            vars: vars.clone(),
            t0,
            done: false,
            failed,
            unbuffered,
        });
        match h.framing {
            Framing::None | Framing::Length(0) => {
                let declared = h
                    .header("content-length")
                    .and_then(|v| v.trim().parse::<u64>().ok());
                stream.end(true);
                resp.body = match declared {
                    // HEAD: the length the upstream gave, no body.
                    Some(n) if n > 0 => Body::Stream {
                        stream,
                        len: Some(n),
                    },
                    _ => Body::Empty,
                };
            }
            Framing::Length(n) => {
                resp.body = Body::Stream {
                    stream,
                    len: Some(n),
                }
            }
            Framing::Chunked | Framing::Close => resp.body = Body::Stream { stream, len: None },
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
            own: None,
        };
        resp.own =
            fields::own_fields(|n| pc.pass_headers.iter().any(|p| p.eq_ignore_ascii_case(n)));
        for &(n, (va, vb)) in &h.fields {
            let (name, value) = (h.at(n), h.at((va, vb)));
            let is = |p: &String| name.eq_ignore_ascii_case(p);
            let kind = passed_header(name);
            if kind == Passed::ContentType {
                resp.content_type = Some(Value::Slice(h.text.clone(), va, vb));
                continue;
            }
            if fields::keep_own(&mut resp, kind, || Value::Slice(h.text.clone(), va, vb)) {
                continue;
            }
            if kind == Passed::Accel && name.eq_ignore_ascii_case("x-accel-charset") {
                // For the charset filter, passed on or not.
                resp.set_override_charset(Some(value.trim().into()));
            }
            let hidden = match kind {
                Passed::Not | Passed::Own(_) => true,
                Passed::Accel => !pc.pass_headers.iter().any(is),
                _ => false,
            };
            if hidden || pc.hide_headers.iter().any(is) {
                continue;
            }
            let changed = match kind {
                Passed::Location => {
                    self.redirect(req, pc, value)
                        .map(|o| match o.starts_with('/') {
                            true => format!("{}{o}", req.origin()),
                            false => o,
                        })
                }
                Passed::Refresh => value.to_ascii_lowercase().find("url=").and_then(|i| {
                    let url = self.redirect(req, pc, &value[i + 4..])?;
                    Some(format!("{}{url}", &value[..i + 4]))
                }),
                Passed::SetCookie => {
                    let v = rewrite_cookie(pc, value);
                    cookie_flags(req, pc, v.as_deref().unwrap_or(value)).or(v)
                }
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
        let render = |t: &crate::core::vars::Template| {
            let mut o = Vec::new();
            t.render(req, &mut o);
            String::from_utf8_lossy(&o).into_owned()
        };
        match &pc.redirect {
            Redirect::Off => None,
            Redirect::Default => default(v),
            Redirect::List(list) => list.iter().find_map(|(from, to)| match from {
                RedirectFrom::Default => default(v),
                RedirectFrom::Prefix(f) => {
                    let f = match f.literal() {
                        Some(l) => String::from_utf8_lossy(l),
                        None => render(f).into(),
                    };
                    v.strip_prefix(&*f)
                        .map(|rest| format!("{}{rest}", render(to)))
                }
                RedirectFrom::Regex(re) => req.regex_exec(re, v.as_bytes()).then(|| render(to)),
            }),
        }
    }

    /// The URI sent upstream (path and arguments).
    fn upstream_uri<'r>(&self, req: &'r Request<'_>, dest: &Dest<'_>) -> Cow<'r, [u8]> {
        if dest.whole
            && let Some(u) = &dest.uri
        {
            return Cow::Owned(u.to_vec());
        }
        let Some(u) = dest.uri.as_deref() else {
            return fields::request_target(req);
        };
        let mut out = Vec::with_capacity(req.uri.len() + 16);
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
        fields::with_args(req, &mut out);
        Cow::Owned(out)
    }

    /// The method sent upstream: proxy_method's, else the request's (GET
    /// after an error_page redirect).
    fn method<'r>(&self, req: &'r Request<'_>, pc: &ProxyConf) -> std::borrow::Cow<'r, [u8]> {
        if let Some(t) = &pc.method {
            let mut m = Vec::new();
            t.render(req, &mut m);
            if !m.is_empty() {
                return m.into();
            }
        }
        match req.state.method {
            Some(Method::Get) => (&b"GET"[..]).into(),
            _ => req.head.method_bytes().into(),
        }
    }

    /// The fields the request goes with, in order, each to `emit`: Host
    /// (`$proxy_host`) and `Connection: close` unless proxy_set_header sets
    /// them, proxy_set_header's (an empty value sends none), a cache's
    /// revalidation fields, then the client's (with
    /// proxy_pass_request_headers) but hop-by-hop ones, those the client's
    /// Connection names, those proxy_set_header sets and those the cache
    /// drops. The body's framing is the caller's.
    fn fields(
        &self,
        req: &Request<'_>,
        pc: &ProxyConf,
        dest: &Dest<'_>,
        mut emit: impl FnMut(&[u8], &[u8]),
    ) {
        let user: &[(String, crate::core::vars::Template)] = &pc.set_headers;
        let set = |name: &[u8]| {
            user.iter()
                .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        };
        if !set(b"host") && !dest.host.is_empty() {
            emit(b"Host", dest.host.as_bytes());
        }
        if !set(b"connection") {
            emit(b"Connection", b"close");
        }
        let mut v = Vec::new();
        for (name, t) in user {
            v.clear();
            t.render(req, &mut v);
            if !v.is_empty() {
                emit(name.as_bytes(), &v);
            }
        }
        for (name, value) in crate::modules::cache::revalidation(req) {
            if !value.is_empty() {
                emit(name.as_bytes(), value.as_bytes());
            }
        }
        if pc.pass_request_headers {
            let named: Vec<&[u8]> = req
                .head
                .header("connection")
                .map(|c| c.split(|&b| b == b',').map(trim).collect())
                .unwrap_or_default();
            for (name, value) in req.head.headers() {
                if is_hop_or_framing(name)
                    || set(name)
                    || named.iter().any(|c| c.eq_ignore_ascii_case(name))
                    || crate::modules::cache::drops_header(req, name)
                {
                    continue;
                }
                emit(name, value);
            }
        }
    }

    /// The HTTP/1.x request head for the upstream (`len`: its
    /// Content-Length); true when it asks for an Upgrade.
    fn request_head(
        &self,
        req: &Request<'_>,
        pc: &ProxyConf,
        dest: &Dest<'_>,
        uri: &[u8],
        plan: &Plan,
        len: Option<u64>,
    ) -> (Vec<u8>, bool) {
        let mut h = Vec::with_capacity(512);
        h.extend_from_slice(&self.method(req, pc));
        h.push(b' ');
        h.extend_from_slice(uri);
        h.extend_from_slice(if pc.http_version == Version::Http11 {
            b" HTTP/1.1\r\n".as_slice()
        } else {
            b" HTTP/1.0\r\n"
        });
        let mut upgrade = false;
        self.fields(req, pc, dest, |name, value| {
            if name.eq_ignore_ascii_case(b"upgrade") {
                upgrade = true;
            }
            h.extend_from_slice(name);
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
        });
        match len {
            Some(n) => h.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes()),
            None if matches!(plan, Plan::Stream) => {
                h.extend_from_slice(b"Transfer-Encoding: chunked\r\n")
            }
            None => {}
        }
        h.extend_from_slice(b"\r\n");
        (h, upgrade)
    }
}

enum Retry {
    /// A reused connection was closed by the peer before it answered.
    Stale,
    Fail(Fail),
    /// A streamed body goes with the head.
    Body,
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

/// proxy_cookie_flags on one Set-Cookie value (`None`: no rule is for it).
fn cookie_flags(req: &Request<'_>, pc: &ProxyConf, v: &str) -> Option<String> {
    if pc.cookie_flags.is_empty() {
        return None;
    }
    let mut attrs = v.split(';');
    let first = attrs.next()?.trim();
    let name = first.split_once('=').map_or(first, |(n, _)| n).trim();
    let render = |t: &crate::core::vars::Template| {
        let mut o = Vec::new();
        t.render(req, &mut o);
        String::from_utf8_lossy(&o).to_ascii_lowercase()
    };
    let rule = pc.cookie_flags.iter().find(|r| match &r.cookie {
        CookieName::Name(t) => match t.literal() {
            Some(l) => l.eq_ignore_ascii_case(name.as_bytes()),
            None => render(t).eq_ignore_ascii_case(name),
        },
        CookieName::Regex(re) => req.regex_exec(re, name.as_bytes()),
    })?;
    // (attribute, set to) for each flag the rule names; `None` removes it.
    let (mut secure, mut httponly, mut samesite) = (None, None, None);
    for f in rule.flags.iter().map(render) {
        match f.as_str() {
            "secure" => secure = Some(true),
            "nosecure" => secure = Some(false),
            "httponly" => httponly = Some(true),
            "nohttponly" => httponly = Some(false),
            "nosamesite" => samesite = Some(None),
            "samesite=strict" => samesite = Some(Some("Strict")),
            "samesite=lax" => samesite = Some(Some("Lax")),
            "samesite=none" => samesite = Some(Some("None")),
            other => crate::error_log!(Error, "invalid proxy_cookie_flags flag \"{other}\""),
        }
    }
    let mut out = String::with_capacity(v.len() + 32);
    out.push_str(first);
    for a in attrs.map(str::trim).filter(|a| !a.is_empty()) {
        let key = a.split_once('=').map_or(a, |(k, _)| k).trim();
        let ruled = (key.eq_ignore_ascii_case("secure") && secure.is_some())
            || (key.eq_ignore_ascii_case("httponly") && httponly.is_some())
            || (key.eq_ignore_ascii_case("samesite") && samesite.is_some());
        if !ruled {
            out.push_str("; ");
            out.push_str(a);
        }
    }
    if secure == Some(true) {
        out.push_str("; Secure");
    }
    if httponly == Some(true) {
        out.push_str("; HttpOnly");
    }
    if let Some(Some(v)) = samesite {
        out.push_str("; SameSite=");
        out.push_str(v);
    }
    Some(out)
}

/// The upstream's response body, pulled by the client connection.
struct UpstreamBody {
    conn: Option<UpConn>,
    buf: BytesMut,
    framing: Framing,
    left: u64,
    dec: ChunkedDecoder,
    timeout: Duration,
    up: Arc<Upstream>,
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
            a.body += p.len() as u64;
        }
    }

    /// The body is over: account for the peer, pool the connection if clean.
    fn end(&mut self, clean: bool) {
        if self.done {
            return;
        }
        self.done = true;
        // One clock read for the figures, the time and the pool.
        let now = crate::core::clock::now();
        let up = &self.up;
        // Pooled before the attempt ends: a resolved peer that left keeps
        // its slot (and address) only until then.
        if let Some(c) = self.conn.take()
            && clean
            && self.reusable
            && self.buf.is_empty()
            && !matches!(self.framing, Framing::Close)
        {
            up.release_at(self.peer, c, now);
        }
        up.finished_at(self.peer, clean && !self.failed, now);
        if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
            a.response_ms = Some(now.saturating_duration_since(self.t0).as_millis() as u64);
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
            self.up.addr_name(self.peer)
        );
        self.conn = None;
        self.end(false);
        CutShort::wrap(e)
    }

    async fn fill(&mut self) -> io::Result<usize> {
        let Some(c) = &self.conn else {
            return Ok(0);
        };
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(PIECE);
        }
        let n = read_some(c, &mut self.buf, self.timeout).await?;
        if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
            a.received += n as u64;
        }
        Ok(n)
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
                        self.up.addr_name(self.peer)
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

thread_local! {
    /// Read buffers kept per worker for the next replies, at most 8.
    static SPARE: Spares<BytesMut> = const { Spares::new(8) };
}

/// A read buffer for a reply: a kept one when there is one. A request
/// allocating (and freeing) its own 32 KB buffer costs more than the rest of
/// its allocations together (jemalloc refills and flushes its caches).
fn spare_buffer() -> BytesMut {
    SPARE.with(|s| s.take()).unwrap_or_default()
}

/// Keep a reply's read buffer for another reply. Pieces of the body split off
/// it may still be on their way to the client: once they are gone, `reserve`
/// finds the whole allocation free again and takes it back without copying.
fn keep_buffer(mut buf: BytesMut) {
    if buf.capacity() == 0 {
        return;
    }
    buf.clear();
    // Not while the worker's thread-locals are torn down.
    let _ = SPARE.try_with(|s| s.keep(buf));
}

/// Let go of the read buffers a whole tick left unused (the module's tick).
fn trim_spares() {
    SPARE.with(|s| s.trim());
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
    directives: &[conf::DIRECTIVES, conf::COMMON, conf::IGNORED],
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
    hooks: Hooks {
        tick: Some(trim_spares),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
