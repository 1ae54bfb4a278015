//! vireo-controller end to end with Ingresses (and the first Gateway API cases): objects
//! applied through a real API server (common::apiserver), the controller binary writing
//! the configuration of a real vireo it reloads, requests through that vireo to backends
//! (common::edge).

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::apiserver::ApiServer;
use common::edge::*;
use common::process::{Daemon, TempDir, free_port};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::Ingress;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// An Ingress of class vireo: host → path (Prefix) → service:80.
fn ingress(name: &str, annotations: &[(&str, &str)], rules: &[(&str, &str, &str)]) -> Ingress {
    let annotations: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (format!("nginx.ingress.kubernetes.io/{k}"), json!(v)))
        .collect();
    let rules: Vec<Value> = rules
        .iter()
        .map(|(host, path, svc)| {
            json!({"host": host, "http": {"paths": [{"path": path, "pathType": "Prefix",
                "backend": {"service": {"name": svc, "port": {"number": 80}}}}]}})
        })
        .collect();
    object(
        json!({"metadata": {"name": name, "annotations": annotations},
        "spec": {"ingressClassName": "vireo", "rules": rules}}),
    )
}

async fn apply(client: &Client, ns: &str, ing: Ingress) {
    let api: Api<Ingress> = Api::namespaced(client.clone(), ns);
    let name = ing.metadata.name.clone().unwrap();
    let pp = PatchParams::apply("vireo-controller-test").force();
    api.patch(&name, &pp, &Patch::Apply(&ing)).await.unwrap();
}

/// Events of the namespace on `name`, as "REASON: NOTE".
async fn events(client: &Client, ns: &str, name: &str) -> Vec<String> {
    let list = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect()
}

async fn wait_event(client: &Client, ns: &str, name: &str, needle: &str) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let ev = events(client, ns, name).await;
        if ev.iter().any(|e| e.contains(needle)) || Instant::now() > end {
            return ev;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Routes and endpoints change under a running vireo, which reloads in place; served
/// Ingresses get the published address.
#[test]
fn ingresses_and_endpoints_are_served_as_they_change() {
    isolated(
        "ingresses_and_endpoints_are_served_as_they_change",
        ingresses_and_endpoints_are_served_as_they_change_body,
    );
}

async fn ingresses_and_endpoints_are_served_as_they_change_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "flow";
    namespace(&client, ns).await;
    let b = Backends::start(&["web-1", "web-2"]);
    service(&client, ns, "web", b.port("web-1")).await;
    apply(
        &client,
        ns,
        ingress("site", &[], &[("a.example", "/", "web")]),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    let pid = edge.vireo_pid();
    edge.until("http://a.example/x", &[], 200, "web-1 /x");
    // Another host, not (yet) served, is the catch-all server's 404.
    assert_eq!(edge.get("http://b.example/", &[]).0, 404);

    // The status gets the published address.
    let api: Api<Ingress> = Api::namespaced(client.clone(), ns);
    let mut status = None;
    for _ in 0..100 {
        let ing = api.get("site").await.unwrap();
        status = ing
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|l| l.ingress);
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        status.unwrap()[0].ip.as_deref(),
        Some("127.0.0.1"),
        "{}",
        edge.log()
    );

    // The endpoints move to the other backend.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    slices
        .replace("web", &PostParams::default(), &{
            let mut s = slice("web", b.port("web-2"));
            s.metadata.resource_version =
                slices.get("web").await.unwrap().metadata.resource_version;
            s
        })
        .await
        .unwrap();
    edge.until("http://a.example/y", &[], 200, "web-2 /y");

    // A second host; then the Ingress goes and so do its routes.
    apply(
        &client,
        ns,
        ingress(
            "site",
            &[],
            &[("a.example", "/", "web"), ("b.example", "/b", "web")],
        ),
    )
    .await;
    edge.until("http://b.example/b/1", &[], 200, "web-2 /b/1");
    assert_eq!(
        edge.get("http://b.example/bb", &[]).0,
        404,
        "a Prefix path matches whole segments"
    );
    api.delete("site", &DeleteParams::default()).await.unwrap();
    edge.until("http://a.example/", &[], 404, "");
    // All through reloads of the same vireo.
    assert_eq!(edge.vireo_pid(), pid);
    assert!(edge.vireo.as_ref().is_some());
}

