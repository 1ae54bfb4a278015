//! Location matching: `=`, `^~`, longest prefix, regex `~`/`~*` in order,
//! nested locations and the server-level fallback. Every location has its
//! own root holding the same file names, so the body tells which matched.

mod common;
use common::*;

const ROOTS: &[&str] = &[
    "srv",
    "exact",
    "prefix_x",
    "noregex",
    "deeper",
    "re_png",
    "re_jpg",
    "re_first",
    "re_second",
    "nest",
    "nest_css",
    "nest_inner",
    "a",
    "ab",
    "root_exact",
    "re_nest",
    "re_nest_inner",
];

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/srv;

        location = / { root {dir}/root_exact; }
        location = /x.txt { root {dir}/exact; }
        location /x { root {dir}/prefix_x; }

        location ^~ /static/ { root {dir}/noregex; }
        location /static/deep/ { root {dir}/deeper; }

        location /a/ { root {dir}/a; }
        location /a/b/ { root {dir}/ab; }

        location /nest/ {
            root {dir}/nest;
            location ~ \\.css$ { root {dir}/nest_css; }
            location /nest/inner/ { root {dir}/nest_inner; }
        }

        location ~ \\.png$ { root {dir}/re_png; }
        location ~* \\.JPG$ { root {dir}/re_jpg; }
        location ~ /re/ { root {dir}/re_first; }
        location ~ /re/.*\\.txt$ { root {dir}/re_second; }
        location ~ ^/rn/ {
            root {dir}/re_nest;
            location ~ inner { root {dir}/re_nest_inner; }
        }
    }
}";

/// Start with `paths` present under every root; each file holds its root's name.
fn start(paths: &[&str]) -> Vireo {
    let dir = TempDir::new("loc");
    for root in ROOTS {
        for p in paths {
            dir.write(&format!("{root}{p}"), root);
        }
    }
    Vireo::start_in(dir, CONF)
}

fn which(v: &Vireo, path: &str) -> String {
    let r = v.get(path);
    assert_eq!(r.status, 200, "{path}: {}", r.status);
    r.text()
}

#[test]
fn exact_beats_prefix() {
    let v = start(&["/x.txt", "/x.txt2", "/xyz/a.html"]);
    assert_eq!(which(&v, "/x.txt"), "exact");
    assert_eq!(which(&v, "/x.txt2"), "prefix_x");
    assert_eq!(which(&v, "/xyz/a.html"), "prefix_x");
}

#[test]
fn longest_prefix_wins() {
    let v = start(&["/a/c.txt", "/a/b/c.txt", "/a/bc.txt"]);
    assert_eq!(which(&v, "/a/c.txt"), "a");
    assert_eq!(which(&v, "/a/b/c.txt"), "ab");
    assert_eq!(which(&v, "/a/bc.txt"), "a");
}

#[test]
fn caret_tilde_stops_regex_but_longer_prefix_does_not() {
    let v = start(&[
        "/static/i.png",
        "/static/deep/i.png",
        "/static/deep/t.txt",
        "/static/t.txt",
    ]);
    assert_eq!(which(&v, "/static/i.png"), "noregex");
    assert_eq!(which(&v, "/static/t.txt"), "noregex");
    // The longest prefix is a plain one: regexes are still checked.
    assert_eq!(which(&v, "/static/deep/i.png"), "re_png");
    assert_eq!(which(&v, "/static/deep/t.txt"), "deeper");
}

#[test]
fn regex_beats_prefix_and_first_regex_wins() {
    let v = start(&[
        "/a/i.png",
        "/re/t.txt",
        "/re/t.html",
        "/zz/re/t.txt",
        "/other.png",
    ]);
    assert_eq!(which(&v, "/a/i.png"), "re_png");
    assert_eq!(which(&v, "/other.png"), "re_png");
    // Both /re/ regexes match: the first in the file wins.
    assert_eq!(which(&v, "/re/t.txt"), "re_first");
    assert_eq!(which(&v, "/re/t.html"), "re_first");
    assert_eq!(which(&v, "/zz/re/t.txt"), "re_first");
}

#[test]
fn case_sensitivity_of_regexes() {
    let v = start(&["/p.PNG", "/q.jpg", "/q.JPG", "/q.Jpg"]);
    // `~` is case-sensitive: falls back to the server root.
    assert_eq!(which(&v, "/p.PNG"), "srv");
    // `~*` is not.
    assert_eq!(which(&v, "/q.jpg"), "re_jpg");
    assert_eq!(which(&v, "/q.JPG"), "re_jpg");
    assert_eq!(which(&v, "/q.Jpg"), "re_jpg");
}

