//! From a CGI-style head (FastCGI or CGI) to a response: status, headers
//! hidden or passed, internal redirects (`X-Accel-Redirect`, a local
//! `Location`), intercepted errors; and the body helpers both handlers share.

use super::cgi_head::CgiHead;
use crate::core::message::response::{Body, CutShort, Response, Value, reason};
use crate::core::request::{Outcome, Request};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::io;

/// How a handler treats the application's head.
pub struct Opts<'a> {
    /// `*_hide_header` names (lowercase).
    pub hide: &'a [Box<str>],
    /// `*_pass_header` names (lowercase).
    pub pass: &'a [Box<str>],
    pub intercept_errors: bool,
    pub buffering: bool,
}

/// Headers never passed unless `*_pass_header` names them.
const HIDDEN: &[&str] = &[
    "status",
    "x-accel-redirect",
    "x-accel-buffering",
    "x-accel-charset",
    "x-accel-expires",
    "x-accel-limit-rate",
];

pub enum Head {
    /// Answered or redirected already.
    Done(Outcome),
    Reply(Reply),
}

pub struct Reply {
    pub resp: Response,
    /// Read ahead before answering (the setting, or `X-Accel-Buffering`).
    pub buffering: bool,
    /// The application's Content-Length.
    pub declared_len: Option<u64>,
}

/// An internal redirect to a local `Location` (`/path?args`).
fn redirect(req: &mut Request<'_>, target: &str) -> Option<Outcome> {
    let (path, args) = crate::core::request::split_args(target.as_bytes());
    let mut uri = Vec::new();
    if crate::modules::static_files::uri::normalize(path, &mut uri).is_err() {
        crate::error_log!(
            Error,
            "invalid internal redirect \"{}\" from upstream",
            target.escape_debug()
        );
        return None;
    }
    let args = target.contains('?').then_some(args);
    Some(crate::upstream::accel::go_to(req, uri, args))
}

pub fn head(req: &mut Request<'_>, cgi: CgiHead, opts: &Opts<'_>) -> Head {
    let accel = cgi
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("x-accel-redirect"))
        .map(|(_, v)| v.clone());
    if let Some(to) = accel.filter(|t| t.starts_with('/') || t.starts_with('@')) {
        let mut carried: Vec<(&'static str, Value)> = Vec::new();
        if let Some(ct) = &cgi.content_type {
            carried.push(("Content-Type", Value::Owned(ct.clone())));
        }
        for (n, v) in &cgi.headers {
            let lower = n.to_ascii_lowercase();
            if crate::upstream::accel::CARRIED.contains(&lower.as_str())
                && let Some(name) = intern(n)
            {
                carried.push((name, Value::Owned(v.clone())));
            }
        }
        return Head::Done(crate::upstream::accel::redirect(
            req,
            &to,
            carried.into_iter(),
        ));
    }
    if cgi.is_local_redirect() {
        let to = cgi.location.clone().unwrap_or_default();
        return Head::Done(redirect(req, &to).unwrap_or_else(|| Outcome::Respond(req.error(502))));
    }
    let status = cgi.status();
    if opts.intercept_errors
        && status >= 300
        && req
            .conf
            .core
            .error_pages
            .as_deref()
            .is_some_and(|p| p.find(status).is_some())
    {
        return Head::Done(Outcome::Respond(req.error(status)));
    }
    let mut buffering = opts.buffering;
    let mut resp = Response::new(status);
    // The application's reason phrase, when it is not the usual one.
    if let Some(r) = cgi
        .reason
        .filter(|r| cgi.status != 0 && *r != reason(status))
    {
        resp.own.get_or_insert_default().reason = Some((status, r.into()));
    }
    resp.content_type = cgi.content_type.map(Value::Owned);
    if let Some(l) = cgi.location {
        resp.headers.push(("Location", Value::Owned(l)));
    }
    for (name, value) in cgi.headers {
        let lower = name.to_ascii_lowercase();
        if lower == "x-accel-buffering" {
            buffering = crate::upstream::buffering(buffering, Some(&value));
        }
        if lower == "x-accel-charset" {
            // For the charset filter, passed on or not.
            resp.set_override_charset(Some(value.trim().into()));
        }
        let hidden = (HIDDEN.contains(&lower.as_str()) || opts.hide.iter().any(|h| **h == *lower))
            && !opts.pass.iter().any(|p| **p == *lower);
        if hidden {
            continue;
        }
        // The application's Server and Date stand in for the server's own.
        if lower == "server" || lower == "date" {
            let own = resp.own.get_or_insert_default();
            let slot = if lower == "date" {
                &mut own.date
            } else {
                &mut own.server
            };
            *slot = Some(Value::Owned(value));
            continue;
        }
        match intern(&name) {
            Some(n) => resp.headers.push((n, Value::Owned(value))),
            None => crate::error_log!(
                Warn,
                "too many distinct header names from upstreams, \"{}\" dropped",
                name.escape_debug()
            ),
        }
    }
    Head::Reply(Reply {
        resp,
        buffering,
        declared_len: cgi.content_length,
    })
}

