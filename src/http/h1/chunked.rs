//! Strict, sans-IO decoder for the chunked transfer coding (RFC 9112 §7.1).
//!
//! Body data is handed out as zero-copy slices of the input buffer.
//! Chunk extensions are checked and ignored; trailers are checked and discarded.
//! Lines end with CRLF or, as in the request head and nginx, a bare LF; a bare
//! CR is refused.

use bytes::{Buf, Bytes, BytesMut};

use crate::core::message::head::ParseError;

/// Longest chunk-size line, extensions and CRLF included.
const MAX_SIZE_LINE: usize = 4096;
/// Most bytes of trailer section, final CRLF included.
const MAX_TRAILERS: usize = 8192;
/// Most hex digits in a chunk size (fits u64 exactly).
const MAX_SIZE_DIGITS: usize = 16;

const BAD: ParseError = ParseError::BAD_REQUEST;

/// One step of decoding.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk {
    /// Next piece of body data (may be part of a chunk).
    Data(Bytes),
    /// The buffer holds no complete next step; read more.
    NeedMore,
    /// The last chunk and trailers were consumed; the rest of the buffer is
    /// the next request.
    Done,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    /// Bytes of trailer section consumed so far.
    Trailers(usize),
    Done,
}

/// Decoder state for one chunked body.
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: State,
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// True once the last chunk and trailers have been consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consume from the front of `buf`; return the next piece of body data,
    /// NeedMore, or Done after the last-chunk and trailers.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Chunk, ParseError> {
        loop {
            match self.state {
                State::Size => match parse_size_line(buf)? {
                    None => return Ok(Chunk::NeedMore),
                    Some((size, used)) => {
                        buf.advance(used);
                        self.state = if size == 0 {
                            State::Trailers(0)
                        } else {
                            State::Data(size)
                        };
                    }
                },
                State::Data(remaining) => {
                    if buf.is_empty() {
                        return Ok(Chunk::NeedMore);
                    }
                    let n = remaining.min(buf.len() as u64);
                    let data = buf.split_to(n as usize).freeze();
                    self.state = if n == remaining {
                        State::DataEnd
                    } else {
                        State::Data(remaining - n)
                    };
                    return Ok(Chunk::Data(data));
                }
                State::DataEnd => match buf[..] {
                    [] | [b'\r'] => return Ok(Chunk::NeedMore),
                    [b'\r', b'\n', ..] | [b'\n', ..] => {
                        buf.advance(if buf[0] == b'\n' { 1 } else { 2 });
                        self.state = State::Size;
                    }
                    _ => return Err(BAD),
                },
                State::Trailers(total) => match buf[..] {
                    [] | [b'\r'] => return Ok(Chunk::NeedMore),
                    [b'\r', b'\n', ..] | [b'\n', ..] => {
                        let n = if buf[0] == b'\n' { 1 } else { 2 };
                        if total + n > MAX_TRAILERS {
                            return Err(BAD);
                        }
                        buf.advance(n);
                        self.state = State::Done;
                    }
                    [b'\r', ..] => return Err(BAD),
                    _ => match memchr::memchr(b'\n', buf) {
                        None => {
                            if total + buf.len() >= MAX_TRAILERS {
                                return Err(BAD);
                            }
                            return Ok(Chunk::NeedMore);
                        }
                        Some(lf) => {
                            let used = total + lf + 1;
                            if used > MAX_TRAILERS {
                                return Err(BAD);
                            }
                            check_trailer_line(line_before(buf, lf))?;
                            buf.advance(lf + 1);
                            self.state = State::Trailers(used);
                        }
                    },
                },
                State::Done => return Ok(Chunk::Done),
            }
        }
    }
}

/// The line that ends with the LF at `lf`, without its CR.
fn line_before(buf: &[u8], lf: usize) -> &[u8] {
    match lf.checked_sub(1) {
        Some(cr) if buf[cr] == b'\r' => &buf[..cr],
        _ => &buf[..lf],
    }
}

/// Parses "size [ext] CRLF" at the front of `buf`: Some((size, bytes used)),
/// or None if the line is not complete yet.
fn parse_size_line(buf: &[u8]) -> Result<Option<(u64, usize)>, ParseError> {
    let window = &buf[..buf.len().min(MAX_SIZE_LINE)];
    let Some(lf) = memchr::memchr(b'\n', window) else {
        if buf.len() >= MAX_SIZE_LINE {
            return Err(BAD);
        }
        check_partial_size_line(buf)?;
        return Ok(None);
    };
    let line = line_before(buf, lf);
    let digits = hex_digits(line)?;
    if digits == 0 {
        return Err(BAD);
    }
    let size = line[..digits]
        .iter()
        .fold(0u64, |n, &b| (n << 4) | u64::from(hex_value(b)));
    check_extensions(&line[digits..])?;
    Ok(Some((size, lf + 1)))
}

