//! `server name resolve` (and `server name service=… resolve`) in an
//! upstream block, as nginx: the name's addresses are the block's peers and
//! are kept up to date without a reload.
//!
//! Each such line is a [`Template`]: its parameters (weight, max_fails, …,
//! backup) apply to every address the name has. The block must have a
//! `zone`: its balancer is then one for all workers, and the resolved peers
//! are members of it — slots after the fixed peers, added and removed under
//! its lock ([`apply`]). A peer whose address stays keeps its slot, so its
//! balancing state (failures, connections, round-robin weight), its health
//! and its figures carry on; a peer that goes is never chosen again, its
//! attempts under way end on it, and the workers drop their idle keep-alive
//! connections to it ([`super::pool::forget`]).
//!
//! The names are resolved in the background, never on a request's path: one
//! thread per loaded configuration ([`start`]) runs a task per template that
//! resolves the name through the block's `resolver` (or that of the http or
//! stream level the block is in),
//! applies the answer, and waits: until a second after the answer stops
//! being valid (its TTL, or `valid=`), at most `resolver_timeout`; after an
//! error other than "Host not found" the peers stay as they were and the name
//! is asked again after `resolver_timeout` (at least a second). "Host not
//! found" (or an answer without addresses) empties the template's peers.
//!
//! With `service=NAME` the SRV records of `_NAME._tcp.HOST` (or of
//! `NAME.HOST` when NAME has a dot) are asked for; each target is resolved,
//! and its addresses are peers with the record's port and, unless the line
//! sets a weight, the record's weight. The records of the lowest priority
//! value are primary peers, the others backup ones; on a `backup` line the
//! lowest-priority records are backup peers and the others are left out.
//!
//! A reload keeps the resolved addresses as nginx does: a block of the new
//! configuration with the same name and zone takes, for each of its templates
//! with the same name and service, the addresses the live block has for it
//! (with the new line's port and parameters), then resolves anew.

use super::balance::PeerSpec;
use super::conf::{Family, Http, Stream};
use super::resolver::{Failure, Resolver};
use super::{PeerAddr, Upstream};
use crate::conf::ast::{ConfError, Span};
use crate::conf::model::LocConfSet;
use crate::conf::table::Env;
use arc_swap::ArcSwap;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// A `server name … resolve` line.
#[derive(Debug)]
pub struct Template {
    /// The name as written.
    pub host: String,
    /// `service=` as written.
    pub service: Option<String>,
    /// The name asked for: the host, or the service's SRV name.
    pub query: String,
    pub port: u16,
    /// The line's parameters.
    pub spec: PeerSpec,
}

impl Template {
    /// `service=NAME` on `host`: nginx's SRV name.
    pub fn srv_name(service: &str, host: &str) -> String {
        if service.contains('.') {
            format!("{service}.{host}")
        } else {
            format!("_{service}._tcp.{host}")
        }
    }
}

/// A peer found by resolving a template.
#[derive(Debug)]
pub struct Member {
    pub spec: PeerSpec,
    pub addr: PeerAddr,
    /// Passing active health checks.
    pub healthy: AtomicBool,
    /// Its template.
    template: usize,
    /// The host it was found for: an SRV record's target, else the name.
    server: Arc<str>,
}

/// The resolved part of an upstream block.
#[derive(Debug)]
pub struct Dynamic {
    pub templates: Vec<Template>,
    /// The block is the stream block's (a reload carries addresses over
    /// between blocks of one protocol).
    pub stream: bool,
    /// The block's own `resolver` and `resolver_timeout`.
    pub own: (Option<Arc<Resolver>>, Option<Duration>),
    /// The resolver and timeout used: the block's, else the http or stream
    /// level's (set when the load ends).
    resolver: OnceLock<(Arc<Resolver>, Duration)>,
    /// The members by slot, after the fixed peers; a slot whose peer left
    /// keeps it while attempts are under way on it.
    members: ArcSwap<Vec<Option<Arc<Member>>>>,
}

impl Dynamic {
    pub fn new(
        templates: Vec<Template>,
        stream: bool,
        own: (Option<Arc<Resolver>>, Option<Duration>),
    ) -> Self {
        Dynamic {
            templates,
            stream,
            own,
            resolver: OnceLock::new(),
            members: ArcSwap::from_pointee(Vec::new()),
        }
    }

    /// The member in slot `j` (counted after the fixed peers).
    pub fn member(&self, j: usize) -> Option<Arc<Member>> {
        self.members.load().get(j).cloned().flatten()
    }

