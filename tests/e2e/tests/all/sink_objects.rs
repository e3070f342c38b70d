//! Issue 30, item 1: sink output on object storage (docs/object-storage.md,
//! "Sink output"), through the real `coordhost` binary against a real
//! SeaweedFS (support/s3.rs). The crash tests' word count writes with
//! `write-text` to `s3://BUCKET/PREFIX` (its event log in the data
//! directory): the parts and `_SUCCESS` are objects with exactly the
//! expected rows; a coordinator SIGKILLed after some parts were published
//! restarts, recovers and ends with the objects of an uninterrupted run, as
//! does a run on two worker processes (which have no credentials);
//! `part-*` objects the job did not write are refused (exit 2, naming one),
//! cleared by `overwrite = true`; a missing bucket, a wrong secret and an
//! unreachable endpoint are one line each (exit 1, no secret), a sink URL
//! with a bad bucket name or inside a plugin's store grant the job file's
//! line (exit 2); a SQL job's part
//! above 8 MiB is uploaded in parts, byte for byte; a store that answers
//! nothing but 503 for seconds while parts are published (longer than the
//! client's own retries) costs a pause, not the run: exact output.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::crash::{
    Coordhost, EventLog, Fixture, Kill, SINK, WordJob, expected_output, first_difference, log_dir,
};
use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::s3::{SECRET_KEY, Seaweed, error_lines};
use crate::support::workers::{Workers, external_args, free_port};

const BUCKET: &str = "coordhost-out";

/// The word count of the crash tests with its sink at `url` (and
/// `overwrite = true` when asked): [`SINKS`] slowed sink subtasks, a
/// snapshot with every finish (so every recorded sink can be skipped).
fn job(fx: &Fixture, name: &str, url: &str, overwrite: bool) -> PathBuf {
    let file = WordJob {
        bytes_per_task: 22_000,
        sink_delay_us: 600,
        snapshot_min_pause_ms: 0,
        ..WordJob::new(&fx.input)
    }
    .write(&fx.path(name));
    let text = std::fs::read_to_string(&file).expect("read the job file");
    let folder = r#"path = "${data_dir}/output/wordcount", separator = " ""#;
    assert!(text.contains(folder), "the word count's sink: {text}");
    let sink = format!(
        r#"path = "{url}", separator = " "{}"#,
        if overwrite { ", overwrite = true" } else { "" }
    );
    // A fixed sink parallelism: which part a word lands in is then its
    // hash's alone (`auto` decides from byte counts, which vary with the
    // split placement), so parts of two runs compare one by one.
    let auto = "parallelism = \"auto\"\nmax-parallelism = 16\nbytes-per-task = 22000\n";
    assert!(text.contains(auto), "the word count's auto sink: {text}");
    let text = text.replace(auto, &format!("parallelism = {SINKS}\n"));
    std::fs::write(&file, text.replace(folder, &sink)).expect("write the job file");
    file
}

/// The sink's parallelism.
const SINKS: u32 = 6;

/// A run of `job` on `data` with the server's `AWS_*` variables.
fn on(job: &Path, data: &Path, server: &Seaweed) -> Coordhost {
    let mut ch = Coordhost::new(job, data);
    ch.env = server.env();
    ch
}

/// The objects directly under `prefix/`: name → bytes.
pub(crate) fn objects(server: &Seaweed, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    server
        .keys(&format!("{prefix}/"))
        .into_iter()
        .filter_map(|key| {
            let name = key.strip_prefix(&format!("{prefix}/"))?.to_owned();
            (!name.contains('/')).then(|| (name, server.get(&key)))
        })
        .collect()
}

