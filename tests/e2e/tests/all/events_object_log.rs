//! Issue 30, first slice: the job event log on S3-compatible object storage
//! (docs/object-storage.md), against a real SeaweedFS server (`weed mini`,
//! support/s3.rs) and the real `coordhost` binary: a job whose log lives
//! under `--log s3://...` runs, is SIGKILLed, recovers and skips what
//! finished; `log inspect s3://...`; two writers racing for the next
//! object; objects deleted, overwritten or cut short behind the log's back;
//! a store that is unreachable, refuses the credentials or has no bucket.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use coordhost::events::{
    EventLogWriter, JobEvent, JobStarted, ObjectLogUrl, ObjectStorage, WriterOptions,
};
use object_store::aws::AmazonS3Builder;

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, SOURCE, WordJob, expected_output, first_difference,
    log_dir, sorted_output,
};
use crate::support::s3::{ACCESS_KEY, SECRET_KEY, Seaweed, error_lines};
use crate::support::segment_files;

const BUCKET: &str = "coordhost-logs";

/// `coordhost log inspect URL [--json]` with the server's variables.
fn inspect(server: &Seaweed, url: &str, json: bool) -> std::process::Output {
    let mut command = crate::support::coordhost();
    command.envs(server.env()).args(["log", "inspect", url]);
    if json {
        command.arg("--json");
    }
    command.output().expect("spawn coordhost log inspect")
}

