//! `error_page`, `recursive_error_pages`, `internal`: status rules (`=code`,
//! `=`), named locations, redirects, inheritance, the maintenance-page
//! pattern. The expected results are what nginx 1.22 answers.

mod common;
use common::*;

const CONF: &str = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        error_page 404 /err/404.html;

        location /inherit/ { }
        location /own/ { error_page 403 /err/403.html; }
        location /p2 { error_page 404 =200 /err/404.html; }
        location /p3 { error_page 404 = /show; }
        location /p4 { error_page 404 @fb; }
        location /p5 { error_page 404 http://ex.com/nf; }
        location /p6 { error_page 404 =301 http://ex.com/nf; }
        location /p7 { error_page 404 /missing.html; }
        location /p8 { error_page 404 /p8b; }
        location /p8b { error_page 404 /err/404.html; }
        location /p9 { recursive_error_pages on; error_page 404 /p9b; }
        location /p9b { error_page 404 /err/404.html; }
        location /p10 { error_page 404 /show?x=$uri; }
        location /p11 { error_page 500 502 503 504 /err/50x.html; return 503; }
        location /p12 { error_page 503 /err/50x.html; return 503 "custom"; }
        location /p15 { error_page 404 =302 /err/404.html; }
        location /p16 { error_page 404 /r405; return 404; }
        location /p17 { error_page 405 /r302; return 405; }
        location /p18 { error_page 405 /err; return 405; }
        location /p19 { error_page 405 /r200; return 405; }
        location /r405 { return 405; }
        location /r302 { return 302 /there; }
        location /r200 { return 200 "text"; }
        location @fb { return 200 "fallback uri=$uri args=$args method=$request_method\n"; }
        location /show { return 200 "show uri=$uri args=$args method=$request_method\n"; }
        location /err/ { internal; }
    }
    # The maintenance page: every request gets 503 with the page while the
    # file exists.
    server {
        listen 127.0.0.1:{port2};
        root {dir}/html;
        error_page 503 @maintenance;
        if (-f $document_root/maintenance.html) { return 503; }
        location @maintenance { rewrite ^ /maintenance.html break; }
        location / { }
    }
}
"#;

fn start() -> Vireo {
    let v = Vireo::start(CONF);
    v.dir.write("html/err/404.html", "E404 page\n");
    v.dir.write("html/err/403.html", "E403 page\n");
    v.dir.write("html/err/50x.html", "maint\n");
    v.dir.write("html/site.html", "site\n");
    v
}

fn get(v: &Vireo, path: &str) -> (u16, String) {
    let r = v.get(path);
    (r.status, r.text())
}

fn is_default_page(body: &str, status: u16) -> bool {
    body.contains(&format!("<title>{status} "))
}

#[test]
fn status_rules() {
    let v = start();
    // The page, with the original status.
    assert_eq!(get(&v, "/nothing"), (404, "E404 page\n".into()));
    // `=200`: the page's status set.
    assert_eq!(get(&v, "/p2"), (200, "E404 page\n".into()));
    // `=`: whatever the page's location answers.
    assert_eq!(
        get(&v, "/p3"),
        (200, "show uri=/show args= method=GET\n".into())
    );
    // A redirect code with a local URI is still an internal redirect.
    assert_eq!(get(&v, "/p15"), (302, "E404 page\n".into()));
    // A page that ends in an error or a redirect of its own sends that.
    assert_eq!(get(&v, "/p16").0, 405);
    let r = v.get("/p17");
    assert_eq!(r.status, 302);
    assert!(r.header("location").unwrap().ends_with("/there"));
    assert_eq!(v.get("/p18").status, 301);
    // Any other answer keeps the error's status.
    assert_eq!(get(&v, "/p19"), (405, "text".into()));
}

