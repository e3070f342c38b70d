//! The job event log on S3-compatible object storage (issue 30, first
//! slice; `docs/object-storage.md`).
//!
//! The log is a gap-free sequence of immutable objects `PREFIX/log/<n:020>`,
//! numbered from 0. Each object is self-describing and checksummed (the
//! table below); the first object a coordinator attempt writes holds its
//! segment header (`docs/log-format.md`), every later one the record frames
//! of one group commit. A segment of the file log is therefore the run of
//! objects of one attempt, and [`ObjectStorage`] presents it to the
//! unchanged reader and writer through the [`Storage`] trait: replay, the
//! sealed-segment table and the record classes are the same code.
//!
//! Every object is created with a conditional write (`If-None-Match: *`,
//! `PutMode::Create`): of two coordinators that want object *n*, exactly one
//! gets it; the other receives `AlreadyExists` and stops (the fence). The
//! chain of checksums (each object carries the CRC32C of its predecessor)
//! and the gap-free numbering make a deleted, overwritten or truncated
//! object damage ([`Damage::Object`]) instead of a silently shorter log.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `CHJEVOBJ` |
//! | 8 | 2 | object format version, 1 |
//! | 10 | 2 | kind: 1 segment start (body: a segment header), 2 records (body: whole record frames) |
//! | 12 | 4 | coordinator attempt |
//! | 16 | 8 | number *n*, equal to the key |
//! | 24 | 8 | writer id (random per writer) |
//! | 32 | 4 | CRC32C of object *n−1* (0 for object 0) |
//! | 36 | 4 | body length *L* |
//! | 40 | *L* | body |
//! | 40+*L* | 4 | CRC32C of bytes 0 .. 40+*L* |

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreExt as _, PutMode, PutOptions,
    PutPayload, RetryConfig,
};

use crate::objstore::{DEFAULT_WRITE_RETRY, classify, endpoint, error_line, retrying};

use coordhost_log::format::{LOG_DIR, is_snapshot_file_name};
use coordhost_log::{Damage, EventsError, Fence, SegmentAppender, SnapshotFile, Storage};

/// Magic bytes of a log object.
pub const OBJECT_MAGIC: [u8; 8] = *b"CHJEVOBJ";
/// The object format version this binary writes and reads.
pub const OBJECT_FORMAT_VERSION: u16 = 1;
/// Kind of an object that starts a segment (body: the segment header).
pub const OBJECT_KIND_SEGMENT_START: u16 = 1;
/// Kind of an object of record frames (body: one group commit).
pub const OBJECT_KIND_RECORDS: u16 = 2;
/// Bytes before the body.
pub const OBJECT_HEAD_LEN: usize = 40;
/// Bytes of the trailing CRC32C.
pub const OBJECT_CRC_LEN: usize = 4;
/// Digits of an object's number in its key.
pub const OBJECT_KEY_DIGITS: usize = 20;
/// Objects fetched at once while the log is read.
const READ_CONCURRENCY: usize = 16;
/// Where a log on object storage lives: `s3://BUCKET/PREFIX`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectLogUrl {
    /// The bucket.
    pub bucket: String,
    /// The prefix inside it, without leading or trailing `/` (may be empty).
    pub prefix: String,
}

