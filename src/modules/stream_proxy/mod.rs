//! The stream proxy (nginx's ngx_stream_proxy_module): `proxy_pass` of a
//! stream server. A TCP or unix session goes through the upstream driver
//! (`upstream::driver::run`: the peer choice, `max_conns`, connect within
//! `proxy_connect_timeout`, `proxy_next_upstream*`, the `$upstream_*`
//! attempts, passive health), whose [`Connect`] protocol only opens the
//! connection (with a PROXY header when asked); then [`pump`] passes bytes
//! both ways. A UDP session ([`udp`]) picks its peers from the same
//! balancer and passes datagrams.

pub mod conf;
mod pump;
pub mod ssl;
mod udp;

use crate::core::module::{Module, VarDef};
use crate::core::request::{BoxFuture, Peer, Request};
use crate::stream::session::{Client, Session};
use crate::upstream::driver::{self, Dial, Failure, Gave, Policy, Protocol, Try};
use crate::upstream::dynamic::{Target, Unfound};
use crate::upstream::next::NextUpstream;
use crate::upstream::queue::Hold;
use crate::upstream::tls_conf::{self, SslConf};
use crate::upstream::{Field, UpConn, UpstreamVars, tls};
use conf::StreamProxyConf;
use std::io::ErrorKind;
use std::time::Instant;
use tokio::io::AsyncWriteExt;

/// `proxy_pass` of a stream server.
#[derive(Debug)]
pub struct Pass {
    pub target: Target,
}

impl crate::stream::Handler for Pass {
    fn serve<'a>(&'a self, s: &'a mut Session<'_>) -> BoxFuture<'a, u16> {
        Box::pin(self.run(s))
    }
}

/// A rate setting's value for this session (bytes a second; 0: no limit).
fn rate(req: &Request<'_>, t: &Option<std::sync::Arc<crate::core::vars::Template>>) -> u64 {
    let Some(t) = t else { return 0 };
    let mut v = Vec::new();
    t.render(req, &mut v);
    std::str::from_utf8(&v)
        .ok()
        .and_then(crate::conf::values::parse_size)
        .unwrap_or(0)
}

impl Pass {
    async fn run(&self, s: &mut Session<'_>) -> u16 {
        let up = match self.target.upstream(&s.req).await {
            Ok(up) => up,
            Err(Unfound::Address) => return 500,
            Err(Unfound::Resolve) => return 502,
        };
        let vars = UpstreamVars::default().attach(&mut s.req);
        let conf = s.req.conf.get::<StreamProxyConf>();
        let rates = (
            rate(&s.req, &conf.upload_rate),
            rate(&s.req, &conf.download_rate),
        );
        if s.info.udp {
            return udp::run(s, &up, &vars, rates).await;
        }
        let policy = Policy {
            next_upstream: match conf.next_upstream {
                true => NextUpstream::DEFAULT,
                false => NextUpstream::OFF,
            },
            tries: conf.next_upstream_tries,
            timeout: conf.next_upstream_timeout,
            connect_timeout: conf.connect_timeout,
            streamed: false,
        };
        let dial = Dial {
            tls: None,
            bind: conf
                .bind
                .as_ref()
                .and_then(|b| b.local(&s.req, "proxy_bind")),
            own: true,
            keepalive: conf.socket_keepalive,
        };
        let header = conf.proxy_protocol.then(|| proxy_header(&s.req));
        let tls = match conf.ssl {
            true => {
                let pc = s.req.conf.get::<SslConf<ssl::StreamTls>>();
                match tls_conf::dial(&s.req, pc, &up.name) {
                    Ok(d) => Some(d),
                    Err(()) => return 502,
                }
            }
            false => None,
        };
        let connect = Connect {
            header,
            tls,
            timeout: conf.connect_timeout,
        };
        let mut nobody = crate::stream::session::NoBody;
        let (mut conn, hold) =
            match driver::run(&connect, &s.req, &up, &mut nobody, &policy, &dial, &vars).await {
                Ok(c) => c,
                Err(resp) => return resp.status,
            };
        let t0 = Instant::now();
        let opts = pump::Opts {
            buffer: conf.buffer_size,
            timeout: conf.timeout,
            half_close: conf.half_close,
            upload_rate: rates.0,
            download_rate: rates.1,
            plain: conn.is_plain() && matches!(s.client, Client::Tcp(_) | Client::Unix(_)),
        };
        if s.req.conf.core.tcp_nodelay {
            let _ = conn.set_nodelay();
        }
        conn.tunnel();
        let preread = std::mem::take(&mut s.preread);
        let done = match &mut s.client {
            Client::Tcp(c) => pump::run(c, &mut conn, preread, &opts).await,
            Client::Unix(c) => pump::run(c, &mut conn, preread, &opts).await,
            Client::Tls(c) => pump::run(&mut **c, &mut conn, preread, &opts).await,
            Client::Udp(_) | Client::Gone | Client::Passed => return 500,
        };
        s.info.received.set(done.up.read);
        s.info.sent.set(done.down.written);
        {
            let mut v = vars.borrow_mut();
            if let Some(a) = v.attempts.last_mut() {
                a.sent += done.up.written;
                a.received += done.down.read;
                a.header_ms = done
                    .first_byte
                    .map(|t| t.duration_since(t0).as_millis() as u64 + a.connect_ms.unwrap_or(0));
            }
        }
        if let Some(why) = done.timed_out {
            crate::error_log!(
                Info,
                "{why} timed out while proxying connection{}",
                s.req.log_context()
            );
        }
        drop(hold);
        200
    }
}

