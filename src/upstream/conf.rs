//! The `upstream NAME { … }` block and the references handlers make to
//! upstreams (`proxy_pass`, `fastcgi_pass`).
//!
//! Inside the block: `server ADDR [weight=N] [max_fails=N] [fail_timeout=T]
//! [backup] [down] [max_conns=N] [resolve] [service=NAME]`, `resolver`,
//! `resolver_timeout`, `least_conn`, `ip_hash`, `hash KEY
//! [consistent]`, `random [two]`, `keepalive N`, `keepalive_timeout T`,
//! `keepalive_requests N`, and our `health_check [interval=T] [timeout=T]
//! [path=URI] [status=CODE|LOW-HIGH] [rise=N] [fall=N]`. Those names clash
//! with http-level directives (`server`, `keepalive_timeout`), so the block
//! reads its own directives rather than going through the main table.
//!
//! Blocks and references are collected in the load's [`Registry`] (in
//! `Env::ext`) and resolved when the load ends ([`finish`]); a reference may
//! come before the block it names, as in nginx.

use super::balance::{Method, PeerSpec};
use super::health::Check;
use super::{PeerAddr, Upstream, UpstreamRef};
use crate::conf::ast::{ConfError, Directive, Span};
use crate::conf::table::{Arity, Ctx, Def, Env};
use crate::conf::values::{self, option, parse_time};
use crate::core::vars::{Template, Vars};
use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The upstream blocks and references of one load, for one protocol: the
/// `upstream` blocks of http and of stream are apart, as nginx's.
pub struct Registry<F: Family> {
    blocks: Vec<(Arc<Upstream>, Span)>,
    refs: Vec<(String, u16, Span, UpstreamRef)>,
    /// `zone` lines, checked at the end: a zone named without a size must be
    /// given one by another block.
    zones: Vec<ZoneLine>,
    /// Handlers with variables in their address: given the named blocks.
    dynamic: Vec<super::dynamic::Blocks>,
    of: std::marker::PhantomData<fn() -> F>,
}

impl<F: Family> Default for Registry<F> {
    fn default() -> Self {
        Registry {
            blocks: Vec::new(),
            refs: Vec::new(),
            zones: Vec::new(),
            dynamic: Vec::new(),
            of: std::marker::PhantomData,
        }
    }
}

/// The protocol whose `upstream` blocks a registry holds.
pub trait Family: 'static {
    /// The `upstream` block is stream's: a peer's address needs a port, and
    /// the HTTP-only directives (keep-alive, queue, health check) are refused.
    const STREAM: bool;
}

/// The http block's upstreams.
pub struct Http;
impl Family for Http {
    const STREAM: bool = false;
}

/// The stream block's upstreams.
pub struct Stream;
impl Family for Stream {
    const STREAM: bool = true;
}

fn next_id() -> u64 {
    static ID: AtomicU64 = AtomicU64::new(1);
    ID.fetch_add(1, Ordering::Relaxed)
}

/// A handler names an upstream: a block name, `host[:port]`, `ip:port`, or
/// `unix:/path`; `port` is the default port for an implicit upstream.
/// Resolved by [`finish`].
pub fn reference(
    env: &mut Env,
    name: &str,
    port: u16,
    span: &Span,
) -> Result<UpstreamRef, ConfError> {
    reference_in::<Http>(env, name, port, span)
}

/// A stream handler names an upstream of the stream block (or an address,
/// with its port).
pub fn stream_reference(env: &mut Env, name: &str, span: &Span) -> Result<UpstreamRef, ConfError> {
    reference_in::<Stream>(env, name, 0, span)
}

fn reference_in<F: Family>(
    env: &mut Env,
    name: &str,
    port: u16,
    span: &Span,
) -> Result<UpstreamRef, ConfError> {
    let r = UpstreamRef(Arc::new(OnceLock::new()));
    env.ext
        .entry::<Registry<F>>()
        .refs
        .push((name.to_string(), port, span.clone(), r.clone()));
    Ok(r)
}

