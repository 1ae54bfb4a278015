//! Gateway API translation, modelled on the conformance suite's HTTPRoute cases (matching,
//! precedence, header modifiers, redirects, rewrites, weighted backends, ReferenceGrant),
//! each case's model and configuration checked; the whole configuration by the real
//! `vireo -t`.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use super::*;
use crate::ingress::tests::{cert, from, secret, settings, slice, svc, vireo_accepts};
use crate::ingress::{Options, translate as ingress_translate};
use crate::render::render;

const CONTROLLER: &str = "vireo.dev/gateway-controller";

/// Services web (→ 10.0.0.1), canary (→ 10.0.1.1) in default and web in `other`
/// (→ 10.0.2.1), all on port 80 → 8080; the TLS Secret `tls`.
fn cluster() -> Snapshot {
    let mut other_svc: Service = svc("web", &[("http", 80)]);
    other_svc.metadata.namespace = Some("other".into());
    let mut other_slice: EndpointSlice = slice("web", "http", 8080, &[("10.0.2.1", true)]);
    other_slice.metadata.namespace = Some("other".into());
    Snapshot {
        services: vec![
            svc("web", &[("http", 80)]),
            svc("canary", &[("http", 80)]),
            other_svc,
        ],
        endpoint_slices: vec![
            slice("web", "http", 8080, &[("10.0.0.1", true)]),
            slice("canary", "http", 8080, &[("10.0.1.1", true)]),
            other_slice,
        ],
        secrets: vec![secret(
            "tls",
            "kubernetes.io/tls",
            &[("tls.crt", &cert().0), ("tls.key", &cert().1)],
        )],
        ..Snapshot::default()
    }
}

/// GatewayClass `vireo` of our controller and Gateway default/gw with these listeners.
fn objects(listeners: Value) -> Objects {
    Objects {
        classes: vec![from(json!({"metadata": {"name": "vireo"},
            "spec": {"controllerName": CONTROLLER}}))],
        gateways: vec![from(
            json!({"metadata": {"name": "gw", "namespace": "default"},
            "spec": {"gatewayClassName": "vireo", "listeners": listeners}}),
        )],
        ..Objects::default()
    }
}

fn http_listener() -> Value {
    json!([{"name": "http", "port": 80, "protocol": "HTTP"}])
}

/// An HTTPRoute in default attached to gw, created at second `age`, with these rules.
fn route(name: &str, age: u32, hostnames: Value, rules: Value) -> HttpRoute {
    route_in("default", name, age, hostnames, rules)
}

fn route_in(ns: &str, name: &str, age: u32, hostnames: Value, rules: Value) -> HttpRoute {
    from(json!({
        "metadata": {"name": name, "namespace": ns, "generation": 1,
            "creationTimestamp": format!("2026-01-01T00:00:{age:02}Z")},
        "spec": {"parentRefs": [{"name": "gw", "namespace": "default"}],
            "hostnames": hostnames, "rules": rules}
    }))
}

fn backend(name: &str) -> Value {
    json!({"name": name, "port": 80})
}

fn run(snap: &Snapshot, objs: &Objects) -> (Translation, String, Vec<Status>) {
    let mut t = ingress_translate(
        snap,
        &Options {
            ingress_class: "vireo".into(),
            allow_snippets: false,
        },
    );
    let statuses = translate(snap, objs, CONTROLLER, &mut t);
    let text = render(&t.model, &settings());
    (t, text, statuses)
}

fn with_routes(listeners: Value, routes: Vec<HttpRoute>) -> (Translation, String, Vec<Status>) {
    let mut objs = objects(listeners);
    objs.http_routes = routes;
    run(&cluster(), &objs)
}

fn server<'a>(t: &'a Translation, name: &str) -> &'a Server {
    t.model
        .servers
        .iter()
        .find(|s| {
            if name.is_empty() {
                s.default
            } else {
                s.names.iter().any(|n| n == name)
            }
        })
        .unwrap_or_else(|| panic!("no server {name}: {:#?}", t.model.servers))
}

fn location<'a>(s: &'a Server, path: &PathMatch) -> &'a Location {
    s.locations
        .iter()
        .find(|l| l.path == *path)
        .unwrap_or_else(|| panic!("no location {path:?}: {:#?}", s.locations))
}

fn proxy(l: &Location) -> &Proxy {
    match &l.action {
        Action::Proxy(p) => p,
        a => panic!("not a proxy: {a:?}"),
    }
}

