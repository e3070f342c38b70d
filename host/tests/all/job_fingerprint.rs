//! Which job-file fields the job fingerprint covers (issue 12.1).
//!
//! A job file that uses every field is parsed, and every leaf of its TOML
//! is flipped in turn. Each leaf's path must be in [`RULES`], which says
//! which side it is on: a field that decides how data is laid out or routed
//! (subpartition counts, hash keys, operator chains, split sizes, plugins)
//! must change the fingerprint — a data directory written under the old
//! value is then refused; a tuning knob that cannot change a byte of output
//! must not. A leaf without a rule fails the test, so a new field cannot be
//! forgotten. (The fingerprint function itself destructures every field of
//! the configuration without `..`, so a new field of the parsed
//! configuration does not compile until it is put on a side:
//! `host/src/job/recorder.rs`.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use coordhost::config::{JobConfig, LoadOptions, parse_job};
use coordhost::events::job_log_dir;
use coordhost::job::job_fingerprint;
use toml::Value;

/// The job file: three sources (CSV, lines, Parquet), an `auto` consumer and a fixed one, every
/// operator, every plugin and recovery field.
const FULL: &str = r#"
[job]
name = "full"
workers = 2
max-attempts = 3

[recovery]
enabled = true
previous-worker-timeout-ms = 1000
snapshot-min-pause-ms = 100

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "a.wasm"
kind = "split-enumerator"
config = { dir = "in", split-bytes = 1000, pattern = ".csv", recursive = true }
dirs = [{ path = "in", writable = false }]
limits = { call-timeout-ms = 5000, memory-mib = 64, on-trap = "rebuild", split-wait-ms = 60000 }

[plugins.lines]
component = "b.wasm"
kind = "split-enumerator"
config = { dir = "in2", split-bytes = 2000 }
dirs = [{ path = "in2", writable = false }]

[plugins.pq]
component = "a.wasm"
kind = "split-enumerator"
config = { dir = "in3", row-groups-per-split = 2 }
dirs = [{ path = "in3", writable = false }]

[plugins.shuffle]
component = "c.wasm"
kind = "shuffle-master"
config = { root = "${data_dir}/shuffle" }
dirs = [{ path = "${data_dir}/shuffle", writable = true }]

[[vertices]]
id = "v_scan"
source = "files"
parallelism = 4
max-parallelism = 8
bytes-per-task = 100
max-task-bytes = 5000
record-delay-us = 10
operators = [
  { op = "read-csv", columns = ["k", "n", "x"], delimiter = ";", skip-header = true },
  { op = "filter", column = "x", cmp = "<=", value = "5", type = "number" },
  { op = "project", columns = ["k", "n"] },
  { op = "aggregate", mode = "partial", key = ["k"], aggregates = [
      { fn = "count", as = "c" }, { fn = "sum", column = "n", as = "s" } ] },
]

[[vertices]]
id = "v_sum"
parallelism = "auto"
max-parallelism = 8
bytes-per-task = 1000
record-delay-us = 5
operators = [
  { op = "aggregate", mode = "final", key = ["k"], decimals = 2, aggregates = [
      { fn = "count", as = "c" }, { fn = "sum", as = "s" } ] },
  { op = "write-csv", path = "${data_dir}/out/sum", header = true, delimiter = ",", overwrite = false },
]

[[vertices]]
id = "v_tok"
source = "lines"
parallelism = 2
operators = [
  { op = "read-lines" },
  { op = "tokenize", column = "line", as = "word", lowercase = true },
  { op = "aggregate", mode = "partial", key = ["word"], aggregates = [{ fn = "count", as = "cnt" }] },
]

[[vertices]]
id = "v_cnt"
parallelism = 3
max-parallelism = 16
operators = [
  { op = "aggregate", mode = "final", key = ["word"], aggregates = [{ fn = "count", as = "cnt" }] },
  { op = "write-text", path = "${data_dir}/out/cnt", separator = " ", overwrite = true },
]

[[vertices]]
id = "v_pq"
source = "pq"
parallelism = 2
operators = [
  { op = "read-parquet", columns = ["p", "q"] },
  { op = "aggregate", key = ["p"], aggregates = [{ fn = "sum", column = "q", as = "sq" }] },
  { op = "write-csv", path = "${data_dir}/out/pq" },
]

