//! High availability (issue 15, docs/ha.md): two figures, measured on real
//! processes (etcd, `coordhost run` coordinators, `coordhost worker`s on
//! loopback) running the TPC-H example (`examples/tpch-q1.toml` on
//! `build/data/tpch-sf0.1`, copied with absolute paths).
//!
//! 1. **Failover time**: 3 worker processes (`--coordinator
//!    etcd://…/tpch-q1`) and two coordinators (`--ha … --ha-lease-ttl-s 1`,
//!    each `--listen` on its own port, `--external-workers 3`), the second
//!    a standby. The leader is SIGKILLed as soon as it printed
//!    `scan: 4/4 finished` (the progress line follows the durable
//!    `ExecutionFinished`), while `summary` runs (its `record-delay-us`
//!    keeps it running a few seconds). Measured from the kill, on the lines
//!    the processes print (`COORDHOST_LOG`), stamped as they arrive: the
//!    standby's `leading job` line (detection by lease expiry + election),
//!    the last worker's `lost the coordinator` (heartbeat timeout), the 3
//!    workers registered with the new leader, `recovered from the job
//!    event log` (after `RecoveryFinished` is durable), the first
//!    `deploying`, the first `running` line of a worker in its new session
//!    (the first task running again). The HA row runs twice: with the
//!    default `--heartbeat-timeout-ms 2000` and with 500 (how long a worker
//!    keeps heartbeating a dead leader). Side by side, the same kill without
//!    HA, the coordinator started again at once by hand: with the same 3
//!    workers (`--coordinator 127.0.0.1:PORT`), and with embedded workers
//!    (no worker processes: the first `deploying` is the first task).
//! 2. **Steady-state cost of HA**: the same job with `record-delay-us = 0`,
//!    with `--ha` and without, runs interleaved, embedded workers and 3
//!    worker processes: median of the summary's `wall_ms` (first vertex to
//!    end) and of the process's wall time (spawn to exit; with HA it
//!    includes connecting to etcd, the campaign and revoking the lease).
//!
//! `cargo bench -p coordhost --bench ha` (`make bench-ha`) after
//! `make plugins data`; etcd must be installed (`make ha-deps`). Every
//! process is killed when the bench ends, also on a panic. Environment:
//! `COORDHOST_BENCH_BIN` (the `coordhost` binary), `COORDHOST_BENCH_TRIALS`
//! (failover trials per row, default 5), `COORDHOST_BENCH_RUNS` (runs per
//! row of figure 2, default 9), `COORDHOST_BENCH_ONLY` (`failover`,
//! `steady`), `COORDHOST_BENCH_LOGS` (a folder keeping every process's
//! output). Without `--bench` (`cargo test --benches`) it runs once, small.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

fn binary() -> PathBuf {
    std::env::var_os("COORDHOST_BENCH_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_coordhost")),
        PathBuf::from,
    )
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| {
        v.parse().unwrap_or_else(|_| panic!("{name}: a number"))
    })
}

type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

/// A child whose output lines are collected, stamped on arrival; killed
/// (SIGKILL) and reaped when dropped.
struct Proc {
    name: String,
    child: Option<Child>,
    started: Instant,
    lines: Lines,
}

