//! `queue N [timeout=T]` in an upstream block (nginx Plus): a request that
//! finds every peer it could use at `max_conns` waits, first in first out, in
//! a per-worker per-upstream line instead of failing (or, without
//! `max_conns`, instead of opening one more connection to a saturated peer).
//!
//! A place frees when an attempt on a peer of the upstream ends
//! ([`super::Upstream::finished`]): [`serve`] then picks a peer on behalf of
//! the first waiter that can use one and hands it over, so the capacity is
//! counted at once and a request arriving meanwhile cannot take it. The
//! waiter then connects as usual, taking the idle kept-alive connection its
//! predecessor left in the pool when there is one. A waiter whose client
//! goes away leaves the line (a place handed to it just before is given
//! back); a full line or the timeout answers 502.
//!
//! State is per worker like the balancer's: no locks, no shared atomics.

use super::Upstream;
use super::balance::Tried;
use crate::core::request::RequestBody;
use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// `queue N [timeout=T]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conf {
    /// Requests that may wait at once (per worker).
    pub size: usize,
    /// How long one may wait (nginx's default: 60s).
    pub timeout: Duration,
}

/// Why no peer was chosen for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// Every peer is down, failed, already tried, or at max_conns without a queue.
    NoLive,
    /// The queue already holds `size` requests.
    Full,
    /// The request waited `timeout` in the queue.
    TimedOut,
    /// The client closed its connection while the request waited (499).
    ClientGone,
}

impl Unavailable {
    /// The status answered: nginx's 499 for a client gone, else 502.
    pub fn status(self) -> u16 {
        if self == Unavailable::ClientGone {
            499
        } else {
            502
        }
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unavailable::NoLive => "no live upstreams",
            Unavailable::Full => "upstream queue is full",
            Unavailable::TimedOut => "upstream queue timed out",
            Unavailable::ClientGone => "client closed connection while waiting in upstream queue",
        })
    }
}

/// One waiting request.
struct Ticket {
    /// Its balancing key (ip_hash, hash) and the peers it has tried.
    key: Vec<u8>,
    tried: RefCell<Tried>,
    /// The peer [`serve`] chose for it, counted as connected.
    granted: Cell<Option<usize>>,
    woken: Notify,
}

thread_local! {
    /// Per upstream id, the requests waiting in this worker, oldest first.
    static LINES: RefCell<FxHashMap<u64, VecDeque<Rc<Ticket>>>> =
        RefCell::new(FxHashMap::default());
}

/// Requests waiting for `id` in this worker.
pub fn waiting(id: u64) -> usize {
    LINES.with(|l| l.borrow().get(&id).map_or(0, VecDeque::len))
}

/// Wait in `up`'s line until [`serve`] hands this request a peer (marked in
/// `tried`), the line is full, `conf.timeout` passes, or the client whose
/// request body this is closes its connection (seen when it happens:
/// [`RequestBody::gone`]; bytes pipelined after the request hide it).
pub(super) async fn wait(
    up: &Upstream,
    conf: &Conf,
    key: &[u8],
    tried: &mut Tried,
    client: Option<&mut dyn RequestBody>,
) -> Result<usize, Unavailable> {
    if waiting(up.id) >= conf.size {
        return Err(Unavailable::Full);
    }
    let ticket = Rc::new(Ticket {
        key: key.to_vec(),
        tried: RefCell::new(std::mem::take(tried)),
        granted: Cell::new(None),
        woken: Notify::new(),
    });
    LINES.with(|l| {
        l.borrow_mut()
            .entry(up.id)
            .or_default()
            .push_back(ticket.clone())
    });
    let place = Place { up, ticket };
    let deadline = Instant::now() + conf.timeout;
    // A grant stores a permit, so one made before this await is not lost;
    // one made in the same turn as the deadline still counts.
    let woken = place.ticket.woken.notified();
    let gone = async {
        match client {
            Some(body) => body.gone().await,
            None => std::future::pending().await,
        }
    };
    let why = tokio::select! {
        biased;
        _ = tokio::time::timeout_at(deadline.into(), woken) => Unavailable::TimedOut,
        () = gone => {
            crate::error_log!(
                Info,
                "client closed connection while waiting in upstream queue \"{}\"",
                up.name
            );
            Unavailable::ClientGone
        }
    };
    let granted = place.ticket.granted.take();
    *tried = place.ticket.tried.take();
    granted.ok_or(why)
}

/// A request's place in the line: leaving (served, timed out, or dropped with
/// its client) takes it out, and gives back a peer granted but not taken.
struct Place<'a> {
    up: &'a Upstream,
    ticket: Rc<Ticket>,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let id = self.up.id;
        LINES.with(|l| {
            let mut l = l.borrow_mut();
            if let Some(q) = l.get_mut(&id) {
                if let Some(i) = q.iter().position(|t| Rc::ptr_eq(t, &self.ticket)) {
                    q.remove(i);
                }
                if q.is_empty() {
                    l.remove(&id);
                }
            }
        });
        if let Some(peer) = self.ticket.granted.take() {
            // Handed a peer, gone before taking it: the next waiter gets it.
            self.up.finished(peer, true);
        }
    }
}

