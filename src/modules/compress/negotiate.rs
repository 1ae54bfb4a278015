//! Which coding a request gets: Accept-Encoding q-values (RFC 9110 §12.5.3),
//! and nginx's request checks (`gzip_http_version`, `gzip_proxied`,
//! `gzip_disable`).

use super::Coding;
use super::conf::{CompressConf, Proxied};
use crate::core::message::head::RequestHead;
use crate::core::message::response::Value;

/// The weights (0–1000) a client gives each coding vireo knows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    pub br: u16,
    pub zstd: u16,
    pub gzip: u16,
}

impl Accepted {
    pub fn q(&self, c: Coding) -> u16 {
        match c {
            Coding::Br => self.br,
            Coding::Zstd => self.zstd,
            Coding::Gzip => self.gzip,
        }
    }

    /// The best of `candidates` the client accepts: highest q, then the
    /// server's order (br, zstd, gzip).
    pub fn choose(&self, candidates: impl Iterator<Item = Coding>) -> Option<Coding> {
        let mut best: Option<(u16, Coding)> = None;
        for c in candidates {
            let q = self.q(c);
            if q > 0 && best.is_none_or(|(bq, bc)| q > bq || (q == bq && c.rank() < bc.rank())) {
                best = Some((q, c));
            }
        }
        best.map(|(_, c)| c)
    }
}

/// Parse an Accept-Encoding value. A coding named explicitly takes its own
/// weight; otherwise `*` gives it that of `*`; else it is not acceptable. An
/// invalid weight counts as 0, as nginx treats it.
pub fn accept_encoding(v: &[u8]) -> Accepted {
    let (mut br, mut zstd, mut gzip, mut star) = (None, None, None, None);
    for item in v.split(|&b| b == b',') {
        let mut parts = item.split(|&b| b == b';');
        let name = trim(parts.next().unwrap_or_default());
        if name.is_empty() {
            continue;
        }
        let mut q = 1000;
        for p in parts {
            let p = trim(p);
            if let Some(eq) = p.iter().position(|&b| b == b'=')
                && trim(&p[..eq]).eq_ignore_ascii_case(b"q")
            {
                q = qvalue(trim(&p[eq + 1..])).unwrap_or(0);
            }
        }
        let slot = if name.eq_ignore_ascii_case(b"br") {
            &mut br
        } else if name.eq_ignore_ascii_case(b"zstd") {
            &mut zstd
        } else if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
            &mut gzip
        } else if name == b"*" {
            &mut star
        } else {
            continue;
        };
        // Named twice: the larger weight.
        *slot = Some(slot.map_or(q, |o: u16| o.max(q)));
    }
    let star = star.unwrap_or(0);
    Accepted {
        br: br.unwrap_or(star),
        zstd: zstd.unwrap_or(star),
        gzip: gzip.unwrap_or(star),
    }
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn qvalue(v: &[u8]) -> Option<u16> {
    let (&first, rest) = v.split_first()?;
    let int = match first {
        b'0' => 0,
        b'1' => 1000,
        _ => return None,
    };
    if rest.is_empty() {
        return Some(int);
    }
    let frac = rest.strip_prefix(b".")?;
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n = 0u16;
    for i in 0..3 {
        n = n * 10 + frac.get(i).map_or(0, |d| (d - b'0') as u16);
    }
    let q = int + n;
    (q <= 1000).then_some(q)
}

