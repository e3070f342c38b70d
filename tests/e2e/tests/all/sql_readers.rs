//! Tables read by a source-reader plugin (issue 27, item 2; docs/sql.md,
//! "Tables read by a Wasm reader") through the real `coordhost run` with
//! real components: the sample `fixed-width-reader` reads fixed-width
//! files this test writes, and the answer equals the same rows read from
//! CSV files by the host's own reader; a coordinator SIGKILLed mid-scan
//! reruns to the same answer with its finished scan tasks skipped;
//! `faulty-reader` (a batch of another schema, a trap, a loop past the
//! deadline, a read outside its grants) and a reader not granted the
//! table's folder fail the job naming the plugin and the table, with
//! nothing published; bad `[tables]` reader entries are refused naming
//! the field; the same job on worker processes gives the CSV answer
//! (more on workers in sql_readers_workers.rs).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::crash::{Coordhost, Kill};
use crate::support::job::options;
use crate::support::knobs::{Knobs, run_output, run_output_with};
use crate::support::{plugin_path, published_lines};
use coordhost::job::{JobStatus, Summary};

/// Column widths of the fixed-width files, in declared order.
const WIDTHS: [usize; 6] = [8, 20, 14, 10, 5, 8];
const SCHEMA: &str = r#"{ id = "bigint", name = "varchar", balance = "decimal(15,2)", opened = "date", active = "boolean", rate = "double" }"#;
const NAMES: [&str; 7] = [
    "Ada Lovelace",
    "Grace Hopper",
    "Émile Zola",
    "Alan Turing",
    "Barbara Liskov",
    "Ken Thompson",
    "Edsger Dijkstra",
];

/// One row as text fields (empty: null), in declared order.
pub(crate) type Row = [String; 6];

/// `n` rows: ids 0..n, nulls in every column, negative balances, dates
/// around the epoch, a multi-byte name.
pub(crate) fn rows(n: i64) -> Vec<Row> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|id| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let cents = (x % 4_000_000) as i64 - 1_000_000;
            let balance = if id % 11 == 3 {
                String::new()
            } else {
                let sign = if cents < 0 { "-" } else { "" };
                format!("{sign}{}.{:02}", cents.abs() / 100, cents.abs() % 100)
            };
            let name = if id % 13 == 4 {
                String::new()
            } else {
                NAMES[(x >> 24) as usize % NAMES.len()].to_string()
            };
            let opened = if id % 17 == 5 {
                String::new()
            } else {
                let year = 1960 + (x >> 30) % 70;
                let month = 1 + (x >> 8) % 12;
                let day = 1 + (x >> 16) % 28;
                format!("{year}-{month:02}-{day:02}")
            };
            let active = match id % 5 {
                0 => String::new(),
                1 | 2 => "true".to_string(),
                _ => "false".to_string(),
            };
            let rate = if id % 7 == 6 {
                String::new()
            } else {
                format!("{}.{:02}", (x >> 40) % 20, (x >> 12) % 100)
            };
            [id.to_string(), name, balance, opened, active, rate]
        })
        .collect()
}

/// `text` padded with spaces to `width` bytes, numbers to the right.
fn pad(text: &str, width: usize, right: bool) -> String {
    assert!(text.len() <= width, "`{text}` fits {width} bytes");
    let fill = " ".repeat(width - text.len());
    if right {
        format!("{fill}{text}")
    } else {
        format!("{text}{fill}")
    }
}

/// Writes `rows` as three fixed-width files under `fw` and three CSV files
/// (with a header) under `csv`. A row whose last field is null has its
/// trailing blanks stripped, and one file does not end in a line break.
pub(crate) fn write_tables(rows: &[Row], fw: &Path, csv: &Path) {
    std::fs::create_dir_all(fw).expect("fixed-width dir");
    std::fs::create_dir_all(csv).expect("csv dir");
    let mut fixed = vec![String::new(); 3];
    let mut comma = vec!["id,name,balance,opened,active,rate\n".to_string(); 3];
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (k, (field, width)) in row.iter().zip(WIDTHS).enumerate() {
            line.push_str(&pad(field, width, k != 1));
        }
        let line = if row[5].is_empty() {
            line.trim_end().to_string()
        } else {
            line
        };
        fixed[i % 3].push_str(&line);
        fixed[i % 3].push('\n');
        comma[i % 3].push_str(&row.join(","));
        comma[i % 3].push('\n');
    }
    fixed[2].pop();
    for i in 0..3 {
        std::fs::write(fw.join(format!("acct-{i}.txt")), &fixed[i]).expect("fixed-width file");
        std::fs::write(csv.join(format!("acct-{i}.csv")), &comma[i]).expect("csv file");
    }
}

