//! A scalar function written in C (issue 27, item 4: "any Wasm language" has
//! a fourth one) through the real `coordhost run` with the real component:
//! the sample `plugins/c-function` (`plus_one(x bigint) -> bigint`, built
//! by `make plugins` with clang-19, wit-bindgen c and wasm-tools, reading
//! and writing Arrow IPC with the C codec `plugins/c-arrow`) is called from
//! SQL in the same query that computes `x + 1` in SQL; both must agree with
//! each other and with the values this test computes, nulls included. Its
//! `configure` refuses a key it does not know, which refuses the job (exit
//! 2) naming the field; and a query that passes it a column of another type
//! is refused at planning, naming the function.

use std::path::Path;

use crate::sql_functions::{job_file, write_table};
use crate::support::job::options;
use crate::support::knobs::{Knobs, RunOutput, run_output};
use crate::support::{plugin_path, published_lines};
use coordhost::job::JobStatus;

/// `[functions.plus_one]`: the C sample, with `config` (TOML inline-table
/// entries) and the limits every sample function gets in these tests.
fn c_plus_one(config: &str) -> String {
    format!(
        "[functions.plus_one]\ncomponent = \"{}\"\nconfig = {{ {config} }}\nlimits = {{ call-timeout-ms = 5000, memory-mib = 64 }}\n",
        plugin_path("c-function").display()
    )
}

fn run(job: &Path, state: &Path) -> RunOutput {
    run_output(&options(job, state, 2), &Knobs::default())
}

/// A bigint as the CSV sink writes it; empty for null.
fn cell(v: Option<i64>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

#[test]
fn plus_one_in_c_equals_x_plus_one_in_sql_with_nulls_staying_null() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    // Prices in cents as a bigint column: negative, zero and empty (null) ones.
    let rows = write_table(&input, 3000);
    let sql = "SELECT id, plus_one(id) AS a, id + 1 AS b, \
               plus_one(CAST(price * 100 AS BIGINT)) AS c, CAST(price * 100 AS BIGINT) + 1 AS d \
               FROM t ORDER BY id";
    let job = job_file(&tmp.path().join("job"), &input, &c_plus_one(""), sql, 1);
    let state = tmp.path().join("state");
    let out = run(&job, &state);
    let summary = out
        .summary
        .unwrap_or_else(|| panic!("a summary, exit {:?}: {}", out.code, out.stderr));
    assert_eq!(
        (summary.status, out.code),
        (JobStatus::Finished, Some(0)),
        "{:?} {}",
        summary.error,
        out.stderr
    );

    let lines = published_lines(&state.join("output/udf"));
    assert_eq!(lines[0], "id,a,b,c,d");
    assert_eq!(lines.len(), rows.len() + 1, "one line per row");
    let mut nulls = 0;
    for (line, (id, price, _)) in lines[1..].iter().zip(&rows) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), 5, "{line}");
        assert_eq!(cells[1], cells[2], "plus_one(id) = id + 1: {line}");
        assert_eq!(cells[3], cells[4], "plus_one(cents) = cents + 1: {line}");
        let cents = price.map(|c| i64::try_from(c).expect("cents fit a bigint"));
        nulls += usize::from(cents.is_none());
        let expected = format!(
            "{id},{},{},{},{}",
            id + 1,
            id + 1,
            cell(cents.map(|c| c + 1)),
            cell(cents.map(|c| c + 1))
        );
        assert_eq!(line, &expected, "row {id}");
    }
    assert!(nulls > 50, "the null prices reach the function: {nulls}");
}

#[test]
fn a_config_key_the_c_function_does_not_know_refuses_the_job_naming_the_field() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 10);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &c_plus_one("step = \"2\""),
        "SELECT plus_one(id) AS x FROM t",
        1,
    );
    let state = tmp.path().join("state");
    let out = run(&job, &state);
    assert!(out.summary.is_none(), "{}", out.stderr);
    assert_eq!(out.code, Some(2), "bad input: {}", out.stderr);
    assert!(!state.exists(), "nothing was created: {}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("field `functions.plus_one.config`"))
        .unwrap_or_else(|| panic!("a line naming the config: {}", out.stderr));
    for part in [
        "udf.toml",
        "plugin `plus_one`",
        "invalid configuration: unknown key `step`",
    ] {
        assert!(line.contains(part), "`{part}` in: {line}");
    }
}

#[test]
fn a_column_of_another_type_is_refused_naming_the_c_function() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 10);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &c_plus_one(""),
        "SELECT plus_one(region) AS x FROM t",
        1,
    );
    let state = tmp.path().join("state");
    let out = run(&job, &state);
    assert_eq!(out.code, Some(2), "bad input: {}", out.stderr);
    assert!(
        out.stderr.contains("plus_one"),
        "the message names the function: {}",
        out.stderr
    );
}
