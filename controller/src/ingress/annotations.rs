//! ingress-nginx's annotations (`nginx.ingress.kubernetes.io/…`), read and checked.
//!
//! Each value is checked against what the annotation may hold before it reaches the
//! configuration; a bad value is an error naming the annotation, and the Ingress holding it
//! is left out.

use std::collections::BTreeMap;
use std::net::IpAddr;

pub const PREFIX: &str = "nginx.ingress.kubernetes.io/";

/// Annotations vireo implements.
pub const SUPPORTED: &[&str] = &[
    "app-root",
    "affinity",
    "affinity-mode",
    "auth-realm",
    "auth-secret",
    "auth-secret-type",
    "auth-type",
    "auth-tls-secret",
    "auth-tls-verify-client",
    "auth-tls-verify-depth",
    "auth-tls-error-page",
    "auth-tls-pass-certificate-to-upstream",
    "auth-tls-match-cn",
    "auth-url",
    "auth-method",
    "auth-signin",
    "auth-signin-redirect-param",
    "auth-response-headers",
    "auth-request-redirect",
    "auth-always-set-cookie",
    "backend-protocol",
    "canary",
    "canary-by-header",
    "canary-by-header-value",
    "canary-by-header-pattern",
    "canary-by-cookie",
    "canary-weight",
    "canary-weight-total",
    "client-body-buffer-size",
    "configuration-snippet",
    "connection-proxy-header",
    "custom-http-errors",
    "default-backend",
    "denylist-source-range",
    "enable-access-log",
    "enable-cors",
    "cors-allow-origin",
    "cors-allow-methods",
    "cors-allow-headers",
    "cors-expose-headers",
    "cors-allow-credentials",
    "cors-max-age",
    "enable-rewrite-log",
    "force-ssl-redirect",
    "from-to-www-redirect",
    "limit-burst-multiplier",
    "limit-connections",
    "limit-rps",
    "limit-rate",
    "limit-rate-after",
    "limit-rpm",
    "limit-whitelist",
    "load-balance",
    "mirror-host",
    "mirror-request-body",
    "mirror-target",
    "permanent-redirect",
    "permanent-redirect-code",
    "proxy-body-size",
    "proxy-buffer-size",
    "proxy-buffering",
    "proxy-buffers-number",
    "proxy-connect-timeout",
    "proxy-cookie-domain",
    "proxy-cookie-path",
    "proxy-http-version",
    "proxy-max-temp-file-size",
    "proxy-next-upstream",
    "proxy-next-upstream-timeout",
    "proxy-next-upstream-tries",
    "proxy-read-timeout",
    "proxy-redirect-from",
    "proxy-redirect-to",
    "proxy-request-buffering",
    "proxy-send-timeout",
    "proxy-ssl-secret",
    "proxy-ssl-verify",
    "proxy-ssl-verify-depth",
    "proxy-ssl-name",
    "proxy-ssl-server-name",
    "proxy-ssl-ciphers",
    "proxy-ssl-protocols",
    "rewrite-target",
    "satisfy",
    "server-alias",
    "server-snippet",
    "service-upstream",
    "session-cookie-domain",
    "session-cookie-expires",
    "session-cookie-max-age",
    "session-cookie-name",
    "session-cookie-path",
    "session-cookie-samesite",
    "session-cookie-secure",
    "ssl-redirect",
    "temporal-redirect",
    "upstream-hash-by",
    "upstream-vhost",
    "use-regex",
    "whitelist-source-range",
    "x-forwarded-prefix",
];

/// Annotations of observability modules vireo does not have: the Ingress is served and a
/// Warning Event says the annotation has no effect.
pub const IGNORED: &[&str] = &[
    "enable-opentracing",
    "opentracing-trust-incoming-span",
    "enable-opentelemetry",
    "opentelemetry-trust-incoming-span",
    "enable-influxdb",
    "influxdb-measurement",
    "influxdb-port",
    "influxdb-host",
    "influxdb-server-name",
];

/// Snippet annotations: raw configuration text, refused unless the operator allows them.
pub const SNIPPETS: &[&str] = &["configuration-snippet", "server-snippet"];

/// An Ingress's annotations of the ingress-nginx prefix, with the errors met reading them.
pub struct Reader<'a> {
    map: BTreeMap<&'a str, &'a str>,
    pub errors: Vec<String>,
}

impl<'a> Reader<'a> {
    pub fn new(annotations: Option<&'a BTreeMap<String, String>>) -> Reader<'a> {
        let map = annotations
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| k.strip_prefix(PREFIX).map(|k| (k, v.as_str())))
            .collect();
        Reader {
            map,
            errors: Vec::new(),
        }
    }

    /// Names of the prefix's annotations that are present.
    pub fn names(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.map.keys().copied()
    }

