//! TLS in the stream block against real clients and servers: `openssl
//! s_client` with several SNI names and curl to `listen … ssl` servers
//! (termination, the server chosen by SNI, `ssl_alpn`, client certificates,
//! session resumption, `$ssl_*`), `ssl_preread` routing TLS by SNI to
//! `openssl s_server` backends without terminating it, and `proxy_ssl` to
//! Debian's nginx (`proxy_ssl_name`, `proxy_ssl_server_name`,
//! `proxy_ssl_verify`, `proxy_ssl_certificate`, the PROXY header sent in
//! the clear before the handshake). Certificates are made per test with the
//! openssl CLI: a CA, a.test and b.test by it, a client by it.

mod common;
use common::*;
use std::io::Read;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// ca.crt; a.crt (a.test), b.crt (b.test) and client.crt (CN=client),
/// signed by the CA; stranger.crt, self-signed.
fn certs(dir: &TempDir) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    openssl(
        dir,
        &[
            &["req", "-x509", "-nodes", "-days", "30"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-subj",
                "/CN=Test CA",
            ],
        ]
        .concat(),
    );
    for (name, cn) in [("a", "a.test"), ("b", "b.test"), ("client", "client")] {
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        let subj = format!("/CN={cn}");
        openssl(
            dir,
            &[
                &["req", "-new", "-nodes"][..],
                &ec,
                &["-keyout", &key, "-out", &csr, "-subj", &subj],
            ]
            .concat(),
        );
        let ext = dir.write(&format!("{name}.ext"), format!("subjectAltName=DNS:{cn}\n"));
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "30",
                "-out",
                &crt,
                "-extfile",
            ]
            .iter()
            .copied()
            .chain([ext.to_str().unwrap()])
            .collect::<Vec<_>>(),
        );
    }
    openssl(
        dir,
        &[
            &["req", "-x509", "-nodes", "-days", "30"][..],
            &ec,
            &["-keyout", "stranger.key", "-out", "stranger.crt"],
            &[
                "-subj",
                "/CN=a.test",
                "-addext",
                "subjectAltName=DNS:a.test",
            ],
        ]
        .concat(),
    );
}

/// `openssl s_client` to `port`, `args` added: what it printed (the
/// certificate, the session, and the server's bytes, read to the close).
fn s_client(dir: &TempDir, port: u16, args: &[&str]) -> String {
    s_client_sending(dir, port, args, b"")
}

/// [`s_client`] sending `input` once connected (within 20 seconds).
fn s_client_sending(dir: &TempDir, port: u16, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("timeout")
        .args(["20", "openssl", "s_client", "-ign_eof"])
        .args(["-connect", &format!("127.0.0.1:{port}")])
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input).unwrap();
    let out = child.wait_with_output().expect("openssl");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn curl(port: u16, host: &str, args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "10"])
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .args(args)
        .arg(format!("https://{host}:{port}/"))
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One address, servers chosen by SNI: a.test answers with its session's
/// TLS variables, b.test terminates TLS for the plain http server of the
/// same configuration (curl's requests), the default answers its name.
const TERMINATION: &str = "error_log {dir}/logs/error.log info;\nevents {}\nstream {\n  log_format t '$server_name|$ssl_server_name|$ssl_protocol|$ssl_session_reused|$ssl_client_verify|$status';\n  access_log {dir}/logs/stream.log t;\n  ssl_certificate {dir}/b.crt;\n  ssl_certificate_key {dir}/b.key;\n  ssl_session_cache shared:S:1m;\n  server {\n    listen 127.0.0.1:{port} ssl default_server;\n    server_name default.test;\n    return \"default:$ssl_server_name\\n\";\n  }\n  server {\n    listen 127.0.0.1:{port} ssl;\n    server_name a.test ~^(?<sub>[a-z]+)\\.wild\\.test$;\n    ssl_certificate {dir}/a.crt;\n    ssl_certificate_key {dir}/a.key;\n    ssl_alpn x-one x-two;\n    return \"a:$server_name:$ssl_server_name:$ssl_protocol:$ssl_alpn_protocol:$sub:$ssl_session_reused\\n\";\n  }\n  server {\n    listen 127.0.0.1:{port} ssl;\n    server_name b.test;\n    proxy_pass 127.0.0.1:{port2};\n  }\n  server {\n    listen 127.0.0.1:PORT3 ssl;\n    ssl_verify_client on;\n    ssl_client_certificate {dir}/ca.crt;\n    return \"$ssl_client_verify:$ssl_client_s_dn\\n\";\n  }\n}\nhttp {\n  server {\n    listen 127.0.0.1:{port2};\n    location / { return 200 \"plain http behind TLS\\n\"; }\n  }\n}\n";

