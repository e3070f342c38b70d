//! Scalar-function figures (issue 27, "what must show"): the cost per row of
//! a trivial function, `x + 1` on a `bigint` column, written in Rust,
//! Python, JavaScript and C as WebAssembly components, against the same
//! expression built into DataFusion, over TPC-H SF 1 `lineitem` (6 001 215
//! rows), through the real `coordhost run`.
//!
//! Two tables are printed.
//!
//! **1. SQL jobs** (the issue's comparison). Each run is the release
//! `coordhost run` of a SQL job over `build/data/tpch-sf1-parquet/lineitem`
//! (Parquet, 4 files, one split per row group), embedded workers, recovery
//! on, a fresh data folder, the compiled-component cache
//! `build/cache/` (warmed by an uncounted first round), timed from spawn to
//! exit. The queries:
//!
//! - `base`:     `SELECT count(*) AS n, sum(l_orderkey) AS s FROM lineitem`
//! - `built-in`: `SELECT count(*) AS n, sum(l_orderkey + 1) AS s FROM lineitem`
//! - `GUEST`:    `SELECT count(*) AS n, sum(plus_one(l_orderkey)) AS s FROM lineitem`
//!
//! `base` and `built-in` run from a job file without functions; each guest
//! runs from a job file declaring `[functions.plus_one]` as that guest,
//! which also runs its own `base` query (`GUEST base`): the function
//! declared but not called, so the component's load (compiled-code cache
//! read, one instance for the signature) is in both and cancels out. Every
//! round runs every job once, interleaved; the figures are medians over the
//! rounds. Per row:
//!
//! - **query ns/row**: the median wall time over the rows;
//! - **expr ns/row**: the cost of the expression alone, the median over
//!   rounds of (the query − its `base` in the same round) / rows: for the
//!   built-in expression against `base`, for a guest against `GUEST base`;
//! - **× built-in (expr)**: expr ns/row over the built-in's; `n/a` (and no
//!   verdict on it) when the built-in's expr ns/row is not above twice the
//!   spread of the plain `base` runs, i.e. within the scan's noise;
//! - **× built-in (query)**: the guest's query time with its load taken out
//!   (`base` + the guest's expression) over the built-in's query time.
//!
//! Every run's answer is checked: the same `n` in all, `s` of `base` plus
//! `n` for the expression and the guests; a wrong answer or a failed run
//! ends the bench with exit code 1, naming the job and the round.
//!
//! **2. `invoke` per batch** (in process, no job): one
//! `ScalarFunction::call` through the real plugin host (encode the
//! arguments as an Arrow IPC stream, copy them into the instance, run the
//! guest, copy the answer out, decode and check it) per batch size on one
//! warm instance, for the `plus_one` guests and the other samples
//! (`tax-function` in Rust, `net_price` in Python, `priority` in
//! JavaScript). Its per-row slope is the boundary's cost without the scan.
//!
//! The guests (all four unless `--guests` says otherwise):
//!
//! | guest    | component (build/plugins/)  | config                   |
//! |----------|-----------------------------|--------------------------|
//! | `rust`   | `faulty-function.wasm`      | `mode = "ok"`            |
//! | `python` | `py-function.wasm`          | `function = "plus_one"`  |
//! | `js`     | `js-function.wasm`          | `function = "plus_one"`  |
//! | `c`      | `c-function.wasm`           | none                     |
//!
//! A named guest whose component is missing ends the bench before any run,
//! with exit code 2 and the path. `make bench-functions` builds the
//! plugins, the release binaries and the data, then runs this; by hand:
//!
//! ```text
//! cargo bench -p coordhost --bench functions -- [--guests rust,python,js,c]
//!     [--rounds N] [--data DIR] [--only sql|invoke]
//! ```
//!
//! `--rounds`: counted rounds of the SQL jobs (default 5, after the
//! uncounted one); `--data DIR`: another folder of lineitem Parquet files
//! (all 16 columns; e.g. a smaller scale for a quick check). docs/write-a-plugin.md ("Figures") gives one run's
//! figures.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, Decimal128Array, Int64Array, StringArray};
use common::{lineitem_dir, median, plugin_path, workspace};
use coordhost::plugin::{HostOptions, Limits, PluginHost, PluginKind, PluginSpec};

