//! Scalar functions on worker processes (issue 27, item 3; docs/workers.md,
//! "Scalar functions on workers"), through the real `coordhost run
//! --listen ... --external-workers 3` and 3 real `coordhost worker`
//! processes with the real sample components:
//!
//! - the example `tax-by-region-sql.toml` (sample `tax-function`) gives
//!   the embedded answer, each worker fetching the component at most once
//!   and keeping it under its SHA-256;
//! - the coordinator SIGKILLed after the first stage of a job with
//!   functions (the last stage calls one too), rerun on the same workers:
//!   the same output, the finished stage skipped;
//! - a coordinator that damages the component bytes it serves (fail point
//!   `coordinator::corrupt-component`): every attempt refuses them naming
//!   the function and both hashes, the job fails with exit 1, nothing is
//!   published and no worker keeps the damaged bytes;
//! - `faulty-function` trapping on a worker: the attempt fails naming the
//!   function and is retried per `max-attempts`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::Digest as _;

use crate::sql_functions::{job_file, plus_one, tax_function, write_table};
use crate::support::crash::{Coordhost, Kill};
use crate::support::job::options;
use crate::support::knobs::{Knobs, RunOutput, run_output, run_output_with_failpoints};
use crate::support::workers::{Workers, external_args, free_port};
use crate::support::{plugin_path, published_lines};
use coordhost::job::JobStatus;

/// Worker processes per test.
const WORKERS: usize = 3;

/// What a worker logs when it fetched a component.
const FETCHED: &str = "fetched a component from the coordinator";

/// What a worker logs when it loaded a scalar function.
const LOADED: &str = "loaded a scalar function";

