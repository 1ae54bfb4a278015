//! A cache's keys zone: the index of its entries, shared by all workers and
//! kept across reloads; the loader that rebuilds it from disk at start and
//! the manager that keeps the cache within its bounds.

use super::store::{self, Entry};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// `*_cache_path` parameters besides the folder and the zone.
#[derive(Debug, Clone)]
pub struct Params {
    pub levels: Vec<u8>,
    pub use_temp_path: bool,
    pub inactive: Duration,
    pub max_size: Option<u64>,
    pub min_free: Option<u64>,
    pub loader_files: u64,
    pub loader_sleep: Duration,
    pub loader_threshold: Duration,
    pub manager_files: u64,
    pub manager_sleep: Duration,
    pub manager_threshold: Duration,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            levels: Vec::new(),
            use_temp_path: true,
            inactive: Duration::from_secs(600),
            max_size: None,
            min_free: None,
            loader_files: 100,
            loader_sleep: Duration::from_millis(50),
            loader_threshold: Duration::from_millis(200),
            manager_files: 100,
            manager_sleep: Duration::from_millis(50),
            manager_threshold: Duration::from_millis(200),
        }
    }
}

/// What the index knows of one key (or key variant): 48 bytes, so a key's
/// entry in the LRU (hash, node, links) takes 80.
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// Its file exists (else the key is only counted, `*_cache_min_uses`).
    pub exists: bool,
    pub valid_until: i64,
    /// The file's size.
    pub size: u64,
    pub uses: u32,
    /// A request is fetching it since this time (`zone::now_ms`, never 0):
    /// the lock of `*_cache_lock` and the `updating` state of
    /// `*_cache_use_stale`.
    pub filling: Option<std::num::NonZeroU64>,
    /// Last asked for (Unix seconds), for `inactive`.
    pub access: i64,
    /// Which file: a new one (stored again) has a new number, so a worker's
    /// opened entry of an older one is not taken for it.
    pub generation: u64,
}

/// The entries, least recently used first.
pub struct Index {
    map: lru::LruCache<[u8; 16], Node>,
    /// Most keys the zone holds.
    cap: usize,
    /// Bytes of the files.
    pub bytes: u64,
    /// The last [`Node::generation`] given.
    generation: u64,
}

/// Bytes of the keys zone one key takes (nginx's node and its share of the
/// slab pages): `1m` holds 8192 keys.
const NODE_COST: u64 = 128;

impl Node {
    /// A request starts fetching it now.
    pub fn fill_from(&mut self, now_ms: u64) {
        self.filling = std::num::NonZeroU64::new(now_ms);
    }
}

impl Index {
    fn new(size: u64) -> Index {
        Index {
            map: lru::LruCache::unbounded(),
            cap: (size / NODE_COST).max(1) as usize,
            bytes: 0,
            generation: 0,
        }
    }

    /// The node of `h`, made the most recently used.
    pub fn get(&mut self, h: &[u8; 16]) -> Option<&mut Node> {
        self.map.get_mut(h)
    }

    pub fn peek(&self, h: &[u8; 16]) -> Option<&Node> {
        self.map.peek(h)
    }

    /// The node of `h`, added when missing; a full zone first drops its least
    /// recently used nodes (their hashes are returned: their files go).
    pub fn entry(&mut self, h: &[u8; 16], now: i64, gone: &mut Vec<[u8; 16]>) -> &mut Node {
        if !self.map.contains(h) {
            while self.map.len() >= self.cap {
                match self.map.pop_lru() {
                    Some((k, n)) => {
                        if n.exists {
                            self.bytes -= n.size;
                            gone.push(k);
                        }
                    }
                    None => break,
                }
            }
            self.map.push(
                *h,
                Node {
                    access: now,
                    ..Default::default()
                },
            );
        }
        self.map.get_mut(h).expect("present")
    }

    /// Record that `h`'s file now exists with `size` bytes.
    pub fn stored(&mut self, h: &[u8; 16], size: u64, valid_until: i64) {
        if let Some(n) = self.map.get_mut(h) {
            if n.exists {
                self.bytes -= n.size;
            }
            n.exists = true;
            n.size = size;
            n.valid_until = valid_until;
            self.generation += 1;
            n.generation = self.generation;
            self.bytes += size;
        }
    }

