//! `*_bind`: the local address connections to an handler's peers go out
//! from (`proxy_bind`, `uwsgi_bind`, `scgi_bind`).

use super::pool::Bind;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::Env;
use crate::core::request::Request;
use crate::core::vars::Template;

/// A `*_bind address [transparent]`.
#[derive(Clone, Debug)]
pub struct BindConf {
    /// `ip` or `ip:port`; variables allowed, an empty value is the
    /// kernel's choice.
    pub addr: Template,
    /// The address need not be the host's (IP_TRANSPARENT).
    pub transparent: bool,
}

/// An address: `ip` or `ip:port` (`[v6]:port`).
pub fn addr(v: &[u8]) -> Option<std::net::SocketAddr> {
    let v = std::str::from_utf8(v).ok()?;
    v.parse()
        .ok()
        .or_else(|| v.parse::<std::net::IpAddr>().ok().map(|ip| (ip, 0).into()))
}

/// The directive's arguments; `off` is `None`.
pub fn parse(d: &Directive, e: &mut Env) -> Result<Option<BindConf>, ConfError> {
    let err = |m: String| ConfError::new(m, &d.span);
    let transparent = match d.args.get(1).map(|a| a.value.as_str()) {
        None => false,
        Some("transparent") => {
            e.net_raw = true;
            true
        }
        Some(a) => return Err(err(format!("invalid parameter \"{a}\""))),
    };
    match d.arg(0) {
        "off" => Ok(None),
        a => {
            let t = Template::compile(a, &mut e.vars).map_err(err)?;
            if let Some(l) = t.literal() {
                addr(l).ok_or_else(|| err(format!("invalid address \"{a}\"")))?;
            }
            Ok(Some(BindConf {
                addr: t,
                transparent,
            }))
        }
    }
}

impl BindConf {
    /// The address for this request (`None`: the kernel's choice; an
    /// invalid one is logged, naming `directive`).
    pub fn local(&self, req: &Request<'_>, directive: &str) -> Option<Bind> {
        let mut v = Vec::new();
        self.addr.render(req, &mut v);
        let a = addr(&v);
        if a.is_none() && !v.is_empty() {
            crate::error_log!(
                Error,
                "invalid {directive} address \"{}\"",
                String::from_utf8_lossy(&v)
            );
        }
        a.map(|addr| Bind {
            addr,
            transparent: self.transparent,
        })
    }
}
