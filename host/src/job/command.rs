//! `coordhost run`: the command-line face of [`super::run_job`] with a
//! progress bar per job vertex on a terminal (plain lines otherwise), a
//! final summary, and the JSON summary file.
//!
//! Exit codes: 0 the job finished; 1 the job failed while running (a task
//! ran out of attempts, a plugin call failed, output could not be
//! published, its own storage failed); 2 bad input (the job file, a
//! component, the data directory); the rule is [`super::exit`].

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use super::exit::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, exit_code};
use super::progress::{Bars, Lines};
use super::run_job;
use crate::scheduler::{JobStatus, ProgressListener, RunOptions, StopReason, StopRequest, Summary};

/// Arguments of `coordhost run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The job file (TOML; see docs/job-file.md).
    pub job: PathBuf,
    /// Directory for the job's state: event log, partitions, output.
    #[arg(long, value_name = "DIR", default_value = "coordhost-data")]
    pub data_dir: PathBuf,
    /// Also write the final summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
    /// Worker threads (default: `job.workers`, else one per core).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Discard what the data directory holds for this job (its event log is
    /// set aside, published output removed) and run it from scratch. With
    /// `--ha`: once this coordinator leads, and only if no other
    /// coordinator started the job afresh since this one started (the way
    /// to run a failed job again, docs/ha.md).
    #[arg(long)]
    pub fresh: bool,
    /// Go on with a job that was cancelled (`coordhost cancel`) from where
    /// it stopped, and withdraw a cancel request not yet acted on.
    #[arg(long, conflicts_with = "fresh")]
    pub resume: bool,
    /// Keep the job's event log on S3-compatible object storage under
    /// `s3://BUCKET/PREFIX` instead of the data directory; endpoint,
    /// region and credentials come from the `AWS_*` variables
    /// (docs/object-storage.md).
    /// Overrides the job file's `[job] log`.
    #[arg(long, value_name = "s3://BUCKET/PREFIX")]
    pub log: Option<String>,
    /// How long a write to an event log on object storage keeps trying
    /// through a store that is unreachable or answers with server errors
    /// (pauses doubling from 0.25 s to 4 s) before the run fails, whole
    /// seconds.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub log_retry_s: u64,
    /// Serve worker processes on HOST:PORT (their `--coordinator`); with
    /// `--external-workers`, attempts run on them (docs/workers.md).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// Run the attempts on N worker processes (`coordhost worker`) instead
    /// of threads of this process; waits for N to register.
    #[arg(long, value_name = "N", requires = "listen")]
    pub external_workers: Option<usize>,
    /// Longest wait for the external workers to register, ms.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub worker_wait_ms: u64,
    /// A worker without a heartbeat for this long is lost (and a worker
    /// gives the coordinator up after as long), ms.
    #[arg(long, value_name = "MS", default_value_t = 2_000)]
    pub heartbeat_timeout_ms: u64,
    /// High availability: campaign through etcd for the leadership of the
    /// job, wait as a standby while another coordinator leads, and run (or
    /// recover) the job once elected (docs/ha.md). Every coordinator of the
    /// job must see the same `--data-dir`.
    #[arg(long, value_name = "etcd[s]://HOST:PORT[,HOST:PORT...]")]
    pub ha: Option<String>,
    /// Time to live of the leader's etcd lease, whole seconds (at least 1):
    /// a leader that dies or is cut off is replaced after about this long.
    #[arg(long, value_name = "S", default_value_t = 3, requires = "ha")]
    pub ha_lease_ttl_s: u64,
    /// Mutual TLS with the workers (docs/workers.md, "Security"); the
    /// flags override the job file's `[cluster] tls` table.
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    /// TLS and user authentication to etcd (docs/ha.md, "Security").
    #[command(flatten)]
    pub etcd: crate::ha::EtcdArgs,
    /// The job's web page, API and metrics (docs/ui.md).
    #[command(flatten)]
    pub ui: super::ui::UiArgs,
}

