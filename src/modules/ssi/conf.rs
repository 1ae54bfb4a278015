//! Directives of the SSI filter: `ssi`, `ssi_types`, `ssi_silent_errors`,
//! `ssi_value_length`, `ssi_last_modified`, `ssi_min_file_chunk`.

use crate::conf::table::{Arity, Ctx, Def, MANY, ONE};
use crate::conf::values::{flag, number, set_once, size};
use crate::core::mime::TypeList;
use crate::modules::compress::conf::types;
use crate::settings;
use std::sync::Arc;

settings! {
    /// SSI settings of one level.
    pub struct SsiConf / SsiConfSet {
        pub ssi: bool = false,
        pub types: Arc<TypeList> = TypeList::html(),
        pub silent_errors: bool = false,
        pub value_length: u64 = 256,
        pub last_modified: bool = false,
        pub min_file_chunk: u64 = 1024,
    }
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "ssi",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| set_once(&mut s.loc().get_mut::<SsiConfSet>().ssi, flag(d, 0)?, d),
        syntax: "ssi on | off;",
        default: "off",
        doc: "Processes SSI commands (`<!--#include virtual=\"/footer.html\" -->`, `echo`, `set`, `if`/`elif`/`else`/`endif`, `config`, `block`) in responses whose type is in `ssi_types`, as nginx's SSI filter: the body is parsed as it streams (commands may span any pieces, the document is never held whole) and includes are subrequests through the server's locations (static files, proxy_pass, fastcgi_pass, `internal` locations), their output placed in document order. The response loses its Content-Length, Accept-Ranges, and unless `ssi_last_modified` is on, its Last-Modified and ETag. Runs before compression.\n\n```nginx\nlocation / {\n    ssi on;\n}\n```",
    },
    Def {
        name: "ssi_types",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| set_once(&mut s.loc().get_mut::<SsiConfSet>().types, types(d)?, d),
        syntax: "ssi_types mime-type …;",
        default: "text/html",
        doc: "MIME types processed for SSI commands, besides `text/html` which always is; `*` is any type.\n\n```nginx\nssi_types text/plain application/xhtml+xml;\n```",
    },
    Def {
        name: "ssi_silent_errors",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SsiConfSet>().silent_errors,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "ssi_silent_errors on | off;",
        default: "off",
        doc: "A command that fails outputs nothing, instead of the error message (`[an error occurred while processing the directive]`, or `config errmsg`). The error is logged either way.\n\n```nginx\nssi_silent_errors on;\n```",
    },
    Def {
        name: "ssi_value_length",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SsiConfSet>().value_length,
                number(d, 0)?,
                d,
            )
        },
        syntax: "ssi_value_length length;",
        default: "256",
        doc: "Longest value of a command's parameter; a longer one is an error.\n\n```nginx\nssi_value_length 1024;\n```",
    },
    Def {
        name: "ssi_last_modified",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SsiConfSet>().last_modified,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "ssi_last_modified on | off;",
        default: "off",
        doc: "Keeps the Last-Modified of the original response (its ETag then becomes weak, `W/`), as nginx; off, both are removed.\n\n```nginx\nssi_last_modified on;\n```",
    },
    Def {
        name: "ssi_min_file_chunk",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<SsiConfSet>().min_file_chunk,
                size(d, 0)?,
                d,
            )
        },
        syntax: "ssi_min_file_chunk size;",
        default: "1k",
        doc: "The document's text and command output are gathered until they reach this size before they go on to the client (or compression), except where the document waits for an include or ends.\n\n```nginx\nssi_min_file_chunk 4k;\n```",
    },
];
