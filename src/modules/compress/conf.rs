//! Directives of response compression: the `gzip*` family of nginx's gzip and
//! gzip_static modules, `brotli*` (google/ngx_brotli) and `zstd*`
//! (tokers/zstd-nginx-module), and vireo's `compress_cache`.

use super::Coding;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE};
use crate::conf::values::{bad_arg, flag, number, parse_size, regex, set_once, size};
use crate::core::message::head::Version;
use crate::core::mime::TypeList;
use crate::core::vars::{Re, Vars};
use crate::settings;
use std::sync::Arc;

/// `gzip_proxied` flags, as nginx's bit mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proxied(pub u16);

impl Proxied {
    pub const OFF: u16 = 1;
    pub const EXPIRED: u16 = 2;
    pub const NO_CACHE: u16 = 4;
    pub const NO_STORE: u16 = 8;
    pub const PRIVATE: u16 = 16;
    pub const NO_LM: u16 = 32;
    pub const NO_ETAG: u16 = 64;
    pub const AUTH: u16 = 128;
    pub const ANY: u16 = 256;

    pub fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
}

/// `gzip_disable`: User-Agent patterns (case-insensitive) and the `msie6` mask.
#[derive(Debug)]
pub struct Disable {
    pub msie6: bool,
    pub patterns: Vec<Re>,
}

/// `gzip_static` / `brotli_static` / `zstd_static`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaticMode {
    Off,
    /// Serve `file.gz` to clients that accept gzip (and pass the gzip_* checks).
    On,
    /// Serve `file.gz` whatever the client says.
    Always,
}

/// Bytes of compressed variants one worker keeps by default (`compress_cache`).
pub const CACHE_DEFAULT: u64 = 16 << 20;

settings! {
    /// Response compression settings of one level.
    pub struct CompressConf / CompressConfSet {
        pub gzip: bool = false,
        pub gzip_types: Arc<TypeList> = TypeList::html(),
        pub gzip_min_length: u64 = 20,
        pub gzip_comp_level: u8 = 1,
        pub gzip_http_version: Version = Version::Http11,
        pub gzip_proxied: Proxied = Proxied(Proxied::OFF),
        pub gzip_disable: Option<Arc<Disable>> = None,
        pub gzip_vary: bool = false,
        pub gzip_static: StaticMode = StaticMode::Off,
        pub brotli: bool = false,
        pub brotli_types: Arc<TypeList> = TypeList::html(),
        pub brotli_min_length: u64 = 20,
        pub brotli_comp_level: u8 = 6,
        /// log2 of the window (`brotli_window 512k` = 19).
        pub brotli_window: u8 = 19,
        pub brotli_static: StaticMode = StaticMode::Off,
        pub zstd: bool = false,
        pub zstd_types: Arc<TypeList> = TypeList::html(),
        pub zstd_min_length: u64 = 20,
        pub zstd_comp_level: u8 = 1,
        pub zstd_static: StaticMode = StaticMode::Off,
        /// Per-worker budget of the compressed-variant cache; 0 is off.
        pub compress_cache: u64 = CACHE_DEFAULT,
    }
}

impl CompressConf {
    /// Is any on-the-fly coding on here?
    pub fn any_dynamic(&self) -> bool {
        self.gzip || self.brotli || self.zstd
    }

    pub fn any_static(&self) -> bool {
        self.gzip_static != StaticMode::Off
            || self.brotli_static != StaticMode::Off
            || self.zstd_static != StaticMode::Off
    }

    pub fn static_mode(&self, c: Coding) -> StaticMode {
        match c {
            Coding::Br => self.brotli_static,
            Coding::Zstd => self.zstd_static,
            Coding::Gzip => self.gzip_static,
        }
    }

    /// On, types and minimum length of a coding.
    pub fn dynamic(&self, c: Coding) -> (bool, &TypeList, u64) {
        match c {
            Coding::Br => (self.brotli, &self.brotli_types, self.brotli_min_length),
            Coding::Zstd => (self.zstd, &self.zstd_types, self.zstd_min_length),
            Coding::Gzip => (self.gzip, &self.gzip_types, self.gzip_min_length),
        }
    }
}

pub fn types(d: &Directive) -> Result<Arc<TypeList>, ConfError> {
    TypeList::of(d.arg_strs()).map_err(|a| bad_arg(d, a))
}

fn level(d: &Directive, min: u64, max: u64) -> Result<u8, ConfError> {
    let n = number(d, 0)?;
    if !(min..=max).contains(&n) {
        return Err(ConfError::new(
            format!(
                "\"{}\" must be between {min} and {max} in \"{}\"",
                d.arg(0),
                d.name
            ),
            &d.span,
        ));
    }
    Ok(n as u8)
}

