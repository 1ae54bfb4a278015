//! `return`: codes with and without text, redirects (the classic http→https
//! and www redirects), a lone URL, `return 444`, and where error_page
//! applies. The expected results are what nginx 1.22 answers.

mod common;
use common::*;
use std::io::Write;

const CONF: &str = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port} default_server;
        root {dir}/html;
        error_page 404 /404.html;

        location /text.html { return 200 "x"; }
        location /text { return 200 "hello $arg_name status=$status\n"; }
        location /empty { return 200; }
        location /nocontent { return 204 "dropped"; }
        location /notfound { return 404; }
        location /notfound-text { return 404 "gone\n"; }
        location /err { return 500 "err"; }
        location /rel { return 302 /foo?a=$arg_a; }
        location /perm { return 301 https://example.com$request_uri; }
        location /see { return 303 /other; }
        location /url { return https://example.com/$uri; }
        location /drop { return 444; }
        location = /404.html { internal; return 404 "custom 404 page\n"; }
    }
    # http → https for a whole site.
    server {
        listen 127.0.0.1:{port};
        server_name example.com www.example.com;
        return 301 https://example.com$request_uri;
    }
    # Bare domain → www, keeping the scheme.
    server {
        listen 127.0.0.1:{port};
        server_name old.test;
        return 301 $scheme://www.old.test$request_uri;
    }
    server {
        listen 127.0.0.1:{port};
        server_name www.old.test;
        location / { return 200 "www\n"; }
    }
}
"#;

fn host(v: &Vireo, host: &str, path: &str) -> Resp {
    v.request(&format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    ))
}

#[test]
fn codes_and_text() {
    let v = Vireo::start(CONF);
    let r = v.get("/text?name=bob");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello bob status=200\n");
    assert_eq!(r.header("content-type"), Some("text/plain"));
    // The content type follows the URI's extension.
    let r = v.get("/text.html");
    assert_eq!(r.text(), "x");
    assert_eq!(r.header("content-type"), Some("text/html"));
    let r = v.get("/empty");
    assert_eq!((r.status, r.text().as_str()), (200, ""));
    assert_eq!(r.header("content-type"), Some("text/plain"));
    assert_eq!(r.header("content-length"), Some("0"));
    let r = v.get("/nocontent");
    assert_eq!((r.status, r.text().as_str()), (204, ""));
    assert_eq!(r.header("content-type"), None);
    let r = v.get("/err");
    assert_eq!((r.status, r.text().as_str()), (500, "err"));
}

#[test]
fn error_codes_without_text_get_error_pages() {
    let v = Vireo::start(CONF);
    let r = v.get("/notfound");
    assert_eq!((r.status, r.text().as_str()), (404, "custom 404 page\n"));
    // With text, the text is the answer.
    let r = v.get("/notfound-text");
    assert_eq!((r.status, r.text().as_str()), (404, "gone\n"));
}

#[test]
fn redirects() {
    let v = Vireo::start(CONF);
    let r = v.get("/rel?a=1");
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location").unwrap(),
        format!("http://localhost:{}/foo?a=1", v.port)
    );
    assert!(r.text().contains("302"), "{}", r.text());
    let r = v.get("/perm/x?y=1");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://example.com/perm/x?y=1"));
    let r = v.get("/see");
    assert_eq!(r.status, 303);
    assert_eq!(
        r.header("location").unwrap(),
        format!("http://localhost:{}/other", v.port)
    );
    // A lone URL is a 302.
    let r = v.get("/url/a");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com//url/a"));
}

#[test]
fn http_to_https_and_www() {
    let v = Vireo::start(CONF);
    let r = host(&v, "example.com", "/a/b?c=d");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://example.com/a/b?c=d"));
    let r = host(&v, "www.example.com", "/");
    assert_eq!(r.header("location"), Some("https://example.com/"));
    let r = host(&v, "old.test", "/p?q");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("http://www.old.test/p?q"));
    let r = host(&v, "www.old.test", "/p");
    assert_eq!((r.status, r.text().as_str()), (200, "www\n"));
}

#[test]
fn return_444_closes_without_answer() {
    let dir = TempDir::new("ret");
    let v = Vireo::start_in(
        dir,
        &CONF.replace("access_log off;", "access_log {dir}/logs/a.log;"),
    );
    let mut s = v.connect();
    s.write_all(b"GET /drop HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    assert!(read_to_close(&mut s).is_empty());
    // Logged with status 444.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let log = v.dir.read("logs/a.log");
    assert!(log.contains("\"GET /drop HTTP/1.1\" 444 0"), "{log}");
}

#[test]
fn config_errors() {
    let dir = TempDir::new("ret");
    for (conf, msg) in [
        ("return abc;", "invalid return code \"abc\""),
        ("return 1000;", "invalid return code \"1000\""),
        ("return /relative;", "invalid return code \"/relative\""),
        ("return 200 $nosuch;", "unknown \"nosuch\" variable"),
    ] {
        let text = format!("events {{}}\nhttp {{\nserver {{\nlocation / {{\n{conf}\n}}\n}}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{conf}: {err}");
        let want = format!("{msg} in {}:5", dir.path().join("t.conf").display());
        assert!(err.contains(&want), "{conf}: want {want}\n{err}");
    }
}

/// msie_refresh: MSIE gets the redirects vireo makes as a refresh page;
/// other browsers, and locations with it off, get the redirect.
#[test]
fn msie_refresh_turns_redirects_into_refresh_pages() {
    let v = Vireo::start(
        "
events {}
http {
    access_log off;
    msie_refresh on;
    server {
        listen 127.0.0.1:{port};
        location / { return 301 text; }
        location /space { return 302 \"a b\\\"c\"; }
        location /page_redirect { return 404; error_page 404 http://example.com/x; }
        location /off { msie_refresh off; return 301 text; }
    }
}",
    );
    let get = |path: &str, ua: &str| {
        v.request(&format!(
            "GET {path} HTTP/1.0\r\nHost: localhost\r\nUser-Agent: {ua}\r\n\r\n"
        ))
    };
    let msie = "Mozilla/4.0 (compatible; MSIE 8.0; Windows NT 6.1)";
    let r = get("/", msie);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("location"), None);
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(
        r.text(),
        "<html><head><meta http-equiv=\"Refresh\" content=\"0; URL=text\"></head><body></body></html>\r\n"
    );
    assert!(get("/space", msie).text().contains("URL=a%20b%22c\""));
    assert!(
        get("/page_redirect", msie)
            .text()
            .contains("URL=http://example.com/x\"")
    );
    let r = get("/", "curl/8.0");
    assert_eq!((r.status, r.header("location")), (301, Some("text")));
    let r = get("/off", msie);
    assert_eq!((r.status, r.header("location")), (301, Some("text")));
    let r = get("/", "Opera/9.80 (MSIE 6.0)");
    assert_eq!(r.status, 301);
}
