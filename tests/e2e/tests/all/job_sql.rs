//! SQL jobs (docs/sql.md) through the real `coordhost run`: TPC-H Q1 as SQL
//! over lineitem made by coordhost-datagen (CSV and Parquet), its answer
//! checked against two independent computations — exact integer sums
//! straight from tpchgen's rows, and the same SQL run by DataFusion alone in
//! this test process over the same files with DataFusion's own CSV and
//! Parquet readers; the refusals (syntax, unknown table and column, an
//! operator coordhost cannot distribute); and a crash after the first stage
//! finished, whose rerun skips that stage and publishes the same bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::job::{example_job, options};
use crate::support::knobs::{CrashPoint, Knobs, run_output, run_output_with};
use crate::support::published_lines;
use coordhost::job::{JobStatus, Summary};
use tpchgen::generators::LineItemGenerator;

const SCALE: f64 = 0.01;
const PARTS: u32 = 3;
const PARALLELISM: u32 = 3;

/// The lineitem files of one test, as CSV (`csv/`) and Parquet (`parquet/`).
struct Data {
    tmp: tempfile::TempDir,
}

impl Data {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (_, rows) =
            coordhost_datagen::write_lineitem(&tmp.path().join("csv"), SCALE, PARTS).expect("csv");
        assert_eq!(rows, 60_175, "tpchgen's row count for scale 0.01");
        let (_, prows) = coordhost_datagen::write_lineitem_parquet(
            &tmp.path().join("parquet"),
            SCALE,
            PARTS,
            8192,
        )
        .expect("parquet");
        assert_eq!(prows, rows);
        Self { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// `examples/<example>` pointed at this data, in folder `name`, with
    /// `edits` (from, to) applied to its text.
    fn job(&self, example: &str, name: &str, edits: &[(&str, &str)]) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).expect("job dir");
        let (input_rel, data) = if example.contains("parquet") {
            ("build/data/tpch-sf0.1-parquet", self.path("parquet"))
        } else {
            ("build/data/tpch-sf0.1", self.path("csv"))
        };
        let job = example_job(example, input_rel, &data, &dir);
        let mut text = std::fs::read_to_string(&job).expect("job");
        // Smaller splits than the example's, so several tasks share files.
        text = text
            .replace("split-bytes = 4194304", "split-bytes = 500000")
            .replace("parallelism = 4", &format!("parallelism = {PARALLELISM}"));
        for (from, to) in edits {
            assert!(text.contains(from), "`{from}` is in the job file");
            text = text.replace(from, to);
        }
        std::fs::write(&job, text).expect("job");
        job
    }
}

/// `coordhost run JOB` with knobs; returns the summary, exit code, stderr.
fn run(job: &Path, data_dir: &Path, knobs: &Knobs) -> (Option<Summary>, Option<i32>, String) {
    let out = run_output(&options(job, data_dir, 2), knobs);
    (out.summary, out.code, out.stderr)
}

fn run_finished(job: &Path, data_dir: &Path) -> Summary {
    let (summary, code, stderr) = run(job, data_dir, &Knobs::default());
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

/// Exact Q1 sums per (flag, status) from tpchgen's rows, in units of the
/// columns' scale: count, sum_qty (2), sum_base_price (2), sum_disc_price
/// (4), sum_charge (6), each as TPC-H prints it with all its digits.
fn exact_sums() -> BTreeMap<(String, String), [String; 5]> {
    let mut groups: BTreeMap<(String, String), [i128; 5]> = BTreeMap::new();
    for part in 1..=PARTS as i32 {
        for li in LineItemGenerator::new(SCALE, part, PARTS as i32).iter() {
            // date '1998-12-01' - interval '90' day
            if li.l_shipdate.to_string().as_str() > "1998-09-02" {
                continue;
            }
            let g = groups
                .entry((li.l_returnflag.to_string(), li.l_linestatus.to_string()))
                .or_default();
            let price = i128::from(li.l_extendedprice.0); // cents
            let disc = i128::from(li.l_discount.0); // hundredths
            let tax = i128::from(li.l_tax.0);
            g[0] += 1;
            g[1] += i128::from(li.l_quantity) * 100;
            g[2] += price;
            g[3] += price * (100 - disc);
            g[4] += price * (100 - disc) * (100 + tax);
        }
    }
    let fixed = |v: i128, scale: u32| {
        let d = 10i128.pow(scale);
        format!("{}.{:0w$}", v / d, v % d, w = scale as usize)
    };
    groups
        .into_iter()
        .map(|(k, g)| {
            (
                k,
                [
                    g[0].to_string(),
                    fixed(g[1], 2),
                    fixed(g[2], 2),
                    fixed(g[3], 4),
                    fixed(g[4], 6),
                ],
            )
        })
        .collect()
}

const Q1_HEADER: &str = "l_returnflag,l_linestatus,sum_qty,sum_base_price,sum_disc_price,sum_charge,avg_qty,avg_price,avg_disc,count_order";

/// The SQL of `examples/tpch-q1-sql.toml`.
fn q1_sql() -> String {
    let text =
        std::fs::read_to_string(crate::support::workspace().join("examples/tpch-q1-sql.toml"))
            .expect("example");
    let start = text.find("sql = \"\"\"").expect("sql") + "sql = \"\"\"".len();
    let end = start + text[start..].find("\"\"\"").expect("end of sql");
    text[start..end].to_string()
}

/// Q1 run by DataFusion alone, in this process, over `dir`'s files read by
/// DataFusion's own CSV or Parquet reader; rows as coordhost's CSV sink
/// writes them.
fn datafusion_alone(dir: &Path, parquet: bool) -> Vec<String> {
    use datafusion::prelude::{CsvReadOptions, ParquetReadOptions, SessionContext};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let ctx = SessionContext::new();
        let path = format!("{}/", dir.display());
        if parquet {
            ctx.register_parquet(
                "lineitem",
                &path,
                ParquetReadOptions::default().file_extension(".parquet"),
            )
            .await
            .expect("register parquet");
        } else {
            let schema = arrow_schema::Schema::new(
                coordhost_datagen::lineitem_schema()
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone().with_nullable(true))
                    .collect::<Vec<_>>(),
            );
            ctx.register_csv(
                "lineitem",
                &path,
                CsvReadOptions::new()
                    .has_header(true)
                    .file_extension(".csv")
                    .schema(&schema),
            )
            .await
            .expect("register csv");
        }
        let batches = ctx
            .sql(&q1_sql())
            .await
            .expect("plan")
            .collect()
            .await
            .expect("run");
        batch_lines(&batches)
    })
}

