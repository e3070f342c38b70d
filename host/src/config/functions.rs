//! `[functions.NAME]` of a SQL job (docs/sql.md, "Scalar functions"): each
//! a scalar-function plugin (`crate::plugin`, WIT `coordhost:function`),
//! loaded while the job file is checked because the planner needs its
//! signature, and bound to the planner's [`ScalarCallee`].
//!
//! Refused with exit 2, naming the field: a name SQL cannot call, a
//! component that does not load as a scalar function (missing, not a
//! component, another world or version), a configuration the function
//! refuses, a signature with a type Arrow has not, and a function that
//! declares itself non-deterministic (recovery re-runs tasks, and a re-run
//! must give the rows the first run gave).

use std::sync::Arc;

use arrow_array::ArrayRef;
use sha2::Digest;

use super::ConfigError;
use super::raw::{RawFunction, RawPlugin};
use super::validate::Validator;
use crate::plugin::{HostOptions, PluginError, PluginHost, PluginKind, PluginSpec, ScalarFunction};
use crate::sql::{FunctionSet, ScalarCallee, SqlFunction};

/// A loaded scalar-function plugin as the planner calls it.
struct WasmCallee {
    function: Arc<ScalarFunction>,
    /// The component file, for messages.
    component: String,
}

impl std::fmt::Debug for WasmCallee {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmCallee")
            .field("function", &self.function.plugin().name())
            .field("component", &self.component)
            .finish()
    }
}

impl ScalarCallee for WasmCallee {
    fn call(&self, arguments: &[ArrayRef], rows: usize) -> Result<ArrayRef, String> {
        self.function.call(arguments, rows).map_err(|e| {
            format!(
                "scalar function `{}` (component {}), a batch of {rows} rows: {e}",
                self.function.plugin().name(),
                self.component
            )
        })
    }
}

impl Validator {
    /// Loads every `[functions.NAME]` of a SQL job: the functions and,
    /// in the same order, their plugin settings.
    pub(super) fn functions(
        &self,
        raw: toml::Table,
    ) -> Result<(FunctionSet, Vec<PluginSpec>), ConfigError> {
        if raw.is_empty() {
            return Ok((FunctionSet::default(), Vec::new()));
        }
        // Through the cache only when it exists: the cache folder is the
        // run's to create, after the job file is checked (docs/job-file.md).
        let host = PluginHost::new(HostOptions {
            cache_dir: self.cache_dir.clone(),
        })
        .map_err(|e| self.invalid("functions", e.to_string()))?;
        let mut out = Vec::with_capacity(raw.len());
        let mut specs = Vec::with_capacity(raw.len());
        for (name, value) in raw {
            let (function, spec) = self.function(&host, &name, value)?;
            out.push(function);
            specs.push(spec);
        }
        Ok((out.into(), specs))
    }

    fn function(
        &self,
        host: &PluginHost,
        name: &str,
        value: toml::Value,
    ) -> Result<(SqlFunction, PluginSpec), ConfigError> {
        let field = format!("functions.{name}");
        if !name.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(self.invalid(
                &field,
                "a function name starts with a lower-case letter or `_` and uses only lower-case letters, digits and `_` (SQL folds unquoted names to lower case)",
            ));
        }
        let rf: RawFunction = self.typed(&field, value)?;
        let raw = RawPlugin {
            component: rf.component,
            kind: "scalar-function".to_string(),
            config: rf.config,
            dirs: rf.dirs,
            stores: Vec::new(),
            limits: rf.limits,
        };
        let spec = self.plugin_at(&field, name, raw, PluginKind::ScalarFunction)?;
        let loaded = host
            .load(&spec)
            .map_err(|e| self.invalid(load_field(&field, &e), e.to_string()))?;
        let function = loaded
            .scalar_function()
            .map_err(|e| self.invalid(format!("{field}.component"), e.to_string()))?;
        let sig = function.signature().clone();
        if !sig.deterministic {
            return Err(self.invalid(
                &field,
                format!(
                    "function `{name}` (plugin component {}) declares itself non-deterministic; \
                     coordhost refuses it: recovery re-runs tasks, and a re-run must give the rows the first run gave",
                    spec.path.display()
                ),
            ));
        }
        let sql = SqlFunction {
            name: name.to_string(),
            arguments: sig.arguments,
            returns: sig.returns,
            sha256: self.component_sha256(&field, &spec)?,
            callee: Arc::new(WasmCallee {
                function,
                component: spec.path.display().to_string(),
            }),
        };
        Ok((sql, spec))
    }

    fn component_sha256(&self, field: &str, spec: &PluginSpec) -> Result<String, ConfigError> {
        let bytes = crate::files::read_regular_file(&spec.path, crate::files::MAX_COMPONENT_BYTES)
            .map_err(|e| {
                self.invalid(
                    format!("{field}.component"),
                    format!("cannot read {}: {e}", spec.path.display()),
                )
            })?;
        Ok(sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())
    }
}

/// The field a load error is about.
fn load_field(field: &str, e: &PluginError) -> String {
    match e {
        PluginError::Grant { .. } => format!("{field}.dirs"),
        PluginError::Returned { .. } => format!("{field}.config"),
        _ => format!("{field}.component"),
    }
}
