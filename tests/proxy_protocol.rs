//! `listen … proxy_protocol`: v1 and v2 headers, their variables and TLVs,
//! malformed and missing headers, `real_ip_header proxy_protocol`, and TLS
//! and HTTP/2 after the header (curl through a relay that prepends it, as a
//! balancer would). Expectations checked against nginx 1.22.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

const CONF: &str = "
error_log logs/error.log info;
events {}
http {
    log_format pp \"$remote_addr:$remote_port $realip_remote_addr\";
    client_header_timeout 1s;
    server {
        listen 127.0.0.1:{port} http2 proxy_protocol;
        listen 127.0.0.1:{port2} ssl http2 proxy_protocol;
        ssl_certificate cert.pem;
        ssl_certificate_key key.pem;
        set_real_ip_from 127.0.0.1;
        location /vars {
            return 200 \"$remote_addr|$proxy_protocol_addr|$proxy_protocol_port|$proxy_protocol_server_addr|$proxy_protocol_server_port|$proxy_protocol_tlv_alpn|$proxy_protocol_tlv_0xae|$server_protocol|$scheme\";
        }
        location /real {
            real_ip_header proxy_protocol;
            access_log logs/real.log pp;
            root {dir}/html;
            add_header X-Addr \"$remote_addr|$remote_port|$realip_remote_addr\";
        }
        location /real/deny {
            real_ip_header proxy_protocol;
            deny 192.0.2.1;
        }
        location /untrusted {
            set_real_ip_from 10.0.0.0/8;
            real_ip_header proxy_protocol;
            root {dir}/html;
            add_header X-Addr $remote_addr;
        }
    }
}";

fn start() -> Vireo {
    let dir = TempDir::new("pp");
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "30", "-newkey", "ec"])
        .args(["-pkeyopt", "ec_paramgen_curve:prime256v1"])
        .args([
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-subj",
            "/CN=localhost",
        ])
        .current_dir(dir.path())
        .output()
        .expect("openssl");
    assert!(out.status.success());
    Vireo::start_in(dir, CONF)
}

fn port2(v: &Vireo) -> u16 {
    let conf = v.dir.read("vireo.conf");
    let at = conf.find("ssl http2").unwrap();
    let line = &conf[..at];
    let from = line.rfind(':').unwrap() + 1;
    line[from..].trim().parse().unwrap()
}

/// The PROXY header and a request on one connection
/// (the header itself split at `split`, its second part sent a moment later).
fn send(v: &Vireo, header: &[u8], split: usize, path: &str) -> Vec<u8> {
    let mut s = v.connect();
    s.write_all(&header[..split]).unwrap();
    if split < header.len() {
        std::thread::sleep(Duration::from_millis(100));
        s.write_all(&header[split..]).unwrap();
    }
    // Refused headers close the connection: the request may not get through.
    let _ = write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    read_to_close(&mut s)
}

fn text(raw: &[u8]) -> String {
    Resp::parse(raw).expect("a response").text()
}

fn v2(fam: u8, addrs: &[u8], tlvs: &[u8]) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21".to_vec();
    h.push(fam);
    h.extend_from_slice(&((addrs.len() + tlvs.len()) as u16).to_be_bytes());
    h.extend_from_slice(addrs);
    h.extend_from_slice(tlvs);
    h
}

#[test]
fn v1_headers_give_the_variables() {
    let v = start();
    let tcp4 = b"PROXY TCP4 192.0.2.1 192.0.2.2 123 5678\r\n";
    assert_eq!(
        text(&send(&v, tcp4, tcp4.len(), "/vars")),
        "127.0.0.1|192.0.2.1|123|192.0.2.2|5678|||HTTP/1.0|http"
    );
    // A header in two pieces is waited for.
    assert_eq!(
        text(&send(&v, tcp4, 10, "/vars")),
        "127.0.0.1|192.0.2.1|123|192.0.2.2|5678|||HTTP/1.0|http"
    );
    let tcp6 = b"PROXY TCP6 2001:Db8::1 2001:Db8::2 123 5678\r\n";
    assert_eq!(
        text(&send(&v, tcp6, tcp6.len(), "/vars")),
        "127.0.0.1|2001:Db8::1|123|2001:Db8::2|5678|||HTTP/1.0|http"
    );
    for unknown in [&b"PROXY UNKNOWN\r\n"[..], b"PROXY UNKNOWN 1 2 3 4 5 6\r\n"] {
        assert_eq!(
            text(&send(&v, unknown, unknown.len(), "/vars")),
            "127.0.0.1|||||||HTTP/1.0|http"
        );
    }
}

