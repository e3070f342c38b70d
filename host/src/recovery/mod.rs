//! Job recovery after a coordinator crash (FLIP-383): the decision is the
//! `coordhost-core` crate's ([`recover`], docs/recovery.md's numbered
//! steps, re-exported here under the same names); this module adds what a
//! real run asks: [`ShuffleOracle`], the shuffle master plugin polled until
//! every needed partition is reported or the previous-worker timeout
//! passes. Recovery never imports the scheduler (docs/architecture.md).

pub use coordhost_core::recovery::*;

mod oracle;

pub use oracle::ShuffleOracle;

#[cfg(test)]
mod tests;