[[edges]]
from = "v_scan"
to = "v_sum"
kind = "hash"
key = ["k"]

[[edges]]
from = "v_tok"
to = "v_cnt"
kind = "hash"
key = ["word"]
"#;

/// Which side of the fingerprint a field is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Decides layout or routing: the edit is refused (fingerprint changes).
    Layout,
    /// Tuning that cannot change a byte of output: fingerprint unchanged.
    Tuning,
    /// A reference whose flip may make the job invalid (refused before
    /// anything runs); if it stays valid, the fingerprint must change.
    LayoutOrInvalid,
    /// A column name, renamed everywhere: only the names a sink writes
    /// (a CSV header) reach the output, so only those change the fingerprint.
    ColumnName,
    /// `max-parallelism`: the subpartition count of an `auto` vertex's hash
    /// inputs (layout); unused by a fixed-parallelism vertex (tuning).
    LayoutIfAuto,
    /// The job's name: it names the data directory's job folder, so a renamed
    /// job never meets the old log (the fingerprint needs not cover it).
    JobFolder,
}

/// How a leaf is flipped.
#[derive(Debug, Clone, Copy)]
enum Flip {
    /// Integer + 1, boolean negated, string + "x".
    Plain,
    /// The first of these strings that differs from the current value.
    OneOf(&'static [&'static str]),
    /// Rename: every string leaf and `plugins` key equal to the value gets
    /// an "x" appended (a vertex id, a plugin name, a column name).
    Rename,
    /// `"auto"` becomes 3; a number grows by 1.
    Parallelism,
}

