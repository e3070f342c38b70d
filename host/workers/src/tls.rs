//! Who may talk to a cluster (issue 25): mutual TLS between coordinators
//! and workers, the names certificates carry, the read grants of
//! `ReadSubpartitions`, the limits both gRPC servers apply to every peer,
//! and the certificates of a test cluster (`coordhost cluster certs`).
//!
//! # Names
//!
//! Every process of a cluster holds a certificate signed by the cluster's
//! CA (`--tls-ca`). What it may do follows from the DNS names (subject
//! alternative names) of that certificate, for job `JOB`:
//!
//! | process | names | used for |
//! |---|---|---|
//! | a coordinator of `JOB` | `coordinator.JOB` | the only peer a worker takes commands from; what a worker checks when it connects to a coordinator |
//! | worker `ID` of `JOB` | `ID.worker.JOB` and `worker.JOB` | the first is the worker's identity (its registered id must be `ID`); the second is what a peer checks when it connects to any worker of the job |
//!
//! A name is checked with webpki's own subject-name check
//! ([`peer_is`]), never by comparing strings of the certificate.
//!
//! # Limits
//!
//! [`server_builder`] and [`serve`] apply [`Limits`]: connections per peer
//! address and in all, the TLS handshake's deadline, HTTP/2 streams per
//! connection, frame and header sizes, keep-alive pings, and the longest
//! time a call may take. A connection over a limit is closed at once.
//!
//! This module stands on the lowest floor: it knows nothing of the
//! coordinator or the workers.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject as _};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The three files of a process's TLS identity (`--tls-cert`, `--tls-key`,
/// `--tls-ca`, or the `[cluster] tls = { cert, key, ca }` table of a job
/// file or a worker's `--config` file), all PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// This process's certificate (the first one in the file is its own,
    /// any after it intermediates).
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The cluster's CA certificate(s): a peer's certificate must be signed
    /// by one of them.
    pub ca: PathBuf,
    /// The file whose `[cluster] tls` table named the three; `None`: the
    /// flags did. Messages name the field or the flag accordingly.
    pub from: Option<PathBuf>,
}

impl TlsFiles {
    /// Where file `which` (`cert`, `key` or `ca`) was named, for messages:
    /// `--tls-cert`, or ``FILE: field `cluster.tls.cert`:``.
    pub fn place(&self, which: &str) -> String {
        match &self.from {
            None => format!("--tls-{which}"),
            Some(file) => format!("{}: field `cluster.tls.{which}`:", file.display()),
        }
    }
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM.
    #[error("{place} {}: {reason}", path.display())]
    File {
        /// The flag that named it (`--tls-cert`), or the file and field
        /// ([`TlsFiles::place`]).
        place: String,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The certificate does not carry the names its role needs.
    #[error("{place} {}: {reason}", path.display())]
    Identity {
        /// Where the certificate was named ([`TlsFiles::place`]).
        place: String,
        /// The certificate file.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// rustls refused the configuration (a key that does not match the
    /// certificate, an unusable CA).
    #[error("TLS: {0}")]
    Config(String),
    /// `cluster certs` could not make or write a certificate.
    #[error("cluster certs: {0}")]
    Certs(String),
}

/// The TLS flags of `coordhost run` and `coordhost worker`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// This process's certificate (PEM), signed by the cluster's CA: a
    /// coordinator's names `coordinator.JOB`, worker ID's `ID.worker.JOB`
    /// (`coordhost cluster certs` makes them). With --tls-key and --tls-ca,
    /// every coordinator–worker and worker–worker connection is mutual TLS.
    #[arg(long, value_name = "FILE", requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_ca"])]
    pub tls_key: Option<PathBuf>,
    /// The cluster's CA certificate (PEM): peers must present a
    /// certificate it signed.
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// Serve plain, unauthenticated gRPC on a --listen address that is not
    /// loopback (without TLS such an address is refused): whoever reaches
    /// the port can join the cluster.
    #[arg(long)]
    pub insecure_listen: bool,
}

impl TlsArgs {
    /// The three files, when given.
    pub fn files(&self) -> Option<TlsFiles> {
        match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (Some(cert), Some(key), Some(ca)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
                from: None,
            }),
            _ => None,
        }
    }

    /// `Err` naming the rule when `listen` (`HOST:PORT`) is not a loopback
    /// address and neither TLS (`tls`: the flags, or a `[cluster] tls`
    /// table, name the files) nor --insecure-listen is given. An address
    /// that does not parse is left to the caller's own check.
    pub fn check_listen(&self, listen: &str, tls: bool) -> Result<(), String> {
        let Ok(addr) = listen.parse::<SocketAddr>() else {
            return Ok(());
        };
        if addr.ip().is_loopback() || tls || self.insecure_listen {
            return Ok(());
        }
        Err(format!(
            "--listen {listen}: not a loopback address, and no TLS: give --tls-cert, --tls-key and --tls-ca or a `[cluster] tls` table (`coordhost cluster certs DIR --job JOB` makes the files), or --insecure-listen to let whoever reaches {listen} join the cluster"
        ))
    }
}

