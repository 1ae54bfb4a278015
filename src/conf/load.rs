//! Loading a configuration: parse, walk the directive table, resolve inheritance,
//! and build the runtime snapshot the workers serve from.

use super::ast::{ConfError, Span};
use super::model::{
    HttpConf, ListenAddr, ListenSpec, LocConf, LocKind, LocationConf, MainConf, ServerConf,
    SockOpts, StreamConf,
};
use super::parser::{self, Parsed};
use super::table::{Env, Scope};
use crate::core::errlog::{Dest, ErrorLog, Level};
use crate::core::module::{
    Extensions, ListenBuild, Module, Pipeline, ServerBuild, StreamServerBuild,
};
use crate::core::route::{IfBlock, LimitExcept, Location, Locations, Server, VirtualHosts};
use crate::core::vars::VarTable;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the configuration comes from.
#[derive(Clone, Debug)]
pub enum Source {
    File(PathBuf),
    /// The embedded default configuration, serving the embedded site from `root`.
    Embedded {
        root: PathBuf,
    },
}

/// The embedded default configuration; `@ROOT@` is the folder of the default site.
pub const DEFAULT_CONF: &str = include_str!("default.conf");
/// The embedded default site.
pub const DEFAULT_INDEX: &str = include_str!("default_site/index.html");

/// One listening address and the servers behind it.
#[derive(Clone, Debug)]
pub struct Listener {
    pub addr: ListenAddr,
    pub reuseport: bool,
    /// TLS on this address (`listen … ssl` in any of its servers).
    pub ssl: bool,
    /// HTTP/2 on this address (`listen … http2`, or `http2 on` in a server).
    pub http2: bool,
    /// Connections open with a PROXY protocol header (`listen … proxy_protocol`
    /// in any of its servers).
    pub proxy_protocol: bool,
    /// A stream server's address (TCP or UDP proxying), not HTTP: `vhosts`
    /// holds its one server.
    pub stream: bool,
    pub backlog: i32,
    /// Socket options (rcvbuf, sndbuf, so_keepalive, deferred, fastopen, ipv6only).
    pub opts: SockOpts,
    pub vhosts: Arc<VirtualHosts>,
    /// Stable identity of the address for the life of the process: the same
    /// address has the same key in every configuration loaded (reloads), so a
    /// connection finds its listener in whichever snapshot is live.
    pub key: usize,
    /// No longer in the configuration (removed by a reload): kept for the
    /// connections still open on it, which close after their next response.
    pub retired: bool,
    /// The first `listen` of this address (a failure to bind it names it).
    pub span: Span,
}

impl Listener {
    /// The local address of every connection accepted on this listener, when
    /// the listener says it: a TCP address with a specific IP (its own socket;
    /// see `server::overlapping`). A wildcard asks the socket (getsockname).
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self.addr {
            ListenAddr::Tcp(a) if !a.ip().is_unspecified() => Some(a),
            _ => None,
        }
    }
}

/// The key of a listening address (see [`Listener::key`]).
pub fn listener_key(addr: &ListenAddr) -> usize {
    static KEYS: std::sync::Mutex<Vec<ListenAddr>> = std::sync::Mutex::new(Vec::new());
    let mut keys = KEYS.lock().unwrap_or_else(|e| e.into_inner());
    match keys.iter().position(|a| a == addr) {
        Some(k) => k,
        None => {
            keys.push(addr.clone());
            keys.len() - 1
        }
    }
}

