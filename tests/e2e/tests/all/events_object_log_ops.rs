//! Issue 30, second slice: running a job whose event log is on object
//! storage (docs/object-storage.md), through the real `coordhost` binary
//! and a real SeaweedFS (`weed mini`, support/s3.rs): `[job] log` in the
//! job file (and `--log` overriding it, bad URLs one line), `--fresh` (a
//! new run inside the same log, nothing lost), `coordhost cancel`, and the
//! store failing mid-job behind a fault-injecting proxy
//! (support/fault_proxy.rs): 503s and slowness retried to exact output, an
//! outage mid-job ending the run with one line naming the endpoint (exit 1,
//! nothing published) and the next run recovering, a store answering only
//! 503 refused in one line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::crash::{
    Coordhost, EventLog, Fixture, JOB, SOURCE, WordJob, expected_output, first_difference, log_dir,
    output_dir, sorted_output,
};
use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::s3::{Seaweed, error_lines};
use crate::support::segment_files;

const BUCKET: &str = "coordhost-logs";

/// The log at `url` as `log inspect --json` prints it (asked of the server
/// directly, never through a proxy); `None` while there is none.
pub(crate) fn read_log(server: &Seaweed, url: &str) -> Option<EventLog> {
    let out = crate::support::coordhost()
        .envs(server.env())
        .args(["log", "inspect", url, "--json"])
        .output()
        .expect("spawn coordhost log inspect");
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no event log"),
            "log inspect {url}: {stderr}"
        );
        return None;
    }
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    Some(EventLog {
        events: doc["events"].as_array().cloned().unwrap_or_default(),
        segments: doc["segments"]
            .as_array()
            .map(|s| s.iter().filter_map(|s| s["attempt"].as_u64()).collect())
            .unwrap_or_default(),
    })
}

fn assert_output(data: &Path, input: &Path) {
    let got = sorted_output(data);
    let want = expected_output(input);
    assert!(got == want, "{}", first_difference(&got, &want));
}

/// `job`'s file with `line` added to its `[job]` table.
fn with_job_line(job: &WordJob, path: &Path, line: &str) -> PathBuf {
    let file = job.write(path);
    let text = std::fs::read_to_string(&file).expect("job file");
    let edited = text.replacen("[job]\n", &format!("[job]\n{line}\n"), 1);
    assert_ne!(text, edited, "the job file has a [job] table");
    std::fs::write(&file, edited).expect("job file");
    file
}

/// A word count that finishes in about a second.
fn quick(fx: &Fixture) -> WordJob {
    let mut job = WordJob::new(&fx.input);
    job.source_delay_us = 0;
    job.sink_delay_us = 0;
    job
}

