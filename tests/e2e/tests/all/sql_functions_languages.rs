//! Scalar functions in three languages from SQL (issue 27, items 4 and 5),
//! through the real `coordhost run` with the real components: the example
//! `examples/functions-three-languages-sql.toml` calls `priority`
//! (JavaScript, plugins/js-function), `net_price` (Python,
//! plugins/py-function) and `tax` (Rust, plugins/tax-function) over TPC-H
//! tables this test generates (SF 0.01); its answer must equal, line for
//! line, the same query with the three functions written in SQL. Then the
//! same job is SIGKILLed midway and run again on its data directory: the
//! rerun recovers, keeps the tasks finished before the kill, and publishes
//! the same answer. Last, the Python and JavaScript samples configured as
//! the benchmark's `plus_one` (config key `function`) against the built-in
//! `x + 1`, and their refusal of a function they do not have.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::crash::{Coordhost, Kill};
use crate::support::published_lines;

/// The example's job name (its data folder and sink folder).
const JOB: &str = "functions-three-languages";

/// The example's query with the functions written in SQL: the JavaScript
/// `priority`, the Python `net_price` and the Rust `tax` as their doc
/// comments define them (the tax rates as in examples/tax-by-region-sql.toml).
const SQL_ONLY: &str = r#"
SELECT
  r_name,
  CAST(split_part(o_orderpriority, '-', 1) AS BIGINT) AS priority,
  count(*) AS lines,
  sum(round(l_extendedprice * (1 - l_discount), 2)) AS revenue,
  sum(round(round(l_extendedprice * (1 - l_discount), 2) * CAST(CASE r_name
        WHEN 'AFRICA' THEN 1500 WHEN 'AMERICA' THEN 700 WHEN 'ASIA' THEN 1000
        WHEN 'EUROPE' THEN 2000 WHEN 'MIDDLE EAST' THEN 1250 END AS DECIMAL(6,0))
        / CAST(10000 AS DECIMAL(6,0)), 2)) AS tax
FROM lineitem
JOIN orders ON l_orderkey = o_orderkey
JOIN customer ON o_custkey = c_custkey
JOIN nation ON c_nationkey = n_nationkey
JOIN region ON n_regionkey = r_regionkey
GROUP BY r_name, CAST(split_part(o_orderpriority, '-', 1) AS BIGINT)
ORDER BY r_name, priority
"#;

/// TPC-H at SF 0.01 as CSV under `dir` (the five tables the example
/// reads); returns the number of lineitem rows.
fn tpch(dir: &Path) -> u64 {
    use coordhost_datagen::{Format, Table};
    let written = coordhost_datagen::write_tpch(
        dir,
        &[
            Table::Region,
            Table::Nation,
            Table::Customer,
            Table::Orders,
            Table::LineItem,
        ],
        Format::Csv,
        0.01,
        2,
        coordhost_datagen::DEFAULT_ROW_GROUP_ROWS,
    )
    .expect("TPC-H tables");
    written.last().expect("lineitem").rows
}

/// The example with the test's data and plugins; `sql` replaces its query
/// when given; `split_bytes` its splits' size (more, smaller tasks).
fn example(dir: &Path, data: &Path, sql: Option<&str>, split_bytes: u64) -> PathBuf {
    std::fs::create_dir_all(dir).expect("job dir");
    let job = crate::support::job::example_job(
        "functions-three-languages-sql.toml",
        "build/data/tpch-sf0.1",
        data,
        dir,
    );
    let mut text = std::fs::read_to_string(&job).expect("job");
    text = text.replace(
        "split-bytes = 4194304",
        &format!("split-bytes = {split_bytes}"),
    );
    if let Some(sql) = sql {
        let start = text.find("sql = \"\"\"").expect("the example has a query");
        let end = start + 9 + text[start + 9..].find("\"\"\"").expect("its end") + 3;
        text.replace_range(start..end, &format!("sql = \"\"\"{sql}\"\"\""));
        // No component at all: the query in SQL alone.
        let first = text
            .find("[functions.")
            .expect("the example declares functions");
        let after = text.find("[plugins.shuffle]").expect("the shuffle plugin");
        assert!(first < after, "the functions come before the plugins");
        text.replace_range(first..after, "");
        assert!(
            !text.contains("[functions."),
            "every function was taken out"
        );
    }
    std::fs::write(&job, text).expect("job");
    job
}

