//! The addition filter: add_before_body / add_after_body around static
//! files, proxied replies (real upstream vireo and raw sockets) and
//! FastCGI replies (php-fpm), with subrequests to static, proxied and
//! internal locations; addition_types; headers (length, ranges, validators);
//! HEAD; a reply that breaks off; HTTP/2; directive errors with file:line.
//! Expectations checked against nginx 1.22.

mod common;
use common::fpm::Fpm;
use common::*;
use std::io::Write;
use std::net::TcpListener;
use std::time::Duration;

const CONF: &str = "
events {}
http {
    server {
        listen 127.0.0.1:{port};
        http2 on;
        root {dir}/html;
        add_before_body /parts/before.html;
        add_after_body /parts/after.html;
        location /parts/ {
            internal;
        }
        location /gz/ {
            gzip on;
            gzip_min_length 1;
            gzip_types text/html;
        }
        location /plain/ {
            addition_types text/plain;
        }
        location /proxy/ {
            proxy_pass http://127.0.0.1:{port2}/;
        }
        location /raw/ {
            proxy_pass http://127.0.0.1:RAW/;
            proxy_buffering off;
        }
        location /from-upstream/ {
            add_before_body /proxy/head.html;
            add_after_body /inner/tail;
        }
        location = /inner/tail {
            internal;
            return 200 \"{tail}\";
        }
        location /off/ {
            add_before_body \"\";
        }
    }
    server {
        listen 127.0.0.1:{port2};
        root {dir}/up;
    }
}";

/// A one-shot upstream that answers with `reply` as it is and closes.
fn raw_upstream(reply: &'static [u8]) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        if read_request_head(&mut std::io::BufReader::new(&mut s)).is_some() {
            let _ = s.write_all(reply);
        }
    });
    (port, h)
}

fn start_with(raw: u16) -> Vireo {
    let dir = TempDir::new("addition");
    for (path, text) in [
        ("html/parts/before.html", "<b>"),
        ("html/parts/after.html", "</b>"),
        ("html/page.html", "PAGE"),
        ("html/t.txt", "TEXT"),
        ("html/plain/t.txt", "TEXT"),
        ("html/off/page.html", "OFF"),
        ("html/from-upstream/page.html", "MID"),
        ("up/page.html", "UPSTREAM"),
        ("up/head.html", "{head}"),
    ] {
        dir.write(path, text);
    }
    dir.write("html/gz/page.html", "x".repeat(70000));
    Vireo::start_in(dir, &CONF.replace("RAW", &raw.to_string()))
}

/// The server without a raw upstream.
fn start() -> Vireo {
    start_with(1)
}

#[test]
fn static_proxied_and_internal_additions() {
    let v = start();
    assert_eq!(v.get("/page.html").text(), "<b>PAGE</b>");
    // A proxied reply gets them too.
    assert_eq!(v.get("/proxy/page.html").text(), "<b>UPSTREAM</b>");
    // Subrequests to a proxied and to an internal location.
    assert_eq!(v.get("/from-upstream/page.html").text(), "{head}MID{tail}");
    // The internal part is not reachable from outside.
    assert_eq!(v.get("/parts/before.html").status, 404);
}

#[test]
fn types_status_and_inheritance() {
    let v = start();
    assert_eq!(v.get("/t.txt").text(), "TEXT");
    assert_eq!(v.get("/plain/t.txt").text(), "<b>TEXT</b>");
    // An empty URI turns the inherited one off.
    assert_eq!(v.get("/off/page.html").text(), "OFF</b>");
    // Not a 200: left alone.
    let r = v.get("/nosuch.html");
    assert_eq!(r.status, 404);
    assert!(!r.text().contains("<b>"), "{}", r.text());
}