#[test]
fn events_object_log_from_the_job_file_with_fresh_and_cancel() {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let job = quick(&fx);
    let in_file = format!("s3://{BUCKET}/from-file");
    let file = with_job_line(&job, &fx.path("job.toml"), &format!("log = \"{in_file}\""));

    // `[job] log` alone: the log is on objects, none in the data directory.
    let data = fx.path("data");
    let mut ch = Coordhost::new(&file, &data);
    ch.env = server.env();
    let first = ch.run_to_end();
    assert!(!first.summary.recovered());
    assert_output(&data, &fx.input);
    assert!(segment_files(&log_dir(&data)).is_empty(), "no local log");
    let log = read_log(&server, &in_file).expect("the log named by the job file");
    assert_eq!(log.count("JobFinished"), 1);
    assert_eq!(
        std::fs::read_to_string(data.join(JOB).join("OBJECT_LOG")).expect("OBJECT_LOG"),
        format!("{in_file}\n"),
        "the job's folder says where its log is"
    );

    // An edited job whose log holds progress is refused (exit 2, naming
    // the log); `--fresh` runs it as a new run inside the same log, the
    // old run kept.
    let edited = {
        let text = std::fs::read_to_string(&file).expect("job file");
        let edited = text.replacen(
            &format!("split-bytes = {}", job.split_bytes),
            "split-bytes = 65536",
            1,
        );
        assert_ne!(text, edited, "the job file has the split size");
        let path = fx.path("edited.toml");
        std::fs::write(&path, edited).expect("job file");
        path
    };
    let mut ch = Coordhost::new(&edited, &data);
    ch.env = server.env();
    let refused = ch.start().wait_exit();
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    let lines = error_lines(&refused.stderr);
    assert!(
        lines.len() == 1
            && lines[0].contains(&in_file)
            && lines[0].contains("different job graph")
            && lines[0].contains("another log prefix"),
        "{}",
        refused.stderr
    );
    ch.extra_args = vec!["--fresh".into()];
    let fresh = ch.run_to_end();
    assert!(!fresh.summary.recovered(), "{}", fresh.summary.brief());
    assert_eq!(
        fresh.summary.tasks_skipped(),
        0,
        "{}",
        fresh.summary.brief()
    );
    assert_output(&data, &fx.input);
    let log = read_log(&server, &in_file).expect("the log");
    assert_eq!(
        (log.count("JobStarted"), log.count("JobFinished")),
        (2, 2),
        "both runs are in the log"
    );
    assert_eq!(log.segments, [0, 1], "the refused run wrote nothing");

    // A job refused at its start (a plugin refused its configuration:
    // nothing finished, nothing published) and then fixed needs no
    // `--fresh`: it starts a new run inside the log.
    let broken = {
        let text = std::fs::read_to_string(&file).expect("job file");
        let path = fx.path("broken.toml");
        std::fs::write(
            &path,
            text.replacen(
                &format!("split-bytes = {}", job.split_bytes),
                "split-bytes = \"lots\"",
                1,
            )
            .replacen(&in_file, &format!("s3://{BUCKET}/fixed"), 1),
        )
        .expect("job file");
        path
    };
    let fixed_data = fx.path("data-fixed");
    let mut ch = Coordhost::new(&broken, &fixed_data);
    ch.env = server.env();
    let refused = ch.start().wait_exit();
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("invalid configuration"),
        "{}",
        refused.stderr
    );
    let mut ch = Coordhost::new(&file, &fixed_data);
    ch.env = server.env();
    ch.extra_args = vec!["--log".into(), format!("s3://{BUCKET}/fixed")];
    let done = ch.start().wait_exit();
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    assert!(
        done.stderr.contains("starts a new run in it"),
        "{}",
        done.stderr
    );
    assert_output(&fixed_data, &fx.input);
    let log = read_log(&server, &format!("s3://{BUCKET}/fixed")).expect("the log");
    assert_eq!(
        (log.count("JobStarted"), log.count("JobFinished")),
        (2, 1),
        "the refused run's records stay"
    );
    // That run's `--log` overrode its job file's `log`, which it left alone.
    let log = read_log(&server, &in_file).expect("the file's log");
    assert_eq!(
        log.count("JobStarted"),
        2,
        "the job file's log is untouched"
    );

    // A finished job: `cancel` has nothing to do (exit 2).
    let cancel = |dir: &Path| {
        crate::support::coordhost()
            .envs(server.env())
            .arg("cancel")
            .arg(dir)
            .output()
            .expect("coordhost cancel")
    };
    let out = cancel(&data);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already finished"),
        "{out:?}"
    );

    // A running job is cancelled through its job folder; the next run
    // refuses (exit 3) until `--resume`, which finishes it.
    let slow = WordJob::new(&fx.input);
    let slow_file = with_job_line(
        &slow,
        &fx.path("slow.toml"),
        &format!("log = \"s3://{BUCKET}/cancel\""),
    );
    let slow_data = fx.path("data-cancel");
    let mut run = Coordhost::new(&slow_file, &slow_data);
    run.env = server.env();
    let mut running = run.start();
    let url = format!("s3://{BUCKET}/cancel");
    running
        .poll_until(|| {
            std::thread::sleep(Duration::from_millis(150));
            read_log(&server, &url).filter(|l| l.finished(SOURCE).len() == slow.sources as usize)
        })
        .expect("the sources finished before the job did");
    let out = cancel(&slow_data.join(JOB));
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(said.contains("cancelled"), "{said}");
    let ended = running.wait_exit();
    assert_eq!(ended.code, Some(3), "{}", ended.stderr);
    let log = read_log(&server, &url).expect("the log");
    assert_eq!(log.count("JobCancelled"), 1);
    assert!(
        !slow_data.join(JOB).join("CANCEL").exists(),
        "the request is done"
    );
    let again = run.start().wait_exit();
    assert_eq!(
        again.code,
        Some(3),
        "cancelled stays cancelled: {}",
        again.stderr
    );
    run.extra_args = vec!["--resume".into()];
    let resumed = run.run_to_end();
    assert!(resumed.summary.recovered(), "{}", resumed.summary.brief());
    assert!(
        resumed.summary.tasks_skipped() >= u64::from(slow.sources),
        "{}",
        resumed.summary.brief()
    );
    assert_output(&slow_data, &fx.input);
}

