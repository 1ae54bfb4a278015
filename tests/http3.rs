//! HTTP/3 over QUIC (`listen … quic`) against a real HTTP/3 client, Python's
//! aioquic (tests/h3/h3client.py), with certificates made by openssl: static
//! files, ranges, compression, FastCGI and proxy POSTs, error pages, Alt-Svc
//! on the TCP side (curl), several workers, a reload and a binary upgrade
//! under a connection, `$request_completion`, the TLS variables and
//! resumption, a rejected server name, bodies against content-length and
//! bodies left unread, NEW_TOKEN, and
//! attacks (a stream flood past `http3_max_concurrent_streams`, 0-RTT with an
//! unsafe method, amplification before address validation, no stateless
//! reset for short datagrams). Skips (with a message) only when aioquic is
//! missing.

mod common;
use base64::Engine;
use common::fpm::Fpm;
use common::*;
use std::process::Command;

/// Is aioquic there? Says so when it is not (the test then skips).
fn have_aioquic() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import aioquic"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIP: the Python aioquic package is missing (python3 -m pip install aioquic)");
    }
    ok
}

/// An ECDSA certificate for localhost.
fn cert(dir: &TempDir) {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "30", "-newkey", "ec"])
        .args(["-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args([
            "-keyout",
            "cert.key",
            "-out",
            "cert.crt",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=DNS:localhost"])
        .current_dir(dir.path())
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One response as the client saw it.
#[derive(Debug, Default)]
struct H3Resp {
    status: u16,
    reset: Option<u64>,
    /// The fields of the interim (1xx) responses before it: status, name, value.
    interim: Vec<(u16, String, String)>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl H3Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What a client run printed.
#[derive(Debug, Default)]
struct Run {
    responses: Vec<H3Resp>,
    keys: Vec<(String, String)>,
    raw: String,
}

impl Run {
    fn key(&self, k: &str) -> &str {
        self.keys
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {k} in {}", self.raw))
    }
}

/// Run the client in `mode` with `spec` (JSON) against `port`, within 60 s.
fn client(port: u16, mode: &str, spec: &str) -> Run {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3/h3client.py");
    let out = Command::new("timeout")
        .args(["60", "python3", script, &port.to_string(), mode, spec])
        .output()
        .unwrap();
    let raw = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{mode} {spec}: {raw}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut run = Run::default();
    for line in raw.lines() {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        let idx = |rest: &str| -> (usize, String) {
            let (i, r) = rest.split_once(' ').unwrap_or((rest, ""));
            (i.parse().unwrap(), r.to_string())
        };
        match kind {
            "R" => {
                let (_, r) = idx(rest);
                let mut resp = H3Resp::default();
                for kv in r.split_whitespace() {
                    match kv.split_once('=') {
                        Some(("status", v)) => resp.status = v.parse().unwrap_or(0),
                        Some(("reset", v)) => resp.reset = v.parse().ok(),
                        _ => {}
                    }
                }
                run.responses.push(resp);
            }
            "I" => {
                let (i, r) = idx(rest);
                let (status, field) = r.split_once(' ').unwrap_or((&r, ""));
                let (n, v) = field.split_once(": ").unwrap_or((field, ""));
                run.responses[i].interim.push((
                    status.parse().unwrap_or(0),
                    n.to_string(),
                    v.to_string(),
                ));
            }
            "H" => {
                let (i, r) = idx(rest);
                let (n, v) = r.split_once(": ").unwrap_or((&r, ""));
                run.responses[i]
                    .headers
                    .push((n.to_string(), v.to_string()));
            }
            "B" => {
                let (i, r) = idx(rest);
                run.responses[i].body = base64::engine::general_purpose::STANDARD
                    .decode(r.trim())
                    .unwrap();
            }
            "K" => {
                let (k, v) = rest.split_once('=').unwrap_or((rest, ""));
                run.keys.push((k.to_string(), v.to_string()));
            }
            _ => {}
        }
    }
    run.raw = raw;
    run
}

/// Requests, given as JSON objects, at once on one connection.
fn get(port: u16, requests: &[&str]) -> Vec<H3Resp> {
    let spec = format!("{{\"requests\": [{}]}}", requests.join(","));
    client(port, "requests", &spec).responses
}

const CONF: &str = "
worker_processes 1;
error_log logs/error.log info;
events {}
http {
    access_log logs/access.log;
    HTTP
    server {
        listen 127.0.0.1:{port} ssl;
        listen 127.0.0.1:{port} quic;
        ssl_certificate {dir}/cert.crt;
        ssl_certificate_key {dir}/cert.key;
        root {dir}/html;
        gzip on;
        gzip_types text/plain;
        gzip_min_length 10;
        add_header Alt-Svc 'h3=\":{port}\"; ma=86400';
        add_header X-Proto $http3;
        error_page 404 /404.html;
        EXTRA
    }
    server {
        listen 127.0.0.1:{port2};
        root {dir}/html;
        BACKEND
    }
}";

/// The served files' folder, with its certificate: html/big.txt is
/// [`big`].
fn site() -> TempDir {
    let dir = TempDir::new("h3");
    cert(&dir);
    dir.write("html/a.txt", "hello over QUIC\n");
    dir.write("html/404.html", "custom not found page\n");
    dir.write("html/big.txt", big());
    dir
}

fn big() -> String {
    (0..20_000).map(|i| format!("line {i}\n")).collect()
}

/// A vireo with `extra` directives in the QUIC server and `backend` in the
/// plain one on {port2}.
fn start(extra: &str, backend: &str) -> Vireo {
    start_with("", extra, backend)
}

/// [`start`], with `http` directives at the http level.
fn start_with(http: &str, extra: &str, backend: &str) -> Vireo {
    Vireo::start_in(site(), &conf(http, extra, backend))
}

/// [`CONF`] with `http` directives at the http level, `extra` in the QUIC
/// server and `backend` in the plain one.
fn conf(http: &str, extra: &str, backend: &str) -> String {
    CONF.replace("HTTP", http)
        .replace("EXTRA", extra)
        .replace("BACKEND", backend)
}

#[test]
fn static_range_gzip_and_error_page() {
    if !have_aioquic() {
        return;
    }
    let v = start("", "");
    let big = std::fs::read(v.dir.path().join("html/big.txt")).unwrap();
    let r = get(
        v.port,
        &[
            r#"{"path": "/a.txt"}"#,
            r#"{"path": "/big.txt", "headers": [["range", "bytes=10-19"]]}"#,
            r#"{"path": "/big.txt", "headers": [["accept-encoding", "gzip"]]}"#,
            r#"{"path": "/missing"}"#,
            r#"{"path": "/big.txt"}"#,
        ],
    );
    assert_eq!(r[0].status, 200);
    assert_eq!(r[0].text(), "hello over QUIC\n");
    assert_eq!(r[0].header("x-proto"), Some("h3"));
    assert_eq!(r[0].header("content-length"), Some("16"));
    assert_eq!(r[1].status, 206);
    assert_eq!(r[1].body, &big[10..20]);
    assert_eq!(
        r[1].header("content-range"),
        Some(format!("bytes 10-19/{}", big.len()).as_str())
    );
    assert_eq!(r[2].status, 200);
    assert_eq!(r[2].header("content-encoding"), Some("gzip"));
    let mut plain = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&r[2].body[..]),
        &mut plain,
    )
    .unwrap();
    assert_eq!(plain, big);
    assert!(r[2].body.len() < big.len() / 2);
    assert_eq!(r[3].status, 404);
    assert_eq!(r[3].text(), "custom not found page\n");
    // A body larger than the stream window and the buffer size, whole.
    assert_eq!(r[4].status, 200);
    assert_eq!(r[4].body, big);
    // Logged as HTTP/3 requests.
    let log = v.dir.read("logs/access.log");
    assert!(log.contains("\"GET /a.txt HTTP/3.0\" 200 16"), "{log}");
    assert!(log.contains("\"GET /missing HTTP/3.0\" 404"), "{log}");
}

#[test]
fn alt_svc_on_the_tcp_side() {
    if !have_aioquic() {
        return;
    }
    let v = start("", "");
    let out = Command::new("curl")
        .args(["-sk", "-D", "-", "-o", "/dev/null"])
        .arg(format!("https://localhost:{}/a.txt", v.port))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("alt-svc: h3=\":{}\"; ma=86400", v.port)),
        "{head}"
    );
    // $http3 is empty over TCP.
    assert!(
        head.contains("x-proto: \r\n") || !head.contains("x-proto"),
        "{head}"
    );
}

