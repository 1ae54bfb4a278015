//! The `fastcgi_pass` content handler: params from the configuration and the
//! request, the request body (read whole first with fastcgi_request_buffering
//! on, streamed from the client with off) sent as STDIN records while the
//! reply is read, the CGI head turned into a response, the body streamed to the client
//! with backpressure (or, when it fits the buffers, read whole and sent with a
//! Content-Length in one write).

use super::conf::FastcgiConf;
use super::record::{self, Params, Record, Type};
use super::respond::{self, Head, Reply};
use crate::core::message::head::BodyFraming;
use crate::core::message::response::{Body, BodyStream, CutShort};
use crate::core::request::{BodyError, BoxFuture, Content, Outcome, Request, RequestBody};
use crate::core::spare::Spares;
use crate::modules::client_body::{self, Buffered, Plan};
use crate::upstream::driver::{self, Dial, Failure, Gave, Policy, Protocol, Try};
use crate::upstream::dynamic::Target;
use crate::upstream::next::NextUpstream;
use crate::upstream::{UpConn, Upstream as Group, UpstreamVars};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The request id used on every connection (one request at a time).
const ID: u16 = 1;

#[derive(Debug)]
pub struct FastcgiPass {
    pub target: Target,
}

impl Content for FastcgiPass {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            use crate::modules::cache::{self, conf::Fastcgi as Cached};
            let c = req.conf.get::<FastcgiConf>();
            let fill = match cache::before::<Cached>(req, c.force_ranges).await {
                Ok(f) => f,
                Err(o) => return o,
            };
            let out = run(self, req, body).await;
            cache::after(req, fill, out, c.store.as_deref(), c.store_access).await
        })
    }

    fn auto_redirect(&self) -> bool {
        true
    }
}

/// Why talking to the application failed.
#[derive(Debug)]
pub enum Fail {
    /// A timeout; what was being done (504).
    Timeout(&'static str),
    /// The reply is not FastCGI / not a valid head (502).
    Malformed(&'static str),
    /// The application closed the connection early (502).
    Closed(&'static str),
    Io(io::Error),
    /// The client's body could not be read.
    Client(BodyError),
    /// The body's temporary file could not be read (500).
    TempFile(io::Error),
}

impl Fail {
    pub fn status(&self) -> u16 {
        match self {
            Fail::Timeout(_) => 504,
            Fail::Client(e) => e.status(),
            Fail::TempFile(_) => 500,
            _ => 502,
        }
    }

    fn text(&self) -> String {
        match self {
            Fail::Timeout(w) => format!("upstream timed out (110: Connection timed out) while {w}"),
            Fail::Malformed(w) => format!("{w} while reading response header from upstream"),
            Fail::Closed(w) => format!("upstream prematurely closed connection while {w}"),
            Fail::Io(e) => format!(
                "recv() failed ({}) while reading from upstream",
                crate::core::errlog::errno_text(e)
            ),
            Fail::Client(_) => "client request body could not be read".into(),
            Fail::TempFile(e) => format!(
                "{} while reading the client request body temporary file",
                crate::core::errlog::errno_text(e)
            ),
        }
    }

    /// Log (unless it is the client's fault) and answer.
    pub fn respond(self, req: &Request<'_>, upstream: &PeerName) -> Outcome {
        self.log(req, upstream);
        Outcome::Respond(req.error(self.status()))
    }

    pub fn log(&self, req: &Request<'_>, upstream: &PeerName) {
        if !matches!(self, Fail::Client(_)) {
            driver::log(req, &self.text(), &upstream.to_string());
        }
    }

    /// The failure as the upstream driver sees it: its `next_upstream` kind
    /// (`OFF` for the client's and the local ones), status and log line.
    fn failure<R>(&self) -> Failure<R> {
        let kind = match self {
            Fail::Timeout(_) => NextUpstream::TIMEOUT,
            Fail::Malformed(_) => NextUpstream::INVALID_HEADER,
            Fail::Client(_) | Fail::TempFile(_) => NextUpstream::OFF,
            _ => NextUpstream::ERROR,
        };
        let msg = match self {
            Fail::Client(_) => String::new(),
            _ => self.text(),
        };
        Failure::new(kind, self.status(), msg)
    }
}

/// A peer as log lines name it (`fastcgi://127.0.0.1:9000`), written only
/// when a line is logged.
#[derive(Debug)]
pub struct PeerName {
    group: Arc<Group>,
    peer: usize,
}

impl std::fmt::Display for PeerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fastcgi://{}", self.group.addr_name(self.peer))
    }
}

/// A connection with its read buffer, reading records of our request.
#[derive(Debug)]
pub struct Upstream {
    pub sock: UpConn,
    pub rbuf: BytesMut,
    /// The records read so far, less what was taken.
    dec: record::Decoder,
    /// The last read filled the buffer's room.
    filled: bool,
    pub read_timeout: Duration,
    pub ended: bool,
    eof: bool,
    /// A low-water mark for the reply's reads.
    lowat: Lowat,
    /// For log lines.
    pub name: PeerName,
    /// `fastcgi_catch_stderr` while the head is read; `None` after it.
    catch: Option<std::sync::Arc<Vec<Box<[u8]>>>>,
}

/// SO_RCVLOWAT on the connection to the application: with
/// `fastcgi_buffering` and without `fastcgi_keep_conn` (the application then
/// closes the connection after its reply, and the end wakes us whatever the
/// mark), the worker is woken when what it waits for is in — the head and the
/// read-ahead (`fastcgi_buffer_size` + `fastcgi_buffers`), then a buffer's
/// worth while the body streams — or at the end, instead of at each of the
/// application's writes. On one core each wake-up saved is a switch between
/// the worker and the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lowat {
    Off,
    /// To be set before the next wait for the socket.
    Wanted(usize),
    Set,
}

