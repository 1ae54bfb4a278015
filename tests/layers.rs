//! Layers point one way: the configuration (`src/conf`) and the request
//! core (`src/core`) use no module, no upstream, no protocol and no server
//! code; those plug into them through `core::module::Module`.

use std::path::Path;

const LOWER: &[&str] = &["src/conf", "src/core"];
const UPPER: &[&str] = &["modules", "upstream", "http", "server", "fuzzing"];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The upper layers a line of code names (comments aside).
fn upward(line: &str) -> Vec<&'static str> {
    let code = line.split("//").next().unwrap_or("");
    let mut found = Vec::new();
    for up in UPPER {
        let direct = format!("crate::{up}");
        let grouped = code.contains("crate::{")
            && code
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == *up);
        if code.contains(&direct) || grouped {
            found.push(*up);
        }
    }
    found
}

#[test]
fn conf_and_core_import_no_upper_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut bad = Vec::new();
    for dir in LOWER {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        assert!(!files.is_empty(), "{dir} has no Rust files");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line) in text.lines().enumerate() {
                for up in upward(line) {
                    let rel = f.strip_prefix(root).unwrap().display();
                    bad.push(format!("{rel}:{} uses {up}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports that point back up:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_sees_each_form_of_import() {
    assert_eq!(upward("use crate::modules::log;"), ["modules"]);
    assert_eq!(upward("    x: crate::upstream::Field,"), ["upstream"]);
    assert_eq!(upward("use crate::{http, conf};"), ["http"]);
    assert!(upward("// see crate::modules::MODULES").is_empty());
    assert!(upward("use crate::core::module::Module;").is_empty());
}
