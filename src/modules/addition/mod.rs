//! The addition filter, as nginx's `ngx_http_addition_filter_module`: a
//! main request's 200 response whose type is in `addition_types` gets the
//! body of a subrequest to `add_before_body`'s URI before its own, and of
//! one to `add_after_body`'s after. The subrequests
//! ([`crate::core::subrequest`]) go through the server's phases as SSI's
//! includes do, and are made only as the body is pulled: the `before` one
//! when the first piece is asked for, the `after` one once the body ended
//! (a body that fails — an upstream that closed early — ends the response
//! without it). Nothing is held whole: each piece is passed on as it comes.
//!
//! It runs after SSI, sub_filter and charset (which act on the response's
//! own body, as in nginx where they come before the postpone filter that
//! splices subrequests) and before compression, which takes the whole.

pub mod conf;

use crate::core::message::head::Method;
use crate::core::message::response::{Body, BodyStream, Response, Value};
use crate::core::module::{Hooks, Module, Ordered};
use crate::core::request::{BoxFuture, Request};
use crate::core::subrequest::{Origin, Subrequest};
use crate::modules::static_files::range::whole_file;
use bytes::Bytes;
use conf::AdditionConf;
use std::io;
use std::rc::Rc;
use std::sync::Arc;

/// The filter: a response it applies to gets an [`Addition`] body.
fn filter(req: &Request<'_>, resp: &mut Response) {
    let c = req.conf.get::<AdditionConf>();
    if req.is_subrequest()
        || (c.before.is_none() && c.after.is_none())
        || !c
            .types
            .matches(resp.content_type.as_ref().map(Value::as_str))
    {
        return;
    }
    if resp.status == 206 {
        whole_file(resp);
    }
    if resp.status != 200 {
        return;
    }
    resp.headers.retain(|(n, _)| {
        !n.eq_ignore_ascii_case("content-length") && !n.eq_ignore_ascii_case("accept-ranges")
    });
    weak_etag(resp);
    // The client's method: a cached location may fetch a HEAD as GET.
    if req.head.method == Method::Head {
        resp.body = Body::unknown_length();
        return;
    }
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    resp.body = Body::Stream {
        stream: Box::new(Addition {
            origin: req.subrequests(),
            before: c.before.clone(),
            src: body.into_stream(),
            after: c.after.clone(),
            sub: None,
        }),
        len: None,
    };
}

/// nginx's `ngx_http_weak_etag`: a strong ETag becomes weak; one that is
/// neither quoted nor weak is dropped.
fn weak_etag(resp: &mut Response) {
    resp.headers.retain_mut(|(n, v)| {
        if !n.eq_ignore_ascii_case("etag") || v.as_str().starts_with("W/") {
            return true;
        }
        if !v.as_str().starts_with('"') {
            return false;
        }
        *v = Value::Owned(format!("W/{}", v.as_str()));
        true
    });
}

/// The body with the additions: the `before` subrequest's body, the
/// response's own, the `after` subrequest's.
struct Addition {
    origin: Rc<Origin>,
    /// The `before` subrequest still to make.
    before: Option<Arc<str>>,
    /// The response's own body, until it ended (`None` when it had none).
    src: Option<Box<dyn BodyStream>>,
    /// The `after` subrequest still to make.
    after: Option<Arc<str>>,
    /// The subrequest whose body is being passed on.
    sub: Option<Subrequest>,
}

impl std::fmt::Debug for Addition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Addition")
            .field("before", &self.before)
            .field("after", &self.after)
            .field("in_subrequest", &self.sub.is_some())
            .finish()
    }
}

impl Addition {
    /// A subrequest to `uri`, without arguments, as nginx's.
    fn start(&self, uri: &str) -> io::Result<Subrequest> {
        self.origin
            .subrequest(uri.as_bytes().to_vec(), Vec::new())
            .map_err(|e| io::Error::other(format!("addition subrequest refused: {e:?}")))
    }

    async fn step(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            if let Some(sub) = self.sub.as_mut() {
                match sub.next().await? {
                    Some(p) => return Ok(Some(p)),
                    None => self.sub = None,
                }
            } else if let Some(uri) = self.before.take() {
                self.sub = Some(self.start(&uri)?);
            } else if let Some(src) = self.src.as_mut() {
                match src.next().await? {
                    Some(p) => return Ok(Some(p)),
                    None => self.src = None,
                }
            } else if let Some(uri) = self.after.take() {
                self.sub = Some(self.start(&uri)?);
            } else {
                return Ok(None);
            }
        }
    }
}

impl BodyStream for Addition {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(self.step())
    }

    /// The response's own pieces at hand, between the subrequests.
    fn ready(&mut self) -> Option<io::Result<Option<Bytes>>> {
        if self.sub.is_some() || self.before.is_some() {
            return None;
        }
        match self.src.as_mut()?.ready()? {
            Ok(None) => {
                self.src = None;
                self.after.is_none().then_some(Ok(None))
            }
            r => Some(r),
        }
    }

    fn unbuffered(&self) -> bool {
        self.src.as_ref().is_some_and(|s| s.unbuffered())
    }
}

/// The addition filter and its directives.
pub static MODULE: Module = Module {
    name: "addition",
    nginx: &["http_addition_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&AdditionConf::KIND),
    hooks: Hooks {
        filter: Some(Ordered {
            order: 19,
            run: filter,
            active: |c| {
                let a = c.get::<AdditionConf>();
                a.before.is_some() || a.after.is_some()
            },
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
