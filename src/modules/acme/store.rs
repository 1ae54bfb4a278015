//! What ACME keeps for the workers: each managed certificate with its
//! current key pair (swapped in whole, read without a lock by handshakes
//! through `$acme_certificate`), the challenge answers waiting for the
//! issuer, and the state folder's files.
//!
//! A managed certificate is one per issuer settings, identifiers and key
//! type: a reload that keeps those keeps it (and its pair), so nothing is
//! ordered again; one no configuration names any more is dropped.

use super::conf::{Issuer, KeyAlg};
use arc_swap::ArcSwapOption;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A certificate chain and its key, as served.
#[derive(Debug)]
pub struct Pair {
    /// `data:` and the chain's PEM: `$acme_certificate`.
    pub cert_var: Box<[u8]>,
    /// `data:` and the key's PEM: `$acme_certificate_key`.
    pub key_var: Box<[u8]>,
    /// The end-entity certificate (DER).
    pub leaf: Vec<u8>,
    /// Validity, seconds since the epoch.
    pub not_before: i64,
    pub not_after: i64,
    pub serial: String,
}

impl Pair {
    /// A pair from PEM texts; `Err` says what is wrong with it.
    pub fn from_pem(chain: &str, key: &str) -> Result<Pair, String> {
        use rustls_pki_types::pem::PemObject;
        let leaf = rustls_pki_types::CertificateDer::pem_slice_iter(chain.as_bytes())
            .next()
            .ok_or("no certificate in it")?
            .map_err(crate::modules::ssl::config::pem_error)?
            .to_vec();
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf)
            .map_err(|e| format!("not a certificate ({e})"))?;
        let v = cert.validity();
        let serial = cert.raw_serial_as_string();
        let (not_before, not_after) = (v.not_before.timestamp(), v.not_after.timestamp());
        let pair = Pair {
            cert_var: [b"data:", chain.as_bytes()].concat().into(),
            key_var: [b"data:", key.as_bytes()].concat().into(),
            leaf,
            not_before,
            not_after,
            serial,
        };
        Ok(pair)
    }

    /// The names the certificate is for (its subject alternative names).
    pub fn names(&self) -> Vec<String> {
        use x509_parser::extensions::GeneralName;
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(&self.leaf) else {
            return Vec::new();
        };
        let Ok(Some(san)) = cert.subject_alternative_name() else {
            return Vec::new();
        };
        san.value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => Some(std::net::IpAddr::from(<[u8; 4]>::try_from(*b).ok()?).to_string()),
                    16 => Some(std::net::IpAddr::from(<[u8; 16]>::try_from(*b).ok()?).to_string()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// PEM bytes held (what counts against `acme_shared_zone`).
    fn size(&self) -> u64 {
        (self.cert_var.len() + self.key_var.len()) as u64
    }
}

/// One certificate ACME keeps issued.
#[derive(Debug)]
pub struct Managed {
    pub issuer: Arc<Issuer>,
    /// The identifiers, in the order configured (the first names the files).
    pub names: Vec<String>,
    pub key: KeyAlg,
    pub pair: ArcSwapOption<Pair>,
    /// `acme_shared_zone`'s size when this certificate was configured.
    pub zone_size: AtomicU64,
    /// A task of the ACME thread keeps it.
    pub(super) started: AtomicBool,
}

impl Managed {
    /// What the log calls it.
    pub fn label(&self) -> String {
        format!(
            "certificate \"{}\" of acme_issuer \"{}\"",
            self.names[0], self.issuer.name
        )
    }

    /// The files it is kept in under `state_path`: (chain, key).
    pub fn files(&self) -> Option<(PathBuf, PathBuf)> {
        let dir = self.issuer.state.as_ref()?;
        let base = self.names[0].replace('*', "_");
        Some((
            dir.join(format!("{base}.crt")),
            dir.join(format!("{base}.key")),
        ))
    }

    /// Does a pair fit this certificate's identifiers?
    pub fn covers(&self, p: &Pair) -> bool {
        let have = p.names();
        self.names.iter().all(|n| have.contains(n))
    }

    /// Install a new pair (the next handshakes use it) unless it would
    /// overflow `acme_shared_zone`; `Err` says so.
    pub fn install(&self, p: Pair) -> Result<(), String> {
        let others: u64 = live()
            .iter()
            .filter(|m| !std::ptr::eq(&***m, self))
            .filter_map(|m| m.pair.load().as_ref().map(|p| p.size()))
            .sum();
        let limit = self.zone_size.load(Ordering::Relaxed);
        if others + p.size() > limit {
            return Err(format!(
                "acme_shared_zone is too small: {} bytes of certificates and keys would be held, {limit} fit",
                others + p.size()
            ));
        }
        self.pair.store(Some(Arc::new(p)));
        Ok(())
    }

    /// Read the pair kept under `state_path`, when it is one for these
    /// identifiers; `Err` for files there that do not do.
    fn load_state(&self) -> Result<Option<Pair>, String> {
        let Some((crt, key)) = self.files() else {
            return Ok(None);
        };
        let (Ok(chain), Ok(k)) = (std::fs::read_to_string(&crt), std::fs::read_to_string(&key))
        else {
            return Ok(None);
        };
        let p = Pair::from_pem(&chain, &k).map_err(|e| format!("\"{}\": {e}", crt.display()))?;
        if !self.covers(&p) {
            return Err(format!(
                "\"{}\" is not for {}",
                crt.display(),
                self.names.join(", ")
            ));
        }
        Ok(Some(p))
    }
}

/// Every managed certificate some configuration names.
static MANAGED: Mutex<Vec<Weak<Managed>>> = Mutex::new(Vec::new());

/// The managed certificates alive.
pub fn live() -> Vec<Arc<Managed>> {
    let mut all = MANAGED.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|w| w.strong_count() > 0);
    all.iter().filter_map(Weak::upgrade).collect()
}

