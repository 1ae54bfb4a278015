//! Extension → MIME type table (the `types {}` directive).

use std::cmp::Ordering;

/// A MIME table: extension (lowercase, without dot) → type. Built from the
/// embedded default or from `types {}` blocks.
#[derive(Clone, Debug, Default)]
pub struct MimeTypes {
    /// Sorted by extension bytes (extensions are stored ASCII-lowercased).
    /// Types are shared (`Arc`) so a response can carry one without copying it.
    entries: Vec<(Box<str>, std::sync::Arc<str>)>,
    /// Each entry's first 8 key bytes as a big-endian number (zero-padded),
    /// beside `entries`: sorted as they are, and compared in one instruction.
    prefixes: Vec<u64>,
}

/// The first 8 bytes of `ext`, ASCII-lowercased, big-endian, zero-padded:
/// ordered as the extensions are (extensions hold no NUL byte).
fn prefix(ext: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    for (d, s) in b.iter_mut().zip(ext) {
        *d = s.to_ascii_lowercase();
    }
    u64::from_be_bytes(b)
}

impl MimeTypes {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The default table, parsed from [`EMBEDDED_MIME_TYPES`].
    pub fn embedded() -> Self {
        let mut t = Self::default();
        t.extend_from_types_body(EMBEDDED_MIME_TYPES);
        t
    }

    /// Map `ext` (without the dot; matched case-insensitively) to `mime`.
    /// A later insert of the same extension replaces the earlier type. An
    /// empty extension is ignored. The type it replaced, if any.
    pub fn insert(&mut self, mime: &str, ext: &str) -> Option<std::sync::Arc<str>> {
        if ext.is_empty() {
            return None;
        }
        let key = ext.to_ascii_lowercase();
        match self
            .entries
            .binary_search_by(|(k, _)| k.as_bytes().cmp(key.as_bytes()))
        {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, mime.into())),
            Err(i) => {
                self.prefixes.insert(i, prefix(key.as_bytes()));
                self.entries.insert(i, (key.into(), mime.into()));
                None
            }
        }
    }

    /// Add every entry of a `types {}` block body: `type ext ext …;` entries,
    /// whitespace-separated and `;`-terminated; `#` starts a comment that runs
    /// to the end of the line.
    pub fn extend_from_types_body(&mut self, body: &str) {
        let b = body.as_bytes();
        let mut mime: Option<&str> = None;
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'#' => {
                    i = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n + 1);
                }
                b';' => {
                    mime = None;
                    i += 1;
                }
                c if c.is_ascii_whitespace() => i += 1,
                _ => {
                    let start = i;
                    while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b';' {
                        i += 1;
                    }
                    // Token boundaries are ASCII bytes, hence char boundaries.
                    let token = &body[start..i];
                    match mime {
                        Some(m) => {
                            self.insert(m, token);
                        }
                        None => mime = Some(token),
                    }
                }
            }
        }
    }

    /// The type for `path`, by the extension after the last `.` of its last
    /// segment, compared case-insensitively. A leading dot (`/.profile`) does
    /// not start an extension. Does not allocate.
    pub fn lookup(&self, path: &[u8]) -> Option<&str> {
        self.lookup_shared(path).map(|t| &**t)
    }

    /// As `lookup`, giving the shared string (no copy per response).
    pub fn lookup_shared(&self, path: &[u8]) -> Option<&std::sync::Arc<str>> {
        let name = match memchr::memrchr(b'/', path) {
            Some(slash) => &path[slash + 1..],
            None => path,
        };
        let dot = memchr::memrchr(b'.', name)?;
        if dot == 0 {
            return None;
        }
        let ext = &name[dot + 1..];
        if ext.is_empty() {
            return None;
        }
        let p = prefix(ext);
        let first = self.prefixes.partition_point(|&k| k < p);
        self.prefixes[first..]
            .iter()
            .take_while(|&&k| k == p)
            .zip(&self.entries[first..])
            .find(|(_, (k, _))| cmp_lowercased(k.as_bytes(), ext) == Ordering::Equal)
            .map(|(_, (_, mime))| mime)
    }

    /// Number of extensions in the table.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Compare a stored (lowercase) key with `ext` folded to ASCII lowercase.
#[inline]
fn cmp_lowercased(key: &[u8], ext: &[u8]) -> Ordering {
    key.iter()
        .copied()
        .cmp(ext.iter().map(u8::to_ascii_lowercase))
}

/// The default MIME table, in `types { … }` body syntax.
pub const EMBEDDED_MIME_TYPES: &str = "
# text
text/html                                   html htm shtml;
text/css                                    css;
text/plain                                  txt text log;
text/csv                                    csv;
text/tab-separated-values                   tsv;
text/markdown                               md markdown;
text/calendar                               ics;
text/vcard                                  vcf vcard;
text/vtt                                    vtt;
text/x-python                               py;
text/x-c                                    c h;