impl ObjectLogUrl {
    /// Parses `s3://BUCKET[/PREFIX]`.
    ///
    /// # Errors
    /// A sentence saying what is wrong with `url`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(format!(
                "`{url}` is not an object storage URL: expected s3://BUCKET/PREFIX"
            ));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(format!(
                "`{url}`: the bucket name `{bucket}` is not valid (3 to 63 lower-case letters, digits, `-` or `.`)"
            ));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|part| part == "." || part == ".." || (part.is_empty() && !prefix.is_empty()))
        {
            return Err(format!(
                "`{url}`: the prefix `{prefix}` has an empty, `.` or `..` part"
            ));
        }
        Ok(Self {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// True if `text` is meant as an object storage URL (`s3://...`).
    #[must_use]
    pub fn is_object_url(text: &str) -> bool {
        text.starts_with("s3://")
    }

    fn key(&self, rest: &str) -> String {
        if self.prefix.is_empty() {
            rest.to_owned()
        } else {
            format!("{}/{rest}", self.prefix)
        }
    }

    /// The URL of the object `rest` under the prefix.
    #[must_use]
    pub fn object_url(&self, rest: &str) -> String {
        format!("s3://{}/{}", self.bucket, self.key(rest))
    }
}

impl fmt::Display for ObjectLogUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// The key of log object `n` relative to the prefix: `log/<n:020>`.
#[must_use]
pub fn object_name(n: u64) -> String {
    format!("{LOG_DIR}/{n:0width$}", width = OBJECT_KEY_DIGITS)
}

fn parse_object_name(name: &str) -> Option<u64> {
    (name.len() == OBJECT_KEY_DIGITS && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

/// One log object, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LogObject {
    kind: u16,
    attempt: u32,
    number: u64,
    writer: u64,
    previous_crc: u32,
    body: Vec<u8>,
    /// CRC32C of the whole object (what its successor names).
    crc: u32,
}

fn encode_object(
    kind: u16,
    attempt: u32,
    number: u64,
    writer: u64,
    previous_crc: u32,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(OBJECT_HEAD_LEN + body.len() + OBJECT_CRC_LEN);
    out.extend_from_slice(&OBJECT_MAGIC);
    out.extend_from_slice(&OBJECT_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&attempt.to_le_bytes());
    out.extend_from_slice(&number.to_le_bytes());
    out.extend_from_slice(&writer.to_le_bytes());
    out.extend_from_slice(&previous_crc.to_le_bytes());
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// An encoded object's own checksum (its last 4 bytes): what the next
/// object names as its predecessor's.
fn trailing_crc(object: &[u8]) -> u32 {
    let tail: [u8; 4] = object[object.len() - OBJECT_CRC_LEN..]
        .try_into()
        .unwrap_or([0; 4]);
    u32::from_le_bytes(tail)
}

/// Why an object's bytes are not a log object.
enum ObjectProblem {
    Damaged(String),
    NewerFormat(u16),
}

fn decode_object(bytes: &[u8]) -> Result<LogObject, ObjectProblem> {
    let damaged = |why: &str| Err(ObjectProblem::Damaged(why.to_owned()));
    if bytes.len() < OBJECT_HEAD_LEN + OBJECT_CRC_LEN {
        return damaged(&format!(
            "it is {} bytes, shorter than an object's {} bytes of head and checksum (cut short)",
            bytes.len(),
            OBJECT_HEAD_LEN + OBJECT_CRC_LEN
        ));
    }
    if bytes[..8] != OBJECT_MAGIC {
        return damaged("it does not start with the log object magic `CHJEVOBJ` (overwritten)");
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap_or([0; 8]));
    let len = u32_at(36) as usize;
    if bytes.len() != OBJECT_HEAD_LEN + len + OBJECT_CRC_LEN {
        return damaged(&format!(
            "it is {} bytes, but its head says {} (cut short or overwritten)",
            bytes.len(),
            OBJECT_HEAD_LEN + len + OBJECT_CRC_LEN
        ));
    }
    let end = OBJECT_HEAD_LEN + len;
    let crc = crc32c::crc32c(&bytes[..end]);
    if crc != u32_at(end) {
        return damaged("its CRC32C does not match its bytes (overwritten or damaged)");
    }
    let version = u16_at(8);
    if version != OBJECT_FORMAT_VERSION {
        return Err(ObjectProblem::NewerFormat(version));
    }
    let kind = u16_at(10);
    if kind != OBJECT_KIND_SEGMENT_START && kind != OBJECT_KIND_RECORDS {
        return damaged(&format!("its kind {kind} is neither 1 nor 2"));
    }
    Ok(LogObject {
        kind,
        attempt: u32_at(12),
        number: u64_at(16),
        writer: u64_at(24),
        previous_crc: u32_at(32),
        body: bytes[OBJECT_HEAD_LEN..end].to_vec(),
        crc: u32_at(end),
    })
}

/// The log as the last read found it.
#[derive(Debug, Default)]
struct Loaded {
    /// Segment bytes (header and records) by coordinator attempt.
    segments: BTreeMap<u32, Vec<u8>>,
    /// Number of the first object of each attempt's segment.
    first_object: BTreeMap<u32, u64>,
    /// Number of the object the next writer creates, and the CRC32C of
    /// the one before it.
    next: u64,
    last_crc: u32,
    /// Whether a read happened at all.
    read: bool,
}

/// The event log's [`Storage`] on an S3-compatible object store. Reads
/// need no lock; a writer is fenced by the conditional creation of every
/// object it writes.
pub struct ObjectStorage {
    url: ObjectLogUrl,
    endpoint: String,
    store: Arc<AmazonS3>,
    runtime: Option<tokio::runtime::Runtime>,
    loaded: Mutex<Loaded>,
    writer: u64,
    /// How long a write keeps trying through transient failures.
    write_retry: Duration,
    /// With high availability, the leadership: checked before every
    /// create (docs/object-storage.md, "High availability").
    fence: Option<Arc<dyn Fence>>,
}

impl fmt::Debug for ObjectStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the credentials.
        f.debug_struct("ObjectStorage")
            .field("url", &self.url.to_string())
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Drop for ObjectStorage {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Creates `path` with `bytes` if no object has that key (`If-None-Match:
/// *`). `Ok(false)` if another writer's object is there. A try whose answer
/// was lost and that is repeated finds its own bytes under the key: that is
/// success, not a rival (the random writer id makes two writers' bytes
/// differ).
async fn create_object(
    store: &AmazonS3,
    path: &ObjectPath,
    bytes: &PutPayload,
) -> Result<bool, object_store::Error> {
    let options = PutOptions {
        mode: PutMode::Create,
        ..PutOptions::default()
    };
    match store.put_opts(path, bytes.clone(), options).await {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. }) => match store.get(path).await {
            Ok(got) => {
                let found = got.bytes().await?;
                let ours: Vec<u8> = bytes.iter().flat_map(|b| b.iter().copied()).collect();
                Ok(found[..] == ours[..])
            }
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

impl ObjectStorage {
    /// A client for the log at `url`: endpoint, region and credentials from
    /// the `AWS_*` variables (`AWS_ENDPOINT_URL`, `AWS_REGION`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`).
    /// Nothing is sent yet.
    ///
    /// # Errors
    /// [`EventsError::Store`] if the client cannot be built.
    pub fn connect(url: &ObjectLogUrl) -> Result<Self, EventsError> {
        Self::connect_from(url, AmazonS3Builder::from_env(), endpoint())
    }

    /// As [`ObjectStorage::connect`], with the client's settings from
    /// `builder` (the bucket, retries and timeouts are set here) and
    /// `endpoint` naming it in messages.
    ///
    /// # Errors
    /// [`EventsError::Store`] if the client cannot be built.
    pub fn connect_from(
        url: &ObjectLogUrl,
        builder: AmazonS3Builder,
        endpoint: String,
    ) -> Result<Self, EventsError> {
        let store_error = |problem: String| EventsError::Store {
            endpoint: endpoint.clone(),
            location: url.to_string(),
            problem,
        };
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: 3,
            retry_timeout: Duration::from_secs(20),
        };
        // Timeouts through the builder's own keys: `with_client_options`
        // would replace what the environment set (e.g. `AWS_ALLOW_HTTP`).
        let store = builder
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                "5s",
            )
            .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), "60s")
            .with_bucket_name(&url.bucket)
            .with_retry(retry)
            .build()
            .map_err(|e| store_error(format!("cannot be configured ({})", error_line(&e))))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("object-log")
            .enable_all()
            .build()
            .map_err(|e| store_error(format!("no runtime for its client: {e}")))?;
        Ok(Self {
            url: url.clone(),
            endpoint,
            store: Arc::new(store),
            runtime: Some(runtime),
            loaded: Mutex::new(Loaded::default()),
            writer: writer_id(),
            write_retry: DEFAULT_WRITE_RETRY,
            fence: None,
        })
    }

    /// Guards every create of this log by `fence` as well (high
    /// availability: the leadership on etcd). The conditional create still
    /// decides between two writers; the fence stops a deposed leader that
    /// knows it is deposed before it sends anything, so a paused leader that
    /// resumes is refused by whichever of the two it meets first.
    #[must_use]
    pub fn with_fence(mut self, fence: Option<Arc<dyn Fence>>) -> Self {
        self.fence = fence;
        self
    }

    /// `Ok` while this process may write (no fence, or its fence holds).
    fn verify_fence(&self) -> io::Result<()> {
        self.fence.as_ref().map_or(Ok(()), |f| f.verify())
    }

    /// Sets how long a write to the log (a group commit, a segment start, a
    /// side object) keeps trying through a store that fails transiently
    /// before the writer gives up ([`DEFAULT_WRITE_RETRY`] unless set).
    /// Reads at the start do not retry beyond the client's own few: a store
    /// that cannot be reached then stops the run within seconds.
    #[must_use]
    pub fn with_write_retry(mut self, budget: Duration) -> Self {
        self.write_retry = budget;
        self
    }

    /// The log's URL.
    #[must_use]
    pub fn url(&self) -> &ObjectLogUrl {
        &self.url
    }

    /// The endpoint requests go to (for messages).
    #[must_use]
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn store_error(&self, location: &str, error: &object_store::Error) -> EventsError {
        EventsError::Store {
            endpoint: self.endpoint.clone(),
            location: location.to_owned(),
            problem: classify(error),
        }
    }

    /// Runs `future` on this storage's runtime and waits for it (callable
    /// from any thread, also one inside another runtime).
    fn block<T: Send + 'static>(
        &self,
        future: impl Future<Output = T> + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| io::Error::other("the object store client is shut down"))?;
        runtime.spawn(async move {
            let _gone = tx.send(future.await);
        });
        rx.recv()
            .map_err(|_| io::Error::other("an object store request panicked"))
    }

    fn path(&self, rest: &str) -> ObjectPath {
        ObjectPath::from(self.url.key(rest))
    }

    /// True if the log has at least one object (a run wrote it).
    ///
    /// # Errors
    /// [`EventsError::Store`] if the store cannot be listed.
    pub fn exists(&self) -> Result<bool, EventsError> {
        Ok(!self.list_numbers()?.is_empty())
    }

    /// Numbers of the log objects present, ascending.
    fn list_numbers(&self) -> Result<Vec<u64>, EventsError> {
        let names = self.list_names(LOG_DIR)?;
        let mut numbers: Vec<u64> = names.iter().filter_map(|n| parse_object_name(n)).collect();
        numbers.sort_unstable();
        Ok(numbers)
    }

    /// Names of the objects directly under `PREFIX/dir/`.
    fn list_names(&self, dir: &str) -> Result<Vec<String>, EventsError> {
        let store = Arc::clone(&self.store);
        let prefix = self.path(dir);
        let listed = self
            .block(async move {
                store
                    .list(Some(&prefix))
                    .map_ok(|meta| meta.location)
                    .try_collect::<Vec<_>>()
                    .await
            })
            .map_err(|e| EventsError::Io {
                path: PathBuf::from(self.url.object_url(dir)),
                source: e,
            })?
            .map_err(|e| match e {
                // A listing finds no object, never "not found": the bucket is.
                object_store::Error::NotFound { .. } => EventsError::Store {
                    endpoint: self.endpoint.clone(),
                    location: self.url.to_string(),
                    problem: format!("the bucket does not exist ({})", error_line(&e)),
                },
                e => self.store_error(&self.url.to_string(), &e),
            })?;
        let base = self.path(dir);
        Ok(listed
            .iter()
            .filter_map(|location| {
                let mut parts = location.prefix_match(&base)?;
                let name = parts.next()?.as_ref().to_owned();
                parts.next().is_none().then_some(name)
            })
            .collect())
    }

    /// Reads every log object, checks the chain and builds the segments.
    fn load(&self) -> Result<(), EventsError> {
        let numbers = self.list_numbers()?;
        self.check_gap_free(&numbers)?;
        let fetched = self.fetch_objects(&numbers)?;
        let mut loaded = Loaded {
            read: true,
            ..Loaded::default()
        };
        let mut current: Option<u32> = None;
        for (n, got) in fetched {
            let object = self.decode_fetched(n, got)?;
            self.chain_object(&mut loaded, &mut current, n, object)?;
        }
        *self.loaded.lock().unwrap_or_else(PoisonError::into_inner) = loaded;
        Ok(())
    }

    /// The error of damaged log object `n`.
    fn object_damage(&self, n: u64, detail: String) -> EventsError {
        EventsError::Corrupt {
            segment: PathBuf::from(self.url.object_url(&object_name(n))),
            offset: 0,
            damage: Damage::Object { detail },
        }
    }

    /// The objects listed, `numbers` ascending, must be 0, 1, 2, ...
    /// without a gap.
    fn check_gap_free(&self, numbers: &[u64]) -> Result<(), EventsError> {
        for (i, &n) in numbers.iter().enumerate() {
            if n != i as u64 {
                return Err(self.object_damage(
                    i as u64,
                    format!(
                        "object {i} is missing (the log is a gap-free sequence of objects 0 ..= {}; it was deleted behind the log's back)",
                        numbers.last().copied().unwrap_or(0)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Gets the objects `numbers`, [`READ_CONCURRENCY`] at a time, each
    /// with its number, in order.
    #[expect(
        clippy::type_complexity,
        reason = "private helper returning each object's number and its answer"
    )]
    fn fetch_objects(
        &self,
        numbers: &[u64],
    ) -> Result<Vec<(u64, Result<Vec<u8>, object_store::Error>)>, EventsError> {
        let store = Arc::clone(&self.store);
        let paths: Vec<(u64, ObjectPath)> = numbers
            .iter()
            .map(|&n| (n, self.path(&object_name(n))))
            .collect();
        self.block(async move {
            futures::stream::iter(paths)
                .map(move |(n, path)| {
                    let store = Arc::clone(&store);
                    async move {
                        let got = match store.get(&path).await {
                            Ok(got) => got.bytes().await.map(|b| b.to_vec()),
                            Err(e) => Err(e),
                        };
                        (n, got)
                    }
                })
                .buffered(READ_CONCURRENCY)
                .collect::<Vec<_>>()
                .await
        })
        .map_err(|e| EventsError::Io {
            path: PathBuf::from(self.url.object_url(LOG_DIR)),
            source: e,
        })
    }

    /// Object `n` as fetched (`got`), decoded.
    fn decode_fetched(
        &self,
        n: u64,
        got: Result<Vec<u8>, object_store::Error>,
    ) -> Result<LogObject, EventsError> {
        let bytes = match got {
            Ok(bytes) => bytes,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(self.object_damage(
                    n,
                    format!("object {n} was listed but is gone (deleted behind the log's back)"),
                ));
            }
            Err(e) => return Err(self.store_error(&self.url.object_url(&object_name(n)), &e)),
        };
        match decode_object(&bytes) {
            Ok(object) => Ok(object),
            Err(ObjectProblem::Damaged(why)) => Err(self.object_damage(n, why)),
            Err(ObjectProblem::NewerFormat(found)) => Err(EventsError::UnsupportedFormat {
                segment: PathBuf::from(self.url.object_url(&object_name(n))),
                found,
                max_known: OBJECT_FORMAT_VERSION,
            }),
        }
    }

    /// Adds object `n` to `loaded`: it must say it is object `n` and follow
    /// the object before it (by CRC), and it starts a later attempt's
    /// segment or continues `current`'s.
    fn chain_object(
        &self,
        loaded: &mut Loaded,
        current: &mut Option<u32>,
        n: u64,
        object: LogObject,
    ) -> Result<(), EventsError> {
        if object.number != n {
            return Err(self.object_damage(
                n,
                format!(
                    "it says it is object {} (a copy of another object was put in its place)",
                    object.number
                ),
            ));
        }
        if object.previous_crc != loaded.last_crc {
            return Err(self.object_damage(
                n,
                format!(
                    "it does not follow object {}: it names a predecessor with CRC32C {:#010x}, but that object's is {:#010x} (one of the two was overwritten)",
                    n.saturating_sub(1),
                    object.previous_crc,
                    loaded.last_crc
                ),
            ));
        }
        match (object.kind, *current) {
            (OBJECT_KIND_SEGMENT_START, Some(attempt)) if object.attempt <= attempt => {
                return Err(self.object_damage(
                    n,
                    format!(
                        "it starts attempt {}'s segment after attempt {attempt}'s",
                        object.attempt
                    ),
                ));
            }
            (OBJECT_KIND_SEGMENT_START, _) => {
                *current = Some(object.attempt);
                loaded.first_object.insert(object.attempt, n);
                loaded.segments.insert(object.attempt, object.body);
            }
            (_, Some(attempt)) if object.attempt == attempt => {
                if let Some(segment) = loaded.segments.get_mut(&attempt) {
                    segment.extend_from_slice(&object.body);
                }
            }
            (_, current) => {
                return Err(self.object_damage(
                    n,
                    format!(
                        "it holds records of attempt {} but follows {}",
                        object.attempt,
                        current.map_or_else(
                            || "no segment start".to_owned(),
                            |a| format!("attempt {a}'s objects")
                        )
                    ),
                ));
            }
        }
        loaded.last_crc = object.crc;
        loaded.next = n + 1;
        Ok(())
    }

    /// Creates object `n` with `bytes` if no object `n` exists (retrying
    /// through transient failures). `Ok(false)` if another writer created
    /// it first.
    fn create(&self, n: u64, bytes: Vec<u8>) -> io::Result<bool> {
        self.verify_fence()?;
        let store = Arc::clone(&self.store);
        let path = self.path(&object_name(n));
        let url = self.url.object_url(&object_name(n));
        let budget = self.write_retry;
        let what = format!("creating {url}");
        let outcome = self.block(async move {
            let payload = PutPayload::from(bytes);
            retrying(budget, &what, || create_object(&store, &path, &payload)).await
        })?;
        outcome.map_err(|failure| {
            io::Error::other(format!(
                "object store {}: creating {url}: {}",
                self.endpoint,
                failure.describe(budget, "the log's writes", Some("run --log-retry-s"))
            ))
        })
    }

    fn fenced(&self, n: u64) -> io::Error {
        io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} already exists: another coordinator extended the job's event log, so this one may not (it is fenced off and stops)",
                self.url.object_url(&object_name(n))
            ),
        )
    }

    fn side_path(&self, name: &str) -> String {
        format!("{LOG_DIR}/{name}")
    }
}

