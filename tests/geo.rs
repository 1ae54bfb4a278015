//! geo: networks (longest prefix), `default`, `delete`, `include`, ranges
//! (insert, split, delete across /16s), an address variable (IPv4, IPv6,
//! not an address), `proxy`/`proxy_recursive` over X-Forwarded-For, realip
//! changing the address looked up, unix-socket clients, and configuration
//! errors with file:line. Expectations follow nginx's geo.t and geo_unix.t.

mod common;
use common::*;

const CONF: &str = "
events {}
error_log {dir}/logs/error.log info;
http {
    access_log off;
    geo $geo {
        127.0.0.0/8   loopback;
        127.0.0.1     host;
        192.0.2.0/24  test;
        0.0.0.0/0     world;
    }
    geo $geo_include {
        include       {dir}/geo.conf;
        192.0.2.0/24  test;
        0.0.0.0/0     world;
    }
    geo $geo_delete {
        127.0.0.0/8   loopback;
        192.0.2.0/24  test;
        0.0.0.0/0     world;
        delete        127.0.0.0/8;
    }
    geo $arg_ip $geo_from_arg {
        default        default;
        127.0.0.0/8    loopback;
        192.0.2.0/24   test;
        192.0.2.128/25 upper;
        2001:db8::/32  doc6;
        2001:db8:1::/48 doc6one;
        255.255.255.255 none;
    }
    geo $arg_ip $geo_arg_ranges {
        ranges;
        default                default;
        127.0.0.0-127.0.0.1    loopback;
        10.10.3.0-10.11.2.255  foo;
        10.12.3.0-10.13.2.255  foo2;
        delete                 10.10.3.0-10.11.2.255;
        192.0.2.0-192.0.2.255  test;
        192.0.2.10-192.0.2.20  inner;
    }
    geo $geo_no_default {
        192.0.2.0/24  test;
    }
    geo $geo_proxy {
        default       default;
        proxy         127.0.0.1;
        127.0.0.0/8   loopback;
        192.0.2.0/24  test;
    }
    geo $geo_proxy_recursive {
        proxy_recursive;
        default       default;
        proxy         127.0.0.1;
        127.0.0.0/8   loopback;
        192.0.2.0/24  test;
    }
    geo $geo_ranges {
        ranges;
        default                    default;
        127.0.0.0-127.255.255.255  loopback;
        192.0.2.0-192.0.2.255      test;
    }
    geo $geo_ranges_include {
        ranges;
        default                default;
        include                {dir}/geo-ranges.conf;
        192.0.2.0-192.0.2.255  test;
    }
    geo $geo_unix {
        default          default;
        255.255.255.255  none;
    }
    geo $geo_unix_ranges {
        ranges;
        0.0.0.0-255.255.255.254  test;
        default                  none;
    }
    server {
        listen 127.0.0.1:{port};
        listen unix:{dir}/u.sock;
        add_header X-Geo $geo;
        add_header X-Inc $geo_include;
        add_header X-Del $geo_delete;
        add_header X-Arg $geo_from_arg;
        add_header X-ARa $geo_arg_ranges;
        add_header X-XFF $geo_proxy;
        add_header X-XFR $geo_proxy_recursive;
        add_header X-Ran $geo_ranges;
        add_header X-RIn $geo_ranges_include;
        add_header X-Unix $geo_unix;
        add_header X-URa $geo_unix_ranges;
        location / { return 200 ok; }
        location /none { return 200 \"[$geo_no_default]\"; }
        location /unix { proxy_pass http://unix:{dir}/u.sock:/; }
        location /realip/ {
            root {dir}/html;
            set_real_ip_from 127.0.0.1;
            real_ip_header X-Real-IP;
            add_header X-Real \"$remote_addr $geo\";
        }
    }
}";

fn start() -> Vireo {
    let dir = TempDir::new("geo");
    dir.write("geo.conf", "127.0.0.0/8  loopback;\n");
    dir.write("html/realip/index.html", "ok\n");
    dir.write("geo-ranges.conf", "127.0.0.0-127.255.255.255  loopback;\n");
    Vireo::start_in(dir, CONF)
}

fn get(v: &Vireo, path: &str, headers: &[&str]) -> Resp {
    let h: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    v.request(&format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{h}Connection: close\r\n\r\n"
    ))
}

fn h<'a>(r: &'a Resp, name: &str) -> &'a str {
    r.header(name).unwrap_or("<none>")
}

