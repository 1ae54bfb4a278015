//! Bodies of the fuzz targets (fuzz/fuzz_targets/*.rs), shared with the
//! corpus replay test (tests/fuzz_corpus.rs) so both run the same checks.
//!
//! Each function takes arbitrary bytes, runs one parser over them and panics
//! when an invariant breaks: not only "no panic", but "the same result
//! whichever way the input was split", "a parsed value re-parses the same",
//! "a normalised path stays under root". See docs/fuzzing.md.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use bytes::BytesMut;

use crate::conf::ast::Directive;
use crate::core::message::head::{BodyFraming, ParseError, RequestHead, Version};
use crate::core::path::push_clean;
use crate::http::h1::chunked::{Chunk, ChunkedDecoder};
use crate::http::h1::parse::{self, Limits};
use crate::modules::fastcgi::{cgi_head, record};
use crate::modules::static_files::uri;
use crate::upstream::response;

/// One target's body.
pub type Target = fn(&[u8]);

/// The targets by name, as fuzz/fuzz_targets and fuzz/corpus name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("h1_request", h1_request),
    ("chunked", chunked),
    ("uri", uri),
    ("conf", conf),
    ("fastcgi_record", fastcgi_record),
    ("cgi_head", cgi_head),
    ("upstream_head", upstream_head),
];

/// Offsets at which to split `len` bytes: every byte for short inputs,
/// about 64 evenly spread points for long ones.
fn split_points(len: usize) -> impl Iterator<Item = usize> {
    let step = (len / 64).max(1);
    (1..len).step_by(step)
}

/// Feeds `data` to `step` in pieces of `piece` bytes (the last may be
/// shorter), appending each to one buffer as a connection would, until
/// `step` gives an outcome. Returns it with what is left unconsumed: the
/// buffer followed by the bytes not fed yet.
fn feed<T>(
    data: &[u8],
    piece: usize,
    mut step: impl FnMut(&mut BytesMut) -> Option<T>,
) -> (Option<T>, Vec<u8>) {
    let mut buf = BytesMut::new();
    let mut fed = 0;
    for p in data.chunks(piece.max(1)) {
        buf.extend_from_slice(p);
        fed += p.len();
        if let Some(r) = step(&mut buf) {
            let mut rest = buf.to_vec();
            rest.extend_from_slice(&data[fed..]);
            return (Some(r), rest);
        }
    }
    (None, buf.to_vec())
}

// ------------------------------------------------------------ HTTP/1 request

/// What a parsed head says, for comparing two parses.
#[derive(Debug, PartialEq, Eq)]
struct HeadView {
    line: Vec<u8>,
    method: String,
    version: Version,
    target: Vec<u8>,
    path: Vec<u8>,
    query: Option<Vec<u8>>,
    host: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Vec<u8>)>,
    framing: BodyFraming,
    keep_alive: bool,
    expect_continue: bool,
}

fn view(h: &RequestHead) -> HeadView {
    HeadView {
        line: h.line().to_vec(),
        method: h.method_str().to_string(),
        version: h.version,
        target: h.target().to_vec(),
        path: h.path().to_vec(),
        query: h.query().map(<[u8]>::to_vec),
        host: h.host().map(<[u8]>::to_vec),
        headers: h.headers().map(|(n, v)| (n.to_vec(), v.to_vec())).collect(),
        framing: h.framing,
        keep_alive: h.keep_alive,
        expect_continue: h.expect_continue,
    }
}

type HeadResult = Result<Option<(HeadView, Vec<u8>)>, ParseError>;

fn parse_head(buf: &mut BytesMut, limits: &Limits) -> Result<Option<HeadView>, ParseError> {
    parse::parse(buf, limits).map(|h| h.map(|h| check_head(&h)))
}

