//! Issue 30, HA without a shared disk (docs/object-storage.md, "High
//! availability"): real `coordhost run --ha` processes on a real etcd with
//! the job's event log on a real S3 server (SeaweedFS, support/s3.rs), as
//! on separate hosts: coordinator A in network namespace 0, B in namespace
//! 1 (support/netns.rs), etcd and the S3 server on the bridge's address in
//! the root namespace. The two coordinators have **separate data
//! directories**; only the sink folder is shared (a place both can publish
//! to, as a bucket would be).
//!
//! - a sink folder with an entry that no run in the object log wrote is
//!   refused (exit 2) naming it, before anything is written;
//! - the leader SIGKILLed once its sources finished: the standby, on its
//!   own data directory, reads the log from the objects, recovers the job
//!   and finishes it with the right counts; no log file is on either disk;
//! - a leader that does not know it was deposed (the `ha::blind-leader`
//!   test knob: its fence always holds, a lost lease does not stop it),
//!   paused past its lease and resumed after the standby took over: its
//!   next group commit meets the object the new leader created under that
//!   number, the conditional create refuses it, and it stops (exit 1)
//!   naming the object; the log stays whole and holds nothing of the old
//!   leader after the new leader's election.
//!
//! Needs root, iproute2 (`ip netns`), etcd and weed; fails saying so
//! otherwise.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::events_object_log_ops::read_log;
use crate::ha::{Coordinator, leading_line, standby_line, term_in};
use crate::support::crash::{
    EventLog, Fixture, JOB, SOURCE, WordJob, expected_output, first_difference, sorted_output,
};
use crate::support::etcd::{Etcd, spawn_ha_run_as};
use crate::support::netns::{Netns, coordhost_in};
use crate::support::s3::Seaweed;

const BUCKET: &str = "coordhost-ha";
/// The leases of these tests, seconds.
const TTL_S: u64 = 1;

/// The word count job with its log at `url` and its sink folder under
/// `shared` (`<shared>/output/<job>`) instead of each data directory.
fn job_file(fx: &Fixture, url: &str, shared: &Path) -> PathBuf {
    let mut j = WordJob::new(&fx.input);
    // Sources done in about a second, sinks several seconds more.
    j.source_delay_us = 40;
    j.sink_delay_us = 2000;
    let file = j.write(&fx.path("job.toml"));
    let text = std::fs::read_to_string(&file).expect("job file");
    let edited = text
        .replacen("[job]\n", &format!("[job]\nlog = \"{url}\"\n"), 1)
        .replace(
            "${data_dir}/output/",
            &format!("{}/output/", shared.display()),
        );
    assert!(
        edited.contains(&format!("{}/output/", shared.display())) && edited.contains("log = "),
        "the job file names its sink under the data directory and has a [job] table:\n{text}"
    );
    std::fs::write(&file, edited).expect("job file");
    file
}

/// Two namespaces for the coordinators, and etcd and the S3 server on the
/// bridge's address.
struct Place {
    net: Netns,
    etcd: Etcd,
    server: Seaweed,
}

impl Place {
    fn new(fx: &Fixture) -> Self {
        let net = Netns::create(2);
        let etcd = Etcd::start_on(&fx.path("etcd"), &net.bridge_ip());
        let server = Seaweed::start_on(&fx.path("seaweed"), BUCKET, &net.bridge_ip());
        Self { net, etcd, server }
    }
}

/// Starts coordinator `name` in namespace `ns` on its own data directory
/// `data`, with the server's `AWS_*` variables and `failpoints` (if any).
fn start(
    name: &'static str,
    ns: usize,
    fx: &Fixture,
    file: &Path,
    data: &Path,
    place: &Place,
    failpoints: Option<&str>,
) -> Coordinator {
    let mut command = coordhost_in(place.net.name(ns));
    command.envs(place.server.env());
    if let Some(f) = failpoints {
        command.env("FAILPOINTS", f);
    }
    Coordinator::of(
        name,
        spawn_ha_run_as(
            command,
            name,
            file,
            data,
            &place.etcd,
            TTL_S,
            &fx.path("coordinators"),
            &[],
        ),
    )
}

/// The terms of the log's `LeaderElected` records, in order.
fn elected_terms(log: &EventLog) -> Vec<u64> {
    log.events
        .iter()
        .filter(|e| e["event"]["kind"] == "LeaderElected")
        .filter_map(|e| e["event"]["event"]["term"].as_u64())
        .collect()
}

fn assert_counts(shared: &Path, fx: &Fixture, context: &str) {
    let got = sorted_output(shared);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "{context}: output differs from the counts: {}",
        first_difference(&got, &want)
    );
}

/// No segment file of the job's log on a data directory: the log lives on
/// the objects only.
fn assert_no_log_on_disk(data: &Path) {
    let log = data.join(JOB).join("log");
    assert!(
        !log.exists(),
        "{} exists: the log was written to the disk, not only to the objects",
        log.display()
    );
}

