//! The Gateway API end to end, modelled on the Gateway API conformance suite's HTTPRoute
//! cases: routes applied through a real API server, real requests through the vireo the
//! controller drives, to real backends (common::edge). Each test runs in a network
//! namespace and with an API server of its own.

mod common;

use common::apiserver::ApiServer;
use common::edge::*;
use kube::Client;
use serde_json::{Value, json};

/// A request through vireo and what must answer it: a backend by name (its body starts
/// with the name), or a status (`"404"`).
struct Case {
    method: &'static str,
    host: &'static str,
    path: &'static str,
    headers: &'static [&'static str],
    want: &'static str,
}

/// A GET of `path` on `host` without extra fields.
const fn get(host: &'static str, path: &'static str, want: &'static str) -> Case {
    with(host, path, &[], want)
}

/// A GET with header fields.
const fn with(
    host: &'static str,
    path: &'static str,
    headers: &'static [&'static str],
    want: &'static str,
) -> Case {
    Case {
        method: "GET",
        host,
        path,
        headers,
        want,
    }
}

/// A request of another method.
const fn method(
    method: &'static str,
    host: &'static str,
    path: &'static str,
    headers: &'static [&'static str],
    want: &'static str,
) -> Case {
    Case {
        method,
        host,
        path,
        headers,
        want,
    }
}

/// Who answered: the backend's name for a 200 from one, else the status.
fn answer(edge: &Edge, c: &Case) -> String {
    match request(edge.http, c.method, c.host, c.path, c.headers) {
        Some((200, _, body)) => body.split(' ').next().unwrap_or_default().to_string(),
        Some((status, _, _)) => status.to_string(),
        None => "no answer".to_string(),
    }
}

/// Waits until every case is answered as it wants; fails listing those that are not.
fn expect(edge: &Edge, cases: &[Case]) {
    let mut wrong = Vec::new();
    let ok = eventually(20, || {
        wrong = cases
            .iter()
            .filter_map(|c| {
                let got = answer(edge, c);
                (got != c.want).then(|| {
                    format!(
                        "{} {}{} {:?}: wanted {}, got {got}",
                        c.method, c.host, c.path, c.headers, c.want
                    )
                })
            })
            .collect();
        wrong.is_empty()
    });
    assert!(
        ok,
        "{wrong:#?}\n{}\n{}",
        edge.log(),
        edge.dir.read("conf/vireo.conf")
    );
}

/// The conditions of the route's status for our Gateway, once written.
async fn route_conditions(client: &Client, ns: &str, name: &str) -> Value {
    let mut status = Value::Null;
    for _ in 0..200 {
        status = gateway_api_status(client, ns, "HTTPRoute", "httproutes", name).await;
        if status["parents"][0]["conditions"].is_array() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    status["parents"][0]["conditions"].clone()
}

/// Waits until the route's condition `type_` has `reason`; fails showing the status.
async fn wait_condition(client: &Client, ns: &str, name: &str, type_: &str, reason: &str) {
    let mut last = Value::Null;
    for _ in 0..200 {
        last = route_conditions(client, ns, name).await;
        let found = last
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == type_ && c["reason"] == reason);
        if found {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{ns}/{name}: no {type_} condition with reason {reason}: {last:#}");
}

/// A rule passing to `backend` (port 80) when one of `matches` holds.
fn rule(matches: Value, backend: &str) -> Value {
    json!({"matches": matches, "backendRefs": [{"name": backend, "port": 80}]})
}

/// The namespace `ns` with a Gateway of one HTTP listener (no hostname) and Services
/// for `names`, each with a backend of its own.
async fn setup(client: &Client, ns: &str, names: &[&'static str]) -> Backends {
    namespace(client, ns).await;
    let b = Backends::start(names);
    for name in names {
        service(client, ns, name, b.port(name)).await;
    }
    gateway(
        client,
        ns,
        &format!("vireo-{ns}"),
        json!([{"name": "http", "port": 80, "protocol": "HTTP",
            "allowedRoutes": {"namespaces": {"from": "All"}}}]),
    )
    .await;
    b
}

/// HTTPRouteMatching and HTTPRouteMatchingAcrossRoutes: two routes share example.com
/// (one names it, the other `*.com`); the longer prefix, then the match with more header
/// matches wins across them, and the wildcard route serves the hosts it covers.
#[test]
fn matches_across_routes_take_precedence() {
    isolated(
        "matches_across_routes_take_precedence",
        matches_across_routes_take_precedence_body,
    );
}

async fn matches_across_routes_take_precedence_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "across";
    let _b = setup(&client, ns, &["v1", "v2"]).await;
    http_route(
        &client,
        ns,
        "part1",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["example.com", "example.net"],
            "rules": [rule(json!([{"path": {"type": "PathPrefix", "value": "/"}},
                {"headers": [{"name": "version", "value": "one"}]}]), "v1")]}),
    )
    .await;
    http_route(
        &client,
        ns,
        "part2",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["*.com"],
            "rules": [rule(json!([{"path": {"type": "PathPrefix", "value": "/v2"}},
                {"headers": [{"name": "version", "value": "two"}]}]), "v2")]}),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    expect(
        &edge,
        &[
            get("example.com", "/", "v1"),
            get("example.com", "/example", "v1"),
            get("example.net", "/example", "v1"),
            with("example.com", "/example", &["version: one"], "v1"),
            get("example.com", "/v2", "v2"),
            // part2 is limited to *.com.
            get("example.net", "/v2", "v1"),
            get("example.com", "/v2/example", "v2"),
            // A prefix matches whole segments.
            get("example.com", "/v2example", "v1"),
            with("example.com", "/", &["version: two"], "v2"),
            // Hosts only the wildcard covers.
            get("other.com", "/v2", "v2"),
            get("deep.other.com", "/v2/x", "v2"),
            with("other.com", "/", &["version: two"], "v2"),
            get("other.com", "/", "404"),
            get("example.org", "/v2", "404"),
        ],
    );
    for name in ["part1", "part2"] {
        wait_condition(&client, ns, name, "Accepted", "Accepted").await;
        wait_condition(&client, ns, name, "ResolvedRefs", "ResolvedRefs").await;
    }
}

