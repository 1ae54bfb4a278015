//! Recoding tables (`charset_map`) and the recoders that use them: one-byte
//! to one-byte, one-byte to UTF-8 and UTF-8 to one-byte, piece by piece.

use crate::conf::ast::{ConfError, Directive};
use crate::core::message::transform::Transform;
use std::collections::HashMap;
use std::sync::Arc;

/// One way of a table.
#[derive(Debug)]
pub enum Table {
    /// One-byte charset to one-byte charset.
    Bytes(Box<[u8; 256]>),
    /// One-byte charset to UTF-8: each byte's UTF-8 text.
    ToUtf8(Box<[Box<[u8]>]>),
    /// UTF-8 to one-byte charset: code points above 0x7f by their byte.
    FromUtf8(HashMap<u32, u8>),
}

/// A `charset_map`: `from` → `to`, and back.
#[derive(Debug)]
pub struct CharsetMap {
    pub from: Arc<str>,
    pub to: Arc<str>,
    pub forward: Table,
    pub back: Table,
}

pub fn is_utf8(name: &str) -> bool {
    name.eq_ignore_ascii_case("utf-8")
}

fn hex(e: &Directive, v: &str) -> Result<u32, ConfError> {
    if v.is_empty() || v.len() > 8 {
        return Err(invalid(e, v));
    }
    u32::from_str_radix(v, 16).map_err(|_| invalid(e, v))
}

fn invalid(e: &Directive, v: &str) -> ConfError {
    ConfError::new(format!("invalid value \"{v}\""), &e.span)
}

/// Parse a `charset_map` block.
pub fn parse_map(d: &Directive) -> Result<CharsetMap, ConfError> {
    let (from, to) = (d.arg(0), d.arg(1));
    if is_utf8(from) {
        return Err(ConfError::new(
            format!(
                "\"charset_map\" from \"{from}\" is not supported: write the map as \"charset_map CHARSET utf-8\""
            ),
            &d.span,
        ));
    }
    let entries = d.block.as_deref().unwrap_or_default();
    let mut pairs = Vec::with_capacity(entries.len());
    for e in entries {
        if e.block.is_some() || e.args.len() != 1 {
            return Err(ConfError::new(
                format!("invalid parameters number in \"{}\"", e.name),
                &e.span,
            ));
        }
        let a = hex(e, &e.name)?;
        if a > 0xff {
            return Err(invalid(e, &e.name));
        }
        pairs.push((a as u8, e.arg(0), e));
    }
    let (forward, back) = if is_utf8(to) {
        let mut fwd: Vec<Box<[u8]>> = (0..256u32)
            .map(|b| Box::from(if b < 0x80 { [b as u8] } else { [b'?'] }.as_slice()))
            .collect();
        let mut back = HashMap::new();
        for (a, v, e) in pairs {
            if v.len() % 2 != 0 || v.len() > 8 {
                return Err(invalid(e, v));
            }
            let bytes: Vec<u8> = (0..v.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&v[i..i + 2], 16))
                .collect::<Result<_, _>>()
                .map_err(|_| invalid(e, v))?;
            let c = std::str::from_utf8(&bytes)
                .ok()
                .filter(|s| s.chars().count() == 1)
                .and_then(|s| s.chars().next())
                .ok_or_else(|| invalid(e, v))?;
            fwd[a as usize] = bytes.into_boxed_slice();
            back.insert(c as u32, a);
        }
        (Table::ToUtf8(fwd.into_boxed_slice()), Table::FromUtf8(back))
    } else {
        let mut fwd = Box::new([b'?'; 256]);
        let mut back = Box::new([b'?'; 256]);
        for i in 0..128u8 {
            fwd[i as usize] = i;
            back[i as usize] = i;
        }
        for (a, v, e) in pairs {
            let b = hex(e, v)?;
            if b > 0xff {
                return Err(invalid(e, v));
            }
            fwd[a as usize] = b as u8;
            back[b as usize] = a;
        }
        (Table::Bytes(fwd), Table::Bytes(back))
    };
    Ok(CharsetMap {
        from: Arc::from(from),
        to: Arc::from(to),
        forward,
        back,
    })
}

impl Table {
    /// Does recoding keep the length?
    pub fn same_length(&self) -> bool {
        matches!(self, Table::Bytes(_))
    }
}

/// Recodes a body piece by piece with one table, keeping a UTF-8 sequence
/// split between pieces until its end arrives.
#[derive(Debug)]
pub struct Recoder {
    maps: Arc<[Arc<CharsetMap>]>,
    /// Index into `maps`, and which way.
    map: usize,
    forward: bool,
    /// The start of a UTF-8 sequence the last piece ended in.
    saved: Vec<u8>,
}

impl Recoder {
    /// A recoder through the configured `maps`, else a built-in one.
    pub fn new(maps: Arc<[Arc<CharsetMap>]>, src: &str, dst: &str) -> Option<Recoder> {
        Self::within(maps, src, dst)
            .or_else(|| Self::within(super::builtin::MAPS.clone(), src, dst))
    }

    fn within(maps: Arc<[Arc<CharsetMap>]>, src: &str, dst: &str) -> Option<Recoder> {
        let (map, forward) = maps.iter().enumerate().find_map(|(i, m)| {
            if m.from.eq_ignore_ascii_case(src) && m.to.eq_ignore_ascii_case(dst) {
                Some((i, true))
            } else if m.from.eq_ignore_ascii_case(dst) && m.to.eq_ignore_ascii_case(src) {
                Some((i, false))
            } else {
                None
            }
        })?;
        Some(Recoder {
            maps,
            map,
            forward,
            saved: Vec::new(),
        })
    }

