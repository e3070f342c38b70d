// A sample scalar function in JavaScript (world `scalar-function-plugin` of
// `coordhost:function@0.1.0`), built into a WebAssembly component with componentize-js
// (see build.mjs):
//
//   priority(text varchar) -> bigint
//
// The number before the first `-` of an order priority (TPC-H's `o_orderpriority`:
// `1-URGENT` -> 1, `5-LOW` -> 5); null for a null argument or one that does not start with
// digits followed by `-`. Deterministic: the answer depends on the argument only.
//
// One config key, `function`, chooses what the component computes (any other key or value
// is refused as `invalid-config`):
//
//   priority (the default)  as above
//   plus_one                plus_one(x bigint) -> bigint: x + 1, wrapping around at the ends
//                           of the 64-bit range as DataFusion's built-in `+` on `bigint` does;
//                           null gives null. The trivial function of the scalar-function
//                           benchmark (host/benches/functions.rs, `make bench-functions`).
//
// The batch shape is read and written with the `apache-arrow` npm package (pinned in
// package-lock.json). componentize-js takes one source file, so build.mjs prepends Arrow's
// single-file build (`Arrow.es2015.min.js`), which defines `Arrow` on the object passed to it
// as `this`: `arrow` below.
//
// Binding conventions of componentize-js (jco): the exported interface is an object named
// after it in camelCase (`scalarFunction`); `list<u8>` is a Uint8Array; a variant is
// `{ tag: 'kebab-name', val }`; a function returning `result<T, error>` returns T for `ok`
// and throws for `err` (the thrown object's `payload` is the error variant).

const arrow = ARROW_HOLDER.Arrow;

/** An expected failure, lowered into the `err` case of the WIT `result`. */
class FunctionError extends Error {
  /**
   * @param {string} tag case of the WIT `error` variant, e.g. `'invalid-input'`
   * @param {string} message what went wrong
   */
  constructor(tag, message) {
    super(`${tag}: ${message}`);
    this.payload = { tag, val: message };
  }
}

/** Most digits read: any number of up to 15 digits is exact in a double. */
const MAX_DIGITS = 15;
const DASH = 0x2d;
const ZERO = 0x30;

/**
 * The priority of the UTF-8 bytes `bytes[start..end)`: the digits before the first `-`, or
 * null (-1 here) when there are none, more than MAX_DIGITS, or no `-` after them. Reads bytes,
 * not strings: decoding every value into a JavaScript string costs more than the whole rest.
 */
function priorityOf(bytes, start, end) {
  let n = 0;
  let i = start;
  for (; i < end && i - start < MAX_DIGITS; i++) {
    const d = bytes[i] - ZERO;
    if (d < 0 || d > 9) break;
    n = n * 10 + d;
  }
  return i > start && i < end && bytes[i] === DASH ? n : -1;
}

/** The values of config key `function`. */
const FUNCTIONS = ['priority', 'plus_one'];
/** The configured function of this instance (`configure` sets it). */
let chosen = 'priority';

/** The arguments' Arrow table, or an `invalid-input` error unless it is one batch of (`want`). */
function readArguments(bytes, isType, want) {
  let table;
  try {
    table = arrow.tableFromIPC(bytes);
  } catch (e) {
    throw new FunctionError('invalid-input', `the arguments are not an Arrow IPC stream: ${e}`);
  }
  const fields = table.schema.fields;
  if (fields.length !== 1 || !isType(fields[0].type)) {
    const found = fields.map((f) => String(f.type)).join(', ');
    throw new FunctionError('invalid-input', `the arguments are (${found}), expected (${want})`);
  }
  if (table.batches.length !== 1) {
    throw new FunctionError('invalid-input', `the stream holds ${table.batches.length} record batches, expected 1`);
  }
  return table;
}

/** `invoke` of `plus_one`: x + 1 per row; a BigInt64Array wraps what does not fit. */
function plusOne(bytes) {
  const table = readArguments(bytes, (t) => arrow.DataType.isInt(t) && t.bitWidth === 64 && t.isSigned, 'Int64');
  const rows = table.numRows;
  const out = new BigInt64Array(rows);
  const validity = new Uint8Array((rows + 7) >> 3);
  let nulls = 0;
  let row = 0;
  for (const data of table.getChildAt(0).data) {
    const values = data.values;
    if (data.nullCount === 0) {
      for (let i = 0; i < data.length; i++, row++) {
        out[row] = values[i] + 1n;
        validity[row >> 3] |= 1 << (row & 7);
      }
      continue;
    }
    for (let i = 0; i < data.length; i++, row++) {
      if (data.getValid(i)) {
        out[row] = values[i] + 1n;
        validity[row >> 3] |= 1 << (row & 7);
      } else {
        nulls++;
      }
    }
  }
  const result = arrow.makeVector(
    arrow.makeData({ type: new arrow.Int64(), length: rows, nullCount: nulls, nullBitmap: validity, data: out }),
  );
  return arrow.tableToIPC(new arrow.Table({ result }), 'stream');
}

export const scalarFunction = {
  configure(config) {
    for (const [key, value] of config) {
      if (key !== 'function') {
        throw new FunctionError('invalid-config', `unknown key \`${key}\`; the only key is \`function\``);
      }
      if (!FUNCTIONS.includes(value)) {
        throw new FunctionError(
          'invalid-config',
          `unknown function \`${value}\` (config key \`function\`); expected one of: ${FUNCTIONS.join(', ')}`,
        );
      }
      chosen = value;
    }
  },

  signature() {
    if (chosen === 'plus_one') {
      return { arguments: [{ tag: 'int64' }], returns: { tag: 'int64' }, deterministic: true };
    }
    return { arguments: [{ tag: 'utf8' }], returns: { tag: 'int64' }, deterministic: true };
  },

  invoke(bytes) {
    if (chosen === 'plus_one') {
      return plusOne(bytes);
    }
    const table = readArguments(bytes, (t) => arrow.DataType.isUtf8(t), 'Utf8');
    const rows = table.numRows;
    const out = new BigInt64Array(rows);
    const validity = new Uint8Array((rows + 7) >> 3);
    let nulls = 0;
    let row = 0;
    for (const data of table.getChildAt(0).data) {
      const offsets = data.valueOffsets;
      const bytes = data.values;
      for (let i = 0; i < data.length; i++, row++) {
        const p = data.getValid(i) ? priorityOf(bytes, offsets[i], offsets[i + 1]) : -1;
        if (p < 0) {
          nulls++;
        } else {
          out[row] = BigInt(p);
          validity[row >> 3] |= 1 << (row & 7);
        }
      }
    }
    const result = arrow.makeVector(
      arrow.makeData({ type: new arrow.Int64(), length: rows, nullCount: nulls, nullBitmap: validity, data: out }),
    );
    return arrow.tableToIPC(new arrow.Table({ result }), 'stream');
  },
};
