//! [`Model`] → one nginx-syntax vireo configuration.
//!
//! Every value that comes from an object is written as a quoted string (`"`, `\` escaped), so
//! no annotation can end a directive or open a block; variables in it are still expanded
//! where vireo expands them (front ends refuse `$` where it has no business).

use std::fmt::Write;
use std::path::PathBuf;

use crate::model::*;

/// Where the rendered configuration runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The configuration directory: files of [`Model::files`] are written under it.
    pub conf_dir: PathBuf,
    /// The pid file vireo writes (the controller signals that process).
    pub pid_file: PathBuf,
    /// `listen` address of plain HTTP.
    pub http_listen: String,
    /// `listen` address of HTTPS.
    pub https_listen: String,
    /// `resolver` for names in URLs of annotations (external authentication, mirrors).
    pub resolver: Option<String>,
}

/// Quote a value for the configuration.
pub fn q(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// PCRE-escape literal text.
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Text written with indentation.
struct Out {
    text: String,
    depth: usize,
}

impl Out {
    fn line(&mut self, s: impl AsRef<str>) {
        for _ in 0..self.depth {
            self.text.push_str("    ");
        }
        self.text.push_str(s.as_ref());
        self.text.push('\n');
    }
    fn open(&mut self, s: impl AsRef<str>) {
        self.line(format!("{} {{", s.as_ref()));
        self.depth += 1;
    }
    fn close(&mut self) {
        self.depth -= 1;
        self.line("}");
    }
}

/// The whole configuration.
pub fn render(model: &Model, settings: &Settings) -> String {
    let mut r = Renderer {
        settings,
        model,
        http: Out {
            text: String::new(),
            depth: 1,
        },
        servers: Out {
            text: String::new(),
            depth: 1,
        },
        n: 0,
        declared: Default::default(),
    };
    for z in &model.zones {
        r.zone(z);
    }
    for (name, u) in &model.upstreams {
        r.upstream(name, u);
    }
    let tls_any = model.servers.iter().any(|s| s.tls.is_some());
    if !model.servers.iter().any(|s| s.default) {
        r.server(
            &Server {
                default: true,
                ..Server::default()
            },
            tls_any,
        );
    }
    for s in &model.servers {
        r.server(s, tls_any);
    }
    let mut o = Out {
        text: String::new(),
        depth: 0,
    };
    o.line("# Written by vireo-controller from the cluster's objects; do not edit.");
    o.line(format!("pid {};", q(&settings.pid_file.to_string_lossy())));
    o.line("events {}");
    o.open("http");
    o.line("server_names_hash_bucket_size 128;");
    // HTTP/2 beside HTTP/1 (ALPN on TLS, prior knowledge on plain), as ingress-nginx.
    o.line("http2 on;");
    o.open("map $http_upgrade $vireo_connection_upgrade");
    o.line("default upgrade;");
    o.line("\"\" \"\";");
    o.close();
    if let Some(res) = &settings.resolver {
        o.line(format!("resolver {res};"));
    }
    o.text.push_str(&r.http.text);
    o.text.push_str(&r.servers.text);
    o.close();
    o.text
}

struct Renderer<'a> {
    settings: &'a Settings,
    model: &'a Model,
    /// http-level blocks: zones, maps, split_clients, upstreams.
    http: Out,
    servers: Out,
    /// Locations numbered through the configuration, naming their maps and helpers.
    n: usize,
    /// Variables of the maps written so far, by kind and body.
    declared: std::collections::HashMap<String, String>,
}

/// The variable holding an upstream's sticky-session key.
fn affinity_var(upstream: &str) -> String {
    format!("$vireo_affinity_{}", upstream.replace(['-', '.'], "_"))
}

/// The Set-Cookie value that gives a client its sticky-session key.
fn cookie_header(c: &CookieAffinity, var: &str) -> String {
    let mut s = format!("{}={var}; Path={}", c.name, c.path);
    if let Some(d) = &c.domain {
        let _ = write!(s, "; Domain={d}");
    }
    if let Some(m) = c.max_age {
        let _ = write!(s, "; Max-Age={m}");
    }
    if c.secure {
        s.push_str("; Secure");
    }
    if let Some(ss) = &c.samesite {
        let _ = write!(s, "; SameSite={ss}");
    }
    s.push_str("; HttpOnly");
    s
}

