//! Zones shared by all workers: the per-key state of `limit_req_zone` and
//! `limit_conn_zone`, nginx's shared-memory zones.
//!
//! Workers are threads of one process, so a zone's table is a
//! `Mutex`-guarded LRU map behind an `Arc`; a request locks it once per zone
//! for a lookup and an update (no await while it is held). SIZE bounds the
//! table the way nginx's slab allocator does: an entry costs nginx's node
//! size for its key ([`Node::BASE`] + key length) rounded up to a power of
//! two, so `1m` holds 8192 limit_req states or 16384 limit_conn states for
//! `$binary_remote_addr` (nginx on 64 bits: about 8000 and 16000). A full
//! table evicts its least recently used entries that [`Table::insert`] is
//! allowed to, else refuses the new key.
//!
//! A zone's table outlives reloads as nginx's shared memory does: a new
//! configuration declaring a zone of the same kind, name and size takes
//! over the table of the live configuration (its key must not change); a
//! zone whose size changed starts empty. Per-load bookkeeping — forward
//! references (`limit_req zone=a` before `limit_req_zone … zone=a`),
//! duplicate and conflicting declarations — is [`Declared`], kept in the
//! loader's `Env`.

use crate::conf::ast::{ConfError, Directive, Span};
use crate::conf::values::{flag, parse_size};
use crate::core::errlog::Level;
use crate::core::module::{Hooks, Module};
use crate::core::vars::{Template, Vars};
use std::any::{Any, TypeId};
use std::fmt;
use std::hash::RandomState;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// What one kind of zone keeps per key.
pub trait Node: Send + 'static {
    /// Bytes nginx's node takes before the key: the rbtree node up to its
    /// `color` field (32) plus the module's node up to its key bytes.
    const BASE: usize;
    /// The directive that declares such a zone (`limit_req_zone`).
    const DIRECTIVE: &'static str;
    /// Settings of the zone that may change on reload (limit_req's rate).
    type Conf: fmt::Debug + Send + Sync + 'static;
}

/// The smallest zone nginx accepts: 8 pages.
const MIN_SIZE: u64 = 8 * 4096;

/// Milliseconds on a monotonic clock shared by all workers. It starts at one
/// day, so the zero `last` time of a state never accounted reads as long
/// ago, as nginx's clock does.
pub fn now_ms() -> u64 {
    static BASE: OnceLock<std::time::Instant> = OnceLock::new();
    let base = BASE.get_or_init(std::time::Instant::now);
    86_400_000 + base.elapsed().as_millis() as u64
}

/// A zone's table: per-key state, least recently used first, within a byte
/// budget counted as nginx's slab allocator would.
pub struct Table<T> {
    map: lru::LruCache<Box<[u8]>, T, RandomState>,
    used: usize,
    budget: usize,
}

impl<T: Node> Table<T> {
    pub fn new(size: u64) -> Table<T> {
        Table {
            map: lru::LruCache::unbounded_with_hasher(RandomState::new()),
            used: 0,
            budget: usize::try_from(size).unwrap_or(usize::MAX),
        }
    }

    /// What an entry for a key of `len` bytes costs.
    pub fn cost(len: usize) -> usize {
        (T::BASE + len).next_power_of_two()
    }

    /// The state of `key`, made the most recently used.
    pub fn get(&mut self, key: &[u8]) -> Option<&mut T> {
        self.map.get_mut(key)
    }

    /// Remove up to `max` least recently used entries, oldest first, while
    /// `expired` says so.
    pub fn expire(&mut self, max: usize, mut expired: impl FnMut(&T) -> bool) {
        for _ in 0..max {
            match self.map.peek_lru() {
                Some((_, v)) if expired(v) => self.pop_lru(),
                _ => return,
            }
        }
    }

    /// Add the state of a new key. While the table is full its least
    /// recently used entries go, as long as `evictable` allows; `None` when
    /// the entry does not fit.
    pub fn insert(&mut self, key: &[u8], v: T, evictable: impl Fn(&T) -> bool) -> Option<&mut T> {
        let cost = Self::cost(key.len());
        while self.used + cost > self.budget {
            match self.map.peek_lru() {
                Some((_, v)) if evictable(v) => self.pop_lru(),
                _ => return None,
            }
        }
        self.used += cost;
        self.map.push(key.into(), v);
        self.map.peek_mut(key)
    }

    /// Forget `key`.
    pub fn remove(&mut self, key: &[u8]) {
        if self.map.pop(key).is_some() {
            self.used -= Self::cost(key.len());
        }
    }

