//! Test knobs through the real binary: a simulated coordinator crash, an
//! attempt that fails on purpose, a partition that disappears, a lowered
//! snapshot limit — each a fail point of `host/src/failpoints.rs`, set
//! with the `FAILPOINTS` variable of one `coordhost run` process.
//!
//! Each run has its own fail point registry (its own process), so tests
//! that use knobs run in parallel with each other and with in-process runs
//! without seeing each other's knobs.

use std::path::Path;

use coordhost::job::{JobStatus, RunOptions, Summary};

/// Where a simulated coordinator crash happens: the run makes what it
/// recorded durable and stops as if the process died there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrashPoint {
    /// Right after the `count`-th execution of `vertex` finished in this run
    /// and its `ExecutionFinished` event is durable (fail point
    /// `crash::finished::<vertex>`).
    AfterFinished {
        /// Job vertex id.
        vertex: String,
        /// Executions of it finished in this run.
        count: u32,
    },
    /// Right after recovery recorded `RecoveryFinished`, before anything
    /// runs (the named point `recovery-finished`).
    AfterRecovery,
    /// The `occurrence`-th pass (from 1) in this run through the named
    /// point `point`, one of `coordhost::failpoints::CRASH_POINTS`.
    Named {
        /// One of `CRASH_POINTS`.
        point: String,
        /// Which pass crashes, from 1.
        occurrence: u32,
    },
}

impl CrashPoint {
    /// The fail point and its actions: pass `n - 1` times, then fire.
    fn failpoint(&self) -> (String, String) {
        let (name, pass) = match self {
            Self::AfterFinished { vertex, count } => (format!("crash::finished::{vertex}"), *count),
            Self::AfterRecovery => ("crash::recovery-finished".to_owned(), 1),
            Self::Named { point, occurrence } => (format!("crash::{point}"), *occurrence),
        };
        assert!(pass >= 1, "{self:?}: passes count from 1");
        let actions = if pass == 1 {
            "return".to_owned()
        } else {
            format!("{}*off->return", pass - 1)
        };
        (name, actions)
    }
}

/// Before attempt `consumer_attempt` of subtask `consumer_subtask` of
/// `consumer` runs, the partition of subtask `producer_subtask` of
/// `producer` is deleted, so the consumer meets a real PartitionNotFound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostPartition {
    /// Consumer job vertex id.
    pub consumer: String,
    /// Consumer subtask.
    pub consumer_subtask: u32,
    /// Consumer attempt at which the loss happens.
    pub consumer_attempt: u32,
    /// Producer job vertex id.
    pub producer: String,
    /// Producer subtask whose partition disappears.
    pub producer_subtask: u32,
}

/// Attempt `attempt` of subtask `subtask` of `vertex` fails on purpose
/// after reading `after_records` input records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFault {
    /// Job vertex id.
    pub vertex: String,
    /// Subtask.
    pub subtask: u32,
    /// Attempt number that fails.
    pub attempt: u32,
    /// Fail after this many input records.
    pub after_records: u64,
}

/// The knobs of one run.
#[derive(Debug, Clone, Default)]
pub struct Knobs {
    /// A simulated coordinator crash.
    pub crash_at: Option<CrashPoint>,
    /// Attempts that fail on purpose.
    pub faults: Vec<InjectedFault>,
    /// Partitions that disappear before a consumer reads them.
    pub lost_partitions: Vec<LostPartition>,
    /// A lowered limit of an enumerator batch snapshot's state, in bytes.
    pub max_snapshot_bytes: Option<u64>,
}

impl Knobs {
    /// A crash at `at`, nothing else.
    pub fn crash(at: CrashPoint) -> Self {
        Self {
            crash_at: Some(at),
            ..Self::default()
        }
    }

    /// The `FAILPOINTS` value of these knobs.
    fn failpoints(&self) -> String {
        let mut points: Vec<(String, String)> = Vec::new();
        if let Some(at) = &self.crash_at {
            points.push(at.failpoint());
        }
        for f in &self.faults {
            points.push((
                format!("task::fail::{}::{}::{}", f.vertex, f.subtask, f.attempt),
                format!("return({})", f.after_records),
            ));
        }
        for l in &self.lost_partitions {
            let name = format!(
                "partition::lost::{}::{}::{}",
                l.consumer, l.consumer_subtask, l.consumer_attempt
            );
            let producer = format!("{}:{}", l.producer, l.producer_subtask);
            match points.iter_mut().find(|(n, _)| *n == name) {
                Some((_, actions)) => {
                    let list = actions.trim_start_matches("return(").trim_end_matches(')');
                    *actions = format!("return({list},{producer})");
                }
                None => points.push((name, format!("return({producer})"))),
            }
        }
        if let Some(max_snapshot_bytes) = self.max_snapshot_bytes {
            points.push((
                "snapshot::max-bytes".to_owned(),
                format!("return({max_snapshot_bytes})"),
            ));
        }
        points
            .iter()
            .map(|(name, actions)| format!("{name}={actions}"))
            .collect::<Vec<_>>()
            .join(";")
    }
}

