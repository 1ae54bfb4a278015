//! Request core: request head and response, phases, routing, clock, variables
//! and templates, error log.

pub mod clock;
pub mod errlog;
pub mod message;
pub mod request;
pub mod route;
pub mod vars;
