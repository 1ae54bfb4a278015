//! Configuration: error messages with file:line and exit codes of `vireo -t`,
//! includes (plain, glob, missing), accepted-but-ignored nginx directives, the
//! seed tuning configuration, `types {}` files, and server selection by Host.

mod common;
use common::*;
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `vireo -t` on `conf` must fail (exit 1) with `msg in <t.conf>:<line>`.
#[track_caller]
fn fails_at(conf: &str, msg: &str, line: u32) {
    let dir = TempDir::new("cf");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let out = test_conf(&dir, conf);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{conf}\n{err}");
    let want = format!(
        "vireo: [emerg] {msg} in {}:{line}\n",
        dir.path().join("t.conf").display()
    );
    assert!(err.contains(&want), "want {want:?}\ngot {err:?}");
    assert!(err.contains("test failed"), "{err}");
}

/// `vireo -t` on `conf` must succeed; returns stderr.
#[track_caller]
fn passes(dir: &TempDir, conf: &str) -> String {
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let out = test_conf(dir, conf);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{conf}\n{err}");
    assert!(
        err.contains("syntax is ok") && err.contains("test is successful"),
        "{err}"
    );
    err
}

#[test]
fn unknown_directive_names_file_and_line() {
    fails_at(
        "events {}\n\nhttp {\n    bogus_directive on;\n}\n",
        "unknown directive \"bogus_directive\"",
        4,
    );
    fails_at("x;", "unknown directive \"x\"", 1);
    // A known directive's misspelling is unknown too, wherever it stands.
    fails_at(
        "events {\n}\nhttp {\n server {\n  location / {\n   sendfil on;\n  }\n }\n}\n",
        "unknown directive \"sendfil\"",
        6,
    );
}

#[test]
fn directive_in_wrong_context() {
    fails_at(
        "events {}\nhttp {\n listen 80;\n}\n",
        "\"listen\" directive is not allowed here",
        3,
    );
    fails_at(
        "worker_connections 10;\n",
        "\"worker_connections\" directive is not allowed here",
        1,
    );
    fails_at(
        "events { root /x; }\n",
        "\"root\" directive is not allowed here",
        1,
    );
    fails_at(
        "events {}\nhttp {\n server {\n  server {}\n }\n}\n",
        "\"server\" directive is not allowed here",
        4,
    );
    fails_at(
        "events {}\nhttp {}\nuse epoll;\n",
        "\"use\" directive is not allowed here",
        3,
    );
    fails_at(
        "events {\n http {}\n}\n",
        "\"http\" directive is not allowed here",
        2,
    );
    fails_at(
        "events {}\nhttp { server { location / { server_name a; } } }\n",
        "\"server_name\" directive is not allowed here",
        2,
    );
}

#[test]
fn wrong_number_of_arguments() {
    fails_at(
        "events {\n worker_connections 1 2;\n}\n",
        "invalid number of arguments in \"worker_connections\" directive",
        2,
    );
    fails_at(
        "events {}\nhttp {\n root;\n}\n",
        "invalid number of arguments in \"root\" directive",
        3,
    );
    fails_at(
        "events {}\nhttp {\n sendfile on off;\n}\n",
        "invalid number of arguments in \"sendfile\" directive",
        3,
    );
    fails_at(
        "events {}\nhttp { server { server_name; } }\n",
        "invalid number of arguments in \"server_name\" directive",
        2,
    );
    fails_at(
        "\nevents;\n",
        "directive \"events\" has no opening \"{\"",
        2,
    );
    fails_at(
        "events {}\nhttp {\n sendfile on {}\n}\n",
        "directive \"sendfile\" is not terminated by \";\"",
        3,
    );
    fails_at(
        "events {}\nhttp { server { location {} } }\n",
        "invalid number of arguments in \"location\" directive",
        2,
    );
    fails_at(
        "include;\n",
        "invalid number of arguments in \"include\" directive",
        1,
    );
}

