//! Issue 24, items 2 and 5: attempts on worker processes that end without
//! finishing, or cannot be placed at all, all through the real `coordhost
//! run` and real `coordhost worker` processes (and, where a worker must
//! misbehave in a way a real one does not, a scripted gRPC peer speaking
//! `proto/coordhost/worker/v1/worker.proto`):
//!
//! - a worker SIGKILLed after its source attempt pulled a split and before
//!   it answered the `Deploy`: the split goes back, the output is exact;
//! - a scripted worker that pulls a split and then refuses the `Deploy`, or
//!   never answers it: the same, and the refusals cost no attempt (the job
//!   runs with `max-attempts = 1`);
//! - no worker left to run on: the job waits, then fails after
//!   `job.slot-request-timeout-ms`, saying so;
//! - an attempt that failed on a worker runs its next attempt on another.
//!
//! Each output is compared with the word counts the test computes itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use coordhost::rpc::{self, coordinator_client::CoordinatorClient, worker_server};
use tonic::{Request, Response, Status};

use crate::support::crash::{
    Coordhost, EventLog, Fixture, SOURCE, WordJob, expected_output, first_difference, sorted_output,
};
use crate::support::workers::{Workers, external_args, free_port};

/// The word count with `max-attempts = max_attempts` and `extra` more keys
/// of `[job]` (each a line).
fn job(fx: &Fixture, max_attempts: u32, extra: &str, tune: impl FnOnce(&mut WordJob)) -> PathBuf {
    let mut j = WordJob::new(&fx.input);
    j.previous_worker_timeout_ms = 1500;
    tune(&mut j);
    let path = j.write(&fx.path("job.toml"));
    let text = std::fs::read_to_string(&path).expect("job file");
    assert!(text.contains("max-attempts = 3\n"), "{text}");
    let text = text.replace(
        "max-attempts = 3\n",
        &format!("max-attempts = {max_attempts}\n{extra}"),
    );
    std::fs::write(&path, text).expect("job file");
    path
}

fn assert_output(data_dir: &Path, fx: &Fixture, context: &str) {
    let got = sorted_output(data_dir);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "{context}: output differs from the word counts: {}",
        first_difference(&got, &want)
    );
}

/// The summary's count of resets named `kind` (`reset_reasons`).
fn resets(summary: &serde_json::Value, kind: &str) -> u64 {
    summary["reset_reasons"][kind].as_u64().unwrap_or(0)
}

/// The summary's `splits_returned` of the source vertex.
fn splits_returned(summary: &serde_json::Value) -> u64 {
    summary["vertices"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["id"] == SOURCE))
        .and_then(|v| v["splits_returned"].as_u64())
        .unwrap_or_else(|| panic!("no splits_returned of `{SOURCE}`: {summary}"))
}

#[test]
fn a_worker_killed_after_its_source_attempt_pulled_a_split_and_before_it_answered_the_deploy_loses_no_split()
 {
    let fx = Fixture::words();
    let file = job(&fx, 3, "", |j| {
        j.source_delay_us = 100;
        j.sink_delay_us = 0;
    });
    let addr = free_port();
    // w0 is the first worker deploys go to (most free slots, lowest id):
    // the first source attempt it gets pulls a split, and its Deploy's
    // answer is held (a test knob) until the test kills w0.
    let mut workers = Workers::start_with_knobs(
        3,
        &addr,
        &fx.path("workers"),
        2,
        &[(0, "worker::hold-deploy-answer=1*return(60000)")],
    );
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    // Longer than the test needs to see the split pulled: the Deploy must
    // not time out before the kill.
    run.extra_args = external_args(&addr, 3, 5000);
    run.log = Some("warn,coordhost::remote=info");
    let mut running = run.start();
    let log0 = fx.path("workers").join("w0.start1.err");
    running
        .poll_until(|| {
            std::fs::read_to_string(&log0)
                .ok()
                .filter(|t| t.contains("pulled a split; holding the Deploy answer"))
                .map(|_| ())
        })
        .unwrap_or_else(|e| panic!("w0's source attempt pulls a split: {e}\n{}", workers.logs()));
    workers.kill(0);
    let done = running.finish();
    let stderr = std::fs::read_to_string(fx.path("data.run1.err")).unwrap_or_default();
    assert!(
        stderr.contains("not placed: worker `w0`"),
        "the attempt whose Deploy w0 never answered was not ended as not placed:\n{stderr}"
    );
    assert!(
        resets(&done.summary.0, "not-placed") >= 1 && splits_returned(&done.summary.0) >= 1,
        "its split went back to the enumerator: {}",
        done.summary.0
    );
    assert_output(&data, &fx, "after w0 was killed before answering a Deploy");
    assert!(workers.files_left().is_empty(), "{}", workers.logs());
}

