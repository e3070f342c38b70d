//! What the SQL benches over TPC-H lineitem share (`functions`, `ui`):
//! the workspace's paths, lineitem's declared schema, the job file over
//! its Parquet files, and medians.

#![allow(dead_code)] // each bench uses its own part of it

use std::path::{Path, PathBuf};

/// The workspace folder (the host crate's parent).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate lies in the workspace")
        .to_path_buf()
}

/// A sample plugin built by `make plugins`: `build/plugins/NAME.wasm`.
pub fn plugin_path(name: &str) -> PathBuf {
    workspace()
        .join("build/plugins")
        .join(format!("{name}.wasm"))
}

/// Where `make bench-functions` and `make bench-ui` write TPC-H SF 1
/// lineitem as Parquet.
pub fn lineitem_dir() -> PathBuf {
    workspace().join("build/data/tpch-sf1-parquet/lineitem")
}

/// lineitem's 16 columns as a `[tables.lineitem] schema`.
pub const LINEITEM_SCHEMA: &str = r#"{ l_orderkey = "bigint", l_partkey = "bigint", l_suppkey = "bigint", l_linenumber = "bigint", l_quantity = "decimal(15,2)", l_extendedprice = "decimal(15,2)", l_discount = "decimal(15,2)", l_tax = "decimal(15,2)", l_returnflag = "varchar", l_linestatus = "varchar", l_shipdate = "date", l_commitdate = "date", l_receiptdate = "date", l_shipinstruct = "varchar", l_shipmode = "varchar", l_comment = "varchar" }"#;

/// Writes `dir/NAME.toml`: job `name` running `sql` over the lineitem
/// Parquet files in `data` (one split per row group, the file enumerator
/// and local shuffle samples, recovery on, one attempt), its CSV output
/// under `${data_dir}/output/NAME`, with `extra` (e.g. a `[functions.X]`
/// table) appended before the sink.
pub fn write_lineitem_job(dir: &Path, data: &Path, name: &str, sql: &str, extra: &str) -> PathBuf {
    let text = format!(
        r#"[job]
name = "{name}"
max-attempts = 1
sql = """{sql}"""

[recovery]
enabled = true

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{files}"
kind = "split-enumerator"
config = {{ dir = "{data}", pattern = ".parquet", row-groups-per-split = 1 }}
dirs = [{{ path = "{data}", writable = false }}]

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[tables.lineitem]
plugin = "files"
format = "parquet"
schema = {LINEITEM_SCHEMA}

{extra}
[sink]
path = "${{data_dir}}/output/{name}"
format = "csv"
"#,
        files = plugin_path("file-enumerator").display(),
        shuffle = plugin_path("local-shuffle").display(),
        data = data.display(),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("the bench writes its job files");
    path
}

/// The median of `samples` (the mean of the middle two for an even count).
pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}

/// Rows of SF 1 lineitem with `l_shipdate <= date '1998-09-02'` (Q1's
/// filter): the sum of Q1's `count_order` column.
pub const Q1_ROWS: u64 = 5_916_591;

/// TPC-H Q1 as the specification writes it (delta 90 days).
pub const Q1: &str = "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, \
    sum(l_extendedprice) AS sum_base_price, \
    sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price, \
    sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, \
    avg(l_quantity) AS avg_qty, avg(l_extendedprice) AS avg_price, \
    avg(l_discount) AS avg_disc, count(*) AS count_order \
    FROM lineitem WHERE l_shipdate <= date '1998-12-01' - interval '90' day \
    GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus";

/// Checks Q1's answer under `out`: 4 groups whose `count_order` (the
/// last column) sums to [`Q1_ROWS`].
pub fn check_q1_answer(out: &Path) -> Result<(), String> {
    if !out.join("_SUCCESS").is_file() {
        return Err(format!("{} has no _SUCCESS", out.display()));
    }
    let mut groups = 0_u64;
    let mut rows = 0_u64;
    for entry in std::fs::read_dir(out).map_err(|e| format!("{}: {e}", out.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for line in text.lines().skip(1).filter(|l| !l.is_empty()) {
            let count = line
                .rsplit(',')
                .next()
                .and_then(|c| c.parse::<u64>().ok())
                .ok_or_else(|| format!("{}: no count_order in `{line}`", path.display()))?;
            groups += 1;
            rows += count;
        }
    }
    if groups != 4 || rows != Q1_ROWS {
        return Err(format!(
            "{}: {groups} groups over {rows} rows, expected 4 over {Q1_ROWS}",
            out.display()
        ));
    }
    Ok(())
}
