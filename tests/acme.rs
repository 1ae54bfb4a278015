//! ACME end to end against Pebble, Let's Encrypt's ACME test server, on
//! loopback: certificates obtained with http-01 (answered by vireo's own
//! listener), tls-alpn-01 (by its TLS listener) and dns-01 (RFC 2136
//! updates with TSIG to Debian's BIND, which Pebble asks for the records:
//! pebble-challtestsrv, its DNS for the other tests, takes no updates),
//! served through `$acme_certificate` and checked by curl against Pebble's
//! root; renewal through each challenge type without a dropped request; the
//! state reused after a restart; External Account Binding and certificate
//! profiles (Pebble's own); errors logged with back-off. scripts/test installs Pebble and
//! pebble-challtestsrv (Go) into target/tools, and bind9; the tests skip
//! with a message without them.

mod common;
use common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PEBBLE_VERSION: &str = "v2.10.1";

/// A Go tool scripts/test installs into target/tools (else on PATH or in
/// Go's bin folder).
fn tool(name: &str) -> Option<PathBuf> {
    let local = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/tools")).join(name);
    if local.exists() {
        return Some(local);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let gopath = PathBuf::from(home).join("go/bin").join(name);
    if gopath.exists() {
        return Some(gopath);
    }
    let which = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()?;
    let p = String::from_utf8_lossy(&which.stdout).trim().to_string();
    (!p.is_empty()).then(|| PathBuf::from(p))
}

/// Pebble's test certificates (its ACME server's own, and the CA that
/// signs it), from Go's module cache.
fn pebble_certs() -> Option<PathBuf> {
    let out = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .ok()?;
    let cache = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let dir = PathBuf::from(cache)
        .join(format!("github.com/letsencrypt/pebble/v2@{PEBBLE_VERSION}"))
        .join("test/certs");
    dir.join("pebble.minica.pem").exists().then_some(dir)
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Pebble on loopback validating on `http_port`/`tls_port`, asking
/// `dns_port` for names; its certificates valid `validity` seconds.
struct Pebble {
    _pebble: Daemon,
    _challtestsrv: Option<Daemon>,
    dir: TempDir,
    acme: u16,
    mgmt: u16,
    certs: PathBuf,
}

impl Pebble {
    /// `dns`: the DNS server Pebble asks; `None` starts
    /// pebble-challtestsrv, which answers 127.0.0.1 for every name.
    fn start(
        http_port: u16,
        tls_port: u16,
        dns: Option<u16>,
        validity: u64,
        more: &More,
    ) -> Option<Pebble> {
        let (Some(pebble), Some(certs)) = (tool("pebble"), pebble_certs()) else {
            eprintln!(
                "SKIP: Pebble is not installed (scripts/test: go install github.com/letsencrypt/pebble/v2/cmd/pebble@{PEBBLE_VERSION})"
            );
            return None;
        };
        let challtestsrv = match dns {
            Some(_) => None,
            None => {
                let Some(bin) = tool("pebble-challtestsrv") else {
                    eprintln!(
                        "SKIP: pebble-challtestsrv is not installed (scripts/test installs it)"
                    );
                    return None;
                };
                let (port, mgmt) = (free_port(), free_port());
                let child = Command::new(bin)
                    .args(["-dnsserver", &format!("127.0.0.1:{port}")])
                    .args(["-management", &format!("127.0.0.1:{mgmt}")])
                    .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
                    .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .ok()?;
                let p = Daemon(child);
                assert!(
                    eventually(10, || listening(mgmt)),
                    "challtestsrv did not start"
                );
                Some((p, port))
            }
        };
        let dns_port = dns.unwrap_or_else(|| challtestsrv.as_ref().unwrap().1);
        let dir = TempDir::new("pebble");
        let (acme, mgmt) = (free_port(), free_port());
        let config = serde_json_text(acme, mgmt, http_port, tls_port, &certs, validity, more);
        let conf = dir.write("pebble.json", config);
        let child = Command::new(pebble)
            .args(["-config", &conf.display().to_string()])
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .env("PEBBLE_ALTERNATE_ROOTS", more.alternate_roots.to_string())
            .stdout(std::fs::File::create(dir.path().join("pebble.log")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble");
        let p = Daemon(child);
        assert!(eventually(10, || listening(acme)), "pebble did not start");
        Some(Pebble {
            _pebble: p,
            _challtestsrv: challtestsrv.map(|(p, _)| p),
            dir,
            acme,
            mgmt,
            certs,
        })
    }

    fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.acme)
    }

    /// The CA that verifies Pebble's ACME server.
    fn minica(&self) -> String {
        self.certs.join("pebble.minica.pem").display().to_string()
    }

    /// The root the certificates Pebble issues chain to (a file).
    fn root(&self) -> PathBuf {
        self.root_of(0)
    }

    /// The root of Pebble's chain `i` (0: the default one; the others with
    /// `PEBBLE_ALTERNATE_ROOTS`), a file.
    fn root_of(&self, i: usize) -> PathBuf {
        let path = self.dir.path().join(format!("root{i}.pem"));
        if !path.exists() {
            let out = Command::new("curl")
                .args(["-sf", "--cacert", &self.minica()])
                .arg(format!("https://127.0.0.1:{}/roots/{i}", self.mgmt))
                .output()
                .expect("curl");
            assert!(out.status.success(), "no root {i} from pebble");
            std::fs::write(&path, out.stdout).unwrap();
        }
        path
    }
}

fn serde_json_text(
    acme: u16,
    mgmt: u16,
    http: u16,
    tls: u16,
    certs: &std::path::Path,
    validity: u64,
    more: &More,
) -> String {
    let eab = match more.eab {
        Some((kid, key)) => format!(
            r#""externalAccountBindingRequired": true, "externalAccountMACKeys": {{"{kid}": "{key}"}}"#
        ),
        None => r#""externalAccountBindingRequired": false"#.to_string(),
    };
    let profile = more.profile.map_or(String::new(), |(name, secs)| {
        format!(r#", "{name}": {{"description": "other", "validityPeriod": {secs}}}"#)
    });
    format!(
        r#"{{"pebble": {{
  "listenAddress": "127.0.0.1:{acme}",
  "managementListenAddress": "127.0.0.1:{mgmt}",
  "certificate": "{c}/localhost/cert.pem",
  "privateKey": "{c}/localhost/key.pem",
  "httpPort": {http},
  "tlsPort": {tls},
  "ocspResponderURL": "",
  {eab},
  "retryAfter": {{"authz": 1, "order": 1}},
  "keyAlgorithm": "ecdsa",
  "profiles": {{"default": {{"description": "test", "validityPeriod": {validity}}}{profile}}}
}}}}"#,
        c = certs.display()
    )
}

