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
//! etcd's user authentication (`--ha-user`, the password from
//! `--ha-password-file` or `COORDHOST_HA_PASSWORD`) against a real etcd
//! with `auth enable` and a user whose role covers the job's election: the
//! right password elects the leader and the job finishes, with workers
//! finding it as the same user; a wrong password, no user, or a user of
//! another job's election stop with an error naming etcd and the user; the
//! password is in no process's argv (`/proc/PID/cmdline`) and in no output.
//!
//! etcd must be installed (`make ha-deps`); a missing etcd fails the test.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::crash::{Fixture, JOB, WordJob, expected_output, sorted_output};
use crate::support::etcd::{Etcd, spawn_ha_run};
use crate::support::process::Process;
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

/// Waits for `process` to end, at most `within`; its exit code.
fn wait(process: &mut Process, within: Duration) -> Option<i32> {
    if let Some(status) = process.wait_until(Instant::now() + within) {
        return status.code();
    }
    process.kill_quietly();
    panic!("the coordinator did not end within {within:?}");
}

/// A coordinator etcd refused stopped within a minute of `started` and
/// wrote no log under `refused/`.
fn refused_at_once(fx: &Fixture, started: Instant, what: &str) {
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

/// The leader ends with exit 0 having led the job, the word count is
/// exact, and both workers found the leader through etcd (`how`: how they
/// reached etcd, for messages).
fn leader_finished(
    leader: &mut crate::support::etcd::HaRun,
    workers: &Workers,
    etcd: &Etcd,
    data: &Path,
    fx: &Fixture,
    how: &str,
) {
    let code = wait(&mut leader.process, Duration::from_secs(180));
    let stderr = leader.process.stderr();
    assert_eq!(
        code,
        Some(0),
        "the leader {how}:\n{stderr}\n{}\n{}",
        workers.logs(),
        etcd.log()
    );
    assert!(stderr.contains("leading job `wordcount`"), "{stderr}");
    assert!(
        sorted_output(data) == expected_output(&fx.input),
        "the word count {how} differs"
    );
    for i in 0..2 {
        let log = workers.log_of(i);
        assert!(
            log.contains("the job's leader") && log.contains("registered"),
            "w{i} did not find the leader through etcd {how}:\n{log}"
        );
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
    leader_finished(&mut leader, &workers, &etcd, &data, &fx, "over etcds://");
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
        refused_at_once(&fx, started, what);
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

/// The etcd user of the job's coordinators and workers, its password, and
/// the role that lets it use the job's election (`coordhost/leader/JOB/`).
const USER: &str = "coordhost-wc";
const PASSWORD: &str = "pw-7Qx!vL2-never-shown";
/// A user whose role covers another job's election only.
const OTHER_USER: &str = "coordhost-other";
const OTHER_PASSWORD: &str = "pw-other-9Kd";

/// Turns on etcd's user authentication on `etcd` (plain, loopback): users
/// `root` (its root role), [`USER`] with read-write on the prefix
/// `coordhost/leader/wordcount/`, [`OTHER_USER`] with read-write on
/// `coordhost/leader/other/`; then `auth enable`. Through etcd's own API
/// (the etcd-client crate), as `etcdctl user add` / `role grant-permission`
/// / `auth enable` do.
fn enable_auth(etcd: &Etcd) {
    use etcd_client::{Client, Permission};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut c = Client::connect([etcd.endpoint()], None)
            .await
            .expect("connect to etcd");
        c.user_add("root", "root-pw-unused", None)
            .await
            .expect("user add root");
        c.user_grant_role("root", "root").await.expect("root role");
        for (user, password, job) in [(USER, PASSWORD, JOB), (OTHER_USER, OTHER_PASSWORD, "other")]
        {
            let role = format!("{user}-role");
            c.role_add(role.clone()).await.expect("role add");
            c.role_grant_permission(
                role.clone(),
                Permission::read_write(format!("coordhost/leader/{job}/")).with_prefix(),
            )
            .await
            .expect("grant the election's prefix");
            c.user_add(user, password, None).await.expect("user add");
            c.user_grant_role(user, role)
                .await
                .expect("user grant role");
        }
        c.auth_enable().await.expect("auth enable");
    });
}

/// Every file below `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &[u8], out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_holding(&p, needle, out);
        } else if std::fs::read(&p)
            .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        {
            out.push(p);
        }
    }
}

