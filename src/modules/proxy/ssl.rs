//! TLS to upstreams, once for each handler that has it (`proxy_pass
//! https://…`, `grpc_pass grpcs://…`): the `*_ssl_*` directives, one
//! settings slot per handler, and, per request, the TLS client and peer
//! name a connection is made with (`upstream::tls::Dial`). The TLS itself
//! is the upstream layer's (`upstream::tls`).

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, Env, MANY, ONE, Scope};
use crate::conf::values;
use crate::core::module::{Module, Settings, SettingsSet, Slot};
use crate::core::request::Request;
use crate::core::vars::Template;
use crate::upstream::tls::{Client, Dial, Spec};
use rustc_hash::FxHashMap;
use rustls::SupportedCipherSuite;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Which handler's directives: their prefix, the protocols offered by
/// ALPN, and the settings slot.
pub trait Kind: 'static + Send + Sync + Clone + Default + std::fmt::Debug {
    const PREFIX: &'static str;
    const ALPN: &'static [&'static [u8]];
    fn slot() -> &'static Slot;
}

/// `proxy_ssl_*`: HTTP/1.x, no ALPN.
#[derive(Clone, Debug, Default)]
pub struct Proxy;
/// `grpc_ssl_*`: HTTP/2, ALPN `h2`.
#[derive(Clone, Debug, Default)]
pub struct Grpc;

impl Kind for Proxy {
    const PREFIX: &'static str = "proxy";
    const ALPN: &'static [&'static [u8]] = &[];
    fn slot() -> &'static Slot {
        static SLOT: Slot = Slot::new();
        &SLOT
    }
}

impl Kind for Grpc {
    const PREFIX: &'static str = "grpc";
    const ALPN: &'static [&'static [u8]] = &[b"h2"];
    fn slot() -> &'static Slot {
        static SLOT: Slot = Slot::new();
        &SLOT
    }
}

/// The settings as `settings!` makes them (their own slot is unused: each
/// handler's copy has its slot, see [`SslConf`]).
mod loc {
    #![allow(dead_code)]
    use super::*;
    crate::settings! {
        /// TLS to the upstreams of one level, for one handler.
        pub struct SslLoc / SslLocSet {
            pub ssl_verify: bool = false,
            pub ssl_verify_depth: u32 = 1,
            pub ssl_trusted: Arc<[CertificateDer<'static>]> = Arc::from(Vec::new()),
            /// CRLs, DER.
            pub ssl_crl: Arc<[Vec<u8>]> = Arc::from(Vec::new()),
            pub ssl_name: Option<Template> = None,
            pub ssl_server_name: bool = false,
            pub ssl_protocols: crate::modules::ssl::conf::Protocols =
                crate::modules::ssl::conf::Protocols { tls12: true, tls13: true },
            /// TLS 1.2 suites (`None`: all rustls has).
            pub ssl_ciphers: Option<Arc<[SupportedCipherSuite]>> = None,
            pub ssl_certificate: Option<FileName> = None,
            pub ssl_certificate_key: Option<FileName> = None,
            /// `*_ssl_password_file`: passwords of an encrypted key, in order.
            pub ssl_passwords: Arc<[String]> = Arc::from(Vec::new()),
            pub ssl_session_reuse: bool = true,
            /// The TLS clients of these settings: a level that sets any
            /// `*_ssl_*` has its own.
            pub ssl_clients: Arc<Clients> = Arc::new(Clients::default()),
        }
    }
}
pub use loc::{SslLoc, SslLocSet};

/// A handler's TLS settings (its own slot).
#[derive(Clone, Debug, Default)]
pub struct SslConf<K: Kind>(pub SslLoc, PhantomData<K>);

impl<K: Kind> Settings for SslConf<K> {
    fn slot() -> &'static Slot {
        K::slot()
    }
}

impl<K: Kind> SslConf<K> {
    pub const KIND: crate::core::module::SettingsKind =
        crate::core::module::SettingsKind::of::<SslConf<K>>();
}

#[derive(Debug, Default)]
pub struct SslConfSet<K: Kind>(pub SslLocSet, PhantomData<K>);

