//! `log_format`: compiled line templates and nginx's value escaping.

use crate::core::vars::{Segment, Template, Var, VarSource, Vars};

/// How variable values are escaped in a log line (`log_format ... escape=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Escape {
    /// `"`, `\` and bytes below 0x20 or above 0x7e become `\xHH`; an unset
    /// (empty) value is logged as `-`.
    Default,
    /// JSON string escaping; an unset value is logged as nothing.
    Json,
    /// Values are copied raw; an unset value is logged as nothing.
    None,
}

/// A named, compiled `log_format`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFormat {
    pub name: String,
    pub template: Template,
    pub escape: Escape,
}

/// nginx's predefined `combined` format.
const COMBINED: &str = "$remote_addr - $remote_user [$time_local] \
    \"$request\" $status $body_bytes_sent \"$http_referer\" \"$http_user_agent\"";

impl LogFormat {
    /// Compile a format; `parts` are the directive's string arguments,
    /// joined without separator as nginx does (each part is parsed on its
    /// own, so a variable cannot straddle two parts).
    pub fn new(
        name: &str,
        escape: Escape,
        parts: &[&str],
        vars: &mut Vars,
    ) -> Result<LogFormat, String> {
        let template = Template::compile_parts(parts, vars)?;
        Ok(LogFormat {
            name: name.to_string(),
            template,
            escape,
        })
    }

    /// The predefined `combined` format.
    pub fn combined(vars: &mut Vars) -> LogFormat {
        LogFormat::new("combined", Escape::Default, &[COMBINED], vars)
            .expect("the combined format compiles")
    }

    /// Append one log line, with its trailing `'\n'`, to `out`.
    ///
    /// Literal text is copied as is; each variable value is escaped
    /// according to [`Escape`]. The request context writes nothing for an
    /// unset variable, so with [`Escape::Default`] an empty value shows as
    /// `-` (nginx shows `-` for "not found" values); `$uri` is always found
    /// (empty for a request refused for its URI).
    pub fn render(&self, src: &dyn VarSource, out: &mut Vec<u8>) {
        for seg in self.template.segments() {
            match seg {
                Segment::Lit(l) => out.extend_from_slice(l),
                Segment::Var(v) => {
                    let start = out.len();
                    src.var(v, out);
                    if out.len() == start {
                        if self.escape == Escape::Default && *v != Var::Uri {
                            out.push(b'-');
                        }
                    } else {
                        match self.escape {
                            Escape::Default => escape_default(out, start),
                            Escape::Json => escape_json(out, start),
                            Escape::None => {}
                        }
                    }
                }
            }
        }
        out.push(b'\n');
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Bytes the default escaping turns into `\xHH`.
static DEFAULT_ESCAPED: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let printable = i >= 0x20 && i < 0x7f;
        t[i] = !printable || i == b'"' as usize || i == b'\\' as usize;
        i += 1;
    }
    t
};

fn needs_default_escape(b: u8) -> bool {
    DEFAULT_ESCAPED[usize::from(b)]
}

/// Extra bytes JSON escaping adds for `b`.
fn json_extra(b: u8) -> usize {
    match b {
        b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 1,
        0..=0x1f => 5,
        _ => 0,
    }
}

/// Escape `out[start..]` in place: grow the vector by the extra room needed
/// and rewrite from the back, so no scratch buffer is used.
fn expand_in_place(
    out: &mut Vec<u8>,
    start: usize,
    extra: usize,
    mut emit: impl FnMut(u8, &mut [u8; 6]) -> usize,
) {
    if extra == 0 {
        return;
    }
    let old_len = out.len();
    out.resize(old_len + extra, 0);
    let mut w = out.len();
    let mut tmp = [0u8; 6];
    for r in (start..old_len).rev() {
        let n = emit(out[r], &mut tmp);
        w -= n;
        out[w..w + n].copy_from_slice(&tmp[..n]);
    }
    debug_assert_eq!(w, start);
}

fn escape_default(out: &mut Vec<u8>, start: usize) {
    let count = out[start..]
        .iter()
        .filter(|&&b| needs_default_escape(b))
        .count();
    expand_in_place(out, start, count * 3, |b, t| {
        if needs_default_escape(b) {
            *t = [
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
                0,
                0,
            ];
            4
        } else {
            t[0] = b;
            1
        }
    });
}

