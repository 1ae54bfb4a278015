//! CGI (RFC 3875): run the requested executable for each request, its
//! environment built from the request, the request body streamed to its
//! stdin while its stdout streams back to the client. nginx has no CGI;
//! vireo's directives are `cgi`, `cgi_param`, `cgi_read_timeout` and
//! `cgi_max_processes` (see docs/fastcgi.md).

pub mod conf;

use crate::core::message::response::{Body, BodyStream};
use crate::core::module::Module;
use crate::core::request::{BoxFuture, Content, Outcome, Request, RequestBody};
use crate::modules::fastcgi::respond::{self, Head};
use bytes::{Bytes, BytesMut};
use conf::CgiConf;
use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdout, Command};

thread_local! {
    /// CGI processes running in this worker.
    static RUNNING: Cell<usize> = const { Cell::new(0) };
}

/// One running process counted against `cgi_max_processes`.
#[derive(Debug)]
struct Slot;

impl Slot {
    fn take(max: usize) -> Option<Slot> {
        RUNNING.with(|r| {
            (r.get() < max).then(|| {
                r.set(r.get() + 1);
                Slot
            })
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(r.get().saturating_sub(1)));
    }
}

/// The `cgi` content handler.
#[derive(Debug)]
pub struct Cgi;

impl Content for Cgi {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let mut replay = crate::modules::client_body::held(req)
                .map(crate::modules::client_body::Replay::new);
            let body: &mut dyn RequestBody = match &mut replay {
                Some(r) => r,
                None => body,
            };
            run(req, body).await
        })
    }
}

fn env(req: &Request<'_>, script: &[u8], body_len: Option<u64>) -> Vec<(Vec<u8>, Vec<u8>)> {
    use crate::core::vars::Var;
    let mut e: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut var = |name: &str, v: Var| {
        let mut out = Vec::new();
        req.var_into(&v, &mut out, req);
        e.push((name.as_bytes().to_vec(), out));
    };
    var("REQUEST_METHOD", Var::RequestMethod);
    var("QUERY_STRING", Var::Args);
    var("REQUEST_URI", Var::RequestUri);
    var("SERVER_PROTOCOL", Var::ServerProtocol);
    var("SERVER_NAME", Var::Host);
    var("SERVER_PORT", Var::ServerPort);
    var("SERVER_ADDR", Var::ServerAddr);
    var("REMOTE_ADDR", Var::RemoteAddr);
    var("REMOTE_PORT", Var::RemotePort);
    var("DOCUMENT_ROOT", Var::DocumentRoot);
    var("CONTENT_TYPE", Var::ContentType);
    let mut push = |n: &str, v: &[u8]| e.push((n.as_bytes().to_vec(), v.to_vec()));
    push("GATEWAY_INTERFACE", b"CGI/1.1");
    push(
        "SERVER_SOFTWARE",
        crate::core::message::response::server_name(true).as_bytes(),
    );
    push("SCRIPT_NAME", &req.uri);
    push("SCRIPT_FILENAME", script);
    push("PATH_INFO", b"");
    push("PATH", b"/usr/local/bin:/usr/bin:/bin");
    if let Some(n) = body_len {
        push("CONTENT_LENGTH", n.to_string().as_bytes());
    }
    for (n, v) in req.head.headers() {
        if n.contains(&b'_') || n.eq_ignore_ascii_case(b"proxy") {
            continue;
        }
        let name: Vec<u8> = b"HTTP_"
            .iter()
            .copied()
            .chain(n.iter().map(|&b| {
                if b == b'-' {
                    b'_'
                } else {
                    b.to_ascii_uppercase()
                }
            }))
            .collect();
        if name == b"HTTP_CONTENT_TYPE" || name == b"HTTP_CONTENT_LENGTH" {
            continue;
        }
        e.push((name, v.to_vec()));
    }
    for p in req.conf.get::<CgiConf>().params.iter() {
        let mut out = Vec::new();
        p.value.render(req, &mut out);
        if p.if_not_empty && out.is_empty() {
            continue;
        }
        e.retain(|(n, _)| **n != *p.name);
        e.push((p.name.to_vec(), out));
    }
    e
}

