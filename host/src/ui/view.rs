//! The job as the page, the API and the metrics show it: a fold of the job
//! event log's events (the same records `log inspect` prints), plus, while
//! a job runs, which attempts were deployed (the log does not record that).
//!
//! Live (`coordhost run --ui`), the view starts from the job graph (vertex
//! ids, configured parallelism, edges with their kind), folds the log that
//! the run replayed, then every event the run appends. Offline
//! (`log inspect --svg`), it folds a log alone: vertices and edges are what
//! the records name (an edge is a data set some vertex produced and another
//! reads), an edge's kind is known only from a SQL job's `StagesPlanned`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::events::{
    ExecutionFinished, ExecutionsReset, JobEvent, JobStarted, RecoveryFinished, RecoveryStarted,
    ResetReason, StagePattern, StagesPlanned,
};
use crate::graph::{DistributionPattern, JobGraph, Parallelism};

/// Where one execution vertex (subtask) stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    /// Waiting to be deployed (new, or reset to run again).
    Created,
    /// Its current attempt was deployed and has not finished (live only:
    /// the log does not record deployments).
    Running,
    /// Its current attempt finished (this run, an earlier run, or kept by
    /// recovery).
    Finished,
}

impl TaskState {
    /// The state's name in `/api/job`, `/metrics` and the page.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Finished => "finished",
        }
    }
}

/// What the last recovery decided for one subtask (FLIP-383, docs/recovery.md
/// step 7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum Decision {
    /// Its finished attempt was kept: it did not run again ("skipped").
    Skipped {
        /// The kept attempt.
        attempt: u32,
    },
    /// It runs again, for `reason` ([`ResetReason::short_name`]).
    Reset {
        /// The reason's short name, as in `--summary-json`'s `reset_reasons`.
        reason: String,
        /// The reason in words (the data set or upstream task it names).
        detail: String,
    },
}

/// One attempt of a subtask as the view saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttemptView {
    /// Attempt number.
    pub attempt: u32,
    /// The coordinator run (epoch: the log segment's number) that saw it
    /// deployed or finished.
    pub epoch: u32,
    /// `running`, `finished`, `failed` (live only) or `reset`.
    pub state: String,
    /// For `failed` and `reset`: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One execution vertex (subtask) of a job vertex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SubtaskView {
    /// Subtask index.
    pub subtask: u32,
    /// Where it stands.
    pub state: TaskState,
    /// Its current attempt number.
    pub attempt: u32,
    /// The last recovery's decision about it (`None`: no recovery, or the
    /// subtask did not exist yet then).
    pub recovery: Option<Decision>,
    /// Its attempts, oldest first (bounded: the newest [`MAX_ATTEMPTS_KEPT`]).
    pub attempts: Vec<AttemptView>,
    /// Bytes its last finished attempt wrote to its result partitions (the
    /// sum of the `ExecutionFinished` record's subpartition sizes; 0 for a
    /// sink, which writes files, not partitions).
    pub bytes_out: u64,
    /// The coordinator run its last finished attempt finished in.
    #[serde(skip)]
    finished_in: Option<u32>,
}

/// Attempts kept per subtask in the view (older ones are dropped; the log
/// keeps them all).
pub const MAX_ATTEMPTS_KEPT: usize = 32;

/// One job vertex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VertexView {
    /// Its id (the job file's).
    pub id: String,
    /// Subtasks: the decided parallelism, 0 before it is decided.
    pub parallelism: u32,
    /// Subtasks finished.
    pub finished: u32,
    /// Subtasks the last recovery kept.
    pub skipped: u32,
    /// Subtasks the last recovery reset.
    pub reset: u32,
    /// Bytes the subtasks that finished in the serving run wrote to result
    /// partitions, each subtask's last finish counted once:
    /// `--summary-json`'s `bytes_out` of the vertex (subtasks recovery
    /// kept count 0 there and here).
    pub bytes_out: u64,
    /// A source vertex's input handed to its readers in the serving run,
    /// as last told; `None` for other vertices and before the first split.
    pub input: Option<InputView>,
    /// Its subtasks.
    pub subtasks: Vec<SubtaskView>,
}

