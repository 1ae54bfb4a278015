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
use std::rc::Rc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use crate::core::clock;
use crate::core::syslog::{self, Syslog};

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

/// An `error_log` destination as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    Stderr,
    File(PathBuf),
    Syslog(syslog::Spec),
}

impl Dest {
    /// Parse `error_log`'s first argument: `stderr`, `syslog:…` or a file
    /// path (made absolute by `path`). `memory:` is refused.
    pub fn parse(arg: &str, path: impl FnOnce(&str) -> PathBuf) -> Result<Dest, String> {
        if let Some(p) = arg.strip_prefix("syslog:") {
            return syslog::Spec::parse(p).map(Dest::Syslog);
        }
        if arg.starts_with("memory:") {
            return Err(
                "error_log to \"memory:\" is not supported: use a file, stderr or syslog".into(),
            );
        }
        Ok(match arg {
            "stderr" => Dest::Stderr,
            p => Dest::File(path(p)),
        })
    }
}

enum Target {
    Stderr,
    File { path: PathBuf, file: RwLock<File> },
    Syslog(Syslog),
}

struct Sink {
    target: Target,
    level: Level,
}

/// The error logs of one level (main, http, server or location): each
/// destination with its minimum level. A message goes to every destination
/// whose level it reaches.
pub struct ErrorLog {
    sinks: Vec<Sink>,
    /// What was opened, when opened from a configuration.
    dests: Vec<(Dest, Level)>,
}

impl fmt::Debug for ErrorLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for s in &self.sinks {
            match &s.target {
                Target::Stderr => l.entry(&("stderr", s.level)),
                Target::File { path, .. } => l.entry(&(path, s.level)),
                Target::Syslog(sl) => l.entry(&(sl.spec(), s.level)),
            };
        }
        l.finish()
    }
}

impl ErrorLog {
    /// Log to the process's standard error.
    pub fn stderr(level: Level) -> Self {
        ErrorLog {
            sinks: vec![Sink {
                target: Target::Stderr,
                level,
            }],
            dests: vec![(Dest::Stderr, level)],
        }
    }

    /// Log to a file, opened for appending (created with mode 0644). The
    /// path `stderr` means standard error, as in nginx.
    pub fn file(path: &Path, level: Level) -> io::Result<Self> {
        if path.as_os_str() == "stderr" {
            return Ok(ErrorLog::stderr(level));
        }
        Ok(ErrorLog {
            sinks: vec![Sink {
                target: Target::File {
                    path: path.to_path_buf(),
                    file: RwLock::new(open_append(path)?),
                },
                level,
            }],
            dests: vec![(Dest::File(path.to_path_buf()), level)],
        })
    }

    /// Open every destination; an error names the file that failed.
    pub fn open(dests: &[(Dest, Level)]) -> Result<Self, String> {
        let mut sinks = Vec::with_capacity(dests.len());
        for (d, level) in dests {
            let target = match d {
                Dest::Stderr => Target::Stderr,
                Dest::File(p) if p.as_os_str() == "stderr" => Target::Stderr,
                Dest::File(p) => Target::File {
                    path: p.clone(),
                    file: RwLock::new(open_append(p).map_err(|e| {
                        format!("open() \"{}\" failed ({})", p.display(), errno_text(&e))
                    })?),
                },
                Dest::Syslog(spec) => Target::Syslog(Syslog::new(spec.clone())),
            };
            sinks.push(Sink {
                target,
                level: *level,
            });
        }
        Ok(ErrorLog {
            sinks,
            dests: dests.to_vec(),
        })
    }

    /// The destinations as configured.
    pub fn dests(&self) -> &[(Dest, Level)] {
        &self.dests
    }

    /// The minimum level written by any destination.
    pub fn level(&self) -> Level {
        self.sinks
            .iter()
            .map(|s| s.level)
            .min()
            .unwrap_or(Level::Emerg)
    }

    /// The first file written to; `None` when there is none (stderr, syslog).
    pub fn path(&self) -> Option<&Path> {
        self.sinks.iter().find_map(|s| match &s.target {
            Target::File { path, .. } => Some(path.as_path()),
            _ => None,
        })
    }

