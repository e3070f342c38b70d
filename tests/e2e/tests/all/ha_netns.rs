//! Issue 24 item 5: leadership and the network (docs/ha.md). Network
//! partitions of a high-availability job, made in network namespaces (as
//! `workers_netns.rs` makes machines): etcd in the root namespace on the
//! bridge's address, coordinator A (the first leader) in namespace 0,
//! standby B in namespace 1, three `coordhost worker` processes in
//! namespaces 2–4 that find the leader through etcd. A cut is a permanent
//! neighbour entry with a MAC nobody has ([`Netns::cut`]): packets vanish,
//! nothing refuses them, as on a cut cable. The word count job, lease TTL
//! 1 s, heartbeat timeout 1 s.
//!
//! - Only the leader ↔ etcd path is cut: A's lease ends by its own clock,
//!   A stops answering its workers and exits at its fence (not after
//!   etcd's 5 s request timeout), B leads, the workers join it, and the
//!   first task runs on B within 2 s of the cut (measured and printed, the
//!   bound a SIGKILL of the leader meets, docs/ha.md "Figures"); the job
//!   finishes with the exact counts.
//! - The leader is cut from its workers for 30 s, etcd reachable by all:
//!   whatever A does meanwhile (today it gives the workers up and the job
//!   fails; with a slot wait it waits), the result is exactly one finished
//!   job with the exact counts, or one failed job that no leader runs
//!   again. The test says which.
//!
//! Needs root, iproute2 (`ip netns`) and etcd; fails saying so otherwise.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::ha::{
    Coordinator, leading_line, registered_with, sources_finished, standby_line, term_in,
};
use crate::support::crash::{
    EventLog, Fixture, JOB, WordJob, expected_output, first_difference, job_succeeded, output_dir,
    sorted_output,
};
use crate::support::etcd::{Etcd, spawn_ha_run_as};
use crate::support::netns::{Netns, coordhost_in};
use crate::support::process::whole_lines;
use crate::support::workers::{Workers, external_args};

/// Lease TTL of the coordinators, seconds.
const TTL_S: u64 = 1;
/// Heartbeat timeout between coordinators and workers, ms.
const HEARTBEAT_MS: u64 = 1000;
/// Number of workers (namespaces 2, 3, 4).
const WORKERS: usize = 3;
/// The port each coordinator serves workers on, in its own namespace
/// (nothing else listens there).
const PORT: u16 = 7733;
/// The failover bound of an etcd-only cut: the same as a SIGKILL's.
const FAILOVER_WITHIN: Duration = Duration::from_secs(2);
/// How long the leader is cut from its workers.
const CUT_FOR: Duration = Duration::from_secs(30);
/// Longest wait for one step (a guard against a wedged test).
const STEP: Duration = Duration::from_secs(120);

/// One partition test's processes: etcd, A, B and the workers, in the
/// namespaces of the module's doc.
/// Fields drop in this order: the processes, etcd, the folder, the
/// namespaces.
struct Cluster {
    a: Coordinator,
    b: Coordinator,
    workers: Workers,
    _etcd: Etcd,
    fx: Fixture,
    data: std::path::PathBuf,
    a_term: u64,
    net: Netns,
}

impl Cluster {
    /// Starts etcd, A (waits until it leads), B (until it waits as a
    /// standby) and the workers; returns once A's sources finished on the
    /// workers (their partitions on the workers, the sinks running).
    fn start(sink_delay_us: u64) -> Self {
        let net = Netns::create(2 + WORKERS);
        let fx = Fixture::words();
        let etcd = Etcd::start_on(&fx.path("etcd"), &net.bridge_ip());
        let mut job = WordJob::new(&fx.input);
        job.previous_worker_timeout_ms = 1500;
        job.source_delay_us = 40;
        job.sink_delay_us = sink_delay_us;
        let file = job.write(&fx.path("job.toml"));
        let data = fx.path("data");
        let base = fx.path("coordinators");
        let spawn = |name: &'static str, ns: usize| {
            let listen = format!("{}:{PORT}", net.ip(ns));
            Coordinator::of(
                name,
                spawn_ha_run_as(
                    coordhost_in(net.name(ns)),
                    name,
                    &file,
                    &data,
                    &etcd,
                    TTL_S,
                    &base,
                    // Plain gRPC on a namespace's address (the TLS
                    // cluster is workers_tls.rs).
                    &[
                        external_args(&listen, WORKERS, HEARTBEAT_MS),
                        vec!["--insecure-listen".into()],
                    ]
                    .concat(),
                ),
            )
        };
        let mut a = spawn("A", 0);
        a.also_show.push(fx.path("workers"));
        let (a_leads, _) = a.wait_for_line(&leading_line());
        let mut b = spawn("B", 1);
        b.also_show.push(fx.path("workers"));
        let (b_waits, _) = b.wait_for_line(&standby_line());
        assert!(
            b_waits.contains(&net.ip(0)),
            "B names A as the leader: {b_waits}"
        );
        let workers = Workers::start_in_namespaces_from(
            &net,
            2,
            WORKERS,
            &format!("{}/{JOB}", etcd.url()),
            &fx.path("workers"),
            2,
        );
        a.poll_until("A's sources finish on the workers", || {
            sources_finished(&data, job.sources)
        });
        Self {
            a_term: term_in(&a_leads),
            fx,
            data,
            a,
            b,
            workers,
            _etcd: etcd,
            net,
        }
    }

    fn b_addr(&self) -> String {
        format!("{}:{PORT}", self.net.ip(1))
    }

    /// Every process's stderr, for failure messages.
    fn context(&self) -> String {
        format!(
            "{}\n{}\n{}",
            self.a.context(),
            self.b.context(),
            self.workers.logs()
        )
    }

    /// Cuts (or heals) A, in namespace 0, from every worker both ways.
    fn cut_a_from_workers(&self, heal: bool) {
        for w in 2..2 + WORKERS {
            let act = |from: usize, to: &str| {
                if heal {
                    self.net.heal(from, to);
                } else {
                    self.net.cut(from, to);
                }
            };
            act(0, &self.net.ip(w));
            act(w, &self.net.ip(0));
        }
    }
}