impl Proc {
    fn spawn(name: &str, mut cmd: Command) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
        let lines: Lines = Arc::default();
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().expect("lines").push((Instant::now(), line));
                }
            });
        }
        Self {
            name: name.to_string(),
            child: Some(child),
            started,
            lines,
        }
    }

    /// Arrivals of the lines containing `pattern` at or after `after`.
    fn all(&self, pattern: &str, after: Instant) -> Vec<(Instant, String)> {
        let lines = self.lines.lock().expect("lines");
        lines
            .iter()
            .filter(|(t, l)| *t >= after && l.contains(pattern))
            .cloned()
            .collect()
    }

    fn first(&self, pattern: &str, after: Instant) -> Option<Instant> {
        self.all(pattern, after).first().map(|(t, _)| *t)
    }

    fn tail(&self) -> String {
        let lines = self.lines.lock().expect("lines");
        let from = lines.len().saturating_sub(30);
        let text: Vec<&str> = lines[from..].iter().map(|(_, l)| l.as_str()).collect();
        format!("--- {} ---\n{}", self.name, text.join("\n"))
    }

    /// Waits for a line with `pattern`; panics if the process ends first or
    /// after 120 s.
    fn wait_for(&mut self, pattern: &str) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(t) = self.first(pattern, self.started) {
                return t;
            }
            let ended = self
                .child
                .as_mut()
                .expect("running")
                .try_wait()
                .ok()
                .flatten();
            assert!(
                ended.is_none() && Instant::now() < deadline,
                "{} printed no `{pattern}` ({ended:?}):\n{}",
                self.name,
                self.tail()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits for the exit; panics unless it is a success. Its wall time.
    fn wait_ok(&mut self, others: &[&Proc]) -> Duration {
        let status = self.child.take().expect("running").wait().expect("wait");
        let wall = self.started.elapsed();
        if !status.success() {
            let more: Vec<String> = others.iter().map(|p| p.tail()).collect();
            panic!(
                "{} ended {status}:\n{}\n{}",
                self.name,
                self.tail(),
                more.join("\n")
            );
        }
        wall
    }

    /// SIGKILL now; the instant just before.
    fn kill(&mut self) -> Instant {
        let mut c = self.child.take().expect("running");
        let t = Instant::now();
        c.kill().expect("SIGKILL");
        c.wait().expect("reap");
        t
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(dir) = std::env::var_os("COORDHOST_BENCH_LOGS") {
            let _ = std::fs::create_dir_all(&dir);
            let name = format!(
                "{}-{}.log",
                self.name.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
                self.started.elapsed().as_nanos()
            );
            let text: Vec<String> = self.lines.lock().map_or_else(
                |_| Vec::new(),
                |l| {
                    l.iter()
                        .map(|(t, l)| {
                            format!("{:>9.3} {l}", t.duration_since(self.started).as_secs_f64())
                        })
                        .collect()
                },
            );
            let _ = std::fs::write(PathBuf::from(dir).join(name), text.join("\n"));
        }
    }
}

