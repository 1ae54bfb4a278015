//! The process-wide error log.
//!
//! Lines look like nginx's: `2026/11/21 22:35:38 [warn] 1234#2: message`,
//! where 1234 is the process id and 2 the worker number of the logging
//! thread (see [`set_worker_id`]). Each line goes out in one `write(2)`.
//!
//! The destination is set at start-up and on reload with [`set`]; until
//! then lines at `notice` and above go to stderr. [`enabled`] is a single
//! relaxed atomic load, so a disabled [`error_log!`](crate::error_log)
//! costs next to nothing and does not format its arguments.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::core::clock;

/// Severity, from least to most severe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Debug,
    Info,
    Notice,
    Warn,
    Error,
    Crit,
    Alert,
    Emerg,
}

impl Level {
    const ALL: [Level; 8] = [
        Level::Debug,
        Level::Info,
        Level::Notice,
        Level::Warn,
        Level::Error,
        Level::Crit,
        Level::Alert,
        Level::Emerg,
    ];

    /// Parse a level as written in `error_log` (`"warn"`, `"error"`, …).
    pub fn parse(s: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == s)
    }

    /// The level's name as nginx writes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Notice => "notice",
            Level::Warn => "warn",
            Level::Error => "error",
            Level::Crit => "crit",
            Level::Alert => "alert",
            Level::Emerg => "emerg",
        }
    }

    fn from_u8(n: u8) -> Level {
        Level::ALL[usize::from(n).min(Level::ALL.len() - 1)]
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

enum Target {
    Stderr,
    File { path: PathBuf, file: File },
}

/// An error-log destination and its minimum level.
pub struct ErrorLog {
    target: Target,
    level: Level,
}

impl ErrorLog {
    /// Log to the process's standard error.
    pub fn stderr(level: Level) -> Self {
        ErrorLog {
            target: Target::Stderr,
            level,
        }
    }

    /// Log to a file, opened for appending (created with mode 0644). The
    /// path `stderr` means standard error, as in nginx.
    pub fn file(path: &Path, level: Level) -> io::Result<Self> {
        if path.as_os_str() == "stderr" {
            return Ok(ErrorLog::stderr(level));
        }
        Ok(ErrorLog {
            target: Target::File {
                path: path.to_path_buf(),
                file: open_append(path)?,
            },
            level,
        })
    }

    /// The minimum level written.
    pub fn level(&self) -> Level {
        self.level
    }

    /// The file written to; `None` for stderr.
    pub fn path(&self) -> Option<&Path> {
        match &self.target {
            Target::Stderr => None,
            Target::File { path, .. } => Some(path),
        }
    }

    fn write_line(&self, line: &[u8]) {
        // Nowhere left to report a failure of the error log itself.
        let _ = match &self.target {
            Target::Stderr => io::stderr().lock().write_all(line),
            Target::File { file, .. } => (&*file).write_all(line),
        };
    }
}

/// Open a log file for appending. `/dev/stdout` and `/dev/stderr` share the
/// process's own descriptors (a separate open would keep its own file offset and
/// overwrite the other stream's lines when both go to one file).
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    use std::os::fd::AsFd;
    if path == Path::new("/dev/stdout") {
        return Ok(File::from(io::stdout().as_fd().try_clone_to_owned()?));
    }
    if path == Path::new("/dev/stderr") {
        return Ok(File::from(io::stderr().as_fd().try_clone_to_owned()?));
    }
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
}

/// An I/O error as nginx prints an errno: "2: No such file or directory"
/// (without Rust's " (os error 2)" suffix).
pub fn errno_text(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            let text = e.to_string();
            let suffix = format!(" (os error {code})");
            let text = text.strip_suffix(&suffix).unwrap_or(&text);
            format!("{code}: {text}")
        }
        None => e.to_string(),
    }
}

/// Minimum level of the current log, for the lock-free [`enabled`] check.
static LEVEL: AtomicU8 = AtomicU8::new(Level::Notice as u8);
/// The current log; `None` means the default, stderr.
static LOG: RwLock<Option<ErrorLog>> = RwLock::new(None);

thread_local! {
    static WORKER_ID: Cell<usize> = const { Cell::new(0) };
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(256));
}

/// Install `target` as the process's error log, replacing the previous one.
pub fn set(target: ErrorLog) {
    let level = target.level;
    let mut g = LOG.write().unwrap_or_else(|e| e.into_inner());
    *g = Some(target);
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Reopen the current log file (after rotation, on USR1). No-op for stderr.
pub fn reopen() -> io::Result<()> {
    let mut g = LOG.write().unwrap_or_else(|e| e.into_inner());
    if let Some(ErrorLog {
        target: Target::File { path, file },
        ..
    }) = g.as_mut()
    {
        *file = open_append(path)?;
    }
    Ok(())
}

/// The minimum level currently written.
pub fn level() -> Level {
    Level::from_u8(LEVEL.load(Ordering::Relaxed))
}

/// Would a message at `level` be written?
#[inline]
pub fn enabled(level: Level) -> bool {
    level as u8 >= LEVEL.load(Ordering::Relaxed)
}

/// Set the worker number shown after `#` in this thread's lines.
pub fn set_worker_id(n: usize) {
    WORKER_ID.with(|w| w.set(n));
}

/// Write one line if `level` is enabled. Prefer the [`error_log!`](crate::error_log) macro.
pub fn log(level: Level, msg: fmt::Arguments) {
    if !enabled(level) {
        return;
    }
    let write = |line: &mut Vec<u8>| {
        line.clear();
        format_line(level, msg, line);
        let g = LOG.read().unwrap_or_else(|e| e.into_inner());
        match &*g {
            Some(log) => log.write_line(line),
            None => ErrorLog::stderr(Level::Notice).write_line(line),
        }
    };
    LINE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut line) => {
            write(&mut line);
            // Do not keep a huge buffer around after one long message.
            if line.capacity() > 64 * 1024 {
                *line = Vec::with_capacity(256);
            }
        }
        // Logging from inside a Display impl that is itself being logged.
        Err(_) => write(&mut Vec::new()),
    });
}

