//! Workers and the process: worker threads, worker_connections, multi_accept,
//! worker_rlimit_nofile, pid file, error_log levels, stop signals, listen variants.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Names of the process's threads (from /proc/PID/task/*/comm).
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect();
    names.sort();
    names
}

/// The worker threads, by number, once `n` of them have started (bounded wait:
/// the port answers as soon as it is bound, a moment before the threads start).
fn workers(pid: u32, n: usize) -> Vec<String> {
    let list = || {
        let mut w: Vec<String> = thread_names(pid)
            .into_iter()
            .filter(|n| n.starts_with("vireo-worker-"))
            .collect();
        w.sort_by_key(|n| {
            n.trim_start_matches("vireo-worker-")
                .parse::<usize>()
                .unwrap_or(usize::MAX)
        });
        w
    };
    eventually(5, || list().len() >= n);
    // A moment more: no extra worker may show up.
    std::thread::sleep(Duration::from_millis(50));
    list()
}

/// One request on an open keep-alive connection; the response.
fn keepalive_get(s: &mut TcpStream, path: &str) -> Resp {
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some((r, n)) = Resp::parse_one(&buf)
            && n <= buf.len()
            && r.header("content-length")
                .and_then(|l| l.parse::<usize>().ok())
                == Some(r.body.len())
        {
            return r;
        }
        let n = s.read(&mut chunk).expect("read a response");
        assert!(
            n > 0,
            "closed before a full response: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn basic(extra_main: &str, events: &str) -> String {
    format!(
        "{extra_main}\nevents {{ {events} }}\nhttp {{\n    access_log off;\n    server {{\n        listen 127.0.0.1:{{port}};\n        root {{dir}}/html;\n    }}\n}}\n"
    )
}

#[test]
fn two_worker_threads() {
    let v = Vireo::start(&basic("worker_processes 2;", ""));
    assert_eq!(workers(v.pid(), 2), ["vireo-worker-0", "vireo-worker-1"]);
    assert_eq!(v.get("/nope").status, 404);
}

#[test]
fn one_worker_by_default_and_auto_is_one_per_core() {
    let v = Vireo::start(&basic("", ""));
    assert_eq!(workers(v.pid(), 1), ["vireo-worker-0"]);
    let v = Vireo::start(&basic("worker_processes auto;", ""));
    let cores = std::thread::available_parallelism().unwrap().get();
    let want: Vec<String> = (0..cores).map(|i| format!("vireo-worker-{i}")).collect();
    assert_eq!(workers(v.pid(), cores), want);
}

#[test]
fn worker_connections_enforced() {
    let dir = TempDir::new("wc");
    dir.write("html/x", "x");
    let conf = basic("error_log logs/error.log notice;", "worker_connections 3;");
    let v = Vireo::start_in(dir, &conf);
    // The harness's readiness probe used a slot; wait until it is given back.
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..3 {
        let mut s = v.connect();
        // Retry while the probe's slot is still taken.
        let mut ok = false;
        for _ in 0..50 {
            s.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut b = [0u8; 512];
            match s.read(&mut b) {
                Ok(n) if n > 0 => {
                    assert!(b.starts_with(b"HTTP/1.1 200"));
                    ok = true;
                    break;
                }
                _ => {
                    std::thread::sleep(Duration::from_millis(20));
                    s = v.connect();
                }
            }
        }
        assert!(ok, "connection {} not served", held.len() + 1);
        held.push(s);
    }
    // The fourth concurrent connection is closed without an answer.
    let mut s = v.connect();
    let _ = s.write_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n");
    let got = read_to_close(&mut s);
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    assert!(
        eventually(5, || v.dir.read("logs/error.log").contains("[alert]")
            && v.dir
                .read("logs/error.log")
                .contains("3 worker_connections are not enough")),
        "{}",
        v.dir.read("logs/error.log")
    );
    // The held ones still work.
    for s in &mut held {
        assert_eq!(keepalive_get(s, "/x").status, 200);
    }
    // Free one slot: a new connection is served again.
    drop(held.pop());
    assert!(eventually(5, || {
        let mut s = v.connect();
        let _ = s.write_all(b"GET /x HTTP/1.0\r\n\r\n");
        Resp::parse(&read_to_close(&mut s)).is_some_and(|r| r.status == 200)
    }));
}

#[test]
fn multi_accept_serves_a_burst() {
    let dir = TempDir::new("ma");
    dir.write("html/x", "burst");
    let v = Vireo::start_in(dir, &basic("", "multi_accept on; worker_connections 200;"));
    // Open many connections before sending anything, then ask on each.
    let mut conns: Vec<TcpStream> = (0..60).map(|_| v.connect()).collect();
    for s in &mut conns {
        s.write_all(b"GET /x HTTP/1.0\r\n\r\n").unwrap();
    }
    for s in &mut conns {
        let r = Resp::parse(&read_to_close(s)).expect("response");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "burst");
    }
}

