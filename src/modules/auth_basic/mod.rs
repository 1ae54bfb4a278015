//! HTTP basic authentication (nginx's ngx_http_auth_basic_module):
//! `auth_basic` and `auth_basic_user_file`, run in the access phase by
//! [`super::access::phase`] as `satisfy` says.
//!
//! As nginx, a request without usable credentials (no `Authorization:
//! Basic`, bad base64, no `:`, an empty user name) gets 401 with
//! `WWW-Authenticate: Basic realm="…"` before the user file is looked at;
//! then a user file that does not exist gives 403 and one that cannot be
//! read 500, each with nginx's error log line; an unknown user or a wrong
//! password gives 401. The user file is looked up per request (its path may
//! hold variables) and its parsed form cached per worker until its size,
//! inode or modification time change ([`users`]); password formats are in
//! [`hash`].

pub mod conf;
pub mod hash;
pub mod users;

use crate::core::message::head::RequestHead;
use crate::core::message::response::{Response, Value};
use crate::core::module::{Module, VarDef};
use crate::core::request::Request;
use base64::Engine;
use conf::AuthBasicConf;
use std::io::ErrorKind;

/// What basic authentication decided.
pub enum Auth {
    /// Not configured here (or `auth_basic off`).
    Declined,
    Granted,
    /// 401 (with the challenge) or 403 (no user file): `satisfy any` may
    /// still let the request through.
    Refused(Response),
    /// 500: the request ends here whatever `satisfy` says.
    Failed(Response),
}

/// Credentials of an `Authorization: Basic` header: `user:password`
/// decoded.
pub struct Credentials {
    decoded: Vec<u8>,
    colon: usize,
}

impl Credentials {
    pub fn user(&self) -> &[u8] {
        &self.decoded[..self.colon]
    }
    pub fn password(&self) -> &[u8] {
        &self.decoded[self.colon + 1..]
    }
}

/// Base64 as nginx decodes it: padding optional, stray low bits ignored.
const LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// The credentials a request sends (also `$remote_user`): `None` without
/// an `Authorization: Basic` header, with bad base64, without `:` or with
/// an empty user name.
pub fn credentials(head: &RequestHead) -> Option<Credentials> {
    let v = head.header("authorization")?;
    if v.len() < 6 || !v[..6].eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let enc = v[6..].trim_ascii_start();
    let decoded = LENIENT.decode(enc).ok()?;
    let colon = memchr::memchr(b':', &decoded).filter(|&i| i > 0)?;
    Some(Credentials { decoded, colon })
}

/// 401 with the challenge for `realm`.
fn challenge(req: &Request<'_>, realm: Vec<u8>) -> Auth {
    let mut r = req.error(401);
    let mut v = String::from("Basic realm=\"");
    v.push_str(&String::from_utf8_lossy(&realm));
    v.push('"');
    r.headers.push(("WWW-Authenticate", Value::Owned(v)));
    Auth::Refused(r)
}

/// Check the request's credentials against the location's user file.
pub async fn check(req: &Request<'_>) -> Auth {
    let conf = req.conf.get::<AuthBasicConf>();
    let (Some(realm_t), Some(file_t)) = (&conf.realm, &conf.user_file) else {
        return Auth::Declined;
    };
    let mut realm = Vec::new();
    realm_t.render(req, &mut realm);
    let Some(cred) = credentials(req.head) else {
        crate::error_log!(
            Info,
            "no user/password was provided for basic authentication{}",
            req.log_context()
        );
        return challenge(req, realm);
    };
    let mut path = Vec::new();
    file_t.render(req, &mut path);
    let path = std::path::PathBuf::from(
        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(path),
    );
    let file = match users::load(&path) {
        Ok(f) => f,
        Err((op, e)) => {
            let missing = e.kind() == ErrorKind::NotFound;
            let text = format!(
                "{op}() \"{}\" failed ({}){}",
                path.display(),
                crate::core::errlog::errno_text(&e),
                req.log_context()
            );
            return if missing {
                crate::error_log!(Error, "{text}");
                Auth::Refused(req.error(403))
            } else {
                crate::error_log!(Crit, "{text}");
                Auth::Failed(req.error(500))
            };
        }
    };
    let user = String::from_utf8_lossy(cred.user()).into_owned();
    let Some(stored) = file.find(cred.user()) else {
        crate::error_log!(
            Error,
            "user \"{user}\" was not found in \"{}\"{}",
            path.display(),
            req.log_context()
        );
        return challenge(req, realm);
    };
    if hash::verify(cred.password(), stored).await {
        return Auth::Granted;
    }
    crate::error_log!(
        Error,
        "user \"{user}\": password mismatch{}",
        req.log_context()
    );
    challenge(req, realm)
}

/// `auth_basic` and `auth_basic_user_file` (checked by the access module's
/// hook, which `satisfy` combines with allow/deny), and `$remote_user`.
pub static MODULE: Module = Module {
    name: "auth_basic",
    nginx_default: &["http_auth_basic_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::AuthBasicConf::KIND),
    variables: &[VarDef::name("remote_user", |req, _, out| {
        if let Some(c) = credentials(req.head) {
            out.extend_from_slice(c.user());
        }
    })],
    ..Module::EMPTY
};
