//! `resolver`: names of upstream hosts found at request time, for handlers
//! whose address has variables, and kept up to date for `server … resolve`
//! in an upstream block ([`super::resolve`]). A small asynchronous DNS
//! client, as nginx's:
//!
//! - A (and with `ipv6=on`, the default, AAAA) queries, or one SRV query for
//!   a service (each of its targets then resolved as a name), go over UDP to one of
//!   the servers, the next one for each new name (round robin); a query not
//!   answered within 5 seconds is sent again to the next server, until
//!   `resolver_timeout` (then "(110: Operation timed out)").
//! - A reply with another id, or with FORMERR or an unknown error code, is
//!   ignored (logged): the query waits for its resend. A truncated reply is
//!   asked again over TCP from the same server.
//! - The addresses of both answers are used; without any, the CNAME of the
//!   last answer is followed (at most 8 deep). NXDOMAIN, SERVFAIL, NOTIMP or
//!   REFUSED in either answer, or no address at all, fail the lookup at once.
//! - Answers are cached by name (case-insensitive) for their least TTL, or
//!   for `valid=`; a TTL of 0 is not cached; failures are not cached.
//! - Requests for a name being asked for wait for that answer (each within
//!   its own resolver_timeout); if the asking request goes away, the next
//!   one asks.
//!
//! The cache is one per `resolver` directive, shared by the workers under a
//! lock held for one lookup or insert (never across an await).

use super::dns;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE, Scope};
use crate::conf::values::{self, option};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// nginx's resend interval of an unanswered query.
const RESEND: Duration = Duration::from_secs(5);

/// CNAMEs followed for one name.
const MAX_CNAMES: usize = 8;

/// Names kept in one resolver's cache.
const MAX_CACHED: usize = 10_000;

/// Names (lowercased) → their addresses and until when they hold.
type Cache = rustc_hash::FxHashMap<String, (Arc<[IpAddr]>, Instant)>;

/// One `resolver` directive: its servers, options and cache.
#[derive(Debug)]
pub struct Resolver {
    servers: Vec<SocketAddr>,
    /// `valid=`: how long answers are kept, whatever their TTL.
    valid: Option<Duration>,
    /// `ipv6=on`: ask for AAAA records too.
    ipv6: bool,
    /// The server the next new name is asked of.
    next: AtomicUsize,
    cache: Mutex<Cache>,
    /// Names being asked for: a request for one of them waits for that
    /// answer instead of asking again.
    pending: Mutex<Pending>,
}

/// Why a name was not resolved, shown as nginx shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer within resolver_timeout.
    TimedOut,
    /// The DNS error code (NXDOMAIN for an empty answer).
    Code(u8),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::TimedOut => f.write_str("110: Operation timed out"),
            Failure::Code(c) => write!(f, "{c}: {}", dns::strerror(*c)),
        }
    }
}

/// A lookup under way, by name: its result once there.
type Pending = rustc_hash::FxHashMap<String, tokio::sync::watch::Receiver<Outcome>>;
type Outcome = Option<Result<Resolved, Failure>>;

/// A name's addresses and until when they hold (its cache entry's end; now
/// for an answer not cached).
pub type Resolved = (Arc<[IpAddr]>, Instant);

/// What a service's SRV records led to.
#[derive(Debug, Default)]
pub struct Services {
    /// Each address of each target, with its record's port, priority and
    /// weight, in the order of the records.
    pub found: Vec<Service>,
    /// Targets that could not be resolved.
    pub failed: Vec<(String, Failure)>,
}

/// One address a service is offered at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    pub addr: SocketAddr,
    pub priority: u16,
    pub weight: u16,
    /// The record's target host.
    pub target: Arc<str>,
}

/// A request's part in a lookup: waiting for another's, or asking.
enum Turn {
    Wait(tokio::sync::watch::Receiver<Outcome>),
    Ask(tokio::sync::watch::Sender<Outcome>),
}

/// The asking request's mark in `pending`, taken away when it is done or
/// gone (its waiters then see the channel close and ask themselves).
struct Asking<'a> {
    resolver: &'a Resolver,
    key: &'a str,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.resolver.pending().remove(self.key);
    }
}

