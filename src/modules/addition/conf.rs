//! Directives of the addition filter: `add_before_body`, `add_after_body`,
//! `addition_types`.

use crate::conf::ast::Directive;
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE};
use crate::conf::values::set_once;
use crate::core::mime::TypeList;
use crate::modules::compress::conf::types;
use crate::settings;
use std::sync::Arc;

settings! {
    /// Addition settings of one level: the URIs whose answers go before and
    /// after the body (`None`, or an empty string written, for none).
    pub struct AdditionConf / AdditionConfSet {
        pub before: Option<Arc<str>> = None,
        pub after: Option<Arc<str>> = None,
        pub types: Arc<TypeList> = TypeList::html(),
    }
}

/// The URI as written; an empty one turns an inherited addition off.
fn uri(d: &Directive) -> Option<Arc<str>> {
    Some(d.arg(0)).filter(|u| !u.is_empty()).map(Arc::from)
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "add_before_body",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().get_mut::<AdditionConfSet>().before, uri(d), d),
        syntax: "add_before_body uri;",
        default: "—",
        doc: "Puts the body of a subrequest to `uri` before the body of a response, as nginx's addition filter: only a main request's 200 response whose type is in `addition_types`. The subrequest runs through the server's locations (static files, proxy_pass, fastcgi_pass, `internal` ones) and its output is passed on as it comes, never held whole. The response loses its Content-Length and Accept-Ranges (a range request gets the whole response), and its ETag becomes weak. An empty `uri` turns off one inherited.\n\n```nginx\nlocation / {\n    add_before_body /header.html;\n    add_after_body /footer.html;\n}\n```",
    },
    Def {
        name: "add_after_body",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().get_mut::<AdditionConfSet>().after, uri(d), d),
        syntax: "add_after_body uri;",
        default: "—",
        doc: "Puts the body of a subrequest to `uri` after the body of a response, as `add_before_body` does before it. A body that ends early (an upstream that closed before its declared length) ends the response without it.\n\n```nginx\nlocation /docs/ {\n    proxy_pass http://backend;\n    add_after_body /footer.html;\n}\n```",
    },
    Def {
        name: "addition_types",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<AdditionConfSet>().types,
                types(d)?,
                d,
            )
        },
        syntax: "addition_types mime-type …;",
        default: "text/html",
        doc: "MIME types `add_before_body` and `add_after_body` apply to, besides `text/html` which they always do; `*` is any type.\n\n```nginx\naddition_types text/plain application/xhtml+xml;\n```",
    },
];