impl<K: Kind> SettingsSet for SslConfSet<K> {
    type Resolved = SslConf<K>;
    fn resolve(&self, parent: &SslConf<K>) -> SslConf<K> {
        SslConf(self.0.resolve(&parent.0), PhantomData)
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

/// (settings, certificate, key, ALPN).
type ClientKey = (
    u64,
    Option<PathBuf>,
    Option<PathBuf>,
    &'static [&'static [u8]],
);

thread_local! {
    static CLIENTS: RefCell<FxHashMap<ClientKey, Arc<Client>>> =
        RefCell::new(FxHashMap::default());
}

/// The TLS client and name for this request's connections to `default_name`'s
/// peers (the handler's host, unless `*_ssl_name` gives one). `Err`:
/// logged, 502.
pub fn dial<K: Kind>(req: &Request<'_>, default_name: &str) -> Result<Dial, ()> {
    let pc = &req.conf.get::<SslConf<K>>().0;
    let cert = pc.ssl_certificate.as_ref().and_then(|f| f.path(req));
    let key = pc.ssl_certificate_key.as_ref().and_then(|f| f.path(req));
    let id = (pc.ssl_clients.id, cert, key, K::ALPN);
    let fail = |msg: String| crate::error_log!(Error, "{msg}{}", req.log_context());
    let client = match CLIENTS.with(|c| c.borrow().get(&id).cloned()) {
        Some(c) => c,
        None => {
            let c = build::<K>(pc, id.1.as_deref(), id.2.as_deref()).map_err(fail)?;
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
    let name = match &pc.ssl_name {
        Some(t) => {
            let mut v = Vec::new();
            t.render(req, &mut v);
            String::from_utf8_lossy(&v).into_owned()
        }
        None => default_name.to_string(),
    };
    Dial::new(client, &name).map_err(fail)
}

fn build<K: Kind>(
    pc: &SslLoc,
    cert: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
) -> Result<Arc<Client>, String> {
    let client_cert = match (cert, key) {
        (Some(c), Some(k)) => Some(Arc::new(crate::modules::ssl::config::load_key_pair(
            c,
            k,
            &pc.ssl_passwords,
            &crate::upstream::tls::provider(),
        )?)),
        (Some(c), None) => {
            return Err(format!(
                "no \"{}_ssl_certificate_key\" for the certificate \"{}\"",
                K::PREFIX,
                c.display()
            ));
        }
        _ => None,
    };
    Client::build(&Spec {
        verify: pc.ssl_verify,
        depth: pc.ssl_verify_depth,
        trusted: pc.ssl_trusted.clone(),
        crls: pc.ssl_crl.clone(),
        sni: pc.ssl_server_name,
        tls12: pc.ssl_protocols.tls12,
        tls13: pc.ssl_protocols.tls13,
        tls12_suites: pc.ssl_ciphers.as_deref().map(<[_]>::to_vec),
        session_reuse: pc.ssl_session_reuse,
        client_cert,
        alpn: K::ALPN,
    })
}

fn loc<'a, K: Kind>(s: &'a mut Scope<'_>) -> &'a mut SslLocSet {
    let l = &mut s.loc().get_mut::<SslConfSet<K>>().0;
    // This level's TLS settings differ from those it inherits: its own clients.
    l.ssl_clients = Some(Arc::new(Clients::default()));
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

fn file_name(d: &Directive, e: &mut Env) -> Result<FileName, ConfError> {
    let name = crate::conf::values::template(d, 0, &mut e.vars)?;
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

fn refuse(d: &Directive, why: &str) -> Result<(), ConfError> {
    Err(ConfError::new(
        format!("\"{}\" is not supported by vireo: {why}", d.name),
        &d.span,
    ))
}

/// The `*_ssl_*` directives of one handler (`$p`: its prefix).
macro_rules! defs {
    ($p:literal, $K:ty, $name_default:literal) => {
        &[
    Def {
        name: concat!($p, "_ssl_verify"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| values::set_once(&mut loc::<$K>(s).ssl_verify, values::flag(d, 0)?, d),
        syntax: concat!($p, "_ssl_verify on | off;"),
        default: "off",
        doc: concat!("Checks the certificate of a TLS upstream: its chain must end at a `", $p, "_ssl_trusted_certificate` within `", $p, "_ssl_verify_depth`, every certificate be within its validity (and not revoked, with `", $p, "_ssl_crl`), and its subjectAltName (or, without DNS names, its common name) match `", $p, "_ssl_name`. A refused certificate fails the attempt (502, or the next peer). Off, as in nginx, any certificate is accepted.\n\n```nginx\n", $p, "_ssl_verify on;\n", $p, "_ssl_trusted_certificate /etc/ssl/backend-ca.pem;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_trusted_certificate"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let certs = pem_list::<CertificateDer<'static>>(d, e, "certificate")?;
            values::set_once(&mut loc::<$K>(s).ssl_trusted, Arc::from(certs), d)
        },
        syntax: concat!($p, "_ssl_trusted_certificate file;"),
        default: "—",
        doc: concat!("PEM file of the certificates trusted when `", $p, "_ssl_verify` is on; read at load.\n\n```nginx\n", $p, "_ssl_trusted_certificate /etc/ssl/backend-ca.pem;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_verify_depth"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let n = values::number(d, 0)? as u32;
            values::set_once(&mut loc::<$K>(s).ssl_verify_depth, n, d)
        },
        syntax: concat!($p, "_ssl_verify_depth number;"),
        default: "1",
        doc: concat!("Most intermediate certificates between an upstream's certificate and a trusted one (as OpenSSL 1.1+ counts).\n\n```nginx\n", $p, "_ssl_verify_depth 2;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_crl"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let crls =
                pem_list::<rustls_pki_types::CertificateRevocationListDer<'static>>(d, e, "CRL")?;
            let crls: Vec<Vec<u8>> = crls.iter().map(|c| c.as_ref().to_vec()).collect();
            values::set_once(&mut loc::<$K>(s).ssl_crl, Arc::from(crls), d)
        },
        syntax: concat!($p, "_ssl_crl file;"),
        default: "—",
        doc: concat!("PEM file of certificate revocation lists checked with `", $p, "_ssl_verify`: each certificate of the chain below the trusted one needs a current CRL from its issuer here, and is refused if listed.\n\n```nginx\n", $p, "_ssl_crl /etc/ssl/backend-ca.crl;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_name"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let t = crate::conf::values::template(d, 0, &mut e.vars)?;
            values::set_once(&mut loc::<$K>(s).ssl_name, Some(t), d)
        },
        syntax: concat!($p, "_ssl_name name;"),
        default: $name_default,
        doc: concat!("The name a TLS upstream's certificate is checked against and sent as SNI (with `", $p, "_ssl_server_name on`); variables allowed, a `:port` is dropped. By default the host of ", $p, "_pass (the upstream block's name for a block).\n\n```nginx\n", $p, "_ssl_name backend.internal;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_server_name"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| values::set_once(&mut loc::<$K>(s).ssl_server_name, values::flag(d, 0)?, d),
        syntax: concat!($p, "_ssl_server_name on | off;"),
        default: "off",
        doc: concat!("Sends `", $p, "_ssl_name` as SNI in the handshake with a TLS upstream (never an IP address).\n\n```nginx\n", $p, "_ssl_server_name on;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_protocols"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, e| {
            let p = crate::modules::ssl::conf::protocols(d, e)?;
            values::set_once(&mut loc::<$K>(s).ssl_protocols, p, d)
        },
        syntax: concat!($p, "_ssl_protocols [SSLv2] [SSLv3] [TLSv1] [TLSv1.1] [TLSv1.2] [TLSv1.3];"),
        default: "TLSv1.2 TLSv1.3",
        doc: concat!("TLS versions offered to TLS upstreams. rustls speaks TLSv1.2 and TLSv1.3 only: older names are skipped with a notice, and a list of nothing but older names is an error.\n\n```nginx\n", $p, "_ssl_protocols TLSv1.3;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_ciphers"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let c = ciphers(d, e)?;
            values::set_once(&mut loc::<$K>(s).ssl_ciphers, Some(c), d)
        },
        syntax: concat!($p, "_ssl_ciphers ciphers;"),
        default: "DEFAULT",
        doc: concat!("TLS 1.2 cipher suites offered to TLS upstreams, in OpenSSL's cipher-string language mapped onto rustls's suites as for `ssl_ciphers`; parts that select no suite rustls has are skipped with a notice, and a string that leaves none is an error. TLS 1.3 suites are not affected.\n\n```nginx\n", $p, "_ssl_ciphers ECDHE+AESGCM;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_certificate"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let f = file_name(d, e)?;
            values::set_once(&mut loc::<$K>(s).ssl_certificate, Some(f), d)
        },
        syntax: concat!($p, "_ssl_certificate file;"),
        default: "—",
        doc: concat!("PEM certificate (chain) presented to TLS upstreams that ask for one, with `", $p, "_ssl_certificate_key`. Variables allowed: the pair is then loaded per value (and kept per worker); an empty value presents none.\n\n```nginx\n", $p, "_ssl_certificate /etc/ssl/client.pem;\n", $p, "_ssl_certificate_key /etc/ssl/client.key;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_certificate_key"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
            let f = file_name(d, e)?;
            values::set_once(&mut loc::<$K>(s).ssl_certificate_key, Some(f), d)
        },
        syntax: concat!($p, "_ssl_certificate_key file;"),
        default: "—",
        doc: concat!("PEM private key (unencrypted) of `", $p, "_ssl_certificate`; variables allowed.\n\n```nginx\n", $p, "_ssl_certificate_key /etc/ssl/client.key;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_session_reuse"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| values::set_once(&mut loc::<$K>(s).ssl_session_reuse, values::flag(d, 0)?, d),
        syntax: concat!($p, "_ssl_session_reuse on | off;"),
        default: "on",
        doc: concat!("Resumes TLS sessions with TLS upstreams: the sessions (TLS 1.3 tickets, TLS 1.2 ids or tickets) are kept by peer name, for the connections of each worker made with the same settings.\n\n```nginx\n", $p, "_ssl_session_reuse off;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_password_file"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, e| {
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
            values::set_once(&mut loc::<$K>(s).ssl_passwords, Arc::from(lines), d)
        },
        syntax: concat!($p, "_ssl_password_file file;"),
        default: "—",
        doc: concat!("Passwords of an encrypted `", $p, "_ssl_certificate_key` (PKCS#8, as `openssl genrsa -aes128` or `openssl pkcs8 -topk8` write it), one a line, tried in order; read at load.\n\n```nginx\n", $p, "_ssl_certificate_key client.key;\n", $p, "_ssl_password_file /etc/keys/client.pass;\n```"),
    },
    Def {
        name: concat!($p, "_ssl_conf_command"),
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(2, 2),
        set: |_, d, _| {
            refuse(
                d,
                concat!("TLS is rustls, which takes no OpenSSL configuration commands; use ", $p, "_ssl_protocols and ", $p, "_ssl_ciphers"),
            )
        },
        syntax: concat!($p, "_ssl_conf_command name value;"),
        default: "—",
        doc: concat!("Refused with an error: there is no OpenSSL to pass commands to (rustls); `", $p, "_ssl_protocols` and `", $p, "_ssl_ciphers` cover the usual ones.\n\n```nginx\n", $p, "_ssl_protocols TLSv1.3;\n```"),
    },
]
    };
}

pub static PROXY_DIRECTIVES: &[Def] = defs!("proxy", Proxy, "$proxy_host");
pub static GRPC_DIRECTIVES: &[Def] = defs!("grpc", Grpc, "host of grpc_pass");

/// `proxy_ssl_*` (their settings slot).
pub static PROXY_MODULE: Module = Module {
    name: "proxy_ssl",
    directives: &[PROXY_DIRECTIVES],
    settings: Some(&SslConf::<Proxy>::KIND),
    ..Module::EMPTY
};

/// `grpc_ssl_*` (their settings slot).
pub static GRPC_MODULE: Module = Module {
    name: "grpc_ssl",
    directives: &[GRPC_DIRECTIVES],
    settings: Some(&SslConf::<Grpc>::KIND),
    ..Module::EMPTY
};
