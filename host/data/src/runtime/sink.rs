//! Exactly-once sink output: a staging file per (subtask, attempt), published
//! by an atomic rename to a name that depends only on the subtask, and the
//! job's `_SUCCESS` marker written last.
//!
//! Layout of a sink folder:
//!
//! | path | written by |
//! |---|---|
//! | `_staging/part-<subtask>-attempt-<attempt>.<ext>` | the sink task, fsynced before it reports finished |
//! | `part-<subtask>.<ext>` | the coordinator's [`publish`]: `rename` of the finished attempt's staging file |
//! | `_SUCCESS` | the coordinator, after every sink subtask is published |
//!
//! A re-run writes a new staging file and its publish replaces the part file
//! whole, so no row is duplicated or dropped; publishing the same attempt
//! twice is a no-op (idempotent), which recovery relies on.
//!
//! A sink on object storage (`path = "s3://BUCKET/PREFIX"`,
//! [`SinkSpec::objects`]) stages the same files in its local folder
//! `<data dir>/<job>/sink-staging/<vertex>` ([`SinkSpec::dir`]); publishing
//! is a PUT of the staging file as the object `PREFIX/part-<subtask>.<ext>`
//! (a multipart upload above 8 MiB), which a repeated publish overwrites
//! with the same bytes, and `_SUCCESS` is the object `PREFIX/_SUCCESS`
//! (docs/object-storage.md, "Sink output").

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::TaskError;
use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;

use crate::shuffle::sync_dir;
use coordhost_io::objstore::ObjectUrlPath as _;
use coordhost_io::objstore::{
    DEFAULT_WRITE_RETRY, ObjectUrl, Upload, classify, endpoint, error_line, retrying, upload,
};
use coordhost_model::graph::{SinkFormat, SinkSpec};
use coordhost_model::value::write_cell_text;

/// What a task's output reports when it is finished: rows written and, for
/// result partitions, each outgoing edge's index with the bytes of each of
/// its subpartitions.
pub type OutputReport = (u64, Vec<(usize, Vec<u64>)>);

/// Where a task's output batches go: its result partitions
/// (`super::PartitionOutputs`) or, for a sink task, its staging file
/// ([`SinkWriter`]).
pub trait BatchSink: Send {
    /// Takes one output batch (at least one row).
    ///
    /// # Errors
    ///
    /// [`TaskError`] if writing fails.
    fn write(&mut self, batch: &RecordBatch) -> Result<(), TaskError>;

    /// The schema of every batch to come, when it is known before the
    /// first (a plan's output): a Parquet sink writes it even when no row
    /// comes. Ignored by the others.
    fn expect_schema(&mut self, _schema: &arrow_schema::SchemaRef) {}

    /// Flushes and makes the output durable; returns the rows written and,
    /// for result partitions, the bytes per subpartition of each edge.
    ///
    /// # Errors
    ///
    /// [`TaskError`] if flushing fails.
    fn finish(self: Box<Self>) -> Result<OutputReport, TaskError>;
}

/// Writes one CSV field, quoting it if it holds the delimiter, a quote or a
/// line break (RFC 4180: a quote inside is doubled).
pub fn write_csv_field(out: &mut String, field: &str, delimiter: u8) {
    let needs = field
        .bytes()
        .any(|c| c == delimiter || c == b'"' || c == b'\n' || c == b'\r');
    if needs {
        out.push('"');
        out.push_str(&field.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(field);
    }
}

/// Name of the marker written when every sink subtask is published.
pub const SUCCESS_MARKER: &str = "_SUCCESS";
/// Folder of the staging files inside a sink folder.
pub const STAGING_DIR: &str = "_staging";

fn extension(spec: &SinkSpec) -> &'static str {
    match spec.format {
        SinkFormat::Csv { .. } => "csv",
        SinkFormat::Text { .. } => "txt",
        SinkFormat::Parquet => "parquet",
    }
}

/// Staging file of `(subtask, attempt)`.
pub fn staging_path(spec: &SinkSpec, subtask: u32, attempt: u32) -> PathBuf {
    spec.dir.join(STAGING_DIR).join(format!(
        "part-{subtask:05}-attempt-{attempt}.{}",
        extension(spec)
    ))
}

/// Name of the published part of `subtask` (a file in the sink folder,
/// or an object under the sink's prefix).
pub fn part_name(spec: &SinkSpec, subtask: u32) -> String {
    format!("part-{subtask:05}.{}", extension(spec))
}

/// Published file of `subtask` (for a sink on objects, a path that only
/// its file name means: [`part_name`]).
pub fn part_path(spec: &SinkSpec, subtask: u32) -> PathBuf {
    spec.dir.join(part_name(spec, subtask))
}