/// How long bytes may wait under the mark before it is first lowered (see
/// `Upstream::wait`). Not under the idle sweep's tick, so that arming it never
/// moves the runtime's next wake-up earlier (which costs an eventfd write).
const HOLD: Duration = crate::server::idle::TICK;

/// Least room a read is given.
const READ_MIN: usize = 4096;
/// Most room a read is given (an allocator size class exactly): a reply up
/// to this size is read in one call when the application has sent it.
const READ_MAX: usize = 128 * 1024;

thread_local! {
    /// Read buffers of finished replies, at most 4. The pieces of a reply are
    /// slices of its buffers; once the connection has written them (dropped
    /// them) a buffer is taken back whole for another reply instead of
    /// allocating one: a buffer above the allocator's thread cache (32 KB)
    /// would otherwise cost an arena allocation and free each time.
    static SPARE: Spares<BytesMut> = const { Spares::new(4) };
}

/// A buffer with room for `want` bytes: a spare one, or a new one of that
/// size.
fn read_buffer(want: usize) -> BytesMut {
    SPARE
        .with(|s| s.take_if(|b| b.try_reclaim(want)))
        .unwrap_or_else(|| BytesMut::with_capacity(want))
}

/// Keep an emptied read buffer for a later reply (its pieces may still be
/// on their way to the client).
fn spare(b: BytesMut) {
    // Room left, or the end of an allocation whose pieces were split off (a
    // `BytesMut::new()` has neither).
    if b.is_empty() && (b.capacity() > 0 || b.as_ptr() != BytesMut::new().as_ptr()) {
        // Not while the worker's thread-locals are torn down.
        let _ = SPARE.try_with(|s| s.keep(b));
    }
}

/// Let go of the read buffers a whole tick left unused (the module's tick).
pub fn trim_spares() {
    SPARE.with(|s| s.trim());
}

impl Upstream {
    /// The next record already read; stderr records are logged and skipped.
    fn decoded(&mut self) -> Result<Option<Record>, Fail> {
        loop {
            match self.dec.decode(&mut self.rbuf) {
                Err(m) => return Err(Fail::Malformed(m.0)),
                Ok(Some(Record::Stderr(b))) => {
                    log_stderr(&b, &self.name);
                    let caught = self
                        .catch
                        .as_ref()
                        .is_some_and(|c| c.iter().any(|s| memchr::memmem::find(&b, s).is_some()));
                    if caught {
                        return Err(Fail::Malformed(
                            "upstream sent a string fastcgi_catch_stderr names",
                        ));
                    }
                }
                Ok(Some(Record::Other(_))) => {}
                Ok(Some(r)) => {
                    if let Record::End { .. } = r {
                        self.ended = true;
                    }
                    return Ok(Some(r));
                }
                Ok(None) => return Ok(None),
            }
        }
    }

