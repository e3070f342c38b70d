//! Two promises of docs/workers.md about the coordinator–worker contract,
//! checked with a raw gRPC client (the crate's generated `coordhost::rpc`
//! clients) against real `coordhost run` and `coordhost worker` processes:
//!
//! - a worker of another protocol revision is refused at registration,
//!   naming both revisions, and nothing is scheduled on it;
//! - a worker refuses a command of another coordinator session (and any
//!   command while it is registered with no coordinator).

use std::path::Path;
use std::time::{Duration, Instant};

use coordhost::rpc::{self, coordinator_client::CoordinatorClient, worker_client::WorkerClient};
use tonic::Code;

use crate::support::crash::{Coordhost, Fixture, WordJob, expected_output, sorted_output};
use crate::support::process::whole_lines;
use crate::support::workers::{Workers, external_args, free_port};

/// Heartbeat timeout, ms: generous, for a loaded machine.
const HEARTBEAT_MS: u64 = 5000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The word count, its sinks slowed by `sink_delay_us` per record.
fn job(fx: &Fixture, sink_delay_us: u64) -> std::path::PathBuf {
    let mut j = WordJob::new(&fx.input);
    j.source_delay_us = 0;
    j.sink_delay_us = sink_delay_us;
    j.write(&fx.path("job.toml"))
}

fn assert_output(data_dir: &Path, fx: &Fixture, context: &str) {
    assert!(
        sorted_output(data_dir) == expected_output(&fx.input),
        "{context}: the output differs from the word counts"
    );
}

#[test]
fn a_worker_of_another_protocol_revision_is_refused_at_registration() {
    let fx = Fixture::words();
    let file = job(&fx, 0);
    let addr = free_port();
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 1, HEARTBEAT_MS);
    let mut running = run.start();
    // The fake worker's `Worker` address: a socket that would see any call.
    let fake = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    fake.set_nonblocking(true).expect("nonblocking");
    let fake_addr = fake.local_addr().expect("addr").to_string();
    let other = rpc::PROTOCOL_VERSION + 1;
    let rt = runtime();
    let refused = running
        .poll_until(|| {
            rt.block_on(async {
                let Ok(mut client) = CoordinatorClient::connect(format!("http://{addr}")).await
                else {
                    // Not listening yet.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    return None;
                };
                Some(
                    client
                        .register(rpc::RegisterRequest {
                            protocol_version: other,
                            worker_id: "from-another-build".into(),
                            address: fake_addr.clone(),
                            slots: 4,
                            held: Vec::new(),
                            job: String::new(),
                        })
                        .await,
                )
            })
        })
        .expect("the coordinator listens");
    let status = refused.expect_err("a registration of another protocol revision is refused");
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let message = status.message();
    for says in [
        "from-another-build".to_string(),
        format!("revision {other}"),
        format!("revision {}", rpc::PROTOCOL_VERSION),
    ] {
        assert!(message.contains(&says), "`{message}` should say `{says}`");
    }

    // The coordinator still waits for a worker: a real one runs the job,
    // alone (its 2 slots; the refused worker offered 4), and nobody calls
    // the refused worker's address.
    let workers = Workers::start(1, &addr, &fx.path("workers"), 2);
    let done = running.finish();
    assert_eq!(
        done.summary.0["workers"].as_u64(),
        Some(2),
        "only the real worker's 2 slots: {}",
        done.summary.0
    );
    assert_output(&data, &fx, "after a refused registration");
    match fake.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the refused worker's address was called: {other:?}"),
    }
    assert!(workers.files_left().is_empty(), "{}", workers.logs());
}

