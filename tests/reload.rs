//! Configuration reload (SIGHUP, `-s reload`): no request lost under load, each
//! answered by the configuration live when it started; bad configurations
//! refused with file:line; listeners and workers follow the configuration;
//! kept-alive connections (HTTP/1 and HTTP/2) and long downloads carry on.

mod common;
mod load;
use common::*;
use load::{Load, Plan, Timeline};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const SMALL: usize = 64;
const BIG: usize = 256 * 1024;

/// Two document roots whose files differ only in their fill byte.
fn two_roots(dir: &TempDir) {
    for (d, c) in [("a", b'A'), ("b", b'B')] {
        dir.write(&format!("{d}/v"), vec![c; SMALL]);
        dir.write(&format!("{d}/big"), vec![c; BIG]);
    }
}

fn conf(root: &str, workers: usize) -> String {
    format!(
        "worker_processes {workers};\npid logs/v.pid;\nerror_log logs/error.log notice;\nevents {{}}\nhttp {{\n    access_log off;\n    \
         keepalive_requests 1000000;\n    server {{\n        listen 127.0.0.1:{{port}} reuseport;\n        listen 127.0.0.1:{{port2}};\n        \
         root {{dir}}/{root};\n    }}\n}}\n"
    )
}

/// GET on a new connection; the body.
fn fetch(port: u16, path: &str) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    Some(Resp::parse(&read_to_close(&mut s))?.body)
}

/// Write the configuration file the server was started with.
fn rewrite(v: &Vireo, template: &str, port2: u16) {
    let text = fill(template, v.dir.path(), v.port, port2);
    std::fs::write(v.dir.path().join("vireo.conf"), text).unwrap();
}

/// The second port of a started server (from its configuration file).
fn port2_of(v: &Vireo) -> u16 {
    let text = v.dir.read("vireo.conf");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("listen 127.0.0.1:"))
        .map(|r| {
            r.trim_end_matches(';')
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u16>()
                .unwrap()
        })
        .find(|&p| p != v.port)
        .expect("a second port")
}

/// Reload `n` times under load, alternating root a/b (and, with `workers`, the
/// worker count); check every request.
fn reload_under_load(n: usize, workers: [usize; 2], tag: &str) -> load::Report {
    let dir = TempDir::new(tag);
    two_roots(&dir);
    let confs = [conf("a", workers[0]), conf("b", workers[1])];
    let v = Vireo::start_in(dir, &confs[0]);
    let port2 = port2_of(&v);
    let plan = Plan {
        ports: vec![v.port, port2],
        small: "/v",
        small_len: SMALL,
        big: "/big",
        big_len: BIG,
        keepalive: 6,
        oneshot: 3,
        slow: 2,
    };
    let load = Load::start(&plan);
    std::thread::sleep(Duration::from_millis(300));
    let mut timeline = Timeline {
        reloads: Vec::new(),
        fill: vec![b'A'],
    };
    for i in 0..n {
        let next = (i + 1) % 2;
        rewrite(&v, &confs[next], port2);
        let want = [b'A', b'B'][next];
        let signalled = Instant::now();
        v.signal(libc::SIGHUP);
        // In effect once a new request gets the new file.
        assert!(
            eventually(10, || fetch(v.port, "/v").is_some_and(|b| b[0] == want)),
            "reload {i} not in effect: {}",
            v.dir.read("logs/error.log")
        );
        timeline.reloads.push((signalled, Instant::now()));
        timeline.fill.push(want);
        std::thread::sleep(Duration::from_millis(10 + (i as u64 * 7) % 25));
    }
    std::thread::sleep(Duration::from_millis(300));
    let report = load.finish();
    let log = v.dir.read("logs/error.log");
    assert_eq!(log.matches("configuration reloaded").count(), n, "{log}");
    let mut wrong = Vec::new();
    for s in &report.samples {
        if let Err(e) = timeline.check(s) {
            wrong.push(e);
        }
    }
    let slow = report.samples.iter().filter(|s| s.slow).count();
    eprintln!(
        "{tag}: {n} reloads, {} requests ({slow} slow downloads), {} failed, {} resets, {} keep-alive reconnects, {} inconsistent",
        report.samples.len(),
        report.failures.len(),
        report.resets,
        report.reconnects,
        wrong.len()
    );
    assert!(
        report.failures.is_empty(),
        "{} failed requests: {:?}",
        report.failures.len(),
        &report.failures[..report.failures.len().min(10)]
    );
    assert_eq!(report.resets, 0);
    assert!(wrong.is_empty(), "{:?}", &wrong[..wrong.len().min(10)]);
    assert!(
        report.samples.len() > 1000,
        "too little load: {}",
        report.samples.len()
    );
    assert!(slow > 0, "no slow download finished");
    assert!(
        !log.contains("[alert]") && !log.contains("[emerg]"),
        "{log}"
    );
    report
}

