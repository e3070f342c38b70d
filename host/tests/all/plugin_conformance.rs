//! One conformance suite for every sample plugin of a kind, whatever its
//! language: the Rust, Python and JavaScript split enumerators and the Rust
//! and Python shuffle masters run the same checks through the real host —
//! split hand-out, add-splits-back, batch snapshot → restore round trips,
//! error values, and behaviour under the sandbox limits.
//!
//! The contract checks any plugin must pass live in library code,
//! `coordhost::kit::conformance`, which `coordhost plugin test` runs for
//! authors; the first test here runs them on every sample. The other tests
//! check what the samples promise beyond the contract (exact ranges and
//! orders, incremental snapshots, deleting released data, sandbox limits).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use coordhost::shuffle::PartitionWriter;

use crate::support::{grant, host, spec};
use coordhost::plugin::{
    EnumeratorAction, ExecutionAttemptId, PartitionDescriptor, PluginError, PluginFailure,
    PluginKind, PluginSpec, ProducerDescriptor, ResultPartitionId, ShuffleDescriptor, Split,
    SplitEnumerator, SplitPayload,
};

/// Snapshot-capable file enumerators, one per language.
const FILE_ENUMERATORS: [&str; 3] = ["file-enumerator", "py-enumerator", "js-enumerator"];
/// Snapshot-capable shuffle masters, one per language.
const SHUFFLE_MASTERS: [&str; 2] = ["local-shuffle", "py-shuffle"];

#[test]
fn every_sample_plugin_passes_the_contract_checks_of_plugin_test() {
    let dir = input_dir();
    let root = tempfile::Builder::new()
        .prefix("coordhost-shuffle")
        .tempdir()
        .unwrap();
    let mut all: Vec<PluginSpec> = FILE_ENUMERATORS
        .iter()
        .map(|n| enumerator_spec(n, dir.path(), 8))
        .chain(SHUFFLE_MASTERS.iter().map(|n| shuffle_spec(n, root.path())))
        .collect();
    all.push(shuffle_spec("memory-shuffle", root.path()));
    all.push(spec(
        "static-enumerator",
        PluginKind::SplitEnumerator,
        &[("split.0", "first"), ("split.1", "second\nline")],
    ));
    for s in all {
        let plugin = host().load(&s).unwrap();
        let report = coordhost::kit::conformance::run(&plugin);
        assert!(report.passed(), "{}:\n{report}", s.name);
        // Every check ran: none stopped early, and the snapshot checks
        // match the plugin's answer.
        let expected = match (s.kind, plugin.supports_batch_snapshot()) {
            (PluginKind::SplitEnumerator, true) => 7,
            (PluginKind::SplitEnumerator, false) | (PluginKind::ShuffleMaster, false) => 6,
            (PluginKind::ShuffleMaster, true) => 5,
            (PluginKind::ScalarFunction | PluginKind::SourceReader, _) => {
                panic!(
                    "{}: no scalar function or source reader is listed here",
                    s.name
                )
            }
        };
        assert_eq!(report.checks.len(), expected, "{}:\n{report}", s.name);
    }
}

/// A folder of three text files: 10, 25 and 7 bytes.
fn input_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("coordhost-input")
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("a.txt"), "aaaa\nbbbb\n").unwrap();
    std::fs::write(dir.path().join("b.txt"), "0123456789\n0123456789\nxx\n").unwrap();
    std::fs::write(dir.path().join("c.txt"), "cc\ndd\ne").unwrap();
    std::fs::write(dir.path().join(".hidden"), "never listed").unwrap();
    dir
}

fn enumerator_spec(name: &str, dir: &Path, split_bytes: u64) -> PluginSpec {
    let mut s = spec(
        name,
        PluginKind::SplitEnumerator,
        &[
            ("dir", dir.to_str().unwrap()),
            ("split-bytes", &split_bytes.to_string()),
        ],
    );
    s.dirs.push(grant(dir, false));
    s
}

fn assigned(actions: &[EnumeratorAction]) -> Vec<(u32, Split)> {
    actions
        .iter()
        .flat_map(|a| match a {
            EnumeratorAction::Assign { subtask, splits } => {
                splits.iter().map(|s| (*subtask, s.clone())).collect()
            }
            EnumeratorAction::NoMoreSplits { .. } => Vec::new(),
        })
        .collect()
}

