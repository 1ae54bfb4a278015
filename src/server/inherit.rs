//! Listening sockets handed over at start: by the old binary during an upgrade
//! (`VIREO_LISTEN_FDS`) or by systemd socket activation (`LISTEN_FDS` and
//! `LISTEN_PID`). Each is checked (a listening stream socket) and known by the
//! address it is bound to, which is what the configuration's `listen` is matched
//! against: the environment is a list of descriptor numbers, not a source of truth.

use super::socket::Bound;
use crate::conf::model::ListenAddr;

/// Variable the old binary passes to the new one: `fd=address;fd=address;…`
/// (the address is informational).
pub const ENV: &str = "VIREO_LISTEN_FDS";

/// Sockets found at start.
#[derive(Default)]
pub struct Inherited {
    pub sockets: Vec<(ListenAddr, Bound)>,
    /// Started by an old binary (`VIREO_LISTEN_FDS` present).
    pub upgrade: bool,
    /// Problems to log once the error log is open.
    pub notes: Vec<String>,
    /// The QUIC datagram link to the old binary (`crate::http::h3::link`).
    pub quic_link: Option<std::os::fd::OwnedFd>,
}

impl Inherited {
    /// Take every socket bound to `addr`.
    pub fn take(&mut self, addr: &ListenAddr) -> Vec<Bound> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.sockets.len() {
            if self.sockets[i].0 == *addr {
                out.push(self.sockets.remove(i).1);
            } else {
                i += 1;
            }
        }
        out
    }
}

/// Adopt the sockets passed to this process. Call once, first thing.
pub fn collect() -> Inherited {
    let mut inh = Inherited::default();
    let mut fds: Vec<i32> = Vec::new();
    if let Some(v) = std::env::var_os(ENV) {
        inh.upgrade = true;
        for item in v.to_string_lossy().split(';').filter(|s| !s.is_empty()) {
            let num = item.split('=').next().unwrap_or("");
            match num.trim().parse::<i32>() {
                Ok(fd) => fds.push(fd),
                Err(_) => inh.notes.push(format!(
                    "invalid socket number \"{item}\" in {ENV}, ignored"
                )),
            }
        }
    }
    if let Some(v) = std::env::var_os(crate::http::h3::link::ENV) {
        let v = v.to_string_lossy();
        match v.trim().parse::<i32>() {
            Ok(fd) => match crate::sys::adopt_fd(fd) {
                Ok(fd) => inh.quic_link = Some(fd),
                Err(e) => inh
                    .notes
                    .push(format!("QUIC link descriptor {fd} ignored: {e}")),
            },
            Err(_) => inh.notes.push(format!(
                "invalid descriptor \"{v}\" in {}, ignored",
                crate::http::h3::link::ENV
            )),
        }
    }
    // systemd: descriptors 3 … 3+N-1, meant for this very process.
    let for_us = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        == Some(std::process::id());
    if for_us
        && let Some(n) = std::env::var("LISTEN_FDS")
            .ok()
            .and_then(|n| n.parse::<i32>().ok())
    {
        fds.extend(3..3 + n.clamp(0, 1024));
    }
    fds.sort_unstable();
    fds.dedup();
    for fd in fds {
        let adopted = crate::sys::adopt_fd(fd).and_then(Bound::adopt);
        match adopted {
            Ok(s) => inh.sockets.push(s),
            Err(e) => inh
                .notes
                .push(format!("inherited descriptor {fd} ignored: {e}")),
        }
    }
    inh
}

/// The value of [`ENV`] for `sockets`.
pub fn env_value<'a>(sockets: impl Iterator<Item = (i32, &'a ListenAddr)>) -> String {
    let mut v = String::new();
    for (fd, addr) in sockets {
        v.push_str(&format!("{fd}={addr};"));
    }
    v
}
