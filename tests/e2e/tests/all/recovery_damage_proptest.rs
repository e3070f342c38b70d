//! A seeded property test of recovery (docs/recovery.md): for random small
//! jobs (topology T1 with a random enumerator, sink sizing, snapshot pause),
//! random crash points (one or two simulated coordinator crashes in a row,
//! in-process through `run_job` with the real sample plugins) and random
//! damage to the result partitions left behind (none, a subpartition file
//! deleted, cut at a block boundary, cut at a record boundary, cut in the
//! middle of a record, a flipped byte — with the tool of
//! tests/e2e/tests/all/support/damage.rs), the job finishes and its output equals an
//! uninterrupted run's.
//!
//! `COORDHOST_TRIALS` sets the number of trials (default [`DEFAULT_TRIALS`],
//! a CI-sized count); `COORDHOST_SEED` the first seed (decimal or `0x` hex).
//! Each trial prints its seed; rerun one with `COORDHOST_SEED=<seed>
//! COORDHOST_TRIALS=1`.

use std::path::Path;

use crate::support::damage::{Damage, damage_partition};
use crate::support::knobs::{self, CrashPoint, CrashRun, Knobs};
use crate::support::recovery::{
    Enumerator, T1, assert_same_output_as_uninterrupted, bytes_per_task_for_two, partition_dirs,
};
use coordhost::failpoints::CRASH_POINTS;
use coordhost::job::{JobStatus, run_job};

/// Trials when `COORDHOST_TRIALS` is not set.
const DEFAULT_TRIALS: u64 = 12;
/// First seed when `COORDHOST_SEED` is not set.
const DEFAULT_SEED: u64 = 0x0383_0010_da4a_6e00;

/// SplitMix64: small, seeded, the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(raw) => {
            let raw = raw.trim();
            let parsed = match raw.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => raw.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{name}={raw} is not a number: {e}"))
        }
    }
}

/// Runs `t1` (the binary) over `data_dir` until the simulated crash `at`.
fn run_until(t1: &T1, data_dir: &Path, at: &CrashPoint) -> CrashRun {
    knobs::run_to_crash(&t1.options(data_dir), &Knobs::crash(at.clone()))
}

fn random_crash(rng: &mut Rng) -> CrashPoint {
    if rng.below(2) == 0 {
        // Parallelism: source 5, middle 5, sink 2 (or more with a small
        // bytes-per-task); a count above it is a run that is not interrupted.
        let (vertex, most) = *rng.pick(&[("source", 5), ("middle", 5), ("sink", 3)]);
        CrashPoint::AfterFinished {
            vertex: vertex.to_string(),
            count: 1 + rng.below(most) as u32,
        }
    } else {
        CrashPoint::Named {
            point: rng.pick(CRASH_POINTS).to_string(),
            occurrence: 1 + rng.below(2) as u32,
        }
    }
}

/// Damages up to two complete partitions of `source` and `middle`; returns
/// what was done.
fn random_damage(rng: &mut Rng, data_dir: &Path) -> Vec<String> {
    let mut candidates: Vec<_> = ["source", "middle"]
        .iter()
        .flat_map(|v| partition_dirs(data_dir, v))
        .filter(|p| p.join("index").is_file())
        .collect();
    let mut done = Vec::new();
    for _ in 0..=rng.below(2) {
        if candidates.is_empty() {
            break;
        }
        let at = rng.below(candidates.len() as u64) as usize;
        let location = candidates.swap_remove(at);
        let how = *rng.pick(&Damage::ALL);
        if how == Damage::None {
            continue;
        }
        if let Some(what) = damage_partition(&location, how, rng.next()) {
            done.push(what);
        }
    }
    done
}

/// Counts over all trials, to show that the trials exercised something.
#[derive(Debug, Default)]
struct Tally {
    crashes: u64,
    damaged: u64,
}

