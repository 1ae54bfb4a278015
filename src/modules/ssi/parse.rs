//! The SSI parser, sans-IO and streaming as nginx's: the document comes in
//! pieces; `<!--#command name="value" … -->` may span any number of them.
//! Text is handed out as it is seen (the bytes of a possible `<!--#` at a
//! piece's end are held until the next piece tells). A malformed command
//! is an error event, and what follows is skipped up to its `-->`.

use bytes::Bytes;

/// Longest command name, parameter name (nginx's limits).
const NAME_LEN: usize = 32;
/// Most parameters of one command.
const MAX_PARAMS: usize = 16;

const START: &[u8] = b"<!--#";

/// One SSI command as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub name: String,
    pub params: Vec<(String, Vec<u8>)>,
}

impl Command {
    pub fn param(&self, name: &str) -> Option<&[u8]> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// What the parser found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Text(Bytes),
    Command(Command),
    /// A malformed command: the message for the error log.
    Error(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Text,
    /// `n` bytes of `<!--#` seen.
    Start(usize),
    PreCommand,
    Command,
    PreParam,
    Param,
    PreEqual,
    PreValue,
    Value(u8),
    Escape(u8),
    PostValue,
    End0,
    End1,
    /// Skipping a malformed command up to `-->` (`n` bytes of it seen).
    Skip(usize),
}

/// The parser's state between pieces.
#[derive(Debug)]
pub struct Parser {
    st: St,
    cmd: Command,
    value: Vec<u8>,
    /// ssi_value_length.
    value_len: usize,
}

fn space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

impl Parser {
    pub fn new(value_len: usize) -> Parser {
        Parser {
            st: St::Text,
            cmd: Command {
                name: String::new(),
                params: Vec::new(),
            },
            value: Vec::new(),
            value_len,
        }
    }

    fn error(&mut self, msg: String, out: &mut Vec<Event>) {
        out.push(Event::Error(msg));
        self.st = St::Skip(0);
    }

