// `{{name}}`: a coordhost source reader in JavaScript (world `source-reader-plugin` of
// `wit/reader.wit`, package `coordhost:reader`), made by `coordhost plugin new`.
//
// It reads `key=value` log lines ("logfmt"), one record per line:
//
//     level=info status=200 ms=12.5 path=/ cached=true
//
// Each declared column takes the value of the key of its name (a key the table does not
// declare is ignored; a declared key the line lacks is null). Column types: bigint, double,
// varchar, boolean. A word without `=`, or a value that does not parse as its column's type,
// is the error value `invalid-split` naming the split, the file and the line's byte offset.
// No config keys.
//
// The batch shape: `configure` gets the table's declared schema as an Arrow IPC stream
// without batches; each `nextBatch` answers an Arrow IPC stream of that schema holding one
// batch (`undefined` when the split is done). The `apache-arrow` package reads and writes
// them; build.mjs puts Arrow's single-file build before this file and passes it
// `ARROW_HOLDER`. The host checks every batch.
//
// The rules (coordhost's docs/write-a-plugin.md): a `file-range` split holds the lines that
// *start* in its byte range (the split enumerator cuts files anywhere); the same split must
// always give the same batches (recovery re-reads splits); expected failures are thrown as a
// `ReaderError` (an `error` variant), any other exception is a trap and fails the task. Files
// are read through `wasi:filesystem`: the host preopens each granted folder at its own path.
//
// componentize-js conventions: the exported interface is the object `sourceReader`; its
// resource `split-reader` is the class `SplitReader` (static `open`, method `nextBatch`);
// `list<u8>` is a Uint8Array; `u64` is a BigInt; a variant is `{ tag: 'kebab-name', val }`;
// `option<T>` is the value or `undefined`.

import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

const arrow = ARROW_HOLDER.Arrow;

/** Rows per batch. */
const BATCH_ROWS = 4096;
/** Bytes read from a file at a time. */
const CHUNK = 65536n;

/** The declared schema (an `arrow.Schema`), set by `configure`. */
let declared;

/** An expected failure: the `err` case of the WIT `result`. */
class ReaderError extends Error {
  constructor(tag, message) {
    super(`${tag}: ${message}`);
    this.payload = { tag, val: message };
  }
}

/** The text of an error thrown by an imported WASI function (an `error-code` name). */
function wasiText(error) {
  return error && error.payload !== undefined ? String(error.payload) : String(error);
}

/** What kind of column `type` is, or undefined for one this reader does not read. */
function kindOf(type) {
  if (arrow.DataType.isInt(type) && type.bitWidth === 64 && type.isSigned) return 'bigint';
  if (arrow.DataType.isFloat(type) && type.precision === arrow.Precision.DOUBLE) return 'double';
  if (arrow.DataType.isUtf8(type)) return 'varchar';
  if (arrow.DataType.isBool(type)) return 'boolean';
  return undefined;
}

/** Opens `path` for reading through the granted folder that holds it. */
function openFile(path) {
  let best;
  for (const [descriptor, dir] of getDirectories()) {
    const prefix = dir.endsWith('/') ? dir : `${dir}/`;
    if (path.startsWith(prefix) && (best === undefined || prefix.length > best.prefix.length)) {
      best = { descriptor, prefix };
    }
  }
  if (best === undefined) throw new Error('it is outside the folders granted to the reader');
  return best.descriptor.openAt({ symlinkFollow: true }, path.slice(best.prefix.length), {}, { read: true });
}

/** `[offset, bytes]` of the lines that start in `[start, start + length)` of `path`: the line
 * holding byte `start - 1` belongs to the split before. */
function readRange(path, start, length) {
  const file = openFile(path);
  const end = start + length;
  const from = start > 0n ? start - 1n : 0n;
  const chunks = [];
  let pos = from;
  for (;;) {
    const [data, eof] = file.read(CHUNK, pos);
    const at = pos;
    chunks.push(data);
    pos += BigInt(data.length);
    // Done once a line break at or after byte end-1 was read: the last line is whole.
    if (eof || data.length === 0) break;
    if (pos >= end && data.indexOf(10, Math.max(0, Number(end - 1n - at))) >= 0) break;
  }
  const bytes = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let n = 0;
  for (const c of chunks) {
    bytes.set(c, n);
    n += c.length;
  }
  let i = 0;
  if (start > 0n) {
    const first = bytes.indexOf(10);
    if (first < 0) return [];
    i = first + 1;
  }
  const lines = [];
  while (i < bytes.length && from + BigInt(i) < end) {
    const nl = bytes.indexOf(10, i);
    const stop = nl < 0 ? bytes.length : nl + 1;
    lines.push([from + BigInt(i), bytes.subarray(i, stop)]);
    i = stop;
  }
  return lines;
}

