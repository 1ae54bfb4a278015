//! Tokeniser for the nginx configuration grammar.
//!
//! The rules follow nginx's reader:
//!
//! * words are separated by space, tab, CR and LF; `;` and `{` also end an
//!   unquoted word, while `}` only counts when it starts a token;
//! * `#` starts a comment running to the end of the line, but only where a
//!   token could start (`a#b` is one word);
//! * a token starting with `"` or `'` runs to the matching quote, which must be
//!   followed by whitespace, `;`, `{` or `)` (a `)` then begins the next word);
//! * a backslash protects the next character from being interpreted; when the
//!   value is built, `\"`, `\'`, `\\`, `\n`, `\r` and `\t` are replaced and any
//!   other backslash pair is kept as written (so `\.php$` keeps its backslash),
//!   in quoted and unquoted words alike;
//! * a `{` directly after `$` belongs to the word (`${var}`), and its closing
//!   `}` does too, since `}` never ends a word.

use std::sync::Arc;

use super::ast::{Arg, ConfError, Span};

/// What a token is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// A word (directive name or argument).
    Word(Arg),
    /// `;` ending a simple directive.
    Semicolon,
    /// `{` opening a block.
    BlockStart,
    /// `}` closing a block.
    BlockEnd,
    /// End of input, reached between tokens.
    Eof,
}

/// A token and the line it starts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub line: u32,
}

/// Streaming tokeniser over one text.
pub struct Lexer<'a> {
    text: &'a str,
    src: &'a [u8],
    pos: usize,
    line: u32,
    file: Arc<str>,
    /// A closing quote was just read: the next character must separate.
    need_space: bool,
    /// Terminator that ended the previous word, to be returned next.
    pending: Option<Token>,
    /// Text comes from a command-line parameter rather than a file.
    param: bool,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

impl<'a> Lexer<'a> {
    /// A lexer over `text`, naming `file` in spans and errors.
    pub fn new(text: &'a str, file: Arc<str>) -> Self {
        Lexer {
            text,
            src: text.as_bytes(),
            pos: 0,
            line: 1,
            file,
            need_space: false,
            pending: None,
            param: false,
        }
    }

    /// Mark the text as a command-line parameter (`-g`): an incomplete
    /// directive at the end is then reported as the end of the parameter.
    pub fn param_mode(mut self, on: bool) -> Self {
        self.param = on;
        self
    }

    /// Name used in spans.
    pub fn file(&self) -> &Arc<str> {
        &self.file
    }

    /// A span at the current line.
    pub fn span(&self) -> Span {
        Span {
            file: self.file.clone(),
            line: self.line,
        }
    }

    /// Whether input is a command-line parameter.
    pub fn is_param(&self) -> bool {
        self.param
    }