/// Lowercase hex SHA-256 of the file at `path`.
fn sha256_of(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read component");
    sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Runs `job` on `WORKERS` worker processes (started here, in `base`,
/// 2 slots each) with `failpoints` on the coordinator; returns the run and
/// the workers (still running).
fn run_on_workers(job: &Path, state: &Path, base: &Path, failpoints: &str) -> (RunOutput, Workers) {
    let addr = free_port();
    let workers = Workers::start(WORKERS, &addr, base, 2);
    let out = run_output_with_failpoints(
        &options(job, state, 2),
        failpoints,
        &external_args(&addr, WORKERS, 5000),
    );
    (out, workers)
}

/// Asserts `out` finished the job (exit 0, status finished).
fn assert_finished(out: &RunOutput, workers: &Workers) {
    let s = out
        .summary
        .as_ref()
        .unwrap_or_else(|| panic!("no summary, exit {:?}: {}", out.code, out.stderr));
    assert_eq!(
        s.status,
        JobStatus::Finished,
        "{:?}\n{}\n{}",
        s.error,
        out.stderr,
        workers.logs()
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[test]
fn the_example_tax_job_on_three_workers_gives_the_embedded_answer() {
    use coordhost_datagen::{Format, Table};
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("tpch");
    coordhost_datagen::write_tpch(
        &data,
        &[Table::Region, Table::Nation, Table::Customer, Table::Orders],
        Format::Csv,
        0.01,
        2,
        coordhost_datagen::DEFAULT_ROW_GROUP_ROWS,
    )
    .expect("TPC-H tables");
    let dir = tmp.path().join("job");
    std::fs::create_dir_all(&dir).expect("job dir");
    let job = crate::support::job::example_job(
        "tax-by-region-sql.toml",
        "build/data/tpch-sf0.1",
        &data,
        &dir,
    );

    let embedded_state = tmp.path().join("embedded");
    let embedded = run_output(&options(&job, &embedded_state, 2), &Knobs::default());
    assert_eq!(embedded.code, Some(0), "{}", embedded.stderr);
    let reference = published_lines(&embedded_state.join("output/tax-by-region"));
    assert_eq!(reference.len(), 6, "one row per region: {reference:?}");

    let state = tmp.path().join("workers-state");
    let (out, workers) = run_on_workers(&job, &state, &tmp.path().join("workers"), "");
    assert_finished(&out, &workers);
    let lines = published_lines(&state.join("output/tax-by-region"));
    assert_eq!(lines, reference, "the embedded answer");
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells[2], cells[3], "Wasm and SQL agree: {line}");
    }

    // Each worker fetched the component at most once, whatever the
    // number of its tasks that called it, and keeps it by its hash.
    let sha = sha256_of(&plugin_path("tax-function"));
    let mut fetches = 0;
    for i in 0..WORKERS {
        let log = workers.log_of(i);
        let n = log.matches(FETCHED).count();
        assert!(n <= 1, "worker w{i} fetched {n} times:\n{log}");
        // Loaded (compiled, or from the compiled-component cache) once
        // per worker process, as often as fetched into its fresh folder.
        let loads = log.matches(LOADED).count();
        assert_eq!(loads, n, "w{i} loads what it fetched, once:\n{log}");
        if n == 1 {
            assert!(log.contains(&sha), "w{i} fetched sha256 {sha}:\n{log}");
            let kept = workers
                .data_dir(i)
                .join("components")
                .join(format!("{sha}.wasm"));
            assert_eq!(sha256_of(&kept), sha, "w{i} keeps the bytes by their hash");
        }
        fetches += n;
    }
    assert!(
        fetches >= 1,
        "the function ran on workers, so one fetched it:\n{}",
        workers.logs()
    );
    assert!(
        !out.stderr.contains("embedded tasks only"),
        "no refusal: {}",
        out.stderr
    );
}

/// Subtasks of job vertex `vertex` of job `udf` under `state` with an
/// `ExecutionFinished` in its log (the test's job has no resets before
/// the kill), read with the real `coordhost log inspect`.
fn finished(state: &Path, vertex: &str) -> usize {
    let out = crate::support::coordhost()
        .arg("log")
        .arg("inspect")
        .arg(state.join("udf"))
        .arg("--json")
        .output()
        .expect("coordhost log inspect");
    if !out.status.success() {
        return 0;
    }
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    doc["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter(|e| e["event"]["kind"] == "ExecutionFinished")
                .filter(|e| e["event"]["event"]["attempt"]["job_vertex"] == vertex)
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_coordinator_killed_mid_job_with_functions_on_workers_reruns_to_the_same_output() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 3000);
    // `tax` runs in the scan stage (per row, before the partial sums) and
    // in the final stage (on each region's sum): the rerun calls it too.
    let sql = "SELECT region, sum(tax(price, region)) AS total, tax(CAST(sum(price) AS DECIMAL(15, 2)), region) AS tax_of_sum, count(*) AS n FROM t GROUP BY region ORDER BY region";
    let reference_job = job_file(&tmp.path().join("ref"), &input, &tax_function(), sql, 2);
    let reference_state = tmp.path().join("ref-state");
    let reference_run = run_output(
        &options(&reference_job, &reference_state, 2),
        &Knobs::default(),
    );
    assert_eq!(reference_run.code, Some(0), "{}", reference_run.stderr);
    let reference = published_lines(&reference_state.join("output/udf"));

    // The last stage sleeps per input record: time to kill the coordinator
    // once the scan stage finished and before the sink published.
    let job = job_file(&tmp.path().join("crash"), &input, &tax_function(), sql, 2);
    let mut text = std::fs::read_to_string(&job).expect("job file");
    assert!(
        text.trim_end().ends_with("format = \"csv\""),
        "[sink] is last:\n{text}"
    );
    text.push_str("record-delay-us = 700000\n");
    std::fs::write(&job, text).expect("job file");
    let state = tmp.path().join("crash-state");
    let addr = free_port();
    let workers = Workers::start(WORKERS, &addr, &tmp.path().join("workers"), 2);
    let mut coordinator = Coordhost::new(&job, &state);
    coordinator.extra_args = external_args(&addr, WORKERS, 5000);
    coordinator
        .extra_args
        .extend(["--workers".into(), "2".into()]);
    let mut running = coordinator.start();
    let scan_tasks = running
        .poll_until(|| {
            let n = finished(&state, "stage0");
            (n >= 2).then_some(n)
        })
        .unwrap_or_else(|e| panic!("{e}\n{}\n{}", running.stderr_tail(), workers.logs()));
    match running.kill() {
        Kill::Killed { .. } => {}
        Kill::TooLate(f) => panic!("the run ended before the kill: {:?}", f.summary.brief()),
    }
    assert!(
        !state.join("output/udf/_SUCCESS").exists(),
        "killed before publishing"
    );

    let rerun = coordinator.run_to_end();
    let s = &rerun.summary;
    assert!(s.recovered(), "the rerun recovers: {}", s.brief());
    assert!(
        s.tasks_skipped() >= scan_tasks as u64,
        "the {scan_tasks} finished scan tasks are skipped: {}",
        s.brief()
    );
    assert_eq!(
        published_lines(&state.join("output/udf")),
        reference,
        "the same output as the embedded run"
    );
}

#[test]
fn component_bytes_of_another_hash_are_refused_by_the_worker_and_the_job_fails() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 200);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &tax_function(),
        "SELECT id, tax(price, region) AS tax FROM t",
        2,
    );
    let state = tmp.path().join("state");
    let base = tmp.path().join("workers");
    let started = Instant::now();
    let (out, workers) =
        run_on_workers(&job, &state, &base, "coordinator::corrupt-component=return");
    assert_eq!(out.code, Some(1), "{}\n{}", out.stderr, workers.logs());
    let s = out.summary.expect("a summary");
    assert_eq!(s.status, JobStatus::Failed);
    let error = s.error.unwrap_or_default();
    let want = sha256_of(&plugin_path("tax-function"));
    for needle in [
        "refuses the component of scalar function `tax`",
        "tax-function.wasm",
        &want,
        "does not run them",
        "failed on attempt 1 (of at most 2)",
    ] {
        assert!(error.contains(needle), "`{needle}` in: {error}");
    }
    // The hash of what was sent is named too: 64 hex digits other than
    // the job's.
    let got = error
        .split("have sha256 ")
        .nth(1)
        .map(|rest| &rest[..64.min(rest.len())])
        .unwrap_or_default();
    assert!(
        got.len() == 64 && got != want && got.bytes().all(|b| b.is_ascii_hexdigit()),
        "the sent bytes' hash in: {error}"
    );
    assert!(
        !state.join("output/udf/_SUCCESS").exists(),
        "nothing is published"
    );
    // A sink subtask whose scan got no split (splits are handed out on
    // demand; on a loaded machine one subtask may take them all) never
    // calls the function, so it may publish its part file, with no row: no
    // row computed by a component is published.
    let published: Vec<PathBuf> = std::fs::read_dir(state.join("output/udf"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    for part in &published {
        let text = std::fs::read_to_string(part).expect("part file");
        assert!(
            text.lines().filter(|l| !l.trim().is_empty()).count() <= 1,
            "a published part file holds rows: {}:\n{text}",
            part.display()
        );
    }
    for i in 0..WORKERS {
        let kept = workers
            .data_dir(i)
            .join("components")
            .join(format!("{want}.wasm"));
        assert!(!kept.exists(), "w{i} kept no damaged bytes");
    }
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "the job failed in time"
    );
}

