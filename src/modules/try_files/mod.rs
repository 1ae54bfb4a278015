//! `try_files`: the pre-content phase. The first file (or, with a trailing
//! `/`, directory) that exists under root/alias becomes the URI the content
//! handler serves, in the same location; when none does, the last argument
//! decides: an internal redirect to a URI, a named location, or `=code`.

pub mod conf;

use crate::core::module::{Hooks, Module, Precontent};
use crate::core::path::push_clean;
use crate::core::request::{Request, split_args};
use crate::core::vars::Template;

/// One `try_files` directive.
#[derive(Debug)]
pub struct TryFiles {
    /// Names tried in order; `true` when the name was written with a
    /// trailing `/` (then only a directory matches, and the slash is not
    /// part of the name, as in nginx).
    pub files: Vec<(Template, bool)>,
    pub fallback: Fallback,
}

#[derive(Debug)]
pub enum Fallback {
    /// A URI, with `?args` replacing the request's.
    Uri(Template),
    /// `@name`.
    Named(Template),
    /// `=code`.
    Status(u16),
}

pub fn run(req: &mut Request<'_>, tf: &TryFiles) -> Precontent {
    let mut name = Vec::new();
    let mut path = Vec::new();
    for (t, dir) in &tf.files {
        name.clear();
        t.render(&*req, &mut name);
        let Some(uri) = file_path(req, &name, &mut path) else {
            continue;
        };
        let found = match std::fs::metadata(as_path(&path)) {
            Ok(m) => m.is_dir() == *dir,
            Err(_) => false,
        };
        if !found {
            continue;
        }
        match uri {
            NewUri::Name => req.uri = std::mem::take(&mut name),
            NewUri::Prefixed(p) => {
                let mut u = p.into_bytes();
                u.extend_from_slice(&name);
                req.uri = u;
            }
            NewUri::AddToAlias => {
                if !*dir {
                    req.uri = std::mem::take(&mut name);
                    req.state.add_uri_to_alias = true;
                }
            }
        }
        return Precontent::Next;
    }
    let mut last = Vec::new();
    match &tf.fallback {
        Fallback::Status(c) => Precontent::Status(*c),
        Fallback::Named(t) => {
            t.render(&*req, &mut last);
            Precontent::Named(last)
        }
        Fallback::Uri(t) => {
            t.render(&*req, &mut last);
            let (u, a) = split_args(&last);
            Precontent::Redirect(u.to_vec(), a.to_vec())
        }
    }
}

/// How the URI changes when a tried name matches.
enum NewUri {
    /// It becomes the name.
    Name,
    /// It becomes the location's prefix + the name (alias, name outside
    /// the prefix).
    Prefixed(String),
    /// Regex location with alias: the name is added to the alias from now on.
    AddToAlias,
}

/// The file a tried name stands for, as nginx builds it: root + name; with
/// a prefix location's alias, the alias in place of the location's prefix;
/// with a regex location's alias, the alias + name. `None` when the name
/// would climb out of the root.
fn file_path(req: &Request<'_>, name: &[u8], path: &mut Vec<u8>) -> Option<NewUri> {
    path.clear();
    let loc = req.location.filter(|l| l.alias.is_some());
    let Some(l) = loc else {
        return (req.root(path) && push_clean(path, name)).then_some(NewUri::Name);
    };
    req.document_root(path);
    let Some(prefix) = l.alias_base() else {
        return push_clean(path, name).then_some(NewUri::AddToAlias);
    };
    match name.strip_prefix(prefix.as_bytes()) {
        Some(rest) => push_clean(path, rest).then_some(NewUri::Name),
        None => push_clean(path, name).then(|| NewUri::Prefixed(prefix.to_string())),
    }
}

fn as_path(b: &[u8]) -> &std::path::Path {
    use std::os::unix::ffi::OsStrExt;
    std::path::Path::new(std::ffi::OsStr::from_bytes(b))
}

/// `try_files`, in the pre-content phase.
pub static MODULE: Module = Module {
    name: "try_files",
    directives: &[conf::DIRECTIVES],
    hooks: Hooks {
        precontent: Some(|req, data| match data.get::<TryFiles>() {
            Some(tf) => run(req, tf),
            None => Precontent::Next,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
