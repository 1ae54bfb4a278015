//! A cache entry on disk: one file per entry, written whole to a temporary
//! file beside the entries and renamed into place.
//!
//! Layout (integers little-endian):
//!
//! ```text
//! 0   magic "VIREOC02"
//! 8   valid until (i64, Unix seconds)   rewritten in place on revalidation
//! 16  stored at (i64, Unix seconds)
//! 24  meta length (u32)
//! 28  body length (u64)
//! 36  CRC-32 of the meta
//! 40  CRC-32 of the body
//! 44  CRC-32 of bytes 16..44
//! 48  meta: key, variant, status, the seconds past expiry it may be sent
//!     stale while updated and on an error, Vary names, Content-Type, header
//!     fields, X-Accel-Charset when the reply had one
//!     body
//! ```
//!
//! A reader checks the fixed part, the meta's checksum and that the file is
//! exactly as long as they say; the loader also checks the body's checksum
//! (an entry written before a crash or power loss is then whole or gone).

use crate::core::message::response::Value;
use bytes::{Buf, BufMut};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"VIREOC02";
/// The magic of the format before the stale seconds: read as a miss.
const OLDER: &[u8; 8] = b"VIREOC01";
pub const FIXED: u64 = 48;

/// What an entry says besides its body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta {
    pub key: Vec<u8>,
    /// MD5 of the request's values of the `Vary` fields.
    pub variant: [u8; 16],
    pub status: u16,
    /// An error page stands for the reply: the status alone is kept.
    pub error: bool,
    /// Seconds past expiry the entry may be sent while it is fetched anew
    /// (`Cache-Control: stale-while-revalidate`).
    pub stale_updating: u32,
    /// Seconds past expiry the entry may be sent when fetching it fails
    /// (`stale-if-error`, and `stale-while-revalidate`).
    pub stale_error: u32,
    /// The reply's `Vary` field names, lowercase, comma-separated.
    pub vary: String,
    pub content_type: Option<String>,
    pub headers: Vec<(String, String)>,
    /// The reply's `X-Accel-Charset` (`Response::override_charset`).
    pub override_charset: Option<String>,
}

impl Meta {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(256);
        put_bytes(&mut b, &self.key);
        b.extend_from_slice(&self.variant);
        b.put_u16_le(self.status);
        b.put_u8(self.error as u8);
        b.put_u32_le(self.stale_updating);
        b.put_u32_le(self.stale_error);
        put_bytes(&mut b, self.vary.as_bytes());
        match &self.content_type {
            Some(c) => {
                b.put_u8(1);
                put_bytes(&mut b, c.as_bytes());
            }
            None => b.put_u8(0),
        }
        b.put_u32_le(self.headers.len() as u32);
        for (n, v) in &self.headers {
            put_bytes(&mut b, n.as_bytes());
            put_bytes(&mut b, v.as_bytes());
        }
        if let Some(c) = &self.override_charset {
            put_bytes(&mut b, c.as_bytes());
        }
        b
    }

    fn decode(mut b: &[u8]) -> Option<Meta> {
        let key = get_bytes(&mut b)?.to_vec();
        if b.len() < 27 {
            return None;
        }
        let mut variant = [0; 16];
        b.copy_to_slice(&mut variant);
        let status = b.get_u16_le();
        let error = b.get_u8() == 1;
        let stale_updating = b.get_u32_le();
        let stale_error = b.get_u32_le();
        let vary = get_str(&mut b)?;
        let content_type = match b.first()? {
            0 => {
                b.advance(1);
                None
            }
            1 => {
                b.advance(1);
                Some(get_str(&mut b)?)
            }
            _ => return None,
        };
        if b.len() < 4 {
            return None;
        }
        let n = b.get_u32_le() as usize;
        let mut headers = Vec::with_capacity(n.min(256));
        for _ in 0..n {
            headers.push((get_str(&mut b)?, get_str(&mut b)?));
        }
        let override_charset = match b.is_empty() {
            true => None,
            false => Some(get_str(&mut b)?),
        };
        b.is_empty().then_some(Meta {
            key,
            variant,
            status,
            error,
            stale_updating,
            stale_error,
            vary,
            content_type,
            headers,
            override_charset,
        })
    }

    /// The first field called `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn put_bytes(b: &mut Vec<u8>, v: &[u8]) {
    b.put_u32_le(v.len() as u32);
    b.extend_from_slice(v);
}