/// Build `"<time> [<level>] <pid>#<worker>: <msg>\n"` into `out`.
fn format_line(level: Level, msg: fmt::Arguments, out: &mut Vec<u8>) {
    clock::with_err_time(|t| out.extend_from_slice(t.as_bytes()));
    out.extend_from_slice(b" [");
    out.extend_from_slice(level.as_str().as_bytes());
    out.extend_from_slice(b"] ");
    crate::core::vars::push_u64(out, u64::from(std::process::id()));
    out.push(b'#');
    crate::core::vars::push_u64(out, WORKER_ID.with(|w| w.get()) as u64);
    out.extend_from_slice(b": ");
    let _ = out.write_fmt(msg);
    out.push(b'\n');
}

/// Log a message to the error log: `error_log!(Warn, "bad {}", thing)`.
/// The arguments are only formatted when the level is enabled.
#[macro_export]
macro_rules! error_log {
    ($lvl:ident, $($t:tt)*) => {{
        let lvl = $crate::errlog::Level::$lvl;
        if $crate::errlog::enabled(lvl) {
            $crate::errlog::log(lvl, ::std::format_args!($($t)*));
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        for l in Level::ALL {
            assert_eq!(Level::parse(l.as_str()), Some(l));
            assert_eq!(Level::from_u8(l as u8), l);
        }
        assert_eq!(Level::parse("warning"), None);
        assert_eq!(Level::parse("stderr"), None);
        assert!(Level::Debug < Level::Info && Level::Alert < Level::Emerg);
        assert_eq!(Level::Warn.to_string(), "warn");
    }

    #[test]
    fn line_format() {
        set_worker_id(7);
        let mut out = Vec::new();
        format_line(
            Level::Error,
            format_args!("open() \"{}\" failed", "/x"),
            &mut out,
        );
        let s = String::from_utf8(out).unwrap();
        // "YYYY/MM/DD HH:MM:SS [error] PID#7: open() "/x" failed\n"
        let b = s.as_bytes();
        assert!(s.len() > 20);
        for (i, &c) in b[..19].iter().enumerate() {
            match i {
                4 | 7 => assert_eq!(c, b'/'),
                10 => assert_eq!(c, b' '),
                13 | 16 => assert_eq!(c, b':'),
                _ => assert!(c.is_ascii_digit(), "{s}"),
            }
        }
        let rest = &s[19..];
        let expect = format!(" [error] {}#7: open() \"/x\" failed\n", std::process::id());
        assert_eq!(rest, expect);
    }

    #[test]
    fn errno_text_as_nginx() {
        let e = io::Error::from_raw_os_error(2);
        assert_eq!(errno_text(&e), "2: No such file or directory");
        let e = io::Error::other("plain");
        assert_eq!(errno_text(&e), "plain");
    }

    #[test]
    fn stderr_path_means_stderr() {
        let l = ErrorLog::file(Path::new("stderr"), Level::Warn).unwrap();
        assert!(l.path().is_none());
        assert_eq!(l.level(), Level::Warn);
    }

    /// The only test touching the process-wide log: other tests running in
    /// parallel may add their own lines, so only our markers are checked.
    #[test]
    fn file_target_and_filtering() {
        let dir = std::env::temp_dir().join(format!("vireo-errlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("error.log");
        let _ = std::fs::remove_file(&path);

        set(ErrorLog::file(&path, Level::Warn).unwrap());
        assert_eq!(level(), Level::Warn);
        assert!(enabled(Level::Warn) && enabled(Level::Emerg));
        assert!(!enabled(Level::Notice) && !enabled(Level::Debug));

        set_worker_id(3);
        let formatted = std::cell::Cell::new(false);
        let probe = Probe(&formatted);
        crate::error_log!(Info, "marker-info {}", probe);
        assert!(!formatted.get(), "disabled level must not format");
        crate::error_log!(Warn, "marker-warn {}", 1);
        crate::error_log!(Emerg, "marker-emerg");
        log(Level::Debug, format_args!("marker-debug"));

        // Rotation: move the file away, reopen, and keep logging.
        let rotated = dir.join("error.log.1");
        std::fs::rename(&path, &rotated).unwrap();
        reopen().unwrap();
        crate::error_log!(Error, "marker-after-reopen");

        set(ErrorLog::stderr(Level::Notice));

        let old = std::fs::read_to_string(&rotated).unwrap();
        let new = std::fs::read_to_string(&path).unwrap();
        let pid = std::process::id();
        assert!(
            old.contains(&format!(" [warn] {pid}#3: marker-warn 1\n")),
            "{old}"
        );
        assert!(
            old.contains(&format!(" [emerg] {pid}#3: marker-emerg\n")),
            "{old}"
        );
        assert!(!old.contains("marker-info") && !old.contains("marker-debug"));
        assert!(
            new.contains(&format!(" [error] {pid}#3: marker-after-reopen\n")),
            "{new}"
        );
        assert!(!new.contains("marker-warn"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    struct Probe<'a>(&'a std::cell::Cell<bool>);

    impl fmt::Display for Probe<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            self.0.set(true);
            f.write_str("probe")
        }
    }
}