    fn pop_lru(&mut self) {
        if let Some((k, _)) = self.map.pop_lru() {
            self.used -= Self::cost(k.len());
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// A zone as one configuration declares it; its table may be shared with
/// the configurations before it.
pub struct Zone<T: Node> {
    pub name: Box<str>,
    /// What a request is counted under; an empty value is not counted.
    pub key: Template,
    pub conf: T::Conf,
    table: Arc<Mutex<Table<T>>>,
}

impl<T: Node> Zone<T> {
    /// The table, locked (a worker that panicked holding it left it usable:
    /// every update is a few plain stores).
    pub fn lock(&self) -> MutexGuard<'_, Table<T>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Same table (kept over a reload).
    #[cfg(test)]
    pub fn shares_table(&self, o: &Zone<T>) -> bool {
        Arc::ptr_eq(&self.table, &o.table)
    }
}

impl<T: Node> fmt::Debug for Zone<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Zone")
            .field("name", &self.name)
            .field("key", &self.key.source())
            .field("conf", &self.conf)
            .finish()
    }
}

/// A directive's reference to a zone, filled in when the zone is declared
/// (before or after the reference, as in nginx).
pub struct ZoneRef<T: Node> {
    name: Arc<str>,
    zone: Arc<OnceLock<Arc<Zone<T>>>>,
}

impl<T: Node> ZoneRef<T> {
    pub fn get(&self) -> &Arc<Zone<T>> {
        self.zone
            .get()
            .expect("zone references are resolved when the configuration loads")
    }
}

impl<T: Node> Clone for ZoneRef<T> {
    fn clone(&self) -> Self {
        ZoneRef {
            name: self.name.clone(),
            zone: self.zone.clone(),
        }
    }
}

/// References to the same zone (by name: they resolve to one zone).
impl<T: Node> PartialEq for ZoneRef<T> {
    fn eq(&self, o: &Self) -> bool {
        self.name == o.name
    }
}

impl<T: Node> fmt::Debug for ZoneRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ZoneRef({})", self.name)
    }
}

type AnyZone = Arc<dyn Any + Send + Sync>;
type Resolve = Box<dyn FnOnce(&AnyZone) + Send + Sync>;

/// One zone name during a load.
struct Entry {
    name: String,
    kind: TypeId,
    /// 0 while only referenced.
    size: u64,
    zone: Option<AnyZone>,
    /// References made before the declaration.
    pending: Vec<Resolve>,
    first_use: Span,
}

/// The zones one configuration load declares and references.
#[derive(Default)]
pub struct Declared {
    entries: Vec<Entry>,
}

impl Declared {
    /// The entry for `name`, which must be of kind `T` (nginx: one name, one use).
    fn entry<T: Node>(&mut self, name: &str, d: &Directive) -> Result<&mut Entry, ConfError> {
        let i = match self.entries.iter().position(|e| e.name == name) {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    name: name.to_string(),
                    kind: TypeId::of::<T>(),
                    size: 0,
                    zone: None,
                    pending: Vec::new(),
                    first_use: d.span.clone(),
                });
                self.entries.len() - 1
            }
        };
        let e = &mut self.entries[i];
        if e.kind != TypeId::of::<T>() {
            return Err(ConfError::new(
                format!(
                    "the shared memory zone \"{name}\" is already declared for a different use"
                ),
                &d.span,
            ));
        }
        Ok(e)
    }

    /// `…_zone KEY zone=NAME:SIZE …`: declare a zone.
    pub fn declare<T: Node>(
        &mut self,
        d: &Directive,
        (name, size): (String, u64),
        key: Template,
        conf: T::Conf,
    ) -> Result<(), ConfError> {
        let e = self.entry::<T>(&name, d)?;
        if e.size != 0 && e.size != size {
            return Err(ConfError::new(
                format!(
                    "the size {size} of shared memory zone \"{name}\" conflicts with already declared size {}",
                    e.size
                ),
                &d.span,
            ));
        }
        if let Some(z) = &e.zone {
            let z = z.clone().downcast::<Zone<T>>().expect("kind checked");
            return Err(ConfError::new(
                format!(
                    "{} \"{name}\" is already bound to key \"{}\"",
                    T::DIRECTIVE,
                    z.key.source()
                ),
                &d.span,
            ));
        }
        let table = kept_table::<T>(&name, size, &key, d)?;
        let zone: AnyZone = Arc::new(Zone {
            name: name.into(),
            key,
            conf,
            table,
        });
        for resolve in e.pending.drain(..) {
            resolve(&zone);
        }
        e.size = size;
        e.zone = Some(zone);
        Ok(())
    }

    /// `zone=NAME` of a limit directive: the zone, declared now or later.
    pub fn reference<T: Node>(
        &mut self,
        name: &str,
        d: &Directive,
    ) -> Result<ZoneRef<T>, ConfError> {
        let e = self.entry::<T>(name, d)?;
        let slot = ZoneRef::<T> {
            name: name.into(),
            zone: Arc::new(OnceLock::new()),
        };
        let fill = slot.zone.clone();
        let resolve: Resolve = Box::new(move |z: &AnyZone| {
            let z = z.clone().downcast::<Zone<T>>().expect("kind checked");
            let _ = fill.set(z);
        });
        match &e.zone {
            Some(z) => resolve(z),
            None => e.pending.push(resolve),
        }
        Ok(slot)
    }

    /// End of the load: every zone referenced must be declared.
    pub fn finish(self) -> Result<(), ConfError> {
        match self.entries.into_iter().find(|e| e.zone.is_none()) {
            Some(e) => Err(ConfError::new(
                format!("zero size shared memory zone \"{}\"", e.name),
                &e.first_use,
            )),
            None => Ok(()),
        }
    }
}

