//! A worker: one thread, one current-thread tokio runtime, the listening sockets
//! the main thread assigned to it (its own descriptors for them), and the
//! connections it accepted. Share-nothing: the only shared state is the
//! configuration snapshot; the main thread steers a worker with [`Ctl`] messages.

use super::Shared;
use super::proxy_protocol;
use super::socket::{Bound, Stream};
use super::stats;
use crate::core::errlog::{self, errno_text};
use crate::core::proxy_protocol::ProxyHeader;
use crate::core::route::VirtualHosts;
use crate::error_log;
use crate::http::h1::conn::{self, Peer};
use crate::modules::ssl;
use crate::stream::session;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc};

/// What the main thread tells a worker.
#[derive(Debug)]
pub enum Ctl {
    /// Accept on this socket (the worker's own descriptor) for listener `key`;
    /// `id` names the socket in the main thread's pool.
    Add { key: usize, id: u64, sock: Bound },
    /// Stop accepting on socket `id`; queued connections stay for the others.
    Remove(u64),
    /// A new configuration is live: pick up per-worker settings.
    Reloaded,
    /// Stop accepting and finish. `close_idle`: close idle connections now (a
    /// stop); else they stay until their next request, which is answered with
    /// `Connection: close`, or their timeout (a handover). At `deadline` the
    /// connections left are closed.
    Drain {
        close_idle: bool,
        deadline: Option<Instant>,
    },
    /// Close everything now.
    Stop,
}

/// The main thread's end of a worker.
pub struct Handle {
    /// Number of the worker (thread name `vireo-worker-N`).
    pub id: usize,
    /// Unique over the process's life, reported on `done` when the thread ends.
    pub serial: u64,
    tx: mpsc::UnboundedSender<Ctl>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Pool socket ids this worker accepts on.
    pub sockets: HashSet<u64>,
}

impl Handle {
    pub fn send(&self, c: Ctl) {
        // A worker that has already exited needs nothing any more.
        let _ = self.tx.send(c);
    }

    /// Wait for the thread to end (after it reported on `done`).
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Start worker `id`; its serial is sent on `done` when its thread ends.
pub fn spawn(
    id: usize,
    serial: u64,
    shared: Arc<Shared>,
    done: mpsc::UnboundedSender<u64>,
) -> std::io::Result<Handle> {
    let (tx, rx) = mpsc::unbounded_channel();
    let thread = std::thread::Builder::new()
        .name(format!("vireo-worker-{id}"))
        .spawn(move || {
            // Reported however the thread ends, a panic included.
            struct Done(mpsc::UnboundedSender<u64>, u64);
            impl Drop for Done {
                fn drop(&mut self) {
                    let _ = self.0.send(self.1);
                }
            }
            let _done = Done(done, serial);
            run(id, rx, shared);
        })?;
    Ok(Handle {
        id,
        serial,
        tx,
        thread: Some(thread),
        sockets: HashSet::new(),
    })
}

/// Per-worker connection accounting: as in nginx, worker_connections counts
/// client connections and the worker's connections to upstream servers.
pub struct Slots {
    /// Client and upstream connections.
    active: Cell<usize>,
    /// Client connections (a drain waits for these).
    clients: Cell<usize>,
    max: Cell<usize>,
    drained: Notify,
    /// A slot was given back (upstream connections may be waiting for one).
    freed: Notify,
    /// When idle connections were last closed to free slots.
    reclaimed: Cell<Option<Instant>>,
    /// The configuration's `worker_shutdown_timeout`: client connections
    /// started under it are tracked, and closed that long after a reload.
    cut_after: Cell<Option<Duration>>,
    /// Reloads seen; a tracked connection carries the one it started in.
    epoch: Cell<u64>,
    /// Tracked client connections: (epoch, task). Finished ones are
    /// dropped as the list grows (an idle connection's memory stays as it
    /// is without the directive).
    tracked: RefCell<Vec<(u64, tokio::task::AbortHandle)>>,
}

/// Holds one connection slot; frees it when dropped.
pub struct Slot {
    slots: Rc<Slots>,
    client: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.client {
            "Slot(client)"
        } else {
            "Slot(upstream)"
        })
    }
}

