//! The first messages of a TLS 1.3 handshake as QUIC carries them (bare
//! handshake messages in CRYPTO frames, no records), read sans-IO: what a
//! ClientHello offers and what the ServerHello chose. QUIC's TLS stack does
//! not tell these, so the `listen … quic` side reads them on the way
//! (`super::quic`) for the `$ssl_*` variables and to refuse a handshake.

/// What a ClientHello offers.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// The host name of its server_name extension, lowercase.
    pub server_name: Option<String>,
    pub cipher_suites: Vec<rustls::CipherSuite>,
    /// Its supported_groups.
    pub groups: Vec<rustls::NamedGroup>,
}

/// What a ServerHello chose.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ServerHello {
    pub cipher_suite: Option<rustls::CipherSuite>,
    /// The group of its key_share.
    pub group: Option<rustls::NamedGroup>,
    /// It accepted a pre-shared key: the session was resumed.
    pub resumed: bool,
}

const CLIENT_HELLO: u8 = 1;
const SERVER_HELLO: u8 = 2;

/// A HelloRetryRequest is a ServerHello with this random (RFC 8446 §4.1.3).
const RETRY_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// The handshake message of type `kind` at the start of `hs`: `None` while
/// it is not whole, `Some(None)` when the bytes are another message.
fn message(hs: &[u8], kind: u8) -> Option<Option<&[u8]>> {
    let head = hs.get(..4)?;
    if head[0] != kind {
        return Some(None);
    }
    let len = usize::from(head[1]) << 16 | usize::from(head[2]) << 8 | usize::from(head[3]);
    hs.get(4..4 + len).map(Some)
}

/// The ClientHello at the start of the handshake bytes `hs`: `None` while
/// it is not whole, `Some(Err)` when they are no ClientHello.
pub fn client_hello(hs: &[u8]) -> Option<Result<ClientHello, ()>> {
    Some(match message(hs, CLIENT_HELLO)? {
        Some(body) => client_fields(&mut Reader(body)).ok_or(()),
        None => Err(()),
    })
}

/// The ServerHello at the start of the handshake bytes `hs`, `None` when
/// they hold none whole (or a HelloRetryRequest).
pub fn server_hello(hs: &[u8]) -> Option<ServerHello> {
    server_fields(&mut Reader(message(hs, SERVER_HELLO)??))
}

/// A reader over a message's body: `None` past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (b, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(b)
    }

    fn u8(&mut self) -> Option<usize> {
        Some(usize::from(self.take(1)?[0]))
    }

    fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A vector with a one- or two-byte length before it.
    fn vec8(&mut self) -> Option<Reader<'a>> {
        let n = self.u8()?;
        self.take(n).map(Reader)
    }

    fn vec16(&mut self) -> Option<Reader<'a>> {
        let n = usize::from(self.u16()?);
        self.take(n).map(Reader)
    }

    /// The rest as 16-bit values.
    fn u16s(mut self) -> Option<Vec<u16>> {
        let mut v = Vec::with_capacity(self.0.len() / 2);
        while !self.0.is_empty() {
            v.push(self.u16()?);
        }
        Some(v)
    }

    /// Each extension's type and body.
    fn extensions(&mut self, mut each: impl FnMut(u16, Reader<'a>) -> Option<()>) -> Option<()> {
        if self.0.is_empty() {
            return Some(());
        }
        let mut exts = self.vec16()?;
        while !exts.0.is_empty() {
            let kind = exts.u16()?;
            each(kind, exts.vec16()?)?;
        }
        Some(())
    }
}

const SERVER_NAME: u16 = 0;
const SUPPORTED_GROUPS: u16 = 10;
const PRE_SHARED_KEY: u16 = 41;
const KEY_SHARE: u16 = 51;

fn client_fields(b: &mut Reader<'_>) -> Option<ClientHello> {
    let mut h = ClientHello::default();
    b.take(2 + 32)?; // legacy version, random
    b.vec8()?; // legacy session id
    h.cipher_suites = b.vec16()?.u16s()?.into_iter().map(Into::into).collect();
    b.vec8()?; // compression methods
    b.extensions(|kind, mut e| {
        match kind {
            SERVER_NAME => {
                let mut list = e.vec16()?;
                while !list.0.is_empty() {
                    let name_type = list.u8()?;
                    let name = list.vec16()?.0;
                    if name_type == 0 && h.server_name.is_none() {
                        let name = std::str::from_utf8(name).ok()?;
                        h.server_name = Some(name.to_ascii_lowercase());
                    }
                }
            }
            SUPPORTED_GROUPS => {
                h.groups = e.vec16()?.u16s()?.into_iter().map(Into::into).collect();
            }
            _ => {}
        }
        Some(())
    })?;
    Some(h)
}

