//! Raw HTTP/2 scripts (tests/h2/*.py, written with the Python h2 package's
//! frame and HPACK codecs) run against a vireo; each prints one report line.

use super::*;
use std::process::Command;

/// Is the Python h2 package there? Says so when it is not (the test then skips).
pub fn have_python_h2() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import h2"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIP: the Python h2 package is missing (python3 -m pip install h2)");
    }
    ok
}

/// What a script reported (see tests/h2/h2raw.py).
pub struct Report(pub String);

impl Report {
    pub fn get(&self, key: &str) -> &str {
        self.0
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key} in {}", self.0))
    }
    pub fn num(&self, key: &str) -> f64 {
        self.get(key).parse().unwrap()
    }
    /// GOAWAY with this error code, and the connection closed.
    pub fn goaway(&self, code: u32) -> bool {
        self.get("goaway") == code.to_string() && self.get("closed") == "1"
    }
}

/// Run `tests/h2/NAME PORT ARGS…` (bounded to 60 s); its report line.
pub fn script(v: &Vireo, name: &str, args: &[&str]) -> Report {
    script_at(v.port, name, args)
}

/// As [`script`], against a server on `port` started some other way.
pub fn script_at(port: u16, name: &str, args: &[&str]) -> Report {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2");
    let out = Command::new("timeout")
        .arg("60")
        .arg("python3")
        .arg(format!("{dir}/{name}"))
        .arg(port.to_string())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Report(text.lines().last().unwrap_or("").to_string())
}
