//! Streaming encoders (gzip by flate2 over zlib-rs, brotli, zstd) behind one
//! interface, and the body streams that compress a file or another stream
//! piece by piece.

use super::Coding;
use crate::core::message::response::BodyStream;
use crate::core::message::response::read_file_at;
use crate::core::request::BoxFuture;
use brotli::enc::StandardAlloc;
use brotli::enc::encode::{
    BrotliEncoderOperation, BrotliEncoderParameter, BrotliEncoderStateStruct,
};
use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress, Status};
use std::fs::File;
use std::io;
use std::rc::Rc;
use zstd::zstd_safe::{self, CCtx, CParameter, InBuffer, OutBuffer};

/// Input read from a file per step.
const READ_CHUNK: usize = 64 * 1024;
/// Output room added at a time.
const OUT_ROOM: usize = 16 * 1024;
/// A stream step returns once it has this much output (or the input ended).
const PIECE: usize = 16 * 1024;
/// zstd's window for HTTP (RFC 9659: at most 8 MB).
const ZSTD_MAX_WINDOW_LOG: u32 = 23;

/// What to compress with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    pub coding: Coding,
    pub level: u8,
    /// brotli's log2 window (unused by the others).
    pub window: u8,
}

pub enum Encoder {
    Gzip(Box<Compress>),
    Br(Box<BrotliEncoderStateStruct<StandardAlloc>>),
    Zstd(CCtx<'static>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encoder::Gzip(_) => "Encoder::Gzip",
            Encoder::Br(_) => "Encoder::Br",
            Encoder::Zstd(_) => "Encoder::Zstd",
        })
    }
}

fn zstd_err(code: zstd_safe::ErrorCode) -> io::Error {
    io::Error::other(format!("zstd: {}", zstd_safe::get_error_name(code)))
}

fn ceil_log2(n: u64) -> u32 {
    64 - n.saturating_sub(1).leading_zeros()
}

impl Encoder {
    /// A fresh encoder; `size` is the input length when known, used to size
    /// the window (as nginx does for gzip and ngx_brotli for brotli) and
    /// pledged to zstd, which then must get exactly that many bytes.
    pub fn new(p: Params, size: Option<u64>) -> io::Result<Encoder> {
        Ok(match p.coding {
            Coding::Gzip => {
                let mut wbits = 15;
                if let Some(n) = size {
                    wbits = ceil_log2(n.max(1)).clamp(9, 15) as u8;
                }
                Encoder::Gzip(Box::new(Compress::new_gzip(
                    Compression::new(p.level.into()),
                    wbits,
                )))
            }
            Coding::Br => {
                let mut st = BrotliEncoderStateStruct::new(StandardAlloc::default());
                let mut lgwin = u32::from(p.window);
                if let Some(n) = size {
                    lgwin = lgwin.min(ceil_log2(n).max(10));
                    st.set_parameter(
                        BrotliEncoderParameter::BROTLI_PARAM_SIZE_HINT,
                        n.min(u32::MAX as u64) as u32,
                    );
                }
                st.set_parameter(BrotliEncoderParameter::BROTLI_PARAM_QUALITY, p.level.into());
                st.set_parameter(BrotliEncoderParameter::BROTLI_PARAM_LGWIN, lgwin);
                Encoder::Br(Box::new(st))
            }
            Coding::Zstd => {
                let mut cx =
                    CCtx::try_create().ok_or_else(|| io::Error::other("zstd: no context"))?;
                cx.set_parameter(CParameter::CompressionLevel(p.level.into()))
                    .map_err(zstd_err)?;
                if let Some(n) = size {
                    // zstd then sizes its window to the input.
                    cx.set_pledged_src_size(Some(n)).map_err(zstd_err)?;
                }
                // Levels up to 19 stay within 8 MB windows; the "ultra" ones
                // would go beyond.
                if p.level >= 20 {
                    cx.set_parameter(CParameter::WindowLog(ZSTD_MAX_WINDOW_LOG))
                        .map_err(zstd_err)?;
                }
                Encoder::Zstd(cx)
            }
        })
    }

