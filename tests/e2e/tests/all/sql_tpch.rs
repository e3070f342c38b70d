//! The 22 TPC-H queries as SQL jobs (`examples/tpch/qN.toml`) through the
//! real `coordhost run`, over the eight tables at scale factor 0.1 written
//! by coordhost-datagen, once as CSV and once as Parquet; every answer is
//! compared with the answer DuckDB computed
//! (`examples/tpch/answers/sf0.1/qN.csv`, `scripts/tpch-answers.py`) under
//! the rule those files were printed by: integers as digits, every other
//! number rounded to 2 decimals (ties away from zero), text as stored.
//!
//! A crash of the coordinator at seeded points of Q3, Q5, Q9 and Q18 (joins,
//! several stages), embedded and with worker processes: the rerun's answer
//! is the same and the stages that had finished are skipped.
//! `COORDHOST_TPCH_KILLS` sets the number of kills (default 20).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::support::job::options;
use crate::support::knobs::{CrashPoint, Knobs, run_output_with};
use crate::support::workers::{Workers, external_args, free_port};
use crate::support::{plugin_path, published_lines, workspace};
use coordhost::job::{JobStatus, Summary};
use coordhost_datagen::{Format, Table};

const SCALE: f64 = 0.1;

/// The tables of the whole test process, written once:
/// `<dir>/csv/<table>/…` and `<dir>/parquet/<table>/…`.
fn data() -> &'static Path {
    static DATA: OnceLock<tempfile::TempDir> = OnceLock::new();
    DATA.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("tempdir");
        for (format, sub) in [(Format::Csv, "csv"), (Format::Parquet, "parquet")] {
            coordhost_datagen::write_tpch(
                &tmp.path().join(sub),
                &Table::ALL,
                format,
                SCALE,
                4,
                coordhost_datagen::DEFAULT_ROW_GROUP_ROWS,
            )
            .expect("TPC-H tables");
        }
        tmp
    })
    .path()
}

/// `examples/tpch/q<n>.toml` pointed at this process's tables (`parquet`
/// or CSV), written into `dir`; `parallelism` replaces the example's.
fn job(n: u32, parquet: bool, dir: &Path, parallelism: u32) -> PathBuf {
    let ws = workspace();
    let text = std::fs::read_to_string(ws.join(format!("examples/tpch/q{n}.toml")))
        .expect("example exists");
    let data = data().join(if parquet { "parquet" } else { "csv" });
    let plugins = plugin_path("file-enumerator")
        .parent()
        .expect("plugin dir")
        .display()
        .to_string();
    let mut text = text
        .replace(
            "${job_dir}/../../build/data/tpch-sf0.1",
            &data.display().to_string(),
        )
        .replace("../../build/data/tpch-sf0.1", &data.display().to_string())
        .replace("../../build/plugins", &plugins)
        .replace(
            &format!("sql-file = \"queries/q{n}.sql\""),
            &format!(
                "sql-file = \"{}\"",
                ws.join(format!("examples/tpch/queries/q{n}.sql")).display()
            ),
        )
        .replace("parallelism = 4", &format!("parallelism = {parallelism}"));
    if parquet {
        text = text
            .replace("pattern = \".csv\"", "pattern = \".parquet\"")
            .replace(
                "format = \"csv\"\nheader = true\nschema",
                "format = \"parquet\"\nschema",
            );
    }
    assert!(
        !text.contains("../build"),
        "every build path was replaced:\n{text}"
    );
    std::fs::create_dir_all(dir).expect("job dir");
    let path = dir.join(format!("q{n}.toml"));
    std::fs::write(&path, text).expect("job file");
    path
}

/// One CSV line's fields (RFC 4180 quoting; no field spans lines in these
/// answers).
fn fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// `value` as the answers print it: a number with a fraction rounded to 2
/// decimals, ties away from zero (exactly, on its digits); anything else as
/// it is.
fn as_answer(value: &str) -> String {
    let (neg, digits) = value
        .strip_prefix('-')
        .map_or((false, value), |rest| (true, rest));
    let Some((int, frac)) = digits.split_once('.') else {
        return value.to_string();
    };
    if int.is_empty()
        || frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return value.to_string();
    }
    let mut cents: u128 = format!("{int}{:0<2}", &frac[..frac.len().min(2)])
        .parse()
        .expect("digits");
    if frac.len() > 2 && frac.as_bytes()[2] >= b'5' {
        cents += 1;
    }
    let text = format!("{}.{:02}", cents / 100, cents % 100);
    if neg && cents != 0 {
        format!("-{text}")
    } else {
        text
    }
}

