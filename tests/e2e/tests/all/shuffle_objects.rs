//! Issue 30, item 4: result partitions on object storage (the sample
//! `object-shuffle` shuffle master; docs/object-storage.md, "Result
//! partitions on objects"), through the real `coordhost` binary against a
//! real SeaweedFS (support/s3.rs). The crash tests' word count keeps its
//! event log at `s3://BUCKET/<case>/log`, its partitions under
//! `s3://BUCKET/<case>/shuffle` and its answer at `s3://BUCKET/<case>/out`:
//!
//! - uninterrupted, the answer is exact, every recorded partition is an
//!   object under the prefix, and the job's partitions are deleted when it
//!   ends (no partition object left under the prefix, nothing in the
//!   staging folder; an object there that is not a partition stays);
//! - a coordinator SIGKILLed once every source has finished and started
//!   again on **another** data directory (as a standby on another machine)
//!   skips every task the log recorded finished and no other;
//! - behind the log, one source's `index` object deleted and another's
//!   `data` object overwritten with as many wrong bytes: both producers run
//!   again (the first found missing by the recovery's partition question,
//!   the second by its consumers' checksums), and the answer is exact;
//! - two runs of one job file (the same job name) over other inputs that
//!   share the prefix, each SIGKILLed and started again, each answer its
//!   own input's (the partitions are under a run token of the plugin's);
//! - on 3 worker processes (each with its own data directory), a worker
//!   that ran a source SIGKILLed once every source has finished costs no
//!   producer's re-run:
//!   its finished partitions are objects, not files on its disk;
//! - a `prefix` outside the plugin's writable store grants, or with a `..`
//!   part, is one error line naming the plugin (exit 2), before any task; so is
//!   an event log whose objects lie inside the plugin's grant (the job's
//!   end would delete them), naming `job.log`, before anything is written;
//!   a grant in a bucket that does not exist is one line naming the store,
//!   the plugin and the bucket's absence (exit 1), before any task.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::events_object_log_ops::read_log;
use crate::sink_objects::{all_rows, objects};
use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, SINK, SOURCE, WordJob, expected_output, first_difference,
};
use crate::support::s3::{Seaweed, error_lines};
use crate::support::workers::{Workers, external_args, files_under, free_port};
use crate::support::{plugin_path, shuffle_table, toml_string};

const BUCKET: &str = "coordhost-shuffle";
/// The word count's source parallelism.
const SOURCES: u32 = 4;
/// The sink's parallelism (fixed: `auto` would decide from byte counts).
const SINKS: u32 = 6;

/// The word count of case `case`: log, partitions and answer as objects
/// under `s3://BUCKET/<case>/`. The `object-shuffle` entry's `prefix` is
/// `<case>/shuffle` and its writable store grant `grant` (that prefix
/// when `None`).
fn job(fx: &Fixture, case: &str, grant: Option<&str>) -> PathBuf {
    job_over(fx, case, &fx.input, case, grant)
}

