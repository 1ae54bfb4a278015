//! `proxy_ssl on` of a stream server: TLS to its upstreams, with the
//! `proxy_ssl_*` directives of `upstream::tls_conf` in stream contexts
//! (settings of their own, apart from http's).

use crate::conf::table::Ctx;
use crate::core::module::Module;
use crate::upstream::tls_conf::{self, Prefix, SslConf};

/// The marker of the stream `proxy_ssl_*` settings.
#[derive(Clone, Debug)]
pub struct StreamTls;

impl Prefix for StreamTls {
    const NAME: &'static str = "proxy";

    crate::own_slot!();
}

/// The stream `proxy_ssl_*` directives.
pub static MODULE: Module = Module {
    name: "stream_proxy_ssl",
    directives: &[tls_conf::directives!(
        "proxy",
        StreamTls,
        "the upstream (with `proxy_ssl on`)",
        Ctx::SS
    )],
    settings: Some(&SslConf::<StreamTls>::KIND),
    ..Module::EMPTY
};
