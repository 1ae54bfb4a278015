//! FastCGI gateway against a real php-fpm (Debian's php-fpm8.2), started by
//! each test on a free port with its own pool. Skips (with a message) only
//! when php-fpm is not installed.

mod common;
use common::fpm::{Fpm, record};
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const SCRIPTS: &[(&str, &str)] = &[
    ("info.php", "<?php phpinfo();"),
    (
        "echo.php",
        "<?php header('Content-Type: text/plain'); echo 'm=', $_SERVER['REQUEST_METHOD'], ' q=', $_SERVER['QUERY_STRING'], ' a=', $_GET['a'] ?? '', ' sn=', $_SERVER['SCRIPT_NAME'], ' pi=', $_SERVER['PATH_INFO'] ?? '', ' host=', $_SERVER['HTTP_HOST'] ?? '', ' post=', json_encode($_POST);",
    ),
    (
        "input.php",
        "<?php $b = file_get_contents('php://input'); echo strlen($b), ' ', md5($b), ' ', $_SERVER['CONTENT_LENGTH'] ?? '-';",
    ),
    (
        "big.php",
        "<?php header('Content-Type: application/octet-stream'); $s = str_repeat('x', 65536); $n = (int)($_GET['mb'] ?? 50) * 16; for ($i = 0; $i < $n; $i++) { echo $s; flush(); }",
    ),
    (
        "cookies.php",
        "<?php setcookie('a', '1'); setcookie('b', '2'); header('X-Thing: yes'); header('X-Secret: hidden'); header('X-Accel-Expires: 10'); error_log('note from php'); echo 'ok';",
    ),
    ("s404.php", "<?php http_response_code(404); echo 'php 404';"),
    (
        "teapot.php",
        "<?php header('HTTP/1.1 418 I am a teapot'); echo 'tea';",
    ),
    (
        "redir.php",
        "<?php header('Location: http://example.com/x'); echo 'moved';",
    ),
    (
        "local.php",
        "<?php header('Location: /file.txt', true, 200);",
    ),
    (
        "accel.php",
        "<?php header('X-Accel-Redirect: /protected/secret.txt'); header('Content-Type: text/plain');",
    ),
    (
        "sleep.php",
        "<?php sleep((int)($_GET['s'] ?? 3)); echo 'late';",
    ),
    (
        "nap.php",
        "<?php usleep((int)($_GET['us'] ?? 3000)); echo 'a=' . ($_GET['a'] ?? '') . ' ';",
    ),
    (
        "forever.php",
        "<?php $s = str_repeat('y', 65536); while (true) { echo $s; flush(); }",
    ),
];

fn site() -> TempDir {
    let dir = TempDir::new("fcgi");
    for (name, text) in SCRIPTS {
        dir.write(&format!("html/{name}"), text);
    }
    dir.write("html/file.txt", "plain file\n");
    dir.write("html/uploads/a.jpg", "<?php echo 'PWNED';");
    dir.write("secret/protected/secret.txt", "the secret\n");
    dir
}

fn conf(fpm_port: u16, extra: &str) -> String {
    format!(
        r#"events {{}}
http {{
  client_max_body_size 64m;
  server {{
    listen 127.0.0.1:{{port}};
    root {{dir}}/html;
    error_page 404 /nf.html;
    location = /nf.html {{ return 200 "custom not found\n"; }}
    location /protected/ {{ internal; root {{dir}}/secret; }}
    location ~ \.php$ {{
      try_files $uri =404;
      include fastcgi_params;
      fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
      fastcgi_pass 127.0.0.1:{fpm_port};
      fastcgi_read_timeout 2s;
      {extra}
    }}
    location ~ ^/pi/(.+\.php)(/.*)?$ {{
      root {{dir}}/html;
      fastcgi_split_path_info ^/pi(/.+?\.php)(/.*)$;
      include fastcgi_params;
      fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
      fastcgi_param PATH_INFO $fastcgi_path_info;
      fastcgi_pass 127.0.0.1:{fpm_port};
    }}
  }}
}}
"#
    )
}

fn start(fpm: &Fpm, extra: &str) -> Vireo {
    let dir = site();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/conf/fastcgi_params"),
        dir.path().join("fastcgi_params"),
    )
    .unwrap();
    Vireo::start_in(dir, &conf(fpm.port, extra))
}

