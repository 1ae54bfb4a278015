//! Variables: the request, connection, server, path, time and process
//! variables, captures (numbered and named), `set`, variables declared
//! anywhere in the configuration, and unknown names as errors with
//! file:line. The expected values are what nginx 1.22 gives (ports and
//! times aside).

mod common;
use common::*;

const CONF: &str = r#"
events {}
http {
    access_log off;
    log_format vars '$request_method $uri $status $sent_http_x_tag $later $body_bytes_sent';
    server {
        listen 127.0.0.1:{port};
        server_name main.test www.main.test;
        root {dir}/html;
        access_log {dir}/logs/vars.log vars;

        location /v {
            add_header X-Tag tagged;
            return 200 "uri=$uri request_uri=$request_uri args=$args qs=$query_string arg_a=$arg_a arg_B=$arg_b is_args=$is_args host=$host http_host=$http_host http_x_y=$http_x_y cookie_s=$cookie_S remote_addr=$remote_addr server_addr=$server_addr server_name=$server_name scheme=$scheme method=$request_method filename=$request_filename docroot=$document_root ct=$content_type cl=$content_length proto=$server_protocol https=$https status=$status request=$request document_uri=$document_uri body=$request_body\n";
        }
        location /misc {
            return 200 "$msec|$time_local|$time_iso8601|$pid|$nginx_version|$hostname|$remote_port|$server_port|$connection|$connection_requests\n";
        }
        location ~ ^/cap/(\d+)/(?<word>[a-z]+) { return 200 "one=$1 two=$2 word=$word three=$3\n"; }
        location /al/ { alias {dir}/html/dir/; return 200 "fn=$request_filename root=$document_root\n"; }
        location ~ ^/ra/(.+)$ { alias {dir}/html/dir/$1; return 200 "fn=$request_filename\n"; }
        location /real/ { root {dir}/link; return 200 "root=$document_root real=$realpath_root\n"; }
        location /early { return 200 "later=[$later] mapped=$mapped\n"; }
        location /sets { set $later "set-$uri"; return 200 "later=$later\n"; }
    }
    map $uri $mapped { default m-$uri; }
}
"#;

fn start() -> Vireo {
    let dir = TempDir::new("vars");
    std::fs::create_dir_all(dir.path().join("html/dir")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("html"), dir.path().join("link")).unwrap();
    Vireo::start_in(dir, CONF)
}

fn text(v: &Vireo, req: &str) -> String {
    v.request(req).text()
}

