//! uwsgi_pass against a real uWSGI (Debian's uwsgi with its Python 3
//! plugin) running a WSGI application, started by each test on a free port
//! or a unix socket. Skips (with a message) only when uwsgi is missing.

mod common;
use common::app::{App, body_line, check_big, check_posts, env_lines};
use common::*;
use std::io::Write;

const APP: &str = r#"
import hashlib, time

def application(env, start_response):
    path = env.get('PATH_INFO', '')
    if path == '/big':
        n = int(env.get('QUERY_STRING', '').split('=')[-1] or 1) * 16
        start_response('200 OK', [('Content-Type', 'application/octet-stream')])
        return (b'x' * 65536 for _ in range(n))
    if path == '/teapot':
        start_response("418 I'm a teapot", [('Content-Type', 'text/plain'),
            ('X-Tea', 'yes'), ('Set-Cookie', 'a=1'), ('Set-Cookie', 'b=2'),
            ('X-Secret', 'hidden')])
        return [b'short and stout']
    if path == '/early':
        start_response('413 Request Entity Too Large', [('Content-Type', 'text/plain')])
        return [b'too big for me']
    if path == '/sleep':
        time.sleep(3)
    body = env['wsgi.input'].read()
    lines = ['%s=%s' % (k, v) for k, v in sorted(env.items()) if isinstance(v, str)]
    lines.append('BODY=%d %s' % (len(body), hashlib.md5(body).hexdigest()))
    start_response('200 OK', [('Content-Type', 'text/plain')])
    return [('\n'.join(lines) + '\n').encode()]
"#;

/// uwsgi serving APP on `socket` (`127.0.0.1:PORT` or a path).
fn uwsgi(dir: &TempDir, socket: &str, ready: impl FnMut() -> bool) -> Option<App> {
    let app = dir.write("app.py", APP);
    let app = app.to_str().unwrap();
    App::start(
        &[
            "uwsgi",
            "--plugin",
            "python3",
            "--uwsgi-socket",
            socket,
            "--wsgi-file",
            app,
            "--master",
            "--processes",
            "2",
            "--die-on-term",
            "--disable-logging",
        ],
        "apt-get install uwsgi uwsgi-plugin-python3",
        ready,
    )
}

fn tcp_app(dir: &TempDir) -> Option<(App, u16)> {
    let port = free_port();
    let app = uwsgi(dir, &format!("127.0.0.1:{port}"), App::tcp(port))?;
    Some((app, port))
}

fn conf(pass: &str, extra: &str) -> String {
    format!(
        r#"events {{}}
error_log {{dir}}/logs/error.log info;
http {{
  client_max_body_size 64m;
  server {{
    listen 127.0.0.1:{{port}};
    location / {{
      uwsgi_param REQUEST_METHOD $request_method;
      uwsgi_param QUERY_STRING $query_string;
      uwsgi_param CONTENT_LENGTH $content_length;
      uwsgi_param CONTENT_TYPE $content_type;
      uwsgi_param PATH_INFO $uri;
      uwsgi_param SERVER_NAME $server_name;
      uwsgi_param SERVER_PORT $server_port;
      uwsgi_param SERVER_PROTOCOL $server_protocol;
      uwsgi_param X_CUSTOM "made by $request_method";
      uwsgi_param X_EMPTY $arg_none if_not_empty;
      uwsgi_hide_header X-Secret;
      uwsgi_pass {pass};
      {extra}
    }}
  }}
}}
"#
    )
}

