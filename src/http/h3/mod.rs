//! HTTP/3 over QUIC (`listen … quic`), with `quinn` doing QUIC (packets,
//! loss recovery, congestion control, flow control, TLS 1.3 through rustls)
//! and `h3` the HTTP/3 framing and QPACK. Each worker runs one QUIC endpoint
//! per address on its own descriptor of the address's UDP socket; datagrams
//! reach the endpoint holding their connection through [`route`]. Each
//! request stream runs the same request pipeline as HTTP/1 and HTTP/2
//! (`crate::http::pipeline`) in its own task: its head is checked by the
//! HTTP/1 parser (`crate::http::fields`), its body read as QUIC's stream
//! flow control lets it come, its response written as the client's window
//! takes it.
//!
//! A connection holds a worker_connections slot. It ends with GOAWAY after
//! keepalive_requests requests, after keepalive_timeout without a request,
//! and when the worker stops or drains or a reload removes its address: at
//! once when idle, else once the requests in flight are answered.
//!
//! Limits against abuse (docs/http3.md): concurrent streams
//! (`http3_max_concurrent_streams`, QUIC's stream credit: a client that opens
//! more breaks the protocol and is closed), per-stream and per-connection
//! windows (`http3_stream_buffer_size`), header size (large_client_header_buffers,
//! QPACK's field section size), the handshake's 3× amplification bound and
//! `quic_retry`; 0-RTT is never accepted (`crate::modules::ssl::quic`).

mod body;
pub mod conf;
pub mod link;
mod route;
mod send;

use crate::conf::load::Listener;
use crate::core::message::head::Version;
use crate::core::module::{Hooks, Module, VarDef};
use crate::core::request::{Peer, TlsInfo};
use crate::core::route::VirtualHosts;
use crate::http::pipeline::{self, ConnRef, Ran};
use crate::server::Shared;
use crate::server::idle::{Expired, IdleTimer};
use crate::server::worker::Slot;
use bytes::Bytes;
use conf::Http3Conf;
use std::cell::Cell;
use std::os::fd::{AsRawFd, RawFd};
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

type QuicConn = h3_quinn::Connection;
type Resolver = h3::server::RequestResolver<QuicConn, Bytes>;
type SendHalf = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type RecvHalf = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// The application close code of a connection ended in order.
const H3_NO_ERROR: quinn::VarInt = quinn::VarInt::from_u32(0x100);

/// Uni streams a client may open: its control stream and QPACK's two.
const UNI_STREAMS: u32 = 3;

/// The secret address validation tokens and stateless resets are keyed
/// with: the default server's `quic_host_key`, else one made at start.
fn host_secret(l: &Listener) -> Arc<[u8]> {
    static RANDOM: OnceLock<Arc<[u8]>> = OnceLock::new();
    if let Some(k) = &l.vhosts.default.conf.get::<Http3Conf>().host_key {
        return k.clone();
    }
    RANDOM
        .get_or_init(|| {
            let mut k = [0u8; 32];
            let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut k);
            Arc::from(&k[..])
        })
        .clone()
}

/// A key for one use (`what`) derived from the address's secret.
fn derived(secret: &[u8], what: &[u8]) -> ring::hkdf::Prk {
    let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, what);
    salt.extract(secret)
}

/// The reset key of an endpoint: stateless reset tokens are an HMAC of the
/// connection ID, the same in every worker.
fn reset_key(secret: &[u8]) -> ring::hmac::Key {
    let mut k = [0u8; 32];
    let prk = derived(secret, b"vireo quic reset");
    if let Ok(okm) = prk.expand(&[], ring::hmac::HMAC_SHA256) {
        let _ = okm.fill(&mut k);
    }
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &k)
}

