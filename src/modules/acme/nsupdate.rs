//! DNS dynamic updates (RFC 2136) signed with TSIG (RFC 8945): the TXT
//! records of `dns-01` challenges added to and removed from a zone on the
//! configured server, over TCP. Names are written with the resolver's
//! rules (`upstream::dns::labels`); replies are judged by their header and,
//! when the update was signed, by their own TSIG.

use super::conf::{DnsUpdate, TsigKey};
use crate::upstream::dns;
use ring::hmac;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SOA: u16 = 6;
const TXT: u16 = 16;
const TSIG: u16 = 250;
const IN: u16 = 1;
const NONE: u16 = 254;
const ANY: u16 = 255;
/// The opcode UPDATE in the header's flags.
const UPDATE: u16 = 5 << 11;
/// How far apart the signer's and the server's clocks may be (seconds).
const FUDGE: u16 = 300;
/// How long one exchange with the server may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A TSIG algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alg {
    HmacSha256,
    HmacSha384,
    HmacSha512,
}

impl Alg {
    /// The name as key files and the TSIG record write it.
    pub fn parse(name: &str) -> Option<Alg> {
        match name.trim_end_matches('.').to_ascii_lowercase().as_str() {
            "hmac-sha256" => Some(Alg::HmacSha256),
            "hmac-sha384" => Some(Alg::HmacSha384),
            "hmac-sha512" => Some(Alg::HmacSha512),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Alg::HmacSha256 => "hmac-sha256",
            Alg::HmacSha384 => "hmac-sha384",
            Alg::HmacSha512 => "hmac-sha512",
        }
    }

    fn ring(self) -> hmac::Algorithm {
        match self {
            Alg::HmacSha256 => hmac::HMAC_SHA256,
            Alg::HmacSha384 => hmac::HMAC_SHA384,
            Alg::HmacSha512 => hmac::HMAC_SHA512,
        }
    }
}

/// A name in wire form (lowercase, uncompressed: TSIG's canonical form).
fn wire_name(name: &str) -> Result<Vec<u8>, String> {
    if name.is_empty() || name == "." {
        return Ok(vec![0]);
    }
    let labels = dns::labels(name).ok_or_else(|| format!("invalid name \"{name}\""))?;
    let mut out = Vec::with_capacity(name.len() + 2);
    for l in labels {
        out.push(l.len() as u8);
        out.extend(l.bytes().map(|b| b.to_ascii_lowercase()));
    }
    out.push(0);
    Ok(out)
}

/// One record's fixed part and data.
fn record(out: &mut Vec<u8>, name: &[u8], rtype: u16, class: u16, ttl: u32, rdata: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&class.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(rdata);
}

/// A TXT record's data: one character-string (the challenge's value is
/// 43 bytes, well under 255).
fn txt(value: &str) -> Vec<u8> {
    let mut v = vec![value.len().min(255) as u8];
    v.extend_from_slice(&value.as_bytes()[..value.len().min(255)]);
    v
}

/// Add (`add`) or remove the TXT record `name` = `value` in `zone`: the
/// unsigned message.
fn update(
    id: u16,
    zone: &str,
    name: &str,
    value: &str,
    ttl: u32,
    add: bool,
) -> Result<Vec<u8>, String> {
    let mut m = Vec::with_capacity(128);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&UPDATE.to_be_bytes());
    // One zone, no prerequisite, one update, no additional record (yet).
    m.extend_from_slice(&[0, 1, 0, 0, 0, 1, 0, 0]);
    m.extend_from_slice(&wire_name(zone)?);
    m.extend_from_slice(&SOA.to_be_bytes());
    m.extend_from_slice(&IN.to_be_bytes());
    let owner = wire_name(name)?;
    match add {
        true => record(&mut m, &owner, TXT, IN, ttl, &txt(value)),
        // Class NONE: delete this record (RFC 2136 section 2.5.4).
        false => record(&mut m, &owner, TXT, NONE, 0, &txt(value)),
    }
    Ok(m)
}

