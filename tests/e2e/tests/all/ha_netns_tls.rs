//! Issue 25, "What must show": high availability with TLS everywhere, on
//! machines of their own (network namespaces, as `ha_netns.rs`). etcd in
//! the root namespace on the bridge's address, speaking only TLS and
//! requiring client certificates (`--client-cert-auth`); coordinator A in
//! namespace 0 and standby B in namespace 1, both campaigning over
//! `etcds://` with their certificate and serving workers on mutual TLS;
//! two `coordhost worker` processes in namespaces 2 and 3 that find the
//! leader through the same TLS etcd (`--coordinator etcds://.../JOB`) and
//! talk TLS to it and to each other. Every certificate comes from
//! `coordhost cluster certs ... --etcd-host <bridge address>`.
//!
//! A is SIGKILLed once the word count's sources finished on the workers
//! (its sinks running); B is elected, the workers find it in etcd and
//! register with it over TLS with the partitions they kept, B recovers the
//! job and the counts are exact.
//!
//! Needs root, iproute2 (`ip netns`) and etcd; fails saying so otherwise.

use std::path::Path;

use crate::ha::{
    Coordinator, leading_line, registered_with, sources_finished, standby_line, term_in,
};
use crate::support::crash::{
    Fixture, JOB, WordJob, expected_output, first_difference, sorted_output,
};
use crate::support::etcd::{Etcd, spawn_ha_run_as};
use crate::support::netns::{Netns, coordhost_in};
use crate::support::workers::{Workers, external_args};

/// Lease TTL of the coordinators, seconds.
const TTL_S: u64 = 2;
/// Heartbeat timeout between coordinators and workers, ms (TLS handshakes
/// on a loaded 2-core machine).
const HEARTBEAT_MS: u64 = 3000;
/// Workers, in namespaces 2 and 3.
const WORKERS: usize = 2;
/// The port each coordinator serves workers on, in its own namespace.
const PORT: u16 = 7733;

/// The cluster-TLS and etcd-TLS flags of process `name` (`coordinator`,
/// `w0`): its own certificate for both.
fn flags(pki: &Path, name: &str) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    let (cert, key) = (f(&format!("{name}.pem")), f(&format!("{name}.key")));
    vec![
        "--tls-cert".into(),
        cert.clone(),
        "--tls-key".into(),
        key.clone(),
        "--tls-ca".into(),
        f("ca.pem"),
        "--ha-ca".into(),
        f("ca.pem"),
        "--ha-cert".into(),
        cert,
        "--ha-key".into(),
        key,
    ]
}

#[test]
fn the_standby_takes_over_a_killed_leader_with_tls_to_etcd_and_between_peers_in_namespaces() {
    let net = Netns::create(2 + WORKERS);
    let fx = Fixture::words();
    let pki = fx.path("pki");
    let out = crate::support::coordhost()
        .args(["cluster", "certs"])
        .arg(&pki)
        .args(["--job", JOB, "--workers", "w0,w1", "--etcd-host"])
        .arg(net.bridge_ip())
        .output()
        .expect("run coordhost cluster certs");
    assert!(
        out.status.success(),
        "cluster certs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let etcd = Etcd::start_tls_on(&fx.path("etcd"), &pki, &net.bridge_ip());
    assert!(etcd.url().starts_with("etcds://"), "{}", etcd.url());
    let mut job = WordJob::new(&fx.input);
    job.previous_worker_timeout_ms = 5000;
    job.source_delay_us = 40;
    job.sink_delay_us = 2000;
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let spawn = |name: &'static str, ns: usize| {
        let listen = format!("{}:{PORT}", net.ip(ns));
        let mut extra = external_args(&listen, WORKERS, HEARTBEAT_MS);
        extra.extend(flags(&pki, "coordinator"));
        // Each try to reach etcd at the start shows, with its time.
        let mut command = coordhost_in(net.name(ns));
        command.env("COORDHOST_LOG", "warn,coordhost::ha=debug");
        let mut c = Coordinator::of(
            name,
            spawn_ha_run_as(command, name, &file, &data, &etcd, TTL_S, &base, &extra),
        );
        c.also_show.push(fx.path("workers"));
        c.also_describe = Some(Box::new(net.describer()));
        c
    };
    let mut a = spawn("A", 0);
    let (a_leads, _) = a.wait_for_line(&leading_line());
    let a_term = term_in(&a_leads);
    assert!(
        a_leads.contains("etcds://"),
        "A leads through TLS etcd: {a_leads}"
    );
    let mut b = spawn("B", 1);
    let (b_waits, _) = b.wait_for_line(&standby_line());
    assert!(
        b_waits.contains(&net.ip(0)),
        "B names A (in namespace 0) as the leader: {b_waits}"
    );
    let workers = Workers::start_in_namespaces_from_with(
        &net,
        2,
        WORKERS,
        &format!("{}/{JOB}", etcd.url()),
        &fx.path("workers"),
        2,
        |i| flags(&pki, &format!("w{i}")),
    );
    a.poll_until("A's sources finish on the workers", || {
        sources_finished(&data, job.sources)
    });
    for i in 0..WORKERS {
        let log = workers.log_of(i);
        assert!(
            log.contains("tls=true")
                && registered_with(&log, &format!("{}:{PORT}", net.ip(0)), a_term),
            "w{i} found A through TLS etcd and registered over TLS:\n{log}"
        );
    }
    a.kill();
    let (b_leads, _) = b.wait_for_line(&leading_line());
    let b_term = term_in(&b_leads);
    assert!(
        b_term > a_term,
        "B's term {b_term} is not newer than A's {a_term}"
    );
    let summary = b.finish();
    assert!(summary.recovered(), "B recovered the job: {}", summary.0);
    assert!(
        summary.tasks_skipped() > 0,
        "B kept the partitions the workers held: {}",
        summary.0
    );
    let b_addr = format!("{}:{PORT}", net.ip(1));
    for i in 0..WORKERS {
        let log = workers.log_of(i);
        assert!(
            registered_with(&log, &b_addr, b_term),
            "w{i} found B through TLS etcd and registered with it:\n{log}"
        );
    }
    let got = sorted_output(&data);
    let want = expected_output(&fx.input);
    assert!(
        got == want,
        "after the leader's SIGKILL: output differs from the counts: {}\n{}",
        first_difference(&got, &want),
        b.context()
    );
}
