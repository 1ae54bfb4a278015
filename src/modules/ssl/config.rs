//! A server's TLS settings turned into rustls configurations: certificates
//! loaded and checked, protocols and cipher suites mapped, the session store
//! and ticket keys shared by all workers and kept across reloads.

use super::conf::{CipherRule, PemFile, SessionCache, SslConf};
use crate::conf::ast::{ConfError, Span};
use crate::core::module::{ListenBuild, ServerBuild, StreamServerBuild};
use crate::core::route::Server;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, SupportedCipherSuite};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A server's TLS side, one rustls configuration per ALPN offer.
#[derive(Debug)]
pub enum ServerTls {
    /// Handshakes offering `http/1.1` only, and `h2` then `http/1.1` (a
    /// stream server's both offer its `ssl_alpn`).
    Accept {
        h1: Arc<ServerConfig>,
        h2: Arc<ServerConfig>,
        /// `ssl_verify_client`: how a client's certificate is judged.
        client: Option<Arc<super::client::ClientAuth>>,
        /// Certificates named with variables, loaded per handshake.
        dynamic: Option<Arc<Dynamic>>,
    },
    /// `ssl_reject_handshake on`.
    Reject,
}

/// What a server's handshakes agree on by ALPN.
#[derive(Clone, Copy, Debug)]
pub enum Alpn<'a> {
    /// http's: `http/1.1`, with `h2` before it on an `http2` address.
    Http,
    /// A stream server's `ssl_alpn` protocols (none: no ALPN).
    Stream(&'a [Vec<u8>]),
}

