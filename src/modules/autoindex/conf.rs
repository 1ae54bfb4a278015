//! Directives of the directory listing: `autoindex` and its options.

use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::{bad_arg, flag, set_once};
use crate::settings;

/// `autoindex_format`: how the listing is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Html,
    Json,
    /// JSON wrapped in a call to the function named by the `callback` argument.
    Jsonp,
    Xml,
}

settings! {
    /// Directory listing settings of one level.
    pub struct AutoindexConf / AutoindexConfSet {
        pub autoindex: bool = false,
        pub format: Format = Format::Html,
        pub exact_size: bool = true,
        pub localtime: bool = false,
    }
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "autoindex",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<AutoindexConfSet>().autoindex,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "autoindex on | off;",
        default: "off",
        doc: "Lists a directory asked for with a URI ending in `/` when none of its `index` files exists (instead of answering 403). Names starting with `.` are left out; directories come first, then files, each group in byte order of the name. Example: `location /pub/ { autoindex on; }`.\n\n```nginx\nlocation /pub/ { autoindex on; }\n```",
    },
    Def {
        name: "autoindex_format",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let f = match d.arg(0) {
                "html" => Format::Html,
                "json" => Format::Json,
                "jsonp" => Format::Jsonp,
                "xml" => Format::Xml,
                v => return Err(bad_arg(d, v)),
            };
            set_once(&mut s.loc().get_mut::<AutoindexConfSet>().format, f, d)
        },
        syntax: "autoindex_format html | json | jsonp | xml;",
        default: "html",
        doc: "Format of the listing. `html`: a page with one line per entry (link, modification time, size). `json`: an array of objects with `name`, `type` (`directory`, `file` or `other`), `mtime` (HTTP date, GMT) and, for files, `size` in bytes. `jsonp`: the JSON passed to the function named by the `callback` query argument (letters, digits, `_` and `.`; at most 128), or plain JSON without one. `xml`: a `<list>` of `<directory>`, `<file>` and `<other>` elements with `mtime` (ISO 8601, UTC) and `size` attributes. Example: `autoindex_format json;`.\n\n```nginx\nautoindex_format json;\n```",
    },
    Def {
        name: "autoindex_exact_size",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<AutoindexConfSet>().exact_size,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "autoindex_exact_size on | off;",
        default: "on",
        doc: "HTML listing only: sizes in bytes, or with `off` rounded to kibibytes, mebibytes or gibibytes (`10K`, `3M`, `2G`) from 10000 bytes up. Example: `autoindex_exact_size off;`.\n\n```nginx\nautoindex_exact_size off;\n```",
    },
    Def {
        name: "autoindex_localtime",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<AutoindexConfSet>().localtime,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "autoindex_localtime on | off;",
        default: "off",
        doc: "HTML listing only: modification times in the server's local time zone instead of UTC (JSON and XML always use UTC). Example: `autoindex_localtime on;`.\n\n```nginx\nautoindex_localtime on;\n```",
    },
];
