//! `rewrite`: flags, the argument rules, capture escaping, named captures,
//! server-level rewrites, the 10-change limit and rewrite_log. The expected
//! results are what nginx 1.22 answers for the same configuration.

mod common;
use common::*;

const CONF: &str = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        rewrite ^/old/(.*)$ /new/$1;

        location /new/ { return 200 "new uri=$uri\n"; }
        location /a/ { rewrite ^/a/(.*)$ /show?cap=$1 last; }
        location /b/ { rewrite ^/b/(.*)$ /show?cap=$1? last; }
        location /c/ { rewrite ^/c/(.*)$ /show/$1 last; }
        location /d/ { rewrite ^/d/(.*)$ /show/$1?x=1 redirect; }
        location /e/ { rewrite ^/e/(.*)$ http://ex.com/$1 permanent; }
        location /f/ { rewrite ^/f/(.*)$ /show/$1? redirect; }
        location /g/ { rewrite ^/g/(.*)$ /show/$1 redirect; }
        location /g2/ { rewrite ^/g2/(.*)$ /show?c=$1 redirect; }
        location /h/ { rewrite ^/h/(?<rest>.*)$ /show/$rest last; }
        location /i/ { rewrite ^/i/(.*)$ /show/$1 break; return 200 "not reached\n"; }
        location /j/ { rewrite ^/j/(.*)$ /show/$1; rewrite ^/show/(.*)$ /show2/$1; }
        location /k/ { rewrite ^ /show?$args last; }
        location /l/ { rewrite ^/l/(.*)$ $scheme://$host/m/$1 last; }
        location /brk/ {
            rewrite ^/brk/(.*)$ /files/$1 break;
        }
        location /nomatch/ { rewrite ^/nothing$ /show last; return 200 "kept uri=$uri\n"; }
        location /loop { rewrite ^ /loop last; }
        location /show { return 200 "uri=$uri args=$args is_args=$is_args req=$request_uri\n"; }
    }
}
"#;

fn body(v: &Vireo, path: &str) -> (u16, String) {
    let r = v.get(path);
    (r.status, r.text())
}

#[test]
fn last_with_args_in_the_replacement() {
    let v = Vireo::start(CONF);
    // The request's arguments are appended after the replacement's.
    assert_eq!(
        body(&v, "/a/xy?q=1"),
        (
            200,
            "uri=/show args=cap=xy&q=1 is_args=? req=/a/xy?q=1\n".into()
        )
    );
    // A trailing `?` drops them.
    assert_eq!(
        body(&v, "/b/xy?q=1"),
        (
            200,
            "uri=/show args=cap=xy is_args=? req=/b/xy?q=1\n".into()
        )
    );
    // No `?` in the replacement: the arguments stay as they were.
    assert_eq!(
        body(&v, "/c/xy?q=1"),
        (
            200,
            "uri=/show/xy args=q=1 is_args=? req=/c/xy?q=1\n".into()
        )
    );
    // `?$args` appends them a second time, as nginx does.
    assert_eq!(
        body(&v, "/k/?a=1"),
        (200, "uri=/show args=a=1&a=1 is_args=? req=/k/?a=1\n".into())
    );
}

#[test]
fn captures_are_escaped_in_arguments_not_in_the_uri() {
    let v = Vireo::start(CONF);
    // The path was percent-encoded: a capture put in the arguments is escaped.
    assert_eq!(
        body(&v, "/a/x%20y?q=1").1,
        "uri=/show args=cap=x%20y&q=1 is_args=? req=/a/x%20y?q=1\n"
    );
    assert_eq!(
        body(&v, "/a/x+y").1,
        "uri=/show args=cap=x%2By is_args=? req=/a/x+y\n"
    );
    assert_eq!(
        body(&v, "/a/%26%3B%3D%2F%3A%40%21").1,
        "uri=/show args=cap=%26%3B=/:@! is_args=? req=/a/%26%3B%3D%2F%3A%40%21\n"
    );
    // In the URI of an internal rewrite it stays decoded.
    assert_eq!(
        body(&v, "/c/x%20y").1,
        "uri=/show/x y args= is_args= req=/c/x%20y\n"
    );
    assert_eq!(
        body(&v, "/c/x+y").1,
        "uri=/show/x+y args= is_args= req=/c/x+y\n"
    );
    // Named captures are variables: never escaped.
    assert_eq!(
        body(&v, "/h/x%20y").1,
        "uri=/show/x y args= is_args= req=/h/x%20y\n"
    );
}

#[test]
fn redirects() {
    let v = Vireo::start(CONF);
    let origin = format!("http://localhost:{}", v.port);
    let r = v.get("/d/x%20y?q=1");
    assert_eq!(r.status, 302);
    assert_eq!(
        r.header("location").unwrap(),
        format!("{origin}/show/x%20y?x=1&q=1")
    );
    let r = v.get("/e/x%20y?q=2");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("http://ex.com/x%20y?q=2"));
    let r = v.get("/f/x?q=1");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location").unwrap(), format!("{origin}/show/x"));
    let r = v.get("/g/x%20y?q=1");
    assert_eq!(
        r.header("location").unwrap(),
        format!("{origin}/show/x%20y?q=1")
    );
    // In a redirect's path, `&`, `+` and `;` stay; in its arguments they are escaped.
    let r = v.get("/g/a+b&c");
    assert_eq!(
        r.header("location").unwrap(),
        format!("{origin}/show/a+b&c")
    );
    let r = v.get("/g2/a+b&c");
    assert_eq!(
        r.header("location").unwrap(),
        format!("{origin}/show?c=a%2Bb%26c")
    );
    // A replacement starting with $scheme is a redirect even with `last`.
    let r = v.get("/l/z");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("http://localhost/m/z"));
}

