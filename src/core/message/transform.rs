//! Bodies changed piece by piece as they are sent (charset recoding,
//! sub_filter): a [`Transform`] turns input pieces into output, and
//! [`apply`] puts one over any body — at once for a body in memory, as a file
//! is read, or as another stream produces it.

use super::response::{Body, BodyStream, Multipart, read_file_at};
use crate::core::request::BoxFuture;
use bytes::Bytes;
use std::fs::File;
use std::io;
use std::rc::Rc;

/// A change made to a body piece by piece; it may hold bytes back (a UTF-8
/// sequence or a match cut by a piece's end) until the next piece or the end.
pub trait Transform: std::fmt::Debug + 'static {
    /// Transform `input`, appending to `out`.
    fn write(&mut self, input: &[u8], out: &mut Vec<u8>);

    /// The end of the body: what is held back goes out.
    fn finish(&mut self, out: &mut Vec<u8>);

    /// Output is waiting that the last `write` had no room for (a transform
    /// that bounds what one piece may produce, as decompression): `write`
    /// again with no input before the next piece.
    fn has_more(&self) -> bool {
        false
    }

    /// A body in memory is transformed as it is sent, piece by piece, not at
    /// once (its output may be far larger: decompression).
    fn expands(&self) -> bool {
        false
    }

    /// Transform a whole body at once.
    fn all(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len() + input.len() / 2);
        self.write(input, &mut out);
        while self.has_more() {
            self.write(&[], &mut out);
        }
        self.finish(&mut out);
        out
    }
}

/// `body` with `t` over it; `same_length` when the output is as long as the
/// input (the length stays known). Of a multipart body only the ranges' bytes
/// are transformed, when `same_length` (each range ended on its own, its
/// heads as they are); otherwise it is given back as it is: its parts'
/// ranges count the input's bytes.
pub fn apply<T: Transform>(body: Body, mut t: T, same_length: bool) -> Body {
    match body {
        Body::Empty => Body::Empty,
        Body::Bytes(b) if t.expands() => Body::Stream {
            stream: Box::new(WrapStream {
                inner: Body::Bytes(b).into_stream().expect("not empty"),
                t,
                done: false,
            }),
            len: None,
        },
        Body::Bytes(b) => Body::Bytes(Bytes::from(t.all(&b))),
        Body::File { file, range } => Body::Stream {
            len: same_length.then_some(range.end - range.start),
            stream: Box::new(FileStream {
                file,
                off: range.start,
                end: range.end,
                t,
                done: false,
            }),
        },
        Body::Stream { stream, len } => Body::Stream {
            stream: Box::new(WrapStream {
                inner: stream,
                t,
                done: false,
            }),
            len: if same_length { len } else { None },
        },
        Body::Multipart { file, parts } if same_length => Body::Stream {
            len: Some(parts.content_length()),
            stream: Box::new(PartsStream {
                file,
                parts,
                part: 0,
                off: None,
                t,
            }),
        },
        m @ Body::Multipart { .. } => m,
    }
}

/// Pieces read from a file at most this long.
const READ_CHUNK: usize = 32 * 1024;

/// A byte range of a file, transformed as it is read.
#[derive(Debug)]
struct FileStream<T> {
    file: Rc<File>,
    off: u64,
    end: u64,
    t: T,
    done: bool,
}

impl<T: Transform> FileStream<T> {
    fn step(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let mut out = Vec::new();
            if self.t.has_more() {
                self.t.write(&[], &mut out);
            } else if self.off >= self.end {
                self.t.finish(&mut out);
                self.done = true;
            } else {
                let mut buf = vec![0; ((self.end - self.off) as usize).min(READ_CHUNK)];
                let n = read_file_at(&self.file, &mut buf, self.off)?;
                self.off += n as u64;
                self.t.write(&buf[..n], &mut out);
            }
            if !out.is_empty() {
                return Ok(Some(Bytes::from(out)));
            }
        }
    }
}

