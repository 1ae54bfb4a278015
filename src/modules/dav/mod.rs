//! WebDAV, as nginx's `ngx_http_dav_module`: PUT, DELETE, MKCOL, COPY and
//! MOVE on the files under a level's root or alias, in the content phase of
//! a location without a handler of its own (other methods go on to the
//! static files). Every answer and refusal is nginx's (RFC 4918's statuses:
//! 201, 204, 400 for a bad Depth/Overwrite/Destination, 409 for a missing
//! parent or a collection mismatch, 412 when Overwrite forbids, 415 for a
//! body where none belongs).

pub mod conf;

use crate::core::message::response::{Response, Value};
use crate::core::module::{ContentHook, Hooks, Module, Ordered};
use crate::core::path::{escape_uri, map_uri};
use crate::core::request::{BoxFuture, Outcome, Request, RequestBody};
use crate::modules::static_files::uri::normalize;
use conf::DavConf;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn bit(method: &str) -> u8 {
    match method {
        "PUT" => conf::PUT,
        "DELETE" => conf::DELETE,
        "MKCOL" => conf::MKCOL,
        "COPY" => conf::COPY,
        "MOVE" => conf::MOVE,
        _ => 0,
    }
}

fn takes(req: &Request<'_>) -> bool {
    req.conf.get::<DavConf>().methods & bit(req.method_name()) != 0
}

fn run<'r>(req: &'r mut Request<'_>, body: &'r mut dyn RequestBody) -> BoxFuture<'r, Outcome> {
    Box::pin(async move {
        let mut replay =
            crate::modules::client_body::held(req).map(crate::modules::client_body::Replay::new);
        let body: &mut dyn RequestBody = match &mut replay {
            Some(r) => r,
            None => body,
        };
        let resp = match req.method_name() {
            "PUT" => put(req, body).await,
            m => {
                if has_body(req, body) {
                    crate::error_log!(Error, "{m} with body is unsupported{}", req.log_context());
                    req.error(415)
                } else {
                    match m {
                        "DELETE" => delete(req),
                        "MKCOL" => mkcol(req),
                        _ => copy_move(req, m == "MOVE"),
                    }
                }
            }
        };
        Outcome::Respond(resp)
    })
}

fn has_body(req: &Request<'_>, body: &dyn RequestBody) -> bool {
    match body.declared_len() {
        Some(n) => n > 0,
        None => req.head.header("transfer-encoding").is_some(),
    }
}

fn path_of(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// The file a URI maps to, or the error answer.
fn file(req: &Request<'_>, uri: &[u8]) -> Result<PathBuf, Response> {
    let mut p = Vec::new();
    map_uri(req, uri, &mut p).map_err(|c| req.error(c))?;
    while p.len() > 1 && p.last() == Some(&b'/') {
        p.pop();
    }
    Ok(path_of(&p).to_path_buf())
}

/// An error of the file system as nginx answers it: `not_found` for a
/// missing path, 403 for permissions, 405 for an existing one, else 500.
fn fs_error(
    req: &Request<'_>,
    what: &str,
    path: &Path,
    e: &std::io::Error,
    not_found: u16,
) -> Response {
    let code = match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => not_found,
        Some(libc::EACCES | libc::EPERM) => 403,
        Some(libc::EEXIST) => 405,
        _ => 500,
    };
    crate::error_log!(
        Error,
        "{what} \"{}\" failed ({}){}",
        path.display(),
        crate::core::errlog::errno_text(e),
        req.log_context()
    );
    req.error(code)
}

/// `Depth`: `Ok(None)` for infinity, `Err` for a value nginx does not know.
fn depth(req: &Request<'_>, default: Option<u8>) -> Result<Option<u8>, ()> {
    match req.head.header("depth") {
        None => Ok(default),
        Some(b"0") => Ok(Some(0)),
        Some(b"1") => Ok(Some(1)),
        Some(b"infinity") => Ok(None),
        Some(_) => Err(()),
    }
}

fn bad(req: &Request<'_>, why: &str) -> Response {
    crate::error_log!(Error, "{why}{}", req.log_context());
    req.error(400)
}

/// 201 with a Location naming the URI (escaped), as nginx.
fn created(req: &Request<'_>) -> Response {
    let mut r = Response::new(201);
    let uri = escape_uri(&req.uri).to_string();
    r.headers
        .push(("Location", Value::Owned(format!("{}{uri}", req.origin()))));
    r
}

fn dir_access(access: u32) -> u32 {
    access | (access & 0o444) >> 2
}