/// A single-member etcd on two free loopback ports, healthy when returned.
fn start_etcd(dir: &Path) -> (Proc, String) {
    let (c, p) = (free_port(), free_port());
    let client = format!("http://127.0.0.1:{c}");
    let peer = format!("http://127.0.0.1:{p}");
    let mut cmd = Command::new("etcd");
    cmd.args(["--name", "e1", "--data-dir"])
        .arg(dir)
        .args([
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("e1={peer}")])
        .args(["--heartbeat-interval", "10", "--election-timeout", "100"]);
    let etcd = Proc::spawn("etcd", cmd);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let healthy = std::net::TcpStream::connect(("127.0.0.1", c)).is_ok_and(|mut s| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut answer = String::new();
            s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .is_ok()
                && s.read_to_string(&mut answer).is_ok()
                && answer.contains("\"health\":\"true\"")
        });
        if healthy {
            return (etcd, format!("etcd://127.0.0.1:{c}"));
        }
        assert!(
            Instant::now() < deadline,
            "etcd not healthy:\n{}",
            etcd.tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The TPC-H example with absolute paths and `summary`'s `record-delay-us`.
fn write_job(path: &Path, record_delay_us: u64) {
    let build = workspace().join("build");
    for p in [
        "data/tpch-sf0.1",
        "plugins/file-enumerator.wasm",
        "plugins/local-shuffle.wasm",
    ] {
        assert!(
            build.join(p).exists(),
            "{p} missing: run `make plugins data`"
        );
    }
    let text = std::fs::read_to_string(workspace().join("examples/tpch-q1.toml"))
        .expect("examples/tpch-q1.toml")
        .replace("${job_dir}/../build", &build.to_string_lossy())
        .replace("../build", &build.to_string_lossy())
        .replace(
            "record-delay-us = 250000",
            &format!("record-delay-us = {record_delay_us}"),
        );
    std::fs::write(path, text).expect("job file");
}

const JOB: &str = "tpch-q1";
const COORDINATOR_LOG: &str = "coordhost=info,coordhost::scheduler::master::deploy=debug";

fn coordinator(job: &Path, data: &Path, summary: &Path, extra: &[String], log: &str) -> Command {
    let mut cmd = Command::new(binary());
    cmd.arg("--cache-dir")
        .arg(workspace().join("build/cache"))
        .arg("run")
        .arg(job)
        .arg("--data-dir")
        .arg(data)
        .arg("--summary-json")
        .arg(summary)
        .args(extra)
        .env("COORDHOST_LOG", log);
    cmd
}

fn workers(coordinator: &str, dir: &Path) -> Vec<Proc> {
    (0..3)
        .map(|i| {
            let mut cmd = Command::new(binary());
            cmd.arg("--cache-dir")
                .arg(workspace().join("build/cache"))
                .args(["worker", "--coordinator", coordinator, "--data-dir"])
                .arg(dir.join(format!("w{i}")))
                .args(["--slots", "2", "--id", &format!("w{i}")])
                .args(["--keep-partitions-ms", "600000"])
                .env("COORDHOST_LOG", "coordhost::remote=debug");
            Proc::spawn(&format!("worker w{i}"), cmd)
        })
        .collect()
}

/// `--listen 127.0.0.1:PORT --external-workers 3`.
fn external(port: u16) -> Vec<String> {
    vec![
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--external-workers".into(),
        "3".into(),
        "--worker-wait-ms".into(),
        "60000".into(),
    ]
}

fn ha(url: &str) -> Vec<String> {
    vec![
        "--ha".into(),
        url.into(),
        "--ha-lease-ttl-s".into(),
        "1".into(),
    ]
}

fn summary(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("summary file"))
        .expect("summary JSON")
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Ha,
    RestartWorkers,
    RestartEmbedded,
}

/// Milliseconds from the kill to each step (None: no such step).
type Steps = [Option<f64>; 6];
const STEPS: [&str; 6] = [
    "leading",
    "wrk lost",
    "3 wrk reg",
    "recovered",
    "1st deploy",
    "1st task",
];