    /// The next record, read from the connection when it is not here yet.
    async fn record(&mut self, phase: &'static str) -> Result<Record, Fail> {
        loop {
            if let Some(r) = self.decoded()? {
                return Ok(r);
            }
            if self.eof {
                return Err(Fail::Closed(phase));
            }
            let lacks = self.dec.lacks(&self.rbuf);
            if self.rbuf.capacity() - self.rbuf.len() < lacks.max(READ_MIN) {
                self.make_room(lacks, phase).await?;
            }
            // A short read clears the read readiness: the wait that follows
            // goes to epoll without a read returning EAGAIN first.
            let room = self.rbuf.capacity() - self.rbuf.len();
            match self.sock.try_read_buf(&mut self.rbuf) {
                Ok(0) => self.eof = true,
                Ok(n) => self.filled = n == room,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(phase).await?,
                Err(e) => return Err(Fail::Io(e)),
            }
        }
    }

    /// Room in the read buffer for what is queued on the connection (at
    /// least `lacks` bytes and `READ_MIN`, at most `READ_MAX` unless the
    /// record at hand needs more), so that what the application sent is read
    /// in one call into a buffer of its size. No buffer is held while the
    /// application works (or its backlog holds the connection): an empty
    /// buffer is let go, and room made once there is something to read (at
    /// once when the last read filled its room: more is queued).
    async fn make_room(&mut self, lacks: usize, phase: &'static str) -> Result<(), Fail> {
        let want = |up: &Upstream| {
            let queued = up.sock.queued_len().unwrap_or(READ_MAX);
            // In whole pages, so that a spare serves replies of about one size.
            queued
                .clamp(READ_MIN, READ_MAX)
                .max(lacks)
                .next_multiple_of(4096)
        };
        if !self.rbuf.is_empty() {
            // The start of a record is in: room after it.
            self.rbuf.reserve(want(self));
            return Ok(());
        }
        spare(std::mem::take(&mut self.rbuf));
        if !self.filled {
            self.wait(phase).await?;
        }
        self.rbuf = read_buffer(want(self));
        Ok(())
    }

    /// Wait until the connection reads as readable, within the read timeout,
    /// setting the wanted low-water mark first. A wait under a mark is cut
    /// after `HOLD`, then twice as long each time: when bytes are queued under
    /// the mark by then (an application that sends its head and takes its
    /// time, trickles, or keeps the connection open after its reply), the
    /// mark is lowered to one byte, which raises the readiness for them.
    async fn wait(&mut self, phase: &'static str) -> Result<(), Fail> {
        if let Lowat::Wanted(n) = self.lowat {
            self.lowat = match self.sock.set_recv_lowat(n) {
                Ok(()) => Lowat::Set,
                Err(_) => Lowat::Off,
            };
        }
        let deadline = Instant::now() + self.read_timeout;
        let mut hold = HOLD;
        loop {
            let until = match self.lowat {
                Lowat::Set => deadline.min(Instant::now() + hold),
                _ => deadline,
            };
            match tokio::time::timeout_at(until.into(), self.sock.readable()).await {
                Ok(r) => return r.map_err(Fail::Io),
                Err(_) if self.lowat == Lowat::Set && self.sock.queued() => {
                    self.lowat = Lowat::Off;
                    self.sock.set_recv_lowat(1).map_err(Fail::Io)?;
                }
                Err(_) if until < deadline => hold *= 2,
                Err(_) => return Err(Fail::Timeout(phase)),
            }
        }
    }

    /// Set the low-water mark wanted for the waits to come (`Off`: lower a
    /// mark that is set). Changing it costs a syscall at the next wait only.
    fn want_lowat(&mut self, bytes: Option<usize>) -> Result<(), Fail> {
        self.lowat = match (bytes, self.lowat) {
            (Some(n), _) => Lowat::Wanted(n),
            (None, Lowat::Set) => {
                self.sock.set_recv_lowat(1).map_err(Fail::Io)?;
                Lowat::Off
            }
            (None, _) => Lowat::Off,
        };
        Ok(())
    }

