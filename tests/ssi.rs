//! SSI: includes of static files, proxied responses and internal
//! locations (nested, relative, in document order), commands split across
//! the pieces of a streamed document, set/echo/if with regex captures,
//! `include … set=` bounded by subrequest_output_buffer_size, errors and
//! stubs, the subrequest depth limit, log_subrequest, headers, HTTP/2 with
//! gzip after SSI. Expectations checked against nginx 1.22.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

const CONF: &str = "
error_log logs/error.log info;
events {}
http {
    log_format sub \"$uri $status\";
    server {
        listen 127.0.0.1:{port};
        http2 on;
        root {dir}/html;
        ssi on;
        location /proxy/ {
            proxy_pass http://127.0.0.1:{port2}/;
        }
        location /slow/ {
            proxy_pass http://127.0.0.1:SLOW/;
            proxy_buffering off;
        }
        location /inner/ {
            internal;
        }
        location /denied/ {
            deny all;
        }
        location /small/ {
            subrequest_output_buffer_size 8;
            proxy_pass http://127.0.0.1:{port2}/;
        }
        location = /setter {
            set $shared from-sub;
            return 200 \"[set]\";
        }
        location /silent/ {
            ssi_silent_errors on;
        }
        location /logged/ {
            log_subrequest on;
            access_log logs/sub.log sub;
        }
        location /lm/ {
            ssi_last_modified on;
        }
        location /gz/ {
            gzip on;
            gzip_min_length 1;
        }
    }
    server {
        listen 127.0.0.1:{port2};
        root {dir}/up;
        ssi off;
    }
}";

/// A one-shot upstream that sends `doc` as a close-delimited response in
/// pieces of `piece` bytes, pausing between them.
fn slow_upstream(doc: &'static str, piece: usize) -> (u16, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).unwrap();
            if n == 0 {
                return;
            }
            head.extend_from_slice(&b[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n")
            .unwrap();
        for p in doc.as_bytes().chunks(piece) {
            s.write_all(p).unwrap();
            s.flush().unwrap();
            std::thread::sleep(Duration::from_millis(30));
        }
    });
    (port, h)
}

fn start_with(slow: u16) -> Vireo {
    let dir = TempDir::new("ssi");
    let files: &[(&str, &str)] = &[
        ("html/a.html", "A[<!--#include virtual=\"/b.html\" -->]A"),
        ("html/b.html", "B(<!--#include virtual=\"c.html\" -->)B"),
        ("html/c.html", "C"),
        ("html/t.txt", "TEXTFILE"),
        ("html/txt.html", "<<!--#include virtual=\"/t.txt\" -->>"),
        (
            "html/args.html",
            "<!--#echo var=\"arg_x\" -->|<!--#echo var=\"uri\" -->",
        ),
        (
            "html/withargs.html",
            "<!--#include virtual=\"/args.html?x=1\" -->",
        ),
        (
            "html/proxied.html",
            "<<!--#include virtual=\"/proxy/up.txt\" -->>",
        ),
        ("up/up.txt", "UPSTREAM"),
        ("up/long.txt", "0123456789abcdef"),
        (
            "html/internal.html",
            "<!--#include virtual=\"/inner/x.html\" -->",
        ),
        ("html/inner/x.html", "INTERNAL"),
        ("html/denied/x.html", "D"),
        (
            "html/denied.html",
            "<!--#include virtual=\"/denied/x.html\" -->",
        ),
        (
            "html/vars.html",
            "<!--#set var=\"v\" value=\"[$arg_q]\" --><!--#echo var=\"v\" -->\
             <!--#echo var=\"nothing\" --><!--#echo var=\"nothing\" default=\"dflt\" -->\
             <!--#set var=\"h\" value=\"<&>\" --><!--#echo var=\"h\" -->\
             <!--#echo var=\"h\" encoding=\"none\" --><!--#echo var=\"h\" encoding=\"url\" -->",
        ),
        (
            "html/if.html",
            "<!--#if expr=\"$arg_v = /^(\\w+)-(?P<tail>\\d+)$/\" -->\
             M:<!--#echo var=\"1\" -->:<!--#echo var=\"tail\" -->\
             <!--#elif expr=\"$arg_v != x\" -->NE\
             <!--#else -->X<!--#endif -->",
        ),
        (
            "html/lookaround.html",
            "<!--#if expr=\"$arg_w = /^a(?=b)/\" -->LA<!--#else -->NO<!--#endif -->",
        ),
        (
            "html/set.html",
            "<!--#include virtual=\"/proxy/up.txt\" set=\"got\" -->got=<!--#echo var=\"got\" -->",
        ),
        (
            "html/toolong.html",
            "<!--#include virtual=\"/small/long.txt\" set=\"got\" --><!--#echo var=\"got\" -->",
        ),
        (
            "html/shared.html",
            "<!--#include virtual=\"/setter\" -->:<!--#echo var=\"shared\" -->",
        ),
        (
            "html/waited.html",
            "<!--#include virtual=\"/setter\" wait=\"yes\" -->:<!--#echo var=\"shared\" -->",
        ),
        (
            "html/bad.html",
            "1<!--#nosuch -->2<!--#config errmsg=\"E!\" --><!--#echo -->3",
        ),
        ("html/silent/bad.html", "1<!--#nosuch -->2"),
        (
            "html/stub.html",
            "<!--#block name=\"s\" -->STUB<!--#echo var=\"arg_k\" --><!--#endblock -->\
             [<!--#include virtual=\"/missing\" stub=\"s\" -->]\
             [<!--#include virtual=\"/c.html\" stub=\"s\" -->]",
        ),
        ("html/loop.html", "L<!--#include virtual=\"/loop.html\" -->"),
        (
            "html/logged/page.html",
            "<!--#include virtual=\"/logged/part.html\" -->",
        ),
        ("html/logged/part.html", "part"),
        ("html/lm/page.html", "lm<!--#echo var=\"arg_a\" -->"),
        ("html/plain.txt", "<!--#echo var=\"uri\" -->"),
    ];
    for (p, c) in files {
        dir.write(p, c);
    }
    dir.write(
        "html/gz/page.html",
        format!(
            "{}<!--#include virtual=\"/gz/part.html\" -->",
            "x".repeat(3000)
        ),
    );
    dir.write("html/gz/part.html", "y".repeat(70000));
    Vireo::start_in(dir, &CONF.replace("SLOW", &slow.to_string()))
}

