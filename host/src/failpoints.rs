//! The test knobs of the host, as fail points of the [`fail`] crate
//! (the way raft-engine injects faults): compiled only with the
//! `failpoints` cargo feature, which the test command (`make test`) and the
//! end-to-end tests' package (`coordhost-e2e`, for its binary
//! `coordhost-under-test`) turn on and a release build leaves off, so a
//! shipped `coordhost` has none of this code.
//!
//! The `coordhost` binary reads the `FAILPOINTS` environment variable at
//! start (`name=actions;name=actions`, [`fail::FailScenario::setup`]); a
//! test runs the real binary with it, so each run has its own registry.
//! `actions` is fail's `[count*]task[(arg)]` chain: `2*off->return` passes
//! twice and fires on the third pass. Every fail point of the host:
//!
//! | fail point | fires | `return` argument |
//! |---|---|---|
//! | `crash::<point>`, `<point>` one of [`CRASH_POINTS`] | a simulated coordinator crash at that named point of the recording and recovery code: what was recorded is made durable and the run stops as if the process died there ([`JobError::SimulatedCrash`](crate::scheduler::JobError)) | none |
//! | `crash::finished::<vertex>` | the same crash right after an `ExecutionFinished` of job vertex `<vertex>` is durable (`N*off->return`: after the N+1-th in this run) | none |
//! | `task::fail::<vertex>::<subtask>::<attempt>` | that execution attempt fails on purpose ([`TaskError::Injected`](crate::runtime::TaskError)) | the input records it reads first |
//! | `partition::lost::<vertex>::<subtask>::<attempt>` | before that consumer attempt runs, the result partitions of the listed producer subtasks are deleted, so it meets a real PartitionNotFound | `producer:subtask`, comma-separated |
//! | `snapshot::max-bytes` | the largest enumerator batch snapshot state recorded is lowered (to test the refusal without a 1 GiB snapshot) | bytes |
//! | `worker::hold-deploy-answer` | in a `coordhost worker`: a `Deploy` of a source attempt starts the task, waits until it pulled its first split (logging `test knob: ... pulled a split`), then holds its answer this long (a worker that dies or hangs between the two) | milliseconds (read in `coordhost-workers`, under its `failpoints` feature) |
//! | `worker::heartbeat-crosses-goodbye` | in a `coordhost worker`: a goodbye that arrived is left unseen for one heartbeat, sent 300 ms later, which the coordinator then answers "unknown" (a heartbeat that crossed the goodbye): the worker must still say the job ended, not that it lost the coordinator | none (read in `coordhost-workers`, under its `failpoints` feature) |
//! | `worker::fail-every-task` | in a `coordhost worker`: every attempt it runs fails after its first input records, as on a worker whose disk is full | none (read in `coordhost-workers`, under its `failpoints` feature) |
//! | `coordinator::corrupt-component` | in `coordhost run` serving workers: the bytes of a component (a scalar function's or a source reader's) it sends a worker (`FetchComponent`) have their last byte flipped after the coordinator checked its file, as a transfer damaged on the way; the worker must refuse them | none (read in `coordhost-workers`, under its `failpoints` feature) |
//! | `job::job-failed-not-recorded` | in `coordhost run`: a failed run's `JobFailed` cannot be made durable (as when the leadership is lost between the job's failure and its record); the run must not report the failure as the job's end | none |
//! | `ha::blind-leader` | in `coordhost run --ha`: the leadership's fence always holds and a lost lease does not stop the process — a leader that does not know it was deposed (a long pause its clock did not see); with the event log on object storage only the conditional create of the log's next object stops it | none (read in `coordhost-ha`, under its `failpoints` feature) |
//!
//! An argument that does not parse is refused with a panic naming the fail
//! point: a test knob set wrong must not look like a passing run.

