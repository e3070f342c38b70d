//! Issue 30's first must-show: TPC-H from objects to objects across
//! machines that share no folder.
//!
//! TPC-H's tables at scale factor 0.1 (coordhost-datagen, Parquet) are put
//! into a bucket of a real SeaweedFS (support/s3.rs) serving on the bridge
//! of 3 network namespaces (support/netns.rs). Q3 (`examples/tpch/q3.toml`:
//! two joins, an aggregate and a top 10, several stages) reads its tables
//! from the bucket through its enumerators' store grants, keeps its event
//! log at `s3://BUCKET/<case>/log` (`[job] log`) and publishes its answer
//! to `s3://BUCKET/<case>/out`. The coordinator runs in the root namespace
//! on the bridge's address; 3 `coordhost worker` processes run one per
//! namespace, each with its own data directory (nothing shared with the
//! coordinator or with each other). Result partitions are on the workers'
//! disks (the example's `local-shuffle`) or, in the cases that say so, in
//! the bucket (`object-shuffle`, `s3://BUCKET/<case>/shuffle`).
//!
//! - the coordinator SIGKILLed once stages have finished and started again
//!   (same data directory and address) recovers from the object log while
//!   the workers keep running and keep their partitions: exit 0, the answer
//!   objects are DuckDB's (`examples/tpch/answers/sf0.1/q3.csv`),
//!   `_SUCCESS` is there, and every task the log had recorded finished is
//!   skipped (the rest is run);
//! - the same with the coordinator started again on **another** data
//!   directory (as a standby on another machine would be), the job's
//!   `local-shuffle` `root` (and its grant) a fixed path instead of
//!   `${data_dir}/shuffle`: every task recorded finished is skipped there
//!   too. With `${data_dir}/shuffle` the log's partition locations lie
//!   under the first coordinator's data directory, outside the second's
//!   shuffle grant, so none is taken and their producers run again
//!   (correct, nothing skipped, a warning says why; docs/object-storage.md,
//!   "High availability"). With `object-shuffle` every task recorded
//!   finished is skipped on another data directory, and the job's
//!   partition objects are deleted when it ends;
//! - with `object-shuffle`, a worker that had run finished tasks SIGKILLed
//!   once stages have finished: no finished task runs again (its
//!   partitions are objects), the answer stays exact;
//! - with the partitions on the workers' disks, the same kill loses them
//!   with the worker: the coordinator runs their producers again on the
//!   two others and the answer stays exact.
//!
//! Needs root, iproute2 (`ip netns`) and weed; fails saying so otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::events_object_log_ops::read_log;
use crate::sql_tpch::{answer_rows, expected_rows};
use crate::support::crash::{Coordhost, EventLog, Kill, RunSummary};
use crate::support::netns::Netns;
use crate::support::s3::Seaweed;
use crate::support::workers::{Workers, external_args, free_port_on};
use crate::support::{plugin_path, workspace};
use coordhost_datagen::{Format, Table};

const BUCKET: &str = "coordhost-tpch";
/// The scale of the committed answers.
const SCALE: f64 = 0.1;
/// The query: its answer is `examples/tpch/answers/sf0.1/q3.csv`.
const QUERY: u32 = 3;
/// The job's name in `examples/tpch/q3.toml`.
const JOB: &str = "tpch-q3";
/// Parallelism of every stage.
const PARALLELISM: u32 = 3;
/// Heartbeat timeout, ms: generous, for a loaded machine.
const HEARTBEAT_MS: u64 = 5000;
/// The last stage's sleep per input record, µs: the window in which
/// earlier stages have finished and the job has not.
const LAST_STAGE_DELAY_US: u64 = 20_000;

/// The test's folder.
struct Fixture(tempfile::TempDir);

impl Fixture {
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
}

/// Writes the eight tables as Parquet under `dir/<table>/`: what was
/// written, per table.
fn generate(dir: &Path) -> Vec<coordhost_datagen::Written> {
    coordhost_datagen::write_tpch(
        dir,
        &Table::ALL,
        Format::Parquet,
        SCALE,
        4,
        coordhost_datagen::DEFAULT_ROW_GROUP_ROWS,
    )
    .expect("TPC-H tables")
}

