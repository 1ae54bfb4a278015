//! The request context every phase and module works on, and the fixed phase
//! pipeline, in nginx's order:
//!
//! 0. post-read: the modules' post-read hooks (realip), once;
//! 1. server rewrite: the modules' rewrite hooks with the server level's
//!    data (again after each internal redirect, as in nginx);
//! 2. find location (`=`, longest prefix, `^~`, regex in order, nested),
//!    refusing `internal` locations to external requests;
//! 3. location rewrite: the rewrite hooks with the location's data; a
//!    changed URI (`last`, or a rewrite without flag) goes back to 2;
//! 4. preaccess and access: the modules' access hooks in their order
//!    (limits, then allow/deny and authentication), skipped by subrequests;
//! 5. pre-content: the modules' pre-content hooks (`try_files`), then
//!    those of the level (`mirror`);
//! 6. content: the location's handler ([`Content`]), else the default
//!    content hook (static files);
//! 7. error pages: a response vireo generated (through [`Request::error`])
//!    whose status has an `error_page` is replaced by an internal redirect;
//! 8. response filters: the modules' filters in their order.
//!
//! The hooks come from the modules of the load ([`Pipeline`]); this file
//! names none of them.
//!
//! Internal redirects (rewrite, try_files, index, error_page, named
//! locations) are limited to [`MAX_REDIRECTS`] per request, as nginx's
//! cycle check; one more is a 500.

use crate::conf::model::LocConf;
use crate::core::clock;
use crate::core::error_page::Overwrite;
use crate::core::message::head::{Method, ParseError, RequestHead};
use crate::core::message::response::{Response, Value};
use crate::core::module::{Extensions, Phase, Pipeline, Precontent, RequestExt, Rewrite};
use crate::core::route::{Found, Location, Server};
use crate::core::vars::{Captures, Re, UserKind, Var, VarSource, find_arg, find_cookie, push_u64};
use bytes::Bytes;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

/// A boxed future borrowing from the request (content handlers, body reads).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// The future `make` returns, boxed. The box is allocated before the future
/// is made, so the future is written into it: a large state machine (of
/// which making it sets only the arguments) is not first laid out on the
/// stack and then copied whole into the box, as `Box::pin(make())` does.
#[inline(always)]
pub fn boxed<'a, F: Future + 'a>(make: impl FnOnce() -> F) -> BoxFuture<'a, F::Output> {
    let b: Box<F> = Box::write(Box::new_uninit(), make());
    Box::into_pin(b)
}

/// Why reading a request body stopped short.
#[derive(Debug)]
pub enum BodyError {
    /// Over client_max_body_size: answer 413.
    TooLarge,
    /// Bad chunked framing: answer with its status, close.
    Bad(ParseError),
    /// client_body_timeout passed.
    TimedOut,
    /// The client went away or the socket failed.
    Closed,
}

impl BodyError {
    /// The status a request whose body failed ends with: 413, the framing
    /// error's own, 408, or 499 for a client that closed (nginx's
    /// NGX_HTTP_CLIENT_CLOSED_REQUEST; a 499 response is never sent).
    pub fn status(&self) -> u16 {
        match self {
            BodyError::TooLarge => 413,
            BodyError::Bad(e) => e.status,
            BodyError::TimedOut => 408,
            BodyError::Closed => 499,
        }
    }
}

/// Response fields as they go to the client: name and value.
pub type Fields = [(&'static str, Value)];

/// The request body as a content handler reads it: decoded (no chunked
/// framing), bounded by client_max_body_size; `Expect: 100-continue` is
/// answered on the first read. Whatever a handler leaves unread is discarded.
/// It is the handler's one way to the client before its response: the
/// interim responses go through it too ([`RequestBody::early_hints`]).
pub trait RequestBody {
    /// The next piece of the body; `None` at its end.
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>>;
    /// The length the client declared (Content-Length); `None` for chunked.
    fn declared_len(&self) -> Option<u64>;
    /// Resolves once the client is known to be gone (it closed the
    /// connection, reset the stream): a request that waits without reading
    /// (limit_req's delay) watches this, as nginx's `ngx_http_test_reading`.
    /// Pending for ever when the protocol cannot tell (bytes already waiting
    /// on an HTTP/1 connection: a pipelined request, an unread body).
    fn gone(&mut self) -> BoxFuture<'_, ()>;
    /// Send the client a 103 (Early Hints) interim response with `fields`
    /// (its connection-specific ones left out), ahead of the final one: on
    /// an HTTP/2 or HTTP/3 stream, or an HTTP/1 connection whose client
    /// spoke HTTP/1.1. Nothing without fields, nor for a body that is not
    /// the client's (a subrequest's, a replay). A client that fails to take
    /// it fails the response after.
    fn early_hints<'a>(&'a mut self, _fields: &'a Fields) -> BoxFuture<'a, ()> {
        Box::pin(std::future::ready(()))
    }
    /// Whether the client's protocol sends the response while this body
    /// still comes, driving the rest of its sending ([`Duplex`]) beside the
    /// response: an HTTP/2 stream. False for HTTP/1, whose connection reads
    /// the body before it answers.
    fn full_duplex(&self) -> bool {
        false
    }
}

/// The rest of a request's body, which the handler sends on beside its
/// response (`OwnFields::duplex`): an exchange both ways at once, as a gRPC
/// bidirectional call, where the upstream answers before the client's body
/// has all come and the client sends more once it has read some of the
/// answer. A protocol whose body is [`RequestBody::full_duplex`] runs it
/// with that body, beside the response; the response's end ends it.
pub trait Duplex: std::fmt::Debug {
    fn send<'a>(self: Box<Self>, body: &'a mut dyn RequestBody) -> BoxFuture<'a, ()>;
}

/// A location's content handler (`fastcgi_pass`, `proxy_pass`, …).
/// Locations without one serve static files.
///
/// A handler answers errors with [`Request::error`] so that `error_page`
/// applies to them, as nginx does for the statuses its handlers return; a
/// response it builds itself (an upstream's 404 page) is sent as it is.
pub trait Content: Send + Sync + std::fmt::Debug {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome>;

    /// Proxy-like handlers answer true: a request for a prefix location's
    /// name without its trailing slash (`/app` for `location /app/`) then
    /// gets a 301 to the slashed URI, as nginx does for proxy_pass,
    /// fastcgi_pass and their kin.
    fn auto_redirect(&self) -> bool {
        false
    }
}

/// The client side of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    Unix,
}

/// The address as error log lines and `$remote_addr` show it: the IP, or
/// `unix:`.
impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(a) => a.ip().fmt(f),
            Peer::Unix => f.write_str("unix:"),
        }
    }
}

