//! Helpers of the `--ui` tests (docs/ui.md): one HTTP/1.1 exchange over a
//! plain socket, the listener's address read from a run's stderr, samples
//! of a Prometheus text, and the recovered word-count job they all look at
//! (run 1 killed with SIGKILL once its sources finished, run 2 recovering
//! with `--ui` on a free loopback port and a linger).

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::crash::{Coordhost, EventLog, Fixture, Kill, Running, SOURCE, WordJob};

/// One HTTP/1.1 exchange: `METHOD path`, the connection closed after it.
/// Returns the status code, the headers (lower-case names) and the body.
pub fn http(addr: &str, method: &str, path: &str) -> (u16, BTreeMap<String, String>, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .expect("send the request");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read the response");
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {raw:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

/// Waits for the `job page on http://ADDR/` line in a run's stderr file.
pub fn ui_address(stderr: &Path) -> String {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(stderr).unwrap_or_default();
        if let Some(rest) = text.split("job page on http://").nth(1) {
            let addr = rest.split('/').next().expect("an address").to_owned();
            return addr;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no `job page on` line in {}:\n{text}",
            stderr.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of the sample `name` (with its labels, as printed) in a
/// Prometheus text, e.g. `coordhost_tasks{state="finished"}`.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let (key, value) = l.rsplit_once(' ')?;
        (key == name).then(|| value.parse().ok())?
    })
}

/// The `# TYPE` of metric family `family` in a Prometheus text.
pub fn metric_type<'a>(metrics: &'a str, family: &str) -> Option<&'a str> {
    metrics.lines().find_map(|l| {
        l.strip_prefix("# TYPE ")?
            .strip_prefix(family)?
            .strip_prefix(' ')
    })
}

/// A word-count job that recovered with its page up: run 1 was killed
/// once every source subtask finished and the `auto` sink was initialized
/// (recovery keeps the sources and resets the sink's subtasks); run 2
/// recovered with `--ui 127.0.0.1:0 --ui-linger-s 60`, finished, wrote its
/// summary and lingers until [`Recovered::stop`].
pub struct Recovered {
    /// Owns the folders (removed when dropped).
    _fixture: Fixture,
    /// The job file's settings.
    pub job: WordJob,
    /// The data directory.
    pub data: PathBuf,
    /// Run 2, lingering.
    pub second: Running,
    /// Where its page is (`HOST:PORT`).
    pub addr: String,
    /// Its `--summary-json`.
    pub summary: Value,
}

impl Recovered {
    /// Runs both coordinator runs; returns once run 2 wrote its summary.
    /// `early` is called with the address as soon as it is printed (while
    /// run 2 runs).
    pub fn start(early: impl FnOnce(&str)) -> Self {
        let fx = Fixture::words();
        let job = WordJob::new(&fx.input);
        let file = job.write(&fx.path("job.toml"));
        let data = fx.path("data");
        let mut ch = Coordhost::new(&file, &data);
        let mut first = ch.start();
        first
            .poll_until(|| {
                EventLog::read(&data)
                    .filter(|l| {
                        l.finished(SOURCE).len() == job.sources as usize
                            && l.count("JobVertexInitialized") >= 2
                    })
                    .map(|_| ())
            })
            .expect("the sources finished and the sink was initialized");
        assert!(
            matches!(first.kill(), Kill::Killed { .. }),
            "killed mid-run"
        );
        ch.extra_args = ["--ui", "127.0.0.1:0", "--ui-linger-s", "60"]
            .map(str::to_owned)
            .to_vec();
        let mut second = ch.start();
        let stderr = PathBuf::from(format!("{}.run2.err", data.display()));
        let addr = ui_address(&stderr);
        early(&addr);
        second
            .poll_until(|| {
                std::fs::read_to_string(&ch.summary)
                    .ok()
                    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            })
            .expect("the run wrote its summary and lingers");
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(&ch.summary).expect("summary"))
                .expect("summary JSON");
        assert_eq!(summary["status"], "finished", "{summary:#}");
        assert_eq!(summary["recovered"], true, "{summary:#}");
        Self {
            _fixture: fx,
            job,
            data,
            second,
            addr,
            summary,
        }
    }

    /// `--summary-json`'s number `key`.
    pub fn n(&self, key: &str) -> u64 {
        self.summary[key]
            .as_u64()
            .unwrap_or_else(|| panic!("summary has no `{key}`: {:#}", self.summary))
    }

    /// Done looking: the lingering process is killed (it must still be up).
    pub fn stop(self) {
        assert!(
            matches!(self.second.kill(), Kill::Killed { .. }),
            "it lingered"
        );
    }
}
