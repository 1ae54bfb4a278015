//! One stream session: a client connection (or a UDP client's datagrams)
//! and the phases it goes through, in nginx's order: post-accept (the PROXY
//! header, realip), preaccess (`set`, `limit_conn`), access (`allow`/`deny`),
//! ssl (the TLS handshake of a `listen … ssl` address), preread (the
//! client's first bytes, for `ssl_preread`), content (the server's
//! [`Handler`](super::Handler)), log. The TLS server name, from the
//! handshake or the preread ClientHello, chooses the session's server
//! among those of its address (`server_name`).

use super::udp::Datagrams;
use super::{Content, StreamConf};
use crate::conf::load::{Config, Listener};
use crate::core::message::head::RequestHead;
use crate::core::module::{Phase, Preread, PrereadHook, Rewrite};
use crate::core::proxy_protocol::ProxyHeader;
use crate::core::request::{BodyError, BoxFuture, Peer, Request, RequestBody};
use crate::core::route::{Server, VirtualHosts};
use crate::core::vars::{Var, VarSource, push_u64};
use crate::modules::ssl;
use crate::server::socket::Stream;
use crate::server::worker::Slot;
use bytes::Bytes;
use std::cell::Cell;
use std::io::{self, ErrorKind};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, Interest};

/// The client's side of a session.
pub enum Client {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
    Udp(Datagrams),
    /// A `listen … ssl` session once its handshake is done.
    Tls(Box<ssl::stream::TlsStream>),
    /// None left: a handshake that failed took the connection.
    Gone,
    /// Handed to another listener by `pass`: the session ends unlogged.
    Passed,
}

