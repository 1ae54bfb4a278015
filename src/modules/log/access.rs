//! A worker's writer for one `access_log` target.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{LogFile, LogFormat};
use crate::core::syslog::Syslog;
use crate::core::vars::VarSource;
use std::io::Write;

/// Where a writer's lines go.
enum Out {
    File(Arc<LogFile>),
    Syslog(Arc<Syslog>),
}

/// Scratch buffers above this size are given back after a huge line.
const SCRATCH_KEEP: usize = 64 * 1024;

/// The writer of one access log file (or syslog target) in one worker: every
/// `access_log` naming the file shares it, its buffer with them, as nginx's.
///
/// Without a buffer every line is written at once with one `write(2)`.
/// With `buffer=size`, lines collect in memory and are written together:
/// when the next line would not fit; when the oldest buffered line is older
/// than `flush` (checked on each [`log`] call and by [`flush_due`], which the
/// worker's timer calls about once a second); on [`flush`]; and on drop.
/// A line larger than the whole buffer is written on its own.
///
/// [`log`]: AccessLog::log
/// [`flush_due`]: AccessLog::flush_due
/// [`flush`]: AccessLog::flush
pub struct AccessLog {
    out: Out,
    /// `gzip=level`: what is written is compressed, one gzip member per write.
    gzip: Option<u32>,
    /// Buffer size; 0 means unbuffered.
    size: usize,
    flush: Option<Duration>,
    buf: Vec<u8>,
    /// When the first line now in `buf` was added (only kept with `flush`).
    oldest: Option<Instant>,
    /// Scratch for rendering one line.
    line: Vec<u8>,
}

impl AccessLog {
    /// `buffer: None` (or `Some(0)`) logs unbuffered; `flush` only has a
    /// meaning together with a buffer (nginx refuses `flush=` without
    /// `buffer=` at configuration time) and is ignored otherwise.
    pub fn new(file: Arc<LogFile>, buffer: Option<usize>, flush: Option<Duration>) -> Self {
        let size = buffer.unwrap_or(0);
        AccessLog {
            out: Out::File(file),
            gzip: None,
            size,
            flush: if size > 0 { flush } else { None },
            buf: Vec::with_capacity(size),
            oldest: None,
            line: Vec::with_capacity(512),
        }
    }

    /// Log to syslog: each line one message, never buffered.
    pub fn syslog(syslog: Arc<Syslog>) -> Self {
        AccessLog {
            out: Out::Syslog(syslog),
            gzip: None,
            size: 0,
            flush: None,
            buf: Vec::new(),
            oldest: None,
            line: Vec::with_capacity(512),
        }
    }

    /// Compress what is written at `level` (1–9), each write a gzip member
    /// (as nginx's `gzip=`; gunzip reads the members one after another).
    pub fn with_gzip(mut self, level: Option<u32>) -> Self {
        self.gzip = level;
        self
    }

    fn write(&self, data: &[u8]) {
        match &self.out {
            Out::File(f) => match self.gzip {
                None => f.write_all(data),
                Some(level) => {
                    let mut e = flate2::write::GzEncoder::new(
                        Vec::with_capacity(data.len() / 4 + 64),
                        flate2::Compression::new(level),
                    );
                    match e.write_all(data).and_then(|_| e.finish()) {
                        Ok(z) => f.write_all(&z),
                        Err(e) => crate::error_log!(Alert, "gzip of an access log failed ({e})"),
                    }
                }
            },
            Out::Syslog(s) => s.send(None, data.strip_suffix(b"\n").unwrap_or(data)),
        }
    }

    /// Bytes rendered but not yet written.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Render one line in `format` for the request `src` and write or
    /// buffer it. Returns the `flush` time when this line started a buffer
    /// that must be written by then.
    pub fn log(&mut self, format: &LogFormat, src: &dyn VarSource) -> Option<Duration> {
        let mut started = None;
        self.line.clear();
        format.render(src, &mut self.line);

        if self.size == 0 {
            self.write(&self.line);
        } else {
            if self.buf.len() + self.line.len() > self.size {
                self.flush();
            }
            if self.line.len() > self.size {
                self.write(&self.line);
            } else {
                if self.buf.is_empty() && self.flush.is_some() {
                    self.oldest = Some(Instant::now());
                    started = self.flush;
                }
                self.buf.extend_from_slice(&self.line);
            }
            self.flush_due();
        }

        if self.line.capacity() > SCRATCH_KEEP {
            self.line = Vec::with_capacity(512);
        }
        started.filter(|_| !self.buf.is_empty())
    }

    /// Write the buffer out if its oldest line is older than `flush`.
    pub fn flush_due(&mut self) {
        if let (Some(limit), Some(oldest)) = (self.flush, self.oldest)
            && oldest.elapsed() >= limit
        {
            self.flush();
        }
    }

