//! `proxy_pass https://…` against real TLS backends on loopback: vireo's own
//! `listen … ssl` servers (which show the SNI name, the session reuse and
//! the connection number they saw) and, for client certificates, nginx
//! with `ssl_verify_client`. Certificates are made with the openssl CLI per
//! test: a CA, a leaf it signed, an expired leaf, a self-signed stranger.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// `openssl req` making a key and a self-signed certificate (`-x509`) or
/// a request for `name` (its CN; `ext` added).
fn request(dir: &TempDir, x509: bool, name: &str, cn: &str, ext: &str) {
    let (keyout, out) = (
        format!("{name}.key"),
        format!("{name}.{}", if x509 { "crt" } else { "csr" }),
    );
    let subj = format!("/CN={cn}");
    let mut args = vec![
        "req", "-nodes", "-newkey", "rsa:2048", "-subj", &subj, "-addext", ext,
    ];
    args.extend(["-keyout", &keyout, "-out", &out]);
    if x509 {
        args.extend(["-x509", "-days", "30"]);
    } else {
        args.push("-new");
    }
    openssl(dir, &args);
}

/// The test CA signs `name.csr` into `name.crt` (`dates`: its validity).
fn sign(dir: &TempDir, name: &str, dates: &[&str]) {
    let (csr, crt) = (format!("{name}.csr"), format!("{name}.crt"));
    let mut args = vec!["ca", "-batch", "-config", "ca.conf", "-keyfile", "ca.key"];
    args.extend(["-cert", "ca.crt", "-in", &csr, "-out", &crt]);
    args.extend(dates);
    openssl(dir, &args);
}

/// ca.crt; good.crt (backend.test, by the CA); expired.crt (backend.test,
/// by the CA, expired in 2020); stranger.crt (backend.test, self-signed);
/// client.crt (CN=client, by the CA); enc.crt (CN=enc, by the CA, its key
/// encrypted with the password "secret", in `passwords` after a wrong one).
fn certs(dir: &TempDir) {
    dir.write(
        "ca.conf",
        format!(
            "[ ca ]\ndefault_ca = myca\n[ myca ]\nnew_certs_dir = {d}\ndatabase = {d}/index.txt\ndefault_md = sha256\npolicy = pol\nserial = {d}/serial\ndefault_days = 3\ncopy_extensions = copy\n[ pol ]\ncommonName = supplied\n",
            d = dir.path().display()
        ),
    );
    dir.write("index.txt", "");
    dir.write("index.txt.attr", "unique_subject = no\n");
    dir.write("serial", "1000\n");
    request(
        dir,
        true,
        "ca",
        "Test CA",
        "basicConstraints=critical,CA:TRUE",
    );
    let san = "subjectAltName=DNS:backend.test";
    request(dir, false, "good", "backend.test", san);
    sign(dir, "good", &[]);
    request(dir, false, "expired", "backend.test", san);
    sign(
        dir,
        "expired",
        &[
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200201000000Z",
        ],
    );
    request(dir, false, "client", "client", "subjectAltName=DNS:client");
    sign(dir, "client", &[]);
    request(dir, true, "stranger", "backend.test", san);
    // An encrypted key (PKCS#8), as nginx's tests make one.
    openssl(
        dir,
        &[
            "genrsa",
            "-aes128",
            "-passout",
            "pass:secret",
            "-out",
            "enc.key",
            "2048",
        ],
    );
    let enc = [
        "req",
        "-new",
        "-key",
        "enc.key",
        "-passin",
        "pass:secret",
        "-subj",
        "/CN=enc",
    ];
    openssl(dir, &[&enc[..], &["-out", "enc.csr"]].concat());
    sign(dir, "enc", &[]);
    dir.write("passwords", "wrong\nsecret\n");
}

/// An HTTP head read a byte at a time (nothing of what follows).
fn read_head(r: &mut impl std::io::Read) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if r.read(&mut b).ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    Some(head)
}

