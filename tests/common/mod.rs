//! Test harness: start the built vireo binary with an inline configuration on
//! free loopback ports, and talk to it with raw bytes.
#![allow(dead_code)]

pub mod app;
pub mod dns;
pub mod fpm;
pub mod h2;
pub mod process;

pub use process::*;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_vireo");

/// A loopback port that refuses connections for the whole test process: it
/// is bound by a socket that never listens, so no other socket of the
/// machine (a test's own backend among them) can be handed it.
pub fn closed_port() -> u16 {
    static HELD: std::sync::Mutex<Vec<socket2::Socket>> = std::sync::Mutex::new(Vec::new());
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let port = s.local_addr().unwrap().as_socket().unwrap().port();
    HELD.lock().unwrap_or_else(|e| e.into_inner()).push(s);
    port
}

/// Debian's nginx as a backend in `dir` (its pid, error log and temporary
/// files there, in the foreground), with `http` the inside of its http block.
pub fn nginx_backend(dir: &TempDir, http: &str) -> Daemon {
    let d = dir.path().display();
    dir.write(
        "nginx.conf",
        format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/nginx.err;\nevents {{}}\nhttp {{\n  access_log off;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n  fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n{http}}}\n"
        ),
    );
    let child = Command::new("/usr/sbin/nginx")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(dir.path().join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx");
    Daemon(child)
}

/// Start `cmd` (a backend) with its output piped and wait for the `READY`
/// line it prints once it listens.
pub fn until_ready(mut cmd: Command) -> Daemon {
    use std::io::BufRead;
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "READY", "{cmd:?} did not start");
    Daemon(child)
}

/// tests/early_hints/backend.py on a free port: a backend that sends 103
/// (Early Hints) before each answer, over HTTP/1.1 or HTTP/2.
pub fn early_hints_backend() -> (Daemon, u16) {
    let port = free_port();
    let mut cmd = Command::new("python3");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/early_hints/backend.py"
    ))
    .arg(port.to_string());
    (until_ready(cmd), port)
}

/// Does process `pid` hold the socket listening on `port` (IPv4 or IPv6)?
/// Guards against talking to another server that took the same port.
pub fn listens_on(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port)
                && f.get(3) == Some(&"0A")
                && let Some(inode) = f.get(9)
            {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
    })
}

/// A running vireo. Killed on drop.
pub struct Vireo {
    pub child: Child,
    pub port: u16,
    pub dir: TempDir,
}

/// Replace `{port}`, `{port2}` and `{dir}` in a configuration template.
pub fn fill(template: &str, dir: &Path, port: u16, port2: u16) -> String {
    template
        .replace("{port}", &port.to_string())
        .replace("{port2}", &port2.to_string())
        .replace("{dir}", &dir.display().to_string())
}

impl Vireo {
    /// Start with a configuration template; `{dir}` is a fresh folder with `html/`
    /// in it, `{port}` a free port the server must listen on.
    pub fn start(template: &str) -> Vireo {
        Self::start_in(TempDir::new("srv"), template)
    }

    /// As `start`, in a prepared folder. A free port can be taken by someone else
    /// between probing and binding: then the start is retried on another port.
    pub fn start_in(dir: TempDir, template: &str) -> Vireo {
        Self::start_in_env(dir, template, &[])
    }

