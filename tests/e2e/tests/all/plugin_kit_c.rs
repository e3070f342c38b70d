//! The C scalar-function template (issue 27, item 4) through the real
//! `coordhost` binary: `plugin new --kind scalar-function --lang c` writes
//! a project with the `coordhost:function` WIT, the sample's C Arrow codec
//! and a Makefile pinning wit-bindgen and wasm-tools as
//! `scripts/install-c-deps.sh` does; `make` builds it (clang-19,
//! wit-bindgen c, wasm-tools component new: the tools `make plugins`
//! installs; a missing tool fails this test, it never skips), and
//! `plugin check`, `plugin call` and `plugin test` pass on the component.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::workspace;

fn coordhost(args: &[&str]) -> Output {
    crate::support::coordhost()
        .args(args)
        .output()
        .expect("coordhost runs")
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The version `scripts/install-c-deps.sh --versions` prints for `tool`.
fn pinned(tool: &str) -> String {
    let out = Command::new(workspace().join("scripts/install-c-deps.sh"))
        .arg("--versions")
        .output()
        .expect("install-c-deps.sh runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{tool} ")).map(str::to_string))
        .unwrap_or_else(|| panic!("{tool} is pinned: {}", show(&out)))
}

fn new_project(parent: &Path, name: &str) {
    let out = coordhost(&[
        "plugin",
        "new",
        name,
        "--kind",
        "scalar-function",
        "--lang",
        "c",
        "--dir",
        parent.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("(c scalar-function)"), "{stdout}");
}

#[test]
fn plugin_new_writes_a_c_scalar_function_with_the_codec_and_the_pinned_tools() {
    let parent = tempfile::tempdir().expect("tempdir");
    new_project(parent.path(), "c-scaled");
    let project = parent.path().join("c-scaled");
    let read = |rel: &str| {
        std::fs::read_to_string(project.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    };
    let repo = |rel: &str| std::fs::read_to_string(workspace().join(rel)).expect("repo file");
    assert_eq!(read("wit/function.wit"), repo("wit/function/function.wit"));
    assert!(!project.join("wit/types.wit").exists());
    assert_eq!(read("arrow_ipc.c"), repo("plugins/c-arrow/arrow_ipc.c"));
    assert_eq!(read("arrow_ipc.h"), repo("plugins/c-arrow/arrow_ipc.h"));
    let makefile = read("Makefile");
    for pin in [
        format!("WIT_BINDGEN_VERSION := {}", pinned("wit-bindgen-cli")),
        format!("WASM_TOOLS_VERSION := {}", pinned("wasm-tools")),
        "c-scaled.wasm".to_string(),
    ] {
        assert!(
            makefile.contains(&pin),
            "`{pin}` in the Makefile: {makefile}"
        );
    }
    let source = read("function.c");
    assert!(
        source.contains("c_scaled") && !source.contains("{{"),
        "{source}"
    );

    // Other kinds have no C template; the message says which languages do.
    let out = coordhost(&[
        "plugin",
        "new",
        "c-enum",
        "--kind",
        "split-enumerator",
        "--lang",
        "c",
        "--dir",
        parent.path().to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--lang c --kind split-enumerator: no template"),
        "{}",
        show(&out)
    );
    assert!(!parent.path().join("c-enum").exists());
}

#[test]
fn the_generated_c_project_builds_with_make_and_passes_plugin_test() {
    let parent = tempfile::tempdir().expect("tempdir");
    new_project(parent.path(), "c-kit");
    let project = parent.path().join("c-kit");
    let build = Command::new("make")
        .current_dir(&project)
        .output()
        .expect("make runs");
    assert!(
        build.status.success(),
        "the project builds (the tools come from `make plugins`, scripts/install-c-deps.sh): {}",
        show(&build)
    );
    let wasm = project.join("c-kit.wasm");
    let wasm = wasm.to_str().expect("utf-8");

    let out = coordhost(&["plugin", "check", wasm]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let out = coordhost(&["plugin", "call", wasm]);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("signature: (Float64, Float64) -> Float64, deterministic: true"),
        "{}",
        show(&out)
    );
    let out = coordhost(&["plugin", "test", wasm, "--config", "offset=0.5"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(stdout.contains("passed: 6 checks"), "{stdout}");

    // The template's `configure`: a bad value and an unknown key are
    // `invalid-config` errors naming the key.
    for (config, says) in [
        ("offset=abc", "`offset`: `abc` is not a number"),
        ("scale=2", "unknown key `scale`"),
    ] {
        let out = coordhost(&["plugin", "call", wasm, "--config", config]);
        assert_ne!(out.status.code(), Some(0), "{config}: {}", show(&out));
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            all.contains(says) && all.contains("invalid configuration"),
            "{config}: {}",
            show(&out)
        );
    }
}
