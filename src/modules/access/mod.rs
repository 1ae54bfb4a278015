//! `allow` / `deny` (nginx's ngx_http_access_module) and `satisfy`, which
//! combines them with basic authentication ([`super::auth_basic`]) and
//! subrequest authorization ([`super::auth_request`]), checked in that
//! order as nginx's access phase does.
//!
//! Rules are checked in order and the first that matches the client address
//! ([`Request::client_addr`], so realip's address when it set one) decides;
//! none matching allows. As in nginx, a rule only applies to clients of its
//! family (`all` to every family): an IPv4 rule never matches an IPv6
//! client, `unix:` only matches unix-socket clients. An IPv4-mapped IPv6
//! client (`::ffff:10.0.0.1`) is checked as IPv4 when there are IPv4 rules
//! or `all`. A denial is a 403 (through `error_page`) with nginx's line
//! "access forbidden by rule" in the error log (under `satisfy all` only,
//! as nginx).
//!
//! `satisfy all` (the default) needs every module that has something to
//! check to grant; `satisfy any` needs one. Under `any`, when no module
//! grants, a module's 401 wins over another's 403, so the client gets the
//! `WWW-Authenticate` challenge (nginx behaves the same).

pub mod cidr;
pub mod conf;

use crate::core::message::response::Response;
use crate::core::module::{Hooks, Module, Ordered, Phase};
use crate::core::request::{Peer, Request};
use crate::modules::auth_basic::{self, Auth};
use crate::modules::auth_request;
pub use cidr::{Cidr, Client};
use conf::AccessConf;
use conf::{Rule, Satisfy, Who};

/// What the rules say about a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No rule matched (or there are none): this module has no opinion.
    Declined,
    Allow,
    Deny,
}

/// The first rule that matches `client`.
pub fn check(rules: &[Rule], client: Peer) -> Verdict {
    if rules.is_empty() {
        return Verdict::Declined;
    }
    let v4_rules = rules
        .iter()
        .any(|r| matches!(r.who, Who::All | Who::Net(Cidr::V4 { .. })));
    let client = Client::of(client, v4_rules);
    for r in rules {
        let hit = match &r.who {
            Who::All => true,
            Who::Net(c) => c.matches(&client),
        };
        if hit {
            return if r.deny {
                Verdict::Deny
            } else {
                Verdict::Allow
            };
        }
    }
    Verdict::Declined
}

/// The access phase: allow/deny, then basic authentication, combined as
/// `satisfy` says. `Some` answers the request.
pub async fn phase(req: &mut Request<'_>) -> Option<Response> {
    let r = decide(req).await;
    // auth_delay: a 401 waits before it goes out, as nginx's access phase.
    let delay = req.conf.core.auth_delay;
    if r.as_ref().is_some_and(|r| r.status == 401) && !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    r
}

async fn decide(req: &mut Request<'_>) -> Option<Response> {
    let conf = req.conf.get::<AccessConf>();
    let verdict = check(&conf.rules, req.client_addr());
    match conf.satisfy {
        Satisfy::All => {
            if verdict == Verdict::Deny {
                crate::error_log!(Error, "access forbidden by rule{}", req.log_context());
                return Some(req.error(403));
            }
            if let Auth::Refused(r) | Auth::Failed(r) = auth_basic::check(req).await {
                return Some(r);
            }
            match auth_request::check(req).await {
                Auth::Declined | Auth::Granted => None,
                Auth::Refused(r) | Auth::Failed(r) => Some(r),
            }
        }
        Satisfy::Any => {
            // nginx's access code: the refusal that stands when no check
            // grants; a 401 is never replaced by a 403.
            let mut refused: Option<Response> = match verdict {
                Verdict::Allow => return None,
                Verdict::Deny => Some(req.error(403)),
                Verdict::Declined => None,
            };
            for step in 0..2 {
                let auth = match step {
                    0 => auth_basic::check(req).await,
                    _ => auth_request::check(req).await,
                };
                match auth {
                    Auth::Granted => return None,
                    Auth::Declined => {}
                    Auth::Refused(r) => {
                        if refused.as_ref().is_none_or(|p| p.status != 401) {
                            refused = Some(r);
                        }
                    }
                    Auth::Failed(r) => return Some(r),
                }
            }
            // The answer kept must be the one error pages see as generated.
            match refused {
                Some(r) if r.status != req.generated_status() => {
                    let mut fresh = req.error(r.status);
                    fresh.headers = r.headers;
                    Some(fresh)
                }
                r => r,
            }
        }
    }
}

/// allow/deny, then basic authentication, then auth_request, combined by
/// `satisfy`.
pub static MODULE: Module = Module {
    name: "access",
    nginx_default: &["http_access_module"],
    directives: &[conf::DIRECTIVES],
    settings: Some(&conf::AccessConf::KIND),
    hooks: Hooks {
        access: Some(Ordered {
            order: 30,
            run: |req, _| Phase::Wait(Box::pin(phase(req))),
            active: |c| {
                !c.get::<conf::AccessConf>().rules.is_empty()
                    || c.get::<crate::modules::auth_basic::conf::AuthBasicConf>()
                        .realm
                        .is_some()
                    || auth_request::active(c)
            },
        }),
        ..Hooks::NONE
    },
    ..Module::EMPTY
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn rules(list: &[(&str, bool)]) -> Arc<[Rule]> {
        list.iter()
            .map(|&(w, deny)| Rule {
                who: match w {
                    "all" => Who::All,
                    _ => Who::Net(Cidr::parse(w).unwrap().0),
                },
                deny,
            })
            .collect()
    }

    fn tcp(a: &str) -> Peer {
        Peer::Tcp(std::net::SocketAddr::new(a.parse().unwrap(), 1234))
    }

    #[test]
    fn first_match_wins() {
        let r = rules(&[("10.1.2.3", true), ("10.0.0.0/8", false), ("all", true)]);
        assert_eq!(check(&r, tcp("10.1.2.3")), Verdict::Deny);
        assert_eq!(check(&r, tcp("10.9.9.9")), Verdict::Allow);
        assert_eq!(check(&r, tcp("11.0.0.1")), Verdict::Deny);
        assert_eq!(check(&r, tcp("::1")), Verdict::Deny);
        assert_eq!(check(&r, Peer::Unix), Verdict::Deny);
        assert_eq!(check(&[], tcp("10.0.0.1")), Verdict::Declined);
    }

    #[test]
    fn families_apart() {
        let r = rules(&[("2001:db8::/32", false), ("::1", true)]);
        assert_eq!(check(&r, tcp("2001:db8::5")), Verdict::Allow);
        assert_eq!(check(&r, tcp("::1")), Verdict::Deny);
        // No IPv4 rule: an IPv4 client is not concerned.
        assert_eq!(check(&r, tcp("127.0.0.1")), Verdict::Declined);
        assert_eq!(check(&r, Peer::Unix), Verdict::Declined);
        let u = rules(&[("unix:", true)]);
        assert_eq!(check(&u, Peer::Unix), Verdict::Deny);
        assert_eq!(check(&u, tcp("127.0.0.1")), Verdict::Declined);
    }

    #[test]
    fn mapped_ipv4() {
        let r = rules(&[("127.0.0.0/8", true)]);
        assert_eq!(check(&r, tcp("::ffff:127.0.0.1")), Verdict::Deny);
        let v6 = rules(&[("::ffff:0:0/96", true)]);
        assert_eq!(check(&v6, tcp("::ffff:127.0.0.1")), Verdict::Deny);
    }
}
