//! `memcached_pass`, nginx's ngx_http_memcached_module: the value stored in
//! memcached under `$memcached_key` is the response. A protocol of the
//! upstream driver: `get KEY` is sent, `VALUE KEY FLAGS LENGTH` (or `END`:
//! not found) is read, then the value and its `END` trailer; a connection
//! whose reply ended cleanly goes back to the upstream's keep-alive pool.

pub mod conf;

use crate::core::message::response::{Body, BodyStream, CutShort, Response, Value};
use crate::core::module::{Module, VarDef, VarSet};
use crate::core::request::{BoxFuture, Content, Outcome, Request, RequestBody};
use crate::upstream::driver::{self, Dial, Failure, Gave, Policy, Protocol, Try};
use crate::upstream::dynamic::Target;
use crate::upstream::io::{read_some, write_all};
use crate::upstream::next::NextUpstream;
use crate::upstream::{UpConn, Upstream, UpstreamVars};
use bytes::{Bytes, BytesMut};
use conf::MemcachedConf;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// The `memcached_pass` handler of one location.
#[derive(Debug)]
pub struct MemcachedPass {
    pub target: Target,
}

/// `$memcached_key`, as `set` gave it.
struct Key(Vec<u8>);

static SET_KEY: VarSet = VarSet {
    run: |req, v| req.state.ext.insert(Rc::new(Key(v.to_vec()))),
    level: |_| {},
};

/// The key as sent: spaces, control characters and `%` escaped, as nginx's
/// memcached escaping.
fn escape(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len());
    for &b in key {
        if b <= b' ' || b == b'%' || b == 0x7f {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
    out
}

impl Content for MemcachedPass {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let key = match req.state.ext.get::<Key>() {
                Some(k) if !k.0.is_empty() => escape(&k.0),
                _ => {
                    crate::error_log!(
                        Error,
                        "the \"$memcached_key\" variable is not set{}",
                        req.log_context()
                    );
                    return Outcome::Respond(req.error(500));
                }
            };
            let Ok(up) = self.target.upstream(req).await else {
                return Outcome::Respond(req.error(502));
            };
            let c = req.conf.get::<MemcachedConf>();
            let vars = UpstreamVars::default().attach(req);
            let policy = Policy {
                next_upstream: c.next_upstream,
                tries: c.next_upstream_tries,
                timeout: c.next_upstream_timeout,
                connect_timeout: c.connect_timeout,
                streamed: false,
            };
            let dial = Dial {
                keepalive: c.socket_keepalive,
                ..Dial::default()
            };
            let ex = Exchange { c, key: &key };
            let resp = match driver::run(&ex, req, &up, body, &policy, &dial, &vars).await {
                Ok(r) | Err(r) => r,
            };
            Outcome::Respond(resp)
        })
    }
}

/// One request's exchange with a memcached server.
struct Exchange<'a> {
    c: &'a MemcachedConf,
    /// The escaped key.
    key: &'a [u8],
}

impl Protocol for Exchange<'_> {
    type Reply = Response;

    fn scheme(&self) -> &str {
        "memcached"
    }

    fn exchange<'a>(
        &'a self,
        req: &'a Request<'_>,
        at: &'a Try<'_>,
        conn: UpConn,
        _body: &'a mut dyn RequestBody,
    ) -> impl Future<Output = Result<Response, Gave<Response>>> + 'a {
        attempt(self, req, at, conn)
    }
}

const WHILE: &str = "reading response header from upstream";

fn invalid(what: &str) -> Failure<Response> {
    Failure::new(
        NextUpstream::INVALID_HEADER,
        502,
        format!("memcached sent {what} while {WHILE}"),
    )
}

