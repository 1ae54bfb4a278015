//! `ssl_session_ticket_key`: session tickets sealed with keys read from
//! files, so servers sharing the files (or a restarted one) resume each
//! other's sessions. A file holds 48 or 80 bytes as nginx's: a 16-byte key
//! name, then the secret (32 or 64 bytes), from which an AES-256-GCM key is
//! derived. A ticket is the key name, a random nonce and the sealed session;
//! the first key seals, every key opens the tickets that name it.

use super::conf::PemFile;
use crate::conf::ast::ConfError;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

const NAME_LEN: usize = 16;

pub struct TicketKeys {
    keys: Vec<([u8; NAME_LEN], LessSafeKey)>,
    lifetime: u32,
    rng: SystemRandom,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketKeys")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl TicketKeys {
    /// The keys of the files, in order; `lifetime` is what clients are told
    /// a ticket lasts (seconds).
    pub fn load(files: &[PemFile], lifetime: u32) -> Result<TicketKeys, ConfError> {
        let mut keys = Vec::new();
        for f in files {
            let data = std::fs::read(&f.path).map_err(|e| {
                ConfError::new(
                    format!(
                        "cannot read \"{}\": {}",
                        f.path.display(),
                        crate::core::errlog::errno_text(&e)
                    ),
                    &f.span,
                )
            })?;
            keys.push(key_of(&data).ok_or_else(|| {
                ConfError::new(
                    format!("\"{}\" must be 80 or 48 bytes", f.path.display()),
                    &f.span,
                )
            })?);
        }
        Ok(TicketKeys {
            keys,
            lifetime,
            rng: SystemRandom::new(),
        })
    }
}

/// A key file's name and sealing key.
fn key_of(data: &[u8]) -> Option<([u8; NAME_LEN], LessSafeKey)> {
    if data.len() != 80 && data.len() != 48 {
        return None;
    }
    let name: [u8; NAME_LEN] = data[..NAME_LEN].try_into().ok()?;
    let secret = ring::digest::digest(&ring::digest::SHA256, &data[NAME_LEN..]);
    let key = UnboundKey::new(&AES_256_GCM, secret.as_ref()).ok()?;
    Some((name, LessSafeKey::new(key)))
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.lifetime
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let (name, key) = self.keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(name);
        out.extend_from_slice(&nonce);
        let mut sealed = plain.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(name),
            &mut sealed,
        )
        .ok()?;
        out.extend_from_slice(&sealed);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let name = cipher.get(..NAME_LEN)?;
        let nonce: [u8; NONCE_LEN] = cipher
            .get(NAME_LEN..NAME_LEN + NONCE_LEN)?
            .try_into()
            .ok()?;
        let (name, key) = self.keys.iter().find(|(n, _)| n == name)?;
        let mut sealed = cipher[NAME_LEN + NONCE_LEN..].to_vec();
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name),
                &mut sealed,
            )
            .ok()?;
        Some(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(files: &[&[u8]]) -> TicketKeys {
        TicketKeys {
            keys: files.iter().map(|d| key_of(d).unwrap()).collect(),
            lifetime: 300,
            rng: SystemRandom::new(),
        }
    }

    #[test]
    fn first_key_seals_all_keys_open() {
        let a = [b'a'; 80];
        let b = [b'b'; 48];
        let old = keys(&[&b]);
        let rotated = keys(&[&a, &b]);
        let t = old.encrypt(b"session").unwrap();
        assert_eq!(rotated.decrypt(&t).as_deref(), Some(&b"session"[..]));
        let t2 = rotated.encrypt(b"session").unwrap();
        assert_eq!(&t2[..16], &a[..16]);
        assert_eq!(old.decrypt(&t2), None);
        let mut bad = t.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(rotated.decrypt(&bad), None);
        assert!(key_of(&[0; 50]).is_none());
    }
}