fn rss_kb(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn phpinfo_query_and_post_form() {
    let Some(fpm) = Fpm::start(3) else { return };
    let v = start(&fpm, "");
    let r = v.get("/info.php");
    assert_eq!(r.status, 200, "{}", v.stderr());
    assert!(r.text().contains("PHP Version"));
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let r = v.get("/echo.php?a=hello&b=2");
    assert_eq!(r.status, 200);
    assert!(
        r.text()
            .contains("m=GET q=a=hello&b=2 a=hello sn=/echo.php"),
        "{}",
        r.text()
    );
    assert!(r.text().contains("host=localhost"), "{}", r.text());
    let body = "x=1&name=vireo+server";
    let r = v.request(&format!(
        "POST /echo.php HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains(r#"post={"x":"1","name":"vireo server"}"#),
        "{}",
        r.text()
    );
}

#[test]
fn large_upload_and_chunked_body() {
    let Some(fpm) = Fpm::start(2) else { return };
    let v = start(&fpm, "");
    let body: Vec<u8> = (0..10 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let digest = md5_hex(&body);
    let mut s = v.connect();
    s.write_all(
        format!(
            "POST /input.php HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(&body).unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), format!("{} {digest} {}", body.len(), body.len()));

    // Chunked: read first, sent with a CONTENT_LENGTH.
    let mut s = v.connect();
    s.write_all(b"POST /input.php HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n").unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), format!("11 {} 11", md5_hex(b"hello world")));
}

#[test]
fn request_buffering_off_streams_and_body_files_are_cleaned() {
    let Some(fpm) = Fpm::start(2) else { return };
    let v = start(
        &fpm,
        "fastcgi_request_buffering off; client_body_buffer_size 1k;",
    );
    let body: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut s = v.connect();
    s.write_all(
        format!(
            "POST /input.php HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(&body).unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.text(),
        format!("{} {} {}", body.len(), md5_hex(&body), body.len())
    );
    drop(v);

    // Buffered in a file that goes away with the request.
    let v = start(
        &fpm,
        "client_body_in_file_only clean; add_header X-File $request_body_file always;",
    );
    let mut s = v.connect();
    s.write_all(b"POST /input.php HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n").unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    assert_eq!(r.text(), format!("5 {} 5", md5_hex(b"hello")));
    let file = r.header("x-file").expect("a body file").to_string();
    assert!(file.contains("/client_body_temp/"), "{file}");
    assert!(eventually(5, || !std::path::Path::new(&file).exists()));
}

#[test]
fn fifty_megabytes_stream_without_buffering_whole() {
    let Some(fpm) = Fpm::start(2) else { return };
    for extra in ["fastcgi_buffering off;", ""] {
        let v = start(&fpm, extra);
        let _ = v.get("/file.txt");
        let before = rss_kb(v.pid(), "VmRSS:");
        let mut s = v.connect();
        s.write_all(b"GET /big.php?mb=50 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        // Read slowly at first so that backpressure has to hold the upstream.
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0usize;
        let mut head_end = None;
        let mut acc = Vec::new();
        let mut peak = 0;
        let mut n_reads = 0;
        loop {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "early close after {total}");
            n_reads += 1;
            if n_reads < 20 {
                std::thread::sleep(Duration::from_millis(10));
            }
            if n_reads % 50 == 0 {
                peak = peak.max(rss_kb(v.pid(), "VmRSS:"));
            }
            total += n;
            if head_end.is_none() {
                acc.extend_from_slice(&buf[..n]);
                if let Some(i) = acc.windows(4).position(|w| w == b"\r\n\r\n") {
                    head_end = Some(i + 4);
                    let head = String::from_utf8_lossy(&acc[..i]).to_lowercase();
                    assert!(head.starts_with("http/1.1 200"), "{head}");
                    assert!(head.contains("transfer-encoding: chunked"), "{head}");
                }
            }
            // The chunked body ends with 0\r\n\r\n.
            if acc.len() < 8 {
                continue;
            }
            if buf[..n].ends_with(b"\r\n0\r\n\r\n") {
                break;
            }
        }
        assert!(total > 50 * 1024 * 1024, "{total}");
        let grew = peak.saturating_sub(before);
        assert!(
            grew < 20 * 1024,
            "RSS grew by {grew} kB while streaming ({extra})"
        );
    }
}

#[test]
fn catch_stderr_makes_the_reply_invalid() {
    let Some(fpm) = Fpm::start(2) else { return };
    let v = start(&fpm, "fastcgi_catch_stderr \"note from\";");
    // error_log() reaches stderr before the script's head goes out.
    assert_eq!(v.get("/cookies.php").status, 502);
    assert!(eventually(5, || v
        .stderr()
        .contains("upstream sent a string fastcgi_catch_stderr names")));
    // A reply without the string is served.
    assert_eq!(v.get("/s404.php").status, 404);
}

#[test]
fn headers_cookies_status_and_stderr() {
    let Some(fpm) = Fpm::start(2) else { return };
    let v = start(
        &fpm,
        "fastcgi_hide_header X-Secret; fastcgi_pass_header X-Accel-Expires;",
    );
    let raw = v.raw(b"GET /cookies.php HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("Set-Cookie: a=1"), "{text}");
    assert!(text.contains("Set-Cookie: b=2"), "{text}");
    assert!(text.contains("X-Thing: yes"), "{text}");
    assert!(!text.contains("X-Secret"), "{text}");
    assert!(text.contains("X-Accel-Expires: 10"), "{text}");
    assert!(
        eventually(5, || v.stderr().contains("FastCGI sent in stderr")
            && v.stderr().contains("note from php")),
        "stderr record not logged"
    );
    // Status codes from the script.
    let r = v.get("/s404.php");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.text(),
        "php 404",
        "the script's own page, not intercepted"
    );
    assert_eq!(v.get("/teapot.php").status, 418);
    let r = v.get("/redir.php");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("http://example.com/x"));
    // A local Location is an internal redirect.
    let r = v.get("/local.php");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "plain file\n");
    // X-Accel-Redirect to an internal location.
    let r = v.get("/accel.php");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "the secret\n");
    assert_eq!(v.get("/protected/secret.txt").status, 404);
}

#[test]
fn intercept_errors_uses_error_page() {
    let Some(fpm) = Fpm::start(1) else { return };
    let v = start(&fpm, "fastcgi_intercept_errors on;");
    let r = v.get("/s404.php");
    assert_eq!(r.status, 404);
    assert_eq!(r.text(), "custom not found\n");
    // No error page for 418: passed as it is.
    assert_eq!(v.get("/teapot.php").text(), "tea");
}

#[test]
fn split_path_info() {
    let Some(fpm) = Fpm::start(1) else { return };
    let v = start(&fpm, "");
    let r = v.get("/pi/echo.php/foo/bar?a=1");
    assert_eq!(r.status, 200, "{}", v.stderr());
    assert!(
        r.text().contains("sn=/echo.php pi=/foo/bar"),
        "{}",
        r.text()
    );
}

#[test]
fn errors_502_504_and_fpm_down() {
    let Some(fpm) = Fpm::start(2) else { return };
    let v = start(&fpm, "");
    let t = Instant::now();
    let r = v.get("/sleep.php?s=4");
    assert_eq!(r.status, 504);
    assert!(t.elapsed() < Duration::from_secs(4));
    assert!(eventually(2, || v.stderr().contains("upstream timed out")));
    // Nothing listening: 502.
    let down = closed_port();
    let dir = site();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/conf/fastcgi_params"),
        dir.path().join("fastcgi_params"),
    )
    .unwrap();
    let v2 = Vireo::start_in(dir, &conf(down, ""));
    assert_eq!(v2.get("/info.php").status, 502);
    assert!(eventually(2, || v2.stderr().contains("connect() failed")));
    // php-fpm stopped while vireo runs.
    drop(fpm);
    assert_eq!(v.get("/info.php").status, 502);
}

