//! The slice filter: a proxied response fetched as ranges of `slice`
//! bytes from a test upstream that answers `Range` itself, and sent as one
//! (200 assembled from 206 pieces, or the client's range of it), over
//! HTTP/1 and HTTP/2; ETag and range checks that end the connection; a 200
//! to the first slice passed on.

mod common;
use common::*;
use std::process::Command;

const BODY: &[u8] = b"0123456789abcdefghij";

/// An upstream holding [`BODY`]: a `Range: bytes=A-B` gets a 206 of it
/// with the ETag `etag(A)`; no Range gets a 200 of it all.
fn upstream(etag: fn(usize) -> &'static str) -> Service {
    service(move |head, _| {
        let range = head
            .lines()
            .find_map(|l| l.strip_prefix("Range: bytes="))
            .and_then(|r| r.trim().split_once('-'));
        let Some((a, b)) = range else {
            return format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                BODY.len(),
                String::from_utf8_lossy(BODY)
            );
        };
        let a: usize = a.parse().unwrap();
        let b = b.parse::<usize>().unwrap().min(BODY.len() - 1);
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{}\r\nETag: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            BODY.len(),
            etag(a),
            b + 1 - a,
            String::from_utf8_lossy(&BODY[a..=b])
        )
    })
}

fn start(up: &Service) -> Vireo {
    Vireo::start(&format!(
        r#"
events {{}}
http {{
    access_log off;
    proxy_cache_path {{dir}}/cache keys_zone=zone:1m;
    server {{
        listen 127.0.0.1:{{port}} http2;
        location / {{
            slice 4;
            proxy_set_header Range $slice_range;
            proxy_pass http://127.0.0.1:{}/;
        }}
        location /missing {{
            error_page 404 = @sliced;
        }}
        location @sliced {{
            slice 8;
            proxy_cache zone;
            proxy_cache_key $uri$slice_range;
            proxy_cache_valid 200 206 1h;
            add_header X-Cache $upstream_cache_status;
            proxy_set_header Range $slice_range;
            proxy_pass http://127.0.0.1:{};
        }}
        location /var {{
            slice 1k;
            return 200 "[$slice_range]";
        }}
        location /off {{
            return 200 "[$slice_range]";
        }}
    }}
}}
"#,
        up.port, up.port
    ))
}