/// Runs `coordhost run`; returns the exit code.
pub fn run_command(args: &RunArgs, cache_dir: Option<PathBuf>) -> ExitCode {
    if let Err(e) = crate::config::check_arguments(args.workers, args.summary_json.as_deref()) {
        coordhost_io::stderr_line!("coordhost: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let mut opts = match run_options(args, cache_dir) {
        Ok(opts) => opts,
        Err(code) => return code,
    };
    let stop = Arc::new(StopRequest::default());
    if let Err(e) = stop_on_signals(stop.clone()) {
        coordhost_io::stderr_line!("coordhost: cannot watch for SIGINT and SIGTERM: {e}");
        return ExitCode::from(EXIT_FAILED);
    }
    opts.stop = Some(stop.clone());
    let progress: Arc<dyn ProgressListener> = if std::io::stderr().is_terminal() {
        Arc::new(Bars::default())
    } else {
        Arc::new(Lines::default())
    };
    opts.progress = Some(progress);
    let live = match super::ui::start(&args.ui, &mut opts) {
        Ok(live) => live,
        Err(line) => {
            coordhost_io::stderr_line!("coordhost: {line}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let (cluster, job_name) = match args.external_workers.map(|n| start_cluster(args, n)) {
        None => (None, String::new()),
        Some(Ok((cluster, job))) => (Some(Arc::new(cluster)), job),
        Some(Err((code, line))) => {
            coordhost_io::stderr_line!("coordhost: {line}");
            return ExitCode::from(code);
        }
    };
    // High availability: lead before touching the log or any worker.
    let _leadership = match &args.ha {
        None => None,
        Some(url) => match lead(args, url, cluster.as_deref(), live.as_ref()) {
            Ok((leadership, fresh_if_last_started)) => {
                opts.fresh_if_last_started = fresh_if_last_started;
                opts.fence = Some(leadership.fence());
                opts.leader = Some(crate::events::LeaderElected {
                    term: leadership.term(),
                    etcd: url.clone(),
                    address: cluster
                        .as_ref()
                        .map(|c| c.local_addr().to_string())
                        .unwrap_or_default(),
                });
                Some(leadership)
            }
            Err((code, line)) => {
                coordhost_io::stderr_line!("coordhost: {line}");
                return ExitCode::from(code);
            }
        },
    };
    if let (Some(cluster), Some(n)) = (&cluster, args.external_workers)
        && let Err(e) =
            cluster.wait_for_workers(n, std::time::Duration::from_millis(args.worker_wait_ms))
    {
        cluster.goodbye(&job_name, crate::rpc::JobEnd::Failed);
        coordhost_io::stderr_line!("coordhost: {e}");
        return ExitCode::from(EXIT_FAILED);
    }
    if let (Some(cluster), Some(live)) = (&cluster, &live) {
        super::ui::watch_heartbeats(live, cluster);
    }
    opts.external = cluster.clone();
    let result = run_job(&opts);
    if let Some(cluster) = &cluster {
        // The job is over and nothing more is asked of the workers: they
        // are told so before this process exits (issue 31).
        cluster.goodbye(
            result.as_ref().map_or(&job_name, |s| &s.job),
            job_end(&result),
        );
    }
    let code = report(args, result.as_ref(), stop.requested());
    super::ui::finish(&args.ui, live.as_deref(), &result);
    code
}

/// The run's options from its arguments (all but signals, progress, the
/// page, the cluster and the leadership, which need starting).
///
/// # Errors
/// The exit code of bad input, once its line is printed.
fn run_options(args: &RunArgs, cache_dir: Option<PathBuf>) -> Result<RunOptions, ExitCode> {
    let mut opts = RunOptions::new(&args.job, &args.data_dir);
    if let Some(log) = &args.log {
        match crate::events::ObjectLogUrl::parse(log) {
            Ok(url) => opts.log = Some(url),
            Err(reason) => {
                coordhost_io::stderr_line!("coordhost: --log: {reason}");
                return Err(ExitCode::from(EXIT_BAD_INPUT));
            }
        }
    }
    opts.log_retry = std::time::Duration::from_secs(args.log_retry_s);
    opts.workers = args.workers;
    opts.fresh = args.fresh;
    opts.resume = args.resume;
    opts.cache_dir = cache_dir;
    Ok(opts)
}

/// How the job ended, as its workers are told (`Goodbye`).
fn job_end(result: &Result<Summary, crate::scheduler::JobError>) -> crate::rpc::JobEnd {
    match result {
        Ok(s) => match s.status {
            JobStatus::Finished => crate::rpc::JobEnd::Finished,
            JobStatus::Failed => crate::rpc::JobEnd::Failed,
            JobStatus::Stopped => crate::rpc::JobEnd::Stopped,
            JobStatus::Cancelled => crate::rpc::JobEnd::Cancelled,
        },
        Err(
            crate::scheduler::JobError::Cancelled { .. }
            | crate::scheduler::JobError::CancelledEarlier { .. },
        ) => crate::rpc::JobEnd::Cancelled,
        Err(_) => crate::rpc::JobEnd::Failed,
    }
}

/// Prints the end of a run (summary, `--summary-json`, error) and returns
/// its exit code.
fn report(
    args: &RunArgs,
    result: Result<&Summary, &crate::scheduler::JobError>,
    stopped_by: Option<StopReason>,
) -> ExitCode {
    match result {
        Ok(summary) => {
            print_summary(summary);
            if let Some(path) = &args.summary_json {
                let written = serde_json::to_vec_pretty(summary)
                    .map_err(std::io::Error::from)
                    .and_then(|bytes| std::fs::write(path, bytes));
                if let Err(e) = written {
                    coordhost_io::stderr_line!(
                        "coordhost: {}: cannot write the summary: {e}",
                        path.display()
                    );
                    return ExitCode::from(EXIT_FAILED);
                }
            }
            match summary.status {
                JobStatus::Finished => ExitCode::from(EXIT_OK),
                JobStatus::Failed => {
                    coordhost_io::stderr_line!(
                        "coordhost: {}",
                        summary.error.as_deref().unwrap_or("the job failed")
                    );
                    ExitCode::from(if summary.bad_input {
                        EXIT_BAD_INPUT
                    } else {
                        EXIT_FAILED
                    })
                }
                JobStatus::Stopped | JobStatus::Cancelled => {
                    coordhost_io::stderr_line!(
                        "coordhost: {}",
                        summary.error.as_deref().unwrap_or("stopped")
                    );
                    ExitCode::from(match (summary.status, stopped_by) {
                        (JobStatus::Stopped, Some(StopReason::Signal(n))) => {
                            super::exit::exit_stopped(n)
                        }
                        (JobStatus::Cancelled, _) => super::exit::EXIT_CANCELLED,
                        _ => EXIT_FAILED,
                    })
                }
            }
        }
        Err(e) => {
            coordhost_io::stderr_line!("coordhost: {}", crate::config::one_line(&e.to_string()));
            ExitCode::from(exit_code(e))
        }
    }
}

/// SIGINT and SIGTERM stop the run cleanly: while the JobMaster's loop
/// runs, the first one asks it to stop ([`StopRequest`]: its attempts end,
/// nothing more is recorded, partitions are kept) and the run ends with
/// exit 128 + N and a line saying how to resume; a second one, or one
/// before or after the loop (planning, recovery, a campaign), ends the
/// process at once, which the event log survives as it survives a crash.
fn stop_on_signals(stop: Arc<StopRequest>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let name = crate::scheduler::signal_name(signal);
                if stop.accepting() && stop.request(StopReason::Signal(signal)) {
                    coordhost_io::stderr_line!(
                        "coordhost: {name}: stopping the job's attempts (again to stop at once)"
                    );
                    continue;
                }
                coordhost_io::stderr_line!(
                    "coordhost: stopped by {name}: what finished is kept in the event log; run the same command again to resume the job"
                );
                std::process::exit(i32::from(super::exit::exit_stopped(signal)));
            }
        })?;
    Ok(())
}

