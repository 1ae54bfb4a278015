//! Server: listening sockets, worker threads, signals, reload, binary upgrade,
//! process lifetime. The main thread owns a pool of listening sockets (each kept
//! open from start to exit, or until a reload removes its address), tells each
//! worker which of them to accept on, and otherwise only answers signals.
//!
//! Reload (SIGHUP): the new configuration is loaded and validated completely,
//! including binding any new address, before anything changes; then it is
//! swapped in at once (`ArcSwap`). Requests in flight keep the snapshot they
//! started with; the next request of every kept-alive connection takes the new
//! one, so no connection is closed. Sockets of addresses still configured stay
//! open throughout, so nothing queued on them is lost. See docs/operations.md.

pub mod conf;
pub mod guard;
pub mod idle;
pub mod inherit;
pub mod proxy_protocol;
pub mod socket;
pub mod stats;
pub mod tls_io;
pub mod worker;

use crate::conf::ast::Span;
use crate::conf::load::{self, Config, Listener, Source};
use crate::conf::model::{ListenAddr, SockOpts};
use crate::core::errlog::{self, Level, errno_text};
use crate::core::module::Module;
use crate::error_log;
use arc_swap::ArcSwap;
use socket::Bound;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio::sync::mpsc;
use worker::Ctl;

/// State shared by all workers: the live configuration snapshot.
pub struct Shared {
    /// Each request takes the snapshot live when it starts.
    pub config: ArcSwap<Config>,
    connections: AtomicU64,
}

