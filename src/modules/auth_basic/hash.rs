//! Password formats of htpasswd files, as nginx checks them: `{PLAIN}`,
//! `{SHA}`, `{SSHA}` and Apache's `$apr1$` here; everything else goes to
//! the system's crypt(3) (libxcrypt on Debian: DES, `$1$`, `$2a$`/`$2b$`/
//! `$2y$` bcrypt, `$5$`, `$6$`, `$y$` yescrypt), as nginx does.
//!
//! Why these crates: crypt(3) is what nginx calls, so a file that works
//! there works here, including formats no maintained Rust crate covers
//! (traditional DES, yescrypt); the `md-5` and `sha1` crates (RustCrypto)
//! give the digests for `$apr1$` and `{SHA}`; `subtle` compares in constant
//! time. `$apr1$` is the MD5-crypt loop with Apache's magic string, which
//! libxcrypt does not know; it is written out here as in nginx and Apache.
//!
//! The slow formats (bcrypt, SHA-crypt, yescrypt) run on tokio's blocking
//! pool so a worker keeps serving other connections meanwhile, at most
//! [`CRYPT_JOBS`] at a time per worker.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use md5::{Digest, Md5};
use sha1::Sha1;
use subtle::ConstantTimeEq;

fn same(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// Does `password` match the `stored` form?
pub async fn verify(password: &[u8], stored: &[u8]) -> bool {
    if let Some(v) = verify_fast(password, stored) {
        return v;
    }
    // A flood of logins must not become a flood of threads: a few hashes
    // at a time per worker, the others wait their turn.
    let slots = CRYPT_SLOTS.with(std::rc::Rc::clone);
    let Ok(_slot) = slots.acquire().await else {
        return false;
    };
    let (p, s) = (password.to_vec(), stored.to_vec());
    tokio::task::spawn_blocking(move || verify_crypt(&p, &s))
        .await
        .unwrap_or(false)
}

/// crypt(3) hashes computed at once per worker.
const CRYPT_JOBS: usize = 2;

thread_local! {
    static CRYPT_SLOTS: std::rc::Rc<tokio::sync::Semaphore> =
        std::rc::Rc::new(tokio::sync::Semaphore::new(CRYPT_JOBS));
}

/// The formats cheap enough to check on the worker; `None` for crypt(3)'s.
pub fn verify_fast(password: &[u8], stored: &[u8]) -> Option<bool> {
    if let Some(p) = stored.strip_prefix(b"{PLAIN}") {
        return Some(same(password, p));
    }
    if let Some(h) = stored.strip_prefix(b"{SHA}") {
        let d = Sha1::digest(password);
        return Some(same(STANDARD.encode(d).as_bytes(), h));
    }
    if let Some(h) = stored.strip_prefix(b"{SSHA}") {
        let Ok(raw) = STANDARD.decode(h) else {
            return Some(false);
        };
        if raw.len() < 20 {
            return Some(false);
        }
        let (digest, salt) = raw.split_at(20);
        let mut s = Sha1::new();
        s.update(password);
        s.update(salt);
        return Some(same(&s.finalize(), digest));
    }
    if stored.starts_with(APR1) {
        return Some(same(&apr1(password, stored), stored));
    }
    None
}

/// crypt(3) of `password` with `stored` as the setting, compared to it.
pub fn verify_crypt(password: &[u8], stored: &[u8]) -> bool {
    crate::sys::crypt(password, stored).is_some_and(|h| same(&h, stored))
}

const APR1: &[u8] = b"$apr1$";
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Apache's MD5 crypt of `password` with the salt of `setting`
/// (`$apr1$salt$…`): the whole `$apr1$salt$hash` string.
pub fn apr1(password: &[u8], setting: &[u8]) -> Vec<u8> {
    let rest = &setting[APR1.len()..];
    let salt = &rest[..rest
        .iter()
        .take(8)
        .position(|&b| b == b'$')
        .unwrap_or(rest.len().min(8))];
    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(APR1);
    ctx.update(salt);
    let mut alt = Md5::new();
    alt.update(password);
    alt.update(salt);
    alt.update(password);
    let fin = alt.finalize();
    let mut n = password.len();
    while n > 0 {
        ctx.update(&fin[..n.min(16)]);
        n = n.saturating_sub(16);
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for i in 0..1000 {
        let mut c = Md5::new();
        if i & 1 == 1 {
            c.update(password);
        } else {
            c.update(fin);
        }
        if i % 3 != 0 {
            c.update(salt);
        }
        if i % 7 != 0 {
            c.update(password);
        }
        if i & 1 == 1 {
            c.update(fin);
        } else {
            c.update(password);
        }
        fin = c.finalize();
    }
    let mut out = Vec::with_capacity(37);
    out.extend_from_slice(APR1);
    out.extend_from_slice(salt);
    out.push(b'$');
    let mut to64 = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize]);
            v >>= 6;
        }
    };
    let f = |i: usize| u32::from(fin[i]);
    to64((f(0) << 16) | (f(6) << 8) | f(12), 4);
    to64((f(1) << 16) | (f(7) << 8) | f(13), 4);
    to64((f(2) << 16) | (f(8) << 8) | f(14), 4);
    to64((f(3) << 16) | (f(9) << 8) | f(15), 4);
    to64((f(4) << 16) | (f(10) << 8) | f(5), 4);
    to64(f(11), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pw: &str, stored: &str) -> bool {
        let (p, s) = (pw.as_bytes(), stored.as_bytes());
        verify_fast(p, s).unwrap_or_else(|| verify_crypt(p, s))
    }

    // Entries made with `htpasswd -nb{m,s,B,d,5,2}` and `openssl passwd`.
    #[test]
    fn formats() {
        let cases = [
            "{PLAIN}secret",
            "{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=",
            "{SSHA}Wcm1xEisNjqp921ALcHfuQ7avFdzYWx0MTIzNA==",
            "$apr1$Dcr9ljjx$G.0LVbvYEIW36Oryj06j.0",
            "$apr1$yHigzX2d$DPEJBwqVe9WCGz60u3b8l1",
            "$2y$04$OSZBnh/iJMfX07M6X2HDcumOkVFMjNzg2kqJN1q25YbFDvqEbW9ri",
            "$2y$05$ELG0bVkgGly.3kBfie.Mn./PMt8Ea8rsSdrZ1aCDj2xHFcS1wuaai",
            "JLsuiANWAOxuc",
            "$1$abcdefgh$cHJi5PXp/ki/ktXzqlk6I1",
            "$5$abcdefgh$gruCpC7VkOTspMQTTSAR8mtlO9Upms.fwqE5y16JVM.",
            "$6$abcdefgh$ltjgWl6579NluT/Vi1nwEvcil.G5Nbc4NiXZaNGStk8PSwGfQv72N2CKPPrVACtLtip/cZ/1GM/O6IND4WQhG.",
        ];
        for c in cases {
            assert!(check("secret", c), "{c}");
            assert!(!check("Secret", c), "{c}");
        }
        // Unknown or broken forms never match.
        for c in ["", "secret", "{SSHA}!!", "{SSHA}AAAA", "$9$x$y", "*"] {
            assert!(!check("secret", c), "{c}");
        }
        assert!(!check("sec\0ret", "JLsuiANWAOxuc"));
    }
}
