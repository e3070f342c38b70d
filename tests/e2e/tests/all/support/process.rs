//! The processes the end-to-end tests start, in one place:
//!
//! - [`coordhost_bin`]: the `coordhost` binary (the one place that names
//!   it); [`coordhost`] runs it in the test environment ([`with_test_env`]:
//!   the shared compiled-component cache, no `COORDHOST_LOG` of the test's
//!   own, no standard input);
//! - [`Process`]: any process a test started (`coordhost run`, `coordhost
//!   worker`, etcd) with its output in files of its own ([`Logs`]): its pid,
//!   its stderr read back (whole or its last lines), signals by name
//!   (`STOP`, `CONT`, `TERM`), SIGKILL and reaping, and waits bounded by a
//!   deadline.
//!
//! The area helpers build on it: `crash::Running` (a `coordhost run`),
//! `workers::Workers`, `etcd::Etcd` and `etcd::spawn_ha_run`. The S3 server
//! of `s3.rs` keeps its own `Child`: the benchmarks of host/benches include
//! that file alone, where no `process` module exists.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::cache_dir;

/// SIGKILL's number, to check how a killed process ended.
pub const SIGKILL: i32 = 9;

/// The `coordhost` binary these tests run, the one place that names it.
///
/// It is the real binary: this package's `coordhost-under-test` target is
/// built from the very source file of host/'s `coordhost` target
/// (`host/src/main.rs`, which calls `coordhost::cli::main()`) against the
/// same library, into the same folder (`target/<profile>/`, so
/// `plugins/` beside the executable is the same place). Only its name
/// differs — two binaries named `coordhost` in one workspace would overwrite
/// each other — because Cargo gives a test the path of a binary of its own
/// package only (`CARGO_BIN_EXE_<name>`). Its library has the test knobs
/// (`coordhost/failpoints`, turned on by this package's manifest).
pub fn coordhost_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_coordhost-under-test"))
}

/// The test environment of a `coordhost` process: the shared
/// compiled-component cache (`COORDHOST_CACHE_DIR`), no `COORDHOST_LOG`
/// from the test's environment, no standard input.
pub fn with_test_env(command: &mut Command) -> &mut Command {
    command
        .env("COORDHOST_CACHE_DIR", cache_dir())
        .env_remove("COORDHOST_LOG")
        .stdin(Stdio::null())
}

/// The `coordhost` binary ([`coordhost_bin`]) as a user runs it, in the
/// test environment ([`with_test_env`]).
pub fn coordhost() -> Command {
    let mut c = Command::new(coordhost_bin());
    with_test_env(&mut c);
    c
}

/// Where a started process's output goes: files of its own (tests run at
/// once, and one test runs several processes), created or truncated at the
/// start, read back for checks and failure messages.
#[derive(Debug, Clone)]
pub struct Logs {
    /// `None`: stdout stays the test process's own.
    stdout: Option<PathBuf>,
    stderr: PathBuf,
}

impl Logs {
    /// stdout into `<stem>.out`, stderr into `<stem>.err`.
    pub fn pair(stem: &Path) -> Self {
        let with = |ext: &str| {
            let mut p = stem.as_os_str().to_owned();
            p.push(ext);
            PathBuf::from(p)
        };
        Self {
            stdout: Some(with(".out")),
            stderr: with(".err"),
        }
    }

    /// stdout and stderr into the one file `path`, in the order written.
    pub fn one(path: &Path) -> Self {
        Self {
            stdout: Some(path.to_path_buf()),
            stderr: path.to_path_buf(),
        }
    }

    /// stderr into `path`; stdout stays the test process's own.
    pub fn stderr(path: &Path) -> Self {
        Self {
            stdout: None,
            stderr: path.to_path_buf(),
        }
    }
}

/// A process a test started, with its output in files of its own.
/// Dropping it does not end it: its owner kills it when that is meant
/// (`Etcd`, `Workers` and the HA tests' coordinators do; a `coordhost run`
/// of the crash tests runs on to its own end).
#[derive(Debug)]
pub struct Process {
    /// What it is, for messages (`coordhost run`, `worker w0`, `etcd`).
    name: String,
    child: Child,
    started: Instant,
    stderr: PathBuf,
}

