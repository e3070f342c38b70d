//! `hostile-shuffle`: a coordhost shuffle master (world
//! `shuffle-master-plugin`) that misbehaves on purpose, so the host's rule on
//! plugin-named paths and its contract checks can be tested through
//! `coordhost run`. Without a fault it places partitions like
//! `local-shuffle` (under `root`), without batch snapshots.
//!
//! # Config
//!
//! | key | meaning |
//! |---|---|
//! | `root` | absolute directory, granted read-write |
//! | `fault` | `none` (default); `outside`: every location is `target` (a folder outside the grant); `symlink`: creates, through WASI, the relative symlink `<root>/escape -> <link-target>` and places every partition under `<root>/escape/`; `wrong-id`: the descriptor names another producer attempt; `zero-subpartitions` / `more-subpartitions`: the descriptor has 0 / one more subpartition than asked |
//! | | `swap-on-release`: on `release-partition-externally`, replaces the job's folder `<root>/<job-id>` by a symlink to `link-target` |
//! | | `read-files`: at `register-job`, plants `<root>/peek -> <link-target>` and asks the host's `local-files` (WIT 0.1.3) for `target`, `<root>/../<target's name>`, `<root>/peek` and `<root>/peek/<target's name>`, logging one `probe` line (warn) per answer with the first bytes it got; then behaves |
//! | `target` | for `outside`: the absolute location returned |
//! | `link-target` | for `symlink` and `swap-on-release`: where the planted link points, default `../../victim2` |

mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "shuffle-master-plugin",
    });
}

use bindings::coordhost::plugin::host_log;
use bindings::coordhost::plugin::types::{
    Error, LogLevel, PartitionDescriptor, PartitionWithMetrics, ProducerDescriptor,
    ResultPartitionId, ShuffleDescriptor, ShuffleMasterSnapshot,
};
use bindings::exports::coordhost::plugin::shuffle_master::{
    Guest, GuestShuffleMaster, ShuffleMaster,
};
use plugin_support::config;
use plugin_support::partition_files::partition_location;

/// The component: the type the generated `export!` binds to.
struct Component;

impl Guest for Component {
    type ShuffleMaster = HostileShuffleMaster;
}

/// The misbehaviour to show.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Fault {
    None,
    Outside(String),
    Symlink,
    WrongId,
    ZeroSubpartitions,
    MoreSubpartitions,
    SwapOnRelease(String),
    ReadFiles(String, String),
}

/// One shuffle master instance.
pub struct HostileShuffleMaster {
    root: String,
    fault: Fault,
}

fn parse(config: &[(String, String)]) -> Result<HostileShuffleMaster, Error> {
    let root = config::absolute_path(config, "root").map_err(Error::InvalidConfig)?;
    let fault = match config::value(config, "fault").unwrap_or("none") {
        "none" => Fault::None,
        "outside" => Fault::Outside(
            config::required(config, "target")
                .map_err(|e| Error::InvalidConfig(format!("{e} (needed by fault `outside`)")))?
                .to_owned(),
        ),
        "symlink" => Fault::Symlink,
        "wrong-id" => Fault::WrongId,
        "zero-subpartitions" => Fault::ZeroSubpartitions,
        "more-subpartitions" => Fault::MoreSubpartitions,
        "swap-on-release" => Fault::SwapOnRelease(
            config::value(config, "link-target")
                .unwrap_or("../../victim2")
                .to_owned(),
        ),
        "read-files" => Fault::ReadFiles(
            config::required(config, "target")
                .map_err(|e| Error::InvalidConfig(format!("{e} (needed by fault `read-files`)")))?
                .to_owned(),
            config::value(config, "link-target")
                .unwrap_or("../../victim2")
                .to_owned(),
        ),
        other => {
            return Err(Error::InvalidConfig(format!(
                "config key `fault`: unknown fault `{other}`"
            )));
        }
    };
    Ok(HostileShuffleMaster { root, fault })
}

unsafe extern "C" {
    /// POSIX `symlink` of wasi-libc (which Rust's `std` links on
    /// `wasm32-wasip2`): resolves `linkpath` against the preopened
    /// directories and calls WASI's `symlink-at`. `std::os::wasi::fs::symlink_path`
    /// would do the same but is unstable.
    fn symlink(target: *const std::ffi::c_char, linkpath: *const std::ffi::c_char) -> i32;
}

