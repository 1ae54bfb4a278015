//! Directives of connection limiting: `limit_conn_zone`, `limit_conn`,
//! `limit_conn_status`, `limit_conn_log_level`, `limit_conn_dry_run`.

use super::ConnNode;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, Env};
use crate::conf::values::{bad_arg, set_once};
use crate::core::errlog::Level;
use crate::modules::zone::{self, ZoneRef};
use crate::settings;
use std::sync::Arc;

/// One `limit_conn ZONE N`.
#[derive(Clone, Debug)]
pub struct ConnLimit {
    pub zone: ZoneRef<ConnNode>,
    pub max: u32,
}

settings! {
    /// Connection limiting of one level. `limit_conn` is one list set as a
    /// whole: a level with any drops the inherited ones.
    pub struct LimitConnConf / LimitConnConfSet {
        pub limits: Arc<[ConnLimit]> = Arc::from(Vec::new()),
        pub status: u16 = 503,
        pub log_level: Level = Level::Error,
        pub dry_run: bool = false,
    }
}

pub(super) fn limit_conn_zone(d: &Directive, env: &mut Env) -> Result<(), ConfError> {
    let a = d.arg(1);
    if a == "sync" || d.arg(2) == "sync" {
        return Err(ConfError::new(
            "\"sync\" of \"limit_conn_zone\" needs zone synchronization between servers (an NGINX Plus feature), which vireo does not have",
            &d.span,
        ));
    }
    if d.args.len() > 2 {
        return Err(bad_arg(d, d.arg(2)));
    }
    if !a.starts_with("zone=") {
        return Err(bad_arg(d, a));
    }
    let zone = zone::parse_zone(d, a)?;
    let key = zone::parse_key(d, &mut env.vars)?;
    env.ext
        .entry::<crate::modules::zone::Declared>()
        .declare::<ConnNode>(d, zone, key, ())
}

