//! The ACME client: one thread of its own (a current-thread runtime),
//! started by the first worker tick that finds a managed certificate, with
//! a task per certificate that orders it, answers the challenges, installs
//! and keeps what was issued, and renews it. Nothing here runs on a worker.
//!
//! A task sleeps until its certificate is due: at once without one, else
//! at a random point of the renewal window the issuer suggests (RFC 9773,
//! asked again when its `Retry-After` is up), or at two thirds of the
//! lifetime when the issuer offers no renewal information. A failure waits
//! before the next try: 5 s doubling up to 1 h while the issuer cannot be
//! reached, 1 min doubling up to 1 h when it refused, an hour when it
//! limited the rate. Accounts are kept per issuer (in `state_path` as
//! `account.json`) and shared by its certificates.

use super::chain;
use super::conf::{AccountKey, Challenge, Issuer};
use super::store::{self, Managed, Pair};
use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, OrderStatus, RetryPolicy,
};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Why an attempt failed, which decides the wait before the next.
#[derive(Debug)]
pub enum Failure {
    /// The issuer (or the DNS server) could not be reached.
    Unreachable(String),
    /// The issuer refused, or what it sent does not do.
    Refused(String),
    /// The issuer limits the rate.
    RateLimited(String),
    /// The issuer asked to come back at a given time.
    Later(String, Duration),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unreachable(s)
            | Failure::Refused(s)
            | Failure::RateLimited(s)
            | Failure::Later(s, _) => f.write_str(s),
        }
    }
}

impl From<instant_acme::Error> for Failure {
    fn from(e: instant_acme::Error) -> Failure {
        use instant_acme::Error as E;
        match e {
            E::Api(p) if p.r#type.as_deref() == Some("urn:ietf:params:acme:error:rateLimited") => {
                Failure::RateLimited(p.to_string())
            }
            E::Api(p) => Failure::Refused(p.to_string()),
            E::Timeout(Some(at)) => Failure::Later(
                "the issuer is still processing the order".into(),
                at.saturating_duration_since(std::time::Instant::now()),
            ),
            E::Timeout(None) => {
                Failure::Refused("the issuer did not finish the order in time".into())
            }
            e @ (E::Other(_) | E::Hyper(_)) => Failure::Unreachable(chain(&e)),
            e => Failure::Refused(chain(&e)),
        }
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Refused(s)
    }
}

/// An error and its causes, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cause = c.source();
    }
    s
}

/// The wait before try `n + 1` after `n` failures ending with `f`.
pub fn backoff(f: &Failure, n: u32) -> Duration {
    let cap = Duration::from_secs(3600);
    let from = |base: u64| {
        Duration::from_secs(base.saturating_mul(1u64 << n.saturating_sub(1).min(20))).min(cap)
    };
    match f {
        Failure::Unreachable(_) => from(5),
        Failure::Refused(_) => from(60),
        Failure::RateLimited(_) => cap,
        Failure::Later(_, d) => (*d).clamp(Duration::from_secs(1), cap),
    }
}

/// A time as the log writes it.
pub fn date(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|d| d.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| secs.to_string())
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The tick, once a second in every worker: hand each managed certificate
/// not yet kept to the ACME thread (started the first time).
pub fn tick() {
    static THREAD: OnceLock<Option<tokio::sync::mpsc::UnboundedSender<Weak<Managed>>>> =
        OnceLock::new();
    let new: Vec<Arc<Managed>> = store::live()
        .into_iter()
        .filter(|m| !m.started.swap(true, Ordering::AcqRel))
        .collect();
    if new.is_empty() {
        return;
    }
    let tx = THREAD.get_or_init(|| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let spawned = std::thread::Builder::new()
            .name("acme".into())
            .spawn(move || run(rx));
        match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                crate::error_log!(Emerg, "acme: cannot start the ACME thread: {e}");
                None
            }
        }
    });
    if let Some(tx) = tx {
        for m in new {
            let _ = tx.send(Arc::downgrade(&m));
        }
    }
}

/// The ACME thread: a task per certificate it is handed.
fn run(mut rx: tokio::sync::mpsc::UnboundedReceiver<Weak<Managed>>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            crate::error_log!(Emerg, "acme: cannot start the ACME thread: {e}");
            return;
        }
    };
    rt.block_on(async move {
        while let Some(m) = rx.recv().await {
            tokio::spawn(keep(m));
        }
    });
}

