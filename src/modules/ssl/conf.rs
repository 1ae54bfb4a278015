//! Directives of TLS: certificates, protocols, ciphers, sessions.

use crate::conf::ast::{ConfError, Directive, Span};
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE};
use crate::conf::values::{bad_arg, flag, number, parse_size, set_once, size, time};
use crate::settings;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A file named by `ssl_certificate` or `ssl_certificate_key`, with where.
#[derive(Clone, Debug)]
pub struct PemFile {
    pub path: PathBuf,
    pub span: Span,
    /// The name with variables, rendered per handshake (`ssl_certificate`
    /// and `ssl_certificate_key` only), and the folder a relative name
    /// rendered from it is in (the prefix). A rendered `data:` value is
    /// the PEM itself.
    pub vars: Option<(crate::core::vars::Template, PathBuf)>,
}

/// `ssl_protocols`: the TLS versions rustls offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protocols {
    pub tls12: bool,
    pub tls13: bool,
}

/// `ssl_session_cache`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionCache {
    /// `off` / `none`: no server-side session store.
    Off,
    /// `builtin[:size]` or `shared:name:size`: a store shared by all workers
    /// (one process), of this many sessions, kept across reloads by name.
    Store { name: String, sessions: usize },
}

/// One token of `ssl_ciphers`, in the OpenSSL cipher-string language.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CipherRule {
    /// Add the suites matching all these components (`ECDHE+AESGCM`, `HIGH`,
    /// or a full OpenSSL suite name).
    Add(Vec<String>),
    /// `!x` / `-x`: remove the matching suites.
    Remove(Vec<String>),
}

impl PemFile {
    /// The file's contents, or the text after `data:` (as nginx, the PEM
    /// itself given in the configuration).
    pub fn read(&self) -> Result<Vec<u8>, String> {
        let name = self.path.as_os_str().as_encoded_bytes();
        if let Some(data) = name.strip_prefix(b"data:") {
            return Ok(data.to_vec());
        }
        std::fs::read(&self.path).map_err(|e| crate::core::errlog::errno_text(&e))
    }
}

/// `ssl_verify_client`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyClient {
    Off,
    /// A certificate is required and must verify (else 496 / 495).
    On,
    /// A certificate is asked for; one sent must verify (else 495).
    Optional,
    /// A certificate is asked for and its verification only recorded
    /// (`$ssl_client_verify`), unless its chain is broken.
    OptionalNoCa,
}

/// `ssl_ocsp`: which certificates of a client's chain are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ocsp {
    Off,
    /// Every certificate but the trusted one at the top.
    On,
    /// The client's own certificate only.
    Leaf,
}

/// An OCSP responder's URL (`ssl_stapling_responder`, `ssl_ocsp_responder`), set once.
fn set_url(slot: &mut Option<Option<super::ocsp::Url>>, d: &Directive) -> Result<(), ConfError> {
    let u = super::ocsp::Url::parse(d.arg(0)).map_err(|m| ConfError::new(m, &d.span))?;
    set_once(slot, Some(u), d)
}

fn ocsp_cache(d: &Directive) -> Result<Option<(String, u64)>, ConfError> {
    let a = d.arg(0);
    if a == "off" {
        return Ok(None);
    }
    let invalid = || ConfError::new(format!("invalid ssl_ocsp_cache \"{a}\""), &d.span);
    let rest = a.strip_prefix("shared:").ok_or_else(invalid)?;
    let (name, size) = rest.rsplit_once(':').ok_or_else(invalid)?;
    let size = parse_size(size).ok_or_else(invalid)?;
    if name.is_empty() || size == 0 {
        return Err(invalid());
    }
    Ok(Some((name.to_string(), size)))
}

