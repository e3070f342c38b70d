//! Issue 14, item 6: the shuffle master learns which partitions the worker
//! processes report (WIT 0.1.1, `job-shuffle-context`), and shuffle masters
//! of 0.1.0 still work. Real processes: 1 coordinator + 3 `coordhost worker`
//! processes on loopback, the word count of `support/crash.rs`.
//!
//! Each test kills the coordinator once every source subtask finished
//! (while the slowed sinks still read), restarts it with the workers alive,
//! and reads the restarted coordinator's log lines (`COORDHOST_LOG=info`),
//! which say who answered FLIP-383's partition query:
//! - a 0.1.1 shuffle master in Rust (`local-shuffle`) and in Python
//!   (`py-shuffle`) answers from the workers' reports, and the host keeps
//!   what it answered: every source is skipped;
//! - the same Rust plugin built against the frozen 0.1.0 contract
//!   (`local-shuffle-0.1.0`) cannot see the workers: the host answers from
//!   their reports itself, with the same result;
//! - a 0.1.1 shuffle master that answers from stale files on the
//!   coordinator's disk while no live worker holds them is not believed:
//!   the host never sends a consumer to a partition only the plugin vouches
//!   for, and the sources run again.

use crate::support::crash::{
    Coordhost, EventLog, Fixture, SOURCE, WordJob, expected_output, first_difference, sorted_output,
};
use crate::support::workers::{Workers, external_args, files_under, free_port};

/// Heartbeat timeout of these runs, ms.
const HEARTBEAT_MS: u64 = 1000;
/// Source subtasks of the word count.
const SOURCES: usize = 4;
/// The line the host logs when the shuffle master answered from the
/// workers' reports (`host/src/job/driver.rs`).
const PLUGIN_ANSWERED: &str = "partitions reported by workers, as the shuffle master answered";
/// The line the host logs when it answered from the reports itself.
const HOST_ANSWERED: &str = "partitions reported by workers";

/// Runs the word count with `shuffle` on 3 fresh workers, kills the
/// coordinator once every source finished, lets `between` act on the
/// workers and the data directory, restarts the coordinator and runs it to
/// the end. Returns the restarted run's stderr, the sources that ran again
/// in it, the run's brief summary and the workers (still running).
fn kill_after_sources_and_restart(
    fx: &Fixture,
    name: &str,
    tune: impl FnOnce(&mut WordJob),
    between: impl FnOnce(&mut Workers, &std::path::Path),
) -> (String, usize, u64, Workers) {
    let mut j = WordJob::new(&fx.input);
    j.previous_worker_timeout_ms = 3000;
    j.source_delay_us = 0;
    j.sink_delay_us = 2000;
    tune(&mut j);
    let file = j.write(&fx.path(&format!("{name}.toml")));
    let addr = free_port();
    let mut workers = Workers::start(3, &addr, &fx.path(&format!("{name}-workers")), 2);
    let data = fx.path(name);
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 3, HEARTBEAT_MS);
    run.log = Some("warn,coordhost::job=info");
    let mut running = run.start();
    running
        .poll_until(|| {
            EventLog::read(&data)
                .filter(|l| l.finished(SOURCE).len() == SOURCES)
                .map(|_| ())
        })
        .unwrap_or_else(|e| panic!("{name}: the sources finish: {e}\n{}", workers.logs()));
    let _killed = running.kill();
    between(&mut workers, &data);
    let finale = run.run_to_end();
    let got = sorted_output(&data);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "{name}: output differs from the counts: {}\n{}",
        first_difference(&got, &want),
        workers.logs()
    );
    let log = EventLog::read(&data).expect("the event log");
    let newest = log.newest_segment().expect("a segment");
    let rerun = log.finished_in_segment(SOURCE, newest).len();
    let stderr = std::fs::read_to_string(format!("{}.run2.err", data.display()))
        .expect("the restarted run's stderr");
    let left = workers.files_left();
    assert!(
        left.is_empty(),
        "{name}: files left on the workers after the job: {left:?}\n{}",
        workers.logs()
    );
    (stderr, rerun, finale.summary.tasks_skipped(), workers)
}

#[test]
fn shuffle_masters_of_0_1_1_answer_from_the_workers_reports_and_those_of_0_1_0_still_recover() {
    let fx = Fixture::words();
    for (plugin, reads_reports) in [
        ("local-shuffle", true),
        ("py-shuffle", true),
        ("local-shuffle-0.1.0", false),
    ] {
        let (stderr, rerun, skipped, _workers) =
            kill_after_sources_and_restart(&fx, plugin, |j| j.shuffle_plugin = plugin, |_, _| {});
        assert!(
            stderr.contains(HOST_ANSWERED),
            "{plugin}: the restarted coordinator never asked which partitions the workers hold:\n{stderr}"
        );
        assert_eq!(
            stderr.contains(PLUGIN_ANSWERED),
            reads_reports,
            "{plugin}: who answered the partition query (the plugin: {reads_reports}):\n{stderr}"
        );
        assert_eq!(
            rerun, 0,
            "{plugin}: {rerun} sources ran again although the workers held their partitions:\n{stderr}"
        );
        assert!(
            skipped >= SOURCES as u64,
            "{plugin}: {skipped} tasks skipped, expected every source:\n{stderr}"
        );
    }
}

#[test]
fn a_partition_the_shuffle_master_vouches_for_but_no_live_worker_holds_runs_again() {
    let fx = Fixture::words();
    let (stderr, rerun, _skipped, _workers) = kill_after_sources_and_restart(
        &fx,
        "stale",
        |j| j.shuffle_ignore_worker_reports = true,
        |workers, data| {
            // The partitions, byte for byte, at the place the shuffle master
            // chose in its own grant on the coordinator's disk: what a
            // shuffle master that checks files sees as surviving...
            let grant = data.join("shuffle");
            let mut copied = 0;
            for i in 0..3 {
                let held = workers.data_dir(i).join("partitions");
                let mut files = Vec::new();
                files_under(&held, &mut files);
                for f in files {
                    let to = grant.join(f.strip_prefix(&held).expect("below the root"));
                    std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
                    std::fs::copy(&f, &to).expect("copy a partition file");
                    copied += 1;
                }
            }
            assert!(copied > 0, "no worker held a partition");
            // ...while every worker that held them is gone; new, empty
            // processes take their place.
            for i in 0..3 {
                workers.kill(i);
                workers.restart(i);
            }
        },
    );
    assert!(
        stderr.contains(PLUGIN_ANSWERED),
        "the shuffle master was not asked:\n{stderr}"
    );
    assert!(
        stderr.contains("that no live worker holds as the log recorded"),
        "the shuffle master's claims were not checked against the workers:\n{stderr}"
    );
    assert_eq!(
        rerun, SOURCES,
        "sources whose partitions only the shuffle master vouched for must run again:\n{stderr}"
    );
}