/// The TSIG variables (RFC 8945 section 4.3.3) after the message.
fn variables(key: &TsigKey, signed: u64, error: u16) -> Result<Vec<u8>, String> {
    let mut v = wire_name(&key.name)?;
    v.extend_from_slice(&ANY.to_be_bytes());
    v.extend_from_slice(&0u32.to_be_bytes());
    v.extend_from_slice(&wire_name(key.alg.name())?);
    v.extend_from_slice(&signed.to_be_bytes()[2..]);
    v.extend_from_slice(&FUDGE.to_be_bytes());
    v.extend_from_slice(&error.to_be_bytes());
    v.extend_from_slice(&0u16.to_be_bytes());
    Ok(v)
}

/// Sign `msg` with `key` at `signed` (seconds since the epoch): the
/// message with its TSIG record, and the MAC (the reply's is over it).
fn sign(mut msg: Vec<u8>, key: &TsigKey, signed: u64) -> Result<(Vec<u8>, Vec<u8>), String> {
    let k = hmac::Key::new(key.alg.ring(), &key.secret);
    let mut ctx = hmac::Context::with_key(&k);
    ctx.update(&msg);
    ctx.update(&variables(key, signed, 0)?);
    let mac = ctx.sign().as_ref().to_vec();
    let mut rdata = wire_name(key.alg.name())?;
    rdata.extend_from_slice(&signed.to_be_bytes()[2..]);
    rdata.extend_from_slice(&FUDGE.to_be_bytes());
    rdata.extend_from_slice(&(mac.len() as u16).to_be_bytes());
    rdata.extend_from_slice(&mac);
    rdata.extend_from_slice(&msg[..2]);
    rdata.extend_from_slice(&[0, 0, 0, 0]);
    record(&mut msg, &wire_name(&key.name)?, TSIG, ANY, 0, &rdata);
    let ar = u16::from_be_bytes([msg[10], msg[11]]) + 1;
    msg[10..12].copy_from_slice(&ar.to_be_bytes());
    Ok((msg, mac))
}

/// Where the name at `at` ends (pointers end it).
fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)? as usize;
        match len & 0xc0 {
            0 if len == 0 => return Some(at + 1),
            0 => at += 1 + len,
            0xc0 => return Some(at + 2),
            _ => return None,
        }
    }
}

/// The records of a message: (start, type, data range), past the first
/// section (zone or question), in order.
fn records(msg: &[u8]) -> Option<Vec<(usize, u16, std::ops::Range<usize>)>> {
    let count = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]) as usize;
    if msg.len() < 12 {
        return None;
    }
    let mut at = 12;
    for _ in 0..count(4) {
        at = skip_name(msg, at)? + 4;
    }
    let n = count(6) + count(8) + count(10);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let start = at;
        let fixed = skip_name(msg, at)?;
        let f = msg.get(fixed..fixed + 10)?;
        let rtype = u16::from_be_bytes([f[0], f[1]]);
        let len = u16::from_be_bytes([f[8], f[9]]) as usize;
        let data = fixed + 10..fixed + 10 + len;
        msg.get(data.clone())?;
        at = data.end;
        out.push((start, rtype, data));
    }
    Some(out)
}