#[test]
fn bad_values() {
    let http = |body: &str| format!("events {{}}\nhttp {{\n {body}\n}}\n");
    // Event methods: epoll is the one there is (nginx on Linux refuses the rest).
    for m in ["kqueue", "select", "poll", "bogus"] {
        fails_at(
            &"events {\n use epoll;\n}\nhttp {}\n".replace("epoll", m),
            &format!("invalid event type \"{m}\", vireo uses \"epoll\""),
            2,
        );
    }
    let dir = TempDir::new("cf");
    let err = passes(&dir, "events {\n use epoll;\n}\nhttp {}\n");
    assert!(!err.contains("\"use\""), "{err}");
    fails_at(
        &http("client_max_body_size 1q;"),
        "invalid size \"1q\" in \"client_max_body_size\" directive",
        3,
    );
    fails_at(
        &http("client_max_body_size 1.5m;"),
        "invalid size \"1.5m\" in \"client_max_body_size\" directive",
        3,
    );
    fails_at(
        &http("keepalive_timeout 10x;"),
        "invalid time \"10x\" in \"keepalive_timeout\" directive",
        3,
    );
    fails_at(
        &http("send_timeout -1;"),
        "invalid time \"-1\" in \"send_timeout\" directive",
        3,
    );
    fails_at(
        &http("keepalive_timeout 10s 5x;"),
        "invalid time \"5x\" in \"keepalive_timeout\" directive",
        3,
    );
    fails_at(
        &http("keepalive_timeout 1 2 3;"),
        "invalid number of arguments in \"keepalive_timeout\" directive",
        3,
    );
    fails_at(
        &http("server_tokens maybe;"),
        "invalid value \"maybe\" in \"server_tokens\" directive, it must be \"on\", \"off\" or \"build\"",
        3,
    );
    fails_at(
        &http("sendfile maybe;"),
        "invalid value \"maybe\" in \"sendfile\" directive, it must be \"on\" or \"off\"",
        3,
    );
    fails_at(
        &http("keepalive_requests many;"),
        "invalid number \"many\" in \"keepalive_requests\" directive",
        3,
    );
    fails_at(
        &http("lingering_close sometimes;"),
        "invalid parameter \"sometimes\" in \"lingering_close\" directive",
        3,
    );
    fails_at(
        "worker_processes lots;\n",
        "invalid number \"lots\" in \"worker_processes\" directive",
        1,
    );
    fails_at(
        "events { multi_accept yes; }\n",
        "invalid value \"yes\" in \"multi_accept\" directive, it must be \"on\" or \"off\"",
        1,
    );
    fails_at(
        "error_log stderr loud;\n",
        "invalid parameter \"loud\" in \"error_log\" directive",
        1,
    );
    fails_at(
        "events {}\nhttp { server { location ^^ /a {} } }\n",
        "invalid location modifier \"^^\"",
        2,
    );
}

#[test]
fn bad_listen_values() {
    let srv = |l: &str| format!("events {{}}\nhttp {{\n server {{\n  listen {l};\n }}\n}}\n");
    fails_at(
        &srv("8080 fast"),
        "invalid parameter \"fast\" in \"listen\" directive",
        4,
    );
    fails_at(&srv("8080 backlog=x"), "invalid backlog \"backlog=x\"", 4);
    // The socket options, with nginx's messages.
    for (opt, msg) in [
        ("rcvbuf=lots", "invalid rcvbuf \"rcvbuf=lots\""),
        ("sndbuf=", "invalid sndbuf \"sndbuf=\""),
        ("fastopen=-1", "invalid fastopen \"fastopen=-1\""),
        (
            "ipv6only=yes",
            "invalid parameter \"ipv6only=yes\" in \"listen\" directive",
        ),
        (
            "so_keepalive=maybe",
            "invalid so_keepalive value: \"maybe\"",
        ),
        ("so_keepalive=::", "invalid so_keepalive value: \"::\""),
        (
            "so_keepalive=1:2:3:4",
            "invalid so_keepalive value: \"1:2:3:4\"",
        ),
        (
            "so_keepalive=500ms",
            "invalid so_keepalive value: \"500ms\"",
        ),
        ("so_keepalive=::0", "invalid so_keepalive value: \"::0\""),
        (
            "setfib=1",
            "\"setfib\" of the \"listen\" directive is not available on Linux (FreeBSD only)",
        ),
        (
            "accept_filter=httpready",
            "\"accept_filter\" of the \"listen\" directive is not available on Linux (FreeBSD only)",
        ),
        (
            "ipv6only=on",
            "\"ipv6only\" of the \"listen\" directive applies to IPv6 addresses only, not \"8080\"",
        ),
    ] {
        fails_at(&srv(&format!("8080 {opt}")), msg, 4);
    }
    fails_at(
        &srv("unix:/tmp/v.sock deferred"),
        "\"deferred\" of the \"listen\" directive applies to TCP addresses only, not \"unix:/tmp/v.sock\"",
        4,
    );
    // TLS is made on TCP connections only, never skipped on a unix socket.
    fails_at(
        &srv("unix:/tmp/v.sock ssl"),
        "\"ssl\" of \"listen\" applies to TCP addresses only, not \"unix:/tmp/v.sock\"",
        4,
    );
    // Socket options are given once per address, as in nginx.
    fails_at(
        "events {}\nhttp {\n server { listen 8080 rcvbuf=64k; }\n server { listen 8080 deferred; }\n}\n",
        "duplicate listen options for 0.0.0.0:8080",
        4,
    );
    fails_at(
        &srv("127.0.0.1:70000"),
        "invalid port in \"127.0.0.1:70000\" of the \"listen\" directive",
        4,
    );
    // A bare number is a port, never an IPv4 address written as an integer.
    fails_at(
        &srv("99999"),
        "invalid port in \"99999\" of the \"listen\" directive",
        4,
    );
    fails_at(
        &srv("0"),
        "invalid port in \"0\" of the \"listen\" directive",
        4,
    );
    fails_at(
        &srv("127.0.0.1:0"),
        "invalid port in \"127.0.0.1:0\" of the \"listen\" directive",
        4,
    );
    fails_at(
        &srv("unix:"),
        "no path in the unix domain socket in \"unix:\" of the \"listen\" directive",
        4,
    );
    fails_at(
        &srv("no-such-host.invalid:8080"),
        "host not found in \"no-such-host.invalid:8080\" of the \"listen\" directive",
        4,
    );
}

