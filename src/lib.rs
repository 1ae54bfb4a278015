//! vireo: an event-driven web server with nginx-style configuration.
//!
//! See ARCHITECTURE.md for the bird's-eye view and code map.

pub mod conf;
pub mod core;
pub mod http;
pub mod modules;
pub mod server;
pub mod sys;
pub mod upstream;

#[doc(hidden)]
pub mod fuzzing;