/// `[plugins.NAME]` of kind `source-reader`: component `component`, its
/// config (TOML inline table body), granted `grant`, with `limits`.
pub(crate) fn reader(
    name: &str,
    component: &str,
    config: &str,
    grant: &Path,
    limits: &str,
) -> String {
    format!(
        "[plugins.{name}]\ncomponent = \"{}\"\nkind = \"source-reader\"\nconfig = {{ {config} }}\ndirs = [{{ path = \"{}\", writable = false }}]\nlimits = {{ {limits} }}\n",
        plugin_path(component).display(),
        grant.display()
    )
}

/// The sample reader with the widths of this test's files.
pub(crate) fn fixed_reader(grant: &Path) -> String {
    let widths: Vec<String> = WIDTHS.iter().map(ToString::to_string).collect();
    reader(
        "fixed",
        "fixed-width-reader",
        &format!("widths = \"{}\"", widths.join(",")),
        grant,
        "call-timeout-ms = 5000, memory-mib = 64",
    )
}

/// Table `acct` read by the reader plugin `name`.
pub(crate) fn read_by(name: &str) -> String {
    format!("format = {{ reader = \"{name}\" }}")
}

/// A SQL job over table `acct`, whose files under `input` (those ending
/// in `pattern`) the file enumerator cuts into splits of `split_bytes`;
/// `format` is the table's format line(s), `plugins` more `[plugins.*]`,
/// `job_extra` more `[job]` keys, `sink_extra` more `[sink]` keys.
pub(crate) struct Job<'a> {
    pub(crate) input: &'a Path,
    pub(crate) pattern: &'a str,
    pub(crate) split_bytes: u64,
    pub(crate) format: String,
    pub(crate) plugins: String,
    pub(crate) sql: &'a str,
    pub(crate) job_extra: &'a str,
    pub(crate) sink_extra: &'a str,
}

impl Job<'_> {
    pub(crate) fn write(&self, dir: &Path) -> PathBuf {
        let plugin = |n: &str| plugin_path(n).display().to_string();
        let text = format!(
            r#"[job]
name = "acct"
parallelism = 2
sql = """{sql}"""
{job_extra}

[recovery]
enabled = true
previous-worker-timeout-ms = 5000

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

[tables.acct]
plugin = "files"
{format}
schema = {SCHEMA}

[sink]
path = "${{data_dir}}/output/acct"
format = "csv"
{sink_extra}
"#,
            sql = self.sql,
            job_extra = self.job_extra,
            files = plugin("file-enumerator"),
            shuffle = plugin("local-shuffle"),
            input = self.input.display(),
            split_bytes = self.split_bytes,
            pattern = self.pattern,
            plugins = self.plugins,
            format = self.format,
            sink_extra = self.sink_extra,
        );
        std::fs::create_dir_all(dir).expect("job dir");
        let job = dir.join("acct.toml");
        std::fs::write(&job, text).expect("job file");
        job
    }
}

/// The job reading `fw` through the sample reader.
pub(crate) fn fixed_job<'a>(fw: &'a Path, sql: &'a str) -> Job<'a> {
    Job {
        input: fw,
        pattern: ".txt",
        split_bytes: 2000,
        format: read_by("fixed"),
        plugins: fixed_reader(fw),
        sql,
        job_extra: "max-attempts = 1",
        sink_extra: "",
    }
}

/// The same job reading `csv` with the host's CSV reader.
pub(crate) fn csv_job<'a>(csv: &'a Path, sql: &'a str) -> Job<'a> {
    Job {
        input: csv,
        pattern: ".csv",
        split_bytes: 2000,
        format: "format = \"csv\"\nheader = true".to_string(),
        plugins: String::new(),
        sql,
        job_extra: "max-attempts = 1",
        sink_extra: "",
    }
}

