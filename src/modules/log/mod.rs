//! Access log: `log_format` and `access_log` runtime.
//!
//! * [`LogFormat`]: a compiled `log_format`, rendering one line per request
//!   with nginx's escaping rules.
//! * [`LogFile`]: one open log file, shared by all workers, reopenable.
//! * [`AccessLog`]: a worker's writer for one `access_log` target, with
//!   optional `buffer=` / `flush=` buffering.

mod access;
mod file;
mod format;

pub use access::AccessLog;
pub use file::LogFile;
pub use format::{Escape, LogFormat};

pub mod conf;
mod runtime;

pub use runtime::{flush_all, flush_due, log_request};
