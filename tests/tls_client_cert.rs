//! TLS beyond the server's own certificate: client certificates
//! (`ssl_verify_client`, trust, revocation, the `$ssl_client_*` variables),
//! ticket key files, encrypted keys, certificates named with variables or
//! given as `data:`. Certificates are made by `openssl` per test; curl and
//! `openssl s_client` are the clients.

mod common;
use common::*;
use std::process::{Command, Stdio};

/// A CA, a client certificate it signed (serial 1000), a self-signed
/// stranger, and the server's certificate; `openssl ca`'s files to revoke.
fn pki(dir: &TempDir) {
    dir.write(
        "ca.conf",
        format!(
            "[ ca ]\ndefault_ca = myca\n[ myca ]\nnew_certs_dir = {d}\ndatabase = {d}/certindex\ndefault_md = sha256\npolicy = myca_policy\nserial = {d}/certserial\ndefault_days = 3\ndefault_crl_days = 1\n[ myca_policy ]\ncommonName = supplied\n",
            d = dir.path().display()
        ),
    );
    dir.write("certserial", "1000");
    dir.write("certindex", "");
    let self_signed = |name: &str, ca: bool| {
        let mut args = vec![
            "req", "-x509", "-nodes", "-days", "30", "-newkey", "rsa:2048", "-keyout",
        ];
        let key = format!("{name}.key");
        let crt = format!("{name}.crt");
        let subj = format!("/CN={name}/O=Vireo Test");
        args.extend([key.as_str(), "-out", crt.as_str(), "-subj", subj.as_str()]);
        if ca {
            args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        }
        openssl(dir, &args);
    };
    self_signed("ca", true);
    self_signed("stranger", false);
    self_signed("server", false);
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-nodes",
            "-newkey",
            "rsa:2048",
            "-keyout",
            "client.key",
            "-out",
            "client.csr",
            "-subj",
            "/CN=client",
        ],
    );
    // The CA's operations: sign the client, a CRL, revoke the client, a CRL.
    let ca = |args: &str| {
        let mut all = vec!["ca", "-batch", "-config", "ca.conf", "-keyfile", "ca.key"];
        all.extend(["-cert", "ca.crt"]);
        all.extend(args.split(' '));
        openssl(dir, &all);
    };
    ca("-subj /CN=client -in client.csr -out client.crt");
    ca("-gencrl -out empty.crl");
    ca("-revoke client.crt");
    ca("-gencrl -out revoked.crl");
}

const CONF: &str = "error_log stderr info;\nevents {}\nhttp {\n  access_log off;\n  ssl_certificate server.crt;\n  ssl_certificate_key server.key;\n  add_header X-Verify $ssl_client_verify always;\n  server {\n    listen 127.0.0.1:{port} ssl;\n    server_name on.test;\n    ssl_verify_client on;\n    ssl_client_certificate ca.crt;\n    EXTRA\n    location / { return 200 \"$ssl_client_s_dn|$ssl_client_i_dn|$ssl_client_s_dn_legacy|$ssl_client_serial|$ssl_client_fingerprint|$ssl_client_v_remain\"; }\n    location /raw { add_header X-Cert $ssl_client_cert; return 200 $ssl_client_raw_cert; }\n  }\n  server {\n    listen 127.0.0.1:{port} ssl;\n    server_name noca.test;\n    ssl_verify_client optional_no_ca;\n    location / { return 200 \"$ssl_client_verify\"; }\n  }\n  server {\n    listen 127.0.0.1:{port} ssl;\n    server_name optional.test;\n    ssl_verify_client optional;\n    ssl_client_certificate ca.crt;\n    error_page 495 =403 /denied;\n    location / { return 200 \"$ssl_client_verify\"; }\n    location /denied { return 403 \"denied: $ssl_client_verify\"; }\n  }\n}\n";

fn start(extra: &str) -> Vireo {
    let dir = TempDir::new("tls-client");
    pki(&dir);
    Vireo::start_in(dir, &CONF.replace("EXTRA", extra))
}

