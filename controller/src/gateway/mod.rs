//! Gateway API objects (GatewayClass, Gateway, HTTPRoute, GRPCRoute, ReferenceGrant) →
//! [`Model`], beside the Ingress front end in the same model.
//!
//! Gateways of a class whose `controllerName` is ours give listeners (HTTP, HTTPS with a TLS
//! Secret); routes attach to them by `parentRefs` where the listener allows the route's
//! namespace and kind and their hostnames intersect, and a hostname's server also holds the
//! matches of the wildcard names covering it. Each (hostname, path) is one location: the
//! route matches at that path become the rules of its [`Select`], in the Gateway API's
//! precedence (method, then most headers, then most query parameters, then the more
//! specific hostname, then the oldest route, then rule order). The location holds the
//! filters of the match taking precedence; a match with other filters is a jump to a named
//! location holding its own, and requests matching none go on to the location of the next
//! shorter prefix, as they would under the Gateway API. What the configuration cannot hold
//! is refused with a condition saying so, never served differently. Status conditions for
//! every Gateway and route come out with the model.

pub mod cluster;
pub mod types;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::backends::{self, PortRef};
use crate::ingress::{Translation, add_file};
use crate::model::*;
use crate::snapshot::{ObjectRef, Problem, Snapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use types::*;

pub const GROUP: &str = "gateway.networking.k8s.io";

/// The Gateway API objects the watches hold.
#[derive(Debug, Default, Clone)]
pub struct Objects {
    pub classes: Vec<GatewayClass>,
    pub gateways: Vec<Gateway>,
    pub http_routes: Vec<HttpRoute>,
    pub grpc_routes: Vec<GrpcRoute>,
    pub grants: Vec<ReferenceGrant>,
}

/// A status to write on an object: `kind`, namespace and name, and the whole `status`.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub status: Value,
}

/// A condition of a status, without its transition time (the writer adds it).
fn condition(type_: &str, ok: bool, reason: &str, message: &str, generation: i64) -> Value {
    json!({"type": type_, "status": if ok { "True" } else { "False" }, "reason": reason,
        "message": message, "observedGeneration": generation})
}

/// A listener of one of our Gateways, as routes see it.
struct Port {
    gateway: (String, String),
    name: String,
    hostname: Option<String>,
    port: u16,
    https: bool,
    tls: Option<Tls>,
    /// The namespaces whose routes may attach.
    from: Namespaces,
    kinds: Vec<String>,
    /// Why the listener is not accepted.
    refused: Option<(String, String)>,
    attached: u32,
}

/// `allowedRoutes.namespaces.from` of a listener.
enum Namespaces {
    /// The Gateway's namespace (the default).
    Same,
    All,
    /// The namespaces whose labels the selector matches.
    Selector(LabelSelector),
}

