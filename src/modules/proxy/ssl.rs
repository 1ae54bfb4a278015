//! `proxy_pass https://`: the `proxy_ssl_*` directives and settings, those
//! of `upstream::tls_conf` with the prefix `proxy`.

use crate::core::module::Module;
use crate::upstream::tls_conf::{self, Prefix, SslConf};

/// The marker of the `proxy_ssl_*` settings.
#[derive(Clone, Debug)]
pub struct Https;

impl Prefix for Https {
    const NAME: &'static str = "proxy";

    crate::own_slot!();
}

/// The `proxy_ssl_*` directives.
pub static MODULE: Module = Module {
    name: "proxy_ssl",
    directives: &[tls_conf::directives!("proxy", Https, "an `https` upstream")],
    settings: Some(&SslConf::<Https>::KIND),
    ..Module::EMPTY
};
