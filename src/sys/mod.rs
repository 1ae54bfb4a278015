//! Small syscall shims; the only place for `unsafe`.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

/// `sendfile(2)` from `file` at `*offset` to `sock`, at most `count` bytes; advances `offset`.
pub fn sendfile(
    sock: RawFd,
    file: &impl AsRawFd,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off = *offset as libc::off_t;
    // SAFETY: both descriptors are open for the duration of the call and `off` is a valid
    // pointer to a local; the kernel writes only to `off`.
    let n = unsafe { libc::sendfile(sock, file.as_raw_fd(), &mut off, count) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    *offset = off as u64;
    Ok(n as usize)
}

/// `send(2)` with `MSG_MORE` when `more`, so a head and the file that follows leave together.
pub fn send(sock: RawFd, buf: &[u8], more: bool) -> io::Result<usize> {
    let flags = libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    // SAFETY: `buf` is a valid slice for the call's duration.
    let n = unsafe { libc::send(sock, buf.as_ptr().cast(), buf.len(), flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Is the process running as root (effective uid 0)?
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Raise RLIMIT_NOFILE to `want`; returns the limit in force afterwards.
pub fn raise_nofile(want: u64) -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let new = libc::rlimit {
        rlim_cur: want as libc::rlim_t,
        rlim_max: lim.rlim_max.max(want as libc::rlim_t),
    };
    // SAFETY: `new` is a valid pointer to an initialised rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } != 0 {
        let err = io::Error::last_os_error();
        let capped = libc::rlimit {
            rlim_cur: lim.rlim_max.min(want as libc::rlim_t),
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &capped) };
        return Err(err);
    }
    Ok(want)
}

/// The local address of a connected socket (getsockname).
pub fn local_addr(fd: RawFd) -> Option<std::net::SocketAddr> {
    // SAFETY: the caller's socket is open for the duration of this call; the
    // borrowed descriptor does not outlive it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd).local_addr().ok()?.as_socket()
}
