//! Directives of the CGI handler (vireo's own; nginx has no CGI).

use super::Cgi;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, Env, Scope};
use crate::conf::values::{bad_arg, number, size, time};
use crate::settings;
use crate::upstream::params::{self, Param};
use std::sync::Arc;
use std::time::Duration;

settings! {
    /// CGI settings of one level; `cgi_param` is a list set as a whole.
    pub struct CgiConf / CgiConfSet {
        pub params: Arc<Vec<Param>> = Arc::new(Vec::new()),
        pub read_timeout: Duration = Duration::from_secs(60),
        pub max_processes: usize = 32,
        pub buffer_size: usize = 8192,
    }
}

fn push_param(s: &mut Scope<'_>, d: &Directive, e: &mut Env) -> Result<(), ConfError> {
    if d.arg(0).contains('=') {
        return Err(bad_arg(d, d.arg(0)));
    }
    params::push(&mut s.loc().get_mut::<CgiConfSet>().params, d, e)
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "cgi",
        ignored: false,
        ctx: Ctx::LOCATION,
        arity: Arity::args(0, 0),
        set: |s, d, _| s.set_content(d, Arc::new(Cgi)),
        syntax: "cgi;",
        default: "—",
        doc: "vireo's own (nginx has no CGI): runs the file the URI maps to (root or alias + URI, which never leaves the root) as a CGI/1.1 program (RFC 3875) and answers with its output. A missing file is 404, one without execute permission 403. The environment is built from the request only (GATEWAY_INTERFACE, REQUEST_METHOD, QUERY_STRING, SCRIPT_NAME, SCRIPT_FILENAME, SERVER_*, REMOTE_ADDR, CONTENT_LENGTH, CONTENT_TYPE, HTTP_* headers, a fixed PATH) plus `cgi_param`. The body streams to the program's stdin while its stdout streams back with backpressure; its stderr goes to the error log; `Status:`, `Location:` (a local one is an internal redirect) and `X-Accel-Redirect` are honoured. A client that goes away gets the process killed.\n\n```nginx\nlocation /cgi-bin/ {\n    cgi;\n    cgi_read_timeout 30s;\n}\n```",
    },
    Def {
        name: "cgi_param",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(2, 3),
        set: push_param,
        syntax: "cgi_param name value [if_not_empty];",
        default: "—",
        doc: "An environment variable for CGI programs (replacing one of the same name); the value may hold variables.\n\n```nginx\ncgi_param APP_ENV production;\ncgi_param HTTP_X_USER $remote_user if_not_empty;\n```",
    },
    Def {
        name: "cgi_read_timeout",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<CgiConfSet>().read_timeout = Some(time(d, 0)?);
            Ok(())
        },
        syntax: "cgi_read_timeout time;",
        default: "60s",
        doc: "How long a CGI program may stay silent: before its head this answers 504; later it ends the response and the process is killed.\n\n```nginx\ncgi_read_timeout 30s;\n```",
    },
    Def {
        name: "cgi_max_processes",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<CgiConfSet>().max_processes = Some(number(d, 0)?.max(1) as usize);
            Ok(())
        },
        syntax: "cgi_max_processes number;",
        default: "32",
        doc: "CGI processes one worker runs at once; a request beyond is answered with 503.\n\n```nginx\ncgi_max_processes 32;\n```",
    },
    Def {
        name: "cgi_buffer_size",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 1),
        set: |s, d, _| {
            s.loc().get_mut::<CgiConfSet>().buffer_size = Some(size(d, 0)?.max(512) as usize);
            Ok(())
        },
        syntax: "cgi_buffer_size size;",
        default: "8k",
        doc: "The largest response head a CGI program may write; a bigger one is answered with 502.\n\n```nginx\ncgi_buffer_size 8k;\n```",
    },
];