/// A handler's address with variables: found at request time among the
/// named blocks (given to it at the end of the load) or resolved.
pub fn dynamic(env: &mut Env, default_port: u16) -> super::dynamic::Blocks {
    dynamic_in::<Http>(env, default_port)
}

/// [`dynamic`] for a stream handler: the stream block's upstreams.
pub fn stream_dynamic(env: &mut Env) -> super::dynamic::Blocks {
    dynamic_in::<Stream>(env, 0)
}

fn dynamic_in<F: Family>(env: &mut Env, default_port: u16) -> super::dynamic::Blocks {
    let b = super::dynamic::Blocks::new(default_port);
    env.ext.entry::<Registry<F>>().dynamic.push(b.clone());
    b
}

/// End the load: resolve every reference. Starts active health checks of
/// the upstreams in use and shows the upstreams in /metrics.
pub fn finish(env: &mut Env) -> Result<(), ConfError> {
    finish_in::<Http>(env)?;
    finish_in::<Stream>(env)
}

fn finish_in<F: Family>(env: &mut Env) -> Result<(), ConfError> {
    let reg = env.ext.remove::<Registry<F>>().unwrap_or_default();
    for (i, (u, span)) in reg.blocks.iter().enumerate() {
        if reg.blocks[..i].iter().any(|(o, _)| o.name == u.name) {
            return Err(ConfError::new(
                format!("duplicate upstream \"{}\"", u.name),
                span,
            ));
        }
    }
    for (name, size, span) in &reg.zones {
        let sized: Vec<u64> = reg
            .zones
            .iter()
            .filter(|(n, _, _)| n == name)
            .filter_map(|(_, s, _)| *s)
            .collect();
        if sized.is_empty() {
            return Err(ConfError::new(
                format!("zero size shared memory zone \"{name}\""),
                span,
            ));
        }
        if size.is_some() && sized.len() > 1 && sized.iter().any(|s| Some(*s) != *size) {
            return Err(ConfError::new(
                format!(
                    "the size {} of shared memory zone \"{name}\" conflicts with already declared size {}",
                    size.unwrap_or(0),
                    sized[0]
                ),
                span,
            ));
        }
    }
    let named: Arc<[Arc<Upstream>]> = reg.blocks.iter().map(|(u, _)| u.clone()).collect();
    let mut implicit_cache: Vec<(String, u16, Arc<Upstream>)> = Vec::new();
    for (name, port, span, r) in reg.refs {
        let up = match reg.blocks.iter().find(|(u, _)| u.name == name) {
            Some((u, _)) => u.clone(),
            None => match implicit_cache
                .iter()
                .find(|(n, p, _)| *n == name && *p == port)
            {
                Some((_, _, u)) => u.clone(),
                None => {
                    if F::STREAM
                        && !name.starts_with("unix:")
                        && split_host_port(&name, 0).is_ok_and(|(_, p)| p == 0)
                    {
                        return Err(ConfError::new(
                            format!("no port in upstream \"{name}\""),
                            &span,
                        ));
                    }
                    let u = implicit(&name, port, &span)?;
                    implicit_cache.push((name.clone(), port, u.clone()));
                    u
                }
            },
        };
        let _ = r.0.set(up);
    }
    let implicit: Arc<[(String, u16, Arc<Upstream>)]> = implicit_cache
        .iter()
        .filter(|(name, ..)| !name.starts_with("unix:"))
        .filter_map(|(name, port, u)| {
            let (host, port) = split_host_port(name, *port).ok()?;
            Some((host.to_ascii_lowercase(), port, u.clone()))
        })
        .collect();
    for d in &reg.dynamic {
        d.set(named.clone(), implicit.clone());
    }
    for (u, _) in &reg.blocks {
        if u.health.is_some() && Arc::strong_count(u) > 1 {
            super::health::start(u);
        }
    }
    // Names resolved at run time: once the protocol level's resolver is
    // known (the http or stream block's).
    env.ext.insert(super::resolve::Pending::<F>::new(
        reg.blocks
            .iter()
            .filter(|(u, _)| u.dynamic.is_some())
            .cloned()
            .collect(),
    ));
    for u in reg
        .blocks
        .iter()
        .map(|(u, _)| u)
        .chain(implicit_cache.iter().map(|(_, _, u)| u))
    {
        super::stats::track(u);
    }
    Ok(())
}

