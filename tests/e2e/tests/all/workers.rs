//! Issue 14: the word count on 1 coordinator + 3 `coordhost worker`
//! processes, all real, on loopback. Each test checks the output against the
//! counts the test computes itself, and that no partition or staged output
//! is left on any worker after the job.
//!
//! - the same output as embedded workers;
//! - a worker SIGKILLed while the job runs: its partitions are lost,
//!   consumers fail with PartitionNotFound and the producers run again;
//! - a worker SIGSTOPped past its heartbeat timeout: it is given up, its
//!   attempt runs elsewhere, and its late report is refused after SIGCONT;
//! - the coordinator SIGKILLed at seeded random moments (20 trials, some
//!   also killing a worker): the restarted coordinator takes the partitions
//!   the surviving workers report and skips their producers.
//!
//! Replay a failure with `COORDHOST_CRASH_SEED=<seed printed at the start>`.

use std::time::{Duration, Instant};

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, Rng, SOURCE, WordJob, expected_output, first_difference,
    seed, sorted_output,
};
use crate::support::workers::{Workers, external_args, free_port};

/// Heartbeat timeout of these runs, ms: short, so a lost worker or
/// coordinator is noticed quickly.
const HEARTBEAT_MS: u64 = 1000;

fn job(fx: &Fixture, name: &str, tune: impl FnOnce(&mut WordJob)) -> std::path::PathBuf {
    let mut j = WordJob::new(&fx.input);
    j.previous_worker_timeout_ms = 1500;
    tune(&mut j);
    j.write(&fx.path(name))
}

fn assert_output(data_dir: &std::path::Path, fx: &Fixture, context: &str) {
    let got = sorted_output(data_dir);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "{context}: output differs from the counts: {}",
        first_difference(&got, &want)
    );
}

fn assert_nothing_left(workers: &Workers, context: &str) {
    let left = workers.files_left();
    assert!(
        left.is_empty(),
        "{context}: files left on the workers after the job: {left:?}\n{}",
        workers.logs()
    );
}

#[test]
fn external_workers_give_the_output_embedded_workers_give() {
    let fx = Fixture::words();
    let file = job(&fx, "job.toml", |j| {
        j.source_delay_us = 0;
        j.sink_delay_us = 0;
    });
    let mut embedded = Coordhost::new(&file, &fx.path("embedded"));
    embedded.run_to_end();
    let addr = free_port();
    let workers = Workers::start(3, &addr, &fx.path("workers"), 2);
    let mut external = Coordhost::new(&file, &fx.path("external"));
    external.extra_args = external_args(&addr, 3, HEARTBEAT_MS);
    let run = external.run_to_end();
    assert_eq!(
        run.summary.0["workers"].as_u64(),
        Some(6),
        "3 workers × 2 slots: {}",
        run.summary.0
    );
    assert_eq!(
        sorted_output(&fx.path("external")),
        sorted_output(&fx.path("embedded"))
    );
    assert_output(&fx.path("external"), &fx, "external workers");
    assert_nothing_left(&workers, "an uninterrupted job");
}

/// The worker whose partition folder holds a file now, if any.
fn holder(workers: &Workers, n: usize) -> Option<usize> {
    (0..n).find(|&i| {
        let mut found = Vec::new();
        crate::support::workers::files_under(&workers.data_dir(i).join("partitions"), &mut found);
        !found.is_empty()
    })
}

#[test]
fn a_worker_killed_while_the_job_runs_makes_its_producers_run_again() {
    let fx = Fixture::words();
    let file = job(&fx, "job.toml", |j| {
        j.source_delay_us = 0;
        j.sink_delay_us = 2000;
    });
    let addr = free_port();
    let mut workers = Workers::start(3, &addr, &fx.path("workers"), 2);
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 3, HEARTBEAT_MS);
    let mut running = run.start();
    // Once every source finished (the log says so), a worker holds
    // partitions the slowed sinks still have to read.
    running
        .poll_until(|| {
            EventLog::read(&data)
                .filter(|l| l.finished(SOURCE).len() == 4)
                .map(|_| ())
        })
        .expect("the sources finish");
    let victim = holder(&workers, 3).expect("a worker holds a partition");
    workers.kill(victim);
    let done = running.finish();
    assert!(
        done.summary.tasks_reset() >= 1,
        "killing w{victim}, which held partitions, reset nothing: {}",
        done.summary.brief()
    );
    assert_output(&data, &fx, "after a worker was killed");
    assert_nothing_left(&workers, "after a worker was killed");
}

