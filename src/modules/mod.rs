//! Feature modules: each one a folder holding its runtime, its directives
//! and its `MODULE` declaration ([`crate::core::module::Module`]), and one
//! line in [`MODULES`].

pub mod access;
pub mod acme;
pub mod addition;
pub mod auth_basic;
pub mod auth_request;
pub mod autoindex;
pub mod cache;
pub mod cgi;
pub mod charset;
pub mod client_body;
pub mod compress;
pub mod dav;
pub mod early_hints;
pub mod empty_gif;
pub mod fastcgi;
pub mod flv;
pub mod geo;
pub mod grpc;
pub mod gunzip;
pub mod headers;
pub mod limit_conn;
pub mod limit_rate;
pub mod limit_req;
pub mod log;
pub mod map;
pub mod memcached;
pub mod mirror;
pub mod proxy;
pub mod random_index;
pub mod realip;
pub mod referer;
pub mod rewrite;
pub mod scgi;
pub mod secure_link;
pub mod slice;
pub mod split_clients;
pub mod ssi;
pub mod ssl;
pub mod ssl_preread;
pub mod static_files;
pub mod status;
pub mod stream_pass;
pub mod stream_proxy;
pub mod stream_return;
pub mod sub_filter;
pub mod try_files;
pub mod userid;
pub mod uwsgi;
pub mod zone;

use crate::core::module::Module;

/// Every module, in the order their hooks of one kind run when their
/// declared orders tie. A configuration load, the directive reference and
/// `-V` walk this list.
pub static MODULES: &[&Module] = &[
    &crate::server::MODULE,
    &static_files::MODULE,
    &dav::MODULE,
    &log::MODULE,
    &status::MODULE,
    &client_body::MODULE,
    &rewrite::MODULE,
    &map::MODULE,
    &geo::MODULE,
    &referer::MODULE,
    &secure_link::MODULE,
    &split_clients::MODULE,
    &try_files::MODULE,
    &random_index::MODULE,
    &slice::MODULE,
    &headers::MODULE,
    &gunzip::MODULE,
    &userid::MODULE,
    &sub_filter::MODULE,
    &charset::MODULE,
    &autoindex::MODULE,
    &ssi::MODULE,
    &addition::MODULE,
    &compress::MODULE,
    &crate::upstream::MODULE,
    &proxy::MODULE,
    &proxy::ssl::MODULE,
    &grpc::MODULE,
    &grpc::SSL_MODULE,
    &fastcgi::MODULE,
    &memcached::MODULE,
    &uwsgi::MODULE,
    &uwsgi::SSL_MODULE,
    &scgi::MODULE,
    &cache::PROXY_MODULE,
    &cache::FASTCGI_MODULE,
    &cache::UWSGI_MODULE,
    &cache::SCGI_MODULE,
    &cgi::MODULE,
    &ssl::MODULE,
    &acme::MODULE,
    &access::MODULE,
    &auth_basic::MODULE,
    &auth_request::MODULE,
    &mirror::MODULE,
    &realip::MODULE,
    &crate::http::h2::MODULE,
    &crate::http::h3::MODULE,
    &zone::MODULE,
    &limit_req::MODULE,
    &limit_conn::MODULE,
    &empty_gif::MODULE,
    &flv::MODULE,
    &early_hints::MODULE,
    &limit_rate::MODULE,
    &crate::stream::MODULE,
    &stream_proxy::MODULE,
    &stream_proxy::ssl::MODULE,
    &stream_return::MODULE,
    &stream_pass::MODULE,
    &ssl_preread::MODULE,
];

/// The HTTP modules nginx builds unless `configure` is told `--without-…`.
const NGINX_DEFAULTS: &[&str] = &[
    "http_charset_module",
    "http_gzip_module",
    "http_ssi_module",
    "http_userid_module",
    "http_access_module",
    "http_auth_basic_module",
    "http_mirror_module",
    "http_autoindex_module",
    "http_geo_module",
    "http_map_module",
    "http_split_clients_module",
    "http_referer_module",
    "http_rewrite_module",
    "http_proxy_module",
    "http_fastcgi_module",
    "http_uwsgi_module",
    "http_scgi_module",
    "http_grpc_module",
    "http_memcached_module",
    "http_limit_conn_module",
    "http_limit_req_module",
    "http_empty_gif_module",
    "http_browser_module",
    "http_upstream_hash_module",
    "http_upstream_ip_hash_module",
    "http_upstream_least_conn_module",
    "http_upstream_random_module",
    "http_upstream_keepalive_module",
    "http_upstream_zone_module",
];

/// What `vireo -V` prints, in nginx's layout: tools that read `nginx -V`
/// learn from its `configure arguments` which modules vireo has
/// (`--with-…` for each nginx module beyond the defaults that a vireo module
/// provides, `--without-…` for each default that none provides).
pub fn version_text(modules: &[&Module]) -> String {
    let mut args: Vec<String> = Vec::new();
    for m in modules {
        args.extend(m.nginx.iter().map(|n| format!("--with-{n}")));
    }
    for d in NGINX_DEFAULTS {
        if !modules.iter().any(|m| m.nginx_default.contains(d)) {
            args.push(format!("--without-{d}"));
        }
    }
    format!(
        "nginx version: vireo/{}\nbuilt with rustls\nTLS SNI support enabled\nconfigure arguments: {}\n",
        env!("CARGO_PKG_VERSION"),
        args.join(" ")
    )
}

/// Per-worker housekeeping: every module's tick, once a second.
pub async fn timers() {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        for t in MODULES.iter().filter_map(|m| m.hooks.tick) {
            t();
        }
    }
}

