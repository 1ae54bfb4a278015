//! Subrequests, as nginx's `ngx_http_subrequest`: a module (a filter such as
//! SSI, a handler) runs an internal GET for a URI and arguments through the
//! same server's phases — server rewrite, location (`internal` ones
//! reachable), location rewrite, access, content, error_page, filters —
//! and reads its response, whose body it may pass on in its own.
//!
//! A subrequest inherits from the request that makes it what nginx's does:
//! the request line and headers (`$request_uri`, `$http_*`), the client and
//! the connection, the server, and the variables' values — one set for the
//! whole tree of requests, as nginx's `sr->variables = r->variables`, so a
//! `set` in one is seen by the others. It has its own `$uri` and `$args`.
//! The request body, when the main request's handler read it whole, is the
//! subrequests' too (entries a module put with [`RequestExt::share`]);
//! otherwise a subrequest has none.
//!
//! Everything a subrequest needs is owned ([`Origin`]: the server's `Arc`,
//! a copy of the head, the peer…), so one can run from a response body
//! stream long after the request that made it returned from its phases: the
//! subrequest is a future that builds its [`Request`] from those locals,
//! runs it, and hands the response's head and then its body, piece by
//! piece, to the [`Subrequest`] that polls it (no task is spawned; the body
//! is produced only as fast as it is read).
//!
//! A background subrequest ([`Origin::background`], nginx's
//! `NGX_HTTP_SUBREQUEST_BACKGROUND` as mirror makes it) runs as a task of
//! the worker beside the request that made it, with that request's method,
//! and only its response's head is taken (its body is dropped unread, as
//! nginx's `header_only`): the main request's response goes out without
//! waiting for it, and the connection waits for it
//! ([`Request::background`]) before its next request.
//!
//! Limits, as nginx: 50 levels of nesting (a deeper one is refused as a
//! "subrequests cycle"), 65535 subrequests per main request.

use crate::core::clock;
use crate::core::message::head::{BodyFraming, Method, RequestHead};
use crate::core::message::response::{Body, BodyStream, Response, Value};
use crate::core::module::RequestExt;
use crate::core::request::{BodyError, BoxFuture, Peer, Request, RequestBody, TlsInfo};
use crate::core::route::{Location, Server};
use bytes::Bytes;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

/// Nesting allowed below a main request (nginx's NGX_HTTP_MAX_SUBREQUESTS).
pub const MAX_DEPTH: u8 = 50;
/// Subrequests one main request may make in all (nginx's reference counter
/// bound).
pub const MAX_COUNT: u32 = 65535 - 1000;

/// What every request of one main request's tree shares.
#[derive(Debug, Default)]
pub struct Tree {
    /// The variables' values (`set`, computed `map`s).
    pub(super) vals: RefCell<Vec<Option<Vec<u8>>>>,
    /// What modules keep for the whole tree (SSI's variables and settings).
    pub ext: RequestExt,
    /// Subrequests made so far.
    count: Cell<u32>,
    /// Background subrequests not yet waited for.
    background: RefCell<Vec<tokio::task::JoinHandle<()>>>,
}

/// What the subrequests of one request inherit, owned.
#[derive(Debug)]
pub struct Origin {
    server: Arc<Server>,
    head: RequestHead,
    host: Box<str>,
    peer: Peer,
    fd: std::os::fd::RawFd,
    local: Option<Option<SocketAddr>>,
    connection: u64,
    connection_requests: u64,
    connection_start_ms: u64,
    real_ip: Option<SocketAddr>,
    tls: Option<Arc<TlsInfo>>,
    proxy: Option<Arc<crate::core::proxy_protocol::ProxyHeader>>,
    tree: Rc<Tree>,
    /// Depth of the subrequests made from here.
    depth: u8,
    shared: Vec<Rc<dyn Any>>,
    /// The URI of the request that makes them (`$uri`), against which a
    /// relative URI is resolved.
    pub uri: Vec<u8>,
    args: Option<Vec<u8>>,
    method: Option<Method>,
    /// The level the maker was at (its location, matching `if` and the
    /// handler an earlier `if` chose), where a clone runs.
    location: Option<*const Location>,
    if_block: Option<usize>,
    if_handler: Option<usize>,
    /// The maker's numbered regex captures (`$1`…), which a clone reads.
    caps: crate::core::vars::Captures,
}