/// curl to `https://NAME/PATH` with the client certificate `cert` (none
/// when empty): the status line, headers and body.
fn get(v: &Vireo, name: &str, path: &str, cert: &str) -> String {
    let mut c = Command::new("curl");
    c.args(["-sik", "--max-time", "20", "--resolve"])
        .arg(format!("{name}:{}:127.0.0.1", v.port))
        .arg(format!("https://{name}:{}{path}", v.port))
        .current_dir(v.dir.path());
    if !cert.is_empty() {
        c.args([
            "--cert",
            &format!("{cert}.crt"),
            "--key",
            &format!("{cert}.key"),
        ]);
    }
    let out = c.output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn client_certificates_are_verified_and_refused_as_nginx() {
    let v = start("");
    // `on` without a certificate: 400 with nginx's page, the 496 kind.
    let r = get(&v, "on.test", "/", "");
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(r.contains("No required SSL certificate was sent"), "{r}");
    assert!(r.contains("X-Verify: NONE"), "{r}");
    // A certificate the CA signed: the variables.
    let r = get(&v, "on.test", "/", "client");
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("X-Verify: SUCCESS"), "{r}");
    let fp = openssl(
        &v.dir,
        &[
            "x509",
            "-in",
            "client.crt",
            "-noout",
            "-fingerprint",
            "-sha1",
        ],
    );
    let fp: String = fp
        .trim()
        .rsplit('=')
        .next()
        .unwrap()
        .replace(':', "")
        .to_lowercase();
    let body = r.rsplit("\r\n\r\n").next().unwrap();
    // Valid for 3 days from its making: whole days left.
    let (body, remain) = body.rsplit_once('|').unwrap();
    assert!(matches!(remain, "2" | "3"), "{r}");
    assert_eq!(
        body,
        format!("CN=client|O=Vireo Test,CN=ca|/CN=client|1000|{fp}"),
        "{r}"
    );
    let raw = get(&v, "on.test", "/raw", "client");
    let pem = v.dir.read("client.crt");
    let pem = &pem[pem.find("-----BEGIN").unwrap()..];
    assert!(raw.ends_with(pem), "{raw}");
    // The deprecated form: a header folded with a tab after each line end.
    let folded = pem.trim_end().replace('\n', "\n\t");
    assert!(raw.contains(&format!("X-Cert: {folded}\r\n")), "{raw}");
    // A certificate no trusted CA signed: 400, the 495 kind.
    let r = get(&v, "on.test", "/", "stranger");
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(r.contains("The SSL certificate error"), "{r}");
    assert!(
        r.contains("X-Verify: FAILED:self-signed certificate"),
        "{r}"
    );
    assert!(
        v.stderr()
            .contains("client SSL certificate verify error: (18:self-signed certificate)"),
        "{}",
        v.stderr()
    );
    // optional_no_ca lets it through, saying it failed; optional does not.
    let r = get(&v, "noca.test", "/", "stranger");
    assert!(r.ends_with("FAILED:self-signed certificate"), "{r}");
    // error_page catches the 495 kind.
    let r = get(&v, "optional.test", "/", "stranger");
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    assert!(r.ends_with("denied: FAILED:self-signed certificate"), "{r}");
    assert!(get(&v, "optional.test", "/", "").ends_with("\r\n\r\nNONE"));
    assert!(get(&v, "optional.test", "/", "client").ends_with("\r\n\r\nSUCCESS"));
}

#[test]
fn the_server_names_only_its_client_certificate_authorities() {
    let v = start("ssl_trusted_certificate stranger.crt;");
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{}", v.port)])
        .args(["-servername", "on.test", "-tls1_2"])
        .stdin(Stdio::null())
        .output()
        .expect("openssl");
    let out = String::from_utf8_lossy(&out.stdout);
    let names = out
        .split("Acceptable client certificate CA names")
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"));
    assert!(names.contains("CN = ca"), "{out}");
    assert!(!names.contains("stranger"), "{out}");
    // Trusted without being named.
    assert!(get(&v, "on.test", "/", "stranger").starts_with("HTTP/1.1 200"));
}

#[test]
fn revocation_lists_are_checked() {
    let v = start("ssl_crl empty.crl;");
    assert!(get(&v, "on.test", "/", "client").contains("X-Verify: SUCCESS"));
    let v = start("ssl_crl revoked.crl;");
    let r = get(&v, "on.test", "/", "client");
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    assert!(r.contains("X-Verify: FAILED:certificate revoked"), "{r}");
}

#[test]
fn a_misdirected_request_to_a_verifying_server_is_421() {
    let v = start("");
    let out = Command::new("curl")
        .args(["-sik", "--max-time", "20", "--resolve"])
        .arg(format!("optional.test:{}:127.0.0.1", v.port))
        .args(["-H", "Host: on.test"])
        .arg(format!("https://optional.test:{}/", v.port))
        .output()
        .expect("curl");
    let r = String::from_utf8_lossy(&out.stdout);
    assert!(r.starts_with("HTTP/1.1 421"), "{r}");
}

#[test]
fn http2_requests_see_the_verification() {
    let dir = TempDir::new("tls-client-h2");
    pki(&dir);
    let v = Vireo::start_in(
        dir,
        &CONF
            .replace("EXTRA", "")
            .replace("http {\n", "http {\n  http2 on;\n"),
    );
    let out = Command::new("curl")
        .args(["-sik", "--http2", "--max-time", "20", "--resolve"])
        .arg(format!("optional.test:{}:127.0.0.1", v.port))
        .args(["--cert", "client.crt", "--key", "client.key"])
        .arg(format!("https://optional.test:{}/", v.port))
        .current_dir(v.dir.path())
        .output()
        .expect("curl");
    let r = String::from_utf8_lossy(&out.stdout);
    assert!(r.starts_with("HTTP/2 200"), "{r}");
    assert!(r.ends_with("SUCCESS"), "{r}");
}

