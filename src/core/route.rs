//! Request routing: choosing the virtual server by Host, then the location by URI,
//! with nginx's rules (exact and wildcard names then regex then default server;
//! `=` then longest prefix, `^~`, then regex in order, nested locations).

use crate::conf::model::{LocConf, LocKind};
use crate::core::module::{Extensions, Pipeline};
use crate::core::vars::{Quick, Re, Template, VarTable};
use std::collections::HashMap;
use std::sync::Arc;

/// Routing data of one level (server or location) that is not inherited, as
/// in nginx: `internal`, a variable alias, a server's regex names, and the
/// modules' own data of the level (the rewrite script, `try_files`), which
/// their phase hooks are given.
#[derive(Debug, Default)]
pub struct Phases {
    /// Modules' data of this level.
    pub ext: Extensions,
    /// `internal`: only internal redirects reach the location.
    pub internal: bool,
    /// `alias` with variables or in a regex location: rendered per request.
    pub alias_vars: Option<Template>,
    /// A server's `~regex` names, in order, for their captures.
    pub name_regex: Vec<Re>,
}

/// A resolved location.
#[derive(Debug)]
pub struct Location {
    pub kind: LocKind,
    pub pattern: String,
    pub regex: Option<Re>,
    pub conf: Arc<LocConf>,
    /// `alias`: the location's own, or inherited from an enclosing prefix
    /// location (as nginx, a nested location without `root` or `alias`
    /// keeps its parent's).
    pub alias: Option<String>,
    /// The prefix an inherited `alias` replaces: the pattern of the
    /// location that set it.
    pub alias_prefix: Option<String>,
    /// Content handler set in this location (not inherited); static files when none.
    pub content: Option<Arc<dyn crate::core::request::Content>>,
    /// The content handler wants `/x` answered with a redirect to this
    /// location's `/x/` (proxy-like handlers, as nginx's `auto_redirect`).
    pub auto_redirect: bool,
    pub phases: Phases,
    pub nested: Locations,
    /// `limit_except`: settings for the methods it does not list.
    pub limit_except: Option<Box<LimitExcept>>,
    /// The location's `if` blocks, by the index its rewrite script names.
    pub ifs: Vec<IfBlock>,
}

/// A location's `if` block, resolved: what a request runs with once its
/// condition held (nginx makes it a location of its own).
#[derive(Debug)]
pub struct IfBlock {
    /// The block's settings, over the location's.
    pub conf: Arc<LocConf>,
    /// The block's content handler, else the location's.
    pub content: Option<Arc<dyn crate::core::request::Content>>,
    /// The block sets its own content handler.
    pub own_content: bool,
}

/// A location's `limit_except` block, resolved.
#[derive(Debug)]
pub struct LimitExcept {
    /// The methods the location's own settings serve.
    pub methods: Vec<&'static str>,
    /// The block's settings, over the location's.
    pub conf: Arc<LocConf>,
    /// The block's content handler, else the location's.
    pub content: Option<Arc<dyn crate::core::request::Content>>,
}

impl Location {
    /// The URI prefix the alias takes the place of: the pattern of the
    /// prefix location that set it; `None` for a regex location's alias,
    /// which is the whole file name.
    pub fn alias_base(&self) -> Option<&str> {
        match (&self.alias_prefix, self.kind) {
            (Some(p), _) => Some(p),
            (None, LocKind::Regex { .. }) => None,
            (None, _) => Some(&self.pattern),
        }
    }

    /// The `limit_except` block that applies to `method`, if any.
    pub fn limit_for(&self, method: &str) -> Option<&LimitExcept> {
        self.limit_except
            .as_deref()
            .filter(|l| !l.methods.contains(&method))
    }
}