impl Request<'_> {
    /// The values and store shared by this request's tree (made on first use).
    pub fn tree(&self) -> &Rc<Tree> {
        self.state.tree.get_or_init(|| {
            Rc::new(Tree {
                vals: RefCell::new(std::mem::take(&mut *self.state.vals.borrow_mut())),
                ..Default::default()
            })
        })
    }

    pub(super) fn vals(&self) -> &RefCell<Vec<Option<Vec<u8>>>> {
        match self.state.tree.get() {
            Some(t) => &t.vals,
            None => &self.state.vals,
        }
    }

    /// A subrequest, not a main request (filters that act on what goes to
    /// the client — add_header, compression, userid, limit_rate — leave
    /// subrequests alone, as nginx's).
    pub fn is_subrequest(&self) -> bool {
        self.state.sub_depth > 0
    }

    /// `post_action`: once the response is sent, an internal GET for the
    /// location's post_action URI, whose answer is read and discarded.
    /// `None` without one (boxed, so that the connection's own future does
    /// not carry a subrequest's state on every request).
    pub fn post_action(&self) -> Option<crate::core::request::BoxFuture<'_, ()>> {
        let target = self.conf.core.post_action.clone()?;
        Some(Box::pin(async move {
            let (uri, args) = crate::core::request::split_args(&target);
            if let Ok(mut sub) = self.subrequests().subrequest(uri.to_vec(), args.to_vec()) {
                while let Ok(Some(_)) = sub.next().await {}
            }
        }))
    }

    /// The background subrequests of this request's tree still to wait
    /// for: the connection awaits them once the response is sent, before
    /// it logs the request and reads the next one (nginx keeps the
    /// connection until they end). `None` when there are none.
    pub fn background(&self) -> Option<BoxFuture<'_, ()>> {
        let tree = self.state.tree.get()?;
        let tasks = std::mem::take(&mut *tree.background.borrow_mut());
        if tasks.is_empty() {
            return None;
        }
        Some(Box::pin(async move {
            for t in tasks {
                let _ = t.await;
            }
        }))
    }

    /// What subrequests made by this request inherit.
    pub fn subrequests(&self) -> Rc<Origin> {
        self.sub_origin(self.state.ext.shared())
    }

    /// What subrequests made by this request inherit, less its request
    /// body even when it was read whole: they run with an empty one (as
    /// nginx's auth_request subrequest, whose fake empty body leaves the
    /// main request's alone).
    pub fn subrequests_without_body(&self) -> Rc<Origin> {
        self.sub_origin(Vec::new())
    }

    fn sub_origin(&self, shared: Vec<Rc<dyn Any>>) -> Rc<Origin> {
        let mut head = self.head.clone();
        if shared.is_empty() {
            head.framing = BodyFraming::None;
        }
        Rc::new(Origin {
            server: self.server.clone(),
            head,
            host: self.host.into(),
            peer: *self.peer,
            fd: self.fd,
            local: self.local.get().copied(),
            connection: self.connection,
            connection_requests: self.connection_requests,
            connection_start_ms: self.connection_start_ms,
            real_ip: self.state.real_ip,
            tls: self.tls.clone(),
            proxy: self.proxy.clone(),
            tree: self.tree().clone(),
            depth: self.state.sub_depth + 1,
            shared,
            uri: self.uri.clone(),
            args: self.state.args.clone(),
            method: self.state.method,
            location: self.location.map(std::ptr::from_ref),
            if_block: self.state.if_block,
            if_handler: self.state.if_handler,
            caps: self.state.caps.borrow().clone(),
        })
    }
}

