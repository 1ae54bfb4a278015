//! The controller's loop: reflectors keep the watched kinds; after a change (and a short
//! quiet time that gathers a burst of them) the whole state is translated, rendered and
//! applied; problems become Events and served Ingresses get the published address.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use crate::apply::{Applier, Outcome};
use crate::gateway;
use crate::ingress::{self, Options};
use crate::render::{self, Settings};
use crate::snapshot::{ObjectRef, Problem, Snapshot};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The command line's choices.
#[derive(Debug, Clone)]
pub struct Config {
    pub kubeconfig: Option<PathBuf>,
    pub ingress_class: String,
    /// The GatewayClass `controllerName` whose Gateways are served.
    pub gateway_controller: String,
    pub conf_dir: PathBuf,
    pub pid_file: PathBuf,
    pub vireo_bin: PathBuf,
    pub publish_address: Option<String>,
    pub allow_snippets: bool,
    pub namespace: Option<String>,
    pub http_listen: String,
    pub https_listen: String,
    pub resolver: Option<String>,
    pub debounce: Duration,
}

async fn client(cfg: &Config) -> Result<Client, Error> {
    let config = match &cfg.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

/// A reflector of one kind (the objects `config` selects), driven by a task of its own,
/// poking `notify` on each change.
fn reflect<K>(api: Api<K>, config: watcher::Config, notify: Arc<Notify>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config)).default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(_) => notify.notify_one(),
                Err(e) => eprintln!("vireo-controller: watching {}: {e}", K::kind(&())),
            }
        }
    });
    reader
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn state<K>(s: &Store<K>) -> Vec<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    s.state().iter().map(|o| (**o).clone()).collect()
}

