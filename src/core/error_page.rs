//! `error_page` and `recursive_error_pages`: when a response vireo generated
//! (an error or redirect made through `Request::error`) has a status with a
//! page, the request is redirected internally (as a GET) to that page, to a
//! named location, or answered with a redirect. `core::request` applies them.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE};
use crate::conf::values::{flag, set_once};
use crate::core::vars::{Template, Vars};
use std::sync::Arc;

/// The status an error page is answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overwrite {
    /// The original error's status.
    Keep,
    /// `=`: whatever the page's own response has.
    FromPage,
    /// `=code`.
    Code(u16),
}

/// One `error_page` directive.
#[derive(Clone, Debug)]
pub struct Page {
    pub codes: Vec<u16>,
    pub overwrite: Overwrite,
    /// A URI (`/…`, with `?args`), a named location (`@…`) or a URL.
    pub uri: Template,
}

/// The `error_page` directives of one level, in order.
#[derive(Clone, Debug, Default)]
pub struct ErrorPages(pub Vec<Page>);

impl ErrorPages {
    /// The first page for `status`.
    pub fn find(&self, status: u16) -> Option<&Page> {
        self.0.iter().find(|p| p.codes.contains(&status))
    }
}

fn parse(d: &Directive, vars: &mut Vars) -> Result<Page, ConfError> {
    let bad = |v: &str| ConfError::new(format!("invalid value \"{v}\""), &d.span);
    let n = d.args.len();
    let mut codes = Vec::new();
    let mut overwrite = Overwrite::Keep;
    for (i, a) in d.arg_strs().take(n - 1).enumerate() {
        if let Some(code) = a.strip_prefix('=') {
            if i == 0 || i != n - 2 {
                return Err(bad(a));
            }
            overwrite = if code.is_empty() {
                Overwrite::FromPage
            } else {
                let c = code
                    .parse::<u16>()
                    .ok()
                    .filter(|c| code.bytes().all(|b| b.is_ascii_digit()) && *c <= 999)
                    .ok_or_else(|| bad(a))?;
                Overwrite::Code(c)
            };
            continue;
        }
        let c = a
            .parse::<u16>()
            .ok()
            .filter(|_| a.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| bad(a))?;
        if !(300..=599).contains(&c) || c == 499 {
            return Err(ConfError::new(
                format!("value \"{c}\" must be between 300 and 599"),
                &d.span,
            ));
        }
        codes.push(c);
    }
    if codes.is_empty() {
        return Err(ConfError::new(
            "invalid number of arguments in \"error_page\" directive",
            &d.span,
        ));
    }
    let uri = crate::conf::values::template(d, n - 1, vars)?;
    Ok(Page {
        codes,
        overwrite,
        uri,
    })
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "error_page",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: Arity::args(2, MANY),
        set: |s, d, e| {
            let page = parse(d, &mut e.vars)?;
            let pages = s
                .loc()
                .core
                .error_pages
                .get_or_insert_with(|| Some(Arc::default()))
                .get_or_insert_with(Arc::default);
            Arc::make_mut(pages).0.push(page);
            Ok(())
        },
        syntax: "error_page code … [=[response]] uri;",
        default: "—",
        doc: "The page for errors with these codes, when vireo generated the error (static files, `return code`, try_files `=code`, a handler's error) rather than passing on an upstream's response. A URI is an internal redirect, made as a GET (HEAD stays HEAD), with the arguments written in `uri`; `@name` goes to a named location (method kept); anything else is a 302 redirect to it (or the `=code` given, if it is 301, 302, 303, 307 or 308). The answer keeps the original status unless `=code` sets one or `=` alone takes the page's own. A level with error_page directives does not inherit its parent's.\n\n```nginx\nerror_page 404 /404.html;\nerror_page 500 502 503 504 /50x.html;\nerror_page 404 =200 /empty.gif;\nerror_page 403 @denied;\n```",
    },
    Def {
        name: "recursive_error_pages",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().core.recursive_error_pages, flag(d, 0)?, d),
        syntax: "recursive_error_pages on | off;",
        default: "off",
        doc: "Lets an error page's own errors go to error pages too (still within the 10 internal redirects of a request).\n\n```nginx\nrecursive_error_pages on;\n```",
    },
];
