//! Static file content handler: URI → path, conditional requests, ranges, MIME types,
//! and the per-worker open-file cache.

pub mod cache;
pub mod conditional;
pub mod conf;
pub mod handler;
pub mod mime;
pub mod range;
pub mod uri;