/// A bad object gets an Event naming the problem and is left out; the rest serves.
#[test]
fn bad_objects_get_events_and_the_rest_keeps_serving() {
    isolated(
        "bad_objects_get_events_and_the_rest_keeps_serving",
        bad_objects_get_events_and_the_rest_keeps_serving_body,
    );
}

async fn bad_objects_get_events_and_the_rest_keeps_serving_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "bad";
    namespace(&client, ns).await;
    let b = Backends::start(&["web-1"]);
    service(&client, ns, "web", b.port("web-1")).await;
    apply(
        &client,
        ns,
        ingress("good", &[], &[("good.example", "/", "web")]),
    )
    .await;
    apply(
        &client,
        ns,
        ingress(
            "badvalue",
            &[("whitelist-source-range", "10.0.0.0/8;allow all")],
            &[("bad.example", "/", "web")],
        ),
    )
    .await;
    apply(
        &client,
        ns,
        ingress(
            "snippet",
            &[("configuration-snippet", "return 200 owned;")],
            &[("snip.example", "/", "web")],
        ),
    )
    .await;
    apply(
        &client,
        ns,
        ingress("noservice", &[], &[("gone.example", "/", "nosuch")]),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    edge.until("http://good.example/", &[], 200, "web-1 /");
    assert_eq!(edge.get("http://bad.example/", &[]).0, 404);
    assert_eq!(edge.get("http://snip.example/", &[]).0, 404);
    assert_eq!(edge.get("http://gone.example/", &[]).0, 503);

    let ev = wait_event(&client, ns, "badvalue", "whitelist-source-range").await;
    assert!(
        ev.iter()
            .any(|e| e.starts_with("Refused: ") && e.contains("whitelist-source-range")),
        "{ev:?}"
    );
    let ev = wait_event(&client, ns, "snippet", "--allow-snippets").await;
    assert!(
        ev.iter()
            .any(|e| e.contains("configuration-snippet is refused")),
        "{ev:?}"
    );
    let ev = wait_event(&client, ns, "noservice", "ServiceNotFound").await;
    assert!(
        ev.iter()
            .any(|e| e.contains("service bad/nosuch not found")),
        "{ev:?}"
    );
}

/// With snippets allowed, a snippet vireo refuses keeps the serving configuration.
#[test]
fn a_configuration_vireo_refuses_leaves_the_serving_one() {
    isolated(
        "a_configuration_vireo_refuses_leaves_the_serving_one",
        a_configuration_vireo_refuses_leaves_the_serving_one_body,
    );
}

async fn a_configuration_vireo_refuses_leaves_the_serving_one_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "refused";
    namespace(&client, ns).await;
    let b = Backends::start(&["web-1"]);
    service(&client, ns, "web", b.port("web-1")).await;
    apply(
        &client,
        ns,
        ingress("good", &[], &[("good.example", "/", "web")]),
    )
    .await;
    let edge = Edge::start(server, ns, &["--allow-snippets"]);
    edge.until("http://good.example/", &[], 200, "web-1 /");
    apply(
        &client,
        ns,
        ingress(
            "snippet",
            &[("configuration-snippet", "add_header X-Snippet yes;")],
            &[("s.example", "/", "web")],
        ),
    )
    .await;
    edge.until("http://s.example/", &[], 200, "web-1 /");
    assert!(
        edge.get("http://s.example/", &[])
            .1
            .contains("X-Snippet: yes")
    );
    apply(
        &client,
        ns,
        ingress(
            "broken",
            &[("configuration-snippet", "no_such_directive on;")],
            &[("x.example", "/", "web")],
        ),
    )
    .await;
    let ev = wait_event(&client, ns, "broken", "ConfigurationRejected").await;
    assert!(
        ev.iter().any(|e| e.contains("no_such_directive")),
        "{ev:?}\n{}",
        edge.log()
    );
    assert_eq!(edge.get("http://good.example/", &[]).0, 200);
    assert_eq!(edge.get("http://x.example/", &[]).0, 404);
}

