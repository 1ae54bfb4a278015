//! Upstreams: peers, balancing, keep-alive pools and health, shared by the
//! proxy handler (`proxy_pass`) and the FastCGI handler (`fastcgi_pass`).
//!
//! # API for handlers (stable)
//!
//! Configuration time, in a location directive's setter:
//!
//! ```ignore
//! // "backend" (an `upstream backend { … }` block, defined before or after),
//! // "127.0.0.1:9000", "localhost:8080", or "unix:/run/php.sock".
//! let up: UpstreamRef = crate::upstream::conf::reference("backend", default_port, &d.span);
//! ```
//!
//! The reference is resolved when the whole configuration has been read
//! (`conf::finish`, called by `conf::load`): a named block, else an implicit
//! one-address upstream (a host name resolves to all its addresses, as nginx).
//! An unknown name that is not a resolvable host is a configuration error at
//! the directive.
//!
//! An address with variables is a [`dynamic::Target`] (or, for a URL, the
//! handler's own template and [`dynamic::Blocks`]): each request finds its
//! upstream — a named block, or one made for it from an address or a name
//! the location's `resolver` resolves ([`resolver`], [`dns`]).
//!
//! Request time (one worker, no locks but with `zone`):
//!
//! ```ignore
//! let up: &Arc<Upstream> = up.arc();
//! let mut tried = Tried::default();
//! // Err: no live peer, queue full or timed out (502), client gone (499).
//! let peer = up.select(key, &mut tried, Some(body)).await?;
//! // `tls`: `Some(&tls::Dial)` for TLS to the peer (see [`tls`]).
//! let mut conn = up.connect(peer, tls, connect_timeout).await?; // pooled or new
//! // … write the request (and body), then wait for the reply head unless the
//! // client leaves first (`*_ignore_client_abort off`): …
//! let head = upstream::unless_client_leaves(!ignore, body, read_head(&conn)).await;
//! // None: the client left; `up.client_left(peer, req, name)`, answer 499.
//! up.responded(peer, attempt_start);            // response head in (latency figures)
//! up.finished(peer, ok);                        // passive health (max_fails)
//! up.release(peer, conn);                       // back to the keep-alive pool
//! ```
//!
//! `release` keeps the connection only when the upstream has `keepalive N`
//! (at most N idle per peer per worker), and drops it after
//! keepalive_requests uses or keepalive_timeout idle. Dropping a connection
//! instead of releasing it closes it. `conn.reused()` tells whether it came
//! from the pool (a failure on a reused connection before any reply byte is
//! worth one retry on a fresh one). `key` is the client address bytes for
//! `ip_hash` ([`balance::ip_hash_key`]) or the rendered `hash` key
//! ([`Upstream::hash_key`] rendered against the request); ignored otherwise.
//!
//! Pools and balancer state are per worker (thread-local), keyed by peer
//! address and upstream id, so a reload keeps the idle connections.
//! Active health checks (`health_check` in an upstream block) run in one
//! thread per upstream shared by all workers; see [`health`].

pub mod accel;
pub mod balance;
pub mod bind;
pub mod conf;
pub mod dns;
pub mod driver;
pub mod dynamic;
pub mod fields;
pub mod h2;
pub mod health;
pub mod io;
pub mod next;
pub mod params;
pub mod pool;
pub mod queue;
pub mod resolve;
pub mod resolver;
pub mod response;
pub mod stats;
pub mod store;
pub mod tls;
pub mod tls_conf;

use crate::core::request::Request;
use balance::{Balancer, Method, PeerSpec, Tried};
use std::borrow::Cow;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::core::module::{Hooks, Module, VarDef};
pub use pool::UpConn;

