//! Parquet input (issue 16 item 3) through the real `coordhost` binary: the
//! Q1 example over Parquet publishes the same bytes as over CSV; row-group
//! splits and byte splits both read every row exactly once; a missing
//! column, a file that is not Parquet and a file outside the grants each
//! fail the job with one line naming the file.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::job::example_job;
use crate::support::{coordhost, part_files, plugin_path};

/// TPC-H scale of these tests (60 175 rows) and the number of files.
const SCALE: f64 = 0.01;
const PARTS: u32 = 3;
/// Rows per row group: about 5 row groups per file.
const GROUP_ROWS: usize = 4096;

/// A test folder with lineitem as CSV (`csv/`) and as Parquet (`parquet/`).
struct Data {
    tmp: tempfile::TempDir,
    rows: u64,
}

impl Data {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (_, rows) =
            coordhost_datagen::write_lineitem(&tmp.path().join("csv"), SCALE, PARTS).expect("csv");
        let (_, prows) = coordhost_datagen::write_lineitem_parquet(
            &tmp.path().join("parquet"),
            SCALE,
            PARTS,
            GROUP_ROWS,
        )
        .expect("parquet");
        assert_eq!(rows, prows, "the same rows in both formats");
        Self { tmp, rows }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// The Parquet example pointed at `parquet/`, with `edit` applied
    /// (`(from, to)` pairs, each of which must occur), written as `name`.
    fn parquet_job(&self, name: &str, edits: &[(&str, &str)]) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).expect("job folder");
        let job = example_job(
            "tpch-q1-parquet.toml",
            "build/data/tpch-sf0.1-parquet",
            &self.path("parquet"),
            &dir,
        );
        edit(&job, edits);
        job
    }

    /// Runs `job` with data directory `<job's folder>/state` and a JSON summary.
    fn run(&self, job: &Path) -> (Output, String) {
        let dir = job.parent().expect("job folder");
        let out = coordhost()
            .arg("run")
            .arg(job)
            .arg("--data-dir")
            .arg(dir.join("state"))
            .arg("--summary-json")
            .arg(dir.join("summary.json"))
            .args(["--workers", "2"])
            .output()
            .expect("coordhost runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out, stderr)
    }

    /// Runs `job`, expects it to finish, returns its summary.
    fn run_ok(&self, job: &Path) -> serde_json::Value {
        let (out, stderr) = self.run(job);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let dir = job.parent().expect("job folder");
        let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary");
        serde_json::from_str(&text).expect("summary JSON")
    }

    /// Runs `job`, expects exit 1, returns the one `coordhost:` error line
    /// (asserting there is exactly one).
    fn run_fails(&self, job: &Path) -> String {
        let (out, stderr) = self.run(job);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("coordhost: "))
            .collect();
        assert_eq!(errors.len(), 1, "one error line:\n{stderr}");
        errors[0].to_string()
    }
}

/// Replaces each `(from, to)` once in the file `job` (`from` must occur).
fn edit(job: &Path, edits: &[(&str, &str)]) {
    let mut text = std::fs::read_to_string(job).expect("job");
    for (from, to) in edits {
        assert!(text.contains(from), "the job lacks {from:?}:\n{text}");
        text = text.replacen(from, to, 1);
    }
    std::fs::write(job, text).expect("job");
}

/// The bytes of every published part file of `out`, in part order.
fn output_bytes(out: &Path) -> Vec<Vec<u8>> {
    assert!(
        out.join("_SUCCESS").is_file(),
        "{} has no _SUCCESS",
        out.display()
    );
    part_files(out)
        .iter()
        .map(|p| std::fs::read(p).expect("part file"))
        .collect()
}

fn scan(summary: &serde_json::Value) -> &serde_json::Value {
    &summary["vertices"][0]
}