/// A source vertex's input handed to readers in the serving run
/// (`coordhost run`'s progress figures, in `/api/job`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InputView {
    /// Splits handed out (read again ones included).
    pub splits: u64,
    /// Their input bytes.
    pub bytes: u64,
    /// Splits the enumerator said it still holds; `None`: not known.
    pub splits_left: Option<u64>,
}

/// One edge (an intermediate data set between two job vertices).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EdgeView {
    /// Producer job vertex id.
    pub from: String,
    /// Consumer job vertex id.
    pub to: String,
    /// Distribution: `forward`, `hash` or `broadcast`; `None` when the log
    /// alone does not say (a job-file job drawn offline).
    pub kind: Option<String>,
}

/// What the last recovery decided, in sum.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RecoveryView {
    /// The coordinator run that recovered.
    pub epoch: u32,
    /// Whether its `RecoveryFinished` was recorded.
    pub finished: bool,
    /// Records replayed from older segments.
    pub replayed_records: u64,
    /// Bytes of a torn tail cut from the newest older segment.
    pub torn_tail_bytes: u64,
    /// Subtasks kept (skipped).
    pub skipped: u64,
    /// Subtasks reset.
    pub reset: u64,
    /// Resets by reason ([`ResetReason::short_name`]).
    pub reset_reasons: BTreeMap<String, u64>,
    /// How long recovery took, ms (live only: from before the replay to
    /// `RecoveryFinished` made durable).
    pub duration_ms: Option<u64>,
}

/// What one coordinator run (epoch) did, as the log and (live) the
/// deployments show.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunView {
    /// The run's epoch (its log segment's number).
    pub epoch: u32,
    /// Attempts deployed (live only: 0 offline); `--summary-json`'s
    /// `tasks_run` for the live run.
    pub attempts_started: u64,
    /// Attempts that finished (`ExecutionFinished` records).
    pub attempts_finished: u64,
    /// Attempts that failed (live only).
    pub attempts_failed: u64,
    /// Subtasks its recovery kept; `--summary-json`'s `tasks_skipped`.
    pub tasks_skipped: u64,
    /// Subtasks reset, recovery's and the run's own; `tasks_reset`.
    pub tasks_reset: u64,
    /// Resets by reason; `--summary-json`'s `reset_reasons` (but for
    /// `not-placed`, which the log records as `failover`).
    pub reset_reasons: BTreeMap<String, u64>,
    /// Bytes its finished attempts wrote to result partitions, every
    /// `ExecutionFinished` record counted (a subtask that ran twice in the
    /// run counts twice): what went into the shuffle.
    pub bytes_shuffled: u64,
    /// The high-availability term that led it, if any.
    pub leader_term: Option<u64>,
    /// Event log records it appended.
    pub events: u64,
}

/// A high-availability standby (`run --ha` while another coordinator
/// leads the job): who leads instead, as etcd's election says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StandbyView {
    /// The leader's term (the etcd revision its leadership began at).
    pub leader_term: u64,
    /// The address the leader serves worker processes on; `None` when it
    /// runs without worker processes (its campaign announces no address).
    pub leader_address: Option<String>,
    /// The etcd cluster the election runs on (`etcd://HOST:PORT,...`).
    pub etcd: String,
}

/// The whole view: what `/api/job` returns and the page draws.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JobView {
    /// The job's name.
    pub job: String,
    /// `standby` (live, `--ha`: another coordinator leads), `starting`,
    /// `running`, `recovering`, `finished`, `failed`, `cancelled`,
    /// `stopped` (by a signal; the next run resumes it); offline from the
    /// log: `interrupted` when the log ends without `JobFinished`,
    /// `JobFailed` or `JobCancelled`.
    pub status: String,
    /// Why the job failed.
    pub error: Option<String>,
    /// The newest coordinator run seen (the live one while a job runs).
    pub epoch: u32,
    /// Job vertices, in file order (live) or first-mention order (offline).
    pub vertices: Vec<VertexView>,
    /// Edges.
    pub edges: Vec<EdgeView>,
    /// The last recovery (`None`: the current run started the job).
    pub recovery: Option<RecoveryView>,
    /// Every coordinator run of the log's current job run, oldest first.
    pub runs: Vec<RunView>,
    /// While this coordinator is a standby: who leads (`None` otherwise).
    pub standby: Option<StandbyView>,
    /// Data sets seen: producer and consumers (edges of an offline view).
    #[serde(skip)]
    data_sets: BTreeMap<String, (Option<String>, Vec<String>)>,
}

