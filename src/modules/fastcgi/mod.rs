//! FastCGI gateway (to php-fpm and other FastCGI applications): the record
//! codec, the CGI response-head parser it shares with the CGI handler, the
//! `fastcgi_pass` handler and its directives. See docs/fastcgi.md.

pub mod cgi_head;
pub mod conf;
pub mod handler;
pub mod record;
pub mod respond;

use crate::core::module::{Hooks, Module, VarDef};
pub use handler::script_name;

/// `fastcgi_pass` and its settings, `$fastcgi_script_name`, `$fastcgi_path_info`.
pub static MODULE: Module = Module {
    name: "fastcgi",
    nginx_default: &["http_fastcgi_module"],
    directives: &[conf::DIRECTIVES, conf::IGNORED],
    settings: Some(&conf::FastcgiConf::KIND),
    variables: &[
        VarDef::name("fastcgi_script_name", |req, _, out| {
            script_name(req, false, out)
        }),
        VarDef::name("fastcgi_path_info", |req, _, out| {
            script_name(req, true, out)
        }),
    ],
    hooks: Hooks {
        tick: Some(handler::trim_spares),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