/// Each part's rows, sorted (a part's row order is the hash table's).
fn parts(objects: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<String>> {
    objects
        .iter()
        .filter(|(name, _)| name.starts_with("part-"))
        .map(|(name, bytes)| {
            let mut rows: Vec<String> = String::from_utf8_lossy(bytes)
                .lines()
                .map(str::to_owned)
                .collect();
            rows.sort();
            (name.clone(), rows)
        })
        .collect()
}

/// Every row of every part, sorted, as one text; checks no word is there
/// twice.
pub(crate) fn all_rows(objects: &BTreeMap<String, Vec<u8>>) -> String {
    let mut rows: Vec<String> = parts(objects).into_values().flatten().collect();
    rows.sort();
    let mut words = BTreeSet::new();
    for row in &rows {
        let word = row.split_once(' ').map_or(row.as_str(), |(w, _)| w);
        assert!(words.insert(word.to_owned()), "`{word}` appears twice");
    }
    let mut text = rows.join("\n");
    text.push('\n');
    text
}

#[test]
fn sink_objects_output_is_exact_and_a_killed_coordinator_leaves_no_duplicate_or_stale_part() {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let want = expected_output(&fx.input);

    // Uninterrupted.
    let plain_data = fx.path("plain");
    let plain_job = job(
        &fx,
        "plain.toml",
        &format!("s3://{BUCKET}/out/plain"),
        false,
    );
    let plain = on(&plain_job, &plain_data, &server).run_to_end();
    let sinks = plain.summary.parallelism(SINK);
    assert_eq!(sinks, SINKS, "{}", plain.summary.brief());
    let reference = objects(&server, "out/plain");
    let mut names: Vec<&String> = reference.keys().collect();
    names.retain(|n| n.as_str() != "_SUCCESS");
    let expected_names: Vec<String> = (0..sinks).map(|s| format!("part-{s:05}.txt")).collect();
    assert_eq!(
        names,
        expected_names.iter().collect::<Vec<_>>(),
        "one part object per sink subtask"
    );
    assert_eq!(
        reference.get("_SUCCESS").map(Vec::len),
        Some(0),
        "an empty _SUCCESS object: {:?}",
        reference.keys()
    );
    let got = all_rows(&reference);
    assert!(got == want, "{}", first_difference(&got, &want));
    assert!(
        !plain_data.join("output").exists(),
        "nothing written to a local output folder"
    );
    assert!(
        !plain_data.join("wordcount/sink-staging").exists(),
        "the local staging folder is removed with _SUCCESS"
    );

    // SIGKILLed once some but not all parts are published and recorded.
    let data = fx.path("killed");
    let killed_job = job(
        &fx,
        "killed.toml",
        &format!("s3://{BUCKET}/out/killed"),
        false,
    );
    let mut ch = on(&killed_job, &data, &server);
    let mut run = ch.start();
    let polled = run.poll_until(|| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let keys = server.keys("out/killed/");
        let published = keys.iter().filter(|k| k.contains("/part-")).count();
        if published == 0 || keys.iter().any(|k| k.ends_with("/_SUCCESS")) {
            return None;
        }
        EventLog::read(&data).filter(|log| !log.finished(SINK).is_empty())
    });
    let log_at_kill = polled.unwrap_or_else(|why| {
        panic!(
            "no moment with some but not all parts published: {why}\n{}",
            run.stderr_tail()
        )
    });
    assert!(
        matches!(run.kill(), Kill::Killed { .. }),
        "the job finished before the kill"
    );
    let at_kill = objects(&server, "out/killed");
    assert!(!at_kill.contains_key("_SUCCESS"), "no _SUCCESS at the kill");
    let parts_at_kill = parts(&at_kill).len();
    assert!(
        parts_at_kill >= 1 && parts_at_kill < sinks as usize,
        "some but not all of the {sinks} parts published at the kill: {:?}",
        at_kill.keys()
    );
    eprintln!(
        "killed with {parts_at_kill} of {sinks} parts published, {} sink finishes recorded",
        log_at_kill.finished(SINK).len()
    );

    let finale = ch.run_to_end();
    assert!(finale.summary.recovered(), "{}", finale.summary.brief());
    assert!(
        finale.summary.tasks_skipped() >= log_at_kill.finished(SINK).len() as u64,
        "the recorded sinks are skipped: {}",
        finale.summary.brief()
    );
    let after = objects(&server, "out/killed");
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        reference.keys().collect::<Vec<_>>(),
        "the same objects as the uninterrupted run's (no stale or extra part)"
    );
    let got = all_rows(&after);
    assert!(got == want, "{}", first_difference(&got, &want));
    let (after_parts, reference_parts) = (parts(&after), parts(&reference));
    for (name, rows) in &reference_parts {
        assert!(
            after_parts.get(name) == Some(rows),
            "{name} holds other rows than the uninterrupted run's"
        );
    }
    assert_eq!(after.get("_SUCCESS").map(Vec::len), Some(0));
    let log = EventLog::read(&data).expect("the event log");
    assert_eq!(log.count("JobFinished"), 1, "one end of the job");
    assert!(
        !data.join("wordcount/sink-staging").exists(),
        "the staging folder is gone after _SUCCESS"
    );

    // On 2 worker processes without any `AWS_*` variable: they stage, the
    // coordinator fetches each part and uploads it.
    let addr = free_port();
    let workers = Workers::start(2, &addr, &fx.path("workers"), 2);
    let workers_job = job(
        &fx,
        "workers.toml",
        &format!("s3://{BUCKET}/out/workers"),
        false,
    );
    let mut ch = on(&workers_job, &fx.path("workers-data"), &server);
    ch.extra_args = external_args(&addr, 2, 5000);
    let run = ch.start();
    let exited = run.wait_exit();
    assert_eq!(
        exited.code,
        Some(0),
        "{}\n{}",
        exited.stderr,
        workers.logs()
    );
    let on_workers = objects(&server, "out/workers");
    assert_eq!(
        on_workers.get("_SUCCESS").map(Vec::len),
        Some(0),
        "{:?}",
        on_workers.keys()
    );
    // Which rows a part holds depends on the placement, not the rows.
    let got = all_rows(&on_workers);
    assert!(got == want, "{}", first_difference(&got, &want));
    assert!(
        !fx.path("workers-data")
            .join("wordcount/sink-staging")
            .exists(),
        "the coordinator's staging folder is gone after _SUCCESS"
    );
}

