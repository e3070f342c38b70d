//! Helpers of the `workers_*` tests (issue 14): real `coordhost worker`
//! processes beside a real `coordhost run --listen ... --external-workers N`
//! ([`super::crash::Coordhost`] with [`external_args`]).
//!
//! - [`free_port`]: a loopback port nobody listens on now.
//! - [`Workers::start`] spawns N workers, each with its own data directory
//!   and stderr file; [`Workers::kill`], [`Workers::stop`] /
//!   [`Workers::resume`] (SIGSTOP / SIGCONT) and [`Workers::restart`] act on
//!   one; dropping [`Workers`] kills them all.
//! - [`Workers::files_left`]: every file still in the workers' partition
//!   and sink folders (after a finished job: none).
//! - [`Workers::start_keeping_with`]: more arguments per worker (e.g.
//!   `--exit-when-idle`) and a keep time; [`Workers::wait_exit`] waits for
//!   one to end on its own; [`Workers::address`] is where one serves.
//! - [`Workers::start_in_namespaces_with`]: workers each in a network namespace
//!   of [`super::netns::Netns`], listening on its address.
//! - [`Workers::start_with_env`]: workers with more environment variables
//!   (an object store's `AWS_*`); [`Workers::start_in_namespaces_with_env`]
//!   the same in network namespaces.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use super::cache_dir;
use super::process::{Logs, Process, coordhost, killed_by_sigkill, last_lines, whole_lines};

/// A loopback address with a port nobody listened on a moment ago
/// ([`free_port_on`](super::ports::free_port_on)).
///
/// # Panics
/// If no port can be bound.
pub fn free_port() -> String {
    format!("127.0.0.1:{}", free_port_on("127.0.0.1"))
}

pub use super::ports::free_port_on;

/// The `run` arguments that put a job on `n` worker processes registering
/// at `addr`, giving a silent worker up after `heartbeat_ms`.
pub fn external_args(addr: &str, n: usize, heartbeat_ms: u64) -> Vec<String> {
    vec![
        "--listen".into(),
        addr.into(),
        "--external-workers".into(),
        n.to_string(),
        "--heartbeat-timeout-ms".into(),
        heartbeat_ms.to_string(),
        "--worker-wait-ms".into(),
        "60000".into(),
    ]
}

/// Worker processes of one test.
#[derive(Debug)]
pub struct Workers {
    coordinator: String,
    base: PathBuf,
    slots: u32,
    keep_ms: u64,
    children: Vec<Option<Process>>,
    starts: u32,
    /// Per worker: the network namespace it runs in and its `--listen`
    /// address (none: the root namespace, loopback).
    places: Vec<(String, String)>,
    /// `COORDHOST_LOG` of the workers.
    log: &'static str,
    /// Per worker: more arguments (e.g. its TLS files).
    extra: Vec<Vec<String>>,
    /// Per worker index: the `FAILPOINTS` of its processes (test knobs).
    knobs: Vec<(usize, String)>,
    /// More environment variables of every worker (e.g. an object
    /// store's `AWS_*`).
    env: Vec<(String, String)>,
}

impl Workers {
    /// Starts `n` workers (`w0` … `w<n-1>`, `slots` slots each) for the
    /// coordinator at `coordinator`, data in `base/w<i>`.
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start(n: usize, coordinator: &str, base: &Path, slots: u32) -> Self {
        Self::start_keeping(n, coordinator, base, slots, 60_000)
    }

