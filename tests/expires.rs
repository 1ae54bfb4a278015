//! expires: times from now, from the file's mtime, time of day, epoch, max,
//! off; statuses; replacing Cache-Control; configuration errors.
//! Expectations checked against nginx 1.22.

mod common;
use common::*;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        expires 1h;
        location /off/ { expires off; }
        location /neg/ { expires -1; }
        location /zero/ { expires 0; }
        location /epoch/ { expires epoch; }
        location /max/ { expires max; }
        location /mod/ { expires modified +1d; }
        location /mod0/ { expires modified 0; }
        location /daily/ { expires @15h30m; }
        location /cc/ { expires 2h; add_header Cache-Control private; }
    }
}";

/// Seconds since the epoch of an HTTP date.
fn secs(date: &str) -> i64 {
    httpdate::parse_http_date(date)
        .unwrap_or_else(|e| panic!("{date}: {e}"))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn set_mtime(path: &std::path::Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

/// Start like `Vireo::start_in`, with TZ set for the server.
fn start_tz(dir: TempDir, template: &str, tz: &str) -> Vireo {
    Vireo::start_in_env(dir, template, &[("TZ", tz)])
}

fn start() -> Vireo {
    let dir = TempDir::new("exp");
    for d in [
        "", "off/", "neg/", "zero/", "epoch/", "max/", "mod/", "mod0/", "daily/", "cc/",
    ] {
        let p = dir.write(&format!("html/{d}a.txt"), "hello");
        // Thu, 02 Jan 2020 03:04:05 GMT
        set_mtime(&p, 1_577_934_245);
    }
    dir.write("html/mod/sub/x", "x");
    let fresh = dir.write("html/mod/fresh.txt", "new");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    set_mtime(&fresh, now - 100);
    start_tz(dir, CONF, "UTC")
}

/// (Expires − Date, every Cache-Control value).
fn expiry(r: &Resp) -> (i64, Vec<String>) {
    let date = secs(r.header("date").expect("Date"));
    let exp = secs(r.header("expires").expect("Expires"));
    let cc = r
        .headers
        .iter()
        .filter(|(k, _)| k == "cache-control")
        .map(|(_, v)| v.clone())
        .collect();
    (exp - date, cc)
}

fn near(got: i64, want: i64) -> bool {
    (got - want).abs() <= 1
}

#[test]
fn relative_to_now() {
    let v = start();
    let r = v.get("/a.txt");
    assert_eq!(r.status, 200);
    let (delta, cc) = expiry(&r);
    assert!(near(delta, 3600), "{}", r.head);
    assert_eq!(cc, ["max-age=3600"]);

    let (delta, cc) = expiry(&v.get("/neg/a.txt"));
    assert!(near(delta, -1));
    assert_eq!(cc, ["no-cache"]);

    let (delta, cc) = expiry(&v.get("/zero/a.txt"));
    assert!(near(delta, 0));
    assert_eq!(cc, ["max-age=0"]);

    let r = v.get("/off/a.txt");
    assert_eq!(r.header("expires"), None);
    assert_eq!(r.header("cache-control"), None);
}

#[test]
fn epoch_and_max() {
    let v = start();
    let r = v.get("/epoch/a.txt");
    assert_eq!(r.header("expires"), Some("Thu, 01 Jan 1970 00:00:01 GMT"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    let r = v.get("/max/a.txt");
    assert_eq!(r.header("expires"), Some("Thu, 31 Dec 2037 23:55:55 GMT"));
    assert_eq!(r.header("cache-control"), Some("max-age=315360000"));
}

#[test]
fn relative_to_modification_time() {
    let v = start();
    // An old file: a day after its mtime is long past.
    let r = v.get("/mod/a.txt");
    assert_eq!(r.header("expires"), Some("Fri, 03 Jan 2020 03:04:05 GMT"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));

    // A file changed 100 s ago: a day after that.
    let r = v.get("/mod/fresh.txt");
    let lm = secs(r.header("last-modified").unwrap());
    assert_eq!(secs(r.header("expires").unwrap()), lm + 86_400);
    let date = secs(r.header("date").unwrap());
    assert_eq!(
        r.header("cache-control"),
        Some(format!("max-age={}", lm + 86_400 - date).as_str())
    );

    // Without Last-Modified (a redirect) it counts from now.
    let r = v.get("/mod/sub");
    assert_eq!(r.status, 301);
    let (delta, cc) = expiry(&r);
    assert!(near(delta, 86_400));
    assert_eq!(cc, ["max-age=86400"]);

    // modified 0 is "now", max-age=0.
    let (delta, cc) = expiry(&v.get("/mod0/a.txt"));
    assert!(near(delta, 0));
    assert_eq!(cc, ["max-age=0"]);
}

#[test]
fn time_of_day() {
    let v = start();
    let r = v.get("/daily/a.txt");
    let exp = r.header("expires").unwrap();
    assert!(exp.ends_with(" 15:30:00 GMT"), "{exp}");
    let (delta, cc) = expiry(&r);
    assert!(delta > 0 && delta <= 86_400, "{delta}");
    let max_age: i64 = cc[0].strip_prefix("max-age=").unwrap().parse().unwrap();
    assert!(near(max_age, delta), "{max_age} {delta}");
}

#[test]
fn statuses_and_existing_cache_control() {
    let v = start();
    // Errors get nothing.
    let r = v.get("/missing");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("expires"), None);
    assert_eq!(r.header("cache-control"), None);

    // 301, 304, 206 get both.
    assert!(v.get("/mod").header("expires").is_some());
    let lm = v.get("/a.txt").header("last-modified").unwrap().to_string();
    let r = v.request(&format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: {lm}\r\nConnection: close\r\n\r\n"
    ));
    assert_eq!(r.status, 304);
    assert_eq!(r.header("cache-control"), Some("max-age=3600"));
    let r = v
        .request("GET /a.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=1-2\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.header("cache-control"), Some("max-age=3600"));

    // add_header runs after expires: its Cache-Control is a second line.
    let (delta, cc) = expiry(&v.get("/cc/a.txt"));
    assert!(near(delta, 7200));
    assert_eq!(cc, ["max-age=7200", "private"]);
}

#[test]
fn configuration_errors() {
    let dir = TempDir::new("exp-conf");
    let bad = [
        (
            "expires @25h;",
            "daily time value must be less than 24 hours",
        ),
        (
            "expires modified @1h;",
            "daily time cannot be used with \"modified\" parameter",
        ),
        (
            "expires modified max;",
            "\"expires\" directive invalid value",
        ),
        ("expires foo;", "\"expires\" directive invalid value"),
        ("expires 1h 2h;", "\"expires\" directive invalid value"),
        (
            "expires 1h; expires 2h;",
            "\"expires\" directive is duplicate",
        ),
        ("expires 1 2 3;", "invalid number of arguments"),
    ];
    for (line, want) in bad {
        let conf = format!("events {{}} http {{ server {{ {line} }} }}");
        let out = test_conf(&dir, &conf);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{line} accepted");
        assert!(err.contains(want), "{line}: {err}");
    }
    for ok in [
        "expires +1h;",
        "expires -1;",
        "expires @0;",
        "expires 1d12h;",
    ] {
        let out = test_conf(
            &dir,
            &format!("events {{}} http {{ access_log off; {ok} }}"),
        );
        assert!(
            out.status.success(),
            "{ok}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn with_variables() {
    let dir = TempDir::new("exp-var");
    dir.write("html/var/a.txt", "x");
    dir.write("html/var/inner/a.txt", "x");
    dir.write("html/varmod/a.txt", "x");
    let v = start_tz(
        dir,
        "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /var/ {
            expires $arg_e;
            location /var/inner/ { }
        }
        location /varmod/ { expires modified ${arg_e}; }
    }
}",
        "UTC",
    );
    let r = v.get("/var/a.txt?e=2048");
    assert_eq!(r.header("cache-control"), Some("max-age=2048"));
    assert_eq!(
        v.get("/var/inner/a.txt?e=1h").header("cache-control"),
        Some("max-age=3600")
    );
    let r = v.get("/var/a.txt?e=epoch");
    assert!(r.header("expires").unwrap().contains("1970"));
    assert!(
        v.get("/var/a.txt?e=max")
            .header("expires")
            .unwrap()
            .contains("2037")
    );
    assert_eq!(
        v.get("/var/a.txt?e=-1").header("cache-control"),
        Some("no-cache")
    );
    assert!(
        v.get("/var/a.txt?e=@33s")
            .header("expires")
            .unwrap()
            .ends_with(":33 GMT")
    );
    // What does not read as a value of expires sets nothing.
    for q in ["", "?e=off", "?e=bad", "?e=@25h"] {
        let r = v.get(&format!("/var/a.txt{q}"));
        assert_eq!(r.status, 200);
        assert!(r.header("expires").is_none(), "{q}");
    }
    assert!(v.get("/varmod/a.txt?e=epoch").header("expires").is_none());
    let r = v.get("/varmod/a.txt?e=1d");
    assert!(r.header("cache-control").unwrap().starts_with("max-age="));
}