    /// The next piece of STDOUT; `None` after END_REQUEST.
    pub async fn stdout(&mut self, phase: &'static str) -> Result<Option<Bytes>, Fail> {
        while !self.ended {
            match self.record(phase).await? {
                Record::Stdout(b) if !b.is_empty() => return Ok(Some(b)),
                _ => {}
            }
        }
        Ok(None)
    }

    /// `stdout` without reading: `None` when the next piece is not here yet.
    fn stdout_at_hand(&mut self) -> Option<Result<Option<Bytes>, Fail>> {
        while !self.ended {
            match self.decoded() {
                Err(f) => return Some(Err(f)),
                Ok(None) => return None,
                Ok(Some(Record::Stdout(b))) if !b.is_empty() => return Some(Ok(Some(b))),
                Ok(Some(_)) => {}
            }
        }
        Some(Ok(None))
    }
}

fn log_stderr(b: &[u8], upstream: &PeerName) {
    let text = String::from_utf8_lossy(&b[..b.len().min(4096)]);
    let text = text.trim_end();
    if !text.is_empty() {
        crate::error_log!(
            Error,
            "FastCGI sent in stderr: \"{}\", upstream: \"{}\"",
            text,
            upstream
        );
    }
}

/// `$fastcgi_script_name` (`path_info` false) or `$fastcgi_path_info` (true).
pub fn script_name(req: &Request<'_>, path_info: bool, out: &mut Vec<u8>) {
    let conf = req.conf.get::<FastcgiConf>();
    let uri = &req.uri;
    let (script, info): (&[u8], &[u8]) = match &conf.split_path_info {
        Some(re) => {
            let mut spans = Vec::new();
            if re.captures(uri, &mut spans) {
                let group = |i: usize| {
                    spans
                        .get(i)
                        .copied()
                        .flatten()
                        .map_or(&[][..], |(a, b)| &uri[a..b])
                };
                (group(1), group(2))
            } else {
                (uri, b"")
            }
        }
        None => (uri, b""),
    };
    if path_info {
        out.extend_from_slice(info);
        return;
    }
    out.extend_from_slice(script);
    if script.ends_with(b"/")
        && let Some(i) = &conf.index
    {
        out.extend_from_slice(i.as_bytes());
    }
}

/// Does a path have a `..` segment (or a NUL)?
pub fn escapes(p: &[u8]) -> bool {
    p.contains(&0) || p.split(|&b| b == b'/').any(|seg| seg == b"..")
}

/// The PARAMS stream. `Err(status)` when the request must be refused.
fn build_params(
    req: &Request<'_>,
    conf: &FastcgiConf,
    body_len: Option<u64>,
) -> Result<Params, u16> {
    // A request's params usually take well under 1 KB: one allocation.
    let mut p = Params::with_capacity(1024);
    let check = |name: &[u8], v: &[u8]| {
        if name == b"SCRIPT_FILENAME" && escapes(v) {
            crate::error_log!(
                Error,
                "SCRIPT_FILENAME \"{}\" has a \"..\" segment, refused",
                String::from_utf8_lossy(v)
            );
            return Err(403);
        }
        Ok(())
    };
    crate::upstream::params::render(
        req,
        &conf.params,
        conf.pass_request_headers,
        body_len,
        &mut p,
        check,
    )?;
    Ok(p)
}

/// Send the start of a request: at once when the socket takes it, else (the
/// rest) as `write_t`.
async fn write_first(sock: &mut UpConn, data: &[u8], t: Duration) -> Result<(), Fail> {
    let n = sock.write_now(data);
    if n == data.len() {
        return Ok(());
    }
    write_t(sock, &data[n..], t).await
}

async fn write_t<W: AsyncWrite + Unpin>(w: &mut W, data: &[u8], t: Duration) -> Result<(), Fail> {
    match tokio::time::timeout(t, w.write_all(data)).await {
        Err(_) => Err(Fail::Timeout("sending request to upstream")),
        Ok(Err(_)) => Err(Fail::Closed("sending request to upstream")),
        Ok(Ok(())) => Ok(()),
    }
}

/// The body's source: read whole before (from its offset on) or from the
/// connection.
enum BodySrc<'b> {
    Buffered(Rc<Buffered>, u64),
    Conn(&'b mut dyn RequestBody),
}

