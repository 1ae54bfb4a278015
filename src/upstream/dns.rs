//! The DNS message format, as much of it as the resolver needs (RFC 1035,
//! RFC 3596, RFC 2782): a query for one name's A, AAAA or SRV records, and
//! the addresses, services and CNAME of an answer. Names in answers may be compressed (pointers are
//! followed backwards only, so a message cannot make a loop).

use std::net::IpAddr;

pub const A: u16 = 1;
pub const CNAME: u16 = 5;
pub const AAAA: u16 = 28;
pub const SRV: u16 = 33;
const IN: u16 = 1;

/// The longest name, as text (four labels of 63 bytes and their dots).
pub const MAX_NAME: usize = 255;

/// Response codes nginx names (`ngx_resolver_strerror`).
pub const FORMERR: u8 = 1;
pub const NXDOMAIN: u8 = 3;
pub const REFUSED: u8 = 5;

/// A name in query form: labels of 1 to 63 bytes joined by dots, one final
/// dot allowed, at most [`MAX_NAME`] bytes. `None` when it is not one.
pub fn labels(name: &str) -> Option<Vec<&str>> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > MAX_NAME {
        return None;
    }
    let labels: Vec<&str> = name.split('.').collect();
    labels
        .iter()
        .all(|l| !l.is_empty() && l.len() <= 63)
        .then_some(labels)
}

/// A query (recursion desired) for `name`'s records of `qtype`.
pub fn query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let labels = labels(name)?;
    let mut q = Vec::with_capacity(18 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in labels {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&IN.to_be_bytes());
    Some(q)
}

/// The header fields a reply is matched and judged by.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    pub id: u16,
    /// Truncated: the answer is to be asked again over TCP.
    pub truncated: bool,
    pub rcode: u8,
}

/// The header of a reply (`None`: too short, or not a reply).
pub fn header(msg: &[u8]) -> Option<Header> {
    if msg.len() < 12 || msg[2] & 0x80 == 0 {
        return None;
    }
    Some(Header {
        id: u16::from_be_bytes([msg[0], msg[1]]),
        truncated: msg[2] & 0x02 != 0,
        rcode: msg[3] & 0x0f,
    })
}

/// One SRV record: where a service is offered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Srv {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    /// The host offering it, lowercased ("" for ".": not offered there).
    pub target: String,
}

/// What an answer holds for the question asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answer {
    /// Addresses of the type asked, in order.
    pub addrs: Vec<IpAddr>,
    /// SRV records, when SRV was asked, in order.
    pub srvs: Vec<Srv>,
    /// The first CNAME's target, lowercased.
    pub cname: Option<String>,
    /// The least TTL of the records used (seconds).
    pub ttl: u32,
}

/// Why an answer could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum Malformed {
    Short,
    /// The question is not the one asked.
    Question,
    Name,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Malformed::Short => "short DNS response",
            Malformed::Question => "DNS response for a different question",
            Malformed::Name => "invalid name in DNS response",
        })
    }
}

/// Read a name at `at`: (the name lowercased, where the bytes after it start).
fn name(msg: &[u8], mut at: usize) -> Result<(String, usize), Malformed> {
    let mut out = String::new();
    let mut end = None;
    let mut jumps = 0;
    loop {
        let len = *msg.get(at).ok_or(Malformed::Short)? as usize;
        match len & 0xc0 {
            0 if len == 0 => {
                return Ok((out, end.unwrap_or(at + 1)));
            }
            0 => {
                let label = msg.get(at + 1..at + 1 + len).ok_or(Malformed::Short)?;
                if !out.is_empty() {
                    out.push('.');
                }
                for &b in label {
                    if b == b'.' || !(0x21..0x7f).contains(&b) {
                        return Err(Malformed::Name);
                    }
                    out.push(b.to_ascii_lowercase() as char);
                }
                if out.len() > MAX_NAME {
                    return Err(Malformed::Name);
                }
                at += 1 + len;
            }
            0xc0 => {
                let lo = *msg.get(at + 1).ok_or(Malformed::Short)? as usize;
                let to = (len & 0x3f) << 8 | lo;
                end.get_or_insert(at + 2);
                // Only backwards, so no loop.
                if to >= at || jumps > 127 {
                    return Err(Malformed::Name);
                }
                jumps += 1;
                at = to;
            }
            _ => return Err(Malformed::Name),
        }
    }
}