/// The QUIC server configuration of an address in the snapshot live now.
fn server_config(l: &Listener) -> Option<quinn::ServerConfig> {
    let conf = &l.vhosts.default.conf;
    let (core, h3) = (&conf.core, conf.get::<Http3Conf>());
    let tls = crate::modules::ssl::quic::server_config(&l.vhosts, h3.http3)?;
    let crypto = match quinn::crypto::rustls::QuicServerConfig::try_from(tls) {
        Ok(c) => c,
        Err(e) => {
            crate::error_log!(Alert, "QUIC on {} cannot use its TLS settings: {e}", l.addr);
            return None;
        }
    };
    let secret = host_secret(l);
    let crypto = crate::modules::ssl::quic::Crypto::new(crypto, l.vhosts.clone());
    let mut sc = quinn::ServerConfig::new(
        Arc::new(crypto),
        Arc::new(derived(&secret, b"vireo quic token")),
    );
    let mut t = quinn::TransportConfig::default();
    let window = u64::from(h3.stream_buffer_size);
    let var = |n: u64| quinn::VarInt::from_u64(n).unwrap_or(quinn::VarInt::MAX);
    t.max_concurrent_bidi_streams(h3.max_concurrent_streams.into())
        .max_concurrent_uni_streams(UNI_STREAMS.into())
        .stream_receive_window(var(window))
        .receive_window(var(
            window.saturating_mul(u64::from(h3.max_concurrent_streams) + 2)
        ))
        .max_idle_timeout(quinn::IdleTimeout::try_from(core.keepalive_timeout).ok())
        .enable_segmentation_offload(h3.gso)
        .datagram_receive_buffer_size(None);
    sc.transport_config(Arc::new(t));
    Some(sc)
}

/// Serve the QUIC address `key` on `sock` (this worker's descriptor for
/// it) until the task is dropped; `slot` takes a worker_connections slot.
pub async fn serve(
    sock: std::net::UdpSocket,
    key: usize,
    shared: Arc<Shared>,
    slot: &dyn Fn() -> Option<Slot>,
) -> std::io::Result<()> {
    let fd = sock.as_raw_fd();
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    let group = route::Group::of(key);
    let (secret, first) = {
        let cfg = shared.config.load();
        let l = cfg.listener(key);
        (host_secret(l), server_config(l))
    };
    let reset = reset_key(&secret);
    let routed = route::Routed::new(runtime.wrap_udp_socket(sock)?, group.clone(), reset.clone())?
        .ok_or_else(|| std::io::Error::other("more QUIC endpoints than connection IDs route"))?;
    let me = routed.route;
    let mut ec = quinn::EndpointConfig::new(Arc::new(reset));
    ec.cid_generator(move || Box::new(route::Cids { route: me }));
    let endpoint = quinn::Endpoint::new_with_abstract_socket(ec, first, Arc::new(routed), runtime)?;
    // Takes new connections while this task runs (an abort, at a drain,
    // ends that; the connections go on in their own tasks).
    struct Accepting(Arc<route::Group>, u8);
    impl Drop for Accepting {
        fn drop(&mut self) {
            self.0.accepting(self.1, false);
        }
    }
    group.accepting(me, true);
    let _accepting = Accepting(group, me);
    // The configuration made for a snapshot's listener, made anew after a
    // reload.
    let mut made: Option<(Arc<VirtualHosts>, Arc<quinn::ServerConfig>)> = None;
    while let Some(incoming) = endpoint.accept().await {
        let cfg = shared.config.load_full();
        let l = cfg.listener(key);
        let sc = match &made {
            Some((v, sc)) if Arc::ptr_eq(v, &l.vhosts) => sc.clone(),
            _ => {
                let Some(sc) = server_config(l).map(Arc::new) else {
                    incoming.refuse();
                    continue;
                };
                endpoint.set_server_config(Some((*sc).clone()));
                made = Some((l.vhosts.clone(), sc.clone()));
                sc
            }
        };
        let h3c = l.vhosts.default.conf.get::<Http3Conf>();
        if h3c.retry && !incoming.remote_address_validated() && incoming.may_retry() {
            let _ = incoming.retry();
            continue;
        }
        let Some(slot) = slot() else {
            incoming.refuse();
            continue;
        };
        let connecting = match incoming.accept_with(sc) {
            Ok(c) => c,
            Err(e) => {
                crate::error_log!(Info, "QUIC handshake failed: {e}");
                continue;
            }
        };
        let id = shared.next_connection();
        let info = ConnInfo {
            listener: key,
            id,
            shared: shared.clone(),
            fd,
            born_ms: crate::core::clock::unix_millis(),
        };
        let hs = crate::modules::ssl::stream::handshake_timeout(&l.vhosts);
        drop(cfg);
        slot.spawn(move |slot| connection(connecting, info, hs, slot));
    }
    Ok(())
}

