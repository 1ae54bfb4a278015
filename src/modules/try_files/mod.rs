//! `try_files`: the pre-content phase. The first file (or, with a trailing
//! `/`, directory) that exists under root/alias becomes the URI the content
//! handler serves, in the same location; when none does, the last argument
//! decides: an internal redirect to a URI, a named location, or `=code`.

pub mod conf;

use crate::conf::model::LocKind;
use crate::core::request::{Request, split_args};
use crate::core::vars::Template;
use crate::modules::static_files::handler::push_clean;

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

/// What the pre-content phase decided.
pub enum Next {
    /// A file matched; the URI now names it.
    Found,
    /// Internal redirect to (URI, args).
    Redirect(Vec<u8>, Vec<u8>),
    Named(Vec<u8>),
    Status(u16),
}

pub fn run(req: &mut Request<'_>, tf: &TryFiles) -> Next {
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
        return Next::Found;
    }
    let mut last = Vec::new();
    match &tf.fallback {
        Fallback::Status(c) => Next::Status(*c),
        Fallback::Named(t) => {
            t.render(&*req, &mut last);
            Next::Named(last)
        }
        Fallback::Uri(t) => {
            t.render(&*req, &mut last);
            let (u, a) = split_args(&last);
            Next::Redirect(u.to_vec(), a.to_vec())
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
    use std::os::unix::ffi::OsStrExt;
    path.clear();
    let loc = req.location.filter(|l| l.alias.is_some());
    let Some(l) = loc else {
        path.extend_from_slice(req.conf.static_files.root.as_os_str().as_bytes());
        return push_clean(path, name).then_some(NewUri::Name);
    };
    req.document_root(path);
    if matches!(l.kind, LocKind::Regex { .. }) {
        return push_clean(path, name).then_some(NewUri::AddToAlias);
    }
    match name.strip_prefix(l.pattern.as_bytes()) {
        Some(rest) => push_clean(path, rest).then_some(NewUri::Name),
        None => push_clean(path, name).then(|| NewUri::Prefixed(l.pattern.clone())),
    }
}

fn as_path(b: &[u8]) -> &std::path::Path {
    use std::os::unix::ffi::OsStrExt;
    std::path::Path::new(std::ffi::OsStr::from_bytes(b))
}
