//! Issue 15, high availability through etcd (docs/ha.md): real `coordhost
//! run --ha` processes on a real etcd ([`Etcd`]) and one shared data
//! directory, word count job of the crash tests.
//!
//! - the leader SIGKILLed once its sources finished: the standby is elected
//!   after the lease's TTL, recovers the job (the sources skipped) and
//!   finishes it with the right counts;
//! - the leader SIGSTOPped past its lease, with 3 worker processes that
//!   find the leader in etcd: the standby takes over with the workers; the
//!   old leader, resumed, stops (exit 1) without appending to the log,
//!   publishing output or commanding a worker;
//! - etcd killed under the leader: the leader stops once its lease ran out
//!   by its own clock; with etcd restarted, a new coordinator recovers;
//! - HA flags that cannot work are refused in one line;
//! - the leader stopped by SIGTERM (issue 31) stops as a run without HA
//!   does (exit 143), says goodbye to its workers and resigns: the standby
//!   leads at once, not after the lease's TTL, and finishes the job with
//!   the same workers, none of which warns that it lost a coordinator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::crash::{
    EventLog, Fixture, JOB, RunSummary, SINK, SOURCE, WordJob, expected_output, first_difference,
    log_dir, output_dir, sorted_output,
};
use crate::support::etcd::Etcd;
use crate::support::process::{Process, Waited, killed_by_sigkill, last_lines, whole_lines};
use crate::support::segment_files;
use crate::support::ui::{http, sample};
use crate::support::workers::{Workers, external_args, free_port};

/// The leases of these tests, seconds: a dead leader is replaced after
/// about this long.
const TTL_S: u64 = 1;
/// Heartbeat timeout between coordinators and workers, ms.
const HEARTBEAT_MS: u64 = 1000;
/// Longest wait for anything one step of a test waits for (an election,
/// a log state, a process's end): a guard against a wedged test on a
/// loaded machine, not a timing assertion.
const STEP: Duration = Duration::from_secs(120);
/// Longest wait for the workers to register with a newly elected leader:
/// they notice the old one is gone after [`HEARTBEAT_MS`] and look the
/// leader up in etcd (backoff at most 1 s).
const TURN_WITHIN: Duration = Duration::from_secs(30);

/// One `coordhost run JOB --ha ETCD` process of a test, named (`A`, `B`)
/// so that its files can be told apart: stdout and stderr in
/// `<base>/<name>.out|.err`, summary in `<base>/<name>.summary.json`.
/// Dropping it kills it (SIGKILL also ends a stopped process).
pub(crate) struct Coordinator {
    name: &'static str,
    process: Process,
    summary: PathBuf,
    /// Folders whose `*.err` files (e.g. the workers') failure messages
    /// show too.
    pub(crate) also_show: Vec<PathBuf>,
    /// What else a failure message shows (e.g. the network namespaces'
    /// links and neighbours, [`crate::support::netns::Netns::describer`]).
    pub(crate) also_describe: Option<Box<dyn Fn() -> String>>,
}

impl Coordinator {
    /// Spawns `coordhost run job --data-dir data --ha etcd
    /// --ha-lease-ttl-s TTL_S` with `extra` arguments.
    fn start(
        name: &'static str,
        job: &Path,
        data: &Path,
        etcd: &Etcd,
        base: &Path,
        extra: &[String],
    ) -> Self {
        Self::of(
            name,
            crate::support::etcd::spawn_ha_run(name, job, data, etcd, TTL_S, base, extra),
        )
    }

    /// The coordinator `name` of a process [`crate::support::etcd::spawn_ha_run_as`] started.
    pub(crate) fn of(name: &'static str, run: crate::support::etcd::HaRun) -> Self {
        let crate::support::etcd::HaRun { process, summary } = run;
        Self {
            name,
            process,
            summary,
            also_show: Vec::new(),
            also_describe: None,
        }
    }

