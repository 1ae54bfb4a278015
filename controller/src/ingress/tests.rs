//! Translation and rendering of Ingresses, each annotation's output checked; the whole
//! configuration is checked by the real `vireo -t`.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use serde_json::{Value, json};

use super::*;
use crate::render::{Settings, render};

pub(crate) fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

/// An Ingress of class vireo, created at second `age`, with one rule per (host, path,
/// pathType, service, port).
fn ing(
    name: &str,
    age: u32,
    ann: &[(&str, &str)],
    rules: &[(&str, &str, &str, &str, i32)],
) -> Ingress {
    let annotations: serde_json::Map<String, Value> = ann
        .iter()
        .map(|(k, v)| (format!("{PREFIX}{k}"), json!(v)))
        .collect();
    let rules: Vec<Value> = rules
        .iter()
        .map(|(host, path, ty, svc, port)| {
            let mut r = json!({"http": {"paths": [{"path": path, "pathType": ty,
                "backend": {"service": {"name": svc, "port": {"number": port}}}}]}});
            if !host.is_empty() {
                r["host"] = json!(host);
            }
            r
        })
        .collect();
    from(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "creationTimestamp": format!("2026-01-01T00:00:{age:02}Z"), "annotations": annotations},
        "spec": {"ingressClassName": "vireo", "rules": rules}
    }))
}

pub(crate) fn svc(name: &str, ports: &[(&str, i32)]) -> Service {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p)| json!({"name": n, "port": p}))
        .collect();
    from(json!({"metadata": {"name": name, "namespace": "default"},
        "spec": {"ports": ports, "clusterIP": "10.96.0.10"}}))
}

/// An EndpointSlice of `svc` whose port `port_name` is `port`, with (address, ready) endpoints.
pub(crate) fn slice(
    svc: &str,
    port_name: &str,
    port: i32,
    endpoints: &[(&str, bool)],
) -> EndpointSlice {
    let eps: Vec<Value> = endpoints
        .iter()
        .map(|(a, ready)| json!({"addresses": [a], "conditions": {"ready": ready}}))
        .collect();
    from(json!({
        "metadata": {"name": format!("{svc}-abc"), "namespace": "default",
            "labels": {"kubernetes.io/service-name": svc}},
        "addressType": "IPv4", "endpoints": eps, "ports": [{"name": port_name, "port": port}]
    }))
}

pub(crate) fn secret(name: &str, ty: &str, data: &[(&str, &str)]) -> Secret {
    let mut s: Secret =
        from(json!({"metadata": {"name": name, "namespace": "default"}, "type": ty}));
    s.data = Some(
        data.iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    k8s_openapi::ByteString(v.as_bytes().to_vec()),
                )
            })
            .collect(),
    );
    s
}

/// A cluster with services `web` (8080 → 10.0.0.1-2, one more not ready), `canary`
/// (→ 10.0.1.1) and `errors` (→ 10.0.2.1), and these Ingresses.
fn snap(ingresses: Vec<Ingress>) -> Snapshot {
    Snapshot {
        ingresses,
        services: vec![
            svc("web", &[("http", 80)]),
            svc("canary", &[("http", 80)]),
            svc("errors", &[("", 8000)]),
        ],
        endpoint_slices: vec![
            slice(
                "web",
                "http",
                8080,
                &[("10.0.0.2", true), ("10.0.0.1", true), ("10.0.0.3", false)],
            ),
            slice("canary", "http", 8080, &[("10.0.1.1", true)]),
            slice("errors", "", 8000, &[("10.0.2.1", true)]),
        ],
        secrets: vec![
            secret(
                "tls",
                "kubernetes.io/tls",
                &[("tls.crt", &cert().0), ("tls.key", &cert().1)],
            ),
            secret("users", "Opaque", &[("auth", "alice:$apr1$x$y\n")]),
            secret("ca", "Opaque", &[("ca.crt", &cert().0)]),
            secret(
                "upstream",
                "Opaque",
                &[
                    ("tls.crt", &cert().0),
                    ("tls.key", &cert().1),
                    ("ca.crt", &cert().0),
                ],
            ),
        ],
        ..Snapshot::default()
    }
}

pub(crate) fn settings() -> Settings {
    Settings {
        conf_dir: PathBuf::from("/etc/vireo"),
        pid_file: PathBuf::from("/run/vireo.pid"),
        http_listen: "80".into(),
        https_listen: "443".into(),
        resolver: None,
    }
}

fn translate_all(s: &Snapshot, allow_snippets: bool) -> (Translation, String) {
    let t = translate(
        s,
        &Options {
            ingress_class: "vireo".into(),
            allow_snippets,
        },
    );
    let text = render(&t.model, &settings());
    (t, text)
}

/// The rendered text of one Ingress on service web.
fn one(ann: &[(&str, &str)]) -> (Translation, String) {
    translate_all(
        &snap(vec![ing(
            "app",
            1,
            ann,
            &[("a.example", "/app", "Prefix", "web", 80)],
        )]),
        false,
    )
}

/// The text of the block opened by the line equal to `head` (trimmed): up to the line
/// closing it.
fn block<'a>(text: &'a str, head: &str) -> &'a str {
    let start = text
        .find(&format!("{head} {{\n"))
        .unwrap_or_else(|| panic!("no block {head:?} in\n{text}"));
    let mut depth = 0;
    let mut end = start;
    for l in text[start..].split_inclusive('\n') {
        end += l.len();
        let t = l.trim();
        if t.ends_with('{') {
            depth += 1;
        } else if t == "}" {
            depth -= 1;
            if depth == 0 {
                return &text[start..end];
            }
        }
    }
    panic!("unclosed block {head:?}")
}