impl Namespaces {
    /// Does the listener of a Gateway in `gateway_ns` admit routes of `route_ns`?
    fn admits(&self, snap: &Snapshot, gateway_ns: &str, route_ns: &str) -> bool {
        match self {
            Namespaces::Same => gateway_ns == route_ns,
            Namespaces::All => true,
            Namespaces::Selector(sel) => snap.namespace(route_ns).is_some_and(|n| {
                selects(sel, n.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
            }),
        }
    }
}

/// Does the label selector match `labels`? (`matchLabels` and `matchExpressions` all
/// hold; an empty selector matches everything.)
fn selects(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = sel.match_labels.iter().flatten();
    let exprs = sel.match_expressions.iter().flatten();
    pairs.into_iter().all(|(k, v)| labels.get(k) == Some(v))
        && exprs.into_iter().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// Why a label selector cannot be used, if it cannot.
fn bad_selector(sel: &LabelSelector) -> Option<String> {
    sel.match_expressions.iter().flatten().find_map(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                Some(format!("selector: {} {} needs values", e.key, e.operator))
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => Some(format!(
                "selector: {} {} takes no values",
                e.key, e.operator
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => None,
            op => Some(format!("selector: unknown operator {op}")),
        }
    })
}

/// A route of either kind, as the translation reads it.
struct Route<'a> {
    kind: &'static str,
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    parents: &'a [ParentRef],
    hostnames: &'a [String],
    rules: Vec<Rule>,
    protocol: Protocol,
}

/// A rule: its matches, what its filters make, and its backends.
struct Rule {
    matches: Vec<(Vec<PathMatch>, Vec<Condition>)>,
    filters: Vec<Filter>,
    backends: Vec<BackendRef>,
    /// The limit on each wait for the backend, from `timeouts`.
    timeouts: Option<Timeouts>,
    /// Fields the rule has that vireo does not serve.
    unsupported: Vec<String>,
}

/// One match of one rule at one hostname, ready to be a location's rule.
#[derive(Clone)]
struct Entry {
    /// Precedence, lowest first: no method match, fewer header matches, fewer query
    /// parameter matches, a less specific hostname ([`host_rank`]), a younger route, a
    /// later rule and match.
    key: (bool, usize, usize, (bool, usize), String, usize),
    conds: Vec<Condition>,
    template: Location,
    group: Group,
    owner: ObjectRef,
}

/// Translate the Gateway API objects into `t` (beside its Ingresses), giving the statuses.
pub fn translate(
    snap: &Snapshot,
    objs: &Objects,
    controller_name: &str,
    t: &mut Translation,
) -> Vec<Status> {
    let mut statuses = Vec::new();
    let ours: Vec<&str> = objs
        .classes
        .iter()
        .filter(|c| c.spec.controller_name == controller_name)
        .map(|c| {
            let g = c.metadata.generation.unwrap_or_default();
            statuses.push(Status {
                kind: "GatewayClass",
                namespace: String::new(),
                name: c.name().to_string(),
                status: json!({"conditions": [condition("Accepted", true, "Accepted", "", g)]}),
            });
            c.name()
        })
        .collect();
    let gateways: Vec<&Gateway> = objs
        .gateways
        .iter()
        .filter(|g| ours.contains(&g.spec.gateway_class_name.as_str()))
        .collect();
    let mut ports: Vec<Port> = Vec::new();
    for g in &gateways {
        for l in &g.spec.listeners {
            ports.push(listener(snap, objs, g, l, &mut t.model));
        }
    }

    let mut routes: Vec<(Route, ObjectRef)> = Vec::new();
    for r in &objs.http_routes {
        routes.push((http_route(r), oref(r, "HTTPRoute")));
    }
    for r in &objs.grpc_routes {
        routes.push((grpc_route(r), oref(r, "GRPCRoute")));
    }
    routes.sort_by(|(a, _), (b, _)| {
        (&a.meta.creation_timestamp, &a.meta.namespace, &a.meta.name).cmp(&(
            &b.meta.creation_timestamp,
            &b.meta.namespace,
            &b.meta.name,
        ))
    });

    // Entries by hostname ("" for any) and path.
    let mut hosts: BTreeMap<String, BTreeMap<PathMatch, Vec<Entry>>> = BTreeMap::new();
    let mut https_hosts: BTreeMap<String, (Option<Tls>, bool)> = BTreeMap::new();
    for (age, (route, o)) in routes.iter().enumerate() {
        let ns = o.namespace.clone();
        let g = route.meta.generation.unwrap_or_default();
        let mut parents = Vec::new();
        let mut any_ours = false;
        let unsupported: Vec<String> = route
            .rules
            .iter()
            .flat_map(|r| r.unsupported.iter().cloned())
            .collect();
        // Backends, resolved once per route.
        let mut refs_ok = (true, "ResolvedRefs".to_string(), String::new());
        let mut groups = Vec::new();
        let mut mirrors = Vec::new();
        for rule in &route.rules {
            let mirror = rule.filters.iter().find_map(|f| f.request_mirror.as_ref());
            mirrors.push(mirror.and_then(|m| {
                match service_upstream(snap, objs, route.kind, &ns, &m.backend_ref, &mut t.model) {
                    Ok(u) => Some(u),
                    Err((reason, msg)) => {
                        if refs_ok.0 {
                            refs_ok = (false, reason.to_string(), format!("mirror: {msg}"));
                        }
                        None
                    }
                }
            }));
            groups.push(backend_group(
                snap,
                objs,
                route,
                &ns,
                &rule.backends,
                &mut refs_ok,
                &mut t.model,
            ));
        }
        for pr in route.parents {
            let pns = pr.namespace.clone().unwrap_or_else(|| ns.clone());
            if pr.group.as_deref().unwrap_or(GROUP) != GROUP
                || pr.kind.as_deref().unwrap_or("Gateway") != "Gateway"
                || !gateways
                    .iter()
                    .any(|gw| gw.namespace() == pns && gw.name() == pr.name)
            {
                continue;
            }
            any_ours = true;
            let mut accepted = (
                false,
                "NoMatchingParent",
                "no listener of the Gateway matches",
            );
            let mut served_hosts = Vec::new();
            for p in ports.iter_mut().filter(|p| {
                p.gateway == (pns.clone(), pr.name.clone())
                    && pr.section_name.as_ref().is_none_or(|s| *s == p.name)
                    && pr.port.is_none_or(|n| n == p.port)
                    && p.refused.is_none()
            }) {
                // The reason told is the first listener's that refuses, unless one takes it.
                if !p.from.admits(snap, &pns, &ns) || !p.kinds.iter().any(|k| k == route.kind) {
                    if accepted.0 {
                        continue;
                    }
                    accepted = (
                        false,
                        "NotAllowedByListeners",
                        "the listener does not allow routes of this kind or namespace",
                    );
                    continue;
                }
                let hs = intersect(p.hostname.as_deref(), route.hostnames);
                if hs.is_empty() {
                    if !accepted.0 && accepted.1 != "NotAllowedByListeners" {
                        accepted = (
                            false,
                            "NoMatchingListenerHostname",
                            "no hostname of the route matches the listener's",
                        );
                    }
                    continue;
                }
                p.attached += 1;
                accepted = (true, "Accepted", "");
                for h in hs {
                    served_hosts.push((h, p.https, p.port, p.tls.clone()));
                }
            }
            if accepted.0 && !unsupported.is_empty() {
                accepted = (false, "UnsupportedValue", "");
            }
            let message = if accepted.1 == "UnsupportedValue" {
                format!("{}; the route is not served", unsupported.join("; "))
            } else {
                accepted.2.to_string()
            };
            if !accepted.0 && accepted.1 == "UnsupportedValue" {
                t.problems
                    .push(problem(o, "UnsupportedValue", message.clone()));
            }
            if accepted.0 {
                for (h, https, port, tls) in served_hosts {
                    let e = https_hosts.entry(h.clone()).or_default();
                    if https {
                        e.0 = e.0.clone().or(tls);
                    } else {
                        e.1 = true;
                    }
                    add_entries(
                        route,
                        (&groups, &mirrors),
                        https,
                        port,
                        (age, o),
                        hosts.entry(h.clone()).or_default(),
                    );
                }
            }
            let mut pref = serde_json::to_value(pr).unwrap_or_default();
            pref["namespace"] = json!(pns);
            parents.push(json!({
                "parentRef": pref,
                "controllerName": controller_name,
                "conditions": [
                    condition("Accepted", accepted.0, accepted.1, &message, g),
                    condition("ResolvedRefs", refs_ok.0, &refs_ok.1, &refs_ok.2, g),
                ],
            }));
        }
        if !refs_ok.0 {
            t.problems.push(problem(o, &refs_ok.1, refs_ok.2.clone()));
        }
        if any_ours {
            statuses.push(Status {
                kind: route.kind,
                namespace: ns,
                name: o.name.clone(),
                status: json!({ "parents": parents }),
            });
        }
    }

    // Matches left out (a path an Ingress serves).
    let mut dropped = Vec::new();
    for (host, paths) in with_covering(hosts) {
        let (tls, plain) = https_hosts.get(&host).cloned().unwrap_or_default();
        let locations = locations(paths);
        merge(t, &host, tls, plain, locations, &mut dropped);
    }
    partially_invalid(&mut statuses, &dropped);
    t.problems.extend(dropped);

    for g in &gateways {
        let gen_ = g.metadata.generation.unwrap_or_default();
        let mut listeners = Vec::new();
        let mut all_ok = true;
        for p in ports
            .iter()
            .filter(|p| p.gateway == (g.namespace().to_string(), g.name().to_string()))
        {
            let (ok, reason, msg) = match &p.refused {
                Some((r, m)) => (false, r.as_str(), m.as_str()),
                None => (true, "Accepted", ""),
            };
            all_ok &= ok;
            let resolved = if reason == "InvalidCertificateRef" || reason == "RefNotPermitted" {
                condition("ResolvedRefs", false, reason, msg, gen_)
            } else {
                condition("ResolvedRefs", true, "ResolvedRefs", "", gen_)
            };
            let kinds: Vec<Value> = p
                .kinds
                .iter()
                .map(|k| json!({"group": GROUP, "kind": k}))
                .collect();
            let programmed = if ok { "Programmed" } else { "Invalid" };
            listeners.push(json!({
                "name": p.name,
                "supportedKinds": kinds,
                "attachedRoutes": p.attached,
                "conditions": [
                    condition("Accepted", ok, reason, msg, gen_),
                    condition("Programmed", ok, programmed, msg, gen_),
                    resolved,
                ],
            }));
            if let Some((r, m)) = &p.refused {
                t.problems.push(problem(
                    &oref(*g, "Gateway"),
                    r,
                    format!("listener {}: {m}", p.name),
                ));
            }
        }
        let msg = if all_ok {
            ""
        } else {
            "some listeners are not served"
        };
        statuses.push(Status {
            kind: "Gateway",
            namespace: g.namespace().to_string(),
            name: g.name().to_string(),
            status: json!({
                "conditions": [
                    condition("Accepted", true, "Accepted", msg, gen_),
                    condition("Programmed", true, "Programmed", msg, gen_),
                ],
                "listeners": listeners,
            }),
        });
    }
    t.problems.sort();
    t.problems.dedup();
    statuses
}

fn oref<S>(o: &Obj<S>, kind: &str) -> ObjectRef {
    ObjectRef {
        kind: kind.to_string(),
        api_version: format!("{GROUP}/v1"),
        namespace: o.namespace().to_string(),
        name: o.name().to_string(),
        uid: o.metadata.uid.clone(),
    }
}

fn problem(o: &ObjectRef, reason: &str, message: String) -> Problem {
    Problem {
        object: o.clone(),
        reason: reason.to_string(),
        message,
    }
}

/// Whether a ReferenceGrant in `to_ns` lets a `from_kind` of `from_ns` refer to the
/// `to_kind` (core group) named `name`.
fn granted(
    objs: &Objects,
    from_kind: &str,
    from_ns: &str,
    to_ns: &str,
    to_kind: &str,
    name: &str,
) -> bool {
    from_ns == to_ns
        || objs.grants.iter().any(|g| {
            g.namespace() == to_ns
                && g.spec
                    .from
                    .iter()
                    .any(|f| f.group == GROUP && f.kind == from_kind && f.namespace == from_ns)
                && g.spec.to.iter().any(|t| {
                    t.group.is_empty()
                        && t.kind == to_kind
                        && t.name.as_deref().is_none_or(|n| n == name)
                })
        })
}

fn listener(snap: &Snapshot, objs: &Objects, g: &Gateway, l: &Listener, model: &mut Model) -> Port {
    let mut p = Port {
        gateway: (g.namespace().to_string(), g.name().to_string()),
        name: l.name.clone(),
        hostname: l.hostname.clone(),
        port: l.port,
        https: l.protocol == "HTTPS",
        tls: None,
        from: Namespaces::Same,
        kinds: Vec::new(),
        refused: None,
        attached: 0,
    };
    let refuse = |reason: &str, msg: String| Some((reason.to_string(), msg));
    let namespaces = l
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match (
        namespaces.and_then(|n| n.from.as_deref()),
        namespaces.and_then(|n| n.selector.as_ref()),
    ) {
        (None | Some("Same"), _) => {}
        (Some("All"), _) => p.from = Namespaces::All,
        (Some("Selector"), None) => {
            p.refused = refuse(
                "Invalid",
                "allowedRoutes.namespaces.from Selector needs a selector".into(),
            )
        }
        (Some("Selector"), Some(sel)) => match bad_selector(sel) {
            Some(why) => p.refused = refuse("Invalid", format!("allowedRoutes.namespaces.{why}")),
            None => p.from = Namespaces::Selector(sel.clone()),
        },
        (Some(other), _) => {
            p.refused = refuse(
                "UnsupportedValue",
                format!("allowedRoutes.namespaces.from {other} is not one of Same, All, Selector"),
            )
        }
    }
    let supported = ["HTTPRoute", "GRPCRoute"];
    let asked = l
        .allowed_routes
        .as_ref()
        .map(|a| &a.kinds[..])
        .unwrap_or_default();
    p.kinds = if asked.is_empty() {
        supported.iter().map(|s| s.to_string()).collect()
    } else {
        asked
            .iter()
            .filter(|k| {
                k.group.as_deref().unwrap_or(GROUP) == GROUP && supported.contains(&k.kind.as_str())
            })
            .map(|k| k.kind.clone())
            .collect()
    };
    if p.kinds.is_empty() && p.refused.is_none() {
        p.refused = refuse(
            "InvalidRouteKinds",
            "none of the listener's route kinds is supported (HTTPRoute, GRPCRoute are)".into(),
        );
    }
    match l.protocol.as_str() {
        "HTTP" => {}
        "HTTPS" => {
            let tls = l.tls.clone().unwrap_or_default();
            if tls.mode.as_deref().unwrap_or("Terminate") != "Terminate" {
                p.refused = refuse(
                    "UnsupportedValue",
                    "TLS mode Passthrough is not supported; vireo terminates TLS".into(),
                );
            } else {
                match tls.certificate_refs.first() {
                    None => {
                        p.refused = refuse(
                            "InvalidCertificateRef",
                            "an HTTPS listener needs a certificateRef".into(),
                        )
                    }
                    Some(c) => match certificate(snap, objs, g, c, model) {
                        Ok(t) => p.tls = Some(t),
                        Err((r, m)) => p.refused = refuse(r, m),
                    },
                }
            }
        }
        other => {
            p.refused = refuse(
                "UnsupportedProtocol",
                format!("protocol {other} is not supported (HTTP and HTTPS are)"),
            )
        }
    }
    p
}

/// Whether a reference names an object of the core group of this kind (the default).
fn names_core(r: &ObjRef, kind: &str) -> bool {
    r.group.as_deref().unwrap_or_default().is_empty() && r.kind.as_deref().unwrap_or(kind) == kind
}

/// The certificate and key of a listener's TLS Secret.
fn certificate(
    snap: &Snapshot,
    objs: &Objects,
    g: &Gateway,
    c: &ObjRef,
    model: &mut Model,
) -> Result<Tls, (&'static str, String)> {
    let ns = c
        .namespace
        .clone()
        .unwrap_or_else(|| g.namespace().to_string());
    if !names_core(c, "Secret") {
        return Err((
            "InvalidCertificateRef",
            "a certificateRef must name a Secret".into(),
        ));
    }
    if !granted(objs, "Gateway", g.namespace(), &ns, "Secret", &c.name) {
        return Err((
            "RefNotPermitted",
            format!(
                "no ReferenceGrant in {ns} lets Gateways of {} use Secret {}",
                g.namespace(),
                c.name
            ),
        ));
    }
    let files = snap.secret(&ns, &c.name).and_then(|s| {
        let d = s.data.as_ref()?;
        Some((d.get("tls.crt")?.0.clone(), d.get("tls.key")?.0.clone()))
    });
    let Some((crt, key)) = files else {
        return Err((
            "InvalidCertificateRef",
            format!(
                "Secret {ns}/{} is missing or lacks tls.crt and tls.key",
                c.name
            ),
        ));
    };
    let stem = format!("certs/{ns}-{}", c.name);
    Ok(Tls {
        certificate: add_file(model, &stem, "crt", crt),
        key: add_file(model, &stem, "key", key),
        client: None,
    })
}

/// Does the `*.` wildcard name `wild` take every name `h` takes (a subdomain, or a
/// narrower wildcard)? `""` (any name) covers every other.
fn covers(wild: &str, h: &str) -> bool {
    (wild.is_empty() && !h.is_empty())
        || wild
            .strip_prefix('*')
            .is_some_and(|suffix| h.len() > suffix.len() && h.ends_with(suffix))
}

/// How specific a route's hostname is, for [`Entry::key`]: a name without wildcard
/// first, then the longer.
fn host_rank(h: &str) -> (bool, usize) {
    (h.is_empty() || h.starts_with('*'), usize::MAX - h.len())
}

/// Each hostname's entries together with those of the wildcard names (and of `""`) that
/// cover it: a request is matched against every route whose hostnames take its Host, as
/// the Gateway API has it, and nginx gives each request one server, the most specific.
/// Entries of a more specific hostname win ties.
fn with_covering(
    hosts: BTreeMap<String, BTreeMap<PathMatch, Vec<Entry>>>,
) -> BTreeMap<String, BTreeMap<PathMatch, Vec<Entry>>> {
    let mut out = BTreeMap::new();
    for h in hosts.keys() {
        let mut paths: BTreeMap<PathMatch, Vec<Entry>> = BTreeMap::new();
        for (k, theirs) in hosts.iter().filter(|(k, _)| *k == h || covers(k, h)) {
            for (pm, entries) in theirs {
                paths
                    .entry(pm.clone())
                    .or_default()
                    .extend(entries.iter().map(|e| {
                        let mut e = e.clone();
                        e.key.3 = host_rank(k);
                        e
                    }));
            }
        }
        out.insert(h.clone(), paths);
    }
    out
}

/// The hostnames a route serves on a listener: the intersection of theirs (a `*.` wildcard
/// takes any subdomain), `""` for any.
fn intersect(listener: Option<&str>, route: &[String]) -> Vec<String> {
    let Some(l) = listener.filter(|l| !l.is_empty()) else {
        return if route.is_empty() {
            vec![String::new()]
        } else {
            route.to_vec()
        };
    };
    if route.is_empty() {
        return vec![l.to_string()];
    }
    let mut out = Vec::new();
    for h in route {
        let m = if h == l || covers(l, h) {
            Some(h.clone())
        } else if covers(h, l) {
            Some(l.to_string())
        } else {
            None
        };
        if let Some(m) = m
            && !out.contains(&m)
        {
            out.push(m);
        }
    }
    out
}

/// Header and query names usable as nginx variables.
fn name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn conditions(
    headers: &[NamedMatch],
    query: &[NamedMatch],
    method: Option<&str>,
    bad: &mut Vec<String>,
) -> Vec<Condition> {
    let mut out = Vec::new();
    for (what, list) in [("header", headers), ("query parameter", query)] {
        for m in list {
            if !name_ok(&m.name) {
                bad.push(format!(
                    "{what} name {:?} is not supported (letters, digits, - and _ are)",
                    m.name
                ));
                continue;
            }
            let test = match m.type_.as_deref().unwrap_or("Exact") {
                "Exact" => Test::Equals(m.value.clone()),
                "RegularExpression" => Test::Regex(m.value.clone()),
                t => {
                    bad.push(format!("{what} match type {t} is not supported"));
                    continue;
                }
            };
            let input = if what == "header" {
                Input::Header(m.name.clone())
            } else {
                Input::Query(m.name.clone())
            };
            out.push(Condition { input, test });
        }
    }
    if let Some(m) = method {
        out.push(Condition {
            input: Input::Method,
            test: Test::Equals(m.to_string()),
        });
    }
    out
}

/// The locations of a path match: Exact, PathPrefix (element-wise: `/p` and `/p/...`),
/// RegularExpression (the whole path).
fn path_matches(type_: &str, value: &str, bad: &mut Vec<String>) -> Vec<PathMatch> {
    match type_ {
        "Exact" => vec![PathMatch::Exact(value.to_string())],
        "PathPrefix" => {
            let bare = value.trim_end_matches('/');
            if bare.is_empty() {
                vec![PathMatch::Prefix("/".into())]
            } else {
                vec![
                    PathMatch::Exact(bare.to_string()),
                    PathMatch::Prefix(format!("{bare}/")),
                ]
            }
        }
        "RegularExpression" => vec![PathMatch::Regex {
            pattern: format!("(?:{value})$"),
            caseless: false,
        }],
        t => {
            bad.push(format!("path match type {t} is not supported"));
            Vec::new()
        }
    }
}

/// A GEP-2257 duration (`1h`, `2m30s`, `500ms`: one to four numbers of up to five digits,
/// each with its unit), in milliseconds.
fn duration_ms(text: &str) -> Option<u64> {
    let (mut total, mut parts, mut rest) = (0u64, 0, text);
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 5 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, len) = match rest.as_bytes() {
            [b'm', b's', ..] => (1, 2),
            [b'h', ..] => (3_600_000, 1),
            [b'm', ..] => (60_000, 1),
            [b's', ..] => (1000, 1),
            _ => return None,
        };
        rest = &rest[len..];
        total += n * unit;
        parts += 1;
    }
    (1..=4).contains(&parts).then_some(total)
}

