//! The `split_clients` block, read as nginx reads it.

use super::{Part, Split};
use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def};
use crate::core::vars::{Template, UserKind, Vars};
use std::sync::Arc;

/// nginx's `ngx_atofp(s, 2)`: a decimal in hundredths, digits after the
/// second decimal ignored.
pub fn hundredths(s: &str) -> Option<u32> {
    if s.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    let mut point = 2u32;
    let mut dot = false;
    for b in s.bytes() {
        if b == b'.' {
            if dot {
                return None;
            }
            dot = true;
            continue;
        }
        if !b.is_ascii_digit() {
            return None;
        }
        if point == 0 {
            continue;
        }
        value = value * 10 + u64::from(b - b'0');
        if value > u64::from(u32::MAX) {
            return None;
        }
        if dot {
            point -= 1;
        }
    }
    value = value.checked_mul(10u64.pow(point))?;
    u32::try_from(value).ok()
}

fn parse(d: &Directive, vars: &mut Vars) -> Result<Split, ConfError> {
    let err = |m: String, at: &Directive| ConfError::new(m, &at.span);
    let entries = d.block.as_deref().unwrap_or(&[]);
    let mut percents = Vec::new();
    let mut values = Vec::new();
    for e in entries {
        if e.block.is_some() {
            return Err(err(format!("unexpected \"{{\" after \"{}\"", e.name), e));
        }
        if e.args.len() != 1 {
            return Err(err(
                "invalid number of the split_clients parameters".into(),
                e,
            ));
        }
        let p = e.name.as_str();
        let percent = if p == "*" {
            None
        } else {
            let n = p
                .strip_suffix('%')
                .and_then(hundredths)
                .filter(|&n| n != 0)
                .ok_or_else(|| err(format!("invalid percent value \"{p}\""), e))?;
            Some(n)
        };
        percents.push(percent);
        values.push(e.arg(0).as_bytes().into());
    }
    // nginx reports this at the block's end; the entry that goes over is
    // more telling.
    let bounds = Split::bounds(&percents)
        .map_err(|i| err("percent total is greater than 100%".into(), &entries[i]))?;
    vars.at(&d.span);
    Ok(Split {
        source: Template::compile(d.arg(0), vars).map_err(|m| err(m, d))?,
        parts: bounds
            .into_iter()
            .zip(values)
            .map(|(bound, value)| Part { bound, value })
            .collect(),
    })
}

pub static DIRECTIVES: &[Def] = &[Def {
    name: "split_clients",
    ignored: false,
    ctx: Ctx::HTTP.or(Ctx::STREAM),
    arity: Arity::block(2, 2),
    set: |_, d, e| {
        let target = d.arg(1);
        let name = target
            .strip_prefix('$')
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ConfError::new(format!("invalid variable name \"{target}\""), &d.span)
            })?;
        let split = parse(d, &mut e.vars)?;
        e.vars
            .declare(name, UserKind::Computed(Arc::new(split)))
            .map_err(|m| ConfError::new(m, &d.span))?;
        Ok(())
    },
    syntax: "split_clients string $variable { … }",
    default: "—",
    doc: "Declares `$variable` for A/B testing: `string` (text with variables) is hashed with MurmurHash2 (32 bits, seed 0, as nginx), and the value is that of the first part whose cumulative share the hash falls within. Parts are `PERCENT% value;` (up to two decimals) and `* value;` (the rest); they add up to at most 100%, and a hash beyond parts that add up to less gives an empty value. The same string picks the same value as it does in nginx. Values are plain text.\n\n```nginx\nsplit_clients \"${remote_addr}AAA\" $variant {\n    0.5%  .one;\n    2.0%  .two;\n    *     \"\";\n}\n```",
}];

#[cfg(test)]
mod tests {
    use super::hundredths;

    #[test]
    fn percents_as_ngx_atofp() {
        assert_eq!(hundredths("51.2"), Some(5120));
        assert_eq!(hundredths("0.5"), Some(50));
        assert_eq!(hundredths("100"), Some(10000));
        assert_eq!(hundredths("0.125"), Some(12));
        assert_eq!(hundredths("0.001"), Some(0));
        assert_eq!(hundredths("1.2.3"), None);
        assert_eq!(hundredths("x"), None);
        assert_eq!(hundredths(""), None);
    }
}
