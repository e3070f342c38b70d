//! Objects of S3-compatible storage outside the event log (issue 30, item 2;
//! docs/object-storage.md, "Grants for plugins"): the URLs `s3://BUCKET/KEY`
//! that plugins name, the store grants of a plugin entry and the rule a URL
//! must pass to lie inside one, the process's clients (endpoint, region and
//! credentials from the `AWS_*` variables, as the object event log reads
//! them), a blocking call with a deadline, and a `Read + Seek` view of one
//! object for the source readers.
//!
//! Plain values and the client; the plugin host serves the WIT
//! `object-store` interface on top of it (`host/wasm/src/objects.rs`), the source
//! readers read `s3://` splits through [`ObjectFile`].

/// The `tracing` target of what this module logs: the name it had as a
/// module of the binary, so `COORDHOST_LOG=coordhost=debug` shows it.
const LOG_TARGET: &str = "coordhost::objstore";

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreExt as _, RetryConfig};

/// Most bytes one ranged read or one put of a plugin moves.
pub const MAX_TRANSFER_BYTES: u64 = 16 << 20;
/// Most objects one listing call of a plugin returns.
pub const MAX_LIST: u32 = 1000;
/// Most bytes fetched at once by [`ObjectFile`]'s reads.
const READ_CHUNK: u64 = 4 << 20;
/// Bytes the first read of [`ObjectFile`] fetches after a seek; each
/// read that goes on where the last fetch ended fetches twice the last,
/// up to [`READ_CHUNK`]. A reader that seeks to a short range (a Parquet
/// column chunk of a few hundred KiB) so fetches at most about twice what
/// it reads, where a fixed 4 MiB fetched 8 times as much (TPC-H Q1 at SF 1
/// moved 1.4 GB for 219 MiB of Parquet: docs/object-storage.md, "Figures").
const FIRST_READ: u64 = 128 << 10;
/// Longest store error kept in a message, bytes.
const MAX_ERROR_LINE: usize = 600;

pub use coordhost_model::object_url::{MAX_KEY_BYTES, ObjectUrl, SCHEME, is_object_url};

/// The object_store path of an [`ObjectUrl`]'s key.
pub trait ObjectUrlPath {
    /// The key as `object_store` names it.
    fn path(&self) -> ObjectPath;
}

impl ObjectUrlPath for ObjectUrl {
    fn path(&self) -> ObjectPath {
        ObjectPath::from(self.key.as_str())
    }
}

/// A folder of a bucket granted to a plugin: one entry of a job file's
/// `plugins.NAME.stores`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoreGrant {
    /// `s3://BUCKET/PREFIX` (the prefix may be empty: the whole bucket).
    pub url: ObjectUrl,
    /// Whether the plugin may put and delete objects under it.
    pub writable: bool,
}

/// Why a URL a plugin named was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not `s3://BUCKET/KEY` with plain parts.
    Invalid(String),
    /// Outside every grant.
    NotGranted(String),
    /// Inside a grant, but a write was asked and none of those grants is writable.
    ReadOnly(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(m) | Self::NotGranted(m) | Self::ReadOnly(m) => f.write_str(m),
        }
    }
}

