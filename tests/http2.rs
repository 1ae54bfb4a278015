//! HTTP/2 over cleartext (prior knowledge) with curl as the client: every
//! feature of the HTTP/1 path goes through the same pipeline, so each gets a
//! request over h2 here — static files (ranges, 304, index, HEAD, big files
//! under flow control), routing (rewrite, return, error_page, 444), FastCGI
//! (php-fpm), proxy (to an HTTP/1 upstream), compression, request bodies and
//! the access log line — plus the HTTP/1 fallback on an http2 address and the
//! directives.

mod common;
use common::fpm::Fpm;
use common::*;
use std::process::Command;

/// What curl got: the status, the (lowercase) header fields and the body of
/// the final response; `exit` is curl's exit code (92: the stream was reset).
struct Got {
    exit: i32,
    /// curl's own messages.
    err: String,
    version: String,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `curl` over HTTP/2 with prior knowledge (unless `args` says otherwise).
fn curl(port: u16, path: &str, args: &[&str]) -> Got {
    let out = Command::new("curl")
        .args(["-sS", "-i", "--max-time", "30", "--http2-prior-knowledge"])
        .args(args)
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl runs");
    let exit = out.status.code().unwrap_or(-1);
    let mut raw = out.stdout.as_slice();
    let mut got = Got {
        exit,
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
        version: String::new(),
        status: 0,
        headers: Vec::new(),
        body: Vec::new(),
    };
    // Interim heads (100 Continue) come first.
    while let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        raw = &raw[end + 4..];
        let mut lines = head.lines();
        let first = lines.next().unwrap_or("");
        let mut words = first.split(' ');
        got.version = words.next().unwrap_or("").to_string();
        got.status = words.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        got.headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        if got.status >= 200 {
            break;
        }
    }
    got.body = raw.to_vec();
    got
}

fn h2(port: u16, path: &str) -> Got {
    let g = curl(port, path, &[]);
    assert_eq!(g.version, "HTTP/2", "not HTTP/2 for {path}: {}", g.err);
    g
}

