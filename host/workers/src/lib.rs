//! Worker processes (issue 14): `coordhost worker` (Flink's TaskManager)
//! and the coordinator's side of them (`coordhost run --listen ADDR
//! --external-workers N`), talking gRPC over the contract in
//! `proto/coordhost/worker/v1/worker.proto` ([`crate::rpc`]).
//!
//! - [`worker`]: the worker process. It registers with the coordinator,
//!   heartbeats, runs the attempts it is given with [`coordhost_data::runtime`]
//!   (the same operator chains as embedded workers), keeps the result
//!   partitions they write under its own data directory, serves their
//!   subpartitions to consumers on other workers, and stages sink output
//!   that only the coordinator publishes.
//! - [`cluster`]: the coordinator's registry of workers: registration,
//!   heartbeats (a worker silent past the heartbeat timeout is lost and its
//!   running attempts fail), split requests, attempt reports (refused when
//!   the attempt is not current or the worker was given up), deployment
//!   and release of partitions.
//! - [`task`]: what one attempt needs, as it crosses the wire.
//! - `components`: the plugin components a worker's tasks need, whatever
//!   their kind (issue 27, item 3): each fetched from the coordinator once
//!   by its SHA-256, checked, compiled once into the worker's
//!   compiled-component cache. `functions` (scalar functions, loaded at
//!   their first call) and `readers` (the source readers of the tables a
//!   scan reads, loaded before the task runs) use it, and keep what they
//!   loaded, with its idle instances, across the worker's tasks.
//!
//! - [`rpc`]: the coordinator–worker contract, the gRPC code generated
//!   from `proto/coordhost/worker/v1/worker.proto` (build.rs, protox) and
//!   its protocol revision.
//! - [`tls`]: who may talk to a cluster — mutual TLS for both servers and
//!   clients, the names a certificate carries per role, the keyed read
//!   grants of `ReadSubpartitions`, connection limits, `cluster certs`.
//!
//! docs/workers.md tells the story, with the failure cases. The binary
//! re-exports this crate as `coordhost::remote` and its `rpc` and `tls`
//! as `coordhost::rpc` and `coordhost::tls`.

// Human lines go to stderr whole (`coordhost_io::stderr_line!`), never
// piece by piece as `eprintln!` writes them.
#![deny(clippy::print_stderr)]

/// The `tracing` target of everything the worker processes and the
/// coordinator's side of them log, but TLS: the name these modules had in
/// the binary (`coordhost::remote`), kept when they became this crate, so
/// `COORDHOST_LOG=coordhost::remote=info` (docs/workers.md, the tests)
/// shows registrations, deploys, lost workers as before.
pub const LOG_TARGET: &str = "coordhost::remote";

/// The `tracing` target of [`tls`] (refused handshakes, accept errors):
/// `COORDHOST_LOG=coordhost::tls=info`, as when it was the binary's module.
pub const TLS_LOG_TARGET: &str = "coordhost::tls";

pub mod cluster;
mod components;
#[cfg(feature = "failpoints")]
mod failpoints;
mod functions;
mod readers;
pub mod rpc;
pub mod task;
pub mod tls;
pub mod worker;

pub use cluster::{Cluster, ClusterEvent, ClusterOptions, ServedComponent, WorkerHeartbeats};
pub use task::{
    RemoteComponent, RemoteFunction, RemoteInput, RemoteOutput, RemoteReader, RemoteSource,
    RemoteTask, RemoteVertex,
};
pub use worker::{WorkerOptions, run_worker};
