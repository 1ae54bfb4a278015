//! OCSP (RFC 6960) as nginx uses it: a request for one certificate (a
//! SHA-1 `CertID`, no nonce), sent by GET to a plain-HTTP responder (its
//! name resolved through `resolver`), and the response decoded (asn1-rs,
//! through x509-parser), matched to the certificate, its signature checked
//! against the issuer or a responder the issuer delegated to, and its
//! validity window checked with OpenSSL's five minutes of leeway.
//!
//! Used by stapling ([`super::stapling`]) and by `ssl_ocsp`, the check of
//! client certificates ([`super::client`]).

use super::x509;
use crate::upstream::resolver::Resolver;
use rustls::crypto::WebPkiSupportedAlgorithms;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use x509_parser::asn1_rs::{Any, Class, FromDer, Tag};
use x509_parser::prelude::{ASN1Time, X509Certificate};

/// How long one exchange with a responder may take (nginx's fixed 60 s).
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The largest response read (nginx's 16 KB buffer).
const MAX_RESPONSE: usize = 16 * 1024;

/// Leeway on thisUpdate and nextUpdate, as nginx gives OpenSSL.
const LEEWAY: i64 = 300;

/// `id-pkix-ocsp-basic` (1.3.6.1.5.5.7.48.1.1), encoded.
const BASIC: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01, 0x01];
/// SHA-1 (1.3.14.3.2.26) and SHA-256 (2.16.840.1.101.3.4.2.1), encoded.
const SHA1: &[u8] = &[0x2b, 0x0e, 0x03, 0x02, 0x1a];
const SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];

/// A certificate's status in a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Good,
    Revoked,
    Unknown,
}

/// A response checked for one certificate: its status, and until when it
/// holds (nextUpdate; `None` when the responder gave none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    pub status: Status,
    pub next_update: Option<i64>,
}

/// One DER element of `i`: the element and its whole encoding; `i` moves on.
fn next<'a>(i: &mut &'a [u8]) -> Result<(Any<'a>, &'a [u8]), String> {
    let input = *i;
    let (rest, any) = Any::from_der(input).map_err(|_| "malformed OCSP response".to_string())?;
    *i = rest;
    Ok((any, &input[..input.len() - rest.len()]))
}

fn is_ctx(a: &Any<'_>, tag: u32) -> bool {
    a.class() == Class::ContextSpecific && a.tag() == Tag(tag)
}

fn expect(a: &Any<'_>, tag: Tag) -> Result<(), String> {
    match a.class() == Class::Universal && a.tag() == tag {
        true => Ok(()),
        false => Err("malformed OCSP response".into()),
    }
}

fn time(whole: &[u8]) -> Result<i64, String> {
    ASN1Time::from_der(whole)
        .map(|(_, t)| t.timestamp())
        .map_err(|_| "malformed time in OCSP response".into())
}

/// A DER element of `tag` around `body`.
fn der(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = body.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes = n.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(body);
    out
}

/// What identifies a certificate to a responder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CertId {
    /// The issuer's name (DER).
    issuer_name: Vec<u8>,
    /// The issuer's public key bits.
    issuer_key: Vec<u8>,
    /// The certificate's serial number (INTEGER contents).
    serial: Vec<u8>,
}

impl CertId {
    /// The id of `cert` issued by `issuer` (DER each).
    pub fn new(cert: &[u8], issuer: &[u8]) -> Option<CertId> {
        let (_, c) = X509Certificate::from_der(cert).ok()?;
        let (_, i) = X509Certificate::from_der(issuer).ok()?;
        Some(CertId {
            issuer_name: i.subject().as_raw().to_vec(),
            issuer_key: i.public_key().subject_public_key.data.to_vec(),
            serial: c.raw_serial().to_vec(),
        })
    }