    /// The message nginx gives when input ends inside a directive.
    pub fn eof_in_directive_msg(&self) -> &'static str {
        if self.param {
            "unexpected end of parameter, expecting \";\""
        } else {
            "unexpected end of file, expecting \";\" or \"}\""
        }
    }

    fn err(&self, msg: impl Into<String>) -> ConfError {
        ConfError::new(msg, &self.span())
    }

    fn tok(&self, kind: TokenKind) -> Token {
        Token {
            kind,
            line: self.line,
        }
    }

    /// The next token. After `Eof` has been returned, further calls return
    /// `Eof` again.
    pub fn next_token(&mut self) -> Result<Token, ConfError> {
        if let Some(t) = self.pending.take() {
            return Ok(t);
        }
        loop {
            let Some(&c) = self.src.get(self.pos) else {
                if self.need_space {
                    // A quoted word was read but no terminator followed.
                    return Err(self.err(self.eof_in_directive_msg()));
                }
                return Ok(self.tok(TokenKind::Eof));
            };
            self.pos += 1;
            if c == b'\n' {
                self.line += 1;
            }

            if self.need_space {
                self.need_space = false;
                match c {
                    b';' => return Ok(self.tok(TokenKind::Semicolon)),
                    b'{' => return Ok(self.tok(TokenKind::BlockStart)),
                    // `)` right after a quote starts the next word.
                    b')' => {}
                    c if is_space(c) => continue,
                    _ => {
                        let ch = self
                            .text
                            .get(self.pos - 1..)
                            .and_then(|s| s.chars().next())
                            .unwrap_or(char::from(c));
                        return Err(self.err(format!("unexpected \"{ch}\"")));
                    }
                }
            }

            match c {
                c if is_space(c) => continue,
                b';' => return Ok(self.tok(TokenKind::Semicolon)),
                b'{' => return Ok(self.tok(TokenKind::BlockStart)),
                b'}' => return Ok(self.tok(TokenKind::BlockEnd)),
                b'#' => {
                    // Skip to (not past) the end of line so it is counted.
                    while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
                        self.pos += 1;
                    }
                    continue;
                }
                _ => return self.word(c),
            }
        }
    }

    /// Read a word whose first byte `first` has just been consumed.
    fn word(&mut self, first: u8) -> Result<Token, ConfError> {
        let line = self.line;
        let quote = matches!(first, b'"' | b'\'').then_some(first);
        let start = if quote.is_some() {
            self.pos
        } else {
            self.pos - 1
        };
        let mut escaped = first == b'\\';
        let mut variable = first == b'$';

        loop {
            let Some(&c) = self.src.get(self.pos) else {
                return Err(self.err(self.eof_in_directive_msg()));
            };
            self.pos += 1;
            if c == b'\n' {
                self.line += 1;
            }
            if escaped {
                escaped = false;
                continue;
            }
            if c == b'{' && variable {
                continue;
            }
            variable = false;
            match c {
                b'\\' => {
                    escaped = true;
                    continue;
                }
                b'$' => {
                    variable = true;
                    continue;
                }
                _ => {}
            }
            let end = match quote {
                Some(q) => {
                    if c != q {
                        continue;
                    }
                    self.need_space = true;
                    self.pos - 1
                }
                None => {
                    if !(is_space(c) || c == b';' || c == b'{') {
                        continue;
                    }
                    match c {
                        b';' => self.pending = Some(self.tok(TokenKind::Semicolon)),
                        b'{' => self.pending = Some(self.tok(TokenKind::BlockStart)),
                        _ => {}
                    }
                    self.pos - 1
                }
            };
            let value = unescape(&self.src[start..end]);
            return Ok(Token {
                kind: TokenKind::Word(Arg {
                    value,
                    quoted: quote.is_some(),
                }),
                line,
            });
        }
    }
}

