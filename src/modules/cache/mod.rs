//! The HTTP cache of the proxy and FastCGI handlers, as nginx's
//! `proxy_cache`/`fastcgi_cache` (docs/cache.md).
//!
//! A handler wraps its work in two calls: [`lookup`] before it asks the
//! upstream (a fresh entry is answered from the cache, like a static file:
//! sendfile, ranges, conditional requests), and [`Fill::store`] with the
//! response it made (a cacheable reply is written to the cache and answered
//! from there; a failed or refused one may give way to a stale entry).
//! While the upstream is asked, the handler reads three things here:
//! [`drops_header`] (the client's conditional and range fields are not
//! sent), [`revalidation`] (`If-Modified-Since`/`If-None-Match` of an
//! expired entry) and [`origin`] (the reply's fields as received, before
//! any is hidden: what decides caching).
//!
//! - `conf.rs`: the directives, for each prefix; the keys zones of a load.
//! - `index.rs`: a keys zone's index shared by workers and reloads; loader
//!   and manager.
//! - `store.rs`: the entry file format.

pub mod conf;
pub mod index;
pub mod store;

use crate::core::message::head::Method;
use crate::core::message::response::{Body, BodyStream, CutShort, Response, Value};
use crate::core::module::{Hooks, Module, VarDef};
use crate::core::request::{BoxFuture, Request};
use crate::modules::static_files::{conditional, range};
use bytes::Bytes;
use conf::{CacheConf, CacheLoc, Kind, Use, stale};
use index::{CacheZone, unix_now};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use store::{Entry, Meta};

/// `$upstream_cache_status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Miss,
    Bypass,
    Expired,
    Stale,
    Updating,
    Revalidated,
    Hit,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Miss => "MISS",
            Status::Bypass => "BYPASS",
            Status::Expired => "EXPIRED",
            Status::Stale => "STALE",
            Status::Updating => "UPDATING",
            Status::Revalidated => "REVALIDATED",
            Status::Hit => "HIT",
        }
    }
}

struct StatusVar(Cell<Status>);

fn set_status(req: &Request<'_>, z: &CacheZone, s: Status) {
    let c = &z.shared.counters;
    let counter = |s: Status| match s {
        Status::Miss => &c.miss,
        Status::Bypass => &c.bypass,
        Status::Expired => &c.expired,
        Status::Stale => &c.stale,
        Status::Updating => &c.updating,
        Status::Revalidated => &c.revalidated,
        Status::Hit => &c.hit,
    };
    // A request is counted once, under its last status.
    counter(s).fetch_add(1, Ordering::Relaxed);
    match req.state.ext.get::<StatusVar>() {
        Some(v) => {
            counter(v.0.replace(s)).fetch_sub(1, Ordering::Relaxed);
        }
        None => req.state.ext.insert(Rc::new(StatusVar(Cell::new(s)))),
    }
}

fn upstream_cache_status(req: &Request<'_>, _: &str, out: &mut Vec<u8>) {
    if let Some(v) = req.state.ext.get::<StatusVar>() {
        out.extend_from_slice(v.0.get().as_str().as_bytes());
    }
}

/// Was the reply looked up in a cache that may keep it (nginx's
/// `u->cacheable`): a `$upstream_cache_status` other than BYPASS.
pub fn cacheable(req: &Request<'_>) -> bool {
    req.state
        .ext
        .get::<StatusVar>()
        .is_some_and(|v| v.0.get() != Status::Bypass)
}

