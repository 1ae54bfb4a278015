//! Static file content handler: URI → path, conditional requests, ranges, MIME types.

pub mod conditional;
pub mod mime;
pub mod range;
pub mod uri;
