//! Where a URI is on disk: root (or alias) + URI, never above the root.

use crate::core::request::Request;
use percent_encoding::{AsciiSet, CONTROLS, PercentEncode, percent_encode};

/// What nginx escapes when a decoded URI goes back into a URI (a Location,
/// the URI sent upstream): controls, space, `"#%<>?\^`{|}` and bytes over
/// 0x7e.
pub const URI_ESCAPE: &AsciiSet = &CONTROLS
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

/// `uri` escaped as nginx escapes a URI it sends (see [`URI_ESCAPE`]).
pub fn escape_uri(uri: &[u8]) -> PercentEncode<'_> {
    percent_encode(uri, URI_ESCAPE)
}

/// The file `uri` maps to (`$request_filename`), as nginx builds it: root +
/// URI; in a prefix location with `alias`, the alias in place of the
/// location's prefix; in a regex location with `alias`, the alias rendered
/// with the captures, alone (or + URI after try_files matched there).
///
/// `Err(404)` when the URI would climb out of the root or alias: with
/// `location /a` and `alias /srv/x/;` the URI `/a../secret` would map to
/// `/srv/x/../secret` (nginx serves that; we refuse it), and a rewritten
/// URI's `.`/`..` segments are resolved without leaving the root.
/// `Err(500)` when a rewrite took the URI out of an alias location's
/// prefix, as nginx.
pub fn map_uri(req: &Request<'_>, uri: &[u8], out: &mut Vec<u8>) -> Result<(), u16> {
    out.clear();
    let Some(l) = req.location.filter(|l| l.alias.is_some()) else {
        return if req.root(out) && uri.first() == Some(&b'/') && push_clean(out, uri) {
            Ok(())
        } else {
            Err(404)
        };
    };
    req.document_root(out);
    let Some(prefix) = l.alias_base() else {
        if l.phases.alias_vars.is_some() && has_dot_segment(out) {
            return Err(404);
        }
        if req.state.add_uri_to_alias && !push_clean(out, uri) {
            return Err(404);
        }
        return Ok(());
    };
    let Some(rest) = uri.strip_prefix(prefix.as_bytes()) else {
        crate::error_log!(
            Error,
            "\"alias\" cannot be used in location \"{}\" where URI was rewritten",
            prefix
        );
        return Err(500);
    };
    if push_clean(out, rest) {
        Ok(())
    } else {
        Err(404)
    }
}

/// Does `p` have a `.` or `..` segment?
fn has_dot_segment(p: &[u8]) -> bool {
    // Every dot segment starts with a `.` at the start or after a `/`.
    let starts_segment = |i: usize| i == 0 || p[i - 1] == b'/';
    if !memchr::memchr_iter(b'.', p).any(starts_segment) {
        return false;
    }
    p.split(|&b| b == b'/').any(|s| s == b"." || s == b"..")
}

/// Append `part` to `path`, resolving its `.` and `..` segments; false when
/// `..` would climb above the start of `part`.
pub fn push_clean(path: &mut Vec<u8>, part: &[u8]) -> bool {
    if !has_dot_segment(part) {
        path.extend_from_slice(part);
        return true;
    }
    let mut segs = part.split(|&b| b == b'/');
    let lead = segs.next().unwrap_or_default();
    if lead == b"." || lead == b".." {
        return false;
    }
    let mut stack: Vec<&[u8]> = Vec::new();
    let mut segs = segs.peekable();
    while let Some(s) = segs.next() {
        let last = segs.peek().is_none();
        match s {
            b"." => {}
            b".." => {
                if stack.pop().is_none() {
                    return false;
                }
            }
            s => {
                stack.push(s);
                continue;
            }
        }
        if last {
            stack.push(b"");
        }
    }
    path.extend_from_slice(lead);
    for s in stack {
        path.push(b'/');
        path.extend_from_slice(s);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_segments_are_found_only_at_a_segment_start() {
        for p in [
            &b"."[..],
            b"..",
            b"./a",
            b"a/./b",
            b"a/..",
            b"/a/../b",
            b"/.",
        ] {
            assert!(has_dot_segment(p), "{}", String::from_utf8_lossy(p));
        }
        for p in [&b""[..], b"a.b", b"/a.b/c.d", b"/a/.b", b"/a/b.", b"/a/..b"] {
            assert!(!has_dot_segment(p), "{}", String::from_utf8_lossy(p));
        }
    }

    #[test]
    fn push_clean_resolves_and_refuses_climbing() {
        let mut out = b"/root".to_vec();
        assert!(push_clean(&mut out, b"/a/./b/../c.txt"));
        assert_eq!(out, b"/root/a/c.txt");
        let mut out = b"/root".to_vec();
        assert!(!push_clean(&mut out, b"/../etc"));
    }
}