impl<T: Transform> BodyStream for FileStream<T> {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(std::future::ready(self.step()))
    }
}

/// A multipart body of a file whose ranges' bytes are transformed as they
/// are read; part heads and trailer go out as they are.
#[derive(Debug)]
struct PartsStream<T> {
    file: Rc<File>,
    parts: Box<Multipart>,
    /// The part being sent; `parts.len()`: the trailer; past it, the end.
    part: usize,
    /// How far into the part's range; `None`: its head is next.
    off: Option<u64>,
    t: T,
}

impl<T: Transform> PartsStream<T> {
    fn step(&mut self) -> io::Result<Option<Bytes>> {
        loop {
            let Some((head, range)) = self.parts.parts.get(self.part) else {
                if self.part > self.parts.parts.len() {
                    return Ok(None);
                }
                self.part += 1;
                return Ok(Some(Bytes::copy_from_slice(&self.parts.trailer)));
            };
            let Some(off) = self.off else {
                self.off = Some(0);
                return Ok(Some(Bytes::copy_from_slice(head)));
            };
            let mut out = Vec::new();
            let at = range.start + off;
            if at >= range.end {
                self.t.finish(&mut out);
                self.part += 1;
                self.off = None;
            } else {
                let mut buf = vec![0; ((range.end - at) as usize).min(READ_CHUNK)];
                let n = read_file_at(&self.file, &mut buf, at)?;
                self.off = Some(off + n as u64);
                self.t.write(&buf[..n], &mut out);
            }
            if !out.is_empty() {
                return Ok(Some(Bytes::from(out)));
            }
        }
    }
}

impl<T: Transform> BodyStream for PartsStream<T> {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(std::future::ready(self.step()))
    }

    fn ready(&mut self) -> Option<io::Result<Option<Bytes>>> {
        Some(self.step())
    }
}

/// Another body stream (proxy, FastCGI), transformed piece by piece.
#[derive(Debug)]
struct WrapStream<T> {
    inner: Box<dyn BodyStream>,
    t: T,
    done: bool,
}

impl<T: Transform> WrapStream<T> {
    /// Output the transform still holds from the last piece, if any.
    fn held(&mut self) -> Option<Option<Bytes>> {
        let mut out = Vec::new();
        while out.is_empty() && self.t.has_more() {
            self.t.write(&[], &mut out);
        }
        (!out.is_empty()).then(|| Some(Bytes::from(out)))
    }

    /// Transform one piece of the inner stream; `None` when it gave no output.
    fn take(&mut self, piece: Option<Bytes>) -> Option<Option<Bytes>> {
        let mut out = Vec::new();
        match piece {
            Some(p) => self.t.write(&p, &mut out),
            None => {
                self.t.finish(&mut out);
                self.done = true;
                if out.is_empty() {
                    return Some(None);
                }
            }
        }
        (!out.is_empty()).then(|| Some(Bytes::from(out)))
    }
}

