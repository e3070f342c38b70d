//! High availability (issue 15, docs/ha.md): coordinators of one job elect
//! a leader through etcd, and the leader holds its leadership only while
//! its etcd lease lives.
//!
//! The election is etcd's (`v3election`): every coordinator of job `J`
//! campaigns on `coordhost/leader/J` with a lease of `ttl`; etcd makes the
//! oldest live campaign the leader. The campaign's value is the address
//! the leader serves workers on, so workers find the leader with a
//! `Leader` query ([`leader_address`]). The **term** of a leadership is
//! the etcd revision at which its leader key was created: it grows with
//! every election, so a newer leader always has a larger term (Flink's
//! fencing token, ZooKeeper's epoch).
//!
//! A leader keeps its lease alive from a thread of its own. It counts
//! itself the leader only until its **fence**, `sent + ttl - margin` of
//! the last keep-alive etcd answered ([`fence_margin`]; a conservative
//! bound: etcd restarts the lease's clock when it *receives* the
//! keep-alive, after `sent`). It knows that instant by its own clock,
//! without asking etcd: no call to etcd outlives it. Past that instant, or
//! when etcd answers that the lease is gone, the leadership is lost for
//! good: the [`Leadership`]'s [`Fence`] fails every check from then on,
//! and the process stops (`on_lost`) at once. Every durable step of the
//! event log, every sink publication, every command to a worker and every
//! answer to one (registration, heartbeat, split request, report) checks
//! the fence first, so a leader that was paused (SIGSTOP) past its lease
//! and resumed does none of them, even before its keep-alive thread runs
//! again, and its workers go looking for the new leader in etcd.
//!
//! Where the idea comes from: Flink's `LeaderElectionService` with the
//! ZooKeeper or Kubernetes drivers, and etcd's own `concurrency.Election`.

/// The `tracing` target of everything high availability logs (each try to
/// reach etcd, the campaign, the lease's keep-alive): the name this crate
/// had as a module of the binary, so `COORDHOST_LOG=coordhost::ha=debug`
/// (or `coordhost=debug`) shows it.
pub const LOG_TARGET: &str = "coordhost::ha";

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};

use coordhost_log::Fence;

/// Prefix of every election name: `coordhost/leader/<job>`.
pub const ELECTION_PREFIX: &str = "coordhost/leader/";

/// How long a coordinator keeps trying to reach etcd at its start when the
/// connection itself fails (a TCP connect that timed out or was refused):
/// past it, the start fails with one `--ha:` line. A refusal by etcd (user,
/// password, permissions) ends the start at once. Like the connection
/// timeout of Flink's ZooKeeper HA client, it rides out a dropped packet or
/// an etcd that is still starting; unlike it, it is short, because nothing
/// can run without etcd.
pub const START_PATIENCE: Duration = Duration::from_secs(8);

/// Why HA could not be set up or kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HaError {
    /// The `--ha` or `--coordinator` URL is not `etcd://HOST:PORT[,HOST:PORT...]`.
    #[error("{0}")]
    Url(String),
    /// etcd could not be reached or refused a call.
    #[error("etcd at {endpoints}{}: {what}: {source}", user.as_ref().map(|u| format!(" (user `{u}`)")).unwrap_or_default())]
    Etcd {
        /// The endpoints, comma-separated.
        endpoints: String,
        /// With etcd's user authentication: the user (never the password).
        user: Option<String>,
        /// The step that failed.
        what: &'static str,
        /// etcd-client's error.
        source: etcd_client::Error,
    },
    /// The async runtime could not be started.
    #[error("cannot start the runtime for etcd: {0}")]
    Runtime(std::io::Error),
    /// The lease expired before the campaign was won.
    #[error("the etcd lease expired while campaigning for the leadership of job `{job}`")]
    LeaseExpired {
        /// The job.
        job: String,
    },
}

