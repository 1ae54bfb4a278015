//! Access log: the default `combined` line, custom formats and variables,
//! escaping, buffering, `off`, per-location logs, errors in the configuration.

mod common;
use common::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Wait until the log file has at least `n` lines; return them.
#[track_caller]
fn lines(v: &Vireo, file: &str, n: usize) -> Vec<String> {
    eventually(5, || v.dir.read(file).lines().count() >= n);
    let all: Vec<String> = v.dir.read(file).lines().map(String::from).collect();
    assert!(all.len() >= n, "{file}: want {n} lines, have {all:?}");
    all
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Send a raw request on a new connection; the bytes back and the client port.
fn exchange(v: &Vireo, req: &[u8]) -> (Vec<u8>, u16) {
    let mut s = v.connect();
    let port = s.local_addr().unwrap().port();
    s.write_all(req).unwrap();
    (read_to_close(&mut s), port)
}

#[test]
fn default_log_is_combined_under_the_prefix() {
    let dir = TempDir::new("al");
    dir.write("html/a.txt", "hello");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    let before = now_secs();
    let (raw, _) = exchange(
        &v,
        b"GET /a.txt?x=1&y=%20 HTTP/1.1\r\nHost: Example.COM\r\nReferer: http://ref.example/p?q\r\n\
          User-Agent: agent/1.0 (x; y)\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(Resp::parse(&raw).unwrap().status, 200);
    let l = lines(&v, "logs/access.log", 1);
    assert_eq!(l.len(), 1, "{l:?}");
    let line = &l[0];
    // 127.0.0.1 - - [21/Nov/2026:22:35:38 +0000] "GET … HTTP/1.1" 200 5 "ref" "ua"
    let (head, rest) = line.split_once(" [").expect(line);
    assert_eq!(head, "127.0.0.1 - -");
    let (time, rest) = rest.split_once("] ").expect(line);
    let t = chrono::DateTime::parse_from_str(time, "%d/%b/%Y:%H:%M:%S %z").expect(time);
    let t = t.timestamp() as f64;
    assert!(t >= before.floor() - 1.0 && t <= now_secs() + 1.0, "{time}");
    assert_eq!(
        rest,
        "\"GET /a.txt?x=1&y=%20 HTTP/1.1\" 200 5 \"http://ref.example/p?q\" \"agent/1.0 (x; y)\""
    );
}

#[test]
fn many_variables() {
    let dir = TempDir::new("al");
    dir.write("html/dir/f.txt", "0123456789");
    let fmt = [
        "$remote_addr",
        "$remote_port",
        "$remote_user",
        "$time_local",
        "$time_iso8601",
        "$request",
        "$request_method",
        "$uri",
        "$args",
        "$status",
        "$body_bytes_sent",
        "$bytes_sent",
        "$http_referer",
        "$http_user_agent",
        "$http_x_custom",
        "$request_time",
        "$connection",
        "$connection_requests",
        "$host",
        "$server_name",
        "$server_port",
        "$scheme",
        "$msec",
        "$request_length",
        "$request_uri",
        "$server_protocol",
        "$is_args",
        "$arg_b",
        "$pid",
    ];
    let conf = format!(
        "events {{}}\nhttp {{\n log_format all '{}';\n access_log logs/all.log all;\n server {{\n  listen 127.0.0.1:{{port}};\n  \
         server_name main.test alias.test;\n  root {{dir}}/html;\n }}\n}}\n",
        fmt.join("|")
    );
    let v = Vireo::start_in(dir, &conf);
    let req1 = "GET /dir/./f.txt?a=1&B=two HTTP/1.1\r\nHost: WWW.Other.TEST:8080\r\nX-Custom: custom value\r\nUser-Agent: ua\r\n\r\n";
    let req2 = "HEAD /dir/%66.txt HTTP/1.1\r\nHost: www.other.test\r\nConnection: close\r\n\r\n";
    let mut s = v.connect();
    let client_port = s.local_addr().unwrap().port();
    let t0 = now_secs();
    s.write_all(req1.as_bytes()).unwrap();
    // Read the first response fully before the second request.
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Resp::parse_one(&got).is_none_or(|(r, _)| r.body.len() < 10) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let first_len = got.len();
    s.write_all(req2.as_bytes()).unwrap();
    got.extend(read_to_close(&mut s));
    let second_len = got.len() - first_len;
    let t1 = now_secs();

    let l = lines(&v, "logs/all.log", 2);
    let f: Vec<&str> = l[0].split('|').collect();
    assert_eq!(f.len(), fmt.len(), "{}", l[0]);
    let field = |name: &str| f[fmt.iter().position(|n| *n == name).unwrap()];
    assert_eq!(field("$remote_addr"), "127.0.0.1");
    assert_eq!(field("$remote_port"), client_port.to_string());
    assert_eq!(field("$remote_user"), "-");
    chrono::DateTime::parse_from_str(field("$time_local"), "%d/%b/%Y:%H:%M:%S %z")
        .expect("time_local");
    chrono::DateTime::parse_from_rfc3339(field("$time_iso8601")).expect("time_iso8601");
    assert_eq!(field("$request"), "GET /dir/./f.txt?a=1&B=two HTTP/1.1");
    assert_eq!(field("$request_method"), "GET");
    assert_eq!(field("$uri"), "/dir/f.txt");
    assert_eq!(field("$args"), "a=1&B=two");
    assert_eq!(field("$status"), "200");
    assert_eq!(field("$body_bytes_sent"), "10");
    assert_eq!(field("$bytes_sent"), first_len.to_string());
    assert_eq!(field("$http_referer"), "-");
    assert_eq!(field("$http_user_agent"), "ua");
    assert_eq!(field("$http_x_custom"), "custom value");
    let rt: f64 = field("$request_time").parse().unwrap();
    assert!(
        field("$request_time").split_once('.').unwrap().1.len() == 3 && rt < 5.0,
        "{}",
        field("$request_time")
    );
    let conn = field("$connection");
    assert!(conn.parse::<u64>().unwrap() >= 1);
    assert_eq!(field("$connection_requests"), "1");
    assert_eq!(field("$host"), "www.other.test");
    assert_eq!(field("$server_name"), "main.test");
    assert_eq!(field("$server_port"), v.port.to_string());
    assert_eq!(field("$scheme"), "http");
    let msec = field("$msec");
    assert_eq!(msec.split_once('.').unwrap().1.len(), 3, "{msec}");
    let msec: f64 = msec.parse().unwrap();
    assert!(
        msec >= t0 - 1.0 && msec <= t1 + 1.0,
        "{msec} not in {t0}..{t1}"
    );
    assert_eq!(field("$request_length"), req1.len().to_string());
    assert_eq!(field("$request_uri"), "/dir/./f.txt?a=1&B=two");
    assert_eq!(field("$server_protocol"), "HTTP/1.1");
    assert_eq!(field("$is_args"), "?");
    assert_eq!(field("$arg_b"), "two");
    assert_eq!(field("$pid"), v.pid().to_string());

    // The second request on the same connection: HEAD, no arguments.
    let g: Vec<&str> = l[1].split('|').collect();
    let field2 = |name: &str| g[fmt.iter().position(|n| *n == name).unwrap()];
    assert_eq!(field2("$connection"), conn);
    assert_eq!(field2("$connection_requests"), "2");
    assert_eq!(field2("$request_method"), "HEAD");
    assert_eq!(field2("$uri"), "/dir/f.txt");
    assert_eq!(field2("$args"), "-");
    assert_eq!(field2("$is_args"), "-");
    assert_eq!(field2("$body_bytes_sent"), "0");
    assert_eq!(field2("$bytes_sent"), second_len.to_string());
    assert_eq!(field2("$http_x_custom"), "-");
    assert_eq!(field2("$request_length"), req2.len().to_string());

    // A new connection has a new number.
    assert_eq!(v.get("/dir/f.txt").status, 200);
    let l = lines(&v, "logs/all.log", 3);
    let h: Vec<&str> = l[2].split('|').collect();
    let c3: u64 = h[fmt.iter().position(|n| *n == "$connection").unwrap()]
        .parse()
        .unwrap();
    assert!(c3 > conn.parse::<u64>().unwrap());
}

#[test]
fn host_falls_back_to_server_name() {
    let dir = TempDir::new("al");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format h '$host|$server_name|$http_host';\n access_log logs/h.log h;\n \
         server {\n  listen 127.0.0.1:{port};\n  server_name first.test;\n  root {dir}/html;\n }\n}\n",
    );
    exchange(&v, b"GET / HTTP/1.0\r\n\r\n");
    let l = lines(&v, "logs/h.log", 1);
    assert_eq!(l[0], "first.test|first.test|-");
}