fn static_mode(d: &Directive) -> Result<StaticMode, ConfError> {
    match d.arg(0) {
        "off" => Ok(StaticMode::Off),
        "on" => Ok(StaticMode::On),
        "always" => Ok(StaticMode::Always),
        v => Err(bad_arg(d, v)),
    }
}

/// `… number size;`: checked, then without effect.
fn buffers(d: &Directive) -> Result<(), ConfError> {
    number(d, 0)?;
    size(d, 1)?;
    Ok(())
}

fn proxied(d: &Directive) -> Result<Proxied, ConfError> {
    let mut p = 0;
    for a in d.arg_strs() {
        p |= match a {
            "off" => Proxied::OFF,
            "expired" => Proxied::EXPIRED,
            "no-cache" => Proxied::NO_CACHE,
            "no-store" => Proxied::NO_STORE,
            "private" => Proxied::PRIVATE,
            "no_last_modified" => Proxied::NO_LM,
            "no_etag" => Proxied::NO_ETAG,
            "auth" => Proxied::AUTH,
            "any" => Proxied::ANY,
            _ => return Err(bad_arg(d, a)),
        };
    }
    Ok(Proxied(p))
}

/// `gzip_disable` adds to what the same level already listed, as nginx.
fn disable(
    slot: &mut Option<Option<Arc<Disable>>>,
    d: &Directive,
    vars: &mut Vars,
) -> Result<(), ConfError> {
    let (mut msie6, mut patterns) = match slot.take().flatten() {
        Some(old) => (old.msie6, old.patterns.clone()),
        None => (false, Vec::new()),
    };
    for a in d.arg_strs() {
        if a == "msie6" {
            msie6 = true;
        } else {
            patterns.push(regex(d, a, true, vars)?);
        }
    }
    *slot = Some(Some(Arc::new(Disable { msie6, patterns })));
    Ok(())
}

/// `brotli_window`: a power of two from 1k to 16m, stored as its log2.
fn window(d: &Directive) -> Result<u8, ConfError> {
    let n = parse_size(d.arg(0)).ok_or_else(|| bad_arg(d, d.arg(0)))?;
    if !n.is_power_of_two() || !(1 << 10..=1 << 24).contains(&n) {
        return Err(bad_arg(d, d.arg(0)));
    }
    Ok(n.trailing_zeros() as u8)
}

