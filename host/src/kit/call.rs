//! `coordhost plugin call`: runs a scripted sequence of calls through the
//! real plugin host and prints each call and its answer, so an author sees
//! what the host will see without writing a job.
//!
//! A script is a list of steps (`--steps`, comma-separated). Split
//! enumerators: `create`, `start`, `add-reader:N`, `request:N` (one
//! `handle-split-request`), `drain:N` (requests until "no more splits", at
//! most [`super::conformance::MAX_REQUESTS`]), `unassigned`, `snapshot`
//! (`snapshot-state(-1)`), `restore` (a new instance from the last
//! snapshot, the host's assignment history rolled back to it, as a
//! recovering coordinator does), `add-back:N` (`add-splits-back` of the
//! splits the host's history has for reader N). Shuffle masters: `create`,
//! `register-job`, `register:N` (a partition of producer subtask N),
//! `produce:N` (writes its two subpartitions, `data` then `index`, as a producer
//! does), `report` (`get-partitions-with-metrics` of every registered
//! partition), `snapshot`, `restore` (a new instance, `register-job`,
//! `restore-state` of every snapshot from the last full one,
//! `notify-partition-recovery-started`), `release:N`, `unregister-job`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::plugin::{
    EnumeratorAction, ExecutionAttemptId, LoadedPlugin, PartitionDescriptor, PluginError,
    PluginKind, ProducerDescriptor, ResultPartitionId, ShuffleDescriptor, ShuffleMaster,
    ShuffleMasterSnapshot, Split, SplitEnumerator, SplitPayload,
};

use super::conformance::MAX_REQUESTS;

/// The default script of a split enumerator: a run, a snapshot midway, and
/// the recovery that follows (restore, start, the reset reader's splits
/// back, its reader again, its requests).
pub const ENUMERATOR_STEPS: &str = "create,start,add-reader:0,request:0,snapshot,drain:0,restore,start,add-back:0,add-reader:0,drain:0";
/// The default script of a shuffle master: two partitions, snapshots, a
/// report, the restore of a new instance, its report, a release.
pub const SHUFFLE_STEPS: &str = "create,register-job,register:0,produce:0,snapshot,register:1,produce:1,snapshot,report,restore,report,release:0,report,unregister-job";
/// The default script of a split enumerator without batch snapshots: the
/// run of [`ENUMERATOR_STEPS`] without its snapshot and recovery (on
/// recovery the host resets such a source vertex as a whole).
pub const ENUMERATOR_STEPS_NO_SNAPSHOT: &str = "create,start,add-reader:0,request:0,drain:0";
/// The default script of a shuffle master without batch snapshots:
/// [`SHUFFLE_STEPS`] without its snapshots and restore.
pub const SHUFFLE_STEPS_NO_SNAPSHOT: &str = "create,register-job,register:0,produce:0,register:1,produce:1,report,release:0,report,unregister-job";
/// The job id the shuffle-master steps use, and the parallelism of the
/// source the enumerator steps create: as in the conformance checks.
pub use super::conformance::{JOB_ID, PARALLELISM};

/// A `--steps` script `plugin call` refuses before any call (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum BadStep {
    /// A step the plugin kind does not know.
    #[error("--steps: `{step}` is not a {kind} step (steps: {known})")]
    Unknown {
        /// The step as given.
        step: String,
        /// The plugin kind.
        kind: PluginKind,
        /// The steps the kind knows.
        known: &'static str,
    },
    /// A script with no step at all (an empty value, only commas, or a
    /// script file of blank lines and comments): nothing would be called.
    #[error(
        "--steps: the script has no steps (only blanks, commas or `#` comments); give at least `create`, or leave --steps out for the default script"
    )]
    Empty,
    /// A script that does not begin with `create`: every other step needs
    /// the instance `create` makes (`restore` needs its snapshot too).
    #[error(
        "--steps: the script begins with `{step}`; it must begin with `create` (every other step needs the plugin instance that `create` makes)"
    )]
    NotCreateFirst {
        /// The first step as given.
        step: String,
    },
}