/// Lists `grants` for a message: `s3://a/b (read-only), s3://c/d (writable)`, or `none`.
#[must_use]
pub fn list_grants(grants: &[StoreGrant]) -> String {
    if grants.is_empty() {
        return "none".into();
    }
    grants
        .iter()
        .map(|g| {
            format!(
                "{} ({})",
                g.url,
                if g.writable { "writable" } else { "read-only" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rule of docs/object-storage.md ("Grants for plugins"): `url` (an
/// object, or with `folder` a folder to list) must parse as a plain
/// `s3://BUCKET/KEY` and lie inside one of `grants` (for a write: a
/// writable one). `plugin` names the plugin in the message.
///
/// # Errors
/// A [`Refusal`] whose message names the plugin, the URL and its grants.
pub fn check_granted(
    plugin: &str,
    grants: &[StoreGrant],
    url: &str,
    write: bool,
    folder: bool,
) -> Result<ObjectUrl, Refusal> {
    let parsed = ObjectUrl::parse(url, false)
        .map_err(|why| Refusal::Invalid(format!("plugin `{plugin}` named {why}")))?;
    let inside: Vec<&StoreGrant> = grants
        .iter()
        .filter(|g| parsed.within(&g.url, folder))
        .collect();
    if inside.is_empty() {
        return Err(Refusal::NotGranted(format!(
            "plugin `{plugin}` named {parsed}, which is outside every store granted to it ({})",
            list_grants(grants)
        )));
    }
    if write && !inside.iter().any(|g| g.writable) {
        return Err(Refusal::ReadOnly(format!(
            "plugin `{plugin}` asked to change {parsed}, but its store grant {} is read-only",
            inside[0].url
        )));
    }
    Ok(parsed)
}

/// The endpoint requests go to, for messages: the `AWS_ENDPOINT_URL*`
/// variable `object_store` reads, or AWS's regional endpoint.
#[must_use]
pub fn endpoint() -> String {
    for var in ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"] {
        if let Ok(value) = std::env::var(var)
            && !value.is_empty()
        {
            return value;
        }
    }
    let region = std::env::var("AWS_REGION")
        .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
        .unwrap_or_else(|_| "us-east-1".to_owned());
    format!("https://s3.{region}.amazonaws.com")
}

/// One line for a store error: its chain of causes, line breaks folded,
/// any credential value of the environment removed, cut to 600 bytes.
#[must_use]
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    let mut line = parts.join(": ");
    for var in [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ACCESS_KEY_ID",
    ] {
        if let Ok(value) = std::env::var(var)
            && value.len() >= 4
        {
            line = line.replace(&value, "<redacted>");
        }
    }
    if line.len() > MAX_ERROR_LINE {
        let mut cut = MAX_ERROR_LINE;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push('…');
    }
    line
}

/// How long a write (of the event log, of a sink's part) keeps trying
/// through a store that fails transiently (unreachable, 5xx, timeouts)
/// before it gives up, by default (the log's: `run --log-retry-s`).
pub const DEFAULT_WRITE_RETRY: Duration = Duration::from_secs(30);
/// The first pause between two tries of a write; it doubles up to
/// [`WRITE_RETRY_MAX_PAUSE`].
const WRITE_RETRY_FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause between two tries of a write.
const WRITE_RETRY_MAX_PAUSE: Duration = Duration::from_secs(4);

/// True for an error that may pass if the write is tried again: the store
/// could not be reached, timed out or answered with a server error. An
/// answer about the object (it exists, a precondition) or about who asks
/// (credentials, a missing bucket) does not change on its own.
pub fn is_transient(error: &object_store::Error) -> bool {
    use object_store::Error as E;
    match error {
        E::AlreadyExists { .. }
        | E::NotFound { .. }
        | E::Precondition { .. }
        | E::NotModified { .. }
        | E::NotImplemented { .. }
        | E::NotSupported { .. }
        | E::InvalidPath { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::UnknownConfigurationKey { .. } => false,
        other => {
            let said = classify(other);
            !said.starts_with("the bucket does not exist")
                && !said.starts_with("the store refused the credentials")
        }
    }
}

/// A write that failed for good: the last error, and how long and how
/// often it was tried.
pub struct WriteFailure {
    /// The last error.
    pub error: object_store::Error,
    tries: u32,
    spent: Duration,
}

impl WriteFailure {
    /// The problem in one line: what the store said, and for a transient
    /// error that the retries ran out.
    /// `whose` names the writes (`the log's writes`), `knob` how to give
    /// them longer, if there is a way.
    pub fn describe(&self, budget: Duration, whose: &str, knob: Option<&str>) -> String {
        let said = classify(&self.error);
        if is_transient(&self.error) {
            format!(
                "{said}; gave up after {} tries over {:.1} s ({whose} retry for {} s{})",
                self.tries,
                self.spent.as_secs_f64(),
                budget.as_secs(),
                knob.map(|k| format!(": {k}")).unwrap_or_default()
            )
        } else {
            said
        }
    }
}

/// Runs `attempt` again after a transient failure, with pauses that double
/// from [`WRITE_RETRY_FIRST_PAUSE`] up to [`WRITE_RETRY_MAX_PAUSE`], as long
/// as the next try starts within `budget` of the first. Each try is itself
/// bounded by the client's timeouts and its own few retries.
pub async fn retrying<T, F, Fut>(
    budget: Duration,
    what: &str,
    mut attempt: F,
) -> Result<T, WriteFailure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, object_store::Error>>,
{
    let started = tokio::time::Instant::now();
    let mut pause = WRITE_RETRY_FIRST_PAUSE;
    let mut tries = 1;
    loop {
        match attempt().await {
            Ok(done) => return Ok(done),
            Err(error) if is_transient(&error) && started.elapsed() + pause < budget => {
                tracing::warn!(
                    target: LOG_TARGET, "object store: {what}: try {tries} failed, trying again in {} ms: {}",
                    pause.as_millis(),
                    classify(&error)
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(WRITE_RETRY_MAX_PAUSE);
                tries += 1;
            }
            Err(error) => {
                return Err(WriteFailure {
                    error,
                    tries,
                    spent: started.elapsed(),
                });
            }
        }
    }
}

/// Files above this size are uploaded in parts (a multipart upload of
/// 8 MiB parts): sink parts and result partitions.
pub const MULTIPART_ABOVE: u64 = 8 << 20;

/// Why an upload failed.
pub enum Upload {
    /// The staging file could not be read.
    Read(io::Error),
    /// The store refused or failed.
    Store(object_store::Error),
}

/// Uploads `file` (`size` bytes) as `path`: one PUT up to
/// [`MULTIPART_ABOVE`], a multipart upload of 8 MiB parts above (aborted
/// when it fails, so no unfinished upload is left).
pub async fn upload(
    store: Arc<dyn object_store::ObjectStore>,
    path: object_store::path::Path,
    file: std::path::PathBuf,
    size: u64,
) -> Result<(), Upload> {
    use object_store::ObjectStoreExt as _;
    if size <= MULTIPART_ABOVE {
        let body = std::fs::read(&file).map_err(Upload::Read)?;
        store
            .put(&path, bytes::Bytes::from(body).into())
            .await
            .map_err(Upload::Store)?;
        return Ok(());
    }
    const PART: usize = 8 << 20;
    let mut f = std::fs::File::open(&file).map_err(Upload::Read)?;
    let started = store.put_multipart(&path).await.map_err(Upload::Store)?;
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(started, PART);
    let mut buf = vec![0_u8; PART];
    loop {
        let n = match read_full(&mut f, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                let _ignored = writer.abort().await;
                return Err(Upload::Read(e));
            }
        };
        if n == 0 {
            break;
        }
        if let Err(e) = writer.wait_for_capacity(2).await {
            let _ignored = writer.abort().await;
            return Err(Upload::Store(e));
        }
        writer.write(&buf[..n]);
    }
    writer.finish().await.map_err(Upload::Store)?;
    Ok(())
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match f.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// What an object store error means, in words for the one line. Status
/// codes are matched with the words around them (`status code: 403`),
/// never as bare digits: a port or a key may hold any digits. Shared by
/// the event log on objects and the sink output on objects.
#[must_use]
pub fn classify(error: &object_store::Error) -> String {
    let detail = error_line(error);
    let lower = detail.to_ascii_lowercase();
    let what = if lower.contains("nosuchbucket") || lower.contains("bucket does not exist") {
        "the bucket does not exist"
    } else if lower.contains("invalidaccesskeyid")
        || lower.contains("signaturedoesnotmatch")
        || lower.contains("accessdenied")
        || lower.contains("access denied")
        || lower.contains("status code: 403")
        || lower.contains("403 forbidden")
    {
        "the store refused the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
    } else if lower.contains("error sending request")
        || lower.contains("connect")
        || lower.contains("timed out")
        || lower.contains("dns")
    {
        "cannot be reached"
    } else if lower.contains("status code: 5")
        || lower.contains("service unavailable")
        || lower.contains("slowdown")
        || lower.contains("server error")
    {
        "answered with a server error"
    } else {
        "failed"
    };
    format!("{what} ({detail})")
}

/// Asks the store of `url` for one object under it (a listing): what went
/// wrong in words (`the bucket does not exist (…)`, `cannot be reached
/// (…)`, [`classify`]) when it cannot be used. Credentials never appear.
///
/// # Errors
/// The sentence, without the endpoint (the caller names it and its place).
pub fn probe(url: &ObjectUrl) -> Result<(), String> {
    use futures::StreamExt as _;
    let store = client(&url.bucket)?;
    let prefix = url.path();
    let first = block(
        async move { store.list(Some(&prefix)).next().await.transpose() },
        None,
    )
    .map_err(|e| match e {
        Blocked::Deadline => "no answer in time".to_owned(),
        Blocked::Failed(why) => why,
    })?;
    match first {
        Ok(_) => Ok(()),
        // A listing finds no object, never "not found": the bucket is.
        Err(e @ object_store::Error::NotFound { .. }) => {
            Err(format!("the bucket does not exist ({})", error_line(&e)))
        }
        Err(e) => Err(classify(&e)),
    }
}

/// The process's clients, one per bucket, made on first use.
fn clients() -> &'static Mutex<HashMap<String, Arc<dyn ObjectStore>>> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    CLIENTS.get_or_init(Mutex::default)
}

/// The client of `bucket`: `object_store`'s S3 client with endpoint,
/// region and credentials from the `AWS_*` variables (as the event log's),
/// at most 3 retries within 20 s, a 5 s connect timeout. Made once per
/// bucket and process.
///
/// # Errors
/// A line naming the endpoint when the client cannot be configured.
pub fn client(bucket: &str) -> Result<Arc<dyn ObjectStore>, String> {
    let mut map = clients().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(store) = map.get(bucket) {
        return Ok(store.clone());
    }
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(20),
    };
    let store = AmazonS3Builder::from_env()
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            "5s",
        )
        .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), "60s")
        .with_bucket_name(bucket)
        .with_retry(retry)
        .build()
        .map_err(|e| {
            format!(
                "object store {}: cannot be configured ({})",
                endpoint(),
                error_line(&e)
            )
        })?;
    let store: Arc<dyn ObjectStore> = Arc::new(store);
    map.insert(bucket.to_owned(), store.clone());
    Ok(store)
}

/// The runtime object requests run on (2 threads, made on first use).
fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("object-store")
                .enable_all()
                .build()
                .map_err(|e| format!("no runtime for the object store client: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Why [`block`] gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// The deadline passed first (the request is abandoned).
    Deadline,
    /// No runtime, or the request panicked.
    Failed(String),
}

/// Runs `future` on the object store runtime and waits for its answer,
/// until `deadline` at the latest. Callable from any thread, also one
/// inside another runtime.
///
/// # Errors
/// [`Blocked::Deadline`] when the deadline passed, [`Blocked::Failed`]
/// when there is no runtime or the request panicked.
pub fn block<T: Send + 'static>(
    future: impl Future<Output = T> + Send + 'static,
    deadline: Option<Instant>,
) -> Result<T, Blocked> {
    let runtime = runtime().map_err(Blocked::Failed)?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let task = runtime.spawn(async move {
        let _gone = tx.send(future.await);
    });
    let answer = match deadline {
        Some(at) => rx
            .recv_timeout(at.saturating_duration_since(Instant::now()))
            .map_err(|e| match e {
                std::sync::mpsc::RecvTimeoutError::Timeout => Blocked::Deadline,
                std::sync::mpsc::RecvTimeoutError::Disconnected => {
                    Blocked::Failed("an object store request panicked".into())
                }
            }),
        None => rx
            .recv()
            .map_err(|_| Blocked::Failed("an object store request panicked".into())),
    };
    if answer.is_err() {
        task.abort();
    }
    answer
}

/// One object read as a file: its size from a HEAD at open, its bytes by
/// ranged GETs as they are read (128 KiB after a seek, doubling up to
/// 4 MiB while the reads go on in order). What the source readers read an
/// `s3://` split through. A clone shares the client and starts where the
/// original stands.
#[derive(Clone)]
pub struct ObjectFile {
    url: ObjectUrl,
    store: Arc<dyn ObjectStore>,
    size: u64,
    pos: u64,
    /// The bytes fetched last and where they start.
    chunk: (u64, bytes::Bytes),
    /// How many bytes the next fetch of a read asks for, if it goes on
    /// where the last ended ([`FIRST_READ`] doubling to [`READ_CHUNK`]).
    ahead: u64,
}

impl fmt::Debug for ObjectFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectFile")
            .field("url", &self.url.to_string())
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// An `io::Error` for a store error on `url`, naming the endpoint.
fn io_error(url: &ObjectUrl, error: &object_store::Error) -> io::Error {
    let kind = if matches!(error, object_store::Error::NotFound { .. }) {
        io::ErrorKind::NotFound
    } else {
        io::ErrorKind::Other
    };
    io::Error::new(
        kind,
        format!("object store {} ({url}): {}", endpoint(), error_line(error)),
    )
}

impl ObjectFile {
    /// Opens `url` (a HEAD for its size).
    ///
    /// # Errors
    /// An `io::Error` naming the endpoint and the URL (`NotFound` for a
    /// missing object).
    pub fn open(url: &ObjectUrl) -> io::Result<Self> {
        let store = client(&url.bucket).map_err(io::Error::other)?;
        let (s, path) = (store.clone(), url.path());
        let meta = block(async move { s.head(&path).await }, None)
            .map_err(|e| io::Error::other(format!("{e:?}")))?
            .map_err(|e| io_error(url, &e))?;
        Ok(Self {
            url: url.clone(),
            store,
            size: meta.size,
            pos: 0,
            chunk: (0, bytes::Bytes::new()),
            ahead: FIRST_READ,
        })
    }

    /// The object's size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes `[start, end)` of the object, fetched now.
    ///
    /// # Errors
    /// As [`ObjectFile::open`].
    pub fn fetch(&self, start: u64, end: u64) -> io::Result<bytes::Bytes> {
        let end = end.min(self.size);
        if start >= end {
            return Ok(bytes::Bytes::new());
        }
        let (s, path) = (self.store.clone(), self.url.path());
        block(async move { s.get_range(&path, start..end).await }, None)
            .map_err(|e| io::Error::other(format!("{e:?}")))?
            .map_err(|e| io_error(&self.url, &e))
    }
}

impl ObjectFile {
    /// The bytes of each of `ranges` (each `start..end`, inside the
    /// object), fetched together: ranges less than 1 MiB apart are joined
    /// into one ranged GET and up to 10 GETs run at once (`object_store`'s
    /// `get_ranges`).
    ///
    /// # Errors
    /// As [`ObjectFile::open`].
    pub fn fetch_ranges(&self, ranges: Vec<std::ops::Range<u64>>) -> io::Result<Vec<bytes::Bytes>> {
        let (s, path) = (self.store.clone(), self.url.path());
        block(async move { s.get_ranges(&path, &ranges).await }, None)
            .map_err(|e| io::Error::other(format!("{e:?}")))?
            .map_err(|e| io_error(&self.url, &e))
    }
}

impl Read for ObjectFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || self.pos >= self.size {
            return Ok(0);
        }
        let (at, bytes) = &self.chunk;
        let end = at + bytes.len() as u64;
        let inside = self.pos >= *at && self.pos < end;
        if !inside {
            // Read-ahead grows while the reads go on in order.
            self.ahead = if self.pos == end && !bytes.is_empty() {
                (self.ahead * 2).min(READ_CHUNK)
            } else {
                FIRST_READ
            };
            let fetched = self.fetch(self.pos, self.pos.saturating_add(self.ahead))?;
            if fetched.is_empty() {
                return Ok(0);
            }
            self.chunk = (self.pos, fetched);
        }
        let (at, bytes) = &self.chunk;
        let offset = usize::try_from(self.pos - at).unwrap_or(usize::MAX);
        let n = buf.len().min(bytes.len() - offset);
        buf[..n].copy_from_slice(&bytes[offset..offset + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for ObjectFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = target.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before the object's start",
            )
        })?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(url: &str, writable: bool) -> StoreGrant {
        StoreGrant {
            url: ObjectUrl::parse(url, true).expect("a grant URL"),
            writable,
        }
    }

    #[test]
    fn urls_parse_and_tricks_are_refused() {
        let u = ObjectUrl::parse("s3://bucket-1/a/b=c/d.csv", false).expect("plain");
        assert_eq!(
            (u.bucket.as_str(), u.key.as_str()),
            ("bucket-1", "a/b=c/d.csv")
        );
        assert_eq!(ObjectUrl::parse("s3://bkt/", true).expect("bucket").key, "");
        assert_eq!(
            ObjectUrl::parse("s3://bkt/dir/", false)
                .expect("folder")
                .key,
            "dir"
        );
        for bad in [
            "s3://bkt/a/../b",
            "s3://bkt/a/./b",
            "s3://bkt/..",
            "s3://bkt//a",
            "s3://bkt/a//b",
            "s3://bkt/a%2F..%2Fb",
            "s3://bkt/a\\..\\b",
            "s3://bkt/a\nb",
            "s3://bkt/a b",
            "s3://bkt",
            "s3://BKT/a",
            "s3://b/a",
            "s3://.bkt/a",
            "http://bkt/a",
            "/bkt/a",
        ] {
            assert!(ObjectUrl::parse(bad, false).is_err(), "{bad:?} accepted");
        }
        let long = format!("s3://bkt/{}", "k".repeat(MAX_KEY_BYTES + 1));
        assert!(ObjectUrl::parse(&long, false).is_err());
    }

    #[test]
    fn keys_lie_inside_a_grant_only_below_its_prefix() {
        let grants = [grant("s3://bkt/data", false), grant("s3://bkt/out", true)];
        let ok = |url: &str, write: bool| check_granted("p", &grants, url, write, false);
        assert!(ok("s3://bkt/data/x.csv", false).is_ok());
        assert!(ok("s3://bkt/data/deep/x.csv", false).is_ok());
        assert!(ok("s3://bkt/out/x", true).is_ok());
        for (url, write) in [
            ("s3://bkt/data-old/x.csv", false),
            ("s3://bkt/datax", false),
            ("s3://bkt/data", false),
            ("s3://other/data/x.csv", false),
            ("s3://bkt/secret/x", false),
            ("s3://bkt/data/../secret/x", false),
        ] {
            let e = ok(url, write).expect_err(url);
            assert!(
                matches!(e, Refusal::NotGranted(_) | Refusal::Invalid(_)),
                "{url}: {e}"
            );
        }
        let e = ok("s3://bkt/data/x.csv", true).expect_err("read-only");
        assert!(matches!(e, Refusal::ReadOnly(_)), "{e}");
        assert!(e.to_string().contains("read-only"), "{e}");
        let e = ok("s3://bkt/secret/x", false).expect_err("outside");
        assert_eq!(
            e.to_string(),
            "plugin `p` named s3://bkt/secret/x, which is outside every store granted to it (s3://bkt/data (read-only), s3://bkt/out (writable))"
        );
        // A folder to list may be the grant itself.
        assert!(check_granted("p", &grants, "s3://bkt/data", false, true).is_ok());
        assert!(check_granted("p", &grants, "s3://bkt/dat", false, true).is_err());
        // No grants: nothing.
        let e = check_granted("p", &[], "s3://bkt/data/x", false, false).expect_err("none");
        assert!(e.to_string().ends_with("(none)"), "{e}");
        // A grant of the whole bucket holds every key of it, not another bucket's.
        let whole = [grant("s3://bkt", false)];
        assert!(check_granted("p", &whole, "s3://bkt/a", false, false).is_ok());
        assert!(check_granted("p", &whole, "s3://bkt2/a", false, false).is_err());
    }
}
