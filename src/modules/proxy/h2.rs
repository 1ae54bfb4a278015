//! `proxy_http_version 2`: the proxy's request over the shared HTTP/2
//! client (`upstream::h2`, gRPC's too), to `http://` with prior knowledge
//! and to `https://` with ALPN `h2`. The head carries the fields the
//! HTTP/1.x head would (`Proxy::fields`) but for those HTTP/2 has no place
//! for: Host becomes `:authority`, hop-by-hop fields are not sent. The
//! reply's head is an `UpstreamHead` like an HTTP/1.x one, so it goes
//! through the same field rules (`Proxy::response`: hidden and passed
//! fields, proxy_redirect, cookies), cache, `proxy_next_upstream`,
//! `proxy_intercept_errors` and `proxy_limit_rate`; its trailers are
//! dropped, as nginx.

use super::conf::ProxyConf;
use super::{Dest, Proxy};
use crate::core::message::response::{Response, Value};
use crate::core::request::Request;
use crate::upstream::fields::{intercepted, is_hop_or_framing};
use crate::upstream::h2::{self, Ask, Call, Handler, Reply};
use crate::upstream::response::UpstreamHead;

/// The request's HTTP/2 head: the method sent (`proxy_method`), the URI
/// sent, `:authority` from the Host field it would send (`$proxy_host`, or
/// proxy_set_header's), its other fields, and the body's Content-Length.
pub(super) fn call(
    proxy: &Proxy,
    req: &Request<'_>,
    pc: &ProxyConf,
    dest: &Dest<'_>,
    uri: &[u8],
    len: Option<u64>,
) -> Result<Call, String> {
    let mut headers = h2::CallFields::default();
    let mut authority = None;
    proxy.fields(req, pc, dest, |name, value| {
        if name.eq_ignore_ascii_case(b"host") {
            if authority.is_none() {
                authority = Some(String::from_utf8_lossy(value).into_owned());
            }
        } else if !is_hop_or_framing(name) {
            h2::append(&mut headers, name, value);
        }
    });
    if let Some(n) = len {
        h2::append(&mut headers, b"content-length", n.to_string().as_bytes());
    }
    let authority = authority.unwrap_or_else(|| dest.host.to_string());
    Call::new(&proxy.method(req, pc), dest.tls, &authority, uri, headers)
}

/// One request's exchange with a peer over HTTP/2.
pub(super) struct Exchange<'a> {
    pub proxy: &'a Proxy,
    pub pc: &'a ProxyConf,
    /// The URI sent, for log lines.
    pub uri: &'a [u8],
    pub ask: Ask<'a>,
}

impl Handler for Exchange<'_> {
    fn ask(&self) -> &Ask<'_> {
        &self.ask
    }

    fn upstream_name(&self, addr: &str, out: &mut String) {
        out.push_str(self.ask.scheme);
        out.push_str("://");
        out.push_str(addr);
        out.push_str(&String::from_utf8_lossy(self.uri));
    }

    /// The response, as from an HTTP/1.x reply.
    fn answer(&self, req: &Request<'_>, reply: Reply) -> Response {
        let pc = self.pc;
        let h = &reply.head;
        let unbuffered = !crate::upstream::buffering(pc.buffering, h.header("x-accel-buffering"));
        crate::modules::cache::origin(req, h.status, h.headers());
        let mut resp = self.proxy.response(req, pc, h);
        let fails = reply.fails.is_some();
        reply.into_body(req, &mut resp, false, unbuffered);
        // An intercepted reply ends its attempt as its body is dropped.
        if let Some(e) = intercepted(req, pc.intercept_errors, &resp) {
            return e;
        }
        if !fails {
            super::limit_rate(req, pc, &mut resp);
        }
        resp
    }

    fn hints(&self, req: &Request<'_>, head: &UpstreamHead) -> Vec<(&'static str, Value)> {
        self.proxy.response(req, self.pc, head).headers
    }
}