/// A reply head as the upstream sent it.
#[derive(Debug, Default)]
struct Origin {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Origin {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What the handler reads while a reply that may be cached is fetched.
#[derive(Debug, Default)]
struct Pending {
    revalidate: Vec<(&'static str, String)>,
    /// The client's conditional and range fields are left out (the reply
    /// may be stored).
    drop: bool,
    origin: RefCell<Option<Origin>>,
}

/// In the store of the clone of a request that was sent an expired entry:
/// it fetches the entry anew in the background, under the mark its maker
/// took.
struct Updater;

/// The client's fields never sent upstream when the reply may be cached
/// (the cache answers them itself), as nginx's `*_cache` defaults.
const DROPPED: &[&str] = &[
    "if-modified-since",
    "if-unmodified-since",
    "if-none-match",
    "if-match",
    "range",
    "if-range",
];

/// Is the client's field `name` left out of the upstream request?
pub fn drops_header(req: &Request<'_>, name: &[u8]) -> bool {
    req.state.ext.get::<Pending>().is_some_and(|p| p.drop)
        && DROPPED
            .iter()
            .any(|d| d.as_bytes().eq_ignore_ascii_case(name))
}

/// Fields asking the upstream whether an expired entry is still current.
pub fn revalidation(req: &Request<'_>) -> Vec<(&'static str, String)> {
    req.state
        .ext
        .get::<Pending>()
        .map(|p| p.revalidate.clone())
        .unwrap_or_default()
}

/// The handler received a reply head: its status and fields as sent.
pub fn origin<'h>(
    req: &Request<'_>,
    status: u16,
    headers: impl Iterator<Item = (&'h str, &'h str)>,
) {
    if let Some(p) = req.state.ext.get::<Pending>() {
        *p.origin.borrow_mut() = Some(Origin {
            status,
            headers: headers
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        });
    }
}

/// What [`lookup`] found.
pub enum Lookup<K: Kind> {
    /// Answered from the cache.
    Serve(Response),
    /// Ask the upstream; with a fill when the reply may be cached.
    Fetch(Option<Fill<K>>),
}

/// A reply being fetched for the cache.
pub struct Fill<K: Kind> {
    zone: Arc<CacheZone>,
    key: Vec<u8>,
    /// The entry the reply goes to (the key's, or its variant's).
    hash: [u8; 16],
    /// An expired entry of the key.
    stale: Option<Rc<Entry>>,
    /// The reply may be stored.
    store: bool,
    /// This request holds the entry's `filling` mark.
    holding: bool,
    status: Status,
    revalidating: bool,
    _k: std::marker::PhantomData<K>,
}

impl<K: Kind> Drop for Fill<K> {
    fn drop(&mut self) {
        self.release();
    }
}

/// A value of `*_cache_bypass` / `*_no_cache` that is set.
fn any_set(req: &Request<'_>, ts: &[crate::core::vars::Template]) -> bool {
    let mut v = Vec::new();
    ts.iter().any(|t| {
        v.clear();
        t.render(req, &mut v);
        !v.is_empty() && v != b"0"
    })
}

/// The MD5 of the request's values of the `vary` fields.
fn variant(req: &Request<'_>, vary: &str) -> [u8; 16] {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for name in vary.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let mut p = name.as_bytes().to_vec();
        p.push(b':');
        // The values, with whitespace and empty elements dropped.
        let mut first = true;
        for (n, v) in req.head.headers() {
            if n.eq_ignore_ascii_case(name.as_bytes()) {
                for e in v.split(|&b| b == b',').map(trim).filter(|e| !e.is_empty()) {
                    if !first {
                        p.push(b',');
                    }
                    first = false;
                    p.extend_from_slice(e);
                }
            }
        }
        p.push(b'\n');
        parts.push(p);
    }
    let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    store::md5(&refs)
}

/// Does this location cache replies?
pub fn enabled<K: Kind>(req: &Request<'_>) -> bool {
    !matches!(conf::<K>(req).cache, Use::Off)
}

fn trim(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |i| i + 1);
    &b[s..e]
}

fn conf<'r, K: Kind>(req: &'r Request<'_>) -> &'r CacheLoc {
    &req.conf.get::<CacheConf<K>>().0
}

