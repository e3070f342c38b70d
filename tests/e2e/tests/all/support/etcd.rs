//! A real etcd server for the high-availability tests (issue 15,
//! docs/ha.md): [`Etcd::start`] runs `etcd` on two free loopback ports
//! (clients, peers) with its own data directory and waits until it answers
//! `GET /health` with `"health":"true"`; [`Etcd::url`] is what `--ha` and
//! `worker --coordinator` take; [`Etcd::kill`] and [`Etcd::restart`] act
//! on it; dropping it kills it.
//!
//! etcd must be installed (`make ha-deps`, scripts/install-ha-deps.sh): a
//! missing etcd fails the test, it never skips it.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::process::{Logs, Process};

/// Longest wait for etcd to answer healthy after a start (generous: a
/// loaded 2-core machine; etcd itself is ready in under a second).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// One single-member etcd cluster, its process and its folder.
#[derive(Debug)]
pub struct Etcd {
    binary: PathBuf,
    /// The address it listens on (loopback, or a bridge's address for
    /// coordinators in network namespaces).
    host: String,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
    process: Option<Process>,
    starts: u32,
    /// TLS: the folder of `coordhost cluster certs ... --etcd-host
    /// 127.0.0.1` (`ca.pem`, `etcd.pem`, `etcd.key`); clients must present
    /// a certificate of that CA (`--client-cert-auth`). Health is then
    /// asked on a plain metrics port.
    tls: Option<PathBuf>,
    metrics_port: u16,
}

/// The `etcd` binary on `PATH` (or `/usr/bin/etcd`).
///
/// # Panics
/// With one line saying how to install it, when it is nowhere.
pub fn etcd_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("etcd"))
        .chain([PathBuf::from("/usr/bin/etcd")])
        .find(|p| p.is_file());
    on_path.unwrap_or_else(|| {
        panic!("etcd not found: `make ha-deps` installs it (scripts/install-ha-deps.sh)")
    })
}

/// A port on `host` nobody listens on a moment ago.
fn free_port(host: &str) -> u16 {
    super::ports::free_port_on(host)
}

impl Etcd {
    /// Starts etcd with its data in `dir/data` and its output in
    /// `dir/etcd.start<N>.log`, on two free loopback ports, and waits until
    /// it is healthy.
    ///
    /// # Panics
    /// If etcd is not installed, cannot be spawned, exits, or is not
    /// healthy within 30 s (the message carries its log).
    pub fn start(dir: &Path) -> Self {
        Self::start_on(dir, "127.0.0.1")
    }

    /// As [`Etcd::start`], listening on `host` (an address of this
    /// network namespace, e.g. [`super::netns::Netns::bridge_ip`]).
    ///
    /// # Panics
    /// As [`Etcd::start`].
    pub fn start_on(dir: &Path, host: &str) -> Self {
        let binary = etcd_binary();
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let mut etcd = Self {
            binary,
            dir: dir.to_path_buf(),
            host: host.to_owned(),
            client_port: free_port(host),
            peer_port: free_port(host),
            process: None,
            starts: 0,
            tls: None,
            metrics_port: 0,
        };
        etcd.spawn();
        etcd
    }

    /// As [`Etcd::start`], over TLS with client certificates
    /// (`--client-cert-auth`): its server certificate and CA from `pki`
    /// (`ca.pem`, `etcd.pem`, `etcd.key`, as `coordhost cluster certs DIR
    /// --etcd-host 127.0.0.1` writes them).
    ///
    /// # Panics
    /// As [`Etcd::start`].
    pub fn start_tls(dir: &Path, pki: &Path) -> Self {
        Self::start_tls_on(dir, pki, "127.0.0.1")
    }

    /// As [`Etcd::start_tls`], listening on `host` (an address of this
    /// network namespace, e.g. [`super::netns::Netns::bridge_ip`]; its
    /// certificate must name it: `cluster certs ... --etcd-host HOST`).
    ///
    /// # Panics
    /// As [`Etcd::start`].
    pub fn start_tls_on(dir: &Path, pki: &Path, host: &str) -> Self {
        let binary = etcd_binary();
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let mut etcd = Self {
            binary,
            dir: dir.to_path_buf(),
            host: host.to_owned(),
            client_port: free_port(host),
            peer_port: free_port(host),
            process: None,
            starts: 0,
            tls: Some(pki.to_path_buf()),
            metrics_port: free_port(host),
        };
        etcd.spawn();
        etcd
    }

