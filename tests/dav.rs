//! WebDAV: PUT, DELETE, MKCOL, COPY and MOVE on real files, nginx's answers
//! and refusals, and the static files still served for other methods.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;

const CONF: &str = r#"
events {}
http {
    access_log off;
    absolute_redirect off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location / {
            dav_methods PUT DELETE MKCOL COPY MOVE;
            dav_access user:rw group:r all:r;
        }
        location /full/ {
            dav_methods PUT;
            create_full_put_path on;
        }
        location /deep/ {
            dav_methods DELETE;
            min_delete_depth 3;
        }
        location /ro/ { }
    }
}
"#;

fn req(v: &Vireo, method: &str, uri: &str, extra: &str, body: &str) -> Resp {
    v.request(&format!(
        "{method} {uri} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    ))
}

#[test]
fn put_get_replace_delete() {
    let v = Vireo::start(CONF);
    v.dir.write("html/.keep", "");
    let r = req(&v, "PUT", "/a%20b.txt", "", "0123456789");
    assert_eq!(r.status, 201);
    assert_eq!(r.header("location"), Some("/a%20b.txt"));
    assert_eq!(v.dir.read("html/a b.txt"), "0123456789");
    let mode = std::fs::metadata(v.dir.path().join("html/a b.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
    assert_eq!(v.get("/a%20b.txt").text(), "0123456789");
    let r = req(&v, "PUT", "/a%20b.txt", "", "new");
    assert_eq!((r.status, r.header("content-length")), (204, None));
    assert_eq!(v.dir.read("html/a b.txt"), "new");
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(v.dir.path().join("html"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(req(&v, "DELETE", "/a%20b.txt", "", "").status, 204);
    assert_eq!(req(&v, "DELETE", "/a%20b.txt", "", "").status, 404);
    // PUT to a collection, with a range, over a folder, without the parent.
    assert_eq!(req(&v, "PUT", "/dir/", "", "x").status, 409);
    assert_eq!(
        req(&v, "PUT", "/r", "Content-Range: bytes 0-0/2\r\n", "x").status,
        501
    );
    v.dir.write("html/folder/x", "x");
    assert_eq!(req(&v, "PUT", "/folder", "", "x").status, 409);
    assert_eq!(req(&v, "PUT", "/no/parent", "", "x").status, 409);
    assert_eq!(req(&v, "PUT", "/full/a/b/c", "", "deep").status, 201);
    assert_eq!(v.dir.read("html/full/a/b/c"), "deep");
    // Not on here: the static files answer (405 for PUT).
    assert_eq!(req(&v, "PUT", "/ro/x", "", "x").status, 405);
}

#[test]
fn collections() {
    let v = Vireo::start(CONF);
    v.dir.write("html/.keep", "");
    assert_eq!(req(&v, "MKCOL", "/c", "", "").status, 409);
    let r = req(&v, "MKCOL", "/c/", "", "");
    assert_eq!((r.status, r.header("location")), (201, Some("/c/")));
    let mode = std::fs::metadata(v.dir.path().join("html/c"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert_eq!(req(&v, "MKCOL", "/c/", "", "").status, 405);
    assert_eq!(req(&v, "MKCOL", "/x/y/", "", "").status, 409);
    assert_eq!(req(&v, "MKCOL", "/d/", "", "body").status, 415);
    v.dir.write("html/c/sub/f", "F");
    assert_eq!(req(&v, "DELETE", "/c", "", "").status, 409);
    assert_eq!(req(&v, "DELETE", "/c/", "Depth: 1\r\n", "").status, 400);
    assert_eq!(req(&v, "DELETE", "/c/", "", "").status, 204);
    assert!(!v.dir.path().join("html/c").exists());
    v.dir.write("html/deep/a/b", "B");
    assert_eq!(req(&v, "DELETE", "/deep/a", "", "").status, 409);
    assert_eq!(req(&v, "DELETE", "/deep/a/b", "", "").status, 204);
}

#[test]
fn copy_and_move() {
    let v = Vireo::start(CONF);
    v.dir.write("html/src", "SRC");
    v.dir.write("html/old", "OLD");
    v.dir.write("html/tree/a", "A");
    v.dir.write("html/tree/s/b", "B");
    let copy = |from: &str, to: &str, extra: &str| {
        req(
            &v,
            "COPY",
            from,
            &format!("Destination: {to}\r\n{extra}"),
            "",
        )
        .status
    };
    assert_eq!(copy("/src", "/dst%20x", ""), 204);
    assert_eq!(v.dir.read("html/dst x"), "SRC");
    assert_eq!(copy("/src", "http://localhost/full", ""), 204);
    assert_eq!(copy("/src", "http://other/full", ""), 400);
    assert_eq!(copy("/src", "ftp://localhost/full", ""), 400);
    assert_eq!(copy("/src", "http://localhost", ""), 400);
    assert_eq!(copy("/src", "/old", "Overwrite: F\r\n"), 412);
    assert_eq!(v.dir.read("html/old"), "OLD");
    assert_eq!(copy("/src", "/old", "Overwrite: T\r\n"), 204);
    assert_eq!(v.dir.read("html/old"), "SRC");
    assert_eq!(copy("/src", "/old", "Overwrite: yes\r\n"), 400);
    assert_eq!(copy("/src", "/x", "Depth: 1\r\n"), 400);
    assert_eq!(copy("/tree/", "/file", ""), 409);
    assert_eq!(copy("/src", "/tree/", ""), 409);
    assert_eq!(copy("/tree/", "/tree2/", ""), 201);
    assert_eq!(v.dir.read("html/tree2/s/b"), "B");
    assert_eq!(copy("/nothing", "/y", ""), 404);
    let r = req(&v, "MOVE", "/tree2/", "Destination: /tree3/\r\n", "");
    assert_eq!(r.status, 201);
    assert!(!v.dir.path().join("html/tree2").exists());
    assert_eq!(v.dir.read("html/tree3/a"), "A");
    assert_eq!(
        req(&v, "MOVE", "/src", "Destination: /moved\r\n", "").status,
        204
    );
    assert_eq!(v.dir.read("html/moved"), "SRC");
    assert_eq!(
        req(&v, "MOVE", "/moved", "Destination: /m2\r\nDepth: 0\r\n", "").status,
        400
    );
    assert_eq!(req(&v, "COPY", "/moved", "", "").status, 400);
}

#[test]
fn bad_directives() {
    let dir = TempDir::new("dav");
    for (line, msg) in [
        (
            "dav_methods GET;",
            "invalid parameter \"GET\" in \"dav_methods\" directive",
        ),
        (
            "dav_access user:x;",
            "invalid parameter \"user:x\" in \"dav_access\" directive",
        ),
        (
            "min_delete_depth x;",
            "invalid number \"x\" in \"min_delete_depth\" directive",
        ),
    ] {
        let text = format!("events {{}}\nhttp {{\nserver {{\n{line}\n}}\n}}\n");
        let out = test_conf(&dir, &text);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{line}: {err}");
        assert!(
            err.contains(msg) && err.contains("t.conf:4"),
            "{line}: want {msg}\n{err}"
        );
    }
}
