//! userid: cookies set and recognised, their attributes, marks, service
//! words by listening address (IPv4, unix socket), v1 byte order, `log`
//! and `off`, `$uid_got`/`$uid_set`, and a reset through `$uid_reset`.
//! Expectations follow nginx 1.22 (its test suite's userid.t and
//! userid_flags.t).

mod common;
use common::*;

const CONF: &str = "
events {}
error_log {dir}/logs/error.log info;
http {
    access_log off;
    map $arg_reset $uid_reset {
        default 0;
        yes 1;
        log log;
    }
    server {
        listen 127.0.0.1:{port};
        listen unix:{dir}/u.sock;
        add_header X-Got $uid_got;
        add_header X-Set $uid_set;
        userid on;
        location / { return 200 ok; }
        location /attrs {
            userid_name visitor;
            userid_domain example.com;
            userid_path /attrs;
            userid_expires 100;
            userid_p3p 'CP=\"NOI\"';
            userid_flags httponly samesite=none secure;
            return 200 ok;
        }
        location /max { userid_expires max; return 200 ok; }
        location /mark { userid_mark t; return 200 ok; }
        location /service { userid_service 65534; return 200 ok; }
        location /v1 { userid v1; return 200 ok; }
        location /log { userid log; return 200 ok; }
        location /off { userid off; return 200 ok; }
        location /unix {
            userid off;
            proxy_pass http://unix:{dir}/u.sock:/;
        }
    }
}";

fn cookie(r: &Resp) -> String {
    r.header("set-cookie").unwrap_or_default().to_string()
}

/// The cookie's value (`uid=VALUE; …`).
fn value(r: &Resp) -> String {
    let c = cookie(r);
    let first = c.split(';').next().unwrap();
    first.split_once('=').unwrap().1.to_string()
}

fn with_cookie(v: &Vireo, path: &str, c: &str) -> Resp {
    v.request(&format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nCookie: {c}\r\nConnection: close\r\n\r\n"
    ))
}

/// The first word of `$uid_set`, as nginx prints it: the bytes in memory
/// read as a native 32-bit word.
fn service_word(r: &Resp) -> String {
    let set = r.header("x-set").expect("X-Set");
    set.strip_prefix("uid=").unwrap()[..8].to_string()
}

fn native_hex(bytes: [u8; 4]) -> String {
    format!("{:08X}", u32::from_ne_bytes(bytes))
}

#[test]
fn a_new_client_gets_a_cookie_and_comes_back_with_it() {
    let v = Vireo::start(CONF);
    let r = v.get("/");
    let c = cookie(&r);
    assert!(c.starts_with("uid="), "{c}");
    assert!(c.ends_with("; path=/"), "{c}");
    let uid = value(&r);
    assert_eq!(uid.len(), 24);
    assert!(uid.ends_with("=="), "{uid}");
    let set = r.header("x-set").unwrap().to_string();
    assert_eq!(set.len(), "uid=".len() + 32, "{set}");
    assert!(r.header("x-got").is_none());

    let back = with_cookie(&v, "/", &format!("uid={uid}"));
    assert_eq!(back.header("x-got"), Some(set.as_str()));
    assert!(back.header("set-cookie").is_none());
    assert!(back.header("x-set").is_none());

    // Among other cookies, and a cookie that is no identifier.
    let back = with_cookie(&v, "/", &format!("a=b; uid={uid}; c=d"));
    assert_eq!(back.header("x-got"), Some(set.as_str()));
    let bad = with_cookie(&v, "/", "uid=short");
    assert!(bad.header("set-cookie").is_some());
    assert!(bad.header("x-got").is_none());
    assert!(eventually(5, || error_log(&v)
        .contains("client sent too short userid cookie \"short\"")));
}

