//! `limit_req`: nginx's leaky bucket per key, in zones shared by all workers.
//!
//! A key's state is its excess (requests ahead of the rate, in
//! milli-requests) and the time it was last updated. Each request drains
//! `rate × elapsed` from the excess and adds one request (1000); a result
//! above `burst` is refused, anything else is recorded. Excess above the
//! limit's `delay` (0 unless `delay=`/`nodelay`) makes the request wait
//! `(excess − delay) / rate`: an async sleep, so the worker serves others.
//!
//! Several limits apply in order, as nginx's: each one but the last is only
//! checked (its state pinned against eviction); the last is checked and
//! recorded; if none refused, the earlier ones are recorded too, last to
//! first, and the longest delay any asks for is the one waited. A request
//! goes through this once: once `$limit_req_status` is set, later locations
//! (internal redirects, error pages) skip it.

pub mod conf;

use crate::core::errlog::Level;
use crate::core::message::response::Response;
use crate::core::module::{Hooks, Module, Ordered, Phase, VarDef};
use crate::core::request::{Request, RequestBody};
use crate::modules::zone::{self, Node, Status, Table};
use conf::ReqLimit;
use std::rc::Rc;

/// A key's state in a `limit_req_zone`.
#[derive(Debug)]
pub struct ReqNode {
    /// Requests ahead of the rate, in milli-requests.
    excess: u64,
    /// When `excess` was last recorded (see [`zone::now_ms`]); 0 until the
    /// first request is recorded.
    last: u64,
    /// Requests between checking this state and recording it (several
    /// limits): it is not evicted meanwhile.
    pins: u32,
}

impl Node for ReqNode {
    /// rbtree node to `color` (32) + `ngx_http_limit_req_node_t` to its
    /// key (48).
    const BASE: usize = 80;
    const DIRECTIVE: &'static str = "limit_req_zone";
    /// The rate, in milli-requests per second.
    type Conf = u64;
}

/// nginx's `ms` since `last`: a clock a little behind another worker's
/// counts 0, far behind counts 1.
fn elapsed(now: u64, last: u64) -> u64 {
    match now as i64 - last as i64 {
        ms if ms < -60_000 => 1,
        ms if ms < 0 => 0,
        ms => ms as u64,
    }
}

/// The excess after one more request `ms` after the last recorded one.
fn excess_after(excess: u64, rate: u64, ms: u64) -> u64 {
    (excess + 1000).saturating_sub(rate.saturating_mul(ms) / 1000)
}

/// How long excess above `delay` must wait at `rate`, in ms.
fn delay_ms(excess: u64, delay: u64, rate: u64) -> u64 {
    match excess.checked_sub(delay) {
        Some(over) if over > 0 => over.saturating_mul(1000) / rate,
        _ => 0,
    }
}

/// What a lookup in one zone found.
#[derive(Debug, PartialEq, Eq)]
enum Lookup {
    /// Beyond burst, with this excess.
    Busy(u64),
    /// Within burst, recorded, with this excess (the last limit).
    Ok(u64),
    /// Within burst, checked and pinned (an earlier limit).
    Again,
    /// The zone is full of states that may not go.
    Full,
}

/// Check one more request for `key`; record it when `account` (the last
/// limit), pin the state otherwise.
fn lookup(
    t: &mut Table<ReqNode>,
    key: &[u8],
    rate: u64,
    burst: u64,
    now: u64,
    account: bool,
) -> Lookup {
    if let Some(n) = t.get(key) {
        let ms = elapsed(now, n.last);
        let excess = excess_after(n.excess, rate, ms);
        if excess > burst {
            return Lookup::Busy(excess);
        }
        if !account {
            n.pins += 1;
            return Lookup::Again;
        }
        n.excess = excess;
        if ms != 0 {
            n.last = now;
        }
        return Lookup::Ok(excess);
    }
    // Room first: up to two old states idle a minute with nothing left.
    t.expire(2, |n| {
        let ms = now.abs_diff(n.last);
        n.pins == 0 && ms >= 60_000 && n.excess <= rate.saturating_mul(ms) / 1000
    });
    let node = ReqNode {
        excess: 0,
        last: if account { now } else { 0 },
        pins: u32::from(!account),
    };
    match t.insert(key, node, |n| n.pins == 0) {
        None => Lookup::Full,
        Some(_) if account => Lookup::Ok(0),
        Some(_) => Lookup::Again,
    }
}