/// Requests splits for `subtask` until the enumerator says no more.
fn drain(e: &mut SplitEnumerator, subtask: u32) -> Vec<Split> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let actions = e.handle_split_request(subtask, Some("localhost")).unwrap();
        if actions.contains(&EnumeratorAction::NoMoreSplits { subtask }) {
            return out;
        }
        let got = assigned(&actions);
        assert_eq!(got.len(), 1, "one split per request");
        assert_eq!(got[0].0, subtask, "assigned to the asking subtask");
        out.push(got[0].1.clone());
    }
    panic!("the enumerator never said no more splits");
}

fn range(split: &Split) -> (String, u64, u64) {
    match &split.payload {
        SplitPayload::FileRange(r) => (r.path.clone(), r.start, r.length),
        SplitPayload::Inline(text) => panic!("a file enumerator gave an inline split {text:?}"),
    }
}

#[test]
fn every_file_enumerator_cuts_files_into_ranges_and_hands_each_out_once() {
    let dir = input_dir();
    for name in FILE_ENUMERATORS {
        let plugin = host().load(&enumerator_spec(name, dir.path(), 8)).unwrap();
        assert!(plugin.supports_batch_snapshot(), "{name}");
        let mut e = plugin.split_enumerator(2).unwrap();
        assert!(
            e.start().unwrap().is_empty(),
            "{name}: start assigns nothing"
        );
        e.add_reader(0).unwrap();
        e.add_reader(1).unwrap();
        // 10 B → 2 splits, 25 B → 4, 7 B → 1.
        assert_eq!(e.unassigned_splits().unwrap(), 7, "{name}");
        let mut all = drain(&mut e, 0);
        all.extend(drain(&mut e, 1));
        assert_eq!(e.unassigned_splits().unwrap(), 0, "{name}");
        let ranges: Vec<_> = all.iter().map(range).collect();
        let file = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
        let expected = vec![
            (file("a.txt"), 0, 8),
            (file("a.txt"), 8, 2),
            (file("b.txt"), 0, 8),
            (file("b.txt"), 8, 8),
            (file("b.txt"), 16, 8),
            (file("b.txt"), 24, 1),
            (file("c.txt"), 0, 7),
        ];
        assert_eq!(
            ranges, expected,
            "{name}: ranges in file order covering every byte once"
        );
        let ids: BTreeSet<_> = all.iter().map(|s| s.id.clone()).collect();
        assert_eq!(ids.len(), 7, "{name}: split ids are unique");
        assert!(
            all[0].id.starts_with("a.txt:"),
            "{name}: id is <file>:<index>, got {}",
            all[0].id
        );
    }
}

#[test]
fn every_file_enumerator_hands_splits_added_back_out_again_first() {
    let dir = input_dir();
    for name in FILE_ENUMERATORS {
        let mut e = host()
            .load(&enumerator_spec(name, dir.path(), 8))
            .unwrap()
            .split_enumerator(2)
            .unwrap();
        e.start().unwrap();
        e.add_reader(0).unwrap();
        let first = assigned(&e.handle_split_request(0, None).unwrap());
        let second = assigned(&e.handle_split_request(0, None).unwrap());
        let back = vec![first[0].1.clone(), second[0].1.clone()];
        e.add_splits_back(back.clone(), 0).unwrap();
        assert_eq!(e.unassigned_splits().unwrap(), 7, "{name}");
        // Splits go only to registered readers (WIT `assign-splits`).
        e.add_reader(1).unwrap();
        let again: Vec<_> = (0..2)
            .map(|_| {
                assigned(&e.handle_split_request(1, None).unwrap())[0]
                    .1
                    .clone()
            })
            .collect();
        assert_eq!(again, back, "{name}: returned splits come first, in order");
    }
}