#[test]
fn get_sends_params_and_headers() {
    let dir = TempDir::new("uwsgi");
    let Some((_app, port)) = tcp_app(&dir) else {
        return;
    };
    let v = Vireo::start(&conf(&format!("127.0.0.1:{port}"), ""));
    let r = v.request(
        "GET /hello?a=1&b=2 HTTP/1.1\r\nHost: example.test\r\nX-Thing: t1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let env = env_lines(&r);
    for want in [
        "REQUEST_METHOD=GET",
        "QUERY_STRING=a=1&b=2",
        "PATH_INFO=/hello",
        "SERVER_NAME=",
        "HTTP_HOST=example.test",
        "HTTP_X_THING=t1",
        "X_CUSTOM=made by GET",
        "BODY=0 d41d8cd98f00b204e9800998ecf8427e",
    ] {
        assert!(env.iter().any(|l| l.starts_with(want)), "{want} in {env:?}");
    }
    assert!(!env.iter().any(|l| l.starts_with("X_EMPTY=")), "{env:?}");
    assert_eq!(r.header("Content-Length"), Some(&*r.body.len().to_string()));
}

#[test]
fn post_body_buffered_and_streamed() {
    let dir = TempDir::new("uwsgi");
    let Some((_app, port)) = tcp_app(&dir) else {
        return;
    };
    let pass = format!("127.0.0.1:{port}");
    check_posts(
        |extra| Vireo::start(&conf(&pass, extra)),
        "uwsgi_request_buffering off;",
    );
}

#[test]
fn large_response_streams() {
    let dir = TempDir::new("uwsgi");
    let Some((_app, port)) = tcp_app(&dir) else {
        return;
    };
    check_big(&Vireo::start(&conf(&format!("127.0.0.1:{port}"), "")), 20);
}

#[test]
fn status_and_headers_pass() {
    let dir = TempDir::new("uwsgi");
    let Some((_app, port)) = tcp_app(&dir) else {
        return;
    };
    let v = Vireo::start(&conf(&format!("127.0.0.1:{port}"), ""));
    let r = v.get("/teapot");
    assert_eq!(r.status, 418);
    // The application's reason phrase goes on, as nginx's status line.
    assert!(
        r.head.starts_with("HTTP/1.1 418 I'm a teapot\r\n"),
        "{}",
        r.head
    );
    assert_eq!(r.header("X-Tea"), Some("yes"));
    assert_eq!(r.header("X-Secret"), None);
    assert_eq!(r.head.matches("Set-Cookie").count(), 2, "{}", r.head);
    assert_eq!(r.text(), "short and stout");
}

#[test]
fn dead_backend_is_502_and_slow_one_504() {
    let dir = TempDir::new("uwsgi");
    let dead = closed_port();
    let v = Vireo::start(&conf(&format!("127.0.0.1:{dead}"), ""));
    assert_eq!(v.get("/").status, 502);
    let want = format!(
        "connect() failed (111: Connection refused) while connecting to upstream, client: 127.0.0.1, server: , request: \"GET / HTTP/1.1\", upstream: \"uwsgi://127.0.0.1:{dead}\", host: \"localhost\""
    );
    assert!(
        eventually(5, || error_log(&v).contains(&want)),
        "{want} in {}",
        error_log(&v)
    );
    let Some((_app, port)) = tcp_app(&dir) else {
        return;
    };
    let v = Vireo::start(&conf(
        &format!("127.0.0.1:{port}"),
        "uwsgi_read_timeout 1s;",
    ));
    assert_eq!(v.get("/sleep").status, 504);
    assert!(
        eventually(5, || error_log(&v).contains("upstream timed out")),
        "{}",
        error_log(&v)
    );
}

#[test]
fn unix_socket() {
    let dir = TempDir::new("uwsgi");
    let sock = dir.path().join("app.sock");
    let Some(_app) = uwsgi(&dir, sock.to_str().unwrap(), App::unix(sock.clone())) else {
        return;
    };
    let v = Vireo::start(&conf(&format!("unix:{}", sock.display()), ""));
    let r = v.get("/u?x=1");
    assert_eq!(r.status, 200);
    assert!(env_lines(&r).contains(&"QUERY_STRING=x=1".to_string()));
}

#[test]
fn upstream_block_with_a_dead_peer() {
    let dir = TempDir::new("uwsgi");
    let Some((_app, port)) = tcp_app(&dir) else {
        return;
    };
    let dead = closed_port();
    let v = Vireo::start(&conf("uwsgi://apps", "add_header X-Up $upstream_addr;").replace(
        "  server {",
        &format!(
            "  upstream apps {{ server 127.0.0.1:{dead}; server 127.0.0.1:{port}; }}\n  server {{"
        ),
    ));
    let mut addrs = Vec::new();
    for _ in 0..4 {
        let r = v.get("/");
        assert_eq!(r.status, 200);
        addrs.push(r.header("X-Up").unwrap().to_string());
    }
    // The dead peer is tried once, then left out while it is failed.
    assert!(
        addrs.contains(&format!("127.0.0.1:{dead}, 127.0.0.1:{port}")),
        "{addrs:?}"
    );
    assert!(addrs.contains(&format!("127.0.0.1:{port}")), "{addrs:?}");
}

#[test]
fn config_errors_name_file_and_line() {
    let dir = TempDir::new("uwsgi");
    assert_conf_errors(
        &dir,
        &[
            (
                "location / { uwsgi_pass http://127.0.0.1:1; }",
                "invalid URL prefix \"http://\" in \"uwsgi_pass\"",
            ),
            (
                "location / { uwsgi_modifier1 256; }",
                "invalid parameter \"256\" in \"uwsgi_modifier1\" directive",
            ),
            (
                "location / { uwsgi_param A b c; }",
                "invalid parameter \"c\" in \"uwsgi_param\" directive",
            ),
            (
                "uwsgi_pass 127.0.0.1:1;",
                "\"uwsgi_pass\" directive is not allowed here",
            ),
        ],
    );
}

#[test]
fn suwsgi_is_uwsgi_over_tls() {
    let dir = TempDir::new("uwsgi");
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=app.test",
            "-addext",
            "subjectAltName=DNS:app.test",
            "-days",
            "2",
            "-keyout",
            "app.key",
            "-out",
            "app.crt",
        ],
    );
    let port = free_port();
    let (crt, key) = (dir.path().join("app.crt"), dir.path().join("app.key"));
    let app = dir.write("app.py", APP);
    let Some(_app) = App::start(
        &[
            "uwsgi",
            "--plugin",
            "python3",
            "--ssl-socket",
            &format!("127.0.0.1:{port},{},{}", crt.display(), key.display()),
            "--wsgi-file",
            app.to_str().unwrap(),
            "--master",
            "--die-on-term",
            "--disable-logging",
        ],
        "apt-get install uwsgi uwsgi-plugin-python3",
        App::tcp(port),
    ) else {
        return;
    };
    let ssl = format!(
        "uwsgi_ssl_verify on; uwsgi_ssl_trusted_certificate {}; uwsgi_ssl_name app.test;",
        crt.display()
    );
    let v = Vireo::start(&conf(&format!("suwsgi://127.0.0.1:{port}"), &ssl));
    let r = v.get("/tls?t=1");
    assert_eq!(r.status, 200, "{}", error_log(&v));
    assert!(env_lines(&r).contains(&"QUERY_STRING=t=1".to_string()));
    // A name the certificate does not hold fails the handshake: 502.
    let v = Vireo::start(&conf(
        &format!("suwsgi://127.0.0.1:{port}"),
        &ssl.replace("uwsgi_ssl_name app.test", "uwsgi_ssl_name other.test"),
    ));
    assert_eq!(v.get("/").status, 502);
    assert!(
        eventually(5, || error_log(&v)
            .contains("while SSL handshaking to upstream")),
        "{}",
        error_log(&v)
    );
}