impl Slot {
    /// `spawn` from a function of its own, never inlined: for the tasks of
    /// the rarer kinds of connection (TLS, HTTP/2 sniffing), whose futures
    /// are ~10 KB, so that building one takes a stack frame that size only
    /// when such a connection starts, not in every accept's frame (a frame
    /// is reserved whole, and its stack probes touch each of its pages).
    #[inline(never)]
    pub fn spawn_apart<F>(self, serve: impl FnOnce(Slot) -> F)
    where
        F: std::future::Future<Output = ()> + 'static,
    {
        self.spawn(serve)
    }

    /// Run a client connection's task, `serve` given this slot. Where
    /// `worker_shutdown_timeout` is set the worker tracks the task, to close
    /// it that long after a reload ([`Slots::reloaded`]).
    pub fn spawn<F>(self, serve: impl FnOnce(Slot) -> F)
    where
        F: std::future::Future<Output = ()> + 'static,
    {
        let slots = self.slots.clone();
        let track = self.client && slots.cut_after.get().is_some();
        let task = tokio::task::spawn_local(serve(self));
        if track {
            let mut tracked = slots.tracked.borrow_mut();
            if tracked.len() >= 2 * slots.clients.get().max(64) {
                tracked.retain(|(_, h)| !h.is_finished());
            }
            tracked.push((slots.epoch.get(), task.abort_handle()));
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let s = &self.slots;
        s.active.set(s.active.get() - 1);
        s.freed.notify_one();
        if self.client {
            let n = s.clients.get() - 1;
            s.clients.set(n);
            stats::closed();
            if n == 0 {
                s.drained.notify_waiters();
            }
        }
    }
}

thread_local! {
    /// This worker's slots, for upstream connections.
    static SLOTS: std::cell::RefCell<Option<Rc<Slots>>> = const { std::cell::RefCell::new(None) };
    /// What this worker serves from, for connections passed between its
    /// listeners ([`adopt`]).
    static SHARED: std::cell::RefCell<Option<Arc<Shared>>> = const { std::cell::RefCell::new(None) };
}

/// A slot for a connection to an upstream server, which holds it while it is
/// open (pooled idle ones included). `Ok(None)` outside a worker thread (no
/// accounting there). When every slot is taken, idle client connections are
/// closed to free some, as nginx does, and the request waits for a slot until
/// `deadline` (its connect timeout) rather than failing at once: upstream
/// exchanges in flight free theirs (accepting keeps an eighth of the slots
/// for them, see [`Slots::reserve`]). `Err` at the deadline.
pub async fn upstream_slot(deadline: Instant) -> Result<Option<Slot>, std::io::Error> {
    let Some(slots) = SLOTS.with(|s| s.borrow().clone()) else {
        return Ok(None);
    };
    let mut warned = false;
    loop {
        let freed = slots.freed.notified();
        if let Some(slot) = slots.take(false) {
            return Ok(Some(slot));
        }
        if slots.may_reclaim() && super::idle::reclaim(RECLAIM_BATCH) > 0 && !warned {
            warned = true;
            error_log!(
                Warn,
                "{} worker_connections are not enough, reusing connections",
                slots.max.get()
            );
        }
        if tokio::time::timeout_at(deadline.into(), freed)
            .await
            .is_err()
        {
            error_log!(
                Alert,
                "{} worker_connections are not enough while connecting to upstream",
                slots.max.get()
            );
            return Err(std::io::Error::other(NoSlot));
        }
    }
}

/// Idle connections closed at a time when slots run out (nginx's 32), at
/// most once per `RECLAIM_EVERY` (a reclaim scans every idle connection, and
/// thousands of requests may be waiting for a slot at once).
const RECLAIM_BATCH: usize = 32;
const RECLAIM_EVERY: Duration = Duration::from_millis(20);

/// The error of a connection refused for want of a worker_connections slot.
#[derive(Debug)]
pub struct NoSlot;

impl std::fmt::Display for NoSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("worker_connections are not enough")
    }
}

