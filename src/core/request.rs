//! The request context every phase and module works on, and the fixed phase
//! pipeline: server selection → location → content (with internal redirects) →
//! response filters. Content handlers plug in through the [`Content`] trait and
//! read the request body through [`RequestBody`].

use crate::conf::model::LocConf;
use crate::core::clock;
use crate::core::route::{Location, Server};
use crate::core::vars::{Var, VarSource, find_arg, find_cookie, push_u64};
use crate::http::h1::parse::{Method, ParseError, RequestHead};
use crate::http::response::Response;
use crate::modules::static_files;
use bytes::Bytes;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

/// A boxed future borrowing from the request (content handlers, body reads).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

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

/// The request body as a content handler reads it: decoded (no chunked
/// framing), bounded by client_max_body_size; `Expect: 100-continue` is
/// answered on the first read. Whatever a handler leaves unread is discarded.
pub trait RequestBody {
    /// The next piece of the body; `None` at its end.
    fn chunk(&mut self) -> BoxFuture<'_, Result<Option<Bytes>, BodyError>>;
    /// The length the client declared (Content-Length); `None` for chunked.
    fn declared_len(&self) -> Option<u64>;
}

/// A location's content handler (`fastcgi_pass`, `proxy_pass`, `return`, …).
/// Locations without one serve static files.
pub trait Content: Send + Sync + std::fmt::Debug {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome>;
}

/// The client side of a connection.
#[derive(Clone, Copy, Debug)]
pub enum Peer {
    Tcp(SocketAddr),
    Unix,
}

/// Internal redirects (index, later rewrite/error_page) allowed per request, as nginx.
pub const MAX_REDIRECTS: usize = 10;

/// What a content handler decided.
pub enum Outcome {
    Respond(Response),
    /// Restart location matching with this URI (internal redirect).
    Redirect(Vec<u8>),
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
    /// Milliseconds since the epoch when the request head was complete.
    pub start_ms: u64,
    /// Host (lowercase, without port), as used to choose the server.
    pub host: &'a str,
    pub server: &'a Server,
    /// Normalised, decoded URI (`$uri`).
    pub uri: Vec<u8>,
    pub location: Option<&'a Location>,
    pub conf: &'a LocConf,
    /// File the content phase looked at (`$request_filename`).
    pub filename: Vec<u8>,
    /// Request body bytes read (with chunked framing), for `$request_length`.
    pub body_read: u64,
}

impl<'a> Request<'a> {
    pub fn method(&self) -> Method {
        self.head.method
    }
    pub fn args(&self) -> Option<&[u8]> {
        self.head.query()
    }

    /// Run the phases and produce the response.
    pub async fn run(&mut self, body: &mut dyn RequestBody) -> Response {
        for _ in 0..=MAX_REDIRECTS {
            self.location = self.server.location(&self.uri);
            self.conf = self.location.map_or(&*self.server.conf, |l| &*l.conf);
            let handler = self.location.and_then(|l| l.content.as_deref());
            let outcome = match handler {
                Some(h) => h.content(self, body).await,
                None => static_files::handler::content(self),
            };
            match outcome {
                Outcome::Respond(mut r) => {
                    crate::modules::filter_response(self, &mut r);
                    return r;
                }
                Outcome::Redirect(uri) => self.uri = uri,
            }
        }
        crate::error_log!(
            Error,
            "rewrite or internal redirection cycle while processing \"{}\"",
            String::from_utf8_lossy(&self.uri)
        );
        self.error(500)
    }

    /// An error page honouring this location's settings.
    pub fn error(&self, status: u16) -> Response {
        Response::error(status, self.conf.core.server_tokens)
    }

    /// The address the connection came in on (one getsockname, then cached).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        *self.local.get_or_init(|| match self.peer {
            Peer::Tcp(_) => crate::sys::local_addr(self.fd),
            Peer::Unix => None,
        })
    }

    /// Scheme, host and port for an absolute redirect, as nginx builds them
    /// (`server_name_in_redirect off`): the request's host, or when it sent
    /// none, the address the connection came in on; the port unless it is 80.
    pub fn origin(&self) -> String {
        let local = self.local_addr();
        let host = match (self.host, local) {
            (h, _) if !h.is_empty() => h.to_string(),
            (_, Some(SocketAddr::V4(l))) => l.ip().to_string(),
            (_, Some(SocketAddr::V6(l))) => format!("[{}]", l.ip()),
            (_, None) if !self.server.name().is_empty() => self.server.name().to_string(),
            (_, None) => "localhost".to_string(),
        };
        match local {
            Some(l) if l.port() != 80 => format!("http://{host}:{}", l.port()),
            _ => format!("http://{host}"),
        }
    }
}