/// Where a peer listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PeerAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAddr::Tcp(a) => write!(f, "{a}"),
            PeerAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// An upstream block (or an implicit one for `proxy_pass http://host:port`).
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    /// Unique per loaded block: keys the per-worker balancer state.
    pub id: u64,
    /// The fixed peers (slots from 0), as configured.
    pub peers: Vec<PeerSpec>,
    pub addrs: Vec<PeerAddr>,
    /// `addrs` as `$upstream_addr` shows them.
    pub names: Box<[Arc<str>]>,
    /// `server … resolve` lines: their peers, found at run time, take the
    /// slots after the fixed ones (a block with them has a `zone`).
    pub dynamic: Option<resolve::Dynamic>,
    pub method: Method,
    /// `hash KEY`: the key template.
    pub hash_key: Option<crate::core::vars::Template>,
    /// `keepalive N`: idle connections kept per peer per worker (0: none).
    pub keepalive: usize,
    pub keepalive_timeout: Duration,
    pub keepalive_requests: u64,
    /// `keepalive_time`: a connection older than this is not kept (1h).
    pub keepalive_time: Duration,
    /// `zone name [size]`: the peers' balancing state (connections,
    /// failures, round-robin weights) is one for all workers, under a lock
    /// held for each pick and each end of an attempt; without it each
    /// worker balances on its own.
    pub zone: Option<String>,
    /// The balancer shared by all workers (`zone`, or an upstream made for
    /// one request).
    shared: Option<std::sync::Mutex<Balancer>>,
    /// Made for one request from a `proxy_pass`/`fastcgi_pass` with
    /// variables: no figures in /metrics, no per-worker state.
    pub ephemeral: bool,
    pub health: Option<health::Check>,
    /// Per fixed peer: passing active health checks (all true without
    /// checks).
    pub healthy: Box<[AtomicBool]>,
    /// `queue N [timeout=T]`: requests wait for a peer at max_conns.
    pub queue: Option<queue::Conf>,
}