/// Every leaf path of a job file (keys under `plugins` and a plugin's
/// `config` as `*`, array elements as `[]`, operators as `[op=NAME]`).
const RULES: &[(&str, Side, Flip)] = &[
    ("job.name", Side::JobFolder, Flip::Plain),
    ("job.workers", Side::Tuning, Flip::Plain),
    ("job.max-attempts", Side::Tuning, Flip::Plain),
    ("recovery.enabled", Side::Tuning, Flip::Plain),
    (
        "recovery.previous-worker-timeout-ms",
        Side::Tuning,
        Flip::Plain,
    ),
    ("recovery.snapshot-min-pause-ms", Side::Tuning, Flip::Plain),
    ("shuffle.plugin", Side::Layout, Flip::Rename),
    ("plugins.*", Side::Layout, Flip::Rename),
    (
        "plugins.*.component",
        Side::Layout,
        Flip::OneOf(&["a.wasm", "b.wasm"]),
    ),
    (
        "plugins.*.kind",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["split-enumerator", "shuffle-master"]),
    ),
    // Split sizes, input folders, file patterns: the plugin's configuration.
    ("plugins.*.config.*", Side::Layout, Flip::Plain),
    ("plugins.*.dirs[].path", Side::Layout, Flip::Plain),
    ("plugins.*.dirs[].writable", Side::Layout, Flip::Plain),
    (
        "plugins.*.limits.call-timeout-ms",
        Side::Tuning,
        Flip::Plain,
    ),
    ("plugins.*.limits.memory-mib", Side::Tuning, Flip::Plain),
    (
        "plugins.*.limits.on-trap",
        Side::Tuning,
        Flip::OneOf(&["rebuild", "fail"]),
    ),
    ("vertices[].id", Side::Layout, Flip::Rename),
    (
        "vertices[].source",
        Side::Layout,
        Flip::OneOf(&["files", "lines"]),
    ),
    ("vertices[].parallelism", Side::Layout, Flip::Parallelism),
    (
        "vertices[].max-parallelism",
        Side::LayoutIfAuto,
        Flip::Plain,
    ),
    ("vertices[].bytes-per-task", Side::Tuning, Flip::Plain),
    // Which subtask reads which split, never which rows are read.
    ("vertices[].max-task-bytes", Side::Tuning, Flip::Plain),
    ("vertices[].record-delay-us", Side::Tuning, Flip::Plain),
    (
        "vertices[].operators[op=read-csv].columns[]",
        Side::ColumnName,
        Flip::Rename,
    ),
    (
        "vertices[].operators[op=read-csv].delimiter",
        Side::Layout,
        Flip::OneOf(&[";", ","]),
    ),
    (
        "vertices[].operators[op=read-csv].skip-header",
        Side::Layout,
        Flip::Plain,
    ),
    (
        "vertices[].operators[op=read-parquet].columns[]",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["r", "p"]),
    ),
    (
        "vertices[].operators[op=filter].column",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["k", "n"]),
    ),
    (
        "vertices[].operators[op=filter].cmp",
        Side::Layout,
        Flip::OneOf(&["<=", ">"]),
    ),
    (
        "vertices[].operators[op=filter].value",
        Side::Layout,
        Flip::OneOf(&["5", "7"]),
    ),
    (
        "vertices[].operators[op=filter].type",
        Side::Layout,
        Flip::OneOf(&["number", "string"]),
    ),
    (
        "vertices[].operators[op=project].columns[]",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["k", "n"]),
    ),
    (
        "vertices[].operators[op=aggregate].mode",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["partial", "final", "complete"]),
    ),
    (
        "vertices[].operators[op=aggregate].key[]",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["k", "n"]),
    ),
    (
        "vertices[].operators[op=aggregate].decimals",
        Side::Layout,
        Flip::Plain,
    ),
    (
        "vertices[].operators[op=aggregate].aggregates[].fn",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["count", "sum", "max"]),
    ),
    (
        "vertices[].operators[op=aggregate].aggregates[].column",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["n", "k"]),
    ),
    (
        "vertices[].operators[op=aggregate].aggregates[].as",
        Side::ColumnName,
        Flip::Rename,
    ),
    (
        "vertices[].operators[op=tokenize].column",
        Side::LayoutOrInvalid,
        Flip::Rename,
    ),
    (
        "vertices[].operators[op=tokenize].as",
        Side::ColumnName,
        Flip::Rename,
    ),
    (
        "vertices[].operators[op=tokenize].lowercase",
        Side::Layout,
        Flip::Plain,
    ),
    (
        "vertices[].operators[op=write-csv].path",
        Side::Layout,
        Flip::Plain,
    ),
    (
        "vertices[].operators[op=write-csv].header",
        Side::Layout,
        Flip::Plain,
    ),
    (
        "vertices[].operators[op=write-csv].delimiter",
        Side::Layout,
        Flip::OneOf(&[",", ";"]),
    ),
    (
        "vertices[].operators[op=write-text].path",
        Side::Layout,
        Flip::Plain,
    ),
    (
        "vertices[].operators[op=write-text].separator",
        Side::Layout,
        Flip::Plain,
    ),
    (
        "vertices[].operators[op=write-csv].overwrite",
        Side::Tuning,
        Flip::Plain,
    ),
    (
        "vertices[].operators[op=write-text].overwrite",
        Side::Tuning,
        Flip::Plain,
    ),
    ("plugins.*.limits.split-wait-ms", Side::Tuning, Flip::Plain),
    (
        "edges[].from",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["v_scan", "v_tok"]),
    ),
    (
        "edges[].to",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["v_sum", "v_cnt"]),
    ),
    (
        "edges[].kind",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["hash", "forward"]),
    ),
    (
        "edges[].key[]",
        Side::LayoutOrInvalid,
        Flip::OneOf(&["k", "word"]),
    ),
];

/// One step of a leaf's location in the TOML document.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// A leaf: where it is, its rule pattern, and whether it is a table key.
#[derive(Debug, Clone)]
struct Leaf {
    at: Vec<Step>,
    pattern: String,
    is_key: bool,
}

fn leaves(value: &Value, at: &mut Vec<Step>, pattern: &str, out: &mut Vec<Leaf>) {
    match value {
        Value::Table(t) => {
            for (k, v) in t {
                // The operator's `op` names the kind: part of the pattern.
                if k == "op" && pattern.ends_with(']') {
                    continue;
                }
                let wild = pattern == "plugins" || pattern.ends_with(".config");
                let name = if wild { "*" } else { k.as_str() };
                let sub = if pattern.is_empty() {
                    name.to_owned()
                } else {
                    format!("{pattern}.{name}")
                };
                at.push(Step::Key(k.clone()));
                if pattern == "plugins" {
                    out.push(Leaf {
                        at: at.clone(),
                        pattern: sub.clone(),
                        is_key: true,
                    });
                }
                leaves(v, at, &sub, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let sub = match v.get("op").and_then(Value::as_str) {
                    Some(op) => format!("{pattern}[op={op}]"),
                    None => format!("{pattern}[]"),
                };
                at.push(Step::Index(i));
                leaves(v, at, &sub, out);
                at.pop();
            }
        }
        _ => out.push(Leaf {
            at: at.clone(),
            pattern: pattern.to_owned(),
            is_key: false,
        }),
    }
}

fn get_mut<'a>(doc: &'a mut Value, at: &[Step]) -> &'a mut Value {
    at.iter().fold(doc, |v, step| match step {
        Step::Key(k) => v.get_mut(k.as_str()).expect("key"),
        Step::Index(i) => v.get_mut(*i).expect("index"),
    })
}

