//! Services and their EndpointSlices as upstream peers.

use k8s_openapi::api::core::v1::ServicePort;

use crate::snapshot::Snapshot;

/// The label tying an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// How a backend names the Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortRef {
    Number(i32),
    Name(String),
    /// The Service's first port.
    First,
}

/// A Service port resolved to its peers.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// `namespace-service-port`, the base of the upstream name.
    pub name: String,
    /// `ip:port` peers (ready endpoints, or the cluster IP with `via_cluster_ip`).
    pub peers: Vec<String>,
    /// The Service port's number, told to error backends.
    pub port: String,
}

/// Peers of a Service port: the ready addresses of its EndpointSlices (or its cluster IP).
pub fn resolve(
    snap: &Snapshot,
    namespace: &str,
    service: &str,
    port: &PortRef,
    via_cluster_ip: bool,
) -> Result<Resolved, String> {
    let svc = snap
        .service(namespace, service)
        .ok_or_else(|| format!("service {namespace}/{service} not found"))?;
    let spec = svc
        .spec
        .as_ref()
        .ok_or_else(|| format!("service {namespace}/{service} has no spec"))?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return Err(format!(
            "service {namespace}/{service} is of type ExternalName, which vireo does not route to"
        ));
    }
    let ports = spec.ports.as_deref().unwrap_or_default();
    let sp: &ServicePort = match port {
        PortRef::Number(n) => ports.iter().find(|p| p.port == *n),
        PortRef::Name(n) => ports.iter().find(|p| p.name.as_deref() == Some(n)),
        PortRef::First => ports.first(),
    }
    .ok_or_else(|| {
        format!(
            "service {namespace}/{service} has no port {}",
            port_text(port)
        )
    })?;
    let name = format!("{namespace}-{service}-{}", sp.port);
    let mut peers = Vec::new();
    if via_cluster_ip {
        match spec.cluster_ip.as_deref() {
            Some(ip) if ip != "None" && !ip.is_empty() => peers.push(peer(ip, sp.port)),
            _ => return Err(format!("service {namespace}/{service} has no cluster IP")),
        }
    } else {
        for slice in &snap.endpoint_slices {
            let m = &slice.metadata;
            let owned = m.namespace.as_deref() == Some(namespace)
                && m.labels
                    .as_ref()
                    .and_then(|l| l.get(SERVICE_NAME_LABEL))
                    .map(String::as_str)
                    == Some(service);
            if !owned || !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
                continue;
            }
            // The slice's port of the same name as the Service port (both unnamed alike).
            let Some(target) = slice
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref().unwrap_or("") == sp.name.as_deref().unwrap_or(""))
                .and_then(|p| p.port)
            else {
                continue;
            };
            for e in slice.endpoints.iter().flatten() {
                if e.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                    continue;
                }
                for a in &e.addresses {
                    peers.push(peer(a, target));
                }
            }
        }
    }
    peers.sort();
    peers.dedup();
    Ok(Resolved {
        name,
        peers,
        port: sp.port.to_string(),
    })
}

fn port_text(p: &PortRef) -> String {
    match p {
        PortRef::Number(n) => n.to_string(),
        PortRef::Name(n) => n.clone(),
        PortRef::First => "at all".to_string(),
    }
}

fn peer(addr: &str, port: i32) -> String {
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}