/// When a certificate is to be renewed, and when to ask the issuer again.
struct Plan {
    serial: String,
    renew_at: i64,
    ask_again: Option<i64>,
}

/// Keep one certificate issued while a configuration names it.
async fn keep(w: Weak<Managed>) {
    let mut failures = 0u32;
    let mut plan: Option<Plan> = None;
    loop {
        let Some(m) = w.upgrade() else { return };
        if let Some(p) = m.pair.load_full() {
            let stale = plan.as_ref().is_none_or(|pl| {
                pl.serial != p.serial || pl.ask_again.is_some_and(|t| t <= now_secs())
            });
            if stale {
                plan = Some(schedule(&m, &p).await);
            }
            let at = plan.as_ref().map_or(0, |pl| pl.renew_at);
            if at > now_secs() {
                let until = plan
                    .as_ref()
                    .and_then(|pl| pl.ask_again)
                    .unwrap_or(at)
                    .min(at);
                drop(m);
                // Woken at least hourly, to let a dropped certificate go.
                let wait = (until - now_secs()).clamp(1, 3600) as u64;
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
        }
        match obtain(&m).await {
            Ok(()) => failures = 0,
            Err(f) => {
                failures += 1;
                let wait = backoff(&f, failures);
                crate::error_log!(
                    Error,
                    "acme: {} failed: {f}; next try in {}s",
                    m.label(),
                    wait.as_secs()
                );
                drop(m);
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// A uniformly random point of `[start, end]` (RFC 9773 section 4.2).
fn within(start: i64, end: i64) -> i64 {
    let mut b = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    let span = (end - start).max(0) as u64;
    start + (u64::from_le_bytes(b) % (span + 1)) as i64
}

/// Two thirds into the pair's lifetime.
pub fn two_thirds(not_before: i64, not_after: i64) -> i64 {
    not_before + (not_after - not_before) * 2 / 3
}

/// When to renew `p`: from the issuer's renewal information, else at two
/// thirds of its lifetime.
async fn schedule(m: &Managed, p: &Pair) -> Plan {
    let fallback = two_thirds(p.not_before, p.not_after);
    let ari = async {
        let account = account(&m.issuer).await?;
        let der = rustls_pki_types::CertificateDer::from(p.leaf.as_slice());
        let id = instant_acme::CertificateIdentifier::try_from(&der)?;
        Ok::<_, Failure>(account.acme.renewal_info(&id).await?)
    };
    let (renew_at, ask_again) = match ari.await {
        Ok((info, retry)) => {
            let (start, end) = (
                info.suggested_window.start.unix_timestamp(),
                info.suggested_window.end.unix_timestamp(),
            );
            let at = within(start, end);
            crate::error_log!(
                Notice,
                "acme: {} (serial {}): the issuer's renewal window is {} to {}; renewal at {}",
                m.label(),
                p.serial,
                date(start),
                date(end),
                date(at)
            );
            // Asked again as the issuer says, within a minute and a day.
            let again = retry.clamp(Duration::from_secs(60), Duration::from_secs(86400));
            (at, Some(now_secs() + again.as_secs() as i64))
        }
        Err(Failure::Refused(why)) if why.contains("does not support") => {
            crate::error_log!(
                Notice,
                "acme: {} (serial {}): the issuer offers no renewal information; renewal at two thirds of the lifetime, {}",
                m.label(),
                p.serial,
                date(fallback)
            );
            (fallback, None)
        }
        Err(f) => {
            crate::error_log!(
                Warn,
                "acme: {} (serial {}): no renewal information ({f}); renewal at two thirds of the lifetime, {} unless the issuer answers before",
                m.label(),
                p.serial,
                date(fallback)
            );
            (fallback, Some(now_secs() + 300))
        }
    };
    Plan {
        serial: p.serial.clone(),
        renew_at,
        ask_again,
    }
}

/// The HTTP client an issuer is reached with: its trusted CAs (else the
/// system's), or no verification with `ssl_verify off`.
fn http_client(issuer: &Issuer) -> Result<Box<dyn instant_acme::HttpClient>, Failure> {
    use rustls_pki_types::pem::PemObject;
    let trusted: Vec<rustls_pki_types::CertificateDer<'static>> = match &issuer.trusted {
        Some(f) => rustls_pki_types::CertificateDer::pem_file_iter(f)
            .and_then(|i| i.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                Failure::Refused(format!(
                    "cannot load \"{}\": {}",
                    f.display(),
                    crate::modules::ssl::config::pem_error(e)
                ))
            })?,
        None if issuer.verify => rustls_native_certs::load_native_certs().certs,
        None => Vec::new(),
    };
    let spec = crate::upstream::tls::Spec {
        verify: issuer.verify,
        depth: 9,
        trusted: trusted.into(),
        crls: Arc::from(Vec::new()),
        sni: true,
        tls12: true,
        tls13: true,
        tls12_suites: None,
        session_reuse: true,
        client_cert: None,
        alpn: &[],
    };
    let tls = crate::upstream::tls::Client::build(&spec).map_err(Failure::Refused)?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls.config).clone())
        .https_or_http()
        .enable_http1()
        .build();
    let client: hyper_util::client::legacy::Client<_, instant_acme::BodyWrapper<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    Ok(Box::new(client))
}

/// The issuer's terms of service, from its directory.
async fn terms(issuer: &Issuer) -> Option<String> {
    let http = http_client(issuer).ok()?;
    let req = chain::request(http::Method::GET, &issuer.uri)
        .body(instant_acme::BodyWrapper::default())
        .ok()?;
    let mut rsp = http.request(req).await.ok()?;
    let body = rsp.body.into_bytes().await.ok()?;
    let dir: serde_json::Value = serde_json::from_slice(&body).ok()?;
    dir.get("meta")?
        .get("termsOfService")?
        .as_str()
        .map(str::to_string)
}

/// What `account.json` holds: the account and what it was made for.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    directory: String,
    /// The `account_key` file it was made with, if any.
    key_file: Option<std::path::PathBuf>,
    credentials: AccountCredentials,
}