/// The nginx variable holding a request header's value.
fn header_var(h: &str) -> String {
    format!("$http_{}", h.to_ascii_lowercase().replace('-', "_"))
}

/// The passing directive of a protocol.
fn pass(p: Protocol) -> (&'static str, &'static str) {
    match p {
        Protocol::Http => ("proxy", "http://"),
        Protocol::Https => ("proxy", "https://"),
        Protocol::Grpc => ("grpc", "grpc://"),
        Protocol::Grpcs => ("grpc", "grpcs://"),
        Protocol::FastCgi => ("fastcgi", ""),
    }
}

impl Renderer<'_> {
    fn zone(&mut self, z: &Zone) {
        let o = &mut self.http;
        let key = if z.exempt.is_empty() {
            "$binary_remote_addr".to_string()
        } else {
            o.open(format!("geo $vireo_exempt_{}", z.name));
            o.line("default 0;");
            for net in &z.exempt {
                o.line(format!("{} 1;", q(net)));
            }
            o.close();
            o.open(format!(
                "map $vireo_exempt_{} $vireo_key_{}",
                z.name, z.name
            ));
            o.line("0 $binary_remote_addr;");
            o.line("1 \"\";");
            o.close();
            format!("$vireo_key_{}", z.name)
        };
        match &z.kind {
            ZoneKind::Requests { rate, per_minute } => o.line(format!(
                "limit_req_zone {key} zone={}:5m rate={rate}r/{};",
                z.name,
                if *per_minute { "m" } else { "s" }
            )),
            ZoneKind::Connections => o.line(format!("limit_conn_zone {key} zone={}:5m;", z.name)),
        }
    }

    fn upstream(&mut self, name: &str, u: &Upstream) {
        let o = &mut self.http;
        if let Balance::Cookie(c) = &u.balance {
            let var = affinity_var(name);
            // The client's cookie, else a new key that the locations passing here send back.
            o.open(format!("map $cookie_{} {var}", c.name));
            o.line("\"\" $request_id;");
            o.line(format!("default $cookie_{};", c.name));
            o.close();
            o.open(format!("map $cookie_{} {var}_set", c.name));
            o.line(format!("\"\" {};", q(&cookie_header(c, &var))));
            o.line("default \"\";");
            o.close();
        }
        o.open(format!("upstream {name}"));
        match &u.balance {
            Balance::RoundRobin => {}
            Balance::LeastConn => o.line("least_conn;"),
            Balance::Hash(key) => o.line(format!("hash {} consistent;", q(key))),
            Balance::Cookie(_) => o.line(format!("hash {} consistent;", affinity_var(name))),
        }
        if u.peers.is_empty() {
            o.line("server 127.0.0.1:1 down;");
        }
        for p in &u.peers {
            o.line(format!("server {p};"));
        }
        o.line("keepalive 32;");
        o.close();
    }

    fn server(&mut self, s: &Server, tls_any: bool) {
        let settings = self.settings;
        let o = &mut self.servers;
        o.open("server");
        let (tls, d) = if s.default {
            (tls_any, " default_server")
        } else {
            (s.tls.is_some(), "")
        };
        o.line(format!("listen {}{d};", settings.http_listen));
        if tls {
            o.line(format!("listen {} ssl{d};", settings.https_listen));
        }
        if s.default {
            o.line("server_name _;");
        } else {
            let names: Vec<String> = s.names.iter().map(|h| q(h)).collect();
            o.line(format!("server_name {};", names.join(" ")));
        }
        match &s.tls {
            Some(t) => {
                o.line(format!(
                    "ssl_certificate {};",
                    q(&file(settings, &t.certificate))
                ));
                o.line(format!(
                    "ssl_certificate_key {};",
                    q(&file(settings, &t.key))
                ));
                if let Some(c) = &t.client {
                    o.line(format!(
                        "ssl_client_certificate {};",
                        q(&file(settings, &c.ca))
                    ));
                    o.line(format!("ssl_verify_client {};", c.verify));
                    o.line(format!("ssl_verify_depth {};", c.depth));
                    if let Some(page) = &c.error_page {
                        o.line(format!("error_page 495 496 = {};", q(page)));
                    }
                }
            }
            None if s.default && tls_any => o.line("ssl_reject_handshake on;"),
            None => {}
        }
        for snippet in &s.snippets {
            raw(&mut self.servers, snippet);
        }
        for l in &s.locations {
            self.n += 1;
            self.location(l);
        }
        // Paths no location takes are not found (never files of the prefix's html/).
        if !s
            .locations
            .iter()
            .any(|l| l.path == PathMatch::Prefix("/".into()))
        {
            let o = &mut self.servers;
            o.open("location /");
            o.line("return 404;");
            o.close();
        }
        self.servers.close();
    }

    fn location(&mut self, l: &Location) {
        self.location_at(l, location_head(&l.path), false);
    }

    /// A location under `head` (its own, or a `named` one), its helper locations after it.
    fn location_at(&mut self, l: &Location, head: String, named: bool) {
        let n = self.n;
        let target = match &l.action {
            Action::Proxy(p) => Some(self.select(&p.select, n)),
            _ => None,
        };
        // Helper locations (authentication, sign-in, error pages, mirror) follow it.
        let mut extra = Out {
            text: String::new(),
            depth: self.servers.depth,
        };
        self.servers.open(head);
        self.policy(&l.policy, &mut extra);
        let o = &mut self.servers;
        match &l.action {
            // A named location has no captures of its own: its path's regex, matched
            // again, gives those of the redirect's target.
            Action::Redirect { code, target } => match &l.path {
                PathMatch::Regex { pattern, caseless } if named => {
                    let op = if *caseless { "~*" } else { "~" };
                    o.open(format!("if ($uri {op} {})", q(&format!("^{pattern}"))));
                    o.line(format!("return {code} {};", q(target)));
                    o.close();
                    o.line("return 404;");
                }
                _ => o.line(format!("return {code} {};", q(target))),
            },
            Action::Status(code) => o.line(format!("return {code};")),
            Action::Proxy(p) => {
                let target = target.unwrap_or_default();
                self.proxy(p, l, &target, &mut extra);
            }
        }
        self.servers.close();
        self.servers.text.push_str(&extra.text);
        if let Action::Proxy(p) = &l.action {
            for (i, jump) in p.jumps.iter().enumerate() {
                self.n += 1;
                self.location_at(jump, format!("location {}", jump_name(n, i)), true);
            }
        }
    }

    /// Writes an http-level block `KIND VAR { BODY }` (a map or split_clients), or returns
    /// the variable of an identical one written before (the halves of a Prefix path, and
    /// locations with the same settings, share theirs).
    fn declare(&mut self, kind: &str, var: String, body: &[String]) -> String {
        let key = format!("{kind}\n{}", body.join("\n"));
        if let Some(v) = self.declared.get(&key) {
            return v.clone();
        }
        self.http.open(format!("{kind} {var}"));
        for l in body {
            self.http.line(l);
        }
        self.http.close();
        self.declared.insert(key, var.clone());
        var
    }

    /// Declares what chooses the upstream and returns the upstream name or variable.
    fn select(&mut self, s: &Select, n: usize) -> String {
        let default = self.group(&s.default, n, 0);
        if s.rules.is_empty() {
            return default;
        }
        // One flag per condition ("1" when it holds), then the first rule whose flags are
        // all set picks its group.
        let mut flags = Vec::new();
        let mut rules = Vec::new();
        for (r, (conds, group)) in s.rules.iter().enumerate() {
            let value = self.group(group, n, r + 1);
            let mut positions = Vec::new();
            for c in conds {
                let pattern = match &c.test {
                    Test::Equals(v) => format!("~^{}$", regex_escape(v)),
                    Test::Regex(r) => format!("~{r}"),
                };
                let body = [format!("{} 1;", q(&pattern)), "default 0;".to_string()];
                let input = self.input(&c.input);
                let var = self.declare(
                    &format!("map {input}"),
                    format!("$vireo_c{n}_{}", flags.len()),
                    &body,
                );
                positions.push(flags.len());
                flags.push(var);
            }
            rules.push((positions, value));
        }
        let mut body = Vec::new();
        for (positions, value) in rules {
            let pattern: String = (0..flags.len())
                .map(|i| if positions.contains(&i) { '1' } else { '.' })
                .collect();
            body.push(format!("{} {};", q(&format!("~^{pattern}")), q(&value)));
        }
        body.push(format!("default {};", q(&default)));
        self.declare(
            &format!("map {}", q(&flags.concat())),
            format!("$vireo_pass{n}"),
            &body,
        )
    }

    /// The variable holding a condition's input. A query parameter's is the value of its
    /// first `NAME=` pair, the name compared with case (`$arg_NAME` compares it without).
    fn input(&mut self, i: &Input) -> String {
        let name = match i {
            Input::Header(h) => return header_var(h),
            Input::Cookie(c) => return format!("$cookie_{c}"),
            Input::Method => return "$request_method".to_string(),
            Input::Query(name) => name,
        };
        let pattern = format!("~(?:^|&){}=(?<vireo_arg>[^&]*)", regex_escape(name));
        let body = [
            format!("{} $vireo_arg;", q(&pattern)),
            "default \"\";".to_string(),
        ];
        let var = format!("$vireo_query{}", self.declared.len());
        self.declare("map $args", var, &body)
    }

    /// An upstream name, or the variable of a weighted split between several.
    fn group(&mut self, g: &Group, n: usize, r: usize) -> String {
        let members: Vec<&(String, u32)> = g.0.iter().filter(|(_, w)| *w > 0).collect();
        match members.as_slice() {
            [] => g.0.first().map(|(u, _)| u.clone()).unwrap_or_default(),
            [(u, _)] => u.clone(),
            many => {
                let total: u64 = many.iter().map(|(_, w)| u64::from(*w)).sum();
                let mut body = Vec::new();
                for (u, w) in &many[..many.len() - 1] {
                    // Hundredths of a percent, rounded down; the last member takes the rest.
                    let share = u64::from(*w) * 10000 / total;
                    if share > 0 {
                        body.push(format!("{}.{:02}% {u};", share / 100, share % 100));
                    }
                }
                body.push(format!("* {};", many[many.len() - 1].0));
                self.declare(
                    "split_clients \"${request_id}\"",
                    format!("$vireo_split{n}_{r}"),
                    &body,
                )
            }
        }
    }

    fn policy(&mut self, p: &Policy, extra: &mut Out) {
        let n = self.n;
        if !p.access_log {
            self.servers.line("access_log off;");
        }
        if p.rewrite_log {
            self.servers.line("rewrite_log on;");
        }
        if let Some(code) = p.https_redirect {
            let o = &mut self.servers;
            o.open("if ($scheme = http)");
            o.line(format!("return {code} https://$host$request_uri;"));
            o.close();
        }
        if let Some(subject) = &p.client_subject {
            let o = &mut self.servers;
            o.open(format!("if ($ssl_client_s_dn !~ {})", q(subject)));
            o.line("return 403;");
            o.close();
        }
        if let Some(root) = &p.app_root {
            let o = &mut self.servers;
            o.open("if ($uri = /)");
            o.line(format!(
                "return 302 {};",
                q(&format!("$scheme://$http_host{root}"))
            ));
            o.close();
        }
        if let Some(c) = &p.cors {
            self.cors(c);
        }
        let o = &mut self.servers;
        if let Some(s) = &p.client_max_body_size {
            o.line(format!("client_max_body_size {};", q(s)));
        }
        if let Some(s) = &p.client_body_buffer_size {
            o.line(format!("client_body_buffer_size {};", q(s)));
        }
        for net in &p.deny {
            o.line(format!("deny {};", q(net)));
        }
        for net in &p.allow {
            o.line(format!("allow {};", q(net)));
        }
        if !p.allow.is_empty() {
            o.line("deny all;");
        }
        if let Some((zone, conns)) = &p.limit_conn {
            o.line(format!("limit_conn {zone} {conns};"));
        }
        if let Some(k) = p.limit_rate {
            o.line(format!("limit_rate {k}k;"));
        }
        if let Some(k) = p.limit_rate_after {
            o.line(format!("limit_rate_after {k}k;"));
        }
        for l in &p.limit_req {
            o.line(format!(
                "limit_req zone={} burst={} nodelay;",
                l.zone, l.burst
            ));
        }
        if p.satisfy_any {
            o.line("satisfy any;");
        }
        if let Some(b) = &p.basic_auth {
            o.line(format!("auth_basic {};", q(&b.realm)));
            let file = file(self.settings, &b.file);
            self.servers
                .line(format!("auth_basic_user_file {};", q(&file)));
        }
        if let Some(a) = &p.external_auth {
            self.external_auth(a, n, extra);
        }
        let o = &mut self.servers;
        for (name, value) in &p.add_headers {
            o.line(format!("add_header {} {} always;", q(name), q(value)));
        }
        if let Some(snippet) = &p.snippet {
            raw(o, snippet);
        }
    }

    fn cors(&mut self, c: &Cors) {
        let n = self.n;
        let any = c.origins.iter().any(|o| o == "*");
        let mut headers = vec![("Access-Control-Allow-Methods", c.methods.clone())];
        headers.push(("Access-Control-Allow-Headers", c.headers.clone()));
        if !c.expose_headers.is_empty() {
            headers.push(("Access-Control-Expose-Headers", c.expose_headers.clone()));
        }
        if c.credentials {
            headers.push(("Access-Control-Allow-Credentials", "true".to_string()));
        }
        headers.push(("Access-Control-Max-Age", c.max_age.to_string()));
        let mut lines = Vec::new();
        if any {
            lines.push(("Access-Control-Allow-Origin".to_string(), q("*")));
            for (h, v) in headers {
                lines.push((h.to_string(), q(&v)));
            }
        } else {
            // The origin is echoed when it is allowed; every CORS header is empty (and so
            // not sent) when it is not.
            let alternatives: Vec<String> = c.origins.iter().map(|o| origin_regex(o)).collect();
            let body = [
                format!(
                    "{} $http_origin;",
                    q(&format!("~^(?:{})$", alternatives.join("|")))
                ),
                "default \"\";".to_string(),
            ];
            let origin = self.declare("map $http_origin", format!("$vireo_cors{n}"), &body);
            lines.push(("Access-Control-Allow-Origin".to_string(), origin.clone()));
            for (i, (h, v)) in headers.into_iter().enumerate() {
                let body = [format!("\"~.\" {};", q(&v)), "default \"\";".to_string()];
                let var = self.declare(
                    &format!("map {origin}"),
                    format!("$vireo_cors{n}_{i}"),
                    &body,
                );
                lines.push((h.to_string(), var));
            }
            lines.push(("Vary".to_string(), q("Origin")));
        }
        let o = &mut self.servers;
        for (h, v) in lines {
            o.line(format!("add_header {h} {v} always;"));
        }
        o.open("if ($request_method = OPTIONS)");
        o.line("return 204;");
        o.close();
    }

    fn external_auth(&mut self, a: &ExternalAuth, n: usize, extra: &mut Out) {
        let path = format!("/_vireo_auth_{n}");
        let o = &mut self.servers;
        o.line(format!("auth_request {path};"));
        for (i, h) in a.response_headers.iter().enumerate() {
            let var = format!("$vireo_auth{n}_{i}");
            o.line(format!(
                "auth_request_set {var} $upstream_http_{};",
                h.to_ascii_lowercase().replace('-', "_")
            ));
        }
        o.line(format!(
            "auth_request_set $vireo_auth{n}_cookie $upstream_http_set_cookie;"
        ));
        let always = if a.always_set_cookie { " always" } else { "" };
        o.line(format!(
            "add_header Set-Cookie $vireo_auth{n}_cookie{always};"
        ));
        if a.signin.is_some() {
            o.line(format!("error_page 401 = @vireo_signin_{n};"));
        }
        extra.open(format!("location = {path}"));
        extra.line("internal;");
        extra.line("proxy_pass_request_body off;");
        extra.line("proxy_set_header Content-Length \"\";");
        extra.line("proxy_set_header X-Original-URI $request_uri;");
        extra.line("proxy_set_header X-Original-URL $scheme://$http_host$request_uri;");
        extra.line("proxy_set_header X-Original-Method $request_method;");
        extra.line("proxy_set_header X-Sent-From \"vireo-controller\";");
        extra.line("proxy_set_header X-Real-IP $remote_addr;");
        extra.line("proxy_set_header X-Forwarded-For $remote_addr;");
        extra.line("proxy_set_header X-Request-ID $request_id;");
        let redirect = a
            .request_redirect
            .clone()
            .unwrap_or_else(|| "$request_uri".to_string());
        extra.line(format!(
            "proxy_set_header X-Auth-Request-Redirect {};",
            q(&redirect)
        ));
        if let Some(m) = &a.method {
            extra.line(format!("proxy_method {m};"));
        }
        extra.line("proxy_http_version 1.1;");
        extra.line(format!("set $vireo_auth{n}_url {};", q(&a.url)));
        extra.line(format!("proxy_pass $vireo_auth{n}_url;"));
        extra.close();
        if let Some(signin) = &a.signin {
            let param = &a.signin_redirect_param;
            let to = if signin.contains(&format!("{param}=")) {
                signin.clone()
            } else {
                let sep = if signin.contains('?') { '&' } else { '?' };
                format!("{signin}{sep}{param}=$scheme://$http_host$request_uri")
            };
            extra.open(format!("location @vireo_signin_{n}"));
            extra.line(format!("add_header Set-Cookie $vireo_auth{n}_cookie;"));
            extra.line(format!("return 302 {};", q(&to)));
            extra.close();
        }
    }

    fn proxy(&mut self, p: &Proxy, l: &Location, target: &str, extra: &mut Out) {
        let n = self.n;
        let (d, scheme) = pass(p.protocol);
        // Appended headers: a map of the client's header to the joined value.
        let mut appended = Vec::new();
        for (i, (h, v)) in p.append_headers.iter().enumerate() {
            let client = header_var(h);
            let body = [
                format!("\"\" {};", q(v)),
                format!("default {};", q(&format!("{client},{v}"))),
            ];
            let var = self.declare(
                &format!("map {client}"),
                format!("$vireo_append{n}_{i}"),
                &body,
            );
            appended.push((h.clone(), var));
        }
        let o = &mut self.servers;
        if let Some(r) = &p.rewrite {
            o.line(format!(
                "rewrite {} {} break;",
                q(&format!("(?i){}", r.pattern)),
                q(&r.replacement)
            ));
        }
        if let Some(m) = &p.mirror {
            o.line(format!("mirror /_vireo_mirror_{n};"));
            o.line(format!(
                "mirror_request_body {};",
                if m.request_body { "on" } else { "off" }
            ));
            extra.open(format!("location = /_vireo_mirror_{n}"));
            extra.line("internal;");
            if let Some(h) = &m.host {
                extra.line(format!("proxy_set_header Host {};", q(h)));
            }
            extra.line(format!("set $vireo_mirror{n} {};", q(&m.target)));
            extra.line(format!("proxy_pass $vireo_mirror{n};"));
            extra.close();
        }
        // Headers: the defaults, each replaced by an annotation's header of the same name.
        let mut headers: Vec<(String, String)> = match p.protocol {
            Protocol::FastCgi => Vec::new(),
            _ => vec![
                ("Host".into(), "$host".into()),
                ("X-Request-ID".into(), "$request_id".into()),
                ("X-Real-IP".into(), "$remote_addr".into()),
                (
                    "X-Forwarded-For".into(),
                    "$proxy_add_x_forwarded_for".into(),
                ),
                ("X-Forwarded-Host".into(), "$host".into()),
                ("X-Forwarded-Port".into(), "$server_port".into()),
                ("X-Forwarded-Proto".into(), "$scheme".into()),
                ("X-Forwarded-Scheme".into(), "$scheme".into()),
                ("X-Scheme".into(), "$scheme".into()),
            ],
        };
        if matches!(p.protocol, Protocol::Http | Protocol::Https) {
            headers.push(("Upgrade".into(), "$http_upgrade".into()));
            headers.push(("Connection".into(), "$vireo_connection_upgrade".into()));
        }
        for (h, v) in p.set_headers.iter().chain(&appended) {
            match headers.iter_mut().find(|(k, _)| k.eq_ignore_ascii_case(h)) {
                Some(slot) => slot.1 = v.clone(),
                None => headers.push((h.clone(), v.clone())),
            }
        }
        if let Some(a) = &l.policy.external_auth {
            for (i, h) in a.response_headers.iter().enumerate() {
                headers.push((h.clone(), format!("$vireo_auth{n}_{i}")));
            }
        }
        let set = if d == "grpc" {
            "grpc_set_header"
        } else {
            "proxy_set_header"
        };
        if d != "fastcgi" {
            for (h, v) in &headers {
                o.line(format!("{set} {} {};", q(h), q(v)));
            }
        }
        for h in &p.hide_headers {
            o.line(format!("{d}_hide_header {};", q(h)));
        }
        if matches!(p.protocol, Protocol::Http | Protocol::Https) {
            o.line(format!(
                "proxy_http_version {};",
                p.http_version.as_deref().unwrap_or("1.1")
            ));
        }
        if p.protocol == Protocol::FastCgi {
            for (k, v) in FASTCGI_PARAMS {
                o.line(format!("fastcgi_param {k} {v};"));
            }
        }
        for (what, t) in [
            ("connect", p.timeouts.connect),
            ("send", p.timeouts.send),
            ("read", p.timeouts.read),
        ] {
            match t {
                Some(ms) if ms % 1000 == 0 => o.line(format!("{d}_{what}_timeout {}s;", ms / 1000)),
                Some(ms) => o.line(format!("{d}_{what}_timeout {ms}ms;")),
                None => {}
            }
        }
        if d == "proxy" {
            if let Some(b) = p.buffering {
                o.line(format!("proxy_buffering {};", on(b)));
            }
            if let Some(b) = p.request_buffering {
                o.line(format!("proxy_request_buffering {};", on(b)));
            }
            if let Some(s) = &p.buffer_size {
                o.line(format!("proxy_buffer_size {};", q(s)));
            }
            match (p.buffers_number, &p.buffer_size) {
                (Some(b), Some(s)) => o.line(format!("proxy_buffers {b} {};", q(s))),
                (Some(b), None) => o.line(format!("proxy_buffers {b} 4k;")),
                _ => {}
            }
            if let Some(s) = &p.max_temp_file_size {
                o.line(format!("proxy_max_temp_file_size {};", q(s)));
            }
            for (from, to) in &p.redirects {
                o.line(format!("proxy_redirect {} {};", q(from), q(to)));
            }
            if let Some((from, to)) = &p.cookie_domain {
                o.line(format!("proxy_cookie_domain {} {};", q(from), q(to)));
            }
            if let Some((from, to)) = &p.cookie_path {
                o.line(format!("proxy_cookie_path {} {};", q(from), q(to)));
            }
        }
        if let (Some(t), "proxy" | "grpc") = (&p.upstream_tls, d) {
            let settings = self.settings;
            let o = &mut self.servers;
            if let Some((cert, key)) = &t.certificate {
                o.line(format!("{d}_ssl_certificate {};", q(&file(settings, cert))));
                o.line(format!(
                    "{d}_ssl_certificate_key {};",
                    q(&file(settings, key))
                ));
            }
            if let Some(ca) = &t.trusted {
                o.line(format!(
                    "{d}_ssl_trusted_certificate {};",
                    q(&file(settings, ca))
                ));
            }
            if let Some(v) = t.verify {
                o.line(format!("{d}_ssl_verify {};", on(v)));
            }
            if let Some(n) = t.verify_depth {
                o.line(format!("{d}_ssl_verify_depth {n};"));
            }
            if let Some(n) = &t.name {
                o.line(format!("{d}_ssl_name {};", q(n)));
            }
            if let Some(v) = t.server_name {
                o.line(format!("{d}_ssl_server_name {};", on(v)));
            }
            if let Some(c) = &t.ciphers {
                o.line(format!("{d}_ssl_ciphers {};", q(c)));
            }
            if let Some(list) = &t.protocols {
                o.line(format!("{d}_ssl_protocols {list};"));
            }
        }
        let o = &mut self.servers;
        if let Some(s) = &p.next_upstream {
            o.line(format!("{d}_next_upstream {s};"));
        }
        if let Some(t) = p.next_upstream_timeout {
            o.line(format!("{d}_next_upstream_timeout {t}s;"));
        }
        if let Some(t) = p.next_upstream_tries {
            o.line(format!("{d}_next_upstream_tries {t};"));
        }
        for u in upstreams_of(&p.select) {
            if let Some(Balance::Cookie(_)) = self.balance_of(u) {
                self.servers
                    .line(format!("add_header Set-Cookie {}_set;", affinity_var(u)));
            }
        }
        let o = &mut self.servers;
        if !p.intercept_errors.is_empty() {
            o.line(format!("{d}_intercept_errors on;"));
        }
        if let Some(backend) = &p.error_backend {
            for code in &p.intercept_errors {
                o.line(format!("error_page {code} = @vireo_error_{n}_{code};"));
                extra.open(format!("location @vireo_error_{n}_{code}"));
                for (h, v) in [
                    ("X-Code", code.to_string()),
                    ("X-Format", "$http_accept".to_string()),
                    ("X-Original-URI", "$request_uri".to_string()),
                    ("X-Namespace", l.origin.namespace.clone()),
                    ("X-Ingress-Name", l.origin.name.clone()),
                    ("X-Service-Name", l.origin.service.clone()),
                    ("X-Service-Port", l.origin.port.clone()),
                    ("X-Request-ID", "$request_id".to_string()),
                    ("Host", "$host".to_string()),
                ] {
                    extra.line(format!("proxy_set_header {h} {};", q(&v)));
                }
                extra.line(format!("proxy_pass http://{backend};"));
                extra.close();
            }
        }
        if !p.jumps.is_empty() {
            // On to a jump's named location (written after this one), through an error
            // page of a status nothing else answers with; that location may jump on.
            let body: Vec<String> = (0..p.jumps.len())
                .map(|i| format!("{} {};", q(&jump_member(i)), q(&jump_name(n, i))))
                .collect();
            let var = self.declare(&format!("map {target}"), format!("$vireo_jump{n}"), &body);
            let o = &mut self.servers;
            o.line(format!("error_page {JUMP_STATUS} = {var};"));
            o.line("recursive_error_pages on;");
            o.open(format!("if ({target} ~ {})", q(&format!("^{JUMP_MEMBER}"))));
            o.line(format!("return {JUMP_STATUS};"));
            o.close();
        }
        let o = &mut self.servers;
        // Members answering with a status: the whole location, or an `if` on the chosen one.
        if let Some(code) = member_status(target) {
            o.line(format!("return {code};"));
            return;
        }
        for code in upstreams_of(&p.select)
            .into_iter()
            .filter_map(member_status)
        {
            o.open(format!("if ({target} = {})", q(&status_member(code))));
            o.line(format!("return {code};"));
            o.close();
        }
        o.line(format!("{d}_pass {scheme}{target};"));
    }

    fn balance_of(&self, upstream: &str) -> Option<&Balance> {
        self.model.upstreams.get(upstream).map(|u| &u.balance)
    }
}

