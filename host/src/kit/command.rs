//! The faces of `coordhost plugin new|call|test`: their options and what
//! they print. Exit codes as everywhere (`crate::job::exit`): 0 success, 1 the
//! plugin failed a call or a check, 2 bad input (command line, component,
//! a folder that is not empty).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::files;
use crate::job::exit::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK};
use crate::plugin::{CompileNotice, HostOptions, PluginError, PluginHost, PluginKind};

use super::new::Lang;
use super::{PrepareError, Prepared};

/// `--kind` of `plugin new`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    /// World `split-enumerator-plugin`.
    SplitEnumerator,
    /// World `shuffle-master-plugin`.
    ShuffleMaster,
    /// World `scalar-function-plugin` (package `coordhost:function`).
    ScalarFunction,
    /// World `source-reader-plugin` (package `coordhost:reader`).
    SourceReader,
}

impl From<KindArg> for PluginKind {
    fn from(kind: KindArg) -> Self {
        match kind {
            KindArg::SplitEnumerator => Self::SplitEnumerator,
            KindArg::ShuffleMaster => Self::ShuffleMaster,
            KindArg::ScalarFunction => Self::ScalarFunction,
            KindArg::SourceReader => Self::SourceReader,
        }
    }
}

/// Options of `plugin new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The project's name: lowercase letters, digits and `-` (names the
    /// folder, the crate or package, and the component).
    pub name: String,
    /// The plugin kind.
    #[arg(long, value_enum)]
    pub kind: KindArg,
    /// The language.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// The folder to create the project in (default: the current folder).
    #[arg(long, value_name = "PARENT", default_value = ".")]
    pub dir: PathBuf,
}

/// Options shared by `plugin call` and `plugin test`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// The component file (`.wasm`).
    pub file: PathBuf,
    /// A configuration entry `key=value`, as in the job file's `config`
    /// table (repeat for more). `${tmp}` in a value is the scratch folder.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub config: Vec<(String, String)>,
    /// A folder granted read-only to the plugin (absolute; repeatable).
    #[arg(long = "grant", value_name = "DIR")]
    pub grants: Vec<PathBuf>,
    /// A folder granted writable to the plugin (absolute; repeatable).
    #[arg(long = "grant-rw", value_name = "DIR")]
    pub grants_rw: Vec<PathBuf>,
    /// A source reader's declared column `NAME=TYPE`, in order (repeat for
    /// each; the types of a job file's `schema`: bigint, int, double,
    /// varchar, date, boolean, decimal(P,S)).
    #[arg(long = "column", value_name = "NAME=TYPE", value_parser = parse_pair)]
    pub columns: Vec<(String, String)>,
    /// A source reader's sample: a file of records it reads (copied into
    /// the scratch folder and read as splits).
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// A source reader's bad sample: a file holding a record that is not
    /// the format, which the reader must refuse with `invalid-split`.
    #[arg(long = "bad-input", value_name = "FILE")]
    pub bad_input: Option<PathBuf>,
}

impl LoadArgs {
    /// The source-reader options.
    fn reader_inputs(&self) -> super::ReaderInputs {
        super::ReaderInputs {
            columns: self.columns.clone(),
            input: self.input.clone(),
            bad_input: self.bad_input.clone(),
        }
    }
}

/// Options of `plugin call`.
#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The plugin and its configuration.
    #[command(flatten)]
    pub load: LoadArgs,
    /// The calls to make, comma-separated, or `@FILE` for a script file
    /// (steps separated by commas or lines; `#` starts a comment). Default:
    /// a run with a snapshot and a recovery; the steps are listed in
    /// docs/write-a-plugin.md.
    #[arg(long, value_name = "STEPS")]
    pub steps: Option<String>,
}

fn parse_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(format!("`{text}` is not KEY=VALUE")),
    }
}

/// A plugin host that says `compiling NAME ...` on stderr when a component
/// compiles for longer than [`crate::plugin::NOTICE_AFTER`] (never when it
/// comes from the cache).
///
/// # Errors
/// [`PluginError::Engine`] when wasmtime cannot start.
pub fn noticing_host(cache_dir: Option<PathBuf>) -> Result<PluginHost, PluginError> {
    let notice = CompileNotice(std::sync::Arc::new(|path: &Path| {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        coordhost_io::stderr_line!(
            "compiling {name} ... (once; later runs take it from the compiled-component cache)"
        );
    }));
    PluginHost::with_compile_notice(HostOptions { cache_dir }, Some(notice))
}

fn fail(message: &str, code: u8) -> ExitCode {
    coordhost_io::stderr_line!("coordhost: {}", crate::config::one_line(message));
    ExitCode::from(code)
}

