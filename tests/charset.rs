//! charset: `; charset=` added per MIME type (`charset_types`, `*`,
//! variables), kept or replaced (`override_charset`), bodies recoded through
//! a `charset_map` (one-byte both ways, koi8-r ↔ utf-8) from a static file
//! read in pieces, a `return` text and a proxied stream, and configuration
//! errors with file:line. Expectations follow nginx's charset.t.

mod common;
use common::*;

const CONF: &str = "
events {}
error_log {dir}/logs/error.log info;
http {
    access_log off;
    types {
        text/html html;
        text/foo  foo;
        image/png png;
    }
    charset_map B A {
        58 59; # X -> Y
    }
    charset_map koi8-r utf-8 {
        C1 D0B0; # а
        C2 D0B1; # б
        80 E282AC; # €
    }
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location / { charset utf-8; }
        location /t3.foo { charset utf-8; charset_types text/foo; }
        location /t4.any { charset utf-8; charset_types *; }
        location /t5.html { charset $arg_c; }
        location /t.html { charset A; source_charset B; }
        location /proxy/ {
            charset B;
            override_charset on;
            proxy_pass http://127.0.0.1:{port}/;
        }
        location /keep/ {
            charset B;
            proxy_pass http://127.0.0.1:{port}/;
        }
        location /gz/ {
            gzip_static on;
            charset A;
            source_charset B;
        }
        location /koi/ { charset utf-8; source_charset koi8-r; }
        location /win/ { charset utf-8; source_charset windows-1251; }
        location /nomap/ { charset $arg_c; source_charset cp866; }
        location = /ret {
            charset koi8-r;
            source_charset utf-8;
            return 200 \"xаб жx\";
        }
        location /off/ { charset off; }
    }
}";

/// The body without transfer coding (`Resp::parse` undoes chunked framing).
fn body(r: &Resp) -> Vec<u8> {
    r.body.clone()
}

fn start() -> Vireo {
    let dir = TempDir::new("charset");
    for f in ["t1.html", "t2.foo", "t3.foo", "t4.any", "t5.html", "p.png"] {
        dir.write(&format!("html/{f}"), "");
    }
    dir.write("html/off/t.html", "");
    dir.write("html/t.html", "X".repeat(99));
    dir.write("html/nomap/t.html", "X");
    dir.write("html/gz/t.html", "X".repeat(99));
    dir.write("html/gz/t.html.gz", b"\x1f\x8bXXXX");
    dir.write("html/win/t.html", b"\xcf\xf0\xe8\xe2\xe5\xf2");
    // koi8-r text longer than a read piece: "aаб€?" each time.
    dir.write("html/koi/big.html", b"a\xc1\xc2\x80\xff".repeat(20_000));
    Vireo::start_in(dir, CONF)
}

