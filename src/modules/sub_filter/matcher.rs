//! The streaming search and replace of `sub_filter`: literal strings,
//! matched without regard to ASCII case, the leftmost match first and, of
//! those starting at one byte, the string configured first (as nginx's);
//! matches may span the body's pieces. Only bytes that cannot begin a match
//! still to complete are held back (at most the longest string less one).

use crate::core::message::transform::Transform;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Input, MatchKind};
use std::sync::Arc;

/// The strings to look for (already lowercase or not: matching ignores ASCII
/// case) and their replacements, in configuration order.
#[derive(Debug, Clone)]
pub struct Pairs {
    pub strings: Vec<Vec<u8>>,
    pub replacements: Vec<Vec<u8>>,
}

/// The automaton for `strings` (none empty).
pub fn automaton(strings: &[&[u8]]) -> Arc<AhoCorasick> {
    Arc::new(
        AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostFirst)
            .ascii_case_insensitive(true)
            .build(strings)
            .expect("literal strings always build"),
    )
}

/// One response's search and replace.
#[derive(Debug)]
pub struct Substitute {
    pairs: Pairs,
    /// Over the strings still looked for, by their index in `active`.
    ac: Option<Arc<AhoCorasick>>,
    /// Indexes into `pairs` of the strings the automaton holds.
    active: Vec<usize>,
    /// The longest active string.
    max: usize,
    /// `sub_filter_once`: a string is replaced once, then no longer looked for.
    once: bool,
    /// Input not searched to its end yet.
    held: Vec<u8>,
}

impl Substitute {
    /// `ac` is the automaton of every string of `pairs`, when it is at hand.
    pub fn new(pairs: Pairs, ac: Option<Arc<AhoCorasick>>, once: bool) -> Substitute {
        let active: Vec<usize> = (0..pairs.strings.len()).collect();
        let mut s = Substitute {
            ac,
            max: 0,
            active,
            once,
            held: Vec::new(),
            pairs,
        };
        s.rebuild(s.ac.is_none());
        s
    }

    /// Recompute the longest string, and the automaton when `build`.
    fn rebuild(&mut self, build: bool) {
        self.max = self
            .active
            .iter()
            .map(|&i| self.pairs.strings[i].len())
            .max()
            .unwrap_or(0);
        if self.active.is_empty() {
            self.ac = None;
        } else if build {
            let strings: Vec<&[u8]> = self
                .active
                .iter()
                .map(|&i| &self.pairs.strings[i][..])
                .collect();
            self.ac = Some(automaton(&strings));
        }
    }

    /// Replace in `buf` (input held back, then the new piece), writing to
    /// `out`; returns how many bytes of `buf` were consumed. With `last`, every
    /// byte is: no later input can complete a match.
    fn run(&mut self, buf: &[u8], out: &mut Vec<u8>, last: bool) -> usize {
        let mut pos = 0;
        while let Some(ac) = &self.ac {
            let Some(m) = ac.find(Input::new(buf).span(pos..buf.len())) else {
                break;
            };
            // A string configured earlier, or one starting earlier, could
            // still match there with input yet to come.
            if !last && m.start() + self.max > buf.len() {
                out.extend_from_slice(&buf[pos..m.start()]);
                return m.start();
            }
            let which = self.active[m.pattern().as_usize()];
            out.extend_from_slice(&buf[pos..m.start()]);
            out.extend_from_slice(&self.pairs.replacements[which]);
            pos = m.end();
            if self.once {
                self.active.remove(m.pattern().as_usize());
                self.rebuild(true);
            }
        }
        let keep = if last || self.ac.is_none() {
            0
        } else {
            self.max - 1
        };
        let end = buf.len().saturating_sub(keep).max(pos);
        out.extend_from_slice(&buf[pos..end]);
        end
    }
}