/** `text` (or undefined: the key is absent) as a value of `kind`; null for absent. */
function parseValue(kind, text) {
  if (text === undefined) return null;
  switch (kind) {
    case 'bigint': {
      if (!/^[+-]?[0-9]+$/.test(text)) throw new Error('not a bigint');
      const v = BigInt(text);
      if (v < -(2n ** 63n) || v >= 2n ** 63n) throw new Error('not a bigint');
      return v;
    }
    case 'double': {
      const v = Number(text);
      if (text.trim() === '' || Number.isNaN(v) && text !== 'NaN') throw new Error('not a double');
      return v;
    }
    case 'boolean':
      if (text === 'true' || text === 'false') return text === 'true';
      throw new Error('not `true` or `false`');
    default:
      return text;
  }
}

class SplitReader {
  constructor(where, lines) {
    this.where = where;
    this.lines = lines;
    this.at = 0;
  }

  static open(split) {
    if (declared === undefined) throw new ReaderError('other', '`open` before `configure`');
    const payload = split.payload;
    if (payload.tag === 'file-range') {
      const { path, start, length } = payload.val;
      const where = `split \`${split.id}\` (${path})`;
      try {
        return new SplitReader(where, readRange(path, start, length));
      } catch (e) {
        throw new ReaderError('io', `${where}: cannot read ${path}: ${wasiText(e)}`);
      }
    }
    if (payload.tag === 'inline') {
      const bytes = new TextEncoder().encode(payload.val);
      const lines = [];
      let i = 0;
      while (i < bytes.length) {
        const nl = bytes.indexOf(10, i);
        const stop = nl < 0 ? bytes.length : nl + 1;
        lines.push([BigInt(i), bytes.subarray(i, stop)]);
        i = stop;
      }
      return new SplitReader(`split \`${split.id}\` (inline)`, lines);
    }
    throw new ReaderError('invalid-split', `split \`${split.id}\`: a payload this reader does not take`);
  }

  nextBatch() {
    const fields = declared.fields;
    const kinds = fields.map((f) => kindOf(f.type));
    const columns = fields.map(() => []);
    const decoder = new TextDecoder('utf-8', { fatal: true });
    let rows = 0;
    while (this.at < this.lines.length && rows < BATCH_ROWS) {
      const [offset, raw] = this.lines[this.at];
      this.at += 1;
      const bad = (what) => new ReaderError('invalid-split', `${this.where}, line at byte ${offset}: ${what}`);
      let line;
      try {
        line = decoder.decode(raw).replace(/\r?\n$/, '');
      } catch (e) {
        throw bad('not UTF-8');
      }
      if (line.trim() === '') continue;
      const found = new Map();
      for (const word of line.split(/\s+/).filter((w) => w !== '')) {
        const eq = word.indexOf('=');
        if (eq < 0) throw bad(`\`${word}\` is not key=value: \`${line}\``);
        found.set(word.slice(0, eq), word.slice(eq + 1));
      }
      fields.forEach((f, k) => {
        try {
          columns[k].push(parseValue(kinds[k], found.get(f.name)));
        } catch (e) {
          throw bad(`\`${f.name}\`: \`${found.get(f.name)}\` is ${e.message}: \`${line}\``);
        }
      });
      rows += 1;
    }
    if (rows === 0) return undefined;
    const children = fields.map((f, k) => arrow.vectorFromArray(columns[k], f.type).data[0]);
    const data = arrow.makeData({ type: new arrow.Struct(fields), length: rows, nullCount: 0, children });
    const batch = new arrow.RecordBatch(declared, data);
    return arrow.tableToIPC(new arrow.Table([batch]), 'stream');
  }
}

export const sourceReader = {
  configure(config, schema) {
    for (const [key] of config) {
      throw new ReaderError('invalid-config', `unknown key \`${key}\`; this reader takes no configuration`);
    }
    let parsed;
    try {
      parsed = arrow.tableFromIPC(schema).schema;
    } catch (e) {
      throw new ReaderError('invalid-config', `the declared schema does not decode: ${e}`);
    }
    for (const f of parsed.fields) {
      if (kindOf(f.type) === undefined) {
        throw new ReaderError(
          'invalid-config',
          `column \`${f.name}\`: type ${f.type} is not one this reader reads (bigint, double, varchar, boolean)`,
        );
      }
    }
    declared = parsed;
  },
  SplitReader,
};
