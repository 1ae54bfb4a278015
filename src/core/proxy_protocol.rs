//! The PROXY protocol header (HAProxy's, versions 1 and 2) a balancer sends
//! before the client's bytes on a `listen … proxy_protocol` address: the
//! parser (sans-IO) and what it found, which `$proxy_protocol_*` and
//! `real_ip_header proxy_protocol` read.
//!
//! As nginx: a v1 address is kept as written (only its characters are
//! checked); `PROXY UNKNOWN`, a v2 `LOCAL` command, a transport other than
//! TCP or a family other than IPv4/IPv6 are accepted without addresses; v2
//! TLVs are kept raw and looked up by type when a variable asks.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The v2 signature.
pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 line, CRLF included.
pub const V1_MAX: usize = 107;
/// The longest v2 header vireo reads (nginx's limit since 1.23).
pub const MAX: usize = 4096;

/// The addresses a PROXY header gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The client's address (`$proxy_protocol_addr`).
    pub src_addr: Box<str>,
    pub src_port: u16,
    /// The address the balancer was reached on (`$proxy_protocol_server_addr`).
    pub dst_addr: Box<str>,
    pub dst_port: u16,
    /// The v2 TLVs after the addresses, as sent.
    pub tlvs: Box<[u8]>,
}

/// What the bytes read so far make of a header.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A prefix of a header: more bytes are needed.
    Partial,
    /// A header of `len` bytes; its addresses, when it gives any.
    Done {
        len: usize,
        header: Option<ProxyHeader>,
    },
    /// Not a PROXY header: the reason, for the error log.
    Invalid(String),
}

/// Parse the start of a connection.
/// A PROXY protocol v1 header naming a connection from `src` to `dst`
/// (what a proxy sends its upstream first; mixed families are `UNKNOWN`).
pub fn v1_header(src: std::net::SocketAddr, dst: std::net::SocketAddr) -> Vec<u8> {
    use std::net::IpAddr;
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (s, d) = (canon(src.ip()), canon(dst.ip()));
    let family = match (s, d) {
        (IpAddr::V4(_), IpAddr::V4(_)) => "TCP4",
        (IpAddr::V6(_), IpAddr::V6(_)) => "TCP6",
        _ => return b"PROXY UNKNOWN\r\n".to_vec(),
    };
    format!("PROXY {family} {s} {d} {} {}\r\n", src.port(), dst.port()).into_bytes()
}

pub fn parse(buf: &[u8]) -> Parsed {
    let sig = buf.len().min(V2_SIGNATURE.len());
    if sig > 0 && buf[..sig] == V2_SIGNATURE[..sig] {
        return v2(buf);
    }
    let pre = buf.len().min(6);
    if buf[..pre] != b"PROXY "[..pre] {
        return broken(buf);
    }
    match buf.iter().take(V1_MAX).position(|&b| b == b'\n') {
        Some(lf) => v1(&buf[..=lf]),
        None if buf.len() < V1_MAX => Parsed::Partial,
        None => broken(buf),
    }
}

/// nginx's "broken header" message: the bytes up to the first CR or LF.
fn broken(buf: &[u8]) -> Parsed {
    let end = buf
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(buf.len())
        .min(V1_MAX);
    Parsed::Invalid(format!(
        "broken header: \"{}\"",
        String::from_utf8_lossy(&buf[..end])
    ))
}

