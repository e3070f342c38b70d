//! A worker process's source readers (issue 27, item 3; docs/workers.md,
//! "Plugin components on workers"): the readers of the tables a scan task
//! reads (`[tables.TABLE] format = { reader = "PLUGIN" }`).
//!
//! A deploy of such a scan names the table's reader ([`RemoteReader`]: the
//! table, its declared columns, the plugin and its component with its
//! settings), never its bytes. Before the task runs, the worker loads each
//! reader through its one path for every component a task needs
//! ([`WorkerComponents::load`]: bytes kept or fetched by hash, checked,
//! compiled once through the cache) and binds it to the table's declared
//! schema, as the coordinator's embedded tasks do
//! ([`coordhost_wasm::LoadedPlugin::source_reader`]). The loaded reader (with
//! its pool of idle configured instances) is kept for the worker's later
//! tasks: one load per reader per worker process, whatever the number of
//! tasks, until the job is released.
//!
//! The sandbox is the coordinator's: the deadline per call, the memory cap,
//! `on-trap`, and the reader's `dirs` grants, the only directories its
//! instances are given (and the only ones a `file-range` split may name).

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr as _;
use std::sync::{Arc, Mutex};

use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::components::{ComponentSource, WorkerComponents, check_hash, lock, what};
use super::task::RemoteReader;
use coordhost_data::runtime::TableReaders;
use coordhost_wasm::{PluginKind, SourceReader};

/// One reader's loaded form, filled by its first load.
type Slot = Arc<Mutex<Option<Arc<SourceReader>>>>;

/// The source readers of one worker process.
pub(super) struct WorkerReaders {
    /// The worker's components (bytes by hash, the plugin host).
    components: Arc<WorkerComponents>,
    /// Per reader (its postcard form: the same table, columns, plugin,
    /// hash and settings): the loaded reader once loaded.
    loaded: Mutex<HashMap<Vec<u8>, Slot>>,
}

