//! `geo`: a variable whose value depends on the client address (or on an
//! address another variable holds), looked up in networks (the longest
//! prefix wins) or, with `ranges`, in IPv4 address ranges. With `proxy`, a
//! connection from a listed address is taken for the X-Forwarded-For
//! address, as nginx's ngx_http_geo_module.

pub mod conf;

use crate::core::module::Module;
use crate::core::request::{Peer, Request};
use crate::core::vars::{Computed, Template, VarSource};
use crate::modules::access::cidr::Cidr;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// A value as written (geo values are plain text, no variables).
pub type Value = Arc<[u8]>;

/// The address nginx looks up when it has none to use (a unix-socket
/// client, or an address variable that does not hold an address).
pub const INADDR_NONE: u32 = u32::MAX;

/// Networks by prefix length: `v4[len]` maps masked addresses to values.
#[derive(Debug)]
pub struct Nets {
    v4: Vec<HashMap<u32, Value>>,
    v6: Vec<HashMap<u128, Value>>,
}

impl Default for Nets {
    fn default() -> Nets {
        Nets {
            v4: vec![HashMap::new(); 33],
            v6: vec![HashMap::new(); 129],
        }
    }
}

fn len_of_v4(mask: u32) -> usize {
    mask.count_ones() as usize
}

fn len_of_v6(mask: u128) -> usize {
    mask.count_ones() as usize
}

impl Nets {
    /// Insert `net`; the value it replaces, if it was there.
    pub fn insert(&mut self, net: Cidr, v: Value) -> Option<Value> {
        match net {
            Cidr::V4 { addr, mask } => self.v4[len_of_v4(mask)].insert(addr, v),
            Cidr::V6 { addr, mask } => self.v6[len_of_v6(mask)].insert(addr, v),
            Cidr::Unix => None,
        }
    }

    /// Remove `net`; false when it was not there.
    pub fn remove(&mut self, net: Cidr) -> bool {
        match net {
            Cidr::V4 { addr, mask } => self.v4[len_of_v4(mask)].remove(&addr).is_some(),
            Cidr::V6 { addr, mask } => self.v6[len_of_v6(mask)].remove(&addr).is_some(),
            Cidr::Unix => false,
        }
    }

    /// The value of the longest network holding `a`.
    pub fn find_v4(&self, a: u32) -> Option<&Value> {
        (0..=32usize).rev().find_map(|len| {
            let m = &self.v4[len];
            if m.is_empty() {
                return None;
            }
            let mask = u32::MAX.checked_shl(32 - len as u32).unwrap_or(0);
            m.get(&(a & mask))
        })
    }

    pub fn find_v6(&self, a: u128) -> Option<&Value> {
        (0..=128usize).rev().find_map(|len| {
            let m = &self.v6[len];
            if m.is_empty() {
                return None;
            }
            let mask = u128::MAX.checked_shl(128 - len as u32).unwrap_or(0);
            m.get(&(a & mask))
        })
    }
}

/// One range inside a /16: low 16 bits of its first and last address.
#[derive(Clone, Debug)]
pub struct Range {
    pub start: u16,
    pub end: u16,
    pub value: Value,
}

/// `ranges`: per /16 (the high 16 bits), its ranges in order, never
/// overlapping (nginx's layout, so adding and deleting act as nginx's do).
#[derive(Debug, Default)]
pub struct Ranges {
    pub low: HashMap<u16, Vec<Range>>,
}

/// Split `start..=end` into its pieces per /16: (high, s, e).
fn pieces(start: u32, end: u32) -> Vec<(u16, u16, u16)> {
    let mut out = Vec::new();
    let mut n = start;
    loop {
        let h = (n >> 16) as u16;
        let s = if n == start { n as u16 } else { 0 };
        let e = if (n | 0xffff) > end {
            end as u16
        } else {
            0xffff
        };
        out.push((h, s, e));
        if h == 0xffff {
            break;
        }
        n = (n + 0x10000) & 0xffff_0000;
        if n > end {
            break;
        }
    }
    out
}

