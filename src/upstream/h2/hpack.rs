//! HPACK (RFC 7541) as vireo's HTTP/2 client uses it, the way nginx's
//! upstream modules do: request fields are written as literals that are not
//! indexed (a name from the static table by its index), never Huffman-coded;
//! replies are decoded with a dynamic table of size 0, which the client's
//! SETTINGS announce, so every field a peer sends is in the block itself or
//! in the static table.

/// Why a header block could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// The block ends inside a representation.
    Truncated,
    /// An integer past what any field can be.
    Overflow,
    /// An index into the static table past its end, or into the dynamic
    /// table, which is always empty.
    Index(usize),
    /// A dynamic table size update above 0.
    TableSize(usize),
    /// A Huffman-coded string that is not one (EOS in it, bad padding).
    Huffman,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Truncated => f.write_str("truncated header block"),
            Error::Overflow => f.write_str("integer overflow in header block"),
            Error::Index(i) => write!(f, "invalid header index {i}"),
            Error::TableSize(n) => write!(f, "dynamic table size {n} over 0"),
            Error::Huffman => f.write_str("invalid Huffman code"),
        }
    }
}

/// The static table (RFC 7541 Appendix A), from index 1.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static table's first index of `name` (lowercase), if it has it.
fn static_name(name: &[u8]) -> Option<usize> {
    Some(match name {
        b":authority" => 1,
        b":method" => 2,
        b":path" => 4,
        b":scheme" => 6,
        b":status" => 8,
        b"accept-charset" => 15,
        b"accept-encoding" => 16,
        b"accept-language" => 17,
        b"accept-ranges" => 18,
        b"accept" => 19,
        b"access-control-allow-origin" => 20,
        b"age" => 21,
        b"allow" => 22,
        b"authorization" => 23,
        b"cache-control" => 24,
        b"content-disposition" => 25,
        b"content-encoding" => 26,
        b"content-language" => 27,
        b"content-length" => 28,
        b"content-location" => 29,
        b"content-range" => 30,
        b"content-type" => 31,
        b"cookie" => 32,
        b"date" => 33,
        b"etag" => 34,
        b"expect" => 35,
        b"expires" => 36,
        b"from" => 37,
        b"host" => 38,
        b"if-match" => 39,
        b"if-modified-since" => 40,
        b"if-none-match" => 41,
        b"if-range" => 42,
        b"if-unmodified-since" => 43,
        b"last-modified" => 44,
        b"link" => 45,
        b"location" => 46,
        b"max-forwards" => 47,
        b"proxy-authenticate" => 48,
        b"proxy-authorization" => 49,
        b"range" => 50,
        b"referer" => 51,
        b"refresh" => 52,
        b"retry-after" => 53,
        b"server" => 54,
        b"set-cookie" => 55,
        b"strict-transport-security" => 56,
        b"transfer-encoding" => 57,
        b"user-agent" => 58,
        b"vary" => 59,
        b"via" => 60,
        b"www-authenticate" => 61,
        _ => return None,
    })
}