fn run(job: &Path, state: &Path) -> (Option<Summary>, Option<i32>, String) {
    let out = run_output(&options(job, state, 2), &Knobs::default());
    (out.summary, out.code, out.stderr)
}

fn run_finished(job: &Path, state: &Path) -> Summary {
    let (summary, code, stderr) = run(job, state);
    let summary = summary.unwrap_or_else(|| panic!("no summary, exit {code:?}: {stderr}"));
    assert_eq!(
        summary.status,
        JobStatus::Finished,
        "exit {code:?}: {:?} {stderr}",
        summary.error
    );
    assert_eq!(code, Some(0), "{stderr}");
    summary
}

/// A run that fails while running: exit 1, a failed summary, nothing
/// published; its error.
fn run_failed(job: &Path, state: &Path) -> String {
    let (summary, code, stderr) = run(job, state);
    assert_eq!(code, Some(1), "{stderr}");
    let s = summary.unwrap_or_else(|| panic!("a summary: {stderr}"));
    assert_eq!(s.status, JobStatus::Failed, "{stderr}");
    assert!(
        !state.join("output/acct/_SUCCESS").exists(),
        "nothing is published"
    );
    s.error.unwrap_or_default()
}

/// A refused job: exit 2, no summary, nothing left in the data
/// directory; the line naming `field`.
fn refused(job: &Path, state: &Path, field: &str) -> String {
    let (summary, code, stderr) = run(job, state);
    assert!(summary.is_none(), "{stderr}");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        !state.join("output/acct/_SUCCESS").exists(),
        "nothing is published: {stderr}"
    );
    stderr
        .lines()
        .find(|l| l.contains(&format!("field `{field}`")))
        .unwrap_or_else(|| panic!("a line naming `{field}`: {stderr}"))
        .to_string()
}

#[test]
fn a_fixed_width_table_read_by_the_wasm_reader_answers_as_the_same_rows_read_as_csv() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (fw, csv) = (tmp.path().join("fw"), tmp.path().join("csv"));
    let rows = rows(3000);
    write_tables(&rows, &fw, &csv);
    for (i, sql) in [
        "SELECT id, name, balance, opened, active, rate FROM acct ORDER BY id",
        "SELECT name, count(*) AS n, count(active) AS flagged, sum(balance) AS total, \
         min(opened) AS first, max(rate) AS top, sum(CASE WHEN active THEN 1 ELSE 0 END) AS actives \
         FROM acct GROUP BY name ORDER BY name",
    ]
    .into_iter()
    .enumerate()
    {
        let wasm = fixed_job(&fw, sql).write(&tmp.path().join(format!("fw-{i}")));
        let host = csv_job(&csv, sql).write(&tmp.path().join(format!("csv-{i}")));
        let (wasm_state, host_state) = (
            tmp.path().join(format!("fw-state-{i}")),
            tmp.path().join(format!("csv-state-{i}")),
        );
        let summary = run_finished(&wasm, &wasm_state);
        let scan = &summary.vertices[0];
        assert!(
            scan.splits_assigned > 40,
            "the files were read as many splits: {summary:?}"
        );
        run_finished(&host, &host_state);
        let got = published_lines(&wasm_state.join("output/acct"));
        let want = published_lines(&host_state.join("output/acct"));
        assert_eq!(got, want, "query {i}: the reader's answer is the CSV one");
        if i == 0 {
            assert_eq!(got.len(), rows.len() + 1, "every row, once");
            // Row 4 has no name, row 3 no balance: nulls stay nulls.
            assert!(got[5].starts_with("4,,"), "{}", got[5]);
            assert!(got.iter().any(|l| l.contains("Émile Zola")));
        } else {
            assert_eq!(got.len(), NAMES.len() + 2, "every name and null: {got:?}");
        }
    }
}