pub async fn run(cfg: Config) -> Result<(), Error> {
    // vireo's prefix: its default logs go under logs/.
    std::fs::create_dir_all(cfg.conf_dir.join("logs"))?;
    let client = client(&cfg).await?;
    let notify = Arc::new(Notify::new());
    let ns = cfg.namespace.as_deref();
    let all = watcher::Config::default;
    let classes = reflect::<IngressClass>(Api::all(client.clone()), all(), notify.clone());
    let ingresses = reflect::<Ingress>(api(&client, ns), all(), notify.clone());
    let services = reflect::<Service>(api(&client, ns), all(), notify.clone());
    let slices = reflect::<EndpointSlice>(api(&client, ns), all(), notify.clone());
    let secrets = reflect::<Secret>(api(&client, ns), all(), notify.clone());
    // Namespaces for their labels: those a Gateway listener's selector reads (only the
    // one served, when the controller serves one).
    let namespaces = reflect::<Namespace>(
        Api::all(client.clone()),
        match ns {
            Some(ns) => all().fields(&format!("metadata.name={ns}")),
            None => all(),
        },
        notify.clone(),
    );
    classes.wait_until_ready().await?;
    ingresses.wait_until_ready().await?;
    services.wait_until_ready().await?;
    slices.wait_until_ready().await?;
    secrets.wait_until_ready().await?;
    namespaces.wait_until_ready().await?;
    let gateway_api = gateway::cluster::start(&client, ns, notify.clone());
    gateway_api.ready(Duration::from_secs(10)).await;
    eprintln!(
        "vireo-controller: watching; configuration in {}",
        cfg.conf_dir.display()
    );

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "vireo-controller".into(),
            instance: None,
        },
    );
    let opts = Options {
        ingress_class: cfg.ingress_class.clone(),
        allow_snippets: cfg.allow_snippets,
    };
    let settings = Settings {
        conf_dir: cfg.conf_dir.clone(),
        pid_file: cfg.pid_file.clone(),
        http_listen: cfg.http_listen.clone(),
        https_listen: cfg.https_listen.clone(),
        resolver: cfg.resolver.clone(),
    };
    let mut applier = Applier::new(
        cfg.conf_dir.clone(),
        cfg.pid_file.clone(),
        cfg.vireo_bin.clone(),
    );
    let mut told: BTreeSet<Problem> = BTreeSet::new();
    let mut rejected: Option<String> = None;
    // resourceVersions of the Ingresses in the serving configuration.
    let mut applied_versions: BTreeMap<ObjectRef, String> = BTreeMap::new();
    loop {
        let snap = Snapshot {
            ingress_classes: state(&classes),
            ingresses: state(&ingresses),
            services: state(&services),
            endpoint_slices: state(&slices),
            secrets: state(&secrets),
            namespaces: state(&namespaces),
        };
        let mut t = ingress::translate(&snap, &opts);
        let statuses = gateway::translate(
            &snap,
            &gateway_api.objects(),
            &cfg.gateway_controller,
            &mut t,
        );
        let text = render::render(&t.model, &settings);
        let versions: BTreeMap<ObjectRef, String> = snap
            .ingresses
            .iter()
            .map(|i| {
                (
                    ObjectRef::of(i),
                    i.metadata.resource_version.clone().unwrap_or_default(),
                )
            })
            .filter(|(o, _)| t.served.contains(o))
            .collect();
        if rejected.as_deref() != Some(text.as_str()) {
            match applier.apply(&text, &t.model.files).await {
                Ok(Outcome::Unchanged) => {}
                Ok(Outcome::Applied) => {
                    eprintln!(
                        "vireo-controller: configuration applied ({} servers, {} upstreams)",
                        t.model.servers.len(),
                        t.model.upstreams.len()
                    );
                    rejected = None;
                    applied_versions = versions.clone();
                }
                Ok(Outcome::Invalid(msg)) => {
                    eprintln!(
                        "vireo-controller: configuration refused by vireo -t, the serving one stays: {msg}"
                    );
                    // Told on the Ingresses that changed since the serving configuration.
                    let mut changed: Vec<&ObjectRef> = versions
                        .iter()
                        .filter(|(o, v)| applied_versions.get(o) != Some(v))
                        .map(|(o, _)| o)
                        .collect();
                    if changed.is_empty() {
                        changed = versions.keys().collect();
                    }
                    for o in changed {
                        let note = format!(
                            "vireo refused the configuration, the serving one stays: {msg}"
                        );
                        publish(&recorder, o, "ConfigurationRejected", note).await;
                    }
                    rejected = Some(text);
                }
                Err(e) => eprintln!("vireo-controller: applying the configuration: {e}"),
            }
        }
        let now: BTreeSet<Problem> = t.problems.into_iter().collect();
        for p in now.difference(&told) {
            eprintln!(
                "vireo-controller: {}/{}: {}: {}",
                p.object.namespace, p.object.name, p.reason, p.message
            );
            publish(&recorder, &p.object, &p.reason, p.message.clone()).await;
        }
        told = now;
        if let Some(addr) = &cfg.publish_address {
            let served = snap
                .ingresses
                .iter()
                .filter(|i| applied_versions.contains_key(&ObjectRef::of(*i)));
            futures::stream::iter(served)
                .for_each_concurrent(16, |ing| async {
                    if let Err(e) = publish_status(&client, ing, addr).await {
                        eprintln!(
                            "vireo-controller: status of {}: {e}",
                            ObjectRef::of(ing).name
                        );
                    }
                })
                .await;
        }
        gateway_api
            .write(
                &statuses,
                &cfg.gateway_controller,
                cfg.publish_address.as_deref(),
                rejected.is_some(),
            )
            .await;
        notify.notified().await;
        tokio::time::sleep(cfg.debounce).await;
    }
}

async fn publish(recorder: &Recorder, o: &ObjectRef, reason: &str, note: String) {
    let reference = ObjectReference {
        api_version: Some(o.api_version.clone()),
        kind: Some(o.kind.clone()),
        namespace: Some(o.namespace.clone()),
        name: Some(o.name.clone()),
        uid: o.uid.clone(),
        ..ObjectReference::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: reason.to_string(),
        // The API server keeps notes up to 1 kB.
        note: Some(note.chars().take(1000).collect()),
        action: "Configure".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&ev, &reference).await {
        eprintln!("vireo-controller: event on {}/{}: {e}", o.namespace, o.name);
    }
}

/// Sets status.loadBalancer.ingress to the published address, unless it says so already.
async fn publish_status(client: &Client, ing: &Ingress, addr: &str) -> Result<(), kube::Error> {
    let entry = if addr.parse::<std::net::IpAddr>().is_ok() {
        serde_json::json!({ "ip": addr })
    } else {
        serde_json::json!({ "hostname": addr })
    };
    let current = ing
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|l| serde_json::to_value(l).unwrap_or_default());
    let wanted = serde_json::Value::Array(vec![entry]);
    if current.as_ref() == Some(&wanted) {
        return Ok(());
    }
    let o = ObjectRef::of(ing);
    let api: Api<Ingress> = Api::namespaced(client.clone(), &o.namespace);
    let patch = serde_json::json!({ "status": { "loadBalancer": { "ingress": wanted } } });
    api.patch_status(&o.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