    /// As `start_in`, with environment variables set for the server (e.g. TZ).
    pub fn start_in_env(dir: TempDir, template: &str, env: &[(&str, &str)]) -> Vireo {
        std::fs::create_dir_all(dir.path().join("html")).unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let mut dir = Some(dir);
        for attempt in 1.. {
            let d = dir.take().unwrap();
            let port = free_port();
            let conf = fill(template, d.path(), port, free_port());
            let conf_path = d.write("vireo.conf", conf);
            let child = Command::new(BIN)
                .envs(env.iter().copied())
                .arg("-p")
                .arg(d.path())
                .arg("-c")
                .arg(&conf_path)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(d.path().join("stderr.log")).unwrap())
                .spawn()
                .unwrap();
            let mut v = Vireo {
                child,
                port,
                dir: d,
            };
            match v.wait_ready() {
                Ok(()) => return v,
                Err(e) if attempt < 3 && e.contains("Address already in use") => {
                    let _ = v.child.kill();
                    let _ = v.child.wait();
                    dir = Some(std::mem::replace(&mut v.dir, TempDir(PathBuf::new())));
                }
                Err(e) => panic!("{e}"),
            }
        }
        unreachable!()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && listens_on(self.child.id(), self.port)
            {
                return Ok(());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(format!(
                    "vireo exited ({st}): {}",
                    self.dir.read("stderr.log")
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(format!(
            "vireo did not listen: {}",
            self.dir.read("stderr.log")
        ))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Send raw bytes on a new connection and read until the server closes.
    pub fn raw(&self, req: &[u8]) -> Vec<u8> {
        let mut s = self.connect();
        s.write_all(req).unwrap();
        read_to_close(&mut s)
    }

    /// One GET with `Connection: close`; parsed.
    pub fn get(&self, path: &str) -> Resp {
        self.request(&format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        ))
    }

    /// A raw request text; the one response, parsed.
    pub fn request(&self, req: &str) -> Resp {
        Resp::parse(&self.raw(req.as_bytes())).expect("a response")
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Replace the configuration with `template` (filled as at start) and
    /// SIGHUP; wait until logs/error.log holds one more line with `expect`
    /// ("configuration reloaded", or the error a bad one gets).
    pub fn reload_with(&self, template: &str, expect: &str) {
        let log = || self.dir.read("logs/error.log");
        let before = log().matches(expect).count();
        std::fs::write(
            self.dir.path().join("vireo.conf"),
            fill(template, self.dir.path(), self.port, 0),
        )
        .unwrap();
        self.signal(libc::SIGHUP);
        assert!(
            eventually(10, || log().matches(expect).count() > before),
            "no new {expect:?} in\n{}",
            log()
        );
    }

    /// Wait for exit, up to `secs`.
    pub fn wait_exit(&mut self, secs: u64) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn stderr(&self) -> String {
        self.dir.read("stderr.log")
    }
}

impl Drop for Vireo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Read until EOF (or a read timeout / reset), returning what arrived.
pub fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

/// A parsed HTTP/1 response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// Parse one response from the front of `raw` (body by Content-Length, else the rest).
    pub fn parse(raw: &[u8]) -> Option<Resp> {
        Self::parse_one(raw).map(|(r, _)| r)
    }

    /// Parse one response; also return the bytes consumed.
    pub fn parse_one(raw: &[u8]) -> Option<(Resp, usize)> {
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = String::from_utf8_lossy(&raw[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let len = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        let chunked = headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
        // A whole chunked body is given without its framing (one cut short,
        // without its last chunk, as it came).
        if chunked
            && status != 304
            && let Some((body, used)) = try_dechunk_front(&raw[end..])
        {
            return Some((
                Resp {
                    status,
                    head,
                    headers,
                    body,
                },
                end + used,
            ));
        }
        let body_end = match len {
            Some(n) if status != 304 && raw.len() >= end + n => end + n,
            Some(_) if status == 304 => end,
            _ => raw.len(),
        };
        let body = raw[end..body_end].to_vec();
        Some((
            Resp {
                status,
                head,
                headers,
                body,
            },
            body_end,
        ))
    }

    /// Parse every response in a byte stream (pipelining); HEAD bodies must not be counted.
    pub fn parse_all(mut raw: &[u8]) -> Vec<Resp> {
        let mut out = Vec::new();
        while let Some((r, n)) = Self::parse_one(raw) {
            out.push(r);
            raw = &raw[n..];
        }
        out
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Run `vireo ARGS…` to completion.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// Write a configuration into `dir` and run `vireo -t -c` on it.
pub fn test_conf(dir: &TempDir, conf: &str) -> Output {
    let p = dir.write("t.conf", conf);
    Command::new(BIN)
        .arg("-p")
        .arg(dir.path())
        .arg("-t")
        .arg("-c")
        .arg(&p)
        .output()
        .unwrap()
}

/// The usual one-server static configuration: `{port}`, root `{dir}/html`, no access log.
pub const STATIC_CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
    }
}";

/// A /metrics page's figure: the sum of its samples whose labels include `labels`.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    let mut found = false;
    let mut sum = 0.0;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (series, value) = l.rsplit_once(' ').unwrap();
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        if n == name && labels.iter().all(|lb| rest.contains(lb)) {
            sum += value.parse::<f64>().unwrap();
            found = true;
        }
    }
    assert!(found, "no {name} {labels:?} in\n{text}");
    sum
}

/// logs/access.log's lines, once there are `n` (logs are buffered per worker).
pub fn access_lines(v: &Vireo, n: usize) -> Vec<String> {
    let read = || {
        v.dir
            .read("logs/access.log")
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    eventually(5, || read().len() >= n);
    read()
}

/// logs/error.log as it is now.
pub fn error_log(v: &Vireo) -> String {
    v.dir.read("logs/error.log")
}

/// SIGHUP, then wait until the server's /metrics counts `reloads` reloads in all.
pub fn reload_counted(v: &Vireo, reloads: f64) {
    v.signal(libc::SIGHUP);
    assert!(eventually(5, || metric(
        &v.get("/metrics").text(),
        "vireo_config_reloads_total",
        &[]
    ) == reloads));
}

/// Wait (bounded) until `f` holds; its last answer.
pub fn eventually(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Run `openssl ARGS…` in `dir`; its output (it must succeed).
pub fn openssl(dir: &TempDir, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Set a file's mtime to `secs` after the epoch.
pub fn set_mtime(path: &Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

/// Connect to a unix socket; the TCP port the harness waits for may answer a
/// moment before the unix socket of the same server is bound.
pub fn connect_unix(path: &Path) -> std::os::unix::net::UnixStream {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(u) => return u,
            Err(e) if Instant::now() >= end => panic!("connect {}: {e}", path.display()),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Run `vireo -p DIR -c CONF` to completion (for configurations that must fail).
pub fn run_conf(dir: &TempDir, conf: &Path) -> Output {
    Command::new(BIN)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(conf)
        .output()
        .unwrap()
}

/// Send `req` on a fresh connection followed by an innocent `GET /a.txt` (a
/// file holding "hello"): expect exactly one response with one of `codes`,
/// `Connection: close`, and the connection closed, the GET never answered.
pub fn refused(v: &Vireo, req: &[u8], codes: &[u16]) {
    let mut s = v.connect();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all = req.to_vec();
    all.extend_from_slice(b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let _ = s.write_all(&all);
    let t = Instant::now();
    let raw = read_to_close(&mut s);
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "not closed for {:?}",
        String::from_utf8_lossy(req)
    );
    let rs = Resp::parse_all(&raw);
    assert_eq!(
        rs.len(),
        1,
        "one response for {:?}: {:?}",
        String::from_utf8_lossy(req),
        String::from_utf8_lossy(&raw)
    );
    assert!(
        codes.contains(&rs[0].status),
        "{:?}: got {} want {codes:?}",
        String::from_utf8_lossy(req),
        rs[0].status
    );
    assert_eq!(rs[0].header("connection"), Some("close"));
    assert!(!String::from_utf8_lossy(&raw).contains("hello"));
}

/// Undo chunked framing at the front of `raw`: the body, and the bytes the
/// framing took (what follows is the next response).
pub fn dechunk_front(raw: &[u8]) -> (Vec<u8>, usize) {
    try_dechunk_front(raw).expect("a whole chunked body")
}

/// [`dechunk_front`], `None` when `raw` is not a whole chunked body
/// (trailer fields after the last chunk are skipped).
pub fn try_dechunk_front(mut raw: &[u8]) -> Option<(Vec<u8>, usize)> {
    let all = raw.len();
    let mut out = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n")?;
        let line = std::str::from_utf8(&raw[..eol]).ok()?;
        let n = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[eol + 2..];
        if n == 0 {
            // Trailer fields, then the empty line.
            loop {
                let eol = raw.windows(2).position(|w| w == b"\r\n")?;
                raw = &raw[eol + 2..];
                if eol == 0 {
                    return Some((out, all - raw.len()));
                }
            }
        }
        if raw.len() < n + 2 || &raw[n..n + 2] != b"\r\n" {
            return None;
        }
        out.extend_from_slice(&raw[..n]);
        raw = &raw[n + 2..];
    }
}

/// Undo chunked framing.
pub fn dechunk(raw: &[u8]) -> Vec<u8> {
    let (out, used) = dechunk_front(raw);
    assert_eq!(used, raw.len(), "nothing after the chunked body");
    out
}

/// A request head (text up to and with its empty line) read from a test
/// upstream's connection; `None` when the connection ends or fails first.
pub fn read_request_head(r: &mut impl std::io::BufRead) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" {
            return Some(head);
        }
    }
}

/// Put the repository's `conf/fastcgi_params` into `dir`.
pub fn copy_fastcgi_params(dir: &TempDir) {
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/conf/fastcgi_params"),
        dir.path().join("fastcgi_params"),
    )
    .unwrap();
}

/// GET `path` with curl over HTTP/2 (prior knowledge), gzip accepted: the
/// body, checked to come as a 200 gzip-encoded, decoded.
pub fn curl_h2_gzipped(port: u16, path: &str) -> String {
    let out = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "30",
            "--http2-prior-knowledge",
            "--compressed",
            "-D",
            "-",
        ])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("content-encoding: gzip"),
        "{head}"
    );
    body.to_string()
}