#[test]
fn request_variables() {
    let v = start();
    let d = v.dir.path().display().to_string();
    let common = |rest: &str| {
        format!(
            "remote_addr=127.0.0.1 server_addr=127.0.0.1 server_name=main.test scheme=http method=GET filename={d}/html/v docroot={d}/html {rest}"
        )
    };
    assert_eq!(
        v.get("/v?a=1&B=2&c").text(),
        format!(
            "uri=/v request_uri=/v?a=1&B=2&c args=a=1&B=2&c qs=a=1&B=2&c arg_a=1 arg_B=2 is_args=? host=localhost http_host=localhost http_x_y= cookie_s= {}\n",
            common(
                "ct= cl= proto=HTTP/1.1 https= status=200 request=GET /v?a=1&B=2&c HTTP/1.1 document_uri=/v body="
            )
        )
    );
    // The URI is decoded and normalised; $request_uri is as sent; an empty
    // query is no arguments.
    assert_eq!(
        v.get("/v%20x/../v?").text(),
        format!(
            "uri=/v request_uri=/v%20x/../v? args= qs= arg_a= arg_B= is_args= host=localhost http_host=localhost http_x_y= cookie_s= {}\n",
            common(
                "ct= cl= proto=HTTP/1.1 https= status=200 request=GET /v%20x/../v? HTTP/1.1 document_uri=/v body="
            )
        )
    );
    assert_eq!(
        text(
            &v,
            "GET /v HTTP/1.1\r\nHost: MAIN.test:80\r\nX-Y: yy\r\nCookie: a=1; s=abc\r\n\
             Content-Type: text/x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        format!(
            "uri=/v request_uri=/v args= qs= arg_a= arg_B= is_args= host=main.test http_host=MAIN.test:80 http_x_y=yy cookie_s=abc {}\n",
            common(
                "ct=text/x cl=0 proto=HTTP/1.1 https= status=200 request=GET /v HTTP/1.1 document_uri=/v body="
            )
        )
    );
    // An absolute request URI: its host is $host, its path $request_uri.
    assert_eq!(
        text(
            &v,
            "GET http://Other.Host:99/v?z=1 HTTP/1.1\r\nHost: main.test\r\nConnection: close\r\n\r\n"
        ),
        format!(
            "uri=/v request_uri=/v?z=1 args=z=1 qs=z=1 arg_a= arg_B= is_args=? host=other.host http_host=main.test http_x_y= cookie_s= {}\n",
            common(
                "ct= cl= proto=HTTP/1.1 https= status=200 request=GET http://Other.Host:99/v?z=1 HTTP/1.1 document_uri=/v body="
            )
        )
    );
    // HTTP/1.0 without Host: $host is the server name.
    assert_eq!(
        text(&v, "GET /v HTTP/1.0\r\n\r\n"),
        format!(
            "uri=/v request_uri=/v args= qs= arg_a= arg_B= is_args= host=main.test http_host= http_x_y= cookie_s= {}\n",
            common(
                "ct= cl= proto=HTTP/1.0 https= status=200 request=GET /v HTTP/1.0 document_uri=/v body="
            )
        )
    );
}

