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

impl LogPlace {
    /// The place of `config`'s log for the run `opts`: `run --log`, else
    /// the job file's `[job] log`, else the data directory.
    ///
    /// # Errors
    /// A job id that cannot name a folder; the object store client's error.
    pub(crate) fn new(config: &JobConfig, opts: &RunOptions) -> Result<Self, JobError> {
        Ok(match opts.log.as_ref().or(config.log.as_ref()) {
            Some(url) => Self::Objects(Arc::new(
                crate::events::ObjectStorage::connect(url)?
                    .with_write_retry(opts.log_retry)
                    .with_fence(opts.fence.clone()),
            )),
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