    /// `etcd://127.0.0.1:<client port>` (`etcds://` with TLS): the `--ha`
    /// value.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "etcds" } else { "etcd" };
        format!("{scheme}://{}", self.endpoint())
    }

    /// `HOST:PORT` of the client endpoint.
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.host, self.client_port)
    }

    /// SIGKILLs etcd and reaps it (nothing happens if it is not running).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill_quietly();
        }
    }

    /// Starts etcd again on the same data directory and ports (killing it
    /// first if it runs) and waits until it is healthy.
    ///
    /// # Panics
    /// As [`Etcd::start`].
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The output of every start so far, for failure messages.
    pub fn log(&self) -> String {
        (1..=self.starts)
            .map(|n| {
                let p = self.log_path(n);
                format!(
                    "--- {} ---\n{}",
                    p.display(),
                    std::fs::read_to_string(&p).unwrap_or_default()
                )
            })
            .collect()
    }

    fn log_path(&self, start: u32) -> PathBuf {
        self.dir.join(format!("etcd.start{start}.log"))
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let log = self.log_path(self.starts);
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://{}:{}", self.host, self.client_port);
        let peer = format!("http://{}:{}", self.host, self.peer_port);
        let mut command = Command::new(&self.binary);
        if let Some(pki) = &self.tls {
            command
                .arg("--cert-file")
                .arg(pki.join("etcd.pem"))
                .arg("--key-file")
                .arg(pki.join("etcd.key"))
                .arg("--trusted-ca-file")
                .arg(pki.join("ca.pem"))
                .arg("--client-cert-auth")
                .arg("--listen-metrics-urls")
                .arg(format!("http://{}:{}", self.host, self.metrics_port));
        }
        command
            .arg("--name")
            .arg("e1")
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(format!("e1={peer}"))
            .arg("--heartbeat-interval")
            .arg("10")
            .arg("--election-timeout")
            .arg("100")
            .stdin(Stdio::null());
        let name = format!("etcd ({})", self.binary.display());
        self.process = Some(Process::spawn(name, &mut command, Logs::one(&log)));
        self.wait_healthy();
    }

    /// Polls `GET /health` until etcd answers healthy.
    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(p) = self.process.as_mut()
                && let Some(status) = p.try_wait()
            {
                self.process = None;
                panic!(
                    "etcd exited ({status}) before it was healthy on {}\n{}",
                    self.endpoint(),
                    self.log()
                );
            }
            if self.healthy() {
                return;
            }
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "etcd was not healthy on {} within {READY_WITHIN:?}; killed it\n{}",
                    self.endpoint(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether `GET /health` answers `"health":"true"` now.
    pub fn healthy(&self) -> bool {
        let at = if self.tls.is_some() {
            format!("{}:{}", self.host, self.metrics_port)
        } else {
            self.endpoint()
        };
        let Ok(mut s) = TcpStream::connect(&at) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let request = format!(
            "GET /health HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.endpoint()
        );
        if s.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer.contains("\"health\":\"true\"")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One `coordhost run --ha` process started by [`spawn_ha_run`], with its
/// files `<base>/<name>.err`, `.out` (the process's [`Logs`]) and
/// `.summary.json`.
pub struct HaRun {
    /// The process.
    pub process: Process,
    /// Its `--summary-json` file.
    pub summary: std::path::PathBuf,
}

/// Spawns `coordhost --cache-dir <shared> run JOB --data-dir DATA
/// --summary-json <base>/<name>.summary.json --ha <etcd> --ha-lease-ttl-s
/// TTL_S EXTRA...`, stdout and stderr to `<base>/<name>.out` / `.err` (one
/// pair per process: several coordinators share one data directory).
///
/// # Panics
/// If `base` or a file cannot be created, or the binary cannot be spawned.
pub fn spawn_ha_run(
    name: &str,
    job: &std::path::Path,
    data: &std::path::Path,
    etcd: &Etcd,
    ttl_s: u64,
    base: &std::path::Path,
    extra: &[String],
) -> HaRun {
    spawn_ha_run_as(
        super::process::coordhost(),
        name,
        job,
        data,
        etcd,
        ttl_s,
        base,
        extra,
    )
}

/// As [`spawn_ha_run`], from `command` (the `coordhost` binary, e.g. run in
/// a network namespace by [`super::netns::coordhost_in`], or with
/// `FAILPOINTS` set).
///
/// # Panics
/// As [`spawn_ha_run`].
#[expect(
    clippy::too_many_arguments,
    reason = "spawn_ha_run's, plus the command"
)]
pub fn spawn_ha_run_as(
    mut command: Command,
    name: &str,
    job: &std::path::Path,
    data: &std::path::Path,
    etcd: &Etcd,
    ttl_s: u64,
    base: &std::path::Path,
    extra: &[String],
) -> HaRun {
    std::fs::create_dir_all(base).expect("create the coordinators' folder");
    let summary = base.join(format!("{name}.summary.json"));
    command
        .arg("--cache-dir")
        .arg(super::cache_dir())
        .arg("run")
        .arg(job)
        .arg("--data-dir")
        .arg(data)
        .arg("--summary-json")
        .arg(&summary)
        .arg("--ha")
        .arg(etcd.url())
        .arg("--ha-lease-ttl-s")
        .arg(ttl_s.to_string())
        .args(extra);
    HaRun {
        process: Process::spawn(
            format!("coordhost run --ha ({name})"),
            &mut command,
            Logs::pair(&base.join(name)),
        ),
        summary,
    }
}