/// A table of a live configuration, found again by a reload.
struct Kept {
    name: Box<str>,
    kind: TypeId,
    size: u64,
    key: Box<str>,
    table: Weak<dyn Any + Send + Sync>,
}

/// The table for a zone being declared: the one of a live configuration
/// with the same kind, name and size (whose key must be the same, as nginx
/// refuses), else a new one.
fn kept_table<T: Node>(
    name: &str,
    size: u64,
    key: &Template,
    d: &Directive,
) -> Result<Arc<Mutex<Table<T>>>, ConfError> {
    static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    kept.retain(|k| k.table.strong_count() > 0);
    let kind = TypeId::of::<T>();
    let old = kept
        .iter()
        .rev()
        .filter(|k| k.kind == kind && &*k.name == name && k.size == size)
        .find_map(|k| Some((k, k.table.upgrade()?)));
    if let Some((k, table)) = old {
        if &*k.key != key.source() {
            return Err(ConfError::new(
                format!(
                    "{} \"{name}\" uses the \"{}\" key while previously it used the \"{}\" key",
                    T::DIRECTIVE,
                    key.source(),
                    k.key
                ),
                &d.span,
            ));
        }
        return Ok(table.downcast::<Mutex<Table<T>>>().expect("kind checked"));
    }
    let table = Arc::new(Mutex::new(Table::<T>::new(size)));
    let any: Arc<dyn Any + Send + Sync> = table.clone();
    kept.push(Kept {
        name: name.into(),
        kind,
        size,
        key: key.source().into(),
        table: Arc::downgrade(&any),
    });
    Ok(table)
}

/// `zone=NAME:SIZE` of a `…_zone` directive.
pub fn parse_zone(d: &Directive, arg: &str) -> Result<(String, u64), ConfError> {
    let v = arg.strip_prefix("zone=").unwrap_or(arg);
    let err = |m: String| ConfError::new(m, &d.span);
    let Some((name, size)) = v.split_once(':') else {
        return Err(err(format!("invalid zone size \"{arg}\"")));
    };
    if name.is_empty() {
        return Err(err(format!("\"{}\" must have \"zone\" parameter", d.name)));
    }
    let size = parse_size(size).ok_or_else(|| err(format!("invalid zone size \"{arg}\"")))?;
    if size < MIN_SIZE {
        return Err(err(format!("zone \"{arg}\" is too small")));
    }
    Ok((name.to_string(), size))
}

/// The key of a `…_zone` directive (text with variables).
pub fn parse_key(d: &Directive, vars: &mut Vars) -> Result<Template, ConfError> {
    crate::conf::values::template(d, 0, vars)
}

/// `…_status CODE`: 400 to 599.
pub fn parse_status(d: &Directive) -> Result<u16, ConfError> {
    match d.arg(0).parse::<u16>() {
        Ok(n) if (400..=599).contains(&n) => Ok(n),
        _ => Err(ConfError::new("value must be between 400 and 599", &d.span)),
    }
}