/// An attempt on a peer of `up` ended: hand the freed place to the first
/// waiter that can use a peer now (FIFO; one grant per freed place).
pub(super) fn serve(up: &Upstream) {
    let ticket = LINES.with(|l| {
        let mut l = l.borrow_mut();
        let q = l.get_mut(&up.id)?;
        let i = q.iter().position(|t| {
            let peer = up.pick(&t.key, &mut t.tried.borrow_mut());
            t.granted.set(peer);
            peer.is_some()
        })?;
        let t = q.remove(i)?;
        if q.is_empty() {
            l.remove(&up.id);
        }
        Some(t)
    });
    if let Some(t) = ticket {
        t.woken.notify_one();
    }
}

/// An attempt whose response head arrived but whose connection is still
/// busy with the body: dropped (the connection pooled or closed), it ends
/// the attempt (`ok` false: as the peer's failure), freeing its max_conns
/// place for the queue, and sets the attempt's `$upstream_response_time`.
#[derive(Debug)]
pub struct Hold {
    up: std::sync::Arc<Upstream>,
    peer: usize,
    ok: bool,
    vars: Rc<RefCell<super::UpstreamVars>>,
    t0: Instant,
}

impl Hold {
    pub fn new(
        up: std::sync::Arc<Upstream>,
        peer: usize,
        ok: bool,
        vars: Rc<RefCell<super::UpstreamVars>>,
        t0: Instant,
    ) -> Hold {
        Hold {
            up,
            peer,
            ok,
            vars,
            t0,
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.up.finished(self.peer, self.ok);
        if let Some(a) = self.vars.borrow_mut().attempts.last_mut() {
            a.response_ms = Some(self.t0.elapsed().as_millis() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::{PeerAddr, Upstream};

    fn upstream(max_conns: u32, size: usize, timeout: Duration) -> Upstream {
        let mut u = Upstream::round_robin("q", vec![PeerAddr::Tcp("127.0.0.1:9".parse().unwrap())]);
        u.peers[0].max_conns = max_conns;
        u.queue = Some(Conf { size, timeout });
        u
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn waiters_are_served_in_order_and_full_is_refused() {
        let up = Rc::new(upstream(1, 2, Duration::from_secs(60)));
        rt().block_on(async {
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async {
                    assert_eq!(up.select(b"", &mut Tried::default(), None).await, Ok(0));
                    let order = Rc::new(RefCell::new(Vec::new()));
                    let mut tasks = Vec::new();
                    for n in 0..2 {
                        let (up, order) = (up.clone(), order.clone());
                        tasks.push(tokio::task::spawn_local(async move {
                            let peer = up.select(b"", &mut Tried::default(), None).await;
                            order.borrow_mut().push(n);
                            peer
                        }));
                        tokio::task::yield_now().await;
                    }
                    assert_eq!(waiting(up.id), 2);
                    // A third finds the line full.
                    let third = up.select(b"", &mut Tried::default(), None).await;
                    assert_eq!(third, Err(Unavailable::Full));
                    up.finished(0, true);
                    // The place went to the first waiter; a newcomer cannot take it.
                    assert_eq!(waiting(up.id), 1);
                    assert_eq!(up.pick(b"", &mut Tried::default()), None);
                    assert_eq!(tasks.remove(0).await.unwrap(), Ok(0));
                    up.finished(0, true);
                    assert_eq!(tasks.remove(0).await.unwrap(), Ok(0));
                    assert_eq!(*order.borrow(), vec![0, 1]);
                    assert_eq!(waiting(up.id), 0);
                })
                .await;
        });
    }

    #[test]
    fn timeout_and_leaving_free_the_place() {
        let up = Rc::new(upstream(1, 1, Duration::from_millis(50)));
        rt().block_on(async {
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async {
                    assert_eq!(up.select(b"", &mut Tried::default(), None).await, Ok(0));
                    let t0 = Instant::now();
                    let r = up.select(b"", &mut Tried::default(), None).await;
                    assert_eq!(r, Err(Unavailable::TimedOut));
                    assert!(t0.elapsed() >= Duration::from_millis(50));
                    assert_eq!(waiting(up.id), 0);
                    // A waiter dropped (its client left) leaves the line...
                    let u = up.clone();
                    let gone = tokio::task::spawn_local(async move {
                        u.select(b"", &mut Tried::default(), None).await
                    });
                    tokio::task::yield_now().await;
                    assert_eq!(waiting(up.id), 1);
                    gone.abort();
                    let _ = gone.await;
                    assert_eq!(waiting(up.id), 0);
                    // ...and one granted a peer but dropped gives it back.
                    let u = up.clone();
                    let granted = tokio::task::spawn_local(async move {
                        u.select(b"", &mut Tried::default(), None).await
                    });
                    tokio::task::yield_now().await;
                    up.finished(0, true);
                    granted.abort();
                    let _ = granted.await;
                    assert_eq!(up.pick(b"", &mut Tried::default()), Some(0));
                })
                .await;
        });
    }

    #[test]
    fn without_max_conns_nothing_waits() {
        let up = upstream(0, 10, Duration::from_secs(1));
        let mut tried = Tried::default();
        tried.mark(0);
        let r = rt().block_on(up.select(b"", &mut tried, None));
        assert_eq!(r, Err(Unavailable::NoLive));
    }
}
