//! The JobMaster's execution bookkeeping as a state machine (issue 28 item
//! 2): which job vertices are initialized and with what parallelism, which
//! execution vertices deploy, what a failed attempt, a refused `Deploy`, a
//! lost worker or a recovery plan does to the execution graph. Each call
//! takes an input (a finished or failed attempt, a plan), updates the
//! graph, and returns the [`Effect`]s the driver carries out in order:
//! record this, deploy that, give these splits back, start a fresh
//! enumerator. No I/O and no time here; the JobMaster
//! (`scheduler/master` in the binary) and the simulator (`tests/sim`) are
//! two drivers of the same decisions.
//!
//! Learnt from raft-rs's `RawNode` (state plus input gives effects, the
//! caller does the I/O) and Ballista's split of scheduler state into
//! managers; the rules are Flink's (region failover on blocking edges,
//! FLIP-383's restart of a non-snapshotting source once).

use std::collections::{BTreeMap, BTreeSet};

use coordhost_model::graph::{
    AttemptId, DistributionPattern, ExecutionGraph, ExecutionJobVertex, ExecutionState,
    Parallelism, ProducedPartition, VertexInit, decide_parallelism,
};

use crate::events::ResetReason;
use crate::failover::{self, Failover, FailoverAction, FailureCause};
use crate::plan::{self, RecoveryPlan};

/// What the driver does for a decision, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Job vertex `vertex` was initialized with `init` (already in the
    /// graph): record `JobVertexInitialized`; it is durable before any of
    /// its subtasks deploys.
    Initialized {
        /// The job vertex index.
        vertex: usize,
        /// Its parallelism and input ranges.
        init: VertexInit,
    },
    /// Source vertex `vertex` is scheduled: its split enumerator must run
    /// (start one unless one runs).
    NeedEnumerator(usize),
    /// Deploy the current attempt of this created execution vertex; call
    /// [`Scheduling::started`] once it is placed (an attempt that finds no
    /// worker stays created and is offered again).
    Deploy(AttemptId),
    /// Source vertex `vertex` starts over with a fresh split enumerator
    /// (FLIP-383 "restart all, once"): drop the one that runs; its
    /// subtasks' resets that follow give no splits back.
    FreshEnumerator(usize),
    /// `attempt` (the attempt before the reset) runs again under the next
    /// attempt number, already `Created` in the graph: record
    /// `ExecutionsReset`, release its partitions, give a source subtask's
    /// splits back, cancel it if it still runs. `kind` names it in the
    /// run's summary (the reason's short name, or `not-placed`).
    Reset {
        /// The attempt that is reset.
        attempt: AttemptId,
        /// Why, as recorded.
        reason: ResetReason,
        /// The summary's name for it.
        kind: &'static str,
        /// The result partitions it had produced, taken out of the graph
        /// (a finished attempt's; none for one that ran): what the driver
        /// releases when it holds no shuffle descriptors of its own for
        /// them (an attempt a recovery kept, issue 29).
        partitions: Vec<ProducedPartition>,
    },
    /// A group of resets for one cause is complete (a crash point).
    ResetsDone,
}

/// The execution graph and the bookkeeping that decides on it.
#[derive(Debug, Clone)]
pub struct Scheduling {
    /// The job graph and every execution vertex's state.
    pub graph: ExecutionGraph,
    /// Attempts an execution vertex may start (`job.max-attempts`).
    max_attempts: u32,
    /// Finished sources whose enumerator cannot snapshot, kept by a
    /// recovery: the first later reset of one of their subtasks resets all
    /// of them ([`plan::restart_all_once`]).
    restart_all_once: BTreeMap<usize, ResetReason>,
    /// The execution vertices in state `Created`, as (position of the job
    /// vertex in the job's topological order, subtask): what
    /// [`Scheduling::schedule_at_most`] offers, without looking at every
    /// execution vertex of the job on each call (issue 29: a million of
    /// them, after each finish). Kept by every transition into and out of
    /// `Created` here; an entry whose vertex is no longer created is dropped
    /// when met.
    created: BTreeSet<(usize, u32)>,
    /// Per job vertex, its position in `graph.job.order`.
    position: Vec<usize>,
    /// Per job vertex, how many of its execution vertices are finished:
    /// whether a vertex, a vertex's inputs or the job finished is asked
    /// after every message, and it was a walk of every execution vertex
    /// (issue 29: a million of them after a recovery). Kept by every
    /// transition into and out of `Finished` here.
    finished: Vec<u32>,
}

