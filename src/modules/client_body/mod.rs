//! Request body buffering, as nginx's `ngx_http_read_client_request_body`:
//! a handler that needs the whole body before it talks to its upstream
//! (proxy_pass and fastcgi_pass with request buffering on) reads it through
//! [`read_all`]. A body up to `client_body_buffer_size` stays in memory;
//! a longer one is written, piece by piece as it arrives, to a temporary
//! file under `client_body_temp_path`, so memory per request stays bounded
//! whatever the body's size. The file is removed when the request ends
//! (kept with `client_body_in_file_only on`).
//!
//! A handler that streams the body instead reads it through a [`Tee`], which
//! keeps the pieces while they fit `client_body_buffer_size`: then
//! `$request_body` has the body afterwards, as nginx's unbuffered reads leave
//! it in their buffer.
//!
//! `$request_body` is the body when it is in memory; `$request_body_file`
//! the temporary file's name when it is in one.

pub mod conf;

use crate::core::module::{Hooks, Module, VarDef};
use crate::core::request::{BodyError, BoxFuture, Fields, Request, RequestBody};
use bytes::{Bytes, BytesMut};
use conf::{ClientBodyConf, InFile, TempPath};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};

/// How a gateway's request body goes to its upstream.
pub enum Plan {
    None,
    /// Read whole before the first attempt (or earlier, by a mirror or for
    /// `$request_body`).
    Held(Rc<Buffered>),
    /// From the client as it arrives.
    Stream,
}

/// A request body read whole: in memory, or in a temporary file.
#[derive(Debug, Default)]
pub struct Buffered {
    /// The body when it is in memory, in the pieces it came in (one with
    /// `client_body_in_single_buffer`).
    pub mem: Vec<Bytes>,
    /// The body when it is in a file.
    pub file: Option<TempFile>,
    /// Its length.
    pub len: u64,
}