/// One upstream's balancer in this worker (none when shared by all
/// workers), with the worker's figures for its peers by slot, made for the
/// shared balancer's membership `generation`.
struct Local {
    balancer: Option<Balancer>,
    figures: Box<[Option<&'static stats::PeerFigures>]>,
    generation: u64,
}

thread_local! {
    static BALANCERS: RefCell<rustc_hash::FxHashMap<u64, Local>> =
        RefCell::new(rustc_hash::FxHashMap::default());
}

impl Upstream {
    /// Run `f` with the upstream's balancer and this worker's figures for
    /// its peers (none for an ephemeral upstream).
    fn with_balancer<R>(
        &self,
        f: impl FnOnce(&mut Balancer, &[Option<&'static stats::PeerFigures>]) -> R,
    ) -> R {
        if self.ephemeral
            && let Some(mut b) = self.lock_shared()
        {
            return f(&mut b, &[]);
        }
        BALANCERS.with(|b| {
            let mut map = b.borrow_mut();
            let local = map.entry(self.id).or_insert_with(|| {
                let balancer = self
                    .shared
                    .is_none()
                    .then(|| Balancer::new(self.peers.clone(), self.method));
                Local {
                    figures: stats::figures(&self.name, self.peers.iter().map(|p| Some(&*p.name))),
                    balancer,
                    generation: 0,
                }
            });
            if let Some(b) = &mut local.balancer {
                return f(b, &local.figures);
            }
            let mut b = self.lock_shared().expect("a balancer is local or shared");
            if b.generation() != local.generation {
                // The membership changed: figures for the peers now there.
                local.figures = stats::figures(
                    &self.name,
                    (0..b.slots()).map(|i| b.is_live(i).then(|| &*b.spec(i).name)),
                );
                local.generation = b.generation();
            }
            f(&mut b, &local.figures)
        })
    }

    /// The balancer shared by all workers, locked (`zone`, an ephemeral
    /// upstream).
    pub(crate) fn lock_shared(&self) -> Option<std::sync::MutexGuard<'_, Balancer>> {
        Some(
            self.shared
                .as_ref()?
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// The balancer shared by all workers, for `zone` or an ephemeral upstream.
    pub(crate) fn share_balancer(&mut self) {
        self.shared = Some(std::sync::Mutex::new(Balancer::new(
            self.peers.clone(),
            self.method,
        )));
    }

    /// Choose a peer not tried yet for this request (marking it tried), or
    /// `None` when none can serve. Counts a connection to it (see `finished`).
    pub fn pick(&self, key: &[u8], tried: &mut Tried) -> Option<usize> {
        let mut t = tried.clone();
        if self.health.is_some() {
            self.each_peer(|i, _, _, healthy| {
                if !healthy.load(Ordering::Relaxed) {
                    t.mark(i);
                }
            });
        }
        let now = crate::core::clock::now();
        let i = self.with_balancer(|b, figures| {
            let i = b.pick(key, &t, now)?;
            b.connected(i);
            if let Some(Some(f)) = figures.get(i) {
                f.connected(b.conns(i));
            }
            Some(i)
        })?;
        tried.mark(i);
        Some(i)
    }

    /// `pick`, but with `queue N` in the upstream block a request that finds
    /// every peer it could use at max_conns waits in the queue for one
    /// (leaving it if the client whose request body is `client` leaves).
    pub async fn select(
        &self,
        key: &[u8],
        tried: &mut Tried,
        client: Option<&mut dyn crate::core::request::RequestBody>,
    ) -> Result<usize, queue::Unavailable> {
        if let Some(p) = self.pick(key, tried) {
            return Ok(p);
        }
        match &self.queue {
            Some(q) if self.with_balancer(|b, _| b.at_max_conns(tried)) => {
                queue::wait(self, q, key, tried, client).await
            }
            _ => Err(queue::Unavailable::NoLive),
        }
    }

    /// The attempt on `peer` is over: `ok` false counts a failure. The place
    /// it held goes to the first request waiting in the queue that can use it.
    pub fn finished(&self, peer: usize, ok: bool) {
        self.finished_at(peer, ok, crate::core::clock::now());
    }

    /// [`Upstream::finished`] at `now`, read by the caller.
    pub fn finished_at(&self, peer: usize, ok: bool, now: Instant) {
        self.with_balancer(|b, figures| {
            b.finished(peer, ok, now);
            if let Some(Some(f)) = figures.get(peer) {
                f.finished(ok, b.conns(peer), b.failed_until(peer));
            }
        });
        if self.queue.is_some() {
            queue::serve(self);
        }
    }

    /// The attempt on `peer` was given up because its client left while the
    /// upstream was thinking ([`unless_client_leaves`]): not the peer's
    /// failure; logged at info, as nginx logs a client that closes.
    /// `upstream` names the peer (and URI) for the log line.
    pub fn client_left(
        &self,
        peer: usize,
        req: &crate::core::request::Request<'_>,
        upstream: &str,
    ) {
        self.finished(peer, true);
        crate::error_log!(
            Info,
            "client closed the connection while waiting for the upstream's response header, so the upstream connection is closed too{}, upstream: \"{upstream}\"",
            req.log_context()
        );
    }

    /// The response head of the attempt on `peer` arrived `took` after the
    /// attempt began (the upstream latency figures).
    pub fn responded(&self, peer: usize, took: Duration) {
        self.with_balancer(|_, figures| {
            if let Some(Some(f)) = figures.get(peer) {
                f.responded(took);
            }
        });
    }

    /// A connection to `peer`: an idle pooled one when there is one, else
    /// one another request gives back when the peer was found full
    /// ([`pool::released`]), else a new one within `timeout`; over TLS when
    /// `tls` is given (a pooled one made with the same configuration and
    /// name).
    pub async fn connect(
        &self,
        peer: usize,
        tls: Option<&tls::Dial>,
        timeout: Duration,
    ) -> std::io::Result<UpConn> {
        let addr = self.peer_addr(peer);
        let tag = tls.map_or(0, |d| d.tag);
        if self.keepalive == 0 {
            return pool::connect_from(&addr, None, tls, timeout).await;
        }
        if let Some(c) = pool::take(&self.name, &addr, tag, self.keepalive_timeout) {
            return Ok(c);
        }
        if let Some(c) = pool::released(&self.name, &addr, tag, timeout).await {
            return Ok(c);
        }
        let c = pool::connect_from(&addr, None, tls, timeout).await?;
        pool::unanswered(&self.name, &addr, &c);
        Ok(c)
    }

    /// Give a connection whose exchange finished cleanly back to the pool.
    pub fn release(&self, peer: usize, conn: UpConn) {
        self.release_at(peer, conn, crate::core::clock::now());
    }

    /// [`Upstream::release`] at `now`, read by the caller.
    pub fn release_at(&self, peer: usize, conn: UpConn, now: Instant) {
        if self.keepalive == 0
            || conn.uses() >= self.keepalive_requests
            || conn.age_at(now) >= self.keepalive_time
        {
            return;
        }
        pool::put(&self.name, &self.peer_addr(peer), conn, self.keepalive, now);
    }

    /// The resolved peer in slot `peer` (after the fixed ones).
    fn member(&self, peer: usize) -> Option<Arc<resolve::Member>> {
        self.dynamic.as_ref()?.member(peer - self.addrs.len())
    }

    /// Where peer `peer` listens. A resolved peer's slot keeps it from the
    /// peer's choice until its attempt ends.
    pub fn peer_addr(&self, peer: usize) -> Cow<'_, PeerAddr> {
        match self.addrs.get(peer) {
            Some(a) => Cow::Borrowed(a),
            None => Cow::Owned(
                self.member(peer)
                    .map_or(PeerAddr::Tcp(SocketAddr::from(([0, 0, 0, 0], 0))), |m| {
                        m.addr.clone()
                    }),
            ),
        }
    }

    /// The peer's address as `$upstream_addr` shows it.
    pub fn addr_name(&self, peer: usize) -> Cow<'_, str> {
        match self.names.get(peer) {
            Some(n) => Cow::Borrowed(&**n),
            None => Cow::Owned(
                self.member(peer)
                    .map_or(String::new(), |m| m.spec.name.clone()),
            ),
        }
    }

    /// [`Self::addr_name`], shared: a fixed peer's name is not copied.
    pub fn addr_shared(&self, peer: usize) -> Arc<str> {
        match self.names.get(peer) {
            Some(n) => n.clone(),
            None => self.addr_name(peer).into(),
        }
    }

    /// Peers now: the fixed ones and the resolved ones.
    pub fn peer_count(&self) -> usize {
        match (&self.dynamic, self.lock_shared()) {
            (Some(_), Some(b)) => (0..b.slots()).filter(|&i| b.is_live(i)).count(),
            _ => self.addrs.len(),
        }
    }

    /// `f(slot, peer, address, healthy)` for each peer: the fixed ones, then
    /// the resolved ones (with those that left while attempts on them go on).
    pub fn each_peer(&self, mut f: impl FnMut(usize, &PeerSpec, &PeerAddr, &AtomicBool)) {
        for (i, p) in self.peers.iter().enumerate() {
            f(i, p, &self.addrs[i], &self.healthy[i]);
        }
        if let Some(d) = &self.dynamic {
            d.each(|j, m| f(self.addrs.len() + j, &m.spec, &m.addr, &m.healthy));
        }
    }
}

/// Run `wait` (the wait for an upstream's reply head, once the request body
/// is sent) unless the client leaves first, as nginx does with
/// `proxy_ignore_client_abort off` (`watch`): `None` then, and `wait` is
/// dropped with the connection it borrows, which the caller closes instead
/// of pooling it, so the application sees the client go and no pooled
/// connection is left with a reply nobody waits for.
pub async fn unless_client_leaves<T>(
    watch: bool,
    body: &mut dyn crate::core::request::RequestBody,
    wait: impl std::future::Future<Output = T>,
) -> Option<T> {
    if !watch {
        return Some(wait.await);
    }
    tokio::select! {
        biased;
        r = wait => Some(r),
        () = body.gone() => None,
    }
}

/// A resolved `upstream` reference held by a handler.
#[derive(Clone, Debug)]
pub struct UpstreamRef(pub Arc<OnceLock<Arc<Upstream>>>);

impl UpstreamRef {
    /// The upstream (resolved when the configuration finished loading).
    pub fn arc(&self) -> &Arc<Upstream> {
        self.0
            .get()
            .expect("upstream references are resolved at load")
    }
}

/// One attempt of a request on an upstream, for the `$upstream_*` variables.
#[derive(Clone, Debug, Default)]
pub struct Attempt {
    pub addr: Arc<str>,
    /// 0 when no status was received (shown as 502/504 as nginx does: "-").
    pub status: u16,
    pub connect_ms: Option<u64>,
    pub header_ms: Option<u64>,
    pub response_ms: Option<u64>,
    /// Bytes written to the upstream (`$upstream_bytes_sent`).
    pub sent: u64,
    /// Bytes read from it, head included (`$upstream_bytes_received`).
    pub received: u64,
    /// Bytes of the reply's body (`$upstream_response_length`).
    pub body: u64,
}

/// The `$upstream_*` values of a request: one entry per attempt.
#[derive(Debug, Default)]
pub struct UpstreamVars {
    /// Inline for the usual single attempt (no list allocated per request).
    pub attempts: smallvec::SmallVec<[Attempt; 1]>,
    /// `$proxy_host`, `$proxy_port`.
    pub proxy_host: Arc<str>,
    pub proxy_port: Arc<str>,
    /// The last reply's head text and its end-to-end header fields
    /// (`$upstream_http_NAME`, `$upstream_cookie_NAME`).
    pub head: Option<ReplyHead>,
}

/// A reply head's text and the spans of its (name, value) fields.
pub type ReplyHead = (Arc<str>, Vec<(response::Span, response::Span)>);

impl UpstreamVars {
    /// These values as the request's `$upstream_*` (and `$proxy_*`), shared
    /// with the handler that fills them in.
    pub fn attach(self, req: &mut Request<'_>) -> Rc<RefCell<UpstreamVars>> {
        let v = Rc::new(RefCell::new(self));
        req.state.ext.insert(v.clone());
        v
    }

