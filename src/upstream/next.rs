//! `proxy_next_upstream` and `fastcgi_next_upstream`: the kinds of failure
//! after which a request is tried on the next peer.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::values::bad_arg;

/// A set of failure kinds (a bit set). One kind is a set of one; `OFF` is the
/// empty set, and the kind of a failure that is never retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextUpstream(u16);

impl NextUpstream {
    pub const OFF: Self = Self(0);
    pub const ERROR: Self = Self(1);
    pub const TIMEOUT: Self = Self(1 << 1);
    pub const INVALID_HEADER: Self = Self(1 << 2);
    pub const HTTP_500: Self = Self(1 << 3);
    pub const HTTP_502: Self = Self(1 << 4);
    pub const HTTP_503: Self = Self(1 << 5);
    pub const HTTP_504: Self = Self(1 << 6);
    pub const HTTP_403: Self = Self(1 << 7);
    pub const HTTP_404: Self = Self(1 << 8);
    pub const HTTP_429: Self = Self(1 << 9);
    pub const NON_IDEMPOTENT: Self = Self(1 << 10);

    /// The default of both directives: `error timeout`.
    pub const DEFAULT: Self = Self::ERROR.with(Self::TIMEOUT);
    /// The kinds `proxy_next_upstream` accepts: all of them.
    pub const PROXY: Self = Self((1 << 11) - 1);
    /// The kinds `fastcgi_next_upstream` accepts: all but `http_502` and
    /// `http_504`, as nginx.
    pub const FASTCGI: Self = Self(Self::PROXY.0 & !(Self::HTTP_502.0 | Self::HTTP_504.0));

    /// The word of each kind in the directives.
    const WORDS: [(&'static str, Self); 11] = [
        ("error", Self::ERROR),
        ("timeout", Self::TIMEOUT),
        ("invalid_header", Self::INVALID_HEADER),
        ("http_500", Self::HTTP_500),
        ("http_502", Self::HTTP_502),
        ("http_503", Self::HTTP_503),
        ("http_504", Self::HTTP_504),
        ("http_403", Self::HTTP_403),
        ("http_404", Self::HTTP_404),
        ("http_429", Self::HTTP_429),
        ("non_idempotent", Self::NON_IDEMPOTENT),
    ];

    /// Both sets together.
    pub const fn with(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether the set holds a failure of `kind`.
    pub fn has(self, kind: Self) -> bool {
        self.0 & kind.0 != 0
    }

    /// The kind of an upstream's reply status: `OFF` for a status no word names.
    pub fn of_status(status: u16) -> Self {
        match status {
            500 => Self::HTTP_500,
            502 => Self::HTTP_502,
            503 => Self::HTTP_503,
            504 => Self::HTTP_504,
            403 => Self::HTTP_403,
            404 => Self::HTTP_404,
            429 => Self::HTTP_429,
            _ => Self::OFF,
        }
    }

    /// The directive's arguments: words of the kinds in `accepted`, or `off`
    /// alone.
    pub fn parse(d: &Directive, accepted: Self) -> Result<Self, ConfError> {
        if d.args.len() == 1 && d.arg(0) == "off" {
            return Ok(Self::OFF);
        }
        let mut set = Self::OFF;
        for a in d.arg_strs() {
            match Self::WORDS
                .iter()
                .find(|(w, k)| *w == a && accepted.has(*k))
            {
                Some((_, k)) => set = set.with(*k),
                None => return Err(bad_arg(d, a)),
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::NextUpstream as N;
    use crate::conf::ast::Directive;

    fn parse(accepted: N, args: &[&str]) -> Result<N, String> {
        let d = Directive::test("x_next_upstream", args, 3);
        N::parse(&d, accepted).map_err(|e| e.to_string())
    }

    #[test]
    fn words_make_the_set() {
        let s = parse(N::PROXY, &["error", "http_502", "non_idempotent"]).unwrap();
        assert!(s.has(N::ERROR) && s.has(N::HTTP_502) && s.has(N::NON_IDEMPOTENT));
        assert!(!s.has(N::TIMEOUT) && !s.has(N::HTTP_504));
        assert_eq!(s, N::ERROR.with(N::HTTP_502).with(N::NON_IDEMPOTENT));
        let all: Vec<&str> = N::WORDS.iter().map(|(w, _)| *w).collect();
        assert_eq!(parse(N::PROXY, &all), Ok(N::PROXY));
    }

    #[test]
    fn off_alone_is_the_empty_set() {
        assert_eq!(parse(N::PROXY, &["off"]), Ok(N::OFF));
        assert_eq!(parse(N::FASTCGI, &["off"]), Ok(N::OFF));
        assert!(!N::OFF.has(N::ERROR));
        assert_eq!(
            parse(N::PROXY, &["error", "off"]),
            Err("invalid parameter \"off\" in \"x_next_upstream\" directive in t.conf:3".into())
        );
    }

    #[test]
    fn fastcgi_refuses_502_and_504() {
        for w in ["http_502", "http_504"] {
            assert_eq!(
                parse(N::FASTCGI, &["error", w]),
                Err(format!(
                    "invalid parameter \"{w}\" in \"x_next_upstream\" directive in t.conf:3"
                ))
            );
        }
        let others: Vec<&str> = N::WORDS
            .iter()
            .map(|(w, _)| *w)
            .filter(|w| !matches!(*w, "http_502" | "http_504"))
            .collect();
        assert_eq!(parse(N::FASTCGI, &others), Ok(N::FASTCGI));
    }

    #[test]
    fn unknown_word_is_an_error() {
        assert_eq!(
            parse(N::PROXY, &["timeout", "http_501"]),
            Err(
                "invalid parameter \"http_501\" in \"x_next_upstream\" directive in t.conf:3"
                    .into()
            )
        );
    }

    #[test]
    fn statuses_have_their_kind() {
        for (s, k) in [
            (500, N::HTTP_500),
            (502, N::HTTP_502),
            (503, N::HTTP_503),
            (504, N::HTTP_504),
            (403, N::HTTP_403),
            (404, N::HTTP_404),
            (429, N::HTTP_429),
        ] {
            assert_eq!(N::of_status(s), k);
            assert!(N::PROXY.has(N::of_status(s)));
        }
        assert_eq!(N::of_status(200), N::OFF);
        assert_eq!(N::of_status(501), N::OFF);
        assert!(!N::PROXY.has(N::of_status(200)));
        assert!(!N::FASTCGI.has(N::of_status(502)));
    }
}