/// The cache of this location, if any, and the entry of this request.
pub async fn lookup<K: Kind>(
    req: &mut Request<'_>,
    default_key: impl FnOnce(&Request<'_>) -> Option<Vec<u8>>,
) -> Lookup<K> {
    let c = conf::<K>(req);
    let zone = match &c.cache {
        Use::Off => return Lookup::Fetch(None),
        Use::Zone(z) => z.get().clone(),
        Use::Var(t, all) => {
            let mut v = Vec::new();
            t.render(req, &mut v);
            if v.is_empty() {
                return Lookup::Fetch(None);
            }
            match all
                .get()
                .and_then(|all| all.iter().find(|z| z.name.as_bytes() == v))
            {
                Some(z) => z.clone(),
                None => {
                    crate::error_log!(
                        Error,
                        "cache \"{}\" not found{}",
                        String::from_utf8_lossy(&v),
                        req.log_context()
                    );
                    return Lookup::Serve(req.error(500));
                }
            }
        }
    };
    // A range far into the reply is asked of the upstream, not stored.
    let far = c.max_range_offset.is_some_and(|max| {
        req.head
            .header("range")
            .is_some_and(|r| range_start(r).is_none_or(|s| s >= max))
    });
    let key = match &c.key {
        Some(t) => {
            let mut v = Vec::new();
            t.render(req, &mut v);
            Some(v)
        }
        None => default_key(req),
    };
    let Some(key) = key else {
        crate::error_log!(
            Error,
            "no \"{}_cache_key\" for \"{}_cache\"{}",
            K::PREFIX,
            K::PREFIX,
            req.log_context()
        );
        return Lookup::Serve(req.error(500));
    };
    if any_set(req, &c.purge) {
        return Lookup::Serve(Response::new(purge(zone, key).await));
    }
    let m = match req.method() {
        Method::Get => conf::GET,
        Method::Head => conf::HEAD,
        Method::Post => conf::POST,
        _ => 0,
    };
    if c.methods & m == 0 {
        return Lookup::Fetch(None);
    }
    if c.convert_head && req.method() == Method::Head {
        // The whole reply is fetched and stored; the client gets its head.
        req.state.method = Some(Method::Get);
    }
    let main = store::md5(&[&key]);
    let mut fill = Fill::<K> {
        zone,
        key,
        hash: main,
        stale: None,
        store: !far,
        holding: false,
        status: Status::Miss,
        revalidating: false,
        _k: std::marker::PhantomData,
    };
    let c = conf::<K>(req);
    if any_set(req, &c.bypass) {
        fill.status = Status::Bypass;
        return fill.fetch(req);
    }
    let deadline = std::time::Instant::now() + c.lock_timeout;
    loop {
        match fill.find(req, c) {
            Found::Fresh(e) => return Lookup::Serve(serve(req, &fill.zone, e, Status::Hit)),
            Found::Updating(e) => {
                return Lookup::Serve(serve(req, &fill.zone, e, Status::Updating));
            }
            Found::Background(e) => {
                // The clone inherits the mark; refused (too many
                // subrequests), the entry is left for the next request.
                if req
                    .subrequests()
                    .background_clone(Rc::new(Updater))
                    .is_err()
                    && let Some(n) = fill.zone.shared.lock().get(&fill.hash)
                {
                    n.filling = None;
                }
                return Lookup::Serve(serve(req, &fill.zone, e, Status::Stale));
            }
            Found::Wait if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            // Waited too long: fetched, not stored.
            Found::Wait => {
                fill.store = false;
                return fill.fetch(req);
            }
            Found::Fetch => {
                if let Some(e) = &fill.stale {
                    fill.status = Status::Expired;
                    // Only a 200 or 206 is asked for again conditionally.
                    if c.revalidate && matches!(e.meta.status, 200 | 206) && !e.meta.error {
                        fill.revalidating = true;
                    }
                }
                return fill.fetch(req);
            }
        }
    }
}

/// `*_cache_purge`: remove the entries of `key`, every variant of it, or,
/// for a key ending in `*`, every entry whose key starts with what precedes
/// it (the folder is read off the worker's thread). 204 when some went,
/// 404 when none matched.
async fn purge(zone: Arc<CacheZone>, key: Vec<u8>) -> u16 {
    let removed = tokio::task::spawn_blocking(move || purge_files(&zone, &key))
        .await
        .unwrap_or(0);
    if removed > 0 { 204 } else { 404 }
}

fn purge_files(z: &CacheZone, key: &[u8]) -> usize {
    let prefix = key.strip_suffix(b"*");
    if prefix.is_none() {
        // The key's own entry says whether variants of it exist.
        let h = store::md5(&[key]);
        match Entry::open(&z.path(&h)) {
            Ok(e) if e.meta.key == key && e.meta.vary.is_empty() => {
                z.remove(&h);
                return 1;
            }
            Ok(e) if e.meta.key == key => {}
            _ => return 0,
        }
    }
    let mut removed = 0;
    index::walk(&z.dir, |path, name| {
        let Some(h) = store::unhex(name) else {
            return;
        };
        let matches = Entry::open(path).is_ok_and(|e| match prefix {
            Some(p) => e.meta.key.starts_with(p),
            None => e.meta.key == key,
        });
        if matches {
            z.remove(&h);
            removed += 1;
        }
    });
    removed
}

thread_local! {
    /// Entries this worker opened, by zone and hash, with the generation and
    /// expiry of the index node they were opened at: a hit on one of them
    /// opens no file and reads no head (256 at most, each an open file).
    static OPENED: RefCell<Opened> =
        RefCell::new(lru::LruCache::new(std::num::NonZeroUsize::new(256).expect("not zero")));
}

/// (zone, hash) → ((generation, expiry), entry).
type Opened = lru::LruCache<(usize, [u8; 16]), ((u64, i64), Rc<Entry>)>;

/// The entry file of `h` (`file_id`: its node's generation and expiry): one
/// this worker opened before for the same file and expiry, else opened now
/// (and kept, when the index knows it).
fn opened(
    z: &Arc<CacheZone>,
    h: &[u8; 16],
    file_id: (u64, i64),
    indexed: bool,
) -> std::io::Result<Rc<Entry>> {
    let key = (Arc::as_ptr(z) as usize, *h);
    if indexed
        && let Some((id, e)) = OPENED.with(|o| o.borrow_mut().get(&key).cloned())
        && id == file_id
    {
        return Ok(e);
    }
    let mut e = Entry::open(&z.path(h))?;
    let keep = indexed && e.valid_until == file_id.1;
    // A small body is kept in memory with it, as the open file cache keeps
    // a small static file's: the head and body then leave in one write.
    if keep && e.body_len <= crate::modules::static_files::cache::SMALL_BODY {
        let mut b = vec![0; e.body_len as usize];
        if std::os::unix::fs::FileExt::read_exact_at(&*e.file, &mut b, e.body_off).is_ok() {
            e.body = Some(Bytes::from(b));
        }
    }
    let e = Rc::new(e);
    if keep {
        OPENED.with(|o| o.borrow_mut().put(key, (file_id, e.clone())));
    }
    Ok(e)
}

/// The first offset a `Range` asks for: 0 when it does not parse, `None`
/// for a suffix (`bytes=-N`, an offset not known before the reply).
fn range_start(r: &[u8]) -> Option<u64> {
    let s = String::from_utf8_lossy(r);
    let Some(first) = s
        .trim()
        .strip_prefix("bytes=")
        .and_then(|s| s.split(',').next())
    else {
        return Some(0);
    };
    let start = first.trim().split('-').next().unwrap_or("").trim();
    match start {
        "" => None,
        n => Some(n.parse().unwrap_or(0)),
    }
}

enum Found {
    Fresh(Rc<Entry>),
    /// Expired, being fetched by another request, and may be sent stale.
    Updating(Rc<Entry>),
    /// Expired and may be sent stale while a background subrequest fetches
    /// it anew (`*_cache_background_update`); this request holds its mark.
    Background(Rc<Entry>),
    /// Being filled by another request under `*_cache_lock`.
    Wait,
    Fetch,
}

impl<K: Kind> Fill<K> {
    fn fetch(self, req: &Request<'_>) -> Lookup<K> {
        set_status(req, &self.zone, self.status);
        let mut revalidate = Vec::new();
        if self.revalidating
            && let Some(e) = &self.stale
        {
            if let Some(lm) = e.meta.header("last-modified") {
                revalidate.push(("If-Modified-Since", lm.to_string()));
            }
            if let Some(et) = e.meta.header("etag") {
                revalidate.push(("If-None-Match", et.to_string()));
            }
        }
        req.state.ext.insert(Rc::new(Pending {
            revalidate,
            drop: self.store,
            origin: RefCell::new(None),
        }));
        Lookup::Fetch(Some(self))
    }

    /// Look the key (or its variant) up in the index and on disk.
    fn find(&mut self, req: &Request<'_>, c: &CacheLoc) -> Found {
        let now = unix_now();
        let now_ms = crate::modules::zone::now_ms();
        let lock_age = c.lock_age.as_millis() as u64;
        for _ in 0..2 {
            let mut gone = Vec::new();
            let (exists, filling, file_id) = {
                let mut idx = self.zone.shared.lock();
                let n = idx.entry(&self.hash, now, &mut gone);
                n.access = now;
                n.uses = n.uses.saturating_add(1);
                if u64::from(n.uses) < c.min_uses {
                    self.store = false;
                }
                let filling = n
                    .filling
                    .is_some_and(|t| now_ms.saturating_sub(t.get()) < lock_age);
                (n.exists, filling, (n.generation, n.valid_until))
            };
            self.zone.remove_files(&gone);
            // Until the loader is done, a key it has not indexed yet may
            // have its file: tried (and checked whole) as the loader would.
            let cold = !exists && !self.zone.shared.loaded.load(Ordering::Acquire);
            let entry = match exists || cold {
                true => match opened(&self.zone, &self.hash, file_id, exists) {
                    Ok(e) if cold => match e.verify_body() {
                        Ok(()) if e.meta.key == self.key => {
                            self.zone
                                .shared
                                .lock()
                                .stored(&self.hash, e.size(), e.valid_until);
                            Some(e)
                        }
                        _ => None,
                    },
                    Err(_) if cold => None,
                    Ok(e) if e.meta.key == self.key => Some(e),
                    Ok(_) => None,
                    // Damaged (logged), or of an older format (a miss).
                    Err(e) => {
                        if e.kind() != std::io::ErrorKind::Unsupported {
                            let path = self.zone.path(&self.hash);
                            crate::error_log!(Crit, "cache file \"{}\": {e}", path.display());
                        }
                        self.zone.remove(&self.hash);
                        None
                    }
                },
                false => None,
            };
            if let Some(e) = entry {
                if !e.meta.vary.is_empty() {
                    let v = variant(req, &e.meta.vary);
                    if v != e.meta.variant {
                        if self.hash == store::md5(&[&self.key]) {
                            // Another variant: its own entry.
                            self.hash = store::md5(&[&self.hash, &v]);
                            self.uses_undo();
                            continue;
                        }
                        return self.claim(filling, c);
                    }
                }
                if e.valid_until > now {
                    return Found::Fresh(e);
                }
                // Sent stale while fetched anew: `updating`, or within the
                // reply's stale-while-revalidate.
                let updating = c.use_stale & stale::UPDATING != 0
                    || now <= e.valid_until + i64::from(e.meta.stale_updating);
                let updater = req.state.ext.get::<Updater>().is_some();
                if updating && !updater {
                    if filling {
                        return Found::Updating(e);
                    }
                    if c.background_update && self.store {
                        if let Some(n) = self.zone.shared.lock().get(&self.hash) {
                            n.fill_from(now_ms);
                        }
                        return Found::Background(e);
                    }
                }
                self.stale = Some(e);
            }
            return self.claim(filling, c);
        }
        self.claim(false, c)
    }

    /// The variant lookup counts the request once.
    fn uses_undo(&self) {
        if let Some(n) = self.zone.shared.lock().get(&store::md5(&[&self.key])) {
            n.uses = n.uses.saturating_sub(1);
        }
    }

    /// Fetch: take the entry's filling mark (unless another request holds it
    /// and the lock says to wait).
    fn claim(&mut self, filling: bool, c: &CacheLoc) -> Found {
        if filling && c.lock && self.stale.is_none() {
            if let Some(n) = self.zone.shared.lock().get(&self.hash) {
                n.uses = n.uses.saturating_sub(1);
            }
            return Found::Wait;
        }
        if self.store {
            if let Some(n) = self.zone.shared.lock().get(&self.hash) {
                n.fill_from(crate::modules::zone::now_ms());
            }
            self.holding = true;
        }
        Found::Fetch
    }

    fn release(&mut self) {
        if self.holding {
            self.holding = false;
            if let Some(n) = self.zone.shared.lock().get(&self.hash) {
                n.filling = None;
            }
        }
    }

    /// The handler's response: stored and answered from the cache when it
    /// may be cached, else passed on (or an expired entry in its place,
    /// `*_cache_use_stale`).
    pub async fn store(mut self, req: &Request<'_>, resp: Response) -> Response {
        let pending = req.state.ext.get::<Pending>();
        let origin = pending.and_then(|p| p.origin.borrow_mut().take());
        let c = conf::<K>(req);
        let Some(origin) = origin else {
            // No reply: the upstream failed (or the request ended early).
            let cond = match resp.status {
                504 => stale::TIMEOUT,
                502 => stale::ERROR | stale::INVALID_HEADER,
                500 => stale::ERROR,
                _ => 0,
            };
            return self.stale_or(req, c, cond, resp);
        };
        if c.use_stale & stale::of_status(origin.status) != 0 {
            return self.stale_or(req, c, stale::of_status(origin.status), resp);
        }
        if resp.status == 304 && self.revalidating && self.stale.is_some() {
            return self.revalidated(req, c, &origin);
        }
        if !self.store
            || any_set(req, &c.no_cache)
            || matches!(resp.body, Body::File { .. } | Body::Multipart { .. })
        {
            self.release();
            return resp;
        }
        let Some(valid_until) = validity(c, &origin, resp.status) else {
            self.release();
            return resp;
        };
        // An error page made in place of the reply (`*_intercept_errors`):
        // stored as the status alone, answered by the error page again.
        let error = resp.status >= 300 && req.is_generated(resp.status);
        if error {
            let e = Response::new(resp.status);
            let _ = self.write(req, c, &origin, e, valid_until, true).await;
            return resp;
        }
        self.write(req, c, &origin, resp, valid_until, false).await
    }

    fn stale_or(mut self, req: &Request<'_>, c: &CacheLoc, cond: u16, resp: Response) -> Response {
        self.release();
        // stale-if-error covers a failed fetch, not a reply's status.
        let failed = stale::ERROR | stale::TIMEOUT | stale::INVALID_HEADER;
        match self.stale.take() {
            Some(e)
                if c.use_stale & cond != 0
                    || (cond & failed != 0
                        && unix_now() <= e.valid_until + i64::from(e.meta.stale_error)) =>
            {
                serve(req, &self.zone, e, Status::Stale)
            }
            _ => resp,
        }
    }

    /// A 304 to an expired entry's validators: fresh again.
    fn revalidated(mut self, req: &Request<'_>, c: &CacheLoc, origin: &Origin) -> Response {
        let e = self.stale.take().expect("checked by the caller");
        self.release();
        // Fresh for what the 304 says, else for what the stored reply's
        // fields say as if it came now (nginx reads them again), else for
        // `*_cache_valid`; not cached when one of them says so.
        let stored = Origin {
            status: e.meta.status,
            headers: e.meta.headers.clone(),
        };
        let until = match header_validity(c, origin).or_else(|| header_validity(c, &stored)) {
            Some(v) => v,
            None => valid_for(c, e.meta.status),
        };
        if let Some(until) = until {
            let path = self.zone.path(&self.hash);
            if store::set_valid_until(&path, until).is_ok()
                && let Some(n) = self.zone.shared.lock().get(&self.hash)
            {
                n.valid_until = until;
            }
        }
        serve(req, &self.zone, e, Status::Revalidated)
    }

    /// Write the reply to the cache, then answer from the entry.
    async fn write(
        mut self,
        req: &Request<'_>,
        c: &CacheLoc,
        origin: &Origin,
        mut resp: Response,
        valid_until: i64,
        error: bool,
    ) -> Response {
        let vary = match c.ignore_headers & conf::ignore::VARY {
            0 => normalize_vary(origin),
            _ => String::new(),
        };
        // A reply without Vary is the key's own entry, standing for every
        // variant. One with Vary is its variant's entry, and the key's too
        // (the same file linked): the latest reply tells later requests
        // which fields select a variant.
        let main = store::md5(&[&self.key]);
        let v = match vary.is_empty() {
            true => [0; 16],
            false => variant(req, &vary),
        };
        let target = match vary.is_empty() {
            true => main,
            false => store::md5(&[&main, &v]),
        };
        if target != self.hash {
            self.release();
            self.hash = target;
        }
        let stale = stale_secs(c, origin);
        let meta = Meta {
            key: self.key.clone(),
            variant: v,
            status: resp.status,
            error,
            stale_updating: stale.0,
            stale_error: stale.1,
            vary,
            content_type: resp.content_type.as_ref().map(|v| v.as_str().to_string()),
            headers: resp
                .headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_str().to_string()))
                .collect(),
            override_charset: resp.override_charset().map(str::to_string),
        };
        let mut w = match store::Writer::create(&self.zone.dir, &meta) {
            Ok(w) => w,
            Err(e) => {
                crate::error_log!(
                    Crit,
                    "cache \"{}\": temporary file in \"{}\" not made: {e}",
                    self.zone.name,
                    self.zone.dir.display()
                );
                self.release();
                return resp;
            }
        };
        let declared = resp.body.size();
        let body = std::mem::replace(&mut resp.body, Body::Empty);
        let read = match body {
            Body::Empty => Ok(()),
            Body::Bytes(b) => w.write(&b),
            Body::Stream { mut stream, .. } => loop {
                match stream.next().await {
                    Ok(Some(p)) => {
                        if let Err(e) = w.write(&p) {
                            break Err(e);
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
            },
            Body::File { .. } | Body::Multipart { .. } => unreachable!("not stored"),
        };
        // The reply to HEAD (`*_cache_convert_head off`) has a length and no body.
        let complete = read.is_ok()
            && (req.method() == Method::Head || declared.is_none_or(|n| n == w.body_len()));
        if !complete {
            // The reply broke off: the client gets what came, then the end.
            self.release();
            resp.body = partial(&w, declared);
            return resp;
        }
        let path = self.zone.path(&self.hash);
        match w.finish(&path, valid_until, unix_now()) {
            Ok(e) => {
                let linked =
                    self.hash != main && store::link(&path, &self.zone.path(&main)).is_ok();
                let mut gone = Vec::new();
                {
                    let mut idx = self.zone.shared.lock();
                    for h in [self.hash, main] {
                        if h == self.hash || linked {
                            idx.entry(&h, unix_now(), &mut gone);
                            idx.stored(&h, e.size(), valid_until);
                        }
                    }
                }
                self.zone.remove_files(&gone);
                self.zone
                    .shared
                    .counters
                    .stored
                    .fetch_add(1, Ordering::Relaxed);
                self.release();
                let status = self.status;
                serve(req, &self.zone, Rc::new(e), status)
            }
            Err(e) => {
                crate::error_log!(Crit, "cache file \"{}\" not written: {e}", path.display());
                self.release();
                req.error(500)
            }
        }
    }
}

/// The `Vary` names of a reply, lowercase, comma-separated.
fn normalize_vary(o: &Origin) -> String {
    let mut names: Vec<String> = Vec::new();
    for (n, v) in &o.headers {
        if n.eq_ignore_ascii_case("vary") {
            for name in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                names.push(name.to_ascii_lowercase());
            }
        }
    }
    names.join(",")
}

/// Until when a reply stays fresh, as nginx decides it; `None`: not cached.
/// `X-Accel-Expires` first, then `Cache-Control`, then `Expires`, then
/// `*_cache_valid` for `status`; a `Set-Cookie` or `Vary: *` is never cached.
fn validity(c: &CacheLoc, o: &Origin, status: u16) -> Option<i64> {
    match header_validity(c, o) {
        Some(v) => v,
        None => valid_for(c, status),
    }
}

/// What a reply's fields say of its freshness: `Some(None)` not cached,
/// `Some(Some(t))` fresh until `t`, `None` nothing (`*_cache_valid` decides).
fn header_validity(c: &CacheLoc, o: &Origin) -> Option<Option<i64>> {
    use conf::ignore as ig;
    let now = unix_now();
    let on = |bit: u16| c.ignore_headers & bit == 0;
    if on(ig::SET_COOKIE) && o.header("set-cookie").is_some() {
        return Some(None);
    }
    if on(ig::VARY) && normalize_vary(o).split(',').any(|n| n == "*") {
        return Some(None);
    }
    if on(ig::X_ACCEL_EXPIRES)
        && let Some(v) = o.header("x-accel-expires")
    {
        let v = v.trim();
        let (abs, n) = match v.strip_prefix('@') {
            Some(n) => (true, n),
            None => (false, v),
        };
        let Ok(n) = n.parse::<i64>() else {
            return Some(None);
        };
        // An absolute time already past is stored expired, as nginx.
        return Some(match (abs, n) {
            (true, n) if n > 0 => Some(n),
            (false, n) if n > 0 => Some(now + n),
            _ => None,
        });
    }
    if on(ig::CACHE_CONTROL) {
        let mut max_age = None;
        let mut s_maxage = None;
        for (n, v) in &o.headers {
            if !n.eq_ignore_ascii_case("cache-control") {
                continue;
            }
            for d in v.split(',').map(str::trim) {
                let (name, val) = d.split_once('=').unwrap_or((d, ""));
                let name = name.trim().to_ascii_lowercase();
                let num = || val.trim().trim_matches('"').parse::<i64>().ok();
                match name.as_str() {
                    "no-cache" | "no-store" | "private" => return Some(None),
                    "max-age" => max_age = Some(num()),
                    "s-maxage" => s_maxage = Some(num()),
                    _ => {}
                }
            }
        }
        if let Some(n) = s_maxage.or(max_age) {
            return Some(n.filter(|&n| n > 0).map(|n| now + n));
        }
    }
    if on(ig::EXPIRES)
        && let Some(v) = o.header("expires")
    {
        return Some(conditional::http_date(v.as_bytes()).filter(|&t| t > now));
    }
    None
}

/// `*_cache_valid` for `status`.
fn valid_for(c: &CacheLoc, status: u16) -> Option<i64> {
    let t = c
        .valid
        .iter()
        .find(|(s, _)| *s == status)
        .or_else(|| c.valid.iter().find(|(s, _)| *s == 0))?
        .1;
    let secs = t.as_secs() as i64;
    (secs > 0).then_some(unix_now() + secs)
}

/// How long past expiry a reply may be sent stale while it is fetched anew,
/// and when fetching it fails: `Cache-Control`'s `stale-while-revalidate`
/// (both) and `stale-if-error` (the second), as nginx reads them.
fn stale_secs(c: &CacheLoc, o: &Origin) -> (u32, u32) {
    if c.ignore_headers & conf::ignore::CACHE_CONTROL != 0 {
        return (0, 0);
    }
    let (mut swr, mut sie) = (None, None);
    for (n, v) in &o.headers {
        if !n.eq_ignore_ascii_case("cache-control") {
            continue;
        }
        for d in v.split(',').map(str::trim) {
            let (name, val) = d.split_once('=').unwrap_or((d, ""));
            let num = || val.trim().trim_matches('"').parse::<u32>().unwrap_or(0);
            if name.trim().eq_ignore_ascii_case("stale-while-revalidate") {
                swr = Some(num());
            } else if name.trim().eq_ignore_ascii_case("stale-if-error") {
                sie = Some(num());
            }
        }
    }
    (swr.unwrap_or(0), sie.or(swr).unwrap_or(0))
}

/// An entry as the response: its status and fields, the body from the file
/// (sendfile), with conditional requests and ranges answered as for a
/// static file.
fn serve(req: &Request<'_>, z: &CacheZone, e: Rc<Entry>, status: Status) -> Response {
    set_status(req, z, status);
    let meta = &e.meta;
    if meta.error {
        return req.error(meta.status);
    }
    let mut headers: Vec<(&'static str, Value)> = Vec::with_capacity(e.fields.len() + 2);
    headers.extend(e.fields.iter().cloned());
    let ct = e.content_type.clone();
    let size = e.body_len;
    let file = e.file.clone();
    // A body kept in memory goes as it is; ranges are cut from the file
    // (several of them stay parts of it, which later filters — charset —
    // can still recode part by part).
    let mem = e
        .body
        .as_ref()
        .filter(|_| req.head.header("range").is_none());
    let body_at = |r: std::ops::Range<u64>| match (r.is_empty(), mem) {
        (true, _) => Body::Empty,
        (false, Some(b)) => Body::Bytes(b.slice(r.start as usize..r.end as usize)),
        (false, None) => Body::File {
            file: file.clone(),
            range: e.body_off + r.start..e.body_off + r.end,
        },
    };
    let mut resp = Response {
        status: meta.status,
        content_type: ct,
        headers,
        body: body_at(0..size),
        trailers: None,
        own: None,
    };
    resp.set_override_charset(meta.override_charset.as_deref().map(Box::from));
    if meta.status != 200 || !req.conditionals_apply() {
        return resp;
    }
    let mut resp = match conditional::answer(req, resp) {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    // A Content-Range of the reply's own never goes with a range.
    if req.head.header("range").is_some() {
        resp.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("content-range"));
    }
    range::of_reply(req, resp, true)
}

/// What was read of a reply that broke off: its bytes from the temporary
/// file (already unlinked), then an error so the connection ends short.
fn partial(w: &store::Writer, declared: Option<u64>) -> Body {
    let stream = Partial {
        file: w.reopen().ok(),
        off: w.body_off(),
        end: w.body_off() + w.body_len(),
    };
    Body::Stream {
        stream: Box::new(stream),
        len: declared,
    }
}

#[derive(Debug)]
struct Partial {
    file: Option<std::fs::File>,
    off: u64,
    end: u64,
}

impl BodyStream for Partial {
    fn next(&mut self) -> BoxFuture<'_, std::io::Result<Option<Bytes>>> {
        Box::pin(async move {
            let broke = || {
                CutShort::wrap(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "upstream reply broke off",
                ))
            };
            let Some(f) = &self.file else {
                return Err(broke());
            };
            if self.off >= self.end {
                return Err(broke());
            }
            let want = ((self.end - self.off) as usize).min(64 * 1024);
            let piece = crate::core::message::response::read_file_piece(f, self.off, want)?;
            self.off += piece.len() as u64;
            Ok(Some(piece))
        })
    }
}

