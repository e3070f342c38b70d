//! The `coordhost` command line: `run`, `plugin check`, `log inspect`.
//!
//! Exit codes: 0 success; 1 the job failed or a check found a problem;
//! 2 bad input (command line, job file, component, log).