/// As [`job`], over the `.txt` files of `input`, the `object-shuffle`
/// prefix (and grant) `<prefix_case>/shuffle`.
fn job_over(
    fx: &Fixture,
    case: &str,
    input: &Path,
    prefix_case: &str,
    grant: Option<&str>,
) -> PathBuf {
    let file = WordJob {
        sources: SOURCES,
        bytes_per_task: 22_000,
        sink_delay_us: 600,
        snapshot_min_pause_ms: 0,
        ..WordJob::new(input)
    }
    .write(&fx.path(&format!("{case}.toml")));
    let text = std::fs::read_to_string(&file).expect("read the job file");
    let prefix = format!("s3://{BUCKET}/{prefix_case}/shuffle");
    let local = shuffle_table("shuffle", "local-shuffle", "");
    assert!(text.contains(&local), "the word count's shuffle: {text}");
    let object = format!(
        "[plugins.shuffle]\ncomponent = {}\nkind = \"shuffle-master\"\nconfig = {{ prefix = \"{prefix}\" }}\nstores = [{{ url = \"{}\", writable = true }}]\n",
        toml_string(&plugin_path("object-shuffle").display().to_string()),
        grant.unwrap_or(&prefix),
    );
    let sink = r#"path = "${data_dir}/output/wordcount", separator = " ""#;
    assert!(text.contains(sink), "the word count's sink: {text}");
    let auto = "parallelism = \"auto\"\nmax-parallelism = 16\nbytes-per-task = 22000\n";
    assert!(text.contains(auto), "the word count's auto sink: {text}");
    let text = text
        .replace(&local, &object)
        .replace(
            sink,
            &format!(r#"path = "s3://{BUCKET}/{case}/out", separator = " ""#),
        )
        .replace(auto, &format!("parallelism = {SINKS}\n"))
        .replacen(
            "[job]\n",
            &format!("[job]\nlog = \"s3://{BUCKET}/{case}/log\"\n"),
            1,
        );
    std::fs::write(&file, text).expect("write the job file");
    file
}

/// A run of `job` on `data` with the server's `AWS_*` variables.
fn on(job: &Path, data: &Path, server: &Seaweed) -> Coordhost {
    let mut ch = Coordhost::new(job, data);
    ch.env = server.env();
    ch
}

/// The object log of `case`.
fn log_of(server: &Seaweed, case: &str) -> EventLog {
    read_log(server, &format!("s3://{BUCKET}/{case}/log")).expect("the object log")
}

/// Per source subtask, the location its latest recorded finish names.
fn source_locations(log: &EventLog) -> BTreeMap<u64, String> {
    log.events
        .iter()
        .filter(|e| e["event"]["kind"] == "ExecutionFinished")
        .map(|e| &e["event"]["event"])
        .filter(|b| b["attempt"]["job_vertex"] == SOURCE)
        .filter_map(|b| {
            Some((
                b["attempt"]["subtask"].as_u64()?,
                b["produced"][0]["location"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// Checks the answer objects of `case` against the word counts of the input.
fn assert_answer(server: &Seaweed, fx: &Fixture, case: &str) {
    assert_answer_of(server, case, &fx.input);
}

/// Checks the answer objects of `case` against the word counts of `input`.
fn assert_answer_of(server: &Seaweed, case: &str, input: &Path) {
    let out = objects(server, &format!("{case}/out"));
    assert_eq!(
        out.get("_SUCCESS").map(Vec::len),
        Some(0),
        "{case}: an empty _SUCCESS: {:?}",
        out.keys()
    );
    let got = all_rows(&out);
    let want = expected_output(input);
    assert!(got == want, "{case}: {}", first_difference(&got, &want));
}

/// Checks that nothing of `case`'s partitions is left: no object under the
/// prefix, no staged file under `data`'s staging folder.
fn assert_released(server: &Seaweed, case: &str, data: &Path) {
    let left = server.keys(&format!("{case}/shuffle/"));
    assert!(
        left.is_empty(),
        "{case}: partitions left after the job: {left:?}"
    );
    let mut staged = Vec::new();
    files_under(&data.join("wordcount/shuffle-staging"), &mut staged);
    assert!(staged.is_empty(), "{case}: staged files left: {staged:?}");
    assert!(
        !data.join("shuffle").exists(),
        "{case}: a local shuffle folder was made"
    );
}

/// After a pause, `case`'s object log if every source has finished in it
/// and the sink has not.
fn sources_done_sink_not(server: &Seaweed, case: &str) -> Option<EventLog> {
    std::thread::sleep(Duration::from_millis(50));
    read_log(server, &format!("s3://{BUCKET}/{case}/log")).filter(|l| {
        l.finished(SOURCE).len() == SOURCES as usize
            && l.finished(SINK).len() < SINKS as usize
            && l.count("JobFinished") == 0
    })
}

/// Starts `ch` and SIGKILLs it once every source has finished and the
/// sink has not (its log polled from the store); the log at the kill.
fn kill_after_sources(ch: &mut Coordhost, server: &Seaweed, case: &str) -> EventLog {
    let mut run = ch.start();
    let polled = run.poll_until(|| sources_done_sink_not(server, case));
    if let Err(why) = polled {
        panic!(
            "{case}: no moment with every source finished and the sink not: {why}\n{}",
            run.stderr_tail()
        );
    }
    match run.kill() {
        Kill::Killed { .. } => {}
        Kill::TooLate(f) => panic!("{case}: finished before the kill: {}", f.summary.brief()),
    }
    log_of(server, case)
}

#[test]
fn shuffle_objects_partitions_outlive_the_coordinator_and_a_lost_or_damaged_one_is_produced_again()
{
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);

    // 1. Uninterrupted. An object under the job's folder of partitions
    // that is not a partition stays when the job's partitions are deleted.
    let case = "plain";
    let data = fx.path("plain-data");
    let foreign = format!("{case}/shuffle/wordcount/README");
    server.put(&foreign, b"not a partition\n".to_vec());
    let end = on(&job(&fx, case, None), &data, &server).run_to_end();
    assert_eq!(end.summary.tasks_skipped(), 0, "{}", end.summary.brief());
    assert_answer(&server, &fx, case);
    let log = log_of(&server, case);
    let locations = source_locations(&log);
    assert_eq!(locations.len(), SOURCES as usize, "{locations:?}");
    let prefix = format!("s3://{BUCKET}/{case}/shuffle/wordcount/");
    assert!(
        locations.values().all(|l| l.starts_with(&prefix)),
        "every source partition is an object under {prefix}: {locations:?}"
    );
    let kept = server.keys(&format!("{case}/shuffle/"));
    assert!(
        kept.contains(&foreign),
        "{case}: {foreign} is not a partition and stays: {kept:?}"
    );
    server.delete(&foreign);
    assert_released(&server, case, &data);

    // 2. The coordinator SIGKILLed once the sources have finished, started
    // again on another data directory.
    let case = "elsewhere";
    let file = job(&fx, case, None);
    let at_kill = kill_after_sources(&mut on(&file, &fx.path("a"), &server), &server, case);
    let held = server.keys(&format!("{case}/shuffle/"));
    for (s, location) in source_locations(&at_kill) {
        for name in ["index", "data"] {
            let key = format!(
                "{}/{name}",
                location
                    .strip_prefix(&format!("s3://{BUCKET}/"))
                    .expect("in the bucket")
            );
            assert!(
                held.contains(&key),
                "{case}: source {s}'s {key} is there: {held:?}"
            );
        }
    }
    let end = on(&file, &fx.path("b"), &server).run_to_end();
    let summary = &end.summary;
    assert!(summary.recovered(), "{case}: {}", summary.brief());
    let recorded = (at_kill.finished(SOURCE).len() + at_kill.finished(SINK).len()) as u64;
    assert_eq!(
        summary.tasks_skipped(),
        recorded,
        "{case}: every task recorded finished is skipped, no other: {}",
        summary.0
    );
    assert_answer(&server, &fx, case);
    let log = log_of(&server, case);
    let again = log.finished_twice();
    assert!(again.is_empty(), "{case}: ran twice: {again:?}");
    assert_released(&server, case, &fx.path("b"));

    // 3. Behind the log: source 0's data overwritten, source 1's index
    // deleted. Both run again; the answer stays exact.
    let case = "damaged";
    let file = job(&fx, case, None);
    let data = fx.path("damaged-data");
    let mut ch = on(&file, &data, &server);
    let at_kill = kill_after_sources(&mut ch, &server, case);
    let locations = source_locations(&at_kill);
    let key = |s: u64, name: &str| {
        format!(
            "{}/{name}",
            locations[&s]
                .strip_prefix(&format!("s3://{BUCKET}/"))
                .expect("in the bucket")
        )
    };
    let mut bytes = server.get(&key(0, "data"));
    assert!(!bytes.is_empty(), "source 0 wrote data");
    for b in &mut bytes {
        *b ^= 0x5a;
    }
    server.put(&key(0, "data"), bytes);
    server.delete(&key(1, "index"));
    let end = ch.run_to_end();
    assert!(end.summary.recovered(), "{}", end.summary.brief());
    assert_answer(&server, &fx, case);
    let log = log_of(&server, case);
    let n = log.finish_counts();
    for s in [0, 1] {
        assert!(
            n.get(&(SOURCE.to_owned(), s)).copied().unwrap_or(0) >= 2,
            "{case}: source {s} ran again: {n:?}"
        );
    }
    assert_eq!(log.count("JobFinished"), 1, "{case}: one end");
    assert_released(&server, case, &data);

    // 4. Two runs of one job file (the same job name) over other inputs,
    // sharing the prefix, each SIGKILLed once its sources finished, then
    // each started again: each finds its own partitions, never the other's
    // (same ids, same sizes would pass every check of the index).
    let other = fx.path("other-input");
    std::fs::create_dir_all(&other).expect("the other input");
    let mut text = String::new();
    // Enough words that the sink phase outlasts the poll (about 10 000
    // distinct ones, 40 000 lines).
    for i in 0..40_000 {
        text.push_str(&format!("other w{} and v{}\n", i % 9973, (i * 7) % 4999));
    }
    std::fs::write(other.join("other.txt"), text).expect("the other input");
    let first = job_over(&fx, "twin-a", &fx.input, "twin", None);
    let second = job_over(&fx, "twin-b", &other, "twin", None);
    let mut a = on(&first, &fx.path("twin-a-data"), &server);
    let mut b = on(&second, &fx.path("twin-b-data"), &server);
    kill_after_sources(&mut a, &server, "twin-a");
    kill_after_sources(&mut b, &server, "twin-b");
    for (mut run, case, input) in [(a, "twin-a", &fx.input), (b, "twin-b", &other)] {
        let end = run.run_to_end();
        assert!(end.summary.recovered(), "{case}: {}", end.summary.brief());
        assert!(
            end.summary.tasks_skipped() >= u64::from(SOURCES),
            "{case}: its sources are skipped: {}",
            end.summary.brief()
        );
        assert_answer_of(&server, case, input);
    }
    let left = server.keys("twin/shuffle/");
    assert!(left.is_empty(), "twin: partitions left: {left:?}");
}

/// Runs case `case`'s job with every `from` in its file replaced by `to`
/// (at least once), expects exit `code` and one error line; that line.
fn refused_line(
    fx: &Fixture,
    server: &Seaweed,
    case: &str,
    from: &str,
    to: &str,
    code: i32,
) -> String {
    let file = job(fx, case, None);
    let text = std::fs::read_to_string(&file).expect("the job file");
    assert!(text.contains(from), "{case}: `{from}` in {text}");
    std::fs::write(&file, text.replace(from, to)).expect("write the job file");
    let refused = on(&file, &fx.path(&format!("{case}-data")), server)
        .start()
        .wait_exit();
    assert_eq!(refused.code, Some(code), "{case}: {}", refused.stderr);
    let lines = error_lines(&refused.stderr);
    assert_eq!(lines.len(), 1, "{case}: one line: {}", refused.stderr);
    lines[0].to_owned()
}

#[test]
fn shuffle_objects_a_lost_worker_costs_no_finished_producer_and_a_prefix_outside_the_grant_is_refused()
 {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);

    // A prefix outside the grant: one line, before any task.
    let case = "outside";
    let file = job(&fx, case, Some(&format!("s3://{BUCKET}/elsewhere")));
    let refused = on(&file, &fx.path("outside-data"), &server)
        .start()
        .wait_exit();
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    let lines = error_lines(&refused.stderr);
    assert_eq!(lines.len(), 1, "one line: {}", refused.stderr);
    let prefix = format!("s3://{BUCKET}/{case}/shuffle");
    assert!(
        lines[0].contains("shuffle")
            && lines[0].contains(&prefix)
            && lines[0].contains("writable store grants"),
        "names the plugin, the prefix and the rule: {}",
        lines[0]
    );
    // (Its event log records the refused start, as for any plugin.)
    for place in ["shuffle", "out"] {
        let keys = server.keys(&format!("{case}/{place}/"));
        assert!(keys.is_empty(), "nothing under {place}/: {keys:?}");
    }

    // The shuffle master's grant in a bucket that does not exist: one line
    // naming the store, the plugin and the grant before any task (exit 1,
    // the run's storage), not producers failing one by one.
    let case = "no-bucket";
    let place = format!("s3://{BUCKET}/{case}/shuffle");
    let line = refused_line(
        &fx,
        &server,
        case,
        &place,
        "s3://no-such-bucket-here/shuffle",
        1,
    );
    assert!(
        line.contains("result partitions: object store")
            && line.contains("shuffle master `shuffle`")
            && line.contains("the bucket does not exist"),
        "names the store, the plugin and the bucket: {line}"
    );

    // A prefix with a `..` part inside the grant: refused at create too.
    let case = "dots";
    let line = refused_line(
        &fx,
        &server,
        case,
        &format!("prefix = \"s3://{BUCKET}/{case}/shuffle\""),
        &format!("prefix = \"s3://{BUCKET}/{case}/shuffle/../elsewhere\""),
        2,
    );
    assert!(
        line.contains("shuffle") && line.contains("not a plain"),
        "names the plugin and the rule: {line}"
    );

    // The event log inside the shuffle master's grant (where its
    // unregister-job would delete it): refused, naming the field and the
    // plugin, before any object is written.
    let case = "log-inside";
    let line = refused_line(
        &fx,
        &server,
        case,
        &format!("log = \"s3://{BUCKET}/{case}/log\""),
        &format!("log = \"s3://{BUCKET}/{case}/shuffle/wordcount\""),
        2,
    );
    assert!(
        line.contains("field `job.log`")
            && line.contains("plugin `shuffle`")
            && line.contains(&format!("s3://{BUCKET}/{case}/shuffle")),
        "names the field, the plugin and its grant: {line}"
    );
    let keys = server.keys(&format!("{case}/"));
    assert!(keys.is_empty(), "nothing written: {keys:?}");

    // 3 workers; the worker of source 0 SIGKILLed once every source has finished.
    let case = "worker-kill";
    let addr = free_port();
    let mut workers = Workers::start_with_env(3, &addr, &fx.path("workers"), 2, server.env());
    let file = job(&fx, case, None);
    let mut ch = on(&file, &fx.path("coordinator"), &server);
    ch.extra_args = external_args(&addr, 3, 5000);
    ch.log = Some("warn,coordhost::remote=info");
    let mut run = ch.start();
    let polled = run.poll_until(|| sources_done_sink_not(&server, case));
    if let Err(why) = polled {
        panic!(
            "{case}: no moment with every source finished and the sink not: {why}\n{}\n{}",
            run.stderr_tail(),
            workers.logs()
        );
    }
    // The worker that ran source 0 (the coordinator's `deploying` line).
    let err = std::fs::read_to_string(fx.path("coordinator.run1.err")).expect("the run's stderr");
    let victim: usize = err
        .lines()
        .filter(|l| l.contains("deploying") && l.contains(&format!("vertex={SOURCE}")))
        .find_map(|l| {
            let id = l.split_once("worker=w")?.1;
            id.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("{case}: no source deployed in:\n{err}"));
    workers.kill(victim);
    let exited = run.wait_exit();
    assert_eq!(
        exited.code,
        Some(0),
        "{case}: {}\n{}",
        exited.stderr,
        workers.logs()
    );
    assert_answer(&server, &fx, case);
    let log = log_of(&server, case);
    let again = log.finished_twice();
    assert!(
        again.is_empty(),
        "{case}: no finished task ran again after w{victim}'s loss: {again:?}"
    );
    let left = server.keys(&format!("{case}/shuffle/"));
    assert!(left.is_empty(), "{case}: partitions left: {left:?}");
    let mut on_disks = Vec::new();
    for i in (0..3).filter(|&i| i != victim) {
        files_under(&workers.data_dir(i), &mut on_disks);
    }
    assert!(
        !on_disks
            .iter()
            .any(|f| f.components().any(|c| c.as_os_str() == "partitions")),
        "{case}: no partition file on a worker's disk: {on_disks:?}"
    );
}
