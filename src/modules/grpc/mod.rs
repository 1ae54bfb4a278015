//! gRPC proxy (`grpc_pass`), nginx's `ngx_http_grpc_module`: the request
//! goes to a peer over HTTP/2 — cleartext with prior knowledge
//! (`grpc://`), or TLS with ALPN `h2` (`grpcs://`, the `grpc_ssl_*`
//! directives) — and the reply's head, DATA and trailers come back.
//!
//! - An attempt runs one stream on an HTTP/2 session of the shared client
//!   (`upstream::h2`, which the proxy's `proxy_http_version 2` uses too):
//!   vireo's own client over a new [`crate::upstream::UpConn`]; with
//!   `keepalive` in the upstream block, the session is kept per worker and
//!   peer and the calls that follow run side by side on it. `exchange`
//!   makes the call's head and the response of a reply.
//! - The request body streams to the upstream as the client sends it (from
//!   HTTP/2 or HTTP/1.1), while the reply head is awaited, so an upstream
//!   may answer before it read all of it; a body read whole before (a
//!   mirror, `$request_body`) is sent from memory or its file.
//! - The reply body is a stream the client connection pulls; at its end
//!   the upstream's trailers (`grpc-status`, `grpc-message`) are handed to
//!   the client's protocol (`PassedTrailers`): a HEADERS frame on HTTP/2, a
//!   chunked trailer on HTTP/1.1. A reply of trailers only (a gRPC error)
//!   goes as a head without a body.
//! - The response must be sent before the client's body can be read again:
//!   a bidirectional call whose client waits for replies before it ends its
//!   own stream is served once its stream ends.

pub mod conf;
mod exchange;

use crate::core::message::response::Response;
use crate::core::module::{Module, VarDef};
use crate::core::request::{BoxFuture, Content, Outcome, Request, RequestBody};
use crate::modules::client_body;
use crate::modules::client_body::Plan;
use crate::upstream::driver::{self, Dial, Policy};
use crate::upstream::fields::intercepted;
use crate::upstream::h2::{Ask, Over};
use crate::upstream::tls_conf::{self, Prefix, SslConf};
use crate::upstream::{Upstream, UpstreamRef, UpstreamVars};
use conf::GrpcConf;
use exchange::Exchange;
use std::sync::Arc;

/// The `grpc_pass` handler of one location.
#[derive(Debug)]
pub struct GrpcPass {
    target: Target,
    /// `grpcs://`: TLS to the upstream.
    tls: bool,
    /// `:authority` unless `grpc_set_header Host` gives one: the address as
    /// written (`127.0.0.1:9000`, an upstream's name).
    authority: String,
}

/// A grpc_pass address: fixed, or with variables.
#[derive(Debug)]
pub enum Target {
    Fixed(UpstreamRef),
    /// The address template (scheme included) and the blocks it may name.
    Dynamic(
        crate::core::vars::Template,
        crate::upstream::dynamic::Blocks,
    ),
}

impl GrpcPass {
    pub(crate) fn new(target: Target, tls: bool, authority: &str) -> GrpcPass {
        GrpcPass {
            target,
            tls,
            authority: authority.to_string(),
        }
    }

    /// This request's upstream, TLS, and `:authority` (`Err`: the status).
    async fn dest(&self, req: &Request<'_>) -> Result<(Arc<Upstream>, bool, String), u16> {
        let (t, blocks) = match &self.target {
            Target::Fixed(up) => return Ok((up.arc().clone(), self.tls, self.authority.clone())),
            Target::Dynamic(t, blocks) => (t, blocks),
        };
        let mut v = Vec::new();
        t.render(req, &mut v);
        let url = String::from_utf8_lossy(&v);
        let (tls, addr) = conf::scheme(&url);
        let port = if tls { 443 } else { 80 };
        let up = Box::pin(blocks.find_with_port(req, addr, port))
            .await
            .map_err(|_| 502u16)?;
        Ok((up, tls, addr.to_string()))
    }
}

