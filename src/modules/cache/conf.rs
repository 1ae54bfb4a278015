//! Directives of the HTTP cache, once for each handler that uses it
//! (`proxy_…`, `fastcgi_…`, `uwsgi_…`, `scgi_…`): `*_cache_path` declares a cache (a folder
//! and its keys zone), the others say per level whether and how replies
//! are cached.

use super::index::CacheZone;
use crate::conf::ast::{ConfError, Directive, Span};
use crate::conf::table::{Arity, Ctx, Def, Env, MANY, ONE};
use crate::conf::values::{bad_arg, flag, number, parse_size, parse_time, push, time};
use crate::core::module::{Settings, SettingsSet, Slot};
use crate::core::vars::Template;
use crate::settings;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Which handler's directives: their prefix and settings slot.
pub trait Kind: 'static + Send + Sync + Clone + Default + std::fmt::Debug {
    const PREFIX: &'static str;
    fn slot() -> &'static Slot;
}

/// `proxy_cache*`.
#[derive(Clone, Debug, Default)]
pub struct Proxy;
/// `fastcgi_cache*`.
#[derive(Clone, Debug, Default)]
pub struct Fastcgi;

impl Kind for Proxy {
    const PREFIX: &'static str = "proxy";
    crate::own_slot!();
}

impl Kind for Fastcgi {
    const PREFIX: &'static str = "fastcgi";
    crate::own_slot!();
}

/// `uwsgi_cache*`.
impl Kind for crate::modules::uwsgi::Uwsgi {
    const PREFIX: &'static str = "uwsgi";
    crate::own_slot!();
}

/// `scgi_cache*`.
impl Kind for crate::modules::scgi::Scgi {
    const PREFIX: &'static str = "scgi";
    crate::own_slot!();
}

/// `*_cache_use_stale` conditions.
pub mod stale {
    pub const ERROR: u16 = 1;
    pub const TIMEOUT: u16 = 2;
    pub const INVALID_HEADER: u16 = 4;
    pub const UPDATING: u16 = 8;
    pub const HTTP_500: u16 = 16;
    pub const HTTP_502: u16 = 32;
    pub const HTTP_503: u16 = 64;
    pub const HTTP_504: u16 = 128;
    pub const HTTP_403: u16 = 256;
    pub const HTTP_404: u16 = 512;
    pub const HTTP_429: u16 = 1024;

    pub const NAMES: &[(&str, u16)] = &[
        ("error", ERROR),
        ("timeout", TIMEOUT),
        ("invalid_header", INVALID_HEADER),
        ("updating", UPDATING),
        ("http_500", HTTP_500),
        ("http_502", HTTP_502),
        ("http_503", HTTP_503),
        ("http_504", HTTP_504),
        ("http_403", HTTP_403),
        ("http_404", HTTP_404),
        ("http_429", HTTP_429),
    ];

    /// The condition an upstream's own status is.
    pub fn of_status(s: u16) -> u16 {
        match s {
            500 => HTTP_500,
            502 => HTTP_502,
            503 => HTTP_503,
            504 => HTTP_504,
            403 => HTTP_403,
            404 => HTTP_404,
            429 => HTTP_429,
            _ => 0,
        }
    }
}

/// `*_ignore_headers` fields that the cache reads.
pub mod ignore {
    pub const X_ACCEL_EXPIRES: u16 = 1;
    pub const EXPIRES: u16 = 2;
    pub const CACHE_CONTROL: u16 = 4;
    pub const SET_COOKIE: u16 = 8;
    pub const VARY: u16 = 16;

    pub const NAMES: &[(&str, u16)] = &[
        ("X-Accel-Expires", X_ACCEL_EXPIRES),
        ("Expires", EXPIRES),
        ("Cache-Control", CACHE_CONTROL),
        ("Set-Cookie", SET_COOKIE),
        ("Vary", VARY),
    ];
}

/// `*_cache_methods` bits.
pub const GET: u8 = 1;
pub const HEAD: u8 = 2;
pub const POST: u8 = 4;