/// A worker is about to exit: every module's exit hook (write out buffers).
pub fn worker_exit() {
    for f in MODULES.iter().filter_map(|m| m.hooks.worker_exit) {
        f();
    }
}

#[cfg(test)]
mod tests {
    use super::MODULES;
    use crate::conf::table::{all, reference_markdown};
    use std::collections::HashSet;

    #[test]
    fn every_module_folder_is_registered() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/modules");
        let names: HashSet<&str> = MODULES.iter().map(|m| m.name).collect();
        assert_eq!(names.len(), MODULES.len(), "two modules share a name");
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if !entry.file_type().unwrap().is_dir() {
                continue;
            }
            let folder = entry.file_name().into_string().unwrap();
            assert!(
                names.contains(folder.as_str()),
                "src/modules/{folder} is not in modules::MODULES (its MODULE's name must be \"{folder}\")"
            );
        }
    }

    #[test]
    fn a_level_runs_only_the_hooks_its_settings_use() {
        use crate::conf::model::{LocConf, LocConfSet, assign_slots};
        use crate::core::module::LevelHooks;
        assign_slots(MODULES);
        let defaults = LocConf::defaults(MODULES);
        let none = LevelHooks::new(MODULES, &defaults);
        assert!(none.post_read.is_empty() && none.access.is_empty() && none.filters.is_empty());
        let mut set = LocConfSet::default();
        set.get_mut::<super::headers::conf::HeadersConfSet>()
            .expires = Some(super::headers::conf::Expires::Max);
        set.get_mut::<super::userid::conf::UseridConfSet>().enable =
            Some(super::userid::conf::Enable::On);
        let some = LevelHooks::new(MODULES, &set.resolve(&defaults));
        assert_eq!(some.filters.len(), 2);
        assert!(some.access.is_empty());
    }

    #[test]
    fn version_names_nginx_modules_as_configure_does() {
        let v = super::version_text(MODULES);
        assert!(v.starts_with("nginx version: vireo/"), "{v}");
        let args = v
            .lines()
            .find_map(|l| l.strip_prefix("configure arguments: "));
        let args: HashSet<&str> = args.unwrap().split(' ').collect();
        for flag in [
            "--with-http_ssl_module",
            "--with-http_v2_module",
            "--with-http_realip_module",
            "--with-http_stub_status_module",
            "--with-http_gzip_static_module",
        ] {
            assert!(args.contains(flag), "{flag} missing from {v}");
        }
        for flag in [
            "--without-http_ssi_module",
            "--without-http_proxy_module",
            "--without-http_rewrite_module",
            "--without-http_uwsgi_module",
            "--without-http_scgi_module",
            "--without-http_memcached_module",
        ] {
            assert!(!args.contains(flag), "{flag} in {v}");
        }
        for m in MODULES {
            for d in m.nginx_default {
                assert!(
                    super::NGINX_DEFAULTS.contains(d),
                    "{}: {d} is no nginx default",
                    m.name
                );
            }
        }
    }

    #[test]
    fn directive_names_are_unique_and_documented() {
        // A name may have one entry per protocol (http's and stream's
        // `proxy_pass`), their contexts apart.
        let mut seen: Vec<&crate::conf::table::Def> = Vec::new();
        for d in all(MODULES) {
            assert!(
                !seen
                    .iter()
                    .any(|o| o.name == d.name && o.ctx.0 & d.ctx.0 != 0),
                "duplicate table entry {}",
                d.name
            );
            seen.push(d);
            assert!(
                !d.doc.is_empty() && !d.syntax.is_empty(),
                "{} lacks docs",
                d.name
            );
            assert!(d.syntax.starts_with(d.name), "{} syntax line", d.name);
            assert!(d.arity.min <= d.arity.max, "{} arity", d.name);
        }
    }

    #[test]
    fn every_directive_has_an_example() {
        for d in all(MODULES) {
            assert!(
                d.doc.contains("\n\n```nginx\n") && d.doc.ends_with("\n```"),
                "{}: end its doc with an example (a ```nginx block)",
                d.name
            );
        }
    }

    #[test]
    fn variable_names_are_unique() {
        let mut seen = HashSet::new();
        for v in MODULES.iter().flat_map(|m| m.variables) {
            assert!(seen.insert(v.name), "two modules declare ${}", v.name);
            assert!(
                crate::core::vars::Var::lookup(v.name).is_none(),
                "${} is also a core variable",
                v.name
            );
        }
    }

    #[test]
    fn ignored_entries_are_marked() {
        let lists = [
            crate::conf::core_directives::IGNORED,
            crate::modules::ssl::conf::IGNORED,
            crate::modules::proxy::conf::IGNORED,
            crate::modules::fastcgi::conf::IGNORED,
            crate::modules::uwsgi::IGNORED,
            crate::modules::scgi::IGNORED,
            crate::modules::referer::conf::IGNORED,
        ];
        for d in all(MODULES) {
            let listed = lists.iter().any(|l| l.iter().any(|i| i.name == d.name));
            assert_eq!(d.ignored, listed, "{}", d.name);
        }
        assert!(reference_markdown(MODULES).contains(
            "## ssl_dhparam\n\n- Syntax: `ssl_dhparam file;`\n- Default: `—`\n- Context: http, server, stream, server in stream\n\n\
             Accepted for nginx compatibility and ignored, with a notice in the error log: \
             rustls has no finite-field Diffie-Hellman suites."
        ));
    }

    #[test]
    fn reference_doc_is_in_step() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/directives.md");
        let want = reference_markdown(MODULES);
        if std::env::var_os("VIREO_UPDATE_DOCS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "docs/directives.md is stale: run `VIREO_UPDATE_DOCS=1 cargo test --lib reference_doc`"
        );
    }
}