#[test]
fn path_info_exploit_and_line_breaks() {
    let Some(fpm) = Fpm::start(1) else { return };
    let v = start(&fpm, "");
    let r = v.get("/uploads/a.jpg/x.php");
    assert_eq!(r.status, 404);
    assert!(!r.text().contains("PWNED"));
    let r = v.get("/uploads/a.jpg");
    assert!(!r.text().contains("PWNED") || r.text().contains("<?php"));
    // CVE-2019-11043: a %0a in the path never reaches php-fpm.
    let r = v.get("/pi/echo.php/%0a.php");
    assert_eq!(r.status, 400);
    let r = v.get("/pi/echo.php%0a/x");
    assert_eq!(r.status, 400);
}

#[test]
fn client_abort_frees_php_workers_and_fds() {
    let Some(fpm) = Fpm::start(2) else { return };
    let v = start(&fpm, "fastcgi_buffering off;");
    let _ = v.get("/file.txt");
    let fd0 = fds(v.pid());
    for _ in 0..6 {
        let mut s = v.connect();
        s.write_all(b"GET /forever.php HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = vec![0u8; 200_000];
        let mut got = 0;
        while got < 150_000 {
            got += s.read(&mut buf).unwrap();
        }
        drop(s);
    }
    // With only two php children, these succeed only if the aborted ones ended.
    for _ in 0..3 {
        let r = v.get("/echo.php?a=1");
        assert_eq!(r.status, 200);
    }
    assert!(
        eventually(5, || fds(v.pid()) <= fd0 + 1),
        "fds leaked: {} → {}",
        fd0,
        fds(v.pid())
    );
}

/// As nginx with `fastcgi_ignore_client_abort off`: a client that leaves
/// while the script runs ends the request at once (499) and vireo closes its
/// connection to php-fpm (counted in /proc/net/tcp) instead of waiting for
/// the reply; with the directive on, the exchange runs to its end.
#[test]
fn clients_that_leave_before_the_reply_close_the_connection() {
    let Some(fpm) = Fpm::start(2) else { return };
    let leave = |v: &Vireo, path: &str| {
        let mut s = v.connect();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        assert!(
            eventually(2, || conns_to(fpm.port) == 1),
            "no php-fpm connection"
        );
        drop(s);
    };
    let v = start(&fpm, "");
    leave(&v, "/sleep.php?s=3");
    assert!(
        eventually(1, || conns_to(fpm.port) == 0),
        "the php-fpm connection outlived its client"
    );
    assert!(access_lines(&v, 1)[0].contains("\"GET /sleep.php?s=3 HTTP/1.1\" 499 "));
    let kept = start(&fpm, "fastcgi_ignore_client_abort on;");
    // (Under the location's 2 s fastcgi_read_timeout.)
    leave(&kept, "/sleep.php?s=1");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        conns_to(fpm.port),
        1,
        "closed although ignore_client_abort is on"
    );
    assert!(eventually(5, || conns_to(fpm.port) == 0));
    let line = &access_lines(&kept, 1)[0];
    assert!(line.contains(" 200 "), "{line}");
}