/// What a rule's `timeouts` make: each wait for the backend (connecting, each send, each
/// read) limited to the shorter of `request` and `backendRequest` (`0s`: no limit of
/// the route's); `None` when neither sets one.
fn wait_limit(t: &RuleTimeouts, bad: &mut Vec<String>) -> Option<Timeouts> {
    let mut limit: Option<u64> = None;
    for (field, value) in [
        ("request", &t.request),
        ("backendRequest", &t.backend_request),
    ] {
        let Some(text) = value else { continue };
        match duration_ms(text) {
            Some(0) => {}
            Some(ms) => limit = Some(limit.map_or(ms, |l| l.min(ms))),
            None => bad.push(format!("timeouts.{field}: {text:?} is not a duration")),
        }
    }
    limit.map(Timeouts::each)
}

fn http_route(r: &HttpRoute) -> Route<'_> {
    let rules = r
        .spec
        .rules
        .iter()
        .map(|rule| {
            let mut bad = Vec::new();
            let default = [HttpMatch::default()];
            let ms = if rule.matches.is_empty() {
                &default[..]
            } else {
                &rule.matches
            };
            let matches = ms
                .iter()
                .map(|m| {
                    let p = m.path.clone().unwrap_or_default();
                    let paths = path_matches(
                        p.type_.as_deref().unwrap_or("PathPrefix"),
                        p.value.as_deref().unwrap_or("/"),
                        &mut bad,
                    );
                    let conds =
                        conditions(&m.headers, &m.query_params, m.method.as_deref(), &mut bad);
                    (paths, conds)
                })
                .collect();
            bad.extend(filter_problems(&rule.filters, &rule.backend_refs, false));
            let prefix_only = rule.matches.iter().all(|m| {
                m.path
                    .as_ref()
                    .is_none_or(|p| p.type_.as_deref().unwrap_or("PathPrefix") == "PathPrefix")
            });
            let replaces_prefix = rule.filters.iter().any(|f| {
                let rw = f.url_rewrite.as_ref().and_then(|u| u.path.as_ref());
                let rd = f.request_redirect.as_ref().and_then(|r| r.path.as_ref());
                rw.into_iter()
                    .chain(rd)
                    .any(|p| p.type_ == "ReplacePrefixMatch")
            });
            if replaces_prefix && !prefix_only {
                bad.push("ReplacePrefixMatch needs PathPrefix matches".into());
            }
            let timeouts = rule.timeouts.as_ref().and_then(|t| wait_limit(t, &mut bad));
            if rule.session_persistence.is_some() {
                bad.push("sessionPersistence is not supported".into());
            }
            Rule {
                matches,
                filters: rule.filters.clone(),
                backends: rule.backend_refs.clone(),
                timeouts,
                unsupported: bad,
            }
        })
        .collect();
    Route {
        kind: "HTTPRoute",
        meta: &r.metadata,
        parents: &r.spec.parent_refs,
        hostnames: &r.spec.hostnames,
        rules,
        protocol: Protocol::Http,
    }
}