/// The soft and hard "Max open files" of a process.
fn nofile(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    (f[3].to_string(), f[4].to_string())
}

/// Start vireo with its soft open-files limit lowered to `soft` first.
fn start_with_soft_nofile(dir: &TempDir, conf: &str, soft: u64) -> (std::process::Child, u16) {
    use std::os::unix::process::CommandExt;
    let port = free_port();
    let conf = fill(conf, dir.path(), port, free_port());
    let path = dir.write("vireo.conf", conf);
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("-p").arg(dir.path()).arg("-c").arg(path);
    cmd.stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap());
    // SAFETY: only async-signal-safe calls (getrlimit/setrlimit) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_cur = soft.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    assert!(
        eventually(10, || TcpStream::connect(("127.0.0.1", port)).is_ok()),
        "{}",
        dir.read("stderr.log")
    );
    (child, port)
}

#[test]
fn worker_rlimit_nofile_raises_the_limit() {
    let dir = TempDir::new("rl");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let conf = basic("worker_rlimit_nofile 900;", "");
    let (mut child, _) = start_with_soft_nofile(&dir, &conf, 512);
    let (soft, _) = nofile(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(soft, "900");
}

#[test]
fn worker_rlimit_nofile_beyond_what_is_allowed_warns() {
    let dir = TempDir::new("rl");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    // More than any kernel allows (fs.nr_open), even for root.
    let conf = basic(
        "worker_rlimit_nofile 4294967295;\nerror_log logs/error.log warn;",
        "",
    );
    let (mut child, port) = start_with_soft_nofile(&dir, &conf, 512);
    let (soft, hard) = nofile(child.id());
    // Still serving.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let r = Resp::parse(&read_to_close(&mut s)).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.status, 404);
    let log = dir.read("logs/error.log");
    assert!(
        log.contains("[warn]") && log.contains("setrlimit(RLIMIT_NOFILE, 4294967295) failed"),
        "{log}"
    );
    // It still raised the soft limit as far as the hard limit allows.
    assert_eq!(soft, hard);
}

#[test]
fn pid_file_written_and_removed_on_exit() {
    for sig in [libc::SIGTERM, libc::SIGQUIT, libc::SIGINT] {
        let mut v = Vireo::start(&basic("pid logs/vireo.pid;", ""));
        let pid_file = v.dir.path().join("logs/vireo.pid");
        assert_eq!(v.dir.read("logs/vireo.pid"), format!("{}\n", v.pid()));
        v.signal(sig);
        let st = v.wait_exit(5).expect("exits");
        assert_eq!(st.code(), Some(0), "signal {sig}: {}", v.stderr());
        assert!(!pid_file.exists(), "signal {sig}");
    }
}

#[test]
fn unwritable_pid_file_is_fatal() {
    let dir = TempDir::new("pid");
    let port = free_port();
    let conf = dir.write(
        "v.conf",
        format!("pid /nonexistent-vireo/v.pid;\nevents {{}}\nhttp {{ access_log off; server {{ listen 127.0.0.1:{port}; }} }}\n"),
    );
    let out = run_conf(&dir, &conf);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[emerg]")
            && err.contains(&format!(
                "open() \"/nonexistent-vireo/v.pid\" failed (2: No such file or directory) in {}:1",
                conf.display()
            )),
        "{err}"
    );
}