pub(super) fn limit_conn(d: &Directive, env: &mut Env) -> Result<ConnLimit, ConfError> {
    let zone = env
        .ext
        .entry::<crate::modules::zone::Declared>()
        .reference::<ConnNode>(d.arg(0), d)?;
    let n = d.arg(1);
    let max = match n.parse::<u64>() {
        Ok(m) if m > 0 && n.bytes().all(|b| b.is_ascii_digit()) => m,
        _ => {
            return Err(ConfError::new(
                format!("invalid number of connections \"{n}\""),
                &d.span,
            ));
        }
    };
    if max > 65535 {
        return Err(ConfError::new(
            "connection limit must be less 65536",
            &d.span,
        ));
    }
    Ok(ConnLimit {
        zone,
        max: max as u32,
    })
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "limit_conn_zone",
        ignored: false,
        ctx: Ctx::HTTP.or(Ctx::STREAM),
        arity: Arity::args(2, 3),
        set: |_, d, env| limit_conn_zone(d, env),
        syntax: "limit_conn_zone key zone=name:size;",
        default: "—",
        doc: "Declares a zone shared by all workers that counts, per value of `key` (text with variables, usually `$binary_remote_addr`), the requests in progress. A request whose key comes out empty is not counted. `size` (at least 32k) bounds the keys counted at once: one takes 64 bytes for a key of up to 28 bytes, so `1m` holds 16384; when the zone is full a request with a new key is rejected. A reload keeps the counts when the zone's name and size stay the same (changing the key then is refused, as nginx does). `sync` (NGINX Plus) is refused.\n\n```nginx\nlimit_conn_zone $binary_remote_addr zone=perip:10m;\nlimit_conn_zone $server_name zone=perserver:1m;\n```",
    },
    Def {
        name: "limit_conn",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::SS),
        arity: Arity::args(2, 2),
        set: |s, d, env| {
            let l = limit_conn(d, env)?;
            let slot = &mut s.loc().get_mut::<LimitConnConfSet>().limits;
            if slot
                .as_deref()
                .is_some_and(|ls| ls.iter().any(|o| o.zone == l.zone))
            {
                return Err(ConfError::new(
                    "\"limit_conn\" directive is duplicate",
                    &d.span,
                ));
            }
            crate::conf::values::push(slot, l);
            Ok(())
        },
        syntax: "limit_conn zone number;",
        default: "—",
        doc: "Allows at most `number` requests in progress per key of the zone; one more is answered with `limit_conn_status` (503). A request counts from the moment it reaches the location until its response is sent and logged. With HTTP/1 a connection has one request in progress at a time, so this limits busy connections per key. Several `limit_conn` may stand at one level (each zone once): all apply. A level with any `limit_conn` inherits none. Applied once per request, after `limit_req` (a delayed request counts once its delay is over). `$limit_conn_status` is `PASSED`, `REJECTED` or `REJECTED_DRY_RUN`.\n\n```nginx\nlimit_conn_zone $binary_remote_addr zone=perip:10m;\nlocation /download/ {\n    limit_conn perip 2;\n}\n```",
    },
    Def {
        name: "limit_conn_status",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            let v = zone::parse_status(d)?;
            set_once(&mut s.loc().get_mut::<LimitConnConfSet>().status, v, d)
        },
        syntax: "limit_conn_status code;",
        default: "503",
        doc: "The status of requests `limit_conn` rejects (400 to 599); `error_page` applies to it.\n\n```nginx\nlimit_conn_status 429;\n```",
    },
    Def {
        name: "limit_conn_log_level",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::SS),
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            let v = zone::parse_log_level(d)?;
            set_once(&mut s.loc().get_mut::<LimitConnConfSet>().log_level, v, d)
        },
        syntax: "limit_conn_log_level info | notice | warn | error;",
        default: "error",
        doc: "The error-log level of `limiting connections by zone \"…\"` lines.\n\n```nginx\nlimit_conn_log_level warn;\n```",
    },
    Def {
        name: "limit_conn_dry_run",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::SS),
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            let v = zone::parse_dry_run(d)?;
            set_once(&mut s.loc().get_mut::<LimitConnConfSet>().dry_run, v, d)
        },
        syntax: "limit_conn_dry_run on | off;",
        default: "off",
        doc: "Counts and logs (`limiting connections, dry run, by zone \"…\"`) as `limit_conn` would, but never rejects; `$limit_conn_status` says `REJECTED_DRY_RUN`. A request over the limit then holds no count.\n\n```nginx\nlimit_conn_dry_run on;\n```",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str, args: &[&str]) -> Directive {
        Directive::test(name, args, 3)
    }

    #[test]
    fn parameters() {
        let mut env = Env::new(Default::default(), crate::modules::MODULES);
        limit_conn_zone(
            &dir("limit_conn_zone", &["$uri", "zone=lcc_a:1m"]),
            &mut env,
        )
        .unwrap();
        let l = limit_conn(&dir("limit_conn", &["lcc_a", "10"]), &mut env).unwrap();
        assert_eq!(l.max, 10);
        for (args, msg) in [
            (&["lcc_a", "0"][..], "invalid number of connections \"0\""),
            (&["lcc_a", "x"][..], "invalid number of connections \"x\""),
            (
                &["lcc_a", "65536"][..],
                "connection limit must be less 65536",
            ),
        ] {
            assert_eq!(
                limit_conn(&dir("limit_conn", args), &mut env)
                    .err()
                    .unwrap()
                    .to_string(),
                format!("{msg} in t.conf:3")
            );
        }
        for (args, msg) in [
            (&["$uri", "zone=lcc_b:1m", "sync"][..], "NGINX Plus"),
            (
                &["$uri", "zone=lcc_b:1m", "x"][..],
                "invalid parameter \"x\"",
            ),
            (&["$uri", "lcc_b:1m"][..], "invalid parameter \"lcc_b:1m\""),
        ] {
            let e = limit_conn_zone(&dir("limit_conn_zone", args), &mut env).unwrap_err();
            assert!(e.to_string().contains(msg), "{e}");
        }
        env.ext
            .remove::<crate::modules::zone::Declared>()
            .unwrap()
            .finish()
            .unwrap();
    }
}