#[test]
fn tpch_q1_over_parquet_publishes_the_same_bytes_as_over_csv() {
    let data = Data::new();
    let csv_dir = data.path("csv-job");
    std::fs::create_dir_all(&csv_dir).expect("folder");
    let csv_job = example_job(
        "tpch-q1.toml",
        "build/data/tpch-sf0.1",
        &data.path("csv"),
        &csv_dir,
    );
    edit(
        &csv_job,
        &[("split-bytes = 4194304", "split-bytes = 500000")],
    );
    let csv_summary = data.run_ok(&csv_job);
    let csv_out = output_bytes(&csv_dir.join("state/output/tpch-q1"));

    let pq_job = data.parquet_job("parquet-job", &[]);
    let pq_summary = data.run_ok(&pq_job);
    let pq_out = output_bytes(&data.path("parquet-job/state/output/tpch-q1-parquet"));

    assert_eq!(
        String::from_utf8_lossy(&pq_out.concat()),
        String::from_utf8_lossy(&csv_out.concat())
    );
    assert_eq!(pq_out, csv_out, "the same part files, byte for byte");
    assert!(
        String::from_utf8_lossy(&pq_out.concat()).lines().count() >= 5,
        "a header and four groups"
    );
    assert_eq!(scan(&csv_summary)["records_in"], data.rows);
    assert_eq!(scan(&pq_summary)["records_in"], data.rows);
}

#[test]
fn row_group_splits_and_byte_splits_read_every_row_once() {
    let data = Data::new();
    // Row groups per file, from the files' own footers.
    let groups: Vec<u64> = std::fs::read_dir(data.path("parquet"))
        .expect("list")
        .map(|e| {
            let file = std::fs::File::open(e.expect("entry").path()).expect("open");
            let reader = parquet::file::reader::SerializedFileReader::new(file).expect("parquet");
            parquet::file::reader::FileReader::metadata(&reader).num_row_groups() as u64
        })
        .collect();
    assert!(
        groups.iter().all(|&g| g >= 3),
        "several row groups per file: {groups:?}"
    );
    let one: u64 = groups.iter().sum();
    let two: u64 = groups.iter().map(|g| g.div_ceil(2)).sum();
    for (name, config, splits) in [
        ("one-group", "row-groups-per-split = 1", one),
        ("two-groups", "row-groups-per-split = 2", two),
        ("bytes", "split-bytes = 65536", 0),
    ] {
        let job = data.parquet_job(name, &[("row-groups-per-split = 1", config)]);
        let summary = data.run_ok(&job);
        assert_eq!(scan(&summary)["records_in"], data.rows, "{name}");
        let assigned = scan(&summary)["splits_assigned"].as_u64().expect("splits");
        if splits > 0 {
            assert_eq!(assigned, splits, "{name}: whole row groups per split");
        } else {
            assert!(assigned > u64::from(PARTS), "{name}: {assigned} splits");
        }
    }
}

#[test]
fn a_column_the_file_lacks_fails_naming_the_file_and_the_column() {
    let data = Data::new();
    let job = data.parquet_job(
        "missing",
        &[(
            r#""l_discount", "l_shipdate"]"#,
            r#""l_discount", "l_shipdate", "l_nope"]"#,
        )],
    );
    let line = data.run_fails(&job);
    assert!(
        line.contains("has no column `l_nope`")
            && line.contains(&data.path("parquet").display().to_string()),
        "{line}"
    );
}

#[test]
fn a_file_that_is_not_parquet_fails_naming_the_plugin_and_the_file() {
    let data = Data::new();
    let fake = data.path("parquet/lineitem-9.parquet");
    std::fs::copy(data.path("csv/lineitem-1.csv"), &fake).expect("a CSV file named .parquet");
    // Cut by bytes: the enumerator checks the footer of a `.parquet` file
    // too (a 0-byte or cut-short one would otherwise give no rows), and says so.
    let job = data.parquet_job(
        "bytes",
        &[("row-groups-per-split = 1", "split-bytes = 1048576")],
    );
    let line = data.run_fails(&job);
    assert!(
        line.contains("plugin `lineitem`")
            && line.contains(&format!(
                "{} is not a readable Parquet file",
                fake.display()
            )),
        "{line}"
    );
    // Cut by row groups: the enumerator reads the footer and says so.
    let job = data.parquet_job("groups", &[]);
    let line = data.run_fails(&job);
    assert!(
        line.contains("lineitem")
            && line.contains(&format!(
                "{} is not a readable Parquet file",
                fake.display()
            )),
        "{line}"
    );
}

