//! The plugin contract checks of `coordhost plugin test` (issue 17): the
//! same checks the project's conformance suite (`host/tests/all/plugin_conformance.rs`)
//! runs on every sample plugin, so an author gets the verdict the samples get.
//!
//! Every check runs through the real plugin host (sandbox, deadlines, the
//! host's own contract checks of each answer) on fresh instances, so one
//! failed check does not hide the others; only the split-enumerator checks
//! that need the reference hand-out do not run when `hand-out` failed, and
//! the report says how many did not run. A check that does not apply (the
//! snapshot round trip of a plugin without batch snapshots) says so and
//! counts as passed; its counterpart (snapshot calls give an error value,
//! not a trap) runs instead. The idea is Flink's connector testing framework
//! (`SourceTestSuiteBase`): one suite, any implementation. The checks of a
//! scalar function are in [`super::function_checks`], those of a source
//! reader in [`super::reader_checks`].

use std::collections::BTreeMap;
use std::fmt;

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use crate::plugin::{
    EnumeratorAction, ExecutionAttemptId, LoadedPlugin, PartitionDescriptor, PluginError,
    PluginFailure, PluginKind, ProducerDescriptor, ResultPartitionId, ShuffleDescriptor,
    ShuffleMaster, Split, SplitEnumerator,
};
use crate::shuffle::format::{INDEX_FILE, INDEX_TMP_FILE};
use crate::shuffle::{PartitionProducer, PartitionWriter, ShuffleError};

pub use super::check::{Check, Outcome};
use super::check::{answer_case, check, said};

/// Parallelism of the source the enumerator checks create (readers 0 and 1).
pub const PARALLELISM: u32 = 2;
/// Most split requests one drain makes before the check fails: an
/// enumerator must say "no more splits" to every reader within this many.
pub const MAX_REQUESTS: usize = 100_000;
/// The job id the shuffle-master checks register.
pub const JOB_ID: &str = "kit-job";

/// Every check run on one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The plugin kind the checks were chosen for.
    pub kind: PluginKind,
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
    /// The checks that did not run because the check they need failed:
    /// `(that check, the names of those not run)`; `None` when all ran.
    pub not_run: Option<(&'static str, Vec<&'static str>)>,
}

impl Report {
    /// Whether no check failed.
    pub fn passed(&self) -> bool {
        self.failed().next().is_none()
    }

    /// The failed checks.
    pub fn failed(&self) -> impl Iterator<Item = &Check> {
        self.checks
            .iter()
            .filter(|c| matches!(c.outcome, Outcome::Failed(_)))
    }
}

impl fmt::Display for Report {
    /// One line per check: `ok`, `n/a` or `FAILED`, its name, what it asks
    /// (and why it failed or does not apply).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for check in &self.checks {
            match &check.outcome {
                Outcome::Passed => writeln!(f, "ok      {}: {}", check.name, check.about)?,
                Outcome::NotApplicable(why) => writeln!(f, "n/a     {}: {why}", check.name)?,
                Outcome::Failed(why) => writeln!(f, "FAILED  {}: {why}", check.name)?,
            }
        }
        if let Some((after, names)) = &self.not_run {
            writeln!(
                f,
                "{} checks not run after `{after}` failed: {}",
                names.len(),
                names.join(", ")
            )?;
        }
        let failed = self.failed().count();
        if failed == 0 {
            write!(f, "passed: {} checks", self.checks.len())
        } else {
            write!(f, "failed: {failed} of {} checks", self.checks.len())
        }
    }
}

/// Runs every check of `plugin`'s kind. The plugin's spec (configuration,
/// granted directories, limits) is used as loaded; a split enumerator's
/// configuration must give at least one split. A source reader is checked
/// on its sample ([`run_reader`]); here it has none and fails one check
/// that says so.
pub fn run(plugin: &LoadedPlugin) -> Report {
    run_reader(plugin, None)
}