    /// Its whole stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// Its stderr, labelled, for failure messages.
    pub(crate) fn context(&self) -> String {
        let mut text = format!(
            "--- stderr of coordinator {} ({}) ---\n{}",
            self.name,
            self.process.stderr_path().display(),
            self.stderr()
        );
        for dir in &self.also_show {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "err"))
                .collect();
            files.sort();
            for f in files {
                let t = std::fs::read_to_string(&f).unwrap_or_default();
                text += &format!("\n--- {} ---\n{}", f.display(), last_lines(&t, 30));
            }
        }
        if let Some(describe) = &self.also_describe {
            text += &describe();
        }
        text
    }

    /// Waits until its stderr has a line containing `needle` (polling every
    /// 10 ms, at most [`STEP`]); returns that line and when it was seen.
    ///
    /// # Panics
    /// If the process ends first or the line does not come in time.
    pub(crate) fn wait_for_line(&mut self, needle: &str) -> (String, Instant) {
        let deadline = Instant::now() + STEP;
        let stderr = self.process.stderr_path().to_path_buf();
        let seen = self
            .process
            .poll_until(deadline, Duration::from_millis(10), || {
                let text = std::fs::read_to_string(&stderr).unwrap_or_default();
                let line = whole_lines(&text)
                    .lines()
                    .find(|l| l.contains(needle))?
                    .to_owned();
                Some((line, Instant::now()))
            });
        match seen {
            Ok(seen) => seen,
            Err(Waited::Ended(status)) => panic!(
                "coordinator {} ended ({status}) before printing `{needle}`\n{}",
                self.name,
                self.context()
            ),
            Err(Waited::TimedOut) => panic!(
                "coordinator {} did not print `{needle}` within {STEP:?}\n{}",
                self.name,
                self.context()
            ),
        }
    }

    /// Polls `condition` every 20 ms until it holds (at most [`STEP`]).
    ///
    /// # Panics
    /// If this process ends first (`what` says what was awaited) or time
    /// runs out.
    pub(crate) fn poll_until<T>(&mut self, what: &str, condition: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + STEP;
        let polled = self
            .process
            .poll_until(deadline, Duration::from_millis(20), condition);
        match polled {
            Ok(t) => t,
            Err(Waited::Ended(status)) => panic!(
                "coordinator {} ended ({status}) before {what}\n{}",
                self.name,
                self.context()
            ),
            Err(Waited::TimedOut) => panic!("{what}: not within {STEP:?}\n{}", self.context()),
        }
    }

    /// Whether the process has ended.
    pub(crate) fn ended(&mut self) -> bool {
        !self.process.is_running()
    }

    /// Sends `signal` to it with `kill -SIG`.
    pub(crate) fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// SIGKILLs it and reaps it; checks it died of the signal (it had not
    /// ended on its own before).
    pub(crate) fn kill(&mut self) {
        if let Some(status) = self.process.try_wait() {
            panic!(
                "coordinator {} had already ended ({status}) before the kill\n{}",
                self.name,
                self.context()
            );
        }
        let status = self.process.kill();
        assert!(
            killed_by_sigkill(status),
            "coordinator {} ended {status}, not by the kill\n{}",
            self.name,
            self.context()
        );
    }

    /// Waits at most `within` for it to end; returns its exit code (`None`
    /// for a signal) and when it was seen ended.
    ///
    /// # Panics
    /// If it still runs after `within` (it is killed first).
    pub(crate) fn wait(&mut self, within: Duration) -> (Option<i32>, Instant) {
        if let Some(status) = self.process.wait_until(Instant::now() + within) {
            return (status.code(), Instant::now());
        }
        self.process.kill_quietly();
        panic!(
            "coordinator {} did not end within {within:?}; killed it\n{}",
            self.name,
            self.context()
        );
    }

    /// Waits (at most [`STEP`]) until it ends and checks it finished the
    /// job: exit 0, summary status `finished`; returns the summary.
    pub(crate) fn finish(&mut self) -> RunSummary {
        let (code, _) = self.wait(STEP);
        assert_eq!(
            code,
            Some(0),
            "coordinator {} did not finish the job\n{}",
            self.name,
            self.context()
        );
        let text = std::fs::read_to_string(&self.summary).unwrap_or_else(|e| {
            panic!(
                "coordinator {} exited 0 without a readable summary: {e}\n{}",
                self.name,
                self.context()
            )
        });
        let summary = RunSummary(serde_json::from_str(&text).expect("the summary is JSON"));
        assert_eq!(summary.status(), "finished", "{text}");
        summary
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.process.kill_quietly();
    }
}

/// The term in a `leading job ... (term T, ...)` or `... leads (term T)`
/// line.
pub(crate) fn term_in(line: &str) -> u64 {
    line.split("(term ")
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or_else(|| panic!("no term in `{line}`"))
}

/// The line a coordinator prints once elected.
pub(crate) fn leading_line() -> String {
    format!("coordhost run: leading job `{JOB}` (term ")
}

/// The line a coordinator prints while another leads.
pub(crate) fn standby_line() -> String {
    format!("coordhost run: standby for job `{JOB}`: ")
}

/// `Some` once the log shows every one of the job's `sources` source
/// subtasks finished.
pub(crate) fn sources_finished(data: &Path, sources: u32) -> Option<()> {
    EventLog::read(data)
        .filter(|l| l.finished(SOURCE).len() == sources as usize)
        .map(|_| ())
}

fn assert_counts(data: &Path, fx: &Fixture, context: &str) {
    let got = sorted_output(data);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "{context}: output differs from the counts: {}",
        first_difference(&got, &want)
    );
}