/// Renames every string leaf equal to `old` and every `plugins` key `old`.
fn rename_everywhere(doc: &mut Value, old: &str, new: &str) {
    match doc {
        Value::String(s) if s == old => *s = new.to_owned(),
        Value::Table(t) => {
            for (_, v) in t.iter_mut() {
                rename_everywhere(v, old, new);
            }
        }
        Value::Array(items) => {
            for v in items {
                rename_everywhere(v, old, new);
            }
        }
        _ => {}
    }
    if let Some(Value::Table(plugins)) = doc.get_mut("plugins")
        && let Some(p) = plugins.remove(old)
    {
        plugins.insert(new.to_owned(), p);
    }
}

/// The document with `leaf` flipped by `flip`, and the old value as text.
fn flipped(doc: &Value, leaf: &Leaf, flip: Flip) -> (Value, String) {
    let mut doc = doc.clone();
    if leaf.is_key {
        let Some(Step::Key(old)) = leaf.at.last() else {
            panic!("a key leaf ends in a key")
        };
        let new = format!("{old}x");
        rename_everywhere(&mut doc, old, &new);
        return (doc, old.clone());
    }
    let current = get_mut(&mut doc, &leaf.at).clone();
    let old = match &current {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let (Flip::Rename, Value::String(s)) = (flip, &current) {
        rename_everywhere(&mut doc, s, &format!("{s}x"));
        return (doc, old);
    }
    let value = get_mut(&mut doc, &leaf.at);
    match (flip, current) {
        (Flip::OneOf(options), Value::String(s)) => {
            let other = options
                .iter()
                .find(|o| **o != s)
                .unwrap_or_else(|| panic!("{}: no alternative to {s:?}", leaf.pattern));
            *value = Value::String((*other).to_owned());
        }
        (Flip::Parallelism, Value::String(s)) if s == "auto" => *value = Value::Integer(3),
        (Flip::Plain | Flip::Parallelism, Value::Integer(n)) => *value = Value::Integer(n + 1),
        (Flip::Plain, Value::Boolean(b)) => *value = Value::Boolean(!b),
        (Flip::Plain, Value::String(s)) => *value = Value::String(format!("{s}x")),
        (flip, v) => panic!("{}: cannot flip {v:?} with {flip:?}", leaf.pattern),
    }
    (doc, old)
}

struct Setup {
    _tmp: tempfile::TempDir,
    file: PathBuf,
    opts: LoadOptions,
}

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    for f in ["a.wasm", "b.wasm", "c.wasm"] {
        std::fs::write(tmp.path().join(f), b"\0asm\x0d\x00\x01\x00").expect("component stand-in");
    }
    for d in [
        "in",
        "in2",
        "in3",
        "inx",
        "in2x",
        "in3x",
        "data/shuffle",
        "data/shufflex",
    ] {
        std::fs::create_dir_all(tmp.path().join(d)).expect("dir");
    }
    let file = tmp.path().join("full.toml");
    let opts = LoadOptions {
        data_dir: tmp.path().join("data"),
        cache_dir: None,
        log_on_objects: false,
    };
    Setup {
        _tmp: tmp,
        file,
        opts,
    }
}

fn parse(s: &Setup, doc: &Value) -> Result<JobConfig, String> {
    let text = toml::to_string(doc).expect("serialize");
    parse_job(&s.file, &text, &s.opts).map_err(|e| e.to_string())
}

/// Column names a sink writes (the only names that reach the output).
fn sink_columns(config: &JobConfig) -> BTreeSet<String> {
    config
        .graph
        .vertices
        .iter()
        .filter_map(|v| v.sink.as_ref())
        .flat_map(|s| s.columns.iter().cloned())
        .collect()
}