#[test]
fn a_paused_worker_is_given_up_and_its_late_report_is_refused() {
    let fx = Fixture::words();
    // The sinks are slow enough that the job outlasts the pause: the late
    // report must find the coordinator there to refuse it.
    let file = job(&fx, "job.toml", |j| {
        j.source_delay_us = 100;
        j.sink_delay_us = 2000;
    });
    let addr = free_port();
    let workers = Workers::start(3, &addr, &fx.path("workers"), 2);
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 3, HEARTBEAT_MS);
    let started = Instant::now();
    let mut running = run.start();
    // w0 runs a source subtask once it wrote any of its partition.
    running
        .poll_until(|| holder(&workers, 1).map(|_| ()))
        .expect("w0 starts a source subtask");
    workers.stop(0);
    std::thread::sleep(Duration::from_millis(HEARTBEAT_MS * 3));
    workers.resume(0);
    let done = running.finish();
    let stderr = std::fs::read_to_string(fx.path("data.run1.err")).unwrap_or_default();
    assert!(
        stderr.contains("worker lost") || stderr.contains("no heartbeat"),
        "the coordinator did not give w0 up (paused {} ms, timeout {HEARTBEAT_MS} ms):\n{stderr}",
        HEARTBEAT_MS * 3
    );
    assert!(
        stderr.contains("refused the report"),
        "w0's late report was not refused:\n{stderr}\n{}",
        workers.logs()
    );
    assert!(done.summary.tasks_reset() >= 1, "{}", done.summary.brief());
    assert_output(&data, &fx, "after a paused worker");
    assert_nothing_left(&workers, "after a paused worker");
    assert!(started.elapsed() < Duration::from_secs(120));
}

/// Trials of the coordinator-crash test.
const TRIALS: u32 = 20;