/// The result of a location search.
#[derive(Debug)]
pub enum Found<'l> {
    Loc(&'l Location),
    /// No location matches: the server level serves.
    None,
    /// The URI is a location's name without its trailing slash, and that
    /// location's handler asks for a 301 to the slashed URI.
    AddSlash(&'l Location),
}

/// The locations of one level, indexed for lookup.
#[derive(Debug, Default)]
pub struct Locations {
    /// `=` and prefix locations, longest pattern first.
    prefix: Vec<Location>,
    /// `~`/`~*` locations in order of appearance.
    regex: Vec<Location>,
    /// Which regex locations can match a URI, by its bytes (up to 64).
    index: Option<Box<RegexIndex>>,
    /// Which prefix locations can match a URI, by its second byte.
    by_second: Option<Box<PrefixIndex>>,
}

/// The prefix and exact locations of a level by their pattern's second
/// byte, which a URI of two bytes or more must share with every pattern
/// it can match or be completed to with a slash (the first is nearly
/// always `/`). Indices into `prefix`, longest first; patterns of one byte
/// or none (`location /`) end every bucket.
#[derive(Debug)]
struct PrefixIndex {
    buckets: Box<[Box<[u32]>]>,
}

impl PrefixIndex {
    /// Worth it from this many prefix locations on.
    const FROM: usize = 8;

    fn new(prefix: &[Location]) -> Option<Box<PrefixIndex>> {
        if prefix.len() < Self::FROM {
            return None;
        }
        let mut buckets = vec![Vec::new(); 256];
        let mut short = Vec::new();
        for (i, l) in prefix.iter().enumerate() {
            match l.pattern.as_bytes().get(1) {
                Some(&b) => buckets[usize::from(b)].push(i as u32),
                None => short.push(i as u32),
            }
        }
        for b in &mut buckets {
            b.extend_from_slice(&short);
        }
        Some(Box::new(PrefixIndex {
            buckets: buckets.into_iter().map(Vec::into_boxed_slice).collect(),
        }))
    }
}

/// The regex locations of a level indexed by the bytes their literals
/// require (`\.php$` needs a last byte `p` or `P`, `^/api/` a second byte
/// `a` or `A`): a URI is tried only against the regexes its bytes allow,
/// in order, so a request that passes a dozen regex locations costs a few
/// table lookups instead of a dozen regex searches. Bit `i` is
/// `regex[i]`.
#[derive(Debug)]
struct RegexIndex {
    /// Regexes with no required byte: always tried.
    always: u64,
    first: [u64; 256],
    second: [u64; 256],
    last: [u64; 256],
}

impl RegexIndex {
    fn new(regex: &[Location]) -> Option<Box<RegexIndex>> {
        if regex.len() > 64 {
            return None;
        }
        let mut ix = Box::new(RegexIndex {
            always: 0,
            first: [0; 256],
            second: [0; 256],
            last: [0; 256],
        });
        for (i, l) in regex.iter().enumerate() {
            let bit = 1u64 << i;
            let (table, set) = match l.regex.as_ref().map(Re::quick) {
                Some(Quick::At(0, set)) => (&mut ix.first, set),
                Some(Quick::At(1, set)) => (&mut ix.second, set),
                Some(Quick::Last(set)) => (&mut ix.last, set),
                _ => {
                    ix.always |= bit;
                    continue;
                }
            };
            for b in 0..256usize {
                if set[b >> 6] & (1 << (b & 63)) != 0 {
                    table[b] |= bit;
                }
            }
        }
        Some(ix)
    }

    /// The regexes that may match `uri`.
    #[inline]
    fn candidates(&self, uri: &[u8]) -> u64 {
        let at = |t: &[u64; 256], b: Option<&u8>| b.map_or(0, |&b| t[usize::from(b)]);
        self.always
            | at(&self.first, uri.first())
            | at(&self.second, uri.get(1))
            | at(&self.last, uri.last())
    }
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
        let index = RegexIndex::new(&regex);
        let by_second = PrefixIndex::new(&prefix);
        Locations {
            prefix,
            regex,
            index,
            by_second,
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.prefix.is_empty() && self.regex.is_empty()
    }

    /// Find the location for `uri` (regex locations tested with plain matching).
    /// Every location of this level (not the nested ones), prefix ones first.
    pub fn iter(&self) -> impl Iterator<Item = &Location> {
        self.prefix.iter().chain(self.regex.iter())
    }

    pub fn find(&self, uri: &[u8]) -> Option<&Location> {
        match self.search(uri, &mut |re: &Re| re.is_match(uri)) {
            Found::Loc(l) => Some(l),
            _ => None,
        }
    }

    /// Find the location for `uri`; `exec` runs a location's regex (and
    /// records its captures).
    pub fn search<F: FnMut(&Re) -> bool>(&self, uri: &[u8], exec: &mut F) -> Found<'_> {
        match self.is_empty() {
            true => Found::None,
            false => self.find_inner(uri, exec).0,
        }
    }

    /// Returns the match and whether the search is final (exact, `^~`,
    /// regex, or an auto-redirect). Not called for an empty level (the callers look first: most nested
    /// levels are empty, and entering one costs more than the check).
    fn find_inner<F: FnMut(&Re) -> bool>(&self, uri: &[u8], exec: &mut F) -> (Found<'_>, bool) {
        let mut best = None;
        let mut stop_regex = false;
        let mut add_slash = None;
        // Longest first: the patterns that can match (or be the URI plus
        // a slash), through the index when there is one.
        let (indexed, all): (&[u32], &[Location]) = match (&self.by_second, uri.get(1)) {
            (Some(ix), Some(&b)) => (&ix.buckets[usize::from(b)], &[]),
            _ => {
                let from = self
                    .prefix
                    .partition_point(|l| l.pattern.len() > uri.len() + 1);
                (&[], &self.prefix[from..])
            }
        };
        let at = indexed.iter().map(|&i| &self.prefix[i as usize]);
        for l in at.chain(all) {
            let p = l.pattern.as_bytes();
            if p.len() > uri.len() {
                if l.auto_redirect
                    && p.len() == uri.len() + 1
                    && p.ends_with(b"/")
                    && p.starts_with(uri)
                {
                    add_slash = Some(l);
                }
                continue;
            }
            // The last byte of the pattern tells most misses apart at once.
            if p.last().is_some_and(|&b| uri[p.len() - 1] != b) {
                continue;
            }
            match l.kind {
                LocKind::Exact if uri == p => return (Found::Loc(l), true),
                LocKind::Prefix | LocKind::PrefixNoRegex if uri.starts_with(p) => {
                    // A location named exactly the URI beats the slashed one.
                    if let Some(a) = add_slash
                        && p.len() < uri.len()
                    {
                        return (Found::AddSlash(a), true);
                    }
                    let (nested, done) = match l.nested.is_empty() {
                        true => (Found::None, false),
                        false => l.nested.find_inner(uri, exec),
                    };
                    if done {
                        return (nested, true);
                    }
                    stop_regex = l.kind == LocKind::PrefixNoRegex;
                    best = Some(match nested {
                        Found::Loc(n) => n,
                        _ => l,
                    });
                    break;
                }
                _ => {}
            }
        }
        if let Some(a) = add_slash
            && best.is_none()
        {
            return (Found::AddSlash(a), true);
        }
        if !stop_regex && !self.regex.is_empty() {
            let hit = match &self.index {
                Some(ix) => {
                    let mut mask = ix.candidates(uri);
                    let mut hit = None;
                    while mask != 0 {
                        let l = &self.regex[mask.trailing_zeros() as usize];
                        mask &= mask - 1;
                        if l.regex.as_ref().is_some_and(&mut *exec) {
                            hit = Some(l);
                            break;
                        }
                    }
                    hit
                }
                None => self
                    .regex
                    .iter()
                    .find(|l| l.regex.as_ref().is_some_and(&mut *exec)),
            };
            if let Some(l) = hit {
                let found = match l.nested.is_empty() {
                    true => Found::Loc(l),
                    false => match l.nested.find_inner(uri, exec).0 {
                        Found::None => Found::Loc(l),
                        f => f,
                    },
                };
                return (found, true);
            }
        }
        (best.map_or(Found::None, Found::Loc), stop_regex)
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
    /// Server-level rewrite script, `try_files` and regex names.
    pub phases: Phases,
    /// The variables the configuration declares (`set`, `map`, captures).
    pub vars: Arc<VarTable>,
    /// Modules' data of this server, built when it was resolved (TLS).
    pub ext: Extensions,
    /// The hooks a request runs.
    pub pipeline: Arc<Pipeline>,
}

impl Server {
    /// The location serving `uri`, or `None` for the server level itself.
    pub fn location(&self, uri: &[u8]) -> Option<&Location> {
        self.locations.find(uri)
    }

    /// This server's location at `target` (one of its locations, nested or
    /// named, found again by address).
    pub fn locate(&self, target: *const Location) -> Option<&Location> {
        fn walk<'l>(
            mut ls: impl Iterator<Item = &'l Location>,
            target: *const Location,
        ) -> Option<&'l Location> {
            ls.find_map(|l| match std::ptr::eq(l, target) {
                true => Some(l),
                false => walk(l.nested.iter(), target),
            })
        }
        walk(self.locations.iter().chain(self.named.values()), target)
    }

    /// The first name, as `$server_name` gives it: `.example.com` reads
    /// `example.com`, as in nginx.
    pub fn name(&self) -> &str {
        let n = self.names.first().map_or("", String::as_str);
        n.strip_prefix('.').unwrap_or(n)
    }
}

