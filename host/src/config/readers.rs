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
//!
//! Such a table is read in embedded tasks and on worker processes alike:
//! a worker fetches the reader's component by the SHA-256 computed here
//! (docs/workers.md, "Plugin components on workers").

use std::collections::BTreeMap;

use sha2::Digest;

use super::ConfigError;
use super::validate::Validator;
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
