//! Errors of the plugin host: loading, checking and calling components.

use std::path::PathBuf;

use super::PluginKind;
use super::bindings::enumerator::coordhost::plugin::types::Error as PluginFailure;

/// Everything that can go wrong when loading or calling a plugin. Each
/// variant names the file or the plugin (its name in the job file) and, for
/// calls, the WIT function.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginError {
    /// The wasmtime engine could not be configured (a bug or an unsupported
    /// machine).
    #[error("cannot start the WebAssembly engine: {reason}")]
    Engine {
        /// What wasmtime said.
        reason: String,
    },
    /// The component file could not be read.
    #[error("{}: cannot read the component: {source}", path.display())]
    Read {
        /// The component file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The component file is empty.
    #[error("{}: the file is empty, not a WebAssembly component", path.display())]
    Empty {
        /// The component file.
        path: PathBuf,
    },
    /// The file is not a WebAssembly component (a core module, or not Wasm).
    #[error("{}: not a WebAssembly component: {reason}", path.display())]
    NotAComponent {
        /// The component file.
        path: PathBuf,
        /// Why, in words.
        reason: String,
    },
    /// wasmtime refused to compile the component.
    #[error("{}: the component does not compile: {reason}", path.display())]
    Compile {
        /// The component file.
        path: PathBuf,
        /// What wasmtime said.
        reason: String,
    },
    /// The compiled-component cache could not be read or written.
    #[error("{}: compiled-component cache: {source}", path.display())]
    Cache {
        /// The cache file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The component exports neither plugin interface, or lacks a function
    /// of the one it claims.
    #[error("{}: not a coordhost plugin: {missing}", path.display())]
    WrongWorld {
        /// The component file.
        path: PathBuf,
        /// What is missing, in words (names the export or function).
        missing: String,
    },
    /// The component implements the plugin interface at another version of
    /// the WIT package.
    #[error("{}: exports `{interface}` at version {found}, but this host loads version {expected}", path.display())]
    IncompatibleVersion {
        /// The component file.
        path: PathBuf,
        /// The interface name without version, e.g. `coordhost:plugin/split-enumerator`.
        interface: String,
        /// The version the component was built against.
        found: String,
        /// The versions this host loads, e.g. `0.1.0 or 0.1.1`.
        expected: String,
    },
    /// The job file says one kind, the component implements the other.
    #[error("plugin `{plugin}` ({}): configured as a {configured} but the component is a {found}", path.display())]
    KindMismatch {
        /// The plugin's name in the job file.
        plugin: String,
        /// The component file.
        path: PathBuf,
        /// The kind the job file asks for.
        configured: PluginKind,
        /// The kind the component implements.
        found: PluginKind,
    },
    /// The component imports something the host does not offer.
    #[error("plugin `{plugin}` ({}): cannot link: {reason}", path.display())]
    Link {
        /// The plugin's name in the job file.
        plugin: String,
        /// The component file.
        path: PathBuf,
        /// What wasmtime said, naming the import.
        reason: String,
    },
    /// A directory granted in the configuration cannot be opened.
    #[error("plugin `{plugin}`: cannot grant directory {}: {reason}", dir.display())]
    Grant {
        /// The plugin's name in the job file.
        plugin: String,
        /// The directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// A call ran past its deadline and was interrupted.
    #[error("plugin `{plugin}`: `{call}` did not return within its deadline of {timeout_ms} ms")]
    Deadline {
        /// The plugin's name.
        plugin: String,
        /// The WIT function.
        call: &'static str,
        /// The deadline, in milliseconds.
        timeout_ms: u64,
        /// Whether the plugin's store was rebuilt (and restored from its last
        /// snapshot) so that later calls can succeed.
        rebuilt: bool,
    },
    /// A call tried to grow the plugin's memory past its cap.
    #[error("plugin `{plugin}`: `{call}` tried to grow memory past its cap of {cap_bytes} bytes")]
    MemoryCap {
        /// The plugin's name.
        plugin: String,
        /// The WIT function.
        call: &'static str,
        /// The cap, in bytes.
        cap_bytes: u64,
        /// Whether the plugin's store was rebuilt.
        rebuilt: bool,
    },
    /// The plugin trapped (a bug in the plugin: panic, unreachable, bad access).
    #[error("plugin `{plugin}`: `{call}` trapped: {message}")]
    Trap {
        /// The plugin's name.
        plugin: String,
        /// The WIT function.
        call: &'static str,
        /// The trap message, with the plugin's backtrace when available.
        message: String,
        /// Whether the plugin's store was rebuilt.
        rebuilt: bool,
    },
    /// An earlier trap left the plugin unusable (no snapshot to restore it
    /// from, or the job file's `on-trap = "fail"`).
    #[error(
        "plugin `{plugin}`: cannot call `{call}`: the plugin trapped earlier ({cause}) and was not rebuilt"
    )]
    Poisoned {
        /// The plugin's name.
        plugin: String,
        /// The WIT function.
        call: &'static str,
        /// The earlier failure.
        cause: String,
    },
    /// The plugin returned an expected failure (a WIT `error` value).
    #[error("plugin `{plugin}`: `{call}` failed: {}", describe_failure(error))]
    Returned {
        /// The plugin's name.
        plugin: String,
        /// The WIT function.
        call: &'static str,
        /// The error value the plugin returned.
        error: PluginFailure,
    },
    /// The plugin broke the contract (e.g. assigned a split to a subtask
    /// beyond the parallelism).
    #[error("plugin `{plugin}`: `{call}` broke the plugin contract: {reason}")]
    Protocol {
        /// The plugin's name.
        plugin: String,
        /// The WIT function.
        call: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl PluginError {
    /// The plugin (its name in the job file) this error's message names,
    /// or `None` for an error about a component file or the engine (it
    /// names the file instead).
    ///
    /// The one rule for who names the plugin: an error names its plugin
    /// once. A message that wraps a `PluginError` adds ``plugin `NAME`: ``
    /// only when this is `None`, and never says the name again itself.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            Self::KindMismatch { plugin, .. }
            | Self::Link { plugin, .. }
            | Self::Grant { plugin, .. }
            | Self::Deadline { plugin, .. }
            | Self::MemoryCap { plugin, .. }
            | Self::Trap { plugin, .. }
            | Self::Poisoned { plugin, .. }
            | Self::Returned { plugin, .. }
            | Self::Protocol { plugin, .. } => Some(plugin),
            Self::Engine { .. }
            | Self::Read { .. }
            | Self::Empty { .. }
            | Self::NotAComponent { .. }
            | Self::Compile { .. }
            | Self::Cache { .. }
            | Self::WrongWorld { .. }
            | Self::IncompatibleVersion { .. } => None,
        }
    }

    /// Whether this error came from a trap, deadline or memory cap (a plugin
    /// bug or limit), as opposed to an expected failure value.
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Self::Deadline { .. }
                | Self::MemoryCap { .. }
                | Self::Trap { .. }
                | Self::Poisoned { .. }
        )
    }
}

impl PluginError {
    /// Whether this is a fault after which the plugin's store was rebuilt
    /// (`on-trap = "rebuild"`), so that the plugin can be called again.
    pub fn was_rebuilt(&self) -> bool {
        matches!(
            self,
            Self::Deadline { rebuilt: true, .. }
                | Self::MemoryCap { rebuilt: true, .. }
                | Self::Trap { rebuilt: true, .. }
        )
    }
}

/// Describes a plugin's error value in words.
pub fn describe_failure(failure: &PluginFailure) -> String {
    match failure {
        PluginFailure::InvalidConfig(m) => format!("invalid configuration: {m}"),
        PluginFailure::InvalidState(m) => format!("invalid state: {m}"),
        PluginFailure::Io(m) => format!("I/O error: {m}"),
        PluginFailure::CorruptSnapshot(m) => format!("corrupt snapshot: {m}"),
        PluginFailure::Other(m) => m.clone(),
    }
}