/// Annotations through a real vireo: rewrite, canary, source ranges, external and basic
/// authentication, CORS, redirects, TLS with the HTTPS redirect.
#[test]
fn annotations_take_effect() {
    isolated("annotations_take_effect", annotations_take_effect_body);
}

async fn annotations_take_effect_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "annotations";
    namespace(&client, ns).await;
    let b = Backends::start(&["web-1", "canary", "auth"]);
    service(&client, ns, "web", b.port("web-1")).await;
    service(&client, ns, "canary", b.port("canary")).await;
    let auth = format!("http://{BACKEND_IP}:{}/check", b.port("auth"));
    let cert = rcgen::generate_simple_self_signed(vec!["t.example".to_string()]).unwrap();
    let mut tls: Secret =
        object(json!({"metadata": {"name": "t-tls"}, "type": "kubernetes.io/tls"}));
    tls.data = Some(BTreeMap::from([
        (
            "tls.crt".to_string(),
            k8s_openapi::ByteString(cert.cert.pem().into_bytes()),
        ),
        (
            "tls.key".to_string(),
            k8s_openapi::ByteString(cert.signing_key.serialize_pem().into_bytes()),
        ),
    ]));
    let mut users: Secret = object(json!({"metadata": {"name": "users"}}));
    users.data = Some(BTreeMap::from([(
        "auth".to_string(),
        k8s_openapi::ByteString(b"alice:{PLAIN}wonder\n".to_vec()),
    )]));
    // A CA and a client certificate it signed, for client-certificate authentication.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let client_key = rcgen::KeyPair::generate().unwrap();
    let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "alice");
    client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();
    let files = TempDir::new("client-cert");
    let cert_file = files.write("client.crt", client_cert.pem());
    let key_file = files.write("client.key", client_key.serialize_pem());
    let mut ca: Secret = object(json!({"metadata": {"name": "clients-ca"}}));
    ca.data = Some(BTreeMap::from([(
        "ca.crt".to_string(),
        k8s_openapi::ByteString(ca_cert.pem().into_bytes()),
    )]));
    for s in [tls, users, ca] {
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
    }
    let mut t = ingress("tls", &[], &[("t.example", "/", "web")]);
    t.spec.as_mut().unwrap().tls = Some(vec![object(
        json!({"hosts": ["t.example"], "secretName": "t-tls"}),
    )]);
    let mut mtls = ingress(
        "mtls",
        &[
            ("auth-tls-secret", "clients-ca"),
            ("auth-tls-match-cn", "CN=alice"),
            ("auth-tls-pass-certificate-to-upstream", "true"),
        ],
        &[("mt.example", "/", "web")],
    );
    mtls.spec.as_mut().unwrap().tls = Some(vec![object(
        json!({"hosts": ["mt.example"], "secretName": "t-tls"}),
    )]);
    for ing in [
        mtls,
        ingress(
            "rewrite",
            &[("rewrite-target", "/$2")],
            &[("r.example", "/api(/|$)(.*)", "web")],
        ),
        ingress("main", &[], &[("c.example", "/", "web")]),
        ingress(
            "canary",
            &[("canary", "true"), ("canary-by-header", "X-Canary")],
            &[("c.example", "/", "canary")],
        ),
        ingress(
            "ranges",
            &[("whitelist-source-range", "10.0.0.0/8")],
            &[("w.example", "/", "web")],
        ),
        ingress(
            "extauth",
            &[("auth-url", &auth), ("auth-response-headers", "X-User")],
            &[("e.example", "/", "web")],
        ),
        ingress(
            "basic",
            &[
                ("auth-type", "basic"),
                ("auth-secret", "users"),
                ("auth-realm", "staff"),
            ],
            &[("u.example", "/", "web")],
        ),
        ingress(
            "cors",
            &[("enable-cors", "true")],
            &[("o.example", "/", "web")],
        ),
        ingress(
            "moved",
            &[("permanent-redirect", "https://new.example/")],
            &[("m.example", "/", "web")],
        ),
        t,
    ] {
        apply(&client, ns, ing).await;
    }
    let edge = Edge::start(server, ns, &[]);
    edge.until("http://r.example/api/v1/users", &[], 200, "web-1 /v1/users");

    edge.until("http://c.example/", &[], 200, "web-1 /");
    edge.until(
        "http://c.example/",
        &["-H", "X-Canary: always"],
        200,
        "canary /",
    );
    edge.until(
        "http://c.example/",
        &["-H", "X-Canary: never"],
        200,
        "web-1 /",
    );

    edge.until("http://w.example/", &[], 403, "");

    edge.until("http://e.example/", &[], 401, "");
    edge.until(
        "http://e.example/in",
        &["-H", "X-Token: good"],
        200,
        "web-1 /in user=alice",
    );

    let (status, head, _) = edge.get("http://u.example/", &[]);
    assert_eq!(status, 401);
    assert!(
        head.contains("WWW-Authenticate: Basic realm=\"staff\""),
        "{head}"
    );
    edge.until("http://u.example/", &["-u", "alice:wonder"], 200, "web-1 /");

    let (status, head, _) = edge.get(
        "http://o.example/",
        &["-X", "OPTIONS", "-H", "Origin: https://x.example"],
    );
    assert_eq!(status, 204, "{head}");
    assert!(head.contains("Access-Control-Allow-Origin: *"), "{head}");

    let (status, head, _) = edge.get("http://m.example/", &[]);
    assert_eq!(status, 301);
    assert!(head.contains("Location: https://new.example/"), "{head}");

    let (status, head, _) = edge.get("http://t.example/p", &[]);
    assert_eq!(status, 308);
    assert!(head.contains("Location: https://t.example/p"), "{head}");
    edge.until("https://t.example/p", &[], 200, "web-1 /p");

    // Client certificates: none is refused (400), one the CA signed goes through.
    edge.until("https://mt.example/", &[], 400, "");
    let (cert, key) = (cert_file.to_str().unwrap(), key_file.to_str().unwrap());
    edge.until(
        "https://mt.example/",
        &["--cert", cert, "--key", key],
        200,
        "web-1 /",
    );
}

