//! The coordinator's side of worker processes: the `Coordinator` gRPC
//! service workers call, the registry of workers (Flink's
//! `SlotPool`/`ResourceManager` in one), and the calls the JobMaster makes
//! on them (deploy, cancel, fetch staged sink output, release).
//!
//! What happens to the JobMaster arrives as [`ClusterEvent`]s through the
//! function it installs ([`Cluster::set_events`]): split requests, finished
//! and failed attempts. A report is accepted only from the worker the
//! attempt was deployed to, while that worker is registered in this
//! coordinator's session; a worker silent past the heartbeat timeout is
//! given up, its running attempts fail ([`TaskError::Worker`]) and a late
//! report of theirs is refused. Its finished partitions are not moved:
//! consumers that cannot read them fail with PartitionNotFound and the
//! producers run again (Flink's region failover). An attempt is deployed
//! once, to one worker, without waiting for the answer; a `Deploy` that
//! fails in any way ends the attempt ([`ClusterEvent::DeployFailed`]): it
//! is never resent elsewhere under the same attempt number, which would
//! lose the splits it pulled where it was first sent.
//! producers run again (Flink's region failover).
//!
//! When the job has ended, [`Cluster::goodbye`] tells every worker so
//! before the coordinator exits (after which registrations are refused), so
//! that a worker does not take the coordinator's exit for a loss.
//!
//! With high availability the leadership's fence guards both ways: no
//! command goes to a worker, and no worker is answered (registration,
//! heartbeat, split request, report: `UNAVAILABLE`), once the fence has
//! passed, so that the workers of a deposed leader look the new one up in
//! etcd at once (docs/ha.md, "Fencing").

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::task::{RemoteTask, from_wire, to_wire};
use crate::rpc::{self, coordinator_server, worker_client::WorkerClient};
use coordhost_data::runtime::{TaskError, TaskReport};
use coordhost_model::graph::{AttemptId, SubpartitionBytes};
use coordhost_model::value::SplitData;

/// Heartbeat settings of a coordinator that serves workers.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Where the `Coordinator` service listens (`HOST:PORT`).
    pub listen: String,
    /// How often workers heartbeat.
    pub heartbeat_interval: Duration,
    /// After how long without a heartbeat a worker is given up (and, seen
    /// from the worker, the coordinator).
    pub heartbeat_timeout: Duration,
    /// High availability: start as a standby, refusing registrations
    /// (`UNAVAILABLE`) until [`Cluster::lead`].
    pub standby: bool,
    /// Mutual TLS (issue 25): the coordinator's identity; every worker
    /// must present a certificate of the same CA naming it
    /// `ID.worker.JOB` for the id it registers with. None: plain gRPC
    /// (loopback only, or `--insecure-listen`).
    pub tls: Option<crate::tls::ClusterTls>,
}

impl ClusterOptions {
    /// Defaults: heartbeat every 200 ms, given up after 2 s.
    pub fn new(listen: impl Into<String>) -> Self {
        Self {
            listen: listen.into(),
            heartbeat_interval: Duration::from_millis(200),
            heartbeat_timeout: Duration::from_secs(2),
            standby: false,
            tls: None,
        }
    }
}

/// What the cluster tells the JobMaster.
#[derive(Debug)]
pub enum ClusterEvent {
    /// A source attempt asks for its next split; answer on `reply`.
    SplitRequest {
        /// The attempt.
        attempt: AttemptId,
        /// Where the answer goes.
        reply: Sender<Result<Option<SplitData>, String>>,
    },
    /// An attempt finished (its report was accepted).
    Finished {
        /// The attempt.
        attempt: AttemptId,
        /// Its figures and partition sizes.
        report: TaskReport,
    },
    /// A worker was given up (no heartbeat for the timeout). `held` are
    /// the finished attempts whose output it held: lost with it.
    WorkerLost {
        /// The worker's id.
        worker: String,
        /// Finished attempts whose partitions it held.
        held: Vec<AttemptId>,
    },
    /// An attempt failed: on its worker, or because its worker was lost.
    Failed {
        /// The attempt.
        attempt: AttemptId,
        /// Why.
        error: TaskError,
    },
    /// The `Deploy` of an attempt to `worker` was refused, failed or got no
    /// answer in time ([`Cluster::deploy`]): the attempt never counts as
    /// running there, though it may have started and pulled splits.
    DeployFailed {
        /// The attempt.
        attempt: AttemptId,
        /// The worker it was sent to.
        worker: String,
        /// What the call came back with (`did not take the Deploy (CODE:
        /// ...)`, `did not answer the Deploy within N ms`, `lost (no
        /// heartbeat for N ms) before it answered the Deploy`).
        message: String,
    },
}

type EventFn = Arc<dyn Fn(ClusterEvent) + Send + Sync>;

/// A component of the job that workers may fetch
/// ([`Cluster::serve_components`]), whatever its kind: a scalar
/// function's, a source reader's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedComponent {
    /// What it is, for messages: `scalar function `tax``, `source reader
    /// `fixed``.
    pub plugin: String,
    /// Lowercase hex SHA-256 of the bytes the job was checked with.
    pub sha256: String,
    /// The component file.
    pub path: PathBuf,
}

/// One registered worker.
struct WorkerEntry {
    address: String,
    slots: u32,
    alive: bool,
    last_seen: Instant,
    client: WorkerClient<Channel>,
    /// Partitions it reported holding when it registered.
    held: Vec<rpc::HeldPartition>,
}

#[derive(Default)]
struct State {
    workers: BTreeMap<String, WorkerEntry>,
    /// Running attempts and the worker each runs on.
    running: HashMap<AttemptId, String>,
    /// Running attempts whose `Deploy` has not been answered yet: when
    /// their worker is lost, they were never placed
    /// ([`ClusterEvent::DeployFailed`], not a failed attempt).
    unacked: std::collections::HashSet<AttemptId>,
    /// Finished attempts and the worker that holds their output.
    holders: HashMap<AttemptId, String>,
    /// Per source vertex: split wait, plugin name and vertex id (for the
    /// message when the wait passes).
    split_waits: HashMap<usize, (Duration, String, String)>,
    /// Per worker id that ever registered with this process: heartbeats
    /// accepted, and when it registered or heartbeated last.
    heartbeats: BTreeMap<String, (u64, Instant)>,
}

/// The heartbeats of one worker as this coordinator process received them
/// ([`Cluster::heartbeats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerHeartbeats {
    /// The worker's id.
    pub worker: String,
    /// Heartbeats accepted from it (in this coordinator's session, while
    /// registered), over every registration of this process.
    pub received: u64,
    /// Time since its last accepted heartbeat, or since it registered if
    /// none came after that.
    pub since_last: Duration,
}

