//! Replays the committed fuzz corpus (fuzz/corpus/<target>/) through the same
//! checks the cargo-fuzz targets run (vireo::fuzzing), on stable, so a find
//! once fixed stays fixed. docs/fuzzing.md says how to grow the corpus.

use std::path::Path;

#[test]
fn every_corpus_file_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut total = 0;
    for (name, check) in vireo::fuzzing::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no seeds for {name}");
        for f in &files {
            let data = std::fs::read(f).unwrap();
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                panic!("{name}: {} fails", f.display());
            }
        }
        total += files.len();
    }
    assert!(total >= vireo::fuzzing::TARGETS.len());
}

#[test]
fn every_target_has_a_fuzz_binary() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/Cargo.toml"))
            .unwrap();
    for (name, _) in vireo::fuzzing::TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "fuzz/Cargo.toml has no target {name}"
        );
    }
}