#[test]
fn unopenable_error_log_is_reported_with_its_directive() {
    let dir = TempDir::new("elog");
    let conf = "events {}\nerror_log /nonexistent-vireo/e.log;\nhttp { access_log off; }\n";
    let path = dir.write("t.conf", conf);
    let want = format!(
        "vireo: [emerg] open() \"/nonexistent-vireo/e.log\" failed (2: No such file or directory) in {}:2",
        path.display()
    );
    // -t, and starting.
    let o = test_conf(&dir, conf);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&want),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run_conf(&dir, &path);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&want),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A reload to it is refused, and says where.
    let v = Vireo::start(&basic("error_log logs/error.log notice;", ""));
    let conf_path = v.dir.path().join("vireo.conf");
    let good = v.dir.read("vireo.conf");
    v.dir.write(
        "vireo.conf",
        good.replace(
            "error_log logs/error.log notice;",
            "error_log /nonexistent-vireo/e.log;",
        ),
    );
    v.signal(libc::SIGHUP);
    let want = format!(
        "reload failed, still serving the previous configuration: open() \"/nonexistent-vireo/e.log\" failed (2: No such file or directory) in {}:1",
        conf_path.display()
    );
    assert!(
        eventually(5, || v.dir.read("logs/error.log").contains(&want)),
        "{}",
        v.dir.read("logs/error.log")
    );
    v.dir.write("html/x", "still here");
    assert_eq!(v.get("/x").text(), "still here");
}

#[test]
fn error_log_file_and_level() {
    // notice: start-up notices are written, in nginx's line format.
    let v = Vireo::start(&basic(
        "error_log logs/error.log notice;",
        "accept_mutex off;",
    ));
    let log = v.dir.read("logs/error.log");
    let line = log
        .lines()
        .find(|l| l.contains("listening on 127.0.0.1:"))
        .unwrap_or_else(|| panic!("{log}"));
    let b = line.as_bytes();
    assert!(
        b[..19].iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'/',
            10 => *c == b' ',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        }),
        "{line}"
    );
    assert!(
        line[19..].starts_with(&format!(" [notice] {}#", v.pid())),
        "{line}"
    );
    assert!(
        log.contains("[notice]") && log.contains("\"accept_mutex\" directive is ignored"),
        "{log}"
    );
    // Nothing went to stderr.
    assert!(!v.stderr().contains("listening on"), "{}", v.stderr());

    // warn: notices are filtered out, warnings and worse are kept.
    let mut v = Vireo::start(&basic(
        "error_log logs/error.log warn;",
        "accept_mutex off; worker_connections 1;",
    ));
    // A silent connection holds the only slot; the next ones are refused.
    let _hold = v.connect();
    let mut conns: Vec<TcpStream> = (0..3).map(|_| v.connect()).collect();
    for s in &mut conns {
        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
    }
    assert!(eventually(5, || v
        .dir
        .read("logs/error.log")
        .contains("worker_connections are not enough")));
    v.signal(libc::SIGTERM);
    assert!(v.wait_exit(5).is_some());
    let log = v.dir.read("logs/error.log");
    assert!(!log.contains("[notice]"), "{log}");
    assert!(
        !log.contains("listening on") && !log.contains("exiting"),
        "{log}"
    );
    assert!(log.contains("[alert]"), "{log}");

    // The default is stderr, level error: no notices there either.
    let mut v = Vireo::start(&basic("", ""));
    v.signal(libc::SIGTERM);
    assert!(v.wait_exit(5).is_some());
    assert!(!v.stderr().contains("[notice]"), "{}", v.stderr());
}

#[test]
fn sigterm_and_sigint_stop_at_once() {
    // SIGINT is the same fast stop.
    for sig in [libc::SIGTERM, libc::SIGINT] {
        fast_stop(sig);
    }
}

