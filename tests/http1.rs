//! HTTP/1.x protocol handling against the real binary: keep-alive, pipelining,
//! HEAD, request bodies, 100-continue, standard headers, strict parsing and
//! limits, and every connection timeout.

mod common;
use common::*;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const CONF: &str = STATIC_CONF;

/// A server from `CONF` (plus `extra` at http level) with a few files in html/.
fn server(extra: &str) -> Vireo {
    let dir = TempDir::new("h1");
    dir.write("html/a.txt", "hello");
    dir.write("html/b.txt", "bravo!");
    dir.write("html/index.html", "<p>index</p>");
    dir.write("html/big.bin", pattern(200_000));
    let conf = CONF.replace("access_log off;", &format!("access_log off;\n{extra}"));
    Vireo::start_in(dir, &conf)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// One client connection with its own read buffer, for responses read one by one.
struct Client {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    fn new(v: &Vireo) -> Client {
        Client {
            s: v.connect(),
            buf: Vec::new(),
        }
    }

    fn send(&mut self, data: impl AsRef<[u8]>) {
        self.s.write_all(data.as_ref()).unwrap();
    }

    /// Read more into the buffer; false on EOF, error or timeout.
    fn fill(&mut self) -> bool {
        let mut b = [0u8; 65536];
        match self.s.read(&mut b) {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&b[..n]);
                true
            }
        }
    }

    /// Read exactly one response; `head_req` when it answers a HEAD (no body).
    fn response(&mut self, head_req: bool) -> Resp {
        let end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            assert!(
                self.fill(),
                "connection ended before a full head: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        };
        let mut r = Resp::parse(&self.buf[..end]).expect("a response head");
        let len = if head_req || r.status == 304 || r.status == 204 || r.status < 200 {
            0
        } else {
            r.header("content-length")
                .expect("content-length")
                .parse::<usize>()
                .unwrap()
        };
        while self.buf.len() < end + len {
            assert!(self.fill(), "connection ended in a body");
        }
        r.body = self.buf[end..end + len].to_vec();
        self.buf.drain(..end + len);
        r
    }

    /// True when the server closes (EOF or reset) within `within` without
    /// sending anything more.
    fn closed_within(&mut self, within: Duration) -> bool {
        self.s.set_read_timeout(Some(within)).unwrap();
        if !self.buf.is_empty() {
            return false;
        }
        let mut b = [0u8; 4096];
        match self.s.read(&mut b) {
            Ok(0) => true,
            Ok(n) => panic!("unexpected bytes: {:?}", String::from_utf8_lossy(&b[..n])),
            Err(e) => e.kind() == ErrorKind::ConnectionReset,
        }
    }
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
}

// ---------------------------------------------------------------- keep-alive

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let v = server("");
    let mut c = Client::new(&v);
    for i in 0..5 {
        let path = if i % 2 == 0 { "/a.txt" } else { "/b.txt" };
        c.send(get(path));
        let r = c.response(false);
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), if i % 2 == 0 { "hello" } else { "bravo!" });
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
    // A 404 does not end the connection either.
    c.send(get("/missing"));
    assert_eq!(c.response(false).status, 404);
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).text(), "hello");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let v = server("");
    let mut c = Client::new(&v);
    let mut batch = String::new();
    batch += &get("/a.txt");
    batch += "HEAD /b.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";
    batch += &get("/missing");
    batch += &get("/big.bin");
    batch += &get("/b.txt");
    batch += "GET /a.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    c.send(batch);
    let a = c.response(false);
    assert_eq!((a.status, a.text().as_str()), (200, "hello"));
    let h = c.response(true);
    assert_eq!(h.status, 200);
    assert_eq!(h.header("content-length"), Some("6"));
    let m = c.response(false);
    assert_eq!(m.status, 404);
    let big = c.response(false);
    assert_eq!(big.status, 200);
    assert!(big.body == pattern(200_000), "big body intact");
    let b = c.response(false);
    assert_eq!((b.status, b.text().as_str()), (200, "bravo!"));
    let last = c.response(false);
    assert_eq!((last.status, last.text().as_str()), (200, "hello"));
    assert_eq!(last.header("connection"), Some("close"));
    assert!(
        c.closed_within(Duration::from_secs(5)),
        "closed after Connection: close"
    );
}

#[test]
fn pipelined_requests_split_across_writes() {
    let v = server("");
    let mut c = Client::new(&v);
    let all = format!("{}{}{}", get("/a.txt"), get("/b.txt"), get("/a.txt"));
    // Cut in the middle of the second request line and of the third head.
    let (x, rest) = all.split_at(all.len() / 2 - 3);
    let (y, z) = rest.split_at(rest.len() - 7);
    for part in [x, y, z] {
        c.send(part);
        std::thread::sleep(Duration::from_millis(30));
    }
    assert_eq!(c.response(false).text(), "hello");
    assert_eq!(c.response(false).text(), "bravo!");
    assert_eq!(c.response(false).text(), "hello");
}

#[test]
fn head_has_headers_and_length_but_no_body() {
    let v = server("");
    let mut c = Client::new(&v);
    c.send("HEAD /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let r = c.response(true);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("200000"));
    assert!(r.header("last-modified").is_some());
    assert!(r.header("etag").is_some());
    // The very next bytes are the next response: no body was sent.
    c.send(get("/a.txt"));
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "hello"));
    // HEAD of a missing file: 404 head without the HTML page.
    c.send("HEAD /nope HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let r = c.response(true);
    assert_eq!(r.status, 404);
    assert!(
        c.closed_within(Duration::from_secs(5)),
        "no error page body after HEAD"
    );
}

