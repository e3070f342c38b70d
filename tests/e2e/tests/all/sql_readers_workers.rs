//! Source readers on worker processes (issue 27, item 3; docs/workers.md,
//! "Plugin components on workers"), through the real `coordhost run` (and
//! `--listen ... --external-workers 3` with 3 real `coordhost worker`
//! processes) with the real sample components:
//!
//! - the example `functions-and-reader-sql.toml` reads a fixed-width table
//!   through the Wasm reader `fixed-width-reader` and calls a JavaScript,
//!   a Python and a Rust scalar function over TPC-H tables this test
//!   generates (SF 0.01). Its answer, embedded and on 3 workers, equals
//!   the same query with the functions written in SQL and the fixed-width
//!   table replaced by TPC-H's `nation` and `region` read as CSV (no Wasm
//!   at all); each worker loads the reader at most once and keeps its
//!   component under its SHA-256;
//! - the same job with its coordinator SIGKILLed midway reruns to that
//!   same answer, embedded and on 3 workers;
//! - a coordinator that damages the component bytes it serves (fail point
//!   `coordinator::corrupt-component`): the workers refuse the reader's
//!   bytes naming the reader and both hashes, the job fails with exit 1,
//!   nothing is published and no worker keeps the damaged bytes;
//! - a reader on a worker gets only its granted directories (a file in its
//!   grant is readable, one beside it is not), the host refuses a split
//!   outside its grants, and its deadline holds there as embedded.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::Digest as _;

use crate::sql_readers::{fixed_job, fixed_reader, read_by, reader, rows, write_tables};
use crate::support::crash::{Coordhost, Kill};
use crate::support::job::options;
use crate::support::knobs::{RunOutput, run_output_with_failpoints};
use crate::support::workers::{Workers, external_args, free_port};
use crate::support::{plugin_path, published_lines};
use coordhost::job::JobStatus;

/// Worker processes of the example's runs.
const WORKERS: usize = 3;

/// The example's job name (its data folder and sink folder).
const JOB: &str = "functions-and-reader";

/// What a worker logs when it loaded a source reader.
const LOADED: &str = "loaded a source reader";

/// The example's query with the three functions written in SQL (as their
/// doc comments define them; the tax rates as in
/// examples/tax-by-region-sql.toml) and the fixed-width `geography` table
/// replaced by TPC-H's `nation` and `region` read as CSV by the host.
const SQL_ONLY: &str = r#"
SELECT
  r_name AS region,
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
ORDER BY region, priority
"#;

