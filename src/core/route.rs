//! Request routing: choosing the virtual server by Host, then the location by URI,
//! with nginx's rules (exact and wildcard names then regex then default server;
//! `=` then longest prefix, `^~`, then regex in order, nested locations).

use crate::conf::model::{LocConf, LocKind};
use std::collections::HashMap;
use std::sync::Arc;

/// A resolved location.
#[derive(Debug)]
pub struct Location {
    pub kind: LocKind,
    pub pattern: String,
    pub regex: Option<regex::Regex>,
    pub conf: Arc<LocConf>,
    pub alias: Option<String>,
    /// Content handler set in this location (not inherited); static files when none.
    pub content: Option<Arc<dyn crate::core::request::Content>>,
    pub nested: Locations,
}

/// The locations of one level, indexed for lookup.
#[derive(Debug, Default)]
pub struct Locations {
    /// `=` and prefix locations, longest pattern first.
    prefix: Vec<Location>,
    /// `~`/`~*` locations in order of appearance.
    regex: Vec<Location>,
}

impl Locations {
    pub fn new(all: Vec<Location>) -> Self {
        let (mut prefix, regex): (Vec<_>, Vec<_>) = all
            .into_iter()
            .partition(|l| !matches!(l.kind, LocKind::Regex { .. }));
        // Longest first; at equal length an exact location comes before a prefix one.
        prefix.sort_by(|a, b| {
            b.pattern
                .len()
                .cmp(&a.pattern.len())
                .then((a.kind != LocKind::Exact).cmp(&(b.kind != LocKind::Exact)))
        });
        Locations { prefix, regex }
    }

    /// Find the location for `uri` (already normalised).
    pub fn find(&self, uri: &[u8]) -> Option<&Location> {
        self.find_inner(uri).0
    }

    /// Returns the match and whether the search is final (exact or `^~`).
    fn find_inner(&self, uri: &[u8]) -> (Option<&Location>, bool) {
        let mut best = None;
        let mut stop_regex = false;
        for l in &self.prefix {
            let p = l.pattern.as_bytes();
            match l.kind {
                LocKind::Exact if uri == p => return (Some(l), true),
                LocKind::Prefix | LocKind::PrefixNoRegex if uri.starts_with(p) => {
                    let (nested, done) = l.nested.find_inner(uri);
                    if done {
                        return (nested, true);
                    }
                    stop_regex = l.kind == LocKind::PrefixNoRegex;
                    best = Some(nested.unwrap_or(l));
                    break;
                }
                _ => {}
            }
        }
        if !stop_regex {
            for l in &self.regex {
                if l.regex.as_ref().is_some_and(|re| matches_bytes(re, uri)) {
                    let (nested, _) = l.nested.find_inner(uri);
                    return (Some(nested.unwrap_or(l)), true);
                }
            }
        }
        (best, stop_regex)
    }
}

fn matches_bytes(re: &regex::Regex, uri: &[u8]) -> bool {
    match std::str::from_utf8(uri) {
        Ok(s) => re.is_match(s),
        Err(_) => re.is_match(&String::from_utf8_lossy(uri)),
    }
}

/// A virtual server.
#[derive(Debug)]
pub struct Server {
    /// First name is `$server_name`.
    pub names: Vec<String>,
    pub conf: Arc<LocConf>,
    pub locations: Locations,
    pub named: HashMap<String, Location>,
}

impl Server {
    /// The location serving `uri`, or `None` for the server level itself.
    pub fn location(&self, uri: &[u8]) -> Option<&Location> {
        self.locations.find(uri)
    }

    pub fn name(&self) -> &str {
        self.names.first().map_or("", String::as_str)
    }
}

/// The servers reachable through one listening address.
#[derive(Debug)]
pub struct VirtualHosts {
    pub default: Arc<Server>,
    exact: HashMap<String, Arc<Server>>,
    /// `*.example.com` stored as ".example.com", longest first.
    lead_wild: Vec<(String, Arc<Server>)>,
    /// `www.example.*` stored as "www.example.", longest first.
    trail_wild: Vec<(String, Arc<Server>)>,
    regex: Vec<(regex::Regex, Arc<Server>)>,
}

impl VirtualHosts {
    /// Build from the servers listening on one address, in configuration order;
    /// `default` is the `default_server` one (or the first).
    pub fn new(servers: &[Arc<Server>], default: Arc<Server>) -> Self {
        let mut v = VirtualHosts {
            default,
            exact: HashMap::new(),
            lead_wild: Vec::new(),
            trail_wild: Vec::new(),
            regex: Vec::new(),
        };
        for s in servers {
            for n in &s.names {
                if let Some(re) = n.strip_prefix('~') {
                    if let Ok(re) = regex::RegexBuilder::new(re).case_insensitive(true).build() {
                        v.regex.push((re, s.clone()));
                    }
                } else if let Some(rest) = n.strip_prefix("*.") {
                    v.lead_wild.push((format!(".{rest}"), s.clone()));
                } else if let Some(rest) = n.strip_prefix('.') {
                    // ".example.com" is both "example.com" and "*.example.com".
                    v.exact.entry(rest.to_string()).or_insert_with(|| s.clone());
                    v.lead_wild.push((format!(".{rest}"), s.clone()));
                } else if let Some(rest) = n.strip_suffix(".*") {
                    v.trail_wild.push((format!("{rest}."), s.clone()));
                } else {
                    v.exact.entry(n.clone()).or_insert_with(|| s.clone());
                }
            }
        }
        v.lead_wild.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
        v.trail_wild.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
        v
    }

