//! coordhost's end-to-end tests, linked into one binary (as wasmtime's
//! `tests/all/main.rs`): the real `coordhost` binary started as a user
//! starts it ([`support::process`]), beside worker processes, etcd,
//! SeaweedFS and headless Chromium, killed with SIGKILL, paused, cut off
//! in network namespaces, and started again. One module per area and test
//! file, named `<area>_<what>.rs` (areas: `cli`, `crash` — real `coordhost
//! run` processes killed with SIGKILL —, `events`, `ha`, `job`, `plugin`,
//! `recovery`, `sandbox`, `shuffle`, `sink`, `sql`, `tpch`, `ui`,
//! `workers`), and one `support` module with every shared helper.
//!
//! Run one area with a name filter, e.g. `cargo test -p coordhost-e2e --test
//! all recovery_`. The binary and the library these tests link are built
//! with the test knobs (a simulated crash, a failing attempt, a lost
//! partition: fail points of host/src/failpoints.rs): this package's
//! dependency on `coordhost` turns its `failpoints` feature on.
//!
//! The library's tests that start no process are `host/tests/all`.

mod support;

mod cli;
mod crash_between_runs;
mod crash_between_runs_random;
mod crash_damaged_partition;
mod crash_kill_random;
mod crash_previous_worker;
mod crash_sink_commit;
mod crash_transient_shuffle;
mod events_inspect_cli;
mod events_object_log;
mod events_object_log_ops;
mod ha;
mod ha_matrix;
mod ha_netns;
mod ha_netns_tls;
mod ha_objects;
mod ha_tls;
mod job_builtin;
mod job_cli;
mod job_data_errors;
mod job_driver;
mod job_failover;
mod job_parquet;
mod job_paths;
mod job_refusals;
mod job_refusals_fuzz;
mod job_sql;
mod job_stop;
mod job_tpch_languages;
mod job_ui;
mod plugin_c_arrow;
mod plugin_kit;
mod plugin_kit_c;
mod plugin_kit_functions;
mod plugin_kit_readers;
mod plugin_stores;
mod recovery_attempts;
mod recovery_crash_points;
mod recovery_damage_proptest;
mod recovery_failover;
mod recovery_large_snapshot;
mod recovery_log;
mod recovery_refusals;
mod recovery_restore_failed;
mod recovery_scenarios;
mod recovery_without_shuffle_snapshots;
mod sandbox_audit;
mod sandbox_authority;
mod sandbox_special_files;
mod shuffle_binding;
mod shuffle_objects;
mod sink_objects;
mod sql_functions;
mod sql_functions_c;
mod sql_functions_languages;
mod sql_functions_workers;
mod sql_partitions;
mod sql_readers;
mod sql_readers_python;
mod sql_readers_workers;
mod sql_tpch;
mod tpch_objects;
mod ui_browser;
mod workers;
mod workers_contract;
mod workers_goodbye;
mod workers_netns;
mod workers_placement;
mod workers_shuffle_context;
mod workers_tls;
mod workers_tls_config;