fn kind_of(p: DistributionPattern) -> &'static str {
    match p {
        DistributionPattern::Forward => "forward",
        DistributionPattern::Hash => "hash",
        DistributionPattern::Broadcast => "broadcast",
    }
}

fn kind_of_stage(p: &StagePattern) -> &'static str {
    match p {
        StagePattern::Forward => "forward",
        StagePattern::Hash => "hash",
        StagePattern::Broadcast => "broadcast",
    }
}

/// A reset reason in words: the short name and what it names.
fn detail(reason: &ResetReason) -> String {
    match reason {
        ResetReason::Failover { message } => format!("failover: {message}"),
        ResetReason::PartitionNotFound { data_set, consumer } => format!(
            "partition-not-found: data set {data_set} (reported by {} subtask {})",
            consumer.job_vertex, consumer.subtask
        ),
        ResetReason::RecoveryPartitionMissing { data_set } => {
            format!("partition-missing: data set {data_set}")
        }
        ResetReason::RecoveryUpstreamReset { upstream } => format!(
            "upstream-reset: {} subtask {} runs again",
            upstream.job_vertex, upstream.subtask
        ),
        other => other.short_name().to_owned(),
    }
}

impl JobView {
    /// An empty view of job `job` (offline: vertices come from the log).
    #[must_use]
    pub fn new(job: &str) -> Self {
        Self {
            job: job.to_owned(),
            status: "unknown".to_owned(),
            ..Self::default()
        }
    }

    /// The view of job `job` with `graph`'s vertices (fixed parallelism
    /// already laid out) and edges (with their kind), before any event.
    #[must_use]
    pub fn from_graph(job: &str, graph: &JobGraph) -> Self {
        let mut view = Self::new(job);
        for v in &graph.vertices {
            let i = view.vertex_index(&v.id);
            if let Parallelism::Fixed(n) = v.parallelism {
                view.vertices[i].resize(n);
            }
        }
        view.edges = graph
            .edges
            .iter()
            .map(|e| EdgeView {
                from: graph.vertices[e.from].id.clone(),
                to: graph.vertices[e.to].id.clone(),
                kind: Some(kind_of(e.pattern).to_owned()),
            })
            .collect();
        view
    }

    /// The view of a replayed log: every event folded with its segment's
    /// epoch. The job's name is the log's first `JobStarted`'s.
    #[must_use]
    pub fn from_replay(replay: &crate::events::Replay) -> Self {
        let mut view = Self::new("");
        for e in &replay.events {
            view.apply(&e.event, e.position.attempt);
        }
        if !matches!(view.status.as_str(), "finished" | "failed" | "cancelled") {
            view.status = "interrupted".to_owned();
        }
        view.recount();
        view
    }

    fn vertex_index(&mut self, id: &str) -> usize {
        if let Some(i) = self.vertices.iter().position(|v| v.id == id) {
            return i;
        }
        self.vertices.push(VertexView {
            id: id.to_owned(),
            parallelism: 0,
            finished: 0,
            skipped: 0,
            reset: 0,
            bytes_out: 0,
            input: None,
            subtasks: Vec::new(),
        });
        self.vertices.len() - 1
    }

    fn subtask(&mut self, vertex: &str, subtask: u32) -> &mut SubtaskView {
        let i = self.vertex_index(vertex);
        let v = &mut self.vertices[i];
        if v.subtasks.len() <= subtask as usize {
            // A record naming a subtask past the known parallelism (an
            // offline log without its `JobVertexInitialized`): grow.
            v.resize(subtask + 1);
        }
        &mut v.subtasks[subtask as usize]
    }

