//! Data errors through the real `coordhost run` (issue 31 item 5, docs/sql.md
//! "When the input is wrong"): a value that does not parse as its column's
//! declared type (CSV), a record a source-reader plugin refuses
//! (`invalid-split`), a damaged Parquet page, and a value the TOML graph's
//! operators cannot use. Each fails the job at once with exit 1 and one
//! error that names the file (and for CSV the line, the column and the
//! value); the attempt that met it is not retried although `max-attempts`
//! allows 3; the error is printed once; the event log's `JobFailed` holds
//! it and no reset; and the summary's task counts add up to the total.

use std::path::{Path, PathBuf};

use crate::support::job::options;
use crate::support::knobs::{Knobs, run_output_with};
use crate::support::plugin_path;
use crate::support::workers::{Workers, external_args, free_port};
use coordhost::job::{JobStatus, Summary};
use serde_json::Value;

/// A SQL job `name` over table `t` (files of `input` ending in `pattern`,
/// cut into splits of `split_bytes`), `table` its format and schema lines,
/// `plugins` more `[plugins.*]`; `max-attempts = 3`.
fn sql_job(
    dir: &Path,
    input: &Path,
    pattern: &str,
    split_bytes: u64,
    table: &str,
    plugins: &str,
    sql: &str,
) -> PathBuf {
    let plugin = |n: &str| plugin_path(n).display().to_string();
    let text = format!(
        r#"[job]
name = "bad-data"
parallelism = 2
max-attempts = 3
sql = """{sql}"""

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{files}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = {split_bytes}, pattern = "{pattern}" }}
dirs = [{{ path = "{input}", writable = false }}]

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

{plugins}

[tables.t]
plugin = "files"
{table}

[sink]
path = "${{data_dir}}/output/bad-data"
format = "csv"
"#,
        files = plugin("file-enumerator"),
        shuffle = plugin("local-shuffle"),
        input = input.display(),
    );
    std::fs::create_dir_all(dir).expect("job dir");
    let job = dir.join("bad-data.toml");
    std::fs::write(&job, text).expect("job file");
    job
}

/// What a failed run left, checked the same way for every data error:
/// exit 1, status failed, nothing published, the error printed exactly
/// once on stderr (as the last line), no attempt retried (no reset in the
/// summary or the log, one attempt per task that ran), the log's
/// `JobFailed` holding the same error, and the task counts adding up.
/// Returns the error.
fn failed_once(job: &Path, state: &Path, output: &str) -> (String, Summary) {
    failed_once_with(job, state, output, &[])
}