/// The time from a write to the API server until vireo answers `path` on `host` with a
/// body starting `want`.
fn time_to_serve(edge: &Edge, since: Instant, host: &str, path: &str, want: &str) -> Duration {
    let ok = eventually(60, || {
        fetch(edge.http, host, path).is_some_and(|(s, b)| s == 200 && b.starts_with(want))
    });
    assert!(
        ok,
        "{host}{path} never answered {want:?}: {:?}\n{}",
        fetch(edge.http, host, path),
        edge.log()
    );
    since.elapsed()
}

/// Ingresses to make (VIREO_CONTROLLER_SCALE, default 1000).
fn scale() -> usize {
    std::env::var("VIREO_CONTROLLER_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

/// A thousand annotated Ingresses; then routes and endpoints change while h2load sends
/// requests through vireo, none of which may fail. Prints the time from each change to
/// vireo serving it (median, p99) and the controller's memory.
#[test]
fn a_thousand_ingresses_change_under_load() {
    isolated(
        "a_thousand_ingresses_change_under_load",
        a_thousand_ingresses_change_under_load_body,
    );
}

async fn a_thousand_ingresses_change_under_load_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "scale";
    namespace(&client, ns).await;
    let b = Backends::start(&["web-1", "web-2", "moved"]);
    service(&client, ns, "web", b.port("web-1")).await;
    service(&client, ns, "moved", b.port("moved")).await;
    let n = scale();
    let started = Instant::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let client = client.clone();
            async move {
                let annotations = [
                    ("proxy-body-size", "8m"),
                    ("proxy-read-timeout", "30"),
                    ("enable-cors", "true"),
                    ("whitelist-source-range", "127.0.0.0/8"),
                    // A million requests would make a large access log.
                    ("enable-access-log", "false"),
                ];
                let host = format!("h{i}.example");
                apply(
                    &client,
                    ns,
                    ingress(&format!("site-{i}"), &annotations, &[(&host, "/", "web")]),
                )
                .await;
            }
        })
        .await;
    let created = started.elapsed();
    let edge = Edge::start(server, ns, &[]);
    let first = time_to_serve(&edge, started, &format!("h{}.example", n - 1), "/", "web-1");
    eprintln!(
        "{n} Ingresses created in {created:?}, all served {first:?} after the first was written"
    );

    // Load on one host all along: h2load, HTTP/1.1, 8 connections, for longer than the
    // changes take; a request is given up after 10 s without an answer.
    let load_start = Instant::now();
    let load = Command::new("h2load")
        .args([
            "--h1",
            "-c",
            "8",
            "-D",
            "60",
            "-N",
            "10s",
            "-H",
            ":authority: h0.example",
        ])
        .arg(format!("http://127.0.0.1:{}/", edge.http))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("h2load runs (Debian's nghttp2-client)");

    let mut times = Vec::new();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let rounds = 20;
    for r in 0..rounds {
        // A route: a new path on one of the Ingresses, to another Service.
        let i = (r * 37 + 1) % n;
        let host = format!("h{i}.example");
        let path = format!("/r{r}");
        let since = Instant::now();
        apply(
            &client,
            ns,
            ingress(
                &format!("site-{i}"),
                &[],
                &[(&host, "/", "web"), (&host, &path, "moved")],
            ),
        )
        .await;
        times.push(time_to_serve(&edge, since, &host, &path, "moved"));
        // Endpoints: the Service behind every Ingress moves to the other backend.
        let to = if r % 2 == 0 { "web-2" } else { "web-1" };
        let mut s = slice("web", b.port(to));
        s.metadata.resource_version = slices.get("web").await.unwrap().metadata.resource_version;
        let since = Instant::now();
        slices
            .replace("web", &PostParams::default(), &s)
            .await
            .unwrap();
        times.push(time_to_serve(
            &edge,
            since,
            &format!("h{}.example", (r * 53 + 7) % n),
            "/",
            to,
        ));
    }

    let changes_took = load_start.elapsed();
    assert!(
        changes_took < Duration::from_secs(55),
        "the changes outlasted the load: {changes_took:?}"
    );
    let out = load.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = |key: &str| {
        report
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let requests = line("requests:");
    let codes = line("status codes:");
    // "requests: N total, N started, N done, N succeeded, N failed, N errored, N timeout"
    let count = |what: &str| -> u64 {
        requests
            .split(',')
            .find(|p| p.trim().ends_with(what))
            .and_then(|p| p.split_whitespace().find_map(|w| w.parse().ok()))
            .unwrap_or(u64::MAX)
    };
    assert!(count("succeeded") > 0, "{report}");
    assert_eq!(
        (count("failed"), count("errored"), count("timeout")),
        (0, 0, 0),
        "{report}"
    );
    let non_2xx: u64 = codes
        .split(',')
        .skip(1)
        .filter_map(|p| p.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(non_2xx, 0, "{codes}\n{report}");

    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = ms(times[times.len() / 2]);
    let p99 = ms(times[(times.len() * 99).div_ceil(100) - 1]);
    let rss = std::fs::read_to_string(format!("/proc/{}/status", edge.controller.0.id()))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:") || l.starts_with("VmRSS:"))
        .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        .unwrap_or_default();
    eprintln!(
        "scale: {n} Ingresses, {} changes under load: change → served median {median:.0} ms, p99 {p99:.0} ms; controller peak RSS {rss} kB; h2load {requests}; {codes}",
        times.len()
    );
}

/// Gateway API: a Gateway of our GatewayClass and an HTTPRoute with a header match, a
/// request and a response header added, a redirect and a backend refused for want of a ReferenceGrant, served
/// by a real vireo; the route's and the Gateway's status conditions written.
#[test]
fn gateway_api_routes_are_served() {
    isolated(
        "gateway_api_routes_are_served",
        gateway_api_routes_are_served_body,
    );
}

async fn gateway_api_routes_are_served_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "gateway";
    namespace(&client, ns).await;
    let b = Backends::start(&["v1", "v2"]);
    service(&client, ns, "v1", b.port("v1")).await;
    service(&client, ns, "v2", b.port("v2")).await;
    gateway(
        &client,
        ns,
        "vireo-test",
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
    )
    .await;
    create_gateway_api(
        &client,
        Some(ns),
        "HTTPRoute",
        "httproutes",
        json!({"metadata": {"name": "site"}, "spec": {
        "parentRefs": [{"name": "gw"}], "hostnames": ["g.example"],
        "rules": [
            {"matches": [{"headers": [{"name": "env", "value": "canary"}]}],
             "filters": [{"type": "ResponseHeaderModifier",
                "responseHeaderModifier": {"add": [{"name": "X-Via", "value": "vireo"}],
                    "set": [{"name": "X-Backend", "value": "hidden"}],
                    "remove": ["X-Internal"]}},
                {"type": "RequestHeaderModifier",
                "requestHeaderModifier": {"add": [{"name": "X-User", "value": "gw"}]}}],
             "backendRefs": [{"name": "v2", "port": 80}]},
            {"filters": [{"type": "ResponseHeaderModifier",
                "responseHeaderModifier": {"add": [{"name": "X-Via", "value": "vireo"}],
                    "set": [{"name": "X-Backend", "value": "hidden"}],
                    "remove": ["X-Internal"]}},
                {"type": "RequestHeaderModifier",
                "requestHeaderModifier": {"add": [{"name": "X-User", "value": "gw"}]}}],
             "backendRefs": [{"name": "v1", "port": 80}]},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/old"}}],
             "filters": [{"type": "RequestRedirect", "requestRedirect": {"statusCode": 301,
                "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/new"}}}]},
            {"matches": [{"path": {"type": "PathPrefix", "value": "/far"}}],
             "backendRefs": [{"name": "v1", "namespace": "default", "port": 80}]},
        ]}}),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    edge.until("http://g.example/x", &[], 200, "v1 /x user=gw\n");
    edge.until("http://g.example/x", &["-H", "env: canary"], 200, "v2 /x");
    // A request header added to the client's.
    let (_, _, body) = edge.get("http://g.example/z", &["-H", "X-User: alice"]);
    assert_eq!(body, "v1 /z user=alice,gw\n");
    let (_, head, _) = edge.get("http://g.example/y", &[]);
    assert!(head.contains("X-Via: vireo"), "{head}");
    // The backend's field replaced, another removed.
    assert!(head.contains("X-Backend: hidden"), "{head}");
    assert!(!head.contains("X-Backend: v1"), "{head}");
    assert!(!head.contains("X-Internal"), "{head}");

    let (status, head, _) = edge.get("http://g.example/old/page?q=1", &[]);
    assert_eq!(status, 301, "{head}");
    assert!(
        head.contains("Location: http://g.example/new/page?q=1"),
        "{head}"
    );
    assert_eq!(edge.get("http://g.example/far/", &[]).0, 500);

    let mut route = Value::Null;
    let written = eventually(20, || {
        route = futures::executor::block_on(gateway_api_status(
            &client,
            ns,
            "HTTPRoute",
            "httproutes",
            "site",
        ));
        route["parents"][0]["conditions"].is_array()
    });
    assert!(written, "{}", edge.log());
    let conditions = &route["parents"][0]["conditions"];
    assert_eq!(conditions[0]["type"], "Accepted");
    assert_eq!(conditions[0]["status"], "True", "{route}");
    assert_eq!(conditions[1]["reason"], "RefNotPermitted", "{route}");
    let gw = gateway_api_status(&client, ns, "Gateway", "gateways", "gw").await;
    assert_eq!(gw["conditions"][1]["type"], "Programmed", "{gw}");
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 1, "{gw}");
    assert_eq!(gw["addresses"][0]["value"], "127.0.0.1", "{gw}");
}