/// The words of etcd's refusals of a client itself (`rpctypes` of etcd's
/// API): its user name is missing or unknown, its password wrong, or its
/// roles do not cover the key. etcd's election service passes them on as
/// `Unknown`, so they are told by their message. An expired auth token
/// (`invalid auth token`) is not among them: a new connection
/// authenticates again.
const REFUSALS: [&str; 4] = [
    "etcdserver: user name is empty",
    "etcdserver: user name not found",
    "etcdserver: authentication failed",
    "etcdserver: permission denied",
];

impl HaError {
    /// Whether etcd refused this process's authentication or permissions
    /// ([`REFUSALS`], or the gRPC codes `PERMISSION_DENIED`), which no
    /// retry changes.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        self.refusal().is_some()
    }

    /// Whether the call failed before etcd answered at all: the gRPC
    /// status `UNAVAILABLE` that tonic gives a connection it could not make
    /// or lost (a TCP connect that timed out or was refused). Another try
    /// may succeed; see [`START_PATIENCE`].
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Etcd {
                source: etcd_client::Error::GRpcStatus(status),
                ..
            } => status.code() == tonic::Code::Unavailable,
            Self::Etcd {
                source: etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_),
                ..
            } => true,
            _ => false,
        }
    }

    /// etcd's words when it refused this process's authentication or
    /// permissions (see [`HaError::is_refusal`]), e.g. `etcdserver:
    /// authentication failed, invalid user ID or password`.
    #[must_use]
    pub fn refusal(&self) -> Option<&str> {
        let Self::Etcd {
            source: etcd_client::Error::GRpcStatus(status),
            ..
        } = self
        else {
            return None;
        };
        (status.code() == tonic::Code::PermissionDenied
            || REFUSALS.iter().any(|r| status.message().contains(r)))
        .then(|| status.message())
    }
}

/// An etcd cluster, as `etcd://HOST:PORT[,HOST:PORT...]` (plain) or
/// `etcds://...` (TLS) names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUrl {
    /// `HOST:PORT` of each member.
    pub endpoints: Vec<String>,
    /// The path after the endpoints, without its `/` (workers: the job).
    pub path: String,
    /// `etcds://`: TLS to etcd (then [`EtcdUrl::security`] must carry a CA).
    pub secure: bool,
    /// The CA, client certificate and user of the connections
    /// ([`EtcdUrl::with_security`]).
    pub security: EtcdSecurity,
}

/// How a client authenticates to etcd (issue 25): TLS with the server's
/// CA and optionally a client certificate (etcd `--client-cert-auth`),
/// and/or etcd's user authentication.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EtcdSecurity {
    /// PEM of the CA that signed etcd's server certificate.
    pub ca: Option<Vec<u8>>,
    /// PEM of the client certificate and its key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// etcd user name and password.
    pub user: Option<(String, String)>,
}

impl fmt::Debug for EtcdSecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key or the password.
        f.debug_struct("EtcdSecurity")
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .field("user", &self.user.as_ref().map(|u| &u.0))
            .finish()
    }
}

/// The etcd flags of `run --ha` and `worker --coordinator etcd(s)://…`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EtcdArgs {
    /// The CA of etcd's server certificate (PEM); needs an `etcds://` URL.
    #[arg(long, value_name = "FILE")]
    pub ha_ca: Option<std::path::PathBuf>,
    /// A client certificate for etcd (PEM; etcd `--client-cert-auth`).
    #[arg(long, value_name = "FILE", requires_all = ["ha_key", "ha_ca"])]
    pub ha_cert: Option<std::path::PathBuf>,
    /// The key of --ha-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "ha_cert")]
    pub ha_key: Option<std::path::PathBuf>,
    /// etcd user authentication: the user; the password comes from
    /// --ha-password-file or the COORDHOST_HA_PASSWORD variable, never
    /// from the command line.
    #[arg(long, value_name = "NAME")]
    pub ha_user: Option<String>,
    /// A file whose first line is the etcd user's password.
    #[arg(long, value_name = "FILE", requires = "ha_user")]
    pub ha_password_file: Option<std::path::PathBuf>,
}

