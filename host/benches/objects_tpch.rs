//! TPC-H from object storage beside the same job on local files (issue
//! 30, "what must show": TPC-H SF 1 from objects vs from local files, as a
//! ratio; docs/object-storage.md "Figures").
//!
//! The job is TPC-H Q1 over SF 1 lineitem as Parquet
//! (`build/data/tpch-sf1-parquet/lineitem`, 6 001 215 rows in 4 files, one
//! split per row group), run by `coordhost run` (the binary this bench was
//! built with) in three places:
//!
//! - `local`: the files read from the folder (a read-only `dirs` grant),
//!   the event log, the partitions (`local-shuffle`) and the answer in the
//!   data directory;
//! - `input on objects`: the same files as objects in a bucket of a
//!   SeaweedFS `weed mini` on loopback (started here, as the tests start
//!   one; `make s3-deps`), read through the enumerator's read-only store
//!   grant; everything else local;
//! - `all on objects`: the input as above, and the event log (`[job]
//!   log`), the result partitions (`object-shuffle`) and the answer (`[sink]
//!   path`) in the bucket too: nothing of the job on the local disk but
//!   staging.
//!
//! Each round runs the three in turn (the order rotating), each on a fresh
//! data folder and fresh prefixes; every run's answer (4 groups whose
//! `count_order` sums to the rows Q1's filter keeps) is checked, read back
//! from the bucket where it went there, and a wrong one ends the bench with
//! exit code 1. Printed: the median wall time of each and the median of the
//! per-round ratios to `local`.
//!
//! ```text
//! make bench-objects-tpch   # or: cargo bench -p coordhost --bench objects_tpch -- [--rounds N] [--data DIR]
//! ```

mod common;

#[allow(dead_code)]
#[path = "../../tests/e2e/tests/all/support/s3.rs"]
mod s3;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use common::{Q1, lineitem_dir, median, plugin_path, workspace};

const BUCKET: &str = "coordhost-tpch-bench";

/// Where the job's parts are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Local,
    InputOnObjects,
    AllOnObjects,
}

impl Place {
    const ALL: [Place; 3] = [Place::Local, Place::InputOnObjects, Place::AllOnObjects];

    fn name(self) -> &'static str {
        match self {
            Place::Local => "local",
            Place::InputOnObjects => "input on objects",
            Place::AllOnObjects => "all on objects",
        }
    }
}

/// The job file of run `run` in `place`, written into `dir`; the prefix
/// of its answer objects when the answer goes to the bucket.
fn job_file(dir: &Path, data: &Path, place: Place, run: usize) -> (PathBuf, Option<String>) {
    let name = format!("q1-{run}");
    let path = common::write_lineitem_job(dir, data, &name, Q1, "");
    let mut text = std::fs::read_to_string(&path).expect("the job file");
    let mut out = None;
    if place != Place::Local {
        let local = format!(
            "config = {{ dir = \"{d}\", pattern = \".parquet\", row-groups-per-split = 1 }}\ndirs = [{{ path = \"{d}\", writable = false }}]",
            d = data.display()
        );
        assert!(text.contains(&local), "the enumerator's entry:\n{text}");
        text = text.replace(
            &local,
            &format!(
                "config = {{ dir = \"s3://{BUCKET}/lineitem\", pattern = \".parquet\", row-groups-per-split = 1 }}\nstores = [{{ url = \"s3://{BUCKET}/lineitem\" }}]"
            ),
        );
    }
    if place == Place::AllOnObjects {
        let shuffle = format!(
            "component = \"{}\"\nkind = \"shuffle-master\"\nconfig = {{ root = \"${{data_dir}}/shuffle\" }}\ndirs = [{{ path = \"${{data_dir}}/shuffle\", writable = true }}]",
            plugin_path("local-shuffle").display()
        );
        assert!(
            text.contains(&shuffle),
            "the shuffle master's entry:\n{text}"
        );
        let prefix = format!("s3://{BUCKET}/{name}/shuffle");
        text = text.replace(
            &shuffle,
            &format!(
                "component = \"{}\"\nkind = \"shuffle-master\"\nconfig = {{ prefix = \"{prefix}\" }}\nstores = [{{ url = \"{prefix}\", writable = true }}]",
                plugin_path("object-shuffle").display()
            ),
        );
        let sink = format!("path = \"${{data_dir}}/output/{name}\"");
        assert!(text.contains(&sink), "the sink:\n{text}");
        text = text
            .replace(&sink, &format!("path = \"s3://{BUCKET}/{name}/out\""))
            .replacen(
                "[job]\n",
                &format!("[job]\nlog = \"s3://{BUCKET}/{name}/log\"\n"),
                1,
            );
        out = Some(format!("{name}/out"));
    }
    std::fs::write(&path, text).expect("write the job file");
    (path, out)
}

