//! Issue 14, item 7: several machines, nothing shared but the job's input.
//! The TPC-H Q1 example on 1 coordinator (root network namespace, on a
//! bridge's address) + 3 `coordhost worker` processes, each in a network
//! namespace of its own with its own address and its own data directory,
//! so every coordinator–worker call and every worker-to-worker read of a
//! partition crosses namespaces over veth pairs and the bridge.
//!
//! Needs root and iproute2 (`ip netns`); fails saying so otherwise.

use std::path::Path;

use crate::support::crash::Coordhost;
use crate::support::job::example_job;
use crate::support::netns::Netns;
use crate::support::published_lines;
use crate::support::workers::{Workers, external_args};

/// Heartbeat timeout, ms: generous, for a loaded machine.
const HEARTBEAT_MS: u64 = 5000;

/// The sorted lines of the published `tpch-q1` output of `data_dir`.
fn tpch_output(data_dir: &Path) -> Vec<String> {
    let mut lines = published_lines(&data_dir.join("output").join("tpch-q1"));
    lines.sort();
    lines
}

/// A port nobody listens on, on `ip` (an address of this namespace).
fn free_port_on(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("bind a free port on {ip}: {e}"))
        .port()
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
    let workers = Workers::start_in_namespaces_with(
        &net,
        3,
        &addr,
        &tmp.path().join("workers"),
        1,
        |_| vec!["--insecure-listen".into()],
    );
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
