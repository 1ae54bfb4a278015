//! Directives of secure links: `secure_link`, `secure_link_md5`,
//! `secure_link_secret`.

use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::set_once;
use crate::core::module::{Settings, SettingsKind, SettingsSet, Slot};
use crate::core::vars::Template;
use std::sync::Arc;

/// Secure-link settings of one level, resolved.
#[derive(Clone, Debug, Default)]
pub struct SecureLinkConf {
    /// `secure_link`: the hash, then optionally `,` and the expiry time.
    pub variable: Option<Arc<Template>>,
    /// `secure_link_md5`: the text whose MD5 the hash must be.
    pub md5: Option<Arc<Template>>,
    /// `secure_link_secret`: the old style, the hash in the URI.
    pub secret: Option<Arc<[u8]>>,
}

/// Secure-link settings as written at one level.
#[derive(Clone, Debug, Default)]
pub struct SecureLinkConfSet {
    pub variable: Option<Arc<Template>>,
    pub md5: Option<Arc<Template>>,
    pub secret: Option<Arc<[u8]>>,
}

impl Settings for SecureLinkConf {
    fn slot() -> &'static Slot {
        static SLOT: Slot = Slot::new();
        &SLOT
    }
}

impl SecureLinkConfSet {
    /// nginx's merge: a level with `secure_link_secret` uses the old style
    /// only; otherwise `secure_link` and `secure_link_md5` inherit each on
    /// its own, and the secret only when neither is set here or above.
    pub fn resolve(&self, parent: &SecureLinkConf) -> SecureLinkConf {
        if let Some(secret) = &self.secret {
            return SecureLinkConf {
                secret: Some(secret.clone()),
                ..Default::default()
            };
        }
        let variable = self.variable.clone().or_else(|| parent.variable.clone());
        let md5 = self.md5.clone().or_else(|| parent.md5.clone());
        let secret = match (&variable, &md5) {
            (None, None) => parent.secret.clone(),
            _ => None,
        };
        SecureLinkConf {
            variable,
            md5,
            secret,
        }
    }
}

impl SettingsSet for SecureLinkConfSet {
    type Resolved = SecureLinkConf;
    fn resolve(&self, parent: &SecureLinkConf) -> SecureLinkConf {
        SecureLinkConfSet::resolve(self, parent)
    }
}

impl SecureLinkConf {
    pub const KIND: SettingsKind = SettingsKind::of::<SecureLinkConf>();
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "secure_link",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let t = Arc::new(crate::conf::values::template(d, 0, &mut e.vars)?);
            set_once(&mut s.loc().get_mut::<SecureLinkConfSet>().variable, t, d)
        },
        syntax: "secure_link expression;",
        default: "—",
        doc: "The hash a link carries, and optionally after a comma its expiry time (Unix seconds): `$secure_link` is `1` when the hash, base64url-encoded (padding optional), is the MD5 of `secure_link_md5`'s text, `0` when it is and the time has passed, and empty otherwise (also for an expiry time that is not a positive number). `$secure_link_expires` is the time as given.\n\n```nginx\nlocation /s/ {\n    secure_link $arg_md5,$arg_expires;\n    secure_link_md5 \"$secure_link_expires$uri$remote_addr secret\";\n    if ($secure_link = \"\") { return 403; }\n    if ($secure_link = \"0\") { return 410; }\n}\n```",
    },
    Def {
        name: "secure_link_md5",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let t = Arc::new(crate::conf::values::template(d, 0, &mut e.vars)?);
            set_once(&mut s.loc().get_mut::<SecureLinkConfSet>().md5, t, d)
        },
        syntax: "secure_link_md5 expression;",
        default: "—",
        doc: "The text whose MD5 a `secure_link` hash must be; usually a secret with the URI, the expiry time and the client's address.\n\n```nginx\nsecure_link_md5 \"$secure_link_expires$uri secret\";\n```",
    },
    Def {
        name: "secure_link_secret",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v: Arc<[u8]> = Arc::from(d.arg(0).as_bytes());
            set_once(&mut s.loc().get_mut::<SecureLinkConfSet>().secret, v, d)
        },
        syntax: "secure_link_secret word;",
        default: "—",
        doc: "The old style: a link is `/prefix/HASH/link`, where HASH is the MD5, in 32 hex digits, of `link` followed by `word` (the request URI as sent, arguments included). `$secure_link` is then `link` when the hash matches, else empty. A level with `secure_link_secret` ignores inherited `secure_link` and `secure_link_md5`, and inherits the secret only when it has neither.\n\n```nginx\nlocation /p/ {\n    secure_link_secret secret;\n    if ($secure_link = \"\") { return 403; }\n    rewrite ^ /files/$secure_link break;\n}\n```",
    },
];