/// The status a location returns to hand a request to a jump's named location.
const JUMP_STATUS: u16 = 418;

/// The named location of jump `i` of location `n`.
fn jump_name(n: usize, i: usize) -> String {
    format!("@vireo_jump_{n}_{i}")
}

/// The absolute path of a file of the configuration directory.
fn file(settings: &Settings, name: &str) -> String {
    settings.conf_dir.join(name).to_string_lossy().into_owned()
}

/// Raw text, line by line at the current depth.
fn raw(o: &mut Out, text: &str) {
    for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        o.line(l);
    }
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// The upstream names a selection may pick.
fn upstreams_of(s: &Select) -> Vec<&str> {
    let mut v: Vec<&str> = Vec::new();
    for g in s
        .rules
        .iter()
        .map(|(_, g)| g)
        .chain(std::iter::once(&s.default))
    {
        for (u, _) in &g.0 {
            if !v.contains(&u.as_str()) {
                v.push(u);
            }
        }
    }
    v
}

/// A PCRE alternative for an allowed CORS origin: `scheme://host[:port]`, where a host may
/// start with `*.` (one label).
fn origin_regex(origin: &str) -> String {
    match origin.split_once("://*.") {
        Some((scheme, rest)) => format!(
            "{}://[A-Za-z0-9-]+\\.{}",
            regex_escape(scheme),
            regex_escape(rest)
        ),
        None => regex_escape(origin),
    }
}

