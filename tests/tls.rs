//! TLS (`listen … ssl`, the `ssl_*` directives) against real clients: curl
//! and `openssl s_client`, with certificates made by `openssl` per test.

mod common;
use common::*;
use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// An ECDSA certificate for localhost and a.test, an RSA one for b.test.
fn certs(dir: &TempDir) {
    let make = |key: &[&str], name: &str, cn: &str, san: &str| {
        let out = Command::new("openssl")
            .args(["req", "-x509", "-nodes", "-days", "30", "-newkey"])
            .args(key)
            .args([
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
            ])
            .args(["-subj", &format!("/CN={cn}"), "-addext", san])
            .current_dir(dir.path())
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    make(
        &["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
        "ec",
        "localhost",
        "subjectAltName=DNS:localhost,DNS:a.test",
    );
    make(&["rsa:2048"], "rsa", "b.test", "subjectAltName=DNS:b.test");
}

const TWO_SERVERS: &str = "error_log stderr info;\nevents {}\nhttp {\n  log_format t '$ssl_protocol|$ssl_cipher|$ssl_server_name|$https|$scheme|$ssl_session_reused';\n  server {\n    listen 127.0.0.1:{port} ssl;\n    server_name localhost a.test;\n    ssl_certificate ec.crt;\n    ssl_certificate_key ec.key;\n    root {dir}/html;\n    access_log {dir}/logs/tls.log t;\n    location /go { return 302 $scheme://$host/x; }\n    location /dir/ { }\n    EXTRA\n  }\n  server {\n    listen 127.0.0.1:{port} ssl;\n    server_name b.test;\n    ssl_certificate rsa.crt;\n    ssl_certificate_key rsa.key;\n    root {dir}/html;\n  }\n}\n";

fn start_tls(extra: &str) -> Vireo {
    let dir = TempDir::new("tls");
    certs(&dir);
    dir.write("html/index.html", "hello\n");
    dir.write("html/dir/index.html", "in dir\n");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    dir.write("html/big.bin", &big);
    Vireo::start_in(dir, &TWO_SERVERS.replace("EXTRA", extra))
}

fn curl(v: &Vireo, args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sk", "--max-time", "20"])
        .args([
            "--resolve",
            &format!("a.test:{}:127.0.0.1", v.port),
            "--resolve",
            &format!("b.test:{}:127.0.0.1", v.port),
        ])
        .args(args)
        .output()
        .expect("curl")
}

/// `openssl s_client` to the server, `args` added; stdout and stderr.
fn s_client(v: &Vireo, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{}", v.port)])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn sni_chooses_the_certificate_and_requests_are_served() {
    let v = start_tls("");
    let url = |h: &str, p: &str| format!("https://{h}:{}{p}", v.port);
    let out = curl(&v, &[&url("a.test", "/")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    // Each name gets its server's certificate.
    assert!(s_client(&v, &["-servername", "b.test"]).contains("CN = b.test"));
    assert!(s_client(&v, &["-servername", "a.test"]).contains("CN = localhost"));
    // No SNI: the default server's.
    assert!(s_client(&v, &["-noservername"]).contains("CN = localhost"));
    // Variables and redirects know the scheme.
    let out = curl(&v, &["-D", "-", "-o", "/dev/null", &url("a.test", "/go")]);
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(head.contains("location: https://a.test/x"), "{head}");
    let out = curl(&v, &["-D", "-", "-o", "/dev/null", &url("a.test", "/dir")]);
    let head = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(
        head.contains(&format!("location: https://a.test:{}/dir/", v.port)),
        "{head}"
    );
    let out = curl(&v, &["--tlsv1.2", "--tls-max", "1.2", &url("a.test", "/")]);
    assert!(out.status.success());
    assert!(eventually(10, || v
        .dir
        .read("logs/tls.log")
        .lines()
        .count()
        >= 4));
    let log = v.dir.read("logs/tls.log");
    assert!(
        log.lines()
            .any(|l| l.starts_with("TLSv1.3|TLS_AES_") && l.ends_with("|a.test|on|https|.")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.starts_with("TLSv1.2|ECDHE-ECDSA-AES") && l.contains("|on|https|")),
        "{log}"
    );
}

#[test]
fn keep_alive_large_files_ranges_and_head() {
    // sendfile on: a TLS connection still reads and encrypts the file.
    let v = start_tls("sendfile on; tcp_nopush on;");
    let url = |p: &str| format!("https://a.test:{}{p}", v.port);
    let want: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let out = curl(&v, &["-v", &url("/big.bin"), &url("/big.bin"), &url("/")]);
    let mut expect = want.clone();
    expect.extend_from_slice(&want);
    expect.extend_from_slice(b"hello\n");
    assert!(out.stdout == expect, "bodies differ");
    // The three requests went over one connection.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("Re-using existing connection").count(),
        2,
        "{err}"
    );
    let out = curl(&v, &["-r", "1000-1009", &url("/big.bin")]);
    assert_eq!(out.stdout, &want[1000..1010]);
    let out = curl(&v, &["-I", &url("/big.bin")]);
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(
        head.to_lowercase().contains("content-length: 300000"),
        "{head}"
    );
}

#[test]
fn protocols_ciphers_and_session_resumption() {
    let v = start_tls(
        "ssl_protocols TLSv1.2; ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256; ssl_session_cache shared:T:1m; ssl_session_tickets off;",
    );
    let out = s_client(&v, &["-servername", "a.test", "-tls1_3"]);
    assert!(
        !out.contains("Cipher is TLS_"),
        "TLS 1.3 was refused: {out}"
    );
    let out = s_client(&v, &["-servername", "a.test", "-tls1_2", "-reconnect"]);
    assert!(out.contains("ECDHE-ECDSA-AES128-GCM-SHA256"), "{out}");
    // The session cache resumes (openssl's -reconnect connects five more times).
    assert!(out.matches("Reused, TLSv1.2").count() >= 5, "{out}");

    // Without cache or tickets nothing resumes.
    let v = start_tls("ssl_protocols TLSv1.2; ssl_session_tickets off;");
    let out = s_client(&v, &["-servername", "a.test", "-tls1_2", "-reconnect"]);
    assert_eq!(out.matches("Reused,").count(), 0, "{out}");
    // Tickets (the default) resume without a cache.
    let v = start_tls("ssl_protocols TLSv1.2;");
    let out = s_client(&v, &["-servername", "a.test", "-tls1_2", "-reconnect"]);
    assert!(out.matches("Reused, TLSv1.2").count() >= 5, "{out}");
    // TLS 1.3 (Python's client keeps the ticket it read): tickets resume; a
    // cache without tickets resumes through a ticket naming the cached
    // session; neither, nothing.
    for (conf, reused) in [
        ("", "[False, True]"),
        (
            "ssl_session_cache shared:T:1m; ssl_session_tickets off;",
            "[False, True]",
        ),
        ("ssl_session_tickets off;", "[False, False]"),
    ] {
        let v = start_tls(conf);
        assert_eq!(tls13_reuse(&v), reused, "{conf}");
    }
}

/// Two TLS 1.3 connections, the second offering the first's session:
/// `[False, True]` when it resumed.
fn tls13_reuse(v: &Vireo) -> String {
    let script = "import socket, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
sess, out = None, []
for i in range(2):
    s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', int(sys.argv[1]))), server_hostname='a.test', session=sess)
    s.sendall(b'GET / HTTP/1.1\\r\\nHost: a.test\\r\\nConnection: close\\r\\n\\r\\n')
    while s.recv(4096):
        pass
    out.append(s.session_reused)
    sess = s.session
    s.close()
print(out)
";
    let out = Command::new("python3")
        .args(["-c", script, &v.port.to_string()])
        .output()
        .expect("python3");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn unknown_names_can_be_refused() {
    let dir = TempDir::new("tls-reject");
    certs(&dir);
    dir.write("html/index.html", "hello\n");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n  server {\n    listen 127.0.0.1:{port} ssl default_server;\n    ssl_reject_handshake on;\n  }\n  server {\n    listen 127.0.0.1:{port} ssl;\n    server_name a.test;\n    ssl_certificate ec.crt;\n    ssl_certificate_key ec.key;\n    root {dir}/html;\n  }\n}\n",
    );
    let out = curl(&v, &[&format!("https://a.test:{}/", v.port)]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    let out = s_client(&v, &["-servername", "other.test"]);
    assert!(out.contains("unrecognized name"), "{out}");
}

#[test]
fn configuration_errors_name_file_and_line() {
    let dir = TempDir::new("tls-conf");
    certs(&dir);
    let check = |body: &str, want: &str| {
        let conf = format!(
            "events {{}}\nhttp {{\n  access_log off;\n  server {{\n    listen 127.0.0.1:1 ssl;\n{body}\n  }}\n}}\n"
        );
        let out = test_conf(&dir, &conf);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success(), "accepted: {body}");
        assert!(err.contains(want), "{body}: {err}");
        err
    };
    check(
        "",
        "no \"ssl_certificate\" is defined for the \"listen ... ssl\" directive",
    );
    let err = check(
        "    ssl_certificate missing.crt;\n    ssl_certificate_key ec.key;",
        "missing.crt",
    );
    assert!(err.contains("t.conf:6"), "{err}");
    let err = check(
        "    ssl_certificate ec.crt;\n    ssl_certificate_key rsa.key;",
        "does not belong to the certificate",
    );
    assert!(err.contains("t.conf:7"), "{err}");
    check("    ssl_certificate ec.crt;", "no \"ssl_certificate_key\"");
    check(
        "    ssl_certificate ec.crt; ssl_certificate_key ec.key;\n    ssl_protocols TLSv1 TLSv1.1;",
        "no protocol vireo supports",
    );
    check(
        "    ssl_certificate ec.crt; ssl_certificate_key ec.key;\n    ssl_ciphers RC4-SHA:DES-CBC3-SHA;",
        "leaves no TLS 1.2 cipher suite",
    );
    check(
        "    ssl_certificate ec.crt; ssl_certificate_key ec.key;\n    ssl_certificate_key rsa.key;",
        "no \"ssl_certificate\" to pair with the key",
    );
    // Old protocol names beside supported ones, and an ignored directive: notices, not errors.
    let conf = "events {}\nhttp {\n  access_log off;\n  server {\n    listen 127.0.0.1:1 ssl;\n    ssl_certificate ec.crt; ssl_certificate_key ec.key;\n    ssl_protocols TLSv1 TLSv1.2;\n    ssl_dhparam dh.pem;\n  }\n}\n";
    let out = test_conf(&dir, conf);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "\"ssl_dhparam\" directive is ignored: rustls has no finite-field Diffie-Hellman suites in "
        ),
        "{err}"
    );
}

