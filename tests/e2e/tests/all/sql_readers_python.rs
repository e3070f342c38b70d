//! A table read by the Python source reader `py-reader` (issue 27, item 5:
//! web-server access logs in the Common Log Format, which DataFusion does
//! not read) through the real `coordhost run`: the answer equals the same
//! rows written as CSV and read by the host's own reader; the example job
//! `examples/access-log-sql.toml` answers as the same query over its logs
//! converted to CSV here (by a parser of this test's own); a line that is
//! not an access-log line fails the job naming the table, the reader, the
//! split, the file and the line, with nothing published.

use std::path::{Path, PathBuf};

use crate::support::job::options;
use crate::support::knobs::{Knobs, run_output};
use crate::support::{plugin_path, published_lines, workspace};
use coordhost::job::JobStatus;

/// The declared columns, as in the example job.
const SCHEMA: &str = r#"{ host = "varchar", user = "varchar", time = "bigint", method = "varchar", path = "varchar", status = "int", bytes = "bigint" }"#;
const CSV_HEADER: &str = "host,user,time,method,path,status,bytes";
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// One request: the declared columns (`None`: null).
#[derive(Debug, Clone)]
struct Request {
    host: String,
    user: Option<String>,
    time: i64,
    method: Option<String>,
    path: Option<String>,
    status: u16,
    bytes: Option<u64>,
}

impl Request {
    fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{},{}",
            self.host,
            self.user.as_deref().unwrap_or(""),
            self.time,
            self.method.as_deref().unwrap_or(""),
            self.path.as_deref().unwrap_or(""),
            self.status,
            self.bytes.map(|b| b.to_string()).unwrap_or_default()
        )
    }
}

/// (year, month 1..=12, day) of days since 1970-01-01.
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `epoch` as a CLF time in the zone `offset_min` minutes east of UTC.
fn clf_time(epoch: i64, offset_min: i64) -> String {
    let local = epoch + offset_min * 60;
    let (y, m, d) = civil(local.div_euclid(86_400));
    let s = local.rem_euclid(86_400);
    let sign = if offset_min < 0 { '-' } else { '+' };
    format!(
        "{d:02}/{}/{y}:{:02}:{:02}:{:02} {sign}{:02}{:02}",
        MONTHS[(m - 1) as usize],
        s / 3600,
        s / 60 % 60,
        s % 60,
        offset_min.abs() / 60,
        offset_min.abs() % 60
    )
}

/// `n` seeded requests: nulls in every nullable column, several zones.
fn requests(n: usize) -> Vec<(Request, i64, bool)> {
    let hosts = ["10.0.0.7", "192.168.1.20", "203.0.113.5", "2001:db8::1"];
    let users = ["frank", "ada", "grace"];
    let methods = ["GET", "GET", "GET", "POST", "PUT", "DELETE"];
    let paths = [
        "/",
        "/index.html",
        "/api/orders",
        "/api/orders/17",
        "/search?q=wasm",
    ];
    let zones = [0, -420, 120, 330];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pick = |k: u64, len: usize| ((x >> k) % len as u64) as usize;
            let no_request = i % 23 == 7;
            let status = [200, 200, 200, 201, 302, 304, 404, 500][pick(3, 8)];
            let r = Request {
                host: hosts[pick(5, hosts.len())].to_string(),
                user: (i % 3 == 0).then(|| users[pick(9, users.len())].to_string()),
                time: 1_790_000_000 + (x % 5_000_000) as i64,
                method: (!no_request).then(|| methods[pick(13, methods.len())].to_string()),
                path: (!no_request).then(|| paths[pick(17, paths.len())].to_string()),
                status: if no_request { 408 } else { status },
                bytes: (i % 11 != 4).then_some((x >> 20) % 60_000),
            };
            (r, zones[pick(23, zones.len())], i % 2 == 0)
        })
        .collect()
}

