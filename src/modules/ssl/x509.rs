//! X.509 as OpenSSL does it for nginx: a client certificate's chain built up
//! to a trusted certificate and checked (signatures, validity, depth,
//! revocation lists), with OpenSSL's error numbers and texts; names written
//! as nginx's `$ssl_client_s_dn` (RFC 2253) and its legacy form.
//!
//! rustls's own verifier (webpki) refuses X.509 v1 certificates, which
//! `openssl req -x509` and `openssl ca` make unless told otherwise and which
//! OpenSSL accepts; this one reads them with x509-parser and checks the
//! signatures with the crypto provider's algorithms.

use rustls::crypto::WebPkiSupportedAlgorithms;
use x509_parser::prelude::{FromDer, X509Certificate};

/// A verification error: OpenSSL's number and text (`$ssl_client_verify`
/// says `FAILED:text`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyError {
    pub code: u16,
    pub text: &'static str,
}

const fn err(code: u16, text: &'static str) -> VerifyError {
    VerifyError { code, text }
}

pub const ISSUER: VerifyError = err(2, "unable to get issuer certificate");
pub const NO_CRL: VerifyError = err(3, "unable to get certificate CRL");
pub const SIGNATURE: VerifyError = err(7, "certificate signature failure");
pub const CRL_SIGNATURE: VerifyError = err(8, "CRL signature failure");
pub const NOT_YET_VALID: VerifyError = err(9, "certificate is not yet valid");
pub const EXPIRED: VerifyError = err(10, "certificate has expired");
pub const CRL_NOT_YET_VALID: VerifyError = err(11, "CRL is not yet valid");
pub const CRL_EXPIRED: VerifyError = err(12, "CRL has expired");
pub const SELF_SIGNED: VerifyError = err(18, "self-signed certificate");
pub const SELF_SIGNED_IN_CHAIN: VerifyError =
    err(19, "self-signed certificate in certificate chain");
pub const LOCAL_ISSUER: VerifyError = err(20, "unable to get local issuer certificate");
pub const TOO_LONG: VerifyError = err(22, "certificate chain too long");
pub const REVOKED: VerifyError = err(23, "certificate revoked");
pub const INVALID_CA: VerifyError = err(24, "invalid CA certificate");
pub const UNPARSABLE: VerifyError = err(1, "unable to decode certificate");

impl VerifyError {
    /// Errors `ssl_verify_client optional_no_ca` lets through: the chain
    /// is sound but leads to no trusted certificate.
    pub fn optional(&self) -> bool {
        matches!(self.code, 18 | 19 | 20 | 21 | 27)
    }
}

/// One DER element: its tag, contents, and the whole element.
struct Tlv<'a> {
    tag: u8,
    body: &'a [u8],
    whole: &'a [u8],
}

/// The DER element at the start of `d`, and what follows it.
fn tlv(d: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let tag = *d.first()?;
    let first = *d.get(1)?;
    let (len, head) = if first < 0x80 {
        (first as usize, 2)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for b in d.get(2..2 + n)? {
            len = len << 8 | *b as usize;
        }
        (len, 2 + n)
    };
    let end = head.checked_add(len)?;
    let whole = d.get(..end)?;
    Some((
        Tlv {
            tag,
            body: &whole[head..],
            whole,
        },
        &d[end..],
    ))
}

/// A signed object (certificate, CRL): the signed bytes, the signature
/// algorithm's identifier (contents) and the signature.
struct Signed<'a> {
    tbs: &'a [u8],
    alg: &'a [u8],
    sig: &'a [u8],
}

fn signed(der: &[u8]) -> Option<Signed<'_>> {
    let (outer, _) = tlv(der)?;
    let (tbs, rest) = tlv(outer.body)?;
    let (alg, rest) = tlv(rest)?;
    let (sig, _) = tlv(rest)?;
    (alg.tag == 0x30 && sig.tag == 0x03 && !sig.body.is_empty()).then_some(Signed {
        tbs: tbs.whole,
        alg: alg.body,
        sig: &sig.body[1..],
    })
}

