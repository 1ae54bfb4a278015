//! FastCGI records (FastCGI 1.0 specification): encoding what we send to the
//! application (BEGIN_REQUEST, PARAMS, STDIN, ABORT_REQUEST) and decoding what
//! it answers (STDOUT, STDERR, END_REQUEST). Sans-IO: bytes in, records out.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 8;
/// Largest content one record carries.
pub const MAX_CONTENT: usize = 0xffff;

/// Record types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Type {
    BeginRequest = 1,
    AbortRequest = 2,
    EndRequest = 3,
    Params = 4,
    Stdin = 5,
    Stdout = 6,
    Stderr = 7,
    Data = 8,
    GetValues = 9,
    GetValuesResult = 10,
    /// FCGI_UNKNOWN_TYPE.
    Unknown = 11,
}

impl Type {
    fn from_u8(b: u8) -> Option<Type> {
        Some(match b {
            1 => Type::BeginRequest,
            2 => Type::AbortRequest,
            3 => Type::EndRequest,
            4 => Type::Params,
            5 => Type::Stdin,
            6 => Type::Stdout,
            7 => Type::Stderr,
            8 => Type::Data,
            9 => Type::GetValues,
            10 => Type::GetValuesResult,
            11 => Type::Unknown,
            _ => return None,
        })
    }
}

/// The responder role (the only one a web server uses).
const ROLE_RESPONDER: u16 = 1;
/// BEGIN_REQUEST flag: keep the connection open after the request.
const FLAG_KEEP_CONN: u8 = 1;

fn header(out: &mut BytesMut, t: Type, id: u16, len: usize) {
    debug_assert!(len <= MAX_CONTENT);
    // Pad the content to a multiple of 8, as the specification recommends.
    let pad = (8 - len % 8) % 8;
    out.put_u8(VERSION);
    out.put_u8(t as u8);
    out.put_u16(id);
    out.put_u16(len as u16);
    out.put_u8(pad as u8);
    out.put_u8(0);
}

fn padding(out: &mut BytesMut, len: usize) {
    out.put_bytes(0, (8 - len % 8) % 8);
}

/// BEGIN_REQUEST for the responder role.
pub fn begin_request(out: &mut BytesMut, id: u16, keep_conn: bool) {
    header(out, Type::BeginRequest, id, 8);
    out.put_u16(ROLE_RESPONDER);
    out.put_u8(if keep_conn { FLAG_KEEP_CONN } else { 0 });
    out.put_bytes(0, 5);
}

/// One stream's content (PARAMS or STDIN), split into records of at most
/// `MAX_CONTENT` bytes. An empty `data` writes the stream's end record.
pub fn stream(out: &mut BytesMut, t: Type, id: u16, mut data: &[u8]) {
    if data.is_empty() {
        header(out, t, id, 0);
        return;
    }
    while !data.is_empty() {
        let n = data.len().min(MAX_CONTENT);
        header(out, t, id, n);
        out.put_slice(&data[..n]);
        padding(out, n);
        data = &data[n..];
    }
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    if n < 128 {
        out.push(n as u8);
    } else {
        out.extend_from_slice(&((n as u32) | 0x8000_0000).to_be_bytes());
    }
}

/// Encodes name-value pairs for the PARAMS stream.
#[derive(Default, Debug)]
pub struct Params {
    buf: Vec<u8>,
}

impl Params {
    /// Room for `n` bytes of pairs without growing.
    pub fn with_capacity(n: usize) -> Params {
        Params {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
}

impl crate::upstream::params::Sink for Params {
    fn add(&mut self, name: &[u8], value: &[u8]) {
        put_len(&mut self.buf, name.len());
        put_len(&mut self.buf, value.len());
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(value);
    }
}

/// Decode name-value pairs (for tests and GET_VALUES_RESULT).
pub fn decode_params(mut b: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    fn len(b: &mut &[u8]) -> Option<usize> {
        let first = *b.first()?;
        if first < 128 {
            *b = &b[1..];
            Some(first as usize)
        } else {
            let v = u32::from_be_bytes(b.get(..4)?.try_into().ok()?) & 0x7fff_ffff;
            *b = &b[4..];
            Some(v as usize)
        }
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let (n, v) = (len(&mut b)?, len(&mut b)?);
        let name = b.get(..n)?.to_vec();
        let value = b.get(n..n + v)?.to_vec();
        b = &b[n + v..];
        out.push((name, value));
    }
    Some(out)
}

/// A record received from the application.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    Stdout(Bytes),
    Stderr(Bytes),
    /// END_REQUEST: application status and protocol status (0 = complete).
    End {
        app_status: u32,
        protocol_status: u8,
    },
    /// Any other type (management records): ignored by the caller.
    Other(Type),
}

/// Why a reply could not be decoded: the upstream is answered with 502.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Takes the records of one request off the front of a read buffer. STDOUT
/// content is handed out as it arrives, in pieces of what was read, so a
/// record (up to 64 KB) need not be whole in the buffer, nor the buffer have
/// room for one; other records come whole.
#[derive(Debug)]
pub struct Decoder {
    id: u16,
    /// Content bytes of the STDOUT record at hand still to come.
    content: usize,
    /// Then its padding bytes.
    pad: usize,
}

impl Decoder {
    pub fn new(id: u16) -> Decoder {
        Decoder {
            id,
            content: 0,
            pad: 0,
        }
    }