/// A vireo with an ACME issuer for Pebble: `{port}` for readiness, the
/// HTTP-01 listener on `http`, the TLS one on `tls`; `issuer` and
/// `certificate` are the lines added to the issuer block and the TLS
/// server.
fn vireo(
    dir: TempDir,
    p: &Pebble,
    ports: (u16, u16),
    state: &std::path::Path,
    issuer: &str,
    certificate: &str,
) -> Vireo {
    let conf = format!(
        "error_log {{dir}}/logs/error.log info;
events {{}}
http {{
    access_log off;
    acme_issuer pebble {{
        uri {uri};
        ssl_trusted_certificate {minica};
        contact admin@example.test;
        state_path {state};
        {issuer}
    }}
    server {{
        listen 127.0.0.1:{{port}};
        listen 127.0.0.1:{http};
        server_name a.example.test;
        location / {{ return 404; }}
    }}
    server {{
        listen 127.0.0.1:{tls} ssl;
        server_name a.example.test b.example.test;
        {certificate}
        ssl_certificate $acme_certificate;
        ssl_certificate_key $acme_certificate_key;
        location / {{ return 200 \"hello $ssl_server_name\\n\"; }}
    }}
}}
",
        uri = p.directory(),
        minica = p.minica(),
        state = state.display(),
        http = ports.0,
        tls = ports.1,
    );
    Vireo::start_in(dir, &conf)
}

/// GET https://NAME:PORT/ verified against `root`: the body, or why not.
fn fetch(name: &str, port: u16, root: &std::path::Path) -> Result<String, String> {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "--cacert",
            &root.display().to_string(),
        ])
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}/"))
        .output()
        .expect("curl");
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// The serial number of the certificate served for `name`.
fn served_serial(name: &str, port: u16) -> String {
    let s = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-servername",
            name,
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("openssl");
    let mut x = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    x.stdin.take().unwrap().write_all(&s.stdout).unwrap();
    let out = x.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("serial=")
        .to_ascii_lowercase()
}

