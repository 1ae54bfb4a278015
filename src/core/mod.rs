//! Request core: clock, variables and templates.

pub mod clock;
pub mod vars;