/// One v1 line, LF included.
fn v1(line: &[u8]) -> Parsed {
    let len = line.len();
    let rest = &line[6..];
    if rest.starts_with(b"UNKNOWN") {
        // Whatever follows, up to the first CRLF.
        return match line.windows(2).position(|w| w == b"\r\n") {
            Some(i) if i + 2 == len => Parsed::Done { len, header: None },
            _ => broken(line),
        };
    }
    let fields = (|| {
        let rest = rest
            .strip_prefix(b"TCP4 ")
            .or_else(|| rest.strip_prefix(b"TCP6 "))?;
        let rest = rest.strip_suffix(b"\r\n")?;
        let mut it = rest.splitn(4, |&b| b == b' ');
        let addr = |a: &[u8]| {
            let ok = !a.is_empty()
                && a.iter()
                    .all(|&b| b == b':' || b == b'.' || b.is_ascii_hexdigit());
            // The characters checked are ASCII.
            ok.then(|| Box::<str>::from(String::from_utf8_lossy(a)))
        };
        let port = |p: &[u8]| -> Option<u16> {
            if p.is_empty() || p.len() > 5 || !p.iter().all(u8::is_ascii_digit) {
                return None;
            }
            std::str::from_utf8(p).ok()?.parse().ok()
        };
        let src_addr = addr(it.next()?)?;
        let dst_addr = addr(it.next()?)?;
        let src_port = port(it.next()?)?;
        let dst_port = port(it.next()?)?;
        Some(ProxyHeader {
            src_addr,
            src_port,
            dst_addr,
            dst_port,
            tlvs: Box::default(),
        })
    })();
    match fields {
        Some(h) => Parsed::Done {
            len,
            header: Some(h),
        },
        None => broken(line),
    }
}

fn v2(buf: &[u8]) -> Parsed {
    if buf.len() < 16 {
        return Parsed::Partial;
    }
    let version = buf[12] >> 4;
    if version != 2 {
        return Parsed::Invalid(format!("unknown PROXY protocol version: {version}"));
    }
    let body = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let len = 16 + body;
    if len > MAX {
        return Parsed::Invalid(format!("PROXY protocol v2 header is too large: {len}"));
    }
    if buf.len() < len {
        return Parsed::Partial;
    }
    let body = &buf[16..len];
    let skip = Parsed::Done { len, header: None };
    // Command PROXY (1) over TCP (1); anything else carries no addresses.
    if buf[12] & 0x0f != 1 || buf[13] & 0x0f != 1 {
        return skip;
    }
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    let (src_addr, dst_addr, ports) = match buf[13] >> 4 {
        1 if body.len() >= 12 => {
            let a = |b: &[u8]| Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string();
            (a(&body[0..4]), a(&body[4..8]), 8)
        }
        2 if body.len() >= 36 => {
            let a = |b: &[u8]| Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap()).to_string();
            (a(&body[0..16]), a(&body[16..32]), 32)
        }
        1 | 2 => {
            return Parsed::Invalid(format!(
                "PROXY protocol v2 header is too short for its address family: {}",
                body.len()
            ));
        }
        _ => return skip,
    };
    Parsed::Done {
        len,
        header: Some(ProxyHeader {
            src_addr: src_addr.into(),
            src_port: port(&body[ports..]),
            dst_addr: dst_addr.into(),
            dst_port: port(&body[ports + 2..]),
            tlvs: body[ports + 4..].into(),
        }),
    }
}

/// TLV names nginx gives `$proxy_protocol_tlv_NAME`, with their types.
const TLV_NAMES: &[(&str, u8)] = &[
    ("alpn", 0x01),
    ("authority", 0x02),
    ("unique_id", 0x05),
    ("ssl", 0x20),
    ("netns", 0x30),
];

/// SSL sub-TLV names (`$proxy_protocol_tlv_ssl_NAME`).
const SSL_NAMES: &[(&str, u8)] = &[
    ("version", 0x21),
    ("cn", 0x22),
    ("cipher", 0x23),
    ("sig_alg", 0x24),
    ("key_alg", 0x25),
];

/// The value of the first TLV of type `ty` in `tlvs`.
fn find(mut tlvs: &[u8], ty: u8) -> Option<&[u8]> {
    while tlvs.len() >= 3 {
        let n = usize::from(u16::from_be_bytes([tlvs[1], tlvs[2]]));
        let v = tlvs.get(3..3 + n)?;
        if tlvs[0] == ty {
            return Some(v);
        }
        tlvs = &tlvs[3 + n..];
    }
    None
}