/// The PROXY protocol v1 header of this session: the client (realip's when
/// it set one) and the address it connected to.
fn proxy_header(req: &Request<'_>) -> Vec<u8> {
    let (Peer::Tcp(src), Some(dst)) = (req.client_addr(), req.local_addr()) else {
        return b"PROXY UNKNOWN\r\n".to_vec();
    };
    crate::core::proxy_protocol::v1_header(src, dst)
}

/// The driver's protocol of a stream session: connected is done, after the
/// PROXY header when asked for, then the TLS handshake with `proxy_ssl`
/// (within `timeout`, the connect timeout). The reply is the connection and
/// the hold that ends the attempt when the session is over.
struct Connect {
    header: Option<Vec<u8>>,
    tls: Option<tls::Dial>,
    timeout: std::time::Duration,
}

impl Protocol for Connect {
    type Reply = (UpConn, Hold);

    fn scheme(&self) -> &str {
        ""
    }

    fn upstream_name(&self, addr: &str, out: &mut String) {
        out.push_str(addr);
    }

    async fn exchange<'a>(
        &'a self,
        _req: &'a Request<'_>,
        at: &'a Try<'_>,
        mut conn: UpConn,
        _body: &'a mut dyn crate::core::request::RequestBody,
    ) -> Result<Self::Reply, Gave<Self::Reply>> {
        if let Some(h) = &self.header
            && let Err(e) = conn.write_all(h).await
        {
            return Err(Failure::io(&e, "sending PROXY protocol header to upstream").into());
        }
        if let Some(d) = &self.tls {
            let handshake = tokio::time::timeout(self.timeout, conn.start_tls(d)).await;
            conn = match handshake.unwrap_or_else(|_| Err(ErrorKind::TimedOut.into())) {
                Ok(c) => c,
                Err(e) => return Err(Failure::io(&e, "SSL handshaking to upstream").into()),
            };
        }
        Ok((conn, at.hold(true)))
    }
}

/// The proxy module's own `$upstream_*` of a stream session.
fn render(req: &Request<'_>, what: Field, out: &mut Vec<u8>) {
    if let Some(u) = crate::upstream::vars(req)
        && req
            .state
            .ext
            .get::<crate::stream::session::Info>()
            .is_some()
    {
        u.borrow().render(what, out);
    }
}

/// `proxy_pass` of stream servers and its settings.
pub static MODULE: Module = Module {
    name: "stream_proxy",
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::StreamProxyConf::KIND),
    variables: &[
        VarDef::name("upstream_first_byte_time", |req, _, out| {
            render(req, Field::HeaderTime, out)
        }),
        VarDef::name("upstream_session_time", |req, _, out| {
            render(req, Field::ResponseTime, out)
        }),
    ],
    ..Module::EMPTY
};
