//! Directives of the userid module.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE, Scope};
use crate::conf::values::{bad_arg, parse_time, set_once};
use crate::core::vars::Template;
use crate::settings;
use std::sync::Arc;

/// `userid on | v1 | log | off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Enable {
    Off,
    /// Read the cookie (`$uid_got`), set none.
    Log,
    /// Set cookies in the old byte order.
    V1,
    On,
}

/// `userid_expires time | max | off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// A session cookie.
    Off,
    /// The end of 2037.
    Max,
    /// Seconds from now.
    After(i64),
}

settings! {
    /// Settings of the userid filter at one level.
    pub struct UseridConf / UseridConfSet {
        pub enable: Enable = Enable::Off,
        pub name: Arc<str> = Arc::from("uid"),
        /// `; domain=…`, or none.
        pub domain: Option<Arc<str>> = None,
        pub path: Arc<str> = Arc::from("/"),
        pub expires: Expiry = Expiry::Off,
        pub p3p: Option<Arc<str>> = None,
        /// The character a valid cookie has at its 23rd place.
        pub mark: Option<u8> = None,
        /// The first four bytes of a new identifier; the server's address when unset.
        pub service: Option<u32> = None,
        /// `; secure`, `; httponly`, `; samesite=…`, in that order.
        pub flags: Arc<str> = Arc::from(""),
        /// `$uid_reset`, read when a request came with a cookie.
        pub reset: Option<Template> = None,
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut UseridConfSet {
    s.loc().get_mut::<UseridConfSet>()
}

/// The argument, or `None` for `none`.
fn unless_none(d: &Directive) -> Option<&str> {
    Some(d.arg(0)).filter(|v| *v != "none")
}

fn flags(d: &Directive) -> Result<String, ConfError> {
    if d.args.len() == 1 && d.arg(0) == "off" {
        return Ok(String::new());
    }
    let names = [
        "secure",
        "httponly",
        "samesite=strict",
        "samesite=lax",
        "samesite=none",
    ];
    let mut on = [false; 5];
    for a in d.arg_strs() {
        let i = names
            .iter()
            .position(|n| a.eq_ignore_ascii_case(n))
            .ok_or_else(|| bad_arg(d, a))?;
        if i >= 2 && on[2..].iter().any(|&b| b) {
            return Err(bad_arg(d, a));
        }
        on[i] = true;
    }
    Ok(names
        .iter()
        .zip(on)
        .filter(|(_, on)| *on)
        .map(|(n, _)| format!("; {n}"))
        .collect())
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "userid",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let enable = match d.arg(0) {
                "on" => Enable::On,
                "v1" => Enable::V1,
                "log" => Enable::Log,
                "off" => Enable::Off,
                v => return Err(bad_arg(d, v)),
            };
            let reset = Template::compile("$uid_reset", &mut e.vars)
                .map_err(|m| ConfError::new(m, &d.span))?;
            let l = loc(s);
            l.reset = Some(Some(reset));
            set_once(&mut l.enable, enable, d)
        },
        syntax: "userid on | v1 | log | off;",
        default: "off",
        doc: "Gives each client an identifier in a cookie, as nginx's userid filter: `on` sets one on responses to clients that came without a valid one (`v1`: the same in the byte order of old nginx versions), `log` only reads it (`$uid_got`), `off` neither. `$uid_got` is the identifier the client sent, `$uid_set` the one this response sets (`name=` and 32 hex digits); a `$uid_reset` the configuration sets (by `map` or `set`) to anything but empty or `0` makes a new one, and `log` also logs it.\n\n```nginx\nuserid on;\nuserid_name uid;\nuserid_expires 365d;\nlog_format ids '$remote_addr $uid_got $uid_set \"$request\"';\n```",
    },
    Def {
        name: "userid_name",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut loc(s).name, Arc::from(d.arg(0)), d),
        syntax: "userid_name name;",
        default: "uid",
        doc: "The cookie's name.\n\n```nginx\nuserid_name visitor;\n```",
    },
    Def {
        name: "userid_domain",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = unless_none(d).map(|v| Arc::from(format!("; domain={v}")));
            set_once(&mut loc(s).domain, v, d)
        },
        syntax: "userid_domain name | none;",
        default: "none",
        doc: "The cookie's domain; `none` sends none.\n\n```nginx\nuserid_domain example.com;\n```",
    },
    Def {
        name: "userid_path",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut loc(s).path, Arc::from(d.arg(0)), d),
        syntax: "userid_path path;",
        default: "/",
        doc: "The cookie's path.\n\n```nginx\nuserid_path /shop/;\n```",
    },
    Def {
        name: "userid_expires",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0) {
                "off" => Expiry::Off,
                "max" => Expiry::Max,
                t => Expiry::After(
                    parse_time(t)
                        .ok_or_else(|| bad_arg(d, t))?
                        .as_secs()
                        .try_into()
                        .map_err(|_| bad_arg(d, t))?,
                ),
            };
            set_once(&mut loc(s).expires, v, d)
        },
        syntax: "userid_expires time | max | off;",
        default: "off",
        doc: "How long the browser keeps the cookie: a time, `max` (the end of 2037), or `off` (until the browser closes).\n\n```nginx\nuserid_expires 365d;\n```",
    },
    Def {
        name: "userid_p3p",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut loc(s).p3p, unless_none(d).map(Arc::from), d),
        syntax: "userid_p3p string | none;",
        default: "none",
        doc: "A `P3P` header sent with the cookie.\n\n```nginx\nuserid_p3p 'policyref=\"/w3c/p3p.xml\", CP=\"CUR ADM OUR NOR STA NID\"';\n```",
    },
    Def {
        name: "userid_mark",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0).as_bytes() {
                b"off" => None,
                [c] if c.is_ascii_alphanumeric() || *c == b'=' => Some(*c),
                _ => return Err(bad_arg(d, d.arg(0))),
            };
            set_once(&mut loc(s).mark, v, d)
        },
        syntax: "userid_mark letter | digit | = | off;",
        default: "off",
        doc: "Marks the cookies set with this character (in place of the first `=` of their padding); a cookie without the mark gets the same identifier again, marked.\n\n```nginx\nuserid_mark t;\n```",
    },
    Def {
        name: "userid_service",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let n = d.arg(0).parse::<u32>().map_err(|_| bad_arg(d, d.arg(0)))?;
            set_once(&mut loc(s).service, Some(n), d)
        },
        syntax: "userid_service number;",
        default: "the server's IP address",
        doc: "The first four bytes of new identifiers (by default the address the connection came in on; 0 for `v1`).\n\n```nginx\nuserid_service 42;\n```",
    },
    Def {
        name: "userid_flags",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            let f = flags(d)?;
            set_once(&mut loc(s).flags, Arc::from(f), d)
        },
        syntax: "userid_flags off | flag …;",
        default: "off",
        doc: "Cookie attributes: `secure`, `httponly`, and one of `samesite=strict`, `samesite=lax`, `samesite=none`.\n\n```nginx\nuserid_flags secure httponly samesite=lax;\n```",
    },
];