    pub fn table(&self) -> &Table {
        let m = &self.maps[self.map];
        if self.forward { &m.forward } else { &m.back }
    }
}

impl Transform for Recoder {
    /// Recode `input`, appending to `out`.
    fn write(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let m = self.maps[self.map].clone();
        let table = if self.forward { &m.forward } else { &m.back };
        match table {
            Table::Bytes(t) => out.extend(input.iter().map(|&b| t[b as usize])),
            Table::ToUtf8(t) => {
                for &b in input {
                    out.extend_from_slice(&t[b as usize]);
                }
            }
            Table::FromUtf8(t) => {
                if self.saved.is_empty() {
                    let used = from_utf8(t, input, out, false);
                    self.saved.extend_from_slice(&input[used..]);
                } else {
                    let mut joined = std::mem::take(&mut self.saved);
                    joined.extend_from_slice(input);
                    let used = from_utf8(t, &joined, out, false);
                    self.saved.extend_from_slice(&joined[used..]);
                }
            }
        }
    }

    /// The end of the body: an unfinished UTF-8 sequence becomes `?`.
    fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.saved.is_empty() {
            let m = self.maps[self.map].clone();
            if let Table::FromUtf8(t) = if self.forward { &m.forward } else { &m.back } {
                let saved = std::mem::take(&mut self.saved);
                from_utf8(t, &saved, out, true);
            }
        }
    }
}

/// Length of the UTF-8 sequence a lead byte starts; 0 when it is no lead byte.
fn seq_len(b: u8) -> usize {
    match b {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => 0,
    }
}

/// Recode UTF-8 `input` into a one-byte charset; returns how much was used
/// (all but an unfinished sequence at the end unless `last`). Characters the
/// table lacks become `&#N;`, invalid bytes `?`.
fn from_utf8(t: &HashMap<u32, u8>, input: &[u8], out: &mut Vec<u8>, last: bool) -> usize {
    let mut i = 0;
    while i < input.len() {
        let b = input[i];
        if b < 0x80 {
            out.push(b);
            i += 1;
            continue;
        }
        let n = seq_len(b);
        if n == 0 {
            out.push(b'?');
            i += 1;
            continue;
        }
        if i + n > input.len() {
            let rest = &input[i + 1..];
            if !last && rest.iter().all(|&c| c & 0xc0 == 0x80) {
                return i;
            }
        }
        match std::str::from_utf8(&input[i..(i + n).min(input.len())]) {
            Ok(s) => {
                let c = s.chars().next().unwrap_or('?') as u32;
                match t.get(&c) {
                    Some(&b) => out.push(b),
                    None => out.extend_from_slice(format!("&#{c};").as_bytes()),
                }
                i += n;
            }
            Err(_) => {
                out.push(b'?');
                i += 1;
            }
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::ast::Span;

    fn map(from: &str, to: &str, entries: &[(&str, &str)]) -> Directive {
        let mut d = Directive::test("charset_map", &[from, to], 1);
        d.block = Some(
            entries
                .iter()
                .enumerate()
                .map(|(i, (a, b))| Directive::test(a, &[b], i as u32 + 2))
                .collect(),
        );
        d
    }

    fn maps(d: &Directive) -> Arc<[Arc<CharsetMap>]> {
        Arc::from(vec![Arc::new(parse_map(d).unwrap())])
    }

    #[test]
    fn one_byte_both_ways() {
        let m = maps(&map("B", "A", &[("58", "59"), ("C1", "E1")]));
        let mut r = Recoder::new(m.clone(), "b", "a").unwrap();
        assert_eq!(r.all(b"XYZ\xc1\xc2"), b"YYZ\xe1?");
        let mut r = Recoder::new(m.clone(), "A", "B").unwrap();
        assert_eq!(r.all(b"XY\xe1"), b"XX\xc1");
        assert!(r.table().same_length());
        assert!(Recoder::new(m, "A", "C").is_none());
    }

    #[test]
    fn utf8_both_ways_split_anywhere() {
        // koi8-r а (C1), б (C2); € as three bytes.
        let m = maps(&map(
            "koi8-r",
            "utf-8",
            &[("C1", "D0B0"), ("C2", "D0B1"), ("80", "E282AC")],
        ));
        let mut r = Recoder::new(m.clone(), "koi8-r", "UTF-8").unwrap();
        assert_eq!(r.all(b"a\xc1\xc2\x80\xff"), "aаб€?".as_bytes());
        let text = "xаб€ж\u{1F600}".as_bytes();
        let want: &[u8] = b"x\xc1\xc2\x80&#1078;&#128512;";
        for cut in 0..text.len() {
            let mut r = Recoder::new(m.clone(), "utf-8", "koi8-r").unwrap();
            let mut out = Vec::new();
            r.write(&text[..cut], &mut out);
            r.write(&text[cut..], &mut out);
            r.finish(&mut out);
            assert_eq!(out, want, "cut at {cut}");
        }
        let mut r = Recoder::new(m, "utf-8", "koi8-r").unwrap();
        assert_eq!(r.all(b"\xd0\xff\xd0"), b"???");
    }

    #[test]
    fn bad_maps() {
        let e = parse_map(&map("a", "b", &[("100", "1")])).unwrap_err();
        assert!(e.to_string().contains("invalid value \"100\""), "{e}");
        let e = parse_map(&map("a", "utf-8", &[("C1", "D0")])).unwrap_err();
        assert!(e.to_string().contains("t.conf:2"), "{e}");
        let _ = Span::new("t.conf", 1);
    }
}
