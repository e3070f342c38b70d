//! Worker processes (issue 14): `coordhost worker` (Flink's TaskManager)
//! and the coordinator's side of them (`coordhost run --listen ADDR
//! --external-workers N`), talking gRPC over the contract in
//! `proto/coordhost/worker/v1/worker.proto` ([`crate::rpc`]).
//!
//! - [`worker`]: the worker process. It registers with the coordinator,
//!   heartbeats, runs the attempts it is given with [`crate::runtime`]
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
//! - `functions`: a worker's scalar functions (issue 27, item 3): each
//!   component fetched from the coordinator once by its SHA-256, checked,
//!   compiled once into the worker's compiled-component cache, and its
//!   instances reused across the worker's tasks.
//!
//! docs/workers.md tells the story, with the failure cases.

pub mod cluster;
mod functions;
pub mod task;
pub mod worker;

pub use cluster::{Cluster, ClusterEvent, ClusterOptions, ServedComponent};
pub use task::{RemoteFunction, RemoteInput, RemoteOutput, RemoteTask, RemoteVertex};
pub use worker::{WorkerOptions, run_worker};
