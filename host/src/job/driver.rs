//! The driver of one job with a durable log: a fresh job records as it
//! goes; a job whose log is in the data directory is recovered (FLIP-383),
//! or, when that is impossible, restarted from scratch — unless committed
//! sink output would be duplicated, in which case the run stops with an
//! error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::log_place::LogPlace;
use super::plugins::load_plugins;
use super::recorder::{EventRecorder, job_fingerprint};
use crate::config::JobConfig;
use crate::events::{
    EventLogWriter, EventsError, JobEvent, JobStarted, RecoveryStarted, Replay, ShuffleSnapshot,
    WriterOptions, job_log_dir,
};
use crate::graph::ExecutionGraph;
use crate::plan::{PartitionRef, RecoveryPlan};
use crate::plugin::ShuffleMasterSnapshot;
use crate::recovery::{PartitionOracle, RecoveryTarget, ShuffleOracle};
use crate::scheduler::{JobError, JobEventSink, JobMaster, LastJobStarted, RunOptions, Summary};

/// Runs the job of `opts.job_file`: resolves the data directory once,
/// checks the job file, loads its plugins and drives the job with its event
/// log — a fresh run is recorded, an interrupted one recovered (FLIP-383).
///
/// Returns the summary of a run that started: its `status` is
/// [`JobStatus::Failed`](crate::scheduler::JobStatus::Failed) (with `error`
/// in words) when the job failed while running, e.g. an execution vertex
/// ran out of attempts ([`JobError::TaskFailed`]) or a plugin call failed.
///
/// # Errors
///
/// Problems found before anything runs: [`JobError::Config`] for a bad job
/// file, [`JobError::Plugin`] when a plugin cannot be loaded or the shuffle
/// master cannot be created, [`JobError::Io`] for the data directory or the
/// output folders, [`JobError::Workers`].
pub fn run_job(opts: &RunOptions) -> Result<Summary, JobError> {
    // The data directory is resolved here, once, as the job file's
    // `${data_dir}` is (`..` as the OS follows it; a `..` after a missing
    // folder is refused before anything is created): everything below uses
    // this path.
    let data_dir = crate::config::resolve_physical(&opts.data_dir).map_err(|reason| {
        crate::config::ConfigError::Argument {
            arg: "--data-dir",
            reason,
        }
    })?;
    let opts = &RunOptions {
        data_dir,
        ..opts.clone()
    };
    // One validation pass before anything is created (docs/job-file.md,
    // "Rules and their messages").
    crate::config::check_arguments(opts.workers, None)?;
    let mut config = crate::config::load_job(
        &opts.job_file,
        &crate::config::LoadOptions {
            data_dir: opts.data_dir.clone(),
            cache_dir: opts.cache_dir.clone(),
            log_on_objects: opts.log.is_some(),
        },
    )?;
    // A SQL job rerun runs the stages its log recorded, never a new plan
    // (docs/sql.md); the plan made while checking the file is dropped.
    let log = LogPlace::new(&config, opts)?;
    super::sql::adopt_recorded_stages(&mut config, &log);
    if let Some(ui) = &opts.ui {
        ui.start(&config.name, &config.graph);
    }
    let data_dir = &opts.data_dir;
    let cache_dir = opts
        .cache_dir
        .clone()
        .unwrap_or_else(|| data_dir.join("cache"));
    crate::config::check_cache_dir(&config, &cache_dir)?;
    check_sink_stores(&config)?;
    check_shuffle_stores(&config)?;
    let new_folders = crate::config::NewFolders::note(&config, data_dir);
    let result = run_recoverable(&config, opts, &log).map(|mut summary| {
        summary.default_shuffle = config.default_shuffle;
        summary
    });
    if let Err(e @ (JobError::PluginLoad { .. } | JobError::Plugin { .. })) = &result
        && e.is_bad_input()
    {
        // A component that passed the checks but does not load: the run
        // is refused as if it had never started.
        new_folders.remove();
    }
    result
}

/// Runs `config`'s job with its event log under the data directory:
/// records a fresh run, recovers an interrupted one.
///
/// # Errors
/// As [`run_job`], plus [`JobError::Log`] (the log is
/// locked by another coordinator or cannot be written),
/// [`JobError::JobFileChanged`], [`JobError::WouldDuplicate`] and
/// [`JobError::UnloggedOutput`] (published output but no log; `--fresh`,
/// i.e. [`RunOptions::fresh`], discards both and runs from scratch).
fn run_recoverable(
    config: &JobConfig,
    opts: &RunOptions,
    log: &LogPlace,
) -> Result<Summary, JobError> {
    let (plugins, workers) = load_plugins(config, opts)?;
    let data_dir = opts.data_dir.clone();
    let fresh_master = || {
        JobMaster::new(
            config,
            ExecutionGraph::new(config.graph.clone()),
            plugins.clone(),
            opts,
            workers,
        )
    };
    let fingerprint = job_fingerprint(config, &data_dir);
    let fresh = opts.fresh && fresh_still_applies(config, &data_dir, opts)?;
    // `coordhost cancel`'s request file lives in the job's folder, beside
    // its log; `--resume` and `--fresh` withdraw a request not acted on.
    let job_dir = crate::events::job_log_dir(&data_dir, &config.name)?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    if fresh || opts.resume {
        super::cancel::withdraw(&job_dir)?;
    }
    let (writer, mut replay, local_lock) =
        open_for_attempt(config, opts, log, &job_dir, &fingerprint, fresh)?;
    if let Some((ended, withdraw)) = ended_earlier(config, opts, &replay) {
        writer.close()?;
        if withdraw {
            super::cancel::withdraw(&job_dir)?;
        }
        return Err(ended);
    }
    let storage = Arc::clone(writer.storage());
    let mut recorder = recorder_after_replay(config, opts, writer, &replay)?;
    let started = start_master(
        config,
        opts,
        &fresh_master,
        &mut replay,
        &*storage,
        &mut recorder,
    );
    let (mut master, recovered) = match started {
        Ok(Start::Run(master, recovered)) => (*master, recovered),
        Ok(Start::MasterFailed(e)) => {
            recorder.close()?;
            return Ok(failed_before_start(config, opts, workers, &e));
        }
        // A simulated crash inside recovery is a crash, not a failed recovery.
        #[cfg(feature = "failpoints")]
        Err(crash @ JobError::SimulatedCrash { .. }) => {
            recorder.close()?;
            return Err(crash);
        }
        Err(e) => return Err(e),
    };
    // The replayed records are not needed past recovery: their memory goes
    // back before the job runs (issue 29).
    drop(replay);
    record_start(
        config,
        opts,
        &mut master,
        &mut recorder,
        recovered,
        fingerprint,
    )?;
    let mut summary = run_watched(master, &mut recorder, opts, &job_dir);
    record_end(config, &mut recorder, &mut summary)?;
    recorder.close()?;
    if summary.status == crate::scheduler::JobStatus::Cancelled {
        // Recorded: the request is done.
        super::cancel::withdraw(&job_dir)?;
    }
    drop(local_lock);
    Ok(summary)
}