/// Wait until the certificate for `name` is served and verifies.
fn wait_issued(v: &Vireo, name: &str, port: u16, root: &std::path::Path) -> String {
    let mut last = String::new();
    let ok = eventually(90, || match fetch(name, port, root) {
        Ok(body) => {
            last = body;
            true
        }
        Err(e) => {
            last = e;
            std::thread::sleep(Duration::from_millis(300));
            false
        }
    });
    assert!(ok, "no certificate for {name}: {last}\n{}", error_log(v));
    last
}

/// Everything one challenge type's test needs.
struct Setup {
    p: Pebble,
    ports: (u16, u16),
    state: TempDir,
}

/// What a Pebble is started with beyond the default profile: an external
/// account it requires (key id, base64url MAC key), another profile (name,
/// validity in seconds), chains to other roots beside the default one.
#[derive(Default)]
struct More {
    eab: Option<(&'static str, &'static str)>,
    profile: Option<(&'static str, u64)>,
    alternate_roots: usize,
}

fn setup(dns: Option<u16>, validity: u64) -> Option<Setup> {
    setup_with(dns, validity, &More::default())
}

fn setup_with(dns: Option<u16>, validity: u64, more: &More) -> Option<Setup> {
    let ports = (free_port(), free_port());
    let p = Pebble::start(ports.0, ports.1, dns, validity, more)?;
    Some(Setup {
        p,
        ports,
        state: TempDir::new("acme-state"),
    })
}

#[test]
fn http01_issues_serves_and_is_reused_after_a_restart() {
    let Some(s) = setup(None, 7_776_000) else {
        return;
    };
    let state = s.state.path().join("pebble");
    let issuer = "accept_terms_of_service;";
    let cert = "acme_certificate pebble;";
    let v = vireo(TempDir::new("acme"), &s.p, s.ports, &state, issuer, cert);
    let root = s.p.root();
    assert_eq!(
        wait_issued(&v, "a.example.test", s.ports.1, &root),
        "hello a.example.test\n"
    );
    // Both server names are on it.
    assert_eq!(
        fetch("b.example.test", s.ports.1, &root).unwrap(),
        "hello b.example.test\n"
    );
    let log = error_log(&v);
    for step in [
        "registering an account at",
        "account https://",
        "ordering a certificate for a.example.test, b.example.test (ecdsa:256 key)",
        "http-01 challenge \"",
        "names validated, finalizing",
        "issued and installed: serial",
        "the issuer's renewal window is",
    ] {
        assert!(
            eventually(5, || error_log(&v).contains(step)),
            "{step}:\n{log}"
        );
    }
    let serial = served_serial("a.example.test", s.ports.1);
    assert!(!serial.is_empty());
    // Kept: the account and the pair, the key private.
    use std::os::unix::fs::PermissionsExt;
    let key = std::fs::metadata(state.join("a.example.test.key")).unwrap();
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
    assert!(state.join("a.example.test.crt").exists());
    assert!(state.join("account.json").exists());
    drop(v);

    // A restart serves the kept certificate at once, orders nothing and
    // uses the kept account.
    let v = vireo(TempDir::new("acme"), &s.p, s.ports, &state, issuer, cert);
    assert_eq!(
        fetch("a.example.test", s.ports.1, &root).unwrap(),
        "hello a.example.test\n"
    );
    assert_eq!(served_serial("a.example.test", s.ports.1), serial);
    assert!(eventually(10, || error_log(&v)
        .contains("the issuer's renewal window is")));
    let log = error_log(&v);
    assert!(log.contains("loaded from"), "{log}");
    assert!(log.contains("loaded from state"), "{log}");
    assert!(!log.contains("ordering"), "{log}");
}

#[test]
fn tls_alpn01_issues_on_the_tls_listener() {
    let Some(s) = setup(None, 7_776_000) else {
        return;
    };
    let state = s.state.path().join("pebble");
    let v = vireo(
        TempDir::new("acme"),
        &s.p,
        s.ports,
        &state,
        "accept_terms_of_service; challenge tls-alpn-01;",
        "acme_certificate pebble a.example.test;",
    );
    let root = s.p.root();
    assert_eq!(
        wait_issued(&v, "a.example.test", s.ports.1, &root),
        "hello a.example.test\n"
    );
    let log = error_log(&v);
    assert!(log.contains("with tls-alpn-01 challenges"), "{log}");
    assert!(
        log.contains("acme: tls-alpn-01 challenge answered"),
        "{log}"
    );
    assert!(!log.contains("acme: http-01 challenge"), "{log}");
    // A reload keeps the certificate: nothing is ordered again.
    let serial = served_serial("a.example.test", s.ports.1);
    v.signal(libc::SIGHUP);
    assert!(eventually(10, || error_log(&v).contains("configuration reloaded")));
    assert_eq!(served_serial("a.example.test", s.ports.1), serial);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        error_log(&v).matches("ordering").count(),
        1,
        "{}",
        error_log(&v)
    );
}