/// A guest: the language, its `plus_one` component and its config.
#[derive(Debug, Clone, Copy)]
struct Guest {
    /// What `--guests` calls it.
    key: &'static str,
    /// The language, as the tables print it.
    language: &'static str,
    /// The component's file name under build/plugins, without `.wasm`.
    component: &'static str,
    /// The `configure` pairs that choose `plus_one`.
    config: &'static [(&'static str, &'static str)],
}

const GUESTS: [Guest; 4] = [
    Guest {
        key: "rust",
        language: "Rust",
        component: "faulty-function",
        config: &[("mode", "ok")],
    },
    Guest {
        key: "python",
        language: "Python",
        component: "py-function",
        config: &[("function", "plus_one")],
    },
    Guest {
        key: "js",
        language: "JS",
        component: "js-function",
        config: &[("function", "plus_one")],
    },
    Guest {
        key: "c",
        language: "C",
        component: "c-function",
        config: &[],
    },
];

/// What the command line asked for.
struct Args {
    guests: Vec<Guest>,
    rounds: usize,
    /// The folder of lineitem's Parquet files (`--data`).
    data: PathBuf,
    sql: bool,
    invoke: bool,
}

/// A refusal of the command line or of a missing input: exit code 2.
fn bad_input(message: &str) -> ExitCode {
    eprintln!("functions bench: {message}");
    ExitCode::from(2)
}

/// A failed run or a wrong answer: exit code 1.
fn failed(message: &str) -> ExitCode {
    eprintln!("functions bench: {message}");
    ExitCode::from(1)
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        guests: GUESTS.to_vec(),
        rounds: 5,
        data: lineitem_dir(),
        sql: true,
        invoke: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            // cargo bench passes `--bench` to every bench binary.
            "--bench" => {}
            "--guests" => {
                let list = it
                    .next()
                    .ok_or("--guests needs a value, e.g. rust,python,js,c")?;
                let mut chosen = Vec::new();
                for key in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
                    let g = GUESTS.iter().find(|g| g.key == key).ok_or_else(|| {
                        format!("--guests: unknown guest `{key}` (known: rust, python, js, c)")
                    })?;
                    if !chosen.iter().any(|c: &Guest| c.key == key) {
                        chosen.push(*g);
                    }
                }
                if chosen.is_empty() {
                    return Err("--guests: no guest given".into());
                }
                args.guests = chosen;
            }
            "--rounds" => {
                let v = it.next().ok_or("--rounds needs a value")?;
                args.rounds = v
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| format!("--rounds: `{v}` is not a positive number"))?;
            }
            "--data" => {
                args.data = PathBuf::from(it.next().ok_or("--data needs a folder")?);
            }
            "--only" => match it.next().as_deref() {
                Some("sql") => args.invoke = false,
                Some("invoke") => args.sql = false,
                other => {
                    return Err(format!(
                        "--only: expected `sql` or `invoke`, got {}",
                        other.map_or("nothing".to_string(), |o| format!("`{o}`"))
                    ));
                }
            },
            other => {
                return Err(format!(
                    "unknown argument `{other}` (expected --guests LIST, --rounds N, --data DIR, --only sql|invoke)"
                ));
            }
        }
    }
    Ok(args)
}