/// A temporary file holding a request body; removed when dropped unless kept.
#[derive(Debug)]
pub struct TempFile {
    pub path: PathBuf,
    pub file: File,
    keep: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Largest piece read back from a temporary file at once.
pub const FILE_PIECE: usize = 64 * 1024;

impl Buffered {
    /// The piece starting at byte `off` (at most [`FILE_PIECE`] bytes from a
    /// file); `None` at the end. Memory pieces are handed out whole.
    pub fn piece_at(&self, off: u64) -> io::Result<Option<Bytes>> {
        if off >= self.len {
            return Ok(None);
        }
        match &self.file {
            Some(f) => {
                let want = (self.len - off).min(FILE_PIECE as u64) as usize;
                let mut buf = BytesMut::zeroed(want);
                let mut got = 0;
                while got < want {
                    got += crate::core::message::response::read_file_at(
                        &f.file,
                        &mut buf[got..],
                        off + got as u64,
                    )?;
                }
                Ok(Some(buf.freeze()))
            }
            None => {
                let mut start = 0u64;
                for p in &self.mem {
                    let end = start + p.len() as u64;
                    if off < end {
                        return Ok(Some(p.slice((off - start) as usize..)));
                    }
                    start = end;
                }
                Ok(None)
            }
        }
    }
}

/// The whole body of `req`, read once: a second handler (after an internal
/// redirect) gets what the first read. `Err` is the status to answer with
/// (413, 400, 408, 499 from the client; 500 when the temporary file fails).
pub async fn read_all(req: &Request<'_>, body: &mut dyn RequestBody) -> Result<Rc<Buffered>, u16> {
    if let Some(b) = req.state.ext.get::<Buffered>() {
        return Ok(b);
    }
    let c = req.conf.get::<ClientBodyConf>();
    let mut b = Buffered::default();
    let fail = |e: io::Error, path: &std::path::Path| -> u16 {
        crate::error_log!(
            Crit,
            "{} failed on a client request body temporary file \"{}\"{}",
            crate::core::errlog::errno_text(&e),
            path.display(),
            req.log_context()
        );
        500
    };
    if c.in_file_only != InFile::Off {
        b.file = Some(create(c).map_err(|(e, p)| fail(e, &p))?);
    }
    loop {
        let piece = match body.chunk().await {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => return Err(status(&e)),
        };
        b.len += piece.len() as u64;
        if b.file.is_none() && b.len > c.buffer_size {
            let t = create(c).map_err(|(e, p)| fail(e, &p))?;
            if c.in_file_only == InFile::Off {
                crate::error_log!(
                    Warn,
                    "a client request body is buffered to a temporary file {}{}",
                    t.path.display(),
                    req.log_context()
                );
            }
            b.file = Some(t);
            let held = std::mem::take(&mut b.mem);
            let f = b.file.as_mut().expect("just set");
            for p in held {
                (&f.file).write_all(&p).map_err(|e| fail(e, &f.path))?;
            }
        }
        match &b.file {
            Some(f) => (&f.file).write_all(&piece).map_err(|e| fail(e, &f.path))?,
            None => b.mem.push(piece),
        }
    }
    if c.in_single_buffer && b.mem.len() > 1 {
        let mut one = BytesMut::with_capacity(b.len as usize);
        for p in &b.mem {
            one.extend_from_slice(p);
        }
        b.mem = vec![one.freeze()];
    }
    let b = Rc::new(b);
    // Subrequests (SSI includes) see the body too, as nginx's.
    req.state.ext.share(b.clone());
    Ok(b)
}

/// The body when it was already read whole (by `mirror`, or a handler
/// before an internal redirect): a handler that would stream it sends
/// this instead, as nginx disables unbuffered reading of a body read.
pub fn held(req: &Request<'_>) -> Option<Rc<Buffered>> {
    req.state.ext.get::<Buffered>()
}

/// A body read whole, read again piece by piece by a handler that takes
/// its body from a [`RequestBody`] (WebDAV's PUT, CGI) after a module
/// before it read the client's.
pub struct Replay {
    held: Rc<Buffered>,
    off: u64,
}

impl Replay {
    pub fn new(held: Rc<Buffered>) -> Replay {
        Replay { held, off: 0 }
    }
}

impl RequestBody for Replay {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>> {
        let r = match self.held.piece_at(self.off) {
            Ok(p) => {
                self.off += p.as_ref().map_or(0, |p| p.len() as u64);
                Ok(p)
            }
            Err(_) => Err(BodyError::Closed),
        };
        Box::pin(std::future::ready(r))
    }

    fn declared_len(&self) -> Option<u64> {
        Some(self.held.len)
    }

