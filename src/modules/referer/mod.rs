//! `valid_referers` and `$invalid_referer`, as nginx's referer module.
//!
//! `$invalid_referer` is empty when the request's Referer is one the level's
//! `valid_referers` accept, `1` otherwise; a level without `valid_referers`
//! accepts every request. A Referer is worked out as nginx does: `none`
//! covers a request without the header; a value shorter than
//! `http://i.ru` or without `http://`/`https://` is valid only under
//! `blocked`; otherwise its host (up to `/` or `:`, at most 256 characters)
//! is looked up among the hosts (exact, then the longest leading wildcard,
//! then the longest trailing one, the server's names among them under
//! `server_names`), and a host found must be followed by its URI prefix,
//! if it has one. A host not found may still match a `server_names` regex
//! name (the host alone) or a `~regex` (the Referer after its scheme).

pub mod conf;

use crate::core::module::{Module, VarDef};
use crate::core::request::Request;
use conf::{Host, RefererConf, Referers};

/// The longest host a Referer may have, as nginx's lookup buffer.
const MAX_HOST: usize = 256;

/// What a host lookup found: the URI prefix the Referer needs, if any.
type Found<'a> = Option<Option<&'a str>>;

/// The best of the host patterns for `host` (lowercase): exact first, then
/// the longest leading wildcard, then the longest trailing one.
fn lookup<'a>(
    host: &str,
    pats: impl Iterator<Item = (&'a Host, Option<&'a str>)> + Clone,
) -> Found<'a> {
    if let Some((_, uri)) = pats
        .clone()
        .find(|(h, _)| matches!(h, Host::Exact(e) if e == host))
    {
        return Some(uri);
    }
    let head = pats
        .clone()
        .filter_map(|(h, uri)| match h {
            Host::Head(s) if host.len() > s.len() && host.ends_with(s.as_str()) => {
                Some((s.len(), uri))
            }
            _ => None,
        })
        .max_by_key(|(n, _)| *n);
    if let Some((_, uri)) = head {
        return Some(uri);
    }
    pats.filter_map(|(h, uri)| match h {
        Host::Tail(s) if host.starts_with(s.as_str()) => Some((s.len(), uri)),
        _ => None,
    })
    .max_by_key(|(n, _)| *n)
    .map(|(_, uri)| uri)
}

/// The server's names as host patterns (regex names aside).
fn server_hosts(names: &[String]) -> Vec<Host> {
    names
        .iter()
        .filter(|n| !n.starts_with('~') && !n.is_empty())
        .filter_map(|n| Host::parse(n))
        .flatten()
        .collect()
}

/// Whether `referer` (the header's value, `None` without one) is valid.
fn valid(
    r: &Referers,
    referer: Option<&[u8]>,
    names: &[String],
    name_regex: &[crate::core::vars::Re],
) -> bool {
    let sn_regex = if r.server_names { name_regex } else { &[] };
    let sn_hosts = if r.server_names {
        server_hosts(names)
    } else {
        Vec::new()
    };
    if r.hosts.is_empty() && sn_hosts.is_empty() && r.regex.is_empty() && sn_regex.is_empty() {
        return true;
    }
    let Some(referer) = referer else {
        return r.none;
    };
    let rest = if referer.len() >= "http://i.ru".len() {
        let lower = |n: usize| referer[..n].to_ascii_lowercase();
        if lower(7) == b"http://" {
            Some(&referer[7..])
        } else if referer.len() >= 8 && lower(8) == b"https://" {
            Some(&referer[8..])
        } else {
            None
        }
    } else {
        None
    };
    let Some(rest) = rest else {
        return r.blocked;
    };
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b':')
        .unwrap_or(rest.len());
    if end > MAX_HOST {
        return false;
    }
    let host = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
    let pats = r
        .hosts
        .iter()
        .map(|(h, uri)| (h, uri.as_deref()))
        .chain(sn_hosts.iter().map(|h| (h, None)));
    if let Some(uri) = lookup(&host, pats) {
        let Some(uri) = uri else {
            return true;
        };
        let path = &rest[end..];
        let path = &path[path.iter().position(|&b| b == b'/').unwrap_or(path.len())..];
        return path.starts_with(uri.as_bytes());
    }
    sn_regex.iter().any(|re| re.is_match(&rest[..end]))
        || r.regex.iter().any(|re| re.is_match(rest))
}

fn invalid_referer(req: &Request<'_>, _: &str, out: &mut Vec<u8>) {
    let Some(r) = &req.conf.get::<RefererConf>().referers else {
        return;
    };
    let s = req.server;
    if !valid(
        r,
        req.head.header("referer"),
        &s.names,
        &s.phases.name_regex,
    ) {
        out.push(b'1');
    }
}

/// `valid_referers` and `$invalid_referer`.
pub static MODULE: Module = Module {
    name: "referer",
    nginx_default: &["http_referer_module"],
    directives: &[conf::DIRECTIVES, conf::IGNORED],
    settings: Some(&RefererConf::KIND),
    variables: &[VarDef::name("invalid_referer", invalid_referer)],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::ast::Directive;

    fn refs(args: &[&str]) -> Referers {
        let d = Directive::test("valid_referers", args, 1);
        let mut r = Referers::default();
        conf::tests_add(&mut r, &d).unwrap();
        r
    }

    fn ok(r: &Referers, referer: &str) -> bool {
        valid(r, Some(referer.as_bytes()), &[], &[])
    }

    #[test]
    fn hosts_and_uris() {
        let r = refs(&["www.example.org/uri", "*.example.com", "www.example.*"]);
        assert!(ok(&r, "http://www.example.org/uri"));
        assert!(ok(&r, "http://WWW.example.org:8080/urii"));
        assert!(!ok(&r, "http://www.example.org/uRi"));
        assert!(!ok(&r, "http://www.example.org/ur"));
        assert!(ok(&r, "https://a.b.example.com/"));
        assert!(!ok(&r, "https://example.com/"));
        assert!(ok(&r, "http://www.example.net"));
        assert!(!ok(&r, "www.example.org"));
        assert!(!valid(&r, None, &[], &[]));
    }

    #[test]
    fn none_blocked_and_lengths() {
        let r = refs(&["none", "blocked", "a.org", "~^x{300}$"]);
        assert!(valid(&r, None, &[], &[]));
        assert!(ok(&r, ""));
        assert!(ok(&r, "http://su"));
        assert!(ok(&r, "foobar-no-scheme"));
        assert!(!ok(&r, &format!("http://{}", "x".repeat(300))));
        let long = refs(&["~.*"]);
        assert!(ok(&long, &format!("http://{}", "a".repeat(256))));
        assert!(!ok(&long, &format!("http://{}", "a".repeat(257))));
    }

    #[test]
    fn server_names() {
        let r = refs(&["server_names"]);
        let names = vec!["localhost".to_string(), "*.example.org".to_string()];
        assert!(valid(&r, Some(b"http://LocalHost/x"), &names, &[]));
        assert!(valid(&r, Some(b"http://www.example.org"), &names, &[]));
        assert!(!valid(&r, Some(b"http://example.org"), &names, &[]));
        // Without any name, every Referer is valid.
        assert!(valid(
            &r,
            Some(b"http://example.org"),
            &[String::new()],
            &[]
        ));
    }
}