#[test]
fn duplicates() {
    fails_at(
        "events {}\nhttp {\n sendfile on;\n sendfile off;\n}\n",
        "\"sendfile\" directive is duplicate",
        4,
    );
    fails_at(
        "events {}\nevents {}\n",
        "\"events\" directive is duplicate",
        2,
    );
    fails_at(
        "events {}\nhttp {}\nhttp {}\n",
        "\"http\" directive is duplicate",
        3,
    );
    fails_at(
        "worker_processes 1;\nworker_processes 2;\n",
        "\"worker_processes\" directive is duplicate",
        2,
    );
    fails_at(
        "events {}\nhttp { server {\n location /a {}\n location /a {}\n} }\n",
        "duplicate location \"/a\"",
        4,
    );
    fails_at(
        "events {}\nhttp {\n log_format a x;\n log_format a y;\n}\n",
        "duplicate \"log_format\" name \"a\"",
        4,
    );
    // The same directive at another level is no duplicate: it overrides.
    let dir = TempDir::new("cf");
    passes(
        &dir,
        "events {}\nhttp {\n sendfile on;\n server {\n  sendfile off;\n  location / { sendfile on; }\n }\n}\n",
    );
}

#[test]
fn events_section_is_required() {
    let dir = TempDir::new("cf");
    for conf in ["", "worker_processes 1;\nhttp {}\n"] {
        let out = test_conf(&dir, conf);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).starts_with("vireo: [emerg] no \"events\" section in configuration\n"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn duplicate_default_server() {
    let port = free_port();
    fails_at(
        &format!(
            "events {{}}\nhttp {{\n server {{ listen 127.0.0.1:{port} default_server; }}\n server {{\n  listen 127.0.0.1:{port} default_server;\n }}\n}}\n"
        ),
        &format!("a duplicate default server for 127.0.0.1:{port}"),
        5,
    );
    // One default per address: the same port on two addresses is fine.
    let dir = TempDir::new("cf");
    passes(
        &dir,
        &format!(
            "events {{}}\nhttp {{\n server {{ listen 127.0.0.1:{port} default_server; }}\n server {{ listen 127.0.0.2:{port} default_server; }}\n}}\n"
        ),
    );
}

#[test]
fn unterminated_blocks_and_quotes() {
    fails_at(
        "events {}\nhttp {\n server {\n",
        "unexpected end of file, expecting \"}\"",
        4,
    );
    fails_at(
        "events {}\nhttp {\n root \"/var/www;\n}\n",
        "unexpected end of file, expecting \";\" or \"}\"",
        5,
    );
    fails_at(
        "events {}\nhttp {\n root '/var/www\n",
        "unexpected end of file, expecting \";\" or \"}\"",
        4,
    );
    fails_at(
        "events {}\nhttp {\n sendfile on\n",
        "unexpected end of file, expecting \";\" or \"}\"",
        4,
    );
    fails_at("events {}\nhttp {}\n}\n", "unexpected \"}\"", 3);
    fails_at(
        "events {}\nhttp {\n root \"/a\"b;\n}\n",
        "unexpected \"b\"",
        3,
    );
    fails_at("events {}\n;\n", "unexpected \";\"", 2);
}

#[test]
fn regex_compile_failure_is_one_line_with_location() {
    fails_at(
        "events {}\nhttp {\n server {\n  location ~ \"(unclosed\" {}\n }\n}\n",
        "regex \"(unclosed\" compile failed: missing closing parenthesis",
        4,
    );
    fails_at(
        "events {}\nhttp {\n server {\n  server_name ~^(www\\.;\n }\n}\n",
        "regex \"^(www\\.\" compile failed: missing closing parenthesis",
        4,
    );
    // nested location rules are checked too
    fails_at(
        "events {}\nhttp { server {\n location /a {\n  location /b {}\n }\n} }\n",
        "location \"/b\" is outside location \"/a\"",
        4,
    );
}

#[test]
fn bad_server_names() {
    let srv = |n: &str| {
        format!("events {{}}\nhttp {{\n server {{\n  server_name ok.test {n};\n }}\n}}\n")
    };
    for bad in ["www.*.com", "*", "*example.com", "*.a.*", "a*"] {
        fails_at(
            &srv(bad),
            &format!("invalid server name or wildcard \"{bad}\""),
            4,
        );
    }
    fails_at(&srv("~"), "empty regex in server name \"~\"", 4);
    let dir = TempDir::new("cf");
    passes(
        &dir,
        &srv("*.example.com www.example.* .example.org _ \"\" ~^(?<sub>.+)\\.x$"),
    );
}

#[test]
fn duplicate_named_location() {
    fails_at(
        "events {}\nhttp { server {\n location @a {}\n location @a {}\n} }\n",
        "duplicate location \"@a\"",
        4,
    );
}

#[test]
fn daemon_is_a_flag() {
    // `daemon on` itself is tested in tests/workers.rs.
    let dir = TempDir::new("cf");
    passes(&dir, "daemon off;\nevents {}\n");
    passes(&dir, "daemon on;\nevents {}\n");
    fails_at(
        "daemon maybe;\nevents {}\n",
        "invalid value \"maybe\" in \"daemon\" directive, it must be \"on\" or \"off\"",
        1,
    );
}

#[test]
fn missing_include_file() {
    let dir = TempDir::new("cf");
    let out = test_conf(&dir, "events {}\nhttp {\n include missing.conf;\n}\n");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "vireo: [emerg] open() \"{}\" failed (2: No such file or directory) in {}:3\n",
            dir.path().join("missing.conf").display(),
            dir.path().join("t.conf").display()
        )),
        "{err}"
    );
    // A glob that matches nothing is not an error, as in nginx.
    passes(&dir, "events {}\nhttp {\n include nothing/*.conf;\n}\n");
}