impl std::error::Error for NoSlot {}

/// Did this connection fail for want of a slot (a local shortage, which
/// nginx answers with 500 and does not hold against the peer)?
pub fn is_no_slot(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|e| e.is::<NoSlot>())
}

/// How long accepting waits before looking again at whether a slot reserve
/// is back.
const RESERVE_WAIT: Duration = Duration::from_millis(5);

impl Slots {
    fn take(self: &Rc<Self>, client: bool) -> Option<Slot> {
        let n = self.active.get();
        if n >= self.max.get() {
            return None;
        }
        self.active.set(n + 1);
        if client {
            self.clients.set(self.clients.get() + 1);
            stats::opened();
        }
        Some(Slot {
            slots: self.clone(),
            client,
        })
    }

    /// A new configuration is live: the client connections started before
    /// it are closed once the old configuration's `worker_shutdown_timeout`
    /// has passed, as nginx's old workers close theirs (without it they
    /// serve on, each request under the configuration live when it starts).
    fn reloaded(self: &Rc<Self>, timeout: Option<Duration>) {
        let epoch = self.epoch.get();
        self.epoch.set(epoch + 1);
        let Some(t) = self.cut_after.replace(timeout) else {
            return;
        };
        let slots = self.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(t).await;
            let old: Vec<tokio::task::AbortHandle> = slots
                .tracked
                .borrow_mut()
                .extract_if(.., |(e, _)| *e <= epoch)
                .map(|(_, h)| h)
                .filter(|h| !h.is_finished())
                .collect();
            if !old.is_empty() {
                error_log!(
                    Notice,
                    "worker_shutdown_timeout: closing {} connection(s) opened before the reload",
                    old.len()
                );
            }
            for h in old {
                h.abort();
            }
        });
    }

    /// Accepting pauses while fewer than an eighth of the slots are free
    /// (nginx's `accept_disabled`): the rest is kept for the upstream
    /// connections the accepted clients' requests will need, and new clients
    /// wait in the kernel's queue instead of getting 502s.
    async fn reserve(&self) {
        while self.max.get() - self.active.get().min(self.max.get()) < self.max.get() / 8 {
            tokio::time::sleep(RESERVE_WAIT).await;
        }
    }

    /// May idle connections be closed for slots now (see `RECLAIM_EVERY`)?
    fn may_reclaim(&self) -> bool {
        let now = Instant::now();
        if self
            .reclaimed
            .get()
            .is_some_and(|t| now.duration_since(t) < RECLAIM_EVERY)
        {
            return false;
        }
        self.reclaimed.set(Some(now));
        true
    }

    /// Resolves once no client connection is left.
    async fn drained(&self) {
        loop {
            let drained = self.drained.notified();
            if self.clients.get() == 0 {
                return;
            }
            drained.await;
        }
    }
}