fn location_head(path: &PathMatch) -> String {
    match path {
        PathMatch::Exact(p) => format!("location = {}", q(p)),
        PathMatch::Prefix(p) => format!("location {}", q(p)),
        PathMatch::Regex { pattern, caseless } => {
            format!(
                "location {} {}",
                if *caseless { "~*" } else { "~" },
                q(&format!("^{pattern}"))
            )
        }
    }
}

/// The FastCGI parameters every request gets (nginx's fastcgi_params).
const FASTCGI_PARAMS: &[(&str, &str)] = &[
    ("QUERY_STRING", "$query_string"),
    ("REQUEST_METHOD", "$request_method"),
    ("CONTENT_TYPE", "$content_type"),
    ("CONTENT_LENGTH", "$content_length"),
    ("SCRIPT_NAME", "$fastcgi_script_name"),
    ("REQUEST_URI", "$request_uri"),
    ("DOCUMENT_URI", "$document_uri"),
    ("DOCUMENT_ROOT", "$document_root"),
    ("SERVER_PROTOCOL", "$server_protocol"),
    ("REQUEST_SCHEME", "$scheme"),
    ("GATEWAY_INTERFACE", "CGI/1.1"),
    ("SERVER_SOFTWARE", "vireo"),
    ("REMOTE_ADDR", "$remote_addr"),
    ("REMOTE_PORT", "$remote_port"),
    ("SERVER_ADDR", "$server_addr"),
    ("SERVER_PORT", "$server_port"),
    ("SERVER_NAME", "$server_name"),
];