impl Client {
    fn fd(&self) -> RawFd {
        match self {
            Client::Tcp(s) => s.as_raw_fd(),
            Client::Unix(s) => s.as_raw_fd(),
            Client::Udp(d) => d.fd(),
            Client::Tls(s) => s.as_raw_fd(),
            Client::Gone | Client::Passed => -1,
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
    /// The configuration the session runs on (`pass` looks for its
    /// listener there).
    pub cfg: &'a Config,
    /// The session's worker_connections slot, which a `pass` hands on with
    /// the connection.
    pub slot: Option<Slot>,
    /// How many times the connection was passed before (`pass`).
    pub passes: u8,
}

/// What a connection passed by a stream server's `pass` brings to the
/// listener it is passed to: the PROXY addresses read on the way (the
/// listener's own `proxy_protocol` reads another header in their place),
/// and how many times it was passed. An accepted connection brings none.
#[derive(Debug, Default)]
pub struct Carried {
    pub proxy: Option<Arc<ProxyHeader>>,
    pub passes: u8,
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

/// A session's connection: its client, the address it comes from, the
/// stream listener it came in on (its `key`), its number, and what a `pass`
/// brought with it.
pub struct Accepted {
    pub client: Client,
    pub peer: Peer,
    pub key: usize,
    pub id: u64,
    pub carried: Carried,
}

/// Start the session of a connection accepted on (or passed to) a stream
/// listener, as a task of the worker holding `slot`; it runs on `cfg` to
/// its end. Not inlined into the HTTP listeners' accept path: the frame that
/// builds this task (~12 KB) is only taken by stream listeners.
#[inline(never)]
pub fn start(a: Accepted, cfg: Arc<Config>, slot: Slot) {
    slot.spawn(move |slot| run(a, cfg, slot));
}

/// Run a session to its end on the configuration `cfg`.
pub async fn run(a: Accepted, cfg: Arc<Config>, slot: Slot) {
    let Accepted {
        client,
        peer,
        key,
        id,
        carried,
    } = a;
    let l = cfg.listener(key);
    let server: &Arc<Server> = &l.vhosts.default;
    // A PROXY header that does not come whole ends the session with 400.
    let t = server.conf.get::<StreamConf>().proxy_protocol_timeout;
    let proxy = match (&client, l.proxy_protocol) {
        (Client::Tcp(s), true) => crate::server::proxy_protocol::read(s, t, peer).await,
        (Client::Unix(s), true) => crate::server::proxy_protocol::read(s, t, peer).await,
        _ => Ok(carried.proxy),
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
            local: match l.local_addr() {
                Some(a) => std::cell::OnceCell::from(Some(a)),
                None => std::cell::OnceCell::new(),
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
            tls: match &client {
                Client::Tls(t) => Some(t.info().clone()),
                _ => None,
            },
            proxy: proxy.clone().unwrap_or_default(),
        },
        client,
        info: info.clone(),
        preread: Vec::new(),
        cfg: &cfg,
        slot: Some(slot),
        passes: carried.passes,
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
            Ok(_) => phases(&mut s, l).await,
            Err(()) => 400,
        };
        if let Client::Passed = s.client {
            return;
        }
        s.req.state.status.set(status);
        if let Client::Tls(t) = &s.client {
            t.close_notify();
        }
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
async fn phases<'a>(s: &mut Session<'a>, l: &'a Listener) -> u16 {
    if let Some(status) = before_content(s, l).await {
        return status;
    }
    crate::error_log!(Debug, "stream content phase");
    match s.req.server.phases.ext.get::<Content>() {
        Some(Content(h)) => h.serve(s).await,
        None => 500,
    }
}

/// The phases before content: `Some(status)` when one ended the session.
async fn before_content<'a>(s: &mut Session<'a>, l: &'a Listener) -> Option<u16> {
    let server: &Server = s.req.server;
    crate::error_log!(Debug, "stream post-accept phase");
    for hook in &server.conf.hooks.post_read {
        if let Some(r) = hook(&mut s.req) {
            return Some(r.status);
        }
    }
    for hook in &server.pipeline.rewrite {
        if let Rewrite::Respond(r) = hook(&mut s.req, &server.phases.ext, false) {
            return Some(r.status);
        }
    }
    for hook in &server.conf.hooks.access {
        let decided = match hook(&mut s.req, &mut NoBody) {
            Phase::Next => None,
            Phase::Respond(r) => Some(r),
            Phase::Wait(w) => w.await,
        };
        if let Some(r) = decided {
            return Some(r.status);
        }
    }
    if l.ssl {
        crate::error_log!(Debug, "stream ssl phase");
        if let Err(status) = handshake(s, &l.vhosts).await {
            return Some(status);
        }
    }
    if !s.info.udp
        && let Err(status) = preread(s, &l.vhosts).await
    {
        return Some(status);
    }
    None
}

impl<'a> Session<'a> {
    /// The session goes on in `server`, the one the TLS server name `name`
    /// (lowercase) chose; a regex name's captures become variables.
    fn choose(&mut self, server: &'a Arc<Server>, name: &str) {
        if !Arc::ptr_eq(server, self.req.server) {
            self.req.server = server;
            self.req.set_conf(&server.conf);
        }
        self.req.server_name_captures(name);
    }
}

/// The ssl phase: the TLS handshake, within `ssl_handshake_timeout`; the
/// client's server name chooses the session's server. A handshake that
/// fails, or a client certificate the server refuses, ends the session
/// with 500. A connection passed here already in TLS (`pass` from a
/// `listen … ssl` server) is not handshaken again: its server name chooses
/// as a handshake's would.
async fn handshake<'a>(s: &mut Session<'a>, vhosts: &'a VirtualHosts) -> Result<(), u16> {
    let tcp = match std::mem::replace(&mut s.client, Client::Gone) {
        Client::Tcp(tcp) => tcp,
        Client::Tls(tls) => {
            s.client = Client::Tls(tls);
            return tls_chosen(s, vhosts);
        }
        _ => return Err(500),
    };
    let t = ssl::stream::handshake_timeout(vhosts);
    let tls = match tokio::time::timeout(t, ssl::stream::accept(tcp, vhosts, false)).await {
        Ok(Ok(Some(tls))) => tls,
        // An ACME TLS-ALPN-01 validation, answered in the handshake.
        Ok(Ok(None)) => return Err(200),
        Ok(Err(e)) => {
            crate::error_log!(
                Info,
                "SSL handshake failed: {} while SSL handshaking{}",
                e.0,
                s.req.log_context()
            );
            return Err(500);
        }
        Err(_) => {
            crate::error_log!(
                Info,
                "client timed out while SSL handshaking{}",
                s.req.log_context()
            );
            return Err(500);
        }
    };
    s.client = Client::Tls(Box::new(tls));
    tls_chosen(s, vhosts)
}

/// After a handshake: the server the TLS server name chooses, and the
/// client certificate checked against its `ssl_verify_client`.
fn tls_chosen<'a>(s: &mut Session<'a>, vhosts: &'a VirtualHosts) -> Result<(), u16> {
    let Client::Tls(tls) = &s.client else {
        return Err(500);
    };
    let info = tls.info().clone();
    let name = info
        .server_name
        .as_deref()
        .unwrap_or("")
        .to_ascii_lowercase();
    s.choose(vhosts.select(&name), &name);
    s.req.tls = Some(info.clone());
    let mode = s.req.conf.get::<ssl::conf::SslConf>().verify_client.0;
    let context = format!(" while SSL handshaking{}", s.req.log_context());
    match ssl::client::verdict(&info, mode, &context) {
        Some(_) => Err(500),
        None => Ok(()),
    }
}

