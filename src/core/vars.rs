//! nginx-style variables and the templates built from them.
//!
//! A configuration string such as `"$remote_addr - ${uri}x"` is compiled once,
//! at configuration time, into a [`Template`]: a list of literal byte runs and
//! [`Var`]s. At run time the template is rendered by asking a [`VarSource`]
//! (the request context) for each variable's bytes. Rendering allocates
//! nothing beyond growing the caller's output buffer.

use crate::conf::ast::{ConfError, Span};
use crate::core::module::{Module, VarDef, VarKind};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A variable a template can refer to.
///
/// Names follow nginx and are matched case-insensitively. Aliases map onto
/// one variant: `$document_uri` is [`Var::Uri`] and `$query_string` is
/// [`Var::Args`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Var {
    /// `$remote_addr`
    RemoteAddr,
    /// `$binary_remote_addr`: the client address in binary form, 4 bytes
    /// for IPv4 and 16 for IPv6 (a compact key for limit zones)
    BinaryRemoteAddr,
    /// `$remote_port`
    RemotePort,
    /// `$realip_remote_addr`: the connection's own client address, whatever
    /// realip set.
    RealipRemoteAddr,
    /// `$realip_remote_port`
    RealipRemotePort,
    /// `$time_local`
    TimeLocal,
    /// `$time_iso8601`
    TimeIso8601,
    /// `$msec`: seconds with millisecond resolution, "1234567890.123"
    Msec,
    /// `$request_id`: 16 random bytes in hex, one value per main request
    /// (its subrequests share it).
    RequestId,
    /// `$request`: the full request line
    Request,
    /// `$request_method`
    RequestMethod,
    /// `$request_uri`: the original URI with arguments
    RequestUri,
    /// `$uri` and `$document_uri`: the current, normalized URI
    Uri,
    /// `$args` and `$query_string`
    Args,
    /// `$is_args`: "?" when there are arguments, "" otherwise
    IsArgs,
    /// `$status`
    Status,
    /// `$body_bytes_sent`
    BodyBytesSent,
    /// `$bytes_sent`
    BytesSent,
    /// `$request_completion`: "OK" once the response went out whole, empty
    /// before and when it did not
    RequestCompletion,
    /// `$request_length`
    RequestLength,
    /// `$request_time`: seconds with millisecond resolution
    RequestTime,
    /// `$connection`: connection serial number
    Connection,
    /// `$connection_requests`
    ConnectionRequests,
    /// `$connection_time`: seconds since the connection was accepted, with
    /// millisecond resolution
    ConnectionTime,
    /// `$host`
    Host,
    /// `$hostname`: the machine's host name
    Hostname,
    /// `$server_name`
    ServerName,
    /// `$server_port`
    ServerPort,
    /// `$server_addr`
    ServerAddr,
    /// `$server_protocol`: "HTTP/1.1"
    ServerProtocol,
    /// `$scheme`
    Scheme,
    /// `$pid`
    Pid,
    /// `$content_type`: the request's Content-Type header
    ContentType,
    /// `$content_length`: the request's Content-Length header
    ContentLength,
    /// `$document_root`
    DocumentRoot,
    /// `$request_filename`
    RequestFilename,
    /// `$nginx_version` (answered with vireo's version)
    NginxVersion,
    /// `$realpath_root`: `$document_root` with symbolic links resolved
    RealpathRoot,
    /// `$https`: "on" on TLS connections, empty otherwise
    Https,
    /// `$1` .. `$9`: a regex capture of the last successful regex match
    /// with groups (location, rewrite, `if`, `map`, server name).
    Capture(u8),
    /// A variable the configuration declares: `set`, `map`, or a named
    /// regex capture (`(?<name>…)`).
    User(UserVar),
    /// `$arg_NAME`; NAME as written, lowercased (matching is case-insensitive).
    Arg(Box<str>),
    /// `$http_NAME`: request header; lowercase, `_` turned to `-`
    /// (`$http_user_agent` → `"user-agent"`).
    Http(Box<str>),
    /// `$cookie_NAME`; NAME lowercased (matching is case-insensitive).
    Cookie(Box<str>),
    /// `$sent_http_NAME`: response header; lowercase, `_` turned to `-`.
    SentHttp(Box<str>),
    /// A variable a module provides.
    Module(ModVar),
}

/// A module's variable: its declaration and, for a prefix variable, the
/// rest of the name (lowercased).
#[derive(Clone)]
pub struct ModVar {
    pub def: &'static VarDef,
    pub arg: Box<str>,
}

impl PartialEq for ModVar {
    fn eq(&self, o: &ModVar) -> bool {
        std::ptr::eq(self.def, o.def) && self.arg == o.arg
    }
}

impl Eq for ModVar {}

impl std::hash::Hash for ModVar {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.def.name.hash(h);
        self.arg.hash(h);
    }
}

impl fmt::Debug for ModVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}{}", self.def.name, self.arg)
    }
}

impl Var {
    /// Resolve the name (without the `$`) of a variable the core provides.
    /// Other names give `None`.
    pub fn lookup(name: &str) -> Option<Var> {
        let lower = name.to_ascii_lowercase();
        let n = lower.as_str();
        let v = match n {
            "remote_addr" => Var::RemoteAddr,
            "binary_remote_addr" => Var::BinaryRemoteAddr,
            "remote_port" => Var::RemotePort,
            "realip_remote_addr" => Var::RealipRemoteAddr,
            "realip_remote_port" => Var::RealipRemotePort,
            "time_local" => Var::TimeLocal,
            "time_iso8601" => Var::TimeIso8601,
            "msec" => Var::Msec,
            "request" => Var::Request,
            "request_method" => Var::RequestMethod,
            "request_uri" => Var::RequestUri,
            "request_id" => Var::RequestId,
            "uri" | "document_uri" => Var::Uri,
            "args" | "query_string" => Var::Args,
            "is_args" => Var::IsArgs,
            "status" => Var::Status,
            "body_bytes_sent" => Var::BodyBytesSent,
            "bytes_sent" => Var::BytesSent,
            "request_completion" => Var::RequestCompletion,
            "request_length" => Var::RequestLength,
            "request_time" => Var::RequestTime,
            "connection" => Var::Connection,
            "connection_requests" => Var::ConnectionRequests,
            "connection_time" => Var::ConnectionTime,
            "host" => Var::Host,
            "hostname" => Var::Hostname,
            "server_name" => Var::ServerName,
            "server_port" => Var::ServerPort,
            "server_addr" => Var::ServerAddr,
            "server_protocol" => Var::ServerProtocol,
            "scheme" => Var::Scheme,
            "pid" => Var::Pid,
            "content_type" => Var::ContentType,
            "content_length" => Var::ContentLength,
            "document_root" => Var::DocumentRoot,
            "request_filename" => Var::RequestFilename,
            "nginx_version" => Var::NginxVersion,
            "realpath_root" => Var::RealpathRoot,
            "https" => Var::Https,
            _ => {
                if let Some(h) = n.strip_prefix("http_") {
                    Var::Http(header_name(h))
                } else if let Some(h) = n.strip_prefix("sent_http_") {
                    Var::SentHttp(header_name(h))
                } else if let Some(c) = n.strip_prefix("cookie_") {
                    Var::Cookie(c.into())
                } else if let Some(a) = n.strip_prefix("arg_") {
                    Var::Arg(a.into())
                } else {
                    return None;
                }
            }
        };
        Some(v)
    }

