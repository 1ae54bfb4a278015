//! Parsers for directive argument values: flags, sizes, times, numbers.
//!
//! Each takes the directive (for its name and span in errors) and one argument.

use super::ast::{ConfError, Directive};
use crate::core::vars::{Re, Template, Vars};
use std::time::Duration;

fn invalid(d: &Directive, what: &str, v: &str) -> ConfError {
    ConfError::new(
        format!("invalid {what} \"{v}\" in \"{}\" directive", d.name),
        &d.span,
    )
}

/// Argument `i` compiled as a template (its variables known to `vars`);
/// an error names the directive's file:line.
pub fn template(d: &Directive, i: usize, vars: &mut Vars) -> Result<Template, ConfError> {
    Template::compile(d.arg(i), vars).map_err(|m| ConfError::new(m, &d.span))
}

/// `pattern` compiled as a configuration regex (`caseless` for `~*`; its
/// named groups declared in `vars`); an error names the directive's
/// file:line.
pub fn regex(
    d: &Directive,
    pattern: &str,
    caseless: bool,
    vars: &mut Vars,
) -> Result<Re, ConfError> {
    Re::new(pattern, caseless, vars).map_err(|m| ConfError::new(m, &d.span))
}

/// `on` | `off`.
pub fn flag(d: &Directive, i: usize) -> Result<bool, ConfError> {
    match d.arg(i) {
        "on" => Ok(true),
        "off" => Ok(false),
        v => Err(ConfError::new(
            format!(
                "invalid value \"{v}\" in \"{}\" directive, it must be \"on\" or \"off\"",
                d.name
            ),
            &d.span,
        )),
    }
}

/// A size as nginx writes it: `1024`, `8k`, `1m`, `1g` (case-insensitive units).
pub fn size(d: &Directive, i: usize) -> Result<u64, ConfError> {
    parse_size(d.arg(i)).ok_or_else(|| invalid(d, "size", d.arg(i)))
}

pub fn parse_size(v: &str) -> Option<u64> {
    let (num, mult) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        b'g' | b'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// A time as nginx writes it: `30`, `30s`, `500ms`, `5m`, `1h`, `1d`, `1h30m` (a bare number is seconds).
pub fn time(d: &Directive, i: usize) -> Result<Duration, ConfError> {
    parse_time(d.arg(i)).ok_or_else(|| invalid(d, "time", d.arg(i)))
}

pub fn parse_time(v: &str) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    let mut total_ms: u64 = 0;
    let mut rest = v;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit_ms: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "" | "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "M" => 30 * 86_400_000,
            "y" => 365 * 86_400_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total_ms = total_ms.checked_add(n.checked_mul(unit_ms)?)?;
    }
    Some(Duration::from_millis(total_ms))
}

/// A non-negative integer.
pub fn number(d: &Directive, i: usize) -> Result<u64, ConfError> {
    let v = d.arg(i);
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(d, "number", v));
    }
    v.parse().map_err(|_| invalid(d, "number", v))
}

/// A `name=value` option argument: returns the value when the argument starts with `name=`.
pub fn option<'a>(arg: &'a str, name: &str) -> Option<&'a str> {
    arg.strip_prefix(name)?.strip_prefix('=')
}

/// Error for an argument no rule accepted.
/// The directive's first argument `v`, when it is within `min..=max`.
pub fn bounded(d: &Directive, v: u64, min: u64, max: u64) -> Result<u64, ConfError> {
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(ConfError::new(
            format!(
                "\"{}\" must be between {min} and {max} in \"{}\" directive",
                d.arg(0),
                d.name
            ),
            &d.span,
        ))
    }
}

pub fn bad_arg(d: &Directive, v: &str) -> ConfError {
    ConfError::new(
        format!("invalid parameter \"{v}\" in \"{}\" directive", d.name),
        &d.span,
    )
}

/// Store a value once: nginx refuses a directive repeated at the same level.
pub fn set_once<T>(slot: &mut Option<T>, v: T, d: &Directive) -> Result<(), ConfError> {
    if slot.is_some() {
        return Err(ConfError::new(
            format!("\"{}\" directive is duplicate", d.name),
            &d.span,
        ));
    }
    *slot = Some(v);
    Ok(())
}

/// Append `v` to a list setting written at this level (`add_header`,
/// `allow`, `ssl_certificate`, …): several lines at one level add up, and a
/// level with any of them inherits none (see the `settings!` macro).
pub fn push<T: Clone>(slot: &mut Option<std::sync::Arc<[T]>>, v: T) {
    let mut list = slot.take().map(|l| l.to_vec()).unwrap_or_default();
    list.push(v);
    *slot = Some(std::sync::Arc::from(list));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1024"), Some(1024));
        assert_eq!(parse_size("8k"), Some(8192));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        for bad in ["", "k", "1.5m", "-1", "1x", "99999999999999999999"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_time("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_time("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_time("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_time("1d"), Some(Duration::from_secs(86400)));
        for bad in ["", "s", "1x", "1.5s", "-1", "1ss"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn option_values() {
        assert_eq!(option("backlog=511", "backlog"), Some("511"));
        assert_eq!(option("backlogx=1", "backlog"), None);
    }
}
