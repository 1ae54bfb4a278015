//! Handler addresses with variables (`proxy_pass http://$host:8080`,
//! `fastcgi_pass $backend`), found at request time as nginx finds them: the
//! value names an `upstream` block when one of that name exists (and no port
//! is given), or the implicit upstream of a fixed address with the same host
//! and port (`proxy_pass http://localhost:8080`), else it is `unix:/path`, `ip[:port]`, or `host[:port]`
//! resolved through the location's `resolver`. An upstream made for one
//! request balances round robin over its addresses, with nginx's defaults.

use super::resolver::ResolverConf;
use super::{PeerAddr, Upstream};
use crate::core::request::Request;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

/// The upstreams of the load a handler belongs to (given at its end), and
/// the handler's default port.
#[derive(Clone, Debug)]
pub struct Blocks {
    known: Arc<OnceLock<Known>>,
    default_port: u16,
}

/// The upstreams a variable's value may name.
#[derive(Debug)]
pub(super) struct Known {
    /// `upstream` blocks.
    pub named: Arc<[Arc<Upstream>]>,
    /// The implicit upstreams of fixed handler addresses (`proxy_pass
    /// http://host:port`): host (lowercase) and port.
    pub implicit: Arc<[(String, u16, Arc<Upstream>)]>,
}

impl Blocks {
    pub(super) fn new(default_port: u16) -> Blocks {
        Blocks {
            known: Arc::new(OnceLock::new()),
            default_port,
        }
    }

    pub(super) fn set(
        &self,
        named: Arc<[Arc<Upstream>]>,
        implicit: Arc<[(String, u16, Arc<Upstream>)]>,
    ) {
        let _ = self.known.set(Known { named, implicit });
    }

    /// The upstream block named `name`.
    fn block(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.known
            .get()?
            .named
            .iter()
            .find(|u| u.name.eq_ignore_ascii_case(name))
    }

    /// The implicit upstream of `host` and `port`, as nginx finds one for a
    /// host name with the same port.
    fn implicit(&self, host: &str, port: u16) -> Option<&Arc<Upstream>> {
        self.known
            .get()?
            .implicit
            .iter()
            .find(|(h, p, _)| *p == port && h.eq_ignore_ascii_case(host))
            .map(|(_, _, u)| u)
    }

    /// The upstream `addr` (a variable's value) stands for in `req`.
    /// `Err` when there is none; the reason is logged (502).
    pub async fn find(&self, req: &Request<'_>, addr: &str) -> Result<Arc<Upstream>, Unfound> {
        self.find_with_port(req, addr, self.default_port).await
    }

    /// [`Blocks::find`] with another default port (a URL's scheme's).
    pub async fn find_with_port(
        &self,
        req: &Request<'_>,
        addr: &str,
        default_port: u16,
    ) -> Result<Arc<Upstream>, Unfound> {
        if let Some(u) = self.block(addr) {
            return Ok(u.clone());
        }
        let fail = |msg: String| {
            crate::error_log!(Error, "{msg}{}", req.log_context());
        };
        if let Some(path) = addr.strip_prefix("unix:") {
            if path.is_empty() {
                fail(format!("no path in upstream \"{addr}\""));
                return Err(Unfound::Address);
            }
            return Ok(Arc::new(Upstream::ephemeral(
                addr,
                vec![PeerAddr::Unix(path.into())],
            )));
        }
        let (host, port) = match super::conf::split_host_port(addr, default_port) {
            Ok(hp) => hp,
            Err(e) => {
                fail(format!("{e} in upstream \"{addr}\""));
                return Err(Unfound::Address);
            }
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.is_empty() {
            fail(format!("no host in upstream \"{addr}\""));
            return Err(Unfound::Address);
        }
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(Arc::new(Upstream::ephemeral(
                addr,
                vec![PeerAddr::Tcp(SocketAddr::new(ip, port))],
            )));
        }
        if let Some(u) = self.implicit(host, port) {
            return Ok(u.clone());
        }
        let rc = req.conf.get::<ResolverConf>();
        let Some(resolver) = &rc.resolver else {
            fail(format!("no resolver defined to resolve {bare}"));
            return Err(Unfound::Address);
        };
        match resolver.resolve(bare, rc.timeout).await {
            Ok(ips) => Ok(Arc::new(Upstream::ephemeral(
                addr,
                ips.iter()
                    .map(|ip| PeerAddr::Tcp(SocketAddr::new(*ip, port)))
                    .collect(),
            ))),
            Err(e) => {
                fail(format!("{bare} could not be resolved ({e})"));
                Err(Unfound::Resolve)
            }
        }
    }
}

/// Why a variable's value gave no upstream (the reason is logged): nginx's
/// HTTP side answers both with 502; its stream side a bad address or a
/// missing resolver with 500, a name that did not resolve with 502.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfound {
    /// Not an address, or a name without a `resolver` to resolve it.
    Address,
    /// The resolver failed to resolve the name.
    Resolve,
}

/// A handler's upstream address: fixed at load, or with variables.
#[derive(Clone, Debug)]
pub enum Target {
    Fixed(super::UpstreamRef),
    /// The address template and the blocks it may name.
    Dynamic(crate::core::vars::Template, Blocks),
}

impl Target {
    /// `addr` as a handler wrote it: with variables (`$`), a template found
    /// per request; else a reference resolved at the end of the load.
    pub fn new(
        env: &mut crate::conf::table::Env,
        addr: &str,
        default_port: u16,
        span: &crate::conf::ast::Span,
    ) -> Result<Target, crate::conf::ast::ConfError> {
        if addr.contains('$') {
            let t = crate::core::vars::Template::compile(addr, &mut env.vars)
                .map_err(|e| crate::conf::ast::ConfError::new(e, span))?;
            return Ok(Target::Dynamic(t, super::conf::dynamic(env, default_port)));
        }
        Ok(Target::Fixed(super::conf::reference(
            env,
            addr,
            default_port,
            span,
        )?))
    }

    /// A stream handler's `addr`: an upstream of the stream block, an
    /// address with its port, or a template found per session.
    pub fn stream(
        env: &mut crate::conf::table::Env,
        addr: &str,
        span: &crate::conf::ast::Span,
    ) -> Result<Target, crate::conf::ast::ConfError> {
        if addr.contains('$') {
            let t = crate::core::vars::Template::compile(addr, &mut env.vars)
                .map_err(|e| crate::conf::ast::ConfError::new(e, span))?;
            return Ok(Target::Dynamic(t, super::conf::stream_dynamic(env)));
        }
        Ok(Target::Fixed(super::conf::stream_reference(
            env, addr, span,
        )?))
    }

    /// The upstream of this request (`Err`: none, logged; 502).
    pub async fn upstream(&self, req: &Request<'_>) -> Result<Arc<Upstream>, Unfound> {
        match self {
            Target::Fixed(r) => Ok(r.arc().clone()),
            Target::Dynamic(t, blocks) => {
                let mut v = Vec::new();
                t.render(req, &mut v);
                blocks.find(req, &String::from_utf8_lossy(&v)).await
            }
        }
    }
}