/// The `Range` fields the upstream was asked for, in order.
fn asked(up: &Service) -> Vec<String> {
    up.seen
        .lock()
        .unwrap()
        .iter()
        .map(|(h, _)| {
            h.lines()
                .find_map(|l| l.strip_prefix("Range: "))
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

fn same_etag(_: usize) -> &'static str {
    "\"v1\""
}

#[test]
fn whole_is_assembled_from_slices() {
    let up = upstream(same_etag);
    let v = start(&up);
    let r = v.get("/t");
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.body, BODY);
    assert_eq!(r.header("content-length"), Some("20"));
    assert_eq!(r.header("content-range"), None);
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert_eq!(
        asked(&up),
        [
            "bytes=0-3",
            "bytes=4-7",
            "bytes=8-11",
            "bytes=12-15",
            "bytes=16-19"
        ]
    );
}

#[test]
fn client_range_fetches_only_its_slices() {
    let up = upstream(same_etag);
    let v = start(&up);
    let r =
        v.request("GET /t HTTP/1.1\r\nHost: x\r\nRange: bytes=5-13\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 206, "{}", r.head);
    assert_eq!(r.body, &BODY[5..14]);
    assert_eq!(r.header("content-range"), Some("bytes 5-13/20"));
    assert_eq!(asked(&up), ["bytes=4-7", "bytes=8-11", "bytes=12-15"]);

    // A suffix starts from the first slice; the slices before it are
    // read and skipped.
    let r = v.request("GET /t HTTP/1.1\r\nHost: x\r\nRange: bytes=-3\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 206, "{}", r.head);
    assert_eq!(r.body, &BODY[17..]);
    assert_eq!(asked(&up)[3..], ["bytes=0-3", "bytes=16-19"]);
}

#[test]
fn etag_mismatch_ends_the_connection() {
    fn changing(start: usize) -> &'static str {
        match start {
            0 => "\"a\"",
            _ => "\"b\"",
        }
    }
    let up = upstream(changing);
    let v = start(&up);
    let raw = v.raw(b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    // The first slice's one piece waits for the second's reply: nothing
    // went out.
    assert!(raw.is_empty(), "{}", String::from_utf8_lossy(&raw));
    // Logged while the body is sent: to the main level's log.
    assert!(
        eventually(5, || v.stderr().contains("etag mismatch in slice response")),
        "{}",
        v.stderr()
    );
    assert_eq!(asked(&up), ["bytes=0-3", "bytes=4-7"]);
}

#[test]
fn first_reply_of_200_passes_through() {
    // An upstream that ignores Range.
    let up = service(|_, _| {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
            BODY.len(),
            String::from_utf8_lossy(BODY)
        )
    });
    let v = start(&up);
    let r = v.get("/t");
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.body, BODY);
    assert_eq!(asked(&up), ["bytes=0-3"]);
}

#[test]
fn slices_of_a_named_location_are_cached_one_by_one() {
    let up = upstream(same_etag);
    let v = start(&up);
    let r = v.get("/missing");
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.body, BODY);
    assert_eq!(r.header("x-cache"), Some("MISS"));
    assert_eq!(asked(&up), ["bytes=0-7", "bytes=8-15", "bytes=16-23"]);
    // Each slice is its own entry: a range in the last one is a hit there.
    let r = v.request(
        "GET /missing HTTP/1.1\r\nHost: x\r\nRange: bytes=17-18\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 206, "{}", r.head);
    assert_eq!(r.body, &BODY[17..19]);
    assert_eq!(r.header("x-cache"), Some("HIT"));
    assert_eq!(up.seen.lock().unwrap().len(), 3);
}

#[test]
fn slice_range_names_the_slice_holding_the_range_start() {
    let up = upstream(same_etag);
    let v = start(&up);
    assert_eq!(v.get("/var").text(), "[bytes=0-1023]");
    let r = v
        .request("GET /var HTTP/1.1\r\nHost: x\r\nRange: bytes=2500-\r\nConnection: close\r\n\r\n");
    assert_eq!(r.text(), "[bytes=2048-3071]");
    // If-Range may ask for the whole: the first slice.
    let r = v.request(
        "GET /var HTTP/1.1\r\nHost: x\r\nRange: bytes=2500-\r\nIf-Range: \"x\"\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "[bytes=0-1023]");
    assert_eq!(v.get("/off").text(), "[]");
}

#[test]
fn slices_over_http2() {
    let up = upstream(same_etag);
    let v = start(&up);
    let curl = |args: &[&str]| {
        let out = Command::new("curl")
            .args([
                "-s",
                "--http2-prior-knowledge",
                "-o",
                "-",
                "-w",
                "|%{http_code}",
            ])
            .args(args)
            .arg(format!("http://127.0.0.1:{}/t", v.port))
            .output()
            .expect("curl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl(&[]), "0123456789abcdefghij|200");
    assert_eq!(curl(&["-r", "6-9"]), "6789|206");
}

/// A slice size that is not one, or a second argument, is refused with
/// the directive's file:line.
#[test]
fn bad_slice_sizes_are_refused_with_their_line() {
    let dir = TempDir::new("slice-bad");
    for (bad, msg) in [
        ("slice abc;", "invalid size \"abc\" in \"slice\" directive"),
        (
            "slice 1m 2;",
            "invalid number of arguments in \"slice\" directive",
        ),
        ("slice 1m; slice 2m;", "\"slice\" directive is duplicate"),
    ] {
        let out = test_conf(
            &dir,
            &format!("events {{}}\nhttp {{\nserver {{\nlocation / {{\n{bad}\n}}\n}}\n}}\n"),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} accepted");
        assert!(
            err.contains(msg) && err.contains("t.conf:5"),
            "{bad}: {err}"
        );
    }
}