/// Write `value` as an HPACK integer with an `n`-bit prefix, the prefix's
/// other bits `flags`.
fn integer(out: &mut Vec<u8>, flags: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

fn string(out: &mut Vec<u8>, s: &[u8]) {
    integer(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Append the field `name: value` (`name` lowercase) as a literal without
/// indexing; a name the static table has goes by its index.
pub fn encode(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    match static_name(name) {
        Some(i) => integer(out, 0, 4, i),
        None => {
            out.push(0);
            string(out, name);
        }
    }
    string(out, value);
}

/// Append `:method`, the first field of a request: GET and POST by their
/// static table entries.
pub fn encode_method(out: &mut Vec<u8>, method: &[u8]) {
    match method {
        b"GET" => out.push(0x82),
        b"POST" => out.push(0x83),
        _ => encode(out, b":method", method),
    }
}

/// Read an integer with an `n`-bit prefix at the start of `b`: the value
/// and the bytes it took.
fn read_integer(b: &[u8], n: u32) -> Result<(usize, usize), Error> {
    let max = (1usize << n) - 1;
    let first = *b.first().ok_or(Error::Truncated)? as usize & max;
    if first < max {
        return Ok((first, 1));
    }
    let mut value = max;
    let mut shift = 0;
    for (i, &byte) in b[1..].iter().enumerate() {
        // Fields are bounded far below 2^28: more is not a field.
        if shift > 21 {
            return Err(Error::Overflow);
        }
        value += ((byte & 0x7f) as usize) << shift;
        if byte & 0x80 == 0 {
            return Ok((value, i + 2));
        }
        shift += 7;
    }
    Err(Error::Truncated)
}

/// Where a decoded string is: in the block, or Huffman-decoded into the
/// output buffer.
enum Str {
    Block(usize, usize),
    Decoded(usize, usize),
}

/// A header block's fields as byte ranges of one buffer.
#[derive(Debug, Default)]
pub struct Fields {
    /// The decoded names and values, one after the other.
    pub text: Vec<u8>,
    /// Each field's name and value in `text`.
    pub spans: Vec<((u32, u32), (u32, u32))>,
}

impl Fields {
    /// Room for the fields of a block of `n` bytes (Huffman coding makes
    /// them up to 8/5 as long).
    pub fn with_capacity(n: usize) -> Fields {
        Fields {
            text: Vec::with_capacity(n * 8 / 5 + 16),
            spans: Vec::with_capacity(8),
        }
    }

    /// The fields in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + Clone {
        self.spans.iter().map(|&((a, b), (c, d))| {
            (
                &self.text[a as usize..b as usize],
                &self.text[c as usize..d as usize],
            )
        })
    }

    fn push(&mut self, name: &[u8], value: &[u8]) {
        let a = self.text.len() as u32;
        self.text.extend_from_slice(name);
        let b = self.text.len() as u32;
        self.text.extend_from_slice(value);
        self.spans.push(((a, b), (b, self.text.len() as u32)));
    }
}

/// Decode the header block `b` (HEADERS and CONTINUATION payloads joined)
/// into `out`, after what it holds.
pub fn decode(b: &[u8], out: &mut Fields) -> Result<(), Error> {
    let mut scratch = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let first = b[at];
        if first & 0x80 != 0 {
            // Indexed field.
            let (i, n) = read_integer(&b[at..], 7)?;
            at += n;
            let (name, value) = entry(i)?;
            out.push(name.as_bytes(), value.as_bytes());
            continue;
        }
        if first & 0xe0 == 0x20 {
            // Dynamic table size update: only to 0, the size announced.
            let (size, n) = read_integer(&b[at..], 5)?;
            if size > 0 {
                return Err(Error::TableSize(size));
            }
            at += n;
            continue;
        }
        // A literal: with incremental indexing (6-bit prefix; a table of
        // size 0 keeps nothing), without, or never indexed (4-bit).
        let prefix = if first & 0xc0 == 0x40 { 6 } else { 4 };
        let (i, n) = read_integer(&b[at..], prefix)?;
        at += n;
        scratch.clear();
        let name = match i {
            0 => {
                let (s, n) = read_string(&b[at..], &mut scratch)?;
                let s = shift(s, at);
                at += n;
                Some(s)
            }
            i => {
                entry(i)?;
                None
            }
        };
        let (value, n) = read_string(&b[at..], &mut scratch)?;
        let value = shift(value, at);
        at += n;
        let slice = |s: &Str| match *s {
            Str::Block(x, y) => &b[x..y],
            Str::Decoded(x, y) => &scratch[x..y],
        };
        let name = match &name {
            Some(s) => slice(s),
            None => entry(i)?.0.as_bytes(),
        };
        out.push(name, slice(&value));
    }
    Ok(())
}

/// A string read from `b[at..]`, placed in the block.
fn shift(s: Str, at: usize) -> Str {
    match s {
        Str::Block(x, y) => Str::Block(x + at, y + at),
        d => d,
    }
}

fn entry(i: usize) -> Result<(&'static str, &'static str), Error> {
    match i {
        1..=61 => Ok(STATIC[i - 1]),
        _ => Err(Error::Index(i)),
    }
}

/// A string at the start of `b` (its place relative to `b`, or in
/// `scratch` when Huffman-coded) and the bytes it took.
fn read_string(b: &[u8], scratch: &mut Vec<u8>) -> Result<(Str, usize), Error> {
    let huffman = b.first().ok_or(Error::Truncated)? & 0x80 != 0;
    let (len, n) = read_integer(b, 7)?;
    let end = n.checked_add(len).ok_or(Error::Overflow)?;
    let raw = b.get(n..end).ok_or(Error::Truncated)?;
    if !huffman {
        return Ok((Str::Block(n, end), end));
    }
    let start = scratch.len();
    huffman_decode(raw, scratch)?;
    Ok((Str::Decoded(start, scratch.len()), end))
}

/// The bit length of each symbol's code (RFC 7541 Appendix B), 256 being
/// EOS. The code is canonical: codes of one length are consecutive in
/// symbol order, each length's first the one after the previous length's
/// last, shifted.
const LENGTHS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, //
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, //
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, //
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, //
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, //
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, //
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, //
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, //
    30,
];

