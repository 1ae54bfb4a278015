//! OCSP stapling from a responder, as nginx does it: the response is asked
//! for lazily, by the first handshake that would staple it (which goes on
//! without), and stapled from then on while it holds; it is asked again
//! before its nextUpdate (at most an hour after, at least five minutes),
//! and five minutes after a failure. Only a response saying `good` is
//! stapled; with `ssl_stapling_verify` its signature must verify too.

use super::ocsp::{self, CertId, Names, Status, Url};
use super::x509;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::sign::CertifiedKey;
use std::sync::{Arc, Mutex};

/// One certificate's stapling.
#[derive(Debug)]
pub struct Stapler {
    /// The certificate (for logs: its file).
    name: String,
    id: CertId,
    request: Vec<u8>,
    issuer: Vec<u8>,
    url: Url,
    names: Names,
    /// `ssl_stapling_verify on`: the certificates the signer may be among,
    /// and the trusted ones the issuer must verify against.
    verify: Option<(Vec<Vec<u8>>, x509::Trust)>,
    algs: WebPkiSupportedAlgorithms,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The certificate with its response, and until when that holds.
    staple: Option<(Arc<CertifiedKey>, i64)>,
    /// When to ask again.
    refresh: i64,
    loading: bool,
}

/// What a stapler is built from.
pub struct Setup<'a> {
    pub name: String,
    /// The certificate chain served (DER, the certificate first).
    pub chain: &'a [Vec<u8>],
    /// `ssl_trusted_certificate` and `ssl_client_certificate`.
    pub store: &'a [Vec<u8>],
    /// `ssl_stapling_responder`.
    pub responder: Option<&'a Url>,
    pub verify: bool,
    pub names: Names,
    pub algs: WebPkiSupportedAlgorithms,
}

impl Stapler {
    /// The certificate's stapler, or why it staples nothing (nginx's
    /// warnings: no issuer found, no responder named).
    pub fn new(s: Setup<'_>) -> Result<Stapler, String> {
        let cert = s.chain.first().ok_or("no certificate")?;
        let issuer = s
            .chain
            .iter()
            .skip(1)
            .chain(s.store.iter())
            .find(|i| x509::issued_by(cert, i, &s.algs))
            .ok_or_else(|| {
                format!(
                    "\"ssl_stapling\" ignored, issuer certificate not found for certificate \"{}\"",
                    s.name
                )
            })?
            .clone();
        let url = match s.responder {
            Some(u) => u.clone(),
            None => {
                let u = ocsp::responder_of(cert).ok_or_else(|| {
                    format!(
                        "\"ssl_stapling\" ignored, no OCSP responder URL in the certificate \"{}\"",
                        s.name
                    )
                })?;
                Url::parse(&u).map_err(|e| {
                    format!(
                        "\"ssl_stapling\" ignored, {e} in the certificate \"{}\"",
                        s.name
                    )
                })?
            }
        };
        let id = CertId::new(cert, &issuer).ok_or("unreadable certificate")?;
        let verify = s.verify.then(|| {
            let mut known: Vec<Vec<u8>> = s.chain[1..].to_vec();
            known.extend(s.store.iter().cloned());
            let trust = x509::Trust {
                certs: s.store.to_vec(),
                crls: Vec::new(),
                depth: 100,
            };
            (known, trust)
        });
        Ok(Stapler {
            name: s.name,
            request: id.request(),
            id,
            issuer,
            url,
            names: s.names,
            verify,
            algs: s.algs,
            state: Mutex::new(State::default()),
        })
    }

    /// The certificate to serve: with the response while one holds. A
    /// handshake finding none, or a stale one, starts asking for it.
    pub fn key(self: &Arc<Self>, base: &Arc<CertifiedKey>) -> Arc<CertifiedKey> {
        let now = now_secs();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let key = match &s.staple {
            Some((k, valid)) if *valid >= now => k.clone(),
            _ => base.clone(),
        };
        if !s.loading
            && s.refresh <= now
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            s.loading = true;
            rt.spawn(self.clone().update(base.clone()));
        }
        key
    }

    /// Ask the responder, and keep what it said.
    async fn update(self: Arc<Self>, base: Arc<CertifiedKey>) {
        let got = self.ask().await;
        let now = now_secs();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.loading = false;
        match got {
            Ok((der, valid)) => {
                let mut k = (*base).clone();
                k.ocsp = Some(der);
                s.staple = Some((Arc::new(k), valid));
                s.refresh = refresh_at(valid, now);
            }
            Err(e) => {
                crate::error_log!(
                    Error,
                    "{e} while requesting certificate status, responder: {}, certificate: \"{}\"",
                    self.url.host,
                    self.name
                );
                s.refresh = now + 300;
            }
        }
    }

    /// A good response and until when it holds.
    async fn ask(&self) -> Result<(Vec<u8>, i64), String> {
        let der = ocsp::fetch(&self.url, &self.request, &self.names).await?;
        let verify = self.verify.as_ref().map(|(known, trust)| ocsp::Verify {
            algs: &self.algs,
            known,
            trust: Some(trust),
        });
        let checked = ocsp::check(&der, &self.id, &self.issuer, verify.as_ref(), now_secs())?;
        match checked.status {
            Status::Good => Ok((der, checked.next_update.unwrap_or(i64::MAX))),
            Status::Revoked => Err("certificate status \"revoked\" in the OCSP response".into()),
            Status::Unknown => Err("certificate status \"unknown\" in the OCSP response".into()),
        }
    }
}

/// When to ask again for a response that holds until `valid`: five
/// minutes before, but within an hour and no sooner than five minutes.
fn refresh_at(valid: i64, now: i64) -> i64 {
    valid.saturating_sub(300).min(now + 3600).max(now + 300)
}

pub fn now_secs() -> i64 {
    crate::core::clock::unix_millis() as i64 / 1000
}

#[cfg(test)]
mod tests {
    use super::refresh_at;

    #[test]
    fn responses_are_asked_again_before_they_expire() {
        let now = 1_000_000;
        assert_eq!(refresh_at(now + 1800, now), now + 1500);
        assert_eq!(refresh_at(now + 86400, now), now + 3600);
        assert_eq!(refresh_at(now + 60, now), now + 300);
        assert_eq!(refresh_at(i64::MAX, now), now + 3600);
    }
}