/// The head of a subrequest's response.
#[derive(Debug)]
pub struct SubHead {
    pub status: u16,
    /// The answer is an error or redirect vireo generated (a handler's
    /// status, not a page an upstream sent).
    pub generated: bool,
    pub content_type: Option<Value>,
    pub headers: Vec<(&'static str, Value)>,
    /// The body's length when known.
    pub len: Option<u64>,
    /// `subrequest_output_buffer_size` where the subrequest was answered:
    /// the most of its body a module should keep in memory.
    pub buffer_size: u64,
}

/// What a module runs when a subrequest is done (its body read to the
/// end), in the subrequest's own context: its variables (`$upstream_*` of
/// its upstream, `$sent_http_*` of its answer through
/// [`crate::core::request::Finished`]) and its response (the body already
/// taken).
pub type OnDone = Box<dyn FnOnce(&Request<'_>, &Response)>;

/// Why no subrequest was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Nested deeper than [`MAX_DEPTH`].
    Cycle,
    /// More than [`MAX_COUNT`] for one main request.
    TooMany,
}

impl Origin {
    /// The values and store of the request tree.
    pub fn tree(&self) -> &Rc<Tree> {
        &self.tree
    }

    /// A request context on this origin's server, connection and variables.
    fn request(&self, uri: Vec<u8>) -> Request<'_> {
        let mut req = Request {
            head: &self.head,
            peer: &self.peer,
            fd: self.fd,
            local: match self.local {
                Some(a) => std::cell::OnceCell::from(a),
                None => std::cell::OnceCell::new(),
            },
            connection: self.connection,
            connection_requests: self.connection_requests,
            connection_start_ms: self.connection_start_ms,
            start_ms: clock::unix_millis(),
            host: &self.host,
            server: &self.server,
            uri,
            location: None,
            conf: &self.server.conf,
            filename: Vec::new(),
            body_read: 0,
            state: Default::default(),
            tls: self.tls.clone(),
            proxy: self.proxy.clone(),
        };
        let _ = req.state.tree.set(self.tree.clone());
        req.state.real_ip = self.real_ip;
        req
    }

