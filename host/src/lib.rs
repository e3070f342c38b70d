//! coordhost: a batch-job coordinator whose split enumerators and shuffle
//! masters are WebAssembly components, and which recovers a job's progress
//! after a coordinator crash (Apache Flink's FLIP-383, "job recovery for
//! batch jobs").
//!
//! Data flows one way: [`config`] → [`graph`] → [`scheduler`] ↔
//! ([`coordinator`], [`shuffle`], [`runtime`]) → [`events`]; [`recovery`]
//! reads events and rebuilds the scheduler's state before it starts.
//! [`plugin`] hosts the WebAssembly components.

pub mod cli;
pub mod config;
pub mod coordinator;
pub mod events;
#[cfg(feature = "failpoints")]
pub mod failpoints;
pub mod files;
pub mod grant;
pub mod graph;
pub mod job;
pub mod plan;
pub mod plugin;
pub mod recovery;
pub mod runtime;
pub mod scheduler;
pub mod shuffle;
pub mod value;