/// Build a server's TLS side; `None` when it has no certificate (and does
/// not reject handshakes). `files` caches the key pairs read in this load.
pub fn build(
    conf: &SslConf,
    alpn: Alpn<'_>,
    names: super::ocsp::Names,
    files: &mut KeyFiles,
    notices: &mut Vec<String>,
) -> Result<Option<ServerTls>, ConfError> {
    if conf.reject_handshake {
        return Ok(Some(ServerTls::Reject));
    }
    if conf.certificates.is_empty() {
        return Ok(None);
    }
    let commanded;
    let conf = match conf.conf_commands.is_empty() {
        true => conf,
        false => {
            commanded = with_commands(conf);
            &commanded
        }
    };
    if conf.keys.len() < conf.certificates.len() {
        let c = &conf.certificates[conf.keys.len()];
        return Err(ConfError::new(
            format!(
                "no \"ssl_certificate_key\" is defined for certificate \"{}\"",
                c.path.display()
            ),
            &c.span,
        ));
    }
    if let Some(k) = conf.keys.get(conf.certificates.len()) {
        return Err(ConfError::new(
            format!(
                "no \"ssl_certificate\" to pair with the key \"{}\"",
                k.path.display()
            ),
            &k.span,
        ));
    }
    let provider = Arc::new(provider(conf)?);
    let passwords = match &conf.password_file {
        Some(f) => super::password::read(f)?,
        None => Vec::new(),
    };
    let dynamic = conf
        .certificates
        .iter()
        .chain(conf.keys.iter())
        .any(|f| f.vars.is_some())
        .then(|| {
            Arc::new(Dynamic {
                pairs: conf
                    .certificates
                    .iter()
                    .cloned()
                    .zip(conf.keys.iter().cloned())
                    .collect(),
                passwords: passwords.clone(),
                provider: provider.clone(),
                loaded: Mutex::new(HashMap::new()),
            })
        });
    let mut keys = Vec::new();
    if dynamic.is_none() {
        for (c, k) in conf.certificates.iter().zip(conf.keys.iter()) {
            keys.push(files.load(c, k, &passwords, &provider)?);
        }
    }
    let mut staplers = Vec::new();
    if conf.stapling {
        match (&conf.stapling_file, &dynamic) {
            (Some(f), None) => {
                let der = f.read().map_err(|why| {
                    ConfError::new(
                        format!("cannot load \"{}\": {why}", f.path.display()),
                        &f.span,
                    )
                })?;
                // Every certificate of the server staples the response, as nginx.
                for k in keys.iter_mut() {
                    let mut stapled = (**k).clone();
                    stapled.ocsp = Some(der.clone());
                    *k = Arc::new(stapled);
                }
            }
            (Some(_), Some(_)) | (None, Some(_)) => notices.push(format!(
                "\"ssl_stapling\" ignored, not supported with certificates loaded dynamically in {}",
                conf.certificates[0].span
            )),
            (None, None) => {
                staplers = stapling(conf, &keys, names.clone(), &provider, notices)?;
            }
        }
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (conf.protocols.tls13, &rustls::version::TLS13),
        (conf.protocols.tls12, &rustls::version::TLS12),
    ]
    .into_iter()
    .filter_map(|(on, v)| on.then_some(v))
    .collect();
    let span = &conf.certificates[0].span;
    let client = super::client::build(conf, provider.signature_verification_algorithms, names)?;
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| ConfError::new(format!("TLS settings refused: {e}"), span))?;
    let builder = match &client {
        Some((verifier, _)) => builder.with_client_cert_verifier(verifier.clone()),
        None => builder.with_no_client_auth(),
    };
    let mut c = builder.with_cert_resolver(Arc::new(Certificates::new(keys, staplers)));
    c.ignore_client_order = conf.prefer_server_ciphers;
    c.max_fragment_size = Some(conf.buffer_size);
    c.session_storage = match &conf.session_cache {
        SessionCache::Off => Arc::new(rustls::server::NoServerSessionStorage {}),
        SessionCache::Store { name, sessions } => Arc::new(Expiring {
            inner: session_store(name, *sessions),
            timeout: conf.session_timeout,
        }),
    };
    if conf.session_tickets {
        let inner: Arc<dyn ProducesTickets> = if conf.ticket_keys.is_empty() {
            ticketer().map_err(|e| ConfError::new(format!("TLS tickets: {e}"), span))?
        } else {
            let lifetime = conf.session_timeout.as_secs().min(u32::MAX as u64) as u32;
            Arc::new(super::tickets::TicketKeys::load(
                &conf.ticket_keys,
                lifetime,
            )?)
        };
        c.ticketer = Arc::new(Expiring {
            inner,
            timeout: conf.session_timeout,
        });
    } else if matches!(conf.session_cache, SessionCache::Off) {
        c.send_tls13_tickets = 0;
    } else {
        // No tickets, but a session cache: TLS 1.3 clients still get a
        // ticket that only names their cached session (stateful resumption),
        // as OpenSSL gives them under nginx.
        c.send_tls13_tickets = 1;
    }
    let (h1, h2) = match alpn {
        Alpn::Http => {
            let h1 = {
                let mut c = c.clone();
                c.alpn_protocols = vec![b"http/1.1".to_vec()];
                Arc::new(c)
            };
            c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            (h1, Arc::new(c))
        }
        Alpn::Stream(protocols) => {
            c.alpn_protocols = protocols.to_vec();
            let c = Arc::new(c);
            (c.clone(), c)
        }
    };
    Ok(Some(ServerTls::Accept {
        h1,
        h2,
        client: client.map(|(_, auth)| auth),
        dynamic,
    }))
}