    /// The request nginx sends: one SHA-1 CertID, no extensions.
    pub fn request(&self) -> Vec<u8> {
        let mut id = der(
            0x30,
            &der(0x06, SHA1)
                .into_iter()
                .chain([5, 0])
                .collect::<Vec<_>>(),
        );
        id.extend(der(
            0x04,
            &digest(SHA1, &self.issuer_name).unwrap_or_default(),
        ));
        id.extend(der(
            0x04,
            &digest(SHA1, &self.issuer_key).unwrap_or_default(),
        ));
        id.extend(der(0x02, &self.serial));
        let single = der(0x30, &der(0x30, &id));
        der(0x30, &der(0x30, &der(0x30, &single)))
    }

    /// Does a response's CertID name this certificate?
    fn matches(&self, alg: &[u8], name_hash: &[u8], key_hash: &[u8], serial: &[u8]) -> bool {
        serial == self.serial.as_slice()
            && digest(alg, &self.issuer_name).is_some_and(|h| h == name_hash)
            && digest(alg, &self.issuer_key).is_some_and(|h| h == key_hash)
    }
}

/// The hash a CertID uses, by its algorithm's OID.
fn digest(alg: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    let alg = match alg {
        SHA1 => &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        SHA256 => &ring::digest::SHA256,
        _ => return None,
    };
    Some(ring::digest::digest(alg, data).as_ref().to_vec())
}

/// How the response names the certificate that signed it.
enum Responder<'a> {
    Name(&'a [u8]),
    KeyHash(&'a [u8]),
}

/// One certificate's answer in a response.
struct Single<'a> {
    alg: &'a [u8],
    name_hash: &'a [u8],
    key_hash: &'a [u8],
    serial: &'a [u8],
    status: Status,
    this_update: i64,
    next_update: Option<i64>,
}

/// A successful basic response, decoded.
struct Basic<'a> {
    /// The whole signed BasicOCSPResponse.
    signed: &'a [u8],
    responder: Responder<'a>,
    singles: Vec<Single<'a>>,
    certs: Vec<&'a [u8]>,
}

/// OpenSSL's names of the response statuses.
fn response_status(n: u8) -> &'static str {
    match n {
        1 => "malformedrequest",
        2 => "internalerror",
        3 => "trylater",
        5 => "sigrequired",
        6 => "unauthorized",
        _ => "(UNKNOWN)",
    }
}