/// Runs Q1 once in `place`; its wall time in seconds.
fn run(
    server: &s3::Seaweed,
    scratch: &Path,
    data: &Path,
    place: Place,
    n: usize,
) -> Result<f64, String> {
    let dir = scratch.join(format!("run-{n}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (job, out) = job_file(&dir, data, place, n);
    let data_dir = dir.join("data");
    let started = Instant::now();
    let ran = Command::new(env!("CARGO_BIN_EXE_coordhost"))
        .arg("--cache-dir")
        .arg(workspace().join("build/cache"))
        .arg("run")
        .arg(&job)
        .arg("--data-dir")
        .arg(&data_dir)
        .envs(server.env())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot start coordhost: {e}"))?;
    let wall = started.elapsed().as_secs_f64();
    if !ran.status.success() {
        return Err(format!(
            "`coordhost run {}` ({}) ended with {}: {}",
            job.display(),
            place.name(),
            ran.status,
            String::from_utf8_lossy(&ran.stderr)
        ));
    }
    match out {
        None => common::check_q1_answer(&data_dir.join(format!("output/q1-{n}")))?,
        Some(prefix) => {
            let answer = dir.join("answer");
            std::fs::create_dir_all(&answer).map_err(|e| e.to_string())?;
            for key in server.keys(&format!("{prefix}/")) {
                let name = key.rsplit('/').next().unwrap_or_default();
                std::fs::write(answer.join(name), server.get(&key)).map_err(|e| e.to_string())?;
            }
            common::check_q1_answer(&answer)?;
        }
    }
    std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(wall)
}

fn main() -> ExitCode {
    let mut rounds = 3_usize;
    let mut data = lineitem_dir();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bench" => {}
            "--rounds" => match args.next().and_then(|v| v.parse().ok()).filter(|n| *n >= 1) {
                Some(n) => rounds = n,
                None => {
                    eprintln!("objects_tpch bench: --rounds needs a positive number");
                    return ExitCode::from(2);
                }
            },
            "--data" => match args.next() {
                Some(d) => data = PathBuf::from(d),
                None => {
                    eprintln!("objects_tpch bench: --data needs a folder");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!(
                    "objects_tpch bench: unknown argument `{other}` (expected --rounds N, --data DIR)"
                );
                return ExitCode::from(2);
            }
        }
    }
    for name in ["file-enumerator", "local-shuffle", "object-shuffle"] {
        if !plugin_path(name).is_file() {
            eprintln!(
                "objects_tpch bench: {} is missing: run `make plugins`",
                plugin_path(name).display()
            );
            return ExitCode::from(2);
        }
    }
    if !data.is_dir() {
        eprintln!(
            "objects_tpch bench: {} is missing: run `make bench-objects-tpch` (it writes TPC-H SF 1 lineitem as Parquet)",
            data.display()
        );
        return ExitCode::from(2);
    }
    let scratch = tempfile::tempdir().expect("a scratch folder");
    let server = s3::Seaweed::start(&scratch.path().join("seaweed"), BUCKET);
    let mut bytes = 0_u64;
    for entry in std::fs::read_dir(&data).expect("the lineitem folder") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "parquet") {
            let body = std::fs::read(&path).expect("a lineitem file");
            bytes += body.len() as u64;
            let name = path.file_name().expect("a name").to_string_lossy();
            server.put(&format!("lineitem/{name}"), body);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "TPC-H Q1, SF 1 lineitem Parquet ({:.1} MiB), {rounds} rounds after one warm-up; SeaweedFS `weed mini` on loopback; load average at start: {}",
        bytes as f64 / f64::from(1 << 20),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); Place::ALL.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); Place::ALL.len()];
    let mut n = 0;
    for round in 0..=rounds {
        let mut times = [0.0_f64; 3];
        for k in 0..Place::ALL.len() {
            let i = (k + round) % Place::ALL.len();
            n += 1;
            match run(&server, scratch.path(), &data, Place::ALL[i], n) {
                Ok(wall) => times[i] = wall,
                Err(e) => {
                    eprintln!("objects_tpch bench: round {round}: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        println!(
            "  round {round}{}: {}",
            if round == 0 { " (warm-up)" } else { "" },
            Place::ALL
                .iter()
                .zip(times)
                .map(|(p, t)| format!("{} {t:.3} s", p.name()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if round > 0 {
            for i in 0..Place::ALL.len() {
                walls[i].push(times[i]);
                ratios[i].push(times[i] / times[0]);
            }
        }
    }
    println!();
    println!("| Q1 at SF 1            | median wall (s) | × local (median of rounds) |");
    println!("|-----------------------|-----------------|----------------------------|");
    for (i, p) in Place::ALL.iter().enumerate() {
        println!(
            "| {:<21} | {:>15.3} | {:>26.2} |",
            p.name(),
            median(walls[i].clone()),
            median(ratios[i].clone())
        );
    }
    ExitCode::SUCCESS
}