    /// The fixed name of a variable without a parameter (`"remote_addr"`);
    /// `None` for captures and prefix variables.
    pub fn static_name(&self) -> Option<&'static str> {
        Some(match self {
            Var::RemoteAddr => "remote_addr",
            Var::BinaryRemoteAddr => "binary_remote_addr",
            Var::RemotePort => "remote_port",
            Var::RealipRemoteAddr => "realip_remote_addr",
            Var::RealipRemotePort => "realip_remote_port",
            Var::TimeLocal => "time_local",
            Var::TimeIso8601 => "time_iso8601",
            Var::Msec => "msec",
            Var::Request => "request",
            Var::RequestMethod => "request_method",
            Var::RequestUri => "request_uri",
            Var::RequestId => "request_id",
            Var::Uri => "uri",
            Var::Args => "args",
            Var::IsArgs => "is_args",
            Var::Status => "status",
            Var::BodyBytesSent => "body_bytes_sent",
            Var::BytesSent => "bytes_sent",
            Var::RequestCompletion => "request_completion",
            Var::RequestLength => "request_length",
            Var::RequestTime => "request_time",
            Var::Connection => "connection",
            Var::ConnectionRequests => "connection_requests",
            Var::ConnectionTime => "connection_time",
            Var::Host => "host",
            Var::Hostname => "hostname",
            Var::ServerName => "server_name",
            Var::ServerPort => "server_port",
            Var::ServerAddr => "server_addr",
            Var::ServerProtocol => "server_protocol",
            Var::Scheme => "scheme",
            Var::Pid => "pid",
            Var::ContentType => "content_type",
            Var::ContentLength => "content_length",
            Var::DocumentRoot => "document_root",
            Var::RequestFilename => "request_filename",
            Var::NginxVersion => "nginx_version",
            Var::RealpathRoot => "realpath_root",
            Var::Https => "https",
            Var::Capture(_)
            | Var::User(_)
            | Var::Arg(_)
            | Var::Http(_)
            | Var::Cookie(_)
            | Var::SentHttp(_)
            | Var::Module(_) => {
                return None;
            }
        })
    }
}

/// Displays the variable as it would be written in a configuration, `$name`.
impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = self.static_name() {
            return write!(f, "${n}");
        }
        match self {
            Var::Capture(n) => write!(f, "${n}"),
            Var::User(u) => write!(f, "${}", u.name),
            Var::Arg(a) => write!(f, "$arg_{a}"),
            Var::Cookie(c) => write!(f, "$cookie_{c}"),
            Var::Http(h) => write!(f, "$http_{}", h.replace('-', "_")),
            Var::SentHttp(h) => write!(f, "$sent_http_{}", h.replace('-', "_")),
            Var::Module(m) => write!(f, "{m:?}"),
            _ => Ok(()),
        }
    }
}

fn header_name(s: &str) -> Box<str> {
    s.bytes()
        .map(|b| if b == b'_' { '-' } else { char::from(b) })
        .collect::<String>()
        .into_boxed_str()
}

/// The vireo version, for `$nginx_version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Supplies variable values at run time; implemented by the request context.
pub trait VarSource {
    /// Append the value's bytes to `out`; append nothing for an unset value.
    fn var(&self, var: &Var, out: &mut Vec<u8>);
}

/// One piece of a compiled template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Text copied as is.
    Lit(Box<[u8]>),
    /// A variable whose value is asked from the [`VarSource`].
    Var(Var),
}

/// A compiled string with variables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Template {
    source: Box<str>,
    segments: Box<[Segment]>,
}

const INVALID_NAME: &str = "invalid variable name";

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl Template {
    /// Compile `s` the way nginx compiles its scripted strings:
    ///
    /// * `$name` where name is `[A-Za-z0-9_]+`, or `${name}` to glue text on;
    /// * `$1` .. `$9` (one digit) are regex captures, so `$12` is capture 1
    ///   followed by the text "2";
    /// * `\$` gives a literal `$`; any other backslash is kept as is.
    ///
    /// Errors: `$` not followed by a name (or `${}`) → `invalid variable
    /// name`; `${name` without `}` → `the closing bracket in "name" variable
    /// is missing`; an unknown name → `unknown "name" variable`. While a
    /// configuration loads, a name that is not built in is taken as a
    /// variable the configuration declares (`set`, `map`, named capture),
    /// checked once the whole configuration is read (see [`Vars`]).
    pub fn compile(s: &str, vars: &mut Vars) -> Result<Template, String> {
        let b = s.as_bytes();
        let mut segments = Vec::new();
        let mut lit = Vec::new();
        let mut i = 0;

        fn flush(lit: &mut Vec<u8>, segments: &mut Vec<Segment>) {
            if !lit.is_empty() {
                segments.push(Segment::Lit(std::mem::take(lit).into_boxed_slice()));
            }
        }

        while i < b.len() {
            let c = b[i];
            if c == b'\\' && b.get(i + 1) == Some(&b'$') {
                lit.push(b'$');
                i += 2;
                continue;
            }
            if c != b'$' {
                lit.push(c);
                i += 1;
                continue;
            }

            i += 1;
            let Some(&next) = b.get(i) else {
                return Err(INVALID_NAME.to_string());
            };

            if (b'1'..=b'9').contains(&next) {
                vars.captures = true;
                flush(&mut lit, &mut segments);
                segments.push(Segment::Var(Var::Capture(next - b'0')));
                i += 1;
                continue;
            }

            let bracket = next == b'{';
            if bracket {
                i += 1;
                if i == b.len() {
                    return Err(INVALID_NAME.to_string());
                }
            }
            let start = i;
            while i < b.len() && is_name_byte(b[i]) {
                i += 1;
            }
            let name = &s[start..i];
            if bracket {
                if b.get(i) == Some(&b'}') {
                    i += 1;
                } else {
                    return Err(format!(
                        "the closing bracket in \"{name}\" variable is missing"
                    ));
                }
            }
            if name.is_empty() {
                return Err(INVALID_NAME.to_string());
            }
            let var = vars.reference(name);
            flush(&mut lit, &mut segments);
            segments.push(Segment::Var(var));
        }
        flush(&mut lit, &mut segments);

        Ok(Template {
            source: s.into(),
            segments: segments.into_boxed_slice(),
        })
    }

    /// Compile several strings as one template, each on its own (so a `$`
    /// or `\` at the end of one part does not combine with the next), the
    /// way nginx compiles a multi-string `log_format`.
    pub fn compile_parts(parts: &[&str], vars: &mut Vars) -> Result<Template, String> {
        let mut segments: Vec<Segment> = Vec::new();
        for part in parts {
            let t = Template::compile(part, vars)?;
            for seg in t.segments.into_vec() {
                match (segments.last_mut(), seg) {
                    (Some(Segment::Lit(prev)), Segment::Lit(l)) => {
                        let mut joined = std::mem::take(prev).into_vec();
                        joined.extend_from_slice(&l);
                        *prev = joined.into_boxed_slice();
                    }
                    (_, seg) => segments.push(seg),
                }
            }
        }
        Ok(Template {
            source: parts.concat().into(),
            segments: segments.into_boxed_slice(),
        })
    }

    /// A template of plain text, with no variables.
    pub fn plain(s: &str) -> Template {
        Template {
            source: s.into(),
            segments: Box::new([Segment::Lit(s.as_bytes().into())]),
        }
    }

    /// True when the template has no variables.
    pub fn is_literal(&self) -> bool {
        self.segments.iter().all(|s| matches!(s, Segment::Lit(_)))
    }

    /// The text of a template without variables (`\$` already turned into
    /// `$`); `None` when it has variables.
    pub fn literal(&self) -> Option<&[u8]> {
        match &*self.segments {
            [] => Some(&[]),
            [Segment::Lit(l)] => Some(l),
            _ => None,
        }
    }

    /// The compiled pieces, in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The string the template was compiled from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Append the rendered template to `out`.
    pub fn render(&self, src: &dyn VarSource, out: &mut Vec<u8>) {
        for seg in self.segments.iter() {
            match seg {
                Segment::Lit(l) => out.extend_from_slice(l),
                Segment::Var(v) => src.var(v, out),
            }
        }
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// `$arg_NAME`: the value of the first `name=value` pair of the query string
/// (the part after `?`, without it). Pairs are separated by `&`; the name is
/// compared case-insensitively, as nginx does. A pair without `=` does not
/// match. The value is returned raw (not percent-decoded).
pub fn find_arg<'a>(query: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let n = name.as_bytes();
    query.split(|&b| b == b'&').find_map(|pair| {
        if pair.len() > n.len() && pair[n.len()] == b'=' && pair[..n.len()].eq_ignore_ascii_case(n)
        {
            Some(&pair[n.len() + 1..])
        } else {
            None
        }
    })
}

/// `$cookie_NAME`: the value of the first cookie called `name` in one
/// `Cookie:` header value. Like nginx: the name is compared
/// case-insensitively, cookies are separated by `;` (or `,`), spaces around
/// `=` are skipped, and the value runs to the next `;` (or the end).
/// For several `Cookie:` headers, call once per header in order.
pub fn find_cookie<'a>(cookie_header: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let h = cookie_header;
    let n = name.as_bytes();
    let end = h.len();
    let skip_spaces = |mut p: usize| {
        while p < end && h[p] == b' ' {
            p += 1;
        }
        p
    };
    let mut p = skip_spaces(0);

    while p < end {
        if h.len() - p >= n.len() && h[p..p + n.len()].eq_ignore_ascii_case(n) {
            let q = skip_spaces(p + n.len());
            if q < end && h[q] == b'=' {
                let start = skip_spaces(q + 1);
                let stop = memchr::memchr(b';', &h[start..]).map_or(end, |i| start + i);
                return Some(&h[start..stop]);
            }
        }
        // Not this one: move past the next separator.
        while p < end {
            let c = h[p];
            p += 1;
            if c == b';' || c == b',' {
                break;
            }
        }
        p = skip_spaces(p);
    }
    None
}

