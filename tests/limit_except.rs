//! limit_except: the block's settings apply to the methods it does not
//! list (GET brings HEAD), over the location's; the location's handler
//! serves unless the block has its own.

mod common;
use common::*;

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /ro/ {
            limit_except GET {
                deny all;
            }
        }
        location /api/ {
            proxy_pass http://127.0.0.1:{port2}/backend/;
            limit_except GET POST {
                deny all;
            }
        }
        location /other/ {
            proxy_pass http://127.0.0.1:{port2}/backend/;
            limit_except GET {
                proxy_pass http://127.0.0.1:{port2};
            }
        }
    }
    server {
        listen 127.0.0.1:{port2};
        return 200 \"$request_method $uri\";
    }
}";

fn ask(v: &Vireo, method: &str, path: &str) -> Resp {
    v.request(&format!(
        "{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
    ))
}

#[test]
fn other_methods_take_the_block() {
    let dir = TempDir::new("lmt");
    dir.write("html/ro/a.txt", "hello");
    let v = Vireo::start_in(dir, CONF);
    assert_eq!(ask(&v, "GET", "/ro/a.txt").text(), "hello");
    assert_eq!(ask(&v, "HEAD", "/ro/a.txt").status, 200);
    assert_eq!(ask(&v, "POST", "/ro/a.txt").status, 403);
    assert_eq!(ask(&v, "DELETE", "/ro/a.txt").status, 403);
    assert_eq!(ask(&v, "MKCOL", "/ro/a.txt").status, 403);

    // The location's proxy_pass serves the listed methods and, the block
    // having none of its own, would serve the others: they are denied.
    assert_eq!(ask(&v, "GET", "/api/x").text(), "GET /backend/x");
    assert_eq!(ask(&v, "POST", "/api/x").text(), "POST /backend/x");
    assert_eq!(ask(&v, "PUT", "/api/x").status, 403);

    // The block's own proxy_pass for other methods.
    assert_eq!(ask(&v, "GET", "/other/x").text(), "GET /backend/x");
    assert_eq!(ask(&v, "DELETE", "/other/x").text(), "DELETE /other/x");
}

#[test]
fn configuration_errors() {
    let dir = TempDir::new("lmt-conf");
    for (inner, want) in [
        (
            "limit_except FETCH { deny all; }",
            "invalid method \"FETCH\"",
        ),
        (
            "limit_except GET { root /tmp; }",
            "\"root\" directive is not allowed here",
        ),
        (
            "limit_except GET { }  limit_except POST { }",
            "\"limit_except\" directive is duplicate",
        ),
    ] {
        let out = test_conf(
            &dir,
            &format!(
                "events {{}}\nhttp {{\n  server {{\n    location / {{\n      {inner}\n    }}\n  }}\n}}\n"
            ),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{inner}");
        assert!(
            err.contains(want) && err.contains("t.conf:5"),
            "{inner}: {err}"
        );
    }
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n  server {\n    limit_except GET { }\n  }\n}\n",
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not allowed here"));
}
