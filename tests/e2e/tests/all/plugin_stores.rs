//! Issue 30, item 2: plugins reach object storage only through grants
//! (docs/object-storage.md, "Grants for plugins"), against a real SeaweedFS
//! server (support/s3.rs) and the real `coordhost` binary. One server for
//! the whole file's cases, so it stays cheap:
//!
//! - a SQL job whose table lies in a bucket: `file-enumerator` lists the
//!   granted prefix through the host's `object-store` import, hands out
//!   byte ranges of the objects, the tasks read them with the host's
//!   client; exact output; objects beside the prefix (`sales-old/`) or
//!   below it (`sales/archive/`) are not read;
//! - refusals, each one clear line and nothing published: a key outside
//!   the grant, a put on a read-only grant, a plugin without grants, a
//!   split naming an object outside the grant, a bad grant URL in the job
//!   file (exit 2, naming file, plugin and field); a put inside a writable
//!   grant is served; a table without splits (no object, or an
//!   enumerator that hands out none) gives the empty answer, exit 0;
//! - Parquet objects: row groups spread over byte ranges that cut across
//!   them (each read once, by the split holding its start) and over
//!   row-group splits, embedded and on 3 worker processes that are sent
//!   the enumerator's store grants (read-only); an empty or garbage
//!   Parquet object fails the job naming it, nothing published.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use crate::support::s3::{ACCESS_KEY, SECRET_KEY, Seaweed};
use crate::support::workers::{Workers, external_args, free_port};
use crate::support::{coordhost, plugin_path, published_lines};

/// The test's temporary folder.
struct Fixture(tempfile::TempDir);