impl Process {
    /// Spawns `command` with its output into `logs` (the files created, or
    /// truncated, first); `name` says what it is in messages.
    ///
    /// # Panics
    /// If a log file cannot be created or the process cannot be spawned.
    pub fn spawn(name: impl Into<String>, command: &mut Command, logs: Logs) -> Self {
        let name = name.into();
        let create = |p: &Path| {
            std::fs::File::create(p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()))
        };
        let err = create(&logs.stderr);
        match &logs.stdout {
            Some(out) if *out == logs.stderr => {
                command.stdout(err.try_clone().expect("clone the log file"));
            }
            Some(out) => {
                command.stdout(create(out));
            }
            None => {}
        }
        let child = command
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        Self {
            name,
            child,
            started: Instant::now(),
            stderr: logs.stderr,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Time since it was spawned.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// When it was spawned.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Its stderr file.
    pub fn stderr_path(&self) -> &Path {
        &self.stderr
    }

    /// Its whole stderr so far ("" while there is none).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The last `n` lines of its stderr, for failure messages.
    pub fn stderr_tail(&self, n: usize) -> String {
        last_lines(&self.stderr(), n)
    }

    /// Its exit status once it ended (reaped), `None` while it runs.
    ///
    /// # Panics
    /// If its status cannot be asked.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `signal` (a name: `STOP`, `CONT`, `TERM`, ...) with `kill -SIG`.
    ///
    /// # Panics
    /// If `kill` fails.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid();
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(ok.success(), "kill -{signal} {pid} ({})", self.name);
    }

    /// SIGKILLs it (a stopped process too) and reaps it; its exit status
    /// (that of its own end if it had ended already: see
    /// [`killed_by_sigkill`]).
    ///
    /// # Panics
    /// If the signal cannot be sent or the process not reaped.
    pub fn kill(&mut self) -> ExitStatus {
        self.child
            .kill()
            .unwrap_or_else(|e| panic!("SIGKILL {} (pid {}): {e}", self.name, self.pid()));
        self.child
            .wait()
            .unwrap_or_else(|e| panic!("reap {}: {e}", self.name))
    }

    /// SIGKILLs and reaps it, whatever fails (for `Drop` and for a test
    /// that gives up on it).
    pub fn kill_quietly(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for it to end, at most until `deadline` (polling every 10 ms);
    /// its exit status, or `None` while it still runs then.
    pub fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Asks `condition` every `every` until it returns `Some`; stops early
    /// when the process ends ([`Waited::Ended`]) or `deadline` passes
    /// ([`Waited::TimedOut`]).
    pub fn poll_until<T>(
        &mut self,
        deadline: Instant,
        every: Duration,
        mut condition: impl FnMut() -> Option<T>,
    ) -> Result<T, Waited> {
        loop {
            if let Some(t) = condition() {
                return Ok(t);
            }
            if let Some(status) = self.try_wait() {
                return Err(Waited::Ended(status));
            }
            if Instant::now() > deadline {
                return Err(Waited::TimedOut);
            }
            std::thread::sleep(every);
        }
    }
}

/// Why [`Process::poll_until`] gave up.
#[derive(Debug, Clone, Copy)]
pub enum Waited {
    /// The process ended first, so.
    Ended(ExitStatus),
    /// The deadline passed.
    TimedOut,
}

/// Whether `status` is that of a process SIGKILL ended.
pub fn killed_by_sigkill(status: ExitStatus) -> bool {
    status.signal() == Some(SIGKILL)
}

/// The whole lines of `text`: up to and with its last line break.
///
/// For a file another process is still writing: a poll that reads it
/// between two `write`s of one line must not take the half line for the
/// line (the coordinator writes each line in one call, `stderr_line!`,
/// and this keeps a poll right for any writer).
pub fn whole_lines(text: &str) -> &str {
    text.rfind('\n').map_or("", |end| &text[..=end])
}

/// The last `n` lines of `text`.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
