//! The host's integration tests, linked into one binary (as wasmtime's
//! `tests/all/main.rs`): one module per area and test file, named
//! `<area>_<what>.rs` (areas: `cli`, `crash` — real `coordhost run`
//! processes killed with SIGKILL —, `events`, `job`, `plugin`, `recovery`,
//! `sandbox`, `shuffle`, `sink`, `ui`), and one `support` module with every shared helper.
//!
//! Run one area with a name filter, e.g. `cargo test -p coordhost --test all
//! --features failpoints recovery_`. The modules that use test knobs (a
//! simulated crash, a failing attempt, a lost partition: fail points of
//! host/src/failpoints.rs) need the `failpoints` feature, which `make test`
//! turns on; without it they are not built and one test fails to say so.

#[cfg(feature = "failpoints")]
mod sql_functions;
#[cfg(feature = "failpoints")]
mod sql_functions_c;
mod sql_functions_languages;
#[cfg(feature = "failpoints")]
mod sql_functions_workers;
mod sql_partitions;
#[cfg(feature = "failpoints")]
mod sql_readers;
mod sql_readers_python;
#[cfg(feature = "failpoints")]
mod sql_readers_workers;
mod sql_tpch;
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
mod events_inspect_cli;
mod events_object_log;
mod events_object_log_ops;
mod events_proptest;
mod events_replay;
mod ha;
mod ha_matrix;
mod ha_netns;
mod ha_netns_tls;
mod ha_objects;
mod ha_tls;
mod job_builtin;
mod job_cli;
mod job_config;
#[cfg(feature = "failpoints")]
mod job_data_errors;
mod job_driver;
#[cfg(feature = "failpoints")]
mod job_failover;
mod job_fingerprint;
mod job_parquet;
mod job_paths;
mod job_plugin_load;
mod job_refusals;
mod job_refusals_fuzz;
mod job_source_coordinator;
#[cfg(feature = "failpoints")]
mod job_sql;
mod job_stop;
mod job_tpch;
#[cfg(feature = "failpoints")]
mod job_tpch_languages;
mod job_ui;
mod job_wordcount;
mod plugin_c_arrow;
mod plugin_cache;
mod plugin_conformance;
mod plugin_kit;
mod plugin_kit_c;
mod plugin_kit_functions;
mod plugin_kit_readers;
mod plugin_sandbox;
mod plugin_stores;
#[cfg(feature = "failpoints")]
mod recovery_attempts;
#[cfg(feature = "failpoints")]
mod recovery_crash_points;
#[cfg(feature = "failpoints")]
mod recovery_damage_proptest;
#[cfg(feature = "failpoints")]
mod recovery_failover;
#[cfg(feature = "failpoints")]
mod recovery_large_snapshot;
#[cfg(feature = "failpoints")]
mod recovery_log;
mod recovery_refusals;
#[cfg(feature = "failpoints")]
mod recovery_restore_failed;
#[cfg(feature = "failpoints")]
mod recovery_scenarios;
#[cfg(feature = "failpoints")]
mod recovery_without_shuffle_snapshots;
mod sandbox_audit;
mod sandbox_authority;
mod sandbox_special_files;
#[cfg(feature = "failpoints")]
mod shuffle_binding;
mod shuffle_golden;
mod shuffle_objects;
mod sink_objects;
mod tpch_objects;
mod ui_browser;
mod workers;
mod workers_contract;
mod workers_goodbye;
mod workers_netns;
#[cfg(feature = "failpoints")]
mod workers_placement;
mod workers_shuffle_context;
mod workers_tls;
mod workers_tls_config;

/// Without the `failpoints` feature the tests that use test knobs are not
/// built: this fails, so that such a run never looks complete.
#[cfg(not(feature = "failpoints"))]
#[test]
fn the_tests_with_test_knobs_need_the_failpoints_feature() {
    panic!(
        "the crash, failover and recovery tests need `--features failpoints` \
         (`make test` turns it on); they were not built"
    );
}
