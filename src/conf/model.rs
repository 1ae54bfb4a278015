//! The configuration tree as written (levels main → http → server → location),
//! and the `settings!` macro that gives each module its inheritable settings.

use super::ast::Span;
use crate::modules::{
    autoindex, cgi, compress, error_page, fastcgi, headers, log, rewrite, static_files,
};
use std::collections::HashMap;
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
    };
}

settings! {
    /// Connection and protocol settings of the HTTP core.
    pub struct CoreConf / CoreConfSet {
        pub keepalive_timeout: std::time::Duration = std::time::Duration::from_secs(75),
        /// keepalive_timeout's second value: sent as `Keep-Alive: timeout=N`.
        pub keepalive_header: Option<std::time::Duration> = None,
        pub keepalive_requests: u64 = 1000,
        pub client_header_timeout: std::time::Duration = std::time::Duration::from_secs(60),
        pub client_body_timeout: std::time::Duration = std::time::Duration::from_secs(60),
        pub send_timeout: std::time::Duration = std::time::Duration::from_secs(60),
        pub reset_timedout_connection: bool = false,
        pub client_max_body_size: u64 = 1 << 20,
        pub client_header_buffer_size: usize = 1024,
        pub large_client_header_buffers: (usize, usize) = (4, 8192),
        pub lingering_close: Lingering = Lingering::On,
        pub lingering_time: std::time::Duration = std::time::Duration::from_secs(30),
        pub lingering_timeout: std::time::Duration = std::time::Duration::from_secs(5),
        pub tcp_nodelay: bool = true,
        pub tcp_nopush: bool = false,
        pub server_tokens: bool = true,
        pub default_type: Arc<str> = Arc::from("text/plain"),
        pub types: Arc<static_files::mime::MimeTypes> =
            Arc::new(static_files::mime::MimeTypes::embedded()),
    }
}

/// `lingering_close off | on | always`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lingering {
    Off,
    On,
    Always,
}

/// Everything that inherits http → server → location, one part per module.
#[derive(Clone, Debug, Default)]
pub struct LocConfSet {
    pub core: CoreConfSet,
    pub static_files: static_files::conf::StaticConfSet,
    pub log: log::conf::LogConfSet,
    pub rewrite: rewrite::conf::RewriteConfSet,
    pub error_page: error_page::conf::ErrorPageConfSet,
    pub headers: headers::conf::HeadersConfSet,
    pub autoindex: autoindex::conf::AutoindexConfSet,
    pub compress: compress::conf::CompressConfSet,
    pub fastcgi: fastcgi::conf::FastcgiConfSet,
    pub cgi: cgi::conf::CgiConfSet,
    pub proxy: crate::modules::proxy::conf::ProxyConfSet,
    pub ssl: crate::modules::ssl::conf::SslConfSet,
    pub access: crate::modules::access::conf::AccessConfSet,
    pub auth_basic: crate::modules::auth_basic::conf::AuthBasicConfSet,
    pub realip: crate::modules::realip::conf::RealipConfSet,
    pub http2: crate::http::h2::conf::Http2ConfSet,
    pub limit_req: crate::modules::limit_req::conf::LimitReqConfSet,
    pub limit_conn: crate::modules::limit_conn::conf::LimitConnConfSet,
}

/// Resolved settings of one level.
#[derive(Clone, Debug, Default)]
pub struct LocConf {
    pub core: CoreConf,
    pub static_files: static_files::conf::StaticConf,
    pub log: log::conf::LogConf,
    pub rewrite: rewrite::conf::RewriteConf,
    pub error_page: error_page::conf::ErrorPageConf,
    pub headers: headers::conf::HeadersConf,
    pub autoindex: autoindex::conf::AutoindexConf,
    pub compress: compress::conf::CompressConf,
    pub fastcgi: fastcgi::conf::FastcgiConf,
    pub cgi: cgi::conf::CgiConf,
    pub proxy: crate::modules::proxy::conf::ProxyConf,
    pub ssl: crate::modules::ssl::conf::SslConf,
    pub access: crate::modules::access::conf::AccessConf,
    pub auth_basic: crate::modules::auth_basic::conf::AuthBasicConf,
    pub realip: crate::modules::realip::conf::RealipConf,
    pub http2: crate::http::h2::conf::Http2Conf,
    pub limit_req: crate::modules::limit_req::conf::LimitReqConf,
    pub limit_conn: crate::modules::limit_conn::conf::LimitConnConf,
}

impl LocConfSet {
    pub fn resolve(&self, parent: &LocConf) -> LocConf {
        LocConf {
            core: self.core.resolve(&parent.core),
            static_files: self.static_files.resolve(&parent.static_files),
            log: self.log.resolve(&parent.log),
            rewrite: self.rewrite.resolve(&parent.rewrite),
            error_page: self.error_page.resolve(&parent.error_page),
            headers: self.headers.resolve(&parent.headers),
            autoindex: self.autoindex.resolve(&parent.autoindex),
            compress: self.compress.resolve(&parent.compress),
            fastcgi: self.fastcgi.resolve(&parent.fastcgi),
            cgi: self.cgi.resolve(&parent.cgi),
            proxy: self.proxy.resolve(&parent.proxy),
            ssl: self.ssl.resolve(&parent.ssl),
            access: self.access.resolve(&parent.access),
            auth_basic: self.auth_basic.resolve(&parent.auth_basic),
            realip: self.realip.resolve(&parent.realip),
            http2: self.http2.resolve(&parent.http2),
            limit_req: self.limit_req.resolve(&parent.limit_req),
            limit_conn: self.limit_conn.resolve(&parent.limit_conn),
        }
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
    pub error_log: Option<(PathBuf, crate::core::errlog::Level)>,
    /// Where `pid` and `error_log` were set, for errors opening their files.
    pub pid_at: Option<crate::conf::ast::Span>,
    pub error_log_at: Option<crate::conf::ast::Span>,
    pub daemon: Option<bool>,
    /// `user`: name, uid, gid (looked up when the directive is read).
    pub user: Option<(String, u32, u32)>,
    pub worker_shutdown_timeout: Option<std::time::Duration>,
    pub events_seen: bool,
    pub http: Option<HttpConf>,
}

#[derive(Debug, Default)]
pub struct HttpConf {
    pub conf: LocConfSet,
    pub servers: Vec<ServerConf>,
    pub log_formats: HashMap<String, Arc<log::LogFormat>>,
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
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
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
    /// `alias` is not inherited: it belongs to the location that sets it.
    pub alias: Option<String>,
    /// Content handler (`fastcgi_pass`, `return`, …): not inherited.
    pub content: Option<Arc<dyn crate::core::request::Content>>,
    /// Rewrite script, try_files, internal, variable alias: not inherited.
    pub phases: crate::core::route::Phases,
    pub locations: Vec<LocationConf>,
    pub span: Span,
}
