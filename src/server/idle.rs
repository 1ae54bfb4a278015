//! Per-worker coarse timers for idle connections (keep-alive waits, connections
//! that have not sent a request yet). Instead of a tokio timer per connection, an
//! idle connection registers a deadline in a thread-local slab that the worker
//! sweeps every `TICK`; the same slab delivers graceful shutdown. This keeps an
//! idle connection's task small (see the memory figures in docs/benchmarks.md).
//! Waits that are not idle but need only a coarse deadline (an upstream's
//! reply, `proxy_read_timeout`) register a plain deadline in the same slab
//! instead of arming a tokio timer per wait.
//!
//! A plain connection idle for a full `TICK` is parked: it gives up its tokio
//! I/O registration (a 256-byte slot per socket) and its socket waits in the
//! worker's parking poll instead, an epoll set of its own that tokio polls as one
//! descriptor; readiness there wakes the connection's task, which takes its
//! registration back. A keep-alive connection between requests of a busy
//! client never stays idle that long, so serving costs nothing more.

use std::cell::RefCell;
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// A new configuration is live ([`reloaded`]; [`IdleTimer::watch`] only).
    Reloaded,
    /// Not an end: the wait has lasted a full `TICK`, and the connection may
    /// park its socket ([`IdleTimer::parkable`], [`park`]).
    Park,
    /// The parked socket is readable ([`park`]).
    Readable,
}

/// Where a parkable wait stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parking {
    No,
    /// Waiting since this tick.
    Since(u32),
    /// Told to park (or not, if it cannot): never asked again.
    Asked,
}

