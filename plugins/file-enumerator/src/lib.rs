//! `file-enumerator`: a coordhost split enumerator (Flink's `SplitEnumerator`
//! of a `FileSource`, world `split-enumerator-plugin`) that cuts the files of
//! one directory into byte-range splits and hands them to readers one at a
//! time, with batch snapshots (FLIP-383 `SupportsBatchSnapshot`).
//!
//! # Config
//!
//! | key | meaning |
//! |---|---|
//! | `dir` | absolute path of the directory; the host grants it at the same path. Or (WIT 0.1.2) `s3://BUCKET/PREFIX`, a folder of object storage inside one of the plugin's store grants (`stores` in the job file): its objects are listed through the host's `object-store` import and cut into `file-range` splits whose path is the object's URL |
//! | `split-bytes` | split size in bytes, default 1048576 (1 MiB), at least 1 |
//! | `pattern` | optional file-name suffix filter, e.g. `.txt` |
//! | `row-groups-per-split` | optional, at least 1: cut files ending in `.parquet` at row-group boundaries, this many row groups per split |
//! | `partitions` | optional: the keys of Hive-style partition folders, in folder order, comma-separated (`l_shipyear` or `year,month`): the files are those under `dir/KEY1=V1/.../KEYN=VN/` |
//!
//! With `partitions`, the enumerator walks the folders `dir/K1=V1/.../KN=VN/`
//! (Hive's and Spark's layout, DataFusion's `table_partition_cols`) instead
//! of `dir` itself: every entry down to depth N must be a folder named
//! `KEY=VALUE` for the key of its level (a non-empty value; names starting
//! with `.` or `_`, such as `_SUCCESS`, are skipped as Hive and Spark skip
//! them), and the files are the regular files at depth N (a folder there is
//! skipped with a warning). Anything else fails `start` with one line naming
//! the folder or the file: a folder of another key or without `=`, a file
//! above depth N, a name that is not UTF-8. The split ids carry the path
//! relative to `dir` (`l_shipyear=1995/part-0.csv:0`), so files of the same
//! name in different folders stay apart. The host reads the values from each
//! split's path and checks them against the table's declared types
//! (docs/sql.md, "Partition folders").
//!
//! On `start` the enumerator lists `dir` (non-recursive, sorted by name,
//! hidden files and folders skipped; a FIFO, device or socket skipped with a
//! warning naming it, since the host would refuse to read it) and cuts each file into `file-range`
//! splits of `split-bytes` bytes with ids `"<file name>:<index>"`. With
//! `row-groups-per-split = K`, a file whose name ends in `.parquet` is cut
//! instead into splits of `K` whole row groups each, with ids
//! `"<file name>#rg<first>-<last>"` ([`parquet_splits`]): the enumerator
//! reads the file's footer (never its pages) through its granted directory.
//! Either way the host's `read-parquet` reads each row group once: the one
//! whose starting offset lies in the split's byte range.
//!
//! With `dir = "s3://BUCKET/PREFIX"` the enumerator lists the objects
//! directly under `PREFIX/` (not those of deeper folders; names starting
//! with `.` skipped; `pattern` applies) through `object-store.list-objects`,
//! pages of 1000, sorted by key, and cuts each into byte ranges as a file;
//! ids are `"<object name>:<index>"`. The plugin holds no credentials: the
//! host lists with its own, only inside the plugin's grants, and reads the
//! splits the same way. A `.parquet` object's footer is read the same way
//! (ranged gets of its two ends and its footer, never its pages), so
//! `row-groups-per-split` works on objects as on files; `partitions` is
//! not offered for objects yet.
//!
//! # Snapshot format
//!
//! Byte 0 is the format version, [`SNAPSHOT_VERSION`] (1). The rest is the
//! `postcard` encoding of [`EnumeratorState`]: the flag `started` (whether the
//! directory was listed) followed by the queue of unassigned splits, front
//! first. Assigned splits are the host's to remember; it gives them back with
//! `add-splits-back` when their subtask is reset. An enumerator restored from
//! a started snapshot does not list the directory again.

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "split-enumerator-plugin",
    });
}

