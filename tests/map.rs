//! `map`: exact keys (caseless), regexes with captures, `hostnames`
//! wildcards, `default`, `include`, chained maps, and maps read by a log
//! line. The expected results are what nginx 1.22 answers.

mod common;
use common::*;

const CONF: &str = r#"
events {}
http {
    access_log off;
    map $http_x_k $m1 { default d; Abc exact; ~^re(\d+)$ re$1; ~*^CI ci; \default esc; "" empty; }
    map $host $m2 {
        hostnames;
        default none;
        example.com ex;
        *.example.com wild;
        www.example.* tail;
        .foo.org dotfoo;
    }
    map $uri $m3 { ~^/m/(?<mname>[a-z]+) named_$mname; default nd; }
    map $m1 $m4 { exact chained; default nc; }
    map $arg_k $m5 { include {dir}/map.inc; }
    log_format cls '$cls $status';
    map $status $cls { ~^2 ok; default bad; }
    server {
        listen 127.0.0.1:{port};
        access_log {dir}/logs/cls.log cls;
        location / { return 200 "m1=$m1 m2=$m2 m3=$m3 m4=$m4 mname=$mname one=$1 m5=$m5\n"; }
        location /missing { }
    }
}
"#;

fn start() -> Vireo {
    let dir = TempDir::new("map");
    dir.write("map.inc", "default inc_default;\nfrom_file yes;\n");
    Vireo::start_in(dir, CONF)
}

fn ask(v: &Vireo, path: &str, host: &str, k: Option<&str>) -> String {
    let k = k.map(|k| format!("X-K: {k}\r\n")).unwrap_or_default();
    v.request(&format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{k}Connection: close\r\n\r\n"
    ))
    .text()
}

#[test]
fn strings_regexes_and_default() {
    let v = start();
    let m1 = |k: Option<&str>| {
        let t = ask(&v, "/", "a", k);
        t.split(' ').next().unwrap().to_string()
    };
    assert_eq!(m1(Some("abc")), "m1=exact");
    assert_eq!(m1(Some("ABC")), "m1=exact");
    // A regex's captures go into the value.
    assert_eq!(m1(Some("re12")), "m1=re12");
    assert_eq!(m1(Some("cixx")), "m1=ci");
    assert_eq!(m1(Some("default")), "m1=esc");
    // A missing header is an empty value: the "" key.
    assert_eq!(m1(None), "m1=empty");
    assert_eq!(m1(Some("zzz")), "m1=d");
}

#[test]
fn full_values() {
    let v = start();
    assert_eq!(
        ask(&v, "/m/zz", "www.example.com", Some("abc")),
        "m1=exact m2=wild m3=named_zz m4=chained mname=zz one=zz m5=inc_default\n"
    );
    // Captures of the last regex match are visible after it ($1 of m3).
    assert_eq!(
        ask(&v, "/?k=from_file", "a", Some("re7")),
        "m1=re7 m2=none m3=nd m4=nc mname= one=7 m5=yes\n"
    );
}

#[test]
fn hostnames() {
    let v = start();
    let m2 = |h: &str| {
        let t = ask(&v, "/", h, None);
        t.split(' ').nth(1).unwrap().to_string()
    };
    assert_eq!(m2("example.com"), "m2=ex");
    assert_eq!(m2("a.example.com"), "m2=wild");
    // A leading wildcard beats a trailing one.
    assert_eq!(m2("www.example.com"), "m2=wild");
    assert_eq!(m2("www.example.org"), "m2=tail");
    assert_eq!(m2("foo.org"), "m2=dotfoo");
    assert_eq!(m2("x.foo.org"), "m2=dotfoo");
    // $host is lowercased, without port or trailing dot.
    assert_eq!(m2("EXAMPLE.COM.:80"), "m2=ex");
    assert_eq!(m2("other"), "m2=none");
}

#[test]
fn maps_in_log_lines_see_the_status() {
    let v = start();
    v.get("/x");
    v.get("/missing");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert_eq!(v.dir.read("logs/cls.log"), "ok 200\nbad 404\n");
}

#[test]
fn config_errors() {
    let dir = TempDir::new("map");
    for (conf, msg, line) in [
        (
            "map $uri $b { default 1; default 2; }",
            "duplicate default map parameter",
            3,
        ),
        (
            "map $uri $b { x 1; X 2; }",
            "conflicting parameter \"x\"",
            3,
        ),
        ("map $uri b { }", "invalid variable name \"b\"", 3),
        (
            "map $uri $b { x; }",
            "invalid number of the map parameters",
            3,
        ),
        ("map $host $uri { }", "the duplicate \"uri\" variable", 3),
        ("map $nosuch $b { }", "unknown \"nosuch\" variable", 3),
        (
            "map $uri $b { ~( 1; }",
            "regex \"(\" compile failed: missing closing parenthesis",
            3,
        ),
        (
            "server { map $uri $b { } }",
            "\"map\" directive is not allowed here",
            3,
        ),
    ] {
        let text = format!("events {{}}\nhttp {{\n{conf}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{conf}: {err}");
        let want = format!("{msg} in {}:{line}", dir.path().join("t.conf").display());
        assert!(err.contains(&want), "{conf}: want {want}\n{err}");
    }
}