/// Append `n` in decimal to `out` without allocating.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// An address as text: IPv4 digit by digit (without the formatting
/// machinery: `$remote_addr` is rendered for most FastCGI requests), IPv6
/// through `Display`.
pub fn push_ip(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(a) => {
            for (i, o) in a.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                push_u64(out, o.into());
            }
        }
        std::net::IpAddr::V6(a) => {
            use std::io::Write;
            let _ = write!(out, "{a}");
        }
    }
}

/// A variable declared by the configuration (`set`, `map`, a named regex
/// capture): its index in the configuration's [`VarTable`] and its name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UserVar {
    pub index: u32,
    pub name: Box<str>,
}

/// A variable whose value is computed when a request first reads it (`map`).
pub trait Computed: Send + Sync + fmt::Debug {
    /// Append the value for `req`; `outer` answers the variables the
    /// computation reads (the request itself, or a finished request when a
    /// log line or a response header asks).
    fn compute(
        &self,
        req: &crate::core::request::Request<'_>,
        outer: &dyn VarSource,
        out: &mut Vec<u8>,
    );
    /// Computed again on every read instead of once per request.
    fn volatile(&self) -> bool {
        false
    }
}

/// How a declared variable gets its value.
#[derive(Clone, Debug)]
pub enum UserKind {
    /// Assigned by `set` or a named capture; empty until then.
    Set,
    /// Computed on first read (and reassignable by `set`).
    Computed(std::sync::Arc<dyn Computed>),
}

/// Every variable one configuration declares, indexed by [`UserVar::index`].
#[derive(Debug, Default)]
pub struct VarTable {
    pub names: Vec<Box<str>>,
    pub kinds: Vec<UserKind>,
    /// Some template reads `$1`..`$9`: numbered captures are kept.
    pub captures: bool,
}

/// The variables of one configuration load: the modules' names, and the
/// ones the configuration declares (`set`, `map`, named captures) and
/// references (any template), in any order, as in nginx. A name referenced
/// but never declared is an error at the end of the load, reported at the
/// directive that first used it.
pub struct Vars {
    modules: Vec<&'static VarDef>,
    entries: Vec<Entry>,
    by_name: HashMap<Box<str>, u32>,
    /// Where a first use is reported: the directive being applied.
    span: Option<Span>,
    /// Some template reads `$1`..`$9`.
    pub captures: bool,
}

struct Entry {
    name: Box<str>,
    kind: Option<UserKind>,
    first_use: Option<Span>,
}

impl Vars {
    pub fn new(modules: &[&'static Module]) -> Vars {
        Vars {
            modules: modules.iter().flat_map(|m| m.variables.iter()).collect(),
            entries: Vec::new(),
            by_name: HashMap::new(),
            span: None,
            captures: false,
        }
    }

    /// The directive being applied: where a first use is reported.
    pub fn at(&mut self, span: &Span) {
        self.span = Some(span.clone());
    }

    /// A variable the core or a module provides, and that the configuration
    /// may not declare itself.
    pub fn provided(&self, name: &str) -> Option<Var> {
        if let Some(v) = Var::lookup(name) {
            return Some(v);
        }
        let lower = name.to_ascii_lowercase();
        self.modules.iter().find_map(|&def| {
            let arg = match def.kind {
                VarKind::Prefix => lower.strip_prefix(def.name)?,
                VarKind::Name if lower == def.name => "",
                VarKind::Name | VarKind::Changeable => return None,
            };
            Some(Var::Module(ModVar {
                def,
                arg: arg.into(),
            }))
        })
    }

    fn slot(&mut self, name: &str) -> u32 {
        let lower = name.to_ascii_lowercase();
        if let Some(&i) = self.by_name.get(lower.as_str()) {
            return i;
        }
        let i = self.entries.len() as u32;
        self.entries.push(Entry {
            name: lower.clone().into(),
            kind: None,
            first_use: None,
        });
        self.by_name.insert(lower.into(), i);
        i
    }

    /// A template names a variable: one provided, or one the configuration
    /// declares (checked at the end of the load).
    pub fn reference(&mut self, name: &str) -> Var {
        if let Some(v) = self.provided(name) {
            return v;
        }
        let i = self.slot(name);
        let span = self.span.clone();
        let e = &mut self.entries[i as usize];
        if e.first_use.is_none() {
            e.first_use = span;
        }
        Var::User(UserVar {
            index: i,
            name: e.name.clone(),
        })
    }

    /// Declare a variable. A provided name is refused as nginx does ("the
    /// duplicate ... variable"); a computed declaration replaces a plain
    /// one, and two computed ones for one name are refused.
    pub fn declare(&mut self, name: &str, kind: UserKind) -> Result<UserVar, String> {
        if self.provided(name).is_some() {
            return Err(format!("the duplicate \"{name}\" variable"));
        }
        let i = self.slot(name);
        let e = &mut self.entries[i as usize];
        match (&e.kind, kind) {
            (Some(UserKind::Computed(_)), UserKind::Computed(_)) => {
                return Err(format!("the duplicate \"{name}\" variable"));
            }
            (Some(UserKind::Computed(_)), UserKind::Set) => {}
            (_, k) => e.kind = Some(k),
        }
        Ok(UserVar {
            index: i,
            name: e.name.clone(),
        })
    }

    /// End the load: every referenced variable must have been declared.
    pub fn finish(self) -> Result<VarTable, ConfError> {
        let mut t = VarTable {
            captures: self.captures,
            ..Default::default()
        };
        for e in self.entries {
            let provided = self
                .modules
                .iter()
                .find(|d| d.kind == VarKind::Changeable && *d.name == *e.name);
            let kind = match (e.kind, provided) {
                (Some(k), _) => Some(k),
                (None, Some(def)) => Some(UserKind::Computed(std::sync::Arc::new(Provided(def)))),
                (None, None) => None,
            };
            let Some(kind) = kind else {
                let msg = format!("unknown \"{}\" variable", e.name);
                return Err(match &e.first_use {
                    Some(span) => ConfError::new(msg, span),
                    None => ConfError::bare(msg),
                });
            };
            t.names.push(e.name);
            t.kinds.push(kind);
        }
        Ok(t)
    }
}

/// A module's changeable variable the configuration did not declare: its
/// getter gives the value, on every read.
struct Provided(&'static VarDef);

impl fmt::Debug for Provided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}", self.0.name)
    }
}

