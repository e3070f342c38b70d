//! Issue 31, item 5 (workers), with real `coordhost run` and `coordhost
//! worker` processes on loopback:
//!
//! - a coordinator whose job finished says goodbye before it exits: each
//!   worker says so in one line, gives no "lost the coordinator" warning,
//!   and serves the next coordinator; meanwhile the lingering `--ui`'s
//!   `/metrics` counts each worker's heartbeats;
//! - `--exit-when-idle`: workers exit 0 after the goodbye; after a
//!   coordinator SIGKILLed (no goodbye) they exit 0 once no coordinator
//!   answered for `--keep-partitions-ms`, their partitions deleted;
//! - a `Goodbye` of another session (a stranger on plain loopback gRPC) is
//!   refused and changes nothing (with TLS, a caller without the
//!   coordinator's certificate is refused: `workers_tls`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, SOURCE, WordJob, expected_output, first_difference,
    sorted_output,
};
use crate::support::process::whole_lines;
use crate::support::ui::{http, metric_type, sample, ui_address};
use crate::support::workers::{Workers, external_args, files_under, free_port};

/// Heartbeat timeout of these runs, ms (interval: a tenth).
const HEARTBEAT_MS: u64 = 1000;
/// Heartbeat timeout of the goodbye test's runs, ms: longer, since that
/// test fails on any "lost the coordinator" line, and a 1 s timeout saw one
/// mid-job on a loaded 2-core machine (a CI-like run beside a flood test).
const GOODBYE_HEARTBEAT_MS: u64 = 3000;
/// The line of a worker whose coordinator said goodbye after the job finished.
const ENDED: &str = "the job wordcount ended (finished); waiting for the next coordinator";
/// The warning of a worker whose coordinator vanished.
const LOST: &str = "lost the coordinator";

fn job(fx: &Fixture, tune: impl FnOnce(&mut WordJob)) -> PathBuf {
    let mut j = WordJob::new(&fx.input);
    j.previous_worker_timeout_ms = 1500;
    tune(&mut j);
    j.write(&fx.path("job.toml"))
}

fn assert_output(data_dir: &Path, fx: &Fixture, context: &str) {
    let got = sorted_output(data_dir);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "{context}: output differs from the counts: {}",
        first_difference(&got, &want)
    );
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// A heartbeat in flight when the goodbye comes is answered "unknown" (the
/// coordinator forgot the worker when it took the goodbye): the worker
/// still says the job ended, not that it lost the coordinator (a race CI
/// met under load; the knob makes the heartbeat cross the goodbye).
#[test]
fn a_heartbeat_that_crosses_the_goodbye_is_no_loss() {
    let fx = Fixture::words();
    let file = job(&fx, |_| {});
    let addr = free_port();
    let knob = "worker::heartbeat-crosses-goodbye=1*return";
    let workers =
        Workers::start_with_knobs(2, &addr, &fx.path("workers"), 2, &[(0, knob), (1, knob)]);
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 2, GOODBYE_HEARTBEAT_MS);
    // The coordinator stays up after the goodbye (its page lingers), so
    // the crossing heartbeat, sent 300 ms after the goodbye, is answered.
    run.extra_args
        .extend(["--ui", "127.0.0.1:0", "--ui-linger-s", "3"].map(String::from));
    let mut running = run.start();
    running
        .poll_until(|| run.summary.exists().then_some(()))
        .expect("the job ends and the page lingers");
    std::thread::sleep(Duration::from_millis(1000));
    for i in 0..2 {
        let log = workers.log_of(i);
        assert!(
            !log.contains(LOST),
            "w{i} took the crossing for a loss:\n{log}"
        );
        assert_eq!(count(&log, ENDED), 1, "w{i}:\n{log}");
    }
    running.finish();
    assert_output(&data, &fx, "the job with workers");
}

