//! Scalar functions in SQL (issue 27, item 1; docs/sql.md, "Scalar
//! functions") through the real `coordhost run` with real components:
//! the sample `tax-function` called from SQL over a CSV table this test
//! writes, its answer compared with the tax computed here; and
//! `faulty-function` (x + 1, or the misbehaviour its `mode` names) for the
//! sandbox on the real path — a trap, a call past its deadline, an answer
//! of the wrong type or length, a non-deterministic function refused at
//! load — plus the refused declarations (a missing component, another
//! world, a type Arrow has not, a bad name) and a coordinator killed
//! midway whose rerun publishes the same answer. The same on worker
//! processes: `sql_functions_workers.rs`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::job::options;
use crate::support::knobs::{CrashPoint, Knobs, run_output};
use crate::support::{plugin_path, published_lines};
use coordhost::job::{JobStatus, Summary};

const REGIONS: [&str; 6] = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST", "MARS"];

/// The rate of a region in basis points, as this test knows it (the
/// sample's doc comment); `None` for a region it does not tax.
fn rate_bp(region: &str) -> Option<i128> {
    match region {
        "AFRICA" => Some(1500),
        "AMERICA" => Some(700),
        "ASIA" => Some(1000),
        "EUROPE" => Some(2000),
        "MIDDLE EAST" => Some(1250),
        _ => None,
    }
}

/// One row of the test table: id, price in cents (`None`: empty field), region.
pub(crate) type Row = (i64, Option<i128>, &'static str);

/// `n` rows spread over three CSV files under `dir` (table `t`: `id
/// bigint, price decimal(15,2), region varchar`), with negative prices,
/// empty prices and an untaxed region among them.
pub(crate) fn write_table(dir: &Path, n: i64) -> Vec<Row> {
    std::fs::create_dir_all(dir).expect("input dir");
    let mut rows = Vec::new();
    let mut files: Vec<String> = vec!["id,price,region\n".to_string(); 3];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for id in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let cents = (x % 2_000_000) as i128 - 100_000;
        let price = (id % 37 != 5).then_some(cents);
        let region = REGIONS[(x >> 20) as usize % REGIONS.len()];
        let text = price.map_or_else(String::new, |c| {
            let sign = if c < 0 { "-" } else { "" };
            format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100)
        });
        files[(id % 3) as usize].push_str(&format!("{id},{text},{region}\n"));
        rows.push((id, price, region));
    }
    for (i, f) in files.iter().enumerate() {
        std::fs::write(dir.join(format!("part-{i}.csv")), f).expect("csv");
    }
    rows
}

/// The tax in cents as this test computes it: `cents * bp / 10000`
/// rounded half away from zero, by exact integer arithmetic.
fn tax_cents(cents: i128, bp: i128) -> i128 {
    let p = cents * bp;
    let q = p.abs() / 10_000;
    let r = p.abs() % 10_000;
    let q = if r * 2 >= 10_000 { q + 1 } else { q };
    if p < 0 { -q } else { q }
}

/// Cents as the CSV sink writes a `decimal(15,2)`.
fn money(c: i128) -> String {
    let sign = if c < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", c.abs() / 100, c.abs() % 100)
}

/// A SQL job over the CSV files of `input` with `functions` (TOML of the
/// `[functions.*]` tables) and `sql`.
pub(crate) fn job_file(
    dir: &Path,
    input: &Path,
    functions: &str,
    sql: &str,
    max_attempts: u32,
) -> PathBuf {
    let plugin = |n: &str| plugin_path(n).display().to_string();
    let text = format!(
        r#"[job]
name = "udf"
parallelism = 2
max-attempts = {max_attempts}
sql = """{sql}"""

[recovery]
enabled = true
previous-worker-timeout-ms = 5000

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{files}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = 20000, pattern = ".csv" }}
dirs = [{{ path = "{input}", writable = false }}]

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[tables.t]
plugin = "files"
format = "csv"
header = true
schema = {{ id = "bigint", price = "decimal(15,2)", region = "varchar" }}

{functions}

[sink]
path = "${{data_dir}}/output/udf"
format = "csv"
"#,
        files = plugin("file-enumerator"),
        shuffle = plugin("local-shuffle"),
        input = input.display(),
    );
    std::fs::create_dir_all(dir).expect("job dir");
    let job = dir.join("udf.toml");
    std::fs::write(&job, text).expect("job file");
    job
}

pub(crate) fn tax_function() -> String {
    format!(
        "[functions.tax]\ncomponent = \"{}\"\nlimits = {{ call-timeout-ms = 5000, memory-mib = 64 }}\n",
        plugin_path("tax-function").display()
    )
}