#[test]
fn a_function_that_traps_on_a_worker_fails_the_attempt_and_is_retried_per_max_attempts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 100);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &plus_one("trap", "call-timeout-ms = 5000"),
        "SELECT plus_one(id) AS x FROM t",
        2,
    );
    let state = tmp.path().join("state");
    let (out, workers) = run_on_workers(&job, &state, &tmp.path().join("workers"), "");
    assert_eq!(out.code, Some(1), "{}\n{}", out.stderr, workers.logs());
    let s = out.summary.expect("a summary");
    assert_eq!(s.status, JobStatus::Failed);
    let error = s.error.clone().unwrap_or_default();
    for needle in [
        "scalar function `plus_one`",
        "faulty-function.wasm",
        "`invoke` trapped",
        "plus_one was told to trap",
        "failed on attempt 1 (of at most 2)",
    ] {
        assert!(error.contains(needle), "`{needle}` in: {error}");
    }
    assert!(
        s.tasks_run >= 2 && s.reset_reasons.get("failover").copied().unwrap_or(0) >= 1,
        "the failed execution vertex was tried again per max-attempts = 2: {s:?}"
    );
    assert!(
        !state.join("output/udf/_SUCCESS").exists(),
        "nothing is published"
    );
}

/// The `FetchComponent` a worker would make, by a raw gRPC client: the
/// status, or the bytes of the stream (checked to be as long as the first
/// chunk announced).
fn fetch_component(
    rt: &tokio::runtime::Runtime,
    addr: &str,
    worker: &str,
    session: u64,
    sha256: &str,
) -> Result<Vec<u8>, tonic::Status> {
    use coordhost::rpc::{self, coordinator_client::CoordinatorClient};
    rt.block_on(async {
        let mut client = CoordinatorClient::connect(format!("http://{addr}"))
            .await
            .expect("the coordinator listens");
        let mut stream = client
            .fetch_component(rpc::ComponentRequest {
                worker_id: worker.into(),
                session,
                sha256: sha256.into(),
            })
            .await?
            .into_inner();
        let total = stream.message().await?.expect("a first chunk").total_bytes;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await? {
            bytes.extend_from_slice(&chunk.data);
        }
        assert_eq!(bytes.len() as u64, total, "as many bytes as announced");
        Ok(bytes)
    })
}