/// Runs the job on `master`, with `coordhost cancel`'s request file of
/// `job_dir` watched while it runs (a request that waited for this run is
/// seen before the loop starts).
fn run_watched(
    master: JobMaster,
    recorder: &mut EventRecorder,
    opts: &RunOptions,
    job_dir: &Path,
) -> Summary {
    let watcher = opts.stop.as_ref().map(|stop| {
        if super::cancel::requested(job_dir) {
            stop.request(crate::scheduler::StopReason::Cancel);
        }
        super::cancel::Watcher::start(job_dir.to_path_buf(), stop.clone())
    });
    let summary = master.run(recorder);
    drop(watcher);
    summary
}

/// The end an earlier run of this job recorded that this run must not
/// undo, with whether a cancel request is withdrawn: with high
/// availability a failed job is terminal (this leader says so and exits
/// with the failed run's code, its segment empty but for its header;
/// docs/ha.md); a cancelled job stays cancelled unless `--resume` asks
/// (docs/job-file.md, "Stopping, cancelling, resuming").
fn ended_earlier(
    config: &JobConfig,
    opts: &RunOptions,
    replay: &Replay,
) -> Option<(JobError, bool)> {
    if opts.leader.is_some()
        && let Some(failed) = failed_earlier(&config.name, replay)
    {
        return Some((failed, false));
    }
    if !opts.resume
        && let Some(cancelled) = super::cancel::cancelled_earlier(&config.name, replay)
    {
        return Some((cancelled, true));
    }
    None
}

/// The recorder of this run over `writer`: the snapshot side files of the
/// newest snapshots kept (all that recovery can need), leftovers and
/// superseded ones removed (docs/log-format.md, "Snapshot side files"),
/// and the job's page told what the log held.
///
/// # Errors
/// The side files' listing error.
fn recorder_after_replay(
    config: &JobConfig,
    opts: &RunOptions,
    writer: EventLogWriter,
    replay: &Replay,
) -> Result<EventRecorder, JobError> {
    let newest_files = crate::events::newest_snapshot_files(current_run(&replay.events));
    crate::events::remove_snapshot_files_except(
        &**writer.storage(),
        &newest_files.values().cloned().collect(),
    )?;
    let mut recorder = EventRecorder::new(writer, config.graph.clone());
    recorder.adopt_snapshot_files(newest_files);
    if let Some(ui) = &opts.ui {
        ui.replayed(replay, recorder.epoch());
        recorder.observe(ui.clone());
    }
    Ok(recorder)
}

/// Records how this coordinator attempt starts: a run from scratch writes
/// `JobStarted` (and a SQL job its planned stages) durably and prepares
/// its sinks; with high availability the term that writes this segment
/// follows (docs/ha.md).
///
/// # Errors
/// The recorder's and the sinks' errors.
fn record_start(
    config: &JobConfig,
    opts: &RunOptions,
    master: &mut JobMaster,
    recorder: &mut EventRecorder,
    recovered: bool,
    fingerprint: String,
) -> Result<(), JobError> {
    if !recovered {
        recorder.append_durable(&JobEvent::JobStarted(JobStarted {
            job_id: config.name.clone(),
            graph_fingerprint: fingerprint,
            recovery_enabled: config.recovery.enabled,
        }))?;
        if let Some(stages) = super::sql::stages_planned(config)? {
            recorder.append_durable(&stages)?;
        }
        master.prepare_fresh_sinks()?;
    }
    if let Some(leader) = &opts.leader {
        recorder.append_durable(&JobEvent::LeaderElected(leader.clone()))?;
    }
    Ok(())
}

/// The log as found before this coordinator attempt opens it, with what
/// [`look_before_opening`] decided.
struct Found {
    /// The log replayed without the lock, for the checks and, when its
    /// segments did not change meanwhile, reused under the lock (issue 29:
    /// one decode of every record per restart, not three); `None` for
    /// `--fresh`.
    replay: Option<crate::events::UnlockedReplay>,
    /// Whether this run starts a new run inside an object log (on objects
    /// a log is never moved: `--fresh`, or an edited job that never ran,
    /// starts a new run inside it instead; docs/object-storage.md).
    new_run_in_log: bool,
}

/// Looks at the job's log before opening it and refuses a run that must
/// not start: an edited job file, published output without a log, output
/// of another job where the sinks write. With `fresh` a folder log is set
/// aside first (a prefix `--fresh` never wrote to is someone else's all
/// the same).
///
/// # Errors
/// [`JobError::JobFileChanged`], [`JobError::UnloggedOutput`], the foreign
/// output's refusal, and the errors of setting the log aside.
fn look_before_opening(
    config: &JobConfig,
    opts: &RunOptions,
    log: &LogPlace,
    fingerprint: &str,
    fresh: bool,
) -> Result<Found, JobError> {
    let data_dir = &opts.data_dir;
    if fresh {
        // Whether the data directory held a folder log of the job before
        // `--fresh` set it aside: a fresh run's sinks on objects may then
        // hold this job's output.
        let folder_log_existed = matches!(log, LogPlace::Dir(dir) if dir.is_dir());
        match log {
            LogPlace::Objects(_) => {
                return Ok(Found {
                    replay: None,
                    new_run_in_log: true,
                });
            }
            LogPlace::Dir(_) => discard_log(config, data_dir, opts.fence.as_deref())?,
        }
        refuse_if_foreign_output(config, folder_log_existed, log)?;
        return Ok(Found {
            replay: None,
            new_run_in_log: false,
        });
    }
    let mut found = match log {
        LogPlace::Dir(dir) => crate::events::UnlockedReplay::read(dir),
        LogPlace::Objects(_) => log.replay_existing().map(Into::into),
    };
    let new_run_in_log = refuse_if_edited(config, data_dir, log, fingerprint, &mut found)?;
    refuse_if_unlogged_output(config, found.as_ref())?;
    refuse_if_foreign_output(config, log_has_run(found.as_ref()), log)?;
    Ok(Found {
        replay: found,
        new_run_in_log,
    })
}

/// Starts a new run inside an object log: the earlier runs' records stay
/// in the log (`log inspect` shows them); recovery reads only the run
/// after the newest `JobStarted`, which this run writes next.
fn start_new_run_in_log(log: &LogPlace, replay: &mut Replay) {
    if !replay.events.is_empty() {
        tracing::warn!(
            "the job's event log {} keeps its {} earlier records; this run starts a new run in it and the job runs from scratch",
            log.describe(),
            replay.events.len()
        );
    }
    replay.events.clear();
    replay.torn_tail = None;
}

/// How this coordinator attempt's master starts ([`start_master`]).
enum Start {
    /// Run on this master; `true` when it holds a recovered plan.
    Run(Box<JobMaster>, bool),
    /// The master could not start (its shuffle master failed, not bad
    /// input): the job fails before it starts.
    MasterFailed(JobError),
}

