//! Location search details beyond tests/locations.rs: the slash redirect
//! of proxy-like locations (nginx's auto_redirect), named locations, and
//! `internal`. The expected results are what nginx 1.22 answers.

mod common;
use common::*;

const CONF: &str = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /app/ { proxy_pass http://127.0.0.1:9; }
        location /both/ { proxy_pass http://127.0.0.1:9; }
        location = /both { return 200 "exact both\n"; }
        location /pre/ { proxy_pass http://127.0.0.1:9; }
        location /pre { return 200 "prefix pre\n"; }
        location ~ ^/rx { return 200 "regex\n"; }
        location /rxa/ { proxy_pass http://127.0.0.1:9; }
        location "/s p{}/" { proxy_pass http://127.0.0.1:9; }
        location /st/ { }
        location /ep/ { proxy_pass http://127.0.0.1:9; error_page 301 /show; }
        location /show { return 200 "shown\n"; }
        location /private/ { internal; }
        location /goto-private { rewrite ^ /private/x last; }
        location @named { return 200 "named\n"; }
    }
}
"#;

#[test]
fn proxy_like_locations_redirect_to_their_slash() {
    let v = Vireo::start(CONF);
    let origin = format!("http://localhost:{}", v.port);
    let r = v.get("/app?x=1");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location").unwrap(), format!("{origin}/app/?x=1"));
    // An exact or prefix location named like the URI wins.
    assert_eq!(v.get("/both").text(), "exact both\n");
    assert_eq!(v.get("/pre").text(), "prefix pre\n");
    // The redirect comes before regex locations.
    let r = v.get("/rxa");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location").unwrap(), format!("{origin}/rxa/"));
    // The location's name is escaped as nginx escapes URIs.
    let r = v.get("/s%20p%7B%7D");
    assert_eq!(
        r.header("location").unwrap(),
        format!("{origin}/s%20p%7B%7D/")
    );
    // Static locations do not redirect.
    assert_eq!(v.get("/st").status, 404);
    // It is an error_page-able 301 of that location; its Location stays.
    let r = v.get("/ep");
    assert_eq!((r.status, r.text().as_str()), (301, "shown\n"));
    assert_eq!(r.header("location").unwrap(), format!("{origin}/ep/"));
}

#[test]
fn named_and_internal_locations_are_not_reachable_from_outside() {
    let v = Vireo::start(CONF);
    assert_eq!(v.get("/@named").status, 404);
    assert_eq!(v.get("/private/x").status, 404);
    // A rewrite is internal: it reaches the location (here a missing file).
    v.dir.write("html/private/x", "secret\n");
    assert_eq!(v.get("/private/x").status, 404);
    assert_eq!(v.get("/goto-private").text(), "secret\n");
}

#[test]
fn location_config_errors() {
    let dir = TempDir::new("routing");
    for (conf, msg) in [
        (
            "location @a { alias /x/; }",
            "the \"alias\" directive cannot be used inside the named location",
        ),
        (
            "location ~ ( { }",
            "regex \"(\" compile failed: missing closing parenthesis",
        ),
        (
            "location / { internal x; }",
            "invalid number of arguments in \"internal\" directive",
        ),
    ] {
        let text = format!("events {{}}\nhttp {{\nserver {{\n{conf}\n}}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{conf}: {err}");
        let want = format!("{msg} in {}:4", dir.path().join("t.conf").display());
        assert!(err.contains(&want), "{conf}: want {want}\n{err}");
    }
}
