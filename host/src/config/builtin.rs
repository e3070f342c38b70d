//! `component = "builtin:NAME"`: a sample plugin named instead of a path
//! (docs/job-file.md, "Built-in plugins").
//!
//! The sample plugins that `make plugins` builds (`file-enumerator`,
//! `local-shuffle`, ...) live in a folder of `NAME.wasm` files. The host
//! looks for `NAME.wasm` in [`search_path`], in order, and takes the first
//! regular file it finds:
//!
//! 1. `$COORDHOST_PLUGIN_DIR`, when set (and not empty);
//! 2. `plugins/` beside the running `coordhost` executable (an installed
//!    copy with its plugins next to it);
//! 3. `build/plugins/` of the source tree the binary was built from (the
//!    crate's `CARGO_MANIFEST_DIR/../build/plugins`, where `make plugins`
//!    and the README's `make demo` put them).
//!
//! The resolved file is what the job runs, what is hashed (SHA-256) and
//! what the job fingerprint records, by name and hash rather than by path:
//! the same bytes found in another folder are the same job, other bytes
//! under the same name are an edited job. A name no folder holds is
//! refused with one line naming the places searched and the names found.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sha2::Digest;

/// The prefix of a `component` value that names a built-in plugin.
pub const PREFIX: &str = "builtin:";

/// The environment variable naming the first folder searched.
pub const PLUGIN_DIR_ENV: &str = "COORDHOST_PLUGIN_DIR";

/// A `builtin:NAME` component as resolved while the job file was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinComponent {
    /// `NAME` of `builtin:NAME`.
    pub name: String,
    /// The file found, absolute.
    pub path: PathBuf,
    /// Lowercase hex SHA-256 of the file's bytes: what the job
    /// fingerprint records instead of `path`.
    pub sha256: String,
}

/// One folder of the search path, with how it was chosen (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchDir {
    /// Where the folder comes from, e.g. `$COORDHOST_PLUGIN_DIR`.
    pub origin: &'static str,
    /// The folder.
    pub dir: PathBuf,
}

/// The folders searched for `builtin:NAME`, in order (see the module
/// docs). A folder that does not exist stays in the list, so a refusal
/// can say it was looked at.
#[must_use]
pub fn search_path() -> Vec<SearchDir> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os(PLUGIN_DIR_ENV).filter(|d| !d.is_empty()) {
        dirs.push(SearchDir {
            origin: "$COORDHOST_PLUGIN_DIR",
            dir: super::absolute(Path::new(&d)),
        });
    }
    if let Some(bin_dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        dirs.push(SearchDir {
            origin: "beside the coordhost executable",
            dir: bin_dir.join("plugins"),
        });
    }
    let source_tree = Path::new(env!("CARGO_MANIFEST_DIR"));
    dirs.push(SearchDir {
        origin: "the source tree's `make plugins` output",
        dir: super::normalize(&source_tree.join("..").join("build").join("plugins")),
    });
    dirs
}

/// Whether `name` may follow `builtin:`: ASCII letters, digits, `-` and
/// `_`, not empty, at most 128 characters (so it names a file in the
/// folder and nothing outside it).
#[must_use]
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Finds `builtin:NAME` in `dirs` and hashes the file.
///
/// # Errors
///
/// One line (the caller puts the file and the field before it): a name
/// that is not [`valid_name`]; no folder holds a regular file `NAME.wasm`
/// (the line names each folder searched, whether it exists, and the
/// names that are there); the file found cannot be read (its path and
/// the I/O error).
pub fn resolve(name: &str, dirs: &[SearchDir]) -> Result<BuiltinComponent, String> {
    if !valid_name(name) {
        return Err(format!(
            "`{PREFIX}{name}` does not name a built-in plugin: after `{PREFIX}` come letters, digits, `-` and `_` (e.g. `{PREFIX}file-enumerator`)"
        ));
    }
    for d in dirs {
        let path = d.dir.join(format!("{name}.wasm"));
        if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            let bytes = crate::files::read_regular_file(&path, crate::files::MAX_COMPONENT_BYTES)
                .map_err(|e| format!("`{PREFIX}{name}` is {}: {e}", path.display()))?;
            let sha256 = sha2::Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            return Ok(BuiltinComponent {
                name: name.to_string(),
                path,
                sha256,
            });
        }
    }
    let searched: Vec<String> = dirs
        .iter()
        .map(|d| {
            let state = if d.dir.is_dir() {
                ""
            } else {
                ", no such folder"
            };
            format!("{} ({}{state})", d.dir.display(), d.origin)
        })
        .collect();
    let available = available(dirs);
    let available = if available.is_empty() {
        "none: build the sample plugins with `make plugins` in the source tree, or point $COORDHOST_PLUGIN_DIR at a folder of NAME.wasm files".to_string()
    } else {
        available.into_iter().collect::<Vec<_>>().join(", ")
    };
    Err(format!(
        "no built-in plugin `{name}`: searched {}; available: {available}",
        searched.join(", ")
    ))
}

/// The names of the built-in plugins found in `dirs` (every `NAME.wasm`
/// regular file whose `NAME` is a [`valid_name`]), sorted.
#[must_use]
pub fn available(dirs: &[SearchDir]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d.dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let Some(name) = file_name
                .to_str()
                .and_then(|n| n.strip_suffix(".wasm"))
                .filter(|n| valid_name(n))
            else {
                continue;
            };
            if entry.path().is_file() {
                names.insert(name.to_string());
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(origin: &'static str, dir: &Path) -> SearchDir {
        SearchDir {
            origin,
            dir: dir.to_path_buf(),
        }
    }

    #[test]
    fn the_first_folder_holding_the_name_wins_and_a_miss_names_every_folder() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        std::fs::create_dir_all(&a).expect("a");
        std::fs::create_dir_all(&b).expect("b");
        std::fs::write(a.join("one.wasm"), b"first").expect("write");
        std::fs::write(b.join("one.wasm"), b"second").expect("write");
        std::fs::write(b.join("two.wasm"), b"two").expect("write");
        std::fs::write(b.join("notes.txt"), b"x").expect("write");
        let dirs = [
            dir("first", &a),
            dir("second", &b),
            dir("third", &tmp.path().join("none")),
        ];
        let one = resolve("one", &dirs).expect("found");
        assert_eq!(one.path, a.join("one.wasm"));
        assert_eq!(
            one.sha256,
            "a7937b64b8caa58f03721bb6bacf5c78cb235febe0e70b1b84cd99541461a08e"
        );
        assert_eq!(
            resolve("two", &dirs).expect("found").path,
            b.join("two.wasm")
        );
        let e = resolve("three", &dirs).expect_err("refused");
        assert!(
            e.starts_with("no built-in plugin `three`: searched ")
                && e.contains(&format!("{} (first)", a.display()))
                && e.contains(&format!(
                    "{} (third, no such folder)",
                    tmp.path().join("none").display()
                ))
                && e.ends_with("available: one, two"),
            "{e}"
        );
        for bad in ["", "../b/two", "a/b", "x.wasm"] {
            let e = resolve(bad, &dirs).expect_err("refused");
            assert!(e.contains("does not name a built-in plugin"), "{bad}: {e}");
        }
        let e = resolve("x", &[dir("empty", &tmp.path().join("none"))]).expect_err("refused");
        assert!(
            e.contains("available: none: build the sample plugins"),
            "{e}"
        );
    }
}