impl Content for GrpcPass {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let held = client_body::held(req);
            let has_body = req.head.framing != crate::core::message::head::BodyFraming::None;
            let resp = match held {
                Some(b) => self.proxy(req, body, Plan::Held(b)).await,
                None if has_body => {
                    let mut tee = client_body::Tee::new(req, body);
                    let resp = self.proxy(req, &mut tee, Plan::Stream).await;
                    tee.finish(req);
                    resp
                }
                None => self.proxy(req, body, Plan::None).await,
            };
            let gc = req.conf.get::<GrpcConf>();
            if gc.ignore_headers & conf::ignore::X_ACCEL_REDIRECT == 0
                && let Some(o) = crate::upstream::accel::from_reply(req, resp.status)
            {
                return o;
            }
            Outcome::Respond(resp)
        })
    }

    fn auto_redirect(&self) -> bool {
        true
    }
}

impl GrpcPass {
    /// The call on the upstream's peers, through the upstream driver.
    async fn proxy(
        &self,
        req: &mut Request<'_>,
        body: &mut dyn RequestBody,
        plan: Plan,
    ) -> Response {
        let gc = req.conf.get::<GrpcConf>();
        let (up, tls, authority) = match self.dest(req).await {
            Ok(d) => d,
            Err(status) => return req.error(status),
        };
        let dial = match tls {
            true => {
                let sc = req.conf.get::<SslConf<Grpcs>>();
                match tls_conf::dial(req, sc, crate::modules::proxy::ssl_host(&authority)) {
                    Ok(d) => Some(d),
                    Err(()) => return req.error(502),
                }
            }
            false => None,
        };
        let body_len = match &plan {
            Plan::Held(b) => Some(b.len),
            Plan::Stream => body.declared_len(),
            Plan::None => None,
        };
        let call = match exchange::call(req, gc, tls, &authority, body_len) {
            Ok(c) => c,
            Err(msg) => {
                crate::error_log!(Error, "{msg}{}", req.log_context());
                return req.error(500);
            }
        };
        let vars = UpstreamVars::default().attach(req);
        let bind = gc.bind.as_ref().and_then(|b| b.local(req, "grpc_bind"));
        let policy = Policy {
            next_upstream: gc.next_upstream,
            tries: gc.next_upstream_tries,
            timeout: gc.next_upstream_timeout,
            connect_timeout: gc.connect_timeout,
            streamed: matches!(plan, Plan::Stream),
        };
        // Sessions are kept by the HTTP/2 client, not in the connection
        // pool: a new connection is one of the call's own.
        let dial = Dial {
            tls: dial.as_ref(),
            bind,
            own: true,
            keepalive: gc.socket_keepalive,
        };
        let ex = Over(Exchange {
            gc,
            ask: Ask {
                call: &call,
                plan: &plan,
                scheme: if tls { "grpcs" } else { "grpc" },
                tag: dial.tls.map_or(0, |d| d.tag),
                send_timeout: gc.send_timeout,
                read_timeout: gc.read_timeout,
                buffer_size: gc.buffer_size,
                watch: true,
            },
        });
        let resp = match driver::run(&ex, req, &up, body, &policy, &dial, &vars).await {
            Ok(resp) | Err(resp) => resp,
        };
        intercepted(req, gc.intercept_errors, &resp).unwrap_or(resp)
    }
}

/// The marker of the `grpc_ssl_*` settings: ALPN offers `h2`.
#[derive(Clone, Debug)]
pub struct Grpcs;

impl Prefix for Grpcs {
    const NAME: &'static str = "grpc";
    const ALPN: &'static [&'static [u8]] = &[b"h2"];

    crate::own_slot!();
}

/// The `grpc_ssl_*` directives.
pub static SSL_MODULE: Module = Module {
    name: "grpc_ssl",
    directives: &[tls_conf::directives!("grpc", Grpcs, "a `grpcs` upstream")],
    settings: Some(&SslConf::<Grpcs>::KIND),
    ..Module::EMPTY
};

/// `grpc_pass` and its settings, `$grpc_internal_trailers`.
pub static MODULE: Module = Module {
    name: "grpc",
    nginx_default: &["http_grpc_module"],
    directives: &[conf::DIRECTIVES, conf::COMMON],
    settings: Some(&GrpcConf::KIND),
    variables: &[VarDef::name("grpc_internal_trailers", |req, _, out| {
        if exchange::client_takes_trailers(req) {
            out.extend_from_slice(b"trailers");
        }
    })],
    ..Module::EMPTY
};