/// Puts every file of `dir/<table>/` at `tpch/<table>/<file>`; the number
/// of objects put.
fn upload(server: &Seaweed, dir: &Path, written: &[coordhost_datagen::Written]) -> usize {
    let mut n = 0;
    for w in written {
        for file in &w.files {
            let rel = file
                .strip_prefix(dir)
                .unwrap_or_else(|_| panic!("{} is under {}", file.display(), dir.display()));
            let bytes = std::fs::read(file).expect("table file");
            server.put(&format!("tpch/{}", rel.display()), bytes);
            n += 1;
        }
    }
    n
}

/// `examples/tpch/q3.toml` reading Parquet objects under `tpch/` through
/// store grants, its log at `s3://BUCKET/<case>/log`, its sink at
/// `s3://BUCKET/<case>/out` with the last stage slowed, written into `dir`.
/// The shuffle master is as `shuffle` says.
fn job_file(dir: &Path, case: &str, shuffle: Shuffle<'_>) -> PathBuf {
    let ws = workspace();
    let text = std::fs::read_to_string(ws.join(format!("examples/tpch/q{QUERY}.toml")))
        .expect("the example");
    let plugins = plugin_path("file-enumerator")
        .parent()
        .expect("plugin dir")
        .display()
        .to_string();
    let mut out = String::new();
    // The example's opening comment names its local paths: left out.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let line = if let Some(rest) =
            line.strip_prefix("dirs = [{ path = \"../../build/data/tpch-sf0.1/")
        {
            // A read-only grant of the table's folder of objects.
            let table = rest
                .strip_suffix("\", writable = false }]")
                .expect("a table's dirs line");
            format!("stores = [{{ url = \"s3://{BUCKET}/tpch/{table}\" }}]")
        } else {
            line.replace(
                "\"${job_dir}/../../build/data/tpch-sf0.1/",
                &format!("\"s3://{BUCKET}/tpch/"),
            )
            .replace("pattern = \".csv\"", "pattern = \".parquet\"")
            .replace("../../build/plugins", &plugins)
            .replace(
                &format!("sql-file = \"queries/q{QUERY}.sql\""),
                &format!(
                    "sql-file = \"{}\"",
                    ws.join(format!("examples/tpch/queries/q{QUERY}.sql"))
                        .display()
                ),
            )
            .replace("parallelism = 4", &format!("parallelism = {PARALLELISM}"))
            .replace(
                &format!("path = \"${{data_dir}}/output/{JOB}\""),
                &format!(
                    "path = \"s3://{BUCKET}/{case}/out\"\nrecord-delay-us = {LAST_STAGE_DELAY_US}"
                ),
            )
        };
        out.push_str(&line);
        out.push('\n');
    }
    let out = out
        .replacen(
            "[job]\n",
            &format!("[job]\nlog = \"s3://{BUCKET}/{case}/log\"\n"),
            1,
        )
        .replace(
            "format = \"csv\"\nheader = true\nschema",
            "format = \"parquet\"\nschema",
        );
    let out = match shuffle {
        Shuffle::Root(root) => {
            assert_eq!(
                out.matches("\"${data_dir}/shuffle\"").count(),
                2,
                "the shuffle master's root and grant:\n{out}"
            );
            out.replace(
                "\"${data_dir}/shuffle\"",
                &format!("\"{}\"", root.display()),
            )
        }
        Shuffle::Objects => {
            let prefix = format!("s3://{BUCKET}/{case}/shuffle");
            let local = "local-shuffle.wasm\"\nkind = \"shuffle-master\"\nconfig = { root = \"${data_dir}/shuffle\" }\ndirs = [{ path = \"${data_dir}/shuffle\", writable = true }]\n";
            assert!(out.contains(local), "the shuffle master's entry:\n{out}");
            out.replace(
                local,
                &format!("object-shuffle.wasm\"\nkind = \"shuffle-master\"\nconfig = {{ prefix = \"{prefix}\" }}\nstores = [{{ url = \"{prefix}\", writable = true }}]\n"),
            )
        }
        Shuffle::DataDir => out,
    };
    let stores = if matches!(shuffle, Shuffle::Objects) {
        9
    } else {
        8
    };
    assert!(
        !out.contains("build/data")
            && !out.contains("dirs = [{ path = \"../")
            && out.matches("stores = [{ url = \"s3://").count() == stores
            && out.matches("format = \"parquet\"").count() == 8
            && out.contains(&format!("path = \"s3://{BUCKET}/{case}/out\""))
            && out.contains("log = \"s3://"),
        "every table reads objects, the log and the sink are objects:\n{out}"
    );
    std::fs::create_dir_all(dir).expect("job dir");
    let path = dir.join(format!("{case}.toml"));
    std::fs::write(&path, out).expect("job file");
    path
}