/// Lowercase hex SHA-256 of the file at `path`.
fn sha256_of(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read component");
    sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// TPC-H at SF 0.01 as CSV under `dir` (the tables the example and its
/// SQL-only twin read); returns the number of lineitem rows.
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

/// The `[plugins.NAME-files]` and `[tables.NAME]` of TPC-H table `name`
/// (columns `schema`) read as CSV from `data/name`.
fn csv_table(data: &Path, name: &str, schema: &str) -> String {
    let dir = data.join(name);
    format!(
        "[plugins.{name}-files]\ncomponent = \"{}\"\nkind = \"split-enumerator\"\nconfig = {{ dir = \"{}\", split-bytes = 4194304, pattern = \".csv\" }}\ndirs = [{{ path = \"{}\", writable = false }}]\n\n[tables.{name}]\nplugin = \"{name}-files\"\nformat = \"csv\"\nheader = true\nschema = {schema}\n\n",
        plugin_path("file-enumerator").display(),
        dir.display(),
        dir.display()
    )
}

/// The example with the test's TPC-H tables under `data` and the plugins,
/// written to `dir` beside a copy of its fixed-width folder; its splits of
/// the TPC-H tables `split_bytes` long, and its sink slowed by
/// `sink_delay_us` per record (0: none). With `sql_only`, its query is
/// [`SQL_ONLY`]: no `[functions]`, and `nation` and `region` read as CSV
/// in place of the fixed-width table and its reader.
fn example(
    dir: &Path,
    data: &Path,
    sql_only: bool,
    split_bytes: u64,
    sink_delay_us: u64,
) -> PathBuf {
    std::fs::create_dir_all(dir.join("geography")).expect("job dir");
    let examples = crate::support::workspace().join("examples");
    for entry in std::fs::read_dir(examples.join("geography")).expect("the example's folder") {
        let path = entry.expect("entry").path();
        std::fs::copy(
            &path,
            dir.join("geography").join(path.file_name().expect("name")),
        )
        .expect("copy the fixed-width file");
    }
    let job = crate::support::job::example_job(
        "functions-and-reader-sql.toml",
        "build/data/tpch-sf0.1",
        data,
        dir,
    );
    let mut text = std::fs::read_to_string(&job).expect("job");
    text = text.replace(
        "split-bytes = 4194304",
        &format!("split-bytes = {split_bytes}"),
    );
    if sql_only {
        let start = text.find("sql = \"\"\"").expect("the example has a query");
        let end = start + 9 + text[start + 9..].find("\"\"\"").expect("its end") + 3;
        text.replace_range(start..end, &format!("sql = \"\"\"{SQL_ONLY}\"\"\""));
        // No function at all.
        let first = text
            .find("[functions.")
            .expect("the example declares functions");
        let after = text.find("[plugins.shuffle]").expect("the shuffle plugin");
        text.replace_range(first..after, "");
        // No reader: nation and region as CSV instead.
        let first = text
            .find("# The fixed-width file")
            .expect("the example's fixed-width table");
        let after = text.find("[plugins.customer-files]").expect("customer");
        let csv = csv_table(
            data,
            "region",
            r#"{ r_regionkey = "bigint", r_name = "varchar", r_comment = "varchar" }"#,
        ) + &csv_table(
            data,
            "nation",
            r#"{ n_nationkey = "bigint", n_name = "varchar", n_regionkey = "bigint", n_comment = "varchar" }"#,
        );
        text.replace_range(first..after, &csv);
        let settings: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        for gone in ["[functions.", "source-reader", "geography"] {
            assert!(
                settings.iter().all(|l| !l.contains(gone)),
                "no `{gone}` left:\n{text}"
            );
        }
    }
    assert!(
        text.trim_end().ends_with("header = true"),
        "[sink] is last:\n{text}"
    );
    if sink_delay_us > 0 {
        text = format!("{}\nrecord-delay-us = {sink_delay_us}\n", text.trim_end());
    }
    std::fs::write(&job, text).expect("job");
    job
}

/// The answer's lines, checked for shape: the header, one line per region
/// and priority (5 × 5), every line item counted once.
fn checked(lines: &[String], line_items: u64) {
    assert_eq!(lines[0], "region,priority,lines,revenue,tax", "{lines:?}");
    assert_eq!(lines.len(), 26, "5 regions × 5 priorities: {lines:?}");
    let mut counted = 0;
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), 5, "{line}");
        assert!(
            ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"].contains(&cells[0]),
            "{line}"
        );
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

/// The published answer of a run of `job` on `state` (to its end, exit 0),
/// with `extra` run arguments.
fn answer(job: &Path, state: &Path, extra: Vec<String>) -> Vec<String> {
    let mut coordhost = Coordhost::new(job, state);
    coordhost.extra_args = extra;
    coordhost.run_to_end();
    published_lines(&state.join("output").join(JOB))
}