/// The components the chosen guests need (and the job's own plugins), or
/// the first that is missing.
fn check_components(args: &Args) -> Result<(), String> {
    let mut needed: Vec<(&str, String)> = args
        .guests
        .iter()
        .map(|g| (g.component, format!("guest `{}`", g.key)))
        .collect();
    if args.sql {
        for p in ["file-enumerator", "local-shuffle"] {
            needed.push((p, "the SQL jobs".into()));
        }
    }
    if args.invoke {
        for p in ["tax-function", "py-function", "js-function"] {
            needed.push((p, "the invoke table".into()));
        }
    }
    for (name, who) in needed {
        let path = plugin_path(name);
        if !path.is_file() {
            let hint = if name == "c-function" {
                "build the C sample (plugins/c-function) with `make plugins`, or leave it out with --guests rust,python,js"
            } else {
                "run `make plugins`"
            };
            return Err(format!(
                "{} is missing (needed by {who}): {hint}",
                path.display()
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Part 1: SQL jobs through `coordhost run`.
// ---------------------------------------------------------------------------

const BASE_SQL: &str = "SELECT count(*) AS n, sum(l_orderkey) AS s FROM lineitem";
const BUILTIN_SQL: &str = "SELECT count(*) AS n, sum(l_orderkey + 1) AS s FROM lineitem";
const GUEST_SQL: &str = "SELECT count(*) AS n, sum(plus_one(l_orderkey)) AS s FROM lineitem";

/// One job of a round: its label, its job file, and whether its answer is
/// `base + n` (the expression) or `base`.
struct Job {
    label: String,
    file: PathBuf,
    adds_one: bool,
    /// Index of the job whose round time is this one's baseline (itself for a baseline).
    base: usize,
    /// The guest, for the guest's `plus_one` job.
    guest: Option<Guest>,
}

/// Writes the job file `name.toml` under `dir`: `sql` over lineitem, with
/// `plus_one` declared as `guest` when given.
fn write_job(dir: &Path, data: &Path, name: &str, sql: &str, guest: Option<&Guest>) -> PathBuf {
    let functions = guest.map_or_else(String::new, |g| {
        let config: Vec<String> = g
            .config
            .iter()
            .map(|(k, v)| format!("{k} = \"{v}\""))
            .collect();
        format!(
            "[functions.plus_one]\ncomponent = \"{}\"\nconfig = {{ {} }}\nlimits = {{ call-timeout-ms = 60000 }}\n",
            plugin_path(g.component).display(),
            config.join(", ")
        )
    });
    common::write_lineitem_job(dir, data, name, sql, &functions)
}

/// `(n, s)` of a finished run's CSV output under `out`.
fn answer(out: &Path) -> Result<(i64, i64), String> {
    if !out.join("_SUCCESS").is_file() {
        return Err(format!("{} has no _SUCCESS", out.display()));
    }
    let mut parts: Vec<PathBuf> = std::fs::read_dir(out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
        })
        .collect();
    parts.sort();
    let mut rows = Vec::new();
    for p in parts {
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        rows.extend(
            text.lines()
                .filter(|l| !l.is_empty() && *l != "n,s")
                .map(str::to_string),
        );
    }
    let [row] = rows.as_slice() else {
        return Err(format!("expected one row `n,s`, got {rows:?}"));
    };
    let (n, s) = row
        .split_once(',')
        .ok_or_else(|| format!("not `n,s`: {row}"))?;
    let parse = |v: &str| {
        v.parse::<i64>()
            .map_err(|e| format!("`{v}` in `{row}`: {e}"))
    };
    Ok((parse(n)?, parse(s)?))
}

/// Runs `job` once on a fresh data folder; its wall time and answer.
fn run_job(
    bin: &Path,
    job: &Job,
    scratch: &Path,
    cache: &Path,
) -> Result<(f64, (i64, i64)), String> {
    let data = scratch.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    }
    let start = Instant::now();
    let out = Command::new(bin)
        .arg("--cache-dir")
        .arg(cache)
        .arg("run")
        .arg(&job.file)
        .arg("--data-dir")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let wall = start.elapsed().as_secs_f64();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!(
            "`coordhost run {}` ended with {}: {}",
            job.file.display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    let name = job
        .file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let got = answer(&data.join("output").join(name))?;
    std::fs::remove_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    Ok((wall, got))
}

fn sql_table(args: &Args) -> Result<(), String> {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_coordhost"));
    let data = &args.data;
    if !data.is_dir() {
        return Err(format!(
            "{} is missing: `make bench-functions` writes it (coordhost-datagen tpch --scale 1 --tables lineitem --format parquet --out build/data/tpch-sf1-parquet)",
            data.display()
        ));
    }
    let root = workspace().join("build/bench-data/functions");
    let cache = workspace().join("build/cache");
    let scratch = root.join("run");
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;

    let mut jobs = vec![
        Job {
            label: "base".into(),
            file: write_job(&root, data, "fn-base", BASE_SQL, None),
            adds_one: false,
            base: 0,
            guest: None,
        },
        Job {
            label: "built-in x + 1".into(),
            file: write_job(&root, data, "fn-builtin", BUILTIN_SQL, None),
            adds_one: true,
            base: 0,
            guest: None,
        },
    ];
    for g in &args.guests {
        let base = jobs.len();
        jobs.push(Job {
            label: format!("{} base", g.language),
            file: write_job(
                &root,
                data,
                &format!("fn-{}-base", g.key),
                BASE_SQL,
                Some(g),
            ),
            adds_one: false,
            base,
            guest: None,
        });
        jobs.push(Job {
            label: format!("{} plus_one", g.language),
            file: write_job(&root, data, &format!("fn-{}", g.key), GUEST_SQL, Some(g)),
            adds_one: true,
            base,
            guest: Some(*g),
        });
    }

    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); jobs.len()];
    let mut truth: Option<(i64, i64)> = None;
    for round in 0..=args.rounds {
        for (i, job) in jobs.iter().enumerate() {
            let (wall, (n, s)) = run_job(&bin, job, &scratch, &cache)
                .map_err(|e| format!("{} (round {round}): {e}", job.label))?;
            let base = if job.adds_one { s.wrapping_sub(n) } else { s };
            match truth {
                None if !job.adds_one => truth = Some((n, s)),
                None => {}
                Some(t) if t != (n, base) => {
                    return Err(format!(
                        "{} (round {round}) answered n = {n}, s = {s}; expected n = {}, s = {}",
                        job.label,
                        t.0,
                        if job.adds_one { t.1 + t.0 } else { t.1 }
                    ));
                }
                Some(_) => {}
            }
            eprintln!(
                "round {round}{}: {:<16} {wall:>7.3} s",
                if round == 0 { " (warm-up)" } else { "" },
                job.label
            );
            if round > 0 {
                walls[i].push(wall);
            }
        }
    }
    let (rows, _) = truth.ok_or("no baseline answered")?;
    let rows_f = rows as f64;
    let ns = |secs: f64| secs * 1e9 / rows_f;
    // The expression's cost per row in each round: the job minus its baseline.
    let expr = |i: usize| -> f64 {
        let b = jobs[i].base;
        median(
            walls[i]
                .iter()
                .zip(&walls[b])
                .map(|(w, base)| ns(w - base))
                .collect(),
        )
    };
    let builtin_expr = expr(1);
    let builtin_wall = median(walls[1].clone());
    let base_wall = median(walls[0].clone());
    // The noise of the scan: half the spread of the plain baseline's rounds.
    let spread = {
        let mut w = walls[0].clone();
        w.sort_by(f64::total_cmp);
        ns((w[w.len() - 1] - w[0]) / 2.0)
    };

    println!(
        "\nSQL jobs over lineitem ({rows} rows, Parquet, {}), `coordhost run`, median of {} rounds",
        data.display(),
        args.rounds
    );
    println!(
        "{:<16} {:>9} {:>9} {:>9} {:>10} {:>12} {:>12}",
        "query", "median s", "min s", "max s", "query ns/row", "expr ns/row", "× built-in"
    );
    // The expression ratio means something only when the built-in's own
    // cost stands out of the scan's noise (it can even come out negative).
    let builtin_measurable = builtin_expr > 2.0 * spread && builtin_expr > 0.0;
    let mut rust_ratio = None;
    for (i, job) in jobs.iter().enumerate() {
        let mut w = walls[i].clone();
        w.sort_by(f64::total_cmp);
        let med = median(w.clone());
        let e = if job.adds_one {
            format!("{:>12.2}", expr(i))
        } else {
            format!("{:>12}", "")
        };
        let ratio = match job.guest {
            Some(g) => {
                // Expression ratio, and whole-query ratio with the load taken out.
                let er = builtin_measurable.then(|| expr(i) / builtin_expr);
                let qr = (base_wall + expr(i) * rows_f / 1e9) / builtin_wall;
                if g.key == "rust" {
                    rust_ratio = Some((er, qr));
                }
                let er = er.map_or_else(|| "n/a".to_string(), |er| format!("{er:.1}"));
                format!("{er:>7} expr, {qr:.2} query")
            }
            None => String::new(),
        };
        println!(
            "{:<16} {:>9.3} {:>9.3} {:>9.3} {:>10.1} {e} {ratio}",
            job.label,
            med,
            w[0],
            w[w.len() - 1],
            ns(med),
        );
    }
    println!(
        "expr ns/row: the median over rounds of (query − its base) / rows; the plain base's rounds spread ±{spread:.1} ns/row"
    );
    if !builtin_measurable {
        println!(
            "the built-in expression's {builtin_expr:.2} ns/row is not above twice that spread: no expr ratio (n/a); more --rounds or a quieter machine"
        );
    }
    if let Some((er, qr)) = rust_ratio {
        let verdict = |r: f64| if r <= 3.0 { "met" } else { "missed" };
        println!(
            "Rust guest, target ≤ 3× the built-in: expression alone {}, whole query {qr:.2}× ({})",
            er.map_or_else(
                || "not measurable here".to_string(),
                |er| format!("{er:.1}× ({})", verdict(er))
            ),
            verdict(qr),
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Part 2: `invoke` per batch, in process.
// ---------------------------------------------------------------------------

fn fmt(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    }
}

const REGIONS: [&str; 5] = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"];
const PRIORITIES: [&str; 5] = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"];

/// The argument columns of function `which` for `rows` rows.
fn arguments(which: &str, rows: usize) -> Vec<ArrayRef> {
    let money = |f: fn(usize) -> i128| -> ArrayRef {
        Arc::new(
            (0..rows)
                .map(|i| Some(f(i)))
                .collect::<Decimal128Array>()
                .with_precision_and_scale(15, 2)
                .expect("decimal(15,2)"),
        )
    };
    match which {
        "plus_one" => vec![Arc::new(Int64Array::from_iter_values(0..rows as i64))],
        "tax" => vec![
            money(|i| 100_000 + i as i128 * 37),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| REGIONS[i % 5]),
            )),
        ],
        "net_price" => vec![
            money(|i| 100_000 + i as i128 * 37),
            money(|i| (i % 11) as i128),
        ],
        "priority" => vec![Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| PRIORITIES[i % 5]),
        ))],
        other => panic!("no arguments for {other}"),
    }
}

