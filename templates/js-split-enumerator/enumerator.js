// `{{name}}`: a coordhost split enumerator in JavaScript (world `split-enumerator-plugin`
// of `wit/types.wit`), built into a WebAssembly component with componentize-js (build.mjs).
//
// It hands out numbered lines (`line-1`, `line-2`, ...) in `inline` splits and supports batch
// snapshots. Config keys (the `config` table of the plugin's entry in the job file):
// `lines` (number of lines, default 10) and `lines-per-split` (default 3). Split `split-<i>`
// holds lines `i * lines-per-split + 1` onwards. The host keeps the history of which split
// went to which reader; this plugin keeps (and snapshots) only the splits not yet handed out.
//
// Snapshot format, version 1: the text `v1`, then one line per unassigned split id, in
// hand-out order. A new layout gets a new version, and `restore` keeps reading the old ones.
//
// Binding conventions of componentize-js: WIT names become camelCase; a resource is a class,
// its static functions are static methods; `u64`/`s64` are BigInt, `u32` a Number; a variant
// is `{ tag: 'kebab-name', val }`; a function returning `result<T, error>` returns T for `ok`
// and throws for `err` (the thrown object's `payload` is the error variant).

import { assignSplits, signalNoMoreSplits } from 'coordhost:plugin/enumerator-context@{{wit_version}}';
import { log } from 'coordhost:plugin/host-log@{{wit_version}}';

/** The first line of every snapshot this code writes. */
const SNAPSHOT_V1 = 'v1';

/** An expected failure: its `payload` becomes the `err` case of the WIT `result`. */
class PluginError extends Error {
  constructor(tag, message) {
    super(`${tag}: ${message}`);
    this.payload = { tag, val: message };
  }
}

/** A positive whole number from the config; throws `invalid-config` naming `key`. */
function number(values, key, fallback) {
  const raw = values.get(key);
  if (raw === undefined) return fallback;
  const value = /^[0-9]+$/.test(raw.trim()) ? Number(raw.trim()) : 0;
  if (!(value > 0) || !Number.isSafeInteger(value)) {
    throw new PluginError('invalid-config', `${key}: "${raw}" is not a positive whole number`);
  }
  return value;
}

/** Every split, in order: what a fresh enumerator discovers. */
function allSplits(config) {
  const values = new Map(config);
  const lines = number(values, 'lines', 10);
  const perSplit = number(values, 'lines-per-split', 3);
  const splits = [];
  for (let first = 1, index = 0; first <= lines; first += perSplit, index += 1) {
    const text = [];
    for (let n = first; n <= Math.min(first + perSplit - 1, lines); n += 1) text.push(`line-${n}`);
    splits.push({ id: `split-${index}`, payload: { tag: 'inline', val: text.join('\n') } });
  }
  return splits;
}

/** One enumerator; the host creates one per source job vertex. */
class Enumerator {
  constructor(splits, unassigned, restored) {
    this.splits = splits;
    /** Splits not handed out yet: the only state a snapshot keeps. */
    this.unassigned = unassigned;
    /** Restored from a snapshot: `start` must not discover splits again. */
    this.restored = restored;
    this.started = false;
  }

  /** WIT `create`: a fresh enumerator; throws `invalid-config` on a bad config. */
  static create(config, _parallelism) {
    return new Enumerator(allSplits(config), [], false);
  }

  /** WIT `restore`: an enumerator from `snapshotState` bytes; throws `corrupt-snapshot`. */
  static restore(config, _parallelism, snapshot) {
    const splits = allSplits(config);
    let lines;
    try {
      lines = new TextDecoder('utf-8', { fatal: true }).decode(snapshot).split('\n');
    } catch (_error) {
      throw new PluginError('corrupt-snapshot', '{{name}} snapshot: not UTF-8');
    }
    if (lines[0] !== SNAPSHOT_V1) {
      throw new PluginError('corrupt-snapshot', `{{name}} snapshot: unknown version "${lines[0]}"`);
    }
    const unassigned = lines.slice(1).map((id) => {
      const split = splits.find((s) => s.id === id);
      if (split === undefined) throw new PluginError('corrupt-snapshot', `{{name}} snapshot: unknown split "${id}"`);
      return split;
    });
    return new Enumerator(splits, unassigned, true);
  }

  /** WIT `start`: discovers the splits, unless restored (a snapshot says what is left). */
  start() {
    if (this.started) throw new PluginError('invalid-state', 'start was already called');
    this.started = true;
    if (!this.restored) this.unassigned = [...this.splits];
    log('info', `${this.unassigned.length} splits to hand out`);
  }

  /** WIT `handle-split-request`: the next split for `subtask`, or "no more splits". */
  handleSplitRequest(subtask, _hostname) {
    if (this.unassigned.length > 0) {
      assignSplits([[subtask, [this.unassigned.shift()]]]);
    } else {
      signalNoMoreSplits(subtask);
    }
  }

  /** WIT `add-splits-back`: a reset subtask's splits come first, in the order given. */
  addSplitsBack(splits, _subtask) {
    this.unassigned.unshift(...splits);
  }

  /** WIT `add-reader`: nothing to do, splits are handed out on request. */
  addReader(_subtask) {}

  /** WIT `supports-batch-snapshot` (static): yes, the state is the unassigned split ids. */
  static supportsBatchSnapshot() {
    return true;
  }

  /** WIT `snapshot-state`: `v1`, then the unassigned split ids, one a line. */
  snapshotState(_checkpointId) {
    return new TextEncoder().encode([SNAPSHOT_V1, ...this.unassigned.map((s) => s.id)].join('\n'));
  }

  /** WIT `unassigned-splits`: a BigInt (`u64`). */
  unassignedSplits() {
    return BigInt(this.unassigned.length);
  }
}

/** The exported interface `coordhost:plugin/split-enumerator@{{wit_version}}`. */
export const splitEnumerator = { Enumerator };