#[test]
fn a_split_naming_a_parquet_file_outside_the_grants_through_a_symlink_is_refused() {
    let data = Data::new();
    let input = data.path("input");
    std::fs::create_dir_all(&input).expect("input");
    let outside = data.path("parquet/lineitem-1.parquet");
    let link = input.join("outer.parquet");
    std::os::unix::fs::symlink(&outside, &link).expect("symlink");
    let job = data.path("evil/job.toml");
    std::fs::create_dir_all(job.parent().expect("folder")).expect("folder");
    let text = format!(
        r#"
[job]
name = "evil"
max-attempts = 1

[recovery]
enabled = false

[shuffle]
plugin = "shuffle"

[plugins.evil-enum]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ splits = "0", fault = "assign-file", path = "{link}" }}
dirs = [{{ path = "{input}" }}]

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[[vertices]]
id = "read"
source = "evil-enum"
parallelism = 1
operators = [
  {{ op = "read-parquet", columns = ["l_returnflag"] }},
  {{ op = "write-csv", path = "${{data_dir}}/output/flags" }},
]
"#,
        enumerator = plugin_path("faulty-enumerator").display(),
        shuffle = plugin_path("local-shuffle").display(),
        link = link.display(),
        input = input.display(),
    );
    std::fs::write(&job, text).expect("job");
    let line = data.run_fails(&job);
    assert!(
        line.contains("split `file-0`")
            && line.contains("evil-enum")
            && line.contains(&link.display().to_string()),
        "{line}"
    );
    let out = data.path("evil/state/output/flags");
    assert!(!out.join("_SUCCESS").exists(), "nothing published");
}

/// Row-group splits survive a coordinator crash: the enumerator's batch
/// snapshot holds the queue of unassigned row-group splits, the host's
/// history the assigned ones, so the restart reads every row group once.
#[test]
fn a_crash_in_the_middle_of_a_parquet_scan_recovers_to_the_same_output() {
    use crate::support::job::options;
    use crate::support::knobs::{self, CrashPoint, Knobs};
    use coordhost::job::{JobStatus, run_job};

    let data = Data::new();
    let plain = data.parquet_job("plain", &[]);
    data.run_ok(&plain);
    let expected = output_bytes(&data.path("plain/state/output/tpch-q1-parquet"));

    // Snapshots on every finish, a crash after two of the four scan subtasks.
    let job = data.parquet_job(
        "crash",
        &[("snapshot-min-pause-ms = 1000", "snapshot-min-pause-ms = 0")],
    );
    let state = data.path("crash/state");
    let opts = options(&job, &state, 2);
    let crash = Knobs::crash(CrashPoint::AfterFinished {
        vertex: "scan".into(),
        count: 2,
    });
    let first = knobs::run(&opts, &crash).expect("the first run starts");
    assert!(
        first
            .error
            .as_deref()
            .is_some_and(|e| e.contains("simulated")),
        "{:?}",
        first.error
    );
    let second = run_job(&opts).expect("the restart starts");
    assert_eq!(second.status, JobStatus::Finished, "{:?}", second.error);
    assert!(second.recovered, "the restart recovers");
    let scan = &second.vertices[0];
    assert_eq!(scan.skipped, 2, "the two finished scan subtasks are kept");
    assert_eq!(
        output_bytes(&state.join("output/tpch-q1-parquet")),
        expected,
        "the same bytes after recovery: every row group read once"
    );
}