/// The master this attempt runs on: a fresh one from `fresh_master`, which
/// recovers the replayed run when the log holds one
/// ([`recover_or_start_over`]).
///
/// # Errors
/// A fresh master's bad input and [`recover_or_start_over`]'s errors.
fn start_master(
    config: &JobConfig,
    opts: &RunOptions,
    fresh_master: &dyn Fn() -> Result<JobMaster, JobError>,
    replay: &mut Replay,
    storage: &dyn crate::events::Storage,
    recorder: &mut EventRecorder,
) -> Result<Start, JobError> {
    let mut master = match fresh_master() {
        Ok(master) => master,
        Err(e) if !e.is_bad_input() => return Ok(Start::MasterFailed(e)),
        Err(e) => return Err(e),
    };
    if current_run(&replay.events).is_empty() {
        if config.recovery.enabled && !master.snapshots_enabled() {
            // FLIP-383: without shuffle-master snapshots there is no progress recovery.
            tracing::warn!(
                "the shuffle master `{}` cannot take batch snapshots: if this run is interrupted, the job will run again from scratch",
                config.shuffle_plugin
            );
        }
        return Ok(Start::Run(Box::new(master), false));
    }
    let restart = recover_or_start_over(
        config,
        opts,
        &mut master,
        fresh_master,
        replay,
        storage,
        recorder,
    )?;
    Ok(match restart {
        Restart::Recovered => Start::Run(Box::new(master), true),
        Restart::FromScratch => Start::Run(Box::new(master), false),
        Restart::MasterFailed(e) => Start::MasterFailed(e),
    })
}

/// What a restart with history came to ([`recover_or_start_over`]).
enum Restart {
    /// The plan is installed: the run goes on where the log left it.
    Recovered,
    /// No progress recovery: the job runs again from scratch.
    FromScratch,
    /// Recovery failed and a fresh master could not start (its shuffle
    /// master failed, not bad input): the job fails before it starts.
    MasterFailed(JobError),
}

/// Recovers the replayed run into `master` (docs/recovery.md), or, when
/// recovery is disabled, impossible (a shuffle master without batch
/// snapshots) or fails, says why and lets the job run from scratch — on a
/// fresh master from `fresh_master` when a recovery failed half-way.
///
/// # Errors
/// [`JobError::WouldDuplicate`] when running from scratch would publish
/// committed sink output again; a fresh master's bad input; a simulated
/// crash inside recovery (with the `failpoints` feature).
fn recover_or_start_over(
    config: &JobConfig,
    opts: &RunOptions,
    master: &mut JobMaster,
    fresh_master: &dyn Fn() -> Result<JobMaster, JobError>,
    replay: &mut Replay,
    storage: &dyn crate::events::Storage,
    recorder: &mut EventRecorder,
) -> Result<Restart, JobError> {
    let recovery_started = std::time::Instant::now();
    let impossible = if !config.recovery.enabled {
        Some("recovery is disabled in the job file ([recovery] enabled = false)".to_string())
    } else if !master.snapshots_enabled() {
        Some(format!(
            "the shuffle master `{}` cannot take batch snapshots",
            config.shuffle_plugin
        ))
    } else {
        None
    };
    if let Some(reason) = impossible {
        refuse_if_committed(config, &reason)?;
        tracing::warn!("no progress recovery: {reason}; the job runs again from scratch");
        return Ok(Restart::FromScratch);
    }
    match recover(master, config, replay, storage, recorder) {
        Ok(()) => {
            if let Some(ui) = &opts.ui {
                ui.recovery_took(recovery_started.elapsed());
            }
            Ok(Restart::Recovered)
        }
        #[cfg(feature = "failpoints")]
        Err(crash @ JobError::SimulatedCrash { .. }) => Err(crash),
        Err(e) => {
            refuse_if_committed_after(config, &e)?;
            tracing::error!("recovery failed: {e}; the job runs again from scratch");
            match fresh_master() {
                Ok(fresh) => {
                    *master = fresh;
                    Ok(Restart::FromScratch)
                }
                Err(e) if !e.is_bad_input() => Ok(Restart::MasterFailed(e)),
                Err(e) => Err(e),
            }
        }
    }
}

/// Opens the job's log for this coordinator attempt: looks at it first
/// ([`look_before_opening`], with `fresh` and the job file's
/// `fingerprint`), then opens a folder under its lock or the leadership's
/// fence, or objects with the job folder's guard
/// ([`open_object_log_guarded`]), reusing the first look's replay when the
/// segments did not change. Returns the writer, the replay (empty when this
/// run starts a new run inside an object log) and the job folder's lock
/// (held until the run ends) of an object log.
///
/// # Errors
/// [`look_before_opening`]'s refusals, the lock's and the log's errors;
/// damage on objects is refused, never set aside (docs/object-storage.md).
fn open_for_attempt(
    config: &JobConfig,
    opts: &RunOptions,
    log: &LogPlace,
    job_dir: &Path,
    fingerprint: &str,
    fresh: bool,
) -> Result<(EventLogWriter, Replay, Option<crate::events::LogLock>), JobError> {
    let replay_started = std::time::Instant::now();
    let found = look_before_opening(config, opts, log, fingerprint, fresh)?;
    let (writer, mut replay, lock) = match log {
        LogPlace::Dir(_) => {
            let (writer, replay) =
                open_log(config, &opts.data_dir, opts.fence.as_ref(), found.replay)?;
            // The job's log is in its folder now, not where an earlier run
            // on objects noted it.
            super::cancel::forget_object_log(job_dir);
            (writer, replay, None)
        }
        LogPlace::Objects(storage) => open_object_log_guarded(job_dir, storage, opts)?,
    };
    if found.new_run_in_log {
        start_new_run_in_log(log, &mut replay);
    }
    if !replay.is_empty() {
        // For the scale bench (docs/recovery.md, "Figures"): how long the
        // log took to read and decode, stated once per restart.
        tracing::info!(
            records = replay.events.len(),
            replay_ms = replay_started.elapsed().as_secs_f64() * 1e3,
            "job event log replayed"
        );
    }
    Ok((writer, replay, lock))
}

/// Opens the job's event log on objects for this coordinator attempt, with
/// the guard of the job's folder in the data directory: the folder says
/// "this job ran here" (the sink folders' check, cancel requests) as a
/// folder log's folder does; its lock keeps a second coordinator on this
/// data directory out (the object fence decides between machines) and
/// tells `coordhost cancel` that one runs; `OBJECT_LOG` tells it where the
/// log is. A run refused here (the store unreachable, the log damaged)
/// leaves no job folder that was not there. With high availability the
/// leadership is that guard instead (a deposed leader, paused, may still
/// hold the lock), as for a folder log.
///
/// # Errors
/// [`JobError::Io`] for the job folder, the lock's and the log's errors.
fn open_object_log_guarded(
    job_dir: &Path,
    storage: &Arc<crate::events::ObjectStorage>,
    opts: &RunOptions,
) -> Result<(EventLogWriter, Replay, Option<crate::events::LogLock>), JobError> {
    let new_job_dir = !job_dir.exists();
    let lock = match opts.fence {
        Some(_) => {
            std::fs::create_dir_all(job_dir).map_err(|source| JobError::Io {
                path: job_dir.to_path_buf(),
                source,
            })?;
            None
        }
        None => Some(crate::events::LogLock::acquire(job_dir)?),
    };
    let opened = super::cancel::note_object_log(job_dir, storage.url()).and_then(|()| {
        crate::events::open_object_log(Arc::clone(storage), WriterOptions::default())
            .map_err(JobError::from)
    });
    match opened {
        Ok((writer, replay)) => Ok((writer, replay, lock)),
        Err(e) => {
            drop(lock);
            if new_job_dir {
                super::cancel::remove_new_job_dir(job_dir);
            }
            Err(e)
        }
    }
}