/// What a process is in its cluster, read from its own certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// A coordinator of the job.
    Coordinator,
    /// A worker with this id.
    Worker {
        /// The `ID` of `ID.worker.JOB`.
        id: String,
    },
}

/// `ID.worker.JOB`: the name that identifies worker `id` of `job`.
pub fn worker_name(id: &str, job: &str) -> String {
    format!("{id}.worker.{job}")
}

/// `worker.JOB`: the name every worker of `job` carries (what a client
/// connecting to some worker of the job checks).
pub fn any_worker_name(job: &str) -> String {
    format!("worker.{job}")
}

/// `coordinator.JOB`: the name of a coordinator of `job`.
pub fn coordinator_name(job: &str) -> String {
    format!("coordinator.{job}")
}

/// Whether the first (end-entity) certificate of `certs` is valid for DNS
/// name `name`, by webpki's subject-name rules. False without a
/// certificate or for a name that is not a DNS name. The chain itself was
/// verified during the handshake.
pub fn peer_is(certs: Option<&[CertificateDer<'static>]>, name: &str) -> bool {
    let Some(first) = certs.and_then(|c| c.first()) else {
        return false;
    };
    let Ok(cert) = webpki::EndEntityCert::try_from(first) else {
        return false;
    };
    let Ok(server_name) = ServerName::try_from(name) else {
        return false;
    };
    cert.verify_is_valid_for_subject_name(&server_name).is_ok()
}

/// The DNS names of a peer's certificate, for log lines and refusals:
/// `names a.b, c.d`, or `no certificate`.
pub fn describe_peer(certs: Option<&[CertificateDer<'static>]>) -> String {
    let Some(first) = certs.and_then(|c| c.first()) else {
        return "no certificate".into();
    };
    match webpki::EndEntityCert::try_from(first) {
        Ok(cert) => {
            let names: Vec<&str> = cert.valid_dns_names().collect();
            if names.is_empty() {
                "a certificate without DNS names".into()
            } else {
                format!("certificate names {}", names.join(", "))
            }
        }
        Err(_) => "a certificate that does not parse".into(),
    }
}

/// A process's TLS identity, loaded and checked: its role in job `job`,
/// the server configuration of its gRPC service and what its clients
/// present.
#[derive(Clone)]
pub struct ClusterTls {
    job: String,
    role: Role,
    server: Arc<rustls::ServerConfig>,
    ca_pem: Vec<u8>,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterTls")
            .field("job", &self.job)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

fn read(place: &str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        place: place.to_owned(),
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn certs_of(
    place: &str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::File {
            place: place.to_owned(),
            path: path.to_path_buf(),
            reason: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::File {
            place: place.to_owned(),
            path: path.to_path_buf(),
            reason: "holds no certificate (`-----BEGIN CERTIFICATE-----`)".into(),
        });
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CA certificates of `pem` as a root store.
fn roots(place: &str, path: &Path, pem: &[u8]) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs_of(place, path, pem)? {
        roots.add(c).map_err(|e| TlsError::File {
            place: place.to_owned(),
            path: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}

impl ClusterTls {
    /// Loads `files` as the identity of a coordinator of `job`: its
    /// certificate must carry `coordinator.JOB`.
    ///
    /// # Errors
    ///
    /// A file cannot be read or parsed, the key does not fit the
    /// certificate, or the name is missing ([`TlsError`], naming the flag
    /// and file).
    pub fn coordinator(files: &TlsFiles, job: &str) -> Result<Self, TlsError> {
        let (certs, tls) = Self::load(files, job.to_owned(), Role::Coordinator)?;
        if !peer_is(Some(certs.as_slice()), &coordinator_name(job)) {
            return Err(TlsError::Identity {
                place: files.place("cert"),
                path: files.cert.clone(),
                reason: format!(
                    "{} has no name `{}`: it is not a certificate of a coordinator of job `{job}` (make one with `coordhost cluster certs DIR --job {job}`)",
                    describe_peer(Some(certs.as_slice())),
                    coordinator_name(job)
                ),
            });
        }
        Ok(tls)
    }

    /// Loads `files` as the identity of a worker: its certificate names it
    /// `ID.worker.JOB` (and `worker.JOB`); with `id`, `ID` must be `id`.
    ///
    /// # Errors
    ///
    /// As [`ClusterTls::coordinator`]; also when the certificate names no
    /// worker, or another one than `id`.
    pub fn worker(files: &TlsFiles, id: Option<&str>) -> Result<Self, TlsError> {
        let pem = read(&files.place("cert"), &files.cert)?;
        let certs = certs_of(&files.place("cert"), &files.cert, &pem)?;
        let identity_error = |reason: String| TlsError::Identity {
            place: files.place("cert"),
            path: files.cert.clone(),
            reason,
        };
        let cert = webpki::EndEntityCert::try_from(&certs[0])
            .map_err(|e| identity_error(format!("does not parse: {e}")))?;
        let found: Vec<(String, String)> = cert
            .valid_dns_names()
            .filter_map(|name| {
                let (head, job) = name.split_once(".worker.")?;
                (!head.is_empty() && !head.contains('.') && !head.contains('*') && !job.is_empty())
                    .then(|| (head.to_owned(), job.to_owned()))
            })
            .collect();
        let (worker, job) = match (found.as_slice(), id) {
            ([one], None) => one.clone(),
            (list, Some(id)) if list.iter().any(|(w, _)| w == id) => list
                .iter()
                .find(|(w, _)| w == id)
                .cloned()
                .unwrap_or_default(),
            ([], _) => {
                return Err(identity_error(format!(
                    "{} has no name `ID.worker.JOB`: it is not a worker's certificate",
                    describe_peer(Some(certs.as_slice()))
                )));
            }
            (_, Some(id)) => {
                return Err(identity_error(format!(
                    "{} does not name worker `{id}` (--id): a worker's id is the one its certificate names",
                    describe_peer(Some(certs.as_slice()))
                )));
            }
            (_, None) => {
                return Err(identity_error(format!(
                    "{} names several workers: say which with --id",
                    describe_peer(Some(certs.as_slice()))
                )));
            }
        };
        let (_, tls) = Self::load(files, job, Role::Worker { id: worker })?;
        Ok(tls)
    }

    fn load(
        files: &TlsFiles,
        job: String,
        role: Role,
    ) -> Result<(Vec<CertificateDer<'static>>, Self), TlsError> {
        let cert_pem = read(&files.place("cert"), &files.cert)?;
        let key_pem = read(&files.place("key"), &files.key)?;
        let ca_pem = read(&files.place("ca"), &files.ca)?;
        let certs = certs_of(&files.place("cert"), &files.cert, &cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::File {
            place: files.place("key"),
            path: files.key.clone(),
            reason: format!("not a PEM private key: {e}"),
        })?;
        let roots = Arc::new(roots(&files.place("ca"), &files.ca, &ca_pem)?);
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| {
                    TlsError::Config(format!("{} {}: {e}", files.place("ca"), files.ca.display()))
                })?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key)
            .map_err(|e| {
                TlsError::Config(format!(
                    "{} {} with {} {}: {e}",
                    files.place("cert"),
                    files.cert.display(),
                    files.place("key"),
                    files.key.display()
                ))
            })?;
        server.alpn_protocols = vec![b"h2".to_vec()];
        Ok((
            certs,
            Self {
                job,
                role,
                server: Arc::new(server),
                ca_pem,
                cert_pem,
                key_pem,
            },
        ))
    }

    /// The job this identity belongs to.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// What this process is in the job.
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// The configuration of this process's gRPC server: TLS 1.3, a client
    /// certificate signed by the CA required, ALPN `h2`.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.server.clone()
    }

    /// What this process's clients present and check when connecting to a
    /// peer that must carry DNS name `peer` (see the module's names).
    pub fn client_config(&self, peer: &str) -> tonic::transport::ClientTlsConfig {
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .identity(tonic::transport::Identity::from_pem(
                &self.cert_pem,
                &self.key_pem,
            ))
            .domain_name(peer)
            .timeout(Limits::HANDSHAKE_TIMEOUT)
    }

    /// The PEM bytes of (CA, certificate, key), for etcd's client.
    pub fn pem(&self) -> (&[u8], &[u8], &[u8]) {
        (&self.ca_pem, &self.cert_pem, &self.key_pem)
    }
}

/// The figures every coordinator and worker gRPC server applies, and the
/// clients' matching ones. A stranger's flood meets these first.
#[derive(Debug, Clone, Copy)]
pub struct Limits;

impl Limits {
    /// Open connections from one peer address; past it a new connection
    /// is closed at once (a worker needs 2–3 to a peer).
    pub const CONNECTIONS_PER_PEER: usize = 64;
    /// Open connections in all.
    pub const CONNECTIONS: usize = 1024;
    /// A TLS handshake not done by then is dropped.
    pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
    /// HTTP/2 streams (calls) at once on one connection.
    pub const STREAMS_PER_CONNECTION: u32 = 128;
    /// Largest HTTP/2 frame accepted, bytes (a bigger one ends the
    /// connection with FRAME_SIZE_ERROR).
    pub const FRAME_BYTES: u32 = 64 * 1024;
    /// Largest header block, bytes.
    pub const HEADER_LIST_BYTES: u32 = 16 * 1024;
    /// Keep-alive ping interval of an idle connection, and how long the
    /// answer may take before the connection is closed.
    pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
    /// See [`Limits::KEEPALIVE_INTERVAL`].
    pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
    /// Longest a call may take on a server until its answer starts (a
    /// stream's later chunks are not bounded by it), and on a client: above
    /// the longest split wait of a source (`limits.split-wait-ms`, 180 s by
    /// default).
    pub const CALL_TIMEOUT: Duration = Duration::from_secs(15 * 60);
    /// Resets of streams a peer may leave pending (the "rapid reset" flood).
    pub const PENDING_RESETS: usize = 32;
}

/// A tonic server with [`Limits`] set.
pub fn server_builder() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .timeout(Limits::CALL_TIMEOUT)
        .concurrency_limit_per_connection(Limits::STREAMS_PER_CONNECTION as usize)
        .max_concurrent_streams(Limits::STREAMS_PER_CONNECTION)
        .max_frame_size(Limits::FRAME_BYTES)
        .http2_max_header_list_size(Limits::HEADER_LIST_BYTES)
        .http2_keepalive_interval(Some(Limits::KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(Limits::KEEPALIVE_TIMEOUT))
        .http2_max_pending_accept_reset_streams(Some(Limits::PENDING_RESETS))
}

/// An endpoint for `address` (`HOST:PORT`) with the client side of
/// [`Limits`]; with `tls`, over TLS to a peer that must carry name `peer`.
///
/// # Errors
///
/// The address is not a valid URI authority, or the TLS configuration is
/// refused; the message names the address.
pub fn endpoint(
    address: &str,
    tls: Option<(&ClusterTls, &str)>,
    connect_timeout: Duration,
) -> Result<tonic::transport::Endpoint, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut e = tonic::transport::Endpoint::from_shared(format!("{scheme}://{address}"))
        .map_err(|e| format!("address `{address}`: {e}"))?
        .connect_timeout(connect_timeout)
        .timeout(Limits::CALL_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Limits::KEEPALIVE_INTERVAL)
        .keep_alive_timeout(Limits::KEEPALIVE_TIMEOUT);
    if let Some((tls, peer)) = tls {
        e = e
            .tls_config(tls.client_config(peer))
            .map_err(|e| format!("address `{address}`: TLS: {e}"))?;
    }
    Ok(e)
}

/// Open connections per peer address and in all.
#[derive(Default)]
struct Open {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
    /// Peers told about (logged) since they last went down to half the
    /// limit.
    warned: std::collections::HashSet<IpAddr>,
}

/// One counted connection; uncounted when dropped.
struct Slot {
    open: Arc<Mutex<Open>>,
    peer: IpAddr,
}

impl Slot {
    fn take(open: &Arc<Mutex<Open>>, peer: IpAddr, what: &str) -> Option<Self> {
        let mut o = open.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = o.per_peer.get(&peer).copied().unwrap_or(0);
        if mine >= Limits::CONNECTIONS_PER_PEER || o.total >= Limits::CONNECTIONS {
            if o.warned.insert(peer) {
                tracing::warn!(
                    target: crate::TLS_LOG_TARGET, "{what}: closing new connections from {peer}: it has {mine} open (at most {} per peer, {} in all, {} open)",
                    Limits::CONNECTIONS_PER_PEER,
                    Limits::CONNECTIONS,
                    o.total
                );
            }
            return None;
        }
        o.total += 1;
        *o.per_peer.entry(peer).or_default() += 1;
        Some(Self {
            open: open.clone(),
            peer,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut o = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        o.total = o.total.saturating_sub(1);
        if let Some(n) = o.per_peer.get_mut(&self.peer) {
            *n = n.saturating_sub(1);
            let left = *n;
            if left == 0 {
                o.per_peer.remove(&self.peer);
            }
            // Told again only once it came well under the limit.
            if left <= Limits::CONNECTIONS_PER_PEER / 2 {
                o.warned.remove(&self.peer);
            }
        }
    }
}

/// An accepted TCP connection that holds its [`Slot`].
pub struct Counted {
    stream: TcpStream,
    _slot: Slot,
}

impl Connected for Counted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Accepts connections on `listener` within [`Limits`] (Nagle's algorithm
/// off: a gRPC answer is small and must leave at once), hands each to
/// `accepted`; returns when `accepted` says the server is gone.
async fn accept_loop<F, Fut>(listener: tokio::net::TcpListener, what: &'static str, mut accepted: F)
where
    F: FnMut(Counted, SocketAddr) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let open = Arc::new(Mutex::new(Open::default()));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it
                // was accepted: wait a little rather than spin.
                tracing::warn!(target: crate::TLS_LOG_TARGET, "{what}: accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = Slot::take(&open, peer.ip(), what) else {
            drop(stream);
            continue;
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(target: crate::TLS_LOG_TARGET, "{what}: TCP_NODELAY for {peer}: {e}");
        }
        if !accepted(
            Counted {
                stream,
                _slot: slot,
            },
            peer,
        )
        .await
        {
            return;
        }
    }
}

/// Serves `router` on `listener` until the process ends: over TLS with
/// `tls` (a handshake that fails or takes longer than
/// [`Limits::HANDSHAKE_TIMEOUT`] is dropped and logged once, naming the
/// peer), plain otherwise; [`Limits`] either way. `what` names the service
/// in log lines.
///
/// # Errors
///
/// The server failed (tonic's error).
pub async fn serve(
    router: tonic::transport::server::Router,
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    what: &'static str,
) -> Result<(), tonic::transport::Error> {
    use tokio_stream::wrappers::ReceiverStream;
    match tls {
        None => {
            let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Counted>>(16);
            tokio::spawn(accept_loop(listener, what, move |c, _| {
                let tx = tx.clone();
                async move { tx.send(Ok(c)).await.is_ok() }
            }));
            router.serve_with_incoming(ReceiverStream::new(rx)).await
        }
        Some(config) => {
            type Tls = tokio_rustls::server::TlsStream<Counted>;
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let refusals = Arc::new(Mutex::new(Refusals::default()));
            let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Tls>>(16);
            tokio::spawn(accept_loop(listener, what, move |c, peer| {
                let tx = tx.clone();
                let acceptor = acceptor.clone();
                let refusals = refusals.clone();
                async move {
                    if tx.is_closed() {
                        return false;
                    }
                    // Handshakes run side by side: a slow or silent peer
                    // holds only its own connection.
                    tokio::spawn(async move {
                        match tokio::time::timeout(Limits::HANDSHAKE_TIMEOUT, acceptor.accept(c))
                            .await
                        {
                            Ok(Ok(stream)) => {
                                let _gone = tx.send(Ok(stream)).await;
                            }
                            Ok(Err(e)) => refusals
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .note(what, peer, &e.to_string()),
                            Err(_) => refusals
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .note(
                                    what,
                                    peer,
                                    &format!(
                                        "no TLS handshake within {} ms",
                                        Limits::HANDSHAKE_TIMEOUT.as_millis()
                                    ),
                                ),
                        }
                    });
                    true
                }
            }));
            router.serve_with_incoming(ReceiverStream::new(rx)).await
        }
    }
}

/// Refused handshakes, logged once per peer address and reason per
/// [`Refusals::WINDOW`]: a stranger's flood does not become a flood of
/// log lines. The next line after a window says how many were not logged.
#[derive(Default)]
struct Refusals {
    /// (peer address, reason) -> (when last logged, refused since).
    seen: HashMap<(IpAddr, String), (std::time::Instant, u64)>,
}

impl Refusals {
    const WINDOW: Duration = Duration::from_secs(60);
    /// Entries kept at most; the oldest half is forgotten past it.
    const KEPT: usize = 4096;

    fn note(&mut self, what: &str, peer: SocketAddr, reason: &str) {
        let now = std::time::Instant::now();
        let key = (peer.ip(), reason.to_owned());
        match self.seen.get_mut(&key) {
            Some((last, since)) if now.duration_since(*last) < Self::WINDOW => *since += 1,
            Some((last, since)) => {
                tracing::warn!(
                    target: crate::TLS_LOG_TARGET, "{what}: refused {peer} at the TLS handshake: {reason} (and {since} more from {} in the last {} s)",
                    peer.ip(),
                    now.duration_since(*last).as_secs()
                );
                *last = now;
                *since = 0;
            }
            None => {
                tracing::warn!(target: crate::TLS_LOG_TARGET, "{what}: refused {peer} at the TLS handshake: {reason}");
                if self.seen.len() >= Self::KEPT {
                    let mut ages: Vec<std::time::Instant> =
                        self.seen.values().map(|v| v.0).collect();
                    ages.sort();
                    let cut = ages[ages.len() / 2];
                    self.seen.retain(|_, v| v.0 > cut);
                }
                self.seen.insert(key, (now, 0));
            }
        }
    }
}

/// The keyed hashes of partition read grants: the coordinator signs, for
/// each input partition of a consumer attempt it deploys, which worker may
/// read which subpartitions of which location for which attempt; the
/// worker holding the partition checks the grant before serving a byte.
/// The key is fresh per coordinator process and reaches its workers only
/// in their registration's answer.
#[derive(Clone)]
pub struct ReadGrants {
    raw: Vec<u8>,
    key: ring::hmac::Key,
}

impl std::fmt::Debug for ReadGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadGrants(..)")
    }
}

/// What a grant covers: the reading worker, the consumer attempt (job
/// vertex, subtask, attempt number), the partition's location and the
/// subpartition range `[first, end)`.
#[derive(Debug, Clone, Copy)]
pub struct Grant<'a> {
    /// The id of the worker the consumer attempt runs on.
    pub reader: &'a str,
    /// The consumer attempt (vertex, subtask, attempt).
    pub attempt: (u32, u32, u32),
    /// The partition's location (relative to the holder's partition root).
    pub location: &'a str,
    /// First subpartition.
    pub first: u32,
    /// End of the range (exclusive).
    pub end: u32,
}

impl Grant<'_> {
    /// Every field, each string length-prefixed: no two grants encode
    /// alike.
    fn message(&self) -> Vec<u8> {
        let mut m = Vec::with_capacity(64 + self.reader.len() + self.location.len());
        for s in [self.reader, self.location] {
            m.extend_from_slice(&(s.len() as u64).to_le_bytes());
            m.extend_from_slice(s.as_bytes());
        }
        for n in [
            self.attempt.0,
            self.attempt.1,
            self.attempt.2,
            self.first,
            self.end,
        ] {
            m.extend_from_slice(&n.to_le_bytes());
        }
        m
    }
}

impl ReadGrants {
    /// A fresh random key (32 bytes from the system's generator).
    ///
    /// # Errors
    ///
    /// The system's random generator failed.
    pub fn random() -> Result<Self, String> {
        use ring::rand::SecureRandom as _;
        let mut raw = vec![0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut raw)
            .map_err(|_| "the system's random generator failed".to_owned())?;
        Ok(Self::from_bytes(&raw))
    }

    /// The key a coordinator sent (any length; 32 bytes in practice).
    pub fn from_bytes(raw: &[u8]) -> Self {
        Self {
            raw: raw.to_vec(),
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, raw),
        }
    }

    /// The key's bytes, for a worker's registration answer.
    pub fn bytes(&self) -> &[u8] {
        &self.raw
    }

    /// The grant's tag (HMAC-SHA256, 32 bytes).
    pub fn sign(&self, grant: &Grant<'_>) -> Vec<u8> {
        ring::hmac::sign(&self.key, &grant.message())
            .as_ref()
            .to_vec()
    }

    /// Whether `tag` is this key's tag of `grant` (compared in constant
    /// time).
    pub fn verify(&self, grant: &Grant<'_>, tag: &[u8]) -> bool {
        ring::hmac::verify(&self.key, &grant.message(), tag).is_ok()
    }
}