/// Run worker `id` until told to stop, or its drain ends.
fn run(id: usize, mut rx: mpsc::UnboundedReceiver<Ctl>, shared: Arc<Shared>) {
    crate::sys::bind_worker_arena(id);
    errlog::set_worker_id(id);
    stats::attach(id);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error_log!(Emerg, "worker {id}: cannot start its event loop: {e}");
            return;
        }
    };
    let max = shared.config.load().worker_connections;
    rt.block_on(async move {
        let slots = Rc::new(Slots {
            active: Cell::new(0),
            clients: Cell::new(0),
            max: Cell::new(max),
            drained: Notify::new(),
            freed: Notify::new(),
            reclaimed: Cell::new(None),
            cut_after: Cell::new(shared.config.load().shutdown_timeout),
            epoch: Cell::new(0),
            tracked: RefCell::default(),
        });
        SLOTS.with(|s| *s.borrow_mut() = Some(slots.clone()));
        SHARED.with(|s| *s.borrow_mut() = Some(shared.clone()));
        // The control loop is a task of its own: the future `run_until` drives
        // is polled at every turn of the loop, so it is only the join handle.
        let local = tokio::task::LocalSet::new();
        let control = local.spawn_local(async move {
            tokio::task::spawn_local(crate::modules::timers());
            tokio::task::spawn_local(super::idle::ticker());
            super::idle::reserve(max);
            tokio::task::spawn_local(figures());
            let mut accepting: HashMap<u64, tokio::task::AbortHandle> = HashMap::new();
            let drain = loop {
                match rx.recv().await {
                    Some(Ctl::Add { key, id, sock }) => {
                        let (shared, slots) = (shared.clone(), slots.clone());
                        let task = tokio::task::spawn_local(async move {
                            if let Err(e) = accept_loop(key, sock, shared, slots).await {
                                error_log!(Alert, "accepting on a listening socket failed: {e}");
                            }
                        });
                        if let Some(old) = accepting.insert(id, task.abort_handle()) {
                            old.abort();
                        }
                    }
                    Some(Ctl::Remove(id)) => {
                        if let Some(h) = accepting.remove(&id) {
                            h.abort();
                        }
                    }
                    Some(Ctl::Reloaded) => {
                        let cfg = shared.config.load();
                        slots.max.set(cfg.worker_connections);
                        super::idle::reserve(cfg.worker_connections);
                        slots.reloaded(cfg.shutdown_timeout);
                        super::idle::reloaded();
                    }
                    Some(Ctl::Drain {
                        close_idle,
                        deadline,
                    }) => break Some((close_idle, deadline)),
                    Some(Ctl::Stop) | None => break None,
                }
            };
            // Stop accepting: the sockets (and what is queued on them) stay
            // open in the main thread and in the other workers.
            for h in accepting.values() {
                h.abort();
            }
            let Some((close_idle, mut deadline)) = drain else {
                return;
            };
            if close_idle {
                super::idle::stop_all();
            } else {
                super::idle::drain();
            }
            loop {
                let timeout = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d.into()).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = slots.drained() => break,
                    _ = timeout => {
                        error_log!(
                            Notice,
                            "worker_shutdown_timeout: closing {} connection(s) still open",
                            slots.active.get()
                        );
                        break;
                    }
                    m = rx.recv() => match m {
                        Some(Ctl::Stop) | None => break,
                        Some(Ctl::Drain { close_idle, deadline: d }) => {
                            if close_idle {
                                super::idle::stop_all();
                            }
                            if let Some(d) = d
                                && deadline.is_none_or(|old| d < old)
                            {
                                deadline = Some(d);
                            }
                        }
                        Some(_) => {}
                    },
                }
            }
        });
        if let Err(e) = local.run_until(control).await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
        // Connections left are closed as the task set drops here.
    });
    crate::modules::worker_exit();
}

/// Per-worker figures that are sampled rather than counted.
async fn figures() {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        stats::set_file_cache_entries(crate::modules::static_files::cache::len());
    }
}