/// Rows of `batches` as CSV lines, each cell as coordhost writes it.
fn batch_lines(batches: &[arrow_array::RecordBatch]) -> Vec<String> {
    let mut lines = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| coordhost::value::cell_text(c.as_ref(), r).into_owned())
                .collect();
            lines.push(cells.join(","));
        }
    }
    lines
}

/// Checks published Q1 `lines` (header first) against both computations.
fn check_q1(lines: &[String], alone: &[String]) {
    assert_eq!(lines.first().map(String::as_str), Some(Q1_HEADER));
    let rows = &lines[1..];
    assert_eq!(rows, alone, "coordhost and DataFusion alone agree");
    let sums = exact_sums();
    assert_eq!(rows.len(), sums.len(), "one row per group: {rows:?}");
    for (row, ((flag, status), s)) in rows.iter().zip(&sums) {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(
            (f[0], f[1]),
            (flag.as_str(), status.as_str()),
            "ordered by the key"
        );
        assert_eq!(f[9], s[0], "count_order of {flag}{status}");
        assert_eq!(f[2], s[1], "sum_qty of {flag}{status}");
        assert_eq!(f[3], s[2], "sum_base_price of {flag}{status}");
        assert_eq!(f[4], s[3], "sum_disc_price of {flag}{status}");
        assert_eq!(f[5], s[4], "sum_charge of {flag}{status}");
    }
}

#[test]
fn tpch_q1_sql_over_csv_matches_exact_sums_and_datafusion_alone() {
    let data = Data::new();
    let job = data.job("tpch-q1-sql.toml", "csv-job", &[]);
    let state = data.path("csv-job/state");
    let summary = run_finished(&job, &state);
    // Three stages: scan + partial aggregate, final aggregate + sort, merge.
    let stages: Vec<(&str, u32)> = summary
        .vertices
        .iter()
        .map(|v| (v.id.as_str(), v.parallelism))
        .collect();
    assert_eq!(
        stages,
        [
            ("stage0", PARALLELISM),
            ("stage1", PARALLELISM),
            ("stage2", 1)
        ]
    );
    assert_eq!(
        summary.vertices[0].records_in, 60_175,
        "every row read once"
    );
    let out = state.join("output/tpch-q1-sql");
    assert!(out.join("_SUCCESS").is_file());
    let lines = published_lines(&out);
    check_q1(&lines, &datafusion_alone(&data.path("csv"), false));
}

#[test]
fn tpch_q1_sql_over_parquet_writes_parquet_with_the_same_answer() {
    let data = Data::new();
    let job = data.job("tpch-q1-sql-parquet.toml", "pq-job", &[]);
    let state = data.path("pq-job/state");
    let summary = run_finished(&job, &state);
    assert_eq!(summary.vertices[0].records_in, 60_175);
    let out = state.join("output/tpch-q1-sql-parquet");
    assert!(out.join("_SUCCESS").is_file());
    let part = out.join("part-00000.parquet");
    let file = std::fs::File::open(&part).expect("the part file");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("a Parquet file")
        .build()
        .expect("reader");
    let batches: Vec<arrow_array::RecordBatch> = reader.map(|b| b.expect("a batch")).collect();
    let schema = batches.first().expect("rows").schema();
    let header: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let mut lines = vec![header.join(",")];
    lines.extend(batch_lines(&batches));
    check_q1(&lines, &datafusion_alone(&data.path("parquet"), true));
    // The same answer as over CSV, by DataFusion alone.
    assert_eq!(
        datafusion_alone(&data.path("parquet"), true),
        datafusion_alone(&data.path("csv"), false)
    );
}