/// An implicit upstream of one address (all addresses of a host name).
fn implicit(name: &str, port: u16, span: &Span) -> Result<Arc<Upstream>, ConfError> {
    let addrs = resolve(name, port)
        .map_err(|e| ConfError::new(format!("{e} in upstream \"{name}\""), span))?;
    Ok(Arc::new(Upstream::round_robin(name, addrs)))
}

impl Upstream {
    /// An implicit upstream over `addrs`: round robin, nginx's defaults, no
    /// keep-alive pool, health check or queue.
    pub(crate) fn round_robin(name: &str, addrs: Vec<PeerAddr>) -> Upstream {
        Upstream {
            name: name.to_string(),
            id: next_id(),
            healthy: addrs.iter().map(|_| AtomicBool::new(true)).collect(),
            peers: addrs
                .iter()
                .map(|a| PeerSpec::new(&a.to_string()))
                .collect(),
            names: addrs.iter().map(|a| a.to_string().into()).collect(),
            addrs,
            dynamic: None,
            method: Method::RoundRobin,
            hash_key: None,
            keepalive: 0,
            keepalive_timeout: Duration::from_secs(60),
            keepalive_requests: 1000,
            keepalive_time: Duration::from_secs(3600),
            zone: None,
            shared: None,
            ephemeral: false,
            health: None,
            queue: None,
        }
    }

    /// An upstream made for one request (a handler's address with
    /// variables): round robin over `addrs`, its balancer its own.
    pub fn ephemeral(name: &str, addrs: Vec<PeerAddr>) -> Upstream {
        let mut u = Upstream::round_robin(name, addrs);
        u.ephemeral = true;
        u.share_balancer();
        u
    }
}

/// Resolve `host[:port]`, `[v6]:port` or `unix:/path`.
pub fn resolve(addr: &str, default_port: u16) -> Result<Vec<PeerAddr>, String> {
    if let Some(path) = addr.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("no path in unix socket address".into());
        }
        return Ok(vec![PeerAddr::Unix(path.into())]);
    }
    let (host, port) = split_host_port(addr, default_port)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err("no host".into());
    }
    let mut out: Vec<PeerAddr> = Vec::new();
    for a in (host, port)
        .to_socket_addrs()
        .map_err(|_| "host not found".to_string())?
    {
        let p = PeerAddr::Tcp(a);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err("host not found".into());
    }
    Ok(out)
}

/// `host:port` → (host, port); no port gives `default_port`.
pub fn split_host_port(addr: &str, default_port: u16) -> Result<(&str, u16), String> {
    let (host, port) = if addr.starts_with('[') {
        match addr.find(']') {
            Some(i) => match addr[i + 1..].strip_prefix(':') {
                Some(p) => (&addr[..=i], Some(p)),
                None if i + 1 == addr.len() => (addr, None),
                None => return Err("invalid address".into()),
            },
            None => return Err("invalid IPv6 address".into()),
        }
    } else {
        match addr.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (addr, None),
        }
    };
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| "invalid port".to_string())?,
    };
    Ok((host, port))
}

fn err(d: &Directive, msg: impl Into<String>) -> ConfError {
    ConfError::new(msg, &d.span)
}

fn arity(d: &Directive, min: usize, max: usize) -> Result<(), ConfError> {
    if d.args.len() < min || d.args.len() > max || d.block.is_some() {
        return Err(err(
            d,
            format!("invalid number of arguments in \"{}\" directive", d.name),
        ));
    }
    Ok(())
}

/// A `zone` line: name, size if given, where.
type ZoneLine = (String, Option<u64>, Span);

