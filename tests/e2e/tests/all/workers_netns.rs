//! Issue 14, item 7: several machines, nothing shared but the job's input.
//! The TPC-H Q1 example on 1 coordinator (root network namespace, on a
//! bridge's address) + 3 `coordhost worker` processes, each in a network
//! namespace of its own with its own address and its own data directory,
//! so every coordinator–worker call and every worker-to-worker read of a
//! partition crosses namespaces over veth pairs and the bridge.
//!
//! Issue 24, item 5(b): the coordinator cut off from all its workers for
//! 2 s in the middle of a job (bogus neighbour entries on both sides, the
//! workers still reach each other): the job waits for them instead of using
//! up attempts on "no worker is registered", and finishes with the exact
//! output.
//!
//! Needs root and iproute2 (`ip netns`); fails saying so otherwise.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::crash::{
    Coordhost, EventLog, Fixture, SOURCE, WordJob, expected_output, first_difference, sorted_output,
};
use crate::support::job::example_job;
use crate::support::netns::Netns;
use crate::support::published_lines;
use crate::support::workers::{Workers, external_args, free_port_on};

/// Heartbeat timeout, ms: generous, for a loaded machine.
const HEARTBEAT_MS: u64 = 5000;

/// The sorted lines of the published `tpch-q1` output of `data_dir`.
fn tpch_output(data_dir: &Path) -> Vec<String> {
    let mut lines = published_lines(&data_dir.join("output").join("tpch-q1"));
    lines.sort();
    lines
}

#[test]
fn workers_in_separate_network_namespaces_give_the_output_embedded_workers_give() {
    // Dropped last: the workers are killed before their namespaces go.
    let net = Netns::create(3);
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = tmp.path().join("lineitem");
    coordhost_datagen::write_lineitem(&input, 0.01, 3).expect("generate lineitem");
    let job = example_job("tpch-q1.toml", "build/data/tpch-sf0.1", &input, tmp.path());
    // Several splits per reader; the scan slowed (sleeps, no CPU) so that
    // its subtasks last about a second each: the first three deploys find
    // every worker's one slot free and go one to each worker.
    let text = std::fs::read_to_string(&job).expect("job");
    assert!(text.contains("split-bytes = 4194304") && text.contains("source = \"lineitem\""));
    let text = text
        .replace("split-bytes = 4194304", "split-bytes = 500000")
        .replace(
            "source = \"lineitem\"",
            "source = \"lineitem\"\nrecord-delay-us = 60",
        );
    std::fs::write(&job, text).expect("job");

    let mut embedded = Coordhost::new(&job, &tmp.path().join("embedded"));
    embedded.run_to_end();
    let want = tpch_output(&tmp.path().join("embedded"));
    assert!(
        want.iter().any(|l| l.starts_with("A,F,")) && want.iter().any(|l| l.starts_with("R,F,")),
        "the embedded run's output has the Q1 groups: {want:?}"
    );

    let addr = format!("{}:{}", net.bridge_ip(), free_port_on(&net.bridge_ip()));
    // Plain gRPC off loopback must be asked for (workers_tls.rs runs the
    // same cluster over mutual TLS).
    let workers =
        Workers::start_in_namespaces_with(&net, 3, &addr, &tmp.path().join("workers"), 1, |_| {
            vec!["--insecure-listen".into()]
        });
    let data = tmp.path().join("external");
    let mut external = Coordhost::new(&job, &data);
    external.extra_args = external_args(&addr, 3, HEARTBEAT_MS);
    external.extra_args.push("--insecure-listen".into());
    let run = external.run_to_end();
    assert_eq!(
        run.summary.0["workers"].as_u64(),
        Some(3),
        "3 workers × 1 slot: {}\n{}",
        run.summary.0,
        workers.logs()
    );
    assert_eq!(
        tpch_output(&data),
        want,
        "workers in 3 network namespaces vs embedded\n{}",
        workers.logs()
    );

    for i in 0..3 {
        let log = workers.log_of(i);
        let own = format!("address={}:", net.ip(i));
        assert!(
            log.lines()
                .any(|l| l.contains("worker started") && l.contains(&own)),
            "w{i} did not serve on its namespace's address {}:\n{log}",
            net.ip(i)
        );
        assert!(
            log.lines()
                .any(|l| l.contains("running") && l.contains("vertex=scan")),
            "w{i} ran no scan subtask:\n{log}"
        );
        let partitions = workers.data_dir(i).join("partitions");
        let deleted = format!("deleted partition {}/", partitions.display());
        assert!(
            log.contains(&deleted),
            "w{i} held (and deleted at the end) no partition in its own data directory {}:\n{log}",
            partitions.display()
        );
        for j in (0..3).filter(|&j| j != i) {
            let other = format!("deleted partition {}", workers.data_dir(j).display());
            assert!(
                !log.contains(&other),
                "w{i} touched w{j}'s data directory:\n{log}"
            );
        }
    }
    // Every worker held a scan partition, so a summary subtask, wherever it
    // ran, read two of its inputs from workers in other namespaces.
    assert!(
        (0..3).any(|i| workers
            .log_of(i)
            .lines()
            .any(|l| l.contains("running") && l.contains("vertex=summary"))),
        "no worker ran a summary subtask:\n{}",
        workers.logs()
    );
    let left = workers.files_left();
    assert!(
        left.is_empty(),
        "files left on the workers after the job: {left:?}\n{}",
        workers.logs()
    );
    drop(workers);
    drop(net);
}

