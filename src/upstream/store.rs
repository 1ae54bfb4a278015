//! `proxy_store` / `fastcgi_store`: an upstream's 200 reply body saved to a
//! file as it goes to the client (nginx's `ngx_http_upstream_store`).
//!
//! The body is written to a temporary file beside the target (a hidden
//! `.NAME.PID.N.store` in the same folder, created with the folders it
//! needs), renamed onto the target once the whole body has come (as many
//! bytes as the reply's Content-Length said, when it said one), with the
//! reply's Last-Modified as its modification time. A reply cut short, a
//! client that leaves, or a failed write removes the temporary file. The
//! target is the location's root (or alias) with the URI, or the
//! directive's template.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::Env;
use crate::core::message::head::Method;
use crate::core::message::response::{Body, BodyStream, Response};
use crate::core::request::{BoxFuture, Request};
use crate::core::vars::Template;
use bytes::Bytes;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a stored reply goes.
#[derive(Debug)]
pub enum Store {
    /// `on`: root or alias + URI, as a static file would be found.
    Root,
    /// A path with variables.
    Path(Template),
}

/// `*_store on | off | string`: `None` for `off`.
pub fn parse(d: &Directive, env: &mut Env) -> Result<Option<Arc<Store>>, ConfError> {
    Ok(match d.arg(0) {
        "off" => None,
        "on" => Some(Arc::new(Store::Root)),
        s => Some(Arc::new(Store::Path(
            Template::compile(s, &mut env.vars).map_err(|m| ConfError::new(m, &d.span))?,
        ))),
    })
}

/// `*_store_access users:permissions …` (`user:`, `group:`, `all:`; `rw` or
/// `r`): the mode of stored files. The user has `rw` unless given.
pub fn parse_access(d: &Directive) -> Result<u32, ConfError> {
    let mut user = 0o600;
    let mut mode = 0;
    for a in d.arg_strs() {
        let invalid = || ConfError::new(format!("invalid value \"{a}\""), &d.span);
        let (who, rights) = a.split_once(':').ok_or_else(invalid)?;
        let shift = match who {
            "user" => {
                user = 0;
                6
            }
            "group" => 3,
            "all" => 0,
            _ => return Err(invalid()),
        };
        let r = match rights {
            "rw" => 6,
            "r" => 4,
            _ => return Err(invalid()),
        };
        mode |= r << shift;
    }
    Ok(mode | user)
}

/// With a store configured, make a 200 reply's body a stream that saves
/// itself on its way to the client.
pub fn apply(req: &Request<'_>, store: Option<&Store>, access: u32, resp: &mut Response) {
    let Some(store) = store else { return };
    if resp.status != 200 || req.method() == Method::Head {
        return;
    }
    let mut dest = Vec::new();
    match store {
        Store::Root => {
            if crate::core::path::map_uri(req, &req.uri, &mut dest).is_err() {
                return;
            }
        }
        Store::Path(t) => t.render(req, &mut dest),
    }
    let dest = PathBuf::from(std::ffi::OsStr::from_bytes(&dest));
    let mtime = resp
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("last-modified"))
        .and_then(|(_, v)| httpdate::parse_http_date(v.as_str().trim()).ok());
    let (inner, len) = match std::mem::replace(&mut resp.body, Body::Empty) {
        Body::Stream { stream, len } => (Some(stream), len),
        Body::Empty => (None, Some(0)),
        other => {
            resp.body = other;
            return;
        }
    };
    let Some(tmp) = Temp::create(&dest, access, req) else {
        resp.body = match inner {
            Some(stream) => Body::Stream { stream, len },
            None => Body::Empty,
        };
        return;
    };
    let mut s = Saving {
        inner,
        tmp: Some(tmp),
        dest,
        expect: len,
        written: 0,
        mtime,
        context: req.log_context(),
    };
    match s.inner {
        Some(_) => {
            resp.body = Body::Stream {
                stream: Box::new(s),
                len,
            }
        }
        // An empty body is whole at once.
        None => s.finish(),
    }
}

/// A temporary file being written, removed unless it was renamed.
#[derive(Debug)]
struct Temp {
    file: std::fs::File,
    path: PathBuf,
}

impl Temp {
    fn create(dest: &Path, access: u32, req: &Request<'_>) -> Option<Temp> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
            return None;
        };
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".{}.{}.store",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        let path = dir.join(tmp_name);
        let open = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(access)
                .open(&path)
        };
        let file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The folders a file gets: its mode with x where r is.
                let _ = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(access | (access & 0o444) >> 2)
                    .create(dir);
                open()
            }
            r => r,
        };
        match file {
            Ok(file) => Some(Temp { file, path }),
            Err(e) => {
                crate::error_log!(
                    Crit,
                    "open() \"{}\" failed ({}){}",
                    path.display(),
                    crate::core::errlog::errno_text(&e),
                    req.log_context()
                );
                None
            }
        }
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        // An empty path: renamed, nothing to remove.
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The reply body passed on to the client and written to the temporary file.
#[derive(Debug)]
struct Saving {
    inner: Option<Box<dyn BodyStream>>,
    /// `None` once the file is renamed or given up.
    tmp: Option<Temp>,
    dest: PathBuf,
    /// The reply's length, when it gave one.
    expect: Option<u64>,
    written: u64,
    mtime: Option<std::time::SystemTime>,
    /// The request's error log context.
    context: String,
}

impl Saving {
    fn piece(&mut self, r: &std::io::Result<Option<Bytes>>) {
        match r {
            Ok(Some(b)) => self.write(b),
            Ok(None) => self.finish(),
            // Cut short: the temporary file goes.
            Err(_) => self.tmp = None,
        }
    }

    fn write(&mut self, b: &[u8]) {
        let Some(t) = &mut self.tmp else { return };
        if let Err(e) = t.file.write_all(b) {
            crate::error_log!(
                Crit,
                "write() \"{}\" failed ({}){}",
                t.path.display(),
                crate::core::errlog::errno_text(&e),
                self.context
            );
            self.tmp = None;
            return;
        }
        self.written += b.len() as u64;
    }

    /// The whole body came: rename it onto the target.
    fn finish(&mut self) {
        let Some(mut t) = self.tmp.take() else {
            return;
        };
        if self.expect.is_some_and(|n| n != self.written) {
            return;
        }
        if let Some(m) = self.mtime {
            let _ = t.file.set_modified(m);
        }
        if let Err(e) = std::fs::rename(&t.path, &self.dest) {
            crate::error_log!(
                Crit,
                "rename() \"{}\" to \"{}\" failed ({}){}",
                t.path.display(),
                self.dest.display(),
                crate::core::errlog::errno_text(&e),
                self.context
            );
            return;
        }
        t.path = PathBuf::new();
    }
}

impl BodyStream for Saving {
    fn next(&mut self) -> BoxFuture<'_, std::io::Result<Option<Bytes>>> {
        Box::pin(async move {
            let r = match &mut self.inner {
                Some(s) => s.next().await,
                None => Ok(None),
            };
            self.piece(&r);
            r
        })
    }

    fn ready(&mut self) -> Option<std::io::Result<Option<Bytes>>> {
        let r = self.inner.as_mut()?.ready()?;
        self.piece(&r);
        Some(r)
    }

    fn unbuffered(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.unbuffered())
    }
}