    /// As [`Workers::start`], worker `i` with the more arguments
    /// `extra(i)` (e.g. its TLS files).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_with(
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        let mut w = Self::unstarted(coordinator, base, slots);
        w.log = "coordhost::remote=info,coordhost::tls=info";
        w.extra = (0..n).map(extra).collect();
        w.launch(n)
    }

    /// As [`Workers::start`], keeping partitions for `keep_ms` while no
    /// coordinator answers (`--keep-partitions-ms`).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_keeping(
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        keep_ms: u64,
    ) -> Self {
        let mut w = Self::unstarted(coordinator, base, slots);
        w.keep_ms = keep_ms;
        w.launch(n)
    }

    /// As [`Workers::start_keeping`], worker `i` with the more arguments
    /// `extra(i)` (e.g. `--exit-when-idle`), logging `coordhost::remote` at
    /// info level.
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_keeping_with(
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        keep_ms: u64,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        let mut w = Self::unstarted(coordinator, base, slots);
        w.keep_ms = keep_ms;
        w.extra = (0..n).map(extra).collect();
        w.launch(n)
    }

    /// Starts one worker (`w<i>`, `slots` slots, data in `base/w<i>`) in
    /// each namespace of `net`, listening on the namespace's address (port
    /// chosen by the system), for the coordinator at `coordinator`, with
    /// the more arguments `extra(i)` (e.g. `--tls-cert ...`); they log at
    /// debug level (`coordhost::remote=debug`: each attempt run, each
    /// partition deleted).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_in_namespaces_with(
        net: &super::netns::Netns,
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        Self::start_in_namespaces_from_with(net, 0, n, coordinator, base, slots, extra)
    }

    /// As [`Workers::start_in_namespaces_with`], speaking plain gRPC on
    /// the namespaces' addresses (`--insecure-listen`).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_in_namespaces(
        net: &super::netns::Netns,
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
    ) -> Self {
        Self::start_in_namespaces_from_with(net, 0, n, coordinator, base, slots, |_| {
            vec!["--insecure-listen".into()]
        })
    }

    /// As [`Workers::start_in_namespaces`] (plain gRPC), worker `w<i>` in
    /// namespace `first + i` (the namespaces before `first` hold
    /// coordinators).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_in_namespaces_from(
        net: &super::netns::Netns,
        first: usize,
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
    ) -> Self {
        Self::start_in_namespaces_from_with(net, first, n, coordinator, base, slots, |_| {
            vec!["--insecure-listen".into()]
        })
    }

    /// As [`Workers::start_in_namespaces_from`], worker `i` with the more
    /// arguments `extra(i)` (e.g. its TLS files).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_in_namespaces_from_with(
        net: &super::netns::Netns,
        first: usize,
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Self {
        let mut w = Self::unstarted(coordinator, base, slots);
        w.places = (first..first + n)
            .map(|i| (net.name(i).to_string(), format!("{}:0", net.ip(i))))
            .collect();
        w.log = "coordhost::remote=debug,coordhost::tls=debug";
        w.extra = (0..n).map(extra).collect();
        w.launch(n)
    }

    /// As [`Workers::start_in_namespaces`] (plain gRPC, worker `w<i>` in
    /// namespace `i`), every worker with the environment variables `env`
    /// (e.g. the `AWS_*` variables of an object store on the bridge).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_in_namespaces_with_env(
        net: &super::netns::Netns,
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        env: Vec<(String, String)>,
    ) -> Self {
        let mut w = Self::unstarted(coordinator, base, slots);
        w.places = (0..n)
            .map(|i| (net.name(i).to_string(), format!("{}:0", net.ip(i))))
            .collect();
        w.log = "coordhost::remote=debug";
        w.extra = (0..n).map(|_| vec!["--insecure-listen".into()]).collect();
        w.env = env;
        w.launch(n)
    }

    /// As [`Workers::start`], worker `i` of each `(i, failpoints)` of
    /// `knobs` started with `FAILPOINTS=failpoints` (the test knobs of
    /// `host/src/failpoints.rs`, e.g. `worker::fail-every-task=return`).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_with_knobs(
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        knobs: &[(usize, &str)],
    ) -> Self {
        let mut w = Self::unstarted(coordinator, base, slots);
        w.knobs = knobs.iter().map(|(i, k)| (*i, (*k).to_owned())).collect();
        w.launch(n)
    }

    /// As [`Workers::start`], every worker with the environment variables
    /// `env` (e.g. the `AWS_*` variables of a test's object store).
    ///
    /// # Panics
    /// If a worker cannot be spawned.
    pub fn start_with_env(
        n: usize,
        coordinator: &str,
        base: &Path,
        slots: u32,
        env: Vec<(String, String)>,
    ) -> Self {
        let mut w = Self::unstarted(coordinator, base, slots);
        w.env = env;
        w.launch(n)
    }

    /// The workers of one test before any is spawned: defaults that the
    /// constructors above change (partitions kept 60 s, loopback, info logs).
    fn unstarted(coordinator: &str, base: &Path, slots: u32) -> Self {
        Self {
            coordinator: coordinator.into(),
            base: base.to_path_buf(),
            slots,
            keep_ms: 60_000,
            children: Vec::new(),
            starts: 0,
            places: Vec::new(),
            log: "coordhost::remote=info",
            extra: Vec::new(),
            knobs: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Spawns workers `w0` … `w<n-1>` as configured.
    fn launch(mut self, n: usize) -> Self {
        for i in 0..n {
            let c = self.spawn(i);
            self.children.push(Some(c));
        }
        self
    }

    fn spawn(&mut self, i: usize) -> Process {
        self.starts += 1;
        let err = self.base.join(format!("w{i}.start{}.err", self.starts));
        std::fs::create_dir_all(&self.base).expect("worker base dir");
        let mut command = match self.places.get(i) {
            Some((ns, _)) => super::netns::coordhost_in(ns),
            None => coordhost(),
        };
        command
            .arg("--cache-dir")
            .arg(cache_dir())
            .arg("worker")
            .arg("--coordinator")
            .arg(&self.coordinator)
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .arg("--slots")
            .arg(self.slots.to_string())
            .arg("--id")
            .arg(format!("w{i}"))
            .arg("--keep-partitions-ms")
            .arg(self.keep_ms.to_string())
            .args(
                self.places
                    .get(i)
                    .into_iter()
                    .flat_map(|(_, listen)| ["--listen", listen.as_str()]),
            )
            .args(self.extra.get(i).into_iter().flatten())
            .env("COORDHOST_LOG", self.log)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .envs(
                self.knobs
                    .iter()
                    .filter(|(k, _)| *k == i)
                    .map(|(_, f)| ("FAILPOINTS", f.as_str())),
            );
        Process::spawn(format!("worker w{i}"), &mut command, Logs::stderr(&err))
    }

    /// Worker `i`'s process id.
    ///
    /// # Panics
    /// If it is not running.
    pub fn pid(&self, i: usize) -> u32 {
        self.children[i].as_ref().expect("worker running").pid()
    }

    /// Worker `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.base.join(format!("w{i}"))
    }

    /// SIGKILLs worker `i` and reaps it.
    ///
    /// # Panics
    /// If it is not running or did not die of SIGKILL.
    pub fn kill(&mut self, i: usize) {
        let mut p = self.children[i].take().expect("worker running");
        let status = p.kill();
        assert!(killed_by_sigkill(status), "worker w{i} ended {status}");
    }

    /// Sends `signal` (by `kill -SIG`) to worker `i`.
    fn signal(&self, i: usize, signal: &str) {
        self.children[i]
            .as_ref()
            .expect("worker running")
            .signal(signal);
    }

    /// Pauses worker `i` (SIGSTOP).
    pub fn stop(&self, i: usize) {
        self.signal(i, "STOP");
    }

    /// Resumes worker `i` (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.signal(i, "CONT");
    }

    /// Starts worker `i` again (a new process, same id and data directory)
    /// after it was killed.
    pub fn restart(&mut self, i: usize) {
        assert!(self.children[i].is_none(), "w{i} still runs");
        let c = self.spawn(i);
        self.children[i] = Some(c);
    }

    /// Waits up to `within` for worker `i` to end on its own; its exit
    /// status (the process reaped, no longer counted as running), or `None`
    /// while it still runs.
    ///
    /// # Panics
    /// If it was not started or was reaped already.
    pub fn wait_exit(&mut self, i: usize, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        let process = self.children[i].as_mut().expect("worker running");
        let status = process.wait_until(deadline)?;
        self.children[i] = None;
        Some(status)
    }

    /// The address worker `i` serves on, from its log (`serving on
    /// ADDR`), waiting up to a minute for it.
    ///
    /// # Panics
    /// If it says none within a minute.
    pub fn address(&self, i: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let log = self.log_of(i);
            if let Some(addr) = whole_lines(&log).lines().find_map(|l| {
                l.split_once(": serving on ")
                    .map(|(_, a)| a.trim().to_owned())
            }) {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "w{i} never said where it serves:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether worker `i` runs.
    pub fn is_running(&mut self, i: usize) -> bool {
        self.children[i].as_mut().is_some_and(Process::is_running)
    }

    /// Every file left in the `partitions` and `sink` folders of the
    /// workers that run (a killed worker's folder is cleared by the next
    /// worker process started on it).
    pub fn files_left(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for i in (0..self.children.len()).filter(|&i| self.children[i].is_some()) {
            for sub in ["partitions", "sink"] {
                walk(&self.data_dir(i).join(sub), &mut out);
            }
        }
        out
    }

    /// The whole stderr of worker `i`, all its starts, oldest first.
    pub fn log_of(&self, i: usize) -> String {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&self.base)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.starts_with(&format!("w{i}.start")) && n.ends_with(".err")
                })
            })
            .collect();
        paths.sort_by_key(|p| {
            let n = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            n.trim_start_matches(&format!("w{i}.start"))
                .trim_end_matches(".err")
                .parse::<u32>()
                .unwrap_or(0)
        });
        paths
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect()
    }

    /// The workers' stderr, all starts, for failure messages.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        if let Ok(entries) = std::fs::read_dir(&self.base) {
            let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            paths.sort();
            for p in paths
                .iter()
                .filter(|p| p.extension().is_some_and(|e| e == "err"))
            {
                let t = std::fs::read_to_string(p).unwrap_or_default();
                text += &format!("--- {} ---\n{}\n", p.display(), last_lines(&t, 15));
            }
        }
        text
    }
}

/// Every file below `dir` (none if it does not exist).
pub fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    walk(dir, out);
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for p in self.children.iter_mut().flatten() {
            p.kill_quietly();
        }
    }
}