#[test]
fn v2_headers_and_tlvs() {
    let v = start();
    let inet = [192, 0, 2, 1, 192, 0, 2, 2, 0, 123, 0x16, 0x2e];
    let tlvs = [&[0x01, 0, 2][..], b"h2", &[0xae, 0, 3], b"abc"].concat();
    let h = v2(0x11, &inet, &tlvs);
    assert_eq!(
        text(&send(&v, &h, 14, "/vars")),
        "127.0.0.1|192.0.2.1|123|192.0.2.2|5678|h2|abc|HTTP/1.0|http"
    );
    let mut six = [0u8; 36];
    six[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    six[15] = 1;
    six[16..20].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    six[31] = 2;
    six[33] = 7;
    six[35] = 8;
    assert_eq!(
        text(&send(&v, &v2(0x21, &six, &[]), 52, "/vars")),
        "127.0.0.1|2001:db8::1|7|2001:db8::2|8|||HTTP/1.0|http"
    );
    // UNSPEC: accepted, no addresses.
    assert_eq!(
        text(&send(&v, &v2(0x01, &[], &[]), 16, "/vars")),
        "127.0.0.1|||||||HTTP/1.0|http"
    );
}

#[test]
fn malformed_or_missing_headers_close_the_connection() {
    let v = start();
    // A request without the header: closed unanswered.
    assert!(v.raw(b"GET /vars HTTP/1.0\r\n\r\n").is_empty());
    let bogus = b"BOGUS TCP4 192.0.2.1 192.0.2.2 1234 5678\r\n";
    assert!(send(&v, bogus, bogus.len(), "/vars").is_empty());
    let bad_port = b"PROXY TCP4 192.0.2.1 192.0.2.2 1234 99999\r\n";
    assert!(send(&v, bad_port, bad_port.len(), "/vars").is_empty());
    // v2 too short for its family.
    assert!(send(&v, &v2(0x11, &[1, 2, 3], &[]), 19, "/vars").is_empty());
    assert!(eventually(5, || {
        error_log(&v).contains(
        "broken header: \"BOGUS TCP4 192.0.2.1 192.0.2.2 1234 5678\" while reading PROXY protocol, client: 127.0.0.1"
    )
    }));
    // Nothing within client_header_timeout: closed.
    let mut s = v.connect();
    s.write_all(b"PROXY TCP4 ").unwrap();
    let t = std::time::Instant::now();
    let mut buf = [0u8; 16];
    assert_eq!(s.read(&mut buf).unwrap_or(0), 0);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(eventually(5, || error_log(&v)
        .contains("client timed out while reading PROXY protocol")));
}

#[test]
fn realip_takes_the_header_address_from_a_trusted_peer() {
    let v = start();
    v.dir.write("html/real", "x");
    v.dir.write("html/untrusted", "x");
    // Taken when the request is read, or in the location (before the
    // access checks, after `return`, as nginx).
    let addr = |raw: Vec<u8>| {
        let r = Resp::parse(&raw).expect("a response");
        assert_eq!(r.status, 200);
        r.header("x-addr").unwrap().to_string()
    };
    let tcp4 = b"PROXY TCP4 192.0.2.1 192.0.2.2 123 5678\r\n";
    assert_eq!(
        addr(send(&v, tcp4, tcp4.len(), "/real")),
        "192.0.2.1|123|127.0.0.1"
    );
    let tcp6 = b"PROXY TCP6 2001:Db8::1 2001:Db8::2 4321 5678\r\n";
    assert_eq!(
        addr(send(&v, tcp6, tcp6.len(), "/real")),
        "2001:db8::1|4321|127.0.0.1"
    );
    let r = Resp::parse(&send(&v, tcp4, tcp4.len(), "/real/deny")).unwrap();
    assert_eq!(r.status, 403);
    // The connection's own address is not trusted here.
    assert_eq!(addr(send(&v, tcp4, tcp4.len(), "/untrusted")), "127.0.0.1");
    // No addresses in the header: the connection's.
    let unk = b"PROXY UNKNOWN\r\n";
    assert!(addr(send(&v, unk, unk.len(), "/real")).starts_with("127.0.0.1|"));
    let log = access_lines_in(&v, "logs/real.log", 3);
    assert_eq!(log[0], "192.0.2.1:123 127.0.0.1");
    assert_eq!(log[1], "2001:db8::1:4321 127.0.0.1");
}

fn access_lines_in(v: &Vireo, rel: &str, n: usize) -> Vec<String> {
    let read = || -> Vec<String> {
        std::fs::read_to_string(v.dir.path().join(rel))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    };
    eventually(5, || read().len() >= n);
    read()
}

/// A balancer: each connection to the returned port is relayed to `to`
/// after `header`.
fn relay(to: u16, header: Vec<u8>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let mut up = TcpStream::connect(("127.0.0.1", to)).unwrap();
            up.write_all(&header).unwrap();
            let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut up2);
                let _ = up2.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut up, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}

fn curl(port: u16, scheme: &str, args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "20"])
        .args(args)
        .arg(format!("{scheme}://127.0.0.1:{port}/vars"))
        .output()
        .expect("curl");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tls_and_http2_after_the_header() {
    let v = start();
    let tls = relay(
        port2(&v),
        b"PROXY TCP4 192.0.2.9 192.0.2.2 1111 443\r\n".to_vec(),
    );
    assert_eq!(
        curl(tls, "https", &["--http1.1"]),
        "127.0.0.1|192.0.2.9|1111|192.0.2.2|443|||HTTP/1.1|https"
    );
    assert_eq!(
        curl(tls, "https", &["--http2"]),
        "127.0.0.1|192.0.2.9|1111|192.0.2.2|443|||HTTP/2.0|https"
    );
    let inet = [192, 0, 2, 3, 192, 0, 2, 4, 0, 5, 0, 6];
    let plain = relay(v.port, v2(0x11, &inet, &[]));
    assert_eq!(
        curl(plain, "http", &["--http2-prior-knowledge"]),
        "127.0.0.1|192.0.2.3|5|192.0.2.4|6|||HTTP/2.0|http"
    );
}
