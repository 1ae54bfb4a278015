//! realip: X-Forwarded-For and X-Real-IP from a trusted loopback source,
//! recursive walking, untrusted sources ignored, ports, the location-level
//! pass, and the address reaching allow/deny, logs and variables.
//! Expectations checked against nginx 1.22.

mod common;
use common::*;

const CONF: &str = "
error_log logs/error.log info;
events {}
http {
    log_format real \"$remote_addr $realip_remote_addr $status\";
    access_log logs/access.log real;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        set_real_ip_from 10.0.0.0/8;
        set_real_ip_from 127.0.0.1;
        real_ip_header X-Forwarded-For;
        location /ip {
            return 200 \"$remote_addr|$remote_port|$realip_remote_addr|$proxy_add_x_forwarded_for\";
        }
        location /deny/ {
            deny 1.1.1.1;
        }
    }
    server {
        listen 127.0.0.1:{port2};
        root {dir}/html;
        set_real_ip_from 10.0.0.0/8;
        set_real_ip_from 127.0.0.1;
        real_ip_header X-Forwarded-For;
        real_ip_recursive on;
        location /ip {
            return 200 \"$remote_addr|$remote_port|$realip_remote_addr\";
        }
        location /untrusted/ {
            return 200 \"never\";
        }
    }
}";

fn start() -> (Vireo, u16) {
    let dir = TempDir::new("realip");
    dir.write("html/deny/index.html", "ok\n");
    let v = Vireo::start_in(dir, CONF);
    let conf = v.dir.read("vireo.conf");
    let at = conf.rfind("listen 127.0.0.1:").unwrap() + "listen 127.0.0.1:".len();
    let port2 = conf[at..].split(';').next().unwrap().parse().unwrap();
    (v, port2)
}

fn get_on(port: u16, path: &str, headers: &[&str]) -> Resp {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let h: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{h}Connection: close\r\n\r\n"
    )
    .unwrap();
    Resp::parse(&read_to_close(&mut s)).unwrap()
}

#[test]
fn last_address_from_a_trusted_peer() {
    let (v, _) = start();
    let ip = |h: &[&str]| get_on(v.port, "/ip", h).text();
    let r = ip(&["X-Forwarded-For: 1.1.1.1, 2.2.2.2, 10.0.0.2"]);
    assert_eq!(
        r,
        "10.0.0.2||127.0.0.1|1.1.1.1, 2.2.2.2, 10.0.0.2, 10.0.0.2"
    );
    assert_eq!(
        ip(&["X-Forwarded-For: 1.1.1.1:77"]),
        "1.1.1.1|77|127.0.0.1|1.1.1.1:77, 1.1.1.1"
    );
    assert_eq!(
        ip(&["X-Forwarded-For: [2001:db8::1]:443"]),
        "2001:db8::1|443|127.0.0.1|[2001:db8::1]:443, 2001:db8::1"
    );
    // No header, or junk: the connection's address.
    let plain = ip(&[]);
    assert!(plain.starts_with("127.0.0.1|"), "{plain}");
    assert!(ip(&["X-Forwarded-For: junk"]).starts_with("127.0.0.1|"));
}

#[test]
fn recursive_skips_trusted_addresses() {
    let (_v, port2) = start();
    let ip = |h: &[&str]| get_on(port2, "/ip", h).text();
    assert_eq!(
        ip(&["X-Forwarded-For: 1.1.1.1, 2.2.2.2, 10.0.0.2"]),
        "2.2.2.2||127.0.0.1"
    );
    assert_eq!(
        ip(&["X-Forwarded-For: 10.0.0.9, 10.0.0.2"]),
        "10.0.0.9||127.0.0.1"
    );
    assert_eq!(
        ip(&["X-Forwarded-For: 1.1.1.1, junk, 10.0.0.2"]),
        "10.0.0.2||127.0.0.1"
    );
    // Several lines are one list.
    assert_eq!(
        ip(&["X-Forwarded-For: 1.1.1.1", "X-Forwarded-For: 10.0.0.5"]),
        "1.1.1.1||127.0.0.1"
    );
}

#[test]
fn untrusted_source_is_ignored() {
    let dir = TempDir::new("realip-untrusted");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  set_real_ip_from 10.0.0.0/8;\n  set_real_ip_from unix:;\n  real_ip_header X-Real-IP;\n  location / { return 200 \"$remote_addr|$realip_remote_addr\"; }\n }\n}\n",
    );
    let r = get_on(v.port, "/", &["X-Real-IP: 1.1.1.1"]);
    assert_eq!(r.text(), "127.0.0.1|127.0.0.1");
}

#[test]
fn real_address_reaches_access_and_logs() {
    let (v, _) = start();
    let r = get_on(v.port, "/deny/", &["X-Forwarded-For: 1.1.1.1"]);
    assert_eq!(r.status, 403);
    assert_eq!(
        get_on(v.port, "/deny/", &["X-Forwarded-For: 1.1.1.2"]).status,
        200
    );
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains("access forbidden by rule, client: 1.1.1.1, server: "),
        "{log}"
    );
    assert!(eventually(5, || {
        let a = v.dir.read("logs/access.log");
        a.contains("1.1.1.1 127.0.0.1 403\n") && a.contains("1.1.1.2 127.0.0.1 200\n")
    }));
}

#[test]
fn location_level_applies_before_access() {
    let dir = TempDir::new("realip-loc");
    dir.write("html/f/index.html", "ok\n");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n  location /f/ {\n   set_real_ip_from 127.0.0.1;\n   add_header X-C \"$remote_addr:$remote_port\" always;\n   deny 5.5.5.5;\n  }\n  location /r/ {\n   set_real_ip_from 127.0.0.1;\n   return 200 $remote_addr;\n  }\n  location /h/ {\n   set_real_ip_from localhost;\n   try_files /nothing @h;\n  }\n  location @h {\n   return 200 $remote_addr;\n  }\n }\n}\n",
    );
    let r = get_on(v.port, "/h/", &["X-Real-IP: 5.5.5.7"]);
    assert_eq!(r.text(), "5.5.5.7", "a host name stands for its addresses");
    let r = get_on(v.port, "/f/", &["X-Real-IP: 5.5.5.6:99"]);
    assert_eq!((r.status, r.header("x-c")), (200, Some("5.5.5.6:99")));
    assert_eq!(get_on(v.port, "/f/", &["X-Real-IP: 5.5.5.5"]).status, 403);
    // `return` runs in the rewrite phase, before the location's realip pass.
    assert_eq!(
        get_on(v.port, "/r/", &["X-Real-IP: 5.5.5.6"]).text(),
        "127.0.0.1"
    );
}

#[test]
fn configuration_errors() {
    let dir = TempDir::new("realipconf");
    for (line, want) in [
        ("set_real_ip_from all;", "is not a network"),
        ("set_real_ip_from 300.0.0.1;", "invalid address or network"),
        ("real_ip_recursive yes;", "it must be \"on\" or \"off\""),
        ("real_ip_header \"X Bad\";", "invalid header name"),
        (
            "set_real_ip_from no-such-host.invalid;",
            "host not found in set_real_ip_from \"no-such-host.invalid\"",
        ),
    ] {
        refused_in_server(&dir, line, want);
    }
}
