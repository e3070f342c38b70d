//! The host never lends its authority to a plugin (issue 9 items 4, 5, 6, 9,
//! 10), proven through the real `coordhost run` binary with misbehaving
//! components built from `plugins/`: `hostile-shuffle` (a location outside
//! its grant, a planted symlink, descriptors that break the contract) and
//! `faulty-enumerator` (`file-range` splits naming files outside its grants,
//! `/dev/zero`, an endless line, duplicate ids, an assignment before any
//! reader, a flood of splits).
//!
//! Each case checks the exit code, a message naming the plugin, and that a
//! listing of everything outside the data directory (victim folders with a
//! user's file among it) is the same before and after the run: nothing
//! outside a plugin's writable grants was created, written or deleted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::plugin_path;

/// A user's file in a folder no plugin is granted.
const USER_FILE: &str = "user.txt";
const USER_TEXT: &str = "a user's file that must survive\n";
/// Text of a file beside the data directory that no plugin is granted.
const SECRET: &str = "TOP-SECRET-LINE-7f3a";

/// One test's folder: `data/` is the data directory; `victim/` and
/// `victim2/` hold a user's file; `secret.txt` lies beside the data directory.
struct Setup {
    tmp: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        for victim in ["victim", "victim2"] {
            let dir = tmp.path().join(victim);
            std::fs::create_dir_all(&dir).expect("victim folder");
            std::fs::write(dir.join(USER_FILE), USER_TEXT).expect("user file");
        }
        std::fs::write(tmp.path().join("secret.txt"), format!("{SECRET}\n")).expect("secret");
        std::fs::create_dir_all(tmp.path().join("input")).expect("input folder");
        Self { tmp }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    /// Every file, folder and symlink under the test folder except the data
    /// directory, with file contents and link targets.
    fn listing(&self) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        list(
            self.tmp.path(),
            self.tmp.path(),
            Some(&self.path("data")),
            &mut out,
        );
        out
    }

    /// Writes a job: source vertex `read` (parallelism 2) fed by plugin
    /// `evil-enum` (faulty-enumerator), hash edge, sink vertex `write`
    /// (parallelism 1); shuffle master `evil-shuffle` granted
    /// `${data_dir}/shuffle` only. `enum_config`/`shuffle_config` are TOML
    /// inline-table bodies; `enum_dirs` the enumerator's `dirs` array body.
    fn job(
        &self,
        enum_config: &str,
        enum_dirs: &str,
        shuffle: &str,
        shuffle_config: &str,
    ) -> PathBuf {
        let text = format!(
            r#"
[job]
name = "authority"
max-attempts = 2

[recovery]
enabled = false

[shuffle]
plugin = "evil-shuffle"

[plugins.evil-enum]
component = "{enumerator}"
kind = "split-enumerator"
config = {{ {enum_config} }}
dirs = [{enum_dirs}]
limits = {{ call-timeout-ms = 60000, memory-mib = 64 }}

{shuffle}
[[vertices]]
id = "read"
source = "evil-enum"
parallelism = 2
operators = [{{ op = "read-lines" }}]

[[vertices]]
id = "write"
parallelism = 1
operators = [{{ op = "write-text", path = "${{data_dir}}/output/lines" }}]

[[edges]]
from = "read"
to = "write"
kind = "hash"
key = ["line"]
"#,
            enumerator = plugin_path("faulty-enumerator").display(),
            shuffle = crate::support::shuffle_table("evil-shuffle", shuffle, shuffle_config),
        );
        let job = self.path("job.toml");
        std::fs::write(&job, text).expect("job file");
        job
    }

    fn run(&self, job: &Path) -> (Output, String) {
        let out = crate::support::coordhost()
            .args(["run", &job.display().to_string(), "--data-dir"])
            .arg(self.path("data"))
            .args(["--workers", "2"])
            .output()
            .expect("coordhost runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out, stderr)
    }

    /// Runs `job`, expects exit 1 with every one of `needles` in stderr, and
    /// that nothing outside the data directory changed.
    fn fails(&self, job: &Path, needles: &[&str]) -> String {
        let before = self.listing();
        let (out, stderr) = self.run(job);
        assert_eq!(out.status.code(), Some(1), "exit code; stderr:\n{stderr}");
        // The one line that says why the job failed.
        let last = stderr
            .lines()
            .rfind(|l| l.starts_with("coordhost: "))
            .unwrap_or_else(|| panic!("no `coordhost:` error line:\n{stderr}"));
        for n in needles {
            assert!(
                last.contains(n),
                "the error line lacks `{n}`: {last}\n{stderr}"
            );
        }
        assert_eq!(
            self.listing(),
            before,
            "something outside the grants changed"
        );
        for victim in ["victim", "victim2"] {
            assert_eq!(
                std::fs::read_to_string(self.path(victim).join(USER_FILE)).expect("user file"),
                USER_TEXT
            );
        }
        stderr
    }

    /// Every byte the host wrote under the data directory, as text.
    fn data_text(&self) -> String {
        let mut out = BTreeMap::new();
        list(&self.path("data"), &self.path("data"), None, &mut out);
        out.into_values().collect::<Vec<_>>().join("\n")
    }
}

