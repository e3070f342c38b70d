//! Issue 31 with real `coordhost` processes (docs/ui.md): `run --ui` serves
//! the page, `/api/job` and `/metrics` of a job that recovers after a
//! SIGKILL, and their figures are the run's `--summary-json`'s; `log
//! inspect --svg` draws the golden log (one box per job vertex, kept and
//! reset subtasks in their colours, the reasons); `--ui` on an address
//! other than loopback is refused without `--ui-public`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::coordhost;
use crate::support::crash::{EventLog, SINK, SOURCE};
use crate::support::ui::{Recovered, http, metric_type, sample};

/// The reasons `--summary-json` may name (`ResetReason::short_name`, and
/// `not-placed`).
const REASONS: [&str; 9] = [
    "failover",
    "partition-not-found",
    "unfinished",
    "no-snapshot",
    "enumerator-cannot-snapshot",
    "partition-missing",
    "upstream-reset",
    "enumerator-restore-failed",
    "not-placed",
];

#[test]
fn a_recovered_job_shows_on_its_page_api_and_metrics_as_its_summary_counts() {
    // While run 2 runs (or lingers), the API answers with the job's shape.
    // The page is up before the job file is read and the log replayed: the
    // first answers may still say `"job": ""` (status `unknown`); within a
    // few seconds it names the job, long before run 2 ends.
    let rec = Recovered::start(|addr| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (status, headers, body) = http(addr, "GET", "/api/job");
            assert_eq!(status, 200, "{body}");
            assert_eq!(headers["content-type"], "application/json");
            let early: Value = serde_json::from_str(&body).expect("/api/job is JSON");
            if early["job"] == "wordcount" {
                break;
            }
            assert!(
                early["job"] == "" && early["status"] == "unknown",
                "before it names the job, the page knows nothing else: {early:#}"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "30 s after the page came up it still does not name the job: {early:#}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    });
    let (addr, summary, job) = (&rec.addr, &rec.summary, &rec.job);
    let n = |key: &str| rec.n(key);
    assert!(
        n("tasks_skipped") >= u64::from(job.sources),
        "the sources were kept: {summary:#}"
    );
    assert!(
        n("tasks_reset") > 0,
        "some sink subtask ran again: {summary:#}"
    );

    // /api/job: the same figures as the summary.
    let (status, _, body) = http(addr, "GET", "/api/job");
    assert_eq!(status, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("/api/job is JSON");
    assert_eq!(api["job"], "wordcount");
    assert_eq!(api["status"], "finished", "{api:#}");
    assert_eq!(
        api["epoch"], 1,
        "the second coordinator run serves: {api:#}"
    );
    let vertices = api["vertices"].as_array().expect("vertices");
    let ids: Vec<&str> = vertices.iter().filter_map(|v| v["id"].as_str()).collect();
    assert_eq!(ids, [SOURCE, SINK], "{api:#}");
    for v in vertices {
        let id = v["id"].as_str().expect("id");
        let in_summary = summary["vertices"]
            .as_array()
            .expect("summary vertices")
            .iter()
            .find(|s| s["id"] == id)
            .expect("vertex in the summary");
        assert_eq!(v["parallelism"], in_summary["parallelism"], "{id}");
        assert_eq!(v["finished"], v["parallelism"], "{id} all finished");
        assert_eq!(
            v["skipped"], in_summary["skipped"],
            "{id}: kept by recovery, page vs summary"
        );
        assert!(v["subtasks"].is_array(), "{id}");
    }
    assert_eq!(
        api["edges"],
        serde_json::json!([{ "from": SOURCE, "to": SINK, "kind": "hash" }])
    );
    let run = api["runs"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["epoch"] == 1))
        .unwrap_or_else(|| panic!("run 1 in {api:#}"));
    assert_eq!(
        run["attempts_started"].as_u64(),
        Some(n("tasks_run")),
        "{run:#}"
    );
    assert_eq!(
        run["tasks_skipped"].as_u64(),
        Some(n("tasks_skipped")),
        "{run:#}"
    );
    assert_eq!(
        run["tasks_reset"].as_u64(),
        Some(n("tasks_reset")),
        "{run:#}"
    );
    assert_eq!(run["reset_reasons"], summary["reset_reasons"], "{run:#}");
    let recovery = &api["recovery"];
    assert_eq!(recovery["epoch"], 1, "{recovery:#}");
    assert_eq!(recovery["finished"], true);
    assert_eq!(recovery["skipped"].as_u64(), Some(n("tasks_skipped")));
    assert!(recovery["duration_ms"].is_u64(), "{recovery:#}");
    // Each decision per subtask, with a reason the summary would use.
    let mut skipped = 0;
    let mut reset = BTreeMap::<String, u64>::new();
    for v in vertices {
        for s in v["subtasks"].as_array().expect("subtasks") {
            match s["recovery"]["decision"].as_str() {
                Some("skipped") => skipped += 1,
                Some("reset") => {
                    let reason = s["recovery"]["reason"].as_str().expect("reason");
                    assert!(REASONS.contains(&reason), "{s:#}");
                    *reset.entry(reason.to_owned()).or_default() += 1;
                }
                None => assert!(s["recovery"].is_null(), "{s:#}"),
                Some(other) => panic!("decision `{other}`: {s:#}"),
            }
            assert_eq!(s["state"], "finished", "{s:#}");
        }
    }
    assert_eq!(skipped, n("tasks_skipped"));
    assert_eq!(
        serde_json::to_value(&reset).expect("json"),
        recovery["reset_reasons"]
    );
    assert_eq!(
        reset.values().sum::<u64>(),
        recovery["reset"].as_u64().unwrap_or(u64::MAX)
    );

    // /metrics: Prometheus text, the same counts.
    let (status, headers, metrics) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200, "{metrics}");
    assert!(
        headers["content-type"].starts_with("application/openmetrics-text"),
        "{headers:?}"
    );
    for (family, kind) in [
        ("coordhost_job_info", "gauge"),
        ("coordhost_coordinator_epoch", "gauge"),
        ("coordhost_tasks", "gauge"),
        ("coordhost_vertex_parallelism", "gauge"),
        ("coordhost_vertex_tasks_finished", "gauge"),
        ("coordhost_attempts_started", "counter"),
        ("coordhost_attempts_finished", "counter"),
        ("coordhost_attempts_failed", "counter"),
        ("coordhost_task_resets", "counter"),
        ("coordhost_recovery_tasks_skipped", "gauge"),
        ("coordhost_recovery_tasks_reset", "gauge"),
        ("coordhost_recovery_duration_seconds", "gauge"),
        ("coordhost_event_log_appends", "counter"),
        ("coordhost_event_log_durable_append_seconds", "histogram"),
        ("coordhost_plugin_call_seconds", "histogram"),
        ("coordhost_shuffle_bytes_written", "counter"),
        ("coordhost_vertex_bytes_out", "gauge"),
    ] {
        assert_eq!(
            metric_type(&metrics, family),
            Some(kind),
            "{family}:\n{metrics}"
        );
    }
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    let tasks_total = n("tasks_total") as f64;
    assert_eq!(
        sample(&metrics, r#"coordhost_tasks{state="finished"}"#),
        Some(tasks_total),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, r#"coordhost_tasks{state="created"}"#),
        Some(0.0)
    );
    assert_eq!(
        sample(&metrics, r#"coordhost_tasks{state="running"}"#),
        Some(0.0)
    );
    assert_eq!(
        sample(&metrics, "coordhost_attempts_started_total"),
        Some(n("tasks_run") as f64),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "coordhost_recovery_tasks_skipped"),
        Some(n("tasks_skipped") as f64)
    );
    for (reason, count) in summary["reset_reasons"].as_object().expect("reasons") {
        assert_eq!(
            sample(
                &metrics,
                &format!(r#"coordhost_task_resets_total{{reason="{reason}"}}"#)
            ),
            count.as_f64(),
            "{reason}:\n{metrics}"
        );
    }
    assert_eq!(
        sample(
            &metrics,
            r#"coordhost_job_info{job="wordcount",status="finished"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    assert!(
        sample(&metrics, "coordhost_event_log_durable_append_seconds_count")
            .is_some_and(|c| c >= 1.0),
        "RecoveryFinished and JobFinished are durable appends: {metrics}"
    );
    assert!(sample(&metrics, "coordhost_event_log_appends_total").is_some_and(|c| c >= 3.0));

    // Bytes: each vertex's `bytes_out` as the summary has it, on the page's
    // API and in /metrics; this run's shuffled bytes are their sum.
    let mut this_run = 0;
    for v in summary["vertices"].as_array().expect("summary vertices") {
        let id = v["id"].as_str().expect("id");
        let bytes = v["bytes_out"].as_u64().expect("bytes_out");
        this_run += bytes;
        let in_api = vertices
            .iter()
            .find(|a| a["id"] == id)
            .expect("vertex in the API");
        assert_eq!(
            in_api["bytes_out"].as_u64(),
            Some(bytes),
            "{id}: {in_api:#}"
        );
        assert_eq!(
            sample(
                &metrics,
                &format!(r#"coordhost_vertex_bytes_out{{vertex="{id}"}}"#)
            ),
            Some(bytes as f64),
            "{id}:\n{metrics}"
        );
    }
    assert_eq!(
        sample(&metrics, "coordhost_shuffle_bytes_written_total"),
        Some(this_run as f64),
        "{metrics}"
    );
    // Run 0's shuffled bytes (before the kill) are the sizes its
    // `ExecutionFinished` records give, as `log inspect --json` reads them.
    let log = EventLog::read(&rec.data).expect("the log");
    let run0_bytes: u64 = log
        .events
        .iter()
        .filter(|e| e["position"]["attempt"] == 0 && e["event"]["kind"] == "ExecutionFinished")
        .flat_map(|e| {
            e["event"]["event"]["produced"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|p| {
            p["bytes_per_subpartition"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|b| b.as_u64())
        .sum();
    assert!(run0_bytes > 0, "the sources wrote partitions in run 0");
    let run0 = api["runs"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["epoch"] == 0))
        .unwrap_or_else(|| panic!("run 0 in {api:#}"));
    assert_eq!(
        run0["bytes_shuffled"].as_u64(),
        Some(run0_bytes),
        "{run0:#}"
    );

    // Plugin calls: a latency histogram per plugin and WIT function; this
    // run restored the enumerator (`files`) and the shuffle master.
    let calls: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("coordhost_plugin_call_seconds_count{"))
        .collect();
    for plugin in ["files", "shuffle"] {
        assert!(
            calls.iter().any(|l| {
                l.contains(&format!("plugin=\"{plugin}\",call=\""))
                    && l.rsplit_once(' ').and_then(|(_, n)| n.parse::<f64>().ok()) >= Some(1.0)
            }),
            "no call of `{plugin}` counted: {calls:#?}\n{metrics}"
        );
    }

    // The page: the graph inline, each vertex, kept and reset marked.
    let (status, headers, page) = http(addr, "GET", "/");
    assert_eq!(status, 200);
    assert!(
        headers["content-type"].starts_with("text/html"),
        "{headers:?}"
    );
    assert!(page.contains("<svg"), "{page}");
    for id in [SOURCE, SINK] {
        assert!(
            page.contains(&format!("data-vertex=\"{id}\"")),
            "{id}: {page}"
        );
    }
    assert!(
        !page.contains("http-equiv=\"refresh\""),
        "a finished job's page stops reloading"
    );
    assert!(page.contains("class=\"bar skipped\""), "{page}");
    assert!(page.contains("class=\"bar reset\""), "{page}");
    for reason in reset.keys() {
        assert!(
            page.contains(&format!("reset: {reason}")),
            "{reason}: {page}"
        );
    }

    // Read-only, and no path is a file.
    let (status, _, _) = http(addr, "POST", "/api/job");
    assert_eq!(status, 405, "only GET");
    for path in ["/../../etc/passwd", "/job.toml", "/api/job/../../job.toml"] {
        let (status, _, body) = http(addr, "GET", path);
        assert_eq!(status, 404, "{path}: {body}");
    }

    // Done looking: the lingering process goes.
    rec.stop();
}

/// The golden log: attempt 0 finished `source` 0 and (after a failover)
/// `source` 1; attempt 1's recovery kept `source` 0, reset `source` 1
/// (no-snapshot) and `sink` 0 (unfinished).
#[test]
fn log_inspect_svg_draws_what_the_golden_logs_last_recovery_kept_and_reset() {
    let golden = crate::support::workspace().join("host/tests/data/golden-log-v1");
    let tmp = tempfile::tempdir().expect("tempdir");
    let svg_path = tmp.path().join("golden.svg");
    let html_path = tmp.path().join("golden.html");
    let out = coordhost()
        .args(["log", "inspect"])
        .arg(&golden)
        .arg("--svg")
        .arg(&svg_path)
        .arg("--html")
        .arg(&html_path)
        .output()
        .expect("run coordhost");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&svg_path).expect("the SVG was written");
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{svg}"
    );
    assert!(svg.ends_with("</svg>"));
    assert!(svg.contains("data-job=\"golden\""), "{svg}");

    // One node per job vertex, with its figures.
    let nodes: Vec<&str> = svg.split("<g class=\"vertex\"").skip(1).collect();
    assert_eq!(nodes.len(), 2, "{svg}");
    let node = |id: &str| {
        let at = format!(" data-vertex=\"{id}\"");
        nodes
            .iter()
            .find(|n| n.starts_with(&at))
            .map(|n| n.split("</g>").next().unwrap_or(n))
            .unwrap_or_else(|| panic!("no node {id} in {svg}"))
    };
    let source = node("source");
    assert!(
        source.contains(
            "data-parallelism=\"2\" data-finished=\"2\" data-skipped=\"1\" data-reset=\"1\""
        ),
        "{source}"
    );
    assert!(source.contains("class=\"bar skipped\""), "{source}");
    assert!(
        source.contains(&format!("fill=\"{}\"", coordhost::ui::COLOR_SKIPPED)),
        "{source}"
    );
    assert!(source.contains("class=\"bar reset\""), "{source}");
    assert!(
        source.contains(&format!("fill=\"{}\"", coordhost::ui::COLOR_RESET)),
        "{source}"
    );
    assert!(source.contains("reset: no-snapshot ×1"), "{source}");
    let sink = node("sink");
    assert!(
        sink.contains(
            "data-parallelism=\"1\" data-finished=\"0\" data-skipped=\"0\" data-reset=\"1\""
        ),
        "{sink}"
    );
    assert!(
        !sink.contains("class=\"bar skipped\""),
        "nothing of the sink was kept: {sink}"
    );
    assert!(
        sink.contains(&format!("fill=\"{}\"", coordhost::ui::COLOR_RESET)),
        "{sink}"
    );
    assert!(sink.contains("reset: unfinished ×1"), "{sink}");
    // The one edge: the data set `source` produced and `sink` reads.
    assert_eq!(svg.matches("<g class=\"edge\"").count(), 1, "{svg}");
    assert!(
        svg.contains("<g class=\"edge\" data-from=\"source\" data-to=\"sink\""),
        "{svg}"
    );

    let html = std::fs::read_to_string(&html_path).expect("the page was written");
    assert!(html.contains(&svg), "the page holds the same picture");
    assert!(
        html.contains("data-vertex=\"source\" data-subtask=\"0\""),
        "{html}"
    );
    assert!(
        html.contains("status: <b>interrupted</b>"),
        "the log ends without JobFinished: {html}"
    );

    // A folder without a log, and a file that cannot be written: exit 2, one line.
    let out = coordhost()
        .args(["log", "inspect"])
        .arg(tmp.path())
        .arg("--svg")
        .arg(tmp.path().join("x.svg"))
        .output()
        .expect("run coordhost");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let out = coordhost()
        .args(["log", "inspect"])
        .arg(&golden)
        .arg("--svg")
        .arg(tmp.path().join("no-such-folder/x.svg"))
        .output()
        .expect("run coordhost");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--svg") && stderr.contains("no-such-folder/x.svg"),
        "{stderr}"
    );
}

#[test]
fn ui_beyond_loopback_needs_ui_public_and_a_bad_address_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    // The job file is never read: the address is checked first.
    let job = tmp.path().join("job.toml");
    std::fs::write(&job, "not read").expect("job file");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let taken = taken.local_addr().expect("addr").to_string();
    for (addr, expect) in [
        ("0.0.0.0:0", "--ui-public"),
        ("[::]:8080", "--ui-public"),
        ("no-port", "not HOST:PORT"),
        (taken.as_str(), "cannot listen"),
    ] {
        let out = coordhost()
            .arg("run")
            .arg(&job)
            .arg("--data-dir")
            .arg(&data)
            .args(["--ui", addr])
            .output()
            .expect("run coordhost");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{addr}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{addr}: {stderr}");
        assert!(
            stderr.contains(expect) && stderr.contains(addr),
            "{addr}: {stderr}"
        );
        assert!(!data.exists(), "{addr}: nothing created");
    }
}

/// Whether the server closed `stream` (EOF or a reset), asked within
/// `wait`.
fn closed_by_server(mut stream: &std::net::TcpStream, wait: std::time::Duration) -> bool {
    use std::io::Read as _;
    stream.set_read_timeout(Some(wait)).expect("timeout");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => panic!("the server sent bytes to a client that asked nothing"),
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// docs/ui.md, "Security": a client holding many idle connections (and
/// requests stalled halfway) does not keep a normal GET from an answer:
/// the quietest connections are closed past the cap at once, and every
/// idle one after the idle timeout.
#[test]
fn many_idle_connections_do_not_keep_a_get_from_its_answer() {
    use std::io::Write as _;
    use std::time::{Duration, Instant};

    use coordhost::ui::{IDLE_TIMEOUT, MAX_CONNECTIONS};

    use crate::support::crash::{Coordhost, Fixture, Kill, WordJob};
    use crate::support::ui::ui_address;

    let fx = Fixture::words();
    let job = WordJob::new(&fx.input);
    let file = job.write(&fx.path("job.toml"));
    let data = fx.path("data");
    let mut ch = Coordhost::new(&file, &data);
    ch.extra_args = ["--ui", "127.0.0.1:0", "--ui-linger-s", "60"]
        .map(str::to_owned)
        .to_vec();
    let run = ch.start();
    let addr = ui_address(&std::path::PathBuf::from(format!(
        "{}.run1.err",
        data.display()
    )));

    // Three times the cap of connections that say nothing, and a few
    // that stall halfway through a request.
    let flood = 3 * MAX_CONNECTIONS;
    let idle: Vec<std::net::TcpStream> = (0..flood)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(&addr)
                .unwrap_or_else(|e| panic!("idle connection {i}: {e}"));
            if i % 8 == 0 {
                s.write_all(b"GET /api/job HTTP/1.1\r\nHost: x")
                    .expect("half a request");
            }
            s
        })
        .collect();

    // A normal GET is answered now, well before the idle timeout.
    let asked = Instant::now();
    let (status, _, body) = http(&addr, "GET", "/api/job");
    let took = asked.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(
        took < IDLE_TIMEOUT / 2,
        "the GET took {took:?} behind {flood} idle connections (idle timeout {IDLE_TIMEOUT:?})"
    );

    // The cap: all but the newest MAX_CONNECTIONS - 1 idle ones were
    // closed to make room (the GET took one place).
    let closed = idle
        .iter()
        .filter(|s| closed_by_server(s, Duration::from_millis(300)))
        .count();
    assert!(
        closed > flood - MAX_CONNECTIONS,
        "{closed} of {flood} idle connections closed; at most {MAX_CONNECTIONS} stay open"
    );

    // The idle timeout: after it, none is left open.
    std::thread::sleep(IDLE_TIMEOUT + Duration::from_secs(1));
    for (i, s) in idle.iter().enumerate() {
        assert!(
            closed_by_server(s, Duration::from_secs(3)),
            "idle connection {i} still open after {IDLE_TIMEOUT:?}"
        );
    }
    let (status, _, body) = http(&addr, "GET", "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(matches!(run.kill(), Kill::Killed { .. }), "it lingered");
}
