//! The processes the end-to-end tests start: the `coordhost` binary as a
//! user runs it.

use std::path::Path;
use std::process::{Command, Stdio};

use super::cache_dir;

/// The `coordhost` binary these tests run, the one place that names it.
///
/// It is the real binary: this package's `coordhost-under-test` target is
/// built from the very source file of host/'s `coordhost` target
/// (`host/src/main.rs`, which calls `coordhost::cli::main()`) against the
/// same library, into the same folder (`target/<profile>/`, so
/// `plugins/` beside the executable is the same place). Only its name
/// differs — two binaries named `coordhost` in one workspace would overwrite
/// each other — because Cargo gives a test the path of a binary of its own
/// package only (`CARGO_BIN_EXE_<name>`). Its library has the test knobs
/// (`coordhost/failpoints`, turned on by this package's manifest).
pub fn coordhost_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_coordhost-under-test"))
}

/// The test environment of a `coordhost` process: the shared
/// compiled-component cache (`COORDHOST_CACHE_DIR`), no `COORDHOST_LOG`
/// from the test's environment, no standard input.
pub fn with_test_env(command: &mut Command) -> &mut Command {
    command
        .env("COORDHOST_CACHE_DIR", cache_dir())
        .env_remove("COORDHOST_LOG")
        .stdin(Stdio::null())
}

/// The `coordhost` binary ([`coordhost_bin`]) as a user runs it, in the
/// test environment ([`with_test_env`]).
pub fn coordhost() -> Command {
    let mut c = Command::new(coordhost_bin());
    with_test_env(&mut c);
    c
}