fn dotted(h: u16, l: u16) -> String {
    format!("{}.{}.{}.{}", h >> 8, h & 0xff, l >> 8, l & 0xff)
}

impl Ranges {
    /// Add `start..=end` (nginx's ngx_http_geo_add_range): a range inside
    /// an existing one splits it, the same range replaces its value (with
    /// a warning in `warn`), any other overlap is an error.
    pub fn add(
        &mut self,
        start: u32,
        end: u32,
        value: &Value,
        net: &str,
        warn: &mut Vec<String>,
    ) -> Result<(), String> {
        for (h, s, e) in pieces(start, end) {
            let a = self.low.entry(h).or_default();
            let new = Range {
                start: s,
                end: e,
                value: value.clone(),
            };
            let mut i = a.len();
            loop {
                if i == 0 {
                    a.insert(0, new);
                    break;
                }
                i -= 1;
                let r = a[i].clone();
                if e < r.start {
                    continue;
                }
                if s > r.end {
                    a.insert(i + 1, new);
                    break;
                }
                if s == r.start && e == r.end {
                    warn.push(format!(
                        "duplicate range \"{net}\", value: \"{}\", old value: \"{}\"",
                        String::from_utf8_lossy(value),
                        String::from_utf8_lossy(&r.value)
                    ));
                    a[i].value = value.clone();
                    break;
                }
                if s > r.start && e < r.end {
                    a[i].end = s - 1;
                    a.insert(i + 1, new);
                    a.insert(
                        i + 2,
                        Range {
                            start: e + 1,
                            end: r.end,
                            value: r.value,
                        },
                    );
                    break;
                }
                if s == r.start && e < r.end {
                    a[i].start = e + 1;
                    a.insert(i, new);
                    break;
                }
                if s > r.start && e == r.end {
                    a[i].end = s - 1;
                    a.insert(i + 1, new);
                    break;
                }
                return Err(format!(
                    "range \"{net}\" overlaps \"{}-{}\"",
                    dotted(h, r.start),
                    dotted(h, r.end)
                ));
            }
        }
        Ok(())
    }

    /// Delete `start..=end` (each /16 piece must be a range as added);
    /// false when some piece was not there.
    pub fn delete(&mut self, start: u32, end: u32) -> bool {
        let mut all = true;
        for (h, s, e) in pieces(start, end) {
            let Some(a) = self.low.get_mut(&h) else {
                all = false;
                continue;
            };
            match a.iter().position(|r| r.start == s && r.end == e) {
                Some(i) => {
                    a.remove(i);
                }
                None => all = false,
            }
        }
        all
    }

    pub fn find(&self, a: u32) -> Option<&Value> {
        let list = self.low.get(&((a >> 16) as u16))?;
        let n = a as u16;
        list.iter()
            .find(|r| n >= r.start && n <= r.end)
            .map(|r| &r.value)
    }
}

#[derive(Debug)]
pub enum Table {
    Nets(Nets),
    Ranges { ranges: Ranges, default: Value },
}

/// One `geo` block.
#[derive(Debug)]
pub struct Geo {
    /// `geo $address $var`: the address variable; else the client address.
    pub source: Option<Template>,
    /// `proxy`: addresses whose X-Forwarded-For is believed.
    pub proxies: Vec<Cidr>,
    pub proxy_recursive: bool,
    pub table: Table,
}

/// The address looked up, as nginx reads it: `None` when there is none (a
/// unix-socket client, a variable holding no address).
fn parse_ip(b: &[u8]) -> Option<IpAddr> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

impl Geo {
    fn address(&self, req: &Request<'_>, outer: &dyn VarSource) -> Option<IpAddr> {
        let addr = match &self.source {
            None => match req.client_addr() {
                Peer::Tcp(a) => a.ip(),
                Peer::Unix => return None,
            },
            Some(t) => {
                let mut v = Vec::new();
                t.render(outer, &mut v);
                parse_ip(&v)?
            }
        };
        if self.proxies.is_empty() {
            return Some(addr);
        }
        let values: Vec<&[u8]> = req
            .head
            .headers()
            .filter(|(n, _)| n.eq_ignore_ascii_case(b"x-forwarded-for"))
            .map(|(_, v)| v)
            .collect();
        if values.is_empty() {
            return Some(addr);
        }
        let peer = Peer::Tcp(SocketAddr::new(addr, 0));
        Some(
            crate::modules::realip::forwarded(peer, &values, &self.proxies, self.proxy_recursive)
                .map_or(addr, |a| a.ip()),
        )
    }

