//! Directives of the headers filter: `add_header` and `expires`.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def};
use crate::conf::values::{parse_time, set_once};
use crate::core::vars::{Segment, Template, Vars};
use crate::settings;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// How an `add_header` field lands in the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Appended (an empty value adds nothing).
    Append,
    /// Replaces the field the response already has (`Last-Modified`, `ETag`);
    /// an empty value removes it.
    Replace,
}

/// One `add_header name value [always]`.
#[derive(Clone, Debug)]
pub struct AddHeader {
    /// The name as written in the configuration.
    pub name: &'static str,
    pub value: Template,
    /// The value when it has no variables: shared, never rendered per request.
    pub literal: Option<Arc<str>>,
    /// CR and LF bytes the configuration wrote in the value (nginx sends
    /// them as written); a rendered value with more got them from a
    /// variable, and is not sent.
    pub line_breaks: usize,
    /// Added whatever the status; otherwise only on 2xx/3xx statuses listed in
    /// [`super::applies`].
    pub always: bool,
    pub placement: Placement,
}

/// `expires`: what Expires and Cache-Control say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expires {
    Off,
    /// Expires in 1970, Cache-Control: no-cache.
    Epoch,
    /// Expires at the end of 2037, Cache-Control: ten years.
    Max,
    /// Seconds after the response is made (may be negative).
    Access(i64),
    /// Seconds after the Last-Modified time (the response's own when it has one).
    Modified(i64),
    /// Seconds after local midnight: the next such moment.
    Daily(u32),
    /// A value with variables (`HeadersConf::expires_value`), read per
    /// response as the directive's argument; `modified` stood before it.
    Var {
        modified: bool,
    },
}

settings! {
    /// Header settings of one level. `add_header` is one list set as a whole: a
    /// level with any `add_header` drops the inherited ones.
    pub struct HeadersConf / HeadersConfSet {
        pub add_header: Arc<[AddHeader]> = Arc::from(Vec::new()),
        /// `add_trailer`, one list set as a whole like `add_header`.
        pub add_trailer: Arc<[AddHeader]> = Arc::from(Vec::new()),
        pub expires: Expires = Expires::Off,
        /// The value of `expires` when it holds variables.
        pub expires_value: Option<Arc<Template>> = None,
    }
}

/// Header names live as long as the process (responses hold `&'static str`
/// names); each distinct name is stored once, so reloads do not grow memory.
fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut set = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let set = set.get_or_insert_with(HashSet::new);
    if let Some(n) = set.get(name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    set.insert(n);
    n
}

/// Fields the connection writes itself (framing, connection management):
/// a second copy would make the message ambiguous.
const FRAMING: &[&str] = &["content-length", "transfer-encoding", "connection"];

pub fn parse_add_header(d: &Directive, vars: &mut Vars) -> Result<AddHeader, ConfError> {
    let name = d.arg(0);
    let dn = d.name.as_str();
    if !crate::http::fields::is_token(name.as_bytes()) {
        return Err(ConfError::new(
            format!("invalid header name \"{name}\" in \"{dn}\" directive"),
            &d.span,
        ));
    }
    if FRAMING.iter().any(|f| f.eq_ignore_ascii_case(name)) {
        return Err(ConfError::new(
            format!(
                "\"{name}\" cannot be set by \"{dn}\": the server writes it from the response framing"
            ),
            &d.span,
        ));
    }
    let always = match d.args.get(2).map(|a| a.value.as_str()) {
        None => false,
        Some("always") => true,
        Some(v) => {
            return Err(ConfError::new(
                format!("invalid parameter \"{v}\" in \"{dn}\" directive"),
                &d.span,
            ));
        }
    };
    let raw = d.arg(1);
    let value = Template::compile(raw, vars).map_err(|e| ConfError::new(e, &d.span))?;
    if raw.contains('\0') {
        return Err(ConfError::new(
            format!("header value in \"{dn}\" directive contains NUL"),
            &d.span,
        ));
    }
    let line_breaks = value
        .segments()
        .iter()
        .map(|seg| match seg {
            Segment::Lit(l) => l.iter().filter(|&&b| matches!(b, b'\r' | b'\n')).count(),
            Segment::Var(_) => 0,
        })
        .sum();
    let literal = value
        .literal()
        .map(|l| Arc::from(String::from_utf8_lossy(l).as_ref()));
    let placement = if dn == "add_header"
        && (name.eq_ignore_ascii_case("last-modified") || name.eq_ignore_ascii_case("etag"))
    {
        Placement::Replace
    } else {
        Placement::Append
    };
    Ok(AddHeader {
        name: intern(name),
        value,
        literal,
        line_breaks,
        always,
        placement,
    })
}