#[test]
fn the_coordinator_killed_at_random_with_workers_alive_recovers_from_their_partitions() {
    let seed = seed();
    eprintln!("COORDHOST_CRASH_SEED={seed:#x}");
    let fx = Fixture::words();
    let file = job(&fx, "job.toml", |j| {
        j.source_delay_us = 10;
        j.sink_delay_us = 300;
    });
    let addr = free_port();
    let mut workers = Workers::start(3, &addr, &fx.path("workers"), 2);
    let want = expected_output(&fx.input);
    let mut rows = Vec::new();
    let mut skipped_total = 0;
    for t in 0..TRIALS {
        let mut rng = Rng::new(seed ^ u64::from(t).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let data = fx.path(&format!("trial-{t}"));
        let mut run = Coordhost::new(&file, &data);
        run.extra_args = external_args(&addr, 3, HEARTBEAT_MS);
        let running = run.start();
        let kill_at = Duration::from_millis(300 + rng.below(2700));
        std::thread::sleep(kill_at.saturating_sub(running.elapsed()));
        let also_worker = rng.below(3) == 0;
        let killed = match running.kill() {
            Kill::Killed { after } => Some(after),
            Kill::TooLate(_) => None,
        };
        let victim = rng.below(3) as usize;
        if also_worker && killed.is_some() {
            workers.kill(victim);
            workers.restart(victim);
        }
        // After a kill, the restarted coordinator finishes the job; if the
        // job finished before the kill, this run finds it finished.
        let finale = run.run_to_end();
        let got = sorted_output(&data);
        assert!(
            got == want,
            "trial {t} (seed {seed:#x}, kill at {killed:?}, worker w{victim} killed too: {also_worker}): {}\n{}",
            first_difference(&got, &want),
            workers.logs()
        );
        assert_nothing_left(&workers, &format!("trial {t}"));
        skipped_total += finale.summary.tasks_skipped();
        rows.push(format!(
            "trial {t:>2}: kill at {:?} ms, worker w{victim} killed too: {}, final run: {}",
            killed.map(|d| d.as_millis()),
            also_worker && killed.is_some(),
            finale.summary.brief()
        ));
        for i in 0..3 {
            assert!(
                workers.is_running(i),
                "w{i} died on its own\n{}",
                workers.logs()
            );
        }
    }
    eprintln!("{}", rows.join("\n"));
    assert!(
        skipped_total > 0,
        "no trial skipped a task: the workers' partitions were never used\n{}",
        rows.join("\n")
    );
}

/// Runs the binary with `args`; returns (exit code, stderr).
fn run_cli(args: &[&str]) -> (Option<i32>, String) {
    let out = crate::support::coordhost()
        .args(args)
        .output()
        .expect("run coordhost");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn worker_and_run_flags_that_cannot_work_are_refused_in_one_line() {
    let fx = Fixture::words();
    let file = job(&fx, "job.toml", |_| {});
    let file = file.to_str().expect("utf-8 path");
    let data = fx.path("data");
    let data = data.to_str().expect("utf-8 path");
    let wdir = fx.path("w");
    let wdir = wdir.to_str().expect("utf-8 path");
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["run", file, "--data-dir", data, "--external-workers", "3"],
            2,
            "--listen",
        ),
        (
            vec![
                "run",
                file,
                "--data-dir",
                data,
                "--listen",
                "nowhere",
                "--external-workers",
                "1",
            ],
            2,
            "--listen `nowhere`",
        ),
        (
            vec![
                "run",
                file,
                "--data-dir",
                data,
                "--listen",
                "127.0.0.1:0",
                "--external-workers",
                "0",
            ],
            2,
            "--external-workers: at least 1",
        ),
        (
            vec![
                "worker",
                "--coordinator",
                "127.0.0.1:1",
                "--data-dir",
                wdir,
                "--listen",
                "nowhere",
            ],
            2,
            "--listen `nowhere`",
        ),
        (
            vec![
                "worker",
                "--coordinator",
                "127.0.0.1:1",
                "--data-dir",
                wdir,
                "--slots",
                "0",
            ],
            2,
            "--slots: at least 1",
        ),
        (
            vec![
                "run",
                file,
                "--data-dir",
                data,
                "--listen",
                "127.0.0.1:0",
                "--external-workers",
                "2",
                "--worker-wait-ms",
                "300",
            ],
            1,
            "2 workers expected (--external-workers), 0 registered within 300 ms",
        ),
    ];
    for (args, code, says) in cases {
        let (got, stderr) = run_cli(&args);
        assert_eq!(got, Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?} should say `{says}`:\n{stderr}"
        );
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("coordhost:") || l.starts_with("error:"))
            .collect();
        assert_eq!(lines.len(), 1, "{args:?}: one error line:\n{stderr}");
    }
    assert!(
        !std::path::Path::new(data).join("wordcount").exists(),
        "a refused run created the job's folder"
    );
}

#[test]
fn partitions_no_coordinator_claims_within_the_keep_time_are_deleted() {
    let fx = Fixture::words();
    let file = job(&fx, "job.toml", |j| {
        j.source_delay_us = 0;
        j.sink_delay_us = 3000;
    });
    let addr = free_port();
    let workers = Workers::start_keeping(3, &addr, &fx.path("workers"), 2, 500);
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 3, HEARTBEAT_MS);
    let mut running = run.start();
    running
        .poll_until(|| {
            EventLog::read(&data)
                .filter(|l| l.finished(SOURCE).len() == 4)
                .map(|_| ())
        })
        .expect("the sources finish");
    assert!(
        !workers.files_left().is_empty(),
        "the workers hold the sources' partitions"
    );
    assert!(
        matches!(running.kill(), Kill::Killed { .. }),
        "killed midway"
    );
    // Noticed after the heartbeat timeout, kept 500 ms, deleted at the
    // next failed registration (backoff at most 1 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !workers.files_left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        workers.files_left().is_empty(),
        "still held 30 s after the coordinator died, keep time 500 ms: {:?}\n{}",
        workers.files_left(),
        workers.logs()
    );
}