/// [`run`], with a source reader's declared schema and sample files
/// (`sample` is ignored for the other kinds): the checks of
/// [`super::reader_checks`].
pub fn run_reader(plugin: &LoadedPlugin, sample: Option<&super::ReaderSample>) -> Report {
    let kind = plugin.spec().kind;
    let (checks, not_run) = match kind {
        PluginKind::SplitEnumerator => enumerator_checks(plugin),
        PluginKind::ShuffleMaster => (shuffle_checks(plugin), None),
        PluginKind::ScalarFunction => (super::function_checks::checks(plugin), None),
        PluginKind::SourceReader => match sample {
            Some(sample) => (super::reader_checks::checks(plugin, sample), None),
            None => (
                vec![Check {
                    name: "configure-accepts-the-schema",
                    about: "`configure` of a fresh instance takes the configuration and the declared schema",
                    outcome: Outcome::Failed(
                        "a source reader is checked on a sample: give --column NAME=TYPE (each declared column) and --input FILE".to_string(),
                    ),
                }],
                None,
            ),
        },
    };
    Report {
        kind,
        checks,
        not_run,
    }
}

/// The verdict of "without batch-snapshot support, `snapshot-state`
/// returns an error value (it does not trap)" on the answer of
/// `snapshot-state`, for either plugin kind.
fn no_snapshot<T>(answer: Result<T, PluginError>) -> Result<Option<String>, String> {
    match answer {
        Err(PluginError::Returned { .. }) => Ok(None),
        Err(other) => Err(said(&other)),
        Ok(_) => Err(
            "`supports-batch-snapshot` says false, but `snapshot-state` returned a snapshot".into(),
        ),
    }
}

// ---------------------------------------------------------------------------
// Split enumerators
// ---------------------------------------------------------------------------

/// A fresh enumerator, started, with readers 0 and 1 registered.
fn started(plugin: &LoadedPlugin) -> Result<SplitEnumerator, String> {
    let mut e = plugin.split_enumerator(PARALLELISM).map_err(|e| said(&e))?;
    e.start().map_err(|e| said(&e))?;
    for subtask in 0..PARALLELISM {
        e.add_reader(subtask).map_err(|e| said(&e))?;
    }
    Ok(e)
}

/// What one request (or any call) assigned, and which readers were told
/// "no more splits".
fn apply(actions: Vec<EnumeratorAction>, got: &mut Vec<Split>, done: &mut [bool]) {
    for action in actions {
        match action {
            EnumeratorAction::Assign { splits, .. } => got.extend(splits),
            EnumeratorAction::NoMoreSplits { subtask } => {
                if let Some(flag) = done.get_mut(subtask as usize) {
                    *flag = true;
                }
            }
        }
    }
}

/// Requests splits for every reader in turn until each was told "no more
/// splits"; returns every split assigned, in order.
fn drain(e: &mut SplitEnumerator) -> Result<Vec<Split>, String> {
    let mut got = Vec::new();
    let mut done = vec![false; PARALLELISM as usize];
    for request in 0..MAX_REQUESTS {
        let Some(subtask) = (0..PARALLELISM).find(|s| !done[*s as usize]) else {
            return Ok(got);
        };
        let before = got.len();
        let actions = e
            .handle_split_request(subtask, None)
            .map_err(|e| said(&e))?;
        apply(actions, &mut got, &mut done);
        if got.len() == before && !done[subtask as usize] {
            return Err(format!(
                "request {} of subtask {subtask} got neither a split nor \"no more splits\" (answer every `handle-split-request` with `assign-splits` or `signal-no-more-splits`)",
                request + 1
            ));
        }
    }
    Err(format!(
        "the enumerator did not tell every reader \"no more splits\" within {MAX_REQUESTS} requests"
    ))
}

/// Split ids in order.
fn ids(splits: &[Split]) -> Vec<String> {
    splits.iter().map(|s| s.id.clone()).collect()
}

