//! Issue 12, "done when": seeded random SIGKILLs of `coordhost run` mixed
//! with random between-run actions — edit a fingerprinted field
//! (`max-parallelism` of the `auto` sink), edit a tuning field
//! (`bytes-per-task`), delete the lock, delete the log (or only its
//! segments), delete a result partition — never end with exit 0 and wrong
//! output. A refusal (exit 2) must be the expected one, and is then
//! answered as a user would: revert the edit, or pass `--fresh`. After the
//! job finishes, the shuffle folder holds only the final plan's partitions
//! (unless the trial deleted the log: the partitions a deleted log named are
//! nobody's to release).
//!
//! `COORDHOST_BETWEEN_TRIALS` sets the number of trials (default 3, about a
//! minute); `COORDHOST_CRASH_SEED` replays a seed.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::crash::{
    Coordhost, EventLog, Fixture, JOB, Kill, Rng, SOURCE, WordJob, expected_output,
    first_difference, log_dir, seed, shuffle_partitions, sorted_output,
};

/// Trials when `COORDHOST_BETWEEN_TRIALS` is not set.
const DEFAULT_TRIALS: u32 = 3;
/// Runs of one trial that may be killed; the next one runs to its end.
const MAX_KILLS: u32 = 3;

/// A between-run action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Nothing,
    EditLayout,
    EditTuning,
    DeleteLock,
    DeleteLog,
    DeleteSegments,
    DeletePartition,
}

const ACTIONS: [Action; 7] = [
    Action::Nothing,
    Action::EditLayout,
    Action::EditTuning,
    Action::DeleteLock,
    Action::DeleteLog,
    Action::DeleteSegments,
    Action::DeletePartition,
];

fn trials() -> u32 {
    std::env::var("COORDHOST_BETWEEN_TRIALS")
        .ok()
        .map(|s| {
            s.trim()
                .parse()
                .expect("COORDHOST_BETWEEN_TRIALS is a number")
        })
        .unwrap_or(DEFAULT_TRIALS)
}

/// Edits the fingerprinted field: `max-parallelism` of the `auto` sink,
/// the number of subpartitions every source partition has (16 <-> 8).
fn toggle_layout(job: &mut WordJob, file: &Path) {
    job.max_sink_parallelism = if job.max_sink_parallelism == 16 {
        8
    } else {
        16
    };
    job.write(file);
}

/// Applies `action` to the stopped job; returns what it did, in words.
fn apply(action: Action, rng: &mut Rng, job: &mut WordJob, file: &Path, data: &Path) -> String {
    match action {
        Action::Nothing => "nothing".into(),
        Action::EditLayout => {
            toggle_layout(job, file);
            format!("max-parallelism -> {}", job.max_sink_parallelism)
        }
        Action::EditTuning => {
            job.bytes_per_task = if job.bytes_per_task == 45_000 {
                90_000
            } else {
                45_000
            };
            job.write(file);
            format!("bytes-per-task -> {}", job.bytes_per_task)
        }
        Action::DeleteLock => {
            let _absent = std::fs::remove_file(log_dir(data).join("LOCK"));
            "rm LOCK".into()
        }
        Action::DeleteLog => {
            let _absent = std::fs::remove_dir_all(log_dir(data));
            "rm -r log".into()
        }
        Action::DeleteSegments => {
            for e in std::fs::read_dir(log_dir(data))
                .into_iter()
                .flatten()
                .flatten()
            {
                if e.file_name().to_string_lossy().starts_with("segment-") {
                    let _gone = std::fs::remove_file(e.path());
                }
            }
            "rm log/segment-*".into()
        }
        Action::DeletePartition => {
            let parts: Vec<_> = shuffle_partitions(data).into_iter().collect();
            if parts.is_empty() {
                return "no partition to delete".into();
            }
            let (v, s, a) = &parts[rng.below(parts.len() as u64) as usize];
            let root = data.join("shuffle").join(JOB);
            for ds in std::fs::read_dir(root).into_iter().flatten().flatten() {
                let _absent = std::fs::remove_dir_all(ds.path().join(format!("{v}-{s}-{a}")));
            }
            format!("rm partition {v}-{s}-{a}")
        }
    }
}