/// A SQL job file refused before anything runs: exit 2, one line naming
/// `job.sql` and `needle`, no data directory left.
fn refused(data: &Data, name: &str, sql: &str, needles: &[&str]) {
    let job = with_sql(data, "tpch-q1-sql.toml", name, sql);
    let state = data.path(&format!("{name}/state"));
    let (summary, code, stderr) = run(&job, &state, &Knobs::default());
    assert!(summary.is_none(), "{stderr}");
    assert_eq!(code, Some(2), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("field `job.sql`"))
        .unwrap_or_else(|| panic!("a line naming job.sql: {stderr}"));
    for n in needles {
        assert!(line.contains(n), "`{n}` in: {line}");
    }
    assert!(!state.exists(), "nothing was created");
}

#[test]
fn bad_sql_is_refused_naming_the_place_the_name_or_the_operator() {
    let data = Data::new();
    refused(
        &data,
        "syntax",
        "SELECT l_returnflag\n  FROM lineitem WHERE )",
        &["syntax error", "Line: 2, Column: 23"],
    );
    // The place is also given in the job file's own lines, and for
    // `sql-file` in the .sql file's.
    let job = data.path("syntax").join("tpch-q1-sql.toml");
    let text = std::fs::read_to_string(&job).expect("job file");
    let at = text
        .lines()
        .position(|l| l.contains("FROM lineitem WHERE )"))
        .expect("the query's second line")
        + 1;
    let (_, _, stderr) = run(&job, &data.path("syntax/state"), &Knobs::default());
    assert!(
        stderr.contains(&format!("{}:{at}:23", job.display())),
        "job file line {at}: {stderr}"
    );
    let q = data.path("syntax/q.sql");
    std::fs::write(
        &q,
        "-- a comment\nSELECT l_returnflag\n  FROM lineitem WHERE )\n",
    )
    .expect("q.sql");
    let start = text.find("sql = \"\"\"").expect("sql");
    let end = start + 9 + text[start + 9..].find("\"\"\"").expect("end") + 3;
    let file_job = data.path("syntax/file.toml");
    std::fs::write(
        &file_job,
        format!("{}sql-file = \"q.sql\"{}", &text[..start], &text[end..]),
    )
    .expect("job file");
    let (summary, code, stderr) = run(&file_job, &data.path("syntax/state"), &Knobs::default());
    assert!(summary.is_none(), "{stderr}");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("field `job.sql-file`")
            && stderr.contains(&format!("{}:3:23", q.display())),
        "the .sql file's line 3: {stderr}"
    );
    refused(
        &data,
        "table",
        "SELECT count(*) FROM orders",
        &["orders", "not found"],
    );
    refused(
        &data,
        "column",
        "SELECT l_nosuchcolumn FROM lineitem",
        &["l_nosuchcolumn"],
    );
    refused(
        &data,
        "union",
        "SELECT l_orderkey FROM lineitem UNION ALL SELECT l_partkey FROM lineitem",
        &["UnionExec", "cannot distribute"],
    );
    refused(
        &data,
        "function",
        "SELECT no_such_fn(l_tax) FROM lineitem",
        &["no_such_fn"],
    );
}