/// The managed certificate for these settings: the one a configuration
/// already has, or a new one with the pair `state_path` keeps (logged).
pub fn managed(issuer: &Arc<Issuer>, names: Vec<String>, key: KeyAlg, zone: u64) -> Arc<Managed> {
    let mut all = MANAGED.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|w| w.strong_count() > 0);
    let found = all
        .iter()
        .filter_map(Weak::upgrade)
        .find(|m| *m.issuer == **issuer && m.names == names && m.key == key);
    if let Some(m) = found {
        m.zone_size.store(zone, Ordering::Relaxed);
        return m;
    }
    let m = Arc::new(Managed {
        issuer: issuer.clone(),
        names,
        key,
        pair: ArcSwapOption::empty(),
        zone_size: AtomicU64::new(zone),
        started: AtomicBool::new(false),
    });
    match m.load_state() {
        Ok(Some(p)) => {
            crate::error_log!(
                Notice,
                "acme: {} loaded from \"{}\", serial {}, valid until {}",
                m.label(),
                m.issuer.state.as_deref().unwrap_or(Path::new("")).display(),
                p.serial,
                super::client::date(p.not_after)
            );
            m.pair.store(Some(Arc::new(p)));
        }
        Ok(None) => {}
        Err(why) => crate::error_log!(Warn, "acme: {} not reused: {why}", m.label()),
    }
    all.push(Arc::downgrade(&m));
    m
}

/// Make the state folder (0700: it holds private keys).
pub fn state_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            format!(
                "cannot create \"{}\": {}",
                dir.display(),
                crate::core::errlog::errno_text(&e)
            )
        })
}

/// Write a state file whole (a temporary file renamed into place), with
/// `mode`.
pub fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        state_dir(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let fail = |e: std::io::Error| {
        format!(
            "cannot write \"{}\": {}",
            path.display(),
            crate::core::errlog::errno_text(&e)
        )
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(fail)?;
    f.write_all(data).and_then(|_| f.sync_all()).map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}

/// The answers waiting for the issuer's validation.
#[derive(Default)]
struct Pending {
    /// HTTP-01: token → key authorization.
    http: HashMap<String, String>,
    /// TLS-ALPN-01: identifier → its challenge certificate.
    alpn: HashMap<String, Arc<rustls::sign::CertifiedKey>>,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);

fn pending<R>(f: impl FnOnce(&mut Pending) -> R) -> R {
    let mut p = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    f(p.get_or_insert_with(Pending::default))
}

pub fn set_http(token: &str, key_authorization: Option<String>) {
    pending(|p| match key_authorization {
        Some(k) => p.http.insert(token.to_string(), k),
        None => p.http.remove(token),
    });
}

/// The key authorization for an HTTP-01 token.
pub fn http_answer(token: &str) -> Option<String> {
    pending(|p| p.http.get(token).cloned())
}

pub fn set_alpn(name: &str, cert: Option<Arc<rustls::sign::CertifiedKey>>) {
    pending(|p| match cert {
        Some(c) => p.alpn.insert(name.to_string(), c),
        None => p.alpn.remove(name),
    });
}

/// The TLS-ALPN-01 certificate for a name, while its challenge waits.
pub fn alpn_certificate(name: &str) -> Option<Arc<rustls::sign::CertifiedKey>> {
    pending(|p| p.alpn.get(&name.to_ascii_lowercase()).cloned())
}