struct Shared {
    /// This coordinator's session: a fresh number per process, or the
    /// leadership's term with high availability ([`Cluster::lead`]).
    session: std::sync::atomic::AtomicU64,
    /// Whether workers may register (false while a standby).
    leading: std::sync::atomic::AtomicBool,
    /// The job ended and the workers were told ([`Cluster::goodbye`]): no
    /// registration is taken any more.
    ended: std::sync::atomic::AtomicBool,
    /// High availability: checked before every command to a worker.
    fence: Mutex<Option<Arc<dyn coordhost_log::Fence>>>,
    opts: ClusterOptions,
    /// This process's key of partition read grants.
    grants: crate::tls::ReadGrants,
    state: Mutex<State>,
    changed: Condvar,
    events: Mutex<Option<EventFn>>,
    /// The components workers may fetch, by SHA-256.
    components: Mutex<HashMap<String, ServedComponent>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn emit(&self, event: ClusterEvent) {
        let f = lock(&self.events).clone();
        match f {
            Some(f) => f(event),
            None => {
                if let ClusterEvent::SplitRequest { reply, .. } = event {
                    let _ignored = reply.send(Err("no job is running".into()));
                }
            }
        }
    }

    /// How an attempt running on a worker that is gone ends: failed, or,
    /// if its `Deploy` was never answered, not placed.
    fn ended(st: &mut State, attempt: AttemptId, worker: String, why: String) -> ClusterEvent {
        if st.unacked.remove(&attempt) {
            ClusterEvent::DeployFailed {
                attempt,
                worker,
                message: format!("{why} before it answered the Deploy"),
            }
        } else {
            ClusterEvent::Failed {
                attempt,
                error: TaskError::Worker {
                    // The line that reports it names the vertex, subtask and attempt.
                    message: format!("{why} while running the attempt"),
                    worker,
                },
            }
        }
    }

    /// Gives up workers silent past the timeout; fails their attempts.
    fn check_heartbeats(&self) {
        let mut failed = Vec::new();
        let mut lost_held = Vec::new();
        {
            let mut st = lock(&self.state);
            let timeout = self.opts.heartbeat_timeout;
            let lost: Vec<String> = st
                .workers
                .iter()
                .filter(|(_, w)| w.alive && w.last_seen.elapsed() > timeout)
                .map(|(id, _)| id.clone())
                .collect();
            for id in lost {
                if let Some(w) = st.workers.get_mut(&id) {
                    w.alive = false;
                }
                tracing::warn!(target: crate::LOG_TARGET, worker = %id, "no heartbeat for {} ms: worker lost", timeout.as_millis());
                let held: Vec<AttemptId> = st
                    .holders
                    .iter()
                    .filter(|(_, w)| **w == id)
                    .map(|(a, _)| *a)
                    .collect();
                for a in &held {
                    st.holders.remove(a);
                }
                lost_held.push((id.clone(), held));
                let attempts: Vec<AttemptId> = st
                    .running
                    .iter()
                    .filter(|(_, w)| **w == id)
                    .map(|(a, _)| *a)
                    .collect();
                for a in attempts {
                    st.running.remove(&a);
                    let why = format!("lost (no heartbeat for {} ms)", timeout.as_millis());
                    failed.push(Self::ended(&mut st, a, id.clone(), why));
                }
            }
            if !failed.is_empty() {
                self.changed.notify_all();
            }
        }
        for (worker, held) in lost_held {
            self.emit(ClusterEvent::WorkerLost { worker, held });
        }
        for event in failed {
            self.emit(event);
        }
    }

