//! `coordhost plugin new`: writes a new plugin project from the templates in
//! the repository's `templates/<lang>-<kind>/`, embedded in the binary, with
//! the WIT (`wit/types.wit`) copied in, so the project builds anywhere.
//!
//! Tool versions are not written twice: they are read, at build time of
//! coordhost, from the files that pin them for the sample plugins
//! (`plugins/Cargo.toml` for wit-bindgen, `plugins/languages.mk` for
//! componentize-py, `plugins/js-enumerator/package.json` for
//! componentize-js and preview2-shim, `plugins/js-function/package.json`
//! for apache-arrow). The Python scalar-function and source-reader
//! templates ship the pure-Python Arrow IPC codec of the Python samples,
//! `plugins/py-arrow/arrow_ipc.py`, as it is; the C one ships the C codec
//! of the C sample, `plugins/c-arrow/arrow_ipc.{c,h}`, as it is, and pins
//! wit-bindgen-cli and wasm-tools as `scripts/install-c-deps.sh` does. A
//! project gets the WIT of its kind: `wit/types.wit` (`coordhost:plugin`),
//! `wit/function.wit` (`coordhost:function`) or `wit/reader.wit`
//! (`coordhost:reader`).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::plugin::{PluginKind, WIT_VERSION};

/// The WIT package every plugin targets, copied into each project as `wit/types.wit`.
pub const WIT_TYPES: &str = include_str!("../../../wit/types.wit");
/// The scalar-function contract (`coordhost:function`), written into a new
/// scalar-function project as `wit/function.wit`.
pub const WIT_FUNCTION: &str = include_str!("../../../wit/function/function.wit");
/// The source-reader contract (`coordhost:reader`), written into a new
/// source-reader project as `wit/reader.wit`.
pub const WIT_READER: &str = include_str!("../../../wit/reader/reader.wit");

const PLUGINS_CARGO: &str = include_str!("../../../plugins/Cargo.toml");
const LANGUAGES_MK: &str = include_str!("../../../plugins/languages.mk");
const JS_PACKAGE: &str = include_str!("../../../plugins/js-enumerator/package.json");
const JS_FUNCTION_PACKAGE: &str = include_str!("../../../plugins/js-function/package.json");
/// The pure-Python Arrow IPC codec (`plugins/py-arrow/arrow_ipc.py`), shipped
/// in a Python scalar-function project as `arrow_ipc.py`.
pub const PY_ARROW_CODEC: &str = include_str!("../../../plugins/py-arrow/arrow_ipc.py");
/// The C Arrow IPC codec (`plugins/c-arrow/arrow_ipc.c` and its header),
/// shipped in a C scalar-function project as `arrow_ipc.c` and `arrow_ipc.h`.
pub const C_ARROW_CODEC: [&str; 2] = [
    include_str!("../../../plugins/c-arrow/arrow_ipc.c"),
    include_str!("../../../plugins/c-arrow/arrow_ipc.h"),
];
/// The script that installs the C toolchain and pins its crates.io tools.
const C_DEPS: &str = include_str!("../../../scripts/install-c-deps.sh");

/// The language of a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust with wit-bindgen, built with cargo for `wasm32-wasip2`.
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with componentize-js.
    Js,
    /// C with `wit-bindgen c`, compiled by clang-19 for `wasm32-wasi` and
    /// made a component by `wasm-tools component new`.
    C,
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rust => "rust",
            Self::Python => "python",
            Self::Js => "js",
            Self::C => "c",
        })
    }
}

/// One file of a template: its path in the project and its text, with
/// `{{placeholders}}` (see [`render`]).
type TemplateFile = (&'static str, &'static str);

macro_rules! template {
    ($dir:literal: $($file:literal),+ $(,)?) => {
        &[$(($file, include_str!(concat!("../../../templates/", $dir, "/", $file)))),+]
    };
}

const RUST_SPLIT_ENUMERATOR: &[TemplateFile] = template!("rust-split-enumerator":
    "Cargo.toml", "Cargo.lock", "src/lib.rs", "README.md", ".gitignore");
const RUST_SHUFFLE_MASTER: &[TemplateFile] = template!("rust-shuffle-master":
    "Cargo.toml", "Cargo.lock", "src/lib.rs", "README.md", ".gitignore");
