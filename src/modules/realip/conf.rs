//! Directives of realip: `set_real_ip_from`, `real_ip_header`,
//! `real_ip_recursive`.

use crate::conf::ast::ConfError;
use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::{flag, set_once};
use crate::modules::access::Cidr;
use crate::modules::access::conf::parse_net;
use crate::settings;
use std::sync::Arc;

/// Where the client address is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RealIpHeader {
    /// `X-Forwarded-For`: every line of it, as one list.
    XForwardedFor,
    /// `X-Real-IP` or any other header (lowercase name): its first line.
    Named(Arc<str>),
    /// `proxy_protocol`: the client address (and port) of the connection's
    /// PROXY protocol header.
    ProxyProtocol,
}

settings! {
    /// realip settings of one level. `set_real_ip_from` is one list set as a
    /// whole: a level with any drops the inherited ones.
    pub struct RealipConf / RealipConfSet {
        pub from: Arc<[Cidr]> = Arc::from(Vec::new()),
        pub header: RealIpHeader = RealIpHeader::Named(Arc::from("x-real-ip")),
        pub recursive: bool = false,
    }
}

/// The addresses of `name` when it is a host name (not an address, a
/// network or `unix:`), resolved now.
fn host_addresses(name: &str) -> Option<std::io::Result<Vec<std::net::IpAddr>>> {
    let is_name = name.bytes().any(|b| b.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !is_name || name.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    use std::net::ToSocketAddrs;
    Some((name, 0).to_socket_addrs().map(|a| {
        let mut ips: Vec<_> = a.map(|a| a.ip()).collect();
        ips.dedup();
        ips
    }))
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "set_real_ip_from",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::SS),
        arity: ONE,
        set: |s, d, env| {
            if d.arg(0) == "all" {
                return Err(ConfError::new(
                    "\"set_real_ip_from all\" is not a network: write 0.0.0.0/0 and ::/0",
                    &d.span,
                ));
            }
            let from = &mut s.loc().get_mut::<RealipConfSet>().from;
            if let Some(addrs) = host_addresses(d.arg(0)) {
                // A host name: every address it has when the configuration is read.
                let addrs = addrs.map_err(|e| {
                    ConfError::new(
                        format!("host not found in set_real_ip_from \"{}\" ({e})", d.arg(0)),
                        &d.span,
                    )
                })?;
                for ip in addrs {
                    crate::conf::values::push(from, Cidr::host(ip));
                }
                return Ok(());
            }
            let net = parse_net(d, env)?;
            crate::conf::values::push(from, net);
            Ok(())
        },
        syntax: "set_real_ip_from address | CIDR | unix:;",
        default: "—",
        doc: "A trusted proxy: a request from this address or network (`unix:` for unix-socket clients) may name its client in `real_ip_header`. Several may be given. A host name stands for every address it resolves to when the configuration is read (as nginx). The address found replaces the client address everywhere (`$remote_addr`, `$remote_port`, allow/deny, limits, logs, `$proxy_add_x_forwarded_for`); `$realip_remote_addr` and `$realip_remote_port` keep the connection's own. It is looked for when the request starts, with the server's settings, and again before the access checks with the location's.\n\n```nginx\nset_real_ip_from 10.0.0.0/8;\nset_real_ip_from 2001:db8::/32;\nset_real_ip_from unix:;\n```",
    },
    Def {
        name: "real_ip_header",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let name = d.arg(0);
            let v = if name.eq_ignore_ascii_case("x-forwarded-for") {
                RealIpHeader::XForwardedFor
            } else if name == "proxy_protocol" {
                RealIpHeader::ProxyProtocol
            } else if crate::http::fields::is_token(name.as_bytes()) {
                RealIpHeader::Named(Arc::from(name.to_ascii_lowercase()))
            } else {
                return Err(ConfError::new(
                    format!("invalid header name \"{name}\" in \"real_ip_header\" directive"),
                    &d.span,
                ));
            };
            set_once(&mut s.loc().get_mut::<RealipConfSet>().header, v, d)
        },
        syntax: "real_ip_header field | X-Real-IP | X-Forwarded-For | proxy_protocol;",
        default: "X-Real-IP",
        doc: "The request header holding the client address: `X-Real-IP`, `X-Forwarded-For` (all its lines, as one comma-separated list) or any other header (its first line). An address may carry a port (`192.0.2.1:4321`, `[2001:db8::1]:4321`), which becomes `$remote_port` (empty when there is none). `proxy_protocol` takes the client address and port of the connection's PROXY protocol header (`listen … proxy_protocol`), when the connection itself comes from a trusted address.\n\n```nginx\nreal_ip_header X-Forwarded-For;\n```",
    },
    Def {
        name: "real_ip_recursive",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<RealipConfSet>().recursive,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "real_ip_recursive on | off;",
        default: "off",
        doc: "With `off`, the last address of the header is the client when the connection comes from a trusted address. With `on`, the header is read from its end and every trusted address is skipped: the client is the last untrusted one (or the first of the list when all are trusted).\n\n```nginx\nreal_ip_header X-Forwarded-For;\nreal_ip_recursive on;\n```",
    },
];