#[test]
fn events_object_log_bad_urls_in_the_job_file_are_one_line() {
    let fx = Fixture::words();
    let job = quick(&fx);
    for (i, (value, says)) in [
        ("/tmp/logs", "expected s3://BUCKET/PREFIX"),
        ("s3://Bad_Bucket/x", "bucket name `Bad_Bucket`"),
        ("s3://bucket/a/../b", "`.` or `..` part"),
    ]
    .into_iter()
    .enumerate()
    {
        let file = with_job_line(
            &job,
            &fx.path(&format!("bad{i}.toml")),
            &format!("log = \"{value}\""),
        );
        for extra in [&[][..], &["--ha", "etcd://127.0.0.1:1"][..]] {
            let mut ch = Coordhost::new(&file, &fx.path("data"));
            ch.extra_args = extra.iter().map(|s| s.to_string()).collect();
            let exited = ch.start().wait_exit();
            assert_eq!(exited.code, Some(2), "{value}: {}", exited.stderr);
            let lines = error_lines(&exited.stderr);
            eprintln!("{lines:?}");
            assert!(
                lines.len() == 1
                    && lines[0].contains(&file.display().to_string())
                    && lines[0].contains("field `job.log`")
                    && lines[0].contains(says),
                "{value} {extra:?}: one line naming the file, the field and saying `{says}`: {}",
                exited.stderr
            );
        }
    }
}