#[test]
fn reload_100_times_under_load() {
    let r = reload_under_load(100, [2, 2], "rl100");
    // Reloads close no kept-alive connection (nothing asks them to).
    assert_eq!(r.reconnects, 0, "kept-alive connections were closed");
}

#[test]
fn reload_changing_worker_count_under_load() {
    // 2 → 1 → 2 …: a retired worker stops accepting (its reuseport socket goes
    // to the other worker, nothing queued is lost) and its connections end after
    // their next response.
    reload_under_load(20, [2, 1], "rlw");
}

#[test]
fn bad_configuration_is_refused_and_the_old_one_keeps_serving() {
    let dir = TempDir::new("bad");
    two_roots(&dir);
    let v = Vireo::start_in(dir, &conf("a", 1));
    let port2 = port2_of(&v);
    let path = v.dir.path().join("vireo.conf");
    let good = v.dir.read("vireo.conf");
    // A keep-alive connection opened before.
    let mut ka = v.connect();
    assert_eq!(keepalive_get(&mut ka, "/v").body[0], b'A');

    // Bad syntax on line 8: `-s reload` tests it, reports file:line, sends nothing.
    let bad = good.replace(
        "access_log off;",
        "access_log off;\n    bogus_directive on;",
    );
    std::fs::write(&path, &bad).unwrap();
    let line = bad
        .lines()
        .position(|l| l.contains("bogus_directive"))
        .unwrap()
        + 1;
    let o = std::process::Command::new(BIN)
        .arg("-p")
        .arg(v.dir.path())
        .arg("-c")
        .arg(&path)
        .args(["-s", "reload"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "unknown directive \"bogus_directive\" in {}:{line}",
            path.display()
        )),
        "{err}"
    );
    // SIGHUP straight away: the server refuses it and says where.
    v.signal(libc::SIGHUP);
    assert!(
        eventually(5, || {
            v.dir.read("logs/error.log").contains(&format!(
            "reload failed, still serving the previous configuration: unknown directive \"bogus_directive\" in {}:{line}",
            path.display()
        ))
        }),
        "{}",
        v.dir.read("logs/error.log")
    );
    assert_eq!(fetch(v.port, "/v").unwrap()[0], b'A');
    assert_eq!(keepalive_get(&mut ka, "/v").body[0], b'A');

    // Valid syntax, but a port another process holds: refused as a whole.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tp = taken.local_addr().unwrap().port();
    let clash = good
        .replace("root ", &format!("listen 127.0.0.1:{tp};\n        root "))
        .replace("/a;", "/b;");
    let clash_line = clash
        .lines()
        .position(|l| l.contains(&format!("listen 127.0.0.1:{tp};")))
        .unwrap()
        + 1;
    std::fs::write(&path, clash).unwrap();
    v.signal(libc::SIGHUP);
    assert!(
        eventually(5, || v.dir.read("logs/error.log").contains(&format!(
            "bind() to 127.0.0.1:{tp} failed (98: Address already in use) in {}:{clash_line}",
            path.display()
        ))),
        "{}",
        v.dir.read("logs/error.log")
    );
    assert_eq!(fetch(v.port, "/v").unwrap()[0], b'A', "half-applied reload");
    assert_eq!(fetch(port2, "/v").unwrap()[0], b'A');
    assert_eq!(keepalive_get(&mut ka, "/v").body[0], b'A');

    // Fixed: `-s reload` applies it.
    rewrite(&v, &conf("b", 1), port2);
    let o = std::process::Command::new(BIN)
        .arg("-p")
        .arg(v.dir.path())
        .arg("-c")
        .arg(&path)
        .args(["-s", "reload"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(eventually(5, || fetch(v.port, "/v").is_some_and(|b| b[0] == b'B')));
    // The kept-alive connection's next request takes the new configuration.
    assert_eq!(keepalive_get(&mut ka, "/v").body[0], b'B');
    // The new configuration serves a moment before its log line is written.
    assert!(
        eventually(5, || v
            .dir
            .read("logs/error.log")
            .contains("configuration reloaded")),
        "{}",
        v.dir.read("logs/error.log")
    );
    let log = v.dir.read("logs/error.log");
    assert_eq!(log.matches("reload failed").count(), 2, "{log}");
    assert_eq!(log.matches("configuration reloaded").count(), 1, "{log}");
}

/// One request on an open keep-alive connection; the response.
fn keepalive_get(s: &mut TcpStream, path: &str) -> Resp {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((r, _)) = Resp::parse_one(&buf)
            && r.header("content-length")
                .and_then(|l| l.parse::<usize>().ok())
                == Some(r.body.len())
        {
            return r;
        }
        let n = s.read(&mut chunk).expect("read a response");
        assert!(n > 0, "closed: {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn listening(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn listeners_follow_the_configuration() {
    let dir = TempDir::new("lst");
    two_roots(&dir);
    let sock = dir.path().join("v.sock");
    let one = "pid logs/v.pid;\nerror_log logs/error.log notice;\nevents {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/a;\n }\n}\n";
    let v = Vireo::start_in(dir, one);
    let p2 = free_port();
    assert!(!listening(p2));
    // Add a TCP and a unix listener.
    let two = format!(
        "pid logs/v.pid;\nerror_log logs/error.log notice;\nevents {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}};\n  \
         listen 127.0.0.1:{p2};\n  listen unix:{};\n  root {{dir}}/b;\n }}\n}}\n",
        sock.display()
    );
    rewrite(&v, &two, 0);
    // A connection kept open on the first port across both reloads.
    let mut ka = v.connect();
    assert_eq!(keepalive_get(&mut ka, "/v").body[0], b'A');
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || fetch(p2, "/v").is_some_and(|b| b[0] == b'B')));
    let mut u = connect_unix(&sock);
    u.write_all(b"GET /v HTTP/1.0\r\n\r\n").unwrap();
    let mut out = Vec::new();
    u.read_to_end(&mut out).unwrap();
    assert_eq!(Resp::parse(&out).unwrap().body[0], b'B');
    assert_eq!(keepalive_get(&mut ka, "/v").body[0], b'B');

    // A connection on the second port, then that port and the unix socket go.
    let mut ka2 = TcpStream::connect(("127.0.0.1", p2)).unwrap();
    ka2.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(keepalive_get(&mut ka2, "/v").body[0], b'B');
    rewrite(&v, one, 0);
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || !listening(p2)), "port still open");
    assert!(eventually(5, || !sock.exists()), "socket file left");
    assert!(eventually(5, || fetch(v.port, "/v").is_some_and(|b| b[0] == b'A')));
    assert_eq!(keepalive_get(&mut ka, "/v").body[0], b'A');
    // The connection on the removed port is still served, then closed.
    let r = keepalive_get(&mut ka2, "/v");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(read_to_close(&mut ka2).is_empty());
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains(&format!("no longer listening on 127.0.0.1:{p2}")),
        "{log}"
    );
}

