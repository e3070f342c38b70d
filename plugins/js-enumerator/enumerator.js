// A coordhost split enumerator in JavaScript, built into a WebAssembly component with
// componentize-js (see build.mjs). It exports `coordhost:plugin/split-enumerator@0.1.3`
// with the same behaviour as the Rust `file-enumerator` and the Python `py-enumerator`
// (Flink's `SplitEnumerator` with FLIP-383's `SupportsBatchSnapshot`):
//
// * config keys: `dir` (absolute path; the host grants it to the guest at the same path),
//   `split-bytes` (positive integer, default 1048576), `pattern` (optional file-name suffix);
//   any other key is refused (`invalid-config` naming it);
// * `start` lists `dir` (non-recursive, regular files only, hidden files skipped, sorted by
//   name) and cuts every file into `file-range` splits of at most `split-bytes` bytes, with
//   ids `"<file name>:<index>"`; an empty file gives no split;
// * `start` is called once (a second call is `invalid-state`), before any split request;
// * `handleSplitRequest` hands ONE split to the asking subtask, or signals "no more splits";
//   a subtask index beyond the parallelism is `invalid-state` (also in `addReader`);
// * `addSplitsBack` puts the returned splits at the front of the queue, in the given order;
// * the batch snapshot is the unassigned queue plus a "started" flag, as JSON:
//
//     {"format":"coordhost-file-enumerator","version":1,"started":true,
//      "queue":[{"id":"a.txt:0","file-range":{"path":"/d/a.txt","start":0,"length":10}},
//               {"id":"x","inline":"line 1\nline 2"}]}
//
// Binding conventions of componentize-js (jco), as used below: WIT names become camelCase;
// a resource is a class, its static functions are static methods; `u64`/`s64` are BigInt,
// `u32` a Number; `option<string>` is a string or `undefined`; a variant is
// `{ tag: 'kebab-name', val }`; a function returning `result<T, error>` returns T for `ok`
// and throws for `err` (the thrown object's `payload`, or the thrown value itself, is the
// error variant). Imported WASI functions throw `{ payload: '<error-code>' }` the same way.

import { assignSplits, signalNoMoreSplits } from 'coordhost:plugin/enumerator-context@0.1.3';
import { log } from 'coordhost:plugin/host-log@0.1.3';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

/** Default size of one split in bytes (1 MiB), as in the Rust `file-enumerator`. */
const DEFAULT_SPLIT_BYTES = 1048576;
/** Value of the snapshot's `format` field. */
const SNAPSHOT_FORMAT = 'coordhost-file-enumerator';
/** Version of the snapshot layout this code writes and reads. */
const SNAPSHOT_VERSION = 1;
/** Largest value of a WIT `u64`. */
const U64_MAX = (1n << 64n) - 1n;

/**
 * An expected failure: componentize-js lowers the `payload` of a thrown object into the
 * `err` case of the WIT `result`.
 */
class PluginError extends Error {
  /**
   * @param {string} tag case of the WIT `error` variant, e.g. `'invalid-config'`
   * @param {string} message what went wrong, naming the key, path or state
   */
  constructor(tag, message) {
    super(`${tag}: ${message}`);
    this.payload = { tag, val: message };
  }
}

/** The text of an error thrown by an imported WASI function (an `error-code` name). */
function wasiErrorText(error) {
  if (error && error.payload !== undefined) return String(error.payload);
  return String(error);
}

/** Compares two strings by Unicode code points, as Rust and Python sort names. */
function compareCodePoints(a, b) {
  const left = Array.from(a, (c) => c.codePointAt(0));
  const right = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(left.length, right.length); i += 1) {
    if (left[i] !== right[i]) return left[i] - right[i];
  }
  return left.length - right.length;
}

/**
 * Parses the `config` list of key/value pairs.
 * @throws {PluginError} `invalid-config` naming the bad key
 */