use bindings::coordhost::plugin::types::{Error, LogLevel, Split};
use bindings::coordhost::plugin::{enumerator_context, host_log};
use bindings::exports::coordhost::plugin::split_enumerator::{Enumerator, Guest, GuestEnumerator};
use plugin_support::config;
use plugin_support::splits::{PendingSplit, SplitQueue, file_range_splits};
use serde::{Deserialize, Serialize};
use std::cell::{Cell, RefCell};

pub mod parquet_splits;

/// Version byte that opens every snapshot this enumerator writes.
pub const SNAPSHOT_VERSION: u8 = 1;

/// Split size when the config has no `split-bytes`: 1 MiB.
pub const DEFAULT_SPLIT_BYTES: u64 = 1_048_576;

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    type Enumerator = FileEnumerator;
}

/// What the config says.
#[derive(Debug, Clone)]
struct Settings {
    dir: String,
    split_bytes: u64,
    pattern: Option<String>,
    /// `row-groups-per-split`: cut `.parquet` files at row-group boundaries.
    row_groups_per_split: Option<u64>,
    /// `partitions`: the keys of the partition folders, in folder order
    /// (empty: the files of `dir` itself).
    partitions: Vec<String>,
}

impl Settings {
    fn from_config(config: &[(String, String)]) -> Result<Self, Error> {
        config::only_keys(
            config,
            &[
                "dir",
                "split-bytes",
                "pattern",
                "row-groups-per-split",
                "partitions",
            ],
        )
        .map_err(Error::InvalidConfig)?;
        let dir = match config::value(config, "dir") {
            Some(url) if url.starts_with("s3://") => url.trim_end_matches('/').to_owned(),
            _ => config::absolute_path(config, "dir").map_err(Error::InvalidConfig)?,
        };
        let split_bytes = config::parsed_or(config, "split-bytes", DEFAULT_SPLIT_BYTES)
            .map_err(Error::InvalidConfig)?;
        if split_bytes == 0 {
            return Err(Error::InvalidConfig(
                "config key `split-bytes` must be at least 1".to_owned(),
            ));
        }
        let pattern = config::value(config, "pattern").map(str::to_owned);
        let row_groups_per_split = match config::value(config, "row-groups-per-split") {
            None => None,
            Some(_) => {
                let k: u64 = config::parsed_or(config, "row-groups-per-split", 0)
                    .map_err(Error::InvalidConfig)?;
                if k == 0 {
                    return Err(Error::InvalidConfig(
                        "config key `row-groups-per-split` must be at least 1".to_owned(),
                    ));
                }
                Some(k)
            }
        };
        let partitions = match config::value(config, "partitions") {
            None => Vec::new(),
            Some(keys) => {
                let keys: Vec<String> = keys.split(',').map(|k| k.trim().to_owned()).collect();
                for key in &keys {
                    if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        return Err(Error::InvalidConfig(format!(
                            "config key `partitions`: `{key}` is not a partition key (letters, digits and `_`; several keys separated by `,`)"
                        )));
                    }
                }
                keys
            }
        };
        if dir.starts_with("s3://") && !partitions.is_empty() {
            return Err(Error::InvalidConfig(
                "config key `partitions` is not offered for an s3:// `dir` yet".to_owned(),
            ));
        }
        Ok(Self {
            dir,
            split_bytes,
            pattern,
            row_groups_per_split,
            partitions,
        })
    }
}

/// The state a batch snapshot holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnumeratorState {
    /// Whether the directory was listed; a restored enumerator that was
    /// started does not list it again.
    pub started: bool,
    /// Splits not yet assigned, front first.
    pub unassigned: SplitQueue,
}

