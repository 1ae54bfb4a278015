//! Test harness of the controller's integration tests: a real Kubernetes API
//! server on loopback (`apiserver`), the controller and the vireo it drives with
//! their backends (`edge`), and the scratch folders and free ports the vireo
//! tests use.
#![allow(dead_code)]

pub mod apiserver;
pub mod edge;
#[path = "../../../tests/common/process.rs"]
pub mod process;