const TWO: Arity = Arity::args(2, 2);

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "gzip",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().gzip,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "gzip on | off;",
        default: "off",
        doc: "Compress responses with gzip on the fly: responses with status 200, 403 or 404 whose type is in `gzip_types` and whose length is at least `gzip_min_length` (or unknown), to clients whose Accept-Encoding allows gzip, when `gzip_http_version`, `gzip_proxied` and `gzip_disable` let it. The body is compressed as it is sent (files are read in pieces, streamed bodies piece by piece) and goes out chunked; an unbuffered upstream response (`proxy_buffering off`, `fastcgi_buffering off`, `X-Accel-Buffering: no`) is flushed whenever the upstream pauses; bodies up to 256 KiB are compressed at once (and their compressed form kept by `compress_cache`), and go out without a length all the same, as nginx sends what it compresses. With a minimum length of 0 an empty body is compressed too, as nginx does. Compressed responses carry `Content-Encoding`, a weak ETag (`W/`) and no `Accept-Ranges`. HEAD requests, ranges (206), 304 and responses that already have a Content-Encoding are left alone. When brotli or zstd are on too, the client's q-values choose; equal ones go br, then zstd, then gzip.\n\n```nginx\ngzip on;\n```",
    },
    Def {
        name: "gzip_types",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().gzip_types,
                types(d)?,
                d,
            )
        },
        syntax: "gzip_types mime-type …;",
        default: "text/html",
        doc: "MIME types compressed with gzip, besides `text/html` which always is; `*` is any type. Parameters of the response's Content-Type (`; charset=…`) are ignored.\n\n```nginx\ngzip_types text/css application/javascript application/json image/svg+xml;\n```",
    },
    Def {
        name: "gzip_min_length",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().gzip_min_length,
                size(d, 0)?,
                d,
            )
        },
        syntax: "gzip_min_length length;",
        default: "20",
        doc: "Responses shorter than this (by their known length) are sent uncompressed.\n\n```nginx\ngzip_min_length 1000;\n```",
    },
    Def {
        name: "gzip_comp_level",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().gzip_comp_level,
                level(d, 1, 9)?,
                d,
            )
        },
        syntax: "gzip_comp_level level;",
        default: "1",
        doc: "gzip compression level, 1 (fastest) to 9 (smallest). The encoder is zlib-rs, whose levels 3–6 use zlib-ng's faster \"medium\" strategy.\n\n```nginx\ngzip_comp_level 5;\n```",
    },
    Def {
        name: "gzip_buffers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: TWO,
        set: |_, d, _| buffers(d),
        syntax: "gzip_buffers number size;",
        default: "32 4k | 16 8k",
        doc: "Accepted for compatibility and checked, without effect: the encoders work on 64 KiB pieces of input and hand each piece of output to the connection as it is produced.\n\n```nginx\ngzip_buffers 16 8k;\n```",
    },
    Def {
        name: "gzip_http_version",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = match d.arg(0) {
                "1.0" => Version::Http10,
                "1.1" => Version::Http11,
                v => return Err(bad_arg(d, v)),
            };
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().gzip_http_version,
                v,
                d,
            )
        },
        syntax: "gzip_http_version 1.0 | 1.1;",
        default: "1.1",
        doc: "Lowest HTTP version of a request whose response is compressed (by any coding, and for `*_static on`). An HTTP/1.0 response of unknown compressed length ends with the connection.\n\n```nginx\ngzip_http_version 1.0;\n```",
    },
    Def {
        name: "gzip_proxied",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().gzip_proxied,
                proxied(d)?,
                d,
            )
        },
        syntax: "gzip_proxied off | expired | no-cache | no-store | private | no_last_modified | no_etag | auth | any …;",
        default: "off",
        doc: "Whether to compress responses to proxied requests (those with a `Via` header), as nginx decides it: `off` never; `any` always; `auth` when the request has Authorization; otherwise a response with `Expires` is compressed only with `expired` and an expiry before its Date, one with `Cache-Control` only when it says `no-cache`, `no-store` or `private` and that flag is listed; with neither, `no_last_modified` and `no_etag` refuse responses that have those headers. Applies to every coding and to `*_static on`.\n\n```nginx\ngzip_proxied expired no-cache no-store private auth;\n```",
    },
    Def {
        name: "gzip_disable",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, e| {
            disable(
                &mut s.loc().get_mut::<CompressConfSet>().gzip_disable,
                d,
                &mut e.vars,
            )
        },
        syntax: "gzip_disable regex …;",
        default: "—",
        doc: "No compression (any coding, and no `*_static on` variant) for requests whose User-Agent matches one of these case-insensitive regular expressions. The mask `msie6` stands for MSIE 4–6 without SV1, as nginx detects them.\n\n```nginx\ngzip_disable \"msie6\";\n```",
    },
    Def {
        name: "gzip_vary",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().gzip_vary,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "gzip_vary on | off;",
        default: "off",
        doc: "Add `Vary: Accept-Encoding` to responses that could have been compressed (by type, status and length, whatever the client accepted) and to files that have a precompressed variant where some `*_static` is `on` (not with `always` alone, whose answer is the same for every client, as nginx); for every coding.\n\n```nginx\ngzip_vary on;\n```",
    },
    Def {
        name: "gzip_static",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().gzip_static,
                static_mode(d)?,
                d,
            )
        },
        syntax: "gzip_static on | off | always;",
        default: "off",
        doc: "Serve `file.gz` in place of `file` to clients that accept gzip (`on`, which also applies the gzip_http_version, gzip_proxied and gzip_disable checks) or to every client (`always`), with `Content-Encoding: gzip` and the variant's own Content-Length, ETag and Last-Modified; ranges and conditional requests apply to the variant. Unlike nginx, a variant older than the file is not used; as in nginx, a variant is served (GET and HEAD) even when the file itself does not exist, so a site may ship only `file.gz`. Without a variant, on-the-fly compression applies as usual.\n\n```nginx\ngzip_static on;\n```",
    },
    Def {
        name: "brotli",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().brotli,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "brotli on | off;",
        default: "off",
        doc: "Compress responses with brotli on the fly, under the same rules as `gzip` (statuses, `gzip_http_version`, `gzip_proxied`, `gzip_disable`, `gzip_vary`) with its own types, minimum length and level.\n\n```nginx\nbrotli on;\n```",
    },
    Def {
        name: "brotli_types",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().brotli_types,
                types(d)?,
                d,
            )
        },
        syntax: "brotli_types mime-type …;",
        default: "text/html",
        doc: "MIME types compressed with brotli, besides `text/html`; `*` is any type.\n\n```nginx\nbrotli_types text/css application/javascript image/svg+xml;\n```",
    },
    Def {
        name: "brotli_min_length",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().brotli_min_length,
                size(d, 0)?,
                d,
            )
        },
        syntax: "brotli_min_length length;",
        default: "20",
        doc: "Responses shorter than this are not compressed with brotli.\n\n```nginx\nbrotli_min_length 256;\n```",
    },
    Def {
        name: "brotli_comp_level",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().brotli_comp_level,
                level(d, 0, 11)?,
                d,
            )
        },
        syntax: "brotli_comp_level level;",
        default: "6",
        doc: "brotli quality, 0 to 11.\n\n```nginx\nbrotli_comp_level 5;\n```",
    },
    Def {
        name: "brotli_window",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().brotli_window,
                window(d)?,
                d,
            )
        },
        syntax: "brotli_window size;",
        default: "512k",
        doc: "brotli window, a power of two from 1k to 16m; smaller for bodies of known smaller length.\n\n```nginx\nbrotli_window 512k;\n```",
    },
    Def {
        name: "brotli_buffers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: TWO,
        set: |_, d, _| buffers(d),
        syntax: "brotli_buffers number size;",
        default: "32 4k | 16 8k",
        doc: "Accepted for compatibility and checked, without effect (as in ngx_brotli, where it is deprecated).\n\n```nginx\nbrotli_buffers 16 8k;\n```",
    },
    Def {
        name: "brotli_static",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().brotli_static,
                static_mode(d)?,
                d,
            )
        },
        syntax: "brotli_static on | off | always;",
        default: "off",
        doc: "As `gzip_static`, for `file.br` and `Content-Encoding: br`. When several variants exist, the client's q-values choose, equal ones in the order br, zstd, gzip.\n\n```nginx\nbrotli_static on;\n```",
    },
    Def {
        name: "zstd",
        ignored: false,
        ctx: Ctx::HSL.or(Ctx::IF),
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().zstd,
                flag(d, 0)?,
                d,
            )
        },
        syntax: "zstd on | off;",
        default: "off",
        doc: "Compress responses with zstd on the fly, under the same rules as `gzip`, with its own types, minimum length and level. The window stays within the 8 MB that RFC 9659 allows for HTTP.\n\n```nginx\nzstd on;\n```",
    },
    Def {
        name: "zstd_types",
        ignored: false,
        ctx: Ctx::HSL,
        arity: Arity::args(1, MANY),
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().zstd_types,
                types(d)?,
                d,
            )
        },
        syntax: "zstd_types mime-type …;",
        default: "text/html",
        doc: "MIME types compressed with zstd, besides `text/html`; `*` is any type.\n\n```nginx\nzstd_types text/css application/javascript application/json;\n```",
    },
    Def {
        name: "zstd_min_length",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().zstd_min_length,
                size(d, 0)?,
                d,
            )
        },
        syntax: "zstd_min_length length;",
        default: "20",
        doc: "Responses shorter than this are not compressed with zstd.\n\n```nginx\nzstd_min_length 256;\n```",
    },
    Def {
        name: "zstd_comp_level",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().zstd_comp_level,
                level(d, 1, 22)?,
                d,
            )
        },
        syntax: "zstd_comp_level level;",
        default: "1",
        doc: "zstd compression level, 1 to 22.\n\n```nginx\nzstd_comp_level 3;\n```",
    },
    Def {
        name: "zstd_buffers",
        ignored: false,
        ctx: Ctx::HSL,
        arity: TWO,
        set: |_, d, _| buffers(d),
        syntax: "zstd_buffers number size;",
        default: "32 4k | 16 8k",
        doc: "Accepted for compatibility and checked, without effect.\n\n```nginx\nzstd_buffers 16 8k;\n```",
    },
    Def {
        name: "zstd_static",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().zstd_static,
                static_mode(d)?,
                d,
            )
        },
        syntax: "zstd_static on | off | always;",
        default: "off",
        doc: "As `gzip_static`, for `file.zst` and `Content-Encoding: zstd`.\n\n```nginx\nzstd_static on;\n```",
    },
    Def {
        name: "compress_cache",
        ignored: false,
        ctx: Ctx::HSL,
        arity: ONE,
        set: |s, d, _| {
            let v = if d.arg(0) == "off" { 0 } else { size(d, 0)? };
            set_once(
                &mut s.loc().get_mut::<CompressConfSet>().compress_cache,
                v,
                d,
            )
        },
        syntax: "compress_cache size | off;",
        default: "16m",
        doc: "vireo's own: each worker keeps the compressed bytes of static files of up to 256 KiB that it compressed on the fly, keyed by the file's device, inode, modification time and size and by coding and level, so a hot file is compressed once rather than per request. `size` bounds the compressed bytes one worker holds (an entry may use at most an eighth of it); past it, the least recently used entries go. Small files served from the open-file cache are keyed by that cached body and count it too. `off` compresses every response afresh, as nginx does.\n\n```nginx\ncompress_cache 32m;\n```",
    },
];
