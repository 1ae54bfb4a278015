//! The headers filter: `expires` (Expires and Cache-Control) and `add_header`,
//! applied to every response a request produces.

pub mod conf;

use crate::core::message::response::{PassedTrailers, Response, Value};
use crate::core::module::{Hooks, Module, Ordered, VarDef};
use crate::core::request::{Finished, Request};
use conf::HeadersConf;
use conf::{AddHeader, Expires, Placement};
use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Statuses `expires` and `add_header` (without `always`) apply to.
pub fn applies(status: u16) -> bool {
    matches!(
        status,
        200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308
    )
}

/// The value this location's `add_header Last-Modified` or `add_header
/// ETag` (`name`, lowercase) gives a 200 response, when it has one (empty:
/// the field is removed). nginx's not-modified and range filters run after
/// add_header and compare `If-Range` with it.
pub fn replaced(req: &Request<'_>, name: &str) -> Option<Vec<u8>> {
    let hc = req.conf.get::<HeadersConf>();
    let h = hc
        .add_header
        .iter()
        .rev()
        .find(|h| h.placement == Placement::Replace && h.name.eq_ignore_ascii_case(name))?;
    let mut v = Vec::new();
    h.value.render(req, &mut v);
    Some(v)
}

/// The response filter: `expires` first, then each `add_header` in order;
/// with `add_trailer`, the response is to carry trailers.
pub fn filter(req: &Request<'_>, resp: &mut Response) {
    // What goes to the client is the main request's business.
    if req.is_subrequest() {
        return;
    }
    let hc = req.conf.get::<HeadersConf>();
    if !hc.add_trailer.is_empty() {
        resp.trailers = Some(trailers);
    }
    if hc.add_header.is_empty() && hc.expires == Expires::Off {
        return;
    }
    let ok = applies(resp.status);
    if ok
        && hc.expires != Expires::Off
        && let Some(e) = expires_now(req, hc)
    {
        set_expires(e, resp, now_secs());
    }
    for h in hc.add_header.iter() {
        if ok || h.always {
            add_header(req, h, resp);
        }
    }
}

/// What `expires` says for this request: a value with variables is read
/// now, and one that does not parse sets nothing (as nginx).
fn expires_now(req: &Request<'_>, hc: &HeadersConf) -> Option<Expires> {
    let Expires::Var { modified } = hc.expires else {
        return Some(hc.expires);
    };
    let mut v = Vec::new();
    hc.expires_value.as_ref()?.render(req, &mut v);
    conf::parse_expires_value(modified, std::str::from_utf8(&v).ok()?).ok()
}