/// Serves workers on `--listen`; returns the cluster and the job's name.
fn start_cluster(
    args: &RunArgs,
    n: usize,
) -> Result<(crate::remote::Cluster, String), (u8, String)> {
    if n == 0 {
        return Err((EXIT_BAD_INPUT, "--external-workers: at least 1".into()));
    }
    if args.heartbeat_timeout_ms < 100 {
        return Err((
            EXIT_BAD_INPUT,
            "--heartbeat-timeout-ms: at least 100".into(),
        ));
    }
    let listen = args.listen.clone().unwrap_or_default();
    // The job file is read first: its `[cluster] tls` table is the
    // alternative to the flags (which override it), and a coordinator's
    // certificate must name the job.
    let job = crate::config::load_job(
        &args.job,
        &crate::config::LoadOptions {
            data_dir: args.data_dir.clone(),
            cache_dir: None,
            log_on_objects: args.log.is_some(),
        },
    )
    .map_err(|e| (EXIT_BAD_INPUT, crate::config::one_line(&e.to_string())))?;
    let files = args.tls.files().or(job.tls);
    args.tls
        .check_listen(&listen, files.is_some())
        .map_err(|e| (EXIT_BAD_INPUT, e))?;
    let tls = match files {
        Some(files) => Some(
            crate::tls::ClusterTls::coordinator(&files, &job.name)
                .map_err(|e| (EXIT_BAD_INPUT, crate::config::one_line(&e.to_string())))?,
        ),
        None => None,
    };
    let mut options = crate::remote::ClusterOptions::new(listen);
    options.tls = tls;
    options.heartbeat_timeout = std::time::Duration::from_millis(args.heartbeat_timeout_ms);
    options.heartbeat_interval = options.heartbeat_timeout / 10;
    options.standby = args.ha.is_some();
    let cluster = crate::remote::Cluster::start(options).map_err(|e| (EXIT_BAD_INPUT, e))?;
    coordhost_io::stderr_line!(
        "coordhost run: serving workers on {}; waiting for {n}",
        cluster.local_addr()
    );
    Ok((cluster, job.name))
}