/// Accept and serve connections on one listening socket. Each kind of socket
/// has its own loop, polled through a box: a loop's poll keeps a stack frame
/// of its own size (the futures it builds for its connections) instead of
/// one the size of all the kinds together, and a worker's stack stays as
/// deep as what it serves.
async fn accept_loop(
    key: usize,
    bound: Bound,
    shared: Arc<Shared>,
    slots: Rc<Slots>,
) -> std::io::Result<()> {
    type Loop = std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>>>>;
    let run: Loop = match bound {
        Bound::Tcp(l) => Box::pin(accept_tcp(key, l, shared, slots)),
        Bound::Udp(sock) if !shared.config.load().listener(key).stream => {
            // `listen … quic`: HTTP/3.
            Box::pin(async move {
                crate::http::h3::serve(sock, key, shared.clone(), &|| take_slot(&slots)).await
            })
        }
        Bound::Udp(sock) => Box::pin(async move {
            let open = || {
                let slot = take_slot(&slots)?;
                Some((shared.config.load_full(), shared.next_connection(), slot))
            };
            crate::stream::udp::serve(sock, key, &open).await
        }),
        Bound::Unix(l) => Box::pin(accept_unix(key, l, shared, slots)),
    };
    run.await
}

async fn accept_tcp(
    key: usize,
    l: std::net::TcpListener,
    shared: Arc<Shared>,
    slots: Rc<Slots>,
) -> std::io::Result<()> {
    let l = super::socket::TcpListener::new(l)?;
    let mut batch = Batch::default();
    loop {
        let (s, peer) = next_accepted(&slots, || l.accept()).await;
        start_tcp(s, peer, key, &shared, &slots);
        if shared.config.load().multi_accept {
            // Every pending connection, served a batch at a time: a
            // burst's first requests are answered before the rest
            // of it is accepted (nginx serves each as it accepts it).
            batch.start(slots.clients.get());
            while slots.active.get() + slots.max.get() / 8 < slots.max.get() {
                let Ok((s, peer)) = l.try_accept() else {
                    batch.drained();
                    break;
                };
                start_tcp(s, peer, key, &shared, &slots);
                if batch.took_one() {
                    tokio::task::yield_now().await;
                }
            }
        } else {
            // One connection per turn, as nginx without multi_accept:
            // the worker serves what is ready (the new connection's
            // request among it) before it accepts the next.
            tokio::task::yield_now().await;
        }
    }
}

async fn accept_unix(
    key: usize,
    l: std::os::unix::net::UnixListener,
    shared: Arc<Shared>,
    slots: Rc<Slots>,
) -> std::io::Result<()> {
    let l = tokio::net::UnixListener::from_std(l)?;
    loop {
        let (s, _) = next_accepted(&slots, || l.accept()).await;
        let cfg = shared.config.load();
        if let Some(slot) = take_slot(&slots) {
            let id = shared.next_connection();
            if cfg.listener(key).stream {
                let cfg = arc_swap::Guard::into_inner(cfg);
                let client = session::Client::Unix(s);
                session::start(accepted(client, Peer::Unix, key, id), cfg, slot);
            } else {
                let pp = proxy_timeout(cfg.listener(key));
                drop(cfg);
                start(s, Peer::Unix, key, pp, None, id, shared.clone(), slot);
            }
        }
        if !shared.config.load().multi_accept {
            tokio::task::yield_now().await;
        }
    }
}

/// The next connection `accept` gives once the worker has a free slot; a
/// failed accept is handled (`accept_error`) and tried again.
async fn next_accepted<T, F>(slots: &Slots, mut accept: impl FnMut() -> F) -> T
where
    F: std::future::Future<Output = std::io::Result<T>>,
{
    loop {
        slots.reserve().await;
        match accept().await {
            Ok(v) => return v,
            Err(e) => accept_error(e).await,
        }
    }
}

/// With `multi_accept on`, how many connections of a burst a worker with few
/// clients accepts before it serves what is ready (their requests among it),
/// so that a burst on an idle worker has its first requests answered after a
/// few accepts. The yield puts the accepting loop behind every task that is
/// ready, and so does the wake-up for the next burst: a worker serving many
/// clients gets its next turn a round of all their tasks later (some 150 ms
/// at 15,000 keep-alive clients), so from `ACCEPT_BUSY` clients on, and after
/// a first batch's yield, a turn takes every connection queued, and the next
/// burst starts small again once the queue is empty.
const ACCEPT_BATCH: usize = 16;
const ACCEPT_BUSY: usize = 1024;

