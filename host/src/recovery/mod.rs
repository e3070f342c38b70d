//! Job recovery after a coordinator crash (FLIP-383, "job recovery for
//! batch jobs"): from the replayed job event log, decide for every
//! execution vertex whether its work survived (skip: keep the attempt id
//! and its result partitions) or must run again (reset), and what each
//! plugin is restored from.
//!
//! [`plan`] is the algorithm of docs/recovery.md, steps 1–6, as a pure
//! function of the log, the job graph, which enumerators support batch
//! snapshots, and a [`PartitionOracle`] that says which result partitions
//! still exist (in a run, the shuffle master's `get-partitions-with-metrics`
//! polled until every needed partition is reported or the previous-worker
//! timeout passes). The scheduler applies the resulting [`RecoveryPlan`]
//! before it schedules anything (docs/recovery.md step 7).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::coordinator::{CoordinatorSnapshot, ReaderState};
use crate::events::{EnumeratorSnapshot, JobEvent, JobVertexInitialized, ResetReason};
use crate::graph::{DistributionPattern, JobGraph, ProducedPartition, VertexInit};
use crate::value::SplitData;

pub use crate::plan::{
    ExecutionKey, PartitionRef, RecoveredExecution, RecoveryError, RecoveryPlan,
};

mod oracle;

pub use oracle::ShuffleOracle;

/// Says which of the needed partitions still exist (step 6).
pub trait PartitionOracle {
    /// Returns the subset of `needed` that exists now. Called once per
    /// round, with the partitions that became needed in that round.
    ///
    /// # Errors
    /// A reason, turned into [`RecoveryError::Partitions`].
    fn available(&mut self, needed: &[PartitionRef]) -> Result<BTreeSet<PartitionRef>, String>;
}

struct Finished {
    attempt: u32,
    partitions: Vec<ProducedPartition>,
    index: usize,
}

/// What steps 1–3 leave: the log replayed into maps.
struct Replayed {
    plan: RecoveryPlan,
    finished: BTreeMap<ExecutionKey, Finished>,
    enumerators: BTreeMap<usize, EnumeratorSnapshot>,
}

/// Plans the recovery of `graph`'s job from its replayed `events`
/// (docs/recovery.md, steps 1–6).
///
/// `supports_snapshot(v)` says whether source vertex `v`'s enumerator
/// supports batch snapshots.
///
/// # Errors
/// [`RecoveryError`] when the log does not fit the graph or the oracle fails.
pub fn plan(
    graph: &JobGraph,
    events: &[JobEvent],
    supports_snapshot: &dyn Fn(usize) -> bool,
    oracle: &mut dyn PartitionOracle,
) -> Result<RecoveryPlan, RecoveryError> {
    let Replayed {
        mut plan,
        mut finished,
        enumerators,
    } = replay(graph, events)?;
    let sources: Vec<usize> = (0..graph.vertices.len())
        .filter(|&v| graph.vertices[v].source.is_some())
        .collect();
    for v in sources {
        reset_or_skip_source(
            graph,
            &mut plan,
            &mut finished,
            &enumerators,
            v,
            supports_snapshot(v),
        )?;
    }
    for (&(v, s), f) in &finished {
        plan.kept.insert(
            (v, s),
            RecoveredExecution {
                attempt: f.attempt,
                partitions: f.partitions.clone(),
            },
        );
    }
    reconcile_partitions(graph, &mut plan, oracle)?;
    mark_unfinished(&mut plan);
    Ok(plan)
}

