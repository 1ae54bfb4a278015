//! `X-Accel-Redirect`: an upstream's reply that names a URI (or `@name`)
//! the request goes on to, as nginx's upstream core does it for every
//! protocol. The reply's Content-Type, Set-Cookie, Content-Disposition,
//! Cache-Control, Expires and Accept-Ranges go onto the final answer.

use crate::core::message::head::Method;
use crate::core::message::response::Value;
use crate::core::request::{Outcome, Request};

/// The reply headers an X-Accel-Redirect carries onto the final answer.
pub const CARRIED: &[&str] = &[
    "content-type",
    "set-cookie",
    "content-disposition",
    "cache-control",
    "expires",
    "accept-ranges",
];

/// Go on to `target` (`/path?args`, percent-encoded, or `@name`) with the
/// `carried` headers. A path with a `.` or `..` segment is refused with 404,
/// as nginx's unsafe-URI check; the method becomes GET (HEAD stays).
pub fn redirect(
    req: &mut Request<'_>,
    target: &str,
    carried: impl Iterator<Item = (&'static str, Value)>,
) -> Outcome {
    if target.starts_with('@') {
        req.state.carried.extend(carried);
        return Outcome::Named(target.as_bytes().to_vec());
    }
    let (path, args) = crate::core::request::split_args(target.as_bytes());
    let Some(uri) = safe_uri(path) else {
        crate::error_log!(
            Error,
            "unsafe URI \"{}\" was detected in X-Accel-Redirect{}",
            target.escape_debug(),
            req.log_context()
        );
        return Outcome::Respond(req.error(404));
    };
    req.state.carried.extend(carried);
    go_to(req, uri, target.contains('?').then_some(args))
}

/// The internal redirect an upstream's reply asks for: to `uri` (already
/// decoded), with `args` when the target had a `?`, as a GET (HEAD stays).
pub fn go_to(req: &mut Request<'_>, uri: Vec<u8>, args: Option<&[u8]>) -> Outcome {
    if let Some(a) = args {
        req.state.args = Some(a.to_vec());
    }
    if req.method() != Method::Head {
        req.state.method = Some(Method::Get);
    }
    Outcome::Redirect(uri)
}

/// The proxied reply `resp_status` came from names an `X-Accel-Redirect`:
/// where the request goes on, with the carried headers.
pub fn from_reply(req: &mut Request<'_>, resp_status: u16) -> Option<Outcome> {
    let vars = super::vars(req)?;
    let (target, carried) = {
        let u = vars.borrow();
        if u.attempts.last().map(|a| a.status) != Some(resp_status) {
            return None;
        }
        let target = u.field("x-accel-redirect")?.trim().to_string();
        let carried: Vec<(&'static str, Value)> = u
            .fields()
            .filter(|(n, _)| CARRIED.iter().any(|c| n.eq_ignore_ascii_case(c)))
            .filter_map(|(n, v)| Some((super::intern_header_name(n)?, Value::Owned(v.to_string()))))
            .collect();
        (target, carried)
    };
    (target.starts_with('/') || target.starts_with('@'))
        .then(|| redirect(req, &target, carried.into_iter()))
}

/// The decoded path, unless it has a `.` or `..` segment or a NUL.
fn safe_uri(path: &[u8]) -> Option<Vec<u8>> {
    if path.first() != Some(&b'/') {
        return None;
    }
    let d: Vec<u8> = percent_encoding::percent_decode(path).collect();
    let unsafe_ = d.contains(&0) || d.split(|&b| b == b'/').any(|s| s == b"." || s == b"..");
    (!unsafe_).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::safe_uri;

    #[test]
    fn unsafe_uris_are_refused() {
        assert_eq!(safe_uri(b"/foo%20bar").as_deref(), Some(&b"/foo bar"[..]));
        assert_eq!(safe_uri(b"/a/b.txt").as_deref(), Some(&b"/a/b.txt"[..]));
        for bad in [
            &b".."[..],
            b"../foo",
            b"/foo/..",
            b"/foo/.%2e",
            b"/./a",
            b"/a%00",
            b"x",
        ] {
            assert_eq!(safe_uri(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
