//! Test harness of the controller's integration tests: a real Kubernetes API
//! server on loopback (`apiserver`), and the scratch folders and free ports
//! the vireo tests use.
#![allow(dead_code)]

pub mod apiserver;
#[path = "../../../tests/common/process.rs"]
pub mod process;
