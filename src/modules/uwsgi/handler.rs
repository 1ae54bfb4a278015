//! `uwsgi_pass` and `scgi_pass`: the request's head in the protocol's
//! encoding ([`Proto::encode`]) and its body on a connection to the
//! application; the reply — an HTTP status line or a CGI head, then a body
//! that runs to the connection's close or its Content-Length — made into
//! the response by the CGI-head parser and responder FastCGI has.

use super::conf::{GwConf, Proto};
use crate::core::message::head::BodyFraming;
use crate::core::message::response::{Body, BodyStream, CutShort};
use crate::core::request::{BoxFuture, Content, Outcome, Request, RequestBody};
use crate::modules::cache;
use crate::modules::client_body::{self, Plan};
use crate::modules::fastcgi::cgi_head::{self, BadHead, CgiHead};
use crate::modules::fastcgi::respond::{self, Head};
use crate::upstream::driver::{self, Dial, Failure, Gave, Policy, Protocol, Try};
use crate::upstream::dynamic::Target;
use crate::upstream::io::{read_some, write_all};
use crate::upstream::next::NextUpstream;
use crate::upstream::{UpConn, Upstream as Group, UpstreamVars};
use bytes::{Bytes, BytesMut};
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// The content handler of `uwsgi_pass` / `scgi_pass`.
#[derive(Debug)]
pub struct Pass<P> {
    target: Target,
    /// Over TLS (`suwsgi://`).
    tls: bool,
    of: PhantomData<fn() -> P>,
}

impl<P: Proto> Pass<P> {
    pub fn new(target: Target, tls: bool) -> Self {
        Pass {
            target,
            tls,
            of: PhantomData,
        }
    }
}

impl<P: Proto> Content for Pass<P> {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let conf = req.conf.get::<GwConf<P>>();
            let fill = match cache::before::<P>(req, conf.force_ranges).await {
                Ok(f) => f,
                Err(o) => return o,
            };
            let out = self.fetch(req, body).await;
            cache::after(req, fill, out, conf.store.as_deref(), conf.store_access).await
        })
    }

    fn auto_redirect(&self) -> bool {
        true
    }
}

impl<P: Proto> Pass<P> {
    /// The reply of the application.
    async fn fetch(&self, req: &mut Request<'_>, body: &mut dyn RequestBody) -> Outcome {
        let conf = req.conf.get::<GwConf<P>>();
        req.state.ignore_client_abort = conf.ignore_client_abort;
        let Ok(up) = self.target.upstream(req).await else {
            return Outcome::Respond(req.error(502));
        };
        let has_body = conf.pass_request_body && req.head.framing != BodyFraming::None;
        // A chunked body is read whole even without request buffering:
        // the protocols carry the body's length before it.
        if has_body
            && !conf.request_buffering
            && body.declared_len().is_some()
            && client_body::held(req).is_none()
        {
            let mut tee = client_body::Tee::new(req, body);
            let out = run::<P>(req, &up, self.tls, &mut tee, Plan::Stream).await;
            tee.finish(req);
            return out;
        }
        let plan = if has_body {
            match client_body::read_all(req, body).await {
                Ok(b) => Plan::Held(b),
                Err(status) => return Outcome::Respond(req.error(status)),
            }
        } else {
            Plan::None
        };
        run::<P>(req, &up, self.tls, body, plan).await
    }
}

async fn run<P: Proto>(
    req: &mut Request<'_>,
    up: &Arc<Group>,
    tls: bool,
    body: &mut dyn RequestBody,
    plan: Plan,
) -> Outcome {
    let conf = req.conf.get::<GwConf<P>>();
    let (len, learnt) = match &plan {
        Plan::Held(b) => (b.len, body.declared_len().is_none()),
        Plan::Stream => (body.declared_len().unwrap_or(0), false),
        Plan::None => (0, false),
    };
    let mut head = BytesMut::with_capacity(1024);
    if let Err(status) = P::encode(req, conf, len, learnt, &mut head) {
        return Outcome::Respond(req.error(status));
    }
    let tls = match tls {
        true => match P::tls(req, &up.name) {
            Ok(d) => Some(d),
            Err(()) => return Outcome::Respond(req.error(502)),
        },
        false => None,
    };
    let bind = conf
        .bind
        .as_ref()
        .and_then(|b| b.local(req, &format!("{}_bind", P::NAME)));
    let dial = Dial {
        tls: tls.as_ref(),
        bind,
        own: matches!(plan, Plan::Stream) || bind.is_some(),
        keepalive: conf.socket_keepalive,
    };
    let vars = UpstreamVars::default().attach(req);
    let policy = Policy {
        next_upstream: conf.next_upstream,
        tries: conf.next_upstream_tries,
        timeout: conf.next_upstream_timeout,
        connect_timeout: conf.connect_timeout,
        streamed: matches!(plan, Plan::Stream),
    };
    let ex = Exchange {
        conf,
        head: &head,
        plan: &plan,
    };
    match driver::run(&ex, req, up, body, &policy, &dial, &vars).await {
        Ok(answer) => respond_with(req, conf, answer).await,
        Err(resp) => Outcome::Respond(resp),
    }
}