/// Whether `log` (a worker's stderr) shows it ran a task after it
/// registered with session `term`.
fn ran_in_session(log: &str, term: u64) -> bool {
    log.lines()
        .skip_while(|l| !(l.contains("registered") && l.ends_with(&format!("session={term}"))))
        .any(|l| l.contains("running") && l.contains("vertex="))
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
fn an_etcd_only_cut_of_the_leader_fails_over_within_2_s() {
    let mut c = Cluster::start(2000);
    let cut = Instant::now();
    c.net.cut(0, &c.net.bridge_ip());
    let b_addr = c.b_addr();
    let (mut a_end, mut b_leads, mut all_registered, mut first_task) = (None, None, None, None);
    let mut b_term = 0;
    let deadline = cut + STEP;
    while first_task.is_none() || a_end.is_none() {
        assert!(
            Instant::now() < deadline,
            "no failover within {STEP:?} of the cut\n{}",
            c.context()
        );
        if a_end.is_none() && c.a.ended() {
            a_end = Some(Instant::now());
        }
        if b_leads.is_none()
            && let Some(line) = whole_lines(&c.b.stderr())
                .lines()
                .find(|l| l.contains(&leading_line()))
        {
            b_term = term_in(line);
            b_leads = Some(Instant::now());
        }
        if b_leads.is_some() {
            let logs: Vec<String> = (0..WORKERS).map(|i| c.workers.log_of(i)).collect();
            if all_registered.is_none() && logs.iter().all(|l| registered_with(l, &b_addr, b_term))
            {
                all_registered = Some(Instant::now());
            }
            if first_task.is_none() && logs.iter().any(|l| ran_in_session(l, b_term)) {
                first_task = Some(Instant::now());
            }
        }
        assert!(!c.b.ended(), "B ended during the failover\n{}", c.context());
        std::thread::sleep(Duration::from_millis(10));
    }
    let ms = |t: Option<Instant>| t.map_or("-".to_owned(), |t| (t - cut).as_millis().to_string());
    eprintln!(
        "etcd-only cut of the leader (TTL {TTL_S} s, heartbeat timeout {HEARTBEAT_MS} ms), ms from the cut: \
         old leader exited {}, standby leads {}, {WORKERS} workers registered with it {}, first task on it {}",
        ms(a_end),
        ms(b_leads),
        ms(all_registered),
        ms(first_task)
    );
    let (code, _) = c.a.wait(Duration::from_secs(1));
    assert_eq!(
        code,
        Some(1),
        "A's exit once cut from etcd\n{}",
        c.context()
    );
    let lost = format!(
        "coordhost: lost the leadership of job `{JOB}` (term {})",
        c.a_term
    );
    assert!(
        c.a.stderr().contains(&lost),
        "A says `{lost}`\n{}",
        c.context()
    );
    let a_end = a_end.expect("A ended");
    // The fence is at most the TTL after the last keep-alive etcd answered,
    // which was before the cut: A stops then, not after etcd's 5 s request
    // timeout.
    assert!(
        a_end - cut < Duration::from_millis(TTL_S * 1000 + 500),
        "A stopped {} ms after the cut: past its fence (TTL {TTL_S} s)\n{}",
        (a_end - cut).as_millis(),
        c.context()
    );
    assert!(b_term > c.a_term, "B's term {b_term} is not newer than A's");
    let failover = first_task.expect("a task ran on B") - cut;
    assert!(
        failover < FAILOVER_WITHIN,
        "failover took {} ms from the cut to the first task on the new leader (bound {} ms)\n{}",
        failover.as_millis(),
        FAILOVER_WITHIN.as_millis(),
        c.context()
    );
    let summary = c.b.finish();
    assert!(summary.recovered(), "B recovered the job: {}", summary.0);
    assert_counts(&c.data, &c.fx, "after the etcd-only cut of the leader");
}

#[test]
fn a_leader_cut_from_its_workers_for_30_s_ends_in_one_finished_job_or_one_failed_job() {
    // Sinks slow enough to be running when the cut starts.
    let mut c = Cluster::start(500);
    let cut = Instant::now();
    c.cut_a_from_workers(false);
    let mut b_led_during_cut = None;
    while cut.elapsed() < CUT_FOR {
        if b_led_during_cut.is_none() && c.b.stderr().contains(&leading_line()) {
            b_led_during_cut = Some(cut.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    c.cut_a_from_workers(true);
    eprintln!(
        "leader cut from its workers for {} s; A {} during the cut; B {}",
        CUT_FOR.as_secs(),
        if c.a.ended() { "ended" } else { "ran on" },
        b_led_during_cut.map_or("did not lead during the cut".to_owned(), |t| format!(
            "led {} ms into the cut",
            t.as_millis()
        ))
    );
    let (a_code, _) = c.a.wait(STEP);
    let (b_code, _) = c.b.wait(STEP);
    let log = EventLog::read(&c.data).expect("the job has a log");
    assert_eq!(
        log.count("JobStarted"),
        1,
        "the job ran from scratch once, never again\n{}",
        c.context()
    );
    let finished = log.count("JobFinished") > 0;
    let failed = log.count("JobFailed");
    match (finished, failed) {
        (true, 0) => {
            eprintln!("outcome: one finished job (A exit {a_code:?}, B exit {b_code:?})");
            assert!(
                a_code == Some(0) || b_code == Some(0),
                "a coordinator finished the job\n{}",
                c.context()
            );
            for (name, code, coordinator) in [("A", a_code, &c.a), ("B", b_code, &c.b)] {
                assert!(
                    code == Some(0)
                        || (code == Some(1)
                            && coordinator.stderr().contains("lost the leadership of job")),
                    "{name} ended {code:?} without the job finished or its leadership lost\n{}",
                    c.context()
                );
            }
            assert_counts(&c.data, &c.fx, "after the leader was cut from its workers");
        }
        (false, 1) => {
            let last_error = |c: &Coordinator| {
                c.stderr()
                    .lines()
                    .rfind(|l| l.starts_with("coordhost:"))
                    .unwrap_or_default()
                    .to_owned()
            };
            eprintln!(
                "outcome: one failed job, not run again (A exit {a_code:?}, B exit {b_code:?})\n  A: {}\n  B: {}",
                last_error(&c.a),
                last_error(&c.b)
            );
            let at = log
                .events
                .iter()
                .position(|e| e["event"]["kind"] == "JobFailed")
                .expect("a JobFailed");
            let after: Vec<&serde_json::Value> = log.events[at + 1..]
                .iter()
                .filter(|e| e["event"]["kind"] != "LeaderElected")
                .collect();
            assert!(
                after.is_empty(),
                "nothing ran after the job failed: {after:#?}\n{}",
                c.context()
            );
            assert_eq!(a_code, Some(1), "A's job failed\n{}", c.context());
            let says = format!(
                "coordhost: job `{JOB}` failed under an earlier coordinator (term {}): ",
                c.a_term
            );
            assert_eq!(
                b_code,
                Some(1),
                "B exits as the failed run did\n{}",
                c.context()
            );
            assert!(
                c.b.stderr().contains(&says),
                "B says `{says}...`\n{}",
                c.context()
            );
            assert!(!job_succeeded(&c.data), "a failed job has no _SUCCESS");
            // What was published before the failure is exact: each line a
            // right count, no word twice.
            let want: BTreeSet<String> = expected_output(&c.fx.input)
                .lines()
                .map(str::to_owned)
                .collect();
            let mut words = BTreeSet::new();
            for part in crate::support::part_files(&output_dir(&c.data)) {
                let text = std::fs::read_to_string(&part).expect("part file");
                for line in text.lines() {
                    assert!(
                        want.contains(line),
                        "{}: `{line}` is not a right count",
                        part.display()
                    );
                    let word = line.split_once(' ').map_or(line, |(w, _)| w);
                    assert!(words.insert(word.to_owned()), "`{word}` published twice");
                }
            }
        }
        other => panic!(
            "the log ends neither in one finished nor in one failed job: (finished, failed) = {other:?}\n{}",
            c.context()
        ),
    }
}
