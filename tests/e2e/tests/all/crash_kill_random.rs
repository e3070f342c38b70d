//! Scenario 12, "Kill at random, same answer": word count over a generated
//! folder, `coordhost run` SIGKILLed at seeded random moments (sometimes more
//! than once) and started again on the same data directory; the final output
//! must equal an uninterrupted run's, byte for byte after sorting. Each
//! trial's recovery is recorded (tasks run, skipped, reset); when the last
//! kill came after the event log showed every source subtask finished, the
//! recovering run must skip all of them and run none again.
//!
//! Replay a failure with `COORDHOST_CRASH_SEED=<seed printed at the start>`.

use std::time::Duration;

use crate::support::crash::{
    Coordhost, EventLog, Finished, Fixture, Kill, Rng, SOURCE, WordJob, describe_log,
    expected_output, first_difference, seed, sorted_output,
};

/// Trials, each on a fresh data directory.
const TRIALS: u32 = 20;
/// Source parallelism of the job ([`WordJob::new`]).
const SOURCES: u32 = 4;

/// What one trial did and saw.
struct Trial {
    index: u32,
    seed: u64,
    /// When each killed run died, from its start.
    kills: Vec<Duration>,
    /// The event log right after the last kill (`None`: no log).
    log_at_last_kill: Option<EventLog>,
    /// The run that finished the job.
    finale: Finished,
    /// The event log after the final run.
    final_log: Option<EventLog>,
    /// Its sorted output.
    output: String,
}

impl Trial {
    /// Source subtasks the final run executed again, per its log segment.
    fn sources_rerun(&self) -> Option<std::collections::BTreeSet<u32>> {
        let log = self.final_log.as_ref()?;
        Some(log.finished_in_segment(SOURCE, log.newest_segment()?))
    }

    fn all_sources_done_at_last_kill(&self) -> bool {
        self.log_at_last_kill
            .as_ref()
            .is_some_and(|l| l.finished(SOURCE).len() == SOURCES as usize)
    }

    fn row(&self) -> String {
        format!(
            "trial {:>2} seed {:#018x} kills at {:?} ms | at last kill: {} | final run: {} | {SOURCE} re-run in final run: {}",
            self.index,
            self.seed,
            self.kills
                .iter()
                .map(Duration::as_millis)
                .collect::<Vec<_>>(),
            describe_log(self.log_at_last_kill.as_ref()),
            self.finale.summary.brief(),
            self.sources_rerun()
                .map_or_else(|| "unknown (no event log)".to_owned(), |s| format!("{s:?}")),
        )
    }
}

/// Runs one trial: kills at seeded moments, then a run to the end. The first
/// kill is drawn from the trial's own slice of the uninterrupted run's span
/// (stratified, so the trials cover every phase: plugin loading, sources,
/// the `auto` decision, sinks, publishing); later kills anywhere in it.
fn run_trial(fx: &Fixture, job: &std::path::Path, span: Duration, index: u32, seed: u64) -> Trial {
    let mut rng = Rng::new(seed);
    let planned_kills = match rng.below(10) {
        0..=5 => 1,
        6..=8 => 2,
        _ => 3,
    };
    let slice = (f64::from(index) + rng.unit()) / f64::from(TRIALS);
    let mut first = span.mul_f64(slice);
    for retry in 0..4 {
        let data_dir = fx.path(&format!("trial-{index:02}-{retry}"));
        let mut cmd = Coordhost::new(job, &data_dir);
        let mut kills = Vec::new();
        let mut log_at_last_kill = None;
        let mut finale = None;
        for k in 0..planned_kills {
            let at = if k == 0 {
                first
            } else {
                span.mul_f64(0.95 * rng.unit())
            };
            let run = cmd.start();
            std::thread::sleep(at.saturating_sub(run.elapsed()));
            match run.kill() {
                Kill::Killed { after } => {
                    kills.push(after);
                    log_at_last_kill = EventLog::read(&data_dir);
                }
                Kill::TooLate(finished) => {
                    finale = Some(finished);
                    break;
                }
            }
        }
        if kills.is_empty() {
            eprintln!(
                "trial {index}: the job finished before the kill at {} ms; again on a fresh data dir, earlier",
                first.as_millis()
            );
            first /= 2;
            continue;
        }
        let finale = finale.unwrap_or_else(|| cmd.run_to_end());
        let output = sorted_output(&data_dir);
        let final_log = EventLog::read(&data_dir);
        return Trial {
            index,
            seed,
            kills,
            log_at_last_kill,
            finale,
            final_log,
            output,
        };
    }
    panic!(
        "trial {index} (seed {seed:#x}): four runs finished before their kill; the uninterrupted run took {span:?}"
    );
}