#[test]
fn a_finished_job_says_goodbye_and_its_workers_wait_for_the_next_without_a_warning() {
    let fx = Fixture::words();
    let file = job(&fx, |_| {});
    let addr = free_port();
    let mut workers = Workers::start(2, &addr, &fx.path("workers"), 2);
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 2, GOODBYE_HEARTBEAT_MS);
    run.extra_args
        .extend(["--ui", "127.0.0.1:0", "--ui-linger-s", "5"].map(String::from));
    let mut running = run.start();
    let ui = ui_address(&fx.path("data.run1.err"));
    // The summary is written after the goodbye, while the page lingers.
    running
        .poll_until(|| run.summary.exists().then_some(()))
        .expect("the job ends and the page lingers");

    // /metrics: heartbeats per worker, a counter and a gauge with HELP.
    let (status, _, metrics) = http(&ui, "GET", "/metrics");
    assert_eq!(status, 200, "{metrics}");
    assert_eq!(
        metric_type(&metrics, "coordhost_worker_heartbeats"),
        Some("counter"),
        "{metrics}"
    );
    assert_eq!(
        metric_type(&metrics, "coordhost_worker_heartbeat_age_seconds"),
        Some("gauge"),
        "{metrics}"
    );
    for family in [
        "coordhost_worker_heartbeats",
        "coordhost_worker_heartbeat_age_seconds",
    ] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(&format!("# HELP {family} ")) && l.len() > 40),
            "{family} has no HELP text:\n{metrics}"
        );
    }
    for w in ["w0", "w1"] {
        let beats = sample(
            &metrics,
            &format!("coordhost_worker_heartbeats_total{{worker=\"{w}\"}}"),
        );
        assert!(
            beats.is_some_and(|n| n > 0.0),
            "{w}: heartbeats {beats:?}:\n{metrics}"
        );
        let age = sample(
            &metrics,
            &format!("coordhost_worker_heartbeat_age_seconds{{worker=\"{w}\"}}"),
        );
        assert!(
            age.is_some_and(|s| (0.0..120.0).contains(&s)),
            "{w}: seconds since its last heartbeat {age:?}:\n{metrics}"
        );
    }
    // The goodbye came before the linger: each worker already said so.
    for i in 0..2 {
        let log = workers.log_of(i);
        assert_eq!(count(&log, ENDED), 1, "w{i}:\n{log}");
    }

    running.finish();
    assert_output(&data, &fx, "the job with workers");
    // Past the heartbeat timeout after the coordinator exited: a worker
    // that took the exit for a loss would have warned by now.
    std::thread::sleep(Duration::from_millis(GOODBYE_HEARTBEAT_MS * 2));
    for i in 0..2 {
        assert!(workers.is_running(i), "w{i} ended:\n{}", workers.logs());
        let log = workers.log_of(i);
        assert_eq!(count(&log, ENDED), 1, "w{i}: one line:\n{log}");
        assert!(!log.contains(LOST), "w{i} warned after a goodbye:\n{log}");
    }

    // The next coordinator finds them.
    let data2 = fx.path("data2");
    let mut next = Coordhost::new(&file, &data2);
    next.extra_args = external_args(&addr, 2, GOODBYE_HEARTBEAT_MS);
    let done = next.run_to_end();
    assert_eq!(
        done.summary.0["workers"].as_u64(),
        Some(4),
        "{}",
        done.summary.0
    );
    assert_output(&data2, &fx, "the next job on the same workers");
    std::thread::sleep(Duration::from_millis(GOODBYE_HEARTBEAT_MS * 2));
    for i in 0..2 {
        let log = workers.log_of(i);
        assert_eq!(count(&log, ENDED), 2, "w{i}: one line per job:\n{log}");
        assert!(!log.contains(LOST), "w{i}:\n{log}");
    }
    assert!(
        workers.files_left().is_empty(),
        "{:?}",
        workers.files_left()
    );
}

#[test]
fn exit_when_idle_workers_exit_0_after_the_goodbye() {
    let fx = Fixture::words();
    let file = job(&fx, |j| {
        j.source_delay_us = 0;
        j.sink_delay_us = 0;
    });
    let addr = free_port();
    let mut workers = Workers::start_keeping_with(2, &addr, &fx.path("workers"), 2, 60_000, |_| {
        vec!["--exit-when-idle".into()]
    });
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 2, HEARTBEAT_MS);
    run.run_to_end();
    assert_output(&data, &fx, "one-shot workers");
    for i in 0..2 {
        let status = workers
            .wait_exit(i, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("w{i} still runs 30 s after the job:\n{}", workers.logs()));
        let log = workers.log_of(i);
        assert_eq!(status.code(), Some(0), "w{i} ended {status}:\n{log}");
        assert!(
            log.contains(
                "the job wordcount ended (finished); exiting once no attempt runs (--exit-when-idle)"
            ) && log.contains("the job served ended and no attempt runs: exiting (--exit-when-idle)"),
            "w{i}:\n{log}"
        );
        assert!(!log.contains(LOST), "w{i}:\n{log}");
        let mut left = Vec::new();
        files_under(&workers.data_dir(i).join("partitions"), &mut left);
        files_under(&workers.data_dir(i).join("sink"), &mut left);
        assert!(left.is_empty(), "w{i} left {left:?}");
    }
}