#[test]
fn two_hundred_concurrent_requests() {
    let Some(fpm) = Fpm::start(8) else { return };
    let v = start(&fpm, "");
    let port = v.port;
    let handles: Vec<_> = (0..200)
        .map(|i| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                // Two requests on one keep-alive connection.
                s.write_all(
                    format!(
                        "GET /echo.php?a={i} HTTP/1.1\r\nHost: x\r\n\r\nGET /echo.php?a=z{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .unwrap();
                let all = Resp::parse_all(&read_to_close(&mut s));
                assert_eq!(all.len(), 2);
                assert!(all.iter().all(|r| r.status == 200));
                assert!(all[0].text().contains(&format!("a={i} ")));
                assert!(all[1].text().contains(&format!("a=z{i} ")));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// MD5 (RFC 1321), enough to compare with PHP's md5().
fn md5_hex(data: &[u8]) -> String {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4294967296.0) as u32)
        .collect();
    let (mut a0, mut b0, mut c0, mut d0) =
        (0x67452301u32, 0xefcdab89u32, 0x98badcfeu32, 0x10325476u32);
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_le_bytes());
    for chunk in msg.chunks(64) {
        let m: Vec<u32> = chunk
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f2 = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f2.rotate_left(S[i]));
        }
        a0 = a0.wrapping_add(a);
        b0 = b0.wrapping_add(b);
        c0 = c0.wrapping_add(c);
        d0 = d0.wrapping_add(d);
    }
    [a0, b0, c0, d0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The client ends of the IPv4 connections to `port` (`/proc/net/tcp`):
/// their local address and state, as hex.
fn client_ends(port: u16) -> Vec<(String, String)> {
    let hex = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 3 && f[2].ends_with(&hex)).then(|| (f[1].to_string(), f[3].to_string()))
        })
        .collect()
}

/// Established connections from vireo to `port` (idle pooled ones included).
fn conns_to(port: u16) -> usize {
    client_ends(port)
        .iter()
        .filter(|(_, state)| state == "01")
        .count()
}

/// vireo with `fastcgi_pass php; fastcgi_keep_conn on;` to
/// `upstream php { server …; keepalive 2; }`, and a /metrics location.
fn start_pooled(fpm: &Fpm) -> Vireo {
    let dir = site();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/conf/fastcgi_params"),
        dir.path().join("fastcgi_params"),
    )
    .unwrap();
    let conf = conf(fpm.port, "")
        .replace(
            &format!(
                "fastcgi_pass 127.0.0.1:{};\n      fastcgi_read_timeout 2s;",
                fpm.port
            ),
            "fastcgi_pass php;\n      fastcgi_keep_conn on;",
        )
        .replace(
            "http {\n",
            &format!(
                "http {{\n  upstream php {{ server 127.0.0.1:{}; keepalive 2; }}\n",
                fpm.port
            ),
        );
    let conf = conf.replace(
        "    error_page 404 /nf.html;\n",
        "    error_page 404 /nf.html;\n    location = /metrics { metrics; }\n",
    );
    assert!(conf.contains("fastcgi_pass php;"), "{conf}");
    Vireo::start_in(dir, &conf)
}

