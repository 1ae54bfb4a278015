//! The vireo command: parse flags, load the configuration, run the server.

use std::path::PathBuf;
use std::process::ExitCode;
use vireo::errlog::{self, Level};
use vireo::error_log;
use vireo::load::{self, Source};

/// jemalloc: tokio's task cells and I/O slots are 128-byte aligned, which glibc
/// serves with padding holes; jemalloc's size classes fit them, cutting the memory
/// of idle keep-alive connections by about a third (docs/benchmarks.md).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Links jemalloc's options (`vireo::MALLOC_CONF`) into the binary.
#[used]
static MALLOC_CONF: &Option<&std::ffi::c_char> = &vireo::MALLOC_CONF;

const USAGE: &str = "\
Usage: vireo [-h] [-v] [-V] [-t] [-T] [-q] [-s signal] [-p prefix] [-e file] [-c file] [-g directives]

With no -c, vireo serves its embedded default site on 127.0.0.1:8080.

Options:
  -h            this help
  -v            show version and exit
  -V            show version and built-in modules, and exit
  -t            test the configuration and exit (0 ok, 1 error)
  -T            test the configuration, print it, and exit
  -q            while testing, print errors only
  -s signal     send a signal to the running server (its pid file, from the
                configuration): stop, quit, reopen, reload; reload first tests
                the configuration and fails, sending nothing, if it is bad
  -p prefix     prefix for relative paths (default: the current folder)
  -e file       error log when the configuration names none at its main level
                (default: stderr; `stderr` is stderr)
  -c file       configuration file (default: the embedded configuration)
  -g directives global directives added to the configuration
  --directives-md  print the directive reference (docs/directives.md)
";

struct Cli {
    conf: Option<PathBuf>,
    prefix: Option<PathBuf>,
    error_log: Option<PathBuf>,
    global: Option<String>,
    test: bool,
    /// `-q`: only errors while testing.
    quiet: bool,
    dump: bool,
    signal: Option<(String, i32)>,
}

enum Action {
    Run(Cli),
    Exit(ExitCode),
}

fn parse_args(args: impl Iterator<Item = String>) -> Result<Action, String> {
    let mut cli = Cli {
        conf: None,
        prefix: None,
        error_log: None,
        quiet: false,
        global: None,
        test: false,
        dump: false,
        signal: None,
    };
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .ok_or_else(|| format!("option \"{flag}\" requires a value"))
        };
        match a.as_str() {
            "-h" | "-?" | "--help" => {
                print!("{USAGE}");
                return Ok(Action::Exit(ExitCode::SUCCESS));
            }
            "-v" => {
                eprintln!("nginx version: vireo/{}", env!("CARGO_PKG_VERSION"));
                return Ok(Action::Exit(ExitCode::SUCCESS));
            }
            "-V" => {
                eprint!("{}", vireo::version_text(vireo::MODULES));
                return Ok(Action::Exit(ExitCode::SUCCESS));
            }
            "--directives-md" => {
                print!("{}", vireo::reference_markdown(vireo::MODULES));
                return Ok(Action::Exit(ExitCode::SUCCESS));
            }
            "-t" => cli.test = true,
            "-q" => cli.quiet = true,
            "-T" => {
                cli.test = true;
                cli.dump = true;
            }
            "-c" => cli.conf = Some(value("-c")?.into()),
            "-p" => cli.prefix = Some(value("-p")?.into()),
            "-e" => cli.error_log = Some(value("-e")?.into()),
            "-g" => cli.global = Some(value("-g")?),
            "-s" => {
                let name = value("-s")?;
                let sig = match name.as_str() {
                    "stop" => libc::SIGTERM,
                    "quit" => libc::SIGQUIT,
                    "reopen" => libc::SIGUSR1,
                    "reload" => libc::SIGHUP,
                    _ => return Err(format!("invalid option: \"-s {name}\"")),
                };
                cli.signal = Some((name, sig));
            }
            other => return Err(format!("invalid option: \"{other}\"")),
        }
    }
    Ok(Action::Run(cli))
}

/// Write the embedded default site to a folder it can be served from.
fn default_site() -> std::io::Result<PathBuf> {
    let dir =
        std::env::temp_dir().join(format!("vireo-{}-default-site", env!("CARGO_PKG_VERSION")));
    std::fs::create_dir_all(&dir)?;
    let index = dir.join("index.html");
    if std::fs::read_to_string(&index).ok().as_deref() != Some(load::DEFAULT_INDEX) {
        std::fs::write(&index, load::DEFAULT_INDEX)?;
    }
    Ok(dir)
}