fn termination() -> (Vireo, u16) {
    let dir = TempDir::new("stream-ssl");
    certs(&dir);
    let port3 = free_port();
    let v = Vireo::start_in(dir, &TERMINATION.replace("PORT3", &port3.to_string()));
    (v, port3)
}

/// The server's bytes s_client printed: the line after its session block.
fn answer(out: &str) -> String {
    out.lines()
        .skip_while(|l| !l.starts_with("---"))
        .filter(|l| l.starts_with("a:") || l.starts_with("default:") || l.contains("SUCCESS"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_handshake_chooses_the_server_by_sni() {
    let (v, _) = termination();
    let out = s_client(
        &v.dir,
        v.port,
        &["-servername", "a.test", "-alpn", "x-two,x-zzz"],
    );
    assert!(out.contains("CN = a.test"), "{out}");
    let a = answer(&out);
    assert!(
        a.starts_with("a:a.test:a.test:TLSv1.3:x-two::."),
        "{a}\n{out}"
    );
    // A regex name: its capture is a variable of the session.
    let out = s_client(&v.dir, v.port, &["-servername", "www.wild.test"]);
    assert!(
        answer(&out).starts_with("a:a.test:www.wild.test:TLSv1.3::www:"),
        "{out}"
    );
    // No SNI, or an unknown name: the default server, with its certificate.
    let out = s_client(&v.dir, v.port, &["-noservername"]);
    assert!(out.contains("CN = b.test"), "{out}");
    assert_eq!(answer(&out), "default:");
    let out = s_client(&v.dir, v.port, &["-servername", "nx.test", "-tls1_2"]);
    assert_eq!(answer(&out), "default:nx.test");
    // An ALPN offer the server has none of is refused.
    let out = s_client(&v.dir, v.port, &["-servername", "a.test", "-alpn", "h2"]);
    assert!(!out.contains("a:a.test"), "{out}");
    assert!(out.contains("no application protocol"), "{out}");
    // TLS terminated for a plain backend: curl's request reaches the http block.
    assert_eq!(curl(v.port, "b.test", &[]), "plain http behind TLS\n");
    assert!(eventually(5, || {
        let log = v.dir.read("logs/stream.log");
        log.contains("a.test|a.test|TLSv1.3|.|NONE|200")
            && log.contains("default.test|-|TLSv1.3|.|NONE|200")
            && log.contains("b.test|b.test|")
    }));
}

#[test]
fn sessions_resume_from_the_cache_and_tickets() {
    let (v, _) = termination();
    let sess = v.dir.path().join("sess.pem");
    let sess = sess.to_str().unwrap();
    for proto in ["-tls1_2", "-tls1_3"] {
        let first = s_client(
            &v.dir,
            v.port,
            &["-servername", "a.test", proto, "-sess_out", sess],
        );
        assert!(answer(&first).ends_with(":."), "{first}");
        let again = s_client(
            &v.dir,
            v.port,
            &["-servername", "a.test", proto, "-sess_in", sess],
        );
        assert!(again.contains("Reused,"), "{proto}: {again}");
        assert!(answer(&again).ends_with(":r"), "{proto}: {again}");
    }
}

#[test]
fn client_certificates_are_verified_after_the_handshake() {
    let (v, port3) = termination();
    let out = s_client(
        &v.dir,
        port3,
        &["-cert", "client.crt", "-key", "client.key"],
    );
    assert!(answer(&out).contains("SUCCESS:CN=client"), "{out}");
    // None, or one the CA did not sign: the session ends with 500 unanswered
    // (empty variables are logged as `-`).
    let out = s_client(&v.dir, port3, &[]);
    assert!(!out.contains("SUCCESS") && !out.contains("NONE:"), "{out}");
    let out = s_client(
        &v.dir,
        port3,
        &["-cert", "stranger.crt", "-key", "stranger.key"],
    );
    assert!(!out.contains("FAILED:"), "{out}");
    assert!(
        eventually(5, || {
            let log = v.dir.read("logs/stream.log");
            log.contains("TLSv1.3|.|SUCCESS|200")
                && log.contains("TLSv1.3|.|NONE|500")
                && log.contains("|FAILED:self-signed certificate|500")
        }),
        "{}",
        v.dir.read("logs/stream.log")
    );
    let err = v.dir.read("logs/error.log");
    assert!(
        err.contains("client sent no required SSL certificate while SSL handshaking"),
        "{err}"
    );
    assert!(err.contains("client SSL certificate verify error"), "{err}");
}

/// `openssl s_server -www` with `cert` on a free port, killed on drop.
struct SServer {
    _child: Daemon,
    port: u16,
}

fn s_server(dir: &TempDir, cert: &str) -> SServer {
    let port = free_port();
    let child = Command::new("openssl")
        .args(["s_server", "-www", "-accept", &port.to_string()])
        .args([
            "-cert",
            &format!("{cert}.crt"),
            "-key",
            &format!("{cert}.key"),
        ])
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    assert!(
        eventually(10, || TcpStream::connect(("127.0.0.1", port)).is_ok()),
        "s_server did not start"
    );
    SServer {
        _child: Daemon(child),
        port,
    }
}

#[test]
fn ssl_preread_routes_tls_by_sni_without_terminating_it() {
    let dir = TempDir::new("stream-preread");
    certs(&dir);
    let (a, b) = (s_server(&dir, "a"), s_server(&dir, "b"));
    let small = free_port();
    let v = Vireo::start_in(
        dir,
        &format!(
            "events {{}}\nstream {{\n  log_format t '$ssl_preread_server_name|$ssl_preread_alpn_protocols|$ssl_preread_protocol|$upstream_addr|$status';\n  access_log {{dir}}/logs/stream.log t;\n  map $ssl_preread_server_name $to {{\n    a.test 127.0.0.1:{};\n    default 127.0.0.1:{};\n  }}\n  server {{\n    listen 127.0.0.1:{{port}};\n    ssl_preread on;\n    preread_timeout 2s;\n    proxy_pass $to;\n  }}\n  server {{\n    listen 127.0.0.1:{small};\n    ssl_preread on;\n    preread_buffer_size 64;\n    proxy_pass 127.0.0.1:{};\n  }}\n}}\n",
            a.port, b.port, b.port
        ),
    );
    // Each name reaches its backend, whose own certificate the client sees.
    let get = b"GET / HTTP/1.0\r\n\r\n";
    let args = ["-servername", "a.test", "-alpn", "h2,http/1.1"];
    let out = s_client_sending(&v.dir, v.port, &args, get);
    assert!(out.contains("CN = a.test"), "{out}");
    let out = s_client_sending(&v.dir, v.port, &["-servername", "b.test"], get);
    assert!(out.contains("CN = b.test"), "{out}");
    // curl's request goes through to s_server's status page.
    let page = curl(v.port, "a.test", &[]);
    assert!(page.contains("s_server"), "{page}");
    // Not TLS: the variables are empty (`-` in the log) and the bytes pass
    // to the default.
    let mut s = TcpStream::connect(("127.0.0.1", v.port)).unwrap();
    std::io::Write::write_all(&mut s, b"hello, not TLS\r\n").unwrap();
    drop(s);
    // A ClientHello longer than the preread buffer ends the session with 400.
    let out = s_client_sending(&v.dir, small, &["-servername", "b.test"], get);
    assert!(!out.contains("CN = b.test"), "{out}");
    let expected = [
        format!("a.test|h2,http/1.1|TLSv1.3|127.0.0.1:{}|200", a.port),
        format!("b.test|-|TLSv1.3|127.0.0.1:{}|200", b.port),
        format!("-|-|-|127.0.0.1:{}|200", b.port),
        "-|-|-|-|400".to_string(),
    ];
    assert!(
        eventually(10, || {
            let log = v.dir.read("logs/stream.log");
            expected.iter().all(|e| log.lines().any(|l| l == e))
        }),
        "{}",
        v.dir.read("logs/stream.log")
    );
}

/// Debian's nginx as a TLS backend: `listen … ssl` answering with what it
/// saw (SNI, client certificate), and `listen … ssl proxy_protocol`
/// answering with the PROXY header's address.
struct Nginx {
    _child: Daemon,
    port: u16,
    pp_port: u16,
}

fn nginx(dir: &TempDir) -> Option<Nginx> {
    if !std::path::Path::new("/usr/sbin/nginx").exists() {
        eprintln!("skipped: no /usr/sbin/nginx");
        return None;
    }
    let (port, pp_port) = (free_port(), free_port());
    let conf = format!(
        "  ssl_certificate {d}/a.crt;\n  ssl_certificate_key {d}/a.key;\n  server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_verify_client optional;\n    ssl_client_certificate {d}/ca.crt;\n    location / {{ return 200 \"sni=$ssl_server_name verify=$ssl_client_verify dn=$ssl_client_s_dn\\n\"; }}\n  }}\n  server {{\n    listen 127.0.0.1:{pp_port} ssl proxy_protocol;\n    location / {{ return 200 \"pp=$proxy_protocol_addr\\n\"; }}\n  }}\n",
        d = dir.path().display()
    );
    let child = nginx_backend(dir, &conf);
    let n = Nginx {
        _child: child,
        port,
        pp_port,
    };
    let end = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", pp_port)).is_err() {
        assert!(Instant::now() < end, "nginx did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(n)
}

/// A plain HTTP/1.0 GET through `port`: the response body.
fn get_body(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut s, b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    text.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

#[test]
fn proxy_ssl_speaks_tls_to_an_nginx_backend() {
    let back = TempDir::new("stream-proxy-ssl-nginx");
    certs(&back);
    let Some(n) = nginx(&back) else { return };
    let d = back.path().display().to_string();
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let v = Vireo::start(&format!(
        "error_log {{dir}}/logs/error.log info;\nevents {{}}\nstream {{\n  proxy_ssl on;\n  server {{\n    listen 127.0.0.1:{{port}};\n    proxy_pass 127.0.0.1:{np};\n    proxy_ssl_server_name on;\n    proxy_ssl_name a.test;\n    proxy_ssl_verify on;\n    proxy_ssl_trusted_certificate {d}/ca.crt;\n    proxy_ssl_certificate {d}/client.crt;\n    proxy_ssl_certificate_key {d}/client.key;\n  }}\n  server {{\n    listen 127.0.0.1:{p0};\n    proxy_pass 127.0.0.1:{np};\n    proxy_ssl_verify on;\n    proxy_ssl_name other.test;\n    proxy_ssl_trusted_certificate {d}/ca.crt;\n  }}\n  server {{\n    listen 127.0.0.1:{p1};\n    proxy_pass 127.0.0.1:{np};\n  }}\n  server {{\n    listen 127.0.0.1:{p2};\n    proxy_pass 127.0.0.1:{pp};\n    proxy_protocol on;\n  }}\n}}\n",
        np = n.port,
        pp = n.pp_port,
        p0 = ports[0],
        p1 = ports[1],
        p2 = ports[2],
    ));
    // SNI as asked, the certificate verified, the client's presented.
    assert_eq!(
        get_body(v.port),
        "sni=a.test verify=SUCCESS dn=CN=client\n",
        "{}",
        v.dir.read("logs/error.log")
    );
    // A name the certificate does not have fails the attempt (502).
    assert_eq!(get_body(ports[0]), "");
    assert!(eventually(5, || v.dir.read("logs/error.log").contains(
        "upstream SSL certificate does not match \"other.test\""
    )));
    // Defaults: no SNI, no verification, no certificate.
    assert_eq!(get_body(ports[1]), "sni= verify=NONE dn=\n");
    // The PROXY header goes in the clear, before the handshake.
    assert_eq!(get_body(ports[2]), "pp=127.0.0.1\n");
}

#[test]
fn configuration_errors_name_the_line() {
    let dir = TempDir::new("stream-ssl-conf");
    certs(&dir);
    let check = |conf: &str, want: &str| {
        let out = test_conf(&dir, conf);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{err}");
    };
    check(
        "events {}\nstream {\n  server {\n    listen 127.0.0.1:1 ssl;\n    return x;\n  }\n}\n",
        "no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive",
    );
    check(
        "events {}\nstream {\n  server {\n    listen unix:/tmp/x.sock ssl;\n    return x;\n  }\n}\n",
        "applies to TCP addresses only",
    );
    check(
        "events {}\nstream {\n  server {\n    listen 127.0.0.1:1 udp ssl;\n    return x;\n  }\n}\n",
        "\"ssl\" parameter is incompatible with \"udp\"",
    );
    check(
        "events {}\nstream {\n  proxy_ssl_conf_command Options -SessionTicket;\n  server {\n    listen 127.0.0.1:1;\n    proxy_pass 127.0.0.1:2;\n  }\n}\n",
        "\"proxy_ssl_conf_command Options -SessionTicket\" is not supported by vireo",
    );
    check(
        "events {}\nstream {\n  server {\n    listen 127.0.0.1:1 default_server;\n    return x;\n  }\n  server {\n    listen 127.0.0.1:1 default_server;\n    return y;\n  }\n}\n",
        "a duplicate default server for 127.0.0.1:1",
    );
}

#[test]
fn pass_hands_tls_and_preread_connections_to_http() {
    let dir = TempDir::new("stream-pass");
    certs(&dir);
    let p: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let v = Vireo::start_in(
        dir,
        &format!(
            r#"
error_log {{dir}}/logs/error.log info;
events {{}}
stream {{
    log_format t '$server_port|$status';
    access_log {{dir}}/logs/stream.log t;
    ssl_certificate {{dir}}/a.crt;
    ssl_certificate_key {{dir}}/a.key;
    server {{
        listen 127.0.0.1:{{port}};
        ssl_preread on;
        pass 127.0.0.1:{p1};
    }}
    server {{
        listen 127.0.0.1:{{port}};
        server_name b.test;
        pass 127.0.0.1:{p0};
    }}
    server {{
        listen 127.0.0.1:{p2} ssl;
        ssl_alpn h2 http/1.1;
        pass 127.0.0.1:{p1};
    }}
    server {{
        listen 127.0.0.1:{p3} ssl;
        ssl_preread on;
        pass 127.0.0.1:{p1};
    }}
}}
http {{
    server {{
        listen 127.0.0.1:{p0} ssl;
        ssl_certificate {{dir}}/b.crt;
        ssl_certificate_key {{dir}}/b.key;
        location / {{
            return 200 "tls-http:$https:$ssl_server_name:$server_protocol\n";
        }}
    }}
    server {{
        listen 127.0.0.1:{p1};
        http2 on;
        location / {{
            return 200 "plain-http:$https:$ssl_server_name:$server_protocol\n";
        }}
    }}
}}
"#,
            p0 = p[0],
            p1 = p[1],
            p2 = p[2],
            p3 = p[3],
        ),
    );
    // ssl_preread's name chooses the server, whose pass sends the
    // ClientHello, still queued, to the http address that handshakes.
    assert_eq!(
        curl(v.port, "b.test", &["--http1.1"]),
        "tls-http:on:b.test:HTTP/1.1\n"
    );
    let get = b"GET / HTTP/1.0\r\n\r\n";
    let out = s_client_sending(&v.dir, v.port, &["-servername", "b.test"], get);
    assert!(out.contains("CN = b.test"), "{out}");
    assert!(out.contains("tls-http:on:b.test:HTTP/1.0"), "{out}");
    // Not TLS: the default server passes it to the plain address.
    let plain = Command::new("curl")
        .args(["-s", "--max-time", "10"])
        .arg(format!("http://127.0.0.1:{}/", v.port))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "plain-http:::HTTP/1.1\n"
    );
    // TLS ended by the stream server: the http address serves it
    // decrypted, HTTP/2 when ALPN chose h2.
    assert_eq!(
        curl(p[2], "a.test", &["--http2"]),
        "plain-http:on:a.test:HTTP/2.0\n"
    );
    assert_eq!(
        curl(p[2], "a.test", &["--http1.1"]),
        "plain-http:on:a.test:HTTP/1.1\n"
    );
    // Bytes read by a preread phase of a TLS session: not passed (500).
    assert_eq!(curl(p[3], "a.test", &[]), "");
    let log = || v.dir.read("logs/stream.log");
    assert!(
        eventually(5, || log().contains(&format!("{}|500", p[3]))),
        "{}",
        log()
    );
    assert!(!log().contains(&format!("{}|", p[2])), "{}", log());
    assert!(
        error_log(&v).contains("cannot pass connection with preread data"),
        "{}",
        error_log(&v)
    );
}