impl<T: Transform> BodyStream for WrapStream<T> {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(async move {
            loop {
                if self.done {
                    return Ok(None);
                }
                if let Some(r) = self.held() {
                    return Ok(r);
                }
                let piece = self.inner.next().await?;
                if let Some(r) = self.take(piece) {
                    return Ok(r);
                }
            }
        })
    }

    fn ready(&mut self) -> Option<io::Result<Option<Bytes>>> {
        loop {
            if self.done {
                return Some(Ok(None));
            }
            if let Some(r) = self.held() {
                return Some(Ok(r));
            }
            match self.inner.ready()? {
                Err(e) => return Some(Err(e)),
                Ok(piece) => {
                    if let Some(r) = self.take(piece) {
                        return Some(Ok(r));
                    }
                }
            }
        }
    }

    fn unbuffered(&self) -> bool {
        self.inner.unbuffered()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds back a trailing `x` until the next piece: output only where
    /// the input allows it.
    #[derive(Debug, Default)]
    struct HoldX(bool);

    impl Transform for HoldX {
        fn write(&mut self, input: &[u8], out: &mut Vec<u8>) {
            if std::mem::take(&mut self.0) {
                out.push(b'X');
            }
            let (body, held) = match input.strip_suffix(b"x") {
                Some(b) => (b, true),
                None => (input, false),
            };
            out.extend(body.iter().map(u8::to_ascii_uppercase));
            self.0 = held;
        }
        fn finish(&mut self, out: &mut Vec<u8>) {
            if std::mem::take(&mut self.0) {
                out.push(b'!');
            }
        }
    }

    #[derive(Debug)]
    struct Pieces(std::collections::VecDeque<Bytes>);

    impl BodyStream for Pieces {
        fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
            Box::pin(std::future::ready(Ok(self.0.pop_front())))
        }
    }

    fn collect(body: Body) -> Vec<Vec<u8>> {
        let Body::Stream { mut stream, .. } = body else {
            panic!("not a stream")
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut got = Vec::new();
            while let Some(p) = stream.next().await.unwrap() {
                got.push(p.to_vec());
            }
            got
        })
    }

    #[test]
    fn streams_never_send_empty_pieces() {
        let pieces = [&b"x"[..], b"ax", b"b", b"x"];
        let inner = Pieces(pieces.iter().map(|p| Bytes::copy_from_slice(p)).collect());
        let body = Body::Stream {
            stream: Box::new(inner),
            len: Some(6),
        };
        let out = apply(body, HoldX::default(), false);
        assert!(matches!(out, Body::Stream { len: None, .. }));
        assert_eq!(
            collect(out),
            vec![b"XA".to_vec(), b"XB".to_vec(), b"!".to_vec()]
        );
    }

    #[test]
    fn bodies_in_memory_and_files() {
        let Body::Bytes(b) = apply(
            Body::Bytes(Bytes::from_static(b"abx")),
            HoldX::default(),
            true,
        ) else {
            panic!("not bytes")
        };
        assert_eq!(&b[..], b"AB!");
        let path = std::env::temp_dir().join(format!("vireo-transform-{}", std::process::id()));
        std::fs::write(&path, b"--abcx--").unwrap();
        let file = Rc::new(File::open(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        let out = apply(Body::File { file, range: 2..6 }, HoldX::default(), true);
        assert!(matches!(out, Body::Stream { len: Some(4), .. }));
        assert_eq!(collect(out), vec![b"ABC".to_vec(), b"!".to_vec()]);
    }

    #[test]
    fn multipart_ranges_only() {
        let path = std::env::temp_dir().join(format!("vireo-parts-{}", std::process::id()));
        std::fs::write(&path, b"--abxcd--").unwrap();
        let file = Rc::new(File::open(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        let mut parts = Multipart {
            boundary: "B".into(),
            content_type: "t/x".into(),
            parts: vec![
                (b"\r\n--B\r\nContent-Type: t/x\r\nR1\r\n\r\n".to_vec(), 2..5),
                (b"\r\n--B\r\nContent-Type: t/x\r\nR2\r\n\r\n".to_vec(), 5..7),
            ],
            trailer: b"\r\n--B--\r\n".to_vec(),
        };
        parts.retype("t/y; c=1");
        let n = parts.content_length();
        let body = Body::Multipart {
            file: file.clone(),
            parts: Box::new(parts.clone()),
        };
        let out = apply(body, HoldX::default(), true);
        assert!(matches!(out, Body::Stream { len: Some(l), .. } if l == n));
        let got = collect(out).concat();
        let want = b"\r\n--B\r\nContent-Type: t/y; c=1\r\nR1\r\n\r\nAB!\r\n--B\r\nContent-Type: t/y; c=1\r\nR2\r\n\r\nCD\r\n--B--\r\n";
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
        // A transform that changes lengths leaves it as it is.
        let body = Body::Multipart {
            file,
            parts: Box::new(parts),
        };
        assert!(matches!(
            apply(body, HoldX::default(), false),
            Body::Multipart { .. }
        ));
    }
}