impl Shared {
    /// Serial number of a new connection (`$connection`).
    pub fn next_connection(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// How the configuration was loaded, to load it again on reload.
pub struct Options {
    pub source: Source,
    /// `-p`, `-g`, `-e`: applied again to every reload.
    pub cmd: load::Cmdline,
    /// Sockets handed over at start (upgrade, systemd); see [`inherit::collect`].
    pub inherited: inherit::Inherited,
}

/// One listening socket of the pool.
struct Sock {
    id: u64,
    bound: Bound,
}

/// The sockets of one listening address. Shared mode: every worker accepts on
/// every socket (usually one). `reuseport`: socket `i` belongs to worker
/// `i % workers`; there are at least as many sockets as workers, and a socket is
/// never closed while its address is configured (closing a SO_REUSEPORT socket
/// would reset the connections queued on it), so after the worker count goes
/// down some workers take two.
struct Entry {
    key: usize,
    addr: ListenAddr,
    reuseport: bool,
    backlog: i32,
    opts: SockOpts,
    sockets: Vec<Sock>,
}

/// Sockets a new configuration needs, bound before anything is changed.
#[derive(Default)]
struct Plan {
    new_entries: Vec<Entry>,
    more: Vec<(usize, Vec<Sock>)>,
    relisten: Vec<(usize, i32)>,
    /// Socket options changed by a reload, set on the address's sockets.
    reconfigure: Vec<(usize, SockOpts)>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Running,
    /// QUIT: workers drain; the process ends when the last one has.
    Draining,
    /// TERM / INT: workers stop now.
    Stopping,
}

/// The new binary started by USR2.
struct Successor {
    child: std::process::Child,
}

struct Master {
    opts: Options,
    shared: Arc<Shared>,
    pool: Vec<Entry>,
    next_sock: u64,
    workers: Vec<worker::Handle>,
    /// Workers told to drain (fewer workers after a reload, or QUIT).
    retiring: Vec<worker::Handle>,
    next_serial: u64,
    done_tx: mpsc::UnboundedSender<u64>,
    done_rx: mpsc::UnboundedReceiver<u64>,
    phase: Phase,
    successor: Option<Successor>,
    /// The pid file as written, and whether it was renamed to `.oldbin` for an upgrade.
    pid_file: Option<PathBuf>,
    pid_fd: Option<std::fs::File>,
    pid_renamed: bool,
    error_log: Vec<(crate::core::errlog::Dest, Level)>,
    /// Unix socket files to remove at exit.
    unix_paths: Vec<PathBuf>,
}

/// What loading a configuration left behind is not kept resident: the
/// allocator's free pages now, and the code and constant data that only
/// loading ran and read at a worker's next tick.
fn release_after_load() {
    crate::sys::release_free_memory();
    idle::loaded();
}

/// Bind the listeners, start the workers, and serve until a stop signal.
pub fn run(config: Config, mut opts: Options) -> io::Result<()> {
    guard::init();
    stats::STARTED.store(unix_now(), Ordering::Relaxed);
    stats::LAST_RELOAD.store(unix_now(), Ordering::Relaxed);
    // Take over the stop signals before any socket listens: a signal sent as soon
    // as the port answers must stop the server cleanly, not kill it by default action.
    let mut signals = Signals::install()?;
    for n in &opts.inherited.notes {
        error_log!(Warn, "{n}");
    }
    if let Some(fd) = opts.inherited.quic_link.take()
        && let Err(e) = crate::http::h3::link::adopt(fd)
    {
        error_log!(Alert, "QUIC link to the old binary not started: {e}");
    }
    if let Some(n) = config.rlimit_nofile {
        raise_nofile(n);
    }
    let upgrade = opts.inherited.upgrade;
    let daemon = config.daemon && !upgrade;
    // The pid file is written before any port answers, so a client that sees the
    // port open finds the pid file too; it is removed again if binding fails.
    // Detached (daemon), the pid is known only after the fork; started by an
    // upgrade, the pid file appears once the workers run: it tells the old binary
    // that the new one is ready.
    let early_pid = !daemon && !upgrade;
    let mut pid_fd = None;
    if early_pid && let Some(p) = &config.pid {
        pid_fd = Some(write_pid(p, config.pid_at.as_ref())?);
    }
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let workers = config.workers;
    let pid_file = config.pid.clone();
    let error_log = config.error_log.clone();
    let mut m = Master {
        shared: Arc::new(Shared {
            config: ArcSwap::from_pointee(config),
            connections: AtomicU64::new(0),
        }),
        opts,
        pool: Vec::new(),
        next_sock: 0,
        workers: Vec::new(),
        retiring: Vec::new(),
        next_serial: 0,
        done_tx,
        done_rx,
        phase: Phase::Running,
        successor: None,
        pid_file,
        pid_fd,
        pid_renamed: false,
        error_log,
        unix_paths: Vec::new(),
    };
    if let Err(e) = m.start(workers, daemon, upgrade) {
        // Nothing served yet: undo what was set up.
        m.stop_workers();
        for w in m.retiring.drain(..) {
            w.join();
        }
        if !upgrade {
            m.remove_pid_file();
        }
        return Err(e);
    }
    sd_notify(&format!("READY=1\nMAINPID={}", std::process::id()));
    m.serve(&mut signals);
    m.finish();
    Ok(())
}

impl Master {
    /// Bind (or adopt) the listening sockets, detach, drop privileges, start
    /// the workers; started by an upgrade, write the pid file last.
    fn start(&mut self, workers: usize, daemon: bool, upgrade: bool) -> io::Result<()> {
        let config = self.shared.config.load_full();
        let plan = self.plan(&config, workers)?;
        self.commit(plan);
        for (addr, _) in std::mem::take(&mut self.opts.inherited.sockets) {
            error_log!(
                Notice,
                "inherited socket {addr} is not in the configuration, closed"
            );
        }
        // The product and version first, as nginx's start notices.
        error_log!(Notice, "vireo/{}", crate::core::vars::VERSION);
        for l in &config.listeners {
            error_log!(Notice, "listening on {}", l.addr);
        }
        if daemon {
            if crate::sys::thread_count() > 1 {
                return Err(io::Error::other(
                    "cannot detach (daemon on): more than one thread",
                ));
            }
            crate::sys::daemonize(
                config
                    .error_log
                    .iter()
                    .any(|(d, _)| *d == crate::core::errlog::Dest::Stderr),
            )?;
            if let Some(p) = &config.pid {
                self.pid_fd = Some(write_pid(p, config.pid_at.as_ref())?);
            }
        }
        if let Some((name, uid, gid)) = &config.user {
            if crate::sys::is_root() {
                crate::sys::drop_privileges(name, *uid, *gid, config.net_raw).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("switching to user \"{name}\" failed ({})", errno_text(&e)),
                    )
                })?;
                error_log!(Notice, "running as user \"{name}\" (uid {uid}, gid {gid})");
            } else {
                error_log!(
                    Notice,
                    "the \"user\" directive applies only when started as root, ignored"
                );
            }
        }
        self.unix_paths = unix_paths(&config.listeners);
        self.resize(workers, None)?;
        self.assign();
        if upgrade {
            if let Some(p) = &self.pid_file {
                self.pid_fd = Some(write_pid(p, config.pid_at.as_ref())?);
            }
            error_log!(
                Notice,
                "started by a binary upgrade, with the old binary's sockets"
            );
        }
        Ok(())
    }

    /// Bind what `cfg` needs beyond the pool (new addresses, more reuseport
    /// sockets for more workers); nothing is changed yet. Sockets handed over at
    /// start are used before anything is bound.
    fn plan(&mut self, cfg: &Config, workers: usize) -> io::Result<Plan> {
        let overlap = overlapping(&cfg.listeners);
        let mut plan = Plan::default();
        for (l, &o) in cfg.listeners.iter().zip(&overlap) {
            let existing = self
                .pool
                .iter()
                .find(|e| e.key == l.key)
                .map(|e| (e.reuseport, e.sockets.len(), e.backlog, &e.opts));
            if let Some((reuseport, have, backlog, opts)) = existing {
                if opts != &l.opts {
                    // IPV6_V6ONLY cannot change on a bound socket.
                    let mut new = l.opts.clone();
                    if opts.ipv6only != new.ipv6only {
                        error_log!(
                            Warn,
                            "\"ipv6only\" of {} changes only with a restart or binary upgrade, kept",
                            l.addr
                        );
                        new.ipv6only = opts.ipv6only;
                    }
                    plan.reconfigure.push((l.key, new));
                }
                if reuseport != l.reuseport {
                    error_log!(
                        Warn,
                        "\"reuseport\" of {} changes only with a restart or binary upgrade, kept {}",
                        l.addr,
                        if reuseport { "on" } else { "off" }
                    );
                }
                if reuseport && have < workers {
                    let mut more = Vec::new();
                    for _ in have..workers {
                        more.push(self.bind(l, true)?);
                    }
                    plan.more.push((l.key, more));
                }
                if backlog != l.backlog {
                    plan.relisten.push((l.key, l.backlog));
                }
                continue;
            }
            let inherited = self.opts.inherited.take(&l.addr);
            let mut reuseport = l.reuseport;
            if reuseport && !inherited.is_empty() && !inherited.iter().all(Bound::reuse_port) {
                error_log!(
                    Warn,
                    "inherited socket {} has no SO_REUSEPORT: shared by the workers",
                    l.addr
                );
                reuseport = false;
            }
            let mut sockets: Vec<Sock> = inherited
                .into_iter()
                .map(|bound| {
                    if let Err(e) = bound.relisten(l.backlog) {
                        error_log!(Warn, "listen() on inherited {} failed ({e})", l.addr);
                    }
                    bound.configure(&l.addr, &l.opts, None);
                    self.sock(bound)
                })
                .collect();
            let want = if reuseport { workers } else { 1 };
            while sockets.len() < want {
                sockets.push(self.bind(l, reuseport || o)?);
            }
            plan.new_entries.push(Entry {
                key: l.key,
                addr: l.addr.clone(),
                reuseport,
                backlog: l.backlog,
                opts: l.opts.clone(),
                sockets,
            });
        }
        Ok(plan)
    }

    fn sock(&mut self, bound: Bound) -> Sock {
        self.next_sock += 1;
        Sock {
            id: self.next_sock,
            bound,
        }
    }

    /// Bind a socket for `l`; a failure names its `listen` directive's file:line.
    fn bind(&mut self, l: &Listener, reuseport: bool) -> io::Result<Sock> {
        let b = socket::bind(&l.addr, reuseport, l.backlog, &l.opts).map_err(|e| {
            let msg = format_args!("bind() to {} failed ({})", l.addr, errno_text(&e));
            io::Error::new(e.kind(), load::located(msg, Some(&l.span)))
        })?;
        Ok(self.sock(b))
    }

    fn commit(&mut self, plan: Plan) {
        self.pool.extend(plan.new_entries);
        for (key, socks) in plan.more {
            if let Some(e) = self.pool.iter_mut().find(|e| e.key == key) {
                e.sockets.extend(socks);
            }
        }
        for (key, opts) in plan.reconfigure {
            if let Some(e) = self.pool.iter_mut().find(|e| e.key == key) {
                for s in &e.sockets {
                    s.bound.configure(&e.addr, &opts, Some(&e.opts));
                }
                e.opts = opts;
            }
        }
        for (key, backlog) in plan.relisten {
            if let Some(e) = self.pool.iter_mut().find(|e| e.key == key) {
                e.backlog = backlog;
                for s in &e.sockets {
                    if let Err(err) = s.bound.relisten(backlog) {
                        error_log!(Warn, "listen() on {} failed ({err})", e.addr);
                    }
                }
            }
        }
    }

    /// Start or retire workers until `n` run. Retired ones drain (handover).
    fn resize(&mut self, n: usize, deadline: Option<Instant>) -> io::Result<()> {
        while self.workers.len() < n {
            self.next_serial += 1;
            let w = worker::spawn(
                self.workers.len(),
                self.next_serial,
                self.shared.clone(),
                self.done_tx.clone(),
            )?;
            self.workers.push(w);
        }
        while self.workers.len() > n {
            let w = self.workers.pop().expect("more workers than wanted");
            w.send(Ctl::Drain {
                close_idle: false,
                deadline,
            });
            self.retiring.push(w);
        }
        stats::WORKERS.store(self.workers.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Tell each worker which sockets to accept on (only what changed).
    fn assign(&mut self) {
        let n = self.workers.len();
        for (j, w) in self.workers.iter_mut().enumerate() {
            let mut want = std::collections::HashSet::new();
            for e in &self.pool {
                for (i, s) in e.sockets.iter().enumerate() {
                    if !e.reuseport || i % n == j {
                        want.insert(s.id);
                        if !w.sockets.contains(&s.id) {
                            match s.bound.try_clone() {
                                Ok(sock) => w.send(Ctl::Add {
                                    key: e.key,
                                    id: s.id,
                                    sock,
                                }),
                                Err(err) => {
                                    error_log!(
                                        Alert,
                                        "worker {j} cannot accept on {}: dup() failed ({})",
                                        e.addr,
                                        errno_text(&err)
                                    );
                                    want.remove(&s.id);
                                }
                            }
                        }
                    }
                }
            }
            for id in w.sockets.difference(&want) {
                w.send(Ctl::Remove(*id));
            }
            w.sockets = want;
        }
    }

    /// Answer signals until the workers are gone.
    fn serve(&mut self, signals: &mut Signals) {
        let rt = signals.rt.take().expect("signal runtime");
        release_after_load();
        rt.block_on(async {
            loop {
                if self.phase != Phase::Running
                    && self.workers.is_empty()
                    && self.retiring.is_empty()
                {
                    break;
                }
                let sig = tokio::select! {
                    s = signals.next() => s,
                    Some(serial) = self.done_rx.recv() => {
                        self.worker_done(serial);
                        continue;
                    }
                };
                match sig {
                    Sig::Term | Sig::Int => {
                        if self.phase != Phase::Stopping {
                            error_log!(Notice, "signal received, exiting now");
                            self.stop_workers();
                        }
                    }
                    Sig::Quit => {
                        if self.phase == Phase::Running {
                            self.graceful();
                        }
                    }
                    Sig::Usr1 => reopen_logs(&self.shared),
                    Sig::Hup => {
                        if self.phase == Phase::Running {
                            self.reload();
                        } else {
                            error_log!(Notice, "SIGHUP ignored: shutting down");
                        }
                    }
                    Sig::Usr2 => {
                        if self.phase == Phase::Running {
                            self.upgrade();
                        }
                    }
                    Sig::Chld => self.check_successor(),
                }
            }
        });
    }

    fn stop_workers(&mut self) {
        sd_notify("STOPPING=1");
        self.phase = Phase::Stopping;
        for w in self.workers.iter().chain(&self.retiring) {
            w.send(Ctl::Stop);
        }
        self.retiring.append(&mut self.workers);
        self.pool.clear();
    }

    /// QUIT: stop accepting, let connections finish. With a new binary running,
    /// this is a handover: idle kept-alive connections are not cut, each ends
    /// after its next response (`Connection: close`) so no request meets a close;
    /// otherwise idle connections close at once, as a stop.
    fn graceful(&mut self) {
        self.check_successor();
        let handover = self.successor.is_some();
        error_log!(
            Notice,
            "signal received, gracefully shutting down{}",
            if handover {
                " (handing over to the new binary)"
            } else {
                ""
            }
        );
        sd_notify("STOPPING=1");
        self.phase = Phase::Draining;
        let deadline = self
            .shared
            .config
            .load()
            .shutdown_timeout
            .map(|t| Instant::now() + t);
        for w in self.workers.iter().chain(&self.retiring) {
            w.send(Ctl::Drain {
                close_idle: !handover,
                deadline,
            });
        }
        self.retiring.append(&mut self.workers);
        // The listening sockets close once the workers have let go of them too
        // (the new binary keeps its own descriptors).
        self.pool.clear();
    }

    fn worker_done(&mut self, serial: u64) {
        if let Some(i) = self.retiring.iter().position(|w| w.serial == serial) {
            self.retiring.swap_remove(i).join();
            return;
        }
        if let Some(i) = self.workers.iter().position(|w| w.serial == serial) {
            // A live worker ended on its own (its event loop failed): start another
            // in its place; it gets the same sockets.
            self.next_serial += 1;
            let id = self.workers[i].id;
            error_log!(Alert, "worker {id} exited unexpectedly, starting a new one");
            match worker::spawn(
                id,
                self.next_serial,
                self.shared.clone(),
                self.done_tx.clone(),
            ) {
                Ok(w) => std::mem::replace(&mut self.workers[i], w).join(),
                Err(e) => {
                    error_log!(Alert, "cannot start a worker: {e}");
                    self.workers.remove(i).join();
                }
            }
            self.assign();
        }
    }

    /// SIGHUP: load the configuration again; apply it only if all of it is good.
    fn reload(&mut self) {
        error_log!(Notice, "signal received, reconfiguring");
        sd_notify("RELOADING=1");
        match self.try_reload() {
            Ok(()) => {
                stats::RELOADS.fetch_add(1, Ordering::Relaxed);
                stats::LAST_RELOAD.store(unix_now(), Ordering::Relaxed);
                error_log!(Notice, "configuration reloaded");
                release_after_load();
            }
            Err(e) => {
                stats::RELOAD_FAILURES.fetch_add(1, Ordering::Relaxed);
                error_log!(
                    Error,
                    "reload failed, still serving the previous configuration: {e}"
                );
            }
        }
        sd_notify("READY=1");
    }

    fn try_reload(&mut self) -> Result<(), String> {
        let mut new = load::load(&self.opts.source, &self.opts.cmd, crate::modules::MODULES)
            .map_err(|e| e.to_string())?;
        let old = self.shared.config.load_full();
        // Everything that can fail comes first.
        let errlog = if new.error_log != self.error_log {
            Some(new.open_error_log()?)
        } else {
            None
        };
        let plan = self.plan(&new, new.workers).map_err(|e| e.to_string())?;
        let mut new_pid_fd = None;
        if new.pid != self.pid_file
            && !self.pid_renamed
            && let Some(p) = &new.pid
        {
            new_pid_fd = Some(write_pid(p, new.pid_at.as_ref()).map_err(|e| e.to_string())?);
        }
        // From here on nothing fails: the new configuration goes live.
        if let Some(t) = errlog {
            errlog::set(t);
            self.error_log = new.error_log.clone();
        }
        errlog::set_debug_connections(&new.debug_connection);
        if new.pid != self.pid_file && !self.pid_renamed {
            self.remove_pid_file();
            self.pid_file = new.pid.clone();
            self.pid_fd = new_pid_fd;
        }
        for n in &new.notices {
            errlog::log(Level::Notice, format_args!("{n}"));
        }
        if new.user != old.user {
            error_log!(Warn, "a change of \"user\" applies only at restart");
        }
        if new.rlimit_nofile != old.rlimit_nofile
            && let Some(n) = new.rlimit_nofile
        {
            raise_nofile(n);
        }
        // Listeners no longer configured stay known to the connections on them.
        let mut retired: Vec<Listener> = Vec::new();
        for l in old.listeners.iter().chain(&old.retired) {
            if !new.listeners.iter().any(|n| n.key == l.key)
                && !retired.iter().any(|r| r.key == l.key)
            {
                let mut l = l.clone();
                l.retired = true;
                retired.push(l);
            }
        }
        new.retired = retired;
        let workers = new.workers;
        let deadline = new.shutdown_timeout.map(|t| Instant::now() + t);
        let added: Vec<String> = new
            .listeners
            .iter()
            .filter(|l| !self.pool.iter().any(|e| e.key == l.key))
            .map(|l| l.addr.to_string())
            .collect();
        self.commit(plan);
        // Sockets of addresses no longer configured: closed once the workers let go.
        let keep: Vec<usize> = new.listeners.iter().map(|l| l.key).collect();
        let (kept, removed): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut self.pool)
            .into_iter()
            .partition(|e| keep.contains(&e.key));
        self.pool = kept;
        self.unix_paths = unix_paths(&new.listeners);
        self.shared.config.store(Arc::new(new));
        for a in &added {
            error_log!(Notice, "listening on {a}");
        }
        self.check_successor();
        for e in &removed {
            error_log!(Notice, "no longer listening on {}", e.addr);
            // Its file goes with it, unless a new binary holds the socket too.
            if let ListenAddr::Unix(p) = &e.addr
                && self.successor.is_none()
            {
                let _ = std::fs::remove_file(p);
            }
        }
        if let Err(e) = self.resize(workers, deadline) {
            error_log!(Alert, "cannot start a worker: {e}");
        }
        self.assign();
        drop(removed);
        for w in &self.workers {
            w.send(Ctl::Reloaded);
        }
        Ok(())
    }

    /// USR2: start the new binary (this program's file as it is now on disk)
    /// with the listening sockets; the old pid file becomes `<pid>.oldbin`.
    fn upgrade(&mut self) {
        self.check_successor();
        if self.successor.is_some() {
            error_log!(
                Warn,
                "SIGUSR2 ignored: a new binary is already running; QUIT this one or the new one first"
            );
            return;
        }
        let exe = match std::env::current_exe() {
            Ok(p) => current_binary(p),
            Err(e) => {
                error_log!(Alert, "cannot find this program's file: {e}");
                return;
            }
        };
        if let Some(p) = &self.pid_file {
            let old = oldbin(p);
            if let Err(e) = std::fs::rename(p, &old) {
                error_log!(
                    Alert,
                    "rename() \"{}\" to \"{}\" failed ({}), binary upgrade aborted",
                    p.display(),
                    old.display(),
                    errno_text(&e)
                );
                return;
            }
            self.pid_renamed = true;
        }
        let mut fds: Vec<i32> = self
            .pool
            .iter()
            .flat_map(|e| e.sockets.iter().map(|s| s.bound.as_raw_fd()))
            .collect();
        // QUIC datagrams of either binary's connections that the other reads
        // cross over it while both run; the child's end is closed here once
        // it has it.
        let link = crate::http::h3::link::successor()
            .inspect_err(|e| {
                error_log!(
                    Alert,
                    "binary upgrade: no QUIC link to the new binary ({e}): QUIC datagrams the other binary reads are lost"
                )
            })
            .ok();
        let env = inherit::env_value(self.pool.iter().flat_map(|e| {
            e.sockets
                .iter()
                .map(move |s| (s.bound.as_raw_fd(), &e.addr))
        }));
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(std::env::args_os().skip(1))
            .env(inherit::ENV, env)
            .env_remove(crate::http::h3::link::ENV)
            .env_remove("LISTEN_FDS")
            .env_remove("LISTEN_PID")
            .env_remove("LISTEN_FDNAMES");
        if let Some(fd) = &link {
            let fd = std::os::fd::AsRawFd::as_raw_fd(fd);
            fds.push(fd);
            cmd.env(crate::http::h3::link::ENV, fd.to_string());
        }
        match crate::sys::spawn_keeping_fds(&mut cmd, fds) {
            Ok(child) => {
                stats::UPGRADES.fetch_add(1, Ordering::Relaxed);
                error_log!(
                    Notice,
                    "binary upgrade: started {} (pid {}) with the listening sockets",
                    exe.display(),
                    child.id()
                );
                self.successor = Some(Successor { child });
            }
            Err(e) => {
                error_log!(
                    Alert,
                    "binary upgrade: cannot start {} ({})",
                    exe.display(),
                    errno_text(&e)
                );
                self.restore_pid_file();
            }
        }
    }

    /// Has the new binary exited? Then this process is in charge again.
    fn check_successor(&mut self) {
        let Some(s) = &mut self.successor else {
            return;
        };
        match s.child.try_wait() {
            Ok(None) => {}
            Ok(Some(st)) => {
                error_log!(
                    Alert,
                    "the new binary (pid {}) exited ({st}){}",
                    s.child.id(),
                    if self.phase == Phase::Running {
                        ", this one goes on serving"
                    } else {
                        ""
                    }
                );
                self.successor = None;
                self.restore_pid_file();
            }
            Err(e) => error_log!(Alert, "waitpid() failed: {e}"),
        }
    }

    fn restore_pid_file(&mut self) {
        if !self.pid_renamed {
            return;
        }
        if let Some(p) = &self.pid_file
            && let Err(e) = std::fs::rename(oldbin(p), p)
        {
            error_log!(
                Alert,
                "restoring \"{}\" failed ({})",
                p.display(),
                errno_text(&e)
            );
        }
        self.pid_renamed = false;
    }

    /// After the last worker: remove the pid file and unix socket files, unless
    /// a new binary took them over.
    fn finish(&mut self) {
        for w in self.workers.drain(..).chain(self.retiring.drain(..)) {
            w.join();
        }
        self.check_successor();
        let handed_over = self.successor.is_some();
        if !handed_over {
            // As nginx: unix socket files go away with the server.
            for p in &self.unix_paths {
                let _ = std::fs::remove_file(p);
            }
        }
        self.remove_pid_file();
        error_log!(Notice, "exiting");
    }

    /// Remove the pid file (`.oldbin` after an upgrade). Where the process may no
    /// longer delete it (it switched to `user`, and the folder is not that
    /// user's), it is emptied through the descriptor kept from writing it: an
    /// empty pid file names no process.
    fn remove_pid_file(&mut self) {
        let Some(p) = &self.pid_file else {
            return;
        };
        let path = if self.pid_renamed {
            oldbin(p)
        } else {
            p.clone()
        };
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                if let Some(f) = &self.pid_fd {
                    let _ = f.set_len(0);
                }
                error_log!(
                    Notice,
                    "cannot remove \"{}\" ({}), emptied it",
                    path.display(),
                    errno_text(&e)
                );
            }
            _ => {}
        }
        self.pid_fd = None;
    }
}