#[test]
fn connection_close_is_honoured() {
    let v = server("");
    let mut c = Client::new(&v);
    c.send("GET /a.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.text(), "hello");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(5)));
}

#[test]
fn http10_closes_by_default_and_keeps_alive_on_request() {
    let v = server("");
    let mut c = Client::new(&v);
    c.send("GET /a.txt HTTP/1.0\r\n\r\n");
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "hello"));
    // Answered as HTTP/1.1, the highest version we conform to (RFC 9110 §6.2), as nginx.
    assert!(r.head.starts_with("HTTP/1.1 200 OK\r\n"), "{}", r.head);
    assert_ne!(r.header("connection"), Some("keep-alive"));
    assert!(
        c.closed_within(Duration::from_secs(5)),
        "HTTP/1.0 closes by default"
    );

    let mut c = Client::new(&v);
    c.send("GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    c.send("GET /b.txt HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    let r = c.response(false);
    assert_eq!(r.text(), "bravo!");
    c.send("GET /a.txt HTTP/1.0\r\n\r\n");
    assert_eq!(c.response(false).text(), "hello");
    assert!(c.closed_within(Duration::from_secs(5)));
}

#[test]
fn http09_simple_requests_get_the_body_alone_as_nginx() {
    let v = server("");
    // The line alone is the request: the body, no status line or fields,
    // then the connection closes (what follows is never read as a request).
    let mut c = Client::new(&v);
    c.send("GET /a.txt\r\nGET /b.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    while c.fill() {}
    assert_eq!(String::from_utf8_lossy(&c.buf), "hello");
    assert_eq!(v.raw(b"GET /b.txt\n"), b"bravo!");
    // Errors too: the error page's body alone.
    let nf = String::from_utf8_lossy(&v.raw(b"GET /none\n")).into_owned();
    assert!(
        nf.starts_with("<!DOCTYPE html>") && nf.contains("404 Not Found"),
        "{nf}"
    );
    // Only GET; no gzip (as gzip_http_version 1.1 wants).
    refused(&v, b"POST /a.txt\r\n\r\n", &[400]);
    let v = server("gzip on; gzip_min_length 1; gzip_types text/plain;");
    assert_eq!(v.raw(b"GET /a.txt\n"), b"hello");
}

// ---------------------------------------------------------------- bodies

#[test]
fn content_length_body_is_discarded_and_connection_reused() {
    let v = server("");
    let mut c = Client::new(&v);
    // Body in the same write as the head.
    c.send("GET /a.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 11\r\n\r\nhello world");
    assert_eq!(c.response(false).text(), "hello");
    // Body arriving later, in pieces; POST to a static file is 405.
    c.send("POST /a.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 20000\r\n\r\n");
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(20));
        c.send([b'x'; 5000]);
    }
    let r = c.response(false);
    assert_eq!(r.status, 405);
    // The body bytes were not taken as a request.
    c.send(get("/b.txt"));
    let r = c.response(false);
    assert_eq!((r.status, r.text().as_str()), (200, "bravo!"));
}

#[test]
fn chunked_body_is_discarded_and_connection_reused() {
    let v = server("");
    let mut c = Client::new(&v);
    c.send(
        "POST /a.txt HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\nhello\r\n6;name=val\r\n world\r\nA\r\n0123456789\r\n",
    );
    std::thread::sleep(Duration::from_millis(30));
    c.send("0\r\nX-Trailer: t\r\n\r\n");
    assert_eq!(c.response(false).status, 405);
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).text(), "hello");
    // Chunked GET, pipelined with the next request.
    c.send(format!(
        "GET /b.txt HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n{}",
        get("/a.txt")
    ));
    assert_eq!(c.response(false).text(), "bravo!");
    assert_eq!(c.response(false).text(), "hello");
}

#[test]
fn expect_100_continue_gets_interim_response() {
    let v = server("");
    let mut c = Client::new(&v);
    c.send("POST /a.txt HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    let interim = c.response(false);
    assert_eq!(interim.status, 100);
    assert!(
        interim.head.starts_with("HTTP/1.1 100 Continue\r\n"),
        "{}",
        interim.head
    );
    c.send("hello");
    assert_eq!(c.response(false).status, 405);
    // With chunked framing too, and the connection still works.
    c.send("PUT /a.txt HTTP/1.1\r\nHost: localhost\r\nExpect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(c.response(false).status, 100);
    c.send("3\r\nabc\r\n0\r\n\r\n");
    assert_eq!(c.response(false).status, 405);
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).text(), "hello");
}

#[test]
fn expect_100_continue_without_a_body_as_nginx() {
    // nginx sends the 100 whenever the body is read or discarded, an empty
    // one too; HTTP/1.0 never gets one.
    let v = server("");
    let raw = v.raw(b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"),
        "{text}"
    );
    assert!(text.ends_with("hello"), "{text}");
    let raw = v.raw(b"GET /a.txt HTTP/1.0\r\nExpect: 100-continue\r\n\r\n");
    assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200 OK\r\n"));
}

// ---------------------------------------------------------------- headers

#[test]
fn date_and_server_headers() {
    let v = server("");
    let r = v.get("/a.txt");
    let server = r.header("server").expect("Server header");
    assert!(server.starts_with("vireo/"), "{server}");
    let date = r.header("date").expect("Date header");
    let t = httpdate::parse_http_date(date).expect("an IMF-fixdate");
    let now = std::time::SystemTime::now();
    let skew = now.duration_since(t).unwrap_or_else(|e| e.duration());
    assert!(
        skew < Duration::from_secs(3),
        "Date {date} is off by {skew:?}"
    );
    assert!(date.ends_with(" GMT"), "{date}");
    // Error pages name the version too.
    let r = v.get("/missing");
    assert!(r.text().contains("vireo/"), "{}", r.text());
}

