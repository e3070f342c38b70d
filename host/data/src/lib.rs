//! The data plane of coordhost: what one task does with its records.
//!
//! - [`runtime`]: one execution attempt — source readers (`read-lines`,
//!   CSV through arrow-csv, Parquet), feeding the task's DataFusion plan (a
//!   SQL stage's, or a job-file vertex's operator chain lowered by
//!   [`sql::chain`]), result partitions and sinks (staging, publish), the
//!   worker pool.
//! - [`shuffle`]: result partitions on disk and on object storage
//!   (docs/shuffle-format.md): one `data` + one `index` file per partition,
//!   the spilling writer, the subpartition reader, hash routing.
//! - [`sql`]: SQL jobs (docs/sql.md): DataFusion plans the query, the stage
//!   cut turns the physical plan into stages and exchanges, the leaf nodes
//!   and their `datafusion-proto` codec, the job's scalar functions as
//!   `ScalarUDF`s.
//!
//! It stands on the plugin host (`coordhost-wasm`: source readers and
//! scalar functions are components), the I/O primitives (`coordhost-io`)
//! and the model; nothing here decides what runs where (the coordinator's
//! part) or talks to another process (`coordhost::remote`). The binary
//! re-exports the three modules as `coordhost::runtime`,
//! `coordhost::shuffle` and `coordhost::sql`.

pub mod runtime;
pub mod shuffle;
pub mod sql;