/// Parallelism of each job vertex the log initialized.
fn vertices(log: &EventLog) -> BTreeMap<String, u64> {
    log.events
        .iter()
        .filter(|e| e["event"]["kind"] == "JobVertexInitialized")
        .filter_map(|e| {
            let v = &e["event"]["event"];
            Some((
                v["job_vertex"].as_str()?.to_owned(),
                v["parallelism"].as_u64()?,
            ))
        })
        .collect()
}

/// Subtasks recorded finished (and not reset since) per vertex.
fn finished(log: &EventLog) -> BTreeMap<String, BTreeSet<u32>> {
    vertices(log)
        .into_keys()
        .map(|v| {
            let done = log.finished(&v);
            (v, done)
        })
        .collect()
}

/// A moment to kill at: `stages` vertices have all their subtasks finished
/// and the job has not finished (nor published).
fn stages_done_job_not(log: &EventLog, stages: usize) -> bool {
    let parallelism = vertices(log);
    let done = finished(log);
    let complete = parallelism
        .iter()
        .filter(|(v, p)| done.get(*v).map_or(0, |s| s.len() as u64) == **p)
        .count();
    complete >= stages && complete < parallelism.len() && log.count("JobFinished") == 0
}

/// The objects under `<case>/out/`, downloaded into `dir` (name → file);
/// their names.
fn download(server: &Seaweed, case: &str, dir: &Path) -> Vec<String> {
    std::fs::create_dir_all(dir).expect("answer dir");
    let prefix = format!("{case}/out/");
    let mut names = Vec::new();
    for key in server.keys(&prefix) {
        let name = key
            .strip_prefix(&prefix)
            .expect("under the prefix")
            .to_owned();
        std::fs::write(dir.join(&name), server.get(&key)).expect("write the object");
        names.push(name);
    }
    names
}

/// Checks the answer objects of `case`: part objects and `_SUCCESS` only,
/// and DuckDB's answer.
fn assert_answer(server: &Seaweed, fx: &Fixture, case: &str) {
    let dir = fx.path(&format!("{case}-answer"));
    let names = download(server, case, &dir);
    assert!(
        names.iter().any(|n| n == "_SUCCESS"),
        "{case}: no _SUCCESS object: {names:?}"
    );
    assert!(
        names
            .iter()
            .all(|n| n == "_SUCCESS" || (n.starts_with("part-") && n.ends_with(".csv"))),
        "{case}: only parts and _SUCCESS under the sink prefix: {names:?}"
    );
    let got = answer_rows(&dir);
    let want = expected_rows(QUERY);
    assert_eq!(got.first(), want.first(), "{case}: the columns");
    assert_eq!(got.len(), want.len(), "{case}: the number of rows");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "{case}: row {i}");
    }
}

/// The cluster of a test: namespaces, the server on the bridge, the tables
/// in the bucket, 3 workers (one per namespace) for a coordinator at `addr`.
struct Cluster {
    workers: Workers,
    addr: String,
    server: Seaweed,
    // Dropped last: the workers and the server go before the namespaces.
    _net: Netns,
}

impl Cluster {
    fn new(fx: &Fixture) -> Self {
        let net = Netns::create(3);
        // The tables are written while the server starts.
        let tables = fx.path("tables");
        let gen_dir = tables.clone();
        let generating = std::thread::spawn(move || generate(&gen_dir));
        let server = Seaweed::start_on(&fx.path("seaweed"), BUCKET, &net.bridge_ip());
        let written = generating.join().expect("datagen thread");
        assert_eq!(written.len(), 8, "the eight tables");
        let objects = upload(&server, &tables, &written);
        assert!(objects >= 8, "at least one object per table: {objects}");
        // No folder is shared: the coordinator never reads the local copy.
        std::fs::remove_dir_all(&tables).expect("remove the local tables");
        let addr = format!("{}:{}", net.bridge_ip(), free_port_on(&net.bridge_ip()));
        let workers = Workers::start_in_namespaces_with_env(
            &net,
            3,
            &addr,
            &fx.path("workers"),
            2,
            server.env(),
        );
        Self {
            workers,
            addr,
            server,
            _net: net,
        }
    }

