//! `coordhost worker`: a worker process (Flink's TaskManager).
//!
//! It registers with the coordinator (reporting the finished partitions it
//! still holds), heartbeats every interval the coordinator names, and runs
//! the attempts it is deployed on a pool of `slots` threads with
//! [`coordhost_data::runtime::run_task`]. Result partitions go below
//! `<data-dir>/partitions/` at the path the shuffle master chose relative
//! to its grant; sink output is staged below `<data-dir>/sink/` and only
//! ever leaves through the coordinator's `FetchSinkOutput`, which the
//! coordinator calls after accepting the attempt's report: a worker never
//! publishes on its own.
//!
//! When the coordinator is gone (no successful heartbeat for the timeout,
//! or it no longer knows this worker), the worker cancels its running
//! attempts, keeps its finished partitions for `--keep-partitions-ms` and
//! registers again with backoff. Partitions nobody claimed by then are
//! deleted.
//!
//! A coordinator whose job ended says so before it exits (`Goodbye`, issue
//! 31): the worker then waits for the next coordinator in the same way,
//! saying so in one line instead of warning that it lost the coordinator.
//! With `--exit-when-idle` ([`WorkerOptions::exit_when_idle`]) it exits
//! instead, once no attempt runs, or, after a coordinator that vanished
//! without a goodbye, once it has been without one for the keep time.

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::components::{ComponentSource, WorkerComponents};
use super::functions::WorkerFunctions;
use super::readers::WorkerReaders;
use super::task::{RemoteVertex, from_wire, plain_relative, to_wire};
use crate::rpc::{self, coordinator_client::CoordinatorClient, worker_server};
use coordhost_data::runtime::{
    InputPartition, OutputPlace, PartitionFetch, SplitSource, TaskError, TaskInput, TaskOutput,
    TaskReport, TaskSpec, WorkerPool, run_task, sink,
};
use coordhost_data::shuffle::{
    ExpectedPartition, PartitionProducer, ShuffleError, SubpartitionReader,
};
use coordhost_io::grant::{DirGrant, Grants};
use coordhost_model::graph::AttemptId;
use coordhost_model::value::SplitData;

/// How to run a worker process.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The coordinator's `HOST:PORT` (its `--listen`), or, with high
    /// availability, `etcd://HOST:PORT[,...]/JOB`: the worker asks etcd
    /// which coordinator leads job `JOB` each time it registers
    /// (`coordhost_ha::leader_address`).
    pub coordinator: String,
    /// Where this worker keeps its partitions and staged sink output.
    pub data_dir: PathBuf,
    /// Attempts run at once (Flink's task slots), at least 1.
    pub slots: usize,
    /// Where this worker's own service listens (`HOST:PORT`; port 0 picks
    /// a free one). The address registered is the one bound.
    pub listen: String,
    /// How long finished partitions are kept while no coordinator is
    /// reachable (Flink's previous-worker timeout, seen from the worker).
    pub keep_partitions: Duration,
    /// The worker's id; default `w-<pid>-<port>`, or with TLS the one its
    /// certificate names.
    pub id: Option<String>,
    /// Mutual TLS (issue 25): this worker's certificate, key and the
    /// cluster's CA. None: plain gRPC (loopback only, or
    /// `--insecure-listen`).
    pub tls: Option<crate::tls::TlsFiles>,
    /// With `etcds://`: the CA, client certificate and user for etcd.
    pub etcd: coordhost_ha::EtcdSecurity,
    /// The compiled-component cache the job's scalar functions and source
    /// readers are compiled through (`--cache-dir`); default
    /// `<data-dir>/cache`.
    pub cache_dir: Option<PathBuf>,
    /// `--exit-when-idle`: return (exit 0) once the job served has ended
    /// (the coordinator's `Goodbye`) and no attempt runs, or once no
    /// coordinator has answered for `keep_partitions` after the one served
    /// was lost without a goodbye (Spark's dynamic allocation releasing an
    /// idle executor). Held partitions are deleted first. With high
    /// availability, the goodbye of a leader that was *stopped* does not
    /// count: a standby may take the job over, so only the keep time does.
    /// A worker that never registered waits as long as it takes.
    pub exit_when_idle: bool,
}

/// Why a worker process stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// A folder, the listening socket or the async runtime could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What failed, naming the path or address.
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An argument is wrong (an address that does not parse).
    #[error("{0}")]
    Argument(String),
    /// The coordinator refused the registration (another protocol version).
    #[error("the coordinator at {coordinator} refused this worker: {reason}")]
    Refused {
        /// The coordinator's address.
        coordinator: String,
        /// Its words.
        reason: String,
    },
}

/// A finished partition this worker holds.
#[derive(Debug, Clone)]
struct Held {
    job: String,
    producer: AttemptId,
    edge: u32,
    location: PathBuf,
    bytes: Vec<u64>,
}

/// What the worker's threads share.
struct State {
    id: String,
    address: String,
    /// The coordinator's address; with etcd, the leader found last.
    coordinator: Mutex<String>,
    /// With high availability: where to look the leader up, and the job.
    leader_from: Option<coordhost_ha::EtcdUrl>,
    /// With high availability: the newest term registered with; an older
    /// leader is never registered with again.
    newest_term: Mutex<u64>,
    /// Longest wait for the coordinator's answer to a report: its
    /// heartbeat timeout. A coordinator that does not answer (dead, or
    /// paused) refuses the report, so a canceled attempt never waits on it
    /// and the worker can register with another one.
    report_timeout: Mutex<Duration>,
    /// With high availability: why it last waited for a leader (said once).
    waiting_note: Mutex<String>,
    partitions: PathBuf,
    sinks: PathBuf,
    /// Where partitions bound for object storage are staged before their
    /// upload (`<data dir>/shuffle-staging`).
    staging: PathBuf,
    /// The one writable grant of this worker: its partition root.
    grants: Grants,
    handle: Handle,
    pool: WorkerPool,
    /// The session of the coordinator this worker is registered with.
    session: Mutex<Option<u64>>,
    /// Cancel flags of running attempts.
    running: Mutex<HashMap<AttemptId, Arc<AtomicBool>>>,
    held: Mutex<Vec<Held>>,
    /// Channels by (address, the name the peer's certificate must carry).
    channels: Mutex<HashMap<(String, String), Channel>>,
    /// With TLS: this worker's identity (its job and id).
    tls: Option<crate::tls::ClusterTls>,
    /// The read-grant key of the session registered with.
    read_grants: Mutex<Option<crate::tls::ReadGrants>>,
    /// The job's scalar functions, loaded at their first call.
    functions: Arc<WorkerFunctions>,
    /// The source readers of the job's tables, loaded before the first
    /// scan task of their table runs here.
    readers: WorkerReaders,
    /// The last `Goodbye` accepted, not yet acted on by the heartbeat loop.
    goodbye: Mutex<Option<Goodbye>>,
    /// Wakes the heartbeat loop when a `Goodbye` is accepted.
    goodbye_said: tokio::sync::Notify,
}

/// A coordinator's `Goodbye`: its job ended.
#[derive(Debug, Clone)]
struct Goodbye {
    /// The session it was said in.
    session: u64,
    /// The job, cut to one line of at most 80 characters (for messages).
    job: String,
    /// How it ended.
    end: rpc::JobEnd,
}