/// The ring provider restricted to the configured cipher suites and groups.
fn provider(conf: &SslConf) -> Result<CryptoProvider, ConfError> {
    let mut p = rustls::crypto::ring::default_provider();
    if let Some((rules, span)) = &conf.ciphers {
        let tls13 = p
            .cipher_suites
            .iter()
            .filter(|s| s.tls13().is_some())
            .copied();
        let tls12 = select_suites(rules, &p.cipher_suites);
        if tls12.is_empty() && conf.protocols.tls12 {
            return Err(ConfError::new(
                "\"ssl_ciphers\" leaves no TLS 1.2 cipher suite vireo has (ECDHE with AES-GCM or CHACHA20-POLY1305)",
                span,
            ));
        }
        p.cipher_suites = tls13.chain(tls12).collect();
    }
    if let Some(groups) = &conf.ecdh_curve {
        let all = p.kx_groups.clone();
        p.kx_groups = groups
            .iter()
            .filter_map(|g| {
                all.iter()
                    .find(|k| format!("{:?}", k.name()) == *g)
                    .copied()
            })
            .collect();
    }
    Ok(p)
}

/// The TLS 1.2 suites an OpenSSL cipher string selects, in its order.
pub fn select_suites(
    rules: &[CipherRule],
    all: &[SupportedCipherSuite],
) -> Vec<SupportedCipherSuite> {
    let tls12: Vec<_> = all.iter().filter(|s| s.tls13().is_none()).collect();
    let mut out: Vec<SupportedCipherSuite> = Vec::new();
    let mut removed: Vec<SupportedCipherSuite> = Vec::new();
    for rule in rules {
        match rule {
            CipherRule::Add(parts) => {
                for s in &tls12 {
                    if parts.iter().all(|p| matches(p, s))
                        && !out.contains(s)
                        && !removed.contains(s)
                    {
                        out.push(**s);
                    }
                }
            }
            CipherRule::Remove(parts) => {
                for s in &tls12 {
                    if parts.iter().all(|p| matches(p, s)) {
                        out.retain(|o| o != *s);
                        removed.push(**s);
                    }
                }
            }
        }
    }
    out
}

/// A key-exchange group's name as OpenSSL (and so nginx's `$ssl_curve`)
/// writes it.
pub fn group_name(g: rustls::NamedGroup) -> &'static str {
    use rustls::NamedGroup as G;
    match g {
        G::X25519 => "X25519",
        G::X448 => "X448",
        G::secp256r1 => "prime256v1",
        G::secp384r1 => "secp384r1",
        G::secp521r1 => "secp521r1",
        G::X25519MLKEM768 => "X25519MLKEM768",
        G::FFDHE2048 => "ffdhe2048",
        G::FFDHE3072 => "ffdhe3072",
        G::FFDHE4096 => "ffdhe4096",
        _ => "unknown",
    }
}

/// A cipher suite as OpenSSL names it, or its number.
pub fn suite_name(c: rustls::CipherSuite) -> String {
    rustls::crypto::ring::ALL_CIPHER_SUITES
        .iter()
        .find(|s| s.suite() == c)
        .map(openssl_name)
        .unwrap_or_else(|| format!("0x{:04x}", u16::from(c)))
}

/// The cipher suites a client offered, `:`-separated (`$ssl_ciphers`).
pub fn offered_ciphers(suites: &[rustls::CipherSuite]) -> Box<str> {
    let names: Vec<String> = suites.iter().map(|&c| suite_name(c)).collect();
    names.join(":").into()
}

/// The groups a client offered, `:`-separated (`$ssl_curves`).
pub fn offered_curves(groups: &[rustls::NamedGroup]) -> Box<str> {
    let names: Vec<String> = groups
        .iter()
        .map(|&g| match group_name(g) {
            "unknown" => format!("0x{:04x}", u16::from(g)),
            name => name.to_string(),
        })
        .collect();
    names.join(":").into()
}

/// A suite's name as OpenSSL (and so nginx's `$ssl_cipher`) writes it.
pub fn openssl_name(s: &SupportedCipherSuite) -> String {
    let name = format!("{:?}", s.suite()); // TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
    if s.tls13().is_some() {
        // rustls says TLS13_AES_128_GCM_SHA256, OpenSSL TLS_AES_128_GCM_SHA256.
        return name.replacen("TLS13_", "TLS_", 1);
    }
    let ecdsa = name.contains("_ECDSA_");
    let aes128 = name.contains("AES_128");
    let chacha = name.contains("CHACHA20");
    format!(
        "ECDHE-{}-{}",
        if ecdsa { "ECDSA" } else { "RSA" },
        if chacha {
            "CHACHA20-POLY1305".to_string()
        } else {
            format!(
                "AES{}-GCM-{}",
                if aes128 { 128 } else { 256 },
                if aes128 { "SHA256" } else { "SHA384" }
            )
        }
    )
}