/// Check a reply's TSIG against the request's MAC: `Err` says why not.
fn verify(reply: &[u8], key: &TsigKey, request_mac: &[u8]) -> Result<(), String> {
    let recs = records(reply).ok_or("malformed DNS reply")?;
    let Some((start, TSIG, data)) = recs.last().cloned() else {
        return Err("the reply is not signed".into());
    };
    let rd = &reply[data];
    let alg_end = skip_name(rd, 0).ok_or("malformed TSIG")?;
    let f = rd.get(alg_end..alg_end + 10).ok_or("malformed TSIG")?;
    let signed = u64::from_be_bytes([0, 0, f[0], f[1], f[2], f[3], f[4], f[5]]);
    let mac_len = u16::from_be_bytes([f[8], f[9]]) as usize;
    let mac = rd
        .get(alg_end + 10..alg_end + 10 + mac_len)
        .ok_or("malformed TSIG")?;
    let rest = rd.get(alg_end + 10 + mac_len..).ok_or("malformed TSIG")?;
    if rest.len() < 6 {
        return Err("malformed TSIG".into());
    }
    let error = u16::from_be_bytes([rest[2], rest[3]]);
    if error != 0 {
        return Err(format!(
            "the server refused the signature (TSIG error {error})"
        ));
    }
    let mut body = reply[..start].to_vec();
    let ar = u16::from_be_bytes([body[10], body[11]]).saturating_sub(1);
    body[10..12].copy_from_slice(&ar.to_be_bytes());
    // The original ID stands in the header.
    body[..2].copy_from_slice(&rest[..2]);
    let k = hmac::Key::new(key.alg.ring(), &key.secret);
    let mut ctx = hmac::Context::with_key(&k);
    ctx.update(&(request_mac.len() as u16).to_be_bytes());
    ctx.update(request_mac);
    ctx.update(&body);
    ctx.update(&variables(key, signed, error)?);
    let want = ctx.sign();
    use subtle::ConstantTimeEq;
    if mac.len() < 10 || !bool::from(want.as_ref().ct_eq(mac)) {
        return Err("the reply's TSIG signature does not verify".into());
    }
    Ok(())
}

