//! `map`: a variable whose value is chosen by matching another value
//! (strings, with `hostnames` wildcards, then regexes in order, then the
//! default), computed when a request first reads it and kept for the rest
//! of the request (unless `volatile`).

pub mod conf;

use crate::core::module::Module;
use crate::core::request::Request;
use crate::core::vars::{Computed, Re, Template, VarSource};
use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct Map {
    /// The value matched (`map $source …`).
    pub source: Template,
    pub hostnames: bool,
    pub volatile: bool,
    /// Exact keys, lowercase (matching is caseless).
    pub exact: HashMap<Box<[u8]>, Template>,
    /// `*.example.com` / `.example.com` as ".example.com", longest first.
    pub lead_wild: Vec<(Box<[u8]>, Template)>,
    /// `www.example.*` as "www.example.", longest first.
    pub trail_wild: Vec<(Box<[u8]>, Template)>,
    pub regex: Vec<(Re, Template)>,
    pub default: Option<Template>,
}

impl Map {
    /// The value template for `key` (regexes record their captures on `req`).
    fn find(&self, req: &Request<'_>, key: &[u8]) -> Option<&Template> {
        let low = key.to_ascii_lowercase();
        if let Some(v) = self.exact.get(low.as_slice()) {
            return Some(v);
        }
        if self.hostnames && !low.is_empty() {
            if let Some((_, v)) = self.lead_wild.iter().find(|(w, _)| low.ends_with(w)) {
                return Some(v);
            }
            if let Some((_, v)) = self.trail_wild.iter().find(|(w, _)| low.starts_with(w)) {
                return Some(v);
            }
        }
        if !key.is_empty() {
            for (re, v) in &self.regex {
                if req.regex_exec(re, key) {
                    return Some(v);
                }
            }
        }
        self.default.as_ref()
    }
}

impl Computed for Map {
    fn compute(&self, req: &Request<'_>, outer: &dyn VarSource, out: &mut Vec<u8>) {
        let mut key = Vec::new();
        self.source.render(outer, &mut key);
        if self.hostnames && key.last() == Some(&b'.') {
            key.pop();
        }
        if let Some(v) = self.find(req, &key) {
            v.render(outer, out);
        }
    }

    fn volatile(&self) -> bool {
        self.volatile
    }
}

/// `map`: variables computed from others.
pub static MODULE: Module = Module {
    name: "map",
    nginx_default: &["http_map_module"],
    directives: &[conf::DIRECTIVES],
    ..Module::EMPTY
};