/// One parsed step.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Create,
    Start,
    AddReader(u32),
    Request(u32),
    Drain(u32),
    Unassigned,
    Snapshot,
    Restore,
    AddBack(u32),
    RegisterJob,
    Register(u32),
    Produce(u32),
    Report,
    Release(u32),
    UnregisterJob,
}

const ENUMERATOR_KNOWN: &str =
    "create, start, add-reader:N, request:N, drain:N, unassigned, snapshot, restore, add-back:N";
const SHUFFLE_KNOWN: &str = "create, register-job, register:N, produce:N, report, snapshot, restore, release:N, unregister-job";

/// A source reader has no script: `plugin call` reads its samples.
const READER_KNOWN: &str = "none: `plugin call` reads a source reader's --input (and --bad-input) as splits and takes no --steps";

/// A scalar function has no script: `plugin call` prints its signature.
const FUNCTION_KNOWN: &str =
    "none: `plugin call` prints a scalar function's signature and takes no --steps";

/// Parses a comma-separated script for `kind`.
///
/// # Errors
/// [`BadStep`] naming the first step the kind does not know, a script
/// without steps, or one that does not begin with `create`.
fn parse(steps: &str, kind: PluginKind) -> Result<Vec<Step>, BadStep> {
    let known = match kind {
        PluginKind::SplitEnumerator => ENUMERATOR_KNOWN,
        PluginKind::ShuffleMaster => SHUFFLE_KNOWN,
        PluginKind::ScalarFunction => FUNCTION_KNOWN,
        PluginKind::SourceReader => READER_KNOWN,
    };
    steps
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|text| {
            let bad = || BadStep::Unknown {
                step: text.to_string(),
                kind,
                known,
            };
            let (word, arg) = match text.split_once(':') {
                Some((w, n)) => (w, Some(n.parse::<u32>().map_err(|_| bad())?)),
                None => (text, None),
            };
            if matches!(kind, PluginKind::ScalarFunction | PluginKind::SourceReader) {
                return Err(bad());
            }
            let enumerator = kind == PluginKind::SplitEnumerator;
            let step = match (word, arg) {
                ("create", None) => Step::Create,
                ("snapshot", None) => Step::Snapshot,
                ("restore", None) => Step::Restore,
                ("start", None) if enumerator => Step::Start,
                ("add-reader", Some(n)) if enumerator => Step::AddReader(n),
                ("request", Some(n)) if enumerator => Step::Request(n),
                ("drain", Some(n)) if enumerator => Step::Drain(n),
                ("unassigned", None) if enumerator => Step::Unassigned,
                ("add-back", Some(n)) if enumerator => Step::AddBack(n),
                ("register-job", None) if !enumerator => Step::RegisterJob,
                ("register", Some(n)) if !enumerator => Step::Register(n),
                ("produce", Some(n)) if !enumerator => Step::Produce(n),
                ("report", None) if !enumerator => Step::Report,
                ("release", Some(n)) if !enumerator => Step::Release(n),
                ("unregister-job", None) if !enumerator => Step::UnregisterJob,
                _ => return Err(bad()),
            };
            Ok((text, step))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|steps| match steps.first() {
            None => Err(BadStep::Empty),
            Some((text, first)) if *first != Step::Create => Err(BadStep::NotCreateFirst {
                step: (*text).to_string(),
            }),
            _ => Ok(steps.into_iter().map(|(_, step)| step).collect()),
        })
}

/// Checks a script without running it.
///
/// # Errors
/// [`BadStep`].
pub fn validate(steps: &str, kind: PluginKind) -> Result<(), BadStep> {
    parse(steps, kind).map(drop)
}