/// A `server` line's parameters: the peer's (its name left empty), whether
/// it has `resolve`, and its `service=`.
fn server_params(c: &Directive) -> Result<(PeerSpec, bool, Option<String>), ConfError> {
    let mut p = PeerSpec::new("");
    let (mut run_time, mut service) = (false, None);
    for arg in c.arg_strs().skip(1) {
        let num = |v: &str| v.parse::<u32>().map_err(|_| values::bad_arg(c, arg));
        if let Some(v) = option(arg, "weight") {
            p.weight = num(v)?;
            if p.weight == 0 {
                return Err(values::bad_arg(c, arg));
            }
        } else if let Some(v) = option(arg, "max_fails") {
            p.max_fails = num(v)?;
        } else if let Some(v) = option(arg, "max_conns") {
            p.max_conns = num(v)?;
        } else if let Some(v) = option(arg, "fail_timeout") {
            p.fail_timeout = parse_time(v).ok_or_else(|| values::bad_arg(c, arg))?;
        } else if arg == "backup" {
            p.backup = true;
        } else if arg == "down" {
            p.down = true;
        } else if arg == "resolve" {
            run_time = true;
        } else if let Some(v) = option(arg, "service") {
            if v.is_empty() {
                return Err(err(c, "service is empty"));
            }
            service = Some(v.to_string());
        } else {
            return Err(values::bad_arg(c, arg));
        }
    }
    Ok((p, run_time, service))
}

/// The template of `server ADDR … resolve`: `None` when ADDR is an address
/// already (`unix:`, an IP), which is a fixed peer as nginx makes it.
fn template(
    c: &Directive,
    addr: &str,
    spec: &PeerSpec,
    service: Option<String>,
) -> Result<Option<super::resolve::Template>, ConfError> {
    let (host, port) =
        split_host_port(addr, 80).map_err(|e| err(c, format!("{e} in upstream \"{addr}\"")))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if addr.starts_with("unix:") || bare.parse::<std::net::IpAddr>().is_ok() {
        if service.is_some() {
            return Err(err(
                c,
                format!("service upstream \"{addr}\" requires domain name"),
            ));
        }
        return Ok(None);
    }
    if super::dns::labels(bare).is_none() {
        return Err(err(c, format!("invalid host in upstream \"{addr}\"")));
    }
    let query = match &service {
        Some(_) if addr.contains(':') => {
            return Err(err(
                c,
                format!("service upstream \"{addr}\" may not have port"),
            ));
        }
        Some(s) => super::resolve::Template::srv_name(s, bare),
        None => bare.to_string(),
    };
    Ok(Some(super::resolve::Template {
        host: bare.to_string(),
        service,
        query,
        port,
        spec: PeerSpec {
            name: addr.to_string(),
            ..spec.clone()
        },
    }))
}

