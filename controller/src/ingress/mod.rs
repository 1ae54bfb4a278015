//! Ingress objects with ingress-nginx annotations → [`Model`].
//!
//! Ingresses of the class are taken oldest first (a host and path defined twice belong to
//! the older one). An Ingress with a bad or unsupported annotation, a snippet that is not
//! allowed, or an authentication secret that is missing is left out whole; a path whose
//! Service is missing answers 503; a TLS secret that is missing leaves its hosts on plain
//! HTTP. Each of these is a [`Problem`] on the Ingress.

pub mod annotations;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};

use crate::backends::{self, PortRef};
use crate::model::*;
use crate::snapshot::{ObjectRef, Problem, Snapshot};
use annotations::{IGNORED, PREFIX, Reader, SNIPPETS, SUPPORTED};

/// What the operator chose.
#[derive(Debug, Clone)]
pub struct Options {
    /// The IngressClass whose Ingresses are served.
    pub ingress_class: String,
    /// Whether `configuration-snippet` and `server-snippet` are taken.
    pub allow_snippets: bool,
}

/// A model and what was found on the way.
#[derive(Debug, Default)]
pub struct Translation {
    pub model: Model,
    pub problems: Vec<Problem>,
    /// Ingresses that are served (their status gets the published address).
    pub served: BTreeSet<ObjectRef>,
}

/// Whether an Ingress belongs to the class: by `ingressClassName`, the older
/// `kubernetes.io/ingress.class` annotation, or, with neither, the class being the default.
pub fn is_ours(snap: &Snapshot, ing: &Ingress, class: &str) -> bool {
    if let Some(c) = ing
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref())
    {
        return c == class;
    }
    if let Some(c) = ing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/ingress.class"))
    {
        return c == class;
    }
    snap.ingress_classes.iter().any(|ic| {
        ic.metadata.name.as_deref() == Some(class)
            && ic
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("ingressclass.kubernetes.io/is-default-class"))
                .is_some_and(|v| v == "true")
    })
}

/// The canary annotations of a canary Ingress.
#[derive(Debug, Clone, Default)]
struct Canary {
    header: Option<String>,
    header_value: Option<String>,
    header_pattern: Option<String>,
    cookie: Option<String>,
    weight: Option<u32>,
    weight_total: u32,
}

/// One Ingress's annotations, read.
#[derive(Debug, Clone)]
struct Conf {
    canary: Option<Canary>,
    policy: Policy,
    proxy: Proxy,
    redirect: Option<(u16, String)>,
    ssl_redirect: bool,
    force_ssl_redirect: bool,
    use_regex: bool,
    rewrite_target: Option<String>,
    balance: Balance,
    service_upstream: bool,
    default_backend: Option<String>,
    aliases: Vec<String>,
    server_snippet: Option<String>,
    client_auth: Option<ClientAuth>,
    from_to_www: bool,
}

struct Parsed<'a> {
    ing: &'a Ingress,
    oref: ObjectRef,
    conf: Conf,
}

/// The hosts' servers being built.
#[derive(Default)]
struct Host {
    tls: Option<Tls>,
    aliases: Vec<String>,
    snippets: Vec<String>,
    /// Locations by (path match) with the Ingress that defined them.
    locations: BTreeMap<PathMatch, (ObjectRef, Location)>,
}