/// A body read whole: one piece without copying, several joined.
pub fn whole(mut pieces: VecDeque<Bytes>, declared: Option<u64>) -> Body {
    let total: usize = pieces.iter().map(|p| p.len()).sum();
    let keep = declared.map_or(total, |d| (d as usize).min(total));
    let b = match pieces.len() {
        0 => return Body::Empty,
        1 => pieces.pop_front().unwrap_or_default(),
        _ => {
            let mut all = BytesMut::with_capacity(total);
            for p in pieces {
                all.extend_from_slice(&p);
            }
            all.freeze()
        }
    };
    Body::Bytes(b.slice(..keep))
}

/// Hold a streamed body to the declared length: extra bytes are dropped, a
/// short body is an error (the connection is then closed).
pub fn limit(left: &mut Option<u64>, piece: Option<Bytes>) -> io::Result<Option<Bytes>> {
    let Some(left) = left else {
        return Ok(piece);
    };
    match piece {
        None if *left > 0 => Err(CutShort::wrap(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "upstream sent less than its Content-Length",
        ))),
        None => Ok(None),
        Some(_) if *left == 0 => Ok(None),
        Some(mut p) => {
            if p.len() as u64 > *left {
                p.truncate(*left as usize);
            }
            *left -= p.len() as u64;
            Ok(Some(p))
        }
    }
}

/// Response header names are `&'static str`: common ones are constants, others
/// are interned once per worker, up to a bound so that an application sending
/// ever new names cannot grow memory without end.
fn intern(name: &str) -> Option<&'static str> {
    const KNOWN: &[&str] = &[
        "Set-Cookie",
        "X-Powered-By",
        "Cache-Control",
        "Expires",
        "Pragma",
        "Last-Modified",
        "ETag",
        "Vary",
        "Content-Encoding",
        "Content-Language",
        "Content-Disposition",
        "Content-Range",
        "Accept-Ranges",
        "Access-Control-Allow-Origin",
        "X-Frame-Options",
        "X-Content-Type-Options",
        "Strict-Transport-Security",
        "Content-Security-Policy",
        "Referrer-Policy",
        "WWW-Authenticate",
        "Retry-After",
        "Link",
        "Allow",
        "Refresh",
    ];
    if let Some(k) = KNOWN.iter().find(|k| k.eq_ignore_ascii_case(name)) {
        return Some(k);
    }
    const MAX: usize = 512;
    thread_local! {
        static NAMES: std::cell::RefCell<std::collections::HashSet<&'static str>> =
            std::cell::RefCell::new(std::collections::HashSet::new());
    }
    NAMES.with(|set| {
        let mut set = set.borrow_mut();
        if let Some(n) = set.get(name) {
            return Some(*n);
        }
        if set.len() >= MAX {
            return None;
        }
        let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
        set.insert(n);
        Some(n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_trims_and_detects_short() {
        let mut left = Some(3);
        assert_eq!(
            limit(&mut left, Some(Bytes::from_static(b"abcd"))).unwrap(),
            Some(Bytes::from_static(b"abc"))
        );
        assert_eq!(
            limit(&mut left, Some(Bytes::from_static(b"x"))).unwrap(),
            None
        );
        assert_eq!(limit(&mut left, None).unwrap(), None);
        let mut left = Some(5);
        assert!(limit(&mut left, Some(Bytes::from_static(b"ab"))).is_ok());
        assert!(limit(&mut left, None).is_err());
        let mut none = None;
        assert!(limit(&mut none, None).unwrap().is_none());
    }

    #[test]
    fn whole_joins_and_trims() {
        let q: VecDeque<Bytes> = [Bytes::from_static(b"ab"), Bytes::from_static(b"cd")].into();
        let Body::Bytes(b) = whole(q, Some(3)) else {
            panic!()
        };
        assert_eq!(&b[..], b"abc");
        assert!(matches!(whole(VecDeque::new(), None), Body::Empty));
    }

    #[test]
    fn interning_is_stable() {
        assert_eq!(intern("set-cookie"), Some("Set-Cookie"));
        let a = intern("X-Custom-One").unwrap();
        let b = intern("X-Custom-One").unwrap();
        assert!(std::ptr::eq(a, b));
    }
}
