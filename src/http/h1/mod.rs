//! HTTP/1.x: sans-IO request head parser, chunked body decoder, the connection
//! loop, and the response writer.

mod body;
pub mod chunked;
pub mod conn;
pub mod parse;
mod write;