/// A random id for one writer, so that two writers never produce the same
/// object bytes (a retried create recognises only its own).
fn writer_id() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

impl Storage for ObjectStorage {
    fn segment_path(&self, attempt: u32) -> PathBuf {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        match loaded.first_object.get(&attempt) {
            Some(&n) => PathBuf::from(self.url.object_url(&object_name(n))),
            // The segment a writer is about to start: the object it will
            // create.
            None if loaded.read => PathBuf::from(self.url.object_url(&object_name(loaded.next))),
            None => PathBuf::from(self.url.object_url(&format!("{LOG_DIR}/attempt-{attempt}"))),
        }
    }

    fn check(&self) -> Result<(), EventsError> {
        self.load()
    }

    fn list_segments(&self) -> io::Result<Vec<u32>> {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(loaded.segments.keys().copied().collect())
    }

    fn read_segment(&self, attempt: u32) -> io::Result<Vec<u8>> {
        let loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
        loaded.segments.get(&attempt).cloned().ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "no such segment in the object log")
        })
    }

    fn create_segment(&self, attempt: u32, header: &[u8]) -> io::Result<Box<dyn SegmentAppender>> {
        let (n, previous_crc) = {
            let mut loaded = self.loaded.lock().unwrap_or_else(PoisonError::into_inner);
            if !loaded.read {
                return Err(io::Error::other(
                    "the object log must be read before a segment is created",
                ));
            }
            // The replayed bytes are not needed any more.
            loaded.segments.clear();
            // Messages about this segment name its first object.
            let n = loaded.next;
            loaded.first_object.insert(attempt, n);
            (n, loaded.last_crc)
        };
        let object = encode_object(
            OBJECT_KIND_SEGMENT_START,
            attempt,
            n,
            self.writer,
            previous_crc,
            header,
        );
        let crc = trailing_crc(&object);
        if !self.create(n, object)? {
            return Err(self.fenced(n));
        }
        Ok(Box::new(ObjectAppender {
            storage: self.shallow(),
            attempt,
            next: n + 1,
            previous_crc: crc,
        }))
    }

    fn write_side_file(&self, name: &str, state: &[u8]) -> Result<SnapshotFile, EventsError> {
        let url = self.url.object_url(&self.side_path(name));
        let failed = |problem: String| EventsError::SnapshotFile {
            path: PathBuf::from(&url),
            problem,
        };
        self.verify_fence()
            .map_err(|e| failed(format!("cannot be written: {e}")))?;
        let store = Arc::clone(&self.store);
        let path = self.path(&self.side_path(name));
        let payload = PutPayload::from(state.to_vec());
        let budget = self.write_retry;
        let what = format!("creating {url}");
        let created = self
            .block(async move {
                retrying(budget, &what, || create_object(&store, &path, &payload)).await
            })
            .map_err(|e| failed(format!("cannot be written: {e}")))?;
        match created {
            Ok(true) => {}
            // Never replaced: a side object of that name is another's.
            Ok(false) => {
                return Err(failed(
                    "cannot be written: an object of that name exists already".to_owned(),
                ));
            }
            Err(failure) => {
                return Err(failed(format!(
                    "cannot be written to object store {}: {}",
                    self.endpoint,
                    failure.describe(budget, "the log's writes", Some("run --log-retry-s"))
                )));
            }
        }
        Ok(SnapshotFile {
            file: name.to_owned(),
            len: state.len() as u64,
            crc32c: crc32c::crc32c(state),
        })
    }

    fn read_side_file(&self, file: &SnapshotFile) -> Result<Vec<u8>, EventsError> {
        let url = self.url.object_url(&self.side_path(&file.file));
        let problem = |problem: String| EventsError::SnapshotFile {
            path: PathBuf::from(&url),
            problem,
        };
        if !is_snapshot_file_name(&file.file) {
            return Err(problem(
                "the record names a file that is not a snapshot side file".to_owned(),
            ));
        }
        let store = Arc::clone(&self.store);
        let path = self.path(&self.side_path(&file.file));
        let got = self
            .block(async move {
                match store.get(&path).await {
                    Ok(got) => got.bytes().await.map(|b| b.to_vec()),
                    Err(e) => Err(e),
                }
            })
            .map_err(|e| problem(format!("cannot be read: {e}")))?;
        let bytes = match got {
            Ok(bytes) => bytes,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(problem("is missing".to_owned()));
            }
            Err(e) => return Err(problem(format!("cannot be read: {}", classify(&e)))),
        };
        coordhost_log::check_against_record(&bytes, file, "object").map_err(problem)?;
        Ok(bytes)
    }

    fn remove_side_file(&self, name: &str) {
        let store = Arc::clone(&self.store);
        let path = self.path(&self.side_path(name));
        let outcome = self.block(async move { store.delete(&path).await });
        let failed = match outcome {
            Ok(Ok(()) | Err(object_store::Error::NotFound { .. })) => return,
            Ok(Err(e)) => classify(&e),
            Err(e) => e.to_string(),
        };
        tracing::warn!(
            object = %self.url.object_url(&self.side_path(name)),
            "could not remove a superseded batch snapshot side object: {failed}"
        );
    }

    fn list_side_files(&self) -> Result<Vec<String>, EventsError> {
        Ok(self
            .list_names(LOG_DIR)?
            .into_iter()
            .filter(|n| is_snapshot_file_name(n))
            .collect())
    }
}

