//! `if` (conditions on variables, file tests, regexes; in a location a level
//! of its own with the directives nginx allows there, in a server the rewrite
//! directives only), `set`, `break`, and what is refused. The expected results
//! are what nginx 1.22 answers.

mod common;
use common::*;

const CONF: &str = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        set $s "srv";
        if ($arg_srvret) { return 200 "srvret s=$s\n"; }

        location /t3 {
            if ($http_x_a = "yes") { return 200 "eq\n"; }
            if ($http_x_a != "yes") { return 200 "ne\n"; }
        }
        location /t4 {
            if ($uri ~ ^/t4/(\w+)$) { return 200 "cap=$1\n"; }
            if ($uri ~* ^/T4/CI/$) { return 200 "ci\n"; }
            if ($uri !~ ^/t4/) { return 200 "not under\n"; }
            return 200 "none\n";
        }
        location /t5 {
            if (-f $document_root/file) { return 200 "f\n"; }
            return 200 "nf\n";
        }
        location /t6 {
            if (!-e $request_filename) { return 200 "ne $uri\n"; }
            return 200 "e\n";
        }
        location /t6d {
            if (-d $document_root/dir) { return 200 "d\n"; }
            return 200 "nd\n";
        }
        location /t6x {
            if (-x $document_root/run.sh) { return 200 "x\n"; }
            if (!-x $document_root/file) { return 200 "!x\n"; }
        }
        location /t7 {
            set $a 1;
            if ($a) { set $a 2; break; set $a 3; }
            return 200 "a=$a\n";
        }
        location /t7b {
            set $a 1;
            if ($a) { set $a 2; }
            return 200 "a=$a\n";
        }
        location /t8 {
            if ($arg_x) { rewrite ^ /show?fromif last; }
            return 200 "no\n";
        }
        location /t9 {
            if ($request_method = POST) { return 405; }
            return 200 "ok\n";
        }
        location /t10 {
            if ($uri ~ "^/t10/(?<nm>[a-z]+)") { }
            return 200 "nm=$nm\n";
        }
        location /t11 {
            if ($arg_v = "") { return 200 "empty\n"; }
            if ($arg_v = 0) { return 200 "zero\n"; }
            if ($arg_v) { return 200 "true\n"; }
        }
        location /args {
            set $args "a=1&b=$arg_b";
            return 200 "args=$args is_args=$is_args arg_a=$arg_a\n";
        }
        location /show { return 200 "show uri=$uri args=$args s=$s\n"; }
    }
}
"#;