/// Build a word's value: `\"`, `\'`, `\\` lose their backslash, `\n`, `\r`,
/// `\t` become control characters, other backslashes stay.
fn unescape(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if c == b'\\' {
            match raw.get(i + 1) {
                Some(&n @ (b'"' | b'\'' | b'\\')) => {
                    out.push(n);
                    i += 2;
                    continue;
                }
                Some(b'n') => {
                    out.push(b'\n');
                    i += 2;
                    continue;
                }
                Some(b'r') => {
                    out.push(b'\r');
                    i += 2;
                    continue;
                }
                Some(b't') => {
                    out.push(b'\t');
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
        i += 1;
    }
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

/// Tokenise a whole text, up to and including `Eof`.
pub fn tokenize(text: &str, file: &str) -> Result<Vec<Token>, ConfError> {
    let mut lx = Lexer::new(text, Arc::from(file));
    let mut out = Vec::new();
    loop {
        let t = lx.next_token()?;
        let eof = t.kind == TokenKind::Eof;
        out.push(t);
        if eof {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compact rendering: words as `w`/`"w"` (quoted), terminators as themselves.
    fn toks(text: &str) -> Vec<String> {
        tokenize(text, "t.conf")
            .unwrap()
            .into_iter()
            .filter_map(|t| match t.kind {
                TokenKind::Word(a) if a.quoted => Some(format!("\"{}\"", a.value)),
                TokenKind::Word(a) => Some(a.value),
                TokenKind::Semicolon => Some(";".into()),
                TokenKind::BlockStart => Some("{".into()),
                TokenKind::BlockEnd => Some("}".into()),
                TokenKind::Eof => None,
            })
            .collect()
    }

    fn err(text: &str) -> String {
        tokenize(text, "t.conf").unwrap_err().to_string()
    }

    #[test]
    fn words_and_punctuation() {
        assert_eq!(
            toks("a b;c{d;}  e\t\tf\r\n;"),
            ["a", "b", ";", "c", "{", "d", ";", "}", "e", "f", ";"]
        );
        assert_eq!(toks(""), Vec::<String>::new());
        assert_eq!(toks("  \n\t "), Vec::<String>::new());
        // `}` inside a word is plain text
        assert_eq!(toks("a} b;"), ["a}", "b", ";"]);
    }

    #[test]
    fn line_numbers() {
        let t = tokenize("a\n\nb c;\n{\n}\n", "t.conf").unwrap();
        let lines: Vec<u32> = t.iter().map(|t| t.line).collect();
        assert_eq!(lines, [1, 3, 3, 3, 4, 5, 6]);
        // a quoted word spanning lines starts on its first line
        let t = tokenize("x \"a\nb\"\n;", "t.conf").unwrap();
        assert_eq!(t[1].line, 1);
        assert_eq!(
            t[1].kind,
            TokenKind::Word(Arg {
                value: "a\nb".into(),
                quoted: true
            })
        );
        assert_eq!(t[2].line, 3);
    }

    #[test]
    fn quotes() {
        assert_eq!(toks(r#"a "b c" 'd e';"#), ["a", "\"b c\"", "\"d e\"", ";"]);
        assert_eq!(
            toks(r#"a "{" ';' "}";"#),
            ["a", "\"{\"", "\";\"", "\"}\"", ";"]
        );
        assert_eq!(toks(r#"a "";"#), ["a", "\"\"", ";"]);
        // closing quote directly followed by `;`, `{` or `)`
        assert_eq!(toks(r#"a "b";"#), ["a", "\"b\"", ";"]);
        assert_eq!(toks(r#"a "b"{}"#), ["a", "\"b\"", "{", "}"]);
        assert_eq!(
            toks(r#"if ($a = "b") {}"#),
            ["if", "($a", "=", "\"b\"", ")", "{", "}"]
        );
        // quote characters inside a word are plain
        assert_eq!(toks(r#"a b"c' d;"#), ["a", "b\"c'", "d", ";"]);
        // the other quote kind inside quotes is plain
        assert_eq!(
            toks(r#"a "it's" '"x"';"#),
            ["a", "\"it's\"", "\"\"x\"\"", ";"]
        );
    }

    #[test]
    fn quote_must_be_followed_by_separator() {
        assert_eq!(err(r#"a "a"b;"#), "unexpected \"b\" in t.conf:1");
        assert_eq!(err("a\n'a'#;"), "unexpected \"#\" in t.conf:2");
        assert_eq!(err("a \"x\"}"), "unexpected \"}\" in t.conf:1");
        assert_eq!(err("a \"x\"é;"), "unexpected \"é\" in t.conf:1");
    }

    #[test]
    fn escapes() {
        assert_eq!(
            toks(r#"a "q\"q" 'q\'q' "b\\s" "n\nr\rt\t";"#),
            ["a", "\"q\"q\"", "\"q'q\"", "\"b\\s\"", "\"n\nr\rt\t\"", ";"]
        );
        // unknown escapes keep their backslash (regexes)
        assert_eq!(
            toks(r#"a "\.php$" \.(gif)$ "\d";"#),
            ["a", "\"\\.php$\"", "\\.(gif)$", "\"\\d\"", ";"]
        );
        // unquoted words get the same escape processing
        assert_eq!(toks(r#"a b\"c d\\e \n;"#), ["a", "b\"c", "d\\e", "\n", ";"]);
        // an escaped separator does not end the word; its backslash stays
        assert_eq!(toks(r"a b\ c\;d;"), ["a", "b\\ c\\;d", ";"]);
        // an escaped quote does not close the string
        assert_eq!(toks(r#"a "x\" y";"#), ["a", "\"x\" y\"", ";"]);
        // a word may start with a backslash
        assert_eq!(toks(r"a \;b;"), ["a", "\\;b", ";"]);
        // an escaped newline still counts as a line
        let t = tokenize("a\\\nb;\nc;", "t.conf").unwrap();
        assert_eq!(t.last().unwrap().line, 3);
    }

    #[test]
    fn comments() {
        assert_eq!(toks("# hi { ; }\na; # x \"\n# y\nb;"), ["a", ";", "b", ";"]);
        assert_eq!(toks("a#b c;"), ["a#b", "c", ";"]);
        assert_eq!(toks("a \"#b\";"), ["a", "\"#b\"", ";"]);
        assert_eq!(toks("a;#end"), ["a", ";"]);
        let t = tokenize("#c\n#c\nx;", "t.conf").unwrap();
        assert_eq!(t[0].line, 3);
    }

    #[test]
    fn variables_with_braces() {
        assert_eq!(toks("set $a ${b}c;"), ["set", "$a", "${b}c", ";"]);
        assert_eq!(toks("return 200 x${y}z;"), ["return", "200", "x${y}z", ";"]);
        assert_eq!(toks("a \"${host}x\";"), ["a", "\"${host}x\"", ";"]);
        assert_eq!(toks("a ${b} {}"), ["a", "${b}", "{", "}"]);
        // `{` after a full variable name does open a block
        assert_eq!(toks("a $b{}"), ["a", "$b", "{", "}"]);
        // an escaped `$` does not protect a following `{`
        assert_eq!(toks("a \\${}"), ["a", "\\$", "{", "}"]);
    }

    #[test]
    fn regex_braces() {
        assert_eq!(
            toks(r#"location ~ "^/a{2,3}$" {}"#),
            ["location", "~", "\"^/a{2,3}$\"", "{", "}"]
        );
        // unquoted `{` ends the word and opens a block
        assert_eq!(
            toks(r"rewrite ^/(\d{2})/ /x;"),
            ["rewrite", "^/(\\d", "{", "2})/", "/x", ";"]
        );
    }

    #[test]
    fn end_of_file_errors() {
        let eof = "unexpected end of file, expecting \";\" or \"}\"";
        assert_eq!(err("a \"b\n\n"), format!("{eof} in t.conf:3"));
        assert_eq!(err("a 'b"), format!("{eof} in t.conf:1"));
        assert_eq!(err("a\nb"), format!("{eof} in t.conf:2"));
        assert_eq!(err("a \"b\""), format!("{eof} in t.conf:1"));
        assert_eq!(err("a \\"), format!("{eof} in t.conf:1"));
        let mut lx = Lexer::new("a", Arc::from("<command line>")).param_mode(true);
        assert_eq!(
            lx.next_token().unwrap_err().to_string(),
            "unexpected end of parameter, expecting \";\" in <command line>:1"
        );
    }

    #[test]
    fn eof_repeats() {
        let mut lx = Lexer::new("a;", Arc::from("t"));
        for _ in 0..2 {
            lx.next_token().unwrap();
        }
        assert_eq!(lx.next_token().unwrap().kind, TokenKind::Eof);
        assert_eq!(lx.next_token().unwrap().kind, TokenKind::Eof);
    }

    #[test]
    fn utf8_kept() {
        assert_eq!(
            toks("a \"héllo wörld\" ünï;"),
            ["a", "\"héllo wörld\"", "ünï", ";"]
        );
    }
}