#[test]
fn a_standby_takes_over_when_the_leader_is_killed_and_recovers_the_job() {
    let fx = Fixture::words();
    let etcd = Etcd::start(&fx.path("etcd"));
    let mut j = WordJob::new(&fx.input);
    // Sources done in about a second, sinks several seconds more: the
    // leader is killed with its sources' partitions on disk.
    j.source_delay_us = 40;
    j.sink_delay_us = 2000;
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let mut a = Coordinator::start("A", &file, &data, &etcd, &base, &[]);
    let (a_leads, _) = a.wait_for_line(&leading_line());
    let mut b = Coordinator::start("B", &file, &data, &etcd, &base, &[]);
    let (b_waits, _) = b.wait_for_line(&standby_line());
    assert_eq!(
        term_in(&b_waits),
        term_in(&a_leads),
        "B names another leader than A:\n{}\n{}",
        a.context(),
        b.context()
    );
    a.poll_until("A's sources finish", || sources_finished(&data, j.sources));
    assert!(
        b.stderr().lines().all(|l| !l.contains(&leading_line())),
        "B leads while A runs:\n{}",
        b.context()
    );
    let killed = Instant::now();
    a.kill();
    let (b_leads, seen) = b.wait_for_line(&leading_line());
    let takeover = seen - killed;
    eprintln!(
        "takeover: {} ms from SIGKILL of the leader to the standby's `leading` line (TTL {TTL_S} s)",
        takeover.as_millis()
    );
    assert!(
        term_in(&b_leads) > term_in(&a_leads),
        "B's term is not newer than A's: {b_leads} / {a_leads}"
    );
    let summary = b.finish();
    assert!(summary.recovered(), "B did not recover: {}", summary.0);
    assert!(
        summary.tasks_skipped() > 0,
        "B skipped nothing that A finished: {}",
        summary.brief()
    );
    assert_counts(&data, &fx, "after the takeover");
    let log = EventLog::read(&data).expect("the job has a log");
    let terms: Vec<u64> = log
        .events
        .iter()
        .filter(|e| e["event"]["kind"] == "LeaderElected")
        .filter_map(|e| e["event"]["event"]["term"].as_u64())
        .collect();
    assert_eq!(
        terms,
        [term_in(&a_leads), term_in(&b_leads)],
        "the log records A's then B's leadership"
    );
}