/// Record a pinned state (an earlier limit, once the last passed); its excess.
fn account(t: &mut Table<ReqNode>, key: &[u8], rate: u64, now: u64) -> u64 {
    let Some(n) = t.get(key) else { return 0 };
    let ms = elapsed(now, n.last);
    n.excess = excess_after(n.excess, rate, ms);
    if ms != 0 {
        n.last = now;
    }
    n.pins -= 1;
    n.excess
}

fn unpin(t: &mut Table<ReqNode>, key: &[u8]) {
    if let Some(n) = t.get(key) {
        n.pins -= 1;
    }
}

/// The decision for one request.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// No limit had a key: not counted (`$limit_req_status` stays empty).
    Declined,
    Passed,
    /// Wait `ms`; `excess` in the zone of limit `at` asked for it.
    Delay {
        ms: u64,
        excess: u64,
        at: usize,
    },
    /// Refused by limit `at`; `excess` when over burst, `None` when its zone is full.
    Busy {
        excess: Option<u64>,
        at: usize,
    },
}

/// Run the limits for the rendered keys (`None`: not counted) at `now`.
fn decide(limits: &[ReqLimit], keys: &[Option<Vec<u8>>], now: u64) -> Verdict {
    let mut pinned: Vec<usize> = Vec::new();
    let mut found = None;
    for (i, (limit, key)) in limits.iter().zip(keys).enumerate() {
        let Some(key) = key else { continue };
        let zone = limit.zone.get();
        let last = i + 1 == limits.len();
        let r = lookup(&mut zone.lock(), key, zone.conf, limit.burst, now, last);
        match r {
            Lookup::Again => pinned.push(i),
            Lookup::Ok(excess) => found = Some((excess, i)),
            Lookup::Busy(_) | Lookup::Full => {
                for &p in &pinned {
                    let z = limits[p].zone.get();
                    unpin(&mut z.lock(), keys[p].as_deref().unwrap_or_default());
                }
                let excess = match r {
                    Lookup::Busy(e) => Some(e),
                    _ => None,
                };
                return Verdict::Busy { excess, at: i };
            }
        }
    }
    if found.is_none() && pinned.is_empty() {
        return Verdict::Declined;
    }
    // The last limit's excess (0 when it had no key), then the others'.
    let (mut excess, mut at) = found.unwrap_or((0, limits.len() - 1));
    let mut max = delay_ms(excess, limits[at].delay, limits[at].zone.get().conf);
    for &i in pinned.iter().rev() {
        let zone = limits[i].zone.get();
        let e = account(
            &mut zone.lock(),
            keys[i].as_deref().unwrap_or_default(),
            zone.conf,
            now,
        );
        let d = delay_ms(e, limits[i].delay, zone.conf);
        if d > max {
            (max, excess, at) = (d, e, i);
        }
    }
    match max {
        0 => Verdict::Passed,
        ms => Verdict::Delay { ms, excess, at },
    }
}

/// The level delays are logged at: one below `limit_req_log_level`.
fn delay_level(l: Level) -> Level {
    match l {
        Level::Error => Level::Warn,
        Level::Warn => Level::Notice,
        _ => Level::Info,
    }
}

/// What limit_req decided for a request (`$limit_req_status`); once
/// decided, later locations do not apply limit_req again.
struct Decided(Status);

