//! Putting a configuration in place: files written, the text checked by `vireo -t`, the
//! file replaced atomically and the running vireo told to reload (SIGHUP: a graceful
//! reload, no request lost).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The configuration file vireo runs, in the configuration directory.
pub const CONF_FILE: &str = "vireo.conf";

/// Folders of the configuration directory holding [`crate::model::Model::files`].
const FILE_DIRS: &[&str] = &["certs", "auth"];

/// What became of a configuration.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// The same text is serving.
    Unchanged,
    /// In place, and vireo was told to reload (or is not running yet, and will read it).
    Applied,
    /// `vireo -t` refused it; the serving configuration stays.
    Invalid(String),
}

pub struct Applier {
    pub conf_dir: PathBuf,
    pub pid_file: PathBuf,
    pub vireo_bin: PathBuf,
    current: Option<String>,
}

impl Applier {
    pub fn new(conf_dir: PathBuf, pid_file: PathBuf, vireo_bin: PathBuf) -> Applier {
        Applier {
            conf_dir,
            pid_file,
            vireo_bin,
            current: None,
        }
    }

    pub async fn apply(
        &mut self,
        text: &str,
        files: &BTreeMap<String, Vec<u8>>,
    ) -> io::Result<Outcome> {
        if self.current.as_deref() == Some(text) {
            return Ok(Outcome::Unchanged);
        }
        for (name, contents) in files {
            write_file(&self.conf_dir.join(name), contents)?;
        }
        let next = self.conf_dir.join(format!("{CONF_FILE}.next"));
        std::fs::write(&next, text)?;
        let out = tokio::process::Command::new(&self.vireo_bin)
            .arg("-p")
            .arg(&self.conf_dir)
            .arg("-t")
            .arg("-c")
            .arg(&next)
            .output()
            .await?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&next);
            let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Ok(Outcome::Invalid(msg));
        }
        std::fs::rename(&next, self.conf_dir.join(CONF_FILE))?;
        self.current = Some(text.to_string());
        self.reload()?;
        remove_stale(&self.conf_dir, files)?;
        Ok(Outcome::Applied)
    }

    /// SIGHUP to the pid of the pid file; nothing when vireo has not written one yet.
    fn reload(&self) -> io::Result<()> {
        let Ok(text) = std::fs::read_to_string(&self.pid_file) else {
            return Ok(());
        };
        let pid: i32 = text.trim().parse().map_err(|_| {
            io::Error::other(format!("{}: not a pid: {text:?}", self.pid_file.display()))
        })?;
        kill(Pid::from_raw(pid), Signal::SIGHUP).map_err(io::Error::from)
    }
}

/// Writes a file unless it holds these contents already (names carry a hash of them);
/// private to the owner, as keys must be.
fn write_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    if std::fs::read(path).is_ok_and(|c| c == contents) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    io::Write::write_all(&mut f, contents)?;
    std::fs::rename(tmp, path)
}

/// Removes files of the file folders that the applied configuration no longer names.
fn remove_stale(dir: &Path, keep: &BTreeMap<String, Vec<u8>>) -> io::Result<()> {
    for sub in FILE_DIRS {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for e in entries {
            let e = e?;
            let name = format!("{sub}/{}", e.file_name().to_string_lossy());
            if !keep.contains_key(&name) {
                std::fs::remove_file(e.path())?;
            }
        }
    }
    Ok(())
}