/// `[functions.plus_one]`: faulty-function in `mode`, with `limits`.
pub(crate) fn plus_one(mode: &str, limits: &str) -> String {
    format!(
        "[functions.plus_one]\ncomponent = \"{}\"\nconfig = {{ mode = \"{mode}\" }}\nlimits = {{ {limits} }}\n",
        plugin_path("faulty-function").display()
    )
}

fn run(job: &Path, state: &Path, knobs: &Knobs) -> (Option<Summary>, Option<i32>, String) {
    let out = run_output(&options(job, state, 2), knobs);
    (out.summary, out.code, out.stderr)
}

fn run_finished(job: &Path, state: &Path) -> Summary {
    let (summary, code, stderr) = run(job, state, &Knobs::default());
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

/// A run that fails while running: exit 1, a failed summary; its error.
fn run_failed(job: &Path, state: &Path) -> String {
    let (summary, code, stderr) = run(job, state, &Knobs::default());
    assert_eq!(code, Some(1), "{stderr}");
    let s = summary.unwrap_or_else(|| panic!("a summary: {stderr}"));
    assert_eq!(s.status, JobStatus::Failed, "{stderr}");
    assert!(
        !state.join("output/udf/_SUCCESS").exists(),
        "nothing is published"
    );
    s.error.unwrap_or_default()
}

/// A refused job: exit 2, no summary, nothing created; the line naming
/// `field`.
fn refused(job: &Path, state: &Path, field: &str) -> String {
    let (summary, code, stderr) = run(job, state, &Knobs::default());
    assert!(summary.is_none(), "{stderr}");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(!state.exists(), "nothing was created: {stderr}");
    stderr
        .lines()
        .find(|l| l.contains(&format!("field `{field}`")))
        .unwrap_or_else(|| panic!("a line naming `{field}`: {stderr}"))
        .to_string()
}

#[test]
fn sql_calls_the_sample_tax_function_and_its_answer_is_the_tax_computed_here() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    let rows = write_table(&input, 3000);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &tax_function(),
        "SELECT id, price, tax(price, region) AS tax FROM t ORDER BY id",
        1,
    );
    let state = tmp.path().join("state");
    run_finished(&job, &state);
    let mut expected = vec!["id,price,tax".to_string()];
    let mut taxed = 0;
    for (id, price, region) in &rows {
        let tax = match (price, rate_bp(region)) {
            (Some(c), Some(bp)) => {
                taxed += 1;
                money(tax_cents(*c, bp))
            }
            _ => String::new(),
        };
        expected.push(format!(
            "{id},{},{tax}",
            price.map_or_else(String::new, money)
        ));
    }
    assert!(taxed > 2000, "most rows are taxed: {taxed}");
    assert_eq!(published_lines(&state.join("output/udf")), expected);
}

#[test]
fn a_function_feeds_an_aggregate_across_stages() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    let rows = write_table(&input, 2000);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &format!(
            "{}\n{}",
            tax_function(),
            plus_one("ok", "call-timeout-ms = 5000")
        ),
        "SELECT region, sum(tax(price, region)) AS total, sum(plus_one(id)) AS ids FROM t GROUP BY region ORDER BY region",
        1,
    );
    let state = tmp.path().join("state");
    run_finished(&job, &state);
    let mut expected = vec!["region,total,ids".to_string()];
    let mut regions: Vec<&str> = REGIONS.to_vec();
    regions.sort_unstable();
    for r in regions {
        let mine: Vec<&Row> = rows.iter().filter(|row| row.2 == r).collect();
        let total: Option<i128> = rate_bp(r).map(|bp| {
            mine.iter()
                .filter_map(|row| row.1.map(|c| tax_cents(c, bp)))
                .sum()
        });
        let ids: i64 = mine.iter().map(|row| row.0 + 1).sum();
        expected.push(format!(
            "{r},{},{ids}",
            total.map_or_else(String::new, money)
        ));
    }
    assert_eq!(published_lines(&state.join("output/udf")), expected);
}

#[test]
fn a_trapping_function_fails_each_attempt_naming_the_function_the_plugin_and_the_call() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 100);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &plus_one("trap", "call-timeout-ms = 5000"),
        "SELECT plus_one(id) AS x FROM t",
        2,
    );
    let state = tmp.path().join("state");
    let (summary, code, stderr) = run(&job, &state, &Knobs::default());
    assert_eq!(code, Some(1), "{stderr}");
    let s = summary.expect("a summary");
    let error = s.error.clone().unwrap_or_default();
    for needle in [
        "scalar function `plus_one`",
        "faulty-function.wasm",
        "`invoke` trapped",
        "plus_one was told to trap",
    ] {
        assert!(error.contains(needle), "`{needle}` in: {error}");
    }
    assert!(
        s.tasks_run >= 2
            && s.reset_reasons.get("failover").copied().unwrap_or(0) >= 1
            && error.contains("failed on attempt 1 (of at most 2)"),
        "the failed execution vertex was tried again per max-attempts = 2: {s:?}"
    );
}