/// What one name's queries found.
enum Found {
    Addrs(Vec<IpAddr>, u32),
    Cname(String, u32),
}

/// A query id nobody can guess from the previous ones.
fn random_id() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish() as u16
}

impl Resolver {
    pub fn new(servers: Vec<SocketAddr>, valid: Option<Duration>, ipv6: bool) -> Resolver {
        Resolver {
            servers,
            valid,
            ipv6,
            next: AtomicUsize::new(0),
            cache: Mutex::new(rustc_hash::FxHashMap::default()),
            pending: Mutex::new(rustc_hash::FxHashMap::default()),
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The addresses of `name`, from the cache or asked within `timeout`.
    pub async fn resolve(&self, name: &str, timeout: Duration) -> Result<Arc<[IpAddr]>, Failure> {
        self.resolve_until(name, timeout).await.map(|(a, _)| a)
    }

    /// [`Resolver::resolve`], with until when the answer holds.
    pub async fn resolve_until(&self, name: &str, timeout: Duration) -> Result<Resolved, Failure> {
        let key = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        let now = Instant::now();
        if let Some((addrs, until)) = self.cache().get(&key)
            && *until > now
        {
            return Ok((addrs.clone(), *until));
        }
        if dns::labels(&key).is_none() {
            return Err(Failure::Code(dns::FORMERR));
        }
        let deadline = now + timeout;
        loop {
            let turn = {
                let mut p = self.pending();
                match p.get(&key) {
                    Some(rx) => Turn::Wait(rx.clone()),
                    None => {
                        let (tx, rx) = tokio::sync::watch::channel(None);
                        p.insert(key.clone(), rx);
                        Turn::Ask(tx)
                    }
                }
            };
            match turn {
                Turn::Wait(mut rx) => {
                    let done = rx.wait_for(Option::is_some);
                    match tokio::time::timeout_at(deadline.into(), done).await {
                        Err(_) => return Err(Failure::TimedOut),
                        Ok(Ok(r)) => return r.clone().unwrap_or(Err(Failure::TimedOut)),
                        // The request that asked went away: ask anew.
                        Ok(Err(_)) => continue,
                    }
                }
                Turn::Ask(tx) => {
                    let _asking = Asking {
                        resolver: self,
                        key: &key,
                    };
                    let r = self.ask_chain(&key, deadline).await;
                    let _ = tx.send(Some(r.clone()));
                    return r;
                }
            }
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The addresses of the SRV records of `name` (a service's full name,
    /// `_http._tcp.example.net`), each target resolved as a name, within
    /// `timeout`; until when the answers hold. A CNAME answered instead of
    /// records is followed (at most 8 deep). Records of a target that does
    /// not resolve are left out (and named in `failed`); with no address at
    /// all the lookup fails.
    pub async fn resolve_srv(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<(Services, Instant), Failure> {
        let key = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if dns::labels(&key).is_none() {
            return Err(Failure::Code(dns::FORMERR));
        }
        let deadline = Instant::now() + timeout;
        let mut asked = key;
        let mut ttl = u32::MAX;
        let mut cnames = 0;
        let answer = loop {
            let answer = match self.lookup(&asked, &[dns::SRV], deadline).await?.pop() {
                Some(Ok(a)) => a,
                Some(Err(code)) => return Err(Failure::Code(code)),
                None => return Err(Failure::TimedOut),
            };
            ttl = ttl.min(answer.ttl);
            match &answer.cname {
                Some(c) if answer.srvs.is_empty() && cnames < MAX_CNAMES => {
                    cnames += 1;
                    asked = c.clone();
                }
                _ => break answer,
            }
        };
        let mut until = Instant::now() + self.keep(ttl);
        let mut out = Services::default();
        for srv in answer.srvs.iter().filter(|s| !s.target.is_empty()) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.resolve_until(&srv.target, left).await {
                Ok((ips, valid)) => {
                    until = until.min(valid);
                    let target: Arc<str> = srv.target.as_str().into();
                    out.found.extend(ips.iter().map(|ip| Service {
                        addr: SocketAddr::new(*ip, srv.port),
                        priority: srv.priority,
                        weight: srv.weight,
                        target: target.clone(),
                    }));
                }
                Err(e) => out.failed.push((srv.target.clone(), e)),
            }
        }
        if out.found.is_empty() {
            // The first target's failure, NXDOMAIN if any target had it.
            let nx = Failure::Code(dns::NXDOMAIN);
            return Err(match out.failed.iter().any(|f| f.1 == nx) {
                true => nx,
                false => out.failed.first().map_or(nx, |f| f.1),
            });
        }
        Ok((out, until))
    }

    /// How long an answer with `ttl` is kept: its TTL, or `valid=`.
    fn keep(&self, ttl: u32) -> Duration {
        self.valid
            .unwrap_or_else(|| Duration::from_secs(ttl.into()))
    }

    /// How long a name found not to exist stays so: `valid=`, else 10s.
    pub fn failure_valid(&self) -> Duration {
        self.valid.unwrap_or(Duration::from_secs(10))
    }

    /// The record types asked for a name's addresses.
    fn address_types(&self) -> &'static [u16] {
        if self.ipv6 {
            &[dns::A, dns::AAAA]
        } else {
            &[dns::A]
        }
    }

    /// Ask for `key` (following CNAMEs) and cache what is found.
    async fn ask_chain(&self, key: &str, deadline: Instant) -> Result<Resolved, Failure> {
        let mut asked = key.to_string();
        let mut ttl = u32::MAX;
        for _ in 0..=MAX_CNAMES {
            let answers = self.lookup(&asked, self.address_types(), deadline).await?;
            match combine(answers)? {
                Found::Addrs(addrs, t) => {
                    let addrs: Arc<[IpAddr]> = addrs.into();
                    let keep = self.keep(ttl.min(t));
                    let until = Instant::now() + keep;
                    if !keep.is_zero() {
                        let mut cache = self.cache();
                        if cache.len() >= MAX_CACHED {
                            let now = Instant::now();
                            cache.retain(|_, (_, until)| *until > now);
                            if cache.len() >= MAX_CACHED {
                                cache.clear();
                            }
                        }
                        cache.insert(key.to_string(), (addrs.clone(), until));
                    }
                    return Ok((addrs, until));
                }
                Found::Cname(target, t) => {
                    ttl = ttl.min(t);
                    asked = target;
                }
            }
        }
        Err(Failure::Code(dns::NXDOMAIN))
    }

    /// Ask the servers in turn for `name`'s records of `types` until one
    /// answers them all or `deadline`: each answer, or its error code.
    async fn lookup(
        &self,
        name: &str,
        types: &[u16],
        deadline: Instant,
    ) -> Result<Vec<Result<dns::Answer, u8>>, Failure> {
        let n = self.servers.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        for k in 0.. {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let server = self.servers[(first + k) % n];
            let until = (now + RESEND).min(deadline);
            match self.ask(server, name, types, until).await {
                Ok(Some(found)) => return Ok(found),
                Ok(None) => {}
                Err(e) => {
                    crate::error_log!(
                        Error,
                        "{} while resolving {name} with {server}",
                        crate::core::errlog::errno_text(&e)
                    );
                    tokio::time::sleep_until(until.into()).await;
                }
            }
        }
        Err(Failure::TimedOut)
    }

    /// One server's answers to the queries of `types` for `name`; `None`
    /// when they did not all come by `until`.
    async fn ask(
        &self,
        server: SocketAddr,
        name: &str,
        types: &[u16],
        until: Instant,
    ) -> std::io::Result<Option<Vec<Result<dns::Answer, u8>>>> {
        let bind: SocketAddr = if server.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = tokio::net::UdpSocket::bind(bind).await?;
        sock.connect(server).await?;
        let mut queries = Vec::with_capacity(types.len());
        for &t in types {
            let id = random_id();
            let q = dns::query(id, name, t).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "invalid name")
            })?;
            sock.send(&q).await?;
            queries.push((id, t, q));
        }
        let mut results: Vec<Option<Result<dns::Answer, u8>>> = vec![None; types.len()];
        let mut buf = vec![0u8; 4096];
        while results.iter().any(Option::is_none) {
            let n = match tokio::time::timeout_at(until.into(), sock.recv(&mut buf)).await {
                Err(_) => return Ok(None),
                Ok(r) => r?,
            };
            let Some(h) = dns::header(&buf[..n]) else {
                continue;
            };
            let Some(i) = queries
                .iter()
                .position(|(id, _, _)| *id == h.id)
                .filter(|&i| results[i].is_none())
            else {
                crate::error_log!(
                    Error,
                    "wrong ident {} in DNS response for {name}, expect {}",
                    h.id,
                    queries[0].0
                );
                continue;
            };
            let (_, qtype, q) = &queries[i];
            let reply;
            let (msg, h) = if h.truncated {
                match tcp(server, q, until).await {
                    Ok(Some(m)) => {
                        reply = m;
                        match dns::header(&reply) {
                            Some(h2) if h2.id == h.id => (&reply[..], h2),
                            _ => continue,
                        }
                    }
                    Ok(None) => return Ok(None),
                    Err(e) => {
                        crate::error_log!(
                            Error,
                            "{} while resolving {name} over TCP with {server}",
                            crate::core::errlog::errno_text(&e)
                        );
                        continue;
                    }
                }
            } else {
                (&buf[..n], h)
            };
            if h.rcode == dns::FORMERR || h.rcode > dns::REFUSED {
                // Left for the resend, to another server.
                crate::error_log!(
                    Error,
                    "DNS error ({}: {}), query id:{}, name:\"{name}\"",
                    h.rcode,
                    dns::strerror(h.rcode),
                    h.id
                );
                continue;
            }
            results[i] = Some(if h.rcode != 0 {
                Err(h.rcode)
            } else {
                match dns::answer(msg, name, *qtype) {
                    Ok(a) => Ok(a),
                    Err(e) => {
                        crate::error_log!(Error, "{e} for {name}");
                        Err(dns::FORMERR)
                    }
                }
            });
        }
        Ok(Some(results.into_iter().flatten().collect()))
    }
}

/// The answers to a name's queries (A, then AAAA) as one result, as nginx
/// reads them: an error code in either fails the name; else the addresses
/// of both; without any, the CNAME of the last answer is followed (one in
/// the A answer alone is not, when AAAA was asked too).
fn combine(results: Vec<Result<dns::Answer, u8>>) -> Result<Found, Failure> {
    if let Some(&code) = results.iter().find_map(|r| r.as_ref().err()) {
        return Err(Failure::Code(code));
    }
    let answers: Vec<dns::Answer> = results.into_iter().flatten().collect();
    let mut addrs = Vec::new();
    let mut ttl = u32::MAX;
    for a in answers.iter().filter(|a| !a.addrs.is_empty()) {
        addrs.extend_from_slice(&a.addrs);
        ttl = ttl.min(a.ttl);
    }
    if !addrs.is_empty() {
        return Ok(Found::Addrs(addrs, ttl));
    }
    match answers.last() {
        Some(dns::Answer {
            cname: Some(c),
            ttl,
            ..
        }) => Ok(Found::Cname(c.clone(), *ttl)),
        _ => Err(Failure::Code(dns::NXDOMAIN)),
    }
}

/// Ask `server` over TCP (a truncated UDP answer); `None` past `until`.
async fn tcp(server: SocketAddr, q: &[u8], until: Instant) -> std::io::Result<Option<Vec<u8>>> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(server).await?;
        let mut out = (q.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(q);
        s.write_all(&out).await?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).await?;
        let mut m = vec![0u8; u16::from_be_bytes(len).into()];
        s.read_exact(&mut m).await?;
        Ok::<_, std::io::Error>(m)
    };
    match tokio::time::timeout_at(until.into(), exchange).await {
        Err(_) => Ok(None),
        Ok(r) => r.map(Some),
    }
}

