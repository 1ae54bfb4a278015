//! The `slice` directive.

use crate::conf::table::{Ctx, Def, ONE};
use crate::conf::values::{set_once, size};
use crate::settings;

settings! {
    /// Slicing settings of one level.
    pub struct SliceConf / SliceConfSet {
        /// Bytes per slice; 0: no slicing.
        pub size: u64 = 0,
    }
}

pub static DIRECTIVES: &[Def] = &[Def {
    name: "slice",
    ignored: false,
    ctx: Ctx::HSL,
    arity: ONE,
    set: |s, d, _| set_once(&mut s.loc().get_mut::<SliceConfSet>().size, size(d, 0)?, d),
    syntax: "slice size;",
    default: "0",
    doc: "Fetches the response in slices of `size` bytes, as nginx's slice module: the upstream request must ask for `$slice_range` (`proxy_set_header Range $slice_range;`, or `fastcgi_param`), and a cache key that includes `$slice_range` keeps each slice as its own entry. The request fetches the slice holding the start of the client's `Range` (the first slice otherwise); the upstream's 206 for it becomes the whole representation (200 with its complete length, or the client's range of it as a 206), and the next slices are fetched as subrequests of the same location, with the same URI, arguments, method and headers, only as far as the client's range or the representation goes. Each must be a 206 with the expected `Content-Range` and the first one's `ETag`, else the connection is closed. A 200 to the first slice is sent as it is. The body streams: one slice's piece at a time. `0` turns slicing off.\n\n```nginx\nlocation / {\n    slice 1m;\n    proxy_cache cache;\n    proxy_cache_key $uri$is_args$args$slice_range;\n    proxy_set_header Range $slice_range;\n    proxy_cache_valid 200 206 1h;\n    proxy_pass http://127.0.0.1:8000;\n}\n```",
}];