    /// A coordinator of `job` on data directory `data`, in the root
    /// namespace on the bridge's address, for the 3 workers.
    fn coordinator(&self, job: &Path, data: &Path) -> Coordhost {
        let mut ch = Coordhost::new(job, data);
        ch.env = self.server.env();
        ch.extra_args = external_args(&self.addr, 3, HEARTBEAT_MS);
        ch.extra_args.push("--insecure-listen".into());
        ch
    }

    /// The object log of `case`, once `stages` stages have finished and
    /// the job has not.
    fn poll_log(
        &self,
        case: &str,
        run: &mut crate::support::crash::Running,
        stages: usize,
    ) -> EventLog {
        let url = format!("s3://{BUCKET}/{case}/log");
        run.poll_until(|| {
            std::thread::sleep(Duration::from_millis(100));
            read_log(&self.server, &url).filter(|l| stages_done_job_not(l, stages))
        })
        .unwrap_or_else(|why| {
            panic!(
                "{case}: no moment with a stage finished and the job not: {why}\n{}\n{}",
                run.stderr_tail(),
                self.workers.logs()
            )
        })
    }
}

/// Per vertex: `skipped` of the summary.
fn skipped(summary: &RunSummary) -> BTreeMap<String, u64> {
    summary.0["vertices"]
        .as_array()
        .expect("vertices")
        .iter()
        .filter_map(|v| Some((v["id"].as_str()?.to_owned(), v["skipped"].as_u64()?)))
        .collect()
}

/// A coordinator of job `case` on data directory `data` SIGKILLed once 2
/// stages have finished, then started again on `restart_on` (another data
/// directory, as a standby on another machine would) or on `data`: it
/// recovers from the object log, skips every task the log recorded
/// finished and no other (with `reuse`; without, none, saying why), and
/// publishes the exact answer.
fn kill_and_restart(
    cluster: &Cluster,
    fx: &Fixture,
    case: &str,
    shuffle: Shuffle<'_>,
    data: &str,
    restart_on: Option<&str>,
    reuse: bool,
) {
    let server = &cluster.server;
    let job = job_file(&fx.path("jobs"), case, shuffle);
    let mut first = cluster.coordinator(&job, &fx.path(data));
    let mut run = first.start();
    let polled = cluster.poll_log(case, &mut run, 2);
    let killed_after = match run.kill() {
        Kill::Killed { after } => after,
        Kill::TooLate(f) => panic!(
            "{case}: the job finished before the kill: {}",
            f.summary.brief()
        ),
    };
    assert!(
        !server
            .keys(&format!("{case}/out/"))
            .iter()
            .any(|k| k.ends_with("/_SUCCESS")),
        "{case}: nothing published at the kill"
    );
    // What the log holds after the kill is what recovery reads.
    let url = format!("s3://{BUCKET}/{case}/log");
    let at_kill = read_log(server, &url).expect("the object log");
    let done = finished(&at_kill);
    let done_tasks: u64 = done.values().map(|s| s.len() as u64).sum();
    eprintln!(
        "{case}: killed after {killed_after:?}; finished at the poll {:?}, after the kill {:?}",
        finished(&polled)
            .iter()
            .map(|(v, s)| (v.clone(), s.len()))
            .collect::<Vec<_>>(),
        done.iter()
            .map(|(v, s)| (v.clone(), s.len()))
            .collect::<Vec<_>>()
    );
    // The coordinator started again (the log is not on its data directory:
    // the start reads it from the objects); the workers kept running and
    // kept their partitions.
    let end = match restart_on {
        None => first.run_to_end(),
        Some(other) => cluster.coordinator(&job, &fx.path(other)).run_to_end(),
    };
    let summary = &end.summary;
    assert!(
        summary.recovered(),
        "{case}: recovered: {}",
        summary.brief()
    );
    if reuse {
        for (vertex, n) in skipped(summary) {
            let recorded = done.get(&vertex).map_or(0, |s| s.len() as u64);
            assert_eq!(
                n, recorded,
                "{case}: `{vertex}`: every task recorded finished is skipped, no other: {}",
                summary.0
            );
        }
        assert_eq!(summary.tasks_skipped(), done_tasks, "{}", summary.0);
        assert!(
            done_tasks > 0 && summary.tasks_run() < summary.tasks_total(),
            "{case}: the rerun skipped work: {}",
            summary.brief()
        );
    } else {
        // The log's partition locations lie under the first coordinator's
        // data directory, outside this one's shuffle grant: none is taken
        // (said once on stderr), every finished producer runs again.
        assert!(done_tasks > 0, "{case}: tasks had finished at the kill");
        assert_eq!(summary.tasks_skipped(), 0, "{case}: {}", summary.0);
        let other = restart_on.expect("another data directory");
        let err = std::fs::read_to_string(fx.path(&format!("{other}.run1.err")))
            .expect("the restart's stderr");
        assert!(
            err.contains("lie outside the shuffle master's writable grants"),
            "{case}: the restart says why nothing is reused:\n{err}"
        );
    }
    assert_answer(server, fx, case);
    let log = read_log(server, &url).expect("the object log");
    assert_eq!(log.count("JobFinished"), 1, "{case}: one end of the job");
    assert_eq!(
        log.segments.len(),
        2,
        "{case}: two coordinator starts in the log"
    );
    let local = fx.path(data).join(JOB).join("log");
    assert!(
        !local.exists(),
        "{case}: {} exists: the log went to a disk",
        local.display()
    );
    for i in 0..3 {
        let wlog = cluster.workers.log_of(i);
        assert!(
            wlog.lines().any(|l| l.contains("running")),
            "{case}: w{i} ran no task:\n{wlog}"
        );
    }
    let left = cluster.workers.files_left();
    assert!(
        left.is_empty(),
        "{case}: files left on the workers after the job: {left:?}"
    );
}

