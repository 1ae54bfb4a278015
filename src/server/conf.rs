//! Process-level directives of the server: privilege drop and the drain timeout.

use crate::conf::ast::ConfError;
use crate::conf::table::{Arity, Ctx, Def, ONE};
use crate::conf::values::{set_once, time};

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "user",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: Arity::args(1, 2),
        set: |s, d, _| {
            let name = d.arg(0);
            let (uid, primary) = match crate::sys::lookup_user(name) {
                Ok(Some(u)) => u,
                Ok(None) => {
                    return Err(ConfError::new(
                        format!("getpwnam(\"{name}\") failed: no such user"),
                        &d.span,
                    ));
                }
                Err(e) => {
                    return Err(ConfError::new(
                        format!("getpwnam(\"{name}\") failed ({e})"),
                        &d.span,
                    ));
                }
            };
            let gid = match d.args.get(1).map(|a| a.value.as_str()) {
                None => primary,
                Some(g) => match crate::sys::lookup_group(g) {
                    Ok(Some(gid)) => gid,
                    Ok(None) => {
                        return Err(ConfError::new(
                            format!("getgrnam(\"{g}\") failed: no such group"),
                            &d.span,
                        ));
                    }
                    Err(e) => {
                        return Err(ConfError::new(
                            format!("getgrnam(\"{g}\") failed ({e})"),
                            &d.span,
                        ));
                    }
                },
            };
            set_once(&mut s.main().user, (name.to_string(), uid, gid), d)
        },
        syntax: "user user [group];",
        default: "— (stay as started)",
        doc: "When started as root: after the listening sockets are bound, the pid file written and the logs opened, switch to this user and group (the user's primary group when omitted) before serving. Ignored, with a notice, when not started as root. See docs/operations.md for what this means for reloads and upgrades.\n\n```nginx\nuser www-data;\n```",
    },
    Def {
        name: "worker_shutdown_timeout",
        ignored: false,
        ctx: Ctx::MAIN,
        arity: ONE,
        set: |s, d, _| set_once(&mut s.main().worker_shutdown_timeout, time(d, 0)?, d),
        syntax: "worker_shutdown_timeout time;",
        default: "— (wait for every connection)",
        doc: "The drain timeout: how long a draining worker (graceful stop, the old binary after an upgrade, a worker retired by a reload) waits for its connections, long downloads and other long-lived ones included, before closing them. Also how long after a reload the client connections opened before it (kept-alive, upgraded, still downloading) are closed; without the directive they serve on under the new configuration.\n\n```nginx\nworker_shutdown_timeout 30s;\n```",
    },
];
