//! split_clients: keys hashed with MurmurHash2 land in the buckets nginx
//! puts them in (nginx's split_clients.t distribution over the strings
//! "1".."20"), a string with variables, parts short of 100%, and
//! configuration errors with file:line.

mod common;
use common::*;

const CONF: &str = "
events {}
http {
    access_log off;
    split_clients $arg_k $variant {
        51.2%  first;
        10%    second;
        *      third;
    }
    split_clients \"${arg_k}AAA\" $salted {
        50%    a;
        *      b;
    }
    split_clients $arg_k $partial {
        0.01%  tiny;
    }
    server {
        listen 127.0.0.1:{port};
        location / { return 200 \"$variant\"; }
        location /salted { return 200 \"$salted\"; }
        location /partial { return 200 \"[$partial]\"; }
    }
}";

#[test]
fn buckets_as_nginx() {
    let v = Vireo::start(CONF);
    let mut n = std::collections::BTreeMap::new();
    for k in 1..=20 {
        let r = v.get(&format!("/?k={k}"));
        assert_eq!(r.status, 200);
        *n.entry(r.text()).or_insert(0) += 1;
    }
    let got: Vec<(String, i32)> = n.into_iter().collect();
    assert_eq!(
        got,
        [
            ("first".to_string(), 12),
            ("second".to_string(), 2),
            ("third".to_string(), 6)
        ]
    );
    // The same key always picks the same value.
    let once = v.get("/?k=7").text();
    assert_eq!(v.get("/?k=7").text(), once);
    // "hello" hashes to 0xe56129cb (89.6% of the range): third.
    assert_eq!(v.get("/?k=hello").text(), "third");
    // "abc" hashes to 0x13577c9b (7.6%): first.
    assert_eq!(v.get("/?k=abc").text(), "first");
    // The rendered string is hashed: "helloAAA", "abcAAA".
    let salted = |k: &str| v.get(&format!("/salted?k={k}")).text();
    assert!(["a", "b"].contains(&salted("hello").as_str()));
    // Beyond parts short of 100%: empty.
    assert_eq!(v.get("/partial?k=hello").text(), "[]");
}

#[test]
fn errors_name_file_and_line() {
    let dir = TempDir::new("split-err");
    let conf_path = dir.path().join("t.conf").display().to_string();
    let cases: &[(&str, &str, u32)] = &[
        ("60% a;\n50% b;", "percent total is greater than 100%", 5),
        (
            "60% a;\n* b;\n1% c;",
            "percent total is greater than 100%",
            6,
        ),
        ("10 a;", "invalid percent value \"10\"", 4),
        ("0% a;", "invalid percent value \"0%\"", 4),
        ("x% a;", "invalid percent value \"x%\"", 4),
        ("1.2.3% a;", "invalid percent value \"1.2.3%\"", 4),
        (
            "10% a b;",
            "invalid number of the split_clients parameters",
            4,
        ),
    ];
    for (body, msg, line) in cases {
        let conf = format!(
            "events {{}}\nhttp {{\n    split_clients $remote_addr $v {{\n{body}\n    }}\n}}\n"
        );
        let out = test_conf(&dir, &conf);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{body}: {err}");
        let want = format!("{msg} in {conf_path}:{line}");
        assert!(err.contains(&want), "{body}: want {want}\n{err}");
    }
    let out = test_conf(
        &dir,
        "events {}\nhttp {\n    split_clients $remote_addr v {\n    }\n}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains(&format!("invalid variable name \"v\" in {conf_path}:3")),
        "{err}"
    );
}