/// `coordhost plugin new`.
pub fn new_command(args: &NewArgs) -> ExitCode {
    match super::new::create(&args.name, args.kind.into(), args.lang, &args.dir) {
        Ok((dir, files)) => {
            println!(
                "created {} ({} {}):",
                dir.display(),
                args.lang,
                PluginKind::from(args.kind)
            );
            for file in files {
                println!("  {file}");
            }
            println!("build it as {}/README.md says", dir.display());
            ExitCode::from(EXIT_OK)
        }
        Err(super::new::NewError::Write { path, source }) => fail(
            &format!("cannot write {}: {source}", path.display()),
            EXIT_FAILED,
        ),
        Err(e) => fail(&e.to_string(), EXIT_BAD_INPUT),
    }
}

fn load(args: &LoadArgs, cache_dir: Option<PathBuf>) -> Result<Prepared, ExitCode> {
    let host = noticing_host(cache_dir).map_err(|e| fail(&e.to_string(), EXIT_FAILED))?;
    super::prepare(
        &host,
        &args.file,
        &args.config,
        &args.grants,
        &args.grants_rw,
        &args.reader_inputs(),
    )
    .map_err(|e| {
        let code = match &e {
            PrepareError::Scratch(_) | PrepareError::Plugin(PluginError::Engine { .. }) => {
                EXIT_FAILED
            }
            // A plugin whose `supports-batch-snapshot` traps fails its load.
            PrepareError::Plugin(p) if p.is_fault() => EXIT_FAILED,
            _ => EXIT_BAD_INPUT,
        };
        fail(&e.to_string(), code)
    })
}

/// The steps of `--steps`: the value itself, or the script file `@FILE`
/// (lines and commas separate steps; `#` starts a comment): a regular UTF-8
/// file of at most [`files::MAX_SCRIPT_BYTES`], opened without blocking (a
/// FIFO or `/dev/zero` is refused in one line naming it).
fn script(value: &str) -> Result<String, String> {
    let Some(file) = value.strip_prefix('@') else {
        return Ok(value.to_string());
    };
    let text = files::read_text_file(Path::new(file), files::MAX_SCRIPT_BYTES)
        .map_err(|e| format!("--steps @{file}: cannot read the script: {e}"))?;
    Ok(text
        .lines()
        .map(|line| line.split_once('#').map_or(line, |(before, _)| before))
        .collect::<Vec<_>>()
        .join(","))
}

/// `coordhost plugin call`.
pub fn call_command(args: &CallArgs, cache_dir: Option<PathBuf>) -> ExitCode {
    // A bad script is refused before any call (`call::run` parses it first).
    let steps = match args.steps.as_deref().map(script) {
        None => None,
        Some(Ok(steps)) => Some(steps),
        Some(Err(message)) => return fail(&message, EXIT_BAD_INPUT),
    };
    let prepared = match load(&args.load, cache_dir) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut out = std::io::stdout().lock();
    let ran = match &prepared.reader {
        Some(sample) => {
            super::call::run_reader(&prepared.plugin, sample, steps.as_deref(), &mut out)
        }
        None => super::call::run(&prepared.plugin, steps.as_deref(), &mut out),
    };
    match ran {
        Ok(true) => ExitCode::from(EXIT_OK),
        Ok(false) => ExitCode::from(EXIT_FAILED),
        Err(super::call::CallError::BadStep(e)) => fail(&e.to_string(), EXIT_BAD_INPUT),
        Err(e) => fail(&e.to_string(), EXIT_FAILED),
    }
}

/// `coordhost plugin test`.
pub fn test_command(args: &LoadArgs, cache_dir: Option<PathBuf>) -> ExitCode {
    let prepared = match load(args, cache_dir) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let report = super::conformance::run_reader(&prepared.plugin, prepared.reader.as_ref());
    // A scalar function has no snapshots: its header line is its signature;
    // a source reader's is its declared schema.
    let about = match (prepared.plugin.function_signature(), &prepared.reader) {
        (Some(sig), _) => format!("signature: {}", super::function_checks::show_signature(sig)),
        (None, Some(sample)) => format!(
            "declared schema: {}",
            super::reader_checks::show_schema(&sample.schema)
        ),
        (None, None) if prepared.plugin.supports_batch_snapshot() => {
            "batch snapshots: supported".to_string()
        }
        (None, None) => "batch snapshots: not supported".to_string(),
    };
    println!("{}: {} plugin, {about}", args.file.display(), report.kind);
    println!("{report}");
    if report.passed() {
        ExitCode::from(EXIT_OK)
    } else {
        let names: Vec<_> = report.failed().map(|c| c.name).collect();
        coordhost_io::stderr_line!(
            "coordhost: {} failed: {}",
            args.file.display(),
            names.join(", ")
        );
        ExitCode::from(EXIT_FAILED)
    }
}