/// A `coordhost run` that ended before it had a summary.
#[derive(Debug, Clone)]
pub struct Stopped {
    /// The exit code (`None`: a signal ended it).
    pub code: Option<i32>,
    /// Its whole stderr.
    pub stderr: String,
}

impl Stopped {
    /// Whether it stopped at a simulated coordinator crash.
    pub fn is_simulated_crash(&self) -> bool {
        self.stderr.contains("simulated coordinator crash")
    }
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {:?}: {}", self.code, self.stderr.trim_end())
    }
}

/// What a `coordhost run` left: its summary (none when it stopped before
/// it had one), exit code and whole stderr.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The `--summary-json` of a run that started (finished or failed).
    pub summary: Option<Summary>,
    /// The exit code (`None`: a signal ended it).
    pub code: Option<i32>,
    /// Its whole stderr.
    pub stderr: String,
    /// Its whole stdout (the human summary).
    pub stdout: String,
}

/// Runs `coordhost run` as `opts` says (job file, data directory, workers,
/// cache, `--fresh`) with `knobs`, to its end.
///
/// # Panics
/// If the binary cannot run, or its summary is not a summary.
pub fn run_output(opts: &RunOptions, knobs: &Knobs) -> RunOutput {
    run_output_with(opts, knobs, &[])
}

/// [`run_output`] with more `run` arguments (e.g.
/// [`super::workers::external_args`]).
///
/// # Panics
/// As [`run_output`].
pub fn run_output_with(opts: &RunOptions, knobs: &Knobs, extra: &[String]) -> RunOutput {
    run_output_with_failpoints(opts, &knobs.failpoints(), extra)
}

/// [`run_output_with`] with `FAILPOINTS` set to `failpoints` as written
/// (`name=actions;...`, e.g. a fail point no [`Knobs`] field names).
///
/// # Panics
/// As [`run_output`].
pub fn run_output_with_failpoints(
    opts: &RunOptions,
    failpoints: &str,
    extra: &[String],
) -> RunOutput {
    let scratch = tempfile::tempdir().expect("tempdir");
    let summary = scratch.path().join("summary.json");
    let mut command = super::coordhost();
    if let Some(cache) = &opts.cache_dir {
        command.arg("--cache-dir").arg(cache);
    }
    command
        .arg("run")
        .arg(&opts.job_file)
        .arg("--data-dir")
        .arg(&opts.data_dir)
        .arg("--summary-json")
        .arg(&summary)
        .env("FAILPOINTS", failpoints);
    if let Some(workers) = opts.workers {
        command.arg("--workers").arg(workers.to_string());
    }
    if opts.fresh {
        command.arg("--fresh");
    }
    command.args(extra);
    let out = command.output().expect("coordhost runs");
    RunOutput {
        summary: read_summary(&summary),
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// [`run_output`]: the summary of a run that started (finished or failed),
/// or [`Stopped`] for a run that stopped before it had one (a crash inside
/// recovery, a refusal).
///
/// # Panics
/// As [`run_output`].
pub fn run(opts: &RunOptions, knobs: &Knobs) -> Result<Summary, Stopped> {
    let out = run_output(opts, knobs);
    out.summary.ok_or(Stopped {
        code: out.code,
        stderr: out.stderr,
    })
}

/// Runs the binary with test knobs and asserts the job finished.
///
/// # Panics
/// If the run stopped before it had a summary, or the job did not finish.
pub fn run_ok_with(opts: &RunOptions, knobs: &Knobs) -> Summary {
    super::job::assert_finished(run(opts, knobs).unwrap_or_else(|e| panic!("the job starts: {e}")))
}

/// How a run with a simulated crash ([`run_to_crash`]) ended.
#[derive(Debug)]
pub enum CrashRun {
    /// It stopped at the crash: with the run's summary when the crash came
    /// while the job ran, without one when it came during recovery.
    Crashed(Option<Summary>),
    /// The crash point was never reached: the run finished the job.
    Finished(Summary),
}

impl CrashRun {
    /// Whether it crashed.
    pub fn crashed(&self) -> bool {
        matches!(self, Self::Crashed(_))
    }
}

/// Runs the binary with `knobs` (a crash among them) to its end: it either
/// stops at the simulated crash or, if the crash point is never reached,
/// finishes the job.
///
/// # Panics
/// If the run ends any other way (another failure, a refusal).
pub fn run_to_crash(opts: &RunOptions, knobs: &Knobs) -> CrashRun {
    let at = &knobs.crash_at;
    match run(opts, knobs) {
        Ok(s) if s.status == JobStatus::Finished => CrashRun::Finished(s),
        Ok(s)
            if s.error
                .as_deref()
                .is_some_and(|e| e.contains("simulated coordinator crash")) =>
        {
            CrashRun::Crashed(Some(s))
        }
        Ok(s) => panic!(
            "the run stopped for another reason than the simulated crash {at:?}: {:?}\n{s:#?}",
            s.error
        ),
        Err(stopped) if stopped.is_simulated_crash() => CrashRun::Crashed(None),
        Err(e) => panic!("the run was to stop at the simulated crash {at:?}: {e}"),
    }
}

fn read_summary(path: &Path) -> Option<Summary> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a summary: {e}\n{text}", path.display())),
    )
}