fn decode(der: &[u8]) -> Result<Basic<'_>, String> {
    let mut i = der;
    let (outer, _) = next(&mut i)?;
    expect(&outer, Tag::Sequence)?;
    let mut o = outer.data;
    let (status, _) = next(&mut o)?;
    expect(&status, Tag::Enumerated)?;
    let code = status.data.last().copied().unwrap_or(0);
    if code != 0 {
        return Err(format!(
            "OCSP response not successful ({code}: {})",
            response_status(code)
        ));
    }
    let (bytes, _) = next(&mut o)?;
    if !is_ctx(&bytes, 0) {
        return Err("malformed OCSP response".into());
    }
    let mut b = bytes.data;
    let (rb, _) = next(&mut b)?;
    let mut rb = rb.data;
    let (kind, _) = next(&mut rb)?;
    expect(&kind, Tag::Oid)?;
    if kind.data != BASIC {
        return Err("OCSP response is not a basic one".into());
    }
    let (octets, _) = next(&mut rb)?;
    expect(&octets, Tag::OctetString)?;
    let signed = octets.data;
    let mut s = signed;
    let (basic, _) = next(&mut s)?;
    expect(&basic, Tag::Sequence)?;
    let mut bd = basic.data;
    let (tbs, _) = next(&mut bd)?;
    let _alg = next(&mut bd)?;
    let _sig = next(&mut bd)?;
    let mut certs = Vec::new();
    if !bd.is_empty() {
        let (c, _) = next(&mut bd)?;
        if is_ctx(&c, 0) {
            let mut seq = c.data;
            let (list, _) = next(&mut seq)?;
            let mut l = list.data;
            while !l.is_empty() {
                certs.push(next(&mut l)?.1);
            }
        }
    }
    let mut t = tbs.data;
    let (mut first, _) = next(&mut t)?;
    if is_ctx(&first, 0) {
        first = next(&mut t)?.0; // version v1
    }
    let responder = if is_ctx(&first, 1) {
        let mut n = first.data;
        Responder::Name(next(&mut n)?.1)
    } else if is_ctx(&first, 2) {
        let mut k = first.data;
        Responder::KeyHash(next(&mut k)?.0.data)
    } else {
        return Err("malformed OCSP response".into());
    };
    let _produced = next(&mut t)?;
    let (responses, _) = next(&mut t)?;
    expect(&responses, Tag::Sequence)?;
    let mut r = responses.data;
    let mut singles = Vec::new();
    while !r.is_empty() {
        let (single, _) = next(&mut r)?;
        let mut sd = single.data;
        let (id, _) = next(&mut sd)?;
        let mut idd = id.data;
        let (alg, _) = next(&mut idd)?;
        let mut ad = alg.data;
        let (oid, _) = next(&mut ad)?;
        let (name_hash, _) = next(&mut idd)?;
        let (key_hash, _) = next(&mut idd)?;
        let (serial, _) = next(&mut idd)?;
        let (st, _) = next(&mut sd)?;
        let status = match (st.class(), st.tag()) {
            (Class::ContextSpecific, Tag(0)) => Status::Good,
            (Class::ContextSpecific, Tag(1)) => Status::Revoked,
            _ => Status::Unknown,
        };
        let this_update = time(next(&mut sd)?.1)?;
        let mut next_update = None;
        while !sd.is_empty() {
            let (e, _) = next(&mut sd)?;
            if is_ctx(&e, 0) {
                let mut nd = e.data;
                next_update = Some(time(next(&mut nd)?.1)?);
            }
        }
        singles.push(Single {
            alg: oid.data,
            name_hash: name_hash.data,
            key_hash: key_hash.data,
            serial: serial.data,
            status,
            this_update,
            next_update,
        });
    }
    Ok(Basic {
        signed,
        responder,
        singles,
        certs,
    })
}

/// How a response's signature is judged.
pub struct Verify<'a> {
    pub algs: &'a WebPkiSupportedAlgorithms,
    /// Certificates the signer may be found among besides the response's
    /// own (the issuer's chain, the trusted ones).
    pub known: &'a [Vec<u8>],
    /// With `Some`, the issuer itself must verify against these trusted
    /// certificates (`ssl_stapling_verify`: the response's signer chain
    /// checked as OpenSSL does); `None` when the issuer is already known
    /// good (a client chain just verified).
    pub trust: Option<&'a x509::Trust>,
}

/// The status of `id` (its issuer's certificate: `issuer`) in the response
/// `der` at `now`; with `verify`, only when its signature is good. `Err`
/// says why not, in nginx's words.
pub fn check(
    der: &[u8],
    id: &CertId,
    issuer: &[u8],
    verify: Option<&Verify<'_>>,
    now: i64,
) -> Result<Checked, String> {
    let basic = decode(der)?;
    if let Some(v) = verify {
        verify_signature(&basic, issuer, v, now)?;
    }
    let single = basic
        .singles
        .iter()
        .find(|s| id.matches(s.alg, s.name_hash, s.key_hash, s.serial))
        .ok_or("certificate status not found in the OCSP response")?;
    if single.this_update > now + LEEWAY || single.next_update.is_some_and(|n| n < now - LEEWAY) {
        return Err("OCSP_check_validity() failed".into());
    }
    Ok(Checked {
        status: single.status,
        next_update: single.next_update,
    })
}