    /// Compress `input`, appending whatever output is ready to `out`.
    pub fn write(&mut self, input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Encoder::Gzip(c) => {
                let mut input = input;
                while !input.is_empty() {
                    out.reserve(OUT_ROOM);
                    let before = c.total_in();
                    c.compress_vec(input, out, FlushCompress::None)
                        .map_err(io::Error::other)?;
                    input = &input[(c.total_in() - before) as usize..];
                }
                Ok(())
            }
            Encoder::Br(st) => brotli_run(
                st,
                BrotliEncoderOperation::BROTLI_OPERATION_PROCESS,
                input,
                out,
            ),
            Encoder::Zstd(cx) => {
                let mut inb = InBuffer::around(input);
                while inb.pos < input.len() {
                    out.reserve(OUT_ROOM);
                    let at = out.len();
                    let mut ob = OutBuffer::around_pos(out, at);
                    cx.compress_stream2(&mut ob, &mut inb, zstd_sys_continue())
                        .map_err(zstd_err)?;
                }
                Ok(())
            }
        }
    }

    /// Hand out everything compressed so far, the stream staying open (a
    /// sync flush: the client can decode all the input given until now).
    pub fn flush(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Encoder::Gzip(c) => loop {
                out.reserve(OUT_ROOM);
                c.compress_vec(&[], out, FlushCompress::Sync)
                    .map_err(io::Error::other)?;
                // Room left over: the flush is complete.
                if out.len() < out.capacity() {
                    return Ok(());
                }
            },
            Encoder::Br(st) => {
                brotli_run(st, BrotliEncoderOperation::BROTLI_OPERATION_FLUSH, &[], out)
            }
            Encoder::Zstd(cx) => zstd_drain(cx, out, zstd_sys_flush()),
        }
    }

    /// End the stream: the rest of the output and the trailer.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        match self {
            Encoder::Gzip(c) => loop {
                out.reserve(OUT_ROOM);
                match c
                    .compress_vec(&[], out, FlushCompress::Finish)
                    .map_err(io::Error::other)?
                {
                    Status::StreamEnd => return Ok(()),
                    Status::Ok | Status::BufError => {}
                }
            },
            Encoder::Br(st) => brotli_run(
                st,
                BrotliEncoderOperation::BROTLI_OPERATION_FINISH,
                &[],
                out,
            ),
            Encoder::Zstd(cx) => zstd_drain(cx, out, zstd_sys_end()),
        }
    }
}

/// Run zstd with no more input until `op` (flush or end) is complete.
fn zstd_drain(
    cx: &mut CCtx<'static>,
    out: &mut Vec<u8>,
    op: zstd_safe::zstd_sys::ZSTD_EndDirective,
) -> io::Result<()> {
    loop {
        out.reserve(OUT_ROOM);
        let at = out.len();
        let mut ob = OutBuffer::around_pos(out, at);
        let mut inb = InBuffer::around(&[]);
        let left = cx
            .compress_stream2(&mut ob, &mut inb, op)
            .map_err(zstd_err)?;
        if left == 0 {
            return Ok(());
        }
    }
}

fn zstd_sys_continue() -> zstd_safe::zstd_sys::ZSTD_EndDirective {
    zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_continue
}

fn zstd_sys_flush() -> zstd_safe::zstd_sys::ZSTD_EndDirective {
    zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush
}

fn zstd_sys_end() -> zstd_safe::zstd_sys::ZSTD_EndDirective {
    zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end
}

