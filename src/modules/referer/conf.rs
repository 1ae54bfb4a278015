//! Directives of the referer module: `valid_referers`, and the two hash
//! sizes nginx's table needs.

use crate::conf::ast::{ConfError, Directive};
use crate::conf::table::{Arity, Ctx, Def, MANY, ONE};
use crate::conf::values::regex;
use crate::core::vars::{Re, Vars};
use crate::settings;
use std::sync::Arc;

/// A host pattern of `valid_referers` (or a server name), lowercased.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    Exact(String),
    /// `*.example.com` as ".example.com"; `.example.com` is also `Exact`.
    Head(String),
    /// `www.example.*` as "www.example.".
    Tail(String),
}

impl Host {
    /// A host pattern, or `None` when a `*` is anywhere but a leading
    /// `*.` or a trailing `.*`.
    pub fn parse(name: &str) -> Option<Vec<Host>> {
        let name = name.to_ascii_lowercase();
        let stars = name.matches('*').count();
        if let Some(rest) = name.strip_prefix("*.") {
            return (stars == 1 && !rest.is_empty()).then(|| vec![Host::Head(format!(".{rest}"))]);
        }
        if let Some(rest) = name.strip_suffix(".*") {
            return (stars == 1 && !rest.is_empty()).then(|| vec![Host::Tail(format!("{rest}."))]);
        }
        if stars > 0 || name.is_empty() {
            return None;
        }
        if let Some(rest) = name.strip_prefix('.') {
            if rest.is_empty() {
                return None;
            }
            return Some(vec![
                Host::Exact(rest.to_string()),
                Host::Head(name.clone()),
            ]);
        }
        Some(vec![Host::Exact(name)])
    }
}

/// What one level's `valid_referers` accept.
#[derive(Clone, Debug, Default)]
pub struct Referers {
    /// `none`: a request without Referer is valid.
    pub none: bool,
    /// `blocked`: a Referer without `http://` or `https://` is valid.
    pub blocked: bool,
    /// `server_names`: the server's names are valid hosts.
    pub server_names: bool,
    /// Host patterns, each with the URI prefix it requires (none: any).
    pub hosts: Vec<(Host, Option<Arc<str>>)>,
    /// `~regex`es, matched caselessly against the Referer after its scheme.
    pub regex: Vec<Re>,
}

settings! {
    /// Referer settings of one level: a level with `valid_referers` replaces
    /// what it would inherit.
    pub struct RefererConf / RefererConfSet {
        pub referers: Option<Arc<Referers>> = None,
    }
}

/// One `valid_referers` added to what the level has.
fn add(r: &mut Referers, d: &Directive, vars: &mut Vars) -> Result<(), ConfError> {
    for a in d.arg_strs() {
        match a {
            "" => {
                return Err(ConfError::new(format!("invalid referer \"{a}\""), &d.span));
            }
            "none" => r.none = true,
            "blocked" => r.blocked = true,
            "server_names" => r.server_names = true,
            _ if a.starts_with('~') => r.regex.push(regex(d, &a[1..], true, vars)?),
            _ => {
                let (host, uri) = match a.find('/') {
                    Some(i) => (&a[..i], Some(Arc::from(&a[i..]))),
                    None => (a, None),
                };
                let hosts = Host::parse(host).ok_or_else(|| {
                    ConfError::new(format!("invalid hostname or wildcard \"{a}\""), &d.span)
                })?;
                for h in hosts {
                    if r.hosts.iter().any(|(o, _)| *o == h) {
                        return Err(ConfError::new(
                            format!("conflicting parameter \"{host}\""),
                            &d.span,
                        ));
                    }
                    r.hosts.push((h, uri.clone()));
                }
            }
        }
    }
    if (r.none || r.blocked) && r.hosts.is_empty() && !r.server_names {
        return Err(ConfError::new(
            "the \"none\" or \"blocked\" referers are specified in the \"valid_referers\" directive without any valid referer",
            &d.span,
        ));
    }
    Ok(())
}

#[cfg(test)]
pub fn tests_add(r: &mut Referers, d: &Directive) -> Result<(), ConfError> {
    add(r, d, &mut Vars::new(&[]))
}

