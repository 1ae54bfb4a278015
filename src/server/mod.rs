//! Server: listening sockets, worker threads, signals, process lifetime.

pub mod socket;
pub mod worker;

use crate::conf::load::Config;
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
    if let Some(n) = config.rlimit_nofile
        && let Err(e) = crate::sys::raise_nofile(n)
    {
        error_log!(Warn, "setrlimit(RLIMIT_NOFILE, {n}) failed ({e}), not permitted here");
    }
    // Shared (non-reuseport) sockets are bound once here; each worker gets a clone.
    let mut shared_sockets = Vec::new();
    for l in &config.listeners {
        shared_sockets.push(if l.reuseport {
            None
        } else {
            Some(bind_logged(l)?)
        });
    }
    let mut per_worker = Vec::new();
    for _ in 0..config.workers {
        let mut mine = Vec::new();
        for (l, s) in config.listeners.iter().zip(&shared_sockets) {
            mine.push(match s {
                Some(s) => s.try_clone()?,
                None => bind_logged(l)?,
            });
        }
        per_worker.push(mine);
    }
    drop(shared_sockets);
    let pid_file = config.pid.clone();
    if let Some(p) = &pid_file {
        std::fs::write(p, format!("{}\n", std::process::id())).map_err(|e| {
            std::io::Error::new(e.kind(), format!("open() \"{}\" failed ({e})", p.display()))
        })?;
    }
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
    wait_for_signal(&shared)?;
    for t in threads {
        let _ = t.join();
    }
    if let Some(p) = &pid_file {
        let _ = std::fs::remove_file(p);
    }
    error_log!(Notice, "exiting");
    Ok(())
}

fn bind_logged(l: &crate::conf::load::Listener) -> std::io::Result<socket::Bound> {
    socket::bind(l).map_err(|e| {
        std::io::Error::new(e.kind(), format!("bind() to {} failed ({e})", l.addr))
    })
}

/// Block until SIGTERM/SIGINT (fast) or SIGQUIT (graceful), then tell the workers.
fn wait_for_signal(shared: &Shared) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut quit = signal(SignalKind::quit())?;
        let state = tokio::select! {
            _ = term.recv() => State::Fast,
            _ = int.recv() => State::Fast,
            _ = quit.recv() => State::Graceful,
        };
        error_log!(Notice, "signal received, {}", match state {
            State::Graceful => "gracefully shutting down",
            _ => "exiting now",
        });
        shared.state.send_replace(state);
        Ok(())
    })
}
