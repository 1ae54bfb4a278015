//! auth_basic: every htpasswd format made by the real tools (htpasswd from
//! apache2-utils, openssl passwd), the challenge, `$remote_user`, bad
//! credentials, a user file that is missing, unreadable or changed, `off`,
//! and `satisfy` with allow/deny. Expectations checked against nginx 1.22.

mod common;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::*;
use std::process::Command;

const CONF: &str = "
error_log logs/error.log info;
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        auth_basic \"Zone $server_port\";
        auth_basic_user_file htpasswd;
        location /who/ {
            return 200 \"user=$remote_user\";
        }
        location /open/ {
            auth_basic off;
        }
        location /var/ {
            auth_basic_user_file {dir}/$arg_f;
        }
        location /page/ {
            error_page 401 /login.html;
        }
        location = /login.html {
            auth_basic off;
        }
        location /missing/ {
            auth_basic_user_file {dir}/nosuch;
        }
        location /unreadable/ {
            auth_basic_user_file {dir}/html;
        }
        location /all/ {
            deny all;
        }
        location /any-deny/ {
            satisfy any;
            deny all;
        }
        location /any-allow/ {
            satisfy any;
            allow 127.0.0.1;
            deny all;
        }
        location /any-missing/ {
            satisfy any;
            auth_basic_user_file {dir}/nosuch;
        }
        location /any-noauth/ {
            satisfy any;
            auth_basic off;
            deny all;
        }
    }
}";

/// One htpasswd line for `user`, made by a real tool.
fn line(tool: &str, args: &[&str], user: &str) -> String {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("{tool}: {e} (scripts/test installs apache2-utils and openssl)")
    });
    assert!(out.status.success(), "{tool} {args:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let hash = text.trim();
    // htpasswd -n prints `user:hash`, openssl passwd the hash alone.
    let hash = hash.strip_prefix(&format!("{user}:")).unwrap_or(hash);
    format!("{user}:{hash}")
}

/// Users named after their format, each with password `pw-<name>`.
fn users() -> Vec<(&'static str, String)> {
    let hp = |flag: &str, user: &'static str| {
        let pw = format!("pw-{user}");
        (user, line("htpasswd", &["-nb", flag, user, &pw], user))
    };
    let ssl = |flag: &str, user: &'static str| {
        let pw = format!("pw-{user}");
        (user, line("openssl", &["passwd", flag, &pw], user))
    };
    vec![
        hp("-B", "bcrypt"),
        hp("-m", "apr1"),
        hp("-s", "sha"),
        hp("-d", "des"),
        ssl("-1", "md5crypt"),
        ssl("-5", "sha256crypt"),
        ssl("-6", "sha512crypt"),
        ssl("-apr1", "apr1ssl"),
        ("plain", "plain:{PLAIN}pw-plain".to_string()),
    ]
}

fn start() -> Vireo {
    let dir = TempDir::new("auth");
    let mut file = String::from("# users\n");
    for (_, l) in users() {
        file.push_str(&l);
        file.push('\n');
    }
    dir.write("htpasswd", file);
    dir.write("html/login.html", "please log in\n");
    for d in [
        "",
        "open",
        "var",
        "missing",
        "unreadable",
        "all",
        "any-deny",
        "any-allow",
        "any-missing",
        "any-noauth",
    ] {
        dir.write(&format!("html/{d}/index.html"), "secret page\n");
    }
    Vireo::start_in(dir, CONF)
}

fn get_as(v: &Vireo, path: &str, auth: Option<&str>) -> Resp {
    let h = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    v.request(&format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{h}Connection: close\r\n\r\n"
    ))
}

fn basic(user: &str, pw: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{pw}")))
}

#[test]
fn every_format_and_the_challenge() {
    let v = start();
    let r = get_as(&v, "/", None);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some(format!("Basic realm=\"Zone {}\"", v.port).as_str())
    );
    for (user, _) in users() {
        let ok = get_as(&v, "/", Some(&basic(user, &format!("pw-{user}"))));
        assert_eq!(ok.status, 200, "{user}");
        assert_eq!(ok.text(), "secret page\n");
        let bad = get_as(&v, "/", Some(&basic(user, "wrong")));
        assert_eq!(bad.status, 401, "{user}");
        assert!(bad.header("www-authenticate").is_some());
    }
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains("user \"bcrypt\": password mismatch, client: 127.0.0.1"),
        "{log}"
    );
    assert!(
        log.contains("no user/password was provided for basic authentication"),
        "{log}"
    );
}

#[test]
fn error_page_keeps_the_challenge() {
    let v = start();
    let r = get_as(&v, "/page/", None);
    assert_eq!(r.status, 401);
    assert_eq!(r.text(), "please log in\n");
    assert_eq!(
        r.header("www-authenticate"),
        Some(format!("Basic realm=\"Zone {}\"", v.port).as_str())
    );
}

