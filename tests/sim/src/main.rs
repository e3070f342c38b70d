//! `coordhost-sim`: runs seeded simulations of coordhost's recovery
//! (docs/simulation.md) and prints the first failing seed with the command
//! that replays it.
//!
//! usage: coordhost-sim [--seeds N] [--from S]   run seeds S..S+N (default 0..10000)
//!        coordhost-sim --seed S [-v]            run one seed (-v: print its trace)

use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| -> Result<Option<u64>, String> {
        match args.iter().position(|a| a == flag) {
            None => Ok(None),
            Some(i) => args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .map(Some)
                .ok_or_else(|| format!("{flag} needs a whole number")),
        }
    };
    let verbose = args.iter().any(|a| a == "-v" || a == "--verbose");
    let parsed = (|| Ok::<_, String>((value("--seed")?, value("--seeds")?, value("--from")?)))();
    let (one, seeds, from) = match parsed {
        Ok(v) => v,
        Err(e) => {
            eprintln!("coordhost-sim: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(unknown) = args.iter().find(|a| {
        a.starts_with('-')
            && !["--seed", "--seeds", "--from", "-v", "--verbose"].contains(&a.as_str())
    }) {
        eprintln!("coordhost-sim: unknown flag {unknown}");
        return ExitCode::from(2);
    }
    let (first, count) = match one {
        Some(seed) => (seed, 1),
        None => (from.unwrap_or(0), seeds.unwrap_or(10_000)),
    };
    let started = Instant::now();
    let mut totals = coordhost_sim::Outcome::default();
    let mut failed_jobs = 0u64;
    for seed in first..first.saturating_add(count) {
        let (result, trace) = coordhost_sim::run_with_trace(seed);
        if verbose && one.is_some() {
            print!("{trace}");
        }
        match result {
            Ok(outcome) => {
                totals.crashes += outcome.crashes;
                totals.attempts += outcome.attempts;
                totals.kept += outcome.kept;
                totals.reset += outcome.reset;
                totals.leader_changes += outcome.leader_changes;
                totals.failed |= outcome.failed;
                failed_jobs += u64::from(outcome.failed);
                if verbose {
                    println!(
                        "seed {seed}: {:?} {outcome:?}",
                        coordhost_sim::Scenario::of(seed)
                    );
                }
            }
            Err(violation) => {
                eprintln!("coordhost-sim: {violation}");
                return ExitCode::FAILURE;
            }
        }
    }
    println!(
        "coordhost-sim: {count} seeds from {first} passed in {:.1} s: {} crashes, {} changes of leader, {} attempts, {} executions kept and {} reset by recoveries, {failed_jobs} jobs failed for good (never run again)",
        started.elapsed().as_secs_f64(),
        totals.crashes,
        totals.leader_changes,
        totals.attempts,
        totals.kept,
        totals.reset
    );
    ExitCode::SUCCESS
}
