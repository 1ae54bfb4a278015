//! auth_request: a real HTTP authorization service (a small server started
//! here) decides by the request's token: 2xx lets the request through to
//! static, proxied and FastCGI content, 401 passes its `WWW-Authenticate`
//! fields on, 403 refuses, anything else is a 500; `auth_request_set` takes
//! values from its reply; `satisfy` combines it with allow/deny and
//! auth_basic; HTTP/2 request bodies still reach the upstream after the
//! check. Expectations checked against nginx 1.22.

mod common;
use common::fpm::Fpm;
use common::*;
use std::io::Write;
use std::process::Command;

/// The value of a header field of `head` (names in any case).
fn field<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The authorization service: by the `Authorization: Bearer` token.
fn authorize(head: &str, _body: &[u8]) -> String {
    let token = field(head, "authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let (status, extra) = match token {
        "good" => ("200 OK", "X-User: alice\r\n"),
        "forbidden" => ("403 Forbidden", ""),
        "broken" => ("404 Not Found", ""),
        _ => (
            "401 Unauthorized",
            "WWW-Authenticate: Bearer realm=\"api\"\r\nWWW-Authenticate: Basic realm=\"old\"\r\n",
        ),
    };
    format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Length: 12\r\nConnection: close\r\n\r\nauth verdict"
    )
}

/// The content upstream: says what it got.
fn upstream(head: &str, body: &[u8]) -> String {
    let user = field(head, "x-user").unwrap_or("-");
    let text = format!("up user={user} body={}", body.len());
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )
}

const CONF: &str = "
error_log logs/error.log info;
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        listen 127.0.0.1:{port2} http2;
        root {dir}/html;
        client_body_buffer_size 1k;

        location /static/ {
            auth_request /auth;
        }
        location /api/ {
            auth_request /auth;
            auth_request_set $user $upstream_http_x_user;
            auth_request_set $auth_status $upstream_status;
            proxy_set_header X-User $user;
            add_header X-Auth-Status $auth_status;
            proxy_pass http://127.0.0.1:UP;
        }
        location /api/open/ {
            auth_request off;
            proxy_pass http://127.0.0.1:UP;
        }
        location /php/ {
            auth_request /auth;
            fastcgi_pass 127.0.0.1:FPM;
            fastcgi_param SCRIPT_FILENAME {dir}/php/echo.php;
            fastcgi_param REQUEST_METHOD $request_method;
            fastcgi_param CONTENT_LENGTH $content_length;
        }
        location /sent/ {
            auth_request /check.txt;
            auth_request_set $type $sent_http_content_type;
            add_header X-Check-Type $type;
        }
        location = /check.txt {
            internal;
        }
        location /all-deny/ {
            deny all;
            auth_request /auth;
        }
        location /any/ {
            satisfy any;
            deny all;
            auth_request /auth;
        }
        location /any-basic/ {
            satisfy any;
            auth_basic \"staff\";
            auth_basic_user_file {dir}/htpasswd;
            auth_request /auth;
        }
        location /page/ {
            auth_request /auth;
            error_page 401 /login.html;
        }
        location = /auth {
            internal;
            proxy_pass http://127.0.0.1:AUTH/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length \"\";
            proxy_set_header X-Original-URI $request_uri;
        }
    }
}";

struct Site {
    v: Vireo,
    auth: Service,
    up: Service,
}

fn site(fpm_port: u16) -> Site {
    let auth = service(authorize);
    let up = service(upstream);
    let dir = TempDir::new("authreq");
    dir.write("html/static/a.txt", "static content\n");
    dir.write("html/sent/a.txt", "sent content\n");
    dir.write("html/check.txt", "checked\n");
    dir.write("html/login.html", "please log in\n");
    dir.write("htpasswd", "user:{PLAIN}secret\n");
    dir.write(
        "php/echo.php",
        "<?php echo 'php m=', $_SERVER['REQUEST_METHOD'], ' body=', strlen(file_get_contents('php://input'));",
    );
    let conf = CONF
        .replace("AUTH", &auth.port.to_string())
        .replace("UP", &up.port.to_string())
        .replace("FPM", &fpm_port.to_string());
    Site {
        v: Vireo::start_in(dir, &conf),
        auth,
        up,
    }
}