    fn run(&mut self, epoch: u32) -> &mut RunView {
        if self.runs.last().is_none_or(|r| r.epoch != epoch) {
            if let Some(i) = self.runs.iter().position(|r| r.epoch == epoch) {
                return &mut self.runs[i];
            }
            self.runs.push(RunView {
                epoch,
                ..RunView::default()
            });
            self.runs.sort_by_key(|r| r.epoch);
        }
        let i = self
            .runs
            .iter()
            .position(|r| r.epoch == epoch)
            .unwrap_or_default();
        &mut self.runs[i]
    }

    fn add_edge(&mut self, from: &str, to: &str, kind: Option<&str>) {
        match self.edges.iter_mut().find(|e| e.from == from && e.to == to) {
            Some(e) => {
                if e.kind.is_none() {
                    e.kind = kind.map(str::to_owned);
                }
            }
            None => self.edges.push(EdgeView {
                from: from.to_owned(),
                to: to.to_owned(),
                kind: kind.map(str::to_owned),
            }),
        }
    }

    /// Folds one event that coordinator run `epoch` recorded.
    pub fn apply(&mut self, event: &JobEvent, epoch: u32) {
        self.epoch = self.epoch.max(epoch);
        self.run(epoch).events += 1;
        match event {
            JobEvent::JobStarted(s) => self.job_started(s, epoch),
            JobEvent::JobVertexInitialized(init) => {
                let i = self.vertex_index(&init.job_vertex);
                self.vertices[i].resize(init.parallelism);
                for input in init.subtask_inputs.iter().flatten() {
                    self.note_data_set(&input.data_set, None, Some(&init.job_vertex));
                }
            }
            JobEvent::ExecutionFinished(f) => self.execution_finished(f, epoch),
            JobEvent::ExecutionsReset(r) => self.executions_reset(r, epoch),
            JobEvent::RecoveryStarted(s) => self.recovery_started(s, epoch),
            JobEvent::RecoveryFinished(f) => self.recovery_finished(f, epoch),
            JobEvent::LeaderElected(l) => self.run(epoch).leader_term = Some(l.term),
            JobEvent::JobFinished(_) => self.status = "finished".to_owned(),
            JobEvent::JobCancelled(_) => self.status = "cancelled".to_owned(),
            JobEvent::JobFailed(f) => {
                self.status = "failed".to_owned();
                self.error = Some(f.error.clone());
            }
            JobEvent::StagesPlanned(p) => self.stages_planned(p),
            JobEvent::SinkCommitted(_) => {}
        }
    }

    /// `JobStarted`: the log's current job run starts here; what came
    /// before (a run given up on) no longer counts.
    fn job_started(&mut self, s: &JobStarted, epoch: u32) {
        self.job.clone_from(&s.job_id);
        self.status = "running".to_owned();
        self.error = None;
        self.recovery = None;
        self.runs.retain(|r| r.epoch == epoch);
        for v in &mut self.vertices {
            let n = v.parallelism;
            v.subtasks.clear();
            v.parallelism = 0;
            v.resize(n);
        }
    }

    /// `ExecutionFinished`: the subtask finished with the bytes it wrote,
    /// the data sets it produced noted, and the run's counts.
    fn execution_finished(&mut self, f: &ExecutionFinished, epoch: u32) {
        let a = &f.attempt;
        let sub = self.subtask(&a.job_vertex, a.subtask);
        let bytes = f
            .produced
            .iter()
            .flat_map(|p| &p.bytes_per_subpartition)
            .fold(0u64, |sum, b| sum.saturating_add(*b));
        sub.state = TaskState::Finished;
        sub.attempt = a.attempt;
        sub.bytes_out = bytes;
        sub.finished_in = Some(epoch);
        sub.note(a.attempt, epoch, "finished", None);
        for p in &f.produced {
            self.note_data_set(&p.data_set, Some(&a.job_vertex), None);
        }
        let run = self.run(epoch);
        run.attempts_finished += 1;
        run.bytes_shuffled = run.bytes_shuffled.saturating_add(bytes);
    }

