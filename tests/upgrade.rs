//! Binary upgrade (USR2, then QUIT to the old binary) under load, a failed
//! upgrade, systemd socket activation, and the example systemd units.

mod common;
mod load;
use common::*;
use load::{Load, Plan};
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn kill(pid: i32, sig: i32) -> bool {
    // SAFETY: sending a signal to a process this test started (or its successor).
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Gone: no such process, or a zombie waiting for a parent to reap it.
fn gone(pid: i32) -> bool {
    // Reap it if it is our child (the first server); ECHILD otherwise.
    // SAFETY: waitpid with a null status pointer and WNOHANG.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}

fn read_pid(p: &Path) -> Option<i32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Kills whatever server processes are left when a test ends.
struct Reaper(Vec<PathBuf>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in &self.0 {
            if let Some(pid) = read_pid(p) {
                kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Copy the built binary to `to` as a new file (rename over the old one, as a
/// package upgrade does: the running process keeps the old inode).
fn install_binary(to: &Path) {
    let tmp = to.with_extension("new");
    std::fs::copy(BIN, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

/// A test folder with logs/ and bin/vireo (a copy of the built binary), and a
/// reaper that kills whatever its pid files name when the test ends.
fn setup(name: &str) -> (TempDir, PathBuf, Reaper) {
    let dir = TempDir::new(name);
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    std::fs::create_dir_all(dir.path().join("bin")).unwrap();
    let bin = dir.path().join("bin/vireo");
    install_binary(&bin);
    let reaper = Reaper(vec![
        dir.path().join("logs/v.pid"),
        dir.path().join("logs/v.pid.oldbin"),
    ]);
    (dir, bin, reaper)
}

/// Spawn a freshly installed binary. Another test thread that forks while
/// `install_binary` holds the copy open for writing keeps that descriptor
/// until its own exec, and exec then fails with ETXTBSY: try again shortly.
fn spawn(cmd: &mut std::process::Command) -> std::process::Child {
    for _ in 0..50 {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r.unwrap(),
        }
    }
    cmd.spawn().unwrap()
}

const SMALL: usize = 64;
const BIG: usize = 256 * 1024;

/// `extra`: more directives in the server.
fn conf(dir: &Path, port: u16, port2: u16, extra: &str) -> String {
    format!(
        "worker_processes 2;\npid logs/v.pid;\nerror_log logs/error.log notice;\nevents {{}}\nhttp {{\n access_log off;\n \
         keepalive_requests 1000000;\n server {{\n  listen 127.0.0.1:{port} reuseport;\n  listen 127.0.0.1:{port2};\n  root {}/html;\n  {extra}\n }}\n}}\n",
        dir.display()
    )
}

/// Start the installed binary; wait for its pid file.
fn start(dir: &TempDir, bin: &Path) -> (std::process::Child, u16, u16) {
    start_with(dir, bin, "")
}

/// As [`start`], with `extra` directives in the server.
fn start_with(dir: &TempDir, bin: &Path, extra: &str) -> (std::process::Child, u16, u16) {
    let (port, port2) = (free_port(), free_port());
    let conf_path = dir.write("vireo.conf", conf(dir.path(), port, port2, extra));
    let child = spawn(
        std::process::Command::new(bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap()),
    );
    assert!(
        eventually(10, || TcpStream::connect(("127.0.0.1", port)).is_ok()
            && TcpStream::connect(("127.0.0.1", port2)).is_ok()),
        "{}",
        dir.read("stderr.log")
    );
    (child, port, port2)
}

/// USR2 to the server in the pid file; the new server's pid once it is ready.
fn upgrade(dir: &TempDir, bin: &Path) -> (i32, i32) {
    let pid_file = dir.path().join("logs/v.pid");
    let oldbin = dir.path().join("logs/v.pid.oldbin");
    let old = read_pid(&pid_file).expect("pid file");
    assert!(kill(old, libc::SIGUSR2));
    assert!(
        eventually(10, || read_pid(&pid_file).is_some_and(|p| p != old)
            && read_pid(&oldbin) == Some(old)),
        "no new binary: {}",
        dir.read("logs/error.log")
    );
    let new = read_pid(&pid_file).unwrap();
    // It runs the file now on disk, not the one the old process was started from.
    let exe = std::fs::read_link(format!("/proc/{new}/exe")).unwrap();
    assert_eq!(exe, bin, "{exe:?}");
    (old, new)
}

#[test]
fn three_upgrades_under_load_lose_no_request() {
    let (dir, bin, _reaper) = setup("upg");
    dir.write("html/v", vec![b'v'; SMALL]);
    dir.write("html/big", vec![b'b'; BIG]);
    let (mut first, port, port2) = start(&dir, &bin);
    let load = Load::start(&Plan {
        ports: vec![port, port2],
        small: "/v",
        small_len: SMALL,
        big: "/big",
        big_len: BIG,
        keepalive: 6,
        oneshot: 3,
        slow: 2,
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut pids = vec![first.id() as i32];
    for i in 0..3 {
        install_binary(&bin);
        let (old, new) = upgrade(&dir, &bin);
        assert_eq!(old, *pids.last().unwrap());
        pids.push(new);
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        assert!(kill(old, libc::SIGQUIT));
        assert!(
            eventually(20, || gone(old)),
            "upgrade {i}: old binary still running: {}",
            dir.read("logs/error.log")
        );
        eprintln!("upgrade {i}: old binary {old} drained in {:?}", t.elapsed());
        assert!(!dir.path().join("logs/v.pid.oldbin").exists());
        std::thread::sleep(Duration::from_millis(300));
    }
    let report = load.finish();
    let _ = first.wait();
    eprintln!(
        "3 upgrades: {} requests ({} slow downloads), {} failed, {} resets",
        report.samples.len(),
        report.samples.iter().filter(|s| s.slow).count(),
        report.failures.len(),
        report.resets
    );
    assert!(
        report.failures.is_empty(),
        "{} failed: {:?}",
        report.failures.len(),
        &report.failures[..report.failures.len().min(10)]
    );
    assert_eq!(report.resets, 0);
    assert!(report.samples.len() > 1000, "{}", report.samples.len());
    let log = dir.read("logs/error.log");
    assert_eq!(
        log.matches("started by a binary upgrade").count(),
        3,
        "{log}"
    );
    assert_eq!(
        log.matches("handing over to the new binary").count(),
        3,
        "{log}"
    );
    assert!(
        !log.contains("[alert]") && !log.contains("[emerg]"),
        "{log}"
    );
    // The last one stops as usual and removes its pid file.
    let last = *pids.last().unwrap();
    assert!(kill(last, libc::SIGQUIT));
    assert!(eventually(10, || gone(last)));
    assert!(!dir.path().join("logs/v.pid").exists());
}

/// The old binary drains after an upgrade: its HTTP/2 connections get GOAWAY
/// at once (HTTP/1 ones wait for their next request, see above), idle ones
/// close, and it exits without waiting for their keepalive_timeout.
#[test]
fn old_binary_sends_goaway_to_its_http2_connections() {
    if !common::h2::have_python_h2() {
        return;
    }
    let (dir, bin, _reaper) = setup("upgh2");
    dir.write("html/a.txt", "0123456789");
    let (mut first, port, _) = start_with(&dir, &bin, "http2 on; keepalive_timeout 60s;");
    let old = first.id() as i32;
    // The script asks on its connection (to the old binary), sends USR2, and
    // QUIT 1.5 s later.
    let r = common::h2::script_at(port, "drain.py", &[&old.to_string(), "USR2+QUIT", "idle"]);
    eprintln!("{}", r.0);
    assert_eq!(r.get("early"), "0", "GOAWAY before QUIT: {}", r.0);
    assert!(r.goaway(0), "{}", r.0);
    assert!(r.num("goaway_after") < 1.0, "{}", r.0);
    assert!(
        eventually(5, || gone(old)),
        "{}",
        dir.read("logs/error.log")
    );
    let _ = first.wait();
    // The new binary serves.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(
        Resp::parse(&read_to_close(&mut s)).unwrap().text(),
        "0123456789"
    );
}

#[test]
fn failed_upgrade_keeps_the_old_binary_in_charge() {
    let (dir, bin, _reaper) = setup("upgf");
    dir.write("html/v", "old");
    let pid_file = dir.path().join("logs/v.pid");
    let (mut child, port, _) = start(&dir, &bin);
    let old = child.id() as i32;
    // The new binary will read a configuration it cannot use.
    let c = dir
        .read("vireo.conf")
        .replace("events {}", "events {} nonsense;");
    dir.write("vireo.conf", c);
    assert!(kill(old, libc::SIGUSR2));
    assert!(
        eventually(10, || dir
            .read("logs/error.log")
            .contains("the new binary (pid")),
        "{}",
        dir.read("logs/error.log")
    );
    assert!(eventually(5, || read_pid(&pid_file) == Some(old)));
    assert!(!dir.path().join("logs/v.pid.oldbin").exists());
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /v HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(Resp::parse(&read_to_close(&mut s)).unwrap().text(), "old");
    assert!(kill(old, libc::SIGTERM));
    let _ = child.wait();
    assert!(!pid_file.exists());
}

#[test]
fn systemd_socket_activation_and_notify() {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let dir = TempDir::new("sd");
    dir.write("html/v", "activated");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    // The "systemd" side: the listening socket and the notification socket.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let conf = dir.write(
        "vireo.conf",
        format!(
            "error_log logs/error.log notice;\nevents {{}}\nhttp {{ access_log off; server {{ listen 127.0.0.1:{port}; root {}/html; }} }}\n",
            dir.path().display()
        ),
    );
    let fd = listener.as_raw_fd();
    let mut cmd = std::process::Command::new("sh");
    // LISTEN_PID must be the server's own pid: the shell's, kept by exec.
    cmd.arg("-c")
        .arg("export LISTEN_PID=$$ LISTEN_FDS=1; exec \"$0\" \"$@\"")
        .arg(BIN)
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(&conf)
        .env("NOTIFY_SOCKET", &notify_path)
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap());
    // SAFETY: dup2 and fcntl are async-signal-safe; the socket ends up on
    // descriptor 3 without FD_CLOEXEC, as systemd passes it (dup2 onto itself
    // would leave the flag set).
    unsafe {
        cmd.pre_exec(move || {
            let ok = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(fd, 3) == 3
            };
            if !ok {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut buf = [0u8; 256];
    let n = notify
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no READY notification ({e}): {}", dir.read("stderr.log")));
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(msg.contains("READY=1"), "{msg}");
    assert!(msg.contains(&format!("MAINPID={}", child.id())), "{msg}");
    // It serves on the socket it was given: binding it itself would have
    // failed, since this process still holds it listening.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /v HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(
        Resp::parse(&read_to_close(&mut s)).unwrap().text(),
        "activated"
    );
    // SAFETY: our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
    let n = notify.recv(&mut buf).expect("a STOPPING notification");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    assert_eq!(
        child.wait().unwrap().code(),
        Some(0),
        "{}",
        dir.read("stderr.log")
    );
}

#[test]
fn example_systemd_units_are_valid() {
    if std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("no systemd-analyze: the example units are not checked");
        return;
    }
    let dir = TempDir::new("units");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let service = std::fs::read_to_string(root.join("contrib/vireo.service")).unwrap();
    // What docs/operations.md promises of the unit.
    for line in [
        "Type=notify",
        "NotifyAccess=all",
        "ExecReload=/usr/sbin/vireo -c /etc/vireo/vireo.conf -s reload",
        "KillSignal=SIGQUIT",
    ] {
        assert!(service.lines().any(|l| l == line), "no {line}");
    }
    // systemd checks that the commands exist: point them at the built binary.
    dir.write("vireo.service", service.replace("/usr/sbin/vireo", BIN));
    dir.write(
        "vireo.socket",
        std::fs::read_to_string(root.join("contrib/vireo.socket")).unwrap(),
    );
    let o = std::process::Command::new("systemd-analyze")
        .current_dir(dir.path())
        .args(["verify", "--man=no", "./vireo.socket", "./vireo.service"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.trim().is_empty(), "{err}");
}