    /// Parse one piece, appending what it completes to `out`.
    pub fn feed(&mut self, piece: &Bytes, out: &mut Vec<Event>) {
        let mut i = 0;
        // Start of the text run not yet handed out.
        let mut text = 0;
        while i < piece.len() {
            let b = piece[i];
            match self.st {
                St::Text => match memchr::memchr(b'<', &piece[i..]) {
                    Some(at) => {
                        i += at + 1;
                        self.st = St::Start(1);
                        continue;
                    }
                    None => {
                        i = piece.len();
                        continue;
                    }
                },
                St::Start(n) => {
                    if b == START[n] {
                        if n + 1 == START.len() {
                            // The command starts at i - 4 in this piece, or
                            // its `<!--` began in an earlier one.
                            let begin = (i + 1).saturating_sub(START.len());
                            if begin > text {
                                out.push(Event::Text(piece.slice(text..begin)));
                            }
                            self.st = St::PreCommand;
                            self.cmd.name.clear();
                            self.cmd.params.clear();
                        } else {
                            self.st = St::Start(n + 1);
                        }
                    } else {
                        // Not a command: what was held is text. Bytes held
                        // from a previous piece are handed out now.
                        let held_before = n.saturating_sub(i);
                        if held_before > 0 {
                            out.push(Event::Text(Bytes::copy_from_slice(&START[..held_before])));
                        }
                        self.st = St::Text;
                        if b == b'<' {
                            self.st = St::Start(1);
                        }
                    }
                    i += 1;
                    if self.st == St::PreCommand {
                        text = i;
                    }
                    continue;
                }
                St::PreCommand => {
                    if !space(b) {
                        if b == b'-' {
                            self.error("invalid SSI command".into(), out);
                            self.st = St::Skip(1);
                        } else {
                            self.cmd.name.push(b as char);
                            self.st = St::Command;
                        }
                    }
                }
                St::Command => {
                    if space(b) {
                        self.st = St::PreParam;
                    } else if b == b'-' {
                        self.st = St::End0;
                    } else if self.cmd.name.len() == NAME_LEN {
                        let msg = format!(
                            "the \"{}{}\" SSI command is too long",
                            self.cmd.name, b as char
                        );
                        self.error(msg, out);
                    } else {
                        self.cmd.name.push(b as char);
                    }
                }
                St::PreParam => {
                    if b == b'-' {
                        self.st = St::End0;
                    } else if !space(b) {
                        if self.cmd.params.len() == MAX_PARAMS {
                            let msg =
                                format!("too many SSI command parameters: \"{}\"", self.cmd.name);
                            self.error(msg, out);
                        } else {
                            self.cmd.params.push(((b as char).to_string(), Vec::new()));
                            self.st = St::Param;
                        }
                    }
                }
                St::Param => {
                    if space(b) {
                        self.st = St::PreEqual;
                    } else if b == b'=' {
                        self.st = St::PreValue;
                    } else if b == b'-' {
                        self.unexpected(b, "after", out);
                        self.st = St::Skip(1);
                    } else if self.last_param().len() == NAME_LEN {
                        let msg = format!(
                            "too long \"{}{}\" parameter in \"{}\" SSI command",
                            self.last_param(),
                            b as char,
                            self.cmd.name
                        );
                        self.error(msg, out);
                    } else if let Some(p) = self.cmd.params.last_mut() {
                        p.0.push(b as char);
                    }
                }
                St::PreEqual => {
                    if b == b'=' {
                        self.st = St::PreValue;
                    } else if !space(b) {
                        self.unexpected(b, "after", out);
                    }
                }
                St::PreValue => {
                    if b == b'"' || b == b'\'' {
                        self.value.clear();
                        self.st = St::Value(b);
                    } else if !space(b) {
                        self.unexpected(b, "before value of", out);
                    }
                }
                St::Value(q) | St::Escape(q) => {
                    let escaped = matches!(self.st, St::Escape(_));
                    if !escaped && b == q {
                        let v = std::mem::take(&mut self.value);
                        if let Some(p) = self.cmd.params.last_mut() {
                            p.1 = v;
                        }
                        self.st = St::PostValue;
                    } else if !escaped && b == b'\\' {
                        self.st = St::Escape(q);
                    } else {
                        // `\"` is the quote; any other escaped byte keeps
                        // its backslash.
                        let add = if escaped && b != q { 2 } else { 1 };
                        if self.value.len() + add > self.value_len {
                            let msg = format!(
                                "too long \"{}\" value of \"{}\" parameter in \"{}\" SSI command",
                                String::from_utf8_lossy(&self.value),
                                self.last_param(),
                                self.cmd.name
                            );
                            self.error(msg, out);
                        } else {
                            if add == 2 {
                                self.value.push(b'\\');
                            }
                            self.value.push(b);
                            self.st = St::Value(q);
                        }
                    }
                }
                St::PostValue => {
                    if space(b) {
                        self.st = St::PreParam;
                    } else if b == b'-' {
                        self.st = St::End0;
                    } else {
                        self.unexpected(b, "after", out);
                    }
                }
                St::End0 => {
                    if b == b'-' {
                        self.st = St::End1;
                    } else {
                        self.unexpected_end(b, out);
                    }
                }
                St::End1 => {
                    if b == b'>' {
                        out.push(Event::Command(Command {
                            name: std::mem::take(&mut self.cmd.name),
                            params: std::mem::take(&mut self.cmd.params),
                        }));
                        self.st = St::Text;
                        text = i + 1;
                    } else {
                        self.unexpected_end(b, out);
                    }
                }
                St::Skip(n) => {
                    self.st = match (n, b) {
                        (0 | 1, b'-') => St::Skip(n + 1),
                        (2, b'-') => St::Skip(2),
                        (2, b'>') => {
                            text = i + 1;
                            St::Text
                        }
                        _ => St::Skip(0),
                    };
                }
            }
            i += 1;
        }
        // Hand out the text seen, except the bytes of a possible `<!--#`.
        let end = match self.st {
            St::Text => piece.len(),
            St::Start(n) => piece.len().saturating_sub(n).max(text),
            _ => text,
        };
        if end > text {
            out.push(Event::Text(piece.slice(text..end)));
        }
    }

    /// The document ended: bytes held for a possible `<!--#` are text; an
    /// unfinished command is dropped.
    pub fn finish(&mut self, out: &mut Vec<Event>) {
        if let St::Start(n) = self.st {
            out.push(Event::Text(Bytes::copy_from_slice(&START[..n])));
        }
        self.st = St::Text;
    }