impl Fixture {
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

const BUCKET: &str = "coordhost-input";

/// A SQL job over table `sales` (CSV with a header) whose splits come
/// from plugin `files`, declared by `files` (the lines after
/// `[plugins.files]`).
fn job(dir: &Path, files: &str) -> PathBuf {
    job_of(dir, files, "format = \"csv\"\nheader = true")
}

/// As [`job`], the table's format given by `format` (its lines).
fn job_of(dir: &Path, files: &str, format: &str) -> PathBuf {
    let text = format!(
        r#"[job]
name = "sales"
parallelism = 2
max-attempts = 1
sql = """SELECT region, sum(amount) AS total, count(*) AS n FROM sales GROUP BY region ORDER BY region"""

[plugins.files]
{files}

[tables.sales]
plugin = "files"
{format}
schema = {{ region = "varchar", amount = "bigint" }}

[sink]
path = "${{data_dir}}/output/sales"
format = "csv"
"#
    );
    std::fs::create_dir_all(dir).expect("job folder");
    let path = dir.join("sales.toml");
    std::fs::write(&path, text).expect("job file");
    path
}

/// The file enumerator over `dir`, with `stores` as its grants.
fn file_enumerator(dir: &str, stores: &str) -> String {
    format!(
        "component = \"{}\"\nkind = \"split-enumerator\"\nconfig = {{ dir = \"{dir}\", split-bytes = 25, pattern = \".csv\" }}\nstores = {stores}\n",
        plugin_path("file-enumerator").display()
    )
}

/// The faulty enumerator with `config` (inline TOML pairs) and `stores`.
fn faulty(config: &str, stores: &str) -> String {
    format!(
        "component = \"{}\"\nkind = \"split-enumerator\"\nconfig = {{ {config} }}\nstores = {stores}\n",
        plugin_path("faulty-enumerator").display()
    )
}

/// `coordhost run JOB --data-dir DATA` with the server's variables.
fn run(server: &Seaweed, job: &Path, data: &Path) -> Output {
    coordhost()
        .arg("run")
        .arg(job)
        .arg("--data-dir")
        .arg(data)
        .args(["--workers", "2"])
        .env("COORDHOST_LOG", "warn")
        .envs(server.env())
        .output()
        .expect("coordhost runs")
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A run that must fail with `want` in its error output and publish nothing.
fn refused(
    server: &Seaweed,
    fx: &Fixture,
    case: &str,
    files: &str,
    code: i32,
    want: &str,
) -> String {
    refused_of(
        server,
        fx,
        case,
        files,
        "format = \"csv\"\nheader = true",
        code,
        want,
    )
}

/// As [`refused`], the table's format given by `format` (its lines).
fn refused_of(
    server: &Seaweed,
    fx: &Fixture,
    case: &str,
    files: &str,
    format: &str,
    code: i32,
    want: &str,
) -> String {
    let job = job_of(&fx.path(case), files, format);
    let data = fx.path(&format!("{case}-data"));
    let out = run(server, &job, &data);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(code), "{case}: {stderr}");
    assert!(stderr.contains(want), "{case}: {want:?} not in: {stderr}");
    assert!(
        !data.join("output/sales/_SUCCESS").exists(),
        "{case}: nothing is published"
    );
    assert!(
        !stderr.contains(SECRET_KEY) && !stderr.contains(ACCESS_KEY),
        "{case}: {stderr}"
    );
    stderr
}

#[test]
fn plugin_stores_a_sql_table_in_a_bucket_is_read_through_grants_and_every_escape_is_refused() {
    let fx = Fixture(tempfile::tempdir().expect("tempdir"));
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let put = |key: &str, text: &str| server.put(key, text.as_bytes().to_vec());
    put(
        "sales/a.csv",
        "region,amount\neast,10\nwest,5\neast,7\nnorth,1\n",
    );
    put("sales/b.csv", "region,amount\nwest,20\nwest,1\neast,100\n");
    put("sales/c.csv", "region,amount\nsouth,3\n");
    // Beside the prefix, below it, and not matching the pattern: never read.
    put("sales-old/a.csv", "region,amount\neast,1000000\n");
    put("sales/archive/old.csv", "region,amount\neast,2000000\n");
    put("sales/notes.txt", "region,amount\neast,3000000\n");
    put("secret/key.csv", "region,amount\nsecret,42\n");
    let sales = format!("s3://{BUCKET}/sales");
    let read_only = format!("[{{ url = \"{sales}\", writable = false }}]");

    // The table read from objects, exact output.
    let job_file = job(&fx.path("ok"), &file_enumerator(&sales, &read_only));
    let data = fx.path("ok-data");
    let out = run(&server, &job_file, &data);
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains(SECRET_KEY) && !stderr.contains(ACCESS_KEY),
        "{stderr}"
    );
    assert_eq!(
        published_lines(&data.join("output/sales")),
        [
            "region,total,n",
            "east,117,3",
            "north,1,1",
            "south,3,1",
            "west,26,3"
        ]
    );

    // A key outside the grant (another folder, and `..` to climb out).
    let secret = format!("s3://{BUCKET}/secret/key.csv");
    let e = refused(
        &server,
        &fx,
        "outside",
        &faulty(
            &format!(
                "fault = \"store\", on = \"start\", store-op = \"get\", store-url = \"{secret}\""
            ),
            &read_only,
        ),
        1,
        &format!(
            "not-granted: plugin `files` named {secret}, which is outside every store granted to it ({sales} (read-only))"
        ),
    );
    assert!(!e.contains("secret,42"), "{e}");
    refused(
        &server,
        &fx,
        "dotdot",
        &faulty(
            &format!(
                "fault = \"store\", on = \"start\", store-op = \"get\", store-url = \"{sales}/../secret/key.csv\""
            ),
            &read_only,
        ),
        1,
        "invalid-url: plugin `files` named `s3://coordhost-input/sales/../secret/key.csv`: its key has a `..` part",
    );
    refused(
        &server,
        &fx,
        "beside",
        &faulty(
            &format!(
                "fault = \"store\", on = \"start\", store-op = \"list\", store-url = \"s3://{BUCKET}/sales-old\""
            ),
            &read_only,
        ),
        1,
        "not-granted: plugin `files` named s3://coordhost-input/sales-old, which is outside every store granted to it",
    );

