//! Addresses and networks as `allow`, `deny` and `set_real_ip_from` write
//! them: `10.0.0.1`, `10.0.0.0/8`, `2001:db8::/32`, `unix:`.

use crate::core::request::Peer;
use std::net::IpAddr;

/// A network (address and mask), or unix-socket clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cidr {
    V4 { addr: u32, mask: u32 },
    V6 { addr: u128, mask: u128 },
    Unix,
}

/// A client address in the form networks compare against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    V4(u32),
    V6(u128),
    Unix,
}

impl Client {
    /// `peer` as a client; an IPv4-mapped IPv6 address is taken as IPv4
    /// when `map_v4`.
    pub fn of(peer: Peer, map_v4: bool) -> Client {
        match peer {
            Peer::Unix => Client::Unix,
            Peer::Tcp(a) => match a.ip() {
                IpAddr::V4(v4) => Client::V4(v4.into()),
                IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                    Some(v4) if map_v4 => Client::V4(v4.into()),
                    _ => Client::V6(v6.into()),
                },
            },
        }
    }
}

impl Cidr {
    /// Parse an address, a network or `unix:`. The second value is true when
    /// the address has bits set outside the mask (`10.1.2.3/8`), which nginx
    /// warns about; the network keeps only the masked bits.
    pub fn parse(s: &str) -> Result<(Cidr, bool), String> {
        if s == "unix:" {
            return Ok((Cidr::Unix, false));
        }
        let bad = || format!("invalid address or network \"{s}\"");
        let (ip, bits) = match s.split_once('/') {
            Some((ip, bits)) => (ip, Some(bits)),
            None => (s, None),
        };
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let bits: u32 = match bits {
            None => max,
            Some(b) if !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()) => {
                b.parse().ok().filter(|&n| n <= max).ok_or_else(bad)?
            }
            Some(_) => return Err(bad()),
        };
        Ok(match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                (
                    Cidr::V4 {
                        addr: a & mask,
                        mask,
                    },
                    a & !mask != 0,
                )
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                (
                    Cidr::V6 {
                        addr: a & mask,
                        mask,
                    },
                    a & !mask != 0,
                )
            }
        })
    }

    /// One address.
    pub fn host(ip: IpAddr) -> Cidr {
        match ip {
            IpAddr::V4(a) => Cidr::V4 {
                addr: u32::from(a),
                mask: u32::MAX,
            },
            IpAddr::V6(a) => Cidr::V6 {
                addr: u128::from(a),
                mask: u128::MAX,
            },
        }
    }

    pub fn matches(&self, c: &Client) -> bool {
        match (self, c) {
            (Cidr::V4 { addr, mask }, Client::V4(a)) => a & mask == *addr,
            (Cidr::V6 { addr, mask }, Client::V6(a)) => a & mask == *addr,
            (Cidr::Unix, Client::Unix) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(a: &str) -> Client {
        Client::of(
            Peer::Tcp(std::net::SocketAddr::new(a.parse().unwrap(), 0)),
            true,
        )
    }

    #[test]
    fn parse_and_match() {
        let (n, low) = Cidr::parse("192.168.0.0/16").unwrap();
        assert!(!low);
        assert!(n.matches(&c("192.168.200.1")));
        assert!(!n.matches(&c("192.169.0.1")));
        assert!(!n.matches(&c("::1")));
        let (h, _) = Cidr::parse("10.0.0.1").unwrap();
        assert!(h.matches(&c("10.0.0.1")) && !h.matches(&c("10.0.0.2")));
        let (z, _) = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(z.matches(&c("1.2.3.4")));
        let (v6, _) = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.matches(&c("2001:db8:ffff::1")));
        assert!(!v6.matches(&c("2001:db9::1")));
        let (all6, _) = Cidr::parse("::/0").unwrap();
        assert!(all6.matches(&c("::1")) && !all6.matches(&c("1.2.3.4")));
        // Mapped IPv4 compares as IPv4.
        assert!(n.matches(&c("::ffff:192.168.1.1")));
        assert_eq!(Cidr::parse("unix:").unwrap().0, Cidr::Unix);
        assert!(Cidr::Unix.matches(&Client::of(Peer::Unix, true)));
        assert!(!Cidr::Unix.matches(&c("127.0.0.1")));
    }

    #[test]
    fn low_bits_and_errors() {
        let (n, low) = Cidr::parse("10.1.2.3/8").unwrap();
        assert!(low);
        assert_eq!(
            n,
            Cidr::V4 {
                addr: 0x0a00_0000,
                mask: 0xff00_0000
            }
        );
        assert!(Cidr::parse("2001:db8::1/32").unwrap().1);
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "host.example",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