/// The condition `type_` of the route's first parent.
fn route_condition(statuses: &[Status], name: &str, type_: &str) -> (String, String, String) {
    let s = statuses
        .iter()
        .find(|s| s.name == name && s.kind.ends_with("Route"))
        .unwrap_or_else(|| panic!("no status for {name}: {statuses:#?}"));
    let c = s.status["parents"][0]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap()
        .clone();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (text("status"), text("reason"), text("message"))
}

fn assert_has(text: &str, needle: &str) {
    assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
}

fn cond(input: Input, value: &str) -> Condition {
    Condition {
        input,
        test: Test::Equals(value.into()),
    }
}

/// HTTPRouteExactPathMatching, HTTPRouteMatching: exact paths, element-wise prefixes.
#[test]
fn paths() {
    let (t, text, statuses) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                {"matches": [{"path": {"type": "Exact", "value": "/one"}}], "backendRefs": [backend("web")]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/two/"}}], "backendRefs": [backend("canary")]},
                {"matches": [{"path": {"type": "RegularExpression", "value": "/v[0-9]+/.*"}}], "backendRefs": [backend("web")]},
            ]),
        )],
    );
    let s = server(&t, "");
    assert_eq!(
        proxy(location(s, &PathMatch::Exact("/one".into()))).select,
        Select::one("default-web-80")
    );
    // `/two` and `/two/...`, never `/twofold`.
    for p in [
        PathMatch::Exact("/two".into()),
        PathMatch::Prefix("/two/".into()),
    ] {
        assert_eq!(
            proxy(location(s, &p)).select,
            Select::one("default-canary-80")
        );
    }
    assert_has(&text, "location ~ \"^(?:/v[0-9]+/.*)$\"");
    assert_has(&text, "server 10.0.1.1:8080;");
    assert_eq!(
        route_condition(&statuses, "r", "Accepted").0,
        "True",
        "{statuses:#?}"
    );
    assert_eq!(route_condition(&statuses, "r", "ResolvedRefs").0, "True");
}

/// HTTPRouteHeaderMatching, HTTPRouteQueryParamMatching, HTTPRouteMethodMatching and the
/// precedence among matches of one path: method, then most headers, then most query
/// parameters; requests matching none get 404.
#[test]
fn conditions_in_precedence() {
    let (t, text, _) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                {"matches": [{"headers": [{"name": "version", "value": "one"}]}], "backendRefs": [backend("web")]},
                {"matches": [{"headers": [{"name": "version", "value": "two"}, {"name": "color", "value": "orange"}]}], "backendRefs": [backend("web")]},
                {"matches": [{"queryParams": [{"name": "animal", "value": "whale"}]}], "backendRefs": [backend("canary")]},
                {"matches": [{"method": "POST"}], "backendRefs": [backend("canary")]},
            ]),
        )],
    );
    let select = &proxy(location(server(&t, ""), &PathMatch::Prefix("/".into()))).select;
    let got: Vec<&Vec<Condition>> = select.rules.iter().map(|(c, _)| c).collect();
    assert_eq!(
        got,
        [
            &vec![cond(Input::Method, "POST")],
            &vec![
                cond(Input::Header("version".into()), "two"),
                cond(Input::Header("color".into()), "orange")
            ],
            &vec![cond(Input::Header("version".into()), "one")],
            &vec![cond(Input::Query("animal".into()), "whale")],
        ]
    );
    assert_eq!(select.default, Group::status(404));
    assert_has(&text, "if ($vireo_pass");
    assert_has(&text, "return 404;");
    assert_has(&text, "map $http_version");
    // The first `animal=` pair's value, the name compared with case.
    assert_has(
        &text,
        "map $args $vireo_query4 {\n        \"~(?:^|&)animal=(?<vireo_arg>[^&]*)\" $vireo_arg;",
    );
}

/// A path whose matches all have conditions falls back to the next shorter prefix.
#[test]
fn falls_back_to_shorter_prefix() {
    let (t, _, _) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                {"backendRefs": [backend("web")]},
                {"matches": [{"path": {"value": "/v2"}, "headers": [{"name": "x", "value": "y"}]}],
                 "backendRefs": [backend("canary")]},
            ]),
        )],
    );
    let p = proxy(location(server(&t, ""), &PathMatch::Prefix("/v2/".into())));
    assert_eq!(p.select.rules.len(), 1);
    assert_eq!(p.select.default, Group::one("default-web-80"));
}