    /// Choose the server for a Host value (lowercase, port stripped).
    pub fn select(&self, host: &str) -> &Arc<Server> {
        if let Some(s) = self.exact.get(host) {
            return s;
        }
        if !host.is_empty() {
            for (suffix, s) in &self.lead_wild {
                if host.ends_with(suffix.as_str()) {
                    return s;
                }
            }
            for (prefix, s) in &self.trail_wild {
                if host.starts_with(prefix.as_str()) {
                    return s;
                }
            }
            for (re, s) in &self.regex {
                if re.is_match(host) {
                    return s;
                }
            }
        }
        &self.default
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(kind: LocKind, pattern: &str, nested: Vec<Location>) -> Location {
        let regex = match kind {
            LocKind::Regex { caseless } => Some(
                regex::RegexBuilder::new(pattern)
                    .case_insensitive(caseless)
                    .build()
                    .unwrap(),
            ),
            _ => None,
        };
        Location {
            kind,
            pattern: pattern.into(),
            regex,
            conf: Arc::default(),
            alias: None,
            content: None,
            nested: Locations::new(nested),
        }
    }

    fn which(ls: &Locations, uri: &str) -> Option<String> {
        ls.find(uri.as_bytes()).map(|l| l.pattern.clone())
    }

    #[test]
    fn nginx_location_order() {
        let ls = Locations::new(vec![
            loc(LocKind::Exact, "/", vec![]),
            loc(LocKind::Prefix, "/", vec![]),
            loc(LocKind::Prefix, "/documents/", vec![]),
            loc(LocKind::PrefixNoRegex, "/images/", vec![]),
            loc(
                LocKind::Regex { caseless: true },
                r"\.(gif|jpg|jpeg)$",
                vec![],
            ),
        ]);
        assert_eq!(which(&ls, "/").as_deref(), Some("/"));
        assert_eq!(ls.find(b"/").unwrap().kind, LocKind::Exact);
        assert_eq!(ls.find(b"/index.html").unwrap().kind, LocKind::Prefix);
        assert_eq!(
            which(&ls, "/documents/document.html").as_deref(),
            Some("/documents/")
        );
        assert_eq!(which(&ls, "/images/1.gif").as_deref(), Some("/images/"));
        assert_eq!(
            which(&ls, "/documents/1.JPG").as_deref(),
            Some(r"\.(gif|jpg|jpeg)$")
        );
    }

    #[test]
    fn nested_locations() {
        let ls = Locations::new(vec![
            loc(
                LocKind::Prefix,
                "/a/",
                vec![
                    loc(LocKind::Prefix, "/a/b/", vec![]),
                    loc(LocKind::Regex { caseless: false }, r"\.php$", vec![]),
                ],
            ),
            loc(LocKind::Regex { caseless: false }, r"\.txt$", vec![]),
        ]);
        assert_eq!(which(&ls, "/a/b/c").as_deref(), Some("/a/b/"));
        assert_eq!(which(&ls, "/a/x.php").as_deref(), Some(r"\.php$"));
        assert_eq!(which(&ls, "/a/x.txt").as_deref(), Some(r"\.txt$"));
        assert_eq!(which(&ls, "/a/x").as_deref(), Some("/a/"));
        assert_eq!(which(&ls, "/zzz"), None);
    }

    #[test]
    fn server_names() {
        let mk = |names: &[&str]| {
            Arc::new(Server {
                names: names.iter().map(|s| s.to_string()).collect(),
                conf: Arc::default(),
                locations: Locations::default(),
                named: HashMap::new(),
            })
        };
        let a = mk(&["example.com", "www.example.com"]);
        let b = mk(&["*.example.com"]);
        let c = mk(&["mail.*"]);
        let d = mk(&["~^(?<user>.+)\\.example\\.net$"]);
        let vh = VirtualHosts::new(&[a.clone(), b.clone(), c.clone(), d.clone()], a.clone());
        assert!(Arc::ptr_eq(vh.select("www.example.com"), &a));
        assert!(Arc::ptr_eq(vh.select("x.example.com"), &b));
        assert!(Arc::ptr_eq(vh.select("mail.example.org"), &c));
        assert!(Arc::ptr_eq(vh.select("bob.example.net"), &d));
        assert!(Arc::ptr_eq(vh.select("other.org"), &a));
        assert!(Arc::ptr_eq(vh.select(""), &a));
    }
}