/// The port of the configuration's last `listen`.
fn second_port(v: &Vireo) -> u16 {
    let conf = v.dir.read("vireo.conf");
    let at = conf.rfind("127.0.0.1:").unwrap() + "127.0.0.1:".len();
    conf[at..]
        .split([';', ' '])
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// `openssl s_client` over TLS 1.2 to `port`, saving or offering a session.
fn session(v: &Vireo, port: u16, sess: &str, offer: bool) -> String {
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-tls1_2",
            "-connect",
            &format!("127.0.0.1:{port}"),
        ])
        .args([if offer { "-sess_in" } else { "-sess_out" }, sess])
        .current_dir(v.dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn ticket_key_files_let_servers_resume_each_others_sessions() {
    let dir = TempDir::new("tls-tickets");
    pki(&dir);
    dir.write("one.key", [b'1'; 80]);
    dir.write("two.key", [b'2'; 48]);
    dir.write("short.key", [b'3'; 20]);
    let conf = "events {}\nhttp {\n  access_log off;\n  ssl_certificate server.crt;\n  ssl_certificate_key server.key;\n  server { listen 127.0.0.1:{port} ssl; ssl_session_ticket_key one.key; }\n  server { listen 127.0.0.1:{port2} ssl; ssl_session_ticket_key two.key; ssl_session_ticket_key one.key; }\n}\n";
    let v = Vireo::start_in(dir, conf);
    let port2 = second_port(&v);
    assert!(session(&v, v.port, "s1", false).contains("New, TLSv1.2"));
    // The second server decrypts with its second key: resumed.
    assert!(session(&v, port2, "s1", true).contains("Reused, TLSv1.2"));
    // Its tickets are sealed with its first key, which the first lacks.
    assert!(session(&v, port2, "s2", false).contains("New, TLSv1.2"));
    assert!(session(&v, v.port, "s2", true).contains("New, TLSv1.2"));
    let out = test_conf(
        &v.dir,
        "events {}\nhttp {\n  server { listen 127.0.0.1:1 ssl; ssl_certificate server.crt; ssl_certificate_key server.key;\n  ssl_session_ticket_key short.key; }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must be 80 or 48 bytes"), "{err}");
}

#[test]
fn encrypted_keys_open_with_the_password_file() {
    let dir = TempDir::new("tls-pass");
    openssl(
        &dir,
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
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "enc.key",
            "-passin",
            "pass:secret",
            "-subj",
            "/CN=enc",
            "-out",
            "enc.crt",
        ],
    );
    dir.write("pass", "wrong\r\nsecret\n");
    dir.write("bad", "wrong\n");
    let conf = |pass: &str| {
        format!(
            "events {{}}\nhttp {{\n  server {{ listen 127.0.0.1:1 ssl; ssl_certificate enc.crt; ssl_certificate_key enc.key;\n  {pass} }}\n}}\n"
        )
    };
    assert!(
        test_conf(&dir, &conf("ssl_password_file pass;"))
            .status
            .success()
    );
    let out = test_conf(&dir, &conf("ssl_password_file bad;"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no pass phrase"), "{err}");
    let out = test_conf(&dir, &conf(""));
    assert!(!out.status.success());
}

#[test]
fn certificates_named_with_variables_and_given_as_data() {
    let dir = TempDir::new("tls-vars");
    for name in ["a.test", "b.test"] {
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-nodes",
                "-newkey",
                "rsa:2048",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
    }
    let data_crt = dir.read("b.test.crt");
    let data_key = dir.read("b.test.key");
    let conf = format!(
        "error_log stderr info;\nevents {{}}\nhttp {{\n  access_log off;\n  server {{ listen 127.0.0.1:{{port}} ssl; ssl_certificate $ssl_server_name.crt; ssl_certificate_key $ssl_server_name.key; return 200 $ssl_server_name; }}\n  server {{ listen 127.0.0.1:{{port2}} ssl; ssl_certificate 'data:{data_crt}'; ssl_certificate_key 'data:{data_key}'; return 200 data; }}\n}}\n"
    );
    let v = Vireo::start_in(dir, &conf);
    let s_client = |port: u16, name: &str| {
        let out = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
            .args(["-servername", name])
            .stdin(Stdio::null())
            .output()
            .expect("openssl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(s_client(v.port, "a.test").contains("subject=CN = a.test"));
    assert!(s_client(v.port, "b.test").contains("subject=CN = b.test"));
    // No such files: no handshake.
    assert!(!s_client(v.port, "c.test").contains("subject="));
    // The alert goes out before the line is logged.
    assert!(
        eventually(5, || v.stderr().contains("c.test.crt")),
        "{}",
        v.stderr()
    );
    assert!(s_client(second_port(&v), "x").contains("subject=CN = b.test"));
}
