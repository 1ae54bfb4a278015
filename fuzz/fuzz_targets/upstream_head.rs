#![no_main]
// The body lives in vireo::fuzzing so tests/fuzz_corpus.rs replays the same checks.
libfuzzer_sys::fuzz_target!(|data: &[u8]| vireo::fuzzing::upstream_head(data));
