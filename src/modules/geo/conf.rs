//! The `geo` block, read as nginx's ngx_http_geo_module reads it.

use super::{Geo, Nets, Ranges, Table, Value};
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, Env};
use crate::core::vars::{Template, UserKind};
use crate::modules::access::cidr::Cidr;
use std::sync::Arc;

fn var_name(s: &str) -> Option<&str> {
    s.strip_prefix('$').filter(|n| !n.is_empty())
}

/// A network as `geo` reads it (nginx's ngx_http_geo_cidr_value).
fn net(s: &str, at: &Directive, env: &mut Env) -> Result<Cidr, ConfError> {
    let (c, low) = match Cidr::parse(s) {
        Ok((Cidr::Unix, _)) | Err(_) => {
            return Err(ConfError::new(format!("invalid network \"{s}\""), &at.span));
        }
        Ok(c) => c,
    };
    if low {
        env.notices.push(format!(
            "low address bits of {s} are meaningless in {}",
            at.span
        ));
    }
    Ok(c)
}

/// An IPv4 address of a range; 255.255.255.255 is refused, as nginx's
/// `ngx_inet_addr` takes it for its error value.
fn v4(s: &str) -> Option<u32> {
    let a: std::net::Ipv4Addr = s.parse().ok()?;
    Some(u32::from(a)).filter(|&a| a != super::INADDR_NONE)
}

fn value(s: &str) -> Value {
    s.as_bytes().into()
}

fn add_net(nets: &mut Nets, c: Cidr, shown: &str, v: &str, e: &Directive, env: &mut Env) {
    if let Some(old) = nets.insert(c, value(v)) {
        env.notices.push(format!(
            "duplicate network \"{shown}\", value: \"{v}\", old value: \"{}\" in {}",
            String::from_utf8_lossy(&old),
            e.span
        ));
    }
}

fn parse(d: &Directive, env: &mut Env) -> Result<Geo, ConfError> {
    let err = |m: String, at: &Directive| ConfError::new(m, &at.span);
    let bad_name = |s: &str| err(format!("invalid variable name \"{s}\""), d);
    let source = match d.args.len() {
        2 => {
            let src = d.arg(0);
            var_name(src).ok_or_else(|| bad_name(src))?;
            env.vars.at(&d.span);
            Some(Template::compile(src, &mut env.vars).map_err(|m| err(m, d))?)
        }
        _ => None,
    };
    let mut geo = Geo {
        source,
        proxies: Vec::new(),
        proxy_recursive: false,
        table: Table::Nets(Nets::default()),
    };
    let mut ranges: Option<(Ranges, Option<Value>)> = None;
    let mut entries = false;
    for e in d.block.as_deref().unwrap_or(&[]) {
        if e.block.is_some() {
            return Err(err(format!("unexpected \"{{\" after \"{}\"", e.name), e));
        }
        let key = e.name.as_str();
        if e.args.is_empty() {
            match key {
                "ranges" => {
                    if entries {
                        return Err(err(
                            "the \"ranges\" directive must be the first directive inside \"geo\" block".into(),
                            e,
                        ));
                    }
                    ranges.get_or_insert_with(|| (Ranges::default(), None));
                    continue;
                }
                "proxy_recursive" => {
                    geo.proxy_recursive = true;
                    continue;
                }
                _ => {}
            }
        }
        if e.args.len() != 1 {
            return Err(err("invalid number of the geo parameters".into(), e));
        }
        let arg = e.arg(0);
        if key == "proxy" {
            let c = net(arg, e, env)?;
            geo.proxies.push(c);
            continue;
        }
        match (&mut ranges, &mut geo.table) {
            (Some((r, default)), _) => {
                if key == "default" {
                    if let Some(old) = default {
                        env.notices.push(format!(
                            "duplicate default geo range value: \"{arg}\", old value: \"{}\" in {}",
                            String::from_utf8_lossy(old),
                            e.span
                        ));
                    }
                    *default = Some(value(arg));
                    continue;
                }
                let (del, shown) = match key {
                    "delete" => (true, arg),
                    _ => (false, key),
                };
                let range = shown
                    .split_once('-')
                    .and_then(|(a, b)| Some((v4(a)?, v4(b)?)))
                    .filter(|(a, b)| a <= b);
                let Some((start, end)) = range else {
                    return Err(err(format!("invalid range \"{shown}\""), e));
                };
                if del {
                    if !r.delete(start, end) {
                        env.notices.push(format!(
                            "no address range \"{shown}\" to delete in {}",
                            e.span
                        ));
                    }
                    continue;
                }
                let mut warn = Vec::new();
                r.add(start, end, &value(arg), shown, &mut warn)
                    .map_err(|m| err(m, e))?;
                env.notices
                    .extend(warn.into_iter().map(|w| format!("{w} in {}", e.span)));
            }
            (None, Table::Nets(nets)) => {
                entries = true;
                if key == "default" {
                    add_net(nets, Cidr::V4 { addr: 0, mask: 0 }, key, arg, e, env);
                    add_net(nets, Cidr::V6 { addr: 0, mask: 0 }, key, arg, e, env);
                    continue;
                }
                let (del, shown) = match key {
                    "delete" => (true, arg),
                    _ => (false, key),
                };
                let c = net(shown, e, env)?;
                if del {
                    if !nets.remove(c) {
                        env.notices
                            .push(format!("no network \"{shown}\" to delete in {}", e.span));
                    }
                    continue;
                }
                add_net(nets, c, shown, arg, e, env);
            }
            (None, Table::Ranges { .. }) => unreachable!("ranges are kept aside until the end"),
        }
    }
    if let Some((r, default)) = ranges {
        geo.table = Table::Ranges {
            ranges: r,
            default: default.unwrap_or_else(|| value("")),
        };
    }
    Ok(geo)
}