impl BodySrc<'_> {
    async fn next(&mut self) -> Result<Option<Bytes>, Fail> {
        match self {
            BodySrc::Buffered(b, off) => {
                let piece = b.piece_at(*off).map_err(Fail::TempFile)?;
                if let Some(p) = &piece {
                    *off += p.len() as u64;
                }
                Ok(piece)
            }
            BodySrc::Conn(b) => b.chunk().await.map_err(Fail::Client),
        }
    }
}

/// Send `first` (begin and params) then the body as STDIN while reading the
/// reply, so that an application answering before it read its input never
/// deadlocks against us.
async fn send_request(
    up: &mut Upstream,
    first: &Bytes,
    mut src: Option<BodySrc<'_>>,
    send_timeout: Duration,
    read_cap: usize,
) -> Result<(), Fail> {
    let Some(src) = src.as_mut() else {
        let mut all = BytesMut::with_capacity(first.len() + record::HEADER_LEN);
        all.extend_from_slice(first);
        record::stream(&mut all, Type::Stdin, ID, b"");
        return write_first(&mut up.sock, &all, send_timeout).await;
    };
    // A small body held in memory goes with the params in one write, as
    // nginx sends a buffered request (too small to fill the socket's buffer
    // while the application answers without reading it).
    if let BodySrc::Buffered(b, off) = src
        && b.file.is_none()
        && b.len <= client_body::FILE_PIECE as u64
    {
        let mut all = BytesMut::with_capacity(first.len() + b.len as usize + 256);
        all.extend_from_slice(first);
        while let Some(p) = b.piece_at(*off).map_err(Fail::TempFile)? {
            *off += p.len() as u64;
            record::stream(&mut all, Type::Stdin, ID, &p);
        }
        record::stream(&mut all, Type::Stdin, ID, b"");
        return write_first(&mut up.sock, &all, send_timeout).await;
    }
    // The params go with the body already at hand (the client's first
    // bytes read with its head), as nginx sends them.
    let mut lead = BytesMut::with_capacity(first.len() + record::MAX_CONTENT + 64);
    lead.extend_from_slice(first);
    let done = gather_ready(src, &mut lead, first.len() + record::MAX_CONTENT)?;
    let sent = up.sock.write_now(&lead);
    let (mut rd, mut wr) = tokio::io::split(&mut up.sock);
    let rbuf = &mut up.rbuf;
    let writer = async {
        if sent < lead.len() {
            write_t(&mut wr, &lead[sent..], send_timeout).await?;
        }
        if done {
            return Ok(());
        }
        // Each write carries the body at hand (up to a record's worth more),
        // and the last one the end of STDIN.
        let mut rec = BytesMut::with_capacity(record::MAX_CONTENT + 64);
        loop {
            rec.clear();
            let end = match src.next().await? {
                None => {
                    record::stream(&mut rec, Type::Stdin, ID, b"");
                    true
                }
                Some(p) => {
                    if !p.is_empty() {
                        record::stream(&mut rec, Type::Stdin, ID, &p);
                    }
                    gather_ready(src, &mut rec, record::MAX_CONTENT)?
                }
            };
            if !rec.is_empty() {
                write_t(&mut wr, &rec, send_timeout).await?;
            }
            if end {
                return Ok(());
            }
        }
    };
    tokio::pin!(writer);
    let mut eof = false;
    loop {
        tokio::select! {
            r = &mut writer => {
                return match r {
                    // The application answered and stopped reading: use its answer.
                    Err(Fail::Closed(_) | Fail::Timeout(_)) if !rbuf.is_empty() => Ok(()),
                    r => r,
                };
            }
            n = rd.read_buf(rbuf), if !eof && rbuf.len() < read_cap => {
                if !matches!(n, Ok(n) if n > 0) {
                    eof = true;
                }
            }
        }
    }
}

/// Append as STDIN records the body pieces ready without waiting, while
/// `out` is under `cap`; at the body's end the empty record too, and true.
fn gather_ready(src: &mut BodySrc<'_>, out: &mut BytesMut, cap: usize) -> Result<bool, Fail> {
    while out.len() < cap {
        match client_body::now_or_never(src.next()) {
            None => break,
            Some(Ok(Some(p))) => {
                if !p.is_empty() {
                    record::stream(out, Type::Stdin, ID, &p);
                }
            }
            Some(Ok(None)) => {
                record::stream(out, Type::Stdin, ID, b"");
                return Ok(true);
            }
            Some(Err(e)) => return Err(e),
        }
    }
    Ok(false)
}