/// Is `s` signed by the key of `spki` (a SubjectPublicKeyInfo, DER)?
fn signed_by(s: &Signed<'_>, spki: &[u8], algs: &WebPkiSupportedAlgorithms) -> bool {
    let Some((key_alg, key)) = public_key(spki) else {
        return false;
    };
    algs.all.iter().any(|a| {
        a.signature_alg_id().as_ref() == s.alg
            && a.public_key_alg_id().as_ref() == key_alg
            && a.verify_signature(key, s.tbs, s.sig).is_ok()
    })
}

/// A SubjectPublicKeyInfo's algorithm identifier (contents) and key bits.
fn public_key(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (info, _) = tlv(spki)?;
    let (key_alg, rest) = tlv(info.body)?;
    let (key, _) = tlv(rest)?;
    Some((key_alg.body, key.body.get(1..)?))
}

/// Verify a signature over `message` made by the key of `cert` (DER) with
/// `scheme`: the client's proof that it holds its certificate's key.
pub fn verify_handshake_signature(
    cert: &[u8],
    message: &[u8],
    scheme: rustls::SignatureScheme,
    signature: &[u8],
    algs: &WebPkiSupportedAlgorithms,
) -> bool {
    let Ok((_, c)) = X509Certificate::from_der(cert) else {
        return false;
    };
    let Some((key_alg, key)) = public_key(c.public_key().raw) else {
        return false;
    };
    let Some((_, candidates)) = algs.mapping.iter().find(|(s, _)| *s == scheme) else {
        return false;
    };
    candidates.iter().any(|a| {
        a.public_key_alg_id().as_ref() == key_alg
            && a.verify_signature(key, message, signature).is_ok()
    })
}

/// What verification needs of a certificate.
struct Cert<'a> {
    der: &'a [u8],
    x: X509Certificate<'a>,
}