fn grpc_route(r: &GrpcRoute) -> Route<'_> {
    let rules = r
        .spec
        .rules
        .iter()
        .map(|rule| {
            let mut bad = Vec::new();
            let default = [GrpcMatch::default()];
            let ms = if rule.matches.is_empty() {
                &default[..]
            } else {
                &rule.matches
            };
            let matches = ms
                .iter()
                .map(|m| {
                    let mm = m.method.clone().unwrap_or_default();
                    let (svc, meth) = (mm.service.as_deref(), mm.method.as_deref());
                    let paths = match (mm.type_.as_deref().unwrap_or("Exact"), svc, meth) {
                        (_, None, None) => vec![PathMatch::Prefix("/".into())],
                        ("Exact", Some(s), Some(m)) => vec![PathMatch::Exact(format!("/{s}/{m}"))],
                        ("Exact", Some(s), None) => vec![PathMatch::Prefix(format!("/{s}/"))],
                        ("Exact", None, Some(m)) => path_matches(
                            "RegularExpression",
                            &format!("/[^/]+/{}", crate::render::regex_escape(m)),
                            &mut bad,
                        ),
                        ("RegularExpression", s, m) => path_matches(
                            "RegularExpression",
                            &format!("/(?:{})/(?:{})", s.unwrap_or("[^/]+"), m.unwrap_or("[^/]+")),
                            &mut bad,
                        ),
                        (t, _, _) => {
                            bad.push(format!("method match type {t} is not supported"));
                            Vec::new()
                        }
                    };
                    (paths, conditions(&m.headers, &[], None, &mut bad))
                })
                .collect();
            bad.extend(filter_problems(&rule.filters, &rule.backend_refs, true));
            if rule.session_persistence.is_some() {
                bad.push("sessionPersistence is not supported".into());
            }
            Rule {
                matches,
                filters: rule.filters.clone(),
                backends: rule.backend_refs.clone(),
                timeouts: None,
                unsupported: bad,
            }
        })
        .collect();
    Route {
        kind: "GRPCRoute",
        meta: &r.metadata,
        parents: &r.spec.parent_refs,
        hostnames: &r.spec.hostnames,
        rules,
        protocol: Protocol::Grpc,
    }
}