/// An issuer's account, and what fetching its alternate chains needs.
struct Held {
    acme: Account,
    /// With `preferred_chain` only.
    alternates: Option<chain::Alternates>,
}

type Accounts = HashMap<Arc<Issuer>, Arc<tokio::sync::Mutex<Option<Arc<Held>>>>>;

/// The client an account is made with: the issuer's, noting in `seen` the
/// alternate chains replies link to when the issuer has `preferred_chain`.
fn recording(
    issuer: &Issuer,
    seen: &Arc<chain::Seen>,
) -> Result<Box<dyn instant_acme::HttpClient>, Failure> {
    let inner = http_client(issuer)?;
    Ok(match issuer.preferred_chain {
        Some(_) => Box::new(chain::Recording {
            inner,
            seen: seen.clone(),
        }),
        None => inner,
    })
}

/// The issuer's account: the one this process has, the one `state_path`
/// keeps, or a new one (registered, and kept there).
async fn account(issuer: &Arc<Issuer>) -> Result<Arc<Held>, Failure> {
    static ACCOUNTS: Mutex<Option<Accounts>> = Mutex::new(None);
    let slot = ACCOUNTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .entry(issuer.clone())
        .or_default()
        .clone();
    let mut held = slot.lock().await;
    if let Some(a) = &*held {
        return Ok(a.clone());
    }
    let seen = Arc::new(chain::Seen::default());
    let key_file = match &issuer.account_key {
        AccountKey::File(p, _) => Some(p.clone()),
        AccountKey::Generate => None,
    };
    let file = issuer.state.as_ref().map(|d| d.join("account.json"));
    let kept = file
        .as_ref()
        .and_then(|f| std::fs::read(f).ok())
        .and_then(|t| serde_json::from_slice::<Kept>(&t).ok())
        .filter(|k| k.directory == issuer.uri && k.key_file == key_file);
    let label = format!("acme_issuer \"{}\"", issuer.name);
    let (account, key) = match kept {
        Some(k) => {
            let key = k.credentials.private_key().secret_pkcs8_der().to_vec();
            let a = Account::builder_with_http(recording(issuer, &seen)?)
                .from_credentials(k.credentials)
                .await?;
            crate::error_log!(
                Notice,
                "acme: {label}: account {} loaded from state",
                a.id()
            );
            (a, key)
        }
        None => {
            crate::error_log!(
                Notice,
                "acme: {label}: registering an account at {}",
                issuer.uri
            );
            let terms = terms(issuer).await;
            let refused = |e: instant_acme::Error| match (&terms, issuer.accept_tos) {
                (Some(t), false) => Failure::Refused(format!(
                    "{}; the issuer's terms of service ({t}) were not accepted: add \"accept_terms_of_service\" to the acme_issuer block once you agree to them",
                    Failure::from(e)
                )),
                _ => Failure::from(e),
            };
            let builder = Account::builder_with_http(recording(issuer, &seen)?);
            let contacts: Vec<&str> = issuer.contacts.iter().map(String::as_str).collect();
            let eab = issuer
                .eab
                .as_ref()
                .map(|e| instant_acme::ExternalAccountKey::new(e.kid.clone(), &e.key));
            let (a, creds) = match &issuer.account_key {
                AccountKey::Generate => builder
                    .create(
                        &NewAccount {
                            contact: &contacts,
                            terms_of_service_agreed: issuer.accept_tos,
                            only_return_existing: false,
                        },
                        issuer.uri.clone(),
                        eab.as_ref(),
                    )
                    .await
                    .map_err(|e| match &issuer.eab {
                        Some(x) => Failure::Refused(format!(
                            "{} (registering with external_account_key \"{}\")",
                            refused(e),
                            x.kid
                        )),
                        None => refused(e),
                    })?,
                AccountKey::File(path, der) => {
                    if let (Some(t), false) = (&terms, issuer.accept_tos) {
                        return Err(Failure::Refused(format!(
                            "the issuer's terms of service ({t}) were not accepted: add \"accept_terms_of_service\" to the acme_issuer block once you agree to them"
                        )));
                    }
                    let pkcs8 = rustls_pki_types::PrivatePkcs8KeyDer::from(der.clone());
                    let key = instant_acme::Key::from_pkcs8_der(pkcs8.clone_key())?;
                    let (a, creds) = builder
                        .create_from_key(
                            (key, rustls_pki_types::PrivateKeyDer::Pkcs8(pkcs8)),
                            issuer.uri.clone(),
                        )
                        .await
                        .map_err(refused)?;
                    if !contacts.is_empty() {
                        a.update_contacts(&contacts).await?;
                    }
                    crate::error_log!(
                        Info,
                        "acme: {label}: account key from \"{}\"",
                        path.display()
                    );
                    (a, creds)
                }
            };
            match &issuer.eab {
                Some(x) => crate::error_log!(
                    Notice,
                    "acme: {label}: account {} registered, bound to external account \"{}\"",
                    a.id(),
                    x.kid
                ),
                None => crate::error_log!(Notice, "acme: {label}: account {} registered", a.id()),
            }
            let key = creds.private_key().secret_pkcs8_der().to_vec();
            if let Some(f) = &file {
                let kept = Kept {
                    directory: issuer.uri.clone(),
                    key_file,
                    credentials: creds,
                };
                let json = serde_json::to_vec_pretty(&kept).map_err(|e| e.to_string())?;
                match store::write_file(f, &json, 0o600) {
                    Ok(()) => {}
                    Err(why) => crate::error_log!(Error, "acme: {label}: account not kept: {why}"),
                }
            }
            (a, key)
        }
    };
    let alternates = match issuer.preferred_chain {
        Some(_) => Some(chain::Alternates {
            signer: chain::Signer::new(&key, account.id())?,
            seen,
            http: http_client(issuer)?,
            directory: issuer.uri.clone(),
        }),
        None => None,
    };
    let account = Arc::new(Held {
        acme: account,
        alternates,
    });
    *held = Some(account.clone());
    Ok(account)
}

