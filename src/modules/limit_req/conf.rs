//! Directives of request limiting: `limit_req_zone`, `limit_req`,
//! `limit_req_status`, `limit_req_log_level`, `limit_req_dry_run`.

use super::ReqNode;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, Env};
use crate::conf::values::{bad_arg, option, set_once};
use crate::core::errlog::Level;
use crate::modules::zone::{self, ZoneRef};
use crate::settings;
use std::sync::Arc;

/// One `limit_req zone=NAME [burst=N] [nodelay | delay=N]`; counts are in
/// milli-requests, as nginx keeps them.
#[derive(Clone, Debug)]
pub struct ReqLimit {
    pub zone: ZoneRef<ReqNode>,
    pub burst: u64,
    /// Excess served without delay; `u64::MAX` for `nodelay`.
    pub delay: u64,
}

settings! {
    /// Request limiting of one level. `limit_req` is one list set as a
    /// whole: a level with any drops the inherited ones.
    pub struct LimitReqConf / LimitReqConfSet {
        pub limits: Arc<[ReqLimit]> = Arc::from(Vec::new()),
        pub status: u16 = 503,
        pub log_level: Level = Level::Error,
        pub dry_run: bool = false,
    }
}

/// `rate=Nr/s` or `rate=Nr/m` (a bare `N` is per second): milli-requests
/// per second.
fn parse_rate(d: &Directive, arg: &str) -> Result<u64, ConfError> {
    let v = option(arg, "rate").unwrap_or_default();
    let (n, scale) = match (v.strip_suffix("r/s"), v.strip_suffix("r/m")) {
        (Some(n), _) => (n, 1),
        (_, Some(n)) => (n, 60),
        _ => (v, 1),
    };
    match n.parse::<u64>() {
        Ok(r) if r > 0 && n.bytes().all(|b| b.is_ascii_digit()) && r <= u64::MAX / 1000 => {
            Ok(r * 1000 / scale)
        }
        _ => Err(ConfError::new(format!("invalid rate \"{arg}\""), &d.span)),
    }
}

pub(super) fn limit_req_zone(d: &Directive, env: &mut Env) -> Result<(), ConfError> {
    let mut zone = None;
    let mut rate = 1000;
    for a in d.arg_strs().skip(1) {
        if a.starts_with("zone=") {
            zone = Some(zone::parse_zone(d, a)?);
        } else if a.starts_with("rate=") {
            rate = parse_rate(d, a)?;
        } else if a == "sync" {
            return Err(ConfError::new(
                "\"sync\" of \"limit_req_zone\" needs zone synchronization between servers (an NGINX Plus feature), which vireo does not have",
                &d.span,
            ));
        } else {
            return Err(bad_arg(d, a));
        }
    }
    let zone = zone.ok_or_else(|| {
        ConfError::new("\"limit_req_zone\" must have \"zone\" parameter", &d.span)
    })?;
    let key = zone::parse_key(d, &mut env.vars)?;
    env.ext
        .entry::<crate::modules::zone::Declared>()
        .declare::<ReqNode>(d, zone, key, rate)
}