/// The upstream of a Service reference (a backend or a mirror), added to the model.
fn service_upstream(
    snap: &Snapshot,
    objs: &Objects,
    kind: &str,
    ns: &str,
    r: &ObjRef,
    model: &mut Model,
) -> Result<String, (&'static str, String)> {
    if !names_core(r, "Service") {
        return Err((
            "InvalidKind",
            format!("backend {} is not a Service", r.name),
        ));
    }
    let to_ns = r.namespace.clone().unwrap_or_else(|| ns.to_string());
    if !granted(objs, kind, ns, &to_ns, "Service", &r.name) {
        return Err((
            "RefNotPermitted",
            format!(
                "no ReferenceGrant in {to_ns} lets {kind}s of {ns} use Service {}",
                r.name
            ),
        ));
    }
    let Some(port) = r.port else {
        return Err((
            "UnsupportedValue",
            format!("backend {} has no port", r.name),
        ));
    };
    let res = backends::resolve(snap, &to_ns, &r.name, &PortRef::Number(port), false)
        .map_err(|e| ("BackendNotFound", e))?;
    model.upstreams.insert(
        res.name.clone(),
        Upstream {
            peers: res.peers,
            balance: Balance::RoundRobin,
        },
    );
    Ok(res.name)
}

/// A rule's backends as a weighted group: a reference that is refused or missing answers 500
/// for its share, as do rules without backends or with all weights 0.
fn backend_group(
    snap: &Snapshot,
    objs: &Objects,
    route: &Route,
    ns: &str,
    refs: &[BackendRef],
    ok: &mut (bool, String, String),
    model: &mut Model,
) -> Group {
    let mut members = Vec::new();
    for b in refs {
        let w = b.weight.unwrap_or(1);
        let member = match service_upstream(snap, objs, route.kind, ns, &b.to, model) {
            Ok(u) => u,
            Err((reason, msg)) => {
                if ok.0 {
                    *ok = (false, reason.to_string(), msg);
                }
                status_member(500)
            }
        };
        if w > 0 {
            members.push((member, w));
        }
    }
    if members.is_empty() {
        Group::status(500)
    } else {
        Group(members)
    }
}