impl Transform for Substitute {
    fn write(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.held.is_empty() {
            let used = self.run(input, out, false);
            self.held.extend_from_slice(&input[used..]);
        } else {
            let mut buf = std::mem::take(&mut self.held);
            buf.extend_from_slice(input);
            let used = self.run(&buf, out, false);
            buf.drain(..used);
            self.held = buf;
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        let buf = std::mem::take(&mut self.held);
        self.run(&buf, out, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(pairs: &[(&str, &str)], once: bool) -> Substitute {
        let pairs = Pairs {
            strings: pairs.iter().map(|p| p.0.as_bytes().to_vec()).collect(),
            replacements: pairs.iter().map(|p| p.1.as_bytes().to_vec()).collect(),
        };
        Substitute::new(pairs, None, once)
    }

    /// The body through `s`, cut into pieces at every `cut`.
    fn through(mut s: Substitute, body: &str, cuts: &[usize]) -> String {
        let mut out = Vec::new();
        let mut at = 0;
        for &c in cuts.iter().chain(std::iter::once(&body.len())) {
            s.write(&body.as_bytes()[at..c], &mut out);
            at = c;
        }
        s.finish(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn as_nginx_replaces() {
        let many = |p: &[(&str, &str)], body| through(sub(p, false), body, &[]);
        assert_eq!(many(&[("foo", "bar")], "foofoo"), "barbar");
        assert_eq!(
            through(sub(&[("foo", "bar")], true), "foofoo", &[]),
            "barfoo"
        );
        assert_eq!(many(&[("foo", "bar")], "FOOfo"), "barfo");
        assert_eq!(many(&[("abac", "_")], "abaabac"), "aba_");
        assert_eq!(many(&[("aab", "_")], "aaaab"), "aa_");
        assert_eq!(
            many(&[("aabb", "+"), ("aaabb", "-")], "aabbaaabbaabb"),
            "+-+"
        );
        // At one byte, the string configured first; a match starting
        // earlier wins.
        assert_eq!(many(&[("abc", "1"), ("abcd", "2")], "abcd"), "1d");
        assert_eq!(many(&[("abcd", "2"), ("abc", "1")], "abcd"), "2");
        assert_eq!(many(&[("cd", "1"), ("abcd", "2")], "abcd"), "2");
        let once = |p: &[(&str, &str)], body| through(sub(p, true), body, &[]);
        assert_eq!(
            once(&[("aab", "+"), ("yyz", "-")], "yyzyyzaabaabyyz"),
            "-yyz+aabyyz"
        );
        assert_eq!(
            many(
                &[("abpatternyz", "+"), ("abpa", "-"), ("tter", "*")],
                "abpatternyzXabpatternyX"
            ),
            "+X-*nyX"
        );
    }

    #[test]
    fn every_cut_gives_the_same_answer() {
        let pairs = [
            ("abpatternyz", "+"),
            ("abpa", "-"),
            ("tter", "*"),
            ("x", "_"),
        ];
        let body = "abpatternyzABCDEabpatternyABCDExxabpa";
        let whole = through(sub(&pairs, false), body, &[]);
        assert_eq!(whole, "+ABCDE-*nyABCDE__-");
        for a in 0..=body.len() {
            for b in a..=body.len() {
                assert_eq!(
                    through(sub(&pairs, false), body, &[a, b]),
                    whole,
                    "cut {a} {b}"
                );
            }
        }
        let once = through(sub(&pairs, true), body, &[]);
        for a in 0..=body.len() {
            assert_eq!(through(sub(&pairs, true), body, &[a]), once, "cut {a}");
        }
    }

    #[test]
    fn holds_back_at_most_the_longest_string_less_one() {
        let mut s = sub(&[("abcdef", "!")], false);
        let mut out = Vec::new();
        s.write(b"0123456789abc", &mut out);
        assert_eq!(out, b"01234567");
        s.write(b"deX", &mut out);
        assert_eq!(out, b"0123456789a");
        s.write(b"YZ", &mut out);
        assert_eq!(out, b"0123456789abc");
        s.finish(&mut out);
        assert_eq!(out, b"0123456789abcdeXYZ");
    }
}