#[test]
fn the_coordinator_serves_a_component_only_to_a_registered_worker_and_only_the_jobs() {
    use coordhost::rpc::{self, coordinator_client::CoordinatorClient};
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("in");
    write_table(&input, 300);
    let job = job_file(
        &tmp.path().join("job"),
        &input,
        &tax_function(),
        "SELECT region, sum(tax(price, region)) AS total FROM t GROUP BY region ORDER BY region",
        2,
    );
    let mut text = std::fs::read_to_string(&job).expect("job file");
    text.push_str("record-delay-us = 500000\n");
    std::fs::write(&job, text).expect("job file");
    let state = tmp.path().join("state");
    let addr = free_port();
    let workers = Workers::start(1, &addr, &tmp.path().join("workers"), 2);
    let mut coordinator = Coordhost::new(&job, &state);
    coordinator.extra_args = external_args(&addr, 1, 5000);
    let mut running = coordinator.start();
    // Once the scan finished, the last stage (slowed) runs and nothing
    // more is deployed: a stranger registering now is given no task.
    running
        .poll_until(|| (finished(&state, "stage0") >= 2).then_some(()))
        .unwrap_or_else(|e| panic!("{e}\n{}", workers.logs()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let want = sha256_of(&plugin_path("tax-function"));

    let status = fetch_component(&rt, &addr, "stranger", 1, &want).expect_err("refused");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains("`stranger`") && status.message().contains("not registered"),
        "{status:?}"
    );

    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let session = rt
        .block_on(async {
            let mut c = CoordinatorClient::connect(format!("http://{addr}")).await?;
            c.register(rpc::RegisterRequest {
                protocol_version: rpc::PROTOCOL_VERSION,
                worker_id: "fake".into(),
                address: dead.local_addr().expect("addr").to_string(),
                slots: 1,
                held: Vec::new(),
                job: String::new(),
            })
            .await
            .map_err(|s| -> Box<dyn std::error::Error> { s.into() })
            .map(|r| r.into_inner().session)
        })
        .expect("registered");

    let status = fetch_component(&rt, &addr, "fake", session ^ 1, &want).expect_err("refused");
    assert_eq!(
        status.code(),
        tonic::Code::PermissionDenied,
        "another session: {status:?}"
    );
    let status =
        fetch_component(&rt, &addr, "fake", session, &"0".repeat(64)).expect_err("refused");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert!(
        status.message().contains("no scalar function"),
        "{status:?}"
    );
    let bytes = fetch_component(&rt, &addr, "fake", session, &want).expect("the job's component");
    let got: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(got, want, "the bytes of the job's component");

    let done = running.finish();
    assert!(done.summary.tasks_total() > 0);
    assert_eq!(
        published_lines(&state.join("output/udf")).len(),
        7,
        "a header and six regions"
    );
}