#[test]
fn escaping_default_json_none() {
    let dir = TempDir::new("al");
    dir.write("html/x", "x");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format d '\"$http_user_agent\" $http_x_a';\n \
         log_format j escape=json '{\"ua\":\"$http_user_agent\",\"a\":\"$http_x_a\",\"u\":\"$remote_user\"}';\n \
         log_format n escape=none '[$http_user_agent] [$remote_user]';\n access_log logs/d.log d;\n \
         access_log logs/j.log j;\n access_log logs/n.log n;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    let mut req = b"GET /x HTTP/1.0\r\nUser-Agent: a\"b\\c d\xc3\xa9\tz\r\nX-A: x\r\n\r\n".to_vec();
    exchange(&v, &req);
    assert_eq!(
        lines(&v, "logs/d.log", 1)[0],
        "\"a\\x22b\\x5Cc d\\xC3\\xA9\\x09z\" x"
    );
    let j = lines(&v, "logs/j.log", 1);
    assert_eq!(
        j[0],
        "{\"ua\":\"a\\\"b\\\\c d\u{e9}\\tz\",\"a\":\"x\",\"u\":\"\"}"
    );
    let n = std::fs::read(v.dir.path().join("logs/n.log")).unwrap();
    assert_eq!(n, b"[a\"b\\c d\xc3\xa9\tz] []\n");
    // An empty header value is "-" with the default escaping too.
    req = b"GET /x HTTP/1.0\r\nUser-Agent:\r\n\r\n".to_vec();
    exchange(&v, &req);
    assert_eq!(lines(&v, "logs/d.log", 2)[1], "\"-\" -");
}