/// Of a path whose filters differ from the shorter prefix's, the requests its matches do
/// not take go to that prefix's location, named, the URI unchanged; and from there on.
#[test]
fn falls_back_to_a_prefix_of_other_filters() {
    let added = |name: &str| {
        json!([{"type": "ResponseHeaderModifier",
            "responseHeaderModifier": {"add": [{"name": name, "value": "1"}]}}])
    };
    let (t, text, _) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                {"backendRefs": [backend("web")]},
                {"matches": [{"path": {"value": "/v2"}, "headers": [{"name": "x", "value": "y"}]}],
                 "filters": added("X-V2"), "backendRefs": [backend("canary")]},
                {"matches": [{"path": {"value": "/v2/deep"}, "headers": [{"name": "z", "value": "y"}]}],
                 "filters": added("X-Deep"), "backendRefs": [backend("web")]},
            ]),
        )],
    );
    let s = server(&t, "");
    let root = location(s, &PathMatch::Prefix("/".into()));
    let v2 = location(s, &PathMatch::Prefix("/v2/".into()));
    assert_eq!(proxy(v2).select.default, Group::jump(0));
    assert_eq!(proxy(v2).jumps, std::slice::from_ref(root));
    // /v2/deep/ goes on to /v2/'s location, which goes on to /'s.
    let deep = proxy(location(s, &PathMatch::Prefix("/v2/deep/".into())));
    assert_eq!(deep.jumps, std::slice::from_ref(v2));
    assert_has(&text, "error_page 418 = $vireo_jump");
    assert_has(&text, "location @vireo_jump_");
    vireo_accepts(&t.model);
}

/// HTTPRouteRequestHeaderModifier, HTTPRouteResponseHeaderModifier.
#[test]
fn header_modifiers() {
    let (t, text, _) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([{"filters": [
                {"type": "RequestHeaderModifier", "requestHeaderModifier": {
                    "set": [{"name": "X-Header-Set", "value": "set-overwrites-values"}],
                    "add": [{"name": "X-Header-Add", "value": "add-appends-values"}],
                    "remove": ["X-Header-Remove"]}},
                {"type": "ResponseHeaderModifier", "responseHeaderModifier": {
                    "set": [{"name": "X-Header-Set", "value": "set-overwrites-values"}],
                    "add": [{"name": "X-Header-Add", "value": "add-appends-values"}],
                    "remove": ["X-Header-Remove"]}},
            ], "backendRefs": [backend("web")]}]),
        )],
    );
    let l = location(server(&t, ""), &PathMatch::Prefix("/".into()));
    // The backend's fields set or removed are hidden; set and added values are added.
    assert_eq!(proxy(l).hide_headers, ["X-Header-Set", "X-Header-Remove"]);
    assert_has(&text, "proxy_hide_header \"X-Header-Set\";");
    assert_has(&text, "proxy_hide_header \"X-Header-Remove\";");
    assert_has(
        &text,
        "add_header \"X-Header-Set\" \"set-overwrites-values\" always;",
    );
    assert_eq!(
        proxy(l).set_headers,
        [
            (
                "X-Header-Set".to_string(),
                "set-overwrites-values".to_string()
            ),
            ("X-Header-Remove".to_string(), String::new())
        ]
    );
    assert_has(&text, "proxy_set_header \"X-Header-Remove\" \"\";");
    // Added to the client's value, or alone.
    assert_has(&text, "map $http_x_header_add $vireo_append");
    assert_has(&text, "\"\" \"add-appends-values\";");
    assert_has(&text, "default \"$http_x_header_add,add-appends-values\";");
    assert_has(&text, "proxy_set_header \"X-Header-Add\" \"$vireo_append");
    assert_has(
        &text,
        "add_header \"X-Header-Add\" \"add-appends-values\" always;",
    );
}

/// What vireo cannot serve is refused with the route's Accepted condition, not served.
#[test]
fn unsupported_is_refused() {
    let (t, _, statuses) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([{"matches": [{"path": {"value": "/x"}}], "filters": [
                {"type": "RequestMirror", "requestMirror": {
                    "backendRef": backend("web"), "percent": 50}},
            ], "backendRefs": [backend("web")]}]),
        )],
    );
    let (status, reason, message) = route_condition(&statuses, "r", "Accepted");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnsupportedValue")
    );
    assert!(message.contains("a partial RequestMirror"), "{message}");

    let (_, _, statuses) = with_routes(
        http_listener(),
        vec![route(
            "v",
            0,
            json!([]),
            json!([{"filters": [{"type": "URLRewrite", "urlRewrite": {"path":
                {"type": "ReplaceFullPath", "replaceFullPath": "/$host"}}}],
                "backendRefs": [backend("web")]}]),
        )],
    );
    let (_, _, message) = route_condition(&statuses, "v", "Accepted");
    assert!(message.contains("with $"), "{message}");
    assert!(
        server(&t, "")
            .locations
            .iter()
            .all(|l| l.path != PathMatch::Prefix("/x/".into()))
    );
    assert!(t.problems.iter().any(|p| p.reason == "UnsupportedValue"));
}