/// What a request can learn of its TLS connection (`$https`, `$scheme`, the
/// ssl module's `$ssl_*` variables).
#[derive(Debug, Default)]
pub struct TlsInfo {
    /// `TLSv1.2` or `TLSv1.3`.
    pub protocol: &'static str,
    /// The suite in OpenSSL's naming (as nginx's `$ssl_cipher`).
    pub cipher: String,
    /// The name the client asked for (SNI).
    pub server_name: Option<Box<str>>,
    /// ALPN chose `h2`.
    pub h2: bool,
    /// The protocol ALPN chose (`$ssl_alpn_protocol`), empty when none.
    pub alpn: Box<[u8]>,
    /// The handshake resumed a session (`$ssl_session_reused`).
    pub resumed: bool,
    /// The key-exchange group, as OpenSSL names it (`$ssl_curve`).
    pub curve: &'static str,
    /// The groups the client offered, `:`-separated (`$ssl_curves`).
    pub curves: Box<str>,
    /// The cipher suites the client offered, `:`-separated (`$ssl_ciphers`).
    pub ciphers: Box<str>,
    /// The identifier of the session stored or resumed (`$ssl_session_id`,
    /// hex), empty when none was.
    pub session_id: Box<str>,
    /// The certificate chain the client sent (DER), its own first; empty
    /// when it sent none.
    pub client_certs: Box<[Vec<u8>]>,
    /// How the client's certificate was verified.
    pub client_verify: ClientVerify,
}

/// The verification of a TLS client's certificate (`$ssl_client_verify`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClientVerify {
    /// None was asked for or sent.
    #[default]
    None,
    Success,
    /// OpenSSL's error number and text.
    Failed {
        code: u16,
        reason: &'static str,
    },
}

/// URI changes (rewrites that search locations again, internal redirects by
/// try_files, index, error_page, named locations) allowed per request, as
/// nginx; the next one is a 500.
pub const MAX_REDIRECTS: usize = 10;

/// What a content handler decided.
pub enum Outcome {
    Respond(Response),
    /// Restart location matching with this URI (internal redirect; the
    /// arguments stay).
    Redirect(Vec<u8>),
    /// Go on in this named location (`@name`).
    Named(Vec<u8>),
}

/// Routing state of one request: what rewrites, `set`, regex captures and
/// internal redirects changed. Empty (no allocation) until something uses it.
#[derive(Debug, Default)]
pub struct State {
    /// Headers of an upstream's reply that its `X-Accel-Redirect` carries
    /// onto the final answer (Content-Type, Set-Cookie, …), as nginx.
    pub carried: Vec<(&'static str, Value)>,
    /// Where the request's error messages go, when any level has its own
    /// `error_log` (see [`crate::core::errlog::scoped`]).
    pub errlog: Option<std::rc::Rc<crate::core::errlog::Scope>>,
    /// `$args` after a rewrite, `set $args`, try_files or error_page changed
    /// them (`None`: the request's own).
    pub args: Option<Vec<u8>>,
    /// The method handlers see after error_page turned the request into a GET.
    pub method: Option<Method>,
    /// Reached by an internal redirect: `internal` locations accept it.
    pub internal: bool,
    /// URI changes so far (see [`MAX_REDIRECTS`]).
    pub redirects: usize,
    /// A rewrite without `break` changed the URI in this rewrite phase.
    pub uri_changed: bool,
    /// An error page was already chosen (and recursive_error_pages is off).
    pub in_error_page: bool,
    /// Status the response goes out with after an error page: the original
    /// error, or the `=code` of error_page; 0 for `=` (the page's own).
    pub err_status: Option<u16>,
    /// The last `if` of the location's rewrite phase whose condition held
    /// (its index in `Location::ifs`): as in nginx, the request then runs
    /// with that block's settings and content handler, and no `try_files`.
    pub if_block: Option<usize>,
    /// The last matching `if` that set a content handler of its own: in
    /// nginx that handler stays chosen when a later `if` matches.
    pub if_handler: Option<usize>,
    /// try_files found a file in a regex location with `alias`: the file
    /// name is alias + URI from now on (nginx's `add_uri_to_alias`).
    pub add_uri_to_alias: bool,
    /// The request was refused with this status before its phases (a
    /// malformed head; a TLS client's certificate: 495, 496, 421):
    /// [`Request::run`] answers it, through the server's `error_page` when
    /// one applies, as nginx.
    pub refused: Option<u16>,
    /// Status of the last response made by [`Request::error`] in this pass.
    generated: Cell<u16>,
    /// The status a response being built has (`$status` before it is sent).
    pub status: Cell<u16>,
    /// The connection closes after this response (nginx's `r->keepalive`
    /// unset): `$sent_http_connection`, `$sent_http_keep_alive`.
    pub closing: Cell<bool>,
    /// Values of the configuration's variables (`set`, computed `map`s),
    /// until the request makes a subrequest: then they move to `tree`.
    pub(super) vals: RefCell<Vec<Option<Vec<u8>>>>,
    /// What the requests of one main request share, made when the first
    /// subrequest is (see [`crate::core::subrequest`]).
    pub(super) tree: std::cell::OnceCell<std::rc::Rc<crate::core::subrequest::Tree>>,
    /// Subrequest depth: 0 for a main request, 1 for its subrequests, …
    pub sub_depth: u8,
    /// A clone subrequest ([`crate::core::subrequest::Origin::clone_request`]):
    /// it starts at the content phase of its maker's level, and its
    /// response, a part of its maker's, skips the filters.
    pub(super) clone: bool,
    pub(super) caps: RefCell<Captures>,
    /// Nesting of computed variables, to stop cycles.
    depth: Cell<u8>,
    /// The content handler's body goes on when the client leaves
    /// (`proxy_ignore_client_abort`, `fastcgi_ignore_client_abort`).
    pub ignore_client_abort: bool,
    /// The client address realip took from a header (set at most once per
    /// request); see [`Request::client_addr`].
    pub real_ip: Option<SocketAddr>,
    /// What modules keep for this request (their decisions, upstream
    /// timings, counts held until the request is dropped after its
    /// response is sent and logged).
    pub ext: RequestExt,
}

pub struct Request<'a> {
    pub head: &'a RequestHead,
    pub peer: &'a Peer,
    /// The client socket, for the local address when something asks for it.
    pub fd: std::os::fd::RawFd,
    /// The local address, looked up once on first use (`$server_addr`, redirects).
    pub local: std::cell::OnceCell<Option<SocketAddr>>,
    pub connection: u64,
    pub connection_requests: u64,
    /// When the connection was accepted, in Unix milliseconds.
    pub connection_start_ms: u64,
    /// Milliseconds since the epoch when the request head was complete.
    pub start_ms: u64,
    /// Host (lowercase, without port), as used to choose the server.
    pub host: &'a str,
    pub server: &'a std::sync::Arc<Server>,
    /// Normalised, decoded URI (`$uri`).
    pub uri: Vec<u8>,
    pub location: Option<&'a Location>,
    pub conf: &'a LocConf,
    /// Scratch path of the static handler (the file it looked at).
    pub filename: Vec<u8>,
    /// Request body bytes read (with chunked framing), for `$request_length`.
    pub body_read: u64,
    /// Routing state (rewrites, variables, captures, redirects).
    pub state: State,
    /// The TLS connection's details, on one.
    pub tls: Option<std::sync::Arc<TlsInfo>>,
    /// What the PROXY protocol header of the connection said, when it gave
    /// addresses (`listen … proxy_protocol`).
    pub proxy: Option<std::sync::Arc<crate::core::proxy_protocol::ProxyHeader>>,
}

