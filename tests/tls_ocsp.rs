//! OCSP: stapling responses asked of a responder (`ssl_stapling`,
//! `ssl_stapling_responder`, `ssl_stapling_verify`) and client certificates
//! checked with OCSP (`ssl_ocsp`, `ssl_ocsp_responder`, `ssl_ocsp_cache`).
//! The responder is a real `openssl ocsp` on loopback; certificates are made
//! by `openssl ca`; the clients are `openssl s_client` and curl.

mod common;
use common::*;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A CA whose certificates name the responder at `ocsp_port`: the server's
/// (`server`), a revoked server's (`bad`), a client's (`client`), a revoked
/// client's (`revoked`); a self-signed stranger responder key (`rogue`).
fn pki(dir: &TempDir, ocsp_port: u16) {
    dir.write(
        "ca.conf",
        format!(
            "[ ca ]\ndefault_ca = myca\n[ myca ]\nnew_certs_dir = {d}\ndatabase = {d}/certindex\ndefault_md = sha256\npolicy = myca_policy\nserial = {d}/certserial\ndefault_days = 3\nx509_extensions = ext\n[ myca_policy ]\ncommonName = supplied\n[ ext ]\nbasicConstraints = critical,CA:FALSE\nauthorityInfoAccess = OCSP;URI:http://127.0.0.1:{ocsp_port}\n",
            d = dir.path().display()
        ),
    );
    dir.write("certserial", "1000");
    dir.write("certindex", "");
    for (name, ca) in [("ca", true), ("rogue", true)] {
        let subj = format!("/CN={name}");
        let mut args = vec![
            "req", "-x509", "-nodes", "-days", "30", "-newkey", "rsa:2048", "-subj", &subj,
        ];
        let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
        args.extend(["-keyout", &key, "-out", &crt]);
        if ca {
            args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        }
        openssl(dir, &args);
    }
    for name in ["server", "bad", "client", "revoked"] {
        let subj = format!("/CN={name}");
        let (key, csr, crt) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(
            dir,
            &[
                "req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", &key, "-out", &csr,
                "-subj", &subj,
            ],
        );
        openssl(
            dir,
            &[
                "ca", "-batch", "-config", "ca.conf", "-keyfile", "ca.key", "-cert", "ca.crt",
                "-subj", &subj, "-in", &csr, "-out", &crt,
            ],
        );
    }
    for name in ["bad.crt", "revoked.crt"] {
        openssl(
            dir,
            &[
                "ca", "-config", "ca.conf", "-keyfile", "ca.key", "-cert", "ca.crt", "-revoke",
                name,
            ],
        );
    }
}

/// `openssl ocsp` answering on `port` with responses signed by `signer`.
struct Responder(Child);

impl Responder {
    fn start(dir: &TempDir, port: u16, signer: &str) -> Responder {
        let child = Command::new("openssl")
            .args([
                "ocsp",
                "-index",
                "certindex",
                "-CA",
                "ca.crt",
                "-ndays",
                "1",
            ])
            .args(["-rsigner", &format!("{signer}.crt")])
            .args(["-rkey", &format!("{signer}.key")])
            .args(["-port", &port.to_string()])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.path().join("ocsp.log")).expect("ocsp.log"))
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl ocsp");
        // It says ACCEPT once listening (a probe connection would hold it:
        // it serves one connection at a time).
        assert!(
            eventually(10, || dir.read("ocsp.log").contains("ACCEPT")),
            "the responder did not start"
        );
        Responder(child)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What `openssl s_client -status` says of the stapled response.
fn staple(v: &Vireo) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-status", "-connect"])
        .arg(format!("127.0.0.1:{}", v.port))
        .args(["-servername", "localhost"])
        .stdin(Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if text.contains("OCSP response: no response sent") {
        return "none".into();
    }
    match text.find("Cert Status: ") {
        Some(i) => text[i + 13..].lines().next().unwrap_or("").to_string(),
        None => text,
    }
}