const PYTHON_SPLIT_ENUMERATOR: &[TemplateFile] = template!("python-split-enumerator":
    "app.py", "split_enumerator.py", "README.md", ".gitignore");
const PYTHON_SHUFFLE_MASTER: &[TemplateFile] = template!("python-shuffle-master":
    "app.py", "shuffle_master.py", "README.md", ".gitignore");
const RUST_SCALAR_FUNCTION: &[TemplateFile] = template!("rust-scalar-function":
    "Cargo.toml", "Cargo.lock", "src/lib.rs", "README.md", ".gitignore");
const JS_SPLIT_ENUMERATOR: &[TemplateFile] = template!("js-split-enumerator":
    "enumerator.js", "build.mjs", "package.json", "README.md", ".gitignore");
const PYTHON_SCALAR_FUNCTION: &[TemplateFile] = &[
    (
        "app.py",
        include_str!("../../../templates/python-scalar-function/app.py"),
    ),
    (
        "README.md",
        include_str!("../../../templates/python-scalar-function/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/python-scalar-function/.gitignore"),
    ),
    ("arrow_ipc.py", PY_ARROW_CODEC),
];
const JS_SCALAR_FUNCTION: &[TemplateFile] = template!("js-scalar-function":
    "function.js", "build.mjs", "package.json", "README.md", ".gitignore");
const RUST_SOURCE_READER: &[TemplateFile] = template!("rust-source-reader":
    "Cargo.toml", "Cargo.lock", "src/lib.rs", "README.md", ".gitignore", "sample.log",
    "bad-sample.log");
const PYTHON_SOURCE_READER: &[TemplateFile] = &[
    (
        "app.py",
        include_str!("../../../templates/python-source-reader/app.py"),
    ),
    (
        "source_reader.py",
        include_str!("../../../templates/python-source-reader/source_reader.py"),
    ),
    (
        "README.md",
        include_str!("../../../templates/python-source-reader/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/python-source-reader/.gitignore"),
    ),
    (
        "sample.log",
        include_str!("../../../templates/python-source-reader/sample.log"),
    ),
    (
        "bad-sample.log",
        include_str!("../../../templates/python-source-reader/bad-sample.log"),
    ),
    ("arrow_ipc.py", PY_ARROW_CODEC),
];
const JS_SOURCE_READER: &[TemplateFile] = template!("js-source-reader":
    "reader.js", "build.mjs", "package.json", "README.md", ".gitignore", "sample.log",
    "bad-sample.log");
const C_SCALAR_FUNCTION: &[TemplateFile] = &[
    (
        "function.c",
        include_str!("../../../templates/c-scalar-function/function.c"),
    ),
    (
        "Makefile",
        include_str!("../../../templates/c-scalar-function/Makefile"),
    ),
    (
        "README.md",
        include_str!("../../../templates/c-scalar-function/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../../../templates/c-scalar-function/.gitignore"),
    ),
    ("arrow_ipc.c", C_ARROW_CODEC[0]),
    ("arrow_ipc.h", C_ARROW_CODEC[1]),
];

/// The languages that have a template of `kind`, for messages
/// (`--lang rust, --lang python and --lang js`), read from [`template`]
/// so that the message cannot miss one.
fn template_langs(kind: PluginKind) -> String {
    let langs: Vec<String> = [Lang::Rust, Lang::Python, Lang::Js, Lang::C]
        .into_iter()
        .filter(|&lang| template(lang, kind).is_some())
        .map(|lang| format!("--lang {lang}"))
        .collect();
    match langs.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "no language".to_owned(),
    }
}