/// Where processing goes on after a URI change.
#[derive(Clone, Copy)]
enum Jump<'a> {
    /// Server rewrite phase, then location search (first pass, internal redirects).
    Server,
    /// Location search with the current URI (after a location rewrite).
    Find,
    /// A named location: its rewrite phase, no search.
    Named(&'a Location),
}

/// Where the phases before content went instead of reaching it.
enum Step<'a> {
    Respond(Response),
    Jump(Jump<'a>),
}

/// What an error page asks for.
enum ErrorJump<'a> {
    To(Jump<'a>),
    Respond(Response),
}

impl<'a> Request<'a> {
    /// The method, as handlers see it (GET after an error_page redirect).
    /// The method's name: the request's, or GET once an error page runs.
    pub fn method_name(&self) -> &str {
        match self.state.method {
            Some(m) => m.as_str(),
            None => self.head.method_str(),
        }
    }

    pub fn method(&self) -> Method {
        self.state.method.unwrap_or(self.head.method)
    }

    /// The arguments (`$args`), `None` when empty.
    pub fn args(&self) -> Option<&[u8]> {
        let a = match &self.state.args {
            Some(a) => a.as_slice(),
            None => self.head.query()?,
        };
        (!a.is_empty()).then_some(a)
    }

    /// An `if` of the location's rewrite script matched: the request takes
    /// that block's settings (and, for content, its handler).
    pub fn enter_if(&mut self, i: usize) {
        let Some(l) = self.location else { return };
        let b = &l.ifs[i];
        if b.own_content {
            self.state.if_handler = Some(i);
        }
        self.state.if_block = Some(i);
        self.set_conf(&b.conf);
    }

    /// Make `conf` the request's level: its settings, and its error log for
    /// what the request logs from now on.
    pub fn set_conf(&mut self, conf: &'a LocConf) {
        self.conf = conf;
        if let Some(scope) = &self.state.errlog {
            scope.set(&conf.core.error_log);
        }
    }

    /// Run the phases and produce the response.
    pub async fn run(&mut self, body: &mut dyn RequestBody) -> Response {
        let server: &'a Server = self.server;
        crate::error_log!(
            Debug,
            "http uri: \"{}\"",
            String::from_utf8_lossy(&self.uri)
        );
        let mut resp = match self.state.refused {
            Some(status) => self.error(status),
            None => {
                // A subrequest starts at the server rewrite phase, as nginx's.
                let answered = match self.is_subrequest() {
                    true => None,
                    false => server
                        .conf
                        .hooks
                        .post_read
                        .iter()
                        .find_map(|hook| hook(self)),
                };
                match answered {
                    Some(r) => r,
                    None => {
                        self.server_name_captures(self.host);
                        let start = match self.state.clone {
                            true => None,
                            false => Some(Jump::Server),
                        };
                        self.process(body, start).await
                    }
                }
            }
        };
        // As in nginx, a Location or WWW-Authenticate set before an error
        // page's internal redirect stays on the answer.
        let mut kept = Vec::new();
        // The answer is a redirect vireo made (not a handler's): msie_refresh
        // may turn it into a page that refreshes.
        let special_redirect;
        loop {
            match self.error_page(&resp) {
                None => {
                    special_redirect = self.state.generated.get() == resp.status
                        && matches!(resp.status, 301 | 302);
                    break;
                }
                Some(ErrorJump::Respond(r)) => {
                    special_redirect = r.headers.iter().any(|(n, _)| *n == "Location");
                    resp = r;
                    break;
                }
                Some(ErrorJump::To(jump)) => {
                    kept.extend(resp.headers.drain(..).filter(|(n, _)| {
                        n.eq_ignore_ascii_case("location")
                            || n.eq_ignore_ascii_case("www-authenticate")
                    }));
                    resp = self.process(body, Some(jump)).await;
                }
            }
        }
        for (name, v) in std::mem::take(&mut self.state.carried) {
            if name.eq_ignore_ascii_case("content-type") {
                resp.content_type = Some(v);
            } else {
                resp.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                resp.headers.push((name, v));
            }
        }
        // Those the page's answer does not set itself.
        if !kept.is_empty() {
            let own: Vec<&'static str> = resp.headers.iter().map(|(n, _)| *n).collect();
            resp.headers.extend(
                kept.into_iter()
                    .filter(|(name, _)| !own.iter().any(|n| n.eq_ignore_ascii_case(name))),
            );
        }
        // The error's status stays on the page's answer, unless the page
        // itself ended in an error or a redirect vireo generated (`return
        // 302 …`, a directory redirect, a missing page's 404): that one is
        // sent, as nginx does.
        let own = self.state.generated.get() == resp.status && resp.status >= 300;
        if let Some(s) = self.state.err_status.filter(|s| *s != 0 && !own) {
            resp.status = s;
        }
        // nginx's own codes (a bad TLS client, plain HTTP on a TLS port)
        // go out as 400 once error_page had its chance at them.
        if (494..=497).contains(&resp.status) {
            resp.status = 400;
        }
        let conf: &'a LocConf = self.conf;
        if special_redirect
            && conf.core.msie_refresh
            && crate::core::browser::Browser::of_head(self.head).msie
        {
            msie_refresh(&mut resp);
        }
        if !self.state.clone {
            for filter in &conf.hooks.filters {
                filter(self, &mut resp);
            }
        }
        crate::error_log!(Debug, "http finalize request: {}", resp.status);
        resp
    }

    /// The rewrite hooks with the data of one level.
    fn rewrite(&mut self, data: &Extensions, location: bool) -> Rewrite {
        let pipeline: &'a Pipeline = &self.server.pipeline;
        for hook in &pipeline.rewrite {
            match hook(self, data, location) {
                Rewrite::Next => {}
                done => return done,
            }
        }
        Rewrite::Next
    }

