//! Directives of access control: `allow`, `deny`, `satisfy`.

use super::cidr::Cidr;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Ctx, Def, Env, ONE, Scope};
use crate::conf::values::set_once;
use crate::settings;
use std::sync::Arc;

/// Who a rule is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    All,
    Net(Cidr),
}

/// One `allow` or `deny`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub who: Who,
    pub deny: bool,
}

/// `satisfy all | any`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Satisfy {
    All,
    Any,
}

settings! {
    /// Access settings of one level. The rules are one list set as a whole:
    /// a level with any `allow`/`deny` drops the inherited ones.
    pub struct AccessConf / AccessConfSet {
        pub rules: Arc<[Rule]> = Arc::from(Vec::new()),
        pub satisfy: Satisfy = Satisfy::All,
    }
}

/// A network argument; a network with bits set outside its mask is taken
/// masked, with nginx's warning.
pub fn parse_net(d: &Directive, env: &mut Env) -> Result<Cidr, ConfError> {
    let (c, low) = Cidr::parse(d.arg(0)).map_err(|e| ConfError::new(e, &d.span))?;
    if low {
        env.notices.push(format!(
            "low address bits of {} are meaningless in {}",
            d.arg(0),
            d.span
        ));
    }
    Ok(c)
}

fn add_rule(s: &mut Scope<'_>, d: &Directive, env: &mut Env, deny: bool) -> Result<(), ConfError> {
    let who = if d.arg(0) == "all" {
        Who::All
    } else {
        Who::Net(parse_net(d, env)?)
    };
    crate::conf::values::push(
        &mut s.loc().get_mut::<AccessConfSet>().rules,
        Rule { who, deny },
    );
    Ok(())
}

/// The doc `allow` and `deny` share (a macro, so each can `concat!` its own example).
macro_rules! rule_doc {
    () => {
        "Rules are checked in the order written, `allow` and `deny` together; the first that matches the client address decides, and a client no rule matches is allowed. The argument is an address (`192.168.1.1`, `2001:db8::1`), a network (`10.0.0.0/8`, `2001:db8::/32`), `unix:` (clients on a unix socket) or `all`. A rule only concerns clients of its family (an IPv4 network never matches an IPv6 client; `all` matches every client). A level with any `allow`/`deny` replaces all the rules it would inherit. The address is the one realip set, when it did. A denied request gets 403 and the error log line `access forbidden by rule`."
    };
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "allow",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::LIMIT_EXCEPT).or(Ctx::SS),
        arity: ONE,
        set: |s, d, env| add_rule(s, d, env, false),
        syntax: "allow address | CIDR | unix: | all;",
        default: "—",
        doc: concat!(
            rule_doc!(),
            "\n\n```nginx\nlocation /admin/ {\n    allow 192.168.1.0/24;\n    allow 2001:db8::/32;\n    deny all;\n}\n```"
        ),
    },
    Def {
        name: "deny",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::LIMIT_EXCEPT).or(Ctx::SS),
        arity: ONE,
        set: |s, d, env| add_rule(s, d, env, true),
        syntax: "deny address | CIDR | unix: | all;",
        default: "—",
        doc: concat!(
            rule_doc!(),
            "\n\n```nginx\ndeny 192.168.1.1;\nallow 192.168.1.0/24;\ndeny all;\n```"
        ),
    },
    Def {
        name: "satisfy",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0) {
                "all" => Satisfy::All,
                "any" => Satisfy::Any,
                v => {
                    return Err(ConfError::new(
                        format!(
                            "invalid value \"{v}\" in \"satisfy\" directive, it must be \"all\" or \"any\""
                        ),
                        &d.span,
                    ));
                }
            };
            set_once(&mut s.loc().get_mut::<AccessConfSet>().satisfy, v, d)
        },
        syntax: "satisfy all | any;",
        default: "all",
        doc: "How `allow`/`deny`, `auth_basic` and `auth_request` combine (checked in that order): with `all` the request needs every one of them that has something to check to let it through; with `any` one is enough. When none lets it through under `any`, an authentication failure (401 with the `WWW-Authenticate` challenge) wins over a denial by address (403), as in nginx.\n\n```nginx\nlocation /private/ {\n    satisfy any;\n    allow 10.0.0.0/8;\n    deny all;\n    auth_basic \"Staff\";\n    auth_basic_user_file conf/htpasswd;\n}\n```",
    },
];