#[test]
fn upstream_block_with_keepalive_pool() {
    let Some(fpm) = Fpm::start(6) else { return };
    let v = start_pooled(&fpm);
    let r = v.get("/echo.php?a=first");
    assert_eq!(r.status, 200, "{}", v.stderr());
    let port = v.port;
    let handles: Vec<_> = (0..50)
        .map(|i| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut req = String::new();
                for j in 0..4 {
                    req.push_str(&format!(
                        "GET /echo.php?a={i}x{j} HTTP/1.1\r\nHost: x\r\n\r\n"
                    ));
                }
                req.push_str("GET /info.php HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                s.write_all(req.as_bytes()).unwrap();
                let raw = read_to_close(&mut s);
                let all = Resp::parse_all(&raw);
                assert_eq!(
                    all.len(),
                    5,
                    "{}",
                    String::from_utf8_lossy(&raw[..raw.len().min(300)])
                );
                for (j, r) in all.iter().take(4).enumerate() {
                    assert_eq!(r.status, 200);
                    assert!(r.text().contains(&format!("a={i}x{j} ")), "{}", r.text());
                }
                assert!(all[4].text().contains("PHP Version"));
            })
        })
        .collect();
    let failed = handles.into_iter().filter_map(|h| h.join().err()).count();
    assert_eq!(failed, 0, "{}", v.stderr());
    // Idle connections stay open in the pool (at most keepalive per worker).
    // A php-fpm child serves one connection at a time: keepalive must stay
    // below pm.max_children, or idle pooled connections hold every child.
    let idle = conns_to(fpm.port);
    assert!((1..=2).contains(&idle), "{idle} connections to php-fpm");
    assert_eq!(v.get("/echo.php?a=again").status, 200);
    // The upstream's figures: every one of the 252 requests, none failed.
    let m = v.get("/metrics").text();
    let php = "upstream=\"php\"";
    let peer = format!("peer=\"127.0.0.1:{}\"", fpm.port);
    let count = |name: &str, extra: &[&str]| {
        let mut labels = vec![php, peer.as_str()];
        labels.extend_from_slice(extra);
        metric(&m, name, &labels)
    };
    assert_eq!(
        count("vireo_upstream_requests_total", &["result=\"ok\""]),
        252.0,
        "{m}"
    );
    assert_eq!(
        count("vireo_upstream_requests_total", &["result=\"failed\""]),
        0.0
    );
    assert_eq!(
        count("vireo_upstream_header_duration_seconds_count", &[]),
        252.0
    );
    assert_eq!(count("vireo_upstream_peer_up", &[]), 1.0);
    assert_eq!(count("vireo_upstream_peer_connections", &[]), 0.0);
}

/// php-fpm serves one connection per child. With more clients than children
/// the pool finds it full (a new connection waits in its listen queue far
/// longer than pooled exchanges take), and requests that find no idle
/// connection wait for one to come back instead of opening more for the
/// listen queue: connections are reused, and no client starves.
#[test]
fn a_full_php_fpm_gets_pooled_connections_back_not_new_ones() {
    const CLIENTS: usize = 8;
    const EACH: usize = 30;
    // One child more than the pool keeps idle, for the status page.
    let Some(fpm) = Fpm::start(3) else { return };
    let v = start_pooled(&fpm);
    assert_eq!(v.get("/echo.php?a=first").status, 200, "{}", v.stderr());
    let port = v.port;
    let made = ConnsMade::watch(fpm.port);
    let slowest: Vec<Duration> = (0..CLIENTS)
        .map(|i| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let mut slowest = Duration::ZERO;
                for j in 0..EACH {
                    let t = Instant::now();
                    let req = format!("GET /nap.php?a={i}x{j} HTTP/1.1\r\nHost: x\r\n\r\n");
                    s.write_all(req.as_bytes()).unwrap();
                    // The reply, whole once its Content-Length came.
                    let mut raw = Vec::new();
                    let mut buf = [0u8; 4096];
                    let r = loop {
                        if let Some((r, _)) = Resp::parse_one(&raw)
                            && r.header("content-length") == Some(&r.body.len().to_string())
                        {
                            break r;
                        }
                        let n = s.read(&mut buf).unwrap_or_else(|e| {
                            panic!(
                                "request {i}x{j}: {e} after {:?}",
                                String::from_utf8_lossy(&raw)
                            )
                        });
                        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&raw));
                        raw.extend_from_slice(&buf[..n]);
                    };
                    assert_eq!(r.status, 200);
                    assert!(r.text().contains(&format!("a={i}x{j} ")), "{}", r.text());
                    slowest = slowest.max(t.elapsed());
                }
                slowest
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let slowest = slowest.into_iter().max().unwrap();
    assert!(
        slowest < Duration::from_secs(2),
        "a request took {slowest:?}"
    );
    // Every request reached php-fpm (its status page counts them, with its
    // own and the probes of its start).
    let status = fpm.status();
    let accepted: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("accepted conn:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{status}"));
    let requests = CLIENTS * EACH + 1;
    assert!(accepted > requests, "{status}");
    let made = made.count();
    // Each a new connection once php-fpm is full, without the wait.
    assert!(
        made < requests / 4,
        "{made} connections for {requests} requests"
    );
}

/// Watches the connections made to `port` (IPv4) until stopped: the local
/// ports of the client ends seen in `/proc/net/tcp`, looked at every
/// millisecond (a connection carries at least one exchange, which takes
/// longer).
struct ConnsMade {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    seen: std::thread::JoinHandle<std::collections::HashSet<String>>,
}

