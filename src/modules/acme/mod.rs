//! ACME (RFC 8555): certificates a server asks an issuer for, obtains,
//! serves and renews by itself, with nginx's `ngx_http_acme_module`
//! directives (`acme_issuer`, `acme_certificate`, `$acme_certificate`).
//!
//! - [`conf`]: the directives;
//! - [`store`]: the managed certificates and their current pairs (read by
//!   handshakes through the variables), the answers to pending challenges,
//!   the state folder;
//! - [`client`]: the ACME thread that orders, validates, installs and
//!   renews (renewal information, RFC 9773), with back-off;
//! - [`chain`]: the issuer's alternate chains, for `preferred_chain`;
//! - [`nsupdate`]: DNS dynamic updates (RFC 2136, TSIG) for `dns-01`.
//!
//! Challenges are answered by the server itself: HTTP-01 by a post-read
//! hook of every server of the http block, TLS-ALPN-01 by the TLS
//! handshake (`ssl::stream::accept` asks [`tls_alpn`]).

pub mod chain;
pub mod client;
pub mod conf;
pub mod nsupdate;
pub mod store;

use crate::conf::ast::ConfError;
use crate::core::message::response::{Body, Response, Value};
use crate::core::module::{Hooks, Module, Ordered, ServerBuild, VarDef};
use crate::core::request::Request;
use conf::{AcmeConf, Issuers};
use std::sync::Arc;

/// Where HTTP-01 answers are asked for.
const HTTP01_PREFIX: &[u8] = b"/.well-known/acme-challenge/";

/// The managed certificate of a server, when it has `acme_certificate`:
/// the pair current when the request first asks, kept for the request so
/// that `$acme_certificate` and `$acme_certificate_key` are of one pair even
/// when a renewal swaps it between the two.
fn of(req: &Request<'_>) -> Option<Arc<store::Pair>> {
    let managed = req.server.ext.get::<Arc<store::Managed>>()?;
    let pinned = req
        .state
        .ext
        .get_or_insert_with(|| Pinned(managed.pair.load_full()));
    pinned.0.clone()
}

/// The pair a request's variables read.
struct Pinned(Option<Arc<store::Pair>>);

/// Answer an HTTP-01 validation request (before the server's rewrites, so
/// `return` and locations cannot hide it).
fn http01(req: &mut Request<'_>) -> Option<Response> {
    let token = req.uri.strip_prefix(HTTP01_PREFIX)?;
    let token = std::str::from_utf8(token).ok()?;
    let answer = store::http_answer(token)?;
    crate::error_log!(Info, "acme: http-01 challenge \"{token}\" answered");
    let mut r = Response::new(200);
    r.content_type = Some(Value::Static("application/octet-stream"));
    r.body = Body::Bytes(answer.into_bytes().into());
    Some(r)
}

/// The protocol a TLS-ALPN-01 validation offers, alone (RFC 8737).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// A TLS handshake offering only [`ACME_TLS_ALPN`] for `name`: the
/// challenge's certificate while one waits.
pub fn tls_alpn(name: Option<&str>) -> Option<Arc<rustls::sign::CertifiedKey>> {
    store::alpn_certificate(name?)
}

/// A server was resolved: its `acme_certificate` becomes a managed
/// certificate (found again after a reload with the same settings).
fn build_server(b: &mut ServerBuild<'_>) -> Result<(), ConfError> {
    let Some(line) = b.conf.get::<AcmeConf>().certificate.clone() else {
        return Ok(());
    };
    let reg = b.env.ext.entry::<Issuers>();
    let Some((issuer, _)) = reg.list.iter().find(|(i, _)| i.name == line.issuer) else {
        return Err(ConfError::new(
            format!("no acme_issuer \"{}\" is defined", line.issuer),
            &line.span,
        ));
    };
    let mut names = line.identifiers.clone();
    if names.is_empty() {
        // The server's names that can be identifiers: `.example.com` as
        // example.com; regular expressions and wildcards left out.
        for n in b.names {
            let n = n.strip_prefix('.').unwrap_or(n);
            if n.contains('*') {
                continue;
            }
            if let Some(id) = conf::identifier(n)
                && !names.contains(&id)
            {
                names.push(id);
            }
        }
    }
    if names.is_empty() {
        return Err(ConfError::new(
            "no identifiers for \"acme_certificate\": the server has no server_name that can be one",
            &line.span,
        ));
    }
    if issuer.challenge != conf::Challenge::Dns01
        && let Some(w) = names.iter().find(|n| n.starts_with("*."))
    {
        return Err(ConfError::new(
            format!(
                "the wildcard \"{w}\" can only be proven with \"challenge dns-01\" (acme_issuer \"{}\")",
                issuer.name
            ),
            &line.span,
        ));
    }
    let zone = reg.zone_size.unwrap_or(256 * 1024);
    let m = store::managed(issuer, names, line.key, zone);
    b.ext.insert(m);
    Ok(())
}

/// Automatic certificates (ACME).
pub static MODULE: Module = Module {
    name: "acme",
    directives: &[conf::DIRECTIVES],
    settings: Some(&AcmeConf::KIND),
    variables: &[
        VarDef::name("acme_certificate", |req, _, out| {
            if let Some(p) = of(req) {
                out.extend_from_slice(&p.cert_var);
            }
        }),
        VarDef::name("acme_certificate_key", |req, _, out| {
            if let Some(p) = of(req) {
                out.extend_from_slice(&p.key_var);
            }
        }),
    ],
    hooks: Hooks {
        post_read: Some(Ordered {
            order: 0,
            run: http01,
            active: |c| c.get::<AcmeConf>().challenges,
        }),
        server: Some(build_server),
        tick: Some(client::tick),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};