/// The template for `lang` and `kind`, if there is one.
fn template(lang: Lang, kind: PluginKind) -> Option<&'static [TemplateFile]> {
    match (lang, kind) {
        (Lang::Rust, PluginKind::SplitEnumerator) => Some(RUST_SPLIT_ENUMERATOR),
        (Lang::Rust, PluginKind::ShuffleMaster) => Some(RUST_SHUFFLE_MASTER),
        (Lang::Python, PluginKind::SplitEnumerator) => Some(PYTHON_SPLIT_ENUMERATOR),
        (Lang::Python, PluginKind::ShuffleMaster) => Some(PYTHON_SHUFFLE_MASTER),
        (Lang::Js, PluginKind::SplitEnumerator) => Some(JS_SPLIT_ENUMERATOR),
        (Lang::Js, PluginKind::ShuffleMaster) => None,
        (Lang::Rust, PluginKind::ScalarFunction) => Some(RUST_SCALAR_FUNCTION),
        (Lang::Python, PluginKind::ScalarFunction) => Some(PYTHON_SCALAR_FUNCTION),
        (Lang::Js, PluginKind::ScalarFunction) => Some(JS_SCALAR_FUNCTION),
        (Lang::Rust, PluginKind::SourceReader) => Some(RUST_SOURCE_READER),
        (Lang::Python, PluginKind::SourceReader) => Some(PYTHON_SOURCE_READER),
        (Lang::Js, PluginKind::SourceReader) => Some(JS_SOURCE_READER),
        (Lang::C, PluginKind::ScalarFunction) => Some(C_SCALAR_FUNCTION),
        (
            Lang::C,
            PluginKind::SplitEnumerator | PluginKind::ShuffleMaster | PluginKind::SourceReader,
        ) => None,
    }
}

/// Why a project was not written. Each message is one line naming the
/// option or the folder.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// The name is not a plain kebab-case name.
    #[error(
        "NAME `{0}`: use lowercase letters, digits and `-`, starting with a letter (it names the folder, the crate and the component)"
    )]
    BadName(String),
    /// The name is longer than [`MAX_NAME_LEN`].
    #[error(
        "NAME: has {0} characters, more than {MAX_NAME_LEN} (it names the folder, the crate and the component)"
    )]
    NameTooLong(usize),
    /// `--dir` is not a folder and cannot be made one.
    #[error("--dir {}: {reason}", dir.display())]
    BadDir {
        /// The `--dir` value.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No template for this language and kind.
    #[error(
        "--lang {lang} --kind {kind}: no template; a {kind} template exists for {}", template_langs(*kind)
    )]
    NoTemplate {
        /// The language asked for.
        lang: Lang,
        /// The kind asked for.
        kind: PluginKind,
    },
    /// The target folder exists and holds something.
    #[error("{}: the folder exists and is not empty; choose another NAME or --dir", .0.display())]
    NotEmpty(PathBuf),
    /// Writing failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A pinned version, read from the file that pins it for the sample plugins:
/// the exact version, without a range operator (`=`, `^`, `~`) before it.
fn pinned<'a>(text: &'a str, after: &str, end: char) -> &'a str {
    text.split_once(after)
        .map(|(_, rest)| rest.trim_start_matches(['=', '^', '~', ' ', '"']))
        .and_then(|rest| rest.split(end).next())
        .map_or("", str::trim)
}

/// The tool versions the templates pin: `(placeholder, version)`.
pub fn pinned_versions() -> [(&'static str, &'static str); 8] {
    [
        (
            "wit_bindgen",
            pinned(PLUGINS_CARGO, "wit-bindgen = \"=", '"'),
        ),
        (
            "componentize_py",
            pinned(LANGUAGES_MK, "COMPONENTIZE_PY_VERSION :=", '\n'),
        ),
        (
            "componentize_js",
            pinned(JS_PACKAGE, "\"@bytecodealliance/componentize-js\": \"", '"'),
        ),
        (
            "preview2_shim",
            pinned(JS_PACKAGE, "\"@bytecodealliance/preview2-shim\": \"", '"'),
        ),
        (
            "apache_arrow",
            pinned(JS_FUNCTION_PACKAGE, "\"apache-arrow\": \"", '"'),
        ),
        ("wit_version", WIT_VERSION),
        (
            "wit_bindgen_cli",
            pinned(C_DEPS, "WIT_BINDGEN_VERSION=", '\n'),
        ),
        ("wasm_tools", pinned(C_DEPS, "WASM_TOOLS_VERSION=", '\n')),
    ]
}

/// Replaces `{{name}}`, `{{crate}}` and the pinned versions in `text`.
pub fn render(text: &str, name: &str) -> String {
    let mut out = text
        .replace("{{name}}", name)
        .replace("{{crate}}", &name.replace('-', "_"));
    for (key, version) in pinned_versions() {
        out = out.replace(&format!("{{{{{key}}}}}"), version);
    }
    out
}

/// The longest project name, in characters (bytes: it is ASCII).
pub const MAX_NAME_LEN: usize = 64;