function parseSettings(config) {
  const known = ['dir', 'split-bytes', 'pattern'];
  for (const [key] of config) {
    if (!known.includes(key)) {
      // A misspelt key would otherwise be ignored and its default used without a word.
      throw new PluginError(
        'invalid-config',
        `unknown config key \`${key}\` (this plugin reads: ${known.join(', ')})`,
      );
    }
  }
  const values = new Map(config);
  const dir = values.get('dir');
  if (dir === undefined || dir === '') {
    throw new PluginError('invalid-config', 'dir: missing; set it to an absolute directory path');
  }
  if (!dir.startsWith('/')) {
    throw new PluginError('invalid-config', `dir: "${dir}" is not an absolute path`);
  }
  const rawBytes = values.get('split-bytes') ?? String(DEFAULT_SPLIT_BYTES);
  const splitBytes = /^[0-9]+$/.test(rawBytes.trim()) ? BigInt(rawBytes.trim()) : 0n;
  if (splitBytes <= 0n || splitBytes > U64_MAX) {
    throw new PluginError('invalid-config', `split-bytes: "${rawBytes}" is not a positive integer`);
  }
  return { dir: dir.replace(/\/+$/, '') || '/', splitBytes, pattern: values.get('pattern') };
}

/**
 * Opens `dir` for reading through the preopened directories the host granted: the one
 * whose guest path equals `dir`, or else the longest one that contains it.
 * @throws {PluginError} `io` naming the directory
 */
function openDirectory(dir) {
  let best;
  for (const [descriptor, path] of getDirectories()) {
    const base = path.replace(/\/+$/, '') || '/';
    if (base === dir) return descriptor;
    const prefix = base === '/' ? '/' : `${base}/`;
    if (dir.startsWith(prefix) && (best === undefined || base.length > best.base.length)) {
      best = { descriptor, base, rest: dir.slice(prefix.length) };
    }
  }
  if (best === undefined) {
    throw new PluginError('io', `cannot list directory ${dir}: it was not granted to the plugin`);
  }
  try {
    return best.descriptor.openAt({ symlinkFollow: true }, best.rest, { directory: true }, { read: true });
  } catch (error) {
    throw new PluginError('io', `cannot list directory ${dir}: ${wasiErrorText(error)}`);
  }
}

/**
 * Lists the directory and cuts its files into splits.
 * @throws {PluginError} `io` naming the directory
 */
function listSplits(settings) {
  const directory = openDirectory(settings.dir);
  const files = [];
  try {
    const stream = directory.readDirectory();
    for (let entry = stream.readDirectoryEntry(); entry !== undefined; entry = stream.readDirectoryEntry()) {
      const { name } = entry;
      if (name.startsWith('.')) continue;
      if (settings.pattern !== undefined && !name.endsWith(settings.pattern)) continue;
      const stat = directory.statAt({ symlinkFollow: true }, name);
      if (stat.type === 'regular-file') files.push({ name, size: stat.size });
    }
  } catch (error) {
    if (error instanceof PluginError) throw error;
    throw new PluginError('io', `cannot list directory ${settings.dir}: ${wasiErrorText(error)}`);
  }
  files.sort((a, b) => compareCodePoints(a.name, b.name));
  const prefix = settings.dir === '/' ? '/' : `${settings.dir}/`;
  const splits = [];
  for (const { name, size } of files) {
    let index = 0;
    for (let start = 0n; start < size; start += settings.splitBytes) {
      const length = size - start < settings.splitBytes ? size - start : settings.splitBytes;
      splits.push({ id: `${name}:${index}`, payload: { tag: 'file-range', val: { path: prefix + name, start, length } } });
      index += 1;
    }
  }
  return splits;
}

/** Encodes one split for the snapshot (numbers as JSON integers). */
function splitToJson(split) {
  if (split.payload.tag === 'file-range') {
    const { path, start, length } = split.payload.val;
    return { id: split.id, 'file-range': { path, start: Number(start), length: Number(length) } };
  }
  return { id: split.id, inline: split.payload.val };
}

/** Whether `value` is a JSON integer that fits a WIT `u64` exactly. */
function isU64(value) {
  return Number.isSafeInteger(value) && value >= 0;
}

/**
 * Decodes one split of a snapshot.
 * @throws {Error} when the object does not have the expected shape
 */
function splitFromJson(obj) {
  if (obj === null || typeof obj !== 'object' || typeof obj.id !== 'string') {
    throw new Error('a split needs a string `id`');
  }
  const range = obj['file-range'];
  if (range !== undefined) {
    if (range === null || typeof range !== 'object' || typeof range.path !== 'string' || !isU64(range.start) || !isU64(range.length)) {
      throw new Error(`split "${obj.id}": bad \`file-range\``);
    }
    return { id: obj.id, payload: { tag: 'file-range', val: { path: range.path, start: BigInt(range.start), length: BigInt(range.length) } } };
  }
  if (typeof obj.inline === 'string') return { id: obj.id, payload: { tag: 'inline', val: obj.inline } };
  throw new Error(`split "${obj.id}": needs \`file-range\` or \`inline\``);
}