fn fast_stop(sig: i32) {
    let dir = TempDir::new("term");
    dir.write("html/big", vec![b'b'; 8 << 20]);
    let mut v = Vireo::start_in(
        dir,
        &basic("pid logs/v.pid;\nerror_log logs/error.log notice;", ""),
    );
    // One idle keep-alive connection and one stalled download.
    let mut idle = v.connect();
    assert_eq!(keepalive_get(&mut idle, "/nope").status, 404);
    let mut slow = v.connect();
    slow.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 1024];
    assert!(slow.read(&mut first).unwrap() > 0);
    let t = Instant::now();
    v.signal(sig);
    let st = v.wait_exit(5).expect("exits");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(st.code(), Some(0));
    assert!(!v.dir.path().join("logs/v.pid").exists());
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains("signal received, exiting now") && log.contains("exiting"),
        "{log}"
    );
    // The stalled download was cut short.
    slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let rest = read_to_close(&mut slow);
    assert!(rest.len() < 8 << 20);
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
fn sigquit_finishes_in_flight_requests() {
    const SIZE: usize = 16 << 20;
    let dir = TempDir::new("quit");
    let body: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    dir.write("html/big", &body);
    let conf = "pid logs/v.pid;\nerror_log logs/error.log notice;\nevents {}\nhttp {\n    access_log logs/access.log;\n    \
                sendfile on;\n    server {\n        listen 127.0.0.1:{port};\n        root {dir}/html;\n    }\n}\n";
    let mut v = Vireo::start_in(dir, conf);
    let port = v.port;
    // An idle keep-alive connection…
    let mut idle = v.connect();
    assert_eq!(keepalive_get(&mut idle, "/nope").status, 404);
    // …and a download read slowly.
    let mut slow = slow_client(port);
    slow.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = vec![0u8; 64 * 1024];
    slow.read_exact(&mut got).unwrap();

    v.signal(libc::SIGQUIT);
    // The idle connection is closed by the server.
    let t = Instant::now();
    assert!(read_to_close(&mut idle).is_empty());
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "idle connection kept {:?}",
        t.elapsed()
    );
    // New connections are refused once the listeners are closed.
    assert!(eventually(3, || TcpStream::connect(("127.0.0.1", port)).is_err()));
    // The download is still going, and the process waits for it.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        v.child.try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );
    got.extend(read_to_close(&mut slow));
    let resp = Resp::parse(&got).expect("response");
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), SIZE);
    assert!(resp.body == body, "body differs");
    let st = v.wait_exit(5).expect("exits after the download");
    assert_eq!(st.code(), Some(0));
    assert!(!v.dir.path().join("logs/v.pid").exists());
    let log = v.dir.read("logs/error.log");
    assert!(
        log.contains("signal received, gracefully shutting down"),
        "{log}"
    );
    assert!(
        v.dir
            .read("logs/access.log")
            .contains(&format!("\"GET /big HTTP/1.1\" 200 {SIZE} "))
    );
}

fn get_over(s: &mut impl ReadWrite, host: &str) -> Resp {
    s.write_all(
        format!("GET /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    Resp::parse(&out).expect("response")
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn ipv6_available() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

#[test]
fn listen_variants() {
    let dir = TempDir::new("lv");
    dir.write("html/who", "any");
    let sock = dir.path().join("v.sock");
    let (p_any, p_lo, p_v6) = (free_port(), free_port(), free_port());
    let v6 = ipv6_available();
    let v6_listen = if v6 {
        format!("listen [::1]:{p_v6};")
    } else {
        String::new()
    };
    let conf = format!(
        "events {{}}\nhttp {{\n access_log off;\n server {{\n  listen {{port}};\n  listen {p_any};\n  \
         listen 127.0.0.1:{p_lo} backlog=16;\n  {v6_listen}\n  listen unix:{};\n  root {{dir}}/html;\n }}\n}}\n",
        sock.display()
    );
    let v = Vireo::start_in(dir, &conf);
    // `listen PORT` is every IPv4 address.
    let mut s = TcpStream::connect(("127.0.0.1", p_any)).unwrap();
    assert_eq!(get_over(&mut s, "x").text(), "any");
    assert_eq!(v.get("/who").text(), "any");
    let mut s = TcpStream::connect(("127.0.0.1", p_lo)).unwrap();
    assert_eq!(get_over(&mut s, "x").text(), "any");
    if v6 {
        let mut s = TcpStream::connect(("::1", p_v6)).unwrap();
        assert_eq!(get_over(&mut s, "x").text(), "any");
    } else {
        eprintln!("no IPv6 loopback: [::1] not checked");
    }
    let mut u = connect_unix(&sock);
    u.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let r = get_over(&mut u, "x");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "any");
}

/// Listening sockets on `port` (IPv4), from /proc/net/tcp.
fn listen_sockets(port: u16) -> usize {
    let want = format!(":{port:04X} ");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && format!("{} ", f[1]).ends_with(&want) && f[3] == "0A"
        })
        .count()
}

