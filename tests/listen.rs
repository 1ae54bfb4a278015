//! `listen` socket options: rcvbuf, sndbuf, so_keepalive, deferred, ipv6only
//! (fastopen and the keepalive interval/count are read back in
//! `server::socket`'s unit tests), and their change on reload. What the
//! kernel holds is read with `ss` and /proc/net/tcp.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn conf(listen_opts: &str) -> String {
    format!(
        "error_log {{dir}}/logs/error.log info;\nevents {{}}\nhttp {{\n access_log off;\n server {{\n  \
         listen 127.0.0.1:{{port}} {listen_opts};\n  root {{dir}}/html;\n }}\n}}\n"
    )
}

/// `ss` lines for `filter` (e.g. `-ltmH` and a `sport = :N` expression).
fn ss(flags: &str, filter: &str) -> String {
    let o = std::process::Command::new("ss")
        .args([flags, filter])
        .output()
        .expect("ss (iproute2) runs");
    assert!(o.status.success(), "{o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `rb` and `tb` (SO_RCVBUF / SO_SNDBUF as the kernel holds them) of the socket listening on `port`.
fn listen_buffers(port: u16) -> (u64, u64) {
    let out = ss("-ltmH", &format!("sport = :{port}"));
    let field = |name: &str| -> u64 {
        let at = out
            .find(&format!(",{name}"))
            .unwrap_or_else(|| panic!("{out}"))
            + name.len()
            + 1;
        let digits: String = out[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    (field("rb"), field("tb"))
}

fn get_over(s: &mut TcpStream, path: &str) -> Resp {
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((r, _)) = Resp::parse_one(&buf) {
            return r;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn rcvbuf_and_sndbuf_are_set_and_changed_by_reload() {
    let v = Vireo::start(&conf("rcvbuf=64k sndbuf=96k"));
    v.dir.write("html/x", "x");
    // The kernel doubles what setsockopt asked for.
    assert_eq!(listen_buffers(v.port), (128 << 10, 192 << 10));
    // Accepted connections inherit them.
    let mut c = v.connect();
    assert_eq!(get_over(&mut c, "/x").text(), "x");
    let local = c.local_addr().unwrap().port();
    let est = ss(
        "-tmnH",
        &format!("sport = :{} and dport = :{local}", v.port),
    );
    assert!(
        est.contains(",rb131072,") && est.contains(",tb196608,"),
        "{est}"
    );

    // A reload sets the new sizes on the socket it keeps.
    v.reload_with(&conf("rcvbuf=32k sndbuf=48k"), "configuration reloaded");
    assert_eq!(listen_buffers(v.port), (64 << 10, 96 << 10));
    assert_eq!(v.get("/x").text(), "x");
}

#[test]
fn so_keepalive_arms_the_keepalive_timer_of_accepted_connections() {
    let v = Vireo::start(&conf("so_keepalive=2h:30:4"));
    v.dir.write("html/x", "x");
    let mut c = v.connect();
    assert_eq!(get_over(&mut c, "/x").text(), "x");
    let local = c.local_addr().unwrap().port();
    let est = ss(
        "-tonH",
        &format!("sport = :{} and dport = :{local}", v.port),
    );
    // TCP_KEEPIDLE 2h: the timer shows just under 120 minutes.
    assert!(
        est.contains("timer:(keepalive,119min") || est.contains("timer:(keepalive,120min"),
        "{est}"
    );

    // Without the option, no keepalive timer.
    let plain = Vireo::start(&conf(""));
    plain.dir.write("html/x", "x");
    let mut c = plain.connect();
    assert_eq!(get_over(&mut c, "/x").text(), "x");
    let local = c.local_addr().unwrap().port();
    let est = ss(
        "-tonH",
        &format!("sport = :{} and dport = :{local}", plain.port),
    );
    assert!(!est.contains("keepalive"), "{est}");
}

/// The server side of the connection from local port `client` to `port`, from
/// /proc/net/tcp: its state in hex (`03` SYN_RECV, `01` ESTABLISHED).
fn server_side_state(port: u16, client: u16) -> Option<String> {
    let (l, r) = (format!(":{port:04X}"), format!(":{client:04X}"));
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[1].ends_with(&l) && f[2].ends_with(&r))
        .map(|f| f[3].to_string())
}

#[test]
fn deferred_accepts_only_once_data_arrives() {
    let v = Vireo::start(&conf("deferred"));
    v.dir.write("html/x", "x");
    let mut c = v.connect();
    let client = c.local_addr().unwrap().port();
    // The handshake is done for the client, but the server side waits in
    // SYN_RECV for data (TCP_DEFER_ACCEPT): nothing to accept yet.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        server_side_state(v.port, client).as_deref(),
        Some("03"),
        "SYN_RECV"
    );
    assert_eq!(get_over(&mut c, "/x").text(), "x");
    assert_eq!(
        server_side_state(v.port, client).as_deref(),
        Some("01"),
        "ESTABLISHED"
    );

    // Without it the connection is established (and accepted) at once.
    let plain = Vireo::start(&conf(""));
    let c = plain.connect();
    let client = c.local_addr().unwrap().port();
    assert!(eventually(2, || server_side_state(plain.port, client)
        .as_deref()
        == Some("01")));

    // A reload dropping `deferred` turns TCP_DEFER_ACCEPT off on the kept socket.
    v.reload_with(&conf(""), "configuration reloaded");
    let c = v.connect();
    let client = c.local_addr().unwrap().port();
    assert!(eventually(2, || server_side_state(v.port, client)
        .as_deref()
        == Some("01")));
}

#[test]
fn ipv6only_off_serves_ipv4_on_an_ipv6_socket() {
    // A v4-mapped address binds only with IPV6_V6ONLY off: the IPv6 socket then
    // serves the IPv4 loopback (the harness connects to 127.0.0.1).
    let v = Vireo::start(
        "events {}\nhttp {\n access_log off;\n server {\n  listen [::ffff:127.0.0.1]:{port} ipv6only=off;\n  \
         root {dir}/html;\n }\n}\n",
    );
    v.dir.write("html/x", "mapped");
    assert_eq!(v.get("/x").text(), "mapped");

    // With the default (on) the same address cannot be bound.
    let dir = TempDir::new("v6only");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let port = free_port();
    let conf = dir.write(
        "v.conf",
        format!(
            "pid logs/v.pid;\nevents {{}}\nhttp {{ access_log off; server {{ listen [::ffff:127.0.0.1]:{port}; }} }}\n"
        ),
    );
    let out = run_conf(&dir, &conf);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("bind() to [::ffff:127.0.0.1]:{port} failed")),
        "{err}"
    );
}

#[test]
fn bind_and_fastopen_are_accepted() {
    let v = Vireo::start(&conf("bind fastopen=16 backlog=64"));
    v.dir.write("html/x", "x");
    assert_eq!(v.get("/x").text(), "x");
    assert!(!v.dir.read("logs/error.log").contains("setsockopt"));
}