#[test]
fn server_tokens_off_hides_the_version() {
    let v = server("server_tokens off;");
    let r = v.get("/a.txt");
    assert_eq!(r.header("server"), Some("vireo"));
    let r = v.get("/missing");
    assert_eq!(r.header("server"), Some("vireo"));
    assert!(!r.text().contains("vireo/"), "{}", r.text());
    // Requests refused by the parser follow the setting too.
    let r = v.request("GET / HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 400);
    assert_eq!(r.header("server"), Some("vireo"));
    assert!(!r.text().contains("vireo/"), "{}", r.text());
    // on (the default) and build show the version, in the header and on error pages.
    for conf in ["", "server_tokens on;", "server_tokens build;"] {
        let v = server(conf);
        let version = format!("vireo/{}", env!("CARGO_PKG_VERSION"));
        assert_eq!(v.get("/a.txt").header("server"), Some(version.as_str()));
        assert!(v.get("/missing").text().contains(&version), "{conf}");
    }
}

// ---------------------------------------------------------------- strict parsing

#[test]
fn smuggling_framing_is_refused() {
    let v = server("");
    let cases: &[(&[u8], &[u16])] = &[
        // TE + CL, in both orders.
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n", &[400]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", &[400]),
        // Duplicate Content-Length, equal or not.
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", &[400]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\ncontent-length: 4\r\n\r\nabcd", &[400]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\nabc", &[400]),
        // Signed, hex, inner spaces.
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc", &[400]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: -3\r\n\r\nabc", &[400]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3\r\n\r\nabc", &[400]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1 2\r\n\r\nabc", &[400]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: \r\n\r\nabc", &[400]),
        // Transfer-Encoding not ending in chunked, or unknown.
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", &[400, 501]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", &[400, 501]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n", &[400, 501]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", &[400, 501]),
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", &[400, 501]),
        // TE on HTTP/1.0.
        (b"POST /a.txt HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", &[400]),
        // Content-Length of 2^64.
        (b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551616\r\n\r\n", &[400]),
    ];
    for (req, codes) in cases {
        refused(&v, req, codes);
    }
}

#[test]
fn malformed_heads_are_refused() {
    let v = server("");
    let cases: &[(&[u8], &[u16])] = &[
        // obs-fold.
        (
            b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
            &[400],
        ),
        (
            b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n",
            &[400],
        ),
        // Whitespace before the colon.
        (b"GET /a.txt HTTP/1.1\r\nHost : x\r\n\r\n", &[400]),
        (
            b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length : 0\r\n\r\n",
            &[400],
        ),
        // A bare CR (a bare LF ends a line, as in nginx).
        (
            b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
            &[400],
        ),
        (b"GET /a.txt HTTP/1.1\rHost: x\r\n\r\n", &[400]),
        // NUL in the request line and in a header value.
        (b"GET /a\0.txt HTTP/1.1\r\nHost: x\r\n\r\n", &[400]),
        (
            b"GET /a.txt HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n",
            &[400],
        ),
        // Host rules.
        (b"GET /a.txt HTTP/1.1\r\n\r\n", &[400]),
        (b"GET /a.txt HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", &[400]),
        (b"GET /a.txt HTTP/1.1\r\nHost: x\r\nHost: x\r\n\r\n", &[400]),
        // Versions.
        (b"GET /a.txt HTTP/2.0\r\nHost: x\r\n\r\n", &[505]),
        (b"GET /a.txt HTTP/3.0\r\nHost: x\r\n\r\n", &[505]),
        (b"GET /a.txt FOO/1.1\r\nHost: x\r\n\r\n", &[400]),
        // Garbage request lines.
        (b"GET\r\nHost: x\r\n\r\n", &[400]),
        (b"GET  /a.txt HTTP/1.1\r\nHost: x\r\n\r\n", &[400]),
        (b"GET a.txt HTTP/1.1\r\nHost: x\r\n\r\n", &[400]),
        // A space inside the target is a bad request line, not a bad version.
        (b"GET /a b.txt HTTP/1.1\r\nHost: x\r\n\r\n", &[400]),
        (b"GET /a.txt HTTP/1.1 extra\r\nHost: x\r\n\r\n", &[400]),
        (b"G(T /a.txt HTTP/1.1\r\nHost: x\r\n\r\n", &[400]),
        // %00 in the path.
        (b"GET /a.txt%00.html HTTP/1.1\r\nHost: x\r\n\r\n", &[400]),
        (b"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", &[400]),
    ];
    for (req, codes) in cases {
        refused(&v, req, codes);
    }
}

#[test]
fn a_bare_lf_ends_head_lines_as_in_nginx() {
    let v = server("");
    // Two pipelined requests written with bare LFs, as nginx's test suite and
    // hand-typed clients send them; the second closes.
    let raw = v.raw(
        b"GET /a.txt HTTP/1.1\nHost: x\n\nHEAD /a.txt HTTP/1.0\nHost: x\r\nConnection: close\n\n",
    );
    let rs = Resp::parse_all(&raw);
    assert_eq!(rs.len(), 2, "{}", String::from_utf8_lossy(&raw));
    assert_eq!(rs[0].status, 200);
    assert_eq!(rs[1].status, 200);
    // A bare CR stays a bad request.
    refused(&v, b"GET /a.txt HTTP/1.1\nHost: x\rY\n\n", &[400]);
}

#[test]
fn bad_chunk_sizes_are_refused() {
    let v = server("");
    for chunks in [
        &b"0_2e\r\n\r\n"[..],
        b"-1\r\nx\r\n0\r\n\r\n",
        b"fffffffffffffffff\r\nx\r\n0\r\n\r\n",
        b"10000000000000000\r\nx\r\n0\r\n\r\n",
        b"0x5\r\nhello\r\n0\r\n\r\n",
        b"5 5\r\nhello\r\n0\r\n\r\n",
        b"\r\n0\r\n\r\n",
        b"3\rabc\r\n0\r\n\r\n",
        b"3\r\nabcXX0\r\n\r\n",
        b"3\r\nabc\r\n0\r\nX: a\rb\r\n\r\n",
    ] {
        let mut req =
            b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        req.extend_from_slice(chunks);
        refused(&v, &req, &[400]);
    }
}

