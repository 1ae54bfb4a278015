//! A php-fpm master for FastCGI tests (Debian's php-fpm8.2), on a free port
//! with its own pool, stopped on drop.

use super::*;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A php-fpm master with a static pool, killed on drop.
pub struct Fpm {
    child: Child,
    pub port: u16,
    dir: TempDir,
}

fn fpm_binary() -> Option<&'static str> {
    ["php-fpm8.2", "/usr/sbin/php-fpm8.2", "php-fpm"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("-v")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

impl Fpm {
    /// A pool of `children` on a free port; `None` (with a SKIP message) when
    /// php-fpm is not installed.
    pub fn start(children: u32) -> Option<Fpm> {
        let Some(bin) = fpm_binary() else {
            eprintln!("SKIP: php-fpm is not installed (apt-get install php-fpm)");
            return None;
        };
        let mut dir = TempDir::new("fpm");
        for _ in 0..3 {
            let port = free_port();
            let conf = format!(
                "[global]\nerror_log = {d}/fpm.log\ndaemonize = no\npid = {d}/fpm.pid\n\
                 [www]\nlisten = 127.0.0.1:{port}\npm = static\npm.max_children = {children}\n\
                 pm.status_path = /fpm-status\n\
                 catch_workers_output = yes\nphp_admin_value[post_max_size] = 64M\n\
                 php_admin_value[upload_max_filesize] = 64M\nphp_admin_value[memory_limit] = 256M\n\
                 php_admin_value[max_execution_time] = 30\n",
                d = dir.path().display()
            );
            let path = dir.write("fpm.conf", conf);
            let child = Command::new(bin)
                .args(["-F", "-R", "-n", "-y"])
                .arg(&path)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .ok()?;
            let mut f = Fpm { child, port, dir };
            if eventually(10, || TcpStream::connect(("127.0.0.1", port)).is_ok()) {
                return Some(f);
            }
            f.stop();
            dir = std::mem::replace(&mut f.dir, TempDir(std::path::PathBuf::new()));
        }
        panic!("php-fpm did not start");
    }
}

/// One FastCGI record of type `t` for request 1, padded to a multiple of 8.
pub fn record(t: u8, content: &[u8]) -> Vec<u8> {
    let pad = (8 - content.len() % 8) % 8;
    let mut r = vec![1, t, 0, 1];
    r.extend_from_slice(&(content.len() as u16).to_be_bytes());
    r.extend_from_slice(&[pad as u8, 0]);
    r.extend_from_slice(content);
    r.resize(r.len() + pad, 0);
    r
}

impl Fpm {
    /// php-fpm's status page (`pm.status_path`), asked over FastCGI on a
    /// connection of its own.
    pub fn status(&self) -> String {
        use std::io::{Read, Write};
        let mut params = Vec::new();
        for (n, v) in [
            ("SCRIPT_NAME", "/fpm-status"),
            ("SCRIPT_FILENAME", "/fpm-status"),
            ("REQUEST_METHOD", "GET"),
            ("QUERY_STRING", ""),
        ] {
            params.extend_from_slice(&[n.len() as u8, v.len() as u8]);
            params.extend_from_slice(n.as_bytes());
            params.extend_from_slice(v.as_bytes());
        }
        let req = [
            record(1, &[0, 1, 0, 0, 0, 0, 0, 0]),
            record(4, &params),
            record(4, b""),
            record(5, b""),
        ]
        .concat();
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&req).unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        // The STDOUT records' content, one after another.
        let mut out = Vec::new();
        let mut at = 0;
        while at + 8 <= raw.len() {
            let len = u16::from_be_bytes([raw[at + 4], raw[at + 5]]) as usize;
            let pad = raw[at + 6] as usize;
            if raw[at + 1] == 6 {
                out.extend_from_slice(&raw[at + 8..(at + 8 + len).min(raw.len())]);
            }
            at += 8 + len + pad;
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// SIGTERM: the master ends its children (SIGKILL would orphan them).
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Fpm {
    fn drop(&mut self) {
        self.stop();
    }
}
