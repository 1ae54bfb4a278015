//! The HTTP cache (`proxy_cache`, `fastcgi_cache`) against real origins:
//! a second server of the same vireo (its static files, headers set with
//! add_header), and php-fpm for FastCGI.

mod common;
use common::fpm::Fpm;
use common::*;
use std::time::Duration;

/// `{port}` caches what `{port2}` (the origin: files under html/) answers.
fn conf(front: &str, origin: &str) -> String {
    format!(
        r#"events {{}}
http {{
  proxy_cache_path {{dir}}/cache levels=1:2 keys_zone=c:1m inactive=1h;
  server {{
    listen 127.0.0.1:{{port}};
    add_header X-Cache $upstream_cache_status always;
    location / {{
      proxy_pass http://127.0.0.1:{{port2}};
      proxy_cache c;
      proxy_cache_key $uri;
      {front}
      proxy_cache_valid 200 1h;
    }}
  }}
  server {{
    listen 127.0.0.1:{{port2}};
    root {{dir}}/html;
    {origin}
  }}
}}
"#
    )
}

fn cache_status(r: &Resp) -> &str {
    r.header("x-cache").unwrap_or("")
}

#[test]
fn miss_hit_expired_bypass() {
    let dir = TempDir::new("cache");
    dir.write("html/t", "one");
    let v = Vireo::start_in(
        dir,
        &conf(
            "proxy_cache_bypass $arg_fresh; location /short { proxy_pass http://127.0.0.1:{port2}; proxy_cache c; proxy_cache_valid 200 1s; }",
            "",
        ),
    );
    let r = v.get("/t");
    assert_eq!(
        (r.status, cache_status(&r), r.text().as_str()),
        (200, "MISS", "one")
    );
    v.dir.write("html/t", "two");
    let r = v.get("/t");
    assert_eq!((cache_status(&r), r.text().as_str()), ("HIT", "one"));
    // Bypassed: fetched anew and stored.
    let r = v.get("/t?fresh=1");
    assert_eq!((cache_status(&r), r.text().as_str()), ("BYPASS", "two"));
    let r = v.get("/t");
    assert_eq!((cache_status(&r), r.text().as_str()), ("HIT", "two"));
    // Expired after its 1 s.
    v.dir.write("html/short", "a");
    assert_eq!(cache_status(&v.get("/short")), "MISS");
    v.dir.write("html/short", "b");
    assert_eq!(v.get("/short").text(), "a");
    std::thread::sleep(Duration::from_millis(2100));
    let r = v.get("/short");
    assert_eq!((cache_status(&r), r.text().as_str()), ("EXPIRED", "b"));
    assert_eq!(cache_status(&v.get("/short")), "HIT");
}

