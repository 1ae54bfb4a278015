//! What a module declares, and the type-keyed stores modules keep their own
//! data in.
//!
//! A module is one static [`Module`]: its name, its directive table, its
//! settings (which inherit http → server → location), its variables, its
//! phase hooks and filters with their order, and its per-worker hooks.
//! The one list of modules is handed to the configuration load
//! (`conf::load::load`), which builds from it the directive lookup, the
//! variable names and the [`Pipeline`] every request runs; nothing in `conf`
//! or `core` names a module.

use crate::conf::ast::ConfError;
use crate::conf::model::LocConf;
use crate::conf::table::{Def, Env, Scope};
use crate::core::message::response::Response;
use crate::core::request::{BoxFuture, Outcome, Request, RequestBody};
use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One module's declaration.
pub struct Module {
    pub name: &'static str,
    /// nginx's `configure` flag for what this module provides (`-V`), e.g.
    /// `http_ssl_module` for `--with-http_ssl_module`; empty for what nginx
    /// builds by default.
    pub nginx: &'static [&'static str],
    /// nginx modules built by default that this module stands for (`-V`
    /// names the default ones no module stands for as `--without-…`).
    pub nginx_default: &'static [&'static str],
    /// Directive tables (most modules have one).
    pub directives: &'static [&'static [Def]],
    /// Settings that inherit http → server → location ([`Settings`]).
    pub settings: Option<&'static SettingsKind>,
    pub variables: &'static [VarDef],
    pub hooks: Hooks,
}

impl Module {
    /// A module with nothing declared yet (a base for `..Module::EMPTY`).
    pub const EMPTY: Module = Module {
        name: "",
        nginx: &[],
        nginx_default: &[],
        directives: &[],
        settings: None,
        variables: &[],
        hooks: Hooks::NONE,
    };
}

/// A hook with its place among the other modules' hooks of the same kind
/// (lower runs first), and the test of whether a level's settings use it: a
/// level's requests run only the hooks it uses.
#[derive(Clone, Copy)]
pub struct Ordered<F> {
    pub order: u16,
    pub run: F,
    pub active: fn(&LocConf) -> bool,
}

/// What a phase hook decided.
pub enum Phase<'r> {
    /// Go on with the next hook.
    Next,
    /// Answer the request with this response.
    Respond(Response),
    /// Wait for this to decide (`Some` answers the request).
    Wait(BoxFuture<'r, Option<Response>>),
}

/// What a rewrite-phase hook decided.
pub enum Rewrite {
    /// Ran to its end (the URI may have changed: `Request::state.uri_changed`).
    Next,
    /// `last`: search locations again with the changed URI.
    Last,
    /// `break`: stop rewriting, stay in this location.
    Break,
    Respond(Response),
}

/// What a pre-content hook (try_files) decided.
pub enum Precontent {
    /// Go on to the content handler with the URI as it is now.
    Next,
    /// Internal redirect to (URI, args).
    Redirect(Vec<u8>, Vec<u8>),
    /// Jump to a named location.
    Named(Vec<u8>),
    /// Answer with this status (error pages apply).
    Status(u16),
}

