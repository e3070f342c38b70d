//! The hash aggregate of the `aggregate` operator, over record batches.
//!
//! Rows are grouped by the text of their key cells
//! ([`crate::value::cell_text`]); each group keeps one accumulator per
//! aggregate in columns indexed by group (counts as `i64`, numbers as
//! `i128` millionths: exact, so results do not depend on the order rows
//! arrive in). Memory is bounded by the number of groups, not by the input:
//! a group holds its key (text and typed value) and its accumulators,
//! nothing of the rows that made it. Groups are emitted when the input
//! ends, in the order of their first row, as batches of at most
//! [`BATCH_ROWS`] rows: key columns (the type they came in), then per
//! aggregate an `Int64` count or a `Decimal128(38, s)` value — `s` = 6 for
//! the state columns of `partial`, `decimals` for final values.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int64Array, UInt32Array};
use arrow_schema::DataType;

use crate::graph::{AggFunction, AggMode, Aggregate};
use crate::value::cells::batch_of;
use crate::value::cells::{self, NotANumber};
use crate::value::{BATCH_ROWS, write_cell_text};
use arrow_array::RecordBatch;

/// Digits after the point of the accumulators and of partial state columns.
const STATE_SCALE: u32 = 6;
/// Most pieces the typed key values of the groups are kept in before they
/// are joined into one column.
const MAX_KEY_PARTS: usize = 64;
/// `10^STATE_SCALE`.
const STATE_UNIT: i128 = 1_000_000;

/// One aggregate's accumulators, one entry per group.
enum Acc {
    Count(Vec<i64>),
    Sum(Vec<i128>),
    Min(Vec<i128>),
    Max(Vec<i128>),
    Avg(Vec<i128>, Vec<i64>),
}

impl Acc {
    fn new(f: AggFunction) -> Self {
        match f {
            AggFunction::Count => Acc::Count(Vec::new()),
            AggFunction::Sum => Acc::Sum(Vec::new()),
            AggFunction::Min => Acc::Min(Vec::new()),
            AggFunction::Max => Acc::Max(Vec::new()),
            AggFunction::Avg => Acc::Avg(Vec::new(), Vec::new()),
        }
    }

    /// Makes room for `groups` groups (new ones start empty).
    fn grow(&mut self, groups: usize) {
        match self {
            Acc::Count(c) => c.resize(groups, 0),
            Acc::Sum(s) => s.resize(groups, 0),
            Acc::Min(m) => m.resize(groups, i128::MAX),
            Acc::Max(m) => m.resize(groups, i128::MIN),
            Acc::Avg(s, c) => {
                s.resize(groups, 0);
                c.resize(groups, 0);
            }
        }
    }
}

/// A column an aggregate reads, as numbers.
enum Input<'a> {
    None,
    /// Shared by the aggregates that read the same column.
    Numbers(Rc<Vec<i128>>),
    Counts(std::borrow::Cow<'a, [i64]>),
}

/// A value column read as numbers, or its first bad cell.
type Parsed = Result<Rc<Vec<i128>>, NotANumber>;

/// FxHash (rustc's): a fast hash for the group table, whose keys come from
/// the job's data, not from an adversary that could aim at collisions
/// inside one task.
#[derive(Default)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().unwrap_or_default());
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The state of one `aggregate` operator of a chain.
pub(super) struct AggState {
    key: Vec<usize>,
    aggregates: Vec<Aggregate>,
    mode: AggMode,
    decimals: u32,
    /// Encoded key texts → group number (order of first appearance).
    groups: HashMap<Box<[u8]>, u32, BuildHasherDefault<FxHasher>>,
    /// Per key column: the typed key values of the groups, in group order.
    keys: Vec<Vec<ArrayRef>>,
    accs: Vec<Acc>,
    /// Scratch: the encoded key of one row, and a cell's text.
    key_buf: Vec<u8>,
    text: String,
}

impl AggState {
    pub(super) fn new(
        key: Vec<usize>,
        aggregates: Vec<Aggregate>,
        mode: AggMode,
        decimals: u32,
    ) -> Self {
        let accs = aggregates.iter().map(|a| Acc::new(a.function)).collect();
        Self {
            keys: vec![Vec::new(); key.len()],
            key,
            aggregates,
            mode,
            decimals,
            groups: HashMap::default(),
            accs,
            key_buf: Vec::new(),
            text: String::new(),
        }
    }