fn worker_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|n| n.starts_with("vireo-worker-"))
        .count()
}

#[test]
fn worker_processes_changes_take_effect() {
    let dir = TempDir::new("wp");
    two_roots(&dir);
    let v = Vireo::start_in(dir, &conf("a", 1));
    let port2 = port2_of(&v);
    assert!(eventually(5, || worker_threads(v.pid()) == 1));
    rewrite(&v, &conf("a", 3), port2);
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || worker_threads(v.pid()) == 3));
    for _ in 0..20 {
        assert_eq!(fetch(v.port, "/v").unwrap()[0], b'A');
        assert_eq!(fetch(port2, "/v").unwrap()[0], b'A');
    }
    // Down to one: the others finish what they hold and exit.
    rewrite(&v, &conf("b", 1), port2);
    v.signal(libc::SIGHUP);
    assert!(
        eventually(5, || worker_threads(v.pid()) == 1),
        "{}",
        worker_threads(v.pid())
    );
    for _ in 0..20 {
        assert_eq!(fetch(v.port, "/v").unwrap()[0], b'B');
        assert_eq!(fetch(port2, "/v").unwrap()[0], b'B');
    }
}

/// A client socket with a small receive buffer, so a big response stays in flight.
fn slow_client(port: u16) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_recv_buffer_size(4096).unwrap();
    s.connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