/// What a connection's streams need to know about it.
struct ConnInfo {
    listener: usize,
    id: u64,
    shared: Arc<Shared>,
    /// The address's socket (`$server_addr` when the packet's is unknown).
    fd: RawFd,
    born_ms: u64,
}

/// A connection as its streams share it.
struct Conn {
    info: ConnInfo,
    quic: quinn::Connection,
    local: Option<std::net::SocketAddr>,
    tls: Arc<TlsInfo>,
}

/// One QUIC connection: the handshake (within ssl_handshake_timeout), then
/// HTTP/3 until it ends.
async fn connection(connecting: quinn::Connecting, info: ConnInfo, hs: Duration, _slot: Slot) {
    let peer_addr = connecting.remote_address();
    let quic = match tokio::time::timeout(hs, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            crate::error_log!(Info, "QUIC handshake failed: {e}, client: {peer_addr}");
            return;
        }
        Err(_) => {
            crate::error_log!(Info, "QUIC handshake timed out, client: {peer_addr}");
            return;
        }
    };
    let (limits, keepalive, linger) = {
        let cfg = info.shared.config.load();
        let l = cfg.listener(info.listener);
        let core = &l.vhosts.default.conf.core;
        let tls = tls_info(&quic, &l.vhosts).await;
        let port = match l.addr {
            crate::conf::model::ListenAddr::Udp(a) => a.port(),
            _ => 0,
        };
        let local = quic
            .local_ip()
            .map(|ip| std::net::SocketAddr::new(ip, port));
        (
            (pipeline::limits(core).max_head(), tls, local),
            (
                core.keepalive_timeout,
                core.keepalive_requests,
                core.keepalive_time,
            ),
            core.lingering_timeout,
        )
    };
    let (max_head, tls, local) = limits;
    let mut b = h3::server::builder();
    // No reserved ("grease") frames, settings or streams, as nginx.
    b.max_field_section_size(max_head as u64).send_grease(false);
    let h3c = match b
        .build::<_, Bytes>(h3_quinn::Connection::new(quic.clone()))
        .await
    {
        Ok(c) => c,
        // A client may break the protocol before its control streams are set up.
        Err(e) => {
            log_error_end(&e);
            return;
        }
    };
    let conn = Rc::new(Conn {
        info,
        quic,
        local,
        tls,
    });
    drive(h3c, conn.clone(), keepalive, linger).await;
    conn.quic.close(H3_NO_ERROR, b"");
    let s = conn.quic.stats();
    // The QUIC stack counts the datagrams after the one that opened the
    // connection.
    crate::error_log!(
        Debug,
        "HTTP/3 connection closed: {} datagrams received, {} sent, {} packets lost, client: {peer_addr}",
        s.udp_rx.datagrams + 1,
        s.udp_tx.datagrams,
        s.path.lost_packets
    );
}