const MIN_LEN: usize = 5;
const MAX_LEN: usize = 30;

/// The canonical code's decoding tables: for each length, the first code
/// past its codes (`LIMIT`), its first code (`FIRST`), and where its
/// symbols start in `SYMBOLS` (symbols by length, then value).
struct Canonical {
    limit: [u32; MAX_LEN + 1],
    first: [u32; MAX_LEN + 1],
    start: [u16; MAX_LEN + 1],
    symbols: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut count = [0u16; MAX_LEN + 1];
    let mut s = 0;
    while s < 257 {
        count[LENGTHS[s] as usize] += 1;
        s += 1;
    }
    let mut c = Canonical {
        limit: [0; MAX_LEN + 1],
        first: [0; MAX_LEN + 1],
        start: [0; MAX_LEN + 1],
        symbols: [0; 257],
    };
    let (mut code, mut at) = (0u32, 0u16);
    let mut len = 1;
    while len <= MAX_LEN {
        c.first[len] = code;
        c.start[len] = at;
        c.limit[len] = code + count[len] as u32;
        // The symbols of this length, in order.
        let mut s = 0;
        while s < 257 {
            if LENGTHS[s] as usize == len {
                c.symbols[at as usize] = s as u16;
                at += 1;
            }
            s += 1;
        }
        code = (code + count[len] as u32) << 1;
        len += 1;
    }
    c
}

static CODE: Canonical = canonical();

