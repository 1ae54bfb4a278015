//! post_action: once the response is sent, an internal GET to the URI runs
//! through the locations (internal ones too) and its answer is discarded.
//! Expectations checked against nginx 1.22.

mod common;
use common::*;

const CONF: &str = "
events {}
http {
    log_format p \"$request_uri $http_x_client\";
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location / {
            post_action /after?from=$uri;
        }
        location = /after {
            internal;
            proxy_pass http://127.0.0.1:{port2}/seen;
        }
        location /quiet/ {
            post_action off;
        }
    }
    server {
        listen 127.0.0.1:{port2};
        access_log logs/post.log p;
        location = /seen {
            return 200 HIDDEN;
        }
    }
}";

#[test]
fn runs_after_the_response_and_is_discarded() {
    let dir = TempDir::new("post_action");
    dir.write("html/index.html", "SEE-THIS");
    dir.write("html/quiet/index.html", "QUIET");
    let v = Vireo::start_in(dir, CONF);
    let r = v.request("GET / HTTP/1.0\r\nHost: localhost\r\nX-Client: c1\r\n\r\n");
    assert_eq!(r.text(), "SEE-THIS");
    // The answer of the post action never reaches the client; the upstream
    // saw it, with the client's headers and the arguments as written.
    let mut log = String::new();
    assert!(eventually(5, || {
        log = v.dir.read("logs/post.log");
        !log.is_empty()
    }));
    assert_eq!(log, "/seen?from=$uri c1\n");
    assert_eq!(v.get("/quiet/").text(), "QUIET");
    // Not reachable from outside: the location is internal.
    assert_eq!(v.get("/after").status, 404);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(v.dir.read("logs/post.log").lines().count(), 1);
}
