//! The `map` block.

use super::Map;
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def};
use crate::core::vars::{Re, Template, UserKind, Vars};
use std::sync::Arc;

fn parse(d: &Directive, vars: &mut Vars) -> Result<Map, ConfError> {
    let err = |m: String, at: &Directive| ConfError::new(m, &at.span);
    let target = d
        .arg(1)
        .strip_prefix('$')
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .ok_or_else(|| err(format!("invalid variable name \"{}\"", d.arg(1)), d))?;
    let mut map = Map {
        source: Template::compile(d.arg(0), vars).map_err(|e| err(e, d))?,
        ..Map::default()
    };
    let entries = d.block.as_deref().unwrap_or(&[]);
    // `hostnames` changes how keys read, wherever it stands.
    map.hostnames = entries
        .iter()
        .any(|e| e.name == "hostnames" && e.args.is_empty() && e.block.is_none());
    let mut seen = std::collections::HashSet::new();
    for e in entries {
        vars.at(&e.span);
        if e.block.is_some() {
            return Err(err(format!("unexpected \"{{\" after \"{}\"", e.name), e));
        }
        match (e.name.as_str(), e.args.len()) {
            ("hostnames", 0) => continue,
            ("volatile", 0) => {
                map.volatile = true;
                continue;
            }
            (_, 1) => {}
            _ => return Err(err("invalid number of the map parameters".into(), e)),
        }
        let value = Template::compile(e.arg(0), vars).map_err(|m| err(m, e))?;
        let key = e.name.as_str();
        if key == "default" {
            if map.default.is_some() {
                return Err(err("duplicate default map parameter".into(), e));
            }
            map.default = Some(value);
            continue;
        }
        if let Some(re) = key.strip_prefix('~') {
            let (re, caseless) = match re.strip_prefix('*') {
                Some(r) => (r, true),
                None => (re, false),
            };
            map.regex
                .push((Re::new(re, caseless, vars).map_err(|m| err(m, e))?, value));
            continue;
        }
        let key = key.strip_prefix('\\').unwrap_or(key).to_ascii_lowercase();
        if !seen.insert(key.clone()) {
            return Err(err(format!("conflicting parameter \"{key}\""), e));
        }
        if map.hostnames {
            if let Some(rest) = key.strip_prefix("*.") {
                map.lead_wild
                    .push((format!(".{rest}").into_bytes().into(), value));
                continue;
            }
            if let Some(rest) = key.strip_prefix('.') {
                map.exact.insert(rest.as_bytes().into(), value.clone());
                map.lead_wild.push((key.clone().into_bytes().into(), value));
                continue;
            }
            if let Some(rest) = key.strip_suffix(".*") {
                map.trail_wild
                    .push((format!("{rest}.").into_bytes().into(), value));
                continue;
            }
            if key.contains('*') {
                return Err(err(format!("invalid hostname or wildcard \"{key}\""), e));
            }
        }
        map.exact.insert(key.into_bytes().into(), value);
    }
    map.lead_wild.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
    map.trail_wild.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
    vars.at(&d.span);
    let _ = target;
    Ok(map)
}

pub static DIRECTIVES: &[Def] = &[Def {
    name: "map",
    ignored: false,
    ctx: Ctx::HTTP.or(Ctx::STREAM),
    arity: Arity::block(2, 2),
    set: |_, d, e| {
        let map = parse(d, &mut e.vars)?;
        let name = &d.arg(1)[1..];
        e.vars
            .declare(name, UserKind::Computed(Arc::new(map)))
            .map_err(|e| ConfError::new(e, &d.span))?;
        Ok(())
    },
    syntax: "map string $variable { … }",
    default: "—",
    doc: "Declares `$variable`, whose value is chosen by matching `string` (text with variables) against the keys: exact strings (caseless), with `hostnames` also `*.example.com`, `.example.com` and `www.example.*` (the longest leading wildcard, then the longest trailing one), then `~regex` / `~*regex` in order (their captures can be used in the value), else `default` (empty when none). Values may hold variables. The value is computed on first use and kept for the request, unless `volatile` is given. `include` works inside; a key starting with `\\` escapes a parameter name (`\\default`).\n\n```nginx\nmap $http_upgrade $connection_upgrade {\n    default upgrade;\n    ''      close;\n}\nmap $host $site {\n    hostnames;\n    default      main;\n    *.example.com example;\n    ~^(?<sub>\\w+)\\.test$ $sub;\n}\n```",
}];
