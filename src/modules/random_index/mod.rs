//! `random_index`, as nginx's `ngx_http_random_index_module`: a request for
//! a directory (a URI ending in `/`) goes on, by an internal redirect, to a
//! file of that directory chosen at random. Names starting with `.` are left
//! out, and so is anything that is not a regular file (symbolic links are
//! followed). A directory with no file leaves the request to `index`. It
//! is a content hook of the levels where it is on, as nginx's handler.

use crate::conf::table::{Ctx, Def, ONE, Scope};
use crate::conf::values::{flag, set_once};
use crate::core::module::{ContentHook, Hooks, Module, Ordered};
use crate::core::path::map_uri;
use crate::core::request::{BoxFuture, Outcome, Request, RequestBody};
use crate::settings;
use std::hash::{BuildHasher, Hasher};
use std::os::unix::ffi::OsStrExt;

settings! {
    /// Settings of random_index at one level.
    pub struct RandomIndexConf / RandomIndexConfSet {
        pub on: bool = false,
    }
}

/// A number nobody can guess (the standard library's per-process random
/// hash keys, fresh for each call).
fn random() -> u64 {
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

fn takes(req: &Request<'_>) -> bool {
    req.uri.last() == Some(&b'/')
}

fn run<'r>(req: &'r mut Request<'_>, _: &'r mut dyn RequestBody) -> BoxFuture<'r, Outcome> {
    let outcome = match choose(req) {
        Choice::File(uri) => Outcome::Redirect(uri),
        Choice::Status(code) => Outcome::Respond(req.error(code)),
        Choice::Index => match req.server.pipeline.default_content {
            Some(index) => index(req),
            None => Outcome::Respond(req.error(404)),
        },
    };
    Box::pin(std::future::ready(outcome))
}

/// What a directory request turns into.
enum Choice {
    /// The URI of the file chosen.
    File(Vec<u8>),
    Status(u16),
    /// No file there: `index` and the static files answer.
    Index,
}

fn choose(req: &Request<'_>) -> Choice {
    let mut path = Vec::new();
    if let Err(code) = map_uri(req, &req.uri, &mut path) {
        return Choice::Status(code);
    }
    let dir = std::path::Path::new(std::ffi::OsStr::from_bytes(&path));
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 404,
                std::io::ErrorKind::PermissionDenied => 403,
                _ => 500,
            };
            crate::error_log!(
                Error,
                "opendir() \"{}\" failed ({}){}",
                dir.display(),
                crate::core::errlog::errno_text(&e),
                req.log_context()
            );
            return Choice::Status(code);
        }
    };
    let names: Vec<Vec<u8>> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().as_bytes().first() != Some(&b'.'))
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_file()))
        .map(|e| e.file_name().as_bytes().to_vec())
        .collect();
    if names.is_empty() {
        return Choice::Index;
    }
    let name = &names[(random() % names.len() as u64) as usize];
    let mut uri = req.uri.clone();
    uri.extend_from_slice(name);
    Choice::File(uri)
}

pub static DIRECTIVES: &[Def] = &[Def {
    name: "random_index",
    ignored: false,
    ctx: Ctx::LOCATION,
    arity: ONE,
    set: |s: &mut Scope<'_>, d, _| {
        let v = flag(d, 0)?;
        set_once(&mut s.loc().get_mut::<RandomIndexConfSet>().on, v, d)
    },
    syntax: "random_index on | off;",
    default: "off",
    doc: "A request for a directory (a URI ending in `/`) is served a file of that directory chosen at random, by an internal redirect. Names starting with `.` and anything but regular files (symbolic links followed) are left out; a directory without files is left to `index`.\n\n```nginx\nlocation /banners/ {\n    random_index on;\n}\n```",
}];

/// The random_index module.
pub static MODULE: Module = Module {
    name: "random_index",
    nginx: &["http_random_index_module"],
    directives: &[DIRECTIVES],
    settings: Some(&RandomIndexConf::KIND),
    hooks: Hooks {
        content: Some(Ordered {
            order: 20,
            run: ContentHook { takes, run },
            active: |c| c.get::<RandomIndexConf>().on,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