    /// The members now: slot (after the fixed peers) and member, including
    /// those that left and still have attempts under way.
    pub fn members(&self) -> Vec<(usize, Arc<Member>)> {
        let mut out = Vec::new();
        self.each(|j, m| out.push((j, m.clone())));
        out
    }

    /// `f(slot, member)` for each member, as [`Dynamic::members`] lists them.
    pub fn each(&self, mut f: impl FnMut(usize, &Arc<Member>)) {
        for (j, m) in self.members.load().iter().enumerate() {
            if let Some(m) = m {
                f(j, m);
            }
        }
    }
}

/// An address an answer gave for a template.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Found {
    addr: SocketAddr,
    weight: u32,
    backup: bool,
    server: Arc<str>,
}

impl Found {
    fn is(&self, m: &Member) -> bool {
        m.addr == PeerAddr::Tcp(self.addr)
            && m.spec.weight == self.weight
            && m.spec.backup == self.backup
            && m.server == self.server
    }
}

/// Make template `t`'s peers in `up` the addresses `found`: those already
/// there stay as they are, the others leave, new ones take free slots.
fn apply(up: &Upstream, t: usize, found: &[Found]) {
    let Some(d) = &up.dynamic else { return };
    let base = up.peers.len();
    let Some(mut b) = up.lock_shared() else {
        return;
    };
    let mut table: Vec<Option<Arc<Member>>> = (**d.members.load()).clone();
    let mut changed = false;
    // Slots whose peer left and whose last attempt ended are free.
    for (j, m) in table.iter_mut().enumerate() {
        if m.is_some() && !b.is_live(base + j) && b.conns(base + j) == 0 {
            *m = None;
            changed = true;
        }
    }
    let mut kept = vec![false; found.len()];
    for (j, slot) in table.iter_mut().enumerate() {
        let Some(m) = slot else { continue };
        if m.template != t || !b.is_live(base + j) {
            continue;
        }
        match (0..found.len()).find(|&k| !kept[k] && found[k].is(m)) {
            Some(k) => kept[k] = true,
            None => {
                b.remove(base + j);
                super::pool::forget(&up.name, &m.addr);
                if b.conns(base + j) == 0 {
                    *slot = None;
                }
                changed = true;
            }
        }
    }
    let template = &d.templates[t];
    for (f, _) in found.iter().zip(&kept).filter(|(_, k)| !**k) {
        let spec = PeerSpec {
            name: f.addr.to_string(),
            weight: f.weight,
            backup: f.backup,
            ..template.spec.clone()
        };
        let slot = b.free_slot(base);
        b.put(slot, spec.clone());
        let m = Some(Arc::new(Member {
            spec,
            addr: PeerAddr::Tcp(f.addr),
            healthy: AtomicBool::new(true),
            template: t,
            server: f.server.clone(),
        }));
        match table.get_mut(slot - base) {
            Some(s) => *s = m,
            None => table.push(m),
        }
        changed = true;
    }
    if changed {
        d.members.store(Arc::new(table));
    }
}