#[test]
fn long_uri_is_414() {
    let v = server("");
    // Default large_client_header_buffers 4 8k.
    let long = format!("/{}", "a".repeat(9000));
    refused(
        &v,
        format!("GET {long} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        &[414],
    );
    // Below the limit: an ordinary 404.
    let ok = format!("/{}", "a".repeat(7000));
    assert_eq!(v.get(&ok).status, 404);

    let v = server("large_client_header_buffers 2 1k;");
    let long = format!("/{}", "a".repeat(1100));
    refused(
        &v,
        format!("GET {long} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        &[414],
    );
    let ok = format!("/{}", "a".repeat(900));
    assert_eq!(v.get(&ok).status, 404);
}

#[test]
fn huge_or_many_headers_are_refused() {
    let v = server("");
    let line = format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(10_000)
    );
    refused(&v, line.as_bytes(), &[431, 400]);
    let mut many = String::from("GET /a.txt HTTP/1.1\r\nHost: x\r\n");
    for i in 0..300 {
        many += &format!("X-H-{i}: v\r\n");
    }
    many += "\r\n";
    refused(&v, many.as_bytes(), &[431, 400]);
    // Total head bigger than 4 × 8k with every line short.
    let mut total = String::from("GET /a.txt HTTP/1.1\r\nHost: x\r\n");
    for i in 0..5 {
        total += &format!("X-{i}: {}\r\n", "c".repeat(7000));
    }
    total += "\r\n";
    refused(&v, total.as_bytes(), &[431, 400]);
    // A moderately large header is fine.
    let r = v.request(&format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "b".repeat(4000)
    ));
    assert_eq!(r.status, 200);
}

/// client_header_buffer_size and large_client_header_buffers as nginx applies
/// them: a head that fits the first buffer may have lines of any length; a
/// line past it must fit one large buffer (request line: 414, header: 4xx);
/// the whole head must fit the large buffers.
#[test]
fn client_header_buffer_size_and_large_client_header_buffers() {
    let v = server("client_header_buffer_size 8k; large_client_header_buffers 2 1k;");
    let long_query = "q".repeat(6000);
    let r = v.get(&format!("/a.txt?{long_query}"));
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello");
    let r = v.request(&format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Long: {long_query}\r\nConnection: close\r\n\r\n"
    ));
    assert_eq!(r.status, 200);
    // Past the first 8k, a 1,500-byte line does not fit a 1k buffer.
    let pad = "p".repeat(7000);
    let line = "l".repeat(1500);
    let req = format!("GET /a.txt HTTP/1.1\r\nHost: x\r\nX-Pad: {pad}\r\nX-Line: {line}\r\n\r\n");
    refused(&v, req.as_bytes(), &[431, 400]);
    let req = format!(
        "GET /a.txt?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "u".repeat(9000)
    );
    refused(&v, req.as_bytes(), &[414]);

    // The defaults (1k, 4 8k): an 8k request line is the most a head may carry.
    let v = server("client_header_buffer_size 1k; large_client_header_buffers 4 8k;");
    let r = v.get(&format!("/a.txt?{}", "q".repeat(8000)));
    assert_eq!(r.status, 200);
    let req = format!(
        "GET /a.txt?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "u".repeat(8200)
    );
    refused(&v, req.as_bytes(), &[414]);
    // A small large_client_header_buffers refuses what the defaults take.
    let v = server("large_client_header_buffers 4 1k;");
    let req = format!(
        "GET /a.txt?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "u".repeat(2000)
    );
    refused(&v, req.as_bytes(), &[414]);
    let req = format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n",
        "h".repeat(2000)
    );
    refused(&v, req.as_bytes(), &[431, 400]);
}

#[test]
fn body_over_client_max_body_size_is_413() {
    let v = server("client_max_body_size 1k;");
    refused(
        &v,
        b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n",
        &[413],
    );
    refused(
        &v,
        b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2147483648\r\n\r\n",
        &[413],
    );
    // Chunked: the limit applies to the decoded size as it arrives.
    let mut req = b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        req.extend_from_slice(b"200\r\n");
        req.extend_from_slice(&[b'z'; 512]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    refused(&v, &req, &[413]);
    // At the limit: accepted, connection kept.
    let mut c = Client::new(&v);
    c.send(format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n{}",
        "q".repeat(1024)
    ));
    assert_eq!(c.response(false).text(), "hello");
    c.send(get("/b.txt"));
    assert_eq!(c.response(false).text(), "bravo!");
}

#[test]
fn default_body_limit_is_one_megabyte() {
    let v = server("");
    refused(
        &v,
        b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 1048577\r\n\r\n",
        &[413],
    );
}

// ---------------------------------------------------------------- timeouts

/// Seconds until the server closes `s` (EOF or reset), reading and ignoring data;
/// None if it stays open for `limit`.
fn secs_until_closed(s: &mut TcpStream, limit: Duration) -> Option<f64> {
    let t = Instant::now();
    let mut b = [0u8; 65536];
    loop {
        let left = limit.checked_sub(t.elapsed())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut b) {
            Ok(0) => return Some(t.elapsed().as_secs_f64()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                return Some(t.elapsed().as_secs_f64());
            }
            Err(_) => return None,
        }
    }
}