/// `end` in words: `finished`, `failed`, `stopped`, `cancelled`, or
/// `unspecified`.
fn end_name(end: rpc::JobEnd) -> &'static str {
    match end {
        rpc::JobEnd::Finished => "finished",
        rpc::JobEnd::Failed => "failed",
        rpc::JobEnd::Stopped => "stopped",
        rpc::JobEnd::Cancelled => "cancelled",
        rpc::JobEnd::Unspecified => "unspecified",
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl State {
    fn session(&self) -> Option<u64> {
        *lock(&self.session)
    }

    /// A channel to `address` (lazily connected, cached); with TLS, to a
    /// peer whose certificate carries `peer` (a name of [`crate::tls`]).
    fn channel(&self, address: &str, peer: &str) -> Result<Channel, String> {
        let key = (address.to_owned(), peer.to_owned());
        if let Some(c) = lock(&self.channels).get(&key) {
            return Ok(c.clone());
        }
        let endpoint = crate::tls::endpoint(
            address,
            self.tls.as_ref().map(|t| (t, peer)),
            Duration::from_secs(2),
        )?;
        // A lazy channel spawns its connection task on the runtime, so
        // it needs the runtime's context on a plain (pool) thread too.
        let _context = self.handle.enter();
        let c = endpoint.connect_lazy();
        lock(&self.channels).insert(key, c.clone());
        Ok(c)
    }

    /// The name a coordinator of this worker's job carries (TLS), or "".
    fn coordinator_peer(&self) -> String {
        self.tls
            .as_ref()
            .map(|t| crate::tls::coordinator_name(t.job()))
            .unwrap_or_default()
    }

    /// The name every worker of this worker's job carries (TLS), or "".
    fn worker_peer(&self) -> String {
        self.tls
            .as_ref()
            .map(|t| crate::tls::any_worker_name(t.job()))
            .unwrap_or_default()
    }

    fn coordinator(&self) -> String {
        lock(&self.coordinator).clone()
    }

    fn coordinator_client(&self) -> Result<CoordinatorClient<Channel>, String> {
        Ok(
            CoordinatorClient::new(self.channel(&self.coordinator(), &self.coordinator_peer())?)
                .max_decoding_message_size(rpc::MAX_MESSAGE_BYTES),
        )
    }

    /// Cancels every running attempt (the coordinator is gone).
    fn cancel_all(&self) {
        for flag in lock(&self.running).values() {
            flag.store(true, Ordering::Relaxed);
        }
    }

    fn partition_path(&self, location: &Path) -> PathBuf {
        self.partitions.join(location)
    }

    fn sink_dir(&self, job: &str, vertex: &str) -> PathBuf {
        self.sinks.join(job).join(vertex)
    }

    /// Deletes partitions below the root (plain relative locations only).
    fn delete_partitions(&self, locations: &[PathBuf]) {
        for l in locations {
            let dir = self.partition_path(l);
            match self.grants.writable_dir(&dir).map(|d| d.remove_all()) {
                Ok(Ok(())) => {
                    tracing::debug!(target: crate::LOG_TARGET, "deleted partition {}", dir.display())
                }
                Ok(Err(e)) | Err(e) => {
                    tracing::warn!(target: crate::LOG_TARGET, "deleting {}: {e}", dir.display())
                }
            }
        }
    }

    fn held_on_wire(&self) -> (String, Vec<rpc::HeldPartition>) {
        let held = lock(&self.held);
        let job = held.first().map(|h| h.job.clone()).unwrap_or_default();
        let list = held
            .iter()
            .filter(|h| h.job == job)
            .map(|h| rpc::HeldPartition {
                producer: Some(to_wire(h.producer)),
                edge: h.edge,
                location: h.location.to_string_lossy().into_owned(),
                bytes_per_subpartition: h.bytes.clone(),
            })
            .collect();
        (job, list)
    }
}

/// Runs a worker process until it is killed.
///
/// # Errors
///
/// [`WorkerError`] when it cannot start (folders, socket, runtime) or the
/// coordinator refuses it for good (another protocol version).
pub fn run_worker(opts: &WorkerOptions) -> Result<(), WorkerError> {
    let leader_from = leader_lookup(opts)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("coordhost-worker-rpc")
        .build()
        .map_err(io_error("the async runtime".into()))?;
    let (partitions, sinks, staging) = fresh_data_dirs(&opts.data_dir)?;
    let listen: SocketAddr = opts
        .listen
        .parse()
        .map_err(|e| WorkerError::Argument(format!("--listen `{}`: {e}", opts.listen)))?;
    let tls = match &opts.tls {
        Some(files) => Some(
            crate::tls::ClusterTls::worker(files, opts.id.as_deref())
                .map_err(|e| WorkerError::Argument(e.to_string()))?,
        ),
        None => None,
    };
    let (listener, bound) = bind_listener(listen)?;
    let id = match tls.as_ref().map(crate::tls::ClusterTls::role) {
        Some(crate::tls::Role::Worker { id }) => id.clone(),
        _ => opts
            .id
            .clone()
            .unwrap_or_else(|| format!("w-{}-{}", std::process::id(), bound.port())),
    };
    let tls_config = tls.as_ref().map(crate::tls::ClusterTls::server_config);
    let pool = WorkerPool::new(opts.slots.max(1)).map_err(io_error("worker threads".into()))?;
    // Every component a task needs (a scalar function's, a source
    // reader's): bytes by hash here, machine code in the cache.
    let components = Arc::new(WorkerComponents::new(
        &id,
        opts.data_dir.join("components"),
        Some(
            opts.cache_dir
                .clone()
                .unwrap_or_else(|| opts.data_dir.join("cache")),
        ),
    ));
    let state = Arc::new(State {
        id: id.clone(),
        address: bound.to_string(),
        coordinator: Mutex::new(if leader_from.is_some() {
            String::new()
        } else {
            opts.coordinator.clone()
        }),
        leader_from,
        newest_term: Mutex::new(0),
        report_timeout: Mutex::new(Duration::from_secs(2)),
        waiting_note: Mutex::new(String::new()),
        grants: Grants::new(
            &format!("worker {id}"),
            &[DirGrant {
                host: partitions.clone(),
                writable: true,
            }],
        ),
        partitions,
        sinks,
        staging,
        handle: rt.handle().clone(),
        pool,
        session: Mutex::new(None),
        running: Mutex::new(HashMap::new()),
        held: Mutex::new(Vec::new()),
        channels: Mutex::new(HashMap::new()),
        tls,
        read_grants: Mutex::new(None),
        functions: Arc::new(WorkerFunctions::new(components.clone())),
        readers: WorkerReaders::new(components),
        goodbye: Mutex::new(None),
        goodbye_said: tokio::sync::Notify::new(),
    });
    spawn_service(&rt, &state, listener, tls_config);
    tracing::info!(target: crate::LOG_TARGET, worker = %id, address = %bound, coordinator = %opts.coordinator, tls = opts.tls.is_some(), "worker started");
    coordhost_io::stderr_line!("coordhost worker {id}: serving on {bound}");
    rt.block_on(stay_registered(
        state,
        opts.keep_partitions,
        opts.exit_when_idle,
    ))
}

/// The `map_err` of an I/O error into [`WorkerError::Io`] naming `what` failed.
fn io_error(what: String) -> impl FnOnce(std::io::Error) -> WorkerError {
    move |source| WorkerError::Io { what, source }
}

/// With high availability (an `etcd://` `--coordinator`): where to look the
/// job's leader up; checks that the URL names the job. None otherwise.
fn leader_lookup(opts: &WorkerOptions) -> Result<Option<coordhost_ha::EtcdUrl>, WorkerError> {
    if !coordhost_ha::EtcdUrl::is_etcd(&opts.coordinator) {
        return Ok(None);
    }
    let etcd = coordhost_ha::EtcdUrl::parse(&opts.coordinator)
        .and_then(|u| u.with_security(opts.etcd.clone()))
        .map_err(|e| WorkerError::Argument(format!("--coordinator: {e}")))?;
    if etcd.path.is_empty() || etcd.path.contains('/') {
        return Err(WorkerError::Argument(format!(
            "--coordinator `{}`: name the job after the endpoints (etcd://HOST:PORT/JOB)",
            opts.coordinator
        )));
    }
    Ok(Some(etcd))
}

/// Empties and creates the partition, sink and shuffle-staging folders
/// below `data_dir`; returns them, the partition folder canonical.
fn fresh_data_dirs(data_dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf), WorkerError> {
    let partitions = data_dir.join("partitions");
    let sinks = data_dir.join("sink");
    let staging = data_dir.join("shuffle-staging");
    for d in [&partitions, &sinks, &staging] {
        // A new worker process holds nothing: what an earlier one left in
        // its data directory is nobody's (no coordinator can claim files
        // this process never reported).
        if d.exists() {
            std::fs::remove_dir_all(d).map_err(io_error(format!("--data-dir {}", d.display())))?;
        }
        std::fs::create_dir_all(d).map_err(io_error(format!("--data-dir {}", d.display())))?;
    }
    let partitions = std::fs::canonicalize(&partitions)
        .map_err(io_error(format!("--data-dir {}", partitions.display())))?;
    Ok((partitions, sinks, staging))
}

/// Binds the worker's service socket (non-blocking) at `listen`; returns it
/// and the address bound.
fn bind_listener(listen: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr), WorkerError> {
    let listener =
        std::net::TcpListener::bind(listen).map_err(io_error(format!("--listen {listen}")))?;
    listener
        .set_nonblocking(true)
        .map_err(io_error(format!("--listen {listen}")))?;
    let bound = listener
        .local_addr()
        .map_err(io_error(format!("--listen {listen}")))?;
    Ok((listener, bound))
}

/// Serves the worker's gRPC service on `listener` from the runtime `rt`.
fn spawn_service(
    rt: &tokio::runtime::Runtime,
    state: &Arc<State>,
    listener: std::net::TcpListener,
    tls_config: Option<Arc<rustls::ServerConfig>>,
) {
    let service = worker_server::WorkerServer::new(Service {
        state: state.clone(),
    })
    .max_decoding_message_size(rpc::MAX_MESSAGE_BYTES)
    .max_encoding_message_size(rpc::MAX_MESSAGE_BYTES);
    rt.spawn(async move {
        let incoming = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(target: crate::LOG_TARGET, "worker service: {e}");
                return;
            }
        };
        let router = crate::tls::server_builder().add_service(service);
        if let Err(e) = crate::tls::serve(router, incoming, tls_config, "worker service").await {
            tracing::error!(target: crate::LOG_TARGET, "worker service: {e}");
        }
    });
}