/// The peers a name's addresses make for template `tpl`.
fn addresses(tpl: &Template, ips: &[std::net::IpAddr]) -> Vec<Found> {
    let server: Arc<str> = tpl.host.as_str().into();
    let mut out: Vec<Found> = Vec::with_capacity(ips.len());
    for ip in ips {
        let f = Found {
            addr: SocketAddr::new(*ip, tpl.port),
            weight: tpl.spec.weight,
            backup: tpl.spec.backup,
            server: server.clone(),
        };
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// The peers a service's records make for template `tpl`, one per record
/// and address: the lowest
/// priority value primary (backup on a `backup` line), the others backup
/// (left out on a `backup` line).
fn services(tpl: &Template, found: &[super::resolver::Service]) -> Vec<Found> {
    let min = found.iter().map(|s| s.priority).min().unwrap_or(0);
    let mut out: Vec<Found> = Vec::with_capacity(found.len());
    for s in found {
        let lower = s.priority != min;
        if tpl.spec.backup && lower {
            continue;
        }
        let f = Found {
            addr: s.addr,
            weight: if tpl.spec.weight != 1 {
                tpl.spec.weight
            } else {
                u32::from(s.weight.max(1))
            },
            backup: tpl.spec.backup || lower,
            server: s.target.clone(),
        };
        // Equal records are as many peers, as nginx makes them.
        out.push(f);
    }
    out
}

/// Resolve template `t` of `up` once and apply the answer; how long to
/// wait before the next time (`None`: the block has no such template).
async fn refresh(up: &Upstream, t: usize) -> Option<Duration> {
    let d = up.dynamic.as_ref()?;
    let (resolver, timeout) = d.resolver.get().cloned()?;
    let tpl = &d.templates[t];
    let retry = timeout.max(Duration::from_secs(1));
    let answer = match &tpl.service {
        None => resolver
            .resolve_until(&tpl.query, timeout)
            .await
            .map(|(ips, until)| (addresses(tpl, &ips), until)),
        Some(service) => resolver
            .resolve_srv(&tpl.query, timeout)
            .await
            .map(|(found, until)| {
                for (target, e) in &found.failed {
                    crate::error_log!(
                        Error,
                        "{target} could not be resolved ({e}) while resolving service {service} of {}",
                        tpl.host
                    );
                }
                (services(tpl, &found.found), until)
            }),
    };
    let (found, until) = match answer {
        Ok(a) => a,
        Err(e) => {
            match &tpl.service {
                Some(s) => crate::error_log!(
                    Error,
                    "service {s} of {} could not be resolved ({e})",
                    tpl.host
                ),
                None => crate::error_log!(Error, "{} could not be resolved ({e})", tpl.host),
            }
            if e != Failure::Code(super::dns::NXDOMAIN) {
                return Some(retry);
            }
            (Vec::new(), Instant::now() + resolver.failure_valid())
        }
    };
    apply(up, t, &found);
    Some((until.saturating_duration_since(Instant::now()) + Duration::from_secs(1)).min(timeout))
}

/// Keep template `t` of the upstream resolved while its configuration lives.
async fn keep_resolved(up: Weak<Upstream>, t: usize) {
    let mut wait = Duration::ZERO;
    loop {
        tokio::time::sleep(wait).await;
        let Some(up) = up.upgrade() else { return };
        let Some(next) = refresh(&up, t).await else {
            return;
        };
        wait = next;
    }
}

/// Resolve the templates of `blocks` in a thread of their own until their
/// configuration is dropped.
fn start(blocks: Vec<Weak<Upstream>>) {
    let spawned = std::thread::Builder::new()
        .name("resolve".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    crate::error_log!(Emerg, "cannot start the upstream resolver: {e}");
                    return;
                }
            };
            rt.block_on(async move {
                let mut tasks = tokio::task::JoinSet::new();
                for w in blocks {
                    let n = w
                        .upgrade()
                        .and_then(|u| u.dynamic.as_ref().map(|d| d.templates.len()))
                        .unwrap_or(0);
                    for t in 0..n {
                        tasks.spawn(keep_resolved(w.clone(), t));
                    }
                }
                while tasks.join_next().await.is_some() {}
            });
        });
    if let Err(e) = spawned {
        crate::error_log!(Emerg, "cannot start the upstream resolver: {e}");
    }
}

/// Blocks of the load being finished with `resolve` servers, waiting for
/// the resolver of their protocol's level (`F`: http or stream).
pub(super) struct Pending<F: Family>(Vec<(Arc<Upstream>, Span)>, PhantomData<fn() -> F>);

impl<F: Family> Pending<F> {
    pub(super) fn new(blocks: Vec<(Arc<Upstream>, Span)>) -> Self {
        Pending(blocks, PhantomData)
    }
}

/// The http level is resolved: its upstream blocks with `resolve` servers
/// start resolving ([`level`]).
pub fn http_level(http: &mut LocConfSet, env: &mut Env) -> Result<(), ConfError> {
    level::<Http>(http, env)
}

/// The stream level is resolved: its upstream blocks with `resolve`
/// servers start resolving ([`level`]).
pub fn stream_level(stream: &mut LocConfSet, env: &mut Env) -> Result<(), ConfError> {
    level::<Stream>(stream, env)
}

