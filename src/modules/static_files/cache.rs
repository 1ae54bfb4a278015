//! The open-file cache: per worker (thread-local, no locks), keyed by path. Keeps
//! descriptors, metadata, the ETag and Last-Modified strings, and the bodies of
//! small files, so a hot file costs no open/stat/read per request.

use super::conf::StaticConf;
use bytes::Bytes;
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bodies up to this size are read once and kept with the cache entry, so the
/// head and body leave in one write. Larger ones go by sendfile: copying a
/// 21 KB body into the write costs more CPU than the second syscall (E3's
/// 21 KB file: 0.89× the CPU per request of a 32 KiB threshold).
pub const SMALL_BODY: u64 = 4 * 1024;
/// Most bytes of small bodies one worker's cache holds.
const BODY_BUDGET: usize = 64 << 20;

#[derive(Debug)]
pub struct FileInfo {
    /// Open descriptor (regular files only).
    pub file: Option<Rc<File>>,
    pub is_dir: bool,
    pub is_file: bool,
    pub size: u64,
    pub mtime: i64,
    ino: u64,
    pub etag: Arc<str>,
    pub last_modified: Arc<str>,
    /// Whole contents of a small file, when cached.
    pub body: Option<Bytes>,
}

impl FileInfo {
    fn new(file: Option<File>, m: &Metadata) -> FileInfo {
        let mut etag = String::new();
        super::conditional::etag(m.mtime(), m.size(), &mut etag);
        let lm = std::time::UNIX_EPOCH + Duration::from_secs(m.mtime().max(0) as u64);
        FileInfo {
            file: file.map(Rc::new),
            is_dir: m.is_dir(),
            is_file: m.is_file(),
            size: m.size(),
            mtime: m.mtime(),
            ino: m.ino(),
            etag: Arc::from(etag),
            last_modified: Arc::from(httpdate::fmt_http_date(lm)),
            body: None,
        }
    }
}

struct Entry {
    info: Result<Rc<FileInfo>, i32>,
    uses: u32,
    validated: Instant,
    accessed: Instant,
    inactive: Duration,
}

#[derive(Default)]
struct Cache {
    map: FxHashMap<Box<[u8]>, Entry>,
    body_bytes: usize,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::default();
}

fn open_path(path: &Path) -> io::Result<(Option<File>, Metadata)> {
    // O_NONBLOCK: opening a FIFO must not stall the worker.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let m = f.metadata()?;
    Ok((m.is_file().then_some(f), m))
}

fn read_body(info: &FileInfo) -> Option<Bytes> {
    let f = info.file.as_ref()?;
    let mut buf = vec![0; info.size as usize];
    f.read_exact_at(&mut buf, 0).ok()?;
    Some(Bytes::from(buf))
}

/// Look a file up, through the cache when `open_file_cache` is on for this location.
pub fn open(path: &[u8], conf: &StaticConf) -> io::Result<Rc<FileInfo>> {
    let p = Path::new(OsStr::from_bytes(path));
    let Some(spec) = conf.open_file_cache else {
        let (f, m) = open_path(p)?;
        return Ok(Rc::new(FileInfo::new(f, &m)));
    };
    let now = Instant::now();
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if let Some(e) = c.map.get_mut(path) {
            e.accessed = now;
            e.uses = e.uses.saturating_add(1);
            if now.duration_since(e.validated) < conf.open_file_cache_valid {
                let kept = e.uses >= conf.open_file_cache_min_uses;
                match &e.info {
                    Ok(info) if kept && (info.file.is_some() || !info.is_file) => {
                        crate::server::stats::file_cache(true);
                        return Ok(info.clone());
                    }
                    Err(errno) => {
                        crate::server::stats::file_cache(true);
                        return Err(io::Error::from_raw_os_error(*errno));
                    }
                    Ok(_) => {}
                }
            } else if let Ok(info) = &e.info
                && std::fs::metadata(p).is_ok_and(|m| {
                    m.ino() == info.ino && m.size() == info.size && m.mtime() == info.mtime
                })
            {
                // Unchanged on disk: trust it for another period.
                e.validated = now;
                if info.file.is_some() || !info.is_file {
                    crate::server::stats::file_cache(true);
                    return Ok(info.clone());
                }
            }
        }
        let uses = c.map.get(path).map_or(1, |e| e.uses);
        crate::server::stats::file_cache(false);
        let result = open_path(p);
        let keep = uses >= conf.open_file_cache_min_uses;
        let info = match result {
            Ok((f, m)) => {
                let mut info = FileInfo::new(f, &m);
                if keep && info.is_file && info.size <= SMALL_BODY {
                    info.body = read_body(&info);
                }
                Ok(Rc::new(info))
            }
            Err(e) => Err(e),
        };
        let cached = match &info {
            Ok(i) if keep => Ok(i.clone()),
            // Below min_uses: remember the uses, not the descriptor.
            Ok(i) => Ok(Rc::new(FileInfo {
                file: None,
                body: None,
                etag: i.etag.clone(),
                last_modified: i.last_modified.clone(),
                ..**i
            })),
            Err(e) if conf.open_file_cache_errors => Err(e.raw_os_error().unwrap_or(libc::EIO)),
            Err(_) => {
                c.map.remove(path);
                return info;
            }
        };
        if !c.map.contains_key(path) && c.map.len() >= spec.max {
            c.evict(now, spec.max);
        }
        let body = cached
            .as_ref()
            .ok()
            .and_then(|i| i.body.as_ref())
            .map_or(0, Bytes::len);
        if c.body_bytes + body > BODY_BUDGET {
            // Over budget: serve it, but keep it uncached rather than grow.
            return info;
        }
        c.body_bytes += body;
        let old = c.map.insert(
            path.into(),
            Entry {
                info: cached,
                uses,
                validated: now,
                accessed: now,
                inactive: spec.inactive,
            },
        );
        if let Some(old) = old {
            c.body_bytes -= old.body_len();
        }
        info
    })
}