/// Where a sink publishes, as messages and the run's summary name it: its
/// folder, or its `s3://BUCKET/PREFIX`.
pub fn output_name(spec: &SinkSpec) -> PathBuf {
    match &spec.objects {
        Some(url) => PathBuf::from(url.to_string()),
        None => spec.dir.clone(),
    }
}

/// Whether `name` (a file in a sink folder, an object under a sink's
/// prefix) is published output: `_SUCCESS` or `part-*`.
pub fn is_published_name(name: &str) -> bool {
    name == SUCCESS_MARKER || name.starts_with("part-")
}

/// The published output (`part-*`, `_SUCCESS`) a sink holds now, sorted:
/// the entries of its folder (none when it does not exist), or the objects
/// directly under its prefix. One function for both, so that every check
/// of "this job's output" reads a folder and a prefix alike.
///
/// # Errors
/// For a sink on objects, one line naming the endpoint and the sink's URL
/// when the store cannot be listed (unreachable, credentials refused, no
/// such bucket); never credentials.
pub fn published_names(spec: &SinkSpec) -> Result<Vec<String>, String> {
    let mut names: Vec<String> = match &spec.objects {
        Some(url) => list_objects(url)?,
        None => fs::read_dir(&spec.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default(),
    };
    names.retain(|n| is_published_name(n));
    names.sort();
    Ok(names)
}

pub use coordhost_io::objstore::MULTIPART_ABOVE;

/// `object store ENDPOINT (sink URL): WHAT`.
fn store_line(url: &ObjectUrl, what: &str) -> String {
    format!("object store {} (sink {url}): {what}", endpoint())
}

/// A publishing error on `url`: a [`TaskError::Io`] naming the object.
fn store_error(url: &ObjectUrl, line: String) -> TaskError {
    TaskError::Io {
        path: PathBuf::from(url.to_string()),
        source: std::io::Error::other(line),
    }
}

/// `name` under the sink's prefix.
fn object_of(url: &ObjectUrl, name: &str) -> ObjectUrl {
    ObjectUrl {
        bucket: url.bucket.clone(),
        key: format!("{}/{name}", url.key),
    }
}

/// Runs one request of the sink on the object store runtime (the client's
/// own retries and timeouts bound it).
fn request<T: Send + 'static>(
    url: &ObjectUrl,
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    coordhost_io::objstore::block(future, None).map_err(|e| match e {
        coordhost_io::objstore::Blocked::Deadline => store_line(url, "no answer in time"),
        coordhost_io::objstore::Blocked::Failed(why) => store_line(url, &why),
    })
}

/// Names of the objects directly under the sink's prefix.
fn list_objects(url: &ObjectUrl) -> Result<Vec<String>, String> {
    let store = coordhost_io::objstore::client(&url.bucket)?;
    let prefix = url.path();
    let listed = request(url, async move {
        store.list_with_delimiter(Some(&prefix)).await
    })?
    .map_err(|e| match e {
        // A listing finds no object, never "not found": the bucket is.
        object_store::Error::NotFound { .. } => store_line(
            url,
            &format!("the bucket does not exist ({})", error_line(&e)),
        ),
        e => store_line(url, &classify(&e)),
    })?;
    Ok(listed
        .objects
        .iter()
        .filter_map(|meta| meta.location.filename().map(str::to_owned))
        .collect())
}

/// Runs the sink's write `what` of `object` until it succeeds, fails for
/// good or [`DEFAULT_WRITE_RETRY`] has passed, as the event log's writes
/// do: a store that stumbles while parts are published costs a pause, not
/// the job. Each try is one request with the client's own few retries.
fn retried<T, F, Fut>(
    url: &ObjectUrl,
    object: &ObjectUrl,
    what: String,
    attempt: F,
) -> Result<T, TaskError>
where
    T: Send + 'static,
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, object_store::Error>> + Send,
{
    let budget = DEFAULT_WRITE_RETRY;
    let label = what.clone();
    request(
        object,
        async move { retrying(budget, &label, attempt).await },
    )
    .map_err(|l| store_error(object, l))?
    .map_err(|failure| {
        let said = failure.describe(budget, "a sink's writes", None);
        store_error(object, store_line(url, &format!("{what}: {said}")))
    })
}