fn brotli_run(
    st: &mut BrotliEncoderStateStruct<StandardAlloc>,
    op: BrotliEncoderOperation,
    input: &[u8],
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let mut nop = |_: &mut brotli::interface::PredictionModeContextMap<
        brotli::interface::InputReferenceMut,
    >,
                   _: &mut [brotli::interface::StaticCommand],
                   _: brotli::interface::InputPair,
                   _: &mut StandardAlloc| ();
    let mut avail_in = input.len();
    let mut in_off = 0;
    loop {
        let at = out.len();
        out.resize(at + OUT_ROOM, 0);
        let mut avail_out = OUT_ROOM;
        let mut out_off = at;
        let ok = st.compress_stream(
            op,
            &mut avail_in,
            input,
            &mut in_off,
            &mut avail_out,
            out,
            &mut out_off,
            &mut None,
            &mut nop,
        );
        out.truncate(out_off);
        if !ok {
            return Err(io::Error::other("brotli: encoder failed"));
        }
        let done = match op {
            BrotliEncoderOperation::BROTLI_OPERATION_FINISH => st.is_finished(),
            _ => avail_in == 0 && !st.has_more_output(),
        };
        if done {
            return Ok(());
        }
    }
}

/// Compress all of `input` at once.
pub fn compress_all(p: Params, input: &[u8]) -> io::Result<Vec<u8>> {
    let mut e = Encoder::new(p, Some(input.len() as u64))?;
    let mut out = Vec::with_capacity(input.len() / 3 + 64);
    e.write(input, &mut out)?;
    e.finish(&mut out)?;
    Ok(out)
}

/// A byte range of a file, compressed as it is read.
#[derive(Debug)]
pub struct FileStream {
    file: Rc<File>,
    off: u64,
    end: u64,
    enc: Encoder,
    buf: Vec<u8>,
    done: bool,
}

impl FileStream {
    pub fn new(file: Rc<File>, range: std::ops::Range<u64>, enc: Encoder) -> Self {
        FileStream {
            file,
            off: range.start,
            end: range.end,
            enc,
            buf: Vec::new(),
            done: false,
        }
    }

    fn step(&mut self) -> io::Result<Option<Bytes>> {
        if self.done {
            return Ok(None);
        }
        if self.buf.is_empty() {
            self.buf = vec![0; READ_CHUNK];
        }
        let mut out = Vec::with_capacity(PIECE + OUT_ROOM);
        // Highly compressible input yields little output per read: bound the
        // input one step takes too, so a step never runs long.
        let mut budget = 16 * READ_CHUNK;
        while out.len() < PIECE && budget > 0 {
            if self.off >= self.end {
                self.enc.finish(&mut out)?;
                self.done = true;
                break;
            }
            let want = ((self.end - self.off) as usize).min(READ_CHUNK);
            let n = read_file_at(&self.file, &mut self.buf[..want], self.off)?;
            self.off += n as u64;
            budget = budget.saturating_sub(n);
            self.enc.write(&self.buf[..n], &mut out)?;
        }
        Ok(Some(Bytes::from(out)))
    }
}

impl BodyStream for FileStream {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(std::future::ready(self.step()))
    }
}

/// Another body stream (FastCGI, proxy), compressed piece by piece.
#[derive(Debug)]
pub struct WrapStream {
    inner: Box<dyn BodyStream>,
    enc: Encoder,
    /// The inner stream is unbuffered: flush before waiting for it.
    flush: bool,
    /// Input given to the encoder since its last flush.
    unflushed: bool,
    done: bool,
}

impl WrapStream {
    pub fn new(inner: Box<dyn BodyStream>, enc: Encoder) -> Self {
        WrapStream {
            flush: inner.unbuffered(),
            inner,
            enc,
            unflushed: false,
            done: false,
        }
    }
}