const STAPLING: &str = "error_log logs/error.log info;\nevents {}\nhttp {\n  access_log off;\n  server {\n    listen 127.0.0.1:{port} ssl;\n    ssl_certificate CERT.crt;\n    ssl_certificate_key CERT.key;\n    ssl_stapling on;\n    ssl_trusted_certificate ca.crt;\n    EXTRA\n    location / { return 200 ok; }\n  }\n}\n";

fn stapling(cert: &str, extra: &str, signer: &str) -> (Vireo, Responder) {
    let dir = TempDir::new("ocsp-staple");
    let port = free_port();
    pki(&dir, port);
    let r = Responder::start(&dir, port, signer);
    let conf = STAPLING.replace("CERT", cert).replace("EXTRA", extra);
    (Vireo::start_in(dir, &conf), r)
}

/// Handshakes until one staples (the first asks the responder).
fn stapled(v: &Vireo) -> String {
    let mut last = String::new();
    eventually(15, || {
        last = staple(v);
        last != "none"
    });
    last
}

#[test]
fn a_good_response_is_fetched_then_stapled() {
    let (v, _r) = stapling("server", "ssl_stapling_verify on;", "ca");
    assert_eq!(stapled(&v), "good", "{}", error_log(&v));
    // Kept: more handshakes staple it without asking again.
    assert_eq!(staple(&v), "good");
}

#[test]
fn a_revoked_certificate_staples_nothing() {
    let (v, _r) = stapling("bad", "", "ca");
    staple(&v);
    assert!(
        eventually(10, || error_log(&v)
            .contains("certificate status \"revoked\" in the OCSP response")),
        "{}",
        error_log(&v)
    );
    assert_eq!(staple(&v), "none");
}

#[test]
fn stapling_verify_refuses_a_response_the_issuer_did_not_sign() {
    let (v, _r) = stapling("server", "ssl_stapling_verify on;", "rogue");
    staple(&v);
    assert!(
        eventually(10, || error_log(&v).contains("OCSP_basic_verify() failed")),
        "{}",
        error_log(&v)
    );
    assert_eq!(staple(&v), "none");
    // Without verification the same response is stapled.
    let (v, _r) = stapling("server", "", "rogue");
    assert_eq!(stapled(&v), "good");
}

#[test]
fn stapling_responder_replaces_the_certificates_own() {
    let dir = TempDir::new("ocsp-responder");
    let (named, real) = (free_port(), free_port());
    // The certificate names a port nobody answers on.
    pki(&dir, named);
    let _r = Responder::start(&dir, real, "ca");
    let conf = STAPLING.replace("CERT", "server").replace(
        "EXTRA",
        &format!("ssl_stapling_responder http://127.0.0.1:{real}/;"),
    );
    let v = Vireo::start_in(dir, &conf);
    assert_eq!(stapled(&v), "good");
}

const CLIENTS: &str = "error_log logs/error.log info;\nevents {}\nhttp {\n  access_log off;\n  ssl_certificate server.crt;\n  ssl_certificate_key server.key;\n  add_header X-Verify $ssl_client_verify always;\n  server {\n    listen 127.0.0.1:{port} ssl;\n    ssl_verify_client on;\n    ssl_client_certificate ca.crt;\n    ssl_ocsp on;\n    EXTRA\n    location / { return 200 ok; }\n  }\n}\n";