/// Splits by id, failing on an id seen twice.
fn by_id(splits: &[Split], what: &str) -> Result<BTreeMap<String, Split>, String> {
    let mut map = BTreeMap::new();
    for split in splits {
        if map.insert(split.id.clone(), split.clone()).is_some() {
            return Err(format!("split `{}` was handed out twice {what}", split.id));
        }
    }
    Ok(map)
}

/// Compares two sets of splits by id and payload.
fn same_splits(expected: &[Split], got: &[Split], what: &str) -> Result<(), String> {
    let want = by_id(expected, what)?;
    let have = by_id(got, what)?;
    let missing: Vec<_> = want.keys().filter(|k| !have.contains_key(*k)).collect();
    let extra: Vec<_> = have.keys().filter(|k| !want.contains_key(*k)).collect();
    if !missing.is_empty() || !extra.is_empty() {
        return Err(format!(
            "{what}: splits missing {missing:?}, splits not expected {extra:?}"
        ));
    }
    if let Some((id, _)) = want.iter().find(|(id, s)| have.get(*id) != Some(*s)) {
        return Err(format!(
            "{what}: split `{id}` came back with another payload"
        ));
    }
    Ok(())
}

/// The split-enumerator checks that need the reference hand-out: they do
/// not run when `hand-out` failed.
fn after_hand_out(snapshots: bool) -> Vec<&'static str> {
    let mut names = vec!["no-more-splits-is-final", "add-splits-back"];
    if snapshots {
        names.extend([
            "batch-snapshot-restore",
            "restore-does-not-rediscover",
            "corrupt-snapshot",
        ]);
    } else {
        names.extend(["batch-snapshot-restore", "no-snapshot-is-an-error-value"]);
    }
    names
}

/// The split-enumerator checks, and those that did not run (see
/// [`Report::not_run`]).
type EnumeratorChecks = (Vec<Check>, Option<(&'static str, Vec<&'static str>)>);

fn enumerator_checks(plugin: &LoadedPlugin) -> EnumeratorChecks {
    let mut checks = Vec::new();
    // The reference hand-out: every split a fresh enumerator gives.
    let mut all: Option<Vec<Split>> = None;
    checks.push(check(
        "create-and-start",
        "`create` with the configuration, `start`, then `add-reader` for readers 0 and 1 succeed",
        Box::new(|| started(plugin).map(|_| None)),
    ));
    checks.push(check(
        "hand-out",
        "requests get each split once (unique ids), then \"no more splits\" for every reader; `unassigned-splits` counts down to 0",
        Box::new(|| {
            all = Some(hand_out(plugin)?);
            Ok(None)
        }),
    ));
    let Some(all) = all else {
        let not_run = after_hand_out(plugin.supports_batch_snapshot());
        return (checks, Some(("hand-out", not_run)));
    };
    checks.push(check(
        "no-more-splits-is-final",
        "after \"no more splits\", a reader that asks again gets no split",
        Box::new(|| no_more_splits_is_final(plugin)),
    ));
    checks.push(check(
        "add-splits-back",
        "splits given back with `add-splits-back` (a reset subtask) are handed out again, each once",
        Box::new(|| add_splits_back(plugin, &all)),
    ));
    if plugin.supports_batch_snapshot() {
        enumerator_snapshot_checks(plugin, &all, &mut checks);
    } else {
        checks.push(check(
            "batch-snapshot-restore",
            "",
            Box::new(|| {
                Ok(Some(
                    "the plugin does not support batch snapshots (on recovery the host resets its whole source vertex)"
                        .into(),
                ))
            }),
        ));
        checks.push(check(
            "no-snapshot-is-an-error-value",
            "without batch-snapshot support, `snapshot-state` returns an error value (it does not trap)",
            Box::new(|| {
                let mut e = started(plugin)?;
                no_snapshot(e.snapshot_state(-1))
            }),
        ));
    }
    (checks, None)
}

