//! One stream session: a client connection (or a UDP client's datagrams)
//! and the phases it goes through, in nginx's order: post-accept (the PROXY
//! header, realip), preaccess (`set`, `limit_conn`), access (`allow`/`deny`),
//! content (the server's [`Handler`](super::Handler)), log.

use super::udp::Datagrams;
use super::{Content, StreamConf};
use crate::conf::load::Config;
use crate::core::message::head::RequestHead;
use crate::core::module::{Phase, Rewrite};
use crate::core::request::{BodyError, BoxFuture, Peer, Request, RequestBody};
use crate::core::route::Server;
use crate::core::vars::{Var, VarSource, push_u64};
use crate::server::worker::Slot;
use bytes::Bytes;
use std::cell::Cell;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;

/// The client's side of a session.
pub enum Client {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
    Udp(Datagrams),
}

impl Client {
    fn fd(&self) -> RawFd {
        match self {
            Client::Tcp(s) => s.as_raw_fd(),
            Client::Unix(s) => s.as_raw_fd(),
            Client::Udp(d) => d.fd(),
        }
    }
}

/// What the session's variables read (`$protocol`, `$bytes_received`,
/// `$bytes_sent` in the log), kept in the request's module data.
#[derive(Debug, Default)]
pub struct Info {
    pub udp: bool,
    /// Bytes (UDP: payload bytes) taken from the client.
    pub received: Cell<u64>,
    /// Bytes sent to the client.
    pub sent: Cell<u64>,
}

/// A session in its phases: the request every module sees, and the client.
pub struct Session<'a> {
    pub req: Request<'a>,
    pub client: Client,
    pub info: Rc<Info>,
    /// Bytes read from the client before the content phase (none without a
    /// preread phase): what a handler passes on first.
    pub preread: Vec<u8>,
}

/// A stream session has no request body: what the access hooks and the
/// upstream driver are given.
pub struct NoBody;

impl RequestBody for NoBody {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>> {
        Box::pin(async { Ok(None) })
    }
    fn declared_len(&self) -> Option<u64> {
        Some(0)
    }
    fn gone(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// Start the session of a connection accepted on stream listener `key`, as
/// a task of the worker holding `slot`; it runs on `cfg` to its end.
pub fn start(client: Client, peer: Peer, key: usize, id: u64, cfg: Arc<Config>, slot: Slot) {
    slot.spawn(move |slot| async move {
        run(client, peer, key, id, &cfg).await;
        drop(slot);
    });
}

/// Run a session to its end on the configuration `cfg`.
pub async fn run(client: Client, peer: Peer, key: usize, id: u64, cfg: &Config) {
    let l = cfg.listener(key);
    let server: &Arc<Server> = &l.vhosts.default;
    // A PROXY header that does not come whole ends the session with 400.
    let t = server.conf.get::<StreamConf>().proxy_protocol_timeout;
    let proxy = match (&client, l.proxy_protocol) {
        (Client::Tcp(s), true) => crate::server::proxy_protocol::read(s, t, peer).await,
        (Client::Unix(s), true) => crate::server::proxy_protocol::read(s, t, peer).await,
        _ => Ok(None),
    };
    let head = RequestHead::unparsed(b"");
    let now = crate::core::clock::unix_millis();
    let info = Rc::new(Info {
        udp: matches!(client, Client::Udp(_)),
        ..Info::default()
    });
    let mut s = Session {
        req: Request {
            head: &head,
            peer: &peer,
            fd: client.fd(),
            local: match (&client, l.local_addr()) {
                (Client::Udp(_), Some(a)) => std::cell::OnceCell::from(Some(a)),
                _ => std::cell::OnceCell::new(),
            },
            connection: id,
            connection_requests: 1,
            connection_start_ms: now,
            start_ms: now,
            host: "",
            server,
            uri: Vec::new(),
            location: None,
            conf: &server.conf,
            filename: Vec::new(),
            body_read: 0,
            state: Default::default(),
            tls: None,
            proxy: proxy.clone().unwrap_or_default(),
        },
        client,
        info: info.clone(),
        preread: Vec::new(),
    };
    s.req.state.ext.insert(info);
    if s.req.conf.core.tcp_nodelay
        && let Client::Tcp(t) = &s.client
    {
        let _ = t.set_nodelay(true);
    }
    let scope = crate::core::errlog::scopes().then(|| {
        let ip = match peer {
            Peer::Tcp(a) => Some(a.ip()),
            Peer::Unix => None,
        };
        let debug = crate::core::errlog::debug_connection(ip);
        let sc = crate::core::errlog::Scope::new(s.req.conf.core.error_log.clone(), debug);
        s.req.state.errlog = Some(sc.clone());
        sc
    });
    let session = std::pin::pin!(async {
        crate::error_log!(
            Info,
            "{}client {} connected to {}",
            if s.info.udp { "udp " } else { "" },
            peer_text(&s.req),
            l.addr
        );
        crate::error_log!(Debug, "stream session: {}", s.req.connection);
        let status = match proxy {
            Ok(_) => phases(&mut s).await,
            Err(()) => 400,
        };
        s.req.state.status.set(status);
        log(&s);
    });
    crate::core::errlog::scoped(scope, session).await;
}

/// `ip:port` of the client, as nginx's session log lines show it.
fn peer_text(req: &Request<'_>) -> String {
    match req.peer {
        Peer::Tcp(a) => a.to_string(),
        Peer::Unix => "unix:".into(),
    }
}

/// The phases up to the content handler's end; the session's status.
async fn phases(s: &mut Session<'_>) -> u16 {
    let server: &Server = s.req.server;
    crate::error_log!(Debug, "stream post-accept phase");
    for hook in &server.conf.hooks.post_read {
        if let Some(r) = hook(&mut s.req) {
            return r.status;
        }
    }
    for hook in &server.pipeline.rewrite {
        if let Rewrite::Respond(r) = hook(&mut s.req, &server.phases.ext, false) {
            return r.status;
        }
    }
    for hook in &server.conf.hooks.access {
        let decided = match hook(&mut s.req, &mut NoBody) {
            Phase::Next => None,
            Phase::Respond(r) => Some(r),
            Phase::Wait(w) => w.await,
        };
        if let Some(r) = decided {
            return r.status;
        }
    }
    crate::error_log!(Debug, "stream content phase");
    match server.phases.ext.get::<Content>() {
        Some(Content(h)) => h.serve(s).await,
        None => 500,
    }
}

/// A finished session, as its log line reads it: `$bytes_sent` is what the
/// client was sent.
struct Done<'r, 'a> {
    req: &'r Request<'a>,
    info: &'r Info,
}

impl VarSource for Done<'_, '_> {
    fn var(&self, var: &Var, out: &mut Vec<u8>) {
        match var {
            Var::BytesSent => push_u64(out, self.info.sent.get()),
            _ => self.req.var_into(var, out, self),
        }
    }
}

fn log(s: &Session<'_>) {
    let done = Done {
        req: &s.req,
        info: &s.info,
    };
    crate::error_log!(
        Debug,
        "finalize stream session: {}",
        s.req.state.status.get()
    );
    for hook in &s.req.server.pipeline.session_log {
        hook(&s.req, &done);
    }
    crate::error_log!(
        Info,
        "{}client {} disconnected, bytes from/to client:{}/{}",
        if s.info.udp { "udp " } else { "" },
        peer_text(&s.req),
        s.info.received.get(),
        s.info.sent.get()
    );
}