/// One row of the invoke table: the function, its language, its component
/// and its config.
type InvokeRow = (
    &'static str,
    &'static str,
    &'static str,
    Vec<(String, String)>,
);

fn invoke_table(args: &Args) -> Result<(), String> {
    let cache = workspace().join("build/cache");
    std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    let host = PluginHost::new(HostOptions {
        cache_dir: Some(cache),
    })
    .map_err(|e| e.to_string())?;
    let sizes = [1usize, 1024, 8192];
    let mut rows: Vec<InvokeRow> = args
        .guests
        .iter()
        .map(|g| {
            let config = g
                .config
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            ("plus_one", g.language, g.component, config)
        })
        .collect();
    rows.extend([
        ("tax", "Rust", "tax-function", Vec::new()),
        ("net_price", "Python", "py-function", Vec::new()),
        ("priority", "JS", "js-function", Vec::new()),
    ]);
    println!("\ninvoke per batch (ScalarFunction::call, in process, one warm instance)");
    print!("{:<10} {:<8}", "function", "language");
    for n in sizes {
        print!(" {:>12}", format!("{n} rows"));
    }
    println!(" {:>12}", "ns/row");
    for (which, language, component, config) in rows {
        let spec = PluginSpec {
            name: format!("{which}-{component}"),
            path: plugin_path(component),
            kind: PluginKind::ScalarFunction,
            config,
            dirs: Vec::new(),
            stores: Vec::new(),
            limits: Limits {
                call_timeout: Duration::from_secs(300),
                ..Limits::default()
            },
        };
        let f = host
            .load(&spec)
            .and_then(|p| p.scalar_function())
            .map_err(|e| format!("{component}: {e}"))?;
        let mut cells = Vec::new();
        for n in sizes {
            let a = arguments(which, n);
            // The first call makes the instance; it is not counted.
            f.call(&a, n).map_err(|e| format!("{component}: {e}"))?;
            let runs = if n > 1000 { 20 } else { 200 };
            let mut samples = Vec::with_capacity(runs);
            for _ in 0..runs {
                let t = Instant::now();
                let out = f.call(&a, n).map_err(|e| format!("{component}: {e}"))?;
                samples.push(t.elapsed());
                if out.len() != n {
                    return Err(format!("{component}: {} rows for {n}", out.len()));
                }
            }
            samples.sort();
            cells.push(samples[samples.len() / 2]);
        }
        print!("{which:<10} {language:<8}");
        for c in &cells {
            print!(" {:>12}", fmt(*c));
        }
        let slope = (cells[2].saturating_sub(cells[0])).as_secs_f64() / 8191.0;
        println!(" {:>12.1}", slope * 1e9);
    }
    println!(
        "median of 200 calls (1 and 1024 rows) or 20 calls (8192 rows); ns/row: the slope from 1 to 8192 rows"
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => return bad_input(&e),
    };
    if let Err(e) = check_components(&args) {
        return bad_input(&e);
    }
    if args.sql
        && let Err(e) = sql_table(&args)
    {
        return if e.contains("is missing") {
            bad_input(&e)
        } else {
            failed(&e)
        };
    }
    if args.invoke
        && let Err(e) = invoke_table(&args)
    {
        return failed(&e);
    }
    ExitCode::SUCCESS
}
