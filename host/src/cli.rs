//! The `coordhost` command line: `run`, `plugin check`, `log inspect`.
//!
//! Exit codes (also in the README) are defined once, in [`crate::job::exit`].

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::plugin::{HostOptions, PluginError, PluginHost, PluginInfo};

/// The exit codes, defined once in [`crate::job::exit`].
pub use crate::job::exit::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK};

/// A batch-job coordinator with WebAssembly plugins that recovers a job's
/// progress after a crash (FLIP-383).
#[derive(Debug, Parser)]
#[command(name = "coordhost", version, about)]
pub struct Cli {
    /// Directory of the compiled-component cache (default: $COORDHOST_CACHE_DIR,
    /// else $XDG_CACHE_HOME/coordhost, else ~/.cache/coordhost).
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a batch job from its job file (exit 0 finished, 1 failed, 2 bad
    /// input, 3 cancelled, 128 + N stopped by signal N: run it again to
    /// resume).
    Run(crate::job::RunArgs),
    /// Work with plugin components.
    Plugin {
        /// What to do with the plugin.
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Run a worker process (Flink's TaskManager) for a coordinator started
    /// with `run --listen HOST:PORT --external-workers N`; runs until killed
    /// (docs/workers.md).
    Worker(WorkerArgs),
    /// Work with a cluster of coordinators and workers.
    Cluster {
        /// What to do.
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Cancel a job: the coordinator running it stops its attempts,
    /// releases its partitions and records it as cancelled; a later `run`
    /// does not resume it unless asked (`--resume`). Exit 0 cancelled (or
    /// left for the next run when none runs it), 1 the coordinator did not
    /// stop in time, 2 no job log there or the job already finished.
    Cancel(crate::job::cancel::CancelArgs),
    /// Read a job's event log.
    Log {
        /// What to do with the log.
        #[command(subcommand)]
        command: LogCommand,
    },
}

/// Arguments of `coordhost worker`.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The coordinator's `--listen` address, or, with high availability,
    /// `etcd://HOST:PORT[,HOST:PORT...]/JOB`: whichever coordinator leads
    /// job JOB in etcd (docs/ha.md).
    #[arg(long, value_name = "HOST:PORT | etcd[s]://HOST:PORT/JOB")]
    pub coordinator: String,
    /// Where this worker keeps result partitions and staged sink output.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Attempts run at once (task slots).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub slots: usize,
    /// Where this worker serves its partitions (port 0: any free port).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// How long finished partitions are kept while no coordinator answers, ms.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub keep_partitions_ms: u64,
    /// Exit (code 0) once the job served has ended and no attempt runs:
    /// when its coordinator says goodbye, or, if it vanished without one,
    /// once no coordinator answered for --keep-partitions-ms after it was
    /// lost (docs/workers.md, "One-shot workers").
    #[arg(long)]
    pub exit_when_idle: bool,
    /// The worker's id (default `w-<pid>-<port>`; with TLS the one its
    /// certificate names, and an --id must be that one).
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,
    /// Mutual TLS with the coordinator and the other workers
    /// (docs/workers.md, "Security"); the flags override --config.
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    /// A TOML file with one `[cluster]` table: its `tls = { cert, key, ca
    /// }` names this worker's TLS files, paths relative to the file
    /// (docs/workers.md, "Security").
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TLS and user authentication to etcd, with `--coordinator
    /// etcds://...` (docs/ha.md, "Security").
    #[command(flatten)]
    pub etcd: crate::ha::EtcdArgs,
}

/// `coordhost cluster ...`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Make a CA and the certificates of a test cluster in DIR (an existing
    /// DIR/ca.pem + ca.key is reused, so one CA can sign several jobs):
    /// coordinator.pem/.key (`coordinator.JOB`), per worker ID.pem/.key
    /// (`ID.worker.JOB`), with --etcd-host etcd.pem/.key. Keys are 0600.
    Certs {
        /// Where the files go (created).
        dir: PathBuf,
        /// The job's name (`[job] name` of its job file).
        #[arg(long, value_name = "JOB")]
        job: String,
        /// Worker ids, comma separated (default w0,w1,w2).
        #[arg(
            long,
            value_name = "ID,...",
            value_delimiter = ',',
            default_value = "w0,w1,w2"
        )]
        workers: Vec<String>,
        /// A DNS name or IP address of an etcd server (repeatable): also
        /// make etcd.pem/.key, a server certificate for these names.
        #[arg(long, value_name = "HOST")]
        etcd_host: Vec<String>,
    },
}