/// The cache a level uses.
#[derive(Clone, Debug, Default)]
pub enum Use {
    #[default]
    Off,
    Zone(ZoneRef),
    /// The zone's name from variables, among the load's zones.
    Var(Template, Arc<OnceLock<Vec<Arc<CacheZone>>>>),
}

/// A level's reference to a keys zone, resolved at the end of the load.
#[derive(Clone, Debug)]
pub struct ZoneRef {
    pub name: Arc<str>,
    zone: Arc<OnceLock<Arc<CacheZone>>>,
}

impl ZoneRef {
    pub fn get(&self) -> &Arc<CacheZone> {
        self.zone
            .get()
            .expect("cache zones are resolved when the configuration loads")
    }
}

/// The settings as `settings!` makes them (their own slot is unused: each
/// handler's copy has its slot, see [`CacheConf`]).
mod loc {
    #![allow(dead_code)]
    use super::*;
    settings! {
        /// Caching of one level, for one handler.
        pub struct CacheLoc / CacheLocSet {
            pub cache: Use = Use::Off,
            pub key: Option<Template> = None,
            /// (status, 0 for `any`; how long).
            pub valid: Arc<[(u16, Duration)]> = Arc::from(Vec::new()),
            pub methods: u8 = GET | HEAD,
            pub min_uses: u64 = 1,
            pub bypass: Arc<[Template]> = Arc::from(Vec::new()),
            pub no_cache: Arc<[Template]> = Arc::from(Vec::new()),
            /// `*_cache_purge`: when any value is set, the request removes
            /// the entries of its key.
            pub purge: Arc<[Template]> = Arc::from(Vec::new()),
            pub use_stale: u16 = 0,
            pub revalidate: bool = false,
            pub lock: bool = false,
            pub lock_timeout: Duration = Duration::from_secs(5),
            pub lock_age: Duration = Duration::from_secs(5),
            pub background_update: bool = false,
            pub convert_head: bool = true,
            pub max_range_offset: Option<u64> = None,
            pub ignore_headers: u16 = 0,
        }
    }
}
pub use loc::{CacheLoc, CacheLocSet};

/// A handler's cache settings (its own slot).
#[derive(Clone, Debug, Default)]
pub struct CacheConf<K: Kind>(pub CacheLoc, PhantomData<K>);

impl<K: Kind> Settings for CacheConf<K> {
    fn slot() -> &'static Slot {
        K::slot()
    }
}

impl<K: Kind> CacheConf<K> {
    pub const KIND: crate::core::module::SettingsKind =
        crate::core::module::SettingsKind::of::<CacheConf<K>>();
}

#[derive(Debug, Default)]
pub struct CacheConfSet<K: Kind>(pub CacheLocSet, PhantomData<K>);

impl<K: Kind> SettingsSet for CacheConfSet<K> {
    type Resolved = CacheConf<K>;
    fn resolve(&self, parent: &CacheConf<K>) -> CacheConf<K> {
        CacheConf(self.0.resolve(&parent.0), PhantomData)
    }
}

fn set<'a, K: Kind>(s: &'a mut crate::conf::table::Scope<'_>) -> &'a mut CacheLocSet {
    &mut s.loc().get_mut::<CacheConfSet<K>>().0
}

fn dup(d: &Directive) -> ConfError {
    ConfError::new(format!("\"{}\" directive is duplicate", d.name), &d.span)
}

/// The zones one load declares and the references to resolve.
#[derive(Default)]
pub struct Zones {
    declared: Vec<Arc<CacheZone>>,
    refs: Vec<(ZoneRef, Span)>,
    all: Vec<Arc<OnceLock<Vec<Arc<CacheZone>>>>>,
}