/// Debian's BIND, authoritative for example.test on a free loopback port,
/// taking updates signed with `key`.
fn named(dir: &TempDir, key: &str) -> Option<(Daemon, u16)> {
    let bin = ["/usr/sbin/named", "/usr/bin/named"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(bin) = bin else {
        eprintln!("SKIP: BIND (named) is not installed (scripts/test installs bind9)");
        return None;
    };
    let port = free_port();
    let d = dir.path().display().to_string();
    dir.write(
        "example.test.zone",
        "$TTL 60\n@ IN SOA ns.example.test. admin.example.test. 1 60 60 600 60\n@ IN NS ns.example.test.\nns IN A 127.0.0.1\n",
    );
    dir.write("vireo.key", key);
    dir.write(
        "named.conf",
        format!(
            "options {{\n  directory \"{d}\";\n  listen-on port {port} {{ 127.0.0.1; }};\n  listen-on-v6 {{ none; }};\n  pid-file \"{d}/named.pid\";\n  session-keyfile \"{d}/session.key\";\n  recursion no;\n  dnssec-validation no;\n}};\ncontrols {{ }};\ninclude \"{d}/vireo.key\";\nzone \"example.test\" {{\n  type primary;\n  file \"{d}/example.test.zone\";\n  allow-update {{ key \"vireo-key\"; }};\n}};\n"
        ),
    );
    let child = Command::new(bin)
        .args(["-g", "-c", &format!("{d}/named.conf")])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("named.log")).unwrap())
        .spawn()
        .ok()?;
    let p = Daemon(child);
    assert!(
        eventually(10, || listening(port)),
        "named did not start: {}",
        dir.read("named.log")
    );
    Some((p, port))
}

#[test]
fn dns01_through_rfc2136_updates_with_tsig() {
    let bind = TempDir::new("named");
    let key = "key \"vireo-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"dmlyZW8tdGVzdC1zZWNyZXQtZm9yLXRzaWctMzJieXRlcw==\";\n};\n";
    let Some((_named, dns)) = named(&bind, key) else {
        return;
    };
    let Some(s) = setup(Some(dns), 7_776_000) else {
        return;
    };
    let state = s.state.path().join("pebble");
    let issuer = format!(
        "accept_terms_of_service; challenge dns-01; dns_update 127.0.0.1:{dns} key={};",
        bind.path().join("vireo.key").display()
    );
    let v = vireo(
        TempDir::new("acme"),
        &s.p,
        s.ports,
        &state,
        &issuer,
        "acme_certificate pebble example.test *.example.test;",
    );
    let root = s.p.root();
    // The wildcard covers any name under it.
    assert_eq!(
        wait_issued(&v, "x.example.test", s.ports.1, &root),
        "hello x.example.test\n"
    );
    assert_eq!(
        fetch("example.test", s.ports.1, &root).unwrap(),
        "hello example.test\n"
    );
    let log = error_log(&v);
    assert!(
        log.contains("TXT record \"_acme-challenge.example.test\" added"),
        "{log}"
    );
    assert!(eventually(5, || error_log(&v).contains(
        "TXT record \"_acme-challenge.example.test\" removed"
    )));
    // BIND took the signed updates and the records are gone again.
    let named_log = bind.read("named.log");
    assert!(named_log.contains("signer \"vireo-key\""), "{named_log}");
    let dig = Command::new("dig")
        .args([
            "+short",
            "-p",
            &dns.to_string(),
            "@127.0.0.1",
            "TXT",
            "_acme-challenge.example.test",
        ])
        .output();
    if let Ok(out) = dig {
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "");
    }
}

