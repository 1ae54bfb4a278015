//! grpc_pass end to end: a real gRPC server and client (Python's grpcio,
//! tests/grpc/peer.py) on either side of vireo — unary, server-, client- and
//! bidirectional streaming calls (an address with variables too; full duplex,
//! each message after the reply to the one before, cut short, and past
//! client_max_body_size beside the reply), statuses
//! with their messages (trailers only, and trailers after DATA), a large
//! reply, an HTTP/1.1 client, a client that gives up, a dead upstream, a
//! timeout, a unix socket, grpcs to a TLS server (sessions kept with
//! `keepalive`, not without), calls in flight side by side on a kept
//! session, and configuration errors.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc/peer.py");

/// A gRPC server of tests/grpc/peer.py, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Listening on a free port (with TLS when `tls` names a certificate
    /// and key in `dir`).
    fn start(dir: &TempDir, tls: Option<(&str, &str)>) -> Server {
        let port = free_port();
        Self::start_at(dir, &port.to_string(), tls, port)
    }

    /// Listening on `addr` (a port, or `unix:/path`).
    fn start_at(dir: &TempDir, addr: &str, tls: Option<(&str, &str)>, port: u16) -> Server {
        let mut cmd = Command::new("python3");
        cmd.arg(PEER).arg("server").arg(addr);
        if let Some((cert, key)) = tls {
            cmd.arg(dir.path().join(cert)).arg(dir.path().join(key));
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "READY", "the gRPC server did not start");
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run the client's `cases` through vireo at `port`: each case's line
/// `case=JSON`, by case.
fn client(port: u16, cases: &str, tls: &[&str]) -> Vec<(String, String)> {
    let out = Command::new("python3")
        .arg(PEER)
        .arg("client")
        .arg(format!("127.0.0.1:{port}"))
        .arg(cases)
        .args(tls)
        .stderr(Stdio::inherit())
        .output()
        .expect("python3");
    assert!(out.status.success(), "client failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(c, j)| (c.to_string(), j.to_string()))
        .collect()
}

fn got<'a>(results: &'a [(String, String)], case: &str) -> &'a str {
    results
        .iter()
        .find(|(c, _)| c == case)
        .map(|(_, j)| j.as_str())
        .unwrap_or_else(|| panic!("no {case} in {results:?}"))
}

/// The unary call got its echo and the metadata sent back; the server
/// stream its four pieces.
fn unary_and_stream_served(r: &[(String, String)]) {
    assert_eq!(
        got(r, "unary"),
        r#"{"ok": {"body": "echo:hello", "code": "OK", "test": "yes"}}"#
    );
    assert_eq!(
        got(r, "server_stream"),
        r#"{"ok": ["piece 0", "piece 1", "piece 2", "piece 3"]}"#
    );
}

const CONF: &str = "error_log logs/error.log info;\nevents {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port} http2;\n  \
    location / { grpc_pass grpc://127.0.0.1:BACKEND; grpc_set_header X-Test $http_x_test$http_x_other; }\n  \
    location /test.Echo/Slow { grpc_pass BACKEND_ADDR; grpc_read_timeout 1s; }\n  \
    location /test.Echo/ServerStream { set $b grpc://BACKEND_ADDR; grpc_pass $b; }\n }\n}\n";

