//! The parameters a CGI-style gateway sends its application
//! (`fastcgi_param`, `uwsgi_param`, `scgi_param`, `cgi_param`): the lists as
//! written, and one request's parameters rendered into a protocol's
//! encoding: the configured ones, then the request's headers as `HTTP_*`.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::Env;
use crate::conf::values::bad_arg;
use crate::core::request::Request;
use crate::core::vars::Template;
use std::sync::Arc;

/// One `*_param NAME VALUE [if_not_empty]`.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: Box<[u8]>,
    pub value: Template,
    pub if_not_empty: bool,
}

/// Append a `*_param` to a level's list. The list is set as a whole: a
/// level with any drops the ones it would inherit, as nginx.
pub fn push(
    list: &mut Option<Arc<Vec<Param>>>,
    d: &Directive,
    e: &mut Env,
) -> Result<(), ConfError> {
    let name = d.arg(0);
    if name.is_empty() || name.bytes().any(|b| b.is_ascii_control()) {
        return Err(bad_arg(d, name));
    }
    let value = crate::conf::values::template(d, 1, &mut e.vars)?;
    let if_not_empty = match d.args.get(2).map(|a| a.value.as_str()) {
        None => false,
        Some("if_not_empty") => true,
        Some(v) => return Err(bad_arg(d, v)),
    };
    Arc::make_mut(list.get_or_insert_with(|| Arc::new(Vec::new()))).push(Param {
        name: name.as_bytes().into(),
        value,
        if_not_empty,
    });
    Ok(())
}

/// Where a protocol encodes the parameters.
pub trait Sink {
    fn add(&mut self, name: &[u8], value: &[u8]);
}

/// One request's parameters into `out`: the configured `params` (a
/// `CONTENT_LENGTH` among them gets `body_len` when the body was read whole
/// to learn it, and is added when none is configured), then with
/// `pass_headers` the request's headers as `HTTP_*`, a repeated one once
/// with its values joined (not those a param already sets, not names with
/// `_`, which would alias ones with `-`, and never `Proxy`: httpoxy). `check` sees each configured value and may
/// refuse the request with a status.
pub fn render(
    req: &Request<'_>,
    params: &[Param],
    pass_headers: bool,
    body_len: Option<u64>,
    out: &mut dyn Sink,
    check: fn(&[u8], &[u8]) -> Result<(), u16>,
) -> Result<(), u16> {
    let mut v = Vec::with_capacity(256);
    let mut sent_len = false;
    for param in params {
        v.clear();
        if &*param.name == b"CONTENT_LENGTH"
            && let Some(n) = body_len
        {
            v.extend_from_slice(n.to_string().as_bytes());
            sent_len = true;
        } else {
            param.value.render(req, &mut v);
        }
        if param.if_not_empty && v.is_empty() {
            continue;
        }
        check(&param.name, &v)?;
        out.add(&param.name, &v);
    }
    if !sent_len && let Some(n) = body_len {
        out.add(b"CONTENT_LENGTH", n.to_string().as_bytes());
    }
    for (name, value) in crate::modules::cache::revalidation(req) {
        let name = format!("HTTP_{}", name.to_ascii_uppercase().replace('-', "_"));
        out.add(name.as_bytes(), value.as_bytes());
    }
    if pass_headers {
        let mut name = Vec::with_capacity(64);
        let mut joined = Vec::new();
        let headers = || req.head.headers();
        for (i, (n, val)) in headers().enumerate() {
            if n.contains(&b'_')
                || n.eq_ignore_ascii_case(b"proxy")
                || crate::modules::cache::drops_header(req, n)
                || headers().take(i).any(|(m, _)| m.eq_ignore_ascii_case(n))
            {
                continue;
            }
            name.clear();
            name.extend_from_slice(b"HTTP_");
            name.extend(n.iter().map(|&b| {
                if b == b'-' {
                    b'_'
                } else {
                    b.to_ascii_uppercase()
                }
            }));
            if params.iter().any(|q| *q.name == *name) {
                continue;
            }
            // A repeated header is one parameter, its values joined as
            // nginx joins them (`; ` for cookies).
            let mut more = headers()
                .skip(i + 1)
                .filter(|(m, _)| m.eq_ignore_ascii_case(n))
                .peekable();
            if more.peek().is_none() {
                out.add(&name, val);
                continue;
            }
            let sep: &[u8] = if n.eq_ignore_ascii_case(b"cookie") {
                b"; "
            } else {
                b", "
            };
            joined.clear();
            joined.extend_from_slice(val);
            for (_, v) in more {
                joined.extend_from_slice(sep);
                joined.extend_from_slice(v);
            }
            out.add(&name, &joined);
        }
    }
    Ok(())
}