/// The variable an etcd user's password may come from.
pub const PASSWORD_VARIABLE: &str = "COORDHOST_HA_PASSWORD";

impl EtcdArgs {
    /// Reads the files the flags name.
    ///
    /// # Errors
    /// A file cannot be read, or a user has no password; the message names
    /// the flag and the file.
    pub fn security(&self) -> Result<EtcdSecurity, String> {
        let read = |flag: &str, p: &std::path::Path| {
            std::fs::read(p).map_err(|e| format!("{flag} {}: {e}", p.display()))
        };
        let ca = self
            .ha_ca
            .as_deref()
            .map(|p| read("--ha-ca", p))
            .transpose()?;
        let identity = match (&self.ha_cert, &self.ha_key) {
            (Some(c), Some(k)) => Some((read("--ha-cert", c)?, read("--ha-key", k)?)),
            _ => None,
        };
        let user = match &self.ha_user {
            None => None,
            Some(name) => {
                let password = match &self.ha_password_file {
                    Some(p) => String::from_utf8_lossy(&read("--ha-password-file", p)?)
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_owned(),
                    None => std::env::var(PASSWORD_VARIABLE).map_err(|_| {
                        format!(
                            "--ha-user {name}: no password: give --ha-password-file FILE or set {PASSWORD_VARIABLE}"
                        )
                    })?,
                };
                Some((name.clone(), password))
            }
        };
        Ok(EtcdSecurity { ca, identity, user })
    }
}

impl EtcdUrl {
    /// Parses `etcd://HOST:PORT[,HOST:PORT...][/PATH]`.
    ///
    /// # Errors
    /// [`HaError::Url`] naming what is wrong.
    pub fn parse(url: &str) -> Result<Self, HaError> {
        let (secure, rest) = match (url.strip_prefix("etcd://"), url.strip_prefix("etcds://")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => {
                return Err(HaError::Url(format!(
                    "`{url}` is not an etcd URL (etcd://HOST:PORT[,HOST:PORT...], or etcds:// for TLS)"
                )));
            }
        };
        let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
        let endpoints: Vec<String> = hosts
            .split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        if endpoints.is_empty() {
            return Err(HaError::Url(format!("`{url}` names no etcd endpoint")));
        }
        for e in &endpoints {
            let ok = e
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(HaError::Url(format!(
                    "`{url}`: endpoint `{e}` is not HOST:PORT"
                )));
            }
        }
        Ok(Self {
            endpoints,
            path: path.trim_end_matches('/').to_owned(),
            secure,
            security: EtcdSecurity::default(),
        })
    }

    /// Whether `url` names etcd (`etcd://` or `etcds://`).
    pub fn is_etcd(url: &str) -> bool {
        url.starts_with("etcd://") || url.starts_with("etcds://")
    }

    /// This URL with `security`.
    ///
    /// # Errors
    /// [`HaError::Url`]: `etcds://` without a CA, or a CA or client
    /// certificate with a plain `etcd://` URL.
    pub fn with_security(mut self, security: EtcdSecurity) -> Result<Self, HaError> {
        if self.secure && security.ca.is_none() {
            return Err(HaError::Url(format!(
                "`{self}`: TLS to etcd needs the CA of its certificate (--ha-ca FILE)"
            )));
        }
        if !self.secure && (security.ca.is_some() || security.identity.is_some()) {
            return Err(HaError::Url(format!(
                "`{self}`: --ha-ca and --ha-cert are for TLS: write etcds://"
            )));
        }
        self.security = security;
        Ok(self)
    }

    fn joined(&self) -> String {
        self.endpoints.join(",")
    }

    fn runtime() -> Result<tokio::runtime::Runtime, HaError> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("coordhost-etcd")
            .enable_all()
            .build()
            .map_err(HaError::Runtime)
    }

    /// A client whose every request times out after 5 s.
    async fn connect(&self) -> Result<Client, HaError> {
        self.connect_with(Some(Duration::from_secs(5))).await
    }

    /// A client whose requests time out after `timeout`, or never (a
    /// campaign blocks until it is won).
    async fn connect_with(&self, timeout: Option<Duration>) -> Result<Client, HaError> {
        let mut options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        if let Some(timeout) = timeout {
            options = options.with_timeout(timeout);
        }
        if let Some(ca) = &self.security.ca {
            let mut tls = etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(ca));
            if let Some((cert, key)) = &self.security.identity {
                tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        if let Some((user, password)) = &self.security.user {
            options = options.with_user(user.clone(), password.clone());
        }
        Client::connect(&self.endpoints, Some(options))
            .await
            .map_err(|source| self.error("connect", source))
    }

    fn error(&self, what: &'static str, source: etcd_client::Error) -> HaError {
        HaError::Etcd {
            endpoints: self.joined(),
            user: self.security.user.as_ref().map(|(name, _)| name.clone()),
            what,
            source,
        }
    }
}

