//! Issue 15's failure matrix (docs/ha.md): seeded trials of the word count
//! job on one real etcd, 3 real `coordhost worker` processes (`--coordinator
//! etcd://.../wordcount`) and two real `coordhost run --ha` coordinators per
//! trial (each `--listen` on its own port, `--external-workers 3`, lease TTL
//! 1 s, heartbeat timeout 1 s), a fresh data directory per trial.
//!
//! Per trial, 1 or 2 faults at seeded moments (300–3000 ms after the first
//! coordinator leads), each one of:
//!
//! - SIGKILL of the leader (the coordinator with the newest `leading` line
//!   that still runs);
//! - SIGKILL of a standby;
//! - SIGSTOP of the leader for 1.5–3 s (past its lease), then SIGCONT;
//! - SIGKILL of a worker, started again at once;
//! - SIGKILL of etcd, started again after 0.5–2 s.
//!
//! A fault whose target does not exist at that moment (no standby, the
//! leader already paused, the job already finished) is skipped and says so
//! in the trial's row.
//!
//! Rules of a trial (what the test decides and checks):
//!
//! - Until the job has finished, two coordinators run (a paused one counts):
//!   whenever one has ended (killed, or exited with an allowed error) a new
//!   one (`C`, `D`, ...) is started as a standby, as soon as etcd runs.
//! - Every coordinator must end by itself except the ones the test kills:
//!   exit 0 with summary status `finished` (the one that finished the job,
//!   and the standbys elected after it, which find it finished), or exit 1
//!   with error lines that each say `lost the leadership of job` (the
//!   keep-alive thread's `coordhost: lost the leadership ...; stopping`, or
//!   a fenced step that failed first, e.g. `coordhost: recording a job
//!   event failed: ...: lost the leadership of job ...`) when it was paused
//!   by the test or etcd was down while it ran, or exit 1 with a one-line
//!   `coordhost: --ha: ...` error when etcd was down while it ran (a clear
//!   error: no coordinator can run without etcd). Any other end fails the
//!   test.
//! - Once a coordinator exited 0 with the job finished, the others must end
//!   within [`AFTER_FINISH`] (none is killed by the test then).
//! - The output equals the counts the test computes itself (sorted; no word
//!   twice), the sink folder holds `_SUCCESS` and `part-NNNNN.txt` files
//!   numbered 0..n without gaps, each once, and nothing else,
//!   no published file changed (inode, length, mtime) after the first
//!   coordinator finished — except `_SUCCESS`'s mtime: a standby elected
//!   after the job finished recovers it as finished and writes the empty
//!   marker again (same inode, same length 0) —, every worker
//!   (restarted ones too) still runs, and no partition or staged output is
//!   left on the workers within [`CLEAN_WITHIN`].
//! - A trial lasts at most [`TRIAL_BOUND`] (else it fails with the seed, the
//!   trial's actions and every process's stderr tail): the whole test at
//!   most `TRIALS` × ([`TRIAL_BOUND`] + [`CLEAN_WITHIN`]).
//!
//! Two ends fail the test only at its end, listing each occurrence, so
//! that the rest of the matrix still runs (both were product bugs this test
//! found, now fixed; docs/ha.md, "Failure matrix"):
//! - a standby that gives up its campaign (`--ha: ... campaign: ...`)
//!   while etcd runs: the trial starts a new standby and goes on;
//! - a job that fails (`... failed on attempt N (of at most 3)`) although a
//!   coordinator could run: the trial is abandoned (coordinators killed,
//!   workers restarted so that its partitions do not count in the next
//!   trial) and the next trial runs.
//!
//! `COORDHOST_CRASH_SEED` replays a seed (printed at the start);
//! `COORDHOST_HA_TRIALS` sets the number of trials (default 30).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::support::crash::{
    Fixture, JOB, Rng, RunSummary, WordJob, expected_output, first_difference, output_dir, seed,
    sorted_output,
};
use crate::support::etcd::Etcd;
use crate::support::process::{Process, whole_lines};
use crate::support::workers::{Workers, external_args, free_port};