    /// The request that made this origin as it was then (server, URI,
    /// arguments, the location its URI maps to, the shared variables), for
    /// what reads its variables later, as SSI commands do while its body is
    /// sent.
    pub fn with_request<R>(&self, f: impl FnOnce(&mut Request<'_>) -> R) -> R {
        let mut req = self.request(self.uri.clone());
        req.state.sub_depth = self.depth - 1;
        req.state.args = self.args.clone();
        req.state.method = self.method;
        req.state.internal = self.depth > 1;
        let server: &Server = &self.server;
        let loc = server.location(&req.uri);
        req.location = loc;
        req.set_conf(loc.map_or(&*server.conf, |l| &*l.conf));
        f(&mut req)
    }

    /// Run an internal GET for `uri` (decoded, as `$uri`) with `args`; the
    /// subrequest starts when it is first polled.
    pub fn subrequest(self: &Rc<Self>, uri: Vec<u8>, args: Vec<u8>) -> Result<Subrequest, Refused> {
        self.subrequest_then(uri, args, None)
    }

    /// [`Origin::subrequest`], with `done` run in the subrequest's context
    /// once its body has been read to the end.
    pub fn subrequest_then(
        self: &Rc<Self>,
        uri: Vec<u8>,
        args: Vec<u8>,
        done: Option<OnDone>,
    ) -> Result<Subrequest, Refused> {
        self.count(&uri)?;
        let chan = Rc::new(Chan::default());
        let fut = run(self.clone(), uri, args, chan.clone(), done, Mode::Get);
        Ok(Subrequest {
            fut: Some(Box::pin(fut)),
            chan,
            head: None,
        })
    }

    /// A clone of the request that made this origin, as nginx's
    /// `NGX_HTTP_SUBREQUEST_CLONE`: its URI, arguments, method and
    /// headers, run from the content phase of the level it was at (no
    /// rewrite, location search or pre-content again), its response left
    /// unfiltered (it is a part of the maker's, which the maker's filters
    /// see whole). `ext` goes into the clone's [`RequestExt`] (what tells
    /// it which part it is).
    pub fn clone_request(self: &Rc<Self>, ext: Rc<dyn Any>) -> Result<Subrequest, Refused> {
        self.count(&self.uri)?;
        let chan = Rc::new(Chan::default());
        let fut = run(
            self.clone(),
            self.uri.clone(),
            self.clone_args(),
            chan.clone(),
            None,
            Mode::Clone(ext, false),
        );
        Ok(Subrequest {
            fut: Some(Box::pin(fut)),
            chan,
            head: None,
        })
    }

    /// A clone's arguments: the maker's.
    fn clone_args(&self) -> Vec<u8> {
        self.args
            .clone()
            .unwrap_or_else(|| self.head.query().unwrap_or_default().to_vec())
    }

    /// [`Origin::clone_request`] as a background subrequest (see
    /// [`Origin::background`]): the cache's background update.
    pub fn background_clone(self: &Rc<Self>, ext: Rc<dyn Any>) -> Result<(), Refused> {
        self.count(&self.uri)?;
        let args = self
            .args
            .clone()
            .unwrap_or_else(|| self.head.query().unwrap_or_default().to_vec());
        let chan = Rc::new(Chan::default());
        let mode = Mode::Clone(ext, true);
        let task =
            tokio::task::spawn_local(run(self.clone(), self.uri.clone(), args, chan, None, mode));
        self.tree.background.borrow_mut().push(task);
        Ok(())
    }

    /// A background subrequest for `uri` with `args`, with the method of
    /// the request that makes it: it starts at once as a task of the
    /// worker; its response's head is taken and its body dropped, and it
    /// is logged with `log_subrequest on`. The connection waits for it
    /// before its next request ([`Request::background`]).
    pub fn background(self: &Rc<Self>, uri: Vec<u8>, args: Vec<u8>) -> Result<(), Refused> {
        self.count(&uri)?;
        let chan = Rc::new(Chan::default());
        let task =
            tokio::task::spawn_local(run(self.clone(), uri, args, chan, None, Mode::Background));
        self.tree.background.borrow_mut().push(task);
        Ok(())
    }

    /// Count one more subrequest of the tree, refused past the limits.
    fn count(&self, uri: &[u8]) -> Result<(), Refused> {
        if self.depth > MAX_DEPTH {
            crate::error_log!(
                Error,
                "subrequests cycle while processing \"{}\"",
                String::from_utf8_lossy(uri)
            );
            return Err(Refused::Cycle);
        }
        let n = self.tree.count.get() + 1;
        if n > MAX_COUNT {
            crate::error_log!(
                Error,
                "request reference counter overflow while processing \"{}\"",
                String::from_utf8_lossy(uri)
            );
            return Err(Refused::TooMany);
        }
        self.tree.count.set(n);
        Ok(())
    }
}

/// How a subrequest runs.
enum Mode {
    /// A GET whose head and body its reader pulls.
    Get,
    /// With the maker's method, on its own, its body dropped.
    Background,
    /// The maker's request again at its level, with this in its store
    /// ([`Origin::clone_request`]); `true`: on its own, its body dropped
    /// ([`Origin::background_clone`]).
    Clone(Rc<dyn Any>, bool),
}

/// The producer's side of a subrequest: the response head once it is
/// known, then one body piece at a time.
#[derive(Default)]
struct Chan {
    head: RefCell<Option<SubHead>>,
    piece: RefCell<Option<io::Result<Bytes>>>,
}

/// A subrequest in progress: its response head ([`Subrequest::head`]), then
/// its body as a stream.
pub struct Subrequest {
    fut: Option<Pin<Box<dyn Future<Output = ()>>>>,
    chan: Rc<Chan>,
    head: Option<SubHead>,
}

impl std::fmt::Debug for Subrequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subrequest")
            .field("running", &self.fut.is_some())
            .finish()
    }
}

