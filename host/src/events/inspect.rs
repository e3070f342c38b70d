//! `coordhost log inspect DIR`: prints a job's event log, one line per
//! segment and per event for people, or one JSON document for tools.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use coordhost_log::format::{LOG_DIR, parse_segment_file_name};
use coordhost_log::{
    AttemptId, EventsError, ExecutionFinished, ExecutionVertexId, JobEvent, JobVertexInitialized,
    Replay, ResetReason, StagesPlanned,
};

use super::file_storage::FileStorage;

/// The log directory for `dir`: `dir` itself if it holds segment files,
/// else `dir/log` (when `dir` is a job's data directory), else
/// `dir/<job>/log` when `dir` is a data directory holding exactly one job.
///
/// # Errors
/// [`EventsError::NoLog`] if none of these holds a segment;
/// [`EventsError::SeveralJobs`] if `dir` is a data directory holding more
/// than one job (name one: `dir/JOB`); [`EventsError::Io`] if `dir` cannot
/// be read.
pub fn locate_log_dir(dir: &Path) -> Result<PathBuf, EventsError> {
    let holds_segments = |d: &Path| -> Result<bool, EventsError> {
        match std::fs::read_dir(d) {
            Ok(entries) => Ok(entries.filter_map(Result::ok).any(|e| {
                e.file_name()
                    .to_str()
                    .and_then(parse_segment_file_name)
                    .is_some()
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(EventsError::Io {
                path: d.to_path_buf(),
                source,
            }),
        }
    };
    if !dir.is_dir() {
        return Err(EventsError::NoLog {
            path: dir.to_path_buf(),
        });
    }
    for candidate in [dir.to_path_buf(), dir.join(LOG_DIR)] {
        if holds_segments(&candidate)? {
            return Ok(candidate);
        }
    }
    // `dir` may be the whole data directory (`--data-dir`): one job in it.
    let mut jobs = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.filter_map(Result::ok).filter(|e| e.path().is_dir()) {
            let candidate = entry.path().join(LOG_DIR);
            if holds_segments(&candidate)? {
                jobs.push(candidate);
            }
        }
    }
    if jobs.len() == 1 {
        return Ok(jobs.remove(0));
    }
    if jobs.len() > 1 {
        let mut names: Vec<String> = jobs
            .iter()
            .filter_map(|log| log.parent()?.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        names.sort();
        return Err(EventsError::SeveralJobs {
            path: dir.to_path_buf(),
            jobs: names,
        });
    }
    Err(EventsError::NoLog {
        path: dir.to_path_buf(),
    })
}

#[derive(Serialize)]
struct InspectJson<'a> {
    log_dir: &'a Path,
    events: Vec<EventJson<'a>>,
    torn_tail: &'a Option<coordhost_log::TornTail>,
    segments: &'a [coordhost_log::SegmentSummary],
}

/// One event in `--json`: where it is, which coordinator run wrote it, what.
#[derive(Serialize)]
struct EventJson<'a> {
    position: coordhost_log::Position,
    /// The coordinator run (epoch) that wrote the record: its segment's
    /// attempt number, 0 for the run that started the log.
    epoch: u32,
    event: &'a JobEvent,
}

fn to_json<'a>(log_dir: &'a Path, replay: &'a Replay) -> InspectJson<'a> {
    InspectJson {
        log_dir,
        events: replay
            .events
            .iter()
            .map(|e| EventJson {
                position: e.position,
                epoch: e.position.attempt,
                event: &e.event,
            })
            .collect(),
        torn_tail: &replay.torn_tail,
        segments: &replay.segments,
    }
}

/// Replays the log in `dir` (see [`locate_log_dir`]) without taking its
/// lock and writes it to `out`: human lines (`SEGMENT:OFFSET epoch N KIND
/// ...`), or with `json` one JSON document `{log_dir, events: [{position,
/// epoch, event: {kind, event}}], torn_tail, segments}`; `epoch` is the
/// coordinator run that wrote the record.
///
/// # Errors
/// [`EventsError::NoLog`], any replay error (corruption names segment and
/// offset), or [`EventsError::Output`] if writing to `out` fails.
pub fn inspect(dir: &Path, json: bool, out: &mut impl Write) -> Result<(), EventsError> {
    if let Some(url) = dir
        .to_str()
        .filter(|d| super::ObjectLogUrl::is_object_url(d))
    {
        return inspect_objects(url, json, out);
    }
    let log_dir = locate_log_dir(dir)?;
    let replay = coordhost_log::replay(&FileStorage::open_read_only(&log_dir))?;
    write_inspect(&log_dir, &replay, json, out)
}

/// `log inspect s3://BUCKET/PREFIX`: the log on object storage
/// (docs/object-storage.md), printed as [`inspect`] prints a folder's.
///
/// # Errors
/// [`EventsError::NoLog`] if no log object is there, the URL's or the
/// store's error, any replay error.
pub fn inspect_objects(url: &str, json: bool, out: &mut impl Write) -> Result<(), EventsError> {
    let url = super::ObjectLogUrl::parse(url).map_err(|problem| EventsError::BadObjectUrl {
        url: url.to_owned(),
        problem,
    })?;
    let storage = super::ObjectStorage::connect(&url)?;
    let replay = coordhost_log::replay(&storage)?;
    if replay.is_empty() {
        return Err(EventsError::NoLog {
            path: PathBuf::from(url.object_url(LOG_DIR)),
        });
    }
    write_inspect(&PathBuf::from(url.object_url(LOG_DIR)), &replay, json, out)
}

fn write_inspect(
    log_dir: &Path,
    replay: &Replay,
    json: bool,
    out: &mut impl Write,
) -> Result<(), EventsError> {
    let output = |source| EventsError::Output { source };
    if json {
        serde_json::to_writer_pretty(&mut *out, &to_json(log_dir, replay))
            .map_err(|e| output(e.into()))?;
        writeln!(out).map_err(output)?;
        return Ok(());
    }
    writeln!(out, "event log {}", log_dir.display()).map_err(output)?;
    for s in &replay.segments {
        let state = if s.sealed { "sealed" } else { "newest" };
        writeln!(
            out,
            "segment {:08} {state}: {} records, {} valid of {} bytes",
            s.attempt, s.records, s.valid_len, s.file_len
        )
        .map_err(output)?;
    }
    // `SEGMENT:OFFSET epoch N KIND ...`: the epoch is the coordinator run
    // that wrote the record (its segment's attempt; 0 started the log).
    for e in &replay.events {
        writeln!(
            out,
            "{:08}:{:<8} epoch {:<3} {}",
            e.position.attempt,
            e.position.offset,
            e.position.attempt,
            describe(&e.event)
        )
        .map_err(output)?;
    }
    if let Some(torn) = &replay.torn_tail {
        writeln!(
            out,
            "torn tail: {} bytes cut at byte {} of {}",
            torn.bytes_dropped,
            torn.offset,
            torn.segment.display()
        )
        .map_err(output)?;
    }
    writeln!(out, "{} events", replay.events.len()).map_err(output)?;
    Ok(())
}

/// One line describing `event`, e.g. `ExecutionFinished source#0.0 epoch 0 …`.
#[must_use]
pub fn describe(event: &JobEvent) -> String {
    let mut line = format!("{:<21}", event.kind_name());
    let _infallible = match event {
        JobEvent::StagesPlanned(e) => stages_planned(&mut line, e),
        JobEvent::LeaderElected(e) => write!(
            line,
            "term {} ({}){}",
            e.term,
            e.etcd,
            if e.address.is_empty() {
                String::new()
            } else {
                format!(" serving workers on {}", e.address)
            }
        ),
        JobEvent::JobFinished(e) => write!(line, "job {} finished", e.job_id),
        JobEvent::JobCancelled(e) => write!(
            line,
            "job {} cancelled, asked by {}",
            e.job_id, e.requested_by
        ),
        JobEvent::JobFailed(e) => write!(
            line,
            "job {} failed (exit {}): {}",
            e.job_id, e.exit_code, e.error
        ),
        JobEvent::JobStarted(e) => write!(
            line,
            "job {} graph {} recovery {}",
            e.job_id,
            e.graph_fingerprint,
            if e.recovery_enabled {
                "enabled"
            } else {
                "disabled"
            }
        ),
        JobEvent::JobVertexInitialized(e) => vertex_initialized(&mut line, e),
        JobEvent::ExecutionFinished(e) => execution_finished(&mut line, e),
        JobEvent::ExecutionsReset(e) => write!(
            line,
            "[{}] because {}",
            e.executions
                .iter()
                .map(vertex)
                .collect::<Vec<_>>()
                .join(", "),
            reason(&e.reason)
        ),
        JobEvent::SinkCommitted(e) => write!(line, "{} file {}", attempt(&e.attempt), e.file),
        JobEvent::RecoveryStarted(e) => write!(
            line,
            "epoch {} replayed {} records, torn tail {} bytes",
            e.coordinator_epoch, e.replayed_records, e.torn_tail_bytes
        ),
        JobEvent::RecoveryFinished(e) => write!(
            line,
            "skipped [{}] reset [{}]",
            e.skipped.iter().map(attempt).collect::<Vec<_>>().join(", "),
            e.reset
                .iter()
                .map(|r| format!("{} because {}", vertex(&r.execution), reason(&r.reason)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    line
}

/// The stages of a SQL job: each with its parallelism (or `auto`) and
/// source, and the query's fingerprint.
fn stages_planned(line: &mut String, e: &StagesPlanned) -> std::fmt::Result {
    write!(
        line,
        "{} stages ({}) sql {}",
        e.stages.len(),
        e.stages
            .iter()
            .map(|s| format!(
                "{} {}{}",
                s.job_vertex,
                s.auto.map_or(format!("x{}", s.parallelism), |a| format!(
                    "auto max {}",
                    a.max_parallelism
                )),
                s.source
                    .as_ref()
                    .map_or(String::new(), |p| format!(" from {p}"))
            ))
            .collect::<Vec<_>>()
            .join(", "),
        &e.sql_fingerprint[..e.sql_fingerprint.len().min(12)]
    )
}

/// A job vertex's parallelism and the input ranges of each subtask.
fn vertex_initialized(line: &mut String, e: &JobVertexInitialized) -> std::fmt::Result {
    write!(
        line,
        "{} parallelism {}{} inputs {}",
        e.job_vertex,
        e.parallelism,
        if e.decided_at_runtime {
            " (decided at run time)"
        } else {
            ""
        },
        e.subtask_inputs
            .iter()
            .enumerate()
            .map(|(i, ranges)| format!(
                "#{i}[{}]",
                ranges
                    .iter()
                    .map(|r| format!(
                        "{} p{}..{} sp{}..{}",
                        r.data_set,
                        r.partition_start,
                        r.partition_end,
                        r.subpartition_start,
                        r.subpartition_end
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// A finished attempt: the partitions it produced, the enumerator
/// snapshots and the shuffle snapshot it carries.
fn execution_finished(line: &mut String, e: &ExecutionFinished) -> std::fmt::Result {
    write!(
        line,
        "{} epoch {} produced [{}] enumerator snapshots [{}] shuffle snapshot {}",
        attempt(&e.attempt),
        e.coordinator_epoch,
        e.produced
            .iter()
            .map(|p| format!(
                "{} at {} bytes {:?}",
                p.data_set, p.location, p.bytes_per_subpartition
            ))
            .collect::<Vec<_>>()
            .join(", "),
        e.enumerator_snapshots
            .iter()
            .map(|s| format!(
                "{}: {} state bytes{}, {} splits assigned{}",
                s.job_vertex,
                s.state_file
                    .as_ref()
                    .map_or(s.state.len() as u64, |f| f.len),
                s.state_file
                    .as_ref()
                    .map(|f| format!(" in side file {}", f.file))
                    .unwrap_or_default(),
                s.assignments.iter().map(|a| a.splits.len()).sum::<usize>(),
                if s.incremental {
                    " since the previous snapshot"
                } else {
                    ""
                }
            ))
            .collect::<Vec<_>>()
            .join(", "),
        match &e.shuffle_snapshot {
            None => "none".to_owned(),
            Some(s) => format!(
                "{} bytes{}",
                s.data.len(),
                if s.incremental { " (incremental)" } else { "" }
            ),
        }
    )
}

fn vertex(v: &ExecutionVertexId) -> String {
    format!("{}#{}", v.job_vertex, v.subtask)
}

fn attempt(a: &AttemptId) -> String {
    format!("{}#{} attempt {}", a.job_vertex, a.subtask, a.attempt)
}

fn reason(r: &ResetReason) -> String {
    match r {
        ResetReason::Failover { message } => format!("failover ({message})"),
        ResetReason::PartitionNotFound { data_set, consumer } => {
            format!("partition of {data_set} not found by {}", vertex(consumer))
        }
        ResetReason::RecoveryUnfinished => "recovery: unfinished".to_owned(),
        ResetReason::RecoveryNotInSnapshot => {
            "recovery: finish not covered by a snapshot".to_owned()
        }
        ResetReason::RecoveryEnumeratorWithoutSnapshot => {
            "recovery: enumerator cannot snapshot".to_owned()
        }
        ResetReason::RecoveryPartitionMissing { data_set } => {
            format!("recovery: partition of {data_set} missing")
        }
        ResetReason::RecoveryUpstreamReset { upstream } => {
            format!("recovery: upstream {} runs again", vertex(upstream))
        }
        ResetReason::RecoveryEnumeratorRestoreFailed => {
            "recovery: enumerator could not be restored from its snapshot".to_owned()
        }
    }
}
