//! Request-path decoding and normalisation: turns the raw path of a request
//! target into the canonical, decoded URI used for location matching and for
//! mapping onto the file system (what nginx calls `$uri`).

/// The request path cannot be normalised; the request is answered with 400.
#[derive(Debug, PartialEq, Eq)]
pub struct BadUri;

/// Percent-decode and normalise a request path (the part of the target before
/// `?`, which must start with `/`).
///
/// * `%XX` escapes are decoded once; a malformed escape (`%zz`, `%4`) is an
///   error. The decoded bytes take part in normalisation, so `%2e` acts as `.`
///   and `%2f` as `/`; a decoded `%` (from `%25`) is an ordinary byte, so
///   double-encoded input such as `%252e` becomes the literal name `%2e`.
/// * NUL, CR and LF (raw or decoded) are errors.
/// * Runs of slashes are merged; `.` segments are dropped and `..` segments
///   remove the previous segment. A `..` that would climb above `/` is an
///   error.
/// * A trailing slash is kept, and a trailing `.`/`..` segment leaves one
///   (`/a/.` → `/a/`, `/a/..` → `/`).
/// * Bytes ≥ 0x80 are kept as they are; the result may not be UTF-8.
///
/// `out` is cleared first and receives the normalised path, which always
/// starts with `/`.
pub fn normalize(path: &[u8], out: &mut Vec<u8>) -> Result<(), BadUri> {
    normalize_with(path, out, true)
}

/// [`normalize`], with `merge_slashes`: `false` keeps runs of slashes (each
/// empty segment is a segment, which a `..` removes like any other, so the
/// result still never climbs above `/`).
pub fn normalize_with(path: &[u8], out: &mut Vec<u8>, merge: bool) -> Result<(), BadUri> {
    out.clear();
    if path.first() != Some(&b'/') {
        return Err(BadUri);
    }
    if is_canonical(path, merge) {
        out.extend_from_slice(path);
        return Ok(());
    }

    out.reserve(path.len());
    out.push(b'/');
    let mut i = 1;
    while i < path.len() {
        let mut c = path[i];
        i += 1;
        if c == b'%' {
            let (Some(&hi), Some(&lo)) = (path.get(i), path.get(i + 1)) else {
                return Err(BadUri);
            };
            c = (hex_value(hi)? << 4) | hex_value(lo)?;
            i += 2;
        }
        match c {
            0 | b'\r' | b'\n' => return Err(BadUri),
            b'/' => {
                // A resolved `.`/`..` leaves its slash: no second one.
                let dot = close_segment(out)?;
                if (!merge && !dot) || out.last() != Some(&b'/') {
                    out.push(b'/');
                }
            }
            _ => out.push(c),
        }
    }
    close_segment(out).map(|_| ())
}

/// True when `path` needs neither decoding nor normalisation: no `%`, no
/// forbidden byte, no `//` and no segment starting with `.`.
#[inline]
fn is_canonical(path: &[u8], merge: bool) -> bool {
    let mut prev = 0u8;
    for &b in path {
        match b {
            b'%' | 0 | b'\r' | b'\n' => return false,
            b'.' if prev == b'/' => return false,
            b'/' if prev == b'/' && merge => return false,
            _ => {}
        }
        prev = b;
    }
    true
}

#[inline]
fn hex_value(b: u8) -> Result<u8, BadUri> {
    match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        b'A'..=b'F' => Ok(b - b'A' + 10),
        _ => Err(BadUri),
    }
}