/// Invariants of one parsed head; returns its view.
fn check_head(h: &RequestHead) -> HeadView {
    let v = view(h);
    assert!(!v.method.is_empty());
    assert!(v.path.first() == Some(&b'/') || v.path == b"*");
    for (n, val) in &v.headers {
        assert!(!n.is_empty());
        assert!(!n.iter().chain(val).any(|&b| matches!(b, 0 | b'\r' | b'\n')));
    }
    // It ends with an empty line (CRLF or a bare LF), or is an HTTP/0.9
    // request line alone.
    let raw = h.raw();
    assert!(
        raw.ends_with(b"\n\n")
            || raw.ends_with(b"\n\r\n")
            || (v.version == Version::Http09 && raw.ends_with(b"\n") && v.headers.is_empty())
    );
    // The head re-parses to the same thing, with nothing left over.
    let mut again = BytesMut::from(&h.raw()[..]);
    let limits = Limits {
        header_buffer: h.raw().len(),
        ..Limits::default()
    };
    let w = view(&parse::parse(&mut again, &limits).unwrap().unwrap());
    assert_eq!(v, w);
    assert!(again.is_empty());
    // Its path normalises within the rules (or is refused).
    if v.path != b"*" {
        check_uri(&v.path);
    }
    v
}

/// HTTP/1 request-head parser: parsed whole or fed in pieces (byte by byte,
/// and in pieces sized by the first byte), the outcome is the same: the same
/// head and leftover, incomplete, or refused. Only the status of a refusal
/// may differ: a head with several faults is refused for the first one seen,
/// and what is seen first depends on how the bytes arrive (a bad byte early
/// in a request line that turns out too long: 400 byte by byte, 414 whole),
/// as in nginx.
pub fn h1_request(data: &[u8]) {
    for limits in [
        Limits::default(),
        Limits {
            header_buffer: 64,
            large_buffers: 2,
            large_buffer_size: 128,
            ..Limits::default()
        },
    ] {
        let whole: HeadResult = {
            let mut buf = BytesMut::from(data);
            parse_head(&mut buf, &limits).map(|h| h.map(|h| (h, buf.to_vec())))
        };
        let pieces = data.first().map_or(1, |&b| usize::from(b % 32) + 1);
        for piece in [1, pieces] {
            let (r, rest) = feed(data, piece, |buf| match parse_head(buf, &limits) {
                Ok(None) => None,
                other => Some(other),
            });
            let fed: HeadResult = match r {
                None => Ok(None),
                Some(r) => r.map(|h| h.map(|h| (h, rest))),
            };
            match (&whole, &fed) {
                (Err(_), Err(_)) => {}
                _ => assert_eq!(whole, fed, "piece size {piece}"),
            }
        }
    }
}

// ------------------------------------------------------------ chunked

#[derive(Debug, PartialEq, Eq)]
enum Decoded {
    /// Body, then what follows the last chunk.
    Done(Vec<u8>, Vec<u8>),
    /// Input ended first; the body so far.
    Incomplete(Vec<u8>),
    Failed(ParseError),
}

/// Decodes `data` fed `piece` bytes at a time.
fn decode_chunked(data: &[u8], piece: usize) -> Decoded {
    let mut dec = ChunkedDecoder::new();
    let mut body = Vec::new();
    let mut buf = BytesMut::new();
    let mut fed = 0;
    for p in data.chunks(piece.max(1)) {
        buf.extend_from_slice(p);
        fed += p.len();
        loop {
            match dec.decode(&mut buf) {
                Ok(Chunk::Data(d)) => {
                    assert!(!d.is_empty(), "empty data piece");
                    body.extend_from_slice(&d);
                }
                Ok(Chunk::NeedMore) => break,
                Ok(Chunk::Done) => {
                    assert!(dec.is_done());
                    let mut rest = buf.to_vec();
                    rest.extend_from_slice(&data[fed..]);
                    return Decoded::Done(body, rest);
                }
                Err(e) => return Decoded::Failed(e),
            }
        }
    }
    Decoded::Incomplete(body)
}

/// Chunked decoder: decoded in one piece, byte by byte, or in pieces sized
/// by the first byte, the body, the leftover and any error are the same;
/// a decoded body re-encoded in other chunk sizes decodes to itself.
pub fn chunked(data: &[u8]) {
    let whole = decode_chunked(data, data.len());
    let piece = data.first().map_or(1, |&b| usize::from(b) + 1);
    assert_eq!(whole, decode_chunked(data, 1), "byte by byte");
    assert_eq!(whole, decode_chunked(data, piece), "pieces of {piece}");
    if let Decoded::Done(body, _) = &whole {
        let mut enc = Vec::new();
        for c in body.chunks(piece) {
            enc.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            enc.extend_from_slice(c);
            enc.extend_from_slice(b"\r\n");
        }
        enc.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(decode_chunked(&enc, 7), Decoded::Done(body.clone(), vec![]));
    }
}

