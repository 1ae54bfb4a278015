//! valid_referers and $invalid_referer.

mod common;
use common::*;

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        server_name localhost ~^img\\d+\\.example\\.net$;

        valid_referers server_names;
        location / {
            return 200 \"[$invalid_referer]\";
        }
        location /pics/ {
            valid_referers none blocked *.example.com www.example.org/gallery/ ~\\.search\\.;
            if ($invalid_referer) {
                return 403;
            }
            return 200 \"shown\";
        }
    }
}";

fn with_referer(v: &Vireo, path: &str, referer: Option<&str>) -> Resp {
    let r = referer.map_or(String::new(), |r| format!("Referer: {r}\r\n"));
    v.request(&format!(
        "GET {path} HTTP/1.0\r\nHost: localhost\r\n{r}\r\n"
    ))
}

#[test]
fn referers_decide_the_variable() {
    let v = Vireo::start(CONF);
    let status = |r: Option<&str>| with_referer(&v, "/pics/a.png", r).status;
    assert_eq!(status(None), 200);
    assert_eq!(status(Some("stripped-by-proxy")), 200);
    assert_eq!(status(Some("http://a.b.example.com/page")), 200);
    assert_eq!(status(Some("http://example.com/page")), 403);
    assert_eq!(status(Some("https://WWW.example.org:8443/gallery/1")), 200);
    assert_eq!(status(Some("https://www.example.org/other/")), 403);
    assert_eq!(status(Some("http://www.search.example/?q=x")), 200);
    assert_eq!(status(Some("http://evil.example/")), 403);

    // The server level: its own names, the regex one included.
    let text = |r: Option<&str>| with_referer(&v, "/", r).text();
    assert_eq!(text(Some("http://LOCALHOST/x")), "[]");
    assert_eq!(text(Some("http://img12.example.net/")), "[]");
    assert_eq!(text(Some("http://img.example.net/")), "[1]");
    assert_eq!(text(None), "[1]");
}

#[test]
fn none_or_blocked_alone_is_refused() {
    let dir = TempDir::new("referer");
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n  server {\n    location / {\n      valid_referers none blocked;\n    }\n  }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("without any valid referer") && err.contains("t.conf:5"),
        "{err}"
    );
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n  server {\n    valid_referers www.*.org;\n  }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid hostname or wildcard \"www.*.org\""),
        "{err}"
    );
}