fn has(text: &str, line: &str) -> bool {
    text.lines().any(|l| l.trim() == line)
}

#[track_caller]
fn assert_has(text: &str, line: &str) {
    assert!(has(text, line), "no line {line:?} in\n{text}");
}

#[test]
fn host_and_prefix_path_make_a_server_with_the_ready_endpoints() {
    let (t, text) = one(&[]);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(t.served.len(), 1);
    assert_has(&text, "server_name \"a.example\";");
    assert_has(&text, "http2 on;");
    let up = block(&text, "upstream default-web-80");
    assert_has(up, "server 10.0.0.1:8080;");
    assert_has(up, "server 10.0.0.2:8080;");
    assert!(!up.contains("10.0.0.3"), "{up}");
    // A Prefix path matches whole segments: /app and /app/…, not /apple.
    for head in ["location = \"/app\"", "location \"/app/\""] {
        let l = block(&text, head);
        assert_has(l, "proxy_pass http://default-web-80;");
        assert_has(l, "proxy_set_header \"Host\" \"$host\";");
        assert_has(l, "proxy_connect_timeout 5s;");
    }
    // The catch-all server answers 404.
    let default = block(&text, "server");
    assert_has(default, "listen 80 default_server;");
    assert_has(default, "return 404;");
}

#[test]
fn exact_and_root_paths_and_rules_without_host() {
    let s = snap(vec![ing(
        "app",
        1,
        &[],
        &[
            ("", "/exact", "Exact", "web", 80),
            ("", "/", "Prefix", "web", 80),
            ("b.example", "/x/", "ImplementationSpecific", "web", 80),
        ],
    )]);
    let (_, text) = translate_all(&s, false);
    let default = block(&text, "server");
    assert_has(default, "server_name _;");
    assert!(default.contains("location = \"/exact\" {"), "{default}");
    assert!(default.contains("location \"/\" {"), "{default}");
    assert!(
        text.contains("location \"/x/\" {") && text.contains("location = \"/x\" {"),
        "{text}"
    );
}

