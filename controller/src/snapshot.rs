//! The cluster state a configuration is made from, and what the translation reports about it.

use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::Resource;

/// The objects of the watched kinds, as the watches last saw them.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    pub ingress_classes: Vec<IngressClass>,
    pub ingresses: Vec<Ingress>,
    pub services: Vec<Service>,
    pub endpoint_slices: Vec<EndpointSlice>,
    pub secrets: Vec<Secret>,
    /// Namespaces, for their labels (Gateway listeners' namespace selectors).
    pub namespaces: Vec<Namespace>,
}

impl Snapshot {
    pub fn service(&self, namespace: &str, name: &str) -> Option<&Service> {
        find(&self.services, namespace, name)
    }
    pub fn secret(&self, namespace: &str, name: &str) -> Option<&Secret> {
        find(&self.secrets, namespace, name)
    }
    pub fn namespace(&self, name: &str) -> Option<&Namespace> {
        self.namespaces
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
    }
}

fn find<'a, K: Resource>(list: &'a [K], namespace: &str, name: &str) -> Option<&'a K> {
    list.iter().find(|o| {
        let m = o.meta();
        m.namespace.as_deref() == Some(namespace) && m.name.as_deref() == Some(name)
    })
}

/// The object an Event or a status is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    pub kind: String,
    pub api_version: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl ObjectRef {
    pub fn of<K: Resource<DynamicType = ()>>(o: &K) -> ObjectRef {
        let m = o.meta();
        ObjectRef {
            kind: K::kind(&()).into_owned(),
            api_version: K::api_version(&()).into_owned(),
            namespace: m.namespace.clone().unwrap_or_default(),
            name: m.name.clone().unwrap_or_default(),
            uid: m.uid.clone(),
        }
    }
}

/// Something wrong with an object, told to its owner by a Warning Event.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    pub object: ObjectRef,
    /// A CamelCase reason (`BadAnnotation`, `ServiceNotFound`, …).
    pub reason: String,
    pub message: String,
}
