//! Server: listening sockets, worker threads, signals, process lifetime.

pub mod idle;
pub mod socket;
pub mod worker;

use crate::conf::load::Config;
use crate::core::errlog::errno_text;
use crate::error_log;
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::watch;

/// Lifecycle of the whole server, watched by every worker and connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Running,
    /// SIGQUIT: stop accepting, finish in-flight requests, close idle connections.
    Graceful,
    /// SIGTERM / SIGINT: stop now.
    Fast,
}

/// State shared by all workers: the live configuration snapshot and the lifecycle.
pub struct Shared {
    /// Each request takes the snapshot live when it starts.
    pub config: ArcSwap<Config>,
    pub state: watch::Sender<State>,
    connections: AtomicU64,
}

impl Shared {
    /// Serial number of a new connection (`$connection`).
    pub fn next_connection(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Bind the listeners, start the workers, and serve until a stop signal.
pub fn run(config: Config) -> std::io::Result<()> {
    // Take over the stop signals before any socket listens: a signal sent as soon
    // as the port answers must stop the server cleanly, not kill it by default action.
    let signals = Signals::install()?;
    if let Some(n) = config.rlimit_nofile
        && let Err(e) = crate::sys::raise_nofile(n)
    {
        error_log!(
            Warn,
            "setrlimit(RLIMIT_NOFILE, {n}) failed ({})",
            errno_text(&e)
        );
    }
    // The pid file is written before any port answers, so a client that sees the
    // port open finds the pid file too; it is removed again if binding fails.
    let pid_file = config.pid.clone();
    if let Some(p) = &pid_file {
        std::fs::write(p, format!("{}\n", std::process::id())).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("open() \"{}\" failed ({})", p.display(), errno_text(&e)),
            )
        })?;
    }
    let per_worker = match bind_all(&config) {
        Ok(v) => v,
        Err(e) => {
            if let Some(p) = &pid_file {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    let unix_sockets: Vec<std::path::PathBuf> = config
        .listeners
        .iter()
        .filter_map(|l| match &l.addr {
            crate::conf::model::ListenAddr::Unix(p) => Some(p.clone()),
            crate::conf::model::ListenAddr::Tcp(_) => None,
        })
        .collect();
    for l in &config.listeners {
        error_log!(Notice, "listening on {}", l.addr);
    }
    let shared = Arc::new(Shared {
        config: ArcSwap::from_pointee(config),
        state: watch::channel(State::Running).0,
        connections: AtomicU64::new(0),
    });
    let mut threads = Vec::new();
    for (id, listeners) in per_worker.into_iter().enumerate() {
        let shared = shared.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("vireo-worker-{id}"))
                .spawn(move || worker::run(id, listeners, shared))?,
        );
    }
    signals.wait(&shared);
    for t in threads {
        let _ = t.join();
    }
    // As nginx: unix socket files and the pid file go away with the server.
    for p in &unix_sockets {
        let _ = std::fs::remove_file(p);
    }
    if let Some(p) = &pid_file {
        let _ = std::fs::remove_file(p);
    }
    error_log!(Notice, "exiting");
    Ok(())
}

/// Bind every listener: `result[w][i]` is worker `w`'s socket for `config.listeners[i]`.
fn bind_all(config: &Config) -> std::io::Result<Vec<Vec<socket::Bound>>> {
    let overlap = overlapping(&config.listeners);
    // Shared (non-reuseport) sockets are bound once here; each worker gets a clone.
    let mut shared_sockets = Vec::new();
    for (l, &o) in config.listeners.iter().zip(&overlap) {
        shared_sockets.push(if l.reuseport {
            None
        } else {
            Some(bind_logged(l, o)?)
        });
    }
    let mut per_worker = Vec::new();
    for _ in 0..config.workers {
        let mut mine = Vec::new();
        for ((l, s), &o) in config.listeners.iter().zip(&shared_sockets).zip(&overlap) {
            mine.push(match s {
                Some(s) => s.try_clone()?,
                None => bind_logged(l, o)?,
            });
        }
        per_worker.push(mine);
    }
    Ok(per_worker)
}