fn failover_trial(
    root: &Path,
    job: &Path,
    url: &str,
    (mode, heartbeat_ms): (Mode, u64),
    n: usize,
) -> Steps {
    let dir = root.join(format!("failover-{n}"));
    std::fs::create_dir_all(&dir).expect("folder");
    let data = dir.join("data");
    let (port_a, port_b) = (free_port(), free_port());
    let wrk = match mode {
        Mode::Ha => workers(&format!("{url}/{JOB}"), &dir),
        Mode::RestartWorkers => workers(&format!("127.0.0.1:{port_a}"), &dir),
        Mode::RestartEmbedded => Vec::new(),
    };
    let extra = |port: u16| {
        let mut e = if mode == Mode::RestartEmbedded {
            Vec::new()
        } else {
            external(port)
        };
        if mode == Mode::Ha {
            e.extend(ha(url));
        }
        if mode != Mode::RestartEmbedded {
            e.extend(["--heartbeat-timeout-ms".into(), heartbeat_ms.to_string()]);
        }
        e
    };
    let mut a = Proc::spawn(
        "coordinator a",
        coordinator(
            job,
            &data,
            &dir.join("a.json"),
            &extra(port_a),
            COORDINATOR_LOG,
        ),
    );
    let mut b = None;
    if mode == Mode::Ha {
        a.wait_for("coordhost run: leading job");
        let mut s = Proc::spawn(
            "coordinator b",
            coordinator(
                job,
                &data,
                &dir.join("b.json"),
                &extra(port_b),
                COORDINATOR_LOG,
            ),
        );
        s.wait_for("coordhost run: standby for job");
        b = Some(s);
    }
    a.wait_for("scan: 4/4 finished");
    let killed = a.kill();
    let mut b = b.unwrap_or_else(|| {
        // Without HA: started again by hand at once, on the same port.
        Proc::spawn(
            "coordinator a again",
            coordinator(
                job,
                &data,
                &dir.join("b.json"),
                &extra(port_a),
                COORDINATOR_LOG,
            ),
        )
    });
    let mut others: Vec<&Proc> = wrk.iter().collect();
    others.push(&a);
    b.wait_ok(&others);
    let s = summary(&dir.join("b.json"));
    assert_eq!(s["status"], "finished", "{s}");
    assert!(
        s["tasks_skipped"].as_u64() >= Some(4),
        "the scan was not skipped: {s}"
    );
    let ms = |t: Option<Instant>| t.map(|t| t.duration_since(killed).as_secs_f64() * 1e3);
    // Each worker's first registration with the new coordinator; the last of the 3.
    let mut registered: Vec<(String, Instant)> = Vec::new();
    for (t, l) in b.all("worker registered", killed) {
        let id = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("worker="))
            .unwrap_or_default()
            .to_string();
        if !registered.iter().any(|(w, _)| *w == id) {
            registered.push((id, t));
        }
    }
    let all_lost = (!wrk.is_empty())
        .then(|| {
            wrk.iter()
                .map(|w| w.first("lost the coordinator", killed))
                .collect::<Option<Vec<_>>>()
        })
        .flatten()
        .and_then(|v| v.into_iter().max());
    let first_running = wrk
        .iter()
        .filter_map(|w| {
            let reg = w.first("worker: registered ", killed)?;
            w.first("worker: running ", reg)
        })
        .min();
    let deploy = b.first("deploying", killed);
    [
        ms(b.first("coordhost run: leading job", killed)),
        ms(all_lost),
        (registered.len() == 3)
            .then(|| ms(registered.iter().map(|(_, t)| *t).max()))
            .flatten(),
        ms(b.first("recovered from the job event log", killed)),
        ms(deploy),
        ms(if wrk.is_empty() {
            deploy
        } else {
            first_running
        }),
    ]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn failover(root: &Path, url: &str, trials: usize) {
    let job = root.join("job-slow.toml");
    write_job(&job, 250_000);
    println!(
        "\n1. failover: TPC-H Q1 SF 0.1 (summary record-delay-us 250000), leader SIGKILLed at `scan: 4/4 finished`; ms from the kill, median / max of {trials} trial(s); lease TTL 1000 ms (configured)"
    );
    print!("{:>26}", "mode");
    for s in STEPS {
        print!(" {s:>13}");
    }
    println!();
    let mut n = 0;
    for (mode, name) in [
        ((Mode::Ha, 2000), "HA, 3 workers"),
        ((Mode::Ha, 500), "HA, 3 workers, hb 500 ms"),
        ((Mode::RestartWorkers, 2000), "no HA, restart, 3 workers"),
        ((Mode::RestartEmbedded, 0), "no HA, restart, embedded"),
    ] {
        let runs: Vec<Steps> = (0..trials)
            .map(|i| {
                n += 1;
                let r = failover_trial(root, &job, url, mode, n);
                let shown: Vec<String> = r
                    .iter()
                    .map(|v| v.map_or("-".into(), |v| format!("{v:.0}")))
                    .collect();
                eprintln!("  {name} trial {}/{trials}: {}", i + 1, shown.join(" "));
                r
            })
            .collect();
        print!("{name:>26}");
        for k in 0..STEPS.len() {
            let mut v: Vec<f64> = runs.iter().filter_map(|r| r[k]).collect();
            if v.is_empty() {
                print!(" {:>13}", "-");
            } else {
                let med = median(&mut v);
                print!(" {:>13}", format!("{med:.0} / {:.0}", v[v.len() - 1]));
            }
        }
        println!();
    }
    println!(
        "   leading = the standby's `leading job` line (lease expiry + election); wrk lost = the last worker's `lost the coordinator` (the heartbeat timeout the coordinator gave it: --heartbeat-timeout-ms, default 2000, hb 500 = 500; heartbeats every tenth of it); \
         3 wrk reg = the 3rd worker registered with the new coordinator; recovered = `recovered from the job event log` (RecoveryFinished durable); \
         1st deploy = the scheduler's first `deploying`; 1st task = a worker's first `running` in its new session (embedded: the first deploy)"
    );
}