/// The `F` level (`conf`) is resolved: give each of its blocks with
/// `resolve` servers its resolver (refused without one: the block's, else
/// the level's), the addresses the live configuration's block has for its
/// names, and start resolving them.
fn level<F: Family>(conf: &mut LocConfSet, env: &mut Env) -> Result<(), ConfError> {
    let Some(Pending(blocks, _)) = env.ext.remove::<Pending<F>>() else {
        return Ok(());
    };
    let level = conf.get::<super::resolver::ResolverConfSet>();
    let level_resolver = level.and_then(|r| r.resolver.clone().flatten());
    let level_timeout = level.and_then(|r| r.timeout);
    let mut weak = Vec::new();
    for (u, span) in &blocks {
        let Some(d) = &u.dynamic else { continue };
        let Some(resolver) = d.own.0.clone().or_else(|| level_resolver.clone()) else {
            return Err(ConfError::new(
                format!(
                    "no resolver configured for resolving names at run time in upstream \"{}\"",
                    u.name
                ),
                span,
            ));
        };
        let timeout = d.own.1.or(level_timeout).unwrap_or(Duration::from_secs(30));
        let _ = d.resolver.set((resolver, timeout));
        let same = |o: &Upstream| o.dynamic.as_ref().is_some_and(|od| od.stream == F::STREAM);
        if let Some(old) = super::stats::previous(u, same) {
            preresolve(u, &old);
        }
        weak.push(Arc::downgrade(u));
    }
    if !weak.is_empty() {
        start(weak);
    }
    Ok(())
}