impl Scheduling {
    /// Bookkeeping of a run where nothing has happened yet (the execution
    /// vertices `graph` already holds in state `Created` are offered).
    pub fn new(graph: ExecutionGraph, max_attempts: u32) -> Self {
        let mut position = vec![0; graph.job.vertices.len()];
        for (at, &v) in graph.job.order.iter().enumerate() {
            position[v] = at;
        }
        let created = graph
            .job
            .order
            .iter()
            .enumerate()
            .flat_map(|(at, &v)| {
                graph.vertices[v]
                    .executions
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.state == ExecutionState::Created)
                    .map(move |(s, _)| (at, s as u32))
            })
            .collect();
        let finished = graph
            .vertices
            .iter()
            .map(ExecutionJobVertex::finished_count)
            .collect();
        Self {
            graph,
            max_attempts,
            restart_all_once: BTreeMap::new(),
            created,
            position,
            finished,
        }
    }

    /// Whether every execution vertex of job vertex `v` finished (false
    /// before it is initialized).
    pub fn vertex_finished(&self, v: usize) -> bool {
        let x = &self.graph.vertices[v];
        x.init.is_some() && self.finished[v] as usize == x.executions.len()
    }

    /// Whether every input of job vertex `v` finished (true for a source).
    pub fn inputs_finished(&self, v: usize) -> bool {
        let job = &self.graph.job;
        job.inputs(v)
            .iter()
            .all(|&e| self.vertex_finished(job.edges[e].from))
    }

    /// Whether every job vertex finished: the job is done.
    pub fn is_finished(&self) -> bool {
        (0..self.graph.vertices.len()).all(|v| self.vertex_finished(v))
    }

    /// Initializes vertex `v` with `init` in the graph: its execution
    /// vertices are created.
    fn initialize(&mut self, v: usize, init: VertexInit) {
        let at = self.position[v];
        self.created.extend((0..init.parallelism).map(|s| (at, s)));
        self.graph.initialize(v, init);
        self.finished[v] = 0;
    }

    /// The attempts an execution vertex may start.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Whether `a` is the running current attempt of its execution vertex
    /// (a report of any other is stale and ignored).
    pub fn is_current(&self, a: AttemptId) -> bool {
        self.graph.vertices[a.vertex]
            .executions
            .get(a.subtask as usize)
            .is_some_and(|e| e.attempt == a.attempt && e.state == ExecutionState::Running)
    }

    /// What can go ahead now, in the job's topological order: each vertex
    /// whose inputs finished is initialized if it is not
    /// ([`Effect::Initialized`], applied to the graph), a source's
    /// enumerator is asked for, and each created execution vertex is
    /// offered for deployment.
    pub fn schedule(&mut self) -> Vec<Effect> {
        self.schedule_at_most(usize::MAX, &[])
    }

    /// [`Scheduling::schedule`], offering at most `room` execution vertices
    /// for deployment (the first in topological order, then subtask
    /// order): the executor's free slots (issue 29: a recovered job of a
    /// million execution vertices handed every one of them to a thread
    /// pool's queue at once). The others stay created and are offered by a
    /// later call. Initializations and enumerators are not limited, nor are
    /// the execution vertices in `waiting` (those that wait to be placed,
    /// `Placement::waiting`): each is offered again whatever the room, after
    /// the others, so that one whose `Deploy` was refused is placed once its
    /// pause ends instead of waiting behind the room until the slot request
    /// timeout fails the job.
    pub fn schedule_at_most(&mut self, room: usize, waiting: &[(usize, u32)]) -> Vec<Effect> {
        let mut out = Vec::new();
        let mut offered = 0;
        for at in 0..self.graph.job.order.len() {
            let v = self.graph.job.order[at];
            if !self.inputs_finished(v) {
                continue;
            }
            if self.graph.vertices[v].init.is_none() {
                let init = self.decide_init(v);
                self.initialize(v, init.clone());
                out.push(Effect::Initialized { vertex: v, init });
            }
            // An enumerator is needed while a reader may still ask it: a
            // source whose every subtask finished (or was kept by a recovery
            // of a finished job) starts none, which would list its input
            // again and then hold splits nobody reads.
            if self.graph.job.vertices[v].source.is_some() && !self.vertex_finished(v) {
                out.push(Effect::NeedEnumerator(v));
            }
            let mut gone = Vec::new();
            for &(_, s) in self.created.range((at, 0)..=(at, u32::MAX)) {
                if offered >= room {
                    break;
                }
                match self.graph.vertices[v].executions.get(s as usize) {
                    Some(e) if e.state == ExecutionState::Created => {
                        out.push(Effect::Deploy(AttemptId {
                            vertex: v,
                            subtask: s,
                            attempt: e.attempt,
                        }));
                        offered += 1;
                    }
                    _ => gone.push((at, s)),
                }
            }
            for key in gone {
                self.created.remove(&key);
            }
        }
        for &(v, s) in waiting {
            let Some(e) = self
                .graph
                .vertices
                .get(v)
                .and_then(|x| x.executions.get(s as usize))
            else {
                continue;
            };
            let attempt = AttemptId {
                vertex: v,
                subtask: s,
                attempt: e.attempt,
            };
            if e.state == ExecutionState::Created
                && self.inputs_finished(v)
                && !out.contains(&Effect::Deploy(attempt))
            {
                out.push(Effect::Deploy(attempt));
            }
        }
        out
    }

    /// The parallelism of vertex `v` (its inputs finished): fixed, or
    /// `auto` from the bytes its hash inputs produced (Flink's adaptive
    /// batch scheduler, [`decide_parallelism`]). A broadcast input (a SQL
    /// build side) goes whole to every subtask and is not cut.
    fn decide_init(&self, v: usize) -> VertexInit {
        let job = &self.graph.job;
        let jv = &job.vertices[v];
        match jv.parallelism {
            Parallelism::Fixed(p) => VertexInit {
                parallelism: p,
                input_ranges: if job.inputs(v).is_empty() {
                    Vec::new()
                } else {
                    (0..p).map(|i| i..i + 1).collect()
                },
            },
            Parallelism::Auto => {
                let mut bytes = vec![0u64; jv.max_parallelism as usize];
                for e in job.inputs(v) {
                    if job.edges[e].pattern != DistributionPattern::Hash {
                        continue;
                    }
                    let from = job.edges[e].from;
                    for ex in &self.graph.vertices[from].executions {
                        for p in ex.partitions.iter().filter(|p| p.edge == e) {
                            for (i, b) in p.bytes_per_subpartition.non_zero() {
                                if let Some(slot) = bytes.get_mut(i) {
                                    *slot += b;
                                }
                            }
                        }
                    }
                }
                decide_parallelism(&bytes, jv.bytes_per_task, jv.max_parallelism)
            }
        }
    }

    /// The current attempt of execution vertex `attempt` was deployed: it
    /// runs, and counts against `max-attempts`.
    pub fn started(&mut self, attempt: AttemptId) {
        let e = &mut self.graph.vertices[attempt.vertex].executions[attempt.subtask as usize];
        e.state = ExecutionState::Running;
        e.attempts_started += 1;
        self.created
            .remove(&(self.position[attempt.vertex], attempt.subtask));
    }

    /// Whether the finish of `attempt` completes its job vertex (every
    /// other subtask finished): such a finish carries a batch snapshot.
    pub fn completes(&self, attempt: AttemptId) -> bool {
        let x = &self.graph.vertices[attempt.vertex];
        let own = x
            .executions
            .get(attempt.subtask as usize)
            .is_some_and(|e| e.state == ExecutionState::Finished);
        let others = self.finished[attempt.vertex] - u32::from(own);
        others as usize + 1 == x.executions.len()
    }

    /// Whether what is kept beside the graph agrees with it: each job
    /// vertex's finished count, and every created execution vertex among
    /// the created ones (a walk of every execution vertex: the simulator
    /// checks it after every step).
    ///
    /// # Errors
    /// The first disagreement, in words.
    pub fn bookkeeping_agrees(&self) -> Result<(), String> {
        for (v, x) in self.graph.vertices.iter().enumerate() {
            let finished = x.finished_count();
            if finished != self.finished[v] {
                return Err(format!(
                    "vertex {v}: {finished} execution vertices finished, counted {}",
                    self.finished[v]
                ));
            }
            for (s, e) in x.executions.iter().enumerate() {
                if e.state == ExecutionState::Created
                    && !self.created.contains(&(self.position[v], s as u32))
                {
                    return Err(format!(
                        "execution vertex ({v}, {s}) is created but not offered"
                    ));
                }
            }
        }
        Ok(())
    }

    /// How many execution vertices of job vertex `v` are finished.
    pub fn finished_count(&self, v: usize) -> u32 {
        self.finished[v]
    }

    /// `attempt` finished (its finish is recorded) with `partitions`.
    /// Returns how many subtasks of its vertex finished, of how many.
    pub fn finished(
        &mut self,
        attempt: AttemptId,
        partitions: Vec<ProducedPartition>,
    ) -> (u32, u32) {
        let vertex = &mut self.graph.vertices[attempt.vertex];
        let e = &mut vertex.executions[attempt.subtask as usize];
        let was = e.state;
        e.state = ExecutionState::Finished;
        e.partitions = partitions;
        let total = vertex.executions.len() as u32;
        count(
            &mut self.finished,
            attempt.vertex,
            was,
            ExecutionState::Finished,
        );
        (self.finished[attempt.vertex], total)
    }

    /// The current attempt `attempt` failed with `cause`: the failover
    /// decision ([`failover::decide`]) and, when it runs again, its resets
    /// (a lost input's producer first, then `attempt` with `reason`).
    pub fn failed(
        &mut self,
        attempt: AttemptId,
        cause: FailureCause,
        reason: ResetReason,
    ) -> (Failover, Vec<Effect>) {
        let was = self.graph.vertices[attempt.vertex].executions[attempt.subtask as usize].state;
        let decision = failover::decide(&mut self.graph, attempt, cause, self.max_attempts);
        let now = self.graph.vertices[attempt.vertex].executions[attempt.subtask as usize].state;
        count(&mut self.finished, attempt.vertex, was, now);
        let mut out = Vec::new();
        if let FailoverAction::Reset { producer } = &decision.action {
            if let Some((producer, why)) = producer {
                self.reset_into(*producer, why.clone(), why.short_name(), &mut out);
            }
            self.reset_into(attempt, reason.clone(), reason.short_name(), &mut out);
        }
        (decision, out)
    }

    /// The `Deploy` of the current attempt `attempt` failed: it was not
    /// placed, so its start is not counted against `max-attempts`, but it
    /// may have started and pulled splits, so it is reset (kind
    /// `not-placed`) and runs again under a new attempt number.
    pub fn deploy_failed(&mut self, attempt: AttemptId, reason: ResetReason) -> Vec<Effect> {
        let e = &mut self.graph.vertices[attempt.vertex].executions[attempt.subtask as usize];
        e.attempts_started = e.attempts_started.saturating_sub(1);
        let was = e.state;
        e.state = ExecutionState::Failed;
        count(
            &mut self.finished,
            attempt.vertex,
            was,
            ExecutionState::Failed,
        );
        let mut out = Vec::new();
        self.reset_into(attempt, reason, "not-placed", &mut out);
        out
    }

    /// A worker was lost with the partitions of the finished attempts
    /// `held`: each one still current whose output a consumer has yet to
    /// read runs again (`reason`), unless `outlives` says its partitions
    /// were not on the worker (object storage). Until nothing more is
    /// reset: a reset consumer makes its inputs needed again, and those may
    /// have been on the same worker (one pass left TPC-H Q3's re-run
    /// meeting one lost input after the other).
    pub fn worker_lost(
        &mut self,
        held: &[AttemptId],
        outlives: &dyn Fn(&[ProducedPartition]) -> bool,
        reason: &ResetReason,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        loop {
            let mut reset_any = false;
            for &a in held {
                let Some(e) = self.graph.vertices[a.vertex]
                    .executions
                    .get(a.subtask as usize)
                else {
                    continue;
                };
                if e.attempt != a.attempt || e.state != ExecutionState::Finished {
                    continue;
                }
                if !e.partitions.is_empty() && outlives(&e.partitions) {
                    continue;
                }
                if self.output_needed(a.vertex) {
                    self.reset_into(a, reason.clone(), reason.short_name(), &mut out);
                    reset_any = true;
                }
            }
            // Each pass resets at least one finished attempt of `held`,
            // which is then no longer finished: at most `held.len()` passes.
            if !reset_any {
                return out;
            }
        }
    }

    /// Whether some consumer of vertex `v` has yet to read its output (a
    /// consumer not initialized, or one not finished).
    fn output_needed(&self, v: usize) -> bool {
        self.graph.job.outputs(v).iter().any(|&edge| {
            let consumers = &self.graph.vertices[self.graph.job.edges[edge].to].executions;
            consumers.is_empty()
                || consumers
                    .iter()
                    .any(|c| c.state != ExecutionState::Finished)
        })
    }

    /// Resets execution vertex `attempt` with `reason`, counted as `kind`
    /// (and, the first time a subtask of a source in `restart_all_once` is
    /// reset, the source's other subtasks and everything downstream).
    pub fn reset(
        &mut self,
        attempt: AttemptId,
        reason: ResetReason,
        kind: &'static str,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        self.reset_into(attempt, reason, kind, &mut out);
        out
    }

    fn reset_into(
        &mut self,
        attempt: AttemptId,
        reason: ResetReason,
        kind: &'static str,
        out: &mut Vec<Effect>,
    ) {
        let restarts = self.restart_all_once.contains_key(&attempt.vertex);
        let graph = &self.graph;
        let also = plan::restart_all_once(
            &graph.job,
            &mut self.restart_all_once,
            (attempt.vertex, attempt.subtask),
            &|v| graph.vertices[v].executions.len() as u32,
            &|(v, s)| {
                matches!(
                    graph.vertices[v].executions[s as usize].state,
                    ExecutionState::Finished | ExecutionState::Running
                )
            },
        );
        if restarts {
            out.push(Effect::FreshEnumerator(attempt.vertex));
        }
        let mut group = Vec::with_capacity(also.len() + 1);
        for ((v, s), why) in also {
            let other = self.graph.attempt_id(v, s);
            self.reset_one(other, why.clone(), why.short_name(), out);
            group.push(((v, s), why));
        }
        self.reset_one(attempt, reason.clone(), kind, out);
        group.push(((attempt.vertex, attempt.subtask), reason));
        self.reset_forward_readers_of_sources(group, out);
        out.push(Effect::ResetsDone);
    }

    /// A source subtask that runs again may read other splits than before:
    /// its enumerator hands the given-back splits to whichever re-running
    /// subtask asks first (a lost worker resets several at once). What read
    /// its old output through a forward edge (subtask for subtask), finished
    /// or running, holds records of splits it may not read again: it runs
    /// again too, with the source's reason, and so on along forward edges
    /// (through readers already reset as well).
    /// Through a hash edge every consumer read its share of every
    /// producer's records, and the re-running subtasks together read the
    /// same splits as before: a hash consumer stays. Recovery keeps the
    /// same rule for what it keeps (`recovery::reset_forward_readers_of_sources`);
    /// in-run, the simulator found it missing (seed 2978 with workers,
    /// docs/simulation.md).
    fn reset_forward_readers_of_sources(
        &mut self,
        group: Vec<((usize, u32), ResetReason)>,
        out: &mut Vec<Effect>,
    ) {
        let mut stack: Vec<((usize, u32), ResetReason)> = group
            .into_iter()
            .filter(|((v, _), _)| self.graph.job.vertices[*v].source.is_some())
            .collect();
        while let Some(((v, s), reason)) = stack.pop() {
            for e in self.graph.job.outputs(v) {
                if self.graph.job.edges[e].pattern != DistributionPattern::Forward {
                    continue;
                }
                let to = self.graph.job.edges[e].to;
                let live = self.graph.vertices[to]
                    .executions
                    .get(s as usize)
                    .is_some_and(|x| {
                        matches!(x.state, ExecutionState::Finished | ExecutionState::Running)
                    });
                if live {
                    let reader = self.graph.attempt_id(to, s);
                    self.reset_one(reader, reason.clone(), reason.short_name(), out);
                }
                // On through a reader that runs again for another reason
                // too: its re-run reads the source's new records, so what
                // read its old output holds old ones (seed 10888).
                stack.push(((to, s), reason.clone()));
            }
        }
    }

    fn reset_one(
        &mut self,
        attempt: AttemptId,
        reason: ResetReason,
        kind: &'static str,
        out: &mut Vec<Effect>,
    ) {
        let e = &mut self.graph.vertices[attempt.vertex].executions[attempt.subtask as usize];
        e.attempt += 1;
        let was = e.state;
        e.state = ExecutionState::Created;
        count(
            &mut self.finished,
            attempt.vertex,
            was,
            ExecutionState::Created,
        );
        self.created
            .insert((self.position[attempt.vertex], attempt.subtask));
        out.push(Effect::Reset {
            attempt,
            reason,
            kind,
            partitions: std::mem::take(&mut e.partitions),
        });
    }

    /// Installs a recovery plan before anything is scheduled
    /// (docs/recovery.md step 7), in the graph: recorded parallelism and
    /// input ranges, kept executions finished with their attempt ids and
    /// partitions, reset ones created under the attempt number the plan
    /// gives them, and the sources to restart once. The driver records the
    /// resets, restores the enumerators and releases what the plan
    /// releases. The kept executions' partitions are moved out of the plan
    /// into the graph (issue 29: a million of them were copied).
    pub fn install(&mut self, plan: &mut RecoveryPlan) {
        for (v, init) in &plan.initialized {
            self.initialize(*v, init.clone());
        }
        for (&(v, s), exec) in &mut plan.kept {
            let e = &mut self.graph.vertices[v].executions[s as usize];
            e.attempt = exec.attempt;
            let was = e.state;
            e.state = ExecutionState::Finished;
            count(&mut self.finished, v, was, ExecutionState::Finished);
            e.partitions = std::mem::take(&mut exec.partitions);
            self.created.remove(&(self.position[v], s));
        }
        for &(v, s) in plan.reset.keys() {
            if let Some(e) = self.graph.vertices[v].executions.get_mut(s as usize) {
                e.attempt = plan.next_attempt((v, s));
            }
        }
        self.restart_all_once = plan.restart_all_once.clone();
    }
}

/// An execution vertex of job vertex `v` went from `was` to `now`: the
/// finished count (`Scheduling::finished`) follows.
fn count(finished: &mut [u32], v: usize, was: ExecutionState, now: ExecutionState) {
    let f = &mut finished[v];
    match (
        was == ExecutionState::Finished,
        now == ExecutionState::Finished,
    ) {
        (false, true) => *f += 1,
        (true, false) => *f = f.saturating_sub(1),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
