//! The protocol-neutral request head and response that HTTP/1 and HTTP/2
//! hand to the pipeline and take back from it.

pub mod head;
pub mod response;
pub mod transform;