/// Steps 1–3: replay the log; drop trailing finishes that no snapshot reflects.
fn replay(graph: &JobGraph, events: &[JobEvent]) -> Result<Replayed, RecoveryError> {
    let mut plan = RecoveryPlan {
        replayed: events.len(),
        ..RecoveryPlan::default()
    };
    let mut finished: BTreeMap<ExecutionKey, Finished> = BTreeMap::new();
    let mut enumerators: BTreeMap<usize, (EnumeratorSnapshot, usize)> = BTreeMap::new();
    let mut last_snapshot: Option<usize> = None;
    let mut inits: BTreeMap<usize, VertexInit> = BTreeMap::new();
    // A run that started over (after a failed recovery) wrote a new
    // `JobStarted`: history begins at the last one.
    let start = current_run_start(events);
    for (index, event) in events.iter().enumerate().skip(start) {
        match event {
            JobEvent::JobVertexInitialized(init) => {
                let v = vertex_index(graph, &init.job_vertex)?;
                let decided = vertex_init(graph, v, init)?;
                // Durable before any subtask deploys: attempt 0 may have run.
                for s in 0..decided.parallelism {
                    raise(&mut plan.highest_attempt, (v, s), 0);
                }
                if inits.insert(v, decided.clone()).is_none() {
                    plan.initialized.push((v, decided));
                }
            }
            JobEvent::ExecutionFinished(done) => {
                let v = vertex_index(graph, &done.attempt.job_vertex)?;
                let s = done.attempt.subtask;
                check_subtask(graph, &inits, v, s)?;
                let partitions = done
                    .produced
                    .iter()
                    .map(|p| {
                        let edge = edge_index(graph, v, &p.data_set)?;
                        Ok(ProducedPartition {
                            edge,
                            location: PathBuf::from(&p.location),
                            bytes_per_subpartition: p.bytes_per_subpartition.clone(),
                        })
                    })
                    .collect::<Result<Vec<_>, RecoveryError>>()?;
                raise(&mut plan.highest_attempt, (v, s), done.attempt.attempt);
                finished.insert(
                    (v, s),
                    Finished {
                        attempt: done.attempt.attempt,
                        partitions,
                        index,
                    },
                );
                for snap in &done.enumerator_snapshots {
                    let sv = vertex_index(graph, &snap.job_vertex)?;
                    enumerators.insert(sv, (snap.clone(), index));
                }
                if let Some(shuffle) = &done.shuffle_snapshot {
                    if !shuffle.incremental {
                        plan.shuffle_snapshots.clear();
                    }
                    plan.shuffle_snapshots.push(shuffle.clone());
                }
                if !done.enumerator_snapshots.is_empty() || done.shuffle_snapshot.is_some() {
                    last_snapshot = Some(index);
                }
            }
            JobEvent::ExecutionsReset(reset) => {
                for ev in &reset.executions {
                    let v = vertex_index(graph, &ev.job_vertex)?;
                    finished.remove(&(v, ev.subtask));
                    // The reset made a new attempt, one above the current
                    // one (which is at most the highest so far). A failover
                    // reset is durable before that attempt deploys; a
                    // recovery's resets before `RecoveryFinished` is.
                    let highest = plan.highest_attempt.entry((v, ev.subtask)).or_insert(0);
                    *highest = highest.saturating_add(1);
                }
            }
            JobEvent::JobStarted(_)
            | JobEvent::SinkCommitted(_)
            | JobEvent::RecoveryStarted(_)
            | JobEvent::RecoveryFinished(_) => {}
        }
    }
    // Step 3: finishes after the last snapshot are not reflected in plugin state.
    let trailing: Vec<ExecutionKey> = finished
        .iter()
        .filter(|(_, f)| last_snapshot.is_none_or(|last| f.index > last))
        .map(|(k, _)| *k)
        .collect();
    for key in trailing {
        if let Some(f) = finished.remove(&key) {
            plan.release
                .extend(partition_refs(key, &f.attempt, &f.partitions));
        }
        plan.reset.insert(key, ResetReason::RecoveryNotInSnapshot);
    }
    let enumerators = enumerators
        .into_iter()
        .map(|(v, (snap, _))| (v, snap))
        .collect();
    Ok(Replayed {
        plan,
        finished,
        enumerators,
    })
}

