//! An application server a test starts (uwsgi, a Perl SCGI daemon): a
//! process listening on a TCP port or a unix socket, stopped on drop.

use super::*;
use std::io::Write;
use std::process::{Child, Command, Stdio};

/// A running application server, killed (SIGTERM, then SIGKILL) on drop.
pub struct App {
    child: Child,
}

impl App {
    /// Start `cmd` and wait until `ready` (it listens); `None` with a SKIP
    /// message when `cmd[0]` is not installed (`install` says how to get it).
    pub fn start(cmd: &[&str], install: &str, ready: impl FnMut() -> bool) -> Option<App> {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {}", cmd[0])])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            eprintln!("SKIP: {} is not installed ({install})", cmd[0]);
            return None;
        }
        let child = Command::new(cmd[0])
            .args(&cmd[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let app = App { child };
        assert!(eventually(10, ready), "{} did not start", cmd.join(" "));
        Some(app)
    }

    /// Listening on 127.0.0.1:`port`.
    pub fn tcp(port: u16) -> impl FnMut() -> bool {
        move || TcpStream::connect(("127.0.0.1", port)).is_ok()
    }

    /// Listening on the unix socket `path`.
    pub fn unix(path: PathBuf) -> impl FnMut() -> bool {
        move || std::os::unix::net::UnixStream::connect(&path).is_ok()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        if !eventually(5, || matches!(self.child.try_wait(), Ok(Some(_)))) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The lines of a reply from an application that prints its environment
/// (`NAME=value` a line, then `BODY=length md5`).
pub fn env_lines(r: &Resp) -> Vec<String> {
    r.text().lines().map(str::to_string).collect()
}

/// The `BODY=length md5` line such an application prints for `body`.
pub fn body_line(body: &[u8]) -> String {
    use std::io::Write;
    let mut md5 = Command::new("md5sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    md5.stdin.take().unwrap().write_all(body).unwrap();
    let out = md5.wait_with_output().unwrap();
    format!(
        "BODY={} {}",
        body.len(),
        &String::from_utf8_lossy(&out.stdout)[..32]
    )
}

/// POST `body` with its Content-Length, then `hello` chunked: both replies'
/// environments.
pub fn post_both(v: &Vireo, body: &[u8]) -> (Vec<String>, Vec<String>) {
    let mut s = v.connect();
    write!(
        s,
        "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let whole = Resp::parse(&read_to_close(&mut s)).unwrap();
    let chunked = v.request(
        "POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    );
    (env_lines(&whole), env_lines(&chunked))
}

/// Bodies reach the application whole and with their length, with request
/// buffering and without it (`off`: the protocol's
/// `*_request_buffering off;`): a POST with a Content-Length, and a chunked
/// one, which is read whole first so that the application gets its length.
/// `start` starts a vireo with the extra directives it is given.
pub fn check_posts(start: impl Fn(&str) -> Vireo, off: &str) {
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    for extra in ["", off] {
        let v = start(extra);
        let (whole, chunked) = post_both(&v, &body);
        assert!(whole.contains(&body_line(&body)), "{extra}: {whole:?}");
        assert!(whole.contains(&format!("CONTENT_LENGTH={}", body.len())));
        assert!(
            chunked.contains(&"CONTENT_LENGTH=5".to_string()),
            "{chunked:?}"
        );
        assert!(chunked.contains(&body_line(b"hello")), "{chunked:?}");
    }
}

/// `/big?mb=N` streams N MB of `x`, chunked to an HTTP/1.1 client.
pub fn check_big(v: &Vireo, mb: usize) {
    let (head, body) = get_chunked(v, &format!("/big?mb={mb}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body.len(), mb << 20);
    assert!(body.iter().all(|&b| b == b'x'));
}