/// `hand-out`: a fresh enumerator's splits, each once, then "no more
/// splits" for every reader, `unassigned-splits` counting down to 0; the
/// splits are the reference hand-out of the checks after it.
fn hand_out(plugin: &LoadedPlugin) -> Result<Vec<Split>, String> {
    let mut e = started(plugin)?;
    let before = e.unassigned_splits().map_err(|e| said(&e))?;
    let splits = drain(&mut e)?;
    by_id(&splits, "by one enumerator")?;
    if splits.is_empty() {
        return Err(
            "the enumerator handed out no split; give it a configuration that makes some (--config key=value)"
                .into(),
        );
    }
    if before != splits.len() as u64 {
        return Err(format!(
            "`unassigned-splits` said {before} after `start`, but {} splits were handed out",
            splits.len()
        ));
    }
    let after = e.unassigned_splits().map_err(|e| said(&e))?;
    if after != 0 {
        return Err(format!(
            "`unassigned-splits` says {after} after every reader was told \"no more splits\""
        ));
    }
    Ok(splits)
}

/// `no-more-splits-is-final`: after "no more splits", reader 0 asking
/// again gets no split.
fn no_more_splits_is_final(plugin: &LoadedPlugin) -> Result<Option<String>, String> {
    let mut e = started(plugin)?;
    drain(&mut e)?;
    let mut got = Vec::new();
    let mut done = vec![false; PARALLELISM as usize];
    let actions = e.handle_split_request(0, None).map_err(|e| said(&e))?;
    apply(actions, &mut got, &mut done);
    match got.first() {
        Some(split) => Err(format!(
            "split `{}` was handed out after \"no more splits\"",
            split.id
        )),
        None => Ok(None),
    }
}

/// `add-splits-back`: the splits of reader 0's first request, given back,
/// are handed out again with the rest (`all`, the reference hand-out).
fn add_splits_back(plugin: &LoadedPlugin, all: &[Split]) -> Result<Option<String>, String> {
    let mut e = started(plugin)?;
    let mut taken = Vec::new();
    let mut done = vec![false; PARALLELISM as usize];
    let actions = e.handle_split_request(0, None).map_err(|e| said(&e))?;
    apply(actions, &mut taken, &mut done);
    if taken.is_empty() {
        return Err("the first request of reader 0 got no split".into());
    }
    e.add_splits_back(taken.clone(), 0).map_err(|e| said(&e))?;
    let count = e.unassigned_splits().map_err(|e| said(&e))?;
    if count != all.len() as u64 {
        return Err(format!(
            "`unassigned-splits` says {count} after {} split(s) came back, expected {}",
            taken.len(),
            all.len()
        ));
    }
    let again = drain(&mut e)?;
    same_splits(all, &again, "after `add-splits-back`")?;
    Ok(None)
}

