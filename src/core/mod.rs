//! Request core: request head and response, phases, routing, clock, variables
//! and templates, error log.

pub mod browser;
pub mod clock;
pub mod errlog;
pub mod error_page;
pub mod message;
pub mod metrics;
pub mod mime;
pub mod module;
pub mod path;
pub mod proxy_protocol;
pub mod request;
pub mod route;
pub mod spare;
pub mod subrequest;
pub mod syslog;
pub mod vars;
