//! Client certificates: `ssl_verify_client` and its trust settings, the
//! rustls verifier that asks for a certificate without ever failing the
//! handshake for it (as nginx's OpenSSL callback), the verification done
//! once the handshake is over, and the refusal of the request (495, 496,
//! 421) the HTTP code makes from it.

use super::conf::{Ocsp, PemFile, SslConf, VerifyClient};
use super::ocsp;
use super::x509::{self, Trust};
use crate::conf::ast::ConfError;
use crate::core::request::{ClientVerify, Request, TlsInfo};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use std::sync::Arc;

/// A server's client-certificate verification, built from its settings.
#[derive(Debug)]
pub struct ClientAuth {
    trust: Trust,
    algs: WebPkiSupportedAlgorithms,
    /// `ssl_ocsp`, when on.
    ocsp: Option<OcspCheck>,
}

/// `ssl_ocsp` and its responder, cache and resolver.
#[derive(Debug)]
struct OcspCheck {
    leaf: bool,
    responder: Option<ocsp::Url>,
    cache: Option<Arc<ocsp::Cache>>,
    names: ocsp::Names,
}

/// nginx's `$ssl_client_verify` reasons for an OCSP check that did not
/// say good (the numbers are OpenSSL's nearest verification errors).
const REVOKED: x509::VerifyError = x509::REVOKED;
const STATUS_FAILED: x509::VerifyError = x509::VerifyError {
    code: 74,
    text: "certificate status request failed",
};
const STATUS_UNKNOWN: x509::VerifyError = x509::VerifyError {
    code: 75,
    text: "certificate status unknown",
};

