//! The client body directives: `client_body_buffer_size`,
//! `client_body_temp_path`, `client_body_in_file_only`,
//! `client_body_in_single_buffer`.

use crate::conf::ast::ConfError;
use crate::conf::model::LocConfSet;
use crate::conf::table::{Arity, Ctx, Def, Env, ONE};
use crate::conf::values::{bad_arg, flag, set_once, size};
use crate::settings;
use std::path::PathBuf;
use std::sync::Arc;

/// `client_body_in_file_only off | on | clean`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InFile {
    Off,
    /// Always in a file, kept after the request.
    On,
    /// Always in a file, removed after the request.
    Clean,
}

/// `client_body_temp_path`: a folder and up to three levels of subfolders
/// named after the last digits of each file's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TempPath {
    pub dir: PathBuf,
    pub levels: Vec<usize>,
}

settings! {
    /// How a request body is buffered when a handler reads it whole.
    pub struct ClientBodyConf / ClientBodyConfSet {
        /// A body longer than this goes to a temp file.
        pub buffer_size: u64 = 16 * 1024,
        /// The http hook makes the default `client_body_temp` under the prefix.
        pub temp_path: Arc<TempPath> = Arc::new(TempPath {
            dir: PathBuf::from("client_body_temp"),
            levels: Vec::new(),
        }),
        pub in_file_only: InFile = InFile::Off,
        pub in_single_buffer: bool = false,
    }
}

fn conf<'a>(s: &'a mut crate::conf::table::Scope<'_>) -> &'a mut ClientBodyConfSet {
    s.loc().get_mut::<ClientBodyConfSet>()
}

/// The temp folders of this load's `client_body_temp_path` directives.
#[derive(Default)]
struct TempDirs(Vec<PathBuf>);

/// The http hook: the default temp path, `client_body_temp` under the prefix;
/// then every temp folder is made when missing (mode 0700) and, when vireo
/// runs as root with a `user`, handed to that user, as nginx makes its
/// paths at start. A folder that cannot be made is a notice: a request
/// whose body needs a file there then fails with 500 and a `crit` line.
pub fn default_temp_path(http: &mut LocConfSet, env: &mut Env) -> Result<(), ConfError> {
    let c = http.get_mut::<ClientBodyConfSet>();
    if c.temp_path.is_none() {
        let dir = env.path("client_body_temp");
        env.ext.entry::<TempDirs>().0.push(dir.clone());
        c.temp_path = Some(Arc::new(TempPath {
            dir,
            levels: Vec::new(),
        }));
    }
    let dirs = std::mem::take(&mut env.ext.entry::<TempDirs>().0);
    for dir in dirs {
        if let Err(e) = make_dir(&dir, env.user.as_ref()) {
            env.notices.push(format!(
                "client body temp folder \"{}\" could not be made ({})",
                dir.display(),
                crate::core::errlog::errno_text(&e)
            ));
        }
    }
    Ok(())
}

pub fn make_dir(dir: &std::path::Path, user: Option<&(String, u32, u32)>) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    if let Some((_, uid, gid)) = user
        && crate::sys::is_root()
        && std::fs::metadata(dir)?.uid() != *uid
    {
        std::os::unix::fs::chown(dir, Some(*uid), Some(*gid))?;
    }
    Ok(())
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "client_body_buffer_size",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let n = size(d, 0)?;
            set_once(&mut conf(s).buffer_size, n, d)
        },
        syntax: "client_body_buffer_size size;",
        default: "16k",
        doc: "How much of a request body a handler that reads it whole (proxy_pass, fastcgi_pass with request buffering on) keeps in memory; a longer body is written to a temporary file under `client_body_temp_path`, removed when the request ends.\n\n```nginx\nclient_body_buffer_size 128k;\n```",
    },
    Def {
        name: "client_body_temp_path",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 4),
        set: |s, d, env| {
            let mut levels = Vec::new();
            for i in 1..d.args.len() {
                match d.arg(i).parse::<usize>() {
                    Ok(n @ 1..=2) => levels.push(n),
                    _ => return Err(bad_arg(d, d.arg(i))),
                }
            }
            let t = TempPath {
                dir: env.path(d.arg(0)),
                levels,
            };
            env.ext.entry::<TempDirs>().0.push(t.dir.clone());
            set_once(&mut conf(s).temp_path, Arc::new(t), d)
        },
        syntax: "client_body_temp_path path [level1 [level2 [level3]]];",
        default: "client_body_temp",
        doc: "Where request bodies longer than `client_body_buffer_size` are written, relative to the prefix; up to three levels of subfolders (1 or 2 digits each), named after the last digits of the file's name, spread the files. Folders are made as needed.\n\n```nginx\nclient_body_temp_path /var/cache/vireo/client_temp 1 2;\n```",
    },
    Def {
        name: "client_body_in_file_only",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0) {
                "off" => InFile::Off,
                "on" => InFile::On,
                "clean" => InFile::Clean,
                v => return Err(bad_arg(d, v)),
            };
            set_once(&mut conf(s).in_file_only, v, d)
        },
        syntax: "client_body_in_file_only on | clean | off;",
        default: "off",
        doc: "Whether a buffered request body always goes to a temporary file (`$request_body_file`): `on` keeps the file after the request, `clean` removes it. Unbuffered bodies (`proxy_request_buffering off`) never do.\n\n```nginx\nclient_body_in_file_only clean;\n```",
    },
    Def {
        name: "client_body_in_single_buffer",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = flag(d, 0)?;
            set_once(&mut conf(s).in_single_buffer, v, d)
        },
        syntax: "client_body_in_single_buffer on | off;",
        default: "off",
        doc: "Keeps a buffered request body that fits `client_body_buffer_size` in one buffer (one piece for `$request_body` and the upstream).\n\n```nginx\nclient_body_in_single_buffer on;\n```",
    },
];