    /// Phases from `jump` to a response; `None`: the content phase at the
    /// request's level.
    async fn process(
        &mut self,
        body: &mut dyn RequestBody,
        mut jump: Option<Jump<'a>>,
    ) -> Response {
        self.state.generated.set(0);
        loop {
            if let Some(j) = jump {
                match self.before_content(body, j).await {
                    Ok(()) => {}
                    Err(Step::Respond(r)) => return r,
                    Err(Step::Jump(j)) => {
                        jump = Some(j);
                        continue;
                    }
                }
            }
            match self.content(body).await {
                Outcome::Respond(r) => return r,
                Outcome::Redirect(uri) => {
                    if let Some(r) = self.count_change() {
                        return r;
                    }
                    self.uri = uri;
                    self.state.internal = true;
                    jump = Some(Jump::Server);
                }
                Outcome::Named(name) => match self.named(&name) {
                    Ok(l) => jump = Some(Jump::Named(l)),
                    Err(r) => return r,
                },
            }
        }
    }

    /// The phases from `jump` up to content: server rewrite, location,
    /// location rewrite, access, pre-content; the request is then at the
    /// level whose content handler answers it.
    async fn before_content(
        &mut self,
        body: &mut dyn RequestBody,
        jump: Jump<'a>,
    ) -> Result<(), Step<'a>> {
        let server: &'a Server = self.server;
        let found = match jump {
            Jump::Server => {
                self.location = None;
                self.set_conf(&server.conf);
                self.state.uri_changed = false;
                if let Rewrite::Respond(r) = self.rewrite(&server.phases.ext, false) {
                    return Err(Step::Respond(r));
                }
                self.state.uri_changed = false;
                self.find()
            }
            Jump::Find => self.find(),
            Jump::Named(l) => Found::Loc(l),
        };
        let loc = match found {
            Found::Loc(l) => Some(l),
            Found::None => None,
            Found::AddSlash(l) => {
                self.location = Some(l);
                self.set_conf(&l.conf);
                return Err(Step::Respond(self.add_slash(l)));
            }
        };
        self.location = loc;
        self.set_conf(loc.map_or(&*server.conf, |l| &*l.conf));
        // limit_except: a method the location does not list takes the
        // block's settings.
        if let Some(le) = self.limit_except() {
            self.set_conf(&le.conf);
        }
        self.state.if_block = None;
        self.state.if_handler = None;
        if let Some(l) = loc {
            crate::error_log!(Debug, "using configuration \"{}\"", l.pattern);
            if l.phases.internal && !self.state.internal {
                return Err(Step::Respond(self.error(404)));
            }
            self.state.uri_changed = false;
            match self.rewrite(&l.phases.ext, true) {
                Rewrite::Respond(r) => return Err(Step::Respond(r)),
                Rewrite::Break => self.state.uri_changed = false,
                Rewrite::Last | Rewrite::Next => {}
            }
            if std::mem::take(&mut self.state.uri_changed) {
                if let Some(r) = self.count_change() {
                    return Err(Step::Respond(r));
                }
                return Err(Step::Jump(Jump::Find));
            }
        }
        let pipeline: &'a Pipeline = &server.pipeline;
        let conf: &'a LocConf = self.conf;
        // The limits and access checks were the main request's: its
        // subrequests skip them, as nginx's skip the access phase.
        let access = match self.is_subrequest() {
            true => &[][..],
            false => &conf.hooks.access[..],
        };
        if !access.is_empty()
            && let Some(r) = self.phase_hooks(access, body).await
        {
            return Err(Step::Respond(r));
        }
        let data = match loc {
            Some(l) => &l.phases.ext,
            None => &server.phases.ext,
        };
        let precontent = match self.state.if_block {
            Some(_) => &[][..],
            None => &pipeline.precontent[..],
        };
        for hook in precontent {
            match hook(self, data) {
                Precontent::Next => {}
                Precontent::Redirect(uri, args) => {
                    if let Some(r) = self.count_change() {
                        return Err(Step::Respond(r));
                    }
                    self.uri = uri;
                    self.state.args = Some(args);
                    self.state.internal = true;
                    return Err(Step::Jump(Jump::Server));
                }
                Precontent::Named(name) => {
                    return match self.named(&name) {
                        Ok(l) => Err(Step::Jump(Jump::Named(l))),
                        Err(r) => Err(Step::Respond(r)),
                    };
                }
                Precontent::Status(code) => return Err(Step::Respond(self.error(code))),
            }
        }
        if !conf.hooks.precontent.is_empty()
            && let Some(r) = self.phase_hooks(&conf.hooks.precontent, body).await
        {
            return Err(Step::Respond(r));
        }
        Ok(())
    }

    /// The `limit_except` block whose settings a method the location does
    /// not list takes.
    fn limit_except(&self) -> Option<&'a crate::core::route::LimitExcept> {
        let loc: &'a Location = self.location?;
        // Most locations have none: the method is not looked at then.
        loc.limit_except.as_ref()?;
        loc.limit_for(self.method_name())
    }

    /// The content phase at the request's level: the handler of the
    /// location (or of its matching `if`, or its `limit_except` block),
    /// else the first module content hook that takes the request, else
    /// the default content.
    async fn content(&mut self, body: &mut dyn RequestBody) -> Outcome {
        let server: &'a Server = self.server;
        let pipeline: &'a Pipeline = &server.pipeline;
        let conf: &'a LocConf = self.conf;
        let loc = self.location;
        let handler = match (loc, self.state.if_block, self.limit_except()) {
            (Some(l), Some(i), _) => {
                let b = &l.ifs[i];
                match self.state.if_handler {
                    // nginx runs the handler an earlier `if` chose with
                    // this block's settings, which hold no upstream of
                    // it: 500.
                    Some(h) if h != i && !b.own_content && b.content.is_none() => {
                        crate::error_log!(
                            Error,
                            "the content handler of one \"if\" runs with the settings of a later \"if\" that has none"
                        );
                        return Outcome::Respond(self.error(500));
                    }
                    _ => b.content.as_deref(),
                }
            }
            (_, _, Some(le)) => le.content.as_deref(),
            _ => loc.and_then(|l| l.content.as_deref()),
        };
        let taken = match handler {
            Some(_) => None,
            None => conf.hooks.content.iter().find(|h| (h.takes)(self)),
        };
        match (handler, taken, pipeline.default_content) {
            (Some(h), _, _) => h.content(self, body).await,
            (None, Some(content), _) => (content.run)(self, body).await,
            (None, None, Some(default)) => default(self),
            (None, None, None) => Outcome::Respond(self.error(404)),
        }
    }

    /// Run access-like hooks in order; `Some` is the answer one decided on.
    async fn phase_hooks(
        &mut self,
        hooks: &[crate::core::module::AccessHook],
        body: &mut dyn RequestBody,
    ) -> Option<Response> {
        for hook in hooks {
            match hook(self, body) {
                Phase::Next => {}
                Phase::Respond(r) => return Some(r),
                Phase::Wait(decide) => {
                    if let Some(r) = decide.await {
                        return Some(r);
                    }
                }
            }
        }
        None
    }

    /// The location for the current URI; regex locations record their captures.
    fn find(&self) -> Found<'a> {
        let server: &'a Server = self.server;
        let uri = &self.uri;
        server
            .locations
            .search(uri, &mut |re: &Re| self.regex_exec(re, uri))
    }

    /// Jump to a named location (counted as a URI change).
    fn named(&mut self, name: &[u8]) -> Result<&'a Location, Response> {
        if let Some(r) = self.count_change() {
            return Err(r);
        }
        let server: &'a Server = self.server;
        let found = std::str::from_utf8(name)
            .ok()
            .and_then(|n| server.named.get(n));
        found.ok_or_else(|| {
            crate::error_log!(
                Error,
                "could not find named location \"{}\"",
                String::from_utf8_lossy(name)
            );
            Response::error(500, self.conf.core.server_tokens)
        })
    }

    /// Count a URI change; the response when there were too many.
    fn count_change(&mut self) -> Option<Response> {
        self.state.redirects += 1;
        if self.state.redirects <= MAX_REDIRECTS {
            return None;
        }
        crate::error_log!(
            Error,
            "rewrite or internal redirection cycle while processing \"{}\"",
            String::from_utf8_lossy(&self.uri)
        );
        Some(self.error(500))
    }

    /// `location /x/` with a proxy-like handler, asked for `/x`: 301 to `/x/`.
    fn add_slash(&self, l: &Location) -> Response {
        let mut to = self.origin();
        to.extend(crate::core::path::escape_uri(l.pattern.as_bytes()));
        if let Some(a) = self.args() {
            to.push('?');
            to.push_str(&String::from_utf8_lossy(a));
        }
        self.error(301).header("Location", Value::Owned(to))
    }

    /// The error page for a response this request generated, if one applies.
    fn error_page(&mut self, resp: &Response) -> Option<ErrorJump<'a>> {
        if self.state.generated.get() != resp.status
            || self.state.in_error_page
            || self.state.redirects > MAX_REDIRECTS
        {
            return None;
        }
        let conf: &'a LocConf = self.conf;
        let page = conf.core.error_pages.as_deref()?.find(resp.status)?;
        if !conf.core.recursive_error_pages {
            self.state.in_error_page = true;
        }
        let mut target = Vec::new();
        page.uri.render(self, &mut target);
        self.state.err_status = Some(match page.overwrite {
            Overwrite::Keep => resp.status,
            Overwrite::FromPage => 0,
            Overwrite::Code(c) => c,
        });
        if target.first() == Some(&b'/') {
            if let Some(r) = self.count_change() {
                return Some(ErrorJump::Respond(r));
            }
            if self.head.method != Method::Head {
                self.state.method = Some(Method::Get);
            }
            let (uri, args) = split_args(&target);
            self.uri = uri.to_vec();
            self.state.args = Some(args.to_vec());
            self.state.internal = true;
            return Some(ErrorJump::To(Jump::Server));
        }
        if target.first() == Some(&b'@') {
            return Some(match self.named(&target) {
                Ok(l) => ErrorJump::To(Jump::Named(l)),
                Err(r) => ErrorJump::Respond(r),
            });
        }
        // Anything else is sent as a redirect.
        self.state.err_status = None;
        let to = String::from_utf8_lossy(&target).into_owned();
        let code = match page.overwrite {
            Overwrite::Code(c @ (301 | 302 | 303 | 307 | 308)) => c,
            _ => 302,
        };
        Some(ErrorJump::Respond(
            Response::error(code, self.conf.core.server_tokens)
                .header("Location", Value::Owned(to)),
        ))
    }

    /// An error page honouring this location's settings. `error_page` applies
    /// to the statuses answered this way.
    pub fn error(&self, status: u16) -> Response {
        self.state.generated.set(status);
        Response::error(status, self.conf.core.server_tokens)
    }

    /// The status of the last response [`Request::error`] made.
    pub fn generated_status(&self) -> u16 {
        self.state.generated.get()
    }

    /// A variable by a name known only at run time (SSI's `echo`, `if`,
    /// `set`): the core's, a module's, or one the configuration declares.
    pub fn lookup_var(&self, name: &str) -> Option<Var> {
        if let Some(v) = Var::lookup(name) {
            return Some(v);
        }
        let lower = name.to_ascii_lowercase();
        if let Some(i) = self.server.vars.names.iter().position(|n| **n == *lower) {
            return Some(Var::User(crate::core::vars::UserVar {
                index: i as u32,
                name: lower.into(),
            }));
        }
        self.server.pipeline.variables.iter().find_map(|&def| {
            use crate::core::module::VarKind;
            let arg = match def.kind {
                VarKind::Prefix => lower.strip_prefix(def.name)?,
                VarKind::Name if lower == def.name => "",
                _ => return None,
            };
            Some(Var::Module(crate::core::vars::ModVar {
                def,
                arg: arg.into(),
            }))
        })
    }

    /// Was a response of this status made by [`Request::error`] in this
    /// pass (an error page stands for it)?
    pub fn is_generated(&self, status: u16) -> bool {
        self.state.generated.get() == status
    }

    /// False when an error page runs with a status of its own, or in a
    /// subrequest: conditional and range headers are then ignored, as
    /// nginx's filters skip responses that are not 200 and subrequests.
    pub fn conditionals_apply(&self) -> bool {
        !self.is_subrequest() && self.state.err_status.is_none_or(|s| s == 0 || s == 200)
    }

    /// The client as every module and variable sees it (`$remote_addr`,
    /// allow/deny, limits, logs, ip_hash): the address realip took from a
    /// header, else the connection's peer.
    pub fn client_addr(&self) -> Peer {
        self.state.real_ip.map_or(*self.peer, Peer::Tcp)
    }

    /// `, client: …, server: …, request: "…", host: "…"`: the context nginx
    /// appends to a request's error log lines.
    /// A stream session's request (`stream::session`): it has no request
    /// line.
    pub fn is_session(&self) -> bool {
        self.head.line().is_empty()
    }

    pub fn log_context(&self) -> String {
        // A stream session (a request without a request line) names its
        // client and the address it came in on, as nginx's stream log lines.
        if self.is_session() {
            let server = self.local_addr().map_or(String::new(), |a| a.to_string());
            return format!(", client: {}, server: {server}", self.client_addr());
        }
        format!(
            ", client: {}, server: {}, request: \"{}\", host: \"{}\"",
            self.client_addr(),
            self.server.name(),
            String::from_utf8_lossy(self.head.line()),
            self.host
        )
    }

    /// The address the connection came in on (one getsockname, then cached).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *self.local.get_or_init(|| match self.peer {
            Peer::Tcp(_) => crate::sys::local_addr(self.fd),
            Peer::Unix => None,
        })
    }

    /// Scheme, host and port for an absolute redirect, as nginx builds them:
    /// empty with `absolute_redirect off` (the Location stays relative); the
    /// server's first name with `server_name_in_redirect on`, else the
    /// request's host, or when it sent none, the address the connection came
    /// in on; the port with `port_in_redirect on` unless it is the scheme's
    /// default (80, or 443 on TLS).
    pub fn origin(&self) -> String {
        let core = &self.conf.core;
        if !core.absolute_redirect {
            return String::new();
        }
        let local = self.local_addr();
        let host = match (self.host, local) {
            _ if core.server_name_in_redirect => self.server.name().to_string(),
            (h, _) if !h.is_empty() => h.to_string(),
            (_, Some(SocketAddr::V4(l))) => l.ip().to_string(),
            (_, Some(SocketAddr::V6(l))) => format!("[{}]", l.ip()),
            (_, None) if !self.server.name().is_empty() => self.server.name().to_string(),
            (_, None) => "localhost".to_string(),
        };
        let (scheme, default_port) = match self.tls {
            Some(_) => ("https", 443),
            None => ("http", 80),
        };
        match local {
            Some(l) if core.port_in_redirect && l.port() != default_port => {
                format!("{scheme}://{host}:{}", l.port())
            }
            _ => format!("{scheme}://{host}"),
        }
    }

    /// `$scheme`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// The URI the request line asked for: the request target, without the
    /// scheme and authority of an absolute-form target (`$request_uri`).
    pub fn request_uri(&self) -> &[u8] {
        let t = self.head.target();
        if t.first().is_none_or(|&b| b == b'/' || b == b'*') {
            return t;
        }
        // absolute-form: from the path on.
        let after_scheme = memchr::memmem::find(t, b"://").map_or(0, |i| i + 3);
        match t[after_scheme..]
            .iter()
            .position(|&b| b == b'/' || b == b'?')
        {
            Some(i) => &t[after_scheme + i..],
            None => b"/",
        }
    }

    /// Run a configuration regex on `subject`; on a match, record its
    /// numbered captures (when some template reads them) and assign its
    /// named captures.
    pub fn regex_exec(&self, re: &Re, subject: &[u8]) -> bool {
        if !re.may_match(subject) {
            return false;
        }
        let named = re.named();
        let numbered = re.groups() > 0 && self.server.vars.captures;
        if named.is_empty() && !numbered {
            return re.is_match_allowed(subject);
        }
        let mut spans = Vec::with_capacity(re.groups() + 1);
        if !re.captures(subject, &mut spans) {
            return false;
        }
        if numbered {
            self.state.caps.borrow_mut().set(subject, &spans);
        }
        for &(group, var) in named {
            let v = spans
                .get(group)
                .copied()
                .flatten()
                .map_or(Vec::new(), |(a, b)| subject[a..b].to_vec());
            self.set_var(var, v);
        }
        true
    }

    /// Numbered capture `n` of the last regex match with groups.
    pub fn capture(&self, n: usize, out: &mut Vec<u8>) {
        if let Some(c) = self.state.caps.borrow().get(n) {
            out.extend_from_slice(c);
        }
    }

    /// Assign a configuration variable (`set`, named captures, `map` cache).
    pub fn set_var(&self, index: u32, value: Vec<u8>) {
        let i = index as usize;
        let mut vals = self.vals().borrow_mut();
        if vals.len() <= i {
            vals.resize(self.server.vars.kinds.len().max(i + 1), None);
        }
        vals[i] = Some(value);
    }

    /// The captures of the server's regex name that chose this server for
    /// `host` (the Host, or a stream session's TLS server name).
    pub fn server_name_captures(&self, host: &str) {
        let s = self.server;
        if s.phases.name_regex.is_empty() || host.is_empty() {
            return;
        }
        if s.names.iter().any(|n| n == host) {
            return;
        }
        for re in &s.phases.name_regex {
            if self.regex_exec(re, host.as_bytes()) {
                return;
            }
        }
    }

    fn user_var(&self, index: u32, out: &mut Vec<u8>, outer: &dyn VarSource) {
        let i = index as usize;
        if let Some(Some(v)) = self.vals().borrow().get(i) {
            out.extend_from_slice(v);
            return;
        }
        match self.server.vars.kinds.get(i) {
            Some(UserKind::Computed(c)) => {
                let depth = self.state.depth.get();
                if depth >= 100 {
                    crate::error_log!(
                        Error,
                        "cycle while evaluating variable \"{}\"",
                        self.server.vars.names[i]
                    );
                    return;
                }
                self.state.depth.set(depth + 1);
                let start = out.len();
                c.compute(self, outer, out);
                self.state.depth.set(depth);
                if !c.volatile() {
                    self.set_var(index, out[start..].to_vec());
                }
            }
            Some(UserKind::Set) if self.conf.core.uninitialized_variable_warn => {
                crate::error_log!(
                    Warn,
                    "using uninitialized \"{}\" variable",
                    self.server.vars.names[i]
                );
            }
            _ => {}
        }
    }

    /// `$document_root`: the root, or the location's alias (rendered).
    pub fn document_root(&self, out: &mut Vec<u8>) {
        match self.location.and_then(|l| l.alias.as_ref().map(|a| (l, a))) {
            Some((l, alias)) => match &l.phases.alias_vars {
                Some(t) => t.render(self, out),
                None => out.extend_from_slice(alias.as_bytes()),
            },
            None => {
                self.root(out);
            }
        }
    }

    /// Append the location's `root` (rendered when it has variables,
    /// relative to the prefix); false when a rendered one has a `.` or `..`
    /// segment (nothing is appended then).
    pub fn root(&self, out: &mut Vec<u8>) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let core = &self.conf.core;
        let Some(t) = &core.root_vars else {
            out.extend_from_slice(core.root.as_os_str().as_bytes());
            return true;
        };
        let mut r = Vec::new();
        t.render(self, &mut r);
        if r.split(|&b| b == b'/').any(|s| s == b"." || s == b"..") || r.contains(&0) {
            crate::error_log!(
                Error,
                "root \"{}\" refused: it has a \".\" or \"..\" segment{}",
                String::from_utf8_lossy(&r),
                self.log_context()
            );
            return false;
        }
        if r.first() != Some(&b'/') {
            out.extend_from_slice(core.root.as_os_str().as_bytes());
            if out.last() != Some(&b'/') {
                out.push(b'/');
            }
        }
        out.extend_from_slice(&r);
        true
    }

    /// A variable's value; `outer` answers the variables that computed
    /// variables read (`Finished` passes itself so that `$status` is known).
    pub fn var_into(&self, var: &Var, out: &mut Vec<u8>, outer: &dyn VarSource) {
        let head = self.head;
        match var {
            Var::RemoteAddr => push_peer(out, self.client_addr()),
            Var::BinaryRemoteAddr => match self.client_addr() {
                Peer::Tcp(remote) => match remote.ip() {
                    std::net::IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
                    std::net::IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
                },
                Peer::Unix => out.extend_from_slice(b"unix:"),
            },
            Var::RemotePort => {
                // Empty for a unix socket, and for a realip address without port.
                if let Peer::Tcp(remote) = self.client_addr()
                    && remote.port() != 0
                {
                    push_u64(out, remote.port().into());
                }
            }
            Var::RealipRemoteAddr => push_peer(out, *self.peer),
            Var::RealipRemotePort => {
                if let Peer::Tcp(remote) = self.peer {
                    push_u64(out, remote.port().into());
                }
            }
            Var::Https => {
                if self.tls.is_some() {
                    out.extend_from_slice(b"on");
                }
            }
            Var::Module(m) => (m.def.get)(self, &m.arg, out),
            Var::Capture(n) => self.capture(*n as usize, out),
            Var::User(u) => self.user_var(u.index, out, outer),
            Var::TimeLocal => clock::with_time_local(|t| out.extend_from_slice(t.as_bytes())),
            Var::TimeIso8601 => clock::with_time_iso8601(|t| out.extend_from_slice(t.as_bytes())),
            Var::Msec => clock::push_millis_as_secs(out, clock::unix_millis()),
            Var::Request => out.extend_from_slice(head.line()),
            Var::RequestMethod => match self.state.method {
                Some(Method::Get) => out.extend_from_slice(b"GET"),
                _ => out.extend_from_slice(head.method_str().as_bytes()),
            },
            Var::RequestUri => out.extend_from_slice(self.request_uri()),
            Var::RequestId => {
                let id = self.tree().ext.get_or_insert_with(RequestId::new);
                out.extend_from_slice(&id.0);
            }
            Var::Uri => out.extend_from_slice(&self.uri),
            Var::Args => out.extend_from_slice(self.args().unwrap_or_default()),
            Var::IsArgs => {
                if self.args().is_some() {
                    out.push(b'?');
                }
            }
            Var::Status => {
                let s = match self.state.err_status {
                    Some(s) if s != 0 => s,
                    _ => self.state.status.get(),
                };
                out.extend_from_slice(format!("{s:03}").as_bytes());
            }
            Var::BodyBytesSent | Var::BytesSent => out.push(b'0'),
            Var::SentHttp(_) | Var::RequestCompletion => {}
            Var::RequestLength => push_u64(out, head.raw().len() as u64 + self.body_read),
            Var::RequestTime => {
                clock::push_millis_as_secs(out, clock::unix_millis().saturating_sub(self.start_ms))
            }
            Var::Connection => push_u64(out, self.connection),
            Var::ConnectionRequests => push_u64(out, self.connection_requests),
            Var::ConnectionTime => clock::push_millis_as_secs(
                out,
                clock::unix_millis().saturating_sub(self.connection_start_ms),
            ),
            Var::Host => {
                if self.host.is_empty() {
                    out.extend_from_slice(self.server.name().as_bytes());
                } else {
                    out.extend_from_slice(self.host.as_bytes());
                }
            }
            Var::Hostname => out.extend_from_slice(hostname().as_bytes()),
            Var::ServerName => out.extend_from_slice(self.server.name().as_bytes()),
            Var::ServerPort => {
                if let Some(l) = self.local_addr() {
                    push_u64(out, l.port().into());
                }
            }
            Var::ServerAddr => {
                if let Some(l) = self.local_addr() {
                    crate::core::vars::push_ip(out, l.ip());
                }
            }
            Var::ServerProtocol => out.extend_from_slice(head.version.as_str().as_bytes()),
            Var::Scheme => out.extend_from_slice(self.scheme().as_bytes()),
            Var::Pid => push_u64(out, std::process::id().into()),
            Var::ContentType => join_fields(
                head,
                |n| n.eq_ignore_ascii_case(b"content-type"),
                b", ",
                out,
            ),
            Var::ContentLength => {
                out.extend_from_slice(head.header("content-length").unwrap_or_default())
            }
            Var::DocumentRoot => self.document_root(out),
            Var::RealpathRoot => {
                use std::os::unix::ffi::{OsStrExt, OsStringExt};
                let mut root = Vec::new();
                self.document_root(&mut root);
                let path = std::path::PathBuf::from(std::ffi::OsString::from_vec(root));
                match std::fs::canonicalize(&path) {
                    Ok(p) => out.extend_from_slice(p.as_os_str().as_bytes()),
                    Err(e) => crate::error_log!(
                        Crit,
                        "realpath() \"{}\" failed ({})",
                        path.display(),
                        crate::core::errlog::errno_text(&e)
                    ),
                }
            }
            Var::RequestFilename => {
                let mut f = Vec::new();
                if crate::core::path::map_uri(self, &self.uri, &mut f).is_ok() {
                    out.extend_from_slice(&f);
                }
            }
            Var::NginxVersion => out.extend_from_slice(crate::core::vars::VERSION.as_bytes()),
            Var::Arg(name) => {
                if let Some(v) = self.args().and_then(|q| find_arg(q, name)) {
                    out.extend_from_slice(v);
                }
            }
            Var::Http(name) => {
                // Cookies are joined by "; ", other fields by ", ", as nginx.
                let sep: &[u8] = if name.as_ref() == "cookie" {
                    b"; "
                } else {
                    b", "
                };
                // `$http_x_foo` reads `X-Foo` and `x_foo` fields alike, as
                // nginx's (underscores_in_headers keeps the latter).
                join_fields(head, |n| same_field_name(n, name.as_bytes()), sep, out);
            }
            Var::Cookie(name) => {
                let found = head
                    .headers()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
                    .find_map(|(_, c)| find_cookie(c, name));
                if let Some(v) = found {
                    out.extend_from_slice(v);
                }
            }
        }
    }
}