/// Matches of one path with different filters: the location holds the filters of the
/// one taking precedence (here the one with a header); requests the other takes jump to a
/// named location with its filters, which chooses among its own matches again.
#[test]
fn different_filters_at_one_path() {
    let (t, text, statuses) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                {"matches": [{"path": {"value": "/a"}}], "backendRefs": [backend("web")]},
                {"matches": [{"path": {"value": "/a"}, "headers": [{"name": "h", "value": "1"}]}],
                 "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                    "set": [{"name": "X", "value": "1"}]}}],
                 "backendRefs": [backend("canary")]},
            ]),
        )],
    );
    assert!(t.problems.is_empty(), "{:#?}", t.problems);
    let p = proxy(location(server(&t, ""), &PathMatch::Prefix("/a/".into())));
    assert_eq!(p.set_headers, [("X".to_string(), "1".to_string())]);
    assert_eq!(p.select.rules.len(), 1);
    assert_eq!(p.select.default, Group::jump(0));
    let jump = proxy(&p.jumps[0]);
    assert!(jump.set_headers.is_empty());
    assert_eq!(jump.select, Select::one("default-web-80"));
    assert_has(&text, "\"jump:0\" \"@vireo_jump_");
    assert_eq!(route_condition(&statuses, "r", "Accepted").0, "True");
    vireo_accepts(&t.model);
}

/// A RequestRedirect under a header match is a jump of a location that only chooses; one
/// replacing a prefix under a header match is not served (its rest of the path comes from
/// a regex location's capture), and the route's `PartiallyInvalid` condition says so.
#[test]
fn redirects_under_matches() {
    let redirect = |path: &str, header: &str, to: Value| {
        json!({"matches": [{"path": {"value": path}, "headers": [{"name": header, "value": "1"}]}],
            "filters": [{"type": "RequestRedirect", "requestRedirect": to}]})
    };
    let (t, text, statuses) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                {"matches": [{"path": {"value": "/a"}}], "backendRefs": [backend("web")]},
                redirect("/a", "h", json!({"hostname": "x.example", "statusCode": 308})),
                redirect("/b", "h", json!({"hostname": "y.example"})),
                redirect("/a", "p", json!({"path": {"type": "ReplacePrefixMatch",
                    "replacePrefixMatch": "/z"}})),
            ]),
        )],
    );
    let s = server(&t, "");
    let a = proxy(location(s, &PathMatch::Prefix("/a/".into())));
    assert_eq!(a.select.rules[0].1, Group::jump(0));
    assert_eq!(a.select.default, Group::one("default-web-80"));
    assert_eq!(
        a.jumps[0].action,
        Action::Redirect {
            code: 308,
            target: "$scheme://x.example$request_uri".into()
        }
    );
    // /b: only the redirect, under its match; other requests 404.
    let b = proxy(location(s, &PathMatch::Prefix("/b/".into())));
    assert_eq!(b.select.rules[0].1, Group::jump(0));
    assert_eq!(b.select.default, Group::status(404));
    assert_has(&text, "return 308 \"$scheme://x.example$request_uri\";");
    assert_eq!(a.jumps[1].path.text(), "/a(/.*)$");
    assert_has(
        &text,
        "if ($uri ~ \"^/a(/.*)$\") {\n                return 302 \"$scheme://$host/z$1$is_args$args\";",
    );
    assert!(
        statuses
            .iter()
            .all(|s| !s.status.to_string().contains("PartiallyInvalid")),
        "{statuses:#?}"
    );
    vireo_accepts(&t.model);
}