impl<'a> Cert<'a> {
    fn parse(der: &'a [u8]) -> Option<Cert<'a>> {
        let (_, x) = X509Certificate::from_der(der).ok()?;
        Some(Cert { der, x })
    }
    fn subject(&self) -> &[u8] {
        self.x.subject().as_raw()
    }
    fn issuer(&self) -> &[u8] {
        self.x.issuer().as_raw()
    }
    fn self_issued(&self) -> bool {
        self.subject() == self.issuer()
    }
    fn issued_by(&self, by: &Cert<'_>, algs: &WebPkiSupportedAlgorithms) -> bool {
        self.issuer() == by.subject()
            && signed(self.der).is_some_and(|s| signed_by(&s, by.x.public_key().raw, algs))
    }
    /// A v3 certificate saying it is no CA cannot issue (v1 ones can, as
    /// OpenSSL lets them).
    fn may_issue(&self) -> bool {
        match self.x.basic_constraints() {
            Ok(Some(bc)) => bc.value.ca,
            Ok(None) => true,
            Err(_) => false,
        }
    }
}

/// The trusted certificates and revocation lists of a server's
/// `ssl_client_certificate`, `ssl_trusted_certificate` and `ssl_crl`.
#[derive(Debug, Default)]
pub struct Trust {
    pub certs: Vec<Vec<u8>>,
    pub crls: Vec<Vec<u8>>,
    /// `ssl_verify_depth`: intermediate certificates allowed between the
    /// client's and the trusted one (OpenSSL ≥ 1.1.0's meaning).
    pub depth: u32,
}

/// Verify a client's chain (its certificate first, then what it sent along)
/// at `now` (Unix seconds), as OpenSSL does with nginx's settings.
pub fn verify(
    chain: &[&[u8]],
    trust: &Trust,
    now: i64,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<(), VerifyError> {
    verified_path(chain, trust, now, algs).map(|_| ())
}

/// [`verify`], giving the path it verified: the client's certificate, each
/// one's issuer, up to the trusted certificate (DER each).
pub fn verified_path(
    chain: &[&[u8]],
    trust: &Trust,
    now: i64,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<Vec<Vec<u8>>, VerifyError> {
    let sent: Vec<Cert<'_>> = chain
        .iter()
        .map(|d| Cert::parse(d))
        .collect::<Option<_>>()
        .ok_or(UNPARSABLE)?;
    let store: Vec<Cert<'_>> = trust.certs.iter().filter_map(|d| Cert::parse(d)).collect();
    let Some(leaf) = sent.first() else {
        return Err(UNPARSABLE);
    };
    // The path: the client's certificate, then issuers, trusted ones first
    // (OpenSSL's X509_V_FLAG_TRUSTED_FIRST), until a trusted self-signed one.
    let mut path: Vec<&Cert<'_>> = vec![leaf];
    let mut trusted = false;
    loop {
        let cur = *path.last().expect("path is never empty");
        if cur.self_issued() && store.iter().any(|s| s.der == cur.der) {
            trusted = true;
            break;
        }
        if path.len() > 32 {
            return Err(TOO_LONG);
        }
        if let Some(i) = store.iter().find(|s| cur.issued_by(s, algs)) {
            if i.der == cur.der {
                trusted = true;
                break;
            }
            path.push(i);
            if i.self_issued() {
                trusted = true;
                break;
            }
            continue;
        }
        match sent[1..]
            .iter()
            .find(|s| s.der != cur.der && cur.issued_by(s, algs))
        {
            Some(i) => path.push(i),
            None => break,
        }
    }
    // As with nginx's OpenSSL callback, checking goes on after an error and
    // the last one found is the result.
    let mut last = None;
    let top = *path.last().expect("path is never empty");
    if !trusted {
        last = Some(if top.self_issued() {
            if path.len() == 1 {
                SELF_SIGNED
            } else {
                SELF_SIGNED_IN_CHAIN
            }
        } else if path.len() == 1 && sent.len() > 1 {
            ISSUER
        } else {
            LOCAL_ISSUER
        });
    }
    // Intermediates: everything between the client's certificate and the
    // trust anchor.
    let intermediates = path.len().saturating_sub(if trusted { 2 } else { 1 });
    if intermediates > trust.depth as usize {
        last = Some(TOO_LONG);
    }
    if path.iter().skip(1).any(|c| !c.may_issue()) {
        last = Some(INVALID_CA);
    }
    if !trust.crls.is_empty() {
        // Every certificate but a self-signed anchor needs its issuer's CRL
        // (nginx sets X509_V_FLAG_CRL_CHECK_ALL).
        for (i, c) in path.iter().enumerate() {
            let issuer = match path.get(i + 1) {
                Some(i) => *i,
                None if c.self_issued() => continue,
                None => {
                    last = Some(NO_CRL);
                    continue;
                }
            };
            if let Err(e) = revocation(c, issuer, &trust.crls, now, algs) {
                last = Some(e);
            }
        }
    }
    // Signatures and validity, from the top down.
    for (i, c) in path.iter().enumerate().rev() {
        let issuer = match path.get(i + 1) {
            Some(i) => Some(*i),
            None if c.self_issued() => Some(*c),
            None => None,
        };
        if issuer.is_some_and(|i| !c.issued_by(i, algs)) {
            last = Some(SIGNATURE);
        }
        let v = c.x.validity();
        if now < v.not_before.timestamp() {
            last = Some(NOT_YET_VALID);
        }
        if now > v.not_after.timestamp() {
            last = Some(EXPIRED);
        }
    }
    match last {
        Some(e) => Err(e),
        None => Ok(path.iter().map(|c| c.der.to_vec()).collect()),
    }
}

/// Is the signed object `der` (certificate, CRL, basic OCSP response:
/// signed part, algorithm, signature first) signed by the key of the
/// certificate `by`?
pub fn signed_by_cert(der: &[u8], by: &[u8], algs: &WebPkiSupportedAlgorithms) -> bool {
    let Some(by) = Cert::parse(by) else {
        return false;
    };
    signed(der).is_some_and(|s| signed_by(&s, by.x.public_key().raw, algs))
}

/// Did `issuer` issue `cert` (names match, signature verifies)?
pub fn issued_by(cert: &[u8], issuer: &[u8], algs: &WebPkiSupportedAlgorithms) -> bool {
    match (Cert::parse(cert), Cert::parse(issuer)) {
        (Some(c), Some(i)) => c.issued_by(&i, algs),
        _ => false,
    }
}

/// Is `c` revoked by its issuer's CRL? A missing, stale or badly signed
/// CRL is an error too.
fn revocation(
    c: &Cert<'_>,
    issuer: &Cert<'_>,
    crls: &[Vec<u8>],
    now: i64,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<(), VerifyError> {
    let mut found = None;
    for der in crls {
        let Ok((_, crl)) = x509_parser::revocation_list::CertificateRevocationList::from_der(der)
        else {
            continue;
        };
        if crl.issuer().as_raw() == issuer.subject() {
            found = Some((der, crl));
            break;
        }
    }
    let Some((der, crl)) = found else {
        return Err(NO_CRL);
    };
    if !signed(der).is_some_and(|s| signed_by(&s, issuer.x.public_key().raw, algs)) {
        return Err(CRL_SIGNATURE);
    }
    if now < crl.last_update().timestamp() {
        return Err(CRL_NOT_YET_VALID);
    }
    if crl.next_update().is_some_and(|t| now > t.timestamp()) {
        return Err(CRL_EXPIRED);
    }
    let serial = c.x.raw_serial();
    if crl
        .iter_revoked_certificates()
        .any(|r| r.raw_serial() == serial)
    {
        return Err(REVOKED);
    }
    Ok(())
}

/// A certificate's details as nginx's `$ssl_client_*` variables give them.
#[derive(Debug, Default, Clone)]
pub struct Details {
    pub subject: String,
    pub issuer: String,
    pub subject_legacy: String,
    pub issuer_legacy: String,
    /// Uppercase hex, as OpenSSL prints it.
    pub serial: String,
    /// `Nov 24 21:23:56 2026 GMT`.
    pub not_before: String,
    pub not_after: String,
    pub not_after_secs: i64,
}

pub fn details(der: &[u8]) -> Option<Details> {
    let (_, c) = X509Certificate::from_der(der).ok()?;
    let mut raw = c.raw_serial();
    while raw.len() > 1 && raw[0] == 0 {
        raw = &raw[1..];
    }
    let v = c.validity();
    Some(Details {
        subject: rfc2253(c.subject()),
        issuer: rfc2253(c.issuer()),
        subject_legacy: oneline(c.subject()),
        issuer_legacy: oneline(c.issuer()),
        serial: raw.iter().map(|b| format!("{b:02X}")).collect(),
        not_before: asn1_time(v.not_before.timestamp()),
        not_after: asn1_time(v.not_after.timestamp()),
        not_after_secs: v.not_after.timestamp(),
    })
}

/// OpenSSL's ASN1_TIME_print form.
fn asn1_time(t: i64) -> String {
    chrono::DateTime::from_timestamp(t, 0)
        .map(|d| d.format("%b %e %H:%M:%S %Y GMT").to_string())
        .unwrap_or_default()
}

/// An attribute's short name (`CN`, `O`), or its dotted number.
fn short_name(oid: &x509_parser::der_parser::oid::Oid<'_>) -> String {
    let reg = x509_parser::objects::oid_registry();
    match x509_parser::objects::oid2abbrev(oid, reg) {
        Ok(s) => match s {
            "emailAddress" => "emailAddress".into(),
            s => s.to_owned(),
        },
        Err(_) => oid.to_id_string(),
    }
}

fn attr_text(a: &x509_parser::x509::AttributeTypeAndValue<'_>) -> Option<String> {
    match a.as_str() {
        Ok(s) => Some(s.to_owned()),
        Err(_) => {
            let tag = a.attr_value().tag();
            use x509_parser::der_parser::asn1_rs::Tag;
            match tag {
                Tag::BmpString => {
                    let b = a.as_slice();
                    let units: Vec<u16> = b
                        .chunks(2)
                        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                        .collect();
                    Some(String::from_utf16_lossy(&units))
                }
                Tag::T61String | Tag::VisibleString | Tag::UniversalString => {
                    Some(String::from_utf8_lossy(a.as_slice()).into_owned())
                }
                _ => None,
            }
        }
    }
}

/// X509_NAME_print_ex with XN_FLAG_RFC2253: last RDN first, `,` between,
/// `+` within a multi-valued one, special characters escaped.
pub fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let rdns: Vec<_> = name.iter_rdn().collect();
    let mut out = String::new();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, a) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            out.push_str(&short_name(a.attr_type()));
            out.push('=');
            match attr_text(a) {
                Some(v) => escape_2253(&v, &mut out),
                None => {
                    out.push('#');
                    for b in a.attr_value().as_bytes() {
                        out.push_str(&format!("{b:02X}"));
                    }
                }
            }
        }
    }
    out
}