/// `--ui` on a standby (docs/ui.md, "A standby"): while A leads, B's
/// `/api/job`, page and metrics say B is a standby and name A's term;
/// once A is killed and B leads, B's page is the job's.
#[test]
fn a_standby_with_ui_says_it_is_one_and_who_leads_then_shows_the_job_once_it_leads() {
    let fx = Fixture::words();
    let etcd = Etcd::start(&fx.path("etcd"));
    let mut j = WordJob::new(&fx.input);
    j.sink_delay_us = 2000;
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let mut a = Coordinator::start("A", &file, &data, &etcd, &base, &[]);
    let (a_leads, _) = a.wait_for_line(&leading_line());
    let ui = ["--ui", "127.0.0.1:0", "--ui-linger-s", "60"].map(str::to_owned);
    let mut b = Coordinator::start("B", &file, &data, &etcd, &base, &ui);
    b.wait_for_line(&standby_line());
    let (page_line, _) = b.wait_for_line("job page on http://");
    let addr = page_line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .expect("an address")
        .to_owned();

    let (status, _, body) = http(&addr, "GET", "/api/job");
    assert_eq!(status, 200, "{body}");
    let api: serde_json::Value = serde_json::from_str(&body).expect("/api/job is JSON");
    assert_eq!(api["status"], "standby", "{api:#}\n{}", b.context());
    assert_eq!(api["job"], JOB, "{api:#}");
    assert_eq!(
        api["standby"]["leader_term"].as_u64(),
        Some(term_in(&a_leads)),
        "B names A's term: {api:#}"
    );
    assert!(
        api["standby"]["leader_address"].is_null(),
        "A serves no worker processes: {api:#}"
    );
    assert_eq!(api["standby"]["etcd"], etcd.url(), "{api:#}");
    let (status, _, page) = http(&addr, "GET", "/");
    assert_eq!(status, 200);
    assert!(
        page.contains(&format!(
            "<p id=\"standby\" data-leader-term=\"{}\">",
            term_in(&a_leads)
        )),
        "{page}"
    );
    assert!(
        page.contains("http-equiv=\"refresh\""),
        "a standby's page reloads: {page}"
    );
    let (status, _, metrics) = http(&addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        sample(&metrics, "coordhost_ha_standby"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "coordhost_ha_leader_term"),
        Some(term_in(&a_leads) as f64),
        "{metrics}"
    );
    assert_eq!(
        sample(
            &metrics,
            &format!(r#"coordhost_job_info{{job="{JOB}",status="standby"}}"#)
        ),
        Some(1.0),
        "{metrics}"
    );

    // A goes; B leads, and its page becomes the job's.
    a.poll_until("A's sources finish", || sources_finished(&data, j.sources));
    a.kill();
    let (b_leads, _) = b.wait_for_line(&leading_line());
    let finished = b.poll_until("B's page shows the finished job", || {
        let (status, _, body) = http(&addr, "GET", "/api/job");
        let api: serde_json::Value = serde_json::from_str(&body).ok()?;
        (status == 200 && api["status"] == "finished").then_some(api)
    });
    assert!(finished["standby"].is_null(), "{finished:#}");
    assert_eq!(
        finished["runs"]
            .as_array()
            .and_then(|r| r.last())
            .map(|r| r["leader_term"].clone()),
        Some(serde_json::json!(term_in(&b_leads))),
        "the serving run is B's term: {finished:#}"
    );
    let (_, _, metrics) = http(&addr, "GET", "/metrics");
    assert_eq!(
        sample(&metrics, "coordhost_ha_standby"),
        Some(0.0),
        "{metrics}"
    );
    assert_counts(&data, &fx, "after B took over");
}

/// etcd that comes up within `START_PATIENCE` of a coordinator's start
/// (8 s) is waited for: a connection that fails at the start (here refused: etcd
/// is down) is tried again quietly, and the coordinator leads and runs the
/// job once etcd answers (docs/ha.md, "Failure matrix"; a dropped SYN in a
/// loaded CI run once ended a coordinator although etcd was up).
#[test]
fn a_coordinator_started_just_before_etcd_waits_for_it_and_runs_the_job() {
    let fx = Fixture::words();
    let mut etcd = Etcd::start(&fx.path("etcd"));
    etcd.kill();
    let j = WordJob::new(&fx.input);
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let mut a = Coordinator::start("A", &file, &data, &etcd, &base, &[]);
    std::thread::sleep(Duration::from_secs(1));
    etcd.restart();
    let (a_leads, _) = a.wait_for_line(&leading_line());
    assert!(term_in(&a_leads) > 0, "A leads: {a_leads}");
    let summary = a.finish();
    assert!(
        !summary.recovered(),
        "A ran the job from the start: {}",
        summary.0
    );
    assert_counts(&data, &fx, "after etcd came up late");
    assert!(
        a.stderr()
            .lines()
            .all(|l| !l.starts_with("coordhost: --ha:")),
        "no --ha error while etcd came up within the patience window:\n{}",
        a.context()
    );
}

/// The lock is the fence of coordinators without `--ha`, the lease that of
/// coordinators with it: mixing them on one job is refused either way, so
/// that two coordinators never run one job (docs/ha.md, "Fencing").
#[test]
fn coordinators_with_and_without_ha_never_run_one_job_together() {
    let fx = Fixture::words();
    let etcd = Etcd::start(&fx.path("etcd"));
    let mut j = WordJob::new(&fx.input);
    j.source_delay_us = 40;
    j.sink_delay_us = 2000;
    let file = j.write(&fx.path("job.toml"));
    let base = fx.path("coordinators");
    // Without --ha first: a coordinator with --ha is refused while it runs.
    let data = fx.path("plain-first");
    let mut plain = crate::support::crash::Coordhost::new(&file, &data);
    let mut running = plain.start();
    running
        .poll_until(|| EventLog::read(&data).map(|_| ()))
        .expect("the coordinator without --ha starts its log");
    let mut ha = Coordinator::start("HA", &file, &data, &etcd, &base, &[]);
    let (code, _) = ha.wait(STEP);
    assert_eq!(code, Some(2), "{}", ha.context());
    assert!(
        ha.stderr()
            .contains("is held by a coordinator started without --ha"),
        "{}",
        ha.context()
    );
    running.finish();
    assert_counts(&data, &fx, "the coordinator without --ha");
    // With --ha first: a coordinator without it is refused on that log,
    // also once the job finished.
    let data = fx.path("ha-first");
    let mut leader = Coordinator::start("L", &file, &data, &etcd, &base, &[]);
    leader.wait_for_line(&leading_line());
    leader.poll_until("its log", || EventLog::read(&data).map(|_| ()));
    for when in ["while the leader runs", "after the job finished"] {
        if when == "after the job finished" {
            leader.finish();
        }
        let mut plain = crate::support::crash::Coordhost::new(&file, &data);
        let (code, stderr) = plain.start().exit();
        assert_eq!(code, Some(2), "{when}: {stderr}");
        assert!(
            stderr.contains("is led through etcd (it was run with --ha)"),
            "{when}: {stderr}"
        );
    }
    assert_counts(&data, &fx, "the leader");
}

#[test]
fn a_leader_cut_off_from_etcd_stops_and_a_later_coordinator_recovers_the_job() {
    let fx = Fixture::words();
    let mut etcd = Etcd::start(&fx.path("etcd"));
    let mut j = WordJob::new(&fx.input);
    j.source_delay_us = 40;
    j.sink_delay_us = 2000;
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let mut a = Coordinator::start("A", &file, &data, &etcd, &base, &[]);
    let (a_leads, _) = a.wait_for_line(&leading_line());
    a.poll_until("A's sources finish", || sources_finished(&data, j.sources));
    let cut = Instant::now();
    etcd.kill();
    // Without answers to its keep-alives, A's leadership ends after the
    // TTL by its own clock.
    let (code, ended) = a.wait(Duration::from_secs(60));
    eprintln!(
        "the leader cut off from etcd stopped {} ms after etcd died (TTL {TTL_S} s)",
        (ended - cut).as_millis()
    );
    assert_eq!(code, Some(1), "A's exit once cut off\n{}", a.context());
    let lost = format!(
        "coordhost: lost the leadership of job `{JOB}` (term {})",
        term_in(&a_leads)
    );
    assert!(
        a.stderr().contains(&lost),
        "A does not say `{lost}`\n{}",
        a.context()
    );
    assert!(
        !crate::support::crash::job_succeeded(&data),
        "the job finished although A was cut off while its sinks ran"
    );
    etcd.restart();
    let mut b = Coordinator::start("B", &file, &data, &etcd, &base, &[]);
    let (b_leads, _) = b.wait_for_line(&leading_line());
    assert!(
        term_in(&b_leads) > term_in(&a_leads),
        "B's term is not newer than A's: {b_leads} / {a_leads}"
    );
    let summary = b.finish();
    assert!(summary.recovered(), "B did not recover: {}", summary.0);
    assert!(
        summary.tasks_skipped() > 0,
        "B skipped nothing that A finished: {}",
        summary.brief()
    );
    assert_counts(&data, &fx, "after the leader was cut off from etcd");
}

/// Whether a worker's log (at `coordhost::remote=info`) shows that it found
/// the coordinator at `address` as the job's leader of `term` in etcd and
/// then registered with it (the session is the term).
#[test]
fn a_leader_stopped_by_sigterm_resigns_and_the_standby_takes_the_job_and_its_workers_at_once() {
    // A lease this long would keep the standby waiting half a minute if
    // the stopped leader did not resign.
    const LONG_TTL_S: u64 = 30;
    let fx = Fixture::words();
    let etcd = Etcd::start(&fx.path("etcd"));
    let mut j = WordJob::new(&fx.input);
    j.previous_worker_timeout_ms = 1500;
    j.source_delay_us = 40;
    j.sink_delay_us = 2000;
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let (a_addr, b_addr) = (free_port(), free_port());
    let start = |name: &'static str, addr: &str| {
        let mut c = Coordinator::of(
            name,
            crate::support::etcd::spawn_ha_run(
                name,
                &file,
                &data,
                &etcd,
                LONG_TTL_S,
                &base,
                &external_args(addr, 2, HEARTBEAT_MS),
            ),
        );
        c.also_show.push(fx.path("workers"));
        c
    };
    let mut a = start("A", &a_addr);
    let (a_leads, _) = a.wait_for_line(&leading_line());
    let mut b = start("B", &b_addr);
    b.wait_for_line(&standby_line());
    let workers = Workers::start(2, &format!("{}/{JOB}", etcd.url()), &fx.path("workers"), 2);
    a.poll_until("A's sources finish on the workers", || {
        sources_finished(&data, j.sources)
    });
    a.signal("TERM");
    let sent = Instant::now();
    let (code, _) = a.wait(STEP);
    assert_eq!(
        code,
        Some(143),
        "A did not stop as SIGTERM asks\n{}",
        a.context()
    );
    assert!(
        a.stderr().contains("stopped by SIGTERM"),
        "A does not say it was stopped\n{}",
        a.context()
    );
    let (b_leads, seen) = b.wait_for_line(&leading_line());
    let takeover = seen - sent;
    eprintln!(
        "takeover: {} ms from SIGTERM of the leader to the standby's `leading` line (TTL {LONG_TTL_S} s)",
        takeover.as_millis()
    );
    assert!(
        takeover < Duration::from_secs(LONG_TTL_S / 3),
        "B led {takeover:?} after A was stopped: A did not resign its lease (TTL {LONG_TTL_S} s)\n{}",
        b.context()
    );
    assert!(term_in(&b_leads) > term_in(&a_leads));
    let summary = b.finish();
    assert!(
        summary.recovered() && summary.tasks_skipped() > 0,
        "B did not keep what A finished: {}",
        summary.brief()
    );
    assert_counts(&data, &fx, "after A was stopped and B took over");
    for i in 0..2 {
        let log = workers.log_of(i);
        assert!(
            log.contains("the job wordcount ended (stopped); waiting for the next coordinator")
                && log.contains(
                    "the job wordcount ended (finished); waiting for the next coordinator"
                ),
            "w{i} was not told of both ends:\n{log}"
        );
        assert!(
            !log.contains("lost the coordinator"),
            "w{i} warned though both coordinators said goodbye:\n{log}"
        );
    }
}