#[test]
fn reuseport_gives_each_worker_a_socket() {
    let dir = TempDir::new("rp");
    dir.write("html/who", "rp");
    let p2 = free_port();
    let conf = format!(
        "worker_processes 2;\nevents {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}} reuseport backlog=64;\n  \
         listen 127.0.0.1:{p2};\n  root {{dir}}/html;\n }}\n}}\n"
    );
    let v = Vireo::start_in(dir, &conf);
    assert_eq!(
        listen_sockets(v.port),
        2,
        "one socket per worker with reuseport"
    );
    assert_eq!(listen_sockets(p2), 1, "one shared socket without");
    for _ in 0..20 {
        assert_eq!(v.get("/who").text(), "rp");
    }
    // The backlog reaches listen(2) (ss shows it as Send-Q of a listening socket).
    if let Ok(o) = std::process::Command::new("ss")
        .args(["-ltnH", &format!("sport = :{}", v.port)])
        .output()
        && o.status.success()
    {
        let out = String::from_utf8_lossy(&o.stdout);
        let sendq: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2))
            .collect();
        assert_eq!(sendq, ["64", "64"], "{out}");
    }
}

#[test]
fn bind_failure_is_reported() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = TempDir::new("bind");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let conf = dir.write(
        "v.conf",
        format!("pid logs/v.pid;\nevents {{}}\nhttp {{ access_log off; server {{ listen 127.0.0.1:{port}; }} }}\n"),
    );
    let out = run_conf(&dir, &conf);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[emerg]")
            && err.contains(&format!(
                "bind() to 127.0.0.1:{port} failed (98: Address already in use) in {}:3",
                conf.display()
            )),
        "{err}"
    );
    assert!(!dir.path().join("logs/v.pid").exists());
}

#[test]
fn wildcard_and_specific_address_share_a_port() {
    // nginx: `listen 80;` in one server and `listen 127.0.0.1:80;` in another both
    // work; a connection to 127.0.0.1 goes to the more specific one.
    let dir = TempDir::new("ws");
    dir.write("any/who", "any");
    dir.write("lo/who", "lo");
    let v = Vireo::start_in(
        dir,
        "worker_processes 2;\nevents {}\nhttp {\n access_log off;\n server {\n  listen {port};\n  root {dir}/any;\n }\n \
         server {\n  listen 127.0.0.1:{port};\n  root {dir}/lo;\n }\n}\n",
    );
    for _ in 0..4 {
        let mut s = TcpStream::connect(("127.0.0.1", v.port)).unwrap();
        assert_eq!(get_over(&mut s, "x").text(), "lo");
        // Another loopback address reaches the wildcard socket.
        let mut s = TcpStream::connect(("127.0.0.2", v.port)).unwrap();
        assert_eq!(get_over(&mut s, "x").text(), "any");
    }
}

