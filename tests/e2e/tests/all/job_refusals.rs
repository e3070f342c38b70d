//! Hostile or careless job files and command lines, through the real
//! `coordhost` binary: each is refused with exit 2 and exactly the one line
//! of docs/job-file.md ("Rules and their messages"), and the file system is
//! the same after the refusal as before (nothing created, nothing removed).
//! Then the messages of plugin failures while a job starts, `plugin check`
//! on special and huge files, and the two opt-ins that do run.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::job::{example_job, word_count_output};
use crate::support::{cache_dir, coordhost, expected_word_counts, plugin_path};

/// One test's folder: the word-count example pointed at its own input.
struct Env {
    tmp: tempfile::TempDir,
    job: PathBuf,
    words: PathBuf,
    state: PathBuf,
    cache: PathBuf,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let words = tmp.path().join("words");
        coordhost_datagen::write_words(&words, 2, 50, 5).expect("input");
        let job = example_job("wordcount.toml", "build/data/words", &words, tmp.path());
        let state = tmp.path().join("state");
        Self {
            job,
            words,
            state,
            cache: cache_dir(),
            tmp,
        }
    }

    fn tmp(&self) -> &Path {
        self.tmp.path()
    }

    /// Replaces `from` (which must occur) in the job file by `to`.
    fn edit(&self, from: &str, to: &str) {
        let text = std::fs::read_to_string(&self.job).expect("job file");
        assert!(text.contains(from), "the job file lacks {from:?}:\n{text}");
        std::fs::write(&self.job, text.replacen(from, to, 1)).expect("job file");
    }

    /// Puts `{words}`, `{state}`, `{tmp}`, `{job}`, `{cache}` into `s`.
    fn fill(&self, s: &str) -> String {
        s.replace("{words}", &self.words.display().to_string())
            .replace("{state}", &self.state.display().to_string())
            .replace("{tmp}", &self.tmp().display().to_string())
            .replace("{job}", &self.job.display().to_string())
            .replace("{cache}", &self.cache.display().to_string())
    }

    fn run(&self, args: &[OsString]) -> Output {
        coordhost().args(args).output().expect("coordhost runs")
    }

    /// `run JOB --data-dir STATE`.
    fn run_args(&self) -> Vec<OsString> {
        vec![
            "run".into(),
            self.job.clone().into(),
            "--data-dir".into(),
            self.state.clone().into(),
        ]
    }
}

/// Every file and folder under `root` (not following links), with sizes.
fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let e = e.expect("entry");
            let meta = std::fs::symlink_metadata(e.path()).expect("metadata");
            let rel = e.path().display().to_string();
            if meta.is_dir() {
                out.push(format!("{rel}/"));
                stack.push(e.path());
            } else {
                out.push(format!("{rel} {}", meta.len()));
            }
        }
    }
    out.sort();
    out
}

/// The names directly under `/` (a refused sink or grant of `/` must not
/// write there).
fn root_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/")
        .expect("/")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A 2 GiB sparse file that starts like a component.
fn huge_component(path: &Path) {
    let mut f = std::fs::File::create(path).expect("create");
    std::io::Write::write_all(&mut f, b"\0asm\x0d\0\x01\0").expect("preamble");
    f.set_len(2 << 30).expect("sparse length");
}

/// A second sink vertex `count2` fed by `tokenize`, writing to `path`.
fn second_sink(path: &str) -> String {
    format!(
        r#"[[vertices]]
id = "count2"
parallelism = 2
operators = [
  {{ op = "aggregate", mode = "final", key = ["word"], aggregates = [{{ fn = "count", as = "count" }}] }},
  {{ op = "write-text", path = "{path}" }},
]

[[edges]]
from = "tokenize"
to = "count2"
kind = "hash"
key = ["word"]

[[edges]]
from = "tokenize""#
    )
}

const SINK: &str = r#"path = "${data_dir}/output/wordcount""#;
const SINK_FIELD: &str = "{job}: field `vertices[1].operators[1].path`: ";
const SHUFFLE_DIRS: &str = r#"dirs = [{ path = "${data_dir}/shuffle", writable = true }]"#;
const FILES_DIRS: &str = r#"dirs = [{ path = "{words}", writable = false }]"#;
const SUBST_ONLY: &str = "only `${data_dir}`, `${job_dir}` and `${env:NAME}` are replaced";

/// The command line of a case.
type Args = Box<dyn Fn(&Env) -> Vec<OsString>>;