/// `coordhost log ...`
#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Print every event of a job's log, with torn tail and segments.
    Inspect {
        /// The job's log folder, or the job's data folder that holds `log/`.
        dir: PathBuf,
        /// Print one JSON document instead of lines.
        #[arg(long)]
        json: bool,
        /// Draw the job graph as the log tells it (what the last recovery
        /// kept and reset, and why) into FILE as SVG instead (docs/ui.md).
        #[arg(long, value_name = "FILE", conflicts_with = "json")]
        svg: Option<PathBuf>,
        /// Write the job's page (the graph, the recovery decisions, each
        /// coordinator run, the attempts) into FILE as HTML instead.
        #[arg(long, value_name = "FILE", conflicts_with = "json")]
        html: Option<PathBuf>,
    },
}

/// `coordhost plugin ...`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Name the world, WIT version and batch-snapshot support of a component,
    /// or say exactly what is wrong with it.
    Check {
        /// The component file (`.wasm`).
        file: PathBuf,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Write a new plugin project (WIT, a complete minimal plugin with batch
    /// snapshots, a README with the build command) into PARENT/NAME.
    New(crate::kit::command::NewArgs),
    /// Run a scripted sequence of calls through the plugin host and print
    /// each call and answer (exit 0 all answered, 1 a call failed, 2 bad input).
    Call(crate::kit::command::CallArgs),
    /// Run the plugin contract checks of coordhost's own conformance suite
    /// (exit 0 passed, 1 a check failed, naming it, 2 bad input).
    Test(crate::kit::command::LoadArgs),
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    // The test knobs of a test build: the fail points that FAILPOINTS names
    // (src/failpoints.rs); held until the command ends.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    init_tracing();
    let cli = Cli::parse();
    let cache_dir = cli.cache_dir.clone().or_else(default_cache_dir);
    // The commands that load components resolve the cache's `..` on disk
    // once, as `run` does (config::resolve_physical): one line and exit 2
    // for a `..` the OS could not follow.
    let uses_cache = !matches!(
        cli.command,
        Command::Log { .. }
            | Command::Cluster { .. }
            | Command::Plugin {
                command: PluginCommand::New(_)
            }
    );
    let cache_dir = match cache_dir {
        Some(dir) if uses_cache => match crate::config::resolve_physical(&dir) {
            Ok(resolved) => Some(resolved),
            Err(reason) => {
                coordhost_io::stderr_line!(
                    "coordhost: --cache-dir: {}",
                    crate::config::one_line(&reason)
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
        other => other,
    };
    match cli.command {
        Command::Run(args) => crate::job::run_command(&args, cache_dir),
        Command::Worker(args) => worker_command(&args, cache_dir),
        Command::Plugin {
            command: PluginCommand::Check { file, json },
        } => plugin_check(&file, json, cache_dir),
        Command::Plugin {
            command: PluginCommand::New(args),
        } => crate::kit::command::new_command(&args),
        Command::Plugin {
            command: PluginCommand::Call(args),
        } => crate::kit::command::call_command(&args, cache_dir),
        Command::Plugin {
            command: PluginCommand::Test(args),
        } => crate::kit::command::test_command(&args, cache_dir),
        Command::Log {
            command:
                LogCommand::Inspect {
                    dir,
                    json,
                    svg,
                    html,
                },
        } => {
            if svg.is_some() || html.is_some() {
                log_draw(&dir, svg.as_deref(), html.as_deref())
            } else {
                log_inspect(&dir, json)
            }
        }
        Command::Cancel(args) => crate::job::cancel::cancel_command(&args),
        Command::Cluster {
            command:
                ClusterCommand::Certs {
                    dir,
                    job,
                    workers,
                    etcd_host,
                },
        } => cluster_certs(crate::tls::CertsRequest {
            dir,
            job,
            workers,
            etcd_hosts: etcd_host,
        }),
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("COORDHOST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// The default compiled-component cache directory.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("COORDHOST_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("coordhost"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("coordhost"))
}

/// Creates the process's plugin host.
///
/// # Errors
/// [`PluginError::Engine`] when wasmtime cannot start.
pub fn plugin_host(cache_dir: Option<PathBuf>) -> Result<PluginHost, PluginError> {
    PluginHost::new(HostOptions { cache_dir })
}

fn plugin_check(file: &Path, json: bool, cache_dir: Option<PathBuf>) -> ExitCode {
    // Says "compiling NAME ..." on stderr while a component compiles.
    let result = crate::kit::command::noticing_host(cache_dir).and_then(|host| host.check(file));
    match result {
        Ok(info) => {
            let mut out = std::io::stdout().lock();
            let written = if json {
                // The same `file` and `valid` fields as on failure, then
                // what the component is.
                let mut doc = serde_json::json!({
                    "file": file.display().to_string(),
                    "valid": true,
                });
                if let (Some(doc), Ok(serde_json::Value::Object(fields))) =
                    (doc.as_object_mut(), serde_json::to_value(&info))
                {
                    doc.extend(fields);
                }
                serde_json::to_writer_pretty(&mut out, &doc)
                    .map_err(std::io::Error::from)
                    .and_then(|()| writeln!(out))
            } else {
                write_info(&mut out, file, &info)
            };
            if written.is_err() {
                return ExitCode::from(EXIT_FAILED);
            }
            ExitCode::from(EXIT_OK)
        }
        Err(error) => {
            let message = crate::config::one_line(&error.to_string());
            let code = match error {
                PluginError::Engine { .. } => EXIT_FAILED,
                _ => EXIT_BAD_INPUT,
            };
            if json {
                // `--json` always prints a JSON document on stdout; on
                // failure `{"file", "valid": false, "error"}`.
                let doc = serde_json::json!({
                    "file": file.display().to_string(),
                    "valid": false,
                    "error": message,
                });
                println!("{doc}");
            }
            coordhost_io::stderr_line!("coordhost: {message}");
            ExitCode::from(code)
        }
    }
}

fn write_info(
    out: &mut impl std::io::Write,
    file: &Path,
    info: &PluginInfo,
) -> std::io::Result<()> {
    writeln!(out, "{}: {} plugin", file.display(), info.kind)?;
    writeln!(
        out,
        "  world:                   {}/{}@{}",
        info.package,
        info.kind.world(),
        info.version
    )?;
    if let Some(signature) = &info.signature {
        writeln!(out, "  signature:               {signature}")?;
    } else if info.kind != crate::plugin::PluginKind::SourceReader {
        // A source reader keeps no state between splits: nothing to say.
        writeln!(
            out,
            "  supports batch snapshot: {}",
            if info.supports_batch_snapshot {
                "yes"
            } else {
                "no"
            }
        )?;
    }
    if info.kind == crate::plugin::PluginKind::ShuffleMaster {
        writeln!(
            out,
            "  reads worker reports:    {}",
            if info.reads_worker_reports {
                "yes (imports job-shuffle-context)"
            } else {
                "no (with worker processes the host answers from their reports)"
            }
        )?;
    }
    // The plugin interface first; anything else the component exports is
    // never called by coordhost, and says so (issue 17, item 7).
    let (plugin, other): (Vec<&String>, Vec<&String>) = info
        .exports
        .iter()
        .partition(|e| e.starts_with(&format!("{}/", info.package)));
    let list = |names: &[&String]| {
        names
            .iter()
            .map(|n| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(out, "  exports:                 {}", list(&plugin))?;
    if !other.is_empty() {
        let why = if other.iter().all(|n| n.as_str() == "exports") {
            "added by componentize-py (its `init`), not part of the plugin world"
        } else {
            "not part of the plugin world"
        };
        writeln!(
            out,
            "  other exports:           {} ({why}; coordhost never calls them)",
            list(&other)
        )?;
    }
    Ok(())
}

fn log_inspect(dir: &Path, json: bool) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match crate::events::inspect(dir, json, &mut out) {
        Ok(()) => ExitCode::from(EXIT_OK),
        // The reader went away (`| head`): nothing more is wanted.
        Err(crate::events::EventsError::Output { source })
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            ExitCode::from(EXIT_OK)
        }
        Err(error) => {
            let _ = out.flush();
            coordhost_io::stderr_line!("coordhost: {error}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// `coordhost log inspect DIR --svg FILE | --html FILE`: the job view of
/// the log (`crate::ui::JobView::from_replay`) drawn into FILE; one line
/// per file written.
fn log_draw(dir: &Path, svg: Option<&Path>, html: Option<&Path>) -> ExitCode {
    let replay = crate::events::locate_log_dir(dir).and_then(|log_dir| {
        crate::events::replay(&crate::events::FileStorage::open_read_only(&log_dir))
    });
    let view = match replay {
        Ok(replay) => crate::ui::JobView::from_replay(&replay),
        Err(error) => {
            coordhost_io::stderr_line!("coordhost: {error}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let drawings = [
        (svg, crate::ui::render_svg(&view), "--svg"),
        (html, crate::ui::render_page(&view), "--html"),
    ];
    for (path, text, flag) in drawings {
        let Some(path) = path else { continue };
        if let Err(e) = std::fs::write(path, text) {
            coordhost_io::stderr_line!("coordhost: {flag} {}: cannot write: {e}", path.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        println!("{}", path.display());
    }
    ExitCode::from(EXIT_OK)
}

/// `coordhost cluster certs`: prints each file written.
fn cluster_certs(req: crate::tls::CertsRequest) -> ExitCode {
    match crate::tls::make_certs(&req) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            coordhost_io::stderr_line!("coordhost: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// Runs `coordhost worker` until it is killed (or, with
/// `--exit-when-idle`, until idle: exit 0); returns the exit code of a
/// worker that could not start or was refused (2: a wrong argument or
/// another protocol version; 1: folders or the socket).
fn worker_command(args: &WorkerArgs, cache_dir: Option<PathBuf>) -> ExitCode {
    let from_file = match &args.config {
        None => None,
        Some(file) => match crate::config::load_cluster_file(file, &args.data_dir) {
            Ok(tls) => tls,
            Err(e) => {
                coordhost_io::stderr_line!(
                    "coordhost: {}",
                    crate::config::one_line(&e.to_string())
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
    };
    let tls = args.tls.files().or(from_file);
    let opts = crate::remote::WorkerOptions {
        coordinator: args.coordinator.clone(),
        data_dir: args.data_dir.clone(),
        slots: args.slots,
        listen: args.listen.clone(),
        keep_partitions: std::time::Duration::from_millis(args.keep_partitions_ms),
        id: args.id.clone(),
        exit_when_idle: args.exit_when_idle,
        tls: tls.clone(),
        cache_dir,
        etcd: match args.etcd.security() {
            Ok(s) => s,
            Err(e) => {
                coordhost_io::stderr_line!("coordhost: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
    };
    if args.slots == 0 {
        coordhost_io::stderr_line!("coordhost: --slots: at least 1");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if let Err(e) = args.tls.check_listen(&args.listen, tls.is_some()) {
        coordhost_io::stderr_line!("coordhost: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    match crate::remote::run_worker(&opts) {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(e) => {
            coordhost_io::stderr_line!("coordhost: {e}");
            ExitCode::from(match e {
                crate::remote::worker::WorkerError::Io { .. } => EXIT_FAILED,
                _ => EXIT_BAD_INPUT,
            })
        }
    }
}