/// Lists `dir` (recursively, relative to `root`) into `out`, leaving out `skip`.
fn list(root: &Path, dir: &Path, skip: Option<&Path>, out: &mut BTreeMap<PathBuf, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let path = e.expect("entry").path();
        if skip == Some(path.as_path()) {
            continue;
        }
        let rel = path.strip_prefix(root).expect("inside").to_path_buf();
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).expect("link");
            out.insert(rel, format!("-> {}", target.display()));
        } else if meta.is_dir() {
            out.insert(rel, "dir".into());
            list(root, &path, skip, out);
        } else {
            let bytes = std::fs::read(&path).expect("file");
            out.insert(rel, String::from_utf8_lossy(&bytes).into_owned());
        }
    }
}

fn inline(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k} = \"{v}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn a_shuffle_location_outside_the_grant_is_refused_and_the_folder_survives() {
    let s = Setup::new();
    let victim = s.path("victim");
    let job = s.job(
        &inline(&[("splits", "2")]),
        "",
        "hostile-shuffle",
        &format!(", fault = \"outside\", target = \"{}\"", victim.display()),
    );
    let stderr = s.fails(
        &job,
        &[
            "evil-shuffle",
            "`register-partition-with-producer` broke the plugin contract",
            &format!("returned location {}", victim.display()),
            "outside every writable directory granted to it",
        ],
    );
    assert!(
        !victim.join("data").exists() && !victim.join("index").exists(),
        "{stderr}"
    );
}

#[test]
fn a_symlink_planted_by_a_shuffle_master_is_never_followed() {
    let s = Setup::new();
    let job = s.job(
        &inline(&[("splits", "2")]),
        "",
        "hostile-shuffle",
        ", fault = \"symlink\", link-target = \"../../victim2\"",
    );
    s.fails(
        &job,
        &[
            "evil-shuffle",
            "is a symbolic link",
            "never follows a symlink",
        ],
    );
    // The plugin did plant the link (inside its grant); the host did not follow it.
    let link = s.path("data/shuffle/escape");
    assert!(
        std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()),
        "the hostile plugin planted {}",
        link.display()
    );
    let victim2: Vec<_> = std::fs::read_dir(s.path("victim2"))
        .expect("victim2")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(victim2, [USER_FILE], "nothing was created through the link");
}

#[test]
fn shuffle_descriptors_that_break_the_contract_fail_naming_the_plugin() {
    for (fault, says) in [
        ("wrong-id", "returned a shuffle descriptor for partition"),
        (
            "zero-subpartitions",
            "returned a shuffle descriptor of 0 subpartitions",
        ),
        (
            "more-subpartitions",
            "returned a shuffle descriptor of 2 subpartitions",
        ),
    ] {
        let s = Setup::new();
        let job = s.job(
            &inline(&[("splits", "2")]),
            "",
            "hostile-shuffle",
            &format!(", fault = \"{fault}\""),
        );
        s.fails(&job, &["evil-shuffle", "broke the plugin contract", says]);
    }
}

