//! The stream block: TCP sessions proxied to Debian's redis-server, UDP
//! sessions proxied to Debian's dnsmasq, `return` with `map`, `set`, `geo`
//! and `split_clients`, access rules and `limit_conn`, the access log's
//! session variables, failover between peers, and a reload that leaves an
//! established session on its configuration (scripts/test installs the
//! servers).

mod common;
use common::dns::{Dns, query};
use common::*;
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server on a free loopback port, without persistence.
struct Redis {
    child: Child,
    port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis() -> Option<Redis> {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: redis-server is not installed (scripts/test installs it as root)");
        return None;
    }
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let r = Redis { child, port };
    assert!(
        eventually(10, || TcpStream::connect(("127.0.0.1", port)).is_ok()),
        "redis-server did not start"
    );
    Some(r)
}

/// Send a RESP command line and read one reply line.
fn cmd(s: &mut TcpStream, line: &str) -> String {
    s.write_all(format!("{line}\r\n").as_bytes()).unwrap();
    reply_line(s)
}

/// One line of a reply.
fn reply_line(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    while !out.ends_with(b"\r\n") {
        match s.read(&mut b) {
            Ok(1) => out.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).trim_end().to_string()
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

fn read_all(port: u16) -> String {
    let mut s = connect(port);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn tcp_sessions_reach_redis_and_are_logged() {
    let Some(r) = redis() else { return };
    let dead = free_port();
    let v = Vireo::start(&format!(
        r#"
error_log {{dir}}/logs/error.log info;
events {{}}
stream {{
    log_format s "$protocol $status $bytes_received $bytes_sent $upstream_addr $upstream_bytes_sent $upstream_bytes_received";
    upstream kv {{
        server 127.0.0.1:{dead};
        server 127.0.0.1:{redis};
    }}
    server {{
        listen 127.0.0.1:{{port}};
        proxy_pass kv;
        proxy_connect_timeout 2s;
        access_log {{dir}}/logs/stream.log s;
    }}
}}
"#,
        redis = r.port
    ));
    let mut s = connect(v.port);
    assert_eq!(cmd(&mut s, "PING"), "+PONG");
    assert_eq!(cmd(&mut s, "SET k stream-value"), "+OK");
    assert_eq!(cmd(&mut s, "GET k"), "$12");
    assert_eq!(reply_line(&mut s), "stream-value");
    drop(s);
    // The first peer refused the first session, which went on to redis;
    // then it is left alone for its fail_timeout. The log line has the
    // bytes each way and the status.
    // (The first line is the readiness probe's session, without a byte.)
    let log = || v.dir.read("logs/stream.log");
    assert!(eventually(5, || log().lines().count() == 2), "{}", log());
    let all = log();
    let line = all.lines().last().unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f[0], "TCP", "{line}");
    assert_eq!(f[1], "200", "{line}");
    assert_eq!(f[2], (6 + 20 + 7).to_string(), "{line}");
    assert_eq!(f[3], (7 + 5 + 5 + 14).to_string(), "{line}");
    assert_eq!(
        f[4],
        format!("127.0.0.1:{}", r.port),
        "the first peer failed the probe's session: {line}"
    );
    assert!(line.ends_with(" 33 31"), "{line}");
    assert!(
        all.lines()
            .next()
            .unwrap()
            .contains(&format!("127.0.0.1:{dead}, "))
    );
    assert!(
        v.dir
            .read("logs/error.log")
            .contains("connect() failed (111: Connection refused)")
    );
}

#[test]
fn udp_sessions_reach_dnsmasq() {
    let records = ["--host-record=db.test,10.1.2.3".to_string()];
    let Some(dns) = Dns::start(&records) else {
        return;
    };
    let udp = free_port();
    let v = Vireo::start(&format!(
        r#"
error_log {{dir}}/logs/error.log info;
events {{}}
stream {{
    log_format s "$protocol $status $bytes_received $bytes_sent";
    server {{
        listen 127.0.0.1:{udp} udp;
        proxy_pass 127.0.0.1:{dns};
        proxy_responses 1;
        proxy_timeout 2s;
        access_log {{dir}}/logs/udp.log s;
    }}
    server {{
        listen 127.0.0.1:{{port}};
        return ok;
    }}
}}
"#,
        dns = dns.port
    ));
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for id in [7u16, 8] {
        let q = query(id, "db.test");
        c.send_to(&q, ("127.0.0.1", udp)).unwrap();
        let mut buf = [0u8; 512];
        let n = c.recv(&mut buf).unwrap();
        assert_eq!(&buf[..2], &id.to_be_bytes(), "the answer to query {id}");
        assert_eq!(&buf[n - 4..n], &[10, 1, 2, 3], "db.test's address");
    }
    // Each query was a session of its own (one answer each).
    let log = || v.dir.read("logs/udp.log");
    assert!(eventually(5, || log().lines().count() == 2), "{}", log());
    for line in log().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&f[..2], ["UDP", "200"], "{line}");
        assert_eq!(f[2], query(7, "db.test").len().to_string(), "{line}");
    }
}

