//! Directives of the sub_filter module.

use super::matcher::{Pairs, automaton};
use crate::conf::ast::Directive;
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE, Scope};
use crate::conf::values::{bad_arg, flag, set_once};
use crate::core::mime::TypeList;
use crate::core::vars::{Template, VarSource};
use crate::settings;
use aho_corasick::AhoCorasick;
use std::sync::Arc;

/// One `sub_filter string replacement;`.
#[derive(Debug)]
pub struct Pair {
    pub string: Template,
    pub replacement: Template,
}

/// A level's `sub_filter` strings (a level that names any replaces the
/// inherited list, as nginx's).
#[derive(Debug, Default)]
pub struct SubFilters {
    pub pairs: Vec<Pair>,
    /// The automaton, built at load when no string has variables and none is
    /// empty.
    pub fixed: Option<Arc<AhoCorasick>>,
}

impl SubFilters {
    /// The strings and replacements for one response, the empty strings
    /// left out; `None` when none is left.
    pub fn render(&self, src: &dyn VarSource) -> Option<Pairs> {
        let mut strings = Vec::with_capacity(self.pairs.len());
        let mut replacements = Vec::with_capacity(self.pairs.len());
        for p in &self.pairs {
            let mut s = Vec::new();
            p.string.render(src, &mut s);
            if s.is_empty() {
                continue;
            }
            let mut r = Vec::new();
            p.replacement.render(src, &mut r);
            strings.push(s);
            replacements.push(r);
        }
        (!strings.is_empty()).then_some(Pairs {
            strings,
            replacements,
        })
    }
}

settings! {
    /// Settings of the sub_filter module at one level.
    pub struct SubFilterConf / SubFilterConfSet {
        pub filters: Option<Arc<SubFilters>> = None,
        pub once: bool = true,
        pub types: Arc<TypeList> = TypeList::html(),
        pub last_modified: bool = false,
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut SubFilterConfSet {
    s.loc().get_mut::<SubFilterConfSet>()
}

fn sub_filter(
    s: &mut Scope<'_>,
    d: &Directive,
    e: &mut crate::conf::table::Env,
) -> Result<(), crate::conf::ast::ConfError> {
    let string = crate::conf::values::template(d, 0, &mut e.vars)?;
    let replacement = crate::conf::values::template(d, 1, &mut e.vars)?;
    let l = loc(s);
    let mut filters = match l.filters.take().flatten() {
        Some(f) => Arc::try_unwrap(f).expect("only this level holds it while loading"),
        None => SubFilters::default(),
    };
    filters.pairs.push(Pair {
        string,
        replacement,
    });
    let fixed: Option<Vec<&[u8]>> = filters
        .pairs
        .iter()
        .map(|p| p.string.literal().filter(|l| !l.is_empty()))
        .collect();
    filters.fixed = fixed.map(|f| automaton(&f));
    l.filters = Some(Some(Arc::new(filters)));
    Ok(())
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "sub_filter",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(2, 2),
        set: sub_filter,
        syntax: "sub_filter string replacement;",
        default: "—",
        doc: "Replaces `string` with `replacement` in response bodies, as they are sent (a match may span the body's pieces; only bytes that could begin a match are held back). Matching ignores ASCII case; both may hold variables (an empty string is skipped). Several may be given: the leftmost match wins, and of those starting at one place the string given first. A level with its own `sub_filter` does not inherit the others. Applies to responses of `sub_filter_types` without a Content-Encoding; a range (206) answer is sent unchanged.\n\n```nginx\nsub_filter '<a href=\"http://127.0.0.1:8080/' '<a href=\"https://$host/';\nsub_filter_once on;\n```",
    },
    Def {
        name: "sub_filter_once",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = flag(d, 0)?;
            set_once(&mut loc(s).once, v, d)
        },
        syntax: "sub_filter_once on | off;",
        default: "on",
        doc: "With `on`, each string is replaced once (its first match); with `off`, every match.\n\n```nginx\nsub_filter_once off;\n```",
    },
    Def {
        name: "sub_filter_types",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            let types = TypeList::of(d.arg_strs()).map_err(|a| bad_arg(d, a))?;
            set_once(&mut loc(s).types, types, d)
        },
        syntax: "sub_filter_types mime-type … | *;",
        default: "text/html",
        doc: "The MIME types `sub_filter` applies to, besides `text/html`; `*` is any type.\n\n```nginx\nsub_filter_types text/css application/javascript;\n```",
    },
    Def {
        name: "sub_filter_last_modified",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = flag(d, 0)?;
            set_once(&mut loc(s).last_modified, v, d)
        },
        syntax: "sub_filter_last_modified on | off;",
        default: "off",
        doc: "With `on`, a response changed by `sub_filter` keeps its Last-Modified, and its ETag becomes weak; with `off`, both are removed.\n\n```nginx\nsub_filter_last_modified on;\n```",
    },
];
