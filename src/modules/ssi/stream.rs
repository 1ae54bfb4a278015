//! The SSI body stream: pulls the document, parses it, runs its commands
//! in order and hands out the result. The includes of what has been parsed
//! start at once and run side by side, as nginx's subrequests do (an
//! include waiting for its upstream does not hold back the next one); their
//! bodies go out in document order, each piece by piece as its subrequest
//! produces it, and an include behind another is driven only until its
//! response head, so no body is held. Text and command output are gathered
//! up to `ssi_min_file_chunk` first.

use super::TimeFmt;
use super::conf::SsiConf;
use super::parse::{Command, Event, Parser};
use crate::core::message::response::BodyStream;
use crate::core::request::{BoxFuture, Request};
use crate::core::subrequest::{Origin, Subrequest};
use crate::core::vars::{Var, find_arg, find_cookie};
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::rc::Rc;
use std::task::Poll;

/// nginx's default `errmsg`.
const ERRMSG: &[u8] = b"[an error occurred while processing the directive]";

/// SSI variables: one set per main request, seen by every document of its
/// includes (nginx keeps them in the main request's context).
#[derive(Debug, Default)]
struct SsiVars(RefCell<HashMap<Vec<u8>, Vec<u8>>>);

/// One open `if`.
#[derive(Debug)]
struct Cond {
    /// Output was on where the `if` stands.
    outer: bool,
    /// A branch was taken.
    chosen: bool,
    /// Output is on in the current branch.
    output: bool,
}

/// A block being recorded (`block name=…` up to `endblock`).
#[derive(Debug)]
struct Recording {
    name: String,
    events: Vec<Event>,
}

/// What goes out, in document order, before the text being gathered.
enum Part {
    Text(Bytes),
    /// A started include, its body still to hand out.
    Include(Subrequest),
}

/// What a command leaves for the stream to do.
enum Next {
    Nothing,
    /// Hand out this include's body; with `wait="yes"` (true), nothing
    /// after the command runs until it has all gone out.
    Stream(Subrequest, bool),
    /// Run these events (a stub block) before the rest.
    Events(Vec<Event>),
}

pub struct Ssi {
    src: Option<Box<dyn BodyStream>>,
    parser: Parser,
    events: VecDeque<Event>,
    origin: Rc<Origin>,
    /// What goes out before `out`: text and started includes, in document
    /// order.
    pending: VecDeque<Part>,
    /// The last pending include was `wait="yes"`: the events wait.
    waiting: bool,
    out: Vec<u8>,
    min_chunk: usize,
    silent: bool,
    conds: Vec<Cond>,
    errmsg: Vec<u8>,
    timefmt: Option<String>,
    /// Numbered captures of the last `if` regex.
    captures: Vec<Option<Vec<u8>>>,
    blocks: HashMap<String, Rc<Vec<Event>>>,
    recording: Option<Recording>,
}

impl std::fmt::Debug for Ssi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ssi")
            .field("events", &self.events.len())
            .finish()
    }
}

impl Ssi {
    pub fn new(req: &Request<'_>, c: &SsiConf, src: Box<dyn BodyStream>) -> Ssi {
        Ssi {
            src: Some(src),
            parser: Parser::new(c.value_length as usize),
            events: VecDeque::new(),
            origin: req.subrequests(),
            pending: VecDeque::new(),
            waiting: false,
            out: Vec::new(),
            min_chunk: c.min_file_chunk.max(1) as usize,
            silent: c.silent_errors,
            conds: Vec::new(),
            errmsg: ERRMSG.to_vec(),
            timefmt: None,
            captures: Vec::new(),
            blocks: HashMap::new(),
            recording: None,
        }
    }

    fn output(&self) -> bool {
        self.conds.last().is_none_or(|c| c.output)
    }

