//! Upstream addresses with variables: a named block, an address, or a host
//! resolved at request time through `resolver` — here Debian's dnsmasq on a
//! loopback port (scripts/test installs it) — and nginx's 502s with their
//! error log lines when a name cannot be resolved.

mod common;
use common::*;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

/// dnsmasq answering for `.test` only (others: NXDOMAIN).
fn dnsmasq() -> Option<dns::Dns> {
    dns::dnsmasq(&[
        "--host-record=backend.test,127.0.0.1",
        "--host-record=many.test,127.0.0.1",
        "--host-record=many.test,127.0.0.2",
        "--cname=alias.test,backend.test",
    ])
}

/// `{dns}`: the DNS server's port; `{silent}`: a UDP port that never answers.
const CONF: &str = "
events {}
http {
    access_log off;
    upstream named {
        server 127.0.0.1:{port2};
    }
    server {
        listen 127.0.0.1:{port};
        resolver 127.0.0.1:{dns} ipv6=off;
        resolver_timeout 2s;
        location /host {
            proxy_pass http://$arg_h:{port2};
        }
        location /uri {
            proxy_pass http://$arg_h:{port2}/fixed?$arg_q;
        }
        location /named {
            proxy_pass http://$arg_u;
        }
        location /timeout {
            resolver 127.0.0.1:{silent};
            resolver_timeout 1s;
            proxy_pass http://$arg_h:{port2};
        }
        location /fcgi {
            fastcgi_pass $arg_h:9;
        }
    }
    server {
        listen 127.0.0.1:{port2};
        location / {
            return 200 \"backend $request_uri $server_addr\";
        }
    }
}";

#[test]
fn variables_resolver_and_blocks() {
    let Some(dns) = dnsmasq() else { return };
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let conf = CONF
        .replace("{dns}", &dns.port.to_string())
        .replace("{silent}", &silent.local_addr().unwrap().port().to_string());
    let v = Vireo::start(&conf);

    // A name resolved by the resolver; the request's URI goes as it came.
    let r = v.get("/host?h=backend.test");
    assert_eq!(r.status, 200, "{}", v.stderr());
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "backend /host?h=backend.test 127.0.0.1"
    );
    // A CNAME followed; a URI part from variables replaces the request's.
    let r = v.get("/uri?h=ALIAS.test&q=a=1");
    assert_eq!(r.status, 200, "{}", v.stderr());
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "backend /fixed?a=1 127.0.0.1"
    );
    // An address needs no resolver; a name of an upstream block is the block.
    let r = v.get("/host?h=127.0.0.1");
    assert_eq!(r.status, 200);
    let r = v.get("/named?u=named");
    assert_eq!(r.status, 200, "{}", v.stderr());
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        "backend /named?u=named 127.0.0.1"
    );
    // Several addresses: a refused one (nothing listens on 127.0.0.2) is
    // followed by the next, whichever comes first.
    for _ in 0..2 {
        assert_eq!(v.get("/host?h=many.test").status, 200, "{}", v.stderr());
    }

    // Unknown name, then a silent server: 502 and nginx's log lines.
    assert_eq!(v.get("/host?h=nx.test").status, 502);
    assert!(eventually(5, || v
        .stderr()
        .contains("nx.test could not be resolved (3: Host not found)")));
    let t0 = Instant::now();
    assert_eq!(v.get("/timeout?h=slow.test").status, 502);
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    assert!(eventually(5, || v.stderr().contains(
        "slow.test could not be resolved (110: Operation timed out)"
    )));
    // fastcgi_pass with variables takes the same path.
    assert_eq!(v.get("/fcgi?h=nx.test").status, 502);
    drop(silent);
}

#[test]
fn no_resolver() {
    let v = Vireo::start(
        "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        location / { proxy_pass http://$arg_h; }
    }
}",
    );
    assert_eq!(v.get("/?h=example.test").status, 502);
    assert!(eventually(5, || v
        .stderr()
        .contains("no resolver defined to resolve example.test")));
}

#[test]
fn upstream_byte_counts() {
    let v = Vireo::start(
        "
events {}
http {
    log_format up '$upstream_response_length:$upstream_bytes_received:$upstream_bytes_sent';
    access_log {dir}/logs/up.log up;
    server {
        listen 127.0.0.1:{port};
        location / { proxy_pass http://127.0.0.1:{port2}; }
    }
    server {
        listen 127.0.0.1:{port2};
        access_log off;
        location / { return 200 \"0123456789\"; }
    }
}",
    );
    let r = v.get("/x");
    assert_eq!(r.status, 200, "{}", v.stderr());
    assert!(eventually(5, || !v.dir.read("logs/up.log").is_empty()));
    let line = v.dir.read("logs/up.log");
    let f: Vec<u64> = line.trim().split(':').map(|n| n.parse().unwrap()).collect();
    assert_eq!(f[0], 10, "{line}");
    assert!(f[1] > 10 + 17, "{line}");
    assert!(f[2] > 20, "{line}");
}