/// Lease TTL of the coordinators, seconds.
const TTL_S: u64 = 1;
/// Heartbeat timeout between coordinators and workers, ms.
const HEARTBEAT_MS: u64 = 1000;
/// Default number of trials.
const TRIALS: u32 = 30;
/// Longest a trial may take, from the first coordinator's start to the
/// last coordinator's end.
const TRIAL_BOUND: Duration = Duration::from_secs(90);
/// Longest the other coordinators may run once one finished the job.
const AFTER_FINISH: Duration = Duration::from_secs(20);
/// Longest the workers may keep partitions or staged output after the job.
const CLEAN_WITHIN: Duration = Duration::from_secs(20);
/// Number of workers.
const WORKERS: usize = 3;
/// A standby that waited at least this long and then exited with `--ha:
/// ... campaign: ... Timeout expired` while etcd ran gave up its campaign
/// (see the module's doc; once caused by the etcd client's 5 s request
/// timeout bounding the blocking `Campaign` call).
const CAMPAIGN_TIMEOUT_BUG: Duration = Duration::from_millis(4500);

/// One fault of a trial.
#[derive(Debug, Clone, Copy)]
enum Fault {
    KillLeader,
    KillStandby,
    /// Pause the leader this long.
    PauseLeader(Duration),
    KillWorker(usize),
    /// Etcd down this long.
    RestartEtcd(Duration),
}

/// What the test does at a moment of a trial.
#[derive(Debug, Clone, Copy)]
enum Action {
    Fault(Fault),
    /// SIGCONT coordinator `i` (of the trial's list).
    Resume(usize),
    /// Start etcd again.
    EtcdUp,
}

/// One `coordhost run --ha` process of a trial.
struct Coord {
    name: String,
    process: Process,
    summary: PathBuf,
    started: Instant,
    /// How it ended and when the test saw it.
    ended: Option<(ExitStatus, Instant)>,
    killed: bool,
    /// Paused by the test now.
    paused: bool,
    /// Paused by the test at some point.
    was_paused: bool,
}

impl Coord {
    fn start(name: String, job: &Path, data: &Path, etcd: &Etcd, base: &Path) -> Self {
        let extra = external_args(&free_port(), WORKERS, HEARTBEAT_MS);
        let crate::support::etcd::HaRun { process, summary } =
            crate::support::etcd::spawn_ha_run(&name, job, data, etcd, TTL_S, base, &extra);
        Self {
            name,
            process,
            summary,
            started: Instant::now(),
            ended: None,
            killed: false,
            paused: false,
            was_paused: false,
        }
    }

    fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// The term of its `leading job` line, once it printed it.
    fn term(&self) -> Option<u64> {
        let needle = format!("coordhost run: leading job `{JOB}` (term ");
        let text = self.stderr();
        let line = whole_lines(&text).lines().find(|l| l.contains(&needle))?;
        line.split("(term ")
            .nth(1)?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    }

    fn running(&self) -> bool {
        self.ended.is_none()
    }

    fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// SIGKILLs it (even paused) and reaps it.
    fn kill(&mut self) {
        let status = self.process.kill();
        self.killed = true;
        self.paused = false;
        self.ended = Some((status, Instant::now()));
    }

    /// Its stderr's last lines, labelled.
    fn tail(&self) -> String {
        format!(
            "--- coordinator {} ({}, {}) ---\n{}",
            self.name,
            self.process.stderr_path().display(),
            match &self.ended {
                None => "running".to_owned(),
                Some((s, _)) => format!("{s}"),
            },
            self.process.stderr_tail(25)
        )
    }
}

impl Drop for Coord {
    fn drop(&mut self) {
        self.process.kill_quietly();
    }
}

/// Every file and folder of the sink folder → (inode, length, mtime ns).
fn output_state(data: &Path) -> BTreeMap<String, (u64, u64, i64)> {
    std::fs::read_dir(output_dir(data))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                (m.ino(), m.len(), m.mtime() * 1_000_000_000 + m.mtime_nsec()),
            ))
        })
        .collect()
}

