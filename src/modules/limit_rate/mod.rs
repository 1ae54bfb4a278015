//! `limit_rate` and `limit_rate_after`: a response is sent no faster than a
//! rate, after its first bytes, as nginx's core does; `$limit_rate` is the
//! rate, and `set $limit_rate` changes it for the request. The filter turns
//! the body into a stream the connection pulls piece by piece (it pulls the
//! next piece only once the last is written), and a piece is handed out only
//! when the bytes before it have had their time.

use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::{parse_size, set_once, size};
use crate::core::message::response::read_file_piece;
use crate::core::message::response::{Body, BodyStream, Response};
use crate::core::module::{Hooks, Module, Ordered, VarDef, VarSet};
use crate::core::request::{BoxFuture, Request};
use crate::core::vars::push_u64;
use crate::settings;
use bytes::Bytes;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::rc::Rc;
use std::time::{Duration, Instant};

settings! {
    pub struct LimitRateConf / LimitRateConfSet {
        /// Bytes per second; 0 is no limit.
        pub rate: u64 = 0,
        /// Bytes sent before the limit applies.
        pub after: u64 = 0,
        /// A script of this level (or above) sets `$limit_rate`.
        pub variable: bool = false,
    }
}

/// The rate `set $limit_rate` gave this request.
struct RateSet(u64);

/// `set $limit_rate value`: a size (`k`, `m` suffixes); anything else is
/// logged and leaves the rate as it was, as nginx.
static SET_RATE: VarSet = VarSet {
    run: |req, v| match std::str::from_utf8(v).ok().and_then(parse_size) {
        Some(n) => req.state.ext.insert(Rc::new(RateSet(n))),
        None => crate::error_log!(Error, "invalid size \"{}\"", String::from_utf8_lossy(v)),
    },
    level: |s| s.loc().get_mut::<LimitRateConfSet>().variable = Some(true),
};

/// The request's rate: set by the script, else the configuration's.
fn rate(req: &Request<'_>) -> u64 {
    match req.state.ext.get::<RateSet>() {
        Some(r) => r.0,
        None => req.conf.get::<LimitRateConf>().rate,
    }
}

/// Where the throttled bytes come from.
#[derive(Debug)]
enum Source {
    Bytes(Bytes),
    File {
        file: Rc<File>,
        range: Range<u64>,
    },
    Stream {
        inner: Box<dyn BodyStream>,
        held: Bytes,
    },
}

/// A body handed out no faster than `rate` once `after` bytes have gone.
#[derive(Debug)]
struct Throttle {
    src: Source,
    rate: u64,
    after: u64,
    sent: u64,
    start: Instant,
    /// The most bytes one piece carries: an eighth of a second's worth.
    piece: usize,
}

impl Throttle {
    fn new(src: Source, rate: u64, after: u64) -> Throttle {
        Throttle {
            src,
            rate,
            after,
            sent: 0,
            start: Instant::now(),
            piece: (rate / 8).clamp(1, 64 * 1024) as usize,
        }
    }

    /// The next piece of at most `piece` bytes, before any wait.
    async fn take(&mut self) -> io::Result<Option<Bytes>> {
        // Bytes before `after` go at once, in one piece.
        let max = match self.after.checked_sub(self.sent) {
            Some(free) if free > 0 => free.min(1 << 20) as usize,
            _ => self.piece,
        };
        match &mut self.src {
            Source::Bytes(b) => Ok((!b.is_empty()).then(|| b.split_to(max.min(b.len())))),
            Source::File { file, range } => {
                if range.is_empty() {
                    return Ok(None);
                }
                let want = (range.end - range.start).min(max as u64) as usize;
                let piece = read_file_piece(file, range.start, want)?;
                range.start += piece.len() as u64;
                Ok(Some(piece))
            }
            Source::Stream { inner, held } => {
                if held.is_empty() {
                    match inner.next().await? {
                        Some(b) => *held = b,
                        None => return Ok(None),
                    }
                }
                Ok(Some(held.split_to(max.min(held.len()))))
            }
        }
    }

    /// When the bytes sent so far, past `after`, have had their time.
    fn due(&self) -> Instant {
        let limited = self.sent.saturating_sub(self.after);
        self.start + Duration::from_micros(limited.saturating_mul(1_000_000) / self.rate)
    }
}