    fn gone(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// `f`'s output when it is ready at once: a streaming handler gathers the
/// body pieces already read this way, to send them in one write.
pub fn now_or_never<F: std::future::Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// The status for a body that could not be read.
fn status(e: &BodyError) -> u16 {
    e.status()
}

/// Sequence of temporary file names, started at a number of the process's
/// own so that two processes sharing a folder rarely meet (a name taken is
/// skipped).
fn next_number() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(n)
        % 1_000_000_000
}

/// Create a new temporary file (mode 0600) under the location's temp path,
/// making its folders when missing.
fn create(c: &ClientBodyConf) -> Result<TempFile, (io::Error, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let tp: &TempPath = &c.temp_path;
    let mut made_dirs = false;
    let mut tries = 0;
    let mut path = temp_name(tp, next_number());
    loop {
        let r = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        match r {
            Ok(file) => {
                return Ok(TempFile {
                    path,
                    file,
                    keep: c.in_file_only == InFile::On,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 100 => {
                tries += 1;
                path = temp_name(tp, next_number());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && !made_dirs => {
                made_dirs = true;
                let dir = path.parent().expect("a file under the temp folder");
                std::fs::create_dir_all(dir).map_err(|e| (e, dir.to_path_buf()))?;
            }
            Err(e) => return Err((e, path)),
        }
    }
}

/// `dir/[levels/]NNNNNNNNNN`: each level is the next digits from the end of
/// the name, as nginx's (`1 2` gives `dir/7/45/0000012457`).
fn temp_name(tp: &TempPath, n: u32) -> PathBuf {
    let name = format!("{n:010}");
    let mut path = tp.dir.clone();
    let mut end = name.len();
    for &l in &tp.levels {
        path.push(&name[end - l..end]);
        end -= l;
    }
    path.push(&name);
    path
}

/// The body of a streaming handler, passed through while its pieces are
/// kept as long as they fit `client_body_buffer_size`; [`Tee::finish`]
/// makes a body read to its end and kept whole `$request_body`.
pub struct Tee<'b> {
    inner: &'b mut dyn RequestBody,
    kept: Vec<Bytes>,
    len: u64,
    limit: u64,
    over: bool,
    done: bool,
}

impl<'b> Tee<'b> {
    pub fn new(req: &Request<'_>, inner: &'b mut dyn RequestBody) -> Tee<'b> {
        Tee {
            inner,
            kept: Vec::new(),
            len: 0,
            limit: req.conf.get::<ClientBodyConf>().buffer_size,
            over: false,
            done: false,
        }
    }

    /// Keep what was read for `$request_body` when it is the whole body.
    pub fn finish(self, req: &Request<'_>) {
        if self.done && !self.over && req.state.ext.get::<Buffered>().is_none() {
            req.state.ext.insert(Rc::new(Buffered {
                mem: self.kept,
                file: None,
                len: self.len,
            }));
        }
    }
}

impl RequestBody for Tee<'_> {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>> {
        Box::pin(async move {
            let r = self.inner.chunk().await;
            match &r {
                Ok(Some(p)) => {
                    self.len += p.len() as u64;
                    if self.over || self.len > self.limit {
                        self.over = true;
                        self.kept = Vec::new();
                    } else {
                        self.kept.push(p.clone());
                    }
                }
                Ok(None) => self.done = true,
                Err(_) => {}
            }
            r
        })
    }

    fn declared_len(&self) -> Option<u64> {
        self.inner.declared_len()
    }

    fn gone(&mut self) -> BoxFuture<'_, ()> {
        self.inner.gone()
    }

    fn early_hints<'a>(&'a mut self, fields: &'a Fields) -> BoxFuture<'a, ()> {
        self.inner.early_hints(fields)
    }

    /// The rest read beside the response bypasses the tee: such a body is
    /// never kept whole.
    fn full_duplex(&self) -> bool {
        self.inner.full_duplex()
    }
}

fn var_request_body(req: &Request<'_>, _: &str, out: &mut Vec<u8>) {
    if let Some(b) = req.state.ext.get::<Buffered>()
        && b.file.is_none()
    {
        for p in &b.mem {
            out.extend_from_slice(p);
        }
    }
}

fn var_request_body_file(req: &Request<'_>, _: &str, out: &mut Vec<u8>) {
    if let Some(b) = req.state.ext.get::<Buffered>()
        && let Some(f) = &b.file
    {
        out.extend_from_slice(f.path.as_os_str().as_bytes());
    }
}

pub static MODULE: Module = Module {
    name: "client_body",
    directives: &[conf::DIRECTIVES],
    settings: Some(&ClientBodyConf::KIND),
    variables: &[
        VarDef::name("request_body", var_request_body),
        VarDef::name("request_body_file", var_request_body_file),
    ],
    hooks: Hooks {
        http: Some(conf::default_temp_path),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_take_levels_from_the_end() {
        let tp = TempPath {
            dir: PathBuf::from("/t"),
            levels: vec![1, 2],
        };
        assert_eq!(temp_name(&tp, 12457), PathBuf::from("/t/7/45/0000012457"));
        let flat = TempPath {
            dir: PathBuf::from("/t"),
            levels: vec![],
        };
        assert_eq!(temp_name(&flat, 3), PathBuf::from("/t/0000000003"));
    }

    #[test]
    fn pieces_from_memory() {
        let b = Buffered {
            mem: vec![Bytes::from_static(b"abc"), Bytes::from_static(b"de")],
            file: None,
            len: 5,
        };
        assert_eq!(b.piece_at(0).unwrap().unwrap(), "abc");
        assert_eq!(b.piece_at(3).unwrap().unwrap(), "de");
        assert_eq!(b.piece_at(4).unwrap().unwrap(), "e");
        assert!(b.piece_at(5).unwrap().is_none());
    }
}
