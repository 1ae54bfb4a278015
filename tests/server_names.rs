//! Choosing the virtual server: exact names, leading then trailing
//! wildcards (longest first), regex names in order with their captures,
//! `default_server`, the empty name, and where the host comes from (Host
//! header, absolute request URI; missing on HTTP/1.1 is a 400). The
//! expected results are what nginx 1.22 answers.

mod common;
use common::*;

const CONF: &str = r#"
events {}
http {
    access_log off;
    server { listen 127.0.0.1:{port}; server_name first.test; return 200 "first\n"; }
    server { listen 127.0.0.1:{port} default_server; server_name _; return 200 "default\n"; }
    server { listen 127.0.0.1:{port}; server_name example.com www.example.com; return 200 "exact host=$host\n"; }
    server { listen 127.0.0.1:{port}; server_name *.example.com; return 200 "lead\n"; }
    server { listen 127.0.0.1:{port}; server_name *.a.example.com; return 200 "lead-longer\n"; }
    server { listen 127.0.0.1:{port}; server_name www.example.*; return 200 "trail\n"; }
    server { listen 127.0.0.1:{port}; server_name .dot.test; return 200 "dot\n"; }
    server {
        listen 127.0.0.1:{port};
        server_name ~^(?<user>[a-z]+)\.users\.test$ ~^(\d+)\.num\.test$;
        return 200 "regex user=$user one=$1 name=$server_name\n";
    }
    server { listen 127.0.0.1:{port}; server_name ~^www\..*\.test$; return 200 "regex-www\n"; }
    server { listen 127.0.0.1:{port}; server_name ""; return 200 "empty\n"; }
    server { listen 127.0.0.1:{port2}; return 200 "second port first\n"; }
}
"#;

fn host(v: &Vireo, h: &str) -> (u16, String) {
    let r = v.request(&format!(
        "GET / HTTP/1.1\r\nHost: {h}\r\nConnection: close\r\n\r\n"
    ));
    (r.status, r.text())
}

fn text(v: &Vireo, h: &str) -> String {
    host(v, h).1
}

#[test]
fn matching_order() {
    let v = Vireo::start(CONF);
    assert_eq!(text(&v, "first.test"), "first\n");
    assert_eq!(text(&v, "example.com"), "exact host=example.com\n");
    // Exact beats the wildcards that also match.
    assert_eq!(text(&v, "www.example.com"), "exact host=www.example.com\n");
    assert_eq!(text(&v, "x.example.com"), "lead\n");
    // The longest leading wildcard wins.
    assert_eq!(text(&v, "b.a.example.com"), "lead-longer\n");
    assert_eq!(text(&v, "www.example.org"), "trail\n");
    // ".dot.test" is both "dot.test" and "*.dot.test".
    assert_eq!(text(&v, "dot.test"), "dot\n");
    assert_eq!(text(&v, "x.dot.test"), "dot\n");
    // Regexes in order, after the wildcards.
    assert_eq!(
        text(&v, "www.users.test"),
        "regex user=www one=www name=~^(?<user>[a-z]+)\\.users\\.test$\n"
    );
    assert_eq!(text(&v, "www.other.test"), "regex-www\n");
    // Nothing matches: the default_server.
    assert_eq!(text(&v, "nothing.test"), "default\n");
}

#[test]
fn regex_captures() {
    let v = Vireo::start(CONF);
    assert_eq!(
        text(&v, "bob.users.test"),
        "regex user=bob one=bob name=~^(?<user>[a-z]+)\\.users\\.test$\n"
    );
    assert_eq!(
        text(&v, "42.num.test"),
        "regex user= one=42 name=~^(?<user>[a-z]+)\\.users\\.test$\n"
    );
}

#[test]
fn host_normalisation() {
    let v = Vireo::start(CONF);
    assert_eq!(text(&v, "EXAMPLE.COM"), "exact host=example.com\n");
    assert_eq!(text(&v, "example.com:8080"), "exact host=example.com\n");
    assert_eq!(text(&v, "example.com."), "exact host=example.com\n");
}

#[test]
fn where_the_host_comes_from() {
    let v = Vireo::start(CONF);
    // An absolute request URI's host wins over the Host header.
    let r = v.request(
        "GET http://example.com/x HTTP/1.1\r\nHost: first.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "exact host=example.com\n");
    // HTTP/1.1 without Host is refused.
    let r = v.request("GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 400);
    // HTTP/1.0 without Host: the server named "".
    let r = v.request("GET / HTTP/1.0\r\n\r\n");
    assert_eq!(r.text(), "empty\n");
}

#[test]
fn first_server_is_the_default_without_default_server() {
    let v = Vireo::start(CONF);
    let conf = v.dir.read("vireo.conf");
    let port2: u16 = conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("server { listen 127.0.0.1:"))
        .filter_map(|l| l.split(';').next()?.parse().ok())
        .find(|p| *p != v.port)
        .unwrap();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port2)).unwrap();
    use std::io::Write;
    s.write_all(b"GET / HTTP/1.1\r\nHost: whatever\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!(r.text(), "second port first\n");
}

#[test]
fn config_errors() {
    let dir = TempDir::new("sn");
    for (conf, msg) in [
        (
            "server_name ~(;",
            "regex \"(\" compile failed: missing closing parenthesis",
        ),
        ("server_name ~;", "empty regex in server name \"~\""),
    ] {
        let text = format!("events {{}}\nhttp {{\nserver {{\n{conf}\n}}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{conf}: {err}");
        let want = format!("{msg} in {}:4", dir.path().join("t.conf").display());
        assert!(err.contains(&want), "{conf}: want {want}\n{err}");
    }
}