fn escape_2253(v: &str, out: &mut String) {
    let n = v.chars().count();
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i + 1 == n && c == ' ');
        if special {
            out.push('\\');
            out.push(c);
        } else if c.is_control() || !c.is_ascii() {
            let mut b = [0; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                out.push_str(&format!("\\{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
}

/// X509_NAME_oneline: `/CN=x/O=y`, in the certificate's order.
pub fn oneline(name: &x509_parser::x509::X509Name<'_>) -> String {
    let mut out = String::new();
    for rdn in name.iter_rdn() {
        for (j, a) in rdn.iter().enumerate() {
            out.push(if j > 0 { '+' } else { '/' });
            out.push_str(&short_name(a.attr_type()));
            out.push('=');
            match attr_text(a) {
                Some(v) => {
                    for c in v.chars() {
                        if c.is_control() || !c.is_ascii() {
                            let mut b = [0; 4];
                            for byte in c.encode_utf8(&mut b).bytes() {
                                out.push_str(&format!("\\x{byte:02X}"));
                            }
                        } else {
                            out.push(c);
                        }
                    }
                }
                None => {
                    for b in a.attr_value().as_bytes() {
                        out.push_str(&format!("\\x{b:02X}"));
                    }
                }
            }
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// The subject of a certificate as a TLS CertificateRequest names it.
pub fn subject_der(cert: &[u8]) -> Option<Vec<u8>> {
    let (_, c) = X509Certificate::from_der(cert).ok()?;
    Some(c.subject().as_raw().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_elements_are_read() {
        let d = [0x30, 0x03, 0x02, 0x01, 0x05, 0xff];
        let (t, rest) = tlv(&d).unwrap();
        assert_eq!(t.tag, 0x30);
        assert_eq!(t.body, &[0x02, 0x01, 0x05]);
        assert_eq!(rest, &[0xff]);
        assert!(tlv(&[0x30, 0x05, 0x00]).is_none());
        let long = [0x04, 0x81, 0x02, 0xaa, 0xbb];
        assert_eq!(tlv(&long).unwrap().0.body, &[0xaa, 0xbb]);
    }

    #[test]
    fn names_escape_as_rfc_2253() {
        let mut s = String::new();
        escape_2253(" a,b+c ", &mut s);
        assert_eq!(s, "\\ a\\,b\\+c\\ ");
        assert_eq!(asn1_time(0), "Jan  1 00:00:00 1970 GMT");
    }

    #[test]
    fn optional_no_ca_lets_untrusted_chains_through() {
        assert!(SELF_SIGNED.optional());
        assert!(LOCAL_ISSUER.optional());
        assert!(!REVOKED.optional());
        assert!(!EXPIRED.optional());
    }
}