#[test]
fn a_function_past_its_deadline_fails_the_task_in_time_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 100);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &plus_one("slow", "call-timeout-ms = 300"),
        "SELECT plus_one(id) AS x FROM t",
        1,
    );
    let state = tmp.path().join("state");
    let started = Instant::now();
    let error = run_failed(&job, &state);
    let took = started.elapsed();
    for needle in [
        "scalar function `plus_one`",
        "`invoke` did not return within its deadline of 300 ms",
    ] {
        assert!(error.contains(needle), "`{needle}` in: {error}");
    }
    // Loading, planning and compiling take a few seconds on a loaded
    // machine; a loop that no deadline stopped would never end.
    assert!(took < Duration::from_secs(60), "the run ended in {took:?}");
}

#[test]
fn a_function_that_allocates_past_its_cap_fails_the_task_naming_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 100);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &plus_one("memory", "call-timeout-ms = 20000, memory-mib = 32"),
        "SELECT plus_one(id) AS x FROM t",
        1,
    );
    let error = run_failed(&job, &tmp.path().join("state"));
    for needle in [
        "scalar function `plus_one`",
        "`invoke` tried to grow memory past its cap of 33554432 bytes",
    ] {
        assert!(error.contains(needle), "`{needle}` in: {error}");
    }
}

#[test]
fn an_answer_of_the_wrong_type_or_length_fails_naming_both() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 100);
    for (mode, needles) in [
        ("wrong-type", &["of type Utf8", "declared Int64"][..]),
        ("wrong-length", &["rows, but the function was given"][..]),
    ] {
        let job = job_file(
            &tmp.path().join(mode),
            &input,
            &plus_one(mode, "call-timeout-ms = 5000"),
            "SELECT plus_one(id) AS x FROM t",
            1,
        );
        let error = run_failed(&job, &tmp.path().join(format!("{mode}-state")));
        assert!(
            error.contains("scalar function `plus_one`")
                && error.contains("`invoke` broke the plugin contract"),
            "{mode}: {error}"
        );
        for n in needles {
            assert!(error.contains(n), "{mode}: `{n}` in: {error}");
        }
    }
}

#[test]
fn a_non_deterministic_function_and_bad_declarations_are_refused_naming_the_field() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 10);
    let sql = "SELECT plus_one(id) AS x FROM t";
    let case = |name: &str, functions: &str| {
        (
            job_file(&tmp.path().join(name), &input, functions, sql, 1),
            tmp.path().join(format!("{name}-state")),
        )
    };

    let (job, state) = case("nondeterministic", &plus_one("nondeterministic", ""));
    let line = refused(&job, &state, "functions.plus_one");
    for n in [
        "function `plus_one`",
        "faulty-function.wasm",
        "non-deterministic",
        "recovery re-runs tasks",
    ] {
        assert!(line.contains(n), "`{n}` in: {line}");
    }

    let missing = tmp.path().join("nowhere.wasm");
    let (job, state) = case(
        "missing",
        &format!(
            "[functions.plus_one]\ncomponent = \"{}\"\n",
            missing.display()
        ),
    );
    let line = refused(&job, &state, "functions.plus_one.component");
    assert!(line.contains("nowhere.wasm"), "{line}");

    let (job, state) = case(
        "world",
        &format!(
            "[functions.plus_one]\ncomponent = \"{}\"\n",
            plugin_path("file-enumerator").display()
        ),
    );
    let line = refused(&job, &state, "functions.plus_one.component");
    assert!(
        line.contains("configured as a scalar-function but the component is a split-enumerator"),
        "{line}"
    );

    let (job, state) = case("type", &plus_one("bad-decimal", ""));
    let line = refused(&job, &state, "functions.plus_one.component");
    assert!(
        line.contains("decimal128(40, 2) is not a decimal type"),
        "{line}"
    );

    let (job, state) = case("config", &plus_one("sideways", ""));
    let line = refused(&job, &state, "functions.plus_one.config");
    assert!(line.contains("unknown mode `sideways`"), "{line}");

    let (job, state) = case(
        "name",
        &plus_one("ok", "").replace("[functions.plus_one]", "[functions.PlusOne]"),
    );
    refused(&job, &state, "functions.PlusOne");

    let (job, state) = case("builtin", &plus_one("ok", "").replace("plus_one]", "abs]"));
    let line = refused(&job, &state, "job.sql");
    assert!(
        line.contains("`abs`") && line.contains("built-in"),
        "{line}"
    );

    let (job, state) = case("limits", &plus_one("ok", "memory-mib = 0"));
    refused(&job, &state, "functions.plus_one.limits.memory-mib");
}

