//! `pass` of a stream server (nginx's ngx_stream_pass_module): the session's
//! connection goes to another listening address of the same configuration,
//! http or stream, and is served there as if accepted on it — its PROXY
//! header and TLS handshake when that address asks for them, then its
//! servers chosen as for any connection there (`server::worker::adopt`).
//! Nothing is proxied: the connection keeps its socket, number and
//! worker_connections slot, and its TLS when a `listen … ssl` server
//! terminated it; the passing session is not logged. A connection whose
//! bytes were read before the content phase (the preread of a TLS session)
//! cannot be passed, as nginx's, nor a UDP one; at most 10 passes a
//! connection.

use crate::conf::ast::ConfError;
use crate::conf::load::{Config, Listener};
use crate::conf::model::ListenAddr;
use crate::conf::table::{Ctx, Def, ONE};
use crate::core::module::Module;
use crate::core::request::BoxFuture;
use crate::core::vars::Template;
use crate::stream::session::{Accepted, Carried, Client, Session};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// Passes a connection may make, as nginx's `NGX_STREAM_PASS_MAX_PASSES`.
const MAX_PASSES: u8 = 10;

/// Where `pass` sends the connection.
#[derive(Debug)]
enum Target {
    Fixed(ListenAddr),
    /// With variables: an address found per session.
    Var(Template),
}

#[derive(Debug)]
struct Pass(Target);

/// Why an address cannot be passed to.
#[derive(Debug, PartialEq)]
enum Bad {
    /// A host name (nothing is resolved) or not an address at all.
    NoAddresses,
    NoPort,
    Invalid(&'static str),
}

/// `ip:port`, `[ipv6]:port` or `unix:path`.
fn parse(a: &str) -> Result<ListenAddr, Bad> {
    if let Some(path) = a.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(Bad::Invalid("no path in the unix domain socket"));
        }
        return Ok(ListenAddr::Unix(path.into()));
    }
    if let Ok(sa) = a.parse::<SocketAddr>() {
        return Ok(ListenAddr::Tcp(sa));
    }
    let host = a
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(a);
    if host.parse::<IpAddr>().is_ok() {
        return Err(Bad::NoPort);
    }
    match a.rsplit_once(':') {
        Some((_, p)) if p.parse::<u16>().is_err() => Err(Bad::Invalid("invalid port")),
        _ => Err(Bad::NoAddresses),
    }
}

/// The TCP or unix listener of `cfg` at `addr`: one of that very address,
/// else a wildcard one of its family and port (nginx's match).
fn find<'c>(cfg: &'c Config, addr: &ListenAddr) -> Option<&'c Listener> {
    let exact = cfg.listeners.iter().find(|l| l.addr == *addr);
    exact.or_else(|| {
        let ListenAddr::Tcp(a) = addr else {
            return None;
        };
        cfg.listeners.iter().find(|l| match l.addr {
            ListenAddr::Tcp(w) => {
                w.ip().is_unspecified() && w.is_ipv4() == a.is_ipv4() && w.port() == a.port()
            }
            _ => false,
        })
    })
}

impl Pass {
    /// The address for this session; `None` (logged) when the value is not one.
    fn address(&self, s: &Session<'_>) -> Option<ListenAddr> {
        let t = match &self.0 {
            Target::Fixed(a) => return Some(a.clone()),
            Target::Var(t) => t,
        };
        let mut v = Vec::new();
        t.render(&s.req, &mut v);
        let v = String::from_utf8_lossy(&v);
        let why = match parse(&v) {
            Ok(a) => return Some(a),
            Err(Bad::NoAddresses) => format!("no addresses in pass \"{v}\""),
            Err(Bad::NoPort) => format!("no port in pass \"{v}\""),
            Err(Bad::Invalid(why)) => format!("{why} in pass \"{v}\""),
        };
        failed(s, &why);
        None
    }