/// Within one route: Exact over PathPrefix, the longer prefix, then method, then more
/// header matches, then more query parameter matches, then rule order
/// (HTTPRouteExactPathMatching, HTTPRouteHeaderMatching, HTTPRouteQueryParamMatching,
/// HTTPRouteMethodMatching); query parameter names and values are case-sensitive, and
/// requests a longer path's matches do not take fall back to the shorter path's.
#[test]
fn matches_within_a_route_take_precedence() {
    isolated(
        "matches_within_a_route_take_precedence",
        matches_within_a_route_take_precedence_body,
    );
}

async fn matches_within_a_route_take_precedence_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "within";
    let _b = setup(&client, ns, &["v1", "v2", "v3"]).await;
    let prefix = |p: &str| json!({"type": "PathPrefix", "value": p});
    let q = |n: &str, v: &str| json!({"name": n, "value": v});
    let h = q;
    http_route(
        &client,
        ns,
        "paths",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["paths.example"], "rules": [
            rule(json!([{"path": prefix("/api")}]), "v1"),
            rule(json!([{"path": prefix("/api/v2")}]), "v2"),
            rule(json!([{"path": {"type": "Exact", "value": "/api/v2/health"}}]), "v3"),
            rule(json!([{"path": prefix("/api"), "headers": [h("x-a", "1")]}]), "v2"),
            rule(json!([{"path": prefix("/api"), "headers": [h("x-a", "1"), h("x-b", "2")]}]), "v3"),
            rule(json!([{"path": prefix("/api"), "headers": [
                {"type": "RegularExpression", "name": "x-c", "value": "^[0-9]+$"}]}]), "v2"),
        ]}),
    )
    .await;
    http_route(
        &client,
        ns,
        "query",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["query.example"], "rules": [
            rule(json!([{"queryParams": [q("animal", "whale")]}]), "v1"),
            rule(json!([{"queryParams": [q("animal", "dolphin")]}]), "v2"),
            rule(json!([{"queryParams": [q("animal", "dolphin"), q("color", "blue")]}]), "v3"),
            rule(json!([{"queryParams": [q("ANIMAL", "Whale")]}]), "v3"),
            rule(json!([{"path": prefix("/path1"), "queryParams": [q("animal", "whale")]}]), "v1"),
            rule(json!([{"headers": [h("version", "one")], "queryParams": [q("animal", "whale")]}]), "v2"),
            rule(json!([{"path": prefix("/path2"), "headers": [h("version", "two")],
                "queryParams": [q("animal", "whale")]}]), "v3"),
            rule(json!([{"path": prefix("/path3"), "queryParams": [q("animal", "shark")]},
                {"path": prefix("/path4"), "headers": [h("version", "three")],
                 "queryParams": [q("animal", "kraken")]}]), "v1"),
            rule(json!([{"path": prefix("/path5")}]), "v1"),
            rule(json!([{"queryParams": [q("animal", "hydra")]}]), "v2"),
            rule(json!([{"headers": [h("version", "four")]}]), "v3"),
        ]}),
    )
    .await;
    http_route(
        &client,
        ns,
        "method",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["method.example"], "rules": [
            rule(json!([{"method": "POST"}]), "v1"),
            rule(json!([{"method": "GET"}]), "v2"),
            rule(json!([{"path": prefix("/path1"), "method": "GET"}]), "v1"),
            rule(json!([{"headers": [h("version", "one")], "method": "PUT"}]), "v2"),
            rule(json!([{"queryParams": [q("animal", "whale")], "method": "POST"}]), "v3"),
            rule(json!([{"path": prefix("/path3"), "method": "DELETE"},
                {"path": prefix("/path4"), "headers": [h("version", "three")], "method": "PATCH"}]), "v1"),
            rule(json!([{"path": prefix("/path5")}]), "v1"),
            rule(json!([{"method": "PATCH"}]), "v2"),
            rule(json!([{"headers": [h("version", "four")]}]), "v3"),
        ]}),
    )
    .await;
    // Paths whose matches have filters of their own, unlike the shorter paths'.
    let add = |filter: &str, name: &str| {
        let field = if filter == "RequestHeaderModifier" {
            "requestHeaderModifier"
        } else {
            "responseHeaderModifier"
        };
        json!([{"type": filter, field: {"add": [{"name": name, "value": "1"}]}}])
    };
    http_route(
        &client,
        ns,
        "fallback",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["fallback.example"], "rules": [
            rule(json!([{"path": prefix("/")}]), "v1"),
            {"matches": [{"path": prefix("/api"), "headers": [h("x-v", "2")]}],
             "filters": add("ResponseHeaderModifier", "X-Api"), "backendRefs": [{"name": "v2", "port": 80}]},
            {"matches": [{"path": prefix("/api/deep"), "headers": [h("x-d", "1")]}],
             "filters": add("RequestHeaderModifier", "X-Deep"), "backendRefs": [{"name": "v3", "port": 80}]},
        ]}),
    )
    .await;
    // Matches of one path with different filters, redirects under header matches.
    http_route(
        &client,
        ns,
        "filters",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["filters.example"], "rules": [
            rule(json!([{"path": prefix("/a")}]), "v1"),
            {"matches": [{"path": prefix("/a"), "headers": [h("x-v", "2")]}],
             "filters": add("ResponseHeaderModifier", "X-V2"), "backendRefs": [{"name": "v2", "port": 80}]},
            {"matches": [{"path": prefix("/a"), "headers": [h("x-v", "3")]}],
             "filters": add("RequestHeaderModifier", "X-V3"), "backendRefs": [{"name": "v3", "port": 80}]},
            {"matches": [{"path": prefix("/a"), "headers": [h("x-r", "1")]}],
             "filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "elsewhere.example"}}]},
            {"matches": [{"path": prefix("/a"), "headers": [h("x-p", "1")]}],
             "filters": [{"type": "RequestRedirect", "requestRedirect": {"path":
                {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/z"}}}]},
        ]}),
    )
    .await;
    // A route sharing a host with an Ingress.
    http_route(
        &client,
        ns,
        "shared",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["shared.example"], "rules": [
            rule(json!([{"path": {"type": "Exact", "value": "/x"}}]), "v2"),
            rule(json!([{"path": {"type": "Exact", "value": "/y"}}]), "v3"),
        ]}),
    )
    .await;
    let ingress: k8s_openapi::api::networking::v1::Ingress = object(json!({
        "metadata": {"name": "shared"},
        "spec": {"ingressClassName": "vireo", "rules": [{"host": "shared.example", "http": {
            "paths": [{"path": "/x", "pathType": "Exact",
                "backend": {"service": {"name": "v1", "port": {"number": 80}}}}]}}]}}));
    kube::Api::<k8s_openapi::api::networking::v1::Ingress>::namespaced(client.clone(), ns)
        .create(&Default::default(), &ingress)
        .await
        .unwrap();
    let edge = Edge::start(server, ns, &[]);
    expect(
        &edge,
        &[
            // Each match of a path with its own filters.
            with("filters.example", "/a", &["x-v: 2"], "v2"),
            with("filters.example", "/a/b", &["x-v: 3"], "v3"),
            get("filters.example", "/a/b", "v1"),
            // Redirects under header matches.
            with("filters.example", "/a/b", &["x-r: 1"], "302"),
            with("filters.example", "/a/b", &["x-p: 1"], "302"),
            // A path an Ingress serves stays the Ingress's.
            get("shared.example", "/x", "v1"),
            get("shared.example", "/y", "v3"),
            // A path's requests its matches do not take go on to the shorter paths', with
            // their filters.
            get("fallback.example", "/api/x", "v1"),
            with("fallback.example", "/api/x", &["x-v: 2"], "v2"),
            get("fallback.example", "/api/deep/x", "v1"),
            with("fallback.example", "/api/deep/x", &["x-v: 2"], "v2"),
            with("fallback.example", "/api/deep", &["x-d: 1"], "v3"),
            with(
                "fallback.example",
                "/api/deep/x",
                &["x-d: 1", "x-v: 2"],
                "v3",
            ),
            // Paths: Exact over prefixes, the longest prefix, then header counts.
            get("paths.example", "/api", "v1"),
            get("paths.example", "/api/x", "v1"),
            get("paths.example", "/api/v2", "v2"),
            get("paths.example", "/api/v2/health", "v3"),
            get("paths.example", "/api/v2/health/x", "v2"),
            get("paths.example", "/api/v2x", "v1"),
            with("paths.example", "/api/x", &["x-a: 1"], "v2"),
            with("paths.example", "/api/x", &["x-a: 1", "x-b: 2"], "v3"),
            with("paths.example", "/api/x", &["x-b: 2"], "v1"),
            // Header names are caseless, values are not.
            with("paths.example", "/api/x", &["X-A: 1", "X-B: 2"], "v3"),
            with("paths.example", "/api/x", &["x-c: 42"], "v2"),
            with("paths.example", "/api/x", &["x-c: 4a"], "v1"),
            // The longer prefix is taken whatever the headers.
            with("paths.example", "/api/v2/x", &["x-a: 1", "x-b: 2"], "v2"),
            get("paths.example", "/other", "404"),
            // Query parameters.
            get("query.example", "/?animal=whale", "v1"),
            get("query.example", "/?animal=dolphin", "v2"),
            get("query.example", "/?animal=dolphin&color=blue", "v3"),
            get("query.example", "/?color=blue&animal=dolphin", "v3"),
            get("query.example", "/?ANIMAL=Whale", "v3"),
            get("query.example", "/?animal=Whale", "404"),
            get(
                "query.example",
                "/?animal=whale&otherparam=irrelevant",
                "v1",
            ),
            get("query.example", "/?animal=dolphin&color=yellow", "v2"),
            get("query.example", "/?color=blue", "404"),
            get("query.example", "/?animal=dog", "404"),
            get("query.example", "/?animal=whaledolphin", "404"),
            get("query.example", "/?xanimal=whale", "404"),
            get("query.example", "/", "404"),
            get("query.example", "/path1?animal=whale", "v1"),
            // /path1's match does not take it: the shorter path's matches do.
            get("query.example", "/path1?animal=dolphin", "v2"),
            with("query.example", "/?animal=whale", &["version: one"], "v2"),
            with(
                "query.example",
                "/path2?animal=whale",
                &["version: two"],
                "v3",
            ),
            get("query.example", "/path3?animal=shark", "v1"),
            with(
                "query.example",
                "/path4?animal=kraken",
                &["version: three"],
                "v1",
            ),
            get("query.example", "/?animal=shark", "404"),
            get("query.example", "/path4?animal=kraken", "404"),
            get("query.example", "/path5?animal=hydra", "v1"),
            with("query.example", "/?animal=hydra", &["version: four"], "v3"),
            // Methods.
            method("POST", "method.example", "/", &[], "v1"),
            get("method.example", "/", "v2"),
            method("HEAD", "method.example", "/", &[], "404"),
            get("method.example", "/path1", "v1"),
            method("PUT", "method.example", "/", &["version: one"], "v2"),
            method("POST", "method.example", "/?animal=whale", &[], "v3"),
            method("DELETE", "method.example", "/path3", &[], "v1"),
            method(
                "PATCH",
                "method.example",
                "/path4",
                &["version: three"],
                "v1",
            ),
            method("PUT", "method.example", "/path3", &[], "404"),
            method("PATCH", "method.example", "/path5", &[], "v1"),
            method("PATCH", "method.example", "/", &["version: four"], "v2"),
        ],
    );
    // Each answer has the filters of the match that took it.
    let api = |headers: &[&str]| {
        let (_, head, _) = request(edge.http, "GET", "fallback.example", "/api/deep/x", headers)
            .unwrap_or_default();
        head.contains("X-Api: 1")
    };
    assert!(api(&["x-v: 2"]));
    assert!(!api(&[]));
    assert!(!api(&["x-d: 1", "x-v: 2"]));
    let v2 = |headers: &[&str]| {
        let (_, head, _) =
            request(edge.http, "GET", "filters.example", "/a", headers).unwrap_or_default();
        head.contains("X-V2: 1")
    };
    assert!(v2(&["x-v: 2"]));
    assert!(!v2(&[]));
    assert!(!v2(&["x-v: 3"]));
    let (_, head, _) =
        request(edge.http, "GET", "filters.example", "/a/b?q=1", &["x-r: 1"]).unwrap_or_default();
    assert!(
        head.contains("Location: http://elsewhere.example/a/b?q=1"),
        "{head}"
    );
    let (_, head, _) = request(
        edge.http,
        "GET",
        "filters.example",
        "/a/b/c?q=1",
        &["x-p: 1"],
    )
    .unwrap_or_default();
    assert!(
        head.contains("Location: http://filters.example/z/b/c?q=1"),
        "{head}"
    );
    wait_condition(&client, ns, "filters", "Accepted", "Accepted").await;
    wait_condition(
        &client,
        ns,
        "shared",
        "PartiallyInvalid",
        "UnsupportedValue",
    )
    .await;
    wait_condition(&client, ns, "query", "Accepted", "Accepted").await;
}

/// HTTPRouteHostnameIntersection: routes attach to listeners whose hostnames intersect
/// theirs and serve only the intersection; a Host's port is not part of the name; a
/// route that intersects no listener is refused with NoMatchingListenerHostname and
/// counted on none.
#[test]
fn hostnames_intersect_with_listeners() {
    isolated(
        "hostnames_intersect_with_listeners",
        hostnames_intersect_with_listeners_body,
    );
}

async fn hostnames_intersect_with_listeners_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "hostnames";
    namespace(&client, ns).await;
    let b = Backends::start(&["v1", "v2", "v3"]);
    for name in ["v1", "v2", "v3"] {
        service(&client, ns, name, b.port(name)).await;
    }
    let listener = |name: &str, host: &str| json!({"name": name, "port": 80, "protocol": "HTTP", "hostname": host});
    gateway(
        &client,
        ns,
        "vireo-hostnames",
        json!([
            listener("listener-1", "very.specific.com"),
            listener("listener-2", "*.wildcard.io"),
            listener("listener-3", "*.anotherwildcard.io"),
        ]),
    )
    .await;
    let prefix_rule = |p: &str, backend: &str| {
        rule(
            json!([{"path": {"type": "PathPrefix", "value": p}}]),
            backend,
        )
    };
    let routes = [
        (
            "specific-specific",
            json!([
                "non.matching.com",
                "*.nonmatchingwildcard.io",
                "very.specific.com"
            ]),
            prefix_rule("/s1", "v1"),
        ),
        (
            "specific-wildcard",
            json!([
                "non.matching.com",
                "wildcard.io",
                "foo.wildcard.io",
                "bar.wildcard.io",
                "foo.bar.wildcard.io"
            ]),
            prefix_rule("/s2", "v2"),
        ),
        (
            "wildcard-specific",
            json!(["non.matching.com", "*.specific.com"]),
            prefix_rule("/s3", "v3"),
        ),
        (
            "wildcard-wildcard",
            json!(["*.anotherwildcard.io"]),
            prefix_rule("/s4", "v1"),
        ),
        (
            "no-intersection",
            json!(["specific.but.wrong.com", "wildcard.io"]),
            prefix_rule("/s5", "v2"),
        ),
    ];
    for (name, hostnames, r) in routes {
        http_route(
            &client,
            ns,
            name,
            json!({"parentRefs": [{"name": "gw"}], "hostnames": hostnames, "rules": [r]}),
        )
        .await;
    }
    let edge = Edge::start(server, ns, &[]);
    expect(
        &edge,
        &[
            get("very.specific.com", "/s1", "v1"),
            get("very.specific.com:1234", "/s1", "v1"),
            get("non.matching.com", "/s1", "404"),
            get("foo.nonmatchingwildcard.io", "/s1", "404"),
            get("foo.wildcard.io", "/s1", "404"),
            get("very.specific.com", "/non-matching-prefix", "404"),
            get("foo.wildcard.io", "/s2", "v2"),
            get("bar.wildcard.io", "/s2", "v2"),
            get("foo.bar.wildcard.io", "/s2", "v2"),
            get("non.matching.com", "/s2", "404"),
            get("wildcard.io", "/s2", "404"),
            get("very.specific.com", "/s2", "404"),
            get("foo.wildcard.io", "/non-matching-prefix", "404"),
            get("very.specific.com", "/s3", "v3"),
            get("non.matching.com", "/s3", "404"),
            get("foo.specific.com", "/s3", "404"),
            get("foo.wildcard.io", "/s3", "404"),
            get("foo.anotherwildcard.io", "/s4", "v1"),
            get("bar.anotherwildcard.io", "/s4", "v1"),
            get("foo.bar.anotherwildcard.io", "/s4", "v1"),
            get("anotherwildcard.io", "/s4", "404"),
            get("foo.wildcard.io", "/s4", "404"),
            get("very.specific.com", "/s4", "404"),
            get("specific.but.wrong.com", "/s5", "404"),
            get("wildcard.io", "/s5", "404"),
        ],
    );
    wait_condition(
        &client,
        ns,
        "no-intersection",
        "Accepted",
        "NoMatchingListenerHostname",
    )
    .await;
    // Counted on the listeners they attach to.
    let mut gw = Value::Null;
    for _ in 0..200 {
        gw = gateway_api_status(&client, ns, "Gateway", "gateways", "gw").await;
        let attached: Vec<Value> = gw["listeners"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| l["attachedRoutes"].clone())
            .collect();
        if attached == [json!(2), json!(1), json!(1)] {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("listeners' attachedRoutes are not 2, 1, 1: {gw:#}");
}

/// HTTPRouteRewritePath, HTTPRouteRewriteHost and HTTPRouteRequestMirror: the backend
/// gets the rewritten path (the query kept) and Host; a mirrored request reaches the
/// mirror's backend while the client gets the primary's answer.
#[test]
fn rewrites_and_mirrors_reach_the_backends() {
    isolated(
        "rewrites_and_mirrors_reach_the_backends",
        rewrites_and_mirrors_reach_the_backends_body,
    );
}

async fn rewrites_and_mirrors_reach_the_backends_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "rewrite";
    let b = setup(&client, ns, &["v1", "v2"]).await;
    let prefix = |p: &str| json!([{"path": {"type": "PathPrefix", "value": p}}]);
    let rewrite = |matches: Value, rw: Value, backend: &str| {
        json!({"matches": matches, "filters": [{"type": "URLRewrite", "urlRewrite": rw}],
            "backendRefs": [{"name": backend, "port": 80}]})
    };
    let path = |type_: &str, value: &str| {
        let field = if type_ == "ReplaceFullPath" {
            "replaceFullPath"
        } else {
            "replacePrefixMatch"
        };
        json!({"path": {"type": type_, field: value}})
    };
    http_route(
        &client,
        ns,
        "rewrite-path",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["path.example"], "rules": [
            rewrite(prefix("/prefix/one"), path("ReplacePrefixMatch", "/one"), "v1"),
            rewrite(prefix("/strip-prefix"), path("ReplacePrefixMatch", "/"), "v1"),
            rewrite(prefix("/full/one"), path("ReplaceFullPath", "/one"), "v1"),
            rewrite(prefix("/trailing/"), path("ReplacePrefixMatch", "/kept/"), "v1"),
        ]}),
    )
    .await;
    http_route(
        &client,
        ns,
        "rewrite-host",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["host.example"], "rules": [
            rewrite(prefix("/one"), json!({"hostname": "one.example.org"}), "v1"),
            rewrite(json!([]), json!({"hostname": "example.org"}), "v2"),
        ]}),
    )
    .await;
    let mirror = json!({"type": "RequestMirror",
        "requestMirror": {"backendRef": {"name": "v2", "port": 80}}});
    http_route(
        &client,
        ns,
        "mirror",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["mirror.example"], "rules": [
            {"matches": prefix("/mirror"), "filters": [mirror],
             "backendRefs": [{"name": "v1", "port": 80}]},
            {"matches": prefix("/mirror-and-modify-headers"), "filters": [mirror,
                {"type": "RequestHeaderModifier",
                 "requestHeaderModifier": {"add": [{"name": "X-User", "value": "gw"}]}}],
             "backendRefs": [{"name": "v1", "port": 80}]},
        ]}),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    // The backend answers with the URI it got.
    let seen = |host: &str, path: &str| {
        let (status, head, body) = request(edge.http, "GET", host, path, &[]).unwrap_or_default();
        let seen_host = head
            .lines()
            .find_map(|l| l.strip_prefix("X-Seen-Host: "))
            .unwrap_or_default()
            .to_string();
        (status, body, seen_host)
    };
    let mut last = Default::default();
    let served = eventually(20, || {
        last = seen("path.example", "/prefix/one/two");
        last.1.starts_with("v1 /one/two ")
    });
    assert!(served, "{last:?}\n{}", edge.log());
    for (from, to) in [
        ("/prefix/one", "/one"),
        ("/prefix/one/", "/one/"),
        ("/prefix/one/two?x=1&y=2", "/one/two?x=1&y=2"),
        ("/strip-prefix", "/"),
        ("/strip-prefix/three", "/three"),
        ("/full/one", "/one"),
        ("/full/one/two?q=1", "/one?q=1"),
        ("/trailing/a/b", "/kept/a/b"),
    ] {
        let (status, body, _) = seen("path.example", from);
        assert_eq!(
            (status, body),
            (200, format!("v1 {to} user=\n")),
            "{from}\n{}",
            edge.log()
        );
    }
    // The prefix matches whole segments: /prefix/onetwo is no match.
    assert_eq!(seen("path.example", "/prefix/onetwo").0, 404);

    for (path, backend, host) in [
        ("/one", "v1", "one.example.org"),
        ("/one/x", "v1", "one.example.org"),
        ("/", "v2", "example.org"),
        ("/two", "v2", "example.org"),
    ] {
        let (status, body, seen_host) = seen("host.example", path);
        assert_eq!(status, 200, "{path}: {body}");
        assert!(
            body.starts_with(&format!("{backend} {path} ")),
            "{path}: {body}"
        );
        assert_eq!(seen_host, host, "{path}");
    }

    for path in ["/mirror", "/mirror-and-modify-headers"] {
        let (status, _, body) =
            request(edge.http, "GET", "mirror.example", path, &["X-User: alice"]).unwrap();
        let user = if path == "/mirror" {
            "alice"
        } else {
            "alice,gw"
        };
        assert_eq!(
            (status, body),
            (200, format!("v1 {path} user={user}\n")),
            "{}",
            edge.log()
        );
        let mirrored = eventually(10, || {
            b.requests("v2")
                .iter()
                .any(|r| r.starts_with(&format!("GET {path} ")))
        });
        assert!(mirrored, "v2 never got {path}: {:?}", b.requests("v2"));
    }
    // The mirror's copy is a copy: v1 answered each request once.
    let v1: Vec<String> = b.requests("v1");
    assert_eq!(
        v1.iter().filter(|r| r.starts_with("GET /mirror ")).count(),
        1,
        "{v1:?}"
    );
    for name in ["rewrite-path", "rewrite-host", "mirror"] {
        wait_condition(&client, ns, name, "Accepted", "Accepted").await;
    }
}

