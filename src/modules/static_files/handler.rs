//! The static content handler: URI → file, index files, directory redirects,
//! conditional requests, ranges, MIME type.

use super::cache::{self, FileInfo};
use super::conf::StaticConf;
use super::{conditional, range};
use crate::core::errlog::Level;
use crate::core::message::head::Method;
use crate::core::message::response::{Body, Response, Value};
use crate::core::request::{Outcome, Request};
use crate::modules::autoindex::conf::AutoindexConf;
use std::io::ErrorKind;
use std::rc::Rc;

pub fn content(req: &mut Request<'_>) -> Outcome {
    content_with(req, &|_| None)
}

/// A body made from a regular file in place of the file itself (`None`: the
/// file), as flv's header and offset: served with the file's validators,
/// type, conditionals and ranges.
pub type MakeBody<'m> = &'m dyn Fn(&FileInfo) -> Option<Body>;

/// The static handler, with the body of a regular file from `make`.
pub fn content_with(req: &mut Request<'_>, make: MakeBody<'_>) -> Outcome {
    // POST reaches the file look-up: a missing file is still a 404, as nginx.
    let method = req.method();
    if !matches!(method, Method::Get | Method::Head | Method::Post) {
        return Outcome::Respond(req.error(405));
    }
    let mut file = std::mem::take(&mut req.filename);
    // Root, URI and an index name fit without regrowing.
    file.reserve(req.conf.core.root.as_os_str().len() + req.uri.len() + 32);
    let mapped = crate::core::path::map_uri(req, &req.uri, &mut file);
    req.filename = file;
    if let Err(status) = mapped {
        return Outcome::Respond(req.error(status));
    }
    if req.uri.ends_with(b"/") {
        return index(req);
    }
    let sf = req.conf.get::<StaticConf>();
    let info = match cache::open(&req.filename, sf) {
        Ok(i) => i,
        // gzip_static & co. serve `file.gz` even when `file` itself is
        // missing, as nginx does.
        Err(e) if e.kind() == ErrorKind::NotFound && method != Method::Post => {
            let r = respond_file(req, None, make).unwrap_or_else(|| open_error(req, e));
            return Outcome::Respond(r);
        }
        Err(e) => return Outcome::Respond(open_error(req, e)),
    };
    if info.is_dir {
        return Outcome::Respond(redirect_to_dir(req));
    }
    if !info.is_file {
        return Outcome::Respond(req.error(404));
    }
    if method == Method::Post {
        return Outcome::Respond(req.error(405));
    }
    let r = respond_file(req, Some(&info), make).expect("the file itself is at hand");
    Outcome::Respond(r)
}

fn index(req: &mut Request<'_>) -> Outcome {
    let dir_len = req.filename.len();
    let mut rendered = Vec::new();
    for name in req.conf.get::<StaticConf>().index.iter() {
        let name = match name.literal() {
            Some(l) => l,
            None => {
                rendered.clear();
                name.render(&*req, &mut rendered);
                &rendered
            }
        };
        // An absolute name is a URI to go to, found or not (nginx's index).
        if name.first() == Some(&b'/') {
            return Outcome::Redirect(name.to_vec());
        }
        req.filename.truncate(dir_len);
        req.filename.extend_from_slice(name);
        match cache::open(&req.filename, req.conf.get::<StaticConf>()) {
            Ok(i) if i.is_file => {
                let mut uri = req.uri.clone();
                uri.extend_from_slice(name);
                return Outcome::Redirect(uri);
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {}
            Err(e) => return Outcome::Respond(open_error(req, e)),
        }
    }
    req.filename.truncate(dir_len);
    let dir_exists =
        cache::open(&req.filename, req.conf.get::<StaticConf>()).is_ok_and(|i| i.is_dir);
    if dir_exists && req.conf.get::<AutoindexConf>().autoindex {
        Outcome::Respond(crate::modules::autoindex::respond(req))
    } else if dir_exists {
        crate::error_log!(
            Error,
            "directory index of \"{}\" is forbidden",
            String::from_utf8_lossy(&req.filename)
        );
        Outcome::Respond(req.error(403))
    } else {
        // As nginx's index module: the first index file's path, when its
        // directory is missing.
        if req.conf.core.log_not_found && crate::core::errlog::enabled(Level::Error) {
            let first = req.conf.get::<StaticConf>().index.first();
            crate::core::errlog::log(
                Level::Error,
                format_args!(
                    "\"{}{}\" is not found (2: No such file or directory){}",
                    String::from_utf8_lossy(&req.filename),
                    first.map_or("", |n| n.source()),
                    req.log_context()
                ),
            );
        }
        Outcome::Respond(req.error(404))
    }
}

fn open_error(req: &Request<'_>, e: std::io::Error) -> Response {
    let status = match e.kind() {
        ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::InvalidFilename => 404,
        ErrorKind::PermissionDenied => 403,
        _ => 500,
    };
    let level = if status == 404 {
        crate::core::errlog::Level::Error
    } else {
        crate::core::errlog::Level::Crit
    };
    let not_found = matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory);
    if (!not_found || req.conf.core.log_not_found) && crate::core::errlog::enabled(level) {
        crate::core::errlog::log(
            level,
            format_args!(
                "open() \"{}\" failed ({}), client: {}, request: \"{}\"",
                String::from_utf8_lossy(&req.filename),
                crate::core::errlog::errno_text(&e),
                req.client_addr(),
                String::from_utf8_lossy(req.head.line())
            ),
        );
    }
    req.error(status)
}