#[test]
fn long_download_survives_reloads_and_worker_retirement() {
    let dir = TempDir::new("long");
    for (d, c) in [("a", b'A'), ("b", b'B')] {
        dir.write(&format!("{d}/huge"), vec![c; 8 << 20]);
    }
    let v = Vireo::start_in(dir, &conf("a", 2));
    let port2 = port2_of(&v);
    let mut slow = slow_client(v.port);
    slow.write_all(b"GET /huge HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = vec![0u8; 64 * 1024];
    slow.read_exact(&mut got).unwrap();
    // Reloads, including one retiring the worker that may be serving it.
    for (root, n) in [("b", 1), ("a", 2), ("b", 1)] {
        rewrite(&v, &conf(root, n), port2);
        v.signal(libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut rest = Vec::new();
    let mut chunk = [0u8; 65536];
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        match slow.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => rest.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("download cut: {e}"),
        }
        let body =
            got.len() + rest.len() - got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() - 4;
        if body >= 8 << 20 {
            break;
        }
    }
    got.extend(rest);
    let r = Resp::parse(&got).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 8 << 20);
    assert!(r.body.iter().all(|&b| b == b'A'), "download switched files");
}

#[test]
fn drain_timeout_ends_long_downloads() {
    let dir = TempDir::new("dt");
    dir.write("a/huge", vec![b'A'; 32 << 20]);
    let c = conf("a", 1).replace(
        "pid logs/v.pid;",
        "pid logs/v.pid;\nworker_shutdown_timeout 1s;",
    );
    let mut v = Vireo::start_in(dir, &c);
    let mut slow = slow_client(v.port);
    slow.write_all(b"GET /huge HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = vec![0u8; 64 * 1024];
    slow.read_exact(&mut got).unwrap();
    let t = Instant::now();
    v.signal(libc::SIGQUIT);
    // The download is not read; the server gives up on it after the timeout.
    let st = v
        .wait_exit(10)
        .expect("exits after worker_shutdown_timeout");
    let took = t.elapsed();
    assert_eq!(st.code(), Some(0));
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(
        v.dir
            .read("logs/error.log")
            .contains("worker_shutdown_timeout: closing 1 connection")
    );
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Descriptors of `pid` that are files under `dir` (open-file cache entries).
fn cached_files(pid: u32, dir: &std::path::Path) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.starts_with(dir)))
        .count()
}

#[test]
fn reloads_leak_no_descriptors_and_lose_no_log_line() {
    let dir = TempDir::new("fds");
    two_roots(&dir);
    let c = |root: &str| {
        conf(root, 2).replace(
            "access_log off;",
            "access_log logs/access.log combined buffer=4k flush=1s;\n    open_file_cache max=10 inactive=1s;",
        )
    };
    let v = Vireo::start_in(dir, &c("a"));
    let port2 = port2_of(&v);
    for _ in 0..3 {
        fetch(v.port, "/v").unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    // Each worker's open-file cache may keep a/v and b/v open across reloads
    // (how many depends on which worker took which request): they are counted
    // apart, the rest must come back to what it was.
    let roots = [v.dir.path().join("a"), v.dir.path().join("b")];
    let cached = || {
        roots
            .iter()
            .map(|r| cached_files(v.pid(), r))
            .sum::<usize>()
    };
    let others = || open_fds(v.pid()).saturating_sub(cached());
    let before = others();
    let mut sent = 3;
    for i in 0..30 {
        rewrite(&v, &c(["a", "b"][i % 2]), port2);
        v.signal(libc::SIGHUP);
        let want = [b'A', b'B'][i % 2];
        assert!(eventually(5, || {
            sent += 1;
            fetch(v.port, "/v").is_some_and(|b| b[0] == want)
        }));
    }
    // Writers of replaced configurations are flushed and closed within a second or
    // two; cached files (each worker may hold both roots' files) once inactive.
    assert!(
        eventually(20, || others() <= before),
        "{} descriptors before 30 reloads, {} after (cached files apart)",
        before,
        others()
    );
    assert!(
        cached() <= 4,
        "{} cached files for 2 workers × 2 files",
        cached()
    );
    assert!(eventually(5, || v
        .dir
        .read("logs/access.log")
        .lines()
        .count()
        == sent));
}

#[test]
fn timeline_check_refuses_an_answer_from_the_wrong_configuration() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let timeline = Timeline {
        reloads: vec![(at(100), at(110)), (at(200), at(210))],
        fill: vec![b'A', b'B', b'A'],
    };
    let s = |sent: u64, first: u64, fill: u8| load::Sample {
        sent: at(sent),
        first_byte: at(first),
        fill,
        slow: false,
    };
    assert!(timeline.check(&s(10, 20, b'A')).is_ok());
    assert!(timeline.check(&s(10, 20, b'B')).is_err());
    // Within the window of the first reload: either.
    assert!(timeline.check(&s(101, 105, b'A')).is_ok());
    assert!(timeline.check(&s(101, 105, b'B')).is_ok());
    // Certainly after it, certainly before the next: B only.
    assert!(timeline.check(&s(120, 150, b'B')).is_ok());
    assert!(timeline.check(&s(120, 150, b'A')).is_err());
    // A slow request spanning both reloads may have started under any.
    assert!(timeline.check(&s(50, 250, b'B')).is_ok());
    assert!(timeline.check(&s(300, 310, b'A')).is_ok());
    assert!(timeline.check(&s(300, 310, b'B')).is_err());
}