// ------------------------------------------------------------ URI → path

const ROOT: &str = "/srv/www";

/// Checks that `p` is `ROOT` + a path with no `.`/`..` segment and no NUL.
fn assert_under_root(p: &[u8]) {
    assert!(!p.contains(&0), "NUL in {p:?}");
    let rest = p.strip_prefix(ROOT.as_bytes()).expect("starts with root");
    assert!(rest.is_empty() || rest[0] == b'/', "left root: {p:?}");
    assert!(
        !rest.split(|&b| b == b'/').any(|s| s == b"." || s == b".."),
        "dot segment in {p:?}"
    );
    let path = Path::new(OsStr::from_bytes(p));
    assert!(path.starts_with(ROOT));
    assert!(
        path.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
        "{path:?}"
    );
}

/// The normalisation invariants for one raw request path.
fn check_uri(raw: &[u8]) {
    let mut out = Vec::new();
    if uri::normalize(raw, &mut out).is_err() {
        return;
    }
    assert_eq!(out.first(), Some(&b'/'));
    assert!(!out.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n')));
    assert!(!out.windows(2).any(|w| w == b"//"), "{out:?}");
    assert!(
        !out[1..]
            .split(|&b| b == b'/')
            .any(|s| s == b"." || s == b".."),
        "dot segment in {out:?}"
    );
    // Idempotent where no decoded '%' could start a new escape.
    if !out.contains(&b'%') {
        let mut again = Vec::new();
        uri::normalize(&out, &mut again).unwrap();
        assert_eq!(again, out);
    }
    // root + URI, as the static handler builds it, stays under root.
    let mut file = ROOT.as_bytes().to_vec();
    assert!(push_clean(&mut file, &out));
    assert_eq!(&file[ROOT.len()..], &out[..]);
    assert_under_root(&file);
    // merge_slashes off: the same, slashes kept.
    let mut kept = Vec::new();
    if uri::normalize_with(raw, &mut kept, false).is_ok() {
        assert_eq!(kept.first(), Some(&b'/'));
        assert!(
            !kept[1..]
                .split(|&b| b == b'/')
                .any(|s| s == b"." || s == b".."),
            "dot segment in {kept:?}"
        );
        let mut file = ROOT.as_bytes().to_vec();
        if push_clean(&mut file, &kept) {
            assert_under_root(&file);
        }
    }
}

/// URI normalisation and the file path built from it: the result starts
/// with `/`, has no NUL, no `//` and no `.`/`..` segment, normalises to
/// itself, and root + it stays under root. A raw (rewritten) URI joined with
/// `push_clean` also never leaves root.
pub fn uri(data: &[u8]) {
    check_uri(data);
    let mut file = ROOT.as_bytes().to_vec();
    if !data.contains(&0) && data.first() == Some(&b'/') && push_clean(&mut file, data) {
        assert_under_root(&file);
    }
    // An alias prefix: the rest of the URI after the location's prefix.
    let mut file = format!("{ROOT}/").into_bytes();
    if !data.contains(&0) && push_clean(&mut file, data) {
        assert_under_root(&file);
    }
}

// ------------------------------------------------------------ configuration

/// Writes directives back as text, every word double-quoted.
fn write_conf(ds: &[Directive], out: &mut String) {
    fn word(s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            if matches!(c, '"' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push_str("\" ");
    }
    for d in ds {
        word(&d.name, out);
        for a in &d.args {
            word(&a.value, out);
        }
        match &d.block {
            None => out.push_str(";\n"),
            Some(b) => {
                out.push_str("{\n");
                write_conf(b, out);
                out.push_str("}\n");
            }
        }
    }
}

/// Names, argument values and nesting, without places or quoting.
fn shape(ds: &[Directive]) -> Vec<(String, Vec<String>, Option<Vec<ShapeNode>>)> {
    ds.iter()
        .map(|d| {
            (
                d.name.clone(),
                d.args.iter().map(|a| a.value.clone()).collect(),
                d.block
                    .as_deref()
                    .map(|b| shape(b).into_iter().map(ShapeNode).collect()),
            )
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq)]
struct ShapeNode((String, Vec<String>, Option<Vec<ShapeNode>>));

/// Configuration lexer and parser: errors name the file and a line within
/// the text; a parsed tree, written back with every word quoted, parses to
/// the same tree. Texts that mention `include` are skipped (they would read
/// files).
pub fn conf(data: &[u8]) {
    use crate::conf::{lexer, parser};
    let text = String::from_utf8_lossy(data);
    if text.contains("include") {
        return;
    }
    let lines = u32::try_from(text.matches('\n').count()).unwrap_or(u32::MAX);
    let check_err = |e: &crate::conf::ast::ConfError| {
        let span = e.span.as_ref().expect("a parse error has a place");
        assert_eq!(&*span.file, "fuzz.conf");
        assert!(span.line >= 1 && span.line <= lines + 1, "{e}");
        let _ = e.to_string();
    };
    let tokens = lexer::tokenize(&text, "fuzz.conf");
    let dir = Path::new("/nonexistent-vireo-fuzz");
    match parser::parse_str(&text, "fuzz.conf", dir) {
        Err(e) => check_err(&e),
        Ok(parsed) => {
            assert!(tokens.is_ok(), "parsed but does not tokenize");
            let mut again = String::new();
            write_conf(&parsed.directives, &mut again);
            let reparsed = parser::parse_str(&again, "fuzz.conf", dir)
                .unwrap_or_else(|e| panic!("{e} re-parsing {again:?}"));
            assert_eq!(shape(&parsed.directives), shape(&reparsed.directives));
        }
    }
    if let Err(e) = tokens {
        check_err(&e);
    }
}

// ------------------------------------------------------------ FastCGI records

/// Request id the decoder expects.
const FCGI_ID: u16 = 1;

/// Records decoded from `data` fed `piece` bytes at a time, and the error
/// that ended them, if any. STDOUT comes in pieces of what was fed: the
/// content of consecutive pieces (and records) is joined into one.
fn decode_records(data: &[u8], piece: usize) -> (Vec<record::Record>, Option<record::Malformed>) {
    let mut out = Vec::new();
    let mut dec = record::Decoder::new(FCGI_ID);
    let (err, _) = feed(data, piece, |buf| {
        loop {
            match dec.decode(buf) {
                Ok(Some(record::Record::Stdout(b))) => match out.last_mut() {
                    Some(record::Record::Stdout(all)) => {
                        *all = [&all[..], &b[..]].concat().into();
                    }
                    _ => out.push(record::Record::Stdout(b)),
                },
                Ok(Some(r)) => out.push(r),
                Ok(None) => return None,
                Err(e) => return Some(e),
            }
        }
    });
    (out, err)
}

/// FastCGI record decoder: whole or in pieces, the same records and error;
/// a stream encoded by `record::stream` decodes to the same content; a PARAMS
/// body that decodes re-encodes to pairs that decode the same.
pub fn fastcgi_record(data: &[u8]) {
    let whole = decode_records(data, data.len());
    let piece = data.first().map_or(1, |&b| usize::from(b) + 1);
    assert_eq!(whole, decode_records(data, 1));
    assert_eq!(whole, decode_records(data, piece));

    let mut enc = BytesMut::new();
    record::stream(&mut enc, record::Type::Stdout, FCGI_ID, data);
    let (recs, err) = decode_records(&enc, enc.len());
    assert_eq!(err, None);
    let mut content = Vec::new();
    for r in recs {
        match r {
            record::Record::Stdout(b) => content.extend_from_slice(&b),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(content, data);

    if let Some(pairs) = record::decode_params(data) {
        let mut p = record::Params::default();
        for (n, v) in &pairs {
            crate::upstream::params::Sink::add(&mut p, n, v);
        }
        assert_eq!(record::decode_params(p.as_bytes()), Some(pairs));
    }
}

// ------------------------------------------------------------ CGI response head

/// Largest CGI head accepted in the target.
const CGI_MAX: usize = 4096;

/// CGI/FastCGI response-head parser: a prefix shorter than the head is
/// "incomplete" (or already an error), a longer one gives the same head;
/// the head written back as header lines parses to the same head.
pub fn cgi_head(data: &[u8]) {
    let whole = cgi_head::parse(data, CGI_MAX);
    for k in split_points(data.len()) {
        let part = cgi_head::parse(&data[..k], CGI_MAX);
        match &whole {
            Ok(Some((_, used))) if k < *used => {
                assert_eq!(part, Ok(None), "prefix {k} of a head of {used}")
            }
            Ok(Some(_)) => assert_eq!(part, whole, "prefix {k}"),
            Ok(None) => assert_eq!(part, Ok(None), "prefix {k}"),
            Err(_) => assert!(!matches!(part, Ok(Some(_))), "prefix {k} completes"),
        }
    }
    let Ok(Some((h, _))) = whole else { return };
    let mut text = String::new();
    if h.status != 0 {
        text += &format!(
            "Status: {} {}\r\n",
            h.status,
            h.reason.as_deref().unwrap_or("")
        );
    }
    for (name, v) in [("Content-Type", &h.content_type), ("Location", &h.location)] {
        if let Some(v) = v {
            text += &format!("{name}: {v}\r\n");
        }
    }
    if let Some(n) = h.content_length {
        text += &format!("Content-Length: {n}\r\n");
    }
    for (n, v) in &h.headers {
        text += &format!("{n}: {v}\r\n");
    }
    text += "\r\n";
    let (again, used) = cgi_head::parse(text.as_bytes(), usize::MAX)
        .unwrap_or_else(|e| panic!("{e} re-parsing {text:?}"))
        .expect("complete");
    assert_eq!(used, text.len());
    assert_eq!(again, h);
}

// ------------------------------------------------------------ upstream response head

/// Largest upstream head accepted in the target.
const UPSTREAM_MAX: usize = 8192;

type UpstreamResult = Result<Option<(response::UpstreamHead, Vec<u8>)>, response::Invalid>;

/// Upstream response-head parser, for a HEAD request and another: fed whole,
/// byte by byte or in pieces, the same head (interim 1xx skipped) and
/// leftover, or an error; the head written back parses to the same status,
/// reason, headers and framing.
pub fn upstream_head(data: &[u8]) {
    upstream_head_for(data, false);
    upstream_head_for(data, true);
}

/// `upstream_head` for a reply to a HEAD request or to another one.
fn upstream_head_for(data: &[u8], head_request: bool) {
    let run = |piece: usize| -> UpstreamResult {
        let (r, rest) = feed(data, piece, |buf| {
            match response::parse(buf, UPSTREAM_MAX, head_request, false) {
                Ok(None) => None,
                other => Some(other),
            }
        });
        match r {
            None => Ok(None),
            Some(r) => r.map(|h| h.map(|h| (h, rest))),
        }
    };
    let whole = run(data.len());
    let piece = data.first().map_or(1, |&b| usize::from(b) + 1);
    assert_eq!(whole, run(1), "byte by byte");
    assert_eq!(whole, run(piece), "pieces of {piece}");

    let Ok(Some((h, _))) = whole else { return };
    let mut text = format!(
        "HTTP/1.{} {} {}\r\n",
        u8::from(h.http11),
        h.status,
        h.reason()
    );
    for (n, v) in h.headers() {
        text += &format!("{n}: {v}\r\n");
    }
    match h.framing {
        response::Framing::Length(n) => text += &format!("Content-Length: {n}\r\n"),
        response::Framing::Chunked => text += "Transfer-Encoding: chunked\r\n",
        response::Framing::None | response::Framing::Close => {}
    }
    text += "\r\n";
    let again = response::parse(
        &mut BytesMut::from(text.as_bytes()),
        usize::MAX,
        head_request,
        false,
    )
    .unwrap_or_else(|e| panic!("{e} re-parsing {text:?}"))
    .expect("complete");
    let fields = |h: &response::UpstreamHead| {
        (
            h.status,
            h.reason().to_string(),
            h.http11,
            h.headers()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect::<Vec<_>>(),
            h.upgrade,
        )
    };
    assert_eq!(fields(&again), fields(&h), "{text:?}");
    assert_eq!(again.framing, h.framing, "{text:?}");
}