/// What [`lead`] returns: the leadership, and with `--fresh` where the
/// log's last `JobStarted` was before the campaign
/// ([`RunOptions::fresh_if_last_started`]).
type Led = (
    crate::ha::Leadership,
    Option<Option<crate::scheduler::LastJobStarted>>,
);

/// `--ha`: campaigns for the leadership of the job (blocking while another
/// coordinator leads) and returns it; the cluster, if any, then serves
/// workers with the term as its session. Losing the leadership later ends
/// the process at once (exit 1), before it writes or commands anything
/// more.
fn lead(
    args: &RunArgs,
    url: &str,
    cluster: Option<&crate::remote::Cluster>,
    live: Option<&Arc<crate::ui::LiveJob>>,
) -> Result<Led, (u8, String)> {
    let security = args.etcd.security().map_err(|e| (EXIT_BAD_INPUT, e))?;
    let etcd = crate::ha::EtcdUrl::parse(url)
        .and_then(|u| u.with_security(security))
        .map_err(|e| (EXIT_BAD_INPUT, format!("--ha: {e}")))?;
    if !etcd.path.is_empty() {
        return Err((
            EXIT_BAD_INPUT,
            format!(
                "--ha: `{url}`: a coordinator takes etcd://HOST:PORT without a path (the election is named after the job)"
            ),
        ));
    }
    if args.ha_lease_ttl_s == 0 {
        return Err((EXIT_BAD_INPUT, "--ha-lease-ttl-s: at least 1".into()));
    }
    let job = crate::config::load_job(
        &args.job,
        &crate::config::LoadOptions {
            data_dir: args.data_dir.clone(),
            cache_dir: None,
            log_on_objects: args.log.is_some(),
        },
    )
    .map_err(|e| (EXIT_BAD_INPUT, crate::config::one_line(&e.to_string())))?;
    // The log on object storage (`--log` wins over the job file's
    // `[job] log`), where `--fresh` looks for the run it replaces.
    let objects = match &args.log {
        Some(log) => Some(
            crate::events::ObjectLogUrl::parse(log)
                .map_err(|e| (EXIT_BAD_INPUT, format!("--log: {e}")))?,
        ),
        None => job.log.clone(),
    };
    let job = job.name;
    // Noted before the campaign: `--fresh` discards only the run this
    // coordinator was started to replace.
    let fresh_if_last_started = args
        .fresh
        .then(|| super::driver::last_job_started_at(&args.data_dir, &job, objects.as_ref()));
    let options = crate::ha::CampaignOptions {
        etcd: etcd.clone(),
        job: job.clone(),
        ttl: std::time::Duration::from_secs(args.ha_lease_ttl_s),
        address: cluster
            .map(|c| c.local_addr().to_string())
            .unwrap_or_default(),
    };
    let lost_job = job.clone();
    // `--ui`: the page says who leads while this one waits.
    let watch = live.map(|live| super::ui::watch_leader(live.clone(), etcd.clone(), job.clone()));
    let leadership = crate::ha::campaign(
        &options,
        |term, address| {
            if let Some(live) = live {
                live.standby(&job, super::ui::standby_view(term, address, &etcd));
            }
            let who = if address.is_empty() {
                "another coordinator".to_owned()
            } else {
                format!("the coordinator serving workers at {address}")
            };
            coordhost_io::stderr_line!(
                "coordhost run: standby for job `{job}`: {who} leads (term {term}); waiting ({etcd})"
            );
        },
        move |term| {
            // The one place a deposed leader ends: at once, so that it
            // neither writes, nor publishes, nor commands a worker again.
            coordhost_io::stderr_line!(
                "coordhost: lost the leadership of job `{lost_job}` (term {term}): another coordinator may lead it now; stopping"
            );
            std::process::exit(i32::from(EXIT_FAILED));
        },
    )
    .map_err(|e| (EXIT_FAILED, format!("--ha: {e}")))?;
    if let Some(live) = live {
        live.leading();
    }
    drop(watch);
    coordhost_io::stderr_line!(
        "coordhost run: leading job `{job}` (term {}, {etcd})",
        leadership.term()
    );
    if let Some(cluster) = cluster {
        cluster.lead(leadership.term(), leadership.fence());
    }
    Ok((leadership, fresh_if_last_started))
}