struct Slot {
    /// `None`: no timeout (a [`IdleTimer::watch`] of a busy connection).
    deadline: Option<Instant>,
    waker: Option<Waker>,
    fired: Option<Expired>,
    /// Also ends when the worker drains, and on a reload ([`IdleTimer::watch`]).
    watch: bool,
    /// An idle connection's wait or a watch (stop and reclaim end it too), or a
    /// plain deadline ([`IdleTimer::deadline`]) that only time ends.
    idle: bool,
    parking: Parking,
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
    /// Ticks so far.
    ticks: u32,
    /// The parking poll's registry, once a connection has parked.
    parking: Option<mio::Registry>,
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
        Self::register(Some(deadline), true, false)
    }

    /// An idle wait as [`IdleTimer::new`] whose connection may park its socket:
    /// once it has lasted a full `TICK` the wait yields `Expired::Park` (once).
    pub fn parkable(deadline: Instant) -> IdleTimer {
        let t = Self::register(Some(deadline), true, false);
        REGISTRY.with(|r| {
            let mut r = r.borrow_mut();
            let since = r.ticks;
            if let Some(slot) = r.slots[t.key].as_mut() {
                slot.parking = Parking::Since(since);
            }
        });
        t
    }

    /// A coarse deadline for a wait that is not idle (an upstream's reply):
    /// ends only at `deadline` (up to a `TICK` late), costing no tokio timer.
    pub fn deadline(deadline: Instant) -> IdleTimer {
        Self::register(Some(deadline), false, false)
    }

    /// A connection that can end cleanly at any time (HTTP/2: GOAWAY tells the
    /// client which streams were not processed): the wait also ends with
    /// `Stopping` when the worker only drains, and with `Reloaded` on a
    /// reload. `deadline` `None`: no timeout (streams in flight); such a wait
    /// is never reclaimed.
    pub fn watch(deadline: Option<Instant>) -> IdleTimer {
        Self::register(deadline, true, true)
    }

    fn register(deadline: Option<Instant>, idle: bool, watch: bool) -> IdleTimer {
        REGISTRY.with(|r| {
            let mut r = r.borrow_mut();
            let ends = (idle && r.stopping) || (watch && r.draining);
            let fired = ends.then_some(Expired::Stopping);
            let slot = Some(Slot {
                deadline,
                waker: None,
                fired,
                watch,
                idle,
                parking: Parking::No,
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
            if slot.parking == Parking::Asked && slot.waker.is_none() {
                // Told to park: once; the waker stays for the wait that follows.
                slot.waker = Some(cx.waker().clone());
                return Poll::Ready(Expired::Park);
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

/// Room for `n` registrations (the worker's worker_connections): the table
/// then never regrows, so no outgrown copy of it is left behind, and its pages
/// are touched only as connections come.
pub fn reserve(n: usize) {
    REGISTRY.with(|r| {
        let slots = &mut r.borrow_mut().slots;
        slots.reserve(n.saturating_sub(slots.len()));
    });
}

/// Fire the waits `pick` chooses.
fn fire(r: &mut Registry, why: Expired, pick: impl Fn(&Slot) -> bool) {
    for slot in r.slots.iter_mut().flatten() {
        if slot.fired.is_none() && pick(slot) {
            slot.fired = Some(why);
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        }
    }
}

/// Wake registrations whose deadline has passed, and parkable waits that have
/// lasted a full `TICK` (the worker calls this every `TICK`); true when a
/// wait was told to park.
pub fn tick() -> bool {
    let now = Instant::now();
    REGISTRY.with(|r| {
        let r = &mut *r.borrow_mut();
        r.ticks = r.ticks.wrapping_add(1);
        let ticks = r.ticks;
        let mut parks = false;
        for slot in r.slots.iter_mut().flatten() {
            if slot.fired.is_some() {
                continue;
            }
            if slot.deadline.is_some_and(|d| d <= now) {
                slot.fired = Some(Expired::TimedOut);
            } else if matches!(slot.parking, Parking::Since(t) if ticks.wrapping_sub(t) >= 2) {
                slot.parking = Parking::Asked;
                parks = true;
            } else {
                continue;
            }
            // A wait told to park keeps no waker until it is polled again.
            if let Some(w) = slot.waker.take() {
                w.wake();
            }
        }
        parks
    })
}

/// Park a socket whose [`IdleTimer::parkable`] wait yielded `Expired::Park`:
/// its readiness now ends that wait with `Expired::Readable`. False when the
/// worker's parking poll cannot be had; the caller then keeps its registration.
/// The caller [`unpark`]s the socket, or closes it, before dropping the timer.
pub fn park(t: &IdleTimer, fd: RawFd) -> bool {
    REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        if r.parking.is_none() {
            r.parking = start_parking();
        }
        let Some(registry) = &r.parking else {
            return false;
        };
        let src = &mut mio::unix::SourceFd(&fd);
        registry
            .register(src, mio::Token(t.key), mio::Interest::READABLE)
            .is_ok()
    })
}

/// Take a parked socket out of the parking poll.
pub fn unpark(fd: RawFd) {
    REGISTRY.with(|r| {
        if let Some(registry) = &r.borrow().parking {
            let _ = registry.deregister(&mut mio::unix::SourceFd(&fd));
        }
    });
}

/// The worker's parking poll: its registry, and a task of the worker that
/// reads its readiness.
fn start_parking() -> Option<mio::Registry> {
    let poll = mio::Poll::new().ok()?;
    let registry = poll.registry().try_clone().ok()?;
    let fd = crate::sys::async_poll(poll).ok()?;
    tokio::task::spawn_local(parked(fd));
    Some(registry)
}

/// Wake the parked connections whose sockets are ready (edge-triggered: each
/// readiness once).
async fn parked(mut fd: tokio::io::unix::AsyncFd<mio::Poll>) {
    let mut events = mio::Events::with_capacity(256);
    loop {
        let Ok(mut ready) = fd.readable_mut().await else {
            return;
        };
        if ready
            .get_inner_mut()
            .poll(&mut events, Some(Duration::ZERO))
            .is_err()
        {
            return;
        }
        let full = events.iter().count() == events.capacity();
        REGISTRY.with(|r| {
            let mut r = r.borrow_mut();
            for e in &events {
                let Some(slot) = r.slots.get_mut(e.token().0).and_then(Option::as_mut) else {
                    continue;
                };
                if slot.parking == Parking::Asked && slot.fired.is_none() {
                    slot.fired = Some(Expired::Readable);
                    if let Some(w) = slot.waker.take() {
                        w.wake();
                    }
                }
            }
        });
        if !full {
            ready.clear_ready();
        }
    }
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
            .filter(|s| s.idle && s.fired.is_none() && s.deadline.is_some())
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
        fire(&mut r, Expired::Stopping, |s| s.idle);
    });
}

/// The worker drains without cutting idle connections (binary upgrade, retired
/// worker): each HTTP/1 connection ends after its next response instead, so no
/// request a client sends on a kept-alive connection meets a close. Watches
/// ([`IdleTimer::watch`], HTTP/2) end now: GOAWAY is safe at any moment.
pub fn drain() {
    REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        r.draining = true;
        fire(&mut r, Expired::Stopping, |s| s.watch);
    });
}

/// A new configuration is live: watches end with `Reloaded` (an HTTP/2
/// connection checks whether its address was removed).
pub fn reloaded() {
    REGISTRY.with(|r| fire(&mut r.borrow_mut(), Expired::Reloaded, |s| s.watch));
}

/// Has this worker begun to stop or drain? Responses then close their connection.
pub fn stopping() -> bool {
    REGISTRY.with(|r| {
        let r = r.borrow();
        r.stopping || r.draining
    })
}

/// A configuration was loaded since the process last stopped mapping the
/// code and constant data that only loading used ([`loaded`]).
static LOADED: AtomicBool = AtomicBool::new(false);

/// A configuration has been loaded: the next tick of a worker that has run
/// a full `TICK` (so once the workers have started on it) unmaps the
/// process's clean file pages (`sys::unmap_clean_file_pages`); serving maps
/// back what it runs.
pub fn loaded() {
    LOADED.store(true, Ordering::Release);
}

