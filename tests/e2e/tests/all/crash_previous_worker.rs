//! Scenarios 14 and 15: the previous-worker timeout of `[recovery]`
//! (`previous-worker-timeout-ms`, Flink's
//! `execution.batch.job-recovery.previous-worker.recovery.timeout`): how long
//! a restarted coordinator waits for the shuffle master to report the
//! partitions it needs.
//!
//! Both kill `coordhost run` once the event log shows every source subtask
//! finished (the sink is slowed, so the job is still running), then start it
//! again on the same data directory.
//!
//! - 14: timeout 0 and the shuffle folder deleted: nothing is reported, so
//!   every source runs again, and the output is still right.
//! - 15: timeout 60 s with every partition still there: the wait ends as
//!   soon as all are reported, so the restart takes far less than 60 s, and
//!   the finished sources are skipped.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, SINK, SOURCE, SourcesDone, WordJob, describe_log,
    expected_output, first_difference, job_succeeded, sorted_output, sources_done,
};

/// Source parallelism of the job.
const SOURCES: u32 = 4;

/// A crashed run: the command to start it again, how "sources finished" was
/// decided, and the event log right after the kill.
struct Crashed {
    cmd: Coordhost,
    data_dir: PathBuf,
    how: SourcesDone,
    log_at_kill: Option<EventLog>,
}

/// Starts the job with `previous-worker-timeout-ms = timeout_ms` and SIGKILLs
/// it once every source subtask finished; checks the job had not finished.
fn crash_after_sources_finished(fx: &Fixture, timeout_ms: u64) -> Crashed {
    let job = WordJob {
        previous_worker_timeout_ms: timeout_ms,
        sink_delay_us: 600,
        ..WordJob::new(&fx.input)
    }
    .write(&fx.path("job.toml"));
    let data_dir = fx.path("data");
    let mut cmd = Coordhost::new(&job, &data_dir);
    let mut run = cmd.start();
    let how = match run.poll_until(|| sources_done(&data_dir, SOURCES)) {
        Ok(how) => how,
        Err(why) => panic!(
            "never saw every {SOURCE} subtask finished: {why}\n{}",
            run.stderr_tail()
        ),
    };
    let after = match run.kill() {
        Kill::Killed { after } => after,
        Kill::TooLate(_) => panic!("the job finished before the kill"),
    };
    assert!(
        !job_succeeded(&data_dir),
        "_SUCCESS was written before the kill"
    );
    let log_at_kill = EventLog::read(&data_dir);
    eprintln!(
        "killed after {after:?} ({how:?}): {}",
        describe_log(log_at_kill.as_ref())
    );
    Crashed {
        cmd,
        data_dir,
        how,
        log_at_kill,
    }
}

/// The recovery checks need the event log; fail with one clear line if the
/// binary did not write one.
fn require_event_log(c: &Crashed, restarted: &str) -> EventLog {
    assert_eq!(
        c.how,
        SourcesDone::EventLog,
        "no event log under {} (the kill was timed by the shuffle's `index` files), so \
         nothing could be recovered (restarted run: {restarted}); `coordhost run` must record \
         the job's events",
        c.data_dir.join(crate::support::crash::JOB).display()
    );
    c.log_at_kill.clone().expect("a log at the kill")
}

#[test]
fn with_no_previous_worker_wait_and_the_partitions_gone_every_source_runs_again_and_the_output_is_still_right()
 {
    let fx = Fixture::words();
    let mut c = crash_after_sources_finished(&fx, 0);
    let shuffle = c.data_dir.join("shuffle");
    assert!(
        shuffle.is_dir(),
        "{} holds the partitions",
        shuffle.display()
    );
    std::fs::remove_dir_all(&shuffle).expect("delete the shuffle folder");

    let finale = c.cmd.run_to_end();
    let s = &finale.summary;
    eprintln!("restarted run: {}", s.brief());
    let got = sorted_output(&c.data_dir);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "output is wrong: {}",
        first_difference(&got, &want)
    );
    assert!(
        s.tasks_run() > u64::from(SOURCES),
        "every source and at least one sink run again: {}",
        s.0
    );

    let log_at_kill = require_event_log(&c, &s.brief());
    let sinks_done_at_kill = log_at_kill.finished(SINK);
    let sinks = s.parallelism(SINK);
    assert!(
        s.tasks_run() >= u64::from(SOURCES) + u64::from(sinks) - sinks_done_at_kill.len() as u64,
        "every source and every sink unfinished at the kill ({sinks_done_at_kill:?} were done) run: {}",
        s.0
    );
    let final_log = EventLog::read(&c.data_dir).expect("the event log after the restarted run");
    let newest = final_log.newest_segment().expect("a segment");
    assert_eq!(
        final_log.finished_in_segment(SOURCE, newest),
        (0..SOURCES).collect::<BTreeSet<u32>>(),
        "with no partition reported, every {SOURCE} subtask runs again"
    );
}

#[test]
fn with_every_partition_present_the_restart_ends_its_previous_worker_wait_early_and_skips_the_sources()
 {
    let fx = Fixture::words();
    let mut c = crash_after_sources_finished(&fx, 60_000);

    let finale = c.cmd.run_to_end();
    let s = &finale.summary;
    eprintln!(
        "restarted run: {} (measured {:?})",
        s.brief(),
        finale.elapsed
    );
    let got = sorted_output(&c.data_dir);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "output is wrong: {}",
        first_difference(&got, &want)
    );
    // Scenario 15's one timing assertion: "far less than 60 s".
    let far_less = Duration::from_secs(30);
    assert!(
        finale.elapsed < far_less && s.wall_ms() < 30_000,
        "with a 60 s previous-worker timeout and every partition present, the restart took {:?} \
         (summary wall_ms {}): the wait did not end early",
        finale.elapsed,
        s.wall_ms()
    );

    let _log_at_kill = require_event_log(&c, &s.brief());
    assert!(s.recovered(), "the restarted run did not recover: {}", s.0);
    assert!(
        s.tasks_skipped() >= u64::from(SOURCES),
        "the {SOURCES} finished sources are skipped: {}",
        s.0
    );
    let final_log = EventLog::read(&c.data_dir).expect("the event log after the restarted run");
    let newest = final_log.newest_segment().expect("a segment");
    let rerun = final_log.finished_in_segment(SOURCE, newest);
    assert!(
        rerun.is_empty(),
        "{SOURCE} subtasks {rerun:?} ran again although their partitions were all present"
    );
}