/// `…_log_level info | notice | warn | error`.
pub fn parse_log_level(d: &Directive) -> Result<Level, ConfError> {
    match d.arg(0) {
        "info" => Ok(Level::Info),
        "notice" => Ok(Level::Notice),
        "warn" => Ok(Level::Warn),
        "error" => Ok(Level::Error),
        v => Err(ConfError::new(format!("invalid value \"{v}\""), &d.span)),
    }
}

/// `…_dry_run on | off`.
pub fn parse_dry_run(d: &Directive) -> Result<bool, ConfError> {
    flag(d, 0)
}

/// What limit_req or limit_conn decided for a request (`$limit_req_status`,
/// `$limit_conn_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Passed,
    Delayed,
    Rejected,
    DelayedDryRun,
    RejectedDryRun,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "PASSED",
            Status::Delayed => "DELAYED",
            Status::Rejected => "REJECTED",
            Status::DelayedDryRun => "DELAYED_DRY_RUN",
            Status::RejectedDryRun => "REJECTED_DRY_RUN",
        }
    }

    /// `Rejected`, or its dry-run twin.
    pub fn rejected(dry_run: bool) -> Status {
        if dry_run {
            Status::RejectedDryRun
        } else {
            Status::Rejected
        }
    }
}

/// Write a limit's line to the error log at a configured level, with the
/// request's context as nginx adds it.
pub fn log(level: Level, req: &crate::core::request::Request<'_>, msg: fmt::Arguments) {
    if crate::core::errlog::enabled(level) {
        crate::core::errlog::log(level, format_args!("{msg}{}", req.log_context()));
    }
}