/// The recovery checks of one trial whose last kill came after every source
/// finished: the final run recovered, skipped at least the sources, and ran
/// none of them again. Returns what failed.
fn recovery_problems(t: &Trial) -> Vec<String> {
    let s = &t.finale.summary;
    let mut problems = Vec::new();
    if !s.recovered() {
        problems.push("the final run did not recover (`recovered` is false)".to_owned());
    }
    if s.tasks_skipped() < u64::from(SOURCES) {
        problems.push(format!(
            "the final run skipped {} tasks, fewer than the {SOURCES} finished sources",
            s.tasks_skipped()
        ));
    }
    match t.sources_rerun() {
        None => problems.push("the final run left no event log to check".to_owned()),
        Some(rerun) if !rerun.is_empty() => {
            problems.push(format!(
                "the final run ran {SOURCE} subtasks {rerun:?} again"
            ));
        }
        Some(_) => {}
    }
    problems
        .into_iter()
        .map(|p| format!("trial {} (seed {:#x}): {p}", t.index, t.seed))
        .collect()
}

#[test]
fn a_job_killed_at_random_moments_ends_with_the_same_output_as_an_uninterrupted_run() {
    let seed = seed();
    eprintln!("scenario 12: seed {seed:#x} (replay with COORDHOST_CRASH_SEED={seed:#x})");
    let fx = Fixture::words();
    let job = WordJob::new(&fx.input).write(&fx.path("job.toml"));

    let reference_dir = fx.path("reference");
    let reference = Coordhost::new(&job, &reference_dir).run_to_end();
    let want = sorted_output(&reference_dir);
    assert_eq!(
        want,
        expected_output(&fx.input),
        "the uninterrupted run disagrees with the test's own count"
    );
    let span = reference.elapsed;
    eprintln!(
        "uninterrupted run: {:?}, {}",
        span,
        reference.summary.brief()
    );

    let mut rng = Rng::new(seed);
    let mut trials = Vec::new();
    for index in 0..TRIALS {
        let trial_seed = rng.next_u64();
        eprintln!("trial {index}: seed {trial_seed:#x}");
        let t = run_trial(&fx, &job, span, index, trial_seed);
        eprintln!("{}", t.row());
        trials.push(t);
    }

    eprintln!("\nscenario 12, seed {seed:#x}: what each recovery did");
    for t in &trials {
        eprintln!("{}", t.row());
    }

    let wrong: Vec<String> = trials
        .iter()
        .filter(|t| t.output != want)
        .map(|t| {
            format!(
                "trial {} (seed {:#x}): {}",
                t.index,
                t.seed,
                first_difference(&t.output, &want)
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "seed {seed:#x}: output differs from the uninterrupted run:\n{}",
        wrong.join("\n")
    );

    let late: Vec<&Trial> = trials
        .iter()
        .filter(|t| t.all_sources_done_at_last_kill())
        .collect();
    let without_log = trials
        .iter()
        .filter(|t| t.log_at_last_kill.is_none())
        .count();
    assert!(
        !late.is_empty(),
        "seed {seed:#x}: no trial's last kill came after the event log showed all {SOURCES} \
         {SOURCE} subtasks finished, so skipping was never checked ({without_log} of {TRIALS} \
         trials found no event log under <data-dir>/{} after the kill)",
        crate::support::crash::JOB
    );
    let problems: Vec<String> = late.iter().flat_map(|t| recovery_problems(t)).collect();
    assert!(
        problems.is_empty(),
        "seed {seed:#x}: kills after every source finished, yet sources were not skipped:\n{}",
        problems.join("\n")
    );
}