#[test]
fn client_header_timeout_closes_a_stalled_head() {
    let v = server("client_header_timeout 1s;");
    let mut s = v.connect();
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\n").unwrap();
    let secs = secs_until_closed(&mut s, Duration::from_secs(5)).expect("closed");
    assert!((0.8..3.0).contains(&secs), "closed after {secs}s");
    // A connection that sends nothing at all is closed too.
    let mut s = v.connect();
    let secs = secs_until_closed(&mut s, Duration::from_secs(5)).expect("closed");
    assert!((0.8..3.0).contains(&secs), "closed after {secs}s");
}

#[test]
fn client_header_timeout_is_not_reset_by_a_trickle() {
    // Slowloris: one byte at a time keeps arriving, but the head as a whole
    // must be complete within client_header_timeout.
    let v = server("client_header_timeout 1s;");
    let mut s = v.connect();
    let t = Instant::now();
    let mut closed = false;
    for b in b"GET /a.txt HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
        if s.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if t.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    if !closed {
        closed = secs_until_closed(&mut s, Duration::from_secs(3)).is_some();
    }
    assert!(closed, "slow head still open after {:?}", t.elapsed());
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "took {:?}",
        t.elapsed()
    );
}

#[test]
fn keepalive_timeout_closes_idle_connection() {
    let v = server("keepalive_timeout 1s;");
    let mut c = Client::new(&v);
    c.send(get("/a.txt"));
    let r = c.response(false);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    let secs = secs_until_closed(&mut c.s, Duration::from_secs(5)).expect("closed");
    assert!((0.8..3.0).contains(&secs), "closed after {secs}s");
}

/// keepalive_timeout's second value is announced as `Keep-Alive: timeout=N`
/// on responses that keep the connection (not on the last one), as nginx
/// does; without it, or with 0, no such header.
#[test]
fn keepalive_timeout_header_value() {
    let v = server("keepalive_timeout 1s 30; keepalive_requests 2;");
    let mut c = Client::new(&v);
    c.send(get("/a.txt"));
    let r = c.response(false);
    assert_eq!(r.header("connection"), Some("keep-alive"));
    assert_eq!(r.header("keep-alive"), Some("timeout=30"));
    c.send(get("/a.txt"));
    let r = c.response(false);
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.header("keep-alive"), None);
    // The connection still closes after the first value, not the header's.
    let mut c = Client::new(&v);
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).header("keep-alive"), Some("timeout=30"));
    let secs = secs_until_closed(&mut c.s, Duration::from_secs(5)).expect("closed");
    assert!((0.8..3.0).contains(&secs), "closed after {secs}s");
    for conf in ["keepalive_timeout 10s;", "keepalive_timeout 10s 0;"] {
        let v = server(conf);
        let mut c = Client::new(&v);
        c.send(get("/a.txt"));
        let r = c.response(false);
        assert_eq!(r.header("connection"), Some("keep-alive"), "{conf}");
        assert_eq!(r.header("keep-alive"), None, "{conf}");
    }
}

#[test]
fn keepalive_timeout_zero_disables_keep_alive() {
    let v = server("keepalive_timeout 0;");
    let mut c = Client::new(&v);
    c.send(get("/a.txt"));
    let r = c.response(false);
    assert_eq!(r.text(), "hello");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(3)));
}

#[test]
fn keepalive_requests_limits_requests_per_connection() {
    let v = server("keepalive_requests 3;");
    let mut c = Client::new(&v);
    for i in 1..=3 {
        c.send(get("/a.txt"));
        let r = c.response(false);
        assert_eq!(r.text(), "hello");
        let want = if i < 3 { "keep-alive" } else { "close" };
        assert_eq!(r.header("connection"), Some(want), "response {i}");
    }
    assert!(c.closed_within(Duration::from_secs(3)));
    // Pipelined: the 4th request is not answered.
    let mut c = Client::new(&v);
    c.send(get("/a.txt").repeat(4));
    for _ in 0..3 {
        assert_eq!(c.response(false).status, 200);
    }
    assert!(c.closed_within(Duration::from_secs(3)));
}

#[test]
fn keepalive_time_closes_an_old_connection_after_its_request() {
    let v = server("keepalive_time 1s;");
    let mut c = Client::new(&v);
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).header("connection"), Some("keep-alive"));
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).header("connection"), Some("keep-alive"));
    std::thread::sleep(Duration::from_millis(1300));
    // Older than keepalive_time: answered, then closed.
    c.send(get("/a.txt"));
    let r = c.response(false);
    assert_eq!(r.text(), "hello");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed_within(Duration::from_secs(3)));
}

/// The request's location decides how long the connection then waits idle.
#[test]
fn keepalive_timeout_of_the_location() {
    let dir = TempDir::new("h1-kt");
    dir.write("html/a.txt", "hello");
    dir.write("html/long/a.txt", "hello");
    let v = Vireo::start_in(
        dir,
        "events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        keepalive_timeout 1s;
        location /long/ { keepalive_timeout 30s; }
    }
}",
    );
    let mut c = Client::new(&v);
    c.send(get("/long/a.txt"));
    assert_eq!(c.response(false).header("connection"), Some("keep-alive"));
    std::thread::sleep(Duration::from_millis(1500));
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).text(), "hello");
    let secs = secs_until_closed(&mut c.s, Duration::from_secs(5)).expect("closed");
    assert!((0.8..3.0).contains(&secs), "closed after {secs}s");
}