#[test]
fn buffered_lines_wait_for_exit() {
    let dir = TempDir::new("al");
    dir.write("html/x", "x");
    let mut v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log logs/buf.log combined buffer=32k;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    for _ in 0..3 {
        assert_eq!(v.get("/x").status, 200);
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        v.dir.read("logs/buf.log"),
        "",
        "written before the buffer filled"
    );
    v.signal(libc::SIGQUIT);
    assert_eq!(v.wait_exit(5).and_then(|s| s.code()), Some(0));
    let log = v.dir.read("logs/buf.log");
    assert_eq!(log.lines().count(), 3, "{log}");
    assert!(
        log.lines()
            .all(|l| l.contains("\"GET /x HTTP/1.1\" 200 1 ")),
        "{log}"
    );
}

#[test]
fn buffered_lines_written_when_buffer_fills() {
    let dir = TempDir::new("al");
    dir.write("html/x", "x");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format u '$uri $status';\n access_log logs/buf.log u buffer=64;\n \
         server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    // Each line is "/x 200\n" (7 bytes): nine fit in 64, the tenth flushes them.
    for _ in 0..9 {
        v.get("/x");
    }
    assert_eq!(v.dir.read("logs/buf.log"), "");
    v.get("/x");
    assert_eq!(lines(&v, "logs/buf.log", 9).len(), 9);
}

#[test]
fn buffered_lines_flushed_after_flush_time() {
    let dir = TempDir::new("al");
    dir.write("html/x", "x");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log logs/fl.log combined buffer=32k flush=1s;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    let t = Instant::now();
    assert_eq!(v.get("/x").status, 200);
    assert_eq!(v.dir.read("logs/fl.log"), "");
    assert!(eventually(4, || v.dir.read("logs/fl.log").lines().count() == 1));
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(900), "flushed after {took:?}");
}

#[test]
fn off_and_per_location_logs() {
    let dir = TempDir::new("al");
    dir.write("html/a/x", "a");
    dir.write("html/b/x", "b");
    dir.write("html/c/x", "c");
    dir.write("html/x", "root");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format u '$uri $status';\n access_log logs/http.log u;\n server {\n  listen 127.0.0.1:{port};\n  \
         root {dir}/html;\n  access_log logs/server.log u;\n  location /a/ {\n   access_log off;\n  }\n  \
         location /b/ {\n   access_log logs/b.log u;\n   access_log logs/b2.log combined;\n  }\n  location /c/ { }\n }\n}\n",
    );
    for p in ["/a/x", "/b/x", "/c/x", "/x", "/b/missing"] {
        v.get(p);
    }
    let b = lines(&v, "logs/b.log", 2);
    assert_eq!(b, ["/b/x 200", "/b/missing 404"]);
    let b2 = lines(&v, "logs/b2.log", 2);
    assert!(b2[0].contains("\"GET /b/x HTTP/1.1\" 200 1 "), "{b2:?}");
    let s = lines(&v, "logs/server.log", 2);
    assert_eq!(s, ["/c/x 200", "/x 200"]);
    // The http-level log is overridden in the server: nothing there.
    assert_eq!(v.dir.read("logs/http.log"), "");
    // The default log is not used when access_log is set.
    assert_eq!(v.dir.read("logs/access.log"), "");
}