/// Creates the symlink `link -> target` through WASI, as any guest may in its grant.
fn plant_symlink(target: &str, link: &str) -> std::io::Result<()> {
    let target = std::ffi::CString::new(target).map_err(std::io::Error::other)?;
    let link = std::ffi::CString::new(link).map_err(std::io::Error::other)?;
    // SAFETY: both pointers are valid NUL-terminated strings for the call.
    if unsafe { symlink(target.as_ptr(), link.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Asks the host's `local-files` for files outside the grant, directly,
/// through `..` and through a symlink planted inside it, and logs each
/// answer (`probe read|size PATH: ANSWER`).
fn probe_local_files(root: &str, target: &str, link_target: &str) {
    use bindings::coordhost::plugin::local_files::{
        FileSize, SmallFile, file_sizes, read_small_files,
    };
    let root = root.trim_end_matches('/');
    let name = target.rsplit('/').next().unwrap_or(target);
    let link = format!("{root}/peek");
    if let Err(e) = plant_symlink(link_target, &link)
        && e.kind() != std::io::ErrorKind::AlreadyExists
    {
        host_log::log(LogLevel::Warn, &format!("probe: cannot plant {link}: {e}"));
    }
    let paths = vec![
        target.to_owned(),
        format!("{root}/../{name}"),
        link.clone(),
        format!("{link}/{name}"),
    ];
    for (path, answer) in paths.iter().zip(read_small_files(&paths, 4096)) {
        let said = match answer {
            SmallFile::Whole(bytes) => {
                format!(
                    "whole: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
                )
            }
            SmallFile::TooLarge(n) => format!("too-large {n}"),
            SmallFile::Missing => "missing".to_owned(),
            SmallFile::Failed(why) => format!("failed: {why}"),
        };
        host_log::log(LogLevel::Warn, &format!("probe read {path}: {said}"));
    }
    for (path, answer) in paths.iter().zip(file_sizes(&paths)) {
        let said = match answer {
            FileSize::Regular(n) => format!("regular {n}"),
            FileSize::Missing => "missing".to_owned(),
            FileSize::Failed(why) => format!("failed: {why}"),
        };
        host_log::log(LogLevel::Warn, &format!("probe size {path}: {said}"));
    }
}

impl GuestShuffleMaster for HostileShuffleMaster {
    fn create(config: Vec<(String, String)>) -> Result<ShuffleMaster, Error> {
        let this = parse(&config)?;
        std::fs::create_dir_all(&this.root)
            .map_err(|e| Error::Io(format!("cannot create {}: {e}", this.root)))?;
        if this.fault == Fault::Symlink {
            let target = config::value(&config, "link-target").unwrap_or("../../victim2");
            let link = format!("{}/escape", this.root.trim_end_matches('/'));
            match plant_symlink(target, &link) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::Io(format!("cannot plant {link}: {e}"))),
            }
            host_log::log(LogLevel::Info, &format!("planted {link} -> {target}"));
        }
        Ok(ShuffleMaster::new(this))
    }

    fn register_job(&self, _job_id: String) -> Result<(), Error> {
        if let Fault::ReadFiles(target, link_target) = &self.fault {
            probe_local_files(&self.root, target, link_target);
        }
        Ok(())
    }

    fn register_partition_with_producer(
        &self,
        job_id: String,
        partition: PartitionDescriptor,
        _producer: ProducerDescriptor,
    ) -> Result<ShuffleDescriptor, Error> {
        let p = &partition.id.producer;
        let root = match self.fault {
            Fault::Symlink => format!("{}/escape", self.root.trim_end_matches('/')),
            _ => self.root.clone(),
        };
        let mut location = partition_location(
            &root,
            &job_id,
            &partition.id.intermediate_data_set,
            &p.job_vertex,
            p.subtask,
            p.attempt,
        );
        let mut id = partition.id.clone();
        let mut num_subpartitions = partition.num_subpartitions;
        match &self.fault {
            Fault::Outside(target) => location = target.clone(),
            Fault::WrongId => id.producer.attempt += 7,
            Fault::ZeroSubpartitions => num_subpartitions = 0,
            Fault::MoreSubpartitions => num_subpartitions += 1,
            Fault::None | Fault::Symlink | Fault::SwapOnRelease(_) | Fault::ReadFiles(..) => {}
        }
        Ok(ShuffleDescriptor {
            id,
            location,
            num_subpartitions,
        })
    }

    fn release_partition_externally(&self, descriptor: ShuffleDescriptor) -> Result<(), Error> {
        if let Fault::SwapOnRelease(target) = &self.fault {
            // Replace the job's folder (inside the grant) by a symlink, so a
            // host that follows it would delete `<target>/<data-set>/<partition>`.
            let job_dir = descriptor
                .location
                .rsplitn(3, '/')
                .nth(2)
                .unwrap_or_default()
                .to_owned();
            let _gone = std::fs::remove_dir_all(&job_dir);
            match plant_symlink(target, &job_dir) {
                Ok(()) => host_log::log(LogLevel::Info, &format!("swapped {job_dir} -> {target}")),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::Io(format!("cannot plant {job_dir}: {e}"))),
            }
        }
        Ok(())
    }

    fn supports_batch_snapshot() -> bool {
        false
    }

    fn snapshot_state(&self, _job_id: String) -> Result<ShuffleMasterSnapshot, Error> {
        Err(Error::Other(
            "hostile-shuffle takes no snapshots".to_owned(),
        ))
    }

    fn restore_state(&self, _snapshots: Vec<ShuffleMasterSnapshot>) -> Result<(), Error> {
        Err(Error::Other(
            "hostile-shuffle takes no snapshots".to_owned(),
        ))
    }

    fn notify_partition_recovery_started(&self, _job_id: String) {}

    fn get_partitions_with_metrics(
        &self,
        _job_id: String,
        _expected: Vec<ResultPartitionId>,
        _remaining_ms: u64,
    ) -> Result<Vec<PartitionWithMetrics>, Error> {
        Ok(Vec::new())
    }

    fn unregister_job(&self, _job_id: String) {}
}

bindings::export!(Component with_types_in bindings);