/// php-fpm's echo of the request: method, body, protocol.
const ECHO_PHP: &str = "<?php echo $_SERVER['REQUEST_METHOD'], ' ', file_get_contents('php://input'), ' ', $_SERVER['SERVER_PROTOCOL'];";

#[test]
fn post_to_fastcgi_and_through_a_proxy() {
    if !have_aioquic() {
        return;
    }
    let Some(fpm) = Fpm::start(2) else { return };
    let fcgi = format!(
        "location ~ \\.php$ {{ fastcgi_pass 127.0.0.1:{}; include fastcgi_params; \
         fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name; }}",
        fpm.port
    );
    let v = start(
        &format!("{fcgi} location ^~ /up/ {{ proxy_pass http://127.0.0.1:{{port2}}/; }}"),
        &fcgi,
    );
    v.dir.write("html/echo.php", ECHO_PHP);
    let body = "x".repeat(200_000);
    let big = r#"{"method": "POST", "path": "/up/echo.php", "body": "x", "repeat": 200000}"#;
    let r = get(
        v.port,
        &[
            r#"{"method": "POST", "path": "/echo.php", "body": "name=vireo"}"#,
            big,
            // No content-length: a body of unknown length.
            r#"{"method": "POST", "path": "/echo.php", "body": "no length", "headers": [["x-a", "1"]]}"#,
        ],
    );
    assert_eq!(r[0].status, 200, "{r:?} {}", v.dir.read("logs/error.log"));
    assert_eq!(r[0].text(), "POST name=vireo HTTP/3.0");
    assert_eq!(r[1].status, 200);
    assert_eq!(r[1].text(), format!("POST {body} HTTP/1.0"));
    assert_eq!(r[2].status, 200);
    assert_eq!(r[2].text(), "POST no length HTTP/3.0");
}