/// Whether `/proc/PID/cmdline` (its argv) holds `needle`; panics if the
/// process is gone.
fn argv_holds(pid: u32, needle: &str) -> bool {
    let argv = std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/cmdline: {e}"));
    assert!(!argv.is_empty(), "process {pid} has no argv");
    argv.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn etcd_user_authentication_lets_the_right_user_lead_and_refuses_a_wrong_password() {
    let fx = Fixture::words();
    let etcd = Etcd::start(&fx.path("etcd"));
    enable_auth(&etcd);
    // The password in a file outside every folder the processes write.
    let secrets = fx.path("secrets");
    std::fs::create_dir_all(&secrets).expect("secrets");
    let pw_file = secrets.join("etcd-password");
    std::fs::write(&pw_file, format!("{PASSWORD}\n")).expect("password file");
    let auth = vec![
        "--ha-user".to_owned(),
        USER.to_owned(),
        "--ha-password-file".to_owned(),
        pw_file.display().to_string(),
    ];
    let mut j = WordJob::new(&fx.input);
    j.source_delay_us = 20;
    let file = j.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let base = fx.path("coordinators");
    let addr = free_port();
    let mut extra = external_args(&addr, 2, HEARTBEAT_MS);
    extra.extend(auth.clone());
    let mut leader = spawn_ha_run("A", &file, &data, &etcd, 3, &base, &extra);
    let workers = Workers::start_with(
        2,
        &format!("{}/{JOB}", etcd.url()),
        &fx.path("workers"),
        2,
        |_| auth.clone(),
    );
    // While they run (the leader elected, waiting for its workers): the
    // password is in no argv.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !leader.process.stderr().contains("leading job `wordcount`") {
        assert!(
            Instant::now() < deadline && leader.process.try_wait().is_none(),
            "the coordinator did not lead as etcd user `{USER}`:\n{}\n{}",
            leader.process.stderr(),
            etcd.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !argv_holds(leader.process.pid(), PASSWORD),
        "the password is in the coordinator's argv"
    );
    assert!(
        argv_holds(leader.process.pid(), USER),
        "the argv check reads argv"
    );
    for i in 0..2 {
        assert!(
            !argv_holds(workers.pid(i), PASSWORD),
            "the password is in w{i}'s argv"
        );
    }
    leader_finished(
        &mut leader,
        &workers,
        &etcd,
        &data,
        &fx,
        &format!("as etcd user `{USER}`"),
    );
    drop(workers);

    // Refused: a wrong password (from the variable), a user without a
    // password, no user at all, a user whose role covers another job's
    // election. Each stops (exit 1) naming etcd, and the user when there
    // is one; no password is printed.
    let wrong = "wrong-pw-Zt5";
    for (what, user, password, says) in [
        (
            "a wrong password",
            Some(USER),
            Some(wrong),
            "authentication failed",
        ),
        ("no user", None, None, "user name is empty"),
        (
            "a user of another job's election",
            Some(OTHER_USER),
            Some(OTHER_PASSWORD),
            "permission denied",
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
            .arg(etcd.url())
            .env_remove(crate_password_variable())
            .args(user.map(|u| ["--ha-user", u]).into_iter().flatten());
        if let Some(p) = password {
            command.env(crate_password_variable(), p);
        }
        let started = Instant::now();
        let out = command.output().expect("run coordhost");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
        let names = match user {
            Some(u) => format!("etcd at {} (user `{u}`): ", etcd.endpoint()),
            None => format!("etcd at {}: ", etcd.endpoint()),
        };
        assert!(
            stderr.contains(&names) && stderr.contains(says),
            "{what}: the error names etcd{} and says `{says}`: {stderr}",
            if user.is_some() { " and the user" } else { "" }
        );
        for p in [wrong, OTHER_PASSWORD, PASSWORD] {
            assert!(
                !stderr.contains(p) && !stdout.contains(p),
                "{what}: a password is printed: {stderr}{stdout}"
            );
        }
        refused_at_once(&fx, started, what);
    }
    // A worker with a wrong password waits for a leader it cannot look
    // up, and says why once: etcd and the user, not the password.
    let wrong_file = secrets.join("wrong-password");
    std::fs::write(&wrong_file, format!("{wrong}\n")).expect("password file");
    let refused_worker = Workers::start_with(
        1,
        &format!("{}/{JOB}", etcd.url()),
        &fx.path("refused-worker"),
        1,
        |_| {
            vec![
                "--ha-user".into(),
                USER.into(),
                "--ha-password-file".into(),
                wrong_file.display().to_string(),
            ]
        },
    );
    let says = format!(
        "cannot look the leader up: etcd at {} (user `{USER}`): connect: etcdserver: authentication failed",
        etcd.endpoint()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !refused_worker.log_of(0).contains(&says) {
        assert!(
            Instant::now() < deadline,
            "the worker with a wrong password does not say `{says}`:\n{}",
            refused_worker.log_of(0)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = refused_worker.log_of(0);
    assert!(
        !log.contains(wrong),
        "the worker's log names the refusal, not the password:\n{log}"
    );
    drop(refused_worker);

    // A user and neither a password file nor the variable: exit 2 at once.
    let out = crate::support::coordhost()
        .arg("run")
        .arg(&file)
        .arg("--data-dir")
        .arg(fx.path("refused"))
        .arg("--ha")
        .arg(etcd.url())
        .args(["--ha-user", USER])
        .env_remove(crate_password_variable())
        .output()
        .expect("run coordhost");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no password"), "{stderr}");

    // No output of any process holds the password: stderr, stdout,
    // summaries, the event log, the workers' folders.
    let mut holding = Vec::new();
    for dir in [
        &data,
        &base,
        &fx.path("workers"),
        &fx.path("refused"),
        &fx.path("refused-worker"),
    ] {
        files_holding(dir, PASSWORD.as_bytes(), &mut holding);
    }
    assert!(
        holding.is_empty(),
        "files holding the password: {holding:?}"
    );
}

/// `COORDHOST_HA_PASSWORD`, the variable an etcd password may come from.
fn crate_password_variable() -> &'static str {
    coordhost::ha::PASSWORD_VARIABLE
}