/// Checks the sink folder holds `_SUCCESS` and `part-<i>.txt` (`i`
/// zero-padded) for `i` in `0..n`, each once, and nothing else; returns n.
fn check_part_names(data: &Path) -> Result<usize, String> {
    let names: Vec<String> = output_state(data).into_keys().collect();
    let mut numbers: Vec<u64> = Vec::new();
    let mut others = Vec::new();
    for n in &names {
        match n
            .strip_prefix("part-")
            .and_then(|r| r.strip_suffix(".txt"))
            .and_then(|r| r.parse().ok())
        {
            Some(i) => numbers.push(i),
            None if n == "_SUCCESS" => {}
            None => others.push(n.clone()),
        }
    }
    numbers.sort_unstable();
    let want: Vec<u64> = (0..numbers.len() as u64).collect();
    if numbers != want || !others.is_empty() || !names.iter().any(|n| n == "_SUCCESS") {
        return Err(format!("sink folder holds {names:?}"));
    }
    Ok(numbers.len())
}

/// The sink folder's state as compared before and after the other
/// coordinators end: every entry's (inode, length, mtime), except
/// `_SUCCESS`'s mtime (a coordinator elected after the job finished
/// recovers it as finished and writes the empty marker again; see the
/// module's doc).
fn published_state(data: &Path) -> BTreeMap<String, (u64, u64, i64)> {
    let mut s = output_state(data);
    if let Some(v) = s.get_mut("_SUCCESS") {
        v.2 = 0;
    }
    s
}

/// At most the first 110 characters of `line`, for the rows.
fn short(line: &str) -> String {
    match line.char_indices().nth(110) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_owned(),
    }
}

/// The plan of trial `t`: its faults, sorted by their moment.
fn plan(rng: &mut Rng) -> Vec<(Duration, Fault)> {
    let n = 1 + rng.below(2);
    let mut faults: Vec<(Duration, Fault)> = (0..n)
        .map(|_| {
            let at = Duration::from_millis(300 + rng.below(2700));
            let fault = match rng.below(5) {
                0 => Fault::KillLeader,
                1 => Fault::KillStandby,
                2 => Fault::PauseLeader(Duration::from_millis(1500 + rng.below(1500))),
                3 => Fault::KillWorker(rng.below(WORKERS as u64) as usize),
                _ => Fault::RestartEtcd(Duration::from_millis(500 + rng.below(1500))),
            };
            (at, fault)
        })
        .collect();
    faults.sort_by_key(|(at, _)| *at);
    faults
}

/// What one trial did, for its row.
struct Outcome {
    actions: Vec<String>,
    finisher: String,
    /// `None`: the job failed (see [`Trial::job_failures`]).
    summary: Option<RunSummary>,
    ends: Vec<String>,
    took: Duration,
}

/// Everything one trial needs.
struct Trial<'a> {
    t: u32,
    seed: u64,
    job: &'a Path,
    data: PathBuf,
    base: PathBuf,
    etcd: &'a mut Etcd,
    workers: &'a mut Workers,
    coords: Vec<Coord>,
    actions: Vec<String>,
    start: Instant,
    /// Etcd outages: (down, up; `None` while down).
    outages: Vec<(Instant, Option<Instant>)>,
    /// Standbys that gave up their campaign with etcd up (a product bug).
    campaign_timeouts: Vec<String>,
    /// Leaders that failed the job although a coordinator could run (see
    /// the module's doc).
    job_failures: Vec<String>,
}