fn print_summary(s: &Summary) {
    let mut out = std::io::stdout().lock();
    let _ignored = (|| -> std::io::Result<()> {
        writeln!(
            out,
            "job {}: {:?} in {} ms on {} workers",
            s.job, s.status, s.wall_ms, s.workers
        )?;
        for v in &s.vertices {
            if v.parallelism == 0 {
                // Parallelism is decided when a job vertex initialises
                // (at least 1): 0 means the job ended before that.
                writeln!(out, "  {:<16} not started", v.id)?;
                continue;
            }
            writeln!(
                out,
                "  {:<16} parallelism {:>3}  records in {:>10}  out {:>10}  partition bytes {:>12}{}",
                v.id,
                v.parallelism,
                v.records_in,
                v.records_out,
                v.bytes_out,
                if v.skipped > 0 {
                    format!(
                        "  ({} skipped by recovery; figures count this run only)",
                        v.skipped
                    )
                } else {
                    String::new()
                }
            )?;
            // A source that read nothing says so (an empty folder or a
            // pattern that matches no file is the usual cause), instead of a
            // silent "Finished" with 0 records.
            // Not for a source whose every subtask recovery kept: it read
            // before, and this run asked its enumerator nothing.
            if let Some(i) = v.input
                && s.status == JobStatus::Finished
                && v.splits_assigned == 0
                && i.splits_kept == 0
                && v.skipped < u64::from(v.parallelism)
            {
                writeln!(
                    out,
                    "  {:<16} read no input: its split enumerator gave no split (an empty input folder, or a pattern that matches no file?)",
                    ""
                )?;
            }
            // After a recovery: what the crash cost a source in input.
            if let Some(i) = v.input.filter(|_| s.recovered) {
                writeln!(
                    out,
                    "  {:<16} input kept {} splits ({} bytes), read again {} splits ({} bytes); {} bytes handed out in this run",
                    "",
                    i.splits_kept,
                    i.bytes_kept,
                    i.splits_reread,
                    i.bytes_reread,
                    i.bytes_assigned
                )?;
            }
        }
        if s.default_shuffle {
            writeln!(
                out,
                "  shuffle: the built-in local shuffle master (builtin:local-shuffle, partitions under <data-dir>/shuffle): the job file has no [shuffle]"
            )?;
        }
        writeln!(
            out,
            "  tasks: {} total, {} attempts run, {} skipped, {} reset{}",
            s.tasks_total,
            s.tasks_run,
            s.tasks_skipped,
            s.tasks_reset,
            if s.recovered { " (recovered)" } else { "" }
        )?;
        if s.status != JobStatus::Finished {
            // Where each task ended, adding up to the total; `run` above
            // counts attempts (a retried task runs more than once).
            writeln!(
                out,
                "  tasks by end: {} finished, {} failed, {} stopped, {} not run (of {})",
                s.tasks_finished, s.tasks_failed, s.tasks_stopped, s.tasks_not_run, s.tasks_total
            )?;
        }
        for o in &s.outputs {
            writeln!(out, "  output: {}", o.display())?;
        }
        if s.outputs.is_empty() && s.status == JobStatus::Failed {
            writeln!(out, "  output: none")?;
        }
        Ok(())
    })();
}