    /// The next record or piece of STDOUT; `Ok(None)` when more bytes are
    /// needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Record>, Malformed> {
        if self.content > 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            let n = self.content.min(buf.len());
            self.content -= n;
            return Ok(Some(Record::Stdout(buf.split_to(n).freeze())));
        }
        if self.pad > 0 {
            let n = self.pad.min(buf.len());
            buf.advance(n);
            self.pad -= n;
            if self.pad > 0 {
                return Ok(None);
            }
        }
        let Some((t, len, pad)) = self.header(buf)? else {
            return Ok(None);
        };
        if t == Type::Stdout && len > 0 {
            buf.advance(HEADER_LEN);
            (self.content, self.pad) = (len, pad);
            return self.decode(buf);
        }
        if buf.len() < HEADER_LEN + len + pad {
            return Ok(None);
        }
        buf.advance(HEADER_LEN);
        let content = buf.split_to(len).freeze();
        buf.advance(pad);
        Ok(Some(match t {
            Type::Stdout => Record::Stdout(content),
            Type::Stderr => Record::Stderr(content),
            Type::EndRequest => {
                if content.len() < 8 {
                    return Err(Malformed("upstream sent short FastCGI END_REQUEST"));
                }
                Record::End {
                    app_status: u32::from_be_bytes([
                        content[0], content[1], content[2], content[3],
                    ]),
                    protocol_status: content[4],
                }
            }
            other => Record::Other(other),
        }))
    }

    /// The header at the front of `buf` (type, content and padding
    /// lengths), checked; `None` while it is not whole.
    fn header(&self, buf: &[u8]) -> Result<Option<(Type, usize, usize)>, Malformed> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        if buf[0] != VERSION {
            return Err(Malformed(
                "upstream sent unsupported FastCGI protocol version",
            ));
        }
        let t =
            Type::from_u8(buf[1]).ok_or(Malformed("upstream sent invalid FastCGI record type"))?;
        // Management records carry request id 0; anything else must be ours.
        let rid = u16::from_be_bytes([buf[2], buf[3]]);
        if rid != self.id && rid != 0 {
            return Err(Malformed("upstream sent unexpected FastCGI request id"));
        }
        let len = u16::from_be_bytes([buf[4], buf[5]]) as usize;
        Ok(Some((t, len, buf[6] as usize)))
    }

    /// Bytes `buf` lacks for the next [`Decoder::decode`] to return
    /// something (at least 1): the rest of a header, or of a whole record
    /// other than STDOUT. A malformed header wants nothing more: 1.
    pub fn lacks(&self, buf: &[u8]) -> usize {
        if !self.at_boundary() {
            return 1;
        }
        let whole = match self.header(buf) {
            Ok(None) => HEADER_LEN,
            Ok(Some((Type::Stdout, len, _))) if len > 0 => HEADER_LEN + 1,
            Ok(Some((_, len, pad))) => HEADER_LEN + len + pad,
            Err(_) => 1,
        };
        whole.saturating_sub(buf.len()).max(1)
    }

    /// Between records: no STDOUT content or padding is still to come.
    pub fn at_boundary(&self) -> bool {
        self.content == 0 && self.pad == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::params::Sink;

    /// Build a record as an application would.
    fn app_record(t: Type, id: u16, content: &[u8], pad: u8) -> Vec<u8> {
        let mut v = vec![1, t as u8];
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        v.extend_from_slice(&[pad, 0]);
        v.extend_from_slice(content);
        v.extend(std::iter::repeat_n(0, pad as usize));
        v
    }

    #[test]
    fn begin_request_layout() {
        let mut b = BytesMut::new();
        begin_request(&mut b, 1, true);
        assert_eq!(&b[..], &[1, 1, 0, 1, 0, 8, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn params_round_trip_with_long_values() {
        let mut p = Params::default();
        p.add(b"SCRIPT_FILENAME", b"/srv/index.php");
        let long = vec![b'x'; 300];
        p.add(b"HTTP_COOKIE", &long);
        let back = decode_params(p.as_bytes()).unwrap();
        assert_eq!(
            back[0],
            (b"SCRIPT_FILENAME".to_vec(), b"/srv/index.php".to_vec())
        );
        assert_eq!(back[1].1.len(), 300);
        // 300 needs the 4-byte length form.
        assert_eq!(&p.as_bytes()[17 + 14..17 + 14 + 5], &[11, 0x80, 0, 1, 44]);
    }

    #[test]
    fn streams_split_pad_and_end() {
        let mut b = BytesMut::new();
        let data = vec![7u8; MAX_CONTENT + 10];
        stream(&mut b, Type::Stdin, 3, &data);
        stream(&mut b, Type::Stdin, 3, b"");
        // First record: full size, padding 1 to reach a multiple of 8.
        assert_eq!(&b[..8], &[1, 5, 0, 3, 0xff, 0xff, 1, 0]);
        let second = HEADER_LEN + MAX_CONTENT + 1;
        assert_eq!(&b[second..second + 8], &[1, 5, 0, 3, 0, 10, 6, 0]);
        let end = second + HEADER_LEN + 10 + 6;
        assert_eq!(&b[end..], &[1, 5, 0, 3, 0, 0, 0, 0]);
    }

    #[test]
    fn decodes_records_split_anywhere() {
        let mut wire = app_record(Type::Stdout, 1, b"Status: 200\r\n\r\nhi", 6);
        wire.extend(app_record(Type::Stderr, 1, b"warning", 1));
        wire.extend(app_record(
            Type::EndRequest,
            1,
            &[0, 0, 0, 5, 0, 0, 0, 0],
            0,
        ));
        for cut in 0..wire.len() {
            let mut dec = Decoder::new(1);
            let mut buf = BytesMut::from(&wire[..cut]);
            let mut got = Vec::new();
            while let Some(r) = dec.decode(&mut buf).unwrap() {
                got.push(r);
            }
            assert!(dec.lacks(&buf) >= 1);
            buf.extend_from_slice(&wire[cut..]);
            while let Some(r) = dec.decode(&mut buf).unwrap() {
                got.push(r);
            }
            // STDOUT comes in the pieces the cut made of it.
            let mut out = Vec::new();
            while let Some(Record::Stdout(b)) = got.first() {
                out.extend_from_slice(b);
                got.remove(0);
            }
            assert_eq!(out, b"Status: 200\r\n\r\nhi", "cut at {cut}");
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(got[0], Record::Stderr(Bytes::from_static(b"warning")));
            assert_eq!(
                got[1],
                Record::End {
                    app_status: 5,
                    protocol_status: 0
                }
            );
            assert!(buf.is_empty());
            assert!(dec.at_boundary());
        }
    }

    #[test]
    fn what_a_partial_record_lacks() {
        let dec = Decoder::new(1);
        let stderr = app_record(Type::Stderr, 1, b"warning", 1);
        assert_eq!(dec.lacks(&stderr[..3]), 5, "the header's rest");
        assert_eq!(
            dec.lacks(&stderr[..10]),
            stderr.len() - 10,
            "the whole record"
        );
        let stdout = app_record(Type::Stdout, 1, &[b'x'; 5000], 0);
        assert_eq!(dec.lacks(&stdout[..8]), 1, "any of STDOUT's content");
        let mut dec = Decoder::new(1);
        let mut buf = BytesMut::from(&stdout[..100]);
        assert_eq!(
            dec.decode(&mut buf).unwrap(),
            Some(Record::Stdout(Bytes::copy_from_slice(&[b'x'; 92])))
        );
        assert!(!dec.at_boundary());
        assert_eq!(dec.lacks(&buf), 1);
    }

    #[test]
    fn refuses_garbage() {
        let decode = |b: &[u8]| Decoder::new(1).decode(&mut BytesMut::from(b));
        assert!(decode(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
        let other = app_record(Type::Stdout, 9, b"x", 7);
        assert!(decode(&other).is_err(), "another request's record");
        assert!(
            decode(&[1u8, 42, 0, 1, 0, 0, 0, 0]).is_err(),
            "unknown type"
        );
        let short = app_record(Type::EndRequest, 1, &[0, 0], 6);
        assert!(decode(&short).is_err(), "short END_REQUEST");
    }
}
