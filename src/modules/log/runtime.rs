//! The worker side of access logging: one `AccessLog` writer per configured
//! target per worker (thread-local, no locks), flushed by the worker's timer.

use super::AccessLog;
use super::conf::LogConf;
use super::conf::{AccessLogTarget, Dest};
use super::paths;
use crate::core::request::{Finished, Request};
use crate::core::vars::VarSource;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

thread_local! {
    /// Keyed by the log file's address (the buffered `access_log`s naming one
    /// file share its writer and buffer, as nginx's; the unbuffered ones, one
    /// past it, share an unbuffered one), or a syslog target's.
    /// The Weak kept beside a writer is of the first target that used it:
    /// the targets sharing it belong to one configuration, and a reload that
    /// drops them lets `flush_due` drop the writer (and close its file).
    static WRITERS: RefCell<HashMap<usize, (Weak<AccessLogTarget>, AccessLog)>> = RefCell::default();
}

/// Write the access log lines for a finished request.
pub fn log_request(done: &Finished<'_>) {
    log_done(done.req, done);
}

/// Write the access log lines of the level of `req`, whose finished values
/// `done` gives (an HTTP request with its response, a stream session).
pub fn log_done(req: &Request<'_>, done: &dyn VarSource) {
    let Some(targets) = &req.conf.get::<LogConf>().access_log else {
        return;
    };
    if targets.is_empty() {
        return;
    }
    WRITERS.with(|w| {
        let mut w = w.borrow_mut();
        for t in targets.iter() {
            if let Some(c) = &t.condition {
                let mut v = Vec::new();
                c.render(done, &mut v);
                if v.is_empty() || v == b"0" {
                    continue;
                }
            }
            if let Dest::Path(path) = &t.dest {
                paths::log(req, done, path, &t.format);
                continue;
            }
            let key = match &t.dest {
                Dest::File(f) => Arc::as_ptr(f) as usize + usize::from(t.buffer.is_none()),
                _ => Arc::as_ptr(t) as usize,
            };
            let (_, writer) = w.entry(key).or_insert_with(|| {
                let writer = match &t.dest {
                    Dest::Syslog(s) => AccessLog::syslog(s.clone()),
                    Dest::File(f) => AccessLog::new(f.clone(), t.buffer, t.flush).with_gzip(t.gzip),
                    Dest::Path(_) => unreachable!("handled above"),
                };
                (Arc::downgrade(t), writer)
            });
            if let Some(flush) = writer.log(&t.format, done) {
                flush_at(key, flush);
            }
        }
    });
}

/// Flush the writer `key` once `flush` has passed (its buffer's first line
/// came now), rather than at the next once-a-second check.
fn flush_at(key: usize, flush: Duration) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    tokio::spawn(async move {
        tokio::time::sleep(flush).await;
        WRITERS.with(|w| {
            if let Some((_, writer)) = w.borrow_mut().get_mut(&key) {
                writer.flush_due();
            }
        });
    });
}

/// Flush buffers whose `flush=` time has come (once a second). Writers of
/// targets no configuration uses any more (replaced by a reload) are flushed and
/// dropped, closing their files.
pub fn flush_due() {
    WRITERS.with(|w| {
        let mut w = w.borrow_mut();
        for (_, writer) in w.values_mut() {
            writer.flush_due();
        }
        w.retain(|_, (target, _)| target.strong_count() > 0);
    });
    paths::expire();
}

/// Flush everything (worker exit).
pub fn flush_all() {
    WRITERS.with(|w| {
        for (_, writer) in w.borrow_mut().values_mut() {
            writer.flush();
        }
    });
}