/// Apply the location's `limit_req`s: `Some` is the rejection. A delayed
/// request returns after its delay; `body` is watched meanwhile, and a client
/// that leaves ends the request at once with 499 (no answer), as nginx does.
pub async fn apply(req: &mut Request<'_>, body: &mut dyn RequestBody) -> Option<Response> {
    let loc: &crate::conf::model::LocConf = req.conf;
    let conf = loc.get::<conf::LimitReqConf>();
    if conf.limits.is_empty() || req.state.ext.get::<Decided>().is_some() {
        return None;
    }
    let keys: Vec<Option<Vec<u8>>> = conf
        .limits
        .iter()
        .map(|l| {
            let zone = l.zone.get();
            let mut key = Vec::new();
            zone.key.render(&*req, &mut key);
            if key.len() > 65535 {
                crate::error_log!(
                    Error,
                    "the value of the \"{}\" key is more than 65535 bytes: \"{}\"",
                    zone.key.source(),
                    String::from_utf8_lossy(&key)
                );
                return None;
            }
            (!key.is_empty()).then_some(key)
        })
        .collect();
    let dry = if conf.dry_run { ", dry run" } else { "" };
    let (status, wait) = match decide(&conf.limits, &keys, zone::now_ms()) {
        Verdict::Declined => return None,
        Verdict::Passed => (Status::Passed, 0),
        Verdict::Busy { excess, at } => {
            let name = &conf.limits[at].zone.get().name;
            match excess {
                Some(e) => zone::log(
                    conf.log_level,
                    req,
                    format_args!(
                        "limiting requests{dry}, excess: {}.{:03} by zone \"{name}\"",
                        e / 1000,
                        e % 1000
                    ),
                ),
                None => crate::error_log!(
                    Alert,
                    "could not allocate node in limit_req_zone \"{name}\""
                ),
            }
            let status = Status::rejected(conf.dry_run);
            req.state.ext.insert(Rc::new(Decided(status)));
            return (!conf.dry_run).then(|| req.error(conf.status));
        }
        Verdict::Delay { ms, excess, at } => {
            zone::log(
                delay_level(conf.log_level),
                req,
                format_args!(
                    "delaying request{dry}, excess: {}.{:03}, by zone \"{}\"",
                    excess / 1000,
                    excess % 1000,
                    conf.limits[at].zone.get().name
                ),
            );
            match conf.dry_run {
                true => (Status::DelayedDryRun, 0),
                false => (Status::Delayed, ms),
            }
        }
    };
    req.state.ext.insert(Rc::new(Decided(status)));
    if wait > 0 {
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => {}
            _ = body.gone() => {
                crate::error_log!(
                    Info,
                    "client prematurely closed connection while delaying request"
                );
                return Some(Response::new(499));
            }
        }
    }
    None
}