settings! {
    /// TLS settings of an http or server level.
    pub struct SslConf / SslConfSet {
        /// `ssl_certificate` files, paired in order with `keys`; a level with
        /// any inherits none (each list on its own, as nginx).
        pub certificates: Arc<[PemFile]> = Arc::from(Vec::new()),
        pub keys: Arc<[PemFile]> = Arc::from(Vec::new()),
        pub protocols: Protocols = Protocols { tls12: true, tls13: true },
        /// `ssl_ciphers` (TLS 1.2 suites) with its span for errors.
        pub ciphers: Option<(Arc<[CipherRule]>, Span)> = None,
        /// `ssl_ecdh_curve` as rustls key-exchange group names, in order.
        pub ecdh_curve: Option<Arc<[&'static str]>> = None,
        pub prefer_server_ciphers: bool = false,
        pub session_cache: SessionCache = SessionCache::Off,
        pub session_timeout: Duration = Duration::from_secs(300),
        pub session_tickets: bool = true,
        pub buffer_size: usize = 16 * 1024,
        pub handshake_timeout: Duration = Duration::from_secs(60),
        pub reject_handshake: bool = false,
        /// `ssl on` (deprecated in nginx): the server's addresses are TLS ones.
        pub enable: bool = false,
        /// With the directive's place, for errors.
        pub verify_client: (VerifyClient, Option<Span>) = (VerifyClient::Off, None),
        /// `ssl_client_certificate`: trusted, and named to clients.
        pub client_certificate: Option<PemFile> = None,
        /// `ssl_trusted_certificate`: trusted, not named.
        pub trusted_certificate: Option<PemFile> = None,
        pub crl: Option<PemFile> = None,
        pub verify_depth: u32 = 1,
        /// `ssl_password_file`: pass phrases of encrypted keys.
        pub password_file: Option<PemFile> = None,
        /// `ssl_session_ticket_key` files: the first encrypts, all decrypt.
        pub ticket_keys: Arc<[PemFile]> = Arc::from(Vec::new()),
        pub stapling: bool = false,
        pub stapling_file: Option<PemFile> = None,
        /// `ssl_stapling_responder`: asked instead of the certificate's.
        pub stapling_responder: Option<super::ocsp::Url> = None,
        pub stapling_verify: bool = false,
        /// `ssl_ocsp`, with the directive's place for errors.
        pub ocsp: (Ocsp, Option<Span>) = (Ocsp::Off, None),
        pub ocsp_responder: Option<super::ocsp::Url> = None,
        /// `ssl_ocsp_cache shared:name:size` (`None`: off).
        pub ocsp_cache: Option<(String, u64)> = None,
        /// `ssl_alpn` (stream): the protocols a handshake may agree on.
        pub alpn: Arc<[Vec<u8>]> = Arc::from(Vec::new()),
        /// `ssl_conf_command`s, applied over the other settings, in order.
        pub conf_commands: Arc<[ConfCommand]> = Arc::from(Vec::new()),
    }
}

/// An `ssl_conf_command` (OpenSSL's SSL_CONF commands) vireo carries out.
#[derive(Clone, Debug)]
pub enum ConfCommand {
    /// `Options [-]SessionTicket`.
    Tickets(bool),
    /// `Options [-]ServerPreference`.
    ServerPreference(bool),
    /// `Certificate file`.
    Certificate(PemFile),
    /// `PrivateKey file`.
    PrivateKey(PemFile),
}

/// Options rustls has no use for (it never renegotiates nor compresses).
pub(crate) const MOOT_OPTIONS: &[&str] = &[
    "NoRenegotiation",
    "NoCompression",
    "NoResumptionOnRenegotiation",
];

/// One option of an `Options` command, as OpenSSL writes it (`-` before it
/// turns it off), that rustls has no use for.
pub(crate) fn moot_option(o: &str) -> bool {
    MOOT_OPTIONS.contains(&o.trim().trim_start_matches('-'))
}

fn conf_command(d: &Directive, e: &crate::conf::table::Env) -> Result<Vec<ConfCommand>, ConfError> {
    let (name, value) = (d.arg(0), d.arg(1));
    let unsupported = || {
        ConfError::new(
            format!("\"ssl_conf_command {name} {value}\" is not supported by vireo (rustls)"),
            &d.span,
        )
    };
    let pem = |v: &str| PemFile {
        path: e.path(v),
        span: d.span.clone(),
        vars: None,
    };
    match name {
        "Certificate" => Ok(vec![ConfCommand::Certificate(pem(value))]),
        "PrivateKey" => Ok(vec![ConfCommand::PrivateKey(pem(value))]),
        "Options" => value
            .split(',')
            .map(str::trim)
            .filter(|o| !moot_option(o))
            .map(|o| {
                let (on, opt) = match o.strip_prefix('-') {
                    Some(o) => (false, o),
                    None => (true, o),
                };
                match opt {
                    "SessionTicket" => Ok(ConfCommand::Tickets(on)),
                    "ServerPreference" => Ok(ConfCommand::ServerPreference(on)),
                    _ => Err(unsupported()),
                }
            })
            .collect(),
        _ => Err(unsupported()),
    }
}

fn file(d: &Directive, e: &crate::conf::table::Env) -> PemFile {
    PemFile {
        path: match d.arg(0).starts_with("data:") {
            true => PathBuf::from(d.arg(0)),
            false => e.path(d.arg(0)),
        },
        span: d.span.clone(),
        vars: None,
    }
}

/// A one-file setting (`ssl_client_certificate`, `ssl_crl`, …), set once.
fn set_file(
    slot: &mut Option<Option<PemFile>>,
    d: &Directive,
    e: &crate::conf::table::Env,
) -> Result<(), ConfError> {
    set_once(slot, Some(file(d, e)), d)
}

fn verify_client(d: &Directive) -> Result<VerifyClient, ConfError> {
    Ok(match d.arg(0) {
        "on" => VerifyClient::On,
        "off" => VerifyClient::Off,
        "optional" => VerifyClient::Optional,
        "optional_no_ca" => VerifyClient::OptionalNoCa,
        a => return Err(bad_arg(d, a)),
    })
}

fn push_file(
    slot: &mut Option<Arc<[PemFile]>>,
    d: &Directive,
    e: &mut crate::conf::table::Env,
) -> Result<(), ConfError> {
    let path = match d.arg(0).starts_with("data:") {
        true => PathBuf::from(d.arg(0)),
        false => e.path(d.arg(0)),
    };
    let vars = if d.arg(0).contains('$') && !d.arg(0).starts_with("data:") {
        Some((
            crate::core::vars::Template::compile(d.arg(0), &mut e.vars)
                .map_err(|m| ConfError::new(m, &d.span))?,
            e.prefix.clone(),
        ))
    } else {
        None
    };
    crate::conf::values::push(
        slot,
        PemFile {
            path,
            span: d.span.clone(),
            vars,
        },
    );
    Ok(())
}

/// `ssl_protocols` (and `proxy_ssl_protocols`): the versions named.
pub fn protocols(d: &Directive, e: &mut crate::conf::table::Env) -> Result<Protocols, ConfError> {
    let mut p = Protocols {
        tls12: false,
        tls13: false,
    };
    let mut skipped = Vec::new();
    for a in d.arg_strs() {
        match a {
            "TLSv1.2" => p.tls12 = true,
            "TLSv1.3" => p.tls13 = true,
            "SSLv2" | "SSLv3" | "TLSv1" | "TLSv1.1" => skipped.push(a),
            _ => return Err(bad_arg(d, a)),
        }
    }
    if !(p.tls12 || p.tls13) {
        return Err(ConfError::new(
            format!(
                "\"{}\" names no protocol vireo supports: TLSv1.2 and TLSv1.3 are (rustls has no older ones)",
                d.name
            ),
            &d.span,
        ));
    }
    if !skipped.is_empty() {
        e.notice(format!(
            "\"{}\": {} not supported (rustls speaks TLSv1.2 and TLSv1.3), skipped in {}",
            d.name,
            skipped.join(" "),
            d.span
        ));
    }
    Ok(p)
}

fn ciphers(d: &Directive) -> Result<Arc<[CipherRule]>, ConfError> {
    // The selection is checked against what rustls has when the server's TLS
    // settings are built (see `super::config`), where an empty result is an error.
    Ok(Arc::from(cipher_rules(d.arg(0))))
}

/// The tokens of an OpenSSL cipher string.
pub fn cipher_rules(s: &str) -> Vec<CipherRule> {
    let mut rules = Vec::new();
    for tok in s.split([':', ' ', ',']).filter(|t| !t.is_empty()) {
        if tok.starts_with('@') {
            continue; // @STRENGTH, @SECLEVEL=n: ordering and levels rustls fixes itself
        }
        let (remove, body) = match tok.as_bytes()[0] {
            b'!' | b'-' => (true, &tok[1..]),
            b'+' => continue, // "move to the end": order only
            _ => (false, tok),
        };
        let parts: Vec<String> = body.split('+').map(str::to_owned).collect();
        rules.push(if remove {
            CipherRule::Remove(parts)
        } else {
            CipherRule::Add(parts)
        });
    }
    rules
}

fn session_cache(d: &Directive) -> Result<SessionCache, ConfError> {
    let mut cache = SessionCache::Off;
    for a in d.arg_strs() {
        cache = match a {
            "off" | "none" => SessionCache::Off,
            "builtin" => SessionCache::Store {
                name: String::new(),
                sessions: 20480,
            },
            _ => {
                if let Some(n) = a.strip_prefix("builtin:") {
                    let sessions = n
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| bad_arg(d, a))?;
                    SessionCache::Store {
                        name: String::new(),
                        sessions,
                    }
                } else if let Some(rest) = a.strip_prefix("shared:") {
                    let (name, sz) = rest.rsplit_once(':').ok_or_else(|| bad_arg(d, a))?;
                    let bytes = parse_size(sz)
                        .filter(|b| *b > 0)
                        .ok_or_else(|| bad_arg(d, a))?;
                    // nginx: one megabyte holds about 4000 sessions.
                    SessionCache::Store {
                        name: name.to_owned(),
                        sessions: (bytes / 256).max(1) as usize,
                    }
                } else {
                    return Err(bad_arg(d, a));
                }
            }
        };
    }
    Ok(cache)
}

