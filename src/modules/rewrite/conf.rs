//! Directives of the rewrite module, compiled into script instructions.

use super::script::{Cond, FileTest, Flag, Op, Return, Rewrite, Script, SetTarget};
use crate::conf::ast::{ConfError, Directive};
use crate::conf::model::{LocKind, LocationConf};
use crate::conf::table::{Arity, Ctx, Def, Env, MANY, ONE, Scope};
use crate::conf::values::{flag, regex, set_once};
use crate::core::vars::{Template, UserKind, Var, Vars};
use crate::settings;

settings! {
    pub struct RewriteConf / RewriteConfSet {
        pub rewrite_log: bool = false,
    }
}

/// The script of the level a directive stands in.
fn ops<'s>(s: &'s mut Scope<'_>) -> &'s mut Vec<Op> {
    &mut s.level_ext().entry::<Script>().0
}

fn err(msg: impl Into<String>, d: &Directive) -> ConfError {
    ConfError::new(msg, &d.span)
}

fn template(s: &str, d: &Directive, vars: &mut Vars) -> Result<Template, ConfError> {
    Template::compile(s, vars).map_err(|e| err(e, d))
}

fn compile_rewrite(d: &Directive, vars: &mut Vars) -> Result<Op, ConfError> {
    let re = regex(d, d.arg(0), false, vars)?;
    let mut repl = d.arg(1);
    let mut flag = match d.args.get(2).map(|a| a.value.as_str()) {
        None => Flag::None,
        Some("last") => Flag::Last,
        Some("break") => Flag::Break,
        Some("redirect") => Flag::Redirect(302),
        Some("permanent") => Flag::Redirect(301),
        Some(v) => return Err(err(format!("invalid parameter \"{v}\""), d)),
    };
    if ["http://", "https://", "$scheme"]
        .iter()
        .any(|p| repl.starts_with(p))
        && !matches!(flag, Flag::Redirect(_))
    {
        flag = Flag::Redirect(302);
    }
    let add_args = !repl.ends_with('?');
    if !add_args {
        repl = &repl[..repl.len() - 1];
    }
    let (uri, args) = match repl.split_once('?') {
        Some((u, a)) => (u, Some(a)),
        None => (repl, None),
    };
    Ok(Op::Rewrite(Box::new(Rewrite {
        re,
        uri: template(uri, d, vars)?,
        args: args.map(|a| template(a, d, vars)).transpose()?,
        add_args,
        flag,
    })))
}

fn compile_return(d: &Directive, vars: &mut Vars) -> Result<Op, ConfError> {
    let code_of = |s: &str| -> Option<u16> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<u16>().ok().filter(|c| *c <= 999)
    };
    let (code, text) = match d.args.len() {
        1 => match code_of(d.arg(0)) {
            Some(c) => (c, None),
            None => {
                let url = d.arg(0);
                if !["http://", "https://", "$scheme"]
                    .iter()
                    .any(|p| url.starts_with(p))
                {
                    return Err(err(format!("invalid return code \"{url}\""), d));
                }
                (302, Some(url))
            }
        },
        _ => {
            let c = code_of(d.arg(0))
                .ok_or_else(|| err(format!("invalid return code \"{}\"", d.arg(0)), d))?;
            (c, Some(d.arg(1)))
        }
    };
    if code == 444 && text.is_some() {
        return Err(err(
            "\"return 444\" takes no text: it closes the connection",
            d,
        ));
    }
    Ok(Op::Return(Box::new(Return {
        code,
        text: text.map(|t| template(t, d, vars)).transpose()?,
    })))
}

fn compile_set(s: &mut Scope, d: &Directive, vars: &mut Vars) -> Result<Op, ConfError> {
    let target = set_target(s, d, vars)?;
    let value = template(d.arg(1), d, vars)?;
    Ok(Op::Set(target, value))
}

/// What a directive assigning the variable its first argument names
/// (`set`, auth_request's `auth_request_set`) writes: `$args`, a module's
/// variable that takes a value, or a configuration variable it declares.
pub fn set_target(s: &mut Scope, d: &Directive, vars: &mut Vars) -> Result<SetTarget, ConfError> {
    let name = d
        .arg(0)
        .strip_prefix('$')
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .ok_or_else(|| err(format!("invalid variable name \"{}\"", d.arg(0)), d))?;
    let settable = match vars.provided(name) {
        Some(Var::Module(m)) => m.def.set,
        _ => None,
    };
    Ok(match name.to_ascii_lowercase().as_str() {
        "args" | "query_string" => SetTarget::Args,
        _ if let Some(set) = settable => {
            (set.level)(s);
            SetTarget::Module(set)
        }
        _ => SetTarget::Var(
            vars.declare(name, UserKind::Set)
                .map_err(|e| err(e, d))?
                .index,
        ),
    })
}