    /// `ExecutionsReset`: each subtask back to created, counted in the run
    /// by reason.
    fn executions_reset(&mut self, r: &ExecutionsReset, epoch: u32) {
        let name = r.reason.short_name();
        for e in &r.executions {
            let sub = self.subtask(&e.job_vertex, e.subtask);
            let old = sub.attempt;
            sub.note(old, epoch, "reset", Some(detail(&r.reason)));
            sub.state = TaskState::Created;
            let run = self.run(epoch);
            run.tasks_reset += 1;
            *run.reset_reasons.entry(name.to_owned()).or_default() += 1;
        }
    }

    /// `RecoveryStarted`: a new recovery, the last one's decisions cleared.
    fn recovery_started(&mut self, s: &RecoveryStarted, epoch: u32) {
        self.status = "recovering".to_owned();
        self.recovery = Some(RecoveryView {
            epoch,
            replayed_records: s.replayed_records,
            torn_tail_bytes: s.torn_tail_bytes,
            ..RecoveryView::default()
        });
        for v in &mut self.vertices {
            for s in &mut v.subtasks {
                s.recovery = None;
            }
        }
    }

    /// `RecoveryFinished`: each subtask's decision (kept or reset, and
    /// why) and the recovery's totals by reason.
    fn recovery_finished(&mut self, f: &RecoveryFinished, epoch: u32) {
        self.status = "running".to_owned();
        for a in &f.skipped {
            let sub = self.subtask(&a.job_vertex, a.subtask);
            sub.state = TaskState::Finished;
            sub.attempt = a.attempt;
            sub.recovery = Some(Decision::Skipped { attempt: a.attempt });
        }
        let mut reasons = BTreeMap::new();
        for r in &f.reset {
            let sub = self.subtask(&r.execution.job_vertex, r.execution.subtask);
            sub.state = TaskState::Created;
            sub.recovery = Some(Decision::Reset {
                reason: r.reason.short_name().to_owned(),
                detail: detail(&r.reason),
            });
            *reasons
                .entry(r.reason.short_name().to_owned())
                .or_insert(0_u64) += 1;
        }
        self.run(epoch).tasks_skipped = f.skipped.len() as u64;
        let recovery = self.recovery.get_or_insert_with(|| RecoveryView {
            epoch,
            ..RecoveryView::default()
        });
        recovery.finished = true;
        recovery.skipped = f.skipped.len() as u64;
        recovery.reset = f.reset.len() as u64;
        recovery.reset_reasons = reasons;
    }

    /// `StagesPlanned`: a vertex per stage and an edge, with its kind, per
    /// input of a stage.
    fn stages_planned(&mut self, p: &StagesPlanned) {
        for stage in &p.stages {
            self.vertex_index(&stage.job_vertex);
            for input in &stage.inputs {
                if let Some(from) = p.stages.get(input.from as usize) {
                    self.add_edge(
                        &from.job_vertex,
                        &stage.job_vertex,
                        Some(kind_of_stage(&input.pattern)),
                    );
                }
            }
        }
    }

    /// Data set `data_set` is produced by `producer` or read by `consumer`:
    /// once both are known, an edge (offline, where the graph is not).
    fn note_data_set(&mut self, data_set: &str, producer: Option<&str>, consumer: Option<&str>) {
        // An edge is added once a data set has both ends.
        let known = self.data_sets_entry(data_set);
        if let Some(p) = producer {
            known.0 = Some(p.to_owned());
        }
        if let Some(c) = consumer
            && !known.1.iter().any(|x| x == c)
        {
            known.1.push(c.to_owned());
        }
        let (p, cs) = known.clone();
        if let Some(p) = p {
            for c in cs {
                if !self.edges.iter().any(|e| e.from == p && e.to == c) {
                    self.add_edge(&p, &c, None);
                }
            }
        }
    }

    fn data_sets_entry(&mut self, data_set: &str) -> &mut (Option<String>, Vec<String>) {
        self.data_sets.entry(data_set.to_owned()).or_default()
    }