/// Does one component of an OpenSSL cipher string select this suite?
/// rustls's TLS 1.2 suites are all ECDHE key exchange with AEAD ciphers.
fn matches(part: &str, s: &SupportedCipherSuite) -> bool {
    let name = format!("{:?}", s.suite());
    let ecdsa = name.contains("_ECDSA_");
    let aes128 = name.contains("AES_128");
    let aes256 = name.contains("AES_256");
    let chacha = name.contains("CHACHA20");
    match part {
        "ALL"
        | "DEFAULT"
        | "HIGH"
        | "ECDHE"
        | "EECDH"
        | "kEECDH"
        | "kECDHE"
        | "AEAD"
        | "TLSv1.2"
        | "FIPS"
        | "COMPLEMENTOFDEFAULT" => true,
        "aRSA" => !ecdsa,
        "aECDSA" | "ECDSA" => ecdsa,
        "AESGCM" | "AES" => aes128 || aes256,
        "AES128" => aes128,
        "AES256" => aes256,
        "CHACHA20" | "CHACHA20-POLY1305" => chacha,
        "SHA256" => !aes256,
        "SHA384" => aes256,
        p => p == openssl_name(s),
    }
}

/// The first certificate whose key can sign with a scheme the client
/// offers, with its stapled OCSP response when it has a stapler.
#[derive(Debug)]
pub struct Certificates {
    keys: Vec<Arc<CertifiedKey>>,
    staplers: Vec<Option<Arc<super::stapling::Stapler>>>,
}

impl Certificates {
    /// `staplers` pair with `keys` in order (missing ones: none).
    pub fn new(
        keys: Vec<Arc<CertifiedKey>>,
        staplers: Vec<Option<Arc<super::stapling::Stapler>>>,
    ) -> Certificates {
        Certificates { keys, staplers }
    }
}

/// A stapler for each certificate that can have one; a notice for each
/// that cannot (no issuer, no responder), as nginx warns.
fn stapling(
    conf: &SslConf,
    keys: &[Arc<CertifiedKey>],
    names: super::ocsp::Names,
    provider: &CryptoProvider,
    notices: &mut Vec<String>,
) -> Result<Vec<Option<Arc<super::stapling::Stapler>>>, ConfError> {
    let mut store = Vec::new();
    for f in [&conf.trusted_certificate, &conf.client_certificate]
        .into_iter()
        .flatten()
    {
        store.extend(super::client::certificates(f)?);
    }
    let mut out = Vec::new();
    for (k, f) in keys.iter().zip(conf.certificates.iter()) {
        let chain: Vec<Vec<u8>> = k.cert.iter().map(|c| c.as_ref().to_vec()).collect();
        let setup = super::stapling::Setup {
            name: f.path.display().to_string(),
            chain: &chain,
            store: &store,
            responder: conf.stapling_responder.as_ref(),
            verify: conf.stapling_verify,
            names: names.clone(),
            algs: provider.signature_verification_algorithms,
        };
        match super::stapling::Stapler::new(setup) {
            Ok(s) => out.push(Some(Arc::new(s))),
            Err(why) => {
                notices.push(format!("{why} in {}", f.span));
                out.push(None);
            }
        }
    }
    Ok(out)
}

/// How many key pairs named with variables a configuration keeps read
/// before it lets them all go.
const MAX_LOADED: usize = 64;

