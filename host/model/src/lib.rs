//! coordhost's plain values, shared by every part of the host and free of
//! I/O (docs/architecture.md, "Crates"): the job graph and the execution
//! graph ([`graph`]), splits, exact numbers and the cells of Arrow record
//! batches ([`value`]), and `s3://` object URLs ([`object_url`]).
//!
//! The binary crate re-exports [`graph`] and [`value`] under the same names,
//! so `coordhost::graph` and `coordhost_model::graph` are one module.

pub mod graph;
pub mod object_url;
pub mod value;
