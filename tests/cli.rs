//! The command line: -h, -v, -V, -t, -T, -p, -c, -g, invalid options.

mod common;
use common::*;
use std::process::{Command, Output};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn vireo_in(dir: &TempDir, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir.path())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn help_lists_the_options() {
    for flag in ["-h", "-?", "--help"] {
        let o = run(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{flag}");
        let out = text(&o.stdout);
        assert!(out.starts_with("Usage: vireo "), "{out}");
        for opt in [
            "-h",
            "-v",
            "-V",
            "-t",
            "-T",
            "-p prefix",
            "-c file",
            "-g directives",
        ] {
            assert!(
                out.contains(&format!("\n  {opt} ")),
                "{opt} missing from help:\n{out}"
            );
        }
    }
}

#[test]
fn version_flags() {
    let want = format!("nginx version: vireo/{}\n", env!("CARGO_PKG_VERSION"));
    let o = run(&["-v"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(text(&o.stderr), want);
    let o = run(&["-V"]);
    assert_eq!(o.status.code(), Some(0));
    let err = text(&o.stderr);
    assert!(err.starts_with(&want), "{err}");
    let args = err
        .lines()
        .find_map(|l| l.strip_prefix("configure arguments: "))
        .expect(&err);
    // What tools that read `nginx -V` look for: the modules vireo has, and
    // the default ones it lacks.
    for flag in [
        "--with-http_ssl_module",
        "--with-http_v2_module",
        "--without-http_browser_module",
    ] {
        assert!(args.split(' ').any(|a| a == flag), "{flag}: {args}");
    }
    assert!(!args.contains("--without-http_proxy_module"), "{args}");
    assert!(!args.contains("--without-http_ssi_module"), "{args}");
    assert!(!args.contains("--without-http_uwsgi_module"), "{args}");
    assert!(!args.contains("--without-http_scgi_module"), "{args}");
    assert!(!args.contains("--without-http_grpc_module"), "{args}");
    assert!(!args.contains("--without-http_memcached_module"), "{args}");
}

#[test]
fn invalid_options_exit_1_with_usage() {
    for (args, msg) in [
        (&["-x"][..], "vireo: invalid option: \"-x\""),
        (
            &["--frobnicate"][..],
            "vireo: invalid option: \"--frobnicate\"",
        ),
        (&["-c"][..], "vireo: option \"-c\" requires a value"),
        (&["-t", "-p"][..], "vireo: option \"-p\" requires a value"),
        (&["-g"][..], "vireo: option \"-g\" requires a value"),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = text(&o.stderr);
        assert!(err.starts_with(msg), "{args:?}: {err}");
        assert!(err.contains("Usage: vireo"), "{err}");
    }
    // -s is not there yet: say so rather than pretend.
    let o = run(&["-s", "reload"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("\"-s\""), "{}", text(&o.stderr));
}

#[test]
fn test_flag_reports_ok_and_failure() {
    let dir = TempDir::new("cli");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let o = test_conf(&dir, "events {}\nhttp {}\n");
    let conf = dir.path().join("t.conf");
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        text(&o.stderr),
        format!(
            "vireo: the configuration file {0} syntax is ok\nvireo: configuration file {0} test is successful\n",
            conf.display()
        )
    );
    assert!(o.stdout.is_empty());
    let o = test_conf(&dir, "events {}\nhttp {\n nope;\n}\n");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        text(&o.stderr),
        format!(
            "vireo: [emerg] unknown directive \"nope\" in {0}:3\nvireo: configuration file {0} test failed\n",
            conf.display()
        )
    );
    // A missing main file: the message has no location.
    let o = run(&["-t", "-c", "/nonexistent-vireo/x.conf"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).starts_with(
            "vireo: [emerg] open() \"/nonexistent-vireo/x.conf\" failed (2: No such file or directory)\n"
        ),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn quiet_testing_prints_errors_only_and_e_names_the_error_log() {
    // No logs/ folder: the default access log's folder is made.
    let dir = TempDir::new("cliq");
    dir.write("q.conf", "events {}\nhttp { map_hash_max_size 1; }\n");
    let o = vireo_in(&dir, &["-q", "-t", "-p", ".", "-c", "q.conf"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "");
    assert!(dir.path().join("logs").is_dir());
    dir.write("bad.conf", "events {}\nhttp { nope; }\n");
    let o = vireo_in(&dir, &["-q", "-t", "-p", ".", "-c", "bad.conf"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("unknown directive \"nope\""));
    // -e: where the error log goes when the configuration names none.
    let port = free_port();
    dir.write(
        "e.conf",
        format!("events {{}}\nhttp {{ server {{ listen 127.0.0.1:{port}; }} }}\n"),
    );
    let mut child = Command::new(BIN)
        .current_dir(dir.path())
        .args(["-p", ".", "-e", "startup.log", "-c", "e.conf"])
        .spawn()
        .unwrap();
    let log = dir.path().join("startup.log");
    let up = eventually(10, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    // A file that is not there is an error-level line, as in nginx.
    if up {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(&mut s, b"GET /missing HTTP/1.0\r\n\r\n").unwrap();
        read_to_close(&mut s);
    }
    let seen = eventually(10, || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("/missing"))
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen, "nothing in {}", log.display());
}

/// Started without -t, a bad configuration stops vireo with exit 1 and the
/// same file:line message, before it binds anything.
#[test]
fn bad_configuration_stops_the_start_with_file_and_line() {
    let dir = TempDir::new("cli");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let port = free_port();
    for (body, msg, line) in [
        ("nope;", "unknown directive \"nope\"", 3),
        (
            "server { listen 127.0.0.1:PORT; keepalive_timeout x; }",
            "invalid time \"x\" in \"keepalive_timeout\" directive",
            3,
        ),
        (
            "server {\n listen 127.0.0.1:PORT;\n location / { worker_connections 1; }\n}",
            "\"worker_connections\" directive is not allowed here",
            5,
        ),
        (
            "sendfile on off;",
            "invalid number of arguments in \"sendfile\" directive",
            3,
        ),
    ] {
        let text_conf =
            format!("events {{}}\nhttp {{\n{body}\n}}\n").replace("PORT", &port.to_string());
        let conf = dir.write("bad.conf", text_conf);
        let o = run_conf(&dir, &conf);
        assert_eq!(o.status.code(), Some(1), "{body}");
        let err = text(&o.stderr);
        assert!(
            err.starts_with(&format!(
                "vireo: [emerg] {msg} in {}:{line}\n",
                conf.display()
            )),
            "{body}: {err}"
        );
        assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
    }
}

#[test]
fn dump_prints_every_file_read() {
    let dir = TempDir::new("cli");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    dir.write(
        "conf.d/a.conf",
        "# part a\nserver { listen 127.0.0.1:1; }\n",
    );
    dir.write("conf.d/b.conf", "# part b\n");
    let main = "events {}\nhttp {\n include conf.d/*.conf;\n}\n";
    dir.write("main.conf", main);
    let o = vireo_in(&dir, &["-p", ".", "-T", "-c", "main.conf"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let p = |f: &str| dir.path().join(f).display().to_string();
    let want = format!(
        "# configuration file {}:\n{main}\n# configuration file {}:\n# part a\nserver {{ listen 127.0.0.1:1; }}\n\n\
         # configuration file {}:\n# part b\n\n",
        p("main.conf"),
        p("conf.d/a.conf"),
        p("conf.d/b.conf")
    );
    assert_eq!(text(&o.stdout), want);
    assert!(text(&o.stderr).contains("test is successful"));
    // -T of a broken configuration prints nothing and fails.
    dir.write("conf.d/b.conf", "oops\n");
    let o = vireo_in(&dir, &["-p", ".", "-T", "-c", "main.conf"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    assert!(text(&o.stderr).contains(&format!(
        "unexpected end of file, expecting \";\" or \"}}\" in {}:2",
        p("conf.d/b.conf")
    )));
}

#[test]
fn embedded_configuration_tests_and_dumps() {
    let dir = TempDir::new("cli");
    let o = vireo_in(&dir, &["-t"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("configuration file <embedded> test is successful"));
    let o = vireo_in(&dir, &["-T"]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(
        out.starts_with("# configuration file <embedded>:\n"),
        "{out}"
    );
    assert!(
        out.contains("listen 127.0.0.1:8080 default_server;"),
        "{out}"
    );
}

#[test]
fn global_directives_from_the_command_line() {
    let dir = TempDir::new("cli");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let conf = dir.write("t.conf", "events {}\n");
    let c = conf.display().to_string();
    let prefix = dir.path().display().to_string();
    // Applied: an unknown one is reported at the command line.
    let o = run(&[
        "-p",
        &prefix,
        "-t",
        "-c",
        &c,
        "-g",
        "worker_processes 2; pid logs/v.pid;",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let o = run(&[
        "-p",
        &prefix,
        "-t",
        "-c",
        &c,
        "-g",
        "worker_processes 2;\nfrobnicate;",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr)
            .contains("vireo: [emerg] unknown directive \"frobnicate\" in <command line>:2\n"),
        "{}",
        text(&o.stderr)
    );
    let o = run(&["-p", &prefix, "-t", "-c", &c, "-g", "worker_processes 2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr)
            .contains("unexpected end of parameter, expecting \";\" in <command line>:1"),
        "{}",
        text(&o.stderr)
    );
    // Only main-level directives make sense there.
    let o = run(&["-p", &prefix, "-t", "-c", &c, "-g", "sendfile on;"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("\"sendfile\" directive is not allowed here in <command line>:1")
    );
    // A directive both in the file and on the command line is a duplicate.
    dir.write("t.conf", "worker_processes 1;\nevents {}\n");
    let o = run(&["-p", &prefix, "-t", "-c", &c, "-g", "worker_processes 2;"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("\"worker_processes\" directive is duplicate"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn global_directives_take_effect() {
    let dir = TempDir::new("cli");
    dir.write("html/x.txt", "x");
    let port = free_port();
    let conf = dir.write(
        "t.conf",
        format!(
            "events {{}}\nhttp {{\n access_log off;\n server {{ listen 127.0.0.1:{port}; }}\n}}\n"
        ),
    );
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let mut child = Command::new(BIN)
        .args([
            "-p",
            &dir.path().display().to_string(),
            "-c",
            &conf.display().to_string(),
        ])
        .args(["-g", "pid logs/g.pid; error_log logs/g-error.log notice;"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = dir.path().join("logs/g.pid");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut served = None;
    while std::time::Instant::now() < end && served.is_none() {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::Write;
            s.write_all(b"GET /x.txt HTTP/1.0\r\n\r\n").unwrap();
            served = Resp::parse(&read_to_close(&mut s));
        } else {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
    let errlog = std::fs::read_to_string(dir.path().join("logs/g-error.log")).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(served.expect("served").text(), "x");
    assert_eq!(pid, format!("{}\n", child.id()));
    assert!(
        errlog.contains(&format!("listening on 127.0.0.1:{port}")),
        "{errlog}"
    );
    // The product and version, as nginx's first start notice.
    assert!(
        errlog.contains(&format!(
            "[notice] {}#0: vireo/{}\n",
            child.id(),
            env!("CARGO_PKG_VERSION")
        )),
        "{errlog}"
    );
}

#[test]
fn prefix_resolves_relative_paths() {
    // -c, root, access_log and pid relative to -p, whatever the current folder.
    let dir = TempDir::new("cli");
    dir.write("site/x.txt", "prefixed");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    dir.write(
        "conf/v.conf",
        "pid logs/v.pid;\nevents {}\nhttp {\n access_log logs/acc.log;\n server {\n  listen 127.0.0.1:{port};\n  root site;\n }\n}\n",
    );
    let port = free_port();
    let conf = std::fs::read_to_string(dir.path().join("conf/v.conf"))
        .unwrap()
        .replace("{port}", &port.to_string());
    dir.write("conf/v.conf", conf);
    let mut child = Command::new(BIN)
        .current_dir("/")
        .args(["-p", &dir.path().display().to_string(), "-c", "conf/v.conf"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut served = None;
    while std::time::Instant::now() < end && served.is_none() {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::Write;
            s.write_all(b"GET /x.txt HTTP/1.0\r\n\r\n").unwrap();
            served = Resp::parse(&read_to_close(&mut s));
        } else {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let pid_written = dir.path().join("logs/v.pid").exists();
    // SAFETY: our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(served.expect("served").text(), "prefixed");
    assert!(pid_written);
    assert_eq!(st.code(), Some(0));
    assert!(
        dir.read("logs/acc.log")
            .contains("\"GET /x.txt HTTP/1.0\" 200 8 "),
        "{}",
        dir.read("logs/acc.log")
    );
    assert!(
        !dir.path().join("logs/v.pid").exists(),
        "pid file removed on exit"
    );
}

/// `vireo` with no arguments serves the embedded welcome page on
/// 127.0.0.1:8080. The port is fixed: when something else holds it for 30 s,
/// the test says so and passes.
#[test]
fn no_arguments_serve_the_embedded_site_on_8080() {
    const PORT: u16 = 8080;
    if !eventually(30, || {
        std::net::TcpListener::bind(("127.0.0.1", PORT)).is_ok()
    }) {
        eprintln!("127.0.0.1:{PORT} is taken by another program: embedded site not checked");
        return;
    }
    let dir = TempDir::new("cli");
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    let child = Command::new(BIN)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    let up = eventually(10, || listens_on(pid, PORT));
    let answer = up.then(|| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", PORT)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        std::io::Write::write_all(
            &mut s,
            b"GET / HTTP/1.1\r\nHost: localhost:8080\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        Resp::parse(&read_to_close(&mut s)).expect("a response")
    });
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let err = dir.read("stderr.log");
    assert!(up, "not listening on {PORT}: {err}");
    let r = answer.unwrap();
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert!(
        r.text().contains("<h1>Welcome to vireo</h1>"),
        "{}",
        r.text()
    );
    assert_eq!(out.status.code(), Some(0), "{err}");
    // The embedded configuration logs to standard output.
    assert!(
        text(&out.stdout).contains("\"GET / HTTP/1.1\" 200 "),
        "{}",
        text(&out.stdout)
    );
}
