//! HTTP/2 conformance: h2spec (installed by scripts/test into target/tools)
//! against a cleartext `http2` listener and over TLS (ALPN h2).
//!
//! Every case passes on both. On the cleartext address, which also serves
//! HTTP/1 (as nginx ≥ 1.25.1 does), "3.5/2 Sends invalid connection preface"
//! passes because a first line that is not HTTP/1 at all is taken for a broken
//! preface and the connection closed without an HTTP/1 answer. See
//! docs/http2.md.

mod common;
use common::*;
use std::path::PathBuf;
use std::process::Command;

fn h2spec() -> Option<PathBuf> {
    let local = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/tools/h2spec"));
    if local.exists() {
        return Some(local);
    }
    let on_path = Command::new("h2spec").arg("--version").output().is_ok();
    if !on_path {
        eprintln!("SKIP: h2spec is not installed (scripts/test installs it into target/tools)");
    }
    on_path.then(|| PathBuf::from("h2spec"))
}

/// Run h2spec against `v` (`tls`: over TLS, certificate not verified) and
/// check that every case passes.
fn check(bin: &PathBuf, v: &Vireo, tls: bool) {
    let report = v
        .dir
        .path()
        .join(if tls { "h2spec-tls.xml" } else { "h2spec.xml" });
    let mut cmd = Command::new("timeout");
    cmd.args(["300"])
        .arg(bin)
        .args(["-h", "127.0.0.1", "-p", &v.port.to_string(), "-o", "5"]);
    if tls {
        cmd.args(["-t", "-k"]);
    }
    let out = cmd.arg("-j").arg(&report).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains("tests,"))
        .unwrap_or_else(|| panic!("no h2spec summary:\n{text}"));
    let xml = std::fs::read_to_string(&report).unwrap();
    // Each failing case: <testcase package="http2/3.5" classname="…" …><error>…
    let failed: Vec<String> = xml
        .split("<testcase ")
        .skip(1)
        .filter(|c| c.contains("<failure") || c.contains("<error"))
        .map(|c| {
            let attr = |name: &str| {
                c.split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or("")
                    .to_string()
            };
            format!("{} {}", attr("package"), attr("classname"))
        })
        .collect();
    assert!(failed.is_empty(), "{summary}\nfailures: {failed:?}\n{text}");
    assert!(summary.contains("145 tests"), "{summary}");
}

#[test]
fn h2spec_cleartext() {
    let Some(bin) = h2spec() else { return };
    let dir = TempDir::new("h2spec");
    dir.write("html/index.html", "hello\n");
    let v = Vireo::start_in(
        dir,
        "events {} http { access_log off; server { listen 127.0.0.1:{port}; http2 on; root {dir}/html; } }",
    );
    check(&bin, &v, false);
}

/// Over TLS ALPN chose HTTP/2, so every case applies, the preface one too.
#[test]
fn h2spec_tls() {
    let Some(bin) = h2spec() else { return };
    let dir = TempDir::new("h2spec-tls");
    dir.write("html/index.html", "hello\n");
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "30", "-newkey", "ec"])
        .args(["-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args([
            "-keyout",
            "k.pem",
            "-out",
            "c.pem",
            "-subj",
            "/CN=localhost",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v = Vireo::start_in(
        dir,
        "events {} http { access_log off; server { listen 127.0.0.1:{port} ssl; http2 on; ssl_certificate c.pem; ssl_certificate_key k.pem; root {dir}/html; } }",
    );
    check(&bin, &v, true);
}
