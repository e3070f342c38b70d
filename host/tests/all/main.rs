//! The host's integration tests, linked into one binary (as wasmtime's
//! `tests/all/main.rs`): one module per area and test file, named
//! `<area>_<what>.rs` (areas: `cli`, `crash` — real `coordhost run`
//! processes killed with SIGKILL —, `events`, `job`, `plugin`, `recovery`,
//! `sandbox`), and one `support` module with every shared helper.
//!
//! Run one area with a name filter, e.g. `cargo test -p coordhost --test all
//! recovery_`.

mod support;

mod cli;
mod crash_between_runs;
mod crash_between_runs_random;
mod crash_damaged_partition;
mod crash_kill_random;
mod crash_previous_worker;
mod crash_sink_commit;
mod crash_transient_shuffle;
mod events_golden;
mod events_inspect;
mod events_proptest;
mod events_replay;
mod job_cli;
mod job_config;
mod job_failover;
mod job_fingerprint;
mod job_plugin_load;
mod job_refusals;
mod job_refusals_fuzz;
mod job_source_coordinator;
mod job_tpch;
mod job_tpch_languages;
mod job_wordcount;
mod plugin_cache;
mod plugin_conformance;
mod plugin_sandbox;
mod recovery_attempts;
mod recovery_crash_points;
mod recovery_damage_proptest;
mod recovery_failover;
mod recovery_large_snapshot;
mod recovery_log;
mod recovery_refusals;
mod recovery_scenarios;
mod recovery_without_shuffle_snapshots;
mod sandbox_audit;
mod sandbox_authority;