/// Registers, heartbeats while the coordinator answers, and registers again
/// (with backoff) when it does not or its job ended; forever, until refused
/// for good, or, with `exit_when_idle`, until idle
/// ([`WorkerOptions::exit_when_idle`]).
async fn stay_registered(
    state: Arc<State>,
    keep: Duration,
    exit_when_idle: bool,
) -> Result<(), WorkerError> {
    let mut backoff = Duration::from_millis(50);
    let mut lost_since: Option<Instant> = None;
    // Since when this worker has had no coordinator (after serving one),
    // and whether the last one said its job ended: what
    // `--exit-when-idle` goes by. Attempts of the old session have all
    // stopped whenever the loop comes back here.
    let mut idle_since: Option<Instant> = None;
    let mut job_ended = false;
    loop {
        if exit_when_idle && exits_idle(&state, keep, job_ended, idle_since) {
            return Ok(());
        }
        if let Some(etcd) = &state.leader_from
            && !find_leader(&state, etcd).await
        {
            retry_later(&state, keep, &mut lost_since, &mut backoff).await;
            continue;
        }
        let Some(reg) = register(&state).await? else {
            retry_later(&state, keep, &mut lost_since, &mut backoff).await;
            continue;
        };
        backoff = Duration::from_millis(50);
        *lock(&state.read_grants) = Some(crate::tls::ReadGrants::from_bytes(&reg.read_key));
        *lock(&state.session) = Some(reg.session);
        tracing::info!(target: crate::LOG_TARGET, worker = %state.id, session = reg.session, "registered");
        let interval = Duration::from_millis(reg.heartbeat_interval_ms.max(10));
        let timeout = Duration::from_millis(reg.heartbeat_timeout_ms.max(100));
        *lock(&state.report_timeout) = timeout;
        let goodbye = heartbeat_while_known(&state, reg.session, interval, timeout).await;
        *lock(&state.session) = None;
        job_ended = note_session_end(&state, goodbye, exit_when_idle);
        idle_since = Some(Instant::now());
        state.cancel_all();
        lost_since = Some(Instant::now());
        // Register again only when every attempt of the old session has
        // stopped and its output is deleted: a new coordinator may deploy
        // an attempt with the same number and location.
        while !lock(&state.running).is_empty() {
            state.cancel_all();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// With `--exit-when-idle`: whether to exit now (the job served ended, or no
/// coordinator since `idle_since` for the keep time); if so, forgets what
/// is held and says why.
fn exits_idle(state: &State, keep: Duration, job_ended: bool, idle_since: Option<Instant>) -> bool {
    let why = if job_ended {
        Some("the job served ended".to_owned())
    } else {
        idle_since.filter(|since| since.elapsed() >= keep).map(|_| {
            format!(
                "no coordinator for {} ms (--keep-partitions-ms)",
                keep.as_millis()
            )
        })
    };
    let Some(why) = why else {
        return false;
    };
    forget_held(state);
    coordhost_io::stderr_line!(
        "coordhost worker {}: {why} and no attempt runs: exiting (--exit-when-idle)",
        state.id
    );
    true
}

/// Registers with the coordinator, reporting the partitions held. None when
/// it cannot be reached or does not take the registration now (retry
/// later); an error when it refuses this worker for good.
async fn register(state: &State) -> Result<Option<rpc::RegisterResponse>, WorkerError> {
    let (job, held) = state.held_on_wire();
    let request = rpc::RegisterRequest {
        protocol_version: rpc::PROTOCOL_VERSION,
        worker_id: state.id.clone(),
        address: state.address.clone(),
        slots: state.pool.size() as u32,
        held,
        job,
    };
    let answer = match state.coordinator_client() {
        // Bounded: a coordinator that is paused (SIGSTOP) accepts the
        // connection and never answers.
        Ok(mut c) => tokio::time::timeout(Duration::from_secs(2), c.register(request))
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded("no answer within 2 s"))),
        Err(e) => return Err(WorkerError::Argument(format!("--coordinator: {e}"))),
    };
    match answer {
        Ok(r) => Ok(Some(r.into_inner())),
        Err(s) if s.code() == tonic::Code::FailedPrecondition => Err(WorkerError::Refused {
            coordinator: state.coordinator(),
            reason: s.message().to_owned(),
        }),
        Err(s) => {
            tracing::debug!(target: crate::LOG_TARGET, "registering with {}: {}", state.coordinator(), s.message());
            Ok(None)
        }
    }
}

/// Heartbeats every `interval` while the coordinator knows this worker in
/// `session`; returns its `Goodbye` if it said one, None once it is lost
/// (unknown, silent for `timeout`, or superseded by a newer leader).
async fn heartbeat_while_known(
    state: &State,
    session: u64,
    interval: Duration,
    timeout: Duration,
) -> Option<Goodbye> {
    let mut last_ok = Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = state.goodbye_said.notified() => {}
        }
        let said = lock(&state.goodbye).take();
        #[cfg(feature = "failpoints")]
        let said = match said {
            Some(g) if crate::failpoints::heartbeat_crosses_goodbye() => {
                // Unseen until the heartbeat below: the coordinator marks
                // the worker gone once its goodbye call returned.
                *lock(&state.goodbye) = Some(g);
                tokio::time::sleep(Duration::from_millis(300)).await;
                None
            }
            other => other,
        };
        if let Some(g) = said.filter(|g| g.session == session) {
            break Some(g);
        }
        // The coordinator forgets a worker once it took the goodbye, so a
        // heartbeat that crossed the goodbye is answered "unknown": the
        // goodbye said meanwhile, not a loss, ends the session (seen in CI
        // under load: a worker warned it lost the coordinator instead).
        let said_meanwhile = || lock(&state.goodbye).take().filter(|g| g.session == session);
        match heartbeat_once(state, session, interval).await {
            Some(true) => last_ok = Instant::now(),
            Some(false) => break said_meanwhile(),
            None if last_ok.elapsed() >= timeout => break said_meanwhile(),
            // High availability: a heartbeat that fails is a reason to
            // ask etcd at once; a newer leader ends this registration
            // without waiting out the timeout (docs/ha.md, "Figures").
            None if newer_leader(state, session, interval).await => break None,
            None => {}
        }
    }
}

