//! Request core: clock, variables and templates.

pub mod clock;
pub mod errlog;
pub mod error_page;
pub mod metrics;
pub mod mime;
pub mod module;
pub mod path;
pub mod request;
pub mod route;
pub mod vars;
