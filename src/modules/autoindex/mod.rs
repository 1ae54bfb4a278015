//! Directory listings (`autoindex`): HTML, JSON, JSONP or XML, for a URI
//! ending in `/` whose directory has no index file.
//!
//! The directory is the request's file name, root (or alias) + normalised
//! URI, so it is never outside the root; entries are listed by name only and
//! linked relatively.

pub mod conf;

use crate::core::message::response::{Body, Response, Value};
use crate::core::module::Module;
use crate::core::request::Request;
use bytes::Bytes;
use chrono::{DateTime, Local, TimeZone, Utc};
use conf::{AutoindexConf, Format};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_encode};
use std::cmp::Ordering;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::ErrorKind;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;

/// Bytes percent-encoded in a link to an entry: all but RFC 3986 unreserved.
const HREF: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Width of the name column of the HTML listing, in characters.
const NAME_WIDTH: usize = 50;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Other,
}

/// One listed entry.
#[derive(Debug)]
pub struct Entry {
    pub name: Vec<u8>,
    pub kind: Kind,
    pub size: u64,
    /// Modification time, seconds since the epoch.
    pub mtime: i64,
}

/// Directories first, then by name, byte by byte.
fn order(a: &Entry, b: &Entry) -> Ordering {
    (b.kind == Kind::Dir)
        .cmp(&(a.kind == Kind::Dir))
        .then_with(|| a.name.cmp(&b.name))
}

/// Read the directory `path`: entries not starting with `.`, sorted.
/// Symbolic links are described by what they point to; a dangling one by
/// the link itself. Entries that cannot be examined are left out.
pub fn read(path: &[u8]) -> std::io::Result<Vec<Entry>> {
    let dir = std::path::Path::new(OsStr::from_bytes(path));
    let mut out = Vec::new();
    for de in std::fs::read_dir(dir)? {
        let de = de?;
        let name = de.file_name().into_vec();
        if name.first() == Some(&b'.') {
            continue;
        }
        let meta = match std::fs::metadata(de.path()) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ELOOP) => {
                match de.metadata() {
                    Ok(m) => m,
                    Err(_) => continue,
                }
            }
            Err(e) => {
                crate::error_log!(
                    Crit,
                    "stat() \"{}\" failed ({})",
                    de.path().display(),
                    crate::core::errlog::errno_text(&e)
                );
                continue;
            }
        };
        let kind = if meta.is_dir() {
            Kind::Dir
        } else if meta.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        out.push(Entry {
            name,
            kind,
            size: meta.size(),
            mtime: meta.mtime(),
        });
    }
    out.sort_unstable_by(order);
    Ok(out)
}

/// The listing of the request's directory (`req.filename`, ending in `/`).
pub fn respond(req: &Request<'_>) -> Response {
    let ac = req.conf.get::<AutoindexConf>();
    let entries = match read(&req.filename) {
        Ok(e) => e,
        Err(e) => {
            let status = match e.kind() {
                ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::InvalidFilename => 404,
                ErrorKind::PermissionDenied => 403,
                _ => 500,
            };
            crate::error_log!(
                Error,
                "opendir() \"{}\" failed ({})",
                String::from_utf8_lossy(&req.filename),
                crate::core::errlog::errno_text(&e)
            );
            return req.error(status);
        }
    };
    let (ct, body) = match ac.format {
        Format::Html => ("text/html", html(&req.uri, &entries, ac)),
        Format::Json => ("application/json", json(&entries)),
        Format::Xml => ("text/xml; charset=utf-8", xml(&entries)),
        Format::Jsonp => {
            let cb = req
                .args()
                .and_then(|q| crate::core::vars::find_arg(q, "callback"))
                .filter(|c| !c.is_empty());
            match cb {
                None => ("application/json", json(&entries)),
                Some(cb) => {
                    if cb.len() > 128
                        || !cb
                            .iter()
                            .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
                    {
                        crate::error_log!(
                            Info,
                            "client sent invalid callback name \"{}\"",
                            String::from_utf8_lossy(cb)
                        );
                        return req.error(400);
                    }
                    let cb = std::str::from_utf8(cb).unwrap_or_default();
                    let body = format!("/* callback */\n{cb}({});", json(&entries).trim_end());
                    ("application/javascript", body)
                }
            }
        }
    };
    let mut r = Response::new(200);
    r.content_type = Some(Value::Static(ct));
    r.body = Body::Bytes(Bytes::from(body));
    r
}

