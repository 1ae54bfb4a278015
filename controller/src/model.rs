//! The intermediate model: what vireo must serve, independent of where it came from.
//!
//! Front ends (Ingress with ingress-nginx annotations in `crate::ingress`, the Gateway API in
//! `crate::gateway`) build a [`Model`];
//! `crate::render` turns it into one nginx-syntax configuration. Routing is expressed as
//! virtual servers holding locations; a location either proxies to a [`Select`] of weighted
//! upstream groups chosen by request [`Condition`]s (headers, cookies, query arguments,
//! method) or answers by itself (redirect, fixed status), so header/query/method matching,
//! weighted backends and redirects of other front ends map onto the same types.

use std::collections::BTreeMap;

/// Everything one configuration holds.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Model {
    /// Virtual servers, rendered in order; the first with `default` is the default server.
    pub servers: Vec<Server>,
    /// Upstream blocks by name.
    pub upstreams: BTreeMap<String, Upstream>,
    /// Request-rate and connection zones, declared at the http level.
    pub zones: Vec<Zone>,
    /// Files the configuration refers to (certificates, keys, password files): name
    /// relative to the configuration directory, and contents.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// A virtual server: one host name (and its aliases) on the HTTP and, with `tls`, the HTTPS
/// address.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Server {
    /// The names it answers to; `_` for the catch-all server.
    pub names: Vec<String>,
    /// The server that answers requests for no known name.
    pub default: bool,
    pub tls: Option<Tls>,
    pub locations: Vec<Location>,
    /// Raw configuration text put in the server (snippets, when the operator allows them).
    pub snippets: Vec<String>,
}

/// A certificate and key, as files of [`Model::files`].
#[derive(Debug, Clone, PartialEq)]
pub struct Tls {
    pub certificate: String,
    pub key: String,
    /// Client certificates asked for and verified.
    pub client: Option<ClientAuth>,
}

/// Client-certificate authentication of a TLS server.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientAuth {
    /// The trusted CA certificates, a file of [`Model::files`].
    pub ca: String,
    /// `ssl_verify_client`: `on`, `optional`, `optional_no_ca` or `off`.
    pub verify: String,
    pub depth: u32,
    /// Where a request whose certificate is missing or bad is redirected (else 400).
    pub error_page: Option<String>,
}

/// How a location matches the request path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathMatch {
    /// The path and nothing else.
    Exact(String),
    /// Paths starting with this text (nginx's prefix location).
    Prefix(String),
    /// A PCRE pattern, anchored at the start of the path by the renderer.
    Regex { pattern: String, caseless: bool },
}

impl PathMatch {
    /// The path or pattern text.
    pub fn text(&self) -> &str {
        match self {
            PathMatch::Exact(p) | PathMatch::Prefix(p) => p,
            PathMatch::Regex { pattern, .. } => pattern,
        }
    }
}

/// One location: a path, what it applies to requests, and what answers them.
#[derive(Debug, Clone, PartialEq)]
pub struct Location {
    pub path: PathMatch,
    pub policy: Policy,
    pub action: Action,
    /// The object the location comes from, told to error backends (`X-Namespace`,
    /// `X-Ingress-Name`).
    pub origin: Origin,
}

/// Where a location comes from.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Origin {
    pub namespace: String,
    pub name: String,
    pub service: String,
    pub port: String,
}

/// What answers a location's requests.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Pass to an upstream chosen by [`Select`].
    Proxy(Box<Proxy>),
    /// Answer with a redirect (`return code target`); the target may hold variables.
    Redirect { code: u16, target: String },
    /// Answer with a status and no body.
    Status(u16),
}

/// The protocol spoken to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Http,
    Https,
    Grpc,
    Grpcs,
    FastCgi,
}

