//! `preferred_chain`: the issuer's alternate certificate chains (RFC 8555
//! section 7.4.2). instant-acme downloads the default chain only; the issuer
//! names the others in `Link: <url>;rel="alternate"` fields of that download.
//! [`Recording`], the HTTP client an account is made with when its issuer
//! has `preferred_chain`, notes those links; [`choose`] fetches each alternate with a POST-as-GET signed with
//! the account's key ([`Signer`]) until one's topmost certificate is issued
//! by the preferred name.

use super::client::Failure;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// The alternate chains replies linked to, by the URL they answered.
#[derive(Default)]
pub struct Seen {
    alternates: Mutex<HashMap<String, Vec<String>>>,
}

impl Seen {
    /// Note the `rel="alternate"` links of a reply to `url`.
    fn note(&self, url: &str, headers: &http::HeaderMap) {
        let links: Vec<String> = headers
            .get_all(http::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(alternate)
            .map(|target| absolute(url, target))
            .collect();
        if !links.is_empty() {
            let mut seen = self.alternates.lock().unwrap_or_else(|e| e.into_inner());
            // Taken by `choose` just after the certificate's download.
            seen.insert(url.to_string(), links);
        }
    }

    /// The alternates the reply to `url` linked to (taken: asked once).
    fn take(&self, url: &str) -> Vec<String> {
        let mut seen = self.alternates.lock().unwrap_or_else(|e| e.into_inner());
        seen.remove(url).unwrap_or_default()
    }
}

/// The target of one link-value (RFC 8288) when its relation is `alternate`.
fn alternate(link: &str) -> Option<&str> {
    let (target, params) = link.trim().strip_prefix('<')?.split_once('>')?;
    params
        .split(';')
        .filter_map(|p| p.trim().split_once('='))
        .any(|(k, v)| {
            k.trim().eq_ignore_ascii_case("rel")
                && v.trim()
                    .trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|r| r.eq_ignore_ascii_case("alternate"))
        })
        .then_some(target)
}

/// `target` resolved against the URL of the reply that named it (issuers
/// give absolute URLs or absolute paths).
fn absolute(base: &str, target: &str) -> String {
    match (target.starts_with('/'), base.parse::<http::Uri>()) {
        (true, Ok(b)) => match (b.scheme_str(), b.authority()) {
            (Some(s), Some(a)) => format!("{s}://{a}{target}"),
            _ => target.to_string(),
        },
        _ => target.to_string(),
    }
}

/// An issuer's HTTP client that notes the alternate chains replies link to.
pub struct Recording {
    pub inner: Box<dyn HttpClient>,
    pub seen: Arc<Seen>,
}

impl HttpClient for Recording {
    fn request(
        &self,
        req: http::Request<BodyWrapper<bytes::Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let url = req.uri().to_string();
        let seen = self.seen.clone();
        let sent = self.inner.request(req);
        Box::pin(async move {
            let rsp = sent.await?;
            seen.note(&url, &rsp.parts.headers);
            Ok(rsp)
        })
    }
}

/// What signs requests as the account: its ES256 key and its URL (`kid`).
pub struct Signer {
    key: ring::signature::EcdsaKeyPair,
    kid: String,
}

impl Signer {
    /// `pkcs8`: the account's P-256 key; `kid`: the account's URL.
    pub fn new(pkcs8: &[u8], kid: &str) -> Result<Signer, Failure> {
        let key = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8,
            &ring::rand::SystemRandom::new(),
        )
        .map_err(|e| Failure::Refused(format!("the account key does not do: {e}")))?;
        Ok(Signer {
            key,
            kid: kid.to_string(),
        })
    }

    /// A POST-as-GET of `url` (RFC 8555 section 6.3): a JWS in flattened
    /// JSON with an empty payload.
    fn post_as_get(&self, nonce: &str, url: &str) -> Result<Vec<u8>, Failure> {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header =
            serde_json::json!({"alg": "ES256", "kid": self.kid, "nonce": nonce, "url": url});
        let protected = b64.encode(header.to_string());
        let sig = self
            .key
            .sign(
                &ring::rand::SystemRandom::new(),
                format!("{protected}.").as_bytes(),
            )
            .map_err(|_| Failure::Refused("signing failed".into()))?;
        let jws = serde_json::json!({
            "protected": protected,
            "payload": "",
            "signature": b64.encode(sig.as_ref()),
        });
        Ok(jws.to_string().into_bytes())
    }
}