impl fmt::Display for EtcdUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.secure { "etcds" } else { "etcd" };
        write!(f, "{scheme}://{}", self.joined())?;
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        Ok(())
    }
}

/// The election name of job `job`.
#[must_use]
pub fn election_name(job: &str) -> String {
    format!("{ELECTION_PREFIX}{job}")
}

/// Options of a campaign.
#[derive(Debug, Clone)]
pub struct CampaignOptions {
    /// The etcd cluster.
    pub etcd: EtcdUrl,
    /// The job: the election is `coordhost/leader/<job>`.
    pub job: String,
    /// The lease's time to live; etcd counts whole seconds (at least 1).
    pub ttl: Duration,
    /// What the campaign announces: the address this coordinator serves
    /// workers on (empty without worker processes).
    pub address: String,
}

/// State shared by a [`Leadership`], its keep-alive thread and its fence.
#[derive(Debug)]
struct Shared {
    term: u64,
    job: String,
    /// The leadership holds until this instant at the latest.
    valid_until: Mutex<Instant>,
    lost: AtomicBool,
}

impl Shared {
    /// The fence: the leadership holds until this instant at the latest.
    fn until(&self) -> Instant {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn holds(&self) -> bool {
        !self.lost.load(Ordering::SeqCst) && Instant::now() < self.until()
    }
}

/// This process leads the job: its term and its lease, kept alive by a
/// thread until the leadership is lost or this value is dropped (which
/// resigns, so a standby takes over at once).
pub struct Leadership {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    runtime: Option<tokio::runtime::Runtime>,
    client: Client,
    lease: i64,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("term", &self.shared.term)
            .field("job", &self.shared.job)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

/// Campaigns for the leadership of `options.job` and blocks until this
/// process leads (a standby waits here; `waiting` is called once if
/// another coordinator leads at the start, with its term and address).
/// Then keeps the lease alive from a thread; `on_lost` runs on that thread
/// when the leadership is lost (the lease expired or etcd said it is gone),
/// once.
///
/// # Errors
/// [`HaError::Etcd`] when etcd cannot be reached, the lease cannot be
/// granted or the campaign fails; [`HaError::Runtime`].
pub fn campaign(
    options: &CampaignOptions,
    waiting: impl FnOnce(u64, &str),
    on_lost: impl FnOnce(u64) + Send + 'static,
) -> Result<Leadership, HaError> {
    let runtime = EtcdUrl::runtime()?;
    let etcd = &options.etcd;
    let ttl_s = i64::try_from(options.ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let name = election_name(&options.job);
    let mut waiting = Some(waiting);
    let mut started = false;
    let mut said = false;
    let first = Instant::now();
    let (client, lease, term, valid_until) = runtime.block_on(async {
        loop {
            match campaign_once(options, &name, ttl_s, &mut waiting, &mut started).await {
                Ok(won) => return Ok(won),
                // A connection that could not be made at the start (a
                // dropped SYN on a loaded network, etcd still binding)
                // is tried again within START_PATIENCE, quietly.
                Err(e) if !started && e.is_transient() && first.elapsed() < START_PATIENCE => {
                    tracing::debug!(target: crate::LOG_TARGET, "etcd not reached yet for job `{}`: {e}; trying again", options.job);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                // etcd not there at the start: one clear error.
                Err(e) if !started => return Err(e),
                // etcd refuses this process itself (no user, a user
                // without the right to the job's election): campaigning
                // again cannot change that.
                Err(e) if e.is_refusal() => return Err(e),
                // A standby outlives etcd's restarts: it campaigns again.
                Err(e) => {
                    // Said once; every retry goes to the debug log.
                    if !said {
                        tracing::warn!(
                            target: crate::LOG_TARGET, "while waiting to lead job `{}`: {e}; campaigning again until etcd answers",
                            options.job
                        );
                        said = true;
                    }
                    tracing::debug!(target: crate::LOG_TARGET, "campaign for job `{}`: {e}", options.job);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    })?;
    let shared = Arc::new(Shared {
        term,
        job: options.job.clone(),
        valid_until: Mutex::new(valid_until),
        lost: AtomicBool::new(false),
    });
    let stop = Arc::new(AtomicBool::new(false));
    keep_alive(
        &runtime,
        etcd.clone(),
        client.clone(),
        lease,
        options.ttl.max(Duration::from_secs(1)),
        shared.clone(),
        stop.clone(),
        on_lost,
    );
    Ok(Leadership {
        shared,
        stop,
        runtime: Some(runtime),
        client,
        lease,
    })
}

/// One campaign: a lease (kept alive while waiting), then etcd's
/// `Campaign`, which returns once this process leads. `started` is set once
/// etcd granted the lease; `waiting` is called (once in all) when another
/// coordinator leads. Returns the client, the lease, the term and the end
/// of the leadership by the last keep-alive.
async fn campaign_once(
    options: &CampaignOptions,
    name: &str,
    ttl_s: i64,
    waiting: &mut Option<impl FnOnce(u64, &str)>,
    started: &mut bool,
) -> Result<(Client, i64, u64, Instant), HaError> {
    let etcd = &options.etcd;
    let mut client = etcd.connect().await?;
    let granted_at = Instant::now();
    let lease = client
        .lease_grant(ttl_s, None)
        .await
        .map_err(|e| etcd.error("lease grant", e))?;
    *started = true;
    // The lease must outlive a campaign that waits: keep it alive from the
    // start.
    let (mut keeper, mut answers) = client
        .lease_keep_alive(lease.id())
        .await
        .map_err(|e| etcd.error("lease keep-alive", e))?;
    if let Ok(current) = client.leader(name.to_owned()).await
        && let Some(kv) = current.kv()
        && let Some(waiting) = waiting.take()
    {
        waiting(
            u64::try_from(kv.create_revision()).unwrap_or(0),
            &String::from_utf8_lossy(kv.value()),
        );
    }
    let period = Duration::from_secs(u64::try_from(ttl_s).unwrap_or(1)) / 3;
    // No request timeout: the campaign blocks until this process leads.
    let mut campaigner = etcd.connect_with(None).await?;
    let mut campaigning =
        Box::pin(campaigner.campaign(name.to_owned(), options.address.clone(), lease.id()));
    let mut valid_until = fence_after(granted_at, lease.ttl());
    let elected = loop {
        tokio::select! {
            elected = &mut campaigning => break elected.map_err(|e| etcd.error("campaign", e))?,
            () = tokio::time::sleep(period) => {
                let sent = Instant::now();
                keeper.keep_alive().await.map_err(|e| etcd.error("lease keep-alive", e))?;
                match answers.message().await {
                    Ok(Some(a)) if a.ttl() > 0 => {
                        valid_until = fence_after(sent, a.ttl());
                    }
                    Ok(_) => return Err(HaError::LeaseExpired { job: options.job.clone() }),
                    Err(e) => return Err(etcd.error("lease keep-alive", e)),
                }
            }
        }
    };
    let term = elected
        .leader()
        .map_or(0, |k| u64::try_from(k.rev()).unwrap_or(0));
    Ok((client, lease.id(), term, valid_until))
}

/// How long before the end of the lease, by this process's clock, the
/// leadership ends: a twentieth of the TTL, at least 50 ms. It covers a
/// clock of this machine running slower than etcd's and the moment between
/// a fence check and the step it guards.
#[must_use]
pub fn fence_margin(ttl: Duration) -> Duration {
    (ttl / 20).max(Duration::from_millis(50))
}

/// The fence: the instant a keep-alive sent at `sent` and answered with
/// `ttl_s` seconds keeps the leadership until (`sent + ttl - margin`).
/// etcd restarts the lease's clock when it *receives* the keep-alive, after
/// `sent`, so this ends before etcd can let the lease expire.
fn fence_after(sent: Instant, ttl_s: i64) -> Instant {
    let ttl = Duration::from_secs(u64::try_from(ttl_s).unwrap_or(0));
    sent + ttl.saturating_sub(fence_margin(ttl))
}

/// Spawns the keep-alive task: a keep-alive every third of the TTL; each
/// answer moves the fence to [`fence_after`]. The leadership is lost when
/// etcd answers TTL 0, or when the fence passes without an answer: every
/// call to etcd is bounded by the fence, so the task notices the moment it
/// passes, however etcd fails to answer (a cut network holds a call until
/// the client's request timeout, 5 s, otherwise). A paused process finds
/// it passed the moment it runs again.
#[expect(clippy::too_many_arguments, reason = "one private spawn site")]
fn keep_alive(
    runtime: &tokio::runtime::Runtime,
    etcd: EtcdUrl,
    mut client: Client,
    lease: i64,
    ttl: Duration,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    on_lost: impl FnOnce(u64) + Send + 'static,
) {
    let period = (ttl / 3).max(Duration::from_millis(100));
    runtime.spawn(async move {
        let mut stream = None;
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            if !shared.holds() {
                break;
            }
            // No call to etcd outlives the fence. A slow answer before it
            // still extends the leadership (from its `sent`): the stream is
            // kept, not dropped and opened again, while the fence holds.
            let bound = tokio::time::Instant::from_std(shared.until());
            if stream.is_none() {
                stream = match tokio::time::timeout_at(bound, client.lease_keep_alive(lease)).await
                {
                    Ok(Ok(s)) => Some(s),
                    Ok(Err(e)) => {
                        tracing::debug!(target: crate::LOG_TARGET, term = shared.term, "keep-alive stream to {etcd}: {e}");
                        None
                    }
                    Err(_elapsed) => None,
                };
            }
            let sent = Instant::now();
            let mut answered = false;
            if let Some((keeper, answers)) = stream.as_mut() {
                let round = async {
                    keeper.keep_alive().await?;
                    answers.message().await
                };
                match tokio::time::timeout_at(bound, round).await {
                    Ok(Ok(Some(a))) if a.ttl() > 0 => {
                        let until = fence_after(sent, a.ttl());
                        let mut v = shared
                            .valid_until
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner);
                        // Never extend a leadership that already ended.
                        if *v > Instant::now() {
                            *v = until;
                        }
                        answered = true;
                    }
                    Ok(Ok(Some(_) | None)) => {
                        tracing::warn!(target: crate::LOG_TARGET, term = shared.term, "etcd says the lease is gone");
                        shared.lost.store(true, Ordering::SeqCst);
                        break;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(target: crate::LOG_TARGET, term = shared.term, "keep-alive to {etcd} failed: {e}");
                        stream = None;
                    }
                    Err(_elapsed) => stream = None,
                }
            }
            let pause = if answered {
                period
            } else {
                Duration::from_millis(100)
            };
            // Wake at the fence at the latest.
            let fence = tokio::time::Instant::from_std(shared.until());
            tokio::time::sleep_until(fence.min(tokio::time::Instant::now() + pause)).await;
        }
        shared.lost.store(true, Ordering::SeqCst);
        #[cfg(feature = "failpoints")]
        if blind_leader() {
            tracing::warn!(
                target: crate::LOG_TARGET, term = shared.term,
                "test knob: the lease is lost, and this leader goes on as if it were not"
            );
            return;
        }
        if !stop.load(Ordering::SeqCst) {
            on_lost(shared.term);
        }
    });
}

impl Leadership {
    /// The term: the etcd revision at which this leadership began.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.shared.term
    }

    /// Whether the leadership still holds (lease alive by the local bound).
    #[must_use]
    pub fn holds(&self) -> bool {
        self.shared.holds()
    }

    /// The fence that the event log, sink publication and worker commands
    /// check: it fails once the leadership is lost.
    #[must_use]
    pub fn fence(&self) -> Arc<dyn Fence> {
        Arc::new(LeaseFence {
            shared: self.shared.clone(),
        })
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(runtime) = self.runtime.take() {
            // Revoking the lease deletes the leader key: a standby is
            // elected at once instead of after the TTL.
            let mut client = self.client.clone();
            let lease = self.lease;
            let _ignored = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await
            });
            runtime.shutdown_background();
        }
    }
}

/// The [`Fence`] of a [`Leadership`].
#[derive(Debug)]
struct LeaseFence {
    shared: Arc<Shared>,
}

impl Fence for LeaseFence {
    fn verify(&self) -> std::io::Result<()> {
        #[cfg(feature = "failpoints")]
        if blind_leader() {
            return Ok(());
        }
        if self.shared.holds() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "lost the leadership of job `{}` (term {}): another coordinator may lead it now",
                self.shared.job, self.shared.term
            )))
        }
    }
}