/// Runs `steps` (or the kind's default script) and writes one line per call
/// and per answer to `out`. Returns `Ok(true)` when every call succeeded;
/// a failed call is printed, and the script stops there.
///
/// # Errors
/// [`BadStep`] for a script the kind does not know (before any call), or
/// the error of writing to `out`.
pub fn run(
    plugin: &LoadedPlugin,
    steps: Option<&str>,
    out: &mut dyn std::io::Write,
) -> Result<bool, CallError> {
    let steps_given = steps;
    let kind = plugin.spec().kind;
    let snapshots = plugin.supports_batch_snapshot();
    if let Some(sig) = plugin.function_signature() {
        if let Some(steps) = steps_given {
            parse(steps, kind)?;
        }
        let args: Vec<String> = sig.arguments.iter().map(ToString::to_string).collect();
        writeln!(
            out,
            "{}: {kind} plugin, signature: ({}) -> {}, deterministic: {}",
            plugin.spec().path.display(),
            args.join(", "),
            sig.returns,
            sig.deterministic
        )?;
        return Ok(true);
    }
    let script = steps.unwrap_or(match (kind, snapshots) {
        (PluginKind::SplitEnumerator, true) => ENUMERATOR_STEPS,
        (PluginKind::SplitEnumerator, false) => ENUMERATOR_STEPS_NO_SNAPSHOT,
        (PluginKind::ShuffleMaster, true) => SHUFFLE_STEPS,
        (PluginKind::ShuffleMaster, false) => SHUFFLE_STEPS_NO_SNAPSHOT,
        (PluginKind::ScalarFunction | PluginKind::SourceReader, _) => "",
    });
    if kind == PluginKind::SourceReader {
        if let Some(steps) = steps_given {
            parse(steps, kind)?;
        }
        writeln!(
            out,
            "{}: {kind} plugin (WIT {}@{})",
            plugin.spec().path.display(),
            crate::plugin::bindings::READER_PACKAGE,
            plugin.wit_version()
        )?;
        return Ok(true);
    }
    let steps = parse(script, kind)?;
    writeln!(
        out,
        "{}: {} plugin, batch snapshots: {}",
        plugin.spec().path.display(),
        kind,
        if snapshots {
            "supported"
        } else {
            "not supported"
        }
    )?;
    if steps_given.is_none() && !snapshots {
        writeln!(
            out,
            "default script without `snapshot` and `restore` steps: the plugin does not support batch snapshots"
        )?;
    }
    let ok = match kind {
        PluginKind::SplitEnumerator => EnumeratorScript::new(plugin).run(&steps, out)?,
        PluginKind::ShuffleMaster => ShuffleScript::new(plugin).run(&steps, out)?,
        PluginKind::ScalarFunction | PluginKind::SourceReader => true,
    };
    Ok(ok)
}

/// Rows of each batch `plugin call` prints of a source reader's answer.
pub const SHOWN_ROWS: usize = 3;