/// Give `new` the addresses `old` (the live block of the same name) has
/// for each template of the same name, service and backup flag, when both
/// are in the same zone.
fn preresolve(new: &Upstream, old: &Upstream) {
    let (Some(nd), Some(od)) = (&new.dynamic, &old.dynamic) else {
        return;
    };
    if new.zone.is_none() || new.zone != old.zone {
        return;
    }
    let live: Vec<(usize, Arc<Member>)> = {
        let Some(b) = old.lock_shared() else { return };
        let base = old.peers.len();
        od.members()
            .into_iter()
            .filter(|(j, _)| b.is_live(base + j))
            .collect()
    };
    for (t, tpl) in nd.templates.iter().enumerate() {
        let Some(ot) = od.templates.iter().position(|o| {
            o.host.eq_ignore_ascii_case(&tpl.host)
                && o.service == tpl.service
                && o.spec.backup == tpl.spec.backup
        }) else {
            continue;
        };
        let found: Vec<Found> = live
            .iter()
            .filter(|(_, m)| m.template == ot)
            .filter_map(|(_, m)| {
                let PeerAddr::Tcp(a) = m.addr else {
                    return None;
                };
                let srv = tpl.service.is_some();
                Some(Found {
                    addr: if srv {
                        a
                    } else {
                        SocketAddr::new(a.ip(), tpl.port)
                    },
                    weight: if srv && tpl.spec.weight == 1 {
                        m.spec.weight
                    } else {
                        tpl.spec.weight
                    },
                    backup: m.spec.backup,
                    server: m.server.clone(),
                })
            })
            .collect();
        apply(new, t, &found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::balance::Tried;
    use crate::upstream::resolver::Service;

    fn template(service: Option<&str>, backup: bool, weight: u32) -> Template {
        Template {
            host: "example.net".into(),
            service: service.map(str::to_string),
            query: "example.net".into(),
            port: 8080,
            spec: PeerSpec {
                weight,
                backup,
                max_fails: 0,
                ..PeerSpec::new("example.net:8080")
            },
        }
    }

    fn upstream(templates: Vec<Template>) -> Upstream {
        let mut u =
            Upstream::round_robin("u", vec![PeerAddr::Tcp("127.0.0.9:80".parse().unwrap())]);
        u.zone = Some("z".into());
        u.dynamic = Some(Dynamic::new(templates, false, (None, None)));
        u.share_balancer();
        u
    }

    fn ips(list: &[&str]) -> Vec<std::net::IpAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    fn names(u: &Upstream) -> Vec<String> {
        let d = u.dynamic.as_ref().unwrap();
        let b = u.lock_shared().unwrap();
        d.members()
            .into_iter()
            .filter(|(j, _)| b.is_live(u.peers.len() + j))
            .map(|(_, m)| m.spec.name.clone())
            .collect()
    }

    #[test]
    fn addresses_come_and_go_and_those_that_stay_keep_their_slot() {
        let u = upstream(vec![template(None, false, 3)]);
        let t = &u.dynamic.as_ref().unwrap().templates[0];
        apply(&u, 0, &addresses(t, &ips(&["127.0.0.1", "127.0.0.2"])));
        assert_eq!(names(&u), ["127.0.0.1:8080", "127.0.0.2:8080"]);
        assert_eq!(u.peer_count(), 3);
        // An attempt under way on 127.0.0.2 (slot 2).
        let mut tried = Tried::default();
        tried.mark(0);
        tried.mark(1);
        assert_eq!(u.pick(b"", &mut tried), Some(2));
        assert_eq!(u.addr_name(2), "127.0.0.2:8080");
        // .1 stays in slot 1, .2 leaves, .3 comes: the slot of .2 is not
        // reused while its attempt is under way.
        apply(&u, 0, &addresses(t, &ips(&["127.0.0.3", "127.0.0.1"])));
        assert_eq!(names(&u), ["127.0.0.1:8080", "127.0.0.3:8080"]);
        assert_eq!(u.addr_name(1), "127.0.0.1:8080");
        assert_eq!(u.addr_name(2), "127.0.0.2:8080");
        assert_eq!(u.addr_name(3), "127.0.0.3:8080");
        assert_eq!(u.peer_count(), 3);
        u.finished(2, true);
        // Weight and parameters from the line.
        assert_eq!(u.lock_shared().unwrap().spec(3).weight, 3);
        // Once over, the next change frees it; a new address takes it.
        apply(
            &u,
            0,
            &addresses(t, &ips(&["127.0.0.1", "127.0.0.3", "::1"])),
        );
        assert_eq!(u.addr_name(2), "[::1]:8080");
        // Nothing left: only the fixed peer.
        apply(&u, 0, &[]);
        assert_eq!(u.peer_count(), 1);
        let mut tried = Tried::default();
        assert_eq!(u.pick(b"", &mut tried), Some(0));
        assert_eq!(u.pick(b"", &mut tried), None);
    }

    #[test]
    fn srv_priorities_make_backups_and_weights() {
        let svc = |a: &str, priority, weight| Service {
            addr: a.parse().unwrap(),
            priority,
            weight,
            target: "t.example.net".into(),
        };
        let found = [
            svc("127.0.0.1:81", 10, 5),
            svc("127.0.0.2:82", 20, 0),
            svc("127.0.0.3:83", 10, 1),
        ];
        let primary = services(&template(Some("http"), false, 1), &found);
        let view: Vec<(String, u32, bool)> = primary
            .iter()
            .map(|f| (f.addr.to_string(), f.weight, f.backup))
            .collect();
        assert_eq!(
            view,
            [
                ("127.0.0.1:81".into(), 5, false),
                ("127.0.0.2:82".into(), 1, true),
                ("127.0.0.3:83".into(), 1, false)
            ]
        );
        // A weight on the line wins; a backup line keeps the lowest
        // priority value only, as backups.
        // Equal records make as many peers.
        let twice = services(
            &template(Some("http"), false, 1),
            &[found[0].clone(), found[0].clone()],
        );
        assert_eq!(twice.len(), 2);
        let u = upstream(vec![template(Some("http"), false, 1)]);
        apply(&u, 0, &twice);
        assert_eq!(names(&u), ["127.0.0.1:81", "127.0.0.1:81"]);
        apply(&u, 0, &twice[..1]);
        assert_eq!(names(&u), ["127.0.0.1:81"]);
        let backup = services(&template(Some("http"), true, 2), &found);
        assert_eq!(backup.len(), 2);
        assert!(backup.iter().all(|f| f.backup && f.weight == 2));
        assert_eq!(
            Template::srv_name("http", "example.net"),
            "_http._tcp.example.net"
        );
        assert_eq!(
            Template::srv_name("_http._tcp", "example.net"),
            "_http._tcp.example.net"
        );
        // Backups serve once the primaries cannot.
        let u = upstream(vec![template(Some("http"), false, 1)]);
        apply(&u, 0, &primary);
        let mut tried = Tried::default();
        tried.mark(0);
        let first = u.pick(b"", &mut tried).unwrap();
        let second = u.pick(b"", &mut tried).unwrap();
        let third = u.pick(b"", &mut tried).unwrap();
        assert_eq!(u.addr_name(third), "127.0.0.2:82");
        assert!(
            [first, second]
                .iter()
                .all(|&p| u.addr_name(p) != "127.0.0.2:82")
        );
    }

    #[test]
    fn a_reload_keeps_the_addresses_with_the_new_port() {
        let old = upstream(vec![template(None, false, 1)]);
        let t = &old.dynamic.as_ref().unwrap().templates[0];
        apply(&old, 0, &addresses(t, &ips(&["127.0.0.201"])));
        let mut tpl = template(None, false, 1);
        tpl.port = 8082;
        let new = upstream(vec![tpl]);
        preresolve(&new, &old);
        assert_eq!(names(&new), ["127.0.0.201:8082"]);
        // Another zone: nothing carried over.
        let mut other = upstream(vec![template(None, false, 1)]);
        other.zone = Some("other".into());
        preresolve(&other, &old);
        assert!(names(&other).is_empty());
    }
}