/// The Common Name of the issuer of the last certificate of a PEM chain.
pub fn topmost_issuer(chain: &str) -> Option<String> {
    use rustls_pki_types::pem::PemObject;
    let last = rustls_pki_types::CertificateDer::pem_slice_iter(chain.as_bytes())
        .filter_map(Result::ok)
        .last()?;
    let (_, cert) = x509_parser::parse_x509_certificate(&last).ok()?;
    let cn = cert.issuer().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

/// The chain to install: `default` (the issuer's) when its topmost
/// certificate is issued by `preferred`, else the first alternate of
/// `cert_url` that is, else `default`. `label` names the certificate in
/// the log.
pub async fn choose(
    default: String,
    cert_url: &str,
    preferred: &str,
    account: &Alternates,
    label: &str,
) -> String {
    let alternates = account.seen.take(cert_url);
    if topmost_issuer(&default).as_deref() == Some(preferred) {
        return default;
    }
    let mut nonce = None;
    for url in &alternates {
        match fetch(account, &mut nonce, url).await {
            Ok(chain) if topmost_issuer(&chain).as_deref() == Some(preferred) => {
                crate::error_log!(
                    Notice,
                    "acme: {label}: the chain issued by \"{preferred}\" is used ({url})"
                );
                return chain;
            }
            Ok(_) => {}
            Err(why) => {
                crate::error_log!(
                    Warn,
                    "acme: {label}: the alternate chain {url} could not be fetched: {why}"
                );
            }
        }
    }
    crate::error_log!(
        Notice,
        "acme: {label}: no chain issued by \"{preferred}\" among {} offered; the default chain is used",
        alternates.len() + 1
    );
    default
}

/// What fetching an account's alternate chains needs: its key, what its
/// client noted, and a client of its own (so that a fetch here never takes
/// a nonce instant-acme holds).
pub struct Alternates {
    pub signer: Signer,
    pub seen: Arc<Seen>,
    pub http: Box<dyn HttpClient>,
    /// The issuer's directory URL, where a first nonce is found.
    pub directory: String,
}

/// One alternate chain (PEM), by POST-as-GET; `nonce` carries the nonce of
/// each reply to the next request, and is got from the issuer when empty or
/// refused.
async fn fetch(
    account: &Alternates,
    nonce: &mut Option<String>,
    url: &str,
) -> Result<String, Failure> {
    for _ in 0..3 {
        let n = match nonce.take() {
            Some(n) => n,
            None => new_nonce(account).await?,
        };
        let req = request(http::Method::POST, url)
            .header(http::header::CONTENT_TYPE, "application/jose+json")
            .header(http::header::ACCEPT, "application/pem-certificate-chain")
            .body(BodyWrapper::from(account.signer.post_as_get(&n, url)?))
            .map_err(|e| Failure::Refused(e.to_string()))?;
        let mut rsp = account.http.request(req).await?;
        *nonce = replay_nonce(&rsp);
        let status = rsp.parts.status;
        let body = rsp.body.into_bytes().await.map_err(unreachable)?;
        if status.is_success() {
            return String::from_utf8(body.to_vec())
                .map_err(|_| Failure::Refused("the chain is not text".into()));
        }
        let problem = String::from_utf8_lossy(&body);
        if !problem.contains("urn:ietf:params:acme:error:badNonce") {
            return Err(Failure::Refused(format!("{status}: {problem}")));
        }
    }
    Err(Failure::Refused("the issuer refused three nonces".into()))
}

/// A request to an issuer, with the User-Agent every one must have (RFC
/// 8555 section 6.1).
pub fn request(method: http::Method, url: &str) -> http::request::Builder {
    http::Request::builder().method(method).uri(url).header(
        http::header::USER_AGENT,
        concat!("vireo/", env!("CARGO_PKG_VERSION")),
    )
}

fn replay_nonce(rsp: &BytesResponse) -> Option<String> {
    let v = rsp.parts.headers.get("replay-nonce")?;
    v.to_str().ok().map(str::to_string)
}

fn unreachable(e: Box<dyn std::error::Error + Send + Sync>) -> Failure {
    Failure::Unreachable(e.to_string())
}

/// A fresh nonce: the directory's `newNonce`, asked with HEAD.
async fn new_nonce(account: &Alternates) -> Result<String, Failure> {
    let get = request(http::Method::GET, &account.directory)
        .body(BodyWrapper::default())
        .map_err(|e| Failure::Refused(e.to_string()))?;
    let mut rsp = account.http.request(get).await?;
    let body = rsp.body.into_bytes().await.map_err(unreachable)?;
    let dir: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| Failure::Refused(format!("the directory is not JSON: {e}")))?;
    let url = dir
        .get("newNonce")
        .and_then(|u| u.as_str())
        .ok_or_else(|| Failure::Refused("the directory has no newNonce".into()))?;
    let head = request(http::Method::HEAD, url)
        .body(BodyWrapper::default())
        .map_err(|e| Failure::Refused(e.to_string()))?;
    let rsp = account.http.request(head).await?;
    replay_nonce(&rsp).ok_or_else(|| Failure::Refused("newNonce gave no nonce".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternate_links_are_found_and_resolved() {
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::LINK,
            "<https://ca.test/dir>;rel=\"index\", <https://ca.test/cert/1/alt/1>; rel=\"alternate\""
                .parse()
                .unwrap(),
        );
        h.append(
            http::header::LINK,
            "</cert/1/alt/2>;rel=alternate".parse().unwrap(),
        );
        let seen = Seen::default();
        seen.note("https://ca.test:14000/cert/1", &h);
        assert_eq!(
            seen.take("https://ca.test:14000/cert/1"),
            [
                "https://ca.test/cert/1/alt/1",
                "https://ca.test:14000/cert/1/alt/2"
            ]
        );
        assert!(seen.take("https://ca.test:14000/cert/1").is_empty());
        seen.note("https://ca.test/x", &http::HeaderMap::new());
        assert!(seen.take("https://ca.test/x").is_empty());
        // Not links to alternates: other relations, a relation that only
        // begins with the word, no target in brackets, an unclosed one.
        for v in [
            "<https://ca.test/a>;rel=\"up\"",
            "<https://ca.test/a>;rel=alternates",
            "https://ca.test/a;rel=alternate",
            "<https://ca.test/a;rel=alternate",
        ] {
            assert_eq!(alternate(v), None, "{v}");
        }
        assert_eq!(
            alternate(" <https://ca.test/a> ; REL=\"index alternate\""),
            Some("https://ca.test/a")
        );
    }

    #[test]
    fn the_topmost_issuer_is_the_last_certificates() {
        let ca = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "Test Root X9");
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let root = p.self_signed(&ca).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["a.test".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &rcgen::Issuer::new(p, &ca))
            .unwrap();
        assert_eq!(topmost_issuer(&leaf.pem()).as_deref(), Some("Test Root X9"));
        let chain = format!("{}{}", leaf.pem(), root.pem());
        assert_eq!(topmost_issuer(&chain).as_deref(), Some("Test Root X9"));
        assert_eq!(topmost_issuer("no certificate"), None);
    }
}
