//! Where a run's event log lives ([`LogPlace`]): decided once per run by
//! the driver, read by the SQL part to adopt the stages a log recorded.

use std::path::PathBuf;
use std::sync::Arc;

use crate::config::JobConfig;
use crate::events::{EventsError, Replay, job_log_dir};
use crate::scheduler::{JobError, RunOptions};

/// Where a run's event log lives: the job's folder under the data
/// directory (docs/log-format.md), or objects under an `s3://` prefix
/// (`run --log`, docs/object-storage.md).
#[derive(Debug)]
pub(crate) enum LogPlace {
    /// `<data dir>/<job>/log`.
    Dir(PathBuf),
    /// The objects of the log, through one client for the whole run.
    Objects(Arc<crate::events::ObjectStorage>),
}

/// Refuses an event log on objects whose objects (`PREFIX/log/…`) a
/// plugin's store grant reaches: the grant holds them, or lies among them.
/// The log is the host's own record; a plugin that could read, replace or
/// delete it (`object-shuffle` deletes `<its prefix>/<job>/` when the job
/// ends) would hold the host's authority (docs/object-storage.md, "Grants
/// for plugins").
///
/// # Errors
/// [`crate::config::ConfigError::Invalid`] naming the job file, the field
/// (`--log` or `job.log`), the grant and the plugin.
fn apart_from_grants(
    config: &JobConfig,
    url: &crate::events::ObjectLogUrl,
    from_flag: bool,
) -> Result<(), JobError> {
    let objects = crate::objstore::ObjectUrl {
        bucket: url.bucket.clone(),
        key: if url.prefix.is_empty() {
            "log".to_owned()
        } else {
            format!("{}/log", url.prefix)
        },
    };
    for plugin in config.plugins.values() {
        for grant in &plugin.stores {
            if objects.within(&grant.url, true) || grant.url.within(&objects, true) {
                return Err(crate::config::ConfigError::Invalid {
                    file: config.file.clone(),
                    field: if from_flag { "--log" } else { "job.log" }.to_owned(),
                    reason: format!(
                        "the event log at `{url}` keeps its objects under `{objects}`, which `{}`, a store granted to plugin `{}`, reaches; the log is the host's own: give it a prefix apart from every plugin's grants",
                        grant.url, plugin.name
                    ),
                }
                .into());
            }
        }
    }
    Ok(())
}

impl LogPlace {
    /// The place of `config`'s log for the run `opts`: `run --log`, else
    /// the job file's `[job] log`, else the data directory.
    ///
    /// # Errors
    /// A job id that cannot name a folder; the object store client's error.
    pub(crate) fn new(config: &JobConfig, opts: &RunOptions) -> Result<Self, JobError> {
        Ok(match opts.log.as_ref().or(config.log.as_ref()) {
            Some(url) => Self::Objects(Arc::new({
                apart_from_grants(config, url, opts.log.is_some())?;
                crate::events::ObjectStorage::connect(url)?
                    .with_write_retry(opts.log_retry)
                    .with_fence(opts.fence.clone())
            })),
            None => Self::Dir(job_log_dir(&opts.data_dir, &config.name)?),
        })
    }

    /// The log replayed without writing, `None` if there is none yet (no
    /// folder; no object). A store that cannot be listed is an error.
    pub(crate) fn replay_existing(&self) -> Option<Result<Replay, EventsError>> {
        match self {
            Self::Dir(dir) => dir
                .is_dir()
                .then(|| crate::events::replay(&crate::events::FileStorage::open_read_only(dir))),
            Self::Objects(storage) => match crate::events::replay(&**storage) {
                Ok(replay) if replay.is_empty() => None,
                other => Some(other),
            },
        }
    }

    /// The log's place in words: its folder or its URL.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Dir(dir) => dir.display().to_string(),
            Self::Objects(storage) => storage.url().to_string(),
        }
    }
}