/// `r` as a CLF line, in zone `zone`, with the combined format's fields when `combined`.
fn clf_line(r: &Request, zone: i64, combined: bool) -> String {
    let request = match (&r.method, &r.path) {
        (Some(m), Some(p)) => format!("{m} {p} HTTP/1.1"),
        _ => "-".to_string(),
    };
    let mut line = format!(
        "{} - {} [{}] \"{request}\" {} {}",
        r.host,
        r.user.as_deref().unwrap_or("-"),
        clf_time(r.time, zone),
        r.status,
        r.bytes.map_or_else(|| "-".to_string(), |b| b.to_string())
    );
    if combined {
        line.push_str(" \"https://shop.example/\" \"curl/8.5.0\"");
    }
    line
}

/// Writes the requests as three log files under `logs` and three CSV files under `csv`.
fn write_tables(rows: &[(Request, i64, bool)], logs: &Path, csv: &Path) {
    std::fs::create_dir_all(logs).expect("logs dir");
    std::fs::create_dir_all(csv).expect("csv dir");
    let mut log_text = vec![String::new(); 3];
    let mut csv_text = vec![format!("{CSV_HEADER}\n"); 3];
    for (i, (r, zone, combined)) in rows.iter().enumerate() {
        log_text[i % 3].push_str(&clf_line(r, *zone, *combined));
        log_text[i % 3].push_str(if i % 7 == 0 { "\r\n" } else { "\n" });
        csv_text[i % 3].push_str(&r.csv());
        csv_text[i % 3].push('\n');
    }
    log_text[1].pop();
    for i in 0..3 {
        std::fs::write(logs.join(format!("access-{i}.log")), &log_text[i]).expect("log");
        std::fs::write(csv.join(format!("access-{i}.csv")), &csv_text[i]).expect("csv");
    }
}

/// A SQL job over table `access`: the files ending in `pattern` under `input`, cut into
/// splits of `split_bytes`, read as `format` (with `plugins`).
fn job(dir: &Path, input: &Path, pattern: &str, format: &str, plugins: &str, sql: &str) -> PathBuf {
    let text = format!(
        r#"[job]
name = "access"
parallelism = 2
max-attempts = 1
sql = """{sql}"""

[recovery]
enabled = true
previous-worker-timeout-ms = 5000

[shuffle]
plugin = "shuffle"

[plugins.files]
component = "{files}"
kind = "split-enumerator"
config = {{ dir = "{input}", split-bytes = 1500, pattern = "{pattern}" }}
dirs = [{{ path = "{input}", writable = false }}]

[plugins.shuffle]
component = "{shuffle}"
kind = "shuffle-master"
config = {{ root = "${{data_dir}}/shuffle" }}
dirs = [{{ path = "${{data_dir}}/shuffle", writable = true }}]

{plugins}

[tables.access]
plugin = "files"
{format}
schema = {SCHEMA}

[sink]
path = "${{data_dir}}/output/access"
format = "csv"
"#,
        files = plugin_path("file-enumerator").display(),
        shuffle = plugin_path("local-shuffle").display(),
        input = input.display(),
    );
    std::fs::create_dir_all(dir).expect("job dir");
    let file = dir.join("access.toml");
    std::fs::write(&file, text).expect("job file");
    file
}

/// The job reading the logs under `logs` through py-reader.
fn log_job(dir: &Path, logs: &Path, sql: &str) -> PathBuf {
    let plugins = format!(
        "[plugins.clf]\ncomponent = \"{}\"\nkind = \"source-reader\"\ndirs = [{{ path = \"{}\", writable = false }}]\nlimits = {{ call-timeout-ms = 20000, memory-mib = 128 }}\n",
        plugin_path("py-reader").display(),
        logs.display()
    );
    job(
        dir,
        logs,
        ".log",
        "format = { reader = \"clf\" }",
        &plugins,
        sql,
    )
}

/// The same job reading the CSV files under `csv` with the host's reader.
fn csv_job(dir: &Path, csv: &Path, sql: &str) -> PathBuf {
    job(dir, csv, ".csv", "format = \"csv\"\nheader = true", "", sql)
}