/// An answer put up for the issuer to find, taken down after the order.
enum Answer {
    Http(String),
    Alpn(String),
    Dns(String, String),
}

/// The name a TXT record for `identifier` goes under.
fn dns_name(identifier: &str) -> String {
    format!(
        "_acme-challenge.{}",
        identifier.strip_prefix("*.").unwrap_or(identifier)
    )
}

/// The self-signed certificate of a TLS-ALPN-01 answer (RFC 8737).
fn alpn_certificate(name: &str, digest: &[u8]) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
    let key =
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
    let mut params =
        rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let der = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing = crate::upstream::tls::provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(rustls::sign::CertifiedKey::new(
        vec![cert.der().clone()],
        signing,
    )))
}

/// Put up the answer to one challenge.
async fn answer(
    issuer: &Issuer,
    identifier: &str,
    token: &str,
    ka: &instant_acme::KeyAuthorization,
) -> Result<Answer, Failure> {
    Ok(match issuer.challenge {
        Challenge::Http01 => {
            store::set_http(token, Some(ka.as_str().to_string()));
            Answer::Http(token.to_string())
        }
        Challenge::TlsAlpn01 => {
            let cert = alpn_certificate(identifier, ka.digest().as_ref())?;
            store::set_alpn(identifier, Some(cert));
            Answer::Alpn(identifier.to_string())
        }
        Challenge::Dns01 => {
            let u = issuer
                .dns
                .as_ref()
                .ok_or_else(|| Failure::Refused("no dns_update".into()))?;
            let (name, value) = (dns_name(identifier), ka.dns_value());
            super::nsupdate::set_txt(u, &name, &value, true)
                .await
                .map_err(Failure::Unreachable)?;
            crate::error_log!(Info, "acme: TXT record \"{name}\" added on {}", u.server);
            tokio::time::sleep(u.wait).await;
            Answer::Dns(name, value)
        }
    })
}

