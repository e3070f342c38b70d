//! Plugin mistakes found before the job runs (the component is the
//! wrong kind, not Wasm, or a granted folder is missing) are one error
//! naming the job file and the field; and a data directory whose log was
//! written for other plugin settings (another input folder) is refused.

use crate::support::job::{example_job, options, run_ok};
use crate::support::plugin_path;
use coordhost::job::{JobError, run_job};

fn words(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("a.txt"), "one two two\nthree\n").unwrap();
}

fn load_error(job_text: &str, tmp: &std::path::Path, name: &str) -> String {
    let job = tmp.join(format!("{name}.toml"));
    std::fs::write(&job, job_text).unwrap();
    match run_job(&options(&job, &tmp.join(format!("data-{name}")), 1)) {
        // Found by the validation pass (before anything is created) or when
        // the component loads.
        Err(e @ (JobError::PluginLoad { .. } | JobError::Config(_))) => {
            let text = e.to_string();
            assert!(
                text.contains(job.to_str().unwrap()),
                "names the job file: {text}"
            );
            assert_eq!(text.lines().count(), 1, "one line: {text}");
            text
        }
        other => panic!(
            "{name}: expected a plugin load error, got {:?}",
            other.map(|s| s.status)
        ),
    }
}

#[test]
fn plugin_mistakes_found_at_load_name_the_job_file_and_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("words");
    words(&input);
    let job = example_job("wordcount.toml", "build/data/words", &input, tmp.path());
    let text = std::fs::read_to_string(&job).unwrap();
    let enumerator = plugin_path("file-enumerator");
    let enumerator = enumerator.to_str().unwrap();

    let wrong_kind = text.replacen(
        enumerator,
        plugin_path("local-shuffle").to_str().unwrap(),
        1,
    );
    let e = load_error(&wrong_kind, tmp.path(), "wrong-kind");
    assert!(
        e.contains("field `plugins.files.kind`") && e.contains("is a shuffle-master"),
        "{e}"
    );

    let readme = crate::support::workspace().join("README.md");
    let not_wasm = text.replacen(enumerator, readme.to_str().unwrap(), 1);
    let e = load_error(&not_wasm, tmp.path(), "not-wasm");
    assert!(
        e.contains("field `plugins.files.component`") && e.contains("not a WebAssembly component"),
        "{e}"
    );

    let gone = tmp.path().join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    let moved = text.replace(input.to_str().unwrap(), gone.to_str().unwrap());
    std::fs::remove_dir(&gone).unwrap();
    let e = load_error(&moved, tmp.path(), "missing-dir");
    assert!(
        e.contains("field `plugins.files.dirs[0].path`")
            && e.contains("a read-only grant must exist"),
        "{e}"
    );
}

#[test]
fn a_data_directory_written_for_another_input_folder_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("words");
    words(&input);
    let job = example_job("wordcount.toml", "build/data/words", &input, tmp.path());
    let data = tmp.path().join("data");
    run_ok(&options(&job, &data, 1));

    let other = tmp.path().join("other-words");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("b.txt"), "four five\n").unwrap();
    let text = std::fs::read_to_string(&job)
        .unwrap()
        .replace(input.to_str().unwrap(), other.to_str().unwrap());
    std::fs::write(&job, text).unwrap();
    match run_job(&options(&job, &data, 1)) {
        Err(JobError::JobFileChanged { data_dir }) => assert!(data_dir.ends_with("data")),
        other => panic!(
            "expected the edited job file to be refused, got {:?}",
            other.map(|s| s.tasks_skipped)
        ),
    }
}