    /// The value for `addr` (`None`: no address).
    pub fn lookup(&self, addr: Option<IpAddr>) -> &[u8] {
        let v4 = |a: Option<IpAddr>| match a {
            Some(IpAddr::V4(a)) => Some(u32::from(a)),
            Some(IpAddr::V6(a)) => a.to_ipv4_mapped().map(u32::from),
            None => Some(INADDR_NONE),
        };
        match &self.table {
            Table::Nets(n) => {
                let found = match v4(addr) {
                    Some(a) => n.find_v4(a),
                    None => match addr {
                        Some(IpAddr::V6(a)) => n.find_v6(u128::from(a)),
                        _ => None,
                    },
                };
                found.map_or(&[][..], |v| &v[..])
            }
            Table::Ranges { ranges, default } => {
                let a = v4(addr).unwrap_or(INADDR_NONE);
                ranges.find(a).unwrap_or(default)
            }
        }
    }
}

impl Computed for Geo {
    fn compute(&self, req: &Request<'_>, outer: &dyn VarSource, out: &mut Vec<u8>) {
        let addr = self.address(req, outer);
        out.extend_from_slice(self.lookup(addr));
    }
}

/// `geo`: variables from client addresses.
pub static MODULE: Module = Module {
    name: "geo",
    nginx_default: &["http_geo_module"],
    directives: &[conf::DIRECTIVES],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Value {
        s.as_bytes().into()
    }

    fn net(s: &str) -> Cidr {
        Cidr::parse(s).unwrap().0
    }

    fn geo(table: Table) -> Geo {
        Geo {
            source: None,
            proxies: Vec::new(),
            proxy_recursive: false,
            table,
        }
    }

    fn look<'a>(g: &'a Geo, a: &str) -> &'a str {
        std::str::from_utf8(g.lookup(a.parse().ok())).unwrap()
    }

    #[test]
    fn longest_prefix_wins() {
        let mut n = Nets::default();
        n.insert(net("0.0.0.0/0"), v("world"));
        n.insert(net("::/0"), v("world6"));
        n.insert(net("10.0.0.0/8"), v("ten"));
        n.insert(net("10.1.0.0/16"), v("ten-one"));
        n.insert(net("10.1.2.3"), v("host"));
        n.insert(net("2001:db8::/32"), v("doc"));
        n.insert(net("2001:db8:1::/48"), v("doc1"));
        let g = geo(Table::Nets(n));
        assert_eq!(look(&g, "10.2.0.1"), "ten");
        assert_eq!(look(&g, "10.1.9.9"), "ten-one");
        assert_eq!(look(&g, "10.1.2.3"), "host");
        assert_eq!(look(&g, "11.0.0.1"), "world");
        assert_eq!(look(&g, "::ffff:10.1.2.3"), "host");
        assert_eq!(look(&g, "2001:db8:1::5"), "doc1");
        assert_eq!(look(&g, "2001:db8:2::5"), "doc");
        assert_eq!(look(&g, "2001:db9::"), "world6");
        // No address: 255.255.255.255.
        assert_eq!(look(&g, "unix:"), "world");
    }

    #[test]
    fn replace_and_delete() {
        let mut n = Nets::default();
        assert!(n.insert(net("192.168.0.0/16"), v("a")).is_none());
        assert_eq!(&*n.insert(net("192.168.0.0/16"), v("b")).unwrap(), b"a");
        assert!(n.remove(net("192.168.0.0/16")));
        assert!(!n.remove(net("192.168.0.0/16")));
        let g = geo(Table::Nets(n));
        assert_eq!(look(&g, "192.168.1.1"), "");
    }

    fn ranges(list: &[(&str, &str)]) -> Result<Ranges, String> {
        let mut r = Ranges::default();
        let mut warn = Vec::new();
        for (net, val) in list {
            let (a, b) = net.split_once('-').unwrap();
            let a: std::net::Ipv4Addr = a.parse().unwrap();
            let b: std::net::Ipv4Addr = b.parse().unwrap();
            r.add(a.into(), b.into(), &v(val), net, &mut warn)?;
        }
        Ok(r)
    }

    fn rlook(r: Ranges, a: &str) -> String {
        let g = geo(Table::Ranges {
            ranges: r,
            default: v("default"),
        });
        look(&g, a).to_string()
    }

    #[test]
    fn ranges_as_nginx_tests() {
        let ins = [
            ("127.0.0.0-127.0.0.255", "test"),
            ("127.0.0.1-127.0.0.2", "test2"),
            ("127.0.0.1-127.0.0.1", "loopback"),
        ];
        assert_eq!(rlook(ranges(&ins).unwrap(), "127.0.0.1"), "loopback");
        assert_eq!(rlook(ranges(&ins).unwrap(), "127.0.0.2"), "test2");
        assert_eq!(rlook(ranges(&ins).unwrap(), "127.0.0.3"), "test");
        assert_eq!(rlook(ranges(&ins).unwrap(), "127.0.0.0"), "test");
        let before = [
            ("127.0.0.0-127.0.0.255", "test"),
            ("127.0.0.0-127.0.0.1", "loopback"),
        ];
        assert_eq!(rlook(ranges(&before).unwrap(), "127.0.0.1"), "loopback");
        assert_eq!(rlook(ranges(&before).unwrap(), "127.0.0.2"), "test");
        let after = [
            ("127.0.0.0-127.0.0.255", "test"),
            ("127.0.0.1-127.0.0.255", "loopback"),
        ];
        assert_eq!(rlook(ranges(&after).unwrap(), "127.0.0.1"), "loopback");
        assert_eq!(rlook(ranges(&after).unwrap(), "127.0.0.0"), "test");
        // Across /16 boundaries; delete takes the same pieces away.
        let mut r = ranges(&[
            ("10.10.3.0-10.11.2.255", "foo"),
            ("10.12.3.0-10.13.2.255", "foo2"),
        ])
        .unwrap();
        assert!(r.delete(0x0a0a_0300, 0x0a0b_02ff));
        assert!(!r.delete(0x0a0a_0300, 0x0a0b_02ff));
        assert_eq!(rlook(r, "10.13.2.1"), "foo2");
        let r = ranges(&[("127.0.0.0-127.1.0.0", "x")]).unwrap();
        assert_eq!(rlook(r, "127.0.200.1"), "x");
        // Partial overlap is an error, as in nginx.
        let e = ranges(&[("1.0.0.0-1.0.0.10", "a"), ("1.0.0.5-1.0.0.20", "b")]).unwrap_err();
        assert_eq!(
            e,
            "range \"1.0.0.5-1.0.0.20\" overlaps \"1.0.0.0-1.0.0.10\""
        );
        // IPv6 and missing addresses look up the default.
        let r = ranges(&[("0.0.0.0-255.255.255.254", "test")]).unwrap();
        assert_eq!(rlook(r, "unix:"), "default");
        let r = ranges(&[("0.0.0.0-255.255.255.254", "test")]).unwrap();
        assert_eq!(rlook(r, "2001:db8::1"), "default");
    }

    #[test]
    fn range_pieces() {
        assert_eq!(
            pieces(0x0a0a_0300, 0x0a0b_02ff),
            [(0x0a0a, 0x0300, 0xffff), (0x0a0b, 0, 0x02ff)]
        );
        assert_eq!(pieces(0xffff_0000, 0xffff_fffe), [(0xffff, 0, 0xfffe)]);
        assert_eq!(pieces(5, 5), [(0, 5, 5)]);
    }
}