/// The summary of a run whose shuffle master failed while the run started
/// (its `create` or `register-job` trapped, missed its deadline or returned
/// an error other than `invalid-config`): nothing ran, the job failed with
/// `error` (exit 1), and `--summary-json` says so like any failed run.
fn failed_before_start(
    config: &JobConfig,
    opts: &RunOptions,
    workers: usize,
    error: &JobError,
) -> Summary {
    Summary {
        job: config.name.clone(),
        status: crate::scheduler::JobStatus::Failed,
        recovered: false,
        tasks_total: 0,
        tasks_run: 0,
        tasks_skipped: 0,
        tasks_finished: 0,
        tasks_failed: 0,
        tasks_stopped: 0,
        tasks_not_run: 0,
        tasks_reset: 0,
        reset_reasons: Default::default(),
        wall_ms: 0,
        workers: opts
            .external
            .as_ref()
            .map_or(workers as u64, |cluster| cluster.slots()),
        coordinator_busy_us: 0,
        vertices: config
            .graph
            .vertices
            .iter()
            .map(|v| crate::scheduler::VertexSummary {
                id: v.id.clone(),
                parallelism: 0,
                records_in: 0,
                records_out: 0,
                bytes_out: 0,
                splits_assigned: 0,
                splits_returned: 0,
                skipped: 0,
                input: None,
            })
            .collect(),
        // Only folders that hold published output (of an earlier run).
        outputs: config
            .graph
            .vertices
            .iter()
            .filter_map(|v| v.sink.as_ref())
            .filter(|s| !published_files(s).is_empty())
            .map(crate::runtime::sink::output_name)
            .collect(),
        error: Some(crate::plugin::one_line(
            &error.to_string(),
            4 * crate::plugin::MAX_MESSAGE_BYTES,
        )),
        bad_input: false,
        coordinator_failed: false,
        default_shuffle: config.default_shuffle,
    }
}

/// Makes the end of the run durable (under the fence with high
/// availability) before the coordinator exits or steps down: `JobFinished`
/// for a finished job, `JobFailed` for a job that failed on its own (not
/// on this coordinator's crash, lost leadership or log: the next run
/// recovers those). docs/recovery.md, "How a run ends".
///
/// # Errors
/// [`JobError::Recording`] when a finished job's `JobFinished` cannot be
/// made durable (the output is published, but the end is not recorded: the
/// next leader recovers the job as finished). A failed job's `JobFailed`
/// that cannot be made durable (the leadership lost, the log failing) is
/// not an error of its own: `summary` then says the coordinator failed,
/// with the job's error and why the failure is not final.
fn record_end(
    config: &JobConfig,
    recorder: &mut EventRecorder,
    summary: &mut Summary,
) -> Result<(), JobError> {
    use crate::scheduler::JobStatus;
    let job_id = config.name.clone();
    match summary.status {
        JobStatus::Finished => {
            recorder.append_durable(&JobEvent::JobFinished(crate::events::JobFinished {
                job_id,
            }))?;
        }
        JobStatus::Failed if !summary.coordinator_failed => {
            let failed = JobEvent::JobFailed(crate::events::JobFailed {
                job_id,
                error: crate::config::one_line(
                    summary.error.as_deref().unwrap_or("the job failed"),
                ),
                exit_code: if summary.bad_input {
                    super::exit::EXIT_BAD_INPUT
                } else {
                    super::exit::EXIT_FAILED
                },
            });
            #[cfg(feature = "failpoints")]
            let refused = crate::failpoints::job_failed_not_recorded().then(|| {
                "test knob job::job-failed-not-recorded: the record was refused".to_owned()
            });
            #[cfg(not(feature = "failpoints"))]
            let refused: Option<String> = None;
            let recorded = match refused {
                Some(why) => Err(why),
                None => recorder.append_durable(&failed).map_err(|e| e.to_string()),
            };
            if let Err(e) = recorded {
                // Not recorded, the failure is not the job's end: the next
                // run (or leader) finds no `JobFailed` and recovers the job,
                // so this run must not report it as final (Flink's
                // FLINK-39704 re-ran a job reported failed). It ends as on
                // the coordinator's own failure, saying both.
                summary.coordinator_failed = true;
                summary.error = Some(crate::plugin::one_line(
                    &format!(
                        "{}; this failure could not be recorded in the event log ({e}): the next run or leader recovers the job",
                        summary.error.as_deref().unwrap_or("the job failed")
                    ),
                    4 * crate::plugin::MAX_MESSAGE_BYTES,
                ));
            }
        }
        JobStatus::Failed => {}
        JobStatus::Cancelled => {
            recorder.append_durable(&JobEvent::JobCancelled(crate::events::JobCancelled {
                job_id,
                requested_by: "`coordhost cancel`".to_owned(),
            }))?;
        }
        // A stop records nothing: the next run recovers, as after a crash.
        JobStatus::Stopped => {}
    }
    Ok(())
}

/// High availability: the failure of the log's last run, when it ended with
/// `JobFailed` and no run or recovery started after it
/// (`coordhost_core::run_end`).
fn failed_earlier(job: &str, replay: &Replay) -> Option<JobError> {
    coordhost_core::run_end::failed_earlier(replay.events.iter().map(|e| &e.event)).map(|f| {
        JobError::FailedEarlier {
            job: job.to_owned(),
            term: f.term,
            error: f.error,
            exit_code: f.exit_code,
        }
    })
}

/// Where the last `JobStarted` of job `job`'s log in `data_dir` is (and
/// which folder the log is), read without the lock; `None` without a log or
/// a `JobStarted` (or a log that cannot be read: the run decides about it
/// later). High availability's `--fresh` notes it before campaigning
/// ([`RunOptions::fresh_if_last_started`]).
///
/// With `objects` (the log on object storage) the log is read from there;
/// an object log is never set aside, so its identity is `(0, 0)`.
#[must_use]
pub fn last_job_started_at(
    data_dir: &Path,
    job: &str,
    objects: Option<&crate::events::ObjectLogUrl>,
) -> Option<LastJobStarted> {
    use std::os::unix::fs::MetadataExt as _;
    let (log_dir, replay) = match objects {
        Some(url) => {
            let storage = crate::events::ObjectStorage::connect(url).ok()?;
            ((0, 0), crate::events::replay(&storage).ok()?)
        }
        None => {
            let log_dir = job_log_dir(data_dir, job).ok()?;
            let meta = std::fs::metadata(&log_dir).ok().filter(|m| m.is_dir())?;
            let storage = crate::events::FileStorage::open_read_only(&log_dir);
            (
                (meta.dev(), meta.ino()),
                crate::events::replay(&storage).ok()?,
            )
        }
    };
    replay
        .events
        .iter()
        .rev()
        .find(|e| matches!(e.event, JobEvent::JobStarted(_)))
        .map(|e| LastJobStarted {
            log_dir,
            at: e.position,
        })
}

/// `--fresh` with high availability discards the log only if its last
/// `JobStarted` is still the one this coordinator saw when it started: a
/// standby started with `--fresh` that leads after another coordinator
/// already started the job afresh goes on with that run (and, if it
/// failed, says so) instead of discarding it again. Without high
/// availability `--fresh` always applies.
fn fresh_still_applies(
    config: &JobConfig,
    data_dir: &Path,
    opts: &RunOptions,
) -> Result<bool, JobError> {
    let Some(seen) = opts.fresh_if_last_started else {
        return Ok(true);
    };
    let objects = opts.log.as_ref().or(config.log.as_ref());
    let now = last_job_started_at(data_dir, &config.name, objects);
    if now == seen {
        return Ok(true);
    }
    tracing::warn!(
        "--fresh: another coordinator started job `{}` afresh since this one started; that run is not discarded again",
        config.name
    );
    Ok(false)
}

