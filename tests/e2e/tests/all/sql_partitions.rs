//! Tables in Hive-style partition folders (docs/sql.md, "Partition
//! folders") through the real `coordhost run`: `examples/lineitem-by-year-sql.toml`
//! (CSV under `l_shipyear=VALUE/`, the sample file enumerator named
//! `builtin:file-enumerator` walking the folders, no `[shuffle]`) answers a
//! `WHERE` on the partition column and a `GROUP BY` on it exactly, over CSV
//! and over the same rows as Parquet, reading only the folders a filter on
//! the partition column keeps, on worker processes and after a coordinator
//! crash too; a folder that does not fit the
//! declaration fails the job naming the file and the folder, whether the
//! enumerator walks the folders or not; a bad declaration is refused (exit 2).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use arrow_array::{ArrayRef, Decimal128Array, Int64Array, RecordBatch, StringArray};
use coordhost::job::{JobStatus, Summary};

use crate::support::{coordhost, published_lines, workspace};

/// The example's rows, by folder: (year, [(orderkey, quantity in cents,
/// price in cents, flag)]) per file.
type Rows = Vec<(i64, i128, i128, &'static str)>;

fn example_files() -> Vec<(&'static str, &'static str, Rows)> {
    vec![
        (
            "l_shipyear=1994",
            "part-0",
            vec![
                (1, 1700, 2_116_823, "N"),
                (2, 3600, 4_598_316, "R"),
                (3, 800, 1_330_960, "N"),
            ],
        ),
        (
            "l_shipyear=1995",
            "part-0",
            vec![
                (4, 2800, 2_895_564, "A"),
                (5, 2400, 2_282_448, "N"),
                (6, 3200, 4_962_016, "R"),
            ],
        ),
        (
            "l_shipyear=1995",
            "part-1",
            vec![(7, 3800, 4_469_446, "A"), (8, 4500, 5_405_805, "N")],
        ),
        (
            "l_shipyear=1996",
            "part-0",
            vec![(9, 4900, 4_679_647, "R"), (10, 2700, 3_989_088, "N")],
        ),
    ]
}

/// The example's answer: 1995's lines per return flag.
const ANSWER_1995: [&str; 4] = [
    "l_shipyear,l_returnflag,lines,qty,price",
    "1995,A,2,66.00,73650.10",
    "1995,N,2,69.00,76882.53",
    "1995,R,1,32.00,49620.16",
];

/// One test's folder: the example job and its data copied in.
struct Env {
    tmp: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let examples = workspace().join("examples");
        std::fs::copy(
            examples.join("lineitem-by-year-sql.toml"),
            tmp.path().join("job.toml"),
        )
        .expect("job");
        for (folder, file, _) in example_files() {
            let from = examples
                .join("lineitem-by-year")
                .join(folder)
                .join(format!("{file}.csv"));
            let to = tmp.path().join("lineitem-by-year").join(folder);
            std::fs::create_dir_all(&to).expect("folder");
            std::fs::copy(&from, to.join(format!("{file}.csv"))).expect("csv");
        }
        Self { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn job(&self) -> PathBuf {
        self.path("job.toml")
    }

    /// Replaces `from` (which must occur) in the job file by `to`.
    fn edit(&self, from: &str, to: &str) {
        let text = std::fs::read_to_string(self.job()).expect("job file");
        assert!(text.contains(from), "the job file lacks {from:?}:\n{text}");
        std::fs::write(self.job(), text.replacen(from, to, 1)).expect("job file");
    }

    /// `coordhost run job.toml --data-dir STATE --summary-json STATE.json`.
    fn run(&self, state: &str) -> (Output, Option<Summary>) {
        self.run_with(state, &[])
    }

    /// As [`Env::run`], with `extra` arguments.
    fn run_with(&self, state: &str, extra: &[String]) -> (Output, Option<Summary>) {
        let summary = self.path(&format!("{state}.json"));
        let out = coordhost()
            .arg("run")
            .arg(self.job())
            .arg("--data-dir")
            .arg(self.path(state))
            .arg("--summary-json")
            .arg(&summary)
            .arg("--workers")
            .arg("2")
            .args(extra)
            // On workers: the coordinator says where it deploys each attempt.
            .env(
                "COORDHOST_LOG",
                if extra.is_empty() {
                    "warn"
                } else {
                    "coordhost::remote=info"
                },
            )
            .output()
            .expect("coordhost runs");
        let summary = std::fs::read(&summary)
            .ok()
            .map(|b| serde_json::from_slice(&b).expect("summary JSON"));
        (out, summary)
    }

    fn run_ok(&self, state: &str) -> (String, Summary) {
        let (out, summary) = self.run(state);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let summary = summary.expect("a summary");
        assert_eq!(summary.status, JobStatus::Finished, "{stderr}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), summary)
    }

    /// Runs a job expected to fail while it runs: exit 1, nothing
    /// published; returns stderr.
    fn run_failed(&self, state: &str) -> String {
        let (out, summary) = self.run(state);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(summary.expect("a summary").status, JobStatus::Failed);
        let output = self.path(state).join("output/lineitem-by-year");
        assert!(!output.join("_SUCCESS").exists(), "nothing is published");
        stderr
    }

    fn output(&self, state: &str) -> Vec<String> {
        published_lines(&self.path(state).join("output/lineitem-by-year"))
    }
}

#[test]
fn a_where_and_a_group_by_on_the_partition_column_read_the_folder_values() {
    let env = Env::new();
    let (stdout, summary) = env.run_ok("state");
    assert_eq!(env.output("state"), ANSWER_1995);
    // Only 1995's files were read (5 of the 10 rows): the splits of the
    // other folders were pruned by the filter on their values.
    assert_eq!(summary.vertices[0].records_in, 5, "{summary:?}");
    // No [shuffle]: the built-in local shuffle master, said once.
    assert!(summary.default_shuffle, "{summary:?}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("builtin:local-shuffle"))
            .count(),
        1,
        "{stdout}"
    );
    assert!(env.path("state/shuffle/lineitem-by-year").is_dir());

    // The partition column alone (the scan reads one file column for the
    // rows' count) and beside a file column, every folder.
    env.edit(
        "WHERE l_shipyear = 1995\nGROUP BY l_shipyear, l_returnflag\nORDER BY l_returnflag",
        "GROUP BY l_shipyear\nORDER BY l_shipyear",
    );
    env.edit(
        "SELECT l_shipyear, l_returnflag, count(*) AS lines, sum(l_quantity) AS qty, sum(l_extendedprice) AS price",
        "SELECT l_shipyear, count(*) AS lines, max(l_orderkey) AS last",
    );
    let (_, all) = env.run_ok("all-years");
    assert_eq!(all.vertices[0].records_in, 10, "no filter, no pruning");
    assert_eq!(
        env.output("all-years"),
        ["l_shipyear,lines,last", "1994,3,3", "1995,5,8", "1996,2,10"]
    );
    env.edit(
        "SELECT l_shipyear, count(*) AS lines, max(l_orderkey) AS last",
        "SELECT l_shipyear, count(*) AS lines",
    );
    env.run_ok("count-only");
    assert_eq!(
        env.output("count-only"),
        ["l_shipyear,lines", "1994,3", "1995,5", "1996,2"]
    );

    // A filter on the partition column beside one on a file column: the
    // first prunes 1995's files, the second applies to the rows read.
    env.edit(
        "GROUP BY l_shipyear
ORDER BY l_shipyear",
        "WHERE l_shipyear IN (1994, 1996) AND l_returnflag <> 'R'
GROUP BY l_shipyear
ORDER BY l_shipyear",
    );
    let (_, pruned) = env.run_ok("pruned");
    assert_eq!(
        env.output("pruned"),
        ["l_shipyear,lines", "1994,2", "1996,1"]
    );
    assert_eq!(
        pruned.vertices[0].records_in, 5,
        "1994's 3 rows and 1996's 2"
    );
}

#[test]
fn the_partition_values_are_added_on_worker_processes_too() {
    use crate::support::workers::{Workers, external_args, free_port};
    let env = Env::new();
    let addr = free_port();
    let _workers = Workers::start(2, &addr, &env.path("workers"), 2);
    let (out, summary) = env.run_with("state", &external_args(&addr, 2, 5000));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(summary.expect("a summary").status, JobStatus::Finished);
    assert_eq!(env.output("state"), ANSWER_1995);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("deploying") && l.contains("stage0")),
        "the scan ran on a worker: {stderr}"
    );
}

/// Writes the example's rows as Parquet under `root/<folder>/<file>.parquet`.
fn write_parquet(root: &Path) {
    for (folder, file, rows) in example_files() {
        let dir = root.join(folder);
        std::fs::create_dir_all(&dir).expect("folder");
        let cents = |v: Vec<i128>| {
            Arc::new(
                Decimal128Array::from(v)
                    .with_precision_and_scale(15, 2)
                    .expect("decimal"),
            ) as ArrayRef
        };
        let batch = RecordBatch::try_from_iter([
            (
                "l_orderkey",
                Arc::new(Int64Array::from(
                    rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
            ("l_quantity", cents(rows.iter().map(|r| r.1).collect())),
            ("l_extendedprice", cents(rows.iter().map(|r| r.2).collect())),
            (
                "l_returnflag",
                Arc::new(StringArray::from(
                    rows.iter().map(|r| r.3).collect::<Vec<_>>(),
                )) as ArrayRef,
            ),
        ])
        .expect("batch");
        let f = std::fs::File::create(dir.join(format!("{file}.parquet"))).expect("create");
        let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
    }
}

#[test]
fn the_same_folders_of_parquet_files_give_the_same_answer() {
    let env = Env::new();
    write_parquet(&env.path("parquet"));
    env.edit(
        r#"dir = "${job_dir}/lineitem-by-year", pattern = ".csv""#,
        r#"dir = "${job_dir}/parquet", pattern = ".parquet""#,
    );
    env.edit(r#"path = "lineitem-by-year""#, r#"path = "parquet""#);
    env.edit(
        "format = \"csv\"\nheader = true\nschema",
        "format = \"parquet\"\nschema",
    );
    env.run_ok("state");
    assert_eq!(env.output("state"), ANSWER_1995);
}

#[test]
fn a_folder_that_does_not_fit_the_declaration_fails_the_job_naming_the_file_and_the_folder() {
    // A value that is not the declared type: the enumerator walks it (its
    // key is right), the host refuses it before reading the file.
    let env = Env::new();
    let bad = env.path("lineitem-by-year/l_shipyear=19x5");
    std::fs::create_dir_all(&bad).expect("folder");
    std::fs::write(
        bad.join("part-0.csv"),
        "l_orderkey,l_quantity,l_extendedprice,l_returnflag\n11,1,1.00,N\n",
    )
    .expect("csv");
    let stderr = env.run_failed("type");
    let wanted = format!(
        "table `lineitem`: file `{}`: folder `l_shipyear=19x5`: `19x5` is not a `int` value of partition column `l_shipyear`",
        bad.join("part-0.csv").display()
    );
    assert!(stderr.contains(&wanted), "{wanted}\n{stderr}");
    std::fs::remove_dir_all(&bad).expect("remove");

    // A folder of another key: the enumerator's walk fails `start`.
    let other = env.path("lineitem-by-year/shipyear=1997");
    std::fs::create_dir_all(&other).expect("folder");
    let stderr = env.run_failed("key");
    let wanted = format!(
        "plugin `files`: `start` failed: folder {} is not `l_shipyear=VALUE`",
        other.display()
    );
    assert!(stderr.contains(&wanted), "{wanted}\n{stderr}");
    std::fs::remove_dir_all(&other).expect("remove");

    // An enumerator that does not walk partition folders hands out a file
    // of a plain folder: the host's own check refuses it.
    let plain = env.path("plain/misc");
    std::fs::create_dir_all(&plain).expect("folder");
    std::fs::copy(
        env.path("lineitem-by-year/l_shipyear=1994/part-0.csv"),
        plain.join("part-0.csv"),
    )
    .expect("csv");
    env.edit(
        r#"dir = "${job_dir}/lineitem-by-year", pattern = ".csv", partitions = "l_shipyear""#,
        r#"dir = "${job_dir}/plain/misc", pattern = ".csv""#,
    );
    env.edit(r#"path = "lineitem-by-year""#, r#"path = "plain""#);
    let stderr = env.run_failed("host");
    let wanted = format!(
        "table `lineitem`: file `{}`: folder `misc` is not `l_shipyear=VALUE`",
        plain.join("part-0.csv").display()
    );
    assert!(stderr.contains(&wanted), "{wanted}\n{stderr}");
}

#[test]
fn a_bad_partition_declaration_is_refused_naming_the_field() {
    for (to, wanted) in [
        (
            r#"partition-columns = [{ name = "l_returnflag", type = "varchar" }]"#,
            "field `tables.lineitem.partition-columns[0].name`: `l_returnflag` is also a column of `schema`",
        ),
        (
            r#"partition-columns = [{ name = "l_shipyear", type = "year" }]"#,
            "field `tables.lineitem.partition-columns[0].type`: column `l_shipyear`: unknown type `year`",
        ),
        (
            r#"partition-columns = [{ name = "l=y", type = "int" }]"#,
            "field `tables.lineitem.partition-columns[0].name`: `l=y` is not a partition column name",
        ),
        (
            r#"partition-columns = [{ name = "l_shipyear", type = "int" }, { name = "l_shipyear", type = "int" }]"#,
            "field `tables.lineitem.partition-columns[1].name`: `l_shipyear` is listed twice",
        ),
    ] {
        let env = Env::new();
        env.edit(
            r#"partition-columns = [{ name = "l_shipyear", type = "int" }]"#,
            to,
        );
        let (out, _) = env.run("state");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        let prefix = format!("coordhost: {}: ", env.job().display());
        assert!(
            lines.len() == 1 && lines[0].starts_with(&prefix) && lines[0].contains(wanted),
            "{wanted}\n{stderr}"
        );
        assert!(!env.path("state").exists(), "nothing is created");
    }
}

#[test]
fn a_coordinator_crash_after_the_scan_reruns_to_the_same_answer_without_reading_again() {
    use crate::support::job::options;
    use crate::support::knobs::{CrashPoint, Knobs, run_output};
    let env = Env::new();
    // The scan stage's two tasks finish, then the coordinator dies.
    let knobs = Knobs::crash(CrashPoint::AfterFinished {
        vertex: "stage0".to_owned(),
        count: 2,
    });
    let state = env.path("state");
    let out = run_output(&options(&env.job(), &state, 2), &knobs);
    assert_ne!(out.code, Some(0), "the crash stops the run: {}", out.stderr);
    assert!(
        out.stderr.contains("simulated coordinator crash"),
        "{}",
        out.stderr
    );
    assert!(!state.join("output/lineitem-by-year/_SUCCESS").exists());

    let rerun = run_output(&options(&env.job(), &state, 2), &Knobs::default());
    assert_eq!(rerun.code, Some(0), "{}", rerun.stderr);
    let summary = rerun.summary.expect("a summary");
    assert!(summary.recovered && summary.default_shuffle, "{summary:?}");
    assert_eq!(summary.vertices[0].skipped, 2, "{summary:?}");
    assert_eq!(summary.vertices[0].records_in, 0, "no file is read again");
    assert_eq!(env.output("state"), ANSWER_1995);
}
