//! secure_link: links signed with an MD5 (base64url, with an expiry time)
//! or, in the old style, a hex MD5 in the path with a secret; `$secure_link`
//! is "1", "0" (expired) or empty, `$secure_link_expires` the time given;
//! inheritance between the two styles as nginx's. Expectations checked
//! against nginx 1.22.

mod common;
use base64::Engine;
use common::*;
use md5::{Digest, Md5};
use std::time::{SystemTime, UNIX_EPOCH};

const CONF: &str = r#"
events {}
http {
    access_log off;
    server {
        listen 127.0.0.1:{port};
        root {dir}/html;

        location /files/ {
            secure_link $arg_md5,$arg_expires;
            secure_link_md5 "$secure_link_expires$uri$remote_addr secret";
            if ($secure_link = "") { return 403; }
            if ($secure_link = "0") { return 410; }
            add_header X-Expires $secure_link_expires;
        }
        location /plain/ {
            secure_link $arg_md5;
            secure_link_md5 "$uri secret";
            return 200 "link=$secure_link expires=$secure_link_expires";
        }
        location /p/ {
            secure_link_secret word;
            if ($secure_link = "") { return 403; }
            rewrite ^ /files/$secure_link break;
        }
        location /old/ {
            secure_link_secret word;
            location /old/new/ {
                secure_link $arg_md5;
                secure_link_md5 "$uri secret";
                return 200 "link=$secure_link";
            }
            location ~ /inherit/ {
                return 200 "link=$secure_link";
            }
        }
    }
}"#;

fn b64(text: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Md5::digest(text.as_bytes()))
}

fn hex(text: &str) -> String {
    Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn start() -> Vireo {
    let dir = TempDir::new("secure-link");
    dir.write("html/files/doc.txt", "the document");
    Vireo::start_in(dir, CONF)
}

#[test]
fn signed_links_with_expiry() {
    let v = start();
    let exp = now() + 3600;
    let sig = b64(&format!("{exp}/files/doc.txt127.0.0.1 secret"));
    let r = v.get(&format!("/files/doc.txt?md5={sig}&expires={exp}"));
    assert_eq!((r.status, r.text().as_str()), (200, "the document"));
    assert_eq!(r.header("x-expires"), Some(exp.to_string().as_str()));
    // A link signed for another address or file, or altered: refused.
    let other = b64(&format!("{exp}/files/doc.txt10.0.0.1 secret"));
    assert_eq!(
        v.get(&format!("/files/doc.txt?md5={other}&expires={exp}"))
            .status,
        403
    );
    let later = exp + 1;
    assert_eq!(
        v.get(&format!("/files/doc.txt?md5={sig}&expires={later}"))
            .status,
        403
    );
    assert_eq!(v.get("/files/doc.txt").status, 403);
    // Signed right, but past its time: "0".
    let past = now() - 10;
    let sig = b64(&format!("{past}/files/doc.txt127.0.0.1 secret"));
    assert_eq!(
        v.get(&format!("/files/doc.txt?md5={sig}&expires={past}"))
            .status,
        410
    );
    // An expiry time of 0 or not a number is invalid, not expired.
    let sig = b64("0/files/doc.txt127.0.0.1 secret");
    assert_eq!(
        v.get(&format!("/files/doc.txt?md5={sig}&expires=0")).status,
        403
    );
}

#[test]
fn hash_forms() {
    let v = start();
    let sig = b64("/plain/x secret");
    assert_eq!(
        v.get(&format!("/plain/x?md5={sig}")).text(),
        "link=1 expires="
    );
    // Padding is optional; the standard alphabet and bad lengths are not hashes.
    assert_eq!(
        v.get(&format!("/plain/x?md5={sig}==")).text(),
        "link=1 expires="
    );
    let std_alphabet = sig.replace('-', "+").replace('_', "/");
    if std_alphabet != sig {
        assert_eq!(
            v.get(&format!("/plain/x?md5={std_alphabet}")).text(),
            "link= expires="
        );
    }
    assert_eq!(
        v.get(&format!("/plain/x?md5={sig}AA")).text(),
        "link= expires="
    );
    assert_eq!(v.get("/plain/x?md5=short").text(), "link= expires=");
}

#[test]
fn old_style_and_inheritance() {
    let v = start();
    let r = v.get(&format!("/p/{}/doc.txt", hex("doc.txtword")));
    assert_eq!((r.status, r.text().as_str()), (200, "the document"));
    assert_eq!(
        v.get(&format!("/p/{}/doc.txt", hex("doc.txtother"))).status,
        403
    );
    assert_eq!(v.get("/p/0123/doc.txt").status, 403);
    assert_eq!(v.get("/p/doc.txt").status, 403);
    // A level with secure_link and secure_link_md5 does not inherit the secret.
    let sig = b64("/old/new/x secret");
    assert_eq!(v.get(&format!("/old/new/x?md5={sig}")).text(), "link=1");
    // One with neither inherits it.
    let r = v.get(&format!("/old/{}/inherit/z", hex("inherit/zword")));
    assert_eq!(r.text(), "link=inherit/z");
    let r = v.get(&format!("/old/{}/inherit/z", "0".repeat(32)));
    assert_eq!(r.text(), "link=");
}

#[test]
fn directive_errors_name_file_and_line() {
    let dir = TempDir::new("secure-link-conf");
    for (line, want) in [
        (
            "secure_link $arg_a; secure_link $arg_b;",
            "\"secure_link\" directive is duplicate",
        ),
        (
            "secure_link_md5 a; secure_link_md5 b;",
            "\"secure_link_md5\" directive is duplicate",
        ),
        (
            "secure_link_secret a b;",
            "invalid number of arguments in \"secure_link_secret\" directive",
        ),
        (
            "secure_link_md5 $no_such_variable;",
            "unknown \"no_such_variable\" variable",
        ),
    ] {
        refused_in_server(&dir, line, want);
    }
}
