//! Per-worker coarse timers for idle connections (keep-alive waits, connections
//! that have not sent a request yet). Instead of a tokio timer per connection, an
//! idle connection registers a deadline in a thread-local slab that the worker
//! sweeps every `TICK`; the same slab delivers graceful shutdown. This keeps an
//! idle connection's task small (see the memory figures in docs/benchmarks.md).
//! Waits that are not idle but need only a coarse deadline (an upstream's
//! reply, `proxy_read_timeout`) register a plain deadline in the same slab
//! instead of arming a tokio timer per wait.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// How often expired registrations are woken: timeouts fire up to this late.
pub const TICK: Duration = Duration::from_millis(250);

/// Why an idle wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    TimedOut,
    Stopping,
    /// Closed early to free its worker_connections slot ([`reclaim`]).
    Reclaimed,
}

struct Slot {
    deadline: Instant,
    waker: Option<Waker>,
    fired: Option<Expired>,
    /// An idle connection's wait (stop and reclaim end it too), or a plain
    /// deadline ([`IdleTimer::deadline`]) that only time ends.
    idle: bool,
}

#[derive(Default)]
struct Registry {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Stopping: idle connections are closed, and new waits end at once.
    stopping: bool,
    /// Draining (a handover): idle connections stay until their next request,
    /// answered with `Connection: close`, or their own timeout.
    draining: bool,
}

thread_local! {
    static REGISTRY: RefCell<Registry> = RefCell::default();
}

/// A deadline registration; a future that resolves when it expires or the worker
/// stops. Deregistered on drop.
pub struct IdleTimer {
    key: usize,
}

impl IdleTimer {
    /// An idle connection's wait: ends at `deadline`, when the worker stops
    /// (at once if it is stopping), or when [`reclaim`] picks it.
    pub fn new(deadline: Instant) -> IdleTimer {
        IdleTimer::register(deadline, true)
    }

    /// A coarse deadline for a wait that is not idle (an upstream's reply):
    /// ends only at `deadline` (up to a `TICK` late), costing no tokio timer.
    pub fn deadline(deadline: Instant) -> IdleTimer {
        IdleTimer::register(deadline, false)
    }

    fn register(deadline: Instant, idle: bool) -> IdleTimer {
        REGISTRY.with(|r| {
            let mut r = r.borrow_mut();
            let fired = (idle && r.stopping).then_some(Expired::Stopping);
            let slot = Some(Slot {
                deadline,
                waker: None,
                fired,
                idle,
            });
            let key = match r.free.pop() {
                Some(k) => {
                    r.slots[k] = slot;
                    k
                }
                None => {
                    r.slots.push(slot);
                    r.slots.len() - 1
                }
            };
            IdleTimer { key }
        })
    }
}

impl Future for IdleTimer {
    type Output = Expired;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Expired> {
        REGISTRY.with(|r| {
            let mut r = r.borrow_mut();
            let Some(slot) = r.slots.get_mut(self.key).and_then(Option::as_mut) else {
                return Poll::Ready(Expired::Stopping);
            };
            if let Some(why) = slot.fired {
                return Poll::Ready(why);
            }
            match &slot.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => slot.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
    }
}

impl Drop for IdleTimer {
    fn drop(&mut self) {
        // try_with: the registry may already be gone while a thread exits.
        let _ = REGISTRY.try_with(|r| {
            let mut r = r.borrow_mut();
            r.slots[self.key] = None;
            r.free.push(self.key);
        });
    }
}

/// Fire the registrations due at `now`, or with `None` every idle connection's.
fn fire(r: &mut Registry, why: Expired, now: Option<Instant>) {
    for slot in r.slots.iter_mut().flatten() {
        let due = match now {
            Some(n) => slot.deadline <= n,
            None => slot.idle,
        };
        if slot.fired.is_none() && due {
            slot.fired = Some(why);
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        }
    }
}

/// Wake registrations whose deadline has passed (the worker calls this every `TICK`).
pub fn tick() {
    REGISTRY.with(|r| fire(&mut r.borrow_mut(), Expired::TimedOut, Some(Instant::now())));
}

/// Close up to `n` idle connections, those waiting longest first, to free
/// their slots (nginx's "worker_connections are not enough, reusing
/// connections"). Returns how many were told to close.
pub fn reclaim(n: usize) -> usize {
    REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        let mut idle: Vec<&mut Slot> = r
            .slots
            .iter_mut()
            .flatten()
            .filter(|s| s.idle && s.fired.is_none())
            .collect();
        // The earliest deadlines have waited longest (for equal timeouts).
        let n = n.min(idle.len());
        if n < idle.len() {
            idle.select_nth_unstable_by_key(n, |s| s.deadline);
        }
        for slot in &mut idle[..n] {
            slot.fired = Some(Expired::Reclaimed);
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        }
        n
    })
}