/// A request's variables while it is processed (rewrite, `if`, `return`,
/// `try_files`, handlers): the response variables are not known yet.
impl VarSource for Request<'_> {
    fn var(&self, var: &Var, out: &mut Vec<u8>) {
        self.var_into(var, out, self);
    }
}

/// `msie_refresh`: a redirect becomes a 200 page whose `<meta>` refresh
/// leads to the Location, as nginx's: the URL with spaces, quotes and bytes
/// outside printable ASCII escaped, and no Location, Last-Modified, ETag or
/// Accept-Ranges.
fn msie_refresh(resp: &mut Response) {
    let Some(i) = resp.headers.iter().position(|(n, _)| *n == "Location") else {
        return;
    };
    let (_, location) = resp.headers.remove(i);
    let mut body = b"<html><head><meta http-equiv=\"Refresh\" content=\"0; URL=".to_vec();
    for &b in location.as_str().as_bytes() {
        if b <= b' ' || b >= 0x7f || b == b'"' || b == b'\'' {
            body.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            body.push(b);
        }
    }
    body.extend_from_slice(b"\"></head><body></body></html>\r\n");
    resp.headers.retain(|(n, _)| {
        !["Last-Modified", "ETag", "Accept-Ranges"]
            .iter()
            .any(|h| n.eq_ignore_ascii_case(h))
    });
    resp.status = 200;
    resp.content_type = Some(Value::Static("text/html"));
    resp.body = crate::core::message::response::Body::Bytes(body.into());
}