impl EnumeratorState {
    /// Encodes the state in the snapshot format described in the crate docs.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut bytes = vec![SNAPSHOT_VERSION];
        let body = postcard::to_allocvec(self).map_err(|e| format!("cannot encode state: {e}"))?;
        bytes.extend_from_slice(&body);
        Ok(bytes)
    }

    /// Decodes bytes that [`EnumeratorState::encode`] wrote.
    ///
    /// # Errors
    ///
    /// A message for `error::corrupt-snapshot`: empty input, an unknown
    /// version, a bad body, or trailing bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let (&version, body) = bytes
            .split_first()
            .ok_or_else(|| "snapshot is empty".to_owned())?;
        if version != SNAPSHOT_VERSION {
            return Err(format!(
                "snapshot format version {version} is not supported (expected {SNAPSHOT_VERSION})"
            ));
        }
        let (state, rest) = postcard::take_from_bytes::<Self>(body)
            .map_err(|e| format!("snapshot body does not decode: {e}"))?;
        if !rest.is_empty() {
            return Err(format!("snapshot has {} trailing bytes", rest.len()));
        }
        Ok(state)
    }
}

/// One enumerator instance (one per source job vertex).
pub struct FileEnumerator {
    settings: Settings,
    state: RefCell<EnumeratorState>,
    /// Whether `start` was called on this instance (not part of snapshots).
    start_called: Cell<bool>,
}

impl FileEnumerator {
    fn new(settings: Settings, state: EnumeratorState) -> Self {
        Self {
            settings,
            state: RefCell::new(state),
            start_called: Cell::new(false),
        }
    }