fn escape_json(out: &mut Vec<u8>, start: usize) {
    let extra: usize = out[start..].iter().map(|&b| json_extra(b)).sum();
    expand_in_place(out, start, extra, |b, t| {
        let short = match b {
            b'"' => b'"',
            b'\\' => b'\\',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0x08 => b'b',
            0x0c => b'f',
            0..=0x1f => {
                *t = [
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0xf)],
                ];
                return 6;
            }
            _ => {
                t[0] = b;
                return 1;
            }
        };
        t[0] = b'\\';
        t[1] = short;
        2
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::vars::Var;
    use std::collections::HashMap;

    pub(crate) struct Src(pub HashMap<Var, Vec<u8>>);

    impl VarSource for Src {
        fn var(&self, var: &Var, out: &mut Vec<u8>) {
            if let Some(v) = self.0.get(var) {
                out.extend_from_slice(v);
            }
        }
    }

    fn src(pairs: &[(&str, &[u8])]) -> Src {
        Src(pairs
            .iter()
            .map(|(n, v)| (Var::lookup(n).unwrap(), v.to_vec()))
            .collect())
    }

    fn line(f: &LogFormat, s: &Src) -> String {
        let mut out = Vec::new();
        f.render(s, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn combined_text() {
        let f = LogFormat::combined(&mut Vars::new(crate::modules::MODULES));
        assert_eq!(f.name, "combined");
        assert_eq!(f.escape, Escape::Default);
        assert_eq!(
            f.template.source(),
            "$remote_addr - $remote_user [$time_local] \"$request\" $status \
             $body_bytes_sent \"$http_referer\" \"$http_user_agent\""
        );
        let s = src(&[
            ("remote_addr", b"127.0.0.1"),
            ("time_local", b"21/Nov/2026:22:35:38 +0000"),
            ("request", b"GET /a?b=1 HTTP/1.1"),
            ("status", b"200"),
            ("body_bytes_sent", b"612"),
            ("http_user_agent", b"curl/8.5.0"),
        ]);
        assert_eq!(
            line(&f, &s),
            "127.0.0.1 - - [21/Nov/2026:22:35:38 +0000] \"GET /a?b=1 HTTP/1.1\" 200 612 \
             \"-\" \"curl/8.5.0\"\n"
        );
    }

    #[test]
    fn multi_part_and_errors() {
        let f = LogFormat::new(
            "m",
            Escape::None,
            &["$status ", "${uri}x"],
            &mut Vars::new(crate::modules::MODULES),
        )
        .unwrap();
        let s = src(&[("status", b"404"), ("uri", b"/u")]);
        assert_eq!(line(&f, &s), "404 /ux\n");
        // A variable cannot straddle two parts: "$" ends the first.
        assert_eq!(
            LogFormat::new(
                "bad",
                Escape::Default,
                &["$", "uri"],
                &mut Vars::new(crate::modules::MODULES)
            )
            .unwrap_err(),
            "invalid variable name"
        );
    }

    #[test]
    fn default_escaping() {
        let f = LogFormat::new(
            "d",
            Escape::Default,
            &["\"$http_user_agent\" \\ $uri"],
            &mut Vars::new(crate::modules::MODULES),
        )
        .unwrap();
        let s = src(&[
            ("http_user_agent", b"a\"b\\c\x01\x7f\xe9 ~"),
            ("uri", b"/plain"),
        ]);
        assert_eq!(
            line(&f, &s),
            "\"a\\x22b\\x5Cc\\x01\\x7F\\xE9 ~\" \\ /plain\n"
        );
    }

    #[test]
    fn json_escaping() {
        let f = LogFormat::new(
            "j",
            Escape::Json,
            &["{\"ua\":\"$http_user_agent\",\"u\":\"$remote_user\"}"],
            &mut Vars::new(crate::modules::MODULES),
        )
        .unwrap();
        let s = src(&[(
            "http_user_agent",
            b"q\"b\\n\n\r\t\x08\x0c\x01\x1f\xc3\xa9\x7f",
        )]);
        assert_eq!(
            line(&f, &s),
            "{\"ua\":\"q\\\"b\\\\n\\n\\r\\t\\b\\f\\u0001\\u001F\u{e9}\u{7f}\",\"u\":\"\"}\n"
        );
    }

    #[test]
    fn no_escaping() {
        let f = LogFormat::new(
            "n",
            Escape::None,
            &["[$http_x] [$remote_user]"],
            &mut Vars::new(crate::modules::MODULES),
        )
        .unwrap();
        let s = src(&[("http_x", b"a\"b\\\x01")]);
        assert_eq!(line(&f, &s), "[a\"b\\\x01] []\n");
    }

    #[test]
    fn render_appends() {
        let f = LogFormat::new(
            "a",
            Escape::Default,
            &["$uri"],
            &mut Vars::new(crate::modules::MODULES),
        )
        .unwrap();
        let s = src(&[("uri", b"/\"")]);
        let mut out = b"prefix\"".to_vec();
        f.render(&s, &mut out);
        assert_eq!(out, b"prefix\"/\\x22\n");
    }
}
