//! Recording (FLIP-383, "recording during a normal run"): the
//! [`JobEventSink`] that turns the scheduler's facts into durable job events
//! in the event log, and the job-graph fingerprint that stops a replay
//! against an edited job file.

use std::collections::HashMap;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::events::{
    AttemptId as LoggedAttempt, EnumeratorSnapshot, EventLogWriter, ExecutionFinished,
    ExecutionVertexId, ExecutionsReset, JobEvent, JobVertexInitialized,
    ProducedPartition as LoggedPartition, ResetReason, ShuffleSnapshot, SinkCommitted,
    SplitAssignment, SubtaskInputRange,
};
use crate::graph::{
    AttemptId, DistributionPattern, JobEdge, JobGraph, JobVertex, Parallelism, ProducedPartition,
    VertexInit,
};
use crate::scheduler::{BatchSnapshots, JobEventSink, RecordingError};

/// Lowercase hex SHA-256 of everything in the job graph that decides how
/// data is laid out or routed, and so whether a kept partition or published
/// part file is still valid: vertex ids, operator chains (columns by
/// position), sources, sinks (folder, format, the column names written),
/// fixed parallelism, the `max-parallelism` of an `auto` vertex (it is the
/// number of subpartitions every producer feeding it over a hash edge
/// writes), and edges with their hash-key positions.
///
/// Left out: tuning that cannot change a byte of output — `bytes-per-task`
/// (an `auto` decision is replayed from the log, never recomputed), the
/// per-record delay, `max-parallelism` of a fixed-parallelism vertex
/// (unused), and column names no sink writes. `host/tests/all/job_fingerprint.rs` flips every job-file field and
/// checks which side it is on.
pub fn graph_fingerprint(graph: &JobGraph) -> String {
    hex_sha256(&graph_text(graph))
}

/// The text [`graph_fingerprint`] hashes.
fn graph_text(graph: &JobGraph) -> String {
    let mut h = String::new();
    // Every field is named (no `..`): a new one does not compile until it
    // is put on a side here and in `host/tests/all/job_fingerprint.rs`.
    for JobVertex {
        id,
        parallelism,
        max_parallelism,
        bytes_per_task: _,
        max_task_bytes: _,
        source,
        operators,
        sink,
        record_delay: _,
        output_columns: _,
    } in &graph.vertices
    {
        let parallelism = match parallelism {
            Parallelism::Fixed(n) => format!("fixed {n}"),
            // The subpartition count of every hash input (graph.rs
            // `num_subpartitions`): a changed value would read the kept
            // producers' partitions with the wrong layout (issue 12.1).
            Parallelism::Auto => format!("auto max {max_parallelism}"),
        };
        // Column names reach the output only where a sink writes them
        // (`sink.columns`); operators refer to columns by position.
        // `overwrite` is left out (it cannot change a byte of output); the
        // rest is written as `Debug` wrote the whole sink before it existed.
        let sink = match sink {
            Some(crate::graph::SinkSpec {
                dir,
                format,
                columns,
                overwrite: _,
                objects,
            }) => match objects {
                // Output on objects: the prefix, not the local staging
                // folder (which depends on the data directory).
                Some(url) => format!(
                    "Some(SinkSpec {{ dir: {:?}, format: {format:?}, columns: {columns:?} }})",
                    url.to_string()
                ),
                None => format!(
                    "Some(SinkSpec {{ dir: {dir:?}, format: {format:?}, columns: {columns:?} }})"
                ),
            },
            None => "None".to_string(),
        };
        h.push_str(&format!(
            "vertex {id:?} {parallelism} {source:?} {operators:?} {sink}\n"
        ));
    }
    for JobEdge {
        from,
        to,
        pattern,
        key_names: _,
        key,
    } in &graph.edges
    {
        h.push_str(&format!("edge {from} {to} {pattern:?} {key:?}\n"));
    }
    h
}