/// Read STDOUT until the CGI head is complete: the head and the body's first
/// bytes after it. A head within one record is parsed where it was read.
async fn read_head(
    up: &mut Upstream,
    max: usize,
) -> Result<(super::cgi_head::CgiHead, Bytes), Fail> {
    let parse = |b: &[u8]| super::cgi_head::parse(b, max).map_err(|e| Fail::Malformed(e.0));
    let mut head = BytesMut::new();
    loop {
        // The application ended its output before a whole head: an invalid
        // header (fastcgi_next_upstream invalid_header), as nginx.
        let Some(b) = up.stdout("reading response header from upstream").await? else {
            return Err(Fail::Malformed(
                "upstream prematurely closed FastCGI stdout",
            ));
        };
        if head.is_empty() {
            if let Some((h, used)) = parse(&b)? {
                up.catch = None;
                return Ok((h, b.slice(used..)));
            }
            head = BytesMut::from(&b[..]);
        } else {
            head.extend_from_slice(&b);
            if let Some((h, used)) = parse(&head)? {
                up.catch = None;
                return Ok((h, head.split_off(used).freeze()));
            }
        }
    }
}

/// One request's exchange with an application: the params and how the body goes.
struct Exchange<'a> {
    conf: &'a FastcgiConf,
    /// BEGIN_REQUEST and the PARAMS records.
    first: &'a Bytes,
    plan: &'a Plan,
}

/// A reply whose head was read: the connection, the head, the body's first bytes.
type Answer = (Upstream, super::cgi_head::CgiHead, Bytes);

impl Protocol for Exchange<'_> {
    type Reply = Answer;

    fn scheme(&self) -> &str {
        "fastcgi"
    }

    fn exchange<'a>(
        &'a self,
        _req: &'a Request<'_>,
        at: &'a Try<'_>,
        conn: UpConn,
        body: &'a mut dyn RequestBody,
    ) -> impl Future<Output = Result<Answer, Gave<Answer>>> + 'a {
        attempt(self, at, conn, body)
    }
}

/// Send the request on a connected peer and read the reply's head.
async fn attempt(
    ex: &Exchange<'_>,
    at: &Try<'_>,
    conn: UpConn,
    body: &mut dyn RequestBody,
) -> Result<Answer, Gave<Answer>> {
    let conf = ex.conf;
    let reused = conn.reused();
    let read_cap = conf.buffer_size + conf.buffers.0 * conf.buffers.1;
    let mut up = Upstream {
        sock: conn,
        rbuf: BytesMut::new(),
        dec: record::Decoder::new(ID),
        filled: false,
        read_timeout: conf.read_timeout,
        ended: false,
        eof: false,
        lowat: match conf.buffering && !conf.keep_conn {
            true => Lowat::Wanted(read_cap),
            false => Lowat::Off,
        },
        name: PeerName {
            group: at.up.clone(),
            peer: at.peer,
        },
        catch: (!conf.catch_stderr.is_empty()).then(|| conf.catch_stderr.clone()),
    };
    let src = match ex.plan {
        Plan::Held(b) => Some(BodySrc::Buffered(b.clone(), 0)),
        Plan::Stream => Some(BodySrc::Conn(&mut *body)),
        Plan::None => None,
    };
    let res = match send_request(&mut up, ex.first, src, conf.send_timeout, read_cap).await {
        Ok(()) => {
            let wait = read_head(&mut up, conf.buffer_size);
            crate::upstream::unless_client_leaves(!conf.ignore_client_abort, body, wait)
                .await
                .ok_or(Gave::Left)?
        }
        Err(f) => Err(f),
    };
    match res {
        Ok((cgi, rest)) => {
            at.head_read(&up.sock);
            at.status(cgi.status());
            // The attempt ends (max_conns, queue) when the connection is
            // pooled or closed, not at the head.
            let failed = at.status_fails(cgi.status);
            up.sock.hold(at.hold(failed.is_none()));
            match failed {
                Some(kind) => {
                    let mut f = Failure::new(kind, cgi.status, String::new());
                    f.reply = Some((up, cgi, rest));
                    Err(f.into())
                }
                None => Ok((up, cgi, rest)),
            }
        }
        Err(f) => {
            let mut failure = f.failure();
            // A pooled connection the application had closed.
            failure.stale =
                reused && up.rbuf.is_empty() && matches!(f, Fail::Closed(_) | Fail::Io(_));
            Err(failure.into())
        }
    }
}