#[test]
fn access_log_off_everywhere_writes_nothing() {
    let dir = TempDir::new("al");
    dir.write("html/x", "x");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    assert_eq!(v.get("/x").status, 200);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !v.dir.path().join("logs/access.log").exists() || v.dir.read("logs/access.log").is_empty()
    );
}

#[test]
fn client_errors_are_logged() {
    let dir = TempDir::new("al");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format s '$status $request_method $uri';\n access_log logs/s.log s;\n \
         client_max_body_size 10;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    assert_eq!(v.get("/missing").status, 404);
    let r = v.request(
        "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 413);
    assert_eq!(v.get("/%2e%2e/%2e%2e/etc/passwd").status, 400);
    let l = lines(&v, "logs/s.log", 3);
    assert_eq!(l[0], "404 GET /missing");
    assert_eq!(l[1], "413 POST /up");
    assert!(l[2].starts_with("400 GET"), "{l:?}");
}

#[test]
fn unparsable_requests_are_logged() {
    let dir = TempDir::new("al");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format s '$status \"$request\"';\n access_log logs/s.log s;\n \
         server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    let (raw, _) = exchange(&v, b"GARBAGE\r\n\r\n");
    assert_eq!(Resp::parse(&raw).unwrap().status, 400);
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(20_000));
    let (raw, _) = exchange(&v, long.as_bytes());
    assert_eq!(Resp::parse(&raw).unwrap().status, 414);
    let l = lines(&v, "logs/s.log", 2);
    assert!(l[0].starts_with("400 "), "{l:?}");
    assert!(l[1].starts_with("414 "), "{l:?}");
}

/// Buffered logs naming one file share its buffer (as nginx's): lines go out
/// in the order requests finished, whichever `access_log` wrote them.
#[test]
fn buffered_logs_of_one_file_share_the_buffer() {
    let dir = TempDir::new("al");
    let mut v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format u $uri;\n server {\n  listen 127.0.0.1:{port};\n  location / {\n   access_log logs/s.log u buffer=16k if=$arg_a;\n   access_log logs/s.log u buffer=16k if=$arg_b;\n   return 200;\n  }\n }\n}\n",
    );
    for (i, q) in ["a=1", "b=1", "a=1", "c=1", "b=1"].iter().enumerate() {
        assert_eq!(v.get(&format!("/{i}?{q}")).status, 200);
    }
    v.signal(libc::SIGQUIT);
    assert_eq!(v.wait_exit(5).and_then(|s| s.code()), Some(0));
    assert_eq!(v.dir.read("logs/s.log"), "/0\n/1\n/2\n/4\n");
}