/// Translate the Ingresses of the class.
pub fn translate(snap: &Snapshot, opts: &Options) -> Translation {
    let mut t = Translation::default();
    let mut ours: Vec<&Ingress> = snap
        .ingresses
        .iter()
        .filter(|i| is_ours(snap, i, &opts.ingress_class))
        .collect();
    ours.sort_by(|a, b| {
        (
            &a.metadata.creation_timestamp,
            &a.metadata.namespace,
            &a.metadata.name,
        )
            .cmp(&(
                &b.metadata.creation_timestamp,
                &b.metadata.namespace,
                &b.metadata.name,
            ))
    });
    let mut parsed = Vec::new();
    for ing in ours {
        let oref = ObjectRef::of(ing);
        match read_conf(snap, ing, opts, &mut t.model) {
            Ok((conf, warnings)) => {
                for w in warnings {
                    t.problems.push(problem(&oref, "IgnoredAnnotation", w));
                }
                parsed.push(Parsed { ing, oref, conf });
            }
            Err(errors) => {
                for e in errors {
                    t.problems.push(problem(
                        &oref,
                        "Refused",
                        format!("{e}; the Ingress is not served"),
                    ));
                }
            }
        }
    }

    // Hosts whose paths are all regular expressions (ingress-nginx's rule: one Ingress on
    // the host with use-regex or rewrite-target makes it so), and their certificates.
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    let mut regex_hosts = BTreeSet::new();
    for p in parsed.iter().filter(|p| p.conf.canary.is_none()) {
        for h in rule_hosts(p.ing) {
            if p.conf.use_regex || p.conf.rewrite_target.is_some() {
                regex_hosts.insert(h.clone());
            }
            hosts.entry(h).or_default();
        }
        tls(snap, p, &mut hosts, &mut t);
    }
    // Client certificates are asked for by host, as the oldest Ingress asking says; one
    // asking on a host without TLS is left out (served without, it would be less protected
    // than written).
    let mut no_tls = BTreeSet::new();
    for p in parsed.iter().filter(|p| p.conf.client_auth.is_some()) {
        for h in rule_hosts(p.ing) {
            if hosts.get(&h).is_none_or(|h| h.tls.is_none()) {
                let msg = format!(
                    "annotation {PREFIX}auth-tls-secret: host {} has no TLS certificate; the Ingress is not served",
                    host_text(&h)
                );
                t.problems.push(problem(&p.oref, "Refused", msg));
                no_tls.insert(p.oref.clone());
            }
        }
    }
    parsed.retain(|p| !no_tls.contains(&p.oref));
    for p in &parsed {
        let Some(c) = &p.conf.client_auth else {
            continue;
        };
        for h in rule_hosts(p.ing) {
            if let Some(tls) = hosts.get_mut(&h).and_then(|h| h.tls.as_mut())
                && tls.client.is_none()
            {
                tls.client = Some(c.clone());
            }
        }
    }

    for p in parsed.iter().filter(|p| p.conf.canary.is_none()) {
        for (host, path, path_type, backend) in paths(p.ing) {
            let h = hosts.entry(host.clone()).or_default();
            if let Some(s) = &p.conf.server_snippet
                && !h.snippets.contains(s)
            {
                h.snippets.push(s.clone());
            }
            for a in &p.conf.aliases {
                if !h.aliases.contains(a) {
                    h.aliases.push(a.clone());
                }
            }
            let tls_on = h.tls.is_some();
            let loc = main_location(snap, p, &path, backend, tls_on, &mut t);
            for m in matches(&path, &path_type, regex_hosts.contains(&host)) {
                let h = hosts.get_mut(&host).expect("host was added");
                if let Some((owner, _)) = h.locations.get(&m) {
                    let msg = format!(
                        "path {} of host {} is already served by Ingress {}/{}",
                        path,
                        host_text(&host),
                        owner.namespace,
                        owner.name
                    );
                    t.problems.push(problem(&p.oref, "DuplicatePath", msg));
                    continue;
                }
                let mut loc = loc.clone();
                loc.path = m.clone();
                h.locations.insert(m, (p.oref.clone(), loc));
            }
        }
        t.served.insert(p.oref.clone());
    }

    for p in parsed.iter().filter(|p| p.conf.canary.is_some()) {
        let canary = p.conf.canary.as_ref().expect("a canary");
        let mut attached = false;
        for (host, path, path_type, backend) in paths(p.ing) {
            let ms = matches(&path, &path_type, regex_hosts.contains(&host));
            let h = hosts.get_mut(&host);
            let main = h.as_ref().and_then(|h| {
                ms.iter().find_map(|m| match h.locations.get(m) {
                    Some((
                        _,
                        Location {
                            action: Action::Proxy(px),
                            ..
                        },
                    )) => Some(px.select.clone()),
                    _ => None,
                })
            });
            let (Some(h), Some(main)) = (h, main) else {
                let msg = format!(
                    "no Ingress serves path {path} of host {} for this canary",
                    host_text(&host)
                );
                t.problems.push(problem(&p.oref, "CanaryWithoutMain", msg));
                continue;
            };
            let up = match upstream_for(snap, p, backend, &mut t.model) {
                Ok(up) => up,
                Err(e) => {
                    t.problems.push(problem(&p.oref, "ServiceNotFound", e));
                    continue;
                }
            };
            // A canary without ready endpoints takes no requests (they stay on the main
            // Service), as in ingress-nginx.
            if t.model
                .upstreams
                .get(&up)
                .is_some_and(|u| u.peers.is_empty())
            {
                attached = true;
                continue;
            }
            let select = with_canary(main, canary, &up);
            for m in &ms {
                if let Some((
                    _,
                    Location {
                        action: Action::Proxy(px),
                        ..
                    },
                )) = h.locations.get_mut(m)
                {
                    px.select = select.clone();
                }
            }
            attached = true;
        }
        if attached {
            t.served.insert(p.oref.clone());
        }
    }

    // spec.defaultBackend of the oldest Ingress that has one answers the default server.
    let mut default = Server {
        default: true,
        names: vec!["_".into()],
        ..Server::default()
    };
    if let Some(p) = parsed
        .iter()
        .find(|p| p.conf.canary.is_none() && default_backend(p.ing).is_some())
    {
        let b = default_backend(p.ing).expect("checked");
        let mut loc = main_location(snap, p, "/", b, false, &mut t);
        loc.path = PathMatch::Prefix("/".into());
        default.locations.push(loc);
    }
    let default_host = hosts.remove("");
    if let Some(h) = default_host {
        for (_, (_, l)) in h.locations.into_iter().rev() {
            if !default.locations.iter().any(|d| d.path == l.path) {
                default.locations.push(l);
            }
        }
        default.snippets = h.snippets;
    }
    default
        .locations
        .sort_by(|a, b| b.path.text().cmp(a.path.text()));
    t.model.servers.push(default);

    // Host names; an alias naming one of them is left to that host's server.
    let names: BTreeSet<String> = hosts.keys().cloned().collect();
    let mut served: BTreeSet<String> = names.clone();
    for h in hosts.values() {
        served.extend(h.aliases.iter().cloned());
    }
    // from-to-www-redirect: the www. name (or the name without it) redirects to the host,
    // unless something else serves it.
    for p in parsed
        .iter()
        .filter(|p| p.conf.from_to_www && p.conf.canary.is_none())
    {
        for host in rule_hosts(p.ing) {
            let alt = match host.strip_prefix("www.") {
                Some(bare) => bare.to_string(),
                None => format!("www.{host}"),
            };
            if host.is_empty() || host.starts_with("*.") || !served.insert(alt.clone()) {
                continue;
            }
            let tls = hosts.get(&host).and_then(|h| h.tls.clone());
            let location = Location {
                path: PathMatch::Prefix("/".into()),
                policy: Policy {
                    access_log: true,
                    ..Policy::default()
                },
                action: Action::Redirect {
                    code: 308,
                    target: format!("$scheme://{host}$request_uri"),
                },
                origin: Origin::default(),
            };
            t.model.servers.push(Server {
                names: vec![alt],
                default: false,
                tls,
                locations: vec![location],
                snippets: Vec::new(),
            });
        }
    }
    for (host, h) in hosts {
        // A host only a left-out Ingress named is the catch-all server's.
        if h.locations.is_empty() && h.tls.is_none() {
            continue;
        }
        let mut names_of = vec![host];
        names_of.extend(h.aliases.into_iter().filter(|a| !names.contains(a)));
        // ingress-nginx orders locations by path, longest text first among the same prefix.
        let mut locations: Vec<Location> = h.locations.into_values().map(|(_, l)| l).collect();
        locations.sort_by(|a, b| b.path.text().cmp(a.path.text()));
        t.model.servers.push(Server {
            names: names_of,
            default: false,
            tls: h.tls,
            locations,
            snippets: h.snippets,
        });
    }
    t.problems.sort();
    t.problems.dedup();
    t
}

