//! Directives of basic authentication: `auth_basic`, `auth_basic_user_file`.

use crate::conf::ast::ConfError;
use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::set_once;
use crate::core::vars::Template;
use crate::settings;

settings! {
    /// Basic-authentication settings of one level.
    pub struct AuthBasicConf / AuthBasicConfSet {
        /// The realm; `None` is `off`.
        pub realm: Option<Template> = None,
        pub user_file: Option<Template> = None,
    }
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "auth_basic",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::LIMIT_EXCEPT),
        arity: ONE,
        set: |s, d, e| {
            let v = if d.arg(0) == "off" {
                None
            } else {
                Some(crate::conf::values::template(d, 0, &mut e.vars)?)
            };
            set_once(&mut s.loc().get_mut::<AuthBasicConfSet>().realm, v, d)
        },
        syntax: "auth_basic string | off;",
        default: "off",
        doc: "Asks for a user name and password (HTTP basic authentication) checked against `auth_basic_user_file`; the string is the realm sent in `WWW-Authenticate: Basic realm=\"…\"` and may hold variables. A request without credentials, or with a wrong user or password, gets 401 with that challenge; one that passes sets `$remote_user`. `off` cancels an inherited `auth_basic`. How it combines with `allow`/`deny` is `satisfy`'s business.\n\n```nginx\nauth_basic \"Restricted area\";\nauth_basic_user_file conf/htpasswd;\n```",
    },
    Def {
        name: "auth_basic_user_file",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::LIMIT_EXCEPT),
        arity: ONE,
        set: |s, d, env| {
            let path = env.path(d.arg(0));
            let t = Template::compile(&path.to_string_lossy(), &mut env.vars)
                .map_err(|e| ConfError::new(e, &d.span))?;
            set_once(
                &mut s.loc().get_mut::<AuthBasicConfSet>().user_file,
                Some(t),
                d,
            )
        },
        syntax: "auth_basic_user_file file;",
        default: "—",
        doc: "The password file, in Apache's htpasswd format: `user:password[:comment]` lines, `#` comments; the first line with the user's name counts. Passwords may be bcrypt (`$2y$`, `$2a$`, `$2b$`), Apache MD5 (`$apr1$`), `{SHA}`, `{SSHA}`, `{PLAIN}`, or anything the system's crypt(3) knows (DES, `$1$` MD5, `$5$` SHA-256, `$6$` SHA-512, `$y$` yescrypt); `htpasswd -B` or `openssl passwd -6` make them. A relative path is taken from the prefix; the path may hold variables. The file is read again when it changes. A file that does not exist gives 403, one that cannot be read 500, both logged.\n\n```nginx\nauth_basic_user_file /etc/vireo/htpasswd;\n```",
    },
];
