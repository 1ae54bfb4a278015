//! Directives of subrequest authorization: `auth_request`,
//! `auth_request_set`.

use crate::conf::table::{Arity, Ctx, Def, ONE};
use crate::conf::values::set_once;
use crate::core::vars::Template;
use crate::modules::rewrite::script::SetTarget;
use crate::settings;
use std::sync::Arc;

/// One `auth_request_set $variable value`.
#[derive(Debug)]
pub struct SetVar {
    pub target: SetTarget,
    /// Rendered in the subrequest's context once it is done.
    pub value: Template,
}

settings! {
    /// Subrequest-authorization settings of one level. `auth_request_set`
    /// is one list set as a whole: a level with any drops the inherited
    /// ones.
    pub struct AuthRequestConf / AuthRequestConfSet {
        /// The subrequest's URI (with its arguments); `None` is `off`.
        pub uri: Option<Arc<[u8]>> = None,
        pub set: Arc<[Arc<SetVar>]> = Arc::from(Vec::new()),
    }
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "auth_request",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0) {
                "off" => None,
                uri => Some(Arc::from(uri.as_bytes())),
            };
            set_once(&mut s.loc().get_mut::<AuthRequestConfSet>().uri, v, d)
        },
        syntax: "auth_request uri | off;",
        default: "off",
        doc: "Authorizes each request by a subrequest to `uri` (a location of this server, `internal` ones included) before the content handler runs, in the access phase. The subrequest is a GET with the request's headers and no body; its answer decides: 2xx lets the request through, 401 refuses it with 401 and the subrequest's `WWW-Authenticate` fields, 403 refuses it with 403, any other status is a 500 (logged as `auth request unexpected status`). The subrequest's own body is read and dropped. How it combines with `allow`/`deny` and `auth_basic` is `satisfy`'s business. `off` cancels an inherited `auth_request`.\n\n```nginx\nlocation /private/ {\n    auth_request /auth;\n}\nlocation = /auth {\n    internal;\n    proxy_pass http://127.0.0.1:9000/check;\n    proxy_pass_request_body off;\n    proxy_set_header Content-Length \"\";\n    proxy_set_header X-Original-URI $request_uri;\n}\n```",
    },
    Def {
        name: "auth_request_set",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(2, 2),
        set: |s, d, e| {
            let target = crate::modules::rewrite::conf::set_target(s, d, &mut e.vars)?;
            let value = crate::conf::values::template(d, 1, &mut e.vars)?;
            crate::conf::values::push(
                &mut s.loc().get_mut::<AuthRequestConfSet>().set,
                Arc::new(SetVar { target, value }),
            );
            Ok(())
        },
        syntax: "auth_request_set $variable value;",
        default: "—",
        doc: "Once the `auth_request` subrequest is done, sets the variable to the value, which is evaluated in the subrequest's context: `$upstream_http_*` are the headers of the reply its upstream gave, `$sent_http_*` those of its answer, `$upstream_status` its upstream's status. The variable keeps its value through internal redirects and error pages, and is empty where it was never set. `$args` and `$limit_rate` take the value as `set` gives it to them. A level with any `auth_request_set` drops the inherited ones.\n\n```nginx\nauth_request /auth;\nauth_request_set $user $upstream_http_x_user;\nproxy_set_header X-User $user;\n```",
    },
];