    /// The value of the last reply's first field named `name` (caseless).
    pub fn field(&self, name: &str) -> Option<&str> {
        let (text, fields) = self.head.as_ref()?;
        response::field(text, fields, name)
    }

    /// The last reply's header fields, in order.
    fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        self.head.iter().flat_map(|(text, fields)| {
            let at = |(a, b): response::Span| &text[a as usize..b as usize];
            fields.iter().map(move |&(n, v)| (at(n), at(v)))
        })
    }
}

/// `$upstream_http_NAME`: the first field whose name, lowercased with `-`
/// as `_`, is NAME.
fn upstream_header(req: &Request<'_>, name: &str, out: &mut Vec<u8>) {
    if let Some(u) = vars(req) {
        let same = |n: &str| {
            n.len() == name.len()
                && n.bytes().zip(name.bytes()).all(|(a, b)| {
                    b == if a == b'-' {
                        b'_'
                    } else {
                        a.to_ascii_lowercase()
                    }
                })
        };
        // Several fields of the name: joined by ", ", as nginx.
        for (i, (_, v)) in u.borrow().fields().filter(|(n, _)| same(n)).enumerate() {
            if i > 0 {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(v.as_bytes());
        }
    }
}

/// `$upstream_cookie_NAME`: the value of cookie NAME in the reply's Set-Cookie fields.
fn upstream_cookie(req: &Request<'_>, name: &str, out: &mut Vec<u8>) {
    if let Some(u) = vars(req) {
        let u = u.borrow();
        let found = u
            .fields()
            .filter(|(n, _)| n.eq_ignore_ascii_case("set-cookie"))
            .find_map(|(_, v)| {
                // Spaces around the name and the value, not tabs, as nginx.
                let (n, rest) = v.split_once('=')?;
                n.trim_matches(' ')
                    .eq_ignore_ascii_case(name)
                    .then(|| rest.split(';').next().unwrap_or(""))
            });
        if let Some(v) = found {
            out.extend_from_slice(v.trim_matches(' ').as_bytes());
        }
    }
}

impl UpstreamVars {
    /// Render one `$upstream_*` variable: attempts joined by ", ".
    pub fn render(&self, what: Field, out: &mut Vec<u8>) {
        for (n, a) in self.attempts.iter().enumerate() {
            if n > 0 {
                out.extend_from_slice(b", ");
            }
            let ms = |out: &mut Vec<u8>, v: Option<u64>| match v {
                Some(ms) => crate::core::clock::push_millis_as_secs(out, ms),
                None => out.push(b'-'),
            };
            match what {
                Field::Addr => out.extend_from_slice(a.addr.as_bytes()),
                Field::Status if a.status == 0 => out.push(b'-'),
                Field::Status => crate::core::vars::push_u64(out, a.status.into()),
                Field::ConnectTime => ms(out, a.connect_ms),
                Field::HeaderTime => ms(out, a.header_ms),
                Field::ResponseTime => ms(out, a.response_ms),
                Field::ResponseLength => crate::core::vars::push_u64(out, a.body),
                Field::BytesReceived => crate::core::vars::push_u64(out, a.received),
                Field::BytesSent => crate::core::vars::push_u64(out, a.sent),
            }
        }
    }
}

/// Which `$upstream_*` variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    Addr,
    Status,
    ConnectTime,
    HeaderTime,
    ResponseTime,
    ResponseLength,
    BytesReceived,
    BytesSent,
}

impl Field {}

/// Whether an upstream's response is buffered: `X-Accel-Buffering: yes | no`
/// from the upstream overrides the location's `*_buffering`, as in nginx.
pub fn buffering(configured: bool, x_accel_buffering: Option<&str>) -> bool {
    match x_accel_buffering.map(str::trim) {
        Some(v) if v.eq_ignore_ascii_case("no") => false,
        Some(v) if v.eq_ignore_ascii_case("yes") => true,
        _ => configured,
    }
}

/// Header names for responses (which hold `&'static str` names): each
/// distinct name is stored once for the life of the process. An upstream
/// could send endless new names, so past `MAX_NAMES` distinct names `None`
/// is returned and the caller drops the header (logged).
pub fn intern_header_name(name: &str) -> Option<&'static str> {
    use std::collections::HashSet;
    use std::sync::Mutex;
    const MAX_NAMES: usize = 4096;
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    thread_local! {
        static LOCAL: RefCell<rustc_hash::FxHashMap<Box<str>, &'static str>> =
            RefCell::new(rustc_hash::FxHashMap::default());
    }
    if let Some(n) = LOCAL.with(|l| l.borrow().get(name).copied()) {
        return Some(n);
    }
    let n = {
        let mut set = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        let set = set.get_or_insert_with(HashSet::new);
        match set.get(name) {
            Some(n) => *n,
            None if set.len() >= MAX_NAMES => return None,
            None => {
                let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
                set.insert(n);
                n
            }
        }
    };
    LOCAL.with(|l| l.borrow_mut().insert(name.into(), n));
    Some(n)
}