#[test]
fn renewal_swaps_the_certificate_without_a_dropped_request() {
    renews_without_a_dropped_request("", None);
}

#[test]
fn renewal_through_tls_alpn_01() {
    renews_without_a_dropped_request("challenge tls-alpn-01;", None);
}

#[test]
fn renewal_through_dns_01() {
    let bind = TempDir::new("named");
    let key = "key \"vireo-key\" {\n\talgorithm hmac-sha256;\n\tsecret \"dmlyZW8tdGVzdC1zZWNyZXQtZm9yLXRzaWctMzJieXRlcw==\";\n};\n";
    let Some((_named, dns)) = named(&bind, key) else {
        return;
    };
    let update = format!(
        "challenge dns-01; dns_update 127.0.0.1:{dns} key={};",
        bind.path().join("vireo.key").display()
    );
    renews_without_a_dropped_request(&update, Some(dns));
}

/// A certificate obtained through the challenge `challenge` sets (with the
/// DNS server `dns` for dns-01) is renewed and swapped in while requests,
/// each on a new TLS connection, keep being answered.
fn renews_without_a_dropped_request(challenge: &str, dns: Option<u16>) {
    // Certificates valid 30 s: the issuer's renewal window spans their life.
    let Some(s) = setup(dns, 30) else { return };
    let state = s.state.path().join("pebble");
    let v = vireo(
        TempDir::new("acme"),
        &s.p,
        s.ports,
        &state,
        &format!("accept_terms_of_service; {challenge}"),
        "acme_certificate pebble a.example.test;",
    );
    let root = s.p.root();
    wait_issued(&v, "a.example.test", s.ports.1, &root);
    let first = served_serial("a.example.test", s.ports.1);
    // Requests all along, each on a new TLS connection, until the served
    // serial changes.
    let end = Instant::now() + Duration::from_secs(60);
    let (mut served, mut renewed) = (0, false);
    while Instant::now() < end {
        let out = Command::new("curl")
            .args(["-sS", "-k", "--max-time", "5"])
            .args([
                "--resolve",
                &format!("a.example.test:{}:127.0.0.1", s.ports.1),
            ])
            .args(["-w", "%{http_code}", "-o", "/dev/null"])
            .arg(format!("https://a.example.test:{}/", s.ports.1))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "200",
            "dropped: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        served += 1;
        if served % 10 == 0 && served_serial("a.example.test", s.ports.1) != first {
            renewed = true;
            break;
        }
    }
    assert!(renewed, "not renewed:\n{}", error_log(&v));
    let log = error_log(&v);
    assert!(log.contains("ordering a renewal of serial"), "{log}");
    // The issuer took the order as the old one's replacement (RFC 9773).
    assert!(!log.contains("refused the order as a replacement"), "{log}");
    assert!(log.contains("the issuer's renewal window is"), "{log}");
    // The new one verifies.
    assert_eq!(
        fetch("a.example.test", s.ports.1, &root).unwrap(),
        "hello a.example.test\n"
    );
}

