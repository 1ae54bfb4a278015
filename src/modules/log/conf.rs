//! Directives of the access log: `log_format` and `access_log`.

use super::{Escape, LogFile, LogFormat};
use crate::conf::ast::{ConfError, Directive};
use crate::conf::model::LocConfSet;
use crate::conf::table::{Arity, Ctx, Def, Env, MANY};
use crate::conf::values::{bad_arg, option, parse_size, parse_time, set_once};
use crate::core::syslog::{Spec, Syslog};
use crate::core::vars::Template;
use crate::settings;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where an `access_log` writes.
#[derive(Debug)]
pub enum Dest {
    /// A file opened at load.
    File(Arc<LogFile>),
    /// `syslog:…`.
    Syslog(Arc<Syslog>),
    /// A path with variables, made for each request (prefix-relative).
    Path(Template),
}

/// One `access_log path [format [buffer=size] [gzip[=level]] [flush=time] [if=condition]]`.
#[derive(Debug)]
pub struct AccessLogTarget {
    pub dest: Dest,
    pub format: Arc<LogFormat>,
    pub buffer: Option<usize>,
    pub flush: Option<Duration>,
    /// `gzip[=level]`: each buffer written as one gzip member.
    pub gzip: Option<u32>,
    /// `if=condition`: a request whose condition is empty or `0` is not logged.
    pub condition: Option<Template>,
}

/// The access logs of a level; `None` until set somewhere (then the default log applies).
pub type AccessLogs = Option<Arc<[Arc<AccessLogTarget>]>>;

/// `open_log_file_cache max=N [inactive=time] [min_uses=N] [valid=time]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenLogCache {
    pub max: usize,
    pub inactive: Duration,
    pub min_uses: u32,
    pub valid: Duration,
}

settings! {
    pub struct LogConf / LogConfSet {
        pub access_log: AccessLogs = None,
        /// Descriptors of access logs with variables in their paths kept
        /// open per worker (`None`: `off`, opened for each line).
        pub open_log_file_cache: Option<OpenLogCache> = None,
    }
}

/// A buffered access_log's `buffer=`, `flush=` and `gzip=`.
type BufferParams = (Option<usize>, Option<std::time::Duration>, Option<u32>);

/// Builder state: formats defined so far and files opened so far (shared when named twice).
#[derive(Default)]
pub struct LogEnv {
    formats: HashMap<String, Arc<LogFormat>>,
    files: HashMap<PathBuf, Arc<LogFile>>,
    /// The buffer of each file a buffered access_log names (size, flush,
    /// gzip): one per file, as nginx's.
    buffers: HashMap<PathBuf, BufferParams>,
}

impl LogEnv {
    /// The format called `name`; `combined` is compiled on first use.
    pub fn format(env: &mut Env, name: &str) -> Option<Arc<LogFormat>> {
        let Env { ext, vars, .. } = env;
        let formats = &mut ext.entry::<LogEnv>().formats;
        if name == "combined" {
            return Some(
                formats
                    .entry("combined".into())
                    .or_insert_with(|| Arc::new(LogFormat::combined(vars)))
                    .clone(),
            );
        }
        formats.get(name).cloned()
    }

    /// Every access log file opened, for reopening after rotation (SIGUSR1).
    pub fn files(&self) -> Vec<Arc<LogFile>> {
        self.files.values().cloned().collect()
    }

    pub fn open(&mut self, path: PathBuf) -> std::io::Result<Arc<LogFile>> {
        if let Some(f) = self.files.get(&path) {
            return Ok(f.clone());
        }
        let f = LogFile::open(&path)?;
        self.files.insert(path, f.clone());
        Ok(f)
    }
}

/// The http block names no access log: `logs/access.log combined` under the
/// prefix, inherited by servers and locations that name none either.
pub fn default_access_log(http: &mut LocConfSet, env: &mut Env) -> Result<(), ConfError> {
    if http
        .get::<LogConfSet>()
        .is_none_or(|l| l.access_log.is_none())
    {
        http.get_mut::<LogConfSet>().access_log = Some(default_logs(env)?);
    }
    Ok(())
}

/// The access log used where none is configured: `logs/access.log combined`
/// under the prefix. The `logs` folder is made when it is missing, as
/// nginx's packages make theirs, so a first configuration starts anywhere.
pub fn default_logs(env: &mut Env) -> Result<AccessLogs, ConfError> {
    let path = env.path("logs/access.log");
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        // A failure shows in the open below, with the file's name.
        let _ = std::fs::create_dir_all(dir);
    }
    let file = env.ext.entry::<LogEnv>().open(path.clone()).map_err(|e| {
        ConfError::bare(format!(
            "open() \"{}\" failed ({}) for the default access log; set \"access_log\" in the http block",
            path.display(),
            crate::core::errlog::errno_text(&e)
        ))
    })?;
    let format = LogEnv::format(env, "combined").expect("combined is built in");
    Ok(Some(Arc::from(vec![Arc::new(AccessLogTarget {
        dest: Dest::File(file),
        format,
        buffer: None,
        flush: None,
        gzip: None,
        condition: None,
    })])))
}

