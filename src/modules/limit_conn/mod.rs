//! `limit_conn`: requests in progress per key, in zones shared by all
//! workers.
//!
//! A request that passes takes one count per limit of its location and
//! keeps it in a [`Slot`] stored with the request's state; the request is
//! dropped once its response is sent and logged, which gives the counts
//! back (a key whose count falls to 0 leaves the zone, as in nginx, so the
//! zone holds only keys with requests in progress). A request over one
//! limit gives back what the earlier limits gave it.

pub mod conf;

use crate::core::message::response::Response;
use crate::core::module::{Hooks, Module, Ordered, Phase, VarDef};
use crate::core::request::Request;
use crate::modules::zone::{self, Node, Status, Table, Zone};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

/// A key's requests in progress.
#[derive(Debug)]
pub struct ConnNode {
    count: u32,
}

impl Node for ConnNode {
    /// rbtree node to `color` (32) + `ngx_http_limit_conn_node_t` to its key (4).
    const BASE: usize = 36;
    const DIRECTIVE: &'static str = "limit_conn_zone";
    type Conf = ();
}

/// One count a request holds; given back when dropped.
pub struct Slot {
    zone: Arc<Zone<ConnNode>>,
    key: Box<[u8]>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        release(&mut self.zone.lock(), &self.key);
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot({})", self.zone.name)
    }
}

/// What limit_conn did for a request: `$limit_conn_status` and the counts
/// it holds.
#[derive(Debug, Default)]
pub struct Held {
    pub status: Option<Status>,
    slots: Vec<Slot>,
}

/// Why a request may not take a count.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// The key has `max` requests in progress.
    Limit,
    /// The zone has no room for another key.
    Full,
}

/// Take one count for `key` if it has fewer than `max`.
fn acquire(t: &mut Table<ConnNode>, key: &[u8], max: u32) -> Result<(), Refused> {
    match t.get(key) {
        Some(n) if n.count >= max => Err(Refused::Limit),
        Some(n) => {
            n.count += 1;
            Ok(())
        }
        None => match t.insert(key, ConnNode { count: 1 }, |_| false) {
            Some(_) => Ok(()),
            None => Err(Refused::Full),
        },
    }
}

fn release(t: &mut Table<ConnNode>, key: &[u8]) {
    if let Some(n) = t.get(key) {
        n.count -= 1;
        if n.count == 0 {
            t.remove(key);
        }
    }
}

/// What limit_conn did for this request, once it did something.
fn held(req: &Request<'_>) -> Option<Rc<RefCell<Held>>> {
    req.state.ext.get::<RefCell<Held>>()
}

/// Apply the location's `limit_conn`s: `Some` is the rejection.
pub fn apply(req: &mut Request<'_>) -> Option<Response> {
    let loc: &crate::conf::model::LocConf = req.conf;
    let conf = loc.get::<conf::LimitConnConf>();
    if conf.limits.is_empty() || held(req).is_some_and(|h| h.borrow().status.is_some()) {
        return None;
    }
    let mut key = Vec::new();
    for limit in conf.limits.iter() {
        let zone = limit.zone.get();
        key.clear();
        zone.key.render(&*req, &mut key);
        if key.is_empty() {
            continue;
        }
        if key.len() > 255 {
            crate::error_log!(
                Error,
                "the value of the \"{}\" key is more than 255 bytes: \"{}\"",
                zone.key.source(),
                String::from_utf8_lossy(&key)
            );
            continue;
        }
        let held = req.state.ext.get_or_insert_with(RefCell::<Held>::default);
        held.borrow_mut().status = Some(Status::Passed);
        let refused = acquire(&mut zone.lock(), &key, limit.max);
        match refused {
            Ok(()) => held.borrow_mut().slots.push(Slot {
                zone: zone.clone(),
                key: key.as_slice().into(),
            }),
            Err(why) => {
                match why {
                    Refused::Limit => zone::log(
                        conf.log_level,
                        req,
                        format_args!(
                            "limiting connections{} by zone \"{}\"",
                            if conf.dry_run { ", dry run," } else { "" },
                            zone.name
                        ),
                    ),
                    Refused::Full => crate::error_log!(
                        Crit,
                        "could not allocate node in limit_conn_zone \"{}\"",
                        zone.name
                    ),
                }
                let mut held = held.borrow_mut();
                held.slots.clear();
                held.status = Some(Status::rejected(conf.dry_run));
                return (!conf.dry_run).then(|| req.error(conf.status));
            }
        }
    }
    None
}

/// `limit_conn` and `$limit_conn_status`.
pub static MODULE: Module = Module {
    name: "limit_conn",
    nginx_default: &["http_limit_conn_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::LimitConnConf::KIND),
    variables: &[VarDef::name("limit_conn_status", |req, _, out| {
        if let Some(s) = held(req).and_then(|h| h.borrow().status) {
            out.extend_from_slice(s.as_str().as_bytes());
        }
    })],
    hooks: Hooks {
        access: Some(Ordered {
            order: 20,
            run: |req, _| match apply(req) {
                Some(r) => Phase::Respond(r),
                None => Phase::Next,
            },
            active: |c| !c.get::<conf::LimitConnConf>().limits.is_empty(),
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_and_go() {
        let mut t = Table::<ConnNode>::new(32 * 1024);
        assert_eq!(acquire(&mut t, b"a", 2), Ok(()));
        assert_eq!(acquire(&mut t, b"a", 2), Ok(()));
        assert_eq!(acquire(&mut t, b"a", 2), Err(Refused::Limit));
        assert_eq!(acquire(&mut t, b"b", 2), Ok(()));
        release(&mut t, b"a");
        assert_eq!(acquire(&mut t, b"a", 2), Ok(()));
        for k in [b"a", b"a", b"b"] {
            release(&mut t, k);
        }
        assert!(t.is_empty(), "keys without requests leave the zone");
        // 32k of 64-byte counts: 512 keys, then no room (nothing is evicted).
        for i in 0..512u32 {
            assert_eq!(acquire(&mut t, i.to_string().as_bytes(), 1), Ok(()));
        }
        assert_eq!(acquire(&mut t, b"new", 1), Err(Refused::Full));
        release(&mut t, b"7");
        assert_eq!(acquire(&mut t, b"new", 1), Ok(()));
    }
}