#[test]
fn named_locations_keep_uri_args_and_method() {
    let v = start();
    assert_eq!(
        get(&v, "/p4?a=1"),
        (404, "fallback uri=/p4 args=a=1 method=GET\n".into())
    );
    let r =
        v.request("POST /p4 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(r.text(), "fallback uri=/p4 args= method=POST\n");
}

#[test]
fn uri_pages_are_gets_with_their_own_args() {
    let v = start();
    assert_eq!(
        get(&v, "/p10?z=1"),
        (404, "show uri=/show args=x=/p10 method=GET\n".into())
    );
    let r =
        v.request("POST /p3 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(r.text(), "show uri=/show args= method=GET\n");
    // A POST to a missing static file is a 404 (not 405), and its page is served.
    let r = v.request(
        "POST /nothing HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (404, "E404 page\n"));
    let r = v.request(
        "POST /site.html HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 405);
}

#[test]
fn redirects_to_urls() {
    let v = start();
    let r = v.get("/p5");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("http://ex.com/nf"));
    let r = v.get("/p6");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("http://ex.com/nf"));
}

#[test]
fn recursion() {
    let v = start();
    // The page itself is missing: the default page.
    let (s, b) = get(&v, "/p7");
    assert!(s == 404 && is_default_page(&b, 404), "{b}");
    // The page's own 404 is not sent to another page...
    let (s, b) = get(&v, "/p8");
    assert!(s == 404 && is_default_page(&b, 404), "{b}");
    // ...unless recursive_error_pages is on.
    assert_eq!(get(&v, "/p9"), (404, "E404 page\n".into()));
}

#[test]
fn generated_errors_only() {
    let v = start();
    assert_eq!(get(&v, "/p11"), (503, "maint\n".into()));
    // `return` with text is the answer itself.
    assert_eq!(get(&v, "/p12"), (503, "custom".into()));
}

#[test]
fn inheritance() {
    let v = start();
    assert_eq!(get(&v, "/inherit/x"), (404, "E404 page\n".into()));
    // A level with error_page directives does not inherit its parent's.
    let (s, b) = get(&v, "/own/x");
    assert!(s == 404 && is_default_page(&b, 404), "{b}");
}

#[test]
fn internal_locations() {
    let v = start();
    // Reached from outside: 404 (whose page is internal: reachable).
    assert_eq!(get(&v, "/err/404.html"), (404, "E404 page\n".into()));
    assert_eq!(get(&v, "/err/50x.html"), (404, "E404 page\n".into()));
}

#[test]
fn conditional_headers_do_not_apply_to_error_pages() {
    let v = start();
    let r = v.request(
        "GET /nothing HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n\
         Range: bytes=0-1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (404, "E404 page\n"));
}

#[test]
fn maintenance_page() {
    let v = start();
    let port2 = port2(&v);
    let get2 = |p: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port2)).unwrap();
        use std::io::Write;
        let req = format!("GET {p} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let r = Resp::parse(&read_to_close(&mut s)).unwrap();
        (r.status, r.text())
    };
    assert_eq!(get2("/site.html"), (200, "site\n".into()));
    v.dir
        .write("html/maintenance.html", "down for maintenance\n");
    assert_eq!(get2("/site.html"), (503, "down for maintenance\n".into()));
    assert_eq!(
        get2("/any/path?x=1"),
        (503, "down for maintenance\n".into())
    );
    std::fs::remove_file(v.dir.path().join("html/maintenance.html")).unwrap();
    assert_eq!(get2("/site.html"), (200, "site\n".into()));
}

/// The second port of the configuration, read back from the written file.
fn port2(v: &Vireo) -> u16 {
    let conf = v.dir.read("vireo.conf");
    conf.lines()
        .filter_map(|l| l.trim().strip_prefix("listen 127.0.0.1:"))
        .filter_map(|p| p.trim_end_matches(';').parse().ok())
        .find(|p| *p != v.port)
        .unwrap()
}

#[test]
fn config_errors() {
    let dir = TempDir::new("ep");
    for (conf, msg) in [
        (
            "error_page 404;",
            "invalid number of arguments in \"error_page\" directive",
        ),
        (
            "error_page 200 /x;",
            "value \"200\" must be between 300 and 599",
        ),
        ("error_page abc /x;", "invalid value \"abc\""),
        ("error_page 404 =abc /x;", "invalid value \"=abc\""),
        ("error_page =200 /x;", "invalid value \"=200\""),
    ] {
        let text = format!("events {{}}\nhttp {{\nserver {{\nlocation / {{\n{conf}\n}}\n}}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{conf}: {err}");
        let want = format!("{msg} in {}:5", dir.path().join("t.conf").display());
        assert!(err.contains(&want), "{conf}: want {want}\n{err}");
    }
}

#[test]
fn requests_refused_before_their_phases_get_the_servers_error_page() {
    let v = Vireo::start(
        r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        client_max_body_size 10;
        error_page 400 /bad;
        error_page 413 /large;
        location /bad { return 200 "bad request page uri=$uri\n"; }
        location /large { return 200 "too large\n"; }
    }
    server {
        listen 127.0.0.1:{port2};
        error_page 400 /redirect;
        location /redirect { return 301 /elsewhere; }
    }
}
"#,
    );
    // An invalid Host and a malformed request line: the page, with the 400.
    let r = v.request("GET / HTTP/1.1\r\nHost: .\r\nConnection: close\r\n\r\n");
    assert_eq!(
        (r.status, r.text().as_str()),
        (400, "bad request page uri=/bad\n")
    );
    let r = v.request("GET /a b c HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        (r.status, r.text().as_str()),
        (400, "bad request page uri=/bad\n")
    );
    // A URI that climbs above the root, a body over client_max_body_size.
    let r = v.request("GET /../x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(
        (r.status, r.text().as_str()),
        (400, "bad request page uri=/bad\n")
    );
    let r = v.request(
        "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n",
    );
    assert_eq!((r.status, r.text().as_str()), (413, "too large\n"));
    // A redirect made there is absolute with the local address (no valid
    // Host to use), as nginx.
    let conf = v.dir.read("vireo.conf");
    let at = conf.rfind("listen 127.0.0.1:").unwrap() + "listen 127.0.0.1:".len();
    let port2: u16 = conf[at..].split(';').next().unwrap().parse().unwrap();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port2)).unwrap();
    use std::io::Write;
    s.write_all(b"GET / HTTP/1.1\r\nHost: .\r\n\r\n").unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("http://127.0.0.1:{port2}/elsewhere").as_str())
    );
}