#[test]
fn local_files_reads_nothing_outside_the_shuffle_masters_grant() {
    // WIT 0.1.3's bulk reads: the file beside the data directory, asked for
    // directly, through `..`, and through a symlink the plugin planted in
    // its grant (to the folder, and the folder's file). None is read, each
    // answer names the path, and the job still runs to its exact output.
    let s = Setup::new();
    let secret = s.path("secret.txt");
    let job = s.job(
        &inline(&[("splits", "3")]),
        "",
        "hostile-shuffle",
        &format!(
            ", fault = \"read-files\", target = \"{}\", link-target = \"../..\"",
            secret.display()
        ),
    );
    let before = s.listing();
    let (out, stderr) = s.run(&job);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains(SECRET),
        "a probe read the secret:\n{stderr}"
    );
    let probes: Vec<&str> = stderr.lines().filter(|l| l.contains("probe ")).collect();
    assert_eq!(probes.len(), 8, "{stderr}");
    let root = s.path("data/shuffle");
    for (path, says) in [
        (
            secret.display().to_string(),
            "outside every directory granted",
        ),
        (format!("{}/../secret.txt", root.display()), "plain parts"),
        (format!("{}/peek", root.display()), "symbolic link"),
        (format!("{}/peek/secret.txt", root.display()), "led outside"),
    ] {
        for kind in ["read", "size"] {
            let line = probes
                .iter()
                .find(|l| l.contains(&format!("probe {kind} {path}: ")))
                .unwrap_or_else(|| panic!("no `probe {kind} {path}` line:\n{stderr}"));
            assert!(
                line.contains(": failed: ") && line.contains(says),
                "{kind} {path}: {line}"
            );
        }
    }
    let text = s.data_text();
    for i in 0..3 {
        assert!(text.contains(&format!("line-{i}")), "output has line-{i}");
    }
    assert_eq!(
        s.listing(),
        before,
        "nothing outside the data directory changed"
    );
}

#[test]
fn a_well_behaved_hostile_shuffle_runs_the_job() {
    // The control for the cases above: without a fault the same job finishes.
    let s = Setup::new();
    let job = s.job(&inline(&[("splits", "3")]), "", "hostile-shuffle", "");
    let before = s.listing();
    let (out, stderr) = s.run(&job);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = s.data_text();
    for i in 0..3 {
        assert!(text.contains(&format!("line-{i}")), "output has line-{i}");
    }
    assert_eq!(s.listing(), before);
}

#[test]
fn a_split_naming_a_file_outside_the_enumerators_grants_is_never_read() {
    let s = Setup::new();
    let secret = s.path("secret.txt");
    let job_file = s.path("job.toml");
    for path in [
        PathBuf::from("/etc/passwd"),
        secret.clone(),
        job_file,
        PathBuf::from("/dev/zero"),
    ] {
        let _fresh = std::fs::remove_dir_all(s.path("data"));
        let job = s.job(
            &inline(&[
                ("splits", "0"),
                ("fault", "assign-file"),
                ("path", &path.display().to_string()),
            ]),
            &format!("{{ path = \"{}\" }}", s.path("input").display()),
            "local-shuffle",
            "",
        );
        s.fails(
            &job,
            &[
                "evil-enum",
                "`handle-split-request` broke the plugin contract",
                "split `file-",
                &format!("` names {}, which", path.display()),
                "outside every readable directory granted to it",
            ],
        );
        let text = s.data_text();
        assert!(
            !text.contains(SECRET) && !text.contains("root:"),
            "nothing read"
        );
    }
}

