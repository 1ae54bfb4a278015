//! How the `vireo` binary is linked on Linux with glibc (only the binary:
//! tests and dependencies link as cargo does by default).
//!
//! - `-z pack-relative-relocs`: the dynamic loader's relocations of a
//!   position-independent executable as a compact bitmap (DT_RELR) instead of
//!   0.4 MB of RELA entries it reads at every start. Needs glibc 2.36.
//! - `--symbol-ordering-file=link/hot-symbols.txt`: the functions a running
//!   server executes (start-up and serving, measured by `scripts/hot-symbols`)
//!   laid out together at the start of `.text`. The kernel maps code 64 KB at
//!   a time around each page touched (fault-around), so ~1,300 functions
//!   spread over the whole 7.6 MB of code kept 4.3 MB of it resident; packed,
//!   1.3 MB. Names missing from the list (renamed since it was made) only
//!   leave their functions in the default order. An option of LLD, the
//!   default linker of Rust on x86_64 Linux.
//!
//! `link/` also holds the compiler's profile (`scripts/pgo`), which
//! `link/rustc-wrapper` gives every crate of an optimised build: a new one
//! rebuilds this crate.

use std::path::Path;
use std::process::Command;

const ORDER: &str = "link/hot-symbols.txt";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link");
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    if env("CARGO_CFG_TARGET_OS") != "linux" || env("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    if glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    if env("CARGO_CFG_TARGET_ARCH") == "x86_64" && Path::new(ORDER).exists() {
        let order = Path::new(&env("CARGO_MANIFEST_DIR")).join(ORDER);
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// The C library the binary will run with is the build machine's.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = text
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split('.')
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (ma, mi) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    (ma, mi) >= (major, minor)
}
