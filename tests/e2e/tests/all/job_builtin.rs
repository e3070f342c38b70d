//! `component = "builtin:NAME"` and the default shuffle master
//! (docs/job-file.md, "Built-in plugins") through the real `coordhost run`:
//! a name resolves through `$COORDHOST_PLUGIN_DIR` first and the source
//! tree's `build/plugins` last; the job fingerprint follows the bytes found,
//! not the folder (the same bytes elsewhere resume the job, other bytes under
//! the same name are an edited job, exit 2); an unknown name is refused in
//! one line naming the file, the field, the name, the folders searched and
//! the names available, and creates nothing; a job file without `[shuffle]`
//! that declares a shuffle master of its own is refused rather than run on
//! the default.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{coordhost, plugin_path, published_lines, workspace};

/// The example job of a partitioned table, which names its enumerator
/// `builtin:file-enumerator` and has no `[shuffle]`, reading the example's
/// own data (an absolute path).
struct Env {
    tmp: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = workspace().join("examples/lineitem-by-year");
        let text = std::fs::read_to_string(workspace().join("examples/lineitem-by-year-sql.toml"))
            .expect("example")
            .replace("${job_dir}/lineitem-by-year", &data.display().to_string())
            .replace(
                r#"path = "lineitem-by-year""#,
                &format!("path = {:?}", data.display().to_string()),
            );
        assert!(
            text.contains("builtin:file-enumerator")
                && !text.lines().any(|l| l.trim() == "[shuffle]")
        );
        std::fs::write(tmp.path().join("job.toml"), text).expect("job");
        Self { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn job(&self) -> PathBuf {
        self.path("job.toml")
    }

    /// A folder `name` holding copies of the built sample plugins
    /// `file-enumerator` and `local-shuffle`.
    fn plugin_dir(&self, name: &str) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).expect("plugin dir");
        for p in ["file-enumerator", "local-shuffle"] {
            std::fs::copy(plugin_path(p), dir.join(format!("{p}.wasm"))).expect("copy");
        }
        dir
    }

    /// `coordhost run job.toml --data-dir STATE` with
    /// `$COORDHOST_PLUGIN_DIR` set to `plugins` (or unset).
    fn run(&self, state: &str, plugins: Option<&Path>) -> Output {
        let mut c = coordhost();
        c.arg("run")
            .arg(self.job())
            .arg("--data-dir")
            .arg(self.path(state))
            .arg("--workers")
            .arg("2");
        match plugins {
            Some(dir) => c.env("COORDHOST_PLUGIN_DIR", dir),
            None => c.env_remove("COORDHOST_PLUGIN_DIR"),
        };
        c.output().expect("coordhost runs")
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Appends an empty custom section to a component: other bytes, the same
/// behaviour (a custom section may close a component binary).
fn touch_component(path: &Path) {
    let mut bytes = std::fs::read(path).expect("component");
    // section id 0 (custom), size 5: name length 4, "note", no payload.
    bytes.extend_from_slice(&[0x00, 0x05, 0x04, b'n', b'o', b't', b'e']);
    std::fs::write(path, bytes).expect("component");
}

#[test]
fn builtin_names_resolve_in_order_and_the_fingerprint_follows_the_bytes_not_the_folder() {
    let env = Env::new();
    let first = env.plugin_dir("first");
    let out = env.run("state", Some(&first));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        published_lines(&env.path("state/output/lineitem-by-year"))[0],
        "l_shipyear,l_returnflag,lines,qty,price"
    );

    // The same bytes in another folder, then in the source tree's
    // build/plugins (no variable): the same job, already finished.
    let second = env.plugin_dir("second");
    for plugins in [Some(second.as_path()), None] {
        let out = env.run("state", plugins);
        assert_eq!(out.status.code(), Some(0), "{plugins:?}: {}", stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            stdout.contains("0 attempts run, 5 skipped"),
            "{plugins:?}: {stdout}"
        );
    }

    // Other bytes under the same name: an edited job, refused.
    let third = env.plugin_dir("third");
    touch_component(&third.join("file-enumerator.wasm"));
    let out = env.run("state", Some(&third));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the job's event log was written for a different job graph"),
        "{}",
        stderr(&out)
    );
    // ... and the changed component runs as a job of its own.
    let out = env.run("state-third", Some(&third));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // The first folder of the search path wins over the source tree: a
    // folder whose file-enumerator is not a component is what the run
    // refuses, naming the file found there.
    let broken = env.plugin_dir("broken");
    std::fs::write(broken.join("file-enumerator.wasm"), b"not wasm").expect("write");
    let out = env.run("state-broken", Some(&broken));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let wanted = format!(
        "{}: field `plugins.files.component`: {}",
        env.job().display(),
        broken.join("file-enumerator.wasm").display()
    );
    assert!(stderr(&out).contains(&wanted), "{wanted}\n{}", stderr(&out));
}