fn problem(o: &ObjectRef, reason: &str, message: String) -> Problem {
    Problem {
        object: o.clone(),
        reason: reason.to_string(),
        message,
    }
}

fn host_text(h: &str) -> &str {
    if h.is_empty() { "*" } else { h }
}

fn rule_hosts(ing: &Ingress) -> Vec<String> {
    let rules = ing.spec.as_ref().and_then(|s| s.rules.as_ref());
    rules
        .into_iter()
        .flatten()
        .map(|r| r.host.clone().unwrap_or_default())
        .collect()
}

fn default_backend(ing: &Ingress) -> Option<&IngressBackend> {
    ing.spec.as_ref()?.default_backend.as_ref()
}

/// (host, path, pathType, backend) of each path of the Ingress's rules.
fn paths(ing: &Ingress) -> Vec<(String, String, String, &IngressBackend)> {
    let mut v = Vec::new();
    for r in ing
        .spec
        .as_ref()
        .and_then(|s| s.rules.as_ref())
        .into_iter()
        .flatten()
    {
        for p in r.http.iter().flat_map(|h| &h.paths) {
            let path = p
                .path
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "/".into());
            v.push((
                r.host.clone().unwrap_or_default(),
                path,
                p.path_type.clone(),
                &p.backend,
            ));
        }
    }
    v
}

/// The locations a path makes. A Prefix path matches whole segments, as Kubernetes defines
/// it: `/foo` is `= /foo` and `/foo/`. On a regex host each is a caseless regex anchored at
/// the start (and, for Exact, at the end).
fn matches(path: &str, path_type: &str, regex: bool) -> Vec<PathMatch> {
    if regex {
        let pattern = if path_type == "Exact" {
            format!("{path}$")
        } else {
            path.to_string()
        };
        return vec![PathMatch::Regex {
            pattern,
            caseless: true,
        }];
    }
    if path_type == "Exact" {
        return vec![PathMatch::Exact(path.to_string())];
    }
    if path == "/" {
        return vec![PathMatch::Prefix("/".into())];
    }
    let bare = path.trim_end_matches('/');
    vec![
        PathMatch::Exact(bare.to_string()),
        PathMatch::Prefix(format!("{bare}/")),
    ]
}

fn tls(snap: &Snapshot, p: &Parsed, hosts: &mut BTreeMap<String, Host>, t: &mut Translation) {
    let ns = &p.oref.namespace;
    for entry in p
        .ing
        .spec
        .as_ref()
        .and_then(|s| s.tls.as_ref())
        .into_iter()
        .flatten()
    {
        let Some(secret) = &entry.secret_name else {
            continue;
        };
        let files = snap.secret(ns, secret).and_then(|s| {
            let d = s.data.as_ref()?;
            Some((d.get("tls.crt")?.0.clone(), d.get("tls.key")?.0.clone()))
        });
        let Some((crt, key)) = files else {
            let msg = format!(
                "TLS secret {ns}/{secret} is missing or lacks tls.crt and tls.key; its hosts are served on HTTP only"
            );
            t.problems.push(problem(&p.oref, "TLSSecretNotFound", msg));
            continue;
        };
        let certificate = add_file(&mut t.model, &format!("certs/{ns}-{secret}"), "crt", crt);
        let key = add_file(&mut t.model, &format!("certs/{ns}-{secret}"), "key", key);
        for h in entry.hosts.iter().flatten() {
            let host = hosts.entry(h.clone()).or_default();
            if host.tls.is_none() {
                host.tls = Some(Tls {
                    certificate: certificate.clone(),
                    key: key.clone(),
                    client: None,
                });
            }
        }
    }
}

/// Adds a file named by its contents' hash (so a changed secret is a new file, and the
/// serving configuration's files stay as they are until the new one is in place).
pub fn add_file(model: &mut Model, stem: &str, ext: &str, contents: Vec<u8>) -> String {
    let name = format!("{stem}-{:016x}.{ext}", fnv(&contents));
    model.files.insert(name.clone(), contents);
    name
}