#[test]
fn unix_socket_file_replaced_at_start_and_removed_at_exit() {
    let dir = TempDir::new("us");
    dir.write("html/who", "unix");
    let sock = dir.path().join("s.sock");
    // A stale socket file from an earlier run does not stop the start.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let conf = format!(
        "events {{}}\nhttp {{\n access_log off;\n server {{\n  listen 127.0.0.1:{{port}};\n  listen unix:{};\n  root {{dir}}/html;\n }}\n}}\n",
        sock.display()
    );
    let mut v = Vireo::start_in(dir, &conf);
    let mut u = connect_unix(&sock);
    u.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(get_over(&mut u, "x").text(), "unix");
    v.signal(libc::SIGTERM);
    assert_eq!(v.wait_exit(5).and_then(|s| s.code()), Some(0));
    assert!(!sock.exists(), "socket file left behind");
}

/// After a reopen that followed one request for /x: requests for /x until one
/// is logged in the new access.log (the server creates the file a moment before
/// it writes to it: a line written in between goes to the renamed file). Then no
/// line is lost: the renamed file and the new one hold one line per request.
fn logged_anew(v: &Vireo) {
    let mut n = 0;
    assert!(eventually(5, || {
        n += 1;
        assert_eq!(v.get("/x").status, 200);
        eventually(1, || !v.dir.read("logs/access.log").is_empty())
    }));
    let lines = |f: &str| v.dir.read(f).lines().map(str::to_owned).collect::<Vec<_>>();
    assert!(eventually(5, || {
        let (old, new) = (lines("logs/access.log.1"), lines("logs/access.log"));
        old.len() + new.len() == 1 + n && old.iter().chain(&new).all(|l| l == "/x")
    }));
}

#[test]
fn sigusr1_reopens_log_files() {
    let dir = TempDir::new("usr1");
    dir.write("html/x", "x");
    let conf = "error_log logs/error.log notice;\nevents {}\nhttp {\n log_format u '$uri';\n access_log logs/access.log u;\n \
                server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n";
    let v = Vireo::start_in(dir, conf);
    let logs = v.dir.path().join("logs");
    assert_eq!(v.get("/x?before").status, 200);
    assert!(eventually(5, || v.dir.read("logs/access.log") == "/x\n"));
    // Rotate as logrotate does: rename, then ask for a reopen.
    std::fs::rename(logs.join("access.log"), logs.join("access.log.1")).unwrap();
    std::fs::rename(logs.join("error.log"), logs.join("error.log.1")).unwrap();
    v.signal(libc::SIGUSR1);
    assert!(eventually(5, || logs.join("access.log").exists()
        && logs.join("error.log").exists()));
    logged_anew(&v);
    assert!(
        v.dir.read("logs/error.log.1").contains("[notice]"),
        "{}",
        v.dir.read("logs/error.log.1")
    );
    // Later messages go to the new error log.
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || v
        .dir
        .read("logs/error.log")
        .contains("configuration reloaded")));
}

#[test]
fn sighup_reloads_and_keeps_serving() {
    let dir = TempDir::new("hup");
    dir.write("html/x", "still here");
    let mut v = Vireo::start_in(
        dir,
        &basic("pid logs/v.pid;\nerror_log logs/error.log notice;", ""),
    );
    v.signal(libc::SIGHUP);
    assert!(
        eventually(5, || {
            let log = v.dir.read("logs/error.log");
            log.contains("signal received, reconfiguring") && log.contains("configuration reloaded")
        }),
        "{}",
        v.dir.read("logs/error.log")
    );
    assert!(v.child.try_wait().unwrap().is_none());
    assert_eq!(v.get("/x").text(), "still here");
    v.signal(libc::SIGTERM);
    assert_eq!(v.wait_exit(5).and_then(|s| s.code()), Some(0));
    assert!(!v.dir.path().join("logs/v.pid").exists());
}

