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
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server on a free loopback port, without persistence.
struct Redis {
    _child: Daemon,
    port: u16,
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
    let r = Redis {
        _child: Daemon(child),
        port,
    };
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
    let dead = closed_port();
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

/// `server name resolve` and `service=` in stream upstream blocks against
/// dnsmasq whose hosts file changes while vireo runs: sessions reach the
/// name's new addresses without a reload, a service's record gives the
/// port, a UDP session reaches a resolved peer; the block's own resolver
/// or the stream level's.
#[test]
fn upstream_names_resolved_at_run_time() {
    let dir = TempDir::new("stream-resolve");
    let hosts = dir.path().join("hosts");
    let write_hosts = |text: &str| std::fs::write(&hosts, text).unwrap();
    write_hosts("127.0.0.1 app.test\n127.0.0.1 a.test\n127.0.0.1 ns.test\n");
    let (p1, p2, p3, p4, udp) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let args = [
        format!("--addn-hosts={}", hosts.display()),
        "--local-ttl=0".to_string(),
        format!("--srv-host=_kv._tcp.svc.test,a.test,{p3},1,1"),
        "--host-record=db.test,10.1.2.3".to_string(),
    ];
    let Some(dns) = Dns::start(&args) else { return };
    let v = Vireo::start_in(
        dir,
        &format!(
            r#"
error_log {{dir}}/logs/error.log info;
events {{}}
stream {{
    resolver 127.0.0.1:{dns} ipv6=off;
    resolver_timeout 1s;
    log_format up $upstream_addr;
    upstream names {{
        zone names 64k;
        server app.test:{p2} resolve max_fails=0;
    }}
    upstream services {{
        zone services 64k;
        resolver 127.0.0.1:{dns} ipv6=off valid=1s;
        resolver_timeout 2s;
        server svc.test service=kv resolve;
    }}
    upstream ns {{
        zone ns 64k;
        server ns.test:{dns} resolve;
    }}
    server {{
        listen 127.0.0.1:{{port}};
        return ok;
    }}
    server {{
        listen 127.0.0.1:{p1};
        proxy_pass names;
        access_log {{dir}}/logs/names.log up;
    }}
    server {{
        listen 127.0.0.1:{p4};
        proxy_pass services;
    }}
    server {{
        listen 127.0.0.1:{udp} udp;
        proxy_pass ns;
        proxy_responses 1;
    }}
    server {{
        listen 127.0.0.1:{p2};
        listen 127.0.0.2:{p2};
        listen 127.0.0.1:{p3};
        return "$server_addr:$server_port";
    }}
}}
"#,
            dns = dns.port
        ),
    );
    let err = || v.dir.read("logs/error.log");
    let at = |ip: &str, port: u16| format!("{ip}:{port}");
    assert!(
        eventually(5, || read_all(p1) == at("127.0.0.1", p2)),
        "{}",
        err()
    );
    // The name moves: sessions follow without a reload.
    write_hosts("127.0.0.2 app.test\n127.0.0.1 a.test\n127.0.0.1 ns.test\n");
    dns.hup();
    assert!(
        eventually(10, || read_all(p1) == at("127.0.0.2", p2)),
        "{}",
        err()
    );
    // The name gone: no peer, the session ends at once, logged with the
    // block's name as nginx logs it.
    write_hosts("127.0.0.1 a.test\n127.0.0.1 ns.test\n");
    dns.hup();
    assert!(eventually(10, || read_all(p1).is_empty()), "{}", err());
    assert!(eventually(5, || v
        .dir
        .read("logs/names.log")
        .lines()
        .any(|l| l == "names")));
    assert!(err().contains("app.test could not be resolved (3: Host not found)"));
    // The service's record gives the port.
    assert!(
        eventually(5, || read_all(p4) == at("127.0.0.1", p3)),
        "{}",
        err()
    );
    // A UDP session to a resolved peer: dnsmasq itself.
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let answered = eventually(5, || {
        let _ = c.send_to(&query(9, "db.test"), ("127.0.0.1", udp));
        let mut buf = [0u8; 512];
        matches!(c.recv(&mut buf), Ok(n) if buf[n - 4..n] == [10, 1, 2, 3])
    });
    assert!(answered, "{}", err());
}

#[test]
fn stream_resolve_needs_a_zone_and_a_resolver() {
    let dir = TempDir::new("stream-resolve-conf");
    let stderr = |conf: &str| String::from_utf8_lossy(&test_conf(&dir, conf).stderr).into_owned();
    let server = "server { listen 127.0.0.1:1; proxy_pass u; }";
    let e = stderr(&format!(
        "events {{}}\nstream {{\n    upstream u {{\n        zone u 64k;\n        server app.test:80 resolve;\n    }}\n    {server}\n}}\n"
    ));
    assert!(
        e.contains("no resolver configured for resolving names at run time in upstream \"u\"")
            && e.contains(":3"),
        "{e}"
    );
    let e = stderr(&format!(
        "events {{}}\nstream {{\n    resolver 127.0.0.1;\n    upstream u {{\n        server app.test:80 resolve;\n    }}\n    {server}\n}}\n"
    ));
    assert!(e.contains("to be in shared memory"), "{e}");
    let e = stderr(&format!(
        "events {{}}\nstream {{\n    resolver 127.0.0.1;\n    upstream u {{\n        zone u 64k;\n        server app.test resolve;\n    }}\n    {server}\n}}\n"
    ));
    assert!(e.contains("no port in upstream \"app.test\""), "{e}");
    // A service takes its ports from its records; the stream server's
    // resolver is its own (for proxy_pass with variables), not the block's.
    let out = test_conf(
        &dir,
        "events {}\nstream {\n    resolver 127.0.0.1;\n    upstream u {\n        zone u 64k;\n        server svc.test service=kv resolve;\n    }\n    server { listen 127.0.0.1:1; resolver 127.0.0.2; resolver_timeout 5s; proxy_pass u; }\n}\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Send `bytes` to `port` and read the answer to the close.
fn exchange(port: u16, bytes: &[u8]) -> String {
    let mut s = connect(port);
    s.write_all(bytes).unwrap();
    String::from_utf8_lossy(&read_to_close(&mut s)).into_owned()
}

#[test]
fn pass_hands_connections_to_http_and_stream_listeners() {
    let p: Vec<u16> = (0..9).map(|_| free_port()).collect();
    let v = Vireo::start(&format!(
        r#"
error_log {{dir}}/logs/error.log info;
events {{}}
stream {{
    log_format s "$server_port $status";
    access_log {{dir}}/logs/stream.log s;
    set_real_ip_from 127.0.0.1;
    geo $to {{
        default 127.0.0.1:{{port}};
    }}
    server {{
        listen 127.0.0.1:{p0} proxy_protocol;
        pass 127.0.0.1:{{port}};
    }}
    server {{
        listen 127.0.0.1:{p1};
        pass $to;
    }}
    server {{
        listen 127.0.0.1:{p2};
        pass 127.0.0.1:{p3};
    }}
    server {{
        listen 127.0.0.1:{p3};
        return "stream:$server_port:$remote_addr\n";
    }}
    server {{
        listen 127.0.0.1:{p4};
        pass unix:{{dir}}/http.sock;
    }}
    server {{
        listen 127.0.0.1:{p5};
        pass 127.0.0.1:{p8};
    }}
    server {{
        listen 127.0.0.1:{p6};
        pass 127.0.0.1:1;
    }}
    server {{
        listen 127.0.0.1:{p7};
        pass $server_addr:$server_port;
    }}
    server {{
        listen 127.0.0.1:{p7} udp;
        pass 127.0.0.1:{{port}};
    }}
}}
http {{
    server {{
        listen 127.0.0.1:{{port}};
        listen unix:{{dir}}/http.sock;
        location / {{
            return 200 "http:$server_port:$remote_addr:$proxy_protocol_addr:$connection_requests\n";
        }}
    }}
    server {{
        listen 127.0.0.1:{p8} proxy_protocol;
        location / {{
            return 200 "pp:$server_port:$proxy_protocol_addr:$proxy_protocol_port\n";
        }}
    }}
}}
"#,
        p0 = p[0],
        p1 = p[1],
        p2 = p[2],
        p3 = p[3],
        p4 = p[4],
        p5 = p[5],
        p6 = p[6],
        p7 = p[7],
        p8 = p[8],
    ));
    let get =
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    // The PROXY header is read where the connection came in: realip of
    // the stream server gives the http server its client address.
    let mut with_pp = b"PROXY TCP4 192.0.2.7 127.0.0.1 5555 80\r\n".to_vec();
    with_pp.extend_from_slice(get);
    let out = exchange(p[0], &with_pp);
    let want = format!("http:{}:192.0.2.7:192.0.2.7:", v.port);
    assert_eq!(out.matches(&want).count(), 2, "{out}");
    assert!(
        out.contains(&format!("{want}2\n")),
        "keep-alive goes on: {out}"
    );
    // An address from a variable.
    let out = exchange(p[1], get);
    assert!(
        out.contains(&format!("http:{}:127.0.0.1::2\n", v.port)),
        "{out}"
    );
    // To a stream listener, and to a unix one.
    assert_eq!(read_all(p[2]), format!("stream:{}:127.0.0.1\n", p[3]));
    let out = exchange(p[4], get);
    assert!(out.contains(":127.0.0.1::2\n"), "{out}");
    // An address with proxy_protocol reads its own header off the connection.
    let mut pp = b"PROXY TCP4 198.51.100.1 127.0.0.1 4444 80\r\n".to_vec();
    pp.extend_from_slice(b"GET / HTTP/1.0\r\n\r\n");
    let out = exchange(p[5], &pp);
    assert!(
        out.ends_with(&format!("pp:{}:198.51.100.1:4444\n", p[8])),
        "{out}"
    );
    // No listener there: the session ends (200, logged).
    assert_eq!(read_all(p[6]), "");
    // Passed to itself: after 10 passes, refused (500).
    assert_eq!(read_all(p[7]), "");
    // A UDP session is never passed.
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    u.send_to(b"datagram", ("127.0.0.1", p[7])).unwrap();
    // Passed sessions are not logged; those that could not pass are.
    let log = || v.dir.read("logs/stream.log");
    let want = [
        format!("{} 200", p[3]),
        format!("{} 200", p[6]),
        format!("{} 500", p[7]),
    ];
    assert!(
        eventually(5, || {
            let l = log();
            want.iter().all(|w| l.contains(w.as_str())) && l.matches(" 500").count() == 2
        }),
        "{}",
        log()
    );
    assert_eq!(log().lines().count(), 4, "{}", log());
    let errors = error_log(&v);
    assert!(
        errors.contains("port not found for \"127.0.0.1:1\" while passing connection to port"),
        "{errors}"
    );
    assert!(errors.contains("stream pass cycle"), "{errors}");
    assert!(errors.contains("cannot pass udp connection"), "{errors}");
}

#[test]
fn pass_addresses_are_checked_at_load() {
    let dir = TempDir::new("stream-pass-conf");
    for (addr, want) in [
        ("127.0.0.1", "\"pass\" directive has no port in"),
        ("localhost:80", "\"pass\" directive has no addresses in"),
        (
            "127.0.0.1:http",
            "invalid port in \"127.0.0.1:http\" of the \"pass\" directive in",
        ),
    ] {
        let out = test_conf(
            &dir,
            &format!(
                "events {{}}\nstream {{\n    server {{\n        listen 127.0.0.1:1;\n        pass {addr};\n    }}\n}}\n"
            ),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want) && err.contains(":5"), "{addr}: {err}");
    }
    let out = test_conf(
        &dir,
        "events {}\nstream {\n    server {\n        listen 127.0.0.1:1;\n        pass 127.0.0.1:2;\n        return x;\n    }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"return\" directive is duplicate"), "{err}");
}
