//! `early_hints` (nginx's, of ngx_http_core_module): whether the 103 (Early
//! Hints) interim responses an upstream sends before its reply are passed
//! to the client. The proxy (`proxy_pass`, HTTP/1.x and HTTP/2 upstreams)
//! and gRPC ask [`enabled`] when a 103 comes; its fields, filtered as the
//! final reply's would be (`*_hide_header`, `*_pass_header`), go to the
//! client through its protocol ([`crate::core::request::RequestBody::early_hints`]):
//! an HTTP/2 or HTTP/3 client always, an HTTP/1 client when it spoke
//! HTTP/1.1. Otherwise a 103 is dropped.

use crate::conf::table::{Arity, Ctx, Def, MANY};
use crate::conf::values::push;
use crate::core::module::Module;
use crate::core::request::Request;
use crate::core::vars::Template;
use crate::settings;
use std::sync::Arc;

settings! {
    /// `early_hints` of one level.
    pub struct EarlyHintsConf / EarlyHintsConfSet {
        /// The conditions: 103s pass when one is neither empty nor "0".
        pub when: Arc<[Template]> = Arc::from(Vec::new()),
    }
}

/// Are an upstream's 103 responses passed to this request's client?
pub fn enabled(req: &Request<'_>) -> bool {
    let when = &req.conf.get::<EarlyHintsConf>().when;
    let mut v = Vec::new();
    when.iter().any(|t| {
        v.clear();
        t.render(req, &mut v);
        !v.is_empty() && v != b"0"
    })
}

static DIRECTIVES: &[Def] = &[Def {
    name: "early_hints",
    ignored: false,
    ctx: Ctx::HSL,
    arity: Arity::args(1, MANY),
    set: |s, d, env| {
        for a in d.arg_strs() {
            let t = Template::compile(a, &mut env.vars)
                .map_err(|m| crate::conf::ast::ConfError::new(m, &d.span))?;
            push(&mut s.loc().get_mut::<EarlyHintsConfSet>().when, t);
        }
        Ok(())
    },
    syntax: "early_hints string ...;",
    default: "—",
    doc: "When any value is neither empty nor `0`, the 103 (Early Hints) responses an upstream sends before its reply (`proxy_pass` to HTTP/1.x or HTTP/2 upstreams, `grpc_pass`) are passed to the client, with the fields the reply itself would pass (`proxy_hide_header`, `grpc_hide_header` and their `*_pass_header` apply): to HTTP/2 and HTTP/3 clients, and to HTTP/1 clients that spoke HTTP/1.1. Without it, or when every value is empty or `0`, they are dropped. Several directives at one level add to the list.\n\n```nginx\nmap $http_sec_fetch_mode $hints {\n    navigate $http2$http3;\n}\nearly_hints $hints;\n```",
}];

/// `early_hints`.
pub static MODULE: Module = Module {
    name: "early_hints",
    directives: &[DIRECTIVES],
    settings: Some(&EarlyHintsConf::KIND),
    ..Module::EMPTY
};