/// The preread phase: the client's first bytes, at most
/// `preread_buffer_size` within `preread_timeout`, handed to the preread
/// hooks (`ssl_preread`) until each has what it needs. Those of a plain
/// connection are peeked at and stay queued; those of a TLS one are read
/// into [`Session::preread`], which the content handler passes on first.
/// A full buffer ends the session with 400, a client that closes or takes
/// too long with 200, as nginx's.
async fn preread<'a>(s: &mut Session<'a>, vhosts: &'a VirtualHosts) -> Result<(), u16> {
    let mut hooks: Vec<PrereadHook> = Vec::new();
    for h in &s.req.server.pipeline.preread {
        if h(&mut s.req, &[]) == Preread::More {
            hooks.push(*h);
        }
    }
    if hooks.is_empty() {
        return Ok(());
    }
    crate::error_log!(Debug, "stream preread phase");
    let conf: &StreamConf = s.req.conf.get::<StreamConf>();
    let size = conf.preread_buffer_size as usize;
    let read = async {
        let mut peeked = vec![0u8; size];
        let mut seen = 0;
        loop {
            let n = match &mut s.client {
                Client::Tcp(c) => peek(c, &mut peeked, seen).await,
                Client::Unix(c) => peek(c, &mut peeked, seen).await,
                Client::Tls(c) if s.preread.len() < size => {
                    let mut more = vec![0u8; size - s.preread.len()];
                    c.read(&mut more).await.map(|n| {
                        s.preread.extend_from_slice(&more[..n]);
                        if n == 0 { seen } else { s.preread.len() }
                    })
                }
                Client::Tls(_) => Ok(size),
                Client::Udp(_) | Client::Gone | Client::Passed => return Ok(()),
            };
            let n = match n {
                Ok(n) if n > seen || n == size => n,
                _ => return Err(200),
            };
            seen = n;
            let bytes = match &s.client {
                Client::Tls(_) => &s.preread[..],
                _ => &peeked[..n],
            };
            let mut name = None;
            hooks.retain(|h| match h(&mut s.req, bytes) {
                Preread::More => true,
                Preread::Done => false,
                Preread::Name(n) => {
                    name = Some(n);
                    false
                }
            });
            if let Some(n) = name {
                let n = n.to_ascii_lowercase();
                s.choose(vhosts.select(&n), &n);
            }
            if hooks.is_empty() {
                return Ok(());
            }
            if n == size {
                crate::error_log!(Error, "preread buffer full{}", s.req.log_context());
                return Err(400);
            }
        }
    };
    match tokio::time::timeout(conf.preread_timeout, read).await {
        Ok(r) => r,
        Err(_) => {
            crate::error_log!(
                Info,
                "client timed out while prereading client data{}",
                s.req.log_context()
            );
            Err(200)
        }
    }
}

/// The bytes queued on `c` once more than `seen` are there (or it closed:
/// as many as before), peeked into `buf`, none taken.
async fn peek<S: Stream>(c: &S, buf: &mut [u8], seen: usize) -> io::Result<usize> {
    let fd = c.as_raw_fd();
    loop {
        c.readable().await?;
        let peeked = c.try_io(Interest::READABLE, || {
            match crate::sys::peek(fd, buf)? {
                // Nothing new: wait for more (this clears the readiness).
                n if n == seen && n > 0 => Err(ErrorKind::WouldBlock.into()),
                n => Ok(n),
            }
        });
        match peeked {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            r => return r,
        }
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