/// One request's exchange with an application: its head in the protocol's
/// encoding and how the body goes.
struct Exchange<'a, P: Proto> {
    conf: &'a GwConf<P>,
    head: &'a [u8],
    plan: &'a Plan,
}

/// A reply whose head was read: the connection, the head, the bytes read
/// after it, the peer's name for log lines.
pub struct Answer {
    conn: UpConn,
    head: CgiHead,
    rest: BytesMut,
    name: String,
}

impl<P: Proto> Protocol for Exchange<'_, P> {
    type Reply = Answer;

    fn scheme(&self) -> &str {
        P::NAME
    }

    fn exchange<'a>(
        &'a self,
        _req: &'a Request<'_>,
        at: &'a Try<'_>,
        conn: UpConn,
        body: &'a mut dyn RequestBody,
    ) -> impl Future<Output = Result<Answer, Gave<Answer>>> + 'a {
        attempt(self, at, conn, body)
    }
}

/// Send the request on a connected peer and read the reply's head.
async fn attempt<P: Proto>(
    ex: &Exchange<'_, P>,
    at: &Try<'_>,
    mut conn: UpConn,
    body: &mut dyn RequestBody,
) -> Result<Answer, Gave<Answer>> {
    let conf = ex.conf;
    let reused = conn.reused();
    let mut rest = BytesMut::new();
    let res = match send(&conn, conf, ex.head, ex.plan, body).await {
        Ok(()) => {
            let wait = read_head(&conn, conf, &mut rest);
            crate::upstream::unless_client_leaves(!conf.ignore_client_abort, body, wait)
                .await
                .ok_or(Gave::Left)?
        }
        // The application may have answered and closed without reading all
        // of the body: its answer, when it is there.
        Err(f) if f.kind == NextUpstream::ERROR => read_head(&conn, conf, &mut rest)
            .await
            .map_err(|_: Failure<Answer>| f),
        Err(f) => Err(f),
    };
    let head = match res {
        Ok(h) => h,
        Err(mut f) => {
            // A pooled connection the application had closed.
            f.stale = reused && rest.is_empty() && f.kind == NextUpstream::ERROR;
            return Err(f.into());
        }
    };
    at.head_read(&conn);
    at.status(head.status());
    // The attempt ends (max_conns, queue) when the connection is closed,
    // not at the head.
    let failed = at.status_fails(head.status());
    conn.hold(at.hold(failed.is_none()));
    let mut name = String::new();
    ex.upstream_name(&at.up.addr_name(at.peer), &mut name);
    let answer = Answer {
        conn,
        head,
        rest,
        name,
    };
    match failed {
        Some(kind) => {
            let mut f = Failure::new(kind, answer.head.status(), String::new());
            f.reply = Some(answer);
            Err(f.into())
        }
        None => Ok(answer),
    }
}

