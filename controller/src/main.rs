//! vireo-controller: Kubernetes Ingress and Gateway API objects to vireo configuration.
fn main() {}