#[test]
fn reload_picks_up_a_renewed_certificate() {
    let v = start_tls("");
    assert!(s_client(&v, &["-servername", "a.test"]).contains("CN = localhost"));
    // Renew: the EC files now hold a certificate for another name.
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "30", "-newkey", "ec"])
        .args(["-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args([
            "-keyout",
            "ec.key",
            "-out",
            "ec.crt",
            "-subj",
            "/CN=renewed",
        ])
        .current_dir(v.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    v.signal(libc::SIGHUP);
    assert!(eventually(15, || s_client(&v, &["-servername", "a.test"])
        .contains("CN = renewed")));
}

#[test]
fn bad_and_slow_handshakes_are_bounded() {
    let v = start_tls("ssl_handshake_timeout 1s;");
    // Plain HTTP to a TLS port: refused, and the server carries on.
    let mut s = v.connect();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(n == 0 || buf[0] == 0x15, "not an alert or a close");
    // A client that never finishes its handshake is dropped after the timeout.
    let mut idle = v.connect();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let t = Instant::now();
    assert_eq!(idle.read(&mut buf).unwrap_or(0), 0);
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    let out = curl(&v, &[&format!("https://a.test:{}/", v.port)]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert!(v.stderr().contains("SSL handshake timed out"));
}

#[test]
fn a_flood_of_idle_handshakes_is_cut_and_the_server_recovers() {
    let v = start_tls("ssl_handshake_timeout 1s;");
    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", v.pid()))
            .unwrap()
            .count()
    };
    let base = fds();
    // 300 connections that never send a ClientHello.
    let flood: Vec<_> = (0..300).map(|_| v.connect()).collect();
    assert!(eventually(10, || fds() >= base + 250), "not accepted");
    // Each is dropped at its handshake timeout; then a real client is served.
    assert!(eventually(15, || fds() <= base + 5), "{} fds", fds());
    let out = curl(&v, &[&format!("https://a.test:{}/", v.port)]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    drop(flood);
}

#[test]
fn alpn_chooses_http2_where_the_address_speaks_it() {
    // The first server's address speaks HTTP/2; a listener without it stays HTTP/1.1.
    let v = start_tls(
        "http2 on; access_log {dir}/logs/h2.log combined; location /v { return 200 \"$server_protocol $https $ssl_protocol\\n\"; }",
    );
    let url = format!("https://a.test:{}/v", v.port);
    let out = curl(&v, &["--http2", "-w", "%{http_version}", &url]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "HTTP/2.0 on TLSv1.3\n2"
    );
    let out = curl(&v, &["--http1.1", "-w", "%{http_version}", &url]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "HTTP/1.1 on TLSv1.3\n1.1"
    );
    let big = curl(
        &v,
        &["--http2", &format!("https://a.test:{}/big.bin", v.port)],
    );
    assert_eq!(big.stdout.len(), 300_000);
    let plain = start_tls("");
    let out = curl(
        &plain,
        &[
            "--http2",
            "-w",
            "%{http_version}",
            "-o",
            "/dev/null",
            &format!("https://a.test:{}/", plain.port),
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1.1");
}

#[test]
fn deprecated_ssl_on_makes_the_addresses_tls() {
    let dir = TempDir::new("tls");
    certs(&dir);
    dir.write("html/index.html", "hello\n");
    let conf = "error_log stderr info;\nevents {}\nhttp {\n  access_log off;\n  server {\n    listen 127.0.0.1:{port};\n    ssl on;\n    ssl_certificate ec.crt;\n    ssl_certificate_key ec.key;\n    root {dir}/html;\n  }\n}\n";
    let v = Vireo::start_in(dir, conf);
    let out = curl(&v, &[&format!("https://a.test:{}/", v.port)]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert!(
        v.stderr().contains(
            "the \"ssl\" directive is deprecated, use the \"listen ... ssl\" directive instead in "
        ),
        "{}",
        v.stderr()
    );
}

#[test]
fn an_x509_version_1_certificate_is_served() {
    // `openssl req -x509` with a configuration that names no extensions makes
    // a version 1 certificate; OpenSSL-based servers serve it, and so does vireo.
    let dir = TempDir::new("tls");
    dir.write(
        "openssl.conf",
        "[ req ]\ndefault_bits = 2048\nencrypt_key = no\ndistinguished_name = dn\n[ dn ]\n",
    );
    let out = Command::new("openssl")
        .args(["req", "-x509", "-new", "-config", "openssl.conf"])
        .args([
            "-subj",
            "/CN=localhost/",
            "-out",
            "v1.crt",
            "-keyout",
            "v1.key",
        ])
        .current_dir(dir.path())
        .output()
        .expect("openssl");
    assert!(out.status.success());
    dir.write("html/index.html", "hello\n");
    let conf = "error_log stderr info;\nevents {}\nhttp {\n  access_log off;\n  server {\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate v1.crt;\n    ssl_certificate_key v1.key;\n    root {dir}/html;\n  }\n}\n";
    let v = Vireo::start_in(dir, conf);
    let out = curl(&v, &[&format!("https://a.test:{}/", v.port)]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
}

#[test]
fn curve_variables_name_the_groups_as_openssl() {
    let v = start_tls(
        "ssl_ecdh_curve prime256v1; location /curve { return 200 \"$ssl_curve|$ssl_curves\"; }",
    );
    let out = curl(
        &v,
        &[
            "--curves",
            "X25519:P-256",
            &format!("https://a.test:{}/curve", v.port),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (curve, curves) = text.split_once('|').expect("two values");
    assert_eq!(curve, "prime256v1", "{text}");
    assert!(
        curves.contains("X25519") && curves.contains("prime256v1"),
        "{text}"
    );
}

/// `ssl_conf_command`: the commands rustls can carry out override the other
/// settings; the others are refused, naming them.
#[test]
fn conf_commands() {
    let dir = TempDir::new("tls-conf-command");
    certs(&dir);
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port} ssl;\n  ssl_certificate ec.crt;\n  ssl_certificate_key ec.key;\n  ssl_conf_command Certificate rsa.crt;\n  ssl_conf_command PrivateKey rsa.key;\n  ssl_conf_command Options -ServerPreference,NoRenegotiation;\n  return 200 ok;\n }\n}\n",
    );
    let text = s_client(&v, &[]);
    assert!(
        text.contains("CN=b.test") || text.contains("CN = b.test"),
        "{text}"
    );
    let dir = TempDir::new("tls-conf-command-bad");
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n server {\n  ssl_conf_command Options PrioritizeChaCha;\n }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "\"ssl_conf_command Options PrioritizeChaCha\" is not supported by vireo (rustls)"
        ) && err.contains("t.conf:4"),
        "{err}"
    );
}