/// keepalive_disable: MSIE 4 to 6 after a POST (the default), Safari on
/// Mac OS X after anything, `none` for neither.
#[test]
fn keepalive_disable_by_browser() {
    let dir = TempDir::new("h1-kd");
    for f in ["a.txt", "safari/a.txt", "none/a.txt"] {
        dir.write(&format!("html/{f}"), "hello");
    }
    let v = Vireo::start_in(
        dir,
        "events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /safari/ { keepalive_disable safari; }
        location /none/ { keepalive_disable none; }
    }
}",
    );
    let conn = |method: &str, path: &str, ua: &str| {
        let mut c = Client::new(&v);
        c.send(format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: {ua}\r\nContent-Length: 0\r\n\r\n"
        ));
        c.response(method == "HEAD")
            .header("connection")
            .map(str::to_string)
    };
    let msie5 = "Mozilla/4.0 (compatible; MSIE 5.0; Windows 98)";
    let safari = "Mozilla/5.0 (Macintosh; Mac OS X 10_7) Safari/7534.48.3";
    assert_eq!(conn("POST", "/a.txt", msie5).as_deref(), Some("close"));
    assert_eq!(conn("GET", "/a.txt", msie5).as_deref(), Some("keep-alive"));
    assert_eq!(
        conn("POST", "/a.txt", "MSIE 7.0 (x)").as_deref(),
        Some("keep-alive")
    );
    assert_eq!(conn("GET", "/a.txt", safari).as_deref(), Some("keep-alive"));
    assert_eq!(
        conn("GET", "/safari/a.txt", safari).as_deref(),
        Some("close")
    );
    assert_eq!(
        conn("POST", "/safari/a.txt", msie5).as_deref(),
        Some("keep-alive")
    );
    assert_eq!(
        conn("POST", "/none/a.txt", msie5).as_deref(),
        Some("keep-alive")
    );
}

/// $connection_time: seconds since the connection came, in milliseconds.
#[test]
fn connection_time_variable() {
    let v = Vireo::start(
        "events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        location / { return 200 \"$connection_requests:$connection_time\"; }
    }
}",
    );
    let mut c = Client::new(&v);
    c.send(get("/"));
    let first = c.response(false).text();
    assert!(
        first.starts_with("1:0.") && first.len() == "1:0.000".len(),
        "{first}"
    );
    std::thread::sleep(Duration::from_millis(1100));
    c.send(get("/"));
    let second = c.response(false).text();
    let secs: f64 = second.strip_prefix("2:").unwrap().parse().unwrap();
    assert!((1.0..3.0).contains(&secs), "{second}");
}