/// Runs `job` to its end; (exit code, the summary's status and error, stderr).
fn run(job: &Path, state: &Path) -> (Option<i32>, Option<JobStatus>, String, String) {
    let out = run_output(&options(job, state, 2), &Knobs::default());
    let status = out.summary.as_ref().map(|s| s.status);
    let error = out.summary.and_then(|s| s.error).unwrap_or_default();
    (out.code, status, error, out.stderr)
}

fn run_finished(job: &Path, state: &Path) {
    let (code, status, error, stderr) = run(job, state);
    assert_eq!(code, Some(0), "{error} {stderr}");
    assert_eq!(status, Some(JobStatus::Finished), "{error} {stderr}");
}

const QUERIES: [&str; 2] = [
    "SELECT host, user, time, method, path, status, bytes FROM access ORDER BY time, host, status, bytes, user, method, path",
    "SELECT coalesce(method, '-') AS method, status, count(*) AS requests, count(user) AS signed_in, \
     sum(bytes) AS bytes, count(DISTINCT host) AS clients, min(time) AS first_seen \
     FROM access GROUP BY coalesce(method, '-'), status ORDER BY method, status",
];

#[test]
fn access_logs_read_by_the_python_reader_answer_as_the_same_rows_read_as_csv() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (logs, csv) = (tmp.path().join("logs"), tmp.path().join("csv"));
    let rows = requests(1500);
    write_tables(&rows, &logs, &csv);
    for (i, sql) in QUERIES.into_iter().enumerate() {
        let wasm_state = tmp.path().join(format!("log-state-{i}"));
        let host_state = tmp.path().join(format!("csv-state-{i}"));
        run_finished(
            &log_job(&tmp.path().join(format!("log-{i}")), &logs, sql),
            &wasm_state,
        );
        run_finished(
            &csv_job(&tmp.path().join(format!("csv-{i}")), &csv, sql),
            &host_state,
        );
        let got = published_lines(&wasm_state.join("output/access"));
        let want = published_lines(&host_state.join("output/access"));
        assert_eq!(got, want, "query {i}: the reader's answer is the CSV one");
        if i == 0 {
            assert_eq!(
                got.len(),
                rows.len() + 1,
                "a header, then every request, once"
            );
            assert!(
                got.iter().any(|l| l.contains(",,,408,")),
                "a request line `-`"
            );
        }
    }
}

/// A CLF line's declared columns, parsed by this test on its own: `None` for a line that is
/// not one.
fn parse_clf(line: &str) -> Option<Request> {
    let (host, rest) = line.split_once(' ')?;
    let (_ident, rest) = rest.split_once(' ')?;
    let (user, rest) = rest.split_once(" [")?;
    let (time, rest) = rest.split_once("] \"")?;
    let (request, rest) = rest.split_once("\" ")?;
    let mut words = rest.split(' ');
    let status = words.next()?.parse().ok()?;
    let bytes = words.next()?;
    let (date, zone) = time.split_once(' ')?;
    let mut parts = date.split(['/', ':']);
    let d: i64 = parts.next()?.parse().ok()?;
    let month = parts.next()?;
    let m = MONTHS.iter().position(|x| *x == month)? as i64 + 1;
    let y: i64 = parts.next()?.parse().ok()?;
    let (hh, mm, ss): (i64, i64, i64) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    // Days from the civil date by counting back from civil() until it matches.
    let mut days = (y - 1970) * 365 + (y - 1969) / 4 + (m - 1) * 30;
    while civil(days) > (y, m, d) {
        days -= 1;
    }
    while civil(days) < (y, m, d) {
        days += 1;
    }
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let off =
        sign * (zone[1..3].parse::<i64>().ok()? * 3600 + zone[3..5].parse::<i64>().ok()? * 60);
    let words: Vec<&str> = request.split(' ').collect();
    let (method, path) = if words.len() == 3 {
        (Some(words[0].to_string()), Some(words[1].to_string()))
    } else {
        (None, None)
    };
    Some(Request {
        host: host.to_string(),
        user: (user != "-").then(|| user.to_string()),
        time: days * 86_400 + hh * 3600 + mm * 60 + ss - off,
        method,
        path,
        status,
        bytes: if bytes == "-" {
            None
        } else {
            Some(bytes.parse().ok()?)
        },
    })
}