#[test]
fn a_crash_after_the_first_stage_reruns_without_it_and_publishes_the_same_answer() {
    let data = Data::new();
    // The reference: one run to the end.
    let job = data.job("tpch-q1-sql.toml", "ref", &[]);
    let reference_state = data.path("ref/state");
    run_finished(&job, &reference_state);
    let reference = published_lines(&reference_state.join("output/tpch-q1-sql"));

    let job = data.job("tpch-q1-sql.toml", "crash", &[]);
    let state = data.path("crash/state");
    // Crash right after the last stage0 subtask's ExecutionFinished is durable.
    let knobs = Knobs::crash(CrashPoint::AfterFinished {
        vertex: "stage0".to_owned(),
        count: PARALLELISM,
    });
    let (summary, code, stderr) = run(&job, &state, &knobs);
    assert_ne!(code, Some(0), "the crash stops the run: {stderr}");
    assert!(stderr.contains("simulated coordinator crash"), "{stderr}");
    if let Some(s) = &summary {
        assert_ne!(s.status, JobStatus::Finished);
    }
    assert!(!state.join("output/tpch-q1-sql/_SUCCESS").exists());

    let rerun = run_finished(&job, &state);
    assert!(rerun.recovered, "the rerun recovers");
    assert_eq!(rerun.vertices[0].id, "stage0");
    assert_eq!(
        rerun.vertices[0].skipped,
        u64::from(PARALLELISM),
        "every stage0 task is skipped: {rerun:?}"
    );
    assert_eq!(rerun.vertices[0].records_in, 0, "no split is read again");
    assert_eq!(
        published_lines(&state.join("output/tpch-q1-sql")),
        reference,
        "the same answer"
    );
    // The log recorded the stage plans once, when the job started.
    let log = coordhost::events::replay(&coordhost::events::FileStorage::open_read_only(
        &state.join("tpch-q1-sql/log"),
    ))
    .expect("the log");
    let planned: Vec<&coordhost::events::StagesPlanned> = log
        .iter_events()
        .filter_map(|e| match e {
            coordhost::events::JobEvent::StagesPlanned(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(planned.len(), 1, "one StagesPlanned, from the first run");
    assert_eq!(planned[0].stages.len(), 3);
}

/// A small SQL job over the CSV files of `input` (table `t`: `k varchar,
/// v decimal(15,2), d date`), summing `v` per `k`.
fn small_job(dir: &Path, input: &Path, sql: &str) -> PathBuf {
    let plugin = |n: &str| crate::support::plugin_path(n).display().to_string();
    let text = format!(
        r#"[job]
name = "small"
parallelism = 2
sql = """{sql}"""

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

[tables.t]
plugin = "files"
format = "csv"
header = true
schema = {{ k = "varchar", v = "decimal(15,2)", d = "date" }}

[sink]
path = "${{data_dir}}/output/small"
format = "csv"
"#,
        files = plugin("file-enumerator"),
        shuffle = plugin("local-shuffle"),
        input = input.display(),
    );
    std::fs::create_dir_all(dir).expect("job dir");
    let job = dir.join("small.toml");
    std::fs::write(&job, text).expect("job file");
    job
}

#[test]
fn an_empty_field_is_null_as_sql_says() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    std::fs::write(
        input.join("a.csv"),
        "k,v,d\na,1.50,2020-01-01\na,,2020-01-02\nb,,\nb,2.25,2020-01-03\n",
    )
    .expect("csv");
    let job = small_job(
        &tmp.path().join("job"),
        &input,
        "SELECT k, count(*) AS n, count(v) AS nv, sum(v) AS s, count(d) AS nd FROM t GROUP BY k ORDER BY k",
    );
    let state = tmp.path().join("state");
    run_finished(&job, &state);
    assert_eq!(
        published_lines(&state.join("output/small")),
        ["k,n,nv,s,nd", "a,2,1,1.50,2", "b,2,1,2.25,1"],
        "an empty decimal or date field is NULL: count(v) skips it, sum(v) ignores it"
    );
}

#[test]
fn a_decimal_with_more_digits_than_its_scale_is_rounded_and_one_with_spaces_fails_naming_it() {
    // arrow-csv alone reads 5.129 as 5.12 and -5.125 as -5.12 (it drops
    // the digits past the scale): a wrong sum with exit 0. Rounded half
    // away from zero, as PostgreSQL, DuckDB and Spark read them.
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    std::fs::write(
        input.join("a.csv"),
        "k,v,d\na,5.129,2020-01-01\na,-5.125,2020-01-02\nb,0.005,\nb,1.2345e1,\n",
    )
    .expect("csv");
    let job = small_job(
        &tmp.path().join("job"),
        &input,
        "SELECT k, sum(v) AS s, min(v) AS lo, max(v) AS hi FROM t GROUP BY k ORDER BY k",
    );
    let state = tmp.path().join("state");
    run_finished(&job, &state);
    assert_eq!(
        published_lines(&state.join("output/small")),
        ["k,s,lo,hi", "a,0.00,-5.13,5.13", "b,12.36,0.01,12.35"],
    );
    std::fs::write(input.join("a.csv"), "k,v,d\na,5.00,\n\nb, 5.00 ,\n").expect("csv");
    let state = tmp.path().join("state-spaces");
    let (summary, code, stderr) = run(&job, &state, &Knobs::default());
    assert_eq!(code, Some(1), "{stderr}");
    let error = summary.and_then(|s| s.error).unwrap_or_default();
    assert!(
        error.contains(
            "a.csv line 4, column 2 `v` (decimal(15,2)): ` 5.00 ` is not a valid decimal(15,2)"
        ),
        "the error names the line, the column and the value with its spaces: {error}"
    );
}

#[test]
fn a_table_without_splits_gives_the_empty_answer_and_exit_0() {
    // An empty table folder: the enumerator hands out no split, every scan
    // task reads nothing. A count is 0, a sorted or grouped query has no
    // row; the merge of an `ORDER BY` over producers that wrote nothing
    // used to fail in DataFusion ("requires at least one input partition").
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    for (name, sql, want) in [
        ("count", "SELECT count(*) AS n FROM t", &["n", "0"][..]),
        ("sorted", "SELECT k, v FROM t ORDER BY k, v", &["k,v"][..]),
        (
            "grouped",
            "SELECT k, sum(v) AS s, count(*) AS n FROM t GROUP BY k ORDER BY k",
            &["k,s,n"][..],
        ),
        (
            "limited",
            "SELECT d FROM t ORDER BY d DESC LIMIT 3",
            &["d"][..],
        ),
    ] {
        let job = small_job(&tmp.path().join(name), &input, sql);
        let state = tmp.path().join(format!("{name}-state"));
        run_finished(&job, &state);
        assert_eq!(published_lines(&state.join("output/small")), want, "{sql}");
    }
}

#[test]
fn a_file_that_does_not_match_the_declared_schema_fails_naming_the_file_and_the_column() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    std::fs::write(input.join("good.csv"), "k,v,d\na,1.50,2020-01-01\n").expect("csv");
    std::fs::write(input.join("bad.csv"), "k,v,d\nb,twelve,2020-01-02\n").expect("csv");
    let job = small_job(
        &tmp.path().join("job"),
        &input,
        "SELECT k, sum(v) AS s FROM t GROUP BY k",
    );
    let state = tmp.path().join("state");
    let (summary, code, stderr) = run(&job, &state, &Knobs::default());
    assert_eq!(code, Some(1), "{stderr}");
    let s = summary.expect("a summary");
    assert_eq!(s.status, JobStatus::Failed, "{stderr}");
    let error = s.error.unwrap_or_default();
    assert!(
        error.contains("bad.csv") && error.contains("`v`"),
        "the error names the file and the column: {error}"
    );
    assert!(
        !state.join("output/small/_SUCCESS").exists(),
        "nothing is published"
    );
}

/// `example` pointed at `data` with its query replaced by `sql`.
fn with_sql(data: &Data, example: &str, name: &str, sql: &str) -> PathBuf {
    let job = data.job(example, name, &[]);
    let text = std::fs::read_to_string(&job).expect("job");
    let start = text.find("sql = \"\"\"").expect("sql");
    let end = start + 9 + text[start + 9..].find("\"\"\"").expect("end") + 3;
    let text = format!(
        "{}sql = \"\"\"\n{sql}\n\"\"\"{}",
        &text[..start],
        &text[end..]
    );
    std::fs::write(&job, text).expect("job");
    job
}

#[test]
fn count_star_reads_no_column_and_counts_every_row_over_csv_and_parquet() {
    let data = Data::new();
    for (example, output) in [
        ("tpch-q1-sql.toml", "tpch-q1-sql"),
        ("tpch-q1-sql-parquet.toml", "tpch-q1-sql-parquet"),
    ] {
        let name = output.replace('-', "_");
        let job = with_sql(&data, example, &name, "SELECT count(*) AS n FROM lineitem");
        // CSV output for both, to read the count back: the sink's format only.
        let text = std::fs::read_to_string(&job).expect("job");
        let at = text.rfind("[sink]").expect("a [sink]");
        let text = format!(
            "{}{}",
            &text[..at],
            text[at..].replace("format = \"parquet\"", "format = \"csv\"")
        );
        std::fs::write(&job, text).expect("job");
        let state = data.path(&format!("{name}/state"));
        run_finished(&job, &state);
        assert_eq!(
            published_lines(&state.join(format!("output/{output}"))),
            ["n", "60175"],
            "{example}"
        );
    }
}

#[test]
fn a_zero_byte_parquet_file_fails_the_job_naming_the_file_and_nothing_is_published() {
    let data = Data::new();
    // Beside the real files: an empty one, and one cut short (its footer
    // gone, so no `PAR1` at its end).
    let dir = data.path("parquet");
    std::fs::write(dir.join("lineitem-9.parquet"), b"").expect("empty file");
    let real = std::fs::read(dir.join("lineitem-1.parquet")).expect("a file");
    std::fs::write(dir.join("lineitem-8.parquet"), &real[..real.len() / 2]).expect("cut file");
    let job = with_sql(
        &data,
        "tpch-q1-sql-parquet.toml",
        "broken",
        "SELECT count(*) AS n FROM lineitem",
    );
    let state = data.path("broken/state");
    let (summary, code, stderr) = run(&job, &state, &Knobs::default());
    assert_eq!(code, Some(1), "{stderr}");
    let error = summary.and_then(|s| s.error).unwrap_or_default();
    assert!(
        error.contains("lineitem-8.parquet") || error.contains("lineitem-9.parquet"),
        "the error names a broken file: {error} {stderr}"
    );
    assert!(error.contains("not a readable Parquet file"), "{error}");
    assert!(!state.join("output/tpch-q1-sql-parquet/_SUCCESS").exists());
}

#[test]
fn a_quoted_field_holding_a_line_break_fails_the_job_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).expect("input");
    std::fs::write(
        input.join("multi.csv"),
        "k,v,d\na,1.50,2020-01-01\n\"two\nlines\",2.00,2020-01-02\nb,3.00,2020-01-03\n",
    )
    .expect("csv");
    let job = small_job(&tmp.path().join("job"), &input, "SELECT k, v FROM t");
    let state = tmp.path().join("state");
    let (summary, code, stderr) = run(&job, &state, &Knobs::default());
    assert_eq!(code, Some(1), "{stderr}");
    let error = summary.and_then(|s| s.error).unwrap_or_default();
    assert!(
        error.contains("multi.csv") && error.contains("a quoted field holds a line break"),
        "{error}"
    );
    assert!(
        !state.join("output/small/_SUCCESS").exists(),
        "nothing is published"
    );
}

