//! The cost of watching a job (issue 31, "what must show"): the same
//! job run by the release `coordhost run` without `--ui`, and with
//! `--ui 127.0.0.1:0` and a scraper that asks for `/metrics` and
//! `/api/job` in turn every 100 ms (as a Prometheus server with a short
//! scrape interval and an open page would), in interleaved rounds.
//! Target: at most 2 % more wall time with the UI.
//!
//! The job is TPC-H Q1 over `build/data/tpch-sf1-parquet/lineitem`
//! (Parquet, SF 1, 6 001 215 rows, one split per row group), recovery
//! on, a fresh data folder per run; each run's answer (4 groups, their
//! `count_order` summing to the rows with `l_shipdate <= 1998-09-02`) is
//! checked, and a run that fails or answers otherwise ends the bench
//! with exit code 1. Each round runs both, the order alternating; the
//! figures are medians over the rounds, and the overhead is the median
//! of the per-round ratios (so a machine that slows down for a while
//! hurts both sides of a round alike).
//!
//! ```text
//! make bench-ui        # or: cargo bench -p coordhost --bench ui -- [--rounds N] [--data DIR]
//! ```
//!
//! `--rounds`: counted rounds (default 7, after one uncounted warm-up
//! round); `--data DIR`: another folder of lineitem Parquet files.
//! docs/ui.md ("Cost") gives one run's figures.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Q1, lineitem_dir, median, plugin_path};

/// How often the scraper asks (the issue's 100 ms).
const SCRAPE_EVERY: Duration = Duration::from_millis(100);

/// The job file for Q1 over the Parquet files in `data`.
fn write_job(dir: &Path, data: &Path) -> PathBuf {
    common::write_lineitem_job(dir, data, "q1", Q1, "")
}

/// One `GET path` over a fresh connection; the status line's code.
fn get(addr: &str, path: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    let head = String::from_utf8_lossy(&answer[..answer.len().min(16)]).into_owned();
    Ok(head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0))
}

/// Runs the job once on a fresh data folder (with `--ui` and the scraper
/// when `ui`); its wall time and, with `ui`, the scrapes answered 200.
fn run(bin: &Path, job: &Path, scratch: &Path, ui: bool) -> Result<(f64, u64), String> {
    let data = scratch.join("data");
    if data.exists() {
        std::fs::remove_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    }
    let mut cmd = Command::new(bin);
    cmd.arg("--cache-dir")
        .arg(scratch.join("cache"))
        .arg("run")
        .arg(job)
        .arg("--data-dir")
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if ui {
        cmd.args(["--ui", "127.0.0.1:0"]);
    }
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let done = Arc::new(AtomicBool::new(false));
    let scraped = Arc::new(AtomicU64::new(0));
    // Reads stderr (so the child never blocks on it), keeps its tail, and
    // starts the scraper once the page's address is printed.
    let reader = {
        let (done, scraped) = (done.clone(), scraped.clone());
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut scraper = None;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("job page on http://").nth(1) {
                    let addr = rest.split('/').next().unwrap_or_default().to_owned();
                    let (done, scraped) = (done.clone(), scraped.clone());
                    scraper = Some(std::thread::spawn(move || {
                        let mut k = 0_u64;
                        while !done.load(Ordering::SeqCst) {
                            let path = if k.is_multiple_of(2) {
                                "/metrics"
                            } else {
                                "/api/job"
                            };
                            if get(&addr, path).is_ok_and(|c| c == 200) {
                                scraped.fetch_add(1, Ordering::SeqCst);
                            }
                            k += 1;
                            std::thread::sleep(SCRAPE_EVERY);
                        }
                    }));
                }
                tail.push(line);
                if tail.len() > 20 {
                    tail.remove(0);
                }
            }
            done.store(true, Ordering::SeqCst);
            if let Some(s) = scraper {
                let _joined = s.join();
            }
            tail
        })
    };
    let status = child.wait().map_err(|e| e.to_string())?;
    let wall = start.elapsed().as_secs_f64();
    done.store(true, Ordering::SeqCst);
    let tail = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(format!(
            "`coordhost run {}` ended with {status}: {}",
            job.display(),
            tail.join(" | ")
        ));
    }
    common::check_q1_answer(&data.join("output/q1"))?;
    std::fs::remove_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    Ok((wall, scraped.load(Ordering::SeqCst)))
}

fn main() -> ExitCode {
    let mut rounds = 7_usize;
    let mut data = lineitem_dir();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bench" => {}
            "--rounds" => match args.next().and_then(|v| v.parse().ok()).filter(|n| *n >= 1) {
                Some(n) => rounds = n,
                None => {
                    eprintln!("ui bench: --rounds needs a positive number");
                    return ExitCode::from(2);
                }
            },
            "--data" => match args.next() {
                Some(d) => data = PathBuf::from(d),
                None => {
                    eprintln!("ui bench: --data needs a folder");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!("ui bench: unknown argument `{other}` (expected --rounds N, --data DIR)");
                return ExitCode::from(2);
            }
        }
    }
    for needed in [plugin_path("file-enumerator"), plugin_path("local-shuffle")] {
        if !needed.is_file() {
            eprintln!(
                "ui bench: {} is missing: run `make plugins`",
                needed.display()
            );
            return ExitCode::from(2);
        }
    }
    if !data.is_dir() {
        eprintln!(
            "ui bench: {} is missing: run `make bench-ui` (it writes TPC-H SF 1 lineitem as Parquet)",
            data.display()
        );
        return ExitCode::from(2);
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_coordhost"));
    let scratch = tempfile::tempdir().expect("a scratch folder");
    let job = write_job(scratch.path(), &data);
    let (mut plain, mut watched, mut ratios, mut scrapes) = (vec![], vec![], vec![], vec![]);
    println!(
        "TPC-H Q1, SF 1 lineitem Parquet, {rounds} rounds after one warm-up; scraper every {} ms",
        SCRAPE_EVERY.as_millis()
    );
    for round in 0..=rounds {
        // Alternate which goes first, so neither always runs on a warmer cache.
        let order = if round.is_multiple_of(2) {
            [false, true]
        } else {
            [true, false]
        };
        let mut times = [0.0_f64; 2];
        for ui in order {
            match run(&bin, &job, scratch.path(), ui) {
                Ok((wall, n)) => {
                    times[usize::from(ui)] = wall;
                    if ui {
                        if n == 0 {
                            eprintln!(
                                "ui bench: round {round}: the scraper got no answer from --ui"
                            );
                            return ExitCode::from(1);
                        }
                        if round > 0 {
                            scrapes.push(n as f64);
                        }
                    }
                }
                Err(e) => {
                    eprintln!("ui bench: round {round}, --ui {ui}: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        println!(
            "  round {round}{}: without {:.3} s, with --ui {:.3} s",
            if round == 0 { " (warm-up)" } else { "" },
            times[0],
            times[1]
        );
        if round > 0 {
            plain.push(times[0]);
            watched.push(times[1]);
            ratios.push(times[1] / times[0]);
        }
    }
    let overhead = (median(ratios) - 1.0) * 100.0;
    println!();
    println!("| run                                   | median wall (s) |");
    println!("|---------------------------------------|-----------------|");
    println!(
        "| `coordhost run`                       | {:>15.3} |",
        median(plain)
    );
    println!(
        "| `coordhost run --ui` + scraper 100 ms | {:>15.3} |",
        median(watched)
    );
    println!();
    println!(
        "overhead (median of per-round ratios): {overhead:+.2} % (target <= 2 %); scrapes answered per run: {:.0}",
        median(scrapes)
    );
    ExitCode::SUCCESS
}