/// CPU seconds (user + system) a process has used.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[test]
fn out_of_descriptors_pauses_accepting() {
    let dir = TempDir::new("emfile");
    dir.write("html/x", "x");
    // Few descriptors: the connections below exhaust them.
    let v = Vireo::start_in(
        dir,
        &basic(
            "worker_rlimit_nofile 48;\nerror_log logs/error.log notice;",
            "",
        ),
    );
    let mut held = Vec::new();
    for _ in 0..80 {
        // The kernel completes the handshakes (backlog) even when vireo cannot accept.
        held.push(v.connect());
    }
    assert!(
        eventually(5, || v.dir.read("logs/error.log").contains(
            "accept() failed (24: Too many open files), accepting paused for 100 ms"
        )),
        "{}",
        v.dir.read("logs/error.log")
    );
    // Paused, not spinning: little CPU while the descriptors stay exhausted.
    let before = cpu_seconds(v.pid());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_seconds(v.pid()) - before;
    assert!(
        used < 0.3,
        "{used} s of CPU in 1 s while out of descriptors"
    );
    // Descriptors come back: the server goes on, queued connections included.
    let mut queued = held.pop().unwrap();
    drop(held);
    queued.write_all(b"GET /x HTTP/1.0\r\n\r\n").unwrap();
    let r = Resp::parse(&read_to_close(&mut queued)).expect("a queued connection is served");
    assert_eq!(r.status, 200);
    assert!(eventually(5, || v.get("/x").status == 200));
}

#[test]
fn user_directive_drops_privileges_after_binding_a_low_port() {
    drop_privileges_to(None);
}

#[test]
fn user_directive_with_a_group() {
    drop_privileges_to(Some("daemon"));
}

/// Start as root with `user nobody [group]` on a port below 1024; check the
/// process's ids once it serves (skips, saying so, when not root).
fn drop_privileges_to(group: Option<&str>) {
    if !vireo::is_root() {
        eprintln!("not root: privilege drop not tested");
        return;
    }
    let Some((uid, primary)) = vireo::lookup_user("nobody").unwrap() else {
        eprintln!("no user nobody: privilege drop not tested");
        return;
    };
    let gid = match group {
        None => primary,
        Some(g) => match vireo::lookup_group(g).unwrap() {
            Some(gid) => gid,
            None => {
                eprintln!("no group {g}: privilege drop not tested");
                return;
            }
        },
    };
    // A free port below 1024, which only root may bind.
    // The two tests that call this run at once: each looks in its own range.
    let mut ports = if group.is_none() { 600..800 } else { 800..1000 };
    let Some(low) = ports.find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok()) else {
        eprintln!("no free low port: privilege drop not tested");
        return;
    };
    let dir = TempDir::new("user");
    dir.write("html/x", "as nobody");
    // The pid file's folder belongs to the user, so it can remove the file at exit.
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::os::unix::fs::chown(&run, Some(uid), Some(gid)).unwrap();
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let conf = dir.write(
        "v.conf",
        format!(
            "user nobody{};\npid run/v.pid;\nerror_log logs/error.log notice;\nevents {{}}\nhttp {{\n access_log off;\n server {{\n  \
             listen 127.0.0.1:{low};\n  root {}/html;\n }}\n}}\n",
            group.map(|g| format!(" {g}")).unwrap_or_default(),
            dir.path().display()
        ),
    );
    let mut child = std::process::Command::new(BIN)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    assert!(
        eventually(10, || TcpStream::connect(("127.0.0.1", low)).is_ok()),
        "{}",
        dir.read("stderr.log")
    );
    assert!(eventually(5, || dir
        .read("logs/error.log")
        .contains("running as user \"nobody\"")));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let ids = |key: &str| -> Vec<u32> {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap()
            .split_whitespace()
            .skip(1)
            .map(|n| n.parse().unwrap())
            .collect()
    };
    // Real, effective, saved and filesystem ids: all the user's, no way back.
    assert_eq!(ids("Uid:"), [uid; 4], "{status}");
    assert_eq!(ids("Gid:"), [gid; 4], "{status}");
    let mut s = TcpStream::connect(("127.0.0.1", low)).unwrap();
    s.write_all(b"GET /x HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(
        Resp::parse(&read_to_close(&mut s)).unwrap().text(),
        "as nobody"
    );
    assert_eq!(dir.read("run/v.pid"), format!("{}\n", child.id()));
    // SAFETY: our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(!run.join("v.pid").exists());
}