/// Append the Huffman-coded string `b`, decoded, to `out`.
fn huffman_decode(b: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
    // Bits waiting, at the top of `acc`; `n` of them.
    let (mut acc, mut n) = (0u64, 0u32);
    let mut bytes = b.iter();
    loop {
        while n <= 56 {
            match bytes.next() {
                Some(&byte) => {
                    acc |= (byte as u64) << (56 - n);
                    n += 8;
                }
                None => break,
            }
        }
        if n == 0 {
            return Ok(());
        }
        let mut len = MIN_LEN;
        let sym = loop {
            if len > MAX_LEN || len > n as usize {
                // The rest is padding: the start of EOS (all ones). RFC
                // 7541 allows at most 7 bits of it; more, as some encoders
                // write when a string ends on a byte, is taken, as nginx does.
                let rest = (acc >> (64 - n)) as u32;
                if n < 30 && rest == (1 << n) - 1 {
                    return Ok(());
                }
                return Err(Error::Huffman);
            }
            let code = (acc >> (64 - len)) as u32;
            if code < CODE.limit[len] {
                break CODE.symbols[(CODE.start[len] + (code - CODE.first[len]) as u16) as usize];
            }
            len += 1;
        };
        if sym == 256 {
            return Err(Error::Huffman);
        }
        out.push(sym as u8);
        acc <<= len;
        n -= len as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical code of `sym`, rebuilt from the tables.
    fn code_of(sym: usize) -> (u32, usize) {
        let len = LENGTHS[sym] as usize;
        let i = CODE.symbols[CODE.start[len] as usize..]
            .iter()
            .position(|&s| s as usize == sym)
            .unwrap();
        (CODE.first[len] + i as u32, len)
    }

    fn huffman_encode(s: &[u8]) -> Vec<u8> {
        let (mut acc, mut n, mut out) = (0u64, 0u32, Vec::new());
        for &c in s {
            let (code, len) = code_of(c as usize);
            acc = (acc << len) | code as u64;
            n += len as u32;
            while n >= 8 {
                out.push((acc >> (n - 8)) as u8);
                n -= 8;
            }
        }
        if n > 0 {
            out.push(((acc << (8 - n)) as u8) | ((1u8 << (8 - n)) - 1));
        }
        out
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn huffman_codes_of_the_rfc_examples() {
        // RFC 7541 C.4 and C.6.
        for (text, code) in [
            ("www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),
            ("no-cache", "a8eb10649cbf"),
            ("custom-key", "25a849e95ba97d7f"),
            ("custom-value", "25a849e95bb8e8b4bf"),
            ("302", "6402"),
            ("private", "aec3771a4b"),
        ] {
            assert_eq!(huffman_encode(text.as_bytes()), hex(code), "{text}");
            let mut out = Vec::new();
            huffman_decode(&hex(code), &mut out).unwrap();
            assert_eq!(out, text.as_bytes());
        }
    }

    #[test]
    fn every_byte_round_trips_through_huffman() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let mut out = Vec::new();
        huffman_decode(&huffman_encode(&all), &mut out).unwrap();
        assert_eq!(out, all);
    }

    #[test]
    fn bad_huffman_padding_and_eos_are_refused() {
        let mut out = Vec::new();
        // "0" is 00000: padded with zeros instead of ones.
        assert_eq!(huffman_decode(&[0x00], &mut out), Err(Error::Huffman));
        // A whole byte of padding is taken; padding with a zero in it not.
        let mut s = huffman_encode(b"a");
        s.push(0xff);
        out.clear();
        assert_eq!(huffman_decode(&s, &mut out), Ok(()));
        assert_eq!(out, b"a");
        s.push(0xfe);
        assert_eq!(huffman_decode(&s, &mut out), Err(Error::Huffman));
        // EOS (30 ones).
        assert_eq!(
            huffman_decode(&[0xff, 0xff, 0xff, 0xfc], &mut out),
            Err(Error::Huffman)
        );
    }

    #[test]
    fn requests_encode_and_replies_decode() {
        let mut b = Vec::new();
        encode_method(&mut b, b"POST");
        encode(&mut b, b":path", b"/helloworld.Greeter/SayHello");
        encode(&mut b, b"content-type", b"application/grpc");
        encode(&mut b, b"x-long", &[b'v'; 300]);
        let mut f = Fields::default();
        decode(&b, &mut f).unwrap();
        let got: Vec<_> = f.iter().collect();
        assert_eq!(got[0], (&b":method"[..], &b"POST"[..]));
        assert_eq!(got[1].1, b"/helloworld.Greeter/SayHello");
        assert_eq!(got[2], (&b"content-type"[..], &b"application/grpc"[..]));
        assert_eq!(got[3].0, b"x-long");
        assert_eq!(got[3].1.len(), 300);

        // RFC 7541 C.6.1: a reply with Huffman-coded literals indexed
        // incrementally (kept by no table of size 0).
        let block = hex(
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
        );
        let mut f = Fields::default();
        decode(&block, &mut f).unwrap();
        let got: Vec<_> = f
            .iter()
            .map(|(n, v)| (String::from_utf8_lossy(n), String::from_utf8_lossy(v)))
            .collect();
        let want = [
            (":status", "302"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("location", "https://www.example.com"),
        ];
        assert_eq!(got.len(), want.len());
        for ((n, v), (wn, wv)) in got.iter().zip(want) {
            assert_eq!((n.as_ref(), v.as_ref()), (wn, wv));
        }
    }

    #[test]
    fn dynamic_references_and_tables_are_refused() {
        let mut f = Fields::default();
        assert_eq!(decode(&[0xbe], &mut f), Err(Error::Index(62)));
        assert_eq!(
            decode(&[0x3f, 0xe1, 0x1f], &mut f),
            Err(Error::TableSize(4096))
        );
        assert_eq!(decode(&[0x20, 0x88], &mut f), Ok(()));
        assert_eq!(decode(&[0x04, 0x05], &mut f), Err(Error::Truncated));
    }
}
