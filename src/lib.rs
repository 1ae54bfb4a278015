//! vireo: an event-driven web server with nginx-style configuration.
//!
//! See ARCHITECTURE.md for the bird's-eye view and code map. The library
//! exports what the `vireo` binary, the tests and the fuzz targets use;
//! everything else is the crate's own, so the compiler sees what is unused.

mod conf;
mod core;
mod http;
mod modules;
mod server;
mod stream;
mod sys;
mod upstream;

#[doc(hidden)]
pub mod fuzzing;

pub use conf::load::{self, Cmdline, Config, Source};
pub use conf::table::reference_markdown;
pub use core::errlog::{self, Level};
pub use modules::{MODULES, version_text};
pub use server::stats::panicked;
pub use server::{Options, inherit, run};
pub use sys::{MALLOC_CONF, is_root, kill, lookup_group, lookup_user, raise_nofile};