/// The fixture of `scripts/parquet-crc-fixture.py`: 10 000 rows `(k, v)`,
/// `v = (i * 7919) % 100003`, `k = "k{i % 10}"`, every page with a CRC-32.
fn crc_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/parquet-crc/crc.parquet")
}

/// `small_job` over the Parquet files of `input` (table `t`: `k`, `v`).
fn parquet_job(dir: &Path, input: &Path, sql: &str) -> PathBuf {
    let job = small_job(dir, input, sql);
    let text = std::fs::read_to_string(&job)
        .expect("job file")
        .replace(r#"pattern = ".csv""#, r#"pattern = ".parquet""#)
        .replace(
            "format = \"csv\"\nheader = true\nschema = { k = \"varchar\", v = \"decimal(15,2)\", d = \"date\" }",
            "format = \"parquet\"\nschema = { k = \"varchar\", v = \"bigint\" }",
        );
    assert!(text.contains("format = \"parquet\""), "{text}");
    std::fs::write(&job, text).expect("job file");
    job
}

#[test]
fn a_damaged_parquet_page_with_a_stored_checksum_fails_the_job_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sql = "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k ORDER BY k";
    // What the fixture holds, computed here rather than read back.
    let mut want: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for i in 0..10_000_i64 {
        let e = want.entry(format!("k{}", i % 10)).or_default();
        e.0 += 1;
        e.1 += (i * 7919) % 100_003;
    }
    let mut expected = vec!["k,n,s".to_string()];
    expected.extend(want.iter().map(|(k, (n, s))| format!("{k},{n},{s}")));

    // The intact file: every page's checksum holds and the sums are right.
    let intact = tmp.path().join("intact");
    std::fs::create_dir_all(&intact).expect("dir");
    std::fs::copy(crc_fixture(), intact.join("crc.parquet")).expect("fixture");
    let job = parquet_job(&tmp.path().join("job-intact"), &intact, sql);
    let state = tmp.path().join("state-intact");
    run_finished(&job, &state);
    assert_eq!(published_lines(&state.join("output/small")), expected);

    // One byte of a value in the first data page of `v` flipped: without
    // the check this reads as a wrong value with exit 0.
    let bytes = std::fs::read(crc_fixture()).expect("fixture");
    let file = std::fs::File::open(crc_fixture()).expect("fixture");
    let meta = parquet::file::reader::SerializedFileReader::new(file)
        .map(|r| parquet::file::reader::FileReader::metadata(&r).clone())
        .expect("the fixture's footer");
    let v = meta.row_group(0).column(1);
    assert_eq!(v.column_path().string(), "v");
    let at = usize::try_from(v.data_page_offset()).expect("offset") + 200;
    let mut damaged = bytes;
    damaged[at] ^= 0x10;
    let broken = tmp.path().join("broken");
    std::fs::create_dir_all(&broken).expect("dir");
    std::fs::write(broken.join("damaged.parquet"), damaged).expect("damaged copy");
    let job = parquet_job(&tmp.path().join("job-broken"), &broken, sql);
    let state = tmp.path().join("state-broken");
    let (summary, code, stderr) = run(&job, &state, &Knobs::default());
    assert_eq!(code, Some(1), "{stderr}");
    let error = summary.and_then(|s| s.error).unwrap_or_default();
    assert!(
        error.contains("damaged.parquet") && error.contains("CRC checksum mismatch"),
        "the error names the file and the checksum: {error} {stderr}"
    );
    assert!(
        !state.join("output/small/_SUCCESS").exists(),
        "nothing is published"
    );
}