/// Index of the last `JobStarted` event (0 if none).
fn current_run_start(events: &[JobEvent]) -> usize {
    events
        .iter()
        .rposition(|e| matches!(e, JobEvent::JobStarted(_)))
        .unwrap_or(0)
}

/// The shuffle-master snapshots of the current run to restore, oldest first,
/// starting at the last full one (FLIP-383: full replaces, incremental appends).
pub fn shuffle_snapshots(events: &[JobEvent]) -> Vec<crate::plugin::ShuffleMasterSnapshot> {
    let mut out: Vec<crate::plugin::ShuffleMasterSnapshot> = Vec::new();
    for event in &events[current_run_start(events)..] {
        if let JobEvent::ExecutionFinished(done) = event
            && let Some(s) = &done.shuffle_snapshot
        {
            if !s.incremental {
                out.clear();
            }
            out.push(crate::plugin::ShuffleMasterSnapshot {
                incremental: s.incremental,
                data: s.data.clone(),
            });
        }
    }
    out
}

fn raise(highest: &mut BTreeMap<ExecutionKey, u32>, key: ExecutionKey, attempt: u32) {
    let entry = highest.entry(key).or_insert(attempt);
    *entry = (*entry).max(attempt);
}

fn vertex_index(graph: &JobGraph, id: &str) -> Result<usize, RecoveryError> {
    graph
        .vertices
        .iter()
        .position(|v| v.id == id)
        .ok_or_else(|| RecoveryError::UnknownVertex {
            vertex: id.to_string(),
        })
}

fn edge_index(graph: &JobGraph, v: usize, data_set: &str) -> Result<usize, RecoveryError> {
    graph
        .outputs(v)
        .into_iter()
        .find(|&e| graph.data_set_id(e) == data_set)
        .ok_or_else(|| RecoveryError::UnknownDataSet {
            vertex: graph.vertices[v].id.clone(),
            data_set: data_set.to_string(),
        })
}

fn check_subtask(
    graph: &JobGraph,
    inits: &BTreeMap<usize, VertexInit>,
    v: usize,
    s: u32,
) -> Result<(), RecoveryError> {
    match inits.get(&v) {
        Some(init) if s < init.parallelism => Ok(()),
        Some(init) => Err(RecoveryError::Inconsistent {
            reason: format!(
                "subtask {s} of `{}` finished, but its parallelism is {}",
                graph.vertices[v].id, init.parallelism
            ),
        }),
        None => Err(RecoveryError::Inconsistent {
            reason: format!(
                "subtask {s} of `{}` finished before the vertex was initialized",
                graph.vertices[v].id
            ),
        }),
    }
}

/// Turns a `JobVertexInitialized` record back into the scheduler's decision.
fn vertex_init(
    graph: &JobGraph,
    v: usize,
    init: &JobVertexInitialized,
) -> Result<VertexInit, RecoveryError> {
    if let crate::graph::Parallelism::Fixed(n) = graph.vertices[v].parallelism
        && n != init.parallelism
    {
        return Err(RecoveryError::Inconsistent {
            reason: format!(
                "`{}` has parallelism {n} in the job file but {} in the log",
                graph.vertices[v].id, init.parallelism
            ),
        });
    }
    // The recorded range of a hash input (all hash inputs of one consumer
    // read the same subpartitions); a forward input's `0..1` says nothing.
    let hash_slot = graph
        .inputs(v)
        .iter()
        .position(|&e| graph.edges[e].pattern == DistributionPattern::Hash);
    let input_ranges = init
        .subtask_inputs
        .iter()
        .map(|inputs| {
            hash_slot
                .and_then(|slot| inputs.get(slot))
                .map_or(0..0, |r| r.subpartition_start..r.subpartition_end)
        })
        .collect();
    Ok(VertexInit {
        parallelism: init.parallelism,
        input_ranges,
    })
}

