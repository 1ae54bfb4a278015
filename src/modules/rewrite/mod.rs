//! The rewrite module: `rewrite`, `return`, `set`, `if`, `break`,
//! `rewrite_log`. Its directives are compiled, in the order written, into
//! a script per server and per location (not inherited, as in nginx) that
//! runs in the server-rewrite and location-rewrite phases.

pub mod conf;
pub mod script;
use crate::core::module::{Hooks, Module, Rewrite};

/// `rewrite`, `return`, `set`, `if`, `break`, `rewrite_log`,
/// `uninitialized_variable_warn`.
pub static MODULE: Module = Module {
    name: "rewrite",
    nginx_default: &["http_rewrite_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::RewriteConf::KIND),
    hooks: Hooks {
        rewrite: Some(|req, data, location| match data.get::<script::Script>() {
            Some(s) => script::run(req, &s.0, location),
            None => Rewrite::Next,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