/// The values of every request field called `name`, joined by `sep`.
fn join_fields(head: &RequestHead, named: impl Fn(&[u8]) -> bool, sep: &[u8], out: &mut Vec<u8>) {
    let mut first = true;
    for (n, v) in head.headers() {
        if named(n) {
            if !first {
                out.extend_from_slice(sep);
            }
            out.extend_from_slice(v);
            first = false;
        }
    }
}

/// Is the field `n` the one `$http_NAME` names (`name`: NAME with `-` for
/// `_`)? Case and `-`/`_` do not count.
fn same_field_name(n: &[u8], name: &[u8]) -> bool {
    let fold = |b: u8| match b {
        b'_' => b'-',
        b => b.to_ascii_lowercase(),
    };
    n.len() == name.len() && n.iter().zip(name).all(|(&a, &b)| fold(a) == fold(b))
}

/// `uri?args` → (uri, args); args empty when there is no `?`.
pub fn split_args(s: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b'?', s) {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, b""),
    }
}

/// A request whose response has gone out: what logs and variables read.
pub struct Finished<'a> {
    pub req: &'a Request<'a>,
    pub resp: &'a Response,
    pub head_bytes: u64,
    /// Body bytes written (`$body_bytes_sent`).
    pub body_bytes: u64,
    /// The response went out whole (`$request_completion`): the connection
    /// took its last byte, nothing failed or was cut short on the way.
    pub complete: bool,
}

