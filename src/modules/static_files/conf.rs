//! Directives of the static file handler.

use crate::conf::ast::ConfError;
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE, Scope};
use crate::conf::values::{bad_arg, flag, number, option, set_once, size, time};
use crate::core::vars::Template;
use crate::settings;
use std::sync::Arc;
use std::time::Duration;

use super::conditional::IfModifiedSince;

/// `open_file_cache max=N [inactive=time]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFileCacheSpec {
    pub max: usize,
    pub inactive: Duration,
}

settings! {
    pub struct StaticConf / StaticConfSet {
        pub index: Arc<[Template]> = Arc::from(vec![Template::plain("index.html")]),
        pub sendfile: bool = false,
        pub sendfile_max_chunk: usize = 2 << 20,
        pub open_file_cache: Option<OpenFileCacheSpec> = None,
        pub open_file_cache_valid: Duration = Duration::from_secs(60),
        pub open_file_cache_min_uses: u32 = 1,
        pub open_file_cache_errors: bool = false,
        pub etag: bool = true,
        pub if_modified_since: IfModifiedSince = IfModifiedSince::Exact,
        pub max_ranges: Option<usize> = None,
    }
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "root",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, e| {
            if let Scope::Location(l) = s
                && l.alias.is_some()
            {
                return Err(ConfError::new(
                    "\"root\" directive is duplicate, \"alias\" directive was specified earlier",
                    &d.span,
                ));
            }
            let t = crate::conf::values::template(d, 0, &mut e.vars)?;
            let (p, vars) = match t.is_literal() {
                true => (Arc::new(e.path(d.arg(0))), None),
                false => (Arc::new(e.path("")), Some(Arc::new(t))),
            };
            let core = &mut s.loc().core;
            core.root_vars = Some(vars);
            set_once(&mut core.root, p, d)
        },
        syntax: "root path;",
        default: "html",
        doc: "Document root: a request's file is root + URI. Relative paths are taken from the prefix (`-p`). Variables are allowed (`root /var/www/$host;`), the path rendered per request; a rendered path with a `.` or `..` segment gets 404.\n\n```nginx\nroot /var/www/example.com/public;\nroot /srv/sites/$host;\n```",
    },
    Def {
        name: "alias",
        ignored: false,
        ctx: Ctx::LOCATION,
        arity: ONE,
        set: |s, d, e| {
            // Variables are checked here, where an error names this line.
            crate::conf::values::template(d, 0, &mut e.vars)?;
            let Scope::Location(l) = s else {
                unreachable!()
            };
            if l.kind == crate::conf::model::LocKind::Named {
                return Err(ConfError::new(
                    "the \"alias\" directive cannot be used inside the named location",
                    &d.span,
                ));
            }
            if l.conf.core.root.is_some() {
                return Err(ConfError::new(
                    "\"alias\" directive is duplicate, \"root\" directive was specified earlier",
                    &d.span,
                ));
            }
            let p = e.path(d.arg(0)).to_string_lossy().into_owned();
            set_once(&mut l.alias, p, d)
        },
        syntax: "alias path;",
        default: "—",
        doc: "Replaces the location's matched prefix with this path when building the file name. In a regex location the alias is the whole file name, usually built from the location's captures. A location nested in a prefix location with an alias (without variables) and without `root` or `alias` of its own keeps that alias, in place of the enclosing location's prefix, as nginx. Variables are allowed; a URI that would climb out of the alias (`..`) gets 404.\n\n```nginx\nlocation /i/ { alias /data/w3/images/; }\nlocation ~ ^/users/(.+\\.(?:gif|jpe?g|png))$ { alias /data/w3/images/$1; }\n```",
    },
    Def {
        name: "index",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, e| {
            let v = d
                .arg_strs()
                .map(|a| Template::compile(a, &mut e.vars).map_err(|m| ConfError::new(m, &d.span)))
                .collect::<Result<Arc<[Template]>, _>>()?;
            set_once(&mut s.loc().get_mut::<StaticConfSet>().index, v, d)
        },
        syntax: "index file …;",
        default: "index.html",
        doc: "Files tried, in order, for a request URI ending in `/`; the first that exists is served through an internal redirect to the URI plus its name. Names may hold variables. A name starting with `/` (usually the last) is an internal redirect to that URI whether or not the file exists.\n\n```nginx\nindex index.php index.html /fallback.php;\n```",
    },
    Def {
        name: "sendfile",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<StaticConfSet>().sendfile,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "sendfile on | off;",
        default: "off",
        doc: "Send file bodies with sendfile(2) (plain TCP); `off` reads them into a buffer and writes that.\n\n```nginx\nsendfile on;\n```",
    },
    Def {
        name: "sendfile_max_chunk",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let n = usize::try_from(size(d, 0)?).map_err(|_| bad_arg(d, d.arg(0)))?;
            set_once(
                &mut s.loc().get_mut::<StaticConfSet>().sendfile_max_chunk,
                n,
                d,
            )
        },
        syntax: "sendfile_max_chunk size;",
        default: "2m",
        doc: "At most this many bytes per sendfile(2) call; after each such chunk the connection lets the worker serve others before it goes on. `0`: no limit.\n\n```nginx\nsendfile on;\nsendfile_max_chunk 512k;\n```",
    },
    Def {
        name: "open_file_cache",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 2),
        set: |s, d, _| {
            let v = if d.arg(0) == "off" && d.args.len() == 1 {
                None
            } else {
                let mut spec = OpenFileCacheSpec {
                    max: 0,
                    inactive: Duration::from_secs(60),
                };
                for a in d.arg_strs() {
                    if let Some(v) = option(a, "max") {
                        spec.max = v
                            .parse()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| bad_arg(d, a))?;
                    } else if let Some(v) = option(a, "inactive") {
                        spec.inactive =
                            crate::conf::values::parse_time(v).ok_or_else(|| bad_arg(d, a))?;
                    } else {
                        return Err(bad_arg(d, a));
                    }
                }
                if spec.max == 0 {
                    return Err(ConfError::new(
                        "\"open_file_cache\" must have the \"max\" parameter",
                        &d.span,
                    ));
                }
                Some(spec)
            };
            set_once(
                &mut s.loc().get_mut::<StaticConfSet>().open_file_cache,
                v,
                d,
            )
        },
        syntax: "open_file_cache off | max=N [inactive=time];",
        default: "off",
        doc: "Per-worker cache of open file descriptors, sizes and mtimes (and small file bodies), so a hot file costs no open/stat per request. Entries unused for `inactive` are dropped; past `max` the least recently used go.\n\n```nginx\nopen_file_cache max=10000 inactive=30s;\n```",
    },
    Def {
        name: "open_file_cache_valid",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<StaticConfSet>().open_file_cache_valid,
                time(d, 0)?,
                d,
            )
        },
        syntax: "open_file_cache_valid time;",
        default: "60s",
        doc: "How long a cached entry is trusted before it is checked against the file system again.\n\n```nginx\nopen_file_cache_valid 60s;\n```",
    },
    Def {
        name: "open_file_cache_min_uses",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let n = number(d, 0)?.clamp(1, u32::MAX as u64) as u32;
            set_once(
                &mut s.loc().get_mut::<StaticConfSet>().open_file_cache_min_uses,
                n,
                d,
            )
        },
        syntax: "open_file_cache_min_uses number;",
        default: "1",
        doc: "Uses within `inactive` before a file's descriptor is kept open.\n\n```nginx\nopen_file_cache_min_uses 2;\n```",
    },
    Def {
        name: "open_file_cache_errors",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<StaticConfSet>().open_file_cache_errors,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "open_file_cache_errors on | off;",
        default: "off",
        doc: "Also cache lookup errors (not found, forbidden).\n\n```nginx\nopen_file_cache_errors on;\n```",
    },
    Def {
        name: "etag",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().get_mut::<StaticConfSet>().etag, flag(d, 0)?, d),
        syntax: "etag on | off;",
        default: "on",
        doc: "Send an ETag (mtime-size) with static files and honour If-None-Match.\n\n```nginx\netag off;\n```",
    },
    Def {
        name: "if_modified_since",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0) {
                "off" => IfModifiedSince::Off,
                "exact" => IfModifiedSince::Exact,
                "before" => IfModifiedSince::Before,
                v => return Err(bad_arg(d, v)),
            };
            set_once(
                &mut s.loc().get_mut::<StaticConfSet>().if_modified_since,
                v,
                d,
            )
        },
        syntax: "if_modified_since off | exact | before;",
        default: "exact",
        doc: "How If-Modified-Since is compared with a file's mtime to answer 304.\n\n```nginx\nif_modified_since before;\n```",
    },
    Def {
        name: "max_ranges",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<StaticConfSet>().max_ranges,
                Some(number(d, 0)? as usize),
                d,
            )
        },
        syntax: "max_ranges number;",
        default: "— (unlimited)",
        doc: "Most ranges honoured in one Range request; more get the whole file. 0 disables ranges.\n\n```nginx\nmax_ranges 1;\n```",
    },
];
