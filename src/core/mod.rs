//! Request core: clock, variables and templates.

pub mod clock;
pub mod errlog;
pub mod request;
pub mod route;
pub mod vars;