    pub fn raw(&self, name: &str) -> Option<&'a str> {
        self.map.get(name).map(|v| v.trim())
    }

    fn bad(&mut self, name: &str, value: &str, why: &str) {
        self.errors.push(format!(
            "annotation {PREFIX}{name}: invalid value {value:?}: {why}"
        ));
    }

    /// A value passing `check`, which tells what is wrong with it.
    pub fn checked(
        &mut self,
        name: &str,
        check: impl Fn(&str) -> Result<(), String>,
    ) -> Option<String> {
        let v = self.raw(name)?;
        match check(v) {
            Ok(()) => Some(v.to_string()),
            Err(why) => {
                self.bad(name, v, &why);
                None
            }
        }
    }

    /// `true`/`false` (and Go's other spellings of them).
    pub fn bool(&mut self, name: &str) -> Option<bool> {
        let v = self.raw(name)?;
        match v {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
            _ => {
                self.bad(name, v, "expected true or false");
                None
            }
        }
    }

    pub fn number(&mut self, name: &str, max: u64) -> Option<u64> {
        let v = self.raw(name)?;
        match v.parse::<u64>() {
            Ok(n) if n <= max => Some(n),
            _ => {
                self.bad(name, v, &format!("expected a whole number up to {max}"));
                None
            }
        }
    }

    /// An nginx size: digits with an optional k, m or g.
    pub fn size(&mut self, name: &str) -> Option<String> {
        self.checked(name, |v| {
            let digits = v.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
            if !digits.is_empty()
                && v.len() - digits.len() <= 1
                && digits.bytes().all(|b| b.is_ascii_digit())
            {
                Ok(())
            } else {
                Err("expected a size such as 8k or 10m".into())
            }
        })
    }

    /// A comma-separated list of addresses and CIDR networks.
    pub fn cidrs(&mut self, name: &str) -> Option<Vec<String>> {
        let v = self.raw(name)?;
        let list: Vec<String> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        for net in &list {
            if !is_cidr(net) {
                self.bad(
                    name,
                    v,
                    &format!("{net:?} is not an address or CIDR network"),
                );
                return None;
            }
        }
        Some(list)
    }

    /// A comma-separated list whose items pass `check`.
    pub fn list(
        &mut self,
        name: &str,
        check: impl Fn(&str) -> bool,
        what: &str,
    ) -> Option<Vec<String>> {
        let v = self.raw(name)?;
        let list: Vec<String> = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        match list.iter().find(|i| !check(i)) {
            Some(i) => {
                self.bad(name, v, &format!("{i:?} is not {what}"));
                None
            }
            None => Some(list),
        }
    }
}

pub fn is_cidr(s: &str) -> bool {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let Ok(ip) = addr.parse::<IpAddr>() else {
        return false;
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    len.is_none_or(|l| l.parse::<u8>().is_ok_and(|l| l <= max))
}

/// Printable text without white space, quotes or backslashes.
pub fn plain(v: &str) -> Result<(), String> {
    if v.is_empty()
        || v.chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '\\' || c == '\'')
    {
        Err("expected text without white space, quotes or backslashes".into())
    } else {
        Ok(())
    }
}

/// An absolute http(s) URL (variables allowed).
pub fn url(v: &str) -> Result<(), String> {
    plain(v)?;
    if v.starts_with("http://") || v.starts_with("https://") {
        Ok(())
    } else {
        Err("expected an http:// or https:// URL".into())
    }
}

/// A path starting with `/` (variables allowed).
pub fn path(v: &str) -> Result<(), String> {
    plain(v)?;
    if v.starts_with('/') {
        Ok(())
    } else {
        Err("expected a path starting with /".into())
    }
}

/// A header or cookie name.
pub fn is_token(v: &str) -> bool {
    !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A name that can end an nginx variable (`$cookie_NAME`): letters, digits and `_`.
pub fn is_variable_name(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A host name, possibly with a leading `*.`.
pub fn is_host(v: &str) -> bool {
    let v = v.strip_prefix("*.").unwrap_or(v);
    !v.is_empty()
        && v.len() <= 253
        && v.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A CORS origin: `*`, or `scheme://host[:port]` whose host may start with `*.`.
pub fn is_origin(v: &str) -> bool {
    if v == "*" {
        return true;
    }
    let Some((scheme, rest)) = v.split_once("://") else {
        return false;
    };
    if scheme != "http" && scheme != "https" {
        return false;
    }
    let host = match rest.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h,
        _ => rest,
    };
    is_host(host)
}

/// A text with variables, for hash keys and host names: letters, digits and `$_-.:{}`.
pub fn is_variable_text(v: &str) -> bool {
    !v.is_empty()
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"$_-.:{}/".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (format!("{PREFIX}{k}"), v.to_string()))
            .collect()
    }

    #[test]
    fn values_are_checked() {
        let m = reader(&[
            ("ssl-redirect", "false"),
            ("proxy-body-size", "8m"),
            ("limit-rps", "ten"),
            ("whitelist-source-range", "10.0.0.0/8, 192.168.1.1,::1/128"),
            ("limit-whitelist", "10.0.0.0/33"),
            ("auth-url", "http://auth/x y"),
        ]);
        let mut r = Reader::new(Some(&m));
        assert_eq!(r.bool("ssl-redirect"), Some(false));
        assert_eq!(r.size("proxy-body-size").as_deref(), Some("8m"));
        assert_eq!(r.number("limit-rps", 1000), None);
        assert_eq!(
            r.cidrs("whitelist-source-range").unwrap(),
            ["10.0.0.0/8", "192.168.1.1", "::1/128"]
        );
        assert_eq!(r.cidrs("limit-whitelist"), None);
        assert_eq!(r.checked("auth-url", url), None);
        assert_eq!(r.bool("missing"), None);
        assert_eq!(r.errors.len(), 3, "{:?}", r.errors);
        assert!(
            r.errors[0].contains("nginx.ingress.kubernetes.io/limit-rps"),
            "{:?}",
            r.errors
        );
    }

    #[test]
    fn shapes() {
        assert!(is_origin("https://*.example.com:8443"));
        assert!(is_origin("*"));
        assert!(!is_origin("ftp://example.com"));
        assert!(!is_origin("https://exa mple.com"));
        assert!(is_host("*.example.com"));
        assert!(!is_host("a..b"));
        assert!(is_variable_text("${request_uri}$host"));
        assert!(is_variable_name("route_v2"));
        assert!(!is_variable_name("my-cookie"));
        assert!(!is_variable_text("$host;"));
    }
}