/// Backends: good, expired and stranger certificates on {b1}, {b2}, {b3};
/// each answers with the SNI name, session reuse and connection it saw.
const CONF: &str = r#"
error_log {dir}/logs/error.log info;
events {}
http {
  access_log off;
  upstream kept {
    server 127.0.0.1:{b1};
    keepalive 4;
  }
  upstream fresh {
    server 127.0.0.1:{b1};
  }
  server {
    listen 127.0.0.1:{b1} ssl;
    ssl_certificate good.crt;
    ssl_certificate_key good.key;
    ssl_session_cache builtin;
    location / { return 200 "sni=$ssl_server_name reused=$ssl_session_reused conn=$connection\n"; }
  }
  server {
    listen 127.0.0.1:{b2} ssl;
    ssl_certificate expired.crt;
    ssl_certificate_key expired.key;
    location / { return 200 "expired backend\n"; }
  }
  server {
    listen 127.0.0.1:{b3} ssl;
    ssl_certificate stranger.crt;
    ssl_certificate_key stranger.key;
    location / { return 200 "stranger backend\n"; }
  }
  server {
    listen 127.0.0.1:{port};
    proxy_ssl_trusted_certificate ca.crt;
    proxy_ssl_name backend.test;
    proxy_ssl_session_reuse off;
    location /plain/ { proxy_pass https://127.0.0.1:{b1}/; }
    location /verified/ { proxy_pass https://127.0.0.1:{b1}/; proxy_ssl_verify on; }
    location /wrong-name/ {
      proxy_pass https://127.0.0.1:{b1}/;
      proxy_ssl_verify on;
      proxy_ssl_name other.test;
    }
    location /expired/ { proxy_pass https://127.0.0.1:{b2}/; proxy_ssl_verify on; }
    location /expired-unchecked/ { proxy_pass https://127.0.0.1:{b2}/; }
    location /stranger/ { proxy_pass https://127.0.0.1:{b3}/; proxy_ssl_verify on; }
    location /stranger-unchecked/ { proxy_pass https://127.0.0.1:{b3}/; }
    location /sni/ {
      proxy_pass https://127.0.0.1:{b1}/;
      proxy_ssl_server_name on;
      proxy_ssl_name $arg_name;
    }
    location /nosni/ { proxy_pass https://127.0.0.1:{b1}/; }
    location /kept/ {
      proxy_pass https://kept/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
    location /resumed/ {
      proxy_pass https://fresh/;
      proxy_ssl_session_reuse on;
    }
    location /dynamic/ {
      proxy_pass https://127.0.0.1:$arg_port/;
      proxy_ssl_verify on;
    }
    location /tls12/ {
      proxy_pass https://127.0.0.1:{b1}/;
      proxy_ssl_protocols TLSv1.2;
      proxy_ssl_ciphers ECDHE-RSA-AES256-GCM-SHA384;
      proxy_ssl_verify on;
    }
  }
}
"#;

struct Setup {
    v: Vireo,
    b1: u16,
    b2: u16,
    b3: u16,
}

fn start() -> Setup {
    let dir = TempDir::new("proxy-ssl");
    certs(&dir);
    let (b1, b2, b3) = (free_port(), free_port(), free_port());
    let conf = CONF
        .replace("{b1}", &b1.to_string())
        .replace("{b2}", &b2.to_string())
        .replace("{b3}", &b3.to_string());
    let v = Vireo::start_in(dir, &conf);
    Setup { v, b1, b2, b3 }
}

fn error_log(v: &Vireo) -> String {
    std::fs::read_to_string(v.dir.path().join("logs/error.log")).unwrap_or_default()
}

/// `(sni, reused, conn)` from a good backend's answer.
fn seen(r: &Resp) -> (String, String, String) {
    let t = r.text();
    let field = |k: &str| {
        t.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {t:?}"))
            .to_string()
    };
    (field("sni"), field("reused"), field("conn"))
}

#[test]
fn verification_accepts_the_trusted_and_refuses_the_rest() {
    let s = start();
    let v = &s.v;
    // Off (nginx's default): any certificate is taken.
    assert_eq!(v.get("/plain/").status, 200);
    assert_eq!(v.get("/expired-unchecked/").text(), "expired backend\n");
    assert_eq!(v.get("/stranger-unchecked/").text(), "stranger backend\n");
    // On: a chain to the trusted CA naming proxy_ssl_name.
    assert_eq!(v.get("/verified/").status, 200);
    assert_eq!(v.get("/tls12/").status, 200, "{}", error_log(v));
    let r = v.get(&format!("/dynamic/?port={}", s.b1));
    assert_eq!(r.status, 200, "{}", error_log(v));
    assert_eq!(v.get(&format!("/dynamic/?port={}", s.b3)).status, 502);

    assert_eq!(v.get("/wrong-name/").status, 502);
    assert_eq!(v.get("/expired/").status, 502);
    assert_eq!(v.get("/stranger/").status, 502);
    let log = error_log(v);
    assert!(
        log.contains("upstream SSL certificate does not match \"other.test\" while SSL handshaking to upstream"),
        "{log}"
    );
    assert!(
        log.contains("upstream SSL certificate verify error: (10:certificate has expired)"),
        "{log}"
    );
    assert!(
        log.contains("upstream SSL certificate verify error: (18:self-signed certificate)"),
        "{log}"
    );
    assert!(
        log.contains(&format!("upstream: \"https://127.0.0.1:{}/\"", s.b2)),
        "{log}"
    );
    let _ = s.b2;
}

#[test]
fn sni_is_sent_only_when_asked() {
    let s = start();
    let r = s.v.get("/sni/?name=backend.test");
    assert_eq!(r.status, 200);
    assert_eq!(seen(&r).0, "backend.test");
    let r = s.v.get("/sni/?name=other.test:8443");
    assert_eq!(seen(&r).0, "other.test", "the port is not part of the name");
    assert_eq!(seen(&s.v.get("/nosni/")).0, "", "SNI sent while off");
}

#[test]
fn keepalive_connections_keep_their_tls_session_and_sessions_resume() {
    let s = start();
    let conns: Vec<String> = (0..4).map(|_| seen(&s.v.get("/kept/")).2).collect();
    assert!(
        conns.iter().all(|c| *c == conns[0]),
        "one pooled connection should carry every request: {conns:?}"
    );
    // Without keepalive each request connects anew, resuming the session.
    let first = seen(&s.v.get("/resumed/"));
    let second = seen(&s.v.get("/resumed/"));
    assert_ne!(first.2, second.2, "not a new connection");
    assert_eq!(first.1, ".");
    assert_eq!(second.1, "r", "session not resumed");
    // proxy_ssl_session_reuse off: never resumed.
    seen(&s.v.get("/plain/"));
    assert_eq!(seen(&s.v.get("/plain/")).1, ".");
    let _ = (s.b1, s.b3);
}

#[test]
fn configuration_errors_name_the_line() {
    let dir = TempDir::new("proxy-ssl-conf");
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n  server {\n    listen 127.0.0.1:1;\n    location / {\n      proxy_pass https://127.0.0.1:1;\n      proxy_ssl_trusted_certificate missing.crt;\n    }\n  }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("missing.crt") && err.contains(":7"), "{err}");
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n  proxy_ssl_conf_command Options PrioritizeChaCha;\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"proxy_ssl_conf_command Options PrioritizeChaCha\" is not supported")
            && err.contains(":3"),
        "{err}"
    );
}

/// nginx, when installed, as a backend that asks for a client certificate.
struct Nginx {
    _child: Daemon,
    _dir: TempDir,
}

#[test]
fn an_nginx_backend_gets_the_client_certificate_and_requests_without_delay() {
    if !std::path::Path::new("/usr/sbin/nginx").exists() {
        eprintln!("skipped: no /usr/sbin/nginx");
        return;
    }
    let dir = TempDir::new("proxy-ssl-nginx");
    certs(&dir);
    let port = free_port();
    let conf = format!(
        "  server {{\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate {d}/good.crt;\n    ssl_certificate_key {d}/good.key;\n    ssl_verify_client optional;\n    ssl_client_certificate {d}/ca.crt;\n    location / {{ return 200 \"verify=$ssl_client_verify dn=$ssl_client_s_dn\\n\"; }}\n  }}\n",
        d = dir.path().display()
    );
    let child = nginx_backend(&dir, &conf);
    let nd = dir.path().display().to_string();
    let _nginx = Nginx {
        _child: child,
        _dir: dir,
    };
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "nginx did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The client's certificate and key are the backend folder's (its CA signed them).
    let v = Vireo::start_in(
        TempDir::new("proxy-ssl-front"),
        &format!(
            "error_log {{dir}}/logs/error.log info;\nevents {{}}\nhttp {{\n  server {{\n    listen 127.0.0.1:{{port}};\n    location /cert/ {{\n      proxy_pass https://127.0.0.1:{port}/;\n      proxy_ssl_certificate {nd}/$arg_who.crt;\n      proxy_ssl_certificate_key {nd}/$arg_who.key;\n      proxy_ssl_password_file {nd}/passwords;\n    }}\n    location /none/ {{ proxy_pass https://127.0.0.1:{port}/; }}\n    location /command/ {{\n      proxy_pass https://127.0.0.1:{port}/;\n      proxy_ssl_certificate {nd}/stranger.crt;\n      proxy_ssl_certificate_key {nd}/stranger.key;\n      proxy_ssl_conf_command Certificate {nd}/client.crt;\n      proxy_ssl_conf_command PrivateKey {nd}/client.key;\n      proxy_ssl_conf_command Options NoRenegotiation;\n    }}\n  }}\n}}\n"
        ),
    );
    let r = v.get("/cert/?who=client");
    assert_eq!(r.status, 200, "{}", error_log(&v));
    assert_eq!(r.text(), "verify=SUCCESS dn=CN=client\n");
    assert_eq!(v.get("/none/").text(), "verify=NONE dn=\n");
    // proxy_ssl_conf_command's pair is presented instead of proxy_ssl_certificate's.
    let r = v.get("/command/");
    assert_eq!(
        r.text(),
        "verify=SUCCESS dn=CN=client\n",
        "{}",
        error_log(&v)
    );
    // An encrypted key, opened by the second password of the file.
    let r = v.get("/cert/?who=enc");
    assert_eq!(r.text(), "verify=SUCCESS dn=CN=enc\n", "{}", error_log(&v));
    // A certificate the backend's CA did not sign: nginx refuses it (400).
    assert_eq!(v.get("/cert/?who=stranger").status, 400);
    // A new connection's request follows the handshake's last flight with
    // no read between: held back by Nagle's algorithm it would wait for
    // nginx's delayed ACK, 40 ms per request.
    let mut took: Vec<Duration> = (0..9)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(v.get("/none/").status, 200);
            t.elapsed()
        })
        .collect();
    took.sort();
    assert!(took[4] < Duration::from_millis(30), "{took:?}");
}

/// A TLS backend (rustls) that answers one request with 101 and then sends
/// back what it gets, upper-cased.
fn upgrading_backend(dir: &TempDir) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::io::{Read, Write};
    let chain = CertificateDer::pem_file_iter(dir.path().join("good.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.path().join("good.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (tcp, _) = l.accept().unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let conn = rustls::ServerConnection::new(std::sync::Arc::new(config)).unwrap();
        let mut s = rustls::StreamOwned::new(conn, tcp);
        let Some(head) = read_head(&mut s) else {
            return;
        };
        assert!(String::from_utf8_lossy(&head).contains("Upgrade: websocket"));
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if s.write_all(&buf[..n].to_ascii_uppercase()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    port
}

#[test]
fn websocket_upgrade_through_a_tls_upstream() {
    use std::io::{Read, Write};
    let dir = TempDir::new("proxy-ssl-ws");
    certs(&dir);
    let port = upgrading_backend(&dir);
    let v = Vireo::start_in(
        dir,
        &format!(
            "error_log {{dir}}/logs/error.log info;\nevents {{}}\nhttp {{\n  server {{\n    listen 127.0.0.1:{{port}};\n    location /ws/ {{\n      proxy_pass https://127.0.0.1:{port}/;\n      proxy_http_version 1.1;\n      proxy_set_header Upgrade $http_upgrade;\n      proxy_set_header Connection upgrade;\n      proxy_ssl_verify on;\n      proxy_ssl_trusted_certificate ca.crt;\n      proxy_ssl_name backend.test;\n    }}\n  }}\n}}\n"
        ),
    );
    let mut c = v.connect();
    c.write_all(
        b"GET /ws/ HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    )
    .unwrap();
    let head = read_head(&mut c).unwrap_or_else(|| panic!("{}", error_log(&v)));
    assert!(
        head.starts_with(b"HTTP/1.1 101"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    for word in ["hello", "through tls"] {
        c.write_all(word.as_bytes()).unwrap();
        let mut got = vec![0u8; word.len()];
        c.read_exact(&mut got).unwrap();
        assert_eq!(got, word.to_ascii_uppercase().as_bytes());
    }
}