/// Escape text for HTML element content and attribute values.
fn push_html(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// Escape text for XML content and attribute values; characters XML 1.0
/// does not allow become U+FFFD.
fn push_xml(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
}

/// Escape text for a JSON string.
fn push_json(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
}

fn utc(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
}

/// A size as `autoindex_exact_size off` shows it: bytes below 10000, else
/// rounded (half up) to K, M or G.
pub fn approx_size(n: u64) -> String {
    const K: u64 = 1024;
    let (unit, suffix) = match n {
        0..10_000 => return n.to_string(),
        10_000..0x10_0000 => (K, 'K'),
        0x10_0000..0x4000_0000 => (K * K, 'M'),
        _ => (K * K * K, 'G'),
    };
    let mut v = n / unit;
    if n % unit >= unit / 2 {
        v += 1;
    }
    format!("{v}{suffix}")
}

fn html(uri: &[u8], entries: &[Entry], ac: &AutoindexConf) -> String {
    let mut out = String::with_capacity(256 + entries.len() * 120);
    let mut title = String::new();
    push_html(&mut title, &String::from_utf8_lossy(uri));
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html>\n<head><meta charset=\"utf-8\"><title>Index of {title}</title></head>\n<body>\n<h1>Index of {title}</h1><hr><pre>"
    );
    if uri != b"/" {
        out.push_str("<a href=\"../\">../</a>\n");
    }
    for e in entries {
        let dir = e.kind == Kind::Dir;
        out.push_str("<a href=\"");
        out.extend(percent_encode(&e.name, HREF));
        if dir {
            out.push('/');
        }
        out.push_str("\">");
        let mut shown = String::from_utf8_lossy(&e.name).into_owned();
        if dir {
            shown.push('/');
        }
        let chars = shown.chars().count();
        if chars > NAME_WIDTH {
            let cut: String = shown.chars().take(NAME_WIDTH - 3).collect();
            push_html(&mut out, &cut);
            out.push_str("..&gt;</a>");
        } else {
            push_html(&mut out, &shown);
            out.push_str("</a>");
            out.extend(std::iter::repeat_n(' ', NAME_WIDTH - chars));
        }
        out.push(' ');
        let _ = if ac.localtime {
            let t = Local
                .timestamp_opt(e.mtime, 0)
                .single()
                .unwrap_or_else(|| utc(e.mtime).with_timezone(&Local));
            write!(out, "{}", t.format("%d-%b-%Y %H:%M"))
        } else {
            write!(out, "{}", utc(e.mtime).format("%d-%b-%Y %H:%M"))
        };
        let size = if dir {
            "-".to_string()
        } else if ac.exact_size {
            e.size.to_string()
        } else {
            approx_size(e.size)
        };
        let width = if ac.exact_size { 19 } else { 7 };
        let _ = writeln!(out, " {size:>width$}");
    }
    out.push_str("</pre><hr></body>\n</html>\n");
    out
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Dir => "directory",
        Kind::File => "file",
        Kind::Other => "other",
    }
}

fn json(entries: &[Entry]) -> String {
    let mut out = String::with_capacity(4 + entries.len() * 100);
    out.push('[');
    for (i, e) in entries.iter().enumerate() {
        out.push_str(if i == 0 { "\n" } else { ",\n" });
        out.push_str("{ \"name\":\"");
        push_json(&mut out, &String::from_utf8_lossy(&e.name));
        let _ = write!(
            out,
            "\", \"type\":\"{}\", \"mtime\":\"{}\"",
            kind_name(e.kind),
            utc(e.mtime).format("%a, %d %b %Y %H:%M:%S GMT")
        );
        if e.kind == Kind::File {
            let _ = write!(out, ", \"size\":{}", e.size);
        }
        out.push_str(" }");
    }
    out.push_str("\n]\n");
    out
}

fn xml(entries: &[Entry]) -> String {
    let mut out = String::with_capacity(40 + entries.len() * 100);
    out.push_str("<?xml version=\"1.0\"?>\n<list>\n");
    for e in entries {
        let tag = kind_name(e.kind);
        let _ = write!(
            out,
            "<{tag} mtime=\"{}\"",
            utc(e.mtime).format("%Y-%m-%dT%H:%M:%SZ")
        );
        if e.kind == Kind::File {
            let _ = write!(out, " size=\"{}\"", e.size);
        }
        out.push('>');
        push_xml(&mut out, &String::from_utf8_lossy(&e.name));
        let _ = writeln!(out, "</{tag}>");
    }
    out.push_str("</list>\n");
    out
}

