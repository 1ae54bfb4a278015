//! Secure links (nginx's ngx_http_secure_link_module): `$secure_link` says
//! whether a request's link carries the right MD5 hash, and
//! `$secure_link_expires` the expiry time it gave; the configuration acts
//! on them (`if ($secure_link = "") { return 403; }`).
//!
//! New style (`secure_link`, `secure_link_md5`): the `secure_link` value is
//! `HASH[,EXPIRES]`, HASH the base64url MD5 of the `secure_link_md5` text;
//! `$secure_link` is `1` when it matches, `0` when it matches but EXPIRES has
//! passed, empty otherwise. Old style (`secure_link_secret`): the URI is
//! `/prefix/HEX/link`, HEX the MD5 of `link` and the secret in hex;
//! `$secure_link` is `link` when it matches.

pub mod conf;

use crate::core::module::{Module, VarDef};
use crate::core::request::Request;
use conf::SecureLinkConf;
use md5::{Digest, Md5};

/// The expiry time a request's `secure_link` value gave
/// (`$secure_link_expires`), kept once `$secure_link` is evaluated.
struct Expires(Vec<u8>);

fn var_secure_link(req: &Request<'_>, _: &str, out: &mut Vec<u8>) {
    let conf = req.conf.get::<SecureLinkConf>();
    if let Some(secret) = &conf.secret {
        if let Some(link) = old_style(req.request_uri(), secret) {
            out.extend_from_slice(link);
        }
        return;
    }
    let (Some(variable), Some(md5)) = (&conf.variable, &conf.md5) else {
        return;
    };
    let mut val = Vec::new();
    variable.render(req, &mut val);
    crate::error_log!(Debug, "secure link: \"{}\"", String::from_utf8_lossy(&val));
    let (hash, expires) = match memchr::memchr(b',', &val) {
        Some(i) => {
            let e = &val[i + 1..];
            let Some(t) = parse_time(e).filter(|&t| t > 0) else {
                return;
            };
            req.state.ext.insert(std::rc::Rc::new(Expires(e.to_vec())));
            (&val[..i], t)
        }
        None => (&val[..], 0),
    };
    if hash.len() > 24 {
        return;
    }
    let Some(hash) = decode_base64url(hash).filter(|h| h.len() == 16) else {
        return;
    };
    let mut text = Vec::new();
    md5.render(req, &mut text);
    crate::error_log!(
        Debug,
        "secure link md5: \"{}\"",
        String::from_utf8_lossy(&text)
    );
    if Md5::digest(&text)[..] != hash[..] {
        return;
    }
    let expired = expires != 0 && expires < crate::core::clock::unix_millis() / 1000;
    out.push(if expired { b'0' } else { b'1' });
}

fn var_secure_link_expires(req: &Request<'_>, _: &str, out: &mut Vec<u8>) {
    if let Some(e) = req.state.ext.get::<Expires>() {
        out.extend_from_slice(&e.0);
    }
}

/// nginx's `ngx_atotm`: decimal digits only, at least one, within a
/// time's range.
fn parse_time(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
        if n > i64::MAX as u64 {
            return None;
        }
    }
    Some(n)
}

/// nginx's `ngx_decode_base64url`: the URL-safe alphabet, stopping at the
/// first `=`; a length of 1 modulo 4 is an error, trailing bits are
/// ignored.
fn decode_base64url(s: &[u8]) -> Option<Vec<u8>> {
    fn value(b: u8) -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u32)
    }
    let end = memchr::memchr(b'=', s).unwrap_or(s.len());
    let s = &s[..end];
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for group in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &b) in group.iter().enumerate() {
            acc |= value(b)? << (18 - 6 * i);
        }
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        out.extend_from_slice(&bytes[..group.len() - 1]);
    }
    Some(out)
}

/// The old style: in `/prefix/HEX/link` (the URI as sent), the link when
/// HEX is the MD5 of the link followed by the secret.
fn old_style<'u>(uri: &'u [u8], secret: &[u8]) -> Option<&'u [u8]> {
    let rest = uri.get(1..)?;
    let start = memchr::memchr(b'/', rest)? + 1;
    let rest = &rest[start..];
    let end = memchr::memchr(b'/', rest)?;
    let (hex, link) = (&rest[..end], &rest[end + 1..]);
    if hex.len() != 32 || link.is_empty() {
        return None;
    }
    let mut h = Md5::new();
    h.update(link);
    h.update(secret);
    let digest = h.finalize();
    for (i, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        if u8::from_str_radix(s, 16).ok()? != digest[i] || s.starts_with('+') {
            return None;
        }
    }
    Some(link)
}

pub static MODULE: Module = Module {
    name: "secure_link",
    nginx: &["http_secure_link_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&SecureLinkConf::KIND),
    variables: &[
        VarDef::name("secure_link", var_secure_link),
        VarDef::name("secure_link_expires", var_secure_link_expires),
    ],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_as_nginx() {
        // MD5("secret/test.html"), with and without padding.
        let h = decode_base64url(b"q-5vpkjBkRXXtkUMXiJVHA==").unwrap();
        assert_eq!(h.len(), 16);
        assert_eq!(decode_base64url(b"q-5vpkjBkRXXtkUMXiJVHA").unwrap(), h);
        assert_eq!(h[..], Md5::digest(b"secret/test.html")[..]);
        // Anything after the first `=` is ignored.
        assert_eq!(decode_base64url(b"q-5vpkjBkRXXtkUMXiJVHA=x!").unwrap(), h);
        assert_eq!(
            decode_base64url(b"q-5vpkjBkRXXtkUMXiJVHAQQ").unwrap().len(),
            18
        );
        // The standard alphabet's `+` and `/` are not base64url.
        assert!(decode_base64url(b"q+5v").is_none());
        assert!(decode_base64url(b"abcde").is_none());
    }

    #[test]
    fn expiry_times() {
        assert_eq!(parse_time(b"12345678"), Some(12345678));
        assert_eq!(parse_time(b"0"), Some(0));
        assert_eq!(parse_time(b""), None);
        assert_eq!(parse_time(b"12a"), None);
        assert_eq!(parse_time(b"-5"), None);
        assert_eq!(parse_time(b"99999999999999999999"), None);
    }

    #[test]
    fn old_style_links() {
        let hex: String = Md5::digest(b"test.htmlsecret")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let uri = format!("/p/{hex}/test.html");
        assert_eq!(
            old_style(uri.as_bytes(), b"secret"),
            Some(&b"test.html"[..])
        );
        assert_eq!(old_style(uri.to_uppercase().as_bytes(), b"secret"), None);
        assert_eq!(old_style(uri.as_bytes(), b"other"), None);
        assert_eq!(old_style(b"/p/foo/test.html", b"secret"), None);
        assert_eq!(old_style(b"/p%2f", b"secret"), None);
        let empty = format!("/p/{hex}/");
        assert_eq!(old_style(empty.as_bytes(), b"secret"), None);
    }
}