/// The named crash points of the recording and recovery code (fail points
/// `crash::<point>`), in the order a run passes them:
///
/// | point | where |
/// |---|---|
/// | `vertex-initialized` | a `JobVertexInitialized` is durable, no subtask deployed yet |
/// | `sink-published` | a sink subtask published its part file; its `ExecutionFinished` not yet written |
/// | `snapshot-taken` | batch snapshots taken; the `ExecutionFinished` carrying them not yet written |
/// | `execution-finished` | an `ExecutionFinished` is durable, the scheduler has not acted on it |
/// | `executions-reset` | an `ExecutionsReset` (failover) is written, the new attempt not yet deployed |
/// | `recovery-started` | `RecoveryStarted` written, nothing restored |
/// | `recovery-applied` | the recovery plan applied and its resets written; `RecoveryFinished` not yet written |
/// | `recovery-finished` | `RecoveryFinished` durable, nothing scheduled |
pub const CRASH_POINTS: &[&str] = &[
    "vertex-initialized",
    "sink-published",
    "snapshot-taken",
    "execution-finished",
    "executions-reset",
    "recovery-started",
    "recovery-applied",
    "recovery-finished",
];

/// Whether the crash fail point `name` fires on this pass.
#[must_use]
pub fn crash(name: &str) -> bool {
    fail::eval(name, |_| ()).is_some()
}

/// The input records after which attempt `attempt` of subtask `subtask` of
/// `vertex` fails (fail point `task::fail::<vertex>::<subtask>::<attempt>`),
/// if it is to fail.
///
/// # Panics
/// If the fail point's argument is not a number.
#[must_use]
pub fn task_fails_after(vertex: &str, subtask: u32, attempt: u32) -> Option<u64> {
    let name = format!("task::fail::{vertex}::{subtask}::{attempt}");
    fail::eval(&name, |arg| {
        let arg = arg.unwrap_or_default();
        arg.trim()
            .parse()
            .unwrap_or_else(|e| panic!("fail point {name}: `{arg}` is not a record count: {e}"))
    })
}

/// The producer subtasks (`(job vertex, subtask)`) whose partitions vanish
/// before attempt `attempt` of subtask `subtask` of consumer `vertex` runs
/// (fail point `partition::lost::<vertex>::<subtask>::<attempt>`).
///
/// # Panics
/// If the fail point's argument is not a list of `producer:subtask`.
#[must_use]
pub fn lost_partitions(vertex: &str, subtask: u32, attempt: u32) -> Vec<(String, u32)> {
    let name = format!("partition::lost::{vertex}::{subtask}::{attempt}");
    fail::eval(&name, |arg| {
        let arg = arg.unwrap_or_default();
        arg.split(',')
            .map(|one| {
                one.trim()
                    .rsplit_once(':')
                    .and_then(|(v, s)| Some((v.to_owned(), s.parse().ok()?)))
                    .unwrap_or_else(|| {
                        panic!("fail point {name}: `{one}` is not `producer:subtask`")
                    })
            })
            .collect()
    })
    .unwrap_or_default()
}

/// The lowered limit of an enumerator batch snapshot's state, in bytes
/// (fail point `snapshot::max-bytes`), if set.
///
/// # Panics
/// If the fail point's argument is not a number.
#[must_use]
pub fn max_snapshot_bytes() -> Option<u64> {
    fail::eval("snapshot::max-bytes", |arg| {
        let arg = arg.unwrap_or_default();
        arg.trim().parse().unwrap_or_else(|e| {
            panic!("fail point snapshot::max-bytes: `{arg}` is not a byte count: {e}")
        })
    })
}

/// Partitions asked about in one `get-partitions-with-metrics` call of a
/// recovery's partition question (fail point `recovery::question-chunk`),
/// if set; at least 1.
///
/// # Panics
/// If the fail point's argument is not a number.
#[must_use]
pub fn question_chunk() -> Option<usize> {
    fail::eval("recovery::question-chunk", |arg| {
        let arg = arg.unwrap_or_default();
        let n: usize = arg.trim().parse().unwrap_or_else(|e| {
            panic!("fail point recovery::question-chunk: `{arg}` is not a count: {e}")
        });
        n.max(1)
    })
}

/// Whether a failed run's `JobFailed` is refused (fail point
/// `job::job-failed-not-recorded`), as when the leadership is lost between
/// the job's failure and its record.
#[must_use]
pub fn job_failed_not_recorded() -> bool {
    fail::eval("job::job-failed-not-recorded", |_| ()).is_some()
}
