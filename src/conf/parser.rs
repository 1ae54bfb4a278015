//! Builds the directive tree from tokens and expands `include`.
//!
//! The parser knows nothing about which directives exist; it only checks the
//! grammar (names before `;`/`{`, balanced braces) and splices included files
//! in place of their `include` directive. Each file must be balanced on its
//! own, as in nginx: a `}` in an included file cannot close a block opened by
//! the including file.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ast::{Arg, ConfError, Directive, Span};
use super::lexer::{Lexer, TokenKind};

/// How many levels of `include` may nest below the main text.
pub const MAX_INCLUDE_DEPTH: usize = 32;

/// Name under which `-g` directives are parsed.
pub const COMMAND_LINE_NAME: &str = "<command line>";

/// Result of parsing a configuration.
#[derive(Clone, Debug)]
pub struct Parsed {
    /// Top-level directives, with includes expanded.
    pub directives: Vec<Directive>,
    /// Every file read, in the order first read, without repeats (for `-T`).
    pub files: Vec<PathBuf>,
}

/// Parse the file at `path`, expanding `include` directives at any nesting
/// level. Relative include paths resolve against `conf_dir`.
pub fn parse_file(path: &Path, conf_dir: &Path) -> Result<Parsed, ConfError> {
    let mut ctx = Ctx {
        conf_dir,
        files: Vec::new(),
    };
    let directives = ctx.parse_path(path, None, 0)?;
    Ok(Parsed {
        directives,
        files: ctx.files,
    })
}

/// Parse `text`, naming it `name` in messages (`<embedded>`, `<command line>`).
/// Includes in it resolve against `conf_dir`.
pub fn parse_str(text: &str, name: &str, conf_dir: &Path) -> Result<Parsed, ConfError> {
    let mut ctx = Ctx {
        conf_dir,
        files: Vec::new(),
    };
    let lexer = Lexer::new(text, Arc::from(name)).param_mode(name == COMMAND_LINE_NAME);
    let directives = ctx.parse_tokens(lexer, 0)?;
    Ok(Parsed {
        directives,
        files: ctx.files,
    })
}

/// "2: No such file or directory", as nginx prints an errno.
fn os_error_text(e: &io::Error) -> String {
    crate::core::errlog::errno_text(e)
}

fn located(msg: String, at: Option<&Span>) -> ConfError {
    match at {
        Some(span) => ConfError::new(msg, span),
        None => ConfError::bare(msg),
    }
}

/// Files nginx configurations include from nginx's own folder. When such a
/// file is not there, vireo's embedded equivalent stands in, so
/// `include fastcgi_params;` (`uwsgi_params`, `scgi_params`) and
/// `include mime.types;` work out of the box.
fn embedded(path: &Path) -> Option<String> {
    if path.exists() {
        return None;
    }
    match path.file_name()?.to_str()? {
        "fastcgi_params" => Some(FASTCGI_PARAMS.to_string()),
        "uwsgi_params" => Some(include_str!("../../conf/uwsgi_params").to_string()),
        "scgi_params" => Some(include_str!("../../conf/scgi_params").to_string()),
        "mime.types" => Some(format!(
            "types {{\n{}\n}}\n",
            crate::core::mime::EMBEDDED_MIME_TYPES
        )),
        _ => None,
    }
}

/// vireo's fastcgi_params (conf/fastcgi_params).
pub const FASTCGI_PARAMS: &str = include_str!("../../conf/fastcgi_params");

/// A block being filled.
struct Frame {
    name: String,
    args: Vec<Arg>,
    span: Span,
    children: Vec<Directive>,
}

struct Ctx<'a> {
    conf_dir: &'a Path,
    files: Vec<PathBuf>,
}