const SITE: &str = "
worker_processes 1;
error_log logs/error.log info;
events {}
http {
    log_format p '$request|$server_protocol|$status|$body_bytes_sent|$http_cookie';
    access_log logs/access.log p;
    server {
        listen 127.0.0.1:{port};
        http2 on;
        root {dir}/html;
        rewrite ^/old/(.*)$ /new/$1 last;
        error_page 404 /404.html;
        location /new/ { return 200 \"new $uri $server_protocol\\n\"; }
        location = /which { return 200 \"[$http2]\"; }
        location = /gone { return 301 /new/x; }
        location = /drop { return 444; }
        location = /small { client_max_body_size 1k; return 200 ok; }
        location /z/ { gzip on; gzip_types text/plain; gzip_min_length 10; }
        location /up/ {
            proxy_pass http://127.0.0.1:{port2}/;
            add_header X-Body $request_body;
            add_header X-Body-File $request_body_file;
        }
        location /upoff/ { proxy_pass http://127.0.0.1:{port2}/; proxy_request_buffering off; }
        location = /status { stub_status; }
    }
    server {
        listen 127.0.0.1:{port2};
        root {dir}/html;
        location = /echo { return 200 \"len=$http_content_length proto=$server_protocol\"; }
    }
}";

fn site() -> Vireo {
    let dir = TempDir::new("h2");
    dir.write("html/index.html", "hello index\n");
    dir.write("html/404.html", "custom missing\n");
    dir.write("html/a.txt", "0123456789abcdefghij");
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 253) as u8).collect();
    dir.write("html/big.bin", &big);
    dir.write("html/z/text.txt", "compress me please ".repeat(1000));
    Vireo::start_in(dir, SITE)
}

#[test]
fn static_files_over_h2() {
    let v = site();
    let g = h2(v.port, "/");
    assert_eq!((g.status, g.text().as_str()), (200, "hello index\n"));
    assert_eq!(g.header("content-type"), Some("text/html"));
    // No connection-specific fields on a stream.
    assert!(g.header("connection").is_none() && g.header("keep-alive").is_none());

    let g = curl(v.port, "/a.txt", &["-r", "2-4"]);
    assert_eq!((g.status, g.text().as_str()), (206, "234"));
    assert_eq!(g.header("content-range"), Some("bytes 2-4/20"));
    let g = curl(v.port, "/a.txt", &["-r", "0-1,5-6"]);
    assert_eq!(g.status, 206);
    assert!(
        g.header("content-type")
            .unwrap()
            .starts_with("multipart/byteranges")
    );
    assert!(g.text().contains("Content-Range: bytes 5-6/20\r\n\r\n56"));

    let etag = h2(v.port, "/a.txt").header("etag").unwrap().to_string();
    let g = curl(v.port, "/a.txt", &["-H", &format!("If-None-Match: {etag}")]);
    assert_eq!(g.status, 304);
    assert!(g.body.is_empty());

    let g = curl(v.port, "/big.bin", &["-I"]);
    assert_eq!(g.status, 200);
    assert_eq!(g.header("content-length"), Some("3000000"));
    assert!(g.body.is_empty());

    // 3 MB through 64 KiB stream windows.
    let g = h2(v.port, "/big.bin");
    assert_eq!(
        g.body,
        std::fs::read(v.dir.path().join("html/big.bin")).unwrap()
    );

    let g = h2(v.port, "/nothing");
    assert_eq!((g.status, g.text().as_str()), (404, "custom missing\n"));

    // HTTP/1 on the same address.
    let r = v.get("/a.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "0123456789abcdefghij"));
}

/// The streams of a connection read their files a turn of its writes at a
/// time: forty downloads of 3 MB side by side on one connection, past their
/// windows, all arrive whole; streams reset in the middle of theirs leave
/// the others and the streams opened after them their turns.
#[test]
fn large_downloads_side_by_side_on_one_connection() {
    if !h2::have_python_h2() {
        return;
    }
    let v = site();
    let file = v.dir.path().join("html/big.bin");
    let r = h2::script(
        &v,
        "downloads.py",
        &["40", "/big.bin", file.to_str().unwrap()],
    );
    assert_eq!(r.num("complete"), 40.0, "{}", r.0);
    // All forty logged before the next connection opens.
    let lines = access_lines(&v, 40);
    assert!(
        lines.iter().all(|l| l.ends_with("|HTTP/2.0|200|3000000|-")),
        "{lines:?}"
    );
    let r = h2::script(
        &v,
        "downloads.py",
        &["20", "/big.bin", file.to_str().unwrap(), "10"],
    );
    assert_eq!(
        (r.num("complete"), r.num("streams")),
        (20.0, 20.0),
        "{}",
        r.0
    );
}

/// A response that does not read the body (a `return`, a static file's
/// 405) goes at once, as nginx's: the client's body is not waited for. The
/// connection serves the next stream.
#[test]
fn a_response_that_leaves_the_body_unread_goes_at_once() {
    if !common::h2::have_python_h2() {
        return;
    }
    let v = site();
    for (path, status) in [("/which", "200"), ("/a.txt", "405")] {
        let r = common::h2::script(&v, "unread.py", &[path]);
        assert_eq!(
            r.get("statuses"),
            format!("{status},200"),
            "{path}: {}",
            r.0
        );
        assert!(r.num("answered_after") < 1.0, "{path}: {}", r.0);
    }
}

#[test]
fn http2_variable_names_the_protocol() {
    let v = site();
    assert_eq!(h2(v.port, "/which").text(), "[h2c]");
    assert_eq!(v.get("/which").text(), "[]");
}

#[test]
fn http1_only_listener_refuses_the_preface() {
    let v = Vireo::start(STATIC_CONF);
    let g = curl(v.port, "/", &[]);
    assert_ne!(g.exit, 0, "HTTP/2 spoken where it is off");
    assert_eq!(v.get("/").status, 403);
}

#[test]
fn routing_over_h2() {
    let v = site();
    let g = h2(v.port, "/old/thing");
    assert_eq!(
        (g.status, g.text().as_str()),
        (200, "new /new/thing HTTP/2.0\n")
    );
    let g = h2(v.port, "/gone");
    assert_eq!(g.status, 301);
    assert!(g.header("location").unwrap().ends_with("/new/x"));
    // `return 444`: the stream is reset, no answer.
    let g = curl(v.port, "/drop", &[]);
    assert_eq!(g.exit, 92, "curl exit for a reset stream");
    assert_eq!(g.status, 0);
    // A body over client_max_body_size: 413.
    for _ in 0..3 {
        let g = curl(v.port, "/small", &["--data-binary", &"x".repeat(5000)]);
        assert_eq!(g.status, 413, "{}", g.err);
    }
    let g = curl(v.port, "/small", &["--data-binary", "tiny"]);
    assert_eq!((g.status, g.text().as_str()), (200, "ok"));
}

#[test]
fn compression_over_h2() {
    let v = site();
    let g = curl(v.port, "/z/text.txt", &["-H", "Accept-Encoding: gzip"]);
    assert_eq!(g.status, 200);
    assert_eq!(g.header("content-encoding"), Some("gzip"));
    assert!(g.body.len() < 1000, "{} bytes", g.body.len());
    let g = curl(v.port, "/z/text.txt", &["--compressed"]);
    assert_eq!(g.text(), "compress me please ".repeat(1000));
}

#[test]
fn proxy_over_h2() {
    let v = site();
    let g = h2(v.port, "/up/big.bin");
    assert_eq!(g.status, 200);
    assert_eq!(
        g.body,
        std::fs::read(v.dir.path().join("html/big.bin")).unwrap()
    );
    let up = v.dir.write("up.txt", "b".repeat(200_000));
    let g = curl(
        v.port,
        "/up/echo",
        &["--data-binary", &format!("@{}", up.display())],
    );
    assert_eq!(
        (g.status, g.text().as_str()),
        (200, "len=200000 proto=HTTP/1.0")
    );
    // Read whole first: over client_body_buffer_size, into a file removed
    // with the request.
    let file = g.header("x-body-file").expect("a body file").to_string();
    assert!(file.contains("/client_body_temp/"), "{file}");
    assert!(eventually(5, || !std::path::Path::new(&file).exists()));
    let g = curl(v.port, "/up/echo", &["--data-binary", "small"]);
    assert_eq!(g.header("x-body"), Some("small"));
    assert_eq!(g.header("x-body-file"), None);
    // Streamed as it comes.
    let g = curl(
        v.port,
        "/upoff/echo",
        &["--data-binary", &format!("@{}", up.display())],
    );
    assert_eq!(
        (g.status, g.text().as_str()),
        (200, "len=200000 proto=HTTP/1.0")
    );
}

#[test]
fn access_log_and_cookies() {
    let v = site();
    let g = curl(
        v.port,
        "/a.txt?q=1",
        &["-H", "Cookie: a=1", "-H", "Cookie: b=2"],
    );
    assert_eq!(g.status, 200);
    let line = "GET /a.txt?q=1 HTTP/2.0|HTTP/2.0|200|20|a=1; b=2";
    assert!(
        eventually(5, || v.dir.read("logs/access.log").contains(line)),
        "{}",
        v.dir.read("logs/access.log")
    );
}

/// stub_status counts each stream as a request (and as writing while it runs).
#[test]
fn status_counts_streams() {
    let v = site();
    let requests = |g: &Got| -> u64 {
        let text = g.text();
        let line = text.lines().nth(2).unwrap().to_string();
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let before = requests(&h2(v.port, "/status"));
    for _ in 0..3 {
        assert_eq!(h2(v.port, "/a.txt").status, 200);
    }
    let g = h2(v.port, "/status");
    assert_eq!(requests(&g), before + 4, "{}", g.text());
    assert!(g.text().contains("Writing: 1 "), "{}", g.text());
}

#[test]
fn fastcgi_over_h2() {
    let Some(fpm) = Fpm::start(2) else { return };
    let dir = TempDir::new("h2fcgi");
    dir.write(
        "html/echo.php",
        "<?php echo $_SERVER['REQUEST_METHOD'], ' ', $_SERVER['QUERY_STRING'], ' ', $_SERVER['SERVER_PROTOCOL'], ' ', $_SERVER['HTTP_HOST'];",
    );
    dir.write(
        "html/input.php",
        "<?php $b = file_get_contents('php://input'); echo strlen($b), ' ', md5($b);",
    );
    dir.write(
        "html/big.php",
        "<?php $s = str_repeat('x', 65536); for ($i = 0; $i < 64; $i++) { echo $s; flush(); }",
    );
    let conf = format!(
        "events {{}}
http {{
    access_log off;
    server {{
        listen 127.0.0.1:{{port}} http2;
        root {{dir}}/html;
        location ~ \\.php$ {{
            fastcgi_pass 127.0.0.1:{};
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_param QUERY_STRING $query_string;
            fastcgi_param REQUEST_METHOD $request_method;
            fastcgi_param CONTENT_LENGTH $content_length;
            fastcgi_param SERVER_PROTOCOL $server_protocol;
            fastcgi_param HTTP_HOST $host;
            client_max_body_size 10m;
        }}
    }}
}}",
        fpm.port
    );
    let v = Vireo::start_in(dir, &conf);
    let g = h2(v.port, "/echo.php?a=1");
    assert_eq!(
        (g.status, g.text().as_str()),
        (200, "GET a=1 HTTP/2.0 127.0.0.1")
    );
    // 1 MB up through 64 KiB windows, reopened as vireo forwards it.
    let body: String = (0..1_000_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let path = v.dir.write("up.bin", &body);
    let g = curl(
        v.port,
        "/input.php",
        &["--data-binary", &format!("@{}", path.display())],
    );
    assert_eq!(g.status, 200);
    let md5 = Command::new("md5sum").arg(&path).output().unwrap();
    let md5 = String::from_utf8_lossy(&md5.stdout);
    assert_eq!(
        g.text(),
        format!("1000000 {}", md5.split(' ').next().unwrap())
    );
    let g = h2(v.port, "/big.php");
    assert_eq!(g.body.len(), 64 * 65536);
}

#[test]
fn directives() {
    let dir = TempDir::new("h2conf");
    let out = test_conf(
        &dir,
        "events {} http { access_log off; http2_idle_timeout 3m; http2_max_field_size 4k; server { listen 127.0.0.1:1; http2 on; http2_max_concurrent_streams 8; http2_chunk_size 16k; http2_body_preread_size 0; } }",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("\"http2_idle_timeout\" directive is ignored"),
        "{err}"
    );
    let out = test_conf(
        &dir,
        "events {} http { access_log off; server { listen 127.0.0.1:1; http2_max_concurrent_streams 0; } }",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("t.conf:1"), "{err}");
}

/// A server for the drain scripts (tests/h2/drain.py): keepalive_timeout far
/// longer than any bound checked, so a close is the drain's doing.
fn drain_site(second: &str) -> Vireo {
    let dir = TempDir::new("h2drain");
    dir.write("html/a.txt", "0123456789");
    dir.write("html/big.bin", vec![b'b'; 256 << 10]);
    Vireo::start_in(
        dir,
        &format!(
            "worker_processes 1;\nerror_log logs/error.log info;\nevents {{}}\nhttp {{\n access_log off;\n \
             keepalive_timeout 60s;\n server {{\n  listen 127.0.0.1:{{port}} http2;\n  {second}\n  root {{dir}}/html;\n }}\n}}\n"
        ),
    )
}

/// The first stream is waited for at least as long as client_header_timeout,
/// even with keepalive_timeout 0: it is answered, then the connection ends
/// with GOAWAY (keepalive_timeout is the wait between streams).
#[test]
fn keepalive_timeout_0_serves_the_first_stream() {
    if !common::h2::have_python_h2() {
        return;
    }
    let dir = TempDir::new("h2ka0");
    dir.write("html/a.txt", "0123456789");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n keepalive_timeout 0;\n server {\n  \
         listen 127.0.0.1:{port} http2;\n  root {dir}/html;\n }\n}\n",
    );
    let r = common::h2::script(&v, "late.py", &["0.3"]);
    assert_eq!(r.get("statuses"), "200", "{}", r.0);
    assert!(r.goaway(0), "{}", r.0);
}

/// SIGQUIT: an idle HTTP/2 connection gets GOAWAY(NO_ERROR) at once (not at
/// its keepalive_timeout) and is closed, and the server exits.
#[test]
fn graceful_stop_sends_goaway_to_idle_connections() {
    if !common::h2::have_python_h2() {
        return;
    }
    let mut v = drain_site("");
    let pid = v.pid().to_string();
    let r = common::h2::script(&v, "drain.py", &[&pid, "QUIT", "idle"]);
    eprintln!("{}", r.0);
    assert!(r.goaway(0), "{}", r.0);
    assert!(r.num("goaway_after") < 1.0, "{}", r.0);
    assert!(r.num("closed_after") < 1.5, "{}", r.0);
    assert!(v.wait_exit(5).is_some(), "the server did not exit");
}

/// SIGQUIT with a stream in flight: GOAWAY while it is open, the stream then
/// finishes (all of its body) before the close, and the server exits.
#[test]
fn graceful_stop_lets_streams_in_flight_finish() {
    if !common::h2::have_python_h2() {
        return;
    }
    let mut v = drain_site("");
    let pid = v.pid().to_string();
    let r = common::h2::script(&v, "drain.py", &[&pid, "QUIT", "busy"]);
    eprintln!("{}", r.0);
    assert!(r.goaway(0), "{}", r.0);
    assert!(r.num("goaway_after") < 1.0, "{}", r.0);
    assert_eq!(
        r.get("stalled"),
        "1",
        "GOAWAY before the stream ended: {}",
        r.0
    );
    assert_eq!(r.get("ended"), "1", "{}", r.0);
    assert_eq!(r.num("body"), (256 << 10) as f64, "{}", r.0);
    assert!(v.wait_exit(5).is_some(), "the server did not exit");
}

/// A reload that removes the connection's address: GOAWAY at once and the
/// close, as for a drain (HTTP/1 closes after its next response instead).
#[test]
fn reload_removing_the_address_sends_goaway() {
    if !common::h2::have_python_h2() {
        return;
    }
    let v = drain_site("listen 127.0.0.1:{port2};");
    let conf = v.dir.read("vireo.conf");
    let main = format!("listen 127.0.0.1:{} http2;", v.port);
    assert!(conf.contains(&main));
    std::fs::write(v.dir.path().join("vireo.conf"), conf.replace(&main, "")).unwrap();
    let pid = v.pid().to_string();
    let r = common::h2::script(&v, "drain.py", &[&pid, "HUP", "idle"]);
    eprintln!("{}", r.0);
    assert!(r.goaway(0), "{}", r.0);
    assert!(r.num("goaway_after") < 1.5, "{}", r.0);
    assert!(r.get("closed") == "1", "{}", r.0);
}

#[test]
fn trailers_over_h2() {
    let dir = TempDir::new("h2-trailers");
    dir.write("html/t", "SEE-THIS");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port} http2;\n  \
         root {dir}/html;\n  add_trailer X-Var $host;\n  add_trailer X-Always yes always;\n }\n}\n",
    );
    // curl does not show trailers: the Python h2 client lists the events.
    const CLIENT: &str = r#"
