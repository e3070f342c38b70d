//! Issue 25 item 1: `[cluster] tls = { cert, key, ca }` in a job file (the
//! coordinator) or in a worker's `--config` file, the alternative to the
//! `--tls-*` flags (docs/job-file.md, docs/workers.md "Security"). Paths
//! are relative to the file that names them; the flags override the table;
//! a missing file, an unknown field or a certificate of another job is one
//! line naming the file and the field, exit 2, with nothing created.
//!
//! On loopback, but with the coordinator listening on `0.0.0.0` (not a
//! loopback address: refused without TLS), so the table is what lets it
//! listen there.

use std::path::{Path, PathBuf};

use crate::support::crash::{Coordhost, Fixture, JOB, WordJob, expected_output, sorted_output};
use crate::support::workers::{Workers, external_args, free_port};

/// Heartbeat timeout, ms: generous, for a loaded machine.
const HEARTBEAT_MS: u64 = 5000;

/// `coordhost cluster certs DIR --job JOB --workers w0,w1`.
fn certs(dir: &Path, job: &str) {
    let out = crate::support::coordhost()
        .args(["cluster", "certs"])
        .arg(dir)
        .args(["--job", job, "--workers", "w0,w1"])
        .output()
        .expect("run coordhost cluster certs");
    assert!(
        out.status.success(),
        "cluster certs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The word-count job file at `dir/job.toml` with `table` appended.
fn job_with(fx: &Fixture, dir: &Path, table: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("job folder");
    let mut j = WordJob::new(&fx.input);
    j.source_delay_us = 0;
    j.sink_delay_us = 0;
    let file = j.write(&dir.join("job.toml"));
    let mut text = std::fs::read_to_string(&file).expect("job file");
    text.push_str(table);
    std::fs::write(&file, text).expect("job file");
    file
}

/// `[cluster] tls = { ... }` naming `NAME.pem`, `NAME.key` and `ca.pem`
/// below the relative folder `pki`.
fn table(pki: &str, name: &str) -> String {
    format!(
        "\n[cluster]\ntls = {{ cert = \"{pki}/{name}.pem\", key = \"{pki}/{name}.key\", ca = \"{pki}/ca.pem\" }}\n"
    )
}

/// The listen address `0.0.0.0:PORT` (a free port) and the address
/// workers reach it at, `127.0.0.1:PORT`.
fn wildcard_listen() -> (String, String) {
    let addr = free_port();
    let port = addr.rsplit_once(':').expect("HOST:PORT").1.to_owned();
    (format!("0.0.0.0:{port}"), format!("127.0.0.1:{port}"))
}

#[test]
fn a_cluster_tls_table_in_the_job_file_and_in_the_workers_config_runs_the_job_over_tls() {
    let fx = Fixture::words();
    let jobs = fx.path("jobs");
    certs(&jobs.join("pki"), JOB);
    let file = job_with(&fx, &jobs, &table("pki", "coordinator"));
    // Each worker's file sits in a folder of its own, its paths relative
    // to it.
    let configs: Vec<PathBuf> = (0..2)
        .map(|i| {
            let dir = fx.path(&format!("conf-w{i}"));
            std::fs::create_dir_all(&dir).expect("worker config folder");
            let path = dir.join("cluster.toml");
            std::fs::write(&path, table("../jobs/pki", &format!("w{i}"))).expect("config");
            path
        })
        .collect();
    let (listen, reach) = wildcard_listen();
    let data = fx.path("data");
    let mut run = Coordhost::new(&file, &data);
    run.extra_args = external_args(&listen, 2, HEARTBEAT_MS);
    let running = run.start();
    let workers = Workers::start_with(2, &reach, &fx.path("workers"), 2, |i| {
        vec!["--config".into(), configs[i].display().to_string()]
    });
    let finished = running.finish();
    assert_eq!(finished.summary.status(), "finished");
    assert!(
        sorted_output(&data) == expected_output(&fx.input),
        "the word count over TLS from the files' tables differs"
    );
    for i in 0..2 {
        let log = workers.log_of(i);
        assert!(
            log.contains("tls=true") && log.contains("registered"),
            "w{i} did not register over TLS:\n{log}"
        );
    }
    // The same listen address without the table: refused, exit 2.
    let plain = job_with(&fx, &fx.path("plain"), "");
    let mut run = Coordhost::new(&plain, &fx.path("plain-data"));
    run.extra_args = external_args(&listen, 2, HEARTBEAT_MS);
    let (code, stderr) = run.start().exit();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("not a loopback address, and no TLS"),
        "{stderr}"
    );
    drop(workers);
}

#[test]
fn a_bad_cluster_tls_table_is_one_line_naming_the_file_and_the_field() {
    let fx = Fixture::words();
    let jobs = fx.path("jobs");
    certs(&jobs.join("pki"), JOB);
    certs(&jobs.join("other"), "other-job");
    let (listen, _) = wildcard_listen();
    let refused = |name: &str, table: &str| -> (PathBuf, String) {
        let dir = jobs.join(name);
        let file = job_with(&fx, &dir, table);
        let data = fx.path(&format!("{name}-data"));
        let mut run = Coordhost::new(&file, &data);
        run.extra_args = external_args(&listen, 1, HEARTBEAT_MS);
        let (code, stderr) = run.start().exit();
        assert_eq!(code, Some(2), "{name}: {stderr}");
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("coordhost:"))
            .collect();
        assert_eq!(lines.len(), 1, "{name}: one line: {stderr}");
        assert!(
            !data.exists(),
            "{name}: a refused run created {}",
            data.display()
        );
        (file, lines[0].to_owned())
    };
    // A key that is not there.
    let (file, line) = refused(
        "missing-key",
        "\n[cluster]\ntls = { cert = \"../pki/coordinator.pem\", key = \"../pki/nokey.key\", ca = \"../pki/ca.pem\" }\n",
    );
    let key = jobs.join("pki").join("nokey.key");
    assert_eq!(
        line,
        format!(
            "coordhost: {}: field `cluster.tls.key`: cannot read `{}`: No such file or directory (os error 2)",
            file.display(),
            key.display()
        )
    );
    // A folder where the CA should be.
    let (file, line) = refused(
        "ca-folder",
        "\n[cluster]\ntls = { cert = \"../pki/coordinator.pem\", key = \"../pki/coordinator.key\", ca = \"../pki\" }\n",
    );
    assert!(
        line.starts_with(&format!(
            "coordhost: {}: field `cluster.tls.ca`: cannot read `",
            file.display()
        )) && line.ends_with("it is a directory, not a regular file"),
        "{line}"
    );
    // A field the table does not have.
    let (file, line) = refused(
        "unknown-field",
        "\n[cluster]\ntls = { cert = \"a\", key = \"b\", ca = \"c\", crl = \"d\" }\n",
    );
    assert!(
        line.starts_with(&format!("coordhost: {}: ", file.display()))
            && line.contains("unknown field `crl`"),
        "{line}"
    );
    // A missing field.
    let (_, line) = refused(
        "no-ca",
        "\n[cluster]\ntls = { cert = \"a\", key = \"b\" }\n",
    );
    assert!(line.contains("missing field `ca`"), "{line}");
    // A coordinator certificate of another job.
    let (file, line) = refused("other-job", &table("../other", "coordinator"));
    assert!(
        line.starts_with(&format!(
            "coordhost: {}: field `cluster.tls.cert`: {}",
            file.display(),
            jobs.join("other").join("coordinator.pem").display()
        )) && line.contains("has no name `coordinator.wordcount`"),
        "{line}"
    );

    // The flags override the table: the same file with the right flags
    // serves workers (and, none coming, gives up waiting: exit 1).
    let dir = jobs.join("overridden");
    let file = job_with(&fx, &dir, &table("../other", "coordinator"));
    let pki = jobs.join("pki");
    let mut run = Coordhost::new(&file, &fx.path("overridden-data"));
    run.extra_args = external_args(&listen, 1, HEARTBEAT_MS);
    run.extra_args.splice(
        run.extra_args.len() - 2..,
        ["--worker-wait-ms".to_owned(), "1000".to_owned()],
    );
    for (flag, name) in [
        ("--tls-cert", "coordinator.pem"),
        ("--tls-key", "coordinator.key"),
        ("--tls-ca", "ca.pem"),
    ] {
        run.extra_args.push(flag.into());
        run.extra_args.push(pki.join(name).display().to_string());
    }
    let (code, stderr) = run.start().exit();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("serving workers on 0.0.0.0:"), "{stderr}");
    assert!(!stderr.contains("cluster.tls"), "{stderr}");

    // A worker's --config: a missing certificate, another table, a file
    // that is not there.
    let worker_refused = |config: &Path| -> String {
        let out = crate::support::coordhost()
            .arg("worker")
            .arg("--coordinator")
            .arg("127.0.0.1:1")
            .arg("--data-dir")
            .arg(fx.path("worker-data"))
            .arg("--config")
            .arg(config)
            .output()
            .expect("run coordhost worker");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            !fx.path("worker-data").exists(),
            "a refused worker made its folder"
        );
        stderr.trim_end().to_owned()
    };
    let config = fx.path("w0.toml");
    std::fs::write(&config, table("jobs/pki", "w9")).expect("config");
    assert_eq!(
        worker_refused(&config),
        format!(
            "coordhost: {}: field `cluster.tls.cert`: cannot read `{}`: No such file or directory (os error 2)",
            config.display(),
            jobs.join("pki").join("w9.pem").display()
        )
    );
    std::fs::write(
        &config,
        format!("{}\n[job]\nname = \"x\"\n", table("jobs/pki", "w0")),
    )
    .expect("config");
    let line = worker_refused(&config);
    assert!(
        line.starts_with(&format!("coordhost: {}: ", config.display()))
            && line.contains("unknown field `job`"),
        "{line}"
    );
    let missing = fx.path("none.toml");
    let line = worker_refused(&missing);
    assert!(
        line.starts_with(&format!(
            "coordhost: {}: cannot read the config file: No such file",
            missing.display()
        )),
        "{line}"
    );
    // A worker certificate named in the table of another worker's id.
    std::fs::write(&config, table("jobs/pki", "w1")).expect("config");
    let out = crate::support::coordhost()
        .arg("worker")
        .arg("--coordinator")
        .arg("127.0.0.1:1")
        .arg("--data-dir")
        .arg(fx.path("worker-data2"))
        .arg("--id")
        .arg("w0")
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run coordhost worker");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: field `cluster.tls.cert`:", config.display()))
            && stderr.contains("does not name worker `w0`"),
        "{stderr}"
    );
}
