//! Every job-file mistake is one clear error naming the file and the field.

use std::path::{Path, PathBuf};

use coordhost::config::{ConfigError, LoadOptions, load_job};

/// A valid job file; `{component}` is a readable file. Tests break one thing.
const VALID: &str = r#"
[job]
name = "wc"

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{component}"
kind = "split-enumerator"
config = { dir = "${data_dir}/in", split-bytes = 1024 }

[plugins.shuffle]
component = "{component}"
kind = "shuffle-master"
config = { root = "${data_dir}/shuffle" }
dirs = [{ path = "${data_dir}/shuffle", writable = true }]

[[vertices]]
id = "src"
source = "files"
parallelism = 2
operators = [
  { op = "read-lines" },
  { op = "tokenize", column = "line", as = "word" },
]

[[vertices]]
id = "count"
parallelism = "auto"
operators = [
  { op = "aggregate", key = ["word"], aggregates = [{ fn = "count", as = "n" }] },
  { op = "write-csv", path = "${data_dir}/out" },
]

[[edges]]
from = "src"
to = "count"
kind = "hash"
key = ["word"]
"#;

struct Fixture {
    dir: tempfile::TempDir,
    component: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let component = dir.path().join("plugin.wasm");
    // A component's 8-byte preamble: the loader reads no more than that.
    std::fs::write(&component, b"\0asm\x0d\0\x01\0").expect("component");
    Fixture { dir, component }
}

impl Fixture {
    fn load(&self, text: &str) -> Result<coordhost::config::JobConfig, ConfigError> {
        let job = self.dir.path().join("job.toml");
        std::fs::write(
            &job,
            text.replace("{component}", &self.component.display().to_string()),
        )
        .expect("write");
        load_job(
            &job,
            &LoadOptions {
                data_dir: self.dir.path().join("data"),
                cache_dir: None,
                log_on_objects: false,
            },
        )
    }

    fn job_file(&self) -> PathBuf {
        self.dir.path().join("job.toml")
    }
}

/// Loads `text` expecting an error whose message names the job file and `field`.
fn expect_error(text: &str, field: &str) -> ConfigError {
    let f = fixture();
    let err = f.load(text).expect_err("the job file is wrong");
    let msg = err.to_string();
    assert!(
        msg.contains(&f.job_file().display().to_string()),
        "no file in: {msg}"
    );
    assert!(msg.contains(field), "no `{field}` in: {msg}");
    assert_eq!(msg.lines().count(), 1, "one line: {msg}");
    err
}

fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "fixture lacks {from}");
    text.replacen(from, to, 1)
}

#[test]
fn the_valid_fixture_loads_with_paths_resolved_and_columns_checked() {
    let f = fixture();
    let job = f.load(VALID).expect("valid");
    assert_eq!(job.name, "wc");
    let data = std::path::absolute(f.dir.path().join("data")).expect("abs");
    let files = &job.plugins["files"];
    assert_eq!(
        files.config,
        vec![
            ("dir".to_string(), data.join("in").display().to_string()),
            ("split-bytes".to_string(), "1024".to_string()),
        ]
    );
    assert_eq!(job.plugins["shuffle"].dirs[0].host, data.join("shuffle"));
    assert!(job.plugins["shuffle"].dirs[0].writable);
    // No `limits` table: the plugin host's defaults, `on-trap = "fail"`.
    assert_eq!(files.limits, coordhost::plugin::Limits::default());
    assert_eq!(
        files.limits.on_trap,
        coordhost::plugin::TrapPolicy::Fail,
        "docs/job-file.md"
    );
    assert_eq!(job.graph.vertices[1].output_columns, ["word", "n"]);
    assert_eq!(
        job.graph.vertices[1].sink.as_ref().map(|s| s.dir.clone()),
        Some(data.join("out"))
    );
    assert_eq!(job.graph.order, [0, 1]);
}

#[test]
fn an_unknown_field_is_named() {
    let err = expect_error(
        &replace_once(VALID, "parallelism = 2", "paralelism = 2"),
        "paralelism",
    );
    assert!(err.to_string().contains("vertices[0]"), "{err}");
    expect_error(
        &replace_once(VALID, "name = \"wc\"", "name = \"wc\"\ncolour = 1"),
        "colour",
    );
    expect_error(
        &replace_once(
            VALID,
            "{ op = \"read-lines\" }",
            "{ op = \"read-lines\", fast = true }",
        ),
        "fast",
    );
}

#[test]
fn a_missing_field_is_named() {
    let text = replace_once(VALID, "[shuffle]\nplugin = \"shuffle\"\n", "");
    expect_error(&text, "shuffle");
}

#[test]
fn a_missing_plugin_is_named() {
    expect_error(
        &replace_once(VALID, "source = \"files\"", "source = \"nofiles\""),
        "vertices[0].source",
    );
    expect_error(
        &replace_once(VALID, "plugin = \"shuffle\"", "plugin = \"noshuffle\""),
        "shuffle.plugin",
    );
    // A plugin of the wrong kind is as wrong as a missing one.
    expect_error(
        &replace_once(VALID, "plugin = \"shuffle\"", "plugin = \"files\""),
        "shuffle.plugin",
    );
}

#[test]
fn a_cycle_is_named() {
    let text = format!(
        "{VALID}\n[[edges]]\nfrom = \"count\"\nto = \"src\"\nkind = \"hash\"\nkey = [\"word\"]\n"
    );
    // src has an enumerator, so break that first: a cycle among non-sources.
    let text = text.replace(
        "[[edges]]\nfrom = \"src\"",
        "[[vertices]]\nid = \"mid\"\nparallelism = 2\n\n[[edges]]\nfrom = \"mid\"\nto = \"count\"\nkind = \"hash\"\nkey = [\"word\"]\n\n[[edges]]\nfrom = \"count\"\nto = \"mid\"\nkind = \"hash\"\nkey = [\"word\"]\n\n[[edges]]\nfrom = \"src\"",
    );
    let err = expect_error(&text, "edges");
    assert!(err.to_string().contains("cycle"), "{err}");
}