async fn run(req: &mut Request<'_>, body: &mut dyn RequestBody) -> Outcome {
    let conf = req.conf.get::<CgiConf>().clone();
    let mut script = Vec::new();
    if crate::core::path::map_uri(req, &req.uri, &mut script).is_err()
        || crate::modules::fastcgi::handler::escapes(&script)
    {
        return Outcome::Respond(req.error(404));
    }
    let path = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&script));
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => {
            use std::os::unix::fs::PermissionsExt;
            if m.permissions().mode() & 0o111 == 0 {
                crate::error_log!(Error, "CGI script \"{}\" is not executable", path.display());
                return Outcome::Respond(req.error(403));
            }
        }
        _ => return Outcome::Respond(req.error(404)),
    }
    let Some(slot) = Slot::take(conf.max_processes) else {
        crate::error_log!(
            Error,
            "cgi_max_processes ({}) reached, client: {}",
            conf.max_processes,
            req.client_addr()
        );
        return Outcome::Respond(req.error(503));
    };
    // A chunked body is read first (CONTENT_LENGTH is required by RFC 3875).
    let mut buffered: Option<VecDeque<Bytes>> = None;
    let mut body_len = body.declared_len();
    if body_len.is_none() && req.head.header("transfer-encoding").is_some() {
        let mut q = VecDeque::new();
        let mut n = 0;
        loop {
            match body.chunk().await {
                Ok(Some(b)) => {
                    n += b.len() as u64;
                    q.push_back(b);
                }
                Ok(None) => break,
                Err(e) => return Outcome::Respond(req.error(e.status())),
            }
        }
        body_len = Some(n);
        buffered = Some(q);
    }
    let mut cmd = Command::new(&path);
    cmd.env_clear();
    for (n, v) in env(req, &script, body_len) {
        cmd.env(
            std::ffi::OsStr::from_bytes(&n),
            std::ffi::OsStr::from_bytes(&v),
        );
    }
    if let Some(dir) = path.parent() {
        cmd.current_dir(dir);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            crate::error_log!(
                Error,
                "CGI \"{}\" could not start ({})",
                path.display(),
                crate::core::errlog::errno_text(&e)
            );
            return Outcome::Respond(req.error(502));
        }
    };
    // stderr lines go to the error log.
    if let Some(err) = child.stderr.take() {
        let name = path.display().to_string();
        tokio::task::spawn_local(async move {
            let mut lines = tokio::io::BufReader::new(err).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                crate::error_log!(Error, "CGI \"{}\" stderr: {}", name, l);
            }
        });
    }
    let stdin = child.stdin.take();
    let Some(mut stdout) = child.stdout.take() else {
        return Outcome::Respond(req.error(502));
    };
    let mut out = BytesMut::with_capacity(16 * 1024);
    // Feed stdin while reading stdout, until the head is complete.
    let head = {
        let t = conf.read_timeout;
        let writer = async {
            // Moved in: dropped (EOF for the script) when the body is written.
            let Some(mut w) = stdin else {
                return Ok(());
            };
            let w = &mut w;
            if let Some(q) = buffered.as_mut() {
                while let Some(b) = q.pop_front() {
                    if w.write_all(&b).await.is_err() {
                        return Ok(());
                    }
                }
            } else if body_len.is_some_and(|n| n > 0) {
                loop {
                    match body.chunk().await {
                        Ok(Some(b)) => {
                            if w.write_all(&b).await.is_err() {
                                return Ok(());
                            }
                        }
                        Ok(None) => break,
                        Err(e) => return Err(e),
                    }
                }
            }
            Ok(())
        };
        let reader = async {
            loop {
                if let Some(h) = crate::modules::fastcgi::cgi_head::parse(&out, conf.buffer_size)
                    .map_err(|e| e.0)?
                {
                    return Ok(h);
                }
                out.reserve(8192);
                match tokio::time::timeout(t, stdout.read_buf(&mut out)).await {
                    Err(_) => return Err("timed out"),
                    Ok(Ok(0)) | Ok(Err(_)) => return Err("closed stdout before a complete head"),
                    Ok(Ok(_)) => {}
                }
            }
        };
        tokio::pin!(writer);
        tokio::pin!(reader);
        let mut wrote = false;
        loop {
            tokio::select! {
                r = &mut writer, if !wrote => {
                    wrote = true;
                    if let Err(e) = r {
                        return Outcome::Respond(req.error(e.status()));
                    }
                }
                h = &mut reader => break h,
            }
        }
    };
    let (cgi, used) = match head {
        Ok(h) => h,
        Err(why) => {
            crate::error_log!(
                Error,
                "CGI \"{}\" {why}, client: {}",
                path.display(),
                req.client_addr()
            );
            let status = if why == "timed out" { 504 } else { 502 };
            return Outcome::Respond(req.error(status));
        }
    };
    let rest = out.split_off(used).freeze();
    let empty: Vec<Box<str>> = Vec::new();
    let opts = respond::Opts {
        hide: &empty,
        pass: &empty,
        intercept_errors: false,
        buffering: false,
    };
    let reply = match respond::head(req, cgi, &opts) {
        Head::Done(o) => return o,
        Head::Reply(r) => r,
    };
    let mut resp = reply.resp;
    let mut pending = VecDeque::new();
    if !rest.is_empty() {
        pending.push_back(rest);
    }
    resp.body = Body::Stream {
        stream: Box::new(CgiBody {
            child: Some(child),
            stdout,
            pending,
            left: reply.declared_len,
            timeout: conf.read_timeout,
            _slot: slot,
        }),
        len: reply.declared_len,
    };
    Outcome::Respond(resp)
}

/// The script's output after its head. Dropping it (client gone) kills the
/// process.
#[derive(Debug)]
struct CgiBody {
    child: Option<Child>,
    stdout: ChildStdout,
    pending: VecDeque<Bytes>,
    left: Option<u64>,
    timeout: Duration,
    _slot: Slot,
}

impl CgiBody {
    async fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        let piece = match self.pending.pop_front() {
            Some(p) => Some(p),
            None => {
                let mut buf = BytesMut::with_capacity(64 * 1024);
                match tokio::time::timeout(self.timeout, self.stdout.read_buf(&mut buf)).await {
                    Err(_) => {
                        crate::error_log!(Error, "CGI timed out while sending its output");
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "cgi timed out"));
                    }
                    Ok(Err(e)) => return Err(e),
                    Ok(Ok(0)) => None,
                    Ok(Ok(_)) => Some(buf.freeze()),
                }
            }
        };
        if piece.is_none()
            && let Some(mut c) = self.child.take()
        {
            // Reap it (it closed stdout; it is exiting or done).
            tokio::task::spawn_local(async move {
                if tokio::time::timeout(Duration::from_secs(5), c.wait())
                    .await
                    .is_err()
                {
                    let _ = c.kill().await;
                }
            });
        }
        respond::limit(&mut self.left, piece)
    }
}

impl BodyStream for CgiBody {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(self.next_piece())
    }
}

/// `cgi_pass`: CGI programs run per request.
pub static MODULE: Module = Module {
    name: "cgi",
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::CgiConf::KIND),
    ..Module::EMPTY
};
