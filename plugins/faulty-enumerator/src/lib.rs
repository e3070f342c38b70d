//! `faulty-enumerator`: a tiny coordhost split enumerator (world
//! `split-enumerator-plugin`) that misbehaves on purpose, so the host's
//! sandbox can be tested: deadlines (epoch interruption), memory caps, trap
//! isolation and the absence of file-system access that was not granted.
//!
//! # Config
//!
//! | key | meaning |
//! |---|---|
//! | `splits` | number N of splits, default 4; split `i` has id `split-<i>` and payload `inline("line-<i>")` |
//! | `fault` | `none` (default), `loop` (spin forever), `grow-memory` (allocate and touch 1 MiB blocks forever), `trap` (panic with "faulty-enumerator: trap on <call>"), `error` (return `error::other("faulty-enumerator: error on <call>")`, an error value, not a trap), `read-file` (read the file at `path`) |
//! | `on` | the call where the fault strikes, or several, comma-separated (`restore,create`): `create`, `start`, `handle-split-request` (default), `add-reader`, `snapshot-state`, `add-splits-back`, `restore` |
//! | `fault-while` | an absolute path: the fault strikes only while a file exists there (its folder must be granted; without a grant the file is never seen and the fault never strikes), so a test can turn the fault on and off between runs without editing the job file; default: always |
//! | `trap-after` | number of calls of kind `on` that succeed before the fault strikes, default 0; counted per component instance (a store rebuilt by the host counts from 0 again) and applied to every fault kind |
//! | `path` | for `read-file`: the file to read; for `assign-file`: the file the split names |
//! | `snapshot-pad-mib` | MiB of padding appended to every batch snapshot, default 0: a large snapshot, to test the host's handling of one (side files, its size limit) |
//! | `sleep-ms` | for `sleep`: how long to sleep, default 20000 |
//! | `flood-lines` | for `flood`: lines written to stdout, to stderr and through `host-log` each, default 20000 |
//! | `flood-line-bytes` | for `flood`: bytes of one extra very long stdout line, `host-log` line and error message, default 8388608 |
//! | `probe-read` | for `probe`: comma-separated files to read |
//! | `probe-write` | for `probe`: comma-separated files to create and write |
//! | `probe-connect` | for `probe`: comma-separated `host:port` addresses to connect to over TCP |
//! | `store-op` | for `store`: `list`, `head`, `get`, `put` or `delete` (WIT 0.1.2 `object-store`), default `get` |
//! | `store-url` | for `store`: the `s3://BUCKET/KEY` URL the call names |
//!
//! More faults: `sleep` (`std::thread::sleep` for `sleep-ms`, then go on:
//! the guest waits inside a WASI call), `silent` (`handle-split-request`
//! returns `ok` without assigning a split or signalling the end), `flood`
//! (floods stdout, stderr and `host-log` with many lines and one very long
//! line, then returns `error::other` with a very long, multi-line message),
//! and `probe` (tries what the sandbox forbids: reads and writes the files
//! of `probe-read` and `probe-write`, lists the environment, connects to the
//! addresses of `probe-connect`; logs one `host-log` line per attempt,
//! `probe <what> <target>: refused: <error>` or
//! `probe <what> <target>: ALLOWED ...`, then goes on), and `store` (one
//! `object-store` call, `store-op` on `store-url`: when the host refuses or
//! fails it, the call returns `error::io("object-store <op> <url>: <the
//! host's store-error>")`; when it succeeds, it logs
//! `store <op> <url>: ALLOWED` and goes on).
//!
//! Faults that break the host's contract (each strikes on the call it names, whatever `on` says):
//!
//! | `fault` | what the plugin does |
//! |---|---|
//! | `assign-file` | the first `handle-split-request` of each subtask assigns split `file-<subtask>`, a `file-range` of `path` from byte 0, `length` bytes (default 2^40); later requests go on as without a fault; the split given back is assigned again |
//! | `duplicate-ids` | every `handle-split-request` assigns a split with the same id `dup` |
//! | `assign-before-reader` | `start` assigns split `early` to subtask 0, before any reader registered |
//! | `split-flood` | one `handle-split-request` calls `assign-splits` `flood-calls` times (default 400) with `flood-splits` inline splits each (default 200 000) |
//!
//! `read-file` returns `error::io` with the OS error (and not the path) when the read fails
//! (e.g. the directory was not granted); when it succeeds, a call that names
//! a subtask (`handle-split-request`, `add-reader`, `add-splits-back`)
//! assigns that subtask the split `read-file` with the file's first line as
//! inline payload, and the other calls log the line and go on.
//!
//! # Snapshot format
//!
//! Batch snapshots are supported. Little-endian `u32`s: the index of the next
//! new split, then the count of splits given back and not yet reassigned,
//! then their indexes, front first; then `snapshot-pad-mib` MiB of padding,
//! byte `i` of it being `i % 251`, checked on restore.

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "split-enumerator-plugin",
    });
}