#[test]
fn ha_objects_a_standby_on_another_data_directory_recovers_from_the_object_log() {
    let fx = Fixture::words();
    let place = Place::new(&fx);
    let server = &place.server;
    let url = format!("s3://{BUCKET}/kill");
    let shared = fx.path("shared");
    let file = job_file(&fx, &url, &shared);
    let (data_a, data_b) = (fx.path("data-a"), fx.path("data-b"));
    // A sink folder holding what no run of this job in its object log
    // wrote is refused once the log is read (the data directory cannot
    // tell), naming the folder, the entry and the log; nothing is written.
    let sink = shared.join("output").join(JOB);
    std::fs::create_dir_all(&sink).expect("sink folder");
    std::fs::write(sink.join("notes.txt"), "mine").expect("a foreign file");
    let refused = crate::support::coordhost()
        .envs(server.env())
        .args(["run", file.to_str().unwrap(), "--data-dir"])
        .arg(fx.path("data-x"))
        .output()
        .expect("spawn coordhost");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&sink.display().to_string())
            && stderr.contains("`notes.txt`, which this job did not write")
            && stderr.contains(&url),
        "{stderr}"
    );
    assert!(
        read_log(server, &url).is_none_or(|l| l.events.is_empty()),
        "the refused run wrote no record"
    );
    std::fs::remove_file(sink.join("notes.txt")).expect("remove it");
    let mut a = start("A", 0, &fx, &file, &data_a, &place, None);
    let (a_leads, _) = a.wait_for_line(&leading_line());
    let mut b = start("B", 1, &fx, &file, &data_b, &place, None);
    b.wait_for_line(&standby_line());
    let sources = WordJob::new(&fx.input).sources as usize;
    a.poll_until("A's sources finish (in the object log)", || {
        read_log(server, &url).filter(|l| l.finished(SOURCE).len() == sources)
    });
    a.kill();
    let (b_leads, _) = b.wait_for_line(&leading_line());
    assert!(
        term_in(&b_leads) > term_in(&a_leads),
        "{b_leads} / {a_leads}"
    );
    let summary = b.finish();
    assert!(
        summary.recovered(),
        "B did not recover from the object log: {}",
        summary.0
    );
    assert_counts(&shared, &fx, "after the takeover");
    let log = read_log(server, &url).expect("the log is on the objects");
    assert_eq!(
        elected_terms(&log),
        [term_in(&a_leads), term_in(&b_leads)],
        "the object log records A's then B's leadership"
    );
    assert_no_log_on_disk(&data_a);
    assert_no_log_on_disk(&data_b);
}

#[test]
fn ha_objects_a_deposed_leader_blind_to_its_lost_lease_is_stopped_by_the_conditional_create() {
    let fx = Fixture::words();
    let place = Place::new(&fx);
    let server = &place.server;
    let url = format!("s3://{BUCKET}/blind");
    let shared = fx.path("shared");
    let file = job_file(&fx, &url, &shared);
    let (data_a, data_b) = (fx.path("data-a"), fx.path("data-b"));
    let mut a = start(
        "A",
        0,
        &fx,
        &file,
        &data_a,
        &place,
        Some("ha::blind-leader=return"),
    );
    let (a_leads, _) = a.wait_for_line(&leading_line());
    let mut b = start("B", 1, &fx, &file, &data_b, &place, None);
    b.wait_for_line(&standby_line());
    let sources = WordJob::new(&fx.input).sources as usize;
    a.poll_until("A's sources finish (in the object log)", || {
        read_log(server, &url).filter(|l| l.finished(SOURCE).len() == sources)
    });
    a.signal("STOP");
    let (b_leads, _) = b.wait_for_line(&leading_line());
    let b_term = term_in(&b_leads);
    // B's election is in the log before A runs again.
    b.poll_until("B's LeaderElected is in the object log", || {
        read_log(server, &url).filter(|l| elected_terms(l).contains(&b_term))
    });
    a.signal("CONT");
    let (code, _) = a.wait(Duration::from_secs(60));
    assert_eq!(code, Some(1), "the deposed leader's exit\n{}", a.context());
    let stderr = a.stderr();
    assert!(
        stderr.contains("already exists: another coordinator extended the job's event log")
            && stderr.contains(&url),
        "A is not stopped by the conditional create of the next object\n{}",
        a.context()
    );
    let summary = b.finish();
    assert!(summary.recovered(), "B did not recover: {}", summary.0);
    assert_counts(&shared, &fx, "after the blind leader was stopped");
    let log = read_log(server, &url).expect("the log is whole");
    assert_eq!(elected_terms(&log), [term_in(&a_leads), b_term]);
    // Nothing of A's segment comes after B's election.
    let attempt_of = |e: &serde_json::Value| e["position"]["attempt"].as_u64();
    let b_at = log
        .events
        .iter()
        .position(|e| {
            e["event"]["kind"] == "LeaderElected"
                && e["event"]["event"]["term"].as_u64() == Some(b_term)
        })
        .expect("B's election");
    let a_attempt = log
        .events
        .iter()
        .find(|e| e["event"]["kind"] == "LeaderElected")
        .and_then(attempt_of)
        .expect("A's segment");
    let late: Vec<_> = log.events[b_at..]
        .iter()
        .filter(|e| attempt_of(e) == Some(a_attempt))
        .collect();
    assert!(
        late.is_empty(),
        "records of the deposed leader after B's election: {late:?}"
    );
}
