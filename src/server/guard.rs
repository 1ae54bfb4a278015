//! A panic while a request is being handled must cost that request only: the
//! phases (content and response filters) run under `catch_unwind`, the client
//! gets a 500, the panic is logged (by the panic hook, with its message and
//! place) and counted, and the worker and its other connections carry on. A
//! panic later, while the body is being sent, cannot become a 500 (the head is
//! out): it ends that connection's task (HTTP/2: that stream's), which tokio
//! isolates; the worker goes on, and the panic is logged and counted the same way.

use crate::core::message::response::Response;
use crate::core::request::{Request, RequestBody};
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
            #[allow(unused_mut)]
            let mut resp = req.run(body).await;
            #[cfg(debug_assertions)]
            test_body_trigger(&req.uri, &mut resp);
            resp
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
        crate::error_log!(
            Alert,
            "request \"{}\" panicked: answered 500, connection closed",
            String::from_utf8_lossy(req.head.line())
        );
    }
    out
}

/// Test builds only: a request for the URI in `VIREO_TEST_PANIC_URI` panics in
/// its content phase; one for the URI in `VIREO_TEST_PANIC_BODY_URI` gets a
/// streamed body that panics after its first piece (both read once at start-up,
/// see [`init`]). Release builds have neither the variables nor this code.
#[cfg(debug_assertions)]
static TRIGGER: std::sync::OnceLock<[Option<Vec<u8>>; 2]> = std::sync::OnceLock::new();

/// Read the test triggers (debug builds); called once at start-up.
pub fn init() {
    #[cfg(debug_assertions)]
    TRIGGER.get_or_init(|| {
        ["VIREO_TEST_PANIC_URI", "VIREO_TEST_PANIC_BODY_URI"]
            .map(|v| std::env::var_os(v).map(|v| v.into_encoded_bytes()))
    });
}

#[cfg(debug_assertions)]
fn triggered(which: usize, uri: &[u8]) -> bool {
    TRIGGER
        .get()
        .and_then(|t| t[which].as_deref())
        .is_some_and(|t| t == uri)
}

#[cfg(debug_assertions)]
fn test_trigger(uri: &[u8]) {
    if triggered(0, uri) {
        panic!("test panic trigger (VIREO_TEST_PANIC_URI)");
    }
}

#[cfg(debug_assertions)]
fn test_body_trigger(uri: &[u8], resp: &mut Response) {
    if triggered(1, uri) {
        resp.body = crate::core::message::response::Body::Stream {
            stream: Box::new(PanicBody(false)),
            len: None,
        };
    }
}

/// A body whose second piece panics.
#[cfg(debug_assertions)]
#[derive(Debug)]
struct PanicBody(bool);

#[cfg(debug_assertions)]
impl crate::core::message::response::BodyStream for PanicBody {
    fn next(
        &mut self,
    ) -> crate::core::request::BoxFuture<'_, std::io::Result<Option<bytes::Bytes>>> {
        if std::mem::replace(&mut self.0, true) {
            panic!("test panic trigger (VIREO_TEST_PANIC_BODY_URI)");
        }
        Box::pin(std::future::ready(Ok(Some(bytes::Bytes::from_static(
            b"partial",
        )))))
    }
}
