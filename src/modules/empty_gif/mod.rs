//! `empty_gif`: a location that answers with a 1×1 transparent GIF, as
//! nginx's module of the same name (tracking pixels, placeholders).

use crate::conf::table::{Arity, Ctx, Def};
use crate::core::message::head::Method;
use crate::core::message::response::{Body, Response, Value};
use crate::core::module::Module;
use crate::core::request::{BoxFuture, Content, Outcome, Request, RequestBody};
use std::sync::Arc;

/// The picture: GIF89a, one transparent pixel, 43 bytes.
const GIF: &[u8] = &[
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x01, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x4c, 0x01, 0x00, 0x3b,
];

/// The content handler of an `empty_gif` location.
#[derive(Debug)]
struct EmptyGif;

impl Content for EmptyGif {
    fn content<'a>(
        &'a self,
        req: &'a mut Request<'_>,
        _body: &'a mut dyn RequestBody,
    ) -> BoxFuture<'a, Outcome> {
        let r = match req.method() {
            Method::Get | Method::Head => {
                let mut r = Response::new(200);
                r.content_type = Some(Value::Static("image/gif"));
                // nginx's fixed date for the picture, so caches keep it.
                r.headers.push((
                    "Last-Modified",
                    Value::Static("Mon, 28 Sep 1970 06:00:00 GMT"),
                ));
                r.body = Body::Bytes(GIF.into());
                r
            }
            _ => req.error(405),
        };
        Box::pin(std::future::ready(Outcome::Respond(r)))
    }
}

static DIRECTIVES: &[Def] = &[Def {
    name: "empty_gif",
    ignored: false,
    ctx: Ctx::LOCATION,
    arity: Arity::args(0, 0),
    set: |s, d, _| s.set_content(d, Arc::new(EmptyGif)),
    syntax: "empty_gif;",
    default: "—",
    doc: "Answers GET and HEAD in this location with a 1×1 transparent GIF (43 bytes, `image/gif`); other methods get 405.\n\n```nginx\nlocation = /pixel.gif { empty_gif; }\n```",
}];

/// `empty_gif`.
pub static MODULE: Module = Module {
    name: "empty_gif",
    nginx_default: &["http_empty_gif_module"],
    directives: &[DIRECTIVES],
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    #[test]
    fn the_picture_is_a_43_byte_gif89a() {
        assert_eq!(super::GIF.len(), 43);
        assert!(super::GIF.starts_with(b"GIF89a") && super::GIF.ends_with(b";"));
    }
}