/// A refusal: how to break the job (or the command line) and the line
/// expected on stderr after `coordhost: `, with `{...}` placeholders.
struct Case {
    name: &'static str,
    /// Breaks the job or prepares the file system (before the listing).
    setup: Box<dyn Fn(&Env)>,
    /// The command line; `None` is `run JOB --data-dir STATE`.
    args: Option<Args>,
    expected: String,
}

fn case(name: &'static str, setup: impl Fn(&Env) + 'static, expected: &str) -> Case {
    Case {
        name,
        setup: Box::new(setup),
        args: None,
        expected: expected.to_string(),
    }
}

fn with_args(mut c: Case, args: impl Fn(&Env) -> Vec<OsString> + 'static) -> Case {
    c.args = Some(Box::new(args));
    c
}

fn edit(from: &'static str, to: &'static str) -> impl Fn(&Env) {
    move |e: &Env| e.edit(&e.fill(from), &e.fill(to))
}

fn cases() -> Vec<Case> {
    let sink = |msg: &str| format!("{SINK_FIELD}{msg}");
    vec![
        // 1. Sink paths.
        case(
            "a sink of `/`",
            edit(SINK, r#"path = "/""#),
            &sink("`/` is the root folder; name a folder for this job's output"),
        ),
        case(
            "an empty sink path",
            edit(SINK, r#"path = """#),
            &sink("the path is empty"),
        ),
        case(
            "two sinks sharing a folder",
            |e: &Env| {
                e.edit(
                    "[[edges]]\nfrom = \"tokenize\"",
                    &second_sink("${data_dir}/output/wordcount"),
                )
            },
            "{job}: field `vertices[2].operators[1].path`: `{state}/output/wordcount` is also the output folder of vertex `count`; every sink needs a folder of its own",
        ),
        case(
            "a sink nested in another sink",
            |e: &Env| {
                e.edit(
                    "[[edges]]\nfrom = \"tokenize\"",
                    &second_sink("${data_dir}/output/wordcount/inner"),
                )
            },
            "{job}: field `vertices[2].operators[1].path`: `{state}/output/wordcount/inner` lies inside `{state}/output/wordcount`, the output folder of vertex `count`; every sink needs a folder of its own",
        ),
        case(
            "a sink inside the enumerator's input folder",
            edit(SINK, r#"path = "{words}/out""#),
            &sink("`{words}/out` lies inside `{words}`, a folder granted to plugin `files`"),
        ),
        case(
            "a sink inside the shuffle folder",
            edit(SINK, r#"path = "${data_dir}/shuffle/out""#),
            &sink(
                "`{state}/shuffle/out` lies inside `{state}/shuffle`, a folder granted to plugin `shuffle`",
            ),
        ),
        case(
            "a sink inside the job's log",
            edit(SINK, r#"path = "${data_dir}/wordcount/log""#),
            &sink(
                "`{state}/wordcount/log` lies inside the job's folder `{state}/wordcount` in the data directory (its event log)",
            ),
        ),
        case(
            "a sink inside the compiled-component cache",
            edit(SINK, r#"path = "{cache}/out""#),
            &sink(
                "`{cache}/out` lies inside the compiled-component cache `{cache}` (its entries are loaded as native code)",
            ),
        ),
        case(
            "a sink folder holding a user's part file",
            |e: &Env| {
                std::fs::create_dir_all(e.tmp().join("out")).expect("out");
                std::fs::write(e.tmp().join("out/part-00000.txt"), "mine\n").expect("user file");
                e.edit(SINK, &e.fill(r#"path = "{tmp}/out""#));
            },
            &sink(
                "`{tmp}/out` already holds `part-00000.txt`, which this job did not write; empty the folder, name another, or set `overwrite = true` to let a fresh run remove `part-*`, `_SUCCESS` and `_staging` there",
            ),
        ),
        case(
            "a sink at /etc/passwd",
            edit(SINK, r#"path = "/etc/passwd""#),
            &sink("`/etc/passwd` exists and is not a folder"),
        ),
        // Words of a closed set (serde enums): serde's message, behind the field.
        case(
            "an unknown on-trap word",
            edit(r#"on-trap = "rebuild""#, r#"on-trap = "explode""#),
            "{job}: field `plugins.files.limits.on-trap`: unknown variant `explode`, expected `rebuild` or `fail`",
        ),
        case(
            "an unknown aggregate mode",
            edit(r#"mode = "partial""#, r#"mode = "partly""#),
            "{job}: field `vertices[0].operators[2].mode`: unknown variant `partly`, expected one of `complete`, `partial`, `final`",
        ),
        case(
            "read-parquet without columns",
            edit(
                r#"{ op = "read-lines" }"#,
                r#"{ op = "read-parquet", columns = [] }"#,
            ),
            "{job}: field `vertices[0].operators[0].columns`: needs at least one column",
        ),
        case(
            "read-parquet with a column listed twice",
            edit(
                r#"{ op = "read-lines" }"#,
                r#"{ op = "read-parquet", columns = ["line", "line"] }"#,
            ),
            "{job}: field `vertices[0].operators[0].columns[1]`: `line` is listed twice",
        ),
        case(
            "read-parquet with an empty column name",
            edit(
                r#"{ op = "read-lines" }"#,
                r#"{ op = "read-parquet", columns = ["line", ""] }"#,
            ),
            "{job}: field `vertices[0].operators[0].columns[1]`: the name is empty",
        ),
        case(
            "read-parquet with an unknown key",
            edit(
                r#"{ op = "read-lines" }"#,
                r#"{ op = "read-parquet", columns = ["line"], delimiter = ";" }"#,
            ),
            "{job}: field `vertices[0].operators[0]`: unknown field `delimiter`, expected `columns`",
        ),
        case(
            "read-parquet after another operator",
            edit(
                r#"{ op = "read-lines" },"#,
                r#"{ op = "read-lines" }, { op = "read-parquet", columns = ["line"] },"#,
            ),
            "{job}: field `vertices[0].operators[1].op`: a read operator must be the first operator of a source vertex",
        ),
        case(
            "an unknown edge kind",
            edit(r#"kind = "hash""#, r#"kind = "broadcast""#),
            "{job}: field `edges[0].kind`: unknown variant `broadcast`, expected `forward` or `hash`",
        ),
        // 2. Grants.
        case(
            "a writable grant of `/`",
            edit(FILES_DIRS, r#"dirs = [{ path = "/", writable = true }]"#),
            "{job}: field `plugins.files.dirs[0].path`: grants the root folder `/`; grant only the folders the plugin needs",
        ),
        case(
            "a writable grant of the data directory",
            edit(
                SHUFFLE_DIRS,
                r#"dirs = [{ path = "${data_dir}", writable = true }]"#,
            ),
            "{job}: field `plugins.shuffle.dirs[0].path`: `{state}` contains the job's folder `{state}/wordcount` in the data directory (its event log, which recovery trusts)",
        ),
        case(
            "a writable grant of the job's log",
            edit(
                SHUFFLE_DIRS,
                r#"dirs = [{ path = "${data_dir}/wordcount/log", writable = true }]"#,
            ),
            "{job}: field `plugins.shuffle.dirs[0].path`: `{state}/wordcount/log` lies inside the job's folder `{state}/wordcount` in the data directory (its event log, which recovery trusts)",
        ),
        case(
            "a writable grant of the compiled-component cache",
            edit(
                SHUFFLE_DIRS,
                r#"dirs = [{ path = "${data_dir}/shuffle", writable = true }, { path = "{cache}", writable = true }]"#,
            ),
            "{job}: field `plugins.shuffle.dirs[1].path`: `{cache}` is the compiled-component cache `{cache}` (its entries are loaded as native code)",
        ),
        case(
            "a grant inside a sink's output folder",
            edit(
                SHUFFLE_DIRS,
                r#"dirs = [{ path = "${data_dir}/shuffle", writable = true }, { path = "${data_dir}/output/wordcount/x", writable = true }]"#,
            ),
            "{job}: field `plugins.shuffle.dirs[1].path`: `{state}/output/wordcount/x` lies inside `{state}/output/wordcount`, the output folder of vertex `count`",
        ),
        case(
            "a grant overlapping another plugin's writable grant",
            edit(
                FILES_DIRS,
                r#"dirs = [{ path = "{words}", writable = false }, { path = "${data_dir}/shuffle/x", writable = true }]"#,
            ),
            "{job}: field `plugins.shuffle.dirs[0].path`: `{state}/shuffle` contains `{state}/shuffle/x`, granted to plugin `files`; a folder one plugin may write is granted to no other",
        ),
        case(
            "a read-only grant that does not exist",
            edit(
                FILES_DIRS,
                r#"dirs = [{ path = "{tmp}/nothing", writable = false }]"#,
            ),
            "{job}: field `plugins.files.dirs[0].path`: `{tmp}/nothing`: No such file or directory (os error 2) (a read-only grant must exist)",
        ),
        // 3. Special and huge files.
        case(
            "a component of /dev/zero",
            |e: &Env| {
                let c = plugin_path("file-enumerator").display().to_string();
                e.edit(&c, "/dev/zero");
            },
            "{job}: field `plugins.files.component`: cannot read component /dev/zero: it is a character device, not a regular file",
        ),
        case(
            "a component that is a FIFO",
            |e: &Env| {
                mkfifo(&e.tmp().join("fifo.wasm"));
                let c = plugin_path("file-enumerator").display().to_string();
                e.edit(&c, &e.fill("{tmp}/fifo.wasm"));
            },
            "{job}: field `plugins.files.component`: cannot read component {tmp}/fifo.wasm: it is a FIFO, not a regular file",
        ),
        case(
            "a 2 GiB component",
            |e: &Env| {
                huge_component(&e.tmp().join("big.wasm"));
                let c = plugin_path("file-enumerator").display().to_string();
                e.edit(&c, &e.fill("{tmp}/big.wasm"));
            },
            "{job}: field `plugins.files.component`: cannot read component {tmp}/big.wasm: the file has 2147483648 bytes, more than the limit of 268435456",
        ),
        case(
            "a component that is not WebAssembly",
            |e: &Env| {
                std::fs::write(e.tmp().join("text.wasm"), "hello, world\n").expect("file");
                let c = plugin_path("file-enumerator").display().to_string();
                e.edit(&c, &e.fill("{tmp}/text.wasm"));
            },
            "{job}: field `plugins.files.component`: {tmp}/text.wasm: not a WebAssembly component: it does not start with the WebAssembly magic bytes `\\0asm`",
        ),
        with_args(
            case(
                "a job file of /dev/zero",
                |_: &Env| {},
                "/dev/zero: cannot read the job file: it is a character device, not a regular file",
            ),
            |e: &Env| {
                vec![
                    "run".into(),
                    "/dev/zero".into(),
                    "--data-dir".into(),
                    e.state.clone().into(),
                ]
            },
        ),
        with_args(
            case(
                "a job file that is a FIFO",
                |e: &Env| mkfifo(&e.tmp().join("job.fifo")),
                "{tmp}/job.fifo: cannot read the job file: it is a FIFO, not a regular file",
            ),
            |e: &Env| {
                vec![
                    "run".into(),
                    e.tmp().join("job.fifo").into(),
                    "--data-dir".into(),
                    e.state.clone().into(),
                ]
            },
        ),
        // 4. Substitutions.
        case(
            "an unknown substitution",
            edit(r#"dir = "{words}""#, r#"dir = "${HOME}/words""#),
            &format!(
                "{{job}}: field `plugins.files.config.dir`: unknown substitution `${{HOME}}`; {SUBST_ONLY}"
            ),
        ),
        case(
            "an unclosed substitution",
            edit(r#"dir = "{words}""#, r#"dir = "${data_dir""#),
            &format!(
                "{{job}}: field `plugins.files.config.dir`: `${{data_dir` has a `${{` without a closing `}}`; {SUBST_ONLY}"
            ),
        ),
        case(
            "a nested substitution",
            edit(r#"dir = "{words}""#, r#"dir = "${${job_dir}}""#),
            &format!(
                "{{job}}: field `plugins.files.config.dir`: `${{${{job_dir}}` is not a substitution; {SUBST_ONLY}"
            ),
        ),
        case(
            "an environment variable that is not set",
            edit(
                r#"dir = "{words}""#,
                r#"dir = "${env:COORDHOST_TEST_NEVER_SET}/words""#,
            ),
            "{job}: field `plugins.files.config.dir`: `${env:COORDHOST_TEST_NEVER_SET}`: environment variable COORDHOST_TEST_NEVER_SET is not set",
        ),
        case(
            "an environment variable with a bad name",
            edit(SINK, r#"path = "${env:1-out}""#),
            &sink(
                "`${env:1-out}` in `${env:1-out}` does not name an environment variable (letters, digits and `_`, not starting with a digit)",
            ),
        ),
        case(
            "an unknown substitution in a sink path",
            edit(SINK, r#"path = "${HOME}/out""#),
            &sink(&format!("unknown substitution `${{HOME}}`; {SUBST_ONLY}")),
        ),
        // 5. --workers.
        with_args(
            case(
                "--workers 0",
                |_: &Env| {},
                "--workers: 0 is not in 1..=1024",
            ),
            |e: &Env| {
                let mut a = e.run_args();
                a.extend(["--workers".into(), "0".into()]);
                a
            },
        ),
        with_args(
            case(
                "--workers 100000000",
                |_: &Env| {},
                "--workers: 100000000 is not in 1..=1024",
            ),
            |e: &Env| {
                let mut a = e.run_args();
                a.extend(["--workers".into(), "100000000".into()]);
                a
            },
        ),
        // 6. Refusals that used to write first.
        case(
            "a 5000-character job name",
            |e: &Env| {
                e.edit(
                    r#"name = "wordcount""#,
                    &format!("name = \"{}\"", "j".repeat(5000)),
                )
            },
            "{job}: field `job.name`: has 5000 characters, more than 128 (it names a folder)",
        ),
        case(
            // It used to be created (and left behind) and the job ran.
            "a writable grant outside the data directory that does not exist",
            |e: &Env| {
                e.edit(FILES_DIRS.replace("{words}", &e.words.display().to_string()).as_str(),
                    &e.fill(r#"dirs = [{ path = "{words}", writable = false }, { path = "{tmp}/newgrant", writable = true }]"#));
            },
            "{job}: field `plugins.files.dirs[1].path`: `{tmp}/newgrant`: No such file or directory (os error 2) (a writable grant outside the data directory `{state}` must exist; only folders inside it are created)",
        ),
        with_args(
            case(
                "--summary-json naming a folder",
                |_: &Env| {},
                "--summary-json: `{tmp}` is a folder; name a file",
            ),
            |e: &Env| {
                let mut a = e.run_args();
                a.extend(["--summary-json".into(), e.tmp().into()]);
                a
            },
        ),
        with_args(
            case(
                "--summary-json in a folder that does not exist",
                |_: &Env| {},
                "--summary-json: `{tmp}/no/summary.json` cannot be written: `{tmp}/no` does not exist",
            ),
            |e: &Env| {
                let mut a = e.run_args();
                a.extend([
                    "--summary-json".into(),
                    e.tmp().join("no/summary.json").into(),
                ]);
                a
            },
        ),
        with_args(
            case(
                "--summary-json through a folder that does not exist",
                |_: &Env| {},
                "--summary-json: `{tmp}/no/../summary.json`: `..` follows `{tmp}/no`, which does not exist",
            ),
            |e: &Env| {
                let mut a = e.run_args();
                a.extend([
                    "--summary-json".into(),
                    e.tmp().join("no/../summary.json").into(),
                ]);
                a
            },
        ),
        with_args(
            case(
                "--data-dir through a folder that does not exist",
                |_: &Env| {},
                "--data-dir: `{tmp}/no/../state`: `..` follows `{tmp}/no`, which does not exist",
            ),
            |e: &Env| {
                vec![
                    "run".into(),
                    e.job.clone().into(),
                    "--data-dir".into(),
                    e.tmp().join("no/../state").into(),
                ]
            },
        ),
        with_args(
            case(
                "--data-dir below a file",
                |_: &Env| {},
                "--data-dir: `/etc/passwd/state` cannot be created: `/etc/passwd` is not a folder",
            ),
            |e: &Env| {
                vec![
                    "run".into(),
                    e.job.clone().into(),
                    "--data-dir".into(),
                    "/etc/passwd/state".into(),
                ]
            },
        ),
        case(
            "a record delay of 100 s",
            edit(
                "bytes-per-task = 262144",
                "bytes-per-task = 262144\nrecord-delay-us = 100000000",
            ),
            "{job}: field `vertices[1].record-delay-us`: 100000000 is not in 0..=10000000",
        ),
        with_args(
            case(
                "--data-dir /etc/passwd",
                |_: &Env| {},
                "--data-dir: `/etc/passwd` exists and is not a folder",
            ),
            |e: &Env| {
                vec![
                    "run".into(),
                    e.job.clone().into(),
                    "--data-dir".into(),
                    "/etc/passwd".into(),
                ]
            },
        ),
        case(
            "a component of the other kind (refused when it loads)",
            |e: &Env| {
                let c = plugin_path("file-enumerator").display().to_string();
                e.edit(&c, &plugin_path("local-shuffle").display().to_string());
            },
            &format!(
                "{{job}}: field `plugins.files.kind`: plugin `files` ({}): configured as a split-enumerator but the component is a shuffle-master",
                plugin_path("local-shuffle").display()
            ),
        ),
    ]
}

#[test]
fn every_refusal_is_exit_2_with_its_one_line_and_writes_nothing() {
    let mut failures = Vec::new();
    for c in cases() {
        let env = Env::new();
        (c.setup)(&env);
        let args = c.args.as_ref().map_or_else(|| env.run_args(), |a| a(&env));
        let before = listing(env.tmp());
        let root_before = root_names();
        let out = env.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let expected = format!("coordhost: {}", env.fill(&c.expected));
        if out.status.code() != Some(2) {
            failures.push(format!(
                "{}: exit {:?}, stderr:\n{stderr}",
                c.name,
                out.status.code()
            ));
            continue;
        }
        if stderr.lines().collect::<Vec<_>>() != [expected.as_str()] {
            failures.push(format!(
                "{}:\n  expected: {expected}\n  got:      {stderr}",
                c.name
            ));
            continue;
        }
        if listing(env.tmp()) != before {
            failures.push(format!(
                "{}: the refusal changed the file system:\n  before: {before:?}\n  after:  {:?}",
                c.name,
                listing(env.tmp())
            ));
        }
        if root_names() != root_before {
            failures.push(format!("{}: the refusal changed `/`", c.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} refusals wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The job with `memory-shuffle` as its shuffle master, with `fault`.
fn memory_shuffle_with_fault(env: &Env, fault: &str) {
    let c = plugin_path("local-shuffle").display().to_string();
    env.edit(&c, &plugin_path("memory-shuffle").display().to_string());
    env.edit(
        r#"config = { root = "${data_dir}/shuffle" }"#,
        &format!(r#"config = {{ root = "${{data_dir}}/shuffle", fault = "{fault}" }}"#),
    );
}

#[test]
fn a_trap_in_the_shuffle_masters_register_job_is_a_plugin_failure_exit_1_naming_it_once() {
    let env = Env::new();
    memory_shuffle_with_fault(&env, "trap-register-job");
    let summary = env.tmp().join("summary.json");
    let mut args = env.run_args();
    args.extend(["--summary-json".into(), summary.clone().into()]);
    let out = env.run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("coordhost: plugin `shuffle`: `register-job` trapped: "),
        "{stderr}"
    );
    assert!(
        last.contains("memory-shuffle: trap on register-job"),
        "{stderr}"
    );
    assert_eq!(last.matches("plugin `shuffle`").count(), 1, "{stderr}");
    // A failed run like any other: its summary says so.
    let text = std::fs::read_to_string(&summary)
        .unwrap_or_else(|e| panic!("--summary-json is written: {e}\n{stderr}"));
    let written: coordhost::job::Summary = serde_json::from_str(&text).expect("a summary");
    assert_eq!(written.status, coordhost::job::JobStatus::Failed, "{text}");
    assert_eq!(
        written.error.as_deref(),
        last.strip_prefix("coordhost: "),
        "the summary's error is the line printed: {text}"
    );
    assert_eq!((written.tasks_run, written.tasks_total), (0, 0), "{text}");
    assert!(written.outputs.is_empty(), "no output: {text}");
}

#[test]
fn a_shuffle_snapshot_over_the_log_record_limit_fails_the_run_naming_the_plugin() {
    let env = Env::new();
    // 65 MiB of padding: over the 64 MiB of one log record.
    env.edit(
        r#"config = { root = "${data_dir}/shuffle" }"#,
        r#"config = { root = "${data_dir}/shuffle", snapshot-pad-mib = 65 }"#,
    );
    let summary = env.tmp().join("summary.json");
    let mut args = env.run_args();
    args.extend(["--summary-json".into(), summary.clone().into()]);
    let out = env.run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    let prefix = "coordhost: plugin `shuffle`: `snapshot-state` broke the plugin contract: its batch snapshot is ";
    assert!(last.starts_with(prefix), "{stderr}");
    assert!(
        last.ends_with(&format!(
            "over the event log's limit of {} bytes per record, so it cannot be recorded",
            coordhost::events::format::MAX_PAYLOAD_LEN
        )),
        "{stderr}"
    );
    let size: u64 = last[prefix.len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the line gives the snapshot's size: {last}"));
    assert!(size > 65 << 20, "{last}");
    assert_eq!(last.matches("plugin `shuffle`").count(), 1, "{stderr}");
    let written: coordhost::job::Summary =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("--summary-json"))
            .expect("a summary");
    assert_eq!(written.status, coordhost::job::JobStatus::Failed);
}

#[test]
fn a_shuffle_master_refusing_its_config_is_bad_input_named_once_and_writes_nothing() {
    let env = Env::new();
    memory_shuffle_with_fault(&env, "bogus");
    let before = listing(env.tmp());
    let out = env.run(&env.run_args());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "coordhost: plugin `shuffle`: `create` failed: invalid configuration: fault `bogus` is not `none` or `trap-register-job`"
        ],
    );
    assert_eq!(listing(env.tmp()), before, "the refused run left files");
}

#[test]
fn plugin_check_refuses_special_and_huge_files_in_one_line_and_prints_json_on_failure() {
    let env = Env::new();
    let fifo = env.tmp().join("fifo.wasm");
    mkfifo(&fifo);
    let big = env.tmp().join("big.wasm");
    huge_component(&big);
    let cases: [(PathBuf, String); 3] = [
        (
            PathBuf::from("/dev/zero"),
            "/dev/zero: cannot read the component: it is a character device, not a regular file"
                .into(),
        ),
        (
            fifo.clone(),
            format!(
                "{}: cannot read the component: it is a FIFO, not a regular file",
                fifo.display()
            ),
        ),
        (
            big.clone(),
            format!(
                "{}: cannot read the component: the file has 2147483648 bytes, more than the limit of 268435456",
                big.display()
            ),
        ),
    ];
    for (file, message) in cases {
        let out = coordhost()
            .arg("plugin")
            .arg("check")
            .arg(&file)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(
            stderr.lines().collect::<Vec<_>>(),
            [format!("coordhost: {message}")]
        );
        let out = coordhost()
            .arg("plugin")
            .arg("check")
            .arg(&file)
            .arg("--json")
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2));
        let json: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("--json prints JSON on failure too");
        assert_eq!(json["valid"], false);
        assert_eq!(json["file"], file.display().to_string());
        assert_eq!(json["error"], message);
    }
}

#[test]
fn a_data_dir_named_with_a_substitution_is_used_as_it_is() {
    let env = Env::new();
    let state = env.tmp().join("d${job_dir}");
    let out = coordhost()
        .arg("run")
        .arg(&env.job)
        .arg("--data-dir")
        .arg(&state)
        .arg("--workers")
        .arg("2")
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        word_count_output(&state.join("output/wordcount")),
        expected_word_counts(&env.words)
    );
    // Substituted once: nothing under the job folder's own path.
    let twice = PathBuf::from(format!("{}/d{}", env.tmp().display(), env.tmp().display()));
    assert!(!twice.exists(), "{} exists", twice.display());
}

/// Issue 31, item 5: `${env:NAME}` in a job file is the variable's value
/// (here the input folder and the sink), and part of the resolved job: the
/// same job file with the variable pointing at other input is an edited
/// job once output was published, refused with exit 2 and nothing lost.
#[test]
fn an_environment_variable_names_the_input_and_a_changed_one_is_an_edited_job() {
    let env = Env::new();
    env.edit(
        &env.fill(r#"dir = "{words}""#),
        r#"dir = "${env:COORDHOST_TEST_WORDS}""#,
    );
    env.edit(
        &env.fill(FILES_DIRS),
        r#"dirs = [{ path = "${env:COORDHOST_TEST_WORDS}", writable = false }]"#,
    );
    env.edit(SINK, r#"path = "${env:COORDHOST_TEST_OUT}/wordcount""#);
    let out_root = env.tmp().join("out");
    let run = |words: &Path| {
        coordhost()
            .args(env.run_args())
            .env("COORDHOST_TEST_WORDS", words)
            .env("COORDHOST_TEST_OUT", &out_root)
            .output()
            .expect("runs")
    };
    let out = run(&env.words);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let published = word_count_output(&out_root.join("wordcount"));
    assert_eq!(published, expected_word_counts(&env.words));
    let other = env.tmp().join("other-words");
    coordhost_datagen::write_words(&other, 1, 10, 3).expect("other input");
    let out = run(&other);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the job's event log was written for a different job graph"),
        "{stderr}"
    );
    assert_eq!(word_count_output(&out_root.join("wordcount")), published);
}

#[test]
fn overwrite_true_lets_a_fresh_run_replace_part_files_and_keeps_other_files() {
    let env = Env::new();
    let out_dir = env.tmp().join("out");
    std::fs::create_dir_all(&out_dir).expect("out");
    std::fs::write(out_dir.join("part-00000.txt"), "stale 1\n").expect("old part");
    std::fs::write(out_dir.join("notes.txt"), "mine\n").expect("user file");
    env.edit(
        SINK,
        &format!(r#"path = "{}", overwrite = true"#, out_dir.display()),
    );
    let out = env.run(&env.run_args());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(out_dir.join("notes.txt")).expect("the user's file is still there");
    assert_eq!(
        word_count_output(&out_dir),
        expected_word_counts(&env.words)
    );
}

/// Issue 17, fix 5: a split enumerator refusing its configuration is bad
/// input (exit 2); the fixed job file then runs on the same data directory
/// (nothing finished under the old one, so its log is set aside, not a
/// refusal); once an execution finished, an edit is refused as before.
#[test]
fn a_refused_plugin_config_exits_2_and_the_fixed_job_runs_on_the_same_data_directory() {
    let env = Env::new();
    let good = "split-bytes = 1048576";
    env.edit(good, r#"split-bytes = "lots""#);
    let out = env.run(&env.run_args());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("coordhost: ")
            && last.contains("plugin `files`: `create` failed: invalid configuration")
            && last.contains("split-bytes"),
        "{stderr}"
    );
    // Said once: no log line repeats the `coordhost:` line.
    assert_eq!(
        stderr.matches("invalid configuration").count(),
        1,
        "{stderr}"
    );
    // The summary lists no output folder that has no output.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let outputs: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("output:"))
        .collect();
    assert_eq!(outputs, ["  output: none"], "{stdout}");
    // No job vertex initialised: each says so instead of "parallelism 0".
    assert!(!stdout.contains("parallelism   0"), "{stdout}");
    assert!(stdout.contains(" not started"), "{stdout}");

    env.edit(r#"split-bytes = "lots""#, good);
    let out = env.run(&env.run_args());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("no execution finished under the old one"),
        "{stderr}"
    );
    assert_eq!(
        word_count_output(&env.state.join("output/wordcount")),
        expected_word_counts(&env.words)
    );
    let kept: Vec<String> = std::fs::read_dir(env.state.join("wordcount"))
        .expect("job folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("log.replaced-"))
        .collect();
    assert_eq!(
        kept.len(),
        1,
        "the old log is set aside, not deleted: {kept:?}"
    );
    // One unit for every set-aside log: nanoseconds since the Unix epoch.
    let ns: u128 = kept[0]["log.replaced-".len()..]
        .parse()
        .expect("a number after `log.replaced-`");
    assert!(ns > 1_000_000_000_000_000_000, "nanoseconds: {kept:?}");

    // Executions finished under this job file: an edit is refused.
    env.edit(good, "split-bytes = 2048");
    let out = env.run(&env.run_args());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("different job graph"), "{stderr}");
}

/// A misspelt key in a sample plugin's `config` is refused in `create`
/// (bad input, exit 2, one line naming the plugin and the key) instead of
/// being ignored while the default applies.
#[test]
fn a_misspelt_plugin_config_key_is_bad_input_naming_the_key() {
    let cases = [
        (
            "split-bytes = 1048576",
            "split-byte = 1048576",
            "coordhost: source coordinator of vertex `tokenize`: plugin `files`: `create` failed: invalid configuration: unknown config key `split-byte` (this plugin reads: dir, split-bytes, pattern, row-groups-per-split, partitions)",
        ),
        (
            r#"config = { root = "${data_dir}/shuffle" }"#,
            r#"config = { root = "${data_dir}/shuffle", rooot = "x" }"#,
            "coordhost: plugin `shuffle`: `create` failed: invalid configuration: unknown config key `rooot` (this plugin reads: root, fail-first-reports, fail-restore-while, ignore-worker-reports, snapshot-pad-mib)",
        ),
    ];
    for (from, to, want) in cases {
        let env = Env::new();
        env.edit(from, to);
        let out = env.run(&env.run_args());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{to}: {stderr}");
        assert_eq!(stderr.lines().last(), Some(want), "{to}: {stderr}");
        assert_eq!(stderr.matches("unknown config key").count(), 1, "{stderr}");
    }
}

/// The file enumerator's `dir` must be a directory when the job starts: a
/// missing one (inside the granted folder) is bad input named by its key in
/// `create`, not a failed job at `start`.
#[test]
fn a_file_enumerator_dir_that_does_not_exist_is_bad_input_naming_the_key() {
    let env = Env::new();
    let dir = format!("dir = \"{}\"", env.words.display());
    let missing = format!("dir = \"{}/missing\"", env.words.display());
    env.edit(&dir, &missing);
    let out = env.run(&env.run_args());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.lines().last(),
        Some(
            format!(
                "coordhost: source coordinator of vertex `tokenize`: plugin `files`: `create` failed: invalid configuration: config key `dir`: {}/missing cannot be read: entity not found",
                env.words.display()
            )
            .as_str()
        ),
        "{stderr}"
    );
}