/// One heartbeat: whether the coordinator still knows this worker in
/// `session`, None when it did not answer in time.
async fn heartbeat_once(state: &State, session: u64, interval: Duration) -> Option<bool> {
    let beat = rpc::HeartbeatRequest {
        worker_id: state.id.clone(),
        session,
    };
    match state.coordinator_client() {
        Ok(mut c) => {
            match tokio::time::timeout(interval.max(Duration::from_millis(200)), c.heartbeat(beat))
                .await
            {
                Ok(Ok(r)) => Some(r.into_inner().known),
                _ => None,
            }
        }
        Err(_) => None,
    }
}

/// Says how the session ended (the job's end from its `goodbye`, or a lost
/// coordinator); returns whether the job served ended.
fn note_session_end(state: &State, goodbye: Option<Goodbye>, exit_when_idle: bool) -> bool {
    match goodbye {
        Some(g) => {
            // A stopped leader of a job with high availability hands
            // the job to a standby: not the end of what this worker
            // serves.
            let job_ended = !(g.end == rpc::JobEnd::Stopped && state.leader_from.is_some());
            let next = if exit_when_idle && job_ended {
                "exiting once no attempt runs (--exit-when-idle)"
            } else {
                "waiting for the next coordinator"
            };
            coordhost_io::stderr_line!(
                "coordhost worker {}: the job {} ended ({}); {next}",
                state.id,
                g.job,
                end_name(g.end)
            );
            job_ended
        }
        None => {
            tracing::warn!(target: crate::LOG_TARGET, worker = %state.id, "lost the coordinator: canceling running attempts, keeping finished partitions");
            false
        }
    }
}

/// High availability: looks up the coordinator that leads the job in etcd
/// and makes it the one to register with. False while no coordinator
/// leads, etcd cannot be reached, or the leader's term is older than one
/// this worker already served (a deposed leader is never served again).
async fn find_leader(state: &State, etcd: &coordhost_ha::EtcdUrl) -> bool {
    match coordhost_ha::leader_address(etcd, &etcd.path).await {
        Ok(Some((term, address))) if !address.is_empty() => {
            let mut newest = lock(&state.newest_term);
            if term < *newest {
                tracing::warn!(
                    target: crate::LOG_TARGET, term,
                    newest = *newest,
                    "etcd names an older leader; waiting"
                );
                return false;
            }
            *newest = term;
            lock(&state.waiting_note).clear();
            let mut current = lock(&state.coordinator);
            if *current != address {
                tracing::info!(target: crate::LOG_TARGET, worker = %state.id, term, coordinator = %address, "the job's leader");
                *current = address;
            }
            true
        }
        Ok(_) => {
            note_waiting(
                state,
                format!(
                    "no coordinator leads job `{}` yet ({etcd}); waiting",
                    etcd.path
                ),
            );
            false
        }
        Err(e) => {
            note_waiting(
                state,
                format!(
                    "cannot look the leader up: {}; retrying",
                    one_line_error(&e)
                ),
            );
            false
        }
    }
}

/// Says on stderr why the worker waits, once per reason (the lookup is
/// retried every 200 ms at most).
fn note_waiting(state: &State, why: String) {
    let mut last = lock(&state.waiting_note);
    if *last != why {
        coordhost_io::stderr_line!("coordhost worker {}: {why}", state.id);
        *last = why;
    }
}

/// An etcd error on one line, without the transport's debug detail; a
/// refusal of this worker's user or permissions keeps etcd's words.
fn one_line_error(e: &coordhost_ha::HaError) -> String {
    let text = e.to_string();
    let first = text.split(": grpc request error").next().unwrap_or(&text);
    let first = first.lines().next().unwrap_or(first).to_owned();
    match e.refusal() {
        Some(words) => format!("{first}: {}", words.lines().next().unwrap_or(words)),
        None => first,
    }
}

/// No coordinator to register with now: past the keep time since the
/// last one was lost, forget what is held; then wait `backoff`, doubled for
/// the next time up to [`max_backoff`].
async fn retry_later(
    state: &State,
    keep: Duration,
    lost_since: &mut Option<Instant>,
    backoff: &mut Duration,
) {
    if let Some(since) = *lost_since
        && since.elapsed() >= keep
    {
        forget_held(state);
        *lost_since = None;
    }
    tokio::time::sleep(*backoff).await;
    *backoff = (*backoff * 2).min(max_backoff(state));
}

/// Longest pause between two registration attempts: 1 s, or 200 ms with
/// high availability, where etcd may name the new leader any moment.
fn max_backoff(state: &State) -> Duration {
    if state.leader_from.is_some() {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(1)
    }
}

/// High availability: whether etcd names a leader of a newer term than
/// `session` (the term this worker is registered with), asked within `wait`.
async fn newer_leader(state: &State, session: u64, wait: Duration) -> bool {
    let Some(etcd) = &state.leader_from else {
        return false;
    };
    matches!(
        tokio::time::timeout(wait, coordhost_ha::leader_address(etcd, &etcd.path)).await,
        Ok(Ok(Some((term, _)))) if term > session
    )
}

/// No coordinator claimed the held partitions in time: delete them.
fn forget_held(state: &State) {
    let held: Vec<Held> = std::mem::take(&mut *lock(&state.held));
    // Staged sink output no coordinator fetched is nobody's either.
    if let Ok(entries) = std::fs::read_dir(&state.sinks) {
        for e in entries.flatten() {
            let _ignored = std::fs::remove_dir_all(e.path());
        }
    }
    if held.is_empty() {
        return;
    }
    tracing::info!(
        target: crate::LOG_TARGET, worker = %state.id,
        "no coordinator came back within the keep time: deleting {} partitions",
        held.len()
    );
    state.delete_partitions(&held.iter().map(|h| h.location.clone()).collect::<Vec<_>>());
}

/// The worker's gRPC service.
struct Service {
    state: Arc<State>,
}

/// A caller's certificates and address, taken before the request is
/// consumed.
type Caller = (
    Option<Arc<Vec<tonic::transport::CertificateDer<'static>>>>,
    Option<SocketAddr>,
);

fn caller<T>(request: &Request<T>) -> Caller {
    (request.peer_certs(), request.remote_addr())
}

impl Service {
    /// With TLS: `Ok` only when the caller's certificate carries `name`; a
    /// refusal is logged once and answered `PERMISSION_DENIED` naming what
    /// the certificate says.
    fn check_caller(&self, caller: &Caller, name: &str, call: &str) -> Result<(), Status> {
        if self.state.tls.is_none() {
            return Ok(());
        }
        let certs = caller.0.as_deref().map(Vec::as_slice);
        if crate::tls::peer_is(certs, name) {
            return Ok(());
        }
        let from = caller
            .1
            .map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
        let why = format!(
            "worker `{}` refused {call}: the caller at {from} ({}) is not `{name}`",
            self.state.id,
            crate::tls::describe_peer(certs)
        );
        tracing::warn!(target: crate::LOG_TARGET, "{why}");
        Err(Status::permission_denied(why))
    }

    /// A command (`Deploy`, `Cancel`, `FetchSinkOutput`, `Release`,
    /// `Goodbye`): with
    /// TLS only from a coordinator of this worker's job; then only of the
    /// session this worker is registered in.
    async fn check_command(&self, caller: &Caller, session: u64, call: &str) -> Result<(), Status> {
        self.check_caller(caller, &self.state.coordinator_peer(), call)?;
        self.check_session(session).await
    }