/**
 * Decodes snapshot bytes into `{ started, queue }`.
 * @throws {PluginError} `corrupt-snapshot` saying what is wrong
 */
function decodeSnapshot(bytes) {
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    const state = JSON.parse(text);
    if (state === null || typeof state !== 'object' || state.format !== SNAPSHOT_FORMAT) {
      throw new Error(`not a ${SNAPSHOT_FORMAT} snapshot`);
    }
    if (state.version !== SNAPSHOT_VERSION) throw new Error(`version ${state.version} is not ${SNAPSHOT_VERSION}`);
    if (typeof state.started !== 'boolean' || !Array.isArray(state.queue)) {
      throw new Error('needs a boolean `started` and a list `queue`');
    }
    return { started: state.started, queue: state.queue.map(splitFromJson) };
  } catch (error) {
    throw new PluginError('corrupt-snapshot', `enumerator snapshot: ${error.message}`);
  }
}

/** One enumerator: the queue of unassigned splits and whether the directory was listed. */
class Enumerator {
  /** Builds an enumerator from parsed settings and an initial state. */
  constructor(settings, parallelism, queue, started) {
    this.settings = settings;
    this.parallelism = parallelism;
    this.queue = queue;
    this.started = started;
    /** Whether `start` was called on this instance (not part of snapshots). */
    this.startCalled = false;
  }

  /** Throws `invalid-state` for a subtask index beyond the parallelism. */
  checkSubtask(subtask) {
    if (subtask >= this.parallelism) {
      throw new PluginError('invalid-state', `subtask ${subtask} is beyond the parallelism ${this.parallelism}`);
    }
  }

  /** WIT `create`: a fresh enumerator; throws `invalid-config` on a bad config. */
  static create(config, parallelism) {
    return new Enumerator(parseSettings(config), parallelism, [], false);
  }

  /** WIT `restore`: an enumerator from `snapshotState` bytes; throws `corrupt-snapshot`. */
  static restore(config, parallelism, snapshot) {
    const settings = parseSettings(config);
    const { started, queue } = decodeSnapshot(snapshot);
    return new Enumerator(settings, parallelism, queue, started);
  }

  /**
   * WIT `start`: lists the directory, unless already started before a snapshot. A second
   * call throws `invalid-state`; listing failures throw `io`.
   */
  start() {
    if (this.startCalled) throw new PluginError('invalid-state', 'start was already called');
    this.startCalled = true;
    if (this.started) {
      log('info', `restored with ${this.queue.length} unassigned splits; not listing again`);
      return;
    }
    this.queue = listSplits(this.settings);
    this.started = true;
    log('info', `listed ${this.settings.dir}: ${this.queue.length} splits`);
  }

  /** WIT `handle-split-request`: assigns the first unassigned split, or says none is left. */
  handleSplitRequest(subtask, _hostname) {
    this.checkSubtask(subtask);
    if (!this.startCalled) throw new PluginError('invalid-state', 'split requested before start');
    if (this.queue.length > 0) {
      assignSplits([[subtask, [this.queue.shift()]]]);
    } else {
      signalNoMoreSplits(subtask);
    }
  }

  /** WIT `add-splits-back`: puts the splits back at the front of the queue, in order. */
  addSplitsBack(splits, subtask) {
    this.queue.unshift(...splits);
    log('debug', `${splits.length} splits came back from subtask ${subtask}`);
  }

  /** WIT `add-reader`: only checks the subtask index; splits are handed out on request. */
  addReader(subtask) {
    this.checkSubtask(subtask);
  }

  /** WIT `supports-batch-snapshot` (static): yes, the state is small and self-contained. */
  static supportsBatchSnapshot() {
    return true;
  }

  /** WIT `snapshot-state`: the queue and the started flag as JSON bytes. */
  snapshotState(_checkpointId) {
    const state = {
      format: SNAPSHOT_FORMAT,
      version: SNAPSHOT_VERSION,
      started: this.started,
      queue: this.queue.map(splitToJson),
    };
    return new TextEncoder().encode(JSON.stringify(state));
  }

  /** WIT `unassigned-splits`: length of the queue, as a BigInt (`u64`). */
  unassignedSplits() {
    return BigInt(this.queue.length);
  }
}

/** The exported interface `coordhost:plugin/split-enumerator@0.1.3`. */
export const splitEnumerator = { Enumerator };