/// Refuses a data directory whose log was written for another job file,
/// before anything there changes (opening the log for writing would seal
/// its segments and start a new one). A log that cannot be replayed is left
/// to [`open_log`].
///
/// A log of another job file in which no execution finished and no output
/// was published (e.g. a plugin refused its configuration at the start) has
/// nothing to recover or duplicate: a folder log is set aside (never
/// deleted), and the edited job starts afresh, so fixing a job file needs
/// no new data directory (issue 17, fix 5). A log on object storage is not
/// moved: `Ok(true)` says the run starts a new run inside it.
///
/// `found` is the log as found (`None`: no log); it becomes `None` when the
/// log is set aside.
fn refuse_if_edited(
    config: &JobConfig,
    data_dir: &Path,
    log: &LogPlace,
    fingerprint: &str,
    found: &mut Option<crate::events::UnlockedReplay>,
) -> Result<bool, JobError> {
    let log_dir = job_log_dir(data_dir, &config.name)?;
    let Some(replayed) = found.as_ref() else {
        return Ok(false);
    };
    let replay = match &replayed.replay {
        Ok(replay) => replay,
        // Written by a newer coordhost: refused before the log is opened for
        // writing, so nothing in it is sealed, set aside or removed
        // (docs/log-format.md, "Kinds").
        Err(e) if is_newer_than_this_binary(e) => {
            let Some(crate::events::UnlockedReplay { replay: Err(e), .. }) = found.take() else {
                unreachable!("an error was found just above")
            };
            return Err(e.into());
        }
        Err(_) => return Ok(false),
    };
    match last_job_started(replay) {
        Some(started) if started.graph_fingerprint != fingerprint => {
            let nothing_to_lose = nothing_ran(replay) && !has_published_output(config);
            if let LogPlace::Objects(storage) = log {
                if nothing_to_lose {
                    return Ok(true);
                }
                return Err(JobError::JobFileChanged {
                    data_dir: PathBuf::from(storage.url().to_string()),
                });
            }
            if nothing_to_lose {
                // Not while another coordinator holds the log.
                let lock = crate::events::LogLock::acquire(&log_dir)?;
                let aside = set_aside_as(&log_dir, "replaced")?;
                drop(lock);
                *found = None;
                tracing::warn!(
                    "the job file changed, but no execution finished under the old one and no output was published: its event log is set aside at {} and the job starts afresh",
                    aside.display()
                );
                return Ok(false);
            }
            Err(JobError::JobFileChanged {
                data_dir: data_dir.to_path_buf(),
            })
        }
        _ => Ok(false),
    }
}

/// True for a log with no finished execution and no published sink output
/// in any of its runs.
fn nothing_ran(replay: &Replay) -> bool {
    !replay.events.iter().any(|e| {
        matches!(
            e.event,
            JobEvent::ExecutionFinished(_) | JobEvent::SinkCommitted(_)
        )
    })
}

/// True if a sink folder of `config` holds published files (`part-*`,
/// `_SUCCESS`) and may not be cleared (`overwrite` unset).
fn has_published_output(config: &JobConfig) -> bool {
    config
        .graph
        .vertices
        .iter()
        .filter_map(|v| v.sink.as_ref())
        .any(|sink| !sink.overwrite && !published_files(sink).is_empty())
}

/// Before anything runs: the store of every sink on object storage is
/// asked (its prefix listed), so that an endpoint that cannot be reached,
/// refused credentials or a missing bucket stop the run in one line naming
/// the endpoint and the sink's URL ([`JobError::SinkStore`], exit 1).
fn check_sink_stores(config: &JobConfig) -> Result<(), JobError> {
    for sink in config.graph.vertices.iter().filter_map(|v| v.sink.as_ref()) {
        if sink.objects.is_some() {
            crate::runtime::sink::published_names(sink)
                .map_err(|problem| JobError::SinkStore { problem })?;
        }
    }
    Ok(())
}

/// Before anything runs: the store of every writable store grant of the
/// shuffle master is asked (the grant listed), as a sink's is. A shuffle
/// master that places result partitions on objects (`object-shuffle`)
/// makes the host write there; without this check a wrong secret or a
/// missing bucket showed only when the first producers uploaded, each
/// producer failing its attempts ([`JobError::ShuffleStore`], exit 1).
fn check_shuffle_stores(config: &JobConfig) -> Result<(), JobError> {
    let Some(spec) = config.plugins.get(&config.shuffle_plugin) else {
        return Ok(());
    };
    for grant in spec.stores.iter().filter(|g| g.writable) {
        crate::objstore::probe(&grant.url).map_err(|what| JobError::ShuffleStore {
            problem: format!(
                "object store {} (store granted to shuffle master `{}`: {}): {what}",
                crate::objstore::endpoint(),
                spec.name,
                grant.url
            ),
        })?;
    }
    Ok(())
}

/// Whether the log as found has a run of the job (a `JobStarted`); a log
/// that cannot be replayed counts as one (its damage is named when it is
/// opened).
fn log_has_run(found: Option<&crate::events::UnlockedReplay>) -> bool {
    match found.map(|f| &f.replay) {
        Some(Ok(replay)) => last_job_started(replay).is_some(),
        Some(Err(_)) => true,
        None => false,
    }
}

/// The rule of docs/job-file.md ("Sinks") that needs the log: unless `ran`
/// (the job's log has a run of it) or `overwrite`, a sink may not hold
/// output the job did not write. A sink on object storage may not hold
/// `part-*` or `_SUCCESS` objects under its prefix (checked here whatever
/// the log's place: the data directory cannot see a prefix); with the log
/// on object storage, a sink folder may hold no entry at all (the job file
/// check left it to the log: a standby on another data directory shares
/// the sink folder and the log, so the data directory cannot tell).
fn refuse_if_foreign_output(config: &JobConfig, ran: bool, log: &LogPlace) -> Result<(), JobError> {
    if ran {
        return Ok(());
    }
    for v in &config.graph.vertices {
        let Some(sink) = v.sink.as_ref().filter(|s| !s.overwrite) else {
            continue;
        };
        let entry = match (&sink.objects, log) {
            (Some(_), _) => crate::runtime::sink::published_names(sink)
                .map_err(|problem| JobError::SinkStore { problem })?
                .into_iter()
                .next(),
            (None, LogPlace::Objects(_)) => crate::config::first_entry(&sink.dir),
            (None, LogPlace::Dir(_)) => None,
        };
        if let Some(entry) = entry {
            return Err(JobError::ForeignOutput {
                job: config.name.clone(),
                output: crate::runtime::sink::output_name(sink),
                entry,
                log: log.describe(),
            });
        }
    }
    Ok(())
}

/// True for a log this binary cannot read because a newer coordhost wrote
/// it: a newer segment format, record schema version or event kind.
fn is_newer_than_this_binary(e: &EventsError) -> bool {
    matches!(
        e,
        EventsError::UnsupportedFormat { .. }
            | EventsError::UnsupportedVersion { .. }
            | EventsError::UnknownKind { .. }
    )
}