    /// `ReadSubpartitions`: the caller must be the worker the grant names
    /// (with TLS, by its certificate), of the session this worker serves,
    /// and the grant the coordinator's for exactly this read.
    fn check_read(&self, caller: &Caller, req: &rpc::ReadRequest) -> Result<(), Status> {
        if let Some(tls) = &self.state.tls {
            let name = crate::tls::worker_name(&req.consumer_worker, tls.job());
            self.check_caller(caller, &name, "ReadSubpartitions")?;
        }
        let refuse = |why: String| {
            let why = format!(
                "worker `{}` refused ReadSubpartitions of {} for worker `{}`: {why}",
                self.state.id, req.location, req.consumer_worker
            );
            tracing::warn!(target: crate::LOG_TARGET, "{why}");
            Err(Status::permission_denied(why))
        };
        match self.state.session() {
            Some(s) if s == req.session => {}
            Some(s) => {
                return refuse(format!(
                    "it serves coordinator session {s}, not {}",
                    req.session
                ));
            }
            None => return refuse("it is registered with no coordinator".into()),
        }
        let consumer = from_wire(req.consumer.as_ref());
        let grant = crate::tls::Grant {
            reader: &req.consumer_worker,
            attempt: (consumer.vertex as u32, consumer.subtask, consumer.attempt),
            location: &req.location,
            first: req.first_subpartition,
            end: req.end_subpartition,
        };
        let verified = lock(&self.state.read_grants)
            .as_ref()
            .is_some_and(|g| g.verify(&grant, &req.grant));
        if !verified {
            return refuse(format!(
                "no grant of this session's coordinator for {consumer:?} to read subpartitions {}..{}",
                req.first_subpartition, req.end_subpartition
            ));
        }
        Ok(())
    }

