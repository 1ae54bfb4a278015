//! Feature modules: each one holds its runtime and its directives.

pub mod access;
pub mod auth_basic;
pub mod autoindex;
pub mod cgi;
pub mod compress;
pub mod error_page;
pub mod fastcgi;
pub mod headers;
pub mod limit_conn;
pub mod limit_req;
pub mod log;
pub mod map;
pub mod proxy;
pub mod realip;
pub mod rewrite;
pub mod ssl;
pub mod static_files;
pub mod status;
pub mod try_files;
pub mod zone;

/// Response filters, in order, run on every response a request produces
/// (header changes, body transformations). Each feature adds its own here.
pub fn filter_response(
    req: &crate::core::request::Request<'_>,
    resp: &mut crate::core::message::response::Response,
) {
    headers::filter(req, resp);
    compress::filter(req, resp);
}

/// The preaccess and access phases (nginx's order: limits first, then
/// allow/deny and authentication), run for the location a request ended up in,
/// after its rewrite phase and before try_files. `Some` answers the request.
pub async fn access_phases(
    req: &mut crate::core::request::Request<'_>,
    body: &mut dyn crate::core::request::RequestBody,
) -> Option<crate::core::message::response::Response> {
    // realip first (nginx's preaccess order): limits and access see its address.
    realip::apply(req);
    if let Some(r) = limit_req::apply(req, body).await {
        return Some(r);
    }
    if let Some(r) = limit_conn::apply(req) {
        return Some(r);
    }
    // access
    access::phase(req).await
}

/// Per-worker housekeeping, once a second: flush access-log buffers, drop
/// inactive open-file cache entries.
pub async fn timers() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        log::flush_due();
        static_files::cache::sweep();
    }
}

/// A worker is about to exit: write out what is buffered.
pub fn worker_exit() {
    log::flush_all();
}