/// One trial; returns its row for the table. Panics on a wrong outcome.
fn trial(index: u32, seed: u64, input: &Path, scratch: &Path) -> String {
    let mut rng = Rng::new(seed);
    let mut job = WordJob::new(input);
    let file = job.write(&scratch.join(format!("job-{index}.toml")));
    let data = scratch.join(format!("data-{index}"));
    let mut ch = Coordhost::new(&file, &data);
    let want = expected_output(input);
    let mut steps = Vec::new();
    let mut kills = 0;
    let mut log_deleted = false;
    // An action whose refusal the next run must show: "graph" or "fresh".
    let mut expect_refusal: Option<&str> = None;
    // The next run may be refused (exit 2): wait for it instead of killing.
    let mut wait_next = false;
    for _run in 0..(3 * MAX_KILLS + 4) {
        let kill_at = (kills < MAX_KILLS && !wait_next && rng.unit() < 0.8)
            .then(|| Duration::from_millis(rng.below(3500)));
        wait_next = false;
        let started = Instant::now();
        let mut running = ch.start();
        ch.extra_args.clear();
        if let Some(at) = kill_at {
            // Err: the run ended first; `kill` then reports it finished.
            let _ended_first = running.poll_until(|| (started.elapsed() >= at).then_some(()));
            match running.kill() {
                Kill::Killed { after } => {
                    kills += 1;
                    let action = ACTIONS[rng.below(ACTIONS.len() as u64) as usize];
                    // An edited job is refused once an execution finished
                    // under the old one; before that, it replaces the log
                    // (issue 17, fix 5).
                    let had_finish = EventLog::read(&data).is_some_and(|l| {
                        l.count("JobStarted") > 0 && l.count("ExecutionFinished") > 0
                    });
                    let did = apply(action, &mut rng, &mut job, &file, &data);
                    steps.push(format!("kill@{}ms, {did}", after.as_millis()));
                    match action {
                        Action::EditLayout if had_finish => {
                            expect_refusal = Some("graph");
                            wait_next = true;
                        }
                        Action::EditLayout => wait_next = true,
                        Action::DeleteLog | Action::DeleteSegments => {
                            log_deleted = true;
                            wait_next = true;
                        }
                        _ => {}
                    }
                    continue;
                }
                Kill::TooLate(_) => {
                    steps.push("finished before the kill".into());
                    return check_end(index, seed, &data, &want, log_deleted, &steps);
                }
            }
        }
        let ended = running.wait_exit();
        match (ended.code, expect_refusal) {
            (Some(0), None) => {
                return check_end(index, seed, &data, &want, log_deleted, &steps);
            }
            (Some(2), Some("graph")) if ended.stderr.contains("different job graph") => {
                steps.push("refused: edited graph; reverted".into());
                toggle_layout(&mut job, &file);
                expect_refusal = None;
            }
            (Some(2), _) if log_deleted && ended.stderr.contains("--fresh") => {
                steps.push("refused: output without log; --fresh".into());
                ch.extra_args = vec!["--fresh".into()];
                expect_refusal = None;
            }
            (code, expected) => panic!(
                "trial {index} seed {seed:#x}: run ended with {code:?}, expected {}; steps {steps:?}\n{}",
                expected.map_or("exit 0".to_owned(), |e| format!("a refusal ({e})")),
                ended.stderr
            ),
        }
    }
    panic!("trial {index} seed {seed:#x}: the job never finished; steps {steps:?}")
}

/// The end of a trial: the job finished with exit 0; its output must be
/// right, and (unless the log was deleted) only live partitions are left.
fn check_end(
    index: u32,
    seed: u64,
    data: &Path,
    want: &str,
    log_deleted: bool,
    steps: &[String],
) -> String {
    let got = sorted_output(data);
    assert!(
        got == want,
        "trial {index} seed {seed:#x}: exit 0 with wrong output: {}; steps {steps:?}",
        first_difference(&got, want)
    );
    let log = EventLog::read(data).expect("a finished job has a log");
    let live: BTreeSet<(String, u32, u32)> = log
        .final_attempts(SOURCE)
        .into_iter()
        .map(|(s, a)| (SOURCE.to_owned(), s, a))
        .collect();
    let found = shuffle_partitions(data);
    if !log_deleted {
        assert_eq!(
            found, live,
            "trial {index} seed {seed:#x}: the shuffle folder holds more than the final plan; steps {steps:?}"
        );
    } else {
        assert!(
            live.is_subset(&found),
            "trial {index} seed {seed:#x}: a live partition is missing; steps {steps:?}"
        );
    }
    let mut seen = BTreeSet::new();
    for key in log.finished_attempts(SOURCE) {
        assert!(
            seen.insert(key) || log_deleted,
            "trial {index} seed {seed:#x}: {SOURCE} {key:?} finished twice in one log; steps {steps:?}"
        );
    }
    format!(
        "trial {index:>3} seed {seed:#018x}: {} -> exit 0, output right",
        steps.join(" | ")
    )
}

#[test]
fn random_kills_and_between_run_actions_never_end_with_exit_0_and_wrong_output() {
    let base = seed();
    let n = trials();
    println!("seed {base:#x}, {n} trials (COORDHOST_BETWEEN_TRIALS)");
    let fx = Fixture::words();
    let mut rows = Vec::new();
    for i in 0..n {
        let s = base.wrapping_add(u64::from(i).wrapping_mul(0x9e37_79b9));
        let row = trial(i, s, &fx.input, fx.tmp.path());
        println!("{row}");
        rows.push(row);
        let _cleanup = std::fs::remove_dir_all(fx.path(&format!("data-{i}")));
    }
    assert_eq!(rows.len(), n as usize);
}