impl Entry {
    fn body_len(&self) -> usize {
        self.info
            .as_ref()
            .ok()
            .and_then(|i| i.body.as_ref())
            .map_or(0, Bytes::len)
    }
}

impl Cache {
    /// Make room for one entry: drop inactive ones, else the least recently used of a sample.
    fn evict(&mut self, now: Instant, max: usize) {
        self.sweep(now);
        if self.map.len() < max {
            return;
        }
        let victim = self
            .map
            .iter()
            .take(16)
            .min_by_key(|(_, e)| e.accessed)
            .map(|(k, _)| k.clone());
        if let Some(k) = victim
            && let Some(e) = self.map.remove(&k)
        {
            self.body_bytes -= e.body_len();
        }
    }

    fn sweep(&mut self, now: Instant) {
        let mut freed = 0;
        self.map.retain(|_, e| {
            let keep = now.duration_since(e.accessed) < e.inactive;
            if !keep {
                freed += e.body_len();
            }
            keep
        });
        self.body_bytes -= freed;
    }
}

/// Drop entries unused for their `inactive` time (called by the worker's timer).
pub fn sweep() {
    CACHE.with(|c| c.borrow_mut().sweep(Instant::now()));
}

/// Entries in this worker's cache (for tests and metrics).
pub fn len() -> usize {
    CACHE.with(|c| c.borrow().map.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::modules::static_files::conf::OpenFileCacheSpec;
    use std::os::unix::ffi::OsStrExt;

    fn conf(min_uses: u32, errors: bool) -> StaticConf {
        StaticConf {
            open_file_cache: Some(OpenFileCacheSpec {
                max: 100,
                inactive: Duration::from_secs(20),
            }),
            open_file_cache_min_uses: min_uses,
            open_file_cache_errors: errors,
            ..Default::default()
        }
    }

    #[test]
    fn caches_descriptor_and_small_body() {
        let dir = std::env::temp_dir().join(format!("vireo-ofc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.txt");
        std::fs::write(&f, b"hello").unwrap();
        let key = f.as_os_str().as_bytes();
        let c = conf(2, false);
        let first = open(key, &c).unwrap();
        assert!(
            first.file.is_some(),
            "the first use is served from an open file"
        );
        assert!(
            CACHE.with(|c| c.borrow().map[key].info.as_ref().unwrap().file.is_none()),
            "but the descriptor is not kept before min_uses"
        );
        let second = open(key, &c).unwrap();
        assert_eq!(second.body.as_deref(), Some(&b"hello"[..]));
        let third = open(key, &c).unwrap();
        assert!(Rc::ptr_eq(&second, &third), "served from cache");
        // Deleting the file does not matter while the entry is valid.
        std::fs::remove_file(&f).unwrap();
        assert!(open(key, &c).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_cached_only_when_asked() {
        let missing = b"/nonexistent/vireo/cache/test";
        assert!(open(missing, &conf(1, false)).is_err());
        assert!(CACHE.with(|c| !c.borrow().map.contains_key(&missing[..])));
        assert!(open(missing, &conf(1, true)).is_err());
        assert!(CACHE.with(|c| c.borrow().map.contains_key(&missing[..])));
    }
}