/// `<pid file>.oldbin`.
fn oldbin(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".oldbin");
    PathBuf::from(s)
}

/// The program file to start for an upgrade: when the running binary was
/// replaced on disk, /proc/self/exe reads "… (deleted)"; the path names the new file.
fn current_binary(p: PathBuf) -> PathBuf {
    match p.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(s) => PathBuf::from(s),
        None => p,
    }
}

fn unix_paths(listeners: &[Listener]) -> Vec<PathBuf> {
    listeners
        .iter()
        .filter_map(|l| match &l.addr {
            ListenAddr::Unix(p) => Some(p.clone()),
            ListenAddr::Tcp(_) | ListenAddr::Udp(_) => None,
        })
        .collect()
}

/// Write the pid file; the descriptor is kept (see `Master::remove_pid_file`).
/// A failure names the `pid` directive's file:line (`at`).
fn write_pid(p: &Path, at: Option<&Span>) -> io::Result<std::fs::File> {
    use std::io::Write;
    let open = || -> io::Result<std::fs::File> {
        let mut f = std::fs::File::create(p)?;
        f.write_all(format!("{}\n", std::process::id()).as_bytes())?;
        Ok(f)
    };
    open().map_err(|e| {
        let msg = format_args!("open() \"{}\" failed ({})", p.display(), errno_text(&e));
        io::Error::new(e.kind(), load::located(msg, at))
    })
}