/// Split length and `max-task-bytes` of the sized-task tests.
const SPLIT_BYTES: u64 = 100_000;
const MAX_TASK_BYTES: u64 = 400_000;
/// Scan tasks of a table sized by input (`[job] max-parallelism`).
const SCAN_TASKS: u32 = 32;
/// Worker threads of these runs: at most this many tasks run at once.
const WORKERS: u64 = 2;

/// Q1 with source tasks sized by input: 100 kB splits, 400 kB per task,
/// 32 scan tasks (the example's recovery settings: every source finish
/// carries a batch snapshot whatever the minimum pause).
fn sized_job(data: &Data, name: &str) -> PathBuf {
    data.job(
        "tpch-q1-sql.toml",
        name,
        &[
            ("split-bytes = 500000", "split-bytes = 100000"),
            (
                "parallelism = 3\n",
                "parallelism = 3\nmax-task-bytes = 400000\nmax-parallelism = 32\n",
            ),
        ],
    )
}

/// Bytes of lineitem's CSV files: the whole input, as split lengths add up.
fn csv_input_bytes(data: &Data) -> u64 {
    std::fs::read_dir(data.path("csv"))
        .expect("csv dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .map(|p| std::fs::metadata(p).expect("size").len())
        .sum()
}

#[test]
fn source_tasks_sized_by_input_make_a_crash_cost_only_the_splits_in_flight() {
    let data = Data::new();
    let total = csv_input_bytes(&data);
    assert!(
        total > u64::from(SCAN_TASKS / 4) * MAX_TASK_BYTES,
        "enough input for many tasks: {total}"
    );
    // Without a crash: every split read once, 32 scan tasks of which only
    // those that found splits read any; the same answer as ever.
    let job = sized_job(&data, "sized-ref");
    let reference_state = data.path("sized-ref/state");
    let reference = run_finished(&job, &reference_state);
    assert_eq!(reference.vertices[0].parallelism, SCAN_TASKS);
    assert_eq!(
        reference.vertices[0].records_in, 60_175,
        "every row read once"
    );
    let input = reference.vertices[0]
        .input
        .expect("a source vertex's input");
    assert_eq!(input.bytes_assigned, total, "every split handed out once");
    assert_eq!((input.bytes_kept, input.bytes_reread), (0, 0));
    let lines = published_lines(&reference_state.join("output/tpch-q1-sql"));
    check_q1(&lines, &datafusion_alone(&data.path("csv"), false));

    // The finished job run again runs nothing, lists no input again and
    // publishes the same answer (a new user's trial found exit 1 here: a
    // fresh enumerator listed the input and then held splits no reader
    // would take, and the log recorded the job failed).
    let (again, code, stderr) = run(&job, &reference_state, &Knobs::default());
    let again = again.unwrap_or_else(|| panic!("no summary, exit {code:?}: {stderr}"));
    assert_eq!(
        (again.status, code),
        (JobStatus::Finished, Some(0)),
        "{:?} {stderr}",
        again.error
    );
    assert!(again.recovered, "{stderr}");
    assert_eq!(
        (again.tasks_run, again.tasks_skipped),
        (0, again.tasks_total),
        "{stderr}"
    );
    assert!(
        !stderr.contains("read no input"),
        "a source whose tasks recovery kept did not read nothing: {stderr}"
    );
    assert_eq!(
        published_lines(&reference_state.join("output/tpch-q1-sql")),
        lines
    );
    let third = run_finished(&job, &reference_state);
    assert_eq!(third.tasks_run, 0, "and again");

    crash_and_rerun_sized(&data, "sized-crash", total, &lines, false);
}

#[test]
fn sized_source_tasks_on_worker_processes_cost_a_crash_only_the_splits_in_flight() {
    let data = Data::new();
    let total = csv_input_bytes(&data);
    let job = sized_job(&data, "sized-ref-w");
    let reference_state = data.path("sized-ref-w/state");
    run_finished(&job, &reference_state);
    let lines = published_lines(&reference_state.join("output/tpch-q1-sql"));
    crash_and_rerun_sized(&data, "sized-crash-w", total, &lines, true);
}

/// Runs the sized Q1 in folder `name`, crashed after the 5th scan task
/// finished (about 5 × 400 kB of the input read and recorded, while other
/// tasks hold their splits), then again: the same `lines`, and the rerun's
/// summary shows what the crash cost. `processes`: on 2 worker processes of
/// one slot each (which outlive the coordinator), else on 2 embedded
/// worker threads; either way at most 2 tasks run at once.
fn crash_and_rerun_sized(data: &Data, name: &str, total: u64, lines: &[String], processes: bool) {
    use crate::support::workers::{Workers, external_args, free_port};
    let job = sized_job(data, name);
    let state = data.path(&format!("{name}/state"));
    let addr = free_port();
    let cluster = processes.then(|| {
        Workers::start(
            WORKERS as usize,
            &addr,
            &data.path(&format!("{name}/workers")),
            1,
        )
    });
    let extra = if processes {
        external_args(&addr, WORKERS as usize, 5000)
    } else {
        Vec::new()
    };
    let opts = options(&job, &state, WORKERS as usize);
    let knobs = Knobs::crash(CrashPoint::AfterFinished {
        vertex: "stage0".to_owned(),
        count: 5,
    });
    let out = run_output_with(&opts, &knobs, &extra);
    assert_ne!(out.code, Some(0), "the crash stops the run: {}", out.stderr);
    assert!(
        out.stderr.contains("simulated coordinator crash"),
        "{}",
        out.stderr
    );

    let out = run_output_with(&opts, &Knobs::default(), &extra);
    drop(cluster);
    let rerun = out.summary.expect("a summary");
    assert_eq!(
        rerun.status,
        JobStatus::Finished,
        "{:?} {}",
        rerun.error,
        out.stderr
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(rerun.recovered);
    assert_eq!(
        published_lines(&state.join("output/tpch-q1-sql")),
        lines,
        "the same answer"
    );
    let v = &rerun.vertices[0];
    assert!(v.skipped >= 5, "the finished scan tasks are kept: {v:?}");
    let input = v.input.expect("a source vertex's input");
    // What was kept plus what this run handed out is the input, exactly:
    // no split lost, none read twice in this run.
    assert_eq!(
        input.bytes_kept + input.bytes_assigned,
        total,
        "kept + read in the rerun = the input: {input:?}"
    );
    // Each kept task held at least its max-task-bytes.
    assert!(
        input.bytes_kept >= 5 * MAX_TASK_BYTES,
        "the finished tasks' input is kept: {input:?}"
    );
    // Read again: at most what the running tasks held, each at most
    // max-task-bytes plus the split that took it over.
    assert!(
        input.bytes_reread <= WORKERS * (MAX_TASK_BYTES + SPLIT_BYTES),
        "the crash costs only the splits in flight: {input:?}"
    );
    assert!(
        input.bytes_reread <= input.bytes_assigned,
        "re-read splits are read in this run: {input:?}"
    );
    // The human summary says it too.
    let line = format!(
        "input kept {} splits ({} bytes), read again {} splits ({} bytes)",
        input.splits_kept, input.bytes_kept, input.splits_reread, input.bytes_reread
    );
    assert!(out.stdout.contains(&line), "`{line}` in:\n{}", out.stdout);
}

#[test]
fn a_bad_max_task_bytes_is_refused_naming_the_field() {
    let data = Data::new();
    for (i, (place, value)) in [
        ("job", "0"),
        ("job", "-5"),
        ("job", "\"4 MiB\""),
        ("table", "0"),
        ("table", "1.5"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("bad-mtb-{i}");
        let (from, to, field) = if place == "job" {
            (
                "parallelism = 3\n",
                format!("parallelism = 3\nmax-task-bytes = {value}\n"),
                "job.max-task-bytes",
            )
        } else {
            (
                "[tables.lineitem]\n",
                format!("[tables.lineitem]\nmax-task-bytes = {value}\n"),
                "tables.lineitem.max-task-bytes",
            )
        };
        let job = data.job("tpch-q1-sql.toml", &name, &[(from, &to)]);
        let state = data.path(&format!("{name}/state"));
        let (summary, code, stderr) = run(&job, &state, &Knobs::default());
        assert!(summary.is_none(), "{stderr}");
        assert_eq!(code, Some(2), "{place} = {value}: {stderr}");
        assert!(
            stderr.contains(&format!("field `{field}`")),
            "{place} = {value}: {stderr}"
        );
        assert!(!state.exists(), "nothing was created");
    }
}

#[test]
fn bad_auto_fields_are_refused_naming_the_field() {
    let data = Data::new();
    for (i, (line, field)) in [
        (
            "downstream-parallelism = \"many\"",
            "job.downstream-parallelism",
        ),
        ("downstream-parallelism = 4", "job.downstream-parallelism"),
        ("max-parallelism = 0", "job.max-parallelism"),
        ("max-parallelism = 5000", "job.max-parallelism"),
        ("bytes-per-task = 0", "job.bytes-per-task"),
        ("bytes-per-task = \"1 GB\"", "job.bytes-per-task"),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("bad-auto-{i}");
        let to = format!("parallelism = 3\n{line}\n");
        let job = data.job("tpch-q1-sql.toml", &name, &[("parallelism = 3\n", &to)]);
        let state = data.path(&format!("{name}/state"));
        let (summary, code, stderr) = run(&job, &state, &Knobs::default());
        assert!(summary.is_none(), "{stderr}");
        assert_eq!(code, Some(2), "{line}: {stderr}");
        assert!(
            stderr.contains(&format!("field `{field}`")),
            "{line}: {stderr}"
        );
        assert!(!state.exists(), "nothing was created");
    }
}