    /// Recomputes each vertex's `finished`, `skipped`, `reset`, `bytes_out` (left to
    /// the reader: folding an event costs no pass over every subtask).
    pub fn recount(&mut self) {
        let epoch = self.epoch;
        for v in &mut self.vertices {
            v.bytes_out = v
                .subtasks
                .iter()
                .filter(|s| s.finished_in == Some(epoch))
                .fold(0u64, |sum, s| sum.saturating_add(s.bytes_out));
            v.finished = v
                .subtasks
                .iter()
                .filter(|s| s.state == TaskState::Finished)
                .count() as u32;
            v.skipped = v
                .subtasks
                .iter()
                .filter(|s| matches!(s.recovery, Some(Decision::Skipped { .. })))
                .count() as u32;
            v.reset = v
                .subtasks
                .iter()
                .filter(|s| matches!(s.recovery, Some(Decision::Reset { .. })))
                .count() as u32;
        }
    }

    /// Live: attempt `attempt` of `vertex`'s subtask `subtask` was deployed
    /// by run `epoch`.
    pub fn task_started(&mut self, vertex: &str, subtask: u32, attempt: u32, epoch: u32) {
        let sub = self.subtask(vertex, subtask);
        sub.state = TaskState::Running;
        sub.attempt = attempt;
        sub.note(attempt, epoch, "running", None);
        self.run(epoch).attempts_started += 1;
    }

    /// Live: an attempt failed (a reset or the job's failure follows).
    pub fn task_failed(
        &mut self,
        vertex: &str,
        subtask: u32,
        attempt: u32,
        reason: &str,
        epoch: u32,
    ) {
        let sub = self.subtask(vertex, subtask);
        sub.note(attempt, epoch, "failed", Some(reason.to_owned()));
        self.run(epoch).attempts_failed += 1;
    }

    /// Live: source vertex `vertex` handed out `input` so far.
    pub fn input_progress(&mut self, vertex: &str, input: InputView) {
        let at = self.vertex_index(vertex);
        self.vertices[at].input = Some(input);
    }

    /// Live: `vertex` runs `parallelism` subtasks (also for a vertex a
    /// recovery kept, which records no new `JobVertexInitialized`).
    pub fn vertex_initialized(&mut self, vertex: &str, parallelism: u32) {
        let i = self.vertex_index(vertex);
        self.vertices[i].resize(parallelism);
    }

    /// Tasks by state, over every job vertex: `(state, count)` for each
    /// [`TaskState`], zeros included.
    #[must_use]
    pub fn tasks_by_state(&self) -> Vec<(TaskState, u64)> {
        [TaskState::Created, TaskState::Running, TaskState::Finished]
            .into_iter()
            .map(|state| {
                let n = self
                    .vertices
                    .iter()
                    .flat_map(|v| &v.subtasks)
                    .filter(|s| s.state == state)
                    .count() as u64;
                (state, n)
            })
            .collect()
    }
}

impl VertexView {
    /// Lays out `n` subtasks (keeping those already known).
    fn resize(&mut self, n: u32) {
        self.parallelism = self.parallelism.max(n);
        while self.subtasks.len() < self.parallelism as usize {
            self.subtasks.push(SubtaskView {
                subtask: self.subtasks.len() as u32,
                state: TaskState::Created,
                attempt: 0,
                recovery: None,
                attempts: Vec::new(),
                bytes_out: 0,
                finished_in: None,
            });
        }
    }
}