#[test]
fn redirects() {
    let redirect = |path: &str, r: Value| {
        json!({"matches": [{"path": {"value": path}}],
            "filters": [{"type": "RequestRedirect", "requestRedirect": r}]})
    };
    let (t, text, _) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                redirect("/scheme", json!({"scheme": "https", "statusCode": 301})),
                redirect("/host", json!({"hostname": "example.org"})),
                redirect("/port", json!({"port": 8083})),
                redirect(
                    "/full",
                    json!({"path": {"type": "ReplaceFullPath", "replaceFullPath": "/one"}})
                ),
                redirect(
                    "/prefix",
                    json!({"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/to"}})
                ),
            ]),
        )],
    );
    let s = server(&t, "");
    let target = |p: &str| match &location(s, &PathMatch::Exact(p.into())).action {
        Action::Redirect { code, target } => (*code, target.clone()),
        a => panic!("{a:?}"),
    };
    assert_eq!(target("/scheme"), (301, "https://$host$request_uri".into()));
    assert_eq!(
        target("/host"),
        (302, "$scheme://example.org$request_uri".into())
    );
    assert_eq!(
        target("/port"),
        (302, "$scheme://$host:8083$request_uri".into())
    );
    assert_eq!(
        target("/full"),
        (302, "$scheme://$host/one$is_args$args".into())
    );
    assert_eq!(
        target("/prefix"),
        (302, "$scheme://$host/to$is_args$args".into())
    );
    // `/prefix/rest` keeps its rest.
    assert_has(&text, "location ~ \"^/prefix(/.*)$\"");
    assert_has(&text, "return 302 \"$scheme://$host/to$1$is_args$args\";");
}

/// HTTPRouteRewriteHost, HTTPRouteRewritePath.
#[test]
fn rewrites() {
    let (t, text, _) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                {"matches": [{"path": {"value": "/prefix/one"}}], "filters": [{"type": "URLRewrite",
                    "urlRewrite": {"hostname": "one.example.org",
                        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}}],
                 "backendRefs": [backend("web")]},
                {"matches": [{"path": {"value": "/full"}}], "filters": [{"type": "URLRewrite",
                    "urlRewrite": {"path": {"type": "ReplaceFullPath", "replaceFullPath": "/one"}}}],
                 "backendRefs": [backend("web")]},
            ]),
        )],
    );
    let s = server(&t, "");
    let p = proxy(location(s, &PathMatch::Prefix("/prefix/one/".into())));
    assert_eq!(
        p.rewrite,
        Some(Rewrite {
            pattern: "^/prefix/one(/.*)$".into(),
            replacement: "$1".into()
        })
    );
    assert_eq!(
        p.set_headers,
        [("Host".to_string(), "one.example.org".to_string())]
    );
    let exact = proxy(location(s, &PathMatch::Exact("/prefix/one".into())));
    assert_eq!(exact.rewrite.as_ref().unwrap().replacement, "/");
    assert_has(&text, "rewrite \"(?i)^.*$\" \"/one\" break;");
}

/// HTTPRouteWeight, and backends with weight 0 or all weights 0 (500).
#[test]
fn weights() {
    let (t, text, _) = with_routes(
        http_listener(),
        vec![route(
            "r",
            0,
            json!([]),
            json!([
                {"matches": [{"path": {"value": "/split"}}], "backendRefs": [
                    {"name": "web", "port": 80, "weight": 3}, {"name": "canary", "port": 80, "weight": 1}]},
                {"matches": [{"path": {"value": "/zero"}}], "backendRefs": [
                    {"name": "web", "port": 80, "weight": 0}, {"name": "canary", "port": 80}]},
                {"matches": [{"path": {"value": "/none"}}], "backendRefs": [
                    {"name": "web", "port": 80, "weight": 0}]},
            ]),
        )],
    );
    let s = server(&t, "");
    assert_eq!(
        proxy(location(s, &PathMatch::Prefix("/split/".into())))
            .select
            .default,
        Group(vec![
            ("default-web-80".into(), 3),
            ("default-canary-80".into(), 1)
        ])
    );
    assert_has(&text, "75.00% default-web-80;");
    assert_eq!(
        proxy(location(s, &PathMatch::Prefix("/zero/".into()))).select,
        Select::one("default-canary-80")
    );
    assert_eq!(
        proxy(location(s, &PathMatch::Prefix("/none/".into()))).select,
        Select {
            rules: Vec::new(),
            default: Group::status(500)
        }
    );
    assert_has(&text, "return 500;");
}