/// The `upstream {}` block, balancing, keep-alive pools, health checks and
/// the `$upstream_*` variables of proxy-like handlers.
pub static MODULE: Module = Module {
    name: "upstream",
    nginx_default: &[
        "http_upstream_hash_module",
        "http_upstream_ip_hash_module",
        "http_upstream_least_conn_module",
        "http_upstream_random_module",
        "http_upstream_keepalive_module",
        "http_upstream_zone_module",
    ],
    directives: &[conf::DIRECTIVES, resolver::DIRECTIVES],
    settings: Some(&resolver::ResolverConf::KIND),
    variables: &[
        VarDef::name("upstream_addr", |req, _, out| render(req, Field::Addr, out)),
        VarDef::name("upstream_status", |req, _, out| {
            render(req, Field::Status, out)
        }),
        VarDef::name("upstream_connect_time", |req, _, out| {
            render(req, Field::ConnectTime, out)
        }),
        VarDef::name("upstream_header_time", |req, _, out| {
            render(req, Field::HeaderTime, out)
        }),
        VarDef::name("upstream_response_time", |req, _, out| {
            render(req, Field::ResponseTime, out)
        }),
        VarDef::name("upstream_response_length", |req, _, out| {
            render(req, Field::ResponseLength, out)
        }),
        VarDef::name("upstream_bytes_received", |req, _, out| {
            render(req, Field::BytesReceived, out)
        }),
        VarDef::name("upstream_bytes_sent", |req, _, out| {
            render(req, Field::BytesSent, out)
        }),
        VarDef::prefix("upstream_http_", upstream_header),
        VarDef::prefix("upstream_cookie_", upstream_cookie),
    ],
    hooks: Hooks {
        loaded: Some(conf::finish),
        http: Some(resolve::http_level),
        stream: Some(resolve::stream_level),
        tick: Some(tick),
        metrics: Some(stats::collect),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

/// Each second in a worker: idle connections to peers that left their
/// group are closed, and HTTP/2 sessions idle past their keepalive_timeout.
fn tick() {
    pool::sweep();
    h2::trim_idle();
}

/// The `$upstream_*` values of a request a proxy-like handler served.
pub fn vars(req: &Request<'_>) -> Option<Rc<RefCell<UpstreamVars>>> {
    req.state.ext.get::<RefCell<UpstreamVars>>()
}

fn render(req: &Request<'_>, what: Field, out: &mut Vec<u8>) {
    if let Some(u) = vars(req) {
        u.borrow().render(what, out);
    }
}