/// The `loaded` hook: every `*_cache NAME` names a declared zone.
pub fn finish(env: &mut Env) -> Result<(), ConfError> {
    let Some(z) = env.ext.remove::<Zones>() else {
        return Ok(());
    };
    for (r, span) in &z.refs {
        match z.declared.iter().find(|c| *c.name == *r.name) {
            Some(c) => {
                let _ = r.zone.set(c.clone());
            }
            None => {
                return Err(ConfError::new(
                    format!("cache zone \"{}\" is unknown", r.name),
                    span,
                ));
            }
        }
    }
    for all in &z.all {
        let _ = all.set(z.declared.clone());
    }
    super::index::activate(&z.declared);
    Ok(())
}

/// `*_cache_path path [levels=1:2] keys_zone=name:size [inactive=] [max_size=]
/// [min_free=] [use_temp_path=] [manager_*=] [loader_*=]`.
fn cache_path(d: &Directive, env: &mut Env) -> Result<(), ConfError> {
    let err = |m: String| ConfError::new(m, &d.span);
    let dir = env.path(d.arg(0));
    let mut p = super::index::Params::default();
    let mut zone = None;
    for a in d.arg_strs().skip(1) {
        let (name, v) = a.split_once('=').unwrap_or((a, ""));
        let t = || parse_time(v).ok_or_else(|| bad_arg(d, a));
        let n = || {
            v.parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad_arg(d, a))
        };
        match name {
            "levels" => {
                let mut levels = Vec::new();
                for l in v.split(':') {
                    match l {
                        "1" | "2" if levels.len() < 3 => levels.push(l.as_bytes()[0] - b'0'),
                        _ => return Err(err(format!("invalid \"levels\" \"{v}\""))),
                    }
                }
                p.levels = levels;
            }
            "use_temp_path" => {
                p.use_temp_path = match v {
                    "on" => true,
                    "off" => false,
                    _ => {
                        return Err(err(format!(
                            "invalid use_temp_path value \"{v}\", it must be \"on\" or \"off\""
                        )));
                    }
                }
            }
            "keys_zone" => {
                let (zn, size) = v
                    .split_once(':')
                    .and_then(|(zn, s)| Some((zn, parse_size(s)?)))
                    .filter(|(zn, _)| !zn.is_empty())
                    .ok_or_else(|| err(format!("invalid keys zone size \"{a}\"")))?;
                if size < 8 * 4096 {
                    return Err(err(format!("zone \"{zn}\" is too small")));
                }
                zone = Some((zn.to_string(), size));
            }
            "inactive" => p.inactive = t()?,
            "max_size" => p.max_size = Some(parse_size(v).ok_or_else(|| bad_arg(d, a))?),
            "min_free" => p.min_free = Some(parse_size(v).ok_or_else(|| bad_arg(d, a))?),
            "loader_files" => p.loader_files = n()?,
            "loader_sleep" => p.loader_sleep = t()?,
            "loader_threshold" => p.loader_threshold = t()?,
            "manager_files" => p.manager_files = n()?,
            "manager_sleep" => p.manager_sleep = t()?,
            "manager_threshold" => p.manager_threshold = t()?,
            n if n.starts_with("purger") => {
                return Err(err(format!(
                    "\"{n}\" of \"{}\" is an NGINX Plus feature, which vireo does not have",
                    d.name
                )));
            }
            _ => return Err(bad_arg(d, a)),
        }
    }
    let Some((name, size)) = zone else {
        return Err(err(format!(
            "\"{}\" must have \"keys_zone\" parameter",
            d.name
        )));
    };
    let zones = env.ext.entry::<Zones>();
    if zones.declared.iter().any(|z| *z.name == *name) {
        return Err(err(format!("duplicate zone \"{name}\"")));
    }
    if zones.declared.iter().any(|z| z.dir == dir) {
        return Err(err(format!("duplicate cache path \"{}\"", dir.display())));
    }
    if let Err(e) = crate::modules::client_body::conf::make_dir(&dir, env.user.as_ref()) {
        return Err(err(format!(
            "mkdir() \"{}\" failed ({})",
            dir.display(),
            crate::core::errlog::errno_text(&e)
        )));
    }
    let z = CacheZone::new(name, size, dir, p);
    env.ext.entry::<Zones>().declared.push(z);
    Ok(())
}