/// HTTPRouteWeight: backends weighted 70, 30 and 0 share 500 requests within 5 % of
/// their weights, and the one of weight 0 gets none; HTTPRouteAllBackendsWeightZero: a
/// rule whose backends all weigh 0 answers 500.
#[test]
fn weights_share_the_requests() {
    isolated(
        "weights_share_the_requests",
        weights_share_the_requests_body,
    );
}

async fn weights_share_the_requests_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "weights";
    let _b = setup(&client, ns, &["v1", "v2", "v3"]).await;
    let weighted = |w: [u32; 3]| {
        json!([{"name": "v1", "port": 80, "weight": w[0]},
            {"name": "v2", "port": 80, "weight": w[1]},
            {"name": "v3", "port": 80, "weight": w[2]}])
    };
    http_route(
        &client,
        ns,
        "weighted-backends",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["weights.example"], "rules": [
            {"backendRefs": weighted([70, 30, 0])},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/zero"}}],
             "backendRefs": weighted([0, 0, 0])},
        ]}),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    expect(&edge, &[get("weights.example", "/zero", "500")]);
    // As the conformance suite, a few tries: 500 requests fall outside 5 % now and then.
    let mut last = String::new();
    for _ in 0..3 {
        let mut seen = std::collections::BTreeMap::<String, u32>::new();
        for _ in 0..500 {
            let c = get("weights.example", "/", "");
            *seen.entry(answer(&edge, &c)).or_default() += 1;
        }
        let share = |name: &str| f64::from(seen.get(name).copied().unwrap_or(0)) / 500.0;
        last = format!("{seen:?}");
        assert!(!seen.contains_key("v3"), "weight 0 got requests: {last}");
        assert_eq!(seen.keys().len(), 2, "{last}");
        if (share("v1") - 0.7).abs() <= 0.05 && (share("v2") - 0.3).abs() <= 0.05 {
            return;
        }
    }
    panic!("the shares never came within 5 % of 70/30: {last}");
}