/// Runs `job` on `state` to the end (exit 0, status finished).
fn run_to_end(job: &Path, state: &Path) -> crate::support::crash::Finished {
    Coordhost::new(job, state).run_to_end()
}

/// The answer's lines, checked for shape: the header, one line per region
/// and priority (5 × 5), every line item counted once.
fn checked(lines: &[String], line_items: u64) {
    assert_eq!(lines[0], "r_name,priority,lines,revenue,tax", "{lines:?}");
    assert_eq!(lines.len(), 26, "5 regions × 5 priorities: {lines:?}");
    let mut counted = 0;
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), 5, "{line}");
        let priority: u32 = cells[1].parse().expect("a priority");
        assert!((1..=5).contains(&priority), "{line}");
        counted += cells[2].parse::<u64>().expect("a count");
        assert!(
            cells[3].contains('.') && cells[4].contains('.'),
            "decimals: {line}"
        );
    }
    assert_eq!(counted, line_items, "every line item is counted once");
}

#[test]
fn the_example_job_calls_rust_python_and_js_functions_and_equals_the_query_in_sql() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("tpch");
    let line_items = tpch(&data);

    let wasm_job = example(&tmp.path().join("wasm"), &data, None, 4_194_304);
    let wasm_state = tmp.path().join("wasm-state");
    run_to_end(&wasm_job, &wasm_state);
    let wasm = published_lines(&wasm_state.join("output").join(JOB));
    checked(&wasm, line_items);

    let sql_job = example(&tmp.path().join("sql"), &data, Some(SQL_ONLY), 4_194_304);
    let sql_state = tmp.path().join("sql-state");
    run_to_end(&sql_job, &sql_state);
    let sql = published_lines(&sql_state.join("output").join(JOB));
    assert_eq!(
        wasm, sql,
        "the functions in Rust, Python and JavaScript give the answer of the query in SQL"
    );
}

/// How many `ExecutionFinished` events the job's log under `state` holds
/// now (`coordhost log inspect --json`; 0 before the log exists).
fn finished_tasks(state: &Path) -> usize {
    let out = crate::support::coordhost()
        .args(["log", "inspect"])
        .arg(state.join(JOB))
        .arg("--json")
        .output()
        .expect("coordhost log inspect");
    if !out.status.success() {
        return 0;
    }
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    doc["events"].as_array().map_or(0, |events| {
        events
            .iter()
            .filter(|e| e["event"]["kind"] == "ExecutionFinished")
            .count()
    })
}

#[test]
fn the_example_job_killed_midway_reruns_to_the_same_answer() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("tpch");
    let line_items = tpch(&data);
    // Smaller splits than the example's: more tasks, so the kill lands between them.
    let job = example(&tmp.path().join("job"), &data, None, 1_000_000);

    // The answer an uninterrupted run gives: the query in SQL, which the
    // test above shows equal to the example's (a run of the functions
    // compiles two interpreters' worth of components; this one, none).
    let sql_job = example(&tmp.path().join("sql"), &data, Some(SQL_ONLY), 1_000_000);
    let reference_state = tmp.path().join("reference");
    run_to_end(&sql_job, &reference_state);
    let reference = published_lines(&reference_state.join("output").join(JOB));
    checked(&reference, line_items);

    let state = tmp.path().join("killed");
    let mut coordhost = Coordhost::new(&job, &state);
    let mut running = coordhost.start();
    let seen = running
        .poll_until(|| {
            let n = finished_tasks(&state);
            (n >= 2).then_some(n)
        })
        .unwrap_or_else(|e| panic!("no task finished before the kill: {e}"));
    match running.kill() {
        Kill::Killed { after } => {
            assert!(after < Duration::from_secs(600));
        }
        Kill::TooLate(_) => {
            panic!("the job ended before the SIGKILL ({seen} tasks were finished when it was sent)")
        }
    }
    assert!(
        !state.join("output").join(JOB).join("_SUCCESS").exists(),
        "nothing was published before the kill"
    );
    let rerun = coordhost.run_to_end();
    assert!(rerun.summary.recovered(), "{}", rerun.summary.brief());
    assert!(
        rerun.summary.tasks_skipped() > 0,
        "the rerun kept the tasks finished before the kill: {}",
        rerun.summary.brief()
    );
    assert_eq!(
        published_lines(&state.join("output").join(JOB)),
        reference,
        "the rerun publishes the answer of an uninterrupted run (the query in SQL)"
    );
}

