//! The `coordhost` binary; all logic lives in the library's [`coordhost::cli`].

fn main() -> std::process::ExitCode {
    coordhost::cli::main()
}