pub(crate) fn registered_with(log: &str, address: &str, term: u64) -> bool {
    let mut lines = log.lines().skip_while(|l| {
        !(l.contains("the job's leader")
            && l.contains(&format!("term={term} "))
            && l.ends_with(&format!("coordinator={address}")))
    });
    lines.next().is_some()
        && lines.any(|l| l.contains("registered") && l.ends_with(&format!("session={term}")))
}

/// Size of every segment file of the job's log.
fn segment_sizes(data: &Path) -> BTreeMap<PathBuf, u64> {
    segment_files(&log_dir(data))
        .into_iter()
        .map(|p| {
            let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
            (p, len)
        })
        .collect()
}

/// Every file of the sink folder (published parts, `_SUCCESS`, staging),
/// path relative to it → contents.
fn output_files(data: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let out = output_dir(data);
    let mut files = Vec::new();
    crate::support::workers::files_under(&out, &mut files);
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_default();
            (p.strip_prefix(&out).unwrap_or(&p).to_path_buf(), bytes)
        })
        .collect()
}

/// The log segment (its coordinator attempt) whose `LeaderElected` names
/// `term`.
fn segment_of_term(log: &EventLog, term: u64) -> Option<u64> {
    log.events
        .iter()
        .find(|e| {
            e["event"]["kind"] == "LeaderElected"
                && e["event"]["event"]["term"].as_u64() == Some(term)
        })
        .and_then(|e| e["position"]["attempt"].as_u64())
}