    async fn check_session(&self, session: u64) -> Result<(), Status> {
        // The coordinator may call as soon as it answered the registration,
        // a moment before this worker stored the session: wait a little.
        for _ in 0..100 {
            if self.state.session().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let refusal = match self.state.session() {
            Some(s) if s == session => return Ok(()),
            Some(s) => format!(
                "worker `{}` serves coordinator session {s}, not {session}",
                self.state.id
            ),
            None => format!(
                "worker `{}` is not registered with a coordinator",
                self.state.id
            ),
        };
        // Logged: a refused command is a deposed or stale coordinator.
        tracing::warn!(target: crate::LOG_TARGET, "refused a command of coordinator session {session}: {refusal}");
        Err(Status::failed_precondition(refusal))
    }
}

/// Sends the bytes of `ranges` of `file` as chunks (the first carrying the
/// total), from a blocking thread.
fn stream_file(
    handle: &Handle,
    mut file: std::fs::File,
    ranges: Vec<(u64, u64)>,
    name: PathBuf,
    index: Vec<u8>,
) -> ReceiverStream<Result<rpc::Chunk, Status>> {
    let (tx, rx) = mpsc::channel(4);
    handle.spawn_blocking(move || {
        use std::io::{Seek, SeekFrom};
        let total: u64 = ranges.iter().map(|r| r.1).sum();
        if tx
            .blocking_send(Ok(rpc::Chunk {
                total_bytes: total,
                data: Vec::new(),
                index,
            }))
            .is_err()
        {
            return;
        }
        for (offset, len) in ranges {
            if let Err(e) = file.seek(SeekFrom::Start(offset)) {
                let _ignored =
                    tx.blocking_send(Err(Status::internal(format!("{}: {e}", name.display()))));
                return;
            }
            let mut left = len;
            while left > 0 {
                let n = left.min(rpc::CHUNK_BYTES as u64) as usize;
                let mut buf = vec![0u8; n];
                if let Err(e) = file.read_exact(&mut buf) {
                    let _ignored =
                        tx.blocking_send(Err(Status::internal(format!("{}: {e}", name.display()))));
                    return;
                }
                left -= n as u64;
                if tx
                    .blocking_send(Ok(rpc::Chunk {
                        total_bytes: 0,
                        data: buf,
                        index: Vec::new(),
                    }))
                    .is_err()
                {
                    return;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

#[tonic::async_trait]
impl worker_server::Worker for Service {
    async fn deploy(
        &self,
        request: Request<rpc::DeployRequest>,
    ) -> Result<Response<rpc::DeployResponse>, Status> {
        let who = caller(&request);
        let req = request.into_inner();
        self.check_command(&who, req.session, "Deploy").await?;
        let state = self.state.clone();
        let attempt = from_wire(req.attempt.as_ref());
        let pulled = Arc::new(AtomicBool::new(false));
        let (spec, readers) = task_spec(&state, &req, pulled.clone())?;
        #[cfg(feature = "failpoints")]
        let hold = matches!(spec.input, TaskInput::Splits(_))
            .then(crate::failpoints::worker_holds_deploy_answer)
            .flatten();
        let cancel = spec.cancel.clone();
        lock(&state.running).insert(attempt, cancel);
        let session = req.session;
        let job = req.job.clone();
        let outputs: Vec<(u32, PathBuf)> = req
            .outputs
            .iter()
            .filter_map(|o| plain_relative(&o.location).map(|l| (o.edge, l)))
            .collect();
        let sink_staging = spec
            .sink
            .as_ref()
            .map(|s| sink::staging_path(s, attempt.subtask, attempt.attempt));
        tracing::debug!(target: crate::LOG_TARGET, worker = %state.id, vertex = %req.vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, "running");
        let pool_state = state.clone();
        let components = CoordinatorComponents {
            state: state.clone(),
            session,
        };
        let vertex_id = req.vertex_id.clone();
        pool_state.pool.submit(move || {
            let result = run_with_readers(&state, &readers, &components, vertex_id, spec);
            let reported = report(&state, session, attempt, &result);
            match (result, reported) {
                (Ok(report), Reported::Accepted | Reported::Unanswered) => {
                    if reported == Reported::Unanswered
                        && let Some(p) = &sink_staging
                    {
                        // Only a coordinator that accepted the report
                        // fetches staged output: a new one runs the sink
                        // again.
                        let _ignored = std::fs::remove_file(p);
                    }
                    hold_partitions(&state, &job, attempt, &outputs, report);
                }
                _ => discard_output(&state, &outputs, sink_staging.as_deref()),
            }
            // Only now: a worker registers again once nothing of an old
            // session runs or is being cleaned up (`stay_registered`).
            lock(&state.running).remove(&attempt);
        });
        // Test knob: a worker that dies or hangs after its attempt pulled a
        // split and before it answered the Deploy.
        #[cfg(feature = "failpoints")]
        if let Some(hold) = hold {
            hold_deploy_answer(&self.state, attempt, &pulled, hold).await;
        }
        #[cfg(not(feature = "failpoints"))]
        drop(pulled);
        Ok(Response::new(rpc::DeployResponse {}))
    }

    async fn cancel(
        &self,
        request: Request<rpc::CancelRequest>,
    ) -> Result<Response<rpc::CancelResponse>, Status> {
        let who = caller(&request);
        let req = request.into_inner();
        self.check_command(&who, req.session, "Cancel").await?;
        let attempt = from_wire(req.attempt.as_ref());
        if let Some(flag) = lock(&self.state.running).get(&attempt) {
            flag.store(true, Ordering::Relaxed);
        }
        Ok(Response::new(rpc::CancelResponse {}))
    }

    type ReadSubpartitionsStream = ReceiverStream<Result<rpc::Chunk, Status>>;

    async fn read_subpartitions(
        &self,
        request: Request<rpc::ReadRequest>,
    ) -> Result<Response<Self::ReadSubpartitionsStream>, Status> {
        let who = caller(&request);
        let req = request.into_inner();
        self.check_read(&who, &req)?;
        let location = plain_relative(&req.location).ok_or_else(|| {
            Status::invalid_argument(format!(
                "location `{}` is not a plain relative path",
                req.location
            ))
        })?;
        if req.end_subpartition < req.first_subpartition {
            return Err(Status::invalid_argument("an empty subpartition range"));
        }
        let dir = self
            .state
            .grants
            .writable_dir(&self.state.partition_path(&location))
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let raw = match SubpartitionReader::raw_ranges_in(
            &dir,
            req.first_subpartition..req.end_subpartition,
        ) {
            Ok(raw) => raw,
            Err(ShuffleError::PartitionNotFound { .. }) => {
                return Err(Status::not_found(format!(
                    "worker `{}` holds no partition at {}",
                    self.state.id, req.location
                )));
            }
            Err(e) => return Err(Status::data_loss(e.to_string())),
        };
        Ok(Response::new(stream_file(
            &self.state.handle,
            raw.data,
            raw.ranges,
            raw.path,
            raw.index,
        )))
    }

    type FetchSinkOutputStream = ReceiverStream<Result<rpc::Chunk, Status>>;

    async fn fetch_sink_output(
        &self,
        request: Request<rpc::FetchSinkRequest>,
    ) -> Result<Response<Self::FetchSinkOutputStream>, Status> {
        let who = caller(&request);
        let req = request.into_inner();
        self.check_command(&who, req.session, "FetchSinkOutput")
            .await?;
        let job = plain_relative(&req.job)
            .ok_or_else(|| Status::invalid_argument("a job name that is not a plain name"))?;
        let vertex = plain_relative(&req.vertex_id)
            .ok_or_else(|| Status::invalid_argument("a vertex id that is not a plain name"))?;
        let attempt = from_wire(req.attempt.as_ref());
        let dir = self
            .state
            .sinks
            .join(job)
            .join(vertex)
            .join(sink::STAGING_DIR);
        let prefix = format!("part-{:05}-attempt-{}.", attempt.subtask, attempt.attempt);
        let found = std::fs::read_dir(&dir).ok().and_then(|entries| {
            entries.flatten().map(|e| e.path()).find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
            })
        });
        let Some(path) = found else {
            return Err(Status::not_found(format!(
                "worker `{}` has no staged output of {:?}",
                self.state.id, attempt
            )));
        };
        // A regular file only, opened without blocking on a FIFO put there.
        let (file, len) = coordhost_io::files::open_regular_file(&path, u64::MAX)
            .map_err(|e| Status::internal(format!("{}: {e}", path.display())))?;
        Ok(Response::new(stream_file(
            &self.state.handle,
            file,
            vec![(0, len)],
            path,
            Vec::new(),
        )))
    }

    async fn release(
        &self,
        request: Request<rpc::ReleaseRequest>,
    ) -> Result<Response<rpc::ReleaseResponse>, Status> {
        let who = caller(&request);
        let req = request.into_inner();
        self.check_command(&who, req.session, "Release").await?;
        let state = &self.state;
        let mut locations: Vec<PathBuf> = req
            .locations
            .iter()
            .filter_map(|l| plain_relative(l))
            .collect();
        {
            let mut held = lock(&state.held);
            if req.whole_job {
                locations.extend(
                    held.iter()
                        .filter(|h| h.job == req.job)
                        .map(|h| h.location.clone()),
                );
                held.retain(|h| h.job != req.job);
            } else {
                let released: std::collections::HashSet<&PathBuf> = locations.iter().collect();
                held.retain(|h| !released.contains(&h.location));
            }
        }
        if req.whole_job {
            // The job is over: its functions' and readers' instances go (the bytes and
            // the machine code stay for the next job).
            state.functions.forget_loaded();
            state.readers.forget_loaded();
        }
        // Deleting thousands of folders must not hold up the runtime that
        // answers heartbeats (`make bench-workers` saw a worker given up).
        let state = state.clone();
        let sink = if req.whole_job {
            plain_relative(&req.job).map(|job| state.sinks.join(job))
        } else {
            None
        };
        tokio::task::spawn_blocking(move || {
            state.delete_partitions(&locations);
            if let Some(sink) = sink {
                let _ignored = std::fs::remove_dir_all(sink);
            }
        })
        .await
        .map_err(|e| Status::internal(format!("deleting the released partitions: {e}")))?;
        Ok(Response::new(rpc::ReleaseResponse {}))
    }

    async fn goodbye(
        &self,
        request: Request<rpc::GoodbyeRequest>,
    ) -> Result<Response<rpc::GoodbyeResponse>, Status> {
        let who = caller(&request);
        let req = request.into_inner();
        // Only the coordinator this worker serves, in its session: a
        // stranger cannot make a worker leave the job it runs.
        self.check_command(&who, req.session, "Goodbye").await?;
        let end = rpc::JobEnd::try_from(req.end).unwrap_or(rpc::JobEnd::Unspecified);
        *lock(&self.state.goodbye) = Some(Goodbye {
            session: req.session,
            job: coordhost_wasm::one_line(&req.job, 80),
            end,
        });
        self.state.goodbye_said.notify_one();
        Ok(Response::new(rpc::GoodbyeResponse {}))
    }
}

/// Loads the readers of the tables a scan reads, then runs the task on this
/// (pool) thread.
fn run_with_readers(
    state: &State,
    readers: &[super::task::RemoteReader],
    components: &CoordinatorComponents,
    vertex_id: String,
    mut spec: TaskSpec,
) -> Result<TaskReport, TaskError> {
    // The readers of the tables this scan reads, loaded here (a
    // fetch blocks) before the task runs: one that cannot be
    // loaded, or whose bytes are not the job's, fails the attempt.
    state
        .readers
        .table_readers(readers, components)
        .map_err(|detail| TaskError::Data {
            vertex: vertex_id,
            detail,
        })
        .and_then(|readers| {
            spec.readers = readers;
            run_task(spec)
        })
}

/// Holds the partitions a finished `attempt` of `job` reported, at the
/// locations of its `outputs`.
fn hold_partitions(
    state: &State,
    job: &str,
    attempt: AttemptId,
    outputs: &[(u32, PathBuf)],
    report: TaskReport,
) {
    let mut held = lock(&state.held);
    for (edge, bytes) in report.partitions {
        if let Some((_, location)) = outputs.iter().find(|(e, _)| *e as usize == edge) {
            held.push(Held {
                job: job.to_owned(),
                producer: attempt,
                edge: edge as u32,
                location: location.clone(),
                bytes: bytes.to_vec(),
            });
        }
    }
}

/// Deletes what an attempt that failed or was refused wrote: its partitions
/// and its staged sink output.
fn discard_output(state: &State, outputs: &[(u32, PathBuf)], sink_staging: Option<&Path>) {
    // Failed, or refused (a superseded attempt, or a
    // coordinator that gave this worker up): what it wrote
    // is nobody's.
    state.delete_partitions(&outputs.iter().map(|o| o.1.clone()).collect::<Vec<_>>());
    if let Some(p) = sink_staging {
        let _ignored = std::fs::remove_file(p);
    }
}

/// Test knob: holds the Deploy answer for `hold` once `attempt` pulled a
/// split (or `hold` passed waiting for it).
#[cfg(feature = "failpoints")]
async fn hold_deploy_answer(
    state: &State,
    attempt: AttemptId,
    pulled: &AtomicBool,
    hold: Duration,
) {
    let began = Instant::now();
    while !pulled.load(Ordering::Relaxed) && began.elapsed() < hold {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tracing::warn!(target: crate::LOG_TARGET, worker = %state.id, "test knob: {attempt:?} pulled a split; holding the Deploy answer for {} ms", hold.as_millis());
    tokio::time::sleep(hold).await;
}

/// What became of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reported {
    /// The coordinator accepted it: the attempt's partitions are held.
    Accepted,
    /// The coordinator refused it (a superseded attempt, a worker given
    /// up): what the attempt wrote is nobody's.
    Refused,
    /// No answer (the coordinator died or hangs): it may have recorded the
    /// attempt as finished. Its partitions are held, and the next
    /// coordinator keeps them only if its log recorded them (the worker
    /// reports them when it registers); a released job or the keep time
    /// deletes them otherwise.
    Unanswered,
}

/// Reports how `attempt` ended.
fn report(
    state: &State,
    session: u64,
    attempt: AttemptId,
    result: &Result<TaskReport, TaskError>,
) -> Reported {
    let outcome = match result {
        Ok(r) => rpc::attempt_report::Outcome::Finished(rpc::Finished {
            records_in: r.records_in,
            records_out: r.records_out,
            splits: r.splits,
            partitions: r
                .partitions
                .iter()
                .map(|(edge, bytes)| rpc::PartitionBytes {
                    edge: *edge as u32,
                    bytes_per_subpartition: bytes.to_vec(),
                })
                .collect(),
        }),
        Err(e) => {
            use rpc::failure::Kind;
            let kind = match e {
                TaskError::PartitionNotFound { producer, .. } => {
                    Kind::PartitionNotFound(to_wire(*producer))
                }
                TaskError::PartitionCorrupt { producer, .. } => {
                    Kind::PartitionCorrupt(to_wire(*producer))
                }
                TaskError::Canceled { .. } => Kind::Canceled(true),
                TaskError::InvalidData { .. } => Kind::InvalidData(true),
                _ => Kind::Other(true),
            };
            rpc::attempt_report::Outcome::Failed(rpc::Failure {
                kind: Some(kind),
                message: e.to_string(),
            })
        }
    };
    let request = rpc::AttemptReport {
        worker_id: state.id.clone(),
        session,
        attempt: Some(to_wire(attempt)),
        outcome: Some(outcome),
    };
    let Ok(mut client) = state.coordinator_client() else {
        return Reported::Unanswered;
    };
    let wait = *lock(&state.report_timeout);
    let answer = state.handle.block_on(async {
        tokio::time::timeout(wait, client.report_attempt(request))
            .await
            .unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(format!(
                    "no answer within {} ms",
                    wait.as_millis()
                )))
            })
    });
    match answer {
        Ok(r) if r.get_ref().accepted => Reported::Accepted,
        Ok(_) => Reported::Refused,
        Err(s) => {
            tracing::warn!(target: crate::LOG_TARGET, worker = %state.id, "reporting {attempt:?}: {}; keeping its partitions for the next coordinator to claim", s.message());
            Reported::Unanswered
        }
    }
}

/// The runtime's task for a deployment, checking every path it names,
/// and the source readers its scan needs (checked, loaded by the caller
/// on the task's thread into the task's `readers`).
fn task_spec(
    state: &Arc<State>,
    req: &rpc::DeployRequest,
    pulled: Arc<AtomicBool>,
) -> Result<(TaskSpec, Vec<super::task::RemoteReader>), Status> {
    let attempt = from_wire(req.attempt.as_ref());
    let vertex: RemoteVertex = postcard::from_bytes(&req.vertex)
        .map_err(|e| Status::invalid_argument(format!("the task of `{}`: {e}", req.vertex_id)))?;
    let mut outputs = Vec::new();
    for o in &req.outputs {
        outputs.push(task_output(state, req, &vertex, attempt, o)?);
    }
    let sink = match &vertex.sink {
        Some(s) => {
            let job = plain(&req.job)?;
            let v = plain(&req.vertex_id)?;
            let mut local = s.clone();
            local.dir = state.sink_dir(&job.to_string_lossy(), &v.to_string_lossy());
            Some(Arc::new(local))
        }
        None => None,
    };
    let input = if vertex.source.is_some() {
        TaskInput::Splits(Box::new(RemoteSplits {
            state: state.clone(),
            session: req.session,
            attempt,
            pulled,
        }))
    } else {
        let mut inputs = Vec::new();
        for i in &req.inputs {
            inputs.push(input_partition(state, req, attempt, i)?);
        }
        TaskInput::Partitions(inputs)
    };
    let source_grants = vertex
        .source
        .as_ref()
        .map(super::RemoteSource::grants)
        .transpose()
        .map_err(|e| Status::invalid_argument(format!("the task of `{}`: {e}", req.vertex_id)))?;
    let components: Arc<dyn ComponentSource> = Arc::new(CoordinatorComponents {
        state: state.clone(),
        session: req.session,
    });
    let functions = state
        .functions
        .function_set(&vertex.functions, &components)
        .map_err(|e| Status::invalid_argument(format!("the task of `{}`: {e}", req.vertex_id)))?;
    super::readers::check(&vertex.readers)
        .map_err(|e| Status::invalid_argument(format!("the task of `{}`: {e}", req.vertex_id)))?;
    let spec = TaskSpec {
        attempt,
        vertex_id: req.vertex_id.clone(),
        operators: Arc::new(vertex.operators),
        // Filled on the task's thread (`WorkerReaders::table_readers`).
        readers: coordhost_data::runtime::TableReaders::default(),
        input,
        outputs,
        sink,
        source_grants,
        functions,
        record_delay: Duration::from_micros(req.record_delay_us),
        #[cfg(feature = "failpoints")]
        fail_after: (req.fail_after_records > 0)
            .then_some(req.fail_after_records)
            .or_else(|| crate::failpoints::worker_fails_every_task().then_some(0)),
        cancel: Arc::new(AtomicBool::new(false)),
    };
    Ok((spec, vertex.readers))
}

/// `location` as a plain relative path, or `INVALID_ARGUMENT` naming it.
fn plain(location: &str) -> Result<PathBuf, Status> {
    plain_relative(location).ok_or_else(|| {
        Status::invalid_argument(format!(
            "location `{location}` is not a plain relative path"
        ))
    })
}

/// The runtime's output `o` of a deployment of `vertex`: its route, and the
/// checked folder (or object storage place) its partition goes to.
fn task_output(
    state: &State,
    req: &rpc::DeployRequest,
    vertex: &RemoteVertex,
    attempt: AttemptId,
    o: &rpc::OutputPartition,
) -> Result<TaskOutput, Status> {
    let (pattern, key) = vertex
        .routes
        .iter()
        .find(|r| r.0 == o.edge as usize)
        .map(|r| (r.1, r.2.clone()))
        .ok_or_else(|| Status::invalid_argument(format!("edge {} has no route", o.edge)))?;
    let location = if o.object_url.is_empty() {
        OutputPlace::Dir(
            state
                .grants
                .writable_dir(&state.partition_path(&plain(&o.location)?))
                .map_err(|e| Status::invalid_argument(e.to_string()))?,
        )
    } else {
        // Uploaded with this worker's own credentials; staged below its
        // own root, one folder per attempt and edge.
        OutputPlace::Object {
            url: object_url(&o.object_url)?,
            staging: state
                .staging
                .join(plain(&req.job)?)
                .join(plain(&req.vertex_id)?)
                .join(format!(
                    "{}-{}-{}",
                    attempt.subtask, attempt.attempt, o.edge
                )),
        }
    };
    Ok(TaskOutput {
        edge: o.edge as usize,
        location,
        num_subpartitions: o.num_subpartitions,
        producer: PartitionProducer {
            job: req.job.clone(),
            data_set: o.data_set.clone(),
            job_vertex: req.vertex_id.clone(),
            subtask: attempt.subtask,
            attempt: attempt.attempt,
        },
        pattern,
        key,
    })
}

/// The runtime's input partition `i` of a deployment: on object storage,
/// held by this worker, or fetched from the worker at its address.
fn input_partition(
    state: &Arc<State>,
    req: &rpc::DeployRequest,
    attempt: AttemptId,
    i: &rpc::InputPartition,
) -> Result<InputPartition, Status> {
    let producer = from_wire(i.producer.as_ref());
    let subpartitions = i.first_subpartition..i.end_subpartition.max(i.first_subpartition);
    let expected = ExpectedPartition {
        producer: PartitionProducer {
            job: req.job.clone(),
            data_set: i.data_set.clone(),
            job_vertex: i.producer_vertex_id.clone(),
            subtask: producer.subtask,
            attempt: producer.attempt,
        },
        bytes: (!i.bytes_per_subpartition.is_empty()).then(|| i.bytes_per_subpartition.clone()),
    };
    if !i.object_url.is_empty() {
        // On object storage: read there, whoever wrote it.
        let url = object_url(&i.object_url)?;
        Ok(InputPartition {
            producer,
            location: PathBuf::from(url.to_string()),
            grants: state.grants.clone(),
            subpartitions,
            expected,
            remote: None,
            object: Some(url),
        })
    } else if i.address == state.address {
        Ok(InputPartition {
            producer,
            location: state.partition_path(&plain(&i.location)?),
            grants: state.grants.clone(),
            subpartitions,
            expected,
            remote: None,
            object: None,
        })
    } else {
        Ok(InputPartition {
            producer,
            location: plain(&i.location)?,
            grants: state.grants.clone(),
            subpartitions,
            expected,
            remote: Some(Arc::new(RemoteFetch {
                state: state.clone(),
                address: i.address.clone(),
                session: req.session,
                consumer: attempt,
                grant: i.grant.clone(),
            })),
            object: None,
        })
    }
}

/// A partition's place on object storage as a coordinator sent it: a plain
/// `s3://BUCKET/PREFIX` (the coordinator checked it against the shuffle
/// master's writable store grants; the worker checks it is plain).
fn object_url(text: &str) -> Result<coordhost_io::objstore::ObjectUrl, Status> {
    coordhost_io::objstore::ObjectUrl::parse(text, false)
        .map_err(|e| Status::invalid_argument(format!("partition place: {e}")))
}

/// The components of the job's scalar functions and source readers, fetched from the
/// coordinator of session `session` (`FetchComponent`).
struct CoordinatorComponents {
    state: Arc<State>,
    session: u64,
}

impl ComponentSource for CoordinatorComponents {
    fn fetch(&self, sha256: &str) -> Result<Vec<u8>, String> {
        let max = coordhost_io::files::MAX_COMPONENT_BYTES;
        let mut client = self.state.coordinator_client()?;
        let request = rpc::ComponentRequest {
            worker_id: self.state.id.clone(),
            session: self.session,
            sha256: sha256.to_owned(),
        };
        // Each answer must come within the heartbeat timeout: a
        // coordinator cut off mid-stream does not hold the task forever.
        let quiet = *lock(&self.state.report_timeout);
        let silent = || format!("no answer within {} ms", quiet.as_millis());
        self.state.handle.block_on(async {
            let mut stream = tokio::time::timeout(quiet, client.fetch_component(request))
                .await
                .map_err(|_| silent())?
                .map_err(|s| s.message().to_owned())?
                .into_inner();
            let total = next_chunk(&mut stream, quiet)
                .await?
                .ok_or_else(|| "an empty answer".to_owned())?
                .total_bytes;
            if total > max {
                return Err(format!(
                    "it announced {total} bytes, more than the largest component ({max} bytes)"
                ));
            }
            let mut bytes = Vec::with_capacity(total.min(64 << 20) as usize);
            while let Some(chunk) = next_chunk(&mut stream, quiet).await? {
                if (bytes.len() + chunk.data.len()) as u64 > total {
                    return Err(format!("it sent more than the {total} bytes it announced"));
                }
                bytes.extend_from_slice(&chunk.data);
            }
            if bytes.len() as u64 != total {
                return Err(format!(
                    "the answer ended after {} of the {total} bytes it announced",
                    bytes.len()
                ));
            }
            Ok(bytes)
        })
    }
}

/// The next chunk of `stream`, which must come within `quiet`.
async fn next_chunk(
    stream: &mut tonic::Streaming<rpc::Chunk>,
    quiet: Duration,
) -> Result<Option<rpc::Chunk>, String> {
    tokio::time::timeout(quiet, stream.message())
        .await
        .map_err(|_| format!("no answer within {} ms", quiet.as_millis()))?
        .map_err(|s| s.message().to_owned())
}

/// A source attempt's splits, pulled from the coordinator.
struct RemoteSplits {
    state: Arc<State>,
    session: u64,
    attempt: AttemptId,
    /// Set once a split arrived (the `worker::hold-deploy-answer` test knob
    /// waits for it).
    pulled: Arc<AtomicBool>,
}

impl SplitSource for RemoteSplits {
    fn next_split(&mut self) -> Result<Option<SplitData>, TaskError> {
        let failed = |reason: String| TaskError::SplitRequest { reason };
        let mut client = self.state.coordinator_client().map_err(failed)?;
        let request = rpc::SplitRequest {
            worker_id: self.state.id.clone(),
            session: self.session,
            attempt: Some(to_wire(self.attempt)),
        };
        let answer = self
            .state
            .handle
            .block_on(client.request_split(request))
            .map_err(|s| failed(format!("the coordinator: {}", s.message())))?
            .into_inner();
        match answer.answer {
            Some(rpc::split_response::Answer::Split(bytes)) => {
                let split = postcard::from_bytes(&bytes)
                    .map_err(|e| failed(format!("a split that does not decode: {e}")))?;
                self.pulled.store(true, Ordering::Relaxed);
                Ok(Some(split))
            }
            Some(rpc::split_response::Answer::EndOfSplits(_)) => Ok(None),
            Some(rpc::split_response::Answer::Error(e)) => Err(failed(e)),
            None => Err(failed("an empty answer".into())),
        }
    }
}

/// Reads a partition another worker holds, over its `ReadSubpartitions`,
/// for consumer attempt `consumer` of coordinator session `session`, with
/// the coordinator's `grant`.
struct RemoteFetch {
    state: Arc<State>,
    address: String,
    session: u64,
    consumer: AttemptId,
    grant: Vec<u8>,
}

impl PartitionFetch for RemoteFetch {
    fn open(
        &self,
        location: &Path,
        subs: Range<u32>,
        expected: &ExpectedPartition,
    ) -> Result<SubpartitionReader, ShuffleError> {
        if self.address.is_empty() {
            // The coordinator knew no live holder when it deployed this
            // attempt (the worker that wrote it was lost).
            return Err(ShuffleError::PartitionNotFound {
                location: location.to_path_buf(),
                reason: "no live worker holds it (the one that wrote it was lost)".into(),
            });
        }
        let name = PathBuf::from(format!("{}:{}", self.address, location.display()));
        let not_found = || ShuffleError::PartitionNotFound {
            location: name.clone(),
            reason: format!(
                "worker {} does not hold it or cannot be reached",
                self.address
            ),
        };
        let channel = self
            .state
            .channel(&self.address, &self.state.worker_peer())
            .map_err(|_| not_found())?;
        let mut client = rpc::worker_client::WorkerClient::new(channel)
            .max_decoding_message_size(rpc::MAX_MESSAGE_BYTES);
        let request = rpc::ReadRequest {
            location: location.to_string_lossy().into_owned(),
            first_subpartition: subs.start,
            end_subpartition: subs.end,
            session: self.session,
            consumer: Some(to_wire(self.consumer)),
            consumer_worker: self.state.id.clone(),
            grant: self.grant.clone(),
        };
        let handle = &self.state.handle;
        let mut stream = match handle.block_on(client.read_subpartitions(request)) {
            Ok(s) => s.into_inner(),
            Err(s) if s.code() == tonic::Code::DataLoss => {
                return Err(ShuffleError::Io {
                    path: name,
                    source: std::io::Error::other(s.message().to_owned()),
                });
            }
            // Not held, or the holder cannot be reached: lost either way
            // (Flink's PartitionNotFound), so its producer runs again.
            Err(_) => return Err(not_found()),
        };
        let (total, index) = match handle.block_on(stream.message()) {
            Ok(Some(first)) => (first.total_bytes, first.index),
            _ => return Err(not_found()),
        };
        let reader = ChunkReader {
            handle: handle.clone(),
            stream,
            buf: Vec::new(),
            at: 0,
        };
        SubpartitionReader::from_stream(name, Box::new(reader), total, &index, subs, expected)
    }
}

/// `Read` over a stream of chunks.
struct ChunkReader {
    handle: Handle,
    stream: tonic::Streaming<rpc::Chunk>,
    buf: Vec<u8>,
    at: usize,
}

impl Read for ChunkReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.buf.len() {
            match self.handle.block_on(self.stream.message()) {
                Ok(Some(chunk)) => {
                    self.buf = chunk.data;
                    self.at = 0;
                }
                Ok(None) => return Ok(0),
                Err(s) => return Err(std::io::Error::other(s.message().to_owned())),
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