#[test]
fn every_file_enumerator_restores_from_its_batch_snapshot_to_the_same_state() {
    let dir = input_dir();
    for name in FILE_ENUMERATORS {
        let plugin = host().load(&enumerator_spec(name, dir.path(), 8)).unwrap();
        let mut e = plugin.split_enumerator(1).unwrap();
        e.start().unwrap();
        e.add_reader(0).unwrap();
        e.handle_split_request(0, None).unwrap();
        e.handle_split_request(0, None).unwrap();
        let snapshot = e.snapshot_state(-1).unwrap();
        let rest_original = drain(&mut e, 0);

        // Files added after the snapshot must not appear: a restored
        // enumerator does not list the directory again.
        std::fs::write(dir.path().join("d.txt"), "late\n").unwrap();
        let mut restored = plugin.restore_split_enumerator(1, &snapshot).unwrap();
        restored.start().unwrap();
        restored.add_reader(0).unwrap();
        assert_eq!(restored.unassigned_splits().unwrap(), 5, "{name}");
        assert_eq!(
            drain(&mut restored, 0),
            rest_original,
            "{name}: same splits, same order"
        );
        std::fs::remove_file(dir.path().join("d.txt")).unwrap();
    }
}

#[test]
fn every_file_enumerator_reports_bad_config_and_ungranted_directories_as_error_values() {
    let dir = input_dir();
    for name in FILE_ENUMERATORS {
        let no_dir = spec(name, PluginKind::SplitEnumerator, &[]);
        match host().load(&no_dir).unwrap().split_enumerator(1) {
            Err(PluginError::Returned {
                error: PluginFailure::InvalidConfig(msg),
                ..
            }) => {
                assert!(msg.contains("dir"), "{name}: names the key: {msg}");
            }
            other => panic!("{name}: expected invalid-config, got {:?}", other.err()),
        }
        let mut ungranted = enumerator_spec(name, dir.path(), 8);
        ungranted.dirs.clear();
        let result = host()
            .load(&ungranted)
            .unwrap()
            .split_enumerator(1)
            .and_then(|mut e| e.start());
        // `file-enumerator` checks `dir` in `create` (invalid-config: bad
        // input before anything runs); the Python and JavaScript ones list
        // it first at `start` (io). Either way an error value naming it.
        match result {
            Err(PluginError::Returned {
                error: PluginFailure::Io(msg) | PluginFailure::InvalidConfig(msg),
                ..
            }) => {
                assert!(
                    msg.contains(dir.path().to_str().unwrap()),
                    "{name}: names the directory: {msg}"
                );
            }
            other => panic!("{name}: expected an io or invalid-config error value, got {other:?}"),
        }
    }
}

/// A misspelt config key is refused in `create` by every sample, naming the
/// key, instead of being ignored while its default applies.
#[test]
fn every_sample_plugin_refuses_a_config_key_it_does_not_read() {
    let dir = input_dir();
    let root = tempfile::Builder::new()
        .prefix("coordhost-shuffle")
        .tempdir()
        .unwrap();
    let misspelt = |mut s: PluginSpec, key: &str| {
        s.config.push((key.to_string(), "1".to_string()));
        s
    };
    let check = |name: &str, result: Result<(), PluginError>, key: &str| match result {
        Err(PluginError::Returned {
            error: PluginFailure::InvalidConfig(msg),
            ..
        }) => assert!(
            msg.contains(&format!("unknown config key `{key}`")),
            "{name}: names the key: {msg}"
        ),
        other => panic!("{name}: expected invalid-config, got {other:?}"),
    };
    for name in FILE_ENUMERATORS {
        let s = misspelt(enumerator_spec(name, dir.path(), 8), "split-byte");
        check(
            name,
            host().load(&s).unwrap().split_enumerator(1).map(|_| ()),
            "split-byte",
        );
    }
    for name in SHUFFLE_MASTERS.into_iter().chain(["memory-shuffle"]) {
        let s = misspelt(shuffle_spec(name, root.path()), "rooot");
        check(
            name,
            host().load(&s).unwrap().shuffle_master().map(|_| ()),
            "rooot",
        );
    }
}