/// `ssl_certificate` / `ssl_certificate_key` with variables: the names are
/// rendered for each handshake and each pair read once per configuration
/// load, then kept by its file names.
#[derive(Debug)]
pub struct Dynamic {
    pairs: Vec<(PemFile, PemFile)>,
    passwords: Vec<String>,
    provider: Arc<CryptoProvider>,
    loaded: Mutex<HashMap<(std::path::PathBuf, std::path::PathBuf), Arc<CertifiedKey>>>,
}

impl Dynamic {
    /// The key pairs the names render to; why one cannot be read otherwise.
    pub fn keys(
        &self,
        render: &dyn Fn(&crate::core::vars::Template) -> Vec<u8>,
    ) -> Result<Vec<Arc<CertifiedKey>>, String> {
        let name = |f: &PemFile| match &f.vars {
            Some((t, prefix)) => {
                let rendered = render(t);
                let named = std::path::Path::new(std::ffi::OsStr::from_bytes(&rendered));
                PemFile {
                    path: match rendered.starts_with(b"data:") || rendered.is_empty() {
                        true => named.to_path_buf(),
                        false => prefix.join(named),
                    },
                    span: f.span.clone(),
                    vars: None,
                }
            }
            None => f.clone(),
        };
        let mut keys = Vec::new();
        for (c, k) in &self.pairs {
            let (c, k) = (name(c), name(k));
            let id = (c.path.clone(), k.path.clone());
            let cached = self
                .loaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&id)
                .cloned();
            let pair = match cached {
                Some(p) => p,
                None => {
                    if c.path.as_os_str().is_empty() {
                        return Err(format!(
                            "\"ssl_certificate\" in {} is empty (no certificate yet)",
                            c.span
                        ));
                    }
                    let p = Arc::new(
                        load_pair(&c, &k, &self.passwords, &self.provider).map_err(|e| e.msg)?,
                    );
                    let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
                    // `data:` values change with the certificate they hold
                    // (ACME renewals): those of the past are let go.
                    if loaded.len() >= MAX_LOADED {
                        loaded.clear();
                    }
                    loaded.insert(id, p.clone());
                    p
                }
            };
            keys.push(pair);
        }
        Ok(keys)
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let schemes = hello.signature_schemes();
        let i = self
            .keys
            .iter()
            .position(|k| k.key.choose_scheme(schemes).is_some())
            .unwrap_or(0);
        let key = self.keys.get(i)?;
        Some(match self.staplers.get(i) {
            Some(Some(s)) => s.key(key),
            _ => key.clone(),
        })
    }
}

/// Key pairs read during one configuration load, by file names: servers
/// sharing a certificate share one copy.
#[derive(Default)]
pub struct KeyFiles(HashMap<(std::path::PathBuf, std::path::PathBuf), Arc<CertifiedKey>>);

impl KeyFiles {
    fn load(
        &mut self,
        cert: &PemFile,
        key: &PemFile,
        passwords: &[String],
        provider: &CryptoProvider,
    ) -> Result<Arc<CertifiedKey>, ConfError> {
        let id = (cert.path.clone(), key.path.clone());
        if let Some(k) = self.0.get(&id) {
            return Ok(k.clone());
        }
        let k = Arc::new(load_pair(cert, key, passwords, provider)?);
        self.0.insert(id, k.clone());
        Ok(k)
    }
}

