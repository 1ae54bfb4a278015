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
mod paths;

pub use access::AccessLog;
pub use file::LogFile;
pub use format::{Escape, LogFormat};

pub mod conf;
mod runtime;

use crate::core::module::{Hooks, Module};
pub use runtime::{flush_all, flush_due, log_done, log_request};

/// `log_format` and `access_log`; buffers flushed once a second and when a
/// worker exits.
pub static MODULE: Module = Module {
    name: "log",
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::LogConf::KIND),
    hooks: Hooks {
        http: Some(conf::default_access_log),
        log: Some(log_request),
        session_log: Some(log_done),
        tick: Some(flush_due),
        worker_exit: Some(flush_all),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