/// Take the answers down.
async fn withdraw(issuer: &Issuer, answers: Vec<Answer>) {
    for a in answers {
        match a {
            Answer::Http(token) => store::set_http(&token, None),
            Answer::Alpn(name) => store::set_alpn(&name, None),
            Answer::Dns(name, value) => {
                let Some(u) = &issuer.dns else { continue };
                match super::nsupdate::set_txt(u, &name, &value, false).await {
                    Ok(()) => crate::error_log!(Info, "acme: TXT record \"{name}\" removed"),
                    Err(why) => {
                        crate::error_log!(Warn, "acme: TXT record \"{name}\" not removed: {why}")
                    }
                }
            }
        }
    }
}

/// Order, validate and install a certificate.
async fn obtain(m: &Managed) -> Result<(), Failure> {
    let issuer = &m.issuer;
    let held = account(issuer).await?;
    let account = &held.acme;
    let ids: Vec<Identifier> = m
        .names
        .iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(ip) => Identifier::Ip(ip),
            Err(_) => Identifier::Dns(n.clone()),
        })
        .collect();
    let old = m.pair.load_full();
    let replaces = old.as_ref().and_then(|p| {
        let der = rustls_pki_types::CertificateDer::from(p.leaf.as_slice());
        instant_acme::CertificateIdentifier::try_from(&der)
            .ok()
            .map(|i| i.into_owned())
    });
    let profile = match &issuer.profile {
        Some(p) if account.profiles().any(|o| o.name == p.name) => Some(p.name.as_str()),
        Some(p) if p.require => {
            return Err(Failure::Refused(format!(
                "the issuer does not offer the profile \"{}\" (\"profile {} require\")",
                p.name, p.name
            )));
        }
        Some(p) => {
            crate::error_log!(
                Warn,
                "acme: {}: the issuer does not offer the profile \"{}\"; ordering without a profile",
                m.label(),
                p.name
            );
            None
        }
        None => None,
    };
    crate::error_log!(
        Notice,
        "acme: {}: ordering {} for {} ({} key{}) with {} challenges",
        m.label(),
        match &old {
            Some(p) => format!("a renewal of serial {}", p.serial),
            None => "a certificate".into(),
        },
        m.names.join(", "),
        m.key.name(),
        profile.map_or(String::new(), |p| format!(", profile \"{p}\"")),
        issuer.challenge.name()
    );
    let new_order = || {
        let o = NewOrder::new(&ids);
        match profile {
            Some(p) => o.profile(p),
            None => o,
        }
    };
    let mut order = match replaces {
        Some(r) => match account.new_order(&new_order().replaces(r)).await {
            Ok(o) => o,
            Err(e) => {
                crate::error_log!(
                    Info,
                    "acme: {}: the issuer refused the order as a replacement ({}); ordering anew",
                    m.label(),
                    Failure::from(e)
                );
                account.new_order(&new_order()).await?
            }
        },
        None => account.new_order(&new_order()).await?,
    };
    let mut answers = Vec::new();
    let validated = async {
        let mut authzs = order.authorizations();
        while let Some(a) = authzs.next().await {
            let mut a = a?;
            let identifier = a.identifier().to_string();
            match a.status {
                AuthorizationStatus::Valid => {
                    crate::error_log!(Info, "acme: \"{identifier}\" is already authorized");
                    continue;
                }
                AuthorizationStatus::Pending => {}
                s => {
                    return Err(Failure::Refused(format!(
                        "the authorization for \"{identifier}\" is {s:?}"
                    )));
                }
            }
            let kind = match issuer.challenge {
                Challenge::Http01 => ChallengeType::Http01,
                Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
                Challenge::Dns01 => ChallengeType::Dns01,
            };
            let mut ch = a.challenge(kind).ok_or_else(|| {
                Failure::Refused(format!(
                    "the issuer offers no {} challenge for \"{identifier}\"",
                    issuer.challenge.name()
                ))
            })?;
            let ka = ch.key_authorization();
            answers.push(answer(issuer, &identifier, &ch.token, &ka).await?);
            ch.set_ready().await?;
            crate::error_log!(
                Info,
                "acme: {} challenge for \"{identifier}\" answered, the issuer validates",
                issuer.challenge.name()
            );
        }
        let policy = RetryPolicy::new()
            .initial_delay(Duration::from_millis(500))
            .backoff(1.5)
            .timeout(Duration::from_secs(120));
        let status = order.poll_ready(&policy).await?;
        if status != OrderStatus::Ready {
            let mut why = Vec::new();
            let mut authzs = order.authorizations();
            while let Some(Ok(mut a)) = authzs.next().await {
                if let Ok(s) = a.refresh().await {
                    let id = s.identifier().to_string();
                    why.extend(
                        s.challenges
                            .iter()
                            .filter_map(|c| c.error.as_ref().map(|e| format!("\"{id}\": {e}"))),
                    );
                }
            }
            return Err(Failure::Refused(format!(
                "validation failed: {}",
                match why.is_empty() {
                    true => format!("the order is {status:?}"),
                    false => why.join("; "),
                }
            )));
        }
        crate::error_log!(Notice, "acme: {}: names validated, finalizing", m.label());
        let key = rcgen::KeyPair::generate_for(m.key.rcgen()).map_err(|e| e.to_string())?;
        let mut params =
            rcgen::CertificateParams::new(m.names.clone()).map_err(|e| e.to_string())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params.serialize_request(&key).map_err(|e| e.to_string())?;
        order.finalize_csr(csr.der()).await?;
        let mut chain = order.poll_certificate(&policy).await?;
        if let (Some(name), Some(alternates), Some(url)) = (
            &issuer.preferred_chain,
            &held.alternates,
            &order.state().certificate,
        ) {
            chain = chain::choose(chain, url, name, alternates, &m.label()).await;
        }
        Ok::<_, Failure>((chain, key.serialize_pem()))
    }
    .await;
    withdraw(issuer, answers).await;
    let (chain, key) = validated?;
    let pair = Pair::from_pem(&chain, &key)
        .map_err(|why| Failure::Refused(format!("the issued certificate does not do: {why}")))?;
    if !m.covers(&pair) {
        return Err(Failure::Refused(format!(
            "the issued certificate is for {}, not {}",
            pair.names().join(", "),
            m.names.join(", ")
        )));
    }
    if let Some((crt, keyf)) = m.files() {
        let kept = store::write_file(&keyf, key.as_bytes(), 0o600)
            .and_then(|_| store::write_file(&crt, chain.as_bytes(), 0o644));
        if let Err(why) = kept {
            crate::error_log!(Error, "acme: {}: not kept in state_path: {why}", m.label());
        }
    }
    let (serial, from, until) = (pair.serial.clone(), pair.not_before, pair.not_after);
    m.install(pair).map_err(Failure::Refused)?;
    crate::error_log!(
        Notice,
        "acme: {} issued and installed: serial {serial}, valid from {} until {}",
        m.label(),
        date(from),
        date(until)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_an_hour() {
        let u = Failure::Unreachable(String::new());
        let r = Failure::Refused(String::new());
        let waits: Vec<u64> = (1..=4).map(|n| backoff(&u, n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40]);
        assert_eq!(backoff(&r, 1).as_secs(), 60);
        assert_eq!(backoff(&r, 3).as_secs(), 240);
        assert_eq!(backoff(&r, 40).as_secs(), 3600);
        assert_eq!(
            backoff(&Failure::RateLimited(String::new()), 1).as_secs(),
            3600
        );
        let later = Failure::Later(String::new(), Duration::from_secs(30));
        assert_eq!(backoff(&later, 7).as_secs(), 30);
    }

    #[test]
    fn renewal_without_information_is_at_two_thirds() {
        assert_eq!(two_thirds(0, 90 * 86400), 60 * 86400);
        assert_eq!(two_thirds(1000, 1030), 1020);
        for _ in 0..100 {
            let t = within(10, 20);
            assert!((10..=20).contains(&t));
        }
        assert_eq!(within(5, 5), 5);
        assert_eq!(within(9, 5), 9);
    }

    #[test]
    fn challenge_records_drop_the_wildcard() {
        assert_eq!(dns_name("*.example.test"), "_acme-challenge.example.test");
        assert_eq!(dns_name("a.example.test"), "_acme-challenge.a.example.test");
    }
}