/// HTTPRouteReferenceGrant: a backend in another namespace is refused
/// (`RefNotPermitted`, 500) until a ReferenceGrant there lets HTTPRoutes of the route's
/// namespace use it, is served while it does, and refused again once it is deleted; a
/// grant naming another Service admits nothing.
#[test]
fn a_reference_grant_admits_a_backend_of_another_namespace() {
    isolated(
        "a_reference_grant_admits_a_backend_of_another_namespace",
        a_reference_grant_admits_a_backend_of_another_namespace_body,
    );
}

async fn a_reference_grant_admits_a_backend_of_another_namespace_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let (ns, other) = ("infra", "web-backend");
    let b = setup(&client, ns, &["web"]).await;
    namespace(&client, other).await;
    service(&client, other, "web", b.port("web")).await;
    http_route(
        &client,
        ns,
        "reference-grant",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["grant.example"], "rules": [
            {"backendRefs": [{"name": "web", "namespace": other, "port": 80}]}]}),
    )
    .await;
    let grant = |name: &str, service: &str| {
        json!({"metadata": {"name": name}, "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": ns}],
            "to": [{"group": "", "kind": "Service", "name": service}]}})
    };
    create_gateway_api(
        &client,
        Some(other),
        "ReferenceGrant",
        "referencegrants",
        grant("elsewhere", "not-web"),
    )
    .await;
    let edge = Edge::cluster_wide(server, &[]);
    let refused = [get("grant.example", "/", "500")];
    expect(&edge, &refused);
    wait_condition(
        &client,
        ns,
        "reference-grant",
        "ResolvedRefs",
        "RefNotPermitted",
    )
    .await;

    create_gateway_api(
        &client,
        Some(other),
        "ReferenceGrant",
        "referencegrants",
        grant("web", "web"),
    )
    .await;
    expect(&edge, &[get("grant.example", "/", "web")]);
    wait_condition(
        &client,
        ns,
        "reference-grant",
        "ResolvedRefs",
        "ResolvedRefs",
    )
    .await;

    delete_gateway_api(&client, other, "ReferenceGrant", "referencegrants", "web").await;
    expect(&edge, &refused);
    wait_condition(
        &client,
        ns,
        "reference-grant",
        "ResolvedRefs",
        "RefNotPermitted",
    )
    .await;
}

