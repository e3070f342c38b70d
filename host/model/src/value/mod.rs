//! The ground floor: plain value types that every layer may use and that
//! import nothing of the crate (docs/architecture.md).
//!
//! - [`Decimal`]: exact fixed-point constants of the job graph (a numeric
//!   filter's value);
//! - [`SplitData`] / [`SplitPayloadData`]: a split as the host keeps it
//!   (source coordinators, source tasks, batch snapshots in the log);
//! - [`cells`]: the text of a cell of an Arrow record batch ([`cell_text`]),
//!   columns as exact numbers, and [`BATCH_ROWS`], the most rows of a batch.

pub mod cells;
mod decimal;
mod split;

pub use cells::{BATCH_ROWS, cell_text, write_cell_text};
pub use decimal::Decimal;
pub use split::{SplitData, SplitPayloadData};