/// How many tasks of the scan stage (`stage0`) finished, as the job's
/// event log under `data` says (`coordhost log inspect --json`).
fn scan_tasks_finished(data: &Path) -> usize {
    let out = crate::support::coordhost()
        .arg("log")
        .arg("inspect")
        .arg(data.join("acct"))
        .arg("--json")
        .output()
        .expect("spawn coordhost log inspect");
    if !out.status.success() {
        return 0;
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("log inspect prints JSON");
    doc["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter(|e| e["event"]["kind"] == "ExecutionFinished")
                .filter(|e| e["event"]["event"]["attempt"]["job_vertex"] == "stage0")
                .count()
        })
        .unwrap_or(0)
}

/// The data lines of a published output (each part file has its header
/// line), sorted: the order of rows across tasks is not the answer's.
fn sorted(lines: Vec<String>) -> Vec<String> {
    let mut lines: Vec<String> = lines
        .into_iter()
        .filter(|l| l != "id,name,balance,opened")
        .collect();
    lines.sort_unstable();
    lines
}

#[test]
fn a_coordinator_killed_mid_scan_reruns_to_the_same_answer_skipping_finished_tasks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (fw, csv) = (tmp.path().join("fw"), tmp.path().join("csv"));
    write_tables(&rows(24_000), &fw, &csv);
    // One stage (scan and sink): its tasks are sized by input, two run at
    // a time, and each sleeps per record so the kill lands mid-scan.
    let sql = "SELECT id, name, balance, opened FROM acct WHERE active OR balance < 0";
    let sized = "max-attempts = 1\nworkers = 2\nmax-task-bytes = 150000\nmax-parallelism = 16";
    let reference = csv_job(&csv, sql).write(&tmp.path().join("ref"));
    let reference_state = tmp.path().join("ref-state");
    run_finished(&reference, &reference_state);
    let want = sorted(published_lines(&reference_state.join("output/acct")));

    let mut job = fixed_job(&fw, sql);
    job.split_bytes = 50_000;
    job.job_extra = sized;
    job.sink_extra = "record-delay-us = 150";
    let file = job.write(&tmp.path().join("crash"));
    let data = tmp.path().join("crash-state");
    let mut ch = Coordhost::new(&file, &data);
    let mut running = ch.start();
    let finished = running
        .poll_until(|| {
            std::thread::sleep(Duration::from_millis(50));
            let n = scan_tasks_finished(&data);
            (n >= 2).then_some(n)
        })
        .expect("two scan tasks finished");
    assert!(
        matches!(running.kill(), Kill::Killed { .. }),
        "killed mid-scan"
    );
    assert!(
        finished < 16,
        "the scan was not over when the coordinator died: {finished} tasks"
    );
    assert!(!data.join("output/acct/_SUCCESS").exists());
    let kept = scan_tasks_finished(&data);
    let done = ch.run_to_end();
    assert!(done.summary.recovered(), "{}", done.summary.brief());
    assert!(
        done.summary.tasks_skipped() >= kept as u64 && kept >= 2,
        "the {kept} finished scan tasks are skipped: {}",
        done.summary.brief()
    );
    let got = sorted(published_lines(&data.join("output/acct")));
    assert!(
        want.len() > 10_000,
        "most rows pass the filter: {}",
        want.len()
    );
    assert_eq!(got.len(), want.len(), "as many rows as read as CSV");
    if let Some((g, w)) = got.iter().zip(&want).find(|(g, w)| g != w) {
        panic!("the answer differs from the rows read as CSV: `{g}` where `{w}`");
    }
}

