//! Upstreams: peers, balancing and (with the proxy and FastCGI handlers)
//! connection pools and health.

pub mod balance;
pub mod response;
