//! `static-enumerator`: a coordhost split enumerator (world
//! `split-enumerator-plugin`) whose splits are fixed by its config, handed to
//! readers one at a time. It does **not** support batch snapshots, so on
//! recovery the host resets its whole source vertex unless that vertex had
//! finished (FLIP-383; docs/recovery.md step 5).
//!
//! # Config
//!
//! | key | meaning |
//! |---|---|
//! | `split.<N>` | one `inline` split whose text (lines separated by `\n`) is the value; `N` is a number that orders the splits; the split id is the key itself, e.g. `split.0` |
//! | `files` | comma-separated absolute paths; each file is one `file-range` split covering the whole file (length read from its metadata on `start`), with the path as id |
//!
//! Inline splits come first (by `N`), then files (in the given order). At
//! least one split must be configured. A file that cannot be read on `start`
//! gives `error::io` naming it.

// The current contract; with the feature `wit-0-1-1` the same plugin is
// built against the frozen 0.1.1 (`wit/0.1.1/`), without `object-store`
// (`make plugins` ships it as `static-enumerator-0.1.1.wasm`, for the
// host's test that 0.1.1 plugins still load).
#[cfg(not(feature = "wit-0-1-1"))]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "split-enumerator-plugin",
    });
}
#[cfg(feature = "wit-0-1-1")]
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/0.1.1",
        world: "split-enumerator-plugin",
    });
}

use bindings::coordhost::plugin::types::{Error, LogLevel, Split};
use bindings::coordhost::plugin::{enumerator_context, host_log};
use bindings::exports::coordhost::plugin::split_enumerator::{Enumerator, Guest, GuestEnumerator};
use plugin_support::splits::{PendingPayload, PendingSplit, SplitQueue};
use std::cell::{Cell, RefCell};

/// Prefix of the config keys that hold inline splits.
const INLINE_PREFIX: &str = "split.";

/// The message of the error values that snapshot calls return.
const NOT_SUPPORTED: &str = "not supported";

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    type Enumerator = StaticEnumerator;
}

/// The splits that the config names, before file lengths are known.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConfiguredSplits {
    /// `(id, text)` of each inline split, ordered by index.
    inline: Vec<(String, String)>,
    /// Absolute paths of the whole-file splits, in config order.
    files: Vec<String>,
}

impl ConfiguredSplits {
    fn from_config(config: &[(String, String)]) -> Result<Self, Error> {
        let mut inline = Vec::new();
        for (key, value) in config {
            if let Some(index) = key.strip_prefix(INLINE_PREFIX) {
                let index: u64 = index.parse().map_err(|_| {
                    Error::InvalidConfig(format!(
                        "config key `{key}`: the part after `{INLINE_PREFIX}` must be a number"
                    ))
                })?;
                inline.push((index, key.clone(), value.clone()));
            }
        }
        inline.sort_by_key(|(index, _, _)| *index);
        if let Some(pair) = inline.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Error::InvalidConfig(format!(
                "config keys `{}` and `{}` name the same split",
                pair[0].1, pair[1].1
            )));
        }
        let files = match plugin_support::config::value(config, "files") {
            None => Vec::new(),
            Some(list) => parse_file_list(list)?,
        };
        if inline.is_empty() && files.is_empty() {
            return Err(Error::InvalidConfig(
                "no splits configured: set `split.<N>` keys or `files`".to_owned(),
            ));
        }
        Ok(Self {
            inline: inline.into_iter().map(|(_, id, text)| (id, text)).collect(),
            files,
        })
    }

    /// The splits, reading each file's length.
    fn resolve(&self) -> Result<Vec<PendingSplit>, Error> {
        let mut splits: Vec<_> = self
            .inline
            .iter()
            .map(|(id, text)| PendingSplit {
                id: id.clone(),
                payload: PendingPayload::Inline(text.clone()),
            })
            .collect();
        for path in &self.files {
            let metadata = std::fs::metadata(path)
                .map_err(|e| Error::Io(format!("cannot read metadata of {path}: {e}")))?;
            if !metadata.is_file() {
                return Err(Error::Io(format!("{path} is not a regular file")));
            }
            splits.push(PendingSplit {
                id: path.clone(),
                payload: PendingPayload::FileRange {
                    path: path.clone(),
                    start: 0,
                    length: metadata.len(),
                },
            });
        }
        Ok(splits)
    }
}