#[test]
fn a_misbehaving_reader_fails_the_job_naming_the_plugin_and_the_table() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (fw, csv) = (tmp.path().join("fw"), tmp.path().join("csv"));
    write_tables(&rows(200), &fw, &csv);
    let secret = tmp.path().join("secret.txt");
    std::fs::write(&secret, "not granted\n").expect("secret");
    let sql = "SELECT id FROM acct";
    let cases: [(&str, &str, &str, &[&str]); 5] = [
        (
            "wrong-schema",
            "mode = \"wrong-schema\"",
            "call-timeout-ms = 5000",
            &[
                "`next-batch` broke the plugin contract",
                "the batch's columns are (x Utf8)",
                "but the table declares (id Int64, name Utf8",
            ],
        ),
        (
            "trap",
            "mode = \"trap\"",
            "call-timeout-ms = 5000",
            &["`next-batch` trapped", "faulty-reader: trap mode"],
        ),
        (
            "slow",
            "mode = \"slow\"",
            "call-timeout-ms = 300",
            &["`next-batch` did not return within its deadline of 300 ms"],
        ),
        (
            "escape",
            &format!("mode = \"escape\", path = \"{}\"", secret.display()),
            "call-timeout-ms = 5000",
            &["`next-batch` failed: I/O error: cannot read", "secret.txt"],
        ),
        // Empty batches for ever: each call returns in time, so only the
        // per-split bound (plugin::reader::MAX_SPLIT_BATCHES) ends it.
        (
            "endless",
            "mode = \"endless\"",
            "call-timeout-ms = 5000",
            &["the split gave more than 65536 batches"],
        ),
    ];
    for (mode, config, limits, needles) in cases {
        let mut job = fixed_job(&fw, sql);
        job.format = read_by("bad");
        job.plugins = reader("bad", "faulty-reader", config, &fw, limits);
        let file = job.write(&tmp.path().join(mode));
        let started = Instant::now();
        let error = run_failed(&file, &tmp.path().join(format!("{mode}-state")));
        assert!(
            error.contains("table `acct`, source reader `bad`"),
            "{mode}: names the table and the plugin: {error}"
        );
        for n in needles {
            assert!(error.contains(n), "{mode}: `{n}` in: {error}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{mode}: ended in {:?}",
            started.elapsed()
        );
    }

    // The sample reader granted another folder than the table's: the host
    // refuses the split before the reader sees it.
    let mut job = fixed_job(&fw, sql);
    job.plugins = fixed_reader(&csv);
    let file = job.write(&tmp.path().join("ungranted"));
    let error = run_failed(&file, &tmp.path().join("ungranted-state"));
    for n in [
        "table `acct`, source reader `fixed`",
        "outside",
        &fw.display().to_string(),
    ] {
        assert!(error.contains(n), "`{n}` in: {error}");
    }
}

#[test]
fn bad_reader_entries_are_refused_naming_the_field() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (fw, csv) = (tmp.path().join("fw"), tmp.path().join("csv"));
    write_tables(&rows(20), &fw, &csv);
    let sql = "SELECT id FROM acct";
    let case = |name: &str, format: &str, plugins: String| {
        let mut job = fixed_job(&fw, sql);
        job.format = format.to_string();
        job.plugins = plugins;
        (
            job.write(&tmp.path().join(name)),
            tmp.path().join(format!("{name}-state")),
        )
    };
    let (job, state) = case("unknown", &read_by("nope"), fixed_reader(&fw));
    let line = refused(&job, &state, "tables.acct.format.reader");
    assert!(line.contains("no plugin named `nope`"), "{line}");

    let (job, state) = case("enumerator", &read_by("files"), fixed_reader(&fw));
    let line = refused(&job, &state, "tables.acct.format.reader");
    assert!(
        line.contains("plugin `files` is a split-enumerator, not a source-reader"),
        "{line}"
    );

    let (job, state) = case(
        "key",
        "format = { reader = \"fixed\", widths = \"1,2\" }",
        fixed_reader(&fw),
    );
    refused(&job, &state, "tables.acct.format.widths");

    let (job, state) = case(
        "header",
        "format = { reader = \"fixed\" }\nheader = true",
        fixed_reader(&fw),
    );
    let line = refused(&job, &state, "tables.acct.format");
    assert!(
        line.contains("`header` and `delimiter` are for `csv`"),
        "{line}"
    );

    let (job, state) = case("number", "format = 5", fixed_reader(&fw));
    refused(&job, &state, "tables.acct.format");

    let (job, state) = case("no-reader", "format = {}", fixed_reader(&fw));
    refused(&job, &state, "tables.acct.format.reader");

    // A component of another kind, found when the job loads its plugins.
    let (job, state) = case(
        "kind",
        &read_by("fixed"),
        reader(
            "fixed",
            "file-enumerator",
            "",
            &fw,
            "call-timeout-ms = 5000",
        ),
    );
    let line = refused(&job, &state, "plugins.fixed.kind");
    assert!(
        line.contains("configured as a source-reader but the component is a split-enumerator"),
        "{line}"
    );

    // A configuration the reader refuses, found before any task runs.
    let (job, state) = case(
        "widths",
        &read_by("fixed"),
        reader(
            "fixed",
            "fixed-width-reader",
            "widths = \"8,20\"",
            &fw,
            "call-timeout-ms = 5000",
        ),
    );
    let line = refused(&job, &state, "plugins.fixed.config");
    assert!(
        line.contains("`widths` gives 2 widths, but the table declares 6 columns"),
        "{line}"
    );
}