#[test]
fn include_glob_relative_to_config_folder() {
    let dir = TempDir::new("cfinc");
    let (p1, p2) = (free_port(), free_port());
    dir.write("html/a/x.txt", "from a");
    dir.write("html/b/x.txt", "from b");
    let conf_dir = dir.path().join("conf");
    dir.write(
        "conf/sites/20-b.conf",
        format!(
            "server {{\n listen 127.0.0.1:{p2};\n root {}/html/b;\n}}\n",
            dir.path().display()
        ),
    );
    dir.write(
        "conf/sites/10-a.conf",
        format!(
            "server {{\n listen 127.0.0.1:{p1};\n root {}/html/a;\n}}\n",
            dir.path().display()
        ),
    );
    dir.write("conf/sites/ignored.txt", "garbage that is not included;");
    let main = dir.write(
        "conf/main.conf",
        "events {}\nhttp {\n access_log off;\n include sites/*.conf;\n}\n",
    );
    // Run from another folder with another prefix: the glob is taken from conf/.
    let out = std::process::Command::new(BIN)
        .current_dir("/")
        .args(["-p", &dir.path().display().to_string(), "-T", "-c"])
        .arg(&main)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // -T prints every file read, in order.
    let dump = String::from_utf8_lossy(&out.stdout);
    let a = dump.find(&format!(
        "# configuration file {}:",
        conf_dir.join("sites/10-a.conf").display()
    ));
    let b = dump.find(&format!(
        "# configuration file {}:",
        conf_dir.join("sites/20-b.conf").display()
    ));
    assert!(
        dump.starts_with(&format!(
            "# configuration file {}:\nevents {{}}",
            main.display()
        )),
        "{dump}"
    );
    assert!(a.is_some() && b.is_some() && a < b, "{dump}");
    assert!(!dump.contains("garbage"), "{dump}");

    // And it serves: both included servers listen.
    let mut child = std::process::Command::new(BIN)
        .args(["-p", &dir.path().display().to_string(), "-c"])
        .arg(&main)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let get = |port: u16| -> Option<Resp> {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < end {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                use std::io::Write;
                s.write_all(b"GET /x.txt HTTP/1.0\r\n\r\n").unwrap();
                return Resp::parse(&read_to_close(&mut s));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        None
    };
    let (ra, rb) = (get(p1), get(p2));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(ra.expect("server a").text(), "from a");
    assert_eq!(rb.expect("server b").text(), "from b");
}

#[test]
fn error_in_included_file_names_that_file() {
    let dir = TempDir::new("cf");
    dir.write(
        "inc/srv.conf",
        "server {\n  listen 127.0.0.1:1;\n  frobnicate;\n}\n",
    );
    let out = test_conf(&dir, "events {}\nhttp {\n include inc/*.conf;\n}\n");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains(&format!(
            "unknown directive \"frobnicate\" in {}:3\n",
            dir.path().join("inc/srv.conf").display()
        )),
        "{err}"
    );
}