#[test]
fn content_types_and_recoding() {
    let v = start();
    let ct = |p: &str| {
        v.get(p)
            .header("content-type")
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        ct("/t1.html"),
        "text/html; charset=utf-8",
        "charset indicated"
    );
    assert_eq!(ct("/t2.foo"), "text/foo", "wrong type");
    assert_eq!(ct("/t3.foo"), "text/foo; charset=utf-8", "charset_types");
    assert_eq!(
        ct("/t4.any"),
        "text/plain; charset=utf-8",
        "charset_types *"
    );
    assert_eq!(ct("/p.png"), "image/png", "not a text type");
    assert_eq!(
        ct("/t5.html?c=koi8-r"),
        "text/html; charset=koi8-r",
        "variables"
    );
    assert_eq!(ct("/off/t.html"), "text/html", "charset off");
    // An error page is HTML too.
    assert_eq!(ct("/missing.html"), "text/html; charset=utf-8");

    // One-byte map B -> A: X becomes Y, length kept.
    let r = v.get("/t.html");
    assert_eq!(r.header("content-type"), Some("text/html; charset=A"));
    assert_eq!(body(&r), "Y".repeat(99).as_bytes(), "recode");

    // The proxied reply names charset A: with override_charset it is
    // recoded back to B, without it left as it came.
    let r = v.get("/proxy/t.html");
    assert_eq!(r.header("content-type"), Some("text/html; charset=B"));
    assert_eq!(body(&r), "X".repeat(99).as_bytes(), "override charset");
    let r = v.get("/keep/t.html");
    assert_eq!(r.header("content-type"), Some("text/html; charset=A"));
    assert_eq!(body(&r), "Y".repeat(99).as_bytes(), "charset kept");

    // A static file, koi8-r to utf-8, read and recoded piece by piece.
    let r = v.get("/koi/big.html");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(r.header("content-length"), None);
    assert_eq!(body(&r), "aаб€?".repeat(20_000).as_bytes());

    // Ranges: one-byte recoding keeps lengths, so a range is recoded; a
    // range whose length would change is sent as it is, and logged.
    let range = |p: &str| {
        v.request(&format!(
            "GET {p} HTTP/1.1\r\nHost: localhost\r\nRange: bytes=0-9\r\nConnection: close\r\n\r\n"
        ))
    };
    let r = range("/t.html");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-type"), Some("text/html; charset=A"));
    assert_eq!(body(&r), b"YYYYYYYYYY");
    let r = range("/koi/big.html");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(body(&r), b"a\xc1\xc2\x80\xffa\xc1\xc2\x80\xff");

    // A precompressed file cannot be recoded: sent as it is, without a
    // charset (nginx's charset_gzip_static.t); the plain one is recoded.
    let r = v.request(
        "GET /gz/t.html HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(body(&r), b"\x1f\x8bXXXX");
    let r = v.get("/gz/t.html");
    assert_eq!(r.header("content-type"), Some("text/html; charset=A"));
    assert_eq!(body(&r), "Y".repeat(99).as_bytes());

    // A built-in table: windows-1251 to utf-8.
    let r = v.get("/win/t.html");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(body(&r), "Привет".as_bytes());

    // A `return` text, utf-8 to koi8-r; what koi8-r lacks as &#N;.
    let r = v.get("/ret");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=koi8-r"));
    assert_eq!(body(&r), b"x\xc1\xc2 &#1078;x");

    // No map between the charsets: left alone, and logged.
    let r = v.get("/nomap/t.html?c=utf-8");
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(body(&r), b"X");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains("no \"charset_map\" between the charsets \"cp866\" and \"utf-8\""),
        "{log}"
    );
    assert!(log.contains("range response not recoded"), "{log}");
}

#[track_caller]
fn fails_at(conf: &str, msg: &str, line: u32) {
    let dir = TempDir::new("charset-cf");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let out = test_conf(&dir, conf);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{conf}\n{err}");
    let want = format!("{msg} in {}:{line}", dir.path().join("t.conf").display());
    assert!(err.contains(&want), "want {want:?}\ngot {err:?}");
}

#[test]
fn config_errors() {
    fails_at(
        "events {}\nhttp {\n    charset_map a b {\n        100 1;\n    }\n}\n",
        "invalid value \"100\"",
        4,
    );
    fails_at(
        "events {}\nhttp {\n    charset_map a utf-8 {\n        C1 D0;\n    }\n}\n",
        "invalid value \"D0\"",
        4,
    );
    fails_at(
        "events {}\nhttp {\n    charset_map a b { }\n    charset_map b a { }\n}\n",
        "duplicate \"charset_map\" between the charsets \"b\" and \"a\"",
        4,
    );
    fails_at(
        "events {}\nhttp {\n    server {\n        charset_map a b { }\n    }\n}\n",
        "\"charset_map\" directive is not allowed here",
        4,
    );
    fails_at(
        "events {}\nhttp {\n    server {\n        location / {\n            charset utf-8;\n            source_charset cp866;\n        }\n    }\n}\n",
        "no \"charset_map\" between the charsets \"cp866\" and \"utf-8\"",
        6,
    );
    fails_at(
        "events {}\nhttp {\n    override_charset maybe;\n}\n",
        "invalid value \"maybe\" in \"override_charset\" directive, it must be \"on\" or \"off\"",
        3,
    );
}

const ACCEL: &str = "
events {}
error_log {dir}/logs/error.log info;
http {
    access_log off;
    charset_map B A {
        58 59; # X -> Y
    }
    charset_map koi8-r utf-8 {
        C1 D0B0; # а
    }
    proxy_cache_path {dir}/cache keys_zone=z:1m;
    server {
        listen 127.0.0.1:{port};
        location /cached/ {
            proxy_pass http://127.0.0.1:{port2}/;
            proxy_cache z;
            proxy_cache_valid 200 1m;
        }
        location /direct/ {
            proxy_pass http://127.0.0.1:{port2}/;
            proxy_force_ranges on;
        }
    }
    server {
        listen 127.0.0.1:{port2};
        root {dir}/html;
        charset B;
        location /a/ { add_header X-Accel-Charset A; }
        location /koi/ { charset koi8-r; add_header X-Accel-Charset utf-8; }
        location /unknown/ { add_header X-Accel-Charset Z; }
    }
}";