#[test]
fn hits_answer_ranges_conditionals_and_head() {
    let dir = TempDir::new("cache");
    dir.write("html/r", "0123456789");
    let v = Vireo::start_in(dir, &conf("", ""));
    let r = v.get("/r");
    let etag = r.header("etag").unwrap().to_string();
    let r =
        v.request("GET /r HTTP/1.1\r\nHost: x\r\nRange: bytes=2-4\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (206, "234"));
    assert_eq!(r.header("content-range"), Some("bytes 2-4/10"));
    let r = v.request(&format!(
        "GET /r HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n"
    ));
    assert_eq!((r.status, cache_status(&r)), (304, "HIT"));
    let raw = v.raw(b"HEAD /r HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let r = Resp::parse(&raw).unwrap();
    assert_eq!((r.status, r.header("content-length")), (200, Some("10")));
    assert!(r.body.is_empty());
}

#[test]
fn validity_comes_from_the_reply() {
    let dir = TempDir::new("cache");
    for f in [
        "xae0", "nostore", "private", "maxage", "past", "cookie", "star", "plain",
    ] {
        dir.write(&format!("html/{f}"), f);
    }
    let v = Vireo::start_in(
        dir,
        &conf(
            "location /maxage { proxy_pass http://127.0.0.1:{port2}; proxy_cache c; }",
            r#"location /xae0 { add_header X-Accel-Expires 0; }
    location /nostore { add_header Cache-Control no-store; }
    location /private { add_header Cache-Control "private, max-age=60"; }
    location /maxage { add_header Cache-Control max-age=60; }
    location /past { add_header Expires "Thu, 01 Jan 1970 00:00:01 GMT"; }
    location /cookie { add_header Set-Cookie a=1; }
    location /star { add_header Vary *; }"#,
        ),
    );
    // Not cached: asked of the origin each time.
    for f in ["xae0", "nostore", "private", "past", "cookie", "star"] {
        assert_eq!(cache_status(&v.get(&format!("/{f}"))), "MISS", "{f}");
        assert_eq!(cache_status(&v.get(&format!("/{f}"))), "MISS", "{f}");
    }
    // max-age makes a reply cacheable without proxy_cache_valid.
    assert_eq!(cache_status(&v.get("/maxage")), "MISS");
    assert_eq!(cache_status(&v.get("/maxage")), "HIT");
    assert_eq!(cache_status(&v.get("/plain")), "MISS");
    assert_eq!(cache_status(&v.get("/plain")), "HIT");
    // X-Accel-Expires is the cache's, not the client's.
    assert!(v.get("/xae0").header("x-accel-expires").is_none());
}

#[test]
fn variants_by_vary() {
    let dir = TempDir::new("cache");
    dir.write("html/v", "v");
    let v = Vireo::start_in(dir, &conf("", "location /v { add_header Vary X-Lang; }"));
    let get = |lang: &str| {
        let r = v.request(&format!(
            "GET /v HTTP/1.1\r\nHost: x\r\nX-Lang: {lang}\r\nConnection: close\r\n\r\n"
        ));
        cache_status(&r).to_string()
    };
    assert_eq!(get("en"), "MISS");
    assert_eq!(get("en"), "HIT");
    assert_eq!(get("fr"), "MISS");
    assert_eq!(get("fr"), "HIT");
    assert_eq!(get("en"), "HIT");
    assert_eq!(get(" en "), "HIT", "whitespace does not make a variant");
}

#[test]
fn stale_when_the_origin_fails_and_revalidated() {
    let dir = TempDir::new("cache");
    dir.write("html/s", "good");
    let v = Vireo::start_in(
        dir,
        &conf(
            "proxy_cache_valid 200 1s; proxy_cache_use_stale error http_500; proxy_cache_revalidate on;",
            "location /s { if (-f {dir}/fail) { return 500; } }",
        ),
    );
    assert_eq!(cache_status(&v.get("/s")), "MISS");
    std::thread::sleep(Duration::from_millis(2100));
    // The file did not change: the origin's 304 makes the entry fresh.
    let r = v.get("/s");
    assert_eq!(
        (cache_status(&r), r.text().as_str()),
        ("REVALIDATED", "good")
    );
    assert_eq!(cache_status(&v.get("/s")), "HIT");
    std::thread::sleep(Duration::from_millis(2100));
    v.dir.write("fail", "");
    let r = v.get("/s");
    assert_eq!(
        (r.status, cache_status(&r), r.text().as_str()),
        (200, "STALE", "good")
    );
}

#[test]
fn refused_configurations() {
    let dir = TempDir::new("cache");
    let out = test_conf(
        &dir,
        "events {} http { server { listen 127.0.0.1:1; location / { proxy_pass http://127.0.0.1:2; proxy_cache nope; } } }",
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cache zone \"nope\" is unknown"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = test_conf(
        &dir,
        "events {} http { proxy_cache_path c levels=3 keys_zone=z:1m; }",
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid \"levels\""));
}

/// Cached bodies after a crash in the middle of filling: every entry the
/// restarted server answers from is the origin's body, whole; the partial
/// files are removed.
#[test]
fn kill_during_fill_leaves_only_whole_entries() {
    let dir = TempDir::new("cache");
    let body = |i: usize| -> Vec<u8> {
        (0..400_000usize)
            .map(|j| b'a' + ((i * 7 + j) % 26) as u8)
            .collect()
    };
    for i in 0..8 {
        dir.write(&format!("html/b{i}"), body(i));
    }
    let template = conf("", "location / { limit_rate 400k; }");
    let mut v = Vireo::start_in(dir, &template);
    // Two small files are stored whole before the crash.
    v.dir.write("html/small", "small");
    assert_eq!(cache_status(&v.get("/small")), "MISS");
    let port = v.port;
    let fills: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                use std::io::Write;
                let _ = write!(
                    s,
                    "GET /b{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                );
                read_to_close(&mut s)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    v.signal(9);
    v.wait_exit(5);
    for f in fills {
        let _ = f.join();
    }
    let cache = v.dir.path().join("cache");
    let temps = |d: &std::path::Path| -> usize {
        let mut n = 0;
        let mut dirs = vec![d.to_path_buf()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.file_type().unwrap().is_dir() {
                    dirs.push(e.path());
                } else if e.file_name().to_string_lossy().starts_with(".tmp-") {
                    n += 1;
                }
            }
        }
        n
    };
    assert!(temps(&cache) > 0, "the crash left partial fills");
    // Restart on the same folder and port.
    let dir = std::mem::replace(&mut v.dir, TempDir(std::path::PathBuf::new()));
    drop(v);
    let v = Vireo::start_in(dir, &template);
    for i in 0..8 {
        let raw =
            v.raw(format!("GET /b{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes());
        let r = Resp::parse(&raw).unwrap_or_else(|| panic!("b{i}: no response; {}", v.stderr()));
        assert_eq!(r.status, 200);
        assert!(
            r.body == body(i),
            "b{i}: {} bytes, {}",
            r.body.len(),
            cache_status(&r)
        );
    }
    let r = v.get("/small");
    assert_eq!((cache_status(&r), r.text().as_str()), ("HIT", "small"));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        temps(&v.dir.path().join("cache")),
        0,
        "the loader removed them"
    );
    for i in 0..8 {
        let r = v.get(&format!("/b{i}"));
        assert_eq!(cache_status(&r), "HIT");
        assert!(r.body == body(i), "b{i}");
    }
}

#[test]
fn manager_keeps_max_size() {
    let dir = TempDir::new("cache");
    for i in 0..6 {
        dir.write(&format!("html/m{i}"), vec![b'm'; 10_000]);
    }
    let v = Vireo::start_in(
        dir,
        &conf("", "").replace("inactive=1h", "inactive=1h max_size=35k"),
    );
    for i in 0..6 {
        assert_eq!(cache_status(&v.get(&format!("/m{i}"))), "MISS");
    }
    std::thread::sleep(Duration::from_millis(2500));
    // The least recently used went; the latest stayed.
    assert_eq!(cache_status(&v.get("/m5")), "HIT");
    assert_eq!(cache_status(&v.get("/m0")), "MISS");
}

#[test]
fn fastcgi_replies_are_cached() {
    let Some(fpm) = Fpm::start(2) else { return };
    let dir = TempDir::new("fcgi-cache");
    dir.write(
        "html/now.php",
        "<?php header('X-Accel-Expires: 60'); echo microtime(true);",
    );
    dir.write(
        "html/cookie.php",
        "<?php setcookie('a', '1'); echo microtime(true);",
    );
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/conf/fastcgi_params"),
        dir.path().join("fastcgi_params"),
    )
    .unwrap();
    let v = Vireo::start_in(
        dir,
        &format!(
            r#"events {{}}
http {{
  fastcgi_cache_path {{dir}}/fcache keys_zone=f:1m;
  server {{
    listen 127.0.0.1:{{port}};
    root {{dir}}/html;
    add_header X-Cache $upstream_cache_status always;
    location ~ \.php$ {{
      include fastcgi_params;
      fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
      fastcgi_pass 127.0.0.1:{};
      fastcgi_cache f;
      fastcgi_cache_key $request_uri;
    }}
  }}
}}
"#,
            fpm.port
        ),
    );
    let a = v.get("/now.php");
    assert_eq!(
        (a.status, cache_status(&a)),
        (200, "MISS"),
        "{}",
        v.stderr()
    );
    let b = v.get("/now.php");
    assert_eq!((cache_status(&b), b.text()), ("HIT", a.text()));
    // HEAD goes to the application as GET and fills the entry.
    let raw = v.raw(b"HEAD /now.php?h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(Resp::parse(&raw).unwrap().body.is_empty());
    assert_eq!(cache_status(&v.get("/now.php?h")), "HIT");
    // A reply setting a cookie is not stored.
    assert_eq!(cache_status(&v.get("/cookie.php")), "MISS");
    assert_eq!(cache_status(&v.get("/cookie.php")), "MISS");
}

#[test]
fn entries_survive_a_reload_and_are_counted() {
    let dir = TempDir::new("cache");
    dir.write("html/k", "kept");
    let template = conf("", "").replace(
        "    location / {",
        "    location = /metrics { metrics; }\n    location / {",
    );
    let template = format!("error_log logs/error.log notice;\n{template}");
    let v = Vireo::start_in(dir, &template);
    assert_eq!(cache_status(&v.get("/k")), "MISS");
    v.dir.write("html/k", "changed");
    // The same configuration again (the origin on the port it has).
    let text = std::fs::read_to_string(v.dir.path().join("vireo.conf")).unwrap();
    let before = v.dir.read("logs/error.log").matches("reloaded").count();
    std::fs::write(v.dir.path().join("vireo.conf"), text).unwrap();
    v.signal(libc::SIGHUP);
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while v.dir.read("logs/error.log").matches("reloaded").count() == before {
        assert!(std::time::Instant::now() < end, "no reload");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = v.get("/k");
    assert_eq!((cache_status(&r), r.text().as_str()), ("HIT", "kept"));
    let m = v.get("/metrics").text();
    assert_eq!(
        metric(
            &m,
            "vireo_cache_requests_total",
            &["zone=\"c\"", "status=\"HIT\""]
        ),
        1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "vireo_cache_requests_total", &["status=\"MISS\""]),
        1.0,
        "{m}"
    );
    assert_eq!(metric(&m, "vireo_cache_stored_total", &["zone=\"c\""]), 1.0);
    assert_eq!(metric(&m, "vireo_cache_keys", &["zone=\"c\""]), 1.0);
}

#[test]
fn background_update_and_the_stale_extensions_of_cache_control() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let n = std::sync::Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    // /swr: v1, fresh 1 s and then stale-while-revalidate; later replies
    // take a second (v2, fresh a minute). /sie: fresh 1 s, stale-if-error,
    // then the origin closes without answering.
    let origin = service(move |head, _| {
        let first = n2.fetch_add(1, Ordering::SeqCst) < 2;
        let (cc, body) = match (head.starts_with("GET /swr"), first) {
            (true, true) => ("max-age=1, stale-while-revalidate=30", "v1"),
            (true, false) => {
                std::thread::sleep(Duration::from_secs(1));
                ("max-age=60", "v2")
            }
            (false, true) => ("max-age=1, stale-if-error=30", "ok"),
            (false, false) => return String::new(),
        };
        format!(
            "HTTP/1.1 200 OK\r\nCache-Control: {cc}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{body}"
        )
    });
    let v = Vireo::start(&format!(
        r#"events {{}}
http {{
  proxy_cache_path {{dir}}/cache keys_zone=c:1m;
  server {{
    listen 127.0.0.1:{{port}};
    add_header X-Cache $upstream_cache_status always;
    location / {{
      proxy_pass http://127.0.0.1:{};
      proxy_cache c;
      proxy_cache_background_update on;
    }}
  }}
}}
"#,
        origin.port
    ));
    assert_eq!(cache_status(&v.get("/swr")), "MISS");
    assert_eq!(cache_status(&v.get("/sie")), "MISS");
    std::thread::sleep(Duration::from_millis(2100));
    // Expired within stale-while-revalidate: sent at once while a
    // background subrequest fetches it anew.
    let t = std::time::Instant::now();
    let mut s = v.connect();
    use std::io::{Read, Write};
    s.write_all(b"GET /swr HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while Resp::parse_one(&got).is_none_or(|(r, _)| r.body.len() < 2) {
        let k = s.read(&mut buf).unwrap();
        assert!(k > 0);
        got.extend_from_slice(&buf[..k]);
    }
    let r = Resp::parse(&got).unwrap();
    assert_eq!((cache_status(&r), r.text().as_str()), ("STALE", "v1"));
    assert!(
        t.elapsed() < Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    // Meanwhile others get it too, as UPDATING; then the new reply is a hit.
    let r = v.get("/swr");
    assert_eq!((cache_status(&r), r.text().as_str()), ("UPDATING", "v1"));
    assert!(eventually(3, || v.get("/swr").text() == "v2"));
    assert_eq!(cache_status(&v.get("/swr")), "HIT");
    // Expired within stale-if-error, and the origin fails: the entry.
    let r = v.get("/sie");
    assert_eq!(
        (r.status, cache_status(&r), r.text().as_str()),
        (200, "STALE", "ok")
    );
}

#[test]
fn purge_removes_a_key_its_variants_or_a_prefix_behind_the_access_rules() {
    let dir = TempDir::new("cache");
    for f in ["a", "b", "v"] {
        dir.write(&format!("html/p/{f}"), f);
    }
    let v = Vireo::start_in(
        dir,
        &conf(
            "proxy_cache_purge $purge; limit_except GET HEAD { allow 127.0.0.1; deny all; }",
            "location /p/v { add_header Vary Accept-Language; }",
        )
        .replace(
            "http {\n",
            "http {\n  map $request_method $purge { PURGE 1; default 0; }\n",
        ),
    );
    let purge = |path: &str| v.request(&format!("PURGE {path} HTTP/1.0\r\n\r\n")).status;
    let lang = |l: &str| {
        let r = v.request(&format!(
            "GET /p/v HTTP/1.0\r\nAccept-Language: {l}\r\n\r\n"
        ));
        cache_status(&r).to_string()
    };
    for p in ["/p/a", "/p/b"] {
        assert_eq!(cache_status(&v.get(p)), "MISS");
        assert_eq!(cache_status(&v.get(p)), "HIT");
    }
    assert_eq!(
        (lang("en"), lang("fr"), lang("en")),
        ("MISS".into(), "MISS".into(), "HIT".into())
    );
    // One key.
    assert_eq!(purge("/p/a"), 204);
    assert_eq!(purge("/p/a"), 404);
    assert_eq!(cache_status(&v.get("/p/a")), "MISS");
    assert_eq!(cache_status(&v.get("/p/b")), "HIT");
    // Every variant of a key.
    assert_eq!(purge("/p/v"), 204);
    assert_eq!((lang("en"), lang("fr")), ("MISS".into(), "MISS".into()));
    // A prefix.
    assert_eq!(purge("/p/*"), 204);
    for p in ["/p/a", "/p/b"] {
        assert_eq!(cache_status(&v.get(p)), "MISS");
    }
    assert_eq!(lang("en"), "MISS");
}