import socket, sys, h2.connection, h2.events
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
c = h2.connection.H2Connection()
c.initiate_connection()
c.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":path", sys.argv[2]), (":authority", "localhost")], end_stream=True)
s.sendall(c.data_to_send())
done = False
while not done:
    d = s.recv(65535)
    if not d:
        break
    for e in c.receive_data(d):
        if isinstance(e, h2.events.DataReceived):
            print("data", e.data.decode())
        if isinstance(e, h2.events.TrailersReceived):
            print("trailers", [(n.decode(), v.decode()) for n, v in e.headers])
        if isinstance(e, h2.events.StreamEnded):
            done = True
    s.sendall(c.data_to_send())
"#;
    let events = |path: &str| {
        let out = Command::new("python3")
            .args(["-c", CLIENT, &v.port.to_string(), path])
            .output()
            .expect("python3 runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(
        events("/t"),
        "data SEE-THIS\ntrailers [('x-var', 'localhost'), ('x-always', 'yes')]\n"
    );
    let got = events("/missing");
    assert!(got.ends_with("trailers [('x-always', 'yes')]\n"), "{got}");
}

/// A file body is read no further than the stream's window: what is left
/// when the window is spent goes out in one DATA frame once the client opens
/// the window again (nginx's order of frames, which h2_priority.t checks).
#[test]
fn file_past_the_window_ends_in_one_frame_after_a_window_update() {
    let dir = TempDir::new("h2-window");
    dir.write("html/big", vec![b'x'; 65_535 + 81]);
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port} http2;\n  \
         root {dir}/html;\n }\n}\n",
    );
    const CLIENT: &str = r#"
import socket, sys, h2.connection, h2.events, h2.config
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
c.initiate_connection()
c.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":path", "/big"), (":authority", "localhost")], end_stream=True)
s.sendall(c.data_to_send())
got, opened, ended = 0, False, False
while not ended:
    d = s.recv(65535)
    if not d:
        break
    for e in c.receive_data(d):
        if isinstance(e, h2.events.DataReceived):
            got += len(e.data)
            if opened:
                print("after", len(e.data))
        if isinstance(e, h2.events.StreamEnded):
            ended = True
    if got == 65535 and not opened:
        # The stream's window is spent: open it (and the connection's).
        opened = True
        print("window spent")
        c.increment_flow_control_window(65536, stream_id=1)
        c.increment_flow_control_window(65536)
    s.sendall(c.data_to_send())
"#;
    let out = Command::new("python3")
        .args(["-c", CLIENT, &v.port.to_string()])
        .output()
        .expect("python3 runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "window spent\nafter 81\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