/// The shared-memory zones of limit_req and limit_conn: every zone a
/// directive references must be declared by the end of the load.
pub static MODULE: Module = Module {
    name: "zone",
    hooks: Hooks {
        loaded: Some(|env| match env.ext.remove::<Declared>() {
            Some(d) => d.finish(),
            None => Ok(()),
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct N(u32);
    impl Node for N {
        const BASE: usize = 36;
        const DIRECTIVE: &'static str = "test_zone";
        type Conf = ();
    }

    #[derive(Debug)]
    struct Other;
    impl Node for Other {
        const BASE: usize = 80;
        const DIRECTIVE: &'static str = "other_zone";
        type Conf = ();
    }

    fn dir(name: &str, args: &[&str]) -> Directive {
        Directive::test(name, args, 4)
    }

    #[test]
    fn costs_round_like_the_slab_allocator() {
        assert_eq!(Table::<N>::cost(4), 64);
        assert_eq!(Table::<N>::cost(16), 64);
        assert_eq!(Table::<N>::cost(29), 128);
        assert_eq!(Table::<Other>::cost(4), 128);
        // 1m: 16384 limit_conn states, 8192 limit_req states for IPv4 keys.
        assert_eq!((1 << 20) / Table::<N>::cost(4), 16384);
        assert_eq!((1 << 20) / Table::<Other>::cost(4), 8192);
    }

    #[test]
    fn full_table_evicts_least_recently_used() {
        let mut t = Table::<N>::new(256); // four 64-byte entries
        for k in [b"a", b"b", b"c", b"d"] {
            assert!(t.insert(k, N(0), |_| true).is_some());
        }
        t.get(b"a").unwrap().0 = 7; // a is now the most recently used
        assert!(t.insert(b"e", N(0), |_| true).is_some());
        assert_eq!(t.len(), 4);
        assert!(t.get(b"b").is_none(), "b was the least recently used");
        assert_eq!(t.get(b"a").unwrap().0, 7);
        // Nothing may go: the insert fails and changes nothing.
        assert!(t.insert(b"f", N(0), |_| false).is_none());
        assert_eq!(t.len(), 4);
        // A longer key costs more: two old entries go for it.
        assert!(t.insert(&[b'x'; 40], N(0), |_| true).is_some());
        assert_eq!(t.len(), 3);
        t.remove(&[b'x'; 40]);
        t.remove(b"nope");
        assert_eq!((t.len(), t.used), (2, 128));
        // expire stops at the first entry it may not remove.
        t.get(b"a").unwrap().0 = 1;
        t.expire(5, |n| n.0 == 0);
        assert_eq!(t.len(), 1);
        t.expire(5, |n| n.0 == 0);
        assert_eq!(t.len(), 1);
        t.expire(1, |_| true);
        assert!(t.is_empty() && t.used == 0);
    }

    #[test]
    fn declarations_and_references() {
        let key = || Template::compile("$remote_addr", &mut Vars::new(&[])).unwrap();
        let zone = |s: &str| {
            let d = dir("test_zone", &["$remote_addr", s]);
            parse_zone(&d, s).map(|z| (d, z))
        };
        let mut reg = Declared::default();
        let r = dir("limit", &["zone=zt_a"]);
        // A reference may come first.
        let early = reg.reference::<N>("zt_a", &r).unwrap();
        let (d, z) = zone("zone=zt_a:32k").unwrap();
        reg.declare::<N>(&d, z, key(), ()).unwrap();
        let late = reg.reference::<N>("zt_a", &r).unwrap();
        assert!(Arc::ptr_eq(early.get(), late.get()));
        assert_eq!(early, late);
        assert_eq!(&*early.get().name, "zt_a");

        let (d, z) = zone("zone=zt_a:64k").unwrap();
        let e = reg.declare::<N>(&d, z, key(), ()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the size 65536 of shared memory zone \"zt_a\" conflicts with already declared size 32768 in t.conf:4"
        );
        let (d, z) = zone("zone=zt_a:32k").unwrap();
        let e = reg.declare::<N>(&d, z, key(), ()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "test_zone \"zt_a\" is already bound to key \"$remote_addr\" in t.conf:4"
        );
        let e = reg.reference::<Other>("zt_a", &r).unwrap_err();
        assert!(
            e.to_string()
                .contains("already declared for a different use")
        );
        reg.reference::<N>("zt_missing", &r).unwrap();
        assert_eq!(
            reg.finish().unwrap_err().to_string(),
            "zero size shared memory zone \"zt_missing\" in t.conf:4"
        );

        for (bad, msg) in [
            ("zone=x", "invalid zone size \"zone=x\""),
            ("zone=x:", "invalid zone size \"zone=x:\""),
            ("zone=x:1q", "invalid zone size \"zone=x:1q\""),
            ("zone=:1m", "\"test_zone\" must have \"zone\" parameter"),
            ("zone=x:16k", "zone \"zone=x:16k\" is too small"),
        ] {
            let e = zone(bad).err().unwrap().to_string();
            assert_eq!(e, format!("{msg} in t.conf:4"));
        }
    }

    #[test]
    fn tables_outlive_a_reload_with_the_same_name_size_and_key() {
        let declare = |reg: &mut Declared, size: &str, key: &str| {
            let arg = format!("zone=zt_keep:{size}");
            let d = dir("test_zone", &[key, &arg]);
            let z = parse_zone(&d, &arg).unwrap();
            reg.declare::<N>(
                &d,
                z,
                Template::compile(key, &mut Vars::new(&[])).unwrap(),
                (),
            )?;
            Ok::<_, ConfError>(reg.reference::<N>("zt_keep", &d).unwrap())
        };
        let mut first = Declared::default();
        let a = declare(&mut first, "32k", "$uri").unwrap();
        a.get().lock().insert(b"k", N(3), |_| true);
        // The same zone in the next configuration: the same table.
        let mut second = Declared::default();
        let b = declare(&mut second, "32k", "$uri").unwrap();
        assert!(a.get().shares_table(b.get()));
        assert_eq!(b.get().lock().get(b"k").unwrap().0, 3);
        // Another key for the same zone is refused while it lives.
        let mut third = Declared::default();
        let e = declare(&mut third, "32k", "$args").unwrap_err();
        assert_eq!(
            e.to_string(),
            "test_zone \"zt_keep\" uses the \"$args\" key while previously it used the \"$uri\" key in t.conf:4"
        );
        // Another size: a new, empty table.
        let mut fourth = Declared::default();
        let c = declare(&mut fourth, "64k", "$args").unwrap();
        assert!(!c.get().shares_table(a.get()));
        assert!(c.get().lock().is_empty());
        // Once no configuration holds it, the table is gone.
        drop((first, second, a, b));
        let mut fifth = Declared::default();
        let d = declare(&mut fifth, "32k", "$args").unwrap();
        assert!(d.get().lock().is_empty());
    }

    #[test]
    fn small_settings() {
        assert_eq!(parse_status(&dir("x_status", &["429"])).unwrap(), 429);
        for bad in ["399", "600", "abc"] {
            assert!(parse_status(&dir("x_status", &[bad])).is_err());
        }
        assert_eq!(parse_log_level(&dir("x", &["warn"])).unwrap(), Level::Warn);
        assert_eq!(
            parse_log_level(&dir("x", &["debug"]))
                .unwrap_err()
                .to_string(),
            "invalid value \"debug\" in t.conf:4"
        );
        assert_eq!(Status::rejected(true).as_str(), "REJECTED_DRY_RUN");
    }
}