/// Run `tick` forever (spawned once per worker), from a full `TICK` after
/// the worker starts. After a load, the first worker to tick unmaps the pages
/// only loading used, and says how much was resident in the error log
/// (notice). After a full `TICK` in which the worker handled no
/// connection or request and parked no socket, it gives what its allocator
/// holds unused back to the kernel, once per quiet spell.
pub async fn ticker() {
    let mut t = tokio::time::interval(TICK);
    t.tick().await; // the first tick completes at once
    let mut quiet = Quiet::default();
    loop {
        t.tick().await;
        let parks = tick();
        if LOADED.swap(false, Ordering::AcqRel)
            && let Some(kb) = crate::sys::unmap_clean_file_pages()
        {
            crate::error_log!(
                Notice,
                "unmapped {kb} kB of clean file pages after the load"
            );
        }
        if quiet.after_tick(parks, super::stats::activity()) {
            crate::sys::release_free_memory();
        }
    }
}

/// Tells when a worker's quiet spell begins.
#[derive(Default)]
struct Quiet {
    /// The worker's activity figure at the last tick.
    seen: Option<u64>,
    /// The spell has begun: said once.
    said: bool,
}

impl Quiet {
    /// After a tick that parked sockets or not, with the worker's activity
    /// figure now: true once when a full tick passed with neither.
    fn after_tick(&mut self, parks: bool, activity: u64) -> bool {
        if parks || self.seen != Some(activity) {
            self.seen = Some(activity);
            self.said = false;
            return false;
        }
        !std::mem::replace(&mut self.said, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_spell_is_told_once_a_full_tick_passed_without_work() {
        let mut q = Quiet::default();
        // The first tick has nothing to compare with.
        assert!(!q.after_tick(false, 5));
        assert!(q.after_tick(false, 5));
        assert!(!q.after_tick(false, 5), "once per spell");
        // Requests, then sockets parked: not quiet until a tick of neither.
        assert!(!q.after_tick(false, 9));
        assert!(!q.after_tick(true, 9));
        assert!(q.after_tick(false, 9));
        assert!(!q.after_tick(false, 9));
    }

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
    fn watches_end_on_drain_and_reload_and_are_never_reclaimed() {
        std::thread::spawn(|| {
            let cx = &mut Context::from_waker(Waker::noop());
            let far = Instant::now() + Duration::from_secs(3600);
            let mut plain = IdleTimer::new(far);
            let mut idle = IdleTimer::watch(Some(far));
            let mut busy = IdleTimer::watch(None);
            // A busy connection has no timeout and is not an idle one to close.
            assert_eq!(reclaim(5), 2);
            assert_eq!(
                Pin::new(&mut idle).poll(cx),
                Poll::Ready(Expired::Reclaimed)
            );
            assert!(Pin::new(&mut busy).poll(cx).is_pending());
            drop((plain, idle));
            plain = IdleTimer::new(far);
            idle = IdleTimer::watch(Some(far));
            reloaded();
            assert_eq!(Pin::new(&mut busy).poll(cx), Poll::Ready(Expired::Reloaded));
            assert_eq!(Pin::new(&mut idle).poll(cx), Poll::Ready(Expired::Reloaded));
            assert!(Pin::new(&mut plain).poll(cx).is_pending());
            // Draining ends watches (and new ones at once), not plain waits.
            busy = IdleTimer::watch(None);
            drain();
            assert_eq!(Pin::new(&mut busy).poll(cx), Poll::Ready(Expired::Stopping));
            assert!(Pin::new(&mut plain).poll(cx).is_pending());
            let mut late = IdleTimer::watch(None);
            assert_eq!(Pin::new(&mut late).poll(cx), Poll::Ready(Expired::Stopping));
            stop_all();
            assert_eq!(
                Pin::new(&mut plain).poll(cx),
                Poll::Ready(Expired::Stopping)
            );
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

    #[test]
    fn a_long_idle_wait_parks_once_and_wakes_when_readable() {
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async {
                use std::io::Write;
                use std::os::fd::AsRawFd;
                let cx = &mut Context::from_waker(Waker::noop());
                let far = Instant::now() + Duration::from_secs(3600);
                let mut t = IdleTimer::parkable(far);
                let mut plain = IdleTimer::new(far);
                tick();
                assert!(
                    Pin::new(&mut t).poll(cx).is_pending(),
                    "not a full tick yet"
                );
                tick();
                assert_eq!(Pin::new(&mut t).poll(cx), Poll::Ready(Expired::Park));
                assert!(Pin::new(&mut t).poll(cx).is_pending(), "asked once");
                assert!(Pin::new(&mut plain).poll(cx).is_pending());
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let mut client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
                let (server, _) = l.accept().unwrap();
                assert!(park(&t, server.as_raw_fd()));
                client.write_all(b"GET").unwrap();
                assert_eq!(t.await, Expired::Readable);
                unpark(server.as_raw_fd());
            });
        })
        .join()
        .unwrap();
    }
}