pub static DIRECTIVES: &[Def] = &[Def {
    name: "geo",
    ignored: false,
    ctx: Ctx::HTTP.or(Ctx::STREAM),
    arity: Arity::block(1, 2),
    set: |_, d, e| {
        let target = d.args.last().map_or("", |a| a.value.as_str());
        let name = var_name(target)
            .ok_or_else(|| ConfError::new(format!("invalid variable name \"{target}\""), &d.span))?
            .to_string();
        let geo = parse(d, e)?;
        e.vars.at(&d.span);
        e.vars
            .declare(&name, UserKind::Computed(Arc::new(geo)))
            .map_err(|m| ConfError::new(m, &d.span))?;
        Ok(())
    },
    syntax: "geo [$address] $variable { … }",
    default: "—",
    doc: "Declares `$variable`, whose value depends on the client address (the one realip set, when it did), or on the address `$address` holds. Entries: `NETWORK value;` (an address or a CIDR network, IPv4 or IPv6; the longest network holding the address wins), `default value;` (the same as `0.0.0.0/0` and `::/0`; the value is empty without it), `delete NETWORK;` (removes a network given earlier), `include file;`, `proxy NETWORK;` (a request coming from one of these takes its address from X-Forwarded-For: the last one, or with `proxy_recursive;` the last one not itself a listed proxy). With `ranges;` (the first entry), entries are IPv4 ranges `FIRST-LAST value;`: a range inside an earlier one splits it, any other overlap is an error; `delete FIRST-LAST;` removes a range as added. A client on a unix socket, or an `$address` that holds no address, is looked up as 255.255.255.255. Values are plain text. A network given twice keeps the later value, with nginx's `duplicate network` notice.\n\n```nginx\ngeo $country {\n    default        ZZ;\n    proxy          10.0.0.0/8;\n    127.0.0.0/8    local;\n    192.0.2.0/24   test;\n    2001:db8::/32  test6;\n}\ngeo $arg_ip $range {\n    ranges;\n    default                 none;\n    192.0.2.0-192.0.2.127   low;\n    192.0.2.128-192.0.2.255 high;\n}\n```",
}];