/// Passing a request to upstreams.
#[derive(Debug, Clone, PartialEq)]
pub struct Proxy {
    pub protocol: Protocol,
    pub select: Select,
    /// `rewrite REGEX REPLACEMENT break;` before passing (the regex is the location's path).
    pub rewrite: Option<Rewrite>,
    /// Request headers set on the way to the upstream, after the defaults (Host and the
    /// X-Forwarded family), which a header of the same name replaces.
    pub set_headers: Vec<(String, String)>,
    /// Request headers whose value is added to the client's (comma-joined), or sent alone
    /// when the client sent none.
    pub append_headers: Vec<(String, String)>,
    /// Fields of the upstream's reply not passed to the client (`proxy_hide_header`).
    pub hide_headers: Vec<String>,
    /// `proxy_redirect FROM TO` pairs.
    pub redirects: Vec<(String, String)>,
    pub cookie_domain: Option<(String, String)>,
    pub cookie_path: Option<(String, String)>,
    pub timeouts: Timeouts,
    pub buffering: Option<bool>,
    pub request_buffering: Option<bool>,
    pub buffer_size: Option<String>,
    pub buffers_number: Option<u32>,
    pub max_temp_file_size: Option<String>,
    pub http_version: Option<String>,
    pub next_upstream: Option<String>,
    pub next_upstream_timeout: Option<u32>,
    pub next_upstream_tries: Option<u32>,
    /// Statuses of the upstream's answers replaced: by the error backend's answer, else by
    /// vireo's own error page.
    pub intercept_errors: Vec<u16>,
    /// The upstream that answers intercepted errors.
    pub error_backend: Option<String>,
    /// A copy of each request sent to another URL.
    pub mirror: Option<Mirror>,
    /// Locations that answer the requests [`Select`] sends to [`Group::jump`] (a match
    /// with other filters, a shorter path's handling), the URI unchanged.
    pub jumps: Vec<Location>,
    /// TLS to an `https`/`grpcs` upstream.
    pub upstream_tls: Option<UpstreamTls>,
}

/// How vireo speaks TLS to an upstream.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UpstreamTls {
    /// Certificate and key files presented when the upstream asks for one.
    pub certificate: Option<(String, String)>,
    /// Trusted CA certificates file.
    pub trusted: Option<String>,
    pub verify: Option<bool>,
    pub verify_depth: Option<u32>,
    pub name: Option<String>,
    pub server_name: Option<bool>,
    pub ciphers: Option<String>,
    pub protocols: Option<String>,
}

impl Proxy {
    /// A plain pass to one upstream.
    pub fn to(protocol: Protocol, upstream: &str) -> Proxy {
        Proxy {
            protocol,
            select: Select::one(upstream),
            rewrite: None,
            set_headers: Vec::new(),
            hide_headers: Vec::new(),
            append_headers: Vec::new(),
            redirects: Vec::new(),
            cookie_domain: None,
            cookie_path: None,
            timeouts: Timeouts::default(),
            buffering: None,
            request_buffering: None,
            buffer_size: None,
            buffers_number: None,
            max_temp_file_size: None,
            http_version: None,
            next_upstream: None,
            next_upstream_timeout: None,
            next_upstream_tries: None,
            intercept_errors: Vec::new(),
            error_backend: None,
            mirror: None,
            jumps: Vec::new(),
            upstream_tls: None,
        }
    }
}

/// A copy of each request sent to another URL, its answer dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Mirror {
    pub target: String,
    pub request_body: bool,
    pub host: Option<String>,
}

/// Upstream timeouts, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timeouts {
    pub connect: Option<u64>,
    pub send: Option<u64>,
    pub read: Option<u64>,
}

impl Timeouts {
    /// The same limit on each wait: connecting, each send, each read.
    pub fn each(ms: u64) -> Timeouts {
        Timeouts {
            connect: Some(ms),
            send: Some(ms),
            read: Some(ms),
        }
    }
}

/// A path rewrite before the request is passed on.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewrite {
    pub pattern: String,
    pub replacement: String,
}

/// Which upstream group serves a request: the first rule whose conditions all hold, else
/// `default`.
#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    pub rules: Vec<(Vec<Condition>, Group)>,
    pub default: Group,
}

impl Select {
    pub fn one(upstream: &str) -> Select {
        Select {
            rules: Vec::new(),
            default: Group::one(upstream),
        }
    }
}

/// Upstreams sharing the requests by weight (one member takes them all).
#[derive(Debug, Clone, PartialEq)]
pub struct Group(pub Vec<(String, u32)>);

impl Group {
    pub fn one(upstream: &str) -> Group {
        Group(vec![(upstream.to_string(), 1)])
    }
    /// A member that answers with a status instead of passing (a backend that is refused
    /// or missing, requests that no match takes).
    pub fn status(code: u16) -> Group {
        Group::one(&status_member(code))
    }
    /// The member that hands requests to [`Proxy::jumps`]`[i]`.
    pub fn jump(i: usize) -> Group {
        Group::one(&jump_member(i))
    }
}

/// How [`Group::jump`] members are named: this and the index.
pub const JUMP_MEMBER: &str = "jump:";

/// The [`Group`] member handing requests to jump `i`.
pub fn jump_member(i: usize) -> String {
    format!("{JUMP_MEMBER}{i}")
}

/// The [`Group`] member answering with `code`.
pub fn status_member(code: u16) -> String {
    format!("{STATUS_MEMBER}{code}")
}