#[test]
fn an_unknown_builtin_name_is_refused_in_one_line_naming_where_it_looked_and_what_there_is() {
    let env = Env::new();
    let text = std::fs::read_to_string(env.job()).expect("job");
    std::fs::write(
        env.job(),
        text.replace("builtin:file-enumerator", "builtin:file-enumeratr"),
    )
    .expect("job");
    let mine = env.plugin_dir("mine");
    let out = env.run("state", Some(&mine));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    let exe_dir = crate::support::process::coordhost_bin()
        .parent()
        .expect("bin dir")
        .join("plugins");
    let wanted = format!(
        "coordhost: {}: field `plugins.files.component`: no built-in plugin `file-enumeratr`: searched {} ($COORDHOST_PLUGIN_DIR), {} (beside the coordhost executable, no such folder), {} (the source tree's `make plugins` output); available: ",
        env.job().display(),
        mine.display(),
        exe_dir.display(),
        workspace().join("build/plugins").display()
    );
    assert!(lines[0].starts_with(&wanted), "{wanted}\n{err}");
    let available: Vec<&str> = lines[0][wanted.len()..].split(", ").collect();
    for name in ["file-enumerator", "local-shuffle", "tax-function"] {
        assert!(available.contains(&name), "{name}: {err}");
    }
    assert!(!env.path("state").exists(), "nothing is created");
}

#[test]
fn without_shuffle_a_declared_shuffle_master_a_taken_name_or_a_job_named_shuffle_is_refused() {
    let env = Env::new();
    let text = std::fs::read_to_string(env.job()).expect("job");
    let declared = format!(
        "{text}\n{}",
        crate::support::shuffle_table("mine", "local-shuffle", "")
    );
    std::fs::write(env.job(), &declared).expect("job");
    let out = env.run("state", None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "coordhost: {}: field `shuffle`: missing, but plugin `mine` is a shuffle-master: name it with `[shuffle] plugin = \"mine\"` (a job file without [shuffle] uses builtin:local-shuffle)",
            env.job().display()
        )
    );
    // Named in [shuffle], the same plugin runs the job.
    std::fs::write(
        env.job(),
        format!("{declared}\n[shuffle]\nplugin = \"mine\"\n"),
    )
    .expect("job");
    let out = env.run("state", None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!stdout.contains("builtin:local-shuffle"), "{stdout}");

    let taken = text
        .replace("[plugins.files]", "[plugins.local-shuffle]")
        .replace(r#"plugin = "files""#, r#"plugin = "local-shuffle""#);
    std::fs::write(env.job(), taken).expect("job");
    let out = env.run("state-taken", None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "coordhost: {}: field `shuffle`: missing: a job file without [shuffle] uses builtin:local-shuffle as plugin `local-shuffle`, but [plugins.local-shuffle] is a split-enumerator; add a [shuffle] table or rename the plugin",
            env.job().display()
        )
    );
    assert!(!env.path("state-taken").exists(), "nothing is created");

    // A job named `shuffle`: its folder would be the default's partitions.
    std::fs::write(
        env.job(),
        text.replace(r#"name = "lineitem-by-year""#, r#"name = "shuffle""#),
    )
    .expect("job");
    let out = env.run("state-named", None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "coordhost: {}: field `shuffle`: missing: the built-in shuffle master keeps its partitions in `${{data_dir}}/shuffle`, the folder of a job named `shuffle`; add a [shuffle] table",
            env.job().display()
        )
    );
    assert!(!env.path("state-named").exists(), "nothing is created");
}