fn ecdh_curve(d: &Directive) -> Result<Option<Arc<[&'static str]>>, ConfError> {
    if d.arg(0) == "auto" {
        return Ok(None);
    }
    let mut groups = Vec::new();
    for c in d.arg(0).split(':') {
        groups.push(match c {
            "X25519" | "x25519" => "X25519",
            "prime256v1" | "secp256r1" | "P-256" => "secp256r1",
            "secp384r1" | "P-384" => "secp384r1",
            _ => {
                return Err(ConfError::new(
                    format!(
                        "\"ssl_ecdh_curve\": curve \"{c}\" is not supported (X25519, prime256v1 and secp384r1 are)"
                    ),
                    &d.span,
                ));
            }
        });
    }
    Ok(Some(Arc::from(groups)))
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "ssl_conf_command",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: Arity::args(2, 2),
        set: |s, d, e| {
            let cmds = conf_command(d, e)?;
            let l = s.loc().get_mut::<SslConfSet>();
            let mut list: Vec<ConfCommand> = l
                .conf_commands
                .as_deref()
                .map(<[ConfCommand]>::to_vec)
                .unwrap_or_default();
            list.extend(cmds);
            l.conf_commands = Some(Arc::from(list));
            Ok(())
        },
        syntax: "ssl_conf_command name value;",
        default: "—",
        doc: "OpenSSL's configuration commands, those rustls can carry out, applied over the other `ssl_*` settings: `Options` with `SessionTicket` or `ServerPreference` (`-` before one turns it off; `NoRenegotiation`, `NoCompression` and `NoResumptionOnRenegotiation` are what rustls does anyway), `Certificate` and `PrivateKey` (the pair served instead of `ssl_certificate`'s). Any other is refused, naming it.\n\n```nginx\nssl_conf_command Options -ServerPreference;\n```",
    },
    Def {
        name: "ssl_certificate",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, e| push_file(&mut s.loc().get_mut::<SslConfSet>().certificates, d, e),
        syntax: "ssl_certificate file;",
        default: "—",
        doc: "A PEM file with the server's certificate followed by its chain (intermediates). May be given more than once (an RSA and an ECDSA certificate, say): each handshake gets the first whose key can sign with a scheme the client offers. Paired in order with `ssl_certificate_key`. Read when the configuration is loaded or reloaded, so a reload picks up renewed certificates; an unreadable file, one with no certificate, or a key that does not belong to the certificate is an error naming the directive's file:line. Every server on an address with `listen … ssl` needs one (or `ssl_reject_handshake on`).\n\n```nginx\nserver {\n    listen 443 ssl;\n    server_name example.com;\n    ssl_certificate     /etc/ssl/example.com.fullchain.pem;\n    ssl_certificate_key /etc/ssl/example.com.key;\n    ssl_certificate     /etc/ssl/example.com.ecdsa.pem;\n    ssl_certificate_key /etc/ssl/example.com.ecdsa.key;\n}\n```",
    },
    Def {
        name: "ssl_certificate_key",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, e| push_file(&mut s.loc().get_mut::<SslConfSet>().keys, d, e),
        syntax: "ssl_certificate_key file;",
        default: "—",
        doc: "A PEM file with the private key of the `ssl_certificate` in the same position: PKCS#8, PKCS#1 (RSA) or SEC1 (EC); it may be the certificate's own file. Encrypted keys are not supported.\n\n```nginx\nssl_certificate_key /etc/ssl/example.com.key;\n```",
    },
    Def {
        name: "ssl_protocols",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: Arity::args(1, MANY),
        set: |s, d, e| {
            let p = protocols(d, e)?;
            set_once(&mut s.loc().get_mut::<SslConfSet>().protocols, p, d)
        },
        syntax: "ssl_protocols [SSLv2] [SSLv3] [TLSv1] [TLSv1.1] [TLSv1.2] [TLSv1.3];",
        default: "TLSv1.2 TLSv1.3",
        doc: "TLS versions offered. rustls speaks TLSv1.2 and TLSv1.3 only: older names are skipped with a notice in the error log, and a list of nothing but older names is an error.\n\n```nginx\nssl_protocols TLSv1.2 TLSv1.3;\n```",
    },
    Def {
        name: "ssl_ciphers",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            let c = ciphers(d)?;
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().ciphers,
                Some((c, d.span.clone())),
                d,
            )
        },
        syntax: "ssl_ciphers ciphers;",
        default: "HIGH:!aNULL:!MD5",
        doc: "TLS 1.2 cipher suites, in OpenSSL's cipher-string language, mapped onto the suites rustls has (ECDHE with AES-GCM or ChaCha20-Poly1305, RSA or ECDSA certificates; every one of them forward-secret and AEAD). Full names (`ECDHE-RSA-AES128-GCM-SHA256`) and components joined by `+` (`ECDHE+AESGCM`, `aECDSA`, `AES256`, `CHACHA20`, `SHA384`, `HIGH`, `ALL`, `DEFAULT`) select; `!x` and `-x` remove; `@STRENGTH`/`@SECLEVEL` are accepted. Names of suites rustls lacks (CBC, RC4, 3DES, DHE, static RSA…) select nothing, as OpenSSL skips unknown ones; a string that leaves no suite is an error naming its file:line. As with OpenSSL, TLS 1.3 suites are not affected.\n\n```nginx\nssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE+CHACHA20;\n```",
    },
    Def {
        name: "ssl_prefer_server_ciphers",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().prefer_server_ciphers,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "ssl_prefer_server_ciphers on | off;",
        default: "off",
        doc: "With `on` the server's order of cipher suites wins over the client's.\n\n```nginx\nssl_prefer_server_ciphers on;\n```",
    },
    Def {
        name: "ssl_ecdh_curve",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            let c = ecdh_curve(d)?;
            set_once(&mut s.loc().get_mut::<SslConfSet>().ecdh_curve, c, d)
        },
        syntax: "ssl_ecdh_curve auto | curve[:curve…];",
        default: "auto",
        doc: "Key-exchange groups in order of preference: `X25519`, `prime256v1` (P-256), `secp384r1` (P-384); `auto` is rustls's order (X25519 first).\n\n```nginx\nssl_ecdh_curve X25519:prime256v1;\n```",
    },
    Def {
        name: "ssl_session_cache",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: Arity::args(1, 2),
        set: |s, d, _| {
            let c = session_cache(d)?;
            set_once(&mut s.loc().get_mut::<SslConfSet>().session_cache, c, d)
        },
        syntax: "ssl_session_cache off | none | [builtin[:size]] [shared:name:size];",
        default: "none",
        doc: "A server-side store of TLS sessions for resumption without a full handshake (TLS 1.2 session ids, TLS 1.3 stateful tickets when tickets are off). vireo's workers are threads of one process, so every store is shared by all workers: `builtin:N` holds N sessions, `shared:NAME:SIZE` about 4000 sessions per megabyte (as nginx), and a store keeps its sessions across reloads while its name and size stay. `off` and `none` keep none (tickets still resume when `ssl_session_tickets` is on).\n\n```nginx\nssl_session_cache shared:SSL:10m;\nssl_session_timeout 1h;\n```",
    },
    Def {
        name: "ssl_session_timeout",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().session_timeout,
                time(d, 0)?,
                d,
            )
        },
        syntax: "ssl_session_timeout time;",
        default: "5m",
        doc: "How long a session, from the cache or a ticket, may be resumed.\n\n```nginx\nssl_session_timeout 1d;\n```",
    },
    Def {
        name: "ssl_session_tickets",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().session_tickets,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "ssl_session_tickets on | off;",
        default: "on",
        doc: "Resumption by session tickets (RFC 5077, TLS 1.3 tickets). The ticket keys are made at start-up, shared by all workers, kept across reloads and rotated by rustls; they are never written to disk.\n\n```nginx\nssl_session_tickets off;\n```",
    },
    Def {
        name: "ssl_buffer_size",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, _| {
            let n = size(d, 0)?;
            if !(512..=16 * 1024).contains(&n) {
                return Err(ConfError::new(
                    format!(
                        "\"ssl_buffer_size\" must be between 512 and 16k, not \"{}\"",
                        d.arg(0)
                    ),
                    &d.span,
                ));
            }
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().buffer_size,
                n as usize,
                d,
            )
        },
        syntax: "ssl_buffer_size size;",
        default: "16k",
        doc: "The largest TLS record sent. Smaller records let a browser start on the first bytes sooner (time to first byte) at some CPU cost.\n\n```nginx\nssl_buffer_size 4k;\n```",
    },
    Def {
        name: "ssl_handshake_timeout",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().handshake_timeout,
                time(d, 0)?,
                d,
            )
        },
        syntax: "ssl_handshake_timeout time;",
        default: "60s",
        doc: "How long a TLS handshake may take. Handshakes in progress count against `worker_connections` like any connection, so a flood of slow handshakes is bounded by both.\n\n```nginx\nssl_handshake_timeout 10s;\n```",
    },
    Def {
        name: "ssl_reject_handshake",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().reject_handshake,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "ssl_reject_handshake on | off;",
        default: "off",
        doc: "With `on`, a handshake whose server name selects this server is refused with an `unrecognized_name` alert; such a server needs no certificate. The usual use: a `default_server` that answers no unknown names.\n\n```nginx\nserver {\n    listen 443 ssl default_server;\n    ssl_reject_handshake on;\n}\n```",
    },
    Def {
        name: "ssl",
        ignored: false,
        ctx: Ctx::HS,
        arity: ONE,
        set: |s, d, e| {
            e.notice(format!(
                "the \"ssl\" directive is deprecated, use the \"listen ... ssl\" directive instead in {}",
                d.span
            ));
            set_once(&mut s.loc().get_mut::<SslConfSet>().enable, flag(d, 0)?, d)
        },
        syntax: "ssl on | off;",
        default: "off",
        doc: "Deprecated in nginx (a notice says so): `on` makes every address of the server (of every server, in http) a TLS one, as `listen … ssl` does; each server on such an address then needs `ssl_certificate`.\n\n```nginx\nserver {\n    listen 443;\n    ssl on;\n    ssl_certificate cert.pem;\n    ssl_certificate_key cert.key;\n}\n```",
    },
    Def {
        name: "ssl_alpn",
        ignored: false,
        ctx: Ctx::SS,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            let a = alpn(d)?;
            set_once(&mut s.loc().get_mut::<SslConfSet>().alpn, a, d)
        },
        syntax: "ssl_alpn protocol …;",
        default: "—",
        doc: "The protocols a stream server's TLS handshake agrees on by ALPN, in its order of preference; a client that offers ALPN and none of them is refused with a `no_application_protocol` alert, one that offers none is served. The protocol agreed on is `$ssl_alpn_protocol`.\n\n```nginx\nssl_alpn h2 http/1.1;\n```",
    },
    Def {
        name: "ssl_verify_client",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            let v = verify_client(d)?;
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().verify_client,
                (v, Some(d.span.clone())),
                d,
            )
        },
        syntax: "ssl_verify_client on | off | optional | optional_no_ca;",
        default: "off",
        doc: "Ask TLS clients for a certificate and verify it against `ssl_client_certificate` and `ssl_trusted_certificate` (with `ssl_crl`, up to `ssl_verify_depth` intermediates). The handshake never fails for it: as nginx, the request is then answered 400 — \"No required SSL certificate was sent\" with `on` and no certificate (status 496 for `error_page`), \"The SSL certificate error\" when a certificate does not verify (495) — and the connection closed. `optional` asks without requiring; `optional_no_ca` also lets through a certificate whose chain leads to no trusted one, for the application to judge (`$ssl_client_verify` says `FAILED:…`). A request whose Host names another server than the one the handshake chose (SNI) is answered 421 when that server verifies clients.\n\n```nginx\nssl_verify_client on;\nssl_client_certificate /etc/ssl/clients-ca.pem;\n```",
    },
    Def {
        name: "ssl_client_certificate",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, e| {
            set_file(
                &mut s.loc().get_mut::<SslConfSet>().client_certificate,
                d,
                e,
            )
        },
        syntax: "ssl_client_certificate file;",
        default: "—",
        doc: "PEM certificates of the authorities trusted for client certificates; their names are also sent to clients in the certificate request (each once). Required by `ssl_verify_client on` and `optional`.\n\n```nginx\nssl_client_certificate /etc/ssl/clients-ca.pem;\n```",
    },
    Def {
        name: "ssl_trusted_certificate",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, e| {
            set_file(
                &mut s.loc().get_mut::<SslConfSet>().trusted_certificate,
                d,
                e,
            )
        },
        syntax: "ssl_trusted_certificate file;",
        default: "—",
        doc: "PEM certificates trusted for client certificates (and for checking stapled OCSP responses) whose names are not sent to clients.\n\n```nginx\nssl_trusted_certificate /etc/ssl/more-cas.pem;\n```",
    },
    Def {
        name: "ssl_crl",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, e| set_file(&mut s.loc().get_mut::<SslConfSet>().crl, d, e),
        syntax: "ssl_crl file;",
        default: "—",
        doc: "PEM certificate revocation lists for client certificates. With it every certificate of a client's chain needs its issuer's list: a revoked one fails with `certificate revoked`, one whose issuer has no list with `unable to get certificate CRL`. Read when the configuration is loaded.\n\n```nginx\nssl_crl /etc/ssl/clients.crl;\n```",
    },
    Def {
        name: "ssl_verify_depth",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            let n = u32::try_from(number(d, 0)?).map_err(|_| bad_arg(d, d.arg(0)))?;
            set_once(&mut s.loc().get_mut::<SslConfSet>().verify_depth, n, d)
        },
        syntax: "ssl_verify_depth number;",
        default: "1",
        doc: "How many intermediate certificates may stand between a client's certificate and the trusted one (as OpenSSL ≥ 1.1.0 counts).\n\n```nginx\nssl_verify_depth 2;\n```",
    },
    Def {
        name: "ssl_password_file",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, e| set_file(&mut s.loc().get_mut::<SslConfSet>().password_file, d, e),
        syntax: "ssl_password_file file;",
        default: "—",
        doc: "Pass phrases for encrypted `ssl_certificate_key` files, one per line: each is tried in turn. Encrypted PKCS#8 keys (`BEGIN ENCRYPTED PRIVATE KEY`, what OpenSSL 3 writes) are read.\n\n```nginx\nssl_password_file /etc/ssl/passphrases;\n```",
    },
    Def {
        name: "ssl_session_ticket_key",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, e| {
            let f = file(d, e);
            crate::conf::values::push(&mut s.loc().get_mut::<SslConfSet>().ticket_keys, f);
            Ok(())
        },
        syntax: "ssl_session_ticket_key file;",
        default: "—",
        doc: "A file of 80 (or 48) random bytes that encrypts and decrypts session tickets, so that several servers (or restarts) resume each other's sessions. Given more than once, the first key encrypts and all decrypt (for rotation). Without it a key is made at start-up and kept across reloads.\n\n```nginx\nssl_session_ticket_key current.key;\nssl_session_ticket_key previous.key;\n```",
    },
    Def {
        name: "ssl_stapling",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().stapling,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "ssl_stapling on | off;",
        default: "off",
        doc: "Send an OCSP response with the server's certificates (stapling): the response of `ssl_stapling_file`, else one asked of the OCSP responder (`ssl_stapling_responder`, else the certificate's Authority Information Access URL) over plain HTTP, a name resolved through `resolver`. As nginx, the first handshake starts the request and goes on without a response; later ones staple it while it holds, and it is asked again before its nextUpdate (at most an hour later, five minutes after a failure). Only a `good` status is stapled. The issuer is found in the certificate's chain or among `ssl_trusted_certificate`; a certificate without issuer or responder staples nothing (a warning says why).\n\n```nginx\nssl_stapling on;\nssl_trusted_certificate /etc/ssl/chain.pem;\nresolver 127.0.0.53;\n```",
    },
    Def {
        name: "ssl_stapling_file",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, e| set_file(&mut s.loc().get_mut::<SslConfSet>().stapling_file, d, e),
        syntax: "ssl_stapling_file file;",
        default: "—",
        doc: "A DER OCSP response (as `openssl ocsp -respout` writes) stapled, with `ssl_stapling on`, to the handshakes of the server's first certificate. Read when the configuration is loaded.\n\n```nginx\nssl_stapling_file /etc/ssl/example.com.ocsp.der;\n```",
    },
    Def {
        name: "ssl_stapling_responder",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| set_url(&mut s.loc().get_mut::<SslConfSet>().stapling_responder, d),
        syntax: "ssl_stapling_responder url;",
        default: "—",
        doc: "The OCSP responder asked for stapled responses instead of the one the certificate names. Only `http://` responders are supported.\n\n```nginx\nssl_stapling_responder http://ocsp.example.com/;\n```",
    },
    Def {
        name: "ssl_stapling_verify",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().stapling_verify,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "ssl_stapling_verify on | off;",
        default: "off",
        doc: "Staple a response from a responder only when its signature verifies: signed by the certificate's issuer, or by a responder certificate the issuer gave the OCSP-signing purpose, the issuer leading to a certificate of `ssl_trusted_certificate`. A `ssl_stapling_file` response is stapled as it is.\n\n```nginx\nssl_stapling_verify on;\nssl_trusted_certificate /etc/ssl/ca-chain.pem;\n```",
    },
    Def {
        name: "ssl_ocsp",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0) {
                "on" => Ocsp::On,
                "off" => Ocsp::Off,
                "leaf" => Ocsp::Leaf,
                a => return Err(bad_arg(d, a)),
            };
            set_once(
                &mut s.loc().get_mut::<SslConfSet>().ocsp,
                (v, Some(d.span.clone())),
                d,
            )
        },
        syntax: "ssl_ocsp on | off | leaf;",
        default: "off",
        doc: "Check client certificates (`ssl_verify_client`) with OCSP once their chain verifies: every certificate of the chain but the trusted one at its top, or with `leaf` the client's own only. Each is asked of `ssl_ocsp_responder`, else of the responder its certificate names, over plain HTTP (names through `resolver`); the response must be signed by the certificate's issuer or a responder it delegated to. A revoked certificate gives `$ssl_client_verify` `FAILED:certificate revoked`, a failed request `FAILED:certificate status request failed`, and the request is answered 400 (495). Not allowed with `ssl_verify_client optional_no_ca`.\n\n```nginx\nssl_verify_client on;\nssl_client_certificate /etc/ssl/clients-ca.pem;\nssl_ocsp on;\nresolver 127.0.0.53;\n```",
    },
    Def {
        name: "ssl_ocsp_responder",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| set_url(&mut s.loc().get_mut::<SslConfSet>().ocsp_responder, d),
        syntax: "ssl_ocsp_responder url;",
        default: "—",
        doc: "The OCSP responder `ssl_ocsp` asks instead of the ones the client certificates name. Only `http://` responders are supported.\n\n```nginx\nssl_ocsp_responder http://ocsp.example.com/;\n```",
    },
    Def {
        name: "ssl_ocsp_cache",
        ignored: false,
        ctx: Ctx::HS.or(Ctx::SS),
        arity: ONE,
        set: |s, d, _| {
            let c = ocsp_cache(d)?;
            set_once(&mut s.loc().get_mut::<SslConfSet>().ocsp_cache, c, d)
        },
        syntax: "ssl_ocsp_cache off | [shared:name:size];",
        default: "off",
        doc: "Keep the statuses `ssl_ocsp` found, by certificate, until the response's nextUpdate (an hour when it gives none), so that later handshakes ask no responder. The cache is shared by all workers (threads of one process), holds about 4000 entries per megabyte, and is kept across reloads while its name and size stay. Without it every handshake with a client certificate asks.\n\n```nginx\nssl_ocsp_cache shared:OCSP:10m;\n```",
    },
];