/// The worker is stopping: wake every idle connection, and make new waits end at once.
pub fn stop_all() {
    REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        r.stopping = true;
        fire(&mut r, Expired::Stopping, None);
    });
}

/// The worker drains without cutting idle connections (binary upgrade, retired
/// worker): each connection ends after its next response instead, so no request
/// a client sends on a kept-alive connection meets a close.
pub fn drain() {
    REGISTRY.with(|r| r.borrow_mut().draining = true);
}

/// Has this worker begun to stop or drain? Responses then close their connection.
pub fn stopping() -> bool {
    REGISTRY.with(|r| {
        let r = r.borrow();
        r.stopping || r.draining
    })
}

/// Run `tick` forever (spawned once per worker).
pub async fn ticker() {
    let mut t = tokio::time::interval(TICK);
    loop {
        t.tick().await;
        tick();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_and_stops() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let past = IdleTimer::new(Instant::now());
            let future = IdleTimer::new(Instant::now() + Duration::from_secs(3600));
            tick();
            assert_eq!(past.await, Expired::TimedOut);
            stop_all();
            assert_eq!(future.await, Expired::Stopping);
            assert_eq!(
                IdleTimer::new(Instant::now() + TICK).await,
                Expired::Stopping
            );
            assert!(stopping());
        });
    }

    #[test]
    fn drain_keeps_idle_waits() {
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            rt.block_on(async {
                assert!(!stopping());
                let mut t = IdleTimer::new(Instant::now() + Duration::from_secs(3600));
                drain();
                assert!(stopping());
                let waker = Waker::noop();
                let mut cx = Context::from_waker(waker);
                assert!(Pin::new(&mut t).poll(&mut cx).is_pending());
                let mut n = IdleTimer::new(Instant::now() + Duration::from_secs(3600));
                assert!(Pin::new(&mut n).poll(&mut cx).is_pending());
            });
        })
        .join()
        .unwrap();
    }

    #[test]
    fn reclaim_closes_the_longest_waiting_first() {
        std::thread::spawn(|| {
            let now = Instant::now();
            let mut timers: Vec<IdleTimer> = [30, 10, 20, 40]
                .iter()
                .map(|s| IdleTimer::new(now + Duration::from_secs(*s)))
                .collect();
            assert_eq!(reclaim(2), 2);
            let cx = &mut Context::from_waker(Waker::noop());
            let fired: Vec<bool> = timers
                .iter_mut()
                .map(|t| Pin::new(t).poll(cx) == Poll::Ready(Expired::Reclaimed))
                .collect();
            assert_eq!(fired, [false, true, true, false]);
            assert_eq!(reclaim(5), 2);
            assert_eq!(reclaim(5), 0);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn deadlines_end_only_in_time() {
        std::thread::spawn(|| {
            let cx = &mut Context::from_waker(Waker::noop());
            let mut idle = IdleTimer::new(Instant::now() + Duration::from_secs(3600));
            let mut late = IdleTimer::deadline(Instant::now() + Duration::from_secs(3600));
            let mut due = IdleTimer::deadline(Instant::now());
            assert_eq!(reclaim(5), 1, "only the idle wait is reclaimable");
            stop_all();
            let mut after = IdleTimer::deadline(Instant::now() + Duration::from_secs(3600));
            assert_eq!(
                Pin::new(&mut idle).poll(cx),
                Poll::Ready(Expired::Reclaimed)
            );
            assert!(Pin::new(&mut late).poll(cx).is_pending());
            assert!(Pin::new(&mut after).poll(cx).is_pending());
            assert!(Pin::new(&mut due).poll(cx).is_pending());
            tick();
            assert_eq!(Pin::new(&mut due).poll(cx), Poll::Ready(Expired::TimedOut));
            assert!(Pin::new(&mut late).poll(cx).is_pending());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn slots_are_reused() {
        let a = IdleTimer::new(Instant::now());
        let k = a.key;
        drop(a);
        let b = IdleTimer::new(Instant::now());
        assert_eq!(b.key, k);
    }
}