#[test]
fn every_sample_plugin_obeys_its_memory_cap_with_a_clear_error() {
    let dir = input_dir();
    let all: Vec<PluginSpec> = FILE_ENUMERATORS
        .iter()
        .map(|n| enumerator_spec(n, dir.path(), 8))
        .chain(SHUFFLE_MASTERS.iter().map(|n| shuffle_spec(n, dir.path())))
        .collect();
    for base in all {
        let name = base.name.clone();
        // Obeyed: default limits work (checked by the tests above); broken:
        // a 64 KiB cap is below what any of them needs to start. (Deadlines
        // are checked with the looping `faulty-enumerator` in plugin_sandbox.rs.)
        let mut tiny = base.clone();
        tiny.limits.memory_bytes = 64 << 10;
        let err = match tiny.kind {
            PluginKind::SplitEnumerator => {
                host().load(&tiny).and_then(|p| p.split_enumerator(1)).err()
            }
            PluginKind::ShuffleMaster => host().load(&tiny).and_then(|p| p.shuffle_master()).err(),
            PluginKind::ScalarFunction => {
                host().load(&tiny).and_then(|p| p.scalar_function()).err()
            }
            PluginKind::SourceReader => host().load(&tiny).err(),
        };
        let err = err.unwrap_or_else(|| panic!("{name}: started inside 64 KiB"));
        assert!(
            matches!(err, PluginError::MemoryCap { .. }),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains(&name), "{name}: {err}");
    }
}

#[test]
fn every_file_enumerator_is_interrupted_at_its_deadline_and_obeys_the_default_one() {
    let dir = tempfile::Builder::new()
        .prefix("coordhost-many")
        .tempdir()
        .unwrap();
    for i in 0..20_000 {
        std::fs::write(dir.path().join(format!("f{i:05}.txt")), "x\n").unwrap();
    }
    for name in FILE_ENUMERATORS {
        // Broken: listing 20 000 files cannot finish within 1 ms, so the
        // deadline interrupts it — at instantiation for slow starters.
        let mut hurried = enumerator_spec(name, dir.path(), 8);
        hurried.limits.call_timeout = Duration::from_millis(1);
        let began = std::time::Instant::now();
        let outcome = host()
            .load(&hurried)
            .and_then(|p| p.split_enumerator(1))
            .and_then(|mut e| e.start());
        match outcome {
            Err(PluginError::Deadline {
                plugin,
                timeout_ms: 1,
                ..
            }) => assert_eq!(plugin, name),
            other => panic!("{name}: expected a deadline error, got {other:?}"),
        }
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "{name}: the host waited {:?}",
            began.elapsed()
        );
        // Obeyed: a deadline with room for the work. (The JavaScript
        // enumerator needs more than the default 5 s for 20 000 files.)
        let mut patient = enumerator_spec(name, dir.path(), 8);
        patient.limits.call_timeout = Duration::from_secs(120);
        let mut e = host().load(&patient).unwrap().split_enumerator(1).unwrap();
        let began = std::time::Instant::now();
        e.start().unwrap();
        eprintln!("{name}: start over 20 000 files took {:?}", began.elapsed());
        assert_eq!(e.unassigned_splits().unwrap(), 20_000, "{name}");
    }
}

#[test]
fn the_static_enumerator_hands_out_its_configured_splits_and_cannot_snapshot() {
    let s = spec(
        "static-enumerator",
        PluginKind::SplitEnumerator,
        &[("split.1", "second\nline"), ("split.0", "first")],
    );
    let plugin = host().load(&s).unwrap();
    assert!(!plugin.supports_batch_snapshot());
    let mut e = plugin.split_enumerator(1).unwrap();
    e.start().unwrap();
    e.add_reader(0).unwrap();
    let texts: Vec<_> = drain(&mut e, 0)
        .into_iter()
        .map(|s| match s.payload {
            SplitPayload::Inline(t) => t,
            SplitPayload::FileRange(r) => panic!("{r:?}"),
        })
        .collect();
    assert_eq!(texts, vec!["first".to_string(), "second\nline".to_string()]);
    assert!(matches!(
        e.snapshot_state(-1),
        Err(PluginError::Returned { .. })
    ));
}

fn shuffle_spec(name: &str, root: &Path) -> PluginSpec {
    let mut s = spec(
        name,
        PluginKind::ShuffleMaster,
        &[("root", root.to_str().unwrap())],
    );
    s.dirs.push(grant(root, true));
    s
}

fn partition(data_set: &str, vertex: &str, subtask: u32, attempt: u32) -> PartitionDescriptor {
    PartitionDescriptor {
        id: ResultPartitionId {
            intermediate_data_set: data_set.to_string(),
            producer: ExecutionAttemptId {
                job_vertex: vertex.to_string(),
                subtask,
                attempt,
            },
        },
        num_subpartitions: 2,
    }
}