/// The current leader of job `job`: its term and the address it serves
/// workers on, or `None` when no coordinator leads.
///
/// # Errors
/// [`HaError::Etcd`] when etcd cannot be reached.
pub async fn leader_address(etcd: &EtcdUrl, job: &str) -> Result<Option<(u64, String)>, HaError> {
    let mut client = etcd.connect().await?;
    match client.leader(election_name(job)).await {
        Ok(answer) => Ok(answer.kv().map(|kv| {
            (
                u64::try_from(kv.create_revision()).unwrap_or(0),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })),
        // etcd answers "election: no leader" as an error.
        Err(etcd_client::Error::GRpcStatus(s)) if s.message().contains("no leader") => Ok(None),
        Err(e) => Err(etcd.error("leader", e)),
    }
}

/// Whether the test knob `ha::blind-leader` is set (fail point
/// `ha::blind-leader`): the leadership's fence always holds and a lost
/// lease does not stop the process. Compiled only with the `failpoints`
/// feature.
#[cfg(feature = "failpoints")]
fn blind_leader() -> bool {
    fail::eval("ha::blind-leader", |_| ()).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_ends_a_margin_before_the_lease_counted_from_the_send() {
        let sent = Instant::now();
        assert_eq!(fence_after(sent, 1), sent + Duration::from_millis(950));
        assert_eq!(fence_after(sent, 3), sent + Duration::from_millis(2850));
        assert_eq!(fence_after(sent, 0), sent, "a TTL of 0 holds nothing");
        assert_eq!(
            fence_margin(Duration::from_millis(200)),
            Duration::from_millis(50)
        );
    }

    #[test]
    fn etcd_urls_name_endpoints_and_an_optional_path() {
        let u = EtcdUrl::parse("etcd://127.0.0.1:2379,10.0.0.2:2379/tpch").unwrap();
        assert_eq!(u.endpoints, ["127.0.0.1:2379", "10.0.0.2:2379"]);
        assert_eq!(u.path, "tpch");
        assert_eq!(u.to_string(), "etcd://127.0.0.1:2379,10.0.0.2:2379/tpch");
        for bad in [
            "http://x:1",
            "etcd://",
            "etcd://host",
            "etcd://host:port",
            "etcd://:1",
        ] {
            assert!(EtcdUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
