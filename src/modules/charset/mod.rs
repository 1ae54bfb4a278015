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

/// `mime` with its other parameters and `; charset=NAME`.
fn with_charset(mime: &str, rest: &[&str], charset: &str) -> String {
    let mut new = mime.to_string();
    for p in rest {
        new.push_str("; ");
        new.push_str(p);
    }
    new.push_str("; charset=");
    new.push_str(charset);
    new
}

/// Is `name` a charset the configuration knows (a `charset_map`'s, a
/// built-in table's, the level's `charset` or `source_charset`)?
fn known(conf: &CharsetConf, name: &str) -> bool {
    let is = |n: &str| n.eq_ignore_ascii_case(name);
    conf.maps
        .iter()
        .chain(builtin::MAPS.iter())
        .any(|m| is(&m.from) || is(&m.to))
        || conf.source_charset.as_deref().is_some_and(is)
        || conf
            .charset
            .as_ref()
            .and_then(|t| t.literal())
            .is_some_and(|l| l.eq_ignore_ascii_case(name.as_bytes()))
}

/// The charset a response goes out in, as nginx decides it: the reply's
/// own request (`X-Accel-Charset`), else `charset` for a type in
/// `charset_types` without a charset, or with one under `override_charset`.
fn destination(
    req: &Request<'_>,
    conf: &CharsetConf,
    resp: &Response,
    mime: &str,
    had: Option<&str>,
) -> Option<String> {
    if let Some(o) = resp.override_charset().filter(|o| !o.is_empty()) {
        if known(conf, o) {
            return Some(o.to_string());
        }
        crate::error_log!(
            Error,
            "unknown charset \"{o}\" to override{}",
            req.log_context()
        );
        return None;
    }
    let t = conf.charset.as_ref()?;
    match had {
        Some(_) if !conf.override_charset => return None,
        None if !conf.types.matches(Some(mime)) => return None,
        _ => {}
    }
    let mut name = Vec::new();
    t.render(req, &mut name);
    let name = String::from_utf8_lossy(&name);
    (!name.is_empty() && name != "off").then(|| name.into_owned())
}

/// The type the response's representation has: a multipart range
/// response's parts'. `None` for a multipart one already in memory.
fn representation_type(resp: &Response) -> Option<&str> {
    let ct = match &resp.body {
        Body::Multipart { parts, .. } => parts.content_type.as_str(),
        _ => resp.content_type.as_ref()?.as_str(),
    };
    let multipart = resp.status == 206
        && ct
            .get(..20)
            .is_some_and(|m| m.eq_ignore_ascii_case("multipart/byteranges"));
    (!ct.is_empty() && !multipart).then_some(ct)
}

/// Give the representation the Content-Type `ct`: a multipart range
/// response's parts, else the response.
fn retype(resp: &mut Response, ct: String) {
    match &mut resp.body {
        Body::Multipart { parts, .. } => parts.retype(&ct),
        _ => resp.content_type = Some(Value::Owned(ct)),
    }
}

fn find(headers: &[(&'static str, Value)], name: &str) -> Option<usize> {
    headers
        .iter()
        .position(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// The response filter.
fn filter(req: &Request<'_>, resp: &mut Response) {
    let conf = req.conf.get::<CharsetConf>();
    if conf.charset.is_none() && resp.override_charset().is_none() {
        return;
    }
    let Some(ct) = representation_type(resp) else {
        return;
    };
    let (mime, rest, had) = split(ct);
    if mime.is_empty() {
        return;
    }
    let Some(name) = destination(req, conf, resp, mime, had) else {
        return;
    };
    let source = had
        .or(conf.source_charset.as_deref())
        .filter(|s| !s.eq_ignore_ascii_case(&name))
        .map(str::to_string);
    let new_ct = with_charset(mime, &rest, &name);
    let Some(source) = source else {
        retype(resp, new_ct);
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
    if resp.status == 206 && !same_length {
        // The ranges count source bytes: recoding would break them.
        crate::error_log!(
            Error,
            "range response not recoded from \"{source}\" to \"{name}\"{}",
            req.log_context()
        );
        return;
    }
    retype(resp, new_ct);
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
            // Also where only a reply's X-Accel-Charset may ask for it.
            active: |c| {
                let c = c.get::<CharsetConf>();
                c.charset.is_some() || c.source_charset.is_some() || !c.maps.is_empty()
            },
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

    #[test]
    fn content_types() {
        let p = |ct| {
            let (mime, rest, had) = split(ct);
            (with_charset(mime, &rest, "utf-8"), had.map(str::to_string))
        };
        assert_eq!(p("text/html"), ("text/html; charset=utf-8".into(), None));
        assert_eq!(
            p("application/javascript; x=1").0,
            "application/javascript; x=1; charset=utf-8"
        );
        assert_eq!(
            p("text/html; charset=\"cp1251\""),
            ("text/html; charset=utf-8".into(), Some("cp1251".into()))
        );
    }

    #[test]
    fn known_charsets() {
        let c = CharsetConf {
            source_charset: Some(Arc::from("cp866")),
            ..CharsetConf::default()
        };
        assert!(known(&c, "CP866"));
        assert!(known(&c, "koi8-r"), "a built-in table's");
        assert!(known(&c, "UTF-8"));
        assert!(!known(&c, "B"));
    }

    #[test]
    fn multipart_types() {
        let mut r = Response::new(206);
        r.content_type = Some(Value::Static("multipart/byteranges; boundary=1"));
        assert_eq!(representation_type(&r), None);
        r.status = 200;
        r.content_type = Some(Value::Static("text/html"));
        assert_eq!(representation_type(&r), Some("text/html"));
    }
}