/// The servers reachable through one listening address.
#[derive(Debug)]
pub struct VirtualHosts {
    pub default: Arc<Server>,
    exact: rustc_hash::FxHashMap<String, Arc<Server>>,
    /// `*.example.com` stored as ".example.com", longest first.
    lead_wild: Vec<(String, Arc<Server>)>,
    /// `www.example.*` stored as "www.example.", longest first.
    trail_wild: Vec<(String, Arc<Server>)>,
    regex: Vec<(Re, Arc<Server>)>,
}

impl VirtualHosts {
    /// Build from the servers listening on one address, in configuration order;
    /// `default` is the `default_server` one (or the first).
    pub fn new(servers: &[Arc<Server>], default: Arc<Server>) -> Self {
        let mut v = VirtualHosts {
            default,
            exact: Default::default(),
            lead_wild: Vec::new(),
            trail_wild: Vec::new(),
            regex: Vec::new(),
        };
        for s in servers {
            // The `~` names, compiled in order (caseless) when the server was read.
            v.regex
                .extend(s.phases.name_regex.iter().map(|re| (re.clone(), s.clone())));
            for n in &s.names {
                if n.starts_with('~') {
                    continue;
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

    /// Every server reachable here, the default first (a server with
    /// several names comes more than once).
    pub fn servers(&self) -> impl Iterator<Item = &Arc<Server>> {
        std::iter::once(&self.default)
            .chain(self.exact.values())
            .chain(self.lead_wild.iter().map(|(_, s)| s))
            .chain(self.trail_wild.iter().map(|(_, s)| s))
            .chain(self.regex.iter().map(|(_, s)| s))
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
                if re.is_match(host.as_bytes()) {
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
            LocKind::Regex { caseless } => {
                Some(Re::new(pattern, caseless, &mut crate::core::vars::Vars::new(&[])).unwrap())
            }
            _ => None,
        };
        Location {
            kind,
            pattern: pattern.into(),
            regex,
            conf: Arc::new(LocConf::defaults(&[])),
            alias: None,
            alias_prefix: None,
            content: None,
            auto_redirect: false,
            phases: Phases::default(),
            nested: Locations::new(nested),
            limit_except: None,
            ifs: Vec::new(),
        }
    }

    fn auto(pattern: &str) -> Location {
        Location {
            auto_redirect: true,
            ..loc(LocKind::Prefix, pattern, vec![])
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
    fn auto_redirect() {
        let ls = Locations::new(vec![
            loc(LocKind::Prefix, "/", vec![]),
            auto("/api/"),
            auto("/app/"),
            loc(LocKind::Prefix, "/app", vec![]),
            loc(LocKind::Regex { caseless: false }, "^/api$", vec![]),
        ]);
        assert!(matches!(
            ls.search(b"/api", &mut |r: &Re| r.is_match(b"/api")),
            Found::AddSlash(_)
        ));
        assert_eq!(which(&ls, "/api/x").as_deref(), Some("/api/"));
        // A location named exactly the URI wins.
        assert_eq!(which(&ls, "/app").as_deref(), Some("/app"));
        assert_eq!(which(&ls, "/ap").as_deref(), Some("/"));
        let only = Locations::new(vec![auto("/x/")]);
        assert!(matches!(
            only.search(b"/x", &mut |_: &Re| false),
            Found::AddSlash(_)
        ));
        assert!(matches!(
            only.search(b"/y", &mut |_: &Re| false),
            Found::None
        ));
    }

    #[test]
    fn indexed_prefix_search_answers_as_a_scan() {
        let all = || {
            vec![
                loc(LocKind::Exact, "/", vec![]),
                loc(LocKind::Prefix, "/", vec![]),
                loc(LocKind::Exact, "/healthz", vec![]),
                loc(LocKind::Prefix, "/home/", vec![]),
                loc(LocKind::Prefix, "/api/", vec![]),
                loc(LocKind::Prefix, "/api/v1/", vec![]),
                loc(LocKind::PrefixNoRegex, "/static/", vec![]),
                auto("/app/"),
                loc(LocKind::Prefix, "/app", vec![]),
                auto("/b/"),
                loc(LocKind::Prefix, "x", vec![]),
                loc(LocKind::Prefix, "", vec![]),
                loc(LocKind::Regex { caseless: true }, r"\.txt$", vec![]),
            ]
        };
        let indexed = Locations::new(all());
        assert!(indexed.by_second.is_some());
        let mut scan = Locations::new(all());
        scan.by_second = None;
        let name = |f: Found<'_>| match f {
            Found::Loc(l) => format!("loc {:?} {}", l.kind, l.pattern),
            Found::AddSlash(l) => format!("slash {}", l.pattern),
            Found::None => "none".into(),
        };
        for uri in [
            "",
            "/",
            "x",
            "xy",
            "/h",
            "/healthz",
            "/healthz/",
            "/home/a.TXT",
            "/api",
            "/api/",
            "/api/v1/x",
            "/static/a.txt",
            "/app",
            "/ap",
            "/app/x",
            "/b",
            "/b/",
            "/zzz.txt",
        ] {
            let u = uri.as_bytes();
            let exec = |r: &Re| r.is_match(u);
            assert_eq!(
                name(indexed.search(u, &mut { exec })),
                name(scan.search(u, &mut { exec })),
                "{uri}"
            );
        }
    }

    #[test]
    fn server_names() {
        let mk = |names: &[&str]| {
            let mut phases = Phases::default();
            for n in names {
                if let Some(re) = n.strip_prefix('~') {
                    let vars = &mut crate::core::vars::Vars::new(&[]);
                    phases.name_regex.push(Re::new(re, true, vars).unwrap());
                }
            }
            Arc::new(Server {
                names: names.iter().map(|s| s.to_string()).collect(),
                conf: Arc::new(LocConf::defaults(&[])),
                locations: Locations::default(),
                named: HashMap::new(),
                phases,
                vars: Arc::default(),
                ext: Extensions::default(),
                pipeline: Arc::default(),
            })
        };
        let a = mk(&["example.com", "www.example.com"]);
        let b = mk(&["*.example.com"]);
        let c = mk(&["mail.*"]);
        let d = mk(&["~^(?<user>.+)\\.example\\.net$"]);
        let e = mk(&["~^(?P<name>[a-z]+)\\Q.example.org\\E$"]);
        let vh = VirtualHosts::new(
            &[a.clone(), b.clone(), c.clone(), d.clone(), e.clone()],
            a.clone(),
        );
        assert!(Arc::ptr_eq(vh.select("bob.example.org"), &e));
        assert!(Arc::ptr_eq(vh.select("bob.exampleXorg"), &a));
        assert!(Arc::ptr_eq(vh.select("www.example.com"), &a));
        assert!(Arc::ptr_eq(vh.select("x.example.com"), &b));
        assert!(Arc::ptr_eq(vh.select("mail.example.org"), &c));
        assert!(Arc::ptr_eq(vh.select("bob.example.net"), &d));
        assert!(Arc::ptr_eq(vh.select("other.org"), &a));
        assert!(Arc::ptr_eq(vh.select(""), &a));
        assert_eq!(mk(&[".dot.example.com"]).name(), "dot.example.com");
    }
}