fn steady(root: &Path, url: &str, runs: usize) {
    let job = root.join("job-fast.toml");
    write_job(&job, 0);
    println!(
        "\n2. steady-state cost of --ha: TPC-H Q1 SF 0.1 (record-delay-us 0), runs interleaved, median of {runs} run(s)"
    );
    println!(
        "{:>10} {:>12} {:>12} {:>7} {:>14} {:>14} {:>7}",
        "workers", "job s", "job s --ha", "ratio", "process s", "process s --ha", "ratio"
    );
    let mut n = 0;
    for with_workers in [false, true] {
        let dir = root.join(format!("steady-{with_workers}"));
        std::fs::create_dir_all(&dir).expect("folder");
        let (port, port_ha) = (free_port(), free_port());
        let (_plain, _ha) = if with_workers {
            (
                workers(&format!("127.0.0.1:{port}"), &dir.join("plain")),
                workers(&format!("{url}/{JOB}"), &dir.join("ha")),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        let mut figures = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for i in 0..runs {
            for with_ha in [false, true] {
                n += 1;
                let mut extra = if with_workers {
                    external(if with_ha { port_ha } else { port })
                } else {
                    Vec::new()
                };
                if with_ha {
                    extra.extend(ha(url));
                }
                let out = dir.join(format!("run-{n}"));
                let sum = dir.join(format!("summary-{n}.json"));
                let mut p =
                    Proc::spawn("coordinator", coordinator(&job, &out, &sum, &extra, "warn"));
                let wall = p.wait_ok(&[]).as_secs_f64();
                let s = summary(&sum);
                assert_eq!(s["status"], "finished", "{s}");
                let job_s = s["wall_ms"].as_f64().expect("wall_ms") / 1e3;
                eprintln!(
                    "  workers {with_workers} --ha {with_ha} run {}/{runs}: job {job_s:.3} s, process {wall:.3} s",
                    i + 1
                );
                let k = usize::from(with_ha);
                figures[k].push(job_s);
                figures[2 + k].push(wall);
                let _ = std::fs::remove_dir_all(&out);
            }
        }
        let [j, jh, w, wh] = figures.map(|mut v| median(&mut v));
        println!(
            "{:>10} {j:>12.3} {jh:>12.3} {:>6.3}x {w:>14.3} {wh:>14.3} {:>6.3}x",
            if with_workers { "3 procs" } else { "embedded" },
            jh / j,
            wh / w
        );
    }
    println!(
        "   job s = the summary's wall_ms (first vertex to end); process s = spawn to exit (with worker processes it includes waiting for them to register, \
         which after the previous run's coordinator exited depends on their heartbeat timeout and backoff)"
    );
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let only = std::env::var("COORDHOST_BENCH_ONLY").unwrap_or_else(|_| "failover,steady".into());
    let root = tempfile::Builder::new()
        .prefix("coordhost-bench-ha")
        .tempdir()
        .expect("temporary folder");
    let (_etcd, url) = start_etcd(&root.path().join("etcd"));
    println!(
        "high availability: coordhost {} ; {} cores ; etcd at {url}",
        binary().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    // One run first, not counted: compiles the components into build/cache.
    let warm = root.path().join("job-warm.toml");
    write_job(&warm, 0);
    let w = root.path().join("warm");
    Proc::spawn(
        "warm-up",
        coordinator(&warm, &w, &root.path().join("warm.json"), &[], "warn"),
    )
    .wait_ok(&[]);
    if only.contains("failover") {
        failover(
            root.path(),
            &url,
            env_num("COORDHOST_BENCH_TRIALS", if quick { 1 } else { 5 }),
        );
    }
    if only.contains("steady") {
        steady(
            root.path(),
            &url,
            env_num("COORDHOST_BENCH_RUNS", if quick { 1 } else { 9 }),
        );
    }
}