#[test]
fn user_directive_is_checked() {
    let dir = TempDir::new("userc");
    let o = test_conf(&dir, "user no-such-user-here;\nevents {}\n");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("getpwnam(\"no-such-user-here\") failed") && err.contains("t.conf:1"),
        "{err}"
    );
    let o = test_conf(&dir, "user nobody no-such-group-here;\nevents {}\n");
    assert_eq!(o.status.code(), Some(1));
}

/// `vireo -p DIR -c CONF -s SIGNAL`.
fn send(dir: &TempDir, conf: &std::path::Path, sig: &str) -> std::process::Output {
    std::process::Command::new(BIN)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(conf)
        .args(["-s", sig])
        .output()
        .unwrap()
}

#[test]
fn daemon_detaches_and_s_stop_ends_it() {
    let dir = TempDir::new("daemon");
    dir.write("html/x", "detached");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let port = free_port();
    let conf = dir.write(
        "v.conf",
        format!(
            "daemon on;\npid logs/v.pid;\nerror_log logs/error.log notice;\nevents {{}}\nhttp {{ access_log off; server {{ listen 127.0.0.1:{port}; root {}/html; }} }}\n",
            dir.path().display()
        ),
    );
    // The command returns once detached; the server runs on with another pid.
    let mut child = std::process::Command::new(BIN)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .spawn()
        .unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(eventually(5, || dir
        .read("logs/v.pid")
        .trim()
        .parse::<u32>()
        .is_ok()));
    let pid: u32 = dir.read("logs/v.pid").trim().parse().unwrap();
    assert_ne!(pid, child.id());
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /x HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(
        Resp::parse(&read_to_close(&mut s)).unwrap().text(),
        "detached"
    );
    // Its own session, no terminal.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(f[3], pid.to_string(), "session id: {stat}");
    let o = send(&dir, &conf, "stop");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(eventually(5, || !std::path::Path::new(&format!(
        "/proc/{pid}"
    ))
    .exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| s.contains(") Z"))));
    assert!(eventually(5, || !dir.path().join("logs/v.pid").exists()));
    assert!(
        dir.read("logs/error.log")
            .contains("signal received, exiting now")
    );
}

#[test]
fn s_signals_reach_the_server_of_the_pid_file() {
    let dir = TempDir::new("sig");
    dir.write("html/x", "x");
    let conf = "pid logs/v.pid;\nerror_log logs/error.log notice;\nevents {}\nhttp {\n log_format u '$uri';\n access_log logs/access.log u;\n \
                server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n }\n}\n";
    let mut v = Vireo::start_in(dir, conf);
    let path = v.dir.path().join("vireo.conf");
    let logs = v.dir.path().join("logs");
    assert_eq!(v.get("/x").status, 200);
    assert!(eventually(5, || v.dir.read("logs/access.log") == "/x\n"));
    // reopen, after a logrotate-style rename.
    std::fs::rename(logs.join("access.log"), logs.join("access.log.1")).unwrap();
    let o = send(&v.dir, &path, "reopen");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(eventually(5, || logs.join("access.log").exists()));
    logged_anew(&v);
    // reload.
    let o = send(&v.dir, &path, "reload");
    assert_eq!(o.status.code(), Some(0));
    assert!(eventually(5, || v
        .dir
        .read("logs/error.log")
        .contains("configuration reloaded")));
    // quit: graceful stop.
    let o = send(&v.dir, &path, "quit");
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(v.wait_exit(5).and_then(|s| s.code()), Some(0));
    assert!(
        v.dir
            .read("logs/error.log")
            .contains("gracefully shutting down")
    );
    // Nobody there any more: the pid file is gone.
    let o = send(&v.dir, &path, "stop");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("open() \"") && err.contains("v.pid\" failed (2: No such file or directory)"),
        "{err}"
    );
    // A stale pid file.
    v.dir.write("logs/v.pid", "999999999\n");
    let o = send(&v.dir, &path, "stop");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("(3: No such process)"));
    let o = run(&["-s", "restart"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid option: \"-s restart\""));
}
