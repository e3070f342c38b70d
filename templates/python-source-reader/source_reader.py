"""The reading of `{{name}}`: `key=value` log lines ("logfmt"), one record per line:

    level=info status=200 ms=12.5 path=/ cached=true

Each declared column takes the value of the key of its name (a key the table does not declare is
ignored; a declared key the line lacks is null). Column types: bigint, double, varchar, boolean.
A word without `=`, or a value that does not parse as its column's type, is the error value
`invalid-split` naming the split, the file and the line's byte offset. No config keys.

The batch shape: `configure` gets the table's declared schema as an Arrow IPC stream without
batches; each `next_batch` answers an Arrow IPC stream of that schema holding one batch (`None`
when the split is done). `arrow_ipc.py` (a pure-Python codec: componentize-py cannot load
pyarrow) reads and writes them. The host checks every batch.

The rules (coordhost's docs/write-a-plugin.md): a `file-range` split holds the lines that
*start* in its byte range (the split enumerator cuts files anywhere); the same split must always
give the same batches (recovery re-reads splits); expected failures are raised as
`Err(<error variant>)`, any other exception is a trap and fails the task.
"""

import arrow_ipc
import wit_world.exports.source_reader
from componentize_py_types import Err
from wit_world.imports.types import (
    Error_InvalidConfig,
    Error_InvalidSplit,
    Error_Io,
    Error_Other,
    SplitPayload_FileRange,
    SplitPayload_Inline,
)

#: Rows per batch.
BATCH_ROWS = 4096
#: The column types this reader reads.
TYPES = (arrow_ipc.INT64, arrow_ipc.FLOAT64, arrow_ipc.UTF8, arrow_ipc.BOOLEAN)

#: The declared schema, `[(name, type), ...]`, set by `configure`.
_declared = None


def configure(config, schema):
    """Checks the configuration (none) and the declared schema."""
    global _declared
    for key, _ in config:
        raise Err(Error_InvalidConfig(f"unknown key `{key}`; this reader takes no configuration"))
    try:
        fields = arrow_ipc.read_schema(schema)
    except arrow_ipc.CodecError as e:
        raise Err(Error_InvalidConfig(f"the declared schema does not decode: {e}"))
    for name, t in fields:
        if t not in TYPES:
            raise Err(Error_InvalidConfig(
                f"column `{name}`: type {arrow_ipc.type_name(t)} is not one this reader reads "
                "(bigint, double, varchar, boolean)"))
    _declared = fields


def _value(t, text):
    """`text` as a value of type `t`; raises ValueError."""
    if text is None or t == arrow_ipc.UTF8:
        return text
    if t == arrow_ipc.INT64:
        v = int(text)
        if not -(1 << 63) <= v < (1 << 63):
            raise ValueError("out of range")
        return v
    if t == arrow_ipc.FLOAT64:
        return float(text)
    if text in ("true", "false"):
        return text == "true"
    raise ValueError("not `true` or `false`")


def _read_range(path, start, length):
    """`(offset, line)` of the lines that start in `[start, start + length)` of `path`: the line
    holding byte `start - 1` belongs to the split before."""
    lines = []
    with open(path, "rb") as f:
        pos = start
        if start > 0:
            f.seek(start - 1)
            pos = start - 1 + len(f.readline())
        while pos < start + length:
            line = f.readline()
            if not line:
                break
            lines.append((pos, line))
            pos += len(line)
    return lines


class SplitReader(wit_world.exports.source_reader.SplitReader):
    """The reading of one split: its lines, read at `open`, parsed a batch at a time."""

    def __init__(self, where, lines):
        self.where = where
        self.lines = lines
        self.at = 0

    @classmethod
    def open(cls, split):
        if _declared is None:
            raise Err(Error_Other("`open` before `configure`"))
        payload = split.payload
        if isinstance(payload, SplitPayload_FileRange):
            r = payload.value
            where = f"split `{split.id}` ({r.path})"
            try:
                return cls(where, _read_range(r.path, r.start, r.length))
            except OSError as e:
                raise Err(Error_Io(f"{where}: cannot read {r.path}: {e}"))
        if isinstance(payload, SplitPayload_Inline):
            pos, lines = 0, []
            for line in payload.value.encode("utf-8").splitlines(keepends=True):
                lines.append((pos, line))
                pos += len(line)
            return cls(f"split `{split.id}` (inline)", lines)
        raise Err(Error_InvalidSplit(f"split `{split.id}`: a payload this reader does not take"))

    def next_batch(self):
        columns = [[] for _ in _declared]
        rows = 0
        while self.at < len(self.lines) and rows < BATCH_ROWS:
            offset, raw = self.lines[self.at]
            self.at += 1
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise Err(Error_InvalidSplit(f"{self.where}, line at byte {offset}: not UTF-8"))
            if not line.strip():
                continue
            found = {}
            for word in line.split():
                key, eq, value = word.partition("=")
                if not eq:
                    raise Err(Error_InvalidSplit(
                        f"{self.where}, line at byte {offset}: `{word}` is not key=value: `{line}`"))
                found[key] = value
            for values, (name, t) in zip(columns, _declared):
                try:
                    values.append(_value(t, found.get(name)))
                except ValueError:
                    raise Err(Error_InvalidSplit(
                        f"{self.where}, line at byte {offset}: `{name}`: `{found[name]}` is not "
                        f"a {arrow_ipc.type_name(t)}: `{line}`"))
            rows += 1
        if rows == 0:
            return None
        try:
            return arrow_ipc.write_batch([(n, t, v) for (n, t), v in zip(_declared, columns)])
        except (ValueError, OverflowError) as e:
            raise Err(Error_Other(f"{self.where}: cannot write a batch: {e}"))