/// Post-read: before anything else looks at the request (realip); a
/// response answers the request before its server's rewrites (ACME's
/// HTTP-01 answers).
pub type PostReadHook = fn(&mut Request<'_>) -> Option<Response>;
/// Rewrite phase: `location` is false at the server level. `data` is the
/// level's own (not inherited) module data.
pub type RewriteHook = fn(&mut Request<'_>, data: &Extensions, location: bool) -> Rewrite;
/// Preaccess and access phases.
pub type AccessHook = for<'r, 'a> fn(&'r mut Request<'a>, &'r mut dyn RequestBody) -> Phase<'r>;
/// Pre-content phase, with the level's own module data.
pub type PrecontentHook = fn(&mut Request<'_>, data: &Extensions) -> Precontent;
/// Pre-content phase of the levels whose settings use it, after the
/// [`PrecontentHook`]s (try_files) and also in `if` blocks: like an access
/// hook it has the body and may wait (mirror reads the body whole first).
pub type LevelPrecontentHook = AccessHook;
/// Content phase of a location without a handler of its own: the first
/// module that `takes` the request (as WebDAV its methods) `run`s it, else
/// the default content does.
#[derive(Clone, Copy)]
pub struct ContentHook {
    pub takes: fn(&Request<'_>) -> bool,
    pub run: for<'r, 'a> fn(
        &'r mut Request<'a>,
        &'r mut dyn RequestBody,
    ) -> crate::core::request::BoxFuture<'r, Outcome>,
}
/// The content of a location without a handler of its own (static files).
pub type DefaultContentHook = fn(&mut Request<'_>) -> Outcome;
/// A response filter: runs on every response a request produces.
pub type FilterHook = fn(&Request<'_>, &mut Response);
/// A request is done: its response and what of it was sent (the
/// connection logs main requests itself; subrequests, with
/// `log_subrequest on`, through this).
pub type LogHook = fn(&crate::core::request::Finished<'_>);
/// A stream session is done: `done` answers its variables as they stand
/// at its end (`$bytes_sent`, `$status`).
pub type SessionLogHook = fn(&Request<'_>, &dyn crate::core::vars::VarSource);
/// A stream session's first bytes as far as read (at most
/// `preread_buffer_size`; none on the first call): what the module makes
/// of them.
pub type PrereadHook = fn(&mut Request<'_>, &[u8]) -> Preread;

/// What a stream session's preread hook found.
#[derive(Debug, PartialEq, Eq)]
pub enum Preread {
    /// Nothing to read at this level, or the module is done with them.
    Done,
    /// More bytes are needed.
    More,
    /// Done: the bytes name this server (the TLS server name of a
    /// ClientHello), which chooses among the address's servers.
    Name(Box<str>),
}

/// At the end of a load, after every directive was read: resolve what
/// directives referenced, check what must be complete.
pub type LoadedHook = fn(&mut Env) -> Result<(), ConfError>;
/// The http block was read: fill in defaults that need the load (files).
pub type HttpHook = fn(&mut crate::conf::model::LocConfSet, &mut Env) -> Result<(), ConfError>;
/// A stream server was resolved: check it, build its module data.
pub type StreamServerHook = fn(&mut StreamServerBuild<'_>) -> Result<(), ConfError>;
/// A server was resolved: build its module data from its settings.
pub type ServerHook = fn(&mut ServerBuild<'_>) -> Result<(), ConfError>;
/// A listening address with its servers is complete: check it.
pub type ListenHook = fn(&ListenBuild<'_>) -> Result<(), ConfError>;

/// What a module does at each phase and in each worker.
#[derive(Clone, Copy)]
pub struct Hooks {
    pub post_read: Option<Ordered<PostReadHook>>,
    pub rewrite: Option<RewriteHook>,
    pub access: Option<Ordered<AccessHook>>,
    pub precontent: Option<PrecontentHook>,
    pub precontent_level: Option<Ordered<LevelPrecontentHook>>,
    pub content: Option<Ordered<ContentHook>>,
    pub default_content: Option<DefaultContentHook>,
    pub filter: Option<Ordered<FilterHook>>,
    pub log: Option<LogHook>,
    pub session_log: Option<SessionLogHook>,
    /// A stream session's preread phase.
    pub preread: Option<PrereadHook>,
    pub loaded: Option<LoadedHook>,
    pub http: Option<HttpHook>,
    /// The stream block was read: its defaults (as `http`).
    pub stream: Option<HttpHook>,
    pub server: Option<ServerHook>,
    pub stream_server: Option<StreamServerHook>,
    pub listen: Option<ListenHook>,
    /// Once a second in every worker (flush buffers, sweep caches).
    pub tick: Option<fn()>,
    /// A worker is about to exit.
    pub worker_exit: Option<fn()>,
    /// Write this module's figure families into a /metrics scrape.
    pub metrics: Option<fn(&mut crate::core::metrics::Exposition)>,
}

impl Hooks {
    pub const NONE: Hooks = Hooks {
        post_read: None,
        rewrite: None,
        access: None,
        precontent: None,
        precontent_level: None,
        content: None,
        default_content: None,
        filter: None,
        log: None,
        session_log: None,
        preread: None,
        loaded: None,
        http: None,
        stream: None,
        server: None,
        stream_server: None,
        listen: None,
        tick: None,
        worker_exit: None,
        metrics: None,
    };
}

/// A server being built: its resolved settings, and where its module data goes.
pub struct ServerBuild<'a> {
    pub conf: &'a crate::conf::model::LocConf,
    /// Its `server_name`s as written.
    pub names: &'a [String],
    pub listens: &'a mut Vec<crate::conf::model::ListenSpec>,
    pub ext: &'a mut Extensions,
    pub env: &'a mut Env,
}

/// A stream server being built: its resolved settings, its level's module
/// data (its content handler), its addresses, where its module data goes
/// (`Server::ext`), where its `server` block stands.
pub struct StreamServerBuild<'a> {
    pub conf: &'a crate::conf::model::LocConf,
    pub phases: &'a mut crate::core::route::Phases,
    pub listens: &'a [crate::conf::model::ListenSpec],
    pub ext: &'a mut Extensions,
    pub span: &'a crate::conf::ast::Span,
    pub env: &'a mut Env,
}

/// A listening address and the servers reached through it.
pub struct ListenBuild<'a> {
    pub spec: &'a crate::conf::model::ListenSpec,
    pub servers: &'a [Arc<crate::core::route::Server>],
    /// The one answering names no other server has (`default_server`, else
    /// the first).
    pub default: &'a Arc<crate::core::route::Server>,
    /// A stream address (else http's; a UDP one of http is QUIC).
    pub stream: bool,
}

/// The hooks every level of a load runs: those that act on a level's own
/// data (the rewrite script, try_files) and the default content.
#[derive(Default)]
pub struct Pipeline {
    pub rewrite: Vec<RewriteHook>,
    pub precontent: Vec<PrecontentHook>,
    pub default_content: Option<DefaultContentHook>,
    pub log: Vec<LogHook>,
    /// What logs a stream session.
    pub session_log: Vec<SessionLogHook>,
    /// What reads a stream session's first bytes.
    pub preread: Vec<PrereadHook>,
    /// Every module's variables, for names known only at run time (SSI's
    /// `echo`, `if`, `set`).
    pub variables: Vec<&'static VarDef>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("rewrite", &self.rewrite.len())
            .field("precontent", &self.precontent.len())
            .finish()
    }
}

impl Pipeline {
    pub fn new(modules: &[&'static Module]) -> Pipeline {
        Pipeline {
            rewrite: modules.iter().filter_map(|m| m.hooks.rewrite).collect(),
            precontent: modules.iter().filter_map(|m| m.hooks.precontent).collect(),
            default_content: modules.iter().find_map(|m| m.hooks.default_content),
            log: modules.iter().filter_map(|m| m.hooks.log).collect(),
            session_log: modules.iter().filter_map(|m| m.hooks.session_log).collect(),
            preread: modules.iter().filter_map(|m| m.hooks.preread).collect(),
            variables: modules.iter().flat_map(|m| m.variables.iter()).collect(),
        }
    }
}

/// The ordered hooks one level's settings use, in order: a location
/// without limits, access rules or header changes runs none of theirs.
#[derive(Default)]
pub struct LevelHooks {
    pub post_read: Vec<PostReadHook>,
    pub access: Vec<AccessHook>,
    pub precontent: Vec<LevelPrecontentHook>,
    pub content: Vec<ContentHook>,
    pub filters: Vec<FilterHook>,
}

impl std::fmt::Debug for LevelHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LevelHooks")
            .field("post_read", &self.post_read.len())
            .field("access", &self.access.len())
            .field("precontent", &self.precontent.len())
            .field("content", &self.content.len())
            .field("filters", &self.filters.len())
            .finish()
    }
}

impl LevelHooks {
    /// The hooks of `modules` that the settings `conf` use.
    pub fn new(modules: &[&'static Module], conf: &LocConf) -> LevelHooks {
        fn active<F: Copy>(
            modules: &[&'static Module],
            conf: &LocConf,
            pick: impl Fn(&Hooks) -> Option<Ordered<F>>,
        ) -> Vec<F> {
            let mut v: Vec<Ordered<F>> = modules
                .iter()
                .filter_map(|m| pick(&m.hooks))
                .filter(|h| (h.active)(conf))
                .collect();
            v.sort_by_key(|h| h.order);
            v.into_iter().map(|h| h.run).collect()
        }
        LevelHooks {
            post_read: active(modules, conf, |h| h.post_read),
            access: active(modules, conf, |h| h.access),
            precontent: active(modules, conf, |h| h.precontent_level),
            content: active(modules, conf, |h| h.content),
            filters: active(modules, conf, |h| h.filter),
        }
    }
}

/// A variable a module provides.
pub struct VarDef {
    pub name: &'static str,
    pub kind: VarKind,
    pub get: VarGetter,
    /// What `set $name value` does, for a variable nginx lets the
    /// configuration set (its set_handler).
    pub set: Option<&'static VarSet>,
}

/// A module variable that `set` assigns through the module.
#[derive(Debug)]
pub struct VarSet {
    /// Take the value for the request.
    pub run: fn(&Request<'_>, &[u8]),
    /// When the configuration is read: mark the level whose script sets the
    /// variable (so the module's hooks run there).
    pub level: fn(&mut Scope<'_>),
}

/// How a module's variable is named and set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarKind {
    /// `$name`.
    Name,
    /// Every `$name…`: the rest of the name, lowercased, is the getter's
    /// argument.
    Prefix,
    /// `$name`, which the configuration may declare itself (`set`, `map`):
    /// the getter gives the value where it does not.
    Changeable,
}

impl VarDef {
    pub const fn name(name: &'static str, get: VarGetter) -> VarDef {
        VarDef {
            name,
            kind: VarKind::Name,
            get,
            set: None,
        }
    }

    pub const fn prefix(name: &'static str, get: VarGetter) -> VarDef {
        VarDef {
            name,
            kind: VarKind::Prefix,
            get,
            set: None,
        }
    }

    /// `$name`, which `set` assigns through `set` (nginx's `$limit_rate`).
    pub const fn settable(name: &'static str, get: VarGetter, set: &'static VarSet) -> VarDef {
        VarDef {
            name,
            kind: VarKind::Name,
            get,
            set: Some(set),
        }
    }

    pub const fn changeable(name: &'static str, get: VarGetter) -> VarDef {
        VarDef {
            name,
            kind: VarKind::Changeable,
            get,
            set: None,
        }
    }
}

/// Append the variable's value for the request (nothing when unset).
pub type VarGetter = fn(&Request<'_>, arg: &str, out: &mut Vec<u8>);

/// Where a settings type sits in every level's list of module settings:
/// assigned when the module list is registered for a load, the same for
/// every load of a process.
pub struct Slot(AtomicUsize);

impl Slot {
    pub const fn new() -> Slot {
        Slot(AtomicUsize::new(usize::MAX))
    }

    pub fn index(&self) -> usize {
        let i = self.0.load(Ordering::Relaxed);
        debug_assert!(
            i != usize::MAX,
            "a module's settings are read before its module is registered"
        );
        i
    }

    pub fn assign(&self, i: usize) {
        self.0.store(i, Ordering::Relaxed);
    }
}

impl Default for Slot {
    fn default() -> Self {
        Slot::new()
    }
}

/// `fn slot()` with a place of its own: the body of a marker type's slot
/// (a generic settings type's parameter, `settings!`).
#[macro_export]
macro_rules! own_slot {
    () => {
        fn slot() -> &'static $crate::core::module::Slot {
            static SLOT: $crate::core::module::Slot = $crate::core::module::Slot::new();
            &SLOT
        }
    };
}

/// A module's settings, resolved at one level (see `settings!`).
pub trait Settings: Any + Send + Sync + Clone + Default + std::fmt::Debug {
    fn slot() -> &'static Slot;
}

/// A module's settings as written at one level, every field optional.
pub trait SettingsSet: Any + Send + Sync + Default + std::fmt::Debug {
    type Resolved: Settings;
    fn resolve(&self, parent: &Self::Resolved) -> Self::Resolved;
}

/// A settings set behind a pointer: resolve against the parent's value.
pub trait AnySet: Any + Send + Sync + std::fmt::Debug {
    fn resolve_any(&self, parent: &(dyn Any + Send + Sync)) -> Arc<dyn Any + Send + Sync>;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<S: SettingsSet> AnySet for S {
    fn resolve_any(&self, parent: &(dyn Any + Send + Sync)) -> Arc<dyn Any + Send + Sync> {
        let p = (parent as &dyn Any)
            .downcast_ref::<S::Resolved>()
            .expect("a level's settings resolve against the same module's");
        Arc::new(self.resolve(p))
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// What the load needs to know of a settings type.
pub struct SettingsKind {
    pub slot: fn() -> &'static Slot,
    /// The defaults, resolved.
    pub default: fn() -> Arc<dyn Any + Send + Sync>,
}

impl SettingsKind {
    pub const fn of<T: Settings>() -> SettingsKind {
        SettingsKind {
            slot: T::slot,
            default: || Arc::new(T::default()),
        }
    }
}

/// Module data of a configuration level, a server or a load, one value per
/// type (shared by workers).
#[derive(Default)]
pub struct Extensions(Vec<Box<dyn Any + Send + Sync>>);

impl Extensions {
    /// The value of type `T`, if one was put in.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0
            .iter()
            .find_map(|b| (&**b as &dyn Any).downcast_ref::<T>())
    }

    fn position<T: Any + Send + Sync>(&self) -> Option<usize> {
        self.0.iter().position(|b| (&**b as &dyn Any).is::<T>())
    }

    /// The value of type `T`, made with `Default` on first use.
    pub fn entry<T: Any + Send + Sync + Default>(&mut self) -> &mut T {
        let i = match self.position::<T>() {
            Some(i) => i,
            None => {
                self.0.push(Box::new(T::default()));
                self.0.len() - 1
            }
        };
        (&mut *self.0[i] as &mut dyn Any)
            .downcast_mut::<T>()
            .expect("the entry holds a T")
    }

    /// Put in `v`, replacing a value of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, v: T) {
        match self.position::<T>() {
            Some(i) => self.0[i] = Box::new(v),
            None => self.0.push(Box::new(v)),
        }
    }

    /// Take the value of type `T` out.
    pub fn remove<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let b: Box<dyn Any> = self.0.swap_remove(self.position::<T>()?);
        b.downcast::<T>().ok().map(|b| *b)
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Extensions({} entries)", self.0.len())
    }
}

/// Module data of one request, one value per type, reachable from a shared
/// reference (a variable's getter) as nginx's per-request module contexts:
/// what a module decided, upstream timings, counts held until the request
/// is dropped. A value that changes holds its own `Cell`/`RefCell`.
#[derive(Default)]
pub struct RequestExt(RefCell<ExtSlots>, RefCell<Vec<Rc<dyn Any>>>);

/// A request's extension values: the few a request holds kept inline, so
/// the first one put in allocates no list.
type ExtSlots = smallvec::SmallVec<[Rc<dyn Any>; 4]>;

impl RequestExt {
    /// The value of type `T`, if one was put in.
    pub fn get<T: Any>(&self) -> Option<Rc<T>> {
        let v = self.0.borrow();
        let found = v.iter().find(|b| (***b).is::<T>())?.clone();
        found.downcast::<T>().ok()
    }

    /// The value of type `T`, made by `make` when there is none.
    pub fn get_or_insert_with<T: Any>(&self, make: impl FnOnce() -> T) -> Rc<T> {
        if let Some(v) = self.get::<T>() {
            return v;
        }
        let v = Rc::new(make());
        self.0.borrow_mut().push(v.clone());
        v
    }

    /// Put in `v`, shared with the subrequests this request makes (the
    /// request body read whole), replacing a value of the same type.
    pub fn share(&self, v: Rc<dyn Any>) {
        let mut all = self.0.borrow_mut();
        match all.iter().position(|b| (**b).type_id() == (*v).type_id()) {
            Some(i) => all[i] = v.clone(),
            None => all.push(v.clone()),
        }
        let mut shared = self.1.borrow_mut();
        shared.retain(|b| (**b).type_id() != (*v).type_id());
        shared.push(v);
    }

    /// The entries put with [`RequestExt::share`].
    pub fn shared(&self) -> Vec<Rc<dyn Any>> {
        self.1.borrow().clone()
    }

    /// Put in `v`, replacing a value of the same type.
    pub fn insert<T: Any>(&self, v: Rc<T>) {
        let mut all = self.0.borrow_mut();
        match all.iter().position(|b| (**b).is::<T>()) {
            Some(i) => all[i] = v,
            None => all.push(v),
        }
    }
}

impl std::fmt::Debug for RequestExt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RequestExt({} entries)", self.0.borrow().len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_maps_keep_one_value_per_type() {
        let mut e = Extensions::default();
        assert!(e.get::<u32>().is_none());
        *e.entry::<u32>() += 2;
        *e.entry::<u32>() += 3;
        e.insert(String::from("x"));
        assert_eq!(e.get::<u32>(), Some(&5));
        assert_eq!(e.remove::<String>().as_deref(), Some("x"));
        assert!(e.get::<String>().is_none());
        let r = RequestExt::default();
        assert!(r.get::<u8>().is_none());
        assert_eq!(*r.get_or_insert_with(|| 7u8), 7);
        assert_eq!(*r.get_or_insert_with(|| 8u8), 7);
        r.insert(Rc::new(9u8));
        assert_eq!(r.get::<u8>().as_deref(), Some(&9));
    }
}