impl Computed for Provided {
    fn compute(
        &self,
        req: &crate::core::request::Request<'_>,
        _outer: &dyn VarSource,
        out: &mut Vec<u8>,
    ) {
        (self.0.get)(req, "", out)
    }

    fn volatile(&self) -> bool {
        true
    }
}

/// A regular expression of the configuration (location, rewrite, `if`,
/// `map`, server name), matched on bytes as PCRE does without UTF-8 mode:
/// `.` is any byte, `\w`/`\d`/`\s` and case folding are ASCII, and a
/// non-ASCII character is its UTF-8 bytes. Named groups declare variables.
///
/// Patterns the `regex` crate cannot take that way (a non-ASCII character
/// in a class, `\p{…}`, look-around, back-references, atomic groups,
/// possessive quantifiers, `\Q…\E`, `(?'n')` …) are
/// compiled by PCRE2 with its JIT, nginx's own engine; both number
/// captures by their opening parenthesis, as PCRE does.
#[derive(Clone, Debug)]
pub struct Re {
    re: Engine,
    /// Capture groups, without the whole match.
    groups: usize,
    /// (group index, variable index) of each named group.
    named: Box<[(usize, u32)]>,
    pre: Prefilter,
}

/// A necessary condition checked before the regex runs: most location
/// regexes are anchored (`\.php$`, `^/api/`) or need a literal (`/\.ht`),
/// and looking at a byte or two costs far less than entering the regex
/// engine, which matters when a request walks past a dozen regex locations
/// that do not match. Literals are lowercase and compared ASCII-caselessly,
/// which also covers `~*`.
///
/// A prefilter is *decisive* when its literals are the regex's whole
/// language and its only anchor is the one its kind checks (`\.php$`,
/// `^/api/`, `/\.ht`, `\.(?:css|js)$`): its answer is then the regex's, and
/// the engine is not entered. The literals of a case-sensitive decisive
/// prefilter keep their case and are compared exactly.
#[derive(Clone, Debug)]
struct Prefilter {
    kind: PreKind,
    lits: Box<[Box<[u8]>]>,
    /// For `Contains`: where each literal is looked for (`Prefilter::key`).
    keys: Box<[usize]>,
    decisive: bool,
    /// Literals compared byte for byte (a decisive case-sensitive one).
    exact_case: bool,
    /// For `Starts`/`Ends`: the bytes (both cases) the subject may have at
    /// `at` from its start (`Starts`) or end (`Ends`), checked first.
    bytes: [u64; 4],
    at: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PreKind {
    None,
    /// Anchored at the start: every match starts with one of the literals.
    Starts,
    /// Anchored at the end: every match ends with one of them.
    Ends,
    /// Every match contains one of them.
    Contains,
}

/// A byte a subject must have for a regex to match it: a bit set of the
/// 256 byte values.
#[derive(Clone, Copy, Debug)]
pub enum Quick {
    /// No such byte known.
    Any,
    /// The byte at this index from the start is in the set.
    At(usize, [u64; 4]),
    /// The last byte is in the set.
    Last([u64; 4]),
}

/// More literals than this are not worth checking one by one.
const PREFILTER_MAX_LITERALS: usize = 8;

impl Prefilter {
    const NONE: fn() -> Prefilter = || Prefilter {
        kind: PreKind::None,
        lits: Box::default(),
        keys: Box::default(),
        decisive: false,
        exact_case: false,
        bytes: [0; 4],
        at: 0,
    };

    /// The prefilter of `pattern`, compiled caselessly (`~*`) or not.
    fn of(pattern: &str, caseless: bool) -> Prefilter {
        use regex_syntax::hir::Look;
        use regex_syntax::hir::literal::{ExtractKind, Extractor, Seq};
        // Case-sensitive on purpose: the literals of the case-sensitive
        // pattern, compared caselessly, are necessary for both forms.
        let Ok(hir) = regex_syntax::ParserBuilder::new()
            .unicode(false)
            .utf8(false)
            .build()
            .parse(pattern)
        else {
            return (Prefilter::NONE)();
        };
        let props = hir.properties();
        // The literals, and whether they are the whole language (then the
        // case-sensitive ones keep their case).
        let lits = |kind: ExtractKind| -> Option<(Vec<Box<[u8]>>, bool)> {
            let prefix = kind.is_prefix();
            let seq: Seq = Extractor::new().kind(kind).extract(&hir);
            let lits = seq.literals()?;
            if lits.is_empty() || lits.iter().any(|l| l.is_empty()) {
                return None;
            }
            let mut out: Vec<Box<[u8]>> = Vec::new();
            // Many literals sharing a start (`/api/v[0-9]`) become that start.
            let common = if prefix {
                seq.longest_common_prefix()
            } else {
                seq.longest_common_suffix()
            };
            let exact = match common {
                Some(c) if !c.is_empty() && lits.len() > 2 => {
                    out.push(c.to_ascii_lowercase().into());
                    false
                }
                _ => {
                    let exact = seq.is_exact();
                    for l in lits {
                        let b = l.as_bytes();
                        let lit: Box<[u8]> = match exact && !caseless {
                            true => b.into(),
                            false => b.to_ascii_lowercase().into(),
                        };
                        if !out.contains(&lit) {
                            out.push(lit);
                        }
                    }
                    exact
                }
            };
            (out.len() <= PREFILTER_MAX_LITERALS).then_some((out, exact))
        };
        let looks = props.look_set();
        let ((kind, (lits, exact)), only) = if props.look_set_prefix().contains(Look::Start) {
            match lits(ExtractKind::Prefix) {
                Some(l) => ((PreKind::Starts, l), Look::Start),
                None => return (Prefilter::NONE)(),
            }
        } else if let Some(l) = props
            .look_set_suffix()
            .contains(Look::End)
            .then(|| lits(ExtractKind::Suffix))
            .flatten()
        {
            ((PreKind::Ends, l), Look::End)
        } else {
            match lits(ExtractKind::Prefix) {
                Some(l) => ((PreKind::Contains, l), Look::End),
                None => return (Prefilter::NONE)(),
            }
        };
        let decisive = exact
            && match kind {
                PreKind::Contains => looks.is_empty(),
                _ => looks.remove(only).is_empty(),
            };
        let exact_case = decisive && !caseless;
        // Only a decisive prefilter compares with case; the others compare lowercase.
        let lits: Vec<Box<[u8]>> = match exact_case {
            true => lits,
            false => lits.iter().map(|l| l.to_ascii_lowercase().into()).collect(),
        };
        // The quick byte: the second one for starts (the first is usually
        // '/'), the last one for ends.
        let shortest = lits.iter().map(|l| l.len()).min().unwrap_or(0);
        let at = usize::from(kind == PreKind::Starts && shortest > 1);
        let mut bytes = [0u64; 4];
        for l in &lits {
            let b = if kind == PreKind::Ends {
                l[l.len() - 1]
            } else {
                l[at]
            };
            for c in [b, b.to_ascii_uppercase()] {
                bytes[usize::from(c >> 6)] |= 1 << (c & 63);
            }
        }
        Prefilter {
            kind,
            keys: lits.iter().map(|l| Prefilter::key(l)).collect(),
            lits: lits.into(),
            decisive,
            exact_case,
            bytes,
            at,
        }
    }