/// Parse an `if` condition as nginx splits it: `(` opens the first word or
/// is one, `)` closes the last word or is one.
fn compile_cond(d: &Directive, vars: &mut Vars) -> Result<Cond, ConfError> {
    let mut words: Vec<&str> = d.arg_strs().collect();
    let invalid = |w: &str| err(format!("invalid condition \"{w}\""), d);
    let first = words[0];
    match first.strip_prefix('(') {
        Some("") => {
            words.remove(0);
        }
        Some(rest) => words[0] = rest,
        None => return Err(invalid(first)),
    }
    let Some(last) = words.last().copied() else {
        return Err(invalid(first));
    };
    match last.strip_suffix(')') {
        Some("") => {
            words.pop();
        }
        Some(rest) => *words.last_mut().expect("not empty") = rest,
        None => return Err(invalid(last)),
    }
    match words.as_slice() {
        [] => Err(invalid(first)),
        [v] if v.starts_with('$') => Ok(Cond::Var(template(v, d, vars)?)),
        [v, op, rhs] if v.starts_with('$') => {
            let left = template(v, d, vars)?;
            Ok(match *op {
                "=" => Cond::Eq(left, template(rhs, d, vars)?, false),
                "!=" => Cond::Eq(left, template(rhs, d, vars)?, true),
                "~" => Cond::Regex(left, regex(d, rhs, false, vars)?, false),
                "~*" => Cond::Regex(left, regex(d, rhs, true, vars)?, false),
                "!~" => Cond::Regex(left, regex(d, rhs, false, vars)?, true),
                "!~*" => Cond::Regex(left, regex(d, rhs, true, vars)?, true),
                _ => return Err(err(format!("unexpected \"{op}\" in condition"), d)),
            })
        }
        [v, ..] if v.starts_with('$') => Err(err(format!("invalid condition \"{v}\""), d)),
        [test, path] => {
            let (negate, t) = match test.strip_prefix('!') {
                Some(t) => (true, t),
                None => (false, *test),
            };
            let t = match t {
                "-f" => FileTest::File,
                "-d" => FileTest::Dir,
                "-e" => FileTest::Exists,
                "-x" => FileTest::Exec,
                _ => return Err(err(format!("invalid condition \"{test}\""), d)),
            };
            Ok(Cond::File(template(path, d, vars)?, t, negate))
        }
        [w, ..] => Err(err(format!("invalid condition \"{w}\""), d)),
    }
}

