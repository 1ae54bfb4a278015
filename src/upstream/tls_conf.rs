//! The `*_ssl_*` directives of the handlers that speak TLS to their peers
//! (`proxy_pass https://`, `uwsgi_pass suwsgi://`, `grpc_pass grpcs://`): one settings type per
//! prefix (`SslConf<P>`), one directive table per prefix from the same
//! setters ([`directives!`](crate::upstream::tls_conf::directives)), and per
//! request the TLS client and peer name a connection is made with
//! (`upstream::tls::Dial`). The TLS itself is `upstream::tls`.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Env, Scope};
use crate::conf::values;
use crate::core::module::Slot;
use crate::core::request::Request;
use crate::core::vars::Template;
use crate::settings;
use crate::upstream::tls::{Client, Dial, Spec};
use rustc_hash::FxHashMap;
use rustls::SupportedCipherSuite;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A handler family with its own `*_ssl_*` settings.
pub trait Prefix: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The directives' prefix (`proxy`, `uwsgi`).
    const NAME: &'static str;
    /// The protocols offered by ALPN (`h2` for gRPC; none by default).
    const ALPN: &'static [&'static [u8]] = &[];
    /// Where this prefix's settings sit.
    fn slot() -> &'static Slot;
}

settings! {
    /// The TLS settings of one prefix at one level.
    pub struct SslConf<P: Prefix> / SslConfSet {
        pub verify: bool = false,
        pub verify_depth: u32 = 1,
        pub trusted: Arc<[CertificateDer<'static>]> = Arc::from(Vec::new()),
        /// CRLs, DER.
        pub crl: Arc<[Vec<u8>]> = Arc::from(Vec::new()),
        pub name: Option<Template> = None,
        pub server_name: bool = false,
        pub protocols: crate::modules::ssl::conf::Protocols =
            crate::modules::ssl::conf::Protocols { tls12: true, tls13: true },
        /// TLS 1.2 suites (`None`: rustls's defaults).
        pub ciphers: Option<Arc<[SupportedCipherSuite]>> = None,
        pub certificate: Option<FileName> = None,
        pub certificate_key: Option<FileName> = None,
        /// `*_ssl_conf_command Certificate` and `PrivateKey`: the pair presented
        /// instead of `*_ssl_certificate`'s.
        pub command_certificate: Option<FileName> = None,
        pub command_certificate_key: Option<FileName> = None,
        /// `*_ssl_password_file`: passwords of an encrypted key, in order.
        pub passwords: Arc<[String]> = Arc::from(Vec::new()),
        pub session_reuse: bool = true,
        /// The TLS clients of the levels sharing these settings: a level with
        /// any `*_ssl_*` has its own.
        pub clients: Arc<Clients> = Arc::new(Clients::default()),
    }
}

/// A file name that may hold variables, and the prefix a relative one is
/// taken from.
#[derive(Clone, Debug)]
pub struct FileName {
    name: Template,
    prefix: PathBuf,
}

impl FileName {
    fn path(&self, req: &Request<'_>) -> Option<PathBuf> {
        let mut v = Vec::new();
        self.name.render(req, &mut v);
        (!v.is_empty()).then(|| self.prefix.join(String::from_utf8_lossy(&v).as_ref()))
    }
}

/// The TLS clients of the levels that share one set of `*_ssl_*`
/// settings: a level with any of them has its own. Each worker builds the
/// client of a (certificate, key) pair once and keeps it, its sessions
/// with it.
#[derive(Debug)]
pub struct Clients {
    id: u64,
}

impl Default for Clients {
    fn default() -> Clients {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Clients {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// Clients per worker by (settings, certificate, key); cleared when it
/// grows past this (reloads leave old settings behind).
const KEPT_CLIENTS: usize = 256;

type ClientKey = (u64, Option<PathBuf>, Option<PathBuf>, Alpn);

/// The protocols a TLS client offers by ALPN.
type Alpn = &'static [&'static [u8]];

thread_local! {
    static CLIENTS: RefCell<FxHashMap<ClientKey, Arc<Client>>> =
        RefCell::new(FxHashMap::default());
}

/// The TLS client and name for this request's connections to `default_name`'s
/// peers (the host of the `*_pass` address, unless `*_ssl_name` gives one),
/// offering the prefix's ALPN protocols. `Err`: logged, 502.
pub fn dial<P: Prefix>(req: &Request<'_>, pc: &SslConf<P>, default_name: &str) -> Result<Dial, ()> {
    dial_alpn(req, pc, default_name, P::ALPN)
}

/// [`dial`] offering `alpn` (the proxy's `h2` with `proxy_http_version 2`).
pub fn dial_alpn<P: Prefix>(
    req: &Request<'_>,
    pc: &SslConf<P>,
    default_name: &str,
    alpn: Alpn,
) -> Result<Dial, ()> {
    let cert = (pc.command_certificate.as_ref())
        .or(pc.certificate.as_ref())
        .and_then(|f| f.path(req));
    let key = (pc.command_certificate_key.as_ref())
        .or(pc.certificate_key.as_ref())
        .and_then(|f| f.path(req));
    let id = (pc.clients.id, cert, key, alpn);
    let fail = |msg: String| crate::error_log!(Error, "{msg}{}", req.log_context());
    let client = match CLIENTS.with(|c| c.borrow().get(&id).cloned()) {
        Some(c) => c,
        None => {
            let c = build(pc, id.1.as_deref(), id.2.as_deref(), alpn).map_err(fail)?;
            CLIENTS.with(|m| {
                let mut m = m.borrow_mut();
                if m.len() >= KEPT_CLIENTS {
                    m.clear();
                }
                m.insert(id, c.clone());
            });
            c
        }
    };
    let name = match &pc.name {
        Some(t) => {
            let mut v = Vec::new();
            t.render(req, &mut v);
            String::from_utf8_lossy(&v).into_owned()
        }
        None => default_name.to_string(),
    };
    Dial::new(client, &name).map_err(fail)
}

fn build<P: Prefix>(
    pc: &SslConf<P>,
    cert: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
    alpn: Alpn,
) -> Result<Arc<Client>, String> {
    let client_cert = match (cert, key) {
        (Some(c), Some(k)) => Some(Arc::new(crate::modules::ssl::config::load_key_pair(
            c,
            k,
            &pc.passwords,
            &crate::upstream::tls::provider(),
        )?)),
        (Some(c), None) => {
            return Err(format!(
                "no \"{}_ssl_certificate_key\" for the certificate \"{}\"",
                P::NAME,
                c.display()
            ));
        }
        _ => None,
    };
    Client::build(&Spec {
        verify: pc.verify,
        depth: pc.verify_depth,
        trusted: pc.trusted.clone(),
        crls: pc.crl.clone(),
        sni: pc.server_name,
        tls12: pc.protocols.tls12,
        tls13: pc.protocols.tls13,
        tls12_suites: pc.ciphers.as_deref().map(<[_]>::to_vec),
        session_reuse: pc.session_reuse,
        client_cert,
        alpn,
    })
}

fn loc<'a, P: Prefix>(s: &'a mut Scope<'_>) -> &'a mut SslConfSet<P> {
    let l = s.loc().get_mut::<SslConfSet<P>>();
    // This level's TLS settings differ from those it inherits: its own clients.
    l.clients = Some(Arc::new(Clients::default()));
    l
}

/// Every PEM section of `kind` in the file the directive names.
fn pem_list<T: PemObject + 'static>(
    d: &Directive,
    e: &Env,
    what: &str,
) -> Result<Vec<T>, ConfError> {
    let path = e.path(d.arg(0));
    let err = |why: String| {
        ConfError::new(
            format!("cannot load \"{}\": {why}", path.display()),
            &d.span,
        )
    };
    let items = T::pem_file_iter(&path)
        .map_err(|e| err(crate::modules::ssl::config::pem_error(e)))?
        .collect::<Result<Vec<T>, _>>()
        .map_err(|e| err(crate::modules::ssl::config::pem_error(e)))?;
    if items.is_empty() {
        return Err(err(format!("no {what} in it")));
    }
    Ok(items)
}

/// Argument `i` of `d`: a file name, variables allowed.
fn file_name(d: &Directive, i: usize, e: &mut Env) -> Result<FileName, ConfError> {
    let name = crate::conf::values::template(d, i, &mut e.vars)?;
    if let Some(lit) = name.literal() {
        // A fixed file is read now, so a bad one fails the load here.
        let path = e.path(&String::from_utf8_lossy(lit));
        std::fs::metadata(&path).map_err(|err| {
            ConfError::new(
                format!(
                    "cannot load \"{}\": {}",
                    path.display(),
                    crate::core::errlog::errno_text(&err)
                ),
                &d.span,
            )
        })?;
    }
    Ok(FileName {
        name,
        prefix: e.path(""),
    })
}

/// `*_ssl_ciphers`: the TLS 1.2 suites an OpenSSL cipher string
/// selects among rustls's; tokens that select none are noted.
fn ciphers(d: &Directive, e: &mut Env) -> Result<Arc<[SupportedCipherSuite]>, ConfError> {
    use crate::modules::ssl::{conf::cipher_rules, config::select_suites};
    let all = rustls::crypto::ring::default_provider().cipher_suites;
    let rules = cipher_rules(d.arg(0));
    let unknown: Vec<String> = rules
        .iter()
        .filter_map(|r| match r {
            crate::modules::ssl::conf::CipherRule::Add(p) => Some(p),
            crate::modules::ssl::conf::CipherRule::Remove(_) => None,
        })
        .filter(|p| {
            select_suites(
                &[crate::modules::ssl::conf::CipherRule::Add((*p).clone())],
                &all,
            )
            .is_empty()
        })
        .map(|p| p.join("+"))
        .collect();
    if !unknown.is_empty() {
        e.notice(format!(
            "\"{}\": {} select no suite rustls has, skipped in {}",
            d.name,
            unknown.join(":"),
            d.span
        ));
    }
    let suites = select_suites(&rules, &all);
    if suites.is_empty() {
        return Err(ConfError::new(
            format!(
                "\"{}\" leaves no TLS 1.2 cipher suite vireo has (ECDHE with AES-GCM or CHACHA20-POLY1305)",
                d.name
            ),
            &d.span,
        ));
    }
    Ok(Arc::from(suites))
}

type Setter = Result<(), ConfError>;

pub fn set_verify<P: Prefix>(s: &mut Scope<'_>, d: &Directive, _: &mut Env) -> Setter {
    values::set_once(&mut loc::<P>(s).verify, values::flag(d, 0)?, d)
}

pub fn set_trusted<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let certs = pem_list::<CertificateDer<'static>>(d, e, "certificate")?;
    values::set_once(&mut loc::<P>(s).trusted, Arc::from(certs), d)
}

pub fn set_verify_depth<P: Prefix>(s: &mut Scope<'_>, d: &Directive, _: &mut Env) -> Setter {
    let n = values::number(d, 0)? as u32;
    values::set_once(&mut loc::<P>(s).verify_depth, n, d)
}

pub fn set_crl<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let crls = pem_list::<rustls_pki_types::CertificateRevocationListDer<'static>>(d, e, "CRL")?;
    let crls: Vec<Vec<u8>> = crls.iter().map(|c| c.as_ref().to_vec()).collect();
    values::set_once(&mut loc::<P>(s).crl, Arc::from(crls), d)
}