/// Whether the vertex holding `leaf` has `auto` parallelism.
fn in_auto_vertex(doc: &Value, leaf: &Leaf) -> bool {
    let [Step::Key(top), Step::Index(i), ..] = leaf.at.as_slice() else {
        return false;
    };
    top == "vertices" && doc["vertices"][*i]["parallelism"].as_str() == Some("auto")
}

#[test]
fn every_job_file_field_is_either_fingerprinted_or_tuning() {
    let s = setup();
    let doc: Value = toml::from_str(FULL).expect("the full job file is TOML");
    let base = parse(&s, &doc).expect("the full job file is valid");
    let base_fp = job_fingerprint(&base, &s.opts.data_dir);
    let sink_names = sink_columns(&base);
    let mut found = Vec::new();
    leaves(&doc, &mut Vec::new(), "", &mut found);
    let mut used: BTreeSet<&str> = BTreeSet::new();
    let mut wrong = Vec::new();
    let mut layout_refused = 0;
    for leaf in &found {
        let Some(&(pattern, side, flip)) = RULES.iter().find(|r| r.0 == leaf.pattern) else {
            wrong.push(format!(
                "`{}` is on no side: add it to RULES (fingerprinted or tuning) and to the fingerprint in host/src/job/recorder.rs",
                leaf.pattern
            ));
            continue;
        };
        used.insert(pattern);
        let (edited, old) = flipped(&doc, leaf, flip);
        let at = format!("{} ({old:?} flipped)", leaf.pattern);
        let parsed = parse(&s, &edited);
        let changed = parsed
            .as_ref()
            .map(|c| job_fingerprint(c, &s.opts.data_dir) != base_fp)
            .ok();
        let expect_changed = match side {
            Side::Layout => Some(true),
            Side::Tuning => Some(false),
            Side::LayoutOrInvalid => None,
            Side::ColumnName => Some(sink_names.contains(&old)),
            Side::LayoutIfAuto => Some(in_auto_vertex(&doc, leaf)),
            Side::JobFolder => {
                let c = parsed.as_ref().expect("a renamed job is valid");
                let dir = |c: &JobConfig| job_log_dir(Path::new("/d"), &c.name).expect("dir");
                if dir(c) == dir(&base) {
                    wrong.push(format!("{at}: the job folder did not change"));
                }
                Some(false)
            }
        };
        match (side, parsed.as_ref(), changed, expect_changed) {
            (Side::LayoutOrInvalid, Err(_), _, _) => layout_refused += 1,
            (Side::LayoutOrInvalid, Ok(_), Some(false), _) => {
                wrong.push(format!(
                    "{at}: still valid, but the fingerprint did not change"
                ));
            }
            (Side::LayoutOrInvalid, Ok(_), _, _) => {}
            (_, Err(e), _, _) => wrong.push(format!("{at}: the flipped job is invalid: {e}")),
            (_, Ok(_), Some(c), Some(want)) if c != want => wrong.push(format!(
                "{at}: fingerprint {} but it is {side:?}",
                if c { "changed" } else { "did not change" }
            )),
            _ => {}
        }
    }
    for (pattern, ..) in RULES {
        if !used.contains(pattern) {
            wrong.push(format!("RULES names `{pattern}`, which FULL does not use"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        found.len() > RULES.len(),
        "{} leaves flipped for {} rules",
        found.len(),
        RULES.len()
    );
    assert!(
        layout_refused < found.len() / 2,
        "most flips must validate ({layout_refused} invalid)"
    );
}

#[test]
fn max_parallelism_of_an_auto_vertex_is_its_inputs_subpartition_count() {
    // The edit of issue 12.1: the kept producers wrote 8 subpartitions.
    let s = setup();
    let doc: Value = toml::from_str(FULL).expect("TOML");
    let mut edited = doc.clone();
    edited["vertices"][1]["max-parallelism"] = Value::Integer(4);
    let (a, b) = (
        parse(&s, &doc).expect("valid"),
        parse(&s, &edited).expect("valid"),
    );
    assert_eq!(a.graph.num_subpartitions(0), 8);
    assert_eq!(b.graph.num_subpartitions(0), 4);
    assert_ne!(
        job_fingerprint(&a, &s.opts.data_dir),
        job_fingerprint(&b, &s.opts.data_dir)
    );
}
