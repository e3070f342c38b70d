//! coordhost: a batch-job coordinator whose split enumerators and shuffle
//! masters are WebAssembly components, and which recovers a job's progress
//! after a coordinator crash (Apache Flink's FLIP-383, "job recovery for
//! batch jobs").
//!
//! The modules stand on floors; each imports only lower ones
//! (docs/architecture.md, checked by `scripts/check-layers.sh`):
//!
//! | floor | modules |
//! |---|---|
//! | 7 | [`cli`] |
//! | 6 | [`job`]: drives one job (log, recover or start, run), records, loads plugins, the `run` face, exit codes |
//! | 5 | [`scheduler`] (the JobMaster) and [`recovery`] (the FLIP-383 decision): never each other |
//! | 4 | [`plan`] (the recovery plan), [`snapshot`] (coordinator snapshots in the log's form) |
//! | 3 | [`config`], [`runtime`], [`coordinator`] |
//! | 2 | [`plugin`], [`shuffle`], [`sql`] (DataFusion planning, the stage cut, running a stage's plan), [`ui`] (the job's page, API and metrics) |
//! | 1 | [`events`], [`graph`], [`grant`] |
//! | 0 | [`value`], [`files`], [`objstore`] (object URLs, store grants, the S3 clients) |

// Human lines go to stderr whole (`coordhost_io::stderr_line!`), never
// piece by piece as `eprintln!` writes them.
#![deny(clippy::print_stderr)]

pub mod cli;
pub mod config;
pub mod coordinator;
pub mod events;
#[cfg(feature = "failpoints")]
pub mod failpoints;
pub mod job;
pub mod kit;
pub mod recovery;
pub mod scheduler;
pub mod ui;

// The crates below the binary, under the names the modules had (docs/architecture.md, "Crates").
pub use coordhost_core::{plan, snapshot};
pub use coordhost_data::{runtime, shuffle, sql};
pub use coordhost_ha as ha;
pub use coordhost_io::{files, grant, objstore};
pub use coordhost_model::{graph, value};
pub use coordhost_wasm as plugin;
pub use coordhost_workers as remote;
pub use coordhost_workers::{rpc, tls};