/// Where the job's result partitions go.
#[derive(Clone, Copy)]
enum Shuffle<'a> {
    /// The example's `local-shuffle` with `root = "${data_dir}/shuffle"`:
    /// on the workers' disks.
    DataDir,
    /// `local-shuffle` with `root` (and its grant) this fixed path.
    Root(&'a Path),
    /// `object-shuffle` under `s3://BUCKET/<case>/shuffle`: in the bucket.
    Objects,
}

/// Runs `case` with `shuffle` on data directory `data`, SIGKILLs worker
/// `victim` once 3 stages have finished (the customer and orders scans
/// and their join; the lineitem scan takes longer) and lets the job end:
/// the answer is exact. The log, and the attempts that had finished at
/// the kill and had run on the victim.
fn worker_kill(
    cluster: &mut Cluster,
    fx: &Fixture,
    case: &str,
    shuffle: Shuffle<'_>,
    data: &str,
    victim: usize,
) -> (EventLog, RunSummary, Vec<String>) {
    let job = job_file(&fx.path("jobs"), case, shuffle);
    let mut ch = cluster.coordinator(&job, &fx.path(data));
    ch.log = Some("warn,coordhost::remote=info");
    let mut run = ch.start();
    // The moment is read from the coordinator's progress lines (a file
    // read every few ms), not from the object log (`log inspect`, a
    // process per look: by its answer the whole job could be over, as a
    // run showed once reading Parquet objects got faster).
    let err_file = fx.path(&format!("{data}.run1.err"));
    let stages = run
        .poll_until(|| {
            let text = std::fs::read_to_string(&err_file).unwrap_or_default();
            let complete: BTreeSet<&str> = text
                .lines()
                .filter_map(|l| {
                    // `<time> <vertex>: <k>/<n> finished[; input: …]`
                    let (head, tail) = l.split_once(": ")?;
                    let vertex = head.rsplit_once(' ')?.1;
                    let (k, n) = tail.split_once(" finished")?.0.split_once('/')?;
                    (k == n).then_some(vertex)
                })
                .collect();
            (complete.len() >= 3).then_some(complete.len())
        })
        .unwrap_or_else(|why| {
            panic!(
                "{case}: no moment with 3 stages finished: {why}\n{}",
                run.stderr_tail()
            )
        });
    cluster.workers.kill(victim);
    let polled =
        read_log(&cluster.server, &format!("s3://{BUCKET}/{case}/log")).expect("the object log");
    eprintln!("{case}: w{victim} killed once {stages} stages had finished");
    let end = run.finish();
    let done = finished(&polled);
    eprintln!(
        "{case}: w{victim} killed with {:?} finished; {}",
        done.iter()
            .map(|(v, s)| (v.clone(), s.len()))
            .collect::<Vec<_>>(),
        end.summary.brief()
    );
    // The attempts deployed to the victim (the coordinator's `deploying`
    // lines) that had finished at the kill.
    let err = std::fs::read_to_string(fx.path(&format!("{data}.run1.err")))
        .expect("the coordinator's stderr");
    let field = |line: &str, name: &str| -> Option<String> {
        let rest = line.split_once(&format!(" {name}="))?.1;
        Some(rest.split(' ').next()?.to_owned())
    };
    let on_victim: Vec<String> = err
        .lines()
        .filter(|l| l.contains("deploying"))
        .filter(|l| field(l, "worker").as_deref() == Some(&format!("w{victim}")))
        .filter_map(|l| {
            let vertex = field(l, "vertex")?;
            let subtask: u32 = field(l, "subtask")?.parse().ok()?;
            done.get(&vertex)
                .is_some_and(|s| s.contains(&subtask))
                .then(|| format!("{vertex} {subtask}"))
        })
        .collect();
    assert_answer(&cluster.server, fx, case);
    let log =
        read_log(&cluster.server, &format!("s3://{BUCKET}/{case}/log")).expect("the object log");
    assert_eq!(log.count("JobFinished"), 1, "{case}: one end of the job");
    (log, end.summary, on_victim)
}