/// A SQL job over one CSV file in `input`, one task per stage, that
/// writes its table back as CSV to `url`.
fn sql_job(dir: &Path, input: &Path, url: &str) -> PathBuf {
    let plugin = |n: &str| crate::support::plugin_path(n).display().to_string();
    let text = format!(
        r#"[job]
name = "copy"
parallelism = 1
sql = "SELECT k, v FROM t"

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{files}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = 100000000, pattern = ".csv" }}
dirs = [{{ path = "{input}", writable = false }}]

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

[tables.t]
plugin = "files"
format = "csv"
header = true
schema = {{ k = "varchar", v = "varchar" }}

[sink]
path = "{url}"
format = "csv"
"#,
        files = plugin("file-enumerator"),
        shuffle = plugin("local-shuffle"),
        input = input.display(),
    );
    let file = dir.join("copy.toml");
    std::fs::write(&file, text).expect("write the SQL job file");
    file
}

#[test]
fn sink_objects_foreign_parts_are_refused_overwrite_clears_them_a_missing_bucket_is_one_line_and_a_large_part_goes_in_parts()
 {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let url = format!("s3://{BUCKET}/out/shared");
    server.put("out/shared/part-00099.txt", b"stale 1\n".to_vec());
    server.put("out/shared/README", b"not output\n".to_vec());
    let before = server.keys("out/shared/");

    // A prefix holding a part this job did not write: refused.
    let data = fx.path("data");
    let refused = on(&job(&fx, "job.toml", &url, false), &data, &server)
        .start()
        .wait_exit();
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    let lines = error_lines(&refused.stderr);
    assert_eq!(lines.len(), 1, "one line: {}", refused.stderr);
    assert!(
        lines[0].contains(&url)
            && lines[0].contains("`part-00099.txt`")
            && lines[0].contains("which this job did not write")
            && lines[0].contains("overwrite = true"),
        "{}",
        lines[0]
    );
    assert_eq!(server.keys("out/shared/"), before, "nothing written");
    assert!(!log_dir(&data).exists(), "no event log made");

    // `overwrite = true`: the fresh run deletes the stale part, keeps the
    // object that is not output, and writes the job's own.
    let finished = on(&job(&fx, "overwrite.toml", &url, true), &data, &server).run_to_end();
    let after = objects(&server, "out/shared");
    assert!(!after.contains_key("part-00099.txt"), "{:?}", after.keys());
    assert_eq!(
        after.get("README").map(Vec::as_slice),
        Some(&b"not output\n"[..])
    );
    assert_eq!(after.get("_SUCCESS").map(Vec::len), Some(0));
    assert_eq!(
        parts(&after).len(),
        finished.summary.parallelism(SINK) as usize,
        "{:?}",
        after.keys()
    );
    let got = all_rows(&after);
    let want = expected_output(&fx.input);
    assert!(got == want, "{}", first_difference(&got, &want));

    // A bucket that does not exist: one line naming it and the endpoint,
    // exit 1, nothing made in the data directory, no secret printed.
    let missing = fx.path("missing");
    let url = "s3://no-such-bucket-here/out";
    let exited = on(&job(&fx, "missing.toml", url, false), &missing, &server)
        .start()
        .wait_exit();
    assert_eq!(exited.code, Some(1), "{}", exited.stderr);
    let lines = error_lines(&exited.stderr);
    assert_eq!(lines.len(), 1, "one line: {}", exited.stderr);
    assert!(
        lines[0].contains(url)
            && lines[0].contains(&server.endpoint())
            && lines[0].contains("the bucket does not exist"),
        "{}",
        lines[0]
    );
    assert!(!exited.stderr.contains(SECRET_KEY), "{}", exited.stderr);
    assert!(!log_dir(&missing).exists(), "no event log made");

    // A wrong secret and an endpoint nobody listens on: the same one line,
    // exit 1, without the secret; a sink URL that is not one: the job
    // file's line, exit 2.
    let url = format!("s3://{BUCKET}/out/denied");
    let file = job(&fx, "denied.toml", &url, false);
    let wrong = "a-wrong-secret-0042";
    let unreachable = "http://127.0.0.1:1";
    for (var, value, said) in [
        (
            "AWS_SECRET_ACCESS_KEY",
            wrong,
            "the store refused the credentials",
        ),
        ("AWS_ENDPOINT_URL", unreachable, "cannot be reached"),
    ] {
        let mut ch = on(&file, &fx.path("denied"), &server);
        for (k, v) in &mut ch.env {
            if k == var {
                *v = value.to_owned();
            }
        }
        let exited = ch.start().wait_exit();
        assert_eq!(exited.code, Some(1), "{var}: {}", exited.stderr);
        let lines = error_lines(&exited.stderr);
        assert_eq!(lines.len(), 1, "one line: {}", exited.stderr);
        assert!(
            lines[0].contains(&url) && lines[0].contains(said),
            "{var}: {}",
            lines[0]
        );
        if var == "AWS_ENDPOINT_URL" {
            assert!(lines[0].contains(unreachable), "{}", lines[0]);
        }
        assert!(
            !exited.stderr.contains(wrong) && !exited.stderr.contains(SECRET_KEY),
            "no secret printed: {}",
            exited.stderr
        );
    }
    assert!(server.keys("out/denied/").is_empty(), "nothing written");
    // A sink prefix inside a plugin's store grant: the job file's line.
    let granted = job(&fx, "granted.toml", &format!("s3://{BUCKET}/in/out"), false);
    let text = std::fs::read_to_string(&granted).expect("read");
    let text = text.replacen(
        "pattern = \".txt\" }\n",
        &format!("pattern = \".txt\" }}\nstores = [{{ url = \"s3://{BUCKET}/in\" }}]\n"),
        1,
    );
    assert!(text.contains("stores = ["), "{text}");
    std::fs::write(&granted, text).expect("write");
    let exited = on(&granted, &fx.path("granted"), &server)
        .start()
        .wait_exit();
    assert_eq!(exited.code, Some(2), "{}", exited.stderr);
    let lines = error_lines(&exited.stderr);
    assert!(
        lines.len() == 1
            && lines[0].contains("field `vertices[1].operators[1].path`")
            && lines[0].contains("a store granted to plugin `files`"),
        "{}",
        exited.stderr
    );
    let bad = on(
        &job(&fx, "bad.toml", "s3://Bad_Bucket/out", false),
        &fx.path("bad"),
        &server,
    )
    .start()
    .wait_exit();
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    let lines = error_lines(&bad.stderr);
    assert!(
        lines.len() == 1
            && lines[0].contains("bad.toml")
            && lines[0].contains("field `vertices[1].operators[1].path`")
            && lines[0].contains("s3://Bad_Bucket/out"),
        "{}",
        bad.stderr
    );

    // A SQL job whose one part is above 8 MiB: a multipart upload (its
    // ETag says how many parts) holding exactly the rows.
    let input = fx.path("big");
    std::fs::create_dir_all(&input).expect("input folder");
    let mut csv = String::from("k,v\n");
    let mut rows = Vec::new();
    for i in 0..180_000_u32 {
        let row = format!("key-{i:07},value-{:040}", u64::from(i) * 7919);
        csv.push_str(&row);
        csv.push('\n');
        rows.push(row);
    }
    std::fs::write(input.join("t.csv"), &csv).expect("write the input");
    let url = format!("s3://{BUCKET}/out/sql");
    on(
        &sql_job(fx.tmp.path(), &input, &url),
        &fx.path("sql"),
        &server,
    )
    .run_to_end();
    let out = objects(&server, "out/sql");
    assert_eq!(
        out.keys().collect::<Vec<_>>(),
        ["_SUCCESS", "part-00000.csv"],
        "one part and _SUCCESS"
    );
    let part = &out["part-00000.csv"];
    assert!(part.len() as u64 > 8 << 20, "{} bytes", part.len());
    let text = String::from_utf8_lossy(part);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("k,v"), "the header first");
    let mut got: Vec<&str> = lines.collect();
    got.sort_unstable();
    assert!(got == rows, "the part holds exactly the input's rows");
    let client = server.client();
    let meta = server
        .block(async move {
            use object_store::ObjectStoreExt as _;
            client
                .head(&object_store::path::Path::from("out/sql/part-00000.csv"))
                .await
        })
        .expect("head the part");
    let etag = meta.e_tag.unwrap_or_default();
    assert!(
        etag.trim_matches('"').ends_with("-2"),
        "a multipart upload of 2 parts (8 MiB and the rest): ETag {etag}"
    );
}

