// `{{name}}`: a coordhost scalar function in JavaScript (world `scalar-function-plugin` of
// `wit/function.wit`, package `coordhost:function`), made by `coordhost plugin new`.
//
//   {{crate}}(x double, factor double) -> double
//
// `x * factor + offset`, null when either argument is null. Config key (the `config` table
// of the function's `[functions.NAME]` entry in the job file): `offset` (a number, default 0).
//
// The batch shape: `invoke` gets an Arrow IPC stream of one batch with one column per
// argument (`arg0`, `arg1`, of the declared types) and answers an Arrow IPC stream of one
// column of the declared result type, in one batch of the same number of rows; the host
// checks the answer. The `apache-arrow` package reads and writes it; build.mjs puts Arrow's
// single-file build before this file and passes it `ARROW_HOLDER` (componentize-js takes one
// source file).
//
// The rules (coordhost's docs/write-a-plugin.md): the same arguments must always give the
// same result (recovery re-runs tasks); a batch of another schema gets the error value
// `invalid-input` (throw a `FunctionError`), never another exception (that is a trap); a
// value the function has no answer for gives null, not an error, since one error fails the
// whole query.
//
// componentize-js conventions: the exported interface is the object `scalarFunction`;
// `list<u8>` is a Uint8Array; a variant is `{ tag: 'kebab-name', val }`; throwing an object
// whose `payload` is an `error` variant returns that error.

const arrow = ARROW_HOLDER.Arrow;

/** The `offset` config key; `configure` runs once on each new instance, first. */
let offset = 0;

/** An expected failure: the `err` case of the WIT `result`. */
class FunctionError extends Error {
  constructor(tag, message) {
    super(`${tag}: ${message}`);
    this.payload = { tag, val: message };
  }
}

export const scalarFunction = {
  configure(config) {
    for (const [key, value] of config) {
      if (key !== 'offset') throw new FunctionError('invalid-config', `unknown key \`${key}\``);
      offset = Number(value);
      if (value.trim() === '' || !Number.isFinite(offset)) {
        throw new FunctionError('invalid-config', `\`offset\`: \`${value}\` is not a number`);
      }
    }
  },

  signature() {
    return {
      arguments: [{ tag: 'float64' }, { tag: 'float64' }],
      returns: { tag: 'float64' },
      // Recovery re-runs tasks: the host refuses a function that says false here.
      deterministic: true,
    };
  },

  invoke(bytes) {
    let table;
    try {
      table = arrow.tableFromIPC(bytes);
    } catch (e) {
      throw new FunctionError('invalid-input', `not an Arrow IPC stream: ${e}`);
    }
    const types = table.schema.fields.map((f) => f.type);
    if (types.length !== 2 || !types.every((t) => arrow.DataType.isFloat(t) && t.precision === arrow.Precision.DOUBLE)) {
      throw new FunctionError('invalid-input', `the arguments are (${types.join(', ')}), expected (Float64, Float64)`);
    }
    if (table.batches.length !== 1) {
      throw new FunctionError('invalid-input', `${table.batches.length} record batches, expected 1`);
    }
    const x = table.getChildAt(0);
    const factor = table.getChildAt(1);
    const out = new Float64Array(table.numRows);
    const valid = new Array(table.numRows);
    for (let i = 0; i < table.numRows; i++) {
      const a = x.get(i);
      const b = factor.get(i);
      valid[i] = a !== null && b !== null;
      out[i] = valid[i] ? a * b + offset : 0;
    }
    const result = arrow.vectorFromArray(
      Array.from(out, (v, i) => (valid[i] ? v : null)),
      new arrow.Float64(),
    );
    return arrow.tableToIPC(new arrow.Table({ result }), 'stream');
  },
};