/// Lowercase hex SHA-256 of what a SQL job is planned from: the query
/// text, the table declarations (plugin, format, columns and types) and
/// the parallelism. A rerun whose SQL has this fingerprint runs the stage
/// plans recorded in the log instead of its own (docs/sql.md).
pub fn sql_fingerprint(sql: &crate::config::SqlSpec) -> String {
    let crate::config::SqlSpec {
        text,
        tables,
        parallelism,
        downstream_auto,
        max_parallelism,
        bytes_per_task: _,
        functions,
        function_specs,
    } = sql;
    // The `auto` bound is layout (the subpartitions producers write);
    // written only when `auto` is on, so other SQL jobs keep their print.
    let auto = if *downstream_auto {
        format!(" auto max {max_parallelism}")
    } else {
        String::new()
    };
    if functions.is_empty() {
        // As before functions existed: the fingerprints of logs written
        // then stay the same.
        hex_sha256(&format!("{text:?} {tables:?} {parallelism}{auto}"))
    } else {
        // Name, types and component hash of each function, and what it
        // was configured and granted: a changed function (a new tax rate)
        // is a changed job, never a rerun that mixes old and new rows.
        // Limits are tuning, as for every plugin.
        let settings: Vec<String> = function_specs
            .iter()
            .map(|spec| {
                let crate::plugin::PluginSpec {
                    name,
                    path: _,
                    kind: _,
                    config,
                    dirs,
                    stores: _,
                    limits: _,
                } = spec;
                let dirs: Vec<(String, bool)> = dirs
                    .iter()
                    .map(|d| (d.host.display().to_string(), d.writable))
                    .collect();
                format!("{name:?} {config:?} {dirs:?}")
            })
            .collect();
        hex_sha256(&format!(
            "{text:?} {tables:?} {parallelism}{auto} {functions:?} {settings:?}"
        ))
    }
}