fn enumerator_snapshot_checks(plugin: &LoadedPlugin, all: &[Split], checks: &mut Vec<Check>) {
    checks.push(check(
        "batch-snapshot-restore",
        "an enumerator restored (in a new instance) from `snapshot-state` taken midway hands out exactly the splits that were unassigned then",
        Box::new(|| {
            let mut e = started(plugin)?;
            let half = all.len() / 2;
            let mut taken = Vec::new();
            let mut done = vec![false; PARALLELISM as usize];
            while taken.len() < half && !done[0] {
                let actions = e
                    .handle_split_request(0, None)
                    .map_err(|e| said(&e))?;
                apply(actions, &mut taken, &mut done);
            }
            let snapshot = e.snapshot_state(-1).map_err(|e| said(&e))?;
            let rest = drain(&mut e)?;
            let mut restored = plugin
                .restore_split_enumerator(PARALLELISM, &snapshot)
                .map_err(|e| said(&e))?;
            restored.start().map_err(|e| said(&e))?;
            for subtask in 0..PARALLELISM {
                restored.add_reader(subtask).map_err(|e| said(&e))?;
            }
            let count = restored.unassigned_splits().map_err(|e| said(&e))?;
            if count != rest.len() as u64 {
                return Err(format!(
                    "restored, `unassigned-splits` says {count}; {} splits were unassigned at the snapshot",
                    rest.len()
                ));
            }
            let again = drain(&mut restored)?;
            same_splits(&rest, &again, "after `restore`")?;
            Ok(None)
        }),
    ));
    checks.push(check(
        "restore-does-not-rediscover",
        "restored from a snapshot taken after every split was handed out, the enumerator hands out none (the host keeps the assigned ones)",
        Box::new(|| {
            let mut e = started(plugin)?;
            drain(&mut e)?;
            let snapshot = e.snapshot_state(-1).map_err(|e| said(&e))?;
            let mut restored = plugin
                .restore_split_enumerator(PARALLELISM, &snapshot)
                .map_err(|e| said(&e))?;
            restored.start().map_err(|e| said(&e))?;
            for subtask in 0..PARALLELISM {
                restored.add_reader(subtask).map_err(|e| said(&e))?;
            }
            let again = drain(&mut restored)?;
            if again.is_empty() {
                Ok(None)
            } else {
                Err(format!(
                    "it handed out {} split(s) again ({:?}): a restored enumerator must not discover splits a snapshot had already assigned",
                    again.len(),
                    ids(&again)
                ))
            }
        }),
    ));
    checks.push(check(
        "corrupt-snapshot",
        "`restore` of bytes that are not a snapshot returns the error value `corrupt-snapshot`",
        Box::new(
            || match plugin.restore_split_enumerator(PARALLELISM, b"\xffnot a snapshot") {
                Err(PluginError::Returned {
                    error: PluginFailure::CorruptSnapshot(_),
                    ..
                }) => Ok(None),
                Err(other) => Err(format!(
                    "expected `corrupt-snapshot`, got {}: {}",
                    answer_case(&other),
                    said(&other)
                )),
                Ok(_) => Err("`restore` accepted bytes that are not a snapshot".into()),
            },
        ),
    ));
}

// ---------------------------------------------------------------------------
// Shuffle masters
// ---------------------------------------------------------------------------

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

fn producer() -> ProducerDescriptor {
    ProducerDescriptor {
        worker_id: "worker-0".into(),
        hostname: None,
    }
}

/// A fresh shuffle master with the job registered.
fn registered(plugin: &LoadedPlugin) -> Result<ShuffleMaster, String> {
    let mut m = plugin.shuffle_master().map_err(|e| said(&e))?;
    m.register_job(JOB_ID).map_err(|e| said(&e))?;
    Ok(m)
}

/// Writes a partition as the host's producer does, with its
/// [`PartitionWriter`] (inside the plugin's writable grants only):
/// `rows[i]` rows of one Utf8 column into subpartition `i`, then `data`
/// and `index`. Unless `complete`, the index is left as `index.tmp`, as
/// by a producer that died before its rename (docs/shuffle-format.md).
/// Returns the bytes per subpartition the writer reported.
pub(crate) fn write_partition(
    m: &ShuffleMaster,
    d: &ShuffleDescriptor,
    rows: &[usize],
    complete: bool,
) -> Result<Vec<u64>, String> {
    let dir = m
        .partition_dir("register-partition-with-producer", &d.location)
        .map_err(|e| said(&e))?;
    let failed = |e: ShuffleError| format!("cannot write a partition at {}: {e}", d.location);
    let producer = PartitionProducer {
        job: JOB_ID.to_owned(),
        data_set: d.id.intermediate_data_set.clone(),
        job_vertex: d.id.producer.job_vertex.clone(),
        subtask: d.id.producer.subtask,
        attempt: d.id.producer.attempt,
    };
    let mut w = PartitionWriter::create_in(&dir, rows.len() as u32, producer).map_err(failed)?;
    let schema = Arc::new(Schema::new(vec![Field::new("word", DataType::Utf8, false)]));
    for (sub, &n) in rows.iter().enumerate() {
        let words = StringArray::from_iter_values((0..n).map(|i| format!("w{sub}-{i}")));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(words) as ArrayRef])
            .map_err(|e| format!("cannot build a batch: {e}"))?;
        w.write_batch(sub as u32, &batch).map_err(failed)?;
    }
    let sizes = w.finish().map_err(failed)?;
    if !complete {
        rename_index(m, d, INDEX_FILE, INDEX_TMP_FILE)?;
    }
    Ok(sizes)
}