# scripts and structured data
application/javascript                      js mjs cjs;
application/json                            json map;
application/ld+json                         jsonld;
application/manifest+json                   webmanifest;
application/geo+json                        geojson;
application/x-ndjson                        ndjson;
application/xml                             xml xsd;
application/xslt+xml                        xsl xslt;
application/xhtml+xml                       xhtml xht;
application/atom+xml                        atom;
application/rss+xml                         rss;
application/yaml                            yaml yml;
application/toml                            toml;
application/sql                             sql;
application/wasm                            wasm;

# images
image/png                                   png;
image/apng                                  apng;
image/jpeg                                  jpg jpeg jfif;
image/gif                                   gif;
image/webp                                  webp;
image/avif                                  avif;
image/heic                                  heic;
image/heif                                  heif;
image/jxl                                   jxl;
image/svg+xml                               svg svgz;
image/x-icon                                ico cur;
image/bmp                                   bmp;
image/tiff                                  tif tiff;
image/vnd.adobe.photoshop                   psd;

# fonts
font/woff                                   woff;
font/woff2                                  woff2;
font/ttf                                    ttf;
font/otf                                    otf;
font/collection                             ttc;
application/vnd.ms-fontobject               eot;

# audio
audio/mpeg                                  mp3;
audio/ogg                                   ogg oga opus;
audio/mp4                                   m4a;
audio/aac                                   aac;
audio/wav                                   wav;
audio/flac                                  flac;
audio/webm                                  weba;
audio/x-matroska                            mka;
audio/midi                                  mid midi;

# video
video/mp4                                   mp4 m4v;
video/webm                                  webm;
video/ogg                                   ogv;
video/quicktime                             mov qt;
video/x-msvideo                             avi;
video/x-matroska                            mkv;
video/mpeg                                  mpeg mpg;
video/x-flv                                 flv;
video/x-ms-wmv                              wmv;
video/3gpp                                  3gp 3gpp;
video/mp2t                                  ts;
application/vnd.apple.mpegurl               m3u8;
application/dash+xml                        mpd;
application/ogg                             ogx;

# archives and packages
application/zip                             zip;
application/gzip                            gz tgz;
application/x-tar                           tar;
application/x-bzip2                         bz2;
application/x-xz                            xz;
application/zstd                            zst;
application/x-7z-compressed                 7z;
application/vnd.rar                         rar;
application/java-archive                    jar war ear;
application/vnd.android.package-archive     apk;
application/vnd.debian.binary-package       deb;
application/x-rpm                           rpm;
application/x-bittorrent                    torrent;

# documents
application/pdf                             pdf;
application/rtf                             rtf;
application/epub+zip                        epub;
application/postscript                      ps eps ai;
application/msword                          doc;
application/vnd.openxmlformats-officedocument.wordprocessingml.document   docx;
application/vnd.ms-excel                    xls;
application/vnd.openxmlformats-officedocument.spreadsheetml.sheet         xlsx;
application/vnd.ms-powerpoint               ppt;
application/vnd.openxmlformats-officedocument.presentationml.presentation pptx;
application/vnd.oasis.opendocument.text     odt;
application/vnd.oasis.opendocument.spreadsheet   ods;
application/vnd.oasis.opendocument.presentation  odp;
application/vnd.oasis.opendocument.graphics      odg;
application/vnd.google-earth.kml+xml        kml;
application/vnd.google-earth.kmz            kmz;

# 3D models
model/gltf+json                             gltf;
model/gltf-binary                           glb;
model/stl                                   stl;

# certificates and keys
application/x-x509-ca-cert                  der pem crt;
application/pgp-signature                   sig asc;