/// A directory asked for without its trailing slash: 301 to the slashed URI.
fn redirect_to_dir(req: &Request<'_>) -> Response {
    let mut loc = req.origin();
    loc.extend(crate::core::path::escape_uri(&req.uri));
    loc.push('/');
    if let Some(args) = req.args() {
        loc.push('?');
        loc.push_str(&String::from_utf8_lossy(args));
    }
    req.error(301).header("Location", Value::Owned(loc))
}

/// The file `info` (`None`: it does not exist), or in its place a
/// precompressed variant (gzip_static & co.); `None` when there is neither.
fn respond_file(
    req: &Request<'_>,
    info: Option<&Rc<FileInfo>>,
    make: MakeBody<'_>,
) -> Option<Response> {
    let variant = crate::modules::compress::precompressed(req, info.map(|i| &**i));
    let mut r = respond_with(req, variant.info.as_ref().or(info)?, make);
    variant.apply(&mut r);
    Some(r)
}

fn respond_with(req: &Request<'_>, info: &Rc<FileInfo>, make: MakeBody<'_>) -> Response {
    let sf = req.conf.get::<StaticConf>();
    let head = req.head;
    let etag = if sf.etag { info.etag.as_ref() } else { "" };
    let with_validators = |mut r: Response| {
        r.headers
            .push(("Last-Modified", Value::Shared(info.last_modified.clone())));
        if sf.etag {
            r.headers.push(("ETag", Value::Shared(info.etag.clone())));
        }
        r
    };
    // An error page with a status of its own ignores conditionals and ranges.
    let conditionals = req.conditionals_apply();
    if conditionals
        && conditional::precondition_failed(
            head.header("if-match"),
            head.header("if-unmodified-since"),
            etag,
            info.mtime,
        )
    {
        return req.error(412);
    }
    if conditionals
        && conditional::not_modified(
            head.header("if-none-match"),
            head.header("if-modified-since"),
            etag,
            info.mtime,
            sf.if_modified_since,
        )
    {
        return with_validators(Response::new(304));
    }
    let ct = Value::Shared(
        req.conf
            .core
            .types
            .lookup_shared(&req.uri)
            .unwrap_or(&req.conf.core.default_type)
            .clone(),
    );
    let file = info.file.clone().expect("regular files are opened");
    let mut r = Response::new(200);
    r.body = match (make(info), &info.body) {
        (Some(body), _) => body,
        (None, Some(b)) => Body::Bytes(b.clone()),
        (None, None) => Body::File {
            file,
            range: 0..info.size,
        },
    };
    r.content_type = Some(ct);
    // max_ranges 0: no ranges, and none offered.
    if sf.max_ranges != Some(0) {
        r.headers.push(("Accept-Ranges", Value::Static("bytes")));
    }
    range::apply(req, with_validators(r), sf.max_ranges)
}