/// Refuses a run from scratch over published sink output when the data
/// directory holds no event log of this job that started it (the log, or
/// only its segments, were deleted): such a run would delete the output
/// without a word (issue 12.3). A log that cannot be replayed is left to
/// [`open_log`], which refuses the same state.
///
/// `found` is the log as found (`None`: no log).
fn refuse_if_unlogged_output(
    config: &JobConfig,
    found: Option<&crate::events::UnlockedReplay>,
) -> Result<(), JobError> {
    match found.map(|f| &f.replay) {
        Some(Ok(replay)) if last_job_started(replay).is_some() => return Ok(()),
        Some(Ok(_)) | None => {}
        Some(Err(_)) => return Ok(()),
    }
    for v in &config.graph.vertices {
        let Some(sink) = &v.sink else { continue };
        if sink.overwrite || sink.objects.is_some() {
            // The job file says this folder may be cleared; a prefix's
            // output without a run in the log is refused as foreign
            // ([`refuse_if_foreign_output`]).
            continue;
        }
        let files = published_files(sink);
        if !files.is_empty() {
            return Err(JobError::UnloggedOutput {
                job: config.name.clone(),
                output: sink.dir.clone(),
                files,
            });
        }
    }
    Ok(())
}

/// Names of the published output (`part-*`, `_SUCCESS`) of a sink, sorted:
/// in its folder or under its prefix ([`crate::runtime::sink::published_names`];
/// a store that cannot be listed was refused at the start, so none here).
fn published_files(sink: &crate::graph::SinkSpec) -> Vec<String> {
    crate::runtime::sink::published_names(sink).unwrap_or_default()
}

/// `--fresh`: sets the job's log aside (`log.discarded-<nanoseconds>`, never
/// deleted) under its lock, so the run starts from scratch; the fresh run
/// then clears the sink folders. A log another coordinator holds is not
/// touched ([`JobError::Log`]). With high availability the leadership's
/// `fence` guards it instead of the lock (a deposed leader may still hold
/// the lock, as in [`crate::events::FileStorage::open_for_writing_fenced`]).
fn discard_log(
    config: &JobConfig,
    data_dir: &Path,
    fence: Option<&dyn crate::events::Fence>,
) -> Result<(), JobError> {
    let log_dir = job_log_dir(data_dir, &config.name)?;
    if !log_dir.is_dir() {
        return Ok(());
    }
    let lock = match fence {
        None => Some(crate::events::LogLock::acquire(&log_dir)?),
        Some(fence) => {
            fence.verify().map_err(|e| JobError::LostLeadership {
                reason: e.to_string(),
            })?;
            None
        }
    };
    let aside = set_aside_as(&log_dir, "discarded")?;
    drop(lock);
    tracing::warn!(
        "--fresh: the job's event log is set aside at {}; the job runs from scratch",
        aside.display()
    );
    Ok(())
}

/// Opens the log; a damaged one is set aside (never deleted) and a new one
/// started, unless committed sink output would be duplicated.
fn open_log(
    config: &JobConfig,
    data_dir: &Path,
    fence: Option<&Arc<dyn crate::events::Fence>>,
    found: Option<crate::events::UnlockedReplay>,
) -> Result<(crate::events::EventLogWriter, Replay), JobError> {
    let open = |found| {
        crate::events::open_job_log_after(
            data_dir,
            &config.name,
            WriterOptions::default(),
            fence.cloned(),
            found,
        )
    };
    match open(found) {
        Ok(opened) => Ok(opened),
        // Only damage is set aside: a log written by a newer coordhost is
        // intact and refused (`refuse_if_edited` already did, before this).
        Err(e @ EventsError::Corrupt { .. }) => {
            let reason = format!("the job event log cannot be replayed: {e}");
            refuse_if_committed(config, &reason)?;
            let log_dir = job_log_dir(data_dir, &config.name)?;
            let aside = set_aside(&log_dir)?;
            tracing::error!(
                "{reason}; it is kept at {} and the job runs again from scratch",
                aside.display()
            );
            Ok(open(None)?)
        }
        Err(e) => Err(e.into()),
    }
}

fn set_aside(log_dir: &Path) -> Result<PathBuf, JobError> {
    set_aside_as(log_dir, "damaged")
}

/// Renames the log folder to `log.<why>-<nanoseconds since the Unix epoch>`
/// beside it (`why`: `damaged`, `replaced`, `discarded`). The one place a
/// log is set aside, in one unit: nanoseconds, so two set-asides never
/// collide (docs/recovery.md, "Set-aside logs").
fn set_aside_as(log_dir: &Path, why: &str) -> Result<PathBuf, JobError> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let aside = log_dir.with_file_name(format!("log.{why}-{stamp}"));
    std::fs::rename(log_dir, &aside).map_err(|source| JobError::Io {
        path: log_dir.to_path_buf(),
        source,
    })?;
    Ok(aside)
}

/// Recovers into `master` and records `RecoveryStarted` / `RecoveryFinished`.
fn recover(
    master: &mut JobMaster,
    config: &JobConfig,
    replay: &mut Replay,
    storage: &dyn crate::events::Storage,
    recorder: &mut EventRecorder,
) -> Result<(), JobError> {
    let replayed_records = replay.events.len() as u64;
    let torn_tail_bytes = replay.torn_tail.as_ref().map_or(0, |t| t.bytes_dropped);
    // The current run, in place (issue 29: no copy of the event list).
    let run = crate::recovery::current_run_mut(&mut replay.events);
    // The newest snapshots' side files, verified (size, CRC32C).
    crate::events::load_snapshot_files(storage, run)?;
    // Recovery takes the current run's events and drops them before the
    // partition question (`recover_owned`); what came before it goes now.
    let run_len = run.len();
    let earlier = replay.events.len() - run_len;
    let mut events = std::mem::take(&mut replay.events);
    events.drain(..earlier);
    let started = JobEvent::RecoveryStarted(RecoveryStarted {
        coordinator_epoch: recorder.epoch(),
        replayed_records,
        torn_tail_bytes,
    });
    recorder.append(&started)?;
    master.crash_point("recovery-started", recorder)?;
    let deciding = std::time::Instant::now();
    let plan = recover_into(master, config, events, recorder)?;
    let decided = deciding.elapsed();
    master.crash_point("recovery-applied", recorder)?;
    // Consumers initialized from now on read these vertices' partitions.
    for (v, init) in &plan.initialized {
        recorder.note_initialized(&config.graph.vertices[*v].id, init.parallelism);
    }
    recorder.append_recovery_finished(&plan.decision(&config.graph), || {
        JobEvent::RecoveryFinished(plan.finished_event(&config.graph))
    })?;
    master.crash_point("recovery-finished", recorder)?;
    tracing::info!(
        skipped = plan.kept.len(),
        reset = plan.reset.len(),
        decision_ms = decided.as_secs_f64() * 1e3,
        "recovered from the job event log"
    );
    Ok(())
}

