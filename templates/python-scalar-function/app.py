"""`{{name}}`: a coordhost scalar function in Python (world `scalar-function-plugin` of
`wit/function.wit`, package `coordhost:function`), made by `coordhost plugin new`.

`{{crate}}(x double, factor double) -> double`: `x * factor + offset`, null when either
argument is null. Config key (the `config` table of the function's `[functions.NAME]` entry
in the job file): `offset` (a number, default 0).

The batch shape: `invoke` gets an Arrow IPC stream of one batch with one column per argument
(`arg0`, `arg1`, of the declared types) and answers an Arrow IPC stream of one column of the
declared result type, in one batch of the same number of rows. The host checks the answer.
`arrow_ipc.py` reads and writes that shape in pure Python (componentize-py cannot load
pyarrow): decimals come as unscaled ints, nulls as None.

The rules (coordhost's docs/write-a-plugin.md): the same arguments must always give the same
result (recovery re-runs tasks); a batch of another schema gets the error value
`invalid-input`, never an exception that escapes (that is a trap); a value the function has
no answer for gives None (null), not an error, since one error fails the whole query.

componentize-py looks up, in this module, one class per exported interface, named after it
(`scalar-function` -> `ScalarFunction`).
"""

import arrow_ipc
import wit_world.exports
from componentize_py_types import Err
from wit_world.imports import types

ARGUMENTS = [arrow_ipc.FLOAT64, arrow_ipc.FLOAT64]
RESULT = arrow_ipc.FLOAT64

# The `offset` config key; `configure` runs once on each new instance, first.
offset = 0.0


class ScalarFunction(wit_world.exports.ScalarFunction):
    """The exported `coordhost:function/scalar-function` interface."""

    def configure(self, config):
        global offset
        for key, value in config:
            if key != "offset":
                raise Err(types.Error_InvalidConfig(f"unknown key `{key}`"))
            try:
                offset = float(value)
            except ValueError:
                raise Err(types.Error_InvalidConfig(f"`offset`: `{value}` is not a number"))

    def signature(self):
        return types.FunctionSignature(
            arguments=[types.DataType_Float64(), types.DataType_Float64()],
            returns=types.DataType_Float64(),
            # Recovery re-runs tasks: the host refuses a function that says False here.
            deterministic=True,
        )

    def invoke(self, arguments):
        try:
            (x, factor), _rows = arrow_ipc.read_arguments(arguments, ARGUMENTS)
        except arrow_ipc.CodecError as e:
            raise Err(types.Error_InvalidInput(str(e)))
        result = [None if a is None or b is None else a * b + offset for a, b in zip(x, factor)]
        return arrow_ipc.write_result(RESULT, result)