impl SubtaskView {
    /// Notes attempt `attempt` in state `state`: a running attempt's entry
    /// becomes its outcome; anything else is a new entry (bounded).
    fn note(&mut self, attempt: u32, epoch: u32, state: &str, reason: Option<String>) {
        match self.attempts.last_mut() {
            Some(last) if last.attempt == attempt && last.state == "running" => {
                last.epoch = epoch;
                state.clone_into(&mut last.state);
                last.reason = reason;
            }
            _ => {
                self.attempts.push(AttemptView {
                    attempt,
                    epoch,
                    state: state.to_owned(),
                    reason,
                });
                if self.attempts.len() > MAX_ATTEMPTS_KEPT {
                    self.attempts.remove(0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Decision, JobView, TaskState};
    use crate::events::{
        AttemptId, ExecutionFinished, ExecutionVertexId, ExecutionsReset, JobEvent, JobFinished,
        JobStarted, JobVertexInitialized, ProducedPartition, RecoveryFinished, RecoveryReset,
        RecoveryStarted, ResetReason, SubtaskInputRange,
    };

    fn attempt(v: &str, subtask: u32, attempt: u32) -> AttemptId {
        AttemptId {
            job_vertex: v.into(),
            subtask,
            attempt,
        }
    }

    fn ev(v: &str, subtask: u32) -> ExecutionVertexId {
        ExecutionVertexId {
            job_vertex: v.into(),
            subtask,
        }
    }

    /// Run 0 finishes `a` 0; run 1 recovers: keeps it, resets `a` 1 and
    /// `b` 0, then finishes both.
    fn events() -> Vec<(JobEvent, u32)> {
        let finished = |v: &str, s: u32, a: u32, epoch: u32| {
            JobEvent::ExecutionFinished(ExecutionFinished {
                attempt: attempt(v, s, a),
                coordinator_epoch: epoch,
                produced: if v == "a" {
                    vec![ProducedPartition {
                        data_set: "a-b".into(),
                        location: format!("p/a-{s}-{a}"),
                        bytes_per_subpartition: vec![1],
                    }]
                } else {
                    vec![]
                },
                enumerator_snapshots: vec![],
                shuffle_snapshot: None,
            })
        };
        vec![
            (
                JobEvent::JobStarted(JobStarted {
                    job_id: "j".into(),
                    graph_fingerprint: String::new(),
                    recovery_enabled: true,
                }),
                0,
            ),
            (
                JobEvent::JobVertexInitialized(JobVertexInitialized {
                    job_vertex: "a".into(),
                    parallelism: 2,
                    subtask_inputs: vec![vec![], vec![]],
                    decided_at_runtime: false,
                }),
                0,
            ),
            (finished("a", 0, 0, 0), 0),
            (
                JobEvent::RecoveryStarted(RecoveryStarted {
                    coordinator_epoch: 1,
                    replayed_records: 3,
                    torn_tail_bytes: 0,
                }),
                1,
            ),
            (
                JobEvent::ExecutionsReset(ExecutionsReset {
                    executions: vec![ev("a", 1)],
                    reason: ResetReason::RecoveryUnfinished,
                }),
                1,
            ),
            (
                JobEvent::RecoveryFinished(RecoveryFinished {
                    skipped: vec![attempt("a", 0, 0)],
                    reset: vec![RecoveryReset {
                        execution: ev("a", 1),
                        reason: ResetReason::RecoveryUnfinished,
                    }],
                }),
                1,
            ),
            (finished("a", 1, 1, 1), 1),
            (
                JobEvent::JobVertexInitialized(JobVertexInitialized {
                    job_vertex: "b".into(),
                    parallelism: 1,
                    subtask_inputs: vec![vec![SubtaskInputRange {
                        data_set: "a-b".into(),
                        partition_start: 0,
                        partition_end: 2,
                        subpartition_start: 0,
                        subpartition_end: 1,
                    }]],
                    decided_at_runtime: true,
                }),
                1,
            ),
            (finished("b", 0, 0, 1), 1),
            (JobEvent::JobFinished(JobFinished { job_id: "j".into() }), 1),
        ]
    }

    #[test]
    fn bytes_count_the_serving_runs_finishes_per_vertex_and_every_finish_per_run() {
        let mut view = JobView::new("");
        for (e, epoch) in events() {
            view.apply(&e, epoch);
        }
        view.recount();
        // `a` 0 finished in run 0 (kept), `a` 1 in run 1: 1 byte each.
        assert_eq!(view.vertices[0].bytes_out, 1, "only run 1's finish");
        assert_eq!(view.vertices[0].subtasks[0].bytes_out, 1);
        assert_eq!(view.vertices[1].bytes_out, 0, "a sink writes no partition");
        let by_run: Vec<(u32, u64)> = view
            .runs
            .iter()
            .map(|r| (r.epoch, r.bytes_shuffled))
            .collect();
        assert_eq!(by_run, [(0, 1), (1, 1)]);
    }

    #[test]
    fn a_standby_page_names_the_leader_and_the_view_forgets_it_once_leading() {
        use super::StandbyView;
        let live = crate::ui::LiveJob::new();
        let standby = StandbyView {
            leader_term: 7,
            leader_address: Some("10.0.0.5:7070".into()),
            etcd: "etcd://127.0.0.1:2379".into(),
        };
        live.standby("j", standby.clone());
        let view = live.snapshot();
        assert_eq!(view.status, "standby");
        assert_eq!(view.standby.as_ref(), Some(&standby));
        let page = crate::ui::render_page(&view);
        assert!(
            page.contains("<p id=\"standby\" data-leader-term=\"7\">"),
            "{page}"
        );
        assert!(page.contains("10.0.0.5:7070"), "{page}");
        live.leading();
        // A late answer from etcd does not make a leader a standby again.
        live.leader_changed(standby.clone());
        live.standby("j", standby);
        let view = live.snapshot();
        assert_eq!(view.status, "starting");
        assert_eq!(view.standby, None);
    }

    #[test]
    fn a_log_folds_into_decisions_edges_and_per_run_counts() {
        let mut view = JobView::new("");
        for (e, epoch) in events() {
            view.apply(&e, epoch);
        }
        view.recount();
        assert_eq!(view.job, "j");
        assert_eq!(view.status, "finished");
        assert_eq!(view.epoch, 1);
        let a = &view.vertices[0];
        assert_eq!(
            (a.parallelism, a.finished, a.skipped, a.reset),
            (2, 2, 1, 1)
        );
        assert_eq!(
            a.subtasks[0].recovery,
            Some(Decision::Skipped { attempt: 0 })
        );
        assert!(matches!(
            &a.subtasks[1].recovery,
            Some(Decision::Reset { reason, .. }) if reason == "unfinished"
        ));
        assert_eq!(a.subtasks[1].state, TaskState::Finished);
        let states: Vec<&str> = a.subtasks[1]
            .attempts
            .iter()
            .map(|x| x.state.as_str())
            .collect();
        assert_eq!(states, ["reset", "finished"]);
        assert_eq!(view.vertices[1].id, "b");
        assert_eq!(view.edges.len(), 1);
        assert_eq!(
            (view.edges[0].from.as_str(), view.edges[0].to.as_str()),
            ("a", "b")
        );
        assert_eq!(view.edges[0].kind, None, "the log alone does not say");
        let run1 = view.runs.iter().find(|r| r.epoch == 1).expect("run 1");
        assert_eq!(run1.tasks_skipped, 1);
        assert_eq!(run1.tasks_reset, 1);
        assert_eq!(run1.reset_reasons.get("unfinished"), Some(&1));
        assert_eq!(run1.attempts_finished, 2);
        let recovery = view.recovery.as_ref().expect("a recovery");
        assert_eq!(
            (recovery.epoch, recovery.skipped, recovery.reset),
            (1, 1, 1)
        );
    }

    #[test]
    fn the_svg_escapes_names_and_colours_kept_and_reset() {
        let mut view = JobView::new("");
        for (e, epoch) in events() {
            view.apply(&e, epoch);
        }
        view.recount();
        view.job = "<j&\"x\">".into();
        let svg = crate::ui::render_svg(&view);
        assert!(
            svg.contains("data-job=\"&lt;j&amp;&quot;x&quot;&gt;\""),
            "{svg}"
        );
        assert!(!svg.contains("<j&"), "{svg}");
        assert!(svg.contains(&format!("class=\"bar skipped\" x=\"{}\"", 20 + 10)));
        assert!(svg.contains(crate::ui::COLOR_RESET));
        assert_eq!(svg.matches("<g class=\"vertex\"").count(), 2);
    }
}