/// FLIP-383 recovery into a fresh `master` from the current run's
/// `events`: [`crate::recovery::recover_owned`] (docs/recovery.md steps
/// 1–7; the events are dropped once steps 1–5 have taken what they need)
/// with the driver's `Restore` target, whose resets go to `sink`.
///
/// # Errors
///
/// [`JobError::Recovery`] when the log does not fit the job or the shuffle
/// master cannot answer; [`JobError::Plugin`] when the shuffle master
/// cannot be restored. The master must then not be run.
pub fn recover_into<E: AsRef<JobEvent> + Into<JobEvent>>(
    master: &mut JobMaster,
    config: &JobConfig,
    events: Vec<E>,
    sink: &mut dyn JobEventSink,
) -> Result<RecoveryPlan, JobError> {
    let mut target = Restore {
        supports: master.sources_supporting_snapshots(),
        master,
        sink,
        oracle: ShuffleOracle::new(
            &config.name,
            &config.graph,
            config.recovery.previous_worker_timeout,
        ),
        previous_worker_timeout: config.recovery.previous_worker_timeout,
        asked: 0,
        asking: std::time::Duration::ZERO,
        looked_outside: false,
    };
    // The events are dropped inside, before the partition question.
    let plan = crate::recovery::recover_owned(&config.graph, events, &mut target)?;
    // For the scale bench (docs/recovery.md, "Figures"): the share of the
    // decision spent asking which partitions survive.
    tracing::info!(
        partitions = target.asked,
        calls = target.oracle.calls(),
        partitions_ms = target.asking.as_secs_f64() * 1e3,
        "partition question answered"
    );
    Ok(plan)
}

/// What a recovery restores into: the fresh JobMaster, its shuffle master
/// asked through a [`ShuffleOracle`], and the event sink its resets go to.
struct Restore<'a> {
    master: &'a mut JobMaster,
    sink: &'a mut dyn JobEventSink,
    oracle: ShuffleOracle<'a>,
    /// Per job vertex: a source whose enumerator supports batch snapshots.
    supports: Vec<bool>,
    /// How long recovery waits for partitions to be reported.
    previous_worker_timeout: std::time::Duration,
    /// Partitions asked about, over every round.
    asked: usize,
    /// Time spent answering them, over every round.
    asking: std::time::Duration,
    /// Whether the first round's partitions were looked at for places
    /// outside the shuffle master's grants ([`Restore::warn_outside_grants`]:
    /// once per recovery, not on every round).
    looked_outside: bool,
}

impl PartitionOracle for Restore<'_> {
    fn available(
        &mut self,
        needed: &[PartitionRef],
    ) -> Result<Vec<bool>, crate::recovery::OracleError> {
        let started = std::time::Instant::now();
        let answer = self.answer(needed);
        self.asked += needed.len();
        self.asking += started.elapsed();
        Ok(answer?)
    }
}

/// How many of `answer` are `true`.
fn count(answer: &[bool]) -> usize {
    answer.iter().filter(|&&a| a).count()
}

impl Restore<'_> {
    /// [`PartitionOracle::available`], untimed: whether each of `needed`
    /// survives, in order.
    fn answer(&mut self, needed: &[PartitionRef]) -> Result<Vec<bool>, crate::plugin::PluginError> {
        let Some(cluster) = self.master.external_cluster() else {
            return self.oracle.ask(self.master.shuffle_master(), needed);
        };
        // Partitions in object storage (docs/object-storage.md, "Result
        // partitions on objects") are held by no worker: the shuffle master
        // answers for them from the store, as in embedded mode, and the
        // consumer's reader checks producer and sizes against the log's
        // record before a byte is used. Looked at without a copy first:
        // recoveries of local partitions at scale have none.
        if needed
            .iter()
            .any(|p| crate::shuffle::is_object_location(&p.location))
        {
            let (objects, local): (Vec<usize>, Vec<usize>) = (0..needed.len())
                .partition(|&i| crate::shuffle::is_object_location(&needed[i].location));
            let of = |at: &[usize]| -> Vec<PartitionRef> {
                at.iter().map(|&i| needed[i].clone()).collect()
            };
            let mut answer = vec![false; needed.len()];
            let found = self
                .oracle
                .ask(self.master.shuffle_master(), &of(&objects))?;
            tracing::info!(
                found = count(&found),
                needed = objects.len(),
                "partitions in object storage, as the shuffle master answered"
            );
            for (&i, there) in objects.iter().zip(found) {
                answer[i] = there;
            }
            if !local.is_empty() {
                let found = self.answer_from_workers(&cluster, &of(&local))?;
                for (&i, there) in local.iter().zip(found) {
                    answer[i] = there;
                }
            }
            return Ok(answer);
        }
        self.answer_from_workers(&cluster, needed)
    }

    /// [`Restore::answer`] with worker processes, for partitions on the
    /// workers' disks: what a live worker holds as the log recorded.
    fn answer_from_workers(
        &mut self,
        cluster: &std::sync::Arc<crate::remote::Cluster>,
        needed: &[PartitionRef],
    ) -> Result<Vec<bool>, crate::plugin::PluginError> {
        self.warn_outside_grants(needed);
        let shuffle = self.master.shuffle_master();
        let grants = shuffle.grants().clone();
        if !shuffle.reads_worker_reports() {
            // A shuffle master of WIT 0.1.0 cannot see the workers: the host
            // answers from their reports itself (docs/workers.md).
            return Ok(reported_by_workers(
                cluster,
                &grants,
                needed,
                self.previous_worker_timeout,
            ));
        }
        // WIT 0.1.1: the shuffle master answers from the reports it reads
        // through `job-shuffle-context` (set by the JobMaster), waiting as
        // in embedded mode; the host then keeps only what a live worker
        // holds as the log recorded. The plugin's word alone never sends a
        // consumer to a worker.
        let answered = self.oracle.ask(shuffle, needed)?;
        let (held, holders) = held_by_workers(cluster, &grants, needed, &answered);
        let mut unheld = (0..needed.len()).filter(|&i| answered[i] && !held[i]);
        if let Some(first) = unheld.next().map(|i| &needed[i]) {
            tracing::warn!(
                plugin = shuffle.name(),
                "the shuffle master reports {} partition(s) that no live worker holds as the log recorded (the first at {}, subtask {} attempt {}); they count as missing",
                1 + unheld.count(),
                first.location.display(),
                first.subtask,
                first.attempt
            );
        }
        for (attempt, worker) in holders {
            cluster.adopt(attempt, &worker);
        }
        tracing::info!(
            found = count(&held),
            needed = needed.len(),
            plugin = shuffle.name(),
            "partitions reported by workers, as the shuffle master answered"
        );
        Ok(held)
    }
}