/// HTTPRouteReferenceGrant, HTTPRouteInvalidCrossNamespaceBackendRef.
#[test]
fn reference_grant() {
    let rule = json!([{"backendRefs": [{"name": "web", "namespace": "other", "port": 80}]}]);
    let mut objs = objects(http_listener());
    objs.http_routes = vec![route("r", 0, json!([]), rule)];
    let (t, _, statuses) = run(&cluster(), &objs);
    let (status, reason, _) = route_condition(&statuses, "r", "ResolvedRefs");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RefNotPermitted")
    );
    assert_eq!(route_condition(&statuses, "r", "Accepted").0, "True");
    let l = location(server(&t, ""), &PathMatch::Prefix("/".into()));
    assert_eq!(proxy(l).select.default, Group::status(500));

    objs.grants = vec![from(
        json!({"metadata": {"name": "g", "namespace": "other"},
        "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "default"}],
                 "to": [{"group": "", "kind": "Service", "name": "web"}]}}),
    )];
    let (t, _, statuses) = run(&cluster(), &objs);
    assert_eq!(route_condition(&statuses, "r", "ResolvedRefs").0, "True");
    let l = location(server(&t, ""), &PathMatch::Prefix("/".into()));
    assert_eq!(proxy(l).select, Select::one("other-web-80"));
    assert_eq!(t.model.upstreams["other-web-80"].peers, ["10.0.2.1:8080"]);
}

/// HTTPRouteHostnameIntersection, HTTPRouteDisallowedKind / namespaces: routes attach
/// only where the listener takes them.
#[test]
fn listeners_and_hostnames() {
    let listeners = json!([{"name": "http", "port": 80, "protocol": "HTTP",
        "hostname": "*.example.com"}]);
    let rule = json!([{"backendRefs": [backend("web")]}]);
    let (t, _, statuses) = with_routes(
        listeners,
        vec![
            route(
                "a",
                0,
                json!(["a.example.com", "b.other.org"]),
                rule.clone(),
            ),
            route("b", 1, json!(["only.other.org"]), rule.clone()),
            route("wild", 2, json!([]), rule.clone()),
            route_in("other", "c", 3, json!(["c.example.com"]), rule),
        ],
    );
    assert!(server(&t, "a.example.com").locations.len() == 1);
    assert!(
        !t.model
            .servers
            .iter()
            .any(|s| s.names.contains(&"b.other.org".into()))
    );
    assert!(server(&t, "*.example.com").locations.len() == 1);
    assert_eq!(
        route_condition(&statuses, "b", "Accepted").1,
        "NoMatchingListenerHostname"
    );
    assert_eq!(
        route_condition(&statuses, "c", "Accepted").1,
        "NotAllowedByListeners"
    );
    let gw = statuses.iter().find(|s| s.kind == "Gateway").unwrap();
    assert_eq!(gw.status["listeners"][0]["attachedRoutes"], 2);
}

/// HTTPRouteListenerNamespaceSelector: `from: Selector` admits the routes of namespaces
/// whose labels match; a selector vireo cannot read refuses the listener.
#[test]
fn namespace_selector() {
    let listeners = json!([{"name": "http", "port": 80, "protocol": "HTTP",
        "allowedRoutes": {"namespaces": {"from": "Selector", "selector": {
            "matchLabels": {"team": "web"},
            "matchExpressions": [{"key": "stage", "operator": "NotIn", "values": ["dev"]}]}}}}]);
    let rule = json!([{"backendRefs": [backend("web")]}]);
    let mut snap = cluster();
    snap.namespaces = [
        ("default", json!({})),
        ("web-prod", json!({"team": "web", "stage": "prod"})),
        ("web-dev", json!({"team": "web", "stage": "dev"})),
        ("web-any", json!({"team": "web"})),
    ]
    .into_iter()
    .map(|(n, labels)| from(json!({"metadata": {"name": n, "labels": labels}})))
    .collect();
    let mut objs = objects(listeners.clone());
    objs.http_routes = ["default", "web-prod", "web-dev", "web-any", "unknown"]
        .into_iter()
        .enumerate()
        .map(|(i, ns)| {
            route_in(
                ns,
                ns,
                i as u32,
                json!([format!("{ns}.example")]),
                rule.clone(),
            )
        })
        .collect();
    let (t, _, statuses) = run(&snap, &objs);
    for (ns, admitted) in [
        ("default", false),
        ("web-prod", true),
        ("web-dev", false),
        ("web-any", true),
        ("unknown", false),
    ] {
        let reason = route_condition(&statuses, ns, "Accepted").1;
        assert_eq!(reason == "Accepted", admitted, "{ns}: {reason}");
        assert_eq!(
            t.model
                .servers
                .iter()
                .any(|s| s.names.contains(&format!("{ns}.example"))),
            admitted,
            "{ns}"
        );
    }

    let mut bad = listeners;
    bad[0]["allowedRoutes"]["namespaces"]["selector"]["matchExpressions"][0]["operator"] =
        json!("Near");
    let (_, _, statuses) = run(&snap, &objects(bad));
    let gw = statuses.iter().find(|s| s.kind == "Gateway").unwrap();
    let accepted = &gw.status["listeners"][0]["conditions"][0];
    assert_eq!(accepted["status"], "False", "{gw:?}");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains("unknown operator Near"),
        "{gw:?}"
    );
}