#[test]
fn nested_locations() {
    let v = start(&[
        "/nest/s.css",
        "/nest/t.txt",
        "/nest/i.png",
        "/nest/inner/t.txt",
        "/nest/inner/s.css",
    ]);
    assert_eq!(which(&v, "/nest/t.txt"), "nest");
    // A nested regex is tried before the outer ones.
    assert_eq!(which(&v, "/nest/s.css"), "nest_css");
    // Nothing nested matches: outer regexes still apply.
    assert_eq!(which(&v, "/nest/i.png"), "re_png");
    assert_eq!(which(&v, "/nest/inner/t.txt"), "nest_inner");
    assert_eq!(which(&v, "/nest/inner/s.css"), "nest_css");
}

#[test]
fn nested_inside_regex() {
    let v = start(&["/rn/t.txt", "/rn/inner.txt"]);
    assert_eq!(which(&v, "/rn/t.txt"), "re_nest");
    assert_eq!(which(&v, "/rn/inner.txt"), "re_nest_inner");
}

#[test]
fn server_level_fallback() {
    let v = start(&["/zzz.txt", "/dir/f.html", "/nes.txt"]);
    assert_eq!(which(&v, "/zzz.txt"), "srv");
    assert_eq!(which(&v, "/dir/f.html"), "srv");
    // "/nes.txt" is not under "/nest/".
    assert_eq!(which(&v, "/nes.txt"), "srv");
}

#[test]
fn matching_uses_the_decoded_normalised_uri() {
    let v = start(&["/x.txt", "/img/a.png", "/a/b/c.txt"]);
    assert_eq!(which(&v, "/%78.txt"), "exact");
    assert_eq!(which(&v, "/img/a%2Epng"), "re_png");
    assert_eq!(which(&v, "/a/./b//c.txt"), "ab");
    assert_eq!(which(&v, "/q/../x.txt"), "exact");
}

#[test]
fn index_redirect_rematches_locations() {
    // `location = /` checks the index file under its own root, then the
    // internal redirect to /index.html is matched again (server level here).
    let dir = TempDir::new("loc");
    dir.write("root_exact/index.html", "root_exact");
    dir.write("srv/index.html", "srv");
    dir.write("a/a/index.html", "a");
    let v = Vireo::start_in(dir, CONF);
    assert_eq!(which(&v, "/"), "srv");
    assert_eq!(which(&v, "/a/"), "a");

    // Without the file where the redirect lands: 404.
    let dir = TempDir::new("loc");
    dir.write("root_exact/index.html", "root_exact");
    let v = Vireo::start_in(dir, CONF);
    assert_eq!(v.get("/").status, 404);
}

#[test]
fn alias_in_prefix_and_regex_locations() {
    let dir = TempDir::new("loc");
    dir.write("html/f.txt", "root");
    dir.write("aliased/f.txt", "alias-prefix");
    dir.write("aliased/sub/g.txt", "alias-sub");
    dir.write("one/file.txt", "alias-exact");
    dir.write("aliased/index.html", "alias-index");
    let v = Vireo::start_in(
        dir,
        "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /al/ { alias {dir}/aliased/; }
        location = /single { alias {dir}/one/file.txt; }
    }
}",
    );
    assert_eq!(which(&v, "/f.txt"), "root");
    assert_eq!(which(&v, "/al/f.txt"), "alias-prefix");
    assert_eq!(which(&v, "/al/sub/g.txt"), "alias-sub");
    assert_eq!(which(&v, "/single"), "alias-exact");
    // Index files are looked up through the alias too.
    assert_eq!(which(&v, "/al/"), "alias-index");
    // A directory through an alias: redirect uses the URI, not the path.
    let r = v.get("/al/sub");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some(format!("http://localhost:{}/al/sub/", v.port).as_str())
    );
}

#[test]
fn merge_slashes_off_keeps_them_for_matching_and_uri() {
    let dir = TempDir::new("loc");
    dir.write("html/d/f.txt", "file");
    let conf = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        merge_slashes off;
        root {dir}/html;
        location = /a//b { return 200 "kept $uri"; }
        location = /a/b { return 200 "merged $uri"; }
        location /up/ { return 200 "up $uri"; }
    }
    server {
        listen 127.0.0.1:{port};
        server_name merged.test;
        location = /a/b { return 200 "merged $uri"; }
    }
}"#;
    let v = Vireo::start_in(dir, conf);
    assert_eq!(v.get("/a//b").text(), "kept /a//b");
    assert_eq!(v.get("/a/b").text(), "merged /a/b");
    assert_eq!(v.get("/a%2F%2Fb").text(), "kept /a//b");
    // `..` removes the empty segment, as nginx: never above the root.
    assert_eq!(v.get("/a//../b").text(), "merged /a/b");
    assert_eq!(v.get("/up//x").text(), "up /up//x");
    assert_eq!(v.get("//../../a").status, 400);
    // Files are still found through the doubled slash.
    assert_eq!(v.get("/d//f.txt").text(), "file");
    // The default (on) merges.
    let r = v.request("GET /a//b HTTP/1.1\r\nHost: merged.test\r\nConnection: close\r\n\r\n");
    assert_eq!(r.text(), "merged /a/b");
}