fn get_bytes<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
    if b.len() < 4 {
        return None;
    }
    let n = b.get_u32_le() as usize;
    let v = b.get(..n)?;
    b.advance(n);
    Some(v)
}

fn get_str(b: &mut &[u8]) -> Option<String> {
    String::from_utf8(get_bytes(b)?.to_vec()).ok()
}

/// An entry opened for reading.
#[derive(Debug)]
pub struct Entry {
    pub file: std::rc::Rc<File>,
    /// The body, when it was read into memory (a small one a worker keeps).
    pub body: Option<bytes::Bytes>,
    pub meta: Meta,
    /// The reply's header fields as a response carries them (the names
    /// vireo knows; values shared by every hit of this opened entry).
    pub fields: Vec<(&'static str, Value)>,
    pub content_type: Option<Value>,
    pub valid_until: i64,
    pub body_off: u64,
    pub body_len: u64,
    body_crc: u32,
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("cache file {what}"))
}

impl Entry {
    /// Open and check an entry's head (see the module doc).
    pub fn open(path: &Path) -> io::Result<Entry> {
        let file = File::open(path)?;
        let mut fixed = [0u8; FIXED as usize];
        file.read_exact_at(&mut fixed, 0)
            .map_err(|_| bad("too short"))?;
        if &fixed[..8] == OLDER {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "cache file of an older format",
            ));
        }
        if &fixed[..8] != MAGIC {
            return Err(bad("has no valid magic"));
        }
        let mut f = &fixed[8..];
        let valid_until = f.get_i64_le();
        // When it was stored: kept in the file, not needed to serve it.
        let _stored = f.get_i64_le();
        let meta_len = f.get_u32_le() as u64;
        let body_len = f.get_u64_le();
        let meta_crc = f.get_u32_le();
        let body_crc = f.get_u32_le();
        let fixed_crc = f.get_u32_le();
        if crc32fast::hash(&fixed[16..44]) != fixed_crc {
            return Err(bad("head checksum mismatch"));
        }
        let size = file.metadata()?.len();
        if size != FIXED + meta_len + body_len || meta_len > 16 << 20 {
            return Err(bad("length mismatch"));
        }
        let mut m = vec![0; meta_len as usize];
        file.read_exact_at(&mut m, FIXED)?;
        if crc32fast::hash(&m) != meta_crc {
            return Err(bad("meta checksum mismatch"));
        }
        let meta = Meta::decode(&m).ok_or_else(|| bad("meta is malformed"))?;
        Ok(Entry::new(
            file,
            meta,
            valid_until,
            FIXED + meta_len,
            body_len,
            body_crc,
        ))
    }

    fn new(
        file: File,
        meta: Meta,
        valid_until: i64,
        body_off: u64,
        body_len: u64,
        body_crc: u32,
    ) -> Entry {
        let fields = meta
            .headers
            .iter()
            .filter_map(|(n, v)| {
                crate::upstream::intern_header_name(n)
                    .map(|n| (n, Value::Shared(v.as_str().into())))
            })
            .collect();
        let content_type = meta
            .content_type
            .as_deref()
            .map(|t| Value::Shared(t.into()));
        Entry {
            file: std::rc::Rc::new(file),
            body: None,
            fields,
            content_type,
            meta,
            valid_until,
            body_off,
            body_len,
            body_crc,
        }
    }

    /// Check the body against its checksum (reads it all).
    pub fn verify_body(&self) -> io::Result<()> {
        let mut h = crc32fast::Hasher::new();
        let mut buf = vec![0; 64 * 1024];
        let mut off = self.body_off;
        let end = self.body_off + self.body_len;
        while off < end {
            let n = ((end - off) as usize).min(buf.len());
            self.file.read_exact_at(&mut buf[..n], off)?;
            h.update(&buf[..n]);
            off += n as u64;
        }
        if h.finalize() != self.body_crc {
            return Err(bad("body checksum mismatch"));
        }
        Ok(())
    }

    /// The file's size on disk.
    pub fn size(&self) -> u64 {
        self.body_off + self.body_len
    }
}