fn access_log(d: &Directive, env: &mut Env) -> Result<AccessLogs, ConfError> {
    if d.arg(0) == "off" {
        if d.args.len() > 1 {
            return Err(bad_arg(d, d.arg(1)));
        }
        return Ok(Some(Arc::from(Vec::new())));
    }
    let fmt_name = d.args.get(1).map_or("combined", |a| a.value.as_str());
    let format = LogEnv::format(env, fmt_name)
        .ok_or_else(|| ConfError::new(format!("unknown log format \"{fmt_name}\""), &d.span))?;
    let (mut buffer, mut flush, mut condition, mut gzip) = (None, None, None, None);
    for a in d.arg_strs().skip(2) {
        if a == "gzip" {
            gzip = Some(1);
            continue;
        }
        if let Some(v) = option(a, "gzip") {
            gzip = Some(
                v.parse::<u32>()
                    .ok()
                    .filter(|l| (1..=9).contains(l))
                    .ok_or_else(|| bad_arg(d, a))?,
            );
            continue;
        }
        if let Some(v) = option(a, "buffer") {
            buffer = Some(
                parse_size(v)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad_arg(d, a))? as usize,
            );
        } else if let Some(v) = option(a, "flush") {
            flush = Some(parse_time(v).ok_or_else(|| bad_arg(d, a))?);
        } else if let Some(v) = option(a, "if") {
            condition =
                Some(Template::compile(v, &mut env.vars).map_err(|e| ConfError::new(e, &d.span))?);
        } else {
            return Err(bad_arg(d, a));
        }
    }
    if let Some(spec) = d.arg(0).strip_prefix("syslog:") {
        if buffer.is_some() || flush.is_some() || gzip.is_some() {
            return Err(ConfError::new("logs to syslog cannot be buffered", &d.span));
        }
        let spec = Spec::parse(spec).map_err(|m| ConfError::new(m, &d.span))?;
        return Ok(Some(Arc::from(vec![Arc::new(AccessLogTarget {
            dest: Dest::Syslog(Arc::new(Syslog::new(spec))),
            format,
            buffer: None,
            flush: None,
            gzip: None,
            condition,
        })])));
    }
    if (flush.is_some() || gzip.is_some()) && buffer.is_none() {
        buffer = Some(64 * 1024);
    }
    if d.arg(0).contains('$') {
        if buffer.is_some() {
            return Err(ConfError::new(
                "buffered logs cannot have variables in name",
                &d.span,
            ));
        }
        let path = env.path(d.arg(0));
        let t = Template::compile(&path.to_string_lossy(), &mut env.vars)
            .map_err(|e| ConfError::new(e, &d.span))?;
        return Ok(Some(Arc::from(vec![Arc::new(AccessLogTarget {
            dest: Dest::Path(t),
            format,
            buffer: None,
            flush: None,
            gzip: None,
            condition,
        })])));
    }
    let path = match d.arg(0) {
        p @ ("/dev/stdout" | "/dev/stderr") => PathBuf::from(p),
        p => env.path(p),
    };
    if buffer.is_some() {
        let buffers = &mut env.ext.entry::<LogEnv>().buffers;
        if *buffers.entry(path.clone()).or_insert((buffer, flush, gzip)) != (buffer, flush, gzip) {
            return Err(ConfError::new(
                format!(
                    "access_log \"{}\" already defined with conflicting parameters",
                    d.arg(0)
                ),
                &d.span,
            ));
        }
    }
    let file = env.ext.entry::<LogEnv>().open(path.clone()).map_err(|e| {
        ConfError::new(
            format!(
                "open() \"{}\" failed ({})",
                path.display(),
                crate::core::errlog::errno_text(&e)
            ),
            &d.span,
        )
    })?;
    Ok(Some(Arc::from(vec![Arc::new(AccessLogTarget {
        dest: Dest::File(file),
        format,
        buffer,
        flush,
        gzip,
        condition,
    })])))
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "log_format",
        ignored: false,
        ctx: Ctx::HTTP.or(Ctx::STREAM),
        arity: Arity::args(2, MANY),
        set: |_, d, e| {
            let name = d.arg(0);
            let (escape, skip) = match d.arg(1).strip_prefix("escape=") {
                Some("default") => (Escape::Default, 2),
                Some("json") => (Escape::Json, 2),
                Some("none") => (Escape::None, 2),
                Some(_) => return Err(bad_arg(d, d.arg(1))),
                None => (Escape::Default, 1),
            };
            let parts: Vec<&str> = d.arg_strs().skip(skip).collect();
            if parts.is_empty() {
                return Err(ConfError::new(
                    "invalid number of arguments in \"log_format\" directive",
                    &d.span,
                ));
            }
            if e.ext.entry::<LogEnv>().formats.contains_key(name) || name == "combined" {
                return Err(ConfError::new(
                    format!("duplicate \"log_format\" name \"{name}\""),
                    &d.span,
                ));
            }
            let f = LogFormat::new(name, escape, &parts, &mut e.vars)
                .map_err(|m| ConfError::new(m, &d.span))?;
            e.ext
                .entry::<LogEnv>()
                .formats
                .insert(name.to_string(), Arc::new(f));
            Ok(())
        },
        syntax: "log_format name [escape=default|json|none] string …;",
        default: "combined \"…\"",
        doc: "Defines a named access log line made of text and variables; the strings are joined.\n\n```nginx\nlog_format main '$remote_addr - $remote_user [$time_local] \"$request\" '\n                '$status $body_bytes_sent \"$http_referer\" $request_time';\nlog_format json escape=json '{\"uri\":\"$uri\",\"status\":$status}';\n```",
    },
    Def {
        name: "access_log",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::LIMIT_EXCEPT).or(Ctx::IF).or(Ctx::SS),
        arity: Arity::args(1, MANY),
        set: |s, d, e| {
            let new = access_log(d, e)?;
            let slot = &mut s.loc().get_mut::<LogConfSet>().access_log;
            match (slot.as_mut(), new) {
                (Some(Some(have)), Some(add)) if !have.is_empty() && !add.is_empty() => {
                    *have = have.iter().chain(add.iter()).cloned().collect();
                    Ok(())
                }
                (_, new) => set_once(slot, new, d),
            }
        },
        syntax: "access_log path [format [buffer=size] [gzip[=level]] [flush=time] [if=condition]] | off;",
        default: "logs/access.log combined",
        doc: "Writes a line per request in the named format (default `combined`); several may be given at one level. `buffer=` collects lines per worker and writes them when full, after `flush=` time, or at exit. `gzip[=level]` (1 by default; implies a 64k buffer) writes each buffer as one gzip member, so the file reads with `zcat`. `if=` skips a request whose condition (variables, read once the response is sent) comes out empty or `0`. A path with variables is made for each request (no buffer; see `open_log_file_cache`). `syslog:server=address[,facility=…][,severity=…][,tag=…][,nohostname]` sends each line as a syslog message (severity `info`, facility `local7`, tag `nginx` by default).\n\n```nginx\naccess_log logs/access.log combined buffer=64k flush=5s;\naccess_log logs/access.log.gz combined gzip=4 flush=1m;\nmap $status $loggable { ~^[23] 0; default 1; }\naccess_log logs/errors.log combined if=$loggable;\naccess_log logs/$host.log;\naccess_log syslog:server=127.0.0.1:514,tag=web;\naccess_log off;\n```",
    },
    Def {
        name: "open_log_file_cache",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::SS),
        arity: Arity::args(1, 4),
        set: |s, d, _| {
            let v = if d.arg(0) == "off" {
                if d.args.len() > 1 {
                    return Err(bad_arg(d, d.arg(1)));
                }
                None
            } else {
                let mut c = OpenLogCache {
                    max: 0,
                    inactive: Duration::from_secs(10),
                    min_uses: 1,
                    valid: Duration::from_secs(60),
                };
                for a in d.arg_strs() {
                    if let Some(v) = option(a, "max") {
                        c.max = v
                            .parse()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| bad_arg(d, a))?;
                    } else if let Some(v) = option(a, "inactive") {
                        c.inactive = parse_time(v).ok_or_else(|| bad_arg(d, a))?;
                    } else if let Some(v) = option(a, "min_uses") {
                        c.min_uses = v.parse().ok().ok_or_else(|| bad_arg(d, a))?;
                    } else if let Some(v) = option(a, "valid") {
                        c.valid = parse_time(v).ok_or_else(|| bad_arg(d, a))?;
                    } else {
                        return Err(bad_arg(d, a));
                    }
                }
                if c.max == 0 {
                    return Err(ConfError::new(
                        "\"open_log_file_cache\" must have \"max\" parameter",
                        &d.span,
                    ));
                }
                Some(c)
            };
            set_once(
                &mut s.loc().get_mut::<LogConfSet>().open_log_file_cache,
                v,
                d,
            )
        },
        syntax: "open_log_file_cache max=N [inactive=time] [min_uses=N] [valid=time] | off;",
        default: "off",
        doc: "Keeps the descriptors of access logs whose paths have variables open in each worker: up to `max`, closed when unused for `inactive` (10s), kept only once used `min_uses` times (1) within it, and checked again after `valid` (60s). Without it such a file is opened for each line.\n\n```nginx\naccess_log logs/$host.log;\nopen_log_file_cache max=100 inactive=20s valid=1m min_uses=2;\n```",
    },
];