fn metrics(e: &mut crate::core::metrics::Exposition) {
    let zones = index::live();
    if zones.is_empty() {
        return;
    }
    e.family(
        "vireo_cache_requests_total",
        "counter",
        "Requests a cache answered or passed on, by $upstream_cache_status.",
    );
    for z in &zones {
        let c = &z.shared.counters;
        for (s, v) in [
            ("HIT", &c.hit),
            ("MISS", &c.miss),
            ("EXPIRED", &c.expired),
            ("STALE", &c.stale),
            ("UPDATING", &c.updating),
            ("REVALIDATED", &c.revalidated),
            ("BYPASS", &c.bypass),
        ] {
            e.sample(
                "vireo_cache_requests_total",
                &[("zone", &z.name), ("status", s)],
                v.load(Ordering::Relaxed),
            );
        }
    }
    type Figure = fn(&CacheZone) -> u64;
    let figures: [(&str, &str, &str, Figure); 4] = [
        (
            "vireo_cache_stored_total",
            "counter",
            "Replies written to a cache.",
            |z| z.shared.counters.stored.load(Ordering::Relaxed),
        ),
        (
            "vireo_cache_evicted_total",
            "counter",
            "Entries a cache removed (inactive, max_size, min_free, full keys zone).",
            |z| z.shared.counters.evicted.load(Ordering::Relaxed),
        ),
        (
            "vireo_cache_size_bytes",
            "gauge",
            "Bytes of a cache's entry files.",
            |z| z.shared.lock().bytes,
        ),
        (
            "vireo_cache_keys",
            "gauge",
            "Keys in a cache's keys zone.",
            |z| z.shared.lock().len() as u64,
        ),
    ];
    for (name, kind, help, get) in figures {
        e.family(name, kind, help);
        for z in &zones {
            e.sample(name, &[("zone", &z.name)], get(z));
        }
    }
}