#[test]
fn networks_ranges_and_variables() {
    let v = start();
    let r = get(&v, "/", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(h(&r, "x-geo"), "host", "the longest prefix wins");
    assert_eq!(h(&r, "x-inc"), "loopback");
    assert_eq!(h(&r, "x-del"), "world");
    assert_eq!(h(&r, "x-ran"), "loopback");
    assert_eq!(h(&r, "x-rin"), "loopback");
    assert_eq!(h(&r, "x-unix"), "default");
    assert_eq!(h(&r, "x-ura"), "test");
    assert_eq!(get(&v, "/none", &[]).text(), "[]");

    let arg = |ip: &str| {
        let r = get(&v, &format!("/?ip={ip}"), &[]);
        (h(&r, "x-arg").to_string(), h(&r, "x-ara").to_string())
    };
    assert_eq!(arg("192.0.2.1").0, "test");
    assert_eq!(arg("192.0.2.200").0, "upper");
    assert_eq!(arg("10.0.0.1"), ("default".into(), "default".into()));
    assert_eq!(arg("10.13.2.1").1, "foo2");
    assert_eq!(arg("10.11.2.1").1, "default", "deleted range");
    assert_eq!(arg("192.0.2.15").1, "inner");
    assert_eq!(arg("192.0.2.21").1, "test");
    assert_eq!(arg("127.0.0.1").1, "loopback");
    assert_eq!(arg("2001:db8:1::5").0, "doc6one");
    assert_eq!(arg("2001:db8:2::5").0, "doc6");
    assert_eq!(arg("::ffff:192.0.2.1").0, "test");
    assert_eq!(arg("2001:db8::1").1, "default");
    // Not an address: looked up as 255.255.255.255.
    assert_eq!(arg("nonsense"), ("none".into(), "default".into()));
}

#[test]
fn proxy_and_x_forwarded_for() {
    let v = start();
    let xff = |list: &str| {
        let r = get(&v, "/", &[&format!("X-Forwarded-For: {list}")]);
        (h(&r, "x-xff").to_string(), h(&r, "x-xfr").to_string())
    };
    assert_eq!(xff("192.0.2.1").0, "test");
    assert_eq!(xff("10.0.0.1").0, "default");
    assert_eq!(xff("10.0.0.1, 192.0.2.1").0, "test");
    assert_eq!(
        xff("192.0.2.1, 127.0.0.1"),
        ("loopback".into(), "test".into())
    );
    // Without the header: the connection's address.
    let r = get(&v, "/", &[]);
    assert_eq!(h(&r, "x-xff"), "loopback");
    // $geo has no proxy: the header changes nothing.
    let r = get(&v, "/", &["X-Forwarded-For: 192.0.2.1"]);
    assert_eq!(h(&r, "x-geo"), "host");
}

#[test]
fn realip_sets_the_address_looked_up() {
    let v = start();
    // realip's location pass runs before access (as nginx's preaccess), so
    // a static file sees it; `return` would answer before it.
    let real = |headers: &[&str]| h(&get(&v, "/realip/", headers), "x-real").to_string();
    assert_eq!(real(&["X-Real-IP: 192.0.2.7"]), "192.0.2.7 test");
    assert_eq!(real(&["X-Real-IP: 10.9.9.9"]), "10.9.9.9 world");
    assert_eq!(real(&[]), "127.0.0.1 host");
}

#[test]
fn unix_socket_clients_look_up_255_255_255_255() {
    let v = start();
    let r = get(&v, "/unix", &[]);
    assert_eq!(r.status, 200);
    // The proxied reply's headers come from the unix-socket server.
    let all: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-unix"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(all.contains(&"none"), "{all:?}");
    let ranges: Vec<&str> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-ura"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert!(ranges.contains(&"none"), "{ranges:?}");
}

#[test]
fn errors_and_warnings_name_file_and_line() {
    let dir = TempDir::new("geo-err");
    let conf_path = dir.path().join("t.conf").display().to_string();
    let cases: &[(&str, &str, u32)] = &[
        ("192.0.2.0/33 x;", "invalid network \"192.0.2.0/33\"", 4),
        ("nonsense x;", "invalid network \"nonsense\"", 4),
        ("a b c;", "invalid number of the geo parameters", 4),
        ("ranges;\n1.2.3.4 x;", "invalid range \"1.2.3.4\"", 5),
        (
            "ranges;\n1.2.3.9-1.2.3.1 x;",
            "invalid range \"1.2.3.9-1.2.3.1\"",
            5,
        ),
        (
            "ranges;\n1.0.0.0-1.0.0.10 a;\n1.0.0.5-1.0.0.20 b;",
            "range \"1.0.0.5-1.0.0.20\" overlaps \"1.0.0.0-1.0.0.10\"",
            6,
        ),
        (
            "10.0.0.0/8 a;\nranges;",
            "the \"ranges\" directive must be the first directive inside \"geo\" block",
            5,
        ),
        ("proxy bad;", "invalid network \"bad\"", 4),
    ];
    for (body, msg, line) in cases {
        let conf = format!("events {{}}\nhttp {{\n    geo $g {{\n{body}\n    }}\n}}\n");
        let out = test_conf(&dir, &conf);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{body}: {err}");
        let want = format!("{msg} in {conf_path}:{line}");
        assert!(err.contains(&want), "{body}: want {want}\n{err}");
    }
    let out = test_conf(&dir, "events {}\nhttp {\n    geo g {\n    }\n}\n");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains(&format!("invalid variable name \"g\" in {conf_path}:3")),
        "{err}"
    );
    // A duplicate network is a warning: the later value wins.
    let conf = "events {}\nhttp {\n    geo $g {\n        10.0.0.0/8 a;\n        10.0.0.0/8 b;\n        delete 10.1.0.0/16;\n    }\n}\n";
    let out = test_conf(&dir, conf);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "duplicate network \"10.0.0.0/8\", value: \"b\", old value: \"a\" in {conf_path}:5"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "no network \"10.1.0.0/16\" to delete in {conf_path}:6"
        )),
        "{err}"
    );
}

#[test]
fn version_lists_geo() {
    let out = run(&["-V"]);
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("--without-http_geo_module"), "{text}");
    assert!(
        !text.contains("--without-http_split_clients_module"),
        "{text}"
    );
}
