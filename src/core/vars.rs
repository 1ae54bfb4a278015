//! nginx-style variables and the templates built from them.
//!
//! A configuration string such as `"$remote_addr - ${uri}x"` is compiled once,
//! at configuration time, into a [`Template`]: a list of literal byte runs and
//! [`Var`]s. At run time the template is rendered by asking a [`VarSource`]
//! (the request context) for each variable's bytes. Rendering allocates
//! nothing beyond growing the caller's output buffer.

use std::fmt;

/// A variable a template can refer to.
///
/// Names follow nginx and are matched case-insensitively. Aliases map onto
/// one variant: `$document_uri` is [`Var::Uri`] and `$query_string` is
/// [`Var::Args`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Var {
    /// `$remote_addr`
    RemoteAddr,
    /// `$remote_port`
    RemotePort,
    /// `$remote_user` (basic-auth user name)
    RemoteUser,
    /// `$time_local`
    TimeLocal,
    /// `$time_iso8601`
    TimeIso8601,
    /// `$msec`: seconds with millisecond resolution, "1234567890.123"
    Msec,
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
    /// `$request_length`
    RequestLength,
    /// `$request_time`: seconds with millisecond resolution
    RequestTime,
    /// `$connection`: connection serial number
    Connection,
    /// `$connection_requests`
    ConnectionRequests,
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
    /// `$1` .. `$9`: a regex capture of the last matching location/rewrite.
    Capture(u8),
    /// `$arg_NAME`; NAME as written, lowercased (matching is case-insensitive).
    Arg(Box<str>),
    /// `$http_NAME`: request header; lowercase, `_` turned to `-`
    /// (`$http_user_agent` → `"user-agent"`).
    Http(Box<str>),
    /// `$cookie_NAME`; NAME lowercased (matching is case-insensitive).
    Cookie(Box<str>),
    /// `$sent_http_NAME`: response header; lowercase, `_` turned to `-`.
    SentHttp(Box<str>),
}

impl Var {
    /// Resolve a variable name (without the `$`). Unknown names give `None`.
    pub fn lookup(name: &str) -> Option<Var> {
        let lower = name.to_ascii_lowercase();
        let n = lower.as_str();
        let v = match n {
            "remote_addr" => Var::RemoteAddr,
            "remote_port" => Var::RemotePort,
            "remote_user" => Var::RemoteUser,
            "time_local" => Var::TimeLocal,
            "time_iso8601" => Var::TimeIso8601,
            "msec" => Var::Msec,
            "request" => Var::Request,
            "request_method" => Var::RequestMethod,
            "request_uri" => Var::RequestUri,
            "uri" | "document_uri" => Var::Uri,
            "args" | "query_string" => Var::Args,
            "is_args" => Var::IsArgs,
            "status" => Var::Status,
            "body_bytes_sent" => Var::BodyBytesSent,
            "bytes_sent" => Var::BytesSent,
            "request_length" => Var::RequestLength,
            "request_time" => Var::RequestTime,
            "connection" => Var::Connection,
            "connection_requests" => Var::ConnectionRequests,
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
            Var::RemotePort => "remote_port",
            Var::RemoteUser => "remote_user",
            Var::TimeLocal => "time_local",
            Var::TimeIso8601 => "time_iso8601",
            Var::Msec => "msec",
            Var::Request => "request",
            Var::RequestMethod => "request_method",
            Var::RequestUri => "request_uri",
            Var::Uri => "uri",
            Var::Args => "args",
            Var::IsArgs => "is_args",
            Var::Status => "status",
            Var::BodyBytesSent => "body_bytes_sent",
            Var::BytesSent => "bytes_sent",
            Var::RequestLength => "request_length",
            Var::RequestTime => "request_time",
            Var::Connection => "connection",
            Var::ConnectionRequests => "connection_requests",
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
            Var::Capture(_) | Var::Arg(_) | Var::Http(_) | Var::Cookie(_) | Var::SentHttp(_) => {
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
            Var::Arg(a) => write!(f, "$arg_{a}"),
            Var::Cookie(c) => write!(f, "$cookie_{c}"),
            Var::Http(h) => write!(f, "$http_{}", h.replace('-', "_")),
            Var::SentHttp(h) => write!(f, "$sent_http_{}", h.replace('-', "_")),
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
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// is missing`; an unknown name → `unknown "name" variable`.
    pub fn compile(s: &str) -> Result<Template, String> {
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
            let var = Var::lookup(name).ok_or_else(|| format!("unknown \"{name}\" variable"))?;
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
    pub fn compile_parts(parts: &[&str]) -> Result<Template, String> {
        let mut segments: Vec<Segment> = Vec::new();
        for part in parts {
            let t = Template::compile(part)?;
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
        let t = Template::compile(t).unwrap();
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
        let t = Template::compile("/$1/$12").unwrap();
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
        assert_eq!(
            Template::compile("$0").unwrap_err(),
            "unknown \"0\" variable"
        );
    }

    #[test]
    fn escaped_dollar() {
        let t = Template::compile(r"cost \$5 \n").unwrap();
        assert!(t.is_literal());
        assert_eq!(t.literal(), Some(&br"cost $5 \n"[..]));
        assert_eq!(render(r"\$uri=$uri"), "$uri=/index.html");
    }

    #[test]
    fn literal_checks() {
        let t = Template::compile("abc").unwrap();
        assert!(t.is_literal());
        assert_eq!(t.literal(), Some(&b"abc"[..]));
        assert_eq!(t.source(), "abc");
        let e = Template::compile("").unwrap();
        assert!(e.is_literal());
        assert_eq!(e.literal(), Some(&b""[..]));
        let v = Template::compile("a$uri").unwrap();
        assert!(!v.is_literal());
        assert_eq!(v.literal(), None);
        assert_eq!(v.to_string(), "a$uri");
    }

    #[test]
    fn parts() {
        let t = Template::compile_parts(&["a $uri", " b", " c"]).unwrap();
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
            Template::compile_parts(&["x$", "uri"]).unwrap_err(),
            "invalid variable name"
        );
        let t = Template::compile_parts(&["\\", "$uri"]).unwrap();
        assert_eq!(t.segments()[1], Segment::Var(Var::Uri));
        assert!(Template::compile_parts(&[]).unwrap().is_literal());
    }

    #[test]
    fn errors() {
        let err = |s: &str| Template::compile(s).unwrap_err();
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
        assert_eq!(err("$nosuch"), "unknown \"nosuch\" variable");
        assert_eq!(err("${foo_bar}x"), "unknown \"foo_bar\" variable");
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