/// A SQL job over `ids.csv` (one `bigint` column `id`: 0..n) under `dir`
/// with `functions` declared and `sql`; returns the job file.
fn ids_job(dir: &Path, n: i64, functions: &str, sql: &str) -> PathBuf {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).expect("input dir");
    let mut csv = String::from("id\n");
    for id in 0..n {
        csv.push_str(&format!("{id}\n"));
    }
    std::fs::write(input.join("ids.csv"), csv).expect("csv");
    let plugin = |n: &str| crate::support::plugin_path(n).display().to_string();
    let text = format!(
        r#"[job]
name = "ids"
parallelism = 2
max-attempts = 1
sql = """{sql}"""

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{files}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = 4000, pattern = ".csv" }}
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
schema = {{ id = "bigint" }}

{functions}
[sink]
path = "${{data_dir}}/output/ids"
format = "csv"
"#,
        files = plugin("file-enumerator"),
        shuffle = plugin("local-shuffle"),
        input = input.display(),
    );
    let job = dir.join("ids.toml");
    std::fs::write(&job, text).expect("job file");
    job
}

/// `[functions.plus_one]`: sample `component` configured with
/// `function = "{function}"` (py-function and js-function).
fn configured(component: &str, function: &str) -> String {
    format!(
        "[functions.plus_one]\ncomponent = \"{}\"\nconfig = {{ function = \"{function}\" }}\nlimits = {{ call-timeout-ms = 60000 }}\n",
        crate::support::plugin_path(component).display()
    )
}

/// The benchmark's guests (host/benches/functions.rs): the Python and
/// JavaScript samples configured as `plus_one` answer `x + 1` row for row
/// as DataFusion's built-in `+` does, in one query beside it (nulls give
/// null, the top of the range wraps); a `function` they do not have, or
/// another key, is refused at load (exit 2) naming the field, the
/// component and the value.
#[test]
fn the_python_and_js_samples_configured_as_plus_one_equal_the_built_in_expression() {
    use crate::support::job::options;
    use crate::support::knobs::{Knobs, run_output};
    let tmp = tempfile::tempdir().expect("tempdir");
    let n = 2500;
    let sql = "SELECT id, plus_one(id) AS guest, id + 1 AS builtin, \
               plus_one(CASE WHEN id % 7 = 3 THEN NULL ELSE id END) AS holes, \
               plus_one(9223372036854775807 - id) AS top FROM t ORDER BY id";
    for component in ["py-function", "js-function"] {
        let dir = tmp.path().join(component);
        let job = ids_job(&dir, n, &configured(component, "plus_one"), sql);
        let state = dir.join("state");
        let out = run_output(&options(&job, &state, 2), &Knobs::default());
        assert_eq!(out.code, Some(0), "{component}: {}", out.stderr);
        let mut expected = vec!["id,guest,builtin,holes,top".to_string()];
        for id in 0..n {
            let holes = if id % 7 == 3 {
                String::new()
            } else {
                (id + 1).to_string()
            };
            // Wraps at the top of the range: i64::MAX + 1 is i64::MIN.
            let top = (i64::MAX - id).wrapping_add(1);
            expected.push(format!("{id},{},{},{holes},{top}", id + 1, id + 1));
        }
        assert_eq!(
            published_lines(&state.join("output/ids")),
            expected,
            "{component}"
        );

        for (case, functions, says) in [
            (
                "unknown-function",
                configured(component, "plus_two"),
                "unknown function `plus_two` (config key `function`)",
            ),
            (
                "unknown-key",
                configured(component, "plus_one").replace("{ function =", "{ mode ="),
                "unknown key `mode`",
            ),
        ] {
            let dir = tmp.path().join(format!("{component}-{case}"));
            let job = ids_job(&dir, 10, &functions, "SELECT plus_one(id) AS x FROM t");
            let state = dir.join("state");
            let out = run_output(&options(&job, &state, 2), &Knobs::default());
            assert_eq!(out.code, Some(2), "{component}, {case}: {}", out.stderr);
            assert!(out.summary.is_none(), "{component}, {case}: {}", out.stderr);
            assert!(!state.exists(), "{component}, {case}: nothing was created");
            let line = out
                .stderr
                .lines()
                .find(|l| l.contains("field `functions.plus_one.config`"))
                .unwrap_or_else(|| {
                    panic!(
                        "{component}, {case}: a line naming the field: {}",
                        out.stderr
                    )
                });
            assert!(
                line.contains(says) && line.contains(component),
                "{component}, {case}: `{says}` in: {line}"
            );
        }
    }
}
