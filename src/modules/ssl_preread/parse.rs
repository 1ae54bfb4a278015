//! The TLS ClientHello at the start of a connection, read without
//! terminating TLS (sans-IO): the handshake records are gathered, however
//! the message is split among them, and the hello's version, server name
//! and ALPN protocols taken from it, as nginx's `ssl_preread` takes them.

/// What the first bytes of a connection are, so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A ClientHello may follow: more bytes are needed.
    More,
    /// Not a TLS ClientHello nginx's parser reads (another protocol, or a
    /// malformed hello).
    NotHello,
    Hello(Hello),
}

/// What a ClientHello says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// The version it offers (major, minor): its `client_version`, or
    /// TLS 1.3 when it has a supported_versions extension; an SSLv2 hello's.
    pub version: [u8; 2],
    /// The first host name of its server_name extension, as sent.
    pub server_name: Vec<u8>,
    /// Its ALPN protocols, joined by `,`.
    pub alpn: Vec<u8>,
}

impl Hello {
    /// The version as OpenSSL's `SSL_get_version` names it (`$ssl_preread_protocol`).
    pub fn protocol(&self) -> &'static str {
        match self.version {
            [0, 2] => "SSLv2",
            [3, 0] => "SSLv3",
            [3, 1] => "TLSv1",
            [3, 2] => "TLSv1.1",
            [3, 3] => "TLSv1.2",
            [3, 4] => "TLSv1.3",
            _ => "",
        }
    }
}

/// Parse the start of a connection.
pub fn parse(buf: &[u8]) -> Parsed {
    let mut handshake = Vec::new();
    let mut rest = buf;
    while rest.len() >= 5 {
        // An SSLv2-style ClientHello: its version, nothing more.
        if rest[0] & 0x80 != 0 && rest[2] == 1 && (rest[3] == 0 || rest[3] == 3) {
            return Parsed::Hello(Hello {
                version: [rest[3], rest[4]],
                ..Hello::default()
            });
        }
        // A handshake record of SSLv3 or TLS.
        if rest[0] != 0x16 || rest[1] != 3 {
            return Parsed::NotHello;
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        let Some(payload) = rest.get(5..5 + len) else {
            break; // a record is parsed once whole
        };
        handshake.extend_from_slice(payload);
        rest = &rest[5 + len..];
        match client_hello(&handshake) {
            Some(Ok(h)) => return Parsed::Hello(h),
            Some(Err(())) => return Parsed::NotHello,
            None => {}
        }
    }
    Parsed::More
}

/// A reader over the hello's body: `Err` past its declared end.
struct Body<'a> {
    data: &'a [u8],
    /// Bytes of the message not read yet (its length says).
    left: usize,
}

/// The body ran past what was received (`Incomplete`) or past its
/// declared length (`Invalid`).
enum Short {
    Incomplete,
    Invalid,
}

