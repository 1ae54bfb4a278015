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

/// `pread(2)` of up to `count` bytes of `file` at `offset`, appended to `buf`
/// in room that is not zeroed first (the kernel fills it); the bytes read.
pub fn pread_append(
    file: &impl AsRawFd,
    buf: &mut bytes::BytesMut,
    count: usize,
    offset: u64,
) -> io::Result<usize> {
    buf.reserve(count);
    let room = &mut buf.spare_capacity_mut()[..count];
    // SAFETY: `room` is writable memory of `count` bytes owned by `buf`; the
    // kernel writes at most `count` bytes into it.
    let n = unsafe {
        libc::pread(
            file.as_raw_fd(),
            room.as_mut_ptr().cast(),
            count,
            offset as libc::off_t,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel initialised the first `n` (≤ `count`) bytes of the room.
    unsafe { buf.set_len(buf.len() + n as usize) };
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

/// `recv(2)` with `MSG_PEEK`: what is queued on `sock`, left there for the next read.
pub fn peek(sock: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, writable slice for the call's duration.
    let n = unsafe { libc::recv(sock, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_PEEK) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `ioctl(FIONREAD)`: how many bytes are queued on `sock` to be read.
pub fn queued_bytes(sock: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, valid for the call.
    if unsafe { libc::ioctl(sock, libc::FIONREAD, &mut n) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.max(0) as usize)
}

/// `recv(2)`: take up to `buf.len()` queued bytes from `sock`.
pub fn recv(sock: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a valid, writable slice for the call's duration.
    let n = unsafe { libc::recv(sock, buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// A mio poll (an epoll set of its own) registered with the current tokio
/// runtime for read readiness, so a task can wait on every socket in it.
pub fn async_poll(poll: mio::Poll) -> io::Result<tokio::io::unix::AsyncFd<mio::Poll>> {
    let interest = tokio::io::Interest::READABLE;
    // SAFETY: the `AsyncFd` owns the poll, so its descriptor stays open for as
    // long as it is registered, and is deregistered before it closes.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(poll, interest) }
        .map_err(|e| e.into_parts().1)
}

/// `inner`, which owns its descriptor, registered with the current tokio
/// runtime for `interest`; on failure it comes back with the error.
pub fn register<T: AsRawFd + Into<std::os::fd::OwnedFd>>(
    inner: T,
    interest: tokio::io::Interest,
) -> Result<tokio::io::unix::AsyncFd<T>, (T, io::Error)> {
    // SAFETY: the `AsyncFd` owns `inner`, which owns the descriptor (it
    // converts into an `OwnedFd`), so the descriptor stays open for as long
    // as it is registered, and is deregistered before it closes.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(inner, interest) }
        .map_err(|e| e.into_parts())
}

/// `recv(2)` into `buf`'s spare capacity, which is not zeroed first (the
/// kernel fills it); the bytes read.
pub fn recv_append(sock: RawFd, buf: &mut bytes::BytesMut) -> io::Result<usize> {
    let room = buf.spare_capacity_mut();
    // SAFETY: `room` is writable memory owned by `buf`; the kernel writes at
    // most its length.
    let n = unsafe { libc::recv(sock, room.as_mut_ptr().cast(), room.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel initialised the first `n` bytes of the room.
    unsafe { buf.set_len(buf.len() + n as usize) };
    Ok(n as usize)
}

/// `shutdown(2)` of the write side: a FIN after what is queued.
pub fn shutdown_write(sock: RawFd) -> io::Result<()> {
    // SAFETY: no memory is passed.
    if unsafe { libc::shutdown(sock, libc::SHUT_WR) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// SO_LINGER with a zero timeout: close(2) resets the connection instead of
/// sending a FIN.
pub fn set_linger_zero(sock: RawFd) -> io::Result<()> {
    // SAFETY: the caller's socket is open for the duration of this call; the
    // borrowed descriptor does not outlive it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(sock) };
    socket2::SockRef::from(&fd).set_linger(Some(std::time::Duration::ZERO))
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

/// `SO_RCVLOWAT`: the socket reads as readable (epoll, and wakes its reader)
/// only once `bytes` are queued, or at end of stream or an error.
pub fn set_recv_lowat(fd: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)
}

/// Spawn `cmd` with the descriptors `keep` left open across its exec: their
/// FD_CLOEXEC flag is cleared in the child only, between fork and exec, so no
/// other program this process might start inherits them (binary upgrade).
pub fn spawn_keeping_fds(
    cmd: &mut std::process::Command,
    keep: Vec<RawFd>,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls
    // fcntl, which is async-signal-safe; it does not allocate (`keep` was
    // allocated before the fork and is only read).
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &keep {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Take ownership of a descriptor inherited from the parent process (binary
/// upgrade, systemd socket activation). The caller passes each number once.
pub fn adopt_fd(fd: RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if fd <= 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("descriptor {fd} is a standard stream"),
        ));
    }
    // SAFETY: F_GETFD only inspects the descriptor table.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above), was inherited across exec,
    // and nothing else in this process owns it: the caller adopts each number
    // once, before any other descriptor of this process could take that number.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Send `sig` to process `pid` (`sig` 0: does it exist?).
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid PID number \"{pid}\""),
        ));
    }
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A user account: its uid and primary gid (getpwnam).
pub fn lookup_user(name: &str) -> io::Result<Option<(u32, u32)>> {
    let cname = std::ffi::CString::new(name)?;
    let mut buf = vec![0u8; 16384];
    // SAFETY: an all-zero passwd is a valid value for getpwnam_r to fill.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pw`'s
    // string fields (none are read).
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok((!out.is_null()).then_some((pw.pw_uid, pw.pw_gid)))
}

/// A group's gid (getgrnam).
pub fn lookup_group(name: &str) -> io::Result<Option<u32>> {
    let cname = std::ffi::CString::new(name)?;
    let mut buf = vec![0u8; 65536];
    // SAFETY: an all-zero group is a valid value for getgrnam_r to fill.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `lookup_user`.
    let rc = unsafe {
        libc::getgrnam_r(
            cname.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut out,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok((!out.is_null()).then_some(gr.gr_gid))
}

/// Become `user` (uid, gid; supplementary groups from the group database):
/// initgroups, setgid, setuid, in that order. glibc applies each to every thread.
/// With `keep_net_raw`, CAP_NET_RAW stays permitted and effective (and no
/// other capability), for transparent binds.
pub fn drop_privileges(user: &str, uid: u32, gid: u32, keep_net_raw: bool) -> io::Result<()> {
    let cname = std::ffi::CString::new(user)?;
    // SAFETY: `cname` is a valid C string; the calls have no other preconditions.
    unsafe {
        if libc::initgroups(cname.as_ptr(), gid) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::setgid(gid) != 0 {
            return Err(io::Error::last_os_error());
        }
        if keep_net_raw && libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::setuid(uid) != 0 {
            return Err(io::Error::last_os_error());
        }
        // Root must not be regainable.
        if uid != 0 && libc::setuid(0) == 0 {
            return Err(io::Error::other(
                "privileges could be regained after setuid",
            ));
        }
    }
    if keep_net_raw && uid != 0 {
        keep_only_net_raw()?;
    }
    Ok(())
}

/// capset(2): CAP_NET_RAW permitted and effective, nothing else.
fn keep_only_net_raw() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_NET_RAW: u32 = 13;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [
        Data {
            effective: 1 << CAP_NET_RAW,
            permitted: 1 << CAP_NET_RAW,
            inheritable: 0,
        },
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
    ];
    // SAFETY: the header and the two data words are the layout capset(2)
    // takes for version 3, alive for the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Detach from the terminal: fork (the parent exits at once with status 0),
/// start a new session, and point stdin and stdout (and stderr unless
/// `keep_stderr`) at /dev/null. Call only while the process has one thread.
pub fn daemonize(keep_stderr: bool) -> io::Result<()> {
    // SAFETY: the process is single-threaded here (documented precondition), so
    // the child may go on running arbitrary code. The parent leaves with _exit,
    // running no destructor that could touch descriptors shared with the child.
    unsafe {
        match libc::fork() {
            -1 => return Err(io::Error::last_os_error()),
            0 => {}
            _ => libc::_exit(0),
        }
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    let targets: &[RawFd] = if keep_stderr { &[0, 1] } else { &[0, 1, 2] };
    for &t in targets {
        // SAFETY: dup2 onto a standard stream number; both descriptors are open.
        if unsafe { libc::dup2(null.as_raw_fd(), t) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Number of threads of this process (from /proc), to check `daemonize`'s precondition.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count())
}

/// Bytes free for an unprivileged user on the file system holding `path`
/// (statvfs: available blocks × fragment size), as `min_free` counts them.
pub fn free_space(path: &std::path::Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: statvfs is plain data; zeroed is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `st` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// Milliseconds since the Unix epoch from the coarse real-time clock (a few ms
/// of resolution, cheaper than the precise clock: request-duration histograms).
pub fn coarse_unix_millis() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// A socket seen as blocking-style `Read`/`Write` for code that moves bytes
/// itself (the TLS engine): every call is one non-blocking syscall, so
/// `WouldBlock` comes back as an error for the caller's readiness handling.
pub struct FdIo(pub RawFd);

impl io::Read for FdIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its length for the call's duration.
        unsafe { self.read_raw(buf.as_mut_ptr().cast(), buf.len()) }
    }
}

impl FdIo {
    /// read(2) of at most `len` bytes to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes for the call's duration.
    unsafe fn read_raw(&self, dst: *mut libc::c_void, len: usize) -> io::Result<usize> {
        // SAFETY: the caller's promise.
        let n = unsafe { libc::read(self.0, dst, len) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// One read(2) into the room `buf` has left, which it need not have
    /// initialised (a codec's spare capacity: zeroing it first would cost a
    /// pass over every byte of it).
    pub fn read_buf(&mut self, buf: &mut tokio::io::ReadBuf<'_>) -> io::Result<()> {
        // SAFETY: the kernel writes at most the unfilled part's length into it
        // and never reads it; the bytes it reports written are then initialised.
        unsafe {
            let dst = buf.unfilled_mut();
            let n = self.read_raw(dst.as_mut_ptr().cast(), dst.len())?;
            buf.assume_init(n);
            buf.advance(n);
        }
        Ok(())
    }
}

impl io::Write for FdIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        send(self.0, buf, false)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let n_bufs = bufs.len().min(libc::UIO_MAXIOV as usize) as libc::c_int;
        // SAFETY: IoSlice is ABI-compatible with iovec, and the slices are valid
        // for reads for the call's duration. (SIGPIPE is ignored by the Rust runtime.)
        let n = unsafe { libc::writev(self.0, bufs.as_ptr().cast(), n_bufs) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// libxcrypt, linked into the binary from libcrypt.a (libcrypt-dev, the
// package that also gives the shared library's link name): the one function
// `auth_basic` calls instead of a shared library the loader maps and
// relocates at every start (~76 KB resident in an idle server).
#[link(name = "crypt", kind = "static", modifiers = "-bundle")]
unsafe extern "C" {
    /// libxcrypt's reentrant crypt with a caller-sized work area.
    fn crypt_rn(
        phrase: *const libc::c_char,
        setting: *const libc::c_char,
        data: *mut libc::c_void,
        size: libc::c_int,
    ) -> *mut libc::c_char;
}

/// `sizeof(struct crypt_data)` in libxcrypt.
const CRYPT_DATA_SIZE: usize = 32768;

/// crypt(3) of `phrase` with `setting` (a stored hash or a salt string):
/// the hash, or `None` when the setting names no method the system knows,
/// either string holds a NUL, or the phrase is too long.
pub fn crypt(phrase: &[u8], setting: &[u8]) -> Option<Vec<u8>> {
    let phrase = std::ffi::CString::new(phrase).ok()?;
    let setting = std::ffi::CString::new(setting).ok()?;
    let mut data = vec![0u8; CRYPT_DATA_SIZE];
    // SAFETY: both strings are NUL-terminated and live across the call; `data`
    // is a writable buffer of the size passed, which crypt_rn checks against
    // its own struct size.
    let out = unsafe {
        crypt_rn(
            phrase.as_ptr(),
            setting.as_ptr(),
            data.as_mut_ptr().cast(),
            CRYPT_DATA_SIZE as libc::c_int,
        )
    };
    if out.is_null() {
        return None;
    }
    // SAFETY: a non-null result is a NUL-terminated string inside `data`.
    let hash = unsafe { std::ffi::CStr::from_ptr(out) }.to_bytes();
    // libxcrypt marks failure with a hash starting with `*`.
    (!hash.starts_with(b"*")).then(|| hash.to_vec())
}

/// jemalloc's options (its `malloc_conf`, read before `main`; the global
/// allocator is set in main.rs). Each request boxes futures of a few KB
/// (the HTTP/1 step, the content handler's), and with tens of requests in
/// flight per worker they outnumber jemalloc's default of 20 cached objects per
/// size class, so every batch refilled and flushed the thread cache from the
/// arena's slabs; and its cache GC ran every 64 KB allocated. 64 cached objects
/// per small class and a GC every 1 MB cut a proxied request's instructions by
/// ~7 % (callgrind) for at most a few MB of cached memory per worker thread.
///
/// One automatic arena (`narenas:1`) instead of four per core: the main
/// thread, worker 0 and the helper threads share it, and each further worker
/// gets an arena of its own when it starts (`bind_worker_arena`). The main
/// thread allocates little once the configuration is loaded, so worker 0
/// rarely waits for it; each arena that is not made keeps its metadata and
/// partly used slabs (~160 KB resident) out of an idle server.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: Option<&'static std::ffi::c_char> = Some({
    const CONF: &[u8] = b"narenas:1,tcache_nslots_small_min:64,tcache_gc_incr_bytes:1048576\0";
    // SAFETY: a pointer to the first byte of a NUL-terminated 'static string.
    unsafe { &*CONF.as_ptr().cast::<std::ffi::c_char>() }
});

unsafe extern "C" {
    /// jemalloc's control interface, as tikv-jemalloc-sys links it (its
    /// `_rjem_` prefix); declared here rather than through that crate, whose
    /// addition as a dependency would rename every symbol of this crate and
    /// with it the function order of link/hot-symbols.txt.
    #[link_name = "_rjem_mallctl"]
    fn mallctl(
        name: *const libc::c_char,
        old: *mut libc::c_void,
        old_len: *mut libc::size_t,
        new: *mut libc::c_void,
        new_len: libc::size_t,
    ) -> libc::c_int;
}

/// Allocate from an arena of worker `id`'s own from now on (jemalloc's
/// `arenas.create`, made once per worker number and kept for the worker that
/// takes the number after it; `thread.arena`). Worker 0 keeps the automatic
/// arena it shares with the main thread (see `MALLOC_CONF`).
pub fn bind_worker_arena(id: usize) {
    static MADE: std::sync::Mutex<Vec<libc::c_uint>> = std::sync::Mutex::new(Vec::new());
    if id == 0 {
        return;
    }
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    while made.len() < id {
        let Some(arena) = mallctl_uint(c"arenas.create", None) else {
            return; // the worker keeps the automatic arena
        };
        made.push(arena);
    }
    mallctl_uint(c"thread.arena", Some(made[id - 1]));
}

/// Give the calling thread's allocator cache and its arena's unused pages
/// back (jemalloc's `thread.tcache.flush` and `arena.<i>.purge`): what a
/// burst of connections or requests left free stops counting as resident.
pub fn release_free_memory() {
    use std::ptr::null_mut;
    // SAFETY: the names are NUL-terminated and take no values.
    unsafe {
        mallctl(
            c"thread.tcache.flush".as_ptr(),
            null_mut(),
            null_mut(),
            null_mut(),
            0,
        );
        if let Some(arena) = thread_arena() {
            let purge = format!("arena.{arena}.purge\0");
            mallctl(purge.as_ptr().cast(), null_mut(), null_mut(), null_mut(), 0);
        }
    }
}

/// Stop mapping the pages of the process's clean read-only file mappings:
/// its code and constant data and the shared libraries' (`madvise`
/// `MADV_DONTNEED` on each private mapping without write permission whose
/// pages are all the file's, smaps' `Anonymous: 0 kB`). The pages stay in the
/// page cache and are mapped again when touched, as after the kernel reclaims
/// them: what loading the configuration ran and read (its parser, the
/// directive table, the dynamic loader's work) stops counting as resident,
/// while what serving runs comes back. A mapping with pages copied on write
/// (the relocated pointer tables, a debugger's breakpoints) is left as it is,
/// since dropping those would bring back the file's bytes. Returns the kB
/// that were resident in the mappings dropped (None: smaps unreadable).
pub fn unmap_clean_file_pages() -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut kb = 0;
    for (range, rss) in clean_file_mappings(&smaps) {
        kb += rss;
        // SAFETY: the range is a whole private mapping of a file, neither
        // writable nor holding a page of its own: its contents are the
        // file's, which the next touch maps again. Nothing is freed.
        unsafe {
            libc::madvise(
                range.start as *mut libc::c_void,
                range.end - range.start,
                libc::MADV_DONTNEED,
            );
        }
    }
    Some(kb)
}

/// The address ranges, in `/proc/PID/smaps` text, of the private read-only
/// mappings of files that hold resident pages and no anonymous (copied) one,
/// each with its resident kB.
fn clean_file_mappings(smaps: &str) -> Vec<(std::ops::Range<usize>, u64)> {
    struct Mapping {
        range: std::ops::Range<usize>,
        eligible: bool,
        rss: u64,
        anonymous: Option<u64>,
    }
    let mut found = Vec::new();
    let mut keep = |m: Option<Mapping>| {
        if let Some(m) = m
            && m.eligible
            && m.rss > 0
            && m.anonymous == Some(0)
        {
            found.push((m.range, m.rss));
        }
    };
    let mut current = None;
    for line in smaps.lines() {
        let mut fields = line.split_ascii_whitespace();
        let first = fields.next().unwrap_or("");
        let header = first.split_once('-').and_then(|(a, b)| {
            Some(usize::from_str_radix(a, 16).ok()?..usize::from_str_radix(b, 16).ok()?)
        });
        if let Some(range) = header {
            keep(current.take());
            let perms = fields.next().unwrap_or("").as_bytes();
            let path = fields.nth(3).unwrap_or("");
            current = Some(Mapping {
                range,
                eligible: perms.len() == 4
                    && perms[1] == b'-'
                    && perms[3] == b'p'
                    && path.starts_with('/'),
                rss: 0,
                anonymous: None,
            });
        } else if let Some(m) = &mut current {
            let kb = fields.next().and_then(|v| v.parse().ok());
            match first {
                "Rss:" => m.rss = kb.unwrap_or(0),
                "Anonymous:" => m.anonymous = kb,
                _ => {}
            }
        }
    }
    keep(current);
    found
}

/// The arena the calling thread allocates from (jemalloc's `thread.arena`).
fn thread_arena() -> Option<libc::c_uint> {
    mallctl_uint(c"thread.arena", None)
}

/// jemalloc's control `name`, an unsigned int: its value (before `new`, when
/// given, is written), or `None` when the call fails.
fn mallctl_uint(name: &std::ffi::CStr, new: Option<libc::c_uint>) -> Option<libc::c_uint> {
    let mut old: libc::c_uint = 0;
    let mut len = std::mem::size_of::<libc::c_uint>();
    let mut new = new;
    let (new_ptr, new_len) = match &mut new {
        Some(v) => ((v as *mut libc::c_uint).cast(), len),
        None => (std::ptr::null_mut(), 0),
    };
    // SAFETY: `name` is NUL-terminated; `old` and `len` are valid out-pointers
    // for an unsigned int, and `new_ptr`, when not null, points to one whose
    // size `new_len` gives.
    let r = unsafe {
        mallctl(
            name.as_ptr(),
            (&raw mut old).cast(),
            &mut len,
            new_ptr,
            new_len,
        )
    };
    (r == 0).then_some(old)
}

/// `setsockopt(fd, IPPROTO_TCP, opt, value)` for the integer TCP options
/// socket2 lacks (TCP_DEFER_ACCEPT, TCP_FASTOPEN).
pub fn set_tcp_int(fd: RawFd, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, opt, value)
}

/// IP_BIND_ADDRESS_NO_PORT on a socket about to be bound to an address with
/// port 0: the port is chosen at connect() (best effort; older kernels lack
/// it and bind as usual).
pub fn set_bind_address_no_port(fd: &impl AsRawFd) {
    let _ = set_int(
        fd.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_BIND_ADDRESS_NO_PORT,
        1,
    );
}

/// IP_TRANSPARENT (IPV6_TRANSPARENT): the socket may bind an address that
/// is not the host's (`proxy_bind … transparent`); needs CAP_NET_RAW.
pub fn set_transparent(fd: &impl AsRawFd, v6: bool) -> io::Result<()> {
    match v6 {
        false => set_int(fd.as_raw_fd(), libc::SOL_IP, libc::IP_TRANSPARENT, 1),
        true => set_int(fd.as_raw_fd(), libc::SOL_IPV6, libc::IPV6_TRANSPARENT, 1),
    }
}

fn set_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` is a valid int for the call's duration and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `getsockopt(fd, IPPROTO_TCP, opt)` of an integer TCP option.
#[cfg(test)]
pub fn tcp_int(fd: RawFd, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are valid out-pointers of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            opt,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    // jemalloc itself: the binary links it as its allocator (main.rs).
    use tikv_jemallocator as _;

    /// Only private, read-only file mappings whose resident pages are all the
    /// file's are dropped: not relocated tables (copied pages), writable or
    /// shared mappings, the vDSO, anonymous memory, or what holds no page.
    #[test]
    fn clean_file_mappings_are_the_private_read_only_ones_without_copies() {
        let entry = |range: &str, perms: &str, path: &str, rss: u64, anon: u64| {
            format!(
                "{range} {perms} 00000000 08:01 42 {path}\nSize: 64 kB\nRss: {rss} kB\n\
                 Pss: {rss} kB\nAnonymous: {anon} kB\nVmFlags: rd mr mw me\n"
            )
        };
        let smaps = [
            entry("1000-3000", "r--p", "/usr/sbin/vireo", 8, 0),
            entry("3000-5000", "r-xp", "/usr/sbin/vireo", 8, 0),
            entry("5000-6000", "r--p", "/usr/sbin/vireo", 4, 4),
            entry("6000-7000", "rw-p", "/usr/sbin/vireo", 4, 0),
            entry("7000-8000", "r--s", "/dev/shm/x", 4, 0),
            entry("8000-9000", "r-xp", "[vdso]", 4, 0),
            entry("9000-a000", "rw-p", "", 4, 4),
            entry("a000-b000", "r--p", "/lib/libc.so.6", 0, 0),
            entry("b000-d000", "r-xp", "/lib/with space.so", 8, 0),
            // Without a readable Anonymous figure nothing proves the pages clean.
            "d000-e000 r--p 00000000 08:01 43 /lib/a.so\nRss: 4 kB\n".to_string(),
            entry("e000-f000", "r--p", "/lib/b.so", 4, 0).replace("Anonymous: 0", "Anonymous: x"),
        ]
        .concat();
        assert_eq!(
            clean_file_mappings(&smaps),
            [
                (0x1000..0x3000, 8),
                (0x3000..0x5000, 8),
                (0xb000..0xd000, 8)
            ]
        );
    }

    /// The resident size of the mapping that starts at `addr`, in kB.
    fn mapping_rss(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{addr:x}-");
        let at = smaps.lines().position(|l| l.starts_with(&head)).unwrap();
        smaps
            .lines()
            .skip(at + 1)
            .find_map(|l| l.strip_prefix("Rss:"))
            .unwrap()
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap()
    }

    /// A clean mapping of a file stops being resident and reads the file's
    /// bytes again when touched; one with a page written (and then made
    /// read-only, as the dynamic loader does with relocated tables) keeps
    /// what was written.
    #[test]
    fn unmapping_clean_file_pages_keeps_every_byte() {
        let page = 4096;
        let path = std::env::temp_dir().join(format!("vireo-clean-pages-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 2 * page]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let map = |prot| {
            // SAFETY: a new private mapping of an open file; nothing else uses the range.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    2 * page,
                    prot,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            p.cast::<u8>()
        };
        let clean = map(libc::PROT_READ);
        let copied = map(libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: both mappings are 2 pages long and readable; `copied` is
        // writable until the mprotect.
        unsafe {
            assert_eq!(clean.read_volatile(), 7);
            assert_eq!(clean.add(page).read_volatile(), 7);
            copied.write_volatile(9);
            assert_eq!(libc::mprotect(copied.cast(), 2 * page, libc::PROT_READ), 0);
        }
        let before = mapping_rss(clean as usize);
        assert!(before > 0);
        assert!(unmap_clean_file_pages().unwrap() >= before);
        assert_eq!(mapping_rss(clean as usize), 0);
        // SAFETY: as above; the mappings are unmapped last.
        unsafe {
            assert_eq!(clean.add(page).read_volatile(), 7);
            assert_eq!(copied.read_volatile(), 9);
            libc::munmap(clean.cast(), 2 * page);
            libc::munmap(copied.cast(), 2 * page);
        }
    }

    /// Worker 0 stays on the automatic arena; each further worker number has
    /// an arena of its own, the same one for the worker that takes the number
    /// again (a restarted worker makes no new arena).
    #[test]
    fn each_further_worker_has_its_own_arena() {
        let on = |id: usize| {
            std::thread::spawn(move || {
                bind_worker_arena(id);
                thread_arena().unwrap()
            })
            .join()
            .unwrap()
        };
        let (zero, one, two) = (on(0), on(1), on(2));
        assert_ne!(one, zero);
        assert_ne!(two, zero);
        assert_ne!(one, two);
        assert_eq!(on(1), one);
        assert_eq!(on(2), two);
    }
}