fn invalid_expires(d: &Directive, why: &str) -> ConfError {
    ConfError::new(format!("\"expires\" directive {why}"), &d.span)
}

/// Seconds as nginx's `expires` takes them: `1h30m`, `-1`, `+10d` (no
/// milliseconds).
fn expires_secs(v: &str) -> Option<i64> {
    let (neg, t) = match v.as_bytes().first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    if t.contains("ms") {
        return None;
    }
    let secs = i64::try_from(parse_time(t)?.as_secs()).ok()?;
    Some(if neg { -secs } else { secs })
}

/// One value of `expires` (after `modified` when `modified`); the error is
/// nginx's reason. A value with variables is read by this per response.
pub fn parse_expires_value(modified: bool, v: &str) -> Result<Expires, &'static str> {
    if !modified {
        match v {
            "off" => return Ok(Expires::Off),
            "epoch" => return Ok(Expires::Epoch),
            "max" => return Ok(Expires::Max),
            _ => {}
        }
    }
    if let Some(t) = v.strip_prefix('@') {
        if modified {
            return Err("daily time cannot be used with \"modified\" parameter");
        }
        let secs = expires_secs(t).ok_or("invalid value")?;
        if !(0..24 * 3600).contains(&secs) || t.starts_with(['-', '+']) {
            return Err("daily time value must be less than 24 hours");
        }
        return Ok(Expires::Daily(secs as u32));
    }
    let secs = expires_secs(v).ok_or("invalid value")?;
    Ok(if modified {
        Expires::Modified(secs)
    } else {
        Expires::Access(secs)
    })
}

