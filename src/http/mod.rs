//! HTTP protocol layer: codecs and response building.

pub mod h1;
pub mod response;