#[test]
fn a_job_with_a_reader_runs_on_worker_processes_to_the_answer_read_as_csv() {
    use crate::support::workers::{Workers, external_args, free_port};
    let tmp = tempfile::tempdir().expect("tempdir");
    let (fw, csv) = (tmp.path().join("fw"), tmp.path().join("csv"));
    write_tables(&rows(2000), &fw, &csv);
    let sql = "SELECT name, count(*) AS n, sum(balance) AS total, min(opened) AS first, \
               max(rate) AS top FROM acct GROUP BY name ORDER BY name";
    let reference = csv_job(&csv, sql).write(&tmp.path().join("csv"));
    let reference_state = tmp.path().join("csv-state");
    run_finished(&reference, &reference_state);
    let want = published_lines(&reference_state.join("output/acct"));
    assert_eq!(want.len(), NAMES.len() + 2, "every name and null: {want:?}");

    let job = fixed_job(&fw, sql).write(&tmp.path().join("job"));
    let state = tmp.path().join("state");
    let addr = free_port();
    let workers = Workers::start(2, &addr, &tmp.path().join("workers"), 2);
    let out = run_output_with(
        &options(&job, &state, 2),
        &Knobs::default(),
        &external_args(&addr, 2, 5000),
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, workers.logs());
    let summary = out.summary.expect("a summary");
    assert_eq!(summary.status, JobStatus::Finished, "{:?}", summary.error);
    assert!(
        summary.vertices[0].splits_assigned > 20,
        "the files were read as many splits: {summary:?}"
    );
    assert_eq!(
        published_lines(&state.join("output/acct")),
        want,
        "the reader on worker processes gives the answer read as CSV"
    );
    // The scans ran on the workers, which loaded the reader there: at
    // most once each, whatever the number of their scan tasks.
    let mut loads = 0;
    for i in 0..2 {
        let log = workers.log_of(i);
        let n = log.matches("loaded a source reader").count();
        assert!(n <= 1, "w{i} loaded the reader {n} times:\n{log}");
        loads += n;
    }
    assert!(loads >= 1, "a worker read the table:\n{}", workers.logs());
}

