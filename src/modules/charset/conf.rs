//! Directives of the charset filter.

use super::recode::{CharsetMap, parse_map};
use crate::conf::ast::{ConfError, Directive, Span};
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE, Scope};
use crate::conf::values::{bad_arg, flag, push, set_once};
use crate::core::mime::TypeList;
use crate::core::vars::Template;
use crate::settings;
use std::sync::Arc;

/// nginx's default `charset_types` (text/html is always added).
pub const DEFAULT_TYPES: &[&str] = &[
    "text/html",
    "text/xml",
    "text/plain",
    "text/vnd.wap.wml",
    "application/javascript",
    "application/rss+xml",
];

settings! {
    /// Settings of the charset filter at one level.
    pub struct CharsetConf / CharsetConfSet {
        /// `charset`: the name (maybe with variables), `None` for `off`.
        pub charset: Option<Template> = None,
        pub source_charset: Option<Arc<str>> = None,
        /// Where `source_charset` was written, for the load's check.
        pub source_at: Option<Span> = None,
        pub override_charset: bool = false,
        pub types: Arc<TypeList> = TypeList::of(DEFAULT_TYPES.iter().copied()).expect("MIME types"),
        /// Every `charset_map` of the http block.
        pub maps: Arc<[Arc<CharsetMap>]> = Arc::from(Vec::new()),
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut CharsetConfSet {
    s.loc().get_mut::<CharsetConfSet>()
}

fn charset_map(s: &mut Scope<'_>, d: &Directive) -> Result<(), ConfError> {
    let map = parse_map(d)?;
    let l = loc(s);
    let dup = l.maps.iter().flat_map(|m| m.iter()).any(|m| {
        (m.from.eq_ignore_ascii_case(&map.from) && m.to.eq_ignore_ascii_case(&map.to))
            || (m.from.eq_ignore_ascii_case(&map.to) && m.to.eq_ignore_ascii_case(&map.from))
    });
    if dup {
        return Err(ConfError::new(
            format!(
                "duplicate \"charset_map\" between the charsets \"{}\" and \"{}\"",
                map.from, map.to
            ),
            &d.span,
        ));
    }
    push(&mut l.maps, Arc::new(map));
    Ok(())
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "charset",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, e| {
            let v = match d.arg(0) {
                "off" => None,
                "" => return Err(bad_arg(d, "")),
                v => Some(
                    Template::compile(v, &mut e.vars).map_err(|m| ConfError::new(m, &d.span))?,
                ),
            };
            set_once(&mut loc(s).charset, v, d)
        },
        syntax: "charset charset | off;",
        default: "off",
        doc: "Adds `; charset=NAME` to the `Content-Type` of responses whose MIME type is in `charset_types`, unless the Content-Type already names a charset (see `override_charset`). The name may hold variables. When `source_charset` (or, with `override_charset`, the response's own charset) differs and a `charset_map` links the two, the body is recoded on the fly, piece by piece. An encoded response (`gzip_static`, an upstream's gzip) that would need recoding is sent as it is, without a charset. A fixed `charset` and `source_charset` that no map links are a configuration error; when the names come from variables or the response, the response is left alone and an error is logged, as nginx does. A proxied or FastCGI reply's `X-Accel-Charset` stands for `charset` for that reply, whatever its type, also where `charset` is off (where a `charset_map` or `source_charset` applies).\n\n```nginx\ncharset utf-8;\nsource_charset windows-1251;\n```",
    },
    Def {
        name: "source_charset",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            let l = loc(s);
            l.source_at = Some(Some(d.span.clone()));
            set_once(&mut l.source_charset, Some(Arc::from(d.arg(0))), d)
        },
        syntax: "source_charset charset;",
        default: "—",
        doc: "The charset responses are written in; bodies are recoded from it to `charset` through a `charset_map`.\n\n```nginx\ncharset koi8-r;\nsource_charset utf-8;\n```",
    },
    Def {
        name: "override_charset",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            let v = flag(d, 0)?;
            set_once(&mut loc(s).override_charset, v, d)
        },
        syntax: "override_charset on | off;",
        default: "off",
        doc: "With `on`, a response whose Content-Type already names a charset (from a proxied or FastCGI server) gets `charset` instead, its body recoded from the charset it named when a `charset_map` links the two.\n\n```nginx\nlocation /legacy/ {\n    charset utf-8;\n    override_charset on;\n    proxy_pass http://backend;\n}\n```",
    },
    Def {
        name: "charset_types",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            let types = TypeList::of(d.arg_strs()).map_err(|a| bad_arg(d, a))?;
            set_once(&mut loc(s).types, types, d)
        },
        syntax: "charset_types mime-type … | *;",
        default: "text/html text/xml text/plain text/vnd.wap.wml application/javascript application/rss+xml",
        doc: "The MIME types `charset` applies to; `text/html` always is, `*` is any type.\n\n```nginx\ncharset_types text/css application/json;\n```",
    },
    Def {
        name: "charset_map",
        ignored: false,
        ctx: Ctx::HTTP,
        arity: Arity::block(2, 2),
        set: |s, d, _| charset_map(s, d),
        syntax: "charset_map charset1 charset2 { … }",
        default: "—",
        doc: "A recoding table between two charsets, used both ways: each line is a code in `charset1` and its code in `charset2`, in hexadecimal. When `charset2` is `utf-8`, the second value is the character's UTF-8 bytes in hex. Codes 80-FF without a line become `?`; characters a one-byte charset lacks become `&#NNNN;` when recoding from UTF-8. Without a map, `windows-1251` ↔ `utf-8` and `koi8-r` ↔ `utf-8` use built-in tables (as nginx's `win-utf` and `koi-utf` files); a `charset_map` for the pair replaces them.\n\n```nginx\ncharset_map koi8-r utf-8 {\n    C1 D0B0;   # а\n    C2 D0B1;   # б\n}\n```",
    },
];
