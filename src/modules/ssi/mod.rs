//! The SSI filter, as nginx's `ngx_http_ssi_filter_module`: a response
//! whose type is in `ssi_types` is parsed for `<!--#command … -->` as its
//! body streams out ([`parse`]), and each command is run in document order
//! ([`stream`]): `include` makes a subrequest
//! ([`crate::core::subrequest`]) whose body takes the command's place, or
//! whose body becomes a variable (`set=`); `echo`, `set`, `if`/`elif`/
//! `else`/`endif`, `config`, `block`/`endblock` as nginx. SSI variables
//! (`set`, `include … set=`, named regex captures) belong to the main
//! request and are seen by every document of its includes.
//!
//! `$date_local` and `$date_gmt` use the document's `config timefmt`.

pub mod conf;
pub mod parse;
pub mod stream;

use crate::core::message::response::{Body, Response, Value};
use crate::core::module::{Hooks, Module, Ordered, VarDef};
use crate::core::request::Request;
use conf::SsiConf;

/// nginx's default `timefmt`.
pub const DEFAULT_TIMEFMT: &str = "%A, %d-%b-%Y %H:%M:%S %Z";

/// The `config timefmt` of the document whose commands are being run.
#[derive(Debug)]
pub struct TimeFmt(pub String);

fn find(headers: &[(&'static str, Value)], name: &str) -> Option<usize> {
    headers
        .iter()
        .position(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// The filter: a response to process gets an SSI body stream.
fn filter(req: &Request<'_>, resp: &mut Response) {
    let c = req.conf.get::<SsiConf>();
    if c.ssi && resp.status == 206 {
        crate::modules::static_files::range::whole_file(resp);
    }
    if !c.ssi
        || matches!(resp.status, 101 | 204 | 206 | 304)
        || matches!(resp.body, Body::Empty | Body::Multipart { .. })
        || resp.body.size() == Some(0)
        || !c
            .types
            .matches(resp.content_type.as_ref().map(Value::as_str))
    {
        return;
    }
    if !req.is_subrequest() {
        for h in ["accept-ranges", "content-length"] {
            while let Some(i) = find(&resp.headers, h) {
                resp.headers.remove(i);
            }
        }
        if c.last_modified {
            if let Some(i) = find(&resp.headers, "etag") {
                let v = resp.headers[i].1.as_str();
                if v.starts_with('"') {
                    resp.headers[i].1 = Value::Owned(format!("W/{v}"));
                }
            }
        } else {
            for h in ["last-modified", "etag"] {
                while let Some(i) = find(&resp.headers, h) {
                    resp.headers.remove(i);
                }
            }
        }
    }
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    let Some(src) = body.into_stream() else {
        return;
    };
    resp.body = Body::Stream {
        stream: Box::new(stream::Ssi::new(req, c, src)),
        len: None,
    };
}

/// `$date_local`, `$date_gmt`: now, in the document's `timefmt`.
fn date(req: &Request<'_>, gmt: bool, out: &mut Vec<u8>) {
    let fmt = req.state.ext.get::<TimeFmt>();
    let fmt = fmt.as_ref().map_or(DEFAULT_TIMEFMT, |f| f.0.as_str());
    out.extend_from_slice(format_time(fmt, gmt).as_bytes());
}

/// strftime(3) of now, in UTC (`%Z` is `GMT`, as nginx) or local time.
pub fn format_time(fmt: &str, gmt: bool) -> String {
    use chrono::format::{Item, StrftimeItems};
    use std::fmt::Write;
    let fmt = match gmt {
        true => fmt.replace("%Z", "GMT"),
        false => fmt.to_string(),
    };
    if StrftimeItems::new(&fmt).any(|i| matches!(i, Item::Error)) {
        return String::new();
    }
    let mut s = String::new();
    let ok = match gmt {
        true => write!(s, "{}", chrono::Utc::now().format(&fmt)),
        false => write!(s, "{}", chrono::Local::now().format(&fmt)),
    };
    if ok.is_err() {
        s.clear();
    }
    s
}

/// The SSI filter, its directives and variables.
pub static MODULE: Module = Module {
    name: "ssi",
    nginx_default: &["http_ssi_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&SsiConf::KIND),
    variables: &[
        VarDef::name("date_local", |r, _, out| date(r, false, out)),
        VarDef::name("date_gmt", |r, _, out| date(r, true, out)),
    ],
    hooks: Hooks {
        filter: Some(Ordered {
            order: 18,
            run: filter,
            active: |c| c.get::<SsiConf>().ssi,
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    #[test]
    fn time_formats_as_strftime() {
        let s = super::format_time("%Y|%Z", true);
        assert!(s.ends_with("|GMT") && s.len() == 8, "{s}");
        // A format chrono cannot read gives nothing rather than a panic.
        assert_eq!(super::format_time("%Q%", true), "");
    }
}