#[test]
fn client_body_timeout_closes_a_stalled_body() {
    let v = server("client_body_timeout 1s;");
    let mut s = v.connect();
    s.write_all(b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        .unwrap();
    let secs = secs_until_closed(&mut s, Duration::from_secs(5)).expect("closed");
    assert!((0.8..3.0).contains(&secs), "closed after {secs}s");
    // Chunked, stalled inside a chunk.
    let mut s = v.connect();
    s.write_all(b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc")
        .unwrap();
    let secs = secs_until_closed(&mut s, Duration::from_secs(5)).expect("closed");
    assert!((0.8..3.0).contains(&secs), "closed after {secs}s");
}

/// A client socket with a tiny receive buffer, connected to `port`.
fn small_rcvbuf_client(port: u16) -> TcpStream {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    sock.connect(&addr.into()).unwrap();
    sock.into()
}

fn send_timeout_case(sendfile: &str) {
    let dir = TempDir::new("h1st");
    let size = 24 << 20;
    dir.write("html/huge.bin", pattern(size));
    let v = Vireo::start_in(
        dir,
        &CONF.replace(
            "access_log off;",
            &format!("access_log off; send_timeout 1s; {sendfile}"),
        ),
    );
    let mut s = small_rcvbuf_client(v.port);
    s.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Never read for a while: the server must give up after send_timeout.
    std::thread::sleep(Duration::from_secs(3));
    let t = Instant::now();
    let mut got = 0usize;
    let mut b = vec![0u8; 1 << 16];
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let end = loop {
        match s.read(&mut b) {
            Ok(0) => break "eof",
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break "reset",
            Err(e) => panic!("still open after send_timeout ({e}), {got} bytes read"),
        }
        assert!(t.elapsed() < Duration::from_secs(10));
    };
    assert!(
        got < size,
        "whole file arrived ({got} bytes, {end}): not timed out"
    );
}

#[test]
fn send_timeout_closes_a_client_that_does_not_read() {
    send_timeout_case("sendfile on;");
}

#[test]
fn send_timeout_closes_a_client_that_does_not_read_sendfile_off() {
    send_timeout_case("sendfile off;");
}

#[test]
fn reset_timedout_connection_sends_a_reset() {
    let v =
        server("client_header_timeout 1s; client_body_timeout 1s; reset_timedout_connection on;");
    let mut s = v.connect();
    s.write_all(b"GET /a.txt HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 16];
    let e = s
        .read(&mut b)
        .expect_err("read fails with a reset, not EOF");
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");

    let mut s = v.connect();
    s.write_all(b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let e = s
        .read(&mut b)
        .expect_err("read fails with a reset, not EOF");
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
}

#[test]
fn without_reset_timedout_connection_a_timeout_is_a_clean_close() {
    let v = server("client_header_timeout 1s;");
    let mut s = v.connect();
    s.write_all(b"GET /a.txt HTTP/1.1\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = [0u8; 16];
    assert_eq!(s.read(&mut b).expect("clean EOF"), 0);
}

#[test]
fn keepalive_timeout_is_a_clean_close_even_with_reset_timedout_connection() {
    // nginx resets only connections that timed out in the middle of something.
    let v = server("keepalive_timeout 1s; reset_timedout_connection on;");
    let mut c = Client::new(&v);
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).text(), "hello");
    c.s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    let mut b = [0u8; 16];
    assert_eq!(c.s.read(&mut b).expect("clean EOF"), 0);
}

#[test]
fn send_timeout_with_reset_timedout_connection_resets() {
    let dir = TempDir::new("h1st");
    let size = 24 << 20;
    dir.write("html/huge.bin", pattern(size));
    let v = Vireo::start_in(
        dir,
        &CONF.replace(
            "access_log off;",
            "access_log off; send_timeout 1s; reset_timedout_connection on; sendfile on;",
        ),
    );
    let mut s = small_rcvbuf_client(v.port);
    s.write_all(b"GET /huge.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut b = vec![0u8; 1 << 16];
    let t = Instant::now();
    let err = loop {
        match s.read(&mut b) {
            Ok(0) => panic!("clean EOF instead of a reset"),
            Ok(_) => {}
            Err(e) => break e,
        }
        assert!(t.elapsed() < Duration::from_secs(10));
    };
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
}

#[test]
fn request_after_connection_close_is_not_answered() {
    let v = server("");
    let raw = v.raw(
        format!(
            "GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n{}",
            get("/b.txt")
        )
        .as_bytes(),
    );
    let rs = Resp::parse_all(&raw);
    assert_eq!(rs.len(), 1, "{:?}", String::from_utf8_lossy(&raw));
    assert_eq!(rs[0].text(), "hello");
}

#[test]
fn expect_100_continue_over_the_limit_is_413_without_interim() {
    let v = server("client_max_body_size 1k;");
    let mut c = Client::new(&v);
    c.send(
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n",
    );
    let r = c.response(false);
    assert_eq!(r.status, 413);
    assert_eq!(r.header("connection"), Some("close"));
}

#[test]
fn lingering_close_delivers_the_413_while_the_client_still_sends() {
    let v = server("client_max_body_size 1k;");
    let mut s = v.connect();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 4000000\r\n\r\n");
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..60 {
            if w.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let raw = read_to_close(&mut s);
    let _ = s.shutdown(std::net::Shutdown::Both);
    writer.join().unwrap();
    let r = Resp::parse(&raw).expect("the 413 arrived rather than a reset");
    assert_eq!(r.status, 413);
}

/// A request refused with 413 while its body is still coming: the response,
/// then the server's FIN; the connection, returned for probing.
fn refused_upload(v: &Vireo) -> TcpStream {
    let mut s = v.connect();
    s.write_all(b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\n\r\n")
        .unwrap();
    s.write_all(&[b'x'; 2048]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let raw = read_to_close(&mut s);
    assert_eq!(Resp::parse(&raw).expect("a response").status, 413);
    s
}

/// Write a little every `every` until a write fails (the server has closed
/// its socket and answered with a reset) or `max` passes: how long it took.
fn secs_until_writes_fail(s: &mut TcpStream, every: Duration, max: Duration) -> Option<f64> {
    let t = Instant::now();
    while t.elapsed() < max {
        if s.write_all(&[b'y'; 512]).is_err() {
            return Some(t.elapsed().as_secs_f64());
        }
        std::thread::sleep(every);
    }
    None
}

/// lingering_close, lingering_time and lingering_timeout as nginx: after an
/// early response the server reads and drops what the client still sends for
/// at most lingering_time, and stops after lingering_timeout of silence; off
/// closes at once; always lingers after every closing response.
#[test]
fn lingering_close_time_and_timeout() {
    let tick = Duration::from_millis(100);
    // A client that keeps sending is cut off after lingering_time.
    let v = server("client_max_body_size 1k; lingering_time 2s; lingering_timeout 1s;");
    let mut s = refused_upload(&v);
    let secs = secs_until_writes_fail(&mut s, tick, Duration::from_secs(10)).expect("closed");
    assert!(
        (1.5..4.5).contains(&secs),
        "lingering_time 2s: closed after {secs}s"
    );

    // A silent client is dropped after lingering_timeout…
    let mut s = refused_upload(&v);
    std::thread::sleep(Duration::from_millis(2000));
    let secs = secs_until_writes_fail(&mut s, tick, Duration::from_secs(2)).expect("closed");
    assert!(
        secs < 1.0,
        "lingering_timeout 1s: still open after 2s of silence"
    );
    // …not before.
    let v = server("client_max_body_size 1k; lingering_timeout 5s;");
    let mut s = refused_upload(&v);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        secs_until_writes_fail(&mut s, tick, Duration::from_millis(800)),
        None,
        "lingering_timeout 5s: closed within 2.3s"
    );

    // off: no lingering at all.
    let v = server("client_max_body_size 1k; lingering_close off;");
    let mut s = v.connect();
    let _ = s.write_all(b"POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\n\r\n");
    let _ = s.write_all(&[b'x'; 2048]);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = read_to_close(&mut s);
    let secs = secs_until_writes_fail(&mut s, tick, Duration::from_secs(5)).expect("closed");
    assert!(secs < 1.0, "lingering_close off: open for {secs}s");

    // always: even after a response that read all of its request.
    for (conf, lingers) in [
        ("", false),
        ("lingering_close always; lingering_timeout 3s;", true),
    ] {
        let v = server(conf);
        let mut s = v.connect();
        s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(Resp::parse(&read_to_close(&mut s)).unwrap().text(), "hello");
        let open = secs_until_writes_fail(&mut s, tick, Duration::from_millis(1500)).is_none();
        assert_eq!(open, lingers, "{conf:?}");
    }
}

#[test]
fn head_and_body_trickled_byte_by_byte() {
    let v = server("");
    let mut c = Client::new(&v);
    c.s.set_nodelay(true).unwrap();
    let req = b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
                4;a=\"q;x\"\r\nwxyz\r\n1\r\n!\r\n0\r\nT: v\r\n\r\n";
    for b in req.iter() {
        c.send([*b]);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(c.response(false).status, 405);
    for b in get("/b.txt").bytes() {
        c.send([b]);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(c.response(false).text(), "bravo!");
}

#[test]
fn absolute_form_target_is_served() {
    let v = server("");
    let r = v
        .request("GET http://localhost/a.txt HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "hello"));
    let r =
        v.request("GET http://localhost HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "<p>index</p>"));
    // An IP literal in the authority: IPv6 or IPvFuture characters (RFC 3986).
    let r =
        v.request("GET http://[v1F.a!$&'()*+,;=-_~:]/a.txt HTTP/1.0\r\nHost: localhost\r\n\r\n");
    assert_eq!((r.status, r.text().as_str()), (200, "hello"));
    let r = v.request("GET http://[v1.a\"b]/a.txt HTTP/1.0\r\nHost: localhost\r\n\r\n");
    assert_eq!(r.status, 400);
}

#[test]
fn fragment_is_not_part_of_the_path() {
    let v = server("");
    assert_eq!(v.get("/a.txt#section").text(), "hello");
    assert_eq!(v.get("/a.txt?x=1#frag").text(), "hello");
    let r = v.get("/#top");
    assert_eq!((r.status, r.text().as_str()), (200, "<p>index</p>"));
}

#[test]
fn date_header_advances() {
    let v = server("");
    let d1 = v.get("/a.txt").header("date").unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1100));
    let d2 = v.get("/a.txt").header("date").unwrap().to_string();
    let t1 = httpdate::parse_http_date(&d1).unwrap();
    let t2 = httpdate::parse_http_date(&d2).unwrap();
    assert!(t2 > t1, "{d1} then {d2}");
}

#[test]
fn many_pipelined_requests_in_one_write() {
    let v = server("");
    let mut c = Client::new(&v);
    let n = 200;
    let mut batch = String::new();
    for i in 0..n {
        batch += &get(if i % 2 == 0 { "/a.txt" } else { "/b.txt" });
    }
    c.send(batch);
    for i in 0..n {
        let r = c.response(false);
        assert_eq!(
            r.text(),
            if i % 2 == 0 { "hello" } else { "bravo!" },
            "response {i}"
        );
    }
}

#[test]
fn empty_lines_between_pipelined_requests_are_skipped() {
    let v = server("");
    let mut c = Client::new(&v);
    c.send(format!(
        "{}\r\n{}\r\n\r\n{}",
        get("/a.txt"),
        get("/b.txt"),
        get("/a.txt")
    ));
    assert_eq!(c.response(false).text(), "hello");
    assert_eq!(c.response(false).text(), "bravo!");
    assert_eq!(c.response(false).text(), "hello");
}

#[test]
fn large_body_is_discarded_and_connection_reused() {
    let v = server("client_max_body_size 64m;");
    let mut c = Client::new(&v);
    let body = vec![b'y'; 20 << 20];
    c.send(format!(
        "POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    ));
    c.send(&body);
    assert_eq!(c.response(false).status, 405);
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).text(), "hello");
}

#[test]
fn half_closed_client_still_gets_its_responses() {
    let v = server("");
    let mut s = v.connect();
    s.write_all(format!("{}{}", get("/a.txt"), get("/b.txt")).as_bytes())
        .unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let raw = read_to_close(&mut s);
    let rs = Resp::parse_all(&raw);
    assert_eq!(rs.len(), 2, "{:?}", String::from_utf8_lossy(&raw));
    assert_eq!(rs[0].text(), "hello");
    assert_eq!(rs[1].text(), "bravo!");
}

#[test]
fn send_timeout_applies_between_writes_not_to_the_whole_response() {
    let dir = TempDir::new("h1st");
    let size = 6 << 20;
    dir.write("html/big.bin", pattern(size));
    let v = Vireo::start_in(
        dir,
        &CONF.replace(
            "access_log off;",
            "access_log off; send_timeout 1s; sendfile on;",
        ),
    );
    let mut s = small_rcvbuf_client(v.port);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    // A slow but steady reader: about 2.5 s in total, never 1 s without reading.
    let t = Instant::now();
    let mut raw = Vec::new();
    let mut b = vec![0u8; 256 * 1024];
    let mut next_pause = 1 << 20;
    loop {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&b[..n]),
            Err(e) => panic!("read failed after {} bytes: {e}", raw.len()),
        }
        if raw.len() >= next_pause {
            next_pause += 1 << 20;
            std::thread::sleep(Duration::from_millis(400));
        }
        assert!(t.elapsed() < Duration::from_secs(20));
    }
    let r = Resp::parse(&raw).unwrap();
    assert_eq!(r.body.len(), size);
    assert!(r.body == pattern(size));
    assert!(
        t.elapsed() > Duration::from_millis(1200),
        "reader was not slow: {:?}",
        t.elapsed()
    );
}

#[test]
fn client_body_timeout_applies_between_reads() {
    let v = server("client_body_timeout 1s;");
    let mut c = Client::new(&v);
    c.send("POST /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n");
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(400));
        c.send("0123456789");
    }
    assert_eq!(c.response(false).status, 405);
    c.send(get("/a.txt"));
    assert_eq!(c.response(false).text(), "hello");
}

#[test]
fn oversized_chunk_lines_and_trailers_are_refused() {
    let v = server("");
    let mut long_ext =
        b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;e=".to_vec();
    long_ext.extend(std::iter::repeat_n(b'v', 6000));
    long_ext.extend_from_slice(b"\r\nabc\r\n0\r\n\r\n");
    refused(&v, &long_ext, &[400, 413]);
    let mut trailers =
        b"POST /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
            .to_vec();
    for i in 0..200 {
        trailers.extend_from_slice(format!("X-T-{i}: {}\r\n", "t".repeat(60)).as_bytes());
    }
    trailers.extend_from_slice(b"\r\n");
    refused(&v, &trailers, &[400, 413, 431]);
}
