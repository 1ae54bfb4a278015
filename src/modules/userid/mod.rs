//! The userid filter, as nginx's: an identifier per client in a cookie
//! (`userid`, `userid_name`, `userid_domain`, `userid_path`,
//! `userid_expires`, `userid_p3p`, `userid_mark`, `userid_service`,
//! `userid_flags`), the `$uid_got` and `$uid_set` variables, and
//! `$uid_reset`, which the configuration may set to make a new identifier.
//!
//! An identifier is 16 bytes (four 32-bit words: service, time, start,
//! sequence), sent as base64; `$uid_*` show the words in hex as they lie in
//! memory, so their text is nginx's on the same machine. What a request got
//! and sets is worked out once, when a variable or the filter first asks.

pub mod conf;

use crate::core::clock;
use crate::core::message::response::{Response, Value};
use crate::core::module::{Hooks, Module, Ordered, VarDef};
use crate::core::request::{Peer, Request};
use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use conf::{Enable, Expiry, UseridConf};
use std::cell::Cell;
use std::fmt::Write;
use std::net::SocketAddr;

/// One identifier, as its bytes lie in memory (and in the cookie).
type Uid = [u8; 16];

/// What the userid filter found and decided for one request.
#[derive(Debug, Default)]
struct Ids {
    /// The identifier the client sent, when valid.
    got: Option<Uid>,
    /// The cookie's text as sent, for its mark.
    cookie: Vec<u8>,
    /// The identifier this response sets.
    set: Option<Uid>,
}

/// The identifiers of `req`, worked out on first use.
fn ids(req: &Request<'_>) -> std::rc::Rc<Ids> {
    req.state.ext.get_or_insert_with(|| {
        let conf = req.conf.get::<UseridConf>();
        let mut ids = Ids::default();
        if conf.enable == Enable::Off {
            return ids;
        }
        got(req, conf, &mut ids);
        let reset = match (&conf.reset, &ids.got) {
            (Some(t), Some(uid)) => {
                let mut v = Vec::new();
                t.render(req, &mut v);
                if v == b"log" {
                    crate::error_log!(
                        Notice,
                        "userid cookie \"{}\" was reset{}",
                        text(&conf.name, uid),
                        req.log_context()
                    );
                }
                !v.is_empty() && v != b"0"
            }
            _ => false,
        };
        if conf.enable >= Enable::V1 {
            ids.set = match ids.got {
                Some(_) if reset => Some(new_uid(req, conf)),
                Some(uid) if conf.mark.is_some_and(|m| !marked(&ids.cookie, m)) => Some(uid),
                Some(_) => None,
                None => Some(new_uid(req, conf)),
            };
        }
        ids
    })
}

/// Lenient as nginx's decoder: the last character's unused bits may be set.
const DECODE: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// The identifier in the request's cookie: its first 22 characters.
fn got(req: &Request<'_>, conf: &UseridConf, ids: &mut Ids) {
    let cookie = req
        .head
        .headers()
        .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
        .find_map(|(_, v)| crate::core::vars::find_cookie(v, &conf.name));
    let Some(cookie) = cookie else {
        return;
    };
    ids.cookie = cookie.to_vec();
    let show = || String::from_utf8_lossy(cookie).into_owned();
    if cookie.len() < 22 {
        crate::error_log!(
            Error,
            "client sent too short userid cookie \"{}\"{}",
            show(),
            req.log_context()
        );
        return;
    }
    let mut uid = [0u8; 16];
    match DECODE.decode_slice(&cookie[..22], &mut uid) {
        Ok(16) => ids.got = Some(uid),
        _ => crate::error_log!(
            Error,
            "client sent invalid userid cookie \"{}\"{}",
            show(),
            req.log_context()
        ),
    }
}

/// The cookie carries the mark in place of its padding's first `=`.
fn marked(cookie: &[u8], mark: u8) -> bool {
    cookie.len() > 23 && cookie[22] == mark && cookie[23] == b'='
}

thread_local! {
    /// This worker's start value and sequences (nginx keeps them per worker).
    static WORKER: (u32, Cell<u32>, Cell<u32>) = (start_value(), Cell::new(1), Cell::new(0x0303_0302));
}

/// The worker's start value: the low byte of the time, and a number the
/// other workers do not have.
fn start_value() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let secs = (clock::unix_millis() / 1000) as u32;
    ((secs & 0xff) << 24) | (std::process::id().wrapping_add(n) & 0x00ff_ffff)
}

/// A new identifier: service, time, worker start value, sequence; `on`
/// keeps each word in network byte order, `v1` in the machine's.
fn new_uid(req: &Request<'_>, conf: &UseridConf) -> Uid {
    let now = (clock::unix_millis() / 1000) as u32;
    let (start, seq) = WORKER.with(|(start, v1, v2)| {
        if conf.enable == Enable::V1 {
            let s = v1.get();
            v1.set(s.wrapping_add(0x100));
            (*start, s)
        } else {
            let s = v2.get();
            let next = s.wrapping_add(0x100);
            v2.set(if next < 0x0303_0302 {
                0x0303_0302
            } else {
                next
            });
            (*start, s)
        }
    });
    let mut uid = [0u8; 16];
    let words: [[u8; 4]; 4] = if conf.enable == Enable::V1 {
        let service = conf.service.unwrap_or(0);
        [service, now, start, seq].map(u32::to_ne_bytes)
    } else {
        let service = match conf.service {
            Some(s) => s.to_be_bytes(),
            None => match (req.peer, req.local_addr()) {
                (Peer::Unix, _) | (_, None) => [0; 4],
                (_, Some(SocketAddr::V4(a))) => a.ip().octets(),
                (_, Some(SocketAddr::V6(a))) => {
                    let o = a.ip().octets();
                    [o[12], o[13], o[14], o[15]]
                }
            },
        };
        [
            service,
            now.to_be_bytes(),
            start.to_be_bytes(),
            seq.to_be_bytes(),
        ]
    };
    for (i, w) in words.iter().enumerate() {
        uid[i * 4..i * 4 + 4].copy_from_slice(w);
    }
    uid
}

