//! Issue 25, item 3: high availability through an etcd that speaks only
//! TLS and requires client certificates (`etcd --client-cert-auth`), all
//! certificates made by `coordhost cluster certs ... --etcd-host
//! 127.0.0.1`. A coordinator campaigns over `etcds://` with its
//! certificate; two TLS workers find it through the same etcd and run the
//! word count to its right output. A coordinator without a client
//! certificate, and one with a plain `etcd://` URL, are refused by etcd
//! and stop with an error naming it; `etcds://` without `--ha-ca` is
//! refused at once (exit 2).
//!
//! etcd must be installed (`make ha-deps`); a missing etcd fails the test.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::crash::{Fixture, JOB, WordJob, expected_output, sorted_output};
use crate::support::etcd::{Etcd, spawn_ha_run};
use crate::support::workers::{Workers, external_args, free_port};

/// Heartbeat timeout, ms: generous, for a loaded machine.
const HEARTBEAT_MS: u64 = 5000;

fn certs(dir: &Path) {
    let out = crate::support::coordhost()
        .args(["cluster", "certs"])
        .arg(dir)
        .args([
            "--job",
            JOB,
            "--workers",
            "w0,w1",
            "--etcd-host",
            "127.0.0.1",
        ])
        .output()
        .expect("run coordhost cluster certs");
    assert!(
        out.status.success(),
        "cluster certs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The worker-TLS and etcd flags of process `name` (`coordinator`, `w0`).
fn flags(pki: &Path, name: &str) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    vec![
        "--tls-cert".into(),
        f(&format!("{name}.pem")),
        "--tls-key".into(),
        f(&format!("{name}.key")),
        "--tls-ca".into(),
        f("ca.pem"),
        "--ha-ca".into(),
        f("ca.pem"),
        "--ha-cert".into(),
        f(&format!("{name}.pem")),
        "--ha-key".into(),
        f(&format!("{name}.key")),
    ]
}

/// Waits for `child` to end, at most `within`; its exit code.
fn wait(child: &mut std::process::Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the coordinator did not end within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn workers_find_the_leader_through_an_etcd_that_requires_client_certificates() {
    let fx = Fixture::words();
    let pki = fx.path("pki");
    certs(&pki);
    let etcd = Etcd::start_tls(&fx.path("etcd"), &pki);
    assert!(etcd.url().starts_with("etcds://"), "{}", etcd.url());
    let mut j = WordJob::new(&fx.input);
    j.source_delay_us = 0;
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let addr = free_port();
    let mut extra = external_args(&addr, 2, HEARTBEAT_MS);
    extra.extend(flags(&pki, "coordinator"));
    let mut leader = spawn_ha_run("A", &file, &data, &etcd, 3, &base, &extra);
    let workers = Workers::start_with(
        2,
        &format!("{}/{JOB}", etcd.url()),
        &fx.path("workers"),
        2,
        |i| flags(&pki, &format!("w{i}")),
    );
    let code = wait(&mut leader.child, Duration::from_secs(180));
    let stderr = std::fs::read_to_string(&leader.stderr).unwrap_or_default();
    assert_eq!(
        code,
        Some(0),
        "the leader over etcds://:\n{stderr}\n{}\n{}",
        workers.logs(),
        etcd.log()
    );
    assert!(stderr.contains("leading job `wordcount`"), "{stderr}");
    assert!(
        sorted_output(&data) == expected_output(&fx.input),
        "the word count through TLS etcd and TLS workers differs"
    );
    for i in 0..2 {
        let log = workers.log_of(i);
        assert!(
            log.contains("the job's leader") && log.contains("registered"),
            "w{i} did not find the leader through etcd:\n{log}"
        );
    }
    drop(workers);

    // Without a client certificate etcd refuses the connection; a plain
    // URL to its TLS port gets nowhere either. Each stops (exit 1) naming
    // etcd.
    let ca = pki.join("ca.pem").display().to_string();
    for (what, extra, url) in [
        (
            "no client certificate",
            vec!["--ha-ca".to_owned(), ca.clone()],
            None,
        ),
        (
            "a plain etcd:// URL",
            Vec::new(),
            Some(format!("etcd://{}", etcd.endpoint())),
        ),
    ] {
        let mut command = crate::support::coordhost();
        command
            .arg("--cache-dir")
            .arg(crate::support::cache_dir())
            .arg("run")
            .arg(&file)
            .arg("--data-dir")
            .arg(fx.path("refused"))
            .arg("--ha")
            .arg(url.unwrap_or_else(|| etcd.url()))
            .args(&extra);
        let started = Instant::now();
        let out = command.output().expect("run coordhost");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("etcd at {}", etcd.endpoint())),
            "{what}: the error names etcd: {stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: took {:?}",
            started.elapsed()
        );
        assert!(
            !fx.path("refused").join("log").exists()
                || crate::support::segment_files(&fx.path("refused").join("log")).is_empty(),
            "{what}: a refused coordinator wrote a log"
        );
    }
    let out = crate::support::coordhost()
        .arg("run")
        .arg(&file)
        .arg("--data-dir")
        .arg(fx.path("refused"))
        .arg("--ha")
        .arg(etcd.url())
        .output()
        .expect("run coordhost");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--ha-ca FILE"), "{stderr}");
}