/// `--dir` must be a folder, or creatable as one: the nearest existing
/// ancestor of a folder that does not exist must be a folder.
fn check_parent(parent: &Path) -> Result<(), NewError> {
    let bad = |reason: String| NewError::BadDir {
        dir: parent.to_path_buf(),
        reason,
    };
    let mut at = Some(parent);
    while let Some(p) = at {
        if p.as_os_str().is_empty() {
            return Ok(());
        }
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) if p == parent => return Err(bad("is not a folder".to_string())),
            Ok(_) => {
                return Err(bad(format!(
                    "cannot be created: `{}` is not a folder",
                    p.display()
                )));
            }
            Err(_) => at = p.parent(),
        }
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
}

/// Writes project `name` of `kind` in `lang` into `parent/name`; returns
/// the folder and the files written (relative paths).
///
/// # Errors
/// [`NewError`]: a bad name, no template, a non-empty folder, or a write failure.
pub fn create(
    name: &str,
    kind: PluginKind,
    lang: Lang,
    parent: &Path,
) -> Result<(PathBuf, Vec<String>), NewError> {
    if name.len() > MAX_NAME_LEN {
        return Err(NewError::NameTooLong(name.chars().count()));
    }
    if !valid_name(name) {
        return Err(NewError::BadName(name.to_string()));
    }
    check_parent(parent)?;
    let files = template(lang, kind).ok_or(NewError::NoTemplate { lang, kind })?;
    let dir = parent.join(name);
    let write_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| NewError::Write { path, source }
    };
    match std::fs::read_dir(&dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(NewError::NotEmpty(dir));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(write_error(&dir)(e)),
    }
    let mut written = Vec::new();
    // A scalar function's contract is the package `coordhost:function`.
    let wit: TemplateFile = match kind {
        PluginKind::ScalarFunction => ("wit/function.wit", WIT_FUNCTION),
        // A source reader's contract is the package `coordhost:reader`.
        PluginKind::SourceReader => ("wit/reader.wit", WIT_READER),
        _ => ("wit/types.wit", WIT_TYPES),
    };
    for (rel, text) in files.iter().chain(std::iter::once(&wit)) {
        let path = dir.join(rel);
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).map_err(write_error(folder))?;
        }
        // The WIT and the codec are copied as they are.
        let body = if *rel == wit.0 || *text == PY_ARROW_CODEC || C_ARROW_CODEC.contains(text) {
            (*text).to_string()
        } else {
            render(text, name)
        };
        std::fs::write(&path, body).map_err(write_error(&path))?;
        written.push((*rel).to_string());
    }
    Ok((dir, written))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_template_names_every_language_that_has_one() {
        assert_eq!(
            template_langs(PluginKind::SplitEnumerator),
            "--lang rust, --lang python and --lang js"
        );
        assert_eq!(
            template_langs(PluginKind::ShuffleMaster),
            "--lang rust and --lang python"
        );
        assert_eq!(
            template_langs(PluginKind::ScalarFunction),
            "--lang rust, --lang python, --lang js and --lang c"
        );
    }

    #[test]
    fn every_pinned_version_is_found_in_the_files_that_pin_the_samples() {
        for (key, version) in pinned_versions() {
            assert!(
                version.chars().next().is_some_and(|c| c.is_ascii_digit()) && version.contains('.'),
                "{key}: `{version}`"
            );
        }
    }

    #[test]
    fn no_placeholder_is_left_after_rendering() {
        for files in [
            RUST_SPLIT_ENUMERATOR,
            RUST_SHUFFLE_MASTER,
            PYTHON_SPLIT_ENUMERATOR,
            PYTHON_SHUFFLE_MASTER,
            JS_SPLIT_ENUMERATOR,
            RUST_SCALAR_FUNCTION,
            PYTHON_SCALAR_FUNCTION,
            JS_SCALAR_FUNCTION,
            RUST_SOURCE_READER,
            PYTHON_SOURCE_READER,
            JS_SOURCE_READER,
            C_SCALAR_FUNCTION,
        ] {
            for (rel, text) in files {
                // The C codec is copied as it is (its array initialisers hold `{{`).
                if C_ARROW_CODEC.contains(text) {
                    continue;
                }
                let out = render(text, "my-plugin");
                assert!(!out.contains("{{"), "{rel}: {out}");
            }
        }
    }

    #[test]
    fn names_are_plain_kebab_case() {
        assert!(valid_name("my-enumerator2"));
        for bad in ["", "My", "1x", "a_b", "a/b", "..", "a-"] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
