//! Result partitions on object storage (issue 30, the `object-shuffle`
//! shuffle master): the same two files as a partition on disk
//! (docs/shuffle-format.md), as the objects `<url>/data` and `<url>/index`
//! under a prefix the shuffle master placed the partition at, inside its
//! writable store grant. A partition there outlives the process that wrote
//! it, so a lost worker costs no re-run of what it finished, and a
//! coordinator on another host finds what a crashed one recorded.
//!
//! Writing ([`ObjectPartitionWriter`]): the producer writes the partition
//! to a local staging folder with the ordinary [`PartitionWriter`], then
//! uploads `data` (a multipart upload above 8 MiB) and only after it
//! `index`: as on disk, the index's existence means "complete". An object
//! is replaced whole by a PUT, never seen half written. Store failures that
//! may pass are retried for [`coordhost_io::objstore::DEFAULT_WRITE_RETRY`], as
//! the event log's and a sink's writes are. Reading is
//! [`super::SubpartitionReader::open_object`], with every check of a
//! partition on disk.

use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;

use super::format::{DATA_FILE, INDEX_FILE, PartitionProducer};
use super::{PartitionWriter, ShuffleError};
use coordhost_io::objstore::ObjectUrlPath as _;
use coordhost_io::objstore::{self, DEFAULT_WRITE_RETRY, ObjectUrl, Upload};

/// `name` below the partition prefix `url`.
pub fn child(url: &ObjectUrl, name: &str) -> ObjectUrl {
    ObjectUrl {
        bucket: url.bucket.clone(),
        key: format!("{}/{name}", url.key),
    }
}

/// The partition place `location` names when it is an object storage
/// prefix (`s3://BUCKET/PREFIX`, as a shuffle master's descriptor and the
/// event log give it): `None` for a directory, the parse error for an
/// `s3://` text that is not a plain URL.
///
/// # Errors
/// A sentence naming the location, from [`ObjectUrl::parse`].
pub fn object_location(location: &Path) -> Option<Result<ObjectUrl, String>> {
    let text = location.to_str()?;
    objstore::is_object_url(text).then(|| ObjectUrl::parse(text, false))
}

/// Whether `location` is a place on object storage (not a directory).
pub fn is_object_location(location: &Path) -> bool {
    location.to_str().is_some_and(objstore::is_object_url)
}

/// An I/O error of the store on `object`, as the one line the store's
/// other writers give.
fn store_failed(object: &ObjectUrl, line: String) -> ShuffleError {
    ShuffleError::Io {
        path: PathBuf::from(object.to_string()),
        source: std::io::Error::other(format!("object store {}: {line}", objstore::endpoint())),
    }
}

/// Uploads the local file `file` as `object`, retrying store failures
/// that may pass.
fn upload_file(file: &Path, object: &ObjectUrl) -> Result<(), ShuffleError> {
    let size = std::fs::metadata(file)
        .map_err(|source| ShuffleError::Io {
            path: file.to_path_buf(),
            source,
        })?
        .len();
    let store = objstore::client(&object.bucket).map_err(|l| store_failed(object, l))?;
    let path = object.path();
    let local = file.to_path_buf();
    let what = format!("writing {object}");
    let answer = objstore::block(
        async move {
            objstore::retrying(DEFAULT_WRITE_RETRY, &what, move || {
                let (store, path, local) = (store.clone(), path.clone(), local.clone());
                async move {
                    match objstore::upload(store, path, local, size).await {
                        Ok(()) => Ok(Ok(())),
                        Err(Upload::Read(e)) => Ok(Err(e)),
                        Err(Upload::Store(e)) => Err(e),
                    }
                }
            })
            .await
        },
        None,
    )
    .map_err(|b| store_failed(object, format!("{b:?}")))?;
    match answer {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(ShuffleError::Io {
            path: file.to_path_buf(),
            source,
        }),
        Err(failure) => Err(store_failed(
            object,
            format!(
                "writing {object}: {}",
                failure.describe(DEFAULT_WRITE_RETRY, "a partition's writes", None)
            ),
        )),
    }
}

/// Deletes the objects of the partition at `url`, `index` first (so it
/// stops counting as complete before its data goes). Used when the host
/// releases a partition; a missing object is no error.
///
/// # Errors
/// [`ShuffleError::Io`] naming the object when the store fails.
pub fn delete_object_partition(url: &ObjectUrl) -> Result<(), ShuffleError> {
    for name in [INDEX_FILE, DATA_FILE] {
        let object = child(url, name);
        let store = objstore::client(&object.bucket).map_err(|l| store_failed(&object, l))?;
        let path = object.path();
        let what = format!("deleting {object}");
        let answer = objstore::block(
            async move {
                objstore::retrying(DEFAULT_WRITE_RETRY, &what, move || {
                    let (store, path) = (store.clone(), path.clone());
                    async move {
                        use object_store::ObjectStoreExt as _;
                        match store.delete(&path).await {
                            Err(object_store::Error::NotFound { .. }) => Ok(()),
                            other => other,
                        }
                    }
                })
                .await
            },
            None,
        )
        .map_err(|b| store_failed(&object, format!("{b:?}")))?;
        answer.map_err(|failure| {
            store_failed(
                &object,
                failure.describe(DEFAULT_WRITE_RETRY, "a partition's writes", None),
            )
        })?;
    }
    Ok(())
}

/// Writes one result partition to object storage: staged locally, then
/// uploaded by [`ObjectPartitionWriter::finish`]. The staging folder is
/// removed when the writer is dropped, finished or not.
#[derive(Debug)]
pub struct ObjectPartitionWriter {
    url: ObjectUrl,
    staging: PathBuf,
    writer: Option<PartitionWriter>,
}

impl ObjectPartitionWriter {
    /// A writer of the partition at `url`, staged in the local folder
    /// `staging` (created afresh; a folder the host chose).
    ///
    /// # Errors
    /// [`ShuffleError::Io`] if the staging folder cannot be made.
    pub fn create(
        url: ObjectUrl,
        staging: &Path,
        num_subpartitions: u32,
        producer: PartitionProducer,
    ) -> Result<Self, ShuffleError> {
        let writer = PartitionWriter::create(staging, num_subpartitions, producer)?;
        Ok(Self {
            url,
            staging: staging.to_path_buf(),
            writer: Some(writer),
        })
    }

    /// As [`PartitionWriter::write_batch`].
    ///
    /// # Errors
    /// As [`PartitionWriter::write_batch`].
    pub fn write_batch(&mut self, sub: u32, batch: &RecordBatch) -> Result<(), ShuffleError> {
        match self.writer.as_mut() {
            Some(w) => w.write_batch(sub, batch),
            None => Ok(()),
        }
    }

    /// Finishes the staged partition, uploads `data` and then `index`, and
    /// returns the bytes of each subpartition.
    ///
    /// # Errors
    /// As [`PartitionWriter::finish`]; [`ShuffleError::Io`] naming the
    /// object when the store refuses or keeps failing past the retries.
    pub fn finish(mut self) -> Result<Vec<u64>, ShuffleError> {
        let Some(writer) = self.writer.take() else {
            return Ok(Vec::new());
        };
        let bytes = writer.finish()?;
        upload_file(&self.staging.join(DATA_FILE), &child(&self.url, DATA_FILE))?;
        upload_file(
            &self.staging.join(INDEX_FILE),
            &child(&self.url, INDEX_FILE),
        )?;
        Ok(bytes)
    }
}

impl Drop for ObjectPartitionWriter {
    fn drop(&mut self) {
        drop(self.writer.take());
        let _ignored = std::fs::remove_dir_all(&self.staging);
    }
}