/// [`failed_once`] with more `run` arguments (worker processes).
fn failed_once_with(job: &Path, state: &Path, output: &str, extra: &[String]) -> (String, Summary) {
    let out = run_output_with(&options(job, state, 2), &Knobs::default(), extra);
    let stderr = out.stderr;
    assert_eq!(out.code, Some(1), "a data error fails the job: {stderr}");
    let s = out.summary.unwrap_or_else(|| panic!("a summary: {stderr}"));
    assert_eq!(s.status, JobStatus::Failed, "{stderr}");
    let error = s.error.clone().expect("the summary names the error");
    assert!(
        error.contains("a data error is not retried"),
        "the error says it is not retried: {error}"
    );
    // Printed once: the run's last line, and nowhere else on stderr (no
    // line per attempt, no warning repeating it).
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(last, format!("coordhost: {error}"), "{stderr}");
    let core = error
        .split(" (vertex `")
        .next()
        .expect("the error's own words");
    assert_eq!(
        stderr.matches(core).count(),
        1,
        "the error is printed once: {stderr}"
    );
    // Not retried: no reset, one attempt per task that ran.
    assert_eq!(s.tasks_reset, 0, "no attempt reset: {s:?}");
    assert!(s.reset_reasons.is_empty(), "{s:?}");
    assert_eq!(s.tasks_failed, 1, "one task failed: {s:?}");
    assert!(
        s.tasks_run <= s.tasks_total,
        "no task ran twice (attempts {} of {} tasks): {s:?}",
        s.tasks_run,
        s.tasks_total
    );
    assert_eq!(
        s.tasks_finished + s.tasks_failed + s.tasks_stopped + s.tasks_not_run,
        s.tasks_total,
        "every task counted once by where it ended: {s:?}"
    );
    assert!(
        out.stdout.contains(&format!(
            "tasks by end: {} finished, 1 failed, {} stopped, {} not run (of {})",
            s.tasks_finished, s.tasks_stopped, s.tasks_not_run, s.tasks_total
        )),
        "the text summary says the same: {}",
        out.stdout
    );
    assert!(
        !state.join(format!("output/{output}/_SUCCESS")).exists(),
        "nothing is published"
    );
    // The event log: the failure with its reason, and no reset.
    let log = crate::support::coordhost()
        .args(["log", "inspect"])
        .arg(state.join(&s.job))
        .arg("--json")
        .output()
        .expect("log inspect");
    assert!(log.status.success(), "{log:?}");
    let doc: Value = serde_json::from_slice(&log.stdout).expect("JSON");
    let events = doc["events"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event"]["kind"].as_str())
        .collect();
    assert!(!kinds.contains(&"ExecutionsReset"), "{kinds:?}");
    let failed = events
        .iter()
        .find(|e| e["event"]["kind"] == "JobFailed")
        .unwrap_or_else(|| panic!("a JobFailed record: {kinds:?}"));
    assert_eq!(failed["event"]["event"]["error"], error.as_str());
    assert_eq!(failed["event"]["event"]["exit_code"], 1);
    (error, s)
}

#[test]
fn a_value_that_is_not_a_number_fails_at_once_naming_file_line_column_and_value() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    // 400 lines in a file cut into 1 kB splits: the bad value sits in a
    // split that starts far from the file's first byte, so its line is
    // counted from the start of the file (the header is line 1).
    let mut lines = vec!["id,name,amount".to_string()];
    lines.extend((1..400).map(|i| format!("{i},n{},{i}", i % 3)));
    lines[300] = "300,n0,abc".into();
    lines.insert(100, String::new()); // an empty line counts as a line too
    std::fs::write(input.join("sales.csv"), lines.join("\n") + "\n").expect("csv");
    std::fs::write(input.join("more.csv"), "id,name,amount\n1,a,10\n").expect("csv");
    let job = sql_job(
        &tmp.path().join("job"),
        &input,
        ".csv",
        1000,
        r#"format = "csv"
header = true
schema = { id = "bigint", name = "varchar", amount = "bigint" }"#,
        "",
        "SELECT name, sum(amount) AS total FROM t GROUP BY name",
    );
    let (error, _) = failed_once(&job, &tmp.path().join("state"), "bad-data");
    let file = input.join("sales.csv");
    // `abc` was written on line 301 and an empty line went in before it.
    let want = format!(
        "{} line 302, column 3 `amount` (bigint): `abc` is not a valid bigint",
        file.display()
    );
    assert!(error.starts_with(&want), "`{want}` in: {error}");
}

#[test]
fn on_worker_processes_a_bad_value_fails_at_once_too() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    std::fs::write(input.join("a.csv"), "id,amount\n1,10\n2,x7\n").expect("csv");
    std::fs::write(input.join("b.csv"), "id,amount\n3,30\n").expect("csv");
    let job = sql_job(
        &tmp.path().join("job"),
        &input,
        ".csv",
        1_000_000,
        "format = \"csv\"\nheader = true\nschema = { id = \"bigint\", amount = \"bigint\" }",
        "",
        "SELECT sum(amount) AS total FROM t",
    );
    let addr = free_port();
    let workers = Workers::start(2, &addr, &tmp.path().join("workers"), 2);
    let (error, _) = failed_once_with(
        &job,
        &tmp.path().join("state"),
        "bad-data",
        &external_args(&addr, 2, 5000),
    );
    let want = format!(
        "{} line 3, column 2 `amount` (bigint): `x7` is not a valid bigint",
        input.join("a.csv").display()
    );
    assert!(
        error.starts_with(&want),
        "`{want}` in: {error}\n{}",
        workers.logs()
    );
}

#[test]
fn a_long_bad_value_is_cut_and_a_short_line_names_its_field_count() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    let long = "9".repeat(30) + &"x".repeat(100);
    std::fs::write(
        input.join("a.csv"),
        format!("id,day\n1,2020-01-01\n2,{long}\n"),
    )
    .expect("csv");
    let table = r#"format = "csv"
header = true
schema = { id = "bigint", day = "date" }"#;
    let job = sql_job(
        &tmp.path().join("job"),
        &input,
        ".csv",
        1_000_000,
        table,
        "",
        "SELECT count(day) AS n FROM t",
    );
    let (error, _) = failed_once(&job, &tmp.path().join("state"), "bad-data");
    let cut = format!("`{}…`", &long[..40]);
    assert!(
        error.contains(&format!(
            "a.csv line 3, column 2 `day` (date): {cut} is not a valid date"
        )),
        "the value is cut to 40 characters: {error}"
    );
    assert!(!error.contains(&long), "{error}");

    std::fs::write(input.join("a.csv"), "id,day\n1,2020-01-01\n2\n").expect("csv");
    let (error, _) = failed_once(&job, &tmp.path().join("state2"), "bad-data");
    assert!(
        error.contains("a.csv line 3: 1 fields where the table declares 2"),
        "{error}"
    );
}