#[test]
fn break_stays_and_no_flag_goes_on() {
    let v = Vireo::start(CONF);
    v.dir.write("html/files/f.txt", "file\n");
    // `break` stops the script (the return is not reached) and stays here.
    assert_eq!(body(&v, "/brk/f.txt"), (200, "file\n".into()));
    assert_eq!(v.get("/i/x").status, 404);
    // Without a flag, the next rewrite sees the new URI; then the location
    // is searched again.
    assert_eq!(
        body(&v, "/j/k?z=2"),
        (200, "uri=/show2/k args=z=2 is_args=? req=/j/k?z=2\n".into())
    );
    // No match: the URI is unchanged and the script goes on.
    assert_eq!(
        body(&v, "/nomatch/p"),
        (200, "kept uri=/nomatch/p\n".into())
    );
}

#[test]
fn server_level_rewrite_runs_before_locations() {
    let v = Vireo::start(CONF);
    assert_eq!(body(&v, "/old/x"), (200, "new uri=/new/x\n".into()));
}

#[test]
fn cycle_is_a_500() {
    let v = Vireo::start(CONF);
    assert_eq!(v.get("/loop").status, 500);
    let log = v.stderr();
    assert!(
        log.contains("rewrite or internal redirection cycle while processing \"/loop\""),
        "{log}"
    );
}

#[test]
fn ten_uri_changes_are_allowed_the_eleventh_is_not() {
    // /s1 → /s2 → … → /s15: from /s5 it takes ten changes, from /s4 eleven.
    let mut locs = String::new();
    for i in 1..=14 {
        locs.push_str(&format!(
            "location = /s{i} {{ rewrite ^ /s{} last; }}\n\
             location = /b{i} {{ rewrite ^ /b{}; }}\n",
            i + 1,
            i + 1
        ));
    }
    let conf = format!(
        "events {{}}\nhttp {{ access_log off; server {{ listen 127.0.0.1:{{port}}; {locs}\n\
         location = /s15 {{ return 200 ok; }} location = /b15 {{ return 200 ok; }} }} }}"
    );
    let v = Vireo::start(&conf);
    for p in ["s", "b"] {
        assert_eq!(v.get(&format!("/{p}5")).status, 200, "{p}5");
        assert_eq!(v.get(&format!("/{p}4")).status, 500, "{p}4");
        assert_eq!(v.get(&format!("/{p}1")).status, 500, "{p}1");
    }
}

#[test]
fn rewrite_log_writes_notices() {
    let v = Vireo::start(
        r#"
error_log stderr notice;
events {}
http {
    access_log off;
    rewrite_log on;
    server {
        listen 127.0.0.1:{port};
        location / { rewrite ^/x/(.*)$ /show/$1 last; rewrite ^/y$ /z last; }
        location /show { return 200 "ok"; }
    }
}"#,
    );
    assert_eq!(v.get("/x/a?q=1").status, 200);
    assert_eq!(v.get("/y").status, 404);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let log = v.stderr();
    assert!(log.contains("\"^/x/(.*)$\" matches \"/x/a\""), "{log}");
    assert!(
        log.contains("rewritten data: \"/show/a\", args: \"q=1\""),
        "{log}"
    );
    assert!(log.contains("\"^/x/(.*)$\" does not match \"/y\""), "{log}");
}

#[test]
fn config_errors() {
    let dir = TempDir::new("rw");
    for (conf, msg) in [
        (
            "location / { rewrite ^/a /b bogus; }",
            "invalid parameter \"bogus\"",
        ),
        (
            "location / { rewrite ^/(a /b; }",
            "regex \"^/(a\" compile failed: missing closing parenthesis",
        ),
        (
            "location / { rewrite (?<=x+) /b; }",
            "regex \"(?<=x+)\" compile failed: length of lookbehind assertion is not limited",
        ),
        (
            "location / { rewrite ^ /$nosuch; }",
            "unknown \"nosuch\" variable",
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

#[test]
fn pcre_patterns_in_locations_rewrites_and_server_names() {
    let v = Vireo::start(
        r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        server_name ~^(?'sub'\w+)\Q.example.com\E$;
        location ~ /\.(?!well-known) { return 403; }
        location ~ ^/(?<a>\w+)/\1$ { return 200 "twice $a\n"; }
        location /p/ {
            rewrite ^/p/(?>(\w+))(?<=x)/(.*+)$ /show/$2/$1 last;
            return 200 "no rewrite\n";
        }
        location /show { return 200 "uri=$uri sub=$sub\n"; }
        location / { return 200 "plain $uri\n"; }
    }
}
"#,
    );
    let get = |host: &str, path: &str| {
        let r = v.request(&format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ));
        (r.status, r.text())
    };
    assert_eq!(get("x", "/.git/config").0, 403);
    assert_eq!(get("x", "/.well-known/a").1, "plain /.well-known/a\n");
    assert_eq!(get("x", "/ab/ab").1, "twice ab\n");
    assert_eq!(get("x", "/ab/cd").1, "plain /ab/cd\n");
    assert_eq!(
        get("bob.example.com", "/p/abx/rest").1,
        "uri=/show/rest/abx sub=bob\n"
    );
    assert_eq!(get("x", "/p/aby/rest").1, "no rewrite\n");
}
