//! The `try_files` directive.

use super::{Fallback, TryFiles};
use crate::conf::ast::ConfError;
use crate::conf::table::{Arity, Ctx, Def, MANY};
use crate::core::vars::Template;

pub static DIRECTIVES: &[Def] = &[Def {
    name: "try_files",
    ignored: false,
    ctx: Ctx::SERVER.or(Ctx::LOCATION),
    arity: Arity::args(2, MANY),
    set: |s, d, e| {
        if s.level_ext().get::<TryFiles>().is_some() {
            return Err(ConfError::new(
                "\"try_files\" directive is duplicate",
                &d.span,
            ));
        }
        let mut compile =
            |v: &str| Template::compile(v, &mut e.vars).map_err(|e| ConfError::new(e, &d.span));
        let n = d.args.len();
        let mut files = Vec::with_capacity(n - 1);
        for a in d.arg_strs().take(n - 1) {
            match a.strip_suffix('/') {
                Some(name) => files.push((compile(name)?, true)),
                None => files.push((compile(a)?, false)),
            }
        }
        let last = d.arg(n - 1);
        let fallback = if let Some(code) = last.strip_prefix('=') {
            let c = code
                .parse::<u16>()
                .ok()
                .filter(|c| code.bytes().all(|b| b.is_ascii_digit()) && *c <= 999)
                .ok_or_else(|| ConfError::new(format!("invalid code \"{last}\""), &d.span))?;
            Fallback::Status(c)
        } else if last.starts_with('@') {
            Fallback::Named(compile(last)?)
        } else {
            Fallback::Uri(compile(last)?)
        };
        s.level_ext().insert(TryFiles { files, fallback });
        Ok(())
    },
    syntax: "try_files file … uri | try_files file … =code;",
    default: "—",
    doc: "Checks the files in order (root or alias + name; a name ending in `/` checks for a directory) and serves the first that exists, in this location, with the URI set to its name. When none exists: an internal redirect to the last argument (a URI whose `?args` replace the request's, or `@name`), or the status `=code`. Not inherited. As in nginx, it does nothing in a location where an `if` matched.\n\n```nginx\ntry_files $uri $uri/ /index.php?$args;   # WordPress\ntry_files $uri /index.html;              # single-page app\ntry_files $uri @backend;\ntry_files $uri =404;\n```",
}];