#[test]
fn unknown_log_format_is_a_config_error() {
    let dir = TempDir::new("al");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let conf = dir.path().join("t.conf");
    let check = |text: &str, msg: &str, line: u32| {
        let o = test_conf(&dir, text);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        let want = format!("vireo: [emerg] {msg} in {}:{line}\n", conf.display());
        assert!(err.contains(&want), "want {want:?}\ngot {err}");
    };
    check(
        "events {}\nhttp {\n server {\n  access_log logs/x.log nosuch;\n }\n}\n",
        "unknown log format \"nosuch\"",
        4,
    );
    check(
        "events {}\nhttp {\n access_log logs/x.log combined buffer=8k;\n server {\n  access_log logs/x.log combined buffer=16k;\n }\n}\n",
        "access_log \"logs/x.log\" already defined with conflicting parameters",
        5,
    );
    // A format must be defined before it is used, as in nginx.
    check(
        "events {}\nhttp {\n access_log logs/x.log late;\n log_format late '$uri';\n}\n",
        "unknown log format \"late\"",
        3,
    );
    check(
        "events {}\nhttp {\n log_format bad '$nosuch';\n}\n",
        "unknown \"nosuch\" variable",
        3,
    );
    check(
        "events {}\nhttp {\n log_format bad escape=yaml '$uri';\n}\n",
        "invalid parameter \"escape=yaml\" in \"log_format\" directive",
        3,
    );
    check(
        "events {}\nhttp {\n log_format combined '$uri';\n}\n",
        "duplicate \"log_format\" name \"combined\"",
        3,
    );
    check(
        "events {}\nhttp {\n access_log logs/x.log combined buffer=lots;\n}\n",
        "invalid parameter \"buffer=lots\" in \"access_log\" directive",
        3,
    );
    check(
        "events {}\nhttp {\n access_log logs/x.log combined flush=1x;\n}\n",
        "invalid parameter \"flush=1x\" in \"access_log\" directive",
        3,
    );
    check(
        "events {}\nhttp {\n access_log off combined;\n}\n",
        "invalid parameter \"combined\" in \"access_log\" directive",
        3,
    );
    check(
        "events {}\nhttp {\n server {\n  log_format x '$uri';\n }\n}\n",
        "\"log_format\" directive is not allowed here",
        4,
    );
    // syslog: checked, never written to a file called "syslog:…".
    check(
        "events {}\nhttp {\n access_log syslog:server=127.0.0.1:514,bogus combined;\n}\n",
        "unknown syslog parameter \"bogus\"",
        3,
    );
    check(
        "events {}\nhttp {\n access_log syslog:server=127.0.0.1:514 combined buffer=4k;\n}\n",
        "logs to syslog cannot be buffered",
        3,
    );
    assert!(
        !dir.path()
            .join("syslog:server=127.0.0.1:514,bogus")
            .exists()
    );
    check(
        "events {}\nhttp {\n access_log /nonexistent-vireo/a.log;\n}\n",
        "open() \"/nonexistent-vireo/a.log\" failed (2: No such file or directory)",
        3,
    );
}

#[test]
fn log_format_strings_are_joined() {
    let dir = TempDir::new("al");
    dir.write("html/x", "x");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format multi '$request_method '\n                  '$uri '\n                  \"[$status]\";\n \
         access_log logs/m.log multi;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    v.get("/x");
    assert_eq!(lines(&v, "logs/m.log", 1), ["GET /x [200]"]);
}

#[test]
fn unix_socket_client_address() {
    let dir = TempDir::new("al");
    dir.write("html/x", "x");
    let sock = dir.path().join("al.sock");
    let conf = format!(
        "events {{}}\nhttp {{\n log_format a '$remote_addr|$remote_port|$server_port|$status';\n access_log logs/a.log a;\n \
         server {{\n  listen 127.0.0.1:{{port}};\n  listen unix:{};\n  root {{dir}}/html;\n }}\n}}\n",
        sock.display()
    );
    let v = Vireo::start_in(dir, &conf);
    let mut u = connect_unix(&sock);
    u.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    u.write_all(b"GET /x HTTP/1.0\r\n\r\n").unwrap();
    let mut out = Vec::new();
    u.read_to_end(&mut out).unwrap();
    assert_eq!(Resp::parse(&out).unwrap().status, 200);
    assert_eq!(lines(&v, "logs/a.log", 1), ["unix:|-|-|200"]);
}

#[test]
fn request_length_includes_the_body() {
    let dir = TempDir::new("al");
    dir.write("html/x", "x");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format l '$status $request_length';\n access_log logs/l.log l;\n \
         server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    let req = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    let (raw, _) = exchange(&v, req);
    let status = Resp::parse(&raw).unwrap().status;
    let chunked = b"PUT /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
    exchange(&v, chunked);
    let l = lines(&v, "logs/l.log", 2);
    assert_eq!(l[0], format!("{status} {}", req.len()));
    assert_eq!(l[1], format!("{status} {}", chunked.len()));
}

#[test]
fn bytes_sent_counts_partial_responses() {
    let dir = TempDir::new("al");
    dir.write("html/big", vec![b'z'; 8 << 20]);
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format l '$status $body_bytes_sent';\n access_log logs/l.log l;\n \
         server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n",
    );
    let mut s = v.connect();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = 0;
    let mut buf = [0u8; 65536];
    while got < 1 << 20 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n;
    }
    drop(s);
    let l = lines(&v, "logs/l.log", 1);
    let (status, sent) = l[0].split_once(' ').unwrap();
    assert_eq!(status, "200");
    let sent: usize = sent.parse().unwrap();
    // At least what this client read, minus the head.
    assert!(sent >= (1 << 20) - 512, "{}", l[0]);
}