/// Rejects a not yet terminated size line that can never become valid.
fn check_partial_size_line(line: &[u8]) -> Result<(), ParseError> {
    let digits = hex_digits(line)?;
    let Some(&next) = line.get(digits) else {
        return Ok(());
    };
    if digits == 0 || !matches!(next, b'\r' | b';' | b' ' | b'\t') {
        return Err(BAD);
    }
    // No LF has arrived, so a CR followed by anything is a bare CR.
    match memchr::memchr(b'\r', line) {
        Some(cr) if cr + 1 < line.len() => Err(BAD),
        _ => Ok(()),
    }
}

/// Number of leading hex digits; more than 16 is an error.
fn hex_digits(line: &[u8]) -> Result<usize, ParseError> {
    let n = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if n > MAX_SIZE_DIGITS {
        return Err(BAD);
    }
    Ok(n)
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

/// chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )
fn check_extensions(mut s: &[u8]) -> Result<(), ParseError> {
    while !s.is_empty() {
        s = skip_bws(s);
        s = s.strip_prefix(b";").ok_or(BAD)?;
        s = skip_bws(s);
        let name = token_len(s);
        if name == 0 {
            return Err(BAD);
        }
        s = &s[name..];
        if let Some(v) = skip_bws(s).strip_prefix(b"=") {
            let v = skip_bws(v);
            let len = if v.first() == Some(&b'"') {
                quoted_len(v)?
            } else {
                token_len(v)
            };
            if len == 0 {
                return Err(BAD);
            }
            s = &v[len..];
        }
    }
    Ok(())
}

/// Length of the quoted-string at the front of `s` (which starts with '"').
fn quoted_len(s: &[u8]) -> Result<usize, ParseError> {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'"' => return Ok(i + 1),
            b'\\' => {
                match s.get(i + 1) {
                    Some(&c) if is_text(c) => {}
                    _ => return Err(BAD),
                }
                i += 2;
            }
            c if is_text(c) => i += 1,
            _ => return Err(BAD),
        }
    }
    Err(BAD)
}

/// A trailer field line (without CRLF): token ":" field-value.
fn check_trailer_line(line: &[u8]) -> Result<(), ParseError> {
    let name = token_len(line);
    if name == 0 || line.get(name) != Some(&b':') {
        return Err(BAD);
    }
    if line[name + 1..].iter().all(|&b| is_text(b)) {
        Ok(())
    } else {
        Err(BAD)
    }
}