#[test]
fn length_ranges_and_validators() {
    let v = start();
    let r = v.get("/page.html");
    assert!(r.header("content-length").is_none());
    assert!(r.header("accept-ranges").is_none());
    assert!(r.header("last-modified").is_some());
    let etag = r.header("etag").unwrap_or_default().to_string();
    assert!(etag.starts_with("W/\""), "{etag}");
    // A Range request gets the whole page with its additions, as nginx.
    let r = v.request("GET /page.html HTTP/1.0\r\nHost: localhost\r\nRange: bytes=0-1\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "<b>PAGE</b>");
    assert!(r.header("content-range").is_none());
    // HEAD: the head without a length, no subrequest output.
    let raw = v.raw(b"HEAD /page.html HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("content-length"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\n"), "{text}");
    // Kept alive over HTTP/1.1: chunked.
    let (head, body) = get_chunked(&v, "/page.html");
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    assert_eq!(body, b"<b>PAGE</b>");
}

#[test]
fn extra_data_is_dropped_and_a_short_reply_ends_without_the_after_part() {
    // More than declared: the declared bytes, then the addition.
    let (port, up) = raw_upstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 4\r\n\r\nGOODEXTRA",
    );
    let v = start_with(port);
    let r = v.get("/raw/x");
    assert_eq!(r.text(), "<b>GOOD</b>");
    up.join().unwrap();
    // Less than declared: the head and what came, then the connection
    // closes without the after part.
    let (port, up) = raw_upstream(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100\r\n\r\nSHORT",
    );
    let v = start_with(port);
    let raw = v.raw(b"GET /raw/x HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text.ends_with("\r\n\r\n<b>SHORT"), "{text}");
    up.join().unwrap();
    // Nothing at all: still the head.
    let (port, up) =
        raw_upstream(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100\r\n\r\n");
    let v = start_with(port);
    let raw = v.raw(b"GET /raw/x HTTP/1.0\r\nHost: localhost\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(!text.contains("</b>"), "{text}");
    up.join().unwrap();
}

#[test]
fn http2_with_gzip_after_the_additions() {
    let v = start();
    let body = curl_h2_gzipped(v.port, "/gz/page.html");
    assert_eq!(body, format!("<b>{}</b>", "x".repeat(70000)));
}

#[test]
fn fastcgi_replies() {
    let Some(fpm) = Fpm::start(2) else { return };
    let dir = TempDir::new("addition-fcgi");
    dir.write(
        "html/page.php",
        "<?php header('Content-Type: text/html'); echo 'PHP', $_GET['x'] ?? '';",
    );
    dir.write("html/tail.html", "[tail]");
    copy_fastcgi_params(&dir);
    let v = Vireo::start_in(
        dir,
        &format!(
            "events {{}}
http {{
    server {{
        listen 127.0.0.1:{{port}};
        root {{dir}}/html;
        location ~ \\.php$ {{
            include fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_pass 127.0.0.1:{};
            add_before_body /page.php;
            add_after_body /tail.html;
        }}
        location /unbuf/ {{
            include fastcgi_params;
            fastcgi_param SCRIPT_FILENAME {{dir}}/html/page.php;
            fastcgi_pass 127.0.0.1:{};
            fastcgi_buffering off;
            add_after_body /tail.html;
        }}
    }}
}}",
            fpm.port, fpm.port
        ),
    );
    // The before part is a FastCGI subrequest too, without the arguments.
    assert_eq!(v.get("/page.php?x=1").text(), "PHPPHP1[tail]");
    assert_eq!(v.get("/unbuf/x").text(), "PHP[tail]");
}

#[test]
fn bad_directives() {
    let dir = TempDir::new("addition");
    assert_conf_errors(
        &dir,
        &[
            (
                "add_before_body /a /b;",
                "invalid number of arguments in \"add_before_body\" directive",
            ),
            (
                "add_after_body /a; add_after_body /b;",
                "\"add_after_body\" directive is duplicate",
            ),
            (
                "addition_types text/plain; addition_types *;",
                "\"addition_types\" directive is duplicate",
            ),
            (
                "addition_types html;",
                "invalid parameter \"html\" in \"addition_types\" directive",
            ),
        ],
    );
    // Not in `events`.
    let out = test_conf(&dir, "events {\nadd_after_body /a;\n}\nhttp {}\n");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let want = format!(
        "\"add_after_body\" directive is not allowed here in {}:2",
        dir.path().join("t.conf").display()
    );
    assert!(err.contains(&want), "want {want}\n{err}");
}