#[test]
fn the_example_job_equals_the_query_in_sql_over_csv_embedded_and_on_three_workers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("tpch");
    let line_items = tpch(&data);

    let sql_job = example(&tmp.path().join("sql"), &data, true, 4_194_304, 0);
    let reference = answer(&sql_job, &tmp.path().join("sql-state"), Vec::new());
    checked(&reference, line_items);

    let job = example(&tmp.path().join("wasm"), &data, false, 4_194_304, 0);
    let embedded = answer(&job, &tmp.path().join("embedded"), Vec::new());
    assert_eq!(
        embedded, reference,
        "embedded: the Wasm reader and functions give the answer of the query in SQL over CSV"
    );

    let addr = free_port();
    let workers = Workers::start(WORKERS, &addr, &tmp.path().join("workers"), 2);
    let mut extra = external_args(&addr, WORKERS, 5000);
    extra.extend(["--workers".into(), "2".into()]);
    let on_workers = answer(&job, &tmp.path().join("on-workers"), extra);
    assert_eq!(
        on_workers,
        reference,
        "on 3 workers: the answer of the query in SQL over CSV\n{}",
        workers.logs()
    );

    // The scans of the fixed-width table ran on the workers: each loaded
    // the reader at most once (whatever the number of its scan tasks),
    // fetched its component at most once, and keeps it by its hash.
    let sha = sha256_of(&plugin_path("fixed-width-reader"));
    let mut loads = 0;
    for i in 0..WORKERS {
        let log = workers.log_of(i);
        let n = log.matches(LOADED).count();
        assert!(n <= 1, "w{i} loaded the reader {n} times:\n{log}");
        let fetched = log
            .lines()
            .filter(|l| l.contains("fetched a component") && l.contains(&sha))
            .count();
        assert!(fetched <= n, "w{i} fetched the reader once at most:\n{log}");
        if n == 1 {
            let kept = workers
                .data_dir(i)
                .join("components")
                .join(format!("{sha}.wasm"));
            assert_eq!(sha256_of(&kept), sha, "w{i} keeps the bytes by their hash");
        }
        loads += n;
    }
    assert!(
        loads >= 1,
        "a worker read the fixed-width table:\n{}",
        workers.logs()
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

/// Runs `job` on `state` with `extra` run arguments, SIGKILLs the
/// coordinator once two tasks finished, runs it again to the end and
/// returns the published answer, checking that the rerun recovered and
/// kept the tasks finished before the kill.
fn killed_and_rerun(
    job: &Path,
    state: &Path,
    extra: Vec<String>,
    workers: Option<&Workers>,
) -> Vec<String> {
    let logs = || workers.map(Workers::logs).unwrap_or_default();
    let mut coordhost = Coordhost::new(job, state);
    coordhost.extra_args = extra;
    let mut running = coordhost.start();
    let polled = running.poll_until(|| {
        std::thread::sleep(Duration::from_millis(50));
        let n = finished_tasks(state);
        (n >= 2).then_some(n)
    });
    let seen = polled.unwrap_or_else(|e| {
        panic!(
            "no task finished before the kill: {e}\n{}\n{}",
            running.stderr_tail(),
            logs()
        )
    });
    match running.kill() {
        Kill::Killed { .. } => {}
        Kill::TooLate(f) => panic!(
            "the job ended before the SIGKILL ({seen} tasks were finished when it was sent): {}",
            f.summary.brief()
        ),
    }
    assert!(
        !state.join("output").join(JOB).join("_SUCCESS").exists(),
        "nothing was published before the kill"
    );
    let rerun = coordhost.run_to_end();
    assert!(rerun.summary.recovered(), "{}", rerun.summary.brief());
    assert!(
        rerun.summary.tasks_skipped() > 0,
        "the rerun kept the tasks finished before the kill: {}\n{}",
        rerun.summary.brief(),
        logs()
    );
    published_lines(&state.join("output").join(JOB))
}

#[test]
fn the_example_job_killed_midway_reruns_to_the_same_answer_embedded_and_on_three_workers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("tpch");
    let line_items = tpch(&data);
    // Smaller splits than the example's (more tasks), and a sink slowed
    // per record: the kill lands before the answer is published.
    let split_bytes = 1_000_000;
    let delay_us = 100_000;

    // The answer of an uninterrupted run: the query in SQL over CSV, which
    // the test above shows equal to the example's.
    let sql_job = example(&tmp.path().join("sql"), &data, true, split_bytes, 0);
    let reference = answer(&sql_job, &tmp.path().join("reference"), Vec::new());
    checked(&reference, line_items);

    let job = example(&tmp.path().join("job"), &data, false, split_bytes, delay_us);
    let embedded = killed_and_rerun(&job, &tmp.path().join("embedded"), Vec::new(), None);
    assert_eq!(
        embedded, reference,
        "embedded: the rerun publishes the answer of an uninterrupted run"
    );

    // The workers keep their finished partitions for 10 min while no
    // coordinator answers: the rerun claims them however slowly it starts.
    let addr = free_port();
    let workers = Workers::start_keeping(WORKERS, &addr, &tmp.path().join("workers"), 2, 600_000);
    let mut extra = external_args(&addr, WORKERS, 5000);
    extra.extend(["--workers".into(), "2".into()]);
    let on_workers = killed_and_rerun(&job, &tmp.path().join("on-workers"), extra, Some(&workers));
    assert_eq!(
        on_workers,
        reference,
        "on 3 workers: the rerun publishes the answer of an uninterrupted run\n{}",
        workers.logs()
    );
    assert!(
        (0..WORKERS).any(|i| workers.log_of(i).contains(LOADED)),
        "the workers read the fixed-width table:\n{}",
        workers.logs()
    );
}