/// A request whose response has gone out: what logs and variables read.
pub struct Finished<'a> {
    pub req: &'a Request<'a>,
    pub resp: &'a Response,
    pub head_bytes: u64,
    /// Body bytes written (`$body_bytes_sent`).
    pub body_bytes: u64,
}

impl VarSource for Finished<'_> {
    fn var(&self, var: &Var, out: &mut Vec<u8>) {
        let req = self.req;
        let head = req.head;
        match var {
            Var::RemoteAddr => match req.peer {
                Peer::Tcp(remote) => write_display(out, &remote.ip()),
                Peer::Unix => out.extend_from_slice(b"unix:"),
            },
            Var::RemotePort => {
                if let Peer::Tcp(remote) = req.peer {
                    push_u64(out, remote.port().into());
                }
            }
            Var::RemoteUser | Var::Capture(_) => {}
            Var::TimeLocal => clock::with_time_local(|t| out.extend_from_slice(t.as_bytes())),
            Var::TimeIso8601 => clock::with_time_iso8601(|t| out.extend_from_slice(t.as_bytes())),
            Var::Msec => clock::push_millis_as_secs(out, clock::unix_millis()),
            Var::Request => out.extend_from_slice(head.line()),
            Var::RequestMethod => out.extend_from_slice(head.method_str().as_bytes()),
            Var::RequestUri => out.extend_from_slice(head.target()),
            Var::Uri => out.extend_from_slice(&req.uri),
            Var::Args => out.extend_from_slice(req.args().unwrap_or_default()),
            Var::IsArgs => {
                if req.args().is_some() {
                    out.push(b'?');
                }
            }
            Var::Status => push_u64(out, self.resp.status.into()),
            Var::BodyBytesSent => push_u64(out, self.body_bytes),
            Var::BytesSent => push_u64(out, self.head_bytes + self.body_bytes),
            Var::RequestLength => push_u64(out, head.raw().len() as u64 + req.body_read),
            Var::RequestTime => {
                clock::push_millis_as_secs(out, clock::unix_millis().saturating_sub(req.start_ms))
            }
            Var::Connection => push_u64(out, req.connection),
            Var::ConnectionRequests => push_u64(out, req.connection_requests),
            Var::Host => {
                if req.host.is_empty() {
                    out.extend_from_slice(req.server.name().as_bytes());
                } else {
                    out.extend_from_slice(req.host.as_bytes());
                }
            }
            Var::Hostname => out.extend_from_slice(hostname().as_bytes()),
            Var::ServerName => out.extend_from_slice(req.server.name().as_bytes()),
            Var::ServerPort => {
                if let Some(l) = req.local_addr() {
                    push_u64(out, l.port().into());
                }
            }
            Var::ServerAddr => {
                if let Some(l) = req.local_addr() {
                    write_display(out, &l.ip());
                }
            }
            Var::ServerProtocol => out.extend_from_slice(head.version.as_str().as_bytes()),
            Var::Scheme => out.extend_from_slice(b"http"),
            Var::Pid => push_u64(out, std::process::id().into()),
            Var::ContentType => {
                out.extend_from_slice(head.header("content-type").unwrap_or_default())
            }
            Var::ContentLength => {
                out.extend_from_slice(head.header("content-length").unwrap_or_default())
            }
            Var::DocumentRoot => {
                use std::os::unix::ffi::OsStrExt;
                out.extend_from_slice(req.conf.static_files.root.as_os_str().as_bytes())
            }
            Var::RequestFilename => out.extend_from_slice(&req.filename),
            Var::NginxVersion => out.extend_from_slice(crate::core::vars::VERSION.as_bytes()),
            Var::Arg(name) => {
                if let Some(v) = req.args().and_then(|q| find_arg(q, name)) {
                    out.extend_from_slice(v);
                }
            }
            Var::Http(name) => {
                if let Some(v) = head.header(name) {
                    out.extend_from_slice(v);
                }
            }
            Var::Cookie(name) => {
                if let Some(v) = head.header("cookie").and_then(|c| find_cookie(c, name)) {
                    out.extend_from_slice(v);
                }
            }
            Var::SentHttp(name) => {
                let r = self.resp;
                let v = match name.as_ref() {
                    "content-type" => r.content_type.as_ref().map(|v| v.as_str()),
                    _ => r
                        .headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.as_str()),
                };
                if let Some(v) = v {
                    out.extend_from_slice(v.as_bytes());
                } else if name.as_ref() == "content-length"
                    && let Some(n) = r.body.size()
                {
                    push_u64(out, n);
                }
            }
        }
    }
}

fn write_display(out: &mut Vec<u8>, v: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = write!(out, "{v}");
}

/// The machine's host name (`$hostname`), read once.
fn hostname() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".into())
    })
}