/// Heartbeat timeout of the cut test, ms: half the cut, so the coordinator
/// surely gives every worker up while the cut lasts (and the workers it).
const CUT_HEARTBEAT_MS: u64 = 1000;

#[test]
fn a_2_s_cut_of_the_coordinator_from_its_workers_mid_job_burns_no_attempt() {
    // Dropped last: the workers are killed before their namespaces go.
    let net = Netns::create(3);
    let fx = Fixture::words();
    // About 3 s of slowed sinks after the sources: the cut falls among them.
    let file = WordJob::new(&fx.input).write(&fx.path("job.toml"));
    let addr = format!("{}:{}", net.bridge_ip(), free_port_on(&net.bridge_ip()));
    let workers = Workers::start_in_namespaces(&net, 3, &addr, &fx.path("workers"), 2);
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&addr, 3, CUT_HEARTBEAT_MS);
    // Plain gRPC on the bridge's address (the TLS cluster is workers_tls.rs).
    run.extra_args.push("--insecure-listen".into());
    run.log = Some("warn,coordhost::remote=info");
    let mut running = run.start();
    running
        .poll_until(|| {
            EventLog::read(&data)
                .filter(|l| l.finished(SOURCE).len() == 4)
                .map(|_| ())
        })
        .unwrap_or_else(|e| panic!("the sources finish: {e}\n{}", workers.logs()));
    for i in 0..3 {
        net.cut_bridge_from(i);
    }
    std::thread::sleep(Duration::from_secs(2));
    for i in 0..3 {
        net.heal_bridge_from(i);
    }
    let done = running.finish();
    let stderr = std::fs::read_to_string(fx.path("data.run1.err")).unwrap_or_default();
    // The cut took effect: every worker was given up, and attempts had to
    // wait for one.
    for i in 0..3 {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains("worker lost") && l.contains(&format!("worker=w{i}"))),
            "the coordinator never gave w{i} up during the cut:\n{stderr}"
        );
    }
    assert!(
        stderr.contains("no worker is registered: waiting for one"),
        "no attempt waited for a worker during the cut:\n{stderr}"
    );
    // No attempt burnt: what counts against max-attempts is an attempt
    // that ran on a worker lost in the cut (or held partitions there), at
    // most once per execution vertex; every Deploy the cut swallowed was
    // "not placed", which does not count.
    let log = EventLog::read(&data).expect("the event log");
    let mut counted: BTreeMap<(String, u64), Vec<String>> = BTreeMap::new();
    for (id, message) in log.failovers() {
        if message.starts_with("not placed: ") {
            continue;
        }
        assert!(
            message.contains("lost (no heartbeat")
                || message.contains("registered again")
                || message.contains("which held its partitions, was lost"),
            "{id:?} was reset for another reason than a worker lost in the cut: {message}"
        );
        counted.entry(id).or_default().push(message);
    }
    for (id, messages) in &counted {
        assert!(
            messages.len() <= 1,
            "{id:?} lost more than one attempt to a single cut: {messages:?}"
        );
    }
    assert!(
        !stderr.contains("failed on attempt") && !stderr.contains("no worker to run on"),
        "{stderr}"
    );
    let got = sorted_output(&data);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "after a 2 s cut: {} ({})\n{}",
        first_difference(&got, &want),
        done.summary.brief(),
        workers.logs()
    );
    let left = workers.files_left();
    assert!(
        left.is_empty(),
        "files left on the workers after the job: {left:?}\n{}",
        workers.logs()
    );
    drop(workers);
    drop(net);
}