    #[inline]
    fn allows(&self, s: &[u8]) -> bool {
        let quick = |b: u8| self.bytes[usize::from(b >> 6)] & (1 << (b & 63)) != 0;
        match self.kind {
            PreKind::None => true,
            PreKind::Starts => s.get(self.at).is_some_and(|&b| quick(b)) && self.starts(s),
            PreKind::Ends => s.last().is_some_and(|&b| quick(b)) && self.ends(s),
            PreKind::Contains => {
                (self.lits.iter().zip(&self.keys)).any(|(l, &k)| self.contains(s, l, k))
            }
        }
    }

    /// Byte by byte: literals are a few bytes, shorter than a call to
    /// `memcmp`.
    #[inline]
    fn eq(&self, a: &[u8], l: &[u8]) -> bool {
        match self.exact_case {
            true => a.iter().zip(l).all(|(x, y)| x == y),
            false => eq_lower(a, l),
        }
    }

    fn starts(&self, s: &[u8]) -> bool {
        self.lits
            .iter()
            .any(|l| s.len() >= l.len() && self.eq(&s[..l.len()], l))
    }

    fn ends(&self, s: &[u8]) -> bool {
        self.lits
            .iter()
            .any(|l| s.len() >= l.len() && self.eq(&s[s.len() - l.len()..], l))
    }

    /// `s` contains `l`. Candidates are found by the literal's byte at
    /// `k` (see `Prefilter::key`).
    #[inline]
    fn contains(&self, s: &[u8], l: &[u8], k: usize) -> bool {
        let Some(last) = s.len().checked_sub(l.len()) else {
            return false;
        };
        let key = l[k];
        (0..=last).any(|i| s[i + k].eq_ignore_ascii_case(&key) && self.eq(&s[i..], l))
    }

    /// Where a literal is looked for in a subject: its first byte that is
    /// neither a letter nor `/` (`.`, rare in a URI and the same in both
    /// cases), else its first `/`, else its last byte.
    fn key(l: &[u8]) -> usize {
        (l.iter()
            .position(|b| !b.is_ascii_alphabetic() && *b != b'/'))
        .or_else(|| l.iter().position(|&b| b == b'/'))
        .unwrap_or(l.len() - 1)
    }
}

/// `a` equals the lowercase `l`, ASCII-caselessly.
#[inline]
fn eq_lower(a: &[u8], l: &[u8]) -> bool {
    a.iter().zip(l).all(|(x, y)| x.to_ascii_lowercase() == *y)
}

/// The engine a pattern was compiled by.
#[derive(Clone, Debug)]
enum Engine {
    Rust(regex::bytes::Regex),
    Pcre(Arc<pcre2::bytes::Regex>),
}

impl Re {
    /// Compile; the error reads as nginx's (`regex "…" compile failed: …`).
    pub fn new(pattern: &str, caseless: bool, vars: &mut Vars) -> Result<Re, String> {
        // The regex crate reads `a++` as `(a+)+`; in PCRE it is possessive.
        let rust = regex::bytes::RegexBuilder::new(pattern)
            .case_insensitive(caseless)
            .unicode(false)
            .build();
        let re = match rust {
            Ok(re) if !has_possessive(pattern) => Engine::Rust(re),
            _ => Engine::Pcre(Arc::new(pcre(pattern, caseless)?)),
        };
        let names: Vec<Option<String>> = match &re {
            Engine::Rust(r) => r.capture_names().map(|n| n.map(str::to_string)).collect(),
            Engine::Pcre(r) => r.capture_names().to_vec(),
        };
        let mut named = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if let Some(n) = name {
                named.push((i, vars.declare(n, UserKind::Set)?.index));
            }
        }
        let pre = match re {
            Engine::Rust(_) => Prefilter::of(pattern, caseless),
            Engine::Pcre(_) => (Prefilter::NONE)(),
        };
        Ok(Re {
            groups: names.len() - 1,
            re,
            named: named.into(),
            pre,
        })
    }

    pub fn as_str(&self) -> &str {
        match &self.re {
            Engine::Rust(r) => r.as_str(),
            Engine::Pcre(r) => r.as_str(),
        }
    }

    #[inline]
    pub fn is_match(&self, s: &[u8]) -> bool {
        self.pre.allows(s) && (self.pre.decisive || self.engine_match(s))
    }

    /// `is_match` for a subject `may_match` allowed.
    #[inline]
    pub fn is_match_allowed(&self, s: &[u8]) -> bool {
        self.pre.decisive || self.engine_match(s)
    }

    /// The engine's answer, without the prefilter.
    fn engine_match(&self, s: &[u8]) -> bool {
        match &self.re {
            Engine::Rust(r) => r.is_match(s),
            // A match limit or JIT stack overflow is no match, as nginx
            // treats a failed pcre_exec().
            Engine::Pcre(r) => r.is_match(s).unwrap_or(false),
        }
    }

    /// Match `s`; on a match, `spans` holds every group's span (index 0 is
    /// the whole match, `None` for a group that did not take part).
    pub fn captures(&self, s: &[u8], spans: &mut Vec<Option<(usize, usize)>>) -> bool {
        spans.clear();
        if !self.pre.allows(s) {
            return false;
        }
        match &self.re {
            Engine::Rust(r) => {
                let mut locs = r.capture_locations();
                if r.captures_read(&mut locs, s).is_none() {
                    return false;
                }
                spans.extend((0..locs.len()).map(|i| locs.get(i)));
            }
            Engine::Pcre(r) => {
                let mut locs = r.capture_locations();
                if !matches!(r.captures_read(&mut locs, s), Ok(Some(_))) {
                    return false;
                }
                spans.extend((0..locs.len()).map(|i| locs.get(i)));
            }
        }
        true
    }

    /// What a subject's first, second or last byte must be for a match,
    /// for indexing many regexes by byte (see `core::route`).
    pub fn quick(&self) -> Quick {
        match self.pre.kind {
            PreKind::Starts => Quick::At(self.pre.at, self.pre.bytes),
            PreKind::Ends => Quick::Last(self.pre.bytes),
            PreKind::None | PreKind::Contains => Quick::Any,
        }
    }

    /// False when `s` cannot match (a cheap check on anchored literals);
    /// true says nothing.
    #[inline]
    pub fn may_match(&self, s: &[u8]) -> bool {
        self.pre.allows(s)
    }