#[test]
fn x_accel_charset_of_upstream_replies() {
    let dir = TempDir::new("charset-accel");
    let text: String = (0..100).map(|i| format!("X{i:03}XXXXXX")).collect();
    for f in ["a/t.html", "unknown/t.html"] {
        dir.write(&format!("html/{f}"), &text);
    }
    dir.write("html/koi/t.html", b"X\xc1".repeat(50));
    let v = Vireo::start_in(dir, ACCEL);
    let range = |p: &str, r: &str| {
        v.request(&format!(
            "GET {p} HTTP/1.1\r\nHost: localhost\r\nRange: bytes={r}\r\nConnection: close\r\n\r\n"
        ))
    };
    let recoded = text.replace('X', "Y");
    for p in ["/direct/a/t.html", "/cached/a/t.html", "/cached/a/t.html"] {
        // The reply says charset B and asks for A: recoded, A named, the
        // field itself not sent.
        let r = v.get(p);
        assert_eq!(r.status, 200, "{p}");
        assert_eq!(
            r.header("content-type"),
            Some("text/html; charset=A"),
            "{p}"
        );
        assert_eq!(r.header("x-accel-charset"), None, "{p}");
        assert_eq!(body(&r), recoded.as_bytes(), "{p}");
        // One range: the same bytes, recoded (a one-byte table keeps
        // lengths).
        let r = range(p, "10-19");
        assert_eq!(r.status, 206, "{p}");
        assert_eq!(r.header("content-range"), Some("bytes 10-19/1000"), "{p}");
        assert_eq!(
            r.header("content-type"),
            Some("text/html; charset=A"),
            "{p}"
        );
        assert_eq!(body(&r), b"Y001YYYYYY", "{p}");
    }
    // Several ranges of a cached reply: each part's bytes recoded and its
    // type naming A; the lengths still hold.
    for _ in 0..2 {
        let r = range("/cached/a/t.html", "0-9,990-999");
        assert_eq!(r.status, 206);
        assert!(
            r.header("content-type")
                .is_some_and(|c| c.starts_with("multipart/byteranges; boundary=")),
            "{:?}",
            r.header("content-type")
        );
        let t = String::from_utf8_lossy(&r.body).into_owned();
        assert_eq!(
            t.matches("Content-Type: text/html; charset=A\r\n").count(),
            2,
            "{t}"
        );
        assert!(!t.contains("charset=B"), "{t}");
        assert!(t.contains("bytes 0-9/1000\r\n\r\nY000YYYYYY\r\n"), "{t}");
        assert!(
            t.contains("bytes 990-999/1000\r\n\r\nY099YYYYYY\r\n"),
            "{t}"
        );
        let len: usize = r.header("content-length").unwrap().parse().unwrap();
        assert_eq!(len, r.body.len());
    }

    // koi8-r asked to go out as utf-8: the whole reply is recoded; ranges,
    // whose lengths would change, go out as they are, and are logged.
    let r = v.get("/cached/koi/t.html");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(body(&r), "Xа".repeat(50).as_bytes());
    let r = range("/cached/koi/t.html", "0-1,4-5");
    assert_eq!(r.status, 206);
    let t = r.body.clone();
    let t = String::from_utf8_lossy(&t);
    assert_eq!(
        t.matches("Content-Type: text/html; charset=koi8-r\r\n")
            .count(),
        2,
        "{t}"
    );

    // A charset the configuration does not know: left alone, and logged.
    let r = v.get("/cached/unknown/t.html");
    assert_eq!(r.header("content-type"), Some("text/html; charset=B"));
    assert_eq!(body(&r), text.as_bytes());
    assert!(eventually(5, || {
        let log = v.dir.read("logs/error.log");
        log.contains("unknown charset \"Z\" to override")
            && log.contains("range response not recoded from \"koi8-r\" to \"utf-8\"")
    }));
}