    fn session(&self) -> u64 {
        self.session.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn heartbeats(&self) -> Vec<WorkerHeartbeats> {
        lock(&self.state)
            .heartbeats
            .iter()
            .map(|(id, (n, last))| WorkerHeartbeats {
                worker: id.clone(),
                received: *n,
                since_last: last.elapsed(),
            })
            .collect()
    }

    /// `Err` naming why when this coordinator may not command workers (a
    /// lost leadership).
    fn fenced(&self) -> Result<(), String> {
        match &*lock(&self.fence) {
            Some(fence) => fence.verify().map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// High availability: `UNAVAILABLE` once the leadership's fence has
    /// passed, so that a deposed leader answers no worker (registration,
    /// heartbeat, split request, report) and its workers look the new
    /// leader up in etcd instead of staying with it (docs/ha.md).
    fn answer_fenced(&self) -> Result<(), Status> {
        self.fenced().map_err(|reason| {
            Status::unavailable(format!(
                "this coordinator no longer leads the job: {reason}"
            ))
        })
    }

    fn known(&self, worker: &str, session: u64) -> bool {
        session == self.session()
            && lock(&self.state)
                .workers
                .get(worker)
                .is_some_and(|w| w.alive)
    }
}

/// The coordinator's registry of worker processes and its gRPC service.
/// Dropping it stops the service.
pub struct Cluster {
    rt: Runtime,
    shared: Arc<Shared>,
    addr: SocketAddr,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("addr", &self.addr)
            .field("session", &self.shared.session())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Starts the `Coordinator` service on `opts.listen` and the heartbeat
    /// check.
    ///
    /// # Errors
    ///
    /// The address does not parse or cannot be bound, or the async
    /// runtime cannot start; the message names the address.
    pub fn start(opts: ClusterOptions) -> Result<Self, String> {
        let listen: SocketAddr = opts
            .listen
            .parse()
            .map_err(|e| format!("--listen `{}`: {e}", opts.listen))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("coordhost-cluster")
            .build()
            .map_err(|e| format!("the async runtime: {e}"))?;
        let listener =
            std::net::TcpListener::bind(listen).map_err(|e| format!("--listen {listen}: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("--listen {listen}: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("--listen {listen}: {e}"))?;
        // A fresh session per coordinator process: the clock's nanoseconds
        // mixed with the pid, so two coordinators started in the same
        // nanosecond still differ.
        let session = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ (u64::from(std::process::id()) << 32);
        let leading = !opts.standby;
        let grants = crate::tls::ReadGrants::random()?;
        let tls_config = opts.tls.as_ref().map(crate::tls::ClusterTls::server_config);
        let shared = Arc::new(Shared {
            grants,
            session: std::sync::atomic::AtomicU64::new(session),
            leading: std::sync::atomic::AtomicBool::new(leading),
            ended: std::sync::atomic::AtomicBool::new(false),
            fence: Mutex::new(None),
            opts,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            events: Mutex::new(None),
            components: Mutex::new(HashMap::new()),
        });
        let service = coordinator_server::CoordinatorServer::new(Service {
            shared: shared.clone(),
        })
        .max_decoding_message_size(rpc::MAX_MESSAGE_BYTES);
        let incoming = {
            let _guard = rt.enter();
            tokio::net::TcpListener::from_std(listener)
                .map_err(|e| format!("--listen {listen}: {e}"))?
        };
        rt.spawn(async move {
            let router = crate::tls::server_builder().add_service(service);
            if let Err(e) =
                crate::tls::serve(router, incoming, tls_config, "coordinator service").await
            {
                tracing::error!(target: crate::LOG_TARGET, "coordinator service: {e}");
            }
        });
        let check = shared.clone();
        rt.spawn(async move {
            let every = check.opts.heartbeat_interval;
            loop {
                tokio::time::sleep(every).await;
                let c = check.clone();
                let _ignored = tokio::task::spawn_blocking(move || c.check_heartbeats()).await;
            }
        });
        tracing::info!(target: crate::LOG_TARGET, address = %addr, session, tls = shared.opts.tls.is_some(), "serving workers");
        Ok(Self { rt, shared, addr })
    }

    /// The address the service is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// This coordinator's session number.
    pub fn session(&self) -> u64 {
        self.shared.session()
    }

    /// High availability: this coordinator now leads with `term`, which
    /// becomes its session (a newer leader's is always larger), and checks
    /// `fence` before every command to a worker; workers may register.
    pub fn lead(&self, term: u64, fence: Arc<dyn coordhost_log::Fence>) {
        *lock(&self.shared.fence) = Some(fence);
        self.shared
            .session
            .store(term, std::sync::atomic::Ordering::SeqCst);
        self.shared
            .leading
            .store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::info!(target: crate::LOG_TARGET, term, "leading: serving workers");
    }

    /// Waits until `n` workers are registered and alive.
    ///
    /// # Errors
    ///
    /// How many registered when `timeout` passed.
    pub fn wait_for_workers(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.shared.state);
        loop {
            let alive = st.workers.values().filter(|w| w.alive).count();
            if alive >= n {
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(format!(
                    "{n} workers expected (--external-workers), {alive} registered within {} ms (--worker-wait-ms)",
                    timeout.as_millis()
                ));
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Installs where events go (the JobMaster's loop), replacing any
    /// earlier one.
    pub fn set_events(&self, f: impl Fn(ClusterEvent) + Send + Sync + 'static) {
        *lock(&self.shared.events) = Some(Arc::new(f));
    }

    /// Makes `components` (those of the job's scalar functions and source
    /// readers) the ones workers may fetch with `FetchComponent`, replacing
    /// any earlier ones: a worker asks by SHA-256 and gets the file's bytes
    /// only while they still have that hash. Two plugins of one component
    /// are served once.
    pub fn serve_components(&self, components: Vec<ServedComponent>) {
        *lock(&self.shared.components) = components
            .into_iter()
            .map(|c| (c.sha256.clone(), c))
            .collect();
    }

    /// Names the split wait of source vertex `vertex` (its enumerator
    /// plugin's `limits.split-wait-ms`), for split requests from workers.
    pub fn set_split_wait(&self, vertex: usize, wait: Duration, plugin: &str, vertex_id: &str) {
        lock(&self.shared.state)
            .split_waits
            .insert(vertex, (wait, plugin.to_owned(), vertex_id.to_owned()));
    }

    /// Slots of the workers alive now.
    pub fn slots(&self) -> u64 {
        lock(&self.shared.state)
            .workers
            .values()
            .filter(|w| w.alive)
            .map(|w| u64::from(w.slots))
            .sum()
    }

    /// Partitions the workers alive now reported holding when they
    /// registered: (worker id, producer attempt, edge, location, bytes).
    pub fn reported_partitions(
        &self,
    ) -> Vec<(String, AttemptId, usize, PathBuf, SubpartitionBytes)> {
        let st = lock(&self.shared.state);
        let mut out = Vec::new();
        for (id, w) in st.workers.iter().filter(|(_, w)| w.alive) {
            for h in &w.held {
                out.push((
                    id.clone(),
                    from_wire(h.producer.as_ref()),
                    h.edge as usize,
                    PathBuf::from(&h.location),
                    SubpartitionBytes::from(h.bytes_per_subpartition.clone()),
                ));
            }
        }
        out
    }

    /// The registry as a shuffle master's `job-shuffle-context` (WIT
    /// 0.1.1) for job `job` of `graph`: the partitions the live workers
    /// reported at registration, named as the shuffle master names them
    /// (data set `<from>-<to>`, producer vertex id). A report whose edge
    /// or vertex does not exist in `graph`, or whose producer is not the
    /// edge's source, is left out: a worker's report is checked before the
    /// plugin sees it.
    pub fn job_shuffle_context(
        self: &Arc<Self>,
        job: &str,
        graph: &coordhost_model::graph::JobGraph,
    ) -> Arc<dyn coordhost_wasm::JobShuffleContext> {
        Arc::new(ReportsForShuffle {
            cluster: self.clone(),
            job: job.to_owned(),
            vertices: graph.vertices.iter().map(|v| v.id.clone()).collect(),
            edges: (0..graph.edges.len())
                .map(|e| (graph.edges[e].from, graph.data_set_id(e)))
                .collect(),
        })
    }

    /// Whether the fence forbids commanding workers now; logs it once per call.
    fn refused_by_fence(&self, command: &str) -> bool {
        match self.shared.fenced() {
            Ok(()) => false,
            Err(reason) => {
                tracing::warn!(target: crate::LOG_TARGET, "not sending {command} to workers: {reason}");
                true
            }
        }
    }

    /// Records that `worker` holds the output of finished `attempt` (a
    /// partition it reported at registration that recovery kept), so
    /// consumers are sent there.
    pub fn adopt(&self, attempt: AttemptId, worker: &str) {
        lock(&self.shared.state)
            .holders
            .insert(attempt, worker.to_owned());
    }

    /// The alive worker the next attempt of an execution vertex goes to:
    /// one not in `avoid` (the workers its earlier attempts failed on) if
    /// there is one, then the most free slots, then the lowest id. `None`
    /// when no worker is alive: the attempt cannot be placed now.
    pub fn pick_worker(&self, avoid: &std::collections::BTreeSet<String>) -> Option<String> {
        let st = lock(&self.shared.state);
        let mut load: BTreeMap<&str, usize> = BTreeMap::new();
        for w in st.running.values() {
            *load.entry(w.as_str()).or_default() += 1;
        }
        st.workers
            .iter()
            .filter(|(_, w)| w.alive)
            .min_by_key(|(id, w)| {
                let busy = load.get(id.as_str()).copied().unwrap_or(0);
                // Not failed on before; free slots, most first; the id.
                (
                    avoid.contains(*id),
                    busy as i64 - i64::from(w.slots),
                    (*id).clone(),
                )
            })
            .map(|(id, _)| id.clone())
    }

    /// Deploys `task` on `worker` (from [`Cluster::pick_worker`]) and
    /// returns at once: the `Deploy` call runs on the cluster's runtime,
    /// so a worker that hangs never holds the JobMaster's loop. An attempt
    /// is deployed once, to one worker: when the call is refused, fails,
    /// or gets no answer within the heartbeat timeout (or the worker is
    /// gone before it is sent), the attempt may have started there and
    /// pulled splits, so it is never sent elsewhere under the same number:
    /// [`ClusterEvent::DeployFailed`] ends it (unless its report or the
    /// worker's loss ended it first), the worker is asked to cancel it, and
    /// the JobMaster runs the execution vertex again under a new attempt.
    ///
    /// # Errors
    ///
    /// Only when this coordinator may not command workers (a lost
    /// leadership); the message says why.
    pub fn deploy(&self, task: &RemoteTask, worker: &str) -> Result<(), String> {
        self.shared.fenced()?;
        let attempt = task.attempt;
        let failed = |message: String| {
            self.shared.emit(ClusterEvent::DeployFailed {
                attempt,
                worker: worker.to_owned(),
                message,
            });
            Ok(())
        };
        let vertex = match postcard::to_stdvec(&task.vertex) {
            Ok(v) => v,
            Err(e) => return failed(format!("was not sent the task: encoding it failed: {e}")),
        };
        let (mut client, inputs) = {
            let mut st = lock(&self.shared.state);
            let Some(w) = st.workers.get(worker).filter(|w| w.alive) else {
                drop(st);
                return failed("was lost before the Deploy was sent".into());
            };
            let client = w.client.clone();
            let inputs = self.wire_inputs(&st, task, worker);
            // Registered as running before the call: a report (and split
            // requests) can come before the call returns.
            st.running.insert(attempt, worker.to_owned());
            st.unacked.insert(attempt);
            (client, inputs)
        };
        let session = self.shared.session();
        let request = rpc::DeployRequest {
            session,
            job: task.job.clone(),
            attempt: Some(to_wire(attempt)),
            vertex_id: task.vertex_id.clone(),
            vertex,
            inputs,
            outputs: Self::wire_outputs(task),
            record_delay_us: task.record_delay.as_micros() as u64,
            fail_after_records: task.fail_after.unwrap_or(0),
        };
        tracing::info!(target: crate::LOG_TARGET, worker = %worker, vertex = %task.vertex_id, subtask = attempt.subtask, attempt = attempt.attempt, "deploying");
        let shared = self.shared.clone();
        let worker = worker.to_owned();
        self.rt.spawn(async move {
            let timeout = shared.opts.heartbeat_timeout;
            let message = match tokio::time::timeout(timeout, client.deploy(request)).await {
                Ok(Ok(_)) => {
                    lock(&shared.state).unacked.remove(&attempt);
                    return;
                }
                Ok(Err(status)) => format!(
                    "did not take the Deploy ({:?}: {})",
                    status.code(),
                    status.message()
                ),
                Err(_) => format!(
                    "did not answer the Deploy within {} ms",
                    timeout.as_millis()
                ),
            };
            Self::deploy_failed(&shared, client, session, attempt, worker, message).await;
        });
        Ok(())
    }

    /// The `Deploy` request's inputs of `task` on `worker`: each partition
    /// with its holder's address (`st` is the locked registry) and a read
    /// grant for this attempt alone.
    fn wire_inputs(&self, st: &State, task: &RemoteTask, worker: &str) -> Vec<rpc::InputPartition> {
        let attempt = task.attempt;
        task.inputs
            .iter()
            .map(|i| {
                let location = i.location.to_string_lossy().into_owned();
                // Only this worker may read it, only for this attempt.
                let grant = self.shared.grants.sign(&crate::tls::Grant {
                    reader: worker,
                    attempt: (attempt.vertex as u32, attempt.subtask, attempt.attempt),
                    location: &location,
                    first: i.subpartitions.start,
                    end: i.subpartitions.end,
                });
                rpc::InputPartition {
                    producer: Some(to_wire(i.producer)),
                    address: st
                        .holders
                        .get(&i.producer)
                        .and_then(|h| st.workers.get(h))
                        .map(|h| h.address.clone())
                        .unwrap_or_default(),
                    location,
                    first_subpartition: i.subpartitions.start,
                    end_subpartition: i.subpartitions.end,
                    grant,
                    data_set: i.expected.producer.data_set.clone(),
                    producer_vertex_id: i.expected.producer.job_vertex.clone(),
                    bytes_per_subpartition: i.expected.bytes.clone().unwrap_or_default(),
                    object_url: i
                        .object
                        .as_ref()
                        .map(ToString::to_string)
                        .unwrap_or_default(),
                }
            })
            .collect()
    }

    /// The `Deploy` request's outputs of `task`.
    fn wire_outputs(task: &RemoteTask) -> Vec<rpc::OutputPartition> {
        task.outputs
            .iter()
            .map(|o| rpc::OutputPartition {
                edge: o.edge as u32,
                location: o.location.to_string_lossy().into_owned(),
                num_subpartitions: o.num_subpartitions,
                data_set: o.data_set.clone(),
                object_url: o
                    .object
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// A `Deploy` of `attempt` on `worker` failed with `message`: unless its
    /// report or the worker's loss ended it already, ends it
    /// ([`ClusterEvent::DeployFailed`]) and asks the worker to cancel it.
    async fn deploy_failed(
        shared: &Shared,
        mut client: WorkerClient<Channel>,
        session: u64,
        attempt: AttemptId,
        worker: String,
        message: String,
    ) {
        {
            let mut st = lock(&shared.state);
            if st.running.get(&attempt) != Some(&worker) {
                // Its report, or the worker's loss, ended it already:
                // once is enough.
                return;
            }
            st.running.remove(&attempt);
            st.unacked.remove(&attempt);
            shared.changed.notify_all();
        }
        tracing::warn!(target: crate::LOG_TARGET, worker = %worker, "deploying {attempt:?}: {message}");
        shared.emit(ClusterEvent::DeployFailed {
            attempt,
            worker: worker.clone(),
            message,
        });
        // It may run there all the same: ask it to stop (best effort;
        // its split requests and its report are refused anyway).
        if shared.fenced().is_ok() {
            let cancel = rpc::CancelRequest {
                session,
                attempt: Some(to_wire(attempt)),
            };
            let _ignored =
                tokio::time::timeout(Duration::from_secs(1), client.cancel(cancel)).await;
        }
    }

    /// Asks the workers to cancel every running attempt (the job is
    /// ending). Best effort.
    pub fn cancel_all(&self) {
        if self.refused_by_fence("cancel") {
            return;
        }
        let calls: Vec<(WorkerClient<Channel>, AttemptId)> = {
            let st = lock(&self.shared.state);
            st.running
                .iter()
                .filter_map(|(a, w)| st.workers.get(w).map(|w| (w.client.clone(), *a)))
                .collect()
        };
        for (mut client, attempt) in calls {
            let request = rpc::CancelRequest {
                session: self.shared.session(),
                attempt: Some(to_wire(attempt)),
            };
            let _ignored = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(1), client.cancel(request)).await
            });
        }
    }

    /// Asks the worker running `attempt` to cancel it. Best effort.
    pub fn cancel(&self, attempt: AttemptId) {
        if self.refused_by_fence("cancel") {
            return;
        }
        let client = {
            let st = lock(&self.shared.state);
            st.running
                .get(&attempt)
                .and_then(|w| st.workers.get(w))
                .map(|w| w.client.clone())
        };
        if let Some(mut client) = client {
            let request = rpc::CancelRequest {
                session: self.shared.session(),
                attempt: Some(to_wire(attempt)),
            };
            let _ignored = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(1), client.cancel(request)).await
            });
        }
    }

    /// The job `job` ended as `end`: tells every alive worker so
    /// (`Goodbye`, all at once, each call bounded by a second) and takes no
    /// registration from now on. A worker that took it stops heartbeating
    /// and is no longer counted as alive (nor given up later); one that did
    /// not (unreachable, or an older build: `UNIMPLEMENTED`) notices this
    /// process's exit as a loss, as it would without a goodbye. Call it
    /// last, once nothing more will be asked of the workers. Not sent once
    /// the fence has passed (a deposed leader commands no worker).
    pub fn goodbye(&self, job: &str, end: rpc::JobEnd) {
        self.shared
            .ended
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if self.refused_by_fence("goodbye") {
            return;
        }
        let session = self.shared.session();
        let clients: Vec<(String, WorkerClient<Channel>)> = lock(&self.shared.state)
            .workers
            .iter()
            .filter(|(_, w)| w.alive)
            .map(|(id, w)| (id.clone(), w.client.clone()))
            .collect();
        let calls: Vec<_> = clients
            .into_iter()
            .map(|(id, mut client)| {
                let request = rpc::GoodbyeRequest {
                    session,
                    job: job.to_owned(),
                    end: end.into(),
                };
                let call = self.rt.spawn(async move {
                    tokio::time::timeout(Duration::from_secs(1), client.goodbye(request)).await
                });
                (id, call)
            })
            .collect();
        for (id, call) in calls {
            match self.rt.block_on(call) {
                Ok(Ok(Ok(_))) => {
                    tracing::debug!(target: crate::LOG_TARGET, worker = %id, "said goodbye");
                    if let Some(w) = lock(&self.shared.state).workers.get_mut(&id) {
                        w.alive = false;
                    }
                }
                Ok(Ok(Err(status))) => {
                    tracing::info!(target: crate::LOG_TARGET, worker = %id, "the worker did not take the goodbye: {}", status.message());
                }
                Ok(Err(_)) | Err(_) => {
                    tracing::info!(target: crate::LOG_TARGET, worker = %id, "the worker did not answer the goodbye within 1 s");
                }
            }
        }
    }

    /// Heartbeats received per worker that registered with this process,
    /// by worker id.
    pub fn heartbeats(&self) -> Vec<WorkerHeartbeats> {
        self.shared.heartbeats()
    }

    /// [`Cluster::heartbeats`] as a function that holds the registry but
    /// not the cluster's runtime (for `/metrics`, which calls it from the
    /// web server's threads and may outlive the cluster).
    pub fn heartbeat_reader(&self) -> impl Fn() -> Vec<WorkerHeartbeats> + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.heartbeats()
    }

    /// Whether `attempt` runs on a worker now.
    pub fn is_running(&self, attempt: AttemptId) -> bool {
        lock(&self.shared.state).running.contains_key(&attempt)
    }

    /// Copies the staged sink output of finished `attempt` of sink vertex
    /// `vertex_id` from the worker that ran it to `dest` (created,
    /// fsynced). Only the coordinator moves sink output; the worker never
    /// publishes.
    ///
    /// # Errors
    ///
    /// The worker is unknown or unreachable, has no such output, or `dest`
    /// cannot be written; the message names the worker or the file.
    pub fn fetch_sink(
        &self,
        job: &str,
        vertex_id: &str,
        attempt: AttemptId,
        dest: &Path,
    ) -> Result<(), String> {
        self.shared.fenced()?;
        let (worker, mut client) = {
            let st = lock(&self.shared.state);
            let id = st
                .holders
                .get(&attempt)
                .cloned()
                .ok_or_else(|| format!("no worker ran {attempt:?}"))?;
            let w = st
                .workers
                .get(&id)
                .ok_or_else(|| format!("worker `{id}` is unknown"))?;
            (id, w.client.clone())
        };
        let request = rpc::FetchSinkRequest {
            session: self.shared.session(),
            attempt: Some(to_wire(attempt)),
            job: job.to_owned(),
            vertex_id: vertex_id.to_owned(),
        };
        let io = |e: std::io::Error| format!("{}: {e}", dest.display());
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut file = std::fs::File::create(dest).map_err(io)?;
        // Bounded: a worker cut off mid-stream (its packets lost, nothing
        // refused) would hold the scheduler until TCP gave up; each answer
        // must come within the heartbeat timeout.
        let quiet = self.shared.opts.heartbeat_timeout;
        let silent = || {
            format!(
                "worker `{worker}`: no answer within {} ms while sending staged output",
                quiet.as_millis()
            )
        };
        let fetched: Result<u64, String> = self.rt.block_on(async {
            use std::io::Write;
            let mut stream = tokio::time::timeout(quiet, client.fetch_sink_output(request))
                .await
                .map_err(|_| silent())?
                .map_err(|s| format!("worker `{worker}`: {}", s.message()))?
                .into_inner();
            let mut total = None;
            let mut got = 0u64;
            while let Some(chunk) = tokio::time::timeout(quiet, stream.message())
                .await
                .map_err(|_| silent())?
                .map_err(|s| format!("worker `{worker}`: {}", s.message()))?
            {
                if total.is_none() {
                    total = Some(chunk.total_bytes);
                    continue;
                }
                got += chunk.data.len() as u64;
                file.write_all(&chunk.data).map_err(io)?;
            }
            match total {
                Some(t) if t == got => Ok(got),
                _ => Err(format!(
                    "worker `{worker}`: the staged output of {attempt:?} ended after {got} bytes"
                )),
            }
        });
        fetched?;
        file.sync_all().map_err(io)?;
        Ok(())
    }

    /// Asks the worker holding `attempt`'s output to delete `locations`.
    /// Best effort: a worker that is gone has nothing left to delete that
    /// the next job's `release_job` would not.
    pub fn release(&self, attempt: AttemptId, locations: &[PathBuf]) {
        if self.refused_by_fence("release") {
            return;
        }
        let client = {
            let st = lock(&self.shared.state);
            st.holders
                .get(&attempt)
                .and_then(|w| st.workers.get(w))
                .map(|w| w.client.clone())
        };
        if let Some(mut client) = client {
            let request = rpc::ReleaseRequest {
                session: self.shared.session(),
                locations: locations
                    .iter()
                    .map(|l| l.to_string_lossy().into_owned())
                    .collect(),
                job: String::new(),
                whole_job: false,
            };
            let _ignored = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), client.release(request)).await
            });
        }
        lock(&self.shared.state).holders.remove(&attempt);
    }

    /// Asks every alive worker to delete all it holds of `job` (its
    /// partitions and staged sink output): the job is over.
    pub fn release_job(&self, job: &str) {
        if self.refused_by_fence("release") {
            return;
        }
        let clients: Vec<(String, WorkerClient<Channel>)> = lock(&self.shared.state)
            .workers
            .iter()
            .filter(|(_, w)| w.alive)
            .map(|(id, w)| (id.clone(), w.client.clone()))
            .collect();
        for (id, mut client) in clients {
            let request = rpc::ReleaseRequest {
                session: self.shared.session(),
                locations: Vec::new(),
                job: job.to_owned(),
                whole_job: true,
            };
            let answer = self.rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), client.release(request)).await
            });
            if !matches!(answer, Ok(Ok(_))) {
                tracing::warn!(target: crate::LOG_TARGET, worker = %id, "releasing the partitions of job `{job}` failed");
            }
        }
        let mut st = lock(&self.shared.state);
        st.holders.clear();
        for w in st.workers.values_mut() {
            w.held.clear();
        }
    }
}

