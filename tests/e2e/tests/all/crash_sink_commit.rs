//! Scenario 13, "Crash while sinks commit": `coordhost run` is SIGKILLed
//! after some sink subtasks published their part files and before the job's
//! `_SUCCESS`; the restarted run must end with exactly the rows of an
//! uninterrupted run (none duplicated, none missing), keep the published
//! sinks that the event log recorded as finished (skipped: same part file,
//! not run again) and run every other sink subtask.

use std::collections::BTreeSet;

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, SINK, SOURCE, WordJob, describe_log, expected_output,
    first_difference, job_succeeded, published_parts, sorted_output,
};

/// Source parallelism of the job.
const SOURCES: u32 = 4;

/// The job: about 8 sink subtasks (`bytes-per-task` over ~160 KB of
/// shuffled partial counts), each slowed so that they publish over a second
/// or more in two waves on 4 workers. `snapshot-min-pause-ms = 0` attaches
/// a snapshot to every `ExecutionFinished`, so no recorded sink finish is a
/// trailing one without a snapshot (docs/recovery.md step 3) and every
/// recorded sink is eligible for skipping.
fn job(fx: &Fixture) -> std::path::PathBuf {
    WordJob {
        bytes_per_task: 22_000,
        sink_delay_us: 600,
        snapshot_min_pause_ms: 0,
        ..WordJob::new(&fx.input)
    }
    .write(&fx.path("job.toml"))
}

#[test]
fn a_crash_while_sinks_publish_neither_duplicates_nor_loses_rows_and_skips_the_published_sinks() {
    let fx = Fixture::words();
    let job = job(&fx);

    let reference_dir = fx.path("reference");
    let reference = Coordhost::new(&job, &reference_dir).run_to_end();
    let want = sorted_output(&reference_dir);
    assert_eq!(
        want,
        expected_output(&fx.input),
        "the uninterrupted run disagrees with the test's own count"
    );
    let sinks = reference.summary.parallelism(SINK);
    assert!(
        sinks >= 4,
        "the job needs several sink subtasks to crash between their commits; got {sinks}"
    );

    // Kill once a part file is published (and, when there is an event log, a
    // sink finish is recorded in it), before every sink is done.
    let data_dir = fx.path("data");
    let mut cmd = Coordhost::new(&job, &data_dir);
    let mut run = cmd.start();
    let polled = run.poll_until(|| {
        if published_parts(&data_dir).is_empty() || job_succeeded(&data_dir) {
            return None;
        }
        match EventLog::read(&data_dir) {
            None => Some(()),
            Some(log) => (!log.finished(SINK).is_empty()).then_some(()),
        }
    });
    if let Err(why) = polled {
        panic!(
            "no moment with some but not all sinks published: {why}\n{}",
            run.stderr_tail()
        );
    }
    let killed_after = match run.kill() {
        Kill::Killed { after } => after,
        Kill::TooLate(_) => panic!("the job finished before the kill"),
    };
    let parts_at_kill = published_parts(&data_dir);
    let log_at_kill = EventLog::read(&data_dir);
    eprintln!(
        "killed after {killed_after:?}: published parts {:?} of {sinks}; {}",
        parts_at_kill.keys().collect::<Vec<_>>(),
        describe_log(log_at_kill.as_ref())
    );
    assert!(
        !job_succeeded(&data_dir),
        "_SUCCESS was written before the kill"
    );
    assert!(
        !parts_at_kill.is_empty() && parts_at_kill.len() < sinks as usize,
        "the kill must come after some but not all of the {sinks} sinks published; published: {:?}",
        parts_at_kill.keys().collect::<Vec<_>>()
    );

    let finale = cmd.run_to_end();
    eprintln!("restarted run: {}", finale.summary.brief());
    let got = sorted_output(&data_dir);
    assert!(
        got == want,
        "output differs from the uninterrupted run: {}",
        first_difference(&got, &want)
    );

    // Recovery: the sinks the log recorded as finished are kept.
    let log_at_kill = log_at_kill.unwrap_or_else(|| {
        panic!(
            "no event log under {} after the kill, so nothing could be recovered (restarted run: \
             {}); `coordhost run` must record the job's events",
            data_dir.join(crate::support::crash::JOB).display(),
            finale.summary.brief()
        )
    });
    let committed = log_at_kill.finished(SINK);
    assert!(
        !committed.is_empty(),
        "the kill was triggered by a recorded sink finish"
    );
    let unpublished: Vec<u32> = committed
        .iter()
        .filter(|s| !parts_at_kill.contains_key(s))
        .copied()
        .collect();
    assert!(
        unpublished.is_empty(),
        "sink subtasks {unpublished:?} were recorded finished but their part files were not published"
    );
    let s = &finale.summary;
    assert!(s.recovered(), "the restarted run did not recover: {}", s.0);
    assert_eq!(
        s.parallelism(SINK),
        sinks,
        "the sink's parallelism was replayed, not decided again"
    );
    assert!(
        s.tasks_skipped() >= u64::from(SOURCES) + committed.len() as u64,
        "expected the {SOURCES} sources and the recorded sinks {committed:?} skipped: {}",
        s.0
    );
    let final_log = EventLog::read(&data_dir).expect("the event log after the restarted run");
    let newest = final_log.newest_segment().expect("a segment");
    let sinks_run = final_log.finished_in_segment(SINK, newest);
    let rerun: Vec<&u32> = sinks_run.intersection(&committed).collect();
    assert!(
        rerun.is_empty(),
        "recorded sink subtasks {rerun:?} ran again"
    );
    let should_run: BTreeSet<u32> = (0..sinks).filter(|i| !committed.contains(i)).collect();
    assert_eq!(
        sinks_run, should_run,
        "every sink subtask not recorded finished runs in the restarted run, and only those"
    );
    assert!(
        final_log.finished_in_segment(SOURCE, newest).is_empty(),
        "no source runs again: their partitions are all there"
    );
    let parts_now = published_parts(&data_dir);
    for sub in &committed {
        assert_eq!(
            parts_now.get(sub),
            parts_at_kill.get(sub),
            "the part file of skipped sink subtask {sub} is the one published before the crash (same inode)"
        );
    }
}