impl<'a> Finished<'a> {
    /// `resp` for `req` with nothing sent yet: the response as filters and
    /// subrequests' variables see it, or one never sent (`return 444`).
    pub fn unsent(req: &'a Request<'a>, resp: &'a Response) -> Finished<'a> {
        Finished {
            req,
            resp,
            head_bytes: 0,
            body_bytes: 0,
            complete: false,
        }
    }
}

impl VarSource for Finished<'_> {
    fn var(&self, var: &Var, out: &mut Vec<u8>) {
        match var {
            Var::Status => push_u64(out, self.resp.status.into()),
            Var::BodyBytesSent => push_u64(out, self.body_bytes),
            Var::BytesSent => push_u64(out, self.head_bytes + self.body_bytes),
            Var::RequestCompletion => {
                if self.complete {
                    out.extend_from_slice(b"OK");
                }
            }
            Var::SentHttp(name) => {
                let r = self.resp;
                let mut found = false;
                match name.as_ref() {
                    "content-type" => {
                        if let Some(v) = &r.content_type {
                            out.extend_from_slice(v.as_str().as_bytes());
                            found = true;
                        }
                    }
                    // Several fields of the name: joined by ", ", as nginx.
                    _ => {
                        let same = r
                            .headers
                            .iter()
                            .filter(|(n, _)| n.eq_ignore_ascii_case(name));
                        for (_, v) in same {
                            if found {
                                out.extend_from_slice(b", ");
                            }
                            out.extend_from_slice(v.as_str().as_bytes());
                            found = true;
                        }
                    }
                }
                if found {
                    return;
                }
                // The fields the connection writes itself, as nginx computes them.
                let closing = self.req.state.closing.get();
                match name.as_ref() {
                    "content-length" => {
                        if let Some(n) = r.body.size() {
                            push_u64(out, n);
                        }
                    }
                    "connection" => out.extend_from_slice(match r.status {
                        101 => b"upgrade".as_slice(),
                        _ if closing => b"close",
                        _ => b"keep-alive",
                    }),
                    "keep-alive" => {
                        let t = self.req.conf.core.keepalive_header;
                        if !closing && r.status != 101 && t.is_some_and(|t| !t.is_zero()) {
                            out.extend_from_slice(b"timeout=");
                            push_u64(out, t.unwrap_or_default().as_secs());
                        }
                    }
                    _ => {}
                }
            }
            _ => self.req.var_into(var, out, self),
        }
    }
}