/// `ssl_alpn` of a stream server (http's protocols are its listeners').
fn alpn(d: &Directive) -> Result<Arc<[Vec<u8>]>, ConfError> {
    let mut list = Vec::new();
    for a in d.arg_strs() {
        if a.is_empty() || a.len() > 255 {
            return Err(bad_arg(d, a));
        }
        list.push(a.as_bytes().to_vec());
    }
    Ok(Arc::from(list))
}

/// Accepted for compatibility: they mean nothing with rustls.
pub static IGNORED: &[Def] = &[crate::conf::core_directives::ignored(
    "ssl_dhparam",
    Ctx::HS.or(Ctx::SS),
    ONE,
    "ssl_dhparam file;",
    "rustls has no finite-field Diffie-Hellman suites\n\n```nginx\nssl_dhparam /etc/ssl/dhparam.pem;\n```",
)];

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str, args: &[&str]) -> Directive {
        Directive::test(name, args, 3)
    }

    #[test]
    fn session_cache_forms() {
        let c = |a: &[&str]| session_cache(&dir("ssl_session_cache", a));
        assert_eq!(c(&["none"]).unwrap(), SessionCache::Off);
        assert_eq!(
            c(&["shared:SSL:1m"]).unwrap(),
            SessionCache::Store {
                name: "SSL".into(),
                sessions: 4096
            }
        );
        assert_eq!(
            c(&["builtin:100"]).unwrap(),
            SessionCache::Store {
                name: String::new(),
                sessions: 100
            }
        );
        assert!(c(&["shared:SSL"]).is_err());
        assert!(c(&["builtin:x"]).is_err());
        assert!(c(&["lots"]).is_err());
    }

    #[test]
    fn cipher_strings_parse_into_rules() {
        let r = ciphers(&dir(
            "ssl_ciphers",
            &["ECDHE+AESGCM:!aNULL:@STRENGTH:+AES256"],
        ))
        .unwrap();
        assert_eq!(
            &*r,
            &[
                CipherRule::Add(vec!["ECDHE".into(), "AESGCM".into()]),
                CipherRule::Remove(vec!["aNULL".into()])
            ]
        );
    }

    #[test]
    fn curves_map_to_groups() {
        let c = |a: &str| ecdh_curve(&dir("ssl_ecdh_curve", &[a]));
        assert_eq!(c("auto").unwrap(), None);
        assert_eq!(
            c("prime256v1:X25519").unwrap().as_deref(),
            Some(&["secp256r1", "X25519"][..])
        );
        assert!(c("brainpoolP256r1").is_err());
    }
}
