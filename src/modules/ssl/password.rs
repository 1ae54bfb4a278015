//! `ssl_password_file`: encrypted private keys (PKCS#8, `BEGIN ENCRYPTED
//! PRIVATE KEY`, what OpenSSL 3 writes) opened with each pass phrase of the
//! file in turn.

use super::conf::PemFile;
use crate::conf::ast::ConfError;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The pass phrases of a password file, one per line (a FIFO is read as
/// any file).
pub fn read(f: &PemFile) -> Result<Vec<String>, ConfError> {
    let text = std::fs::read(&f.path).map_err(|e| {
        ConfError::new(
            format!(
                "cannot open \"{}\": {}",
                f.path.display(),
                crate::core::errlog::errno_text(&e)
            ),
            &f.span,
        )
    })?;
    let words: Vec<String> = String::from_utf8_lossy(&text)
        .lines()
        .map(|l| l.trim_end_matches('\r').to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    if words.is_empty() {
        return Err(ConfError::new(
            format!("empty password file \"{}\"", f.path.display()),
            &f.span,
        ));
    }
    Ok(words)
}

const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";

/// The key of an encrypted PKCS#8 PEM file, decrypted with the first pass
/// phrase that opens it; the reason otherwise.
pub fn decrypt_key(pem: &[u8], passwords: &[String]) -> Result<PrivateKeyDer<'static>, String> {
    let text = String::from_utf8_lossy(pem);
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err("a key encrypted in the legacy PEM way (Proc-Type) is not supported: convert it with \"openssl pkcs8 -topk8\"".into());
    }
    let der = encrypted_der(&text).ok_or("no PEM section of the expected kind in it")?;
    if passwords.is_empty() {
        return Err("the key is encrypted and no \"ssl_password_file\" is set".into());
    }
    let info = pkcs8::EncryptedPrivateKeyInfoRef::try_from(der.as_slice())
        .map_err(|e| format!("not a valid encrypted key ({e})"))?;
    for p in passwords {
        if let Ok(doc) = info.decrypt(p.as_bytes()) {
            return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                doc.as_bytes().to_vec(),
            )));
        }
    }
    Err("no pass phrase of \"ssl_password_file\" decrypts it".into())
}

/// The DER inside the file's `ENCRYPTED PRIVATE KEY` section.
fn encrypted_der(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let start = text.find(BEGIN)? + BEGIN.len();
    let end = start + text[start..].find(END)?;
    let b64: String = text[start..end].split_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}
