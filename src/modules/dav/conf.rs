//! Directives of the WebDAV module.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE, Scope};
use crate::conf::values::{bad_arg, flag, number, set_once};
use crate::settings;

/// The methods `dav_methods` turns on, as a bit set.
pub const PUT: u8 = 1;
pub const DELETE: u8 = 2;
pub const MKCOL: u8 = 4;
pub const COPY: u8 = 8;
pub const MOVE: u8 = 16;

settings! {
    /// WebDAV settings of one level.
    pub struct DavConf / DavConfSet {
        pub methods: u8 = 0,
        /// Permissions of the files (and, with `x` added where `r` is, the
        /// folders) PUT, MKCOL and COPY make.
        pub access: u32 = 0o600,
        pub create_full_put_path: bool = false,
        pub min_delete_depth: u64 = 0,
    }
}

fn loc<'a>(s: &'a mut Scope<'_>) -> &'a mut DavConfSet {
    s.loc().get_mut::<DavConfSet>()
}

fn methods(d: &Directive) -> Result<u8, ConfError> {
    let mut m = 0;
    for a in d.arg_strs() {
        m |= match a {
            "off" if d.args.len() == 1 => 0,
            "PUT" => PUT,
            "DELETE" => DELETE,
            "MKCOL" => MKCOL,
            "COPY" => COPY,
            "MOVE" => MOVE,
            _ => return Err(bad_arg(d, a)),
        };
    }
    Ok(m)
}

/// `user:rw group:r all:r` → 0644, as nginx's `ngx_conf_set_access_slot`.
fn access(d: &Directive) -> Result<u32, ConfError> {
    let mut mode = 0o600;
    let mut user_set = false;
    for a in d.arg_strs() {
        let (who, what) = a.split_once(':').ok_or_else(|| bad_arg(d, a))?;
        let shift = match who {
            "user" => {
                user_set = true;
                6
            }
            "group" => 3,
            "all" => 0,
            _ => return Err(bad_arg(d, a)),
        };
        let bits = match what {
            "r" => 4,
            "rw" => 6,
            _ => return Err(bad_arg(d, a)),
        };
        if shift == 6 {
            mode &= !0o700;
        }
        mode |= bits << shift;
    }
    if !user_set {
        mode |= 0o600;
    }
    Ok(mode)
}

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "dav_methods",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            let v = methods(d)?;
            set_once(&mut loc(s).methods, v, d)
        },
        syntax: "dav_methods off | method …;",
        default: "off",
        doc: "The WebDAV methods the level's files answer: `PUT` (the body, written to a temporary file in the target's folder, takes the file's place at once; 201 for a new file, 204 for a replaced one; a `Date` header sets its time), `DELETE` (a file, or a folder and everything in it when the URI ends in `/`), `MKCOL` (a folder; the URI ends in `/`), `COPY` and `MOVE` (to the `Destination` header's URI on this server, with `Depth` and `Overwrite`). As nginx: other methods go on to the static files, requests with a body other than PUT's get 415, and a location with `proxy_pass` or another handler does not use them.\n\n```nginx\nlocation /upload/ {\n    dav_methods PUT DELETE MKCOL COPY MOVE;\n    create_full_put_path on;\n    dav_access group:rw all:r;\n}\n```",
    },
    Def {
        name: "dav_access",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, 3),
        set: |s, d, _| {
            let v = access(d)?;
            set_once(&mut loc(s).access, v, d)
        },
        syntax: "dav_access users:permissions …;",
        default: "user:rw",
        doc: "Permissions of the files WebDAV makes (`user`, `group`, `all`; `r` or `rw`); folders get `x` where they get `r`.\n\n```nginx\ndav_access user:rw group:rw all:r;\n```",
    },
    Def {
        name: "create_full_put_path",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = flag(d, 0)?;
            set_once(&mut loc(s).create_full_put_path, v, d)
        },
        syntax: "create_full_put_path on | off;",
        default: "off",
        doc: "With `on`, PUT makes the folders missing on the way to its file; with `off` it answers 409.\n\n```nginx\ncreate_full_put_path on;\n```",
    },
    Def {
        name: "min_delete_depth",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = number(d, 0)?;
            set_once(&mut loc(s).min_delete_depth, v, d)
        },
        syntax: "min_delete_depth number;",
        default: "0",
        doc: "DELETE is refused (409) for a URI with fewer than `number` slashes.\n\n```nginx\nmin_delete_depth 2;\n```",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn d(args: &[&str]) -> Directive {
        Directive::test("dav_access", args, 1)
    }

    #[test]
    fn access_modes() {
        assert_eq!(access(&d(&["user:rw", "group:r", "all:r"])).unwrap(), 0o644);
        assert_eq!(access(&d(&["group:rw", "all:r"])).unwrap(), 0o664);
        assert_eq!(access(&d(&["user:r"])).unwrap(), 0o400);
        assert!(access(&d(&["others:r"])).is_err());
        assert!(access(&d(&["user:x"])).is_err());
    }
}