fn parse_file_list(list: &str) -> Result<Vec<String>, Error> {
    let files: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    if let Some(relative) = files.iter().find(|p| !p.starts_with('/')) {
        return Err(Error::InvalidConfig(format!(
            "config key `files`: `{relative}` is not an absolute path"
        )));
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = files.iter().find(|p| !seen.insert(p.as_str())) {
        return Err(Error::InvalidConfig(format!(
            "config key `files`: `{twice}` is listed twice"
        )));
    }
    Ok(files)
}

/// One enumerator instance (one per source job vertex).
pub struct StaticEnumerator {
    configured: ConfiguredSplits,
    unassigned: RefCell<SplitQueue>,
    started: Cell<bool>,
}

impl StaticEnumerator {}

impl GuestEnumerator for StaticEnumerator {
    fn create(config: Vec<(String, String)>, _parallelism: u32) -> Result<Enumerator, Error> {
        let configured = ConfiguredSplits::from_config(&config)?;
        Ok(Enumerator::new(Self {
            configured,
            unassigned: RefCell::new(SplitQueue::new()),
            started: Cell::new(false),
        }))
    }

    fn restore(
        _config: Vec<(String, String)>,
        _parallelism: u32,
        _snapshot: Vec<u8>,
    ) -> Result<Enumerator, Error> {
        Err(Error::Other(NOT_SUPPORTED.to_owned()))
    }

    fn start(&self) -> Result<(), Error> {
        if self.started.replace(true) {
            return Err(Error::InvalidState("start was already called".to_owned()));
        }
        let splits = self.configured.resolve()?;
        host_log::log(
            LogLevel::Info,
            &format!("{} configured splits", splits.len()),
        );
        self.unassigned.borrow_mut().extend(splits);
        Ok(())
    }

    fn handle_split_request(&self, subtask: u32, _hostname: Option<String>) -> Result<(), Error> {
        if !self.started.get() {
            return Err(Error::InvalidState(
                "split requested before start".to_owned(),
            ));
        }
        let next = self.unassigned.borrow_mut().next_split();
        match next {
            Some(split) => enumerator_context::assign_splits(&[(subtask, vec![to_wit(split)])]),
            None => enumerator_context::signal_no_more_splits(subtask),
        }
        Ok(())
    }

    fn add_splits_back(&self, splits: Vec<Split>, _subtask: u32) -> Result<(), Error> {
        let splits = splits.into_iter().map(from_wit).collect();
        self.unassigned.borrow_mut().add_back(splits);
        Ok(())
    }

    fn add_reader(&self, _subtask: u32) -> Result<(), Error> {
        // Nothing to do: splits are handed out on request, and the host
        // checks that every assignment names a registered reader.
        Ok(())
    }

    fn supports_batch_snapshot() -> bool {
        false
    }

    fn snapshot_state(&self, _checkpoint_id: i64) -> Result<Vec<u8>, Error> {
        Err(Error::Other(NOT_SUPPORTED.to_owned()))
    }

    fn unassigned_splits(&self) -> u64 {
        self.unassigned.borrow().len() as u64
    }
}

plugin_support::wit_split_conversions!(bindings::coordhost::plugin::types);

bindings::export!(Component with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn inline_splits_are_ordered_by_number_and_files_follow() {
        let configured = ConfiguredSplits::from_config(&cfg(&[
            ("split.10", "c"),
            ("split.2", "b\nb2"),
            ("other", "ignored"),
            ("files", " /a.txt, /b.txt ,"),
        ]))
        .unwrap();
        assert_eq!(
            configured.inline,
            [
                ("split.2".to_owned(), "b\nb2".to_owned()),
                ("split.10".to_owned(), "c".to_owned())
            ]
        );
        assert_eq!(configured.files, ["/a.txt", "/b.txt"]);
    }

    #[test]
    fn bad_configs_are_refused_with_the_key_named() {
        assert!(ConfiguredSplits::from_config(&cfg(&[])).is_err());
        assert!(ConfiguredSplits::from_config(&cfg(&[("split.x", "a")])).is_err());
        assert!(
            ConfiguredSplits::from_config(&cfg(&[("split.1", "a"), ("split.01", "b")])).is_err()
        );
        assert!(ConfiguredSplits::from_config(&cfg(&[("files", "rel.txt")])).is_err());
        assert!(ConfiguredSplits::from_config(&cfg(&[("files", "/a,/a")])).is_err());
    }

    #[test]
    fn unreadable_files_are_io_errors() {
        let configured =
            ConfiguredSplits::from_config(&cfg(&[("files", "/nonexistent/x")])).unwrap();
        assert!(matches!(configured.resolve(), Err(Error::Io(m)) if m.contains("/nonexistent/x")));
    }
}
