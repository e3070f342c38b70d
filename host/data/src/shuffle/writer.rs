//! [`PartitionWriter`]: a result partition written as one `data` file and
//! one `index` file, through a bounded in-memory buffer that spills regions
//! (FLIP-148's sort-merge blocking shuffle; docs/shuffle-format.md).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_select::concat::concat_batches;
use cap_std::fs::Dir;

use super::format::{
    BLOCK_ROWS, DATA_FILE, Entry, FORMAT_VERSION, INDEX_FILE, INDEX_TMP_FILE, Index,
    PartitionProducer, SPILL_BYTES, encode_block, headers_crc, same_schema,
};
use super::{IO_BUFFER, ShuffleError, grant_error};
use coordhost_io::grant::{self, PluginDir};

/// Writes one result partition. Batches of each subpartition are kept in
/// memory until [`PartitionWriter::spill_bytes`] of them are buffered; the
/// buffer is then written to `data` as one region, subpartitions in
/// order, and the writer goes on. [`PartitionWriter::finish`] spills the
/// last region, makes `data` durable, then writes `index`.
#[derive(Debug)]
pub struct PartitionWriter {
    location: PathBuf,
    /// The partition's directory, opened without following symlinks.
    dir: Dir,
    data: BufWriter<File>,
    data_len: u64,
    num_subpartitions: u32,
    /// Who writes it: named in the index (format version 2).
    producer: PartitionProducer,
    /// Per subpartition: batches not yet spilled, in the order written.
    pending: Vec<Vec<RecordBatch>>,
    /// Memory of the pending batches (their slices), bytes.
    pending_bytes: usize,
    spill_bytes: usize,
    regions: Vec<Vec<Entry>>,
    /// Encoded blocks of the subpartition being spilled (reused).
    scratch: Vec<u8>,
}

impl PartitionWriter {
    /// Creates `location` (and parents) afresh, removing what an earlier
    /// try left there, and opens its `data` file. For a directory the host
    /// chose itself; a location a shuffle master returned goes through
    /// [`PartitionWriter::create_in`]. `producer` is named in the index.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Io`] if the directory or the file cannot be created.
    pub fn create(
        location: &Path,
        num_subpartitions: u32,
        producer: PartitionProducer,
    ) -> Result<Self, ShuffleError> {
        // The host chose the path: its parents are made as needed.
        if let Some(parent) = location.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| ShuffleError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let dir = PluginDir::host_chosen(location).map_err(|e| grant_error(location, e))?;
        Self::create_in(&dir, num_subpartitions, producer)
    }

