//! The uwsgi gateway (nginx's ngx_http_uwsgi_module), and what SCGI
//! (`modules::scgi`) shares with it: the settings and directive table of a
//! protocol of the family (`conf`), the handler that sends a request and
//! turns the reply into a response (`handler`). Here: the uwsgi packet.

pub mod conf;
pub mod handler;

use crate::conf::table::{Arity, Ctx, Def};
use crate::core::module::Module;
use crate::core::request::Request;
use crate::upstream::params::{self, Sink};
use crate::upstream::tls_conf::{self, Prefix, SslConf};
use bytes::{BufMut, BytesMut};
use conf::{GwConf, Proto};

/// The uwsgi protocol: a 4-byte header (modifier1, the size of the
/// variables as 16-bit little-endian, modifier2), then the variables, each
/// name and value after its 16-bit little-endian length; the body follows.
#[derive(Clone, Debug, Default)]
pub struct Uwsgi;

/// The variables of a packet, after its header.
struct Vars<'a>(&'a mut BytesMut);

impl Sink for Vars<'_> {
    fn add(&mut self, name: &[u8], value: &[u8]) {
        for s in [name, value] {
            self.0.put_u16_le(s.len().min(0xffff) as u16);
            self.0.put_slice(s);
        }
    }
}

/// The most a packet's variables may take: the header's 16 bits.
const MAX_VARS: usize = 0xffff;

impl Proto for Uwsgi {
    const NAME: &'static str = "uwsgi";
    const PORT: u16 = 80;
    const TLS_SCHEME: Option<&'static str> = Some("suwsgi");

    crate::own_slot!();

    fn tls(req: &Request<'_>, name: &str) -> Result<crate::upstream::tls::Dial, ()> {
        tls_conf::dial(req, req.conf.get::<SslConf<Uwsgi>>(), name)
    }

    fn encode(
        req: &Request<'_>,
        conf: &GwConf<Self>,
        body_len: u64,
        learnt: bool,
        out: &mut BytesMut,
    ) -> Result<(), u16> {
        let start = out.len();
        out.put_slice(&[conf.modifier1, 0, 0, conf.modifier2]);
        params::render(
            req,
            &conf.params,
            conf.pass_request_headers,
            learnt.then_some(body_len),
            &mut Vars(out),
            |_, _| Ok(()),
        )?;
        let size = out.len() - start - 4;
        if size > MAX_VARS {
            crate::error_log!(
                Error,
                "uwsgi request is too big: {size}{}",
                req.log_context()
            );
            return Err(500);
        }
        out[start + 1..start + 3].copy_from_slice(&(size as u16).to_le_bytes());
        Ok(())
    }
}

static MODIFIERS: &[Def] = &[
    conf::def!(
        "uwsgi",
        "modifier1",
        Uwsgi,
        set_modifier1,
        Ctx::HSL,
        Arity::args(1, 1),
        "number",
        "0",
        "The first modifier of the uwsgi packet header: which of the server's plugins takes the request (0: WSGI).",
        "0"
    ),
    conf::def!(
        "uwsgi",
        "modifier2",
        Uwsgi,
        set_modifier2,
        Ctx::HSL,
        Arity::args(1, 1),
        "number",
        "0",
        "The second modifier of the uwsgi packet header.",
        "0"
    ),
];

/// `uwsgi_pass suwsgi://`: the `uwsgi_ssl_*` settings.
impl Prefix for Uwsgi {
    const NAME: &'static str = "uwsgi";

    crate::own_slot!();
}

/// The `uwsgi_ssl_*` directives.
pub static SSL_MODULE: Module = Module {
    name: "uwsgi_ssl",
    directives: &[tls_conf::directives!(
        "uwsgi",
        Uwsgi,
        "a `suwsgi` application"
    )],
    settings: Some(&SslConf::<Uwsgi>::KIND),
    ..Module::EMPTY
};

/// Accepted and ignored, as FastCGI's.
pub static IGNORED: &[Def] = conf::ignored!("uwsgi");

/// `uwsgi_pass` and the `uwsgi_*` settings.
pub static MODULE: Module = Module {
    name: "uwsgi",
    nginx_default: &["http_uwsgi_module"],
    directives: &[
        conf::directives!(
            "uwsgi",
            Uwsgi,
            "uWSGI",
            " With `suwsgi://` the connection is TLS (the `uwsgi_ssl_*` directives)."
        ),
        MODIFIERS,
        IGNORED,
    ],
    settings: Some(&GwConf::<Uwsgi>::KIND),
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vars_are_little_endian_pairs() {
        let mut b = BytesMut::new();
        Vars(&mut b).add(b"QUERY_STRING", b"a=1");
        assert_eq!(&b[..], b"\x0c\x00QUERY_STRING\x03\x00a=1");
    }
}
