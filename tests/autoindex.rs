//! autoindex: HTML, JSON, JSONP and XML listings, sizes, times, escaping,
//! hidden files, index files first, errors, staying inside the root.
//! Expectations checked against nginx 1.22 (our HTML markup is our own; the
//! columns follow nginx's).

mod common;
use common::*;

use std::time::{Duration, UNIX_EPOCH};

const CONF: &str = "
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;
        location /pub/ { autoindex on; }
        location /approx/ { alias {dir}/html/pub/; autoindex on; autoindex_exact_size off; }
        location /local/ { alias {dir}/html/pub/; autoindex on; autoindex_localtime on; }
        location /json/ { alias {dir}/html/pub/; autoindex on; autoindex_format json; }
        location /jsonp/ { alias {dir}/html/pub/; autoindex on; autoindex_format jsonp; }
        location /xml/ { alias {dir}/html/pub/; autoindex on; autoindex_format xml; }
        location /withindex/ { alias {dir}/html/pub/; autoindex on; index a.txt; }
        location /small/ { autoindex on; autoindex_format json; }
    }
}";

/// Thu, 02 Jan 2020 03:04:05 GMT
const MTIME: u64 = 1_577_934_245;

fn set_mtime(path: &std::path::Path) {
    let f = std::fs::File::open(path).unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(MTIME))
        .unwrap();
}

/// Start like `Vireo::start_in`, with TZ set for the server.
fn start_tz(dir: TempDir, template: &str, tz: &str) -> Vireo {
    Vireo::start_in_env(dir, template, &[("TZ", tz)])
}

/// html/pub with files and folders whose times are all MTIME.
fn start() -> Vireo {
    let dir = TempDir::new("ai");
    let long = "x".repeat(60);
    let files: Vec<(String, usize)> = vec![
        ("a.txt".into(), 6),
        ("<b>&\"q.txt".into(), 0),
        ("a b:c%d#e?.txt".into(), 3),
        ("big.bin".into(), 20_000),
        ("k4".into(), 10_752),
        ("m3".into(), 1_572_864),
        ("ünï.txt".into(), 1),
        (format!("{long}.txt"), 0),
        (".hidden".into(), 1),
    ];
    for (name, size) in &files {
        dir.write(&format!("html/pub/{name}"), vec![b'z'; *size]);
    }
    for d in ["zdir", "Adir", ".git", "a b"] {
        std::fs::create_dir_all(dir.path().join("html/pub").join(d)).unwrap();
    }
    dir.write("html/pub/a b/inner.txt", "in");
    dir.write("html/outside-marker.txt", "secret");
    dir.write("html/small/one.txt", "1");
    for (name, _) in &files {
        set_mtime(&dir.path().join("html/pub").join(name));
    }
    for d in ["zdir", "Adir", "a b", ""] {
        set_mtime(&dir.path().join("html/pub").join(d));
    }
    set_mtime(&dir.path().join("html/small/one.txt"));
    start_tz(dir, CONF, "Asia/Tokyo")
}

fn line<'a>(body: &'a str, href: &str) -> &'a str {
    let start = format!("<a href=\"{href}\">");
    body.lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("no line for {href} in\n{body}"))
}

#[test]
fn html_listing() {
    let v = start();
    let r = v.get("/pub/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html"));
    let body = r.text();
    assert!(body.contains("<title>Index of /pub/</title>"), "{body}");
    assert!(body.contains("<h1>Index of /pub/</h1>"));
    assert!(body.contains("<a href=\"../\">../</a>"));
    // Dot files are left out.
    assert!(!body.contains("hidden") && !body.contains(".git"), "{body}");

    // Directories first, then files, in byte order; columns as nginx.
    let hrefs: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("<a href=\""))
        .map(|l| &l[..l.find('"').unwrap()])
        .collect();
    let long = format!("{}.txt", "x".repeat(60));
    assert_eq!(
        hrefs,
        [
            "Adir/",
            "a%20b/",
            "zdir/",
            "%3Cb%3E%26%22q.txt",
            "a%20b%3Ac%25d%23e%3F.txt",
            "a.txt",
            "big.bin",
            "k4",
            "m3",
            long.as_str(),
            "%C3%BCn%C3%AF.txt",
        ]
    );
    let pad = |n: usize| " ".repeat(n);
    assert_eq!(
        line(&body, "Adir/"),
        format!(
            "<a href=\"Adir/\">Adir/</a>{} 02-Jan-2020 03:04 {:>19}",
            pad(45),
            "-"
        )
    );
    assert_eq!(
        line(&body, "a.txt"),
        format!(
            "<a href=\"a.txt\">a.txt</a>{} 02-Jan-2020 03:04 {:>19}",
            pad(45),
            "6"
        )
    );
    // Names are escaped for HTML in the text and percent-encoded in links.
    assert_eq!(
        line(&body, "%3Cb%3E%26%22q.txt"),
        format!(
            "<a href=\"%3Cb%3E%26%22q.txt\">&lt;b&gt;&amp;&quot;q.txt</a>{} 02-Jan-2020 03:04 {:>19}",
            pad(40),
            "0"
        )
    );
    // Width counts characters, not bytes.
    assert_eq!(
        line(&body, "%C3%BCn%C3%AF.txt"),
        format!(
            "<a href=\"%C3%BCn%C3%AF.txt\">ünï.txt</a>{} 02-Jan-2020 03:04 {:>19}",
            pad(43),
            "1"
        )
    );
    // Long names are cut to 47 characters and "..>".
    assert_eq!(
        line(&body, &long),
        format!(
            "<a href=\"{long}\">{}..&gt;</a> 02-Jan-2020 03:04 {:>19}",
            "x".repeat(47),
            "0"
        )
    );
    assert!(line(&body, "m3").ends_with(" 1572864"));

    // A listed folder opens.
    let r = v.get("/pub/a%20b/");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("<title>Index of /pub/a b/</title>"));
    assert!(r.text().contains("<a href=\"inner.txt\">inner.txt</a>"));
}

