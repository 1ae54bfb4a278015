//! scgi_pass against a real SCGI application: a Perl daemon built on
//! Debian's SCGI module (libscgi-perl, the one nginx's own tests use),
//! started by each test on a free port or a unix socket. Skips (with a
//! message) only when the module is missing.

mod common;
use common::app::{App, check_big, check_posts, env_lines};
use common::*;

/// Serves on ARGV[0] (a port, or a unix socket's path): `/big?mb=N` N MB,
/// `/s404` a CGI head with `Status: 404`, `/created` an HTTP status line,
/// anything else its environment and its body's length and MD5.
const DAEMON: &str = r#"
use strict; use warnings;
use SCGI; use IO::Socket::INET; use IO::Socket::UNIX; use Digest::MD5 qw(md5_hex);
$SIG{PIPE} = 'IGNORE';
my $at = shift;
my $server = $at =~ /^\d+$/
    ? IO::Socket::INET->new(LocalHost => "127.0.0.1:$at", Listen => 16, Reuse => 1)
    : IO::Socket::UNIX->new(Local => $at, Listen => 16);
die "listen: $!" unless $server;
my $scgi = SCGI->new($server, blocking => 1);
while (my $r = $scgi->accept) {
    eval { $r->read_env };
    next if $@;
    my $env = $r->env;
    my $c = $r->connection;
    my $body = '';
    my $want = $env->{CONTENT_LENGTH} || 0;
    while (length($body) < $want) {
        my $n = read($c, $body, $want - length($body), length($body));
        last unless $n;
    }
    my $path = $env->{PATH_INFO} || '';
    if ($path eq '/big') {
        my ($mb) = ($env->{QUERY_STRING} || '') =~ /mb=(\d+)/;
        print $c "Content-Type: application/octet-stream\r\n\r\n";
        print $c 'x' x 65536 for 1 .. ($mb || 1) * 16;
    } elsif ($path eq '/s404') {
        print $c "Status: 404 Nothing Here\r\nContent-Type: text/plain\r\nX-Why: gone\r\n\r\nno such thing";
    } elsif ($path eq '/created') {
        print $c "HTTP/1.1 201 Created\r\nContent-Type: text/plain\r\nLocation: http://example.test/new\r\n\r\nmade";
    } else {
        print $c "Content-Type: text/plain\r\n\r\n";
        print $c "$_=$env->{$_}\n" for sort keys %$env;
        print $c "BODY=" . length($body) . " " . md5_hex($body) . "\n";
    }
    $c->close;
}
"#;