pub fn set_name<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let t = values::template(d, 0, &mut e.vars)?;
    values::set_once(&mut loc::<P>(s).name, Some(t), d)
}

pub fn set_server_name<P: Prefix>(s: &mut Scope<'_>, d: &Directive, _: &mut Env) -> Setter {
    values::set_once(&mut loc::<P>(s).server_name, values::flag(d, 0)?, d)
}

pub fn set_protocols<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let p = crate::modules::ssl::conf::protocols(d, e)?;
    values::set_once(&mut loc::<P>(s).protocols, p, d)
}

pub fn set_ciphers<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let c = ciphers(d, e)?;
    values::set_once(&mut loc::<P>(s).ciphers, Some(c), d)
}

pub fn set_certificate<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let f = file_name(d, 0, e)?;
    values::set_once(&mut loc::<P>(s).certificate, Some(f), d)
}

pub fn set_certificate_key<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let f = file_name(d, 0, e)?;
    values::set_once(&mut loc::<P>(s).certificate_key, Some(f), d)
}

pub fn set_session_reuse<P: Prefix>(s: &mut Scope<'_>, d: &Directive, _: &mut Env) -> Setter {
    values::set_once(&mut loc::<P>(s).session_reuse, values::flag(d, 0)?, d)
}

pub fn set_password_file<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let path = e.path(d.arg(0));
    let text = std::fs::read_to_string(&path).map_err(|err| {
        ConfError::new(
            format!(
                "cannot open \"{}\": {}",
                path.display(),
                crate::core::errlog::errno_text(&err)
            ),
            &d.span,
        )
    })?;
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    values::set_once(&mut loc::<P>(s).passwords, Arc::from(lines), d)
}