async fn attempt(
    ex: &Exchange<'_>,
    req: &Request<'_>,
    at: &Try<'_>,
    conn: UpConn,
) -> Result<Response, Gave<Response>> {
    let c = ex.c;
    let mut line = Vec::with_capacity(ex.key.len() + 6);
    line.extend_from_slice(b"get ");
    line.extend_from_slice(ex.key);
    line.extend_from_slice(b"\r\n");
    write_all(&conn, &line, c.send_timeout).await.map_err(|e| {
        let mut f = Failure::io(&e, "sending request to upstream");
        f.stale = true;
        f
    })?;
    // The head line: `VALUE key flags length` or `END`.
    let mut buf = BytesMut::with_capacity(c.buffer_size.min(64 * 1024));
    let end = loop {
        if let Some(i) = memchr::memmem::find(&buf, b"\r\n") {
            break i;
        }
        if buf.len() >= c.buffer_size {
            return Err(invalid("too long response header").into());
        }
        match read_some(&conn, &mut buf, c.read_timeout).await {
            Ok(0) => {
                let mut f = Failure::new(
                    NextUpstream::ERROR,
                    502,
                    format!("upstream prematurely closed connection while {WHILE}"),
                );
                f.stale = buf.is_empty();
                return Err(f.into());
            }
            Ok(_) => {}
            Err(e) => return Err(Failure::io(&e, WHILE).into()),
        }
    };
    let head = buf.split_to(end + 2);
    at.head_read(&conn);
    let head = &head[..end];
    if head == b"END" {
        crate::error_log!(
            Info,
            "key: \"{}\" was not found by memcached{}",
            String::from_utf8_lossy(ex.key),
            req.log_context()
        );
        at.status(404);
        let mut f = Failure::new(NextUpstream::HTTP_404, 404, String::new());
        // The connection is at the end of a reply: it can serve another.
        at.up.release(at.peer, conn);
        at.up.finished(at.peer, true);
        f.reply = Some(req.error(404));
        return Err(f.into());
    }
    let Some(rest) = head.strip_prefix(b"VALUE ") else {
        return Err(invalid("invalid response").into());
    };
    let Some(rest) = rest.strip_prefix(ex.key).and_then(|r| r.strip_prefix(b" ")) else {
        return Err(invalid("invalid key in response").into());
    };
    let mut fields = std::str::from_utf8(rest).unwrap_or("").split(' ');
    let (Some(Ok(flags)), Some(Ok(len)), None) = (
        fields.next().map(str::parse::<u32>),
        fields.next().map(str::parse::<u64>),
        fields.next(),
    ) else {
        return Err(invalid("invalid response").into());
    };
    at.status(200);
    let mut resp = Response::new(200);
    resp.content_type = Some(Value::Shared(
        req.conf
            .core
            .types
            .lookup_shared(&req.uri)
            .unwrap_or(&req.conf.core.default_type)
            .clone(),
    ));
    if c.gzip_flag & flags != 0 {
        resp.headers
            .push(("Content-Encoding", Value::Static("gzip")));
    }
    let value = Stored {
        conn: Some(conn),
        buf,
        left: len,
        trailer: Vec::new(),
        timeout: c.read_timeout,
        up: at.up.clone(),
        peer: at.peer,
        ended: false,
        hold: Some(at.hold(true)),
    };
    resp.body = Body::Stream {
        stream: Box::new(value),
        len: Some(len),
    };
    Ok(resp)
}

/// What memcached sends after a value.
const TRAILER: &[u8] = b"\r\nEND\r\n";

/// A value streamed to the client, then its trailer checked.
#[derive(Debug)]
struct Stored {
    conn: Option<UpConn>,
    /// Read and not handed out yet.
    buf: BytesMut,
    /// Bytes of the value still to hand out.
    left: u64,
    /// The trailer read so far.
    trailer: Vec<u8>,
    timeout: Duration,
    up: Arc<Upstream>,
    peer: usize,
    ended: bool,
    /// Ends the attempt once the connection is pooled or closed.
    hold: Option<crate::upstream::queue::Hold>,
}

impl Stored {
    /// The trailer is in: the connection goes back to the pool when it is
    /// memcached's, else it is closed with an error logged.
    fn end(&mut self) {
        self.ended = true;
        let conn = self.conn.take();
        if self.trailer == TRAILER && self.buf.is_empty() {
            if let Some(c) = conn {
                self.up.release(self.peer, c);
            }
        } else {
            crate::error_log!(Error, "memcached sent invalid trailer");
        }
        self.hold = None;
    }
}

impl BodyStream for Stored {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(async move {
            loop {
                if self.left > 0 && !self.buf.is_empty() {
                    let n = (self.left as usize).min(self.buf.len());
                    self.left -= n as u64;
                    return Ok(Some(self.buf.split_to(n).freeze()));
                }
                if self.left == 0 {
                    let want = TRAILER.len() - self.trailer.len();
                    let n = want.min(self.buf.len());
                    self.trailer.extend_from_slice(&self.buf.split_to(n));
                    if self.trailer.len() == TRAILER.len()
                        || self.trailer != TRAILER[..self.trailer.len()]
                    {
                        self.end();
                        return Ok(None);
                    }
                }
                if self.ended {
                    return Ok(None);
                }
                let Some(conn) = &self.conn else {
                    return Ok(None);
                };
                if self.buf.capacity() - self.buf.len() < 4096 {
                    self.buf.reserve(16 * 1024);
                }
                match read_some(conn, &mut self.buf, self.timeout).await {
                    Ok(0) if self.left == 0 => {
                        self.end();
                        return Ok(None);
                    }
                    Ok(0) => {
                        self.conn = None;
                        return Err(CutShort::wrap(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "upstream prematurely closed connection while reading upstream",
                        )));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.conn = None;
                        return Err(CutShort::wrap(e));
                    }
                }
            }
        })
    }
}

/// `memcached_pass`, its settings and `$memcached_key`.
pub static MODULE: Module = Module {
    name: "memcached",
    nginx_default: &["http_memcached_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&MemcachedConf::KIND),
    variables: &[VarDef::settable(
        "memcached_key",
        |req, _, out| {
            if let Some(k) = req.state.ext.get::<Key>() {
                out.extend_from_slice(&k.0);
            }
        },
        &SET_KEY,
    )],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn keys_are_escaped_as_nginx_does() {
        assert_eq!(escape(b"/a b%c\x01\x7fd"), b"/a%20b%25c%01%7Fd".to_vec());
        assert_eq!(escape(b"/plain?x=1"), b"/plain?x=1".to_vec());
    }
}