#[test]
fn request_completion_says_whether_the_response_went_out_whole() {
    let dir = TempDir::new("al");
    dir.write("html/small", "tiny");
    // Past what the two sockets' buffers hold, so a client that leaves
    // early makes the server's writes fail.
    dir.write("html/big", vec![b'z'; 32 << 20]);
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n log_format l '$uri $status [$request_completion]';\n \
         access_log logs/l.log l;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n  \
         location = /gone { return 444; }\n }\n}\n",
    );
    assert_eq!(v.get("/small").status, 200);
    assert_eq!(lines(&v, "logs/l.log", 1)[0], "/small 200 [OK]");
    // A client that reads part of the body and closes.
    let mut s = v.connect();
    s.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = 0;
    let mut buf = [0u8; 65536];
    while got < 1 << 20 {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n;
    }
    drop(s);
    // The head went out: its status stays, as nginx logs it; an empty
    // value is logged as "-".
    assert_eq!(lines(&v, "logs/l.log", 2)[1], "/big 200 [-]");
    // Closed without an answer.
    let (raw, _) = exchange(&v, b"GET /gone HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(raw.is_empty());
    assert_eq!(lines(&v, "logs/l.log", 3)[2], "/gone 444 [-]");
}

#[test]
fn if_condition_skips_requests_it_rules_out() {
    let v = Vireo::start(
        "events {}
http {
    map $status $loggable { ~^[23] 0; default 1; }
    access_log {dir}/logs/errors.log combined buffer=4k flush=1s if=$loggable;
    access_log {dir}/logs/all.log combined;
    server { listen 127.0.0.1:{port}; location / { return 200 ok; } location /x { return 404; } }
}",
    );
    assert_eq!(v.get("/ok").status, 200);
    assert_eq!(v.get("/x").status, 404);
    let all = lines(&v, "logs/all.log", 2);
    assert_eq!(all.len(), 2);
    let errors = lines(&v, "logs/errors.log", 1);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("\"GET /x HTTP/1.1\" 404"), "{errors:?}");
}

#[test]
fn gzip_buffers_are_gzip_members() {
    let v = Vireo::start(
        "events {}\nhttp {\n log_format u \"$uri:$status\";\n server {\n  listen 127.0.0.1:{port};\n  \
         root {dir}/html;\n  access_log {dir}/z.log.gz u gzip=9 flush=100ms;\n }\n}\n",
    );
    v.get("/one");
    assert!(eventually(5, || std::fs::metadata(
        v.dir.path().join("z.log.gz")
    )
    .is_ok_and(|m| m.len() > 0)));
    v.get("/two");
    let unzip = || {
        let raw = std::fs::read(v.dir.path().join("z.log.gz")).unwrap();
        let mut s = String::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_string(&mut s)
            .unwrap();
        s
    };
    assert!(
        eventually(5, || unzip() == "/one:404\n/two:404\n"),
        "{}",
        unzip()
    );
}

#[test]
fn paths_with_variables_and_the_open_file_cache() {
    let v = Vireo::start(
        "events {}\nhttp {\n log_format u \"$uri\";\n server {\n  listen 127.0.0.1:{port};\n  \
         root {dir}/html;\n  location /v { access_log {dir}/v_$arg_n.log u; }\n  \
         location /c { open_log_file_cache max=2 min_uses=1; access_log {dir}/c_$arg_n.log u; }\n \
         }\n}\n",
    );
    v.get("/v1?n=a");
    v.get("/v2?n=b");
    v.get("/v3?n=a");
    assert!(eventually(5, || v.dir.read("v_a.log") == "/v1\n/v3\n"));
    assert_eq!(v.dir.read("v_b.log"), "/v2\n");
    v.get("/c1?n=x");
    // Kept open: still written after the file is renamed away.
    std::fs::rename(v.dir.path().join("c_x.log"), v.dir.path().join("moved.log")).unwrap();
    v.get("/c2?n=x");
    assert!(eventually(5, || v.dir.read("moved.log") == "/c1\n/c2\n"));
}

#[test]
fn buffered_paths_with_variables_are_refused() {
    let dir = TempDir::new("al-var");
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n server {\n  access_log logs/$host.log combined buffer=4k;\n }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("buffered logs cannot have variables in name"),
        "{err}"
    );
}