fn upstream_block(
    d: &Directive,
    vars: &mut Vars,
    stream: bool,
) -> Result<(Upstream, Option<ZoneLine>), ConfError> {
    let name = d.arg(0).to_string();
    let mut peers = Vec::new();
    let mut addrs = Vec::new();
    let mut method: Option<Method> = None;
    let mut hash_key = None;
    let mut keepalive = 0;
    let mut keepalive_timeout = Duration::from_secs(60);
    let mut keepalive_requests = 1000;
    let mut keepalive_time = Duration::from_secs(3600);
    let mut zone = None;
    let mut health = None;
    let mut queue: Option<super::queue::Conf> = None;
    let mut templates = Vec::new();
    let mut own_resolver: Option<Arc<super::resolver::Resolver>> = None;
    let mut own_timeout = None;
    for c in d.block.as_deref().unwrap_or(&[]) {
        vars.at(&c.span);
        let set_method = |m: &mut Option<Method>, v: Method| {
            if m.is_some() {
                return Err(err(c, "load balancing method redefined"));
            }
            *m = Some(v);
            Ok(())
        };
        let http_only = [
            "keepalive",
            "keepalive_timeout",
            "keepalive_requests",
            "keepalive_time",
            "queue",
            "health_check",
        ];
        match c.name.as_str() {
            other if stream && http_only.contains(&other) => {
                return Err(err(
                    c,
                    format!("\"{other}\" directive is not allowed in a stream upstream block"),
                ));
            }
            "server" => {
                arity(c, 1, 10)?;
                let addr = c.arg(0);
                let (spec, run_time, service) = server_params(c)?;
                // A service's records give the ports.
                if stream
                    && service.is_none()
                    && !addr.starts_with("unix:")
                    && split_host_port(addr, 0).is_ok_and(|(_, p)| p == 0)
                {
                    return Err(err(c, format!("no port in upstream \"{addr}\"")));
                }
                if service.is_some() && !run_time {
                    return Err(err(
                        c,
                        format!("service upstream \"{addr}\" requires \"resolve\" parameter"),
                    ));
                }
                if run_time && let Some(t) = template(c, addr, &spec, service)? {
                    templates.push(t);
                    continue;
                }
                let list =
                    resolve(addr, 80).map_err(|e| err(c, format!("{e} in upstream \"{addr}\"")))?;
                for a in list {
                    peers.push(PeerSpec {
                        name: a.to_string(),
                        ..spec.clone()
                    });
                    addrs.push(a);
                }
            }
            "resolver" => {
                if c.args.is_empty() || c.block.is_some() {
                    return Err(err(
                        c,
                        "invalid number of arguments in \"resolver\" directive",
                    ));
                }
                if own_resolver.is_some() {
                    return Err(err(c, "\"resolver\" directive is duplicate"));
                }
                own_resolver = Some(Arc::new(super::resolver::parse(c)?));
            }
            "resolver_timeout" => {
                arity(c, 1, 1)?;
                own_timeout = Some(values::time(c, 0)?);
            }
            "least_conn" => {
                arity(c, 0, 0)?;
                set_method(&mut method, Method::LeastConn)?;
            }
            "ip_hash" => {
                arity(c, 0, 0)?;
                set_method(&mut method, Method::IpHash)?;
            }
            "hash" => {
                arity(c, 1, 2)?;
                let consistent = match c.arg(1) {
                    "" => false,
                    "consistent" => true,
                    v => return Err(values::bad_arg(c, v)),
                };
                set_method(&mut method, Method::Hash { consistent })?;
                hash_key = Some(Template::compile(c.arg(0), vars).map_err(|e| err(c, e))?);
            }
            "random" => {
                arity(c, 0, 2)?;
                // `two [least_conn]`: least_conn is the only method of two.
                let two = match (c.arg(0), c.arg(1)) {
                    ("", _) => false,
                    ("two", "" | "least_conn") => true,
                    ("two", v) | (v, _) => return Err(values::bad_arg(c, v)),
                };
                set_method(&mut method, Method::Random { two })?;
            }
            "keepalive" => {
                arity(c, 1, 1)?;
                keepalive = values::number(c, 0)? as usize;
                if keepalive == 0 {
                    return Err(values::bad_arg(c, c.arg(0)));
                }
            }
            "keepalive_timeout" => {
                arity(c, 1, 1)?;
                keepalive_timeout = values::time(c, 0)?;
            }
            "keepalive_requests" => {
                arity(c, 1, 1)?;
                keepalive_requests = values::number(c, 0)?;
            }
            "keepalive_time" => {
                arity(c, 1, 1)?;
                keepalive_time = values::time(c, 0)?;
            }
            "zone" => {
                arity(c, 1, 2)?;
                let size = match c.arg(1) {
                    "" => None,
                    v => {
                        let n = values::parse_size(v)
                            .ok_or_else(|| err(c, format!("invalid zone size \"{v}\"")))?;
                        if n < 8 * 4096 {
                            return Err(err(c, format!("zone \"{}\" is too small", c.arg(0))));
                        }
                        Some(n)
                    }
                };
                zone = Some((c.arg(0).to_string(), size, c.span.clone()));
            }
            "queue" => {
                arity(c, 1, 2)?;
                queue = Some(super::queue::Conf {
                    size: values::number(c, 0)? as usize,
                    timeout: match c.arg(1) {
                        "" => Duration::from_secs(60),
                        a => option(a, "timeout")
                            .and_then(parse_time)
                            .ok_or_else(|| values::bad_arg(c, a))?,
                    },
                });
                if queue.is_some_and(|q| q.size == 0) {
                    return Err(values::bad_arg(c, c.arg(0)));
                }
            }
            "health_check" => {
                arity(c, 0, 6)?;
                health = Some(Check::parse(c)?);
            }
            other => {
                return Err(err(
                    c,
                    format!("\"{other}\" directive is not allowed in an upstream block"),
                ));
            }
        }
    }
    if peers.is_empty() && templates.is_empty() {
        return Err(err(d, format!("no servers are inside upstream \"{name}\"")));
    }
    if !templates.is_empty() && zone.is_none() {
        return Err(err(
            d,
            format!(
                "resolving names at run time requires upstream \"{name}\" to be in shared memory"
            ),
        ));
    }
    if method.is_some_and(|m| !matches!(m, Method::RoundRobin | Method::LeastConn))
        && peers
            .iter()
            .chain(templates.iter().map(|t| &t.spec))
            .any(|p| p.backup)
    {
        // nginx refuses backup with hashing methods.
        return Err(err(
            d,
            "balancing method does not support the \"backup\" parameter",
        ));
    }
    let mut u = Upstream {
        name,
        id: next_id(),
        healthy: peers.iter().map(|_| AtomicBool::new(true)).collect(),
        peers,
        names: addrs.iter().map(|a| a.to_string().into()).collect(),
        addrs,
        dynamic: (!templates.is_empty())
            .then(|| super::resolve::Dynamic::new(templates, stream, (own_resolver, own_timeout))),
        method: method.unwrap_or(Method::RoundRobin),
        hash_key,
        keepalive,
        keepalive_timeout,
        keepalive_requests,
        keepalive_time,
        zone: None,
        shared: None,
        ephemeral: false,
        health,
        queue,
    };
    let zone = zone.map(|(name, size, span)| {
        u.zone = Some(name.clone());
        u.share_balancer();
        (name, size, span)
    });
    Ok((u, zone))
}

