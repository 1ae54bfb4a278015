//! The rewrite module: `rewrite`, `return`, `set`, `if`, `break`,
//! `rewrite_log`. Its directives are compiled, in the order written, into
//! a script per server and per location (not inherited, as in nginx) that
//! runs in the server-rewrite and location-rewrite phases.

pub mod conf;
pub mod script;
