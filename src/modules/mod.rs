//! Feature modules: each one holds its runtime and its directives.

pub mod fastcgi;
pub mod log;
pub mod static_files;

/// Response filters, in order, run on every response a request produces
/// (header changes, body transformations). Each feature adds its own here.
pub fn filter_response(
    _req: &crate::core::request::Request<'_>,
    _resp: &mut crate::http::response::Response,
) {
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