/// OCSP_basic_verify(): the signer found by the responder id, the response
/// signed by its key, and the signer the issuer or a responder it
/// delegated to (issued by it, with the OCSP-signing key purpose).
fn verify_signature(
    basic: &Basic<'_>,
    issuer: &[u8],
    v: &Verify<'_>,
    now: i64,
) -> Result<(), String> {
    let failed = || "OCSP_basic_verify() failed".to_string();
    let candidates = basic
        .certs
        .iter()
        .copied()
        .chain(std::iter::once(issuer))
        .chain(v.known.iter().map(Vec::as_slice));
    let mut signer = None;
    for c in candidates {
        let Ok((_, x)) = X509Certificate::from_der(c) else {
            continue;
        };
        let named = match basic.responder {
            Responder::Name(n) => x.subject().as_raw() == n,
            Responder::KeyHash(h) => {
                digest(SHA1, &x.public_key().subject_public_key.data).is_some_and(|d| d == h)
            }
        };
        if named {
            signer = Some((c, x));
            break;
        }
    }
    let (signer, x) = signer.ok_or_else(failed)?;
    if !x509::signed_by_cert(basic.signed, signer, v.algs) {
        return Err(failed());
    }
    if signer != issuer {
        let delegated = x509::issued_by(signer, issuer, v.algs)
            && x.extended_key_usage()
                .ok()
                .flatten()
                .is_some_and(|e| e.value.ocsp_signing);
        let valid = x.validity();
        if !delegated || now < valid.not_before.timestamp() || now > valid.not_after.timestamp() {
            return Err(failed());
        }
    }
    if let Some(trust) = v.trust {
        // The issuer's own chain, from what is known, up to a trusted one.
        let mut chain: Vec<&[u8]> = vec![issuer];
        chain.extend(v.known.iter().map(Vec::as_slice));
        let wide = x509::Trust {
            certs: trust.certs.clone(),
            crls: Vec::new(),
            depth: 100,
        };
        x509::verify(&chain, &wide, now, v.algs).map_err(|_| failed())?;
    }
    Ok(())
}

/// The OCSP responder a certificate names (its Authority Information
/// Access extension), if any.
pub fn responder_of(cert: &[u8]) -> Option<String> {
    let (_, c) = X509Certificate::from_der(cert).ok()?;
    for ext in c.extensions() {
        if let x509_parser::extensions::ParsedExtension::AuthorityInfoAccess(aia) =
            ext.parsed_extension()
        {
            for d in &aia.accessdescs {
                if d.access_method == x509_parser::oid_registry::OID_PKIX_ACCESS_DESCRIPTOR_OCSP
                    && let x509_parser::extensions::GeneralName::URI(u) = d.access_location
                {
                    return Some(u.to_string());
                }
            }
        }
    }
    None
}

/// A responder's address: `http://host[:port][/path]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// The host as written (the `Host` header; what is resolved).
    pub host: String,
    pub port: u16,
    /// The path, `/` at least.
    pub path: String,
}

