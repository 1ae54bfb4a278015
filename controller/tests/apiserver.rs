//! The test harness's API server is a real one: it stores and serves the
//! objects the controller reads (core, networking and Gateway API CRD
//! objects) and streams their changes to a watcher.

mod common;

use std::time::Duration;

use common::apiserver::{ApiServer, endpoint_ip};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;
use serde_json::json;

/// A namespace of the test's own on the shared server.
async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).unwrap()
}

fn http_route() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
    ))
}

#[tokio::test]
async fn serves_what_the_controller_reads() {
    let server = ApiServer::shared();
    eprintln!("API server ready in {:?}", server.started_in);
    let client = server.client();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, "v1.37.2");
    let ns = "objects";
    namespace(&client, ns).await;
    let pp = PostParams::default();

    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    services
        .create(
            &pp,
            &object(json!({
                "metadata": {"name": "web"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
            })),
        )
        .await
        .unwrap();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let slice = |name: &str, ip: String| {
        object::<EndpointSlice>(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": if ip.contains(':') { "IPv6" } else { "IPv4" },
            "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        }))
    };
    let ip = endpoint_ip().to_string();
    slices
        .create(&pp, &slice("web-1", ip.clone()))
        .await
        .unwrap();
    // Its validation is the real one: no loopback endpoints.
    let loopback = slices
        .create(&pp, &slice("web-2", "127.0.0.1".into()))
        .await;
    assert!(
        matches!(&loopback, Err(kube::Error::Api(e)) if e.code == 422),
        "{loopback:?}"
    );
    // Cluster-scoped, and other tests of the binary may make it too.
    let class = Api::<IngressClass>::all(client.clone())
        .create(
            &pp,
            &object(json!({
                "metadata": {"name": "vireo"},
                "spec": {"controller": "vireo.dev/ingress-controller"}
            })),
        )
        .await;
    assert!(
        match &class {
            Ok(_) => true,
            Err(kube::Error::Api(e)) => e.code == 409,
            Err(_) => false,
        },
        "{class:?}"
    );
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), ns);
    ingresses
        .create(
            &pp,
            &object(json!({
                "metadata": {"name": "site"},
                "spec": {
                    "ingressClassName": "vireo",
                    "rules": [{"host": "site.test", "http": {"paths": [{
                        "path": "/", "pathType": "Prefix",
                        "backend": {"service": {"name": "web", "port": {"number": 80}}}
                    }]}}]
                }
            })),
        )
        .await
        .unwrap();
    let routes: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &http_route());
    routes
        .create(
            &pp,
            &DynamicObject::new("site", &http_route()).data(json!({
                "spec": {
                    "hostnames": ["site.test"],
                    "rules": [{
                        "matches": [{"path": {"type": "PathPrefix", "value": "/api"}}],
                        "backendRefs": [{"name": "web", "port": 80}]
                    }]
                }
            })),
        )
        .await
        .unwrap();

    // Read back as stored: defaults filled in by the server show it is one.
    let service = services.get("web").await.unwrap().spec.unwrap();
    assert_eq!(service.type_.as_deref(), Some("ClusterIP"));
    assert!(service.cluster_ip.is_some_and(|ip| ip.starts_with("10.0.")));
    let slice = slices.get("web-1").await.unwrap();
    assert_eq!(slice.endpoints.unwrap()[0].addresses, [ip]);
    let class = Api::<IngressClass>::all(client.clone())
        .get("vireo")
        .await
        .unwrap();
    assert_eq!(
        class.spec.unwrap().controller.as_deref(),
        Some("vireo.dev/ingress-controller")
    );
    let ingress = ingresses.get("site").await.unwrap().spec.unwrap();
    assert_eq!(ingress.ingress_class_name.as_deref(), Some("vireo"));
    let route = routes.get("site").await.unwrap();
    // The CRD's schema defaulted the backend's kind and weight.
    assert_eq!(
        route.data["spec"]["rules"][0]["backendRefs"][0],
        json!({"group": "", "kind": "Service", "name": "web", "port": 80, "weight": 1})
    );
    // And its validation refuses what the Gateway API does.
    let bad = routes
        .create(
            &pp,
            &DynamicObject::new("bad", &http_route()).data(json!({
                "spec": {"rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "no-slash"}}]}]}
            })),
        )
        .await;
    assert!(
        matches!(&bad, Err(kube::Error::Api(e)) if e.code == 422),
        "{bad:?}"
    );
}

#[tokio::test]
async fn watch_sees_a_change() {
    let client = ApiServer::shared().client();
    let ns = "watch";
    namespace(&client, ns).await;
    let ingresses: Api<Ingress> = Api::namespaced(client.clone(), ns);
    let ingress: Ingress = object(json!({
        "metadata": {"name": "site"},
        "spec": {"ingressClassName": "vireo", "defaultBackend": {
            "service": {"name": "web", "port": {"number": 80}}
        }}
    }));
    ingresses
        .create(&PostParams::default(), &ingress)
        .await
        .unwrap();

    let mut events = watcher(ingresses.clone(), watcher::Config::default()).boxed();
    // The initial listing, then the change.
    loop {
        let event = events.try_next().await.unwrap().unwrap();
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    ingresses
        .patch(
            "site",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "nginx.ingress.kubernetes.io/rewrite-target": "/"
            }}})),
        )
        .await
        .unwrap();
    let changed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let watcher::Event::Apply(ingress) = events.try_next().await.unwrap().unwrap() {
                break ingress;
            }
        }
    })
    .await
    .expect("no watch event within 10 s of the change");
    assert_eq!(
        changed.metadata.annotations.unwrap()["nginx.ingress.kubernetes.io/rewrite-target"],
        "/"
    );
}

#[tokio::test]
async fn own_server_goes_on_drop() {
    let server = ApiServer::start();
    let namespaces = Api::<Namespace>::all(server.client());
    let names: Vec<String> = namespaces
        .list(&Default::default())
        .await
        .unwrap()
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect();
    assert!(names.iter().any(|n| n == "default"), "{names:?}");
    let port: u16 = server.url().rsplit(':').next().unwrap().parse().unwrap();
    let kubeconfig = server.kubeconfig().to_path_buf();
    drop(server);
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(!kubeconfig.exists());
}