/// Writes a partition of `job` with the host's writer (its index naming
/// `d`'s producer): `rows[i]` rows into
/// subpartition `i`, `data`, then `index`; unless `complete`, the index is
/// left as `index.tmp` (a producer that died before its rename). Returns
/// the bytes per subpartition the writer reported.
fn produce(job: &str, d: &ShuffleDescriptor, rows: [usize; 2], complete: bool) -> Vec<u64> {
    let location = Path::new(&d.location);
    let schema = Arc::new(Schema::new(vec![Field::new("w", DataType::Utf8, false)]));
    let producer = coordhost::shuffle::PartitionProducer {
        job: job.into(),
        data_set: d.id.intermediate_data_set.clone(),
        job_vertex: d.id.producer.job_vertex.clone(),
        subtask: d.id.producer.subtask,
        attempt: d.id.producer.attempt,
    };
    let mut w = PartitionWriter::create(location, 2, producer).unwrap();
    for (sub, n) in rows.into_iter().enumerate() {
        let words = StringArray::from_iter_values((0..n).map(|i| format!("{sub}-{i}")));
        let b = RecordBatch::try_new(schema.clone(), vec![Arc::new(words) as ArrayRef]).unwrap();
        w.write_batch(sub as u32, &b).unwrap();
    }
    let sizes = w.finish().unwrap();
    if !complete {
        std::fs::rename(location.join("index"), location.join("index.tmp")).unwrap();
    }
    sizes
}

fn producer() -> ProducerDescriptor {
    ProducerDescriptor {
        worker_id: "worker-0".into(),
        hostname: Some("localhost".into()),
    }
}

#[test]
fn every_shuffle_master_places_partitions_reports_complete_ones_and_restores_from_snapshots() {
    for name in SHUFFLE_MASTERS {
        let root = tempfile::Builder::new()
            .prefix("coordhost-shuffle")
            .tempdir()
            .unwrap();
        let plugin = host().load(&shuffle_spec(name, root.path())).unwrap();
        assert!(plugin.supports_batch_snapshot(), "{name}");
        let mut m = plugin.shuffle_master().unwrap();
        m.register_job("job-1").unwrap();
        let p0 = partition("source->middle", "source", 0, 0);
        let p1 = partition("source->middle", "source", 1, 0);
        let d0 = m
            .register_partition_with_producer("job-1", &p0, &producer())
            .unwrap();
        assert!(
            d0.location.starts_with(root.path().to_str().unwrap()),
            "{name}: {}",
            d0.location
        );
        assert_eq!(
            (d0.id.clone(), d0.num_subpartitions),
            (p0.id.clone(), 2),
            "{name}"
        );
        let full = m.snapshot_state("job-1").unwrap();
        assert!(!full.incremental, "{name}: the first snapshot is full");
        let d1 = m
            .register_partition_with_producer("job-1", &p1, &producer())
            .unwrap();
        assert_ne!(d0.location, d1.location, "{name}");
        let incremental = m.snapshot_state("job-1").unwrap();
        assert!(
            incremental.incremental,
            "{name}: later snapshots are incremental"
        );
        let sizes0 = produce("job-1", &d0, [3, 5], true);
        let sizes1 = produce("job-1", &d1, [4, 4], false);
        assert!(sizes0.iter().all(|&b| b > 0), "{sizes0:?}");

        let expected = [p0.id.clone(), p1.id.clone()];
        let report = m
            .get_partitions_with_metrics("job-1", &expected, 1000)
            .unwrap();
        assert_eq!(report.len(), 1, "{name}: only the complete partition");
        assert_eq!(
            (
                report[0].descriptor.id.clone(),
                report[0].bytes_per_subpartition.clone()
            ),
            (p0.id.clone(), sizes0.clone())
        );

        // A new instance (a restarted coordinator) knows only what it restores.
        let mut fresh = plugin.shuffle_master().unwrap();
        fresh.register_job("job-1").unwrap();
        assert!(
            fresh
                .get_partitions_with_metrics("job-1", &expected, 0)
                .unwrap()
                .is_empty(),
            "{name}"
        );
        fresh.restore_state(vec![full, incremental]).unwrap();
        let loc1 = Path::new(&d1.location);
        std::fs::rename(loc1.join("index.tmp"), loc1.join("index")).unwrap();
        let report = fresh
            .get_partitions_with_metrics("job-1", &expected, 0)
            .unwrap();
        let mut sizes: Vec<_> = report
            .iter()
            .map(|p| p.bytes_per_subpartition.clone())
            .collect();
        sizes.sort();
        assert_eq!(
            sizes,
            {
                let mut want = vec![sizes0.clone(), sizes1.clone()];
                want.sort();
                want
            },
            "{name}: both partitions after restore"
        );

        fresh.release_partition_externally(&d0).unwrap();
        assert!(
            !Path::new(&d0.location).exists(),
            "{name}: release deletes the data"
        );
        let report = fresh
            .get_partitions_with_metrics("job-1", &expected, 0)
            .unwrap();
        assert_eq!(report.len(), 1, "{name}");
        fresh.unregister_job("job-1").unwrap();
    }
}

