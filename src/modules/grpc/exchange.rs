//! What gRPC sends over the shared HTTP/2 client (`upstream::h2`) and what
//! it makes of a reply: the request's head as nginx's gRPC module makes it,
//! and the reply's status, fields, DATA and trailers for the client.

use super::conf::GrpcConf;
use crate::core::message::response::{Response, Value};
use crate::core::request::Request;
use crate::upstream::fields::{self, Passed};
use crate::upstream::h2::{self, Ask, Call, Handler, Reply};
use crate::upstream::response::UpstreamHead;

/// The request as an HTTP/2 head for the upstream, as nginx makes it: the
/// method; the URI sent (the client's, or the changed one escaped);
/// `:authority` from `grpc_set_header Host`, else `authority`; the client's
/// fields but hop-by-hop ones (and those its Connection names),
/// `grpc_set_header`'s (an empty value removes), `te: trailers` when the
/// client sent it, and Content-Length when the body's length is known.
pub(super) fn call(
    req: &Request<'_>,
    gc: &GrpcConf,
    tls: bool,
    authority: &str,
    body_len: Option<u64>,
) -> Result<Call, String> {
    let method = match req.state.method {
        Some(crate::core::message::head::Method::Get) => b"GET".as_slice(),
        _ => req.head.method_bytes(),
    };
    let user: &[(String, crate::core::vars::Template)] = &gc.set_headers;
    let set = |name: &[u8]| {
        user.iter()
            .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
    };
    let mut headers = h2::CallFields::default();
    let mut host = None;
    let mut v = Vec::new();
    for (name, t) in user {
        v.clear();
        t.render(req, &mut v);
        if v.is_empty() {
            continue;
        }
        if name.eq_ignore_ascii_case("host") {
            host = Some(String::from_utf8_lossy(&v).into_owned());
            continue;
        }
        if fields::is_hop_or_framing(name.as_bytes()) && !name.eq_ignore_ascii_case("te") {
            continue;
        }
        h2::append(&mut headers, name.as_bytes(), &v);
    }
    if !set(b"te") && client_takes_trailers(req) {
        h2::append(&mut headers, b"te", b"trailers");
    }
    if let Some(n) = body_len.filter(|_| !set(b"content-length")) {
        h2::append(&mut headers, b"content-length", n.to_string().as_bytes());
    }
    let named: Vec<&[u8]> = req
        .head
        .header("connection")
        .map(|c| c.split(|&b| b == b',').map(<[u8]>::trim_ascii).collect())
        .unwrap_or_default();
    for (name, value) in req.head.headers() {
        if fields::is_hop_or_framing(name)
            || set(name)
            || named.iter().any(|c| c.eq_ignore_ascii_case(name))
        {
            continue;
        }
        h2::append(&mut headers, name, value);
    }
    let path = fields::request_target(req);
    let authority = host.as_deref().unwrap_or(authority);
    Call::new(method, tls, authority, &path, headers)
}

/// `$grpc_internal_trailers`: the client's TE names `trailers`.
pub(super) fn client_takes_trailers(req: &Request<'_>) -> bool {
    req.head.header("te").is_some_and(|te| {
        te.split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
    })
}

/// One call's exchange with a peer.
pub(super) struct Exchange<'a> {
    pub gc: &'a GrpcConf,
    pub ask: Ask<'a>,
}

impl Handler for Exchange<'_> {
    fn ask(&self) -> &Ask<'_> {
        &self.ask
    }

    /// The reply's head for the client, its DATA streamed unbuffered and
    /// its trailers passed to the client's protocol.
    fn answer(&self, req: &Request<'_>, reply: Reply) -> Response {
        let mut resp = response(self.gc, &reply.head);
        reply.into_body(req, &mut resp, true, true);
        resp
    }

    fn hints(&self, _req: &Request<'_>, head: &UpstreamHead) -> Vec<(&'static str, Value)> {
        response(self.gc, head).headers
    }
}

/// Status and fields for the client from the reply's head: Date, Server,
/// X-Pad and X-Accel-* hidden (unless `grpc_pass_header`), then
/// `grpc_hide_header`'s.
fn response(gc: &GrpcConf, h: &UpstreamHead) -> Response {
    let mut resp = Response::new(h.status);
    resp.headers.reserve(h.fields.len());
    let passes = |n: &str| gc.pass_headers.iter().any(|p| p.eq_ignore_ascii_case(n));
    resp.own = fields::own_fields(passes);
    for &(n, (va, vb)) in &h.fields {
        let name = h.at(n);
        let value = || Value::Slice(h.text.clone(), va, vb);
        let kind = fields::passed_header(name);
        if kind == Passed::ContentType {
            resp.content_type = Some(value());
            continue;
        }
        if fields::keep_own(&mut resp, kind, value) {
            continue;
        }
        let hidden = match kind {
            Passed::Not | Passed::Own(_) => true,
            Passed::Accel => !passes(name),
            _ => false,
        };
        if hidden || gc.hide_headers.iter().any(|p| p.eq_ignore_ascii_case(name)) {
            continue;
        }
        match crate::upstream::intern_header_name(name) {
            Some(n) => resp.headers.push((n, value())),
            None => crate::error_log!(
                Warn,
                "upstream header \"{name}\" dropped: too many distinct header names"
            ),
        }
    }
    resp
}
