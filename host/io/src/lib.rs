//! The host's I/O primitives that both the plugin host and the data plane
//! stand on: opening what may be a FIFO or a device without blocking
//! ([`files`]: `O_NONBLOCK` and an `fstat` check before any read), file
//! operations on paths a plugin named inside the directories it was
//! granted ([`grant`], `cap-std`), and S3-compatible object storage with
//! its grants ([`objstore`], `object_store`); and human lines on stderr
//! written with one `write` each ([`lines`], [`stderr_line!`]).
//!
//! The binary re-exports these modules under the names they had there
//! (`coordhost::files`, `coordhost::grant`, `coordhost::objstore`).

pub mod files;
pub mod grant;
pub mod lines;
pub mod objstore;