impl Ctx<'_> {
    /// Read and parse one file. `at` is the `include` that asked for it.
    fn parse_path(
        &mut self,
        path: &Path,
        at: Option<&Span>,
        depth: usize,
    ) -> Result<Vec<Directive>, ConfError> {
        let shown = path.display().to_string();
        let mut file = File::open(path).map_err(|e| {
            located(
                format!("open() \"{shown}\" failed ({})", os_error_text(&e)),
                at,
            )
        })?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| {
            located(
                format!("read() \"{shown}\" failed ({})", os_error_text(&e)),
                at,
            )
        })?;
        if !self.files.iter().any(|f| f == path) {
            self.files.push(path.to_path_buf());
        }
        let text = String::from_utf8_lossy(&bytes);
        self.parse_tokens(Lexer::new(&text, Arc::from(shown.as_str())), depth)
    }

    /// Expand `include <arg>` written at `span`, from a text at `depth`.
    fn include(
        &mut self,
        arg: &str,
        span: &Span,
        depth: usize,
    ) -> Result<Vec<Directive>, ConfError> {
        if depth >= MAX_INCLUDE_DEPTH {
            return Err(ConfError::new(
                format!("include nesting is too deep (more than {MAX_INCLUDE_DEPTH} levels)"),
                span,
            ));
        }
        let full = self.conf_dir.join(arg);
        if !arg.contains(['*', '?', '[']) {
            if let Some(text) = embedded(&full) {
                let name = format!("<embedded {}>", full.display());
                return self.parse_tokens(Lexer::new(&text, Arc::from(name.as_str())), depth + 1);
            }
            return self.parse_path(&full, Some(span), depth + 1);
        }

        // Only the argument is a pattern; the folder it is relative to is literal.
        let pattern = if Path::new(arg).is_absolute() {
            arg.to_string()
        } else {
            let dir = glob::Pattern::escape(&self.conf_dir.to_string_lossy());
            Path::new(&dir).join(arg).to_string_lossy().into_owned()
        };
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        let paths = glob::glob_with(&pattern, options).map_err(|e| {
            ConfError::new(
                format!("glob() \"{}\" failed ({})", full.display(), e.msg),
                span,
            )
        })?;
        // Unreadable folders are skipped, as glob(3) does by default.
        let mut paths: Vec<PathBuf> = paths.filter_map(Result::ok).collect();
        paths.sort_by(|a, b| a.as_os_str().cmp(b.as_os_str()));
        let mut out = Vec::new();
        for p in paths {
            out.extend(self.parse_path(&p, Some(span), depth + 1)?);
        }
        Ok(out)
    }

    /// Build the tree of one text.
    fn parse_tokens(
        &mut self,
        mut lx: Lexer<'_>,
        depth: usize,
    ) -> Result<Vec<Directive>, ConfError> {
        let file = lx.file().clone();
        let span_at = |line: u32| Span {
            file: file.clone(),
            line,
        };
        let mut top: Vec<Directive> = Vec::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut words: Vec<Arg> = Vec::new();

        loop {
            let tok = lx.next_token()?;
            let span = span_at(tok.line);
            match tok.kind {
                TokenKind::Word(arg) => words.push(arg),
                TokenKind::Semicolon => {
                    if words.is_empty() {
                        return Err(ConfError::new("unexpected \";\"", &span));
                    }
                    let mut args = std::mem::take(&mut words);
                    let name = args.remove(0).value;
                    let dest = match stack.last_mut() {
                        Some(f) => &mut f.children,
                        None => &mut top,
                    };
                    if name == "include" {
                        if args.len() != 1 {
                            return Err(ConfError::new(
                                "invalid number of arguments in \"include\" directive",
                                &span,
                            ));
                        }
                        dest.extend(self.include(&args[0].value, &span, depth)?);
                    } else {
                        dest.push(Directive {
                            name,
                            args,
                            span,
                            block: None,
                        });
                    }
                }
                TokenKind::BlockStart => {
                    if words.is_empty() {
                        return Err(ConfError::new("unexpected \"{\"", &span));
                    }
                    let mut args = std::mem::take(&mut words);
                    let name = args.remove(0).value;
                    if name == "include" {
                        return Err(ConfError::new(
                            "directive \"include\" is not terminated by \";\"",
                            &span,
                        ));
                    }
                    stack.push(Frame {
                        name,
                        args,
                        span,
                        children: Vec::new(),
                    });
                }
                TokenKind::BlockEnd => {
                    if !words.is_empty() {
                        return Err(ConfError::new("unexpected \"}\"", &span));
                    }
                    let Some(frame) = stack.pop() else {
                        return Err(ConfError::new("unexpected \"}\"", &span));
                    };
                    let dest = match stack.last_mut() {
                        Some(f) => &mut f.children,
                        None => &mut top,
                    };
                    dest.push(Directive {
                        name: frame.name,
                        args: frame.args,
                        span: frame.span,
                        block: Some(frame.children),
                    });
                }
                TokenKind::Eof => {
                    if !words.is_empty() {
                        return Err(ConfError::new(lx.eof_in_directive_msg(), &span));
                    }
                    if !stack.is_empty() {
                        let msg = if lx.is_param() {
                            "unexpected end of parameter, expecting \"}\""
                        } else {
                            "unexpected end of file, expecting \"}\""
                        };
                        return Err(ConfError::new(msg, &span));
                    }
                    return Ok(top);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh, empty temporary folder removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::SeqCst);
            let p = std::env::temp_dir().join(format!(
                "vireo-conf-{}-{}-{}",
                std::process::id(),
                tag,
                n
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }

        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let p = self.0.join(rel);
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent).unwrap();
            }
            fs::write(&p, text).unwrap();
            p
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn parse(text: &str) -> Vec<Directive> {
        parse_str(text, "t.conf", Path::new("/nonexistent-vireo"))
            .unwrap()
            .directives
    }

    fn err(text: &str) -> String {
        parse_str(text, "t.conf", Path::new("/nonexistent-vireo"))
            .unwrap_err()
            .to_string()
    }

    /// Render a tree compactly: `name a b;` and `name a { … }`.
    fn render(ds: &[Directive]) -> String {
        let mut out = Vec::new();
        for d in ds {
            let mut s = d.name.clone();
            for a in &d.args {
                s.push(' ');
                if a.quoted {
                    s.push_str(&format!("\"{}\"", a.value));
                } else {
                    s.push_str(&a.value);
                }
            }
            match &d.block {
                None => s.push(';'),
                Some(b) if b.is_empty() => s.push_str(" {}"),
                Some(b) => s.push_str(&format!(" {{ {} }}", render(b))),
            }
            out.push(s);
        }
        out.join(" ")
    }

    #[test]
    fn simple_and_nested() {
        let ds = parse("a 1;\nb {\n  c 2 3;\n  d { e; }\n}\nf {}\n");
        assert_eq!(render(&ds), "a 1; b { c 2 3; d { e; } } f {}");
        assert_eq!(ds[0].span, Span::new("t.conf", 1));
        assert_eq!(ds[1].span.line, 2);
        let b = ds[1].block.as_ref().unwrap();
        assert_eq!(b[0].span.line, 3);
        assert_eq!(b[1].span.line, 4);
        assert_eq!(b[1].block.as_ref().unwrap()[0].span.line, 4);
        assert_eq!(ds[2].span.line, 6);
        assert!(ds[0].block.is_none());
        assert_eq!(ds[0].arg(0), "1");
    }

    #[test]
    fn span_is_line_of_terminator() {
        let ds = parse("log_format main\n  'a'\n  'b';\nserver\n{\n}");
        assert_eq!(ds[0].span.line, 3);
        assert_eq!(ds[0].arg_strs().collect::<Vec<_>>(), ["main", "a", "b"]);
        assert_eq!(ds[1].span.line, 5);
    }

    #[test]
    fn quotes_and_escapes() {
        let ds = parse(r#"add_header X-A "a b;{}" always; return 200 'it\'s\n'; "quoted" x;"#);
        assert_eq!(
            ds[0].args[1],
            Arg {
                value: "a b;{}".into(),
                quoted: true
            }
        );
        assert_eq!(ds[0].args[2], Arg::plain("always"));
        assert_eq!(ds[1].arg(1), "it's\n");
        // a quoted name is just the name
        assert_eq!(ds[2].name, "quoted");
    }

    #[test]
    fn comments_ignored() {
        let ds = parse("# top\na 1; # trailing { ;\n# b;\nc#d e;\n");
        assert_eq!(render(&ds), "a 1; c#d e;");
        assert_eq!(ds[1].span.line, 4);
    }

    #[test]
    fn variables_in_words() {
        let ds = parse("location / { set $x ${host}_${uri}; return 200 \"${x}!\"; }");
        assert_eq!(
            render(&ds),
            "location / { set $x ${host}_${uri}; return 200 \"${x}!\"; }"
        );
    }

    #[test]
    fn regex_arguments() {
        let ds = parse("location ~ \"^/a{2,3}$\" { return 204; }");
        assert_eq!(
            ds[0].args[1],
            Arg {
                value: "^/a{2,3}$".into(),
                quoted: true
            }
        );
        assert_eq!(render(&ds[0].block.clone().unwrap()), "return 204;");

        let ds = parse(r"location ~* \.(gif|jpg)$ { }");
        assert_eq!(ds[0].arg(1), r"\.(gif|jpg)$");

        // Unquoted `{` opens a block, as in nginx: the regex needs quotes.
        assert_eq!(
            err("rewrite ^/(\\d{2})/ /x;\n"),
            "unexpected end of file, expecting \"}\" in t.conf:2"
        );
        assert!(
            parse_str(
                "server {\n rewrite ^/(\\d{2})/ /x;\n}\n",
                "t.conf",
                Path::new("/")
            )
            .is_err()
        );
        // quoted, it is fine
        let ds = parse("rewrite \"^/(\\d{2})/\" /x;");
        assert_eq!(ds[0].arg(0), "^/(\\d{2})/");
    }

    #[test]
    fn error_paths() {
        let eof = "unexpected end of file, expecting \";\" or \"}\"";
        assert_eq!(err("a;\n;"), "unexpected \";\" in t.conf:2");
        assert_eq!(err("a;\n\n{ b; }"), "unexpected \"{\" in t.conf:3");
        assert_eq!(err("a { b; }\n}"), "unexpected \"}\" in t.conf:2");
        assert_eq!(err("a {\n b\n}"), "unexpected \"}\" in t.conf:3");
        assert_eq!(
            err("a {\n b;\n"),
            "unexpected end of file, expecting \"}\" in t.conf:3"
        );
        assert_eq!(
            err("a {\n b {\n c; }"),
            "unexpected end of file, expecting \"}\" in t.conf:3"
        );
        assert_eq!(err("a;\nb c"), format!("{eof} in t.conf:2"));
        assert_eq!(err("a;\nb c\n"), format!("{eof} in t.conf:3"));
        assert_eq!(err("a \"b;\n\n"), format!("{eof} in t.conf:3"));
        assert_eq!(err("a 'b';\nc 'x'y;"), "unexpected \"y\" in t.conf:2");
        assert_eq!(err("a {\n b \"x\"}"), "unexpected \"}\" in t.conf:2");
    }

    #[test]
    fn command_line_messages() {
        let e = parse_str("pid /x", COMMAND_LINE_NAME, Path::new("/")).unwrap_err();
        assert_eq!(e.msg, "unexpected end of parameter, expecting \";\"");
        assert_eq!(e.span, Some(Span::new(COMMAND_LINE_NAME, 1)));
        let p = parse_str(
            "daemon off; worker_processes 2;",
            COMMAND_LINE_NAME,
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(render(&p.directives), "daemon off; worker_processes 2;");
        assert!(p.files.is_empty());
    }

    #[test]
    fn include_glob_sorted_in_blocks() {
        let t = TempDir::new("glob");
        t.write("conf.d/b.conf", "server { listen 2; }\n");
        t.write("conf.d/a.conf", "server { listen 1; }\n");
        t.write("conf.d/c.txt", "ignored;\n");
        t.write("conf.d/.hidden.conf", "hidden;\n");
        t.write("inner.conf", "x 1;\ny 2;\n");
        let main = t.write(
            "main.conf",
            "http {\n  include conf.d/*.conf;\n  include none/*.conf;\n  server { include inner.conf; z; }\n}\n",
        );
        let p = parse_file(&main, t.path()).unwrap();
        assert_eq!(
            render(&p.directives),
            "http { server { listen 1; } server { listen 2; } server { x 1; y 2; z; } }"
        );
        let files: Vec<PathBuf> = ["main.conf", "conf.d/a.conf", "conf.d/b.conf", "inner.conf"]
            .iter()
            .map(|f| t.path().join(f))
            .collect();
        assert_eq!(p.files, files);
        // spans name the included file
        let http = p.directives[0].block.as_ref().unwrap();
        assert_eq!(
            http[1].span,
            Span::new(t.path().join("conf.d/b.conf").display().to_string(), 1)
        );
        let inner = http[2].block.as_ref().unwrap();
        assert_eq!(inner[1].span.line, 2);
        assert_eq!(inner[2].span, Span::new(main.display().to_string(), 4));
    }

    #[test]
    fn include_absolute_and_repeated() {
        let t = TempDir::new("abs");
        let inc = t.write("x.conf", "a;\n");
        let main = t.write(
            "main.conf",
            &format!("include {};\ninclude x.conf;\n", inc.display()),
        );
        let p = parse_file(&main, Path::new("/nonexistent-vireo")).unwrap_err();
        // the relative one resolves against conf_dir, which lacks x.conf
        assert_eq!(
            p.to_string(),
            format!(
                "open() \"/nonexistent-vireo/x.conf\" failed (2: No such file or directory) in {}:2",
                main.display()
            )
        );
        let p = parse_file(&main, t.path()).unwrap();
        assert_eq!(render(&p.directives), "a; a;");
        assert_eq!(p.files, [main.clone(), inc]);
    }

    #[test]
    fn include_from_str() {
        let t = TempDir::new("str");
        t.write("mime.types", "types { text/html html; }\n");
        let p = parse_str("http { include mime.types; }", "<embedded>", t.path()).unwrap();
        assert_eq!(render(&p.directives), "http { types { text/html html; } }");
        assert_eq!(p.files, [t.path().join("mime.types")]);
    }

    #[test]
    fn embedded_fastcgi_params_and_mime_types() {
        let t = TempDir::new("embedded");
        let p = t.write(
            "main.conf",
            "http { include mime.types; location ~ \\.php$ { include fastcgi_params; } }\n",
        );
        let parsed = parse_file(&p, &t.0).unwrap();
        let http = parsed.directives[0].block.as_ref().unwrap();
        assert_eq!(http[0].name, "types");
        assert!(
            http[0]
                .block
                .as_ref()
                .unwrap()
                .iter()
                .any(|d| d.name == "text/html")
        );
        let loc = http[1].block.as_ref().unwrap();
        assert!(
            loc.iter()
                .any(|d| d.name == "fastcgi_param" && d.arg(0) == "QUERY_STRING")
        );
        // A file of the user's own wins.
        t.write("fastcgi_params", "fastcgi_param ONLY_MINE 1;\n");
        let parsed = parse_file(&p, &t.0).unwrap();
        let loc = parsed.directives[0].block.as_ref().unwrap()[1]
            .block
            .as_ref()
            .unwrap();
        assert_eq!(loc.len(), 1);
        assert_eq!(loc[0].arg(0), "ONLY_MINE");
    }

    #[test]
    fn include_missing_file() {
        let t = TempDir::new("missing");
        let main = t.write("main.conf", "a;\n\ninclude nope.conf;\n");
        let e = parse_file(&main, t.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "open() \"{}\" failed (2: No such file or directory) in {}:3",
                t.path().join("nope.conf").display(),
                main.display()
            )
        );
        // the main file itself missing: no location
        let e = parse_file(&t.path().join("absent.conf"), t.path()).unwrap_err();
        assert_eq!(e.span, None);
        assert_eq!(
            e.msg,
            format!(
                "open() \"{}\" failed (2: No such file or directory)",
                t.path().join("absent.conf").display()
            )
        );
    }

    #[test]
    fn include_errors() {
        let t = TempDir::new("incerr");
        t.write("bad.conf", "a;\nb }\n");
        t.write("open.conf", "a {\n");
        t.write("close.conf", "}\n");
        let p = t.path();
        let run = |text: &str| parse_str(text, "m.conf", p).unwrap_err().to_string();
        let shown = |f: &str| p.join(f).display().to_string();
        assert_eq!(
            run("include bad.conf;"),
            format!("unexpected \"}}\" in {}:2", shown("bad.conf"))
        );
        assert_eq!(
            run("include open.conf;"),
            format!(
                "unexpected end of file, expecting \"}}\" in {}:2",
                shown("open.conf")
            )
        );
        // a block cannot be closed from an included file
        assert_eq!(
            run("a {\ninclude close.conf;\n}"),
            format!("unexpected \"}}\" in {}:1", shown("close.conf"))
        );
        assert_eq!(
            run("\ninclude;"),
            "invalid number of arguments in \"include\" directive in m.conf:2"
        );
        assert_eq!(
            run("include a b;"),
            "invalid number of arguments in \"include\" directive in m.conf:1"
        );
        assert_eq!(
            run("include a {}"),
            "directive \"include\" is not terminated by \";\" in m.conf:1"
        );
    }

    #[test]
    fn include_recursion_limited() {
        let t = TempDir::new("loop");
        let main = t.write("self.conf", "a;\ninclude self.conf;\n");
        let e = parse_file(&main, t.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "include nesting is too deep (more than 32 levels) in {}:2",
                main.display()
            )
        );
        // exactly 32 nested levels are fine
        for i in 1..=32 {
            let next = if i < 32 {
                format!("include l{}.conf;", i + 1)
            } else {
                "leaf;".into()
            };
            t.write(&format!("l{i}.conf"), &next);
        }
        let top = t.write("top.conf", "include l1.conf;");
        let p = parse_file(&top, t.path()).unwrap();
        assert_eq!(render(&p.directives), "leaf;");
        assert_eq!(p.files.len(), 33);
        // one more is too many
        t.write("l32.conf", "include l33.conf;");
        t.write("l33.conf", "leaf;");
        assert!(
            parse_file(&top, t.path())
                .unwrap_err()
                .msg
                .contains("too deep")
        );
    }

    #[test]
    fn glob_special_chars_in_conf_dir_are_literal() {
        let t = TempDir::new("lit");
        t.write("d[1]/x.conf", "x;\n");
        let p = parse_str("include *.conf;", "m", &t.path().join("d[1]")).unwrap();
        assert_eq!(render(&p.directives), "x;");
    }

    #[test]
    fn whole_sample_config() {
        let t = TempDir::new("sample");
        t.write(
            "mime.types",
            "types {\n    text/html  html htm;\n    image/gif  gif;\n}\n",
        );
        let text = "worker_processes  auto; events { worker_connections 1024; use epoll; }\n\
http { include mime.types; log_format main '$remote_addr - $remote_user [$time_local] \"$request\" ' '$status $body_bytes_sent'; server { listen 80 default_server; location ~* \\.(gif|jpg)$ { expires 30d; } location / { try_files $uri $uri/ /index.php?$args; } } }\n";
        let main = t.write("vireo.conf", text);
        let p = parse_file(&main, t.path()).unwrap();
        assert_eq!(
            render(&p.directives),
            "worker_processes auto; events { worker_connections 1024; use epoll; } \
http { types { text/html html htm; image/gif gif; } \
log_format main \"$remote_addr - $remote_user [$time_local] \"$request\" \" \"$status $body_bytes_sent\"; \
server { listen 80 default_server; location ~* \\.(gif|jpg)$ { expires 30d; } \
location / { try_files $uri $uri/ /index.php?$args; } } }"
        );
        let http = p.directives.iter().find(|d| d.name == "http").unwrap();
        assert_eq!(http.span.line, 2);
        let lf = &http.block.as_ref().unwrap()[1];
        assert_eq!(lf.name, "log_format");
        assert_eq!(
            lf.arg(1),
            "$remote_addr - $remote_user [$time_local] \"$request\" "
        );
        assert_eq!(p.files, [main, t.path().join("mime.types")]);
    }
}