/// The request-side checks nginx makes before any compression
/// (`ngx_http_gzip_ok`): HTTP version, proxied requests against the response's
/// caching headers, and the User-Agent. `resp_headers` are the response's
/// headers (empty when a precompressed variant is chosen before the response
/// exists, as in nginx's gzip_static).
pub fn request_ok(
    c: &CompressConf,
    head: &RequestHead,
    resp_headers: &[(&'static str, Value)],
) -> bool {
    let header = |n| head.header(n);
    if head.version < c.gzip_http_version {
        return false;
    }
    if let Some(dis) = &c.gzip_disable
        && let Some(ua) = header("user-agent")
    {
        if dis.msie6 && msie6(ua) {
            return false;
        }
        if dis.patterns.iter().any(|re| re.is_match(ua)) {
            return false;
        }
    }
    if header("via").is_none() {
        return true;
    }
    proxied_ok(
        c.gzip_proxied,
        header("authorization").is_some(),
        resp_headers,
    )
}

fn resp_header<'a>(h: &'a [(&'static str, Value)], name: &str) -> Option<&'a str> {
    h.iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `gzip_proxied` for a request with Via, as nginx decides it.
pub fn proxied_ok(p: Proxied, authorization: bool, h: &[(&'static str, Value)]) -> bool {
    if p.has(Proxied::OFF) {
        return false;
    }
    if p.has(Proxied::ANY) || (authorization && p.has(Proxied::AUTH)) {
        return true;
    }
    if let Some(e) = resp_header(h, "expires") {
        if !p.has(Proxied::EXPIRED) {
            return false;
        }
        let Some(expires) = http_time(e) else {
            return false;
        };
        let date = match resp_header(h, "date") {
            Some(d) => match http_time(d) {
                Some(d) => d,
                None => return false,
            },
            None => std::time::SystemTime::now(),
        };
        return expires < date;
    }
    let cc: Vec<&str> = h
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("cache-control"))
        .map(|(_, v)| v.as_str())
        .collect();
    if !cc.is_empty() {
        let has = |tok: &str| {
            cc.iter().any(|v| {
                v.split(',').any(|d| {
                    let d = d.trim();
                    let name = d.split('=').next().unwrap_or_default().trim();
                    name.eq_ignore_ascii_case(tok)
                })
            })
        };
        return (p.has(Proxied::NO_CACHE) && has("no-cache"))
            || (p.has(Proxied::NO_STORE) && has("no-store"))
            || (p.has(Proxied::PRIVATE) && has("private"));
    }
    if p.has(Proxied::NO_LM) && resp_header(h, "last-modified").is_some() {
        return false;
    }
    if p.has(Proxied::NO_ETAG) && resp_header(h, "etag").is_some() {
        return false;
    }
    true
}

fn http_time(s: &str) -> Option<std::time::SystemTime> {
    httpdate::parse_http_date(s.trim()).ok()
}

/// MSIE 4–6 (6 without SV1), not Opera: nginx's `msie6` mask.
pub fn msie6(ua: &[u8]) -> bool {
    crate::core::browser::Browser::of(ua).msie6
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(ae: &str) -> Option<Coding> {
        accept_encoding(ae.as_bytes()).choose(Coding::ALL.into_iter())
    }

    #[test]
    fn q_values_choose() {
        assert_eq!(pick("gzip"), Some(Coding::Gzip));
        assert_eq!(pick("gzip, deflate, br"), Some(Coding::Br));
        assert_eq!(pick("gzip, deflate, br, zstd"), Some(Coding::Br));
        assert_eq!(pick("gzip, zstd"), Some(Coding::Zstd));
        assert_eq!(pick("br;q=0.5, gzip;q=0.8"), Some(Coding::Gzip));
        assert_eq!(pick("br;q=0.5, zstd;q=0.9, gzip;q=0.8"), Some(Coding::Zstd));
        assert_eq!(pick("br;q=0, gzip"), Some(Coding::Gzip));
        assert_eq!(pick("gzip;q=0"), None);
        assert_eq!(pick("gzip; q=0.000"), None);
        assert_eq!(pick("gzip;q=0.001"), Some(Coding::Gzip));
        assert_eq!(pick("identity"), None);
        assert_eq!(pick(""), None);
        assert_eq!(pick("*"), Some(Coding::Br));
        assert_eq!(pick("*;q=0.5, br;q=0.1"), Some(Coding::Zstd));
        assert_eq!(pick("*, br;q=0, zstd;q=0"), Some(Coding::Gzip));
        assert_eq!(pick("x-gzip"), Some(Coding::Gzip));
        assert_eq!(pick("GZIP ; Q=1"), Some(Coding::Gzip));
        assert_eq!(pick("gzip;q=2"), None);
        assert_eq!(pick("gzip;q=1.5"), None);
        assert_eq!(pick("gzip;q=0.5x"), None);
        assert_eq!(pick("gzipfoo, brr"), None);
        assert_eq!(pick("deflate, gzip;q=1.0"), Some(Coding::Gzip));
        // Only the codings on in the location compete.
        let a = accept_encoding(b"br, gzip");
        assert_eq!(a.choose([Coding::Gzip].into_iter()), Some(Coding::Gzip));
        assert_eq!(a.choose([Coding::Zstd].into_iter()), None);
    }

    #[test]
    fn msie6_mask() {
        assert!(msie6(b"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.0)"));
        assert!(msie6(b"Mozilla/4.0 (compatible; MSIE 5.5; Windows 98)"));
        assert!(!msie6(
            b"Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)"
        ));
        assert!(!msie6(
            b"Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)"
        ));
        assert!(!msie6(b"Opera/9.0 (MSIE 6.0; Windows)"));
        assert!(!msie6(b"curl/8.0"));
    }

    fn hv(list: &[(&'static str, &'static str)]) -> Vec<(&'static str, Value)> {
        list.iter().map(|(n, v)| (*n, Value::Static(v))).collect()
    }

    #[test]
    fn proxied_rules_as_nginx() {
        let p = |flags| Proxied(flags);
        let none = hv(&[]);
        assert!(!proxied_ok(p(Proxied::OFF), true, &none));
        assert!(proxied_ok(p(Proxied::ANY), false, &none));
        assert!(proxied_ok(
            p(Proxied::AUTH),
            true,
            &hv(&[("Cache-Control", "public")])
        ));
        assert!(!proxied_ok(
            p(Proxied::AUTH),
            false,
            &hv(&[("Cache-Control", "public")])
        ));
        // No Expires, no Cache-Control, no LM/ETag flags: compressed (nginx falls through).
        assert!(proxied_ok(p(Proxied::EXPIRED), false, &none));
        let past = hv(&[
            ("Expires", "Thu, 01 Jan 1970 00:00:01 GMT"),
            ("Date", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ]);
        let future = hv(&[
            ("Expires", "Sun, 06 Nov 2094 08:49:37 GMT"),
            ("Date", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ]);
        assert!(proxied_ok(p(Proxied::EXPIRED), false, &past));
        assert!(!proxied_ok(p(Proxied::EXPIRED), false, &future));
        assert!(!proxied_ok(p(Proxied::NO_CACHE), false, &past));
        assert!(!proxied_ok(
            p(Proxied::EXPIRED),
            false,
            &hv(&[("Expires", "garbage")])
        ));
        assert!(proxied_ok(
            p(Proxied::EXPIRED),
            false,
            &hv(&[("Expires", "Thu, 01 Jan 1970 00:00:01 GMT")])
        ));
        let cc = |v: &'static str| hv(&[("Cache-Control", v)]);
        assert!(proxied_ok(p(Proxied::NO_CACHE), false, &cc("no-cache")));
        assert!(proxied_ok(
            p(Proxied::NO_CACHE),
            false,
            &cc("max-age=0, No-Cache")
        ));
        assert!(!proxied_ok(p(Proxied::NO_CACHE), false, &cc("no-store")));
        assert!(proxied_ok(p(Proxied::NO_STORE), false, &cc("no-store")));
        assert!(proxied_ok(
            p(Proxied::PRIVATE),
            false,
            &cc("private, max-age=5")
        ));
        assert!(!proxied_ok(p(Proxied::PRIVATE), false, &cc("public")));
        assert!(!proxied_ok(
            p(Proxied::PRIVATE | Proxied::NO_CACHE),
            false,
            &cc("max-age=60")
        ));
        let lm = hv(&[("Last-Modified", "Sun, 06 Nov 1994 08:49:37 GMT")]);
        let etag = hv(&[("ETag", "\"1-2\"")]);
        assert!(!proxied_ok(p(Proxied::NO_LM), false, &lm));
        assert!(proxied_ok(p(Proxied::NO_LM), false, &etag));
        assert!(!proxied_ok(p(Proxied::NO_ETAG), false, &etag));
        assert!(proxied_ok(p(Proxied::NO_ETAG), false, &lm));
    }

    #[test]
    fn qvalues() {
        assert_eq!(qvalue(b"1"), Some(1000));
        assert_eq!(qvalue(b"1.000"), Some(1000));
        assert_eq!(qvalue(b"0.5"), Some(500));
        assert_eq!(qvalue(b"0.05"), Some(50));
        assert_eq!(qvalue(b"0.123"), Some(123));
        assert_eq!(qvalue(b"0.1234"), None);
        assert_eq!(qvalue(b"1.001"), None);
        assert_eq!(qvalue(b".5"), None);
    }
}
