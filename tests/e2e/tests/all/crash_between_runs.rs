//! Issue 12.1, 12.3 and 12.4 with real `coordhost run` processes: what
//! people do between runs (edit the job file, delete the log, delete or
//! replace the lock) never ends with exit 0 and wrong output.

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, Running, SINK, SOURCE, WordJob, expected_output,
    first_difference, job_succeeded, log_dir, published_parts, sorted_output,
};
use crate::support::segment_files;

/// Polls until the log shows a finished source subtask, then SIGKILLs.
fn kill_after_first_source(run: &mut Running, data: &Path) {
    run.poll_until(|| {
        EventLog::read(data)
            .filter(|l| !l.finished(SOURCE).is_empty())
            .map(|_| ())
    })
    .expect("a source subtask finished");
}

fn assert_output(data: &Path, input: &Path) {
    let got = sorted_output(data);
    let want = expected_output(input);
    assert!(got == want, "{}", first_difference(&got, &want));
}

#[test]
fn an_edited_max_parallelism_after_a_kill_is_refused_and_a_tuning_edit_is_not() {
    let fx = Fixture::words();
    let mut job = WordJob::new(&fx.input);
    job.max_sink_parallelism = 8;
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut ch = Coordhost::new(&file, &data);
    let mut run = ch.start();
    kill_after_first_source(&mut run, &data);
    assert!(matches!(run.kill(), Kill::Killed { .. }), "killed mid-run");
    let segments = segment_files(&log_dir(&data));

    // The kept producers wrote 8 subpartitions each; 4 would drop rows.
    job.max_sink_parallelism = 4;
    job.write(&file);
    let refused = ch.start().wait_exit();
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("different job graph"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        segment_files(&log_dir(&data)),
        segments,
        "the log is untouched"
    );

    // Tuning that cannot change a byte of output is accepted.
    job.max_sink_parallelism = 8;
    job.bytes_per_task *= 2;
    job.sink_delay_us = 0;
    job.write(&file);
    let done = ch.run_to_end();
    assert!(done.summary.recovered(), "{}", done.summary.brief());
    assert_output(&data, &fx.input);
}

#[test]
fn a_deleted_log_with_published_output_is_refused_until_fresh() {
    let fx = Fixture::words();
    let mut job = WordJob::new(&fx.input);
    job.bytes_per_task = 20_000;
    job.sink_delay_us = 600;
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut ch = Coordhost::new(&file, &data);
    let mut run = ch.start();
    run.poll_until(|| (!published_parts(&data).is_empty()).then_some(()))
        .expect("a part file was published");
    assert!(matches!(run.kill(), Kill::Killed { .. }), "killed mid-run");
    assert!(!job_succeeded(&data));
    let parts = published_parts(&data);

    // Only the segments deleted (the folder and LOCK stay), then the folder.
    for segment in segment_files(&log_dir(&data)) {
        std::fs::remove_file(segment).expect("rm segment");
    }
    for round in ["segments deleted", "log folder deleted"] {
        let refused = ch.start().wait_exit();
        assert_eq!(refused.code, Some(2), "{round}: {}", refused.stderr);
        assert!(
            refused.stderr.contains("--fresh") && refused.stderr.contains("part-0"),
            "{round}: names the published files and the way out: {}",
            refused.stderr
        );
        assert_eq!(
            published_parts(&data),
            parts,
            "{round}: the published output is untouched"
        );
        // The refused run created nothing; the second round removes the folder.
        let _absent = std::fs::remove_dir_all(log_dir(&data));
    }

    ch.extra_args = vec!["--fresh".into()];
    let done = ch.run_to_end();
    assert!(!done.summary.recovered(), "{}", done.summary.brief());
    assert_output(&data, &fx.input);
}

#[test]
fn a_deleted_or_replaced_lock_does_not_let_a_second_coordinator_in() {
    let fx = Fixture::words();
    let mut job = WordJob::new(&fx.input);
    job.sink_delay_us = 600;
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut first = Coordhost::new(&file, &data);
    let mut running = first.start();
    kill_after_first_source(&mut running, &data);
    let lock = log_dir(&data).join("LOCK");

    std::fs::remove_file(&lock).expect("rm LOCK");
    let mut second = first.clone();
    let refused = second.start().wait_exit();
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    let folder = format!("event log in {} is locked", log_dir(&data).display());
    assert!(refused.stderr.contains(&folder), "{}", refused.stderr);

    std::fs::write(&lock, b"").expect("a new LOCK");
    let mut third = second.clone();
    let refused = third.start().wait_exit();
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(refused.stderr.contains("locked"), "{}", refused.stderr);

    let done = running.finish();
    assert!(!done.summary.recovered(), "{}", done.summary.brief());
    assert_output(&data, &fx.input);
    let log = EventLog::read(&data).expect("log");
    assert_eq!(log.segments.len(), 1, "only the first coordinator wrote");
    assert_eq!(log.count("JobStarted"), 1);
    assert!(!log.finished(SINK).is_empty());
}