/// A type written `0xHH` (hex digits, at most 255).
fn hex_type(s: &str) -> Option<u8> {
    let h = s.strip_prefix("0x")?;
    if h.is_empty() {
        return None;
    }
    u32::from_str_radix(h, 16)
        .ok()
        .and_then(|n| u8::try_from(n).ok())
}

impl ProxyHeader {
    /// `$proxy_protocol_tlv_NAME` (nginx ≥ 1.23): a named or `0xHH` TLV;
    /// `ssl_NAME` or `ssl_0xHH`, a sub-TLV of the SSL TLV; `ssl_verify`,
    /// its verify field as a number.
    pub fn tlv(&self, name: &str) -> Option<Vec<u8>> {
        if let Some(sub) = name.strip_prefix("ssl_") {
            let ssl = find(&self.tlvs, 0x20)?;
            if ssl.len() < 5 {
                return None;
            }
            if sub == "verify" {
                let v = u32::from_be_bytes([ssl[1], ssl[2], ssl[3], ssl[4]]);
                return Some(v.to_string().into_bytes());
            }
            let ty = SSL_NAMES
                .iter()
                .find(|(n, _)| *n == sub)
                .map(|&(_, t)| t)
                .or_else(|| hex_type(sub))?;
            return find(&ssl[5..], ty).map(<[u8]>::to_vec);
        }
        let ty = TLV_NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, t)| t)
            .or_else(|| hex_type(name))?;
        find(&self.tlvs, ty).map(<[u8]>::to_vec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(b: &[u8]) -> (usize, Option<ProxyHeader>) {
        match parse(b) {
            Parsed::Done { len, header } => (len, header),
            p => panic!("{p:?} for {b:?}"),
        }
    }

    #[test]
    fn v1_lines() {
        let line = b"PROXY TCP4 192.0.2.1 192.0.2.2 123 5678\r\nGET /";
        let (len, h) = done(line);
        assert_eq!(len, line.len() - 5);
        let h = h.unwrap();
        assert_eq!(
            (&*h.src_addr, h.src_port, &*h.dst_addr, h.dst_port),
            ("192.0.2.1", 123, "192.0.2.2", 5678)
        );
        let (_, h) = done(b"PROXY TCP6 2001:Db8::1 2001:Db8::2 1 2\r\n");
        assert_eq!(&*h.unwrap().src_addr, "2001:Db8::1");
        assert_eq!(done(b"PROXY UNKNOWN\r\n"), (15, None));
        assert_eq!(done(b"PROXY UNKNOWN 1 2 3 4 5 6\r\nxx").0, 27);
    }

    #[test]
    fn v1_partial_and_broken() {
        assert_eq!(parse(b""), Parsed::Partial);
        assert_eq!(parse(b"PRO"), Parsed::Partial);
        assert_eq!(parse(b"PROXY TCP4 1.2.3.4"), Parsed::Partial);
        for bad in [
            &b"GET / HTTP/1.0\r\n"[..],
            b"BOGUS TCP4 192.0.2.1 192.0.2.2 1234 5678\r\n",
            b"PROXY TCP4 192.0.2.1 192.0.2.2 1234 5678\n",
            b"PROXY TCP5 192.0.2.1 192.0.2.2 1234 5678\r\n",
            b"PROXY TCP4 192.0.2.x 192.0.2.2 1234 5678\r\n",
            b"PROXY TCP4 192.0.2.1 192.0.2.2 1234 65536\r\n",
            b"PROXY TCP4 192.0.2.1 192.0.2.2 1234\r\n",
            b"PROXY UNKNOWN\n",
        ] {
            assert!(matches!(parse(bad), Parsed::Invalid(_)), "{bad:?}");
        }
        let long = [b"PROXY ".as_slice(), &[b'1'; 110]].concat();
        assert!(matches!(parse(&long), Parsed::Invalid(_)));
        let Parsed::Invalid(why) = parse(b"BOGUS x\r\n") else {
            unreachable!()
        };
        assert_eq!(why, "broken header: \"BOGUS x\"");
    }

    fn v2_header(ver_cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
        let mut v = V2_SIGNATURE.to_vec();
        v.extend_from_slice(&[ver_cmd, fam]);
        v.extend_from_slice(&(body.len() as u16).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn v2_headers() {
        let inet = [192, 0, 2, 1, 192, 0, 2, 2, 0, 123, 0x16, 0x2e];
        let b = v2_header(0x21, 0x11, &inet);
        assert_eq!(parse(&b[..15]), Parsed::Partial);
        assert_eq!(parse(&b[..20]), Parsed::Partial);
        let (len, h) = done(&[&b[..], b"GET"].concat());
        assert_eq!(len, 28);
        let h = h.unwrap();
        assert_eq!((&*h.src_addr, h.src_port), ("192.0.2.1", 123));
        assert_eq!((&*h.dst_addr, h.dst_port), ("192.0.2.2", 5678));

        let mut six = [0u8; 36];
        six[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        six[15] = 1;
        six[16..20].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        six[31] = 2;
        six[33] = 123;
        let (_, h) = done(&v2_header(0x21, 0x21, &six));
        let h = h.unwrap();
        assert_eq!((&*h.src_addr, &*h.dst_addr), ("2001:db8::1", "2001:db8::2"));

        // LOCAL, UNSPEC, unknown family: no addresses.
        assert_eq!(done(&v2_header(0x20, 0x11, &inet)).1, None);
        assert_eq!(done(&v2_header(0x21, 0x01, b"")).1, None);
        assert_eq!(done(&v2_header(0x21, 0x41, &[1, 2, 3, 4])).1, None);
        // Too short for its family, another version, too large.
        assert!(matches!(
            parse(&v2_header(0x21, 0x11, &[1, 2, 3])),
            Parsed::Invalid(_)
        ));
        assert!(matches!(
            parse(&v2_header(0x11, 0x11, &inet)),
            Parsed::Invalid(_)
        ));
        let mut big = V2_SIGNATURE.to_vec();
        big.extend_from_slice(&[0x21, 0x11, 0x10, 0x00]);
        assert!(matches!(parse(&big), Parsed::Invalid(_)));
    }

    #[test]
    fn tlvs() {
        let tlv = |t: u8, v: &[u8]| {
            let mut o = vec![t];
            o.extend_from_slice(&(v.len() as u16).to_be_bytes());
            o.extend_from_slice(v);
            o
        };
        let mut ssl = vec![1, 0, 0, 0, 255];
        ssl.extend(tlv(0x21, b"TLSv1.2"));
        ssl.extend(tlv(0x22, b"example.com"));
        let mut body = vec![192, 0, 2, 1, 192, 0, 2, 2, 0, 1, 0, 2];
        body.extend(tlv(0x01, b"h2"));
        body.extend(tlv(0x20, &ssl));
        body.extend(tlv(0xae, b"12345"));
        let h = done(&v2_header(0x21, 0x11, &body)).1.unwrap();
        let s = |n: &str| h.tlv(n).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(s("alpn").as_deref(), Some("h2"));
        assert_eq!(s("0x01").as_deref(), Some("h2"));
        assert_eq!(s("0x000ae").as_deref(), Some("12345"));
        assert_eq!(s("ssl_version").as_deref(), Some("TLSv1.2"));
        assert_eq!(s("ssl_0x22").as_deref(), Some("example.com"));
        assert_eq!(s("ssl_verify").as_deref(), Some("255"));
        assert_eq!(s("authority"), None);
        assert_eq!(s("0x0f"), None);
        assert_eq!(s("bogus"), None);
    }
}