impl ConnsMade {
    fn watch(port: u16) -> ConnsMade {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let seen = std::thread::spawn(move || {
            let mut seen = std::collections::HashSet::new();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                seen.extend(client_ends(port).into_iter().map(|(local, _)| local));
                std::thread::sleep(Duration::from_millis(1));
            }
            seen
        });
        ConnsMade { stop, seen }
    }

    fn count(self) -> usize {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.seen.join().unwrap().len()
    }
}

/// php-fpm leaves Nagle's algorithm on and writes phpinfo()'s reply in
/// pieces: on a pooled connection the rest must not wait for a delayed ACK
/// (~40 ms a request), so pooled requests take no longer than new
/// connections do.
#[test]
fn pooled_replies_are_not_held_by_delayed_acks() {
    const N: u32 = 20;
    let Some(fpm) = Fpm::start(2) else { return };
    let time = |v: &Vireo| {
        assert!(v.get("/info.php").text().contains("PHP Version"));
        let t = Instant::now();
        for _ in 0..N {
            assert!(v.get("/info.php").text().contains("PHP Version"));
        }
        t.elapsed()
    };
    let fresh = time(&start(&fpm, ""));
    let pooled = time(&start_pooled(&fpm));
    assert!(
        pooled < fresh + Duration::from_millis(20) * N,
        "{N} phpinfo() requests: {pooled:?} pooled, {fresh:?} on new connections"
    );
}

const STDOUT: u8 = 6;
const STDERR: u8 = 7;
const END: u8 = 3;

/// A FastCGI application on a free port that answers every connection with
/// `writes`, one write each with a pause between, so that records reach
/// vireo split where the test says (mid-header, mid-content) or many at once.
fn scripted(writes: Vec<Vec<u8>>) -> u16 {
    let ms3 = Duration::from_millis(3);
    scripted_timed(writes.into_iter().map(|w| (w, ms3)).collect(), ms3)
}

/// `scripted` with the pause after each write given, and how long the
/// connection stays open after the last one (a compliant application closes
/// it at once when FCGI_KEEP_CONN is not set).
fn scripted_timed(writes: Vec<(Vec<u8>, Duration)>, linger: Duration) -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            // The request, up to the empty STDIN record.
            let mut head = [0u8; 8];
            loop {
                if s.read_exact(&mut head).is_err() {
                    break;
                }
                let len = u16::from_be_bytes([head[4], head[5]]) as usize + head[6] as usize;
                let mut skip = vec![0u8; len];
                if s.read_exact(&mut skip).is_err() || (head[1] == 5 && len == 0) {
                    break;
                }
            }
            for (w, pause) in &writes {
                if s.write_all(w).is_err() {
                    break;
                }
                std::thread::sleep(*pause);
            }
            std::thread::sleep(linger);
        }
    });
    port
}

/// `stream` cut at the given lengths (the rest in one last write).
fn cut(stream: &[u8], lens: &[usize]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = stream;
    for &n in lens {
        let n = n.min(rest.len());
        out.push(rest[..n].to_vec());
        rest = &rest[n..];
    }
    out.push(rest.to_vec());
    out
}

fn scripted_vireo(locations: &[(&str, u16, &str)]) -> Vireo {
    let locs: String = locations
        .iter()
        .map(|(path, port, extra)| {
            format!("location {path} {{ fastcgi_pass 127.0.0.1:{port}; {extra} }}\n")
        })
        .collect();
    Vireo::start(&format!(
        "events {{}}\nhttp {{ server {{ listen 127.0.0.1:{{port}};\n{locs} }} }}\n"
    ))
}

