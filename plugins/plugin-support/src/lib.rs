//! Helpers shared by coordhost's sample Rust plugins, free of any generated
//! bindings so that every plugin crate can use them with its own `wit-bindgen`
//! types: reading the plugin's config map ([`config`]), the queue of
//! unassigned splits that Flink's enumerators keep ([`splits`]), and the
//! on-disk layout of result partitions that the shuffle masters hand out
//! ([`partition_files`]) with their in-memory registry ([`registry`]), both
//! put together in [`shuffle`]. With the `arrow` feature, [`arrow_batches`]
//! reads and writes the Arrow IPC streams of scalar functions.
//!
//! Errors are plain strings: each plugin wraps them in the WIT `error` case
//! that fits (`invalid-config`, `io`, ...), so the message is all they carry.

#[cfg(feature = "arrow")]
pub mod arrow_batches;
pub mod config;
pub mod partition_files;
pub mod registry;
pub mod shuffle;
pub mod splits;