    // A put on a read-only grant: refused, and no object appears.
    refused(
        &server,
        &fx,
        "put",
        &faulty(
            &format!(
                "fault = \"store\", on = \"start\", store-op = \"put\", store-url = \"{sales}/evil.csv\""
            ),
            &read_only,
        ),
        1,
        &format!(
            "read-only: plugin `files` asked to change {sales}/evil.csv, but its store grant {sales} is read-only"
        ),
    );
    assert!(
        !server
            .keys("sales/")
            .iter()
            .any(|k| k.ends_with("evil.csv")),
        "the refused put wrote nothing"
    );

    // A plugin without grants calling the import.
    refused(
        &server,
        &fx,
        "none",
        &faulty(
            &format!(
                "fault = \"store\", on = \"start\", store-op = \"list\", store-url = \"{sales}\""
            ),
            "[]",
        ),
        1,
        &format!(
            "not-granted: plugin `files` named {sales}, which is outside every store granted to it (none)"
        ),
    );

    // A split that names an object outside the grant: the host refuses the
    // split before any task reads it (a broken contract).
    refused(
        &server,
        &fx,
        "split",
        &faulty(
            &format!("fault = \"assign-file\", path = \"{secret}\", length = 100"),
            &read_only,
        ),
        1,
        &format!("names {secret}, which is outside every store granted to it"),
    );

    // A bad grant URL in the job file: exit 2, naming file, plugin and field.
    let e = refused(
        &server,
        &fx,
        "bad-url",
        &file_enumerator(&sales, "[{ url = \"s3://coordhost-input/a/../b\" }]"),
        2,
        "plugins.files.stores[0].url",
    );
    assert!(e.contains("sales.toml") && e.contains("`..` part"), "{e}");

    // A put inside a writable grant is served (and the job goes on).
    let out_grant = format!("[{{ url = \"s3://{BUCKET}/out\", writable = true }}]");
    let job_file = job(
        &fx.path("put-ok"),
        &faulty(
            &format!(
                "splits = 0, fault = \"store\", on = \"start\", store-op = \"put\", store-url = \"s3://{BUCKET}/out/made.txt\""
            ),
            &out_grant,
        ),
    );
    let out = run(&server, &job_file, &fx.path("put-ok-data"));
    let stderr = stderr_of(&out);
    assert!(!stderr.contains("object-store put"), "{stderr}");
    assert_eq!(
        server.get("out/made.txt"),
        b"written by faulty-enumerator\n"
    );
    // The job over its table without splits finishes with the empty answer.
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        published_lines(&fx.path("put-ok-data").join("output/sales")),
        ["region,total,n"]
    );

    // An empty folder of objects: no split, the empty answer, exit 0.
    let job_file = job(
        &fx.path("empty"),
        &file_enumerator(&format!("s3://{BUCKET}/sales/none"), &read_only),
    );
    let out = run(&server, &job_file, &fx.path("empty-data"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        published_lines(&fx.path("empty-data").join("output/sales")),
        ["region,total,n"]
    );
}

const REGIONS: [&str; 4] = ["east", "west", "north", "south"];

/// A Parquet object of `rows` rows (`region`, `amount`), `group` rows per
/// row group, the rows numbered from `first`; adds them to `expect`
/// (region → (sum, count)).
fn parquet_object(
    first: i64,
    rows: i64,
    group: usize,
    expect: &mut BTreeMap<String, (i64, i64)>,
) -> Vec<u8> {
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    let n = first..first + rows;
    let region: Vec<&str> = n
        .clone()
        .map(|i| REGIONS[usize::try_from(i * i % 7 % 4).expect("index")])
        .collect();
    let amount: Vec<i64> = n.clone().map(|i| i * 37 % 101 - 20).collect();
    for (r, a) in region.iter().zip(&amount) {
        let e = expect.entry((*r).to_owned()).or_default();
        e.0 += a;
        e.1 += 1;
    }
    let batch = RecordBatch::try_from_iter([
        ("region", Arc::new(StringArray::from(region)) as ArrayRef),
        ("amount", Arc::new(Int64Array::from(amount)) as ArrayRef),
    ])
    .expect("batch");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(group))
        .build();
    let mut out = Vec::new();
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), Some(props))
        .expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
    out
}