/// A loaded, validated configuration: what the workers serve from.
#[derive(Debug)]
pub struct Config {
    pub workers: usize,
    pub worker_connections: usize,
    pub multi_accept: bool,
    pub rlimit_nofile: Option<u64>,
    pub pid: Option<PathBuf>,
    /// The main level's error logs (at least one).
    pub error_log: Vec<(Dest, Level)>,
    /// `debug_connection` clients.
    pub debug_connection: Vec<crate::core::errlog::DebugConnection>,
    /// Where `pid` and `error_log` were set (errors opening their files name it).
    pub pid_at: Option<Span>,
    pub error_log_at: Option<Span>,
    pub listeners: Vec<Listener>,
    /// Every file read, for `-T`.
    pub files: Vec<PathBuf>,
    /// Accepted-but-ignored directives, to log once the error log is open.
    pub notices: Vec<String>,
    /// What the modules' per-load registries hold at the end of the load
    /// (the access log files to reopen after rotation, …).
    pub ext: Extensions,
    /// `user`: name, uid, gid to switch to after binding when started as root.
    pub user: Option<(String, u32, u32)>,
    /// Keep CAP_NET_RAW after switching to `user` (transparent binds).
    pub net_raw: bool,
    pub daemon: bool,
    /// `worker_shutdown_timeout`: how long a draining worker waits for its connections.
    pub shutdown_timeout: Option<std::time::Duration>,
    /// Listeners removed by reloads, for connections still open on them.
    pub retired: Vec<Listener>,
}

impl Config {
    /// Open the error log this configuration names; a failure names the file
    /// and the `error_log` directive's file:line.
    pub fn open_error_log(&self) -> Result<ErrorLog, String> {
        ErrorLog::open(&self.error_log).map_err(|e| located(e, self.error_log_at.as_ref()))
    }

    /// The listener with this key: live, or retired while connections remain on it.
    pub fn listener(&self, key: usize) -> &Listener {
        match self.listeners.iter().find(|l| l.key == key) {
            Some(l) => l,
            None => self
                .retired
                .iter()
                .find(|l| l.key == key)
                .expect("a connection's listener is live or retired"),
        }
    }
}

/// How vireo was started: what the command line adds to a configuration.
#[derive(Clone, Debug, Default)]
pub struct Cmdline {
    /// `-p`: the folder relative paths are taken from.
    pub prefix: PathBuf,
    /// `-g`: directives added to the main level.
    pub globals: Option<String>,
    /// `-e`: the error log when the configuration names none at the main
    /// level (stderr without it); `stderr` is stderr.
    pub error_log: Option<PathBuf>,
}

