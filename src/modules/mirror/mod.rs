//! Request mirroring (nginx's ngx_http_mirror_module): `mirror` and
//! `mirror_request_body`.
//!
//! In the pre-content phase of a main request, after try_files, each
//! `mirror` URI becomes a background subrequest
//! ([`crate::core::subrequest::Origin::background`]) with the request's
//! method, headers and arguments: it runs beside the main request through
//! its location's phases and handler, and only its response's head is
//! taken. The main request goes on at once and its response is sent
//! without waiting; the connection waits for the mirrors before it logs the
//! request and reads the next one.
//!
//! With `mirror_request_body on` the body is read whole first
//! ([`client_body::read_all`]) and shared with the subrequests, so they
//! send it on, as does the main request's handler afterwards. With `off`
//! the mirrors have none.
//!
//! The phase runs again after an internal redirect (an index file, an
//! error page), as nginx's, so a request is mirrored once per location it
//! reaches that mirrors.

pub mod conf;

use crate::core::module::{Hooks, Module, Ordered, Phase};
use crate::core::request::{BoxFuture, Request, RequestBody};
use crate::modules::client_body;
use conf::MirrorConf;

/// Mirror `req` to its level's URIs; `Some` answers it (a body that could
/// not be read, a refused subrequest: 500).
async fn mirror(
    req: &mut Request<'_>,
    body: &mut dyn RequestBody,
) -> Option<crate::core::message::response::Response> {
    let conf = req.conf.get::<MirrorConf>();
    let origin = match conf.request_body {
        true => {
            if let Err(status) = client_body::read_all(req, body).await {
                return Some(req.error(status));
            }
            req.subrequests()
        }
        false => req.subrequests_without_body(),
    };
    let args = req.args().unwrap_or_default().to_vec();
    for uri in conf.uris.iter() {
        crate::error_log!(Debug, "mirror \"{}\"", String::from_utf8_lossy(uri));
        if origin.background(uri.to_vec(), args.clone()).is_err() {
            return Some(req.error(500));
        }
    }
    None
}

fn phase<'r>(req: &'r mut Request<'_>, body: &'r mut dyn RequestBody) -> Phase<'r> {
    if req.is_subrequest() {
        return Phase::Next;
    }
    let run: BoxFuture<'r, _> = Box::pin(mirror(req, body));
    Phase::Wait(run)
}

pub static MODULE: Module = Module {
    name: "mirror",
    nginx_default: &["http_mirror_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&MirrorConf::KIND),
    hooks: Hooks {
        precontent_level: Some(Ordered {
            order: 10,
            run: phase,
            active: |c| !c.get::<MirrorConf>().uris.is_empty(),
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
