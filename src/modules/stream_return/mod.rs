//! `return` of a stream server (nginx's ngx_stream_return_module): the
//! session is answered with a text (variables allowed) and closed; a UDP
//! client gets it as one datagram.

use crate::conf::table::{Ctx, Def, ONE};
use crate::core::module::Module;
use crate::core::request::BoxFuture;
use crate::core::vars::Template;
use crate::stream::session::{Client, Session};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// `return value;`
#[derive(Debug)]
struct Return(Template);

impl crate::stream::Handler for Return {
    fn serve<'a>(&'a self, s: &'a mut Session<'_>) -> BoxFuture<'a, u16> {
        Box::pin(async move {
            let mut v = Vec::new();
            self.0.render(&s.req, &mut v);
            let sent = match &mut s.client {
                Client::Tcp(c) => c.write_all(&v).await.map(|()| v.len()),
                Client::Unix(c) => c.write_all(&v).await.map(|()| v.len()),
                Client::Tls(c) => {
                    async {
                        c.write_all(&v).await?;
                        c.flush().await?;
                        Ok(v.len())
                    }
                    .await
                }
                Client::Udp(d) => d.send(&v).await,
                Client::Gone | Client::Passed => Ok(0),
            };
            match sent {
                Ok(n) => {
                    s.info.sent.set(n as u64);
                    200
                }
                Err(e) => {
                    crate::error_log!(
                        Info,
                        "{} while sending to client{}",
                        crate::core::errlog::errno_text(&e),
                        s.req.log_context()
                    );
                    200
                }
            }
        })
    }
}

static DIRECTIVES: &[Def] = &[Def {
    name: "return",
    ignored: false,
    ctx: Ctx::STREAM_SERVER,
    arity: ONE,
    set: |s, d, e| {
        let t = Template::compile(d.arg(0), &mut e.vars)
            .map_err(|m| crate::conf::ast::ConfError::new(m, &d.span))?;
        crate::stream::set_content(s, d, Arc::new(Return(t)))
    },
    syntax: "return value;",
    default: "—",
    doc: "Answers the session with `value` (text and variables) and closes it; a UDP client gets it as one datagram.\n\n```nginx\nserver {\n    listen 12345;\n    return $remote_addr;\n}\n```",
}];

/// `return` of stream servers.
pub static MODULE: Module = Module {
    name: "stream_return",
    directives: &[DIRECTIVES],
    ..Module::EMPTY
};
