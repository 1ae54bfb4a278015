//! Static files at kernel speed, seen from the kernel: the running server is
//! traced with strace(1) and the system calls its workers make for a run of
//! keep-alive requests are counted. A small hot file costs one read and one
//! writev per request and, with open_file_cache, no open or stat; a large file
//! goes out with sendfile(2) (tcp_nopush: its head with MSG_MORE, so head and
//! file leave together, as TCP_CORK would have them; on a connection closed
//! after the response, TCP_CORK itself, left on for the close to send the
//! file's tail with the FIN); sendfile off reads the
//! file instead; tcp_nodelay sets TCP_NODELAY on each kept-alive connection
//! (not on one closed after its response, nor is it shut down before close);
//! multi_accept on takes every queued connection at once, off one per turn;
//! a connection served without waiting is never added to the event loop; a
//! FastCGI reply the application has sent whole is read in one call.

mod common;
use common::fpm::Fpm;
use common::*;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The calls counted: opening and inspecting files, reading and writing
/// sockets and files, socket options.
const CALLS: &str = "openat,open,statx,newfstatat,fstat,stat,lstat,read,pread64,readv,\
                     recvfrom,recvmsg,write,writev,sendto,sendmsg,sendfile,setsockopt,accept4,\
                     shutdown,epoll_ctl";

/// Can strace trace here? scripts/test installs it; without it, or where ptrace
/// is not allowed (some containers), these tests say so and pass.
fn have_strace() -> bool {
    let ok = Command::new("strace")
        .args(["-qq", "-e", "trace=none", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("strace missing or not allowed to trace: system-call checks skipped");
    }
    ok
}

/// strace attached to every thread of a running vireo, writing to a file.
struct Trace {
    strace: Child,
    out: PathBuf,
}

impl Trace {
    fn attach(v: &Vireo) -> Trace {
        let out = v.dir.path().join("strace.txt");
        let strace = Command::new("strace")
            .args(["-f", "-qq", "-s", "48", "-e"])
            .arg(format!("trace={CALLS}"))
            .arg("-o")
            .arg(&out)
            .arg("-p")
            .arg(v.pid().to_string())
            .stderr(std::fs::File::create(v.dir.path().join("strace.err")).unwrap())
            .spawn()
            .unwrap();
        // Attached once every thread of the server has a tracer.
        let task = format!("/proc/{}/task", v.pid());
        let traced = || {
            std::fs::read_dir(&task).unwrap().flatten().all(|t| {
                std::fs::read_to_string(t.path().join("status"))
                    .unwrap_or_default()
                    .lines()
                    .any(|l| {
                        l.starts_with("TracerPid:") && l.split_whitespace().nth(1) != Some("0")
                    })
            })
        };
        assert!(
            eventually(10, traced),
            "strace did not attach: {}",
            v.dir.read("strace.err")
        );
        Trace { strace, out }
    }

    /// Detach; the calls made between the requests for `/mark-start` and
    /// `/mark-end` (both excluded), as `(name, full line)`.
    fn finish(mut self) -> Vec<(String, String)> {
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.strace.id() as i32, libc::SIGINT) };
        let _ = self.strace.wait();
        let text = std::fs::read_to_string(&self.out).unwrap();
        let calls: Vec<(String, String)> = text
            .lines()
            .filter(|l| !l.contains("resumed>"))
            .filter_map(|l| {
                let call = l.split_once(' ')?.1.trim_start();
                let name = call.split_once('(')?.0;
                Some((name.to_string(), call.to_string()))
            })
            .collect();
        let at = |mark: &str| {
            calls
                .iter()
                .position(|(_, l)| l.contains(mark))
                .unwrap_or_else(|| panic!("{mark} not traced:\n{text}"))
        };
        let (start, end) = (at("GET /mark-start"), at("GET /mark-end"));
        // From after the start mark's response to the end mark's request.
        let answered = calls[start..end]
            .iter()
            .position(|(_, l)| l.contains("HTTP/1.1 200 OK"))
            .expect("the start mark's response");
        calls[start + answered + 1..end].to_vec()
    }
}