/// Renames the index of the partition at `d` from `from` to `to`.
fn rename_index(
    m: &ShuffleMaster,
    d: &ShuffleDescriptor,
    from: &str,
    to: &str,
) -> Result<(), String> {
    let dir = m
        .partition_dir("register-partition-with-producer", &d.location)
        .map_err(|e| said(&e))?;
    let opened = dir.open().map_err(|e| e.to_string())?;
    opened
        .rename(from, &opened, to)
        .map_err(|e| format!("cannot rename {from} to {to} in {}: {e}", d.location))
}

/// Finishes a partition [`write_partition`] left incomplete.
fn mark_complete(m: &ShuffleMaster, d: &ShuffleDescriptor) -> Result<(), String> {
    rename_index(m, d, INDEX_TMP_FILE, INDEX_FILE)
}

/// What the shuffle master reports: `(producer subtask, bytes per subpartition)`, sorted.
fn report(m: &mut ShuffleMaster, remaining_ms: u64) -> Result<Vec<(u32, Vec<u64>)>, String> {
    let expected = [partition(0).id, partition(1).id];
    let mut got: Vec<_> = m
        .get_partitions_with_metrics(JOB_ID, &expected, remaining_ms)
        .map_err(|e| said(&e))?
        .into_iter()
        .map(|p| (p.descriptor.id.producer.subtask, p.bytes_per_subpartition))
        .collect();
    got.sort();
    Ok(got)
}

/// Registers partitions 0 and 1 and checks the descriptors.
fn register_two(m: &mut ShuffleMaster) -> Result<[ShuffleDescriptor; 2], String> {
    let mut out = Vec::new();
    for subtask in 0..2 {
        let d = m
            .register_partition_with_producer(JOB_ID, &partition(subtask), &producer())
            .map_err(|e| said(&e))?;
        out.push(d);
    }
    if out[0].location == out[1].location {
        return Err(format!(
            "two partitions got the same location {}",
            out[0].location
        ));
    }
    Ok([out[0].clone(), out[1].clone()])
}

fn shuffle_checks(plugin: &LoadedPlugin) -> Vec<Check> {
    let mut checks = Vec::new();
    checks.push(check(
        "create-and-register-job",
        "`create` with the configuration and `register-job` succeed",
        Box::new(|| registered(plugin).map(|_| None)),
    ));
    checks.push(check(
        "register-partition",
        "each partition gets its own location inside a writable granted directory, with its id and subpartition count",
        Box::new(|| {
            let mut m = registered(plugin)?;
            register_two(&mut m).map(|_| None)
        }),
    ));
    checks.push(check(
        "report-complete-partitions",
        "`get-partitions-with-metrics` reports the complete partitions (those with an `index`) with their bytes per subpartition from it, and no other",
        Box::new(|| report_complete_partitions(plugin)),
    ));
    checks.push(check(
        "release",
        "after `release-partition-externally`, the partition is no longer reported",
        Box::new(|| release(plugin)),
    ));
    if plugin.supports_batch_snapshot() {
        checks.push(check(
            "batch-snapshot-restore",
            "a new instance restored from the snapshots (the first one full) reports the partitions registered before them",
            Box::new(|| shuffle_snapshot_restore(plugin)),
        ));
    } else {
        checks.push(check(
            "batch-snapshot-restore",
            "",
            Box::new(|| {
                Ok(Some(
                    "the plugin does not support batch snapshots (the host then disables progress recovery for the job)"
                        .into(),
                ))
            }),
        ));
        checks.push(check(
            "no-snapshot-is-an-error-value",
            "without batch-snapshot support, `snapshot-state` returns an error value (it does not trap)",
            Box::new(|| {
                let mut m = registered(plugin)?;
                no_snapshot(m.snapshot_state(JOB_ID))
            }),
        ));
    }
    checks
}