/// The trailers made so far for the request (`$sent_trailer_NAME`).
#[derive(Default)]
struct SentTrailers(RefCell<Vec<(&'static str, String)>>);

/// The `add_trailer` fields for a response whose body is sent: those that
/// apply to its status and come out non-empty, in order.
fn trailers(req: &Request<'_>, resp: &Response) -> Vec<(&'static str, String)> {
    let hc = req.conf.get::<HeadersConf>();
    let ok = applies(resp.status);
    let sent = req.state.ext.get_or_insert_with(SentTrailers::default);
    // An upstream's own trailers (gRPC's) go first.
    if let Some(passed) = req.state.ext.get::<PassedTrailers>() {
        sent.0.borrow_mut().extend(passed.0.take());
    }
    for h in hc.add_trailer.iter().filter(|h| ok || h.always) {
        let value = match &h.literal {
            Some(l) => l.to_string(),
            None => match rendered(req, resp, h, "add_trailer") {
                Some(out) => String::from_utf8_lossy(&out).into_owned(),
                None => continue,
            },
        };
        if !value.is_empty() {
            sent.0.borrow_mut().push((h.name, value));
        }
    }
    sent.0.borrow().clone()
}

/// `$sent_trailer_NAME`: the trailer fields of that name made before this
/// one, joined by ", ".
fn sent_trailer(req: &Request<'_>, name: &str, out: &mut Vec<u8>) {
    let Some(sent) = req.state.ext.get::<SentTrailers>() else {
        return;
    };
    let sent = sent.0.borrow();
    let same = |n: &str| {
        n.len() == name.len()
            && n.bytes()
                .zip(name.bytes())
                .all(|(a, b)| a.eq_ignore_ascii_case(&b) || (a == b'-' && b == b'_'))
    };
    // Several fields of the name: their values joined, as nginx.
    for (i, (_, v)) in sent.iter().filter(|(n, _)| same(n)).enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(v.as_bytes());
    }
}

/// The value of an `add_header`/`add_trailer` with variables, rendered for
/// the response; `None` (logged) when a variable brought a line break or NUL
/// into it (response splitting): more than the configuration wrote.
fn rendered(req: &Request<'_>, resp: &Response, h: &AddHeader, directive: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let src = Finished::unsent(req, resp);
    h.value.render(&src, &mut out);
    // On HTTP/1 a line end followed by a tab or space continues the value
    // (obs-fold, as nginx's `$ssl_client_cert` makes it): no new header.
    let fold_ok = !req.head.version.multiplexed();
    let breaks = out
        .iter()
        .enumerate()
        .filter(|&(i, &b)| {
            matches!(b, b'\r' | b'\n')
                && !(fold_ok && b == b'\n' && matches!(out.get(i + 1), Some(b'\t' | b' ')))
        })
        .count();
    if breaks > h.line_breaks || out.contains(&0) {
        crate::error_log!(
            Warn,
            "\"{directive} {}\" value holds a line break or NUL, not sent",
            h.name
        );
        return None;
    }
    Some(out)
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn add_header(req: &Request<'_>, h: &AddHeader, resp: &mut Response) {
    let value = match &h.literal {
        Some(l) => Value::Shared(l.clone()),
        None => {
            let Some(out) = rendered(req, resp, h, "add_header") else {
                return;
            };
            Value::Owned(match String::from_utf8(out) {
                Ok(s) => s,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            })
        }
    };
    let empty = value.as_str().is_empty();
    if h.placement == Placement::Replace {
        resp.headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case(h.name));
    }
    if !empty {
        resp.headers.push((h.name, value));
    }
}

/// Latest time an HTTP date can show (9999-12-31 23:59:59).
const LAST_DATE: i64 = 253_402_300_799;

fn http_date(secs: i64) -> String {
    let secs = secs.clamp(0, LAST_DATE) as u64;
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Set Expires and Cache-Control on `resp` as `e` says, `now` being the
/// current time (seconds since the epoch). Fields of those names the response
/// already has are replaced.
pub fn set_expires(e: Expires, resp: &mut Response, now: i64) {
    let (expires, cc): (Value, Value) = match e {
        Expires::Off | Expires::Var { .. } => return,
        Expires::Epoch => (
            Value::Static("Thu, 01 Jan 1970 00:00:01 GMT"),
            Value::Static("no-cache"),
        ),
        Expires::Max => (
            Value::Static("Thu, 31 Dec 2037 23:55:55 GMT"),
            Value::Static("max-age=315360000"),
        ),
        Expires::Access(0) | Expires::Modified(0) => {
            (Value::Owned(http_date(now)), Value::Static("max-age=0"))
        }
        Expires::Access(t) | Expires::Modified(t) => {
            let modified = match e {
                Expires::Modified(_) => last_modified(resp),
                _ => None,
            };
            let (at, max_age) = match modified {
                Some(m) => (m.saturating_add(t), m.saturating_add(t) - now),
                None => (now.saturating_add(t), t),
            };
            let cc = if t < 0 || max_age < 0 {
                Value::Static("no-cache")
            } else {
                Value::Owned(format!("max-age={max_age}"))
            };
            (Value::Owned(http_date(at)), cc)
        }
        Expires::Daily(tod) => {
            let at = next_daily(now, tod);
            (
                Value::Owned(http_date(at)),
                Value::Owned(format!("max-age={}", at - now)),
            )
        }
    };
    resp.headers.retain(|(n, _)| {
        !n.eq_ignore_ascii_case("expires") && !n.eq_ignore_ascii_case("cache-control")
    });
    resp.headers.push(("Expires", expires));
    resp.headers.push(("Cache-Control", cc));
}

/// The response's Last-Modified, in seconds since the epoch.
fn last_modified(resp: &Response) -> Option<i64> {
    let (_, v) = resp
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("last-modified"))?;
    let t = httpdate::parse_http_date(v.as_str()).ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64)
}