#[test]
fn calls_of_every_kind_pass_through() {
    let dir = TempDir::new("grpc");
    let s = Server::start(&dir, None);
    let conf = CONF
        .replace("BACKEND_ADDR", &format!("127.0.0.1:{}", s.port))
        .replace("BACKEND", &s.port.to_string());
    let v = Vireo::start_in(dir, &conf);
    let r = client(v.port, "all", &[]);
    // Metadata goes both ways (grpc_set_header with the client's value).
    unary_and_stream_served(&r);
    assert_eq!(got(&r, "client_stream"), r#"{"ok": "a+b+c"}"#);
    assert_eq!(got(&r, "bidi"), r#"{"ok": ["X", "YZ"]}"#);
    // Full duplex: each message waits for the reply to the one before.
    assert_eq!(got(&r, "ping_pong"), r#"{"ok": ["PING", "PONG", "DONE"]}"#);
    // Trailers only (a status and its message, no DATA).
    assert_eq!(
        got(&r, "fail"),
        r#"{"code": "NOT_FOUND", "details": "no such thing: thing"}"#
    );
    // DATA, then trailers with an error status.
    assert_eq!(
        got(&r, "fail_late"),
        r#"{"code": "INVALID_ARGUMENT", "details": "bad after first", "got": ["first"]}"#
    );
    // Without `keepalive`, each call has a connection of its own.
    assert_eq!(got(&r, "peers"), r#"{"ok": "different"}"#);
    // A reply larger than the flow-control windows.
    assert_eq!(got(&r, "big"), r#"{"ok": 1000000}"#);
    // grpc_read_timeout: 504, which gRPC clients see as UNAVAILABLE.
    assert!(
        got(&r, "slow").contains(r#""code": "UNAVAILABLE""#) && got(&r, "slow").contains("504"),
        "{r:?}"
    );
    assert!(
        error_log(&v).contains(&format!(
            "upstream timed out (110: Connection timed out) while reading response header from upstream, client: 127.0.0.1, server: , request: \"POST /test.Echo/Slow HTTP/2.0\", upstream: \"grpc://127.0.0.1:{}\"",
            s.port
        )),
        "{}",
        error_log(&v)
    );

    // A reply head over grpc_buffer_size (4k): 502.
    assert!(
        got(&r, "big_head").contains(r#""code": "UNAVAILABLE""#)
            && got(&r, "big_head").contains("502"),
        "{r:?}"
    );
    assert!(
        error_log(&v)
            .contains("upstream sent too big header while reading response header from upstream"),
        "{}",
        error_log(&v)
    );
    // A client that gives up while the upstream thinks: the call upstream
    // ends with it (logged with 499 when the wait saw it go), not at
    // grpc_read_timeout.
    assert!(
        got(&r, "cancel").contains(r#""code": "DEADLINE_EXCEEDED""#),
        "{r:?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        error_log(&v).matches("upstream timed out").count(),
        1,
        "{}",
        error_log(&v)
    );

    // An HTTP/1.1 client: the body streams up, the trailers come back as
    // a chunked trailer.
    let msg = b"\0\0\0\0\x05hello";
    let mut c = v.connect();
    write!(
        c,
        "POST /test.Echo/Unary HTTP/1.1\r\nHost: localhost\r\nX-Other: 1\r\nContent-Type: application/grpc\r\n\
         TE: trailers\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\n\0\0\0\0\r\n6\r\n"
    )
    .unwrap();
    c.write_all(&msg[4..]).unwrap();
    c.write_all(b"\r\n0\r\n\r\n").unwrap();
    let raw = String::from_utf8_lossy(&read_to_close(&mut c)).into_owned();
    assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
    assert!(raw.contains("\r\nx-got-test: 1\r\n"), "{raw}");
    assert!(
        raw.contains("\r\nContent-Type: application/grpc\r\n"),
        "{raw}"
    );
    assert!(raw.contains("echo:hello"), "{raw}");
    assert!(
        raw.ends_with("\r\n0\r\ngrpc-status: 0\r\ngrpc-message: \r\n\r\n"),
        "{raw:?}"
    );
}

/// With `keepalive`, calls in flight at once share the kept session: 20
/// calls on one connection to the server, streams side by side, with calls
/// that fail, are cut short or stream between them; 20 calls that come at
/// once to a peer with no connection yet wait for the one the first makes.
#[test]
fn calls_in_flight_share_a_kept_session() {
    let dir = TempDir::new("grpc-shared");
    let s = Server::start(&dir, None);
    let conf = format!(
        "error_log logs/error.log;\nevents {{}}\nhttp {{\n access_log off;\n upstream be {{ server 127.0.0.1:{}; keepalive 4; }}\n server {{\n  \
         listen 127.0.0.1:{{port}} http2;\n  location / {{ grpc_pass grpc://be; }}\n }}\n}}\n",
        s.port
    );
    let v = Vireo::start_in(dir, &conf);
    let r = client(
        v.port,
        "burst,side_by_side,fail,cancel,big,bidi,cancel_duplex,ping_pong,side_by_side,peers",
        &[],
    );
    assert_eq!(
        got(&r, "burst"),
        r#"{"ok": {"calls": 20, "connections": 1}}"#,
        "{}",
        error_log(&v)
    );
    assert_eq!(
        got(&r, "side_by_side"),
        r#"{"ok": {"calls": 20, "connections": 1}}"#
    );
    assert_eq!(
        got(&r, "fail"),
        r#"{"code": "NOT_FOUND", "details": "no such thing: thing"}"#
    );
    assert!(
        got(&r, "cancel").contains(r#""code": "DEADLINE_EXCEEDED""#),
        "{r:?}"
    );
    assert_eq!(got(&r, "big"), r#"{"ok": 1000000}"#);
    assert_eq!(got(&r, "bidi"), r#"{"ok": ["X", "YZ"]}"#);
    // A full-duplex call cut short by its client, its body still coming,
    // then one whose messages each wait for the reply before.
    assert_eq!(got(&r, "cancel_duplex"), r#"{"ok": "ONE"}"#);
    assert_eq!(got(&r, "ping_pong"), r#"{"ok": ["PING", "PONG", "DONE"]}"#);
    // The second round, after those, still on one session.
    assert_eq!(
        r.iter()
            .filter(|(c, _)| c == "side_by_side")
            .nth(1)
            .unwrap()
            .1,
        r#"{"ok": {"calls": 20, "connections": 1}}"#
    );
    assert_eq!(got(&r, "peers"), r#"{"ok": "same"}"#);
}

/// A client's body that fails beside the reply (past client_max_body_size
/// after the first reply came) resets the upstream's stream and cuts the
/// reply short; the kept session serves the calls after it.
#[test]
fn a_body_too_big_beside_the_reply_ends_the_call() {
    let dir = TempDir::new("grpc-too-big");
    let s = Server::start(&dir, None);
    let conf = format!(
        "error_log logs/error.log info;\nevents {{}}\nhttp {{\n access_log off;\n client_max_body_size 1k;\n \
         upstream be {{ server 127.0.0.1:{}; keepalive 4; }}\n server {{\n  \
         listen 127.0.0.1:{{port}} http2;\n  location / {{ grpc_pass grpc://be; }}\n }}\n}}\n",
        s.port
    );
    let v = Vireo::start_in(dir, &conf);
    let r = client(v.port, "duplex_too_big,ping_pong,peers", &[]);
    let too_big = got(&r, "duplex_too_big");
    assert!(too_big.contains(r#""code": "#), "{r:?}");
    assert!(
        !too_big.contains("XXXX"),
        "the big message went through: {r:?}"
    );
    assert!(
        error_log(&v).contains("client request body failed beside the reply"),
        "{}",
        error_log(&v)
    );
    assert_eq!(got(&r, "ping_pong"), r#"{"ok": ["PING", "PONG", "DONE"]}"#);
    assert_eq!(got(&r, "peers"), r#"{"ok": "same"}"#);
}

#[test]
fn a_dead_upstream_is_unavailable() {
    let port = free_port();
    let v = Vireo::start(&format!(
        "error_log logs/error.log;\nevents {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}} http2;\n  \
         location / {{ grpc_pass 127.0.0.1:{port}; }}\n }}\n}}\n"
    ));
    let r = client(v.port, "unary,fail", &[]);
    for case in ["unary", "fail"] {
        assert!(
            got(&r, case).contains(r#""code": "UNAVAILABLE""#) && got(&r, case).contains("502"),
            "{r:?}"
        );
    }
    let log = error_log(&v);
    assert!(
        log.contains(&format!(
            "connect() failed (111: Connection refused) while connecting to upstream, client: 127.0.0.1, server: , request: \"POST /test.Echo/Unary HTTP/2.0\", upstream: \"grpc://127.0.0.1:{port}\""
        )),
        "{log}"
    );
}

#[test]
fn a_unix_socket_upstream() {
    let dir = TempDir::new("grpc-unix");
    let sock = format!("unix:{}/grpc.sock", dir.path().display());
    let _s = Server::start_at(&dir, &sock, None, 0);
    let v = Vireo::start_in(
        dir,
        &format!(
            "events {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}} http2;\n  \
             location / {{ grpc_pass {sock}; }}\n }}\n}}\n"
        ),
    );
    unary_and_stream_served(&client(v.port, "unary,server_stream", &[]));
}

#[test]
fn grpcs_to_a_tls_server() {
    let dir = TempDir::new("grpcs");
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-nodes",
            "-newkey",
            "rsa:2048",
            "-days",
            "30",
            "-subj",
            "/CN=backend.test",
            "-addext",
            "subjectAltName=DNS:backend.test",
            "-keyout",
            "backend.key",
            "-out",
            "backend.crt",
        ],
    );
    let s = Server::start(&dir, Some(("backend.crt", "backend.key")));
    let conf = format!(
        "error_log logs/error.log;\nevents {{}}\nhttp {{\n access_log off;\n upstream secure {{ server 127.0.0.1:{}; keepalive 2; }}\n server {{\n  \
         listen 127.0.0.1:{{port}} http2;\n  location / {{\n   grpc_pass grpcs://secure;\n   \
         grpc_ssl_verify on;\n   grpc_ssl_trusted_certificate backend.crt;\n   grpc_ssl_name backend.test;\n   \
         grpc_ssl_server_name on;\n  }}\n  location /test.Echo/Fail {{\n   grpc_pass grpcs://127.0.0.1:{};\n   \
         grpc_ssl_verify on;\n   grpc_ssl_trusted_certificate backend.crt;\n  }}\n }}\n}}\n",
        s.port, s.port
    );
    let v = Vireo::start_in(dir, &conf);
    let r = client(v.port, "unary,server_stream,peers,fail,side_by_side", &[]);
    unary_and_stream_served(&r);
    // With `keepalive`, a later call goes on the session of an earlier one,
    // and calls in flight at once go on it side by side.
    assert_eq!(got(&r, "peers"), r#"{"ok": "same"}"#);
    assert_eq!(
        got(&r, "side_by_side"),
        r#"{"ok": {"calls": 20, "connections": 1}}"#
    );
    // Checked against 127.0.0.1, the certificate is refused: 502.
    assert!(got(&r, "fail").contains("502"), "{r:?}");
    let log = error_log(&v);
    assert!(
        log.contains("while SSL handshaking to upstream") && log.contains("upstream: \"grpcs://"),
        "{log}"
    );
}

#[test]
fn config_errors_name_file_and_line() {
    let dir = TempDir::new("grpc-conf");
    assert_conf_errors(
        &dir,
        &[
            (
                "grpc_pass 127.0.0.1:9000;",
                "\"grpc_pass\" directive is not allowed here",
            ),
            (
                "location / { grpc_pass grpc://127.0.0.1:9000/path; }",
                "invalid host in upstream \"grpc://127.0.0.1:9000/path\"",
            ),
            (
                "grpc_next_upstream error bogus;",
                "invalid parameter \"bogus\" in \"grpc_next_upstream\" directive",
            ),
            (
                "grpc_ignore_headers X-Nothing;",
                "invalid parameter \"X-Nothing\" in \"grpc_ignore_headers\" directive",
            ),
            (
                "location / { proxy_pass http://127.0.0.1:1; grpc_pass 127.0.0.1:1; }",
                "\"grpc_pass\" directive is duplicate: the location already has a content handler",
            ),
        ],
    );
}