#[test]
fn the_example_job_reads_its_fixed_width_files_to_the_answer_computed_here() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let examples = crate::support::workspace().join("examples");
    let data = tmp.path().join("fixed-width");
    std::fs::create_dir_all(&data).expect("data dir");
    let mut records = Vec::new();
    for entry in std::fs::read_dir(examples.join("fixed-width")).expect("example data") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("example file");
        std::fs::write(data.join(path.file_name().expect("name")), &bytes).expect("copy");
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            // Cut by the example's widths (6,22,12,10,9), trimmed; a short
            // line's missing fields are empty.
            let mut fields = Vec::new();
            let mut at = 0;
            for w in [6, 22, 12, 10, 9] {
                let end = (at + w).min(line.len());
                let text = std::str::from_utf8(&line[at.min(end)..end]).expect("utf-8");
                fields.push(text.trim().to_string());
                at += w;
            }
            records.push(fields);
        }
    }
    assert_eq!(records.len(), 20, "the example's 20 accounts");
    let plugins = plugin_path("file-enumerator")
        .parent()
        .expect("plugin dir")
        .display()
        .to_string();
    let text = std::fs::read_to_string(examples.join("fixed-width-sql.toml"))
        .expect("example job")
        .replace("../build/plugins", &plugins);
    let job = tmp.path().join("fixed-width-sql.toml");
    std::fs::write(&job, text).expect("job file");
    let state = tmp.path().join("state");
    let summary = run_finished(&job, &state);
    assert!(
        summary.vertices[0].splits_assigned >= 4,
        "several splits: {summary:?}"
    );

    // The answer, computed here from the records: per branch (null last),
    // count, named owners, total balance in cents, first date, overdrawn.
    let cents = |s: &str| -> Option<i64> {
        if s.is_empty() {
            return None;
        }
        let neg = s.starts_with('-');
        let (i, f) = s
            .trim_start_matches('-')
            .split_once('.')
            .expect("2 decimals");
        let v = i.parse::<i64>().expect("int") * 100 + f.parse::<i64>().expect("frac");
        Some(if neg { -v } else { v })
    };
    let mut branches: Vec<Option<String>> = records
        .iter()
        .map(|r| (!r[4].is_empty()).then(|| r[4].clone()))
        .collect();
    branches.sort_by(|a, b| match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, _) => std::cmp::Ordering::Greater,
        (_, None) => std::cmp::Ordering::Less,
        (Some(a), Some(b)) => a.cmp(b),
    });
    branches.dedup();
    let mut want = vec!["branch,accounts,named,total,first_opened,overdrawn".to_string()];
    for b in branches {
        let mine: Vec<&Vec<String>> = records
            .iter()
            .filter(|r| (!r[4].is_empty()).then(|| r[4].clone()) == b)
            .collect();
        let balances: Vec<i64> = mine.iter().filter_map(|r| cents(&r[2])).collect();
        let total: i64 = balances.iter().sum();
        let first = mine
            .iter()
            .map(|r| r[3].clone())
            .filter(|d| !d.is_empty())
            .min()
            .unwrap_or_default();
        want.push(format!(
            "{},{},{},{}{}.{:02},{first},{}",
            b.unwrap_or_default(),
            mine.len(),
            mine.iter().filter(|r| !r[1].is_empty()).count(),
            if total < 0 { "-" } else { "" },
            total.abs() / 100,
            total.abs() % 100,
            balances.iter().filter(|&&c| c < 0).count(),
        ));
    }
    assert_eq!(published_lines(&state.join("output/fixed-width")), want);
}

#[test]
fn plugin_check_and_call_recognise_a_source_reader() {
    let path = plugin_path("fixed-width-reader");
    let run = |args: &[&str]| {
        crate::support::coordhost()
            .args(args)
            .output()
            .expect("coordhost runs")
    };
    let out = run(&["plugin", "check", path.to_str().expect("utf-8 path")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "source-reader plugin\n",
        "  world:                   coordhost:reader/source-reader-plugin@0.1.0\n",
        "  exports:                 coordhost:reader/source-reader@0.1.0\n",
    ] {
        assert!(stdout.contains(line), "`{line}` in: {stdout}");
    }
    assert!(!stdout.contains("batch snapshot"), "{stdout}");
    let json = run(&[
        "plugin",
        "check",
        "--json",
        path.to_str().expect("utf-8 path"),
    ]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("valid JSON");
    assert_eq!(value["valid"], true);
    assert_eq!(value["kind"], "source-reader");
    assert_eq!(value["package"], "coordhost:reader");
    // `plugin call` reads a sample against declared columns (more in plugin_kit_readers.rs).
    let tmp = tempfile::tempdir().expect("tempdir");
    let sample = tmp.path().join("sample.txt");
    std::fs::write(&sample, "   7Ada\n  12Grace\n").expect("sample");
    let out = run(&[
        "plugin",
        "call",
        path.to_str().expect("utf-8 path"),
        "--config",
        "widths=4,10",
        "--column",
        "id=bigint",
        "--column",
        "name=varchar",
        "--input",
        sample.to_str().expect("utf-8 path"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for line in [
        "source-reader plugin (WIT coordhost:reader@0.1.0)\n",
        "     id=7, name=Ada\n     id=12, name=Grace\n",
    ] {
        assert!(stdout.contains(line), "`{line}` in: {stdout}");
    }
    // A source reader is not a scalar function, nor the other way round.
    let out = run(&[
        "plugin",
        "check",
        plugin_path("tax-function").to_str().expect("utf-8 path"),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("scalar-function plugin"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
