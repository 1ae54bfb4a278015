//! `try_files`: the WordPress / Laravel / single-page-app patterns, `$uri/`,
//! named-location and `=code` fallbacks, alias, and nginx's `if` quirk.
//! The expected results are what nginx 1.22 answers.

mod common;
use common::*;

const CONF: &str = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;

        # WordPress; the PHP location stands in for fastcgi_pass.
        location / { try_files $uri $uri/ /index.php?$args; }
        location ~ \.php$ { return 200 "php uri=$uri args=$args method=$request_method\n"; }

        # Laravel.
        location /app/ { try_files $uri $uri/ /app/index.php?$query_string; }

        # Single-page application.
        location /spa/ { try_files $uri /spa/index.html; }

        location /nf/ { try_files $uri =404; }
        location /code/ { try_files /nope =418; }
        location /named/ { try_files $uri @backend; }
        location @backend { return 200 "backend uri=$uri args=$args\n"; }
        location /noargs/ { try_files /nope /show; }
        location /dirslash { try_files /dir/ =404; }
        location /al/ { alias {dir}/html/dir/; try_files $uri $uri/ =405; }
        location ~ ^/re/(.*)$ { alias {dir}/html/dir/$1; try_files "" =406; }
        location /aln/ {
            alias {dir}/html/dir/;
            location ~ html$ { try_files $uri =407; }
            location /aln/own/ { root {dir}/html; }
        }
        location /evil/ {
            set $true 1;
            try_files /nope /show;
            if ($true) { }
        }
        location /show { return 200 "show uri=$uri args=$args\n"; }
    }
}
"#;

fn start() -> Vireo {
    let v = Vireo::start(CONF);
    v.dir.write("html/a.html", "a\n");
    v.dir.write("html/dir/index.html", "dir index\n");
    v.dir.write("html/dir/a.txt", "in dir\n");
    v.dir.write("html/aln/own/b.txt", "own root\n");
    v.dir.write("html/spa/index.html", "spa\n");
    v.dir.write("html/spa/app.js", "js\n");
    v.dir.write("html/named/here.txt", "here\n");
    v.dir.write("html/app/public.css", "css\n");
    v
}

fn get(v: &Vireo, path: &str) -> (u16, String) {
    let r = v.get(path);
    (r.status, r.text())
}

#[test]
fn wordpress() {
    let v = start();
    assert_eq!(get(&v, "/a.html"), (200, "a\n".into()));
    // A directory: its index, through `$uri/`.
    assert_eq!(get(&v, "/dir/"), (200, "dir index\n".into()));
    // Without the slash, `$uri/` matches the directory and the static
    // handler redirects to the slashed URI.
    let r = v.get("/dir?x=1");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location").unwrap(),
        format!("http://localhost:{}/dir/?x=1", v.port)
    );
    // Anything else goes to the front controller with its arguments.
    assert_eq!(
        get(&v, "/2024/01/hello-world/?p=1&q=2"),
        (200, "php uri=/index.php args=p=1&q=2 method=GET\n".into())
    );
    assert_eq!(
        get(&v, "/no/such"),
        (200, "php uri=/index.php args= method=GET\n".into())
    );
    let r = v.request(
        "POST /wp-json/x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
    );
    assert_eq!(r.text(), "php uri=/index.php args= method=POST\n");
}

#[test]
fn laravel() {
    let v = start();
    assert_eq!(get(&v, "/app/public.css"), (200, "css\n".into()));
    assert_eq!(
        get(&v, "/app/users/7?sort=name"),
        (
            200,
            "php uri=/app/index.php args=sort=name method=GET\n".into()
        )
    );
}

#[test]
fn single_page_app() {
    let v = start();
    assert_eq!(get(&v, "/spa/app.js"), (200, "js\n".into()));
    let r = v.get("/spa/some/client/route?tab=2");
    assert_eq!((r.status, r.text().as_str()), (200, "spa\n"));
    assert_eq!(r.header("content-type"), Some("text/html"));
}

#[test]
fn fallbacks() {
    let v = start();
    assert_eq!(v.get("/nf/x").status, 404);
    assert_eq!(v.get("/code/x").status, 418);
    assert_eq!(get(&v, "/named/here.txt"), (200, "here\n".into()));
    // A named location keeps the URI and arguments.
    assert_eq!(
        get(&v, "/named/x?k=v"),
        (200, "backend uri=/named/x args=k=v\n".into())
    );
    // A fallback URI without `?` clears the arguments.
    assert_eq!(
        get(&v, "/noargs/x?k=v"),
        (200, "show uri=/show args=\n".into())
    );
}

#[test]
fn directory_names() {
    let v = start();
    // `/dir/` tests for a directory; the URI becomes "/dir", which the
    // static handler redirects to "/dir/".
    let r = v.get("/dirslash");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location").unwrap(),
        format!("http://localhost:{}/dir/", v.port)
    );
}

#[test]
fn with_alias() {
    let v = start();
    assert_eq!(get(&v, "/al/"), (200, "dir index\n".into()));
    assert_eq!(get(&v, "/al/index.html"), (200, "dir index\n".into()));
    assert_eq!(v.get("/al/zz").status, 405);
    // In a regex location the alias is the whole file name.
    assert_eq!(get(&v, "/re/index.html"), (200, "dir index\n".into()));
    assert_eq!(v.get("/re/zz").status, 406);
    // A nested location keeps its parent's alias (in place of the parent's
    // prefix), unless it has a root of its own.
    assert_eq!(get(&v, "/aln/index.html"), (200, "dir index\n".into()));
    assert_eq!(v.get("/aln/zz.html").status, 407);
    assert_eq!(get(&v, "/aln/a.txt"), (200, "in dir\n".into()));
    assert_eq!(get(&v, "/aln/own/b.txt"), (200, "own root\n".into()));
}

#[test]
fn a_matching_if_disables_try_files() {
    let v = start();
    // nginx runs the request in the `if` block's configuration, which has
    // no try_files: the static handler answers.
    assert_eq!(v.get("/evil/x").status, 404);
}

#[test]
fn config_errors() {
    let dir = TempDir::new("tf");
    for (conf, msg) in [
        (
            "try_files $uri;",
            "invalid number of arguments in \"try_files\" directive",
        ),
        ("try_files $uri =abc;", "invalid code \"=abc\""),
        (
            "try_files $uri /a; try_files $uri /b;",
            "\"try_files\" directive is duplicate",
        ),
    ] {
        let text = format!("events {{}}\nhttp {{\nserver {{\nlocation / {{\n{conf}\n}}\n}}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{conf}: {err}");
        let want = format!("{msg} in {}:5", dir.path().join("t.conf").display());
        assert!(err.contains(&want), "{conf}: want {want}\n{err}");
    }
}