async fn run(pass: &FastcgiPass, req: &mut Request<'_>, body: &mut dyn RequestBody) -> Outcome {
    let conf: &FastcgiConf = req.conf.get::<FastcgiConf>();
    req.state.ignore_client_abort = conf.ignore_client_abort;
    if req.uri.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
        crate::error_log!(
            Error,
            "URI with a line break refused before FastCGI, client: {}",
            req.client_addr()
        );
        return Outcome::Respond(req.error(400));
    }
    let Ok(upstream) = pass.target.upstream(req).await else {
        return Outcome::Respond(req.error(502));
    };
    let has_body = conf.pass_request_body && req.head.framing != BodyFraming::None;
    if has_body && !conf.request_buffering && client_body::held(req).is_none() {
        let mut tee = client_body::Tee::new(req, body);
        let out = exchange(&upstream, req, &mut tee, Plan::Stream).await;
        tee.finish(req);
        return out;
    }
    let plan = if has_body {
        match client_body::read_all(req, body).await {
            Ok(b) => Plan::Held(b),
            Err(status) => return Outcome::Respond(req.error(status)),
        }
    } else {
        Plan::None
    };
    exchange(&upstream, req, body, plan).await
}

async fn exchange(
    upstream: &Arc<Group>,
    req: &mut Request<'_>,
    body: &mut dyn RequestBody,
    plan: Plan,
) -> Outcome {
    let conf: &FastcgiConf = req.conf.get::<FastcgiConf>();
    // A chunked body read whole has a length now: the application gets it
    // as CONTENT_LENGTH.
    let body_len = match &plan {
        Plan::Held(b) if body.declared_len().is_none() => Some(b.len),
        _ => None,
    };
    let stream_body = matches!(plan, Plan::Stream);
    let params = match build_params(req, conf, body_len) {
        Ok(p) => p,
        Err(status) => return Outcome::Respond(req.error(status)),
    };
    let mut first = BytesMut::with_capacity(params.as_bytes().len() + 64);
    record::begin_request(&mut first, ID, conf.keep_conn);
    record::stream(&mut first, Type::Params, ID, params.as_bytes());
    record::stream(&mut first, Type::Params, ID, b"");
    let first = first.freeze();
    let vars = UpstreamVars::default().attach(req);
    let policy = Policy {
        next_upstream: conf.next_upstream,
        tries: conf.next_upstream_tries,
        timeout: conf.next_upstream_timeout,
        connect_timeout: conf.connect_timeout,
        streamed: stream_body,
    };
    let ex = Exchange {
        conf,
        first: &first,
        plan: &plan,
    };
    let dial = Dial {
        keepalive: conf.socket_keepalive,
        ..Dial::default()
    };
    let (up, cgi, rest) = match driver::run(&ex, req, upstream, body, &policy, &dial, &vars).await {
        Ok(r) => r,
        Err(resp) => return Outcome::Respond(resp),
    };
    let peer = up.name.peer;
    let opts = respond::Opts {
        hide: &conf.hide_header,
        pass: &conf.pass_header,
        intercept_errors: conf.intercept_errors,
        buffering: conf.buffering,
    };
    let status = cgi.status();
    let fields = cgi.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    crate::modules::cache::origin(req, status, fields);
    let reply = match respond::head(req, cgi, &opts) {
        Head::Done(o) => return o,
        Head::Reply(r) => r,
    };
    let pool = conf.keep_conn.then(|| (upstream.clone(), peer));
    let cap = conf.buffers.0 * conf.buffers.1;
    finish(req, reply, rest, up, pool, cap, conf.buffer_size).await
}