/// The published answer of a run in the answers' form.
pub(crate) fn answer_rows(out: &Path) -> Vec<Vec<String>> {
    let lines = published_lines(out);
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let f = fields(line);
        // One header for the whole answer (each part file has its own).
        if i > 0 && rows.first() == Some(&f) {
            continue;
        }
        rows.push(if i == 0 {
            f
        } else {
            f.iter().map(|v| as_answer(v)).collect()
        });
    }
    rows
}

pub(crate) fn expected_rows(n: u32) -> Vec<Vec<String>> {
    let path = workspace().join(format!("examples/tpch/answers/sf0.1/q{n}.csv"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(fields)
        .collect()
}

fn run_finished(job: &Path, state: &Path, workers: usize, knobs: &Knobs) -> Summary {
    run_finished_with(job, state, workers, knobs, &[])
}

fn run_finished_with(
    job: &Path,
    state: &Path,
    workers: usize,
    knobs: &Knobs,
    extra: &[String],
) -> Summary {
    let out = run_output_with(&options(job, state, workers), knobs, extra);
    let summary = out
        .summary
        .unwrap_or_else(|| panic!("no summary, exit {:?}: {}", out.code, out.stderr));
    assert_eq!(
        summary.status,
        JobStatus::Finished,
        "exit {:?}: {:?} {}",
        out.code,
        summary.error,
        out.stderr
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    summary
}

/// Runs query `n` over CSV and over Parquet and compares both answers.
fn check(n: u32) {
    let tmp = tempfile::tempdir().expect("tempdir");
    for parquet in [false, true] {
        let name = if parquet { "parquet" } else { "csv" };
        let job = job(n, parquet, &tmp.path().join(name), 3);
        let state = tmp.path().join(format!("{name}-state"));
        run_finished(&job, &state, 2, &Knobs::default());
        let got = answer_rows(&state.join(format!("output/tpch-q{n}")));
        let want = expected_rows(n);
        assert_eq!(got.first(), want.first(), "Q{n} ({name}): the columns");
        assert_eq!(got.len(), want.len(), "Q{n} ({name}): the number of rows");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "Q{n} ({name}): row {i}");
        }
    }
}

macro_rules! queries {
    ($($name:ident = $n:expr),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check($n);
            }
        )*
    };
}

queries!(
    q01 = 1,
    q02 = 2,
    q03 = 3,
    q04 = 4,
    q05 = 5,
    q06 = 6,
    q07 = 7,
    q08 = 8,
    q09 = 9,
    q10 = 10,
    q11 = 11,
    q12 = 12,
    q13 = 13,
    q14 = 14,
    q15 = 15,
    q16 = 16,
    q17 = 17,
    q18 = 18,
    q19 = 19,
    q20 = 20,
    q21 = 21,
    q22 = 22,
);

#[test]
fn the_answer_rule_rounds_half_away_from_zero_on_the_digits() {
    assert_eq!(as_answer("4573560.0150"), "4573560.02");
    assert_eq!(as_answer("4054677.1049"), "4054677.10");
    assert_eq!(as_answer("-0.004"), "0.00");
    assert_eq!(as_answer("-2.345"), "-2.35");
    assert_eq!(as_answer("17"), "17");
    assert_eq!(as_answer("0.5"), "0.50");
    assert_eq!(as_answer("1995-03-15"), "1995-03-15");
    assert_eq!(
        fields("a,\"b, c\",\"d \"\"e\"\"\""),
        ["a", "b, c", "d \"e\""]
    );
}

/// A small deterministic generator (xorshift64*), so a failing kill replays.
struct Seeded(u64);