    /// Number of capture groups (without the whole match).
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// (group index, variable index) of the named groups.
    pub fn named(&self) -> &[(usize, u32)] {
        &self.named
    }
}

/// Does the pattern hold a quantifier followed by `+` (PCRE's possessive
/// form) outside a character class?
fn has_possessive(pattern: &str) -> bool {
    let b = pattern.as_bytes();
    let (mut i, mut class) = (0, false);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' if !class => {
                class = true;
                // A `]` first in the class (after `^`) is a literal.
                if b.get(i + 1) == Some(&b'^') {
                    i += 1;
                }
                if b.get(i + 1) == Some(&b']') {
                    i += 1;
                }
            }
            b']' if class => class = false,
            // `(?+…` is not a quantifier.
            b'*' | b'+' | b'?' | b'}'
                if !class
                    && b.get(i + 1) == Some(&b'+')
                    && !(b[i] == b'?' && i > 0 && b[i - 1] == b'(') =>
            {
                return true;
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// Spans of a match's groups (`None`: the group took no part), and the
/// named groups' (name, number).
pub type Matched = (Vec<Option<(usize, usize)>>, Vec<(String, usize)>);

/// Match a regex known only at run time (SSI's `if`) once, compiled as
/// configuration regexes are: Rust's engine on bytes when it can take the
/// pattern, else PCRE2. `Ok(None)`: no match; `Err`: the pattern is bad.
pub fn match_once(pattern: &str, subject: &[u8]) -> Result<Option<Matched>, String> {
    fn names<'a>(it: impl Iterator<Item = Option<&'a str>>) -> Vec<(String, usize)> {
        it.enumerate()
            .filter_map(|(i, n)| n.map(|n| (n.to_string(), i)))
            .collect()
    }
    if let Ok(re) = regex::bytes::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
    {
        return Ok(re.captures(subject).map(|c| {
            let spans = c.iter().map(|m| m.map(|m| (m.start(), m.end()))).collect();
            (spans, names(re.capture_names()))
        }));
    }
    let re = pcre(pattern, false)?;
    let c = re.captures(subject).map_err(|e| e.to_string())?;
    Ok(c.map(|c| {
        let spans = (0..c.len())
            .map(|i| c.get(i).map(|m| (m.start(), m.end())))
            .collect();
        (
            spans,
            names(re.capture_names().iter().map(Option::as_deref)),
        )
    }))
}

/// PCRE2 with its JIT (when the platform has one), without UTF mode: bytes,
/// as nginx compiles configuration regexes.
fn pcre(pattern: &str, caseless: bool) -> Result<pcre2::bytes::Regex, String> {
    pcre2::bytes::RegexBuilder::new()
        .caseless(caseless)
        .jit_if_available(true)
        .build(pattern)
        .map_err(|e| {
            let why = e.to_string();
            let why = why.rsplit_once(": ").map_or(why.as_str(), |(_, w)| w);
            format!("regex \"{pattern}\" compile failed: {why}")
        })
}

/// The numbered captures of the last regex match with groups: `$1`..`$9`
/// read them. The subject is copied, so the captures outlive a rewrite of
/// the URI they came from (as in nginx).
#[derive(Clone, Debug, Default)]
pub struct Captures {
    subject: Vec<u8>,
    spans: Vec<Option<(usize, usize)>>,
}

impl Captures {
    pub fn set(&mut self, subject: &[u8], spans: &[Option<(usize, usize)>]) {
        self.subject.clear();
        self.subject.extend_from_slice(subject);
        self.spans.clear();
        self.spans.extend_from_slice(spans);
    }