#[test]
fn attributes_flags_and_p3p() {
    let v = Vireo::start(CONF);
    let r = v.get("/attrs");
    let c = cookie(&r);
    assert!(c.starts_with("visitor="), "{c}");
    assert!(
        c.contains("; domain=example.com; path=/attrs; secure; httponly; samesite=none"),
        "{c}"
    );
    assert_eq!(r.header("p3p"), Some("CP=\"NOI\""));
    let expires = c
        .split("; expires=")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    // Thu, 31-Dec-37 23:55:55 GMT form: day-month-two-digit-year.
    assert_eq!(
        expires.len(),
        "Thu, 31-Dec-37 23:55:55 GMT".len(),
        "{expires}"
    );
    let max = cookie(&v.get("/max"));
    assert!(
        max.contains("; expires=Thu, 31-Dec-37 23:55:55 GMT;"),
        "{max}"
    );
    let plain = cookie(&v.get("/"));
    assert!(
        !plain.contains("expires") && !plain.contains("domain"),
        "{plain}"
    );
}

#[test]
fn marks_re_issue_the_same_identifier() {
    let v = Vireo::start(CONF);
    let r = v.get("/mark");
    let uid = value(&r);
    assert!(uid.ends_with("t="), "{uid}");
    // An unmarked cookie of the same identifier gets it back, marked.
    let unmarked = format!("{}==", &uid[..22]);
    let again = with_cookie(&v, "/mark", &format!("uid={unmarked}"));
    assert_eq!(value(&again), uid);
    assert_eq!(again.header("x-set"), again.header("x-got"));
    // The marked one is accepted as it is.
    let ok = with_cookie(&v, "/mark", &format!("uid={uid}"));
    assert!(ok.header("set-cookie").is_none());
}

#[test]
fn service_words_by_address_and_byte_order() {
    let v = Vireo::start(CONF);
    assert_eq!(service_word(&v.get("/")), native_hex([127, 0, 0, 1]));
    assert_eq!(
        service_word(&v.get("/service")),
        native_hex(65534u32.to_be_bytes())
    );
    assert_eq!(service_word(&v.get("/v1")), "00000000");
    // Through a unix socket there is no address: 0.
    assert_eq!(service_word(&v.get("/unix")), "00000000");
    // Two new identifiers differ (the sequence moves on).
    assert_ne!(value(&v.get("/")), value(&v.get("/")));
}

#[test]
fn log_reads_off_ignores_and_reset_makes_a_new_one() {
    let v = Vireo::start(CONF);
    let uid = value(&v.get("/"));
    let c = format!("uid={uid}");
    let log = with_cookie(&v, "/log", &c);
    assert!(log.header("x-got").is_some_and(|g| g.starts_with("uid=")));
    assert!(log.header("set-cookie").is_none());
    assert!(v.get("/log").header("set-cookie").is_none());
    let off = with_cookie(&v, "/off", &c);
    assert!(off.header("x-got").is_none() && off.header("set-cookie").is_none());

    let reset = with_cookie(&v, "/?reset=yes", &c);
    assert_ne!(value(&reset), uid);
    let logged = with_cookie(&v, "/?reset=log", &c);
    assert_ne!(value(&logged), uid);
    assert!(eventually(5, || error_log(&v)
        .contains("userid cookie \"uid=")
        && error_log(&v).contains("\" was reset")));
}

#[test]
fn configuration_errors_name_the_directive() {
    let dir = TempDir::new("uidconf");
    for (line, msg) in [
        (
            "userid maybe;",
            "invalid parameter \"maybe\" in \"userid\" directive",
        ),
        (
            "userid_mark ab;",
            "invalid parameter \"ab\" in \"userid_mark\" directive",
        ),
        (
            "userid_flags samesite=lax samesite=none;",
            "invalid parameter \"samesite=none\"",
        ),
        ("userid_expires soon;", "invalid parameter \"soon\""),
        (
            "userid on; userid off;",
            "\"userid\" directive is duplicate",
        ),
    ] {
        let conf = format!("events {{}} http {{ server {{ listen 127.0.0.1:1; {line} }} }}");
        let o = test_conf(&dir, &conf);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(msg), "{line}: {err}");
        assert!(err.contains(":1"), "file:line in {err}");
    }
}