#[test]
fn a_bad_parallelism_is_named() {
    expect_error(
        &replace_once(VALID, "parallelism = 2", "parallelism = 0"),
        "vertices[0].parallelism",
    );
    expect_error(
        &replace_once(VALID, "parallelism = 2", "parallelism = \"many\""),
        "vertices[0].parallelism",
    );
    expect_error(
        &replace_once(VALID, "parallelism = 2", "parallelism = \"auto\""),
        "vertices[0].parallelism",
    );
    // A forward edge needs equal fixed parallelism on both ends.
    let text = replace_once(
        VALID,
        "kind = \"hash\"\nkey = [\"word\"]",
        "kind = \"forward\"",
    );
    expect_error(&text, "edges[0].kind");
}

#[test]
fn an_unreadable_component_is_named() {
    let f = fixture();
    let text = replace_once(
        VALID,
        "component = \"{component}\"\nkind = \"split-enumerator\"",
        "component = \"missing.wasm\"\nkind = \"split-enumerator\"",
    );
    let err = f.load(&text).expect_err("missing component");
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::Component { .. }), "{msg}");
    assert!(
        msg.contains("plugins.files.component") && msg.contains("missing.wasm"),
        "{msg}"
    );
    assert!(msg.contains(&f.job_file().display().to_string()), "{msg}");
}

#[test]
fn an_unknown_column_or_operator_is_named() {
    expect_error(
        &replace_once(
            VALID,
            "key = [\"word\"], aggregates",
            "key = [\"wrd\"], aggregates",
        ),
        "vertices[1].operators[0].key",
    );
    expect_error(
        &replace_once(VALID, "column = \"line\"", "column = \"text\""),
        "vertices[0].operators[1].column",
    );
    expect_error(
        &replace_once(VALID, "op = \"tokenize\"", "op = \"stem\""),
        "vertices[0].operators[1]",
    );
    expect_error(
        &replace_once(
            VALID,
            "kind = \"hash\"\nkey = [\"word\"]",
            "kind = \"hash\"\nkey = [\"n\"]",
        ),
        "edges[0].key",
    );
    expect_error(
        &replace_once(
            VALID,
            "{ op = \"tokenize\", column = \"line\", as = \"word\" }",
            "{ op = \"tokenize\", column = \"line\", as = \"word\", colum = \"x\" }",
        ),
        "colum",
    );
}

#[test]
fn a_sink_without_a_writer_and_a_source_without_a_reader_are_named() {
    expect_error(
        &replace_once(
            VALID,
            "  { op = \"write-csv\", path = \"${data_dir}/out\" },\n",
            "",
        ),
        "vertices[1].operators",
    );
    expect_error(
        &replace_once(VALID, "  { op = \"read-lines\" },\n", ""),
        "vertices[0].operators[0]",
    );
}

#[test]
fn bad_limits_and_a_bad_kind_are_named() {
    let text = replace_once(
        VALID,
        "config = { root",
        "limits = { on-trap = \"explode\" }\nconfig = { root",
    );
    expect_error(&text, "plugins.shuffle.limits.on-trap");
    expect_error(
        &replace_once(VALID, "kind = \"shuffle-master\"", "kind = \"shuffler\""),
        "plugins.shuffle.kind",
    );
}

#[test]
fn a_file_that_is_not_toml_or_missing_is_named() {
    let f = fixture();
    let err = f.load("[job\nname=").expect_err("not toml");
    assert!(matches!(err, ConfigError::Parse { .. }));
    assert!(err.to_string().contains("line 1"), "{err}");
    let missing = Path::new("/nonexistent/job.toml");
    let err = load_job(
        missing,
        &LoadOptions {
            data_dir: f.dir.path().into(),
            cache_dir: None,
            log_on_objects: false,
        },
    )
    .expect_err("missing");
    assert!(
        err.to_string().starts_with("/nonexistent/job.toml: "),
        "{err}"
    );
}

#[test]
fn a_bad_max_task_bytes_is_named() {
    let source = "parallelism = 2\noperators = [\n  { op = \"read-lines\" }";
    for bad in ["0", "-1", "\"16 MiB\"", "2.5"] {
        let text = replace_once(
            VALID,
            source,
            &source.replacen(
                "parallelism = 2",
                &format!("parallelism = 2\nmax-task-bytes = {bad}"),
                1,
            ),
        );
        expect_error(&text, "field `vertices[0].max-task-bytes`");
    }
    // Only a source vertex takes it.
    let text = replace_once(
        VALID,
        "parallelism = \"auto\"",
        "parallelism = \"auto\"\nmax-task-bytes = 1000",
    );
    let err = expect_error(&text, "field `vertices[1].max-task-bytes`");
    assert!(err.to_string().contains("only a source vertex"), "{err}");
    // The SQL form's `[job]` keys are not for a graph job.
    let text = replace_once(
        VALID,
        "name = \"wc\"",
        "name = \"wc\"\nmax-task-bytes = 1000",
    );
    expect_error(&text, "field `job.max-task-bytes`");
    // A good value loads.
    let f = fixture();
    let text = replace_once(
        VALID,
        source,
        &source.replacen(
            "parallelism = 2",
            "parallelism = 2\nmax-task-bytes = 4096",
            1,
        ),
    );
    let job = f.load(&text).expect("loads");
    assert_eq!(job.graph.vertices[0].max_task_bytes, Some(4096));
}