    /// Hand the connection over; the status the passing session ends with
    /// when it could not be (the session is not logged when it was).
    fn pass(&self, s: &mut Session<'_>) -> u16 {
        if s.info.udp {
            failed(s, "cannot pass udp connection");
            return 500;
        }
        if !s.preread.is_empty() {
            failed(s, "cannot pass connection with preread data");
            return 500;
        }
        let Some(addr) = self.address(s) else {
            return 500;
        };
        crate::error_log!(Debug, "stream pass addr: \"{addr}\"");
        if s.passes >= MAX_PASSES {
            failed(s, "stream pass cycle");
            return 500;
        }
        let Some(l) = find(s.cfg, &addr) else {
            failed(s, &format!("port not found for \"{addr}\""));
            return 200;
        };
        if l.proxy_protocol && matches!(s.client, Client::Tls(_)) {
            // Its header would have to come through TLS, which the address
            // never reads it from.
            failed(
                s,
                &format!(
                    "cannot pass a TLS connection to \"{addr}\", which expects a PROXY protocol header"
                ),
            );
            return 500;
        }
        let Some(slot) = s.slot.take() else {
            return 500;
        };
        let a = Accepted {
            client: std::mem::replace(&mut s.client, Client::Passed),
            peer: s.req.client_addr(),
            key: l.key,
            id: s.req.connection,
            carried: Carried {
                proxy: s.req.proxy.clone(),
                passes: s.passes + 1,
            },
        };
        crate::server::worker::adopt(a, slot);
        200
    }
}

/// An error of this session's pass, with nginx's context.
fn failed(s: &Session<'_>, why: &str) {
    crate::error_log!(
        Error,
        "{why} while passing connection to port{}",
        s.req.log_context()
    );
}

impl crate::stream::Handler for Pass {
    fn serve<'a>(&'a self, s: &'a mut Session<'_>) -> BoxFuture<'a, u16> {
        let status = self.pass(s);
        Box::pin(std::future::ready(status))
    }
}

static DIRECTIVES: &[Def] = &[Def {
    name: "pass",
    ignored: false,
    ctx: Ctx::STREAM_SERVER,
    arity: ONE,
    set: |s, d, e| {
        let a = d.arg(0);
        let t = Template::compile(a, &mut e.vars).map_err(|m| ConfError::new(m, &d.span))?;
        let target = match t.is_literal() {
            false => Target::Var(t),
            true => Target::Fixed(parse(a).map_err(|bad| {
                let why = match bad {
                    Bad::NoAddresses => "\"pass\" directive has no addresses".to_string(),
                    Bad::NoPort => "\"pass\" directive has no port".to_string(),
                    Bad::Invalid(why) => format!("{why} in \"{a}\" of the \"pass\" directive"),
                };
                ConfError::new(why, &d.span)
            })?),
        };
        crate::stream::set_content(s, d, Arc::new(Pass(target)))
    },
    syntax: "pass address;",
    default: "—",
    doc: "Passes the connection to another listening address of this configuration, of an `http` or a `stream` server (`ip:port`, `[ipv6]:port` or `unix:path`; with variables, found per session, never resolved): it is served there as if accepted there, with that address's `proxy_protocol`, `ssl` and servers, without proxying. A TLS connection a `listen … ssl` server terminated stays TLS and is not handshaken again (so a plain address serves it decrypted, and ALPN's `h2` is HTTP/2 where the address has `http2`); its PROXY addresses come along, and an address with `proxy_protocol` reads another header from the client, which a TLS connection cannot give (refused with 500). A session with bytes read before the content phase (`ssl_preread` on a TLS session) or a UDP one cannot be passed (500); an address with no listener ends the session (200). The passed session is not logged; the connection keeps its number. A connection is passed at most 10 times.\n\n```nginx\nstream {\n    server {\n        listen 443 ssl;\n        ssl_certificate     example.com.crt;\n        ssl_certificate_key example.com.key;\n        pass 127.0.0.1:8000;\n    }\n}\n```",
}];

/// `pass` of stream servers.
pub static MODULE: Module = Module {
    name: "stream_pass",
    directives: &[DIRECTIVES],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let tcp = |s: &str| Ok(ListenAddr::Tcp(s.parse().unwrap()));
        assert_eq!(parse("127.0.0.1:8080"), tcp("127.0.0.1:8080"));
        assert_eq!(parse("[::1]:443"), tcp("[::1]:443"));
        assert_eq!(
            parse("unix:/run/a.sock"),
            Ok(ListenAddr::Unix("/run/a.sock".into()))
        );
        assert_eq!(parse("127.0.0.1"), Err(Bad::NoPort));
        assert_eq!(parse("[::1]"), Err(Bad::NoPort));
        assert_eq!(parse("localhost:80"), Err(Bad::NoAddresses));
        assert_eq!(parse("127.0.0.1:x"), Err(Bad::Invalid("invalid port")));
        assert_eq!(
            parse("unix:"),
            Err(Bad::Invalid("no path in the unix domain socket"))
        );
    }
}