/// Directory listings, answered by the static files module.
pub static MODULE: Module = Module {
    name: "autoindex",
    nginx_default: &["http_autoindex_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::AutoindexConf::KIND),
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, kind: Kind, size: u64) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            kind,
            size,
            mtime: 1_577_934_245, // Thu, 02 Jan 2020 03:04:05 GMT
        }
    }

    #[test]
    fn approx_sizes() {
        let cases = [
            (0, "0"),
            (9999, "9999"),
            (10_239, "10K"),
            (10_751, "10K"),
            (10_752, "11K"),
            (1_048_575, "1024K"),
            (1_048_576, "1M"),
            (1_572_864, "2M"),
            (1_073_741_824, "1G"),
            (1_610_612_736, "2G"),
        ];
        for (n, want) in cases {
            assert_eq!(approx_size(n), want, "{n}");
        }
    }

    #[test]
    fn order_dirs_first_then_bytes() {
        let mut v = [
            entry("b", Kind::File, 1),
            entry("z", Kind::Dir, 0),
            entry("<a", Kind::File, 1),
            entry("A", Kind::Dir, 0),
        ];
        v.sort_by(order);
        let names: Vec<_> = v.iter().map(|e| e.name.as_slice()).collect();
        assert_eq!(names, [&b"A"[..], b"z", b"<a", b"b"]);
    }

    #[test]
    fn html_escapes_and_aligns() {
        let ac = AutoindexConf::default();
        let es = [
            entry("sub", Kind::Dir, 0),
            entry("<b>&\"q.txt", Kind::File, 0),
            entry("a b:c%d#e?.txt", Kind::File, 6),
            entry(&"x".repeat(60), Kind::File, 0),
        ];
        let page = html(b"/<i>/", &es, &ac);
        assert!(
            page.contains("<title>Index of /&lt;i&gt;/</title>"),
            "{page}"
        );
        let line = |p: &str| {
            page.lines()
                .find(|l| l.starts_with(p))
                .unwrap_or_else(|| panic!("{p} in {page}"))
                .to_string()
        };
        assert_eq!(
            line("<a href=\"sub/\">"),
            format!(
                "<a href=\"sub/\">sub/</a>{} 02-Jan-2020 03:04 {:>19}",
                " ".repeat(46),
                "-"
            )
        );
        assert!(line("<a href=\"%3Cb%3E%26%22q.txt\">").contains(">&lt;b&gt;&amp;&quot;q.txt</a>"));
        assert!(line("<a href=\"a%20b%3Ac%25d%23e%3F.txt\">").ends_with("                  6"));
        assert!(
            line(&format!("<a href=\"{}", "x".repeat(60)))
                .contains(&format!(">{}..&gt;</a> 02-Jan", "x".repeat(47)))
        );
    }

    #[test]
    fn json_and_xml() {
        let es = [
            entry("d", Kind::Dir, 4096),
            entry("q\"\\\u{1}.txt", Kind::File, 5),
            entry("fifo", Kind::Other, 0),
        ];
        assert_eq!(
            json(&es),
            "[\n{ \"name\":\"d\", \"type\":\"directory\", \"mtime\":\"Thu, 02 Jan 2020 03:04:05 GMT\" },\n\
             { \"name\":\"q\\\"\\\\\\u0001.txt\", \"type\":\"file\", \"mtime\":\"Thu, 02 Jan 2020 03:04:05 GMT\", \"size\":5 },\n\
             { \"name\":\"fifo\", \"type\":\"other\", \"mtime\":\"Thu, 02 Jan 2020 03:04:05 GMT\" }\n]\n"
        );
        assert_eq!(json(&[]), "[\n]\n");
        assert_eq!(
            xml(&es[..2]),
            "<?xml version=\"1.0\"?>\n<list>\n<directory mtime=\"2020-01-02T03:04:05Z\">d</directory>\n\
             <file mtime=\"2020-01-02T03:04:05Z\" size=\"5\">q&quot;\\\u{fffd}.txt</file>\n</list>\n"
        );
    }
}