#[test]
fn ignored_nginx_directives_give_notices() {
    let dir = TempDir::new("cf");
    let err = passes(
        &dir,
        "master_process on;\nevents {\n use epoll;\n accept_mutex off;\n}\nhttp {\n \
         client_body_temp_path /tmp/b 1 2;\n proxy_temp_path /tmp/p;\n types_hash_max_size 2048;\n output_buffers 2 32k;\n \
         postpone_output 1460;\n server_names_hash_bucket_size 64;\n proxy_max_temp_file_size 0;\n \
         fastcgi_temp_file_write_size 16k;\n connection_pool_size 512;\n \
         request_pool_size 4k;\n log_subrequest on;\n types_hash_bucket_size 64;\n}\n",
    );
    let conf = dir.path().join("t.conf");
    for (name, line) in [
        ("master_process", 1),
        ("accept_mutex", 4),
        ("proxy_temp_path", 8),
        ("types_hash_max_size", 9),
        ("output_buffers", 10),
        ("postpone_output", 11),
        ("server_names_hash_bucket_size", 12),
        ("proxy_max_temp_file_size", 13),
        ("fastcgi_temp_file_write_size", 14),
        ("connection_pool_size", 15),
        ("request_pool_size", 16),
        ("types_hash_bucket_size", 18),
    ] {
        let want = format!("vireo: [notice] \"{name}\" directive is ignored");
        let at = format!(" in {}:{line}\n", conf.display());
        assert!(
            err.lines()
                .any(|l| l.starts_with(&want) && format!("{l}\n").ends_with(&at)),
            "no notice for {name} at line {line}:\n{err}"
        );
    }
    // log_subrequest is a real directive now: no notice.
    assert!(
        !err.contains("\"log_subrequest\" directive is ignored"),
        "{err}"
    );
    // They still check their context and arity.
    fails_at(
        "events { postpone_output 0; }\n",
        "\"postpone_output\" directive is not allowed here",
        1,
    );
    fails_at(
        "events {}\nhttp { postpone_output; }\n",
        "invalid number of arguments in \"postpone_output\" directive",
        2,
    );
}

#[test]
fn error_log_at_http_level_is_accepted() {
    // nginx allows error_log in http, server and location, several at a level.
    let dir = TempDir::new("cf");
    let err = passes(
        &dir,
        "events {}\nhttp {\n error_log logs/http-error.log warn;\n server { error_log stderr; error_log logs/s.log; }\n}\n",
    );
    assert!(!err.contains("\"error_log\" directive is ignored"), "{err}");
    assert!(dir.path().join("logs/http-error.log").exists());
    fails_at(
        "events {}\nhttp {\n error_log stderr loud;\n}\n",
        "invalid parameter \"loud\" in \"error_log\" directive",
        3,
    );
    fails_at(
        "error_log syslog:server=127.0.0.1,facility=nope warn;\n",
        "unknown syslog facility \"nope\"",
        1,
    );
    fails_at(
        "error_log memory:32m debug;\n",
        "error_log to \"memory:\" is not supported: use a file, stderr or syslog",
        1,
    );
}

#[test]
fn unopenable_error_log_fails_the_test() {
    let dir = TempDir::new("cf");
    let out = test_conf(&dir, "error_log /nonexistent-vireo-dir/e.log;\nevents {}\n");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "open() \"/nonexistent-vireo-dir/e.log\" failed (2: No such file or directory)"
        ),
        "{err}"
    );
}

#[test]
fn unopenable_default_access_log_message() {
    // No logs/ folder under the prefix and no access_log: it is made.
    let dir = TempDir::new("cf");
    let out = test_conf(&dir, "events {}\nhttp {}\n");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(dir.path().join("logs/access.log").is_file());
    // A `logs` that is a file: the default log cannot open, and says so.
    let dir = TempDir::new("cf");
    dir.write("logs", "not a folder");
    let out = test_conf(&dir, "events {}\nhttp {}\n");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "open() \"{}\" failed (20: Not a directory) for the default access log",
            dir.path().join("logs/access.log").display()
        )),
        "{err}"
    );
}