#[test]
fn time_process_and_connection_variables() {
    let v = start();
    let mut s = v.connect();
    use std::io::Write;
    s.write_all(b"GET /misc HTTP/1.1\r\nHost: a\r\n\r\nGET /misc HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .unwrap();
    let all = Resp::parse_all(&read_to_close(&mut s));
    assert_eq!(all.len(), 2);
    let t = all[1].text();
    let f: Vec<&str> = t.trim_end().split('|').collect();
    assert_eq!(f.len(), 10, "{t}");
    let (secs, ms) = f[0].split_once('.').unwrap();
    assert!(secs.len() == 10 && ms.len() == 3, "{}", f[0]);
    // 21/Nov/2026:23:19:08 +0000
    assert!(f[1].len() == 26 && f[1].as_bytes()[2] == b'/', "{}", f[1]);
    // 2026-11-21T23:19:08+00:00
    assert!(f[2].len() == 25 && f[2].as_bytes()[10] == b'T', "{}", f[2]);
    assert_eq!(f[3], v.pid().to_string());
    assert_eq!(f[4], env!("CARGO_PKG_VERSION"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(f[5], host.trim());
    assert_eq!(f[6], s.local_addr().unwrap().port().to_string());
    assert_eq!(f[7], v.port.to_string());
    assert!(f[8].parse::<u64>().is_ok(), "{}", f[8]);
    assert_eq!(f[9], "2");
}

#[test]
fn captures() {
    let v = start();
    assert_eq!(
        v.get("/cap/12/abc").text(),
        "one=12 two=abc word=abc three=\n"
    );
    let d = v.dir.path().display().to_string();
    // Alias: the location's prefix replaced; in a regex location, the
    // alias built from the captures is the file name.
    assert_eq!(
        v.get("/al/x.txt").text(),
        format!("fn={d}/html/dir/x.txt root={d}/html/dir/\n")
    );
    assert_eq!(
        v.get("/ra/p/q.png").text(),
        format!("fn={d}/html/dir/p/q.png\n")
    );
}

#[test]
fn realpath_root() {
    let v = start();
    let d = v.dir.path().display().to_string();
    let real = std::fs::canonicalize(v.dir.path().join("html")).unwrap();
    assert_eq!(
        v.get("/real/").text(),
        format!("root={d}/link real={}\n", real.display())
    );
}

#[test]
fn declared_anywhere_set_per_request() {
    let v = start();
    // `$later` is set in another location and `$mapped` is a map written
    // after the server: both are known. Unset, a variable is empty.
    assert_eq!(v.get("/early").text(), "later=[] mapped=m-/early\n");
    assert_eq!(v.get("/sets").text(), "later=set-/sets\n");
    // Values do not leak into the next request.
    assert_eq!(v.get("/early").text(), "later=[] mapped=m-/early\n");
}

#[test]
fn log_lines_see_response_variables() {
    let v = start();
    v.get("/v");
    v.get("/sets");
    v.get("/nothing");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let log = v.dir.read("logs/vars.log");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    // (A `set` variable never assigned is logged as "-" here, as empty by nginx.)
    assert!(lines[0].starts_with("GET /v 200 tagged "), "{log}");
    assert!(lines[1].starts_with("GET /sets 200 - set-/sets "), "{log}");
    assert!(lines[2].starts_with("GET /nothing 404 - "), "{log}");
}

#[test]
fn unknown_variables_name_file_and_line() {
    let dir = TempDir::new("vars");
    for (conf, msg, line) in [
        (
            "server {\nlocation / {\nreturn 200 $nosuch;\n}\n}",
            "unknown \"nosuch\" variable",
            5,
        ),
        (
            "log_format x '$a $b';\nserver { set $a 1; }",
            "unknown \"b\" variable",
            3,
        ),
        (
            "server {\nlocation / {\nalias /x/$nope;\n}\n}",
            "unknown \"nope\" variable",
            5,
        ),
        (
            "server {\nlocation / {\nreturn 200 ${uri;\n}\n}",
            "the closing bracket in \"uri\" variable is missing",
            5,
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

#[test]
fn logged_uri_and_sent_headers_as_nginx() {
    let v = Vireo::start(
        "events {}\nhttp {\n log_format cc '$uri: $sent_http_cache_control';\n access_log logs/cc.log cc;\n server {\n  listen 127.0.0.1:{port};\n  location / { return 200 OK; }\n  location /set {\n   add_header Cache-Control max-age=3600;\n   add_header Cache-Control private;\n   return 200 OK;\n  }\n }\n}\n",
    );
    assert_eq!(v.get("/../bad").status, 400);
    v.get("/set");
    assert!(
        eventually(5, || {
            let log = v.dir.read("logs/cc.log");
            // A URI refused for itself is no URI; several fields join with ", ".
            log.contains("\n: -\n") || log.starts_with(": -\n")
        }),
        "{}",
        v.dir.read("logs/cc.log")
    );
    assert!(eventually(5, || v
        .dir
        .read("logs/cc.log")
        .contains("/set: max-age=3600, private\n")));
}

#[test]
fn several_fields_of_a_name_are_joined() {
    let v = Vireo::start(
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  \
         location / {\n   add_header X-A 1;\n   add_header X-A 2;\n   add_header X-J $sent_http_x_a;\n   \
         return 200 \"$http_foo|$http_cookie|$cookie_b|$cookie_c\";\n  }\n }\n}\n",
    );
    let r = v.request(
        "GET / HTTP/1.1\r\nHost: x\r\nFoo: one\r\nCookie: a=1\r\nFoo: two\r\nCookie: b=2; c=3\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "one, two|a=1; b=2; c=3|2|3");
    assert_eq!(r.header("x-j"), Some("1, 2"));
}

#[test]
fn http_variables_read_fields_named_with_underscores() {
    // Kept with underscores_in_headers on: `$http_x_foo` reads `x_foo` as
    // it reads `X-Foo`, as nginx's.
    let v = Vireo::start(
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  \
         underscores_in_headers on;\n  location / {\n   return 200 \"$http_x_foo|$http_x_bar\";\n  }\n }\n}\n",
    );
    let r = v.request(
        "GET / HTTP/1.1\r\nHost: x\r\nx_foo: under\r\nX-Bar: dash\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "under|dash");
}
