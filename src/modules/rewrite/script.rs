//! The rewrite script: instructions compiled from `rewrite`, `return`,
//! `set`, `if` and `break`, and the interpreter that runs them in a rewrite
//! phase.

use super::conf::RewriteConf;
use crate::core::message::response::{Body, Response, Value};
use crate::core::module::{Rewrite as Flow, VarSet};
use crate::core::request::Request;
use crate::core::vars::{Re, Segment, Template, Var, VarSource};
use percent_encoding::{AsciiSet, percent_encode};

/// Bytes of a regex capture escaped in the path of a redirect, when the
/// request's own path was percent-encoded (or had a `+`), as nginx does.
const URI_PART: &AsciiSet = crate::core::path::URI_ESCAPE;

/// Bytes of a capture escaped in the arguments part of a replacement.
const ARGS_PART: &AsciiSet = &URI_PART.add(b'&').add(b'+').add(b';');

/// One instruction.
#[derive(Debug)]
pub enum Op {
    Rewrite(Box<Rewrite>),
    Return(Box<Return>),
    Set(SetTarget, Template),
    /// A condition, the block's script, and in a location the block's
    /// index in `Location::ifs`.
    If(Box<Cond>, Vec<Op>, Option<usize>),
    Break,
}

/// What `rewrite` does after a match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flag {
    /// Go on with the next instruction; the location is searched again
    /// after the phase.
    None,
    /// Stop the script and search the location for the new URI.
    Last,
    /// Stop the script and stay in this location.
    Break,
    /// Answer with this redirect status (302, 301).
    Redirect(u16),
}

#[derive(Debug)]
pub struct Rewrite {
    pub re: Re,
    /// Replacement up to its first `?`.
    pub uri: Template,
    /// After the first `?`, when there is one.
    pub args: Option<Template>,
    /// The request's arguments are appended (no trailing `?`).
    pub add_args: bool,
    pub flag: Flag,
}

#[derive(Debug)]
pub struct Return {
    pub code: u16,
    /// Body text, or the URL of a redirect code.
    pub text: Option<Template>,
}