    /// Write out whatever is buffered.
    pub fn flush(&mut self) {
        if !self.buf.is_empty() {
            self.write(&self.buf);
            self.buf.clear();
        }
        self.oldest = None;
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::vars::{Var, Vars};
    use crate::modules::log::Escape;
    use std::path::PathBuf;

    struct Req(&'static str);

    impl VarSource for Req {
        fn var(&self, var: &Var, out: &mut Vec<u8>) {
            if *var == Var::Uri {
                out.extend_from_slice(self.0.as_bytes());
            }
        }
    }

    struct TempLog {
        dir: PathBuf,
        path: PathBuf,
    }

    impl TempLog {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("vireo-access-{}-{name}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("access.log");
            let _ = std::fs::remove_file(&path);
            TempLog { dir, path }
        }

        fn read(&self) -> String {
            std::fs::read_to_string(&self.path).unwrap_or_default()
        }
    }

    impl Drop for TempLog {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn uri_format() -> Arc<LogFormat> {
        Arc::new(LogFormat::new("u", Escape::Default, &["GET $uri"], &mut Vars::new(&[])).unwrap())
    }

    #[test]
    fn unbuffered_writes_each_line() {
        let t = TempLog::new("unbuf");
        let mut log = AccessLog::new(LogFile::open(&t.path).unwrap(), None, None);
        log.log(&uri_format(), &Req("/a"));
        assert_eq!(t.read(), "GET /a\n");
        // An empty $uri is logged empty (it is always found, as in nginx).
        log.log(&uri_format(), &Req(""));
        assert_eq!(t.read(), "GET /a\nGET \n");
        assert_eq!(log.pending(), 0);
    }

    #[test]
    fn buffered_until_full() {
        let t = TempLog::new("buf");
        // Each line "GET /x\n" is 7 bytes; room for two.
        let mut log = AccessLog::new(LogFile::open(&t.path).unwrap(), Some(16), None);
        log.log(&uri_format(), &Req("/1"));
        log.log(&uri_format(), &Req("/2"));
        assert_eq!(t.read(), "");
        assert_eq!(log.pending(), 14);
        // The third line does not fit: the first two go out, it stays.
        log.log(&uri_format(), &Req("/3"));
        assert_eq!(t.read(), "GET /1\nGET /2\n");
        assert_eq!(log.pending(), 7);
        // A line bigger than the buffer: flush, then write it directly.
        log.log(&uri_format(), &Req("/a-very-long-uri"));
        assert_eq!(t.read(), "GET /1\nGET /2\nGET /3\nGET /a-very-long-uri\n");
        assert_eq!(log.pending(), 0);
        log.log(&uri_format(), &Req("/4"));
        log.flush();
        assert_eq!(
            t.read(),
            "GET /1\nGET /2\nGET /3\nGET /a-very-long-uri\nGET /4\n"
        );
        log.log(&uri_format(), &Req("/5"));
        drop(log);
        assert!(t.read().ends_with("GET /4\nGET /5\n"));
    }

    #[test]
    fn buffered_flush_time() {
        let t = TempLog::new("flush");
        let flush = Duration::from_millis(50);
        let mut log = AccessLog::new(LogFile::open(&t.path).unwrap(), Some(4096), Some(flush));
        log.log(&uri_format(), &Req("/1"));
        log.flush_due();
        assert_eq!(t.read(), "");
        std::thread::sleep(flush + Duration::from_millis(10));
        log.flush_due();
        assert_eq!(t.read(), "GET /1\n");

        // Checked on the log call too: the old line and the new go out.
        log.log(&uri_format(), &Req("/2"));
        assert_eq!(t.read(), "GET /1\n");
        std::thread::sleep(flush + Duration::from_millis(10));
        log.log(&uri_format(), &Req("/3"));
        assert_eq!(t.read(), "GET /1\nGET /2\nGET /3\n");
        assert_eq!(log.pending(), 0);
    }

    #[test]
    fn flush_without_buffer_is_unbuffered() {
        let t = TempLog::new("nobuf");
        let mut log = AccessLog::new(
            LogFile::open(&t.path).unwrap(),
            Some(0),
            Some(Duration::from_secs(5)),
        );
        log.log(&uri_format(), &Req("/x"));
        assert_eq!(t.read(), "GET /x\n");
    }

    #[test]
    fn workers_share_one_file() {
        let t = TempLog::new("shared");
        let file = LogFile::open(&t.path).unwrap();
        let fmt = uri_format();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (file, fmt) = (file.clone(), fmt.clone());
                std::thread::spawn(move || {
                    let mut log = AccessLog::new(file, Some(64), None);
                    for _ in 0..100 {
                        log.log(&fmt, &Req("/w"));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let s = t.read();
        assert_eq!(s.lines().count(), 400);
        assert!(s.lines().all(|l| l == "GET /w"));
    }
}