#[test]
fn approximate_sizes_and_local_time() {
    let v = start();
    let body = v.get("/approx/").text();
    assert!(
        line(&body, "a.txt").ends_with(" 02-Jan-2020 03:04       6"),
        "{body}"
    );
    assert!(line(&body, "big.bin").ends_with(" 02-Jan-2020 03:04     20K"));
    assert!(line(&body, "k4").ends_with("     11K"));
    assert!(line(&body, "m3").ends_with("      2M"));
    assert!(line(&body, "zdir/").ends_with(" 02-Jan-2020 03:04       -"));

    // Tokyo is nine hours ahead of UTC.
    let body = v.get("/local/").text();
    assert!(
        line(&body, "a.txt").ends_with(" 02-Jan-2020 12:04                   6"),
        "{body}"
    );
    // JSON stays in GMT whatever the setting.
    assert!(
        v.get("/json/")
            .text()
            .contains("\"mtime\":\"Thu, 02 Jan 2020 03:04:05 GMT\"")
    );
}

#[test]
fn json_xml_jsonp() {
    let v = start();
    let r = v.get("/small/");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.text(),
        "[\n{ \"name\":\"one.txt\", \"type\":\"file\", \"mtime\":\"Thu, 02 Jan 2020 03:04:05 GMT\", \"size\":1 }\n]\n"
    );

    let r = v.get("/json/");
    let body = r.text();
    assert!(body.starts_with(
        "[\n{ \"name\":\"Adir\", \"type\":\"directory\", \"mtime\":\"Thu, 02 Jan 2020 03:04:05 GMT\" },\n"
    ), "{body}");
    assert!(body.contains(
        "{ \"name\":\"<b>&\\\"q.txt\", \"type\":\"file\", \"mtime\":\"Thu, 02 Jan 2020 03:04:05 GMT\", \"size\":0 },\n"
    ), "{body}");
    assert!(body.contains("{ \"name\":\"ünï.txt\", \"type\":\"file\""));
    assert!(!body.contains("hidden"));

    let r = v.get("/xml/");
    assert_eq!(r.header("content-type"), Some("text/xml; charset=utf-8"));
    let body = r.text();
    assert!(body.starts_with(
        "<?xml version=\"1.0\"?>\n<list>\n<directory mtime=\"2020-01-02T03:04:05Z\">Adir</directory>\n"
    ), "{body}");
    assert!(body.contains(
        "<file mtime=\"2020-01-02T03:04:05Z\" size=\"0\">&lt;b&gt;&amp;&quot;q.txt</file>\n"
    ));
    assert!(body.ends_with("</list>\n"));

    let r = v.get("/jsonp/?callback=my.cb_1");
    assert_eq!(r.header("content-type"), Some("application/javascript"));
    let body = r.text();
    assert!(
        body.starts_with("/* callback */\nmy.cb_1([\n{ \"name\":\"Adir\""),
        "{body}"
    );
    assert!(body.ends_with("\n]);"), "{body}");
    // Without a callback: plain JSON.
    let r = v.get("/jsonp/");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.text().starts_with("[\n"));
    // A callback that is not a plain name is refused.
    assert_eq!(v.get("/jsonp/?callback=alert(1)").status, 400);
}

#[test]
fn index_file_wins_and_errors() {
    let v = start();
    let r = v.get("/withindex/");
    assert_eq!((r.status, r.text().as_str()), (200, "zzzzzz"));
    // autoindex off (the default): 403 for a folder without index file.
    assert_eq!(v.get("/").status, 403);
    // A missing folder is 404 either way.
    assert_eq!(v.get("/pub/nothere/").status, 404);
    // Without the slash: redirect to it.
    let r = v.get("/pub/zdir");
    assert_eq!(r.status, 301);
    // HEAD: the head only.
    let raw = v.raw(b"HEAD /pub/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "{text}");
}

#[test]
fn stays_inside_the_root() {
    let v = start();
    for uri in [
        "/pub/../",
        "/pub/%2e%2e/",
        "/pub/..%2f",
        "/pub/%2e%2e%2f%2e%2e/",
        "/approx/../",
        "/approx/%2e%2e/",
    ] {
        let r = v.get(uri);
        assert!(
            !r.text().contains("outside-marker"),
            "{uri} listed the parent: {}",
            r.text()
        );
    }
}