fn count(calls: &[(String, String)]) -> HashMap<&str, usize> {
    let mut m = HashMap::new();
    for (n, _) in calls {
        *m.entry(n.as_str()).or_insert(0) += 1;
    }
    m
}

fn server(extra: &str) -> Vireo {
    server_on("", extra, "")
}

/// [`server`] with `listen_opts` on its `listen` and `in_server` in its
/// `server` block.
fn server_on(listen_opts: &str, extra: &str, in_server: &str) -> Vireo {
    let dir = TempDir::new("sys");
    dir.write("html/two", "ok");
    dir.write("html/big.bin", vec![b'b'; 300_000]);
    dir.write("html/mark-start", "start");
    dir.write("html/mark-end", "end");
    start_settled(
        dir,
        &format!(
            "worker_processes 1;\nevents {{}}\nhttp {{\n    access_log off;\n    {extra}\n    \
             server {{\n        listen 127.0.0.1:{{port}}{listen_opts};\n        root {{dir}}/html;\n        \
             {in_server}\n    }}\n}}\n"
        ),
    )
}

/// Start vireo on `conf` and wait until its worker has unmapped the clean
/// file pages after the load (it says so in the error log, at notice): that
/// reads /proc/self/smaps once, a call no traced request must be blamed for.
fn start_settled(dir: TempDir, conf: &str) -> Vireo {
    let v = Vireo::start_in(dir, &format!("error_log logs/error.log notice;\n{conf}"));
    assert!(
        eventually(10, || error_log(&v)
            .contains("clean file pages after the load")),
        "no unmap in the error log: {}",
        error_log(&v)
    );
    v
}

/// One keep-alive connection.
struct Client(TcpStream);

impl Client {
    fn new(v: &Vireo) -> Client {
        let s = v.connect();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Client(s)
    }

    /// GET `path` and read the whole response; its body length.
    fn get(&mut self, path: &str) -> usize {
        self.0
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut raw = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            if let Some(r) = Resp::parse(&raw)
                && let Some(len) = r.header("content-length")
                && r.body.len() == len.parse::<usize>().unwrap()
            {
                assert_eq!(r.status, 200, "{}", r.head);
                return r.body.len();
            }
            let n = self.0.read(&mut buf).unwrap();
            assert!(n > 0, "closed");
            raw.extend_from_slice(&buf[..n]);
        }
    }
}

const N: usize = 20;

/// Trace `N` requests for `path` on one warm keep-alive connection.
fn traced_requests(v: &Vireo, path: &str, len: usize) -> Vec<(String, String)> {
    let mut c = Client::new(v);
    for _ in 0..3 {
        assert_eq!(c.get(path), len);
    }
    let t = Trace::attach(v);
    c.get("/mark-start");
    for _ in 0..N {
        assert_eq!(c.get(path), len);
    }
    c.get("/mark-end");
    t.finish()
}

/// Trace `N` HTTP/1.0 requests for `path`, each on its own connection,
/// which the server closes after the response; `check` passes each response.
fn traced_closing(v: &Vireo, path: &str, check: impl Fn(&[u8]) -> bool) -> Vec<(String, String)> {
    let t = Trace::attach(v);
    Client::new(v).get("/mark-start");
    for _ in 0..N {
        let mut s = v.connect();
        s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .unwrap();
        let r = read_to_close(&mut s);
        assert!(
            check(&r),
            "{}",
            String::from_utf8_lossy(&r[..r.len().min(200)])
        );
    }
    Client::new(v).get("/mark-end");
    t.finish()
}

fn assert_none(calls: &[(String, String)], names: &[&str]) {
    for (n, l) in calls {
        assert!(!names.contains(&n.as_str()), "unexpected call: {l}");
    }
}