    /// `unexpected "b" symbol {place} "param" parameter in "cmd" SSI command`.
    fn unexpected(&mut self, b: u8, place: &str, out: &mut Vec<Event>) {
        let msg = format!(
            "unexpected \"{}\" symbol {place} \"{}\" parameter in \"{}\" SSI command",
            b as char,
            self.last_param(),
            self.cmd.name
        );
        self.error(msg, out);
    }

    /// `unexpected "b" symbol in "cmd" SSI command`, at the command's end.
    fn unexpected_end(&mut self, b: u8, out: &mut Vec<Event>) {
        let msg = format!(
            "unexpected \"{}\" symbol in \"{}\" SSI command",
            b as char, self.cmd.name
        );
        self.error(msg, out);
    }

    fn last_param(&self) -> &str {
        self.cmd.params.last().map_or("", |p| p.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events of `doc` fed in pieces of `size` bytes, adjacent texts
    /// joined.
    fn parse(doc: &str, size: usize) -> Vec<Event> {
        let mut p = Parser::new(256);
        let mut out = Vec::new();
        for chunk in doc.as_bytes().chunks(size.max(1)) {
            p.feed(&Bytes::copy_from_slice(chunk), &mut out);
        }
        p.finish(&mut out);
        let mut joined: Vec<Event> = Vec::new();
        for e in out {
            match (joined.last_mut(), e) {
                (Some(Event::Text(a)), Event::Text(b)) => {
                    let mut v = a.to_vec();
                    v.extend_from_slice(&b);
                    *a = v.into();
                }
                (_, Event::Text(b)) if b.is_empty() => {}
                (_, e) => joined.push(e),
            }
        }
        joined
    }

    fn text(s: &str) -> Event {
        Event::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    fn cmd(name: &str, params: &[(&str, &str)]) -> Event {
        Event::Command(Command {
            name: name.into(),
            params: params
                .iter()
                .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
                .collect(),
        })
    }

    #[test]
    fn commands_between_text_in_any_pieces() {
        let doc = "X<!--#include virtual=\"/a?b=c\" -->Y<!--#echo var='v' encoding=\"none\"-->Z";
        let want = vec![
            text("X"),
            cmd("include", &[("virtual", "/a?b=c")]),
            text("Y"),
            cmd("echo", &[("var", "v"), ("encoding", "none")]),
            text("Z"),
        ];
        for size in 1..=doc.len() {
            assert_eq!(parse(doc, size), want, "pieces of {size}");
        }
    }

    #[test]
    fn spaces_after_the_hash_and_around_equals() {
        assert_eq!(
            parse("<!--# include virtual = \"t.html\"   -->", 100),
            vec![cmd("include", &[("virtual", "t.html")])]
        );
        assert_eq!(parse("<!--#else-->", 3), vec![cmd("else", &[])]);
    }

    #[test]
    fn comments_and_lone_brackets_are_text() {
        for size in 1..8 {
            assert_eq!(
                parse("a<!-- c -->b<<!-x<", size),
                vec![text("a<!-- c -->b<<!-x<")]
            );
            assert_eq!(parse("<!--", size), vec![text("<!--")]);
        }
    }

    #[test]
    fn escaped_quotes_in_values() {
        assert_eq!(
            parse(r#"<!--#set var="a" value="x\"y\z" -->"#, 5),
            vec![cmd("set", &[("var", "a"), ("value", "x\"y\\z")])]
        );
    }

    #[test]
    fn malformed_commands_are_errors_skipped_to_their_end() {
        let ev = parse("a<!--#echo var=x -->b<!--#-->c", 4);
        assert_eq!(ev.len(), 5);
        assert_eq!(ev[0], text("a"));
        assert!(matches!(&ev[1], Event::Error(m) if m.contains("before value")));
        assert_eq!(ev[2], text("b"));
        assert!(matches!(&ev[3], Event::Error(_)));
        assert_eq!(ev[4], text("c"));
    }

    #[test]
    fn long_values_are_refused() {
        let mut p = Parser::new(4);
        let mut out = Vec::new();
        p.feed(
            &Bytes::from_static(b"<!--#set var=\"abcde\" -->x"),
            &mut out,
        );
        assert!(matches!(&out[0], Event::Error(m) if m.contains("too long")));
        assert_eq!(out[1], text("x"));
    }

    #[test]
    fn unfinished_command_is_dropped() {
        assert_eq!(parse("a<!--#echo var=\"x\"", 3), vec![text("a")]);
    }
}