/// Resolve the last segment of `out` (everything after its last `/`) if it is
/// `.` or `..` (then true). `out` always starts with `/`.
fn close_segment(out: &mut Vec<u8>) -> Result<bool, BadUri> {
    let slash = memchr::memrchr(b'/', out).unwrap_or(0);
    match &out[slash + 1..] {
        b"." => out.truncate(slash + 1),
        b".." => {
            if slash == 0 {
                return Err(BadUri);
            }
            let parent = memchr::memrchr(b'/', &out[..slash]).unwrap_or(0);
            out.truncate(parent + 1);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(p: &[u8]) -> Result<Vec<u8>, BadUri> {
        let mut out = Vec::new();
        normalize(p, &mut out).map(|()| out)
    }

    fn ok(p: &str, expect: &str) {
        assert_eq!(
            norm(p.as_bytes()),
            Ok(expect.as_bytes().to_vec()),
            "input {p:?}"
        );
    }

    fn bad(p: &str) {
        assert_eq!(norm(p.as_bytes()), Err(BadUri), "input {p:?}");
    }

    #[test]
    fn plain_paths_are_copied() {
        ok("/", "/");
        ok("/index.html", "/index.html");
        ok("/a/b/c", "/a/b/c");
        ok("/a/b/", "/a/b/");
        ok("/a.b/c..d/e.", "/a.b/c..d/e.");
        ok("/a+b", "/a+b");
    }

    #[test]
    fn must_start_with_slash() {
        bad("");
        bad("a/b");
        bad("%2fa");
        bad("*");
    }

    #[test]
    fn percent_decoding() {
        ok("/%41%62c", "/Abc");
        ok("/a%20b", "/a b");
        ok("/%e2%82%ac", "/\u{20ac}");
        ok("/%3F%23", "/?#");
        bad("/%zz");
        bad("/%4");
        bad("/%");
        bad("/a%g0");
        bad("/a%0g");
    }

    #[test]
    fn forbidden_bytes() {
        bad("/%00");
        bad("/a%00b");
        bad("/a\0b");
        bad("/%0d%0a");
        bad("/a%0Ab");
        bad("/a\rb");
    }

    fn kept(p: &str, expect: &str) {
        let mut out = Vec::new();
        assert_eq!(
            normalize_with(p.as_bytes(), &mut out, false).map(|()| out),
            Ok(expect.as_bytes().to_vec()),
            "input {p:?}"
        );
    }

    #[test]
    fn merge_slashes_off_keeps_them_and_stays_under_root() {
        kept("/a//b", "/a//b");
        kept("//", "//");
        kept("/a//./b", "/a//b");
        kept("/a%2f%2fb", "/a//b");
        // `..` removes the empty segment before it, as any other.
        kept("/a//../b", "/a/b");
        kept("/a/b//..//c", "/a/b//c");
        let mut out = Vec::new();
        assert_eq!(normalize_with(b"//../..", &mut out, false), Err(BadUri));
        assert_eq!(normalize_with(b"/..//", &mut out, false), Err(BadUri));
    }

    #[test]
    fn merges_slashes() {
        ok("//", "/");
        ok("//a///b//", "/a/b/");
        ok("/a%2f%2Fb", "/a/b");
        ok("/%2f", "/");
    }

    #[test]
    fn dot_segments() {
        ok("/.", "/");
        ok("/./", "/");
        ok("/a/.", "/a/");
        ok("/a/./b", "/a/b");
        ok("/a/..", "/");
        ok("/a/../", "/");
        ok("/a/b/..", "/a/");
        ok("/a/b/../c", "/a/c");
        ok("/a/b/../../c/", "/c/");
        ok("/a/./../b", "/b");
        ok("/a//../b", "/b");
        ok("/.hidden", "/.hidden");
        ok("/.well-known/x", "/.well-known/x");
        ok("/a/...", "/a/...");
        ok("/a/..b", "/a/..b");
        ok("/a/b..", "/a/b..");
    }

    #[test]
    fn traversal_variants() {
        bad("/..");
        bad("/../");
        bad("/../etc/passwd");
        bad("/a/../../etc/passwd");
        bad("/a/b/../../..");
        bad("/%2e%2e/etc/passwd");
        bad("/%2E%2E/etc/passwd");
        bad("/.%2e/etc/passwd");
        bad("/%2e./etc/passwd");
        bad("/a%2f..%2f..%2fetc/passwd");
        bad("/a/%2e%2e%2f%2e%2e/etc");
        bad("//..");
        bad("/./..");
        ok("/a/%2e%2e/b", "/b");
        ok("/a/%2e/b", "/a/b");
        ok("/a%2f..%2fb", "/b");
        ok("/a/b%2f..", "/a/");
        ok("/a/%2e%2e", "/");
    }

    #[test]
    fn double_encoding_is_not_traversal() {
        ok("/%252e%252e/etc", "/%2e%2e/etc");
        ok("/a/%252e%252e%252fb", "/a/%2e%2e%2fb");
        ok("/%25", "/%");
        ok("/%2500", "/%00");
    }

    #[test]
    fn backslash_is_ordinary() {
        ok("/a\\..\\b", "/a\\..\\b");
        ok("/..\\a", "/..\\a");
        ok("/%5c..%5c", "/\\..\\");
    }

    #[test]
    fn high_bytes_kept() {
        assert_eq!(norm(b"/\xff\x80/%ff"), Ok(b"/\xff\x80/\xff".to_vec()));
    }

    #[test]
    fn out_is_reset() {
        let mut out = b"garbage".to_vec();
        normalize(b"/x", &mut out).unwrap();
        assert_eq!(out, b"/x");
        normalize(b"/a/../y", &mut out).unwrap();
        assert_eq!(out, b"/y");
    }

    /// Straightforward reference: decode everything, split, resolve with a stack.
    fn reference(p: &[u8]) -> Result<Vec<u8>, BadUri> {
        if p.first() != Some(&b'/') {
            return Err(BadUri);
        }
        let mut dec = Vec::new();
        let mut i = 0;
        while i < p.len() {
            if p[i] == b'%' {
                let h = p.get(i + 1).ok_or(BadUri).and_then(|&b| hex_value(b))?;
                let l = p.get(i + 2).ok_or(BadUri).and_then(|&b| hex_value(b))?;
                dec.push(h * 16 + l);
                i += 3;
            } else {
                dec.push(p[i]);
                i += 1;
            }
        }
        if dec.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
            return Err(BadUri);
        }
        let segs: Vec<&[u8]> = dec[1..].split(|&b| b == b'/').collect();
        let mut stack: Vec<&[u8]> = Vec::new();
        for s in &segs {
            match *s {
                b"" | b"." => {}
                b".." => {
                    stack.pop().ok_or(BadUri)?;
                }
                _ => stack.push(s),
            }
        }
        let mut out = vec![b'/'];
        out.extend_from_slice(&stack.join(&b'/'));
        let last = *segs.last().unwrap();
        if !stack.is_empty() && matches!(last, b"" | b"." | b"..") {
            out.push(b'/');
        }
        Ok(out)
    }

    #[test]
    fn generated_inputs() {
        const PIECES: &[&str] = &[
            "/", "/", "/", ".", ".", "..", "a", "bc", "%2e", "%2E", "%2f", "%2F", "%25", "%252e",
            "%00", "%0a", "%", "%4", "%zz", "%41", "\\", "\u{e9}", "%c3%a9", "x.y", "...",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize
        };
        let mut out = Vec::new();
        let mut oks = 0;
        for _ in 0..20_000 {
            let mut input = String::from("/");
            for _ in 0..next() % 12 {
                input.push_str(PIECES[next() % PIECES.len()]);
            }
            let r = normalize(input.as_bytes(), &mut out);
            let failed = r.is_err();
            assert_eq!(
                r.map(|()| out.clone()),
                reference(input.as_bytes()),
                "input {input:?}"
            );
            if failed {
                continue;
            }
            oks += 1;
            assert_eq!(out.first(), Some(&b'/'), "{input:?}");
            assert!(!out.contains(&0), "{input:?}");
            for bad in [&b"/../"[..], b"/./", b"//"] {
                assert!(!out.windows(bad.len()).any(|w| w == bad), "{input:?}");
            }
            assert!(!out.ends_with(b"/..") && !out.ends_with(b"/."), "{input:?}");
            if !out.contains(&b'%') {
                let mut again = Vec::new();
                normalize(&out, &mut again).unwrap();
                assert_eq!(again, out, "not idempotent for {input:?}");
            }
        }
        assert!(oks > 5_000, "too few valid inputs: {oks}");
    }
}