/// GRPCRoute: calls of a real gRPC client reach a grpcio server through vireo by service
/// and method, and a method no rule matches is not passed.
#[test]
fn grpc_routes_are_served() {
    isolated("grpc_routes_are_served", grpc_routes_are_served_body);
}

async fn grpc_routes_are_served_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "grpc";
    namespace(&client, ns).await;
    let port = free_port();
    let peer = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/grpc/peer.py");
    let _echo = Daemon(
        Command::new("python3")
            .arg(&peer)
            .args(["server", &format!("{BACKEND_IP}:{port}")])
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 runs"),
    );
    assert!(eventually(20, || std::net::TcpStream::connect((
        BACKEND_IP, port
    ))
    .is_ok()));
    service(&client, ns, "echo", port).await;
    gateway(
        &client,
        ns,
        "vireo-grpc",
        json!([{"name": "http", "port": 80, "protocol": "HTTP"}]),
    )
    .await;
    create_gateway_api(
        &client,
        Some(ns),
        "GRPCRoute",
        "grpcroutes",
        json!({"metadata": {"name": "echo"}, "spec": {
        "parentRefs": [{"name": "gw"}], "hostnames": ["rpc.example"],
        "rules": [
            {"matches": [{"method": {"service": "test.Echo", "method": "Unary"}}],
             "backendRefs": [{"name": "echo", "port": 80}]},
            {"matches": [{"method": {"service": "test.Echo", "method": "ServerStream"}}],
             "backendRefs": [{"name": "echo", "port": 80}]},
        ]}}),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    let call = |cases: &str| {
        let out = Command::new("python3")
            .arg(&peer)
            .args([
                "client",
                &format!("127.0.0.1:{}", edge.http),
                cases,
                "",
                "rpc.example",
            ])
            .output()
            .expect("python3 runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let mut got = String::new();
    let served = eventually(20, || {
        got = call("unary");
        got.contains("\"body\": \"echo:hello\"")
    });
    assert!(served, "{got}\n{}", edge.log());
    assert!(got.contains("\"test\": \"yes\""), "{got}");
    let got = call("server_stream,client_stream");
    assert!(
        got.contains(
            "server_stream={\"ok\": [\"piece 0\", \"piece 1\", \"piece 2\", \"piece 3\"]}"
        ),
        "{got}"
    );
    // No rule names ClientStream: vireo answers it, the backend never sees it.
    assert!(
        got.contains("client_stream={\"code\": \"UNIMPLEMENTED\""),
        "{got}"
    );
    let mut route = Value::Null;
    let accepted = eventually(20, || {
        route = futures::executor::block_on(gateway_api_status(
            &client,
            ns,
            "GRPCRoute",
            "grpcroutes",
            "echo",
        ));
        route["parents"][0]["conditions"][0]["status"] == "True"
    });
    assert!(accepted, "{route}");
}

/// A listener taking routes `from: Selector`: a route of a namespace without the label is
/// not served; once the namespace is labelled, it is.
#[test]
fn a_namespace_label_attaches_routes() {
    isolated(
        "a_namespace_label_attaches_routes",
        a_namespace_label_attaches_routes_body,
    );
}

async fn a_namespace_label_attaches_routes_body() {
    let server = ApiServer::shared();
    let client = server.client();
    let ns = "labelled";
    namespace(&client, ns).await;
    let b = Backends::start(&["v1"]);
    service(&client, ns, "v1", b.port("v1")).await;
    gateway(
        &client,
        ns,
        "vireo-selector",
        json!([{"name": "http", "port": 80, "protocol": "HTTP",
                "allowedRoutes": {"namespaces": {"from": "Selector",
                    "selector": {"matchLabels": {"team": "web"}}}}}]),
    )
    .await;
    create_gateway_api(
        &client,
        Some(ns),
        "HTTPRoute",
        "httproutes",
        json!({"metadata": {"name": "site"}, "spec": {
        "parentRefs": [{"name": "gw"}], "hostnames": ["l.example"],
        "rules": [{"backendRefs": [{"name": "v1", "port": 80}]}]}}),
    )
    .await;
    let edge = Edge::start(server, ns, &[]);
    let refused = eventually(20, || {
        futures::executor::block_on(gateway_api_status(
            &client,
            ns,
            "HTTPRoute",
            "httproutes",
            "site",
        ))["parents"][0]["conditions"][0]["reason"]
            == "NotAllowedByListeners"
    });
    assert!(refused, "{}", edge.log());
    assert_eq!(edge.get("http://l.example/x", &[]).0, 404);
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "web"}}})),
        )
        .await
        .unwrap();
    edge.until("http://l.example/x", &[], 200, "v1 /x");
}