/// The log at `url` as `log inspect --json` prints it; `None` while there
/// is none.
fn read_log(server: &Seaweed, url: &str) -> Option<EventLog> {
    let out = inspect(server, url, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        assert!(
            stderr.contains("no event log"),
            "log inspect {url} failed ({}): {stderr}",
            out.status
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

/// A coordhost command on `job` with its log at `url` on `server`.
fn on_objects(job: &Path, data: &Path, server: &Seaweed, url: &str) -> Coordhost {
    let mut ch = Coordhost::new(job, data);
    ch.extra_args = vec!["--log".into(), url.into()];
    ch.env = server.env();
    ch
}

#[test]
fn events_object_log_a_killed_job_recovers_from_its_log_on_objects() {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let url = format!("s3://{BUCKET}/jobs/wordcount");
    let job = WordJob::new(&fx.input);
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut ch = on_objects(&file, &data, &server, &url);

    let mut run = ch.start();
    run.poll_until(|| {
        std::thread::sleep(Duration::from_millis(150));
        read_log(&server, &url).filter(|l| l.finished(SOURCE).len() == job.sources as usize)
    })
    .expect("every source subtask finished before the job did");
    assert!(matches!(run.kill(), Kill::Killed { .. }), "killed mid-run");

    let log = read_log(&server, &url).expect("a log on objects");
    assert_eq!(log.segments, [0], "one coordinator attempt so far");
    assert!(
        segment_files(&log_dir(&data)).is_empty(),
        "no local segment: the log is on objects"
    );
    let objects = server.keys("jobs/wordcount/log");
    assert!(
        objects.len() >= 3
            && objects[0] == "jobs/wordcount/log/00000000000000000000"
            && objects
                .iter()
                .all(|k| k.len() == "jobs/wordcount/log/".len() + 20),
        "{objects:?}"
    );

    let done = ch.run_to_end();
    assert!(done.summary.recovered(), "{}", done.summary.brief());
    assert!(
        done.summary.tasks_skipped() >= u64::from(job.sources),
        "the finished sources are skipped: {}",
        done.summary.brief()
    );
    assert_output(&data, &fx.input);

    let log = read_log(&server, &url).expect("the log");
    assert_eq!(log.segments, [0, 1]);
    assert_eq!(log.count("RecoveryFinished"), 1);
    assert_eq!(log.count("JobFinished"), 1);
    let text = inspect(&server, &url, false);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("event log {url}/log"))
            && text.contains("segment 00000001 newest")
            && text.contains("JobFinished"),
        "{text}"
    );
}

#[test]
fn events_object_log_damage_behind_the_logs_back_is_named_never_replayed() {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let url = format!("s3://{BUCKET}/damage");
    let mut job = WordJob::new(&fx.input);
    job.source_delay_us = 0;
    job.sink_delay_us = 0;
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut ch = on_objects(&file, &data, &server, &url);
    ch.run_to_end();
    assert_output(&data, &fx.input);
    let keys = server.keys("damage/log");
    let log_objects: Vec<&String> = keys.iter().filter(|k| !k.contains("snapshot-")).collect();
    assert!(log_objects.len() >= 3, "{keys:?}");
    let middle = log_objects[1].clone();
    let last = log_objects[log_objects.len() - 1].clone();
    let kept = server.get(&middle);
    let middle_url = format!("s3://{BUCKET}/{middle}");

    let mut refused = |what: &str, says: &str| {
        let out = inspect(&server, &url, false);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{what}: inspect refuses");
        assert!(
            stderr.contains(&middle_url) && stderr.contains(says),
            "{what}: names {middle_url} and says `{says}`: {stderr}"
        );
        let rerun = ch.start().wait_exit();
        assert!(
            matches!(rerun.code, Some(c) if c != 0),
            "{what}: run exits non-zero: {}",
            rerun.stderr
        );
        let lines = error_lines(&rerun.stderr);
        assert!(
            lines.len() == 1 && lines[0].contains(&middle_url) && lines[0].contains(says),
            "{what}: one line naming the object: {}",
            rerun.stderr
        );
    };

    server.delete(&middle);
    refused("deleted", "is missing");
    let mut flipped = kept.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x20;
    server.put(&middle, flipped);
    refused("overwritten", "CRC32C does not match");
    server.put(&middle, kept[..kept.len() - 3].to_vec());
    refused("cut short", "cut short");
    server.put(&middle, server.get(&last));
    refused("replaced by another object", "it says it is object");

    // Put back, the log reads again and nothing was added by the refusals.
    server.put(&middle, kept);
    let log = read_log(&server, &url).expect("the log reads again");
    assert_eq!(log.segments, [0], "the refused runs wrote nothing");
    assert_eq!(log.count("JobFinished"), 1);
}

#[test]
fn events_object_log_of_two_writers_racing_for_the_next_object_one_is_refused() {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let url = ObjectLogUrl::parse(&format!("s3://{BUCKET}/race")).expect("url");
    let storage = || {
        let builder = AmazonS3Builder::new()
            .with_endpoint(server.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY);
        Arc::new(ObjectStorage::connect_from(&url, builder, server.endpoint()).expect("client"))
    };
    let started = |n: u32| {
        JobEvent::JobStarted(JobStarted {
            job_id: format!("race-{n}"),
            graph_fingerprint: "f".repeat(64),
            recovery_enabled: true,
        })
    };
    let options = WriterOptions {
        flush_interval: None,
        ..WriterOptions::default()
    };

    // A leads; B takes the log over (its segment start is the next
    // object); A's next group commit finds its object taken and stops.
    let (a, replay) = EventLogWriter::open(storage(), options).expect("A opens");
    assert!(replay.is_empty());
    a.append_durable(&started(0)).expect("A writes");
    let (b, replay) = EventLogWriter::open(storage(), options).expect("B opens");
    assert_eq!(replay.events.len(), 1, "B replays what A made durable");
    let fenced = a
        .append_durable(&started(1))
        .expect_err("A is fenced off")
        .to_string();
    assert!(
        fenced.contains("already exists") && fenced.contains("fenced off"),
        "{fenced}"
    );
    b.append_durable(&started(2)).expect("B goes on");
    drop(a);
    b.close().expect("B closes");

    // C and D replay the same log and race for the same next object: one
    // segment start is created, the other refused.
    let (c, d) = (storage(), storage());
    let replay_c = coordhost::events::replay(&*c).expect("C replays");
    let replay_d = coordhost::events::replay(&*d).expect("D replays");
    assert_eq!(replay_c, replay_d);
    let won = EventLogWriter::start_segment(c, &replay_c, options).expect("C creates");
    let lost = EventLogWriter::start_segment(d, &replay_d, options)
        .expect_err("D is refused")
        .to_string();
    assert!(
        lost.contains("already exists") && lost.contains("race/log/0000000000000000000"),
        "{lost}"
    );
    won.append_durable(&started(3)).expect("C writes");
    won.close().expect("C closes");

    let replay = coordhost::events::replay(&*storage()).expect("the log replays");
    let jobs: Vec<String> = replay
        .iter_events()
        .map(|e| match e {
            JobEvent::JobStarted(s) => s.job_id.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        jobs,
        ["race-0", "race-2", "race-3"],
        "the loser wrote nothing"
    );
    assert_eq!(
        replay
            .segments
            .iter()
            .map(|s| s.attempt)
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
}

#[test]
fn events_object_log_an_unreachable_store_bad_credentials_or_no_bucket_is_one_line() {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let job = WordJob::new(&fx.input);
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let run = |env: Vec<(String, String)>, url: &str, more: &[&str]| {
        let mut ch = Coordhost::new(&file, &data);
        ch.extra_args = ["--log", url]
            .iter()
            .chain(more)
            .map(|s| s.to_string())
            .collect();
        ch.env = env;
        ch.start().wait_exit()
    };
    let with = |key: &str, value: &str| {
        let mut env = server.env();
        env.retain(|(k, _)| k != key);
        env.push((key.to_owned(), value.to_owned()));
        env
    };
    let good = format!("s3://{BUCKET}/faults");

    let nobody = {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        format!("http://127.0.0.1:{}", l.local_addr().expect("addr").port())
    };
    let cases = [
        (
            "unreachable",
            with("AWS_ENDPOINT_URL", &nobody),
            good.clone(),
            nobody.clone(),
            "cannot be reached",
        ),
        (
            "wrong secret",
            with("AWS_SECRET_ACCESS_KEY", "not-the-secret-9f2e"),
            good.clone(),
            server.endpoint(),
            "refused the credentials",
        ),
        (
            "unknown key",
            with("AWS_ACCESS_KEY_ID", "nobody-key-7d1"),
            good.clone(),
            server.endpoint(),
            "refused the credentials",
        ),
        (
            "no bucket",
            server.env(),
            "s3://no-such-bucket-here/faults".to_owned(),
            server.endpoint(),
            "bucket does not exist",
        ),
    ];
    for (what, env, url, endpoint, says) in cases {
        let exited = run(env, &url, &[]);
        assert_eq!(exited.code, Some(1), "{what}: {}", exited.stderr);
        let lines = error_lines(&exited.stderr);
        assert!(
            lines.len() == 1 && lines[0].contains(&endpoint) && lines[0].contains(says),
            "{what}: one line naming {endpoint} and saying `{says}`: {}",
            exited.stderr
        );
        for secret in [SECRET_KEY, "not-the-secret-9f2e"] {
            assert!(!exited.stderr.contains(secret), "{what}: a secret printed");
        }
    }
    assert!(
        server.keys("faults").is_empty(),
        "no refused run wrote anything"
    );
    assert!(
        !data.join(crate::support::crash::JOB).exists(),
        "no refused run left a job folder"
    );

    let refused = run(server.env(), "s3://Bad_Bucket/x", &[]);
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("bucket name `Bad_Bucket`"),
        "{}",
        refused.stderr
    );
}

#[test]
fn events_object_log_snapshot_side_objects_round_trip_and_damage_is_named() {
    use coordhost::events::Storage as _;
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let url = ObjectLogUrl::parse(&format!("s3://{BUCKET}/side")).expect("url");
    let builder = AmazonS3Builder::new()
        .with_endpoint(server.endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY);
    let storage = ObjectStorage::connect_from(&url, builder, server.endpoint()).expect("client");
    let name = "snapshot-00000000-00000001.state";
    let state: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let file = storage.write_side_file(name, &state).expect("written");
    assert_eq!((file.len, file.crc32c), (3000, crc32c_of(&state)));
    assert_eq!(storage.read_side_file(&file).expect("read"), state);
    assert_eq!(storage.list_side_files().expect("listed"), [name]);
    // Written again with the same bytes (a retried write whose first answer
    // was lost) is the same object; other bytes never replace it.
    storage
        .write_side_file(name, &state)
        .expect("the same bytes again");
    let mut other = state.clone();
    other[0] ^= 1;
    let again = storage
        .write_side_file(name, &other)
        .expect_err("a side object is never replaced")
        .to_string();
    assert!(
        again.contains(name) && again.contains("exists already"),
        "{again}"
    );

    let key = format!("side/log/{name}");
    let mut damaged = state.clone();
    damaged[1234] ^= 1;
    server.put(&key, damaged);
    let error = storage
        .read_side_file(&file)
        .expect_err("damage")
        .to_string();
    assert!(
        error.contains("CRC32C") && error.contains(&format!("s3://{BUCKET}/{key}")),
        "{error}"
    );
    server.put(&key, state[..10].to_vec());
    let error = storage
        .read_side_file(&file)
        .expect_err("short")
        .to_string();
    assert!(
        error.contains("is 10 bytes; its record says 3000"),
        "{error}"
    );
    storage.remove_side_file(name);
    let error = storage.read_side_file(&file).expect_err("gone").to_string();
    assert!(error.contains("is missing"), "{error}");
    assert!(storage.list_side_files().expect("listed").is_empty());
}

/// CRC32C (Castagnoli), bit by bit: the test's own, not the host's.
fn crc32c_of(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