#[test]
fn early_hints_of_a_proxied_backend() {
    if !have_aioquic() {
        return;
    }
    let (_backend, port) = early_hints_backend();
    let v = start(
        &format!("early_hints $http3; location /hint/ {{ proxy_pass http://127.0.0.1:{port}; }}"),
        "",
    );
    let r = get(v.port, &[r#"{"path": "/hint/a"}"#]);
    assert_eq!(r[0].status, 200, "{r:?}");
    let hint = |n: &str, v: &str| (103, n.to_string(), v.to_string());
    assert_eq!(
        r[0].interim,
        [
            hint("link", "</style.css>; rel=preload; as=style"),
            hint("x-hint", "/hint/a")
        ]
    );
    assert_eq!(r[0].text(), "SEE-THIS /hint/a");
}

#[test]
fn several_workers_on_one_shared_socket() {
    if !have_aioquic() {
        return;
    }
    // Without reuseport the workers read one socket: every datagram of a
    // connection that another worker reads is passed to its owner.
    let v = Vireo::start_in(
        {
            let d = TempDir::new("h3w");
            cert(&d);
            d.write("html/a.txt", "hello over QUIC\n");
            d
        },
        &conf("", "", "").replace("worker_processes 1;", "worker_processes 4;"),
    );
    let req = r#"{"path": "/a.txt"}"#;
    for _ in 0..6 {
        let spec = format!(
            "{{\"sequential\": true, \"requests\": [{}]}}",
            vec![req; 20].join(",")
        );
        let run = client(v.port, "requests", &spec);
        assert_eq!(run.responses.len(), 20);
        assert!(run.responses.iter().all(|r| r.status == 200), "{}", run.raw);
    }
    let workers: std::collections::HashSet<String> = v
        .dir
        .read("logs/error.log")
        .lines()
        .filter(|l| l.contains("HTTP/3 connection ended"))
        .filter_map(|l| l.split('#').nth(1)?.split(':').next().map(String::from))
        .collect();
    eprintln!("connections served by workers {workers:?}");
}

#[test]
fn a_reload_keeps_the_connection() {
    if !have_aioquic() {
        return;
    }
    let v = start("", "");
    let spec =
        r#"{"sequential": true, "requests": [{"path": "/a.txt"}, {"path": "/a.txt", "pause": 2}]}"#;
    let port = v.port;
    let run = std::thread::spawn(move || client(port, "requests", spec));
    std::thread::sleep(std::time::Duration::from_millis(800));
    let new = conf("", "", "")
        .replace("{port2}", &free_port().to_string())
        .replace("X-Proto $http3", "X-Proto reloaded-$http3");
    v.reload_with(&new, "configuration reloaded");
    let run = run.join().unwrap();
    assert_eq!(run.responses.len(), 2, "{}", run.raw);
    assert_eq!(run.responses[0].header("x-proto"), Some("h3"));
    // The same connection, the new configuration's answer.
    assert_eq!(run.responses[1].status, 200, "{}", run.raw);
    assert_eq!(run.responses[1].header("x-proto"), Some("reloaded-h3"));
}

/// Kills the process a pid file names when dropped.
struct KillAtEnd(std::path::PathBuf);

impl Drop for KillAtEnd {
    fn drop(&mut self) {
        if let Some(pid) = read_pid(&self.0) {
            // SAFETY: signalling a process this test started (by its upgrade).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn read_pid(p: &std::path::Path) -> Option<i32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

#[test]
fn a_binary_upgrade_keeps_the_connection_and_loses_no_datagram() {
    if !have_aioquic() {
        return;
    }
    let conf = conf("", "", "")
        .replace(
            "worker_processes 1;",
            "worker_processes 1;\npid logs/v.pid;",
        )
        .replace("logs/error.log info;", "logs/error.log debug;");
    let v = Vireo::start_in(site(), &conf);
    let pid_file = v.dir.path().join("logs/v.pid");
    let _new = KillAtEnd(pid_file.clone());
    // One connection: a request, a pause while the binary is upgraded, then
    // ten more while both binaries read the socket.
    let mut reqs = vec![
        r#"{"path": "/a.txt"}"#,
        r#"{"path": "/big.txt", "pause": 2}"#,
    ];
    reqs.extend([r#"{"path": "/big.txt"}"#; 10]);
    let spec = format!(
        r#"{{"sequential": true, "requests": [{}]}}"#,
        reqs.join(",")
    );
    let port = v.port;
    let run = std::thread::spawn(move || client(port, "requests", &spec));
    std::thread::sleep(std::time::Duration::from_millis(500));
    let old = v.child.id() as i32;
    v.signal(libc::SIGUSR2);
    assert!(
        eventually(5, || read_pid(&pid_file).is_some_and(|p| p != old)),
        "no new binary: {}",
        v.dir.read("logs/error.log")
    );
    let run = run.join().unwrap();
    assert_eq!(run.responses.len(), 12, "{}", run.raw);
    for r in &run.responses[1..] {
        assert_eq!((r.status, r.body.len()), (200, big().len()), "{}", run.raw);
    }
    // Datagrams of the connection that the new binary read reached the old
    // one over the link: the old binary's connection received every datagram
    // the client sent. (The client's loss recovery is no measure: the server
    // stops acknowledging packets below an acknowledged ACK's largest, as RFC
    // 9000 §13.2.4 lets it, so one passed over the link and overtaken by
    // later ones is never acknowledged, though it arrived.)
    let closed = |log: &str| {
        log.lines()
            .find_map(|l| {
                l.split_once("HTTP/3 connection closed: ")?
                    .1
                    .split_once(' ')
            })
            .map(|(n, _)| n.to_string())
    };
    assert!(
        eventually(5, || closed(&v.dir.read("logs/error.log")).is_some()),
        "{}",
        v.dir.read("logs/error.log")
    );
    let received = closed(&v.dir.read("logs/error.log")).unwrap();
    assert_eq!(received, run.key("datagrams_sent"), "{}", run.raw);
    // New clients go to the new binary, which serves them.
    let fresh = get(port, &[r#"{"path": "/a.txt"}"#]);
    assert_eq!(fresh[0].status, 200);
}

#[test]
fn stream_flood_past_the_limit_ends_the_connection() {
    if !have_aioquic() {
        return;
    }
    let v = start("http3_max_concurrent_streams 10;", "");
    let run = client(v.port, "flood", r#"{"path": "/a.txt", "streams": 200}"#);
    assert_eq!(run.key("server_max_streams"), "10");
    let answered: usize = run.key("answered").parse().unwrap();
    assert!(answered <= 10, "{answered} of the flood answered");
    // Logged once the connection task has seen the QUIC error.
    let logged = eventually(5, || v.dir.read("logs/error.log").contains("stream limit"));
    assert!(logged, "{}\n{}", v.dir.read("logs/error.log"), run.raw);
    // The server goes on serving others.
    let r = get(v.port, &[r#"{"path": "/a.txt"}"#]);
    assert_eq!(r[0].status, 200);
}

#[test]
fn connection_id_flood_past_the_limit_ends_the_connection() {
    if !have_aioquic() {
        return;
    }
    let v = start("", "");
    let run = client(v.port, "cids", r#"{"ids": 50}"#);
    assert_eq!(run.key("server_cid_limit"), "5", "{}", run.raw);
    // CONNECTION_ID_LIMIT_ERROR (RFC 9000 §20.1): the server keeps no more
    // of a client's connection IDs than it advertised.
    assert_eq!(run.key("terminated_code"), "9", "{}", run.raw);
    let r = get(v.port, &[r#"{"path": "/a.txt"}"#]);
    assert_eq!(r[0].status, 200);
}

#[test]
fn zero_rtt_is_never_accepted() {
    if !have_aioquic() {
        return;
    }
    let v = start("location = /form { return 200 \"ok\"; }", "");
    let run = client(
        v.port,
        "zerortt",
        r#"{"path": "/form", "method": "POST", "body": "pay=1"}"#,
    );
    // Tickets resume sessions but allow no early data ...
    assert_eq!(run.key("ticket"), "True", "{}", run.raw);
    assert_eq!(run.key("ticket_early_data"), "None");
    assert_eq!(run.key("resumed"), "True");
    // ... and a client that sends its POST early anyway sees it refused:
    // the request is answered once, after the handshake.
    assert_eq!(run.key("early_data_accepted"), "False");
    assert_eq!(run.responses[0].status, 200, "{}", run.raw);
    let log = v.dir.read("logs/access.log");
    assert_eq!(log.matches("POST /form HTTP/3.0").count(), 1, "{log}");
}

#[test]
fn an_unvalidated_address_gets_at_most_three_times_what_it_sent() {
    if !have_aioquic() {
        return;
    }
    let v = start("", "");
    let run = client(v.port, "initial", r#"{"seconds": 4}"#);
    let sent: usize = run.key("sent").parse().unwrap();
    let got: usize = run.key("received").parse().unwrap();
    // RFC 9000 §8.1: three times; the QUIC stack may round the last
    // datagram up to a full one.
    assert!(got <= 3 * sent + 1252, "sent {sent}, got {got}");
    // With quic_retry, a Retry and nothing more.
    let v = start("quic_retry on;", "");
    let run = client(v.port, "initial", r#"{"seconds": 2}"#);
    let got: usize = run.key("received").parse().unwrap();
    assert_eq!(run.key("datagrams"), "1", "{}", run.raw);
    assert!(got < 200, "a Retry is small: {got}");
    // And a real client gets through the Retry.
    let r = get(v.port, &[r#"{"path": "/a.txt"}"#]);
    assert_eq!(r[0].status, 200);
}

#[test]
fn configuration_errors_name_the_listen() {
    let dir = TempDir::new("h3conf");
    let out = test_conf(
        &dir,
        "events {} http { server { listen 127.0.0.1:8443 quic; } }",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no \"ssl_certificate\" is defined for the \"listen ... quic\" directive"),
        "{err}"
    );
    let out = test_conf(
        &dir,
        "events {} http { server { listen 127.0.0.1:8443 quic ssl; } }",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"ssl\" parameter is incompatible with \"quic\""),
        "{err}"
    );
    // A limit the QUIC stack cannot be given is refused, naming its line.
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n    quic_active_connection_id_limit 2;\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("\"quic_active_connection_id_limit\" is not supported by vireo: its QUIC stack (quinn) always advertises an active_connection_id_limit of 5")
            && err.contains("t.conf:3"),
        "{err}"
    );
}

#[test]
fn request_completion_and_a_client_that_stops_reading() {
    if !have_aioquic() {
        return;
    }
    let v = start_with(
        "log_format done '$uri $status [$request_completion] $http3';",
        "access_log logs/done.log done;",
        "",
    );
    // Past every window, so the client stops it mid-body.
    v.dir.write("html/huge.bin", vec![b'h'; 16 << 20]);
    let r = get(
        v.port,
        &[
            r#"{"path": "/a.txt"}"#,
            r#"{"path": "/huge.bin", "stop": true}"#,
        ],
    );
    assert_eq!(r[0].status, 200);
    assert_eq!(r[1].status, 200);
    assert!(r[1].body.len() < 16 << 20, "{}", r[1].body.len());
    let log = || v.dir.read("logs/done.log");
    assert!(eventually(10, || log().lines().count() == 2), "{}", log());
    let log = log();
    assert!(log.contains("/a.txt 200 [OK] h3\n"), "{log}");
    assert!(log.contains("/huge.bin 200 [-] h3\n"), "{log}");
}

#[test]
fn tls_details_resumption_and_a_rejected_name() {
    if !have_aioquic() {
        return;
    }
    let v = start_with(
        "server { listen 127.0.0.1:{port} quic; server_name refused.test; ssl_reject_handshake on; }",
        "server_name localhost;\
         add_header X-TLS '$ssl_protocol $ssl_cipher $ssl_curve $ssl_session_reused $ssl_alpn_protocol';\
         add_header X-Offered '$ssl_ciphers|$ssl_curves';",
        "",
    );
    let run = client(v.port, "resume", r#"{"path": "/a.txt"}"#);
    assert_eq!(run.key("resumed"), "True", "{}", run.raw);
    let tls = |i: usize| {
        run.responses[i]
            .header("x-tls")
            .unwrap_or_default()
            .to_string()
    };
    let first = tls(0);
    let f: Vec<&str> = first.split(' ').collect();
    assert_eq!(f.len(), 5, "{}", run.raw);
    assert_eq!((f[0], f[3], f[4]), ("TLSv1.3", ".", "h3"), "{first}");
    // The suite and group chosen, among those offered.
    let offered = run.responses[0].header("x-offered").unwrap_or_default();
    let (ciphers, curves) = offered.split_once('|').unwrap();
    assert!(
        f[1].starts_with("TLS_AES_") || f[1].starts_with("TLS_CHACHA20"),
        "{first}"
    );
    assert!(
        ciphers.split(':').any(|c| c == f[1]),
        "{first} of {offered}"
    );
    assert!(curves.split(':').any(|c| c == f[2]), "{first} of {offered}");
    // The second connection resumed the first's session.
    assert_eq!(tls(1), format!("TLSv1.3 {} {} r h3", f[1], f[2]));
    // A name whose server rejects handshakes (here the default server):
    // TLS's unrecognized_name alert (112) as the QUIC crypto error, as nginx.
    let run = client(v.port, "handshake", r#"{"sni": "refused.test"}"#);
    assert_eq!(run.key("connected"), "False", "{}", run.raw);
    assert_eq!(run.key("terminated_code"), (0x100 + 112).to_string());
    let run = client(v.port, "handshake", r#"{"sni": "localhost"}"#);
    assert_eq!(run.key("connected"), "True", "{}", run.raw);
}

#[test]
fn bodies_against_content_length_and_bodies_left_unread() {
    if !have_aioquic() {
        return;
    }
    let v = start(
        "location = /ret { return 200 \"ok\"; }\
         location = /bad { return 200 \"redirected\"; }\
         location = /echo { proxy_pass http://127.0.0.1:{port2}/ret; }\
         error_page 400 /bad;",
        "location = /ret { return 200 \"back\"; }",
    );
    let r = get(
        v.port,
        &[
            // Shorter and longer than declared: a bad request (through the
            // server's error_page).
            r#"{"method": "POST", "path": "/echo", "body": "abc", "headers": [["content-length", "10"]]}"#,
            r#"{"method": "POST", "path": "/echo", "body": "abcdef", "headers": [["content-length", "2"]]}"#,
            // A body the handler does not read, its stream left open: the
            // response does not wait for it.
            r#"{"method": "POST", "path": "/ret", "body": "more to come", "open": true}"#,
            // A head the HTTP/1 parser refuses (a bad Host): the default
            // server's error_page, as over HTTP/1.
            r#"{"path": "/a.txt", "authority": "."}"#,
        ],
    );
    let log = v.dir.read("logs/error.log");
    for i in [0, 1] {
        assert_eq!(r[i].status, 400, "{i}: {r:?} {log}");
        assert_eq!(r[i].text(), "redirected");
    }
    assert_eq!(r[2].status, 200, "{r:?}");
    assert_eq!(r[2].text(), "ok");
    assert_eq!(r[3].status, 400, "{r:?}");
    assert_eq!(r[3].text(), "redirected");
}

#[test]
fn a_new_token_spares_the_next_connection_its_retry() {
    if !have_aioquic() {
        return;
    }
    let v = start("quic_retry on;", "");
    let run = client(v.port, "token", r#"{"path": "/a.txt"}"#);
    assert_eq!(run.key("token"), "True", "{}", run.raw);
    assert_eq!(run.key("retried1"), "1");
    // The address validation token (NEW_TOKEN) of the first connection
    // validates the second's address: no Retry.
    assert_eq!(run.key("retried2"), "0", "{}", run.raw);
    assert_eq!(run.responses[1].status, 200);
}

#[test]
fn no_stateless_reset_answers_a_datagram_of_43_bytes_or_fewer() {
    if !have_aioquic() {
        return;
    }
    let v = start("", "");
    let run = client(
        v.port,
        "reset",
        r#"{"path": "/a.txt", "sizes": [30, 43, 44, 80]}"#,
    );
    assert_eq!(run.responses[0].status, 200);
    let replies: Vec<usize> = run
        .key("replies")
        .split(',')
        .map(|n| n.parse().unwrap())
        .collect();
    // For a connection the server no longer holds: nothing for the short
    // ones, a reset shorter than what incited it for the others.
    assert_eq!(&replies[..2], [0, 0], "{}", run.raw);
    assert!((41..44).contains(&replies[2]), "{replies:?}");
    assert!((41..80).contains(&replies[3]), "{replies:?}");
}
