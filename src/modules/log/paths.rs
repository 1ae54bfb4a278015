//! Access logs whose paths have variables: the path is made for each
//! request and the file opened for the line, or taken from the worker's
//! `open_log_file_cache`.

use super::LogFormat;
use super::conf::{LogConf, OpenLogCache};
use crate::core::request::Request;
use crate::core::vars::Template;
use crate::core::vars::VarSource;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One path the cache knows: its descriptor once used `min_uses` times.
struct Entry {
    file: Option<File>,
    uses: u32,
    /// When the descriptor was opened (checked again after `valid`).
    opened: Instant,
    last: Instant,
}

thread_local! {
    static CACHE: RefCell<HashMap<PathBuf, Entry>> = RefCell::default();
    /// The cache settings last used, to expire entries once a second.
    static INACTIVE: RefCell<Option<OpenLogCache>> = const { RefCell::new(None) };
}

/// Write `format`'s line for the request to the file `path` names.
pub fn log(req: &Request<'_>, done: &dyn VarSource, path: &Template, format: &LogFormat) {
    let mut p = Vec::with_capacity(64);
    path.render(done, &mut p);
    let mut line = Vec::with_capacity(256);
    format.render(done, &mut line);
    let path = Path::new(std::ffi::OsStr::from_bytes(&p));
    match req.conf.get::<LogConf>().open_log_file_cache {
        None => match crate::core::errlog::open_append(path) {
            Ok(f) => write(&f, path, &line),
            Err(e) => open_failed(path, &e),
        },
        Some(c) => cached(path, &line, c),
    }
}

fn cached(path: &Path, line: &[u8], c: OpenLogCache) {
    INACTIVE.with(|i| *i.borrow_mut() = Some(c));
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let now = Instant::now();
        if let Some(e) = cache.get_mut(path) {
            if now.duration_since(e.last) > c.inactive {
                e.uses = 0;
                e.file = None;
            }
            if e.file.is_some() && now.duration_since(e.opened) > c.valid {
                e.file = None;
            }
            e.uses += 1;
            e.last = now;
            if let Some(f) = &e.file {
                write(f, path, line);
                return;
            }
            match crate::core::errlog::open_append(path) {
                Ok(f) => {
                    write(&f, path, line);
                    if e.uses >= c.min_uses {
                        e.file = Some(f);
                        e.opened = now;
                    }
                }
                Err(err) => open_failed(path, &err),
            }
            return;
        }
        // A file that does not open is not remembered.
        let f = match crate::core::errlog::open_append(path) {
            Ok(f) => f,
            Err(err) => return open_failed(path, &err),
        };
        write(&f, path, line);
        if cache.len() >= c.max {
            // Make room: the entry used least recently goes.
            if let Some(old) = cache
                .iter()
                .min_by_key(|(_, e)| e.last)
                .map(|(p, _)| p.clone())
            {
                cache.remove(&old);
            }
        }
        let e = Entry {
            file: (c.min_uses <= 1).then_some(f),
            uses: 1,
            opened: now,
            last: now,
        };
        cache.insert(path.to_path_buf(), e);
    });
}

fn write(mut f: &File, path: &Path, line: &[u8]) {
    if let Err(e) = f.write_all(line) {
        crate::error_log!(
            Alert,
            "write() to \"{}\" failed ({})",
            path.display(),
            crate::core::errlog::errno_text(&e)
        );
    }
}

fn open_failed(path: &Path, e: &std::io::Error) {
    crate::error_log!(
        Error,
        "open() \"{}\" failed ({})",
        path.display(),
        crate::core::errlog::errno_text(e)
    );
}

/// Close descriptors unused for `inactive` (once a second).
pub fn expire() {
    let Some(c) = INACTIVE.with(|i| *i.borrow()) else {
        return;
    };
    let now = Instant::now();
    CACHE.with(|cache| {
        cache
            .borrow_mut()
            .retain(|_, e| now.duration_since(e.last) <= c.inactive)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cache_keeps_used_files_and_evicts_the_oldest() {
        let dir = std::env::temp_dir().join(format!("vireo-logcache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = OpenLogCache {
            max: 3,
            inactive: Duration::from_secs(20),
            min_uses: 2,
            valid: Duration::from_secs(60),
        };
        let p = |n: &str| dir.join(n);
        for n in ["lru", "lru", "once", "first", "first", "second", "second"] {
            cached(&p(n), b"/\n", c);
        }
        let moved = std::env::temp_dir().join(format!("vireo-logcache-m-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&moved);
        std::fs::rename(&dir, &moved).unwrap();
        for n in ["lru", "once", "first", "second"] {
            cached(&p(n), b"/\n", c);
        }
        let count = |n: &str| std::fs::read(moved.join(n)).unwrap().len() / 2;
        // lru was evicted when second came, once never kept its descriptor.
        assert_eq!(count("lru"), 2);
        assert_eq!(count("once"), 1);
        assert_eq!(count("first"), 3);
        assert_eq!(count("second"), 3);
        CACHE.with(|c| c.borrow_mut().clear());
        let _ = std::fs::remove_dir_all(&moved);
    }
}