/// The seed tuning configuration (bench peers' nginx.conf) minus the upstream,
/// proxy and FastCGI parts (the system mime.types include stays where it exists).
const SEED: &str = r#"worker_processes 1;
worker_rlimit_nofile 20000;
pid @DIR@/nginx.pid;
error_log @DIR@/nginx-error.log crit;
daemon off;
events { worker_connections 19000; use epoll; multi_accept on; }
http {
  include /etc/nginx/mime.types;
  access_log off;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_timeout 30; keepalive_requests 100000;
  open_file_cache max=200000 inactive=20s; open_file_cache_valid 30s;
  open_file_cache_min_uses 2; open_file_cache_errors on;
  client_body_temp_path @DIR@/body; proxy_temp_path @DIR@/proxy;
  fastcgi_temp_path @DIR@/fcgi; uwsgi_temp_path @DIR@/uwsgi; scgi_temp_path @DIR@/scgi;
  upstream be { server @UPSTREAM@; keepalive 64; }
  server {
    listen 127.0.0.1:@PORT@ reuseport backlog=4096;
    root @ROOT@;
    location /proxy/ { proxy_pass http://be/; proxy_http_version 1.1; proxy_set_header Connection ""; }
    location ~ \.php$ {
      fastcgi_pass @FPM@;
      include /etc/nginx/fastcgi_params;
      fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
    }
  }
}
"#;

/// Is nginx's mime.types installed (the seed includes it)?
fn system_mime_types() -> bool {
    std::path::Path::new("/etc/nginx/mime.types").exists()
}

/// Drop the lines (and blocks they open) that use upstreams, proxying or
/// FastCGI, and the system mime.types include where there is none.
fn strip_seed(text: &str) -> String {
    let mut out = String::new();
    let mut skip = 0i32;
    let depth = |l: &str| l.matches('{').count() as i32 - l.matches('}').count() as i32;
    for l in text.lines() {
        if skip > 0 {
            skip += depth(l);
            continue;
        }
        let t = l.trim_start();
        if t.starts_with("upstream ")
            || t.starts_with("location /proxy/")
            || t.starts_with("location ~ \\.php$")
            || (t.starts_with("include /etc/nginx/mime.types") && !system_mime_types())
        {
            skip = depth(l);
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[test]
fn seed_tuning_configuration_runs_unchanged() {
    // Prefer the live copy when this checkout has it.
    let text = std::fs::read_to_string("/work/shared/peers/nginx.conf")
        .unwrap_or_else(|_| SEED.to_string());
    let dir = TempDir::new("seed");
    dir.write("root/hello.txt", "hello seed\n");
    dir.write("root/big.bin", vec![b'z'; 200_000]);
    dir.write("root/app.js", "let a;\n");
    dir.write("root/mod.mjs", "export {};\n");
    let conf = strip_seed(&text)
        .replace("@DIR@", &dir.path().display().to_string())
        .replace("@ROOT@", &dir.path().join("root").display().to_string())
        .replace("@PORT@", "{port}");
    assert!(
        !conf.contains("proxy_pass")
            && !conf.contains("fastcgi_pass")
            && !conf.contains("upstream")
    );
    let v = Vireo::start_in(dir, &conf);
    assert!(v.dir.path().join("nginx.pid").exists());
    for _ in 0..3 {
        let r = v.get("/hello.txt");
        assert_eq!(r.status, 200, "{}", v.dir.read("nginx-error.log"));
        assert_eq!(r.text(), "hello seed\n");
        assert_eq!(r.header("content-type"), Some("text/plain"));
        let r = v.get("/big.bin");
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 200_000);
    }
    assert_eq!(v.get("/nope").status, 404);
    // nginx's own mime.types, included as the seed does, replaces the
    // embedded table: it has no .mjs (vireo's table maps it to
    // application/javascript), so .mjs gets the default type.
    if system_mime_types() {
        let r = v.get("/app.js");
        assert_eq!(r.header("content-type"), Some("application/javascript"));
        let r = v.get("/mod.mjs");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("text/plain"));
    }
}

#[test]
fn mime_types_file_with_types_block() {
    let dir = TempDir::new("mime");
    dir.write(
        "mime.types",
        "\ntypes {\n    text/html                             html htm shtml;\n    \
         text/css                              css;\n    application/x-vireo-test              vtest vt2;\n    \
         image/png                             png;\n}\n",
    );
    dir.write("html/a.vtest", "v");
    dir.write("html/b.VT2", "v");
    dir.write("html/c.css", "c");
    dir.write("html/d.txt", "d");
    dir.write("html/e.json", "{}");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n    include {dir}/mime.types;\n    default_type application/octet-stream;\n    \
         access_log off;\n    server {\n        listen 127.0.0.1:{port};\n        root {dir}/html;\n    }\n}\n",
    );
    assert_eq!(
        v.get("/a.vtest").header("content-type"),
        Some("application/x-vireo-test")
    );
    assert_eq!(
        v.get("/b.VT2").header("content-type"),
        Some("application/x-vireo-test")
    );
    assert_eq!(v.get("/c.css").header("content-type"), Some("text/css"));
    // The included table replaces the built-in one: unknown types get default_type.
    assert_eq!(
        v.get("/d.txt").header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(
        v.get("/e.json").header("content-type"),
        Some("application/octet-stream")
    );
}

#[test]
fn relative_include_of_mime_types_next_to_config() {
    let dir = TempDir::new("cf");
    dir.write("mime.types", "types {\n text/html html;\n}\n");
    passes(&dir, "events {}\nhttp {\n include mime.types;\n}\n");
    dir.write("bad.types", "types {\n text/html;\n}\n");
    let out = test_conf(&dir, "events {}\nhttp {\n include bad.types;\n}\n");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains(&format!(
            "invalid types entry \"text/html\" in {}:2",
            dir.path().join("bad.types").display()
        )),
        "{err}"
    );
}