fn cache<K: Kind>(
    s: &mut crate::conf::table::Scope<'_>,
    d: &Directive,
    env: &mut Env,
) -> Result<(), ConfError> {
    if set::<K>(s).cache.is_some() {
        return Err(dup(d));
    }
    let a = d.arg(0);
    let u = if a == "off" {
        Use::Off
    } else if a.contains('$') {
        let t = Template::compile(a, &mut env.vars).map_err(|e| ConfError::new(e, &d.span))?;
        let all = Arc::new(OnceLock::new());
        env.ext.entry::<Zones>().all.push(all.clone());
        Use::Var(t, all)
    } else {
        let r = ZoneRef {
            name: a.into(),
            zone: Arc::new(OnceLock::new()),
        };
        env.ext
            .entry::<Zones>()
            .refs
            .push((r.clone(), d.span.clone()));
        Use::Zone(r)
    };
    set::<K>(s).cache = Some(u);
    Ok(())
}

fn templates(d: &Directive, env: &mut Env) -> Result<Vec<Template>, ConfError> {
    d.arg_strs()
        .map(|a| Template::compile(a, &mut env.vars).map_err(|e| ConfError::new(e, &d.span)))
        .collect()
}

fn valid(d: &Directive) -> Result<Vec<(u16, Duration)>, ConfError> {
    let n = d.args.len();
    let t = time(d, n - 1)?;
    if n == 1 {
        return Ok(vec![(200, t), (301, t), (302, t)]);
    }
    let mut out = Vec::new();
    for a in d.arg_strs().take(n - 1) {
        let code = match a {
            "any" => 0,
            _ => match a.parse::<u16>() {
                Ok(c) if (100..=599).contains(&c) => c,
                _ => return Err(ConfError::new(format!("invalid status \"{a}\""), &d.span)),
            },
        };
        out.push((code, t));
    }
    Ok(out)
}

fn bits(d: &Directive, names: &[(&str, u16)], off: bool) -> Result<u16, ConfError> {
    let mut b = 0;
    for a in d.arg_strs() {
        if off && a == "off" {
            if d.args.len() > 1 {
                return Err(bad_arg(d, a));
            }
            return Ok(0);
        }
        match names.iter().find(|(n, _)| n.eq_ignore_ascii_case(a)) {
            Some((_, v)) => b |= v,
            None => return Err(bad_arg(d, a)),
        }
    }
    Ok(b)
}

fn on_off(d: &Directive) -> Result<bool, ConfError> {
    flag(d, 0)
}

fn first_time(d: &Directive) -> Result<Duration, ConfError> {
    time(d, 0)
}

fn methods(d: &Directive) -> Result<u8, ConfError> {
    let mut m = GET | HEAD;
    for a in d.arg_strs() {
        m |= match a {
            "GET" => GET,
            "HEAD" => HEAD,
            "POST" => POST,
            _ => return Err(bad_arg(d, a)),
        };
    }
    Ok(m)
}

/// `*_ignore_headers`: the fields the cache reads may be ignored; the
/// X-Accel fields that change how a reply is sent are refused.
fn ignore_headers(d: &Directive) -> Result<u16, ConfError> {
    for a in d.arg_strs() {
        if a.len() > 8
            && a[..8].eq_ignore_ascii_case("X-Accel-")
            && !a.eq_ignore_ascii_case("X-Accel-Expires")
        {
            return Err(ConfError::new(
                format!(
                    "\"{a}\" of \"{}\" is not supported: vireo ignores only the fields that decide caching (X-Accel-Expires, Expires, Cache-Control, Set-Cookie, Vary)",
                    d.name
                ),
                &d.span,
            ));
        }
    }
    bits(d, ignore::NAMES, false)
}