/// Step 5 for one source vertex: the reset-or-skip table.
fn reset_or_skip_source(
    graph: &JobGraph,
    plan: &mut RecoveryPlan,
    finished: &mut BTreeMap<ExecutionKey, Finished>,
    enumerators: &BTreeMap<usize, EnumeratorSnapshot>,
    v: usize,
    supports_snapshot: bool,
) -> Result<(), RecoveryError> {
    let Some(parallelism) = plan
        .initialized
        .iter()
        .find(|(iv, _)| *iv == v)
        .map(|(_, i)| i.parallelism)
    else {
        plan.coordinators.insert(v, None);
        return Ok(());
    };
    let all_finished = (0..parallelism).all(|s| finished.contains_key(&(v, s)));
    if supports_snapshot {
        let restored = enumerators
            .get(&v)
            .map(|snap| coordinator_snapshot(graph, v, parallelism, snap))
            .transpose()?;
        plan.coordinators.insert(v, restored);
        // Unfinished subtasks are reset explicitly by the scheduler (their
        // splits go back); `mark_unfinished` records why.
    } else if all_finished {
        plan.coordinators.insert(v, None);
        plan.restart_all_once.insert(v);
    } else {
        plan.coordinators.insert(v, None);
        for s in 0..parallelism {
            if let Some(f) = finished.remove(&(v, s)) {
                plan.release
                    .extend(partition_refs((v, s), &f.attempt, &f.partitions));
            }
            plan.reset
                .insert((v, s), ResetReason::RecoveryEnumeratorWithoutSnapshot);
        }
    }
    Ok(())
}

/// Rebuilds the host's coordinator snapshot from the log's form.
fn coordinator_snapshot(
    graph: &JobGraph,
    v: usize,
    parallelism: u32,
    snap: &EnumeratorSnapshot,
) -> Result<CoordinatorSnapshot, RecoveryError> {
    let mut readers = vec![ReaderState::default(); parallelism as usize];
    for assignment in &snap.assignments {
        let reader = readers
            .get_mut(assignment.subtask as usize)
            .ok_or_else(|| RecoveryError::Inconsistent {
                reason: format!(
                    "the enumerator snapshot of `{}` names subtask {}",
                    graph.vertices[v].id, assignment.subtask
                ),
            })?;
        for split in &assignment.splits {
            let data: SplitData =
                postcard::from_bytes(&split.bytes).map_err(|e| RecoveryError::Split {
                    vertex: graph.vertices[v].id.clone(),
                    reason: e.to_string(),
                })?;
            reader.assigned.push(data);
        }
        reader.delivered = reader.assigned.len();
    }
    for &s in &snap.no_more_splits {
        if let Some(reader) = readers.get_mut(s as usize) {
            reader.no_more_splits = true;
        }
    }
    Ok(CoordinatorSnapshot {
        enumerator: snap.state.clone(),
        readers,
    })
}

fn partition_refs(
    key: ExecutionKey,
    attempt: &u32,
    partitions: &[ProducedPartition],
) -> Vec<PartitionRef> {
    partitions
        .iter()
        .map(|p| PartitionRef {
            vertex: key.0,
            subtask: key.1,
            attempt: *attempt,
            edge: p.edge,
            location: p.location.clone(),
            bytes_per_subpartition: p.bytes_per_subpartition.clone(),
        })
        .collect()
}

/// Whether the partition of producer subtask `s` on edge `e` will be read
/// again: the consumer is not initialized yet, or one of the subtasks that
/// read this partition is not kept. `open` holds, per consumer vertex,
/// whether any of its subtasks is not kept (computed once per round).
fn consumed_again(
    graph: &JobGraph,
    plan: &RecoveryPlan,
    open: &BTreeMap<usize, bool>,
    e: usize,
    s: u32,
) -> bool {
    let consumer = graph.edges[e].to;
    let Some(&any_open) = open.get(&consumer) else {
        return true;
    };
    match graph.edges[e].pattern {
        DistributionPattern::Forward => !plan.kept.contains_key(&(consumer, s)),
        DistributionPattern::Hash => any_open,
    }
}