/// `name=` and the four words in hex, as they lie in memory.
fn text(name: &str, uid: &Uid) -> String {
    let mut s = format!("{name}=");
    for w in uid.chunks(4) {
        let w = u32::from_ne_bytes([w[0], w[1], w[2], w[3]]);
        let _ = write!(s, "{w:08X}");
    }
    s
}

/// `Thu, 31-Dec-37 23:55:55 GMT`: the date form of cookies (two-digit
/// years before 2038).
fn cookie_time(secs: u64) -> String {
    let d = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs));
    // "Thu, 01 Jan 1970 00:00:00 GMT"
    let p: Vec<&str> = d.split(' ').collect();
    let year = match p[3].parse::<u32>() {
        Ok(y) if y <= 2037 => format!("{:02}", y % 100),
        _ => p[3].to_string(),
    };
    format!("{} {}-{}-{} {} GMT", p[0], p[1], p[2], year, p[4])
}

/// The filter: the cookie (and P3P) of a new or re-marked identifier.
fn filter(req: &Request<'_>, resp: &mut Response) {
    if req.is_subrequest() {
        return;
    }
    let conf = req.conf.get::<UseridConf>();
    if conf.enable < Enable::V1 {
        return;
    }
    let ids = ids(req);
    let Some(uid) = &ids.set else {
        return;
    };
    let mut cookie = format!("{}=", conf.name);
    match ids.got {
        Some(got) if got == *uid && !ids.cookie.is_empty() && ids.cookie.len() >= 22 => {
            cookie.push_str(&String::from_utf8_lossy(&ids.cookie[..22]));
            cookie.push(char::from(conf.mark.unwrap_or(b'=')));
            cookie.push('=');
        }
        _ => {
            let mut v = STANDARD.encode(uid);
            if let Some(m) = conf.mark {
                v.replace_range(22..23, &char::from(m).to_string());
            }
            cookie.push_str(&v);
        }
    }
    match conf.expires {
        Expiry::Off => {}
        Expiry::Max => cookie.push_str("; expires=Thu, 31-Dec-37 23:55:55 GMT"),
        Expiry::After(s) => {
            let at = (clock::unix_millis() / 1000).saturating_add_signed(s);
            let _ = write!(cookie, "; expires={}", cookie_time(at));
        }
    }
    if let Some(d) = &conf.domain {
        cookie.push_str(d);
    }
    let _ = write!(cookie, "; path={}", conf.path);
    cookie.push_str(&conf.flags);
    resp.headers.push(("Set-Cookie", Value::Owned(cookie)));
    if let Some(p3p) = &conf.p3p {
        resp.headers.push(("P3P", Value::Shared(p3p.clone())));
    }
}

/// The userid filter: its directives, `$uid_got`, `$uid_set` and
/// `$uid_reset`, and the response filter that sets the cookie.
pub static MODULE: Module = Module {
    name: "userid",
    nginx_default: &["http_userid_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&UseridConf::KIND),
    variables: &[
        VarDef::name("uid_got", |req, _, out| {
            if let Some(uid) = &ids(req).got {
                out.extend_from_slice(text(&req.conf.get::<UseridConf>().name, uid).as_bytes());
            }
        }),
        VarDef::name("uid_set", |req, _, out| {
            if let Some(uid) = &ids(req).set {
                out.extend_from_slice(text(&req.conf.get::<UseridConf>().name, uid).as_bytes());
            }
        }),
        VarDef::changeable("uid_reset", |_, _, out| out.push(b'0')),
    ],
    hooks: Hooks {
        filter: Some(Ordered {
            order: 15,
            run: filter,
            active: |c| c.get::<UseridConf>().enable >= Enable::V1,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_dates() {
        assert_eq!(cookie_time(0), "Thu, 01-Jan-70 00:00:00 GMT");
        assert_eq!(cookie_time(2_145_916_555), "Thu, 31-Dec-37 23:55:55 GMT");
        assert_eq!(cookie_time(2_208_988_800), "Sun, 01-Jan-2040 00:00:00 GMT");
    }

    #[test]
    fn identifiers_as_text_and_marks() {
        let uid: Uid = [0x7f, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4];
        let want_first = format!("{:08X}", u32::from_ne_bytes([0x7f, 0, 0, 1]));
        assert!(text("uid", &uid).starts_with(&format!("uid={want_first}")));
        assert_eq!(text("uid", &uid).len(), 4 + 32);
        let cookie = STANDARD.encode(uid);
        assert_eq!(cookie.len(), 24);
        assert!(cookie.ends_with("=="));
        let mut back = [0u8; 16];
        assert_eq!(DECODE.decode_slice(&cookie[..22], &mut back).unwrap(), 16);
        assert_eq!(back, uid);
        assert!(marked(b"AAAAAAAAAAAAAAAAAAAAAAt=", b't'));
        assert!(!marked(b"AAAAAAAAAAAAAAAAAAAAAA==", b't'));
    }
}