#[test]
fn an_unreachable_issuer_is_retried_with_back_off() {
    let (http, tls) = (free_port(), free_port());
    let closed = closed_port();
    let state = TempDir::new("acme-state");
    let dir = TempDir::new("acme");
    let conf = format!(
        "error_log {{dir}}/logs/error.log info;
events {{}}
http {{
    acme_issuer down {{
        uri https://127.0.0.1:{closed}/dir;
        state_path {s};
        accept_terms_of_service;
    }}
    server {{ listen 127.0.0.1:{{port}}; listen 127.0.0.1:{http}; location / {{ return 200 \"plain\\n\"; }} }}
    server {{
        listen 127.0.0.1:{tls} ssl;
        server_name a.example.test;
        acme_certificate down;
        ssl_certificate $acme_certificate;
        ssl_certificate_key $acme_certificate_key;
    }}
}}
",
        s = state.path().display()
    );
    let v = Vireo::start_in(dir, &conf);
    assert!(
        eventually(20, || error_log(&v).contains("next try in 10s")),
        "{}",
        error_log(&v)
    );
    let log = error_log(&v);
    let first = log.find("next try in 5s").expect("first failure");
    assert!(first < log.find("next try in 10s").unwrap());
    assert!(
        log.contains("certificate \"a.example.test\" of acme_issuer \"down\" failed"),
        "{log}"
    );
    assert!(log.contains("Connection refused"), "{log}");
    // Meanwhile handshakes fail cleanly, saying why, and plain HTTP is served.
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "5"])
        .arg(format!("https://127.0.0.1:{tls}/"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(eventually(5, || error_log(&v)
        .contains("is empty (no certificate yet)")));
    assert_eq!(v.get("/").status, 200);
}

/// The error log once an order was refused and put off for the back-off's
/// first 60 s.
fn backed_off(v: &Vireo) -> String {
    assert!(
        eventually(20, || error_log(v).contains("next try in 60s")),
        "{}",
        error_log(v)
    );
    error_log(v)
}

#[test]
fn terms_not_accepted_are_logged_with_their_address() {
    let Some(s) = setup(None, 7_776_000) else {
        return;
    };
    let state = s.state.path().join("pebble");
    let v = vireo(
        TempDir::new("acme"),
        &s.p,
        s.ports,
        &state,
        "",
        "acme_certificate pebble a.example.test;",
    );
    let log = backed_off(&v);
    assert!(log.contains("terms of service (data:text/plain"), "{log}");
    assert!(log.contains("add \"accept_terms_of_service\""), "{log}");
    assert!(!state.join("account.json").exists());
}

/// Pebble's example external account: its key id and base64url MAC key.
const EAB: (&str, &str) = (
    "kid-1",
    "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W",
);

#[test]
fn external_account_binding_with_the_right_key_only() {
    let more = More {
        eab: Some(EAB),
        ..More::default()
    };
    let Some(s) = setup_with(None, 7_776_000, &more) else {
        return;
    };
    let keys = TempDir::new("eab");
    // A wrong MAC key: the account is refused, logged, tried again later.
    let wrong = keys.write(
        "wrong.key",
        "c29tZS1vdGhlci1rZXktdGhhdC1pcy1ub3QtcGViYmxlcw\n",
    );
    let state = s.state.path().join("wrong");
    let v = vireo(
        TempDir::new("acme"),
        &s.p,
        s.ports,
        &state,
        &format!(
            "accept_terms_of_service; external_account_key {} {};",
            EAB.0,
            wrong.display()
        ),
        "acme_certificate pebble a.example.test;",
    );
    let log = backed_off(&v);
    assert!(
        log.contains("(registering with external_account_key \"kid-1\")"),
        "{log}"
    );
    assert!(!log.contains("registered"), "{log}");
    assert!(!state.join("account.json").exists());
    drop(v);

    // The right one (as a file, base64url as Pebble's configuration has it).
    let right = keys.write("right.key", format!("{}\n", EAB.1));
    let state = s.state.path().join("right");
    let v = vireo(
        TempDir::new("acme"),
        &s.p,
        s.ports,
        &state,
        &format!(
            "accept_terms_of_service; external_account_key {} {};",
            EAB.0,
            right.display()
        ),
        "acme_certificate pebble a.example.test;",
    );
    wait_issued(&v, "a.example.test", s.ports.1, &s.p.root());
    let log = error_log(&v);
    assert!(
        log.contains("registered, bound to external account \"kid-1\""),
        "{log}"
    );
    assert!(state.join("account.json").exists());
}

/// The validity period of the certificate served for `name`, in seconds.
fn served_validity(name: &str, port: u16) -> i64 {
    let s = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", name])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("openssl");
    let mut x = Command::new("openssl")
        .args(["x509", "-noout", "-startdate", "-enddate"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    x.stdin.take().unwrap().write_all(&s.stdout).unwrap();
    let out = String::from_utf8(x.wait_with_output().unwrap().stdout).unwrap();
    let date = |key: &str| {
        let line = out.lines().find_map(|l| l.strip_prefix(key)).expect(key);
        chrono::NaiveDateTime::parse_from_str(line.trim(), "%b %e %H:%M:%S %Y GMT")
            .unwrap()
            .and_utc()
            .timestamp()
    };
    date("notAfter=") - date("notBefore=")
}

/// vireo with `issuer`'s lines in the issuer block and one name to manage,
/// a.example.test.
fn for_one_name(s: &Setup, state: &std::path::Path, issuer: &str) -> Vireo {
    vireo(
        TempDir::new("acme"),
        &s.p,
        s.ports,
        state,
        issuer,
        "acme_certificate pebble a.example.test;",
    )
}

#[test]
fn profile_orders_the_issuers_profile() {
    let more = More {
        profile: Some(("short", 3600)),
        ..More::default()
    };
    let Some(s) = setup_with(None, 7_776_000, &more) else {
        return;
    };
    let state = s.state.path().join("pebble");
    let start = |issuer: &str| for_one_name(&s, &state, issuer);
    // A profile the issuer does not offer: refused with `require`.
    let v = start("accept_terms_of_service; profile tiny require;");
    let log = backed_off(&v);
    assert!(
        log.contains("the issuer does not offer the profile \"tiny\" (\"profile tiny require\")"),
        "{log}"
    );
    assert!(!log.contains("ordering"), "{log}");
    drop(v);

    // The one it offers: the certificate has that profile's validity.
    let v = start("accept_terms_of_service; profile short;");
    wait_issued(&v, "a.example.test", s.ports.1, &s.p.root());
    let log = error_log(&v);
    assert!(
        log.contains("(ecdsa:256 key, profile \"short\") with http-01 challenges"),
        "{log}"
    );
    let validity = served_validity("a.example.test", s.ports.1);
    assert!((3598..=3600).contains(&validity), "{validity}");
    drop(v);

    // Without `require`, an unknown profile is left out of the order (which
    // Pebble then gives a profile of its choosing).
    std::fs::remove_dir_all(&state).unwrap();
    let v = start("accept_terms_of_service; profile tiny;");
    wait_issued(&v, "a.example.test", s.ports.1, &s.p.root());
    let log = error_log(&v);
    assert!(
        log.contains("does not offer the profile \"tiny\"; ordering without a profile"),
        "{log}"
    );
    assert!(
        log.contains("(ecdsa:256 key) with http-01 challenges"),
        "{log}"
    );
}

/// The subject Common Name of a PEM certificate file.
fn common_name(pem: &std::path::Path) -> String {
    let out = Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-subject",
            "-nameopt",
            "utf8,sep_comma_plus",
        ])
        .arg("-in")
        .arg(pem)
        .output()
        .expect("openssl");
    let subject = String::from_utf8_lossy(&out.stdout);
    let cn = subject.split("CN=").nth(1).expect("a CN");
    cn.split(',').next().unwrap().trim().to_string()
}

#[test]
fn preferred_chain_picks_the_alternate_issued_by_that_name() {
    let more = More {
        alternate_roots: 2,
        ..More::default()
    };
    let Some(s) = setup_with(None, 7_776_000, &more) else {
        return;
    };
    let state = s.state.path().join("pebble");
    let start = |issuer: &str| for_one_name(&s, &state, issuer);
    // The second alternate's root, by name: its chain is served, which
    // verifies against that root and not against the default one.
    let wanted = s.p.root_of(2);
    let name = common_name(&wanted);
    assert!(name.starts_with("Pebble Root CA "), "{name}");
    let v = start(&format!(
        "accept_terms_of_service; preferred_chain \"{name}\";"
    ));
    wait_issued(&v, "a.example.test", s.ports.1, &wanted);
    assert!(fetch("a.example.test", s.ports.1, &s.p.root()).is_err());
    let log = error_log(&v);
    assert!(
        log.contains(&format!("the chain issued by \"{name}\" is used (https://")),
        "{log}"
    );
    // Kept as served: a restart serves the same chain.
    drop(v);
    let v = start(&format!(
        "accept_terms_of_service; preferred_chain \"{name}\";"
    ));
    assert_eq!(
        fetch("a.example.test", s.ports.1, &wanted).unwrap(),
        "hello a.example.test\n"
    );
    drop(v);

    // A name no chain is issued by: the issuer's default chain.
    std::fs::remove_dir_all(&state).unwrap();
    let v = start("accept_terms_of_service; preferred_chain \"No Such Root\";");
    wait_issued(&v, "a.example.test", s.ports.1, &s.p.root());
    let log = error_log(&v);
    assert!(
        log.contains(
            "no chain issued by \"No Such Root\" among 3 offered; the default chain is used"
        ),
        "{log}"
    );
}

#[test]
fn configuration_errors() {
    let dir = TempDir::new("acme-conf");
    let cases: &[(&str, &str)] = &[
        ("acme_issuer x { }", "no \"uri\" in acme_issuer \"x\""),
        (
            "acme_issuer x { uri https://a/dir; challenge dns-01; }",
            "acme_issuer \"x\" with \"challenge dns-01\" needs \"dns_update\"",
        ),
        (
            "acme_issuer x { uri https://a/dir; account_key rsa:2048; }",
            "RSA keys cannot be generated",
        ),
        (
            "acme_issuer x { uri https://a/dir; server 1; }",
            "\"server\" directive is not allowed in acme_issuer",
        ),
        (
            "acme_issuer x { uri ftp://a/dir; }",
            "invalid uri \"ftp://a/dir\"",
        ),
        (
            "acme_issuer x { uri https://a/dir; preferred_chain A; preferred_chain B; }",
            "\"preferred_chain\" directive is duplicate",
        ),
        (
            "acme_issuer x { uri https://a/dir; preferred_chain; }",
            "invalid number of arguments in \"preferred_chain\" directive",
        ),
        (
            "acme_issuer x { uri https://a/dir; external_account_key k data:a+b; }",
            "the key: the key is not base64url",
        ),
        (
            "acme_issuer x { uri https://a/dir; external_account_key k /nonexistent/eab; }",
            "cannot read \"/nonexistent/eab\"",
        ),
        (
            "acme_issuer x { uri https://a/dir; profile a b; }",
            "invalid parameter \"b\" in \"profile\" directive",
        ),
        (
            "acme_issuer x { uri https://a/dir; profile a; profile b; }",
            "\"profile\" directive is duplicate",
        ),
    ];
    for (block, msg) in cases {
        let text = format!("events {{}}\nhttp {{\n{block}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{block}: {err}");
        assert!(err.contains(msg), "{block}: want {msg}\n{err}");
    }
    let server = |issuer: &str, line: &str| {
        let text = format!(
            "events {{}}\nhttp {{\n{issuer}\nserver {{\nserver_name ~^x;\n{line}\n}}\n}}\n"
        );
        let out = test_conf(&dir, &text);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let http = "acme_issuer x { uri https://a/dir; }";
    assert!(server(http, "acme_certificate y;").contains("no acme_issuer \"y\" is defined"));
    assert!(
        server(http, "acme_certificate x;").contains("no identifiers for \"acme_certificate\"")
    );
    assert!(
        server(http, "acme_certificate x *.a.test;")
            .contains("can only be proven with \"challenge dns-01\"")
    );
    assert!(server(http, "acme_certificate x a.test key=rsa:4096;").contains("RSA keys"));
    let ok = server(http, "acme_certificate x a.test key=ecdsa:384;");
    assert!(ok.contains("test is successful"), "{ok}");
    let eab = "acme_issuer x { uri https://a/dir; external_account_key k data:c2VjcmV0; profile p require; }";
    let ok = server(eab, "acme_certificate x a.test;");
    assert!(ok.contains("test is successful"), "{ok}");
    // An account key file cannot be bound to an external account.
    let key = dir.path().join("account.pem");
    let made = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .arg("-out")
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success());
    let both = format!(
        "acme_issuer x {{ uri https://a/dir; account_key {}; external_account_key k data:c2VjcmV0; }}",
        key.display()
    );
    let err = server(&both, "acme_certificate x a.test;");
    assert!(
        err.contains("\"external_account_key\" needs a generated account key")
            && err.contains("t.conf:3"),
        "{err}"
    );
}