async fn put(req: &mut Request<'_>, body: &mut dyn RequestBody) -> Response {
    if req.uri.last() == Some(&b'/') {
        crate::error_log!(Error, "cannot PUT to a collection{}", req.log_context());
        return req.error(409);
    }
    if req.head.header("content-range").is_some() {
        crate::error_log!(Error, "PUT with range is unsupported{}", req.log_context());
        return req.error(501);
    }
    let path = match file(req, &req.uri) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let c = req.conf.get::<DavConf>();
    let status = match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => {
            crate::error_log!(
                Error,
                "\"{}\" could not be created (21: Is a directory){}",
                path.display(),
                req.log_context()
            );
            return req.error(409);
        }
        Ok(_) => 204,
        Err(_) => 201,
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    if c.create_full_put_path
        && let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(dir_access(c.access))
            .create(dir)
    {
        return fs_error(req, "mkdir()", dir, &e, 409);
    }
    // The body goes to a temporary file beside the target, which takes the
    // target's place when complete: readers never see half a file.
    let name = path.file_name().map(OsStrExt::as_bytes).unwrap_or_default();
    let mut tmp_name = b".".to_vec();
    tmp_name.extend_from_slice(name);
    tmp_name
        .extend_from_slice(format!(".put-{}-{}", std::process::id(), req.connection).as_bytes());
    let tmp = dir.join(OsStr::from_bytes(&tmp_name));
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(c.access)
        .open(&tmp)
    {
        Ok(f) => f,
        Err(e) => return fs_error(req, "open()", &tmp, &e, 409),
    };
    let failed = loop {
        match body.chunk().await {
            Ok(Some(piece)) => {
                if let Err(e) = f.write_all(&piece) {
                    break Some(fs_error(req, "write()", &tmp, &e, 500));
                }
            }
            Ok(None) => break None,
            Err(e) => break Some(req.error(e.status())),
        }
    };
    if let Some(r) = failed {
        let _ = std::fs::remove_file(&tmp);
        return r;
    }
    // The client's Date, when it sent a valid one, is the file's time.
    if let Some(t) = req
        .head
        .header("date")
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| httpdate::parse_http_date(d).ok())
    {
        let _ = f.set_modified(t);
    }
    drop(f);
    let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(c.access));
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return fs_error(req, "rename()", &path, &e, 409);
    }
    match status {
        201 => created(req),
        _ => Response::new(204),
    }
}

fn delete(req: &mut Request<'_>) -> Response {
    let c = req.conf.get::<DavConf>();
    let slashes = req.uri.iter().filter(|&&b| b == b'/').count() as u64;
    if slashes < c.min_delete_depth {
        crate::error_log!(
            Error,
            "insufficient URI depth:{slashes} to DELETE{}",
            req.log_context()
        );
        return req.error(409);
    }
    let path = match file(req, &req.uri) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) => return fs_error(req, "stat()", &path, &e, 404),
    };
    let done = if meta.is_dir() {
        if req.uri.last() != Some(&b'/') {
            crate::error_log!(
                Error,
                "DELETE \"{}\" failed (21: Is a directory){}",
                path.display(),
                req.log_context()
            );
            return req.error(409);
        }
        if depth(req, None) != Ok(None) {
            return bad(req, "\"Depth\" header must be infinity");
        }
        std::fs::remove_dir_all(&path)
    } else {
        if !matches!(depth(req, Some(0)), Ok(Some(0) | None)) {
            return bad(req, "\"Depth\" header must be 0 or infinity");
        }
        std::fs::remove_file(&path)
    };
    match done {
        Ok(()) => Response::new(204),
        Err(e) => fs_error(req, "delete", &path, &e, 404),
    }
}

fn mkcol(req: &mut Request<'_>) -> Response {
    if req.uri.last() != Some(&b'/') {
        crate::error_log!(
            Error,
            "MKCOL can create a collection only{}",
            req.log_context()
        );
        return req.error(409);
    }
    let path = match file(req, &req.uri) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let access = dir_access(req.conf.get::<DavConf>().access);
    match std::fs::DirBuilder::new().mode(access).create(&path) {
        Ok(()) => created(req),
        Err(e) => fs_error(req, "mkdir()", &path, &e, 409),
    }
}

/// The `Destination` header's path on this server, decoded.
fn destination(req: &Request<'_>) -> Result<Vec<u8>, Response> {
    let Some(dest) = req.head.header("destination") else {
        return Err(bad(req, "client sent no \"Destination\" header"));
    };
    let invalid = || {
        bad(
            req,
            &format!(
                "client sent invalid \"Destination\" header: \"{}\"",
                String::from_utf8_lossy(dest)
            ),
        )
    };
    let path = if dest.first() == Some(&b'/') {
        dest
    } else {
        let scheme: &[u8] = if req.tls.is_some() {
            b"https://"
        } else {
            b"http://"
        };
        let Some(host) = dest.strip_prefix(scheme) else {
            return Err(invalid());
        };
        let server = req.host.as_bytes();
        if server.is_empty() {
            return Err(invalid());
        }
        if !host.starts_with(server) {
            return Err(bad(
                req,
                &format!(
                    "\"Destination\" URI \"{}\" is handled by different repository than the source URI",
                    String::from_utf8_lossy(dest)
                ),
            ));
        }
        let rest = &host[server.len()..];
        match rest.iter().position(|&b| b == b'/') {
            Some(i) => &rest[i..],
            None => return Err(invalid()),
        }
    };
    let path = match memchr::memchr(b'?', path) {
        Some(i) => &path[..i],
        None => path,
    };
    let mut out = Vec::new();
    normalize(path, &mut out).map_err(|_| invalid())?;
    if path.last() == Some(&b'/') && out.last() != Some(&b'/') {
        out.push(b'/');
    }
    Ok(out)
}