fn server_fields(b: &mut Reader<'_>) -> Option<ServerHello> {
    let mut h = ServerHello::default();
    b.take(2)?; // legacy version
    if b.take(32)? == RETRY_RANDOM {
        return None;
    }
    b.vec8()?; // legacy session id echoed
    h.cipher_suite = Some(b.u16()?.into());
    b.u8()?; // compression method
    b.extensions(|kind, mut e| {
        match kind {
            KEY_SHARE => h.group = Some(e.u16()?.into()),
            PRE_SHARED_KEY => h.resumed = true,
            _ => {}
        }
        Some(())
    })?;
    Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{CipherSuite, NamedGroup};

    fn ext(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut e = kind.to_be_bytes().to_vec();
        e.extend_from_slice(&(body.len() as u16).to_be_bytes());
        e.extend_from_slice(body);
        e
    }

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind, 0];
        m.extend_from_slice(&(body.len() as u16).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn with_exts(mut body: Vec<u8>, exts: &[Vec<u8>]) -> Vec<u8> {
        let all: Vec<u8> = exts.concat();
        body.extend_from_slice(&(all.len() as u16).to_be_bytes());
        body.extend_from_slice(&all);
        body
    }

    fn client(exts: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 4, 0x13, 0x01, 0x13, 0x02, 1, 0]);
        message(CLIENT_HELLO, &with_exts(body, exts))
    }

    #[test]
    fn client_hello_offers() {
        let name = b"Example.COM";
        let mut sni = ((name.len() + 3) as u16).to_be_bytes().to_vec();
        sni.push(0);
        sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sni.extend_from_slice(name);
        let groups = [0, 4, 0x00, 0x1d, 0x00, 0x17];
        let hs = client(&[ext(SERVER_NAME, &sni), ext(SUPPORTED_GROUPS, &groups)]);
        let want = ClientHello {
            server_name: Some("example.com".into()),
            cipher_suites: vec![
                CipherSuite::TLS13_AES_128_GCM_SHA256,
                CipherSuite::TLS13_AES_256_GCM_SHA384,
            ],
            groups: vec![NamedGroup::X25519, NamedGroup::secp256r1],
        };
        assert_eq!(client_hello(&hs), Some(Ok(want)));
        // Not whole yet, however it is cut.
        for cut in 0..hs.len() {
            assert_eq!(client_hello(&hs[..cut]), None, "{cut}");
        }
        // Another message, or a body that runs past its length.
        assert_eq!(client_hello(&message(SERVER_HELLO, &[])), Some(Err(())));
        assert_eq!(client_hello(&message(CLIENT_HELLO, &[3, 3])), Some(Err(())));
    }

    fn server(random: [u8; 32], exts: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&random);
        body.extend_from_slice(&[0, 0x13, 0x02, 0]);
        message(SERVER_HELLO, &with_exts(body, exts))
    }

    #[test]
    fn server_hello_chose() {
        let share = ext(KEY_SHARE, &[0x00, 0x1d, 0, 2, 9, 9]);
        let hs = server([1; 32], &[ext(43, &[3, 4]), share.clone()]);
        let full = ServerHello {
            cipher_suite: Some(CipherSuite::TLS13_AES_256_GCM_SHA384),
            group: Some(NamedGroup::X25519),
            resumed: false,
        };
        assert_eq!(server_hello(&hs), Some(full));
        let resumed = server([1; 32], &[share.clone(), ext(PRE_SHARED_KEY, &[0, 0])]);
        assert!(server_hello(&resumed).unwrap().resumed);
        // A HelloRetryRequest chose nothing yet.
        assert_eq!(server_hello(&server(RETRY_RANDOM, &[share])), None);
        assert_eq!(server_hello(&hs[..hs.len() - 1]), None);
    }
}
