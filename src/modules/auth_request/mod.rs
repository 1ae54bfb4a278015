//! Authorization by subrequest (nginx's ngx_http_auth_request_module):
//! `auth_request` and `auth_request_set`, run in the access phase by
//! [`super::access::phase`] as `satisfy` says, after allow/deny and basic
//! authentication.
//!
//! The check is a subrequest ([`crate::core::subrequest`]) to the
//! configured URI, made without the request's body (an empty one, as
//! nginx's, even when a handler already read the body whole: it stays the
//! main request's, for the content handler after the check). The
//! subrequest's status decides: 2xx grants, 401 and 403 refuse (401 with
//! the subrequest's `WWW-Authenticate` fields, from its own answer or its
//! upstream's reply), anything else fails with 500. Its body is read to the
//! end and dropped. Once it is done the `auth_request_set` values are
//! rendered in its context (`$upstream_http_*`, `$sent_http_*`) and given
//! to their variables in the main request, before the status is looked at,
//! so they hold after internal redirects too.

pub mod conf;

use crate::core::message::response::{BodyStream, Response, Value};
use crate::core::module::Module;
use crate::core::request::{Finished, Request, split_args};
use crate::modules::auth_basic::Auth;
use conf::AuthRequestConf;
use std::cell::RefCell;
use std::rc::Rc;

/// Run the subrequest and say what its answer decides.
pub async fn check(req: &mut Request<'_>) -> Auth {
    let conf = req.conf.get::<AuthRequestConf>();
    let Some(target) = conf.uri.clone() else {
        return Auth::Declined;
    };
    let sets = conf.set.clone();
    let values: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let done: Option<crate::core::subrequest::OnDone> = match sets.is_empty() {
        true => None,
        false => {
            let (sets, values) = (sets.clone(), values.clone());
            Some(Box::new(move |sr: &Request<'_>, resp: &Response| {
                let fin = Finished::unsent(sr, resp);
                let mut out = values.borrow_mut();
                for s in sets.iter() {
                    let mut v = Vec::new();
                    s.value.render(&fin, &mut v);
                    out.push(v);
                }
            }))
        }
    };
    let (uri, args) = split_args(&target);
    let origin = req.subrequests_without_body();
    let Ok(mut sub) = origin.subrequest_then(uri.to_vec(), args.to_vec(), done) else {
        return Auth::Failed(req.error(500));
    };
    let (status, challenges) = match sub.head().await {
        Some(h) => (
            h.status,
            h.headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case("www-authenticate"))
                .cloned()
                .collect::<Vec<(&'static str, Value)>>(),
        ),
        None => (0, Vec::new()),
    };
    while let Ok(Some(_)) = sub.next().await {}
    drop(sub);
    let values = std::mem::take(&mut *values.borrow_mut());
    for (s, v) in sets.iter().zip(values) {
        s.target.assign(req, v);
    }
    match status {
        200..=299 => Auth::Granted,
        401 => {
            let mut r = req.error(401);
            r.headers.extend(challenges);
            Auth::Refused(r)
        }
        403 => Auth::Refused(req.error(403)),
        _ => {
            crate::error_log!(
                Error,
                "auth request unexpected status: {status}{}",
                req.log_context()
            );
            Auth::Failed(req.error(500))
        }
    }
}

/// Whether a level has an `auth_request` to check.
pub fn active(c: &crate::conf::model::LocConf) -> bool {
    c.get::<AuthRequestConf>().uri.is_some()
}

/// `auth_request`, `auth_request_set`.
pub static MODULE: Module = Module {
    name: "auth_request",
    nginx: &["http_auth_request_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&AuthRequestConf::KIND),
    ..Module::EMPTY
};