fn get(v: &Vireo, path: &str, token: &str) -> Resp {
    v.request(&format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nX-Trace: t1\r\nConnection: close\r\n\r\n"
    ))
}

fn post(v: &Vireo, path: &str, token: &str, body: &[u8]) -> Resp {
    let mut s = v.connect();
    s.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(body).unwrap();
    Resp::parse(&read_to_close(&mut s)).unwrap()
}

/// Every header field of a raw answer with this name (lowercase).
fn fields(raw: &[u8], name: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(raw);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

#[test]
fn verdicts_in_front_of_static_and_proxy() {
    let s = site(1);
    let v = &s.v;
    let r = get(v, "/static/a.txt", "good");
    assert_eq!((r.status, r.text().as_str()), (200, "static content\n"));
    // The subrequest is a GET with the client's headers and no body; its
    // own body never reaches the client.
    let seen = s.auth.seen.lock().unwrap().clone();
    let (head, body) = seen.last().unwrap();
    assert!(head.starts_with("GET /check HTTP/1."), "{head}");
    assert!(head.contains("X-Trace: t1") && head.contains("X-Original-URI: /static/a.txt"));
    assert!(body.is_empty() && !head.to_ascii_lowercase().contains("content-length"));
    assert!(!r.text().contains("auth verdict"));

    let r = get(v, "/static/a.txt", "forbidden");
    assert_eq!(r.status, 403);
    let r = get(v, "/static/a.txt", "broken");
    assert_eq!(r.status, 500);
    assert!(eventually(5, || error_log(v)
        .contains("auth request unexpected status: 404")));

    // 401: every WWW-Authenticate field of the service's reply goes on.
    let raw = v.raw(b"GET /static/a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(
        raw.starts_with(b"HTTP/1.1 401 "),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert_eq!(
        fields(&raw, "www-authenticate"),
        ["Bearer realm=\"api\"", "Basic realm=\"old\""]
    );
    // …also through an error page.
    let raw = v.raw(b"GET /page/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = Resp::parse(&raw).unwrap();
    assert_eq!((r.status, r.text().as_str()), (401, "please log in\n"));
    assert_eq!(fields(&raw, "www-authenticate").len(), 2);

    // Proxied content, with auth_request_set's values from the reply.
    let r = get(v, "/api/x", "good");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "up user=alice body=0");
    assert_eq!(r.header("x-auth-status"), Some("200"));
    let r = get(v, "/api/x", "nobody");
    assert_eq!(r.status, 401);
    assert_eq!(r.header("x-auth-status"), None);
    // `off`: no check.
    let before = s.auth.seen.lock().unwrap().len();
    let r = get(v, "/api/open/x", "nobody");
    assert_eq!((r.status, r.text().as_str()), (200, "up user=- body=0"));
    assert_eq!(s.auth.seen.lock().unwrap().len(), before);

    // A request body (over client_body_buffer_size: a temporary file)
    // reaches the upstream after the check; the check never sees it.
    let body = vec![b'b'; 50_000];
    let r = post(v, "/api/upload", "good", &body);
    assert_eq!(
        (r.status, r.text().as_str()),
        (200, "up user=alice body=50000")
    );
    assert!(s.auth.seen.lock().unwrap().last().unwrap().1.is_empty());
    let r = post(v, "/api/upload", "nobody", &body);
    assert_eq!(r.status, 401);
    assert_eq!(s.up.seen.lock().unwrap().len(), 3);
}

#[test]
fn sent_http_variables_of_a_local_check() {
    let s = site(1);
    let r = get(&s.v, "/sent/a.txt", "");
    assert_eq!((r.status, r.text().as_str()), (200, "sent content\n"));
    assert_eq!(r.header("x-check-type"), Some("text/plain"));
    // An `internal` check location stays closed to clients.
    assert_eq!(get(&s.v, "/check.txt", "").status, 404);
    assert_eq!(get(&s.v, "/auth", "good").status, 404);
}

#[test]
fn satisfy_combines_with_access_and_basic() {
    let s = site(1);
    let v = &s.v;
    // satisfy all: the address rule refuses first, without asking.
    let r = get(v, "/all-deny/", "good");
    assert_eq!(r.status, 403);
    assert!(s.auth.seen.lock().unwrap().is_empty());
    // satisfy any: the check is enough; a 401 wins over the rule's 403.
    let r = get(v, "/any/x", "good");
    assert_eq!(r.status, 404);
    let raw = v.raw(b"GET /any/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(raw.starts_with(b"HTTP/1.1 401 "));
    assert_eq!(fields(&raw, "www-authenticate").len(), 2);
    assert_eq!(get(v, "/any/x", "forbidden").status, 403);
    assert_eq!(get(v, "/any/x", "broken").status, 500);
    // satisfy any with basic authentication: either passes.
    let r = v.request(
        "GET /any-basic/x HTTP/1.1\r\nHost: x\r\nAuthorization: Basic dXNlcjpzZWNyZXQ=\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 404);
    let asked = s.auth.seen.lock().unwrap().len();
    assert_eq!(get(v, "/any-basic/x", "good").status, 404);
    assert_eq!(s.auth.seen.lock().unwrap().len(), asked + 1);
    // Basic's 401 stays when the check forbids.
    assert_eq!(get(v, "/any-basic/x", "forbidden").status, 401);
}

#[test]
fn fastcgi_content_after_the_check() {
    let Some(fpm) = Fpm::start(2) else { return };
    let s = site(fpm.port);
    let r = get(&s.v, "/php/x", "good");
    assert_eq!((r.status, r.text().as_str()), (200, "php m=GET body=0"));
    let r = post(&s.v, "/php/x", "good", &[b'p'; 3000]);
    assert_eq!((r.status, r.text().as_str()), (200, "php m=POST body=3000"));
    assert_eq!(get(&s.v, "/php/x", "forbidden").status, 403);
}

/// curl over HTTP/2 with prior knowledge: status line and body.
fn h2_post(port: u16, path: &str, token: &str, body: &str) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "30", "--http2-prior-knowledge"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["--data-binary", body])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn http2_bodies_reach_the_upstream_after_the_check() {
    let s = site(1);
    let port2: u16 = {
        let conf = s.v.dir.read("vireo.conf");
        let at = conf.find(" http2;").unwrap();
        let start = conf[..at].rfind(':').unwrap() + 1;
        conf[start..at].parse().unwrap()
    };
    let body = "h".repeat(5000);
    let out = h2_post(port2, "/api/h2", "good", &body);
    assert!(out.starts_with("HTTP/2 200"), "{out}");
    assert!(out.ends_with("up user=alice body=5000"), "{out}");
    let out = h2_post(port2, "/api/h2", "nobody", &body);
    assert!(out.starts_with("HTTP/2 401"), "{out}");
    assert!(
        out.contains("www-authenticate: Bearer realm=\"api\""),
        "{out}"
    );
}

#[test]
fn directive_errors_name_file_and_line() {
    let dir = TempDir::new("authreq-conf");
    for (conf, want) in [
        (
            "events {}\nhttp {\n  server {\n    auth_request /a /b;\n  }\n}\n",
            "invalid number of arguments in \"auth_request\" directive",
        ),
        (
            "events {}\nhttp {\n  server {\n    auth_request /a;\n    auth_request /b;\n  }\n}\n",
            "\"auth_request\" directive is duplicate",
        ),
        (
            "events {}\nhttp {\n  server {\n    location / {\n  auth_request_set user $upstream_http_x_user;\n  }\n}\n}\n",
            "invalid variable name \"user\"",
        ),
        (
            "events {}\nhttp {\n  server {\n    auth_request_set $uri x;\n  }\n}\n",
            "the duplicate \"uri\" variable",
        ),
        (
            "events {}\nauth_request /a;\nhttp {\n  server {\n  }\n}\n",
            "\"auth_request\" directive is not allowed here",
        ),
    ] {
        let line = conf
            .lines()
            .position(|l| l.contains("auth_request"))
            .map(|i| i + 1)
            .unwrap();
        let line = if want.contains("is duplicate") {
            line + 1
        } else {
            line
        };
        let out = test_conf(&dir, conf);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{conf}");
        assert!(
            err.contains(want) && err.contains(&format!("t.conf:{line}")),
            "{want} at {line}: {err}"
        );
    }
}