/// Make an entry fresh again until `until` (a revalidation): the fixed
/// part is rewritten in place, in one write.
pub fn set_valid_until(path: &Path, until: i64) -> io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.write_all_at(&until.to_le_bytes(), 8)
}

/// An entry being written.
pub struct Writer {
    tmp: PathBuf,
    file: Option<File>,
    meta: Vec<u8>,
    body_crc: crc32fast::Hasher,
    body_len: u64,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Writer({})", self.tmp.display())
    }
}

/// Temporary files start with this; the loader removes those it finds.
pub const TEMP_PREFIX: &str = ".tmp-";

impl Writer {
    /// A temporary file in `dir` with `meta` written after room for the
    /// fixed part.
    pub fn create(dir: &Path, meta: &Meta) -> io::Result<Writer> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let tmp = dir.join(format!(
            "{TEMP_PREFIX}{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .open(&tmp)?;
        let meta = meta.encode();
        let mut w = Writer {
            tmp,
            file: None,
            meta,
            body_crc: crc32fast::Hasher::new(),
            body_len: 0,
        };
        file.write_all(&[0; FIXED as usize])?;
        file.write_all(&w.meta)?;
        w.file = Some(file);
        Ok(w)
    }

    pub fn write(&mut self, piece: &[u8]) -> io::Result<()> {
        let f = self.file.as_mut().expect("open until finished");
        f.write_all(piece)?;
        self.body_crc.update(piece);
        self.body_len += piece.len() as u64;
        Ok(())
    }

    pub fn body_len(&self) -> u64 {
        self.body_len
    }

    /// Where the body starts in the file.
    pub fn body_off(&self) -> u64 {
        FIXED + self.meta.len() as u64
    }

    /// Another handle on the temporary file (readable after it is removed).
    pub fn reopen(&self) -> io::Result<File> {
        self.file.as_ref().expect("open until finished").try_clone()
    }

    /// Write the fixed part and move the file to `dest` (its folders made
    /// when missing); the entry, opened.
    pub fn finish(mut self, dest: &Path, valid_until: i64, stored: i64) -> io::Result<Entry> {
        let file = self.file.take().expect("open until finished");
        let mut fixed = Vec::with_capacity(FIXED as usize);
        fixed.extend_from_slice(MAGIC);
        fixed.put_i64_le(valid_until);
        fixed.put_i64_le(stored);
        fixed.put_u32_le(self.meta.len() as u32);
        fixed.put_u64_le(self.body_len);
        fixed.put_u32_le(crc32fast::hash(&self.meta));
        fixed.put_u32_le(self.body_crc.clone().finalize());
        let c = crc32fast::hash(&fixed[16..44]);
        fixed.put_u32_le(c);
        file.write_all_at(&fixed, 0)?;
        if let Some(parent) = dest.parent()
            && !parent.is_dir()
        {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(&self.tmp, dest)?;
        Ok(Entry::new(
            file,
            Meta::decode(&self.meta).expect("encoded above"),
            valid_until,
            FIXED + self.meta.len() as u64,
            self.body_len,
            self.body_crc.clone().finalize(),
        ))
    }
}

impl Drop for Writer {
    /// Not finished: the temporary file goes.
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Make `to` another name of the entry file `from` (replacing what `to`
/// was, at once: linked beside it, then renamed).
pub fn link(from: &Path, to: &Path) -> io::Result<()> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = to.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        "{TEMP_PREFIX}{}-l{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::hard_link(from, &tmp)?;
    std::fs::rename(&tmp, to).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// The file of the entry `hash` under `dir`: `levels` folders named by the
/// hex name's last characters, as nginx lays out its cache.
pub fn path(dir: &Path, levels: &[u8], hash: &[u8; 16]) -> PathBuf {
    let hex = hex(hash);
    let mut p = dir.to_path_buf();
    let mut end = hex.len();
    for &l in levels {
        let l = l as usize;
        p.push(&hex[end - l..end]);
        end -= l;
    }
    p.push(&hex);
    p
}

pub fn hex(hash: &[u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(32);
    for b in hash {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// The hash a hex file name stands for.
pub fn unhex(name: &str) -> Option<[u8; 16]> {
    if name.len() != 32 {
        return None;
    }
    let mut h = [0; 16];
    for (i, b) in h.iter_mut().enumerate() {
        *b = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(h)
}

pub fn md5(parts: &[&[u8]]) -> [u8; 16] {
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_name_folders_from_the_end() {
        let h = unhex("b7f54b2df7773722d382f4809d65029c").unwrap();
        assert_eq!(
            path(Path::new("/c"), &[1, 2], &h),
            Path::new("/c/c/29/b7f54b2df7773722d382f4809d65029c")
        );
        assert_eq!(hex(&h), "b7f54b2df7773722d382f4809d65029c");
    }

    #[test]
    fn written_entries_read_back_and_damage_is_seen() {
        let dir = std::env::temp_dir().join(format!("vireo-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let meta = Meta {
            key: b"k".to_vec(),
            status: 200,
            stale_updating: 10,
            stale_error: 30,
            content_type: Some("text/plain".into()),
            headers: vec![("ETag".into(), "\"x\"".into())],
            ..Default::default()
        };
        let mut w = Writer::create(&dir, &meta).unwrap();
        w.write(b"hello ").unwrap();
        w.write(b"world").unwrap();
        let dest = path(&dir, &[1, 2], &md5(&[b"k"]));
        w.finish(&dest, 100, 50).unwrap();
        let e = Entry::open(&dest).unwrap();
        assert_eq!(e.meta, meta);
        assert_eq!((e.valid_until, e.body_len), (100, 11));
        e.verify_body().unwrap();
        set_valid_until(&dest, 200).unwrap();
        assert_eq!(Entry::open(&dest).unwrap().valid_until, 200);
        // A flipped body byte: the head still reads, the body does not verify.
        let f = std::fs::OpenOptions::new().write(true).open(&dest).unwrap();
        f.write_all_at(b"H", e.body_off).unwrap();
        assert!(Entry::open(&dest).unwrap().verify_body().is_err());
        // A truncated file does not open.
        f.set_len(e.size() - 1).unwrap();
        assert!(Entry::open(&dest).is_err());
        // One of the older format is told apart (a miss, not damage).
        f.write_all_at(OLDER, 0).unwrap();
        let old = Entry::open(&dest).unwrap_err();
        assert_eq!(old.kind(), io::ErrorKind::Unsupported);
        // A dropped writer leaves nothing.
        let w = Writer::create(&dir, &meta).unwrap();
        drop(w);
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
            .collect();
        assert!(left.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn meta_with_and_without_charset() {
        let mut m = Meta {
            key: b"k".to_vec(),
            headers: vec![("A".into(), "b".into())],
            ..Default::default()
        };
        assert_eq!(Meta::decode(&m.encode()), Some(m.clone()));
        m.override_charset = Some("koi8-r".into());
        assert_eq!(Meta::decode(&m.encode()), Some(m.clone()));
        let mut b = m.encode();
        b.push(0);
        assert_eq!(Meta::decode(&b), None);
    }
}
