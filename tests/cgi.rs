//! The CGI handler (`cgi`): shell and Python scripts, environment, stdin,
//! status, streaming, timeouts, process kill on client abort, limits.

mod common;
use common::*;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn script(dir: &TempDir, name: &str, text: &str) {
    let p = dir.write(&format!("html/cgi-bin/{name}"), text);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn start() -> Vireo {
    let dir = TempDir::new("cgi");
    script(
        &dir,
        "env.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\nX-Script: sh\\r\\n\\r\\n'\necho \"method=$REQUEST_METHOD query=$QUERY_STRING gw=$GATEWAY_INTERFACE name=$SCRIPT_NAME agent=$HTTP_USER_AGENT custom=$MY_VAR\"\n",
    );
    script(
        &dir,
        "echo.py",
        "#!/usr/bin/env python3\nimport os, sys\nn = int(os.environ.get('CONTENT_LENGTH') or 0)\ndata = sys.stdin.buffer.read(n)\nsys.stdout.write('Status: 201 Created\\r\\nContent-Type: text/plain\\r\\n\\r\\n')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'got %d bytes: ' % len(data) + data[:20])\n",
    );
    script(
        &dir,
        "stream.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\ni=0\nwhile [ $i -lt 1000 ]; do echo line $i; i=$((i+1)); done\n",
    );
    script(
        &dir,
        "forever.sh",
        "#!/bin/sh\necho $$ > \"$DOCUMENT_ROOT/../forever.pid\"\nprintf 'Content-Type: text/plain\\r\\n\\r\\n'\nwhile true; do head -c 65536 /dev/zero; done\n",
    );
    script(
        &dir,
        "slow.sh",
        "#!/bin/sh\nsleep 5\nprintf 'Content-Type: text/plain\\r\\n\\r\\nlate'\n",
    );
    script(
        &dir,
        "bad.sh",
        // stderr first: the malformed head gets the script killed at once.
        "#!/bin/sh\necho oops >&2\necho 'not a header line'\n",
    );
    script(
        &dir,
        "local.sh",
        "#!/bin/sh\nprintf 'Location: /plain.txt\\r\\n\\r\\n'\n",
    );
    dir.write("html/cgi-bin/noexec.sh", "#!/bin/sh\necho hi\n");
    dir.write("html/plain.txt", "plain\n");
    Vireo::start_in(
        dir,
        "events {}\nhttp {\n  server {\n    listen 127.0.0.1:{port};\n    root {dir}/html;\n    location /cgi-bin/ {\n      cgi;\n      cgi_param MY_VAR \"v-$arg_x\";\n      cgi_read_timeout 3s;\n      cgi_max_processes 2;\n    }\n  }\n}\n",
    )
}

#[test]
fn shell_and_python_scripts() {
    let v = start();
    let r = v.request(
        "GET /cgi-bin/env.sh?x=7 HTTP/1.1\r\nHost: h\r\nUser-Agent: tester\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", v.stderr());
    assert_eq!(r.header("x-script"), Some("sh"));
    assert_eq!(
        r.text(),
        "method=GET query=x=7 gw=CGI/1.1 name=/cgi-bin/env.sh agent=tester custom=v-7\n"
    );
    let r = v.request(
        "POST /cgi-bin/echo.py HTTP/1.1\r\nHost: h\r\nConnection: close\r\nContent-Length: 11\r\n\r\nhello world",
    );
    assert_eq!(r.status, 201, "{}", v.stderr());
    assert_eq!(r.text(), "got 11 bytes: hello world");
    // Chunked request body.
    let r = v.request(
        "POST /cgi-bin/echo.py HTTP/1.1\r\nHost: h\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
    );
    assert_eq!(r.text(), "got 5 bytes: abcde");
    let r = v.get("/cgi-bin/stream.sh");
    assert_eq!(r.status, 200);
    assert_eq!(r.text().lines().count(), 1000);
    assert!(r.text().ends_with("line 999\n"));
    // Local Location: internal redirect.
    assert_eq!(v.get("/cgi-bin/local.sh").text(), "plain\n");
}

#[test]
fn errors_timeouts_and_permissions() {
    let v = start();
    assert_eq!(v.get("/cgi-bin/none.sh").status, 404);
    assert_eq!(v.get("/cgi-bin/noexec.sh").status, 403);
    assert_eq!(v.get("/cgi-bin/bad.sh").status, 502);
    assert!(eventually(15, || v.stderr().contains("oops")));
    assert_eq!(v.get("/cgi-bin/slow.sh").status, 504);
}

#[test]
fn client_abort_kills_the_process_and_limits_hold() {
    let v = start();
    let mut s = v.connect();
    s.write_all(b"GET /cgi-bin/forever.sh HTTP/1.1\r\nHost: h\r\n\r\n")
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut got = 0;
    while got < 300_000 {
        got += s.read(&mut buf).unwrap();
    }
    let pid_file = v.dir.path().join("forever.pid");
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    drop(s);
    assert!(
        eventually(5, || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.is_empty() || stat.contains(") Z ")
        }),
        "CGI process {pid} still runs after the client left"
    );
    // Two slow ones fill cgi_max_processes 2: a third is refused.
    let port = v.port;
    let slow: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                s.write_all(
                    b"GET /cgi-bin/slow.sh HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
                )
                .unwrap();
                read_to_close(&mut s)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(v.get("/cgi-bin/env.sh").status, 503);
    for h in slow {
        h.join().unwrap();
    }
    assert_eq!(v.get("/cgi-bin/env.sh").status, 200);
}
