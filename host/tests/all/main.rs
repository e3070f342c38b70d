//! The library's integration tests, linked into one binary (as wasmtime's
//! `tests/all/main.rs`): the tests of `coordhost`'s public API that run in
//! this process and start no other — the event log's golden bytes, replay
//! and `inspect`, job files and fingerprints, a job run in process
//! (`coordhost::job::run_job`), the plugin host and its sandbox, the shuffle
//! format's golden partitions — one module per area and test file, named
//! `<area>_<what>.rs`, and one `support` module with their shared helpers.
//!
//! The tests that start processes (the `coordhost` binary, worker processes,
//! etcd, SeaweedFS, Chromium) are the end-to-end tests of
//! `tests/e2e/tests/all` (package `coordhost-e2e`).
//!
//! Run one area with a name filter, e.g. `cargo test -p coordhost --test all
//! events_`.

mod support;

mod events_golden;
mod events_inspect;
mod events_proptest;
mod events_replay;
mod job_config;
mod job_fingerprint;
mod job_plugin_load;
mod job_source_coordinator;
mod job_tpch;
mod job_wordcount;
mod plugin_cache;
mod plugin_conformance;
mod plugin_sandbox;
mod shuffle_golden;