fn load_pair(
    cert: &PemFile,
    key: &PemFile,
    passwords: &[String],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, ConfError> {
    let err = |f: &PemFile, why: String| {
        ConfError::new(
            format!("cannot load \"{}\": {why}", f.path.display()),
            &f.span,
        )
    };
    let cert_pem = cert.read().map_err(|e| err(cert, e))?;
    let key_pem = key.read().map_err(|e| err(key, e))?;
    pair_from_pem(&cert_pem, &key_pem, passwords, provider).map_err(|e| match e {
        PairError::Cert(why) => err(cert, why),
        PairError::Key(why) => err(key, why),
        PairError::Mismatch => ConfError::new(
            format!(
                "the key \"{}\" does not belong to the certificate \"{}\"",
                key.path.display(),
                cert.path.display()
            ),
            &key.span,
        ),
    })
}

/// A certificate chain and its key read from PEM files (a TLS client's
/// certificate); an encrypted (PKCS#8) key is opened with the first of
/// `passwords` that fits. `Err` says why, as nginx does.
pub fn load_key_pair(
    cert: &std::path::Path,
    key: &std::path::Path,
    passwords: &[String],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, String> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| {
            format!(
                "cannot load \"{}\": {}",
                p.display(),
                crate::core::errlog::errno_text(&e)
            )
        })
    };
    let (cert_pem, key_pem) = (read(cert)?, read(key)?);
    pair_from_pem(&cert_pem, &key_pem, passwords, provider).map_err(|e| match e {
        PairError::Cert(why) => format!("cannot load \"{}\": {why}", cert.display()),
        PairError::Key(why) => format!("cannot load \"{}\": {why}", key.display()),
        PairError::Mismatch => format!(
            "the key \"{}\" does not belong to the certificate \"{}\"",
            key.display(),
            cert.display()
        ),
    })
}

/// What is wrong with a certificate and key pair.
enum PairError {
    Cert(String),
    Key(String),
    Mismatch,
}

/// A certificate chain and its key from PEM text.
fn pair_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    passwords: &[String],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, PairError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PairError::Cert(pem_error(e)))?;
    if chain.is_empty() {
        return Err(PairError::Cert("no certificate in it".into()));
    }
    let der = match PrivateKeyDer::from_pem_slice(key_pem) {
        Ok(der) => der,
        Err(rustls_pki_types::pem::Error::NoItemsFound) => {
            super::password::decrypt_key(key_pem, passwords).map_err(PairError::Key)?
        }
        Err(e) => return Err(PairError::Key(pem_error(e))),
    };
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| PairError::Key(format!("unusable private key ({e})")))?;
    let pair = CertifiedKey::new(chain, signing);
    keys_match(&pair).map_err(|_| PairError::Mismatch)?;
    Ok(pair)
}

/// Does the private key belong to the end-entity certificate? rustls's own
/// check parses the certificate with webpki, which refuses X.509 v1
/// certificates (`openssl req -x509` without extensions makes those, and
/// OpenSSL-based servers serve them); this one only reads its public key.
fn keys_match(pair: &CertifiedKey) -> Result<(), ()> {
    let key = pair.key.public_key().ok_or(())?;
    let (_, cert) = x509_parser::parse_x509_certificate(pair.cert.first().ok_or(())?.as_ref())
        .map_err(|_| ())?;
    match cert.public_key().raw == key.as_ref() {
        true => Ok(()),
        false => Err(()),
    }
}

/// A PEM file's problem in words.
pub fn pem_error(e: rustls_pki_types::pem::Error) -> String {
    match e {
        rustls_pki_types::pem::Error::Io(e) => crate::core::errlog::errno_text(&e),
        rustls_pki_types::pem::Error::NoItemsFound => {
            "no PEM section of the expected kind in it".into()
        }
        e => format!("not valid PEM ({e:?})"),
    }
}

/// Session stores by name, for all workers and across reloads (`builtin`
/// stores have the empty name).
fn session_store(name: &str, sessions: usize) -> Arc<dyn StoresServerSessions> {
    type Stores = HashMap<(String, usize), Arc<dyn StoresServerSessions>>;
    static STORES: Mutex<Option<Stores>> = Mutex::new(None);
    let mut s = STORES.lock().unwrap_or_else(|e| e.into_inner());
    s.get_or_insert_with(HashMap::new)
        .entry((name.to_owned(), sessions))
        .or_insert_with(|| rustls::server::ServerSessionMemoryCache::new(sessions))
        .clone()
}