fn start() -> Vireo {
    start_with(1)
}

fn get10(v: &Vireo, path: &str) -> Resp {
    v.request(&format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n"))
}

fn body(v: &Vireo, path: &str) -> String {
    get10(v, path).text()
}

#[test]
fn nested_and_relative_includes_in_document_order() {
    let v = start();
    assert_eq!(body(&v, "/a.html"), "A[B(C)B]A");
    // The include has its own $uri and $args.
    assert_eq!(body(&v, "/withargs.html?x=main"), "1|/args.html");
    // A text file is left alone (ssi_types).
    assert_eq!(body(&v, "/plain.txt"), "<!--#echo var=\"uri\" -->");
}

#[test]
fn proxied_and_internal_includes() {
    let v = start();
    assert_eq!(body(&v, "/proxied.html"), "<UPSTREAM>");
    assert_eq!(body(&v, "/internal.html"), "INTERNAL");
    // The internal location itself is not reachable from outside.
    assert_eq!(get10(&v, "/inner/x.html").status, 404);
    // Access checks are the main request's: an include skips them, as
    // nginx's subrequests skip the access phase.
    assert_eq!(body(&v, "/denied.html"), "D");
    assert_eq!(get10(&v, "/denied/x.html").status, 403);
}

#[test]
fn commands_spanning_the_pieces_of_a_streamed_document() {
    static DOC: &str = "head<!--#set var=\"x\" value=\"across pieces\" -->\
        <!--#echo var=\"x\" -->|<!--#include virtual=\"/c.html\" -->|<!-- plain -->|<!--#if expr=\"$x\" -->yes<!--#endif -->tail";
    let (port, up) = slow_upstream(DOC, 7);
    let v = start_with(port);
    assert_eq!(
        body(&v, "/slow/doc.html"),
        "headacross pieces|C|<!-- plain -->|yestail"
    );
    up.join().unwrap();
}

#[test]
fn set_echo_and_encodings() {
    let v = start();
    assert_eq!(
        body(&v, "/vars.html?q=1"),
        "[1](none)dflt&lt;&amp;&gt;<&>%3C&%3E"
    );
}

#[test]
fn if_elif_else_with_captures() {
    let v = start();
    assert_eq!(body(&v, "/if.html?v=ab-12"), "M:ab:12");
    assert_eq!(body(&v, "/if.html?v=zz"), "NE");
    assert_eq!(body(&v, "/if.html?v=x"), "X");
    // A pattern Rust's engine lacks goes to PCRE, as configuration regexes.
    assert_eq!(body(&v, "/lookaround.html?w=ab"), "LA");
    assert_eq!(body(&v, "/lookaround.html?w=ac"), "NO");
}

#[test]
fn include_set_captures_the_body_within_the_buffer_size() {
    let v = start();
    assert_eq!(body(&v, "/set.html"), "got=UPSTREAM");
    // Longer than subrequest_output_buffer_size: the request fails before
    // anything is sent.
    let raw = v.raw(b"GET /toolong.html HTTP/1.0\r\nHost: localhost\r\n\r\n");
    assert!(!String::from_utf8_lossy(&raw).contains("200 OK"));
    assert!(error_log(&v).contains("too big subrequest response"));
}

#[test]
fn variables_set_in_a_subrequest_are_the_parents() {
    let v = start();
    // The include runs beside what follows it: the echo comes first and
    // finds the variable unset (declared by `set`, so empty, not "(none)").
    assert_eq!(body(&v, "/shared.html"), "[set]:");
    // wait="yes" holds the rest of the document until the include is done.
    assert_eq!(body(&v, "/waited.html"), "[set]:from-sub");
}

#[test]
fn errors_and_stubs() {
    let v = start();
    assert_eq!(
        body(&v, "/bad.html"),
        "1[an error occurred while processing the directive]2E!3"
    );
    assert!(error_log(&v).contains("invalid SSI command"));
    assert_eq!(body(&v, "/silent/bad.html"), "12");
    // The stub replaces an include that fails, not one that answers.
    assert_eq!(body(&v, "/stub.html?k=K"), "[STUBK][C]");
}

#[test]
fn include_loops_stop_at_the_depth_limit() {
    let v = start();
    let r = get10(&v, "/loop.html");
    assert_eq!(r.status, 200);
    let t = r.text();
    assert_eq!(t.matches('L').count(), 51, "{t}");
    assert!(t.ends_with("[an error occurred while processing the directive]"));
    assert!(error_log(&v).contains("subrequests cycle while processing \"/loop.html\""));
}

#[test]
fn subrequests_are_logged_with_log_subrequest() {
    let v = start();
    assert_eq!(body(&v, "/logged/page.html"), "part");
    let lines = access_lines_in(&v, "logs/sub.log", 2);
    assert_eq!(lines, ["/logged/part.html 200", "/logged/page.html 200"]);
}

fn access_lines_in(v: &Vireo, rel: &str, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    eventually(5, || {
        lines = v.dir.read(rel).lines().map(String::from).collect();
        lines.len() >= n
    });
    lines
}

#[test]
fn length_and_validators_are_dropped_or_weakened() {
    let v = start();
    let r = get10(&v, "/lm/page.html?a=1");
    assert_eq!(r.text(), "lm1");
    assert!(r.header("content-length").is_none());
    assert!(r.header("last-modified").is_some());
    assert!(r.header("etag").is_some_and(|e| e.starts_with("W/\"")));
    assert!(r.header("accept-ranges").is_none());
    let r = get10(&v, "/a.html");
    assert!(r.header("last-modified").is_none());
    assert!(r.header("etag").is_none());
    // A Range request gets the whole processed document, as nginx.
    let r = v.request("GET /a.html HTTP/1.0\r\nHost: localhost\r\nRange: bytes=0-3\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "A[B(C)B]A");
    assert!(r.header("content-range").is_none());
    // Its includes ignore the range and the conditionals too.
    let r = v.request(
        "GET /txt.html HTTP/1.0\r\nHost: localhost\r\nRange: bytes=0-1\r\n\
         If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n\r\n",
    );
    assert_eq!(r.text(), "<TEXTFILE>");
    // A kept-alive HTTP/1.1 connection gets the body chunked.
    let (head, body) = get_chunked(&v, "/a.html");
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    assert_eq!(body, b"A[B(C)B]A");
}

#[test]
fn http2_with_gzip_after_ssi() {
    let v = start();
    let body = curl_h2_gzipped(v.port, "/gz/page.html");
    assert_eq!(body.len(), 73000);
    assert_eq!(body, format!("{}{}", "x".repeat(3000), "y".repeat(70000)));
}

/// An upstream answering every request after `delay`, with its path as
/// the body; serves `n` requests, each on its own thread.
fn delayed_upstream(n: usize, delay: Duration) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().take(n) {
            let mut s = s.unwrap();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut b).unwrap();
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&b[..n]);
                }
                let path = String::from_utf8_lossy(&head);
                let path = path.split(' ').nth(1).unwrap_or("?").to_string();
                std::thread::sleep(delay);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{path}",
                    path.len()
                );
                s.write_all(reply.as_bytes()).unwrap();
            });
        }
    });
    port
}

#[test]
fn includes_run_side_by_side_and_go_out_in_document_order() {
    let up = delayed_upstream(3, Duration::from_millis(700));
    let v = Vireo::start(&format!(
        "events {{}}
        http {{
            server {{
                listen 127.0.0.1:{{port}};
                root {{dir}};
                location = /page.html {{ ssi on; }}
                location /up/ {{ proxy_pass http://127.0.0.1:{up}; }}
            }}
        }}"
    ));
    std::fs::write(
        v.dir.path().join("page.html"),
        "<<!--#include virtual=\"/up/1\" -->|<!--#include virtual=\"/up/2\" -->\
         |<!--#include virtual=\"/up/3\" -->>",
    )
    .unwrap();
    let t0 = std::time::Instant::now();
    assert_eq!(body(&v, "/page.html"), "</up/1|/up/2|/up/3>");
    // Three includes waiting 700 ms each at once: well under the 2.1 s
    // they would take one after another.
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}