/// Each `(line, message)`: a server block holding `line` is refused by
/// `-t` with `message in FILE:4`.
pub fn assert_conf_errors(dir: &TempDir, cases: &[(&str, &str)]) {
    for (line, msg) in cases {
        let text = format!("events {{}}\nhttp {{\nserver {{\n{line}\n}}\n}}\n");
        let out = test_conf(dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{line}: {err}");
        let want = format!("{msg} in {}:4", dir.path().join("t.conf").display());
        assert!(err.contains(&want), "{line}: want {want}\n{err}");
    }
}

/// GET `path` over a kept-alive HTTP/1.1 connection, read up to the last
/// chunk: the head and the body with its chunked framing undone.
pub fn get_chunked(v: &Vireo, path: &str) -> (String, Vec<u8>) {
    let mut s = v.connect();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    while !got.ends_with(b"0\r\n\r\n") {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&b[..n]);
    }
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    (head, dechunk(&got[end..]))
}

/// The heads and bodies a [`service`] got, in order.
pub type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// A small HTTP server in threads (a backend, an authorization service).
pub struct Service {
    pub port: u16,
    pub seen: Seen,
}

/// Start a [`Service`], one request per connection: `answer` gets the head
/// (text) and body and returns the whole response; each head and body is
/// kept in `seen` before `answer` runs.
pub fn service(answer: impl Fn(&str, &[u8]) -> String + Send + Sync + 'static) -> Service {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen: Seen = Default::default();
    let log = seen.clone();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let (log, answer) = (log.clone(), answer.clone());
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut r = std::io::BufReader::new(s.try_clone().unwrap());
                let Some(head) = read_request_head(&mut r) else {
                    return;
                };
                let len = head
                    .to_ascii_lowercase()
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:")?.trim().parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                log.lock().unwrap().push((head.clone(), body.clone()));
                let reply = answer(&head, &body);
                let _ = s.write_all(reply.as_bytes());
            });
        }
    });
    Service { port, seen }
}

/// `line` in a server block is refused by `vireo -t` with `want`, naming
/// the file and its line.
pub fn refused_in_server(dir: &TempDir, line: &str, want: &str) {
    let out = test_conf(
        dir,
        &format!("events {{}}\nhttp {{\n server {{\n  {line}\n }}\n}}\n"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{line}");
    assert!(
        err.contains(want) && err.contains("t.conf:4"),
        "{line}: {err}"
    );
}