#[test]
fn remote_user_and_bad_credentials() {
    let v = start();
    // `return` runs before the access phase: it sees the user as sent.
    let r = get_as(&v, "/who/", Some(&basic("someone", "x")));
    assert_eq!(r.text(), "user=someone");
    assert_eq!(get_as(&v, "/who/", None).text(), "user=");
    for bad in [
        "Basic !!!!",
        "Basic ",
        "Bearer abc",
        &format!("Basic {}", STANDARD.encode("nocolon")),
        &format!("Basic {}", STANDARD.encode(":emptyuser")),
    ] {
        let r = get_as(&v, "/", Some(bad));
        assert_eq!(r.status, 401, "{bad}");
        assert!(r.header("www-authenticate").is_some(), "{bad}");
    }
    let r = get_as(&v, "/", Some(&basic("nobody", "x")));
    assert_eq!(r.status, 401);
    // Case-insensitive scheme, padding optional, as nginx.
    let unpadded = STANDARD
        .encode("plain:pw-plain")
        .trim_end_matches('=')
        .to_string();
    assert_eq!(
        get_as(&v, "/", Some(&format!("bAsIc {unpadded}"))).status,
        200
    );
    let log = v.dir.read("logs/error.log");
    assert!(log.contains("user \"nobody\" was not found in \""), "{log}");
}

#[test]
fn off_missing_and_unreadable_files() {
    let v = start();
    assert_eq!(get_as(&v, "/open/", None).status, 200);
    // Without credentials the file is not looked at.
    assert_eq!(get_as(&v, "/missing/", None).status, 401);
    let good = basic("plain", "pw-plain");
    assert_eq!(get_as(&v, "/missing/", Some(&good)).status, 403);
    assert_eq!(get_as(&v, "/unreadable/", Some(&good)).status, 500);
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains("[error]") && log.contains("/nosuch\" failed (2: No such file or directory)"),
        "{log}"
    );
    assert!(
        log.contains("[crit]") && log.contains("(21: Is a directory)"),
        "{log}"
    );
}

#[test]
fn user_file_path_with_variables() {
    let v = start();
    let good = basic("plain", "pw-plain");
    assert_eq!(get_as(&v, "/var/?f=htpasswd", Some(&good)).status, 200);
    assert_eq!(get_as(&v, "/var/?f=other", Some(&good)).status, 403);
}

#[test]
fn user_file_read_again_when_it_changes() {
    let v = start();
    let old = basic("plain", "pw-plain");
    assert_eq!(get_as(&v, "/", Some(&old)).status, 200);
    v.dir
        .write("htpasswd", "plain:{PLAIN}new-password-longer\n");
    assert_eq!(get_as(&v, "/", Some(&old)).status, 401);
    assert_eq!(
        get_as(&v, "/", Some(&basic("plain", "new-password-longer"))).status,
        200
    );
}

#[test]
fn satisfy_all_and_any() {
    let v = start();
    let good = basic("sha", "pw-sha");
    // all: the denial comes first, whatever the credentials.
    assert_eq!(get_as(&v, "/all/", Some(&good)).status, 403);
    assert_eq!(get_as(&v, "/all/", None).status, 403);
    // any: a failed login beats the denial (401 with the challenge) …
    let r = get_as(&v, "/any-deny/", None);
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").is_some());
    // … and a good one lets the request through.
    assert_eq!(get_as(&v, "/any-deny/", Some(&good)).status, 200);
    // any: an allowed address needs no credentials.
    assert_eq!(get_as(&v, "/any-allow/", None).status, 200);
    // any: the missing file's 403 stands when nothing grants.
    assert_eq!(get_as(&v, "/any-missing/", Some(&good)).status, 403);
    // any: only the rules have an opinion.
    assert_eq!(get_as(&v, "/any-noauth/", None).status, 403);
}

#[test]
fn auth_delay_holds_back_a_401_only() {
    let dir = TempDir::new("auth");
    dir.write("htpasswd", "user:{PLAIN}good\n");
    dir.write("html/index.html", "in\n");
    let conf = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location / {
            auth_delay 1s;
            auth_basic \"closed site\";
            auth_basic_user_file htpasswd;
        }
    }
}";
    let v = Vireo::start_in(dir, conf);
    let t = std::time::Instant::now();
    assert_eq!(get_as(&v, "/", Some(&basic("user", "bad"))).status, 401);
    assert!(t.elapsed() >= std::time::Duration::from_secs(1));
    let t = std::time::Instant::now();
    assert_eq!(get_as(&v, "/", Some(&basic("user", "good"))).status, 200);
    assert!(t.elapsed() < std::time::Duration::from_millis(900));
}
