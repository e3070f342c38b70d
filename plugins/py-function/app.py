"""A sample scalar function in Python (world `scalar-function-plugin` of `coordhost:function@0.1.0`).

`net_price(price decimal(15,2), discount decimal(15,2)) -> decimal(15,2)`: the price after its
discount, `price * (1 - discount)`, rounded half away from zero to the cent (TPC-H's
`l_extendedprice * (1 - l_discount)`). A null argument gives null, and so does a result too
large for `decimal(15,2)` (a value the function has no answer for is null, not an error, which
would fail the whole query). Deterministic: the answer depends on the arguments only.

One config key, `function`, chooses what the component computes (any other key or value is
refused as `invalid-config`):

- `net_price` (the default): as above.
- `plus_one`: `plus_one(x bigint) -> bigint`, `x + 1`, wrapping around at the ends of the
  64-bit range as DataFusion's built-in `+` on `bigint` does (`9223372036854775807 + 1` is
  `-9223372036854775808`); null gives null. The trivial function of the scalar-function
  benchmark (host/benches/functions.rs, `make bench-functions`), which sets it beside the same
  expression built into DataFusion.

Built by `make plugins` (plugins/languages.mk) with componentize-py, with the pure-Python Arrow
IPC codec of plugins/py-arrow/arrow_ipc.py on the module path: componentize-py cannot load
native extensions such as pyarrow. componentize-py looks up, in this module, one class per
exported interface, named after it (`scalar-function` -> `ScalarFunction`).
"""

import arrow_ipc
import wit_world.exports
from componentize_py_types import Err
from wit_world.imports import types

MONEY = arrow_ipc.decimal128(15, 2)
# Unscaled values of a decimal(15,2) are below 10**15 in magnitude.
MONEY_LIMIT = 10**15
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# The values of config key `function`.
FUNCTIONS = ("net_price", "plus_one")
# The configured function of this instance (`configure` sets it).
chosen = "net_price"


def net_cents(price, discount):
    """`price * (100 - discount) / 100` in cents (both unscaled at scale 2), rounded half away
    from zero; None when it does not fit a decimal(15,2)."""
    p = price * (100 - discount)
    q, r = divmod(abs(p), 100)
    if 2 * r >= 100:
        q += 1
    if q >= MONEY_LIMIT:
        return None
    return -q if p < 0 else q


def plus_one(arguments):
    """`invoke` of `plus_one`: x + 1 per row, wrapping at the top of the 64-bit range."""
    try:
        (xs,), _rows = arrow_ipc.read_arguments(arguments, [arrow_ipc.INT64])
    except arrow_ipc.CodecError as e:
        raise Err(types.Error_InvalidInput(str(e)))
    out = [None if x is None else (x + 1 if x != INT64_MAX else INT64_MIN) for x in xs]
    return arrow_ipc.write_result(arrow_ipc.INT64, out)


class ScalarFunction(wit_world.exports.ScalarFunction):
    """The exported `coordhost:function/scalar-function` interface."""

    def configure(self, config):
        global chosen
        for key, value in config:
            if key != "function":
                raise Err(types.Error_InvalidConfig(f"unknown key `{key}`; the only key is `function`"))
            if value not in FUNCTIONS:
                raise Err(types.Error_InvalidConfig(
                    f"unknown function `{value}` (config key `function`); expected one of: "
                    + ", ".join(FUNCTIONS)
                ))
            chosen = value

    def signature(self):
        if chosen == "plus_one":
            bigint = types.DataType_Int64()
            return types.FunctionSignature(arguments=[bigint], returns=bigint, deterministic=True)
        money = types.DataType_Decimal128(types.DecimalType(precision=15, scale=2))
        return types.FunctionSignature(arguments=[money, money], returns=money, deterministic=True)

    def invoke(self, arguments):
        if chosen == "plus_one":
            return plus_one(arguments)
        try:
            (price, discount), _rows = arrow_ipc.read_arguments(arguments, [MONEY, MONEY])
        except arrow_ipc.CodecError as e:
            raise Err(types.Error_InvalidInput(str(e)))
        out = [
            None if p is None or d is None else net_cents(p, d)
            for p, d in zip(price, discount)
        ]
        try:
            return arrow_ipc.write_result(MONEY, out)
        except ValueError as e:
            raise Err(types.Error_Other(str(e)))