/// `report-complete-partitions`: of two partitions written, only the one
/// with an `index` is reported, with its bytes per subpartition.
fn report_complete_partitions(plugin: &LoadedPlugin) -> Result<Option<String>, String> {
    let mut m = registered(plugin)?;
    let [d0, d1] = register_two(&mut m)?;
    let sizes = write_partition(&m, &d0, &[3, 5], true)?;
    write_partition(&m, &d1, &[4, 4], false)?;
    let got = report(&mut m, 1000)?;
    if got != vec![(0, sizes.clone())] {
        return Err(format!(
            "reported (producer subtask, bytes per subpartition) {got:?}; expected [(0, {sizes:?})]: partition 1 has no index"
        ));
    }
    Ok(None)
}

/// `release`: a partition released externally is no longer reported; the
/// job is then unregistered.
fn release(plugin: &LoadedPlugin) -> Result<Option<String>, String> {
    let mut m = registered(plugin)?;
    let [d0, d1] = register_two(&mut m)?;
    write_partition(&m, &d0, &[1, 2], true)?;
    let sizes = write_partition(&m, &d1, &[2, 1], true)?;
    m.release_partition_externally(&d0).map_err(|e| said(&e))?;
    let got = report(&mut m, 0)?;
    if got != vec![(1, sizes.clone())] {
        return Err(format!(
            "after releasing partition 0, reported {got:?}; expected [(1, {sizes:?})]"
        ));
    }
    m.unregister_job(JOB_ID).map_err(|e| said(&e))?;
    Ok(None)
}

/// `batch-snapshot-restore` of a shuffle master: a fresh instance restored
/// from a full then an incremental snapshot reports the partitions
/// registered before them.
fn shuffle_snapshot_restore(plugin: &LoadedPlugin) -> Result<Option<String>, String> {
    let mut m = registered(plugin)?;
    let d0 = m
        .register_partition_with_producer(JOB_ID, &partition(0), &producer())
        .map_err(|e| said(&e))?;
    let first = m.snapshot_state(JOB_ID).map_err(|e| said(&e))?;
    if first.incremental {
        return Err(
            "the first snapshot is incremental; it must be full (a restore starts at the last full one)"
                .into(),
        );
    }
    let d1 = m
        .register_partition_with_producer(JOB_ID, &partition(1), &producer())
        .map_err(|e| said(&e))?;
    let second = m.snapshot_state(JOB_ID).map_err(|e| said(&e))?;
    let sizes0 = write_partition(&m, &d0, &[3, 5], true)?;
    let sizes1 = write_partition(&m, &d1, &[4, 4], false)?;
    let mut fresh = registered(plugin)?;
    fresh
        .restore_state(vec![first, second])
        .map_err(|e| said(&e))?;
    fresh
        .notify_partition_recovery_started(JOB_ID)
        .map_err(|e| said(&e))?;
    mark_complete(&m, &d1)?;
    let got = report(&mut fresh, 1000)?;
    let want = vec![(0, sizes0), (1, sizes1)];
    if got != want {
        return Err(format!("restored, reported {got:?}; expected {want:?}"));
    }
    Ok(None)
}