fn main() -> ExitCode {
    let cli = match parse_args(std::env::args().skip(1)) {
        Ok(Action::Run(cli)) => cli,
        Ok(Action::Exit(code)) => return code,
        Err(msg) => {
            eprintln!("vireo: {msg}\n\n{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    // Sockets handed over by an old binary or systemd are adopted before this
    // process opens anything, so their descriptor numbers are still theirs.
    let inherited = if cli.test || cli.signal.is_some() {
        vireo::inherit::Inherited::default()
    } else {
        vireo::inherit::collect()
    };
    // An absolute prefix, so that every path in messages and in `-T` is absolute.
    let prefix = match cli
        .prefix
        .clone()
        .map_or_else(std::env::current_dir, std::path::absolute)
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("vireo: [emerg] cannot get the current folder: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (source, name) = match &cli.conf {
        Some(p) => (
            Source::File(prefix.join(p)),
            prefix.join(p).display().to_string(),
        ),
        None => match default_site() {
            Ok(root) => (Source::Embedded { root }, "<embedded>".to_string()),
            Err(e) => {
                eprintln!("vireo: [emerg] cannot write the default site: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let cmd = load::Cmdline {
        prefix,
        globals: cli.global,
        error_log: cli.error_log,
    };
    let config = match load::load(&source, &cmd, vireo::MODULES) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vireo: [emerg] {e}");
            if cli.test {
                eprintln!("vireo: configuration file {name} test failed");
            }
            if let Some((s, _)) = &cli.signal {
                eprintln!("vireo: configuration file {name} is bad, signal \"{s}\" not sent");
            }
            return ExitCode::FAILURE;
        }
    };
    if let Some((signal, sig)) = &cli.signal {
        // reload: the whole test, as -t, before anything is sent.
        if *sig == libc::SIGHUP
            && let Err(e) = config.open_error_log()
        {
            eprintln!("vireo: [emerg] {e}");
            eprintln!("vireo: configuration file {name} is bad, signal \"{signal}\" not sent");
            return ExitCode::FAILURE;
        }
        return send_signal(&config, signal, *sig);
    }
    if cli.test {
        // nginx opens the error log while testing: an unwritable path fails the test.
        if let Err(e) = config.open_error_log() {
            eprintln!("vireo: [emerg] {e}");
            eprintln!("vireo: configuration file {name} test failed");
            return ExitCode::FAILURE;
        }
        if !cli.quiet {
            for n in &config.notices {
                eprintln!("vireo: [notice] {n}");
            }
            eprintln!("vireo: the configuration file {name} syntax is ok");
            eprintln!("vireo: configuration file {name} test is successful");
        }
        if cli.dump {
            dump(&config, &source);
        }
        return ExitCode::SUCCESS;
    }
    let target = match config.open_error_log() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("vireo: [emerg] {e}");
            return ExitCode::FAILURE;
        }
    };
    errlog::set(target);
    errlog::set_debug_connections(&config.debug_connection);
    log_panics();
    let log_to_file = config
        .error_log
        .iter()
        .any(|(d, _)| !matches!(d, errlog::Dest::Stderr));
    for n in &config.notices {
        errlog::log(Level::Notice, format_args!("{n}"));
    }
    let opts = vireo::Options {
        source,
        cmd,
        inherited,
    };
    match vireo::run(config, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error_log!(Emerg, "{e}");
            if log_to_file {
                eprintln!("vireo: [emerg] {e}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `-s NAME`: signal the server whose pid is in the configuration's pid file.
fn send_signal(config: &load::Config, name: &str, sig: i32) -> ExitCode {
    let Some(path) = &config.pid else {
        eprintln!(
            "vireo: [error] option \"-s\" finds the server by its pid file, and the configuration has no \"pid\" directive (signal \"{name}\" not sent)"
        );
        return ExitCode::FAILURE;
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "vireo: [error] open() \"{}\" failed ({})",
                path.display(),
                errlog::errno_text(&e)
            );
            return ExitCode::FAILURE;
        }
    };
    let pid = match text.trim().parse::<i32>() {
        Ok(p) if p > 0 => p,
        _ => {
            eprintln!(
                "vireo: [error] invalid PID number \"{}\" in \"{}\"",
                text.trim(),
                path.display()
            );
            return ExitCode::FAILURE;
        }
    };
    match vireo::kill(pid, sig) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "vireo: [error] kill({pid}, {sig}) failed ({})",
                errlog::errno_text(&e)
            );
            ExitCode::FAILURE
        }
    }
}

/// Send panic messages to the error log and count them (a panic while serving
/// one request ends that request or connection only; the worker goes on).
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        vireo::panicked();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        let thread = std::thread::current();
        let at = info
            .location()
            .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
        error_log!(
            Alert,
            "panic in thread \"{}\": {msg}{at}",
            thread.name().unwrap_or("?")
        );
    }));
}

/// `-T`: print every configuration file read, as nginx does.
fn dump(config: &load::Config, source: &Source) {
    if let Source::Embedded { .. } = source {
        println!("# configuration file <embedded>:\n{}", load::DEFAULT_CONF);
    }
    for f in &config.files {
        println!("# configuration file {}:", f.display());
        match std::fs::read_to_string(f) {
            Ok(t) => println!("{t}"),
            Err(e) => println!("# cannot read: {e}"),
        }
    }
}