#[test]
fn only_the_class_ingresses_are_served() {
    let mut other = ing("other", 1, &[], &[("o.example", "/", "Prefix", "web", 80)]);
    other.spec.as_mut().unwrap().ingress_class_name = Some("nginx".into());
    let mut unclassed = ing(
        "unclassed",
        2,
        &[],
        &[("u.example", "/", "Prefix", "web", 80)],
    );
    unclassed.spec.as_mut().unwrap().ingress_class_name = None;
    let mut s = snap(vec![other, unclassed]);
    let (_, text) = translate_all(&s, false);
    assert!(
        !text.contains("o.example") && !text.contains("u.example"),
        "{text}"
    );
    // With the class the default, an Ingress without a class is served too.
    s.ingress_classes
        .push(from::<IngressClass>(json!({"metadata": {"name": "vireo",
        "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}}})));
    let (_, text) = translate_all(&s, false);
    assert!(
        !text.contains("o.example") && text.contains("u.example"),
        "{text}"
    );
}

#[test]
fn rewrite_target_makes_the_host_regex() {
    let s = snap(vec![
        ing(
            "rw",
            1,
            &[("rewrite-target", "/$2")],
            &[(
                "a.example",
                "/api(/|$)(.*)",
                "ImplementationSpecific",
                "web",
                80,
            )],
        ),
        ing(
            "plain",
            2,
            &[],
            &[("a.example", "/static", "Prefix", "web", 80)],
        ),
    ]);
    let (t, text) = translate_all(&s, false);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let l = block(&text, "location ~* \"^/api(/|$)(.*)\"");
    assert_has(l, "rewrite \"(?i)/api(/|$)(.*)\" \"/$2\" break;");
    // The other Ingress's path on the host is a regex too.
    assert!(text.contains("location ~* \"^/static\" {"), "{text}");
}

#[test]
fn use_regex_keeps_the_path_as_written() {
    let (_, text) = one(&[("use-regex", "true")]);
    let l = block(&text, "location ~* \"^/app\"");
    assert!(!l.contains("rewrite"), "{l}");
}

#[test]
fn ssl_redirect_follows_tls_and_force_ssl_redirect() {
    let mut i = ing("tls", 1, &[], &[("a.example", "/", "Prefix", "web", 80)]);
    i.spec.as_mut().unwrap().tls = Some(vec![from(
        json!({"hosts": ["a.example"], "secretName": "tls"}),
    )]);
    let (t, text) = translate_all(&snap(vec![i.clone()]), false);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let server = &text[text.find("server_name \"a.example\"").unwrap()..];
    assert_has(&text, "listen 443 ssl;");
    assert!(
        server.contains("ssl_certificate \"/etc/vireo/certs/default-tls-"),
        "{server}"
    );
    assert_eq!(t.model.files.len(), 2);
    assert!(t.model.files.values().any(|f| f == cert().0.as_bytes()));
    assert_has(&text, "return 308 https://$host$request_uri;");
    // The catch-all server refuses handshakes for names it has no certificate for.
    assert_has(block(&text, "server"), "ssl_reject_handshake on;");

    i.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(format!("{PREFIX}ssl-redirect"), "false".into());
    let (_, text) = translate_all(&snap(vec![i.clone()]), false);
    assert!(!text.contains("return 308"), "{text}");

    let (_, text) = one(&[("force-ssl-redirect", "true")]);
    assert_has(&text, "return 308 https://$host$request_uri;");
    let (_, text) = one(&[]);
    assert!(!text.contains("return 308"), "{text}");

    // A missing secret leaves the host on plain HTTP, with an Event.
    i.spec.as_mut().unwrap().tls = Some(vec![from(
        json!({"hosts": ["a.example"], "secretName": "nope"}),
    )]);
    let (t, text) = translate_all(&snap(vec![i]), false);
    assert!(!text.contains("ssl"), "{text}");
    assert_eq!(t.problems[0].reason, "TLSSecretNotFound");
}

#[test]
fn client_certificates_of_a_tls_host() {
    let ann = [
        ("auth-tls-secret", "default/ca"),
        ("auth-tls-verify-client", "optional"),
        ("auth-tls-verify-depth", "2"),
        ("auth-tls-error-page", "https://a.example/cert-help"),
        ("auth-tls-match-cn", "CN=(alice|bob)"),
        ("auth-tls-pass-certificate-to-upstream", "true"),
    ];
    let mut i = ing("mtls", 1, &ann, &[("a.example", "/", "Prefix", "web", 80)]);
    i.spec.as_mut().unwrap().tls = Some(vec![from(
        json!({"hosts": ["a.example"], "secretName": "tls"}),
    )]);
    let other = ing(
        "other",
        2,
        &[],
        &[("a.example", "/other", "Prefix", "web", 80)],
    );
    let (t, text) = translate_all(&snap(vec![i.clone(), other]), false);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let server = &text[text.find("server_name \"a.example\"").unwrap()..];
    let ca = t
        .model
        .files
        .keys()
        .find(|f| f.ends_with(".ca.crt"))
        .unwrap();
    assert!(ca.starts_with("certs/default-ca-"), "{ca}");
    assert_has(
        server,
        &format!("ssl_client_certificate \"/etc/vireo/{ca}\";"),
    );
    assert_has(server, "ssl_verify_client optional;");
    assert_has(server, "ssl_verify_depth 2;");
    assert_has(
        server,
        "error_page 495 496 = \"https://a.example/cert-help\";",
    );
    let l = block(&text, "location \"/\"");
    assert_has(
        block(l, "if ($ssl_client_s_dn !~ \"CN=(alice|bob)\")"),
        "return 403;",
    );
    assert_has(
        l,
        "proxy_set_header \"ssl-client-verify\" \"$ssl_client_verify\";",
    );
    assert_has(
        l,
        "proxy_set_header \"ssl-client-cert\" \"$ssl_client_escaped_cert\";",
    );
    // The certificate is asked for on the whole host; the CN check and headers are the
    // Ingress's own.
    assert!(
        !block(&text, "location \"/other/\"").contains("ssl_client"),
        "{text}"
    );

    // Without TLS on the host, or without its CA secret, the Ingress is not served.
    i.spec.as_mut().unwrap().tls = None;
    let (t, text) = translate_all(&snap(vec![i.clone()]), false);
    assert!(!text.contains("a.example"), "{text}");
    assert!(
        t.problems[0].message.contains("has no TLS certificate"),
        "{:?}",
        t.problems
    );
    let (t, _) = one(&[("auth-tls-secret", "nosuch")]);
    assert!(
        t.problems[0].message.contains("default/nosuch not found"),
        "{:?}",
        t.problems
    );
}

#[test]
fn tls_to_the_upstream() {
    let (t, text) = one(&[
        ("backend-protocol", "HTTPS"),
        ("proxy-ssl-secret", "default/upstream"),
        ("proxy-ssl-verify", "on"),
        ("proxy-ssl-verify-depth", "2"),
        ("proxy-ssl-name", "web.internal"),
        ("proxy-ssl-server-name", "on"),
        ("proxy-ssl-ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256"),
        ("proxy-ssl-protocols", "TLSv1.2 TLSv1.3"),
    ]);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let l = block(&text, "location \"/app/\"");
    let ca = t
        .model
        .files
        .keys()
        .find(|f| f.ends_with(".ca.crt"))
        .unwrap();
    assert!(ca.starts_with("certs/default-upstream-"), "{ca}");
    assert_has(
        l,
        &format!("proxy_ssl_trusted_certificate \"/etc/vireo/{ca}\";"),
    );
    assert!(
        l.contains("proxy_ssl_certificate \"/etc/vireo/certs/default-upstream-"),
        "{l}"
    );
    assert!(
        l.contains("proxy_ssl_certificate_key \"/etc/vireo/certs/default-upstream-"),
        "{l}"
    );
    for line in [
        "proxy_ssl_verify on;",
        "proxy_ssl_verify_depth 2;",
        "proxy_ssl_name \"web.internal\";",
        "proxy_ssl_server_name on;",
        "proxy_ssl_ciphers \"ECDHE-ECDSA-AES128-GCM-SHA256\";",
        "proxy_ssl_protocols TLSv1.2 TLSv1.3;",
        "proxy_pass https://default-web-80;",
    ] {
        assert_has(l, line);
    }
    let (_, text) = one(&[("backend-protocol", "GRPCS"), ("proxy-ssl-verify", "on")]);
    assert_has(&text, "grpc_ssl_verify on;");
    let (t, _) = one(&[("proxy-ssl-protocols", "TLSv1.2; return 200")]);
    assert_eq!(t.problems[0].reason, "Refused");
    let (t, _) = one(&[("proxy-ssl-secret", "nosuch")]);
    assert!(
        t.problems[0].message.contains("default/nosuch not found"),
        "{:?}",
        t.problems
    );
}

#[test]
fn body_size_timeouts_and_buffering() {
    let (t, text) = one(&[
        ("proxy-body-size", "8m"),
        ("client-body-buffer-size", "1k"),
        ("proxy-read-timeout", "120"),
        ("proxy-send-timeout", "30"),
        ("proxy-connect-timeout", "2"),
        ("proxy-buffering", "on"),
        ("proxy-request-buffering", "off"),
        ("proxy-buffer-size", "8k"),
        ("proxy-buffers-number", "8"),
        ("proxy-max-temp-file-size", "0"),
        ("proxy-http-version", "1.0"),
        ("proxy-next-upstream", "error timeout http_502"),
        ("proxy-next-upstream-tries", "3"),
        ("proxy-next-upstream-timeout", "10"),
    ]);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let l = block(&text, "location \"/app/\"");
    for line in [
        "client_max_body_size \"8m\";",
        "client_body_buffer_size \"1k\";",
        "proxy_read_timeout 120s;",
        "proxy_send_timeout 30s;",
        "proxy_connect_timeout 2s;",
        "proxy_buffering on;",
        "proxy_request_buffering off;",
        "proxy_buffer_size \"8k\";",
        "proxy_buffers 8 \"8k\";",
        "proxy_max_temp_file_size \"0\";",
        "proxy_http_version 1.0;",
        "proxy_next_upstream error timeout http_502;",
        "proxy_next_upstream_tries 3;",
        "proxy_next_upstream_timeout 10s;",
    ] {
        assert_has(l, line);
    }
}

#[test]
fn backend_protocols() {
    for (p, pass) in [
        ("HTTPS", "proxy_pass https://default-web-80;"),
        ("GRPC", "grpc_pass grpc://default-web-80;"),
        ("grpcs", "grpc_pass grpcs://default-web-80;"),
        ("FCGI", "fastcgi_pass default-web-80;"),
    ] {
        let (t, text) = one(&[("backend-protocol", p), ("proxy-read-timeout", "9")]);
        assert!(t.problems.is_empty(), "{:?}", t.problems);
        let l = block(&text, "location \"/app/\"");
        assert_has(l, pass);
        let d = pass.split('_').next().unwrap();
        assert_has(l, &format!("{d}_read_timeout 9s;"));
    }
    let (_, text) = one(&[("backend-protocol", "GRPC")]);
    assert_has(&text, "grpc_set_header \"X-Real-IP\" \"$remote_addr\";");
    let (_, text) = one(&[("backend-protocol", "FCGI")]);
    assert_has(&text, "fastcgi_param REQUEST_METHOD $request_method;");
    let (t, text) = one(&[("backend-protocol", "AJP")]);
    assert!(!text.contains("a.example"), "{text}");
    assert!(
        t.problems[0].message.contains("AJP is not supported"),
        "{:?}",
        t.problems
    );
}

#[test]
fn rate_limits_with_exempt_networks() {
    let (t, text) = one(&[
        ("limit-rps", "10"),
        ("limit-rpm", "600"),
        ("limit-connections", "4"),
        ("limit-whitelist", "10.1.0.0/16"),
    ]);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let geo = block(&text, "geo $vireo_exempt_default_app_rps");
    assert_has(geo, "\"10.1.0.0/16\" 1;");
    assert_has(
        &text,
        "limit_req_zone $vireo_key_default_app_rps zone=default_app_rps:5m rate=10r/s;",
    );
    assert_has(
        &text,
        "limit_req_zone $vireo_key_default_app_rpm zone=default_app_rpm:5m rate=600r/m;",
    );
    assert_has(
        &text,
        "limit_conn_zone $vireo_key_default_app_conn zone=default_app_conn:5m;",
    );
    let l = block(&text, "location \"/app/\"");
    assert_has(l, "limit_req zone=default_app_rps burst=50 nodelay;");
    assert_has(l, "limit_req zone=default_app_rpm burst=3000 nodelay;");
    assert_has(l, "limit_conn default_app_conn 4;");
    let (_, text) = one(&[("limit-rate", "100"), ("limit-rate-after", "1024")]);
    let l = block(&text, "location \"/app/\"");
    assert_has(l, "limit_rate 100k;");
    assert_has(l, "limit_rate_after 1024k;");
    let (_, text) = one(&[("limit-rps", "5"), ("limit-burst-multiplier", "2")]);
    assert_has(
        &text,
        "limit_req_zone $binary_remote_addr zone=default_app_rps:5m rate=5r/s;",
    );
    assert_has(&text, "limit_req zone=default_app_rps burst=10 nodelay;");
}

#[test]
fn source_ranges_and_bad_values_leave_the_ingress_out() {
    let (_, text) = one(&[
        ("whitelist-source-range", "10.0.0.0/8,192.168.0.1"),
        ("denylist-source-range", "10.9.0.0/16"),
    ]);
    let l = block(&text, "location \"/app/\"");
    let lines: Vec<&str> = l
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("allow") || l.starts_with("deny"))
        .collect();
    assert_eq!(
        lines,
        [
            "deny \"10.9.0.0/16\";",
            "allow \"10.0.0.0/8\";",
            "allow \"192.168.0.1\";",
            "deny all;"
        ]
    );
    let (t, text) = one(&[("whitelist-source-range", "10.0.0.0/8;allow all")]);
    assert!(!text.contains("a.example"), "{text}");
    assert_eq!(t.problems.len(), 1);
    assert_eq!(t.problems[0].reason, "Refused");
    assert!(
        t.problems[0].message.contains("whitelist-source-range"),
        "{:?}",
        t.problems
    );
    assert!(t.served.is_empty());
}

#[test]
fn external_authentication() {
    let (t, text) = one(&[
        ("auth-url", "http://127.0.0.1:9000/auth"),
        ("auth-signin", "https://login.example/start"),
        ("auth-response-headers", "X-User, X-Email"),
        ("auth-method", "POST"),
    ]);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let l = block(&text, "location \"/app/\"");
    let n = l
        .lines()
        .find_map(|x| x.trim().strip_prefix("auth_request /_vireo_auth_"))
        .unwrap()
        .trim_end_matches(';');
    assert_has(
        l,
        &format!("auth_request_set $vireo_auth{n}_0 $upstream_http_x_user;"),
    );
    assert_has(
        l,
        &format!("proxy_set_header \"X-Email\" \"$vireo_auth{n}_1\";"),
    );
    assert_has(l, &format!("error_page 401 = @vireo_signin_{n};"));
    assert_has(l, &format!("add_header Set-Cookie $vireo_auth{n}_cookie;"));
    let auth = block(&text, &format!("location = /_vireo_auth_{n}"));
    assert_has(auth, "internal;");
    assert_has(auth, "proxy_method POST;");
    assert_has(auth, "proxy_pass_request_body off;");
    assert_has(
        auth,
        &format!("set $vireo_auth{n}_url \"http://127.0.0.1:9000/auth\";"),
    );
    let signin = block(&text, &format!("location @vireo_signin_{n}"));
    assert_has(
        signin,
        "return 302 \"https://login.example/start?rd=$scheme://$http_host$request_uri\";",
    );
    // A sign-in URL naming the parameter already is taken as it is; cookies always.
    let (_, text) = one(&[
        ("auth-url", "http://127.0.0.1:9000/auth"),
        (
            "auth-signin",
            "https://login.example/start?next=$request_uri",
        ),
        ("auth-signin-redirect-param", "next"),
        ("auth-always-set-cookie", "true"),
    ]);
    assert!(
        text.contains("return 302 \"https://login.example/start?next=$request_uri\";"),
        "{text}"
    );
    assert!(text.contains("_cookie always;"), "{text}");
}

#[test]
fn basic_authentication_from_a_secret() {
    let (t, text) = one(&[
        ("auth-type", "basic"),
        ("auth-secret", "users"),
        ("auth-realm", "Staff only"),
    ]);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let (name, contents) = t.model.files.iter().next().unwrap();
    assert!(name.starts_with("auth/default-users-"), "{name}");
    assert_eq!(contents, b"alice:$apr1$x$y\n");
    let l = block(&text, "location \"/app/\"");
    assert_has(l, "auth_basic \"Staff only\";");
    assert_has(l, &format!("auth_basic_user_file \"/etc/vireo/{name}\";"));
    // Without its secret the Ingress is not served at all (never unprotected).
    let (t, text) = one(&[("auth-type", "basic"), ("auth-secret", "nobody")]);
    assert!(!text.contains("a.example"), "{text}");
    assert!(
        t.problems[0]
            .message
            .contains("auth-secret default/nobody not found"),
        "{:?}",
        t.problems
    );
    let (t, _) = one(&[("auth-type", "digest"), ("auth-secret", "users")]);
    assert!(
        t.problems[0].message.contains("digest is not supported"),
        "{:?}",
        t.problems
    );
}

#[test]
fn cors_for_any_origin_and_for_listed_ones() {
    let (_, text) = one(&[("enable-cors", "true")]);
    let l = block(&text, "location \"/app/\"");
    assert_has(l, "add_header Access-Control-Allow-Origin \"*\" always;");
    assert_has(
        l,
        "add_header Access-Control-Allow-Methods \"GET, PUT, POST, DELETE, PATCH, OPTIONS\" always;",
    );
    assert_has(
        l,
        "add_header Access-Control-Allow-Credentials \"true\" always;",
    );
    assert_has(l, "add_header Access-Control-Max-Age \"1728000\" always;");
    assert_has(block(l, "if ($request_method = OPTIONS)"), "return 204;");

    let (t, text) = one(&[
        ("enable-cors", "true"),
        (
            "cors-allow-origin",
            "https://a.example, https://*.b.example:8443",
        ),
        ("cors-allow-credentials", "false"),
        ("cors-expose-headers", "X-Total"),
    ]);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let l = block(&text, "location \"/app/\"");
    let var = l
        .lines()
        .find_map(|x| {
            x.trim()
                .strip_prefix("add_header Access-Control-Allow-Origin ")
        })
        .unwrap();
    let var = var.trim_end_matches(" always;");
    let m = block(&text, &format!("map $http_origin {var}"));
    assert_has(
        m,
        "\"~^(?:https://a\\\\.example|https://[A-Za-z0-9-]+\\\\.b\\\\.example:8443)$\" $http_origin;",
    );
    assert!(!text.contains("Allow-Credentials"), "{text}");
    assert!(
        l.contains("add_header Access-Control-Expose-Headers $vireo_cors"),
        "{l}"
    );
    let (t, _) = one(&[
        ("enable-cors", "true"),
        ("cors-allow-origin", "javascript:alert(1)"),
    ]);
    assert_eq!(t.problems[0].reason, "Refused");
}

#[test]
fn canary_by_header_and_weight() {
    let main = ing("main", 1, &[], &[("a.example", "/", "Prefix", "web", 80)]);
    let canary = ing(
        "canary",
        2,
        &[
            ("canary", "true"),
            ("canary-by-header", "X-Canary"),
            ("canary-weight", "20"),
        ],
        &[("a.example", "/", "Prefix", "canary", 80)],
    );
    let (t, text) = translate_all(&snap(vec![main.clone(), canary]), false);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_eq!(t.served.len(), 2);
    let l = block(&text, "location \"/\"");
    let var = l
        .lines()
        .find_map(|x| x.trim().strip_prefix("proxy_pass http://"))
        .unwrap()
        .trim_end_matches(';');
    let sel = block(&text, &format!("map \"$vireo_c1_0$vireo_c1_1\" {var}"));
    assert_has(sel, "\"~^1.\" \"default-canary-80\";");
    assert_has(sel, "\"~^.1\" \"default-web-80\";");
    assert_has(sel, "default \"$vireo_split1_0\";");
    assert_has(
        block(&text, "map $http_x_canary $vireo_c1_0"),
        "\"~^always$\" 1;",
    );
    let split = block(&text, "split_clients \"${request_id}\" $vireo_split1_0");
    assert_has(split, "80.00% default-web-80;");
    assert_has(split, "* default-canary-80;");

    // By exact header value, by cookie; a canary without its main Ingress is told.
    let canary = ing(
        "canary",
        2,
        &[
            ("canary", "true"),
            ("canary-by-header", "X-Env"),
            ("canary-by-header-value", "beta"),
            ("canary-by-cookie", "try_new"),
        ],
        &[
            ("a.example", "/", "Prefix", "canary", 80),
            ("a.example", "/nomain", "Prefix", "canary", 80),
        ],
    );
    let (t, text) = translate_all(&snap(vec![main, canary]), false);
    assert_has(
        block(&text, "map $http_x_env $vireo_c1_0"),
        "\"~^beta$\" 1;",
    );
    assert_has(
        block(&text, "map $cookie_try_new $vireo_c1_1"),
        "\"~^always$\" 1;",
    );
    assert!(!text.contains("split_clients"), "{text}");
    assert_eq!(t.problems.len(), 1, "{:?}", t.problems);
    assert_eq!(t.problems[0].reason, "CanaryWithoutMain");
}

#[test]
fn a_canary_without_endpoints_takes_no_requests() {
    let main = ing("main", 1, &[], &[("a.example", "/", "Prefix", "web", 80)]);
    let canary = ing(
        "canary",
        2,
        &[("canary", "true"), ("canary-weight", "50")],
        &[("a.example", "/", "Prefix", "canary", 80)],
    );
    let mut s = snap(vec![main, canary]);
    s.endpoint_slices.remove(1);
    let (t, text) = translate_all(&s, false);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_has(
        block(&text, "location \"/\""),
        "proxy_pass http://default-web-80;",
    );
    assert!(!text.contains("split_clients"), "{text}");
}

#[test]
fn cookie_affinity_and_hashing() {
    let (_, text) = one(&[
        ("affinity", "cookie"),
        ("session-cookie-name", "route"),
        ("session-cookie-max-age", "3600"),
    ]);
    let name = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("upstream default-web-80-"))
        .unwrap();
    let name = format!("default-web-80-{}", name.trim_end_matches(" {"));
    let var = format!("$vireo_affinity_{}", name.replace('-', "_"));
    let up = block(&text, &format!("upstream {name}"));
    assert_has(up, &format!("hash {var} consistent;"));
    let m = block(&text, &format!("map $cookie_route {var}"));
    assert_has(m, "\"\" $request_id;");
    assert_has(m, "default $cookie_route;");
    let set = block(&text, &format!("map $cookie_route {var}_set"));
    assert_has(
        set,
        &format!("\"\" \"route={var}; Path=/; Max-Age=3600; HttpOnly\";"),
    );
    let l = block(&text, "location \"/app/\"");
    assert_has(l, &format!("add_header Set-Cookie {var}_set;"));
    assert_has(l, &format!("proxy_pass http://{name};"));

    let (_, text) = one(&[("upstream-hash-by", "$request_uri")]);
    assert!(text.contains("hash \"$request_uri\" consistent;"), "{text}");
    let (_, text) = one(&[("load-balance", "ewma")]);
    assert!(text.contains("least_conn;"), "{text}");
}

#[test]
fn redirects_and_app_root() {
    let (_, text) = one(&[("permanent-redirect", "https://new.example$request_uri")]);
    let l = block(&text, "location \"/app/\"");
    assert_has(l, "return 301 \"https://new.example$request_uri\";");
    assert!(!l.contains("proxy_pass"), "{l}");
    let (_, text) = one(&[
        ("permanent-redirect", "https://new.example/"),
        ("permanent-redirect-code", "308"),
    ]);
    assert_has(&text, "return 308 \"https://new.example/\";");
    let (_, text) = one(&[("temporal-redirect", "https://tmp.example/")]);
    assert_has(&text, "return 302 \"https://tmp.example/\";");
    let (_, text) = one(&[("app-root", "/dashboard")]);
    assert_has(
        block(&text, "if ($uri = /)"),
        "return 302 \"$scheme://$http_host/dashboard\";",
    );
}

#[test]
fn server_alias_and_proxy_headers() {
    let (_, text) = one(&[
        ("server-alias", "b.example, *.c.example"),
        ("upstream-vhost", "internal.example"),
        ("x-forwarded-prefix", "/app"),
        ("proxy-redirect-from", "http://internal/"),
        ("proxy-redirect-to", "/"),
        ("proxy-cookie-path", "/ /app/"),
        ("connection-proxy-header", "keep-alive"),
    ]);
    assert_has(
        &text,
        "server_name \"a.example\" \"b.example\" \"*.c.example\";",
    );
    let l = block(&text, "location \"/app/\"");
    assert_has(l, "proxy_set_header \"Host\" \"internal.example\";");
    assert!(!has(l, "proxy_set_header \"Host\" \"$host\";"), "{l}");
    assert_has(l, "proxy_set_header \"X-Forwarded-Prefix\" \"/app\";");
    assert_has(l, "proxy_set_header \"Connection\" \"keep-alive\";");
    assert_has(l, "proxy_redirect \"http://internal/\" \"/\";");
    assert_has(l, "proxy_cookie_path \"/\" \"/app/\";");
}

#[test]
fn from_and_to_www() {
    let s = snap(vec![
        ing(
            "bare",
            1,
            &[("from-to-www-redirect", "true")],
            &[("a.example", "/", "Prefix", "web", 80)],
        ),
        ing(
            "www",
            2,
            &[("from-to-www-redirect", "true")],
            &[("www.b.example", "/", "Prefix", "web", 80)],
        ),
        // A name served by another Ingress is left alone.
        ing(
            "both",
            3,
            &[("from-to-www-redirect", "true")],
            &[("c.example", "/", "Prefix", "web", 80)],
        ),
        ing(
            "wwwc",
            4,
            &[],
            &[("www.c.example", "/", "Prefix", "web", 80)],
        ),
    ]);
    let (t, text) = translate_all(&s, false);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let www_a = &text[text.find("server_name \"www.a.example\";").unwrap()..];
    assert_has(
        block(www_a, "location \"/\""),
        "return 308 \"$scheme://a.example$request_uri\";",
    );
    let b = &text[text.find("server_name \"b.example\";").unwrap()..];
    assert_has(
        block(b, "location \"/\""),
        "return 308 \"$scheme://www.b.example$request_uri\";",
    );
    assert!(!text.contains("$scheme://c.example$request_uri"), "{text}");
    assert!(
        !text.contains("$scheme://www.c.example$request_uri"),
        "{text}"
    );
}

#[test]
fn custom_errors_go_to_the_default_backend() {
    let (t, text) = one(&[
        ("custom-http-errors", "404,503"),
        ("default-backend", "errors"),
    ]);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    let l = block(&text, "location \"/app/\"");
    assert_has(l, "proxy_intercept_errors on;");
    let page = l
        .lines()
        .find_map(|x| x.trim().strip_prefix("error_page 404 = "))
        .unwrap()
        .trim_end_matches(';');
    let named = block(&text, &format!("location {page}"));
    assert_has(named, "proxy_set_header X-Code \"404\";");
    assert_has(named, "proxy_set_header X-Ingress-Name \"app\";");
    assert_has(named, "proxy_pass http://default-errors-8000;");
    assert_has(
        block(&text, "upstream default-errors-8000"),
        "server 10.0.2.1:8000;",
    );
}

#[test]
fn default_backend_answers_when_the_service_has_no_endpoints() {
    let mut s = snap(vec![ing(
        "app",
        1,
        &[("default-backend", "errors")],
        &[("a.example", "/app", "Prefix", "web", 80)],
    )]);
    s.endpoint_slices.remove(0);
    let (_, text) = translate_all(&s, false);
    assert_has(
        block(&text, "location \"/app/\""),
        "proxy_pass http://default-errors-8000;",
    );
    // Without one, the empty upstream keeps the configuration valid.
    let mut s = snap(vec![ing(
        "app",
        1,
        &[],
        &[("a.example", "/app", "Prefix", "web", 80)],
    )]);
    s.endpoint_slices.remove(0);
    let (_, text) = translate_all(&s, false);
    assert_has(
        block(&text, "upstream default-web-80"),
        "server 127.0.0.1:1 down;",
    );
}

#[test]
fn snippets_are_refused_unless_allowed() {
    let s = snap(vec![
        ing(
            "snip",
            1,
            &[
                ("configuration-snippet", "add_header X-Snip 1;"),
                ("server-snippet", "set $x 1;"),
            ],
            &[("a.example", "/", "Prefix", "web", 80)],
        ),
        ing("ok", 2, &[], &[("b.example", "/", "Prefix", "web", 80)]),
    ]);
    let (t, text) = translate_all(&s, false);
    assert!(
        !text.contains("a.example") && text.contains("b.example"),
        "{text}"
    );
    assert_eq!(t.problems.len(), 2, "{:?}", t.problems);
    assert!(
        t.problems
            .iter()
            .all(|p| p.object.name == "snip" && p.message.contains("--allow-snippets"))
    );
    let (t, text) = translate_all(&s, true);
    assert!(t.problems.is_empty(), "{:?}", t.problems);
    assert_has(block(&text, "location \"/\""), "add_header X-Snip 1;");
    assert_has(&text, "set $x 1;");
}

#[test]
fn unknown_annotations_are_refused_and_observability_ones_ignored() {
    let (t, text) = one(&[("enable-modsecurity", "true")]);
    assert!(!text.contains("a.example"));
    assert!(
        t.problems[0]
            .message
            .contains("enable-modsecurity is not supported"),
        "{:?}",
        t.problems
    );
    let (t, text) = one(&[("enable-opentelemetry", "true")]);
    assert!(text.contains("a.example"));
    assert_eq!(t.problems[0].reason, "IgnoredAnnotation");
}

#[test]
fn missing_service_answers_503_and_older_ingress_keeps_its_path() {
    let s = snap(vec![
        ing(
            "new",
            5,
            &[],
            &[("a.example", "/app", "Prefix", "canary", 80)],
        ),
        ing(
            "old",
            1,
            &[],
            &[
                ("a.example", "/app", "Prefix", "web", 80),
                ("a.example", "/gone", "Prefix", "nosuch", 80),
            ],
        ),
    ]);
    let (t, text) = translate_all(&s, false);
    assert_has(
        block(&text, "location \"/app/\""),
        "proxy_pass http://default-web-80;",
    );
    assert_has(block(&text, "location \"/gone/\""), "return 503;");
    let reasons: Vec<(&str, &str)> = t
        .problems
        .iter()
        .map(|p| (p.object.name.as_str(), p.reason.as_str()))
        .collect();
    assert!(reasons.contains(&("old", "ServiceNotFound")), "{reasons:?}");
    assert!(reasons.contains(&("new", "DuplicatePath")), "{reasons:?}");
}

#[test]
fn values_cannot_break_out_of_their_directive() {
    // Checked values refuse what could end a directive; what is taken is quoted.
    let (t, text) = one(&[("upstream-vhost", "x; return 200 pwned")]);
    assert!(!text.contains("pwned"), "{text}");
    assert_eq!(t.problems[0].reason, "Refused");
    let (_, text) = one(&[
        ("auth-realm", "a\" ; deny all; \""),
        ("auth-type", "basic"),
        ("auth-secret", "users"),
    ]);
    assert_has(&text, "auth_basic \"a\\\" ; deny all; \\\"\";");
}

/// The vireo binary built beside this test (`target/PROFILE/vireo`).
pub(crate) fn vireo_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/PROFILE");
    let bin = dir.join("vireo");
    assert!(
        bin.exists(),
        "{} is missing: build vireo first (cargo build --workspace)",
        bin.display()
    );
    bin
}

/// A configuration using every supported annotation passes the real `vireo -t`.
#[test]
fn vireo_accepts_the_configuration() {
    let everything: &[(&str, &str)] = &[
        ("proxy-body-size", "8m"),
        ("proxy-read-timeout", "120"),
        ("proxy-buffering", "off"),
        ("proxy-buffer-size", "8k"),
        ("proxy-buffers-number", "8"),
        ("limit-rps", "10"),
        ("limit-connections", "4"),
        ("limit-whitelist", "10.1.0.0/16"),
        ("whitelist-source-range", "127.0.0.0/8"),
        ("auth-url", "http://127.0.0.1:9000/auth"),
        ("auth-signin", "https://login.example/start"),
        ("auth-response-headers", "X-User"),
        ("enable-cors", "true"),
        ("cors-allow-origin", "https://a.example"),
        ("affinity", "cookie"),
        ("custom-http-errors", "404"),
        ("default-backend", "errors"),
        ("app-root", "/home"),
        ("server-alias", "b.example"),
        ("mirror-target", "http://127.0.0.1:9001$request_uri"),
        ("x-forwarded-prefix", "/app"),
        ("proxy-redirect-from", "http://x/"),
        ("proxy-redirect-to", "/"),
        ("satisfy", "any"),
        ("auth-type", "basic"),
        ("auth-secret", "users"),
        ("enable-access-log", "false"),
        ("limit-rate", "100"),
        ("limit-rate-after", "1024"),
    ];
    let mut tls = ing(
        "tls",
        3,
        &[
            ("force-ssl-redirect", "true"),
            ("auth-tls-secret", "ca"),
            ("auth-tls-error-page", "https://t.example/help"),
            ("auth-tls-match-cn", "CN=t"),
        ],
        &[("t.example", "/", "Prefix", "web", 80)],
    );
    tls.spec.as_mut().unwrap().tls = Some(vec![from(
        json!({"hosts": ["t.example"], "secretName": "tls"}),
    )]);
    let s = snap(vec![
        ing(
            "all",
            1,
            everything,
            &[
                ("a.example", "/app", "Prefix", "web", 80),
                ("", "/", "Prefix", "web", 80),
            ],
        ),
        ing(
            "rw",
            2,
            &[
                ("rewrite-target", "/$2"),
                ("upstream-hash-by", "$request_uri"),
            ],
            &[("r.example", "/api(/|$)(.*)", "Prefix", "web", 80)],
        ),
        ing(
            "canary",
            4,
            &[
                ("canary", "true"),
                ("canary-by-header", "X-Canary"),
                ("canary-by-cookie", "c"),
                ("canary-weight", "10"),
            ],
            &[("a.example", "/app", "Prefix", "canary", 80)],
        ),
        ing(
            "upstream-tls",
            9,
            &[
                ("backend-protocol", "HTTPS"),
                ("proxy-ssl-secret", "upstream"),
                ("proxy-ssl-verify", "on"),
                ("proxy-ssl-name", "web.internal"),
                ("proxy-ssl-server-name", "on"),
                ("proxy-ssl-protocols", "TLSv1.2 TLSv1.3"),
            ],
            &[("u.example", "/", "Prefix", "web", 80)],
        ),
        ing(
            "grpc",
            5,
            &[("backend-protocol", "GRPC")],
            &[("g.example", "/", "Prefix", "web", 80)],
        ),
        ing(
            "fcgi",
            6,
            &[("backend-protocol", "FCGI")],
            &[("f.example", "/", "Prefix", "web", 80)],
        ),
        ing(
            "redirect",
            7,
            &[("permanent-redirect", "https://n.example$request_uri")],
            &[("p.example", "/", "Prefix", "web", 80)],
        ),
        ing(
            "empty",
            8,
            &[],
            &[("e.example", "/", "Prefix", "nosuch", 80)],
        ),
        tls,
    ]);
    let (t, _) = translate_all(&s, false);
    vireo_accepts(&t.model);
}

/// The real `vireo -t` accepts the model's configuration, written with its files.
pub(crate) fn vireo_accepts(model: &Model) {
    // A directory of its own per call: tests run in parallel.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "vireo-controller-test-{}-{call}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    let settings = Settings {
        conf_dir: dir.clone(),
        pid_file: dir.join("vireo.pid"),
        ..settings()
    };
    let text = render(model, &settings);
    for (name, contents) in &model.files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, contents).unwrap();
    }
    std::fs::write(dir.join("vireo.conf"), &text).unwrap();
    let out = std::process::Command::new(vireo_bin())
        .arg("-p")
        .arg(&dir)
        .arg("-t")
        .arg("-c")
        .arg(dir.join("vireo.conf"))
        .output()
        .unwrap();
    let numbered: String = text
        .lines()
        .enumerate()
        .map(|(i, l)| format!("{:4} {l}\n", i + 1))
        .collect();
    assert!(
        out.status.success(),
        "{}\n{numbered}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A self-signed certificate and its key, made once.
pub(crate) fn cert() -> &'static (String, String) {
    static CERT: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    CERT.get_or_init(|| {
        let c = rcgen::generate_simple_self_signed(vec!["t.example".to_string()])
            .expect("a certificate");
        (c.cert.pem(), c.signing_key.serialize_pem())
    })
}