/// The `Coordinator` service.
struct Service {
    shared: Arc<Shared>,
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
    /// With TLS: `Ok` only when the caller's certificate names it worker
    /// `worker` of this coordinator's job (`ID.worker.JOB`); a refusal is
    /// logged once and answered `PERMISSION_DENIED` naming what the
    /// certificate says. Without TLS there is no identity to check.
    fn check_worker(&self, caller: &Caller, worker: &str, call: &str) -> Result<(), Status> {
        let Some(tls) = &self.shared.opts.tls else {
            return Ok(());
        };
        let name = crate::tls::worker_name(worker, tls.job());
        let certs = caller.0.as_deref().map(Vec::as_slice);
        if crate::tls::peer_is(certs, &name) {
            return Ok(());
        }
        let from = caller
            .1
            .map_or_else(|| "an unknown address".to_owned(), |a| a.to_string());
        let why = format!(
            "{call} as worker `{worker}` refused: the caller at {from} ({}) is not `{name}`",
            crate::tls::describe_peer(certs)
        );
        tracing::warn!(target: crate::LOG_TARGET, "{why}");
        Err(Status::permission_denied(why))
    }

    /// Whether this coordinator takes the registration `req`: `UNAVAILABLE`
    /// while a standby, once its job ended or past the fence;
    /// `FAILED_PRECONDITION` for another protocol revision.
    fn check_registration(&self, req: &rpc::RegisterRequest) -> Result<(), Status> {
        if !self
            .shared
            .leading
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(Status::unavailable(
                "this coordinator is a standby: it does not lead the job (yet)",
            ));
        }
        if self.shared.ended.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Status::unavailable(
                "the job of this coordinator has ended: it is exiting",
            ));
        }
        self.shared.answer_fenced()?;
        if req.protocol_version != rpc::PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "worker `{}` speaks protocol coordhost.worker.v1 revision {}, this coordinator revision {}",
                req.worker_id,
                req.protocol_version,
                rpc::PROTOCOL_VERSION
            )));
        }
        Ok(())
    }

    /// A client of the worker service at `address` (lazily connected; with
    /// TLS, to a peer carrying a worker name of this job).
    fn worker_client(&self, address: &str) -> Result<WorkerClient<Channel>, Status> {
        let tls = self
            .shared
            .opts
            .tls
            .as_ref()
            .map(|t| (t, crate::tls::any_worker_name(t.job())));
        let endpoint = crate::tls::endpoint(
            address,
            tls.as_ref().map(|(t, name)| (*t, name.as_str())),
            Duration::from_secs(2),
        )
        .map_err(Status::invalid_argument)?;
        Ok(WorkerClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(rpc::MAX_MESSAGE_BYTES))
    }

    /// Ends the attempts `worker` ran before it registered again (`st` is
    /// the locked registry); returns the events to emit once it is unlocked.
    fn end_stale_attempts(st: &mut State, worker: &str) -> Vec<ClusterEvent> {
        // A worker registering again lost its running attempts (it
        // canceled them when it lost this coordinator).
        let stale: Vec<AttemptId> = st
            .running
            .iter()
            .filter(|(_, w)| **w == worker)
            .map(|(a, _)| *a)
            .collect();
        stale
            .into_iter()
            .map(|a| {
                st.running.remove(&a);
                let why = "registered again".to_owned();
                Shared::ended(st, a, worker.to_owned(), why)
            })
            .collect()
    }

    /// Forgets the finished partitions `worker` held before and does not
    /// report in `held` now (`st` is the locked registry); returns their
    /// producers.
    fn drop_lost_holdings(
        st: &mut State,
        worker: &str,
        held: &[rpc::HeldPartition],
    ) -> Vec<AttemptId> {
        // Finished output it held before and does not report now is
        // gone (a new process under the same id starts empty): lost at
        // once, as when a worker is given up, rather than found missing
        // by one consumer after another.
        let still: std::collections::HashSet<AttemptId> = held
            .iter()
            .map(|h| from_wire(h.producer.as_ref()))
            .collect();
        let lost: Vec<AttemptId> = st
            .holders
            .iter()
            .filter(|(a, w)| **w == worker && !still.contains(a))
            .map(|(a, _)| *a)
            .collect();
        for a in &lost {
            st.holders.remove(a);
        }
        lost
    }
}