/// The size of the accepting loop's batch (see `ACCEPT_BATCH`).
struct Batch {
    /// Accepted in the batch so far.
    taken: usize,
    /// The batch's size: `ACCEPT_BATCH`, or all that are queued.
    size: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            taken: 0,
            size: ACCEPT_BATCH,
        }
    }
}

impl Batch {
    /// A turn that found a connection queued and accepted it, on a worker
    /// with `clients` client connections.
    fn start(&mut self, clients: usize) {
        self.taken = 1;
        if clients >= ACCEPT_BUSY {
            self.size = usize::MAX;
        }
    }

    /// One more connection accepted: true when the batch is full and the
    /// worker should serve before it accepts again (after which it takes
    /// every connection still queued).
    fn took_one(&mut self) -> bool {
        self.taken += 1;
        if self.taken < self.size {
            return false;
        }
        self.taken = 0;
        self.size = usize::MAX;
        true
    }

    /// The queue is empty: the next burst starts with `ACCEPT_BATCH`.
    fn drained(&mut self) {
        self.size = ACCEPT_BATCH;
    }
}

/// How long accepting pauses after running out of descriptors or memory: the
/// connections wait in the kernel's queue meanwhile, instead of the worker
/// spinning on an accept that fails at once.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// A failed accept: a connection gone before it was taken costs nothing; running
/// out of descriptors (EMFILE, ENFILE) or memory pauses accepting on this socket.
async fn accept_error(e: std::io::Error) {
    match e.raw_os_error() {
        Some(libc::ECONNABORTED | libc::EINTR | libc::EAGAIN | libc::EPROTO) => {}
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
            error_log!(
                Crit,
                "accept() failed ({}), accepting paused for {} ms",
                errno_text(&e),
                ACCEPT_PAUSE.as_millis()
            );
            tokio::time::sleep(ACCEPT_PAUSE).await;
        }
        _ => {
            error_log!(Alert, "accept() failed ({})", errno_text(&e));
            tokio::time::sleep(ACCEPT_PAUSE).await;
        }
    }
}

/// A connection slot and the accepted socket registered with tokio; `None`
/// (the connection dropped) when the worker is full or registering fails.
fn slot_and_stream(
    slots: &Rc<Slots>,
    s: std::net::TcpStream,
) -> Option<(Slot, tokio::net::TcpStream)> {
    let slot = take_slot(slots)?;
    match tokio::net::TcpStream::from_std(s) {
        Ok(s) => Some((slot, s)),
        Err(e) => {
            error_log!(Alert, "cannot watch a new connection: {e}");
            None
        }
    }
}

/// A connection's place in worker_connections, logged when there is none.
fn take_slot(slots: &Rc<Slots>) -> Option<Slot> {
    stats::accepted();
    let slot = slots.take(true);
    if slot.is_none() {
        error_log!(
            Alert,
            "{} worker_connections are not enough, closing a new connection",
            slots.max.get()
        );
    }
    slot
}

/// A session's start on stream listener `key` for a connection just
/// accepted there.
fn accepted(client: session::Client, peer: Peer, key: usize, id: u64) -> session::Accepted {
    session::Accepted {
        client,
        peer,
        key,
        id,
        carried: session::Carried::default(),
    }
}

/// A plain connection: served at once, or once its PROXY protocol header is
/// read when the listener has `proxy_protocol` (`pp`: its client_header_timeout;
/// the header read replaces `proxy`, the one a passed connection brings).
#[allow(clippy::too_many_arguments)]
fn start<S: Stream>(
    s: S,
    peer: Peer,
    key: usize,
    pp: Option<Duration>,
    proxy: Option<Arc<ProxyHeader>>,
    id: u64,
    shared: Arc<Shared>,
    slot: Slot,
) {
    let Some(timeout) = pp else {
        return crate::http::serve_connection(s, peer, proxy, key, id, shared, slot);
    };
    tokio::task::spawn_local(async move {
        if let Ok(proxy) = proxy_protocol::read(&s, timeout, peer).await {
            crate::http::serve_connection(s, peer, proxy, key, id, shared, slot);
        }
    });
}