    /// `h`'s file is gone (unreadable, replaced by nothing).
    pub fn forget(&mut self, h: &[u8; 16]) {
        if let Some(n) = self.map.pop(h)
            && n.exists
        {
            self.bytes -= n.size;
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// What a cache's requests count, for /metrics and stub_status.
#[derive(Default, Debug)]
pub struct Counters {
    pub hit: AtomicU64,
    pub miss: AtomicU64,
    pub expired: AtomicU64,
    pub stale: AtomicU64,
    pub updating: AtomicU64,
    pub revalidated: AtomicU64,
    pub bypass: AtomicU64,
    pub stored: AtomicU64,
    pub evicted: AtomicU64,
}

/// The state of one cache every worker and every configuration that
/// declares it shares.
pub struct Shared {
    index: Mutex<Index>,
    loader: AtomicBool,
    pub loaded: AtomicBool,
    /// The last second the manager ran.
    managed: AtomicI64,
    pub counters: Counters,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A cache as one configuration declares it.
pub struct CacheZone {
    pub name: Box<str>,
    pub dir: PathBuf,
    pub p: Params,
    pub shared: Arc<Shared>,
}

impl std::fmt::Debug for CacheZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CacheZone({} at {})", self.name, self.dir.display())
    }
}

/// Caches of live configurations, by name, size and folder.
type Kept = (Box<str>, u64, PathBuf, Weak<Shared>);
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());
/// Zones the manager looks after.
static LIVE: Mutex<Vec<Weak<CacheZone>>> = Mutex::new(Vec::new());

impl CacheZone {
    /// A zone; its index is the one of a live configuration declaring the
    /// same name, size and folder, else a new one (loaded from disk).
    pub fn new(name: String, size: u64, dir: PathBuf, p: Params) -> Arc<CacheZone> {
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|k| k.3.strong_count() > 0);
        let old = kept
            .iter()
            .find(|k| *k.0 == *name && k.1 == size && k.2 == dir)
            .and_then(|k| k.3.upgrade());
        let shared = old.unwrap_or_else(|| {
            let s = Arc::new(Shared {
                index: Mutex::new(Index::new(size)),
                loader: AtomicBool::new(false),
                loaded: AtomicBool::new(false),
                managed: AtomicI64::new(0),
                counters: Counters::default(),
            });
            kept.push((name.clone().into(), size, dir.clone(), Arc::downgrade(&s)));
            s
        });
        Arc::new(CacheZone {
            name: name.into(),
            dir,
            p,
            shared,
        })
    }

    pub fn path(&self, h: &[u8; 16]) -> PathBuf {
        store::path(&self.dir, &self.p.levels, h)
    }

    /// Forget the entry `h` and remove its file.
    pub fn remove(&self, h: &[u8; 16]) {
        self.shared.lock().forget(h);
        let _ = std::fs::remove_file(self.path(h));
    }

    /// Remove the files of these entries.
    pub fn remove_files(&self, gone: &[[u8; 16]]) {
        for h in gone {
            let _ = std::fs::remove_file(self.path(h));
        }
        self.shared
            .counters
            .evicted
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
    }
}

/// The zones a configuration declared are the ones to look after.
pub fn activate(zones: &[Arc<CacheZone>]) {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|z| z.strong_count() > 0);
    live.extend(zones.iter().map(Arc::downgrade));
}

pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Every zone of a live configuration (one per shared index).
pub fn live() -> Vec<Arc<CacheZone>> {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    let mut out: Vec<Arc<CacheZone>> = Vec::new();
    for z in live.iter().filter_map(Weak::upgrade) {
        if !out.iter().any(|o| Arc::ptr_eq(&o.shared, &z.shared)) {
            out.push(z);
        }
    }
    out
}

/// The tick, once a second in every worker: start each cache's loader once,
/// and run its manager in one worker a second.
pub fn tick() {
    let now = unix_now();
    for z in live() {
        if !z.shared.loader.swap(true, Ordering::AcqRel) {
            let zone = z.clone();
            let spawned = std::thread::Builder::new()
                .name("cache loader".into())
                .spawn(move || load(&zone));
            if spawned.is_err() {
                z.shared.loader.store(false, Ordering::Release);
            }
        }
        if z.shared.managed.swap(now, Ordering::AcqRel) != now {
            manage(&z, now);
        }
    }
}

/// Rebuild the index from the folder: every entry file whose checksums and
/// length check out is indexed (unless a request stored it meanwhile);
/// others, and temporary files an earlier process left, are removed.
fn load(z: &CacheZone) {
    let t0 = Instant::now();
    let mut batch = (0u64, Instant::now());
    let mut found = 0u64;
    let own = format!("{}{}-", store::TEMP_PREFIX, std::process::id());
    walk(&z.dir, |path, name| {
        if name.starts_with(store::TEMP_PREFIX) {
            if !name.starts_with(&own) {
                let _ = std::fs::remove_file(path);
            }
            return;
        }
        let Some(h) = store::unhex(name) else {
            return;
        };
        if load_one(z, path, &h).is_err() {
            crate::error_log!(
                Warn,
                "cache file \"{}\" removed: it does not check out",
                path.display()
            );
            let _ = std::fs::remove_file(path);
        } else {
            found += 1;
        }
        batch.0 += 1;
        if batch.0 >= z.p.loader_files || batch.1.elapsed() >= z.p.loader_threshold {
            std::thread::sleep(z.p.loader_sleep);
            batch = (0, Instant::now());
        }
    });
    z.shared.loaded.store(true, Ordering::Release);
    crate::error_log!(
        Notice,
        "cache \"{}\": {found} entries loaded from \"{}\" in {} ms",
        z.name,
        z.dir.display(),
        t0.elapsed().as_millis()
    );
}

