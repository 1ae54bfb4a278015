//! HTTP/2 attacks (DESIGN.md §5) against a running vireo, each written as a
//! small script with the Python h2 package's frame and HPACK codecs
//! (tests/h2/*.py): the connection must end with GOAWAY (or close) within a
//! bound, and vireo's CPU time and memory (from /proc) must stay bounded.
//! Also: a panic in one stream costs that stream only. Skips (with a message)
//! only when the Python h2 package is missing.

mod common;
use common::h2::{Report, have_python_h2, script};
use common::*;

const CONF: &str = "
worker_processes 1;
error_log logs/error.log info;
events {}
http {
    access_log off;
    keepalive_timeout 2s;
    client_header_timeout 2s;
    server {
        listen 127.0.0.1:{port} http2;
        root {dir}/html;
        location /up/ { proxy_pass http://127.0.0.1:{port2}/; }
    }
    server {
        listen 127.0.0.1:{port2};
        root {dir}/html;
    }
}";

fn start() -> Vireo {
    start_with("")
}

/// With `extra` directives at the http level.
fn start_with(extra: &str) -> Vireo {
    let dir = TempDir::new("h2atk");
    dir.write("html/a.txt", "0123456789");
    Vireo::start_in(
        dir,
        &CONF.replace("access_log off;", &format!("access_log off; {extra}")),
    )
}

/// CPU seconds (user + system) the process used so far.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Run `f`, then check vireo spent at most `cpu` seconds and grew by at
/// most `rss_mb`, and still serves.
fn bounded(v: &Vireo, cpu: f64, rss_mb: u64, f: impl FnOnce() -> Report) -> Report {
    let (cpu0, rss0) = (cpu_secs(v.pid()), rss_kb(v.pid()));
    let r = f();
    let used = cpu_secs(v.pid()) - cpu0;
    let grew = rss_kb(v.pid()).saturating_sub(rss0) / 1024;
    eprintln!("{}: vireo cpu {used:.2}s, rss +{grew} MB", r.0);
    assert!(used <= cpu, "vireo used {used:.2}s of CPU: {}", r.0);
    assert!(grew <= rss_mb, "vireo grew by {grew} MB: {}", r.0);
    assert_eq!(v.get("/a.txt").status, 200, "still serving");
    r
}

/// A client that stops reading holds back the file reads and the upstream:
/// vireo sends one stream window (64 KiB) and waits, its memory flat, then
/// sends the whole 64 MB body once the client reads again.
#[test]
fn slow_reader_gets_backpressure_from_files_and_upstreams() {
    if !have_python_h2() {
        return;
    }
    let v = start();
    let big = vec![b'z'; 64_000_000];
    std::fs::write(v.dir.path().join("html/big"), &big).unwrap();
    drop(big);
    for path in ["/big", "/up/big"] {
        let rss0 = rss_kb(v.pid());
        let pid = v.pid().to_string();
        let r = script(&v, "slow_read.py", &[path, &pid, "2"]);
        assert_eq!(r.num("stalled"), 65535.0, "{path}: {}", r.0);
        let grew = (r.num("rss_stalled_kb") as u64).saturating_sub(rss0) / 1024;
        assert!(grew <= 16, "{path}: vireo grew by {grew} MB while stalled");
        assert_eq!(r.num("body"), 64_000_000.0, "{path}: {}", r.0);
    }
}

/// keepalive_requests bounds the streams of a connection: GOAWAY(NO_ERROR)
/// after the last, and a stream opened after it is not served.
#[test]
fn keepalive_requests_ends_the_connection() {
    if !have_python_h2() {
        return;
    }
    let v = start_with("keepalive_requests 10;");
    let r = script(&v, "sequential.py", &["30"]);
    assert!(r.goaway(0), "{}", r.0);
    assert_eq!(r.num("responses"), 10.0, "{}", r.0);
}

/// A panic while one stream is handled (a bug; test builds trigger one with
/// `VIREO_TEST_PANIC_URI`) costs that stream a 500: the connection and its
/// next streams go on.
#[test]
fn a_panic_costs_one_stream() {
    if !have_python_h2() {
        return;
    }
    let dir = TempDir::new("h2panic");
    dir.write("html/a.txt", "0123456789");
    let v = Vireo::start_in_env(dir, CONF, &[("VIREO_TEST_PANIC_URI", "/boom")]);
    let r = script(&v, "sequential.py", &["4", "/a.txt", "/boom"]);
    assert_eq!(r.get("statuses"), "200,500,200,500", "{}", r.0);
    // The connection ends at keepalive_timeout, not at the panic.
    assert!(r.goaway(0), "{}", r.0);
    let log = v.dir.read("logs/error.log");
    assert_eq!(
        log.matches("request \"GET /boom HTTP/2.0\" panicked: answered 500")
            .count(),
        2,
        "{log}"
    );
}

#[test]
fn many_concurrent_streams_are_served() {
    if !have_python_h2() {
        return;
    }
    let v = start();
    let r = script(&v, "streams.py", &["100"]);
    assert_eq!(r.get("max_streams"), "128");
    assert_eq!(r.num("responses"), 100.0, "{}", r.0);
}

#[test]
fn rapid_reset_ends_with_goaway() {
    if !have_python_h2() {
        return;
    }
    let v = start();
    let r = bounded(&v, 3.0, 20, || script(&v, "rapid_reset.py", &["100000"]));
    // ENHANCE_YOUR_CALM (11) once too many streams were reset before being
    // accepted, or NO_ERROR (0) after keepalive_requests streams.
    assert!(r.goaway(11) || r.goaway(0), "{}", r.0);
    assert!(r.num("sent") <= 2000.0, "{}", r.0);
    assert!(r.num("secs") < 10.0, "{}", r.0);
}

#[test]
fn continuation_flood_ends_with_goaway() {
    if !have_python_h2() {
        return;
    }
    let v = start();
    let r = bounded(&v, 2.0, 20, || script(&v, "continuation.py", &["64"]));
    // PROTOCOL_ERROR once the header block passes max_header_list_size.
    assert!(r.goaway(1) || r.goaway(11), "{}", r.0);
    assert!(r.num("sent") < 1_048_576.0, "{}", r.0);
}

#[test]
fn hpack_bomb_ends_with_goaway() {
    if !have_python_h2() {
        return;
    }
    let v = start();
    let r = bounded(&v, 2.0, 20, || script(&v, "hpack_bomb.py", &["200"]));
    assert!(r.goaway(11) || r.goaway(1), "{}", r.0);
    assert_eq!(r.num("responses"), 0.0, "{}", r.0);
}

#[test]
fn empty_data_flood_ends_with_goaway() {
    if !have_python_h2() {
        return;
    }
    let v = start();
    let r = bounded(&v, 3.0, 20, || script(&v, "empty_data.py", &["1000000"]));
    assert!(r.goaway(11), "{}", r.0);
    // Ended by vireo, well before the script's million frames (what it
    // counts as sent includes bursts still in the socket buffers).
    assert!(r.num("sent") < 1_000_000.0, "{}", r.0);
    assert!(r.num("secs") < 10.0, "{}", r.0);
}

#[test]
fn idle_and_slow_clients_are_closed() {
    if !have_python_h2() {
        return;
    }
    let v = start();
    // The preface, then silence: GOAWAY after keepalive_timeout and
    // client_header_timeout (2 s each).
    let r = bounded(&v, 1.0, 5, || script(&v, "idle.py", &["preface"]));
    assert!(r.goaway(0), "{}", r.0);
    assert!((1.5..5.0).contains(&r.num("secs")), "{}", r.0);
    // Half a preface: closed after client_header_timeout (2 s).
    let r = script(&v, "idle.py", &["partial"]);
    assert_eq!(r.get("closed"), "1", "{}", r.0);
    assert!((1.5..5.0).contains(&r.num("secs")), "{}", r.0);
}
