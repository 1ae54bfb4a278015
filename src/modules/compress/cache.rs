//! The compressed-variant cache: per worker (thread-local, no locks), the
//! compressed bytes of small static bodies, so a hot file is compressed once
//! instead of on every request. nginx has none; vireo's `compress_cache`
//! directive sizes or disables it.
//!
//! Keys never name stale content: a file body is keyed by what `fstat` says of
//! the descriptor about to be read (device, inode, mtime in ns, size); a body
//! already in memory (from the open-file cache) by the address and length of
//! that buffer, which the entry keeps alive, so no other content can take the
//! address while the entry exists.

use super::encoder::Params;
use bytes::Bytes;
use rustc_hash::FxHashMap;
use std::cell::RefCell;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    File {
        dev: u64,
        ino: u64,
        mtime_ns: i128,
        size: u64,
        start: u64,
        end: u64,
    },
    Memory {
        addr: usize,
        len: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub source: Source,
    pub params: Params,
}

struct Entry {
    data: Bytes,
    /// The in-memory source, held so its address stays unique.
    pin: Option<Bytes>,
    used: u64,
}

impl Entry {
    fn cost(&self) -> usize {
        self.data.len() + self.pin.as_ref().map_or(0, Bytes::len) + 64
    }
}

#[derive(Default)]
struct Cache {
    map: FxHashMap<Key, Entry>,
    bytes: usize,
    clock: u64,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::default();
}

pub fn get(key: &Key) -> Option<Bytes> {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.clock += 1;
        let now = c.clock;
        let e = c.map.get_mut(key)?;
        e.used = now;
        Some(e.data.clone())
    })
}

/// Keep `data` under `key` within `budget` bytes for the worker; an entry may
/// use at most an eighth of the budget.
pub fn put(key: Key, data: Bytes, pin: Option<Bytes>, budget: usize) {
    let e = Entry { data, pin, used: 0 };
    let cost = e.cost();
    if cost > budget / 8 {
        return;
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.clock += 1;
        let e = Entry { used: c.clock, ..e };
        if let Some(old) = c.map.remove(&key) {
            c.bytes -= old.cost();
        }
        while c.bytes + cost > budget && !c.map.is_empty() {
            c.evict();
        }
        c.bytes += cost;
        c.map.insert(key, e);
    })
}

impl Cache {
    /// Drop the least recently used of a sample of entries.
    fn evict(&mut self) {
        let victim = self
            .map
            .iter()
            .take(16)
            .min_by_key(|(_, e)| e.used)
            .map(|(k, _)| *k);
        if let Some(k) = victim
            && let Some(e) = self.map.remove(&k)
        {
            self.bytes -= e.cost();
        }
    }
}

/// (entries, bytes) in this worker's cache.
#[cfg(test)]
pub fn stats() -> (usize, usize) {
    CACHE.with(|c| {
        let c = c.borrow();
        (c.map.len(), c.bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::compress::Coding;

    fn key(n: usize) -> Key {
        Key {
            source: Source::Memory { addr: n, len: n },
            params: Params {
                coding: Coding::Gzip,
                level: 1,
                window: 0,
            },
        }
    }

    #[test]
    fn bounded_and_least_recently_used_goes() {
        let budget = 8000;
        for i in 0..100 {
            put(key(i), Bytes::from(vec![0; 400]), None, budget);
            assert!(stats().1 <= budget);
            // Key 0 stays hot.
            assert!(get(&key(0)).is_some(), "hot entry kept at {i}");
        }
        assert!(stats().0 < 20);
        // Too large for the budget: not kept.
        put(key(1000), Bytes::from(vec![0; 2000]), None, budget);
        assert!(get(&key(1000)).is_none());
        // The pinned source counts.
        put(
            key(1001),
            Bytes::from(vec![0; 100]),
            Some(Bytes::from(vec![1; 700])),
            budget,
        );
        assert!(get(&key(1001)).is_some());
        assert!(stats().1 <= budget);
    }
}