fn raise_nofile(n: u64) {
    if let Err(e) = crate::sys::raise_nofile(n) {
        error_log!(
            Warn,
            "setrlimit(RLIMIT_NOFILE, {n}) failed ({})",
            errno_text(&e)
        );
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Tell systemd (Type=notify) about the service's state, when it asked
/// (`NOTIFY_SOCKET`). `MAINPID` lets a new binary take over as the main process.
pub fn sd_notify(msg: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(msg.as_bytes(), &a))
    } else {
        sock.send_to(msg.as_bytes(), Path::new(&path))
    };
    if let Err(e) = sent {
        error_log!(Warn, "sd_notify to \"{}\" failed: {e}", path.display());
    }
}

/// For each listener: does it share its port with a wildcard listener of the same
/// family (`listen 80;` beside `listen 127.0.0.1:80;`)? nginx serves both; on Linux
/// the two sockets can only be bound together with SO_REUSEPORT on both, and the
/// kernel then hands a connection to the most specific one, which is exactly the
/// nginx rule. (Side effect, for these sockets only: a second process of the same
/// user could bind the same addresses too.)
fn overlapping(listeners: &[Listener]) -> Vec<bool> {
    // (UDP addresses only overlap UDP ones, TCP ones TCP ones.)
    let ip = |l: &Listener| match l.addr {
        ListenAddr::Tcp(a) => Some((a, false)),
        ListenAddr::Udp(a) => Some((a, true)),
        ListenAddr::Unix(_) => None,
    };
    listeners
        .iter()
        .map(|l| {
            let Some((a, udp)) = ip(l) else { return false };
            let same = |o: &Listener| ip(o).filter(|(_, u)| *u == udp).map(|(b, _)| b);
            listeners.iter().filter_map(same).any(|b| {
                b != a
                    && b.port() == a.port()
                    && b.is_ipv4() == a.is_ipv4()
                    && (a.ip().is_unspecified() || b.ip().is_unspecified())
            })
        })
        .collect()
}