impl Url {
    /// Parse a responder URL; `Err` says what is wrong, as nginx does.
    pub fn parse(s: &str) -> Result<Url, String> {
        let rest = match s.get(..7) {
            Some(p) if p.eq_ignore_ascii_case("http://") => &s[7..],
            _ => return Err(format!("invalid URL prefix in OCSP responder \"{s}\"")),
        };
        let (hostport, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = if let Some(h) = hostport.strip_prefix('[') {
            let end = h.find(']').ok_or_else(|| format!("invalid URL \"{s}\""))?;
            let port = h[end + 1..].strip_prefix(':');
            (&hostport[..end + 2], port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        let port = match port {
            Some(p) => p
                .parse()
                .map_err(|_| format!("invalid port in OCSP responder \"{s}\""))?,
            None => 80,
        };
        if host.is_empty() {
            return Err(format!("no host in OCSP responder \"{s}\""));
        }
        Ok(Url {
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    /// The host when it is an address.
    fn ip(&self) -> Option<IpAddr> {
        self.host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok()
    }
}

/// The `resolver` a server's responders are named through, and its timeout.
pub type Names = Option<(Arc<Resolver>, Duration)>;

/// Ask `url` for the response to `request` (DER) by GET, as nginx does;
/// the body of a `200` answer of type `application/ocsp-response`.
pub async fn fetch(url: &Url, request: &[u8], names: &Names) -> Result<Vec<u8>, String> {
    let addrs: Vec<IpAddr> = match url.ip() {
        Some(ip) => vec![ip],
        None => match names {
            None => return Err(format!("no resolver defined to resolve {}", url.host)),
            Some((r, timeout)) => r
                .resolve(&url.host, *timeout)
                .await
                .map_err(|e| format!("{} could not be resolved ({e})", url.host))?
                .to_vec(),
        },
    };
    let exchange = async {
        let mut last = String::new();
        for ip in addrs {
            let peer = SocketAddr::new(ip, url.port);
            match exchange(url, peer, request).await {
                Ok(body) => return Ok(body),
                Err(e) => last = format!("{e}, responder: {}, peer: {peer}", url.host),
            }
        }
        Err(last)
    };
    match tokio::time::timeout(TIMEOUT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("OCSP responder timed out, responder: {}", url.host)),
    }
}

/// One GET to one address of the responder.
async fn exchange(url: &Url, peer: SocketAddr, request: &[u8]) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(request);
    let escaped = percent_encoding::utf8_percent_encode(&b64, percent_encoding::NON_ALPHANUMERIC);
    let slash = if url.path.ends_with('/') { "" } else { "/" };
    let head = format!(
        "GET {}{slash}{escaped} HTTP/1.0\r\nHost: {}\r\n\r\n",
        url.path, url.host
    );
    let mut s = tokio::net::TcpStream::connect(peer)
        .await
        .map_err(|e| format!("connect() failed ({})", crate::core::errlog::errno_text(&e)))?;
    s.write_all(head.as_bytes())
        .await
        .map_err(|e| format!("send() failed ({})", crate::core::errlog::errno_text(&e)))?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| format!("recv() failed ({})", crate::core::errlog::errno_text(&e)))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_RESPONSE {
            return Err("OCSP responder sent too long response".into());
        }
    }
    body(&buf)
}

/// The OCSP response in a responder's HTTP answer.
fn body(buf: &[u8]) -> Result<Vec<u8>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut r = httparse::Response::new(&mut headers);
    let head = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            return Err("OCSP responder prematurely closed connection".into());
        }
        Err(_) => return Err("OCSP responder sent invalid response".into()),
    };
    let code = r.code.unwrap_or(0);
    if code != 200 {
        return Err(format!("OCSP responder sent invalid \"{code}\" status"));
    }
    let mut len = None;
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-type")
            && !h.value.eq_ignore_ascii_case(b"application/ocsp-response")
        {
            return Err(format!(
                "OCSP responder sent invalid \"Content-Type\" header: \"{}\"",
                String::from_utf8_lossy(h.value)
            ));
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            len = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
        }
    }
    let body = &buf[head..];
    match len {
        Some(n) if n > body.len() => Err("OCSP responder prematurely closed connection".into()),
        Some(n) => Ok(body[..n].to_vec()),
        None => Ok(body.to_vec()),
    }
}

/// `ssl_ocsp_cache`: checked statuses by certificate, kept until their
/// nextUpdate (an hour when the responder gave none), shared by the workers
/// and kept across reloads by name and size.
#[derive(Debug)]
pub struct Cache {
    entries: Mutex<lru::LruCache<CertId, (Status, i64)>>,
}

impl Cache {
    /// The cache of this name and size (bytes), made on first use.
    pub fn named(name: &str, size: u64) -> Arc<Cache> {
        type Caches = std::collections::HashMap<(String, u64), Arc<Cache>>;
        static CACHES: Mutex<Option<Caches>> = Mutex::new(None);
        let mut c = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        c.get_or_insert_with(Default::default)
            .entry((name.to_string(), size))
            .or_insert_with(|| {
                // About 256 bytes an entry, as nginx's slab nodes.
                let n = std::num::NonZeroUsize::new((size / 256).max(1) as usize)
                    .unwrap_or(std::num::NonZeroUsize::MIN);
                Arc::new(Cache {
                    entries: Mutex::new(lru::LruCache::new(n)),
                })
            })
            .clone()
    }