/// An `upstream` block of the protocol `F` read into its registry.
fn add_block<F: Family>(d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    let (u, zone) = upstream_block(d, &mut e.vars, F::STREAM)?;
    let reg = e.ext.entry::<Registry<F>>();
    if let Some(z) = zone {
        reg.zones.push(z);
    }
    reg.blocks.push((Arc::new(u), d.span.clone()));
    Ok(())
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "upstream",
        ignored: false,
        ctx: Ctx::HTTP,
        arity: Arity::block(1, 1),
        set: |_, d, e| add_block::<Http>(d, e),
        syntax: "upstream name { … }",
        default: "—",
        doc: "A named group of peers for `proxy_pass http://name` (and `fastcgi_pass name`, or an address with variables whose value is the name). Inside: `server address [weight=N] [max_fails=N] [fail_timeout=time] [backup] [down] [max_conns=N] [resolve] [service=name];` (an address is `host[:port]`, `ip:port` or `unix:/path`; a host name stands for all its addresses, found when the configuration loads — with `resolve`, found at run time and kept up to date without a reload: the name is asked again when its answer's TTL, or the resolver's `valid=`, runs out, at most every `resolver_timeout`, and its addresses join and leave the peers, each with the line's parameters; a failed lookup keeps the peers, \"Host not found\" empties them; the block must have a `zone` and a `resolver`, its own or the http level's; `service=name` asks for the SRV records of `_name._tcp.host` — of `name.host` when the name has a dot — and makes each target's addresses peers with the record's port and, unless the line sets one, its weight, the lowest priority value primary and the others backup: on a `backup` line the lowest priority value is backup and the others are left out), `resolver address ... [valid=time] [ipv6=on|off];` and `resolver_timeout time;` (for the block's `resolve` names; the http level's otherwise), one balancing method (`least_conn;`, `ip_hash;`, `hash key [consistent];`, `random [two];`; smooth weighted round robin without one), `keepalive N;` (idle connections kept per peer per worker; default none; a peer found full — a new connection left in its listen queue well past what pooled exchanges wait, as php-fpm's children each serve one connection — makes the requests of the next second that find no idle connection wait for one to be released to them, while others are, rather than open more), `keepalive_timeout time;` (60s), `keepalive_requests N;` (1000), `keepalive_time time;` (1h: a connection that old is closed when its request ends), `zone name [size];` (the peers' balancing state — connection counts, failures, weights — is one for all workers, as nginx's shared zone; without it each worker balances on its own; a zone named without a size must be sized by another block), `queue N [timeout=time];` (requests wait, up to N per worker for at most timeout, default 60s, when every peer is at `max_conns`; a full queue or the timeout answers 502), and vireo's active `health_check [interval=5s] [timeout=2s] [path=/] [status=200-399] [rise=2] [fall=3];`. See docs/proxy.md.\n\n```nginx\nupstream backend {\n    server 127.0.0.1:8080 max_conns=64;\n    server 127.0.0.1:8081 max_conns=64;\n    queue 1000 timeout=30s;\n    keepalive 16;\n    zone backend 64k;\n}\nupstream dynamic {\n    zone dynamic 64k;\n    resolver 10.0.0.53 valid=30s;\n    server app.example.com:8080 resolve max_fails=2;\n    server example.com service=http resolve;\n}\n```",
    },
    Def {
        name: "upstream",
        ignored: false,
        ctx: Ctx::STREAM,
        arity: Arity::block(1, 1),
        set: |_, d, e| add_block::<Stream>(d, e),
        syntax: "upstream name { … }",
        default: "—",
        doc: "A named group of peers for a stream server's `proxy_pass name`, apart from the http block's. Inside: `server address:port [weight=N] [max_fails=N] [fail_timeout=time] [backup] [down] [max_conns=N] [resolve] [service=name];` (or `unix:/path`; with `service=name` no port: the SRV records give them), `resolver address ... [valid=time] [ipv6=on|off];` and `resolver_timeout time;`, one balancing method (`least_conn;`, `hash key [consistent];`, `random [two];`; smooth weighted round robin without one) and `zone name [size];`, with the http block's meaning: the balancers, passive health (`max_fails` within `fail_timeout`), `max_conns` and the names resolved at run time (`resolve`, `service=`: the block needs a `zone` and a `resolver`, its own or the stream level's) are the same code. A session counts toward its peer's `max_conns` until it ends.\n\n```nginx\nupstream dns {\n    hash $remote_addr consistent;\n    server 10.0.0.53:53 max_fails=2 fail_timeout=10s;\n    server 10.0.0.54:53;\n    zone dns 64k;\n}\nupstream db {\n    zone db 64k;\n    resolver 10.0.0.53 valid=30s;\n    server db.example.com:5432 resolve;\n    server example.com service=postgresql resolve backup;\n}\n```",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(split_host_port("a:81", 80).unwrap(), ("a", 81));
        assert_eq!(split_host_port("a", 80).unwrap(), ("a", 80));
        assert_eq!(split_host_port("[::1]:90", 80).unwrap(), ("[::1]", 90));
        assert_eq!(split_host_port("[::1]", 80).unwrap(), ("[::1]", 80));
        assert!(split_host_port("a:0", 80).is_err());
        assert_eq!(
            resolve("127.0.0.1:5", 80).unwrap(),
            vec![PeerAddr::Tcp("127.0.0.1:5".parse().unwrap())]
        );
        assert_eq!(
            resolve("unix:/x.sock", 80).unwrap(),
            vec![PeerAddr::Unix("/x.sock".into())]
        );
    }
}
