//! The ground floor: plain value types that every layer may use and that
//! import nothing of the crate (docs/architecture.md).
//!
//! - [`Decimal`]: exact fixed-point numbers of filters and aggregates (the
//!   job graph's constants, the runtime's sums);
//! - [`SplitData`] / [`SplitPayloadData`]: a split as the host keeps it
//!   (source coordinators, source tasks, batch snapshots in the log).

mod decimal;
mod split;

pub use decimal::Decimal;
pub use split::{SplitData, SplitPayloadData};
