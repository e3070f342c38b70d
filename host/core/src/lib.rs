//! The core of coordhost that decides without doing I/O
//! (docs/architecture.md, "Crates"): FLIP-383 recovery ([`recovery`]: the
//! replayed log in, a [`plan::RecoveryPlan`] out, the plugins and the
//! partition question behind traits), the plan itself, the batch snapshot
//! codec of a source coordinator ([`snapshot`]) and the split-assignment
//! history it encodes ([`history`]); of the JobMaster, the parts that
//! decide without I/O: what a failed attempt leads to ([`failover`]),
//! when batch snapshots are taken ([`snapshot_policy`]), with time from a
//! [`clock::Clock`], and the execution bookkeeping as a state machine that
//! returns effects ([`scheduling`]); and how the log's last run ended
//! ([`run_end`]: a failed job stays failed under a new leader); where
//! attempts run ([`executor::Executor`], one trait for threads, worker
//! processes and the simulator's virtual workers) and which worker the next
//! one goes to ([`placement`]).
//!
//! It depends on the plain values (`coordhost-model`) and the event log's
//! records (`coordhost-log`) only: no plugin host, no network, no async
//! runtime, no file system. The binary re-exports [`recovery`]'s items,
//! [`plan`] and [`snapshot`] under the names its modules had.

use coordhost_log as events;
use coordhost_model::{graph, value};

pub mod clock;
pub mod coordinator;
pub mod executor;
pub mod failover;
pub mod history;
pub mod master;
pub mod placement;
pub mod plan;
pub mod recovery;
pub mod run_end;
pub mod scheduling;
pub mod snapshot;
pub mod snapshot_policy;
#[cfg(test)]
mod test_jobs;