/// `proxy_cache*`, with the cache's shared parts: `$upstream_cache_status`,
/// the loader and manager, the figures.
pub static PROXY_MODULE: Module = Module {
    name: "cache",
    directives: &[conf::PROXY_DIRECTIVES],
    settings: Some(&CacheConf::<conf::Proxy>::KIND),
    variables: &[VarDef::name("upstream_cache_status", upstream_cache_status)],
    hooks: Hooks {
        loaded: Some(conf::finish),
        tick: Some(index::tick),
        metrics: Some(metrics),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

/// `fastcgi_cache*`.
pub static FASTCGI_MODULE: Module = Module {
    name: "fastcgi_cache",
    directives: &[conf::FASTCGI_DIRECTIVES],
    settings: Some(&CacheConf::<conf::Fastcgi>::KIND),
    ..Module::EMPTY
};

/// `uwsgi_cache*`.
pub static UWSGI_MODULE: Module = Module {
    name: "uwsgi_cache",
    directives: &[conf::UWSGI_DIRECTIVES],
    settings: Some(&CacheConf::<crate::modules::uwsgi::Uwsgi>::KIND),
    ..Module::EMPTY
};

/// `scgi_cache*`.
pub static SCGI_MODULE: Module = Module {
    name: "scgi_cache",
    directives: &[conf::SCGI_DIRECTIVES],
    settings: Some(&CacheConf::<crate::modules::scgi::Scgi>::KIND),
    ..Module::EMPTY
};

/// Before a handler without a default cache key fetches: `*_force_ranges`,
/// then the cached answer (`Err`) or the fill the reply is to make.
pub async fn before<K: Kind>(
    req: &mut Request<'_>,
    force_ranges: bool,
) -> Result<Option<Fill<K>>, crate::core::request::Outcome> {
    if force_ranges {
        req.state.ext.insert(std::rc::Rc::new(range::Forced));
    }
    match lookup::<K>(req, |_| None).await {
        Lookup::Serve(resp) => Err(crate::core::request::Outcome::Respond(resp)),
        Lookup::Fetch(fill) => Ok(fill),
    }
}

/// After it fetched: `*_store`, then the reply into the cache, else its
/// byte ranges.
pub async fn after<K: Kind>(
    req: &mut Request<'_>,
    fill: Option<Fill<K>>,
    mut out: crate::core::request::Outcome,
    store: Option<&crate::upstream::store::Store>,
    store_access: u32,
) -> crate::core::request::Outcome {
    use crate::core::request::Outcome;
    if let Outcome::Respond(resp) = &mut out {
        crate::upstream::store::apply(req, store, store_access, resp);
    }
    match (fill, out) {
        (Some(f), Outcome::Respond(resp)) => Outcome::Respond(f.store(req, resp).await),
        (None, Outcome::Respond(resp)) => Outcome::Respond(range::of_reply(req, resp, false)),
        (_, out) => out,
    }
}