#[test]
fn small_hot_file_is_one_read_and_one_writev_without_open_or_stat() {
    if !have_strace() {
        return;
    }
    let v = server("sendfile on; tcp_nopush on; open_file_cache max=100;");
    let calls = traced_requests(&v, "/two", 2);
    let c = count(&calls);
    assert_none(
        &calls,
        &[
            "openat",
            "open",
            "statx",
            "newfstatat",
            "fstat",
            "stat",
            "lstat",
            "pread64",
            "sendfile",
            "setsockopt",
        ],
    );
    // Head and body in one writev per response, one read per request.
    assert_eq!(c.get("writev").copied().unwrap_or(0), N, "{calls:?}");
    let reads: usize = ["read", "recvfrom", "recvmsg", "readv"]
        .iter()
        .map(|n| c.get(n).copied().unwrap_or(0))
        .sum();
    assert_eq!(reads, N, "{reads} reads for {N} requests: {calls:?}");
    for (n, l) in &calls {
        if n == "writev" {
            assert!(l.contains("HTTP/1.1 200 OK") && l.contains("\"ok\""), "{l}");
        }
    }
}

#[test]
fn a_fastcgi_reply_sent_whole_is_read_in_one_call() {
    if !have_strace() {
        return;
    }
    let Some(fpm) = Fpm::start(2) else {
        return;
    };
    // 69,000 bytes: php-fpm sends a 64 KB record and the rest, then closes
    // (no fastcgi_keep_conn); the worker, woken at the end (its low-water
    // mark is above the reply), reads what is queued in one call into a
    // buffer of that size, and the records' content goes to the client
    // from there.
    let v = server_on(
        "",
        "",
        &format!(
            "location ~ \\.php$ {{ fastcgi_pass 127.0.0.1:{}; \
             fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name; \
             fastcgi_param REQUEST_METHOD $request_method; }}",
            fpm.port
        ),
    );
    v.dir
        .write("html/big.php", "<?php echo str_repeat('x', 69000);");
    let calls = traced_closing(&v, "/big.php", |r| {
        r.ends_with(&[b'x'; 100]) && r.iter().filter(|&&b| b == b'x').count() >= 69000
    });
    // A read of the reply begins with a STDOUT record's header, or (a later
    // read) in its content.
    let replies: Vec<&String> = calls
        .iter()
        .filter(|(n, _)| ["read", "recvfrom", "recvmsg", "readv"].contains(&n.as_str()))
        .map(|(_, l)| l)
        .filter(|l| l.contains(", \"\\1\\6\\0\\1") || l.contains(", \"xxxx"))
        .collect();
    assert_eq!(replies.len(), N, "{replies:#?}");
    assert!(
        replies.iter().all(|l| l.contains(", \"\\1\\6\\0\\1")),
        "{replies:#?}"
    );
}

#[test]
fn without_open_file_cache_each_request_opens_the_file() {
    if !have_strace() {
        return;
    }
    let v = server("sendfile on;");
    let calls = traced_requests(&v, "/two", 2);
    let opens = calls
        .iter()
        .filter(|(n, l)| n == "openat" && l.contains("/html/two"))
        .count();
    assert_eq!(opens, N, "{calls:?}");
}

#[test]
fn large_file_goes_out_with_sendfile() {
    if !have_strace() {
        return;
    }
    let v = server("sendfile on; open_file_cache max=100;");
    let calls = traced_requests(&v, "/big.bin", 300_000);
    let c = count(&calls);
    assert_none(&calls, &["pread64", "read", "openat", "statx", "fstat"]);
    // The head alone, without MSG_MORE, then the file.
    assert!(c.get("sendfile").copied().unwrap_or(0) >= N, "{calls:?}");
    let heads: Vec<&String> = calls
        .iter()
        .filter(|(n, _)| n == "writev" || n == "sendto")
        .map(|(_, l)| l)
        .collect();
    assert_eq!(heads.len(), N, "{calls:?}");
    for l in heads {
        assert!(
            l.contains("HTTP/1.1 200 OK") && !l.contains("MSG_MORE"),
            "{l}"
        );
    }
}

/// The `count` argument of each sendfile(2) call of the responses traced.
fn sendfile_counts(calls: &[(String, String)]) -> Vec<usize> {
    calls
        .iter()
        .filter(|(n, _)| n == "sendfile")
        .map(|(_, l)| {
            let args = l.split_once(") = ").map_or(l.as_str(), |(a, _)| a);
            args.rsplit(", ").next().unwrap().parse().unwrap()
        })
        .collect()
}

