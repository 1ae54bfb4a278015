//! HTTP/1.x: sans-IO request head parser and chunked body decoder.

pub mod chunked;
pub mod parse;