/// FNV-1a, 64 bits: stable names for contents and settings.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The upstream serving a backend of the Ingress, added to the model.
fn upstream_for(
    snap: &Snapshot,
    p: &Parsed,
    b: &IngressBackend,
    model: &mut Model,
) -> Result<String, String> {
    let Some(svc) = &b.service else {
        return Err("a resource backend is not supported; only Service backends are".into());
    };
    let port = match &svc.port {
        Some(sp) => match (&sp.number, &sp.name) {
            (Some(n), _) => PortRef::Number(*n),
            (None, Some(name)) => PortRef::Name(name.clone()),
            (None, None) => PortRef::First,
        },
        None => PortRef::First,
    };
    let r = backends::resolve(
        snap,
        &p.oref.namespace,
        &svc.name,
        &port,
        p.conf.service_upstream,
    )?;
    let r = match (&p.conf.default_backend, r.peers.is_empty()) {
        // No endpoints: the default-backend annotation's Service answers instead.
        (Some(db), true) => backends::resolve(snap, &p.oref.namespace, db, &PortRef::First, false)?,
        _ => r,
    };
    Ok(add_upstream(model, &r, &p.conf.balance))
}

fn add_upstream(model: &mut Model, r: &backends::Resolved, balance: &Balance) -> String {
    let name = match balance {
        Balance::RoundRobin => r.name.clone(),
        b => format!("{}-{:08x}", r.name, fnv(format!("{b:?}").as_bytes()) as u32),
    };
    model.upstreams.insert(
        name.clone(),
        Upstream {
            peers: r.peers.clone(),
            balance: balance.clone(),
        },
    );
    name
}

fn main_location(
    snap: &Snapshot,
    p: &Parsed,
    path: &str,
    b: &IngressBackend,
    tls_on: bool,
    t: &mut Translation,
) -> Location {
    let c = &p.conf;
    let mut policy = c.policy.clone();
    if c.force_ssl_redirect || (c.ssl_redirect && tls_on) {
        policy.https_redirect = Some(308);
    }
    let service = b.service.as_ref();
    let origin = Origin {
        namespace: p.oref.namespace.clone(),
        name: p.oref.name.clone(),
        service: service.map(|s| s.name.clone()).unwrap_or_default(),
        port: service
            .and_then(|s| s.port.as_ref())
            .map(|sp| {
                sp.number
                    .map(|n| n.to_string())
                    .or(sp.name.clone())
                    .unwrap_or_default()
            })
            .unwrap_or_default(),
    };
    let placeholder = PathMatch::Prefix(path.to_string());
    if let Some((code, target)) = &c.redirect {
        return Location {
            path: placeholder,
            policy,
            action: Action::Redirect {
                code: *code,
                target: target.clone(),
            },
            origin,
        };
    }
    let action = match upstream_for(snap, p, b, &mut t.model) {
        Ok(up) => {
            let mut proxy = c.proxy.clone();
            proxy.select = Select::one(&up);
            if let Some(target) = &c.rewrite_target {
                proxy.rewrite = Some(Rewrite {
                    pattern: path.to_string(),
                    replacement: target.clone(),
                });
            }
            if let Some(db) = &c.default_backend
                && !proxy.intercept_errors.is_empty()
            {
                match backends::resolve(snap, &p.oref.namespace, db, &PortRef::First, false) {
                    Ok(r) => {
                        proxy.error_backend =
                            Some(add_upstream(&mut t.model, &r, &Balance::RoundRobin))
                    }
                    Err(e) => t.problems.push(problem(
                        &p.oref,
                        "ServiceNotFound",
                        format!("default-backend: {e}"),
                    )),
                }
            }
            Action::Proxy(Box::new(proxy))
        }
        Err(e) => {
            t.problems.push(problem(
                &p.oref,
                "ServiceNotFound",
                format!("{e}; path {path} answers 503"),
            ));
            Action::Status(503)
        }
    };
    Location {
        path: placeholder,
        policy,
        action,
        origin,
    }
}

/// The main location's selection with a canary's rules, in ingress-nginx's order: header,
/// then cookie, then weight.
fn with_canary(select: Select, c: &Canary, canary: &str) -> Select {
    let main = select.default.clone();
    let to_canary = Group::one(canary);
    let mut rules = Vec::new();
    if let Some(h) = &c.header {
        let input = Input::Header(h.clone());
        match (&c.header_value, &c.header_pattern) {
            (Some(v), _) => rules.push((
                vec![Condition {
                    input,
                    test: Test::Equals(v.clone()),
                }],
                to_canary.clone(),
            )),
            (None, Some(r)) => rules.push((
                vec![Condition {
                    input,
                    test: Test::Regex(r.clone()),
                }],
                to_canary.clone(),
            )),
            (None, None) => {
                rules.push((
                    vec![Condition {
                        input: input.clone(),
                        test: Test::Equals("always".into()),
                    }],
                    to_canary.clone(),
                ));
                rules.push((
                    vec![Condition {
                        input,
                        test: Test::Equals("never".into()),
                    }],
                    main.clone(),
                ));
            }
        }
    }
    if let Some(name) = &c.cookie {
        let input = Input::Cookie(name.clone());
        rules.push((
            vec![Condition {
                input: input.clone(),
                test: Test::Equals("always".into()),
            }],
            to_canary.clone(),
        ));
        rules.push((
            vec![Condition {
                input,
                test: Test::Equals("never".into()),
            }],
            main.clone(),
        ));
    }
    let default = match c.weight {
        Some(w) => {
            let mut members = main.0;
            let rest = c.weight_total.saturating_sub(w);
            for m in &mut members {
                m.1 = rest;
            }
            members.push((canary.to_string(), w));
            Group(members)
        }
        None => main,
    };
    Select { rules, default }
}