/// The PROXY header's deadline on a `proxy_protocol` listener.
fn proxy_timeout(l: &crate::conf::load::Listener) -> Option<Duration> {
    l.proxy_protocol
        .then(|| l.vhosts.default.conf.core.client_header_timeout)
}

/// A TCP connection: served at once, or after a TLS handshake on `ssl`
/// addresses (bounded by ssl_handshake_timeout, holding its connection slot).
fn start_tcp(
    s: std::net::TcpStream,
    peer: std::net::SocketAddr,
    key: usize,
    shared: &Arc<Shared>,
    slots: &Rc<Slots>,
) {
    let cfg = shared.config.load();
    let l = cfg.listener(key);
    if l.stream {
        let Some((slot, s)) = slot_and_stream(slots, s) else {
            return;
        };
        let id = shared.next_connection();
        let a = accepted(session::Client::Tcp(s), Peer::Tcp(peer), key, id);
        return session::start(a, arc_swap::Guard::into_inner(cfg), slot);
    }
    let pp = proxy_timeout(l);
    if !l.ssl {
        drop(cfg);
        let Some(slot) = take_slot(slots) else {
            return;
        };
        let id = shared.next_connection();
        let s = super::socket::Tcp::new(s);
        return start(s, Peer::Tcp(peer), key, pp, None, id, shared.clone(), slot);
    }
    let (vhosts, http2) = (l.vhosts.clone(), l.http2);
    drop(cfg);
    let Some((slot, s)) = slot_and_stream(slots, s) else {
        return;
    };
    let id = shared.next_connection();
    let c = Handshake {
        peer,
        pp,
        proxy: None,
        key,
        id,
        shared: shared.clone(),
    };
    slot.spawn_apart(move |slot| c.run(s, vhosts, http2, slot));
}

/// A TCP connection of an `ssl` address on its way to its TLS handshake.
struct Handshake {
    peer: std::net::SocketAddr,
    /// The listener's PROXY header deadline (`listen … proxy_protocol`).
    pp: Option<Duration>,
    /// The PROXY addresses a passed connection brings.
    proxy: Option<Arc<ProxyHeader>>,
    key: usize,
    id: u64,
    shared: Arc<Shared>,
}

impl Handshake {
    /// The PROXY header when the listener asks for one, the handshake, then
    /// HTTP/2 or HTTP/1 as ALPN chose.
    async fn run(
        self,
        s: tokio::net::TcpStream,
        vhosts: Arc<VirtualHosts>,
        http2: bool,
        slot: Slot,
    ) {
        let peer = self.peer;
        let proxy = match self.pp {
            Some(t) => match proxy_protocol::read(&s, t, Peer::Tcp(peer)).await {
                Ok(p) => p,
                Err(()) => return,
            },
            None => self.proxy,
        };
        let t = ssl::stream::handshake_timeout(&vhosts);
        let tls = match tokio::time::timeout(t, ssl::stream::accept(s, &vhosts, http2)).await {
            Ok(Ok(Some(tls))) => tls,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                error_log!(Info, "SSL handshake failed: {}, client: {peer}", e.0);
                return;
            }
            Err(_) => {
                error_log!(Info, "SSL handshake timed out, client: {peer}");
                return;
            }
        };
        drop(vhosts);
        serve_tls(
            tls,
            Peer::Tcp(peer),
            proxy,
            self.key,
            self.id,
            self.shared,
            slot,
        )
        .await
    }
}

