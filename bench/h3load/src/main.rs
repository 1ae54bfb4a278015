//! h3load: h2load's closed-loop benchmark over HTTP/3, for `bench/run tls` (Debian's
//! h2load is built without QUIC). It takes the part of h2load's command line bench/run
//! uses (`-t1 -cN -D<time> --warm-up-time=<time> -N<time> --log-file=FILE URL`) and
//! prints the lines bench/run reads from h2load: the start and end of the main phase,
//! the `requests:` and `status codes:` totals and what TLS negotiated.
//!
//! N connections, one request at a time on each (h2load's default of one stream per
//! connection), one UDP socket and one thread. A body whose length is not its
//! Content-Length counts as an error. Connections are opened during the
//! warm-up; requests completed in the main phase are counted and logged (start µs,
//! status, duration µs per line, as h2load's log). The server's certificate is not
//! checked against a root (the bench's certificates are self-signed) but its signature
//! over the handshake is, so the client does a real TLS 1.3 handshake's work.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Buf;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, verify_tls13_signature, CryptoProvider};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

struct Opts {
    clients: usize,
    duration: Duration,
    warmup: Duration,
    idle: Duration,
    log: Option<PathBuf>,
    url: http::Uri,
}

/// A time as h2load writes it: `500ms`, `10s`, or seconds.
fn time_arg(s: &str) -> Result<Duration, String> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    num.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| Duration::from_secs_f64(v * scale))
        .ok_or_else(|| format!("bad time {s:?}"))
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Opts, String> {
    let mut clients = 1;
    let mut duration = None;
    let mut warmup = Duration::ZERO;
    let mut idle = Duration::from_secs(10);
    let mut log = None;
    let mut url = None;
    for a in args {
        if let Some(v) = a.strip_prefix("-t") {
            if v != "1" {
                return Err("h3load runs one thread (-t1)".into());
            }
        } else if let Some(v) = a.strip_prefix("-c") {
            clients = v.parse().map_err(|_| format!("bad client count {v:?}"))?;
        } else if let Some(v) = a.strip_prefix("-D") {
            duration = Some(time_arg(v)?);
        } else if let Some(v) = a.strip_prefix("--warm-up-time=") {
            warmup = time_arg(v)?;
        } else if let Some(v) = a.strip_prefix("-N") {
            idle = time_arg(v)?;
        } else if let Some(v) = a.strip_prefix("--log-file=") {
            log = Some(PathBuf::from(v));
        } else if a.starts_with("https://") {
            url = Some(
                a.parse::<http::Uri>()
                    .map_err(|e| format!("bad URL {a:?}: {e}"))?,
            );
        } else {
            return Err(format!("unknown argument {a:?}"));
        }
    }
    Ok(Opts {
        clients: clients.max(1),
        duration: duration.ok_or("-D<time> is required")?,
        warmup,
        idle,
        log,
        url: url.ok_or("an https:// URL is required")?,
    })
}

/// Accepts any certificate, checking only the handshake signature made with its key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("QUIC is TLS 1.3 only".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The cipher suite and key exchange h3load offers, the ones h2load negotiates over TCP
/// with every server in the bench (printed as h2load prints them).
const CIPHER: &str = "TLS_AES_128_GCM_SHA256";
const KEY_EXCHANGE: &str = "X25519 253 bits";

fn client_config() -> quinn::ClientConfig {
    let mut provider = ring::default_provider();
    provider.cipher_suites = vec![ring::cipher_suite::TLS13_AES_128_GCM_SHA256];
    provider.kx_groups = vec![ring::kx_group::X25519];
    let provider = Arc::new(provider);
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3 with the ring provider")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("TLS 1.3 suite");
    quinn::ClientConfig::new(Arc::new(quic))
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Warmup,
    Main,
    Over,
}

#[derive(Default)]
struct Totals {
    done: u64,
    succeeded: u64,
    errored: u64,
    status: [u64; 4],
    log: String,
}

struct Shared {
    phase: Phase,
    main_start: Instant,
    totals: Totals,
    alpn: Option<String>,
}

type State = Rc<RefCell<Shared>>;

/// One outcome: `Some(status)` for a whole response, `None` for a stream or connection
/// error. Counted only when it completes in the main phase.
fn record(state: &State, started: Instant, status: Option<u16>) {
    let mut s = state.borrow_mut();
    if s.phase != Phase::Main || started < s.main_start {
        return;
    }
    let main_start = s.main_start;
    let t = &mut s.totals;
    t.done += 1;
    match status {
        Some(code) => {
            if (200..400).contains(&code) {
                t.succeeded += 1;
            }
            if (200..600).contains(&code) {
                t.status[usize::from(code / 100 - 2)] += 1;
            }
            let _ = writeln!(
                t.log,
                "{}\t{}\t{}",
                started.duration_since(main_start).as_micros(),
                code,
                started.elapsed().as_micros()
            );
        }
        None => t.errored += 1,
    }
}

