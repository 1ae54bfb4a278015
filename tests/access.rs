//! allow / deny: order, families, `unix:`, inheritance, error_page, the
//! error log line, IPv6, configuration errors. Expectations checked against
//! nginx 1.22.

mod common;
use common::*;

const CONF: &str = "
error_log logs/error.log info;
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        listen unix:{dir}/s.sock;
        root {dir}/html;
        location /first/ {
            deny 127.0.0.1;
            allow all;
        }
        location /net/ {
            allow 127.0.0.0/8;
            deny all;
        }
        location /v6only/ {
            deny ::1;
            deny 2001:db8::/32;
        }
        location /inh/ {
            deny all;
            location /inh/child/ {
            }
            location /inh/own/ {
                deny 10.0.0.1;
            }
        }
        location /unix/ {
            deny unix:;
        }
        location /page/ {
            deny all;
            error_page 403 /denied.html;
        }
    }
}";

fn start() -> Vireo {
    let dir = TempDir::new("acc");
    for d in [
        "first",
        "net",
        "v6only",
        "inh/child",
        "inh/own",
        "unix",
        "page",
    ] {
        dir.write(&format!("html/{d}/index.html"), "ok\n");
    }
    dir.write("html/denied.html", "custom denial\n");
    Vireo::start_in(dir, CONF)
}

fn unix_get(v: &Vireo, path: &str) -> Resp {
    use std::io::Write;
    let mut s = connect_unix(&v.dir.path().join("s.sock"));
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut s, &mut out).unwrap();
    Resp::parse(&out).unwrap()
}

#[test]
fn rules_in_order_first_match_wins() {
    let v = start();
    let r = v.get("/first/");
    assert_eq!(r.status, 403);
    assert!(r.text().contains("403 Forbidden"));
    assert_eq!(v.get("/net/").status, 200);
    // IPv6 rules do not concern an IPv4 client.
    assert_eq!(v.get("/v6only/").status, 200);
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains(
            "[error] ",
        ) && log.contains(
            "access forbidden by rule, client: 127.0.0.1, server: , request: \"GET /first/ HTTP/1.1\", host: \"localhost\""
        ),
        "{log}"
    );
}

#[test]
fn own_rules_replace_inherited_ones() {
    let v = start();
    assert_eq!(v.get("/inh/").status, 403);
    assert_eq!(v.get("/inh/child/").status, 403);
    assert_eq!(v.get("/inh/own/").status, 200);
}

#[test]
fn unix_clients() {
    let v = start();
    assert_eq!(unix_get(&v, "/unix/").status, 403);
    assert_eq!(v.get("/unix/").status, 200);
    // `all` covers unix clients; IPv6 rules do not.
    assert_eq!(unix_get(&v, "/net/").status, 403);
    assert_eq!(unix_get(&v, "/v6only/").status, 200);
}

#[test]
fn error_page_applies_to_denial() {
    let v = start();
    let r = v.get("/page/");
    assert_eq!(r.status, 403);
    assert_eq!(r.text(), "custom denial\n");
}

#[test]
fn ipv6_listener() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback: [::1] not checked");
        return;
    }
    let dir = TempDir::new("acc6");
    for d in ["v6", "v4"] {
        dir.write(&format!("html/{d}/index.html"), "ok\n");
    }
    let p6 = free_port();
    let conf = format!(
        "events {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}};\n  listen [::1]:{p6};\n  root {{dir}}/html;\n  location /v6/ {{ allow ::1; deny all; }}\n  location /v4/ {{ deny 127.0.0.1; deny ::/0; }}\n }}\n}}\n"
    );
    let v = Vireo::start_in(dir, &conf);
    let get6 = |path: &str| {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(("::1", p6)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        Resp::parse(&read_to_close(&mut s)).unwrap().status
    };
    assert_eq!(get6("/v6/"), 200);
    assert_eq!(v.get("/v6/").status, 403);
    assert_eq!(get6("/v4/"), 403);
    assert_eq!(v.get("/v4/").status, 403);
}

#[test]
fn configuration_errors() {
    let dir = TempDir::new("accconf");
    for (line, want) in [
        (
            "allow 10.0.0.0/33;",
            "invalid address or network \"10.0.0.0/33\"",
        ),
        (
            "deny example.com;",
            "invalid address or network \"example.com\"",
        ),
        (
            "allow;",
            "invalid number of arguments in \"allow\" directive",
        ),
        (
            "satisfy some;",
            "invalid value \"some\" in \"satisfy\" directive",
        ),
    ] {
        refused_in_server(&dir, line, want);
    }
    // Host bits outside the mask: accepted, with nginx's warning.
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n access_log off;\n server {\n  allow 10.1.2.3/8;\n }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("low address bits of 10.1.2.3/8 are meaningless"),
        "{err}"
    );
}