#[test]
fn sink_objects_a_store_answering_only_503_while_parts_are_published_costs_a_pause_not_the_run() {
    let fx = Fixture::words();
    let server = Seaweed::start(&fx.path("seaweed"), BUCKET);
    let (proxy, through_proxy) = FaultProxy::in_front_of(&server);
    let file = job(&fx, "job.toml", &format!("s3://{BUCKET}/out/flaky"), false);
    let data = fx.path("data");
    let mut ch = Coordhost::new(&file, &data);
    ch.env = through_proxy;
    let mut run = ch.start();
    // The window opens with the first part published (the others and
    // `_SUCCESS` are still to come) and lasts longer than the client's
    // own retries (3 within about a second).
    run.poll_until(|| {
        std::thread::sleep(Duration::from_millis(20));
        let keys = server.keys("out/flaky/");
        keys.iter().any(|k| k.contains("/part-")).then_some(())
    })
    .unwrap_or_else(|why| panic!("no part was published: {why}\n{}", run.stderr_tail()));
    let before = proxy.counts();
    proxy.set(Fault::Unavailable, Some(Duration::from_secs(5)));
    let ended = run.wait_exit();
    let after = proxy.counts();
    eprintln!("{before:?} → {after:?}");
    assert_eq!(ended.code, Some(0), "{}", ended.stderr);
    assert!(
        after.unavailable > before.unavailable + 3,
        "the window answered 503 beyond the client's own retries: {before:?} → {after:?}"
    );
    assert!(
        ended.stderr.contains("trying again"),
        "the sink's writes retried: {}",
        ended.stderr
    );
    let out = objects(&server, "out/flaky");
    assert_eq!(
        out.get("_SUCCESS").map(Vec::len),
        Some(0),
        "{:?}",
        out.keys()
    );
    assert_eq!(parts(&out).len(), SINKS as usize, "{:?}", out.keys());
    let got = all_rows(&out);
    let want = expected_output(&fx.input);
    assert!(got == want, "{}", first_difference(&got, &want));
}