#[test]
fn tpch_objects_q3_from_a_bucket_to_a_bucket_on_3_namespaced_workers_survives_kills() {
    let fx = Fixture(tempfile::tempdir().expect("tempdir"));
    let mut cluster = Cluster::new(&fx);

    // 1. The coordinator SIGKILLed once a stage has finished, started
    // again on its data directory.
    kill_and_restart(
        &cluster,
        &fx,
        "coordinator-kill",
        Shuffle::DataDir,
        "coordinator-a",
        None,
        true,
    );
    // 1b. The same with the restart on another data directory, the
    // shuffle master's root a fixed path (docs/object-storage.md, "High
    // availability"): the partitions the workers hold are found there too.
    // A writable grant outside the data directory must exist beforehand.
    let root = fx.path("shuffle");
    std::fs::create_dir_all(&root).expect("the shuffle root");
    kill_and_restart(
        &cluster,
        &fx,
        "coordinator-elsewhere",
        Shuffle::Root(&root),
        "coordinator-d",
        Some("coordinator-e"),
        true,
    );
    // 1c. The restart on another data directory with the example's
    // `${data_dir}/shuffle`: correct, but nothing is reused, and it says so.
    kill_and_restart(
        &cluster,
        &fx,
        "coordinator-elsewhere-data-dir-root",
        Shuffle::DataDir,
        "coordinator-f",
        Some("coordinator-g"),
        false,
    );
    // 1d. The partitions in the bucket (`object-shuffle`), the restart on
    // another data directory: everything recorded finished is skipped.
    kill_and_restart(
        &cluster,
        &fx,
        "coordinator-elsewhere-objects",
        Shuffle::Objects,
        "coordinator-h",
        Some("coordinator-i"),
        true,
    );
    let left = cluster
        .server
        .keys("coordinator-elsewhere-objects/shuffle/");
    assert!(
        left.is_empty(),
        "1d: partitions left in the bucket: {left:?}"
    );

    // 2. With `object-shuffle`, a worker SIGKILLed once 3 stages have
    // finished: the partitions it wrote are objects, nothing finished runs
    // again.
    let case = "worker-kill-objects";
    let (log, summary, on_victim) = worker_kill(
        &mut cluster,
        &fx,
        case,
        Shuffle::Objects,
        "coordinator-j",
        2,
    );
    assert!(
        !on_victim.is_empty(),
        "{case}: w2 had run a finished task: {}",
        summary.brief()
    );
    let again = log.finished_twice();
    assert!(
        again.is_empty(),
        "{case}: no finished task ran again after w2's loss ({on_victim:?} had run there): {again:?}"
    );
    let left = cluster.server.keys(&format!("{case}/shuffle/"));
    assert!(
        left.is_empty(),
        "{case}: partitions left in the bucket: {left:?}"
    );
    cluster.workers.restart(2);

    // 3. The same with the partitions on the workers' disks: those of the
    // lost worker are gone with it, their producers run again.
    let case = "worker-kill";
    let (log, summary, on_victim) = worker_kill(
        &mut cluster,
        &fx,
        case,
        Shuffle::DataDir,
        "coordinator-c",
        2,
    );
    let again = log.finished_twice();
    assert!(
        !on_victim.is_empty() && !again.is_empty() && summary.tasks_reset() > 0,
        "{case}: producers of partitions lost with w2 ({on_victim:?}) ran again: {again:?} {}",
        summary.brief()
    );
    drop(cluster);
}