/// Waits (at most 120 s) until the worker log `log` has a line containing
/// `marker`, and returns that line.
fn log_line(log: &Path, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = whole_lines(&text).lines().find(|l| l.contains(marker)) {
            return line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no `{marker}` in {} within 120 s:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every command a coordinator sends that carries a session, with
/// `session`; the status each one got (`Ok` as `None`).
fn commands(
    rt: &tokio::runtime::Runtime,
    worker: &str,
    session: u64,
) -> Vec<(&'static str, Option<tonic::Status>)> {
    rt.block_on(async {
        let mut c = WorkerClient::connect(format!("http://{worker}"))
            .await
            .expect("connect to the worker");
        // An attempt no job has: a command accepted by mistake harms nothing.
        let attempt = Some(rpc::Attempt {
            vertex: 999,
            subtask: 0,
            attempt: 0,
        });
        vec![
            (
                "Deploy",
                c.deploy(rpc::DeployRequest {
                    session,
                    job: "wordcount".into(),
                    attempt,
                    vertex_id: "count".into(),
                    ..Default::default()
                })
                .await
                .err(),
            ),
            (
                "Cancel",
                c.cancel(rpc::CancelRequest { session, attempt })
                    .await
                    .err(),
            ),
            (
                "FetchSinkOutput",
                c.fetch_sink_output(rpc::FetchSinkRequest {
                    session,
                    attempt,
                    job: "wordcount".into(),
                    vertex_id: "count".into(),
                })
                .await
                .err(),
            ),
            (
                "Release",
                c.release(rpc::ReleaseRequest {
                    session,
                    locations: Vec::new(),
                    job: "no-such-job".into(),
                    whole_job: true,
                })
                .await
                .err(),
            ),
        ]
    })
}

#[test]
fn a_worker_refuses_commands_of_another_coordinator_session() {
    let fx = Fixture::words();
    // Slowed sinks: the job (and so the worker's session) outlasts the
    // commands sent while it runs.
    let file = job(&fx, 500);
    let addr = free_port();
    let rt = runtime();
    // The worker first, with no coordinator yet.
    let workers = Workers::start(1, &addr, &fx.path("workers"), 2);
    let log = fx.path("workers").join("w0.start1.err");
    let serving = log_line(&log, "serving on ");
    let worker = serving
        .rsplit("serving on ")
        .next()
        .expect("address")
        .trim()
        .to_string();
    for (call, status) in commands(&rt, &worker, 1) {
        let status = status.unwrap_or_else(|| panic!("{call} accepted by an unregistered worker"));
        assert_eq!(
            status.code(),
            Code::FailedPrecondition,
            "{call}: {status:?}"
        );
        assert!(
            status
                .message()
                .contains("is not registered with a coordinator"),
            "{call}: {status:?}"
        );
    }

    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 1, HEARTBEAT_MS);
    let running = run.start();
    let registered = log_line(&log, "session=");
    let session: u64 = registered
        .rsplit("session=")
        .next()
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a session number in `{registered}`"));
    let wrong = session.wrapping_add(1);
    for (call, status) in commands(&rt, &worker, wrong) {
        let status = status.unwrap_or_else(|| panic!("{call} of session {wrong} accepted"));
        assert_eq!(
            status.code(),
            Code::FailedPrecondition,
            "{call}: {status:?}"
        );
        let says = format!("serves coordinator session {session}, not {wrong}");
        assert!(
            status.message().contains(&says),
            "{call}: `{}` should say `{says}`",
            status.message()
        );
    }
    // The same harmless Cancel with the right session is accepted: the
    // refusals above are the session's doing.
    let right = commands(&rt, &worker, session);
    let cancel = right.iter().find(|(c, _)| *c == "Cancel").expect("Cancel");
    assert!(
        cancel.1.is_none(),
        "Cancel in the worker's session: {:?}",
        cancel.1
    );

    let done = running.finish();
    assert_eq!(
        done.summary.0["workers"].as_u64(),
        Some(2),
        "{}",
        done.summary.0
    );
    assert_output(&data, &fx, "after refused commands");
    assert!(workers.files_left().is_empty(), "{}", workers.logs());
}