/// curl with a client certificate: status line, headers, body.
fn get(v: &Vireo, cert: &str) -> String {
    let out = Command::new("curl")
        .args(["-sik", "--max-time", "20", "--cert"])
        .arg(format!("{cert}.crt"))
        .arg("--key")
        .arg(format!("{cert}.key"))
        .arg(format!("https://127.0.0.1:{}/", v.port))
        .current_dir(v.dir.path())
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn clients(extra: &str) -> (Vireo, Option<Responder>, u16) {
    let dir = TempDir::new("ocsp-client");
    let port = free_port();
    pki(&dir, port);
    let r = Responder::start(&dir, port, "ca");
    (
        Vireo::start_in(dir, &CLIENTS.replace("EXTRA", extra)),
        Some(r),
        port,
    )
}

#[test]
fn client_certificates_are_checked_with_ocsp() {
    let (v, _r, _) = clients("");
    let r = get(&v, "client");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("X-Verify: SUCCESS"), "{r}");
    let r = get(&v, "revoked");
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(r.contains("X-Verify: FAILED:certificate revoked"), "{r}");
    assert!(r.contains("The SSL certificate error"), "{r}");
}

#[test]
fn an_unanswered_request_fails_the_certificate() {
    let closed = closed_port();
    let (v, _r, _) = clients(&format!("ssl_ocsp_responder http://127.0.0.1:{closed};"));
    let r = get(&v, "client");
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(
        r.contains("X-Verify: FAILED:certificate status request failed"),
        "{r}"
    );
    assert!(
        error_log(&v).contains("connect() failed"),
        "{}",
        error_log(&v)
    );
}

#[test]
fn ocsp_cache_answers_without_the_responder() {
    let (v, mut r, _) = clients("ssl_ocsp_cache shared:OCSP:1m;");
    let ok = get(&v, "client");
    assert!(ok.contains("X-Verify: SUCCESS"), "{ok}");
    drop(r.take());
    std::thread::sleep(Duration::from_millis(100));
    let ok = get(&v, "client");
    assert!(ok.contains("X-Verify: SUCCESS"), "{ok}");
    // Without a cache the next handshake asks again, and fails.
    let (v, mut r, _) = clients("");
    assert!(get(&v, "client").contains("X-Verify: SUCCESS"));
    drop(r.take());
    std::thread::sleep(Duration::from_millis(100));
    let failed = get(&v, "client");
    assert!(
        failed.contains("X-Verify: FAILED:certificate status request failed"),
        "{failed}"
    );
}

#[test]
fn ocsp_directive_errors_name_file_and_line() {
    let dir = TempDir::new("ocsp-conf");
    pki(&dir, 1);
    let conf = |extra: &str| {
        format!(
            "events {{}}\nhttp {{\n  server {{\n    listen 127.0.0.1:1 ssl;\n    ssl_certificate server.crt;\n    ssl_certificate_key server.key;\n    {extra}\n  }}\n}}\n"
        )
    };
    let t = dir.path().join("t.conf").display().to_string();
    for (extra, want) in [
        (
            "ssl_stapling_responder https://127.0.0.1/;",
            "invalid URL prefix in OCSP responder \"https://127.0.0.1/\"",
        ),
        (
            "ssl_ocsp_responder ftp://x/;",
            "invalid URL prefix in OCSP responder \"ftp://x/\"",
        ),
        (
            "ssl_ocsp_cache shared:OCSP;",
            "invalid ssl_ocsp_cache \"shared:OCSP\"",
        ),
        ("ssl_ocsp maybe;", "invalid parameter \"maybe\""),
        (
            "ssl_verify_client optional_no_ca; ssl_ocsp on;",
            "\"ssl_ocsp\" is incompatible with \"ssl_verify_client optional_no_ca\"",
        ),
    ] {
        let out = test_conf(&dir, &conf(extra));
        assert!(!out.status.success(), "{extra}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{extra}: {err}");
        assert!(err.contains(&format!("in {t}:7")), "{extra}: {err}");
    }
    for ok in [
        "ssl_stapling on; ssl_stapling_verify on; ssl_stapling_responder http://127.0.0.1:1/;",
        "ssl_verify_client on; ssl_client_certificate ca.crt; ssl_ocsp leaf; ssl_ocsp_cache off;",
    ] {
        let out = test_conf(&dir, &conf(ok));
        assert!(
            out.status.success(),
            "{ok}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