#[test]
fn a_paused_leader_is_deposed_and_stops_without_writing_publishing_or_commanding() {
    let fx = Fixture::words();
    let etcd = Etcd::start(&fx.path("etcd"));
    let mut j = WordJob::new(&fx.input);
    j.previous_worker_timeout_ms = 1500;
    j.source_delay_us = 40;
    j.sink_delay_us = 2000;
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    // Both coordinators listen before the workers start: a worker's own
    // port (chosen by the system) cannot take one of theirs.
    let (a_addr, b_addr) = (free_port(), free_port());
    let mut a = Coordinator::start(
        "A",
        &file,
        &data,
        &etcd,
        &base,
        &external_args(&a_addr, 3, HEARTBEAT_MS),
    );
    a.also_show.push(fx.path("workers"));
    let (a_leads, _) = a.wait_for_line(&leading_line());
    let mut b = Coordinator::start(
        "B",
        &file,
        &data,
        &etcd,
        &base,
        &external_args(&b_addr, 3, HEARTBEAT_MS),
    );
    b.also_show.push(fx.path("workers"));
    let (b_waits, _) = b.wait_for_line(&standby_line());
    assert!(
        b_waits.contains(&a_addr),
        "B's standby line names A's worker address {a_addr}: {b_waits}"
    );
    let workers = Workers::start(3, &format!("{}/{JOB}", etcd.url()), &fx.path("workers"), 2);
    a.poll_until("A's sources finish on the workers", || {
        sources_finished(&data, j.sources)
    });
    let a_term = term_in(&a_leads);
    a.signal("STOP");
    let stopped = Instant::now();
    let (b_leads, seen) = b.wait_for_line(&leading_line());
    let b_term = term_in(&b_leads);
    eprintln!(
        "takeover: {} ms from SIGSTOP of the leader to the standby's `leading` line (TTL {TTL_S} s)",
        (seen - stopped).as_millis()
    );
    assert!(
        b_term > a_term,
        "B's term {b_term} is not newer than A's {a_term}"
    );
    // While A stays paused, every worker turns to B: it looks the leader
    // up in etcd and registers with B's term as its session.
    let turned = Instant::now() + TURN_WITHIN;
    loop {
        let missing: Vec<usize> = (0..3)
            .filter(|&i| !registered_with(&workers.log_of(i), &b_addr, b_term))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < turned && !b.ended(),
            "workers {missing:?} did not register with B (term {b_term}, {b_addr}) within \
             {TURN_WITHIN:?} of B's election while the old leader A stays paused: \
             a worker must not wait on a coordinator that stopped answering\n{}",
            b.context()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // B made progress: a task of its own finished (in its log segment), or
    // it finished the job.
    let b_segment = b.poll_until("B finishes a task of its own", || {
        let log = EventLog::read(&data)?;
        let seg = segment_of_term(&log, b_term)?;
        let own =
            log.finished_in_segment(SINK, seg).len() + log.finished_in_segment(SOURCE, seg).len();
        (own > 0).then_some(seg)
    });
    let log = EventLog::read(&data).expect("the job has a log");
    let a_segment = segment_of_term(&log, a_term).expect("A's segment records its term");
    assert_ne!(a_segment, b_segment);
    let a_file = log_dir(&data).join(format!("segment-{a_segment:08}.log"));
    assert!(
        a_file.is_file(),
        "no segment file {} of A's attempt: {:?}",
        a_file.display(),
        segment_sizes(&data)
    );
    let sizes_before = segment_sizes(&data);
    let outputs_before = output_files(&data);
    let b_done_before = b.ended();
    a.signal("CONT");
    let resumed = Instant::now();
    let (code, a_ended) = a.wait(Duration::from_secs(30));
    eprintln!(
        "the resumed leader stopped {} ms after SIGCONT (B had {} finished then)",
        (a_ended - resumed).as_millis(),
        if b_done_before { "already" } else { "not" }
    );
    assert_eq!(code, Some(1), "the deposed leader's exit\n{}", a.context());
    let lost = format!("coordhost: lost the leadership of job `{JOB}` (term {a_term})");
    assert!(
        a.stderr().contains(&lost),
        "A does not say `{lost}`\n{}",
        a.context()
    );
    let sizes_after = segment_sizes(&data);
    assert_eq!(
        sizes_after.get(&a_file),
        sizes_before.get(&a_file),
        "A appended to its segment {} after it was resumed\n{}",
        a_file.display(),
        a.context()
    );
    let summary = b.finish();
    assert!(summary.recovered(), "B did not recover: {}", summary.0);
    // Nothing published before the resume changed afterwards: A published
    // nothing over it (B publishes each part once).
    let outputs_after = output_files(&data);
    for (name, bytes) in &outputs_before {
        assert!(
            outputs_after.get(name) == Some(bytes),
            "{} changed after the deposed leader was resumed",
            name.display()
        );
    }
    if b_done_before {
        assert_eq!(
            outputs_after.keys().collect::<Vec<_>>(),
            outputs_before.keys().collect::<Vec<_>>(),
            "files appeared in the output after B had finished"
        );
        assert_eq!(
            sizes_after, sizes_before,
            "the log changed after B had finished"
        );
    }
    assert_counts(&data, &fx, "after the paused leader was deposed");
    // A worker logs every command it refuses; the deposed leader's fence
    // kept it from sending any (a command of A's term reaching a worker
    // registered with B would be refused, and logged, here).
    let refused = format!("refused a command of coordinator session {a_term}:");
    for i in 0..3 {
        let log = workers.log_of(i);
        assert!(
            !log.contains(&refused),
            "w{i} received a command of the deposed leader (term {a_term})\n{log}"
        );
    }
    let mut workers = workers;
    for i in 0..3 {
        assert!(workers.is_running(i), "w{i} ended\n{}", workers.logs());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !workers.files_left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = workers.files_left();
    assert!(
        left.is_empty(),
        "files left on the workers after the job: {left:?}\n{}",
        workers.logs()
    );
}

/// The events of the run that ended with A's `JobFailed`: the job's log,
/// or, once B and then C led (C sets the failed run's log aside as
/// `log.discarded-*` and starts a new one), the set-aside log. B and C can
/// lead as soon as A exits, so the test may read either.
fn failed_run_events(data: &Path) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let aside = std::fs::read_dir(data.join(JOB))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("log.discarded-"))
            });
        if let Some(aside) = aside {
            return inspect_events(&aside);
        }
        // C may set the log aside while it is read (a segment gone
        // mid-read): then the next look finds it aside.
        if let Ok(Some(log)) = EventLog::try_read(data)
            && log.count("JobFailed") > 0
        {
            return log.events;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no log of job `{JOB}` under {} holds a JobFailed",
            data.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The events of the log folder `log` (e.g. one set aside), as `coordhost
/// log inspect LOG --json` prints them.
///
/// # Panics
/// If the CLI fails or prints no JSON.
fn inspect_events(log: &Path) -> Vec<serde_json::Value> {
    let out = crate::support::coordhost()
        .args(["log", "inspect"])
        .arg(log)
        .arg("--json")
        .output()
        .expect("spawn coordhost log inspect");
    assert!(
        out.status.success(),
        "log inspect {}: {}",
        log.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    doc["events"].as_array().cloned().unwrap_or_default()
}

/// `FAILPOINTS` that make every attempt (0–5) of sink subtask 0 fail at
/// once: with `max-attempts = 3` the job fails (a task ran out of attempts).
fn sink_always_fails() -> String {
    (0..6)
        .map(|a| format!("task::fail::{SINK}::0::{a}=return(0)"))
        .collect::<Vec<_>>()
        .join(";")
}

/// Issue 24 item 5 (c): a failed job is terminal. A's job fails (its sink
/// subtask 0 fails on every attempt, a fail point of A's process only);
/// A records `JobFailed` and exits 1. B, the next leader, finds it, says
/// so and exits 1 without running anything (B has no fail point: a re-run
/// would have finished). C and D, both started with `--fresh` while A
/// ran, are the deliberate re-run: C leads, discards the failed run and
/// runs the job from scratch; D leads after C finished, sees that the run
/// it was started to replace is gone, and does not discard C's (it finds
/// the job finished).
#[test]
fn a_failed_job_is_not_run_again_by_the_next_leader_and_fresh_runs_it_once() {
    let fx = Fixture::words();
    let etcd = Etcd::start(&fx.path("etcd"));
    let mut j = WordJob::new(&fx.input);
    // Sources last a few seconds: the standbys start while A runs.
    j.source_delay_us = 150;
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let mut command = crate::support::coordhost();
    command.env("FAILPOINTS", sink_always_fails());
    let mut a = Coordinator::of(
        "A",
        crate::support::etcd::spawn_ha_run_as(command, "A", &file, &data, &etcd, TTL_S, &base, &[]),
    );
    let (a_leads, _) = a.wait_for_line(&leading_line());
    let a_term = term_in(&a_leads);
    // etcd elects the oldest campaign: B, then C, then D.
    let mut b = Coordinator::start("B", &file, &data, &etcd, &base, &[]);
    b.wait_for_line(&standby_line());
    // C and D are started to replace A's run: it must have begun.
    a.poll_until("A's JobStarted", || {
        EventLog::read(&data)
            .filter(|l| l.count("JobStarted") == 1)
            .map(|_| ())
    });
    let fresh = ["--fresh".to_owned()];
    let mut c = Coordinator::start("C", &file, &data, &etcd, &base, &fresh);
    c.wait_for_line(&standby_line());
    let mut d = Coordinator::start("D", &file, &data, &etcd, &base, &fresh);
    d.wait_for_line(&standby_line());
    assert!(
        !a.ended() && EventLog::read(&data).is_some_and(|l| l.count("JobFailed") == 0),
        "A's job ended before the standbys were up: the test needs slower sources\n{}",
        a.context()
    );

    let (code, _) = a.wait(STEP);
    assert_eq!(code, Some(1), "A's job fails\n{}", a.context());
    assert!(
        a.stderr().contains("failed on attempt"),
        "A says its task ran out of attempts\n{}",
        a.context()
    );
    let events = failed_run_events(&data);
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event"]["kind"] == "JobFailed")
            .count(),
        1,
        "A recorded the failure"
    );
    let failed_at = events.len();
    let failed = &events[failed_at - 1]["event"];
    assert_eq!(
        failed["kind"], "JobFailed",
        "the failure is A's last record"
    );
    assert_eq!(failed["event"]["exit_code"], 1);
    assert!(
        failed["event"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("failed on attempt")),
        "{failed}"
    );

    let (b_leads, _) = b.wait_for_line(&leading_line());
    assert!(term_in(&b_leads) > a_term);
    let (code, _) = b.wait(STEP);
    assert_eq!(
        code,
        Some(1),
        "B exits with the failed run's code\n{}",
        b.context()
    );
    let says =
        format!("coordhost: job `{JOB}` failed under an earlier coordinator (term {a_term}): ");
    assert!(
        b.stderr().contains(&says) && b.stderr().contains("--fresh"),
        "B says `{says}...` and how to run it again\n{}",
        b.context()
    );

    // C: the deliberate re-run, from scratch.
    let (c_leads, _) = c.wait_for_line(&leading_line());
    let c_term = term_in(&c_leads);
    let summary = c.finish();
    assert!(
        !summary.recovered() && summary.tasks_skipped() == 0,
        "C ran the job from scratch: {}",
        summary.brief()
    );
    assert_counts(&data, &fx, "the job run again with --fresh");
    let discarded: Vec<PathBuf> = std::fs::read_dir(data.join(JOB))
        .expect("the job's folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("log.discarded-"))
        })
        .collect();
    assert_eq!(
        discarded.len(),
        1,
        "the failed run's log is set aside once: {discarded:?}"
    );
    // The failed run's log, as C set it aside: B recorded and ran nothing
    // after A's `JobFailed` (C led at once after B, so it is read here).
    let aside = inspect_events(&discarded[0]);
    assert_eq!(
        aside.len(),
        failed_at,
        "B recorded or ran nothing: {:#?}",
        &aside[failed_at.min(aside.len())..]
    );
    assert_eq!(aside[failed_at - 1]["event"]["kind"], "JobFailed");

    // D: started with --fresh to replace the failed run, which is gone.
    let (d_leads, _) = d.wait_for_line(&leading_line());
    assert!(term_in(&d_leads) > c_term);
    let summary = d.finish();
    assert_eq!(
        summary.tasks_run(),
        0,
        "D ran nothing: C's run is finished: {}",
        summary.brief()
    );
    assert!(
        d.stderr().contains("that run is not discarded again"),
        "D says why --fresh did not apply\n{}",
        d.context()
    );
    assert_counts(&data, &fx, "after D");
    let log = EventLog::read(&data).expect("the job has a log");
    assert_eq!(
        (log.count("JobStarted"), log.count("JobFailed")),
        (1, 0),
        "one fresh run in the new log"
    );
    assert_eq!(
        log.count("JobFinished"),
        2,
        "C's end, and D's after its recovery"
    );
}