impl ObjectStorage {
    /// A second handle on the same client and runtime for the appender.
    fn shallow(&self) -> Arc<ObjectClient> {
        Arc::new(ObjectClient {
            url: self.url.clone(),
            endpoint: self.endpoint.clone(),
            store: Arc::clone(&self.store),
            handle: self
                .runtime
                .as_ref()
                .map(|r| r.handle().clone())
                .expect("the runtime lives as long as the storage"),
            writer: self.writer,
            write_retry: self.write_retry,
            fence: self.fence.clone(),
        })
    }
}

/// What an appender needs of the storage: the client and the runtime's
/// handle (the storage, which owns the runtime, outlives the writer's
/// appender: the writer keeps it).
#[derive(Debug)]
struct ObjectClient {
    url: ObjectLogUrl,
    endpoint: String,
    store: Arc<AmazonS3>,
    handle: tokio::runtime::Handle,
    writer: u64,
    write_retry: Duration,
    fence: Option<Arc<dyn Fence>>,
}

/// Appends to one attempt's segment: every group commit is one new object.
#[derive(Debug)]
struct ObjectAppender {
    storage: Arc<ObjectClient>,
    attempt: u32,
    next: u64,
    previous_crc: u32,
}

impl SegmentAppender for ObjectAppender {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let client = &self.storage;
        if let Some(fence) = &client.fence {
            fence.verify()?;
        }
        let n = self.next;
        let object = encode_object(
            OBJECT_KIND_RECORDS,
            self.attempt,
            n,
            client.writer,
            self.previous_crc,
            bytes,
        );
        let crc = trailing_crc(&object);
        let store = Arc::clone(&client.store);
        let path = ObjectPath::from(client.url.key(&object_name(n)));
        let url = client.url.object_url(&object_name(n));
        let budget = client.write_retry;
        let what = format!("creating {url}");
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        client.handle.spawn(async move {
            let payload = PutPayload::from(object);
            let outcome = retrying(budget, &what, || create_object(&store, &path, &payload)).await;
            let _gone = tx.send(outcome);
        });
        let created = rx
            .recv()
            .map_err(|_| io::Error::other("an object store request panicked"))?
            .map_err(|failure| {
                io::Error::other(format!(
                    "object store {}: creating {url}: {}",
                    client.endpoint,
                    failure.describe(budget, "the log's writes", Some("run --log-retry-s"))
                ))
            })?;
        if !created {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{url} already exists: another coordinator extended the job's event log, so this one may not (it is fenced off and stops)"
                ),
            ));
        }
        self.next = n + 1;
        self.previous_crc = crc;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        // Each append is a whole, durable object already.
        Ok(())
    }
}