/// Adds the entries of a route's matches at one hostname.
fn add_entries(
    route: &Route,
    (groups, mirrors): (&[Group], &[Option<String>]),
    https: bool,
    port: u16,
    (age, o): (usize, &ObjectRef),
    paths: &mut BTreeMap<PathMatch, Vec<Entry>>,
) {
    for (ri, ((rule, group), mirror)) in route.rules.iter().zip(groups).zip(mirrors).enumerate() {
        for (mi, (pms, conds)) in rule.matches.iter().enumerate() {
            for pm in pms {
                // Checked with the rule: a path modifier of a match that is not a prefix.
                let Ok(template) = action(route.protocol, rule, pm, https, port, mirror.as_deref())
                else {
                    continue;
                };
                let method = conds.iter().any(|c| c.input == Input::Method);
                let headers = conds
                    .iter()
                    .filter(|c| matches!(c.input, Input::Header(_)))
                    .count();
                let query = conds
                    .iter()
                    .filter(|c| matches!(c.input, Input::Query(_)))
                    .count();
                paths.entry(pm.clone()).or_default().push(Entry {
                    key: (
                        !method,
                        usize::MAX - headers,
                        usize::MAX - query,
                        // Set by `with_covering`.
                        (false, 0),
                        format!("{age:08}"),
                        ri * 1000 + mi,
                    ),
                    conds: conds.clone(),
                    template,
                    group: group.clone(),
                    owner: o.clone(),
                });
            }
        }
    }
}

/// The route-level checks of a rule's filters, as [`Rule::unsupported`] texts.
fn filter_problems(filters: &[Filter], backends: &[BackendRef], grpc: bool) -> Vec<String> {
    let mut bad = Vec::new();
    if backends.iter().any(|b| !b.filters.is_empty()) {
        bad.push("filters on backendRefs are not supported".into());
    }
    let mut seen = Vec::new();
    for f in filters {
        if seen.contains(&f.type_) {
            bad.push(format!("filter {} is given twice", f.type_));
        }
        seen.push(f.type_.clone());
        match f.type_.as_str() {
            "RequestHeaderModifier" | "ResponseHeaderModifier" => {}
            "RequestMirror" => {
                if let Some(m) = &f.request_mirror
                    && (m.percent.is_some() || m.fraction.is_some())
                {
                    bad.push("a partial RequestMirror (percent, fraction) is not supported".into());
                }
            }
            "RequestRedirect" | "URLRewrite" if !grpc => {}
            t => bad.push(format!("filter {t} is not supported")),
        }
        for h in [&f.request_header_modifier, &f.response_header_modifier]
            .into_iter()
            .flatten()
        {
            for n in h
                .set
                .iter()
                .chain(&h.add)
                .map(|nv| &nv.name)
                .chain(&h.remove)
            {
                if !name_ok(n) {
                    bad.push(format!("header name {n:?} is not supported"));
                }
            }
            if h.set.iter().chain(&h.add).any(|nv| nv.value.contains('$')) {
                bad.push("header values with $ are not supported".into());
            }
        }
        if let Some(r) = &f.request_redirect
            && let Some(c) = r.status_code
            && !matches!(c, 301 | 302 | 303 | 307 | 308)
        {
            bad.push(format!(
                "redirect status {c} is not supported (301, 302, 303, 307 and 308 are)"
            ));
        }
    }
    // Redirect and rewrite texts go into the configuration where vireo expands variables.
    for f in filters {
        let rw = f.url_rewrite.as_ref();
        let rd = f.request_redirect.as_ref();
        let mut texts: Vec<&Option<String>> = vec![
            rw.map_or(&None, |u| &u.hostname),
            rd.map_or(&None, |r| &r.hostname),
        ];
        for p in [
            rw.and_then(|u| u.path.as_ref()),
            rd.and_then(|r| r.path.as_ref()),
        ]
        .into_iter()
        .flatten()
        {
            texts.push(&p.replace_full_path);
            texts.push(&p.replace_prefix_match);
        }
        if texts.into_iter().flatten().any(|t| t.contains('$')) {
            bad.push("paths and hostnames with $ in filters are not supported".into());
        }
    }
    if seen.iter().any(|t| t == "RequestRedirect") && seen.iter().any(|t| t == "URLRewrite") {
        bad.push("RequestRedirect and URLRewrite cannot be used together".into());
    }
    bad
}