impl BodyStream for WrapStream {
    fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
        Box::pin(async move {
            if self.done {
                return Ok(None);
            }
            let mut out = Vec::new();
            loop {
                // Pieces at hand are compressed together; before waiting for
                // the next one, hand on what the encoder gave (everything it
                // holds, when the stream is unbuffered).
                let piece = match self.inner.ready() {
                    Some(p) => p?,
                    None => {
                        if self.flush && self.unflushed {
                            self.enc.flush(&mut out)?;
                            self.unflushed = false;
                        }
                        if !out.is_empty() {
                            return Ok(Some(Bytes::from(out)));
                        }
                        self.inner.next().await?
                    }
                };
                match piece {
                    Some(piece) => {
                        self.enc.write(&piece, &mut out)?;
                        self.unflushed = true;
                        if out.len() >= PIECE {
                            return Ok(Some(Bytes::from(out)));
                        }
                    }
                    None => {
                        self.enc.finish(&mut out)?;
                        self.done = true;
                        return Ok(Some(Bytes::from(out)));
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    pub fn decode(c: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match c {
            Coding::Gzip => {
                flate2::read::GzDecoder::new(data)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Br => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .unwrap();
            }
            Coding::Zstd => out = zstd::decode_all(data).unwrap(),
        }
        out
    }

    fn sample(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let mut x: u32 = 12345;
        while v.len() < n {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            let word = ["alpha ", "beta ", "gamma ", "delta\n", "{x:1}, "][(x >> 16) as usize % 5];
            v.extend_from_slice(word.as_bytes());
            if x.is_multiple_of(7) {
                v.push((x >> 8) as u8);
            }
        }
        v.truncate(n);
        v
    }

    fn params(coding: Coding) -> Params {
        Params {
            coding,
            level: match coding {
                Coding::Gzip => 5,
                Coding::Br => 5,
                Coding::Zstd => 3,
            },
            window: 19,
        }
    }

    #[test]
    fn round_trip_at_once_and_streamed() {
        for c in Coding::ALL {
            for n in [0, 1, 100, 70_000, 300_000] {
                let data = sample(n);
                let z = compress_all(params(c), &data).unwrap();
                assert_eq!(decode(c, &z), data, "{c:?} {n} at once");
                if n > 1000 {
                    assert!(z.len() < n / 2, "{c:?} compresses");
                }
                // Streamed in odd pieces, length unknown.
                let mut e = Encoder::new(params(c), None).unwrap();
                let mut out = Vec::new();
                for piece in data.chunks(7777) {
                    e.write(piece, &mut out).unwrap();
                }
                e.finish(&mut out).unwrap();
                assert_eq!(decode(c, &out), data, "{c:?} {n} streamed");
            }
        }
    }

    #[test]
    fn every_level() {
        let data = sample(50_000);
        for (c, levels) in [
            (Coding::Gzip, 1..=9),
            (Coding::Br, 0..=11),
            (Coding::Zstd, 1..=22),
        ] {
            for level in levels {
                let p = Params {
                    coding: c,
                    level,
                    window: 22,
                };
                let z = compress_all(p, &data).unwrap();
                assert_eq!(decode(c, &z), data, "{c:?} level {level}");
            }
        }
    }

    /// The window a zstd frame header announces.
    fn zstd_window(frame: &[u8]) -> u64 {
        let fhd = frame[4];
        let single = fhd & 0x20 != 0;
        if single {
            return 0; // the content size is the window
        }
        let wd = frame[5];
        let base = 1u64 << (10 + (wd >> 3));
        base + base / 8 * u64::from(wd & 7)
    }

    #[test]
    fn zstd_windows_stay_within_8_mb() {
        for level in [1, 3, 9, 19, 20, 22] {
            let p = Params {
                coding: Coding::Zstd,
                level,
                window: 0,
            };
            let mut e = Encoder::new(p, None).unwrap();
            let mut out = Vec::new();
            e.write(b"hello hello hello", &mut out).unwrap();
            e.finish(&mut out).unwrap();
            let w = zstd_window(&out);
            assert!(w > 0 && w <= 8 << 20, "level {level}: window {w}");
            assert_eq!(decode(Coding::Zstd, &out), b"hello hello hello");
        }
    }

    #[derive(Debug)]
    struct Pieces(std::collections::VecDeque<Bytes>);

    impl BodyStream for Pieces {
        fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
            Box::pin(std::future::ready(Ok(self.0.pop_front())))
        }
    }

    fn drain(s: &mut dyn BodyStream) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut all = Vec::new();
            while let Some(p) = s.next().await.unwrap() {
                all.extend_from_slice(&p);
            }
            all
        })
    }

    #[test]
    fn streams_round_trip() {
        let data = sample(400_000);
        let path = std::env::temp_dir().join(format!("vireo-enc-{}", std::process::id()));
        std::fs::write(&path, &data).unwrap();
        let file = Rc::new(File::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        for c in Coding::ALL {
            let len = data.len() as u64;
            let enc = Encoder::new(params(c), Some(len)).unwrap();
            let mut s = FileStream::new(file.clone(), 0..len, enc);
            assert_eq!(decode(c, &drain(&mut s)), data, "{c:?} file");
            // A sub-range.
            let enc = Encoder::new(params(c), Some(1000)).unwrap();
            let mut s = FileStream::new(file.clone(), 5000..6000, enc);
            assert_eq!(decode(c, &drain(&mut s)), &data[5000..6000], "{c:?} range");
            let pieces = data.chunks(3000).map(Bytes::copy_from_slice).collect();
            let enc = Encoder::new(params(c), None).unwrap();
            let mut s = WrapStream::new(Box::new(Pieces(pieces)), enc);
            assert_eq!(decode(c, &drain(&mut s)), data, "{c:?} wrapped");
            let enc = Encoder::new(params(c), None).unwrap();
            let mut s = WrapStream::new(Box::new(Pieces(Default::default())), enc);
            assert_eq!(decode(c, &drain(&mut s)), b"", "{c:?} empty wrapped");
        }
    }

    /// A stream whose every piece must be waited for, marked unbuffered.
    #[derive(Debug)]
    struct Unbuffered(Pieces);

    impl BodyStream for Unbuffered {
        fn next(&mut self) -> BoxFuture<'_, io::Result<Option<Bytes>>> {
            self.0.next()
        }
        fn unbuffered(&self) -> bool {
            true
        }
    }

    /// Collects what a decoder writes, readable while the decoder lives.
    struct Sink(Rc<std::cell::RefCell<Vec<u8>>>);

    impl io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn unbuffered_streams_are_flushed_piece_by_piece() {
        use std::io::Write;
        let data = sample(100_000);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for c in Coding::ALL {
            let decoded = Rc::new(std::cell::RefCell::new(Vec::new()));
            let sink = Sink(decoded.clone());
            let mut dec: Box<dyn Write> = match c {
                Coding::Gzip => Box::new(flate2::write::GzDecoder::new(sink)),
                // (Its output buffer must hold a piece: a flush hands on one buffer.)
                Coding::Br => Box::new(brotli::DecompressorWriter::new(sink, 1 << 16)),
                Coding::Zstd => Box::new(zstd::stream::write::Decoder::new(sink).unwrap()),
            };
            let pieces = data.chunks(5000).map(Bytes::copy_from_slice).collect();
            let enc = Encoder::new(params(c), None).unwrap();
            let mut s = WrapStream::new(Box::new(Unbuffered(Pieces(pieces))), enc);
            let mut wire = 0;
            for n in 1..=20 {
                // Each piece out decodes to all the input so far.
                let out = rt.block_on(s.next()).unwrap().unwrap();
                wire += out.len();
                dec.write_all(&out).unwrap();
                dec.flush().unwrap();
                let got = decoded.borrow().len();
                assert_eq!(got, n * 5000, "{c:?} piece {n}");
                assert_eq!(*decoded.borrow(), &data[..n * 5000], "{c:?} piece {n}");
            }
            let end = rt.block_on(s.next()).unwrap().unwrap();
            dec.write_all(&end).unwrap();
            drop(dec);
            assert_eq!(*decoded.borrow(), data, "{c:?}");
            assert!(rt.block_on(s.next()).unwrap().is_none());
            assert!(wire < data.len() / 2, "{c:?} still compresses: {wire} B");
        }
    }

    #[test]
    fn shrinking_file_is_an_error() {
        let path = std::env::temp_dir().join(format!("vireo-enc-short-{}", std::process::id()));
        std::fs::write(&path, b"short").unwrap();
        let file = Rc::new(File::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        let enc = Encoder::new(params(Coding::Gzip), None).unwrap();
        let mut s = FileStream::new(file, 0..100, enc);
        assert!(s.step().is_err());
    }
}