    /// Capture `n` (0 is the whole match); `None` when it did not take part.
    pub fn get(&self, n: usize) -> Option<&[u8]> {
        let (a, b) = (*self.spans.get(n)?)?;
        Some(&self.subject[a..b])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Src(HashMap<Var, &'static str>);

    impl VarSource for Src {
        fn var(&self, var: &Var, out: &mut Vec<u8>) {
            if let Some(v) = self.0.get(var) {
                out.extend_from_slice(v.as_bytes());
            }
        }
    }

    fn src() -> Src {
        let mut m = HashMap::new();
        m.insert(Var::RemoteAddr, "10.0.0.1");
        m.insert(Var::Uri, "/index.html");
        m.insert(Var::Http("user-agent".into()), "curl/8");
        m.insert(Var::Capture(1), "cap1");
        m.insert(Var::Arg("id".into()), "42");
        Src(m)
    }

    fn render(t: &str) -> String {
        let t = Template::compile(t, &mut Vars::new(&[])).unwrap();
        let mut out = Vec::new();
        t.render(&src(), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lookup_names() {
        assert_eq!(Var::lookup("remote_addr"), Some(Var::RemoteAddr));
        assert_eq!(Var::lookup("Remote_Addr"), Some(Var::RemoteAddr));
        assert_eq!(Var::lookup("document_uri"), Some(Var::Uri));
        assert_eq!(Var::lookup("query_string"), Some(Var::Args));
        assert_eq!(Var::lookup("nginx_version"), Some(Var::NginxVersion));
        assert_eq!(
            Var::lookup("http_User_Agent"),
            Some(Var::Http("user-agent".into()))
        );
        assert_eq!(
            Var::lookup("sent_http_content_type"),
            Some(Var::SentHttp("content-type".into()))
        );
        assert_eq!(Var::lookup("cookie_SID"), Some(Var::Cookie("sid".into())));
        assert_eq!(Var::lookup("arg_page_no"), Some(Var::Arg("page_no".into())));
        assert_eq!(Var::lookup("nosuch"), None);
        assert_eq!(Var::lookup(""), None);
    }

    #[test]
    fn display_round_trips() {
        for n in [
            "remote_addr",
            "http_user_agent",
            "sent_http_x_a",
            "cookie_a",
            "arg_b",
            "server_protocol",
        ] {
            let v = Var::lookup(n).unwrap();
            assert_eq!(v.to_string(), format!("${n}"));
        }
        assert_eq!(Var::Capture(3).to_string(), "$3");
    }

    #[test]
    fn compile_and_render() {
        assert_eq!(render("plain text"), "plain text");
        assert_eq!(render("$remote_addr - $uri"), "10.0.0.1 - /index.html");
        assert_eq!(render("${uri}suffix"), "/index.htmlsuffix");
        assert_eq!(render("a${remote_addr}b$uri"), "a10.0.0.1b/index.html");
        assert_eq!(render("[$http_user_agent]"), "[curl/8]");
        assert_eq!(render("$arg_id."), "42.");
        // Unset values render as nothing.
        assert_eq!(render("x${remote_user}y"), "xy");
        // Name ends at the first byte outside [A-Za-z0-9_].
        assert_eq!(render("$uri-$uri"), "/index.html-/index.html");
        assert_eq!(render(""), "");
    }

    #[test]
    fn captures() {
        let t = Template::compile("/$1/$12", &mut Vars::new(&[])).unwrap();
        assert_eq!(
            t.segments(),
            &[
                Segment::Lit(b"/".to_vec().into()),
                Segment::Var(Var::Capture(1)),
                Segment::Lit(b"/".to_vec().into()),
                Segment::Var(Var::Capture(1)),
                Segment::Lit(b"2".to_vec().into()),
            ]
        );
        assert_eq!(render("$1-$9"), "cap1-");
        // "$0" is a name, not a capture, and there is no such variable.
        let mut vars = Vars::new(&[]);
        Template::compile("$0", &mut vars).unwrap();
        assert_eq!(
            vars.finish().unwrap_err().to_string(),
            "unknown \"0\" variable"
        );
    }

    #[test]
    fn escaped_dollar() {
        let t = Template::compile(r"cost \$5 \n", &mut Vars::new(&[])).unwrap();
        assert!(t.is_literal());
        assert_eq!(t.literal(), Some(&br"cost $5 \n"[..]));
        assert_eq!(render(r"\$uri=$uri"), "$uri=/index.html");
    }

    #[test]
    fn literal_checks() {
        let t = Template::compile("abc", &mut Vars::new(&[])).unwrap();
        assert!(t.is_literal());
        assert_eq!(t.literal(), Some(&b"abc"[..]));
        assert_eq!(t.source(), "abc");
        let e = Template::compile("", &mut Vars::new(&[])).unwrap();
        assert!(e.is_literal());
        assert_eq!(e.literal(), Some(&b""[..]));
        let v = Template::compile("a$uri", &mut Vars::new(&[])).unwrap();
        assert!(!v.is_literal());
        assert_eq!(v.literal(), None);
        assert_eq!(v.to_string(), "a$uri");
    }

    #[test]
    fn parts() {
        let t = Template::compile_parts(&["a $uri", " b", " c"], &mut Vars::new(&[])).unwrap();
        assert_eq!(
            t.segments(),
            &[
                Segment::Lit(b"a ".to_vec().into()),
                Segment::Var(Var::Uri),
                Segment::Lit(b" b c".to_vec().into()),
            ]
        );
        assert_eq!(t.source(), "a $uri b c");
        assert_eq!(
            Template::compile_parts(&["x$", "uri"], &mut Vars::new(&[])).unwrap_err(),
            "invalid variable name"
        );
        let t = Template::compile_parts(&["\\", "$uri"], &mut Vars::new(&[])).unwrap();
        assert_eq!(t.segments()[1], Segment::Var(Var::Uri));
        assert!(
            Template::compile_parts(&[], &mut Vars::new(&[]))
                .unwrap()
                .is_literal()
        );
    }

    #[test]
    fn errors() {
        let err = |s: &str| Template::compile(s, &mut Vars::new(&[])).unwrap_err();
        assert_eq!(err("abc$"), "invalid variable name");
        assert_eq!(err("$ x"), "invalid variable name");
        assert_eq!(err("${}"), "invalid variable name");
        assert_eq!(err("x${"), "invalid variable name");
        assert_eq!(
            err("${uri"),
            "the closing bracket in \"uri\" variable is missing"
        );
        assert_eq!(
            err("${uri-x}"),
            "the closing bracket in \"uri\" variable is missing"
        );
    }

    #[test]
    fn args() {
        let q = b"a=1&Page=2&empty=&flag&b=x=y";
        assert_eq!(find_arg(q, "a"), Some(&b"1"[..]));
        assert_eq!(find_arg(q, "page"), Some(&b"2"[..]));
        assert_eq!(find_arg(q, "PAGE"), Some(&b"2"[..]));
        assert_eq!(find_arg(q, "empty"), Some(&b""[..]));
        assert_eq!(find_arg(q, "flag"), None);
        assert_eq!(find_arg(q, "b"), Some(&b"x=y"[..]));
        assert_eq!(find_arg(q, "ag"), None);
        assert_eq!(find_arg(b"xa=1&a=2", "a"), Some(&b"2"[..]));
        assert_eq!(find_arg(b"", "a"), None);
        assert_eq!(find_arg(b"a=1&a=2", "a"), Some(&b"1"[..]));
    }

    #[test]
    fn cookies() {
        let h = b"sid=abc; Theme = dark;lang=en; empty=; x=1, y=2";
        assert_eq!(find_cookie(h, "sid"), Some(&b"abc"[..]));
        assert_eq!(find_cookie(h, "theme"), Some(&b"dark"[..]));
        assert_eq!(find_cookie(h, "lang"), Some(&b"en"[..]));
        assert_eq!(find_cookie(h, "empty"), Some(&b""[..]));
        // the value runs to ';' only; ',' still separates names.
        assert_eq!(find_cookie(h, "x"), Some(&b"1, y=2"[..]));
        assert_eq!(find_cookie(h, "y"), Some(&b"2"[..]));
        assert_eq!(find_cookie(h, "si"), None);
        assert_eq!(find_cookie(h, "abc"), None);
        assert_eq!(find_cookie(b"", "a"), None);
        assert_eq!(find_cookie(b"a", "a"), None);
        assert_eq!(find_cookie(b"ab=1; a=2", "a"), Some(&b"2"[..]));
    }

    #[test]
    fn pcre_syntax_the_regex_crate_lacks() {
        let m = |p: &str, caseless: bool, s: &str| {
            Re::new(p, caseless, &mut Vars::new(&[]))
                .unwrap()
                .is_match(s.as_bytes())
        };
        // look-ahead, look-behind (negative and positive)
        assert!(m(r"/\.(?!well-known)", false, "/.git/config"));
        assert!(!m(r"/\.(?!well-known)", false, "/.well-known/acme"));
        assert!(m(r"(?<=/img/)\w+\.png$", false, "/img/a.png"));
        assert!(!m(r"(?<!/img)/\w+\.png$", false, "/img/a.png"));
        // \Q…\E quotes, caselessly too
        assert!(m(r"^/\Q.a+b\E$", true, "/.A+B"));
        assert!(!m(r"^/\Q.a+b\E$", false, "/xaab"));
        // back-references, atomic groups, possessive quantifiers
        assert!(m(r"^/(\w+)/\1$", false, "/ab/ab"));
        assert!(!m(r"^/(\w+)/\1$", false, "/ab/cd"));
        assert!(!m(r"^(?>a+)ab", false, "aaab"));
        assert!(!m(r"^a++ab", false, "aaab"));
        assert!(!m(r"^a{1,5}+ab", false, "aaab"));
        assert!(m(r"^[a++]+b$", false, "a+b"));
        assert!(m(r"^a\++b$", false, "a++b"));
        assert!(has_possessive(r"x*+") && has_possessive(r"(a)?+"));
        assert!(!has_possessive(r"[+*]+") && !has_possessive(r"\++") && !has_possessive(r"[]+]+"));
        // bytes, not UTF-8: `.` is one byte
        let re = Re::new(r"^/(?=.)(.)$", false, &mut Vars::new(&[])).unwrap();
        assert!(re.is_match(b"/\xff"));
        // A non-ASCII character in a class is its bytes, as PCRE without UTF
        // mode reads it; `\p{…}` is PCRE's.
        let re = Re::new(r"^/[é]$", false, &mut Vars::new(&[])).unwrap();
        assert!(re.is_match(b"/\xa9") && !re.is_match("/é".as_bytes()));
        assert!(m(r"^/\p{Lu}", false, "/A") && !m(r"^/\p{Lu}", false, "/a"));
        // Captures numbered as PCRE numbers them, names declared in every form.
        let mut vars = Vars::new(&[]);
        let re = Re::new(r"^/(?'a'\w+)/(?<b>\w+)(?=/)/(?P<c>\w+)$", false, &mut vars).unwrap();
        assert_eq!(re.groups(), 3);
        assert_eq!(
            re.named().iter().map(|n| n.0).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        let mut spans = Vec::new();
        assert!(re.captures(b"/x/y/z", &mut spans));
        assert_eq!(
            spans,
            [Some((0, 6)), Some((1, 2)), Some((3, 4)), Some((5, 6))]
        );
        assert!(!re.captures(b"/x/y", &mut spans));
        // Errors still read as nginx's.
        let e = Re::new(r"(?<=a+)b", false, &mut Vars::new(&[])).unwrap_err();
        assert!(e.starts_with(r#"regex "(?<=a+)b" compile failed: "#), "{e}");
        let e = Re::new(r"(", false, &mut Vars::new(&[])).unwrap_err();
        assert!(e.starts_with(r#"regex "(" compile failed: "#), "{e}");
    }

    #[test]
    fn prefilters_never_change_the_answer() {
        let pats = [
            r"\.php$",
            r"\.(jpg|jpeg|png|gif|ico)$",
            r"^/api/v(\d+)/",
            r"/\.ht",
            r"^/user/(?<id>\d+)$",
            r"\.(woff2?|ttf|eot)$",
            r"^/(robots|humans)\.txt$",
            r"/xmlrpc",
            r"^/feed/?$",
            r"^/sitemap.*\.xml$",
            r"^/health$",
            r"(?i)^/CaSe",
            r"^/a|\.b$",
            r"x*",
            r"^",
            r"$",
            r"^/caf(é|x)",
            r"[é]",
            r"(?i)^/É",
            r"^/(?-u:\xFF)",
            r"/\.HT",
            r"^/API/",
            r"(?i)\.php$",
            r"\.(?:css|JS|woff2?)$",
            r"/\.(?:git|svn)",
            r"/\.ht|/\.git",
            r"^/a\b",
            r"(?m)\.php$",
            r"\.php$|^/x",
            r"^POST$",
            r"^/API$",
        ];
        let subjects: [&[u8]; 26] = [
            b"/2b.txt",
            b"/d/.HTaccess",
            b"/API/x",
            b"/api/x",
            b"/s.JS",
            b"/s.js",
            b"/.git/HEAD",
            b"/a.php\n",
            b"/x.PHP",
            b"/a.php",
            b"/api/v2/x",
            b"/API/V2/",
            b"/.htaccess",
            b"/dir/.HT",
            b"/user/42",
            b"/f.WOFF2",
            b"/robots.txt",
            b"/feed/",
            b"/sitemap-1.xml",
            b"/health",
            b"/case/x",
            b"/caf\xc3\xa9",
            b"/\xff",
            b"/\xc3\xa9",
            b"POST",
            b"/API",
        ];
        for p in pats {
            for caseless in [false, true] {
                let re = Re::new(p, caseless, &mut Vars::new(&[])).unwrap();
                for s in subjects {
                    assert_eq!(
                        re.is_match(s),
                        re.engine_match(s),
                        "{p} caseless={caseless} on {:?}",
                        String::from_utf8_lossy(s)
                    );
                }
            }
        }
        assert!(matches!(
            Re::new(r"\.php$", true, &mut Vars::new(&[]))
                .unwrap()
                .quick(),
            Quick::Last(_)
        ));
        assert!(matches!(
            Re::new(r"^/api/", false, &mut Vars::new(&[]))
                .unwrap()
                .quick(),
            Quick::At(1, _)
        ));
        assert!(matches!(
            Re::new(r"/\.ht", false, &mut Vars::new(&[]))
                .unwrap()
                .quick(),
            Quick::Any
        ));
    }

    #[test]
    fn literal_regexes_are_decided_without_the_engine() {
        let decisive = |p: &str, caseless: bool| {
            Re::new(p, caseless, &mut Vars::new(&[]))
                .unwrap()
                .pre
                .decisive
        };
        for p in [
            r"\.php$",
            r"^/api/",
            r"/\.ht",
            r"\.(?:jpe?g|gif|png)$",
            r"/\.HT",
        ] {
            assert!(decisive(p, false) && decisive(p, true), "{p}");
        }
        // Another anchor, a class, a repetition: the engine decides.
        for p in [
            r"^/a\b",
            r"(?m)\.php$",
            r"\.php$|^/x",
            r"^/api/v\d+",
            r"^/x$",
        ] {
            assert!(!decisive(p, false), "{p}");
        }
        let re = Re::new(r"/\.HT", false, &mut Vars::new(&[])).unwrap();
        assert!(re.is_match(b"/d/.HTaccess") && !re.is_match(b"/d/.htaccess"));
        let re = Re::new(r"/\.HT", true, &mut Vars::new(&[])).unwrap();
        assert!(re.is_match(b"/d/.HTaccess") && re.is_match(b"/d/.htaccess"));
    }

    #[test]
    fn registry_declares_and_checks() {
        use crate::conf::ast::Span;
        let mut vars = Vars::new(&[]);
        vars.at(&Span::new("t.conf", 3));
        let t = Template::compile("$later-$1", &mut vars).unwrap();
        assert!(matches!(&t.segments()[0], Segment::Var(Var::User(u)) if &*u.name == "later"));
        assert!(vars.declare("uri", UserKind::Set).is_err());
        let v = vars.declare("Later", UserKind::Set).unwrap();
        assert_eq!(&*v.name, "later");
        let table = vars.finish().unwrap();
        assert!(table.captures);
        assert_eq!(table.names.len(), 1);

        let mut vars = Vars::new(&[]);
        vars.at(&Span::new("t.conf", 7));
        Template::compile("$nope", &mut vars).unwrap();
        let err = vars.finish().unwrap_err();
        assert_eq!(err.to_string(), "unknown \"nope\" variable in t.conf:7");
    }

    #[test]
    fn module_variables_by_name_and_prefix() {
        static VARS: &[VarDef] = &[
            VarDef::name("up_status", |_, _, out| out.extend_from_slice(b"200")),
            VarDef::prefix("up_http_", |_, arg, out| {
                out.extend_from_slice(arg.as_bytes())
            }),
            VarDef::changeable("up_reset", |_, _, out| out.push(b'0')),
        ];
        static M: Module = Module {
            name: "m",
            variables: VARS,
            ..Module::EMPTY
        };
        let mut vars = Vars::new(&[&M]);
        let Var::User(reset) = vars.reference("up_reset") else {
            panic!("a changeable variable is the configuration's");
        };
        let Var::Module(v) = vars.reference("Up_Status") else {
            panic!("a module's variable");
        };
        assert!(std::ptr::eq(v.def, &VARS[0]) && v.arg.is_empty());
        let Var::Module(v) = vars.reference("up_http_X_Id") else {
            panic!("a module's prefix variable");
        };
        assert!(std::ptr::eq(v.def, &VARS[1]) && &*v.arg == "x_id");
        assert_eq!(
            vars.declare("up_status", UserKind::Set).unwrap_err(),
            "the duplicate \"up_status\" variable"
        );
        let table = vars.finish().unwrap();
        // Not declared: the module's getter gives its value.
        assert_eq!(&*table.names[reset.index as usize], "up_reset");
        assert!(matches!(&table.kinds[0], UserKind::Computed(c) if c.volatile()));
        // Declared by the configuration: its own.
        let mut vars = Vars::new(&[&M]);
        vars.reference("up_reset");
        vars.declare("up_reset", UserKind::Set).unwrap();
        assert!(matches!(vars.finish().unwrap().kinds[0], UserKind::Set));
    }

    #[test]
    fn decimal() {
        let mut v = Vec::new();
        push_u64(&mut v, 0);
        v.push(b' ');
        push_u64(&mut v, 1234567890);
        v.push(b' ');
        push_u64(&mut v, u64::MAX);
        assert_eq!(v, b"0 1234567890 18446744073709551615");
    }
}