impl Seeded {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// SIGKILL-equivalent crashes (the coordinator stops dead after a durable
/// `ExecutionFinished` of a seeded stage and count) of Q3, Q5, Q9 and Q18,
/// embedded and on 3 worker processes; each rerun recovers, publishes the
/// same answer as DuckDB's, and skips every stage that had finished.
#[test]
fn crashes_at_seeded_points_of_join_queries_cost_only_unfinished_stages() {
    let kills: u64 = std::env::var("COORDHOST_TPCH_KILLS")
        .ok()
        .map_or(20, |v| v.parse().expect("COORDHOST_TPCH_KILLS is a number"));
    let seed: u64 = std::env::var("COORDHOST_TPCH_SEED")
        .ok()
        .map_or(0x05ee_d383, |v| {
            v.parse().expect("COORDHOST_TPCH_SEED is a number")
        });
    let mut rng = Seeded(seed | 1);
    let tmp = tempfile::tempdir().expect("tempdir");
    let queries = [3u32, 5, 9, 18];
    // The stages of each query and their parallelism, from a run to the end.
    let mut shapes = Vec::new();
    for &n in &queries {
        let job = job(n, false, &tmp.path().join(format!("shape{n}")), 3);
        let s = run_finished(
            &job,
            &tmp.path().join(format!("shape{n}-state")),
            2,
            &Knobs::default(),
        );
        shapes.push(
            s.vertices
                .iter()
                .map(|v| (v.id.clone(), v.parallelism))
                .collect::<Vec<_>>(),
        );
    }
    for k in 0..kills {
        let qi = rng.below(queries.len() as u64) as usize;
        let n = queries[qi];
        let shape = &shapes[qi];
        // Any stage but the last (whose finish publishes), any of its tasks.
        let stage = rng.below(shape.len() as u64 - 1) as usize;
        debug_assert!(stage < shape.len() - 1);
        let (vertex, parallelism) = &shape[stage];
        let count = 1 + rng.below(u64::from(*parallelism)) as u32;
        // Every third kill on 3 worker processes (which outlive the
        // coordinator and hold the partitions), the others embedded.
        let processes = k % 3 == 2;
        let workers = if k % 2 == 0 { 2 } else { 3 };
        let place = if processes {
            "3 worker processes".to_string()
        } else {
            format!("{workers} embedded workers")
        };
        let what = format!("kill {k}: Q{n}, after {count} of {vertex}, {place} (seed {seed})");
        let dir = tmp.path().join(format!("kill{k}"));
        let job = job(n, false, &dir, 3);
        let state = dir.join("state");
        let knobs = Knobs::crash(CrashPoint::AfterFinished {
            vertex: vertex.clone(),
            count,
        });
        let addr = free_port();
        let cluster = processes.then(|| Workers::start(3, &addr, &dir.join("workers"), 2));
        let extra = if processes {
            external_args(&addr, 3, 5000)
        } else {
            Vec::new()
        };
        let out = run_output_with(&options(&job, &state, workers), &knobs, &extra);
        assert_ne!(
            out.code,
            Some(0),
            "{what}: the crash stops the run: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("simulated coordinator crash"),
            "{what}: {}",
            out.stderr
        );
        // What had finished, as the log says (subtasks per vertex).
        let log = coordhost::events::replay(&coordhost::events::FileStorage::open_read_only(
            &state.join(format!("tpch-q{n}/log")),
        ))
        .expect("the log");
        let mut finished: std::collections::BTreeMap<String, std::collections::BTreeSet<u32>> =
            std::collections::BTreeMap::new();
        for e in log.iter_events() {
            if let coordhost::events::JobEvent::ExecutionFinished(f) = e {
                finished
                    .entry(f.attempt.job_vertex.clone())
                    .or_default()
                    .insert(f.attempt.subtask);
            }
        }
        assert!(
            finished.get(vertex).map_or(0, |s| s.len()) >= count as usize,
            "{what}: the log holds the finishes before the crash"
        );
        let rerun = run_finished_with(&job, &state, workers, &Knobs::default(), &extra);
        drop(cluster);
        assert!(rerun.recovered, "{what}: the rerun recovers");
        // A crash costs only what was running: every task that had
        // finished is skipped.
        for v in &rerun.vertices {
            let done = finished.get(&v.id).map_or(0, |s| s.len() as u64);
            assert_eq!(
                v.skipped, done,
                "{what}: the finished tasks of `{}` are skipped: {rerun:?}",
                v.id
            );
        }
        assert_eq!(
            answer_rows(&state.join(format!("output/tpch-q{n}"))),
            expected_rows(n),
            "{what}: the answer"
        );
    }
}

/// `examples/tpch/q<n>.toml` with `auto` stages after hash exchanges:
/// at most 8 tasks, 3 MB of produced bytes per task.
fn auto_job(n: u32, dir: &Path) -> PathBuf {
    let path = job(n, false, dir, 3);
    let text = std::fs::read_to_string(&path).expect("job file");
    assert!(text.contains("parallelism = 3\n"), "{text}");
    let text = text.replacen(
        "parallelism = 3\n",
        "parallelism = 3\ndownstream-parallelism = \"auto\"\nmax-parallelism = 8\nbytes-per-task = 3000000\n",
        1,
    );
    std::fs::write(&path, text).expect("job file");
    path
}

/// The log of the job `name` in data directory `state`.
fn log_events(state: &Path, name: &str) -> Vec<coordhost::events::JobEvent> {
    coordhost::events::replay(&coordhost::events::FileStorage::open_read_only(
        &state.join(format!("{name}/log")),
    ))
    .expect("the log")
    .iter_events()
    .cloned()
    .collect()
}

/// The stages `StagesPlanned` records as `auto`, and every
/// `JobVertexInitialized` of the log as (vertex, parallelism, decided).
fn auto_records(events: &[coordhost::events::JobEvent]) -> (Vec<String>, Vec<(String, u32, bool)>) {
    use coordhost::events::JobEvent;
    let mut auto = Vec::new();
    let mut initialized = Vec::new();
    for e in events {
        match e {
            JobEvent::StagesPlanned(p) => auto.extend(
                p.stages
                    .iter()
                    .filter(|s| s.auto.is_some())
                    .map(|s| s.job_vertex.clone()),
            ),
            JobEvent::JobVertexInitialized(i) => {
                initialized.push((i.job_vertex.clone(), i.parallelism, i.decided_at_runtime));
            }
            _ => {}
        }
    }
    (auto, initialized)
}

#[test]
fn q3_with_auto_stages_decides_their_parallelism_from_produced_bytes_and_a_rerun_keeps_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let job = auto_job(3, &tmp.path().join("job"));
    let state = tmp.path().join("ref");
    let reference = run_finished(&job, &state, 2, &Knobs::default());
    assert_eq!(
        answer_rows(&state.join("output/tpch-q3")),
        expected_rows(3),
        "Q3 with auto stages: DuckDB's answer"
    );
    let (auto, initialized) = auto_records(&log_events(&state, "tpch-q3"));
    // The stages after hash exchanges (the two joins) are `auto`.
    assert!(
        auto.len() >= 2,
        "StagesPlanned says auto for the join stages: {auto:?}"
    );
    let decided: Vec<(String, u32)> = auto
        .iter()
        .map(|id| {
            let v = reference
                .vertices
                .iter()
                .find(|v| &v.id == id)
                .expect("the stage is in the summary");
            let (_, p, at_runtime) = initialized
                .iter()
                .find(|(i, _, _)| i == id)
                .expect("the stage was initialized");
            assert!(*at_runtime, "`{id}` was decided at run time");
            assert_eq!(
                v.parallelism, *p,
                "the summary shows the decision of `{id}`"
            );
            assert!((1..=8).contains(p), "`{id}`: {p} within max-parallelism");
            (id.clone(), *p)
        })
        .collect();
    // Decided from bytes, not the fixed 3: 3 MB per task over a couple of
    // MB and over about 13 MB of partitions.
    assert!(
        decided.iter().any(|(_, p)| *p != 3),
        "an auto stage decided other than the fixed parallelism: {decided:?}"
    );
    assert!(
        decided
            .iter()
            .map(|(_, p)| p)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1,
        "the two join stages decide differently: {decided:?}"
    );