/// What the scripted worker does with a `Deploy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Pulls one split (a source attempt), then refuses the call.
    RefuseAfterPull,
    /// Pulls one split (a source attempt), then never answers.
    HangAfterPull,
}

/// What the scripted worker saw.
#[derive(Debug, Default)]
struct Seen {
    /// Every `Deploy`: (job vertex id, subtask, attempt).
    deploys: Vec<(String, u32, u32)>,
    /// Splits it was handed through `RequestSplit`.
    splits: usize,
}

/// A worker that registers and heartbeats like a real one but runs
/// nothing: each `Deploy` is answered per its [`Script`].
struct ScriptedWorker {
    coordinator: String,
    id: String,
    script: Script,
    seen: Arc<Mutex<Seen>>,
}

type NoChunks = tokio_stream::wrappers::ReceiverStream<Result<rpc::Chunk, Status>>;

#[tonic::async_trait]
impl worker_server::Worker for ScriptedWorker {
    async fn deploy(
        &self,
        request: Request<rpc::DeployRequest>,
    ) -> Result<Response<rpc::DeployResponse>, Status> {
        let req = request.into_inner();
        let a = req.attempt.unwrap_or_default();
        self.seen
            .lock()
            .expect("seen")
            .deploys
            .push((req.vertex_id.clone(), a.subtask, a.attempt));
        if req.vertex_id == SOURCE {
            let mut c = CoordinatorClient::connect(format!("http://{}", self.coordinator))
                .await
                .map_err(|e| Status::internal(e.to_string()))?;
            let answer = c
                .request_split(rpc::SplitRequest {
                    worker_id: self.id.clone(),
                    session: req.session,
                    attempt: req.attempt,
                })
                .await?
                .into_inner();
            if matches!(answer.answer, Some(rpc::split_response::Answer::Split(_))) {
                self.seen.lock().expect("seen").splits += 1;
            }
        }
        match self.script {
            Script::RefuseAfterPull => Err(Status::resource_exhausted(
                "scripted worker: took the task, then refuses it",
            )),
            Script::HangAfterPull => {
                tokio::time::sleep(Duration::from_secs(120)).await;
                Err(Status::deadline_exceeded("scripted worker: never answered"))
            }
        }
    }

    async fn cancel(
        &self,
        _: Request<rpc::CancelRequest>,
    ) -> Result<Response<rpc::CancelResponse>, Status> {
        Ok(Response::new(rpc::CancelResponse {}))
    }

    type ReadSubpartitionsStream = NoChunks;

    async fn read_subpartitions(
        &self,
        _: Request<rpc::ReadRequest>,
    ) -> Result<Response<NoChunks>, Status> {
        Err(Status::not_found("the scripted worker holds nothing"))
    }

    type FetchSinkOutputStream = NoChunks;

    async fn fetch_sink_output(
        &self,
        _: Request<rpc::FetchSinkRequest>,
    ) -> Result<Response<NoChunks>, Status> {
        Err(Status::not_found("the scripted worker staged nothing"))
    }

    async fn release(
        &self,
        _: Request<rpc::ReleaseRequest>,
    ) -> Result<Response<rpc::ReleaseResponse>, Status> {
        Ok(Response::new(rpc::ReleaseResponse {}))
    }

    async fn goodbye(
        &self,
        _: Request<rpc::GoodbyeRequest>,
    ) -> Result<Response<rpc::GoodbyeResponse>, Status> {
        Ok(Response::new(rpc::GoodbyeResponse {}))
    }
}

