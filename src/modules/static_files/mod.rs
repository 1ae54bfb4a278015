//! Static file content handler: URI → path, conditional requests, ranges, MIME types,
//! and the per-worker open-file cache.

pub mod cache;
pub mod conditional;
pub mod conf;
pub mod handler;
pub mod range;
pub mod uri;
use crate::core::module::{Hooks, Module};

/// Files from root or alias: the content of a location without a handler of
/// its own; `index`, `sendfile`, the open-file cache, ranges, conditionals.
pub static MODULE: Module = Module {
    name: "static_files",
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::StaticConf::KIND),
    hooks: Hooks {
        default_content: Some(handler::content),
        tick: Some(cache::sweep),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