/// With worker processes and a shuffle master of WIT 0.1.0, whether each of
/// `needed` survives: those a worker that outlived the previous
/// coordinator reported holding at registration ([`held_by_workers`]). The
/// host plays FLIP-383's job shuffle context and the shuffle master here:
/// the workers' reports are the answer, checked against the coordinator's
/// own durable record (docs/workers.md). Waits at most `wait` (the
/// previous-worker timeout) for more workers to report, ending as soon as
/// every needed partition is.
fn reported_by_workers(
    cluster: &crate::remote::Cluster,
    grants: &crate::grant::Grants,
    needed: &[PartitionRef],
    wait: std::time::Duration,
) -> Vec<bool> {
    let deadline = std::time::Instant::now() + wait;
    let every = vec![true; needed.len()];
    loop {
        let (found, holders) = held_by_workers(cluster, grants, needed, &every);
        let held = count(&found);
        if held == needed.len() || std::time::Instant::now() >= deadline {
            for (attempt, worker) in holders {
                cluster.adopt(attempt, &worker);
            }
            tracing::info!(
                found = held,
                needed = needed.len(),
                "partitions reported by workers"
            );
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Whether a live worker reports holding each of `candidates` (those
/// `considered`, the others `false`) with the producer attempt, edge, place
/// (the shuffle master's location relative to its grant) and bytes per
/// subpartition the log recorded, and which worker holds each.
fn held_by_workers(
    cluster: &crate::remote::Cluster,
    grants: &crate::grant::Grants,
    candidates: &[PartitionRef],
    considered: &[bool],
) -> (Vec<bool>, Vec<(crate::graph::AttemptId, String)>) {
    let reports = cluster.reported_partitions();
    // Reports by (producer attempt, edge), built once: looking each
    // candidate up in the whole list was quadratic (issue 29: 100 000
    // partitions on workers meant 10^10 comparisons per round).
    let mut by_producer: std::collections::HashMap<(crate::graph::AttemptId, usize), Vec<usize>> =
        std::collections::HashMap::with_capacity(reports.len());
    for (i, (_, attempt, edge, ..)) in reports.iter().enumerate() {
        by_producer.entry((*attempt, *edge)).or_default().push(i);
    }
    let mut found = vec![false; candidates.len()];
    let mut holders = Vec::new();
    for (i, p) in candidates.iter().enumerate() {
        if !considered[i] {
            continue;
        }
        let Ok(dir) = grants.writable_dir(&p.location) else {
            continue;
        };
        let attempt = crate::graph::AttemptId {
            vertex: p.vertex,
            subtask: p.subtask,
            attempt: p.attempt,
        };
        let held = by_producer
            .get(&(attempt, p.edge))
            .into_iter()
            .flatten()
            .map(|&i| &reports[i])
            .find(|(_, _, _, location, bytes)| {
                location.as_path() == dir.relative() && bytes.to_vec() == p.bytes_per_subpartition
            });
        if let Some((worker, ..)) = held {
            found[i] = true;
            holders.push((attempt, worker.clone()));
        }
    }
    (found, holders)
}

impl Restore<'_> {
    /// With worker processes, warns when partitions of the first round's
    /// `needed` were recorded outside the shuffle master's writable grants
    /// (looked at once per recovery: a coordinator on another data
    /// directory finds every recorded place outside, in the first round
    /// already): none of them
    /// can count as surviving ([`held_by_workers`] derives no worker place
    /// from a location outside the grants), so their producers run again. The
    /// usual cause is a coordinator on another data directory than the one
    /// that recorded them with a shuffle root under `${data_dir}`.
    fn warn_outside_grants(&mut self, needed: &[PartitionRef]) {
        if std::mem::replace(&mut self.looked_outside, true) {
            return;
        }
        let grants = self.master.shuffle_master().grants();
        let outside: Vec<&PartitionRef> = needed
            .iter()
            .filter(|p| {
                !crate::shuffle::is_object_location(&p.location)
                    && grants.writable_dir(&p.location).is_err()
            })
            .collect();
        if let Some(first) = outside.first() {
            tracing::warn!(
                "{} recorded partition(s) lie outside the shuffle master's writable grants (the first at {}); they count as missing and their producers run again. A coordinator on another data directory than the one that recorded them finds no partition when the shuffle root is under ${{data_dir}}: give the shuffle master a root (and grant) at a fixed path, the same on every coordinator (docs/object-storage.md, \"High availability\")",
                outside.len(),
                first.location.display()
            );
        }
    }
}

impl RecoveryTarget for Restore<'_> {
    type Error = JobError;

    fn restore_shuffle_master(&mut self, snapshots: &[&ShuffleSnapshot]) -> Result<(), JobError> {
        self.master.restore_shuffle_master(
            snapshots
                .iter()
                .map(|s| ShuffleMasterSnapshot {
                    incremental: s.incremental,
                    data: s.data.clone(),
                })
                .collect(),
        )
    }

    fn supports_batch_snapshot(&self, vertex: usize) -> bool {
        self.supports.get(vertex).copied().unwrap_or(false)
    }

    fn restore_enumerator(
        &mut self,
        vertex: usize,
        snapshot: crate::coordinator::CoordinatorSnapshot,
    ) -> Result<bool, JobError> {
        match self.master.restore_coordinator(vertex, snapshot) {
            Ok(()) => Ok(true),
            // The plugin's `restore` or `start` failed (an error value or a
            // trap): the source starts over with a fresh enumerator, and
            // the rest of the job keeps its finished work (docs/recovery.md
            // step 5).
            Err(JobError::Coordinator(
                e @ (crate::coordinator::CoordinatorError::Plugin { .. }
                | crate::coordinator::CoordinatorError::FaultedAgain { .. }),
            )) => {
                tracing::warn!(
                    plugin = self.master.source_plugin(vertex).unwrap_or("?"),
                    "recovery: {e}; the source starts over with a fresh split enumerator, and what read its output runs again"
                );
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn apply(&mut self, plan: &mut RecoveryPlan) -> Result<(), JobError> {
        self.master.apply_recovery(plan, self.sink)
    }
}

use crate::recovery::current_run;

fn last_job_started(replay: &Replay) -> Option<&JobStarted> {
    replay.events.iter().rev().find_map(|e| match &e.event {
        JobEvent::JobStarted(s) => Some(s),
        _ => None,
    })
}

/// After a failed recovery with committed sink output: a log that does not
/// fit the job is refused for good ([`JobError::WouldDuplicate`]); any other
/// failure (a plugin that could not be restored or asked) leaves the intact
/// log as it is and says the next run tries again
/// ([`JobError::RecoveryRetryLater`], docs/recovery.md "When recovery gives up").
fn refuse_if_committed_after(config: &JobConfig, e: &JobError) -> Result<(), JobError> {
    let reason = format!("recovery failed: {e}");
    let log_does_not_fit = matches!(
        e,
        JobError::Recovery {
            source: crate::recovery::RecoveryError::UnknownVertex { .. }
                | crate::recovery::RecoveryError::UnknownDataSet { .. }
                | crate::recovery::RecoveryError::Inconsistent { .. }
                | crate::recovery::RecoveryError::Split { .. }
        }
    );
    match refuse_if_committed(config, &reason) {
        Err(JobError::WouldDuplicate { output, .. }) if !log_does_not_fit => {
            Err(JobError::RecoveryRetryLater {
                reason: match e {
                    JobError::Recovery { source } => source.to_string(),
                    other => other.to_string(),
                },
                output,
            })
        }
        other => other,
    }
}

/// docs/recovery.md step 8: a full re-run is refused when committed sink output
/// exists that it would duplicate.
fn refuse_if_committed(config: &JobConfig, reason: &str) -> Result<(), JobError> {
    for v in &config.graph.vertices {
        let Some(sink) = &v.sink else { continue };
        let committed = published_files(sink)
            .iter()
            .any(|name| name.starts_with("part-"));
        if committed {
            return Err(JobError::WouldDuplicate {
                reason: reason.to_string(),
                output: crate::runtime::sink::output_name(sink),
            });
        }
    }
    Ok(())
}