/// One ticket-key rotator for the process: tickets issued before a reload
/// still resume after it.
fn ticketer() -> Result<Arc<dyn ProducesTickets>, rustls::Error> {
    static TICKETER: Mutex<Option<Arc<dyn ProducesTickets>>> = Mutex::new(None);
    let mut t = TICKETER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = &*t {
        return Ok(t.clone());
    }
    let new = rustls::crypto::ring::Ticketer::new()?;
    *t = Some(new.clone());
    Ok(new)
}

/// `ssl_session_timeout` over a session store or a ticketer: what it keeps
/// carries the time it was made, and is refused once older than the timeout.
#[derive(Debug)]
struct Expiring<T: ?Sized> {
    inner: Arc<T>,
    timeout: Duration,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Length of the identifier a stored session carries (`$ssl_session_id`).
const ID_LEN: usize = 32;

thread_local! {
    /// The identifier of the session a handshake on this thread stored or
    /// resumed last: rustls runs both inside the handshake's calls, which
    /// [`take_session_id`] follows.
    static SESSION_ID: std::cell::Cell<Option<[u8; ID_LEN]>> = const { std::cell::Cell::new(None) };
}

/// The identifier of the session the last handshake call stored or resumed.
pub fn take_session_id() -> Option<[u8; ID_LEN]> {
    SESSION_ID.with(|c| c.take())
}

/// A session's value as kept: when it was made, its identifier, the value.
fn stamped(v: &[u8]) -> Vec<u8> {
    let mut id = [0u8; ID_LEN];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id);
    SESSION_ID.with(|c| c.set(Some(id)));
    let mut out = Vec::with_capacity(8 + ID_LEN + v.len());
    out.extend_from_slice(&now_secs().to_be_bytes());
    out.extend_from_slice(&id);
    out.extend_from_slice(v);
    out
}

/// The value under its stamp, if still fresh.
fn fresh(v: Vec<u8>, timeout: Duration) -> Option<Vec<u8>> {
    let made = u64::from_be_bytes(v.get(..8)?.try_into().ok()?);
    let id: [u8; ID_LEN] = v.get(8..8 + ID_LEN)?.try_into().ok()?;
    if now_secs().saturating_sub(made) >= timeout.as_secs().max(1) {
        return None;
    }
    SESSION_ID.with(|c| c.set(Some(id)));
    Some(v[8 + ID_LEN..].to_vec())
}

impl StoresServerSessions for Expiring<dyn StoresServerSessions> {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.inner.put(key, stamped(&value))
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        fresh(self.inner.get(key)?, self.timeout)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        fresh(self.inner.take(key)?, self.timeout)
    }
    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

impl ProducesTickets for Expiring<dyn ProducesTickets> {
    fn enabled(&self) -> bool {
        self.inner.enabled()
    }
    fn lifetime(&self) -> u32 {
        self.inner
            .lifetime()
            .min(self.timeout.as_secs().min(u32::MAX as u64) as u32)
    }
    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.inner.encrypt(&stamped(plain))
    }
    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        fresh(self.inner.decrypt(cipher)?, self.timeout)
    }
}

/// A server on a TLS address without a certificate: nginx's message.
/// The settings with their `ssl_conf_command`s carried out.
fn with_commands(conf: &SslConf) -> SslConf {
    use super::conf::ConfCommand;
    let mut c = conf.clone();
    for cmd in conf.conf_commands.iter() {
        match cmd {
            ConfCommand::Tickets(on) => c.session_tickets = *on,
            ConfCommand::ServerPreference(on) => c.prefer_server_ciphers = *on,
            ConfCommand::Certificate(f) => c.certificates = Arc::from(vec![f.clone()]),
            ConfCommand::PrivateKey(f) => c.keys = Arc::from(vec![f.clone()]),
        }
    }
    c
}