type Warnings = Vec<String>;

/// Reads an Ingress's annotations (errors leave it out; warnings are told).
fn read_conf(
    snap: &Snapshot,
    ing: &Ingress,
    opts: &Options,
    model: &mut Model,
) -> Result<(Conf, Warnings), Vec<String>> {
    let oref = ObjectRef::of(ing);
    let ns = oref.namespace.as_str();
    let mut r = Reader::new(ing.metadata.annotations.as_ref());
    let mut warnings = Vec::new();
    let mut refused = Vec::new();
    for name in r.names().collect::<Vec<_>>() {
        if IGNORED.contains(&name) {
            warnings.push(format!(
                "annotation {PREFIX}{name} has no effect: vireo has no such module"
            ));
        } else if SNIPPETS.contains(&name) && !opts.allow_snippets {
            refused.push(format!(
                "annotation {PREFIX}{name} is refused: snippets put raw configuration in the server (start the controller with --allow-snippets to take them)"
            ));
        } else if !SUPPORTED.contains(&name) {
            refused.push(format!(
                "annotation {PREFIX}{name} is not supported by vireo (docs/ingress.md)"
            ));
        }
    }

    let canary = match r.bool("canary") {
        Some(true) => Some(Canary {
            header: r.checked("canary-by-header", |v| {
                check(annotations::is_token(v), "a header name")
            }),
            header_value: r.checked("canary-by-header-value", annotations::plain),
            header_pattern: r.checked("canary-by-header-pattern", |v| {
                check(
                    !v.contains('"') && !v.chars().any(char::is_control),
                    "a regular expression",
                )
            }),
            cookie: r.checked("canary-by-cookie", |v| {
                check(
                    annotations::is_variable_name(v),
                    "a cookie name of letters, digits and _",
                )
            }),
            weight_total: r.number("canary-weight-total", 1_000_000).unwrap_or(100) as u32,
            weight: r.number("canary-weight", 1_000_000).map(|w| w as u32),
        }),
        _ => None,
    };
    if let Some(c) = &canary
        && c.weight.is_some_and(|w| w > c.weight_total)
    {
        refused.push(format!(
            "annotation {PREFIX}canary-weight is larger than canary-weight-total ({})",
            c.weight_total
        ));
    }

    let mut policy = Policy {
        access_log: r.bool("enable-access-log").unwrap_or(true),
        ..Policy::default()
    };
    policy.rewrite_log = r.bool("enable-rewrite-log").unwrap_or(false);
    policy.app_root = r.checked("app-root", annotations::path);
    policy.client_max_body_size = r.size("proxy-body-size");
    policy.client_body_buffer_size = r.size("client-body-buffer-size");
    policy.allow = r.cidrs("whitelist-source-range").unwrap_or_default();
    policy.deny = r.cidrs("denylist-source-range").unwrap_or_default();
    policy.satisfy_any = r
        .checked("satisfy", |v| check(v == "any" || v == "all", "any or all"))
        .as_deref()
        == Some("any");
    policy.snippet = if opts.allow_snippets {
        r.raw("configuration-snippet").map(String::from)
    } else {
        None
    };

    policy.limit_rate = r.number("limit-rate", u32::MAX.into()).map(|n| n as u32);
    policy.limit_rate_after = r
        .number("limit-rate-after", u32::MAX.into())
        .map(|n| n as u32);
    // Rate limits: zones of this Ingress, keyed by the client address.
    let zone_base: String = format!("{ns}_{}", oref.name)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let exempt = r.cidrs("limit-whitelist").unwrap_or_default();
    let multiplier = r.number("limit-burst-multiplier", 1000).unwrap_or(5) as u32;
    if let Some(n) = r.number("limit-connections", 1_000_000) {
        let name = format!("{zone_base}_conn");
        model.zones.push(Zone {
            name: name.clone(),
            kind: ZoneKind::Connections,
            exempt: exempt.clone(),
        });
        policy.limit_conn = Some((name, n as u32));
    }
    for (key, per_minute) in [("limit-rpm", true), ("limit-rps", false)] {
        if let Some(n) = r.number(key, 1_000_000) {
            let name = format!("{zone_base}_{}", if per_minute { "rpm" } else { "rps" });
            let rate = n as u32;
            model.zones.push(Zone {
                name: name.clone(),
                kind: ZoneKind::Requests { rate, per_minute },
                exempt: exempt.clone(),
            });
            policy.limit_req.push(LimitReq {
                zone: name,
                burst: rate.saturating_mul(multiplier),
            });
        }
    }

    // Basic authentication from a secret.
    match r
        .checked("auth-type", |v| {
            check(v == "basic" || v == "digest", "basic or digest")
        })
        .as_deref()
    {
        Some("digest") => refused.push(format!(
            "annotation {PREFIX}auth-type digest is not supported by vireo (use basic)"
        )),
        Some(_) => match r.checked("auth-secret", annotations::plain) {
            None => refused.push(format!(
                "annotation {PREFIX}auth-type basic needs {PREFIX}auth-secret"
            )),
            Some(secret) => {
                let (sns, sname) = secret.split_once('/').unwrap_or((ns, secret.as_str()));
                let map_form = r
                    .checked("auth-secret-type", |v| {
                        check(v == "auth-file" || v == "auth-map", "auth-file or auth-map")
                    })
                    .as_deref()
                    == Some("auth-map");
                match htpasswd(snap, sns, sname, map_form) {
                    Ok(text) => {
                        let file =
                            add_file(model, &format!("auth/{sns}-{sname}"), "htpasswd", text);
                        let realm = r
                            .checked("auth-realm", |_| Ok(()))
                            .unwrap_or_else(|| "Authentication Required".into());
                        policy.basic_auth = Some(BasicAuth { realm, file });
                    }
                    Err(e) => refused.push(e),
                }
            }
        },
        None => {}
    }

    // External authentication.
    if let Some(url) = r.checked("auth-url", annotations::url) {
        policy.external_auth = Some(ExternalAuth {
            url,
            method: r.checked("auth-method", |v| {
                check(v.bytes().all(|b| b.is_ascii_uppercase()), "an HTTP method")
            }),
            signin: r.checked("auth-signin", annotations::url),
            signin_redirect_param: r
                .checked("auth-signin-redirect-param", |v| {
                    check(annotations::is_token(v), "a parameter name")
                })
                .unwrap_or_else(|| "rd".into()),
            response_headers: r
                .list(
                    "auth-response-headers",
                    annotations::is_token,
                    "a header name",
                )
                .unwrap_or_default(),
            request_redirect: r.checked("auth-request-redirect", annotations::plain),
            always_set_cookie: r.bool("auth-always-set-cookie").unwrap_or(false),
        });
    }

    if r.bool("enable-cors") == Some(true) {
        policy.cors = Some(Cors {
            origins: r.list("cors-allow-origin", annotations::is_origin, "an origin").unwrap_or_else(|| vec!["*".into()]),
            methods: r
                .list("cors-allow-methods", |m| m.bytes().all(|b| b.is_ascii_alphabetic()), "a method")
                .map(|l| l.join(", "))
                .unwrap_or_else(|| "GET, PUT, POST, DELETE, PATCH, OPTIONS".into()),
            headers: r.list("cors-allow-headers", annotations::is_token, "a header name").map(|l| l.join(", ")).unwrap_or_else(|| {
                "DNT,Keep-Alive,User-Agent,X-Requested-With,If-Modified-Since,Cache-Control,Content-Type,Range,Authorization".into()
            }),
            expose_headers: r
                .list("cors-expose-headers", |h| h == "*" || annotations::is_token(h), "a header name")
                .map(|l| l.join(", "))
                .unwrap_or_default(),
            credentials: r.bool("cors-allow-credentials").unwrap_or(true),
            max_age: r.number("cors-max-age", u32::MAX.into()).unwrap_or(1_728_000) as u32,
        });
    }

    // Passing to the upstream.
    let protocol = match r
        .raw("backend-protocol")
        .map(str::to_ascii_uppercase)
        .as_deref()
    {
        None | Some("HTTP") => Protocol::Http,
        Some("HTTPS") => Protocol::Https,
        Some("GRPC") => Protocol::Grpc,
        Some("GRPCS") => Protocol::Grpcs,
        Some("FCGI") => Protocol::FastCgi,
        Some("AJP") => {
            refused.push(format!(
                "annotation {PREFIX}backend-protocol AJP is not supported by vireo"
            ));
            Protocol::Http
        }
        Some(other) => {
            refused.push(format!("annotation {PREFIX}backend-protocol: invalid value {other:?}: expected HTTP, HTTPS, GRPC, GRPCS or FCGI"));
            Protocol::Http
        }
    };
    let mut proxy = Proxy::to(protocol, "");
    let secs = |n: u64| n * 1000;
    proxy.timeouts = Timeouts {
        connect: r
            .number("proxy-connect-timeout", 86400)
            .or(Some(5))
            .map(secs),
        send: r.number("proxy-send-timeout", 86400).or(Some(60)).map(secs),
        read: r.number("proxy-read-timeout", 86400).or(Some(60)).map(secs),
    };
    proxy.buffering = r
        .checked("proxy-buffering", |v| {
            check(v == "on" || v == "off", "on or off")
        })
        .map(|v| v == "on");
    proxy.request_buffering = r
        .checked("proxy-request-buffering", |v| {
            check(v == "on" || v == "off", "on or off")
        })
        .map(|v| v == "on");
    proxy.buffer_size = r.size("proxy-buffer-size");
    proxy.buffers_number = r.number("proxy-buffers-number", 1024).map(|n| n as u32);
    proxy.max_temp_file_size = r.size("proxy-max-temp-file-size");
    proxy.http_version = r.checked("proxy-http-version", |v| {
        check(v == "1.0" || v == "1.1", "1.0 or 1.1")
    });
    proxy.next_upstream = r.checked("proxy-next-upstream", |v| {
        let ok = v.split_whitespace().all(|w| {
            matches!(
                w,
                "error"
                    | "timeout"
                    | "invalid_header"
                    | "http_500"
                    | "http_502"
                    | "http_503"
                    | "http_504"
                    | "http_403"
                    | "http_404"
                    | "http_429"
                    | "non_idempotent"
                    | "off"
            )
        });
        check(ok, "proxy_next_upstream's conditions")
    });
    proxy.next_upstream_timeout = r
        .number("proxy-next-upstream-timeout", 86400)
        .map(|n| n as u32);
    proxy.next_upstream_tries = r
        .number("proxy-next-upstream-tries", 1000)
        .map(|n| n as u32);
    if let Some(from) = r.checked("proxy-redirect-from", annotations::plain)
        && from != "off"
        && from != "default"
    {
        match r.checked("proxy-redirect-to", annotations::plain) {
            Some(to) => proxy.redirects.push((from, to)),
            None => refused.push(format!(
                "annotation {PREFIX}proxy-redirect-from needs {PREFIX}proxy-redirect-to"
            )),
        }
    }
    for (key, slot) in [
        ("proxy-cookie-domain", &mut proxy.cookie_domain),
        ("proxy-cookie-path", &mut proxy.cookie_path),
    ] {
        if let Some(v) = r.raw(key) {
            let parts: Vec<&str> = v.split_whitespace().collect();
            match parts.as_slice() {
                [from, to]
                    if annotations::plain(from).is_ok() && annotations::plain(to).is_ok() =>
                {
                    *slot = Some((from.to_string(), to.to_string()))
                }
                _ => refused.push(format!(
                    "annotation {PREFIX}{key}: invalid value {v:?}: expected two words, from and to"
                )),
            }
        }
    }
    if let Some(v) = r.checked("upstream-vhost", |v| {
        check(annotations::is_variable_text(v), "a host name")
    }) {
        proxy.set_headers.push(("Host".into(), v));
    }
    if let Some(v) = r.checked("x-forwarded-prefix", annotations::plain) {
        proxy.set_headers.push(("X-Forwarded-Prefix".into(), v));
    }
    if let Some(v) = r.checked("connection-proxy-header", |v| {
        check(annotations::is_token(v), "a Connection value")
    }) {
        proxy.set_headers.push(("Connection".into(), v));
    }
    proxy.intercept_errors = r
        .list(
            "custom-http-errors",
            |c| c.parse::<u16>().is_ok_and(|c| (300..600).contains(&c)),
            "an HTTP status",
        )
        .unwrap_or_default()
        .iter()
        .map(|c| c.parse().expect("checked"))
        .collect();
    if let Some(target) = r.checked("mirror-target", annotations::url) {
        proxy.mirror = Some(Mirror {
            target,
            request_body: r
                .checked("mirror-request-body", |v| {
                    check(v == "on" || v == "off", "on or off")
                })
                .as_deref()
                != Some("off"),
            host: r.checked("mirror-host", |v| {
                check(annotations::is_variable_text(v), "a host name")
            }),
        });
    }

    // TLS to the upstream: its certificate checked, ours presented.
    let on_off = |v: &str| check(v == "on" || v == "off", "on or off");
    let mut upstream_tls = UpstreamTls {
        verify: r.checked("proxy-ssl-verify", on_off).map(|v| v == "on"),
        verify_depth: r.number("proxy-ssl-verify-depth", 100).map(|n| n as u32),
        name: r.checked("proxy-ssl-name", |v| {
            check(annotations::is_variable_text(v), "a host name")
        }),
        server_name: r
            .checked("proxy-ssl-server-name", on_off)
            .map(|v| v == "on"),
        ciphers: r.checked("proxy-ssl-ciphers", annotations::plain),
        // Versions separated by spaces (as ingress-nginx writes them) or commas.
        protocols: r
            .checked("proxy-ssl-protocols", |v| {
                check(
                    tls_versions(v).all(|p| {
                        matches!(
                            p,
                            "SSLv2" | "SSLv3" | "TLSv1" | "TLSv1.1" | "TLSv1.2" | "TLSv1.3"
                        )
                    }),
                    "TLS versions such as TLSv1.2 TLSv1.3",
                )
            })
            .map(|v| tls_versions(&v).collect::<Vec<_>>().join(" ")),
        ..UpstreamTls::default()
    };
    if let Some(secret) = r.checked("proxy-ssl-secret", annotations::plain) {
        let (sns, sname) = secret.split_once('/').unwrap_or((ns, secret.as_str()));
        match snap.secret(sns, sname).and_then(|s| s.data.as_ref()) {
            Some(data) => {
                let stem = format!("certs/{sns}-{sname}");
                if let (Some(c), Some(k)) = (data.get("tls.crt"), data.get("tls.key")) {
                    upstream_tls.certificate = Some((
                        add_file(model, &stem, "crt", c.0.clone()),
                        add_file(model, &stem, "key", k.0.clone()),
                    ));
                }
                if let Some(ca) = data.get("ca.crt") {
                    upstream_tls.trusted = Some(add_file(model, &stem, "ca.crt", ca.0.clone()));
                }
            }
            None => refused.push(format!(
                "annotation {PREFIX}proxy-ssl-secret: secret {sns}/{sname} not found"
            )),
        }
    }
    if upstream_tls != UpstreamTls::default() {
        proxy.upstream_tls = Some(upstream_tls);
    }

    // Client certificates, verified against the CA of a secret (`ca.crt`).
    let client_auth = match r.checked("auth-tls-secret", annotations::plain) {
        None => None,
        Some(secret) => {
            let (sns, sname) = secret.split_once('/').unwrap_or((ns, secret.as_str()));
            let verify = r
                .checked("auth-tls-verify-client", |v| {
                    check(
                        matches!(v, "on" | "off" | "optional" | "optional_no_ca"),
                        "on, off, optional or optional_no_ca",
                    )
                })
                .unwrap_or_else(|| "on".into());
            let depth = r.number("auth-tls-verify-depth", 100).unwrap_or(1) as u32;
            let error_page = r.checked("auth-tls-error-page", annotations::url);
            policy.client_subject = r.checked("auth-tls-match-cn", |v| {
                check(
                    !v.contains('"') && !v.chars().any(char::is_control),
                    "a regular expression",
                )
            });
            for (h, v) in [
                ("ssl-client-verify", "$ssl_client_verify"),
                ("ssl-client-subject-dn", "$ssl_client_s_dn"),
                ("ssl-client-issuer-dn", "$ssl_client_i_dn"),
            ] {
                proxy.set_headers.push((h.into(), v.into()));
            }
            if r.bool("auth-tls-pass-certificate-to-upstream") == Some(true) {
                proxy
                    .set_headers
                    .push(("ssl-client-cert".into(), "$ssl_client_escaped_cert".into()));
            }
            let ca = snap
                .secret(sns, sname)
                .and_then(|s| s.data.as_ref()?.get("ca.crt"))
                .map(|b| b.0.clone());
            match ca {
                Some(ca) => Some(ClientAuth {
                    ca: add_file(model, &format!("certs/{sns}-{sname}"), "ca.crt", ca),
                    verify,
                    depth,
                    error_page,
                }),
                None => {
                    refused.push(format!(
                        "annotation {PREFIX}auth-tls-secret: secret {sns}/{sname} not found or without ca.crt"
                    ));
                    None
                }
            }
        }
    };

    let redirect = match (
        r.checked("permanent-redirect", annotations::url),
        r.checked("temporal-redirect", annotations::url),
    ) {
        (Some(to), _) => {
            let code = r.number("permanent-redirect-code", 599).unwrap_or(301) as u16;
            if !(300..=308).contains(&code) {
                refused.push(format!(
                    "annotation {PREFIX}permanent-redirect-code: {code} is not a redirect status"
                ));
            }
            Some((code, to))
        }
        (None, Some(to)) => Some((302, to)),
        (None, None) => None,
    };

    // Balancing: session cookie, else a hash key, else the method.
    let balance = match r.checked("affinity", |v| check(v == "cookie", "cookie")) {
        Some(_) => {
            let _ = r.checked("affinity-mode", |v| {
                check(
                    v == "balanced" || v == "persistent",
                    "balanced or persistent",
                )
            });
            Balance::Cookie(CookieAffinity {
                name: r
                    .checked("session-cookie-name", |v| {
                        check(
                            annotations::is_variable_name(v),
                            "a cookie name of letters, digits and _",
                        )
                    })
                    .unwrap_or_else(|| "INGRESSCOOKIE".into()),
                path: r
                    .checked("session-cookie-path", annotations::path)
                    .unwrap_or_else(|| "/".into()),
                domain: r.checked("session-cookie-domain", |v| {
                    check(annotations::is_host(v.trim_start_matches('.')), "a domain")
                }),
                max_age: r
                    .number("session-cookie-max-age", u64::MAX)
                    .or(r.number("session-cookie-expires", u64::MAX)),
                secure: r.bool("session-cookie-secure").unwrap_or(false),
                samesite: r.checked("session-cookie-samesite", |v| {
                    check(
                        matches!(v, "None" | "Lax" | "Strict"),
                        "None, Lax or Strict",
                    )
                }),
            })
        }
        None => match r.checked("upstream-hash-by", |v| {
            check(annotations::is_variable_text(v), "text with variables")
        }) {
            Some(key) => Balance::Hash(key),
            None => match r
                .checked("load-balance", |v| {
                    check(v == "round_robin" || v == "ewma", "round_robin or ewma")
                })
                .as_deref()
            {
                Some("ewma") => Balance::LeastConn,
                _ => Balance::RoundRobin,
            },
        },
    };

    let conf = Conf {
        canary,
        policy,
        proxy,
        redirect,
        ssl_redirect: r.bool("ssl-redirect").unwrap_or(true),
        force_ssl_redirect: r.bool("force-ssl-redirect").unwrap_or(false),
        from_to_www: r.bool("from-to-www-redirect").unwrap_or(false),
        use_regex: r.bool("use-regex").unwrap_or(false),
        rewrite_target: r.checked("rewrite-target", annotations::plain),
        balance,
        service_upstream: r.bool("service-upstream").unwrap_or(false),
        default_backend: r.checked("default-backend", |v| {
            check(annotations::is_host(v), "a Service name")
        }),
        aliases: r
            .list("server-alias", annotations::is_host, "a host name")
            .unwrap_or_default(),
        server_snippet: if opts.allow_snippets {
            r.raw("server-snippet").map(String::from)
        } else {
            None
        },
        client_auth,
    };
    refused.extend(r.errors);
    if refused.is_empty() {
        Ok((conf, warnings))
    } else {
        Err(refused)
    }
}

fn tls_versions(v: &str) -> impl Iterator<Item = &str> {
    v.split([',', ' ']).filter(|p| !p.is_empty())
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("expected {what}"))
    }
}

/// The password file of a basic-authentication secret: its `auth` key (an htpasswd file),
/// or with `auth-map` one `user:hash` line per key.
fn htpasswd(snap: &Snapshot, ns: &str, name: &str, map_form: bool) -> Result<Vec<u8>, String> {
    let data = snap
        .secret(ns, name)
        .and_then(|s| s.data.as_ref())
        .ok_or_else(|| format!("auth-secret {ns}/{name} not found"))?;
    if map_form {
        let mut out = Vec::new();
        for (user, hash) in data {
            out.extend_from_slice(user.as_bytes());
            out.push(b':');
            out.extend_from_slice(&hash.0);
            out.push(b'\n');
        }
        return Ok(out);
    }
    data.get("auth")
        .map(|b| b.0.clone())
        .ok_or_else(|| format!("auth-secret {ns}/{name} has no auth key"))
}

#[cfg(test)]
pub(crate) mod tests;
