//! The directive table: every directive vireo knows is one `Directive` entry of data
//! (name, contexts, arity, setter, default, doc). The table drives parsing, `-t`,
//! error messages and docs/directives.md.

use super::ast::{ConfError, Directive};
use super::model::{
    HttpConf, LocConfSet, LocationConf, MainConf, ServerConf, StreamConf, StreamServerConf,
};
use crate::core::module::{Extensions, Module};
use crate::core::vars::Vars;
use std::collections::HashMap;

/// Contexts a directive may stand in (a bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx(pub u16);

impl Ctx {
    pub const MAIN: Ctx = Ctx(1);
    pub const EVENTS: Ctx = Ctx(2);
    pub const HTTP: Ctx = Ctx(4);
    pub const SERVER: Ctx = Ctx(8);
    pub const LOCATION: Ctx = Ctx(16);
    /// Inside `limit_except`.
    pub const LIMIT_EXCEPT: Ctx = Ctx(32);
    /// Inside an `if` of a location (nginx's "if in location").
    pub const IF: Ctx = Ctx(64);
    /// Inside an `if` of a server (nginx's "if in server": the rewrite
    /// directives only).
    pub const SERVER_IF: Ctx = Ctx(128);
    /// The rewrite script's directives: server, location and both `if`s.
    pub const SCRIPT: Ctx = Ctx(8 | 16 | 64 | 128);
    /// http, server and location: the usual home of a setting that inherits downwards.
    pub const HSL: Ctx = Ctx(4 | 8 | 16);
    /// http and server.
    pub const HS: Ctx = Ctx(4 | 8);
    /// The `stream` block (TCP and UDP proxying).
    pub const STREAM: Ctx = Ctx(256);
    /// A `server` of the `stream` block.
    pub const STREAM_SERVER: Ctx = Ctx(512);
    /// stream and its servers: where a stream setting inherits downwards.
    pub const SS: Ctx = Ctx(256 | 512);

    pub const fn or(self, o: Ctx) -> Ctx {
        Ctx(self.0 | o.0)
    }
    pub fn contains(self, o: Ctx) -> bool {
        self.0 & o.0 == o.0
    }
    /// Names of the contexts in this set, for the docs.
    pub fn names(self) -> Vec<&'static str> {
        [
            (Ctx::MAIN, "main"),
            (Ctx::EVENTS, "events"),
            (Ctx::HTTP, "http"),
            (Ctx::SERVER, "server"),
            (Ctx::LOCATION, "location"),
            (Ctx::LIMIT_EXCEPT, "limit_except"),
            (Ctx::SERVER_IF, "if in server"),
            (Ctx::IF, "if in location"),
            (Ctx::STREAM, "stream"),
            (Ctx::STREAM_SERVER, "server in stream"),
        ]
        .into_iter()
        .filter(|(c, _)| self.contains(*c))
        .map(|(_, n)| n)
        .collect()
    }
}

/// How many arguments a directive takes, and whether it opens a block.
#[derive(Clone, Copy, Debug)]
pub struct Arity {
    pub min: u8,
    pub max: u8,
    pub block: bool,
}

impl Arity {
    pub const fn args(min: u8, max: u8) -> Arity {
        Arity {
            min,
            max,
            block: false,
        }
    }
    pub const fn block(min: u8, max: u8) -> Arity {
        Arity {
            min,
            max,
            block: true,
        }
    }
}
pub const ONE: Arity = Arity::args(1, 1);
pub const MANY: u8 = u8::MAX;