/// `expires`: its kind, and the value to read per response when it holds
/// variables.
pub fn parse_expires(
    d: &Directive,
    vars: &mut Vars,
) -> Result<(Expires, Option<Arc<Template>>), ConfError> {
    let (modified, v) = match d.args.len() {
        1 => (false, d.arg(0)),
        _ if d.arg(0) == "modified" => (true, d.arg(1)),
        _ => return Err(invalid_expires(d, "invalid value")),
    };
    if v.contains('$') {
        let t = Template::compile(v, vars).map_err(|m| ConfError::new(m, &d.span))?;
        if !t.is_literal() {
            return Ok((Expires::Var { modified }, Some(Arc::new(t))));
        }
    }
    parse_expires_value(modified, v)
        .map(|e| (e, None))
        .map_err(|why| invalid_expires(d, why))
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "add_header",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: Arity::args(2, 3),
        set: |s, d, e| {
            let h = parse_add_header(d, &mut e.vars)?;
            crate::conf::values::push(&mut s.loc().get_mut::<HeadersConfSet>().add_header, h);
            Ok(())
        },
        syntax: "add_header name value [always];",
        default: "—",
        doc: "Adds a response header field when the status is 200, 201, 204, 206, 301, 302, 303, 304, 307 or 308, or whatever the status with `always`. The value may hold variables; a value that comes out empty adds nothing. `Last-Modified` and `ETag` replace the response's own field (an empty value removes it); any other name is appended, so a second `Cache-Control` or `Content-Type` line can go out. Several may stand at one level; a level with none inherits all of its parent's, a level with any inherits none. `Content-Length`, `Transfer-Encoding` and `Connection` are refused. Example: `add_header X-Frame-Options DENY always;`.\n\n```nginx\nadd_header X-Frame-Options SAMEORIGIN;\nadd_header Cache-Control \"no-store\" always;\n```",
    },
    Def {
        name: "add_trailer",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: Arity::args(2, 3),
        set: |s, d, e| {
            let h = parse_add_header(d, &mut e.vars)?;
            crate::conf::values::push(&mut s.loc().get_mut::<HeadersConfSet>().add_trailer, h);
            Ok(())
        },
        syntax: "add_trailer name value [always];",
        default: "—",
        doc: "Adds a trailer field after the response body, under the same rules as `add_header` (statuses, `always`, an empty value adds nothing, inheritance of the whole list). The value is made once the body is sent, so variables such as `$upstream_response_length` and `$sent_trailer_NAME` (an earlier trailer) have their final values. An HTTP/1.1 response with trailers goes out chunked (not with `chunked_transfer_encoding off`, to HTTP/1.0 or for HEAD); HTTP/2 sends them as a final HEADERS frame.\n\n```nginx\nadd_trailer Server-Timing \"total;dur=$request_time\" always;\n```",
    },
    Def {
        name: "expires",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: Arity::args(1, 2),
        set: |s, d, e| {
            let (v, value) = parse_expires(d, &mut e.vars)?;
            let h = s.loc().get_mut::<HeadersConfSet>();
            set_once(&mut h.expires, v, d)?;
            h.expires_value = Some(value);
            Ok(())
        },
        syntax: "expires [modified] time | @time-of-day | epoch | max | off;",
        default: "off",
        doc: "Sets `Expires` and `Cache-Control` (replacing any the response has) on responses with status 200, 201, 204, 206, 301, 302, 303, 304, 307 or 308. `time` counts from now (`expires 1h;` gives `max-age=3600`); with `modified` it counts from the response's Last-Modified. A negative time, or an expiry already past, sends `Cache-Control: no-cache`; `0` sends `max-age=0`. `@15h30m` expires at the next 15:30 local time. `epoch` expires in 1970 with `no-cache`; `max` at the end of 2037 with a ten-year max-age. The value may hold variables (`expires $expiry;`, often set by a `map`): it is read for each response as the argument would be (`epoch`, `max`, `off`, `1h`, `-1`, `@15h`), and a value that does not read so sets nothing. Example: `expires modified +24h;`.\n\n```nginx\nlocation ~* \\.(css|js|png)$ { expires 30d; }\nexpires epoch;\n```",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str, args: &[&str]) -> Directive {
        Directive::test(name, args, 1)
    }

    #[test]
    fn expires_forms() {
        let p = |a: &[&str]| parse_expires(&dir("expires", a), &mut Vars::new(&[])).map(|e| e.0);
        assert_eq!(p(&["off"]).unwrap(), Expires::Off);
        assert_eq!(p(&["epoch"]).unwrap(), Expires::Epoch);
        assert_eq!(p(&["max"]).unwrap(), Expires::Max);
        assert_eq!(p(&["1h"]).unwrap(), Expires::Access(3600));
        assert_eq!(p(&["+1h30m"]).unwrap(), Expires::Access(5400));
        assert_eq!(p(&["-1"]).unwrap(), Expires::Access(-1));
        assert_eq!(p(&["0"]).unwrap(), Expires::Access(0));
        assert_eq!(p(&["modified", "+24h"]).unwrap(), Expires::Modified(86400));
        assert_eq!(p(&["@15h30m"]).unwrap(), Expires::Daily(55800));
        assert!(p(&["@24h"]).is_err());
        assert!(p(&["modified", "@1h"]).is_err());
        assert!(p(&["modified", "max"]).is_err());
        assert!(p(&["1h", "2h"]).is_err());
        assert!(p(&["500ms"]).is_err());
        assert!(p(&["soon"]).is_err());
        assert_eq!(p(&["$arg_e"]).unwrap(), Expires::Var { modified: false });
        assert_eq!(
            p(&["modified", "${arg_e}h"]).unwrap(),
            Expires::Var { modified: true }
        );
        // Read per response as nginx reads the argument.
        assert_eq!(
            parse_expires_value(false, "-2048"),
            Ok(Expires::Access(-2048))
        );
        assert_eq!(parse_expires_value(false, "@33s"), Ok(Expires::Daily(33)));
        assert_eq!(parse_expires_value(false, "off"), Ok(Expires::Off));
        assert!(parse_expires_value(true, "epoch").is_err());
        assert!(parse_expires_value(false, "").is_err());
        assert!(parse_expires_value(false, "bad").is_err());
    }

    #[test]
    fn add_header_checks() {
        let p = |a: &[&str]| parse_add_header(&dir("add_header", a), &mut Vars::new(&[]));
        let h = p(&["X-A", "b"]).unwrap();
        assert_eq!(
            (h.name, h.always, h.literal.as_deref()),
            ("X-A", false, Some("b"))
        );
        assert!(p(&["X-A", "$uri", "always"]).unwrap().literal.is_none());
        assert_eq!(p(&["etag", ""]).unwrap().placement, Placement::Replace);
        assert!(p(&["X A", "b"]).is_err());
        assert!(p(&["", "b"]).is_err());
        assert!(p(&["Content-Length", "5"]).is_err());
        assert!(p(&["X-A", "b", "never"]).is_err());
        // Line breaks the configuration writes are sent as written, as nginx.
        let h = p(&["X-A", "a:$uri\n"]).unwrap();
        assert_eq!(h.line_breaks, 1);
        assert!(p(&["X-A", "a\0"]).is_err());
        assert!(std::ptr::eq(
            p(&["X-Same", "1"]).unwrap().name,
            p(&["X-Same", "2"]).unwrap().name
        ));
    }
}