#[test]
fn every_shuffle_master_leaves_out_a_partition_whose_index_or_data_is_damaged() {
    for name in SHUFFLE_MASTERS {
        let root = tempfile::Builder::new()
            .prefix("coordhost-shuffle")
            .tempdir()
            .unwrap();
        let plugin = host().load(&shuffle_spec(name, root.path())).unwrap();
        let mut m = plugin.shuffle_master().unwrap();
        m.register_job("job-1").unwrap();
        let p = partition("source->middle", "source", 0, 0);
        let d = m
            .register_partition_with_producer("job-1", &p, &producer())
            .unwrap();
        let location = Path::new(&d.location);
        let expected = [p.id.clone()];
        let mut reported = |what: &str| {
            let report = m
                .get_partitions_with_metrics("job-1", &expected, 0)
                .unwrap_or_else(|e| panic!("{name}, {what}: {e}"));
            report.into_iter().map(|p| p.bytes_per_subpartition).next()
        };
        let sizes = produce("job-1", &d, [6, 2], true);
        assert_eq!(reported("intact"), Some(sizes.clone()), "{name}");
        let index = std::fs::read(location.join("index")).unwrap();
        let data = std::fs::read(location.join("data")).unwrap();
        let damages: [(&str, &str, Vec<u8>); 5] = [
            ("a flipped index byte", "index", {
                let mut b = index.clone();
                b[20] ^= 1;
                b
            }),
            ("a cut index", "index", index[..index.len() - 1].to_vec()),
            ("a flipped index checksum", "index", {
                let mut b = index.clone();
                *b.last_mut().unwrap() ^= 1;
                b
            }),
            ("a cut data file", "data", data[..data.len() - 1].to_vec()),
            (
                "a longer data file",
                "data",
                [data.as_slice(), b"x"].concat(),
            ),
        ];
        for (what, file, bytes) in damages {
            std::fs::write(location.join(file), &bytes).unwrap();
            assert_eq!(reported(what), None, "{name}: {what} is left out");
            std::fs::write(location.join("index"), &index).unwrap();
            std::fs::write(location.join("data"), &data).unwrap();
            assert_eq!(reported("restored"), Some(sizes.clone()), "{name}");
        }
        std::fs::remove_file(location.join("data")).unwrap();
        assert_eq!(reported("no data"), None, "{name}: a missing data file");
    }
}

#[test]
fn the_memory_shuffle_cannot_snapshot_and_forgets_partitions_with_its_instance() {
    let root = tempfile::Builder::new()
        .prefix("coordhost-shuffle")
        .tempdir()
        .unwrap();
    let plugin = host()
        .load(&shuffle_spec("memory-shuffle", root.path()))
        .unwrap();
    assert!(!plugin.supports_batch_snapshot());
    let mut m = plugin.shuffle_master().unwrap();
    m.register_job("j").unwrap();
    let p = partition("a->b", "a", 0, 0);
    let d = m
        .register_partition_with_producer("j", &p, &producer())
        .unwrap();
    produce("j", &d, [1, 2], true);
    assert_eq!(
        m.get_partitions_with_metrics("j", std::slice::from_ref(&p.id), 0)
            .unwrap()
            .len(),
        1
    );
    assert!(matches!(
        m.snapshot_state("j"),
        Err(PluginError::Returned { .. })
    ));
    let mut fresh = plugin.shuffle_master().unwrap();
    fresh.register_job("j").unwrap();
    assert!(
        fresh
            .get_partitions_with_metrics("j", &[p.id], 0)
            .unwrap()
            .is_empty()
    );
}