impl ClientAuth {
    /// How the chain a client sent verifies.
    pub fn check(&self, chain: &[CertificateDer<'_>]) -> ClientVerify {
        if chain.is_empty() {
            return ClientVerify::None;
        }
        let ders: Vec<&[u8]> = chain.iter().map(|c| c.as_ref()).collect();
        let now = UnixTime::now().as_secs() as i64;
        match x509::verify(&ders, &self.trust, now, &self.algs) {
            Ok(()) => ClientVerify::Success,
            Err(e) => ClientVerify::Failed {
                code: e.code,
                reason: e.text,
            },
        }
    }

    /// [`ClientAuth::check`], then with `ssl_ocsp` the status of the
    /// verified chain's certificates asked of their responders.
    pub async fn verify(&self, chain: &[CertificateDer<'_>]) -> ClientVerify {
        let Some(o) = &self.ocsp else {
            return self.check(chain);
        };
        if chain.is_empty() {
            return ClientVerify::None;
        }
        let ders: Vec<&[u8]> = chain.iter().map(|c| c.as_ref()).collect();
        let now = UnixTime::now().as_secs() as i64;
        let path = match x509::verified_path(&ders, &self.trust, now, &self.algs) {
            Ok(p) => p,
            Err(e) => {
                return ClientVerify::Failed {
                    code: e.code,
                    reason: e.text,
                };
            }
        };
        let checked = match o.leaf {
            true => path.len().min(2).saturating_sub(1),
            false => path.len().saturating_sub(1),
        };
        for i in 0..checked {
            if let Err(e) = self.status(o, &path[i], &path[i + 1]).await {
                return ClientVerify::Failed {
                    code: e.code,
                    reason: e.text,
                };
            }
        }
        ClientVerify::Success
    }

    /// One certificate's OCSP status: from the cache, else its responder.
    async fn status(
        &self,
        o: &OcspCheck,
        cert: &[u8],
        issuer: &[u8],
    ) -> Result<(), x509::VerifyError> {
        let id = ocsp::CertId::new(cert, issuer).ok_or(STATUS_FAILED)?;
        let now = UnixTime::now().as_secs() as i64;
        let cached = o.cache.as_ref().and_then(|c| c.get(&id, now));
        let status = match cached {
            Some(s) => s,
            None => {
                let checked = self.ask(o, cert, issuer, &id).await.map_err(|e| {
                    crate::error_log!(Error, "{e} while requesting certificate status");
                    STATUS_FAILED
                })?;
                if let Some(c) = &o.cache {
                    c.put(id, checked, now);
                }
                checked.status
            }
        };
        match status {
            ocsp::Status::Good => Ok(()),
            ocsp::Status::Revoked => Err(REVOKED),
            ocsp::Status::Unknown => Err(STATUS_UNKNOWN),
        }
    }

    async fn ask(
        &self,
        o: &OcspCheck,
        cert: &[u8],
        issuer: &[u8],
        id: &ocsp::CertId,
    ) -> Result<ocsp::Checked, String> {
        let url = match &o.responder {
            Some(u) => u.clone(),
            None => ocsp::Url::parse(
                &ocsp::responder_of(cert).ok_or("no OCSP responder URL in certificate")?,
            )?,
        };
        let der = ocsp::fetch(&url, &id.request(), &o.names).await?;
        let verify = ocsp::Verify {
            algs: &self.algs,
            known: &self.trust.certs,
            trust: None,
        };
        ocsp::check(
            &der,
            id,
            issuer,
            Some(&verify),
            UnixTime::now().as_secs() as i64,
        )
    }
}

/// The verifier rustls runs in the handshake: it asks for a certificate,
/// names the `ssl_client_certificate` authorities, and checks only that the
/// client holds its certificate's key; the chain is judged afterwards
/// ([`ClientAuth::check`]) and the request refused, not the handshake.
#[derive(Debug)]
pub struct AskForCertificate {
    hints: Vec<DistinguishedName>,
    algs: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AskForCertificate {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        holds_key(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        holds_key(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// The peer's handshake signature, made with its certificate's key (X.509
/// v1 certificates too): the check a listener makes of a client and an
/// upstream connection of its server.
pub fn holds_key(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    match x509::verify_handshake_signature(cert, message, dss.scheme, dss.signature(), algs) {
        true => Ok(HandshakeSignatureValid::assertion()),
        false => Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::BadSignature,
        )),
    }
}

/// The verifier for the handshake and the verification for afterwards.
pub type Built = (Arc<dyn ClientCertVerifier>, Arc<ClientAuth>);

/// What a server asking for client certificates verifies them with.
pub fn build(
    conf: &SslConf,
    algs: WebPkiSupportedAlgorithms,
    names: ocsp::Names,
) -> Result<Option<Built>, ConfError> {
    let (mode, span) = &conf.verify_client;
    if *mode == VerifyClient::Off {
        return Ok(None);
    }
    let ocsp = match &conf.ocsp {
        (Ocsp::Off, _) => None,
        (_, Some(span)) if *mode == VerifyClient::OptionalNoCa => {
            return Err(ConfError::new(
                "\"ssl_ocsp\" is incompatible with \"ssl_verify_client optional_no_ca\"",
                span,
            ));
        }
        (o, _) => Some(OcspCheck {
            leaf: *o == Ocsp::Leaf,
            responder: conf.ocsp_responder.clone(),
            cache: conf
                .ocsp_cache
                .as_ref()
                .map(|(name, size)| ocsp::Cache::named(name, *size)),
            names,
        }),
    };
    let named = match &conf.client_certificate {
        Some(f) => certificates(f)?,
        None if *mode == VerifyClient::OptionalNoCa => Vec::new(),
        None => {
            let span = span
                .clone()
                .expect("a mode other than off was set by the directive");
            return Err(ConfError::new(
                "no ssl_client_certificate for ssl_verify_client",
                &span,
            ));
        }
    };
    let mut hints: Vec<DistinguishedName> = Vec::new();
    for c in &named {
        if let Some(s) = x509::subject_der(c) {
            let dn = DistinguishedName::from(s);
            if !hints.iter().any(|h| h.as_ref() == dn.as_ref()) {
                hints.push(dn);
            }
        }
    }
    let mut trust = Trust {
        certs: named,
        crls: Vec::new(),
        depth: conf.verify_depth,
    };
    if let Some(f) = &conf.trusted_certificate {
        trust.certs.extend(certificates(f)?);
    }
    if let Some(f) = &conf.crl {
        let pem = f.read().map_err(|e| load_error(f, e))?;
        trust.crls = CertificateRevocationListDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| load_error(f, super::config::pem_error(e)))?
            .into_iter()
            .map(|c| c.as_ref().to_vec())
            .collect();
        if trust.crls.is_empty() {
            return Err(ConfError::new(
                format!("no CRL in \"{}\"", f.path.display()),
                &f.span,
            ));
        }
    }
    Ok(Some((
        Arc::new(AskForCertificate { hints, algs }),
        Arc::new(ClientAuth { trust, algs, ocsp }),
    )))
}

/// The certificates of a PEM file (DER each).
pub fn certificates(f: &PemFile) -> Result<Vec<Vec<u8>>, ConfError> {
    let pem = f.read().map_err(|e| load_error(f, e))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| load_error(f, super::config::pem_error(e)))?;
    if certs.is_empty() {
        return Err(ConfError::new(
            format!("no certificate in \"{}\"", f.path.display()),
            &f.span,
        ));
    }
    Ok(certs.into_iter().map(|c| c.as_ref().to_vec()).collect())
}

fn load_error(f: &PemFile, why: String) -> ConfError {
    ConfError::new(
        format!("cannot load \"{}\": {why}", f.path.display()),
        &f.span,
    )
}

/// Before a request's phases: nginx's answers for a TLS client its server
/// refuses. 421 when the Host names another server than the handshake's
/// (SNI) and that server verifies clients; 495 for a certificate that did
/// not verify; 496 for none under `ssl_verify_client on`.
pub fn refusal(req: &Request<'_>) -> Option<u16> {
    let tls = req.tls.as_ref()?;
    let mode = req.server.conf.get::<SslConf>().verify_client.0;
    if mode == VerifyClient::Off {
        return None;
    }
    if let Some(sni) = tls.server_name.as_deref()
        && !req.host.is_empty()
        && !sni.eq_ignore_ascii_case(req.host)
    {
        crate::error_log!(
            Info,
            "client attempted to request the server name different from the one that was negotiated while reading client request headers"
        );
        return Some(421);
    }
    verdict(tls, mode, " while reading client request headers")
}

/// A client certificate its server refuses (logged, `context` after the
/// message): 495 for one that did not verify (under `optional_no_ca`, one
/// whose chain is only incomplete passes), 496 for none under
/// `ssl_verify_client on`.
pub fn verdict(tls: &TlsInfo, mode: VerifyClient, context: &str) -> Option<u16> {
    if mode == VerifyClient::Off {
        return None;
    }
    match &tls.client_verify {
        ClientVerify::Failed { code, reason }
            if !(mode == VerifyClient::OptionalNoCa
                && x509::VerifyError {
                    code: *code,
                    text: reason,
                }
                .optional()) =>
        {
            crate::error_log!(
                Info,
                "client SSL certificate verify error: ({code}:{reason}){context}"
            );
            Some(495)
        }
        ClientVerify::None if mode == VerifyClient::On => {
            crate::error_log!(Info, "client sent no required SSL certificate{context}");
            Some(496)
        }
        _ => None,
    }
}

/// PEM of a certificate, as OpenSSL writes it.
pub fn pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}