#[test]
fn records_split_across_reads_or_many_in_one() {
    // The head over two records, body records of many sizes with stderr
    // between, END in the same write as the last piece.
    let mut body = Vec::new();
    let mut stream = record(STDOUT, b"Status: 200 OK\r\nContent-Ty");
    stream.extend(record(STDOUT, b"pe: text/plain\r\n\r\nfirst "));
    body.extend_from_slice(b"first ");
    for i in 0..300usize {
        let piece: Vec<u8> = (0..(i * 37) % 700 + 1)
            .map(|j| b'a' + (j % 26) as u8)
            .collect();
        body.extend_from_slice(&piece);
        stream.extend(record(STDOUT, &piece));
        if i % 50 == 0 {
            stream.extend(record(STDERR, b"a warning"));
        }
    }
    stream.extend(record(STDOUT, b""));
    stream.extend(record(END, &[0; 8]));
    // Byte by byte through the first records, then mid-header and
    // mid-content cuts, then the rest (most records) in one write.
    let mut lens = vec![1; 40];
    lens.extend([3, 5, 11, 4000, 9, 6001]);
    let split = scripted(cut(&stream, &lens));
    // 2,000 records of 50 bytes at once: gathered 16 to a write, with and
    // without the application's Content-Length.
    let piece = [b'z'; 50];
    let many = |head: &[u8]| {
        let mut s = record(STDOUT, head);
        for _ in 0..2000 {
            s.extend(record(STDOUT, &piece));
        }
        s.extend(record(END, &[0; 8]));
        scripted(vec![s])
    };
    let chunked = many(b"Content-Type: text/plain\r\n\r\n");
    let sized = many(b"Content-Type: text/plain\r\nContent-Length: 100000\r\n\r\n");
    let v = scripted_vireo(&[
        ("/split", split, ""),
        ("/split-unbuffered", split, "fastcgi_buffering off;"),
        ("/chunked", chunked, "fastcgi_buffering off;"),
        ("/sized", sized, "fastcgi_buffering off;"),
    ]);
    for path in ["/split", "/split-unbuffered"] {
        let (chunked, close) = twice(&v, path);
        assert!(chunked == body, "{path}: chunked body differs");
        assert!(close == body, "{path}: body differs");
    }
    let zs = vec![b'z'; 100_000];
    assert!(twice(&v, "/chunked") == (zs.clone(), zs.clone()));
    let r = v.get("/sized");
    assert_eq!(r.header("content-length"), Some("100000"));
    assert!(r.body == zs);
}

/// GET `path` twice on one connection, the second with Connection: close:
/// both bodies, chunked (HTTP/1.1, length unknown) whether the connection
/// stays or closes after it.
fn twice(v: &Vireo, path: &str) -> (Vec<u8>, Vec<u8>) {
    let mut s = v.connect();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\n\r\nGET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let raw = read_to_close(&mut s);
    let mut both = Resp::parse_all(&raw).into_iter();
    let (first, second) = (both.next().unwrap(), both.next().unwrap());
    for r in [&first, &second] {
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{path}");
    }
    (first.body, second.body)
}

#[test]
fn bad_record_mid_stream_ends_the_response_after_what_was_good() {
    let mut stream = record(STDOUT, b"Content-Type: text/plain\r\n\r\ngood ");
    for _ in 0..20 {
        stream.extend(record(STDOUT, b"piece "));
    }
    // A record of protocol version 2, in the same write as the good ones.
    let mut bad = record(STDOUT, b"never");
    bad[0] = 2;
    stream.extend(bad);
    let port = scripted(vec![stream]);
    let v = scripted_vireo(&[("/", port, "fastcgi_buffering off;")]);
    let mut s = v.connect();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let raw = read_to_close(&mut s);
    let r = Resp::parse(&raw).unwrap();
    assert_eq!(r.status, 200);
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(
        text.contains("good ") && text.matches("piece ").count() == 20,
        "{text}"
    );
    assert!(
        !text.contains("never") && !text.ends_with("0\r\n\r\n"),
        "{text}"
    );
}

/// Time to the end of the response head, and the whole response, for a GET
/// of `path` with Connection: close.
fn timed_get(v: &Vireo, path: &str) -> (Duration, Resp) {
    let mut s = v.connect();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t = Instant::now();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let mut head_at = None;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if head_at.is_none() && raw.windows(4).any(|w| w == b"\r\n\r\n") {
            head_at = Some(t.elapsed());
        }
    }
    (head_at.unwrap(), Resp::parse(&raw).unwrap())
}

#[test]
fn replies_are_not_held_under_the_low_water_mark() {
    // Without fastcgi_keep_conn and with buffering, vireo asks the kernel to
    // wake it for a reply only when a buffer's worth is in or at the end
    // (SO_RCVLOWAT). Whatever the application does, bytes under that mark
    // wait a bounded time (250 ms, then doubling), never the read timeout.
    let ms = Duration::from_millis;
    let head = |extra: &str| {
        record(
            STDOUT,
            format!("Content-Type: text/plain\r\n{extra}\r\nhello").as_bytes(),
        )
    };
    let end = || {
        let mut e = record(STDOUT, b" world");
        e.extend(record(END, &[0; 8]));
        e
    };
    // A head that turns buffering off, then a pause (server-sent events).
    let sse = scripted_timed(
        vec![
            (head("X-Accel-Buffering: no\r\n"), ms(1500)),
            (end(), ms(0)),
        ],
        ms(0),
    );
    // A reply that trickles for longer than the read timeout, in pieces far
    // under the mark: after a first silence (so the mark is held twice).
    let mut steps = vec![(Vec::new(), ms(400)), (head(""), ms(300))];
    for _ in 0..6 {
        steps.push((record(STDOUT, b"."), ms(300)));
    }
    steps.push((end(), ms(0)));
    let trickle = scripted_timed(steps, ms(0));
    // A reply whose application keeps the connection open after END_REQUEST
    // (it should close it: FCGI_KEEP_CONN is not set).
    let mut whole = head("");
    whole.extend(end());
    let lingers = scripted_timed(vec![(whole, ms(0))], ms(3000));
    let v = scripted_vireo(&[
        ("/sse", sse, ""),
        ("/trickle", trickle, "fastcgi_read_timeout 1s;"),
        ("/lingers", lingers, ""),
    ]);
    let (head_at, r) = timed_get(&v, "/sse");
    assert!(head_at < ms(1000), "head after {head_at:?}");
    assert_eq!((r.status, &r.body[..]), (200, &b"hello world"[..]));
    let (_, r) = timed_get(&v, "/trickle");
    assert_eq!((r.status, &r.body[..]), (200, &b"hello...... world"[..]));
    let t = Instant::now();
    let (_, r) = timed_get(&v, "/lingers");
    // The whole reply, answered with its length well before the close.
    assert!(t.elapsed() < ms(1500), "answered after {:?}", t.elapsed());
    assert_eq!((r.status, &r.body[..]), (200, &b"hello world"[..]));
    assert_eq!(r.header("content-length"), Some("11"));
}