/// The connection's TLS details, and the verdict on the client's
/// certificate when one is asked for.
async fn tls_info(quic: &quinn::Connection, vhosts: &VirtualHosts) -> Arc<TlsInfo> {
    let hd = quic
        .handshake_data()
        .and_then(|d| d.downcast::<crate::modules::ssl::quic::Handshake>().ok())
        .map(|h| *h)
        .unwrap_or_default();
    let chain = quic.peer_identity().and_then(|c| {
        c.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>()
            .ok()
    });
    let client_verify = match (crate::modules::ssl::quic::client_auth(vhosts), &chain) {
        (Some(auth), Some(chain)) => auth.verify(chain).await,
        _ => crate::core::request::ClientVerify::None,
    };
    Arc::new(TlsInfo {
        protocol: "TLSv1.3",
        server_name: hd.server_name.map(Into::into),
        cipher: hd.cipher,
        alpn: hd.alpn.into(),
        resumed: hd.resumed,
        curve: hd.curve,
        curves: hd.curves,
        ciphers: hd.ciphers,
        client_certs: chain
            .map(|c| c.iter().map(|c| c.as_ref().to_vec()).collect())
            .unwrap_or_default(),
        client_verify,
        ..Default::default()
    })
}

/// Accept request streams and run them until the connection ends.
async fn drive(
    mut h3c: h3::server::Connection<QuicConn, Bytes>,
    conn: Rc<Conn>,
    (keepalive_timeout, keepalive_requests, keepalive_time): (Duration, u64, Duration),
    linger: Duration,
) {
    let born = Instant::now();
    let mut streams = JoinSet::new();
    let mut requests = 0u64;
    let mut watch: Option<(IdleTimer, Option<Instant>)> = None;
    let mut idle_until: Option<Instant> = None;
    // GOAWAY sent (naming the first stream not accepted): the connection
    // ends once the streams in flight are done.
    let closing = Cell::new(false);
    loop {
        if !streams.is_empty() {
            idle_until = None;
        } else if idle_until.is_none() {
            idle_until = Some(Instant::now() + keepalive_timeout);
        }
        if closing.get() {
            watch = None;
            if streams.is_empty() {
                // The last responses may still be on their way: the client
                // closes once it has them (after GOAWAY), else the
                // connection closes after lingering_timeout (dropping `h3c`
                // closes it at once).
                let _ = tokio::time::timeout(linger, conn.quic.closed()).await;
                return;
            }
        } else if watch.as_ref().is_none_or(|(_, d)| *d != idle_until) {
            watch = Some((IdleTimer::watch(idle_until), idle_until));
        }
        tokio::select! {
            r = h3c.accept(), if !closing.get() => match r {
                Ok(Some(resolver)) => {
                    requests += 1;
                    streams.spawn_local(Box::pin(stream(conn.clone(), requests, resolver)));
                    // As nginx: keepalive_requests requests, or a connection
                    // older than keepalive_time, then GOAWAY.
                    if requests >= keepalive_requests || born.elapsed() >= keepalive_time {
                        let _ = h3c.shutdown(1).await;
                        closing.set(true);
                    }
                }
                Ok(None) => {
                    // Ended with no more streams: by an error when QUIC says
                    // so (the accept may see the close before the error).
                    if let Some(e) = conn.quic.close_reason().filter(ended_by_error) {
                        crate::error_log!(Info, "HTTP/3 connection ended: {e}");
                    }
                    closing.set(true);
                }
                Err(e) => {
                    log_error_end(&e);
                    break;
                }
            },
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
            why = async { (&mut watch.as_mut().expect("armed").0).await }, if watch.is_some() => {
                watch = None;
                let retired = || conn.info.shared.config.load().listener(conn.info.listener).retired;
                if why == Expired::Reloaded && !retired() {
                    continue;
                }
                // Timed out, reclaimed, the worker stops or drains, its
                // address removed: GOAWAY, then close once the streams in
                // flight are done.
                let _ = h3c.shutdown(1).await;
                closing.set(true);
            }
        }
    }
    // The connection failed: its streams end with it.
    streams.shutdown().await;
}

/// Log why an HTTP/3 connection ended, unless it ended with H3_NO_ERROR.
fn log_error_end(e: &h3::error::ConnectionError) {
    if !e.is_h3_no_error() {
        crate::error_log!(Info, "HTTP/3 connection ended: {e}");
    }
}