/// Runs `job` on `workers` (started here in `base`, 2 slots each) with
/// `failpoints` on the coordinator; returns the run and the workers (still
/// running).
fn run_on_workers(
    job: &Path,
    state: &Path,
    base: &Path,
    workers: usize,
    failpoints: &str,
) -> (RunOutput, Workers) {
    let addr = free_port();
    let started = Workers::start(workers, &addr, base, 2);
    let out = run_output_with_failpoints(
        &options(job, state, 2),
        failpoints,
        &external_args(&addr, workers, 5000),
    );
    (out, started)
}

/// A run that failed: exit 1, a failed summary, nothing published under
/// `state`'s `acct` sink; its error.
fn failed(out: RunOutput, state: &Path, workers: &Workers) -> String {
    assert_eq!(out.code, Some(1), "{}\n{}", out.stderr, workers.logs());
    let s = out.summary.expect("a summary");
    assert_eq!(s.status, JobStatus::Failed, "{}", out.stderr);
    assert!(
        !state.join("output/acct/_SUCCESS").exists(),
        "nothing is published"
    );
    let published: Vec<PathBuf> = std::fs::read_dir(state.join("output/acct"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    assert!(published.is_empty(), "no part file: {published:?}");
    s.error.unwrap_or_default()
}

#[test]
fn reader_bytes_of_another_hash_are_refused_by_the_worker_and_the_job_fails() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (fw, csv) = (tmp.path().join("fw"), tmp.path().join("csv"));
    write_tables(&rows(200), &fw, &csv);
    let mut job = fixed_job(&fw, "SELECT id, name FROM acct");
    job.job_extra = "max-attempts = 2";
    let file = job.write(&tmp.path().join("job"));
    let state = tmp.path().join("state");
    let started = Instant::now();
    let (out, workers) = run_on_workers(
        &file,
        &state,
        &tmp.path().join("workers"),
        WORKERS,
        "coordinator::corrupt-component=return",
    );
    let error = failed(out, &state, &workers);
    let want = sha256_of(&plugin_path("fixed-width-reader"));
    for needle in [
        "source reader `fixed` of table `acct`",
        "refuses the component of source reader `fixed`",
        "fixed-width-reader.wasm",
        &want,
        "does not run them",
        "failed on attempt 1 (of at most 2)",
    ] {
        assert!(error.contains(needle), "`{needle}` in: {error}");
    }
    // The hash of what was sent is named too: 64 hex digits other than
    // the job's.
    let got = error
        .split("have sha256 ")
        .nth(1)
        .map(|rest| &rest[..64.min(rest.len())])
        .unwrap_or_default();
    assert!(
        got.len() == 64 && got != want && got.bytes().all(|b| b.is_ascii_hexdigit()),
        "the sent bytes' hash in: {error}"
    );
    for i in 0..WORKERS {
        let kept = workers
            .data_dir(i)
            .join("components")
            .join(format!("{want}.wasm"));
        assert!(!kept.exists(), "w{i} kept no damaged bytes");
        assert!(
            !workers.log_of(i).contains(LOADED),
            "w{i} loaded no reader:\n{}",
            workers.log_of(i)
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "the job failed in time"
    );
}

#[test]
fn a_reader_on_a_worker_gets_only_its_grants_and_its_deadline() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (fw, csv) = (tmp.path().join("fw"), tmp.path().join("csv"));
    write_tables(&rows(200), &fw, &csv);
    // One file inside the reader's grant (not a split: the enumerator
    // lists `.txt` files only), one beside it.
    let inside = fw.join("inside.key");
    std::fs::write(&inside, "granted\n").expect("inside");
    let outside = tmp.path().join("outside.key");
    std::fs::write(&outside, "not granted\n").expect("outside");
    let sql = "SELECT id FROM acct";
    let cases: [(&str, String, &str, Vec<String>); 3] = [
        (
            "inside",
            format!("mode = \"escape\", path = \"{}\"", inside.display()),
            "call-timeout-ms = 5000",
            vec![format!(
                "read 8 bytes of {}, which should not be granted",
                inside.display()
            )],
        ),
        (
            "outside",
            format!("mode = \"escape\", path = \"{}\"", outside.display()),
            "call-timeout-ms = 5000",
            vec![
                "`next-batch` failed: I/O error: cannot read".to_string(),
                outside.display().to_string(),
            ],
        ),
        (
            "slow",
            "mode = \"slow\"".to_string(),
            "call-timeout-ms = 300",
            vec!["`next-batch` did not return within its deadline of 300 ms".to_string()],
        ),
    ];
    for (case, config, limits, needles) in cases {
        let mut job = fixed_job(&fw, sql);
        job.format = read_by("bad");
        job.plugins = reader("bad", "faulty-reader", &config, &fw, limits);
        let file = job.write(&tmp.path().join(case));
        let state = tmp.path().join(format!("{case}-state"));
        let started = Instant::now();
        let (out, workers) = run_on_workers(
            &file,
            &state,
            &tmp.path().join(format!("{case}-workers")),
            1,
            "",
        );
        let error = failed(out, &state, &workers);
        assert!(
            error.contains("table `acct`, source reader `bad`"),
            "{case}: names the table and the plugin: {error}"
        );
        for n in &needles {
            assert!(error.contains(n.as_str()), "{case}: `{n}` in: {error}");
        }
        assert!(
            workers.log_of(0).contains(LOADED),
            "{case}: the reader ran on the worker:\n{}",
            workers.log_of(0)
        );
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{case}: ended in {:?}",
            started.elapsed()
        );
    }

    // The sample reader granted another folder than the table's: the
    // worker refuses the split before the reader sees it.
    let mut job = fixed_job(&fw, sql);
    job.plugins = fixed_reader(&csv);
    let file = job.write(&tmp.path().join("ungranted"));
    let state = tmp.path().join("ungranted-state");
    let (out, workers) =
        run_on_workers(&file, &state, &tmp.path().join("ungranted-workers"), 1, "");
    let error = failed(out, &state, &workers);
    for n in [
        "table `acct`, source reader `fixed`",
        "outside",
        &fw.display().to_string(),
    ] {
        assert!(error.contains(n), "`{n}` in: {error}");
    }
}