#[test]
fn x_accel_charset_recodes_the_reply() {
    // The application's reply is in charset B and asks to go out in A.
    let mut stream = record(
        STDOUT,
        b"Content-Type: text/html; charset=B\r\nX-Accel-Charset: A\r\n\r\nXaX",
    );
    stream.extend(record(END, &[0; 8]));
    let port = scripted(vec![stream]);
    let v = Vireo::start(&format!(
        "events {{}}\nhttp {{ charset_map B A {{ 58 59; }}\nserver {{ listen 127.0.0.1:{{port}};\nlocation / {{ fastcgi_pass 127.0.0.1:{port}; }} }} }}\n"
    ));
    let r = v.get("/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=A"));
    assert_eq!(r.header("x-accel-charset"), None);
    assert_eq!(r.body, b"YaY");
}

/// A whole reply of a scripted application: `status`, then `body`.
fn reply(status: &str, body: &[u8]) -> Vec<u8> {
    let mut s = record(
        STDOUT,
        format!("Status: {status}\r\nContent-Type: text/plain\r\n\r\n").as_bytes(),
    );
    s.extend(record(STDOUT, body));
    s.extend(record(STDOUT, b""));
    s.extend(record(END, &[0; 8]));
    s
}

#[test]
fn next_upstream_moves_on_and_the_attempts_show_in_upstream_variables() {
    let dead = closed_port();
    let busy = scripted(vec![reply("503 Busy", b"busy")]);
    let ok = scripted(vec![reply("200 OK", b"ok")]);
    let slow = scripted_timed(
        vec![
            (Vec::new(), Duration::from_millis(300)),
            (reply("503 Busy", b"slow"), Duration::ZERO),
        ],
        Duration::ZERO,
    );
    let v = Vireo::start(&format!(
        "events {{}}\nhttp {{\n\
         upstream three {{ server 127.0.0.1:{dead}; server 127.0.0.1:{busy}; server 127.0.0.1:{ok}; }}\n\
         upstream two {{ server 127.0.0.1:{dead}; server 127.0.0.1:{busy}; }}\n\
         upstream late {{ server 127.0.0.1:{slow}; server 127.0.0.1:{ok}; }}\n\
         server {{ listen 127.0.0.1:{{port}};\n\
         fastcgi_next_upstream error http_503;\n\
         add_header X-Addr $upstream_addr always;\n\
         add_header X-Status $upstream_status always;\n\
         location /three {{ fastcgi_pass three; }}\n\
         location /two {{ fastcgi_pass two; }}\n\
         location /late {{ fastcgi_pass late; fastcgi_next_upstream_timeout 100ms; }}\n\
         }} }}\n"
    ));
    let r = v.get("/three");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"), "{}", v.stderr());
    assert_eq!(
        r.header("x-addr").unwrap_or_default(),
        format!("127.0.0.1:{dead}, 127.0.0.1:{busy}, 127.0.0.1:{ok}")
    );
    assert_eq!(r.header("x-status").unwrap_or_default(), "502, 503, 200");
    // No peer left: the last application's own reply, as nginx.
    let r = v.get("/two");
    assert_eq!(
        (r.status, r.text().as_str()),
        (503, "busy"),
        "{}",
        v.stderr()
    );
    // fastcgi_next_upstream_timeout: past it, no further attempt.
    let r = v.get("/late");
    assert_eq!(
        (r.status, r.text().as_str()),
        (503, "slow"),
        "{}",
        v.stderr()
    );
    assert_eq!(
        r.header("x-addr").unwrap_or_default(),
        format!("127.0.0.1:{slow}")
    );
    assert!(
        v.stderr()
            .contains("connect() failed (111: Connection refused) while connecting to upstream")
    );
}