enum Sig {
    Term,
    Int,
    Quit,
    Usr1,
    Usr2,
    Hup,
    Chld,
}

/// The signals vireo answers, taken over from their default actions: TERM/INT
/// (fast stop), QUIT (graceful stop), USR1 (reopen log files), HUP (reload),
/// USR2 (binary upgrade), CHLD (the new binary exited).
struct Signals {
    rt: Option<tokio::runtime::Runtime>,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    chld: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let guard = rt.enter();
        let s = Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
            hup: signal(SignalKind::hangup())?,
            chld: signal(SignalKind::child())?,
            rt: None,
        };
        drop(guard);
        Ok(Signals { rt: Some(rt), ..s })
    }

    async fn next(&mut self) -> Sig {
        tokio::select! {
            _ = self.term.recv() => Sig::Term,
            _ = self.int.recv() => Sig::Int,
            _ = self.quit.recv() => Sig::Quit,
            _ = self.usr1.recv() => Sig::Usr1,
            _ = self.usr2.recv() => Sig::Usr2,
            _ = self.hup.recv() => Sig::Hup,
            _ = self.chld.recv() => Sig::Chld,
        }
    }
}

/// SIGUSR1: open the error log and every access log again (after rotation).
fn reopen_logs(shared: &Shared) {
    error_log!(Notice, "reopening logs");
    if let Err(e) = crate::core::errlog::reopen() {
        error_log!(Alert, "reopening the error log failed ({})", errno_text(&e));
    }
    let config = shared.config.load();
    let logs = config.ext.get::<crate::modules::log::conf::LogEnv>();
    for f in logs.map(|l| l.files()).unwrap_or_default() {
        if let Err(e) = f.reopen() {
            error_log!(
                Alert,
                "reopen() \"{}\" failed ({})",
                f.path().display(),
                errno_text(&e)
            );
        }
    }
}

/// The directives of processes and listening: workers, pid, user, events;
/// the `$proxy_protocol_*` variables of `listen … proxy_protocol`.
pub static MODULE: Module = Module {
    name: "server",
    directives: &[conf::DIRECTIVES],
    variables: proxy_protocol::VARIABLES,
    ..Module::EMPTY
};