fn trial(seed: u64, tally: &mut Tally) {
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let enumerator = *rng.pick(&[Enumerator::Files, Enumerator::Static]);
    let mut t1 = T1::new(&dir.path().join("job"), enumerator);
    t1.max_sink_parallelism = 2 + rng.below(3) as u32;
    t1.bytes_per_task = bytes_per_task_for_two() * (1 + rng.below(3)) / 2;
    t1.snapshot_min_pause_ms = *rng.pick(&[0, 0, 60_000]);
    // Short: a deleted subpartition is never reported, so the wait runs out.
    t1.previous_worker_timeout_ms = 300;
    t1.write();
    let data_dir = dir.path().join("data");
    let mut story = vec![format!(
        "seed {seed:#x}: {enumerator:?}, max sink parallelism {}, bytes-per-task {}, snapshot pause {} ms",
        t1.max_sink_parallelism, t1.bytes_per_task, t1.snapshot_min_pause_ms
    )];
    for _ in 0..=rng.below(2) {
        let at = random_crash(&mut rng);
        let stop = run_until(&t1, &data_dir, &at);
        story.push(format!(
            "crash {at:?}: {}",
            if stop.crashed() {
                "Crashed"
            } else {
                "Finished"
            }
        ));
        if matches!(stop, CrashRun::Finished(_)) {
            break;
        }
        tally.crashes += 1;
        let damage = random_damage(&mut rng, &data_dir);
        tally.damaged += damage.len() as u64;
        story.extend(damage);
    }
    let story = story.join("\n  ");
    eprintln!("{story}");
    let o = t1.options(&data_dir);
    let summary =
        run_job(&o).unwrap_or_else(|e| panic!("{story}\nthe last run did not start: {e}"));
    assert_eq!(
        summary.status,
        JobStatus::Finished,
        "{story}\nthe job did not finish: {:?}",
        summary.error
    );
    // The story is printed above: a mismatch panics right after it.
    assert_same_output_as_uninterrupted(&data_dir, enumerator);
}

#[test]
fn random_crashes_and_damaged_partitions_never_change_the_output_and_the_job_always_finishes() {
    let trials = env_number("COORDHOST_TRIALS", DEFAULT_TRIALS);
    let first = env_number("COORDHOST_SEED", DEFAULT_SEED);
    assert!(trials > 0, "COORDHOST_TRIALS must be at least 1");
    let mut tally = Tally::default();
    for i in 0..trials {
        trial(first.wrapping_add(i), &mut tally);
    }
    eprintln!("{trials} trials from seed {first:#x}: {tally:?}");
    if trials >= DEFAULT_TRIALS {
        assert!(
            tally.crashes > 0 && tally.damaged > 0,
            "the trials crashed and damaged something: {tally:?}"
        );
    }
}

/// Writes a real partition with the host's writer and returns its folder.
fn partition(dir: &Path, rows: usize) -> std::path::PathBuf {
    let loc = dir.join("p");
    crate::support::damage::write_words(&loc, rows);
    loc
}

fn read_back(loc: &Path) -> Result<usize, coordhost::shuffle::ShuffleError> {
    let mut r = coordhost::shuffle::SubpartitionReader::open(loc, 0)?;
    let mut n = 0;
    while let Some(b) = r.next_batch()? {
        n += b.num_rows();
    }
    Ok(n)
}

#[test]
fn the_damage_tool_hits_every_kind_of_place_and_the_reader_catches_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    for how in Damage::ALL {
        for pick in [0, 1, 7, 161, 1000, 4097] {
            let loc = partition(&dir.path().join(format!("{how:?}-{pick}")), 400);
            let done = damage_partition(&loc, how, pick);
            let result = read_back(&loc);
            if how == Damage::None {
                assert_eq!(result.expect("intact"), 400);
            } else {
                let what = done.expect("400 records offer a place for every kind of damage");
                assert!(result.is_err(), "{what}: read back without an error");
            }
        }
    }
}