impl<'a> Body<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        if n > self.left {
            return Err(Short::Invalid);
        }
        let Some(b) = self.data.get(..n) else {
            return Err(Short::Incomplete);
        };
        self.data = &self.data[n..];
        self.left -= n;
        Ok(b)
    }

    fn u8(&mut self) -> Result<usize, Short> {
        Ok(usize::from(self.take(1)?[0]))
    }

    fn u16(&mut self) -> Result<usize, Short> {
        let b = self.take(2)?;
        Ok(usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
}

/// The ClientHello in the handshake bytes gathered: `None` while they are
/// too few, `Err` when they are no ClientHello.
fn client_hello(hs: &[u8]) -> Option<Result<Hello, ()>> {
    if hs.len() < 4 {
        return None;
    }
    if hs[0] != 1 {
        return Some(Err(()));
    }
    let len = usize::from(hs[1]) << 16 | usize::from(hs[2]) << 8 | usize::from(hs[3]);
    let mut b = Body {
        data: &hs[4..],
        left: len,
    };
    match fields(&mut b) {
        Ok(h) => Some(Ok(h)),
        Err(Short::Incomplete) => None,
        Err(Short::Invalid) => Some(Err(())),
    }
}

fn fields(b: &mut Body<'_>) -> Result<Hello, Short> {
    let mut h = Hello::default();
    let v = b.take(2)?;
    h.version = [v[0], v[1]];
    b.take(32)?; // random
    let n = b.u8()?;
    b.take(n)?; // session id
    let n = b.u16()?;
    b.take(n)?; // cipher suites
    let n = b.u8()?;
    b.take(n)?; // compression methods
    if b.left == 0 {
        return Ok(h);
    }
    b.u16()?; // the extensions' length: each says its own
    let (mut sni, mut alpn) = (false, false);
    while b.left > 0 {
        let kind = b.u16()?;
        let len = b.u16()?;
        match kind {
            0 if !sni => {
                sni = true;
                let mut list = b.u16()?;
                if b.u8()? != 0 {
                    return Err(Short::Invalid); // not a host name
                }
                let n = b.u16()?;
                list = list.checked_sub(3 + n).ok_or(Short::Invalid)?;
                h.server_name = b.take(n)?.to_vec();
                b.take(list)?;
            }
            16 if !alpn => {
                alpn = true;
                let mut list = b.u16()?;
                loop {
                    let n = b.u8()?;
                    if n == 0 {
                        return Err(Short::Invalid);
                    }
                    list = list.checked_sub(1 + n).ok_or(Short::Invalid)?;
                    h.alpn.extend_from_slice(b.take(n)?);
                    if list == 0 {
                        break;
                    }
                    h.alpn.push(b',');
                }
            }
            43 => {
                // Its list's own length says how far it goes, as nginx reads it.
                h.version = [3, 4];
                let n = b.u8()?;
                b.take(n)?;
            }
            _ => {
                b.take(len)?;
            }
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello in one record: `exts` its extensions.
    fn hello(exts: &[u8]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(exts);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    fn sni(name: &[u8]) -> Vec<u8> {
        let mut e = vec![0, 0];
        e.extend_from_slice(&((name.len() + 5) as u16).to_be_bytes());
        e.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
        e.push(0);
        e.extend_from_slice(&(name.len() as u16).to_be_bytes());
        e.extend_from_slice(name);
        e
    }

    #[test]
    fn reads_name_alpn_and_version() {
        let mut exts = sni(b"Example.com");
        exts.extend_from_slice(&[0, 16, 0, 14, 0, 12, 2, b'h', b'2', 8]);
        exts.extend_from_slice(b"http/1.1");
        exts.extend_from_slice(&[0, 43, 0, 3, 2, 3, 4]);
        let Parsed::Hello(h) = parse(&hello(&exts)) else {
            panic!("no hello")
        };
        assert_eq!(h.server_name, b"Example.com");
        assert_eq!(h.alpn, b"h2,http/1.1");
        assert_eq!(h.protocol(), "TLSv1.3");
    }

    #[test]
    fn waits_for_whole_records_and_joins_them() {
        let whole = hello(&sni(b"foof"));
        for cut in 0..whole.len() {
            assert_eq!(parse(&whole[..cut]), Parsed::More, "cut at {cut}");
        }
        // The handshake split between two records, inside the name.
        let hs = &whole[5..];
        let split = hs.len() - 1;
        let mut two = vec![0x16, 3, 1, 0, split as u8];
        two.extend_from_slice(&hs[..split]);
        two.extend_from_slice(&[0x16, 3, 1, 0, 1, hs[split]]);
        let Parsed::Hello(h) = parse(&two) else {
            panic!("no hello")
        };
        assert_eq!(h.server_name, b"foof");
        assert_eq!(h.protocol(), "TLSv1.2");
    }

    #[test]
    fn refuses_what_is_no_hello() {
        assert_eq!(parse(b"GET / HTTP/1.0\r\n"), Parsed::NotHello);
        let mut short = hello(&sni(b"foo"));
        short[8] -= 1; // the message says one byte less than its name needs
        assert_eq!(parse(&short), Parsed::NotHello);
        let v2 = [0x80, 0x2e, 1, 3, 1, 0, 0x15];
        let Parsed::Hello(h) = parse(&v2) else {
            panic!("no v2 hello")
        };
        assert_eq!(h.protocol(), "TLSv1");
    }
}