/// How a [`Group`] member that answers with a status is named.
const STATUS_MEMBER: &str = "status:";

/// The status a [`Group::status`] member answers with.
pub fn member_status(member: &str) -> Option<u16> {
    member.strip_prefix(STATUS_MEMBER)?.parse().ok()
}

/// A test on the request.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub input: Input,
    pub test: Test,
}

/// What a [`Condition`] looks at.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Header(String),
    Cookie(String),
    Query(String),
    Method,
}

/// How a [`Condition`] tests its input.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// Equal to the text (header values case-sensitively, as Gateway API and ingress-nginx).
    Equals(String),
    /// Matches the PCRE pattern (unanchored).
    Regex(String),
}

/// What a location applies to requests before answering them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Policy {
    /// Redirect plain-HTTP requests to HTTPS with this status.
    pub https_redirect: Option<u16>,
    /// A request for `/` is redirected (302) to this path.
    pub app_root: Option<String>,
    pub client_max_body_size: Option<String>,
    pub client_body_buffer_size: Option<String>,
    /// Client networks allowed (all others denied) when not empty.
    pub allow: Vec<String>,
    /// Client networks denied.
    pub deny: Vec<String>,
    pub limit_req: Vec<LimitReq>,
    pub limit_conn: Option<(String, u32)>,
    /// Response rate per connection in kilobytes per second, and the kilobytes sent before
    /// it applies.
    pub limit_rate: Option<u32>,
    pub limit_rate_after: Option<u32>,
    pub basic_auth: Option<BasicAuth>,
    pub external_auth: Option<ExternalAuth>,
    /// `satisfy any` between address rules and authentication.
    pub satisfy_any: bool,
    pub cors: Option<Cors>,
    /// Requests are logged (else `access_log off`).
    pub access_log: bool,
    pub rewrite_log: bool,
    /// Response headers added (`add_header … always`).
    pub add_headers: Vec<(String, String)>,
    /// Raw configuration text put in the location (a snippet, when the operator allows it).
    pub snippet: Option<String>,
    /// A PCRE the client certificate's subject DN must match (else 403).
    pub client_subject: Option<String>,
}

/// `limit_req zone=… burst=… nodelay`.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitReq {
    pub zone: String,
    pub burst: u32,
}

/// A shared zone keyed by the client address, except the exempt networks.
#[derive(Debug, Clone, PartialEq)]
pub struct Zone {
    pub name: String,
    pub kind: ZoneKind,
    /// Client networks not counted.
    pub exempt: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ZoneKind {
    /// Requests per second, or per minute.
    Requests {
        rate: u32,
        per_minute: bool,
    },
    Connections,
}

/// HTTP Basic authentication against a password file of [`Model::files`].
#[derive(Debug, Clone, PartialEq)]
pub struct BasicAuth {
    pub realm: String,
    pub file: String,
}

/// Authorisation by a subrequest to an external URL.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalAuth {
    pub url: String,
    pub method: Option<String>,
    /// Where a refused (401) request is redirected, with `rd=` the original URL.
    pub signin: Option<String>,
    pub signin_redirect_param: String,
    /// Headers of the authorisation answer copied into the request passed on.
    pub response_headers: Vec<String>,
    /// `X-Auth-Request-Redirect` sent to the authorisation service.
    pub request_redirect: Option<String>,
    /// The authorisation answer's Set-Cookie goes with every answer (else with successful
    /// ones).
    pub always_set_cookie: bool,
}

/// Cross-origin resource sharing headers and preflight answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Cors {
    /// Allowed origins; `*` alone allows any.
    pub origins: Vec<String>,
    pub methods: String,
    pub headers: String,
    pub expose_headers: String,
    pub credentials: bool,
    pub max_age: u32,
}

/// An upstream block.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Upstream {
    /// `ip:port` peers; none renders a peer that is always down, so the block stays valid and
    /// requests get 502/503.
    pub peers: Vec<String>,
    pub balance: Balance,
}

/// How an upstream picks a peer.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Balance {
    #[default]
    RoundRobin,
    LeastConn,
    /// Consistent hashing on a key with variables.
    Hash(String),
    /// Sticky sessions: consistent hashing on a cookie the client is given on its first
    /// request.
    Cookie(CookieAffinity),
}

/// The sticky-session cookie.
#[derive(Debug, Clone, PartialEq)]
pub struct CookieAffinity {
    pub name: String,
    pub path: String,
    pub domain: Option<String>,
    /// `Max-Age` in seconds; a session cookie without it.
    pub max_age: Option<u64>,
    pub secure: bool,
    pub samesite: Option<String>,
}