#[test]
fn sendfile_max_chunk_caps_each_sendfile_call() {
    if !have_strace() {
        return;
    }
    const LEN: usize = 3 << 20;
    for (setting, cap) in [
        ("sendfile_max_chunk 256k;", 256 << 10),
        ("", 2 << 20), // nginx's default, 2m
        ("sendfile_max_chunk 0;", LEN),
    ] {
        let v = server(&format!("sendfile on; open_file_cache max=100; {setting}"));
        v.dir.write("html/huge.bin", vec![b'h'; LEN]);
        let calls = traced_requests(&v, "/huge.bin", LEN);
        let counts = sendfile_counts(&calls);
        assert!(
            counts.len() >= N * LEN.div_ceil(cap),
            "{setting}: {counts:?}"
        );
        assert!(counts.iter().all(|&c| c <= cap), "{setting}: {counts:?}");
        // Calls ask for the full cap while that much is left.
        assert_eq!(counts.iter().max(), Some(&cap), "{setting}: {counts:?}");
    }
}

#[test]
fn tcp_nopush_sends_the_head_with_msg_more_before_sendfile() {
    if !have_strace() {
        return;
    }
    let v = server("sendfile on; tcp_nopush on; open_file_cache max=100;");
    let calls = traced_requests(&v, "/big.bin", 300_000);
    let heads: Vec<usize> = (0..calls.len())
        .filter(|&i| calls[i].1.contains("HTTP/1.1 200 OK"))
        .collect();
    assert_eq!(heads.len(), N, "{calls:?}");
    for i in heads {
        let (n, l) = &calls[i];
        assert_eq!(n, "sendto", "{l}");
        assert!(l.contains("MSG_MORE"), "{l}");
        assert_eq!(calls[i + 1].0, "sendfile", "{:?}", calls[i + 1]);
    }
}

#[test]
fn tcp_nopush_corks_head_and_file_on_a_closing_connection() {
    if !have_strace() {
        return;
    }
    let v = server("sendfile on; tcp_nopush on; open_file_cache max=100;");
    let calls = traced_closing(&v, "/big.bin", |r| {
        r.starts_with(b"HTTP/1.1 200 OK") && r.ends_with(&[b'b'; 64]) && r.len() > 300_000
    });
    let heads: Vec<usize> = (0..calls.len())
        .filter(|&i| calls[i].1.contains("HTTP/1.1 200 OK"))
        .collect();
    assert_eq!(heads.len(), N, "{calls:?}");
    for i in heads {
        let (n, l) = &calls[i - 1];
        assert!(n == "setsockopt" && l.contains("TCP_CORK, [1]"), "{l}");
        assert!(!calls[i].1.contains("MSG_MORE"), "{:?}", calls[i]);
    }
    // Never uncorked: the close sends what is held, with the FIN.
    assert!(
        !calls.iter().any(|(_, l)| l.contains("TCP_CORK, [0]")),
        "{calls:?}"
    );
    assert_none(&calls, &["shutdown"]);
}

/// With `deferred`, a connection is accepted with its request there: one
/// answered at once and closed never waits, so it is never registered with
/// the event loop (no epoll_ctl to add it, none to remove it). Only the
/// keep-alive start mark's connection, idle after its response, is.
#[test]
fn a_connection_served_without_waiting_never_enters_the_event_loop() {
    if !have_strace() {
        return;
    }
    let v = server_on(" deferred", "open_file_cache max=100;", "");
    let calls = traced_closing(&v, "/two", |r| {
        r.starts_with(b"HTTP/1.1 200 OK") && r.ends_with(b"ok")
    });
    // The end mark's connection is accepted within the trace too (an accept
    // finding the queue empty returns EAGAIN and is not counted).
    let accepted = calls
        .iter()
        .filter(|(n, l)| n == "accept4" && !l.contains("= -1"))
        .count();
    assert_eq!(accepted, N + 1, "{calls:?}");
    let epoll = count(&calls).get("epoll_ctl").copied().unwrap_or(0);
    assert!(
        epoll <= 2,
        "{epoll} epoll_ctl calls for {N} connections: {calls:?}"
    );
}