    /// Write a formatted line (ending in a newline) at `level` to every
    /// destination that takes it; syslog gets it without the newline.
    fn write_line(&self, level: Level, line: &[u8], all: bool) {
        for s in self.sinks.iter().filter(|s| all || level >= s.level) {
            // Nowhere left to report a failure of the error log itself.
            let _ = match &s.target {
                Target::Stderr => io::stderr().lock().write_all(line),
                Target::File { file, .. } => {
                    let f = file.read().unwrap_or_else(|e| e.into_inner());
                    (&*f).write_all(line)
                }
                Target::Syslog(sl) => {
                    let msg = line.strip_suffix(b"\n").unwrap_or(line);
                    sl.send(Some(syslog::severity(level)), msg);
                    Ok(())
                }
            };
        }
    }

    /// Reopen the files (after rotation).
    fn reopen(&self) -> io::Result<()> {
        for s in &self.sinks {
            if let Target::File { path, file } = &s.target {
                let new = open_append(path)?;
                *file.write().unwrap_or_else(|e| e.into_inner()) = new;
            }
        }
        Ok(())
    }

    /// Make this a log of an http, server or location level: it is reopened
    /// with the main log, and messages at its level are no longer filtered
    /// out by [`enabled`].
    pub fn scoped(self) -> Arc<ErrorLog> {
        let log = Arc::new(self);
        let mut r = SCOPED.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|w| w.strong_count() > 0);
        r.push(Arc::downgrade(&log));
        SCOPED_LEVEL.fetch_min(log.level() as u8, Ordering::Relaxed);
        update_level();
        log
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

/// Minimum level any log writes, for the lock-free [`enabled`] check.
static LEVEL: AtomicU8 = AtomicU8::new(Level::Notice as u8);
/// Minimum level of the main log.
static MAIN_LEVEL: AtomicU8 = AtomicU8::new(Level::Notice as u8);
/// `debug_connection` is configured: debug messages may be written.
static DEBUG_CONN: AtomicU8 = AtomicU8::new(u8::MAX);
/// The `debug_connection` addresses.
static DEBUG_NETS: RwLock<Vec<DebugConnection>> = RwLock::new(Vec::new());
/// Minimum level of the logs of http, server and location levels.
static SCOPED_LEVEL: AtomicU8 = AtomicU8::new(u8::MAX);
/// The current log; `None` means the default, stderr.
static LOG: RwLock<Option<ErrorLog>> = RwLock::new(None);
/// The logs of http, server and location levels, for reopening.
static SCOPED: Mutex<Vec<Weak<ErrorLog>>> = Mutex::new(Vec::new());

thread_local! {
    static WORKER_ID: Cell<usize> = const { Cell::new(0) };
    static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(256));
    /// The scope of the request being polled on this thread, if any.
    static CURRENT: RefCell<Option<Rc<Scope>>> = const { RefCell::new(None) };
}

fn update_level() {
    let l = MAIN_LEVEL
        .load(Ordering::Relaxed)
        .min(SCOPED_LEVEL.load(Ordering::Relaxed))
        .min(DEBUG_CONN.load(Ordering::Relaxed));
    LEVEL.store(l, Ordering::Relaxed);
}

/// Install `target` as the process's error log, replacing the previous one.
pub fn set(target: ErrorLog) {
    let level = target.level();
    let mut g = LOG.write().unwrap_or_else(|e| e.into_inner());
    *g = Some(target);
    MAIN_LEVEL.store(level as u8, Ordering::Relaxed);
    // Logs of levels a reload dropped no longer count.
    let mut r = SCOPED.lock().unwrap_or_else(|e| e.into_inner());
    r.retain(|w| w.strong_count() > 0);
    let scoped = r
        .iter()
        .filter_map(|w| w.upgrade())
        .map(|l| l.level() as u8)
        .min()
        .unwrap_or(u8::MAX);
    SCOPED_LEVEL.store(scoped, Ordering::Relaxed);
    update_level();
}

