//! The charset filter, as nginx's `ngx_http_charset_filter_module`: adds
//! `; charset=NAME` to the Content-Type of text responses (`charset`,
//! `charset_types`, `override_charset`) and recodes bodies between charsets
//! linked by a `charset_map` (`source_charset`), piece by piece: bodies in
//! memory at once, files and streams as they are sent. It runs before
//! compression (order 12), so compressed bodies are recoded first.

pub mod builtin;
pub mod conf;
pub mod recode;

use crate::conf::ast::ConfError;
use crate::conf::model::LocConf;
use crate::core::message::response::{Body, Response, Value};
use crate::core::message::transform;
use crate::core::module::{Hooks, ListenBuild, Module, Ordered};
use crate::core::request::Request;
use crate::core::route::Locations;
use conf::CharsetConf;
use recode::Recoder;

/// The MIME type of a Content-Type, its parameters but `charset`, and its
/// charset.
fn split(ct: &str) -> (&str, Vec<&str>, Option<&str>) {
    let mut parts = ct.split(';');
    let mime = parts.next().unwrap_or_default().trim();
    let mut rest = Vec::new();
    let mut charset = None;
    for p in parts {
        let p = p.trim();
        match p.split_once('=') {
            Some((k, v)) if k.trim().eq_ignore_ascii_case("charset") => {
                charset = Some(v.trim().trim_matches('"'));
            }
            _ if p.is_empty() => {}
            _ => rest.push(p),
        }
    }
    (mime, rest, charset)
}

/// What the filter does to a response: its new Content-Type, and the
/// charsets to recode from and to when they differ.
fn plan(conf: &CharsetConf, ct: &str, charset: &str) -> Option<(String, Option<String>)> {
    let (mime, rest, had) = split(ct);
    if mime.is_empty() {
        return None;
    }
    let source = match had {
        Some(_) if !conf.override_charset => return None,
        Some(h) => Some(h.to_string()),
        None if !conf.types.matches(Some(mime)) => return None,
        None => conf.source_charset.as_deref().map(str::to_string),
    };
    let mut new = mime.to_string();
    for p in rest {
        new.push_str("; ");
        new.push_str(p);
    }
    new.push_str("; charset=");
    new.push_str(charset);
    let source = source.filter(|s| !s.eq_ignore_ascii_case(charset));
    Some((new, source))
}

fn find(headers: &[(&'static str, Value)], name: &str) -> Option<usize> {
    headers
        .iter()
        .position(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// The response filter.
fn filter(req: &Request<'_>, resp: &mut Response) {
    let conf = req.conf.get::<CharsetConf>();
    let Some(t) = &conf.charset else {
        return;
    };
    let Some(ct) = resp.content_type.as_ref().map(Value::as_str) else {
        return;
    };
    let mut name = Vec::new();
    t.render(req, &mut name);
    let name = String::from_utf8_lossy(&name);
    if name.is_empty() || name == "off" {
        return;
    }
    let Some((new_ct, source)) = plan(conf, ct, &name) else {
        return;
    };
    let Some(source) = source else {
        resp.content_type = Some(Value::Owned(new_ct));
        return;
    };
    if find(&resp.headers, "content-encoding").is_some() {
        // Encoded (gzip_static, an upstream's gzip): it cannot be recoded,
        // and is left without a charset, as nginx does.
        return;
    }
    let Some(rec) = Recoder::new(conf.maps.clone(), &source, &name) else {
        crate::error_log!(
            Error,
            "no \"charset_map\" between the charsets \"{source}\" and \"{name}\"{}",
            req.log_context()
        );
        return;
    };
    let same_length = rec.table().same_length();
    if matches!(resp.body, Body::Multipart { .. }) || (resp.status == 206 && !same_length) {
        // The parts' ranges count source bytes: recoding would break them.
        crate::error_log!(
            Error,
            "range response not recoded from \"{source}\" to \"{name}\"{}",
            req.log_context()
        );
        return;
    }
    resp.content_type = Some(Value::Owned(new_ct));
    recode(rec, resp, same_length);
}

/// Swap the body for its recoded form.
fn recode(rec: Recoder, resp: &mut Response, same_length: bool) {
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    resp.body = transform::apply(body, rec, same_length);
    if !same_length && let Some(i) = find(&resp.headers, "accept-ranges") {
        resp.headers.remove(i);
    }
    if let Some(i) = find(&resp.headers, "etag") {
        let v = resp.headers[i].1.as_str();
        if v.starts_with('"') {
            resp.headers[i].1 = Value::Owned(format!("W/{v}"));
        }
    }
}

/// The load's check, as nginx's: a fixed `charset` and `source_charset`
/// must be linked by a map.
fn check(conf: &LocConf) -> Result<(), ConfError> {
    let c = conf.get::<CharsetConf>();
    let (Some(t), Some(src), Some(at)) = (&c.charset, &c.source_charset, &c.source_at) else {
        return Ok(());
    };
    let Some(name) = t.literal().map(String::from_utf8_lossy) else {
        return Ok(());
    };
    if src.eq_ignore_ascii_case(&name) || Recoder::new(c.maps.clone(), src, &name).is_some() {
        return Ok(());
    }
    Err(ConfError::new(
        format!("no \"charset_map\" between the charsets \"{src}\" and \"{name}\""),
        at,
    ))
}

fn check_locations(locs: &Locations) -> Result<(), ConfError> {
    for l in locs.iter() {
        check(&l.conf)?;
        check_locations(&l.nested)?;
    }
    Ok(())
}

fn check_listen(lb: &ListenBuild<'_>) -> Result<(), ConfError> {
    for s in lb.servers {
        check(&s.conf)?;
        check_locations(&s.locations)?;
        for l in s.named.values() {
            check(&l.conf)?;
        }
    }
    Ok(())
}

/// The charset filter: its directives and the response filter.
pub static MODULE: Module = Module {
    name: "charset",
    nginx_default: &["http_charset_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&CharsetConf::KIND),
    hooks: Hooks {
        filter: Some(Ordered {
            order: 12,
            run: filter,
            active: |c| c.get::<CharsetConf>().charset.is_some(),
        }),
        listen: Some(check_listen),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn conf(over: bool, source: Option<&str>) -> CharsetConf {
        CharsetConf {
            override_charset: over,
            source_charset: source.map(Arc::from),
            ..CharsetConf::default()
        }
    }

    #[test]
    fn content_types() {
        let c = conf(false, None);
        let p = |ct| plan(&c, ct, "utf-8").map(|p| p.0);
        assert_eq!(p("text/html").as_deref(), Some("text/html; charset=utf-8"));
        assert_eq!(
            p("TEXT/plain").as_deref(),
            Some("TEXT/plain; charset=utf-8")
        );
        assert_eq!(
            p("application/javascript; x=1").as_deref(),
            Some("application/javascript; x=1; charset=utf-8")
        );
        assert_eq!(p("image/png"), None);
        assert_eq!(p("text/html; charset=koi8-r"), None);
        let c = conf(true, Some("koi8-r"));
        assert_eq!(
            plan(&c, "text/html; charset=\"cp1251\"", "utf-8"),
            Some(("text/html; charset=utf-8".into(), Some("cp1251".into())))
        );
        assert_eq!(
            plan(&c, "text/html", "utf-8"),
            Some(("text/html; charset=utf-8".into(), Some("koi8-r".into())))
        );
        assert_eq!(
            plan(&c, "text/html", "KOI8-R"),
            Some(("text/html; charset=KOI8-R".into(), None))
        );
    }
}
