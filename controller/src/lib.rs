//! vireo-controller: a Kubernetes Ingress and Gateway API controller for vireo.
//!
//! The translation is pure: a [`snapshot::Snapshot`] of the watched objects goes through the
//! front ends ([`ingress`], then [`gateway`] with the Gateway API objects) into the intermediate [`model`], which [`render`] writes as one
//! nginx-syntax configuration. [`apply`] puts a configuration in place and reloads vireo;
//! [`watch`] keeps the snapshot with the API server and drives the rest.

pub mod apply;
pub mod backends;
pub mod gateway;
pub mod ingress;
pub mod model;
pub mod render;
pub mod snapshot;
pub mod watch;