/// An HTTPS listener: its certificate on the host's server, plain HTTP sent to HTTPS;
/// a listener of another protocol is refused on the Gateway's status.
#[test]
fn https_listener() {
    let listeners = json!([
        {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "s.example.com",
            "tls": {"certificateRefs": [{"name": "tls"}]}},
        {"name": "tcp", "port": 9000, "protocol": "TCP"},
    ]);
    let (t, text, statuses) = with_routes(
        listeners,
        vec![route(
            "r",
            0,
            json!([]),
            json!([{"backendRefs": [backend("web")]}]),
        )],
    );
    let s = server(&t, "s.example.com");
    assert!(s.tls.is_some());
    assert_eq!(s.locations[0].policy.https_redirect, Some(301));
    assert_has(&text, "listen 443 ssl;");
    let gw = statuses.iter().find(|s| s.kind == "Gateway").unwrap();
    assert_eq!(
        gw.status["listeners"][1]["conditions"][0]["reason"],
        "UnsupportedProtocol"
    );
    assert!(t.problems.iter().any(|p| p.object.kind == "Gateway"));
}

/// GRPCRoute: service and method matches are paths, passed with grpc_pass.
#[test]
fn grpc_route() {
    let mut objs = objects(http_listener());
    objs.grpc_routes = vec![from(json!({
        "metadata": {"name": "g", "namespace": "default"},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [
            {"matches": [{"method": {"service": "echo.Echo", "method": "Say"}}],
             "backendRefs": [backend("web")]},
            {"matches": [{"method": {"service": "echo.Other"}}], "backendRefs": [backend("canary")]},
        ]}
    }))];
    let (t, text, statuses) = run(&cluster(), &objs);
    let s = server(&t, "");
    assert_eq!(
        proxy(location(s, &PathMatch::Exact("/echo.Echo/Say".into()))).protocol,
        Protocol::Grpc
    );
    location(s, &PathMatch::Prefix("/echo.Other/".into()));
    assert_has(&text, "grpc_pass grpc://default-web-80;");
    assert_eq!(
        statuses
            .iter()
            .find(|s| s.kind == "GRPCRoute")
            .unwrap()
            .status["parents"][0]["conditions"][0]["status"],
        "True"
    );
}

/// Every feature at once, with an Ingress beside: the real `vireo -t` takes it.
#[test]
fn vireo_accepts_the_configuration() {
    let mut objs = objects(json!([
        {"name": "http", "port": 80, "protocol": "HTTP"},
        {"name": "https", "port": 443, "protocol": "HTTPS", "hostname": "s.example.com",
            "tls": {"certificateRefs": [{"name": "tls"}]}},
    ]));
    objs.http_routes = vec![
        route(
            "all",
            0,
            json!([]),
            json!([
                {"matches": [{"path": {"value": "/w"}, "headers": [{"name": "v", "value": "2"}]},
                             {"path": {"value": "/w"}, "method": "GET", "queryParams": [{"type": "RegularExpression", "name": "q", "value": "^a"}]}],
                 "filters": [
                    {"type": "RequestHeaderModifier", "requestHeaderModifier": {"set": [{"name": "X", "value": "1"}], "add": [{"name": "A", "value": "2"}], "remove": ["Y"]}},
                    {"type": "ResponseHeaderModifier", "responseHeaderModifier": {"add": [{"name": "Z", "value": "1"}]}},
                    {"type": "RequestMirror", "requestMirror": {"backendRef": backend("canary")}},
                    {"type": "URLRewrite", "urlRewrite": {"hostname": "h", "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/x"}}}],
                 "backendRefs": [{"name": "web", "port": 80, "weight": 2}, {"name": "web", "namespace": "other", "port": 80}]},
                {"backendRefs": [backend("web")]},
                {"matches": [{"path": {"value": "/r"}}], "filters": [{"type": "RequestRedirect", "requestRedirect":
                    {"scheme": "https", "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/s"}}}]},
            ]),
        ),
        route(
            "s",
            1,
            json!(["s.example.com"]),
            json!([{"backendRefs": [backend("canary")]}]),
        ),
        route(
            "w",
            2,
            json!(["*.w.example"]),
            json!([{"backendRefs": [backend("canary")]}]),
        ),
    ];
    let (t, _, _) = run(&cluster(), &objs);
    vireo_accepts(&t.model);
}