impl BodyStream for Throttle {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(async move {
            let due = self.due();
            if due > Instant::now() {
                tokio::time::sleep_until(due.into()).await;
            }
            let piece = self.take().await?;
            if let Some(p) = &piece {
                self.sent += p.len() as u64;
            }
            Ok(piece)
        })
    }
}

/// The filter: the body, when longer than `limit_rate_after`, becomes a
/// throttled stream of the same length.
fn filter(req: &Request<'_>, resp: &mut Response) {
    // What goes to the client is the main request's business.
    if req.is_subrequest() {
        return;
    }
    let c = req.conf.get::<LimitRateConf>();
    let rate = rate(req);
    // A 101's body is the connection's tunnel, not bytes to pace.
    if rate == 0 || resp.status == 101 || resp.body.size().is_some_and(|n| n <= c.after) {
        return;
    }
    throttle(resp, rate, c.after);
}

/// Hand `resp`'s body out no faster than `rate` bytes per second once its
/// first `after` bytes have gone (also `proxy_limit_rate`'s pacing of a reply).
pub fn throttle(resp: &mut Response, rate: u64, after: u64) {
    let len = resp.body.size();
    let src = match std::mem::replace(&mut resp.body, Body::Empty) {
        Body::Bytes(b) => Source::Bytes(b),
        Body::File { file, range } => Source::File { file, range },
        Body::Stream { stream, .. } => Source::Stream {
            inner: stream,
            held: Bytes::new(),
        },
        other => {
            resp.body = other;
            return;
        }
    };
    resp.body = Body::Stream {
        stream: Box::new(Throttle::new(src, rate, after)),
        len,
    };
}

static DIRECTIVES: &[Def] = &[
    Def {
        name: "limit_rate",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            let rate = size(d, 0)?;
            set_once(&mut s.loc().get_mut::<LimitRateConfSet>().rate, rate, d)
        },
        syntax: "limit_rate rate;",
        default: "0",
        doc: "Sends each response no faster than `rate` bytes per second (`k`, `m` suffixes), after its first `limit_rate_after` bytes; 0 is no limit. The body is handed to the connection in pieces of an eighth of a second's worth, each when the bytes before it have had their time.\n\n```nginx\nlocation /downloads/ { limit_rate_after 1m; limit_rate 200k; }\n```",
    },
    Def {
        name: "limit_rate_after",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            let after = size(d, 0)?;
            set_once(&mut s.loc().get_mut::<LimitRateConfSet>().after, after, d)
        },
        syntax: "limit_rate_after size;",
        default: "0",
        doc: "How many bytes of a response go at full speed before `limit_rate` applies.\n\n```nginx\nlimit_rate_after 500k;\n```",
    },
];

/// `limit_rate`, `limit_rate_after` and `$limit_rate`.
pub static MODULE: Module = Module {
    name: "limit_rate",
    directives: &[DIRECTIVES],
    settings: Some(&LimitRateConf::KIND),
    variables: &[VarDef::settable(
        "limit_rate",
        |req, _, out| push_u64(out, rate(req)),
        &SET_RATE,
    )],
    hooks: Hooks {
        filter: Some(Ordered {
            order: 30,
            run: filter,
            active: |c| {
                let c = c.get::<LimitRateConf>();
                c.rate > 0 || c.variable
            },
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_due_when_the_bytes_before_them_had_their_time() {
        let mut t = Throttle::new(Source::Bytes(Bytes::from(vec![7; 5000])), 1000, 100);
        assert_eq!(t.piece, 125);
        assert_eq!(t.due(), t.start);
        t.sent = 600;
        assert_eq!(t.due(), t.start + Duration::from_millis(500));
    }

    #[tokio::test]
    async fn the_first_bytes_go_in_one_piece_then_small_ones() {
        let mut t = Throttle::new(Source::Bytes(Bytes::from(vec![7; 5000])), 8000, 3000);
        assert_eq!(t.take().await.unwrap().unwrap().len(), 3000);
        t.sent = 3000;
        assert_eq!(t.take().await.unwrap().unwrap().len(), 1000);
    }
}