/// A directive of one setting, parsed from its arguments and put in its
/// slot by `$put` (see [`one_def`] and [`mask_def`]).
macro_rules! slot_def {
    ($put:path, $p:literal, $K:ty, $name:literal, $field:ident, $arity:expr, $parse:expr, $args:literal, $default:literal, $doc:expr) => {
        Def {
            name: concat!($p, $name),
            ignored: false,
            ctx: Ctx::HSL,
            arity: $arity,
            set: |s, d, _| {
                let v = $parse(d)?;
                $put(&mut set::<$K>(s).$field, v, d)
            },
            syntax: concat!($p, $name, " ", $args, ";"),
            default: $default,
            doc: $doc,
        }
    };
}

/// A directive set once per level.
macro_rules! one_def {
    ($($t:tt)*) => {
        slot_def!(crate::conf::values::set_once, $($t)*)
    };
}

/// A set of flags (nginx's bitmask slots): several lines at one level add up.
macro_rules! mask_def {
    ($($t:tt)*) => {
        slot_def!(or_in, $($t)*)
    };
}

/// Add `v`'s flags to the slot's.
fn or_in<T: std::ops::BitOr<Output = T> + Copy + Default>(
    slot: &mut Option<T>,
    v: T,
    _: &Directive,
) -> Result<(), ConfError> {
    *slot = Some(slot.unwrap_or_default() | v);
    Ok(())
}

macro_rules! list_def {
    ($p:literal, $K:ty, $name:literal, $field:ident, $doc:expr) => {
        Def {
            name: concat!($p, $name),
            ignored: false,
            ctx: Ctx::HSL,
            arity: Arity::args(1, MANY),
            set: |s, d, env| {
                for t in templates(d, env)? {
                    push(&mut set::<$K>(s).$field, t);
                }
                Ok(())
            },
            syntax: concat!($p, $name, " string ...;"),
            default: "—",
            doc: $doc,
        }
    };
}