/// Serves a [`ScriptedWorker`] on a loopback port, registers it with the
/// coordinator at `coordinator` (retrying until it listens) with `slots`
/// slots and heartbeats for as long as `rt` runs.
fn start_scripted(
    rt: &tokio::runtime::Runtime,
    coordinator: &str,
    script: Script,
    slots: u32,
) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let address = free_port();
    // The lowest id: between equals, deploys go to it first.
    let id = "a-scripted".to_string();
    let service = worker_server::WorkerServer::new(ScriptedWorker {
        coordinator: coordinator.to_owned(),
        id: id.clone(),
        script,
        seen: seen.clone(),
    });
    let listen = address.parse().expect("address");
    rt.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve(listen)
            .await
            .expect("the scripted worker serves");
    });
    let coordinator = format!("http://{coordinator}");
    rt.spawn(async move {
        let (mut client, session, interval) = loop {
            if let Ok(mut c) = CoordinatorClient::connect(coordinator.clone()).await
                && let Ok(r) = c
                    .register(rpc::RegisterRequest {
                        protocol_version: rpc::PROTOCOL_VERSION,
                        worker_id: id.clone(),
                        address: address.clone(),
                        slots,
                        held: Vec::new(),
                        job: String::new(),
                    })
                    .await
            {
                let r = r.into_inner();
                break (c, r.session, r.heartbeat_interval_ms.max(10));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        loop {
            tokio::time::sleep(Duration::from_millis(interval)).await;
            let _ = client
                .heartbeat(rpc::HeartbeatRequest {
                    worker_id: id.clone(),
                    session,
                })
                .await;
        }
    });
    seen
}

fn scripted_peer_loses_no_split(script: Script) {
    let fx = Fixture::words();
    // One attempt per execution vertex: a refused or unanswered Deploy
    // that counted as a failed attempt would fail the job.
    let file = job(&fx, 1, "", |j| {
        j.source_delay_us = 20;
        j.sink_delay_us = 0;
    });
    let addr = free_port();
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 3, 1000);
    run.log = Some("warn,coordhost::remote=info");
    let running = run.start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // More free slots than the real workers: every execution vertex's
    // first attempt is sent to it.
    let seen = start_scripted(&rt, &addr, script, 8);
    let workers = Workers::start(2, &addr, &fx.path("workers"), 2);
    let done = running.finish();
    let stderr = std::fs::read_to_string(fx.path("data.run1.err")).unwrap_or_default();
    // First what the user sees: every word counted exactly once.
    assert_output(&data, &fx, &format!("{script:?}"));
    let seen = seen.lock().expect("seen");
    assert!(
        seen.splits >= 1,
        "{script:?}: the scripted worker never pulled a split: {seen:?}\n{stderr}"
    );
    for s in 0..4 {
        assert!(
            seen.deploys.contains(&(SOURCE.to_owned(), s, 0)),
            "{script:?}: source subtask {s}'s first attempt was not sent to the scripted worker: {seen:?}"
        );
    }
    assert_eq!(
        resets(&done.summary.0, "not-placed"),
        seen.deploys.len() as u64,
        "{script:?}: one not-placed reset per Deploy the scripted worker got ({seen:?}): {}",
        done.summary.0
    );
    assert!(
        splits_returned(&done.summary.0) >= seen.splits as u64,
        "{script:?}: the {} splits the scripted worker pulled did not all go back: {}",
        seen.splits,
        done.summary.0
    );
    let log = EventLog::read(&data).expect("the event log");
    for (id, message) in log.failovers() {
        assert!(
            message.starts_with("not placed: worker `a-scripted`"),
            "{script:?}: {id:?} was reset for another reason than the scripted worker's Deploy: {message}"
        );
    }
    assert!(workers.files_left().is_empty(), "{}", workers.logs());
}

#[test]
fn a_scripted_worker_that_refuses_the_deploy_after_pulling_a_split_loses_no_split() {
    scripted_peer_loses_no_split(Script::RefuseAfterPull);
}

#[test]
fn a_scripted_worker_that_never_answers_the_deploy_after_pulling_a_split_loses_no_split() {
    scripted_peer_loses_no_split(Script::HangAfterPull);
}