/// `plugin call` of a source reader: `configure` with the declared schema,
/// then the whole `--input` read as one split (`open`, then `next-batch`
/// until `none`), then the `--bad-input` if given, each answer printed (the
/// batch count, each batch's rows, its first [`SHOWN_ROWS`] rows). Returns
/// `Ok(true)` when every read gave batches; a read answered with an error
/// is printed and ends the transcript (a bad input is meant to end so).
///
/// # Errors
/// [`BadStep`] for any `--steps` (a reader has no script), or the error of
/// writing to `out`.
pub fn run_reader(
    plugin: &LoadedPlugin,
    sample: &super::ReaderSample,
    steps: Option<&str>,
    out: &mut dyn std::io::Write,
) -> Result<bool, CallError> {
    if let Some(steps) = steps {
        parse(steps, PluginKind::SourceReader)?;
    }
    let schema = super::reader_checks::show_schema(&sample.schema);
    writeln!(
        out,
        "{}: {} plugin (WIT {}@{})",
        plugin.spec().path.display(),
        PluginKind::SourceReader,
        crate::plugin::bindings::READER_PACKAGE,
        plugin.wit_version()
    )?;
    writeln!(
        out,
        "configure(config {:?}, schema {schema})",
        plugin.spec().config
    )?;
    let reader = match plugin.source_reader(super::reader_checks::TABLE, sample.schema.clone()) {
        Ok(r) => r,
        Err(e) => {
            writeln!(out, "  -> error: {}", show_error(&e))?;
            return Ok(false);
        }
    };
    if let Err(e) = reader.warm_up() {
        writeln!(out, "  -> error: {}", show_error(&e))?;
        return Ok(false);
    }
    writeln!(out, "  -> ok")?;
    let files = std::iter::once(("input", &sample.input))
        .chain(sample.bad_input.as_ref().map(|bad| ("bad-input", bad)));
    for (id, path) in files {
        let split = match super::reader_checks::whole(id, path) {
            Ok(s) => s,
            Err(m) => {
                writeln!(out, "  -> error: {m}")?;
                return Ok(false);
            }
        };
        writeln!(
            out,
            "open({}), then next-batch until none",
            show_split_data(&split)
        )?;
        match reader.read_split(&split) {
            Ok(batches) => {
                for (n, batch) in batches.iter().enumerate() {
                    writeln!(out, "  -> batch {}: {} rows", n + 1, batch.num_rows())?;
                    for i in 0..batch.num_rows().min(SHOWN_ROWS) {
                        writeln!(out, "     {}", super::reader_checks::show_row(batch, i))?;
                    }
                }
                writeln!(
                    out,
                    "  -> none: {} batches, {} rows",
                    batches.len(),
                    super::reader_checks::rows(&batches)
                )?;
            }
            Err(e) => {
                writeln!(out, "  -> error: {}", show_error(&e))?;
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Why `plugin call` could not run its script.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A step the kind does not know.
    #[error(transparent)]
    BadStep(#[from] BadStep),
    /// Writing the transcript failed.
    #[error("cannot write the transcript: {0}")]
    Write(#[from] std::io::Error),
}

/// At most this many characters of inline text or snapshot bytes are shown.
const SHOWN: usize = 60;

fn show_text(text: &str) -> String {
    let mut shown: String = text.chars().take(SHOWN).collect();
    if shown.len() < text.len() {
        shown.push_str("...");
    }
    format!("{shown:?}")
}

fn show_split(split: &Split) -> String {
    match &split.payload {
        SplitPayload::Inline(text) => format!("{} inline {}", split.id, show_text(text)),
        SplitPayload::FileRange(r) => format!(
            "{} file-range {} [{}, +{})",
            split.id, r.path, r.start, r.length
        ),
    }
}

/// A split as a source reader gets it, as [`show_split`] shows one.
fn show_split_data(split: &crate::value::SplitData) -> String {
    match &split.payload {
        crate::value::SplitPayloadData::Inline(text) => {
            format!("{} inline {}", split.id, show_text(text))
        }
        crate::value::SplitPayloadData::FileRange {
            path,
            start,
            length,
        } => format!(
            "{} file-range {} [{start}, +{length})",
            split.id,
            path.display()
        ),
    }
}

fn show_bytes(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    format!("{} bytes {}", bytes.len(), show_text(&text))
}

fn show_error(error: &PluginError) -> String {
    crate::plugin::one_line(&error.to_string(), 1000)
}

/// The host's split-assignment history: splits per reader.
type History = BTreeMap<u32, Vec<Split>>;

/// A scripted sequence of calls into one plugin: `step` runs one step and
/// prints it; `run` stops at the first step the plugin answers with an
/// error.
trait Script {
    /// Runs `step`, printing the call and its answer on `out`; `Ok(Err(_))`
    /// is the plugin's (or the script's) error, `Err(_)` a failed write.
    fn step(
        &mut self,
        step: &Step,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>>;

    /// Runs `steps` in order; `false` when one ended with an error.
    fn run(&mut self, steps: &[Step], out: &mut dyn std::io::Write) -> std::io::Result<bool> {
        for step in steps {
            if let Err(message) = self.step(step, out)? {
                writeln!(out, "  -> error: {message}")?;
                return Ok(false);
            }
        }
        Ok(true)
    }
}

struct EnumeratorScript<'a> {
    plugin: &'a LoadedPlugin,
    live: Option<SplitEnumerator>,
    /// The host's split-assignment history: splits per reader.
    history: History,
    /// The last snapshot and the history when it was taken.
    snapshot: Option<(Vec<u8>, History)>,
}

impl<'a> EnumeratorScript<'a> {
    fn new(plugin: &'a LoadedPlugin) -> Self {
        Self {
            plugin,
            live: None,
            history: BTreeMap::new(),
            snapshot: None,
        }
    }

    fn live(&mut self) -> Result<&mut SplitEnumerator, String> {
        self.live.as_mut().ok_or_else(|| {
            "no enumerator yet: the script needs `create` (or `restore`) first".into()
        })
    }

    /// Prints what the plugin did during `call` through
    /// `enumerator-context` and records assignments in the history; returns
    /// the readers that heard "no more splits", or (as a real run's
    /// coordinator does, `crate::coordinator`) the broken contract of a split
    /// id assigned again while the history still holds it.
    fn actions(
        &mut self,
        call: &'static str,
        actions: Vec<EnumeratorAction>,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<Vec<u32>, String>> {
        let mut ended = Vec::new();
        for action in actions {
            match action {
                EnumeratorAction::Assign { subtask, splits } => {
                    for split in splits {
                        writeln!(
                            out,
                            "  -> assign-splits: reader {subtask} gets {}",
                            show_split(&split)
                        )?;
                        if self.history.values().flatten().any(|s| s.id == split.id) {
                            // The words of the coordinator's check.
                            return Ok(Err(show_error(&PluginError::Protocol {
                                plugin: self.plugin.name().to_string(),
                                call,
                                reason: format!(
                                    "assigned split id `{}` again while it is still assigned (ids are unique within an enumerator)",
                                    split.id
                                ),
                            })));
                        }
                        self.history.entry(subtask).or_default().push(split);
                    }
                }
                EnumeratorAction::NoMoreSplits { subtask } => {
                    writeln!(out, "  -> signal-no-more-splits: reader {subtask}")?;
                    ended.push(subtask);
                }
            }
        }
        Ok(Ok(ended))
    }

    fn drain(
        &mut self,
        n: u32,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        for _ in 0..MAX_REQUESTS {
            writeln!(out, "handle-split-request({n}, none)")?;
            let answer = match self.live() {
                Ok(e) => e.handle_split_request(n, None),
                Err(m) => return Ok(Err(m)),
            };
            let actions = match answer {
                Ok(actions) => actions,
                Err(e) => return Ok(Err(show_error(&e))),
            };
            if actions.is_empty() {
                return Ok(Err(format!(
                    "the plugin neither assigned a split to reader {n} nor said \"no more splits\""
                )));
            }
            match self.actions("handle-split-request", actions, out)? {
                Ok(ended) if ended.contains(&n) => return Ok(Ok(())),
                Ok(_) => {}
                Err(m) => return Ok(Err(m)),
            }
        }
        Ok(Err(format!(
            "reader {n} did not hear \"no more splits\" within {MAX_REQUESTS} requests"
        )))
    }

    fn show_history(&self) -> String {
        if self.history.values().all(Vec::is_empty) {
            return "nothing assigned".into();
        }
        let mut text = String::new();
        for (reader, splits) in &self.history {
            let ids: Vec<_> = splits.iter().map(|s| s.id.as_str()).collect();
            let _ = write!(text, "reader {reader}: {ids:?}; ");
        }
        text.trim_end_matches("; ").to_string()
    }
}

impl Script for EnumeratorScript<'_> {
    fn step(
        &mut self,
        step: &Step,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        let result: Result<Vec<EnumeratorAction>, PluginError> = match step {
            Step::Create => return self.create(out),
            Step::Restore => return self.restore(out),
            Step::Start => {
                writeln!(out, "start()")?;
                match self.live() {
                    Ok(e) => e.start(),
                    Err(m) => return Ok(Err(m)),
                }
            }
            Step::AddReader(n) => {
                writeln!(out, "add-reader({n})")?;
                match self.live() {
                    Ok(e) => e.add_reader(*n),
                    Err(m) => return Ok(Err(m)),
                }
            }
            Step::Request(n) => {
                writeln!(out, "handle-split-request({n}, none)")?;
                match self.live() {
                    Ok(e) => e.handle_split_request(*n, None),
                    Err(m) => return Ok(Err(m)),
                }
            }
            Step::Drain(n) => return self.drain(*n, out),
            Step::Unassigned => return self.unassigned(out),
            Step::Snapshot => return self.take_snapshot(out),
            Step::AddBack(n) => {
                let back = self.history.remove(n).unwrap_or_default();
                let ids: Vec<_> = back.iter().map(|s| s.id.as_str()).collect();
                writeln!(out, "add-splits-back({ids:?}, {n})")?;
                match self.live() {
                    Ok(e) => e.add_splits_back(back, *n),
                    Err(m) => return Ok(Err(m)),
                }
            }
            _ => return Ok(Err(format!("{step:?} is not a split-enumerator step"))),
        };
        self.answered(step, result, out)
    }
}

impl EnumeratorScript<'_> {
    /// `create`: a new enumerator, with an empty assignment history.
    fn create(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<Result<(), String>> {
        let plugin = self.plugin;
        let config = &plugin.spec().config;
        writeln!(out, "create(config {config:?}, parallelism {PARALLELISM})")?;
        match plugin.split_enumerator(PARALLELISM) {
            Ok(e) => {
                self.live = Some(e);
                self.history.clear();
                writeln!(out, "  -> ok")?;
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(show_error(&e))),
        }
    }

    /// `restore`: a new instance from the last `snapshot`, the assignment
    /// history rolled back to the one kept with it.
    fn restore(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<Result<(), String>> {
        let plugin = self.plugin;
        let config = &plugin.spec().config;
        let Some((bytes, history)) = self.snapshot.clone() else {
            return Ok(Err(
                "no snapshot yet: the script needs `snapshot` before `restore`".into(),
            ));
        };
        writeln!(
            out,
            "restore(config {config:?}, parallelism {PARALLELISM}, snapshot of {} bytes) in a new instance",
            bytes.len()
        )?;
        match plugin.restore_split_enumerator(PARALLELISM, &bytes) {
            Ok(e) => {
                self.live = Some(e);
                self.history = history;
                writeln!(
                    out,
                    "  -> ok; the host's history is rolled back to the snapshot: {}",
                    self.show_history()
                )?;
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(show_error(&e))),
        }
    }

    /// `unassigned`: prints `unassigned-splits`.
    fn unassigned(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<Result<(), String>> {
        writeln!(out, "unassigned-splits()")?;
        Ok(
            match self
                .live()
                .and_then(|e| e.unassigned_splits().map_err(|e| show_error(&e)))
            {
                Ok(count) => {
                    writeln!(out, "  -> {count}")?;
                    Ok(())
                }
                Err(m) => Err(m),
            },
        )
    }

    /// `snapshot`: takes `snapshot-state` and keeps it, with the
    /// assignment history, for `restore`.
    fn take_snapshot(
        &mut self,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        writeln!(out, "snapshot-state(-1)")?;
        let taken = self
            .live()
            .and_then(|e| e.snapshot_state(-1).map_err(|e| show_error(&e)));
        Ok(match taken {
            Ok(bytes) => {
                writeln!(out, "  -> {}", show_bytes(&bytes))?;
                writeln!(
                    out,
                    "     the host keeps with it the assignment history: {}",
                    self.show_history()
                )?;
                self.snapshot = Some((bytes, self.history.clone()));
                Ok(())
            }
            Err(m) => Err(m),
        })
    }

    /// Prints the answer of the call `step` made: `ok`, or the actions the
    /// plugin took ([`Self::actions`]), or the error.
    fn answered(
        &mut self,
        step: &Step,
        result: Result<Vec<EnumeratorAction>, PluginError>,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        let call = match step {
            Step::Start => "start",
            Step::AddReader(_) => "add-reader",
            Step::AddBack(_) => "add-splits-back",
            _ => "handle-split-request",
        };
        Ok(match result {
            Ok(actions) if actions.is_empty() => {
                writeln!(out, "  -> ok")?;
                Ok(())
            }
            Ok(actions) => self.actions(call, actions, out)?.map(drop),
            Err(e) => Err(show_error(&e)),
        })
    }
}

struct ShuffleScript<'a> {
    plugin: &'a LoadedPlugin,
    live: Option<ShuffleMaster>,
    registered: BTreeMap<u32, ShuffleDescriptor>,
    snapshots: Vec<ShuffleMasterSnapshot>,
}

fn partition(subtask: u32) -> PartitionDescriptor {
    PartitionDescriptor {
        id: ResultPartitionId {
            intermediate_data_set: "source->sink".to_string(),
            producer: ExecutionAttemptId {
                job_vertex: "source".to_string(),
                subtask,
                attempt: 0,
            },
        },
        num_subpartitions: 2,
    }
}

impl<'a> ShuffleScript<'a> {
    fn new(plugin: &'a LoadedPlugin) -> Self {
        Self {
            plugin,
            live: None,
            registered: BTreeMap::new(),
            snapshots: Vec::new(),
        }
    }
}

impl Script for ShuffleScript<'_> {
    fn step(
        &mut self,
        step: &Step,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        match step {
            Step::Create => self.create(out),
            Step::Restore => self.restore(out),
            Step::RegisterJob => self.register_job(out),
            Step::Register(n) => self.register(*n, out),
            Step::Produce(n) => self.produce(*n, out),
            Step::Report => self.report(out),
            Step::Snapshot => self.take_snapshot(out),
            Step::Release(n) => self.release(*n, out),
            Step::UnregisterJob => self.unregister_job(out),
            _ => Ok(Err(format!("{step:?} is not a shuffle-master step"))),
        }
    }
}

/// What a shuffle-master step before `create` (or `restore`) gets.
const NO_MASTER: &str = "no shuffle master yet: the script needs `create` (or `restore`) first";

impl ShuffleScript<'_> {
    /// `create`: a new shuffle master.
    fn create(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<Result<(), String>> {
        let plugin = self.plugin;
        writeln!(out, "create(config {:?})", plugin.spec().config)?;
        match plugin.shuffle_master() {
            Ok(m) => self.live = Some(m),
            Err(e) => return Ok(Err(show_error(&e))),
        }
        writeln!(out, "  -> ok")?;
        Ok(Ok(()))
    }

    /// `restore`: a new instance with the job registered, restored from the
    /// snapshots from the last full one on (as the host restores), then
    /// told that partition recovery started.
    fn restore(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<Result<(), String>> {
        let plugin = self.plugin;
        // From the last full snapshot on, as the host restores.
        let start = self
            .snapshots
            .iter()
            .rposition(|s| !s.incremental)
            .unwrap_or(0);
        let snapshots = self.snapshots[start..].to_vec();
        writeln!(
            out,
            "create(config {:?}) in a new instance",
            plugin.spec().config
        )?;
        let mut m = match plugin.shuffle_master() {
            Ok(m) => m,
            Err(e) => return Ok(Err(show_error(&e))),
        };
        writeln!(out, "register-job({JOB_ID:?})")?;
        if let Err(e) = m.register_job(JOB_ID) {
            return Ok(Err(show_error(&e)));
        }
        writeln!(out, "restore-state({} snapshots)", snapshots.len())?;
        if let Err(e) = m.restore_state(snapshots) {
            return Ok(Err(show_error(&e)));
        }
        writeln!(out, "notify-partition-recovery-started({JOB_ID:?})")?;
        if let Err(e) = m.notify_partition_recovery_started(JOB_ID) {
            return Ok(Err(show_error(&e)));
        }
        self.live = Some(m);
        writeln!(out, "  -> ok")?;
        Ok(Ok(()))
    }

    /// `register-job`: registers [`JOB_ID`].
    fn register_job(
        &mut self,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        writeln!(out, "register-job({JOB_ID:?})")?;
        let Some(m) = self.live.as_mut() else {
            return Ok(Err(NO_MASTER.into()));
        };
        if let Err(e) = m.register_job(JOB_ID) {
            return Ok(Err(show_error(&e)));
        }
        writeln!(out, "  -> ok")?;
        Ok(Ok(()))
    }

    /// `register:N`: registers the partition of producer subtask `n` and
    /// keeps its descriptor.
    fn register(
        &mut self,
        n: u32,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        let p = partition(n);
        writeln!(
            out,
            "register-partition-with-producer({JOB_ID:?}, source->sink/source-{n}-0 with 2 subpartitions, worker-0)"
        )?;
        let Some(m) = self.live.as_mut() else {
            return Ok(Err(NO_MASTER.into()));
        };
        let producer = ProducerDescriptor {
            worker_id: "worker-0".into(),
            hostname: None,
        };
        match m.register_partition_with_producer(JOB_ID, &p, &producer) {
            Ok(d) => {
                writeln!(out, "  -> location {}", d.location)?;
                self.registered.insert(n, d);
            }
            Err(e) => return Ok(Err(show_error(&e))),
        }
        Ok(Ok(()))
    }

    /// `produce:N`: the host writes registered partition `n`, complete, as
    /// its producer would.
    fn produce(
        &mut self,
        n: u32,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        let Some(d) = self.registered.get(&n).cloned() else {
            return Ok(Err(format!(
                "partition {n} is not registered: the script needs `register:{n}` first"
            )));
        };
        let Some(m) = self.live.as_ref() else {
            return Ok(Err(NO_MASTER.into()));
        };
        match super::conformance::write_partition(m, &d, &[3, 5], true) {
            Ok(sizes) => writeln!(
                out,
                "(host) the producer writes 3 rows to subpartition 0 and 5 to subpartition 1 (bytes per subpartition {sizes:?}): data, then index in {}",
                d.location
            )?,
            Err(m) => return Ok(Err(m)),
        }
        Ok(Ok(()))
    }

    /// `report`: prints what `get-partitions-with-metrics` reports of the
    /// registered partitions.
    fn report(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<Result<(), String>> {
        let expected: Vec<_> = self.registered.values().map(|d| d.id.clone()).collect();
        writeln!(
            out,
            "get-partitions-with-metrics({JOB_ID:?}, {} expected, 0 ms left)",
            expected.len()
        )?;
        let Some(m) = self.live.as_mut() else {
            return Ok(Err(NO_MASTER.into()));
        };
        match m.get_partitions_with_metrics(JOB_ID, &expected, 0) {
            Ok(found) if found.is_empty() => writeln!(out, "  -> none")?,
            Ok(found) => {
                for p in found {
                    let id = &p.descriptor.id;
                    writeln!(
                        out,
                        "  -> {}/{}-{}-{}: bytes per subpartition {:?}",
                        id.intermediate_data_set,
                        id.producer.job_vertex,
                        id.producer.subtask,
                        id.producer.attempt,
                        p.bytes_per_subpartition
                    )?;
                }
            }
            Err(e) => return Ok(Err(show_error(&e))),
        }
        Ok(Ok(()))
    }

    /// `snapshot`: takes `snapshot-state` and keeps it for `restore`.
    fn take_snapshot(
        &mut self,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        writeln!(out, "snapshot-state({JOB_ID:?})")?;
        let Some(m) = self.live.as_mut() else {
            return Ok(Err(NO_MASTER.into()));
        };
        match m.snapshot_state(JOB_ID) {
            Ok(s) => {
                writeln!(
                    out,
                    "  -> {}: {}",
                    if s.incremental { "incremental" } else { "full" },
                    show_bytes(&s.data)
                )?;
                self.snapshots.push(s);
            }
            Err(e) => return Ok(Err(show_error(&e))),
        }
        Ok(Ok(()))
    }

    /// `release:N`: releases registered partition `n` externally.
    fn release(
        &mut self,
        n: u32,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        let Some(d) = self.registered.remove(&n) else {
            return Ok(Err(format!("partition {n} is not registered")));
        };
        writeln!(out, "release-partition-externally({})", d.location)?;
        let Some(m) = self.live.as_mut() else {
            return Ok(Err(NO_MASTER.into()));
        };
        if let Err(e) = m.release_partition_externally(&d) {
            return Ok(Err(show_error(&e)));
        }
        writeln!(out, "  -> ok")?;
        Ok(Ok(()))
    }

    /// `unregister-job`: unregisters [`JOB_ID`].
    fn unregister_job(
        &mut self,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<Result<(), String>> {
        writeln!(out, "unregister-job({JOB_ID:?})")?;
        let Some(m) = self.live.as_mut() else {
            return Ok(Err(NO_MASTER.into()));
        };
        if let Err(e) = m.unregister_job(JOB_ID) {
            return Ok(Err(show_error(&e)));
        }
        writeln!(out, "  -> ok")?;
        Ok(Ok(()))
    }
}