/// A server was resolved: its TLS side, from its ssl settings, in its
/// module data (`Arc<ServerTls>`) when it has certificates.
pub fn build_server(b: &mut ServerBuild<'_>) -> Result<(), ConfError> {
    if b.conf.get::<SslConf>().enable {
        for l in b.listens.iter_mut() {
            l.ssl = true;
        }
    }
    install(b.conf, Alpn::Http, b.env, b.ext)
}

/// A stream server was resolved: its TLS side, as an http server's, its
/// handshakes agreeing on its `ssl_alpn` protocols.
pub fn build_stream_server(b: &mut StreamServerBuild<'_>) -> Result<(), ConfError> {
    let alpn = b.conf.get::<SslConf>().alpn.clone();
    install(b.conf, Alpn::Stream(&alpn), b.env, b.ext)
}

/// A server's TLS side built from its level's settings into its module
/// data, when it has one.
fn install(
    conf: &crate::conf::model::LocConf,
    alpn: Alpn<'_>,
    env: &mut crate::conf::table::Env,
    ext: &mut crate::core::module::Extensions,
) -> Result<(), ConfError> {
    let files = env.ext.entry::<KeyFiles>();
    let r = conf.get::<crate::upstream::resolver::ResolverConf>();
    let names = r.resolver.clone().map(|r2| (r2, r.timeout));
    if let Some(tls) = build(conf.get::<SslConf>(), alpn, names, files, &mut env.notices)? {
        ext.insert(Arc::new(tls));
    }
    Ok(())
}

/// The TLS side of a server, when it has one.
pub fn of(server: &Server) -> Option<&Arc<ServerTls>> {
    server.ext.get::<Arc<ServerTls>>()
}

/// The default server of a `listen … ssl` (or `quic`) address needs a certificate;
/// the handshakes of other servers without one use it (as nginx).
pub fn check_listen(l: &ListenBuild<'_>) -> Result<(), ConfError> {
    if !l.stream && matches!(l.spec.addr, crate::conf::model::ListenAddr::Udp(_)) {
        return super::quic::check_listen(l);
    }
    match l.default {
        s if l.spec.ssl && of(s).is_none() => Err(no_certificate(&l.spec.span, s.name())),
        _ => Ok(()),
    }
}

fn no_certificate(listen: &Span, server: &str) -> ConfError {
    ConfError::new(
        format!(
            "no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive (server \"{server}\")"
        ),
        listen,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(rules: &str) -> Vec<String> {
        let rules = super::super::conf::cipher_rules(rules);
        select_suites(
            &rules,
            &rustls::crypto::ring::default_provider().cipher_suites,
        )
        .iter()
        .map(|s| format!("{:?}", s.suite()))
        .collect()
    }

    #[test]
    fn openssl_cipher_strings_select_rustls_suites() {
        assert_eq!(names("HIGH:!aNULL:!MD5").len(), 6);
        assert_eq!(
            names("ECDHE-RSA-AES128-GCM-SHA256:DES-CBC3-SHA"),
            ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]
        );
        assert!(names("ECDHE+AESGCM").iter().all(|n| n.contains("GCM")));
        assert_eq!(names("ECDHE+AESGCM").len(), 4);
        assert!(
            names("aECDSA+CHACHA20")
                .iter()
                .all(|n| n.contains("ECDSA") && n.contains("CHACHA"))
        );
        assert!(names("ALL:!ECDSA").iter().all(|n| !n.contains("ECDSA")));
        assert!(names("RC4-SHA:DES-CBC3-SHA").is_empty());
    }

    #[test]
    fn expired_values_are_refused() {
        let v = stamped(b"abc");
        assert_eq!(
            fresh(v.clone(), Duration::from_secs(60)).as_deref(),
            Some(&b"abc"[..])
        );
        let mut old = v;
        old[..8].copy_from_slice(&(now_secs() - 120).to_be_bytes());
        assert_eq!(fresh(old, Duration::from_secs(60)), None);
    }
}
