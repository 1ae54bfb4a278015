//! The Gateway API kinds with the API server: reflectors of them (as dynamic objects, read
//! into [`super::types`]), and the statuses written back.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::{GROUP, Objects, Status};

/// (kind, version, plural, namespaced) of the watched kinds.
const KINDS: [(&str, &str, &str, bool); 5] = [
    ("GatewayClass", "v1", "gatewayclasses", false),
    ("Gateway", "v1", "gateways", true),
    ("HTTPRoute", "v1", "httproutes", true),
    ("GRPCRoute", "v1", "grpcroutes", true),
    ("ReferenceGrant", "v1beta1", "referencegrants", true),
];

/// The reflectors' stores, in the order of [`KINDS`].
pub struct Stores {
    client: Client,
    stores: Vec<(ApiResource, Store<DynamicObject>)>,
}

fn resource(kind: &str) -> (ApiResource, bool) {
    let (k, v, plural, namespaced) = KINDS
        .iter()
        .find(|(k, ..)| *k == kind)
        .copied()
        .expect("a watched kind");
    let gvk = GroupVersionKind::gvk(GROUP, v, k);
    (ApiResource::from_gvk_with_plural(&gvk, plural), namespaced)
}

fn api(client: &Client, kind: &str, namespace: Option<&str>) -> (Api<DynamicObject>, ApiResource) {
    let (ar, namespaced) = resource(kind);
    let api = match namespace {
        Some(ns) if namespaced => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    };
    (api, ar)
}

/// Starts the reflectors, each poking `notify` on a change. A cluster without the Gateway
/// API's CRDs leaves them retrying and empty.
pub fn start(client: &Client, namespace: Option<&str>, notify: Arc<Notify>) -> Stores {
    let mut stores = Vec::new();
    for (kind, ..) in KINDS {
        let (api, ar) = api(client, kind, namespace);
        let writer = reflector::store::Writer::new(ar.clone());
        let reader = writer.as_reader();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff();
        let notify = notify.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(_) => notify.notify_one(),
                    Err(e) => eprintln!("vireo-controller: watching {kind}: {e}"),
                }
            }
        });
        stores.push((ar, reader));
    }
    Stores {
        client: client.clone(),
        stores,
    }
}

impl Stores {
    /// Waits for the first listing of each kind, at most `limit` (a kind whose CRD is not
    /// installed never lists).
    pub async fn ready(&self, limit: Duration) {
        for (ar, s) in &self.stores {
            if tokio::time::timeout(limit, s.wait_until_ready())
                .await
                .is_err()
            {
                eprintln!(
                    "vireo-controller: {} not listed yet (is the Gateway API installed?)",
                    ar.kind
                );
            }
        }
    }

    fn list<T: DeserializeOwned + Debug>(&self, i: usize) -> Vec<T> {
        let (ar, store) = &self.stores[i];
        store
            .state()
            .iter()
            .filter_map(|o| {
                let v = serde_json::to_value(&**o).ok()?;
                match serde_json::from_value(v) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        eprintln!("vireo-controller: {} {}: {e}", ar.kind, o.name_any());
                        None
                    }
                }
            })
            .collect()
    }

    /// The objects as the reflectors last saw them.
    pub fn objects(&self) -> Objects {
        Objects {
            classes: self.list(0),
            gateways: self.list(1),
            http_routes: self.list(2),
            grpc_routes: self.list(3),
            grants: self.list(4),
        }
    }

    /// Writes each status that differs from the object's: route parents of other
    /// controllers are kept, conditions keep their transition time while their status
    /// stays, and Gateways get the published address, and `Programmed` False while vireo
    /// refuses the configuration made (`refused`).
    pub async fn write(
        &self,
        statuses: &[Status],
        controller: &str,
        address: Option<&str>,
        refused: bool,
    ) {
        for s in statuses {
            let i = KINDS
                .iter()
                .position(|(k, ..)| *k == s.kind)
                .expect("a watched kind");
            let (_, store) = &self.stores[i];
            let Some(current) = store.state().into_iter().find(|o| {
                o.metadata.name.as_deref() == Some(s.name.as_str())
                    && o.metadata.namespace.as_deref().unwrap_or_default() == s.namespace
            }) else {
                continue;
            };
            let old = current.data.get("status").cloned().unwrap_or(Value::Null);
            let mut new = s.status.clone();
            if s.kind == "Gateway"
                && let Some(a) = address
            {
                let ty = if a.parse::<std::net::IpAddr>().is_ok() {
                    "IPAddress"
                } else {
                    "Hostname"
                };
                new["addresses"] = json!([{"type": ty, "value": a}]);
            }
            if s.kind == "Gateway" && refused {
                for c in new["conditions"].as_array_mut().into_iter().flatten() {
                    if c["type"] == "Programmed" {
                        c["status"] = json!("False");
                        c["reason"] = json!("Invalid");
                        c["message"] = json!(
                            "vireo refused the configuration made (see the Events); \
                             the one serving stays"
                        );
                    }
                }
            }
            if let Some(parents) = new.get_mut("parents").and_then(Value::as_array_mut) {
                let others = old["parents"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["controllerName"] != controller)
                    .cloned();
                parents.extend(others);
            }
            stamp(&mut new, &old);
            if new == old {
                continue;
            }
            let (api, _) = api(&self.client, s.kind, Some(&s.namespace));
            let patch = json!({ "status": new });
            if let Err(e) = api
                .patch_status(&s.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                eprintln!("vireo-controller: status of {} {}: {e}", s.kind, s.name);
            }
        }
    }
}

/// Gives every `conditions` list in `new` its transition times: the old one of a condition
/// of the same type and status found at the same place in `old`, else now.
fn stamp(new: &mut Value, old: &Value) {
    match new {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let o = old.get(k).unwrap_or(&Value::Null);
                if k == "conditions"
                    && let Some(list) = v.as_array_mut()
                {
                    for c in list {
                        let kept = o
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find(|oc| oc["type"] == c["type"] && oc["status"] == c["status"]);
                        c["lastTransitionTime"] = match kept {
                            Some(oc) => oc["lastTransitionTime"].clone(),
                            None => json!(now()),
                        };
                    }
                } else {
                    stamp(v, o);
                }
            }
        }
        Value::Array(list) => {
            for (i, v) in list.iter_mut().enumerate() {
                stamp(v, old.get(i).unwrap_or(&Value::Null));
            }
        }
        _ => {}
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