    fn take_out(&mut self) -> Option<Bytes> {
        (!self.out.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.out)))
    }

    /// A command failed: the error message takes its place.
    fn fail(&mut self, msg: &str) {
        self.origin.with_request(|req| {
            crate::error_log!(Error, "{msg}{}", req.log_context());
        });
        if !self.silent {
            self.out.extend_from_slice(&self.errmsg);
        }
    }

    async fn step(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            // The events parsed so far run first, so that every include
            // among them is started.
            self.waiting &= !self.pending.is_empty();
            if let Some(ev) = self.events.pop_front_if(|_| !self.waiting) {
                match self.event(ev).await? {
                    Next::Nothing => {}
                    Next::Stream(s, wait) => {
                        if let Some(b) = self.take_out() {
                            self.pending.push_back(Part::Text(b));
                        }
                        self.pending.push_back(Part::Include(s));
                        self.waiting = wait;
                    }
                    Next::Events(evs) => {
                        for e in evs.into_iter().rev() {
                            self.events.push_front(e);
                        }
                    }
                }
                if self.pending.is_empty() && self.out.len() >= self.min_chunk {
                    return Ok(self.take_out());
                }
                continue;
            }
            match self.pending.front() {
                Some(Part::Text(_)) => {
                    let Some(Part::Text(b)) = self.pending.pop_front() else {
                        unreachable!("front is text")
                    };
                    return Ok(Some(b));
                }
                Some(Part::Include(_)) => match self.include_piece().await? {
                    Some(p) => return Ok(Some(p)),
                    None => {
                        self.pending.pop_front();
                        continue;
                    }
                },
                None => {}
            }
            let Some(src) = self.src.as_mut() else {
                return Ok(self.take_out());
            };
            let mut evs = Vec::new();
            match src.next().await? {
                Some(p) => self.parser.feed(&p, &mut evs),
                None => {
                    self.parser.finish(&mut evs);
                    self.src = None;
                }
            }
            self.events.extend(evs);
        }
    }

    /// The next piece of the first pending include (`None` at its end),
    /// while the includes behind it are driven up to their response heads.
    async fn include_piece(&mut self) -> io::Result<Option<Bytes>> {
        let Some((Part::Include(first), rest)) = self.pending.make_contiguous().split_first_mut()
        else {
            unreachable!("the first pending part is an include")
        };
        let mut piece = first.next();
        let mut heads: Vec<_> = rest
            .iter_mut()
            .filter_map(|p| match p {
                Part::Include(s) if !s.has_head() => Some(s.head()),
                _ => None,
            })
            .collect();
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = piece.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            heads.retain_mut(|h| h.as_mut().poll(cx).is_pending());
            Poll::Pending
        })
        .await
    }

    async fn event(&mut self, ev: Event) -> io::Result<Next> {
        if let Some(rec) = &mut self.recording {
            match &ev {
                Event::Command(c) if c.name == "endblock" => {
                    let rec = self.recording.take().expect("recording");
                    self.blocks.insert(rec.name, Rc::new(rec.events));
                }
                _ => rec.events.push(ev),
            }
            return Ok(Next::Nothing);
        }
        match ev {
            Event::Text(t) => {
                if self.output() {
                    self.out.extend_from_slice(&t);
                }
            }
            Event::Error(msg) => {
                if self.output() {
                    self.fail(&msg);
                }
            }
            Event::Command(c) => return self.command(c).await,
        }
        Ok(Next::Nothing)
    }

    async fn command(&mut self, c: Command) -> io::Result<Next> {
        let allowed: &[&str] = match c.name.as_str() {
            "if" | "elif" => &["expr"],
            "else" | "endif" | "endblock" => &[],
            "echo" => &["var", "default", "encoding"],
            "set" => &["var", "value"],
            "config" => &["errmsg", "timefmt"],
            "block" => &["name"],
            "include" => &["virtual", "file", "wait", "set", "stub"],
            _ => {
                if self.output() {
                    self.fail(&format!("invalid SSI command: \"{}\"", c.name));
                }
                return Ok(Next::Nothing);
            }
        };
        let conditional = matches!(c.name.as_str(), "if" | "elif" | "else" | "endif");
        if !conditional && !self.output() {
            return Ok(Next::Nothing);
        }
        if let Some((p, _)) = c
            .params
            .iter()
            .find(|(p, _)| !allowed.contains(&p.as_str()))
        {
            let msg = format!("invalid parameter \"{p}\" in \"{}\" SSI command", c.name);
            if self.output() {
                self.fail(&msg);
            }
            return Ok(Next::Nothing);
        }
        let mandatory = |name: &str| -> Result<&[u8], String> {
            c.param(name).ok_or_else(|| {
                format!(
                    "no mandatory \"{name}\" parameter in \"{}\" SSI command",
                    c.name
                )
            })
        };
        let r: Result<Next, String> = match c.name.as_str() {
            "if" => {
                let outer = self.output();
                let cond = match outer {
                    true => match mandatory("expr") {
                        Ok(e) => {
                            let e = e.to_vec();
                            let v = self.expr(&e);
                            Cond {
                                outer,
                                chosen: v,
                                output: v,
                            }
                        }
                        Err(m) => {
                            self.fail(&m);
                            Cond {
                                outer,
                                chosen: true,
                                output: false,
                            }
                        }
                    },
                    false => Cond {
                        outer,
                        chosen: true,
                        output: false,
                    },
                };
                self.conds.push(cond);
                Ok(Next::Nothing)
            }
            "elif" => match self.conds.last() {
                None => Err("unexpected \"elif\" SSI command".into()),
                Some(cond) if cond.chosen || !cond.outer => {
                    if let Some(cond) = self.conds.last_mut() {
                        cond.output = false;
                    }
                    Ok(Next::Nothing)
                }
                Some(_) => {
                    let e = mandatory("expr").map(<[u8]>::to_vec);
                    let v = match e {
                        Ok(e) => self.expr(&e),
                        Err(m) => {
                            self.fail(&m);
                            false
                        }
                    };
                    if let Some(cond) = self.conds.last_mut() {
                        cond.output = v;
                        cond.chosen = v;
                    }
                    Ok(Next::Nothing)
                }
            },
            "else" => match self.conds.last_mut() {
                None => Err("unexpected \"else\" SSI command".into()),
                Some(cond) => {
                    cond.output = cond.outer && !cond.chosen;
                    cond.chosen = true;
                    Ok(Next::Nothing)
                }
            },
            "endif" => match self.conds.pop() {
                None => Err("unexpected \"endif\" SSI command".into()),
                Some(_) => Ok(Next::Nothing),
            },
            "endblock" => Err("unexpected \"endblock\" SSI command".into()),
            "block" => mandatory("name").map(|n| {
                self.recording = Some(Recording {
                    name: String::from_utf8_lossy(n).into_owned(),
                    events: Vec::new(),
                });
                Next::Nothing
            }),
            "echo" => self.echo(&c).map(|()| Next::Nothing),
            "set" => match (mandatory("var"), mandatory("value")) {
                (Ok(var), Ok(value)) => {
                    let v = self.eval(value);
                    self.set_var(var, v);
                    Ok(Next::Nothing)
                }
                (Err(m), _) | (_, Err(m)) => Err(m),
            },
            "config" => {
                if let Some(m) = c.param("errmsg") {
                    self.errmsg = m.to_vec();
                }
                if let Some(t) = c.param("timefmt") {
                    self.timefmt = Some(String::from_utf8_lossy(t).into_owned());
                }
                Ok(Next::Nothing)
            }
            _ => return self.include(&c).await,
        };
        match r {
            Ok(n) => Ok(n),
            Err(m) => {
                self.fail(&m);
                Ok(Next::Nothing)
            }
        }
    }

    fn echo(&mut self, c: &Command) -> Result<(), String> {
        let var = c
            .param("var")
            .ok_or("no mandatory \"var\" parameter in \"echo\" SSI command")?;
        let enc = c.param("encoding").unwrap_or(b"entity");
        if !matches!(enc, b"none" | b"url" | b"entity") {
            return Err(format!(
                "unknown encoding \"{}\" in the \"echo\" command",
                String::from_utf8_lossy(enc)
            ));
        }
        let value = match self.var(var) {
            Some(v) => v,
            None => match c.param("default") {
                Some(d) => self.eval(d),
                None => b"(none)".to_vec(),
            },
        };
        match enc {
            b"url" => escape_url(&value, &mut self.out),
            b"entity" => escape_html(&value, &mut self.out),
            _ => self.out.extend_from_slice(&value),
        }
        Ok(())
    }

    fn set_var(&self, name: &[u8], v: Vec<u8>) {
        let vars = self.origin.tree().ext.get_or_insert_with(SsiVars::default);
        vars.0.borrow_mut().insert(name.to_ascii_lowercase(), v);
    }

    /// The value of a variable: an SSI one, a capture of the last `if`
    /// regex, or the request's; `None` when it has none.
    fn var(&self, name: &[u8]) -> Option<Vec<u8>> {
        let vars = self.origin.tree().ext.get_or_insert_with(SsiVars::default);
        if let Some(v) = vars.0.borrow().get(&name.to_ascii_lowercase()) {
            return Some(v.clone());
        }
        if !name.is_empty() && name.iter().all(u8::is_ascii_digit) {
            let n: usize = std::str::from_utf8(name).ok()?.parse().ok()?;
            return self.captures.get(n).cloned().flatten();
        }
        let name = std::str::from_utf8(name).ok()?;
        self.origin.with_request(|req| {
            if let Some(f) = &self.timefmt {
                req.state.ext.insert(Rc::new(TimeFmt(f.clone())));
            }
            request_var(req, name)
        })
    }

    /// A parameter with its `$name` and `${name}` replaced by their values
    /// (`\` takes the next byte as it is).
    fn eval(&self, s: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            match s[i] {
                b'\\' if i + 1 < s.len() => {
                    out.push(s[i + 1]);
                    i += 2;
                }
                b'$' => {
                    let (name, next) = if s.get(i + 1) == Some(&b'{') {
                        match s[i + 2..].iter().position(|&b| b == b'}') {
                            Some(e) => (&s[i + 2..i + 2 + e], i + 3 + e),
                            None => (&s[i + 2..], s.len()),
                        }
                    } else {
                        let e = s[i + 1..]
                            .iter()
                            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
                            .map_or(s.len(), |e| i + 1 + e);
                        (&s[i + 1..e], e)
                    };
                    if name.is_empty() {
                        out.push(b'$');
                    } else if let Some(v) = self.var(name) {
                        out.extend_from_slice(&v);
                    }
                    i = next;
                }
                b => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        out
    }

    /// An `if` expression: `value`, `value = value`, `value != value`, or
    /// a comparison with `/regex/` (whose captures `echo` reads).
    fn expr(&mut self, e: &[u8]) -> bool {
        let e = e.trim_ascii();
        // The left operand ends at an unescaped space or `=` / `!=`.
        let mut i = 0;
        while i < e.len() {
            match e[i] {
                b'\\' => i += 2,
                b' ' | b'\t' | b'=' => break,
                b'!' if e.get(i + 1) == Some(&b'=') => break,
                _ => i += 1,
            }
        }
        let i = i.min(e.len());
        let left = self.eval(&e[..i]);
        let rest = e[i..].trim_ascii_start();
        let (negate, right) = if let Some(r) = rest.strip_prefix(b"!=") {
            (true, r.trim_ascii_start())
        } else if let Some(r) = rest.strip_prefix(b"=") {
            (false, r.trim_ascii_start())
        } else {
            if !rest.is_empty() {
                self.fail(&format!(
                    "invalid expression in \"{}\"",
                    String::from_utf8_lossy(e)
                ));
                return false;
            }
            return !left.is_empty();
        };
        let matched = if right.len() >= 2 && right[0] == b'/' && right[right.len() - 1] == b'/' {
            let pat = String::from_utf8_lossy(&right[1..right.len() - 1]).into_owned();
            match crate::core::vars::match_once(&pat, &left) {
                Ok(Some((spans, names))) => {
                    let part = |s: Option<(usize, usize)>| s.map(|(a, b)| left[a..b].to_vec());
                    self.captures = spans.iter().map(|&s| part(s)).collect();
                    for (name, i) in names {
                        let v = spans.get(i).copied().and_then(part).unwrap_or_default();
                        self.set_var(name.as_bytes(), v);
                    }
                    true
                }
                Ok(None) => false,
                Err(err) => {
                    self.fail(&format!("invalid regex \"{pat}\": {err}"));
                    return false;
                }
            }
        } else {
            left == self.eval(right)
        };
        matched != negate
    }

    async fn include(&mut self, c: &Command) -> io::Result<Next> {
        let virt = c.param("virtual");
        let file = c.param("file");
        let target = match (virt, file) {
            (Some(_), Some(_)) => {
                Err("\"include\" may be either \"virtual\" or \"file\"".to_string())
            }
            (None, None) => Err("no parameter in \"include\" SSI command".to_string()),
            (Some(t), None) | (None, Some(t)) => Ok(t),
        };
        let wait = c.param("wait");
        let stub = c
            .param("stub")
            .map(|s| String::from_utf8_lossy(s).into_owned());
        let checked = target.and_then(|t| {
            if let Some(w) = wait
                && w != b"yes"
                && w != b"no"
            {
                return Err(format!(
                    "invalid value \"{}\" for the \"wait\" parameter",
                    String::from_utf8_lossy(w)
                ));
            }
            match &stub {
                Some(s) if !self.blocks.contains_key(s) => Err(format!(
                    "\"include\" command refers to non-existent block \"{s}\""
                )),
                _ => Ok(t),
            }
        });
        let target = match checked {
            Ok(t) => self.eval(t),
            Err(m) => {
                self.fail(&m);
                return Ok(Next::Nothing);
            }
        };
        let Some((uri, args)) = unsafe_uri(&self.origin.uri, &target) else {
            self.fail(&format!(
                "unsafe URI \"{}\" was detected",
                String::from_utf8_lossy(&target)
            ));
            return Ok(Next::Nothing);
        };
        let mut sub = match self.origin.subrequest(uri, args) {
            Ok(s) => s,
            Err(_) => {
                if !self.silent {
                    self.out.extend_from_slice(&self.errmsg);
                }
                return Ok(Next::Nothing);
            }
        };
        if let Some(s) = &stub {
            let generated = sub.head().await.is_none_or(|h| h.generated);
            if generated {
                let block = self.blocks.get(s).map(|b| b.as_ref().clone());
                return Ok(Next::Events(block.unwrap_or_default()));
            }
        }
        if let Some(var) = c.param("set") {
            let limit = sub.head().await.map_or(0, |h| h.buffer_size);
            let mut v = Vec::new();
            while let Some(p) = sub.next().await? {
                if (v.len() + p.len()) as u64 > limit {
                    self.origin.with_request(|req| {
                        crate::error_log!(
                            Error,
                            "too big subrequest response while sending to client{}",
                            req.log_context()
                        );
                    });
                    return Err(io::Error::other("too big subrequest response"));
                }
                v.extend_from_slice(&p);
            }
            self.set_var(var, v);
            return Ok(Next::Nothing);
        }
        Ok(Next::Stream(sub, wait == Some(b"yes".as_slice())))
    }
}