/// PUTs `body` as `name` under the sink's prefix (retried: [`retried`]).
fn put_object(url: &ObjectUrl, name: &str, body: bytes::Bytes) -> Result<(), TaskError> {
    use object_store::ObjectStoreExt as _;
    let object = object_of(url, name);
    let store = coordhost_io::objstore::client(&url.bucket).map_err(|l| store_error(&object, l))?;
    let path = object.path();
    retried(url, &object, format!("writing {object}"), move || {
        let (store, path, body) = (store.clone(), path.clone(), body.clone());
        async move { store.put(&path, body.into()).await.map(|_| ()) }
    })
}

/// Deletes `name` under the sink's prefix (retried: [`retried`]).
fn delete_object(url: &ObjectUrl, name: &str) -> Result<(), TaskError> {
    use object_store::ObjectStoreExt as _;
    let object = object_of(url, name);
    let store = coordhost_io::objstore::client(&url.bucket).map_err(|l| store_error(&object, l))?;
    let path = object.path();
    retried(url, &object, format!("deleting {object}"), move || {
        let (store, path) = (store.clone(), path.clone());
        async move { store.delete(&path).await }
    })
}

/// Publishes a staging file as the part object `name`: a PUT (a multipart
/// upload above [`MULTIPART_ABOVE`]) that replaces the object whole, so a
/// publish repeated after a crash or a re-run writes the same key again.
/// A staging file that is gone was published already if the object exists
/// (it is removed only with `_SUCCESS`, or lives on another coordinator's
/// disk).
fn publish_object(url: &ObjectUrl, staging: &Path, name: &str) -> Result<(), TaskError> {
    use object_store::ObjectStoreExt as _;
    let object = object_of(url, name);
    let store = coordhost_io::objstore::client(&url.bucket).map_err(|l| store_error(&object, l))?;
    let path = object.path();
    let size = match fs::metadata(staging) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let head = request(&object, async move { store.head(&path).await })
                .map_err(|l| store_error(&object, l))?;
            return match head {
                Ok(_) => Ok(()),
                Err(_) => Err(TaskError::Io {
                    path: staging.to_path_buf(),
                    source: e,
                }),
            };
        }
        Err(e) => {
            return Err(TaskError::Io {
                path: staging.to_path_buf(),
                source: e,
            });
        }
    };
    let file = staging.to_path_buf();
    // A store failure is retried (the upload starts again whole); a
    // staging file that cannot be read is not.
    let uploaded = retried(url, &object, format!("writing {object}"), move || {
        let (store, path, file) = (store.clone(), path.clone(), file.clone());
        async move {
            match upload(store, path, file, size).await {
                Ok(()) => Ok(Ok(())),
                Err(Upload::Read(e)) => Ok(Err(e)),
                Err(Upload::Store(e)) => Err(e),
            }
        }
    })?;
    uploaded.map_err(|source| TaskError::Io {
        path: staging.to_path_buf(),
        source,
    })
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TaskError + '_ {
    move |source| TaskError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Prepares a sink folder for a fresh run: creates it and removes what an