/// Reopen the log files (after rotation, on USR1): the main log's and every
/// level's.
pub fn reopen() -> io::Result<()> {
    let mut res = Ok(());
    if let Some(log) = LOG.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        res = log.reopen();
    }
    let logs: Vec<Arc<ErrorLog>> = {
        let mut r = SCOPED.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|w| w.strong_count() > 0);
        r.iter().filter_map(|w| w.upgrade()).collect()
    };
    for l in logs {
        if let Err(e) = l.reopen() {
            res = Err(e);
        }
    }
    res
}

/// The minimum level currently written by the main log.
pub fn level() -> Level {
    Level::from_u8(MAIN_LEVEL.load(Ordering::Relaxed))
}

/// Could a message at `level` be written (by the main log or a level's)?
#[inline]
pub fn enabled(level: Level) -> bool {
    level as u8 >= LEVEL.load(Ordering::Relaxed)
}

/// Are there logs of http, server or location levels (then requests run in
/// a [`Scope`])?
#[inline]
pub fn has_scoped() -> bool {
    SCOPED_LEVEL.load(Ordering::Relaxed) != u8::MAX
}

/// A `debug_connection` client: an address or network, or any Unix socket client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugConnection {
    Net(std::net::IpAddr, u8),
    Unix,
}

impl DebugConnection {
    /// `address`, `address/bits` or `unix:`.
    pub fn parse(s: &str) -> Option<DebugConnection> {
        if s == "unix:" {
            return Some(DebugConnection::Unix);
        }
        let (a, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().ok()?)),
            None => (s, None),
        };
        let ip: std::net::IpAddr = a.parse().ok()?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        (bits <= max).then_some(DebugConnection::Net(ip, bits))
    }

    /// Does the client at `ip` (`None`: a Unix socket) match?
    pub fn matches(&self, ip: Option<std::net::IpAddr>) -> bool {
        use std::net::IpAddr;
        match (self, ip) {
            (DebugConnection::Unix, None) => true,
            (DebugConnection::Net(IpAddr::V4(n), bits), Some(IpAddr::V4(a))) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*bits)).unwrap_or(0);
                u32::from(*n) & mask == u32::from(a) & mask
            }
            (DebugConnection::Net(IpAddr::V6(n), bits), Some(IpAddr::V6(a))) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(*bits)).unwrap_or(0);
                u128::from(*n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Install the `debug_connection` list (at start and on each reload).
pub fn set_debug_connections(list: &[DebugConnection]) {
    *DEBUG_NETS.write().unwrap_or_else(|e| e.into_inner()) = list.to_vec();
    let l = if list.is_empty() {
        u8::MAX
    } else {
        Level::Debug as u8
    };
    DEBUG_CONN.store(l, Ordering::Relaxed);
    update_level();
}

/// Is the client at `ip` (`None`: a Unix socket) one of `debug_connection`'s?
pub fn debug_connection(ip: Option<std::net::IpAddr>) -> bool {
    if DEBUG_CONN.load(Ordering::Relaxed) == u8::MAX {
        return false;
    }
    let nets = DEBUG_NETS.read().unwrap_or_else(|e| e.into_inner());
    nets.iter().any(|n| n.matches(ip))
}

/// Does a request need a [`Scope`]: are there logs of http, server or
/// location levels, or `debug_connection` clients?
#[inline]
pub fn scopes() -> bool {
    has_scoped() || DEBUG_CONN.load(Ordering::Relaxed) != u8::MAX
}

/// A request's error log: its current level's (`None`: the main log). The
/// request updates it as its location changes; [`scoped`] makes it the
/// destination of every message logged while the request is polled.
#[derive(Debug, Default)]
pub struct Scope(RefCell<Option<Arc<ErrorLog>>>, bool);

impl Scope {
    /// `debug`: a `debug_connection` client, whose messages every log
    /// takes whatever its level.
    pub fn new(log: Option<Arc<ErrorLog>>, debug: bool) -> Rc<Scope> {
        Rc::new(Scope(RefCell::new(log), debug))
    }

    /// Log to `log` from now on.
    pub fn set(&self, log: &Option<Arc<ErrorLog>>) {
        let mut g = self.0.borrow_mut();
        let same = match (&*g, log) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            *g = log.clone();
        }
    }
}

