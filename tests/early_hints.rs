//! `early_hints`: the 103 (Early Hints) responses of a backend
//! (tests/early_hints/backend.py: HTTP/1.1, and HTTP/2 with the Python h2
//! package) passed by `proxy_pass` (HTTP/1.1 and `proxy_http_version 2`)
//! and `grpc_pass` to HTTP/1.1 clients (raw) and HTTP/2 clients (curl),
//! not to HTTP/1.0 ones, and not where the directive says no.

mod common;
use common::*;
use std::io::Write;
use std::process::Command;

fn start(backend: u16) -> Vireo {
    Vireo::start(&format!(
        r#"
events {{}}
http {{
    server {{
        listen 127.0.0.1:{{port}};
        http2 on;
        early_hints 1;
        location / {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_http_version 1.1;
        }}
        location /off/ {{
            proxy_pass http://127.0.0.1:{backend};
            early_hints 0;
        }}
        location /hidden/ {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_hide_header X-Hint;
        }}
        location /h2only/ {{
            early_hints $http2;
            proxy_pass http://127.0.0.1:{backend};
        }}
        location /h2/ {{
            proxy_pass http://127.0.0.1:{backend};
            proxy_http_version 2;
        }}
        location /grpc/ {{
            grpc_pass grpc://127.0.0.1:{backend};
        }}
    }}
}}
"#
    ))
}

/// A raw request's whole answer.
fn raw(v: &Vireo, path: &str, version: &str) -> String {
    let mut s = v.connect();
    write!(
        s,
        "GET {path} {version}\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    String::from_utf8_lossy(&read_to_close(&mut s)).into_owned()
}

/// `curl -v` over HTTP/2 with prior knowledge: the heads it printed (`<`
/// lines, lowercased) and the body.
fn curl_h2(v: &Vireo, path: &str, args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-sv", "--max-time", "10", "--http2-prior-knowledge"])
        .args(args)
        .arg(format!("http://127.0.0.1:{}{path}", v.port))
        .output()
        .expect("curl");
    let heads = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("< "))
        .map(|l| l.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join("\n");
    (heads, String::from_utf8_lossy(&out.stdout).into_owned())
}

const HINT: &str = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n";

#[test]
fn hints_reach_http1_1_clients_before_the_reply() {
    let (_b, port) = early_hints_backend();
    let v = start(port);
    let out = raw(&v, "/a", "HTTP/1.1");
    // The reply's field rules: Server (hidden by default) does not pass.
    assert!(
        out.starts_with(&format!("{HINT}X-Hint: /a\r\n\r\nHTTP/1.1 200 OK\r\n")),
        "{out}"
    );
    assert!(out.ends_with("SEE-THIS /a"), "{out}");
    // proxy_hide_header applies to them as to the reply.
    let out = raw(&v, "/hidden/", "HTTP/1.1");
    assert!(
        out.starts_with(&format!("{HINT}\r\nHTTP/1.1 200 OK\r\n")),
        "{out}"
    );
    // HTTP/1.0 clients, `early_hints 0`, and conditions that do not hold
    // get the reply alone.
    for (path, version) in [
        ("/a", "HTTP/1.0"),
        ("/off/", "HTTP/1.1"),
        ("/h2only/", "HTTP/1.1"),
    ] {
        let out = raw(&v, path, version);
        assert!(
            out.starts_with("HTTP/1.1 200 OK\r\n"),
            "{path} {version}: {out}"
        );
        assert!(!out.contains("103"), "{out}");
    }
    // Hints and then a closed connection: 502 after them.
    let out = raw(&v, "/only", "HTTP/1.1");
    assert!(
        out.starts_with(HINT) && out.contains("\r\n\r\nHTTP/1.1 502 Bad Gateway\r\n"),
        "{out}"
    );
    // From an HTTP/2 upstream too (its field names are lowercase).
    let out = raw(&v, "/h2/x", "HTTP/1.1");
    assert!(
        out.to_ascii_lowercase().starts_with(&format!(
            "{}x-hint: /h2/x\r\n\r\nhttp/1.1 200 ok\r\n",
            HINT.to_ascii_lowercase()
        )),
        "{out}"
    );
    assert!(out.ends_with("SEE-THIS /h2/x"), "{out}");
}

#[test]
fn hints_reach_http2_clients_from_http1_http2_and_grpc_upstreams() {
    let (_b, port) = early_hints_backend();
    let v = start(port);
    let hint = "< http/2 103 \n< link: </style.css>; rel=preload; as=style";
    for path in ["/a", "/h2/b", "/h2only/c"] {
        let (heads, body) = curl_h2(&v, path, &[]);
        assert!(heads.starts_with(hint), "{path}: {heads}");
        assert!(heads.contains(&format!("< x-hint: {path}")), "{heads}");
        assert!(!heads.contains("< server: backend"), "{heads}");
        assert!(heads.contains("< http/2 200"), "{heads}");
        assert_eq!(body, format!("SEE-THIS {path}"));
    }
    let (heads, _) = curl_h2(&v, "/off/", &[]);
    assert!(!heads.contains("103"), "{heads}");
    // gRPC: the hints, then the answer and its trailers.
    let (heads, body) = curl_h2(
        &v,
        "/grpc/test.Echo/Unary",
        &[
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--data-binary",
            "x",
        ],
    );
    assert!(heads.starts_with(hint), "{heads}");
    assert!(heads.contains("< http/2 200"), "{heads}");
    assert!(heads.contains("< grpc-status: 0"), "{heads}");
    assert!(body.ends_with("SEE-THIS"), "{body:?}");
}