#[test]
fn an_attempt_with_no_worker_to_run_on_waits_then_fails_naming_slot_request_timeout_ms() {
    let fx = Fixture::words();
    let file = job(&fx, 3, "slot-request-timeout-ms = 1500\n", |j| {
        j.source_delay_us = 200;
        j.sink_delay_us = 0;
    });
    let addr = free_port();
    let mut workers = Workers::start(1, &addr, &fx.path("workers"), 2);
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 1, 1000);
    run.log = Some("warn,coordhost::remote=info");
    let mut running = run.start();
    let stderr_file = fx.path("data.run1.err");
    running
        .poll_until(|| {
            std::fs::read_to_string(&stderr_file)
                .ok()
                .filter(|t| t.contains("deploying"))
                .map(|_| ())
        })
        .expect("an attempt is deployed");
    workers.kill(0);
    let killed = Instant::now();
    let exited = running.wait_exit();
    let after = killed.elapsed();
    let stderr = exited.stderr;
    assert_eq!(exited.code, Some(1), "{stderr}");
    let says = "found no worker to run on within 1500 ms (job.slot-request-timeout-ms): no worker is registered";
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("coordhost: ") && l.contains(says)),
        "the error line should say `{says}`:\n{stderr}"
    );
    assert!(
        stderr.contains("no worker is registered: waiting for one (at most 1500 ms"),
        "the wait is logged once, naming the setting:\n{stderr}"
    );
    assert!(
        !stderr.contains("failed on attempt"),
        "waiting for a worker used up attempts:\n{stderr}"
    );
    // It waited the setting's 1.5 s from its first try to place an attempt
    // after the kill (the Deploys to the dead worker failing, then no
    // worker at all once it was given up after 1 s).
    assert!(
        after >= Duration::from_millis(1500),
        "the job failed {after:?} after its only worker was killed: it did not wait"
    );

    // The setting is checked like every other.
    let file = job(&fx, 3, "slot-request-timeout-ms = 0\n", |_| {});
    let mut bad = Coordhost::new(&file, &fx.path("bad"));
    let exited = bad.start().wait_exit();
    assert_eq!(exited.code, Some(2), "{}", exited.stderr);
    assert!(
        exited
            .stderr
            .contains("field `job.slot-request-timeout-ms`: 0 is not in 1..=86400000"),
        "{}",
        exited.stderr
    );
}

/// `(vertex, subtask, attempt) → worker` of every "deploying" line of a
/// coordinator's stderr (logged by `coordhost::remote` at info level).
fn deployed(stderr: &str) -> BTreeMap<(String, u32, u32), String> {
    let mut out = BTreeMap::new();
    for line in stderr.lines().filter(|l| l.contains(" deploying ")) {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|t| t.strip_prefix(&format!("{name}=")))
                .map(|v| v.trim_matches('"').to_owned())
        };
        if let (Some(w), Some(v), Some(s), Some(a)) = (
            field("worker"),
            field("vertex"),
            field("subtask").and_then(|s| s.parse().ok()),
            field("attempt").and_then(|a| a.parse().ok()),
        ) {
            out.insert((v, s, a), w);
        }
    }
    out
}

#[test]
fn the_next_attempt_of_a_task_that_failed_on_a_worker_runs_on_another_worker() {
    let fx = Fixture::words();
    // Two attempts per execution vertex: one sent back to the worker it
    // failed on would fail again, and the job with it.
    let file = job(&fx, 2, "", |j| {
        j.source_delay_us = 0;
        j.sink_delay_us = 0;
    });
    let addr = free_port();
    // Every attempt on w0 fails, as on a worker whose disk is full.
    let workers = Workers::start_with_knobs(
        2,
        &addr,
        &fx.path("workers"),
        2,
        &[(0, "worker::fail-every-task=return")],
    );
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 2, 5000);
    run.log = Some("warn,coordhost::remote=info");
    let done = run.run_to_end();
    let stderr = std::fs::read_to_string(fx.path("data.run1.err")).unwrap_or_default();
    let placed = deployed(&stderr);
    let on_w0: Vec<&(String, u32, u32)> = placed
        .iter()
        .filter(|(_, w)| *w == "w0")
        .map(|(k, _)| k)
        .collect();
    assert!(
        !on_w0.is_empty(),
        "no attempt was deployed on w0 (placement {placed:?}):\n{stderr}"
    );
    for (v, s, a) in on_w0 {
        let next = placed.get(&(v.clone(), *s, a + 1));
        assert_eq!(
            next.map(String::as_str),
            Some("w1"),
            "attempt {a} of `{v}` subtask {s} failed on w0; its next attempt went to {next:?} (placement {placed:?})"
        );
    }
    assert!(
        resets(&done.summary.0, "failover") >= 1,
        "{}",
        done.summary.0
    );
    assert_output(&data, &fx, "with every attempt on w0 failing");
    assert!(workers.files_left().is_empty(), "{}", workers.logs());
}