/// Run `fut` with `scope` as the error log of the messages it logs: on
/// each poll the scope is made current on this thread, and the previous one
/// restored after. Without a scope, the future is polled as it is.
pub fn scoped<F: std::future::Future>(
    scope: Option<Rc<Scope>>,
    fut: std::pin::Pin<&mut F>,
) -> Scoped<'_, F> {
    Scoped { scope, fut }
}

/// The future of [`scoped`].
pub struct Scoped<'a, F> {
    scope: Option<Rc<Scope>>,
    fut: std::pin::Pin<&'a mut F>,
}

impl<F: std::future::Future> std::future::Future for Scoped<'_, F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.get_mut();
        let Some(scope) = &this.scope else {
            return this.fut.as_mut().poll(cx);
        };
        let prev = CURRENT.with(|c| c.replace(Some(scope.clone())));
        let r = this.fut.as_mut().poll(cx);
        CURRENT.with(|c| *c.borrow_mut() = prev);
        r
    }
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
        let (scoped, debug) = CURRENT.with(|c| match c.borrow().as_ref() {
            Some(scope) => (scope.0.borrow().clone(), scope.1),
            None => (None, false),
        });
        if let Some(log) = scoped {
            log.write_line(level, line, debug);
            return;
        }
        let g = LOG.read().unwrap_or_else(|e| e.into_inner());
        match &*g {
            Some(log) => log.write_line(level, line, debug),
            None if level >= Level::Notice => {
                ErrorLog::stderr(Level::Notice).write_line(level, line, false)
            }
            None => {}
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
    use std::future::Future;

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
    fn debug_connection_matching() {
        let ip = |s: &str| Some(s.parse::<std::net::IpAddr>().unwrap());
        let net = DebugConnection::parse("192.168.1.0/24").unwrap();
        assert!(net.matches(ip("192.168.1.77")) && !net.matches(ip("192.168.2.1")));
        assert!(!net.matches(None) && !net.matches(ip("::1")));
        let one = DebugConnection::parse("::1").unwrap();
        assert!(one.matches(ip("::1")) && !one.matches(ip("::2")));
        assert!(
            DebugConnection::parse("0.0.0.0/0")
                .unwrap()
                .matches(ip("10.1.2.3"))
        );
        assert!(DebugConnection::parse("unix:").unwrap().matches(None));
        assert_eq!(DebugConnection::parse("10.0.0.0/33"), None);
        assert_eq!(DebugConnection::parse("localhost"), None);
    }

    #[test]
    fn several_destinations_each_with_its_level() {
        let dir = std::env::temp_dir().join(format!("vireo-errlog-multi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.log"), dir.join("b.log"));
        let log = ErrorLog::open(&[
            (Dest::File(a.clone()), Level::Warn),
            (Dest::File(b.clone()), Level::Crit),
            (Dest::File(a.clone()), Level::Error),
        ])
        .unwrap();
        assert_eq!(log.level(), Level::Warn);
        log.write_line(Level::Error, b"e\n", false);
        log.write_line(Level::Warn, b"w\n", false);
        log.write_line(Level::Info, b"d\n", true);
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "e\ne\nw\nd\nd\n");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "d\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn scoped_futures_log_to_their_scope() {
        let dir = std::env::temp_dir().join(format!("vireo-errlog-scope-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("loc.log");
        let loc = Arc::new(ErrorLog::open(&[(Dest::File(path.clone()), Level::Emerg)]).unwrap());
        let scope = Scope::new(Some(loc), false);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut fut = std::pin::pin!(async {
            log(Level::Emerg, format_args!("marker-scoped-1"));
            std::future::ready(()).await;
            log(Level::Emerg, format_args!("marker-scoped-2"));
        });
        let mut s = scoped(Some(scope.clone()), fut.as_mut());
        assert!(std::pin::Pin::new(&mut s).poll(&mut cx).is_ready());
        // Outside the poll the thread has no scope again.
        assert!(CURRENT.with(|c| c.borrow().is_none()));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("marker-scoped-1") && text.contains("marker-scoped-2"),
            "{text}"
        );
        // The request moved to a level without logs of its own: the main log.
        scope.set(&None);
        assert!(scope.0.borrow().is_none());
        let _ = std::fs::remove_dir_all(&dir);
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