/// What `set` assigns.
#[derive(Debug)]
pub enum SetTarget {
    /// A configuration variable (index in the variable table).
    Var(u32),
    /// `$args` / `$query_string`.
    Args,
    /// A module's variable that takes a value (`$limit_rate`).
    Module(&'static VarSet),
}

impl SetTarget {
    /// Give the variable `v` for `req`.
    pub fn assign(&self, req: &mut Request<'_>, v: Vec<u8>) {
        match self {
            SetTarget::Var(i) => req.set_var(*i, v),
            SetTarget::Args => req.state.args = Some(v),
            SetTarget::Module(set) => (set.run)(req, &v),
        }
    }
}

/// An `if` condition.
#[derive(Debug)]
pub enum Cond {
    /// `($var)`: false when empty or "0".
    Var(Template),
    /// `($var = text)`, `($var != text)`.
    Eq(Template, Template, bool),
    /// `($var ~ re)`, `~*`, `!~`, `!~*`.
    Regex(Template, Re, bool),
    /// `(-f path)`, `-d`, `-e`, `-x`, each also with `!`.
    File(Template, FileTest, bool),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileTest {
    File,
    Dir,
    Exists,
    Exec,
}

/// The rewrite directives of one server or location level, in the order
/// written (not inherited, as in nginx).
#[derive(Debug, Default)]
pub struct Script(pub Vec<Op>);

/// Run `ops` for `req`. `location` is false in the server-rewrite phase.
pub fn run(req: &mut Request<'_>, ops: &[Op], location: bool) -> Flow {
    for op in ops {
        match op {
            Op::Rewrite(rw) => match rewrite(req, rw) {
                Flow::Next => {}
                other => return other,
            },
            Op::Return(r) => return Flow::Respond(ret(req, r)),
            Op::Set(target, value) => {
                let mut v = Vec::new();
                value.render(&*req, &mut v);
                target.assign(req, v);
            }
            Op::If(cond, body, block) => {
                if test(req, cond) {
                    if let Some(i) = block.filter(|_| location) {
                        req.enter_if(i);
                    }
                    match run(req, body, location) {
                        Flow::Next => {}
                        other => return other,
                    }
                }
            }
            Op::Break => return Flow::Break,
        }
    }
    Flow::Next
}

/// The request's path was sent percent-encoded or with a `+`: captures are
/// escaped where nginx escapes them.
fn quoted_uri(req: &Request<'_>) -> bool {
    req.head.path().iter().any(|&b| b == b'%' || b == b'+')
}

/// Render a replacement part, escaping captures with `set` when `escape`.
fn render(req: &Request<'_>, t: &Template, escape: Option<&'static AsciiSet>, out: &mut Vec<u8>) {
    for seg in t.segments() {
        match seg {
            Segment::Lit(l) => out.extend_from_slice(l),
            Segment::Var(Var::Capture(n)) if escape.is_some() => {
                let mut c = Vec::new();
                req.capture(*n as usize, &mut c);
                for piece in percent_encode(&c, escape.unwrap_or(URI_PART)) {
                    out.extend_from_slice(piece.as_bytes());
                }
            }
            Segment::Var(v) => req.var(v, out),
        }
    }
}

fn rewrite(req: &mut Request<'_>, rw: &Rewrite) -> Flow {
    let log = req.conf.get::<RewriteConf>().rewrite_log;
    let matched = req.regex_exec(&rw.re, &req.uri);
    if log {
        crate::error_log!(
            Notice,
            "\"{}\" {} \"{}\"{}",
            rw.re.as_str(),
            if matched { "matches" } else { "does not match" },
            String::from_utf8_lossy(&req.uri),
            req.log_context()
        );
    }
    if !matched {
        return Flow::Next;
    }
    let quoted = quoted_uri(req);
    let redirect = matches!(rw.flag, Flag::Redirect(_));
    let mut uri = Vec::with_capacity(req.uri.len() + 16);
    render(
        req,
        &rw.uri,
        (redirect && quoted).then_some(URI_PART),
        &mut uri,
    );
    let mut args: Option<Vec<u8>> = rw.args.as_ref().map(|t| {
        let mut a = Vec::new();
        render(req, t, quoted.then_some(ARGS_PART), &mut a);
        a
    });
    if rw.add_args
        && let Some(orig) = req.args()
    {
        match &mut args {
            Some(a) => {
                a.push(b'&');
                a.extend_from_slice(orig);
            }
            None if redirect => args = Some(orig.to_vec()),
            None => {}
        }
    }
    if let Flag::Redirect(code) = rw.flag {
        let mut to = String::new();
        if uri.first() == Some(&b'/') {
            to.push_str(&req.origin());
        }
        to.push_str(&String::from_utf8_lossy(&uri));
        if let Some(a) = args.filter(|a| !a.is_empty()) {
            to.push('?');
            to.push_str(&String::from_utf8_lossy(&a));
        }
        if log {
            crate::error_log!(Notice, "rewritten redirect: \"{to}\"{}", req.log_context());
        }
        return Flow::Respond(req.error(code).header("Location", Value::Owned(to)));
    }
    if uri.is_empty() {
        crate::error_log!(
            Error,
            "the rewritten URI has a zero length{}",
            req.log_context()
        );
        return Flow::Respond(req.error(500));
    }
    if !rw.add_args && args.is_none() {
        args = Some(Vec::new());
    }
    if log {
        let shown = match &args {
            Some(a) => String::from_utf8_lossy(a).into_owned(),
            None => String::from_utf8_lossy(req.args().unwrap_or_default()).into_owned(),
        };
        crate::error_log!(
            Notice,
            "rewritten data: \"{}\", args: \"{shown}\"{}",
            String::from_utf8_lossy(&uri),
            req.log_context()
        );
    }
    req.uri = uri;
    if let Some(a) = args {
        req.state.args = Some(a);
    }
    req.state.internal = true;
    match rw.flag {
        Flag::Break => Flow::Break,
        Flag::Last => {
            req.state.uri_changed = true;
            Flow::Last
        }
        _ => {
            req.state.uri_changed = true;
            Flow::Next
        }
    }
}

/// Is `code` one whose text is a URL for the Location header?
pub fn is_redirect(code: u16) -> bool {
    matches!(code, 301 | 302 | 303 | 307 | 308)
}

fn ret(req: &Request<'_>, r: &Return) -> Response {
    req.state.status.set(r.code);
    let text = r.text.as_ref().map(|t| {
        let mut v = Vec::new();
        t.render(req, &mut v);
        v
    });
    if is_redirect(r.code) {
        let mut to = String::new();
        if let Some(t) = text {
            if t.first() == Some(&b'/') {
                to.push_str(&req.origin());
            }
            to.push_str(&String::from_utf8_lossy(&t));
        }
        return req.error(r.code).header("Location", Value::Owned(to));
    }
    match text {
        // nginx sends its own page for an error code without text.
        None if r.code >= 400 => req.error(r.code),
        text => {
            let mut resp = Response::new(r.code);
            if !matches!(r.code, 204 | 304) {
                let ct = req
                    .conf
                    .core
                    .types
                    .lookup_shared(&req.uri)
                    .unwrap_or(&req.conf.core.default_type)
                    .clone();
                resp.content_type = Some(Value::Shared(ct));
                if let Some(t) = text {
                    resp.body = Body::Bytes(t.into());
                }
            }
            resp
        }
    }
}

fn test(req: &Request<'_>, cond: &Cond) -> bool {
    let mut v = Vec::new();
    match cond {
        Cond::Var(t) => {
            t.render(req, &mut v);
            !(v.is_empty() || v == b"0")
        }
        Cond::Eq(l, r, negate) => t_render2(req, l, r, |a, b| (a == b) != *negate),
        Cond::Regex(t, re, negate) => {
            t.render(req, &mut v);
            if *negate {
                !re.is_match(&v)
            } else {
                req.regex_exec(re, &v)
            }
        }
        Cond::File(t, test, negate) => {
            t.render(req, &mut v);
            file_test(&v, *test) != *negate
        }
    }
}

fn t_render2(
    req: &Request<'_>,
    l: &Template,
    r: &Template,
    f: impl FnOnce(&[u8], &[u8]) -> bool,
) -> bool {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    l.render(req, &mut a);
    r.render(req, &mut b);
    f(&a, &b)
}

fn file_test(path: &[u8], test: FileTest) -> bool {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    let p = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    let Ok(m) = std::fs::metadata(p) else {
        return false;
    };
    match test {
        FileTest::File => m.is_file(),
        FileTest::Dir => m.is_dir(),
        FileTest::Exists => true,
        FileTest::Exec => m.permissions().mode() & 0o100 != 0,
    }
}