/// The location a rule makes at one path (its Select filled in later).
fn action(
    protocol: Protocol,
    rule: &Rule,
    pm: &PathMatch,
    https: bool,
    port: u16,
    mirror: Option<&str>,
) -> Result<Location, String> {
    let mut policy = Policy {
        access_log: true,
        ..Policy::default()
    };
    let mut proxy = Proxy::to(protocol, "");
    if let Some(t) = rule.timeouts {
        proxy.timeouts = t;
    }
    let mut path = pm.clone();
    let mut redirect = None;
    // The prefix replaced by ReplacePrefixMatch: the Exact half of a prefix, or the prefix
    // of the `/p/` half.
    let prefix = match pm {
        PathMatch::Exact(p) => Some((p.clone(), true)),
        PathMatch::Prefix(p) if p == "/" => Some((String::new(), false)),
        PathMatch::Prefix(p) => Some((p.trim_end_matches('/').to_string(), false)),
        PathMatch::Regex { .. } => None,
    };
    for f in &rule.filters {
        if let Some(h) = &f.request_header_modifier {
            for nv in &h.set {
                proxy.set_headers.push((nv.name.clone(), nv.value.clone()));
            }
            for nv in &h.add {
                proxy
                    .append_headers
                    .push((nv.name.clone(), nv.value.clone()));
            }
            for n in &h.remove {
                proxy.set_headers.push((n.clone(), String::new()));
            }
        }
        if let Some(h) = &f.response_header_modifier {
            // Set: the backend's field is hidden and the value added in its place.
            for nv in &h.set {
                proxy.hide_headers.push(nv.name.clone());
            }
            proxy.hide_headers.extend(h.remove.iter().cloned());
            for nv in h.set.iter().chain(&h.add) {
                policy.add_headers.push((nv.name.clone(), nv.value.clone()));
            }
        }
        if let (Some(_), Some(up)) = (&f.request_mirror, mirror) {
            proxy.mirror = Some(Mirror {
                target: format!("http://{up}$request_uri"),
                request_body: true,
                host: None,
            });
        }
        if let Some(rw) = &f.url_rewrite {
            if let Some(h) = &rw.hostname {
                proxy.set_headers.push(("Host".into(), h.clone()));
            }
            if let Some(p) = &rw.path {
                proxy.rewrite = Some(path_rewrite(p, &prefix)?);
            }
        }
        if let Some(r) = &f.request_redirect {
            let scheme = r.scheme.clone();
            let default_port = |s: &str| if s == "https" { 443 } else { 80 };
            let port = match (r.port, &scheme) {
                (Some(p), s) => {
                    let s = s
                        .clone()
                        .unwrap_or_else(|| if https { "https".into() } else { "http".into() });
                    (p != default_port(&s)).then_some(p)
                }
                (None, Some(_)) => None,
                (None, None) => {
                    (port != default_port(if https { "https" } else { "http" })).then_some(port)
                }
            };
            let host = r.hostname.clone().unwrap_or_else(|| "$host".into());
            let path = match &r.path {
                None => "$request_uri".to_string(),
                Some(p) => {
                    let rw = path_rewrite(p, &prefix)?;
                    // A replaced prefix takes the rest of the path from a regex location's
                    // capture.
                    if let (PathMatch::Prefix(_), Some(pattern)) =
                        (pm, rw.pattern.strip_suffix("(/.*)$"))
                    {
                        path = PathMatch::Regex {
                            pattern: format!("{}(/.*)$", &pattern[1..]),
                            caseless: false,
                        };
                    }
                    format!("{}$is_args$args", rw.replacement)
                }
            };
            let target = format!(
                "{}://{host}{}{path}",
                scheme.unwrap_or_else(|| "$scheme".into()),
                port.map(|p| format!(":{p}")).unwrap_or_default()
            );
            redirect = Some((r.status_code.unwrap_or(302), target));
        }
    }
    let action = match redirect {
        Some((code, target)) => Action::Redirect { code, target },
        None => Action::Proxy(Box::new(proxy)),
    };
    // Locations of different routes at one path are one location: no origin of their own.
    Ok(Location {
        path,
        policy,
        action,
        origin: Origin::default(),
    })
}

/// A URLRewrite or RequestRedirect path as a rewrite of the matched path.
fn path_rewrite(p: &PathModifier, prefix: &Option<(String, bool)>) -> Result<Rewrite, String> {
    match p.type_.as_str() {
        "ReplaceFullPath" => Ok(Rewrite {
            pattern: "^.*$".into(),
            replacement: p.replace_full_path.clone().unwrap_or_else(|| "/".into()),
        }),
        "ReplacePrefixMatch" => {
            let Some((pre, exact)) = prefix else {
                return Err("ReplacePrefixMatch needs a PathPrefix match".into());
            };
            let with = p.replace_prefix_match.clone().unwrap_or_else(|| "/".into());
            let trimmed = with.trim_end_matches('/');
            let esc = crate::render::regex_escape(pre);
            Ok(if *exact {
                Rewrite {
                    pattern: format!("^{esc}$"),
                    replacement: if with.is_empty() {
                        "/".into()
                    } else {
                        with.clone()
                    },
                }
            } else {
                Rewrite {
                    pattern: format!("^{esc}(/.*)$"),
                    replacement: format!("{trimmed}$1"),
                }
            })
        }
        t => Err(format!("path modifier {t} is not supported")),
    }
}

