//! Directives of the status module: `stub_status` and `metrics`, each the
//! content handler of the location it stands in.

use super::{Metrics, StubStatus};
use crate::conf::table::{Arity, Ctx, Def};
use std::sync::Arc;

pub static DIRECTIVES: &[Def] = &[
    Def {
        name: "stub_status",
        ignored: false,
        ctx: Ctx::LOCATION,
        arity: Arity::args(0, 1),
        set: |s, d, _| {
            // `stub_status on;` is the old spelling; any argument is accepted, as nginx.
            s.set_content(d, Arc::new(StubStatus))
        },
        syntax: "stub_status;",
        default: "—",
        doc: "Answers GET and HEAD in this location with the basic status page, in the format of nginx's stub_status (so its parsers and monitoring plug-ins read it): active connections; connections accepted and handled and requests since start; connections reading a request head, writing a response, and waiting idle. Figures cover all workers and survive reloads; `$connections_active`, `$connections_reading`, `$connections_writing` and `$connections_waiting` give the same figures anywhere. See docs/operations.md.\n\n```nginx\nlocation = /status { stub_status; }\n```",
    },
    Def {
        name: "metrics",
        ignored: false,
        ctx: Ctx::LOCATION,
        arity: Arity::args(0, 0),
        set: |s, d, _| s.set_content(d, Arc::new(Metrics)),
        syntax: "metrics;",
        default: "—",
        doc: "vireo's own: answers GET and HEAD in this location with the server's figures in the Prometheus text format (requests by status class, bytes sent, connections, request durations, per-worker figures, open-file cache, reloads and upgrades, upstream peer health, attempts and response-head latency). The families are listed in docs/operations.md.\n\n```nginx\nlocation = /metrics { metrics; }\n```",
    },
];