#[test]
fn http2_connections_take_the_new_configuration() {
    if !common::h2::have_python_h2() {
        return;
    }
    let conf = |code: u16| {
        format!(
            "pid logs/v.pid;\nerror_log logs/error.log notice;\nevents {{}}\nhttp {{\n access_log off;\n server {{\n  \
             listen 127.0.0.1:{{port}};\n  http2 on;\n  location = /v {{ return {code}; }}\n }}\n}}\n"
        )
    };
    let v = Vireo::start(&conf(201));
    // The next configuration is on disk; the script asks twice, sends SIGHUP
    // and asks twice more on the same connection.
    rewrite(&v, &conf(202), 0);
    let r = common::h2::script(&v, "reload.py", &[&v.pid().to_string(), "2", "/v", "2.0"]);
    assert_eq!(r.get("statuses"), "201,201,202,202", "{}", r.0);
    assert_eq!(r.get("closed"), "0", "{}", r.0);
    assert_eq!(r.get("goaway"), "none", "{}", r.0);
    assert!(
        v.dir
            .read("logs/error.log")
            .contains("configuration reloaded"),
        "{}",
        v.dir.read("logs/error.log")
    );
}

/// Read until the server closes the connection; false when it stays open
/// past `secs` or answers something.
fn closed_within(s: &mut TcpStream, secs: u64) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut b = [0u8; 64];
    matches!(s.read(&mut b), Ok(0))
        || matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
}

#[test]
fn worker_shutdown_timeout_closes_connections_older_than_a_reload() {
    let dir = TempDir::new("wst");
    two_roots(&dir);
    let with = |root: &str| {
        conf(root, 1).replace(
            "pid logs/v.pid;",
            "pid logs/v.pid;\nworker_shutdown_timeout 300ms;",
        )
    };
    let v = Vireo::start_in(dir, &with("a"));
    let port2 = port2_of(&v);
    // A kept-alive connection, and one that has sent nothing yet.
    let mut used = TcpStream::connect(("127.0.0.1", v.port)).unwrap();
    assert_eq!(keepalive_get(&mut used, "/v").body[0], b'A');
    let mut silent = TcpStream::connect(("127.0.0.1", v.port)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    rewrite(&v, &with("b"), port2);
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || fetch(v.port, "/v").is_some_and(|b| b[0] == b'B')));
    // A connection opened under the new configuration stays.
    let mut fresh = TcpStream::connect(("127.0.0.1", v.port)).unwrap();
    assert_eq!(keepalive_get(&mut fresh, "/v").body[0], b'B');
    assert!(
        closed_within(&mut used, 5),
        "the kept-alive connection stays open"
    );
    assert!(
        closed_within(&mut silent, 5),
        "the silent connection stays open"
    );
    assert_eq!(keepalive_get(&mut fresh, "/v").body[0], b'B');
    assert!(eventually(5, || {
        v.dir
            .read("logs/error.log")
            .contains("worker_shutdown_timeout: closing 2 connection(s) opened before the reload")
    }));
    // Without the directive, connections outlive reloads.
    rewrite(&v, &conf("a", 1), port2);
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || fetch(v.port, "/v").is_some_and(|b| b[0] == b'A')));
    let mut later = TcpStream::connect(("127.0.0.1", v.port)).unwrap();
    assert_eq!(keepalive_get(&mut later, "/v").body[0], b'A');
    rewrite(&v, &conf("b", 1), port2);
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || fetch(v.port, "/v").is_some_and(|b| b[0] == b'B')));
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(keepalive_get(&mut later, "/v").body[0], b'B');
}