    /// Adds the rows of `batch`.
    ///
    /// # Errors
    ///
    /// The message for the first row whose value is not a number (or, in
    /// `final` mode, whose count is not a count).
    pub(super) fn add(&mut self, batch: &RecordBatch) -> Result<(), String> {
        let inputs = self.inputs(batch)?;
        let group = self.group_rows(batch);
        let fin = self.mode == AggMode::Final;
        for (acc, input) in self.accs.iter_mut().zip(&inputs) {
            let (values, counts) = input;
            match acc {
                Acc::Count(c) => match counts {
                    Input::Counts(n) if fin => {
                        for (&g, &n) in group.iter().zip(n.iter()) {
                            c[g as usize] += n;
                        }
                    }
                    _ => {
                        for &g in &group {
                            c[g as usize] += 1;
                        }
                    }
                },
                Acc::Sum(s) => {
                    for (&g, &v) in group.iter().zip(numbers(values)) {
                        s[g as usize] += v;
                    }
                }
                Acc::Min(m) => {
                    for (&g, &v) in group.iter().zip(numbers(values)) {
                        let m = &mut m[g as usize];
                        *m = (*m).min(v);
                    }
                }
                Acc::Max(m) => {
                    for (&g, &v) in group.iter().zip(numbers(values)) {
                        let m = &mut m[g as usize];
                        *m = (*m).max(v);
                    }
                }
                Acc::Avg(s, c) => {
                    for (&g, &v) in group.iter().zip(numbers(values)) {
                        s[g as usize] += v;
                    }
                    match counts {
                        Input::Counts(n) if fin => {
                            for (&g, &n) in group.iter().zip(n.iter()) {
                                c[g as usize] += n;
                            }
                        }
                        _ => {
                            for &g in &group {
                                c[g as usize] += 1;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Every aggregate's input columns as numbers: (value column, count
    /// column). On bad values, the message of the earliest row (the
    /// aggregates' order within a row, as a row-at-a-time reading meets them).
    fn inputs<'b>(&self, batch: &'b RecordBatch) -> Result<Vec<(Input<'b>, Input<'b>)>, String> {
        let fin = self.mode == AggMode::Final;
        let mut first: Option<(usize, String)> = None;
        let mut note = |e: NotANumber, what: &str| {
            if first.as_ref().is_none_or(|(row, _)| e.row < *row) {
                first = Some((e.row, format!("aggregate: `{}` is not a {what}", e.text)));
            }
        };
        let mut out = Vec::with_capacity(self.aggregates.len());
        // Each column parsed once, however many aggregates read it.
        let mut parsed: Vec<(usize, Parsed)> = Vec::new();
        for a in &self.aggregates {
            let mut num = |i: usize| -> Parsed {
                if let Some((_, r)) = parsed.iter().find(|(c, _)| *c == i) {
                    return r.clone();
                }
                let r = cells::decimal_column(batch.column(i).as_ref(), STATE_SCALE).map(Rc::new);
                parsed.push((i, r.clone()));
                r
            };
            let count = |i: usize| cells::count_column(batch.column(i).as_ref());
            let (mut values, mut counts) = (Input::None, Input::None);
            match a.function {
                AggFunction::Count if fin => match count(a.inputs[0]) {
                    Ok(c) => counts = Input::Counts(c),
                    Err(e) => note(e, "count"),
                },
                AggFunction::Count => {}
                AggFunction::Sum | AggFunction::Min | AggFunction::Max => match num(a.inputs[0]) {
                    Ok(v) => values = Input::Numbers(v),
                    Err(e) => note(e, "number"),
                },
                AggFunction::Avg => {
                    match num(a.inputs[0]) {
                        Ok(v) => values = Input::Numbers(v),
                        Err(e) => note(e, "number"),
                    }
                    if fin {
                        match count(a.inputs[1]) {
                            Ok(c) => counts = Input::Counts(c),
                            Err(e) => note(e, "count"),
                        }
                    }
                }
            }
            out.push((values, counts));
        }
        match first {
            Some((_, message)) => Err(message),
            None => Ok(out),
        }
    }

    /// The group number of every row of `batch`; new groups get their
    /// accumulators and their typed key values.
    fn group_rows(&mut self, batch: &RecordBatch) -> Vec<u32> {
        let n = batch.num_rows();
        let before = self.groups.len();
        let mut group = Vec::with_capacity(n);
        let mut new_rows: Vec<u32> = Vec::new();
        let columns: Vec<&dyn Array> = self.key.iter().map(|&k| batch.column(k).as_ref()).collect();
        for row in 0..n {
            self.key_buf.clear();
            for (i, col) in columns.iter().enumerate() {
                let bytes: &[u8] = if col.data_type() == &DataType::Utf8 && !col.is_null(row) {
                    col.as_string::<i32>().value(row).as_bytes()
                } else {
                    self.text.clear();
                    write_cell_text(*col, row, &mut self.text);
                    self.text.as_bytes()
                };
                if columns.len() > 1 && i + 1 < columns.len() {
                    // Length-prefixed, so ("a", "bc") and ("ab", "c") differ.
                    self.key_buf
                        .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                }
                self.key_buf.extend_from_slice(bytes);
            }
            let g = match self.groups.get(self.key_buf.as_slice()) {
                Some(&g) => g,
                None => {
                    let g = self.groups.len() as u32;
                    self.groups.insert(self.key_buf.as_slice().into(), g);
                    new_rows.push(row as u32);
                    g
                }
            };
            group.push(g);
        }
        if !new_rows.is_empty() {
            let rows = UInt32Array::from(new_rows);
            for (keys, col) in self.keys.iter_mut().zip(&columns) {
                let taken = arrow_select::take::take(*col, &rows, None)
                    .expect("row numbers inside the batch");
                keys.push(taken);
                if keys.len() >= MAX_KEY_PARTS {
                    // One column again: what a group costs stays bounded
                    // however many batches brought new groups.
                    let one = concat_keys(keys);
                    *keys = vec![one];
                }
            }
            let groups = self.groups.len();
            debug_assert!(groups > before);
            for acc in &mut self.accs {
                acc.grow(groups);
            }
        }
        group
    }

    /// Ends the input: the groups as batches, in order of first appearance.
    ///
    /// # Errors
    ///
    /// The message for an `avg` whose rows count up to 0 (only possible
    /// from `final` state columns with a count of 0).
    pub(super) fn drain(&mut self) -> Result<Vec<RecordBatch>, String> {
        let groups = self.groups.len();
        self.groups = HashMap::default();
        if groups == 0 {
            return Ok(Vec::new());
        }
        let mut columns: Vec<ArrayRef> = Vec::new();
        for parts in std::mem::take(&mut self.keys) {
            columns.push(concat_keys(&parts));
        }
        let d = self.decimals.min(STATE_SCALE);
        let unit = 10i128.pow(STATE_SCALE - d);
        let partial = self.mode == AggMode::Partial;
        for acc in std::mem::take(&mut self.accs) {
            match acc {
                Acc::Count(c) => columns.push(Arc::new(Int64Array::from(c))),
                Acc::Sum(v) | Acc::Min(v) | Acc::Max(v) if partial => {
                    columns.push(Arc::new(cells::decimal_array(v, STATE_SCALE as i8)));
                }
                Acc::Sum(v) | Acc::Min(v) | Acc::Max(v) => {
                    let v = v.into_iter().map(|x| cells::div_round(x, unit)).collect();
                    columns.push(Arc::new(cells::decimal_array(v, d as i8)));
                }
                Acc::Avg(s, c) if partial => {
                    columns.push(Arc::new(cells::decimal_array(s, STATE_SCALE as i8)));
                    columns.push(Arc::new(Int64Array::from(c)));
                }
                Acc::Avg(s, c) => {
                    let mut v = Vec::with_capacity(s.len());
                    for (s, c) in s.into_iter().zip(c) {
                        if c == 0 {
                            return Err("aggregate: an average over 0 rows".to_string());
                        }
                        let num = s * 10i128.pow(d);
                        v.push(cells::div_round_signed(num, i128::from(c) * STATE_UNIT));
                    }
                    columns.push(Arc::new(cells::decimal_array(v, d as i8)));
                }
            }
        }
        for a in &self.aggregates {
            self.accs.push(Acc::new(a.function));
        }
        self.keys = vec![Vec::new(); self.key.len()];
        let all = batch_of(columns);
        Ok((0..groups)
            .step_by(BATCH_ROWS)
            .map(|at| all.slice(at, BATCH_ROWS.min(groups - at)))
            .collect())
    }
}

fn numbers<'a>(input: &'a Input<'_>) -> &'a [i128] {
    match input {
        Input::Numbers(v) => v,
        _ => &[],
    }
}

/// The key values of every group as one column: their common type, or
/// their text (`Utf8`) when batches brought one key in different types.
fn concat_keys(parts: &[ArrayRef]) -> ArrayRef {
    let refs: Vec<&dyn Array> = parts.iter().map(AsRef::as_ref).collect();
    let same = refs
        .windows(2)
        .all(|w| w[0].data_type() == w[1].data_type());
    if same && let Ok(a) = arrow_select::concat::concat(&refs) {
        return a;
    }
    let mut b = StringBuilder::new();
    let mut text = String::new();
    for part in refs {
        for row in 0..part.len() {
            text.clear();
            write_cell_text(part, row, &mut text);
            b.append_value(&text);
        }
    }
    Arc::new(b.finish())
}