/// Every file under a cache folder, with its name.
pub fn walk(dir: &Path, mut file: impl FnMut(&Path, &str)) {
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let path = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                dirs.push(path);
            } else {
                file(&path, &e.file_name().to_string_lossy());
            }
        }
    }
}

fn load_one(z: &CacheZone, path: &Path, h: &[u8; 16]) -> std::io::Result<()> {
    let e = Entry::open(path)?;
    e.verify_body()?;
    let now = unix_now();
    let mut gone = Vec::new();
    {
        let mut idx = z.shared.lock();
        if idx.peek(h).is_some_and(|n| n.exists || n.filling.is_some()) {
            return Ok(());
        }
        idx.entry(h, now, &mut gone);
        idx.stored(h, e.size(), e.valid_until);
    }
    z.remove_files(&gone);
    Ok(())
}

/// One manager pass: entries not used for `inactive`, then (least recently
/// used first) entries while the cache is over `max_size` or its file
/// system under `min_free`; `manager_files` at a time, until nothing is left
/// to do or `manager_threshold` has passed.
fn manage(z: &CacheZone, now: i64) {
    let t0 = Instant::now();
    let inactive = z.p.inactive.as_secs() as i64;
    let mut short = match z.p.min_free {
        Some(min) => crate::sys::free_space(&z.dir).map_or(0, |f| min.saturating_sub(f)),
        None => 0,
    };
    loop {
        let mut gone = Vec::new();
        {
            let mut idx = z.shared.lock();
            while (gone.len() as u64) < z.p.manager_files {
                let over = z.p.max_size.is_some_and(|m| idx.bytes > m);
                let Some((h, n)) = idx.map.peek_lru() else {
                    break;
                };
                if n.filling.is_some() {
                    // Being fetched: moved up, looked at next time.
                    let h = *h;
                    idx.map.promote(&h);
                    break;
                }
                if !(over || short > 0 || n.access + inactive <= now) {
                    break;
                }
                let (h, n) = idx.map.pop_lru().expect("peeked");
                if n.exists {
                    idx.bytes -= n.size;
                    short = short.saturating_sub(n.size);
                    gone.push(h);
                }
            }
        }
        let done = (gone.len() as u64) < z.p.manager_files;
        z.remove_files(&gone);
        if done || t0.elapsed() >= z.p.manager_threshold {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_48_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 48);
    }

    #[test]
    fn a_full_zone_drops_its_least_recently_used_keys() {
        let mut idx = Index::new(3 * NODE_COST);
        let mut gone = Vec::new();
        for i in 0..3u8 {
            idx.entry(&[i; 16], 0, &mut gone);
            idx.stored(&[i; 16], 10, 0);
        }
        assert_eq!(idx.bytes, 30);
        idx.get(&[0; 16]);
        idx.entry(&[9; 16], 0, &mut gone);
        assert_eq!(gone, vec![[1; 16]]);
        assert_eq!((idx.len(), idx.bytes), (3, 20));
    }

    #[test]
    fn the_manager_removes_inactive_and_oversize_entries() {
        let dir = std::env::temp_dir().join(format!("vireo-mgr-{}", std::process::id()));
        let z = CacheZone::new(
            "mgr".into(),
            1 << 20,
            dir.clone(),
            Params {
                max_size: Some(15),
                inactive: Duration::from_secs(60),
                ..Params::default()
            },
        );
        {
            let mut idx = z.shared.lock();
            let mut gone = Vec::new();
            for (i, at) in [(1u8, 0i64), (2, 1000), (3, 1000)] {
                idx.entry(&[i; 16], at, &mut gone);
                idx.stored(&[i; 16], 10, 0);
            }
        }
        manage(&z, 1000);
        let idx = z.shared.lock();
        // [1] was inactive; [2] went for max_size; [3] stays.
        assert!(idx.peek(&[1; 16]).is_none() && idx.peek(&[2; 16]).is_none());
        assert_eq!(idx.bytes, 10);
    }
}