use bindings::coordhost::plugin::types::FileRange;
use bindings::coordhost::plugin::types::{Error, LogLevel, Split, SplitPayload};
use bindings::coordhost::plugin::{enumerator_context, host_log};
use bindings::exports::coordhost::plugin::split_enumerator::{Enumerator, Guest, GuestEnumerator};
use plugin_support::config;
use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};

/// Number of splits when the config has no `splits`.
const DEFAULT_SPLITS: u32 = 4;

/// Id of the split that `read-file` assigns.
const READ_FILE_SPLIT_ID: &str = "read-file";

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    type Enumerator = FaultyEnumerator;
}

/// A call where a fault can strike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Create,
    Start,
    HandleSplitRequest,
    AddReader,
    SnapshotState,
    AddSplitsBack,
    Restore,
}

impl Call {
    const ALL: [Self; 7] = [
        Self::Create,
        Self::Start,
        Self::HandleSplitRequest,
        Self::AddReader,
        Self::SnapshotState,
        Self::AddSplitsBack,
        Self::Restore,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Start => "start",
            Self::HandleSplitRequest => "handle-split-request",
            Self::AddReader => "add-reader",
            Self::SnapshotState => "snapshot-state",
            Self::AddSplitsBack => "add-splits-back",
            Self::Restore => "restore",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Calls of each kind made so far in this component instance, by `Call as usize`.
static CALLS: [AtomicU32; Call::ALL.len()] = [const { AtomicU32::new(0) }; Call::ALL.len()];

/// The misbehaviour to show.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fault {
    None,
    Loop,
    GrowMemory,
    Trap,
    Error,
    ReadFile(String),
    Sleep(u64),
    Silent,
    Flood { lines: u32, line_bytes: u32 },
    Probe(Probes),
    Store { op: String, url: String },
    AssignFile { path: String, length: u64 },
    DuplicateIds,
    AssignBeforeReader,
    SplitFlood { calls: u32, splits: u32 },
}

/// What `probe` tries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Probes {
    read: Vec<String>,
    write: Vec<String>,
    connect: Vec<String>,
}