#[test]
fn a_coordinator_killed_after_the_first_stage_reruns_to_the_same_answer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 3000);
    let sql = "SELECT region, sum(tax(price, region)) AS total, count(*) AS n FROM t GROUP BY region ORDER BY region";
    let reference_job = job_file(&tmp.path().join("ref"), &input, &tax_function(), sql, 1);
    let reference_state = tmp.path().join("ref-state");
    run_finished(&reference_job, &reference_state);
    let reference = published_lines(&reference_state.join("output/udf"));

    let job = job_file(&tmp.path().join("crash"), &input, &tax_function(), sql, 1);
    let state = tmp.path().join("crash-state");
    let knobs = Knobs::crash(CrashPoint::AfterFinished {
        vertex: "stage0".to_owned(),
        count: 2,
    });
    let (summary, code, stderr) = run(&job, &state, &knobs);
    assert_ne!(code, Some(0), "the crash stops the run: {stderr}");
    assert!(stderr.contains("simulated coordinator crash"), "{stderr}");
    if let Some(s) = &summary {
        assert_ne!(s.status, JobStatus::Finished);
    }
    assert!(!state.join("output/udf/_SUCCESS").exists());
    let rerun = run_finished(&job, &state);
    assert!(rerun.recovered, "the rerun recovers: {rerun:?}");
    assert_eq!(
        published_lines(&state.join("output/udf")),
        reference,
        "the same answer"
    );
}

/// A function's configuration is part of what a rerun replays: a new
/// `surcharge-bp` after a crash is an edited job (exit 2), never a rerun
/// whose skipped stage taxed at the old rate and whose rerun stage at the
/// new (docs/sql.md, "Scalar functions").
#[test]
fn a_function_configured_otherwise_after_a_crash_is_an_edited_job() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 3000);
    let sql = "SELECT region, sum(tax(price, region)) AS total, count(*) AS n FROM t GROUP BY region ORDER BY region";
    let with_rate = |bp: u32| format!("{}config = {{ surcharge-bp = \"{bp}\" }}\n", tax_function());
    let job = job_file(&tmp.path().join("crash"), &input, &with_rate(0), sql, 1);
    let state = tmp.path().join("crash-state");
    let knobs = Knobs::crash(CrashPoint::AfterFinished {
        vertex: "stage0".to_owned(),
        count: 2,
    });
    let (_, code, stderr) = run(&job, &state, &knobs);
    assert_ne!(code, Some(0), "the crash stops the run: {stderr}");
    assert!(stderr.contains("simulated coordinator crash"), "{stderr}");
    let edited = job_file(&tmp.path().join("crash"), &input, &with_rate(250), sql, 1);
    let (summary, code, stderr) = run(&edited, &state, &Knobs::default());
    assert_eq!(code, Some(2), "a new surcharge is an edited job: {stderr}");
    assert!(summary.is_none(), "{stderr}");
    assert!(
        stderr.contains("the job's event log was written for a different job graph"),
        "{stderr}"
    );
    assert!(!state.join("output/udf/_SUCCESS").exists(), "{stderr}");
    // The job as it was recovers.
    let back = job_file(&tmp.path().join("crash"), &input, &with_rate(0), sql, 1);
    let rerun = run_finished(&back, &state);
    assert!(rerun.recovered, "the unedited job recovers: {rerun:?}");
}

#[test]
fn the_example_job_computes_the_same_tax_with_the_wasm_function_as_written_in_sql() {
    use coordhost_datagen::{Format, Table};
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("tpch");
    let written = coordhost_datagen::write_tpch(
        &data,
        &[Table::Region, Table::Nation, Table::Customer, Table::Orders],
        Format::Csv,
        0.01,
        2,
        coordhost_datagen::DEFAULT_ROW_GROUP_ROWS,
    )
    .expect("TPC-H tables");
    let orders = written.last().expect("orders").rows;
    let dir = tmp.path().join("job");
    std::fs::create_dir_all(&dir).expect("job dir");
    let job = crate::support::job::example_job(
        "tax-by-region-sql.toml",
        "build/data/tpch-sf0.1",
        &data,
        &dir,
    );
    let state = tmp.path().join("state");
    run_finished(&job, &state);
    let lines = published_lines(&state.join("output/tax-by-region"));
    assert_eq!(lines[0], "r_name,orders,tax_wasm,tax_sql");
    assert_eq!(lines.len(), 6, "one row per region: {lines:?}");
    let mut counted = 0;
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), 4, "{line}");
        counted += cells[1].parse::<u64>().expect("a count");
        assert!(!cells[2].is_empty(), "every region is taxed: {line}");
        assert_eq!(
            cells[2], cells[3],
            "the Wasm function and the SQL agree: {line}"
        );
    }
    assert_eq!(counted, orders, "every order is counted once");
}