impl BodyStream for Ssi {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(self.step())
    }
}

/// A request variable by name; `None` when the request has none (no such
/// argument, header or cookie, an unset `set` variable, an unknown name).
fn request_var(req: &Request<'_>, name: &str) -> Option<Vec<u8>> {
    let var = req.lookup_var(name)?;
    let found = match &var {
        Var::Arg(a) => req.args().and_then(|q| find_arg(q, a)).is_some(),
        Var::Http(h) => req.head.header(h).is_some(),
        Var::Cookie(c) => req
            .head
            .headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"cookie"))
            .any(|(_, v)| find_cookie(v, c).is_some()),
        _ => true,
    };
    if !found {
        return None;
    }
    let mut out = Vec::new();
    req.var_into(&var, &mut out, req);
    Some(out)
}

/// An include's target → (URI decoded, arguments): relative to the
/// document's directory; `%XX` decoded in the path only (an encoded `?` is
/// part of the name); `None` for a path with a `..` segment or a NUL.
fn unsafe_uri(base: &[u8], target: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let (path, args) = match memchr::memchr(b'?', target) {
        Some(i) => (&target[..i], &target[i + 1..]),
        None => (target, &b""[..]),
    };
    let mut full = Vec::new();
    if path.first() != Some(&b'/') {
        let dir = base.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        full.extend_from_slice(&base[..dir]);
        if full.is_empty() {
            full.push(b'/');
        }
    }
    let decoded: Vec<u8> = percent_encoding::percent_decode(path).collect();
    full.extend_from_slice(&decoded);
    if full.contains(&0) || full.split(|&b| b == b'/').any(|s| s == b"..") {
        return None;
    }
    Some((full, args.to_vec()))
}