/// Runs the binary with `args` (at most 60 s); returns (exit code, stderr,
/// how long it took).
fn run_cli(args: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let mut child = crate::support::coordhost()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run coordhost");
    let mut stderr = child.stderr.take().expect("stderr piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let deadline = started + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("coordhost {args:?} did not end within 60 s (killed)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = reader.join().expect("stderr reader");
    (status.code(), text, started.elapsed())
}

#[test]
fn ha_flags_that_cannot_work_are_refused_in_one_line() {
    let fx = Fixture::words();
    let file = WordJob::new(&fx.input).write(&fx.path("job.toml"));
    let file = file.to_str().expect("utf-8 path");
    let data = fx.path("data");
    let data = data.to_str().expect("utf-8 path");
    let wdir = fx.path("w");
    let wdir = wdir.to_str().expect("utf-8 path");
    let run = |more: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = ["run", file, "--data-dir", data]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        v.extend(more.iter().map(|s| (*s).to_owned()));
        v
    };
    let closed = free_port();
    let closed_url = format!("etcd://{closed}");
    let mut cases: Vec<(Vec<String>, i32, String)> = vec![
        (
            run(&["--ha", "http://x:1"]),
            2,
            "--ha: `http://x:1` is not an etcd URL".into(),
        ),
        (
            run(&["--ha", "etcd://127.0.0.1:1/job"]),
            2,
            "--ha: `etcd://127.0.0.1:1/job`: a coordinator takes etcd://HOST:PORT without a path"
                .into(),
        ),
        (
            run(&["--ha", "etcd://127.0.0.1:1", "--ha-lease-ttl-s", "0"]),
            2,
            "--ha-lease-ttl-s: at least 1".into(),
        ),
        (
            run(&["--ha-lease-ttl-s", "3"]),
            2,
            "the following required arguments were not provided:\n  --ha <etcd[s]://".into(),
        ),
        (
            [
                "worker",
                "--coordinator",
                "etcd://127.0.0.1:1",
                "--data-dir",
                wdir,
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
            2,
            "coordhost: --coordinator `etcd://127.0.0.1:1`: name the job".into(),
        ),
    ];
    let mut closed_args = run(&[]);
    closed_args.extend(["--ha".to_owned(), closed_url.clone()]);
    cases.push((closed_args, 1, format!("etcd at {closed}")));
    for (args, code, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (got, stderr, took) = run_cli(&args);
        assert_eq!(got, Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&says),
            "{args:?} should say `{says}`:\n{stderr}"
        );
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("coordhost:") || l.starts_with("error:"))
            .collect();
        assert_eq!(lines.len(), 1, "{args:?}: one error line:\n{stderr}");
        assert!(
            took < Duration::from_secs(15),
            "{args:?} took {took:?} to be refused"
        );
    }
    assert!(
        !Path::new(data).join(JOB).exists(),
        "a refused run created the job's folder"
    );
}