/// A path an Ingress serves on the host stays the Ingress's; the route is told.
#[test]
fn ingress_paths_stay() {
    let mut snap = cluster();
    snap.ingresses = vec![from(json!({
        "metadata": {"name": "site", "namespace": "default"},
        "spec": {"ingressClassName": "vireo", "rules": [{"host": "g.example", "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}
    }))];
    let mut objs = objects(http_listener());
    objs.http_routes = vec![route(
        "r",
        0,
        json!(["g.example"]),
        json!([{"backendRefs": [backend("canary")]},
               {"matches": [{"path": {"value": "/api"}}], "backendRefs": [backend("canary")]}]),
    )];
    let (t, _, _) = run(&snap, &objs);
    let s = server(&t, "g.example");
    assert_eq!(
        proxy(location(s, &PathMatch::Prefix("/".into()))).select,
        Select::one("default-web-80")
    );
    assert_eq!(
        proxy(location(s, &PathMatch::Prefix("/api/".into()))).select,
        Select::one("default-canary-80")
    );
    assert!(
        t.problems
            .iter()
            .any(|p| p.reason == "DuplicatePath" && p.object.name == "r"),
        "{:#?}",
        t.problems
    );
}

/// A route one listener takes is accepted whatever the Gateway's other listeners say.
#[test]
fn one_listener_is_enough() {
    let listeners = json!([
        {"name": "b", "port": 80, "protocol": "HTTP", "hostname": "b.example.com"},
        {"name": "a", "port": 80, "protocol": "HTTP", "hostname": "a.example.com"},
    ]);
    let (t, _, statuses) = with_routes(
        listeners,
        vec![route(
            "r",
            0,
            json!(["b.example.com"]),
            json!([{"backendRefs": [backend("web")]}]),
        )],
    );
    assert_eq!(route_condition(&statuses, "r", "Accepted").0, "True");
    server(&t, "b.example.com");
}

/// HTTPRouteTimeoutRequest, HTTPRouteTimeoutBackendRequest: the shorter of a rule's
/// timeouts limits each wait for the backend; `0s` sets none; a bad duration refuses the
/// route.
#[test]
fn rule_timeouts() {
    assert_eq!(duration_ms("500ms"), Some(500));
    assert_eq!(duration_ms("1h2m3s4ms"), Some(3_723_004));
    assert_eq!(duration_ms("0s"), Some(0));
    for bad in ["", "1", "1d", "s", "123456s", "1s2s3s4s5s", "1.5s", "-1s"] {
        assert_eq!(duration_ms(bad), None, "{bad}");
    }
    let timed = |path: &str, timeouts: Value| {
        json!({"matches": [{"path": {"value": path}}], "timeouts": timeouts,
            "backendRefs": [backend("web")]})
    };
    let (t, text, statuses) = with_routes(
        http_listener(),
        vec![
            route(
                "r",
                0,
                json!([]),
                json!([
                    timed("/request", json!({"request": "500ms"})),
                    timed("/both", json!({"request": "10s", "backendRequest": "2s"})),
                    timed("/off", json!({"request": "0s"})),
                ]),
            ),
            route(
                "bad",
                1,
                json!(["bad.example"]),
                json!([timed("/", json!({"request": "soon"}))]),
            ),
        ],
    );
    let s = server(&t, "");
    let wait = |p: &str| proxy(location(s, &PathMatch::Prefix(p.into()))).timeouts;
    assert_eq!(wait("/request/"), Timeouts::each(500));
    assert_eq!(wait("/both/"), Timeouts::each(2000));
    assert_eq!(wait("/off/"), Timeouts::default());
    assert_has(&text, "proxy_read_timeout 500ms;");
    assert_has(&text, "proxy_connect_timeout 2s;");
    let (status, reason, message) = route_condition(&statuses, "bad", "Accepted");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "UnsupportedValue")
    );
    assert!(message.contains("timeouts.request"), "{message}");
    vireo_accepts(&t.model);
}
