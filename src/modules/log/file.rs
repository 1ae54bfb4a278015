//! An open log file shared by all workers.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::core::errlog;

/// One log file, opened for appending (`O_APPEND|O_CREAT`, mode 0644), so
/// that lines written by several workers with one `write(2)` each never
/// interleave. Shared between workers through an `Arc`; [`reopen`] swaps the
/// descriptor in place after log rotation.
///
/// [`reopen`]: LogFile::reopen
pub struct LogFile {
    path: PathBuf,
    file: RwLock<File>,
}

impl LogFile {
    /// Open (creating if needed) `path` for appending.
    pub fn open(path: &Path) -> io::Result<Arc<LogFile>> {
        Ok(Arc::new(LogFile {
            path: path.to_path_buf(),
            file: RwLock::new(errlog::open_append(path)?),
        }))
    }

    /// The path the file was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append `buf`, normally with a single `write(2)`. A failure is
    /// reported to the error log, never to the caller: a request must not
    /// fail because its log line could not be written.
    pub fn write_all(&self, buf: &[u8]) {
        if buf.is_empty() {
            return;
        }
        let res = {
            let f = self.file.read().unwrap_or_else(|e| e.into_inner());
            (&*f).write_all(buf)
        };
        if let Err(e) = res {
            crate::error_log!(
                Alert,
                "write() to \"{}\" failed ({})",
                self.path.display(),
                e
            );
        }
    }

    /// Open the path again and write to the new file from now on (after the
    /// old one was renamed by log rotation). On error the old file is kept.
    pub fn reopen(&self) -> io::Result<()> {
        let new = errlog::open_append(&self.path)?;
        *self.file.write().unwrap_or_else(|e| e.into_inner()) = new;
        Ok(())
    }
}

impl fmt::Debug for LogFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogFile").field("path", &self.path).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn open_write_reopen() {
        let dir = std::env::temp_dir().join(format!("vireo-logfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("access.log");
        let _ = std::fs::remove_file(&path);

        std::fs::write(&path, b"old\n").unwrap();
        let f = LogFile::open(&path).unwrap();
        assert_eq!(f.path(), path);
        f.write_all(b"one\n");
        f.write_all(b"");
        assert_eq!(std::fs::read(&path).unwrap(), b"old\none\n");

        let rotated = dir.join("access.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        f.write_all(b"two\n");
        f.reopen().unwrap();
        f.write_all(b"three\n");
        assert_eq!(std::fs::read(&rotated).unwrap(), b"old\none\ntwo\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"three\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn created_with_mode_0644() {
        let dir = std::env::temp_dir().join(format!("vireo-logmode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("new.log");
        let _ = std::fs::remove_file(&path);
        let _f = LogFile::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        // The umask may only remove bits.
        assert_eq!(mode & !0o644, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn open_failure() {
        assert!(LogFile::open(Path::new("/nonexistent-dir-vireo/x.log")).is_err());
    }
}
