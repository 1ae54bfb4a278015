//! A worker: one thread, one current-thread tokio runtime, its own view of the
//! listening sockets, and the connections it accepted. Share-nothing: the only
//! shared state is the configuration snapshot and the shutdown signal.

use super::socket::{Bound, Stream};
use super::{Shared, State};
use crate::core::errlog;
use crate::error_log;
use crate::http::h1::conn::{self, Peer};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::{Notify, watch};

/// Per-worker connection accounting.
pub struct Slots {
    active: Cell<usize>,
    max: usize,
    drained: Notify,
}

/// Holds one connection slot; frees it when dropped.
pub struct Slot(Rc<Slots>);

impl Drop for Slot {
    fn drop(&mut self) {
        let n = self.0.active.get() - 1;
        self.0.active.set(n);
        if n == 0 {
            self.0.drained.notify_waiters();
        }
    }
}

impl Slots {
    fn take(self: &Rc<Self>) -> Option<Slot> {
        let n = self.active.get();
        if n >= self.max {
            return None;
        }
        self.active.set(n + 1);
        Some(Slot(self.clone()))
    }
}

/// Run worker `id` until shutdown; `listeners[i]` serves `config.listeners[i]`.
pub fn run(id: usize, listeners: Vec<Bound>, shared: Arc<Shared>) {
    errlog::set_worker_id(id);
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
            max,
            drained: Notify::new(),
        });
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                for (idx, bound) in listeners.into_iter().enumerate() {
                    let (shared, slots) = (shared.clone(), slots.clone());
                    tokio::task::spawn_local(async move {
                        if let Err(e) = accept_loop(idx, bound, shared, slots).await {
                            error_log!(Alert, "accept on listener {idx} failed: {e}");
                        }
                    });
                }
                tokio::task::spawn_local(crate::modules::timers());
                tokio::task::spawn_local(super::idle::ticker());
                let mut rx = shared.state.subscribe();
                let state = loop {
                    let s = *rx.borrow_and_update();
                    if s != State::Running {
                        break s;
                    }
                    if rx.changed().await.is_err() {
                        break State::Fast;
                    }
                };
                super::idle::stop_all();
                if state == State::Graceful {
                    // Listeners stop by themselves; wait for connections to finish.
                    while slots.active.get() > 0 {
                        let drained = slots.drained.notified();
                        if slots.active.get() == 0 {
                            break;
                        }
                        drained.await;
                    }
                }
            })
            .await;
    });
    crate::modules::worker_exit();
}

async fn accept_loop(
    idx: usize,
    bound: Bound,
    shared: Arc<Shared>,
    slots: Rc<Slots>,
) -> std::io::Result<()> {
    let mut rx = shared.state.subscribe();
    match bound {
        Bound::Tcp(l) => {
            let l = tokio::net::TcpListener::from_std(l)?;
            loop {
                let (s, peer) = tokio::select! {
                    r = l.accept() => match r {
                        Ok(v) => v,
                        Err(e) => { accept_error(e).await; continue; }
                    },
                    _ = stopping(&mut rx) => return Ok(()),
                };
                start(s, Peer::Tcp(peer), idx, &shared, &slots);
                if shared.config.load().multi_accept {
                    while let Ok((s, peer)) = poll_accept(&l) {
                        start(s, Peer::Tcp(peer), idx, &shared, &slots);
                    }
                }
            }
        }
        Bound::Unix(l) => {
            let l = tokio::net::UnixListener::from_std(l)?;
            loop {
                let s = tokio::select! {
                    r = l.accept() => match r {
                        Ok((s, _)) => s,
                        Err(e) => { accept_error(e).await; continue; }
                    },
                    _ = stopping(&mut rx) => return Ok(()),
                };
                start(s, Peer::Unix, idx, &shared, &slots);
            }
        }
    }
}

/// Accept without waiting (multi_accept): whatever is already queued.
fn poll_accept(
    l: &tokio::net::TcpListener,
) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match l.poll_accept(&mut cx) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => Err(std::io::ErrorKind::WouldBlock.into()),
    }
}

/// Out of descriptors or similar: log, pause briefly instead of spinning.
async fn accept_error(e: std::io::Error) {
    error_log!(Crit, "accept() failed: {e}");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
}

/// Resolves once the server leaves the running state.
pub async fn stopping(rx: &mut watch::Receiver<State>) {
    loop {
        if *rx.borrow_and_update() != State::Running {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

fn start<S: Stream>(s: S, peer: Peer, idx: usize, shared: &Arc<Shared>, slots: &Rc<Slots>) {
    let Some(slot) = slots.take() else {
        error_log!(
            Alert,
            "{} worker_connections are not enough, closing a new connection",
            slots.max
        );
        return;
    };
    let id = shared.next_connection();
    let shared = shared.clone();
    tokio::task::spawn_local(conn::serve(s, peer, idx, id, shared, slot));
}