/// Per initialized vertex: whether any of its subtasks is not kept.
fn open_vertices(plan: &RecoveryPlan) -> BTreeMap<usize, bool> {
    plan.initialized
        .iter()
        .map(|(v, init)| {
            (
                *v,
                (0..init.parallelism).any(|s| !plan.kept.contains_key(&(*v, s))),
            )
        })
        .collect()
}

/// Step 6: keep a producer only if every partition a re-running consumer
/// needs is still there; reset what lost one, and follow the resets upstream.
fn reconcile_partitions(
    graph: &JobGraph,
    plan: &mut RecoveryPlan,
    oracle: &mut dyn PartitionOracle,
) -> Result<(), RecoveryError> {
    let mut confirmed: BTreeSet<PartitionRef> = BTreeSet::new();
    loop {
        let open = open_vertices(plan);
        let needed: Vec<PartitionRef> = plan
            .kept
            .iter()
            .flat_map(|(&key, exec)| partition_refs(key, &exec.attempt, &exec.partitions))
            .filter(|p| {
                !confirmed.contains(p) && consumed_again(graph, plan, &open, p.edge, p.subtask)
            })
            .collect();
        if needed.is_empty() {
            return Ok(());
        }
        let available = oracle
            .available(&needed)
            .map_err(|reason| RecoveryError::Partitions { reason })?;
        let mut lost: Vec<(ExecutionKey, String)> = Vec::new();
        for p in needed {
            if available.contains(&p) {
                confirmed.insert(p);
            } else {
                lost.push(((p.vertex, p.subtask), graph.data_set_id(p.edge)));
            }
        }
        for (key, data_set) in lost {
            reset_kept(
                graph,
                plan,
                key,
                ResetReason::RecoveryPartitionMissing { data_set },
            );
        }
    }
}

/// Resets a kept execution; a finished source whose enumerator cannot
/// snapshot restarts in full (its one-shot restart is used up), and then
/// everything downstream of it that was kept runs again too: a fresh
/// enumerator may hand the splits to other subtasks than before.
fn reset_kept(graph: &JobGraph, plan: &mut RecoveryPlan, key: ExecutionKey, reason: ResetReason) {
    let (v, subtask) = key;
    let full = plan.restart_all_once.remove(&v);
    let mut keys: Vec<(ExecutionKey, ResetReason)> = vec![(key, reason)];
    if full {
        let upstream = crate::events::ExecutionVertexId {
            job_vertex: graph.vertices[v].id.clone(),
            subtask,
        };
        for &k in plan.kept.keys() {
            if k.0 == v && k != key {
                keys.push((k, ResetReason::RecoveryEnumeratorWithoutSnapshot));
            }
        }
        let downstream = graph.downstream(v);
        for &k in plan.kept.keys() {
            if downstream.contains(&k.0) {
                keys.push((
                    k,
                    ResetReason::RecoveryUpstreamReset {
                        upstream: upstream.clone(),
                    },
                ));
            }
        }
    }
    for (k, why) in keys {
        if let Some(exec) = plan.kept.remove(&k) {
            plan.release
                .extend(partition_refs(k, &exec.attempt, &exec.partitions));
            plan.reset.insert(k, why);
        }
    }
}

/// Records "unfinished" for every initialized subtask neither kept nor
/// already reset for another reason.
fn mark_unfinished(plan: &mut RecoveryPlan) {
    let inits: Vec<(usize, u32)> = plan
        .initialized
        .iter()
        .map(|(v, i)| (*v, i.parallelism))
        .collect();
    for (v, parallelism) in inits {
        for s in 0..parallelism {
            if !plan.kept.contains_key(&(v, s)) {
                plan.reset
                    .entry((v, s))
                    .or_insert(ResetReason::RecoveryUnfinished);
            }
        }
    }
}

#[cfg(test)]
mod tests;