fn u16_at(msg: &[u8], at: usize) -> Result<u16, Malformed> {
    msg.get(at..at + 2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .ok_or(Malformed::Short)
}

/// Read a reply without an error code to the question (`qname`, `qtype`).
pub fn answer(msg: &[u8], qname: &str, qtype: u16) -> Result<Answer, Malformed> {
    let qd = u16_at(msg, 4)?;
    let an = u16_at(msg, 6)?;
    if qd != 1 {
        return Err(Malformed::Question);
    }
    let (q, mut at) = name(msg, 12)?;
    let qname = qname.strip_suffix('.').unwrap_or(qname);
    if !q.eq_ignore_ascii_case(qname) || u16_at(msg, at)? != qtype || u16_at(msg, at + 2)? != IN {
        return Err(Malformed::Question);
    }
    at += 4;
    let mut out = Answer {
        ttl: u32::MAX,
        ..Answer::default()
    };
    for _ in 0..an {
        let (_, next) = name(msg, at)?;
        let fixed = msg.get(next..next + 10).ok_or(Malformed::Short)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let class = u16::from_be_bytes([fixed[2], fixed[3]]);
        let ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        let rdlen = u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
        let rdata_at = next + 10;
        let rdata = msg
            .get(rdata_at..rdata_at + rdlen)
            .ok_or(Malformed::Short)?;
        at = rdata_at + rdlen;
        if class != IN {
            continue;
        }
        // A TTL with the top bit set is read as 0 (RFC 2181).
        let ttl = if ttl > i32::MAX as u32 { 0 } else { ttl };
        match rtype {
            A if qtype == A => {
                let b: [u8; 4] = rdata.try_into().map_err(|_| Malformed::Short)?;
                out.addrs.push(IpAddr::from(b));
                out.ttl = out.ttl.min(ttl);
            }
            AAAA if qtype == AAAA => {
                let b: [u8; 16] = rdata.try_into().map_err(|_| Malformed::Short)?;
                out.addrs.push(IpAddr::from(b));
                out.ttl = out.ttl.min(ttl);
            }
            SRV if qtype == SRV => {
                let fixed = rdata.get(..6).ok_or(Malformed::Short)?;
                let (target, end) = name(msg, rdata_at + 6)?;
                if end > at {
                    return Err(Malformed::Short);
                }
                out.srvs.push(Srv {
                    priority: u16::from_be_bytes([fixed[0], fixed[1]]),
                    weight: u16::from_be_bytes([fixed[2], fixed[3]]),
                    port: u16::from_be_bytes([fixed[4], fixed[5]]),
                    target,
                });
                out.ttl = out.ttl.min(ttl);
            }
            CNAME => {
                if out.cname.is_none() {
                    let (target, _) = name(msg, rdata_at)?;
                    if target.is_empty() {
                        return Err(Malformed::Name);
                    }
                    out.cname = Some(target);
                }
                out.ttl = out.ttl.min(ttl);
            }
            _ => {}
        }
    }
    if out.ttl == u32::MAX {
        out.ttl = 0;
    }
    Ok(out)
}

/// nginx's text for a response code (`ngx_resolver_strerror`).
pub fn strerror(rcode: u8) -> &'static str {
    match rcode {
        1 => "Format error",
        2 => "Server failure",
        3 => "Host not found",
        4 => "Unimplemented",
        5 => "Operation refused",
        _ => "Unknown error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply to `q` with `rcode` and the records `rr` (already encoded).
    fn reply(q: &[u8], rcode: u8, rr: &[Vec<u8>]) -> Vec<u8> {
        let mut m = q.to_vec();
        m[2] = 0x81;
        m[3] = 0x80 | rcode;
        m[6..8].copy_from_slice(&(rr.len() as u16).to_be_bytes());
        for r in rr {
            m.extend_from_slice(r);
        }
        m
    }

    fn rr(owner: &[u8], rtype: u16, ttl: u32, rdata: &[u8]) -> Vec<u8> {
        let mut r = owner.to_vec();
        r.extend_from_slice(&rtype.to_be_bytes());
        r.extend_from_slice(&IN.to_be_bytes());
        r.extend_from_slice(&ttl.to_be_bytes());
        r.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        r.extend_from_slice(rdata);
        r
    }

    #[test]
    fn query_format() {
        let q = query(0x1234, "a.Example.net.", A).unwrap();
        assert_eq!(
            q,
            b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x01a\x07Example\x03net\x00\x00\x01\x00\x01"
        );
        assert!(query(1, "", A).is_none());
        assert!(query(1, "a..b", A).is_none());
        assert!(query(1, &"a".repeat(64), A).is_none());
        let long = vec!["a".repeat(63); 4].join(".");
        assert!(query(1, &long, A).is_some());
        assert!(query(1, &format!("{long}b"), A).is_none());
    }

    #[test]
    fn addresses_cname_and_ttl() {
        let q = query(7, "a.example.net", A).unwrap();
        // Pointer 0xc00c: the question's name.
        let m = reply(
            &q,
            0,
            &[
                rr(b"\xc0\x0c", A, 30, &[127, 0, 0, 1]),
                rr(b"\xc0\x0c", A, 20, &[127, 0, 0, 2]),
                rr(b"\xc0\x0c", AAAA, 5, &[0; 16]),
            ],
        );
        let h = header(&m).unwrap();
        assert_eq!((h.id, h.rcode, h.truncated), (7, 0, false));
        let a = answer(&m, "A.example.net", A).unwrap();
        assert_eq!(
            a.addrs,
            vec![IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 2])]
        );
        assert_eq!(a.ttl, 20);
        assert_eq!(a.cname, None);

        // CNAME alias.<pointer to "example.net" at 14>.
        let m = reply(&q, 0, &[rr(b"\xc0\x0c", CNAME, 9, b"\x05alias\xc0\x0e")]);
        let a = answer(&m, "a.example.net", A).unwrap();
        assert_eq!(a.cname.as_deref(), Some("alias.example.net"));
        assert_eq!((a.addrs.len(), a.ttl), (0, 9));

        // Uncompressed owner.
        let m = reply(
            &q,
            0,
            &[rr(b"\x01a\x07example\x03net\x00", A, 1, &[1, 2, 3, 4])],
        );
        assert_eq!(answer(&m, "a.example.net", A).unwrap().addrs.len(), 1);
    }

    #[test]
    fn srv_records() {
        let q = query(9, "_http._tcp.example.net", SRV).unwrap();
        // Priority 10, weight 5, port 8080, target b.<pointer to "example.net" at 23>.
        let m = reply(
            &q,
            0,
            &[
                rr(
                    b"\xc0\x0c",
                    SRV,
                    60,
                    b"\x00\x0a\x00\x05\x1f\x90\x01b\xc0\x17",
                ),
                rr(b"\xc0\x0c", SRV, 30, b"\x00\x14\x00\x00\x00\x50\x00"),
            ],
        );
        let a = answer(&m, "_http._tcp.example.net", SRV).unwrap();
        assert_eq!(
            a.srvs,
            vec![
                Srv {
                    priority: 10,
                    weight: 5,
                    port: 8080,
                    target: "b.example.net".into()
                },
                Srv {
                    priority: 20,
                    weight: 0,
                    port: 80,
                    target: String::new()
                }
            ]
        );
        assert_eq!(a.ttl, 30);
        // A target running past its record.
        let m = reply(
            &q,
            0,
            &[rr(b"\xc0\x0c", SRV, 1, b"\x00\x01\x00\x01\x00\x50\x05ab")],
        );
        assert!(answer(&m, "_http._tcp.example.net", SRV).is_err());
    }

    #[test]
    fn malformed() {
        let q = query(7, "a.example.net", A).unwrap();
        // An A record without its rdata length.
        let mut m = reply(&q, 0, &[]);
        m[7] = 1;
        m.extend_from_slice(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x10");
        assert_eq!(answer(&m, "a.example.net", A), Err(Malformed::Short));
        // An address of the wrong length.
        let m = reply(&q, 0, &[rr(b"\xc0\x0c", A, 1, &[1, 2, 3])]);
        assert_eq!(answer(&m, "a.example.net", A), Err(Malformed::Short));
        // A pointer to itself.
        let m = reply(&q, 0, &[rr(b"\xc0\x0c", CNAME, 1, b"\xc0\x2d")]);
        assert_eq!(answer(&m, "a.example.net", A), Err(Malformed::Name));
        // Another question.
        assert_eq!(
            answer(&reply(&q, 0, &[]), "b.example.net", A),
            Err(Malformed::Question)
        );
        assert_eq!(
            answer(&reply(&q, 0, &[]), "a.example.net", AAAA),
            Err(Malformed::Question)
        );
        assert!(header(&q).is_none(), "a query is not a reply");
        assert!(header(&m[..11]).is_none());
    }
}
