//! `{{name}}`: a coordhost split enumerator (world `split-enumerator-plugin`
//! of `wit/types.wit`) that supports batch snapshots.
//!
//! It hands out numbered lines (`line-1`, `line-2`, ...) in `inline` splits.
//! Config keys (the `config` table of the plugin's entry in the job file):
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `lines` | number of lines | 10 |
//! | `lines-per-split` | lines in one split | 3 |
//!
//! Split `split-<i>` holds lines `i * lines-per-split + 1` onwards. The host
//! keeps the history of which split went to which reader; this plugin keeps
//! (and snapshots) only the splits not yet handed out.
//!
//! Snapshot format, version 1: the text `v1`, then one line per unassigned
//! split id, in hand-out order. A new layout gets a new version, and
//! `restore` keeps reading the old ones (a snapshot outlives the plugin
//! build that wrote it).

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "split-enumerator-plugin",
    });
}

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use bindings::coordhost::plugin::types::{Error, LogLevel, Split, SplitPayload};
use bindings::coordhost::plugin::{enumerator_context, host_log};
use bindings::exports::coordhost::plugin::split_enumerator::{Enumerator, Guest, GuestEnumerator};

/// The first line of every snapshot this code writes.
const SNAPSHOT_V1: &str = "v1";

/// The component: what `export!` binds the exported interface to.
struct Component;

impl Guest for Component {
    type Enumerator = NumberedLines;
}

/// The settings read from the config.
struct Settings {
    lines: u64,
    lines_per_split: u64,
}

impl Settings {
    fn from_config(config: &[(String, String)]) -> Result<Self, Error> {
        let number = |key: &str, default: u64| -> Result<u64, Error> {
            match config.iter().rev().find(|(k, _)| k == key) {
                None => Ok(default),
                Some((_, v)) => v.trim().parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    Error::InvalidConfig(format!("{key}: `{v}` is not a positive whole number"))
                }),
            }
        };
        Ok(Self {
            lines: number("lines", 10)?,
            lines_per_split: number("lines-per-split", 3)?,
        })
    }

    /// Every split, in order: what a fresh enumerator discovers.
    fn splits(&self) -> Vec<Split> {
        let count = self.lines.div_ceil(self.lines_per_split);
        (0..count)
            .map(|i| {
                let first = i * self.lines_per_split + 1;
                let last = (first + self.lines_per_split - 1).min(self.lines);
                let text: Vec<String> = (first..=last).map(|n| format!("line-{n}")).collect();
                Split {
                    id: format!("split-{i}"),
                    payload: SplitPayload::Inline(text.join("\n")),
                }
            })
            .collect()
    }
}

/// One enumerator instance; the host creates one per source job vertex.
/// WIT methods take `&self`, so the state sits in cells.
pub struct NumberedLines {
    settings: Settings,
    /// Splits not handed out yet: the only state a snapshot keeps.
    unassigned: RefCell<VecDeque<Split>>,
    /// Restored from a snapshot: `start` must not discover splits again.
    restored: bool,
    started: Cell<bool>,
}

impl GuestEnumerator for NumberedLines {
    fn create(config: Vec<(String, String)>, _parallelism: u32) -> Result<Enumerator, Error> {
        let settings = Settings::from_config(&config)?;
        // The line newcomers cannot guess: the generated `Enumerator::new`
        // wraps our type into the WIT resource handle.
        Ok(Enumerator::new(NumberedLines {
            settings,
            unassigned: RefCell::new(VecDeque::new()),
            restored: false,
            started: Cell::new(false),
        }))
    }

    fn restore(
        config: Vec<(String, String)>,
        _parallelism: u32,
        snapshot: Vec<u8>,
    ) -> Result<Enumerator, Error> {
        let settings = Settings::from_config(&config)?;
        let corrupt = |why: &str| Error::CorruptSnapshot(format!("{{name}} snapshot: {why}"));
        let text = String::from_utf8(snapshot).map_err(|_| corrupt("not UTF-8"))?;
        let mut lines = text.lines();
        match lines.next() {
            Some(SNAPSHOT_V1) => {}
            Some(other) => return Err(corrupt(&format!("unknown version `{other}`"))),
            None => return Err(corrupt("empty")),
        }
        let all = settings.splits();
        let mut unassigned = VecDeque::new();
        for id in lines {
            let split = all
                .iter()
                .find(|s| s.id == id)
                .ok_or_else(|| corrupt(&format!("unknown split `{id}`")))?;
            unassigned.push_back(split.clone());
        }
        Ok(Enumerator::new(NumberedLines {
            settings,
            unassigned: RefCell::new(unassigned),
            restored: true,
            started: Cell::new(false),
        }))
    }

    fn start(&self) -> Result<(), Error> {
        if self.started.replace(true) {
            return Err(Error::InvalidState("start was already called".into()));
        }
        // After `restore` the snapshot already says what is left: splits
        // that were handed out belong to the host's history, never again here.
        if !self.restored {
            self.unassigned.borrow_mut().extend(self.settings.splits());
        }
        host_log::log(
            LogLevel::Info,
            &format!("{} splits to hand out", self.unassigned.borrow().len()),
        );
        Ok(())
    }

    fn handle_split_request(&self, subtask: u32, _hostname: Option<String>) -> Result<(), Error> {
        let next = self.unassigned.borrow_mut().pop_front();
        match next {
            Some(split) => enumerator_context::assign_splits(&[(subtask, vec![split])]),
            None => enumerator_context::signal_no_more_splits(subtask),
        }
        Ok(())
    }

    fn add_splits_back(&self, splits: Vec<Split>, _subtask: u32) -> Result<(), Error> {
        // A reset subtask's splits come first, in the order given.
        let mut unassigned = self.unassigned.borrow_mut();
        for split in splits.into_iter().rev() {
            unassigned.push_front(split);
        }
        Ok(())
    }

    fn add_reader(&self, _subtask: u32) -> Result<(), Error> {
        // Splits are handed out on request; nothing to do.
        Ok(())
    }

    fn supports_batch_snapshot() -> bool {
        true
    }

    fn snapshot_state(&self, _checkpoint_id: i64) -> Result<Vec<u8>, Error> {
        let mut text = String::from(SNAPSHOT_V1);
        for split in self.unassigned.borrow().iter() {
            text.push('\n');
            text.push_str(&split.id);
        }
        Ok(text.into_bytes())
    }

    fn unassigned_splits(&self) -> u64 {
        self.unassigned.borrow().len() as u64
    }
}

bindings::export!(Component with_types_in bindings);