#[test]
fn return_with_map_set_geo_split_clients_and_access() {
    let p = [free_port(), free_port(), free_port()];
    let v = Vireo::start(&format!(
        r#"
error_log {{dir}}/logs/error.log info;
events {{}}
stream {{
    map $server_port $who {{
        {p0} first;
        default other;
    }}
    geo $net {{
        127.0.0.0/8 loopback;
        default far;
    }}
    split_clients "$remote_addr" $half {{
        100% all;
    }}
    limit_conn_zone $binary_remote_addr zone=one:1m;
    server {{
        listen 127.0.0.1:{{port}};
        set $greeting "hello";
        return "$greeting $who $net $half $protocol";
    }}
    server {{
        listen 127.0.0.1:{p0};
        return "$who";
    }}
    server {{
        listen 127.0.0.1:{p1};
        deny 127.0.0.1;
        return "never";
    }}
    server {{
        listen 127.0.0.1:{p2};
        limit_conn one 1;
        proxy_pass 127.0.0.1:{p0};
    }}
}}
"#,
        p0 = p[0],
        p1 = p[1],
        p2 = p[2]
    ));
    assert_eq!(read_all(v.port), "hello other loopback all TCP");
    assert_eq!(read_all(p[0]), "first");
    assert_eq!(read_all(p[1]), "", "denied: closed without a byte");
    assert_eq!(read_all(p[2]), "first");
    assert!(
        v.dir
            .read("logs/error.log")
            .contains("access forbidden by rule")
    );
}

#[test]
fn reload_leaves_established_sessions_on_their_configuration() {
    let Some(r) = redis() else { return };
    let conf = format!(
        r#"
error_log {{dir}}/logs/error.log info;
events {{}}
stream {{
    server {{
        listen 127.0.0.1:{{port}};
        proxy_pass 127.0.0.1:{};
    }}
}}
"#,
        r.port
    );
    let v = Vireo::start(&conf);
    let mut old = connect(v.port);
    assert_eq!(cmd(&mut old, "PING"), "+PONG");
    v.reload_with(
        "error_log {dir}/logs/error.log info;\nevents {}\nstream { server { listen 127.0.0.1:{port}; return new; } }\n",
        "configuration reloaded",
    );
    let t0 = Instant::now();
    assert!(
        eventually(5, || read_all(v.port) == "new"),
        "the new configuration"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    // The session opened before goes on with redis.
    assert_eq!(cmd(&mut old, "PING"), "+PONG");
}

#[test]
fn stream_configuration_errors_name_the_line() {
    let dir = TempDir::new("stream-conf");
    let out = test_conf(
        &dir,
        "events {}\nstream {\n    server {\n        listen 127.0.0.1:1;\n    }\n}\n",
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no handler for server in"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = test_conf(
        &dir,
        "events {}\nstream {\n    server {\n        listen 127.0.0.1:1;\n        proxy_pass nowhere;\n    }\n}\n",
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no port in upstream \"nowhere\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = test_conf(
        &dir,
        "events {}\nstream {\n    server {\n        listen 127.0.0.1:1;\n        location / {}\n    }\n}\n",
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("\"location\" directive is not allowed here"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn binary_upgrade_hands_stream_listeners_over_udp_included() {
    let udp = free_port();
    let mut v = Vireo::start(&format!(
        r#"
error_log {{dir}}/logs/error.log info;
pid {{dir}}/vireo.pid;
events {{}}
stream {{
    server {{ listen 127.0.0.1:{udp} udp; return "udp"; }}
    server {{ listen 127.0.0.1:{{port}}; return "tcp"; }}
}}
"#
    ));
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let ask = || {
        c.send_to(b"?", ("127.0.0.1", udp)).unwrap();
        let mut buf = [0u8; 16];
        let n = c.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(ask(), "udp");
    let old = v.pid();
    v.signal(libc::SIGUSR2);
    let pid = || v.dir.read("vireo.pid").trim().parse::<i32>().unwrap_or(0);
    assert!(
        eventually(10, || pid() > 0 && pid() != old as i32),
        "no new binary"
    );
    let new = pid();
    v.signal(libc::SIGQUIT);
    assert!(v.wait_exit(10).is_some(), "the old binary did not exit");
    // The new binary answers on both sockets it inherited.
    assert_eq!(ask(), "udp");
    assert_eq!(read_all(v.port), "tcp");
    let _ = Command::new("kill").arg(new.to_string()).status();
}