/// Read ahead what fits the buffers (all of a small response), then answer.
async fn finish(
    req: &Request<'_>,
    reply: Reply,
    rest: Bytes,
    mut up: Upstream,
    pool: Option<(Arc<Group>, usize)>,
    cap: usize,
    // The low-water mark while the body streams (`fastcgi_buffer_size`).
    lowat: usize,
) -> Outcome {
    let Reply {
        mut resp,
        buffering,
        declared_len,
    } = reply;
    if matches!(resp.status, 204 | 304) || (100..200).contains(&resp.status) {
        // The body is not wanted: the connection is closed, not pooled.
        return Outcome::Respond(resp);
    }
    let mut pieces: VecDeque<Bytes> = VecDeque::new();
    let mut total = rest.len();
    if !rest.is_empty() {
        pieces.push_back(rest);
    }
    if !buffering && let Err(f) = up.want_lowat(None) {
        return f.respond(req, &up.name);
    }
    if buffering {
        while !up.ended && total < cap {
            match up.stdout("reading upstream").await {
                Ok(Some(b)) => {
                    total += b.len();
                    pieces.push_back(b);
                }
                Ok(None) => {}
                Err(f) => return f.respond(req, &up.name),
            }
        }
    }
    if up.ended {
        release(up, pool);
        resp.body = match declared_len {
            // Shorter than declared: what came, then the break.
            Some(d) if d > total as u64 => Body::Stream {
                stream: Box::new(FcgiBody {
                    up: None,
                    pool: None,
                    pending: pieces,
                    left: declared_len,
                    unbuffered: !buffering,
                }),
                len: declared_len,
            },
            _ => respond::whole(pieces, declared_len),
        };
        return Outcome::Respond(resp);
    }
    // The body streams: a buffer's worth at a time (see `Lowat`).
    if up.lowat != Lowat::Off
        && let Err(f) = up.want_lowat(Some(lowat))
    {
        return f.respond(req, &up.name);
    }
    resp.body = Body::Stream {
        stream: Box::new(FcgiBody {
            up: Some(up),
            pool,
            pending: pieces,
            left: declared_len,
            unbuffered: !buffering,
        }),
        len: declared_len,
    };
    Outcome::Respond(resp)
}

/// After END_REQUEST with nothing more buffered, a kept connection goes back
/// to the upstream's pool; otherwise it is closed.
fn release(up: Upstream, pool: Option<(Arc<Group>, usize)>) {
    let clean = up.ended && up.rbuf.is_empty() && !up.eof;
    spare(up.rbuf);
    if let Some((r, peer)) = pool
        && clean
    {
        r.release(peer, up.sock);
    }
}

/// The rest of a response body, pulled by the connection.
#[derive(Debug)]
struct FcgiBody {
    /// `None` once the application ended the request.
    up: Option<Upstream>,
    /// Where the connection goes back after END_REQUEST (`fastcgi_keep_conn`).
    pool: Option<(Arc<Group>, usize)>,
    pending: VecDeque<Bytes>,
    /// Bytes still due when the application declared a Content-Length.
    left: Option<u64>,
    /// `fastcgi_buffering off` or `X-Accel-Buffering: no`.
    unbuffered: bool,
}

impl FcgiBody {
    async fn next_piece(&mut self) -> io::Result<Option<Bytes>> {
        let piece = match self.pending.pop_front() {
            Some(p) => Ok(Some(p)),
            None => match self.up.as_mut() {
                None => Ok(None),
                Some(up) => up.stdout("reading upstream").await,
            },
        };
        self.settle(piece)
    }

    /// Log a failure, give the connection back at the end, hold the body to
    /// its declared length.
    fn settle(&mut self, piece: Result<Option<Bytes>, Fail>) -> io::Result<Option<Bytes>> {
        let piece = match piece {
            Ok(p) => p,
            Err(f) => {
                let name = self.up.as_ref().map(|u| u.name.to_string());
                let name = name.as_deref().unwrap_or("");
                crate::error_log!(Error, "{}, upstream: \"{}\"", f.text(), name);
                return Err(CutShort::wrap(io::Error::other("upstream failed")));
            }
        };
        if piece.is_none()
            && let Some(up) = self.up.take()
        {
            release(up, self.pool.take());
        }
        respond::limit(&mut self.left, piece)
    }
}

impl BodyStream for FcgiBody {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(self.next_piece())
    }

    fn ready(&mut self) -> Option<io::Result<Option<Bytes>>> {
        let piece = match self.pending.pop_front() {
            Some(p) => Ok(Some(p)),
            None => match self.up.as_mut() {
                None => Ok(None),
                Some(up) => up.stdout_at_hand()?,
            },
        };
        Some(self.settle(piece))
    }

    fn unbuffered(&self) -> bool {
        self.unbuffered
    }
}