fn copy_move(req: &mut Request<'_>, moving: bool) -> Response {
    let duri = match destination(req) {
        Ok(d) => d,
        Err(r) => return r,
    };
    let src_col = req.uri.last() == Some(&b'/');
    if src_col != (duri.last() == Some(&b'/')) {
        crate::error_log!(
            Error,
            "both URI \"{}\" and \"Destination\" URI \"{}\" should be either collections or non-collections{}",
            String::from_utf8_lossy(&req.uri),
            String::from_utf8_lossy(&duri),
            req.log_context()
        );
        return req.error(409);
    }
    match depth(req, None) {
        Ok(None) => {}
        Ok(Some(0)) if !moving => {}
        Ok(_) | Err(_) if moving => return bad(req, "\"Depth\" header must be infinity"),
        _ => return bad(req, "\"Depth\" header must be 0 or infinity"),
    }
    let overwrite = match req.head.header("overwrite") {
        None | Some(b"T" | b"t") => true,
        Some(b"F" | b"f") => false,
        Some(v) => {
            return bad(
                req,
                &format!(
                    "client sent invalid \"Overwrite\" header: \"{}\"",
                    String::from_utf8_lossy(v)
                ),
            );
        }
    };
    let src = match file(req, &req.uri) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let smeta = match std::fs::symlink_metadata(&src) {
        Ok(m) => m,
        Err(e) => return fs_error(req, "stat()", &src, &e, 404),
    };
    let dst = match file(req, &duri) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let dst_dir = match std::fs::symlink_metadata(&dst) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return fs_error(req, "stat()", &dst, &e, 404),
        Ok(m) => {
            if m.is_dir() && duri.last() != Some(&b'/') {
                crate::error_log!(
                    Error,
                    "\"{}\" could not be {}, it is a directory{}",
                    dst.display(),
                    if moving { "moved" } else { "copied" },
                    req.log_context()
                );
                return req.error(409);
            }
            if !overwrite {
                crate::error_log!(
                    Error,
                    "\"{}\" could not be created{}",
                    dst.display(),
                    req.log_context()
                );
                return req.error(412);
            }
            Some(m.is_dir())
        }
    };
    if smeta.is_dir() {
        if !src_col {
            return bad(
                req,
                &format!("\"{}\" is collection", String::from_utf8_lossy(&req.uri)),
            );
        }
        if let Some(is_dir) = dst_dir {
            let gone = if is_dir {
                std::fs::remove_dir_all(&dst)
            } else {
                std::fs::remove_file(&dst)
            };
            if let Err(e) = gone {
                return fs_error(req, "delete", &dst, &e, 500);
            }
        }
        if moving {
            return match std::fs::rename(&src, &dst) {
                Ok(()) => Response::new(201),
                Err(e) => fs_error(req, "rename()", &dst, &e, 409),
            };
        }
        return match copy_tree(&src, &dst) {
            Ok(()) => Response::new(201),
            Err(e) => fs_error(req, "copy", &dst, &e, 409),
        };
    }
    if moving {
        if let Some(parent) = dst.parent() {
            let access = dir_access(req.conf.get::<DavConf>().access);
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(access)
                .create(parent);
        }
        return match std::fs::rename(&src, &dst) {
            Ok(()) => Response::new(204),
            Err(e) => fs_error(req, "rename()", &dst, &e, 500),
        };
    }
    match copy_file(&src, &dst, &smeta) {
        Ok(()) => Response::new(204),
        Err(e) => fs_error(req, "copy", &dst, &e, 500),
    }
}

/// Copy a file with its permissions and time, through a temporary file
/// renamed into place.
fn copy_file(src: &Path, dst: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    let mut tmp = dst.as_os_str().to_owned();
    tmp.push(format!(".copy-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let done = (|| {
        std::fs::copy(src, &tmp)?;
        std::fs::set_permissions(&tmp, meta.permissions())?;
        std::fs::File::options()
            .write(true)
            .open(&tmp)?
            .set_modified(meta.modified()?)?;
        std::fs::rename(&tmp, dst)
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// Copy a folder and everything in it (symbolic links as links).
fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(src)?;
    std::fs::DirBuilder::new()
        .mode(meta.permissions().mode())
        .create(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let t = e.file_type()?;
        let to = dst.join(e.file_name());
        if t.is_dir() {
            copy_tree(&e.path(), &to)?;
        } else if t.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path())?, &to)?;
        } else {
            copy_file(&e.path(), &to, &e.metadata()?)?;
        }
    }
    Ok(())
}

/// WebDAV: its directives and the content hook.
pub static MODULE: Module = Module {
    name: "dav",
    nginx: &["http_dav_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&DavConf::KIND),
    hooks: Hooks {
        content: Some(Ordered {
            order: 10,
            run: ContentHook { takes, run },
            active: |c| c.get::<DavConf>().methods != 0,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
