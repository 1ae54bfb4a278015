//! random_index: a directory request served a random regular file of it.

mod common;
use common::*;
use std::collections::HashSet;

#[test]
fn picks_regular_files_at_random() {
    let v = Vireo::start(
        "events {}\nhttp {\n access_log off;\n server {\n  listen 127.0.0.1:{port};\n  root {dir}/html;\n  location / {\n   random_index on;\n  }\n  location /plain/ { }\n }\n}\n",
    );
    v.dir.write("html/r/a.txt", "A");
    v.dir.write("html/r/b.txt", "B");
    v.dir.write("html/r/.hidden", "H");
    v.dir.write("html/r/sub/x", "X");
    v.dir.write("html/target", "L");
    let d = v.dir.path().join("html");
    std::os::unix::fs::symlink(d.join("target"), d.join("r/link")).unwrap();
    std::os::unix::fs::symlink(d.join("r/sub"), d.join("r/dirlink")).unwrap();
    v.dir.write("html/empty/.only-hidden", "H");
    v.dir.write("html/plain/index.html", "I");
    let mut seen = HashSet::new();
    for _ in 0..60 {
        let r = v.get("/r/");
        assert_eq!(r.status, 200);
        seen.insert(r.text());
    }
    let want: HashSet<String> = ["A", "B", "L"].iter().map(|s| s.to_string()).collect();
    assert_eq!(seen, want);
    // A directory without a file is left to index (none here: 403).
    assert_eq!(v.get("/empty/").status, 403);
    assert_eq!(v.get("/missing/").status, 404);
    // Not a directory request, or not on: as usual.
    assert_eq!(v.get("/r/a.txt").text(), "A");
    assert_eq!(v.get("/plain/").text(), "I");
}
