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

impl Fpm {
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
