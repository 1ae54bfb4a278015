//! A panic while a request is being handled must cost that request only: the
//! content phase runs under `catch_unwind`, the client gets a 500, the panic is
//! logged (by the panic hook, with its message and place) and counted, and the
//! worker and its other connections carry on.

use crate::core::request::{Request, RequestBody};
use crate::http::response::Response;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::Poll;

/// Run the request's phases; `None` when they panicked (the connection answers
/// 500 and closes: the request's state is unknown).
pub async fn run(req: &mut Request<'_>, body: &mut dyn RequestBody) -> Option<Response> {
    let out = {
        let fut = async {
            #[cfg(debug_assertions)]
            test_trigger(&req.uri);
            req.run(body).await
        };
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            // Unwind safety: after a panic the future is dropped, never polled
            // again; the request is only used afterwards for its error page.
            match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
                Ok(Poll::Ready(r)) => Poll::Ready(Some(r)),
                Ok(Poll::Pending) => Poll::Pending,
                Err(_) => Poll::Ready(None),
            }
        })
        .await
    };
    if out.is_none() {
        super::stats::panicked();
        crate::error_log!(
            Alert,
            "request \"{}\" panicked: answered 500, connection closed",
            String::from_utf8_lossy(req.head.line())
        );
    }
    out
}

/// Test builds only: a request for the URI in `VIREO_TEST_PANIC_URI` (read once
/// at start-up, see [`init`]) panics in its content phase. Release builds have
/// neither the variable nor this code.
#[cfg(debug_assertions)]
static TRIGGER: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();

/// Read the test trigger (debug builds); called once at start-up.
pub fn init() {
    #[cfg(debug_assertions)]
    TRIGGER
        .get_or_init(|| std::env::var_os("VIREO_TEST_PANIC_URI").map(|v| v.into_encoded_bytes()));
}

#[cfg(debug_assertions)]
fn test_trigger(uri: &[u8]) {
    if let Some(Some(t)) = TRIGGER.get()
        && t == uri
    {
        panic!("test panic trigger (VIREO_TEST_PANIC_URI)");
    }
}