/// `r`'s declared schema (every column nullable).
///
/// # Errors
///
/// One line naming the reader and the table: a type that is not an Arrow
/// type.
fn schema(r: &RemoteReader) -> Result<SchemaRef, String> {
    let fields = r
        .columns
        .iter()
        .map(|(name, ty)| {
            DataType::from_str(ty)
                .map(|t| Field::new(name, t, true))
                .map_err(|e| {
                    format!(
                        "source reader `{}` of table `{}`: column `{}`: `{}` is not an Arrow type: {e}",
                        r.plugin,
                        r.table,
                        coordhost_wasm::one_line(name, 80),
                        coordhost_wasm::one_line(ty, 80)
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// Refuses a deploy's `readers` a worker cannot use, before the task is
/// accepted: a hash that is not 64 lowercase hex digits, a type that is
/// not an Arrow type.
///
/// # Errors
///
/// One line naming the reader and the table.
pub(super) fn check(readers: &[RemoteReader]) -> Result<(), String> {
    for r in readers {
        check_hash(
            &format!(
                "{} of table `{}`",
                what(PluginKind::SourceReader, &r.plugin),
                r.table
            ),
            &r.component,
        )?;
        schema(r)?;
    }
    Ok(())
}

impl WorkerReaders {
    /// The readers of a worker whose components are `components`.
    pub(super) fn new(components: Arc<WorkerComponents>) -> Self {
        Self {
            components,
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets the loaded readers (their instances): the job is over. The
    /// bytes stay in `<data-dir>/components` and the machine code in the
    /// cache, so a later job loads them without a fetch or a compile.
    pub(super) fn forget_loaded(&self) {
        lock(&self.loaded).clear();
    }

    /// The readers of a deploy by table, each loaded now unless this
    /// worker loaded it for an earlier task, with bytes from `source` when
    /// it keeps none of its hash. Blocks (fetching waits on the worker's
    /// async runtime): call it on a task's thread, never on a thread of an
    /// async runtime.
    ///
    /// # Errors
    ///
    /// One line naming the reader, the table, its component and hash: a
    /// deploy [`check`] refuses, a fetch that failed, bytes of another hash
    /// (never run), a component the plugin host refuses.
    pub(super) fn table_readers(
        &self,
        readers: &[RemoteReader],
        source: &dyn ComponentSource,
    ) -> Result<TableReaders, String> {
        let mut out = BTreeMap::new();
        for r in readers {
            let key = postcard::to_stdvec(r)
                .map_err(|e| format!("source reader `{}` of table `{}`: {e}", r.plugin, r.table))?;
            let slot = lock(&self.loaded).entry(key).or_default().clone();
            // Other tasks of the same reader wait for this load rather
            // than making their own.
            let mut slot = lock(&slot);
            let reader = match &*slot {
                Some(reader) => reader.clone(),
                None => {
                    let reader = self.load(r, source).map_err(|e| {
                        format!(
                            "source reader `{}` of table `{}` (component {}, sha256 {}) on worker `{}`: {e}",
                            r.plugin,
                            r.table,
                            r.component.path,
                            r.component.sha256,
                            self.components.worker()
                        )
                    })?;
                    *slot = Some(reader.clone());
                    reader
                }
            };
            out.insert(r.table.clone(), reader);
        }
        Ok(Arc::new(out))
    }

    fn load(
        &self,
        r: &RemoteReader,
        source: &dyn ComponentSource,
    ) -> Result<Arc<SourceReader>, String> {
        let schema = schema(r)?;
        let reader = self
            .components
            .load(&r.plugin, PluginKind::SourceReader, &r.component, source)?
            .source_reader(&r.table, schema)
            .map_err(|e| e.to_string())?;
        tracing::info!(
            target: crate::LOG_TARGET, worker = %self.components.worker(),
            plugin = %r.plugin,
            table = %r.table,
            sha256 = %r.component.sha256,
            cache = ?reader.plugin().cache_outcome(),
            "loaded a source reader"
        );
        Ok(reader)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::tests::Fixed;
    use crate::task::RemoteComponent;

    fn remote(sha256: &str, ty: &str) -> RemoteReader {
        RemoteReader {
            table: "accounts".into(),
            plugin: "fixed".into(),
            columns: vec![("id".into(), "Int64".into()), ("balance".into(), ty.into())],
            component: RemoteComponent {
                path: "/jobs/fixed.wasm".into(),
                sha256: sha256.into(),
                config: Vec::new(),
                dirs: Vec::new(),
                call_timeout_ms: 1000,
                memory_bytes: 1 << 20,
                on_trap: coordhost_wasm::TrapPolicy::Fail,
            },
        }
    }

    #[test]
    fn a_deploy_with_a_bad_hash_or_type_is_refused_naming_the_reader_and_the_table() {
        let e = check(&[remote("../../etc/passwd", "Decimal128(15, 2)")]).expect_err("refused");
        assert!(
            e.contains("source reader `fixed` of table `accounts`") && e.contains("not a SHA-256"),
            "{e}"
        );
        let e = check(&[remote(&"a".repeat(64), "Decimal999")]).expect_err("refused");
        assert!(
            e.contains("source reader `fixed` of table `accounts`")
                && e.contains("column `balance`")
                && e.contains("not an Arrow type"),
            "{e}"
        );
        check(&[remote(&"a".repeat(64), "Decimal128(15, 2)")]).expect("a good deploy");
    }

    #[test]
    fn bytes_of_another_hash_are_refused_and_nothing_is_kept_or_loaded() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let components = Arc::new(WorkerComponents::new(
            "w0",
            tmp.path().join("components"),
            None,
        ));
        let readers = WorkerReaders::new(components.clone());
        let want = super::super::components::sha256_hex(b"the job's reader");
        let e = readers
            .table_readers(
                &[remote(&want, "Int64")],
                &Fixed(b"a stranger's bytes".to_vec()),
            )
            .expect_err("refused");
        for needle in [
            "source reader `fixed` of table `accounts`",
            &want,
            "/jobs/fixed.wasm",
            "does not run them",
        ] {
            assert!(e.contains(needle), "`{needle}` in: {e}");
        }
        assert!(!components.file(&want).exists(), "nothing kept");
        assert!(
            lock(&readers.loaded)
                .values()
                .all(|slot| lock(slot).is_none()),
            "nothing loaded"
        );
    }
}