/// The comma-separated list under `key`, empty when absent.
fn list(config: &[(String, String)], key: &str) -> Vec<String> {
    config::value(config, key)
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// What the config says.
#[derive(Debug, Clone)]
struct Settings {
    splits: u32,
    fault: Fault,
    /// The calls where the fault strikes.
    on: Vec<Call>,
    /// `fault-while`: the fault strikes only while this file exists.
    fault_while: Option<String>,
    trap_after: u32,
    /// Bytes of padding at the end of every snapshot.
    snapshot_pad: usize,
}

impl Settings {
    fn from_config(config: &[(String, String)]) -> Result<Self, Error> {
        let splits =
            config::parsed_or(config, "splits", DEFAULT_SPLITS).map_err(Error::InvalidConfig)?;
        let fault = match config::value(config, "fault").unwrap_or("none") {
            "none" => Fault::None,
            "loop" => Fault::Loop,
            "grow-memory" => Fault::GrowMemory,
            "trap" => Fault::Trap,
            "error" => Fault::Error,
            "read-file" => Fault::ReadFile(
                config::required(config, "path")
                    .map_err(|e| {
                        Error::InvalidConfig(format!("{e} (needed by fault `read-file`)"))
                    })?
                    .to_owned(),
            ),
            "sleep" => Fault::Sleep(
                config::parsed_or(config, "sleep-ms", 20_000u64).map_err(Error::InvalidConfig)?,
            ),
            "silent" => Fault::Silent,
            "flood" => Fault::Flood {
                lines: config::parsed_or(config, "flood-lines", 20_000u32)
                    .map_err(Error::InvalidConfig)?,
                line_bytes: config::parsed_or(config, "flood-line-bytes", 8u32 << 20)
                    .map_err(Error::InvalidConfig)?,
            },
            "probe" => Fault::Probe(Probes {
                read: list(config, "probe-read"),
                write: list(config, "probe-write"),
                connect: list(config, "probe-connect"),
            }),
            "store" => Fault::Store {
                op: config::value(config, "store-op")
                    .unwrap_or("get")
                    .to_owned(),
                url: config::required(config, "store-url")
                    .map_err(|e| Error::InvalidConfig(format!("{e} (needed by fault `store`)")))?
                    .to_owned(),
            },
            "assign-file" => Fault::AssignFile {
                path: config::required(config, "path")
                    .map_err(|e| {
                        Error::InvalidConfig(format!("{e} (needed by fault `assign-file`)"))
                    })?
                    .to_owned(),
                length: config::parsed_or(config, "length", 1u64 << 40)
                    .map_err(Error::InvalidConfig)?,
            },
            "duplicate-ids" => Fault::DuplicateIds,
            "assign-before-reader" => Fault::AssignBeforeReader,
            "split-flood" => Fault::SplitFlood {
                calls: config::parsed_or(config, "flood-calls", 400u32)
                    .map_err(Error::InvalidConfig)?,
                splits: config::parsed_or(config, "flood-splits", 200_000u32)
                    .map_err(Error::InvalidConfig)?,
            },
            other => {
                return Err(Error::InvalidConfig(format!(
                    "config key `fault`: unknown fault `{other}` (expected none, loop, grow-memory, trap, error, read-file, sleep, silent, flood, probe, store, assign-file, duplicate-ids, assign-before-reader or split-flood)"
                )));
            }
        };
        let on_names = config::value(config, "on").unwrap_or(Call::HandleSplitRequest.name());
        let on = on_names
            .split(',')
            .map(str::trim)
            .map(|on_name| {
                Call::parse(on_name).ok_or_else(|| {
                    let names: Vec<_> = Call::ALL.iter().map(|c| c.name()).collect();
                    Error::InvalidConfig(format!(
                        "config key `on`: unknown call `{on_name}` (expected one of {}, or several of them comma-separated)",
                        names.join(", ")
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let fault_while = config::value(config, "fault-while").map(str::to_owned);
        let trap_after =
            config::parsed_or(config, "trap-after", 0u32).map_err(Error::InvalidConfig)?;
        let pad_mib: u32 =
            config::parsed_or(config, "snapshot-pad-mib", 0u32).map_err(Error::InvalidConfig)?;
        Ok(Self {
            splits,
            fault,
            on,
            fault_while,
            trap_after,
            snapshot_pad: pad_mib as usize * (1 << 20),
        })
    }

    /// Strikes the configured fault if `call` is the one configured and
    /// enough calls of its kind succeeded. Returns whether a split was
    /// assigned to `subtask` (by `read-file`).
    fn maybe_fault(&self, call: Call, subtask: Option<u32>) -> Result<bool, Error> {
        if !self.on.contains(&call) || self.fault == Fault::None {
            return Ok(false);
        }
        if let Some(marker) = &self.fault_while
            && !std::path::Path::new(marker).exists()
        {
            return Ok(false);
        }
        let done = CALLS[call as usize].fetch_add(1, Ordering::Relaxed);
        if done < self.trap_after {
            return Ok(false);
        }
        match &self.fault {
            Fault::None
            | Fault::AssignFile { .. }
            | Fault::DuplicateIds
            | Fault::AssignBeforeReader
            | Fault::SplitFlood { .. } => Ok(false),
            Fault::Loop => spin_forever(),
            Fault::GrowMemory => grow_memory_forever(),
            Fault::Trap => panic!("faulty-enumerator: trap on {}", call.name()),
            Fault::Error => Err(Error::Other(format!(
                "faulty-enumerator: error on {}",
                call.name()
            ))),
            Fault::ReadFile(path) => read_file(path, subtask),
            Fault::Sleep(ms) => {
                std::thread::sleep(std::time::Duration::from_millis(*ms));
                Ok(false)
            }
            // Swallows the request: nothing assigned, no end signalled.
            Fault::Silent => Ok(call == Call::HandleSplitRequest),
            Fault::Flood { lines, line_bytes } => Err(flood(*lines, *line_bytes)),
            Fault::Probe(probes) => {
                probe(probes);
                Ok(false)
            }
            Fault::Store { op, url } => store_call(op, url).map(|()| false),
        }
    }
}

/// One `object-store` call `op` on `url`; the host's `store-error`, if
/// any, as `error::io` naming the call.
fn store_call(op: &str, url: &str) -> Result<(), Error> {
    use bindings::coordhost::plugin::object_store as store;
    let outcome = match op {
        "list" => store::list_objects(url, None, 10).map(|_| ()),
        "head" => store::head_object(url).map(|_| ()),
        "get" => store::get_range(url, 0, 16).map(|_| ()),
        "put" => store::put_object(url, b"written by faulty-enumerator\n"),
        "delete" => store::delete_object(url),
        other => {
            return Err(Error::InvalidConfig(format!(
                "config key `store-op`: unknown operation `{other}` (expected list, head, get, put or delete)"
            )));
        }
    };
    match outcome {
        Ok(()) => {
            host_log::log(LogLevel::Info, &format!("store {op} {url}: ALLOWED"));
            Ok(())
        }
        Err(e) => {
            let (kind, message) = match e {
                store::StoreError::InvalidUrl(m) => ("invalid-url", m),
                store::StoreError::NotGranted(m) => ("not-granted", m),
                store::StoreError::ReadOnly(m) => ("read-only", m),
                store::StoreError::NotFound(m) => ("not-found", m),
                store::StoreError::TooLarge(m) => ("too-large", m),
                store::StoreError::Timeout(m) => ("timeout", m),
                store::StoreError::Unavailable(m) => ("unavailable", m),
            };
            Err(Error::Io(format!(
                "object-store {op} {url}: {kind}: {message}"
            )))
        }
    }
}

/// Writes `lines` short lines to stdout, to stderr and through `host-log`,
/// then one line of `line_bytes` bytes to stdout and `host-log`; returns an
/// error whose message is `line_bytes` long and spans several lines.
fn flood(lines: u32, line_bytes: u32) -> Error {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    for i in 0..lines {
        let _ = writeln!(out, "flood stdout line {i}");
        let _ = writeln!(err, "flood stderr line {i}");
        host_log::log(LogLevel::Warn, &format!("flood host-log line {i}"));
    }
    let long = "x".repeat(line_bytes as usize);
    let _ = writeln!(out, "flood long line {long}");
    let _ = out.flush();
    host_log::log(
        LogLevel::Error,
        &format!("flood long host-log line\nsecond line {long}"),
    );
    Error::Other(format!(
        "flood error: the reason comes first\nsecond line\nthird line {long}"
    ))
}

/// Logs one `host-log` line for an attempt of `what` on `target`.
fn report(what: &str, target: &str, outcome: Result<String, String>) {
    let line = match outcome {
        Ok(detail) => format!("probe {what} {target}: ALLOWED {detail}"),
        Err(error) => format!("probe {what} {target}: refused: {error}"),
    };
    host_log::log(LogLevel::Info, &line);
}

/// Tries what the sandbox forbids and reports each outcome.
fn probe(probes: &Probes) {
    for path in &probes.read {
        let outcome = std::fs::read(path)
            .map(|bytes| format!("read {} bytes", bytes.len()))
            .map_err(|e| e.to_string());
        report("read", path, outcome);
    }
    for path in &probes.write {
        let outcome = std::fs::write(path, b"written by faulty-enumerator\n")
            .map(|()| "wrote the file".to_owned())
            .map_err(|e| e.to_string());
        report("write", path, outcome);
    }
    let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    report(
        "env",
        "variables",
        if vars.is_empty() {
            Err("none visible".to_owned())
        } else {
            Ok(format!("saw {}", vars.join(",")))
        },
    );
    for address in &probes.connect {
        let outcome = std::net::TcpStream::connect(address.as_str())
            .map(|_| "connected".to_owned())
            .map_err(|e| e.to_string());
        report("connect", address, outcome);
    }
}

/// Burns CPU until the host's deadline interrupts the call.
fn spin_forever() -> ! {
    let mut turns: u64 = 0;
    loop {
        turns = black_box(turns.wrapping_add(1));
    }
}

/// Allocates 1 MiB blocks and writes into every page of each, forever, until
/// the host's memory cap stops it.
fn grow_memory_forever() -> ! {
    const BLOCK: usize = 1 << 20;
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; BLOCK];
        for byte in block.iter_mut().step_by(4096) {
            *byte = black_box(1);
        }
        hoard.push(black_box(block));
    }
}

/// Reads `path`; assigns its first line to `subtask` if there is one.
fn read_file(path: &str, subtask: Option<u32>) -> Result<bool, Error> {
    // Only the OS error, not the path: a sandbox test checks that nothing of
    // an ungranted file (not even its name) leaks into the message.
    let text =
        std::fs::read_to_string(path).map_err(|e| Error::Io(format!("read-file failed: {e}")))?;
    let first_line = text.lines().next().unwrap_or_default().to_owned();
    match subtask {
        Some(subtask) => {
            let split = Split {
                id: READ_FILE_SPLIT_ID.to_owned(),
                payload: SplitPayload::Inline(first_line),
            };
            enumerator_context::assign_splits(&[(subtask, vec![split])]);
            Ok(true)
        }
        None => {
            host_log::log(
                LogLevel::Info,
                &format!("first line of {path}: {first_line}"),
            );
            Ok(false)
        }
    }
}

/// The state a batch snapshot holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    /// Index of the next split never handed out.
    next: u32,
    /// Indexes of splits given back, to be handed out again first.
    returned: VecDeque<u32>,
}

impl State {
    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(8 + 4 * self.returned.len());
        bytes.extend_from_slice(&self.next.to_le_bytes());
        bytes.extend_from_slice(&(self.returned.len() as u32).to_le_bytes());
        for index in &self.returned {
            bytes.extend_from_slice(&index.to_le_bytes());
        }
        bytes
    }

    /// Decodes bytes that [`State::encode`] wrote for an enumerator of `splits` splits.
    fn decode(bytes: &[u8], splits: u32) -> Result<Self, String> {
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| <[u8; 4]>::try_from(c).map(u32::from_le_bytes))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("snapshot length {} is not a multiple of 4", bytes.len()))?;
        let [next, count, returned @ ..] = words.as_slice() else {
            return Err(format!(
                "snapshot has {} bytes, expected at least 8",
                bytes.len()
            ));
        };
        if *count as usize != returned.len() {
            return Err(format!(
                "snapshot says {count} returned splits but holds {}",
                returned.len()
            ));
        }
        if *next > splits {
            return Err(format!(
                "snapshot's next split {next} is beyond {splits} splits"
            ));
        }
        if let Some(bad) = returned.iter().find(|&&i| i >= *next) {
            return Err(format!(
                "snapshot returns split {bad}, which was never handed out"
            ));
        }
        Ok(Self {
            next: *next,
            returned: returned.iter().copied().collect(),
        })
    }
}

/// Byte `i` of a snapshot's padding.
fn pad_byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// The snapshot without its `pad` bytes of padding, which must be intact.
fn strip_padding(bytes: &[u8], pad: usize) -> Result<&[u8], String> {
    let Some(body) = bytes.len().checked_sub(pad) else {
        return Err(format!(
            "snapshot has {} bytes, fewer than its {pad} bytes of padding",
            bytes.len()
        ));
    };
    if bytes[body..]
        .iter()
        .enumerate()
        .any(|(i, &b)| b != pad_byte(i))
    {
        return Err("snapshot padding is damaged".to_owned());
    }
    Ok(&bytes[..body])
}

/// One enumerator instance.
pub struct FaultyEnumerator {
    settings: Settings,
    state: RefCell<State>,
    /// Subtasks that got their `assign-file` split (not in snapshots).
    given_file: RefCell<BTreeSet<u32>>,
}

impl FaultyEnumerator {
    /// Strikes a contract-breaking fault on `handle-split-request`;
    /// whether the request was answered.
    fn contract_fault(&self, subtask: u32) -> bool {
        match &self.settings.fault {
            Fault::AssignFile { path, length } => {
                if !self.given_file.borrow_mut().insert(subtask) {
                    return false;
                }
                let split = Split {
                    id: format!("file-{subtask}"),
                    payload: SplitPayload::FileRange(FileRange {
                        path: path.clone(),
                        start: 0,
                        length: *length,
                    }),
                };
                enumerator_context::assign_splits(&[(subtask, vec![split])]);
                true
            }
            Fault::DuplicateIds => {
                let split = Split {
                    id: "dup".to_owned(),
                    payload: SplitPayload::Inline("dup".to_owned()),
                };
                enumerator_context::assign_splits(&[(subtask, vec![split])]);
                true
            }
            Fault::SplitFlood { calls, splits } => {
                for call in 0..*calls {
                    let batch: Vec<Split> = (0..*splits)
                        .map(|i| Split {
                            id: format!("f-{call}-{i}"),
                            payload: SplitPayload::Inline(String::new()),
                        })
                        .collect();
                    enumerator_context::assign_splits(&[(subtask, batch)]);
                }
                true
            }
            _ => false,
        }
    }
}

impl GuestEnumerator for FaultyEnumerator {
    fn create(config: Vec<(String, String)>, _parallelism: u32) -> Result<Enumerator, Error> {
        let settings = Settings::from_config(&config)?;
        settings.maybe_fault(Call::Create, None)?;
        Ok(Enumerator::new(Self {
            settings,
            state: RefCell::new(State::default()),
            given_file: RefCell::new(BTreeSet::new()),
        }))
    }

    fn restore(
        config: Vec<(String, String)>,
        _parallelism: u32,
        snapshot: Vec<u8>,
    ) -> Result<Enumerator, Error> {
        let settings = Settings::from_config(&config)?;
        settings.maybe_fault(Call::Restore, None)?;
        let unpadded =
            strip_padding(&snapshot, settings.snapshot_pad).map_err(Error::CorruptSnapshot)?;
        let state = State::decode(unpadded, settings.splits).map_err(Error::CorruptSnapshot)?;
        Ok(Enumerator::new(Self {
            settings,
            state: RefCell::new(state),
            given_file: RefCell::new(BTreeSet::new()),
        }))
    }

    fn start(&self) -> Result<(), Error> {
        self.settings.maybe_fault(Call::Start, None)?;
        if self.settings.fault == Fault::AssignBeforeReader {
            let split = Split {
                id: "early".to_owned(),
                payload: SplitPayload::Inline("early".to_owned()),
            };
            enumerator_context::assign_splits(&[(0, vec![split])]);
        }
        Ok(())
    }

    fn handle_split_request(&self, subtask: u32, _hostname: Option<String>) -> Result<(), Error> {
        if self
            .settings
            .maybe_fault(Call::HandleSplitRequest, Some(subtask))?
            || self.contract_fault(subtask)
        {
            return Ok(());
        }
        let index = {
            let mut state = self.state.borrow_mut();
            match state.returned.pop_front() {
                Some(index) => Some(index),
                None if state.next < self.settings.splits => {
                    state.next += 1;
                    Some(state.next - 1)
                }
                None => None,
            }
        };
        match index {
            Some(i) => {
                let split = Split {
                    id: format!("split-{i}"),
                    payload: SplitPayload::Inline(format!("line-{i}")),
                };
                enumerator_context::assign_splits(&[(subtask, vec![split])]);
            }
            None => enumerator_context::signal_no_more_splits(subtask),
        }
        Ok(())
    }

    fn add_splits_back(&self, splits: Vec<Split>, subtask: u32) -> Result<(), Error> {
        if self
            .settings
            .maybe_fault(Call::AddSplitsBack, Some(subtask))?
        {
            return Ok(());
        }
        let mut indexes = Vec::with_capacity(splits.len());
        for split in splits {
            if split.id == READ_FILE_SPLIT_ID {
                continue; // a probe, not data: never handed out again
            }
            if let Some(owner) = split.id.strip_prefix("file-").and_then(|s| s.parse().ok()) {
                // `assign-file`: handed out again on the next request, like any split.
                self.given_file.borrow_mut().remove(&owner);
                continue;
            }
            let index = split
                .id
                .strip_prefix("split-")
                .and_then(|i| i.parse::<u32>().ok())
                .filter(|&i| i < self.settings.splits)
                .ok_or_else(|| {
                    Error::InvalidState(format!("unknown split `{}` given back", split.id))
                })?;
            indexes.push(index);
        }
        let mut state = self.state.borrow_mut();
        for index in indexes.into_iter().rev() {
            state.returned.push_front(index);
        }
        Ok(())
    }

    fn add_reader(&self, subtask: u32) -> Result<(), Error> {
        self.settings.maybe_fault(Call::AddReader, Some(subtask))?;
        Ok(())
    }

    fn supports_batch_snapshot() -> bool {
        true
    }

    fn snapshot_state(&self, _checkpoint_id: i64) -> Result<Vec<u8>, Error> {
        self.settings.maybe_fault(Call::SnapshotState, None)?;
        let mut bytes = self.state.borrow().encode();
        bytes.extend((0..self.settings.snapshot_pad).map(pad_byte));
        Ok(bytes)
    }

    fn unassigned_splits(&self) -> u64 {
        let state = self.state.borrow();
        u64::from(self.settings.splits - state.next) + state.returned.len() as u64
    }
}

bindings::export!(Component with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn settings_default_to_a_harmless_enumerator() {
        let settings = Settings::from_config(&cfg(&[])).unwrap();
        assert_eq!(settings.splits, DEFAULT_SPLITS);
        assert_eq!(settings.fault, Fault::None);
        assert_eq!(settings.on, vec![Call::HandleSplitRequest]);
        assert_eq!(settings.fault_while, None);
        assert_eq!(settings.trap_after, 0);
        assert_eq!(settings.snapshot_pad, 0);
    }

    #[test]
    fn padding_is_stripped_only_when_intact() {
        let state = State {
            next: 2,
            returned: [1].into(),
        };
        let mut bytes = state.encode();
        bytes.extend((0..1000).map(pad_byte));
        assert_eq!(strip_padding(&bytes, 1000).unwrap(), &state.encode()[..]);
        assert!(strip_padding(&bytes[..500], 1000).is_err());
        bytes[20] ^= 1;
        assert!(strip_padding(&bytes, 1000).is_err());
    }

    #[test]
    fn bad_fault_settings_are_refused() {
        assert!(Settings::from_config(&cfg(&[("fault", "explode")])).is_err());
        assert!(Settings::from_config(&cfg(&[("on", "sometimes")])).is_err());
        assert!(Settings::from_config(&cfg(&[("on", "restore")])).is_ok());
        assert!(Settings::from_config(&cfg(&[("on", "restore,sometimes")])).is_err());
        assert!(Settings::from_config(&cfg(&[("fault", "read-file")])).is_err());
        assert!(Settings::from_config(&cfg(&[("trap-after", "-1")])).is_err());
        assert!(Settings::from_config(&cfg(&[("fault", "sleep"), ("sleep-ms", "x")])).is_err());
        assert!(Settings::from_config(&cfg(&[("fault", "flood"), ("flood-lines", "-2")])).is_err());
    }

    #[test]
    fn new_faults_read_their_settings() {
        let sleep = Settings::from_config(&cfg(&[("fault", "sleep"), ("sleep-ms", "7")])).unwrap();
        assert_eq!(sleep.fault, Fault::Sleep(7));
        let probe = Settings::from_config(&cfg(&[
            ("fault", "probe"),
            ("probe-read", "/a,/b"),
            ("probe-connect", "127.0.0.1:9"),
        ]))
        .unwrap();
        assert_eq!(
            probe.fault,
            Fault::Probe(Probes {
                read: vec!["/a".into(), "/b".into()],
                write: Vec::new(),
                connect: vec!["127.0.0.1:9".into()],
            })
        );
        let silent = Settings::from_config(&cfg(&[("fault", "silent")])).unwrap();
        assert_eq!(silent.fault, Fault::Silent);
        let error = Settings::from_config(&cfg(&[
            ("fault", "error"),
            ("on", "restore, create"),
            ("fault-while", "/no/such/marker"),
        ]))
        .unwrap();
        assert_eq!(error.fault, Fault::Error);
        assert_eq!(error.on, vec![Call::Restore, Call::Create]);
        assert!(
            error.maybe_fault(Call::Restore, None).is_ok(),
            "no marker file, no fault"
        );
    }

    #[test]
    fn snapshots_round_trip_and_bad_bytes_are_refused() {
        let state = State {
            next: 3,
            returned: [1, 0].into(),
        };
        assert_eq!(State::decode(&state.encode(), 4).unwrap(), state);
        assert!(State::decode(&state.encode(), 2).is_err());
        assert!(State::decode(&[1, 2, 3], 4).is_err());
        assert!(State::decode(&[], 4).is_err());
        let mut bytes = state.encode();
        bytes.truncate(12);
        assert!(State::decode(&bytes, 4).is_err());
    }
}
