//! An application server a test starts (uwsgi, a Perl SCGI daemon): a
//! process listening on a TCP port or a unix socket, stopped on drop.

use super::*;
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