#[test]
fn a_record_a_source_reader_refuses_fails_at_once_naming_the_file_and_the_reader() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("fw");
    std::fs::create_dir_all(&input).expect("input");
    let examples = crate::support::workspace().join("examples/fixed-width");
    let text = std::fs::read_to_string(examples.join("accounts-1.txt")).expect("example");
    // The second line's balance (bytes 28..40) is not a number.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[1].replace_range(28..40, "    12x45.10");
    std::fs::write(input.join("accounts-1.txt"), lines.join("\n") + "\n").expect("copy");
    std::fs::copy(
        examples.join("accounts-2.txt"),
        input.join("accounts-2.txt"),
    )
    .expect("copy");
    let reader = format!(
        "[plugins.fixed]\ncomponent = \"{}\"\nkind = \"source-reader\"\nconfig = {{ widths = \"6,22,12,10,9\" }}\ndirs = [{{ path = \"{}\", writable = false }}]\n",
        plugin_path("fixed-width-reader").display(),
        input.display()
    );
    let job = sql_job(
        &tmp.path().join("job"),
        &input,
        ".txt",
        4096,
        r#"format = { reader = "fixed" }
schema = { id = "bigint", owner = "varchar", balance = "decimal(15,2)", opened = "date", branch = "varchar" }"#,
        &reader,
        "SELECT branch, sum(balance) AS total FROM t GROUP BY branch",
    );
    let (error, _) = failed_once(&job, &tmp.path().join("state"), "bad-data");
    for needle in [
        "source reader `fixed`",
        "invalid split",
        "accounts-1.txt",
        "12x45.10",
    ] {
        assert!(error.contains(needle), "`{needle}` in: {error}");
    }
}

#[test]
fn a_damaged_parquet_page_fails_at_once_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/parquet-crc/crc.parquet");
    let mut bytes = std::fs::read(&fixture).expect("fixture");
    let meta = parquet::file::reader::SerializedFileReader::new(
        std::fs::File::open(&fixture).expect("fixture"),
    )
    .map(|r| parquet::file::reader::FileReader::metadata(&r).clone())
    .expect("the fixture's footer");
    // One byte of a value in the first data page of `v` flipped: its
    // stored CRC-32 no longer holds.
    let at = usize::try_from(meta.row_group(0).column(1).data_page_offset()).expect("offset") + 200;
    bytes[at] ^= 0x10;
    let input = tmp.path().join("pq");
    std::fs::create_dir_all(&input).expect("input");
    std::fs::write(input.join("damaged.parquet"), bytes).expect("damaged copy");
    let job = sql_job(
        &tmp.path().join("job"),
        &input,
        ".parquet",
        1_000_000,
        "format = \"parquet\"\nschema = { k = \"varchar\", v = \"bigint\" }",
        "",
        "SELECT k, sum(v) AS s FROM t GROUP BY k",
    );
    let (error, _) = failed_once(&job, &tmp.path().join("state"), "bad-data");
    let file = input.join("damaged.parquet");
    assert!(
        error.starts_with(&format!("{} (split `damaged.parquet", file.display()))
            && error.contains("CRC checksum mismatch"),
        "the error names the file and the checksum: {error}"
    );
}

#[test]
fn a_toml_graph_job_fails_at_once_naming_the_file_of_a_value_that_is_not_a_number() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    std::fs::write(input.join("a.csv"), "id,amount\n1,10\n2,abc\n").expect("csv");
    std::fs::write(input.join("b.csv"), "id,amount\n3,30\n").expect("csv");
    let plugin = |n: &str| plugin_path(n).display().to_string();
    let text = format!(
        r#"[job]
name = "graph"
max-attempts = 3

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{files}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = 1000000, pattern = ".csv" }}
dirs = [{{ path = "{input}", writable = false }}]

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[[vertices]]
id = "scan"
source = "files"
parallelism = 2
operators = [
  {{ op = "read-csv", skip-header = true, columns = ["id", "amount"] }},
  {{ op = "aggregate", key = ["id"], aggregates = [{{ fn = "sum", column = "amount", as = "total" }}] }},
  {{ op = "write-csv", path = "${{data_dir}}/output/graph" }},
]
"#,
        files = plugin("file-enumerator"),
        shuffle = plugin("local-shuffle"),
        input = input.display(),
    );
    let dir = tmp.path().join("job");
    std::fs::create_dir_all(&dir).expect("job dir");
    let job = dir.join("graph.toml");
    std::fs::write(&job, text).expect("job file");
    let (error, s) = failed_once(&job, &tmp.path().join("state"), "graph");
    assert!(
        error.starts_with(&format!(
            "{}: aggregate: `abc` is not a number",
            input.join("a.csv").display()
        )),
        "{error}"
    );
    assert_eq!(s.tasks_total, 2, "{s:?}");
}