async fn get(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, bytes::Bytes>,
    url: &http::Uri,
) -> Result<u16, String> {
    let req = http::Request::get(url.clone())
        .body(())
        .map_err(|e| e.to_string())?;
    let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
    stream.finish().await.map_err(|e| e.to_string())?;
    let resp = stream.recv_response().await.map_err(|e| e.to_string())?;
    let mut len = 0;
    while let Some(mut piece) = stream.recv_data().await.map_err(|e| e.to_string())? {
        len += piece.remaining();
        piece.advance(piece.remaining());
    }
    let declared = resp.headers().get(http::header::CONTENT_LENGTH);
    if declared.is_some_and(|v| v.to_str().ok().and_then(|v| v.parse().ok()) != Some(len)) {
        return Err(format!("{len} bytes of body, content-length {declared:?}"));
    }
    Ok(resp.status().as_u16())
}

async fn client(
    endpoint: quinn::Endpoint,
    addr: SocketAddr,
    host: String,
    opts: Rc<Opts>,
    state: State,
) {
    let started = Instant::now();
    let conn = match endpoint.connect(addr, &host) {
        Ok(connecting) => match tokio::time::timeout(opts.idle, connecting).await {
            Ok(Ok(conn)) => conn,
            _ => return record(&state, started, None),
        },
        Err(_) => return record(&state, started, None),
    };
    if state.borrow().alpn.is_none() {
        let alpn = conn
            .handshake_data()
            .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
            .and_then(|d| d.protocol)
            .map(|p| String::from_utf8_lossy(&p).into_owned());
        state.borrow_mut().alpn = alpn;
    }
    let Ok((mut driver, mut send)) = h3::client::new(h3_quinn::Connection::new(conn.clone())).await
    else {
        return record(&state, started, None);
    };
    let drive = tokio::task::spawn_local(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    while state.borrow().phase != Phase::Over {
        let started = Instant::now();
        match tokio::time::timeout(opts.idle, get(&mut send, &opts.url)).await {
            Ok(Ok(status)) => record(&state, started, Some(status)),
            _ => {
                record(&state, started, None);
                break;
            }
        }
    }
    conn.close(0u32.into(), b"done");
    drive.abort();
}

async fn run(opts: Opts) -> Result<(), String> {
    let authority = opts.url.authority().ok_or("the URL has no host")?.clone();
    let addr = (authority.host(), authority.port_u16().unwrap_or(443))
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority}: no address"))?;
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .unwrap();
    let mut endpoint = quinn::Endpoint::client(bind).map_err(|e| e.to_string())?;
    endpoint.set_default_client_config(client_config());
    let opts = Rc::new(opts);
    let state: State = Rc::new(RefCell::new(Shared {
        phase: Phase::Warmup,
        main_start: Instant::now(),
        totals: Totals::default(),
        alpn: None,
    }));
    println!("starting benchmark...");
    println!("spawning thread #0: {} total client(s). Timing-based test with {}s of warm-up time and {}s of main duration for measurements.",
        opts.clients, opts.warmup.as_secs_f64(), opts.duration.as_secs_f64());
    let clients: Vec<_> = (0..opts.clients)
        .map(|_| {
            let host = authority.host().to_string();
            tokio::task::spawn_local(client(
                endpoint.clone(),
                addr,
                host,
                opts.clone(),
                state.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(opts.warmup).await;
    {
        let mut s = state.borrow_mut();
        s.phase = Phase::Main;
        s.main_start = Instant::now();
    }
    println!(
        "Warm-up phase is over for thread #0.\nMain benchmark duration is started for thread #0."
    );
    tokio::time::sleep(opts.duration).await;
    let elapsed = state.borrow().main_start.elapsed();
    let totals = {
        let mut s = state.borrow_mut();
        s.phase = Phase::Over;
        std::mem::take(&mut s.totals)
    };
    println!("Main benchmark duration is over for thread #0. Stopping all clients.");
    let _ = tokio::time::timeout(opts.idle, async {
        for c in clients {
            let _ = c.await;
        }
    })
    .await;
    endpoint.wait_idle().await;
    if let Some(log) = &opts.log {
        std::fs::write(log, &totals.log).map_err(|e| format!("{}: {e}", log.display()))?;
    }
    let t = &totals;
    let secs = elapsed.as_secs_f64();
    println!(
        "\nfinished in {secs:.2}s, {:.2} req/s",
        t.done as f64 / secs
    );
    println!(
        "requests: {} total, {} started, {} done, {} succeeded, {} failed, {} errored, 0 timeout",
        t.done,
        t.done,
        t.done,
        t.succeeded,
        t.done - t.succeeded,
        t.errored
    );
    println!(
        "status codes: {} 2xx, {} 3xx, {} 4xx, {} 5xx",
        t.status[0], t.status[1], t.status[2], t.status[3]
    );
    let alpn = state.borrow().alpn.clone().unwrap_or_default();
    println!("TLS Protocol: TLSv1.3\nCipher: {CIPHER}\nServer Temp Key: {KEY_EXCHANGE}\nApplication protocol: {alpn}");
    Ok(())
}

fn main() {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("h3load: {e}\nusage: h3load -t1 -cN -D<time> [--warm-up-time=<time>] [-N<time>] [--log-file=FILE] https://HOST:PORT/PATH");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    if let Err(e) = local.block_on(&rt, run(opts)) {
        eprintln!("h3load: {e}");
        std::process::exit(1);
    }
}