    /// The files of the partition folders under `dir` (see the crate
    /// docs), each as (path relative to `dir`, path, length), at depth
    /// `depth` of the keys, below the folder `rel` (relative to `dir`).
    fn walk_partitions(
        &self,
        rel: &str,
        depth: usize,
        files: &mut Vec<(String, String, u64)>,
    ) -> Result<(), Error> {
        let root = self.settings.dir.trim_end_matches('/');
        let dir = if rel.is_empty() {
            root.to_owned()
        } else {
            format!("{root}/{rel}")
        };
        let keys = &self.settings.partitions;
        let entries = std::fs::read_dir(&dir)
            .map_err(|e| Error::Io(format!("cannot list directory {dir}: {e}")))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::Io(format!("cannot list directory {dir}: {e}")))?;
            let name = entry.file_name().into_string().map_err(|name| {
                Error::Other(format!(
                    "{dir}: the name {name:?} is not UTF-8: a partition folder is `KEY=VALUE`"
                ))
            })?;
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            names.push(name);
        }
        names.sort();
        for name in names {
            let path = format!("{dir}/{name}");
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let metadata = std::fs::metadata(&path)
                .map_err(|e| Error::Io(format!("cannot read metadata of {path}: {e}")))?;
            if let Some(key) = keys.get(depth) {
                let wanted = keys
                    .iter()
                    .map(|k| format!("{k}=VALUE"))
                    .collect::<Vec<_>>()
                    .join("/");
                if !metadata.is_dir() {
                    return Err(Error::Other(format!(
                        "{path} lies above the partition folders: under {root} the files lie in folders {wanted} (config key `partitions`)"
                    )));
                }
                match name.split_once('=') {
                    Some((k, v)) if k == key && !v.is_empty() => {}
                    _ => {
                        return Err(Error::Other(format!(
                            "folder {path} is not `{key}=VALUE`: under {root} the files lie in folders {wanted} (config key `partitions`)"
                        )));
                    }
                }
                self.walk_partitions(&child, depth + 1, files)?;
            } else if metadata.is_file() {
                if let Some(pattern) = &self.settings.pattern
                    && !name.ends_with(pattern.as_str())
                {
                    continue;
                }
                files.push((child, path, metadata.len()));
            } else if metadata.is_dir() {
                log(
                    LogLevel::Warn,
                    &format!("skipping folder {path}: it lies below the last partition folder"),
                );
            } else {
                log(
                    LogLevel::Warn,
                    &format!("skipping {path}: it is not a regular file"),
                );
            }
        }
        Ok(())
    }

    /// Lists the directory (or its partition folders) and cuts its files
    /// into splits.
    fn discover_splits(&self) -> Result<Vec<PendingSplit>, Error> {
        let dir = &self.settings.dir;
        let files = if dir.starts_with("s3://") {
            self.list_objects()?
        } else if self.settings.partitions.is_empty() {
            self.list_dir()?
        } else {
            let mut files = Vec::new();
            self.walk_partitions("", 0, &mut files)?;
            files
        };
        self.cut(dir, &files)
    }

    /// The files of `dir` itself: (name, path, length), sorted by name.
    fn list_dir(&self) -> Result<Vec<(String, String, u64)>, Error> {
        let dir = &self.settings.dir;
        let entries = std::fs::read_dir(dir)
            .map_err(|e| Error::Io(format!("cannot list directory {dir}: {e}")))?;
        let mut files = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| Error::Io(format!("cannot list directory {dir}: {e}")))?;
            let Ok(name) = entry.file_name().into_string() else {
                log(
                    LogLevel::Warn,
                    &format!("skipping a file in {dir} whose name is not UTF-8"),
                );
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            if let Some(pattern) = &self.settings.pattern
                && !name.ends_with(pattern.as_str())
            {
                continue;
            }
            let path = format!("{}/{name}", dir.trim_end_matches('/'));
            let metadata = std::fs::metadata(&path)
                .map_err(|e| Error::Io(format!("cannot read metadata of {path}: {e}")))?;
            if metadata.is_file() {
                files.push((name, path, metadata.len()));
            } else if !metadata.is_dir() {
                // A FIFO, a device or a socket: no split (the host would
                // refuse to read it anyway), and the user hears why.
                log(
                    LogLevel::Warn,
                    &format!("skipping {path}: it is not a regular file"),
                );
            }
        }
        files.sort();
        Ok(files)
    }

    /// The objects directly under the folder `dir` (an `s3://` URL), as
    /// (name, URL, size), sorted by name, listed through the host.
    fn list_objects(&self) -> Result<Vec<(String, String, u64)>, Error> {
        use bindings::coordhost::plugin::object_store::{self as store, StoreError};
        let dir = &self.settings.dir;
        let folder = format!("{dir}/");
        let mut files = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = store::list_objects(dir, after.as_deref(), 1000).map_err(|e| {
                let message = match e {
                    StoreError::InvalidUrl(m)
                    | StoreError::NotGranted(m)
                    | StoreError::ReadOnly(m)
                    | StoreError::NotFound(m)
                    | StoreError::TooLarge(m)
                    | StoreError::Timeout(m)
                    | StoreError::Unavailable(m) => m,
                };
                Error::Io(format!("cannot list {dir}: {message}"))
            })?;
            let full = page.len() == 1000;
            after = page.last().map(|m| m.url.clone());
            for meta in page {
                let Some(name) = meta.url.strip_prefix(&folder) else {
                    continue;
                };
                if name.contains('/') || name.starts_with('.') {
                    continue;
                }
                if let Some(pattern) = &self.settings.pattern
                    && !name.ends_with(pattern.as_str())
                {
                    continue;
                }
                files.push((name.to_owned(), meta.url.clone(), meta.size));
            }
            if !full {
                break;
            }
        }
        files.sort();
        Ok(files)
    }

    /// Cuts `files` (name relative to `dir` — the split id's prefix —,
    /// path, length) into splits.
    fn cut(&self, dir: &str, files: &[(String, String, u64)]) -> Result<Vec<PendingSplit>, Error> {
        let mut splits = Vec::new();
        for (name, path, len) in files {
            match self.settings.row_groups_per_split {
                Some(k) if name.ends_with(".parquet") => {
                    let starts = row_group_starts(path, *len)?;
                    splits.extend(parquet_splits::row_group_splits(
                        path, name, *len, &starts, k,
                    ));
                }
                _ => {
                    // A `.parquet` file cut by bytes is still checked: a
                    // 0-byte file or a footer whose row groups start past
                    // its end would otherwise give no rows, silently.
                    if name.ends_with(".parquet") {
                        row_group_starts(path, *len)?;
                    }
                    splits.extend(file_range_splits(
                        path,
                        name,
                        *len,
                        self.settings.split_bytes,
                    ));
                }
            }
        }
        log(
            LogLevel::Info,
            &format!(
                "listed {} files in {dir}: {} splits",
                files.len(),
                splits.len()
            ),
        );
        Ok(splits)
    }
}

