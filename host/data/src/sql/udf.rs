//! Scalar functions of a SQL job (`[functions.NAME]`, docs/sql.md) as
//! DataFusion `ScalarUDF`s.
//!
//! This module knows the function by its name, its signature and a
//! [`ScalarCallee`] that computes one batch; what the callee is (a Wasm
//! component, `coordhost_wasm`) is decided a floor up: where the job file
//! is loaded (the coordinator's embedded tasks), or by a worker process
//! that fetched the component by its hash (`coordhost::remote`). In a stage plan (`datafusion-proto`) a function is written by
//! name only; a task that decodes the plan looks the name up in the
//! functions of its job ([`FunctionSet`]) and fails naming the function
//! when its process has none of that name.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_schema::DataType;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// What computes a scalar function, one record batch at a time.
pub trait ScalarCallee: Send + Sync + fmt::Debug {
    /// Computes the result column of one batch: `arguments` hold one
    /// column per declared argument (of the declared types), each `rows`
    /// long. Blocks the calling thread until the call ends (a callee
    /// bounds its own time).
    ///
    /// # Errors
    ///
    /// One line naming the function, its component and the call: a fault
    /// in the function, its error value, or an answer of the wrong type or
    /// length.
    fn call(&self, arguments: &[ArrayRef], rows: usize) -> Result<ArrayRef, String>;
}

/// One `[functions.NAME]` of a SQL job, ready to be planned and called.
#[derive(Clone)]
pub struct SqlFunction {
    /// The name SQL calls it by (lowercase: SQL folds unquoted names).
    pub name: String,
    /// Argument types, in call order.
    pub arguments: Vec<DataType>,
    /// Result type.
    pub returns: DataType,
    /// Hex SHA-256 of the component's bytes: a rerun whose function
    /// changed is a changed job (the job fingerprint covers it).
    pub sha256: String,
    /// Computes it.
    pub callee: Arc<dyn ScalarCallee>,
}

impl fmt::Debug for SqlFunction {
    /// Name, types and hash: what the job fingerprint covers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlFunction")
            .field("name", &self.name)
            .field("arguments", &self.arguments)
            .field("returns", &self.returns)
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl PartialEq for SqlFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.arguments == other.arguments
            && self.returns == other.returns
            && self.sha256 == other.sha256
    }
}

impl Eq for SqlFunction {}

/// The scalar functions of one job, by name (the job file's order).
pub type FunctionSet = Arc<[SqlFunction]>;

/// A [`SqlFunction`] as DataFusion sees it: `Immutable` (coordhost loads
/// only functions that declare themselves deterministic), an exact
/// signature (DataFusion casts the arguments to the declared types).
#[derive(Debug)]
pub(super) struct WasmUdf {
    function: SqlFunction,
    signature: Signature,
}

impl PartialEq for WasmUdf {
    fn eq(&self, other: &Self) -> bool {
        self.function == other.function
    }
}

impl Eq for WasmUdf {}

impl Hash for WasmUdf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.function.name.hash(state);
        self.function.sha256.hash(state);
    }
}

impl WasmUdf {
    pub(super) fn udf(function: &SqlFunction) -> ScalarUDF {
        ScalarUDF::new_from_impl(Self {
            signature: Signature::exact(function.arguments.clone(), Volatility::Immutable),
            function: function.clone(),
        })
    }
}

impl ScalarUDFImpl for WasmUdf {
    fn name(&self) -> &str {
        &self.function.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(self.function.returns.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        if rows == 0 {
            return Ok(ColumnarValue::Array(arrow_array::new_empty_array(
                &self.function.returns,
            )));
        }
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<DfResult<Vec<_>>>()?;
        self.function
            .callee
            .call(&arrays, rows)
            .map(ColumnarValue::Array)
            .map_err(DataFusionError::Execution)
    }
}

/// Whether `udf` is one of the job's functions (written by name in a plan).
pub(super) fn is_job_function(udf: &ScalarUDF) -> bool {
    let any: &dyn std::any::Any = udf.inner().as_ref();
    any.downcast_ref::<WasmUdf>().is_some()
}

/// The job function `name` of `functions` as a `ScalarUDF`.
///
/// # Errors
///
/// A plan error naming the function when `functions` has none of that
/// name (a process that does not have the job's functions).
pub(super) fn decode(functions: &[SqlFunction], name: &str) -> DfResult<Arc<ScalarUDF>> {
    functions
        .iter()
        .find(|f| f.name == name)
        .map(|f| Arc::new(WasmUdf::udf(f)))
        .ok_or_else(|| {
            DataFusionError::Plan(format!(
                "the stage calls scalar function `{name}`, which this process was not given \
                 (declared as [functions.{name}] in the job file)"
            ))
        })
}