/// HTTPRouteTimeoutRequest, HTTPRouteTimeoutBackendRequest: a backend answering after a
/// second gets 504 under a rule whose `request` or `backendRequest` timeout is 500 ms,
/// and is waited for under one whose timeout is `0s` or that has none; a quick answer
/// passes under any.
#[test]
fn rule_timeouts_answer_504() {
    isolated("rule_timeouts_answer_504", rule_timeouts_answer_504_body);
}

async fn rule_timeouts_answer_504_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "timeouts";
    let _b = setup(&client, ns, &["v1"]).await;
    let timed = |path: &str, timeouts: Value| {
        json!({"matches": [{"path": {"type": "PathPrefix", "value": path}}],
            "timeouts": timeouts, "backendRefs": [{"name": "v1", "port": 80}]})
    };
    http_route(
        &client,
        ns,
        "timeouts",
        json!({"parentRefs": [{"name": "gw"}], "hostnames": ["timeouts.example"], "rules": [
            timed("/request-timeout", json!({"request": "500ms"})),
            timed("/backend-timeout", json!({"request": "10s", "backendRequest": "500ms"})),
            timed("/disable-request-timeout", json!({"request": "0s"})),
            rule(json!([{"path": {"type": "PathPrefix", "value": "/untimed"}}]), "v1"),
        ]}),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    expect(
        &edge,
        &[
            get("timeouts.example", "/request-timeout", "v1"),
            get("timeouts.example", "/request-timeout/slow", "504"),
            get("timeouts.example", "/backend-timeout", "v1"),
            get("timeouts.example", "/backend-timeout/slow", "504"),
            get("timeouts.example", "/disable-request-timeout/slow", "v1"),
            get("timeouts.example", "/untimed/slow", "v1"),
        ],
    );
    let started = std::time::Instant::now();
    let c = get("timeouts.example", "/request-timeout/slow", "504");
    assert_eq!(answer(&edge, &c), "504");
    let took = started.elapsed();
    assert!(
        took >= std::time::Duration::from_millis(450)
            && took < std::time::Duration::from_millis(950),
        "504 after {took:?}"
    );
    wait_condition(&client, ns, "timeouts", "Accepted", "Accepted").await;
}