/// For each listener: does it share its port with a wildcard listener of the same
/// family (`listen 80;` beside `listen 127.0.0.1:80;`)? nginx serves both; on Linux
/// the two sockets can only be bound together with SO_REUSEPORT on both, and the
/// kernel then hands a connection to the most specific one, which is exactly the
/// nginx rule. (Side effect, for these sockets only: a second process of the same
/// user could bind the same addresses too.)
fn overlapping(listeners: &[crate::conf::load::Listener]) -> Vec<bool> {
    use crate::conf::model::ListenAddr;
    let tcp = |l: &crate::conf::load::Listener| match l.addr {
        ListenAddr::Tcp(a) => Some(a),
        ListenAddr::Unix(_) => None,
    };
    listeners
        .iter()
        .map(|l| {
            let Some(a) = tcp(l) else { return false };
            listeners.iter().filter_map(tcp).any(|b| {
                b != a
                    && b.port() == a.port()
                    && b.is_ipv4() == a.is_ipv4()
                    && (a.ip().is_unspecified() || b.ip().is_unspecified())
            })
        })
        .collect()
}

/// Bind one socket for `l`; `overlap`: see [`overlapping`].
fn bind_logged(l: &crate::conf::load::Listener, overlap: bool) -> std::io::Result<socket::Bound> {
    let with_reuseport;
    let l = if overlap && !l.reuseport {
        with_reuseport = crate::conf::load::Listener {
            addr: l.addr.clone(),
            reuseport: true,
            backlog: l.backlog,
            vhosts: l.vhosts.clone(),
        };
        &with_reuseport
    } else {
        l
    };
    socket::bind(l).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("bind() to {} failed ({})", l.addr, errno_text(&e)),
        )
    })
}

/// The signals vireo answers, taken over from their default actions: TERM/INT
/// (fast stop), QUIT (graceful stop), USR1 (reopen log files), HUP (reload: not
/// there yet, so it is logged and ignored rather than killing the server).
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let guard = rt.enter();
        let term = signal(SignalKind::terminate())?;
        let int = signal(SignalKind::interrupt())?;
        let quit = signal(SignalKind::quit())?;
        let usr1 = signal(SignalKind::user_defined1())?;
        let hup = signal(SignalKind::hangup())?;
        drop(guard);
        Ok(Signals {
            rt,
            term,
            int,
            quit,
            usr1,
            hup,
        })
    }

    /// Serve USR1 and HUP until SIGTERM/SIGINT (fast) or SIGQUIT (graceful), then
    /// tell the workers.
    fn wait(self, shared: &Shared) {
        let Signals {
            rt,
            mut term,
            mut int,
            mut quit,
            mut usr1,
            mut hup,
        } = self;
        rt.block_on(async {
            let state = loop {
                tokio::select! {
                    _ = term.recv() => break State::Fast,
                    _ = int.recv() => break State::Fast,
                    _ = quit.recv() => break State::Graceful,
                    _ = usr1.recv() => reopen_logs(shared),
                    _ = hup.recv() => error_log!(
                        Warn,
                        "SIGHUP received: configuration reload is not implemented yet, ignored; restart vireo to apply changes"
                    ),
                }
            };
            error_log!(
                Notice,
                "signal received, {}",
                match state {
                    State::Graceful => "gracefully shutting down",
                    _ => "exiting now",
                }
            );
            shared.state.send_replace(state);
        });
    }
}

/// SIGUSR1: open the error log and every access log again (after rotation).
fn reopen_logs(shared: &Shared) {
    error_log!(Notice, "reopening logs");
    if let Err(e) = crate::core::errlog::reopen() {
        error_log!(Alert, "reopening the error log failed ({})", errno_text(&e));
    }
    for f in &shared.config.load().log_files {
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