/// Walk an `if` block: in a location a level of its own (its settings and
/// content handler, over the location's, kept in `Location::ifs`), in a server
/// only its script. Returns the block's script and, in a location, its index.
fn walk_block(
    s: &mut Scope,
    d: &Directive,
    e: &mut Env,
) -> Result<(Vec<Op>, Option<usize>), ConfError> {
    let dirs = d.block.as_deref().unwrap_or(&[]);
    match s {
        Scope::Location(l) => {
            let mut inner = l.block(d.span.clone());
            e.walk(dirs, &mut Scope::LocationIf(&mut inner))?;
            let body = inner.phases.ext.remove::<Script>().unwrap_or_default().0;
            l.ifs.push(inner);
            Ok((body, Some(l.ifs.len() - 1)))
        }
        _ => {
            let mut inner = LocationConf::new(LocKind::Prefix, String::new(), None, d.span.clone());
            e.walk(dirs, &mut Scope::ServerIf(&mut inner))?;
            Ok((
                inner.phases.ext.remove::<Script>().unwrap_or_default().0,
                None,
            ))
        }
    }
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "rewrite",
        ignored: false,
        ctx: Ctx::SCRIPT,
        arity: Arity::args(2, 3),
        set: |s, d, e| {
            let op = compile_rewrite(d, &mut e.vars)?;
            ops(s).push(op);
            Ok(())
        },
        syntax: "rewrite regex replacement [last | break | redirect | permanent];",
        default: "—",
        doc: "Changes the URI when `regex` matches it (captures `$1`…`$9` and named ones go into `replacement`). A replacement starting with `http://`, `https://` or `$scheme` is a redirect. `last` stops the script and searches the location for the new URI; `break` stops it and stays; `redirect` (302) and `permanent` (301) answer with a redirect; without a flag the next directive runs and the location is searched after the phase. Request arguments are appended unless the replacement ends with `?`. Runs in order with `return`, `set`, `if` and `break` (server, location and inside `if`); not inherited by nested levels.\n\n```nginx\nrewrite ^/users/(\\d+)$ /profile.php?id=$1 last;\nrewrite ^/old/(.*)$ /new/$1 permanent;\n```",
    },
    Def {
        name: "return",
        ignored: false,
        ctx: Ctx::SCRIPT,
        arity: Arity::args(1, 2),
        set: |s, d, e| {
            let op = compile_return(d, &mut e.vars)?;
            ops(s).push(op);
            Ok(())
        },
        syntax: "return code [text] | return code URL | return URL;",
        default: "—",
        doc: "Stops processing and answers: with `code` and `text` as the body, with a redirect for 301, 302, 303, 307 and 308 (the text is the Location), with vireo's page for a code of 400 or more without text (error_page applies), or with a 302 for a lone URL. `return 444` closes the connection without an answer (so does `return 499`, logged as such, as nginx terminates a request finalized with 499). Text and URL may hold variables. Also allowed inside `if`.\n\n```nginx\nreturn 301 https://$host$request_uri;\nreturn 200 \"ok\\n\";\n```",
    },
    Def {
        name: "set",
        ignored: false,
        ctx: Ctx::SCRIPT.or(Ctx::STREAM_SERVER),
        arity: Arity::args(2, 2),
        set: |s, d, e| {
            let op = compile_set(s, d, &mut e.vars)?;
            ops(s).push(op);
            Ok(())
        },
        syntax: "set $variable value;",
        default: "—",
        doc: "Assigns a value (text and variables) to a variable of the request, when the script reaches it. `$args` can be set; other built-in variables cannot (`the duplicate \"uri\" variable`). Also allowed inside `if`.\n\n```nginx\nset $maintenance 0;\nif (-f $document_root/maintenance.html) { set $maintenance 1; }\n```",
    },
    Def {
        name: "if",
        ignored: false,
        ctx: Ctx::SERVER.or(Ctx::LOCATION),
        arity: Arity::block(1, MANY),
        set: |s, d, e| {
            let cond = compile_cond(d, &mut e.vars)?;
            let (body, block) = walk_block(s, d, e)?;
            e.vars.at(&d.span);
            ops(s).push(Op::If(Box::new(cond), body, block));
            Ok(())
        },
        syntax: "if (condition) { … }",
        default: "—",
        doc: "Runs the `rewrite`, `return`, `set` and `break` inside when the condition holds: `($var)` (not empty and not \"0\"), `($var = text)`, `($var != text)`, `($var ~ regex)`, `~*` (caseless), `!~`, `!~*`, `(-f path)`, `-d`, `-e`, `-x` and their `!` forms. A regex sets captures. In a location the block is a level of its own, as in nginx: besides the rewrite directives it may hold those whose contexts list \"if in location\" (`root`, `proxy_pass`, `fastcgi_pass`, `add_header`, `error_page`, `access_log`, …); when its condition holds the request runs with the block's settings and content handler (else the location's), the last matching `if` winning, and no longer uses the location's `try_files`. In a server it holds the rewrite directives only.\n\n```nginx\nif ($request_method = POST) { return 405; }\nif ($http_user_agent ~* \"(bot|crawler)\") { set $is_bot 1; }\n```",
    },
    Def {
        name: "break",
        ignored: false,
        ctx: Ctx::SCRIPT,
        arity: Arity::args(0, 0),
        set: |s, _, _| {
            ops(s).push(Op::Break);
            Ok(())
        },
        syntax: "break;",
        default: "—",
        doc: "Stops the rewrite script of the current level (also inside `if`).\n\n```nginx\nif ($slow) { set $limit 1; break; }\n```",
    },
    Def {
        name: "rewrite_log",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF).or(Ctx::SERVER_IF),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<RewriteConfSet>().rewrite_log,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "rewrite_log on | off;",
        default: "off",
        doc: "Logs each `rewrite` regex test and its result to the error log at the `notice` level.\n\n```nginx\nerror_log logs/error.log notice;\nrewrite_log on;\n```",
    },
    Def {
        name: "uninitialized_variable_warn",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF).or(Ctx::SERVER_IF),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().core.uninitialized_variable_warn,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "uninitialized_variable_warn on | off;",
        default: "on",
        doc: "Logs a warning when a variable declared by `set` is read before any `set` gave it a value.\n\n```nginx\nuninitialized_variable_warn off;\n```",
    },
];
