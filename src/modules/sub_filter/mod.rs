//! `sub_filter`, as nginx's `ngx_http_sub_module`: replaces strings in
//! response bodies as they are sent (bodies in memory at once, files and
//! streams piece by piece; see [`matcher`]). It runs before the charset and
//! compression filters (order 11), so what it changes is then recoded and
//! compressed. A response it applies to loses its Content-Length (and,
//! unless `sub_filter_last_modified`, its Last-Modified and ETag; else the
//! ETag becomes weak).

pub mod conf;
pub mod matcher;

use crate::core::message::response::{Body, Response, Value};
use crate::core::message::transform;
use crate::core::module::{Hooks, Module, Ordered};
use crate::core::request::Request;
use conf::SubFilterConf;
use matcher::Substitute;

fn has(resp: &Response, name: &str) -> bool {
    resp.headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case(name))
}

fn filter(req: &Request<'_>, resp: &mut Response) {
    let conf = req.conf.get::<SubFilterConf>();
    let Some(filters) = &conf.filters else {
        return;
    };
    // A body that cannot change: none, a range of the original (its
    // offsets count the original's bytes), or an encoded one.
    if matches!(resp.body, Body::Empty | Body::Multipart { .. })
        || resp.status == 206
        || has(resp, "content-encoding")
        || !conf
            .types
            .matches(resp.content_type.as_ref().map(Value::as_str))
    {
        return;
    }
    let Some(pairs) = filters.render(req) else {
        return;
    };
    let ac = filters.fixed.clone();
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    resp.body = transform::apply(body, Substitute::new(pairs, ac, conf.once), false);
    resp.headers
        .retain(|(n, _)| !n.eq_ignore_ascii_case("accept-ranges"));
    if conf.last_modified {
        for (n, v) in resp.headers.iter_mut() {
            if n.eq_ignore_ascii_case("etag") && v.as_str().starts_with('"') {
                *v = Value::Owned(format!("W/{}", v.as_str()));
            }
        }
    } else {
        resp.headers.retain(|(n, _)| {
            !n.eq_ignore_ascii_case("last-modified") && !n.eq_ignore_ascii_case("etag")
        });
    }
}

/// The sub_filter module: its directives and the body filter.
pub static MODULE: Module = Module {
    name: "sub_filter",
    nginx: &["http_sub_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&SubFilterConf::KIND),
    hooks: Hooks {
        filter: Some(Ordered {
            order: 11,
            run: filter,
            active: |c| c.get::<SubFilterConf>().filters.is_some(),
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