/// One exchange over TCP: the reply.
async fn exchange(server: std::net::SocketAddr, msg: &[u8]) -> Result<Vec<u8>, String> {
    let run = async {
        let mut s = tokio::net::TcpStream::connect(server).await?;
        let mut out = (msg.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(msg);
        s.write_all(&out).await?;
        let len = s.read_u16().await? as usize;
        let mut reply = vec![0; len];
        s.read_exact(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    };
    match tokio::time::timeout(TIMEOUT, run).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(format!(
            "DNS server {server}: {}",
            crate::core::errlog::errno_text(&e)
        )),
        Err(_) => Err(format!("DNS server {server} timed out")),
    }
}

fn id() -> u16 {
    let mut b = [0u8; 2];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    u16::from_be_bytes(b)
}

/// The zone `name` is in: the configured one, else the nearest ancestor
/// (or itself) the server answers SOA records for.
pub async fn zone_of(u: &DnsUpdate, name: &str) -> Result<String, String> {
    if let Some(z) = &u.zone {
        return Ok(z.clone());
    }
    let mut candidate = name.trim_end_matches('.');
    loop {
        let q =
            dns::query(id(), candidate, SOA).ok_or_else(|| format!("invalid name \"{name}\""))?;
        let reply = exchange(u.server, &q).await?;
        let h = dns::header(&reply).ok_or("malformed DNS reply")?;
        if h.rcode == 0
            && u16::from_be_bytes([reply[6], reply[7]]) > 0
            && records(&reply).is_some_and(|r| r.iter().any(|(_, t, _)| *t == SOA))
        {
            return Ok(candidate.to_ascii_lowercase());
        }
        candidate = match candidate.split_once('.') {
            Some((_, up)) if !up.is_empty() => up,
            _ => return Err(format!("no zone found for \"{name}\" on {}", u.server)),
        };
    }
}

/// Add or remove the TXT record `name` = `value`.
pub async fn set_txt(u: &DnsUpdate, name: &str, value: &str, add: bool) -> Result<(), String> {
    let zone = zone_of(u, name).await?;
    let msg = update(id(), &zone, name, value, u.ttl, add)?;
    let (msg, mac) = match &u.key {
        Some(k) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let (m, mac) = sign(msg, k, now)?;
            (m, Some(mac))
        }
        None => (msg, None),
    };
    let reply = exchange(u.server, &msg).await?;
    let h = dns::header(&reply).ok_or("malformed DNS reply")?;
    if reply[..2] != msg[..2] {
        return Err("DNS reply for another message".into());
    }
    if h.rcode != 0 {
        let why = match h.rcode {
            9 => "not authoritative for the zone, or the key is not accepted (NOTAUTH)",
            10 => "the name is outside the zone (NOTZONE)",
            r => dns::strerror(r),
        };
        return Err(format!(
            "DNS server {} refused the update of \"{name}\" in zone \"{zone}\": {why}",
            u.server
        ));
    }
    if let (Some(k), Some(mac)) = (&u.key, mac) {
        verify(&reply, k, &mac)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> TsigKey {
        TsigKey {
            name: "vireo-key".into(),
            alg: Alg::HmacSha256,
            secret: b"0123456789abcdef0123456789abcdef".to_vec(),
        }
    }

    #[test]
    fn update_messages_have_one_zone_and_one_change() {
        let m = update(
            7,
            "example.test",
            "_acme-challenge.a.example.test",
            "v",
            60,
            true,
        )
        .unwrap();
        assert_eq!(&m[..4], &[0, 7, 0x28, 0]);
        assert_eq!(&m[4..12], &[0, 1, 0, 0, 0, 1, 0, 0]);
        let recs = records(&m).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].1, TXT);
        assert_eq!(&m[recs[0].2.clone()], b"\x01v");
        let del = update(7, "example.test", "x.example.test", "v", 60, false).unwrap();
        let r = &records(&del).unwrap()[0];
        let class_at = skip_name(&del, r.0).unwrap() + 2;
        assert_eq!(&del[class_at..class_at + 2], &NONE.to_be_bytes());
    }

    /// A reply the way a server signs it: its MAC over the request's MAC,
    /// the reply and the variables.
    fn signed_reply(request: &[u8], request_mac: &[u8], k: &TsigKey, tamper: bool) -> Vec<u8> {
        let mut body = request[..12].to_vec();
        body[2] |= 0x80;
        body[4..12].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
        let signed = 1_700_000_000u64;
        let key = hmac::Key::new(k.alg.ring(), &k.secret);
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(&(request_mac.len() as u16).to_be_bytes());
        ctx.update(request_mac);
        ctx.update(&body);
        ctx.update(&variables(k, signed, 0).unwrap());
        let mut mac = ctx.sign().as_ref().to_vec();
        if tamper {
            mac[0] ^= 1;
        }
        let mut rdata = wire_name(k.alg.name()).unwrap();
        rdata.extend_from_slice(&signed.to_be_bytes()[2..]);
        rdata.extend_from_slice(&FUDGE.to_be_bytes());
        rdata.extend_from_slice(&(mac.len() as u16).to_be_bytes());
        rdata.extend_from_slice(&mac);
        rdata.extend_from_slice(&request[..2]);
        rdata.extend_from_slice(&[0, 0, 0, 0]);
        let mut out = body;
        record(&mut out, &wire_name(&k.name).unwrap(), TSIG, ANY, 0, &rdata);
        out[11] = 1;
        out
    }

    #[test]
    fn signed_updates_and_their_replies_verify() {
        let k = key();
        let m = update(9, "example.test", "a.example.test", "v", 60, true).unwrap();
        let (signed, mac) = sign(m.clone(), &k, 1_700_000_000).unwrap();
        assert_eq!(&signed[10..12], &[0, 1]);
        let recs = records(&signed).unwrap();
        assert_eq!(recs.last().unwrap().1, TSIG);
        // The MAC is over the unsigned message and the variables.
        let key = hmac::Key::new(hmac::HMAC_SHA256, &k.secret);
        let mut ctx = hmac::Context::with_key(&key);
        ctx.update(&m);
        ctx.update(&variables(&k, 1_700_000_000, 0).unwrap());
        assert_eq!(ctx.sign().as_ref(), &mac[..]);
        assert_eq!(
            verify(&signed_reply(&signed, &mac, &k, false), &k, &mac),
            Ok(())
        );
        assert!(verify(&signed_reply(&signed, &mac, &k, true), &k, &mac).is_err());
        let mut unsigned = signed_reply(&signed, &mac, &k, false);
        unsigned.truncate(12);
        unsigned[11] = 0;
        assert!(verify(&unsigned, &k, &mac).is_err());
    }
}
