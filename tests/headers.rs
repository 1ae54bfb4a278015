//! add_header: statuses, `always`, inheritance, variables, replacing fields,
//! configuration errors. Expectations checked against nginx 1.22.

mod common;
use common::*;
use std::io::Write;

const CONF: &str = "
events {}
http {
    access_log off;
    add_header X-Http http;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        add_header X-Server server;
        add_header X-Always yes always;
        location /inh/ {
        }
        location /own/ {
            add_header X-Own \"uri=$uri st=$status\";
            location /own/nested/ {
            }
        }
        location /replace/ {
            add_header X-Empty \"\";
            add_header Last-Modified custom;
            add_header ETag \"\";
            add_header Content-Type foo/bar;
            add_header Cache-Control a;
            add_header Cache-Control b;
        }
        location /inject/ {
            add_header X-Uri $uri always;
        }
        location /written { add_header X-Written \"a:$uri\\n\" always; return 204; }
        location /brought {
            set $two_lines \"a\\nb\";
            add_header X-Brought $two_lines always;
            return 204;
        }
    }
    server {
        listen 127.0.0.1:{port2};
        root {dir}/html;
    }
}";

fn all<'a>(r: &'a Resp, name: &str) -> Vec<&'a str> {
    r.headers
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// The second server's port (`{port2}`), read back from the written configuration.
fn port2(v: &Vireo) -> u16 {
    let conf = v.dir.read("vireo.conf");
    let at = conf.rfind("listen 127.0.0.1:").unwrap() + "listen 127.0.0.1:".len();
    conf[at..].split(';').next().unwrap().parse().unwrap()
}

fn start() -> Vireo {
    let dir = TempDir::new("hdr");
    for d in ["", "inh/", "own/", "own/nested/", "replace/", "inject/"] {
        dir.write(&format!("html/{d}a.txt"), "hello");
    }
    dir.write("html/sub/index.html", "index");
    Vireo::start_in(dir, CONF)
}

#[test]
fn added_on_success_and_always_on_errors() {
    let v = start();
    let r = v.get("/a.txt");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-server"), Some("server"));
    assert_eq!(r.header("x-always"), Some("yes"));
    // The server level has its own add_header: nothing from http.
    assert_eq!(r.header("x-http"), None);

    let r = v.get("/missing");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-server"), None);
    assert_eq!(r.header("x-always"), Some("yes"));

    // 405 for a method static files do not take.
    let r = v.request(
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 405);
    assert_eq!(r.header("x-server"), None);
    assert_eq!(r.header("x-always"), Some("yes"));
}

#[test]
fn added_on_redirects_not_modified_and_partial() {
    let v = start();
    let r = v.get("/sub");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("x-server"), Some("server"));

    let lm = v.get("/a.txt").header("last-modified").unwrap().to_string();
    let r = v.request(&format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: {lm}\r\nConnection: close\r\n\r\n"
    ));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("x-server"), Some("server"));

    let r = v
        .request("GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("x-server"), Some("server"));

    // 416 is not in the list.
    let r = v.request(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=50-60\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 416);
    assert_eq!(r.header("x-server"), None);
    assert_eq!(r.header("x-always"), Some("yes"));
}

#[test]
fn inheritance_is_all_or_nothing_per_level() {
    let v = start();
    // A location without add_header inherits the server's.
    let r = v.get("/inh/a.txt");
    assert_eq!(r.header("x-server"), Some("server"));
    assert_eq!(r.header("x-always"), Some("yes"));

    // A location with one add_header drops all of the server's.
    let r = v.get("/own/a.txt");
    assert_eq!(r.header("x-own"), Some("uri=/own/a.txt st=200"));
    assert_eq!(r.header("x-server"), None);
    assert_eq!(r.header("x-always"), None);

    // A nested location inherits from its parent location.
    let r = v.get("/own/nested/a.txt");
    assert_eq!(r.header("x-own"), Some("uri=/own/nested/a.txt st=200"));
    assert_eq!(r.header("x-server"), None);

    // A server without add_header inherits http's.
    let mut s2 = std::net::TcpStream::connect(("127.0.0.1", port2(&v))).unwrap();
    s2.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = Resp::parse(&read_to_close(&mut s2)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-http"), Some("http"));
    assert_eq!(r.header("x-server"), None);
}

#[test]
fn empty_values_replacements_and_repeats() {
    let v = start();
    let r = v.get("/replace/a.txt");
    assert_eq!(r.status, 200);
    // An empty value adds nothing.
    assert!(r.header("x-empty").is_none(), "{}", r.head);
    // Last-Modified is replaced, an empty ETag removes the file's.
    assert_eq!(all(&r, "last-modified"), ["custom"]);
    assert!(all(&r, "etag").is_empty(), "{}", r.head);
    // Other names are appended, even Content-Type (as nginx does).
    assert_eq!(all(&r, "content-type"), ["text/plain", "foo/bar"]);
    assert_eq!(all(&r, "cache-control"), ["a", "b"]);
    assert_eq!(r.text(), "hello");
}

#[test]
fn value_with_line_break_is_not_sent() {
    let v = start();
    // The URI normaliser refuses CR/LF before any filter runs; the filter
    // itself drops rendered values holding them (unit-tested).
    let r = v.get("/inject/x%0d%0aSet-Cookie:%20evil=1");
    assert_eq!(r.status, 400);
    assert!(r.header("set-cookie").is_none(), "{}", r.head);
    assert!(r.header("x-uri").is_none(), "{}", r.head);
    // A clean value still goes out, on a 404 because of `always`.
    let r = v.get("/inject/nothing-here");
    assert_eq!(r.header("x-uri"), Some("/inject/nothing-here"));
    // A line break the configuration wrote goes out as written (nginx's
    // test suite ends its values so); one a variable brings does not.
    let raw = v.raw(b"GET /written HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("\r\nX-Written: a:/written\n\r\n"), "{text}");
    let raw = v.raw(b"GET /brought HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains("X-Brought"), "{text}");
}

#[test]
fn configuration_errors() {
    let dir = TempDir::new("hdr-conf");
    let bad = [
        (
            "add_header X;",
            "invalid number of arguments in \"add_header\"",
        ),
        ("add_header X y never;", "invalid parameter \"never\""),
        ("add_header \"X Y\" y;", "invalid header name \"X Y\""),
        ("add_header \"\" y;", "invalid header name \"\""),
        ("add_header X $nosuch;", "unknown \"nosuch\" variable"),
        (
            "add_header Content-Length 5;",
            "\"Content-Length\" cannot be set",
        ),
        ("add_header Transfer-Encoding chunked;", "cannot be set"),
    ];
    for (line, want) in bad {
        let conf = format!("events {{}} http {{ server {{ {line} }} }}");
        let out = test_conf(&dir, &conf);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line} accepted");
        assert!(err.contains(want), "{line}: {err}");
    }
    let ok = "events {} http { access_log off; add_header A b; server { add_header A b always; add_header B \"$host $remote_addr\"; location / { add_header C d; } } }";
    let out = test_conf(&dir, ok);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn always_on_a_malformed_request() {
    // The default server's filters answer a head that does not parse, as
    // nginx's (a uwsgi packet sent to an HTTP server, say).
    let v = Vireo::start(
        "events {}\nhttp {\n  server {\n    listen 127.0.0.1:{port};\n    add_header X-Always yes always;\n    add_header X-Success yes;\n  }\n}\n",
    );
    let r = Resp::parse(&v.raw(b"\x00\x10\x00\x00GARBAGE\r\n\r\n")).unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(r.header("X-Always"), Some("yes"));
    assert_eq!(r.header("X-Success"), None);
}