#[test]
fn events_object_log_store_faults_mid_job_are_retried_or_end_the_run_clearly() {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let (proxy, env) = FaultProxy::in_front_of(&server);
    let through_proxy = || env.clone();
    let job = WordJob::new(&fx.input);
    let file = job.write(&fx.path("job.toml"));
    let sources_finished = |url: &str| {
        read_log(&server, url).filter(|l| l.finished(SOURCE).len() == job.sources as usize)
    };

    // 1. Every third request answered 503, the others slowed, the answers
    //    to some lost after the server did the work (a retried create
    //    finds its own object), and 2 s of nothing but 503 once the
    //    sources finished (longer than the client's own retries): the run
    //    goes through, exact output, and its log reads back whole.
    let url = format!("s3://{BUCKET}/flaky");
    let data = fx.path("data-flaky");
    let mut ch = Coordhost::new(&file, &data);
    ch.env = through_proxy();
    ch.extra_args = vec!["--log".into(), url.clone()];
    proxy.set(
        Fault::Flaky {
            n: 1,
            m: 3,
            delay: Duration::from_millis(20),
            lose_every: 5,
        },
        None,
    );
    let mut running = ch.start();
    running
        .poll_until(|| {
            std::thread::sleep(Duration::from_millis(100));
            sources_finished(&url)
        })
        .expect("the sources finished before the job did");
    let before = proxy.counts();
    proxy.set(Fault::Unavailable, Some(Duration::from_millis(2000)));
    let ended = running.wait_exit();
    let after = proxy.counts();
    eprintln!("{before:?} → {after:?}");
    assert_eq!(ended.code, Some(0), "{}", ended.stderr);
    assert_output(&data, &fx.input);
    let log = read_log(&server, &url).expect("the log reads back");
    assert_eq!((log.count("JobStarted"), log.count("JobFinished")), (1, 1));
    assert!(
        before.unavailable > 0 && before.delayed > 0 && before.lost > 0,
        "faults were injected before the window: {before:?}"
    );
    assert!(
        after.unavailable > before.unavailable + 3,
        "the window answered 503 beyond the client's own retries: {before:?} → {after:?}"
    );
    assert!(
        ended.stderr.contains("trying again"),
        "the log's writes retried: {}",
        ended.stderr
    );
    proxy.set(Fault::Pass, None);

    // 2. The store goes away mid-job and stays away: the run gives up
    //    after --log-retry-s with one line naming the endpoint (exit 1),
    //    nothing published; once the store is back, the next run recovers
    //    and skips the finished sources.
    let url = format!("s3://{BUCKET}/outage");
    let data = fx.path("data-outage");
    let mut ch = Coordhost::new(&file, &data);
    ch.env = through_proxy();
    ch.extra_args = vec![
        "--log".into(),
        url.clone(),
        "--log-retry-s".into(),
        "1".into(),
    ];
    let mut running = ch.start();
    running
        .poll_until(|| {
            std::thread::sleep(Duration::from_millis(100));
            sources_finished(&url)
        })
        .expect("the sources finished before the job did");
    let before = proxy.counts();
    proxy.set(Fault::Drop, None);
    let failed = running.wait_exit();
    assert_eq!(failed.code, Some(1), "{}", failed.stderr);
    let lines = error_lines(&failed.stderr);
    assert!(
        lines.len() == 1
            && lines[0].contains(&proxy.endpoint())
            && lines[0].contains("cannot be reached")
            && lines[0].contains("gave up after"),
        "one line naming {} and saying it gave up: {}",
        proxy.endpoint(),
        failed.stderr
    );
    assert!(
        proxy.counts().dropped > before.dropped,
        "the store was down"
    );
    assert!(
        !output_dir(&data).join("_SUCCESS").exists(),
        "nothing published"
    );
    assert!(
        !failed.stderr.contains(crate::support::s3::SECRET_KEY),
        "a secret printed"
    );
    proxy.set(Fault::Pass, None);
    let done = ch.run_to_end();
    assert!(done.summary.recovered(), "{}", done.summary.brief());
    assert!(
        done.summary.tasks_skipped() >= u64::from(job.sources),
        "the finished sources are skipped: {}",
        done.summary.brief()
    );
    assert_output(&data, &fx.input);

    // 3. A store that answers nothing but 503: one line naming the
    //    endpoint, exit 1, nothing written.
    proxy.set(Fault::Unavailable, None);
    let before = proxy.counts();
    let mut ch = Coordhost::new(&file, &fx.path("data-503"));
    ch.env = through_proxy();
    ch.extra_args = vec!["--log".into(), format!("s3://{BUCKET}/only-503")];
    let failed = ch.start().wait_exit();
    proxy.set(Fault::Pass, None);
    assert_eq!(failed.code, Some(1), "{}", failed.stderr);
    let lines = error_lines(&failed.stderr);
    assert!(
        lines.len() == 1
            && lines[0].contains(&proxy.endpoint())
            && lines[0].contains("answered with a server error")
            && lines[0].contains("503"),
        "one line naming {} and the 503: {}",
        proxy.endpoint(),
        failed.stderr
    );
    assert!(
        proxy.counts().unavailable > before.unavailable,
        "the proxy answered 503"
    );
    assert!(server.keys("only-503").is_empty(), "nothing written");
}