#[test]
fn a_split_file_is_read_inside_the_grants_only_after_symlinks_are_resolved() {
    let s = Setup::new();
    let input = s.path("input");
    std::fs::write(input.join("words.txt"), "alpha\nbeta\n").expect("input");
    std::os::unix::fs::symlink("words.txt", input.join("inner-link")).expect("symlink");
    std::os::unix::fs::symlink("../secret.txt", input.join("outer-link")).expect("symlink");
    std::os::unix::fs::symlink("/dev/zero", input.join("zero")).expect("symlink");
    std::fs::create_dir(input.join("folder")).expect("folder");
    let grant = format!("{{ path = \"{}\" }}", input.display());

    // Inside the grant, through a symlink that stays inside: read.
    let job = s.job(
        &inline(&[
            ("splits", "0"),
            ("fault", "assign-file"),
            ("path", &input.join("inner-link").display().to_string()),
        ]),
        &grant,
        "local-shuffle",
        "",
    );
    let (out, stderr) = s.run(&job);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = s.data_text();
    assert!(
        text.contains("alpha") && text.contains("beta"),
        "the granted file was read"
    );

    // A symlink out of the grant, a device behind a symlink, a folder: refused when read.
    for (name, says) in [
        ("outer-link", "evil-enum"),
        ("zero", "evil-enum"),
        ("folder", "which is a directory, not a regular file"),
    ] {
        std::fs::remove_dir_all(s.path("data")).expect("a fresh data directory per run");
        let path = input.join(name);
        let job = s.job(
            &inline(&[
                ("splits", "0"),
                ("fault", "assign-file"),
                ("path", &path.display().to_string()),
            ]),
            &grant,
            "local-shuffle",
            "",
        );
        s.fails(&job, &[says, "split `file-", &path.display().to_string()]);
        assert!(
            !s.data_text().contains(SECRET),
            "the secret was not read through {name}"
        );
    }
}

#[test]
fn a_line_longer_than_the_bound_fails_naming_the_plugin() {
    let s = Setup::new();
    let input = s.path("input");
    let endless = input.join("endless.txt");
    // 17 MiB without a newline: over the 16 MiB bound of one line.
    std::fs::write(&endless, vec![b'a'; 17 << 20]).expect("endless line");
    let job = s.job(
        &inline(&[
            ("splits", "0"),
            ("fault", "assign-file"),
            ("path", &endless.display().to_string()),
        ]),
        &format!("{{ path = \"{}\" }}", input.display()),
        "local-shuffle",
        "",
    );
    s.fails(
        &job,
        &["evil-enum", "line at byte 0 is longer than 16777216 bytes"],
    );
}

#[test]
fn enumerator_contract_violations_fail_naming_the_plugin_and_the_rule() {
    for (config, says) in [
        (
            inline(&[("splits", "0"), ("fault", "duplicate-ids")]),
            "assigned split id `dup` again while it is still assigned",
        ),
        (
            inline(&[("splits", "2"), ("fault", "assign-before-reader")]),
            "`start` broke the plugin contract: assigned splits to subtask 0, which has no registered reader",
        ),
        (
            inline(&[
                ("splits", "0"),
                ("fault", "split-flood"),
                ("flood-calls", "40"),
                ("flood-splits", "50000"),
            ]),
            "assigned more than 100000 splits",
        ),
    ] {
        let s = Setup::new();
        let job = s.job(&config, "", "local-shuffle", "");
        s.fails(&job, &["evil-enum", "broke the plugin contract", says]);
    }
}

#[test]
fn a_symlink_swapped_in_at_release_is_never_followed_when_the_host_deletes() {
    let s = Setup::new();
    // What a host that followed `<root>/authority -> ../../victim2` would delete.
    for partition in ["read-0-0", "read-1-0"] {
        let dir = s.path("victim2/read-write").join(partition);
        std::fs::create_dir_all(&dir).expect("victim partition folder");
        std::fs::write(dir.join(USER_FILE), USER_TEXT).expect("user file");
    }
    let input = s.path("input");
    std::fs::create_dir(input.join("folder")).expect("folder");
    // The first attempts fail (their split names a folder), so the host resets
    // them and releases their partitions; the shuffle master then swaps its
    // job folder for a symlink before the host deletes.
    let job = s.job(
        &inline(&[
            ("splits", "0"),
            ("fault", "assign-file"),
            ("path", &input.join("folder").display().to_string()),
        ]),
        &format!("{{ path = \"{}\" }}", input.display()),
        "hostile-shuffle",
        ", fault = \"swap-on-release\", link-target = \"../../victim2\"",
    );
    let stderr = s.fails(&job, &["failed on attempt"]);
    assert!(
        stderr.contains("not deleted") && stderr.contains("is a symbolic link"),
        "the release path met the symlink and refused it:\n{stderr}"
    );
    for partition in ["read-0-0", "read-1-0"] {
        let kept = s.path("victim2/read-write").join(partition).join(USER_FILE);
        assert!(kept.is_file(), "{} survives", kept.display());
    }
}