/// earlier run of the job left (its `_SUCCESS`, `part-*` files and staging
/// folder). Other files are left alone.
///
/// # Errors
///
/// [`TaskError::Io`] if the folder cannot be created or cleaned.
pub fn prepare_fresh(spec: &SinkSpec) -> Result<(), TaskError> {
    fs::create_dir_all(&spec.dir).map_err(io(&spec.dir))?;
    let staging = spec.dir.join(STAGING_DIR);
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(io(&staging))?;
    }
    if let Some(url) = &spec.objects {
        for name in list_objects(url).map_err(|line| store_error(url, line))? {
            if is_published_name(&name) {
                delete_object(url, &name)?;
            }
        }
        return Ok(());
    }
    for entry in fs::read_dir(&spec.dir).map_err(io(&spec.dir))? {
        let entry = entry.map_err(io(&spec.dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == SUCCESS_MARKER || (name.starts_with("part-") && entry.path().is_file()) {
            fs::remove_file(entry.path()).map_err(io(&entry.path()))?;
        }
    }
    Ok(())
}

/// Publishes the staging file of `(subtask, attempt)` as the subtask's part
/// file (atomic rename, then fsync of the folder). Idempotent: if the staging
/// file is gone and the part file exists, it was published already.
///
/// # Errors
///
/// [`TaskError::Io`] if neither file exists or the rename fails.
pub fn publish(spec: &SinkSpec, subtask: u32, attempt: u32) -> Result<(), TaskError> {
    let staging = staging_path(spec, subtask, attempt);
    if let Some(url) = &spec.objects {
        return publish_object(url, &staging, &part_name(spec, subtask));
    }
    let part = part_path(spec, subtask);
    match fs::rename(&staging, &part) {
        Ok(()) => {
            sync_dir(&spec.dir);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && part.is_file() => Ok(()),
        Err(e) => Err(TaskError::Io {
            path: staging,
            source: e,
        }),
    }
}

/// Writes `_SUCCESS` (after every part is published) and removes the
/// staging folder.
///
/// # Errors
///
/// [`TaskError::Io`] if the marker cannot be written.
pub fn write_success(spec: &SinkSpec) -> Result<(), TaskError> {
    if let Some(url) = &spec.objects {
        put_object(url, SUCCESS_MARKER, bytes::Bytes::new())?;
        // The staging folder is this job's own, inside its data folder.
        let _ignored = fs::remove_dir_all(&spec.dir);
        if let Some(parent) = spec.dir.parent() {
            let _ignored = fs::remove_dir(parent);
        }
        return Ok(());
    }
    let marker = spec.dir.join(SUCCESS_MARKER);
    File::create(&marker)
        .and_then(|f| f.sync_all())
        .map_err(io(&marker))?;
    sync_dir(&spec.dir);
    let staging = spec.dir.join(STAGING_DIR);
    let _ignored = fs::remove_dir_all(staging);
    Ok(())
}

/// The [`BatchSink`] of a sink task: writes its staging file, a line per
/// row, each cell as its text ([`coordhost_model::value::cell_text`]).
pub struct SinkWriter {
    path: PathBuf,
    out: BufWriter<File>,
    /// A Parquet sink's writer, made with the first schema it learns.
    parquet: Option<parquet::arrow::ArrowWriter<File>>,
    format: SinkFormat,
    line: String,
    /// Scratch: the text of a cell that is not `Utf8`.
    cell: String,
    rows: u64,
}

impl SinkWriter {
    /// Creates the staging file of `(subtask, attempt)` (and writes the CSV
    /// header if configured).
    ///
    /// # Errors
    ///
    /// [`TaskError::Io`] if the file cannot be created.
    pub fn create(spec: &SinkSpec, subtask: u32, attempt: u32) -> Result<Self, TaskError> {
        let path = staging_path(spec, subtask, attempt);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let f = File::create(&path).map_err(io(&path))?;
        let mut w = Self {
            path,
            out: BufWriter::with_capacity(64 * 1024, f),
            parquet: None,
            format: spec.format.clone(),
            line: String::new(),
            cell: String::new(),
            rows: 0,
        };
        if let SinkFormat::Csv { header: true, .. } = spec.format {
            w.line.clear();
            for (i, name) in spec.columns.iter().enumerate() {
                w.put_field(i, name);
            }
            w.end_line()?;
        }
        Ok(w)
    }

    /// Appends field `i` of the current line to it.
    fn put_field(&mut self, i: usize, field: &str) {
        put_field(&mut self.line, &self.format, i, field);
    }

    fn end_line(&mut self) -> Result<(), TaskError> {
        self.line.push('\n');
        let r = self
            .out
            .write_all(self.line.as_bytes())
            .map_err(io(&self.path));
        self.line.clear();
        r
    }
}

/// Appends field `i` of a line in `format` (delimiter or separator first
/// unless it is the first field; CSV quoting where needed).
fn put_field(line: &mut String, format: &SinkFormat, i: usize, field: &str) {
    match format {
        SinkFormat::Csv { delimiter, .. } => {
            if i > 0 {
                line.push(*delimiter as char);
            }
            write_csv_field(line, field, *delimiter);
        }
        SinkFormat::Text { separator } => {
            if i > 0 {
                line.push_str(separator);
            }
            line.push_str(field);
        }
        SinkFormat::Parquet => unreachable!("a Parquet sink writes no lines"),
    }
}

impl SinkWriter {
    /// The Parquet writer over the staging file, made for `schema` the
    /// first time.
    fn parquet_writer(
        &mut self,
        schema: &arrow_schema::SchemaRef,
    ) -> Result<&mut parquet::arrow::ArrowWriter<File>, TaskError> {
        if self.parquet.is_none() {
            let f = self.out.get_ref().try_clone().map_err(io(&self.path))?;
            let w = parquet::arrow::ArrowWriter::try_new(f, std::sync::Arc::clone(schema), None)
                .map_err(|e| TaskError::Io {
                    path: self.path.clone(),
                    source: std::io::Error::other(e),
                })?;
            self.parquet = Some(w);
        }
        Ok(self.parquet.as_mut().expect("made above"))
    }
}

impl BatchSink for SinkWriter {
    fn expect_schema(&mut self, schema: &arrow_schema::SchemaRef) {
        if self.format == SinkFormat::Parquet {
            // An error shows again at the first write or at finish.
            let _later = self.parquet_writer(schema);
        }
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<(), TaskError> {
        if self.format == SinkFormat::Parquet {
            self.rows += batch.num_rows() as u64;
            let path = self.path.clone();
            return self
                .parquet_writer(&batch.schema())?
                .write(batch)
                .map_err(|e| TaskError::Io {
                    path,
                    source: std::io::Error::other(e),
                });
        }
        let columns = batch.columns();
        for row in 0..batch.num_rows() {
            self.rows += 1;
            for (i, c) in columns.iter().enumerate() {
                if c.data_type() == &DataType::Utf8 && !c.is_null(row) {
                    put_field(
                        &mut self.line,
                        &self.format,
                        i,
                        c.as_string::<i32>().value(row),
                    );
                } else {
                    self.cell.clear();
                    write_cell_text(c.as_ref(), row, &mut self.cell);
                    put_field(&mut self.line, &self.format, i, &self.cell);
                }
            }
            self.end_line()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<OutputReport, TaskError> {
        if let Some(w) = self.parquet.take() {
            w.close().map_err(|e| TaskError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(e),
            })?;
        } else if self.format == SinkFormat::Parquet {
            return Err(TaskError::Io {
                path: self.path.clone(),
                source: std::io::Error::other("a Parquet sink got neither a schema nor a row"),
            });
        }
        let path = self.path;
        let f = self.out.into_inner().map_err(|e| TaskError::Io {
            path: path.clone(),
            source: e.into_error(),
        })?;
        f.sync_all().map_err(io(&path))?;
        Ok((self.rows, Vec::new()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_replaces_the_part_and_is_idempotent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = SinkSpec {
            dir: dir.path().join("out"),
            format: SinkFormat::Csv {
                header: true,
                delimiter: b',',
            },
            columns: vec!["w".into(), "n".into()],
            overwrite: false,
            objects: None,
        };
        prepare_fresh(&spec).expect("prepare");
        for attempt in 0..2 {
            let mut w = Box::new(SinkWriter::create(&spec, 0, attempt).expect("create"));
            let batch = coordhost_model::value::cells::batch_of(vec![
                std::sync::Arc::new(arrow_array::StringArray::from(vec!["a,b"])),
                std::sync::Arc::new(arrow_array::Int64Array::from(vec![i64::from(attempt)])),
            ]);
            w.write(&batch).expect("write");
            w.finish().expect("finish");
        }
        publish(&spec, 0, 1).expect("publish");
        publish(&spec, 0, 1).expect("publish again");
        assert_eq!(
            fs::read_to_string(part_path(&spec, 0)).expect("read"),
            "w,n\n\"a,b\",1\n"
        );
        write_success(&spec).expect("success");
        assert!(spec.dir.join(SUCCESS_MARKER).is_file());
        assert!(!spec.dir.join(STAGING_DIR).exists());
    }

    #[test]
    fn published_names_of_a_folder_are_its_parts_and_success_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut spec = SinkSpec {
            dir: dir.path().join("out"),
            format: SinkFormat::Text {
                separator: " ".into(),
            },
            columns: vec!["w".into()],
            overwrite: false,
            objects: None,
        };
        assert_eq!(published_names(&spec), Ok(Vec::new()), "no folder yet");
        fs::create_dir_all(spec.dir.join(STAGING_DIR)).expect("staging");
        for name in ["part-00001.txt", "notes", SUCCESS_MARKER, "part-00000.txt"] {
            fs::write(spec.dir.join(name), "x").expect("write");
        }
        assert_eq!(
            published_names(&spec).expect("a folder"),
            ["_SUCCESS", "part-00000.txt", "part-00001.txt"]
        );
        assert_eq!(output_name(&spec), spec.dir);
        assert_eq!(part_name(&spec, 7), "part-00007.txt");
        spec.objects = Some(ObjectUrl::parse("s3://bkt/out/wc", false).expect("url"));
        assert_eq!(output_name(&spec), PathBuf::from("s3://bkt/out/wc"));
        assert_eq!(
            object_of(spec.objects.as_ref().expect("set"), "part-00007.txt").to_string(),
            "s3://bkt/out/wc/part-00007.txt"
        );
    }

    #[test]
    fn csv_fields_are_quoted_only_when_they_need_it() {
        let field = |f: &str| {
            let mut s = String::new();
            write_csv_field(&mut s, f, b',');
            s
        };
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("x, \"y\""), "\"x, \"\"y\"\"\"");
        assert_eq!(field("a\nb"), "\"a\nb\"");
        assert_eq!(field("a;b"), "a;b");
    }
}