/// Did a QUIC connection end by an error (a protocol violation, a peer's
/// error code), not by a clean close, a local close or an idle timeout?
fn ended_by_error(e: &quinn::ConnectionError) -> bool {
    use quinn::ConnectionError as E;
    match e {
        // H3_NO_ERROR.
        E::ApplicationClosed(c) => c.error_code != quinn::VarInt::from_u32(0x100),
        E::ConnectionClosed(c) => c.error_code != quinn_proto::TransportErrorCode::NO_ERROR,
        E::LocallyClosed | E::TimedOut => false,
        _ => true,
    }
}

/// One request stream: its request through the pipeline, its response out.
async fn stream(conn: Rc<Conn>, n: u64, resolver: Resolver) {
    let c = &conn.info;
    let cfg = c.shared.config.load_full();
    let listener = cfg.listener(c.listener);
    let vhosts = &listener.vhosts;
    let limits = pipeline::limits(&vhosts.default.conf.core);
    let timeout = vhosts.default.conf.core.client_header_timeout;
    let (parts, stream) = match tokio::time::timeout(timeout, resolver.resolve_request()).await {
        Ok(Ok((req, stream))) => (req.into_parts().0, stream),
        // A stream reset or cut short before its head, or a head too
        // large for QPACK's limit (h3 answered that one with 431).
        Ok(Err(_)) | Err(_) => return,
    };
    let mut busy = crate::server::stats::Busy::reading();
    busy.writing();
    let (mut tx, mut rx) = stream.split();
    let first = body::first(&mut rx);
    // The client's address when the stream came: a connection that
    // migrated has its requests from the new one.
    let peer = Peer::Tcp(conn.quic.remote_address());
    let cref = ConnRef {
        peer: &peer,
        fd: c.fd,
        local: conn.local,
        id: c.id,
        requests: n,
        born_ms: c.born_ms,
        tls: Some(conn.tls.clone()),
        proxy: None,
    };
    let more = !matches!(first, body::First::Ended);
    let head = match crate::http::fields::request_head(&parts, more, &limits, Version::Http3) {
        Ok(h) => h,
        Err(e) => {
            let head = crate::http::fields::refused_head(&parts, &e, "HTTP/3.0");
            let mut req = pipeline::request(cref, vhosts, &head, "");
            // The default server's error_page applies, as nginx.
            let err = req.error(e.status);
            let resp = pipeline::refused(&mut req, err).await;
            send::respond(&mut tx, &req, resp).await;
            return;
        }
    };
    let host = pipeline::host_of(&head);
    let mut req = pipeline::request(cref, vhosts, &head, &host);
    let resp = match pipeline::admit(&mut req) {
        Err(resp) => pipeline::refused(&mut req, resp).await,
        Ok(core) => {
            let max = core.client_max_body_size;
            let ran = {
                let mut body = body::H3Body::new(rx, first, &head, core, &conn.quic, &mut tx);
                pipeline::run(&mut req, &mut body, max).await
            };
            match ran {
                Ran::Respond { resp, .. } => resp,
                Ran::Abort(_) => {
                    tx.stop_stream(h3::error::Code::H3_REQUEST_CANCELLED);
                    return;
                }
            }
        }
    };
    send::respond(&mut tx, &req, resp).await;
}

/// HTTP/3 (`listen … quic`, `http3`), its settings, and `$http3`.
pub static MODULE: Module = Module {
    name: "http3",
    nginx: &["http_v3_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::Http3Conf::KIND),
    // `h3` for a request over HTTP/3, empty otherwise.
    variables: &[VarDef::name("http3", |req, _, out| {
        if req.head.version == Version::Http3 {
            out.extend_from_slice(b"h3");
        }
    })],
    hooks: Hooks::NONE,
    ..Module::EMPTY
};
