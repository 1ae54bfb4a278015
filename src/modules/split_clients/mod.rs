//! `split_clients`: a variable whose value is chosen by the MurmurHash2 of
//! a string (for A/B testing), bucket for bucket as nginx's
//! ngx_http_split_clients_module chooses.

pub mod conf;

use crate::core::module::Module;
use crate::core::request::Request;
use crate::core::vars::{Computed, Template, VarSource};

/// nginx's `ngx_murmur_hash2`: MurmurHash2, 32 bits, seed 0.
pub fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// One part: a hash below `bound` picks it (`None`: `*`, the rest).
#[derive(Debug)]
pub struct Part {
    pub bound: Option<u32>,
    pub value: Box<[u8]>,
}

/// One `split_clients` block.
#[derive(Debug, Default)]
pub struct Split {
    pub source: Template,
    pub parts: Vec<Part>,
}

impl Split {
    /// Turn percents (hundredths) into nginx's cumulative bounds: each part
    /// adds `percent * 0xffffffff / 10000`. `Err(i)` when part `i` takes
    /// the total over 100%.
    pub fn bounds(percents: &[Option<u32>]) -> Result<Vec<Option<u32>>, usize> {
        let mut sum = 0u32;
        let mut last = 0u32;
        let mut out = Vec::with_capacity(percents.len());
        for (i, p) in percents.iter().enumerate() {
            sum = match p {
                Some(p) => sum + p,
                None => 10000,
            };
            if sum > 10000 {
                return Err(i);
            }
            out.push(p.map(|p| {
                last = last.wrapping_add((u64::from(p) * 0xffff_ffff / 10000) as u32);
                last
            }));
        }
        Ok(out)
    }

    /// The value for a key's hash (none when the parts add to less than
    /// 100% and the hash falls beyond them).
    pub fn pick(&self, hash: u32) -> Option<&[u8]> {
        self.parts
            .iter()
            .find(|p| p.bound.is_none_or(|b| hash < b))
            .map(|p| &p.value[..])
    }
}

impl Computed for Split {
    fn compute(&self, _req: &Request<'_>, outer: &dyn VarSource, out: &mut Vec<u8>) {
        let mut key = Vec::new();
        self.source.render(outer, &mut key);
        if let Some(v) = self.pick(murmur2(&key)) {
            out.extend_from_slice(v);
        }
    }
}

/// `split_clients`: variables for splitting clients into groups.
pub static MODULE: Module = Module {
    name: "split_clients",
    nginx_default: &["http_split_clients_module"],
    directives: &[conf::DIRECTIVES],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_known_vectors() {
        // MurmurHash2 (Austin Appleby's reference, seed 0).
        assert_eq!(murmur2(b""), 0);
        for (s, want) in VECTORS {
            assert_eq!(murmur2(s.as_bytes()), *want, "{s}");
        }
    }

    const VECTORS: &[(&str, u32)] = &[
        ("a", 0x9268_5f5e),
        ("ab", 0x1aa1_4063),
        ("abc", 0x1357_7c9b),
        ("abcd", 0x2687_3021),
        ("hello", 0xe561_29cb),
        ("The quick brown fox jumps over the lazy dog", 0x2127_29d0),
    ];

    fn split(parts: &[(Option<u32>, &str)]) -> Split {
        let bounds = Split::bounds(&parts.iter().map(|p| p.0).collect::<Vec<_>>()).unwrap();
        Split {
            source: Template::default(),
            parts: bounds
                .into_iter()
                .zip(parts)
                .map(|(bound, p)| Part {
                    bound,
                    value: p.1.as_bytes().into(),
                })
                .collect(),
        }
    }

    #[test]
    fn nginx_distribution() {
        // nginx's split_clients.t: $connection 1..20 over 51.2% / 10% / *.
        let s = split(&[
            (Some(5120), "first"),
            (Some(1000), "second"),
            (None, "third"),
        ]);
        let mut n = [0; 3];
        for c in 1..=20 {
            match s.pick(murmur2(c.to_string().as_bytes())).unwrap() {
                b"first" => n[0] += 1,
                b"second" => n[1] += 1,
                _ => n[2] += 1,
            }
        }
        assert_eq!(n, [12, 2, 6]);
    }

    #[test]
    fn bounds_as_nginx() {
        assert_eq!(
            Split::bounds(&[Some(5000), None]).unwrap(),
            [Some(0x7fff_ffff), None]
        );
        assert_eq!(Split::bounds(&[Some(10000)]).unwrap(), [Some(0xffff_ffff)]);
        assert!(Split::bounds(&[Some(6000), Some(4001)]).is_err());
        assert!(Split::bounds(&[Some(6000), None, Some(1)]).is_err());
        // Parts short of 100%: a hash beyond them picks nothing.
        let s = split(&[(Some(1), "a")]);
        assert_eq!(s.pick(0), Some(&b"a"[..]));
        assert_eq!(s.pick(u32::MAX), None);
    }
}