fn hex_sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `text` with every path under `data_dir` (as `Debug` prints it, followed
/// by `/` or a closing quote) written as `${data_dir}`: the data directory
/// itself may move (`mv`, then `--data-dir NEW`) without the job counting
/// as edited, while every other path still counts.
fn data_dir_neutral(text: &str, data_dir: &Path) -> String {
    // As the job file loader resolves `${data_dir}` (one function for both).
    let resolved = crate::config::resolve_physical(data_dir)
        .unwrap_or_else(|_| crate::config::absolute(data_dir));
    let quoted = format!("{:?}", resolved.to_string_lossy());
    let escaped = &quoted[1..quoted.len() - 1];
    if escaped.is_empty() || escaped == "/" {
        return text.to_owned();
    }
    text.replace(&format!("{escaped}/"), "${data_dir}/")
        .replace(&format!("{escaped}\""), "${data_dir}\"")
}

/// Lowercase hex SHA-256 of everything a replay depends on in a job file:
/// the job graph ([`graph_fingerprint`]), the shuffle plugin, and each
/// plugin's name, component path (for `builtin:NAME`, the name and the
/// SHA-256 of the file found), kind, configuration (split sizes, input
/// folders, patterns) and granted directories (a source pointed at other
/// input must not reuse the old run's output). Left out: the job name (it
/// names the job's folder, so a renamed job never meets the old log),
/// worker count, attempt limit, slot request timeout, recovery settings and plugin limits.
///
/// `data_dir` is the run's data directory (resolved by
/// [`crate::config::resolve_physical`], as `${data_dir}` is): paths under it are
/// hashed relative to it, so a moved data directory is the same job.
pub fn job_fingerprint(config: &crate::config::JobConfig, data_dir: &Path) -> String {
    let crate::config::JobConfig {
        file: _,
        name: _,
        workers: _,
        max_attempts: _,
        slot_request_timeout: _,
        plugins,
        shuffle_plugin,
        // Whether `[shuffle]` was written out: the plugin it stands for is
        // in `plugins` like any other, so a file that writes the default
        // out is the same job.
        default_shuffle: _,
        builtins,
        recovery: _,
        graph,
        // Who may talk to the cluster does not change what the job computes.
        tls: _,
        // Where the log lives does not change what the job computes.
        log: _,
        sql,
    } = config;
    let mut h = String::new();
    h.push_str(&hex_sha256(&data_dir_neutral(&graph_text(graph), data_dir)));
    h.push_str(&format!("shuffle {shuffle_plugin:?}\n"));
    if let Some(sql) = sql {
        // A SQL job: the query text and the table declarations (the stage
        // plans are in the graph). Written only for SQL jobs, so the
        // fingerprint of every TOML-graph job is what it was.
        h.push_str(&format!("sql {}\n", sql_fingerprint(sql)));
    }
    for (
        name,
        crate::plugin::PluginSpec {
            name: _,
            path: component,
            kind,
            config,
            dirs,
            stores,
            limits: _,
        },
    ) in plugins
    {
        let dirs: Vec<(String, bool)> = dirs
            .iter()
            .map(|d| (d.host.display().to_string(), d.writable))
            .collect();
        // A `builtin:NAME` component by its name and the SHA-256 of the
        // file found, not by the folder it was found in (docs/job-file.md,
        // "Built-in plugins"): the same bytes elsewhere are the same job,
        // other bytes are an edited one.
        let component = match builtins.get(&format!("plugins.{name}")) {
            Some(b) => format!("builtin:{} sha256:{}", b.name, b.sha256),
            None => component.display().to_string(),
        };
        // Store grants only when there are any: the fingerprints of jobs
        // written before grants existed stay what they were.
        let stores = if stores.is_empty() {
            String::new()
        } else {
            format!(" stores {}", crate::objstore::list_grants(stores))
        };
        h.push_str(&format!(
            "plugin {name:?} {component:?} {kind:?} {config:?} {dirs:?}{stores}\n",
        ));
    }
    hex_sha256(&data_dir_neutral(&h, data_dir))
}

/// Writes scheduling facts to the job's event log. Events carrying batch
/// snapshots, and the end of the job, are made durable before the scheduler
/// acts on them.
pub struct EventRecorder {
    writer: EventLogWriter,
    graph: JobGraph,
    /// Parallelism of every vertex initialized so far, by id.
    parallelism: HashMap<String, u32>,
    /// The snapshot side file of each source job vertex's newest durable
    /// enumerator snapshot, by job vertex: removed once superseded.
    snapshot_files: HashMap<String, String>,
    /// The whole split-assignment history of each source job vertex's last
    /// snapshot recorded by this run: the next one records only what was
    /// assigned since ([`EnumeratorSnapshot::since`]).
    recorded_history: HashMap<String, Vec<SplitAssignment>>,
    /// `coordhost run --ui`: told of every event appended.
    ui: Option<std::sync::Arc<crate::ui::LiveJob>>,
    /// Between `begin_finishes` and `end_finishes`: the finishes recorded
    /// as one group (group commit).
    group: Option<FinishGroup>,
}

/// Finishes appended together, durable at `end_finishes` (group commit).
#[derive(Default)]
struct FinishGroup {
    /// Some record of the group must be durable before the job moves on
    /// (it carries a snapshot).
    waiting: bool,
    /// Job vertex and side file (`None`: inline) of each enumerator
    /// snapshot of the group: the older side files they supersede are
    /// removed once the group is durable.
    superseded: Vec<(String, Option<String>)>,
}

impl EventRecorder {
    /// A recorder appending to `writer` for the job of `graph`.
    pub fn new(writer: EventLogWriter, graph: JobGraph) -> Self {
        Self {
            writer,
            graph,
            parallelism: HashMap::new(),
            snapshot_files: HashMap::new(),
            recorded_history: HashMap::new(),
            ui: None,
            group: None,
        }
    }

    /// `coordhost run --ui`: tells `ui` of every event appended from now
    /// on, and how long each durable append took.
    pub fn observe(&mut self, ui: std::sync::Arc<crate::ui::LiveJob>) {
        self.ui = Some(ui);
    }

    /// Remembers the side files of the newest snapshots in the replayed log
    /// (by job vertex), so that this run removes each once it records a
    /// newer snapshot of that vertex.
    pub fn adopt_snapshot_files(&mut self, files: impl IntoIterator<Item = (String, String)>) {
        self.snapshot_files.extend(files);
    }

    /// Moves every enumerator state larger than
    /// [`INLINE_SNAPSHOT_MAX`](crate::events::format::INLINE_SNAPSHOT_MAX)
    /// into a durable side file that the record names.
    fn move_large_states_to_side_files(
        &self,
        snapshots: &mut [EnumeratorSnapshot],
    ) -> Result<(), RecordingError> {
        for snap in snapshots {
            if snap.state.len() > crate::events::format::INLINE_SNAPSHOT_MAX {
                let file = self.writer.write_snapshot_file(&snap.state)?;
                snap.state = Vec::new();
                snap.state_file = Some(file);
            }
        }
        Ok(())
    }

    /// After snapshots are durable: removes the side files they supersede.
    /// `snapshots` gives each one's job vertex and side file (`None`: its
    /// state is inline).
    fn supersede_side_files(
        &mut self,
        snapshots: impl IntoIterator<Item = (String, Option<String>)>,
    ) {
        for (vertex, newer) in snapshots {
            let older = match newer {
                Some(file) => self.snapshot_files.insert(vertex, file),
                None => self.snapshot_files.remove(&vertex),
            };
            if let Some(older) = older {
                self.writer.remove_snapshot_file(&older);
            }
        }
    }

    /// Appends one event.
    ///
    /// # Errors
    /// The writer's error (a write or fsync failure is sticky).
    pub fn append(&mut self, event: &JobEvent) -> Result<(), RecordingError> {
        self.forget_history_at_job_start(event);
        self.writer.append(event).map_err(RecordingError::from)?;
        if let Some(ui) = &self.ui {
            ui.appended(event);
        }
        Ok(())
    }

    /// Appends one event and waits until it is durable.
    ///
    /// # Errors
    /// As [`EventRecorder::append`].
    pub fn append_durable(&mut self, event: &JobEvent) -> Result<(), RecordingError> {
        self.forget_history_at_job_start(event);
        let Some(ui) = &self.ui else {
            return self
                .writer
                .append_durable(event)
                .map(|_| ())
                .map_err(RecordingError::from);
        };
        let started = std::time::Instant::now();
        self.writer
            .append_durable(event)
            .map_err(RecordingError::from)?;
        ui.durable_append_took(started.elapsed());
        ui.appended(event);
        Ok(())
    }

    /// Appends recovery's `RecoveryFinished` and waits until it is
    /// durable. Without the live UI its payload is encoded from where
    /// `decision` keeps it, not built as a record first (issue 29: about
    /// 60 MB of strings at 1 M execution vertices, at the restart's memory
    /// peak); the UI, which keeps a view of every subtask anyway, is given
    /// the record `event` builds.
    ///
    /// # Errors
    /// As [`EventRecorder::append`].
    pub fn append_recovery_finished(
        &mut self,
        decision: &impl crate::events::RecoveryDecision,
        event: impl FnOnce() -> JobEvent,
    ) -> Result<(), RecordingError> {
        if self.ui.is_some() {
            return self.append_durable(&event());
        }
        self.writer
            .append_encoded_durable(crate::events::format::kind::RECOVERY_FINISHED, |out| {
                crate::events::encode_recovery_finished(decision, out)
            })
            .map(|_| ())
            .map_err(RecordingError::from)
    }

    /// A `JobStarted` begins the log's current run, which replay folds
    /// snapshot histories over: the next snapshot of each vertex is whole.
    fn forget_history_at_job_start(&mut self, event: &JobEvent) {
        if matches!(event, JobEvent::JobStarted(_)) {
            self.recorded_history.clear();
        }
    }

    /// Tells the recorder that `vertex` was initialized with `parallelism` by
    /// an earlier coordinator run (a recovered decision, replayed from the
    /// log): a consumer initialized later in this run reads partitions
    /// `0..parallelism` of it, and its `JobVertexInitialized` must say so.
    pub fn note_initialized(&mut self, vertex: &str, parallelism: u32) {
        self.parallelism.insert(vertex.to_string(), parallelism);
    }

    /// The coordinator attempt (epoch) of this run's segment.
    pub fn epoch(&self) -> u32 {
        self.writer.coordinator_attempt()
    }

    /// Flushes and closes the log.
    ///
    /// # Errors
    /// The writer's error.
    pub fn close(self) -> Result<(), RecordingError> {
        Ok(self.writer.close()?)
    }

    fn vertex(&self, id: &str) -> Option<usize> {
        self.graph.vertices.iter().position(|v| v.id == id)
    }

    fn logged_attempt(&self, a: AttemptId) -> LoggedAttempt {
        LoggedAttempt {
            job_vertex: self.graph.vertices[a.vertex].id.clone(),
            subtask: a.subtask,
            attempt: a.attempt,
        }
    }
}

impl JobEventSink for EventRecorder {
    fn vertex_initialized(
        &mut self,
        vertex: &str,
        init: &VertexInit,
    ) -> Result<(), RecordingError> {
        let v = self
            .vertex(vertex)
            .ok_or_else(|| RecordingError::UnknownVertex {
                vertex: vertex.to_string(),
            })?;
        let inputs = self.graph.inputs(v);
        let subtask_inputs = (0..init.parallelism)
            .map(|s| {
                let range = init
                    .input_ranges
                    .get(s as usize)
                    .cloned()
                    .unwrap_or(s..s + 1);
                inputs
                    .iter()
                    .map(|&e| {
                        let edge = &self.graph.edges[e];
                        let producers = self
                            .parallelism
                            .get(&self.graph.vertices[edge.from].id)
                            .copied()
                            .unwrap_or(0);
                        let (partitions, subpartitions) = match edge.pattern {
                            DistributionPattern::Forward => (s..s + 1, 0..1),
                            DistributionPattern::Hash => (0..producers, range.clone()),
                            DistributionPattern::Broadcast => (0..producers, 0..1),
                        };
                        SubtaskInputRange {
                            data_set: self.graph.data_set_id(e),
                            partition_start: partitions.start,
                            partition_end: partitions.end,
                            subpartition_start: subpartitions.start,
                            subpartition_end: subpartitions.end,
                        }
                    })
                    .collect()
            })
            .collect();
        self.parallelism
            .insert(vertex.to_string(), init.parallelism);
        let event = JobEvent::JobVertexInitialized(JobVertexInitialized {
            job_vertex: vertex.to_string(),
            parallelism: init.parallelism,
            subtask_inputs,
            decided_at_runtime: self.graph.vertices[v].parallelism == Parallelism::Auto,
        });
        // The decision is replayed, never recomputed: durable before subtasks deploy.
        self.append_durable(&event)
    }

    fn execution_finished(
        &mut self,
        _vertex: &str,
        attempt: AttemptId,
        partitions: &[ProducedPartition],
        snapshots: BatchSnapshots,
    ) -> Result<(), RecordingError> {
        let taken = !snapshots.is_empty();
        let whole = snapshots
            .coordinators
            .iter()
            .map(|(v, s)| crate::snapshot::encode(v, s))
            .collect::<Result<Vec<_>, _>>()?;
        // Only the splits assigned since this run's last recorded snapshot
        // of each vertex (issue 17, fix 6; replay folds them).
        let mut enumerator_snapshots: Vec<EnumeratorSnapshot> = whole
            .iter()
            .map(|s| s.since(self.recorded_history.get(&s.job_vertex).map(Vec::as_slice)))
            .collect();
        // Side files are durable before the record that names them.
        self.move_large_states_to_side_files(&mut enumerator_snapshots)?;
        let event = JobEvent::ExecutionFinished(ExecutionFinished {
            attempt: self.logged_attempt(attempt),
            coordinator_epoch: self.epoch(),
            produced: partitions
                .iter()
                .map(|p| LoggedPartition {
                    data_set: self.graph.data_set_id(p.edge),
                    location: p.location.to_string_lossy().into_owned(),
                    bytes_per_subpartition: p.bytes_per_subpartition.to_vec(),
                })
                .collect(),
            enumerator_snapshots,
            shuffle_snapshot: snapshots.shuffle.map(|s| ShuffleSnapshot {
                incremental: s.incremental,
                data: s.data,
            }),
        });
        if !taken {
            self.append(&event)
        } else if let Some(group) = &mut self.group {
            // Durable with its group before the job moves on (group
            // commit, `end_finishes`); the side files it supersedes go then.
            group.waiting = true;
            if let JobEvent::ExecutionFinished(done) = &event {
                group
                    .superseded
                    .extend(done.enumerator_snapshots.iter().map(|s| {
                        (
                            s.job_vertex.clone(),
                            s.state_file.as_ref().map(|f| f.file.clone()),
                        )
                    }));
            }
            self.append(&event)?;
            for s in whole {
                self.recorded_history.insert(s.job_vertex, s.assignments);
            }
            Ok(())
        } else {
            // A snapshot is what recovery restores plugins from (and taken at
            // every job vertex completion): durable before the job moves on.
            self.append_durable(&event)?;
            if let JobEvent::ExecutionFinished(done) = &event {
                self.supersede_side_files(done.enumerator_snapshots.iter().map(|s| {
                    (
                        s.job_vertex.clone(),
                        s.state_file.as_ref().map(|f| f.file.clone()),
                    )
                }));
            }
            for s in whole {
                self.recorded_history.insert(s.job_vertex, s.assignments);
            }
            Ok(())
        }
    }

    fn executions_reset(
        &mut self,
        vertex: &str,
        attempts: &[AttemptId],
        reason: &ResetReason,
    ) -> Result<(), RecordingError> {
        let event = JobEvent::ExecutionsReset(ExecutionsReset {
            executions: attempts
                .iter()
                .map(|a| ExecutionVertexId {
                    job_vertex: vertex.to_string(),
                    subtask: a.subtask,
                })
                .collect(),
            reason: reason.clone(),
        });
        // A failover reset makes a new attempt that deploys next: durable
        // first, so no crash lets a later run reuse its attempt number
        // (issue 12.2). A recovery's resets are made durable by the
        // `RecoveryFinished` that follows them before anything deploys.
        let during_recovery = matches!(
            reason,
            ResetReason::RecoveryUnfinished
                | ResetReason::RecoveryNotInSnapshot
                | ResetReason::RecoveryEnumeratorWithoutSnapshot
                | ResetReason::RecoveryPartitionMissing { .. }
                | ResetReason::RecoveryUpstreamReset { .. }
                | ResetReason::RecoveryEnumeratorRestoreFailed
        );
        if during_recovery {
            self.append(&event)
        } else {
            self.append_durable(&event)
        }
    }

    fn sink_committed(&mut self, attempt: AttemptId, file: &str) -> Result<(), RecordingError> {
        let event = JobEvent::SinkCommitted(SinkCommitted {
            attempt: self.logged_attempt(attempt),
            file: file.to_string(),
        });
        // Made durable with the `ExecutionFinished` that follows (or the
        // flush of a crash point): a replay ignores it, `log inspect` shows it.
        self.append(&event)
    }

    fn begin_finishes(&mut self) {
        self.group = Some(FinishGroup::default());
    }

    fn end_finishes(&mut self) -> Result<(), RecordingError> {
        let Some(FinishGroup {
            waiting,
            superseded,
        }) = self.group.take()
        else {
            return Ok(());
        };
        if !waiting {
            // No record of the group waits to be durable (none carried a
            // snapshot): as before, they go with a later flush.
            return Ok(());
        }
        let started = std::time::Instant::now();
        self.writer.flush()?;
        if let Some(ui) = &self.ui {
            ui.durable_append_took(started.elapsed());
        }
        self.supersede_side_files(superseded);
        Ok(())
    }

    fn job_finished(&mut self) -> Result<(), RecordingError> {
        Ok(self.writer.flush()?)
    }
}

#[cfg(test)]
mod tests {
    use super::data_dir_neutral;
    use std::path::Path;

    #[test]
    fn paths_under_the_data_directory_are_hashed_relative_to_it() {
        let text = r#"dirs [("/srv/a/data/shuffle", true)] config {"root": "/srv/a/data"} other "/srv/a/database""#;
        assert_eq!(
            data_dir_neutral(text, Path::new("/srv/a/./x/../data")),
            r#"dirs [("${data_dir}/shuffle", true)] config {"root": "${data_dir}"} other "/srv/a/database""#
        );
        let moved = text.replace("/srv/a/data", "/srv/b/moved");
        assert_eq!(
            data_dir_neutral(&moved, Path::new("/srv/b/moved")),
            data_dir_neutral(text, Path::new("/srv/a/data"))
                .replace("/srv/a/database", "/srv/b/movedbase"),
            "only the path beside the data directory differs"
        );
    }
}
