//! Syntax tree of a configuration: directives with their arguments, optional
//! blocks and the place they were written, plus the error type shared by the
//! whole configuration layer.

use std::fmt;
use std::sync::Arc;

/// Where a directive stands: "file:line".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Name of the file (or pseudo-file such as `<embedded>`) as shown in messages.
    pub file: Arc<str>,
    /// 1-based line number.
    pub line: u32,
}

impl Span {
    /// Convenience constructor.
    pub fn new(file: impl Into<Arc<str>>, line: u32) -> Self {
        Span {
            file: file.into(),
            line,
        }
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// One argument as written.
///
/// `value` is the text after quote removal and escape processing; `quoted`
/// tells whether it was written inside single or double quotes (a quoted `{`
/// or `;` is plain text; variables are expanded in both forms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    pub value: String,
    pub quoted: bool,
}

impl Arg {
    /// An unquoted argument.
    pub fn plain(value: impl Into<String>) -> Self {
        Arg {
            value: value.into(),
            quoted: false,
        }
    }
}

/// One directive: `name arg…;` or `name arg… { … }`.
#[derive(Clone, Debug)]
pub struct Directive {
    pub name: String,
    pub args: Vec<Arg>,
    /// Where the directive's terminating `;` or opening `{` stands (the line
    /// nginx reports for a directive).
    pub span: Span,
    /// `Some` for a block directive, holding the directives inside it.
    pub block: Option<Vec<Directive>>,
}

impl Directive {
    /// A directive as unit tests write it: unquoted arguments, no block, at
    /// `t.conf:line`.
    #[cfg(test)]
    pub fn test(name: &str, args: &[&str], line: u32) -> Directive {
        Directive {
            name: name.into(),
            args: args.iter().map(|a| Arg::plain(*a)).collect(),
            span: Span::new("t.conf", line),
            block: None,
        }
    }

    /// The value of argument `i` (0 is the first argument after the name);
    /// an empty string when there is no such argument.
    pub fn arg(&self, i: usize) -> &str {
        self.args.get(i).map_or("", |a| a.value.as_str())
    }

    /// The values of all arguments, in order.
    pub fn arg_strs(&self) -> impl Iterator<Item = &str> {
        self.args.iter().map(|a| a.value.as_str())
    }
}

/// A configuration error. Displays as nginx does:
/// `<message> in <file>:<line>`, or just the message when there is no span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfError {
    pub msg: String,
    pub span: Option<Span>,
}

impl ConfError {
    /// An error located at `span`.
    pub fn new(msg: impl Into<String>, span: &Span) -> Self {
        ConfError {
            msg: msg.into(),
            span: Some(span.clone()),
        }
    }

    /// An error without a location.
    pub fn bare(msg: impl Into<String>) -> Self {
        ConfError {
            msg: msg.into(),
            span: None,
        }
    }
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.span {
            Some(span) => write!(f, "{} in {}", self.msg, span),
            None => f.write_str(&self.msg),
        }
    }
}

impl std::error::Error for ConfError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(args: &[&str]) -> Directive {
        Directive {
            name: "d".into(),
            args: args.iter().map(|a| Arg::plain(*a)).collect(),
            span: Span::new("f.conf", 3),
            block: None,
        }
    }

    #[test]
    fn span_display() {
        assert_eq!(
            Span::new("conf/vireo.conf", 12).to_string(),
            "conf/vireo.conf:12"
        );
    }

    #[test]
    fn error_display() {
        let span = Span::new("conf/vireo.conf", 7);
        assert_eq!(
            ConfError::new("unexpected \"}\"", &span).to_string(),
            "unexpected \"}\" in conf/vireo.conf:7"
        );
        assert_eq!(ConfError::bare("no events").to_string(), "no events");
        let e: Box<dyn std::error::Error> = Box::new(ConfError::bare("x"));
        assert_eq!(e.to_string(), "x");
    }

    #[test]
    fn directive_args() {
        let d = dir(&["a", "b"]);
        assert_eq!(d.arg(0), "a");
        assert_eq!(d.arg(1), "b");
        assert_eq!(d.arg(2), "");
        assert_eq!(d.arg_strs().collect::<Vec<_>>(), ["a", "b"]);
    }
}