#[test]
fn sendfile_off_reads_the_file() {
    if !have_strace() {
        return;
    }
    let v = server("sendfile off; open_file_cache max=100;");
    let calls = traced_requests(&v, "/big.bin", 300_000);
    let c = count(&calls);
    assert_none(&calls, &["sendfile"]);
    assert!(c.get("pread64").copied().unwrap_or(0) >= N, "{calls:?}");
}

#[test]
fn tcp_nodelay_is_set_on_each_kept_alive_connection_unless_off() {
    if !have_strace() {
        return;
    }
    // Set once a request on the connection is read (the end mark's comes
    // after the traced span).
    for (conf, want) in [("", N), ("tcp_nodelay on;", N), ("tcp_nodelay off;", 0)] {
        let v = server(conf);
        let t = Trace::attach(&v);
        Client::new(&v).get("/mark-start");
        for _ in 0..N {
            Client::new(&v).get("/two");
        }
        Client::new(&v).get("/mark-end");
        let calls = t.finish();
        let nodelay = calls
            .iter()
            .filter(|(n, l)| n == "setsockopt" && l.contains("TCP_NODELAY, [1]"))
            .count();
        assert_eq!(
            nodelay, want,
            "{conf:?}: {nodelay} TCP_NODELAY for {N} connections: {calls:?}"
        );
    }
    // Closed after one response, as nginx: no TCP_NODELAY (the response
    // leaves in one write) and no shutdown before the close.
    let v = server("");
    let calls = traced_closing(&v, "/two", |r| r.ends_with(b"ok"));
    let c = count(&calls);
    assert_eq!(c.get("writev").copied().unwrap_or(0), N, "{calls:?}");
    assert_none(&calls, &["setsockopt", "shutdown"]);
}

/// The calls a worker makes when `K` connections, each with its request
/// sent, wait in the listen queue of a stopped server that then resumes.
fn burst(multi_accept: &str) -> Vec<(String, String)> {
    const K: usize = 8;
    let dir = TempDir::new("sys");
    dir.write("html/two", "ok");
    dir.write("html/mark-start", "start");
    dir.write("html/mark-end", "end");
    let v = start_settled(
        dir,
        &format!(
            "worker_processes 1;\nevents {{ multi_accept {multi_accept}; }}\nhttp {{\n    access_log off;\n    \
             server {{\n        listen 127.0.0.1:{{port}};\n        root {{dir}}/html;\n    }}\n}}\n"
        ),
    );
    let t = Trace::attach(&v);
    Client::new(&v).get("/mark-start");
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{}/stat", v.pid())).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with(['T', 't']))
        })
    };
    v.signal(libc::SIGSTOP);
    assert!(eventually(5, stopped));
    let mut conns: Vec<TcpStream> = (0..K).map(|_| v.connect()).collect();
    for s in &mut conns {
        s.write_all(b"GET /two HTTP/1.0\r\n\r\n").unwrap();
    }
    v.signal(libc::SIGCONT);
    for s in &mut conns {
        let r = Resp::parse(&read_to_close(s)).expect("a response");
        assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    }
    Client::new(&v).get("/mark-end");
    let calls = t.finish();
    let accepted = calls
        .iter()
        .filter(|(n, l)| n == "accept4" && !l.contains("EAGAIN"))
        .count();
    // The end mark's connection is accepted before its request is read.
    assert_eq!(accepted, K + 1, "{calls:?}");
    calls
}

/// How many connections were accepted before the first request was read.
fn accepted_before_first_read(calls: &[(String, String)]) -> usize {
    calls
        .iter()
        .take_while(|(n, l)| !(n == "recvfrom" && l.contains("GET /two")))
        .filter(|(n, l)| n == "accept4" && !l.contains("EAGAIN"))
        .count()
}

#[test]
fn multi_accept_on_takes_every_queued_connection_at_once() {
    if !have_strace() {
        return;
    }
    let calls = burst("on");
    assert_eq!(accepted_before_first_read(&calls), 8, "{calls:?}");
}

#[test]
fn multi_accept_off_takes_one_connection_per_turn() {
    if !have_strace() {
        return;
    }
    let calls = burst("off");
    assert_eq!(accepted_before_first_read(&calls), 1, "{calls:?}");
}