/// Opens the log at `url` for this coordinator attempt: replays it and
/// creates the object that starts this attempt's segment (conditionally:
/// [`EventsError::Io`] with `AlreadyExists` if another coordinator got it).
///
/// # Errors
/// As [`super::EventLogWriter::open`], and [`EventsError::Store`].
pub fn open_object_log(
    storage: Arc<ObjectStorage>,
    options: super::WriterOptions,
) -> Result<(super::EventLogWriter, super::Replay), EventsError> {
    super::EventLogWriter::open(storage, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objstore::is_transient;

    #[test]
    fn urls_parse_and_bad_ones_are_named() {
        let url = ObjectLogUrl::parse("s3://my-bucket/jobs/wc/").expect("parse");
        assert_eq!(
            (url.bucket.as_str(), url.prefix.as_str()),
            ("my-bucket", "jobs/wc")
        );
        assert_eq!(url.to_string(), "s3://my-bucket/jobs/wc");
        assert_eq!(
            url.object_url(&object_name(7)),
            "s3://my-bucket/jobs/wc/log/00000000000000000007"
        );
        assert_eq!(ObjectLogUrl::parse("s3://b12").expect("bare").prefix, "");
        for (bad, says) in [
            ("/tmp/x", "expected s3://BUCKET/PREFIX"),
            ("s3://", "bucket name ``"),
            ("s3://Upper/x", "bucket name `Upper`"),
            ("s3://bucket/a//b", "empty, `.` or `..` part"),
            ("s3://bucket/a/../b", "empty, `.` or `..` part"),
        ] {
            let error = ObjectLogUrl::parse(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn errors_are_classified_by_their_words_not_by_digits_in_an_address() {
        let generic = |text: &str| object_store::Error::Generic {
            store: "S3",
            source: text.to_owned().into(),
        };
        let unavailable = generic(
            "Error performing PUT http://127.0.0.1:40333/b/p/log/00000000000000000403 - Server returned non-2xx status code: 503 Service Unavailable: <Error><Code>SlowDown</Code></Error>",
        );
        assert!(classify(&unavailable).starts_with("answered with a server error"));
        assert!(is_transient(&unavailable));
        let refused = generic(
            "Error performing GET http://127.0.0.1:9000/b - Server returned non-2xx status code: 403 Forbidden: <Code>SignatureDoesNotMatch</Code>",
        );
        assert!(classify(&refused).starts_with("the store refused the credentials"));
        assert!(!is_transient(&refused));
        let closed = generic(
            "Error performing PUT http://127.0.0.1:15034/b/k - HTTP error: error sending request: connection closed before message completed",
        );
        assert!(classify(&closed).starts_with("cannot be reached"));
        assert!(is_transient(&closed));
    }

    #[test]
    fn objects_round_trip_and_damage_is_named() {
        let bytes = encode_object(OBJECT_KIND_RECORDS, 3, 9, 42, 0xdead_beef, b"frames");
        let object = decode_object(&bytes).ok().expect("decodes");
        assert_eq!(
            (object.kind, object.attempt, object.number, object.writer),
            (OBJECT_KIND_RECORDS, 3, 9, 42)
        );
        assert_eq!(
            (object.previous_crc, object.body.as_slice()),
            (0xdead_beef, &b"frames"[..])
        );
        let why = |bytes: &[u8]| match decode_object(bytes) {
            Err(ObjectProblem::Damaged(why)) => why,
            _ => panic!("not damage"),
        };
        assert!(why(&bytes[..bytes.len() - 1]).contains("cut short"));
        let mut flipped = bytes.clone();
        flipped[OBJECT_HEAD_LEN] ^= 1;
        assert!(why(&flipped).contains("CRC32C"));
        let mut other = bytes.clone();
        other[0] = b'X';
        assert!(why(&other).contains("magic"));
        assert_eq!(parse_object_name("00000000000000000012"), Some(12));
        assert_eq!(parse_object_name("snapshot-00000000-00000001.state"), None);
    }
}
