//! What becomes of header fields between a client and an upstream, for the
//! handlers that speak HTTP to it (`proxy_pass`, `grpc_pass`): which request
//! fields never go as they came, how a reply's fields are passed, the URI
//! sent when the handler adds none of its own, and `*_intercept_errors`.

use crate::core::message::response::{OwnFields, Response, Value};
use crate::core::request::Request;
use std::borrow::Cow;

/// What becomes of a header of the upstream's reply.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Passed {
    /// Passed on as it is (unless proxy_hide_header names it).
    As,
    /// Content-Length: the client connection sets its own.
    Not,
    /// Date (`true`), Server: the server's own, unless proxy_pass_header
    /// names it.
    Own(bool),
    /// X-Pad, X-Accel-*: hidden unless proxy_pass_header names it.
    Accel,
    ContentType,
    /// Rewritten by proxy_redirect.
    Location,
    Refresh,
    /// Rewritten by proxy_cookie_domain / proxy_cookie_path.
    SetCookie,
}

/// Classify a reply header name, comparing each candidate of its length only.
pub fn passed_header(name: &str) -> Passed {
    let is = |n: &str| name.eq_ignore_ascii_case(n);
    match name.len() {
        4 if is("date") => Passed::Own(true),
        5 if is("x-pad") => Passed::Accel,
        6 if is("server") => Passed::Own(false),
        7 if is("refresh") => Passed::Refresh,
        8 if is("location") => Passed::Location,
        10 if is("set-cookie") => Passed::SetCookie,
        12 if is("content-type") => Passed::ContentType,
        14 if is("content-length") => Passed::Not,
        15..=18
            if [
                "x-accel-expires",
                "x-accel-redirect",
                "x-accel-limit-rate",
                "x-accel-buffering",
                "x-accel-charset",
            ]
            .iter()
            .any(|n| is(n)) =>
        {
            Passed::Accel
        }
        _ => Passed::As,
    }
}

/// Request headers never forwarded as they came: hop-by-hop ones (RFC 9110
/// §7.6.1) and those vireo sets itself. Compares each candidate of the
/// name's length only.
pub fn is_hop_or_framing(n: &[u8]) -> bool {
    let is = |h: &str| n.eq_ignore_ascii_case(h.as_bytes());
    match n.len() {
        2 => is("te"),
        4 => is("host"),
        6 => is("expect"),
        7 => is("trailer") || is("upgrade"),
        10 => is("connection") || is("keep-alive"),
        14 => is("content-length"),
        16 => is("proxy-connection"),
        17 => is("transfer-encoding"),
        _ => false,
    }
}

/// `*_pass_header Server` / `Date` (`passes`): the upstream's field goes in
/// place of the server's own, and none at all when it sent none (slots
/// [`keep_own`] fills).
pub fn own_fields(passes: impl Fn(&str) -> bool) -> Option<Box<OwnFields>> {
    let (server, date) = (passes("server"), passes("date"));
    let empty = || Some(Value::Static(""));
    (server || date).then(|| {
        Box::new(OwnFields {
            server: server.then(empty).flatten(),
            date: date.then(empty).flatten(),
            ..OwnFields::default()
        })
    })
}

/// A reply's Date or Server field (`kind` `Own`): its value kept when
/// [`own_fields`] made its slot. True for such a field, which never passes
/// as a plain one.
pub fn keep_own(resp: &mut Response, kind: Passed, value: impl FnOnce() -> Value) -> bool {
    let Passed::Own(is_date) = kind else {
        return false;
    };
    if let Some(own) = resp.own.as_deref_mut() {
        let slot = if is_date {
            &mut own.date
        } else {
            &mut own.server
        };
        if slot.is_some() {
            *slot = Some(value());
        }
    }
    true
}

/// Percent-encode what may not stand in a request path, as nginx.
pub fn escape(uri: &[u8], out: &mut Vec<u8>) {
    for piece in crate::core::path::escape_uri(uri) {
        out.extend_from_slice(piece.as_bytes());
    }
}

/// The URI (path and arguments) sent upstream when the handler's address
/// has no URI part: the client's as it came when vireo did not change it,
/// else the current URI, escaped, with the current arguments (a rewrite,
/// an internal redirect, `set $args`).
pub fn request_target<'r>(req: &'r Request<'_>) -> Cow<'r, [u8]> {
    let mut normalized = Vec::new();
    let unchanged = !req.state.internal
        && req.state.redirects == 0
        && req.state.args.is_none()
        && crate::modules::static_files::uri::normalize(req.head.path(), &mut normalized).is_ok()
        && normalized == req.uri;
    if unchanged {
        return Cow::Borrowed(req.request_uri());
    }
    let mut out = Vec::with_capacity(req.uri.len() + 16);
    escape(&req.uri, &mut out);
    with_args(req, &mut out);
    Cow::Owned(out)
}

/// `?` and the request's current arguments after `out`, when it has some.
pub fn with_args(req: &Request<'_>, out: &mut Vec<u8>) {
    if let Some(a) = req.args() {
        out.push(b'?');
        out.extend_from_slice(a);
    }
}

/// `*_intercept_errors` (`on`): the error vireo answers in place of an
/// upstream status of 300 or more that has an error_page; an intercepted
/// 401 keeps the upstream's challenges, as nginx.
pub fn intercepted(req: &Request<'_>, on: bool, resp: &Response) -> Option<Response> {
    let status = resp.status;
    let paged = req
        .conf
        .core
        .error_pages
        .as_deref()
        .is_some_and(|p| p.find(status).is_some());
    if !on || status < 300 || !paged {
        return None;
    }
    let mut e = req.error(status);
    if status == 401 {
        e.headers.extend(
            resp.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("www-authenticate"))
                .cloned(),
        );
    }
    Some(e)
}