    /// As [`PartitionWriter::create`], for a directory inside a shuffle
    /// master's writable grant: every file operation goes through the
    /// grant's capability and never follows a symlink (`coordhost_io::grant`).
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Grant`] if the directory cannot be created there
    /// (e.g. a symlink on the way); [`ShuffleError::Io`] for the file.
    pub fn create_in(
        location: &PluginDir,
        num_subpartitions: u32,
        producer: PartitionProducer,
    ) -> Result<Self, ShuffleError> {
        let dir = location.create_fresh().map_err(ShuffleError::Grant)?;
        let location = location.path().to_path_buf();
        let data = grant::create_new_file(&dir, DATA_FILE).map_err(|source| ShuffleError::Io {
            path: location.join(DATA_FILE),
            source,
        })?;
        Ok(Self {
            location,
            dir,
            data: BufWriter::with_capacity(IO_BUFFER, data),
            data_len: 0,
            num_subpartitions,
            producer,
            pending: vec![Vec::new(); num_subpartitions as usize],
            pending_bytes: 0,
            spill_bytes: SPILL_BYTES,
            regions: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// Sets the bound of the in-memory buffer (default [`SPILL_BYTES`]):
    /// a region is spilled once the buffered batches take this many bytes.
    #[must_use]
    pub fn with_spill_bytes(mut self, bytes: usize) -> Self {
        self.spill_bytes = bytes;
        self
    }

    /// The bound of the in-memory buffer, bytes.
    pub fn spill_bytes(&self) -> usize {
        self.spill_bytes
    }

    /// Number of subpartitions.
    pub fn num_subpartitions(&self) -> u32 {
        self.num_subpartitions
    }

    /// Appends `batch` to subpartition `sub`. A batch without rows is
    /// dropped. The batch is kept (its buffers are shared, not copied)
    /// until the next region is spilled.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Io`] or [`ShuffleError::Encode`] if the buffer was
    /// full and spilling it failed.
    ///
    /// # Panics
    ///
    /// If `sub` is not below [`PartitionWriter::num_subpartitions`].
    pub fn write_batch(&mut self, sub: u32, batch: &RecordBatch) -> Result<(), ShuffleError> {
        assert!(
            sub < self.num_subpartitions,
            "subpartition {sub} of {}",
            self.num_subpartitions
        );
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.pending_bytes += slice_bytes(batch);
        self.pending[sub as usize].push(batch.clone());
        if self.pending_bytes >= self.spill_bytes {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes the buffered batches as one region: subpartitions in order,
    /// consecutive batches of the same schema merged into blocks of up to
    /// [`BLOCK_ROWS`] rows.
    fn spill(&mut self) -> Result<(), ShuffleError> {
        if self.pending_bytes == 0 && self.pending.iter().all(Vec::is_empty) {
            return Ok(());
        }
        let mut region = Vec::new();
        for sub in 0..self.num_subpartitions {
            let batches = std::mem::take(&mut self.pending[sub as usize]);
            if batches.is_empty() {
                continue;
            }
            self.scratch.clear();
            let mut group: Vec<RecordBatch> = Vec::new();
            let mut rows = 0;
            let records: usize = batches.iter().map(RecordBatch::num_rows).sum();
            for b in batches {
                let fits = group
                    .last()
                    .is_some_and(|g| same_schema(g, &b) && rows + b.num_rows() <= BLOCK_ROWS);
                if !group.is_empty() && !fits {
                    self.encode_group(&group)?;
                    group.clear();
                    rows = 0;
                }
                rows += b.num_rows();
                group.push(b);
            }
            self.encode_group(&group)?;
            let len = self.scratch.len() as u64;
            self.data
                .write_all(&self.scratch)
                .map_err(|source| ShuffleError::Io {
                    path: self.location.join(DATA_FILE),
                    source,
                })?;
            region.push(Entry {
                sub,
                offset: self.data_len,
                len,
                records: records as u64,
                headers_crc: headers_crc(&self.scratch),
            });
            self.data_len += len;
        }
        self.pending_bytes = 0;
        self.regions.push(region);
        Ok(())
    }

    /// Encodes `group` (batches of one schema) as one block into `scratch`.
    fn encode_group(&mut self, group: &[RecordBatch]) -> Result<(), ShuffleError> {
        let encode = |e| ShuffleError::Encode {
            path: self.location.join(DATA_FILE),
            source: e,
        };
        match group {
            [] => Ok(()),
            [one] => encode_block(one, &mut self.scratch).map_err(encode),
            many => {
                let merged = concat_batches(&many[0].schema(), many).map_err(encode)?;
                encode_block(&merged, &mut self.scratch).map_err(encode)
            }
        }
    }

    /// Spills the last region, flushes and fsyncs `data`, writes the index
    /// as `index.tmp`, fsyncs it, renames it to `index` and fsyncs the
    /// directory (docs/shuffle-format.md, "Writing"). Returns the bytes of
    /// each subpartition: the sum of its entries' lengths, 0 when empty.
    ///
    /// # Errors
    ///
    /// [`ShuffleError::Io`] if a write, sync or the rename fails;
    /// [`ShuffleError::Encode`] if a batch cannot be encoded.
    pub fn finish(mut self) -> Result<Vec<u64>, ShuffleError> {
        self.spill()?;
        let data_path = self.location.join(DATA_FILE);
        let data = self.data.into_inner().map_err(|e| ShuffleError::Io {
            path: data_path.clone(),
            source: e.into_error(),
        })?;
        data.sync_data().map_err(|source| ShuffleError::Io {
            path: data_path,
            source,
        })?;
        let index = Index {
            version: FORMAT_VERSION,
            num_subpartitions: self.num_subpartitions,
            data_len: self.data_len,
            producer: Some(self.producer),
            regions: self.regions,
        };
        let tmp_path = self.location.join(INDEX_TMP_FILE);
        let io = |path: &PathBuf| {
            let path = path.clone();
            move |source| ShuffleError::Io { path, source }
        };
        let mut tmp = grant::create_new_file(&self.dir, INDEX_TMP_FILE).map_err(io(&tmp_path))?;
        tmp.write_all(&index.encode())
            .and_then(|()| tmp.sync_all())
            .map_err(io(&tmp_path))?;
        drop(tmp);
        self.dir
            .rename(INDEX_TMP_FILE, &self.dir, INDEX_FILE)
            .map_err(io(&self.location.join(INDEX_FILE)))?;
        // Best effort, as the sink's: a rename lost with the machine
        // leaves no `index`, and the partition counts as missing.
        let _ignored = grant::sync_opened_dir(&self.dir);
        Ok(index.bytes_per_subpartition())
    }
}

/// Memory of `batch`'s rows (of its slice, not the whole buffers a slice
/// shares), bytes.
fn slice_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| {
            let data = c.to_data();
            data.get_slice_memory_size()
                .unwrap_or_else(|_| data.get_buffer_memory_size())
        })
        .sum()
}