fn daemon(dir: &TempDir, at: &str, ready: impl FnMut() -> bool) -> Option<App> {
    let has_module = std::process::Command::new("perl")
        .args(["-MSCGI", "-e1"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_module {
        eprintln!("SKIP: Perl's SCGI module is missing (apt-get install libscgi-perl)");
        return None;
    }
    let script = dir.write("scgi.pl", DAEMON);
    App::start(
        &["perl", script.to_str().unwrap(), at],
        "apt-get install perl",
        ready,
    )
}

fn tcp_daemon(dir: &TempDir) -> Option<(App, u16)> {
    let port = free_port();
    let app = daemon(dir, &port.to_string(), App::tcp(port))?;
    Some((app, port))
}

fn conf(pass: &str, extra: &str) -> String {
    format!(
        r#"events {{}}
error_log {{dir}}/logs/error.log info;
http {{
  client_max_body_size 64m;
  server {{
    listen 127.0.0.1:{{port}};
    server_name scgi.test;
    location / {{
      scgi_param REQUEST_METHOD $request_method;
      scgi_param QUERY_STRING $query_string;
      scgi_param PATH_INFO $uri;
      scgi_param SERVER_NAME $server_name;
      scgi_param X_CUSTOM "made by $request_method";
      scgi_param X_EMPTY $arg_none if_not_empty;
      scgi_pass {pass};
      {extra}
    }}
  }}
}}
"#
    )
}

#[test]
fn get_sends_headers_in_order() {
    let dir = TempDir::new("scgi");
    let Some((_app, port)) = tcp_daemon(&dir) else {
        return;
    };
    let v = Vireo::start(&conf(&format!("127.0.0.1:{port}"), ""));
    let r = v.request(
        "GET /hello?a=1 HTTP/1.1\r\nHost: example.test\r\nX-Thing: t1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let env = env_lines(&r);
    for want in [
        "CONTENT_LENGTH=0",
        "SCGI=1",
        "REQUEST_METHOD=GET",
        "QUERY_STRING=a=1",
        "PATH_INFO=/hello",
        "SERVER_NAME=scgi.test",
        "HTTP_HOST=example.test",
        "HTTP_X_THING=t1",
        "X_CUSTOM=made by GET",
    ] {
        assert!(env.contains(&want.to_string()), "{want} in {env:?}");
    }
    assert!(!env.iter().any(|l| l.starts_with("X_EMPTY=")), "{env:?}");
}

#[test]
fn post_body_buffered_and_streamed() {
    let dir = TempDir::new("scgi");
    let Some((_app, port)) = tcp_daemon(&dir) else {
        return;
    };
    let pass = format!("127.0.0.1:{port}");
    check_posts(
        |extra| Vireo::start(&conf(&pass, extra)),
        "scgi_request_buffering off;",
    );
}

#[test]
fn large_response_streams() {
    let dir = TempDir::new("scgi");
    let Some((_app, port)) = tcp_daemon(&dir) else {
        return;
    };
    check_big(&Vireo::start(&conf(&format!("127.0.0.1:{port}"), "")), 16);
}

#[test]
fn cgi_status_and_http_status_line() {
    let dir = TempDir::new("scgi");
    let Some((_app, port)) = tcp_daemon(&dir) else {
        return;
    };
    let v = Vireo::start(&conf(&format!("127.0.0.1:{port}"), ""));
    let r = v.get("/s404");
    assert_eq!(r.status, 404);
    assert!(
        r.head.starts_with("HTTP/1.1 404 Nothing Here\r\n"),
        "{}",
        r.head
    );
    assert_eq!(r.header("X-Why"), Some("gone"));
    assert_eq!(r.text(), "no such thing");
    let r = v.get("/created");
    assert_eq!(r.status, 201);
    assert_eq!(r.header("Location"), Some("http://example.test/new"));
    assert_eq!(r.text(), "made");
}

#[test]
fn dead_backend_is_502() {
    let dead = closed_port();
    let v = Vireo::start(&conf(&format!("127.0.0.1:{dead}"), ""));
    assert_eq!(v.get("/").status, 502);
    let want = format!(
        "while connecting to upstream, client: 127.0.0.1, server: scgi.test, request: \"GET / HTTP/1.1\", upstream: \"scgi://127.0.0.1:{dead}\""
    );
    assert!(
        eventually(5, || error_log(&v).contains(&want)),
        "{want} in {}",
        error_log(&v)
    );
}

#[test]
fn unix_socket() {
    let dir = TempDir::new("scgi");
    let sock = dir.path().join("scgi.sock");
    let Some(_app) = daemon(&dir, sock.to_str().unwrap(), App::unix(sock.clone())) else {
        return;
    };
    let v = Vireo::start(&conf(&format!("unix:{}", sock.display()), ""));
    let r = v.get("/u?x=1");
    assert_eq!(r.status, 200);
    assert!(env_lines(&r).contains(&"QUERY_STRING=x=1".to_string()));
}

#[test]
fn config_errors_name_file_and_line() {
    let dir = TempDir::new("scgi");
    assert_conf_errors(
        &dir,
        &[
            (
                "location / { scgi_pass uwsgi://127.0.0.1:1; }",
                "invalid URL prefix \"uwsgi://\" in \"scgi_pass\"",
            ),
            (
                "location / { scgi_modifier1 1; }",
                "unknown directive \"scgi_modifier1\"",
            ),
            (
                "location / { scgi_buffers 0 4k; }",
                "invalid parameter \"0\" in \"scgi_buffers\" directive",
            ),
        ],
    );
}

#[test]
fn replies_are_cached() {
    let dir = TempDir::new("scgi");
    let Some((_app, port)) = tcp_daemon(&dir) else {
        return;
    };
    let v = Vireo::start(
        &conf(
            &format!("127.0.0.1:{port}"),
            "scgi_cache one; scgi_cache_key $uri; scgi_cache_valid 200 1m; add_header X-Cache $upstream_cache_status;",
        )
        .replace(
            "  server {",
            "  scgi_cache_path {dir}/cache keys_zone=one:1m;\n  server {",
        ),
    );
    let first = v.get("/c?n=1");
    assert_eq!(first.header("X-Cache"), Some("MISS"));
    let second = v.get("/c?n=2");
    assert_eq!(second.header("X-Cache"), Some("HIT"));
    assert_eq!(first.body, second.body);
}