/// `*_ssl_conf_command`: the OpenSSL configuration commands rustls can carry
/// out. `Certificate` and `PrivateKey` (variables allowed) name the pair
/// presented instead of `*_ssl_certificate`'s, the last of each at a level
/// taken; `Options` may name only what rustls does anyway. Others are refused,
/// naming them.
pub fn set_conf_command<P: Prefix>(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Setter {
    let (name, value) = (d.arg(0), d.arg(1));
    match name {
        "Certificate" => loc::<P>(s).command_certificate = Some(Some(file_name(d, 1, e)?)),
        "PrivateKey" => loc::<P>(s).command_certificate_key = Some(Some(file_name(d, 1, e)?)),
        "Options" if value.split(',').all(crate::modules::ssl::conf::moot_option) => {}
        _ => {
            return Err(ConfError::new(
                format!(
                    "\"{} {name} {value}\" is not supported by vireo (rustls): it takes Certificate, PrivateKey and Options {}",
                    d.name,
                    crate::modules::ssl::conf::MOOT_OPTIONS.join(", ")
                ),
                &d.span,
            ));
        }
    }
    Ok(())
}

/// One `$pre_ssl_$name` directive, of the contexts `$ctx`.
macro_rules! def {
    ($ctx:expr, $pre:literal, $name:literal, $set:expr, $arity:expr, $syntax:literal, $default:literal, $doc:expr, $example:expr) => {
        $crate::conf::table::Def {
            name: concat!($pre, "_ssl_", $name),
            ignored: false,
            ctx: $ctx,
            arity: $arity,
            set: $set,
            syntax: concat!($pre, "_ssl_", $name, " ", $syntax, ";"),
            default: $default,
            doc: concat!($doc, "\n\n```nginx\n", $example, "\n```"),
        }
    };
}
pub(crate) use def;

/// The `*_ssl_*` directives of prefix `$pre` (settings of marker type `$p`);
/// `$peer` names the peers in the reference (`` an `https` upstream ``).
/// They stand in http, server and location, or in the contexts `$ctx`
/// (stream's).
macro_rules! directives {
    ($pre:literal, $p:ty, $peer:literal) => {
        $crate::upstream::tls_conf::directives!(
            $pre,
            $p,
            $peer,
            $crate::conf::table::Ctx::HSL
        )
    };
    ($pre:literal, $p:ty, $peer:literal, $ctx:expr) => {{
        use $crate::conf::table::{Arity, MANY, ONE};
        use $crate::upstream::tls_conf::{self as t, def};
        &[
            def!($ctx, $pre, "verify", t::set_verify::<$p>, ONE, "on | off", "off",
                concat!("Checks the certificate of ", $peer, ": its chain must end at a `", $pre, "_ssl_trusted_certificate` within `", $pre, "_ssl_verify_depth`, every certificate be within its validity (and not revoked, with `", $pre, "_ssl_crl`), and its subjectAltName (or, without DNS names, its common name) match `", $pre, "_ssl_name`. A refused certificate fails the attempt (502, or the next peer). Off, as in nginx, any certificate is accepted."),
                concat!($pre, "_ssl_verify on;\n", $pre, "_ssl_trusted_certificate /etc/ssl/backend-ca.pem;")),
            def!($ctx, $pre, "trusted_certificate", t::set_trusted::<$p>, ONE, "file", "—",
                concat!("PEM file of the certificates trusted when `", $pre, "_ssl_verify` is on; read at load."),
                concat!($pre, "_ssl_trusted_certificate /etc/ssl/backend-ca.pem;")),
            def!($ctx, $pre, "verify_depth", t::set_verify_depth::<$p>, ONE, "number", "1",
                "Most intermediate certificates between a peer's certificate and a trusted one (as OpenSSL 1.1+ counts).",
                concat!($pre, "_ssl_verify_depth 2;")),
            def!($ctx, $pre, "crl", t::set_crl::<$p>, ONE, "file", "—",
                concat!("PEM file of certificate revocation lists checked with `", $pre, "_ssl_verify`: each certificate of the chain below the trusted one needs a current CRL from its issuer here, and is refused if listed."),
                concat!($pre, "_ssl_crl /etc/ssl/backend-ca.crl;")),
            def!($ctx, $pre, "name", t::set_name::<$p>, ONE, "name", "host from the address",
                concat!("The name the certificate of ", $peer, " is checked against and sent as SNI (with `", $pre, "_ssl_server_name on`); variables allowed, a `:port` is dropped. By default the host of `", $pre, "_pass` (the upstream block's name for a block)."),
                concat!($pre, "_ssl_name backend.internal;")),
            def!($ctx, $pre, "server_name", t::set_server_name::<$p>, ONE, "on | off", "off",
                concat!("Sends `", $pre, "_ssl_name` as SNI in the handshake with ", $peer, " (never an IP address)."),
                concat!($pre, "_ssl_server_name on;")),
            def!($ctx, $pre, "protocols", t::set_protocols::<$p>, Arity::args(1, MANY), "[SSLv2] [SSLv3] [TLSv1] [TLSv1.1] [TLSv1.2] [TLSv1.3]", "TLSv1.2 TLSv1.3",
                concat!("TLS versions offered to ", $peer, ". rustls speaks TLSv1.2 and TLSv1.3 only: older names are skipped with a notice, and a list of nothing but older names is an error."),
                concat!($pre, "_ssl_protocols TLSv1.3;")),
            def!($ctx, $pre, "ciphers", t::set_ciphers::<$p>, ONE, "ciphers", "DEFAULT",
                concat!("TLS 1.2 cipher suites offered to ", $peer, ", in OpenSSL's cipher-string language mapped onto rustls's suites as for `ssl_ciphers`; parts that select no suite rustls has are skipped with a notice, and a string that leaves none is an error. TLS 1.3 suites are not affected."),
                concat!($pre, "_ssl_ciphers ECDHE+AESGCM;")),
            def!($ctx, $pre, "certificate", t::set_certificate::<$p>, ONE, "file", "—",
                concat!("PEM certificate (chain) presented to ", $peer, " when it asks for one, with `", $pre, "_ssl_certificate_key`. Variables allowed: the pair is then loaded per value (and kept per worker); an empty value presents none."),
                concat!($pre, "_ssl_certificate /etc/ssl/client.pem;\n", $pre, "_ssl_certificate_key /etc/ssl/client.key;")),
            def!($ctx, $pre, "certificate_key", t::set_certificate_key::<$p>, ONE, "file", "—",
                concat!("PEM private key of `", $pre, "_ssl_certificate` (encrypted: see `", $pre, "_ssl_password_file`); variables allowed."),
                concat!($pre, "_ssl_certificate_key /etc/ssl/client.key;")),
            def!($ctx, $pre, "session_reuse", t::set_session_reuse::<$p>, ONE, "on | off", "on",
                concat!("Resumes TLS sessions with ", $peer, ": the sessions (TLS 1.3 tickets, TLS 1.2 ids or tickets) are kept by peer name, for the connections of each worker made with the same settings."),
                concat!($pre, "_ssl_session_reuse off;")),
            def!($ctx, $pre, "password_file", t::set_password_file::<$p>, ONE, "file", "—",
                concat!("Passwords of an encrypted `", $pre, "_ssl_certificate_key` (PKCS#8, as `openssl genrsa -aes128` or `openssl pkcs8 -topk8` write it), one a line, tried in order; read at load."),
                concat!($pre, "_ssl_certificate_key client.key;\n", $pre, "_ssl_password_file /etc/keys/client.pass;")),
            def!($ctx, $pre, "conf_command", t::set_conf_command::<$p>, Arity::args(2, 2), "name value", "—",
                concat!("OpenSSL's configuration commands for the connections to ", $peer, ", those rustls can carry out: `Certificate` and `PrivateKey` (variables allowed) name the pair presented instead of `", $pre, "_ssl_certificate`'s (the last of each at a level); `Options` may name only what rustls does anyway (`NoRenegotiation`, `NoCompression`, `NoResumptionOnRenegotiation`). Any other command is refused, naming it: `", $pre, "_ssl_protocols` and `", $pre, "_ssl_ciphers` cover the usual ones."),
                concat!($pre, "_ssl_conf_command Certificate /etc/ssl/other-client.pem;\n", $pre, "_ssl_conf_command PrivateKey /etc/ssl/other-client.key;")),
        ]
    }};
}
pub(crate) use directives;