#[test]
fn a_deleted_log_folder_stops_the_first_coordinator_and_the_second_one_finishes_alone() {
    // `rm -rf log` takes the LOCK file and the locked folder with it: a
    // second coordinator then starts a new log. The first notices before
    // its next durable step and stops (exit 1), so it never records or
    // publishes anything beside the second.
    let fx = Fixture::words();
    let mut job = WordJob::new(&fx.input);
    job.sink_delay_us = 600;
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut first = Coordhost::new(&file, &data);
    let mut running = first.start();
    kill_after_first_source(&mut running, &data);
    std::fs::remove_dir_all(log_dir(&data)).expect("rm -rf log");
    let mut second = first.clone();
    let replacing = second.start();

    let lost = running.wait_exit();
    assert_eq!(lost.code, Some(1), "{}", lost.stderr);
    assert!(
        lost.stderr.contains("lost its lock on the job log"),
        "{}",
        lost.stderr
    );
    let done = replacing.finish();
    assert!(!done.summary.recovered(), "{}", done.summary.brief());
    assert_output(&data, &fx.input);
    let log = EventLog::read(&data).expect("log");
    assert_eq!(
        log.count("JobStarted"),
        1,
        "only the second coordinator's log"
    );
}

/// Issue 17, fix 6: a crash and a recovery with many batch snapshots of one
/// source (16 source subtasks, a snapshot at every finish): the output is
/// right, and the log records each split about once per coordinator run,
/// not once per snapshot (incremental split-assignment history).
#[test]
fn many_snapshots_record_each_split_about_once_per_run_and_recover_right() {
    let fx = Fixture::words();
    let mut job = WordJob::new(&fx.input);
    job.sources = 16;
    job.split_bytes = 16 * 1024;
    job.snapshot_min_pause_ms = 0;
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut ch = Coordhost::new(&file, &data);
    let mut run = ch.start();
    kill_after_first_source(&mut run, &data);
    assert!(matches!(run.kill(), Kill::Killed { .. }), "killed mid-run");
    let done = ch.run_to_end();
    assert!(done.summary.recovered(), "{}", done.summary.brief());
    assert_output(&data, &fx.input);

    let log = EventLog::read(&data).expect("the job's log");
    // (coordinator run = the log segment's attempt, enumerator snapshot)
    let snapshots: Vec<(u64, &serde_json::Value)> = log
        .events
        .iter()
        .filter(|e| e["event"]["kind"] == "ExecutionFinished")
        .flat_map(|e| {
            let run = e["position"]["attempt"].as_u64().expect("an attempt");
            e["event"]["event"]["enumerator_snapshots"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |s| (run, s))
        })
        .collect();
    let ids = |s: &serde_json::Value| -> Vec<String> {
        s["assignments"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|a| a["splits"].as_array().into_iter().flatten())
            .filter_map(|split| split["id"].as_str().map(str::to_string))
            .collect()
    };
    let recorded: Vec<String> = snapshots.iter().flat_map(|(_, s)| ids(s)).collect();
    let distinct: BTreeSet<&String> = recorded.iter().collect();
    // How many snapshots a run takes depends on how the machine schedules
    // the 16 source subtasks (a snapshot is taken when a finish touched the
    // enumerator); a handful is always there.
    assert!(
        snapshots.len() >= 4,
        "a snapshot at source finishes: {} enumerator snapshots",
        snapshots.len()
    );
    assert!(
        distinct.len() >= 200,
        "about 4 MB in 16 KiB splits: {} splits",
        distinct.len()
    );
    assert!(
        snapshots.iter().any(|(_, s)| s["incremental"] == true),
        "incremental snapshots recorded"
    );
    // An incremental snapshot holds only what was assigned since the
    // previous one of its run: none of its splits was recorded before in
    // that run (a whole history repeats every earlier one).
    let mut seen: BTreeSet<(u64, String)> = BTreeSet::new();
    for (run, s) in &snapshots {
        let these = ids(s);
        if s["incremental"] == true {
            for id in &these {
                assert!(
                    !seen.contains(&(*run, id.clone())),
                    "split `{id}` recorded again in an incremental snapshot of run {run}"
                );
            }
        }
        seen.extend(these.into_iter().map(|id| (*run, id)));
    }
    // Two coordinator runs: each records the whole history once (its first
    // snapshot), the rest only what was assigned since. Whole histories in
    // every snapshot would be about 16 times the splits.
    assert!(
        recorded.len() <= 3 * distinct.len(),
        "{} split entries for {} splits in {} snapshots: the log grows with snapshots x splits",
        recorded.len(),
        distinct.len(),
        snapshots.len()
    );
}