fn skip_bws(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

fn token_len(s: &[u8]) -> usize {
    s.iter()
        .take_while(|&&b| crate::http::fields::is_tchar(b))
        .count()
}

/// HTAB, SP, VCHAR or obs-text.
fn is_text(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes all of `input` at once: (body, leftover) or the error.
    fn decode_all(input: &[u8]) -> Result<(Vec<u8>, Vec<u8>), ParseError> {
        let mut buf = BytesMut::from(input);
        let mut dec = ChunkedDecoder::new();
        let mut body = Vec::new();
        loop {
            match dec.decode(&mut buf)? {
                Chunk::Data(d) => body.extend_from_slice(&d),
                Chunk::NeedMore => panic!("incomplete: {:?}", String::from_utf8_lossy(input)),
                Chunk::Done => return Ok((body, buf.to_vec())),
            }
        }
    }

    /// Feeds `input` one byte at a time; (body, leftover) or the error.
    fn decode_bytewise(input: &[u8]) -> Result<(Vec<u8>, Vec<u8>), ParseError> {
        let mut buf = BytesMut::new();
        let mut dec = ChunkedDecoder::new();
        let mut body = Vec::new();
        for (i, &b) in input.iter().enumerate() {
            buf.extend_from_slice(&[b]);
            loop {
                match dec.decode(&mut buf)? {
                    Chunk::Data(d) => {
                        assert!(!d.is_empty());
                        body.extend_from_slice(&d);
                    }
                    Chunk::NeedMore => break,
                    Chunk::Done => {
                        let mut rest = buf.to_vec();
                        rest.extend_from_slice(&input[i + 1..]);
                        return Ok((body, rest));
                    }
                }
            }
        }
        panic!("incomplete: {:?}", String::from_utf8_lossy(input));
    }

    fn bad(input: &[u8]) {
        let mut buf = BytesMut::from(input);
        let mut dec = ChunkedDecoder::new();
        loop {
            match dec.decode(&mut buf) {
                Ok(Chunk::Data(_)) => {}
                Ok(other) => panic!(
                    "expected 400 for {:?}, got {:?}",
                    String::from_utf8_lossy(input),
                    other
                ),
                Err(e) => {
                    assert_eq!(e, ParseError::BAD_REQUEST);
                    break;
                }
            }
        }
        // Fed byte by byte the same input must fail too (not just stall).
        let mut buf = BytesMut::new();
        let mut dec = ChunkedDecoder::new();
        for &b in input {
            buf.extend_from_slice(&[b]);
            loop {
                match dec.decode(&mut buf) {
                    Ok(Chunk::Data(_)) => {}
                    Ok(Chunk::NeedMore) => break,
                    Ok(Chunk::Done) => {
                        panic!("done on bad input {:?}", String::from_utf8_lossy(input))
                    }
                    Err(e) => {
                        assert_eq!(e.status, 400);
                        return;
                    }
                }
            }
        }
        panic!(
            "bytewise: no error for {:?}",
            String::from_utf8_lossy(input)
        );
    }

    fn good(input: &[u8], body: &[u8], rest: &[u8]) {
        let all = decode_all(input).unwrap();
        assert_eq!(all.0, body);
        assert_eq!(all.1, rest);
        let one = decode_bytewise(input).unwrap();
        assert_eq!(one.0, body);
        assert_eq!(one.1, rest);
    }

    #[test]
    fn single_chunk() {
        let mut buf = BytesMut::from(&b"5\r\nhello\r\n0\r\n\r\n"[..]);
        let mut dec = ChunkedDecoder::new();
        assert_eq!(
            dec.decode(&mut buf).unwrap(),
            Chunk::Data(Bytes::from_static(b"hello"))
        );
        assert!(!dec.is_done());
        assert_eq!(dec.decode(&mut buf).unwrap(), Chunk::Done);
        assert!(dec.is_done());
        assert!(buf.is_empty());
        assert_eq!(dec.decode(&mut buf).unwrap(), Chunk::Done);
    }

    #[test]
    fn data_is_zero_copy() {
        let mut buf = BytesMut::from(&b"5\r\nhello\r\n0\r\n\r\n"[..]);
        let base = buf.as_ptr() as usize;
        let mut dec = ChunkedDecoder::new();
        match dec.decode(&mut buf).unwrap() {
            Chunk::Data(d) => assert_eq!(d.as_ptr() as usize, base + 3),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn multiple_chunks_and_leftover() {
        good(
            b"5\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\n\r\nGET / HTTP/1.1\r\n",
            b"hello 0123456789",
            b"GET / HTTP/1.1\r\n",
        );
        good(b"0\r\n\r\n", b"", b"");
        good(b"0\r\n\r\nX", b"", b"X");
    }

    #[test]
    fn hex_sizes() {
        good(b"a\r\n0123456789\r\n0\r\n\r\n", b"0123456789", b"");
        good(b"A\r\n0123456789\r\n0\r\n\r\n", b"0123456789", b"");
        good(b"0000000000000005\r\nhello\r\n0\r\n\r\n", b"hello", b"");
        good(b"000\r\n\r\n", b"", b"");
        let body = vec![b'x'; 0x1f];
        let mut input = b"1F\r\n".to_vec();
        input.extend_from_slice(&body);
        input.extend_from_slice(b"\r\n0\r\n\r\n");
        good(&input, &body, b"");
    }

    #[test]
    fn max_size_is_accepted() {
        let mut buf = BytesMut::from(&b"ffffffffffffffff\r\nabc"[..]);
        let mut dec = ChunkedDecoder::new();
        assert_eq!(
            dec.decode(&mut buf).unwrap(),
            Chunk::Data(Bytes::from_static(b"abc"))
        );
        assert_eq!(dec.decode(&mut buf).unwrap(), Chunk::NeedMore);
        assert_eq!(dec.state, State::Data(u64::MAX - 3));
    }

    #[test]
    fn partial_data_pieces() {
        let mut dec = ChunkedDecoder::new();
        let mut buf = BytesMut::from(&b"a\r\n01234"[..]);
        assert_eq!(
            dec.decode(&mut buf).unwrap(),
            Chunk::Data(Bytes::from_static(b"01234"))
        );
        assert_eq!(dec.decode(&mut buf).unwrap(), Chunk::NeedMore);
        buf.extend_from_slice(b"56789\r");
        assert_eq!(
            dec.decode(&mut buf).unwrap(),
            Chunk::Data(Bytes::from_static(b"56789"))
        );
        assert_eq!(dec.decode(&mut buf).unwrap(), Chunk::NeedMore);
        buf.extend_from_slice(b"\n0\r\n\r\n");
        assert_eq!(dec.decode(&mut buf).unwrap(), Chunk::Done);
    }

    #[test]
    fn extensions() {
        good(b"5;name=value\r\nhello\r\n0\r\n\r\n", b"hello", b"");
        good(b"5;a\r\nhello\r\n0;last\r\n\r\n", b"hello", b"");
        good(b"5 ; a = b ;c\r\nhello\r\n0\r\n\r\n", b"hello", b"");
        good(b"5;a=\"x y\\\"z;\"\r\nhello\r\n0\r\n\r\n", b"hello", b"");
        good(b"5;a=\"\"\r\nhello\r\n0\r\n\r\n", b"hello", b"");
        bad(b"5;\r\nhello\r\n0\r\n\r\n");
        bad(b"5;=v\r\nhello\r\n0\r\n\r\n");
        bad(b"5;a=\r\nhello\r\n0\r\n\r\n");
        bad(b"5;a=\"open\r\nhello\r\n0\r\n\r\n");
        bad(b"5;a=b c\r\nhello\r\n0\r\n\r\n");
        bad(b"5;a\x01\r\nhello\r\n0\r\n\r\n");
        bad(b"5;a;\r\nhello\r\n0\r\n\r\n");
        bad(b"5 \r\nhello\r\n0\r\n\r\n");
        bad(b"5;a \r\nhello\r\n0\r\n\r\n");
    }

    #[test]
    fn size_line_bound() {
        let mut line = b"5;a=".to_vec();
        line.extend(std::iter::repeat_n(b'v', MAX_SIZE_LINE - line.len() - 2));
        line.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
        good(&line, b"hello", b"");

        let mut line = b"5;a=".to_vec();
        line.extend(std::iter::repeat_n(b'v', MAX_SIZE_LINE - line.len() - 1));
        line.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
        bad(&line);

        // Without any line end yet.
        let mut line = b"5;a=".to_vec();
        line.extend(std::iter::repeat_n(b'v', MAX_SIZE_LINE));
        bad(&line);
    }

    #[test]
    fn trailers() {
        good(
            b"5\r\nhello\r\n0\r\nX-Sum: abc\r\nY:\r\n\r\nNEXT",
            b"hello",
            b"NEXT",
        );
        good(b"0\r\nX: a\tb\r\n\r\n", b"", b"");
        bad(b"0\r\nX-Sum abc\r\n\r\n");
        bad(b"0\r\n: abc\r\n\r\n");
        bad(b"0\r\nX : abc\r\n\r\n");
        bad(b"0\r\nX: a\r\n b\r\n\r\n");
        bad(b"0\r\nX: a\rb\r\n\r\n");
        bad(b"0\r\nX: a\x00b\r\n\r\n");
        bad(b"0\r\n\rX");
    }

    #[test]
    fn trailer_bound() {
        let mut ok_input = b"0\r\n".to_vec();
        let line = format!("X: {}\r\n", "v".repeat(95));
        assert_eq!(line.len(), 100);
        for _ in 0..81 {
            ok_input.extend_from_slice(line.as_bytes());
        }
        let mut last = b"Y: ".to_vec();
        last.extend(std::iter::repeat_n(b'z', MAX_TRAILERS - 8100 - 2 - 5));
        last.extend_from_slice(b"\r\n");
        ok_input.extend_from_slice(&last);
        ok_input.extend_from_slice(b"\r\n");
        assert_eq!(ok_input.len() - 3, MAX_TRAILERS);
        good(&ok_input, b"", b"");

        let mut too_big = b"0\r\n".to_vec();
        for _ in 0..82 {
            too_big.extend_from_slice(line.as_bytes());
        }
        too_big.extend_from_slice(b"\r\n");
        bad(&too_big);

        // One endless trailer line.
        let mut endless = b"0\r\nX: ".to_vec();
        endless.extend(std::iter::repeat_n(b'v', MAX_TRAILERS));
        bad(&endless);
    }

    #[test]
    fn invalid_sizes() {
        for size in [
            &b"0_2e"[..],
            b"-1",
            b"+1",
            b"0x10",
            b"",
            b" 5",
            b"\t5",
            b"g",
            b"5g",
            b"1ffffffffffffffff",
            b"00000000000000005",
            b"fffffffffffffffffffff",
        ] {
            let mut input = size.to_vec();
            input.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
            bad(&input);
        }
    }

    #[test]
    fn lines_end_with_crlf_or_a_bare_lf_never_a_bare_cr() {
        for input in [
            &b"5\nhello\n0\n\n"[..],
            b"5\r\nhello\n0\nX: y\n\r\n",
            b"5;a=b\nhello\r\n0\r\n\n",
        ] {
            let (body, rest) = decode_all(input).unwrap();
            assert_eq!(body, b"hello", "{:?}", String::from_utf8_lossy(input));
            assert!(rest.is_empty());
        }
        bad(b"5\rhello\r\n0\r\n\r\n");
        bad(b"5\r\nhelloX\r\n0\r\n\r\n");
        bad(b"5\r\nhello\r0\r\n\r\n");
        bad(b"5\r\nhello\r\n\r\n0\r\n\r\n");
        bad(b"5\r\nhello\r\n\n0\r\n\r\n");
        bad(b"5 \rx\nhello\r\n0\r\n\r\n");
    }
}
