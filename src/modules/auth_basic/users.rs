//! htpasswd files, parsed once and cached per worker until they change.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// A user name and its stored password.
type Entry = (Box<[u8]>, Box<[u8]>);

/// A parsed user file: `user:password` pairs in file order.
#[derive(Debug, Default)]
pub struct UserFile {
    entries: Vec<Entry>,
}

impl UserFile {
    /// Parse htpasswd text as nginx does: lines `user:password[:…]`,
    /// `#` comments, CR/LF line ends.
    pub fn parse(text: &[u8]) -> UserFile {
        let entries = text
            .split(|&b| b == b'\n' || b == b'\r')
            .filter(|l| !l.is_empty() && l[0] != b'#')
            .filter_map(|l| {
                let colon = memchr::memchr(b':', l)?;
                let rest = &l[colon + 1..];
                let pass = rest.split(|&b| b == b':').next().unwrap_or_default();
                Some((l[..colon].into(), pass.into()))
            })
            .collect();
        UserFile { entries }
    }

    /// The stored password of the first line for `user`.
    pub fn find(&self, user: &[u8]) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(u, _)| **u == *user)
            .map(|(_, p)| &**p)
    }
}

/// What tells a cached file is still current.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

thread_local! {
    static CACHE: RefCell<HashMap<PathBuf, (Stamp, Rc<UserFile>)>> = RefCell::new(HashMap::new());
}

/// The user file at `path`: one `stat` per call, read again when it
/// changed. The error names the call that failed (`open`, `read`).
pub fn load(path: &Path) -> Result<Rc<UserFile>, (&'static str, io::Error)> {
    let meta = std::fs::metadata(path).map_err(|e| ("open", e))?;
    let stamp = Stamp {
        ino: meta.ino(),
        len: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
    };
    if let Some(f) = CACHE.with_borrow(|c| {
        c.get(path)
            .filter(|(s, _)| *s == stamp)
            .map(|(_, f)| f.clone())
    }) {
        return Ok(f);
    }
    let text = std::fs::read(path).map_err(|e| ("read", e))?;
    let file = Rc::new(UserFile::parse(&text));
    CACHE.with_borrow_mut(|c| {
        // Paths with variables could grow this without end.
        if c.len() >= 64 {
            c.clear();
        }
        c.insert(path.to_path_buf(), (stamp, file.clone()));
    });
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_lines() {
        let f = UserFile::parse(
            b"# c\r\nalice:{PLAIN}a:comment\nbob:xyz\r\n\nalice:second\nnocolon\n:empty\n",
        );
        assert_eq!(f.find(b"alice"), Some(&b"{PLAIN}a"[..]));
        assert_eq!(f.find(b"bob"), Some(&b"xyz"[..]));
        assert_eq!(f.find(b"carol"), None);
        assert_eq!(f.find(b"# c"), None);
    }

    #[test]
    fn reloads_on_change() {
        let dir = std::env::temp_dir().join(format!("vireo-users-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("htpasswd");
        std::fs::write(&p, "a:1\n").unwrap();
        assert_eq!(load(&p).unwrap().find(b"a"), Some(&b"1"[..]));
        std::fs::write(&p, "a:22\n").unwrap();
        assert_eq!(load(&p).unwrap().find(b"a"), Some(&b"22"[..]));
        assert_eq!(load(&dir.join("none")).unwrap_err().0, "open");
        assert_eq!(load(&dir).unwrap_err().0, "read");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
