//! `[tables.NAME] format = { reader = "PLUGIN" }` of a SQL job (docs/sql.md,
//! "Tables read by a Wasm reader"): the table's splits are read by a
//! source-reader plugin (`crate::plugin`, WIT `coordhost:reader`) declared
//! under `[plugins.PLUGIN]` with `kind = "source-reader"`.
//!
//! Refused with exit 2, naming the field: a format table with a key other
//! than `reader` (`tables.NAME.format.KEY`), a `reader` that is not a
//! string or names no plugin, or a plugin of another kind
//! (`tables.NAME.format.reader`), `header` or `delimiter` beside a reader
//! (`tables.NAME.format`). The component itself is loaded when the job
//! starts, as every `[plugins]` entry is: one that is not a source reader
//! is refused then, naming `plugins.PLUGIN.kind`.

use std::collections::BTreeMap;
use std::path::Path;

use sha2::Digest;

use super::validate::Validator;
use super::{ConfigError, SqlSpec};
use crate::plugin::{PluginKind, PluginSpec};
use crate::sql::TableFormat;

impl Validator {
    /// The format of a table read by a reader plugin: the `format` table
    /// `t` of `[tables.NAME]` at `field`.
    pub(super) fn reader_format(
        &self,
        field: &str,
        t: toml::Table,
        plugins: &BTreeMap<String, PluginSpec>,
    ) -> Result<TableFormat, ConfigError> {
        let at = format!("{field}.format.reader");
        let mut reader = None;
        for (k, v) in t {
            match (k.as_str(), v) {
                ("reader", toml::Value::String(s)) => reader = Some(s),
                ("reader", other) => {
                    return Err(self.invalid(
                        &at,
                        format!("{other} is not a string naming a source-reader plugin"),
                    ));
                }
                (other, _) => {
                    return Err(self.invalid(
                        format!("{field}.format.{other}"),
                        "unknown key: a format table has only `reader = \"PLUGIN\"`",
                    ));
                }
            }
        }
        let name = reader.ok_or_else(|| {
            self.invalid(
                &at,
                "missing: a format table names its source-reader plugin, `{ reader = \"PLUGIN\" }`",
            )
        })?;
        let spec = match plugins.get(&name) {
            None => {
                return Err(self.invalid(&at, format!("no plugin named `{name}` under [plugins]")));
            }
            Some(p) if p.kind != PluginKind::SourceReader => {
                return Err(self.invalid(
                    &at,
                    format!(
                        "plugin `{name}` is a {}, not a source-reader (`kind = \"source-reader\"`)",
                        p.kind
                    ),
                ));
            }
            Some(p) => p,
        };
        let bytes = crate::files::read_regular_file(&spec.path, crate::files::MAX_COMPONENT_BYTES)
            .map_err(|e| {
                self.invalid(
                    format!("plugins.{name}.component"),
                    format!("cannot read {}: {e}", spec.path.display()),
                )
            })?;
        let component_sha256 = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(TableFormat::Reader {
            plugin: name,
            component_sha256,
        })
    }
}

/// Refuses the job of `file` (its SQL `sql`) on worker processes when one of its tables is read by
/// a source-reader plugin: such tables are read in embedded tasks only
/// (the component does not travel to worker processes yet; docs/sql.md,
/// "Tables read by a Wasm reader").
///
/// # Errors
///
/// [`ConfigError::Invalid`] naming the job file and
/// `tables.NAME.format.reader` of the first such table.
pub fn refuse_readers_on_workers(file: &Path, sql: Option<&SqlSpec>) -> Result<(), ConfigError> {
    let table = sql.and_then(|sql| {
        sql.tables
            .iter()
            .find(|t| matches!(t.format, TableFormat::Reader { .. }))
    });
    match table {
        None => Ok(()),
        Some(t) => Err(ConfigError::Invalid {
            file: file.to_path_buf(),
            field: format!("tables.{}.format.reader", t.name),
            reason: "a table read by a source-reader plugin runs in embedded tasks only: run the job without --external-workers (a reader's component does not travel to worker processes yet)".to_string(),
        }),
    }
}