crate::settings! {
    /// `resolver` and `resolver_timeout`.
    pub struct ResolverConf / ResolverConfSet {
        pub resolver: Option<Arc<Resolver>> = None,
        pub timeout: Duration = Duration::from_secs(30),
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut ResolverConfSet {
    s.loc().get_mut::<ResolverConfSet>()
}

fn resolver(s: &mut Scope<'_>, d: &Directive) -> Result<(), ConfError> {
    let r = parse(d)?;
    let l = loc(s);
    if l.resolver.is_some() {
        return Err(ConfError::new(
            "\"resolver\" directive is duplicate",
            &d.span,
        ));
    }
    l.resolver = Some(Some(Arc::new(r)));
    Ok(())
}

/// A `resolver` directive's servers and options (also in an upstream block).
pub fn parse(d: &Directive) -> Result<Resolver, ConfError> {
    let mut servers = Vec::new();
    let mut valid = None;
    let mut ipv6 = true;
    for a in d.arg_strs() {
        if let Some(v) = option(a, "valid") {
            valid = Some(values::parse_time(v).ok_or_else(|| values::bad_arg(d, a))?);
        } else if let Some(v) = option(a, "ipv6") {
            ipv6 = match v {
                "on" => true,
                "off" => false,
                _ => return Err(values::bad_arg(d, a)),
            };
        } else if a.starts_with("status_zone=") {
            // nginx Plus's per-zone resolver figures: vireo keeps none.
        } else {
            let list = super::conf::resolve(a, 53)
                .map_err(|e| ConfError::new(format!("{e} in resolver \"{a}\""), &d.span))?;
            for p in list {
                match p {
                    super::PeerAddr::Tcp(s) => servers.push(s),
                    super::PeerAddr::Unix(_) => {
                        return Err(ConfError::new(
                            format!("invalid resolver address \"{a}\""),
                            &d.span,
                        ));
                    }
                }
            }
        }
    }
    if servers.is_empty() {
        return Err(ConfError::new(
            "invalid number of arguments in \"resolver\" directive",
            &d.span,
        ));
    }
    Ok(Resolver::new(servers, valid, ipv6))
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "resolver",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::SS),
        arity: Arity::args(1, MANY),
        set: |s, d, _| resolver(s, d),
        syntax: "resolver address ... [valid=time] [ipv6=on|off] [status_zone=zone];",
        default: "—",
        doc: "DNS servers (`ip[:port]`, port 53 by default) that resolve, at request time, the host of a `proxy_pass` or `fastcgi_pass` whose address has variables and names no `upstream` block, and, at the http level, the names of `server … resolve` lines in upstream blocks without a `resolver` of their own (inside an `upstream` block, `resolver` and `resolver_timeout` are the block's; see `upstream`). Queries go over UDP to the servers in turn (a truncated answer is asked again over TCP); A and, with `ipv6=on` (the default), AAAA records are asked for; answers are cached for their TTL, or for `valid=time`. `status_zone` is accepted and keeps nothing. Without a resolver such a host answers 502 (\"no resolver defined to resolve …\").\n\n```nginx\nresolver 127.0.0.1 [::1]:5353 valid=30s ipv6=off;\nlocation / { proxy_pass http://$host:8080; }\n```",
    },
    Def {
        name: "resolver_timeout",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            loc(s).timeout = Some(values::time(d, 0)?);
            Ok(())
        },
        syntax: "resolver_timeout time;",
        default: "30s",
        doc: "How long a name may take to resolve (every server tried in turn, a query sent again each 5 seconds); past it the request answers 502, logged as \"… could not be resolved (110: Operation timed out)\". For the `resolve` names of upstream blocks it is also the longest time between two lookups of a name, and the wait before asking again after a failed one (at least 1s).\n\n```nginx\nresolver_timeout 5s;\n```",
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// A DNS server on loopback sending each query the replies
    /// `answer(query)`, in a thread.
    fn server(answer: impl Fn(&[u8]) -> Vec<Vec<u8>> + Send + 'static) -> SocketAddr {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = s.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                for r in answer(&buf[..n]) {
                    let _ = s.send_to(&r, from);
                }
            }
        });
        addr
    }

    /// A reply to `q` with `rcode` and A records of `ips` (TTL `ttl`).
    fn reply(q: &[u8], rcode: u8, ttl: u32, ips: &[[u8; 4]]) -> Vec<u8> {
        let mut m = q.to_vec();
        m[2] = 0x81;
        m[3] = 0x80 | rcode;
        let qtype = u16::from_be_bytes([q[q.len() - 4], q[q.len() - 3]]);
        let ips = if qtype == dns::A { ips } else { &[] };
        m[6..8].copy_from_slice(&(ips.len() as u16).to_be_bytes());
        for ip in ips {
            m.extend_from_slice(b"\xc0\x0c\x00\x01\x00\x01");
            m.extend_from_slice(&ttl.to_be_bytes());
            m.extend_from_slice(b"\x00\x04");
            m.extend_from_slice(ip);
        }
        m
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn resolves_caches_and_fails() {
        let asked = Arc::new(AtomicUsize::new(0));
        let a = asked.clone();
        let srv = server(move |q| {
            a.fetch_add(1, Ordering::Relaxed);
            let name = &q[12..q.len() - 4];
            if name.starts_with(b"\x02nx") {
                vec![reply(q, dns::NXDOMAIN, 0, &[])]
            } else if name.starts_with(b"\x04slow") {
                vec![]
            } else {
                vec![reply(q, 0, 60, &[[127, 0, 0, 7]])]
            }
        });
        let r = Resolver::new(vec![srv], None, false);
        let rt = rt();
        rt.block_on(async {
            let t = Duration::from_secs(2);
            let got = r.resolve("Host.Example", t).await.unwrap();
            assert_eq!(&got[..], &[IpAddr::from([127, 0, 0, 7])]);
            assert_eq!(asked.load(Ordering::Relaxed), 1);
            r.resolve("host.example.", t).await.unwrap();
            assert_eq!(asked.load(Ordering::Relaxed), 1, "from the cache");
            assert_eq!(
                r.resolve("nx.example", t).await,
                Err(Failure::Code(dns::NXDOMAIN))
            );
            let t0 = Instant::now();
            assert_eq!(
                r.resolve("slow.example", Duration::from_millis(300)).await,
                Err(Failure::TimedOut)
            );
            assert!(t0.elapsed() < Duration::from_secs(2));
        });
        assert_eq!(Failure::TimedOut.to_string(), "110: Operation timed out");
        assert_eq!(Failure::Code(3).to_string(), "3: Host not found");
    }

    #[test]
    fn answers_combined_as_nginx() {
        let ans = |addrs: &[[u8; 4]], cname: Option<&str>| {
            Ok(dns::Answer {
                addrs: addrs.iter().map(|&a| IpAddr::from(a)).collect(),
                cname: cname.map(str::to_string),
                ttl: 5,
                ..dns::Answer::default()
            })
        };
        let addrs = |r: Result<Found, Failure>| match r {
            Ok(Found::Addrs(a, _)) => a.len(),
            _ => 0,
        };
        let cname = |r: Result<Found, Failure>| match r {
            Ok(Found::Cname(c, _)) => c,
            _ => String::new(),
        };
        assert_eq!(
            addrs(combine(vec![
                ans(&[[1, 1, 1, 1]], None),
                ans(&[], Some("x"))
            ])),
            1
        );
        assert_eq!(
            addrs(combine(vec![
                ans(&[[1, 1, 1, 1]], None),
                ans(&[[2; 4]], None)
            ])),
            2
        );
        assert_eq!(
            combine(vec![ans(&[[1, 1, 1, 1]], None), Err(2)]).err(),
            Some(Failure::Code(2))
        );
        assert_eq!(
            cname(combine(vec![ans(&[], None), ans(&[], Some("six"))])),
            "six"
        );
        assert_eq!(
            cname(combine(vec![ans(&[], Some("four")), ans(&[], Some("six"))])),
            "six"
        );
        assert_eq!(
            combine(vec![ans(&[], Some("four")), ans(&[], None)]).err(),
            Some(Failure::Code(dns::NXDOMAIN))
        );
        assert_eq!(cname(combine(vec![ans(&[], Some("four"))])), "four");
    }

    #[test]
    fn one_query_for_requests_at_once() {
        let asked = Arc::new(AtomicUsize::new(0));
        let a = asked.clone();
        let srv = server(move |q| {
            a.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(200));
            vec![reply(q, 0, 60, &[[127, 0, 0, 9]])]
        });
        let r = Resolver::new(vec![srv], None, false);
        rt().block_on(async {
            let t = Duration::from_secs(2);
            let (x, y) = tokio::join!(r.resolve("same.example", t), r.resolve("SAME.example", t));
            assert_eq!(x.unwrap(), y.unwrap());
            // One that gives up leaves the lookup to the next one.
            let first = r.resolve("gone.example", t);
            let gone = tokio::time::timeout(Duration::from_millis(50), first).await;
            assert!(gone.is_err());
            assert!(r.resolve("gone.example", t).await.is_ok());
        });
        assert_eq!(asked.load(Ordering::Relaxed), 3);
        assert!(r.pending().is_empty());
    }

    #[test]
    fn services_resolve_their_targets() {
        let srv = server(move |q| {
            let qtype = u16::from_be_bytes([q[q.len() - 4], q[q.len() - 3]]);
            let name = &q[12..q.len() - 4];
            if qtype != dns::SRV {
                return vec![if name.starts_with(b"\x01a") {
                    reply(q, 0, 30, &[[127, 0, 0, 5]])
                } else {
                    reply(q, dns::NXDOMAIN, 0, &[])
                }];
            }
            let mut m = reply(q, 0, 0, &[]);
            if name.starts_with(b"\x05alias") {
                // A CNAME instead of records: to _http._tcp.x.
                let target = b"\x05_http\x04_tcp\x01x\x00";
                m[7] = 1;
                m.extend_from_slice(b"\xc0\x0c\x00\x05\x00\x01\x00\x00\x00\x3c");
                m.extend_from_slice(&(target.len() as u16).to_be_bytes());
                m.extend_from_slice(target);
                return vec![m];
            }
            // Two records: a.x:81 priority 1 weight 7, nx.x:82 priority 2.
            m[7] = 2;
            for (prio, weight, port, target) in [
                (1u16, 7u16, 81u16, &b"\x01a\x01x\x00"[..]),
                (2, 1, 82, b"\x02nx\x01x\x00"),
            ] {
                m.extend_from_slice(b"\xc0\x0c\x00\x21\x00\x01\x00\x00\x00\x3c");
                m.extend_from_slice(&(6 + target.len() as u16).to_be_bytes());
                for v in [prio, weight, port] {
                    m.extend_from_slice(&v.to_be_bytes());
                }
                m.extend_from_slice(target);
            }
            vec![m]
        });
        let r = Resolver::new(vec![srv], None, false);
        rt().block_on(async {
            let (s, until) = r
                .resolve_srv("_http._tcp.x", Duration::from_secs(2))
                .await
                .unwrap();
            assert_eq!(
                s.found,
                [Service {
                    addr: "127.0.0.5:81".parse().unwrap(),
                    priority: 1,
                    weight: 7,
                    target: "a.x".into()
                }]
            );
            assert_eq!(
                s.failed,
                [("nx.x".to_string(), Failure::Code(dns::NXDOMAIN))]
            );
            // The least of the record's TTL (60) and the target's (30).
            let left = until.saturating_duration_since(Instant::now());
            assert!(left > Duration::from_secs(25) && left <= Duration::from_secs(30));
            // A CNAME is followed to the records.
            let (s, _) = r
                .resolve_srv("alias.x", Duration::from_secs(2))
                .await
                .unwrap();
            assert_eq!(s.found.len(), 1);
            assert_eq!(s.found[0].target.as_ref(), "a.x");
        });
    }

    #[test]
    fn wrong_id_is_ignored_and_ipv6_asked() {
        let srv = server(move |q| {
            // One with another id first: ignored.
            let mut wrong = reply(q, 0, 60, &[[10, 0, 0, 1]]);
            wrong[1] ^= 1;
            vec![wrong, reply(q, 0, 60, &[[10, 0, 0, 2]])]
        });
        let r = Resolver::new(vec![srv], Some(Duration::from_secs(1)), true);
        rt().block_on(async {
            let got = r
                .resolve("v6.example", Duration::from_secs(2))
                .await
                .unwrap();
            assert_eq!(&got[..], &[IpAddr::from([10, 0, 0, 2])]);
        });
    }
}