#[test]
fn params_file_switches_and_intercepted_errors() {
    let dir = TempDir::new("uwsgi");
    let Some((_app, port)) = tcp_app(&dir) else {
        return;
    };
    let v = Vireo::start(&format!(
        r#"events {{}}
http {{
  server {{
    listen 127.0.0.1:{{port}};
    location / {{
      include uwsgi_params;
      uwsgi_pass_request_headers off;
      uwsgi_pass_request_body off;
      # The body is not sent: its length is not either (the last of two wins).
      uwsgi_param CONTENT_LENGTH 0;
      uwsgi_intercept_errors on;
      error_page 418 /err;
      uwsgi_pass 127.0.0.1:{port};
    }}
    location = /err {{ return 200 "intercepted\n"; }}
  }}
}}
"#
    ));
    let r = v.request(
        "POST /p?q=1 HTTP/1.1\r\nHost: h\r\nX-Thing: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    );
    let env = env_lines(&r);
    for want in [
        "REQUEST_METHOD=POST",
        "QUERY_STRING=q=1",
        "PATH_INFO=/p",
        "REQUEST_URI=/p?q=1",
    ] {
        assert!(env.contains(&want.to_string()), "{want} in {env:?}");
    }
    assert!(!env.iter().any(|l| l.starts_with("HTTP_")), "{env:?}");
    assert!(env.contains(&body_line(b"")), "{env:?}");
    let r = v.get("/teapot");
    assert_eq!((r.status, r.text().as_str()), (418, "intercepted\n"));
}

#[test]
fn an_answer_before_the_body_is_read() {
    let dir = TempDir::new("uwsgi");
    let Some((_app, port)) = tcp_app(&dir) else {
        return;
    };
    let v = Vireo::start(&conf(&format!("127.0.0.1:{port}"), ""));
    let body = vec![b'b'; 8 << 20];
    let mut s = v.connect();
    write!(
        s,
        "POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(&body).unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!((r.status, r.text().as_str()), (413, "too big for me"));
}
