//! The static content handler: URI → file, index files, directory redirects,
//! conditional requests, ranges, MIME type.

use super::cache::{self, FileInfo};
use super::{conditional, range};
use crate::conf::model::LocKind;
use crate::core::request::{Outcome, Request};
use crate::http::h1::parse::Method;
use crate::http::response::{Body, Response, Value};
use percent_encoding::{AsciiSet, CONTROLS, percent_encode};
use std::io::ErrorKind;
use std::rc::Rc;

/// Bytes escaped when a decoded URI goes back into a Location header.
const URI_ESCAPE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

pub fn content(req: &mut Request<'_>) -> Outcome {
    if !matches!(req.method(), Method::Get | Method::Head) {
        return Outcome::Respond(req.error(405));
    }
    if !map_to_file(req) {
        return Outcome::Respond(req.error(404));
    }
    if req.uri.ends_with(b"/") {
        return index(req);
    }
    let sf = &req.conf.static_files;
    let info = match cache::open(&req.filename, sf) {
        Ok(i) => i,
        Err(e) => return Outcome::Respond(open_error(req, e)),
    };
    if info.is_dir {
        return Outcome::Respond(redirect_to_dir(req));
    }
    if !info.is_file {
        return Outcome::Respond(req.error(404));
    }
    Outcome::Respond(respond_file(req, &info))
}

/// `$request_filename`: root + URI, or the alias in place of the location's prefix.
///
/// False when an alias would let the URI climb out of it: with `location /a`
/// and `alias /srv/x/;` the URI `/a../secret` maps to `/srv/x/../secret`
/// (nginx serves that; we refuse it).
fn map_to_file(req: &mut Request<'_>) -> bool {
    req.filename.clear();
    match req.location.and_then(|l| l.alias.as_ref().map(|a| (l, a))) {
        Some((l, alias)) => {
            req.filename.extend_from_slice(alias.as_bytes());
            if matches!(
                l.kind,
                LocKind::Prefix | LocKind::PrefixNoRegex | LocKind::Exact
            ) {
                let rest = req.uri.get(l.pattern.len()..).unwrap_or_default();
                req.filename.extend_from_slice(rest);
                let f = &req.filename;
                if f.ends_with(b"/..") || memchr::memmem::find(f, b"/../").is_some() {
                    return false;
                }
            }
        }
        None => {
            use std::os::unix::ffi::OsStrExt;
            req.filename
                .extend_from_slice(req.conf.static_files.root.as_os_str().as_bytes());
            req.filename.extend_from_slice(&req.uri);
        }
    }
    true
}

fn index(req: &mut Request<'_>) -> Outcome {
    let dir_len = req.filename.len();
    for name in req.conf.static_files.index.iter() {
        req.filename.truncate(dir_len);
        req.filename.extend_from_slice(name.as_bytes());
        match cache::open(&req.filename, &req.conf.static_files) {
            Ok(i) if i.is_file => {
                let mut uri = req.uri.clone();
                uri.extend_from_slice(name.as_bytes());
                return Outcome::Redirect(uri);
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {}
            Err(e) => return Outcome::Respond(open_error(req, e)),
        }
    }
    req.filename.truncate(dir_len);
    let dir_exists = cache::open(&req.filename, &req.conf.static_files).is_ok_and(|i| i.is_dir);
    if dir_exists {
        crate::error_log!(
            Error,
            "directory index of \"{}\" is forbidden",
            String::from_utf8_lossy(&req.filename)
        );
        Outcome::Respond(req.error(403))
    } else {
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
    if crate::core::errlog::enabled(level) {
        crate::core::errlog::log(
            level,
            format_args!(
                "open() \"{}\" failed ({}), client: {}, request: \"{}\"",
                String::from_utf8_lossy(&req.filename),
                crate::core::errlog::errno_text(&e),
                client(req),
                String::from_utf8_lossy(req.head.line())
            ),
        );
    }
    req.error(status)
}

/// The client address for error log lines.
fn client(req: &Request<'_>) -> String {
    match req.peer {
        crate::core::request::Peer::Tcp(a) => a.ip().to_string(),
        crate::core::request::Peer::Unix => "unix:".into(),
    }
}

/// A directory asked for without its trailing slash: 301 to the slashed URI.
fn redirect_to_dir(req: &Request<'_>) -> Response {
    let mut loc = req.origin();
    loc.extend(percent_encode(&req.uri, URI_ESCAPE));
    loc.push('/');
    if let Some(args) = req.args() {
        loc.push('?');
        loc.push_str(&String::from_utf8_lossy(args));
    }
    req.error(301).header("Location", Value::Owned(loc))
}

fn respond_file(req: &Request<'_>, info: &Rc<FileInfo>) -> Response {
    let sf = &req.conf.static_files;
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
    if conditional::precondition_failed(
        head.header("if-match"),
        head.header("if-unmodified-since"),
        etag,
        info.mtime,
    ) {
        return req.error(412);
    }
    let inm = if sf.etag {
        head.header("if-none-match")
    } else {
        None
    };
    if conditional::not_modified(
        inm,
        head.header("if-modified-since"),
        etag,
        info.mtime,
        sf.if_modified_since,
    ) {
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
    let spec = match head.header("range") {
        Some(r)
            if head
                .header("if-range")
                .is_none_or(|ir| conditional::if_range_matches(ir, etag, info.mtime)) =>
        {
            range::parse(r, info.size, sf.max_ranges)
        }
        _ => range::RangeSpec::Full,
    };
    let mut r = match spec {
        range::RangeSpec::Full => {
            let mut r = Response::new(200);
            r.body = match &info.body {
                Some(b) => Body::Bytes(b.clone()),
                None => Body::File {
                    file,
                    range: 0..info.size,
                },
            };
            r.content_type = Some(ct);
            r
        }
        range::RangeSpec::Unsatisfiable => {
            return req.error(416).header(
                "Content-Range",
                Value::Owned(format!("bytes */{}", info.size)),
            );
        }
        range::RangeSpec::Partial(ranges) if ranges.len() == 1 => {
            let rg = ranges[0].clone();
            let mut r = Response::new(206).header(
                "Content-Range",
                Value::Owned(range::content_range(&rg, info.size)),
            );
            r.body = match &info.body {
                Some(b) => Body::Bytes(b.slice(rg.start as usize..rg.end as usize)),
                None => Body::File { file, range: rg },
            };
            r.content_type = Some(ct);
            r
        }
        range::RangeSpec::Partial(ranges) => {
            let parts = range::Multipart::new(
                &ranges,
                info.size,
                ct.as_str(),
                info.mtime as u64 ^ info.size,
            );
            let mut r = Response::new(206);
            r.content_type = Some(Value::Owned(parts.content_type()));
            r.body = Body::Multipart {
                file,
                parts: Box::new(parts),
            };
            r
        }
    };
    r.headers.push(("Accept-Ranges", Value::Static("bytes")));
    with_validators(r)
}
