//! Request core: clock, variables and templates.

pub mod clock;
pub mod request;
pub mod route;
pub mod errlog;
pub mod vars;