/// Load and validate a configuration with `modules`.
pub fn load(
    source: &Source,
    cmd: &Cmdline,
    modules: &'static [&'static Module],
) -> Result<Config, ConfError> {
    let (prefix, extra) = (cmd.prefix.as_path(), cmd.globals.as_deref());
    let Parsed {
        mut directives,
        files,
    } = match source {
        Source::File(path) => {
            let dir = path.parent().unwrap_or(Path::new("."));
            parser::parse_file(path, dir)?
        }
        Source::Embedded { root } => {
            let text = DEFAULT_CONF.replace("@ROOT@", &root.to_string_lossy());
            parser::parse_str(&text, "<embedded>", prefix)?
        }
    };
    if let Some(g) = extra {
        directives.extend(parser::parse_str(g, "<command line>", prefix)?.directives);
    }
    let mut env = Env::new(prefix.to_path_buf(), modules);
    let mut main = MainConf::default();
    env.walk(&directives, &mut Scope::Main(&mut main))?;
    env.user = main.user.clone();
    let vars = std::mem::replace(&mut env.vars, crate::core::vars::Vars::new(&[]));
    let vars = Arc::new(vars.finish()?);
    for loaded in modules.iter().filter_map(|m| m.hooks.loaded) {
        loaded(&mut env)?;
    }
    if !main.events_seen {
        return Err(ConfError::bare("no \"events\" section in configuration"));
    }

    let mut listeners = match main.http.take() {
        Some(http) => build_http(http, &mut env, &vars)?,
        None => Vec::new(),
    };
    if let Some(stream) = main.stream.take() {
        for l in build_stream(stream, &mut env, &vars)? {
            if listeners.iter().any(|h| h.addr == l.addr) {
                return Err(ConfError::new(
                    format!("duplicate \"{}\" address and port pair", l.addr),
                    &l.span,
                ));
            }
            listeners.push(l);
        }
    }
    let workers = match main.worker_processes {
        None => 1,
        Some(Some(n)) => n,
        Some(None) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let error_log = if !main.error_log.is_empty() {
        main.error_log
    } else {
        match &cmd.error_log {
            Some(p) if p.as_os_str() != "stderr" => {
                vec![(Dest::File(prefix.join(p)), Level::Error)]
            }
            _ => vec![(Dest::Stderr, Level::Error)],
        }
    };
    Ok(Config {
        workers,
        worker_connections: main.worker_connections.unwrap_or(512),
        multi_accept: main.multi_accept.unwrap_or(false),
        rlimit_nofile: main.worker_rlimit_nofile,
        pid: main.pid,
        error_log,
        debug_connection: main.debug_connection,
        pid_at: main.pid_at,
        error_log_at: main.error_log_at,
        listeners,
        files,
        notices: std::mem::take(&mut env.notices),
        ext: env.ext,
        user: main.user,
        net_raw: env.net_raw,
        daemon: main.daemon.unwrap_or(false),
        shutdown_timeout: main.worker_shutdown_timeout,
        retired: Vec::new(),
    })
}

/// A listening address, its servers in order, and its `default_server`.
type AddrServers = (ListenSpec, Vec<Arc<Server>>, Option<Arc<Server>>);

fn build_http(
    mut http: HttpConf,
    env: &mut Env,
    vars: &Arc<VarTable>,
) -> Result<Vec<Listener>, ConfError> {
    let mut base = LocConf::defaults(env.modules);
    base.core.root = Arc::new(env.path("html"));
    for hook in env.modules.iter().filter_map(|m| m.hooks.http) {
        hook(&mut http.conf, env)?;
    }
    let http_conf = http.conf.resolve(&base).with_hooks(env.modules);
    let pipeline = Arc::new(Pipeline::new(env.modules));

    let mut built = Vec::new();
    for srv in http.servers {
        built.push(build_server(srv, &http_conf, vars, &pipeline, env)?);
    }
    listeners(by_address(built)?, env, false)
}

/// For each address, in order, its servers in order and its
/// `default_server`: the `listen` flags of an address are merged (one of
/// its servers with `ssl` makes it a TLS address), its socket options given
/// once.
fn by_address(built: Vec<(Arc<Server>, Vec<ListenSpec>)>) -> Result<Vec<AddrServers>, ConfError> {
    let mut by_addr: Vec<AddrServers> = Vec::new();
    for (server, listens) in built {
        for l in listens {
            match by_addr.iter_mut().find(|(s, ..)| s.addr == l.addr) {
                Some((spec, servers, default)) => {
                    if l.default_server {
                        if default.is_some() {
                            return Err(ConfError::new(
                                format!("a duplicate default server for {}", l.addr),
                                &l.span,
                            ));
                        }
                        *default = Some(server.clone());
                    }
                    spec.reuseport |= l.reuseport;
                    spec.ssl |= l.ssl;
                    spec.http2 |= l.http2;
                    spec.proxy_protocol |= l.proxy_protocol;
                    if l.backlog != 511 {
                        spec.backlog = l.backlog;
                    }
                    // As nginx: the socket options of an address are given once.
                    if l.opts != SockOpts::default() {
                        if spec.opts != SockOpts::default() {
                            return Err(ConfError::new(
                                format!("duplicate listen options for {}", l.addr),
                                &l.span,
                            ));
                        }
                        spec.opts = l.opts;
                    }
                    if !servers.iter().any(|s| Arc::ptr_eq(s, &server)) {
                        servers.push(server.clone());
                    }
                }
                None => {
                    let default = l.default_server.then(|| server.clone());
                    by_addr.push((l, vec![server.clone()], default));
                }
            }
        }
    }
    Ok(by_addr)
}

/// The listeners of one protocol's addresses, once the `listen` hooks
/// checked each.
fn listeners(
    by_addr: Vec<AddrServers>,
    env: &mut Env,
    stream: bool,
) -> Result<Vec<Listener>, ConfError> {
    for (spec, servers, default) in &by_addr {
        let default = default.as_ref().unwrap_or(&servers[0]);
        for hook in env.modules.iter().filter_map(|m| m.hooks.listen) {
            hook(&ListenBuild {
                spec,
                servers,
                default,
                stream,
            })?;
        }
    }
    Ok(by_addr
        .into_iter()
        .map(|(spec, servers, default)| {
            let default = default.unwrap_or_else(|| servers[0].clone());
            Listener {
                key: listener_key(&spec.addr),
                addr: spec.addr,
                reuseport: spec.reuseport,
                ssl: spec.ssl,
                http2: spec.http2,
                proxy_protocol: spec.proxy_protocol,
                stream,
                backlog: spec.backlog,
                opts: spec.opts,
                vhosts: Arc::new(VirtualHosts::new(&servers, default)),
                retired: false,
                span: spec.span,
            }
        })
        .collect())
}

/// The stream block's listeners: servers without locations, grouped by
/// address as http's (chosen by the TLS server name among an address's
/// servers); their content handler and `set` script are their level's data.
fn build_stream(
    mut stream: StreamConf,
    env: &mut Env,
    vars: &Arc<VarTable>,
) -> Result<Vec<Listener>, ConfError> {
    let base = LocConf::defaults(env.modules);
    for hook in env.modules.iter().filter_map(|m| m.hooks.stream) {
        hook(&mut stream.conf, env)?;
    }
    let stream_conf = stream.conf.resolve(&base).with_hooks(env.modules);
    let pipeline = Arc::new(Pipeline::new(env.modules));
    let mut built = Vec::new();
    for mut srv in stream.servers {
        let conf = srv.conf.resolve(&stream_conf).with_hooks(env.modules);
        let mut ext = Extensions::default();
        for hook in env.modules.iter().filter_map(|m| m.hooks.stream_server) {
            hook(&mut StreamServerBuild {
                conf: &conf,
                phases: &mut srv.phases,
                listens: &srv.listens,
                ext: &mut ext,
                span: &srv.span,
                env,
            })?;
        }
        if srv.listens.is_empty() {
            return Err(ConfError::new(
                "no \"listen\" is defined for server",
                &srv.span,
            ));
        }
        let mut names = srv.names;
        if names.is_empty() {
            names.push(String::new());
        }
        let server = Arc::new(Server {
            names,
            conf: Arc::new(conf),
            locations: Locations::default(),
            named: HashMap::new(),
            phases: srv.phases,
            vars: vars.clone(),
            ext,
            pipeline: pipeline.clone(),
        });
        built.push((server, srv.listens));
    }
    listeners(by_address(built)?, env, true)
}

fn build_server(
    srv: ServerConf,
    http: &LocConf,
    vars: &Arc<VarTable>,
    pipeline: &Arc<Pipeline>,
    env: &mut Env,
) -> Result<(Arc<Server>, Vec<ListenSpec>), ConfError> {
    let conf = srv.conf.resolve(http).with_hooks(env.modules);
    let mut listens = srv.listens;
    if listens.is_empty() {
        // nginx listens on *:80 when run as root, *:8000 otherwise.
        let port = if crate::sys::is_root() { 80 } else { 8000 };
        listens.push(ListenSpec {
            addr: ListenAddr::Tcp(([0, 0, 0, 0], port).into()),
            default_server: false,
            reuseport: false,
            ssl: false,
            http2: false,
            proxy_protocol: false,
            backlog: 511,
            opts: SockOpts::default(),
            span: srv.span.clone().unwrap_or_else(|| Span {
                file: Arc::from("<default>"),
                line: 0,
            }),
        });
    }
    let mut ext = Extensions::default();
    for hook in env.modules.iter().filter_map(|m| m.hooks.server) {
        hook(&mut ServerBuild {
            conf: &conf,
            names: &srv.names,
            listens: &mut listens,
            ext: &mut ext,
            env,
        })?;
    }
    let mut names = srv.names;
    if names.is_empty() {
        names.push(String::new());
    }
    let mut named = HashMap::new();
    let mut locs = Vec::new();
    for l in srv.locations {
        let span = l.span.clone();
        let built = build_location(l, &conf, env.modules, None);
        if built.kind == LocKind::Named {
            if named.contains_key(&built.pattern) {
                return Err(ConfError::new(
                    format!("duplicate location \"{}\"", built.pattern),
                    &span,
                ));
            }
            named.insert(built.pattern.clone(), built);
        } else {
            if locs
                .iter()
                .any(|o: &Location| o.kind == built.kind && o.pattern == built.pattern)
            {
                return Err(ConfError::new(
                    format!("duplicate location \"{}\"", built.pattern),
                    &span,
                ));
            }
            locs.push(built);
        }
    }
    let server = Server {
        names,
        conf: Arc::new(conf),
        locations: Locations::new(locs),
        named,
        phases: srv.phases,
        vars: vars.clone(),
        ext,
        pipeline: pipeline.clone(),
    };
    Ok((Arc::new(server), listens))
}

/// `inherit`: the enclosing location's alias and the prefix it replaces,
/// which a location without `root` or `alias` of its own keeps (a fixed
/// alias of a prefix location; one with variables or a regex location's
/// is not passed on).
fn build_location(
    mut l: LocationConf,
    parent: &LocConf,
    modules: &'static [&'static Module],
    inherit: Option<(&str, &str)>,
) -> Location {
    let mut alias_prefix = None;
    if let Some((alias, prefix)) = inherit
        && l.alias.is_none()
        && l.conf.core.root.is_none()
    {
        l.alias = Some(alias.to_string());
        alias_prefix = Some(prefix.to_string());
    }
    let pass_on = match (&l.alias, &alias_prefix) {
        (Some(a), Some(p)) => Some((a.clone(), p.clone())),
        (Some(a), None)
            if l.phases.alias_vars.is_none() && !matches!(l.kind, LocKind::Regex { .. }) =>
        {
            Some((a.clone(), l.pattern.clone()))
        }
        _ => None,
    };
    let conf = l.conf.resolve(parent).with_hooks(modules);
    let limit_except = l.limit_except.map(|b| {
        let (methods, inner) = *b;
        Box::new(LimitExcept {
            methods,
            conf: Arc::new(inner.conf.resolve(&conf).with_hooks(modules)),
            content: inner.content.or_else(|| l.content.clone()),
        })
    });
    let ifs = l
        .ifs
        .into_iter()
        .map(|b| IfBlock {
            conf: Arc::new(b.conf.resolve(&conf).with_hooks(modules)),
            own_content: b.content.is_some(),
            content: b.content.or_else(|| l.content.clone()),
        })
        .collect();
    let nested = l
        .locations
        .into_iter()
        .map(|n| {
            let inherit = pass_on.as_ref().map(|(a, p)| (a.as_str(), p.as_str()));
            build_location(n, &conf, modules, inherit)
        })
        .collect();
    Location {
        kind: l.kind,
        pattern: l.pattern,
        regex: l.regex,
        conf: Arc::new(conf),
        alias: l.alias,
        alias_prefix,
        auto_redirect: l.content.as_ref().is_some_and(|c| c.auto_redirect()),
        content: l.content,
        phases: l.phases,
        nested: Locations::new(nested),
        limit_except,
        ifs,
    }
}

/// A message about a file a directive names, with that directive's file:line
/// when it was written in the configuration.
pub fn located(msg: impl std::fmt::Display, at: Option<&Span>) -> String {
    match at {
        Some(s) => format!("{msg} in {s}"),
        None => msg.to_string(),
    }
}