# other binaries
application/x-sh                            sh;
application/octet-stream                    bin exe dll so iso img dmg msi;
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_table() {
        let t = MimeTypes::embedded();
        assert!(!t.is_empty());
        assert!(t.len() > 100, "only {} extensions", t.len());
        let cases: &[(&str, &str)] = &[
            ("/index.html", "text/html"),
            ("/a.htm", "text/html"),
            ("/s.css", "text/css"),
            ("/app.js", "application/javascript"),
            ("/mod.mjs", "application/javascript"),
            ("/d.json", "application/json"),
            ("/d.xml", "application/xml"),
            ("/r.txt", "text/plain"),
            ("/r.csv", "text/csv"),
            ("/README.md", "text/markdown"),
            ("/i.png", "image/png"),
            ("/i.jpg", "image/jpeg"),
            ("/i.jpeg", "image/jpeg"),
            ("/i.gif", "image/gif"),
            ("/i.webp", "image/webp"),
            ("/i.avif", "image/avif"),
            ("/i.svg", "image/svg+xml"),
            ("/i.svgz", "image/svg+xml"),
            ("/favicon.ico", "image/x-icon"),
            ("/i.bmp", "image/bmp"),
            ("/i.tif", "image/tiff"),
            ("/f.woff", "font/woff"),
            ("/f.woff2", "font/woff2"),
            ("/f.ttf", "font/ttf"),
            ("/f.otf", "font/otf"),
            ("/f.eot", "application/vnd.ms-fontobject"),
            ("/a.mp3", "audio/mpeg"),
            ("/a.ogg", "audio/ogg"),
            ("/a.m4a", "audio/mp4"),
            ("/a.wav", "audio/wav"),
            ("/v.mp4", "video/mp4"),
            ("/v.webm", "video/webm"),
            ("/v.mov", "video/quicktime"),
            ("/v.avi", "video/x-msvideo"),
            ("/v.mkv", "video/x-matroska"),
            ("/v.mpeg", "video/mpeg"),
            ("/v.flv", "video/x-flv"),
            ("/z.zip", "application/zip"),
            ("/z.tar.gz", "application/gzip"),
            ("/z.tar", "application/x-tar"),
            ("/z.bz2", "application/x-bzip2"),
            ("/z.xz", "application/x-xz"),
            ("/z.7z", "application/x-7z-compressed"),
            ("/z.rar", "application/vnd.rar"),
            ("/d.pdf", "application/pdf"),
            ("/m.wasm", "application/wasm"),
            ("/d.doc", "application/msword"),
            (
                "/d.docx",
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            ),
            ("/d.xls", "application/vnd.ms-excel"),
            (
                "/d.xlsx",
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            ),
            ("/d.ppt", "application/vnd.ms-powerpoint"),
            (
                "/d.pptx",
                "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            ),
            ("/d.odt", "application/vnd.oasis.opendocument.text"),
            ("/x.bin", "application/octet-stream"),
        ];
        for &(path, mime) in cases {
            assert_eq!(t.lookup(path.as_bytes()), Some(mime), "{path}");
        }
    }

    #[test]
    fn every_embedded_entry_is_well_formed() {
        let t = MimeTypes::embedded();
        for (ext, mime) in &t.entries {
            assert_eq!(ext.to_ascii_lowercase(), **ext);
            assert!(!ext.contains('.') && !ext.contains('/'), "{ext}");
            let (top, sub) = mime.split_once('/').expect("type/subtype");
            assert!(!top.is_empty() && !sub.is_empty(), "{mime}");
            assert!(!mime.contains(char::is_whitespace), "{mime}");
        }
        // sorted and unique
        assert!(t.entries.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn long_extensions_sharing_their_first_eight_bytes() {
        let mut t = MimeTypes::new();
        t.insert("a/one", "manifest");
        t.insert("a/two", "manifestx");
        t.insert("a/three", "MANIFESTXY");
        t.insert("a/four", "mani");
        assert!(t.prefixes.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(t.lookup(b"/f.manifest"), Some("a/one"));
        assert_eq!(t.lookup(b"/f.Manifestx"), Some("a/two"));
        assert_eq!(t.lookup(b"/f.manifestxy"), Some("a/three"));
        assert_eq!(t.lookup(b"/f.mani"), Some("a/four"));
        assert_eq!(t.lookup(b"/f.manifestz"), None);
        assert_eq!(t.lookup(b"/f.man"), None);
    }

    #[test]
    fn lookup_rules() {
        let t = MimeTypes::embedded();
        assert_eq!(t.lookup(b"/A/B/INDEX.HTML"), Some("text/html"));
        assert_eq!(t.lookup(b"/x.JsOn"), Some("application/json"));
        assert_eq!(t.lookup(b"index.html"), Some("text/html"));
        assert_eq!(t.lookup(b"/a.b.c.png"), Some("image/png"));
        // extension of the last segment only
        assert_eq!(t.lookup(b"/dir.html/file"), None);
        assert_eq!(t.lookup(b"/dir.html/"), None);
        // dotfiles, empty extensions, unknown ones
        assert_eq!(t.lookup(b"/.html"), None);
        assert_eq!(t.lookup(b".html"), None);
        assert_eq!(t.lookup(b"/file."), None);
        assert_eq!(t.lookup(b"/file"), None);
        assert_eq!(t.lookup(b""), None);
        assert_eq!(t.lookup(b"/"), None);
        assert_eq!(t.lookup(b"/x.unknownext"), None);
        assert_eq!(t.lookup(b"/x.htmlx"), None);
        assert_eq!(t.lookup(b"/x.htm"), Some("text/html"));
        assert_eq!(t.lookup(b"/x.\xff"), None);
        assert_eq!(t.lookup(b"/..png"), Some("image/png"));
    }

    #[test]
    fn insert_and_override() {
        let mut t = MimeTypes::new();
        assert!(t.is_empty());
        assert_eq!(t.lookup(b"/a.html"), None);
        t.insert("text/html", "HTML");
        assert_eq!(t.lookup(b"/a.html"), Some("text/html"));
        assert_eq!(t.lookup(b"/a.Html"), Some("text/html"));
        t.insert("application/xhtml+xml", "html");
        assert_eq!(t.lookup(b"/a.html"), Some("application/xhtml+xml"));
        assert_eq!(t.len(), 1);
        t.insert("x/y", "");
        assert_eq!(t.len(), 1);

        let mut e = MimeTypes::embedded();
        e.insert("text/javascript", "js");
        assert_eq!(e.lookup(b"/a.js"), Some("text/javascript"));
        assert_eq!(e.lookup(b"/a.mjs"), Some("application/javascript"));
    }

    #[test]
    fn types_body_syntax() {
        let mut t = MimeTypes::new();
        t.extend_from_types_body(
            "  text/html  html htm;\n\
             # a comment; with a semicolon\n\
             image/png\tpng\n  PNG2 ;application/x-foo foo;\n\
             text/plain txt # trailing comment\n;\n\
             lonely/type;\n\
             text/markdown md;text/x-late html;",
        );
        assert_eq!(t.lookup(b"/a.htm"), Some("text/html"));
        assert_eq!(t.lookup(b"/a.html"), Some("text/x-late"));
        assert_eq!(t.lookup(b"/a.png"), Some("image/png"));
        assert_eq!(t.lookup(b"/a.png2"), Some("image/png"));
        assert_eq!(t.lookup(b"/a.foo"), Some("application/x-foo"));
        assert_eq!(t.lookup(b"/a.txt"), Some("text/plain"));
        assert_eq!(t.lookup(b"/a.md"), Some("text/markdown"));
        assert_eq!(t.lookup(b"/a.comment"), None);
        assert_eq!(t.len(), 7);
    }

    #[test]
    fn type_lists() {
        let l = TypeList::of(["text/plain", "Application/JSON"]).unwrap();
        assert!(l.matches(Some("text/html")));
        assert!(l.matches(Some("text/plain")));
        assert!(l.matches(Some("TEXT/Plain; charset=utf-8")));
        assert!(l.matches(Some(" application/json ;q")));
        assert!(!l.matches(Some("text/plainx")));
        assert!(!l.matches(Some("text/css")));
        assert!(!l.matches(None));
        let any = TypeList::of(["*"]).unwrap();
        assert!(any.matches(None) && any.matches(Some("image/png")));
        assert_eq!(TypeList::of(["text"]), Err("text"));
    }
}

/// The MIME types a body filter applies to (`gzip_types`, `charset_types`,
/// `sub_filter_types` …): `text/html` always, or any type (`*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeList {
    /// `*`: any type, also a response without one.
    pub any: bool,
    /// Lowercase, without parameters, text/html first.
    pub list: Box<[Box<str>]>,
}

impl TypeList {
    /// `text/html` only.
    pub fn html() -> std::sync::Arc<TypeList> {
        Self::of([]).expect("no names to refuse")
    }

    /// The list a directive names; a name that is neither `*` nor a MIME type
    /// without parameters is given back as the error.
    pub fn of<'a>(
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<std::sync::Arc<TypeList>, &'a str> {
        let mut any = false;
        let mut list: Vec<Box<str>> = vec![Box::from("text/html")];
        for a in names {
            if a == "*" {
                any = true;
            } else if a.contains('/') && !a.contains(';') {
                let t = a.to_ascii_lowercase();
                if !list.iter().any(|x| **x == *t) {
                    list.push(t.into());
                }
            } else {
                return Err(a);
            }
        }
        Ok(std::sync::Arc::new(TypeList {
            any,
            list: list.into(),
        }))
    }

    /// Does a response with this Content-Type qualify? Parameters (`; charset=…`)
    /// are ignored, the comparison is case-insensitive.
    pub fn matches(&self, content_type: Option<&str>) -> bool {
        if self.any {
            return true;
        }
        let Some(ct) = content_type else {
            return false;
        };
        let end = memchr::memchr(b';', ct.as_bytes()).unwrap_or(ct.len());
        let ct = ct[..end].trim_ascii();
        // The list is lower case, as Content-Types mostly are: an exact comparison
        // settles most entries, the case-insensitive one only equal lengths.
        self.list
            .iter()
            .any(|t| **t == *ct || (t.len() == ct.len() && t.eq_ignore_ascii_case(ct)))
    }
}