/// The locations of one hostname from its entries: one per path, the entries of a path in
/// precedence order as its Select's rules; requests matching none go where the next
/// shorter prefix sends them, or get 404.
fn locations(paths: BTreeMap<PathMatch, Vec<Entry>>) -> Vec<(Location, ObjectRef)> {
    let mut built: BTreeMap<PathMatch, (Location, bool)> = BTreeMap::new();
    let mut owners: BTreeMap<PathMatch, ObjectRef> = BTreeMap::new();
    for (pm, mut entries) in paths {
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        // The filters of the path's matches (each a location template) in precedence
        // order, each with its own rules and default: the first is the location, the
        // others its jumps.
        let mut templates: Vec<(Location, Select)> = Vec::new();
        let mut rules = Vec::new();
        let mut default: Option<Group> = None;
        for e in entries {
            if default.is_some() {
                // A match without conditions takes every request: those after it none.
                break;
            }
            if templates.is_empty()
                && !e.conds.is_empty()
                && !matches!(e.template.action, Action::Proxy(_))
            {
                // A redirect under a match: the location only chooses (a proxy without
                // filters), the redirect is a jump.
                owners.insert(pm.clone(), e.owner.clone());
                let dispatch = Location {
                    path: pm.clone(),
                    policy: Policy {
                        access_log: true,
                        ..Policy::default()
                    },
                    action: Action::Proxy(Box::new(Proxy::to(Protocol::Http, ""))),
                    origin: Origin::default(),
                };
                let select = Select {
                    rules: Vec::new(),
                    default: Group::status(404),
                };
                templates.push((dispatch, select));
            }
            let j = match templates.iter().position(|(t, _)| *t == e.template) {
                Some(j) => j,
                None => {
                    if templates.is_empty() {
                        owners.insert(pm.clone(), e.owner.clone());
                    }
                    let select = Select {
                        rules: Vec::new(),
                        default: Group::status(404),
                    };
                    templates.push((e.template.clone(), select));
                    templates.len() - 1
                }
            };
            let group = match j {
                0 => e.group.clone(),
                _ => Group::jump(j - 1),
            };
            if j > 0 {
                // The jump chooses among its own matches again: the first of them that
                // holds is the one that took the request here.
                let select = &mut templates[j].1;
                if e.conds.is_empty() {
                    select.default = e.group;
                } else {
                    select.rules.push((e.conds.clone(), e.group));
                }
            }
            if e.conds.is_empty() {
                default = Some(group);
            } else {
                rules.push((e.conds, group));
            }
        }
        let mut templates = templates.into_iter().map(|(mut l, select)| {
            if let Action::Proxy(p) = &mut l.action {
                p.select = select;
            }
            l
        });
        let Some(mut loc) = templates.next() else {
            continue;
        };
        let complete = default.is_some();
        if let Action::Proxy(p) = &mut loc.action {
            p.select = Select {
                rules,
                default: default.unwrap_or_else(|| Group::status(404)),
            };
            p.jumps = templates.collect();
        }
        built.insert(pm, (loc, complete));
    }
    // Requests a path's matches do not take go where the longest shorter prefix sends
    // them: its rules join the path's when their filters are the same, else its location
    // is a jump. Shorter paths first, so that each fallback is complete (a prefix
    // before the exact path of the same text).
    let mut keys: Vec<PathMatch> = built.keys().cloned().collect();
    keys.sort_by_key(|k| (k.text().len(), matches!(k, PathMatch::Exact(_))));
    for k in &keys {
        if built[k].1 {
            continue;
        }
        let text = k.text();
        let fallback = keys
            .iter()
            .filter(|c| match (c, k) {
                (PathMatch::Prefix(p), PathMatch::Exact(_)) => text.starts_with(p.as_str()),
                (PathMatch::Prefix(p), PathMatch::Prefix(_)) => {
                    text.starts_with(p.as_str()) && p != text
                }
                _ => false,
            })
            .max_by_key(|c| c.text().len());
        let Some(f) = fallback else { continue };
        let (fl, _) = built[f].clone();
        let (l, _) = built.get_mut(k).expect("a key");
        let Action::Proxy(p) = &mut l.action else {
            continue;
        };
        if let Action::Proxy(fp) = &fl.action
            && p.jumps.is_empty()
        {
            let mut mine = (**p).clone();
            mine.select = fp.select.clone();
            mine.jumps = fp.jumps.clone();
            if mine == **fp && fl.policy == l.policy {
                p.select.rules.extend(fp.select.rules.clone());
                p.select.default = fp.select.default.clone();
                p.jumps = fp.jumps.clone();
                continue;
            }
        }
        p.jumps.push(fl);
        p.select.default = Group::jump(p.jumps.len() - 1);
    }
    built
        .into_iter()
        .map(|(pm, (l, _))| (l, owners[&pm].clone()))
        .collect()
}

/// Each route some of whose matches are not served gets `PartiallyInvalid` (reason
/// `UnsupportedValue`) on the parents that accept it, saying which and why.
fn partially_invalid(statuses: &mut [Status], dropped: &[Problem]) {
    for s in statuses.iter_mut().filter(|s| s.kind.ends_with("Route")) {
        let mut why: Vec<&str> = dropped
            .iter()
            .filter(|p| {
                (
                    p.object.kind.as_str(),
                    p.object.namespace.as_str(),
                    p.object.name.as_str(),
                ) == (s.kind, s.namespace.as_str(), s.name.as_str())
            })
            .map(|p| p.message.as_str())
            .collect();
        if why.is_empty() {
            continue;
        }
        why.sort_unstable();
        why.dedup();
        for parent in s.status["parents"].as_array_mut().into_iter().flatten() {
            let accepted = &parent["conditions"][0];
            if accepted["status"] != "True" {
                continue;
            }
            let g = accepted["observedGeneration"].as_i64().unwrap_or_default();
            let c = condition(
                "PartiallyInvalid",
                true,
                "UnsupportedValue",
                &why.join("; "),
                g,
            );
            if let Some(list) = parent["conditions"].as_array_mut() {
                list.push(c);
            }
        }
    }
}

/// Puts a hostname's locations into the model: beside the Ingresses' locations of the same
/// host (a path they hold stays theirs), or as a server of its own.
fn merge(
    t: &mut Translation,
    host: &str,
    tls: Option<Tls>,
    plain: bool,
    locations: Vec<(Location, ObjectRef)>,
    dropped: &mut Vec<Problem>,
) {
    let server = t.model.servers.iter().position(|s| {
        if host.is_empty() {
            s.default
        } else {
            s.names.iter().any(|n| n == host)
        }
    });
    let i = server.unwrap_or_else(|| {
        t.model.servers.push(Server {
            names: vec![host.to_string()],
            ..Server::default()
        });
        t.model.servers.len() - 1
    });
    let s = &mut t.model.servers[i];
    if s.tls.is_none() {
        s.tls = tls.clone();
    }
    for (mut l, owner) in locations {
        if s.locations.iter().any(|x| x.path == l.path) {
            let msg = format!(
                "path {} of host {} is already served by an Ingress; this match is not served",
                l.path.text(),
                if host.is_empty() { "*" } else { host }
            );
            dropped.push(problem(&owner, "DuplicatePath", msg));
            continue;
        }
        if tls.is_some() && !plain {
            // Only HTTPS listeners take the host: plain HTTP requests are sent to HTTPS.
            l.policy.https_redirect = Some(301);
        }
        s.locations.push(l);
    }
    s.locations.sort_by(|a, b| b.path.text().cmp(a.path.text()));
}

#[cfg(test)]
mod tests;