/// What `coordhost cluster certs` writes.
#[derive(Debug, Clone)]
pub struct CertsRequest {
    /// The folder (created); an existing `ca.pem` + `ca.key` in it is used
    /// as the CA, else a new CA is made there.
    pub dir: PathBuf,
    /// The job the certificates are for.
    pub job: String,
    /// Worker ids: one certificate each (`ID.pem`, `ID.key`).
    pub workers: Vec<String>,
    /// Extra DNS names or IP addresses of an etcd server to certify
    /// (`etcd.pem`, `etcd.key`); none: no etcd certificate.
    pub etcd_hosts: Vec<String>,
}

/// The distinguished name of the CA `cluster certs` makes.
const CA_NAME: &str = "coordhost cluster CA";

fn ca_params() -> rcgen::CertificateParams {
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, CA_NAME);
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    p
}

/// Writes `contents` to `path`, readable by its owner only when `secret`.
fn write_file(path: &Path, contents: &str, secret: bool) -> Result<(), TlsError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let fail = |e: io::Error| TlsError::Certs(format!("{}: {e}", path.display()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(fail)?;
    f.write_all(contents.as_bytes()).map_err(fail)?;
    f.sync_all().map_err(fail)
}

/// Makes the certificates of a test cluster (see [`CertsRequest`]):
/// `ca.pem`/`ca.key` (unless they exist), `coordinator.pem`/`.key`
/// (`coordinator.JOB`), per worker `ID.pem`/`.key` (`ID.worker.JOB`,
/// `worker.JOB`), and `etcd.pem`/`.key` when etcd hosts are named. Keys are
/// written readable by their owner only. Returns the files written.
///
/// # Errors
///
/// A name that is not a DNS label, an existing CA that does not load, or
/// a file that cannot be written.
pub fn make_certs(req: &CertsRequest) -> Result<Vec<PathBuf>, TlsError> {
    let bad = |what: &str, name: &str| {
        TlsError::Certs(format!(
            "{what} `{name}`: not usable in a certificate name (letters, digits, `-` and `_`, no dots)"
        ))
    };
    let label_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !label_ok(&req.job) {
        return Err(bad("job", &req.job));
    }
    for w in &req.workers {
        if !label_ok(w) {
            return Err(bad("worker", w));
        }
    }
    std::fs::create_dir_all(&req.dir)
        .map_err(|e| TlsError::Certs(format!("{}: {e}", req.dir.display())))?;
    let ca_cert = req.dir.join("ca.pem");
    let ca_key = req.dir.join("ca.key");
    let mut written = Vec::new();
    let rc = |e: rcgen::Error| TlsError::Certs(e.to_string());
    let key = if ca_cert.exists() && ca_key.exists() {
        let pem = std::fs::read_to_string(&ca_key)
            .map_err(|e| TlsError::Certs(format!("{}: {e}", ca_key.display())))?;
        rcgen::KeyPair::from_pem(&pem)
            .map_err(|e| TlsError::Certs(format!("{}: {e}", ca_key.display())))?
    } else {
        let key = rcgen::KeyPair::generate().map_err(rc)?;
        let cert = ca_params().self_signed(&key).map_err(rc)?;
        write_file(&ca_cert, &cert.pem(), false)?;
        write_file(&ca_key, &key.serialize_pem(), true)?;
        written.push(ca_cert.clone());
        written.push(ca_key.clone());
        key
    };
    let issuer = rcgen::Issuer::new(ca_params(), key);
    let mut issue = |file: &str, common: &str, names: Vec<String>| -> Result<(), TlsError> {
        let mut sans = Vec::new();
        for n in names {
            sans.push(match n.parse::<IpAddr>() {
                Ok(ip) => rcgen::SanType::IpAddress(ip),
                Err(_) => rcgen::SanType::DnsName(n.clone().try_into().map_err(rc)?),
            });
        }
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, common);
        p.subject_alt_names = sans;
        p.use_authority_key_identifier_extension = true;
        p.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = rcgen::KeyPair::generate().map_err(rc)?;
        let cert = p.signed_by(&key, &issuer).map_err(rc)?;
        let cert_path = req.dir.join(format!("{file}.pem"));
        let key_path = req.dir.join(format!("{file}.key"));
        write_file(&cert_path, &cert.pem(), false)?;
        write_file(&key_path, &key.serialize_pem(), true)?;
        written.push(cert_path);
        written.push(key_path);
        Ok(())
    };
    let job = &req.job;
    issue(
        "coordinator",
        &coordinator_name(job),
        vec![coordinator_name(job)],
    )?;
    for w in &req.workers {
        issue(
            w,
            &worker_name(w, job),
            vec![worker_name(w, job), any_worker_name(job)],
        )?;
    }
    if !req.etcd_hosts.is_empty() {
        issue("etcd", "etcd", req.etcd_hosts.clone())?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_verifies_only_with_its_own_fields_and_key() {
        let g = ReadGrants::random().expect("key");
        let grant = Grant {
            reader: "w1",
            attempt: (2, 3, 0),
            location: "tpch/scan-0",
            first: 0,
            end: 4,
        };
        let tag = g.sign(&grant);
        assert!(g.verify(&grant, &tag));
        assert!(!g.verify(
            &Grant {
                reader: "w2",
                ..grant
            },
            &tag
        ));
        assert!(!g.verify(&Grant { end: 5, ..grant }, &tag));
        assert!(!g.verify(
            &Grant {
                attempt: (2, 3, 1),
                ..grant
            },
            &tag
        ));
        assert!(!g.verify(
            &Grant {
                location: "tpch/scan-1",
                ..grant
            },
            &tag
        ));
        let other = ReadGrants::random().expect("key");
        assert!(!other.verify(&grant, &tag));
        assert!(ReadGrants::from_bytes(g.bytes()).verify(&grant, &tag));
    }

    #[test]
    fn certificates_carry_the_names_of_their_role() {
        let dir = tempfile::tempdir().expect("tempdir");
        let req = CertsRequest {
            dir: dir.path().to_path_buf(),
            job: "tpch-q1".into(),
            workers: vec!["w0".into(), "w1".into()],
            etcd_hosts: Vec::new(),
        };
        make_certs(&req).expect("certs");
        let files = |name: &str| TlsFiles {
            cert: dir.path().join(format!("{name}.pem")),
            key: dir.path().join(format!("{name}.key")),
            ca: dir.path().join("ca.pem"),
            from: None,
        };
        let c = ClusterTls::coordinator(&files("coordinator"), "tpch-q1").expect("coordinator");
        assert_eq!(c.role(), &Role::Coordinator);
        let e = ClusterTls::coordinator(&files("coordinator"), "other").expect_err("other job");
        assert!(e.to_string().contains("coordinator.other"), "{e}");
        let w = ClusterTls::worker(&files("w1"), None).expect("worker");
        assert_eq!(w.role(), &Role::Worker { id: "w1".into() });
        assert_eq!(w.job(), "tpch-q1");
        let e = ClusterTls::worker(&files("w1"), Some("w0")).expect_err("another id");
        assert!(e.to_string().contains("does not name worker `w0`"), "{e}");
        let e = ClusterTls::worker(&files("coordinator"), None).expect_err("not a worker");
        assert!(e.to_string().contains("not a worker's certificate"), "{e}");
        // A second run with the same folder keeps the CA: both jobs' certificates verify against it.
        let ca = std::fs::read(dir.path().join("ca.pem")).expect("ca");
        make_certs(&CertsRequest {
            job: "other".into(),
            workers: vec!["w0".into()],
            ..req
        })
        .expect("certs of another job");
        assert_eq!(std::fs::read(dir.path().join("ca.pem")).expect("ca"), ca);
        let pem = std::fs::read(dir.path().join("w0.pem")).expect("w0");
        let certs = certs_of("--tls-cert", Path::new("w0.pem"), &pem).expect("parse");
        assert!(peer_is(Some(certs.as_slice()), "w0.worker.other"));
        assert!(peer_is(Some(certs.as_slice()), "worker.other"));
        assert!(!peer_is(Some(certs.as_slice()), "w0.worker.tpch-q1"));
        assert!(!peer_is(None, "w0.worker.other"));
        assert!(
            make_certs(&CertsRequest {
                dir: dir.path().to_path_buf(),
                job: "a.b".into(),
                workers: Vec::new(),
                etcd_hosts: Vec::new(),
            })
            .is_err()
        );
    }
}