/// Where a setter writes: the configuration level the directive stands in.
pub enum Scope<'a> {
    Main(&'a mut MainConf),
    Events(&'a mut MainConf),
    Http(&'a mut HttpConf),
    Server(&'a mut ServerConf),
    Location(&'a mut LocationConf),
    /// A `limit_except` block: the settings it holds for other methods.
    LimitExcept(&'a mut LocationConf),
    /// An `if` block of a location: the settings (and content handler) the
    /// request takes when the condition holds.
    LocationIf(&'a mut LocationConf),
    /// An `if` block of a server: only its rewrite script counts.
    ServerIf(&'a mut LocationConf),
    /// The `stream` block.
    Stream(&'a mut StreamConf),
    /// A `server` of the `stream` block.
    StreamServer(&'a mut StreamServerConf),
}

impl Scope<'_> {
    /// The modules' own data of a server or location level (not inherited).
    pub fn level_ext(&mut self) -> &mut Extensions {
        match self {
            Scope::Server(s) => &mut s.phases.ext,
            Scope::StreamServer(s) => &mut s.phases.ext,
            Scope::Location(l)
            | Scope::LimitExcept(l)
            | Scope::LocationIf(l)
            | Scope::ServerIf(l) => &mut l.phases.ext,
            _ => unreachable!("table declares this directive for server/location only"),
        }
    }

    pub fn ctx(&self) -> Ctx {
        match self {
            Scope::Main(_) => Ctx::MAIN,
            Scope::Events(_) => Ctx::EVENTS,
            Scope::Http(_) => Ctx::HTTP,
            Scope::Server(_) => Ctx::SERVER,
            Scope::Location(_) => Ctx::LOCATION,
            Scope::LimitExcept(_) => Ctx::LIMIT_EXCEPT,
            Scope::LocationIf(_) => Ctx::IF,
            Scope::ServerIf(_) => Ctx::SERVER_IF,
            Scope::Stream(_) => Ctx::STREAM,
            Scope::StreamServer(_) => Ctx::STREAM_SERVER,
        }
    }

    /// The inheritable settings of an http, server or location level (or a
    /// stream or stream server level). The table's
    /// context check runs before any setter, so a setter declared for those contexts
    /// only is never called elsewhere.
    pub fn loc(&mut self) -> &mut LocConfSet {
        match self {
            Scope::Http(h) => &mut h.conf,
            Scope::Server(s) => &mut s.conf,
            Scope::Location(l)
            | Scope::LimitExcept(l)
            | Scope::LocationIf(l)
            | Scope::ServerIf(l) => &mut l.conf,
            Scope::Stream(s) => &mut s.conf,
            Scope::StreamServer(s) => &mut s.conf,
            Scope::Main(_) | Scope::Events(_) => {
                unreachable!("table declares this directive for http/server/location only")
            }
        }
    }

    /// Make `handler` the location's content handler (not inherited by
    /// nested locations); a second one is refused.
    pub fn set_content(
        &mut self,
        d: &Directive,
        handler: std::sync::Arc<dyn crate::core::request::Content>,
    ) -> Result<(), ConfError> {
        let (Scope::Location(l) | Scope::LimitExcept(l) | Scope::LocationIf(l)) = self else {
            unreachable!("table declares this directive for location only")
        };
        if l.content.is_some() {
            return Err(ConfError::new(
                format!(
                    "\"{}\" directive is duplicate: the location already has a content handler",
                    d.name
                ),
                &d.span,
            ));
        }
        l.content = Some(handler);
        Ok(())
    }

    /// The main configuration, from the main or events level.
    pub fn main(&mut self) -> &mut MainConf {
        match self {
            Scope::Main(m) | Scope::Events(m) => m,
            _ => unreachable!("table declares this directive for main/events only"),
        }
    }
}

pub type Setter = fn(&mut Scope<'_>, &Directive, &mut Env) -> Result<(), ConfError>;

/// One directive: the data that drives parsing and documentation.
pub struct Def {
    pub name: &'static str,
    /// Accepted for nginx compatibility and ignored: the walker logs a notice
    /// giving `doc` up to its example block as the reason instead of calling
    /// `set`, and the reference says so.
    pub ignored: bool,
    pub ctx: Ctx,
    pub arity: Arity,
    pub set: Setter,
    /// Syntax line for the docs, e.g. `sendfile on | off;`.
    pub syntax: &'static str,
    /// Default as nginx documents it, or "—".
    pub default: &'static str,
    /// Markdown for the reference, ending in a ```` ```nginx ```` example block.
    pub doc: &'static str,
}

impl Def {
    /// `doc` split before its example block: (text, "\n\n```nginx …```").
    fn doc_and_example(&self) -> (&'static str, &'static str) {
        let doc = self.doc;
        doc.split_at(doc.find("\n\n```").unwrap_or(doc.len()))
    }
}

/// State carried while walking the configuration tree: the modules of this
/// load and what their directives collected so far.
pub struct Env {
    /// Folder relative paths resolve against (`-p` prefix).
    pub prefix: std::path::PathBuf,
    /// Notices to write to the error log once it is open (accepted-but-ignored directives).
    pub notices: Vec<String>,
    /// The modules of this load, in registry order.
    pub modules: &'static [&'static Module],
    /// Every directive by name: the core's and the modules'. A name may
    /// have one entry per protocol (`proxy_pass` of http and of stream),
    /// their contexts apart.
    defs: HashMap<&'static str, Vec<&'static Def>>,
    /// The variables declared and referenced so far.
    pub vars: Vars,
    /// Modules' per-load registries (log files, shared zones, upstreams …).
    pub ext: Extensions,
    /// The main level's `user` (name, uid, gid), known once the main level
    /// is walked: what folders made at load are handed to.
    pub user: Option<(String, u32, u32)>,
    /// A directive needs CAP_NET_RAW kept after switching to `user`
    /// (`proxy_bind … transparent`).
    pub net_raw: bool,
}

impl Env {
    /// The environment of one load with `modules`: their settings take their
    /// slots, their directives and variables become known.
    pub fn new(prefix: std::path::PathBuf, modules: &'static [&'static Module]) -> Env {
        super::model::assign_slots(modules);
        let mut defs: HashMap<&'static str, Vec<&'static Def>> = HashMap::new();
        for d in tables(modules).flatten() {
            defs.entry(d.name).or_default().push(d);
        }
        Env {
            prefix,
            notices: Vec::new(),
            modules,
            defs,
            vars: Vars::new(modules),
            ext: Extensions::default(),
            user: None,
            net_raw: false,
        }
    }

    /// The directive called `name` that may stand in `ctx` (else the
    /// first of that name, whose context check then refuses it).
    pub fn lookup(&self, name: &str, ctx: Ctx) -> Option<&'static Def> {
        let all = self.defs.get(name)?;
        all.iter()
            .find(|d| d.ctx.contains(ctx))
            .or(all.first())
            .copied()
    }

    /// Apply each directive of `dirs` to `scope` through the table.
    pub fn walk(&mut self, dirs: &[Directive], scope: &mut Scope<'_>) -> Result<(), ConfError> {
        for d in dirs {
            let def = self.lookup(&d.name, scope.ctx()).ok_or_else(|| {
                ConfError::new(format!("unknown directive \"{}\"", d.name), &d.span)
            })?;
            check(def, d, scope.ctx())?;
            self.vars.at(&d.span);
            if def.ignored {
                self.ignore(d, def.doc_and_example().0);
            } else {
                (def.set)(scope, d, self)?;
            }
        }
        Ok(())
    }

    /// Resolve a path against the prefix (absolute paths stay).
    pub fn path(&self, p: &str) -> std::path::PathBuf {
        self.prefix.join(p)
    }

    /// A notice for the error log (something accepted with a caveat).
    pub fn notice(&mut self, msg: String) {
        self.notices.push(msg);
    }

    /// Note that a directive was accepted but has no effect in vireo.
    pub fn ignore(&mut self, d: &Directive, why: &str) {
        self.notices.push(format!(
            "\"{}\" directive is ignored: {why} in {}",
            d.name, d.span
        ));
    }
}

fn check(def: &Def, d: &Directive, ctx: Ctx) -> Result<(), ConfError> {
    if !def.ctx.contains(ctx) {
        return Err(ConfError::new(
            format!("\"{}\" directive is not allowed here", d.name),
            &d.span,
        ));
    }
    let n = d.args.len();
    if n < def.arity.min as usize || n > def.arity.max as usize {
        return Err(ConfError::new(
            format!("invalid number of arguments in \"{}\" directive", d.name),
            &d.span,
        ));
    }
    match (def.arity.block, d.block.is_some()) {
        (true, false) => Err(ConfError::new(
            format!("directive \"{}\" has no opening \"{{\"", d.name),
            &d.span,
        )),
        (false, true) => Err(ConfError::new(
            format!("directive \"{}\" is not terminated by \";\"", d.name),
            &d.span,
        )),
        _ => Ok(()),
    }
}

/// The core's directive tables.
const CORE: &[&[Def]] = &[
    super::core_directives::DIRECTIVES,
    super::core_directives::IGNORED,
    crate::core::error_page::DIRECTIVES,
];

/// Every directive table: the core's, then each module's.
pub fn tables<'a>(modules: &'a [&'static Module]) -> impl Iterator<Item = &'static [Def]> + 'a {
    CORE.iter()
        .copied()
        .chain(modules.iter().flat_map(|m| m.directives.iter().copied()))
}

/// Every directive, the core's and each module's.
pub fn all<'a>(modules: &'a [&'static Module]) -> impl Iterator<Item = &'static Def> + 'a {
    tables(modules).flatten()
}

/// How many directives are called `name` (one per protocol at most).
fn defs_named(modules: &[&'static Module], name: &str) -> usize {
    all(modules).filter(|d| d.name == name).count()
}

/// docs/directives.md, generated from the table.
pub fn reference_markdown(modules: &[&'static Module]) -> String {
    let mut defs: Vec<&Def> = all(modules).collect();
    // http's first, then stream's, for a name both have.
    defs.sort_by_key(|d| (d.name, d.ctx.0 & Ctx::SS.0 != 0));
    let mut out = String::from(
        "# Directive reference\n\nGenerated from the directive table (`vireo --directives-md`); \
         a test keeps this file in step with the code.\n\n",
    );
    for d in defs {
        let doc = if d.ignored {
            let (why, example) = d.doc_and_example();
            format!(
                "Accepted for nginx compatibility and ignored, with a notice in the error log: {why}.{example}"
            )
        } else {
            d.doc.to_string()
        };
        let title = match defs_named(modules, d.name) > 1 && d.ctx.0 & Ctx::SS.0 != 0 {
            true => format!("{} (stream)", d.name),
            false => d.name.to_string(),
        };
        out.push_str(&format!(
            "## {}\n\n- Syntax: `{}`\n- Default: `{}`\n- Context: {}\n\n{}\n\n",
            title,
            d.syntax,
            d.default,
            d.ctx.names().join(", "),
            doc
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_notice_gives_the_reason_without_the_example() {
        let mut env = Env::new(std::path::PathBuf::new(), &[]);
        let mut main = MainConf::default();
        let d = Directive::test("pcre_jit", &["on"], 3);
        env.walk(&[d], &mut Scope::Main(&mut main)).unwrap();
        assert_eq!(
            env.notices,
            ["\"pcre_jit\" directive is ignored: vireo's regex engine needs no JIT in t.conf:3"]
        );
    }
}