/// The row groups' starting offsets of the Parquet file or object `path`
/// (`s3://…`: its footer read through the host's `object-store.get-range`,
/// inside the plugin's grants).
fn row_group_starts(path: &str, len: u64) -> Result<Vec<u64>, Error> {
    if !path.starts_with("s3://") {
        return parquet_splits::row_group_starts(path, len).map_err(Error::Io);
    }
    parquet_splits::row_group_starts_with(path, len, |offset, length| {
        use bindings::coordhost::plugin::object_store::{self as store, StoreError};
        // The host moves at most 16 MiB per call.
        const MOST: u64 = 16 << 20;
        let mut bytes = Vec::new();
        while (bytes.len() as u64) < length {
            let at = offset + bytes.len() as u64;
            let want = (length - bytes.len() as u64).min(MOST);
            let chunk = store::get_range(path, at, want).map_err(|e| match e {
                StoreError::InvalidUrl(m)
                | StoreError::NotGranted(m)
                | StoreError::ReadOnly(m)
                | StoreError::NotFound(m)
                | StoreError::TooLarge(m)
                | StoreError::Timeout(m)
                | StoreError::Unavailable(m) => format!("cannot read {path}: {m}"),
            })?;
            if chunk.is_empty() {
                // Shorter than its listing said: cut since, or replaced.
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    })
    .map_err(Error::Io)
}

impl GuestEnumerator for FileEnumerator {
    fn create(config: Vec<(String, String)>, _parallelism: u32) -> Result<Enumerator, Error> {
        let settings = Settings::from_config(&config)?;
        // Checked here, not first at `start`: a `create` refusal is bad
        // input (exit 2, nothing run), a `start` failure a failed job.
        if settings.dir.starts_with("s3://") {
            // Without a request: the folder must lie inside a grant.
            use bindings::coordhost::plugin::object_store;
            let grants = object_store::grants();
            let inside = grants
                .iter()
                .any(|g| settings.dir == g.url || settings.dir.starts_with(&format!("{}/", g.url)));
            if !inside {
                let listed: Vec<String> = grants.into_iter().map(|g| g.url).collect();
                return Err(Error::InvalidConfig(format!(
                    "config key `dir`: {} lies inside no store granted to the plugin ({}); grant it with `stores = [{{ url = \"...\" }}]`",
                    settings.dir,
                    if listed.is_empty() {
                        "none".to_owned()
                    } else {
                        listed.join(", ")
                    }
                )));
            }
            return Ok(Enumerator::new(Self::new(
                settings,
                EnumeratorState::default(),
            )));
        }
        match std::fs::metadata(&settings.dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::InvalidConfig(format!(
                    "config key `dir`: {} is not a directory",
                    settings.dir
                )));
            }
            Err(e) => {
                return Err(Error::InvalidConfig(format!(
                    "config key `dir`: {} cannot be read: {}",
                    settings.dir,
                    e.kind()
                )));
            }
        }
        Ok(Enumerator::new(Self::new(
            settings,
            EnumeratorState::default(),
        )))
    }

    fn restore(
        config: Vec<(String, String)>,
        _parallelism: u32,
        snapshot: Vec<u8>,
    ) -> Result<Enumerator, Error> {
        let settings = Settings::from_config(&config)?;
        let state = EnumeratorState::decode(&snapshot).map_err(Error::CorruptSnapshot)?;
        log(
            LogLevel::Info,
            &format!(
                "restored: {} unassigned splits, started = {}",
                state.unassigned.len(),
                state.started
            ),
        );
        Ok(Enumerator::new(Self::new(settings, state)))
    }

    fn start(&self) -> Result<(), Error> {
        if self.start_called.replace(true) {
            return Err(Error::InvalidState("start was already called".to_owned()));
        }
        if self.state.borrow().started {
            // Restored from a snapshot taken after the listing: the queue is
            // authoritative; listing again would hand out splits twice.
            return Ok(());
        }
        let splits = self.discover_splits()?;
        let mut state = self.state.borrow_mut();
        state.unassigned.extend(splits);
        state.started = true;
        Ok(())
    }

    fn handle_split_request(&self, subtask: u32, _hostname: Option<String>) -> Result<(), Error> {
        if !self.start_called.get() {
            return Err(Error::InvalidState(
                "split requested before start".to_owned(),
            ));
        }
        let next = self.state.borrow_mut().unassigned.next_split();
        match next {
            Some(split) => enumerator_context::assign_splits(&[(subtask, vec![to_wit(split)])]),
            None => enumerator_context::signal_no_more_splits(subtask),
        }
        Ok(())
    }

    fn add_splits_back(&self, splits: Vec<Split>, subtask: u32) -> Result<(), Error> {
        log(
            LogLevel::Debug,
            &format!("{} splits of subtask {subtask} came back", splits.len()),
        );
        let splits = splits.into_iter().map(from_wit).collect();
        self.state.borrow_mut().unassigned.add_back(splits);
        Ok(())
    }

    fn add_reader(&self, _subtask: u32) -> Result<(), Error> {
        // Nothing to do: splits are handed out on request, and the host
        // checks that every assignment names a registered reader.
        Ok(())
    }

    fn supports_batch_snapshot() -> bool {
        true
    }

    fn snapshot_state(&self, _checkpoint_id: i64) -> Result<Vec<u8>, Error> {
        self.state.borrow().encode().map_err(Error::Other)
    }

    fn unassigned_splits(&self) -> u64 {
        self.state.borrow().unassigned.len() as u64
    }
}

