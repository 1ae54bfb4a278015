//! The SCGI gateway (nginx's ngx_http_scgi_module): the request's headers
//! as a netstring, `CONTENT_LENGTH` first and `SCGI` 1 after it, then the
//! body. The settings, directives and handler are those uwsgi has
//! (`modules::uwsgi::conf`, `modules::uwsgi::handler`).

use crate::core::module::Module;
use crate::core::request::Request;
use crate::modules::uwsgi::conf::{self, GwConf, Proto};
use crate::upstream::params::{self, Sink};
use bytes::{BufMut, BytesMut};

#[derive(Clone, Debug, Default)]
pub struct Scgi;

/// Header pairs, NUL after each name and value. The two the protocol puts
/// first are not repeated from the configuration.
struct Headers(Vec<u8>);

impl Sink for Headers {
    fn add(&mut self, name: &[u8], value: &[u8]) {
        if name == b"CONTENT_LENGTH" || name == b"SCGI" {
            return;
        }
        for s in [name, value] {
            self.0.extend_from_slice(s);
            self.0.push(0);
        }
    }
}

impl Proto for Scgi {
    const NAME: &'static str = "scgi";
    const PORT: u16 = 80;

    crate::own_slot!();

    fn encode(
        req: &Request<'_>,
        conf: &GwConf<Self>,
        body_len: u64,
        _learnt: bool,
        out: &mut BytesMut,
    ) -> Result<(), u16> {
        let mut h = Headers(Vec::with_capacity(1024));
        h.0.extend_from_slice(format!("CONTENT_LENGTH\0{body_len}\0SCGI\x001\0").as_bytes());
        params::render(
            req,
            &conf.params,
            conf.pass_request_headers,
            None,
            &mut h,
            |_, _| Ok(()),
        )?;
        out.put_slice(format!("{}:", h.0.len()).as_bytes());
        out.put_slice(&h.0);
        out.put_u8(b',');
        Ok(())
    }
}

/// Accepted and ignored, as FastCGI's.
pub static IGNORED: &[crate::conf::table::Def] = conf::ignored!("scgi");

/// `scgi_pass` and the `scgi_*` settings.
pub static MODULE: Module = Module {
    name: "scgi",
    nginx_default: &["http_scgi_module"],
    directives: &[conf::directives!("scgi", Scgi, "SCGI", ""), IGNORED],
    settings: Some(&GwConf::<Scgi>::KIND),
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_skip_what_goes_first() {
        let mut h = Headers(Vec::new());
        h.add(b"CONTENT_LENGTH", b"5");
        h.add(b"REQUEST_METHOD", b"GET");
        assert_eq!(&h.0[..], b"REQUEST_METHOD\0GET\0");
    }
}