#[test]
fn the_example_job_reads_its_access_logs_to_the_answer_of_the_same_query_over_csv() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let examples = workspace().join("examples");
    let logs = tmp.path().join("access-log");
    let csv = tmp.path().join("csv");
    std::fs::create_dir_all(&logs).expect("logs");
    std::fs::create_dir_all(&csv).expect("csv");
    let mut count = 0;
    for entry in std::fs::read_dir(examples.join("access-log")).expect("example data") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("example log");
        std::fs::write(logs.join(path.file_name().expect("name")), &text).expect("copy");
        let mut rows = vec![CSV_HEADER.to_string()];
        for line in text.lines().filter(|l| !l.is_empty()) {
            let r = parse_clf(line).unwrap_or_else(|| panic!("a CLF line: {line}"));
            rows.push(r.csv());
            count += 1;
        }
        let name = path.with_extension("csv");
        std::fs::write(
            csv.join(name.file_name().expect("name")),
            rows.join("\n") + "\n",
        )
        .expect("csv");
    }
    assert_eq!(count, 120, "the example's 120 requests");
    let plugins = plugin_path("file-enumerator")
        .parent()
        .expect("plugin dir")
        .display()
        .to_string();
    let text = std::fs::read_to_string(examples.join("access-log-sql.toml"))
        .expect("example job")
        .replace("../build/plugins", &plugins);
    let sql = text
        .split("sql = \"\"\"")
        .nth(1)
        .and_then(|rest| rest.split("\"\"\"").next())
        .expect("the example's SQL")
        .to_string();
    let example = tmp.path().join("access-log-sql.toml");
    std::fs::write(&example, text).expect("job file");
    let state = tmp.path().join("state");
    run_finished(&example, &state);
    let csv_state = tmp.path().join("csv-state");
    run_finished(
        &csv_job(&tmp.path().join("csv-job"), &csv, &sql),
        &csv_state,
    );
    let got = published_lines(&state.join("output/access-log"));
    let want = published_lines(&csv_state.join("output/access"));
    assert_eq!(
        got.first().map(String::as_str),
        Some("method,status,requests,signed_in,bytes,clients,first_seen"),
        "the example writes a header"
    );
    assert_eq!(got, want, "the example's answer is the CSV one");
    assert!(got.iter().any(|l| l.starts_with("-,408,")), "{got:?}");
}

#[test]
fn a_line_that_is_not_an_access_log_line_fails_the_job_naming_table_reader_split_file_and_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (logs, csv) = (tmp.path().join("logs"), tmp.path().join("csv"));
    write_tables(&requests(300), &logs, &csv);
    // A line of another format in the middle of one file.
    let file = logs.join("access-2.log");
    let text = std::fs::read_to_string(&file).expect("log");
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines.len() / 2;
    let offset: usize = lines[..cut].iter().map(|l| l.len() + 1).sum();
    let bad = "level=info status=200 path=/ this is not the format";
    let mut changed = lines[..cut].join("\n");
    changed.push('\n');
    changed.push_str(bad);
    changed.push('\n');
    changed.push_str(&lines[cut..].join("\n"));
    std::fs::write(&file, changed).expect("bad log");
    let state = tmp.path().join("state");
    let (code, status, error, stderr) = run(&log_job(tmp.path(), &logs, QUERIES[1]), &state);
    assert_eq!(code, Some(1), "{error} {stderr}");
    assert_eq!(status, Some(JobStatus::Failed), "{stderr}");
    assert!(
        !state.join("output/access/_SUCCESS").exists(),
        "nothing is published"
    );
    for needle in [
        "table `access`, source reader `clf`".to_string(),
        "invalid split: split `access-2.log:".to_string(),
        format!("({})", file.display()),
        format!("line at byte {offset}: not a Common Log Format line"),
        bad.to_string(),
    ] {
        assert!(error.contains(&needle), "`{needle}` in: {error}");
    }
    assert_eq!(
        error.matches("not a Common Log Format line").count(),
        1,
        "one clear error: {error}"
    );
}