/// The first moment after `now` whose local time of day is `tod` seconds
/// after midnight (today's, else tomorrow's).
fn next_daily(now: i64, tod: u32) -> i64 {
    use chrono::{Days, Local, NaiveTime, TimeZone};
    let Some(today) = Local.timestamp_opt(now, 0).single() else {
        return now + 86_400;
    };
    let time = NaiveTime::from_num_seconds_from_midnight_opt(tod, 0).unwrap_or_default();
    let mut date = today.date_naive();
    for _ in 0..3 {
        if let Some(t) = Local.from_local_datetime(&date.and_time(time)).earliest()
            && t.timestamp() > now
        {
            return t.timestamp();
        }
        date = match date.checked_add_days(Days::new(1)) {
            Some(d) => d,
            None => break,
        };
    }
    now + 86_400
}

/// `add_header` and `expires`.
pub static MODULE: Module = Module {
    name: "headers",
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::HeadersConf::KIND),
    hooks: Hooks {
        filter: Some(Ordered {
            order: 10,
            run: filter,
            active: |c| {
                let h = c.get::<HeadersConf>();
                !h.add_header.is_empty() || !h.add_trailer.is_empty() || h.expires != Expires::Off
            },
        }),
        ..Hooks::NONE
    },
    variables: &[VarDef::prefix("sent_trailer_", sent_trailer)],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(r: &'a Response, name: &str) -> Vec<&'a str> {
        r.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    const NOW: i64 = 1_795_304_400; // Sat, 21 Nov 2026 23:40:00 GMT

    #[test]
    fn expires_values() {
        let run = |e| {
            let mut r = Response::new(200);
            r.headers.push(("Cache-Control", Value::Static("private")));
            r.headers.push(("Cache-Control", Value::Static("x")));
            r.headers.push((
                "Last-Modified",
                Value::Static("Thu, 02 Jan 2020 03:04:05 GMT"),
            ));
            set_expires(e, &mut r, NOW);
            (
                get(&r, "expires").join("|"),
                get(&r, "cache-control").join("|"),
            )
        };
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            run(Expires::Access(3600)),
            pair("Sun, 22 Nov 2026 00:40:00 GMT", "max-age=3600")
        );
        assert_eq!(
            run(Expires::Access(-1)),
            pair("Sat, 21 Nov 2026 23:39:59 GMT", "no-cache")
        );
        assert_eq!(
            run(Expires::Access(0)),
            pair("Sat, 21 Nov 2026 23:40:00 GMT", "max-age=0")
        );
        assert_eq!(
            run(Expires::Epoch),
            pair("Thu, 01 Jan 1970 00:00:01 GMT", "no-cache")
        );
        assert_eq!(
            run(Expires::Max),
            pair("Thu, 31 Dec 2037 23:55:55 GMT", "max-age=315360000")
        );
        assert_eq!(
            run(Expires::Modified(86400)),
            pair("Fri, 03 Jan 2020 03:04:05 GMT", "no-cache")
        );
        // Far past and far future stay printable.
        assert_eq!(
            run(Expires::Access(-4_000_000_000)).0,
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
        assert_eq!(
            run(Expires::Access(i64::MAX / 2)).0,
            "Fri, 31 Dec 9999 23:59:59 GMT"
        );
    }

    #[test]
    fn modified_without_last_modified_counts_from_now() {
        let mut r = Response::new(301);
        set_expires(Expires::Modified(60), &mut r, NOW);
        assert_eq!(get(&r, "expires"), ["Sat, 21 Nov 2026 23:41:00 GMT"]);
        assert_eq!(get(&r, "cache-control"), ["max-age=60"]);
    }

    #[test]
    fn daily_is_the_next_occurrence() {
        let at = next_daily(NOW, 0);
        assert!(at > NOW && at - NOW <= 86_400 + 3600);
        let a = next_daily(NOW, 3600);
        let b = next_daily(a, 3600);
        assert!(b > a && b - a >= 82_800 && b - a <= 90_000);
    }

    #[test]
    fn statuses() {
        for s in [200, 201, 204, 206, 301, 302, 303, 304, 307, 308] {
            assert!(applies(s));
        }
        for s in [100, 202, 400, 403, 404, 416, 500, 503] {
            assert!(!applies(s));
        }
    }
}
