//! error_log: several at once, at http, server and location levels (a
//! request's messages go to its level's logs), levels, syslog targets and
//! debug_connection.

mod common;
use common::*;
use std::net::UdpSocket;
use std::time::Duration;

fn count(text: &str, pat: &str) -> usize {
    text.lines().filter(|l| l.contains(pat)).count()
}

#[test]
fn location_logs_take_their_requests_messages() {
    let v = Vireo::start(
        "error_log {dir}/main1.log info;\nerror_log {dir}/main2.log;\nevents {}\nhttp {\n access_log off;\n \
         server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n  \
         location /a { error_log {dir}/a_warn.log warn; error_log {dir}/a_crit.log crit; }\n  \
         location /dup { error_log {dir}/dup.log; error_log {dir}/dup.log; }\n \
         }\n}\n",
    );
    assert_eq!(v.get("/a/missing").status, 404);
    assert_eq!(v.get("/dup/missing").status, 404);
    assert_eq!(v.get("/other").status, 404);
    assert!(eventually(5, || count(
        &v.dir.read("a_warn.log"),
        "/a/missing"
    ) == 1));
    assert_eq!(count(&v.dir.read("a_crit.log"), "[error]"), 0);
    // Both logs named twice take the message twice, as nginx.
    assert!(eventually(5, || count(
        &v.dir.read("dup.log"),
        "/dup/missing"
    ) == 2));
    // The main logs take only what no level took: the third request.
    let (m1, m2) = (v.dir.read("main1.log"), v.dir.read("main2.log"));
    assert_eq!(
        count(&m1, "/a/missing") + count(&m1, "/dup/missing"),
        0,
        "{m1}"
    );
    assert_eq!(count(&m1, "/other"), 1, "{m1}");
    assert_eq!(count(&m2, "/other"), 1, "{m2}");
    // main2 is at error: the notices at start-up are only in main1.
    assert!(count(&m1, "[notice]") > 0 && count(&m2, "[notice]") == 0);
}

#[test]
fn syslog_targets() {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let sport = rx.local_addr().unwrap().port();
    let v = Vireo::start(&format!(
        "events {{}}\nhttp {{\n access_log off;\n log_format u \"$uri:$status\";\n \
         server {{\n  listen 127.0.0.1:{{port}};\n  root {{dir}}/html;\n  \
         location /e {{ error_log syslog:server=127.0.0.1:{sport},facility=user,tag=SEE_THIS; }}\n  \
         location /a {{ access_log syslog:server=127.0.0.1:{sport},severity=alert,nohostname u; }}\n \
         }}\n}}\n"
    ));
    let mut buf = [0u8; 4096];
    v.get("/e/x");
    let n = rx.recv(&mut buf).unwrap();
    let m = String::from_utf8_lossy(&buf[..n]).into_owned();
    // <PRI>Mmm dd hh:mm:ss host tag: the error log line (user.err = 11).
    assert!(m.starts_with("<11>"), "{m}");
    assert!(m.contains(" SEE_THIS: ") && m.contains("[error]"), "{m}");
    assert!(m.contains("/e/x") && !m.ends_with('\n'), "{m}");
    v.get("/a/y");
    let n = rx.recv(&mut buf).unwrap();
    let m = String::from_utf8_lossy(&buf[..n]).into_owned();
    // local7.alert = 185, no host name.
    assert!(m.starts_with("<185>"), "{m}");
    assert!(m.ends_with(" nginx: /a/y:404"), "{m}");
    assert_eq!(m.split(' ').filter(|s| !s.is_empty()).count(), 5, "{m}");
}

#[test]
fn syslog_configuration_errors() {
    let dir = TempDir::new("errlog-conf");
    for (conf, want) in [
        (
            "error_log syslog:facility=user;",
            "no syslog server specified",
        ),
        (
            "error_log syslog:server=127.0.0.1,bogus;",
            "unknown syslog parameter \"bogus\"",
        ),
        ("error_log memory:32m;", "memory:"),
    ] {
        let out = test_conf(&dir, &format!("{conf}\nevents {{}}\nhttp {{}}\n"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{conf}: {err}");
    }
}

#[test]
fn debug_connection_logs_everything_for_its_clients() {
    let v = Vireo::start(
        "events { debug_connection 127.0.0.0/8; }\nhttp {\n access_log off;\n \
         error_log {dir}/alert.log alert;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    v.get("/missing");
    assert!(eventually(5, || v
        .dir
        .read("alert.log")
        .contains("[debug]")));
    let log = v.dir.read("alert.log");
    assert!(
        log.contains("[error]") && log.contains("http finalize request: 404"),
        "{log}"
    );
}