macro_rules! defs {
    ($p:literal, $K:ty) => {
        &[
            Def {
                name: concat!($p, "_cache_path"),
                ignored: false,
                ctx: Ctx::HTTP,
                arity: Arity::args(2, MANY),
                set: |_, d, env| cache_path(d, env),
                syntax: concat!($p, "_cache_path path [levels=levels] [use_temp_path=on|off] keys_zone=name:size [inactive=time] [max_size=size] [min_free=size] [manager_files=number] [manager_sleep=time] [manager_threshold=time] [loader_files=number] [loader_sleep=time] [loader_threshold=time];"),
                default: "—",
                doc: concat!("Declares a cache: replies are kept as files under `path` (made at start when missing), named by the MD5 of their key in hex, in up to three levels of sub-folders named by its last characters (`levels=1:2`: `path/c/29/b7f54b2df7773722d382f4809d65029c`). `keys_zone` names the index of the entries, kept in memory and shared by all workers; `size` bounds it (about 8000 keys a megabyte; when full, the least recently used entry goes, file included). At start the index is rebuilt from the folder in the background, `loader_files` files at a time with `loader_sleep` between batches (a reply not yet loaded is a miss); a file that does not check out (its checksums, its length) is removed. Once a second a manager removes entries not used for `inactive` (10m) and, least recently used first, entries while the cache is over `max_size` or the file system has less than `min_free` free; it stops after `manager_files` files or `manager_threshold`. A file is written whole to a temporary file in `path` (whatever `use_temp_path` says) and renamed into place, so a crash never leaves a partial entry. The index survives a reload when the zone keeps its name, size and path. See docs/cache.md.\n\n```nginx\n", $p, "_cache_path /var/cache/vireo levels=1:2 keys_zone=one:10m inactive=60m max_size=1g;\n```"),
            },
            Def {
                name: concat!($p, "_cache"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, env| cache::<$K>(s, d, env),
                syntax: concat!($p, "_cache zone | off;"),
                default: "off",
                doc: concat!("Caches replies in the keys zone `zone` (declared by `", $p, "_cache_path`; with variables, the zone whose name they make, none when it names none). `off` stops an inherited cache. `$upstream_cache_status` tells what the cache did: `MISS`, `BYPASS`, `EXPIRED`, `STALE`, `UPDATING`, `REVALIDATED` or `HIT`.\n\n```nginx\n", $p, "_cache one;\n```"),
            },
            Def {
                name: concat!($p, "_cache_key"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: ONE,
                set: |s, d, env| {
                    let t = crate::conf::values::template(d, 0, &mut env.vars)?;
                    let slot = &mut set::<$K>(s).key;
                    if slot.is_some() {
                        return Err(dup(d));
                    }
                    *slot = Some(Some(t));
                    Ok(())
                },
                syntax: concat!($p, "_cache_key string;"),
                default: "$scheme$proxy_host$request_uri (proxy); none (fastcgi)",
                doc: concat!("The key an entry is found by (text with variables). The proxy's default is `$scheme$proxy_host$request_uri`; FastCGI has none, and a cache without a key answers 500.\n\n```nginx\n", $p, "_cache_key $host$request_uri;\n```"),
            },
            Def {
                name: concat!($p, "_cache_valid"),
                ignored: false,
                ctx: Ctx::HSL,
                arity: Arity::args(1, MANY),
                set: |s, d, _| {
                    let mut list = set::<$K>(s).valid.take().map(|l| l.to_vec()).unwrap_or_default();
                    list.extend(valid(d)?);
                    set::<$K>(s).valid = Some(Arc::from(list));
                    Ok(())
                },
                syntax: concat!($p, "_cache_valid [code ...] time;"),
                default: "—",
                doc: concat!("How long replies with these statuses stay fresh when the reply itself does not say (`X-Accel-Expires`, `Cache-Control`, `Expires` come first). Without codes: 200, 301 and 302; `any` stands for every status. A level with any of these drops the inherited ones. A reply whose status has no time is not cached.\n\n```nginx\n", $p, "_cache_valid 200 302 10m;\n", $p, "_cache_valid 404 1m;\n", $p, "_cache_valid any 5s;\n```"),
            },
            mask_def!($p, $K, "_cache_methods", methods, Arity::args(1, 3), methods, "GET | HEAD | POST ...", "GET HEAD", concat!("The methods whose replies are cached; GET and HEAD always are. The method is not part of the default key: add `$request_method` to the key when POST is cached.\n\n```nginx\n", $p, "_cache_methods GET HEAD POST;\n```")),
            one_def!($p, $K, "_cache_min_uses", min_uses, ONE, |d| number(d, 0).map(|n| n.max(1)), "number", "1", concat!("A reply is stored once its key has been asked for this many times (counted in the keys zone).\n\n```nginx\n", $p, "_cache_min_uses 3;\n```")),
            list_def!($p, $K, "_cache_bypass", bypass, concat!("When any value is neither empty nor `0`, the reply is taken from the upstream, not the cache (`BYPASS`); it may still be stored.\n\n```nginx\n", $p, "_cache_bypass $cookie_nocache $arg_nocache;\n```")),
            list_def!($p, $K, "_cache_purge", purge, concat!("When any value is neither empty nor `0`, the request removes the entries of its cache key (every variant of it) and is answered 204, or 404 when there were none; a key ending in `*` removes every entry whose key starts with what precedes the `*`. The location's access rules apply to it as to any request (NGINX Plus has this directive; nginx does not).\n\n```nginx\nmap $request_method $purge { PURGE 1; default 0; }\nlocation / {\n    ", $p, "_cache c;\n    ", $p, "_cache_purge $purge;\n    limit_except GET HEAD { allow 127.0.0.1; deny all; }\n}\n```")),
            list_def!($p, $K, "_no_cache", no_cache, concat!("When any value is neither empty nor `0`, the reply is not stored.\n\n```nginx\n", $p, "_no_cache $http_pragma $http_authorization;\n```")),
            one_def!($p, $K, "_cache_use_stale", use_stale, Arity::args(1, MANY), |d| bits(d, stale::NAMES, true), "error | timeout | invalid_header | updating | http_500 | http_502 | http_503 | http_504 | http_403 | http_404 | http_429 | off ...", "off", concat!("When an expired entry may be sent (`STALE`) instead of what the upstream gives: no reply (`error`, `timeout`, `invalid_header`) or one of these statuses; `updating` sends it (`UPDATING`) while another request is fetching the entry anew.\n\n```nginx\n", $p, "_cache_use_stale error timeout updating http_503;\n```")),
            one_def!($p, $K, "_cache_revalidate", revalidate, ONE, on_off, "on | off", "off", concat!("An expired entry with an ETag or Last-Modified is asked for with `If-None-Match`/`If-Modified-Since`; a 304 makes it fresh again (`REVALIDATED`) for the time the 304 or the cached status says.\n\n```nginx\n", $p, "_cache_revalidate on;\n```")),
            one_def!($p, $K, "_cache_lock", lock, ONE, on_off, "on | off", "off", concat!("One request at a time fills a missing entry: the others wait for it (up to `", $p, "_cache_lock_timeout`) and are then served from the cache. A request that waited too long goes to the upstream and its reply is not stored. After `", $p, "_cache_lock_age` another request may fill the entry.\n\n```nginx\n", $p, "_cache_lock on;\n```")),
            one_def!($p, $K, "_cache_lock_timeout", lock_timeout, ONE, first_time, "time", "5s", concat!("How long a request waits for another to fill an entry (`", $p, "_cache_lock`).\n\n```nginx\n", $p, "_cache_lock_timeout 2s;\n```")),
            one_def!($p, $K, "_cache_lock_age", lock_age, ONE, first_time, "time", "5s", concat!("After this long, a fill that has not ended lets one more request fill the entry (`", $p, "_cache_lock`).\n\n```nginx\n", $p, "_cache_lock_age 10s;\n```")),
            one_def!($p, $K, "_cache_background_update", background_update, ONE, on_off, "on | off", "off", concat!("An expired entry that may be sent stale while it is fetched anew (`", $p, "_cache_use_stale updating`, or within the reply's `Cache-Control: stale-while-revalidate`) is sent at once (`STALE`), and a background subrequest, a clone of the request, fetches it; the connection's next request waits for that subrequest.\n\n```nginx\n", $p, "_cache_background_update on;\n", $p, "_cache_use_stale updating;\n```")),
            one_def!($p, $K, "_cache_convert_head", convert_head, ONE, on_off, "on | off", "on", concat!("A HEAD request that may be cached goes to the upstream as GET, so that the whole reply is stored.\n\n```nginx\n", $p, "_cache_convert_head off;\n```")),
            one_def!($p, $K, "_cache_max_range_offset", max_range_offset, ONE, |d| number(d, 0).map(Some), "number", "—", concat!("A range request starting beyond this offset goes to the upstream, and its reply is not stored.\n\n```nginx\n", $p, "_cache_max_range_offset 1048576;\n```")),
            mask_def!($p, $K, "_ignore_headers", ignore_headers, Arity::args(1, MANY), ignore_headers, "field ...", "—", concat!("Reply fields the cache does not act on: `X-Accel-Expires`, `Expires`, `Cache-Control` (then `", $p, "_cache_valid` decides), `Set-Cookie` (a reply with one is then cached), `Vary` (one entry for every variant). The other `X-Accel-*` fields are refused.\n\n```nginx\n", $p, "_ignore_headers Cache-Control Expires Set-Cookie;\n```")),
        ]
    };
}

pub static PROXY_DIRECTIVES: &[Def] = defs!("proxy", Proxy);
pub static FASTCGI_DIRECTIVES: &[Def] = defs!("fastcgi", Fastcgi);
pub static UWSGI_DIRECTIVES: &[Def] = defs!("uwsgi", crate::modules::uwsgi::Uwsgi);
pub static SCGI_DIRECTIVES: &[Def] = defs!("scgi", crate::modules::scgi::Scgi);