/// `$request_id`'s value.
struct RequestId([u8; 32]);

impl RequestId {
    fn new() -> RequestId {
        use std::hash::{BuildHasher, Hasher};
        let mut hex = [0u8; 32];
        let now = clock::unix_millis();
        for (i, half) in hex.chunks_mut(16).enumerate() {
            // Randomly keyed SipHash: a fresh key per RandomState.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(now ^ i as u64);
            let v = h.finish();
            for (j, b) in half.iter_mut().enumerate() {
                *b = b"0123456789abcdef"[(v >> (60 - 4 * j)) as usize & 15];
            }
        }
        RequestId(hex)
    }
}

/// `Peer`'s `Display`, without the formatting machinery for an IP address.
fn push_peer(out: &mut Vec<u8>, p: Peer) {
    match p {
        Peer::Tcp(a) => crate::core::vars::push_ip(out, a.ip()),
        Peer::Unix => out.extend_from_slice(b"unix:"),
    }
}

/// The machine's host name (`$hostname`), read once.
pub fn hostname() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_errors_answer_as_nginx() {
        assert_eq!(BodyError::TooLarge.status(), 413);
        assert_eq!(BodyError::TimedOut.status(), 408);
        // A client that closed: nginx's 499.
        assert_eq!(BodyError::Closed.status(), 499);
        assert_eq!(BodyError::Bad(ParseError::NOT_IMPLEMENTED).status(), 501);
    }
}