/// `limit_req` and `$limit_req_status`.
pub static MODULE: Module = Module {
    name: "limit_req",
    nginx_default: &["http_limit_req_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::LimitReqConf::KIND),
    variables: &[VarDef::name("limit_req_status", |req, _, out| {
        if let Some(Decided(s)) = req.state.ext.get::<Decided>().as_deref() {
            out.extend_from_slice(s.as_str().as_bytes());
        }
    })],
    hooks: Hooks {
        access: Some(Ordered {
            order: 10,
            run: |req, body| match req.state.ext.get::<Decided>() {
                Some(_) => Phase::Next,
                None => Phase::Wait(Box::pin(apply(req, body))),
            },
            active: |c| !c.get::<conf::LimitReqConf>().limits.is_empty(),
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::ast::Directive;
    use crate::conf::table::Env;

    /// Zones and limits for `decide`, from configuration lines.
    fn limits(zones: &[&str], lines: &[&[&str]]) -> (Env, Vec<ReqLimit>) {
        let dir = |name: &str, args: &[&str]| Directive::test(name, args, 1);
        let mut env = Env::new(Default::default(), crate::modules::MODULES);
        for z in zones {
            let args: Vec<&str> = z.split(' ').collect();
            conf::limit_req_zone(&dir("limit_req_zone", &args), &mut env).unwrap();
        }
        let out = lines
            .iter()
            .map(|l| conf::limit_req(&dir("limit_req", l), &mut env).unwrap())
            .collect();
        (env, out)
    }

    const T0: u64 = 100_000_000;

    fn key(k: &str) -> Vec<Option<Vec<u8>>> {
        vec![Some(k.as_bytes().to_vec())]
    }

    #[test]
    fn arithmetic() {
        assert_eq!(elapsed(T0 + 250, T0), 250);
        assert_eq!(elapsed(T0 - 10, T0), 0);
        assert_eq!(elapsed(T0 - 70_000, T0), 1);
        assert_eq!(excess_after(0, 1000, 0), 1000);
        assert_eq!(excess_after(1000, 1000, 500), 1500);
        assert_eq!(excess_after(1000, 1000, 5000), 0);
        assert_eq!(excess_after(0, 16, u64::MAX), 0);
        assert_eq!(delay_ms(3000, 0, 2000), 1500);
        assert_eq!(delay_ms(3000, 3000, 2000), 0);
        assert_eq!(delay_ms(3000, u64::MAX, 2000), 0);
    }

    #[test]
    fn rate_without_burst() {
        let (_env, l) = limits(&["$uri zone=lr_t1:32k rate=2r/s"], &[&["zone=lr_t1"]]);
        let k = key("a");
        // The first passes and sets the clock; the next too soon is refused.
        assert_eq!(decide(&l, &k, T0), Verdict::Passed);
        assert_eq!(
            decide(&l, &k, T0 + 100),
            Verdict::Busy {
                excess: Some(800),
                at: 0
            }
        );
        // A refused request is not recorded: after 500 ms (one request at
        // 2r/s) the next passes.
        assert_eq!(decide(&l, &k, T0 + 500), Verdict::Passed);
        assert_eq!(
            decide(&l, &k, T0 + 900),
            Verdict::Busy {
                excess: Some(200),
                at: 0
            }
        );
        // Another key has its own bucket; an empty key is not counted.
        assert_eq!(decide(&l, &key("b"), T0 + 900), Verdict::Passed);
        assert_eq!(decide(&l, &[None], T0 + 900), Verdict::Declined);
    }

    #[test]
    fn burst_delays_then_refuses() {
        let (_env, l) = limits(
            &["$uri zone=lr_t2:32k rate=10r/s"],
            &[&["zone=lr_t2", "burst=3"]],
        );
        let k = key("a");
        assert_eq!(decide(&l, &k, T0), Verdict::Passed);
        // Each excess request waits for its turn at 10r/s: 100, 200, 300 ms.
        for n in 1..=3 {
            assert_eq!(
                decide(&l, &k, T0),
                Verdict::Delay {
                    ms: 100 * n,
                    excess: 1000 * n,
                    at: 0
                }
            );
        }
        assert_eq!(
            decide(&l, &k, T0),
            Verdict::Busy {
                excess: Some(4000),
                at: 0
            }
        );
        // 150 ms later 1.5 requests drained: one more fits.
        assert_eq!(
            decide(&l, &k, T0 + 150),
            Verdict::Delay {
                ms: 250,
                excess: 2500,
                at: 0
            }
        );
    }

    #[test]
    fn nodelay_and_delay() {
        let (_env, l) = limits(
            &[
                "$uri zone=lr_t3:32k rate=1r/s",
                "$uri zone=lr_t4:32k rate=1r/s",
            ],
            &[&["zone=lr_t3", "burst=2", "nodelay"]],
        );
        let k = key("a");
        for _ in 0..3 {
            assert_eq!(decide(&l, &k, T0), Verdict::Passed);
        }
        assert_eq!(
            decide(&l, &k, T0),
            Verdict::Busy {
                excess: Some(3000),
                at: 0
            }
        );

        let (_env, l) = limits(
            &["$uri zone=lr_t5:32k rate=1r/s"],
            &[&["zone=lr_t5", "burst=4", "delay=2"]],
        );
        let got: Vec<Verdict> = (0..6).map(|_| decide(&l, &k, T0)).collect();
        assert_eq!(
            got,
            [
                Verdict::Passed,
                Verdict::Passed,
                Verdict::Passed,
                Verdict::Delay {
                    ms: 1000,
                    excess: 3000,
                    at: 0
                },
                Verdict::Delay {
                    ms: 2000,
                    excess: 4000,
                    at: 0
                },
                Verdict::Busy {
                    excess: Some(5000),
                    at: 0
                },
            ]
        );
    }

    #[test]
    fn several_limits() {
        let (_env, l) = limits(
            &[
                "$uri zone=lr_t6:32k rate=1r/s",
                "$uri zone=lr_t7:32k rate=10r/s",
            ],
            &[&["zone=lr_t6", "burst=5"], &["zone=lr_t7", "burst=1"]],
        );
        let two = |a: &str, b: &str| vec![Some(a.as_bytes().to_vec()), Some(b.as_bytes().to_vec())];
        assert_eq!(decide(&l, &two("a", "a"), T0), Verdict::Passed);
        // The slow zone asks for 1 s, the fast one for 100 ms: 1 s wins.
        assert_eq!(
            decide(&l, &two("a", "a"), T0),
            Verdict::Delay {
                ms: 1000,
                excess: 1000,
                at: 0
            }
        );
        // The fast zone refuses: the slow one is left as it was.
        assert_eq!(
            decide(&l, &two("a", "a"), T0),
            Verdict::Busy {
                excess: Some(2000),
                at: 1
            }
        );
        assert_eq!(l[0].zone.get().lock().get(b"a").unwrap().excess, 1000);
        assert_eq!(l[0].zone.get().lock().get(b"a").unwrap().pins, 0);
        // The first refuses: the second is not even looked at.
        let (_env2, l2) = limits(
            &[
                "$uri zone=lr_t8:32k rate=1r/s",
                "$uri zone=lr_t9:32k rate=1r/s",
            ],
            &[&["zone=lr_t8"], &["zone=lr_t9", "burst=9"]],
        );
        assert_eq!(decide(&l2, &two("x", "x"), T0), Verdict::Passed);
        assert_eq!(
            decide(&l2, &two("x", "x"), T0),
            Verdict::Busy {
                excess: Some(1000),
                at: 0
            }
        );
        assert_eq!(l2[1].zone.get().lock().get(b"x").unwrap().excess, 0);
        // The last limit without a key: the others still count.
        let first_only = vec![Some(b"y".to_vec()), None];
        assert_eq!(decide(&l2, &first_only, T0), Verdict::Passed);
        assert_eq!(
            decide(&l2, &first_only, T0),
            Verdict::Busy {
                excess: Some(1000),
                at: 0
            }
        );
    }

    #[test]
    fn full_zone_drops_the_oldest_state() {
        // 32k of 128-byte states: 256 keys.
        let (_env, l) = limits(&["$uri zone=lr_t10:32k rate=1r/m"], &[&["zone=lr_t10"]]);
        for i in 0..256u32 {
            assert_eq!(decide(&l, &key(&i.to_string()), T0), Verdict::Passed);
        }
        assert_eq!(
            decide(&l, &key("0"), T0),
            Verdict::Busy {
                excess: Some(1000),
                at: 0
            }
        );
        // Key "1" is now the oldest; a new key pushes it out.
        assert_eq!(decide(&l, &key("new"), T0), Verdict::Passed);
        assert_eq!(l[0].zone.get().lock().len(), 256);
        assert_eq!(
            decide(&l, &key("1"), T0),
            Verdict::Passed,
            "forgotten, so passes again"
        );
        // States idle a minute with nothing left go first, two at a time.
        let (_env, l) = limits(&["$uri zone=lr_t11:32k rate=1r/s"], &[&["zone=lr_t11"]]);
        for i in 0..10u32 {
            decide(&l, &key(&i.to_string()), T0);
        }
        decide(&l, &key("late"), T0 + 60_000);
        assert_eq!(l[0].zone.get().lock().len(), 9);
    }

    #[test]
    fn pinned_states_are_not_evicted() {
        let (_env, l) = limits(&["$uri zone=lr_t12:32k rate=1r/s"], &[&["zone=lr_t12"]]);
        let zone = l[0].zone.get();
        let mut t = zone.lock();
        assert_eq!(lookup(&mut t, b"held", 1000, 0, T0, false), Lookup::Again);
        for i in 0..255u32 {
            assert_eq!(
                lookup(&mut t, i.to_string().as_bytes(), 1000, 0, T0, true),
                Lookup::Ok(0)
            );
        }
        // "held" is the oldest but pinned: nothing can go.
        assert_eq!(lookup(&mut t, b"more", 1000, 0, T0, true), Lookup::Full);
        assert_eq!(account(&mut t, b"held", 1000, T0), 0);
        assert_eq!(lookup(&mut t, b"more", 1000, 0, T0, true), Lookup::Ok(0));
    }
}