fn task_report(f: rpc::Finished) -> TaskReport {
    TaskReport {
        records_in: f.records_in,
        records_out: f.records_out,
        partitions: f
            .partitions
            .into_iter()
            .map(|p| {
                (
                    p.edge as usize,
                    SubpartitionBytes::from(p.bytes_per_subpartition),
                )
            })
            .collect(),
        splits: f.splits,
    }
}

fn task_error(worker: &str, f: rpc::Failure) -> TaskError {
    use rpc::failure::Kind;
    let location = PathBuf::from(format!("worker `{worker}`"));
    match f.kind {
        Some(Kind::PartitionNotFound(p)) => TaskError::PartitionNotFound {
            producer: from_wire(Some(&p)),
            location,
            reason: f.message,
        },
        Some(Kind::PartitionCorrupt(p)) => TaskError::PartitionCorrupt {
            producer: from_wire(Some(&p)),
            source: coordhost_data::shuffle::ShuffleError::Io {
                path: location,
                source: std::io::Error::other(f.message),
            },
        },
        // The worker's message names the file, line and column; the
        // coordinator adds the worker (`(on worker ...)`).
        Some(Kind::InvalidData(true)) => TaskError::InvalidData { detail: f.message },
        _ => TaskError::Worker {
            worker: worker.to_owned(),
            message: f.message,
        },
    }
}