impl Subrequest {
    /// Drive the subrequest until `ready` sees what it waits for in the
    /// channel, or the subrequest ends.
    fn poll_until(
        &mut self,
        cx: &mut std::task::Context<'_>,
        ready: impl Fn(&Chan) -> bool,
    ) -> Poll<()> {
        loop {
            if ready(&self.chan) {
                return Poll::Ready(());
            }
            let Some(fut) = self.fut.as_mut() else {
                return Poll::Ready(());
            };
            match fut.as_mut().poll(cx) {
                Poll::Ready(()) => self.fut = None,
                Poll::Pending if ready(&self.chan) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Its response head has been taken ([`Subrequest::head`] answers at
    /// once).
    pub fn has_head(&self) -> bool {
        self.head.is_some()
    }

    /// The response's head, once the subrequest has one (`None` when it
    /// ended without one).
    pub fn head(&mut self) -> BoxFuture<'_, Option<&SubHead>> {
        Box::pin(async move {
            if self.head.is_none() {
                std::future::poll_fn(|cx| self.poll_until(cx, |c| c.head.borrow().is_some())).await;
                self.head = self.chan.head.borrow_mut().take();
            }
            self.head.as_ref()
        })
    }
}

impl BodyStream for Subrequest {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(async move {
            std::future::poll_fn(|cx| self.poll_until(cx, |c| c.piece.borrow().is_some())).await;
            match self.chan.piece.borrow_mut().take() {
                Some(Ok(b)) => Ok(Some(b)),
                Some(Err(e)) => Err(e),
                None => Ok(None),
            }
        })
    }
}

/// A subrequest's request body: what the main request's handler read whole
/// reaches it through the shared entries; nothing more is read.
struct NoBody;

impl RequestBody for NoBody {
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
    fn declared_len(&self) -> Option<u64> {
        None
    }
    fn gone(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }
}

/// The subrequest itself: phases, head, body pieces, log.
async fn run(
    o: Rc<Origin>,
    uri: Vec<u8>,
    args: Vec<u8>,
    chan: Rc<Chan>,
    done: Option<OnDone>,
    mode: Mode,
) {
    let mut req = o.request(uri);
    req.state.sub_depth = o.depth;
    req.state.args = Some(args);
    req.state.internal = true;
    req.state.method = match mode {
        Mode::Get => Some(Method::Get),
        Mode::Background | Mode::Clone(..) => o.method,
    };
    for e in &o.shared {
        req.state.ext.share(e.clone());
    }
    if let Mode::Clone(ext, _) = &mode {
        req.state.ext.share(ext.clone());
        req.state.clone = true;
        req.location = o.location.and_then(|l| o.server.locate(l));
        req.state.if_block = o.if_block;
        req.state.if_handler = o.if_handler;
        *req.state.caps.borrow_mut() = o.caps.clone();
        let loc = req.location;
        req.set_conf(match (loc, o.if_block) {
            (Some(l), Some(i)) => &l.ifs[i].conf,
            (Some(l), None) => &l.conf,
            (None, _) => &o.server.conf,
        });
        if let Some(le) = loc.and_then(|l| l.limit_for(req.method_name())) {
            req.set_conf(&le.conf);
        }
    }
    crate::error_log!(
        Debug,
        "http subrequest \"{}?{}\"",
        String::from_utf8_lossy(&req.uri),
        String::from_utf8_lossy(req.args().unwrap_or_default())
    );
    let mut resp = req.run(&mut NoBody).await;
    let generated = req.generated_status() == resp.status && resp.status >= 300;
    *chan.head.borrow_mut() = Some(SubHead {
        status: resp.status,
        generated,
        content_type: resp.content_type.clone(),
        headers: resp.headers.clone(),
        len: resp.body.size(),
        buffer_size: req.conf.core.subrequest_output_buffer_size,
    });
    let body = std::mem::replace(&mut resp.body, Body::Empty);
    let mut sent = 0u64;
    let body = match mode {
        Mode::Get | Mode::Clone(_, false) => body,
        Mode::Background | Mode::Clone(_, true) => Body::Empty,
    };
    if let Some(mut stream) = body.into_stream() {
        loop {
            let piece = match stream.next().await {
                Ok(Some(p)) if p.is_empty() => continue,
                Ok(Some(p)) => Ok(p),
                Ok(None) => break,
                Err(e) => Err(e),
            };
            let last = piece.is_err();
            if let Ok(p) = &piece {
                sent += p.len() as u64;
            }
            *chan.piece.borrow_mut() = Some(piece);
            // Wait until the reader took it.
            std::future::poll_fn(|_| match chan.piece.borrow().is_some() {
                true => Poll::Pending,
                false => Poll::Ready(()),
            })
            .await;
            if last {
                break;
            }
        }
    }
    if let Some(done) = done {
        done(&req, &resp);
    }
    if req.conf.core.log_subrequest {
        // A subrequest is never complete (`$request_completion`), as nginx's.
        let done = crate::core::request::Finished {
            body_bytes: sent,
            ..crate::core::request::Finished::unsent(&req, &resp)
        };
        for log in &req.server.pipeline.log {
            log(&done);
        }
    }
}