pub static DIRECTIVES: &[Def] = &[Def {
    name: "valid_referers",
    ignored: false,
    ctx: Ctx::SERVER.or(Ctx::LOCATION),
    arity: Arity::args(1, MANY),
    set: |s, d, e| {
        let slot = &mut s.loc().get_mut::<RefererConfSet>().referers;
        let mut r = slot
            .as_ref()
            .and_then(|r| r.as_deref().cloned())
            .unwrap_or_default();
        add(&mut r, d, &mut e.vars)?;
        *slot = Some(Some(Arc::new(r)));
        Ok(())
    },
    syntax: "valid_referers none | blocked | server_names | string … | ~regex …;",
    default: "—",
    doc: "The Referer values that leave `$invalid_referer` empty; any other makes it `1`, as nginx's referer module. `none`: no Referer header; `blocked`: a Referer without `http://` or `https://` (a proxy or firewall removed it); `server_names`: the server's names (exact, wildcard and `~regex` names); a host (`www.example.org`, compared caselessly), a wildcard (`*.example.org`, `www.example.*`, `.example.org`), optionally followed by a URI prefix the Referer's must start with (`www.example.org/galleries/`, case-sensitive); `~regex`: a caseless regex matched against the Referer after `http://` or `https://`. An exact host is looked up first, then the longest leading wildcard, then the longest trailing one; a host of more than 256 characters is never valid. `none` or `blocked` alone is an error. A level with `valid_referers` replaces what it would inherit.\n\n```nginx\nlocation /images/ {\n    valid_referers none blocked server_names *.example.com ~\\.google\\.;\n    if ($invalid_referer) {\n        return 403;\n    }\n}\n```",
}];

/// Hash sizes nginx's table needs; vireo has no such table.
pub static IGNORED: &[Def] = &[
    crate::conf::core_directives::ignored(
        "referer_hash_max_size",
        Ctx::SERVER.or(Ctx::LOCATION),
        ONE,
        "referer_hash_max_size size;",
        "vireo sizes its tables itself\n\n```nginx\nreferer_hash_max_size 4096;\n```",
    ),
    crate::conf::core_directives::ignored(
        "referer_hash_bucket_size",
        Ctx::SERVER.or(Ctx::LOCATION),
        ONE,
        "referer_hash_bucket_size size;",
        "vireo sizes its tables itself\n\n```nginx\nreferer_hash_bucket_size 128;\n```",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns() {
        assert_eq!(
            Host::parse("WWW.Example.org"),
            Some(vec![Host::Exact("www.example.org".into())])
        );
        assert_eq!(
            Host::parse("*.example.org"),
            Some(vec![Host::Head(".example.org".into())])
        );
        assert_eq!(
            Host::parse("www.example.*"),
            Some(vec![Host::Tail("www.example.".into())])
        );
        assert_eq!(
            Host::parse(".example.org"),
            Some(vec![
                Host::Exact("example.org".into()),
                Host::Head(".example.org".into())
            ])
        );
        assert_eq!(Host::parse("www.*.org"), None);
        assert_eq!(Host::parse("*.example.*"), None);
        assert_eq!(Host::parse("*"), None);
    }

    #[test]
    fn none_alone_is_refused() {
        let mut r = Referers::default();
        assert!(
            tests_add(
                &mut r,
                &Directive::test("valid_referers", &["none", "blocked"], 3)
            )
            .is_err()
        );
        let mut r = Referers::default();
        assert!(
            tests_add(
                &mut r,
                &Directive::test("valid_referers", &["none", "~x"], 3)
            )
            .is_err()
        );
        let mut r = Referers::default();
        tests_add(
            &mut r,
            &Directive::test("valid_referers", &["none", "a.org/x"], 3),
        )
        .unwrap();
        assert_eq!(
            r.hosts,
            vec![(Host::Exact("a.org".into()), Some(Arc::from("/x")))]
        );
        assert!(tests_add(&mut r, &Directive::test("valid_referers", &["A.org"], 4)).is_err());
    }
}