/// `encoding="url"`: as nginx's NGX_ESCAPE_HTML table, and `<`, `>`.
fn escape_url(v: &[u8], out: &mut Vec<u8>) {
    for &b in v {
        if b <= b' ' || b >= 0x7f || matches!(b, b'"' | b'#' | b'%' | b'\'' | b'<' | b'>') {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
}

/// `encoding="entity"`: `<`, `>`, `&`, `"` as HTML entities.
fn escape_html(v: &[u8], out: &mut Vec<u8>) {
    for &b in v {
        match b {
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'&' => out.extend_from_slice(b"&amp;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            _ => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_targets_resolve_as_nginx() {
        let u = |b: &str, t: &str| unsafe_uri(b.as_bytes(), t.as_bytes());
        assert_eq!(
            u("/proxy/ssi.html", "test.html"),
            Some((b"/proxy/test.html".to_vec(), Vec::new()))
        );
        assert_eq!(
            u("/a", "/tes%741.html?test=test"),
            Some((b"/test1.html".to_vec(), b"test=test".to_vec()))
        );
        assert_eq!(
            u("/a", "/x.html%3fa=b"),
            Some((b"/x.html?a=b".to_vec(), Vec::new()))
        );
        assert_eq!(u("/a", "/../etc/passwd"), None);
        assert_eq!(u("/a", "/%2e%2e/x"), None);
    }

    #[test]
    fn encodings() {
        let mut o = Vec::new();
        escape_url(b"<test> a", &mut o);
        assert_eq!(o, b"%3Ctest%3E%20a");
        o.clear();
        escape_html(b"<a href=\"x\">&", &mut o);
        assert_eq!(o, b"&lt;a href=&quot;x&quot;&gt;&amp;");
    }
}