    pub fn get(&self, id: &CertId, now: i64) -> Option<Status> {
        let mut e = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match e.get(id) {
            Some(&(s, until)) if until >= now => Some(s),
            Some(_) => {
                e.pop(id);
                None
            }
            None => None,
        }
    }

    pub fn put(&self, id: CertId, c: Checked, now: i64) {
        let until = c.next_update.unwrap_or(now + 3600);
        if until >= now {
            let mut e = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            e.put(id, (c.status, until));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8081").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8081, "/")
        );
        let u = Url::parse("HTTP://ocsp.example.com/test").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("ocsp.example.com", 80, "/test")
        );
        let u = Url::parse("http://[::1]:81/a/").unwrap();
        assert_eq!(u.ip(), Some("::1".parse().unwrap()));
        assert_eq!(u.port, 81);
        assert!(Url::parse("https://x/").is_err());
        assert!(Url::parse("http://x:y/").is_err());
        assert!(Url::parse("http:///").is_err());
    }

    #[test]
    fn der_lengths() {
        assert_eq!(der(4, &[1, 2]), [4, 2, 1, 2]);
        let long = der(4, &[0; 300]);
        assert_eq!(&long[..4], &[4, 0x82, 1, 44]);
    }

    #[test]
    fn http_answers() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/ocsp-response\r\n\r\nabc";
        assert_eq!(body(ok).unwrap(), b"abc");
        assert!(body(b"HTTP/1.1 404 Not Found\r\n\r\n").is_err());
        assert!(body(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\nx").is_err());
        assert!(body(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nx").is_err());
    }

    #[test]
    fn cache_keeps_statuses_until_next_update() {
        let c = Cache::named("unit-test", 1 << 20);
        let id = CertId {
            issuer_name: vec![1],
            issuer_key: vec![2],
            serial: vec![3],
        };
        let now = 1_000_000;
        let good = |next_update| Checked {
            status: Status::Good,
            next_update,
        };
        c.put(id.clone(), good(Some(now + 10)), now);
        assert_eq!(c.get(&id, now + 10), Some(Status::Good));
        assert_eq!(c.get(&id, now + 11), None);
        c.put(id.clone(), good(None), now);
        assert_eq!(c.get(&id, now + 3600), Some(Status::Good));
        assert_eq!(c.get(&id, now + 3601), None);
        // The same name and size is the same cache (kept across reloads).
        assert!(Arc::ptr_eq(&c, &Cache::named("unit-test", 1 << 20)));
    }

    #[test]
    fn requests_carry_one_sha1_cert_id() {
        let id = CertId {
            issuer_name: b"name".to_vec(),
            issuer_key: b"key".to_vec(),
            serial: vec![0x10, 0x00],
        };
        let r = id.request();
        // SEQUENCE { SEQUENCE { SEQUENCE OF { SEQUENCE { CertID } } } }
        assert_eq!(&r[..2], &[0x30, (r.len() - 2) as u8]);
        let sha1 = [0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00];
        assert!(r.windows(sha1.len()).any(|w| w == sha1));
        assert!(r.ends_with(&[0x02, 0x02, 0x10, 0x00]));
        let name_hash = digest(SHA1, b"name").unwrap();
        assert!(r.windows(20).any(|w| w == name_hash.as_slice()));
    }

    #[test]
    fn unsuccessful_responses_say_why() {
        // OCSPResponse { responseStatus tryLater }
        let e = decode(&[0x30, 0x03, 0x0a, 0x01, 0x03]).err().unwrap();
        assert_eq!(e, "OCSP response not successful (3: trylater)");
        assert!(decode(b"junk").is_err());
    }
}