fn start() -> Vireo {
    let v = Vireo::start(CONF);
    v.dir.write("html/file", "file\n");
    v.dir.write("html/dir/x", "x\n");
    let sh = v.dir.write("html/run.sh", "#!/bin/sh\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(sh, std::fs::Permissions::from_mode(0o755)).unwrap();
    v
}

fn get(v: &Vireo, path: &str) -> (u16, String) {
    let r = v.get(path);
    (r.status, r.text())
}

fn with_header(v: &Vireo, path: &str, h: &str) -> String {
    v.request(&format!(
        "GET {path} HTTP/1.1\r\nHost: a\r\n{h}Connection: close\r\n\r\n"
    ))
    .text()
}

#[test]
fn comparisons() {
    let v = start();
    assert_eq!(with_header(&v, "/t3", "X-A: yes\r\n"), "eq\n");
    assert_eq!(with_header(&v, "/t3", "X-A: no\r\n"), "ne\n");
    assert_eq!(with_header(&v, "/t3", ""), "ne\n");
    // Empty and "0" are false.
    assert_eq!(get(&v, "/t11").1, "empty\n");
    assert_eq!(get(&v, "/t11?v=0").1, "zero\n");
    assert_eq!(get(&v, "/t11?v=00").1, "true\n");
}

#[test]
fn regexes_and_captures() {
    let v = start();
    assert_eq!(get(&v, "/t4/abc"), (200, "cap=abc\n".into()));
    assert_eq!(get(&v, "/t4/CI").1, "cap=CI\n");
    assert_eq!(get(&v, "/t4/ci/").1, "ci\n");
    assert_eq!(get(&v, "/t4/a/b").1, "none\n");
    assert_eq!(get(&v, "/t4x").1, "not under\n");
    assert_eq!(get(&v, "/t10/abc").1, "nm=abc\n");
}

#[test]
fn file_tests() {
    let v = start();
    assert_eq!(get(&v, "/t5").1, "f\n");
    assert_eq!(get(&v, "/t6").1, "ne /t6\n");
    assert_eq!(get(&v, "/t6d").1, "d\n");
    assert_eq!(get(&v, "/t6x").1, "x\n");
}

#[test]
fn break_set_and_rewrite_inside() {
    let v = start();
    // `break` in an `if` ends the script: the return after it is not run.
    assert_eq!(v.get("/t7").status, 404);
    assert_eq!(get(&v, "/t7b").1, "a=2\n");
    assert_eq!(
        get(&v, "/t8?x=1"),
        (200, "show uri=/show args=fromif&x=1 s=srv\n".into())
    );
    assert_eq!(get(&v, "/t8").1, "no\n");
    let r =
        v.request("POST /t9 HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 405);
    assert_eq!(get(&v, "/t9").1, "ok\n");
}

#[test]
fn server_level_if() {
    let v = start();
    assert_eq!(get(&v, "/t9?srvret=1").1, "srvret s=srv\n");
}

#[test]
fn set_args() {
    let v = start();
    assert_eq!(
        get(&v, "/args?b=2&c=3").1,
        "args=a=1&b=2 is_args=? arg_a=1\n"
    );
}

#[test]
fn refused_and_invalid() {
    let dir = TempDir::new("if");
    for (conf, msg) in [
        (
            "if ($uri) { try_files $uri =404; }",
            "\"try_files\" directive is not allowed here",
        ),
        (
            "if ($uri) { proxy_pass http://127.0.0.1:1/x; }",
            "\"proxy_pass\" cannot have URI part in location given by regular expression, or inside named location, or inside \"if\" statement, or inside \"limit_except\" block",
        ),
        (
            "if ($uri) { proxy_pass http://127.0.0.1:1; fastcgi_pass 127.0.0.1:1; }",
            "\"fastcgi_pass\" directive is duplicate: the location already has a content handler",
        ),
        (
            "if ($uri) { if ($uri) { } }",
            "\"if\" directive is not allowed here",
        ),
        ("if ($uri) { frob; }", "unknown directive \"frob\""),
        ("if $uri { }", "invalid condition \"$uri\""),
        ("if ($uri ! x) { }", "unexpected \"!\" in condition"),
        ("if (-q $uri) { }", "invalid condition \"-q\""),
        (
            "if ($uri ~ \"(\") { }",
            "regex \"(\" compile failed: missing closing parenthesis",
        ),
        ("if ($nosuch) { }", "unknown \"nosuch\" variable"),
        ("set uri 1;", "invalid variable name \"uri\""),
        ("set $uri 1;", "the duplicate \"uri\" variable"),
    ] {
        let text = format!("events {{}}\nhttp {{\nserver {{\nlocation / {{\n{conf}\n}}\n}}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{conf}: {err}");
        let want = format!("{msg} in {}:5", dir.path().join("t.conf").display());
        assert!(err.contains(&want), "{conf}: want {want}\n{err}");
    }
}

/// A location's `if` is a level of its own: when its condition holds the
/// request runs with its settings and content handler (nginx's "if in
/// location"); the last matching `if` wins.
#[test]
fn blocks_of_their_own() {
    let v = Vireo::start(
        r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port2};
        return 200 "backend $uri\n";
    }
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /r {
            if ($arg_other) { root {dir}/other; add_header X-If yes; }
        }
        location /p {
            proxy_pass http://127.0.0.1:{port2}/replaced;
            if ($arg_if) { }
            if ($arg_direct) { proxy_pass http://127.0.0.1:{port2}; }
        }
        location /s {
            if ($arg_proxy) { proxy_pass http://127.0.0.1:{port2}; }
            if ($arg_later) { }
        }
        location /t {
            try_files /nothing =418;
            if ($arg_if) { }
        }
        location /e {
            if ($arg_if) { error_page 404 =200 /r; }
        }
    }
}
"#,
    );
    v.dir.write("html/r", "main\n");
    v.dir.write("other/r", "other\n");
    assert_eq!(get(&v, "/r"), (200, "main\n".into()));
    let r = v.get("/r?other=1");
    assert_eq!((r.status, r.text()), (200, "other\n".into()));
    assert_eq!(r.header("x-if"), Some("yes"));
    // The location's handler with its URI part, unless the block has its own.
    assert_eq!(get(&v, "/p").1, "backend /replaced\n");
    assert_eq!(get(&v, "/p?if=1").1, "backend /replaced\n");
    assert_eq!(get(&v, "/p?direct=1").1, "backend /p\n");
    assert_eq!(get(&v, "/s?proxy=1").1, "backend /s\n");
    assert_eq!(get(&v, "/s").0, 404);
    // A later matching `if` without a handler: nginx runs the earlier one's
    // handler with settings that hold no upstream, a 500.
    assert_eq!(get(&v, "/s?proxy=1&later=1").0, 500);
    // try_files does not run once an `if` matched.
    assert_eq!(get(&v, "/t").0, 418);
    assert_eq!(get(&v, "/t?if=1").0, 404);
    assert_eq!(get(&v, "/e/x").0, 404);
    assert_eq!(get(&v, "/e/x?if=1"), (200, "main\n".into()));
}

/// A server's `if` holds the rewrite directives only, as nginx's.
#[test]
fn server_if_holds_the_script_only() {
    let dir = TempDir::new("if-server");
    let text = "events {}\nhttp {\nserver {\nif ($uri) { root /x; }\n}\n}\n";
    let out = test_conf(&dir, text);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    let want = format!(
        "\"root\" directive is not allowed here in {}:4",
        dir.path().join("t.conf").display()
    );
    assert!(err.contains(&want), "want {want}\n{err}");
}