#[test]
fn plugin_stores_parquet_objects_are_read_once_per_row_group_embedded_and_on_three_workers() {
    let fx = Fixture(tempfile::tempdir().expect("tempdir"));
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let mut expect = BTreeMap::new();
    let mut sizes = Vec::new();
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let first = i64::try_from(i).expect("i") * 1000;
        let bytes = parquet_object(first, 40 + 13 * first / 1000, 4, &mut expect);
        sizes.push(bytes.len());
        server.put(&format!("pq/{name}.parquet"), bytes);
    }
    // Beside the folder: never read.
    let mut ignored = BTreeMap::new();
    server.put("pq-old/x.parquet", parquet_object(5, 10, 4, &mut ignored));
    let mut want = vec!["region,total,n".to_owned()];
    want.extend(expect.iter().map(|(r, (sum, n))| format!("{r},{sum},{n}")));
    let grant = format!("[{{ url = \"s3://{BUCKET}/pq\" }}]");
    let parquet = "format = \"parquet\"";
    let files = |config: &str| {
        format!(
            "component = \"{}\"\nkind = \"split-enumerator\"\nconfig = {{ dir = \"s3://{BUCKET}/pq\", pattern = \".parquet\", {config} }}\nstores = {grant}\n",
            plugin_path("file-enumerator").display()
        )
    };
    // Byte ranges much smaller than an object: most cut through a row
    // group, many hold no row group's start.
    let smallest = sizes.iter().min().copied().unwrap_or(0);
    assert!(smallest > 600, "objects of several ranges ({sizes:?})");
    for (case, config) in [
        ("bytes", "split-bytes = 150"),
        ("groups", "row-groups-per-split = 3"),
    ] {
        let job_file = job_of(&fx.path(case), &files(config), parquet);
        let data = fx.path(&format!("{case}-data"));
        let out = run(&server, &job_file, &data);
        assert_eq!(out.status.code(), Some(0), "{case}: {}", stderr_of(&out));
        assert_eq!(published_lines(&data.join("output/sales")), want, "{case}");
    }

    // The same job on 3 worker processes: each task reads its object
    // ranges on a worker, inside the grants the coordinator sent it.
    let addr = free_port();
    let workers = Workers::start_with_env(3, &addr, &fx.path("workers"), 2, server.env());
    let job_file = job_of(
        &fx.path("workers-job"),
        &files("split-bytes = 150"),
        parquet,
    );
    let data = fx.path("workers-data");
    let out = coordhost()
        .arg("run")
        .arg(&job_file)
        .arg("--data-dir")
        .arg(&data)
        .args(external_args(&addr, 3, 5000))
        .env("COORDHOST_LOG", "warn")
        .envs(server.env())
        .output()
        .expect("coordhost runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stderr_of(&out),
        workers.logs()
    );
    assert_eq!(published_lines(&data.join("output/sales")), want);
    drop(workers);

    // An empty object and one that is not Parquet: the job fails naming
    // the object, nothing is published.
    for (case, bytes) in [
        ("empty", Vec::new()),
        ("garbage", b"region,amount\neast,1\n".repeat(3)),
    ] {
        let key = format!("pq/z-{case}.parquet");
        server.put(&key, bytes);
        let stderr = refused_of(
            &server,
            &fx,
            case,
            &files("split-bytes = 150"),
            parquet,
            1,
            &format!("s3://{BUCKET}/{key} is not a readable Parquet file"),
        );
        assert!(
            stderr.lines().filter(|l| l.contains(&key)).count() >= 1,
            "{stderr}"
        );
        server.delete(&key);
    }
}