fn log(level: LogLevel, message: &str) {
    host_log::log(level, message);
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
    fn row_groups_per_split_is_optional_and_at_least_one() {
        let plain = Settings::from_config(&cfg(&[("dir", "/d")])).unwrap();
        assert_eq!(plain.row_groups_per_split, None);
        let four = Settings::from_config(&cfg(&[("dir", "/d"), ("row-groups-per-split", "4")]));
        assert_eq!(four.unwrap().row_groups_per_split, Some(4));
        for bad in ["0", "x", "-1"] {
            let err = Settings::from_config(&cfg(&[("dir", "/d"), ("row-groups-per-split", bad)]))
                .expect_err("refused");
            assert!(
                matches!(&err, Error::InvalidConfig(m) if m.contains("row-groups-per-split")),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn partitions_are_keys_in_folder_order() {
        let plain = Settings::from_config(&cfg(&[("dir", "/d")])).unwrap();
        assert!(plain.partitions.is_empty());
        let two = Settings::from_config(&cfg(&[("dir", "/d"), ("partitions", "year, month")]));
        assert_eq!(two.unwrap().partitions, ["year", "month"]);
        for bad in ["", "year,", "a=b", "x/y"] {
            let err = Settings::from_config(&cfg(&[("dir", "/d"), ("partitions", bad)]))
                .expect_err("refused");
            assert!(
                matches!(&err, Error::InvalidConfig(m) if m.contains("`partitions`")),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn snapshots_round_trip_and_bad_bytes_are_refused() {
        let mut state = EnumeratorState {
            started: true,
            unassigned: SplitQueue::new(),
        };
        state
            .unassigned
            .extend(file_range_splits("/d/a.txt", "a.txt", 10, 4));
        let bytes = state.encode().unwrap();
        assert_eq!(bytes[0], SNAPSHOT_VERSION);
        assert_eq!(EnumeratorState::decode(&bytes).unwrap(), state);
        assert!(EnumeratorState::decode(&[]).is_err());
        assert!(EnumeratorState::decode(&[9, 1, 0]).is_err());
        assert!(EnumeratorState::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(EnumeratorState::decode(&longer).is_err());
    }
}
