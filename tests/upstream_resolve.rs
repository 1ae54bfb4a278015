//! `server name resolve` and `server name service=… resolve` in upstream
//! blocks against Debian's dnsmasq whose answers change while vireo runs
//! (its hosts file rewritten and re-read on SIGHUP, its SRV records changed
//! by starting it again): requests reach the new addresses and stop
//! reaching the old ones without a reload, and a reload keeps the
//! addresses when the DNS server is gone.

mod common;
use common::dns::Dns;
use common::*;
use std::collections::HashSet;

/// `{dns}`: dnsmasq's port; `{p2}`: the backend's; `{p3}`, `{p4}`: the SRV
/// records' ports.
const CONF: &str = "
error_log logs/error.log notice;
events {}
http {
    access_log off;
    resolver 127.0.0.1:{dns} ipv6=off;
    resolver_timeout 1s;
    upstream names {
        zone names 64k;
        server app.test:{p2} resolve max_fails=0;
    }
    upstream services {
        zone services 64k;
        server svc.test service=http resolve max_fails=0;
    }
    server {
        listen 127.0.0.1:{port};
        add_header X-Upstream $upstream_addr always;
        location /names { proxy_pass http://names; }
        location /services { proxy_pass http://services; }
    }
    server {
        listen 127.0.0.1:{p2};
        listen 127.0.0.2:{p2};
        listen 127.0.0.3:{p2};
        listen 127.0.0.1:{p3};
        listen 127.0.0.1:{p4};
        location / { return 200 \"$server_addr:$server_port\"; }
    }
}";

/// The peers answering `n` requests to `path` (`-` for a failed one).
fn answering(v: &Vireo, path: &str, n: usize) -> HashSet<String> {
    (0..n)
        .map(|_| {
            let r = v.get(path);
            if r.status == 200 {
                r.text()
            } else {
                "-".to_string()
            }
        })
        .collect()
}

fn set(list: &[&str]) -> HashSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn peers_follow_the_dns_without_a_reload() {
    let dir = TempDir::new("resolve");
    let hosts = dir.path().join("hosts");
    let write_hosts = |text: &str| std::fs::write(&hosts, text).unwrap();
    write_hosts("127.0.0.1 app.test\n127.0.0.1 a.test\n127.0.0.1 b.test\n");
    let (p2, p3, p4) = (free_port().to_string(), free_port(), free_port());
    let srv = |records: &[(&str, u16, u16)]| -> Vec<String> {
        let mut args = vec![
            format!("--addn-hosts={}", hosts.display()),
            "--local-ttl=0".to_string(),
        ];
        args.extend(records.iter().map(|(target, port, priority)| {
            format!("--srv-host=_http._tcp.svc.test,{target},{port},{priority},1")
        }));
        args
    };
    let Some(mut dns) = Dns::start(&srv(&[("a.test", p3, 10), ("b.test", p4, 20)])) else {
        return;
    };
    let conf = CONF
        .replace("{dns}", &dns.port.to_string())
        .replace("{p2}", &p2)
        .replace("{p3}", &p3.to_string())
        .replace("{p4}", &p4.to_string());
    let v = Vireo::start_in(dir, &conf);
    let at = |ip: &str, port: &str| format!("{ip}:{port}");

    // The name's address, found once running.
    let one = set(&[&at("127.0.0.1", &p2)]);
    assert!(
        eventually(5, || answering(&v, "/names", 3) == one),
        "{}",
        v.dir.read("logs/error.log")
    );

    // Two new addresses, the old one gone: both new ones serve, the old
    // one no more.
    write_hosts("127.0.0.2 app.test\n127.0.0.3 app.test\n127.0.0.1 a.test\n127.0.0.1 b.test\n");
    dns.hup();
    let two = set(&[&at("127.0.0.2", &p2), &at("127.0.0.3", &p2)]);
    assert!(
        eventually(10, || answering(&v, "/names", 4) == two),
        "{}",
        v.dir.read("logs/error.log")
    );
    assert_eq!(answering(&v, "/names", 10), two);

    // The name gone: no peer (502); back: served again.
    write_hosts("127.0.0.1 a.test\n127.0.0.1 b.test\n");
    dns.hup();
    assert!(eventually(10, || answering(&v, "/names", 2) == set(&["-"])));
    assert!(
        eventually(5, || v
            .dir
            .read("logs/error.log")
            .contains("app.test could not be resolved (3: Host not found)")),
        "{}",
        v.dir.read("logs/error.log")
    );
    write_hosts("127.0.0.3 app.test\n127.0.0.1 a.test\n127.0.0.1 b.test\n");
    dns.hup();
    assert!(eventually(10, || answering(&v, "/names", 3)
        == set(&[&at("127.0.0.3", &p2)])));

    // SRV: the lowest priority value serves, on its record's port; the
    // other record is a backup.
    let a = set(&[&at("127.0.0.1", &p3.to_string())]);
    assert!(
        eventually(5, || answering(&v, "/services", 3) == a),
        "{}",
        v.dir.read("logs/error.log")
    );
    // The primary target moves to an address nothing listens on: its
    // attempt fails and the backup answers.
    write_hosts("127.0.0.3 app.test\n127.0.0.2 a.test\n127.0.0.1 b.test\n");
    dns.hup();
    let b = set(&[&at("127.0.0.1", &p4.to_string())]);
    assert!(eventually(10, || answering(&v, "/services", 2) == b));
    let r = v.get("/services");
    assert_eq!(
        r.header("x-upstream"),
        Some(format!("127.0.0.2:{p3}, 127.0.0.1:{p4}").as_str())
    );
    // The records change: b.test alone, on p3 now.
    dns.restart(&srv(&[("b.test", p3, 5)]));
    assert!(eventually(10, || {
        let r = v.get("/services");
        r.header("x-upstream") == Some(format!("127.0.0.1:{p3}").as_str())
    }));

    // A reload while the DNS server is gone keeps the addresses (the
    // names cannot be resolved anew).
    drop(dns);
    v.reload_with(&conf, "configuration reloaded");
    assert_eq!(answering(&v, "/names", 3), set(&[&at("127.0.0.3", &p2)]));
    assert_eq!(
        answering(&v, "/services", 3),
        set(&[&at("127.0.0.1", &p3.to_string())])
    );
}

#[test]
fn configuration_errors() {
    let bad = |conf: &str, expect: &str| {
        let dir = TempDir::new("resolve-bad");
        let path = dir.write("vireo.conf", conf);
        let out = std::process::Command::new(BIN)
            .arg("-t")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{conf}");
        assert!(err.contains(expect), "{err}");
    };
    let block = |inner: &str, http: &str| {
        format!(
            "events {{}} http {{ {http} upstream u {{ {inner} }} server {{ listen 127.0.0.1:1; location / {{ proxy_pass http://u; }} }} }}"
        )
    };
    bad(
        &block("server example.test resolve;", "resolver 127.0.0.1;"),
        "resolving names at run time requires upstream \"u\" to be in shared memory",
    );
    bad(
        &block("zone u 64k; server example.test resolve;", ""),
        "no resolver configured for resolving names at run time in upstream \"u\"",
    );
    bad(
        &block(
            "zone u 64k; server example.test service=http;",
            "resolver 127.0.0.1;",
        ),
        "service upstream \"example.test\" requires \"resolve\" parameter",
    );
    bad(
        &block(
            "zone u 64k; server example.test:80 service=http resolve;",
            "resolver 127.0.0.1;",
        ),
        "service upstream \"example.test:80\" may not have port",
    );
    bad(
        &block(
            "zone u 64k; server example.test resolve; resolver 127.0.0.1; resolver 127.0.0.2;",
            "",
        ),
        "\"resolver\" directive is duplicate",
    );
}