const VHOSTS: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        server_name first.test;
        root {dir}/first;
    }
    server {
        listen 127.0.0.1:{port} default_server;
        server_name dflt.test;
        root {dir}/dflt;
    }
    server {
        listen 127.0.0.1:{port};
        server_name exact.test www.exact.test;
        root {dir}/exact;
    }
    server {
        listen 127.0.0.1:{port};
        server_name *.wild.test;
        root {dir}/lead;
    }
    server {
        listen 127.0.0.1:{port};
        server_name mail.*;
        root {dir}/trail;
    }
    server {
        listen 127.0.0.1:{port};
        server_name ~^api-(\\d+)\\.re\\.test$;
        root {dir}/regex;
    }
    server {
        listen 127.0.0.1:{port};
        server_name \"~^\\D+\\.NoDigits\\.test$\";
        root {dir}/nodigits;
    }
}
";

#[test]
fn server_name_selection() {
    let dir = TempDir::new("vh");
    for d in [
        "first", "dflt", "exact", "lead", "trail", "regex", "nodigits",
    ] {
        dir.write(&format!("{d}/who"), d);
    }
    let v = Vireo::start_in(dir, VHOSTS);
    let who = |host: &str| {
        let req = format!("GET /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let raw = v.raw(req.as_bytes());
        let r = Resp::parse(&raw).unwrap_or_else(|| {
            panic!(
                "no response for Host {host}: {:?}\n{}",
                String::from_utf8_lossy(&raw),
                v.stderr()
            )
        });
        assert_eq!(r.status, 200, "{host}");
        r.text()
    };
    assert_eq!(who("exact.test"), "exact");
    assert_eq!(who("www.exact.test"), "exact");
    assert_eq!(who("first.test"), "first");
    assert_eq!(who("a.wild.test"), "lead");
    assert_eq!(who("a.b.wild.test"), "lead");
    // "*.wild.test" does not match "wild.test" itself.
    assert_eq!(who("wild.test"), "dflt");
    assert_eq!(who("mail.example.org"), "trail");
    assert_eq!(who("api-42.re.test"), "regex");
    assert_eq!(who("api-x.re.test"), "dflt");
    // Regex names match caselessly but keep their escapes: `\D` is not `\d`.
    assert_eq!(who("abc.nodigits.test"), "nodigits");
    assert_eq!(who("ABC.NODIGITS.TEST"), "nodigits");
    assert_eq!(who("123.nodigits.test"), "dflt");
    assert_eq!(who("unknown.test"), "dflt");
    // Port and case do not matter; a trailing dot neither.
    assert_eq!(who("EXACT.Test:8080"), "exact");
    assert_eq!(who("exact.test."), "exact");
    assert_eq!(who("A.WILD.TEST"), "lead");
    // HTTP/1.0 without Host goes to the default server.
    let r = Resp::parse(&v.raw(b"GET /who HTTP/1.0\r\n\r\n")).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "dflt");
    // Host in the absolute request target wins over the header.
    let r = v.request(
        "GET http://exact.test/who HTTP/1.1\r\nHost: first.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.text(), "exact");
}

#[test]
fn first_server_is_default_without_default_server() {
    let dir = TempDir::new("vh");
    dir.write("a/who", "a");
    dir.write("b/who", "b");
    let v = Vireo::start_in(
        dir,
        "events {}\nhttp {\n access_log off;\n server { listen 127.0.0.1:{port}; server_name a.test; root {dir}/a; }\n \
         server { listen 127.0.0.1:{port}; server_name b.test; root {dir}/b; }\n}\n",
    );
    let who = |host: &str| {
        v.request(&format!(
            "GET /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ))
        .text()
    };
    assert_eq!(who("b.test"), "b");
    assert_eq!(who("zzz"), "a");
    assert_eq!(
        Resp::parse(&v.raw(b"GET /who HTTP/1.0\r\n\r\n"))
            .unwrap()
            .text(),
        "a"
    );
}

/// Core settings inherit http → server → location (nested too) as in nginx: a
/// level that sets a value overrides it for everything below, wherever in the
/// block the directive stands; a level that does not inherits it.
#[test]
fn core_settings_inherit_http_server_location() {
    let dir = TempDir::new("inh");
    for (f, body) in [
        ("h/a/f", "http root"),
        ("h/a/x.unknown", "http root"),
        ("h/t/x.unknown", "http root"),
        ("l/s/f", "location root"),
        ("s/a/f", "server root"),
        ("s/n/f", "server root"),
        ("s/n/deep/f", "server root"),
        ("s/late/f", "late server root"),
    ] {
        dir.write(f, body);
    }
    let v = Vireo::start_in(
        dir,
        "events {}
http {
    access_log off;
    root {dir}/h;
    default_type text/x-http;
    etag off;
    server_tokens off;
    server {
        listen 127.0.0.1:{port};
        location /a/ { }
        location /s/ { root {dir}/l; etag on; }
        location /t/ { default_type text/x-loc; }
    }
    server {
        listen 127.0.0.1:{port2};
        location /a/ { }
        location /n/ {
            etag on;
            location /n/deep/ { }
        }
        root {dir}/s;
        server_tokens on;
    }
}
",
    );
    let port2 = {
        let conf = v.dir.read("vireo.conf");
        let at = conf.rfind("127.0.0.1:").unwrap() + "127.0.0.1:".len();
        conf[at..]
            .split(';')
            .next()
            .unwrap()
            .parse::<u16>()
            .unwrap()
    };
    let get = |port: u16, path: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        std::io::Write::write_all(
            &mut s,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        Resp::parse(&read_to_close(&mut s)).expect("a response")
    };
    // First server: everything from http, except what its locations set.
    let r = get(v.port, "/a/f");
    assert_eq!(r.text(), "http root");
    assert_eq!(r.header("etag"), None);
    assert_eq!(r.header("server"), Some("vireo"));
    let r = get(v.port, "/s/f");
    assert_eq!(r.text(), "location root");
    assert!(r.header("etag").is_some(), "{}", r.head);
    assert_eq!(
        get(v.port, "/a/x.unknown").header("content-type"),
        Some("text/x-http")
    );
    assert_eq!(
        get(v.port, "/t/x.unknown").header("content-type"),
        Some("text/x-loc")
    );
    // Second server: its root and server_tokens, set after its locations,
    // reach them; a nested location inherits from the one around it.
    let r = get(port2, "/a/f");
    assert_eq!(r.text(), "server root");
    assert!(
        r.header("server").unwrap().starts_with("vireo/"),
        "{}",
        r.head
    );
    assert_eq!(r.header("etag"), None);
    let r = get(port2, "/n/deep/f");
    assert_eq!(r.text(), "server root");
    assert!(r.header("etag").is_some(), "{}", r.head);
    assert_eq!(get(port2, "/late/f").text(), "late server root");
}

#[test]
fn debug_connection_takes_addresses_networks_and_unix() {
    let dir = TempDir::new("cf");
    let err = passes(
        &dir,
        "events {\n debug_connection 192.168.1.0/24;\n debug_connection ::1;\n debug_connection unix:;\n}\nhttp {\n}\n",
    );
    assert!(!err.contains("debug_connection"), "{err}");
    fails_at(
        "events {\n debug_connection 10.0.0.0/33;\n}\n",
        "invalid parameter \"10.0.0.0/33\" in \"debug_connection\" directive",
        2,
    );
}

#[test]
fn upstream_zone_resolver_and_addresses_with_variables() {
    let http = |body: &str| format!("events {{}}\nhttp {{\n{body}\n}}\n");
    fails_at(
        &http("upstream a {\n    zone z;\n    server 127.0.0.1:1;\n}"),
        "zero size shared memory zone \"z\"",
        4,
    );
    fails_at(
        &http("upstream a {\n    zone z 1k;\n    server 127.0.0.1:1;\n}"),
        "zone \"z\" is too small",
        4,
    );
    fails_at(
        &http("resolver 127.0.0.1 ipv6=maybe;"),
        "invalid parameter \"ipv6=maybe\" in \"resolver\" directive",
        3,
    );
    fails_at(
        &http("resolver valid=5s;"),
        "invalid number of arguments in \"resolver\" directive",
        3,
    );
    fails_at(
        &http("resolver 127.0.0.1;\nresolver 127.0.0.2;"),
        "\"resolver\" directive is duplicate",
        4,
    );
    fails_at(
        &http("server {\n    location / { proxy_pass http://$nosuch; }\n}"),
        "unknown \"nosuch\" variable",
        4,
    );
    let dir = TempDir::new("cf");
    passes(
        &dir,
        &http(
            "upstream a {
    zone z 64k;
    server 127.0.0.1:1;
    keepalive 2;
    keepalive_time 10m;
}
upstream b {
    zone z;
    server 127.0.0.1:2;
}
resolver 127.0.0.1 [::1]:5353 valid=30s ipv6=off status_zone=dns;
resolver_timeout 5s;
server {
    listen 127.0.0.1:1;
    location /p { proxy_pass http://$host:8080/x; }
    location /f { fastcgi_pass $arg_b; }
    location ~ ^/r { proxy_pass http://$arg_u; }
}",
        ),
    );
}