pub(super) fn limit_req(d: &Directive, env: &mut Env) -> Result<ReqLimit, ConfError> {
    let count = |a: &str, what: &str| -> Result<u64, ConfError> {
        match a.parse::<u64>() {
            Ok(n) if n > 0 && n < u64::MAX / 1000 => Ok(n * 1000),
            _ => Err(ConfError::new(
                format!("invalid {what} value \"{what}={a}\""),
                &d.span,
            )),
        }
    };
    let mut zone = None;
    let mut burst = 0;
    let mut delay = 0;
    for a in d.arg_strs() {
        if let Some(name) = option(a, "zone") {
            zone = Some(
                env.ext
                    .entry::<crate::modules::zone::Declared>()
                    .reference::<ReqNode>(name, d)?,
            );
        } else if let Some(n) = option(a, "burst") {
            burst = count(n, "burst")?;
        } else if let Some(n) = option(a, "delay") {
            delay = count(n, "delay")?;
        } else if a == "nodelay" {
            delay = u64::MAX;
        } else {
            return Err(bad_arg(d, a));
        }
    }
    let zone =
        zone.ok_or_else(|| ConfError::new("\"limit_req\" must have \"zone\" parameter", &d.span))?;
    Ok(ReqLimit { zone, burst, delay })
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "limit_req_zone",
        ignored: false,
        ctx: Ctx::HTTP,
        arity: Arity::args(3, 4),
        set: |_, d, env| limit_req_zone(d, env),
        syntax: "limit_req_zone key zone=name:size rate=rate;",
        default: "—",
        doc: "Declares a zone shared by all workers that keeps, per value of `key` (text with variables, usually `$binary_remote_addr`), how far requests run ahead of `rate` (`Nr/s` or `Nr/m`). A request whose key comes out empty is not counted. `size` (at least 32k) bounds the states kept: one takes 128 bytes for a key of up to 48 bytes (twice that for longer keys), so `1m` keeps 8192; when the zone is full the least recently used state is dropped. A reload keeps the zone's states when its name and size stay the same (the rate may change; changing the key then is refused, as nginx does). `sync` (NGINX Plus) is refused.\n\n```nginx\nlimit_req_zone $binary_remote_addr zone=one:10m rate=10r/s;\nlimit_req_zone $http_x_api_key zone=keys:1m rate=60r/m;\n```",
    },
    Def {
        name: "limit_req",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 3),
        set: |s, d, env| {
            let l = limit_req(d, env)?;
            let slot = &mut s.loc().get_mut::<LimitReqConfSet>().limits;
            if slot
                .as_deref()
                .is_some_and(|ls| ls.iter().any(|o| o.zone == l.zone))
            {
                return Err(ConfError::new(
                    "\"limit_req\" directive is duplicate",
                    &d.span,
                ));
            }
            crate::conf::values::push(slot, l);
            Ok(())
        },
        syntax: "limit_req zone=name [burst=number] [nodelay | delay=number];",
        default: "—",
        doc: "Limits the rate of requests per key of the zone, with nginx's leaky bucket: a request beyond the rate is excess; up to `burst` excess requests wait (the request is delayed, the worker is not) so that they go out at the rate, and a request beyond `burst` is answered with `limit_req_status` (503). `nodelay` serves the excess within `burst` at once; `delay=N` serves the first N at once and delays the rest. Several `limit_req` may stand at one level (each zone once): all apply, a request rejected by any is rejected, and it waits the longest delay they ask for. A level with any `limit_req` inherits none. Applied once per request, in the location the request is in when it first reaches one (internal redirects do not count it again). `$limit_req_status` tells what happened: `PASSED`, `DELAYED`, `REJECTED`, `DELAYED_DRY_RUN`, `REJECTED_DRY_RUN`.\n\n```nginx\nlimit_req_zone $binary_remote_addr zone=one:10m rate=10r/s;\nlocation /api/ {\n    limit_req zone=one burst=20 nodelay;\n}\nlocation /login {\n    limit_req zone=one burst=5 delay=2;\n}\n```",
    },
    Def {
        name: "limit_req_status",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            let v = zone::parse_status(d)?;
            set_once(&mut s.loc().get_mut::<LimitReqConfSet>().status, v, d)
        },
        syntax: "limit_req_status code;",
        default: "503",
        doc: "The status of requests `limit_req` rejects (400 to 599); `error_page` applies to it.\n\n```nginx\nlimit_req_status 429;\n```",
    },
    Def {
        name: "limit_req_log_level",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            let v = zone::parse_log_level(d)?;
            set_once(&mut s.loc().get_mut::<LimitReqConfSet>().log_level, v, d)
        },
        syntax: "limit_req_log_level info | notice | warn | error;",
        default: "error",
        doc: "The error-log level of `limiting requests, excess: … by zone \"…\"` lines for rejected requests; delayed requests are logged (`delaying request, excess: …, by zone \"…\"`) one level lower (`warn` for `error`, `info` for `info`).\n\n```nginx\nlimit_req_log_level warn;\n```",
    },
    Def {
        name: "limit_req_dry_run",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            let v = zone::parse_dry_run(d)?;
            set_once(&mut s.loc().get_mut::<LimitReqConfSet>().dry_run, v, d)
        },
        syntax: "limit_req_dry_run on | off;",
        default: "off",
        doc: "Counts and logs (with `, dry run`) as `limit_req` would, but neither delays nor rejects; `$limit_req_status` says `DELAYED_DRY_RUN` or `REJECTED_DRY_RUN`. A rejected request does not count against the zone.\n\n```nginx\nlimit_req_dry_run on;\n```",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str, args: &[&str]) -> Directive {
        Directive::test(name, args, 2)
    }

    #[test]
    fn rates() {
        let r = |a: &str| parse_rate(&dir("limit_req_zone", &[]), a);
        assert_eq!(r("rate=1r/s").unwrap(), 1000);
        assert_eq!(r("rate=10r/s").unwrap(), 10_000);
        assert_eq!(r("rate=30r/m").unwrap(), 500);
        assert_eq!(r("rate=1r/m").unwrap(), 16);
        assert_eq!(r("rate=5").unwrap(), 5000);
        for bad in [
            "rate=0r/s",
            "rate=1r/h",
            "rate=1.5r/s",
            "rate=",
            "rate=-1r/s",
            "rate=+1r/s",
        ] {
            assert_eq!(
                r(bad).unwrap_err().to_string(),
                format!("invalid rate \"{bad}\" in t.conf:2")
            );
        }
    }

    #[test]
    fn limit_req_parameters() {
        let mut env = Env::new(Default::default(), crate::modules::MODULES);
        let z = dir("limit_req_zone", &["$uri", "zone=lrc_a:32k", "rate=2r/s"]);
        limit_req_zone(&z, &mut env).unwrap();
        let p = |env: &mut Env, a: &[&str]| limit_req(&dir("limit_req", a), env);
        let l = p(&mut env, &["zone=lrc_a"]).unwrap();
        assert_eq!((l.burst, l.delay), (0, 0));
        let l = p(&mut env, &["zone=lrc_a", "burst=5", "nodelay"]).unwrap();
        assert_eq!((l.burst, l.delay), (5000, u64::MAX));
        let l = p(&mut env, &["nodelay", "zone=lrc_a", "delay=3"]).unwrap();
        assert_eq!(l.delay, 3000);
        assert_eq!(l.zone.get().conf, 2000);
        for (bad, msg) in [
            (
                &["zone=lrc_a", "burst=0"][..],
                "invalid burst value \"burst=0\"",
            ),
            (
                &["zone=lrc_a", "burst=x"][..],
                "invalid burst value \"burst=x\"",
            ),
            (
                &["zone=lrc_a", "delay=0"][..],
                "invalid delay value \"delay=0\"",
            ),
            (
                &["zone=lrc_a", "fast"][..],
                "invalid parameter \"fast\" in \"limit_req\" directive",
            ),
            (
                &["burst=3"][..],
                "\"limit_req\" must have \"zone\" parameter",
            ),
        ] {
            assert_eq!(
                p(&mut env, bad).err().unwrap().to_string(),
                format!("{msg} in t.conf:2")
            );
        }
        let sync = dir(
            "limit_req_zone",
            &["$uri", "zone=lrc_b:32k", "rate=1r/s", "sync"],
        );
        assert!(
            limit_req_zone(&sync, &mut env)
                .unwrap_err()
                .to_string()
                .contains("NGINX Plus")
        );
        env.ext
            .remove::<crate::modules::zone::Declared>()
            .unwrap()
            .finish()
            .unwrap();
    }
}
