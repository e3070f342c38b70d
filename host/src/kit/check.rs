//! What every contract check of `coordhost plugin test` is made of, for
//! every plugin kind: a named [`Check`] with its [`Outcome`], the [`check`]
//! runner, and how a failed call reads in a verdict ([`answer_case`],
//! [`said`]). The checks themselves are per kind: [`super::conformance`]
//! (split enumerators, shuffle masters) and [`super::function_checks`]
//! (scalar functions).

use crate::plugin::{PluginError, PluginFailure};

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The plugin did what the contract says.
    Passed,
    /// The check does not apply to this plugin; the reason says why.
    NotApplicable(String),
    /// The plugin broke the contract; the message says how.
    Failed(String),
}

/// One named check and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Kebab-case name, e.g. `batch-snapshot-restore`.
    pub name: &'static str,
    /// What the check asks of the plugin, in one line.
    pub about: &'static str,
    /// Its outcome.
    pub outcome: Outcome,
}

pub(crate) type CheckFn<'a> = Box<dyn FnOnce() -> Result<Option<String>, String> + 'a>;

/// Runs `body`: `Ok(None)` passed, `Ok(Some(why))` not applicable, `Err` failed.
pub(crate) fn check(name: &'static str, about: &'static str, body: CheckFn<'_>) -> Check {
    let outcome = match body() {
        Ok(None) => Outcome::Passed,
        Ok(Some(why)) => Outcome::NotApplicable(why),
        Err(why) => Outcome::Failed(why),
    };
    Check {
        name,
        about,
        outcome,
    }
}

/// Which answer a failed call gave, for a check that expects one error
/// case: the WIT `error` case (e.g. `` `other` ``) of an error value, or the
/// kind of fault otherwise.
pub(crate) fn answer_case(error: &PluginError) -> &'static str {
    match error {
        PluginError::Returned { error, .. } => match error {
            PluginFailure::InvalidConfig(_) => "`invalid-config`",
            PluginFailure::InvalidState(_) => "`invalid-state`",
            PluginFailure::Io(_) => "`io`",
            PluginFailure::CorruptSnapshot(_) => "`corrupt-snapshot`",
            PluginFailure::Other(_) => "`other`",
        },
        PluginError::Trap { .. } => "a trap",
        PluginError::Deadline { .. } => "a missed deadline",
        PluginError::MemoryCap { .. } => "the memory cap",
        _ => "no error value",
    }
}

/// A plugin error as the one line a failed check shows.
pub(crate) fn said(error: &PluginError) -> String {
    crate::plugin::one_line(&error.to_string(), 400)
}