impl Trial<'_> {
    fn log(&mut self, what: String) {
        let ms = self.start.elapsed().as_millis();
        self.actions.push(format!("{ms} ms: {what}"));
    }

    fn spawn(&mut self) {
        let name = if self.coords.len() < 26 {
            char::from(b'A' + self.coords.len() as u8).to_string()
        } else {
            format!("C{}", self.coords.len())
        };
        let c = Coord::start(name.clone(), self.job, &self.data, self.etcd, &self.base);
        self.coords.push(c);
        self.log(format!("start coordinator {name}"));
    }

    fn etcd_down(&self) -> bool {
        self.outages.last().is_some_and(|(_, up)| up.is_none())
    }

    /// Whether an etcd outage overlapped coordinator `c`'s life.
    fn outage_during(&self, c: &Coord) -> bool {
        let end = c.ended.as_ref().map_or_else(Instant::now, |(_, at)| *at);
        self.outages
            .iter()
            .any(|(down, up)| *down <= end && up.is_none_or(|up| up >= c.started))
    }

    /// The leader now: the running coordinator with the newest term.
    fn leader(&self) -> Option<usize> {
        (0..self.coords.len())
            .filter(|&i| self.coords[i].running())
            .filter_map(|i| self.coords[i].term().map(|t| (t, i)))
            .max()
            .map(|(_, i)| i)
    }

    fn fail(&self, why: &str) -> ! {
        let mut text = format!(
            "trial {} (seed {:#x}, replay with COORDHOST_CRASH_SEED={:#x}): {why}\nactions:\n  {}\n",
            self.t,
            self.seed,
            self.seed,
            self.actions.join("\n  ")
        );
        for c in &self.coords {
            text += &c.tail();
            text.push('\n');
        }
        text += &self.workers.logs();
        let etcd_log = self.etcd.log();
        let lines: Vec<&str> = etcd_log.lines().collect();
        let from = lines.len().saturating_sub(10);
        text += &format!("--- etcd (last lines) ---\n{}", lines[from..].join("\n"));
        panic!("{text}");
    }

    /// Applies one fault (or skips it, saying why).
    fn apply(&mut self, fault: Fault, pending: &mut Vec<(Instant, Action)>, finished: bool) {
        if finished {
            self.log(format!("{fault:?}: skipped, the job has finished"));
            return;
        }
        match fault {
            Fault::KillLeader => match self.leader() {
                Some(i) => {
                    self.coords[i].kill();
                    let n = self.coords[i].name.clone();
                    self.log(format!("SIGKILL leader {n}"));
                }
                None => self.log("SIGKILL leader: skipped, none leads".into()),
            },
            Fault::KillStandby => {
                let leader = self.leader();
                match (0..self.coords.len()).find(|&i| {
                    self.coords[i].running() && Some(i) != leader && !self.coords[i].paused
                }) {
                    Some(i) => {
                        self.coords[i].kill();
                        let n = self.coords[i].name.clone();
                        self.log(format!("SIGKILL standby {n}"));
                    }
                    None => self.log("SIGKILL standby: skipped, none waits".into()),
                }
            }
            Fault::PauseLeader(d) => match self.leader() {
                Some(i) if !self.coords[i].paused => {
                    self.coords[i].signal("STOP");
                    self.coords[i].paused = true;
                    self.coords[i].was_paused = true;
                    pending.push((Instant::now() + d, Action::Resume(i)));
                    let n = self.coords[i].name.clone();
                    self.log(format!("SIGSTOP leader {n} for {} ms", d.as_millis()));
                }
                _ => self.log("SIGSTOP leader: skipped, none leads or it is paused".into()),
            },
            Fault::KillWorker(w) => {
                self.workers.kill(w);
                self.workers.restart(w);
                self.log(format!("SIGKILL worker w{w}, started again"));
            }
            Fault::RestartEtcd(d) => {
                if self.etcd_down() {
                    self.log("SIGKILL etcd: skipped, it is down".into());
                } else {
                    self.etcd.kill();
                    self.outages.push((Instant::now(), None));
                    pending.push((Instant::now() + d, Action::EtcdUp));
                    self.log(format!("SIGKILL etcd for {} ms", d.as_millis()));
                }
            }
        }
    }

    /// Notices coordinators that ended and judges how they ended; returns
    /// the summary of one that finished the job, if any did just now.
    fn reap(&mut self) -> Option<(String, RunSummary)> {
        let mut done = None;
        for i in 0..self.coords.len() {
            if self.coords[i].ended.is_some() {
                continue;
            }
            let Some(status) = self.coords[i].process.try_wait() else {
                continue;
            };
            self.coords[i].ended = Some((status, Instant::now()));
            self.coords[i].paused = false;
            let name = self.coords[i].name.clone();
            let stderr = self.coords[i].stderr();
            match status.code() {
                Some(0) => {
                    let text =
                        std::fs::read_to_string(&self.coords[i].summary).unwrap_or_else(|e| {
                            self.fail(&format!("{name} exited 0 without a readable summary: {e}"))
                        });
                    let summary =
                        RunSummary(serde_json::from_str(&text).expect("the summary is JSON"));
                    if summary.status() != "finished" {
                        self.fail(&format!("{name} exited 0 with summary {text}"));
                    }
                    self.log(format!("{name} exited 0: {}", summary.brief()));
                    done.get_or_insert((name, summary));
                }
                Some(1) => {
                    let errors: Vec<&str> = stderr
                        .lines()
                        .filter(|l| l.starts_with("coordhost:") || l.starts_with("error:"))
                        .collect();
                    let outage = self.outage_during(&self.coords[i]);
                    // The keep-alive thread's `coordhost: lost the leadership
                    // of job ...; stopping`, or a fenced step that failed
                    // first (`recording a job event failed: ...: lost the
                    // leadership of job ...`).
                    // Both may print before the process ends.
                    let lost = !errors.is_empty()
                        && errors.iter().all(|l| {
                            l.contains(&format!("lost the leadership of job `{JOB}` (term "))
                        });
                    let ha_error = errors.len() == 1 && errors[0].starts_with("coordhost: --ha: ");
                    let waited = self.coords[i]
                        .ended
                        .as_ref()
                        .map_or(Duration::ZERO, |(_, at)| {
                            at.saturating_duration_since(self.coords[i].started)
                        });
                    if lost && (self.coords[i].was_paused || outage) {
                        self.log(format!("{name} exited 1: {}", short(errors[0])));
                    } else if ha_error && outage {
                        self.log(format!(
                            "{name} exited 1 while etcd was down: {}",
                            short(errors[0])
                        ));
                    } else if self.coords[i].term().is_some()
                        && errors.len() == 1
                        && errors[0].contains(" failed on attempt ")
                        && errors[0].contains("(of at most ")
                    {
                        // The job failed: recorded, the trial ends, the
                        // test fails at its end (see the module's doc).
                        self.log(format!("{name} exited 1, JOB FAILED: {}", errors[0]));
                        self.job_failures
                            .push(format!("trial {}: {name}: {}", self.t, errors[0]));
                    } else if ha_error
                        && self.coords[i].term().is_none()
                        && errors[0].contains(": campaign: ")
                        && errors[0].contains("Timeout expired")
                        && waited >= CAMPAIGN_TIMEOUT_BUG
                    {
                        // A standby that gave up (see the module's doc): recorded, the
                        // trial goes on with a new standby, the test fails
                        // at its end.
                        self.log(format!(
                            "{name} exited 1 after waiting {} ms as a standby with etcd up \
                             (BUG: campaign timeout): {}",
                            waited.as_millis(),
                            short(errors[0])
                        ));
                        self.campaign_timeouts.push(format!(
                            "trial {}: {name} after {} ms: {}",
                            self.t,
                            waited.as_millis(),
                            errors[0]
                        ));
                    } else {
                        self.fail(&format!(
                            "{name} exited 1 (paused by the test: {}, etcd down during its life: {outage}; \
                             lost the leadership: {lost}; error lines {errors:?})",
                            self.coords[i].was_paused
                        ));
                    }
                }
                _ => self.fail(&format!(
                    "{name} ended {status} (signal {:?})",
                    status.signal()
                )),
            }
        }
        done
    }

    /// Ends a trial whose job failed: kills its coordinators, starts etcd
    /// if it is down, and restarts every worker (a new worker process
    /// clears its folders: the failed job's partitions must not count in
    /// the next trial).
    fn abandon(&mut self) -> Outcome {
        for c in &mut self.coords {
            if c.running() {
                c.kill();
            }
        }
        if self.etcd_down() {
            self.etcd.restart();
            if let Some(o) = self.outages.last_mut() {
                o.1 = Some(Instant::now());
            }
        }
        for w in 0..WORKERS {
            self.workers.kill(w);
            self.workers.restart(w);
        }
        self.log("trial abandoned: coordinators killed, workers restarted".into());
        Outcome {
            actions: self.actions.clone(),
            finisher: "nobody (the job failed)".into(),
            summary: None,
            ends: self.ends(),
            took: self.start.elapsed(),
        }
    }

    fn ends(&self) -> Vec<String> {
        self.coords
            .iter()
            .map(|c| {
                let how = match &c.ended {
                    _ if c.killed => "killed".to_owned(),
                    Some((s, _)) => s.code().map_or_else(|| format!("{s}"), |c| c.to_string()),
                    None => "running".to_owned(),
                };
                format!("{}={how}", c.name)
            })
            .collect()
    }

    /// Runs the trial to its end.
    fn run(&mut self, faults: &[(Duration, Fault)]) -> Outcome {
        let deadline = self.start + TRIAL_BOUND;
        self.spawn();
        // A leads before B starts, so that the faults find a leader and a
        // standby.
        loop {
            if self.coords[0].term().is_some() {
                break;
            }
            if self.coords[0].process.try_wait().is_some() {
                self.fail("A ended before it led");
            }
            if Instant::now() > deadline {
                self.fail(&format!("A did not lead within {TRIAL_BOUND:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.log("A leads".into());
        self.spawn();
        let led = Instant::now();
        let mut pending: Vec<(Instant, Action)> = faults
            .iter()
            .map(|(at, f)| (led + *at, Action::Fault(*f)))
            .collect();
        let mut finished: Option<(String, RunSummary, Instant)> = None;
        let mut published = BTreeMap::new();
        loop {
            if let Some((name, summary)) = self.reap()
                && finished.is_none()
            {
                published = published_state(&self.data);
                finished = Some((name, summary, Instant::now()));
            }
            let now = Instant::now();
            pending.sort_by_key(|(at, _)| *at);
            while pending.first().is_some_and(|(at, _)| *at <= now) {
                let (_, action) = pending.remove(0);
                match action {
                    Action::Fault(f) => self.apply(f, &mut pending, finished.is_some()),
                    Action::Resume(i) => {
                        if self.coords[i].running() {
                            self.coords[i].signal("CONT");
                            self.coords[i].paused = false;
                        }
                        let n = self.coords[i].name.clone();
                        self.log(format!("SIGCONT {n}"));
                    }
                    Action::EtcdUp => {
                        self.etcd.restart();
                        if let Some(o) = self.outages.last_mut() {
                            o.1 = Some(Instant::now());
                        }
                        self.log("etcd started again (healthy)".into());
                    }
                }
            }
            if !self.job_failures.is_empty() {
                return self.abandon();
            }
            let running = self.coords.iter().filter(|c| c.running()).count();
            match &finished {
                None => {
                    if running < 2 && !self.etcd_down() {
                        self.spawn();
                    }
                }
                Some((_, _, at)) => {
                    if running == 0 && pending.is_empty() {
                        break;
                    }
                    if at.elapsed() > AFTER_FINISH {
                        self.fail(&format!(
                            "coordinators still run {AFTER_FINISH:?} after the job finished"
                        ));
                    }
                }
            }
            if Instant::now() > deadline {
                self.fail(&format!("the trial did not end within {TRIAL_BOUND:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let (finisher, summary, _) = finished.expect("the loop ends once finished");
        let after = published_state(&self.data);
        if after != published {
            self.fail(&format!(
                "the sink folder changed after {finisher} finished the job:\n{published:?}\n{after:?}"
            ));
        }
        let ends = self.ends();
        Outcome {
            actions: self.actions.clone(),
            finisher,
            summary: Some(summary),
            ends,
            took: self.start.elapsed(),
        }
    }
}

#[test]
fn the_failure_matrix_of_leader_standby_workers_and_etcd_ends_with_the_right_output() {
    let seed = seed();
    let trials = std::env::var("COORDHOST_HA_TRIALS")
        .ok()
        .map_or(TRIALS, |s| {
            s.trim()
                .parse()
                .unwrap_or_else(|e| panic!("COORDHOST_HA_TRIALS={s:?}: {e}"))
        });
    eprintln!(
        "ha failure matrix: {trials} trials, COORDHOST_CRASH_SEED={seed:#x}; bound {TRIAL_BOUND:?} a trial"
    );
    let fx = Fixture::words();
    let mut etcd = Etcd::start(&fx.path("etcd"));
    let mut j = WordJob::new(&fx.input);
    j.previous_worker_timeout_ms = 1500;
    // About 0.7 s of sources and 3 s of sinks once the workers registered:
    // the faults (300–3000 ms after A leads) land while the job runs.
    j.source_delay_us = 40;
    j.sink_delay_us = 1500;
    let job = j.write(&fx.path("job.toml"));
    let want = expected_output(&fx.input);
    let mut workers = Workers::start(
        WORKERS,
        &format!("{}/{JOB}", etcd.url()),
        &fx.path("workers"),
        2,
    );
    let began = Instant::now();
    let mut rows = Vec::new();
    let mut takeovers = 0;
    let mut campaign_timeouts: Vec<String> = Vec::new();
    let mut job_failures: Vec<String> = Vec::new();
    for t in 0..trials {
        let mut rng = Rng::new(seed ^ u64::from(t).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let faults = plan(&mut rng);
        let mut trial = Trial {
            t,
            seed,
            job: &job,
            data: fx.path(&format!("trial-{t}")),
            base: fx.path(&format!("trial-{t}-coordinators")),
            etcd: &mut etcd,
            workers: &mut workers,
            coords: Vec::new(),
            actions: Vec::new(),
            start: Instant::now(),
            outages: Vec::new(),
            campaign_timeouts: Vec::new(),
            job_failures: Vec::new(),
        };
        let outcome = trial.run(&faults);
        campaign_timeouts.append(&mut trial.campaign_timeouts);
        let Some(summary) = &outcome.summary else {
            job_failures.append(&mut trial.job_failures);
            rows.push(format!(
                "trial {t:>2} ({:>5} ms): JOB FAILED; ends {}; actions: {}",
                outcome.took.as_millis(),
                outcome.ends.join(" "),
                outcome.actions.join(", ")
            ));
            eprintln!("{}", rows.last().expect("a row"));
            continue;
        };
        let got = sorted_output(&trial.data);
        if got != want {
            trial.fail(&format!(
                "output differs from the counts: {}",
                first_difference(&got, &want)
            ));
        }
        if let Err(e) = check_part_names(&trial.data) {
            trial.fail(&e);
        }
        for i in 0..WORKERS {
            if !trial.workers.is_running(i) {
                trial.fail(&format!("worker w{i} ended"));
            }
        }
        let clean = Instant::now() + CLEAN_WITHIN;
        while !trial.workers.files_left().is_empty() && Instant::now() < clean {
            std::thread::sleep(Duration::from_millis(100));
        }
        let left = trial.workers.files_left();
        if !left.is_empty() {
            trial.fail(&format!(
                "files left on the workers {CLEAN_WITHIN:?} after the job: {left:?}"
            ));
        }
        if outcome.finisher != "A" {
            takeovers += 1;
        }
        // A trial that passed leaves nothing behind (a failed one panics
        // before this, and the fixture keeps its folders until the end).
        let _ = std::fs::remove_dir_all(&trial.data);
        let _ = std::fs::remove_dir_all(&trial.base);
        let faults_text: Vec<String> = outcome
            .actions
            .iter()
            .filter(|a| a.contains("SIG") || a.contains("etcd") || a.contains("skipped,"))
            .cloned()
            .collect();
        rows.push(format!(
            "trial {t:>2} ({:>5} ms): finished by {} ({}); ends {}; actions: {}",
            outcome.took.as_millis(),
            outcome.finisher,
            summary.brief(),
            outcome.ends.join(" "),
            faults_text.join(", ")
        ));
        eprintln!("{}", rows.last().expect("a row"));
    }
    eprintln!(
        "ha failure matrix: {trials} trials in {} s, {takeovers} finished by another coordinator than A, seed {seed:#x}\n{}",
        began.elapsed().as_secs(),
        rows.join("\n")
    );
    let mut bugs = Vec::new();
    if !job_failures.is_empty() {
        bugs.push(format!(
            "{} trial(s) ended with the job failed although coordinators could run (e.g. a \
             worker killed and started again at once, whose lost partitions consumers find \
             missing one PartitionNotFound at a time, each costing one of the consumer's \
             `max-attempts = 3`):\n  {}",
            job_failures.len(),
            job_failures.join("\n  ")
        ));
    }
    if !campaign_timeouts.is_empty() {
        bugs.push(format!(
            "{} standby coordinator(s) gave up their campaign with etcd running, after waiting \
             about 5 s or more (a request timeout bounding the blocking etcd Campaign call, \
             host/src/ha.rs):\n  {}",
            campaign_timeouts.len(),
            campaign_timeouts.join("\n  ")
        ));
    }
    assert!(bugs.is_empty(), "seed {seed:#x}: {}", bugs.join("\n"));
    assert!(
        trials < 10 || takeovers > 0,
        "no trial was finished by a standby: the faults never hit the leader\n{}",
        rows.join("\n")
    );
}
