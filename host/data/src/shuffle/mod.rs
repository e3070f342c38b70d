//! Blocking result partitions on disk: the sort-merge format of FLIP-148
//! (one `data` file of CRC32C-framed Arrow IPC blocks and one `index` file
//! per result partition, as Spark's sort shuffle), the writer a producer
//! uses ([`PartitionWriter`]), the reader a consumer uses
//! ([`SubpartitionReader`]) and the routing of `hash` edges
//! ([`route_batch`], [`key_hash`]). The byte tables, the durability order
//! and what counts as corrupt are in docs/shuffle-format.md; the constants
//! are in [`mod@format`].
//!
//! A partition lives in the directory its shuffle descriptor names (the
//! shuffle master plugin decides it), so the writer and reader take a
//! [`PluginDir`](coordhost_io::grant::PluginDir) checked against the shuffle master's writable grants and
//! do every file operation through the grant's capability, never following
//! a symlink (`coordhost_io::grant`). A partition without `index` does not exist
//! ([`ShuffleError::PartitionNotFound`]), nor does one whose index names
//! another producer ([`PartitionProducer`]), records other bytes than its
//! producer reported, or does not match its `data` (a consumer opens it
//! bound to an [`ExpectedPartition`]); a damaged one is
//! [`ShuffleError::Corrupt`], and the scheduler re-runs its producer either
//! way (docs/recovery.md, "Damaged partitions").
//!
//! A shuffle master may also place a partition on object storage
//! (`s3://BUCKET/PREFIX`, inside its writable store grant): the same two
//! files as objects, staged locally and uploaded by an
//! [`ObjectPartitionWriter`], read by [`SubpartitionReader::open_object`]
//! (`objects`; docs/object-storage.md, "Result partitions on objects").

pub mod format;
mod objects;
mod reader;
mod route;
mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};

use coordhost_io::grant::GrantError;

pub use format::{DATA_FILE, INDEX_FILE, PartitionProducer};
pub use objects::{
    ObjectPartitionWriter, delete_object_partition, is_object_location, object_location,
};
pub use reader::{ExpectedPartition, RawRanges, SubpartitionReader};
pub use route::{key_hash, route_batch};
pub use writer::PartitionWriter;

/// Buffer size of the writer's and reader's file I/O, bytes.
pub const IO_BUFFER: usize = 64 * 1024;

/// Errors of partition I/O.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShuffleError {
    /// The partition has no `index` (or its directory or `data` is gone),
    /// or it is not the partition its consumer expects: its index names
    /// another producer or is of format version 1, records other bytes
    /// than the producer reported, or does not match its `data`.
    #[error("partition not found at {location}: {reason}")]
    PartitionNotFound {
        /// The partition's directory.
        location: PathBuf,
        /// Why: what is missing, or what differs.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The partition's directory is not one the host may use: outside the
    /// shuffle master's writable grants, or a symlink on the way
    /// (`coordhost_io::grant`). Names the plugin.
    #[error(transparent)]
    Grant(GrantError),
    /// A file of the partition is not in the format of
    /// docs/shuffle-format.md.
    #[error("{path}: corrupt result partition at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Offset of what is bad: a block in `data`, a field in `index`.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
    /// A batch cannot be encoded as Arrow IPC (or merged with the batches
    /// before it).
    #[error("{path}: cannot encode a batch: {source}")]
    Encode {
        /// The `data` file.
        path: PathBuf,
        /// The Arrow error.
        source: arrow_schema::ArrowError,
    },
}

fn grant_error(location: &Path, e: GrantError) -> ShuffleError {
    ShuffleError::Io {
        path: location.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
    }
}

/// Whether the partition at `location` exists: its `index` is a regular
/// file (not a symlink). Says nothing of damage, which the reader finds.
pub fn partition_exists(location: &Path) -> bool {
    std::fs::symlink_metadata(location.join(INDEX_FILE)).is_ok_and(|m| m.is_file())
}

/// Fsyncs a directory so renames and new entries in it are durable.
/// Best effort: some file systems refuse to open directories.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ignored = d.sync_all();
    }
}

#[cfg(test)]
mod tests;