    // A crash after the first task of the last auto stage finished: both
    // auto stages were initialized; the rerun replays the decisions.
    let (last, _) = decided.last().expect("auto stages").clone();
    let state = tmp.path().join("crash");
    let out = run_output_with(
        &options(&job, &state, 2),
        &Knobs::crash(CrashPoint::AfterFinished {
            vertex: last.clone(),
            count: 1,
        }),
        &[],
    );
    assert_ne!(out.code, Some(0), "the crash stops the run: {}", out.stderr);
    assert!(
        out.stderr.contains("simulated coordinator crash"),
        "{}",
        out.stderr
    );
    let before = auto_records(&log_events(&state, "tpch-q3")).1;
    let rerun = run_finished(&job, &state, 2, &Knobs::default());
    assert!(rerun.recovered, "the rerun recovers");
    assert!(
        rerun.tasks_skipped > 0,
        "finished tasks are skipped: {rerun:?}"
    );
    assert_eq!(
        answer_rows(&state.join("output/tpch-q3")),
        expected_rows(3),
        "the rerun's answer"
    );
    let after = auto_records(&log_events(&state, "tpch-q3")).1;
    for (id, p) in &decided {
        let recorded: Vec<u32> = before
            .iter()
            .filter(|(i, _, _)| i == id)
            .map(|(_, p, _)| *p)
            .collect();
        assert_eq!(
            recorded,
            [*p],
            "`{id}` was decided once before the crash, as in a whole run"
        );
        let all: Vec<u32> = after
            .iter()
            .filter(|(i, _, _)| i == id)
            .map(|(_, p, _)| *p)
            .collect();
        assert_eq!(
            all,
            [*p],
            "the rerun decides `{id}` no more: it replays the record"
        );
        let v = rerun
            .vertices
            .iter()
            .find(|v| &v.id == id)
            .expect("in the summary");
        assert_eq!(
            v.parallelism, *p,
            "the rerun runs `{id}` with the recorded decision"
        );
    }
}