/// A TLS connection of an http listener: HTTP/2 when ALPN chose `h2` and
/// the listener speaks it, else HTTP/1.
async fn serve_tls(
    tls: ssl::stream::TlsStream,
    peer: Peer,
    proxy: Option<Arc<ProxyHeader>>,
    key: usize,
    id: u64,
    shared: Arc<Shared>,
    slot: Slot,
) {
    let (http2, nodelay) = {
        let cfg = shared.config.load();
        let l = cfg.listener(key);
        (l.http2, l.vhosts.default.conf.core.tcp_nodelay)
    };
    if !(tls.info().h2 && http2) {
        return conn::serve(tls, peer, proxy, key, id, shared, slot).await;
    }
    if nodelay {
        tls.set_nodelay();
    }
    let info = crate::http::h2::ConnInfo {
        peer,
        listener: key,
        id,
        fd: std::os::fd::AsRawFd::as_raw_fd(&tls),
        tls: Some(tls.info().clone()),
        proxy,
        born_ms: crate::core::clock::unix_millis(),
        shared,
    };
    crate::http::h2::serve(tls, info, slot).await
}

/// Serve a connection a stream server passed to listener `key` (`pass`)
/// as one accepted there: a stream session, or HTTP after the listener's
/// PROXY header and TLS handshake. A connection already in TLS is not
/// handshaken again (its ALPN says whether it speaks HTTP/2); the caller
/// has made sure it is not asked for a PROXY header. It keeps its number
/// and its worker_connections slot.
pub fn adopt(a: session::Accepted, slot: Slot) {
    let Some(shared) = SHARED.with(|s| s.borrow().clone()) else {
        return;
    };
    let cfg = shared.config.load_full();
    let l = cfg.listener(a.key);
    if l.stream {
        return session::start(a, cfg, slot);
    }
    let (pp, ssl, vhosts, http2) = (proxy_timeout(l), l.ssl, l.vhosts.clone(), l.http2);
    drop(cfg);
    let session::Accepted {
        client,
        peer,
        key,
        id,
        carried,
    } = a;
    let proxy = carried.proxy;
    match client {
        session::Client::Tcp(s) => match (peer, ssl) {
            (Peer::Tcp(peer), true) => {
                let c = Handshake {
                    peer,
                    pp,
                    proxy,
                    key,
                    id,
                    shared,
                };
                slot.spawn(move |slot| c.run(s, vhosts, http2, slot));
            }
            _ => match s.into_std() {
                Ok(s) => start(
                    super::socket::Tcp::new(s),
                    peer,
                    key,
                    pp,
                    proxy,
                    id,
                    shared,
                    slot,
                ),
                Err(e) => error_log!(Alert, "cannot pass a connection: {e}"),
            },
        },
        session::Client::Unix(s) => start(s, peer, key, pp, proxy, id, shared, slot),
        session::Client::Tls(tls) => {
            slot.spawn(move |slot| serve_tls(*tls, peer, proxy, key, id, shared, slot))
        }
        session::Client::Udp(_) | session::Client::Gone | session::Client::Passed => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_served_after_its_first_batch_then_what_waits_is_taken_whole() {
        let mut b = Batch::default();
        b.start(0);
        assert!(!(1..ACCEPT_BATCH - 1).any(|_| b.took_one()));
        assert!(b.took_one(), "the first batch is full: serve");
        assert!(!(0..100_000).any(|_| b.took_one()), "then all that wait");
        b.drained();
        b.start(ACCEPT_BUSY - 1);
        assert!(!(1..ACCEPT_BATCH - 1).any(|_| b.took_one()));
        assert!(b.took_one(), "the next burst starts small");
    }

    #[test]
    fn a_worker_with_many_clients_takes_every_queued_connection_in_one_turn() {
        let mut b = Batch::default();
        b.start(ACCEPT_BUSY);
        assert!(!(0..100_000).any(|_| b.took_one()));
        b.drained();
        b.start(3);
        assert!((1..ACCEPT_BATCH).any(|_| b.took_one()));
    }
}