/// The request's head and body, on a connected `conn`.
async fn send<P: Proto, R>(
    conn: &UpConn,
    conf: &GwConf<P>,
    head: &[u8],
    plan: &Plan,
    body: &mut dyn RequestBody,
) -> Result<(), Failure<R>> {
    let sending = "sending request to upstream";
    let t = conf.send_timeout;
    let wr = |e: io::Error| Failure::io(&e, sending);
    match plan {
        Plan::None => write_all(conn, head, t).await.map_err(wr)?,
        // A small body in memory goes with the head in one write.
        Plan::Held(b) if b.file.is_none() && b.len <= client_body::FILE_PIECE as u64 => {
            let mut all = BytesMut::with_capacity(head.len() + b.len as usize);
            all.extend_from_slice(head);
            for p in &b.mem {
                all.extend_from_slice(p);
            }
            write_all(conn, &all, t).await.map_err(wr)?;
        }
        Plan::Held(b) => {
            write_all(conn, head, t).await.map_err(wr)?;
            let mut off = 0;
            while let Some(p) = b.piece_at(off).map_err(|e| {
                Failure::new(
                    NextUpstream::OFF,
                    500,
                    format!("{e} while reading the client request body temporary file"),
                )
            })? {
                off += p.len() as u64;
                write_all(conn, &p, t).await.map_err(wr)?;
            }
        }
        Plan::Stream => {
            write_all(conn, head, t).await.map_err(wr)?;
            loop {
                let p = body.chunk().await.map_err(|e| {
                    Failure::new(
                        NextUpstream::OFF,
                        e.status(),
                        "client request body could not be read",
                    )
                })?;
                let Some(p) = p else { break };
                write_all(conn, &p, t).await.map_err(wr)?;
            }
        }
    }
    Ok(())
}

