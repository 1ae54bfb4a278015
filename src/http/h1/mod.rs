//! HTTP/1.x: sans-IO request head parser, chunked body decoder, and the connection loop.

pub mod chunked;
pub mod conn;
pub mod parse;