#[tonic::async_trait]
impl coordinator_server::Coordinator for Service {
    async fn register(
        &self,
        request: Request<rpc::RegisterRequest>,
    ) -> Result<Response<rpc::RegisterResponse>, Status> {
        let who = caller(&request);
        let req = request.into_inner();
        self.check_worker(&who, &req.worker_id, "Register")?;
        self.check_registration(&req)?;
        let client = self.worker_client(&req.address)?;
        let (failed, lost) = {
            let mut st = lock(&self.shared.state);
            let stale = Self::end_stale_attempts(&mut st, &req.worker_id);
            let lost = Self::drop_lost_holdings(&mut st, &req.worker_id, &req.held);
            tracing::info!(target: crate::LOG_TARGET, worker = %req.worker_id, address = %req.address, slots = req.slots, held = req.held.len(), "worker registered");
            st.heartbeats
                .entry(req.worker_id.clone())
                .or_insert((0, Instant::now()))
                .1 = Instant::now();
            st.workers.insert(
                req.worker_id.clone(),
                WorkerEntry {
                    address: req.address.clone(),
                    slots: req.slots.max(1),
                    alive: true,
                    last_seen: Instant::now(),
                    client,
                    held: req.held,
                },
            );
            self.shared.changed.notify_all();
            (stale, lost)
        };
        if !lost.is_empty() {
            tracing::warn!(target: crate::LOG_TARGET, worker = %req.worker_id, lost = lost.len(), "registered again without partitions it held: they are lost");
            self.shared.emit(ClusterEvent::WorkerLost {
                worker: req.worker_id.clone(),
                held: lost,
            });
        }
        for event in failed {
            self.shared.emit(event);
        }
        Ok(Response::new(rpc::RegisterResponse {
            session: self.shared.session(),
            heartbeat_interval_ms: self.shared.opts.heartbeat_interval.as_millis() as u64,
            heartbeat_timeout_ms: self.shared.opts.heartbeat_timeout.as_millis() as u64,
            read_key: self.shared.grants.bytes().to_vec(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<rpc::HeartbeatRequest>,
    ) -> Result<Response<rpc::HeartbeatResponse>, Status> {
        self.shared.answer_fenced()?;
        let who = caller(&request);
        let req = request.into_inner();
        self.check_worker(&who, &req.worker_id, "Heartbeat")?;
        let mut st = lock(&self.shared.state);
        let known = match st.workers.get_mut(&req.worker_id) {
            Some(w) if w.alive && req.session == self.shared.session() => {
                w.last_seen = Instant::now();
                true
            }
            _ => false,
        };
        if known {
            let seen = st
                .heartbeats
                .entry(req.worker_id.clone())
                .or_insert((0, Instant::now()));
            seen.0 += 1;
            seen.1 = Instant::now();
        }
        Ok(Response::new(rpc::HeartbeatResponse { known }))
    }

    async fn request_split(
        &self,
        request: Request<rpc::SplitRequest>,
    ) -> Result<Response<rpc::SplitResponse>, Status> {
        use rpc::split_response::Answer;
        self.shared.answer_fenced()?;
        let who = caller(&request);
        let req = request.into_inner();
        self.check_worker(&who, &req.worker_id, "RequestSplit")?;
        let attempt = from_wire(req.attempt.as_ref());
        let answer = |a| Ok(Response::new(rpc::SplitResponse { answer: Some(a) }));
        let runs_there = lock(&self.shared.state).running.get(&attempt) == Some(&req.worker_id);
        if !self.shared.known(&req.worker_id, req.session) || !runs_there {
            return answer(Answer::Error(format!(
                "{attempt:?} does not run on worker `{}` in this coordinator's session",
                req.worker_id
            )));
        }
        let (wait, plugin, vertex) = lock(&self.shared.state)
            .split_waits
            .get(&attempt.vertex)
            .cloned()
            .unwrap_or((
                coordhost_wasm::DEFAULT_SPLIT_WAIT,
                String::new(),
                String::new(),
            ));
        let (reply, rx) = channel();
        self.shared
            .emit(ClusterEvent::SplitRequest { attempt, reply });
        let waited = tokio::task::spawn_blocking(move || rx.recv_timeout(wait))
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        // The fence may have passed while the enumerator answered: a
        // deposed leader hands out no split.
        self.shared.answer_fenced()?;
        match waited {
            Ok(Ok(Some(split))) => match postcard::to_stdvec(&split) {
                Ok(bytes) => answer(Answer::Split(bytes)),
                Err(e) => answer(Answer::Error(format!("encoding a split: {e}"))),
            },
            Ok(Ok(None)) => answer(Answer::EndOfSplits(true)),
            Ok(Err(e)) => answer(Answer::Error(e)),
            Err(RecvTimeoutError::Timeout) => answer(Answer::Error(format!(
                "plugin `{plugin}` gave subtask {} of `{vertex}` no split and no end of splits within its split wait of {} ms (limits.split-wait-ms)",
                attempt.subtask,
                wait.as_millis()
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                answer(Answer::Error("the scheduler dropped the request".into()))
            }
        }
    }

    async fn report_attempt(
        &self,
        request: Request<rpc::AttemptReport>,
    ) -> Result<Response<rpc::ReportResponse>, Status> {
        self.shared.answer_fenced()?;
        let who = caller(&request);
        let req = request.into_inner();
        self.check_worker(&who, &req.worker_id, "ReportAttempt")?;
        let attempt = from_wire(req.attempt.as_ref());
        let accepted = {
            let mut st = lock(&self.shared.state);
            let alive = req.session == self.shared.session()
                && st.workers.get(&req.worker_id).is_some_and(|w| w.alive);
            let ran_there = st.running.get(&attempt) == Some(&req.worker_id);
            if alive && ran_there {
                st.running.remove(&attempt);
                st.unacked.remove(&attempt);
                if matches!(req.outcome, Some(rpc::attempt_report::Outcome::Finished(_))) {
                    st.holders.insert(attempt, req.worker_id.clone());
                }
                self.shared.changed.notify_all();
                true
            } else {
                false
            }
        };
        if !accepted {
            tracing::warn!(target: crate::LOG_TARGET, worker = %req.worker_id, "refused the report of vertex #{} subtask {} attempt {}: not current on this worker in this session", attempt.vertex, attempt.subtask, attempt.attempt);
            return Ok(Response::new(rpc::ReportResponse { accepted: false }));
        }
        match req.outcome {
            Some(rpc::attempt_report::Outcome::Finished(f)) => {
                self.shared.emit(ClusterEvent::Finished {
                    attempt,
                    report: task_report(f),
                });
            }
            Some(rpc::attempt_report::Outcome::Failed(f)) => {
                self.shared.emit(ClusterEvent::Failed {
                    attempt,
                    error: task_error(&req.worker_id, f),
                });
            }
            None => {
                self.shared.emit(ClusterEvent::Failed {
                    attempt,
                    error: TaskError::Worker {
                        worker: req.worker_id,
                        message: "a report without an outcome".into(),
                    },
                });
            }
        }
        Ok(Response::new(rpc::ReportResponse { accepted: true }))
    }

    type FetchComponentStream = tokio_stream::Iter<std::vec::IntoIter<Result<rpc::Chunk, Status>>>;

    async fn fetch_component(
        &self,
        request: Request<rpc::ComponentRequest>,
    ) -> Result<Response<Self::FetchComponentStream>, Status> {
        self.shared.answer_fenced()?;
        let who = caller(&request);
        let req = request.into_inner();
        self.check_worker(&who, &req.worker_id, "FetchComponent")?;
        if !self.shared.known(&req.worker_id, req.session) {
            let why = format!(
                "FetchComponent refused: worker `{}` is not registered in this coordinator's session",
                req.worker_id
            );
            tracing::warn!(target: crate::LOG_TARGET, "{why}");
            return Err(Status::permission_denied(why));
        }
        let served = lock(&self.shared.components)
            .get(&req.sha256)
            .cloned()
            .ok_or_else(|| {
                Status::not_found(format!(
                    "no scalar function or source reader of this job has a component of sha256 `{}`",
                    coordhost_wasm::one_line(&req.sha256, 80)
                ))
            })?;
        let bytes = tokio::task::spawn_blocking(move || component_bytes(&served))
            .await
            .map_err(|e| Status::internal(e.to_string()))??;
        tracing::info!(target: crate::LOG_TARGET, worker = %req.worker_id, sha256 = %req.sha256, bytes = bytes.len(), "sending a component");
        Ok(Response::new(chunked(bytes)))
    }
}

/// The bytes of `served`'s file for a worker, read anew (at most
/// [`coordhost_io::files::MAX_COMPONENT_BYTES`]) and checked to still have the
/// job's hash: a component edited since the job was checked is refused
/// here, naming both hashes, rather than shipped.
fn component_bytes(served: &ServedComponent) -> Result<Vec<u8>, Status> {
    use sha2::Digest;
    let bytes = coordhost_io::files::read_regular_file(
        &served.path,
        coordhost_io::files::MAX_COMPONENT_BYTES,
    )
    .map_err(|e| {
        Status::failed_precondition(format!(
            "the component {} of {} cannot be read: {e}",
            served.path.display(),
            served.plugin
        ))
    })?;
    let now: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if now != served.sha256 {
        return Err(Status::failed_precondition(format!(
            "the component {} of {} changed since the job was checked: its sha256 is now {now}, the job's is {}",
            served.path.display(),
            served.plugin,
            served.sha256
        )));
    }
    #[cfg(feature = "failpoints")]
    let bytes = crate::failpoints::corrupt_component(bytes);
    Ok(bytes)
}

/// `bytes` as a stream of chunks: a first one carrying the total, then
/// pieces of at most [`rpc::CHUNK_BYTES`].
fn chunked(bytes: Vec<u8>) -> tokio_stream::Iter<std::vec::IntoIter<Result<rpc::Chunk, Status>>> {
    let mut chunks = vec![Ok(rpc::Chunk {
        total_bytes: bytes.len() as u64,
        data: Vec::new(),
        index: Vec::new(),
    })];
    chunks.extend(bytes.chunks(rpc::CHUNK_BYTES).map(|c| {
        Ok(rpc::Chunk {
            total_bytes: 0,
            data: c.to_vec(),
            index: Vec::new(),
        })
    }));
    tokio_stream::iter(chunks)
}

/// [`Cluster::job_shuffle_context`]: the worker registry seen by a shuffle
/// master plugin.
struct ReportsForShuffle {
    cluster: Arc<Cluster>,
    job: String,
    /// Job vertex ids, by index.
    vertices: Vec<String>,
    /// Per edge: its source vertex and its data set id.
    edges: Vec<(usize, String)>,
}

impl coordhost_wasm::JobShuffleContext for ReportsForShuffle {
    fn reported_partitions(&self, job_id: &str) -> Option<Vec<coordhost_wasm::ReportedPartition>> {
        use coordhost_wasm::{ExecutionAttemptId, ReportedPartition, ResultPartitionId};
        if job_id != self.job {
            // Workers serve the coordinator's one job: nothing of another.
            return Some(Vec::new());
        }
        let reports = self.cluster.reported_partitions();
        let named = reports
            .into_iter()
            .filter_map(|(worker, attempt, edge, location, bytes)| {
                let (from, data_set) = self.edges.get(edge)?;
                if *from != attempt.vertex {
                    return None;
                }
                Some(ReportedPartition {
                    worker_id: worker,
                    id: ResultPartitionId {
                        intermediate_data_set: data_set.clone(),
                        producer: ExecutionAttemptId {
                            job_vertex: self.vertices.get(attempt.vertex)?.clone(),
                            subtask: attempt.subtask,
                            attempt: attempt.attempt,
                        },
                    },
                    relative_location: location.to_str()?.to_owned(),
                    bytes_per_subpartition: bytes.to_vec(),
                })
            })
            .collect();
        Some(named)
    }
}