/// The reply's head (`rest`: the bytes read after it).
async fn read_head<P: Proto, R>(
    conn: &UpConn,
    conf: &GwConf<P>,
    rest: &mut BytesMut,
) -> Result<CgiHead, Failure<R>> {
    let reading = "reading response header from upstream";
    loop {
        match parse(rest, conf.buffer_size) {
            Ok(Some((h, used))) => {
                let _ = rest.split_to(used);
                return Ok(h);
            }
            Ok(None) => {}
            Err(e) => {
                return Err(Failure::new(
                    NextUpstream::INVALID_HEADER,
                    502,
                    format!("{e} while {reading}"),
                ));
            }
        }
        rest.reserve(conf.buffer_size.max(4096));
        match read_some(conn, rest, conf.read_timeout).await {
            Ok(0) => {
                return Err(Failure::new(
                    NextUpstream::ERROR,
                    502,
                    format!("upstream prematurely closed connection while {reading}"),
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(Failure::io(&e, reading)),
        }
    }
}

/// A reply's head: an HTTP status line (its status unless a `Status`
/// header gives one) then header lines, or header lines alone, CGI style.
/// `Ok(None)`: not whole yet.
pub fn parse(buf: &[u8], max: usize) -> Result<Option<(CgiHead, usize)>, BadHead> {
    let (line, skip) = if buf.starts_with(b"HTTP/") {
        let Some(end) = memchr::memchr(b'\n', buf) else {
            return match buf.len() >= max {
                true => Err(BadHead("upstream sent too big header")),
                false => Ok(None),
            };
        };
        (Some(status_line(&buf[..end])?), end + 1)
    } else {
        (None, 0)
    };
    let Some((mut head, used)) = cgi_head::parse(&buf[skip..], max.saturating_sub(skip))? else {
        return Ok(None);
    };
    if let Some((status, reason)) = line
        && head.status == 0
    {
        head.status = status;
        head.reason = reason;
    }
    Ok(Some((head, skip + used)))
}

/// `HTTP/1.1 200 OK`: the status and the reason phrase.
fn status_line(line: &[u8]) -> Result<(u16, Option<String>), BadHead> {
    let bad = || BadHead("upstream sent invalid status line");
    let line = std::str::from_utf8(line).map_err(|_| bad())?.trim_end();
    let (_, rest) = line.split_once(' ').ok_or_else(bad)?;
    let rest = rest.trim_start();
    let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    let code: u16 = match code.parse() {
        Ok(c) if code.len() == 3 && (100..=999).contains(&c) => c,
        _ => return Err(bad()),
    };
    let reason = reason.trim();
    if reason.bytes().any(|b| b < 0x20 && b != b'\t') {
        return Err(bad());
    }
    Ok((code, (!reason.is_empty()).then(|| reason.to_string())))
}

/// The response from the reply: its head through the CGI responder, its
/// body read ahead into the buffers with buffering on (all of a small one),
/// the rest streamed.
async fn respond_with<P: Proto>(
    req: &mut Request<'_>,
    conf: &GwConf<P>,
    answer: Answer,
) -> Outcome {
    let Answer {
        conn,
        head,
        rest,
        name,
    } = answer;
    let fields = head.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    cache::origin(req, head.status(), fields);
    let opts = respond::Opts {
        hide: &conf.hide_header,
        pass: &conf.pass_header,
        intercept_errors: conf.intercept_errors,
        buffering: conf.buffering,
    };
    let respond::Reply {
        mut resp,
        buffering,
        declared_len,
    } = match respond::head(req, head, &opts) {
        Head::Done(o) => return o,
        Head::Reply(r) => r,
    };
    if matches!(resp.status, 204 | 304) || (100..200).contains(&resp.status) {
        return Outcome::Respond(resp);
    }
    let mut b = GwBody {
        conn: Some(conn),
        buf: rest,
        left: declared_len,
        read_timeout: conf.read_timeout,
        unbuffered: !buffering,
        name,
    };
    if buffering {
        let cap = conf.buffers.0 * conf.buffers.1;
        if let Err(e) = b.read_ahead(cap).await {
            let f: Failure<()> = Failure::io(&e, "reading upstream");
            driver::log(req, &f.msg, &b.name);
            return Outcome::Respond(req.error(502));
        }
        if b.conn.is_none() && declared_len.is_none_or(|d| d <= b.buf.len() as u64) {
            let all = b.buf.split().freeze();
            resp.body = respond::whole([all].into(), declared_len);
            return Outcome::Respond(resp);
        }
    }
    resp.body = Body::Stream {
        stream: Box::new(b),
        len: declared_len,
    };
    Outcome::Respond(resp)
}

/// The rest of a reply's body, pulled by the client's connection.
#[derive(Debug)]
struct GwBody {
    /// `None` once the application closed the connection.
    conn: Option<UpConn>,
    /// Read and not yet handed on.
    buf: BytesMut,
    /// Bytes still due when the application declared a Content-Length.
    left: Option<u64>,
    read_timeout: Duration,
    unbuffered: bool,
    name: String,
}

/// Room made for each read of the body.
const READ_ROOM: usize = 64 * 1024;

impl GwBody {
    /// Read until `cap` bytes are held, the application closes, or all of a
    /// declared length is in.
    async fn read_ahead(&mut self, cap: usize) -> io::Result<()> {
        while self.buf.len() < cap
            && self.left.is_none_or(|l| (self.buf.len() as u64) < l)
            && let Some(c) = &self.conn
        {
            self.buf.reserve(READ_ROOM);
            if read_some(c, &mut self.buf, self.read_timeout).await? == 0 {
                self.conn = None;
            }
        }
        Ok(())
    }

    async fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        if self.buf.is_empty()
            && self.left != Some(0)
            && let Some(c) = &self.conn
        {
            self.buf.reserve(READ_ROOM);
            match read_some(c, &mut self.buf, self.read_timeout).await {
                Ok(0) => self.conn = None,
                Ok(_) => {}
                Err(e) => {
                    crate::error_log!(
                        Error,
                        "{}, upstream: \"{}\"",
                        Failure::<()>::io(&e, "reading upstream").msg,
                        self.name
                    );
                    return Err(CutShort::wrap(io::Error::other("upstream failed")));
                }
            }
        }
        let piece = (!self.buf.is_empty()).then(|| self.buf.split().freeze());
        respond::limit(&mut self.left, piece)
    }
}

impl BodyStream for GwBody {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(self.next_piece())
    }

    fn unbuffered(&self) -> bool {
        self.unbuffered
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn status_line_or_cgi_head() {
        let (h, used) = parse(b"HTTP/1.1 418 I'm a teapot\r\nX-A: b\r\n\r\nbody", 4096)
            .unwrap()
            .unwrap();
        assert_eq!((h.status, h.reason.as_deref()), (418, Some("I'm a teapot")));
        assert_eq!(used, 37);
        let (h, _) = parse(b"Status: 404 Not Here\nContent-Type: text/plain\n\n", 4096)
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.status, h.content_type.as_deref()),
            (404, Some("text/plain"))
        );
        // A Status header wins over the status line.
        let (h, _) = parse(b"HTTP/1.0 200 OK\r\nStatus: 503\r\n\r\n", 4096)
            .unwrap()
            .unwrap();
        assert_eq!(h.status, 503);
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\nX-A", 4096), Ok(None));
        assert!(parse(b"HTTP/1.1 2000 OK\r\n\r\n", 4096).is_err());
        assert!(parse(b"HTTP/1.1 200 O\x01K\r\n\r\n", 4096).is_err());
        assert!(parse(&[b'H'; 100], 64).is_err());
    }
}
