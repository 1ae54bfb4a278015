//! Server figures (connections, requests, bytes, durations) kept per worker and
//! added up only when someone reads them (stub_status, /metrics).
//!
//! Each worker thread owns one [`WorkerStats`], on cache lines of its own, and is
//! the only writer of its fields: an update is a relaxed load and a relaxed store
//! (plain `mov`s, no locked instruction, no line shared with another writer).
//! Readers sum every worker's fields; they may see a figure a few updates old,
//! never a torn one. Figures of workers that have exited stay in the registry, so
//! counters never go back.

use crate::core::metrics::{DURATION_BUCKETS_MS, HistogramSnapshot};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A latency histogram with [`DURATION_BUCKETS_MS`] bounds, one writer. The
/// sum is kept in microseconds, so sub-millisecond latencies (an upstream on
/// the same host) add up.
pub struct Histogram {
    /// Per bucket (not cumulative); the last is +Inf.
    buckets: [AtomicU64; DURATION_BUCKETS_MS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub const fn new() -> Histogram {
        Histogram {
            buckets: [const { AtomicU64::new(0) }; DURATION_BUCKETS_MS.len() + 1],
            sum_us: AtomicU64::new(0),
        }
    }

    /// Record one observation in milliseconds (single writer).
    pub fn observe_ms(&self, ms: u64) {
        self.observe_us(ms.saturating_mul(1000));
    }

    /// Record one observation in microseconds (single writer).
    pub fn observe_us(&self, us: u64) {
        let i = DURATION_BUCKETS_MS
            .iter()
            .position(|&b| us <= b * 1000)
            .unwrap_or(DURATION_BUCKETS_MS.len());
        bump(&self.buckets[i], 1);
        bump(&self.sum_us, us);
    }

    /// Add this histogram into `into` (per-bucket counts, sum in ms).
    pub fn add_to(&self, into: &mut HistogramSnapshot) {
        for (a, b) in into.buckets.iter_mut().zip(&self.buckets) {
            *a += b.load(Relaxed);
        }
        into.sum_us += self.sum_us.load(Relaxed);
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// One worker's figures.
#[repr(align(128))]
pub struct WorkerStats {
    /// The worker's number (its thread name's), used as the metrics label.
    pub worker: usize,
    accepted: AtomicU64,
    handled: AtomicU64,
    active: AtomicU64,
    reading: AtomicU64,
    writing: AtomicU64,
    requests: AtomicU64,
    /// Responses by status class: 1xx … 5xx.
    responses: [AtomicU64; 5],
    sent_bytes: AtomicU64,
    duration: Histogram,
    file_cache_hits: AtomicU64,
    file_cache_misses: AtomicU64,
    file_cache_entries: AtomicU64,
    panics: AtomicU64,
}

impl WorkerStats {
    const fn new(worker: usize) -> WorkerStats {
        WorkerStats {
            worker,
            accepted: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            active: AtomicU64::new(0),
            reading: AtomicU64::new(0),
            writing: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            responses: [const { AtomicU64::new(0) }; 5],
            sent_bytes: AtomicU64::new(0),
            duration: Histogram::new(),
            file_cache_hits: AtomicU64::new(0),
            file_cache_misses: AtomicU64::new(0),
            file_cache_entries: AtomicU64::new(0),
            panics: AtomicU64::new(0),
        }
    }

    /// Add this worker's figures into `s`.
    pub fn add_to(&self, s: &mut Snapshot) {
        s.accepted += self.accepted.load(Relaxed);
        s.handled += self.handled.load(Relaxed);
        s.active += self.active.load(Relaxed);
        s.reading += self.reading.load(Relaxed);
        s.writing += self.writing.load(Relaxed);
        s.requests += self.requests.load(Relaxed);
        for (a, b) in s.responses.iter_mut().zip(&self.responses) {
            *a += b.load(Relaxed);
        }
        s.sent_bytes += self.sent_bytes.load(Relaxed);
        self.duration.add_to(&mut s.duration);
        s.file_cache_hits += self.file_cache_hits.load(Relaxed);
        s.file_cache_misses += self.file_cache_misses.load(Relaxed);
        s.file_cache_entries += self.file_cache_entries.load(Relaxed);
        s.panics += self.panics.load(Relaxed);
    }
}

/// Figures added up over workers.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub accepted: u64,
    pub handled: u64,
    pub active: u64,
    pub reading: u64,
    pub writing: u64,
    pub requests: u64,
    pub responses: [u64; 5],
    pub sent_bytes: u64,
    pub duration: HistogramSnapshot,
    pub file_cache_hits: u64,
    pub file_cache_misses: u64,
    pub file_cache_entries: u64,
    pub panics: u64,
}

impl Snapshot {
    /// Idle connections: open, neither reading a request head nor answering.
    pub fn waiting(&self) -> u64 {
        self.active.saturating_sub(self.reading + self.writing)
    }
}

/// Counts of threads that are not workers (unit tests, the main thread).
static DETACHED: WorkerStats = WorkerStats::new(usize::MAX);

static REGISTRY: Mutex<Vec<&'static WorkerStats>> = Mutex::new(Vec::new());

thread_local! {
    static MINE: Cell<&'static WorkerStats> = const { Cell::new(&DETACHED) };
}

/// Give the calling worker thread its own figures (once, when it starts). The
/// allocation lives as long as the process: exited workers' counts still add up.
pub fn attach(worker: usize) {
    let s: &'static WorkerStats = Box::leak(Box::new(WorkerStats::new(worker)));
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    MINE.with(|m| m.set(s));
}

/// The calling thread's worker number (`usize::MAX` outside workers).
pub fn worker() -> usize {
    MINE.with(|m| m.get().worker)
}

/// Every worker's figures, including exited workers, in start order.
pub fn workers() -> Vec<&'static WorkerStats> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The sum over all workers.
pub fn total() -> Snapshot {
    let mut s = Snapshot::default();
    for w in workers() {
        w.add_to(&mut s);
    }
    s
}

/// Connections over all workers: (active, reading, writing), as
/// `$connections_*` read them (without the other figures).
pub fn connections() -> (u64, u64, u64) {
    let list = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    list.iter().fold((0, 0, 0), |(a, r, w), s| {
        (
            a + s.active.load(Relaxed),
            r + s.reading.load(Relaxed),
            w + s.writing.load(Relaxed),
        )
    })
}

/// The calling worker's connections handled plus requests: it has done
/// something since an earlier reading when this changed.
pub fn activity() -> u64 {
    MINE.with(|m| {
        let s = m.get();
        s.handled
            .load(Relaxed)
            .wrapping_add(s.requests.load(Relaxed))
    })
}

/// Single-writer increment: a relaxed load and store, no read-modify-write.
#[inline]
pub fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
}

#[inline]
fn drop_one(a: &AtomicU64) {
    a.store(a.load(Relaxed).saturating_sub(1), Relaxed);
}

/// The calling thread's figures (`try_with`: a connection may be dropped while
/// its thread exits; the cell has no destructor, so this costs no state check).
#[inline]
fn with(f: impl FnOnce(&'static WorkerStats)) {
    let _ = MINE.try_with(|m| f(m.get()));
}

/// A connection was accepted.
pub fn accepted() {
    with(|s| bump(&s.accepted, 1));
}

/// An accepted connection got a slot (it is served): handled, and active until
/// [`closed`].
pub fn opened() {
    with(|s| {
        bump(&s.handled, 1);
        bump(&s.active, 1);
    });
}

/// A handled connection closed.
pub fn closed() {
    with(|s| drop_one(&s.active));
}

/// A request panicked (answered 500).
pub fn panicked() {
    with(|s| bump(&s.panics, 1));
}

/// Open-file cache lookups.
pub fn file_cache(hit: bool) {
    with(|s| {
        bump(
            if hit {
                &s.file_cache_hits
            } else {
                &s.file_cache_misses
            },
            1,
        )
    });
}

/// This worker's open-file cache size (set by its once-a-second timer).
pub fn set_file_cache_entries(n: usize) {
    with(|s| s.file_cache_entries.store(n as u64, Relaxed));
}

/// A response went out: its status, bytes written (head and body), and the
/// request's start (ms since the epoch) for the duration histogram.
pub fn response(status: u16, bytes: u64, start_ms: u64) {
    let class = (status / 100).clamp(1, 5) as usize - 1;
    let ms = crate::sys::coarse_unix_millis().saturating_sub(start_ms);
    with(|s| {
        bump(&s.responses[class], 1);
        bump(&s.sent_bytes, bytes);
        s.duration.observe_ms(ms);
    });
}

/// What a connection is doing, for the Reading / Writing figures: reading a
/// request head from when its step starts, writing (which counts the request)
/// once the head is in, neither when dropped.
pub struct Busy {
    writing: bool,
}

impl Busy {
    #[inline]
    pub fn reading() -> Busy {
        with(|s| bump(&s.reading, 1));
        Busy { writing: false }
    }

    /// The request head is in (or refused): a request, now being answered.
    #[inline]
    pub fn writing(&mut self) {
        if !self.writing {
            self.writing = true;
            with(|s| {
                drop_one(&s.reading);
                bump(&s.writing, 1);
                bump(&s.requests, 1);
            });
        }
    }
}

impl Drop for Busy {
    #[inline]
    fn drop(&mut self) {
        let w = self.writing;
        with(|s| drop_one(if w { &s.writing } else { &s.reading }));
    }
}

/// Reloads, counted by the main thread.
pub static RELOADS: AtomicU64 = AtomicU64::new(0);
pub static RELOAD_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Binary upgrades started (USR2).
pub static UPGRADES: AtomicU64 = AtomicU64::new(0);
/// Live worker threads (set by the main thread).
pub static WORKERS: AtomicU64 = AtomicU64::new(0);
/// Unix time the process started, in seconds.
pub static STARTED: AtomicU64 = AtomicU64::new(0);
/// Unix time of the last successful (re)load of the configuration, in seconds.
pub static LAST_RELOAD: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets() {
        let h = Histogram::new();
        for ms in [0, 5, 6, 10_000, 10_001] {
            h.observe_ms(ms);
        }
        let mut s = HistogramSnapshot::default();
        h.add_to(&mut s);
        assert_eq!(s.buckets[0], 2);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[10], 1);
        assert_eq!(s.buckets[11], 1);
        assert_eq!(s.count(), 5);
        assert_eq!(s.sum_us, 20_012_000);
        let h = Histogram::new();
        h.observe_us(5_000);
        h.observe_us(5_001);
        h.observe_us(250);
        let mut s = HistogramSnapshot::default();
        h.add_to(&mut s);
        assert_eq!((s.buckets[0], s.buckets[1]), (2, 1));
        assert_eq!(s.sum_us, 10_251);
    }

    #[test]
    fn worker_figures_add_up() {
        std::thread::spawn(|| {
            attach(7);
            accepted();
            opened();
            let mut b = Busy::reading();
            b.writing();
            response(404, 100, crate::sys::coarse_unix_millis());
            drop(b);
            closed();
            let mine = workers().into_iter().rfind(|w| w.worker == 7).unwrap();
            let mut s = Snapshot::default();
            mine.add_to(&mut s);
            assert_eq!((s.accepted, s.handled, s.active), (1, 1, 0));
            assert_eq!((s.reading, s.writing, s.requests), (0, 0, 1));
            assert_eq!(s.responses, [0, 0, 0, 1, 0]);
            assert_eq!(s.sent_bytes, 100);
            assert_eq!(s.duration.count(), 1);
        })
        .join()
        .unwrap();
    }
}