#[test]
fn exit_when_idle_workers_exit_0_the_keep_time_after_their_coordinator_was_killed() {
    const KEEP_MS: u64 = 1000;
    let fx = Fixture::words();
    let file = job(&fx, |j| {
        j.source_delay_us = 0;
        j.sink_delay_us = 3000;
    });
    let addr = free_port();
    let mut workers =
        Workers::start_keeping_with(2, &addr, &fx.path("workers"), 2, KEEP_MS, |_| {
            vec!["--exit-when-idle".into()]
        });
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 2, HEARTBEAT_MS);
    let mut running = run.start();
    running
        .poll_until(|| {
            EventLog::read(&data)
                .filter(|l| l.finished(SOURCE).len() == 4)
                .map(|_| ())
        })
        .expect("the sources finish");
    assert!(
        !workers.files_left().is_empty(),
        "the workers hold the sources' partitions"
    );
    assert!(
        matches!(running.kill(), Kill::Killed { .. }),
        "killed midway"
    );
    let killed = Instant::now();
    for i in 0..2 {
        let status = workers
            .wait_exit(i, Duration::from_secs(30))
            .unwrap_or_else(|| {
                panic!(
                    "w{i} still runs 30 s after its coordinator was killed:\n{}",
                    workers.logs()
                )
            });
        let waited = killed.elapsed();
        let log = workers.log_of(i);
        assert_eq!(status.code(), Some(0), "w{i} ended {status}:\n{log}");
        // Lost after the heartbeat timeout (less one interval), then idle
        // for the keep time.
        assert!(
            waited >= Duration::from_millis(HEARTBEAT_MS / 2 + KEEP_MS),
            "w{i} exited {waited:?} after the kill: before the heartbeat timeout and keep time:\n{log}"
        );
        assert!(log.contains(LOST), "w{i}: no goodbye, a loss:\n{log}");
        assert!(
            log.contains(
                "no coordinator for 1000 ms (--keep-partitions-ms) and no attempt runs: exiting (--exit-when-idle)"
            ),
            "w{i}:\n{log}"
        );
        assert!(!log.contains("ended ("), "w{i}:\n{log}");
        let mut left = Vec::new();
        files_under(&workers.data_dir(i).join("partitions"), &mut left);
        assert!(left.is_empty(), "w{i} exited leaving {left:?}");
    }
}

#[test]
fn a_goodbye_of_another_session_is_refused_and_the_worker_serves_on() {
    let fx = Fixture::words();
    let file = job(&fx, |j| j.sink_delay_us = 1000);
    let addr = free_port();
    let workers = Workers::start(1, &addr, &fx.path("workers"), 4);
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 1, HEARTBEAT_MS);
    let mut running = run.start();
    // The session w0 registered in (its `registered ... session=N` line).
    let session: u64 = running
        .poll_until(|| {
            whole_lines(&workers.log_of(0)).lines().find_map(|l| {
                l.contains("registered")
                    .then(|| l.split("session=").nth(1))?
                    .and_then(|s| s.split_whitespace().next())
                    .and_then(|s| s.parse().ok())
            })
        })
        .expect("w0 registers");
    let w0 = workers.address(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let answer = rt.block_on(async {
        let mut client =
            coordhost::rpc::worker_client::WorkerClient::connect(format!("http://{w0}"))
                .await
                .expect("connect to w0");
        client
            .goodbye(coordhost::rpc::GoodbyeRequest {
                session: session.wrapping_add(1),
                job: "wordcount".into(),
                end: coordhost::rpc::JobEnd::Finished.into(),
            })
            .await
    });
    let status = answer.expect_err("a goodbye of another session was taken");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("serves coordinator session {session}")),
        "{status:?}"
    );
    let done = running.finish();
    assert_eq!(
        done.summary.0["workers"].as_u64(),
        Some(4),
        "{}",
        done.summary.0
    );
    assert_output(&data, &fx, "after a stranger's goodbye");
    let log = workers.log_of(0);
    assert!(
        log.contains(&format!(
            "refused a command of coordinator session {}",
            session.wrapping_add(1)
        )),
        "w0 did not log the refusal:\n{log}"
    );
    // The one goodbye acted on is the coordinator's, after the job.
    assert_eq!(count(&log, "the job wordcount ended"), 1, "{log}");
    assert_eq!(count(&log, ENDED), 1, "{log}");
    assert!(!log.contains(LOST), "{log}");
}
