//! The configuration tree as written (levels main → http → server → location),
//! and the `settings!` macro that gives each module its inheritable settings.

use super::ast::Span;
use crate::core::module::{AnySet, LevelHooks, Module, Settings, SettingsKind, SettingsSet};
use std::any::Any;
use std::path::PathBuf;
use std::sync::Arc;

/// Declare a settings struct with defaults, plus its "as written" twin (`…Set`, every
/// field optional) and the nginx inheritance rule: a level takes what it sets, else
/// what its parent resolved to.
#[macro_export]
macro_rules! settings {
    ($(#[$m:meta])* pub struct $name:ident / $set:ident {
        $( $(#[$fm:meta])* pub $field:ident : $ty:ty = $default:expr ),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Clone, Debug)]
        pub struct $name { $( $(#[$fm])* pub $field: $ty ),* }
        impl Default for $name {
            fn default() -> Self { Self { $( $field: $default ),* } }
        }
        /// Settings as written at one level; `None` inherits.
        #[derive(Clone, Debug, Default)]
        pub struct $set { $( pub $field: Option<$ty> ),* }
        impl $set {
            pub fn resolve(&self, parent: &$name) -> $name {
                $name { $( $field: match &self.$field {
                    Some(v) => v.clone(),
                    None => parent.$field.clone(),
                } ),* }
            }
        }
        impl $crate::core::module::Settings for $name {
            fn slot() -> &'static $crate::core::module::Slot {
                static SLOT: $crate::core::module::Slot = $crate::core::module::Slot::new();
                &SLOT
            }
        }
        impl $crate::core::module::SettingsSet for $set {
            type Resolved = $name;
            fn resolve(&self, parent: &$name) -> $name {
                $set::resolve(self, parent)
            }
        }
        impl $name {
            /// How the load finds and makes these settings.
            pub const KIND: $crate::core::module::SettingsKind =
                $crate::core::module::SettingsKind::of::<$name>();
        }
    };
    // Settings shared by several modules, one type per module: generic over
    // a marker type whose `slot()` gives each its own place.
    ($(#[$m:meta])* pub struct $name:ident<$p:ident: $bound:path> / $set:ident {
        $( $(#[$fm:meta])* pub $field:ident : $ty:ty = $default:expr ),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Clone, Debug)]
        pub struct $name<$p: $bound> {
            $( $(#[$fm])* pub $field: $ty, )*
            of: std::marker::PhantomData<fn() -> $p>,
        }
        impl<$p: $bound> Default for $name<$p> {
            fn default() -> Self {
                Self { $( $field: $default, )* of: std::marker::PhantomData }
            }
        }
        /// Settings as written at one level; `None` inherits.
        #[derive(Clone, Debug)]
        pub struct $set<$p: $bound> {
            $( pub $field: Option<$ty>, )*
            of: std::marker::PhantomData<fn() -> $p>,
        }
        impl<$p: $bound> Default for $set<$p> {
            fn default() -> Self {
                Self { $( $field: None, )* of: std::marker::PhantomData }
            }
        }
        impl<$p: $bound> $crate::core::module::Settings for $name<$p> {
            fn slot() -> &'static $crate::core::module::Slot {
                <$p as $bound>::slot()
            }
        }
        impl<$p: $bound> $crate::core::module::SettingsSet for $set<$p> {
            type Resolved = $name<$p>;
            fn resolve(&self, parent: &$name<$p>) -> $name<$p> {
                $name { $( $field: match &self.$field {
                    Some(v) => v.clone(),
                    None => parent.$field.clone(),
                }, )* of: std::marker::PhantomData }
            }
        }
        impl<$p: $bound> $name<$p> {
            /// How the load finds and makes these settings.
            pub const KIND: $crate::core::module::SettingsKind =
                $crate::core::module::SettingsKind::of::<$name<$p>>();
        }
    };
}

/// `keepalive_disable msie6`: POST requests of MSIE 4 to 6.
pub const KEEPALIVE_DISABLE_MSIE6: u8 = 1;
/// `keepalive_disable safari`: every request of Safari on Mac OS X.
pub const KEEPALIVE_DISABLE_SAFARI: u8 = 2;

settings! {
    /// Connection and protocol settings of the HTTP core.
    pub struct CoreConf / CoreConfSet {
        pub keepalive_timeout: std::time::Duration = std::time::Duration::from_secs(75),
        /// keepalive_timeout's second value: sent as `Keep-Alive: timeout=N`.
        pub keepalive_header: Option<std::time::Duration> = None,
        pub keepalive_requests: u64 = 1000,
        /// `keepalive_disable`: browsers whose connections are not kept
        /// alive (`KEEPALIVE_DISABLE_MSIE6`, `KEEPALIVE_DISABLE_SAFARI`).
        pub keepalive_disable: u8 = KEEPALIVE_DISABLE_MSIE6,
        /// `msie_refresh`: MSIE gets redirects vireo makes as a refresh page.
        pub msie_refresh: bool = false,
        /// `log_subrequest`: subrequests are written to the access log.
        pub log_subrequest: bool = false,
        /// `subrequest_output_buffer_size`: the most of a subrequest's body
        /// a module keeps in memory (SSI's `include … set=`).
        pub subrequest_output_buffer_size: u64 = 4096,
        /// `post_action`: the URI (with arguments) an internal GET goes to
        /// once the response is sent; its answer is discarded.
        pub post_action: Option<std::sync::Arc<[u8]>> = None,
        /// `keepalive_time`: a connection older than this closes after its request.
        pub keepalive_time: std::time::Duration = std::time::Duration::from_secs(3600),
        pub client_header_timeout: std::time::Duration = std::time::Duration::from_secs(60),
        pub client_body_timeout: std::time::Duration = std::time::Duration::from_secs(60),
        pub send_timeout: std::time::Duration = std::time::Duration::from_secs(60),
        pub reset_timedout_connection: bool = false,
        pub client_max_body_size: u64 = 1 << 20,
        pub client_header_buffer_size: usize = 1024,
        pub large_client_header_buffers: (usize, usize) = (4, 8192),
        /// Request header fields with `_` in their names are kept.
        pub underscores_in_headers: bool = false,
        /// Request header fields with invalid names are dropped (else kept).
        pub ignore_invalid_headers: bool = true,
        pub lingering_close: Lingering = Lingering::On,
        pub lingering_time: std::time::Duration = std::time::Duration::from_secs(30),
        pub lingering_timeout: std::time::Duration = std::time::Duration::from_secs(5),
        pub tcp_nodelay: bool = true,
        pub tcp_nopush: bool = false,
        pub server_tokens: bool = true,
        pub default_type: Arc<str> = Arc::from("text/plain"),
        pub types: Arc<crate::core::mime::MimeTypes> =
            Arc::new(crate::core::mime::MimeTypes::embedded()),
        /// `root`; relative to the prefix. With variables: the prefix, and
        /// `root_vars` the path rendered per request.
        pub root: Arc<PathBuf> = Arc::new(PathBuf::from("html")),
        pub root_vars: Option<Arc<crate::core::vars::Template>> = None,
        /// A level with `error_page` directives uses only its own; a level
        /// without inherits its parent's, as nginx.
        pub error_pages: Option<Arc<crate::core::error_page::ErrorPages>> = None,
        pub recursive_error_pages: bool = false,
        /// Warn when a `set` variable is read before it was given a value.
        pub uninitialized_variable_warn: bool = true,
        /// `chunked_transfer_encoding`: a body of unknown length goes out
        /// chunked on HTTP/1.1 (off: the connection closes after it).
        pub chunked_transfer_encoding: bool = true,
        /// `log_not_found`: log a missing file to the error log.
        pub log_not_found: bool = true,
        /// The `error_log`s of this level (http, server, location); `None`:
        /// the main level's.
        pub error_log: Option<Arc<crate::core::errlog::ErrorLog>> = None,
        /// `absolute_redirect`: redirects vireo makes carry scheme and host.
        pub absolute_redirect: bool = true,
        /// `server_name_in_redirect`: the server's first name instead of Host.
        pub server_name_in_redirect: bool = false,
        /// `port_in_redirect`: the port in absolute redirects.
        pub port_in_redirect: bool = true,
        /// `merge_slashes` (http, server): runs of slashes in the URI are merged.
        pub merge_slashes: bool = true,
        /// `auth_delay`: how long a 401 from the access phase waits.
        pub auth_delay: std::time::Duration = std::time::Duration::ZERO,
    }
}

/// `lingering_close off | on | always`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lingering {
    Off,
    On,
    Always,
}

/// Everything that inherits http → server → location, as written at one
/// level: the core's settings and each module's (see [`Settings`]), a
/// module's only once one of its directives stands at this level.
#[derive(Debug, Default)]
pub struct LocConfSet {
    pub core: CoreConfSet,
    mods: Vec<Option<Box<dyn AnySet>>>,
}

/// Resolved settings of one level: the core's and each registered module's,
/// in the order of their slots. A level that sets nothing of a module shares
/// its parent's value.
#[derive(Clone, Debug)]
pub struct LocConf {
    pub core: CoreConf,
    mods: Box<[Arc<dyn Any + Send + Sync>]>,
    /// The modules' ordered hooks these settings use (see `LevelHooks`),
    /// set when the level is built.
    pub hooks: Arc<LevelHooks>,
}

impl LocConfSet {
    /// A module's settings at this level, made empty (all inherited) on first use.
    pub fn get_mut<S: SettingsSet>(&mut self) -> &mut S {
        let i = <S::Resolved as Settings>::slot().index();
        if self.mods.len() <= i {
            self.mods.resize_with(i + 1, || None);
        }
        self.mods[i]
            .get_or_insert_with(|| Box::new(S::default()))
            .as_any_mut()
            .downcast_mut::<S>()
            .expect("a slot holds its own module's settings")
    }

    /// A module's settings as written at this level, if any was.
    pub fn get<S: SettingsSet>(&self) -> Option<&S> {
        let i = <S::Resolved as Settings>::slot().index();
        let set: &dyn AnySet = &**self.mods.get(i)?.as_ref()?;
        (set as &dyn Any).downcast_ref::<S>()
    }

    /// This level's settings over its parent's; `hooks` are the parent's
    /// until the load sets this level's own (`LocConf::with_hooks`).
    pub fn resolve(&self, parent: &LocConf) -> LocConf {
        LocConf {
            hooks: parent.hooks.clone(),
            core: self.core.resolve(&parent.core),
            mods: parent
                .mods
                .iter()
                .enumerate()
                .map(|(i, p)| match self.mods.get(i) {
                    Some(Some(set)) => set.resolve_any(&**p),
                    _ => p.clone(),
                })
                .collect(),
        }
    }
}

fn settings_kinds<'a>(
    modules: &'a [&'static Module],
) -> impl Iterator<Item = &'static SettingsKind> + 'a {
    modules.iter().filter_map(|m| m.settings)
}

/// Give each module's settings of `modules` its slot (its place in every
/// level's list). The same list gives the same slots, so loads can follow
/// each other while requests read the settings of earlier ones.
pub fn assign_slots(modules: &[&'static Module]) {
    for (i, k) in settings_kinds(modules).enumerate() {
        (k.slot)().assign(i);
    }
}

impl LocConf {
    /// The defaults of the core and of every module of `modules`, whose
    /// settings take their slots here.
    pub fn defaults(modules: &[&'static Module]) -> LocConf {
        LocConf {
            core: CoreConf::default(),
            mods: settings_kinds(modules).map(|k| (k.default)()).collect(),
            hooks: Arc::default(),
        }
    }

    /// These settings with the hooks of `modules` they use.
    pub fn with_hooks(mut self, modules: &[&'static Module]) -> LocConf {
        self.hooks = Arc::new(LevelHooks::new(modules, &self));
        self
    }

    /// A module's settings at this level.
    #[inline]
    pub fn get<T: Settings>(&self) -> &T {
        let any: &dyn Any = &*self.mods[T::slot().index()];
        any.downcast_ref::<T>()
            .expect("a slot holds its own module's settings")
    }
}

/// Main and events levels.
#[derive(Debug, Default)]
pub struct MainConf {
    /// `None` is `auto` (one per core); unset means 1, as nginx.
    pub worker_processes: Option<Option<usize>>,
    pub worker_rlimit_nofile: Option<u64>,
    pub worker_connections: Option<usize>,
    pub multi_accept: Option<bool>,
    pub pid: Option<PathBuf>,
    /// Each main-level `error_log`, in order.
    pub error_log: Vec<(crate::core::errlog::Dest, crate::core::errlog::Level)>,
    /// `debug_connection` clients.
    pub debug_connection: Vec<crate::core::errlog::DebugConnection>,
    /// Where `pid` and `error_log` were set, for errors opening their files.
    pub pid_at: Option<crate::conf::ast::Span>,
    pub error_log_at: Option<crate::conf::ast::Span>,
    pub daemon: Option<bool>,
    /// `user`: name, uid, gid (looked up when the directive is read).
    pub user: Option<(String, u32, u32)>,
    pub worker_shutdown_timeout: Option<std::time::Duration>,
    pub events_seen: bool,
    pub http: Option<HttpConf>,
    pub stream: Option<StreamConf>,
}

/// The `stream` block (TCP and UDP proxying): its settings, which its
/// servers inherit, and its servers.
#[derive(Debug, Default)]
pub struct StreamConf {
    pub conf: LocConfSet,
    pub servers: Vec<StreamServerConf>,
}

/// A `server` of the `stream` block: its addresses, settings and the
/// modules' data of its level (the content handler, the `set` script).
#[derive(Debug)]
pub struct StreamServerConf {
    pub conf: LocConfSet,
    pub listens: Vec<ListenSpec>,
    /// `server_name` entries, as http's (chosen by the TLS server name).
    pub names: Vec<String>,
    pub phases: crate::core::route::Phases,
    pub span: Span,
}

#[derive(Debug, Default)]
pub struct HttpConf {
    pub conf: LocConfSet,
    pub servers: Vec<ServerConf>,
}

/// One `listen` directive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenSpec {
    pub addr: ListenAddr,
    pub default_server: bool,
    pub reuseport: bool,
    /// `ssl`: TLS on this address.
    pub ssl: bool,
    /// `http2`: HTTP/2 on this address (ALPN h2 with ssl, prior knowledge without).
    pub http2: bool,
    /// `proxy_protocol`: every connection opens with a PROXY protocol header.
    pub proxy_protocol: bool,
    pub backlog: i32,
    /// Socket options (`rcvbuf=`, `sndbuf=`, `so_keepalive=`, `deferred`, `fastopen=`, `ipv6only=`).
    pub opts: SockOpts,
    pub span: Span,
}

/// Socket options of a listening address, as nginx's `listen` sets them.
/// `None`/`false`: not configured (the kernel's default is left alone).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SockOpts {
    /// SO_RCVBUF.
    pub rcvbuf: Option<usize>,
    /// SO_SNDBUF.
    pub sndbuf: Option<usize>,
    /// SO_KEEPALIVE and the TCP keepalive timers, inherited by accepted connections.
    pub keepalive: Option<Keepalive>,
    /// TCP_DEFER_ACCEPT: a connection is accepted once its first data arrives.
    pub deferred: bool,
    /// TCP_FASTOPEN queue length.
    pub fastopen: Option<u32>,
    /// IPV6_V6ONLY of an IPv6 address (nginx's default: on).
    pub ipv6only: Option<bool>,
}

/// `so_keepalive=on|off|[keepidle]:[keepintvl]:[keepcnt]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keepalive {
    Off,
    /// On, with the timers given (seconds, count); `None` keeps the system's.
    On {
        idle: Option<u32>,
        intvl: Option<u32>,
        cnt: Option<u32>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListenAddr {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
    /// `listen … udp` of a stream server: datagrams.
    Udp(std::net::SocketAddr),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ListenAddr::Udp(a) => write!(f, "{a} (udp)"),
        }
    }
}

#[derive(Debug, Default)]
pub struct ServerConf {
    pub conf: LocConfSet,
    pub listens: Vec<ListenSpec>,
    /// `server_name` entries as written ("" is the empty name, "~re" a regex).
    pub names: Vec<String>,
    pub locations: Vec<LocationConf>,
    pub span: Option<Span>,
    /// Rewrite script, try_files, regex names: not inherited.
    pub phases: crate::core::route::Phases,
}

/// How a location matches: `=`, `^~`, plain prefix, `~`, `~*`, or `@name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocKind {
    Exact,
    PrefixNoRegex,
    Prefix,
    Regex { caseless: bool },
    Named,
}

#[derive(Debug)]
pub struct LocationConf {
    pub kind: LocKind,
    pub pattern: String,
    pub regex: Option<crate::core::vars::Re>,
    pub conf: LocConfSet,
    /// `alias` as written in this location; a nested location without
    /// `root` or `alias` inherits a prefix location's (`load::build_location`).
    pub alias: Option<String>,
    /// Content handler (`fastcgi_pass`, `return`, …): not inherited.
    pub content: Option<Arc<dyn crate::core::request::Content>>,
    /// Rewrite script, try_files, internal, variable alias: not inherited.
    pub phases: crate::core::route::Phases,
    pub locations: Vec<LocationConf>,
    /// `limit_except`: the methods it lists (GET brings HEAD), and its
    /// block, which applies to every other method.
    pub limit_except: Option<Box<(Vec<&'static str>, LocationConf)>>,
    /// The `if` blocks of the location, in the order written: each the
    /// settings a request takes when its condition holds.
    pub ifs: Vec<LocationConf>,
    pub span: Span,
}

impl LocationConf {
    /// A level with nothing set yet.
    pub fn new(
        kind: LocKind,
        pattern: String,
        regex: Option<crate::core::vars::Re>,
        span: Span,
    ) -> Self {
        LocationConf {
            kind,
            pattern,
            regex,
            conf: Default::default(),
            alias: None,
            content: None,
            phases: Default::default(),
            locations: Vec::new(),
            limit_except: None,
            ifs: Vec::new(),
            span,
        }
    }

    /// A block inside this location (`limit_except`, `if`): named as the
    /// location, its settings inherited from it.
    pub fn block(&self, span: Span) -> Self {
        LocationConf::new(self.kind, self.pattern.clone(), None, span)
    }
}
